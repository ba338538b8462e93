"""The dense tiles of GM-PR's diagonal E-step (dclust.kernels.gmpr._diag_kernel): the vectorised exp's accuracy and
its edge values, the NaN/inf count of tiles that skip the float32 screen (told from a row's sum of exps), a tile's
log-likelihood and inverse row sums, the rows transposed in registers, and the hint that ends a run of tiles without
a screen."""

import numba
import numpy as np
import pytest

from dclust.kernels.gmpr import (
    _DIAG_TILE,
    _EXP_FLOOR,
    _FAST,
    _NEGLIGIBLE,
    _SPARSE,
    MixtureParams,
    _dense_rows,
    _diag_kernel,
    _diag_screen_weights,
    _exp_sum,
    _looks_sparse,
    _tile_loglik,
    _vexp,
    link_partial,
    link_partial_numpy,
    sub_log_density,
    unlinked_partial,
    unlinked_partial_numpy,
)

from _support.gmpr import assert_close_to_twin, overlapping as _overlapping


@numba.njit(**{**_FAST, "cache": False})  # not cached: a cached caller keeps an inlined function's old code
def _exp(x):
    g = x.copy()
    m = g.shape[0]
    _vexp(g, np.zeros(m), m)
    return g


def test_vectorised_exp_is_accurate_to_a_few_ulps():
    """Relative error below 3e-16 (the docstring's bound) against a long-double exp, on random exponents over the
    whole range and near every multiple and half-multiple of ln 2 (where the reduction switches); exp(0) is exactly
    1 (a row's sum of exps is >= 1, which the dense tiles' NaN test relies on); at or below the floor, -inf and NaN
    give exactly 0."""
    rng = np.random.default_rng(0)
    k = np.arange(0, 1021) * np.log(2)
    x = np.concatenate([rng.uniform(-708, 0, 200_000), rng.uniform(-1, 0, 50_000), -k, -k - np.log(2) / 2,
                        -k - 1e-9, -k + 1e-9])
    x = x[(x > _EXP_FLOOR) & (x <= 0)]
    ref = np.exp(x.astype(np.longdouble))
    rel = np.abs((_exp(x).astype(np.longdouble) - ref) / ref)
    assert float(rel.max()) < 3e-16
    edge = _exp(np.array([0.0, -0.0, _EXP_FLOOR, _EXP_FLOOR - 1.0, -np.inf, np.nan]))
    assert edge[0] == 1.0 and edge[1] == 1.0 and not edge[2:].any()


@numba.njit(**{**_FAST, "cache": False})
def _exp_rows(G, mx, cut):
    acc = np.empty(G.shape[1])
    _exp_sum(G, 0, G.shape[0], mx, G.shape[1], acc, cut)
    return acc


def test_dense_tiles_exp_is_accurate_to_a_few_ulps_and_cuts_exactly():
    """The dense tiles' exp (eight lanes by a table of 2^(i/16) and vscalefpd where the CPU has AVX-512, else
    :func:`_vexp`'s): relative error below 3e-16 against a long-double exp over the whole range, near every
    multiple of ln 2 / 16 and half-way between (where the table index switches), in rows of a length that is not a
    multiple of 8 (the last lanes go one at a time); each column's sum in ``acc``; exp(0) = 1 exactly; at or below
    the cut, -inf and NaN give exactly 0, just above it the exp."""
    rng = np.random.default_rng(2)
    k = np.arange(0, 16 * 1021) * np.log(2) / 16
    x = np.concatenate([rng.uniform(-708, 0, 100_000), rng.uniform(-1, 0, 20_000), -k, -k - np.log(2) / 32,
                        -k - 1e-9, -k + 1e-9])
    x = x[(x > _EXP_FLOOR) & (x <= 0)]
    x = x[: x.size - x.size % 3 - 3]
    G = x.reshape(3, -1)
    want = np.exp(G.astype(np.longdouble))
    acc = _exp_rows(G, np.zeros(G.shape[1]), _EXP_FLOOR)
    assert G.shape[1] % 8 and float(np.abs((G - want) / want).max()) < 3e-16
    assert np.array_equal(acc, (G[0] + G[1]) + G[2])
    G = np.array([[-2.0, 0.5, -0.25] * 5, [0.5, 0.5, 0.25] * 5])  # the shift by mx (G - mx exact)
    _exp_rows(G, np.full(15, 0.5), _EXP_FLOOR)
    want = np.exp(np.array([[-2.5, 0.0, -0.75] * 5, [0.0, 0.0, -0.25] * 5], dtype=np.longdouble))
    assert float(np.abs((G - want) / want).max()) < 3e-16
    edge = np.array([[0.0, -0.0, -60.0, -60.0 - 1e-9, -59.999, -np.inf, np.nan, -1e300, _EXP_FLOOR - 1.0]])
    _exp_rows(edge, np.zeros(edge.shape[1]), -60.0)
    assert edge[0, 0] == 1.0 and edge[0, 1] == 1.0 and not edge[0, [2, 3, 5, 6, 7, 8]].any()
    assert abs(edge[0, 4] / np.exp(-59.999) - 1) < 3e-16


