"""TVClust reference sampler (ALGORITHMS.md 5.6): eq. 13 with E-TV1/E-TV2, conjugate pieces, seeded
reproducibility, sensible clusterings with links, hard links, and bad input."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import multivariate_t
from sklearn.metrics import adjusted_rand_score

from dclust.cluster._tvclust import TVClust
from dclust.constraints import ConstraintGraph
from dclust.errors import InfeasibleConstraintsError, InvalidDataError, InvalidParameterError
from dclust.kernels.tvclust import LinkLists, NIWPrior, log_predictive, option_log_weights


@pytest.fixture(scope="module")
def three_blobs():
    rng = np.random.default_rng(0)
    centers = np.array([[0.0, 0.0], [5.0, 0.0], [0.0, 5.0]])
    y = rng.integers(0, 3, 240)
    X = centers[y] + rng.normal(size=(240, 2))
    i, j = rng.integers(0, 240, 80), rng.integers(0, 240, 80)
    G = ConstraintGraph.from_pairs(i, j, y[i] == y[j], n_samples=240)
    return X, y, G


def _satisfied(labels, G):
    a, b, s = G.pairs()
    return np.where(s > 0, labels[a] == labels[b], labels[a] != labels[b])


def test_conditional_follows_eq13_with_the_corrected_link_likelihood():
    """Ratios between options equal n_k p(x|θ_k) (p/(1−q))^f ((1−p)/q)^s, and a new cluster has factor 1 (E-TV2)."""
    # point 0 is must-linked to 1, 2 (clusters 0, 1) and cannot-linked to 3 (cluster 0)
    links = LinkLists.from_pairs(5, [0, 0, 0], [1, 2, 3], [True, True, False])
    z = np.array([9, 0, 1, 0, 1], dtype=np.int64)  # z[0] is ignored (point 0 is removed)
    counts = np.array([2.0, 2.0])
    LL = np.log(np.array([[0.3, 0.05]] + [[0.1, 0.1]] * 4))
    log_new = np.log(np.full(5, 0.02))
    p, q = 0.8, 0.7
    logw = np.empty(3)
    f, s = np.zeros(2, np.int64), np.zeros(2, np.int64)
    option_log_weights(0, z, counts, 2, LL, log_new, links.indptr.astype(np.int64), links.nbr.astype(np.int64),
                       links.must, np.log(p), np.log1p(-p), np.log(q), np.log1p(-q), logw, f, s)
    w = np.exp(logw - logw[2])
    expected = np.array([2 * 0.3 * (p / (1 - q)) * ((1 - p) / q), 2 * 0.05 * (p / (1 - q)), 0.02]) / 0.02
    np.testing.assert_allclose(w, expected, rtol=1e-12)
    assert not f.any() and not s.any()
    # hard cannot-links (p = 1): cluster 0 holds a cannot-linked point and is impossible; new stays finite
    option_log_weights(0, z, counts, 2, LL, log_new, links.indptr.astype(np.int64), links.nbr.astype(np.int64),
                       links.must, 0.0, -np.inf, np.log(q), np.log1p(-q), logw, f, s)
    assert logw[0] == -np.inf and np.isfinite(logw[1]) and np.isfinite(logw[2])


def test_prior_predictive_is_the_student_t():
    rng = np.random.default_rng(1)
    D = 3
    A = rng.normal(size=(D, D))
    prior = NIWPrior(rng.normal(size=D), 0.5, D + 3.0, A @ A.T + np.eye(D))
    X = rng.normal(size=(10, D)) * 2
    df = prior.dof - D + 1
    ref = multivariate_t(loc=prior.mean, shape=prior.scale * (prior.kappa + 1) / (prior.kappa * df), df=df)
    np.testing.assert_allclose(log_predictive(X, prior), ref.logpdf(X), rtol=1e-10)
    # the posterior after all points at once equals two sequential updates
    a, b = X[:4], X[4:]
    scat = lambda P: (P - P.mean(0)).T @ (P - P.mean(0))  # noqa: E731
    both = prior.posterior(10, X.mean(0), scat(X))
    seq = prior.posterior(4, a.mean(0), scat(a)).posterior(6, b.mean(0), scat(b))
    for u, v in zip((both.mean, both.kappa, both.dof, both.scale), (seq.mean, seq.kappa, seq.dof, seq.scale)):
        np.testing.assert_allclose(u, v, rtol=1e-12)


def test_same_seed_same_chain(three_blobs):
    X, _, G = three_blobs
    a = TVClust(n_sweeps=8, random_state=3).fit(X, constraints=G)
    b = TVClust(n_sweeps=8, random_state=3).fit(X, constraints=G)
    np.testing.assert_array_equal(a.labels_, b.labels_)
    np.testing.assert_array_equal(a.cluster_centers_, b.cluster_centers_)
    assert a.objective_history_ == b.objective_history_ and a.p_ == b.p_
    c = TVClust(n_sweeps=8, random_state=4).fit(X, constraints=G)
    assert c.objective_history_ != a.objective_history_


def test_links_give_a_sensible_clustering(three_blobs):
    X, y, G = three_blobs
    scores, sat = [], []
    for seed in range(3):
        tv = TVClust(n_sweeps=40, random_state=seed).fit(X, constraints=G)
        scores.append(adjusted_rand_score(y, tv.labels_))
        sat.append(_satisfied(tv.labels_, G).mean())
        assert len(tv.objective_history_) == len(tv.n_clusters_history_) == 40
        assert tv.cluster_sizes_.sum() == len(X) and tv.n_clusters_ == len(tv.cluster_centers_)
        assert 0.5 < tv.p_ <= 1 and 0.5 < tv.q_ <= 1  # all links are correct: both probabilities are high
    assert min(scores) > 0.85, scores
    assert min(sat) > 0.9, sat
    np.testing.assert_array_equal(tv.predict(X[:5]), tv.predict(X)[:5])
    assert (tv.predict(X) == tv.labels_).mean() > 0.9


def test_hard_links_hold_in_every_sample(three_blobs):
    """p = q = 1: the links are constraints; ones that contradict the geometry hold too."""
    X, y, _ = three_blobs
    a0, a1 = np.flatnonzero(y == 0)[:2]
    b0 = np.flatnonzero(y == 1)[0]
    G = ConstraintGraph.from_pairs([a0, a0], [a1, b0], [False, True], n_samples=len(y))
    tv = TVClust(p=1.0, q=1.0, n_sweeps=10, random_state=0).fit(X, constraints=G)
    assert _satisfied(tv.labels_, G).all()
    assert tv.p_ == 1.0 and tv.q_ == 1.0


def test_bad_input(three_blobs):
    X, _, G = three_blobs
    with pytest.raises(InvalidDataError, match="max_samples=100"):
        TVClust(max_samples=100).fit(X)
    with pytest.raises(InvalidDataError, match="rows"):
        TVClust().fit(X[:50], constraints=G)
    with pytest.raises(InvalidParameterError, match="ConstraintGraph"):
        TVClust().fit(X, constraints=np.zeros((3, 2)))
    bad = X.copy()
    bad[7, 0] = np.inf
    with pytest.raises(InvalidDataError, match="row 7"):
        TVClust().fit(bad)
    with pytest.raises(InvalidParameterError, match="p_prior"):
        TVClust(p_prior=(1.0, -1.0)).fit(X)
    with pytest.raises(InvalidParameterError, match="q"):
        TVClust(q=0.0).fit(X)
    with pytest.raises(InvalidDataError, match="prior_dof"):
        TVClust(prior_dof=0.5).fit(X)
    contradiction = ConstraintGraph.from_pairs([0, 1, 0], [1, 2, 2], [True, True, False], n_samples=len(X),
                                               check_feasible=False)
    with pytest.raises(InfeasibleConstraintsError, match="cannot-link"):
        TVClust(p=1.0, q=1.0).fit(X, constraints=contradiction)
    TVClust(n_sweeps=2, random_state=0).fit(X, constraints=contradiction)  # noisy links: allowed when soft
