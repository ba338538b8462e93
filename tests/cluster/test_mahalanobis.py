"""Covariance-penalised (Mahalanobis) k-means of [MB] Appendix E."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest

import dclust
from dclust.kernels.mahalanobis import covariance_step, mahalanobis_labels, mahalanobis_stats


def _stripes(seed=0, n=200):
    rng = np.random.default_rng(seed)
    X = np.concatenate([rng.normal(0, [3.0, 0.2], (n, 2)), rng.normal([0, 10], [0.2, 3.0], (n, 2))])
    return X, np.repeat([0, 1], n)


def test_labels_are_the_brute_force_mahalanobis_argmin():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(300, 3))
    means = rng.normal(size=(4, 3))
    A = rng.normal(size=(4, 3, 3))
    covs = A @ A.transpose(0, 2, 1) + 0.1 * np.eye(3)
    whiten = np.array([np.linalg.inv(np.linalg.cholesky(c)) for c in covs])
    labels, dist = mahalanobis_labels(X, means, whiten)
    brute = np.stack([np.einsum("nd,de,ne->n", X - m, np.linalg.inv(c), X - m) for m, c in zip(means, covs)], 1)
    np.testing.assert_array_equal(labels, brute.argmin(axis=1))
    np.testing.assert_allclose(dist, brute.min(axis=1), rtol=1e-10)


def test_covariance_step_is_the_floored_minimiser():
    rng = np.random.default_rng(2)
    B = rng.normal(size=(50, 3))
    S = B.T @ B
    sigma, value = covariance_step(S, 10.0, 1e-3)
    np.testing.assert_allclose(sigma, S / 10.0, rtol=1e-10)  # no eigenvalue below the floor here
    f = lambda C: np.trace(S @ np.linalg.inv(C)) + 10.0 * np.linalg.slogdet(C)[1]  # noqa: E731
    assert value == pytest.approx(f(sigma), rel=1e-10)
    for _ in range(20):
        E = rng.normal(scale=0.05, size=(3, 3))
        assert f(sigma + E @ E.T) >= value - 1e-9
    flat, _ = covariance_step(np.diag([4.0, 0.0]), 2.0, 0.5)  # eigenvalues 2 and 0 -> 2 and the floor
    np.testing.assert_allclose(flat, np.diag([2.0, 0.5]))


def test_tree_reduced_statistics_equal_one_block():
    X, _ = _stripes()
    means = np.array([[0.0, 0.0], [0.0, 10.0]])
    whiten = np.repeat(np.eye(2)[None], 2, axis=0)
    one = mahalanobis_stats(X, offset=0, block_index=0, means=means, whiten=whiten)
    from dclust._dask.passes import map_reduce
    from dclust.kernels.gmpr import GaussianStats

    tree = map_reduce(mahalanobis_stats, GaussianStats.merge_all, da.from_array(X, chunks=37), means=means,
                      whiten=whiten, split_every=2).compute()[()]
    for a, b in ((one.weight, tree.weight), (one.mean, tree.mean), (one.scatter, tree.scatter)):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-9)
    assert one.loglik == pytest.approx(tree.loglik, rel=1e-10)


def test_fit_recovers_each_clusters_covariance_and_never_raises_the_objective():
    X, y = _stripes()
    m = dclust.MahalanobisKMeans(n_clusters=2, lam=200.0, random_state=0).fit(da.from_array(X, chunks=64))
    assert dclust.metrics.adjusted_rand_score(y, m.predict(X)) == 1.0
    h = np.array(m.objective_history_)
    assert (np.diff(h) <= 1e-9 * np.abs(h[:-1])).all() and m.converged_
    labels = m.predict(X)
    for k in range(2):
        rows = X[labels == k]
        S = (rows - rows.mean(0)).T @ (rows - rows.mean(0))
        np.testing.assert_allclose(m.covariances_[k], S / 200.0, rtol=1e-8)  # Sigma_k = S_k / lam
    var = np.sort(np.diag(m.covariances_[0]))
    assert var[0] < 0.1 and 7 < var[1] < 11  # one long axis (variance 9), one short (0.04)


def test_objective_is_monotone_on_overlapping_blobs():
    X = dclust.make_blobs(n_samples=1_500, n_features=3, centers=5, cluster_std=2.0, random_state=3).X.compute()
    m = dclust.MahalanobisKMeans(n_clusters=5, lam=300.0, random_state=0, max_iter=50).fit(np.asarray(X))
    h = np.array(m.objective_history_)
    assert (np.diff(h) <= 1e-9 * np.abs(h[:-1])).all()


def test_non_finite_rows_name_their_chunk():
    X, _ = _stripes()
    X[77, 1] = np.nan
    with pytest.raises(dclust.errors.InvalidDataError, match="chunk 1"):
        dclust.MahalanobisKMeans(n_clusters=2, lam=200.0, random_state=0).fit(da.from_array(X, chunks=50))
