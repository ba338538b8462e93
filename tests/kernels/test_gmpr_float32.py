"""GM-PR's float32 E-step (dclust.kernels.gmpr._diag_kernel32): float32 rows of overlapping diagonal components get
their log-densities, exps and row sums in float32 and their statistics in float64. Its exp, the choice of path from
the parameters alone, statistics that do not depend on the chunking, the rows it hands back to the float64 kernel,
NaN and inf, and the estimator on float32 data."""

import numba
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dclust
from dclust.kernels.gmpr import (
    _FAST,
    _FAR32,
    _NEGLIGIBLE,
    GaussianStats,
    MixtureParams,
    _dense_in_float32,
    _dense_weights,
    _diag_kernel32,
    _diag_screen_weights,
    _estep_weights,
    _exp_sum32,
    unlinked_partial,
    unlinked_partial_numpy,
)

from _support.gmpr import F32_RTOL, assert_close_to_twin
from _support.gmpr import overlapping as _overlapping


@numba.njit(**{**_FAST, "cache": False})  # not cached: a cached caller keeps an inlined function's old code
def _exp32_rows(G, mx, cut):
    acc = np.empty(G.shape[1], np.float32)
    _exp_sum32(G, mx, G.shape[1], acc, np.float32(cut))
    return acc


def test_float32_exp_is_accurate_to_a_few_float32_ulps_and_cuts_exactly():
    """Relative error below 3e-7 (2.5 float32 ulps) against a long-double exp over [-60, 0] and near every multiple
    and half-multiple of ln 2 (where the reduction switches), in rows whose length is not a multiple of 16; each
    column's sum in ``acc``; exp(0) = 1 exactly (a row's sum of exps is >= 1); at or below the cut, -inf and NaN
    give exactly 0."""
    rng = np.random.default_rng(0)
    k = np.arange(0, 87) * np.log(2)
    x = np.concatenate([rng.uniform(-60, 0, 100_000), rng.uniform(-1, 0, 20_000), -k, -k - np.log(2) / 2,
                        -k - 1e-6, -k + 1e-6])
    x = x[(x > -60) & (x <= 0)].astype(np.float32)
    x = x[: x.size - x.size % 3 - 3]
    G = x.reshape(3, -1).copy()
    want = np.exp(G.astype(np.longdouble))
    acc = _exp32_rows(G, np.zeros(G.shape[1], np.float32), _NEGLIGIBLE)
    assert G.shape[1] % 16 and float(np.abs((G - want) / want).max()) < 3e-7
    np.testing.assert_allclose(acc, G.astype(np.float64).sum(axis=0), rtol=1e-6)
    edge = np.array([[0.0, -0.0, -60.0, -60.5, -59.99, -np.inf, np.nan, -1e30]], np.float32)
    _exp32_rows(edge, np.zeros(edge.shape[1], np.float32), -60.0)
    assert edge[0, 0] == 1.0 and edge[0, 1] == 1.0 and not edge[0, [2, 3, 5, 6, 7]].any()
    assert abs(edge[0, 4] / np.exp(np.float64(np.float32(-59.99))) - 1) < 3e-7


def _separated(rng, n, D=8, C=16):
    centers = rng.uniform(-60, 60, size=(C, D))
    p = MixtureParams.build(np.full(C, 1 / C), np.ones((C, 1)), centers[:, None, :], np.ones((C, 1, D)))
    return (centers[rng.integers(0, C, n)] + rng.normal(size=(n, D))).astype(np.float32), p


