"""BP-means variants (docs/algorithms.md 2.3, 2.4, 2.6, 2.8): capped BP-means (eq. 15) with OCC == serial, the
``init="sample"`` restarts (feature recovery, redundant-feature deletion), the greedy initialisation's stopping rule,
and collapsed BP-means (eq. 10) against a plain-Python reference."""

import itertools

import dask.array as da
import numpy as np
import pytest

from dclust.cluster import BPMeans
from dclust.cluster._collapsed import CollapsedBPMeans
from dclust.errors import DclustError, InvalidDataError
from dclust.kernels.bpmeans import (
    bp_objective,
    bpmeans_reference,
    delete_redundant,
    feature_means,
    sweep_rows,
)
from dclust.kernels.collapsed import collapsed_bp_pass


def _latent(n=600, d=6, k=4, noise=0.05, seed=0):
    rng = np.random.default_rng(seed)
    A = np.vstack([np.full(d, 0.5), rng.normal(size=(k, d)) * 3])
    Z = np.c_[np.ones(n, int), rng.integers(0, 2, size=(n, k))]
    return Z @ A + noise * rng.normal(size=(n, d))


def _images(n, noise=0.05, seed=0):
    """6 x 6 images: random subsets of 4 binary patterns (bar, square, diagonal, corner) plus noise."""
    F = np.zeros((4, 6, 6))
    F[0, 1, :] = 1
    F[1, 3:5, 3:5] = 1
    F[2][np.arange(6), np.arange(6)] = 1
    F[3, 4:, :2] = 1
    F = F.reshape(4, 36)
    rng = np.random.default_rng(seed)
    return rng.integers(0, 2, size=(n, 4)) @ F + noise * rng.normal(size=(n, 36)), F


def _swept(X, A):
    Z = np.zeros((len(X), A.shape[0]), np.uint8)
    if A.shape[0]:
        sweep_rows(X, Z, A, repeat=True)
    return Z


# ------------------------------------------------------------------------------------------- capped (eq. 15)


