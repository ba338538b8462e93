"""MPCK-means, LCVQE and TVClust variational: the [TV] baselines (in-memory references)."""

from __future__ import annotations

import numpy as np
import pytest

import dclust
from dclust.constraints import ConstraintGraph
from dclust.errors import InvalidDataError, InvalidParameterError
from dclust.kernels.constrained import (
    lcvqe_assign,
    lcvqe_assign_numpy,
    mpck_sweep,
    mpck_sweep_numpy,
    symmetric_links,
)

REFERENCES = [
    lambda k: dclust.MPCKMeans(n_clusters=k, random_state=0),
    lambda k: dclust.LCVQE(n_clusters=k, random_state=0),
    lambda k: dclust.TVClustVariational(init_clusters=k, random_state=0),
]


def _iris():
    from sklearn.datasets import load_iris

    return load_iris(return_X_y=True)


# ---- kernels: numba == numpy twin, hand-checked cases -------------------------------------------------------------


def _random_problem(seed, n=40, d=3, k=4, n_links=30):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    C = rng.normal(size=(k, d))
    i = rng.integers(0, n, n_links)
    j = rng.integers(0, n, n_links)
    keep = i < j
    return X, C, i[keep].astype(np.int64), j[keep].astype(np.int64), rng.random(int(keep.sum())) < 0.5, rng


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mpck_sweep_equals_its_numpy_twin(seed):
    X, C, i, j, must, rng = _random_problem(seed)
    A = rng.uniform(0.5, 2.0, size=C.shape)
    indptr, nbr, is_must = symmetric_links(X.shape[0], i, j, must)
    order = rng.permutation(X.shape[0]).astype(np.int64)
    labels0 = rng.integers(0, C.shape[0], X.shape[0]).astype(np.int64)
    a, b = labels0.copy(), labels0.copy()
    maxsep = A @ ((X.max(0) - X.min(0)) ** 2)
    logdet = np.log(A).sum(axis=1)
    ca = mpck_sweep(X, C, A, logdet, maxsep, order, indptr, nbr, is_must, a)
    cb = mpck_sweep_numpy(X, C, A, logdet, maxsep, order, indptr, nbr, is_must, b)
    assert ca == cb
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_lcvqe_assign_equals_its_numpy_twin(seed):
    X, C, i, j, must, _ = _random_problem(seed)
    k, d = C.shape
    out = []
    for fn in (lcvqe_assign, lcvqe_assign_numpy):
        labels, sums, counts = np.zeros(X.shape[0], np.int64), np.zeros((k, d)), np.zeros(k)
        cost = fn(X, C, i, j, must, labels, sums, counts)
        out.append((cost, labels, sums, counts))
    assert out[0][0] == pytest.approx(out[1][0], rel=1e-12)
    for a, b in zip(out[0][1:], out[1][1:]):
        np.testing.assert_allclose(a, b, rtol=1e-12)


def test_lcvqe_must_link_hand_case():
    # centres 0 and 10; rows 4 and 6 must-linked. Both at 0: (16 + 36)/2 = 26; both at 10: (36 + 16)/2 = 26;
    # keep: (16 + 16 + 36 + 36)/2 = 52. The tie goes to "both in a" (the cluster of the first row, 0).
    X = np.array([[4.0], [6.0]])
    C = np.array([[0.0], [10.0]])
    labels, sums, counts = np.zeros(2, np.int64), np.zeros((2, 1)), np.zeros(2)
    cost = lcvqe_assign(X, C, np.array([0]), np.array([1]), np.array([True]), labels, sums, counts)
    np.testing.assert_array_equal(labels, [0, 0])
    np.testing.assert_array_equal(counts, [2, 0])
    assert cost == pytest.approx(0.5 * (16 + 36))


def test_lcvqe_cannot_link_moves_the_farther_row():
    # both rows nearest to centre 0 (at 0); row 1 (x = 3) is farther and goes to its nearest other centre (10)
    X = np.array([[1.0], [3.0]])
    C = np.array([[0.0], [10.0], [-20.0]])
    labels, sums, counts = np.zeros(2, np.int64), np.zeros((3, 1)), np.zeros(3)
    lcvqe_assign(X, C, np.array([0]), np.array([1]), np.array([False]), labels, sums, counts)
    np.testing.assert_array_equal(labels, [0, 1])