def test_the_path_is_chosen_from_the_parameters_alone():
    """Overlapping components (most lie within 60 nats of each other's means) take the float32 E-step on float32
    rows, unless their typical row's best log-density is below ``_FAR32 / 2`` (many features); separated ones
    keep the float64 kernel with its float32 screen, whose statistics equal the float64 twin's to rounding even
    for float32 rows; float64 rows always take the float64 kernel."""
    rng = np.random.default_rng(1)
    X, p = _overlapping(rng, 1000)
    assert _dense_in_float32(*_diag_screen_weights(p)[:4])
    Xs, ps = _separated(rng, 1000)
    assert not _dense_in_float32(*_diag_screen_weights(ps)[:4])
    _, pw = _overlapping(rng, 10, D=1500)  # overlapping, but a typical row's best log-density is about -2100
    assert not _dense_in_float32(*_diag_screen_weights(pw)[:4])
    dead = MixtureParams.build(np.full(2, 0.5), np.array([[1.0, 0.0], [1.0, 0.0]]), np.zeros((2, 2, 3)),
                               np.ones((2, 2, 3)))  # sub-clusters of weight 0: base -inf, not counted
    assert _dense_in_float32(*_diag_screen_weights(dead)[:4])
    a, b = unlinked_partial(Xs, ps), unlinked_partial_numpy(Xs, ps)
    assert_close_to_twin(a, b, np.float64)
    a, b = unlinked_partial(X, p), unlinked_partial_numpy(X, p)  # float64 rows
    assert_close_to_twin(a, b, np.float64)
    a = unlinked_partial(X.astype(np.float32), p)
    assert_close_to_twin(a, unlinked_partial_numpy(X.astype(np.float32), p), np.float32)
    assert not np.allclose(a.weight, b.weight, rtol=1e-10, atol=0)  # float32 arithmetic, not float64's


@settings(max_examples=25, deadline=None)
@given(cuts=st.lists(st.integers(1, 1499), max_size=6, unique=True), seed=st.integers(0, 3))
def test_float32_statistics_do_not_depend_on_the_chunking(cuts, seed):
    """A row's float32 values depend on the row alone (not on its place in a tile): any split of a block, with
    linked rows left out, merges to the whole block's statistics to float64 rounding (rtol 1e-10)."""
    rng = np.random.default_rng(seed)
    X, p = _overlapping(rng, 1500, D=5 + seed)
    X = X.astype(np.float32)
    keep = rng.random(len(X)) > 0.2
    whole = unlinked_partial(X, p, keep=keep)
    bounds = [0, *sorted(cuts), len(X)]
    parts = GaussianStats.merge_all([unlinked_partial(X[a:b], p, keep=keep[a:b]) for a, b in zip(bounds, bounds[1:])])
    for f in ("weight", "mean", "scatter", "class_counts"):
        np.testing.assert_allclose(getattr(parts, f), getattr(whole, f), rtol=1e-10,
                                   atol=1e-12 * np.abs(getattr(whole, f)).max())
    assert parts.loglik == pytest.approx(whole.loglik, rel=1e-12) and parts.n_rows == whole.n_rows


def _kernel32(X, p, keep=None):
    o, mu, prec, base = _diag_screen_weights(p)[:4]
    sq, sm = _dense_weights(mu, prec)
    keep = np.ones(len(X), bool) if keep is None else keep
    f32 = np.float32
    return _diag_kernel32(X, keep, o.astype(f32), sq.astype(f32), sm.astype(f32), base.astype(f32))


