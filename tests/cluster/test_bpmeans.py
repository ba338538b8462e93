"""BP-means and K-features: docs/algorithms.md 2.8 (BP1-BP5), OCC == serial BP-means on serial_order_, dask == numpy,
kernels against their twins, and bad input (max_features)."""

import dask.array as da
import numpy as np
import pytest

import dclust
from dclust.cluster import BPMeans, KFeatures, StepwiseKFeatures
from dclust.errors import DclustError, InvalidParameterError
from dclust.kernels.bpmeans import (
    bp_objective,
    bpmeans_reference,
    collapsed_objective,
    feature_means,
    prune_features,
    serial_sweep,
    sweep_rows,
)
from dclust.kernels.kfeatures import exhaustive_rows, greedy_rows, greedy_rows_numpy


def _latent(n=600, d=6, k=4, noise=0.05, seed=0, base=True):
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(k, d)) * 3
    Z = rng.integers(0, 2, size=(n, k))
    if base:
        A = np.vstack([np.full(d, 0.5), A])
        Z = np.c_[np.ones(n, int), Z]
    return Z @ A + noise * rng.normal(size=(n, d)), Z, A


@pytest.fixture(scope="module")
def latent():
    return _latent()


# ------------------------------------------------------------------------------------------------ kernels


def test_sweep_follows_the_bit_rule_and_ties_keep_the_bit():
    A = np.array([[2.0, 0.0], [0.0, 2.0]])
    X = np.array([[1.5, 0.0], [0.5, 0.0], [1.0, 3.0]])  # 2 r.a vs ||a||^2 = 4: 6 > 4, 2 < 4, tie 4 == 4
    Z = np.array([[0, 0], [1, 0], [1, 0]], np.uint8)
    q, flips = sweep_rows(X, Z, A)
    np.testing.assert_array_equal(Z, [[1, 0], [0, 0], [1, 1]])  # row 2: bit 0 tied, kept at 1 (T1)
    np.testing.assert_allclose(q, [0.25, 0.25, 2.0])
    assert flips == 3


def test_sweep_equals_its_plain_python_twin_bit_for_bit():
    """The numba sweep (scores of all bits first, renewed after a flip) against ``_ref_sweep`` (bit by bit): small
    integer features and rows give exact ties, random starting bits give first flips at every position, 11
    features more than one vector's width, and NaN rows keep their bits."""
    from dclust.kernels.bpmeans import _ref_sweep

    rng = np.random.default_rng(5)
    A = rng.integers(-2, 3, size=(11, 3)).astype(np.float64)
    X = rng.integers(-4, 5, size=(3000, 3)).astype(np.float64)
    X[::97, 1] = np.nan
    Z0 = rng.integers(0, 2, size=(X.shape[0], A.shape[0])).astype(np.uint8)
    Z = Z0.copy()
    q, flips = sweep_rows(X, Z, A)
    want_q, want_flips = [], 0
    for i in range(X.shape[0]):
        z = [int(b) for b in Z0[i]]
        _, qi, f = _ref_sweep(X[i], z, A)
        np.testing.assert_array_equal(Z[i], z)
        want_q.append(qi)
        want_flips += f
    np.testing.assert_array_equal(q, want_q)  # bit for bit (NaN == NaN here)
    assert flips == want_flips and 0 < flips < Z.size
    assert np.array_equal(Z[::97], Z0[::97])


def test_serial_sweep_opens_a_feature_only_when_strictly_better():
    X = np.array([[3.0, 0.0], [3.0, 0.0], [0.0, 2.0]])
    Z, new, q, flips, overflow = serial_sweep(X, np.zeros((3, 0), np.uint8), np.zeros((0, 2)), 4.0)
    np.testing.assert_array_equal(new, [[3.0, 0.0]])  # ||(0,2)||^2 = 4 is not > lam = 4 (T3)
    np.testing.assert_array_equal(Z, [[1], [1], [0]])
    np.testing.assert_allclose(q, [0, 0, 4])
    assert overflow == -1
    assert serial_sweep(X, np.zeros((3, 0), np.uint8), np.zeros((0, 2)), 1.0, max_new=1)[4] == 2


