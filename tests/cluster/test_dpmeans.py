"""DP-means: the properties of docs/algorithms.md 1.7 (DP1-DP8) and OCC == serial."""

import dask.array as da
import numpy as np
import pytest

import dclust
from dclust.errors import ConvergenceWarning, InvalidParameterError
from dclust.kernels.dpmeans import dpmeans_reference


def _fit(X, chunks=None, **kw):
    kw.setdefault("random_state", 0)
    data = X if chunks is None else da.from_array(X, chunks=(chunks, -1))
    return dclust.DPMeans(**kw).fit(data)


@pytest.mark.parametrize(
    "rows,prefix_size,max_proposals,init",
    [(3000, 1000, 3, "mean"), (700, 0, 5, "empty"), (700, 50, 4096, "mean"), (256, 1000, 3, "empty"),
     (256, 0, 5, "mean")],
)
def test_dp8_occ_equals_serial_dpmeans_on_serial_order(blobs, rows, prefix_size, max_proposals, init):
    X, _ = blobs
    m = _fit(X, rows, lam=30.0, init=init, prefix_size=prefix_size, max_proposals=max_proposals)
    z, centers, history = dpmeans_reference(X, 30.0, m.serial_order_, init=init)
    np.testing.assert_array_equal(m.predict(X), z)
    np.testing.assert_allclose(m.cluster_centers_, centers, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(m.objective_history_, history, rtol=1e-10)
    assert m.n_iter_ == len(history)
    for order in m.serial_order_:
        np.testing.assert_array_equal(np.sort(order), np.arange(len(X)))


def test_dp1_objective_is_monotone(blobs):
    X, _ = blobs
    m = _fit(X, 500, lam=20.0)
    J, A = m.objective_history_, m.assignment_objective_history_
    for a, b in zip(J, J[1:]):
        assert b <= a * (1 + 1e-12)
    for prev, label_pass in zip(J, A[1:]):
        assert label_pass <= prev * (1 + 1e-12)  # a label pass does not raise the objective
    for label_pass, after in zip(A, J):
        assert after <= label_pass * (1 + 1e-12)  # nor does a mean update


def test_dp2_fixed_point_at_convergence(blobs):
    X, _ = blobs
    m = _fit(X, 800, lam=25.0)
    assert m.converged_
    D = ((X[:, None, :] - m.cluster_centers_[None]) ** 2).sum(axis=2)
    z = m.predict(X)
    assert (D.min(axis=1) <= m.lam_).all()
    np.testing.assert_array_equal(z, D.argmin(axis=1))
    for k in range(m.n_clusters_):
        np.testing.assert_allclose(m.cluster_centers_[k], X[z == k].mean(axis=0), rtol=1e-10)
    assert np.bincount(z, minlength=m.n_clusters_).min() > 0
    sse = D.min(axis=1).sum()
    assert m.objective_ == pytest.approx(sse + m.lam_ * m.n_clusters_, rel=1e-10)


def test_dp3_large_lam_gives_the_mean(blobs):
    X, _ = blobs
    lam = ((X - X.mean(axis=0)) ** 2).sum(axis=1).max()
    m = _fit(X, 1000, lam=lam)
    assert m.n_clusters_ == 1
    np.testing.assert_allclose(m.cluster_centers_[0], X.mean(axis=0), rtol=1e-12)


def test_dp4_tiny_lam_gives_one_cluster_per_distinct_point():
    rng = np.random.default_rng(2)
    P = rng.uniform(0, 10, size=(40, 2))
    X = np.vstack([P, P[:10]])  # duplicates share a cluster
    d2 = ((P[:, None] - P[None]) ** 2).sum(axis=2)
    lam = d2[d2 > 0].min() / 5
    m = _fit(X, 16, lam=lam, init="empty")
    assert m.n_clusters_ == 40
    assert m.objective_ == pytest.approx(lam * 40, rel=1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_dp5_separated_blobs_are_recovered_exactly_in_two_passes(seed):
    rng = np.random.default_rng(seed)
    centers = np.array([[0.0, 0.0], [20.0, 0.0], [0.0, 20.0], [20.0, 20.0]])
    y = rng.integers(0, 4, size=400)
    X = centers[y] + rng.uniform(-1, 1, size=(400, 2))
    m = _fit(X, 64, lam=9.0, init="empty", random_state=seed)
    assert dclust.metrics.adjusted_rand_score(y, m.predict(X)) == 1.0
    assert m.n_iter_ == 2


def test_dp6_both_inits_satisfy_the_fixed_point(blobs):
    X, _ = blobs
    for init in ("mean", "empty"):
        m = _fit(X, 1000, lam=40.0, init=init)
        D = ((X[:, None, :] - m.cluster_centers_[None]) ** 2).sum(axis=2)
        assert (D.min(axis=1) <= m.lam_).all()


def test_lam_heuristic_matches_a_numpy_furthest_first(blobs):
    X, _ = blobs
    k = 6
    T = [X.mean(axis=0)]
    lam = None
    for _ in range(k):
        d = np.min([((X - t) ** 2).sum(axis=1) for t in T], axis=0)
        i = int(np.argmax(d))
        lam = d[i]
        T.append(X[i])
    m = _fit(X, 512, n_clusters=k)
    assert m.lam_ == pytest.approx(lam, rel=1e-12)


def test_random_state_fixes_the_result_and_the_order(blobs):
    X, _ = blobs
    a = _fit(X, 500, lam=20.0, random_state=5)
    b = _fit(X, 500, lam=20.0, random_state=5)
    np.testing.assert_array_equal(a.cluster_centers_, b.cluster_centers_)
    for oa, ob in zip(a.serial_order_, b.serial_order_):
        np.testing.assert_array_equal(oa, ob)


def test_max_iter_warns_when_not_converged(blobs):
    X, _ = blobs
    with pytest.warns(ConvergenceWarning):
        m = _fit(X, 500, lam=5.0, max_iter=1)
    assert not m.converged_ and m.n_iter_ == 1


def test_lam_and_n_clusters_are_exclusive(blobs):
    X, _ = blobs
    with pytest.raises(InvalidParameterError, match="exactly one"):
        dclust.DPMeans().fit(X)
    with pytest.raises(InvalidParameterError, match="exactly one"):
        dclust.DPMeans(lam=1.0, n_clusters=3).fit(X)