def test_far_rows_and_float32_overflow_are_done_in_float64():
    """A row whose best log-density is below ``_FAR32`` (float32 too coarse there) or whose float32 log-densities
    overflow (finite values, squares beyond float32's range) adds nothing to the float32 sums and is marked for the
    float64 kernel: the block's statistics are those of the float32 rows plus the float64 twin's of the marked ones,
    and a block of only such rows equals the float64 twin to rounding."""
    rng = np.random.default_rng(2)
    X, p = _overlapping(rng, 700)
    X = X.astype(np.float32)
    far = X[:40] + np.float32(500.0)  # ~250 standard deviations: t ~ -1e5 nats
    huge = X[40:45] * np.float32(1e20)  # squares overflow float32, not float64
    odd = np.concatenate([far, huge])
    S, loglik, n_bad, retry = _kernel32(odd, p)
    assert n_bad == 0 and retry.all() and not S.any() and loglik == 0.0
    t_far = unlinked_partial_numpy(far[:1], p).loglik
    assert t_far < _FAR32
    assert_close_to_twin(unlinked_partial(odd, p), unlinked_partial_numpy(odd, p), np.float64)
    mixed = np.concatenate([X, odd])
    S, _, _, retry = _kernel32(mixed, p)
    assert np.array_equal(np.flatnonzero(retry), np.arange(len(X), len(mixed)))
    got = unlinked_partial(mixed, p)
    want = GaussianStats.merge_all([unlinked_partial(X, p), unlinked_partial_numpy(odd, p)])
    for f in ("weight", "mean", "scatter", "class_counts"):
        np.testing.assert_allclose(getattr(got, f), getattr(want, f), rtol=1e-10,
                                   atol=1e-12 * np.abs(getattr(want, f)).max())
    assert got.loglik == pytest.approx(want.loglik, rel=1e-12)
    assert_close_to_twin(got, unlinked_partial_numpy(mixed, p), np.float32)


def test_a_row_whose_centring_overflows_float32_is_done_in_float64():
    """A finite row whose ``x − o`` overflows float32 (means near float32's limit) is handed to the float64 kernel
    and its infinite float32 values add nothing (not ``0 · inf``): the block's statistics are finite and equal the
    float32 row's plus the float64 kernel's of the other."""
    means = np.full((2, 1, 3), float(np.float32(-1e38)))  # float32 values: the float32 rows at them are at 0
    p = MixtureParams.build(np.full(2, 0.5), np.ones((2, 1)), means, np.ones((2, 1, 3)))
    assert _estep_weights(p).dense32 is not None
    X = np.array([[3e38, -1e38, -1e38], [-1e38, -1e38, -1e38]], np.float32)
    S, _, n_bad, retry = _kernel32(X, p)
    assert n_bad == 0 and retry.tolist() == [True, False] and np.isfinite(S).all()
    got = unlinked_partial(X, p)
    want = GaussianStats.merge_all([unlinked_partial(X[1:], p), unlinked_partial(X[:1].astype(np.float64), p)])
    for f in ("weight", "mean", "scatter", "class_counts"):
        np.testing.assert_allclose(getattr(got, f), getattr(want, f), rtol=1e-10)
    assert got.weight.tolist() == [1.0, 1.0]


def test_estep_weights_are_computed_once_and_travel_with_the_parameters():
    """The E-step's weights are computed once per parameters object, kept on it through pickling (a pass's tasks
    get the driver's), give the same statistics as freshly computed ones, and share the centre ``o``: a float32
    value, so float32 rows centred on it are rounded once, both kernels summing about it."""
    import pickle

    rng = np.random.default_rng(6)
    X, p = _overlapping(rng, 2000)
    X = X.astype(np.float32)
    w = _estep_weights(p)
    assert _estep_weights(p) is w
    q = pickle.loads(pickle.dumps(p))
    assert "_estep_weights" in vars(q) and np.array_equal(q.__dict__["_estep_weights"].dense32[1], w.dense32[1])
    fresh = MixtureParams.build(p.alpha, p.pi, p.means, p.covariances)
    a, b = unlinked_partial(X, q), unlinked_partial(X, fresh)
    assert np.array_equal(a.scatter, b.scatter) and a.loglik == b.loglik
    o = w.weights[0]
    assert w.dense32[0].dtype == np.float32 and np.array_equal(w.dense32[0].astype(np.float64), o)
    far = MixtureParams.build(p.alpha, p.pi, p.means + 1e39, p.covariances)  # o beyond float32's range
    assert _estep_weights(far).dense32 is None and not _dense_in_float32(*_estep_weights(far).weights[:4])