@pytest.mark.filterwarnings("ignore::dclust.errors.ConvergenceWarning")
@pytest.mark.parametrize("rows,prefix_size,max_proposals", [(600, 0, 4096), (150, 0, 2), (200, 30, 3)])
def test_capped_occ_equals_serial_capped_bpmeans(rows, prefix_size, max_proposals):
    X = _latent()
    lam, cap = 0.02, 3
    with pytest.raises(DclustError, match="Increase lam"):  # uncapped, this lam opens more than 3 features
        BPMeans(lam=lam, init="empty", max_features=cap, random_state=1).fit(X)
    m = BPMeans(lam=lam, init="empty", max_features=cap, capped=True, random_state=1, prefix_size=prefix_size,
                max_proposals=max_proposals, max_iter=6).fit(da.from_array(X, chunks=(rows, -1)))
    assert m.n_latent_features_ <= cap
    Zr, Ar, hr = bpmeans_reference(X, lam, m.serial_order_, max_iter=6, cap=cap)
    np.testing.assert_array_equal(m.allocation_.compute(), Zr)
    np.testing.assert_allclose(m.features_, Ar, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(m.objective_history_, hr, rtol=1e-9)
    J = m.objective_history_
    assert all(b <= a + 1e-10 * (X * X).sum() for a, b in zip(J, J[1:]))


@pytest.mark.parametrize("init", ["greedy", "sample"])
def test_capped_with_every_init_stays_at_the_cap(init):
    X = _latent()
    with pytest.raises(DclustError, match="Increase lam"):
        BPMeans(lam=0.02, init=init, max_features=3, random_state=0).fit(X)
    m = BPMeans(lam=0.02, init=init, max_features=3, capped=True, random_state=0, max_iter=20).fit(X)
    assert m.n_latent_features_ <= 3 and m.init_features_.shape[0] <= 3
    J = m.objective_history_
    assert all(b <= a + 1e-10 * (X * X).sum() for a, b in zip(J, J[1:]))
    assert m.objective_ == pytest.approx(bp_objective(X, m.allocation_, m.features_, 0.02), rel=1e-9)


# -------------------------------------------------------------------------------- init="sample" (restarts)


@pytest.mark.parametrize("rows,prefix_size", [(200, 100), (600, 600)])
def test_sample_init_occ_equals_serial_bpmeans_from_the_sample_features(rows, prefix_size):
    X = _latent(seed=2)
    m = BPMeans(lam=3.0, init="sample", n_init=3, random_state=4, prefix_size=prefix_size, max_proposals=4,
                max_iter=6).fit(da.from_array(X, chunks=(rows, -1)))
    A0 = m.init_features_
    assert A0.shape[0] > 0
    Zr, Ar, hr = bpmeans_reference(X, 3.0, m.serial_order_, features=A0, Z=_swept(X, A0), max_iter=6)
    np.testing.assert_array_equal(m.allocation_.compute(), Zr)
    np.testing.assert_allclose(m.features_, Ar, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(m.objective_history_, hr, rtol=1e-9)


def test_sample_restarts_recover_the_generating_features_where_empty_init_does_not():
    X, F = _images(4000)
    lam = float(np.sqrt(16 * 36 * 0.05**2 * 4))  # the middle of the window of bench_features.py
    m = BPMeans(lam=lam, random_state=0).fit(da.from_array(X, chunks=(1000, -1)))
    rms = [np.sqrt(((m.features_ - f) ** 2).mean(axis=1)).min() for f in F]
    assert m.n_latent_features_ == 4 and max(rms) < 0.01
    empty = [BPMeans(lam=lam, init="empty", random_state=s).fit(X) for s in range(3)]
    assert all(e.n_latent_features_ > 4 for e in empty)  # "combination" features (a + b next to a and -b)
    assert all(m.objective_ < e.objective_ for e in empty)


def test_delete_redundant_strictly_lowers_the_objective():
    X, F = _images(500, seed=3)
    A = np.vstack([F[0] + F[1], F[0], -F[1] + F[2], F[1], F[3], F[2]])  # rows 0, 2 are combinations
    Z = _swept(X, A)
    lam = 2.0
    Z2, A2 = delete_redundant(X, Z, A, lam)
    assert A2.shape[0] < A.shape[0]
    assert bp_objective(X, Z2, A2, lam) < bp_objective(X, Z, feature_means(*_gram(X, Z)), lam)
    # no single further deletion helps
    for k in range(A2.shape[0]):
        keep = [j for j in range(A2.shape[0]) if j != k]
        Zk = np.ascontiguousarray(Z2[:, keep])
        sweep_rows(X, Zk, A2[keep], repeat=True)
        assert bp_objective(X, Zk, A2[keep], lam) >= bp_objective(X, Z2, A2, lam) - 1e-9


def _gram(X, Z):
    Zf = Z.astype(float)
    return Zf.T @ Zf, Zf.T @ X


# ------------------------------------------------------------------------------------ greedy init (2.6)


def test_greedy_init_does_not_open_features_for_noise():
    # A base feature plus noise: no row's squared residual exceeds lam (D sigma^2 = 0.09 << lam), so BP-means
    # would open nothing, yet refitting noise lowers ||X - ZA||^2 by about N sigma^2 / pi = 16 > lam per
    # feature. The greedy draw only takes rows whose residual exceeds lam, so it stops at the base feature.
    rng = np.random.default_rng(0)
    X = 1.0 + 0.05 * rng.normal(size=(20000, 36))
    m = BPMeans(lam=1.0, init="greedy", random_state=0, max_iter=3).fit(da.from_array(X, chunks=(5000, -1)))
    assert m.init_features_.shape[0] == 1
    np.testing.assert_allclose(m.init_features_[0], X.mean(axis=0), rtol=1e-12)
    assert m.n_latent_features_ == 1


def test_greedy_init_still_finds_structure():
    X = _latent(n=2000, seed=5)
    m = BPMeans(lam=3.0, init="greedy", random_state=0).fit(X)
    assert 2 <= m.init_features_.shape[0] <= 12
    R = X - m.allocation_ @ m.features_
    assert (R * R).sum(axis=1).max() <= 3.0  # a BP-means fixed point: no residual above lam


# --------------------------------------------------------------------------------- collapsed BP-means (2.3)


def _j_direct(X, Z, lam):
    """J_CBP from the direct least-squares residual (independent of the kernel's pinv)."""
    if Z.shape[1] == 0:
        return float((X * X).sum())
    Zf = Z.astype(float)
    A = np.linalg.lstsq(Zf, X, rcond=None)[0]
    R = X - Zf @ A
    return float((R * R).sum() + lam * Z.shape[1])


def _cbp_reference(X, lam, order, max_iter=50):
    """Plain-Python collapsed BP-means: every candidate move scored by a direct lstsq solve."""
    n = len(X)
    cols = []  # list of sets of rows
    for _ in range(max_iter):
        moves = 0
        for i in order:
            def mat(cs):
                Z = np.zeros((n, len(cs)), np.uint8)
                for k, c in enumerate(cs):
                    Z[list(c), k] = 1
                return Z

            J = _j_direct(X, mat(cols), lam)
            for k in range(len(cols)):
                trial = [set(c) for c in cols]
                trial[k] ^= {i}
                Jt = _j_direct(X, mat(trial), lam)
                if Jt < J - 1e-9 * abs(J):
                    cols, J, moves = trial, Jt, moves + 1
            kept = []
            for c in cols:
                if c and c not in kept:
                    kept.append(c)
                else:
                    moves += 1
            cols = kept
            J = _j_direct(X, mat(cols), lam)
            if {i} not in cols:
                Jt = _j_direct(X, mat(cols + [{i}]), lam)
                if Jt < J - 1e-9 * abs(J):
                    cols, moves = cols + [{i}], moves + 1
        if moves == 0:
            break
    Z = np.zeros((n, len(cols)), np.uint8)
    for k, c in enumerate(cols):
        Z[list(c), k] = 1
    return Z


@pytest.fixture(scope="module")
def small():
    rng = np.random.default_rng(7)
    A = np.array([[3.0, 0, 0, 1], [0, 3.0, 0, -1], [0, 0, 3.0, 1]])
    Z = rng.integers(0, 2, size=(40, 3))
    return Z @ A + 0.1 * rng.normal(size=(40, 4))


def test_collapsed_bpmeans_matches_the_plain_python_reference(small):
    m = CollapsedBPMeans(lam=1.0, random_state=3).fit(small)
    Zr = _cbp_reference(small, 1.0, m.order_)
    np.testing.assert_array_equal(m.allocation_, Zr)
    assert m.objective_ == pytest.approx(_j_direct(small, Zr, 1.0), rel=1e-10)  # BP3


def test_collapsed_bpmeans_exact_increments_monotone_and_fixed_point(small):
    lam = 1.0
    m = CollapsedBPMeans(lam=lam, random_state=0).fit(small)
    J = m.objective_history_
    assert all(b <= a + 1e-10 for a, b in zip(J, J[1:])) and m.converged_
    Z = m.allocation_
    # the kernel's J (updated by rank-one changes of G and B) is the direct least-squares objective
    assert m.objective_ == pytest.approx(_j_direct(small, Z, lam), rel=1e-10)
    assert m.objective_ == pytest.approx(bp_objective(small, Z, m.features_, lam), rel=1e-10)
    # no single bit flip and no singleton opening lowers J_CBP at convergence (DP7/2.3)
    for i, k in itertools.product(range(len(small)), range(Z.shape[1])):
        Zt = Z.copy()
        Zt[i, k] ^= 1
        assert _j_direct(small, Zt, lam) >= m.objective_ - 1e-9
    for i in range(len(small)):
        col = np.zeros((len(small), 1), np.uint8)
        col[i] = 1
        assert _j_direct(small, np.hstack([Z, col]), lam) >= m.objective_ - 1e-9
    # one more pass changes nothing
    assert collapsed_bp_pass(small, m.order_, Z.copy(), lam, float((small * small).sum()))[1] == 0


def test_collapsed_bpmeans_large_lam_and_zero_lam(small):
    assert CollapsedBPMeans(lam=1e9, random_state=0).fit(small).n_latent_features_ == 0
    m = CollapsedBPMeans(lam=0.0, random_state=0, max_iter=5).fit(small[:8])
    assert m.objective_ == pytest.approx(0.0, abs=1e-9)  # lam = 0: the rows are reconstructed exactly


def test_collapsed_bpmeans_size_limit_and_bad_data(small):
    with pytest.raises(InvalidDataError, match="max_samples=10"):
        CollapsedBPMeans(max_samples=10).fit(da.from_array(small, chunks=(20, -1)))
    bad = small.copy()
    bad[25, 1] = np.inf
    with pytest.raises(InvalidDataError, match="chunk 1"):
        CollapsedBPMeans().fit(da.from_array(bad, chunks=(20, -1)))
