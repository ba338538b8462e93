"""RDP-means (docs/algorithms.md 5.2-5.5, 8.4): serial equivalence of the coloured OCC passes, monotone objective,
reduction to DP-means, large-xi behaviour, the sparse link counts, dask == numpy, KL, bad input."""

from __future__ import annotations

import warnings

import dask.array as da
import numpy as np
import pytest

from dclust import metrics
from dclust.cluster import DPMeans
from dclust.cluster._rdpmeans import RDPMeans
from dclust.constraints import ConstraintGraph
from dclust.errors import ChunkingError, InvalidDataError, InvalidParameterError
from dclust.kernels.dpmeans import dpmeans_reference
from dclust.kernels.rdpmeans import link_scores, rdpmeans_reference

pytestmark = pytest.mark.filterwarnings("ignore::dclust.errors.ConvergenceWarning")


@pytest.fixture(scope="module")
def three():
    """240 x 2 points in three overlapping blobs, with labels."""
    rng = np.random.default_rng(0)
    centers = np.array([[0.0, 0.0], [3.5, 0.0], [0.0, 3.5]])
    y = np.repeat([0, 1, 2], 80)
    return centers[y] + rng.normal(size=(240, 2)), y


def _check_serial(model, X, G, **kw):
    a, b, s = G.pairs()
    z, C, h = rdpmeans_reference(X, a, b, s * G.weights(), model.lam_, model.serial_order_, **kw)
    np.testing.assert_array_equal(np.asarray(model.labels_), z)
    np.testing.assert_allclose(model.cluster_centers_, C, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(model.objective_history_, h["objective"], rtol=1e-10)
    np.testing.assert_allclose(model.assignment_objective_history_, h["assign"], rtol=1e-10)
    np.testing.assert_allclose(model.start_objective_history_, h["start"], rtol=1e-10)
    assert model.xi_history_ == pytest.approx(h["xi"]) and model.n_iter_ == len(h["xi"])


@pytest.mark.parametrize("chunks, noisy", [(70, False), (240, True), (33, True)])
def test_colored_occ_equals_serial_rdpmeans_on_serial_order(three, chunks, noisy):
    X, y = three
    Xd = da.from_array(X, chunks=(chunks, -1))
    G = ConstraintGraph.from_labels_sample(y, 0.01, rng=1, p=0.85 if noisy else 1.0, chunks=Xd.chunks[0])
    m = RDPMeans(lam=6.0, random_state=2, prefix_size=10, max_proposals=3, max_iter=8).fit(Xd, constraints=G)
    assert m.n_colors_ >= 2
    orders = m.serial_order_
    assert all(np.array_equal(np.sort(o), np.arange(X.shape[0])) for o in orders)
    _check_serial(m, X, G, max_iter=8)


def test_serial_equivalence_with_kl_divergence_and_weighted_links():
    rng = np.random.default_rng(5)
    rates = rng.gamma(1.0, 4.0, size=(3, 6))
    y = np.repeat([0, 1, 2], 40)
    X = rng.poisson(rates[y] * 3).astype(np.float64)
    Xd = da.from_array(X, chunks=(50, -1))
    a, b, _ = ConstraintGraph.from_labels_sample(y, 0.02, rng=0).pairs()
    w = rng.uniform(0.5, 2.0, a.size)
    G = ConstraintGraph.from_pairs(a, b, y[a] == y[b], n_samples=120, chunks=Xd.chunks[0], weight=w)
    m = RDPMeans(lam=0.15, divergence="kl", random_state=0, prefix_size=5, max_proposals=4, max_iter=6)
    m.fit(Xd, constraints=G)
    assert m.n_clusters_ >= 2
    _check_serial(m, X, G, max_iter=6, divergence="kl")
    np.testing.assert_allclose(m.cluster_centers_.sum(axis=1), 1.0)  # means of normalised rows
    np.testing.assert_array_equal(m.predict(X[:10]), m.predict(Xd)[:10].compute())


def test_objective_is_monotone_at_fixed_xi_and_within_each_annealed_iteration(three):
    X, y = three
    G = ConstraintGraph.from_labels_sample(y, 0.02, rng=4, p=0.9)
    fixed = RDPMeans(lam=5.0, xi0=2.0, xi_rate=1.0, random_state=0, max_iter=15).fit(X, constraints=G)
    seq = []
    for s, a, o in zip(fixed.start_objective_history_, fixed.assignment_objective_history_, fixed.objective_history_):
        seq += [s, a, o]
    assert all(later <= earlier * (1 + 1e-12) + 1e-9 for earlier, later in zip(seq, seq[1:]))
    assert fixed.converged_
    annealed = RDPMeans(lam=5.0, random_state=0, max_iter=10).fit(X, constraints=G)
    for s, a, o in zip(annealed.start_objective_history_, annealed.assignment_objective_history_,
                       annealed.objective_history_):
        assert a <= s + 1e-9 and o <= a + 1e-9
    assert annealed.xi_history_ == pytest.approx([0.001 * 2**k for k in range(annealed.n_iter_)])
    assert annealed.objective_paper_ == pytest.approx(
        annealed.objective_ - annealed.xi_ * (G.n_must - annealed.n_violated_[0])
        + annealed.xi_ * annealed.n_violated_[1])


def test_without_links_rdpmeans_is_dpmeans(three):
    X, _ = three
    Xd = da.from_array(X, chunks=(50, -1))
    kw = dict(lam=4.0, random_state=7, prefix_size=20, max_proposals=5)
    rdp = RDPMeans(**kw, max_iter=20).fit(Xd)
    # DPMeans visits rows in its keyed order and RDPMeans in its per-block one: both equal serial DP-means on their
    # own serial_order_, which is what "without links RDP-means is DP-means" means here.
    z, C, history = dpmeans_reference(X, 4.0, rdp.serial_order_, max_iter=20)
    np.testing.assert_allclose(rdp.cluster_centers_, C, rtol=1e-10)
    np.testing.assert_array_equal(rdp.labels_.compute(), z)
    assert rdp.objective_ == pytest.approx(history[-1], rel=1e-10)
    dp = DPMeans(**kw).fit(Xd)
    z, C, history = dpmeans_reference(X, 4.0, dp.serial_order_, max_iter=20)
    np.testing.assert_allclose(dp.cluster_centers_, C, rtol=1e-10)
    assert rdp.n_colors_ == 0 and rdp.converged_
    # the serial reference with xi0 = 0 and links equals serial DP-means on the same order
    y = np.repeat([0, 1, 2], 80)
    a, b, s = ConstraintGraph.from_labels_sample(y, 0.05, rng=0).pairs()
    order = np.random.default_rng(0).permutation(X.shape[0])
    z, C, _ = rdpmeans_reference(X, a, b, s * 1.0, 4.0, order, xi0=0.0, max_iter=30)
    zd, Cd, _ = dpmeans_reference(X, 4.0, order, max_iter=30)
    np.testing.assert_array_equal(z, zd)
    np.testing.assert_allclose(C, Cd, rtol=1e-12)


def test_large_xi_satisfies_noiseless_links_and_beats_dpmeans(three):
    X, y = three
    # noiseless links: every row must-linked to 4 random rows of its class, plus cannot-links between classes
    rng = np.random.default_rng(3)
    i, j, ml = [], [], []
    for c in range(3):
        members = np.flatnonzero(y == c)
        for _ in range(4):
            i += members.tolist()
            j += rng.permutation(members).tolist()
            ml += [True] * members.size
    a, b = rng.integers(0, 240, 300), rng.integers(0, 240, 300)
    keep = y[a] != y[b]
    i += a[keep].tolist()
    j += b[keep].tolist()
    ml += [False] * int(keep.sum())
    G = ConstraintGraph.from_pairs(i, j, ml, n_samples=240, chunks=(120, 120))
    Xd = da.from_array(X, chunks=(120, -1))
    m = RDPMeans(lam=4.0, xi0=0.5, random_state=0, max_iter=12).fit(Xd, constraints=G)
    assert m.xi_ > 100 * X.var() * X.shape[1]
    assert m.n_violated_ == (0, 0)
    labels = m.labels_.compute()
    for c in range(3):
        assert np.unique(labels[y == c]).size == 1
    dp = DPMeans(lam=4.0, random_state=0).fit(Xd)
    f_rdp = metrics.pairwise_f_measure(y, labels)
    assert f_rdp >= metrics.pairwise_f_measure(y, dp.predict(Xd).compute())
    assert f_rdp == pytest.approx(1.0)


def test_sparse_link_counts_equal_a_brute_force_count():
    from dclust._dask.links import build_layout

    rng = np.random.default_rng(8)
    n = 90
    y = rng.integers(0, 3, n)
    G = ConstraintGraph.from_labels_sample(y, 0.05, rng=2, p=0.8, chunks=(30, 25, 35))
    layout = build_layout(G, G.chunks, "serial")
    layout.set_order(12345)
    z = rng.integers(0, 4, layout.n_nodes)  # labels of the linked rows
    E = np.zeros((n, n))
    a, b, s = G.pairs()
    E[a, b] = E[b, a] = s
    z_full = np.full(n, -1)
    z_full[layout.nodes] = z
    seen = []
    for tile in layout.tiles:
        L = link_scores(tile.indptr, tile.cols, tile.vals, z, 4)
        rows = tile.rows
        np.testing.assert_array_equal(rows, layout.nodes[tile.ids])
        f = np.stack([((E[rows] == 1) & (z_full[None, :] == k)).sum(axis=1) for k in range(4)], axis=1)
        s_ = np.stack([((E[rows] == -1) & (z_full[None, :] == k)).sum(axis=1) for k in range(4)], axis=1)
        np.testing.assert_array_equal(L, f - s_)
        seen.append(tile.ids)
    np.testing.assert_array_equal(np.sort(np.concatenate(seen)), np.arange(layout.n_nodes))  # each node once


def test_numpy_and_dask_input_give_the_same_model(three):
    X, y = three
    G = ConstraintGraph.from_labels_sample(y, 0.02, rng=6)
    from dclust._validation import check_array

    chunks = check_array(X)[0].chunks[0]
    kw = dict(lam=5.0, random_state=1, max_iter=5)
    a = RDPMeans(**kw).fit(X, constraints=G)  # numpy: the graph is realigned to dclust's chunks
    b = RDPMeans(**kw).fit(da.from_array(X, chunks=(chunks, -1)), constraints=G.rechunk(chunks))
    np.testing.assert_array_equal(a.cluster_centers_, b.cluster_centers_)
    np.testing.assert_array_equal(a.labels_, b.labels_.compute())
    assert a.objective_history_ == b.objective_history_
    assert isinstance(a.labels_, np.ndarray) and isinstance(b.labels_, da.Array)
    np.testing.assert_array_equal(a.fit_predict(X, constraints=G), a.labels_)


def test_jacobi_mode_uses_one_linked_phase_and_has_no_serial_order(three):
    X, y = three
    G = ConstraintGraph.from_labels_sample(y, 0.03, rng=0)
    jac = RDPMeans(lam=4.0, mode="jacobi", xi0=0.01, random_state=0, max_iter=12).fit(X, constraints=G)
    ser = RDPMeans(lam=4.0, xi0=0.01, random_state=0, max_iter=12).fit(X, constraints=G)
    assert jac.n_colors_ == 1 and ser.n_colors_ > 1
    with pytest.raises(InvalidParameterError, match="serialisable"):
        jac.serial_order_
    dp_f = metrics.pairwise_f_measure(y, DPMeans(lam=4.0, random_state=0).fit(X).predict(X))
    assert metrics.pairwise_f_measure(y, jac.labels_) > dp_f
    assert metrics.pairwise_f_measure(y, ser.labels_) > dp_f


def test_bad_input_is_rejected_with_the_fix(three):
    X, y = three
    Xd = da.from_array(X, chunks=(100, -1))
    G = ConstraintGraph.from_labels_sample(y, 0.01, rng=0)
    with pytest.raises(ChunkingError, match=r"G = G.rechunk\(X.chunks\[0\]\)"):
        RDPMeans(lam=1.0).fit(Xd, constraints=G)
    with pytest.raises(InvalidDataError, match="over 10 rows"):
        RDPMeans(lam=1.0).fit(X, constraints=ConstraintGraph.from_pairs([0], [1], True, n_samples=10))
    with pytest.raises(InvalidParameterError, match="ConstraintGraph"):
        RDPMeans(lam=1.0).fit(X, constraints=[(0, 1, 1)])
    for bad in (dict(lam=0.0), dict(lam=-1.0), dict(lam=1.0, xi0=0.0), dict(lam=1.0, xi_rate=0.5),
                dict(lam=1.0, n_clusters=3), dict(), dict(n_clusters=3, divergence="kl")):
        with pytest.raises(InvalidParameterError):
            RDPMeans(**bad).fit(X)
    with pytest.raises(InvalidDataError, match="counts"):
        RDPMeans(lam=1.0, divergence="kl").fit(X)  # negative values are not counts
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(Warning, match="max_iter=2"):
            RDPMeans(lam=1.0, max_iter=2).fit(X, constraints=G)


def test_n_clusters_sets_lam_by_the_furthest_first_heuristic(three):
    X, y = three
    m = RDPMeans(n_clusters=3, random_state=0, max_iter=3).fit(
        X, constraints=ConstraintGraph.from_labels_sample(y, 0.02, rng=0))
    assert m.lam_ > 0 and m.n_clusters_ >= 2


def test_color_phases_of_a_pass_run_as_one_task_graph(three):
    """docs/algorithms.md 8.4 with the proposals validated inside the graph: one compute per pass for all colour
    phases however many colours, and still serial RDP-means on ``serial_order_``."""
    from dask.callbacks import Callback

    X, y = three
    n = X.shape[0]
    ring = np.arange(n)  # a long odd cycle of must-links plus chords: >= 3 colours
    G = ConstraintGraph.from_pairs(np.concatenate([ring, ring[::7]]),
                                   np.concatenate([(ring + 1) % n, (ring[::7] + 3) % n]),
                                   True, n_samples=n, check_feasible=False)
    Xd = da.from_array(X, chunks=(60, -1))
    G = G.rechunk(Xd.chunks[0])
    starts = []

    class Count(Callback):
        def _start(self, dsk):
            starts.append(1)

    with Count():
        m = RDPMeans(lam=6.0, random_state=1, max_iter=4).fit(Xd, constraints=G)
    assert m.n_colors_ >= 3
    # every row is linked (no phase 0): one round trip per colour would be >= 4 passes x n_colors_ computes alone
    assert len(starts) < 4 * m.n_colors_
    _check_serial(m, X, G, max_iter=4)


def test_a_pass_with_unlinked_and_linked_rows_is_one_compute(three):
    """Phase 0 (one OCC epoch) and every colour phase of a pass go to the scheduler as one graph: each extra pass
    costs exactly one compute, and the result is still serial RDP-means on ``serial_order_``."""
    from dask.callbacks import Callback

    X, y = three
    Xd = da.from_array(X, chunks=(50, -1))
    G = ConstraintGraph.from_labels_sample(y, 0.002, rng=3, p=0.9, chunks=Xd.chunks[0])  # some rows linked
    counts = {}
    for it in (2, 4):
        starts = []

        class Count(Callback):
            def _start(self, dsk):
                starts.append(1)

        with Count():
            m = RDPMeans(lam=6.0, random_state=4, prefix_size=10, max_iter=it).fit(Xd, constraints=G)
        assert m.n_iter_ == it and m.n_colors_ >= 2
        assert all(len(rec.phase0.epochs) == 1 for rec in m._order_records[3][1:])  # phase 0: one epoch per pass
        counts[it] = len(starts)
    assert counts[4] - counts[2] == 2
    _check_serial(m, X, G, max_iter=4)


def test_color_phases_found_beside_phase_0_hold_unless_its_validation_opens_a_center(three, monkeypatch):
    """The colour phases of a pass run beside phase 0's block tasks from the pass's centres; that result is the
    pass's when phase 0's validation opens no centre, and they run again from the centres it leaves when it opens
    one: both happen in this fit, which is still serial RDP-means on ``serial_order_``."""
    import dclust._dask.rdp as rdp

    X, y = three
    Xd = da.from_array(X, chunks=(50, -1))
    G = ConstraintGraph.from_labels_sample(y, 0.002, rng=3, p=0.9, chunks=Xd.chunks[0])
    seen = {"kept": 0, "again": 0}
    task = rdp._epoch_task

    def spy(epoch, C, tiles, guess, **kw):
        v, out = task(epoch, C, tiles, guess, **kw)
        if tiles is not None:
            seen["kept" if out is guess[0] else "again"] += 1
        return v, out

    monkeypatch.setattr(rdp, "_epoch_task", spy)
    m = RDPMeans(lam=6.0, random_state=4, prefix_size=2, max_proposals=10_000, max_iter=4).fit(Xd, constraints=G)
    assert seen["kept"] >= 1 and seen["again"] >= 1
    _check_serial(m, X, G, max_iter=4)


@pytest.mark.parametrize("d", [1, 3, 8, 9, 17, 64, 130, 300])
def test_divergences_of_a_color_phase_equal_the_direct_ones(d):
    """The colour-phase kernel computes Euclidean divergences without a temporary: bit-identical to the direct
    matrix (the serial-order equality depends on it), for numbers of features on both sides of numpy's
    pairwise-summation blocks (8, 128)."""
    from dclust.kernels.divergence import divergence_matrix
    from dclust.kernels.rdpmeans import _divergences

    rng = np.random.default_rng(9)
    X = rng.normal(size=(517, d)) * 10.0 ** rng.uniform(-3, 3, size=(517, d))
    C = rng.normal(size=(30, d))
    np.testing.assert_array_equal(_divergences(X, C, "euclidean"), divergence_matrix(X, C, "euclidean"))
    np.testing.assert_array_equal(_divergences(X.astype(np.float32), C, "euclidean"),
                                  divergence_matrix(X.astype(np.float32), C, "euclidean"))
    assert _divergences(X, C[:0], "euclidean").shape == (X.shape[0], 0)


@pytest.mark.parametrize("seed", range(4))
def test_the_fused_link_argmin_equals_the_numpy_expressions(seed):
    """``_link_argmin`` (the colour phases' choice, no n x K temporary) gives the numbers of
    ``argmin(D - xi * link_scores(...))`` bit for bit: ties (integer distances), a NaN, a CSR that starts mid-way."""
    from dclust.kernels.rdpmeans import _link_argmin

    rng = np.random.default_rng(seed)
    for t in range(60):
        n, k = int(rng.integers(1, 60)), int(rng.integers(1, 9))
        D = rng.integers(0, 4, (n, k)).astype(float) if t % 2 else rng.random((n, k)) * 10
        if t % 7 == 0:
            D[rng.integers(0, n), rng.integers(0, k)] = np.nan
        indptr = np.concatenate([[0], np.cumsum(rng.integers(0, 4, n))]).astype(np.int64)
        n_nb = int(rng.integers(1, 10))
        cols = rng.integers(0, n_nb, indptr[-1]).astype(np.int64)
        vals = rng.choice([-1.0, 1.0, 0.5], indptr[-1])
        z, xi, start = rng.integers(0, k, n_nb).astype(np.int64), float(rng.choice([0.0, 3.7, 1e3])), int(
            rng.integers(0, n))
        lo = indptr[start]
        dist = D[start:] - xi * link_scores(indptr[start:] - lo, cols[lo:], vals[lo:], z, k)
        best = np.argmin(dist, axis=1)
        rows = np.arange(n - start)
        got = _link_argmin(np.ascontiguousarray(D[start:]), indptr[start:], cols, vals, z, xi)
        np.testing.assert_array_equal(got[0], best)
        np.testing.assert_array_equal(got[1], dist[rows, best])
        np.testing.assert_array_equal(got[2], D[start:][rows, best])


@pytest.mark.parametrize("rows_per_tile", [5, 16384])
def test_a_color_phase_equals_the_numpy_expressions(rows_per_tile, monkeypatch):
    """``color_phase`` (one call per colour, distances in tiles of rows): labels, proposals and statistics of the
    numpy expressions ``argmin(D - xi * L)``, a proposal where that value exceeds lam, and
    ``ClusterStats.from_labels`` of the other rows."""
    from dclust.kernels import rdpmeans as K
    from dclust.kernels.stats import ClusterStats, point_keys

    monkeypatch.setattr(K, "_ROWS", rows_per_tile)
    rng = np.random.default_rng(3)
    m, d, k, n_nodes = 40, 3, 4, 90
    X = rng.normal(size=(m, d)) * 2
    C = rng.normal(size=(k, d))
    rows = np.sort(rng.choice(10_000, m, replace=False))
    indptr = np.concatenate([[0], np.cumsum(rng.integers(0, 4, m))]).astype(np.int64)
    cols = rng.integers(0, n_nodes, indptr[-1]).astype(np.int64)
    vals = rng.choice([-1.0, 1.0, 0.5], indptr[-1])
    z = rng.integers(0, k, n_nodes).astype(np.int64)
    xi, lam = 0.7, 3.0
    labels, stats, prop = K.color_phase(X, point_keys(rows), indptr=indptr, cols=cols, vals=vals, z=z, centers=C,
                                        lam=lam, xi=xi, kind="euclidean")
    D = ((X[:, None, :] - C[None]) ** 2).sum(axis=2)
    value = D - xi * link_scores(indptr, cols, vals, z, k)
    best = np.argmin(value, axis=1)
    proposed = value[np.arange(m), best] > lam
    assert 0 < proposed.sum() < m  # both kinds of rows
    np.testing.assert_array_equal(prop, np.flatnonzero(proposed))
    np.testing.assert_array_equal(labels, np.where(proposed, -1, best))
    keep = ~proposed
    ref = ClusterStats.from_labels(X[keep], best[keep], k, cost=float(D[keep, best[keep]].sum()), index=rows[keep])
    np.testing.assert_array_equal(stats.weight, ref.weight)
    np.testing.assert_array_equal(stats.mean, ref.mean)
    np.testing.assert_array_equal(stats.fingerprint, ref.fingerprint)
    np.testing.assert_allclose(stats.scatter, ref.scatter, rtol=1e-12)
    assert stats.cost == pytest.approx(ref.cost, rel=1e-12) and stats.n_rows == keep.sum()
