"""D-Means kernels (docs/algorithms.md section 3): pure numpy/numba, one time step's arrays in, arrays out.

Slots. During a time step the clusters are numbered by *slot*: slots ``0..n_old-1`` are the old clusters of the
state (in id order), slots ``n_old..`` are the clusters opened during the step, in creation order. A slot is
*instantiated* while it holds a centre ``theta`` for this step; an old slot that is not instantiated is a revival
option. Label decisions follow eq. 28 with the tie rules T1-T3 of section 0 (current cluster, then instantiated,
then revived old, then new; lowest slot within a kind; a new cluster only when strictly better) and the
within-pass semantics (centres fixed during a pass, one-point optima for revived/new clusters, emptied clusters
stay until the end of the pass).

Label decisions are unweighted, as in DP-means: ``sample_weight`` weights the centre update (eq. 29), the
carry-over (eq. 24) and the objective (eq. 18), not the per-point choice.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numba
import numpy as np

from .distances import (_FAST, _TILE, _U, _float_block, _key, _one_blas_thread, _tile_argmin, _tile_buffers,
                        _tile_keys, _tile_products, fold_row, order_keys, row_diff_sq, row_sq_dist,
                        stats_from_assignment)
from .simd import wide_vectors
from .stats import ClusterStats

__all__ = [
    "reparameterise",
    "gammas",
    "StepState",
    "label_pass",
    "best_options",
    "dm_propose",
    "dm_assign",
    "keyed_rows",
    "first_nonfinite_row",
    "serial_step",
    "assign_instantiated",
    "end_of_pass",
    "PassResult",
    "StepResult",
    "carry_over",
    "dmeans_reference",
]

_JIT = dict(nogil=True, cache=True)
_NO_KEY = np.uint64(0)  # the fingerprint key of a row whose partition nothing compares


def reparameterise(lam: float, T_Q: float, k_tau: float) -> tuple[float, float]:
    """``(Q, tau)`` from ``(lam, T_Q, k_tau)`` ([DM] eq. 30): ``Q = lam/T_Q``, ``tau = (T_Q(k_tau-1)+1)/(T_Q-1)``.

    Examples
    --------
    >>> Q, tau = reparameterise(0.04, 6.8, 1.01)
    >>> round(Q, 7), round(tau, 6)
    (0.0058824, 0.184138)
    """
    return lam / T_Q, (T_Q * (k_tau - 1.0) + 1.0) / (T_Q - 1.0)


def gammas(weights: np.ndarray, ages: np.ndarray, tau: float) -> np.ndarray:
    """``gamma_k = (1/w_k + tau * dt_k)^-1`` ([DM] eq. 19) for the old clusters."""
    w = np.asarray(weights, dtype=np.float64)
    return 1.0 / (1.0 / w + tau * np.asarray(ages, dtype=np.float64))


@dataclass
class StepState:
    """The old clusters as seen by one time step, plus the instantiated centres of the current pass.

    ``phi`` (n_old, D), ``gamma`` (n_old,), ``ages`` (n_old,) describe the old clusters at the start of the step;
    ``theta`` (n_slots, D) and ``inst`` (n_slots,) the slots of the current pass (rows of uninstantiated slots are
    meaningless).
    """

    phi: np.ndarray
    gamma: np.ndarray
    ages: np.ndarray
    lam: float
    Q: float
    theta: np.ndarray = field(default=None)  # type: ignore[assignment]
    inst: np.ndarray = field(default=None)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        self.phi = np.ascontiguousarray(self.phi, dtype=np.float64)
        self.gamma = np.asarray(self.gamma, dtype=np.float64)
        self.ages = np.asarray(self.ages, dtype=np.int64)
        if self.theta is None:
            self.theta = np.zeros_like(self.phi)
            self.inst = np.zeros(self.n_old, dtype=np.bool_)

    @property
    def n_old(self) -> int:
        """Clusters carried over from earlier batches (rows of ``phi``)."""
        return len(self.phi)

    @property
    def n_slots(self) -> int:
        """Cluster slots of this batch: the old clusters, then the new ones (entries of ``inst``)."""
        return len(self.inst)

    @property
    def revival_scale(self) -> np.ndarray:
        """``gamma/(gamma+1)``: the factor of ``||y - phi||^2`` in the revival cost."""
        return self.gamma / (self.gamma + 1.0)

    @property
    def revival_base(self) -> np.ndarray:
        """``Q * dt``: the fixed part of the revival cost."""
        return self.Q * self.ages.astype(np.float64)


@numba.njit(inline="always", **_JIT)
def _row_dists(Y, i, CT, n, out):
    """``out[k] = ||Y[i] - C[k]||^2`` for the first ``n`` columns of ``CT = C.T``, terms summed as in row_sq_dist."""
    for k in range(n):
        out[k] = 0.0
    for j in range(Y.shape[1]):
        y = Y[i, j]
        for k in range(n):
            t = y - CT[j, k]
            out[k] += t * t


@numba.njit(**_JIT)
def _label_pass(Y, order, z, cost, theta, inst, phi, gamma, revc, revb, n_slots, lam, prefer_current):
    n_old = phi.shape[0]
    d = Y.shape[1]
    # Centres transposed (D, slots) so that a row's distances to every slot run along contiguous memory; each
    # distance sums its D terms in the order of row_sq_dist, so the arithmetic (and every decision) is the same.
    thT = np.empty((d, theta.shape[0]))
    for k in range(n_slots):
        for j in range(d):
            thT[j, k] = theta[k, j]
    phT = np.ascontiguousarray(phi.T)
    dist = np.empty(theta.shape[0])
    rdist = np.empty(n_old)
    n_unrevived = 0
    for k in range(n_old):
        if not inst[k]:
            n_unrevived += 1
    for i in order:
        _row_dists(Y, i, thT, n_slots, dist)
        best = np.inf
        bk = -1
        revive = False
        cur = z[i]
        if prefer_current and cur >= 0:  # T1: the current cluster wins ties
            best = dist[cur]
            bk = cur
        for k in range(n_slots):  # T2: instantiated before revived, lowest slot first
            if inst[k] and dist[k] < best:
                best = dist[k]
                bk = k
        if n_unrevived > 0:
            _row_dists(Y, i, phT, n_old, rdist)
            for k in range(n_old):
                if not inst[k]:
                    c = revb[k] + revc[k] * rdist[k]
                    if c < best:
                        best = c
                        bk = k
                        revive = True
        if lam < best:  # T3: a new cluster only when strictly better
            bk = n_slots
            n_slots += 1
            for j in range(d):
                theta[bk, j] = Y[i, j]
                thT[j, bk] = Y[i, j]
            inst[bk] = True
            best = lam
        elif revive:  # one-point optimum of the revived cluster
            g = gamma[bk]
            for j in range(d):
                theta[bk, j] = (g * phi[bk, j] + Y[i, j]) / (g + 1.0)
                thT[j, bk] = theta[bk, j]
            inst[bk] = True
            n_unrevived -= 1
        z[i] = bk
        cost[i] = best
    return n_slots


def label_pass(Y, order, z, state: StepState, *, prefer_current: bool = True):
    """One serial label pass (eq. 28) over the rows ``Y[order]``; updates ``z`` in place and ``state``.

    ``z`` holds the labels (slots) of the previous pass, or -1. Returns the decision cost of every row (the eq. 28
    cost of the chosen option at the moment of choice; ``lam`` for a row that opened a cluster).
    """
    Y = np.ascontiguousarray(Y, dtype=np.float64)
    order = np.asarray(order, dtype=np.int64)
    cap = state.n_slots + order.size
    theta = np.zeros((cap, Y.shape[1]))
    theta[: state.n_slots] = state.theta
    inst = np.zeros(cap, dtype=np.bool_)
    inst[: state.n_slots] = state.inst
    Yo = Y[order]  # visit rows contiguously (the order is random)
    zo = z[order]
    co = np.full(order.size, np.nan)
    n = _label_pass(Yo, np.arange(order.size), zo, co, theta, inst, state.phi, state.gamma, state.revival_scale,
                    state.revival_base, state.n_slots, float(state.lam), bool(prefer_current))
    z[order] = zo
    cost = np.full(Y.shape[0], np.nan)
    cost[order] = co
    state.theta, state.inst = theta[:n], inst[:n]
    return cost


@numba.njit(**_JIT)
def _best_options(Y, theta, inst, phi, revc, revb):
    n = Y.shape[0]
    n_old = phi.shape[0]
    islot = np.full(n, -1, dtype=np.int64)
    icost = np.full(n, np.inf)
    rslot = np.full(n, -1, dtype=np.int64)
    rcost = np.full(n, np.inf)
    for i in range(n):
        for k in range(inst.shape[0]):
            if inst[k]:
                c = row_sq_dist(Y, i, theta, k)
                if c < icost[i]:
                    icost[i] = c
                    islot[i] = k
        for k in range(n_old):
            if not inst[k]:
                c = revb[k] + revc[k] * row_sq_dist(Y, i, phi, k)
                if c < rcost[i]:
                    rcost[i] = c
                    rslot[i] = k
    return islot, icost, rslot, rcost


def best_options(Y, state: StepState):
    """Per row: the best instantiated slot and its cost, and the best revival slot and its cost (snapshot only).

    The arithmetic is that of :func:`label_pass`, so a row whose best option is instantiated
    (``icost <= rcost`` and ``icost <= lam``) gets the same label from both.
    """
    Y = np.ascontiguousarray(Y, dtype=np.float64)
    return _best_options(Y, state.theta, state.inst, state.phi, state.revival_scale, state.revival_base)


def dm_propose(Xb, wb, *, offset: int, block_index: int, mix: int, lo: int, hi: int, state: StepState):
    """One keyed OCC epoch of D-Means on one block (docs/algorithms.md 8.5): the rows whose order key lies in
    ``[lo, hi]`` and whose best eq. 28 option in the snapshot ``state`` is an instantiated slot are folded into
    per-slot statistics; the others (best option a revival or a new cluster) are proposed.

    Returns ``(stats, n_rows, proposals, ())``: ``n_rows`` rows lie in the range; ``proposals`` are local row
    indices. Rows with NaN/inf are neither kept nor proposed (``stats.bad_block`` names the block)."""
    n = Xb.shape[0]
    if (lo, hi) == (0, 2**64 - 1):  # every row (later passes): no keys, no gather
        taken = np.arange(n)
        Y = np.ascontiguousarray(Xb, dtype=np.float64)
    else:
        keys = order_keys(mix, np.arange(offset, offset + n))
        taken = np.flatnonzero((keys >= np.uint64(lo)) & (keys <= np.uint64(hi)))
        Y = np.ascontiguousarray(Xb[taken], dtype=np.float64).reshape(-1, Xb.shape[1])
    islot, icost, _, rcost = best_options(Y, state)
    finite = np.isfinite(Y).all(axis=1)
    keep = finite & (islot >= 0) & (icost <= rcost) & (icost <= state.lam)
    labels = np.full(n, -1, dtype=np.int32)
    dist = np.zeros(n)
    labels[taken[keep]] = islot[keep]
    dist[taken[keep]] = icost[keep]
    stats = stats_from_assignment(Xb, labels, dist, wb, state.n_slots, offset, block_index)
    stats.n_rows = int(taken.size)
    stats.bad_block = block_index if not finite.all() else -1
    return stats, taken.size, taken[finite & ~keep], ()


@numba.njit(**_FAST)
def _dm_block(X, o, Ck, cc, C, scale, base, slot, n_inst, w, has_w, offset, ranged, mix, lo, hi, lam, weight,
              delta, cost_k, fp, proposals):
    """One read of the block: the best eq. 28 option of every row in the key range, folded at once into per-slot
    accumulators when it is an instantiated slot (and no dearer than ``lam``), proposed otherwise.

    Candidates ``C`` are the instantiated centres (the first ``n_inst``), then the old uninstantiated ones (cost
    ``base + scale * d``); ``slot`` maps candidates to slots. Candidate distances come from one BLAS product per
    tile of rows in the block's dtype, about the point ``o``, laid out candidate by candidate as in
    :func:`dclust.kernels.distances._lloyd_block` (``Ck`` is ``-2 (C - o)``), so that both argmins (instantiated,
    revived) run branch-free over contiguous rows; the costs the decision compares are then recomputed exactly in
    float64. ``delta``/``cost_k`` accumulate ``w (x - c)`` and ``w ||x - c||^2`` per slot; ``fp`` stays zero (the
    fused pass ends a batch: no later pass compares its partition, and the row keys cost 3-6 % of the kernel).
    Returns ``(n_bad, n_taken, n_proposed)``; only the first ``len(proposals)`` proposals are written (the count
    goes on).
    """
    wide_vectors()
    n, d = X.shape
    k = Ck.shape[0]
    tile = min(n, _TILE)
    G, T, rows = _tile_buffers(X, k, tile)
    bv = np.empty(tile, dtype=X.dtype)
    bi = np.empty(tile, dtype=np.int64)
    brv = np.empty(tile)
    br = np.empty(tile, dtype=np.int64)
    order = np.empty(tile if ranged else 0, dtype=np.uint64)  # a tile's order keys, made in one vectorized loop
    t = np.empty(d)
    n_bad = 0
    n_taken = 0
    n_prop = 0
    for s in range(0, n, _TILE):
        m = min(n, s + _TILE) - s
        if m < tile:  # the last, short tile (np.dot wants contiguous operands)
            G, T, rows = _tile_buffers(X, k, m)
        if k > 0:
            _tile_products(X, s, m, o, Ck, T, G, rows)
        _tile_argmin(G, cc, 0, n_inst, m, bv, bi)
        for r in range(m):
            brv[r] = np.inf
            br[r] = -1
        for c in range(n_inst, k):  # the revivals' costs are affine in the distance: lowest candidate on ties
            cv, sc, b0 = cc[c], scale[c], base[c]
            for r in range(m):
                v = b0 + sc * (G[c, r] + cv)
                closer = v < brv[r]
                br[r] = c if closer else br[r]
                brv[r] = v if closer else brv[r]
        if ranged:
            _tile_keys(order, offset, s, m, mix)
        for r in range(m):
            i = s + r
            if ranged and (order[r] < lo or order[r] > hi):
                continue
            n_taken += 1
            b, c = bi[r], br[r]
            ui = _U(i)  # unsigned indices: no negative-index wraparound per access
            q = row_diff_sq(X, ui, C, _U(b), t) if b >= 0 else np.inf
            finite = np.isfinite(q) if b >= 0 else True
            if b < 0:
                for j in range(d):
                    if not np.isfinite(X[ui, j]):
                        finite = False
            if not finite:
                n_bad += 1
                continue
            # the exact revival cost decides only for a finite instantiated option within lam
            rv = base[c] + scale[c] * row_sq_dist(X, ui, C, _U(c)) if c >= 0 and b >= 0 and q <= lam else np.inf
            if b < 0 or q > rv or q > lam:  # T2: instantiated before revived; T3: new only when strictly better
                if n_prop < proposals.shape[0]:
                    proposals[n_prop] = i
                n_prop += 1
                continue
            fold_row(weight, cost_k, fp, delta, _U(slot[b]), w[ui] if has_w else 1.0, q, _NO_KEY, t)  # no fingerprint
    return n_bad, n_taken, n_prop


def dm_assign(Xb, wb, *, offset: int, block_index: int, mix: int, lo: int, hi: int, state: StepState):
    """:func:`dm_propose` with the fused kernel of the Lloyd pass: one read, no per-row output.

    Same contract (``(stats, n_rows, proposals, ())``, rows with NaN/inf neither kept nor proposed), except that
    ``stats.fingerprint`` is zero: the fused pass is the last of a batch, whose partition nothing compares. The
    kept rows' best option is chosen on float32-rounded distances for float32 blocks (exact float64 for float64
    ones) and its cost recomputed exactly; so a row within rounding of a tie between two instantiated slots may
    take the other one than :func:`label_pass` would, as in DP-means' OCC
    (:func:`dclust.kernels.distances.epoch_stats`).
    """
    X = _float_block(Xb)
    n, d = X.shape
    ks = state.n_slots
    inst = np.flatnonzero(state.inst)
    rev = np.flatnonzero(~state.inst[: state.n_old])
    C = np.ascontiguousarray(np.vstack([state.theta[inst], state.phi[rev]]), dtype=np.float64).reshape(-1, d)
    scale = np.concatenate([np.ones(inst.size), state.revival_scale[rev]])
    base = np.concatenate([np.zeros(inst.size), state.revival_base[rev]])
    slot = np.concatenate([inst, rev]).astype(np.int64)
    o = C.mean(axis=0) if C.shape[0] else np.zeros(d)
    Co = C - o
    Ck = np.ascontiguousarray(-2.0 * Co, dtype=X.dtype)
    cc = (Co * Co).sum(axis=1).astype(X.dtype)
    has_w = wb is not None
    w = np.ascontiguousarray(wb, dtype=np.float64).reshape(n) if has_w else np.empty(0)
    ranged = (lo, hi) != (0, 2**64 - 1)
    proposals = np.empty(n, dtype=np.int64)  # room for every row (pages are touched only by the proposals)
    weight, delta, cost_k, fp = np.zeros(ks), np.zeros((ks, d)), np.zeros(ks), np.zeros(ks, dtype=np.uint64)
    with _one_blas_thread():
        n_bad, n_taken, n_prop = _dm_block(X, o.astype(X.dtype), Ck, cc, C, scale, base, slot, inst.size, w, has_w,
                                           np.uint64(offset), ranged, np.uint64(mix), np.uint64(lo), np.uint64(hi),
                                           float(state.lam), weight, delta, cost_k, fp, proposals)
    center = np.zeros((ks, d))
    center[slot] = C
    safe = np.where(weight > 0, weight, 1.0)
    shift = delta / safe[:, None]
    mean = np.where(weight[:, None] > 0, center + shift, 0.0)
    scatter = np.maximum(cost_k - weight * (shift * shift).sum(axis=1), 0.0)
    stats = ClusterStats(weight, mean, scatter, float(cost_k.sum()), fp, int(n_taken), block_index if n_bad else -1)
    return stats, int(n_taken), proposals[:n_prop], ()


@numba.njit(**_FAST)
def _first_nonfinite(X):
    n, d = X.shape
    for s in range(0, n, _TILE):  # x * 0 is NaN exactly for NaN/inf: a branch-free sum per tile of rows
        e = min(n, s + _TILE)
        acc = 0.0
        for i in range(s, e):
            for j in range(d):
                acc += X[i, j] * 0.0
        if acc != 0.0:
            for i in range(s, e):
                for j in range(d):
                    if not np.isfinite(X[i, j]):
                        return i
    return -1


def first_nonfinite_row(X) -> int:
    """Index of the first row of ``X`` (n, D) holding NaN or infinity, or -1 (one read, no temporary).

    >>> first_nonfinite_row(np.array([[0.0, 1.0], [2.0, np.nan]]))
    1
    """
    return int(_first_nonfinite(_float_block(X)))


@numba.njit(**_JIT)
def _keyed_rows(mix, offset, n, end):
    """Local rows of keys below ``end``, in order: the keys of a tile of rows first (a branch-free loop the
    compiler vectorizes: 2 x faster than testing each key where it is made), then the tile's rows kept."""
    out = np.empty(n, dtype=np.int64)
    below = np.empty(1024, dtype=np.bool_)
    m = 0
    for s in range(0, n, 1024):
        e = min(n, s + 1024)
        for i in range(s, e):
            below[i - s] = _key(np.uint64(offset + i) ^ mix) < end
        for i in range(s, e):
            if below[i - s]:
                out[m] = i
                m += 1
    return out[:m]


