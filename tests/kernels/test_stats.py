import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from dclust.kernels.stats import ClusterStats


def _parts(seed, sizes, k=4, d=3, offset=0.0):
    rng = np.random.default_rng(seed)
    out, start = [], 0
    for n in sizes:
        X = rng.normal(size=(n, d)) + offset
        lab = rng.integers(0, k, size=n)
        w = rng.uniform(0.5, 2.0, size=n)
        out.append((X, lab, w, start))
        start += n
    return out


def _stats(parts, k=4):
    return [ClusterStats.from_labels(X, lab, k, w, offset=o) for X, lab, w, o in parts]


def _assert_close(a, b, rtol=1e-10):
    np.testing.assert_allclose(a.weight, b.weight, rtol=rtol)
    np.testing.assert_allclose(a.mean, b.mean, rtol=rtol, atol=1e-12)
    np.testing.assert_allclose(a.scatter, b.scatter, rtol=rtol)
    np.testing.assert_array_equal(a.fingerprint, b.fingerprint)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000), st.lists(st.integers(0, 30), min_size=3, max_size=6))
def test_merge_is_associative_and_matches_the_union(seed, sizes):
    parts = _parts(seed, sizes)
    s = _stats(parts)
    left = ClusterStats.merge_all([ClusterStats.merge_all(s[:2]), ClusterStats.merge_all(s[2:])])
    right = ClusterStats.merge_all([s[0], ClusterStats.merge_all(s[1:])])
    flat = ClusterStats.merge_all(s[::-1])
    X = np.vstack([p[0] for p in parts])
    union = ClusterStats.from_labels(X, np.concatenate([p[1] for p in parts]), 4, np.concatenate([p[2] for p in parts]))
    for other in (right, flat, union):
        _assert_close(left, other)


def test_identity_is_neutral():
    s = _stats(_parts(3, [20]))[0]
    _assert_close(s.merge(ClusterStats.identity(4, 3)), s, rtol=0)


def test_merge_pads_fewer_clusters():
    a = ClusterStats.from_labels(np.ones((2, 1)), np.array([0, 1]), 2)
    b = ClusterStats.from_labels(np.full((1, 1), 3.0), np.array([2]), 3)
    m = a.merge(b)
    assert m.weight.tolist() == [1.0, 1.0, 1.0]
    assert m.mean[:, 0].tolist() == [1.0, 1.0, 3.0]


def test_chan_merge_keeps_digits_with_a_large_offset():
    parts = _parts(7, [1000, 1000], k=1, d=2, offset=1e8)
    merged = ClusterStats.merge_all(_stats(parts, k=1))
    X = np.vstack([p[0] for p in parts])
    w = np.concatenate([p[2] for p in parts])
    mean = np.average(X, axis=0, weights=w)
    exact = (w * ((X - mean) ** 2).sum(axis=1)).sum()
    np.testing.assert_allclose(merged.scatter[0], exact, rtol=1e-8)
    naive = (w * (X**2).sum(axis=1)).sum() - w.sum() * (mean**2).sum()
    assert abs(naive - exact) / exact > 1e-6  # the raw sum-of-squares form would have lost them


def test_total_is_the_one_cluster_merge():
    parts = _parts(11, [50, 70])
    s = ClusterStats.merge_all(_stats(parts))
    X = np.vstack([p[0] for p in parts])
    w = np.concatenate([p[2] for p in parts])
    tw, tm, ts = s.total()
    np.testing.assert_allclose(tw, w.sum())
    np.testing.assert_allclose(tm, np.average(X, axis=0, weights=w))
    np.testing.assert_allclose(ts, (w * ((X - tm) ** 2).sum(axis=1)).sum(), rtol=1e-10)