def test_nan_and_inf_in_tiles_that_skip_the_screen_are_counted_value_by_value():
    """Overlapping components: every tile is dense, and after the first the screen backs off, so later tiles count
    their NaN and inf values from the rows whose sum of exps is not >= 1. Each NaN or inf value counts once; a
    finite float64 row too far for any density (every log-density -inf) is not bad: it adds nothing to the sums,
    which are those of the block without it, and makes the log-likelihood -inf (as in the numpy twin)."""
    rng = np.random.default_rng(1)
    n = 6 * _DIAG_TILE
    X, p = _overlapping(rng, n)
    w = _diag_screen_weights(p)
    far = 5 * _DIAG_TILE + 1
    bad = X.copy()
    bad[far] = 1e200  # finite; its squared distances overflow
    S, loglik, n_bad = _diag_kernel(bad, np.ones(n, bool), *w)
    keep = np.ones(n, bool)
    keep[far] = False
    S_ref, loglik_ref, n_ref = _diag_kernel(X, keep, *w)
    assert n_bad == n_ref == 0 and loglik == -np.inf and np.isfinite(loglik_ref)
    np.testing.assert_allclose(S, S_ref, rtol=1e-12, atol=1e-12 * np.abs(S_ref).max())
    bad[_DIAG_TILE + 3, [0, 4]] = np.nan  # two values of one row
    bad[2 * _DIAG_TILE + 10, 2] = -np.inf
    bad[4 * _DIAG_TILE + 7, 5] = np.inf
    assert _diag_kernel(bad, np.ones(n, bool), *w)[2] == 4
    assert _diag_kernel(bad, keep, *w)[2] == 4


def test_dense_tiles_equal_the_numpy_twin_for_every_feature_count():
    """The dense tiles pad the features to a multiple of their sweep width with zeros: 1 to 9 features (none, some
    and most of a sweep padded), float32 and float64 rows, a ragged last tile, against plain numpy."""
    rng = np.random.default_rng(2)
    for D in range(1, 10):
        X, p = _overlapping(rng, 2 * _DIAG_TILE + 29, D=D)
        for arr in (X, X.astype(np.float32)):
            a, b = unlinked_partial(arr, p), unlinked_partial_numpy(arr, p)
            assert_close_to_twin(a, b, arr.dtype)



def test_dense_fold_of_an_odd_number_of_components_equals_the_numpy_twin():
    """The dense tiles fold two components per sweep: 1, 3 and 5 components (the last one alone, folded once) and
    2 (a pair), 3 and 8 features, against plain numpy."""
    rng = np.random.default_rng(6)
    for M in (1, 2, 3, 5):
        for D in (3, 8):
            X, p = _overlapping(rng, 2 * _DIAG_TILE + 11, D=D, M=M, K=1)
            a, b = unlinked_partial(X, p), unlinked_partial_numpy(X, p)
            np.testing.assert_allclose(a.weight, b.weight, rtol=1e-10)
            np.testing.assert_allclose(a.mean, b.mean, rtol=1e-10, atol=1e-12)
            np.testing.assert_allclose(a.scatter, b.scatter, rtol=1e-10)
            assert abs(a.loglik / b.loglik - 1) < 1e-12