def keyed_rows(X, *, mix: int, offset: int, end: int, check: bool = True) -> tuple[np.ndarray, np.ndarray, int]:
    """The rows of a block whose order key (:func:`dclust.kernels.distances.order_keys`) is below ``end``, and
    (with ``check``) a check of every row for NaN/inf.

    Returns ``(local, keys, first_bad)``: local indices (in row order), their keys, and the first local row that
    holds NaN or inf (-1 when none or not checked).
    """
    X = _float_block(X)
    end = min(int(end), 2**64 - 1)
    local = _keyed_rows(np.uint64(mix), np.uint64(offset), X.shape[0], np.uint64(end))
    return local, order_keys(mix, local + offset), first_nonfinite_row(X) if check else -1


@numba.njit(**_JIT)
def _serial_passes(Y, w, theta0, inst0, phi, gamma, ages, revc, revb, lam, Q, max_iter):
    """The passes of :func:`serial_step` in one call: :func:`_label_pass` over the rows in order, then eq. 29
    (the arithmetic of :func:`stats_from_assignment` and :func:`end_of_pass`) and the compaction of the slots,
    until the labels repeat. Returns ``(theta, inst, weight, keep, history, n_iter, converged, rate)`` of the last
    pass (``theta``/``inst`` compacted, ``weight`` and ``keep`` as in :class:`PassResult`)."""
    m, d = Y.shape
    n_old = phi.shape[0]
    k = theta0.shape[0]
    cap = k + m
    theta = np.zeros((cap, d))
    inst = np.zeros(cap, dtype=np.bool_)
    theta[:k] = theta0
    inst[:k] = inst0
    order = np.arange(m)
    z = np.full(m, -1, dtype=np.int64)
    prev = np.empty(m, dtype=np.int64)
    cost = np.empty(m)
    history = np.empty(max_iter)
    remap = np.empty(cap, dtype=np.int64)
    keep = np.empty(0, dtype=np.int64)
    kept_w = np.empty(0)
    converged = False
    rate = 1.0
    n_iter = 0
    while n_iter < max_iter:
        if k + m > theta.shape[0]:  # room for a pass that opens a cluster at every row
            theta = np.vstack((theta[:k], np.zeros((m, d))))
            inst = np.concatenate((inst[:k], np.zeros(m, dtype=np.bool_)))
            remap = np.empty(k + m, dtype=np.int64)
        prev[:] = z
        opened = 0
        inst_before = inst[:k].copy()
        n = _label_pass(Y, order, z, cost, theta, inst, phi, gamma, revc, revb, k, lam, True)
        for c in range(k):
            if inst[c] and not inst_before[c]:
                opened += 1
        opened += n - k
        weight = np.zeros(n)
        mean = np.zeros((n, d))
        for i in range(m):
            c = z[i]
            weight[c] += w[i]
            for j in range(d):
                mean[c, j] += w[i] * np.float64(Y[i, j])
        for c in range(n):
            if weight[c] > 0:
                for j in range(d):
                    mean[c, j] = mean[c, j] / weight[c]
        for c in range(min(n_old, n)):  # eq. 29 for the old clusters with data
            if weight[c] > 0:
                for j in range(d):
                    mean[c, j] = (gamma[c] * phi[c, j] + weight[c] * mean[c, j]) / (gamma[c] + weight[c])
        sse = 0.0  # eq. 18
        for i in range(m):
            c = z[i]
            s = 0.0
            for j in range(d):
                t = np.float64(Y[i, j]) - mean[c, j]
                s += t * t
            sse += w[i] * s
        n_keep = 0
        for c in range(n):
            if c < n_old:
                if weight[c] > 0:
                    sse += Q * ages[c]
                    g = 0.0
                    for j in range(d):
                        t = mean[c, j] - phi[c, j]
                        g += t * t
                    sse += gamma[c] * g
            elif weight[c] > 0:
                sse += lam
            if c < n_old or weight[c] > 0:
                remap[c] = n_keep
                n_keep += 1
            else:
                remap[c] = -1
        keep = np.empty(n_keep, dtype=np.int64)
        kept_w = np.empty(n_keep)
        for c in range(n):
            r = remap[c]
            if r >= 0:
                keep[r] = c
                kept_w[r] = weight[c]
                for j in range(d):
                    theta[r, j] = mean[c, j]
                inst[r] = weight[c] > 0
        for c in range(n_keep, n):
            inst[c] = False
        k = n_keep
        for i in range(m):
            z[i] = remap[z[i]]
        history[n_iter] = sse
        rate = opened / max(m, 1)
        n_iter += 1
        same = True
        for i in range(m):
            if z[i] != prev[i]:
                same = False
                break
        if same:
            converged = True
            break
    return theta[:k].copy(), inst[:k].copy(), kept_w, keep, history[:n_iter].copy(), n_iter, converged, rate