def test_prune_deletes_empty_and_merges_identical_columns():
    Z = np.array([[1, 0, 1, 1], [0, 0, 0, 1], [1, 0, 1, 0]], float)
    keep, groups = prune_features(Z.T @ Z)
    np.testing.assert_array_equal(keep, [0, 3])
    assert groups == [[0, 2], [3]]


def test_pinv_update_handles_singular_gram_e_mb1():
    # column 3 = column 1 + column 2 with disjoint supports: distinct columns, singular G
    Z = np.array([[1, 0, 1], [0, 1, 1], [1, 0, 1], [0, 1, 1]], float)
    X = np.random.default_rng(0).normal(size=(4, 3))
    G, B = Z.T @ Z, Z.T @ X
    assert np.linalg.matrix_rank(G) == 2 and prune_features(G)[0].size == 3
    A = feature_means(G, B)
    best = np.linalg.lstsq(Z, X, rcond=None)[0]
    np.testing.assert_allclose(Z @ A, Z @ best, atol=1e-12)
    np.testing.assert_allclose(Z.T @ (X - Z @ A), 0, atol=1e-12)  # BP2 normal equations


def test_bp3_collapsed_objective_equals_direct_lstsq(latent):
    X, Z, _ = latent
    Zf = Z.astype(float)
    G, B = Zf.T @ Zf, Zf.T @ X
    A = np.linalg.lstsq(Zf, X, rcond=None)[0]
    assert collapsed_objective(G, B, float((X * X).sum()), 2.0) == pytest.approx(
        bp_objective(X, Z, A, 2.0), rel=1e-10)


def test_bp5_one_feature_all_ones_gives_the_mean(latent):
    X = latent[0]
    Z = np.ones((len(X), 1))
    np.testing.assert_allclose(feature_means(Z.T @ Z, Z.T @ X)[0], X.mean(axis=0), rtol=1e-12)
    Xf = X + 100.0  # every row keeps z = 1: K-features with K = 1 is the mean
    kf = KFeatures(n_components=1, random_state=0).fit(Xf)
    assert kf.allocation_.all()
    np.testing.assert_allclose(kf.features_[0], Xf.mean(axis=0), rtol=1e-12)


def test_greedy_rows_numba_equals_numpy_twin(latent):
    X = latent[0].astype(np.float32)
    A = np.vstack([X.mean(axis=0), X[3] - X.mean(axis=0), X[10] - X.mean(axis=0)]).astype(np.float64)
    Zn, qn = greedy_rows(X, A)
    Zp, qp = greedy_rows_numpy(X, A)
    np.testing.assert_array_equal(Zn, Zp)
    np.testing.assert_allclose(qn, qp, rtol=1e-9)


def test_exhaustive_rows_find_the_best_combination(latent):
    X, Z, A = latent
    Z0 = np.zeros_like(Z, dtype=np.uint8)
    best, moved = exhaustive_rows(X, Z0, A)
    np.testing.assert_array_equal(best, Z)
    assert moved == len(X) - (Z == 0).all(axis=1).sum()


# ------------------------------------------------------------------------------------ OCC == serial BP-means