def test_dense_rows_are_the_centered_rows_transposed_bit_for_bit():
    """The feature-major rows of a dense tile (blocks of 8 rows x 8 features transposed in registers, the rest one
    value at a time) equal ``float64(X[idx]) - o`` transposed exactly: feature counts below, at and between
    multiples of 8, float32 and float64 rows, consecutive and scattered rows, tiles of a multiple of 8 rows and
    ragged ones; the rows of U past the features and its columns past ``m`` are not written."""
    rng = np.random.default_rng(3)
    for D in (1, 4, 5, 8, 11, 12, 16, 21, 31):
        for dtype in (np.float32, np.float64):
            X = rng.normal(size=(3 * _DIAG_TILE, D)).astype(dtype)
            o = rng.normal(size=D)
            scattered = np.sort(rng.choice(X.shape[0], _DIAG_TILE, replace=False))
            for idx, m in ((np.arange(40, 40 + _DIAG_TILE), _DIAG_TILE), (scattered, _DIAG_TILE),
                           (scattered, _DIAG_TILE - 13), (np.arange(7, 7 + _DIAG_TILE), 5)):
                U = np.full((D + 3, _DIAG_TILE), 7.0)
                _dense_rows(X, idx, m, o, U)
                np.testing.assert_array_equal(U[:D, :m], (X[idx[:m]].astype(np.float64) - o).T)
                assert (U[D:] == 7.0).all() and (U[:, m:] == 7.0).all()