def test_mpck_sweep_hand_case():
    # A = I, logdet 0: row 1 (x = 6) alone goes to centre 10 (16 < 36); must-linked to row 0 (label 0, x = 4) it
    # pays f_M = (6 - 4)^2 = 4 for cluster 1: 16 + 4 = 20 < 36, still cluster 1. Row at 5.5: 20.25 + 2.25 = 22.5 vs
    # 30.25 -> cluster 1; with a second must-link to another row of cluster 0 at x = -4: 20.25 + 2.25 + 90.25 >
    # 30.25 -> cluster 0.
    X = np.array([[4.0], [5.5], [-4.0]])
    C = np.array([[0.0], [10.0]])
    A = np.ones((2, 1))
    args = (X, C, A, np.zeros(2), np.full(2, 1e9))
    for links, expected in [(([0], [1], [True]), 1), (([0, 1], [1, 2], [True, True]), 0)]:
        i, j, m = (np.array(v) for v in links)
        indptr, nbr, is_must = symmetric_links(3, i, j, m)
        labels = np.array([0, 1, 0], dtype=np.int64)
        mpck_sweep(*args, np.array([1], dtype=np.int64), indptr, nbr, is_must, labels)
        assert labels[1] == expected


# ---- estimators ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("make", REFERENCES)
def test_noiseless_links_are_honoured_more_than_without_them(make):
    X, y = _iris()
    G = ConstraintGraph.from_labels_sample(y, 0.05, rng=0)
    i, j, s = G.pairs()
    free = make(3).fit(X).labels_
    linked = make(3).fit(X, constraints=G).labels_

    def violated(z):
        same = z[i] == z[j]
        return int(((s > 0) & ~same).sum() + ((s < 0) & same).sum())

    assert violated(linked) < violated(free)
    assert violated(linked) <= 0.05 * i.size
    assert dclust.metrics.adjusted_rand_score(y, linked) > dclust.metrics.adjusted_rand_score(y, free)


@pytest.mark.parametrize("make", REFERENCES)
def test_size_guard_refuses_large_input_before_reading_it(make):
    import dask.array as da

    X = da.zeros((100_001, 2), chunks=(50_000, 2))
    est = make(2).set_params(max_samples=100_000)
    with pytest.raises(InvalidDataError, match="max_samples"):
        est.fit(X)


@pytest.mark.parametrize("make", REFERENCES)
def test_constraints_of_the_wrong_size_or_type(make):
    X, _ = _iris()
    with pytest.raises(InvalidDataError, match="150 rows"):
        make(3).fit(X, constraints=ConstraintGraph.from_pairs([0], [1], [True], n_samples=10))
    with pytest.raises(InvalidParameterError, match="ConstraintGraph"):
        make(3).fit(X, constraints=[(0, 1)])


def test_mpckmeans_learns_a_metric_that_downweights_a_noise_feature():
    rng = np.random.default_rng(0)
    y = np.repeat([0, 1], 60)
    X = np.column_stack([y * 4.0 + rng.normal(0, 0.5, 120), rng.normal(0, 6.0, 120)])
    G = ConstraintGraph.from_labels_sample(y, 0.02, rng=0)
    m = dclust.MPCKMeans(n_clusters=2, random_state=0).fit(X, constraints=G)
    assert (m.metric_weights_[:, 0] > 10 * m.metric_weights_[:, 1]).all()
    assert dclust.metrics.adjusted_rand_score(y, m.labels_) > 0.8
    plain = dclust.MPCKMeans(n_clusters=2, metric="none", random_state=0).fit(X)
    assert np.array_equal(plain.metric_weights_, np.ones((2, 2)))
    assert (m.predict(X) == m.labels_).mean() > 0.9  # predict ignores the links


def test_mpckmeans_objective_never_increases_at_fixed_metric():
    X, y = _iris()
    G = ConstraintGraph.from_labels_sample(y, 0.03, rng=1, p=0.9)
    m = dclust.MPCKMeans(n_clusters=3, metric="none", random_state=0).fit(X, constraints=G)
    h = np.array(m.objective_history_)
    assert (np.diff(h) <= 1e-9 * np.abs(h[:-1])).all()


def test_tvclust_variational_learns_link_reliability():
    X, y = _iris()
    clean = dclust.TVClustVariational(init_clusters=3, random_state=0).fit(
        X, constraints=ConstraintGraph.from_labels_sample(y, 0.05, rng=0))
    noisy = dclust.TVClustVariational(init_clusters=3, random_state=0).fit(
        X, constraints=ConstraintGraph.from_labels_sample(y, 0.05, rng=0, p=0.8))
    assert clean.p_ > noisy.p_ and clean.q_ > noisy.q_
    assert clean.n_clusters_ == 3 and dclust.metrics.adjusted_rand_score(y, clean.labels_) > 0.95
    assert clean.covariances_.shape == (3, 4, 4)
    assert (np.linalg.eigvalsh(clean.covariances_) > 0).all()


def test_tvclust_variational_hard_links_with_fixed_p_q():
    X = np.array([[0.0, 0.0], [0.1, 0.0], [0.2, 0.1], [5.0, 5.0], [5.1, 5.0], [5.2, 5.1]])
    G = ConstraintGraph.from_pairs([0, 2], [3, 5], [True, True], n_samples=6)
    m = dclust.TVClustVariational(init_clusters=2, p=1.0, q=1.0, random_state=0).fit(X, constraints=G)
    assert m.labels_[0] == m.labels_[3] and m.labels_[2] == m.labels_[5]