def serial_step(Y, w, state: StepState, *, max_iter: int):
    """One time step of serial D-Means ([DM] Alg. 1, one restart) on rows in memory, visited in row order.

    Label passes (eq. 28 with T1-T3, :func:`label_pass`) and eq. 29 updates alternate until the labels no longer
    change or ``max_iter`` passes. ``w`` weights the rows in eq. 29 and eq. 18 (None: 1). The passes run in one
    compiled call (:func:`_serial_passes`: no Python between passes).

    The step starts from ``state`` as it stands (its instantiated slots stay options until the first pass ends).
    Returns ``(state, result, history, n_iter, converged, rate)``: the state with the instantiated centres of the
    last pass (slots compacted as :func:`end_of_pass` keeps them), its :class:`PassResult`, the objective after
    every pass, and the fraction of rows of the last pass that revived or opened a cluster.

    Examples
    --------
    >>> st = StepState(np.zeros((0, 1)), np.zeros(0), np.zeros(0, np.int64), 1.0, 0.0)
    >>> cur, res, hist, n_iter, converged, rate = serial_step(np.array([[0.0], [0.2], [5.0]]), None, st, max_iter=10)
    >>> res.theta.ravel().tolist(), converged, rate
    ([0.1, 5.0], True, 0.0)
    """
    Y = np.ascontiguousarray(Y, dtype=np.float64)
    m = Y.shape[0]
    w = np.ones(m) if w is None else np.ascontiguousarray(w, dtype=np.float64).reshape(m)
    theta, inst, weight, keep, history, n_iter, converged, rate = _serial_passes(
        Y, w, np.ascontiguousarray(state.theta, dtype=np.float64).reshape(-1, Y.shape[1]),
        np.asarray(state.inst, dtype=np.bool_), state.phi, state.gamma, state.ages, state.revival_scale,
        state.revival_base, float(state.lam), float(state.Q), int(max_iter))
    hist = [float(h) for h in history]
    res = PassResult(theta, inst, weight, hist[-1] if hist else 0.0, keep)
    cur = StepState(state.phi, state.gamma, state.ages, state.lam, state.Q, theta.copy(), inst.copy())
    return cur, res, hist, int(n_iter), bool(converged), float(rate)