def test_dense_tiles_with_scattered_kept_rows_equal_the_numpy_twin():
    """Linked rows left out of a block make a dense tile's rows non-consecutive (read through the index): 13 and 16
    features (a block of 8 transposed in registers and the rest one at a time; two blocks), against plain numpy."""
    rng = np.random.default_rng(4)
    for D in (13, 16):
        X, p = _overlapping(rng, 3 * _DIAG_TILE + 5, D=D)
        linked = np.sort(rng.choice(X.shape[0], X.shape[0] // 3, replace=False))
        for arr in (X, X.astype(np.float32)):
            a, b = unlinked_partial(arr, p, linked), unlinked_partial_numpy(arr, p, linked)
            assert_close_to_twin(a, b, arr.dtype)


def test_a_dense_tile_looks_sparse_when_few_of_its_first_rows_exps_count():
    """The hint that ends a run of unscreened dense tiles: the share of nonzero exps among the first rows' pairs,
    at most 1 / 8 (0 below the cut; a NaN does not count)."""
    G = np.zeros((16, _DIAG_TILE))
    assert _looks_sparse(G, _DIAG_TILE)
    G[:2, :] = 0.5  # 2 of 16 components count: 1 / 8
    assert _looks_sparse(G, _DIAG_TILE)
    G[2, 0] = 1.0
    assert not _looks_sparse(G, _DIAG_TILE)
    G[:, :] = np.nan
    assert _looks_sparse(G, 5)
    G[:, 100:] = 1.0  # rows past the first 64 are not looked at
    assert _looks_sparse(G, _DIAG_TILE)


def test_separated_rows_after_a_long_run_of_dense_tiles_equal_the_numpy_twin():
    """Broad components: many dense tiles of rows near the centre (every component counts; the screens back off to
    long runs without one), then rows far out along the means (about one component in 14 counts: sparse tiles,
    screened again once a dense tile looks sparse), then dense again: the statistics are those of plain numpy
    whichever path each tile took."""
    rng = np.random.default_rng(5)
    D, M = 4, 16
    means = rng.normal(size=(M, 1, D)) * 40
    p = MixtureParams.build(np.full(M, 1 / M), np.ones((M, 1)), means, np.full((M, 1, D), 1e4))
    n1, n2 = 40 * _DIAG_TILE, 6 * _DIAG_TILE
    dense = rng.normal(size=(n1, D)) * 10
    far = means[rng.integers(0, M, n2), 0] * 2500 + rng.normal(size=(n2, D))
    X = np.concatenate([dense, far, dense[: 3 * _DIAG_TILE]])
    a, b = unlinked_partial(X, p), unlinked_partial_numpy(X, p)
    np.testing.assert_allclose(a.weight, b.weight, rtol=1e-10)
    np.testing.assert_allclose(a.mean, b.mean, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(a.scatter, b.scatter, rtol=1e-10)
    assert abs(a.loglik / b.loglik - 1) < 1e-12


def _loglik(mx, acc, m):
    return _tile_loglik(mx, acc, m, np.empty(8), np.empty(8))


def test_tile_loglik_sums_the_rows_logs_and_inverts_their_sums():
    """Lane sums and products with one log per tile equal the direct ``Σ mx + log acc`` for every tile length
    (full lanes and a ragged tail), the inverses within half an ulp (1 exactly for 1); a row sum that is NaN, 0 or
    inf is set to 0 and counted, and the scalar fallback (a lane product NaN, or over 2^1024 from row sums far
    above any C) still gives the direct sum."""
    rng = np.random.default_rng(5)
    for m in (1, 7, 8, 13, _DIAG_TILE):
        mx, acc = -30 * rng.random(m), 1 + 15 * rng.random(m)
        acc[0] = 1.0
        a = acc.copy()
        ll, nz = _loglik(mx, a, m)
        assert nz == 0 and np.abs(a - 1 / acc.astype(np.longdouble)).max() <= 1.2e-16 and a[0] == 1.0
        assert abs(ll - (mx.sum() + np.log(acc).sum())) <= 1e-12 * abs(ll)
    m = _DIAG_TILE
    mx, acc = -30 * rng.random(m), 1 + 15 * rng.random(m)
    big = acc.copy()
    big[::8] = 1e300  # lane 0's product overflows
    a = big.copy()
    ll, nz = _loglik(mx, a, m)
    assert nz == 0 and abs(ll - (mx.sum() + np.log(big).sum())) <= 1e-12 * abs(ll)
    bad = acc.copy()
    bad[[3, 20, 100]] = [np.nan, 0.0, np.inf]
    a = bad.copy()
    ll, nz = _loglik(mx, a, m)
    assert np.isnan(ll) and nz == 3 and not a[[3, 20, 100]].any()
    assert np.abs(np.delete(a, [3, 20, 100]) - 1 / np.delete(bad, [3, 20, 100]).astype(np.longdouble)).max() <= 1.2e-16



_WITHOUT_AVX512 = """
import numpy as np
from dclust.kernels import gmpr
from dclust.kernels.gmpr import (MixtureParams, link_partial, link_partial_numpy, unlinked_partial,
                                 unlinked_partial_numpy)

assert not gmpr._AVX512
rng = np.random.default_rng(0)
for n, d, c, spread in ((3001, 8, 6, 1.0), (1500, 16, 12, 40.0)):  # dense tiles; then separated (screened) ones
    X = rng.normal(size=(n, d))
    p = MixtureParams.build(np.full(c, 1 / c), np.ones((c, 1)), spread * rng.normal(size=(c, 1, d)),
                            np.full((c, 1, d), 4.0))
    got, want = unlinked_partial(X, p), unlinked_partial_numpy(X, p)
    np.testing.assert_allclose(got.weight, want.weight, rtol=1e-10, atol=1e-20)  # below exp(-60): cut to 0
    np.testing.assert_allclose(got.loglik, want.loglik, rtol=1e-12)
    must = np.arange(200) % 3 == 0
    got, want = link_partial(X[:200], X[200:400], must, p), link_partial_numpy(X[:200], X[200:400], must, p)
    np.testing.assert_allclose(got.weight, want.weight, rtol=1e-10, atol=1e-20)
print("ok")
"""


def test_the_kernels_compile_and_agree_on_a_cpu_without_avx512(tmp_path):
    """Numba compiling for a CPU without AVX-512 (``NUMBA_CPU_NAME=haswell``, its own cache) takes the portable exp:
    no AVX-512 instruction is emitted, and the statistics equal the numpy twin's."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "NUMBA_CPU_NAME": "haswell", "NUMBA_CACHE_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", _WITHOUT_AVX512], env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "ok"


def test_links_of_separated_components_are_folded_weight_by_weight_and_equal_the_numpy_twin():
    """The links' fold (``_fold_tile``) takes the weights above ``exp(_NEGLIGIBLE)`` one by one when they are at most
    1 / ``_SPARSE`` of a tile's (separated components), and one BLAS product otherwise (overlapping ones): both give
    the numpy twin's statistics, must- and cannot-links, to rounding (a weight below the cut adds less than that)."""
    rng = np.random.default_rng(11)
    for spread, sparse in ((40.0, True), (1.0, False)):
        C, D = 12, 16
        p = MixtureParams.build(np.full(C, 1 / C), np.ones((C, 1)), spread * rng.normal(size=(C, 1, D)),
                                np.full((C, 1, D), 4.0))
        centers = p.means[:, 0]
        X = centers[rng.integers(0, C, 1200)] + 2.0 * rng.normal(size=(1200, D))
        t = sub_log_density(X, p)[:, :, 0]
        near = (t > t.max(axis=1, keepdims=True) + _NEGLIGIBLE).mean()
        assert (near * _SPARSE <= 1) == sparse  # the path this case takes
        must = rng.random(600) < 0.6
        got, want = link_partial(X[:600], X[600:], must, p), link_partial_numpy(X[:600], X[600:], must, p)
        for f in ("weight", "mean", "scatter", "class_counts"):
            np.testing.assert_allclose(getattr(got, f), getattr(want, f), rtol=1e-10,
                                       atol=1e-12 * np.abs(getattr(want, f)).max())
        assert got.loglik == pytest.approx(want.loglik, rel=1e-12)
