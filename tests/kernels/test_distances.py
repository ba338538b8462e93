import numpy as np
import pytest

from dclust.kernels.distances import assign_stats, assign_stats_numpy, block_stats, nearest, nearest_numpy


@pytest.mark.parametrize("n,d,k", [(1, 1, 1), (100, 3, 4), (2000, 8, 16), (257, 32, 3), (300, 33, 5), (500, 40, 60)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_numba_kernel_equals_numpy_twin(n, d, k, dtype):
    rng = np.random.default_rng(n + d + k)
    X = rng.normal(size=(n, d)).astype(dtype)
    C = rng.normal(size=(k, d))
    w = rng.uniform(0.1, 2.0, size=n)
    s, lab, dist = assign_stats(X, C, w, offset=17)
    s2, lab2, dist2 = assign_stats_numpy(X, C, w, offset=17)
    np.testing.assert_array_equal(lab, lab2)
    np.testing.assert_allclose(dist, dist2, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(s.weight, s2.weight, rtol=1e-12)
    np.testing.assert_allclose(s.mean, s2.mean, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(s.scatter, s2.scatter, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(s.cost, s2.cost, rtol=1e-9)
    np.testing.assert_array_equal(s.fingerprint, s2.fingerprint)
    assert s.bad_block == -1


def test_hand_computed_toy_case():
    X = np.array([[0.0, 0.0], [1.0, 0.0], [9.0, 0.0], [10.0, 0.0]], dtype=np.float32)
    C = np.array([[0.0, 0.0], [10.0, 0.0]])
    s, lab, dist = assign_stats(X, C)
    assert lab.tolist() == [0, 0, 1, 1]
    assert dist.tolist() == [0.0, 1.0, 1.0, 0.0]
    assert s.weight.tolist() == [2.0, 2.0]
    np.testing.assert_allclose(s.mean, [[0.5, 0.0], [9.5, 0.0]])
    np.testing.assert_allclose(s.scatter, [0.5, 0.5])
    assert s.cost == 2.0


def test_ties_go_to_lowest_index():
    X = np.array([[5.0], [5.0]])
    C = np.array([[10.0], [0.0], [10.0]])
    assert nearest(X, C)[0].tolist() == [0, 0]
    assert nearest_numpy(X, C)[0].tolist() == [0, 0]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_chosen_distances_are_exact(dtype):
    rng = np.random.default_rng(0)
    X = (rng.normal(size=(300, 5)) + 1e4).astype(dtype)  # large offset: the expanded form alone would lose digits
    C = X[:7].astype(np.float64) + 0.01
    lab, dist = nearest(X, C)
    np.testing.assert_array_equal(lab[:7], np.arange(7))
    X64 = X.astype(np.float64)
    np.testing.assert_allclose(dist, ((X64 - C[lab]) ** 2).sum(axis=1), rtol=1e-12)
    s = block_stats(X, C)
    s2 = assign_stats_numpy(X, C)[0]
    np.testing.assert_allclose(s.mean, s2.mean, rtol=1e-12)
    np.testing.assert_allclose(s.scatter, s2.scatter, rtol=1e-6)


def test_block_stats_equals_assign_stats():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(1000, 6)).astype(np.float32)
    C = rng.normal(size=(9, 6))
    w = rng.uniform(0.5, 2.0, size=1000)
    a = assign_stats(X, C, w, offset=5, block_index=2)[0]
    b = block_stats(X, C, w, offset=5, block_index=2)
    for name in ("weight", "mean", "scatter", "fingerprint"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    assert a.cost == b.cost and a.n_rows == b.n_rows


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_rows_are_flagged(bad):
    X = np.ones((10, 2))
    X[3, 1] = bad
    s, lab, dist = assign_stats(X, np.zeros((2, 2)), block_index=4)
    assert lab[3] == -1 and np.isnan(dist[3])
    assert s.bad_block == 4
    assert s.weight.sum() == 9


@pytest.mark.parametrize("lam", [1e-9, 0.5, 4.0])
@pytest.mark.parametrize("key_range", [(0, 2**64 - 1), (2**62, 2**63)])
def test_epoch_stats_equals_numpy(lam, key_range):
    """A DP-means epoch on one block: rows in the key range within lam are folded, the others proposed (also when
    more rows propose than the kernel expected)."""
    from dclust.kernels.distances import epoch_stats, order_keys, seed_mix

    rng = np.random.default_rng(3)
    X = rng.normal(size=(3000, 4)).astype(np.float32)
    C = rng.normal(size=(5, 4))
    mix = seed_mix(11)
    lo, hi = key_range
    stats, proposals = epoch_stats(X, C, lam, offset=40, block_index=1, mix=mix, lo=lo, hi=hi)
    keys = order_keys(mix, np.arange(40, 3040))
    taken = (keys >= np.uint64(lo)) & (keys <= np.uint64(hi))
    labels, dist = nearest_numpy(X, C)
    far = taken & (dist > lam)
    np.testing.assert_array_equal(proposals, np.flatnonzero(far))
    near = taken & ~far
    ref = assign_stats_numpy(X[near], C, offset=0)[0]
    np.testing.assert_allclose(stats.weight, ref.weight)
    np.testing.assert_allclose(stats.mean, ref.mean, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(stats.cost, dist[near].sum(), rtol=1e-9)
    assert stats.n_rows == taken.sum()