def assign_instantiated(Y, theta: np.ndarray) -> np.ndarray:
    """Slot of the nearest centre of ``theta`` (lowest index on ties), int64; -1 when ``theta`` is empty."""
    Y = np.ascontiguousarray(Y, dtype=np.float64)
    theta = np.ascontiguousarray(theta, dtype=np.float64)
    empty = np.zeros((0, Y.shape[1]))
    return _best_options(Y, theta, np.ones(theta.shape[0], np.bool_), empty, np.zeros(0), np.zeros(0))[0]


@dataclass
class PassResult:
    """The end of a label pass: centres (eq. 29), objective (eq. 18) and the compaction of the slots."""

    theta: np.ndarray  # (n_kept, D): eq. 29 for the slots with data
    has_data: np.ndarray  # (n_kept,) bool
    weight: np.ndarray  # (n_kept,) sum of sample weights per slot
    objective: float
    keep: np.ndarray  # kept slots (every old slot, then the new slots with data), indices into the pass's slots


def end_of_pass(weight, mean, scatter, state: StepState) -> PassResult:
    """Eq. 29 centres and the eq. 18 objective from per-slot statistics, and which slots survive the pass.

    ``weight``, ``mean`` and ``scatter`` (the SSE about the slot's own mean) cover the pass's ``n_slots`` slots.
    An emptied new slot is destroyed; an emptied old slot becomes uninstantiated.
    """
    n_old = state.n_old
    k = state.n_slots
    weight = np.zeros(k) if weight is None else _pad(np.asarray(weight, np.float64), k)
    mean = _pad(np.asarray(mean, np.float64).reshape(-1, state.phi.shape[1]), k)
    scatter = _pad(np.asarray(scatter, np.float64), k)
    has = weight > 0
    theta = mean.copy()
    g = state.gamma
    o = has[:n_old]
    theta[:n_old][o] = (g[o, None] * state.phi[o] + weight[:n_old][o, None] * mean[:n_old][o]) / (
        g[o] + weight[:n_old][o]
    )[:, None]
    sse = scatter + weight * ((mean - theta) ** 2).sum(axis=1)
    J = float(sse[has].sum())
    J += state.lam * float(np.count_nonzero(has[n_old:]))
    J += float((state.Q * state.ages[o]).sum())
    J += float((g[o] * ((theta[:n_old][o] - state.phi[o]) ** 2).sum(axis=1)).sum())
    keep = np.concatenate([np.arange(n_old), n_old + np.flatnonzero(has[n_old:])]).astype(np.int64)
    return PassResult(theta[keep], has[keep], weight[keep], J, keep)