@pytest.mark.parametrize("rows,prefix_size,max_proposals,init", [
    (600, 1000, 4096, "empty"), (128, 0, 2, "empty"), (256, 40, 3, "empty"), (200, 0, 4096, "greedy"),
])
def test_occ_equals_serial_bpmeans_on_serial_order(latent, rows, prefix_size, max_proposals, init):
    X = latent[0]
    m = BPMeans(lam=3.0, init=init, random_state=1, prefix_size=prefix_size, max_proposals=max_proposals,
                max_iter=6).fit(da.from_array(X, chunks=(rows, -1)))
    Z0 = greedy_rows_numpy(X, m.init_features_)[0] if init == "greedy" else None
    Zr, Ar, hr = bpmeans_reference(X, 3.0, m.serial_order_, features=m.init_features_, Z=Z0, max_iter=6)
    np.testing.assert_array_equal(m.allocation_.compute(), Zr)
    np.testing.assert_allclose(m.features_, Ar, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(m.objective_history_, hr, rtol=1e-9)
    for order in m.serial_order_:
        np.testing.assert_array_equal(np.sort(order), np.arange(len(X)))
    if prefix_size == 0 and init == "empty":
        assert sum(map(sum, m.proposals_per_epoch_)) > 0


def test_bp1_bp2_monotone_and_normal_equations(latent):
    X = latent[0]
    m = BPMeans(lam=3.0, init="empty", random_state=3, max_proposals=2, prefix_size=0).fit(
        da.from_array(X, chunks=(150, -1)))
    J, S = m.objective_history_, m.assignment_objective_history_
    tol = 1e-10 * (X * X).sum()
    for a, b in zip(J, J[1:]):
        assert b <= a + tol
    for prev, step1 in zip(J, S[1:]):
        assert step1 <= prev + tol  # step 1 does not raise J
    for step1, after in zip(S, J):
        assert after <= step1 + tol  # nor do pruning and the A-update
    Z = m.allocation_.compute().astype(float)
    np.testing.assert_allclose(Z.T @ (X - Z @ m.features_), 0, atol=1e-9 * np.linalg.norm(X))
    assert m.objective_ == pytest.approx(bp_objective(X, Z, m.features_, 3.0), rel=1e-9)
    assert m.converged_


def test_bp4_recovers_synthetic_features_with_restarts():
    # base feature + 4 random features; noise sigma = 0.01 (about 0.0033 min ||a||: BP4's 0.01 min ||a|| needs
    # more restarts than a unit test should run)
    rng = np.random.default_rng(0)
    A = rng.normal(size=(5, 36))
    A[0] = 0.5
    Z = np.c_[np.ones(400), rng.integers(0, 2, size=(400, 4))]
    sigma = 0.01
    X = Z @ A + sigma * rng.normal(size=(400, 36))
    lam = 5.0
    assert 36 * sigma**2 < lam < (A * A).sum(axis=1).min()
    # serial BP-means from no feature ends with 5-14 features depending on the order: keep the best of 20 orders
    fits = [BPMeans(lam=lam, init="empty", random_state=s).fit(X) for s in range(20)]
    best = min(fits, key=lambda f: f.objective_)
    assert best.n_latent_features_ == 5
    err = best.allocation_ @ best.features_ - Z @ A
    assert np.sqrt((err**2).mean()) < 3 * sigma


def test_dask_equals_numpy_and_zarr(latent, tmp_path):
    X = latent[0]
    from dclust._validation import check_array

    chunks = check_array(X)[0].chunks
    a = BPMeans(lam=3.0, random_state=0, max_iter=5).fit(X)
    b = BPMeans(lam=3.0, random_state=0, max_iter=5).fit(da.from_array(X, chunks=chunks))
    np.testing.assert_array_equal(a.features_, b.features_)
    np.testing.assert_array_equal(a.allocation_, b.allocation_.compute())
    dclust.write_array(da.from_array(X, chunks=(200, -1)), tmp_path / "x.zarr")
    c = BPMeans(lam=3.0, random_state=0, max_iter=5).fit(dclust.open_array(tmp_path / "x.zarr"))
    d = BPMeans(lam=3.0, random_state=0, max_iter=5).fit(da.from_array(X, chunks=(200, -1)))
    np.testing.assert_allclose(c.features_, d.features_, rtol=1e-12)


def test_transform_is_lazy_for_dask_and_writable(latent, tmp_path):
    X = latent[0]
    m = BPMeans(lam=3.0, init="empty", random_state=0).fit(X)
    Zd = m.transform(da.from_array(X, chunks=(250, -1)))
    assert isinstance(Zd, da.Array) and Zd.dtype == np.uint8 and Zd.shape == (len(X), m.n_latent_features_)
    dclust.write_array(Zd, tmp_path / "z.zarr")
    back = dclust.open_array(tmp_path / "z.zarr").compute()
    np.testing.assert_array_equal(back, m.transform(X))
    # each row is coordinate-wise optimal against the learned features
    Z2 = back.copy()
    assert sweep_rows(X, Z2, m.features_)[1] == 0


def test_kfeatures_monotone_and_stationary(latent):
    X = latent[0]
    kf = KFeatures(n_components=5, n_init=2, random_state=0).fit(da.from_array(X, chunks=(200, -1)))
    J = kf.objective_history_
    assert all(b <= a + 1e-10 * (X * X).sum() for a, b in zip(J, J[1:]))
    Z = kf.allocation_.compute().astype(np.uint8)
    assert sweep_rows(X, Z.copy(), kf.features_, repeat=True)[1] == 0 or not kf.converged_
    Zf = Z.astype(float)
    np.testing.assert_allclose(Zf.T @ (X - Zf @ kf.features_), 0, atol=1e-9 * np.linalg.norm(X))


def test_stepwise_stops_when_the_objective_stops_decreasing():
    rng = np.random.default_rng(2)
    A = np.array([[5.0, 0, 0], [0, 5.0, 0]])
    Z = rng.integers(0, 2, size=(200, 2))
    Z[:, 0] = 1
    X = Z @ A + 0.01 * rng.normal(size=(200, 3))
    sk = StepwiseKFeatures(lam=1.0, n_init=2, random_state=0).fit(X)
    J = sk.objectives_by_k_
    k = sk.n_latent_features_
    assert J[-1] >= J[-2] and all(b < a for a, b in zip(J[:-1], J[1:-1]))
    assert k == len(J) - 1 == 2
    assert sk.objective_ == pytest.approx(J[k - 1])


# ------------------------------------------------------------------------------------------------ bad input


def test_max_features_error_suggests_a_larger_lam(latent):
    X = latent[0]
    est = BPMeans(lam=1e-6, init="empty", max_features=3, random_state=0)
    with pytest.raises(InvalidParameterError) as info:
        est.fit(X)
    text = str(info.value)
    assert "max_features=3" in text and "Increase lam" in text and "received" in text
    assert not hasattr(est, "features_")
    with pytest.raises(InvalidParameterError, match="Increase lam"):
        BPMeans(lam=1e-6, init="greedy", max_features=2, random_state=0).fit(X)
    with pytest.raises(InvalidParameterError, match="Increase lam"):
        StepwiseKFeatures(lam=0.0, max_features=2, random_state=0).fit(X)


@pytest.mark.parametrize("kwargs", [dict(lam=-1.0), dict(lam=float("nan")), dict(max_features=0),
                                    dict(init="kmeans"), dict(max_proposals=0)])
def test_bad_parameters_raise_before_work(latent, kwargs):
    with pytest.raises(InvalidParameterError, match="expected"):
        BPMeans(**kwargs).fit(latent[0])


def test_bad_data(latent):
    X = latent[0].copy()
    X[500, 2] = np.nan
    with pytest.raises(DclustError, match="chunk 2"):
        BPMeans(lam=1.0).fit(da.from_array(X, chunks=(200, -1)))
    with pytest.raises(DclustError, match="exhaustive"):
        KFeatures(n_components=13, exhaustive=True).fit(latent[0])
    m = BPMeans(lam=3.0, init="empty").fit(latent[0])
    with pytest.raises(DclustError, match="features"):
        m.transform(latent[0][:, :2])


@pytest.mark.parametrize("key_range", [(0, 2**64 - 1), (2**62, 2**63 + 2**61)])
def test_bp_block_resumes_where_the_proposal_buffer_filled(monkeypatch, key_range):
    """The keyed block kernel fills a proposal buffer of ``_PROPOSAL_ROOM`` rows and resumes after it: the bits,
    the Gram partial and the proposals equal one call with room for every row."""
    from dclust.kernels import bpmeans
    from dclust.kernels.distances import order_keys, seed_mix

    rng = np.random.default_rng(5)
    X = rng.normal(size=(300, 4))
    A = rng.normal(size=(3, 4))
    Z = rng.integers(0, 2, size=(300, 2)).astype(np.uint8)
    Z = np.c_[Z, np.zeros(300, np.uint8)]
    mix = seed_mix(9)
    lo, hi = key_range
    kw = dict(offset=1000, features=A, lam=1.5, mix=mix, lo=lo, hi=hi)
    whole = bpmeans.bp_block(X, Z, **kw)
    monkeypatch.setattr(bpmeans, "_PROPOSAL_ROOM", 7)
    parts = bpmeans.bp_block(X, Z, **kw)
    assert whole.local.size > 20  # the small buffer filled several times
    keys = order_keys(mix, np.arange(1000, 1300))
    assert whole.n_rows == int(((keys >= np.uint64(lo)) & (keys <= np.uint64(hi))).sum())
    for name in ("Z", "G", "local", "resid", "zbits"):
        np.testing.assert_array_equal(getattr(whole, name), getattr(parts, name))
    np.testing.assert_allclose(whole.B, parts.B, rtol=1e-12)  # sums split at other rows: rounding only
    assert whole.sse == pytest.approx(parts.sse, rel=1e-12)
    assert (whole.flips, whole.n_rows) == (parts.flips, parts.n_rows)



@pytest.mark.parametrize("key_range", [(0, 2**64 - 1), (2**62, 2**63 + 2**61)])
def test_bp_block_keeps_the_pattern_keys_of_its_bits(key_range):
    """A block returns the pattern key of every row of its bits (bit k of the key: column k is set), updated for
    the rows whose bits changed, also in an epoch over part of the key range; given back with those bits in the
    next epoch, the result is the one computed from the bits alone. With more columns than a key holds there
    are none."""
    from dclust.kernels import bpmeans
    from dclust.kernels.distances import seed_mix

    rng = np.random.default_rng(8)
    n, d = 2 * bpmeans._TILE + 40, 5
    A = rng.normal(size=(7, d))
    Z0 = rng.integers(0, 2, size=(n, 7)).astype(np.uint8)
    X = Z0 @ A + 0.3 * rng.normal(size=(n, d))
    Z0[rng.random(Z0.shape) < 0.2] ^= 1
    lo, hi = key_range
    kw = dict(offset=300, features=A, lam=2.0, mix=seed_mix(4), lo=lo, hi=hi)
    first = bpmeans.bp_block(X, Z0, **kw)
    assert first.flips > 0 and first.local.size > 0
    weights = 1 << np.arange(7)
    np.testing.assert_array_equal(first.keys, first.Z.astype(np.int64) @ weights)
    A2 = A + 0.05 * rng.normal(size=A.shape)
    kw2 = dict(kw, features=A2, lo=0, hi=2**64 - 1)
    given = first.keys.copy()
    again = bpmeans.bp_block(X, first.Z, keys=first.keys, **kw2)
    np.testing.assert_array_equal(first.keys, given)  # not modified
    fresh = bpmeans.bp_block(X, first.Z, **kw2)
    for name in ("Z", "G", "B", "local", "resid", "zbits", "keys"):
        np.testing.assert_array_equal(getattr(again, name), getattr(fresh, name))
    assert (again.sse, again.flips) == (fresh.sse, fresh.flips)
    wide = rng.normal(size=(bpmeans._KEY_BITS + 1, d))
    Zw = np.zeros((n, wide.shape[0]), np.uint8)
    assert bpmeans.bp_block(X, Zw, **dict(kw, features=wide)).keys is None

def test_kfeatures_n_features_is_the_deprecated_name_of_n_components():
    X = np.random.default_rng(0).normal(size=(60, 3))
    new = KFeatures(n_components=2, random_state=0).fit(X)
    with pytest.warns(FutureWarning, match="renamed n_components"):
        old = KFeatures(n_features=2, random_state=0).fit(X)
    assert old.n_latent_features_ == new.n_latent_features_ == 2
    np.testing.assert_array_equal(old.features_, new.features_)
    assert "n_components" in KFeatures().get_params() and KFeatures().get_params()["n_features"] == "deprecated"


@pytest.mark.parametrize("d", [5, 40])
def test_bp_block_screen_equals_the_row_by_row_sweep(d):
    """The block kernel screens its rows by tiles (BLAS products, per-pattern thresholds): every row's bits, and
    the proposals' residuals and squared residuals, equal one row-by-row sweep (``sweep_rows``, the arithmetic of
    the serial validation) bit for bit, including rows whose bits change and the tile left over at the end;
    (G, B, sse) are those of the rows that do not propose."""
    from dclust.kernels import bpmeans

    rng = np.random.default_rng(11)
    n = 3 * bpmeans._TILE + 17
    A = rng.normal(size=(6, d))
    Z0 = rng.integers(0, 2, size=(n, 6)).astype(np.uint8)
    X = Z0 @ A + 0.3 * rng.normal(size=(n, d))
    Z0[rng.random(Z0.shape) < 0.2] ^= 1  # bits to flip back
    Zs = Z0.copy()
    q, flips = sweep_rows(X, Zs, A)
    lam = float(np.quantile(q, 0.9))
    res = bpmeans.bp_block(X, Z0, offset=0, features=A, lam=lam, mix=0, lo=0, hi=2**64 - 1)
    props = np.flatnonzero(q > lam)
    assert 0 < props.size < n and flips > n // 10
    np.testing.assert_array_equal(res.Z, Zs)
    assert res.flips == flips
    np.testing.assert_array_equal(res.local, props)
    np.testing.assert_array_equal(np.cumsum(res.resid * res.resid, axis=1)[:, -1], q[props])  # summed in order
    np.testing.assert_allclose(res.resid, X[props] - Zs[props].astype(float) @ A, rtol=1e-12, atol=1e-12)
    keep = np.setdiff1d(np.arange(n), props)
    G, B = bpmeans.gram_partial(X[keep], Zs[keep])
    np.testing.assert_array_equal(res.G, G)
    np.testing.assert_allclose(res.B, B, rtol=1e-12, atol=1e-12)
    assert res.sse == pytest.approx(q[keep].sum(), rel=1e-12)


def test_bp_block_screen_leaves_exact_ties_to_the_exact_sweep():
    """Rows on exact ties of the bit rule (``2 s_k = ||a_k||^2``: the bit stays), rows whose squared residual is
    exactly ``lam`` (not proposed) and rows one ulp away from either are decided as the row-by-row sweep decides
    them; a NaN row is swept (not settled by the screen) and proposes nothing."""
    from dclust.kernels import bpmeans

    A = 2.0 * np.eye(3)  # ||a_k||^2 = 4
    rows, bits = [], []
    for k in range(3):
        for z in (0, 1):
            x = np.zeros(3)
            x[k] = 1.0  # off: s = 2, on: r_k = -1, s = (r_k + 2) 2 = 2; both ties (2 s = 4)
            for eps in (0.0, 1e-15, -1e-15):
                rows.append(x + eps)
                bits.append([int(j == k and z) for j in range(3)])
    rows.append([3.0, 0.0, 0.0])  # bit 0 on: r = (1, 0, 0), q = 1 = lam: not proposed
    bits.append([1, 0, 0])
    rows.append([3.0, 0.0, 1e-8])  # q just above lam: proposed
    bits.append([1, 0, 0])
    X = np.array(rows * 3)
    Z0 = np.array(bits * 3, dtype=np.uint8)
    Xn = np.vstack([X, [[np.nan, 0.0, 0.0]]])
    Zn = np.vstack([Z0, [[0, 0, 0]]]).astype(np.uint8)
    Zs = Zn.copy()
    q, flips = sweep_rows(Xn, Zs, A)
    res = bpmeans.bp_block(Xn, Zn, offset=0, features=A, lam=1.0, mix=0, lo=0, hi=2**64 - 1)
    np.testing.assert_array_equal(res.Z, Zs)
    assert res.flips == flips and flips > 0
    np.testing.assert_array_equal(res.local, np.flatnonzero(q > 1.0))
    ties = np.arange(0, 18, 3)  # eps = 0
    np.testing.assert_array_equal(res.Z[ties], Zn[ties])  # exact ties keep the bit
    assert (res.Z[:18] != Zn[:18]).any()  # one ulp off a tie: some bits change
    assert np.isnan(res.sse)  # the NaN row is not proposed: its NaN squared residual is summed, as the sweep does


# nearly every pattern of a direct table (one slot per key); patterns beyond half the probed table (folded
# mid-block); more bits than a key
@pytest.mark.parametrize("k", [11, 14, 70])
def test_bp_block_statistics_with_many_patterns_or_no_keys(k):
    """With (nearly) all 2^11 bit patterns in a direct pattern table, more distinct patterns than half a probed
    table, or more features than a pattern key holds, and bits to change, the block's bits and flips equal the
    row-by-row sweep and (G, B, sse) equal the direct sums (G exactly)."""
    from dclust.kernels import bpmeans

    rng = np.random.default_rng(3)
    n, d = 6000, 4
    A = rng.normal(size=(k, d))
    Z0 = rng.integers(0, 2, size=(n, k)).astype(np.uint8)
    X = Z0 @ A + 0.01 * rng.normal(size=(n, d))
    Z0 ^= (rng.random(size=(n, k)) < 0.05).astype(np.uint8)  # bits to change: screened and exact sweeps
    Zs = Z0.copy()
    q, flips = sweep_rows(X, Zs, A)
    lam = float(q.max()) + 1.0
    res = bpmeans.bp_block(X, Z0, offset=0, features=A, lam=lam, mix=0, lo=0, hi=2**64 - 1)
    direct = k + 1 <= bpmeans._PATTERN_SLOT_BITS
    patterns = len({tuple(r) for r in Zs})
    assert flips > 0 and (patterns > 0.9 * 2**k if direct else patterns > 2**bpmeans._PATTERN_SLOT_BITS // 2 or k > 63)
    np.testing.assert_array_equal(res.Z, Zs)
    assert res.flips == flips and res.local.size == 0
    G, B = bpmeans.gram_partial(X, Zs)
    np.testing.assert_array_equal(res.G, G)
    np.testing.assert_allclose(res.B, B, rtol=1e-12, atol=1e-9)
    assert res.sse == pytest.approx(q.sum(), rel=1e-9)


def test_bp_bits_apply_patches_then_selection_then_zero_columns():
    """BPBits, the bits of a BP-means fit between epochs: pending driver decisions (in the source's column space,
    possibly beyond its width), then the kept columns, then zero columns up to k, block by block."""
    from dclust._dask.occ import BPBits, patch_bits
    from dclust._dask.passes import map_groups

    rng = np.random.default_rng(2)
    Z = rng.integers(0, 2, size=(10, 3)).astype(np.uint8)
    src = da.from_array(Z, chunks=((4, 6), (3,)))
    bits = BPBits.of(src)
    assert bits.array(src.chunks[0]) is src  # nothing to do: the array itself
    index, new = np.array([1, 5, 9]), np.array([[1, 1], [0, 1], [1, 0]], np.uint8)
    pending = patch_bits(index, 3, new, (4, 6))
    assert sorted(pending) == [0, 1]
    bits = BPBits(src, 3, 5, pending).select(np.array([0, 2, 3, 4]))
    want = np.c_[Z, np.zeros((10, 2), np.uint8)]
    want[index, 3:] = new
    want = want[:, [0, 2, 3, 4]]
    got = bits.array(src.chunks[0])
    assert got.chunks == ((4, 6), (4,))
    np.testing.assert_array_equal(got.compute(), want)
    wider = BPBits(bits.source, bits.width, 5, bits.pending, bits.keep)  # a feature opened after the selection
    np.testing.assert_array_equal(wider.array(src.chunks[0]).compute(), np.c_[want, np.zeros(10, np.uint8)])
    np.testing.assert_array_equal(bits.select(np.arange(4)).array(src.chunks[0]).compute(), want)
    # the same bits kept by an epoch's group tasks (one group of both blocks, as an epoch's result holds them)
    run = map_groups(_keep_bits, sum, da.zeros((10, 1), chunks=((4, 6), (1,))), src, groups=((0, 1),))
    held = BPBits(run.parts.persist(), 3, 5, pending, groups=run.groups).select(np.array([0, 2, 3, 4]))
    np.testing.assert_array_equal(held.array(src.chunks[0]).compute(), want)
    assert held.array(src.chunks[0]).chunks == ((4, 6), (4,))


def _keep_bits(Xb, Zb, *, offset, block_index):
    return (np.array(Zb), None), 0.0


def _kill_worker_after_pass(client, after: int):
    """A progress callback that kills one worker process (its nanny starts a new one) once pass ``after`` is done,
    and waits until the scheduler has seen it go: the bits its tasks held are lost."""
    import os
    import signal
    import time

    killed: list[str] = []

    def on_event(event):
        if event.phase != "iter" or event.iteration != after:
            return
        victim = sorted(client.scheduler_info()["workers"])[0]
        os.kill(client.run(os.getpid, workers=[victim])[victim], signal.SIGKILL)
        deadline = time.monotonic() + 60
        while victim in client.scheduler_info()["workers"] and time.monotonic() < deadline:
            time.sleep(0.05)
        killed.append(victim)

    return on_event, killed


def test_a_lost_worker_costs_bp_means_only_time(tmp_path):
    """BP-means' bits live on the workers between epochs, one task per group of blocks keeping its blocks' bits:
    on two worker processes an epoch is one task per group, one small task per group and one merge, every group
    on the worker its initial bits were dealt to (in turn, as the groups of a store pass), always; when a
    worker process dies after a pass, the next pass makes the bits it held again and the fit ends with the model
    of the undisturbed fit, bit for bit."""
    from distributed import Client, LocalCluster, get_task_stream

    X = _latent(n=4_000, seed=3)[0]
    path = dclust.write_array(X, tmp_path / "x.zarr", chunks=(250, 6))  # 16 blocks
    params = dict(lam=2.0, init="empty", max_iter=4, prefix_size=50, max_proposals=32, random_state=0,
                  persist=False)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=":0",
                      memory_limit="2GiB") as cluster, Client(cluster) as client:
        Xs = dclust.open_array(path)
        with get_task_stream() as stream:
            ref = BPMeans(**params).fit(Xs)
        ref_Z = np.asarray(ref.allocation_)
        epochs = sum(len(p) for p in ref.proposals_per_epoch_)
        keys = [str(t["key"]) for t in stream.data]
        assert sum("dclust-groups-" in k for k in keys) == 2 * epochs  # a task per thread, as a store pass of 16
        assert sum("dclust-subtrees-" in k for k in keys) == 2 * epochs  # blocks (fewer than 8 per task)
        assert sum("dclust-merge-" in k for k in keys) == epochs and not any("partials" in k for k in keys)
        where = {}  # group -> the workers its tasks ran on, over every epoch
        for t in stream.data:
            if "dclust-groups-" in str(t["key"]):
                where.setdefault(t["key"][1], set()).add(t["worker"])
        assert all(len(w) == 1 for w in where.values())  # the bits never move
        workers = sorted(client.nthreads())
        assert {g: w.pop() for g, w in where.items()} == {g: workers[g % 2] for g in range(2)}  # dealt in turn
        on_event, killed = _kill_worker_after_pass(client, after=1)
        with dclust.on_progress(on_event):
            lost = BPMeans(**params).fit(Xs)
        assert killed and killed[0] not in client.scheduler_info()["workers"]
        lost_Z = np.asarray(lost.allocation_)
    assert ref.n_iter_ == lost.n_iter_ >= 3 and ref.n_latent_features_ >= 3
    np.testing.assert_array_equal(ref_Z, lost_Z)
    np.testing.assert_array_equal(ref.features_, lost.features_)
    assert ref.objective_history_ == lost.objective_history_
    assert ref.proposals_per_epoch_ == lost.proposals_per_epoch_