def test_nan_and_inf_in_float32_rows_are_counted_value_by_value():
    """Each NaN or inf value of a kept row counts once (the block is then dropped by its caller: ``bad_block``);
    skipped (linked) rows are not looked at."""
    rng = np.random.default_rng(3)
    X, p = _overlapping(rng, 1200)
    X = X.astype(np.float32)
    X[[5, 700, 701], 0] = [np.nan, np.inf, -np.inf]
    X[900, :3] = np.nan
    assert _kernel32(X, p)[2] == 6
    keep = np.ones(len(X), bool)
    keep[[5, 900]] = False
    assert _kernel32(X, p, keep)[2] == 2
    assert unlinked_partial(X, p, block_index=7).bad_block == 7
    keep[[700, 701]] = False
    assert unlinked_partial(X, p, keep=keep).bad_block == -1


@pytest.mark.filterwarnings("ignore::dclust.errors.ConvergenceWarning")  # 15 iterations on purpose
def test_gmpr_on_float32_data_is_the_same_model_for_every_chunking_and_close_to_float64():
    """The estimator on float32 blobs that overlap (the float32 E-step every iteration): the same model for two row
    chunkings and for numpy input (means rtol 1e-9, labels equal), and the float64 fit's model to the float32
    E-step's accuracy, here within 1e-4 relative, with the same labels."""
    import dask.array as da

    blobs = dclust.make_blobs(6000, 4, centers=5, cluster_std=2.5, chunk_rows=6000, random_state=0)
    X = np.asarray(blobs.X, dtype=np.float32)

    def fit(data):
        return dclust.GMPR(n_classes=5, covariance_type="diag", max_iter=15, tol=0.0, random_state=0).fit(data)

    ref = fit(X)
    w = _diag_screen_weights(ref._params())
    assert _dense_in_float32(*w[:4])
    for chunks in (1000, 777):
        other = fit(da.from_array(X, chunks=(chunks, 4)))
        np.testing.assert_allclose(other.means_, ref.means_, rtol=1e-9, atol=1e-12)
        assert np.array_equal(np.asarray(other.labels_), np.asarray(ref.labels_))
    f64 = fit(X.astype(np.float64))
    np.testing.assert_allclose(f64.means_, ref.means_, rtol=1e-4, atol=1e-4 * np.abs(ref.means_).max())
    assert np.array_equal(np.asarray(f64.labels_), np.asarray(ref.labels_))
    assert F32_RTOL < 1e-5


_STATS_F32 = """
import json
import sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from _support.gmpr import overlapping
from dclust.kernels import gmpr
rng = np.random.default_rng(5)
X, p = overlapping(rng, 3001, D=7)
s = gmpr.unlinked_partial(X.astype(np.float32), p)
values = np.concatenate([s.weight, s.mean.ravel(), s.scatter.ravel(), [s.loglik]])
print(json.dumps([int(gmpr._AVX512), values.tolist()]))
"""


def test_float32_values_do_not_depend_on_the_vector_width(tmp_path):
    """Numba compiling for a CPU without AVX-512 (``NUMBA_CPU_NAME=haswell``, its own cache) gives the float32
    E-step's statistics of this host to float64 rounding (rtol 1e-12, where a float32 rounding would show at 1e-8):
    a row's float32 values do not depend on the vector width, so the model does not depend on which worker reads
    which chunk."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    support = str(Path(__file__).resolve().parents[1])
    runs = {}
    for cpu in ("host", "haswell"):
        env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / cpu))
        if cpu == "haswell":
            env["NUMBA_CPU_NAME"] = "haswell"
        out = subprocess.run([sys.executable, "-c", _STATS_F32, support], env=env, capture_output=True, text=True,
                             timeout=600)
        assert out.returncode == 0, out.stderr[-3000:]
        avx512, values = json.loads(out.stdout)
        runs[cpu] = (avx512, np.array(values))
    assert runs["haswell"][0] == 0
    np.testing.assert_allclose(runs["haswell"][1], runs["host"][1], rtol=1e-12, atol=0)