def _pad(a: np.ndarray, k: int) -> np.ndarray:
    if a.shape[0] >= k:
        return a[:k]
    out = np.zeros((k,) + a.shape[1:], dtype=a.dtype)
    out[: a.shape[0]] = a
    return out


def carry_over(ids, phi, weights, ages, next_id, gamma, result: PassResult, Q: float, lam: float):
    """Eq. 24 carry-over of the step's result, then deletion of clusters with ``Q * dt > lam``.

    Returns ``(ids, phi, weights, ages, next_id, slot_ids, counts)`` where ``slot_ids`` maps the result's kept
    slots to persistent ids and ``counts`` is a dict with ``births``, ``revivals`` and ``deaths``.
    """
    n_old = len(ids)
    has = result.has_data
    o = has[:n_old]
    phi = np.array(phi, dtype=np.float64, copy=True).reshape(n_old, result.theta.shape[1])
    weights = np.array(weights, dtype=np.float64, copy=True)
    ages = np.array(ages, dtype=np.int64, copy=True)
    revivals = int(np.count_nonzero(o & (ages >= 2)))
    phi[o] = result.theta[:n_old][o]
    weights[o] = gamma[o] + result.weight[:n_old][o]
    ages[o] = 1
    ages[~o] += 1
    n_new = int(result.theta.shape[0] - n_old)
    new_ids = np.arange(next_id, next_id + n_new, dtype=np.int64)
    slot_ids = np.concatenate([np.asarray(ids, np.int64), new_ids])
    ids = slot_ids.copy()
    phi = np.vstack([phi, result.theta[n_old:]])
    weights = np.concatenate([weights, result.weight[n_old:]])
    ages = np.concatenate([ages, np.ones(n_new, np.int64)])
    alive = ~(Q * ages.astype(np.float64) > lam)
    counts = {"births": n_new, "revivals": revivals, "deaths": int(np.count_nonzero(~alive))}
    return ids[alive], phi[alive], weights[alive], ages[alive], next_id + n_new, slot_ids, counts


@dataclass
class StepResult:
    """A converged (or stopped) run of one time step."""

    result: PassResult
    labels: np.ndarray | None  # kept-slot label per row, or None (not kept: OCC runs)
    history: list  # eq. 18 objective after every pass
    n_iter: int
    converged: bool
    orders: list  # per pass, its OCC record (dclust._dask.occ.KeyedPass)


def dmeans_reference(batches, lam, Q, tau, orders, *, max_iter=100, sample_weights=None, prefer_current=True):
    """Serial D-Means over a stream (docs/algorithms.md 3), plain Python loops: the oracle of the tests.

    Parameters
    ----------
    batches : list of (n_t, D) arrays
    lam, Q, tau : float
    orders : list
        ``orders[t]`` is a permutation of batch t (reused every pass) or a list with one permutation per pass.
    prefer_current : bool or list of bool
        T1 (the current cluster wins ties); a list gives one flag per batch.

    Returns
    -------
    dict
        ``labels`` (per batch, persistent ids), ``objectives`` (per batch, eq. 18 after each pass), ``ids``,
        ``centres`` (phi), ``weights``, ``ages`` of the final state.
    """
    D = np.shape(batches[0])[1]
    ids, phi, w, age = [], [], [], []
    next_id = 0
    out_labels, out_obj = [], []
    for t, Y in enumerate(batches):
        Y = np.asarray(Y, dtype=np.float64)
        sw = np.ones(len(Y)) if sample_weights is None or sample_weights[t] is None else np.asarray(
            sample_weights[t], dtype=np.float64)
        pc = prefer_current[t] if isinstance(prefer_current, (list, tuple)) else prefer_current
        n_old = len(ids)
        g = [1.0 / (1.0 / w[k] + tau * age[k]) for k in range(n_old)]
        ords = orders[t]
        if isinstance(ords, np.ndarray) and ords.ndim == 1:
            ords = [ords]
        theta = {}  # slot -> centre (instantiated slots)
        z = [-1] * len(Y)
        n_slots = n_old
        hist = []
        for p in range(max_iter):
            prev = list(z)
            for i in ords[min(p, len(ords) - 1)]:
                y = Y[i]
                best, bk, kind = np.inf, -1, None
                if pc and z[i] >= 0:
                    best, bk, kind = float(((y - theta[z[i]]) ** 2).sum()), z[i], "inst"
                for k in sorted(theta):
                    c = float(((y - theta[k]) ** 2).sum())
                    if c < best:
                        best, bk, kind = c, k, "inst"
                for k in range(n_old):
                    if k not in theta:
                        c = Q * age[k] + g[k] / (g[k] + 1.0) * float(((y - phi[k]) ** 2).sum())
                        if c < best:
                            best, bk, kind = c, k, "revive"
                if lam < best:
                    bk = n_slots
                    n_slots += 1
                    theta[bk] = y.copy()
                elif kind == "revive":
                    theta[bk] = (g[bk] * phi[bk] + y) / (g[bk] + 1.0)
                z[i] = bk
            zs = np.array(z)
            J = 0.0
            new_theta, remap = {}, {}
            for k in range(n_slots):
                m = zs == k
                if not m.any():
                    continue
                nk = sw[m].sum()
                if k < n_old:
                    th = (g[k] * phi[k] + (sw[m, None] * Y[m]).sum(axis=0)) / (g[k] + nk)
                    J += Q * age[k] + g[k] * float(((th - phi[k]) ** 2).sum())
                else:
                    th = (sw[m, None] * Y[m]).sum(axis=0) / nk
                    J += lam
                J += float((sw[m] * ((Y[m] - th) ** 2).sum(axis=1)).sum())
                new_theta[k] = th
            new_slot = n_old
            for k in range(n_old, n_slots):
                if k in new_theta:
                    remap[k] = new_slot
                    new_slot += 1
            theta = {remap.get(k, k): v for k, v in new_theta.items()}
            z = [remap.get(k, k) for k in z]
            n_slots = new_slot
            hist.append(J)
            if z == prev:
                break
        slot_ids = list(ids) + list(range(next_id, next_id + n_slots - n_old))
        next_id += n_slots - n_old
        zs = np.array(z, dtype=np.int64)
        out_labels.append(np.array([slot_ids[k] for k in zs], dtype=np.int64))
        out_obj.append(hist)
        for k in range(n_old):
            if k in theta:
                phi[k], w[k], age[k] = theta[k], g[k] + sw[zs == k].sum(), 1
            else:
                age[k] += 1
        for k in range(n_old, n_slots):
            ids.append(slot_ids[k])
            phi.append(theta[k])
            w.append(sw[zs == k].sum())
            age.append(1)
        alive = [not (Q * a > lam) for a in age]
        ids = [v for v, a in zip(ids, alive) if a]
        phi = [v for v, a in zip(phi, alive) if a]
        w = [v for v, a in zip(w, alive) if a]
        age = [v for v, a in zip(age, alive) if a]
    return {
        "labels": out_labels,
        "objectives": out_obj,
        "ids": np.array(ids, dtype=np.int64),
        "centres": np.array(phi).reshape(-1, D),
        "weights": np.array(w, dtype=np.float64),
        "ages": np.array(age, dtype=np.int64),
    }
