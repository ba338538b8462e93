"""DP-means kernels: the serial assignment step (driver-side prefix and OCC validation), the per-block OCC
proposal step, and a plain serial reference implementation used as the test oracle."""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from .distances import assign_stats, nearest, stats_from_assignment
from .kmeans import block_rng
from .stats import ClusterStats

__all__ = ["block_permutation", "serial_assign", "DPBlockResult", "dp_block", "dpmeans_reference"]

_PERM_STREAM = 0xD9


def block_permutation(seed: int, block_index: int, n: int) -> np.ndarray:
    """The local processing order of one block (a permutation of ``range(n)``), from (seed, block)."""
    return block_rng(seed, _PERM_STREAM, block_index).permutation(n)


@numba.njit(nogil=True, cache=True)
def _serial_assign(P, C, lam):
    m, d = P.shape
    k0 = C.shape[0]
    centres = np.empty((k0 + m, d))
    centres[:k0] = C
    k = k0
    labels = np.empty(m, dtype=np.int64)
    dist = np.empty(m)
    for i in range(m):
        best = np.inf
        bk = -1
        for c in range(k):
            s = 0.0
            for j in range(d):
                t = P[i, j] - centres[c, j]
                s += t * t
            if s < best:
                best = s
                bk = c
        if k == 0 or best > lam:  # T3: open only when strictly better
            centres[k] = P[i]
            labels[i] = k
            dist[i] = 0.0
            k += 1
        else:
            labels[i] = bk
            dist[i] = best
    return labels, dist, centres[k0:k].copy()


def serial_assign(P: np.ndarray, C: np.ndarray, lam: float):
    """Serial DP-means assignment of the rows of ``P`` in order, against ``C`` plus the centres it opens.

    Returns ``(labels, dist, new_centres)``: labels index ``C`` followed by the new centres.
    """
    P = np.ascontiguousarray(P, dtype=np.float64).reshape(-1, np.shape(C)[1] if np.ndim(C) == 2 else P.shape[1])
    C = np.ascontiguousarray(C, dtype=np.float64).reshape(-1, P.shape[1])
    return _serial_assign(P, C, float(lam))


@dataclass
class DPBlockResult:
    """What one block sends back in an OCC epoch: statistics of its final (non-proposing) rows and its proposals."""

    stats: ClusterStats
    index: np.ndarray  # global indices of the proposals, in the block's processing order
    position: np.ndarray  # their positions in the block's processing order
    rows: np.ndarray  # (m, D) float64
    weight: np.ndarray  # (m,)
    stop: int  # next position to process in the block's order (== n_b when the block is done)


def dp_block(Xb, wb, *, offset, block_index, centres, lam, seed, start, max_proposals) -> DPBlockResult:
    """One OCC epoch on one block (ALGORITHMS.md 8.2).

    Rows are taken in the block's processing order from position ``start``. A row within ``lam`` of a snapshot
    centre takes its nearest one (final for this pass); a row farther than ``lam`` from all of them is proposed.
    The epoch stops after the ``max_proposals``-th proposal; later rows wait for the next epoch.
    """
    n = Xb.shape[0]
    k = centres.shape[0]
    if k and start == 0:
        # one fused read of the block; when no row proposes (every pass after the first few), that is all
        stats, labels_all, dist_all = assign_stats(Xb, centres, wb, offset=offset, block_index=block_index)
        if not (dist_all > lam).any():  # NaN (bad rows) compares False
            d = Xb.shape[1]
            return DPBlockResult(stats, np.empty(0, np.int64), np.empty(0, np.int64), np.empty((0, d)),
                                 np.empty(0), n)
    perm = block_permutation(seed, block_index, n)[start:]
    if k:
        labels, dist = (labels_all[perm], dist_all[perm]) if start == 0 else nearest(Xb[perm], centres)
        finite = ~np.isnan(dist)
        propose = finite & ~(dist <= lam)
    else:
        labels, dist = nearest(Xb[perm], centres)
        finite = np.isfinite(np.asarray(Xb[perm], dtype=np.float64)).all(axis=1)
        propose = finite.copy()
    count = np.cumsum(propose)
    stop = perm.size
    if count.size and count[-1] > max_proposals:
        stop = int(np.searchsorted(count, max_proposals, side="left")) + 1
    done, propose, labels, dist = perm[:stop], propose[:stop], labels[:stop], dist[:stop]
    full_labels = np.full(n, -1, dtype=np.int32)
    full_dist = np.zeros(n)
    keep = ~propose & finite[:stop]
    full_labels[done[keep]] = labels[keep]
    full_dist[done[keep]] = dist[keep]
    full_dist[done[~finite[:stop]]] = np.nan  # counted as bad rows
    stats = stats_from_assignment(Xb, full_labels, full_dist, wb, k, offset, block_index)
    local = done[propose]
    w = np.ones(local.size) if wb is None else np.asarray(wb, dtype=np.float64)[local]
    return DPBlockResult(
        stats, local.astype(np.int64) + offset, np.flatnonzero(propose) + start,
        np.asarray(Xb[local], dtype=np.float64), w, start + stop,
    )


def dpmeans_reference(X, lam, orders, *, init="mean", max_iter=100, sample_weight=None):
    """Serial DP-means (ALGORITHMS.md 1.2), plain numpy and Python loops: the oracle of the tests.

    ``orders`` is one permutation (reused every pass) or a list with one permutation per pass. Ties go to the
    lowest centre index; a cluster opens only when every centre is strictly farther than ``lam``.
    Returns ``(labels, centres, history)`` where history holds ``SSE + lam*K`` after each mean update.
    """
    X = np.asarray(X, dtype=np.float64)
    n = X.shape[0]
    w = np.ones(n) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
    if isinstance(orders, np.ndarray) and orders.ndim == 1:
        orders = [orders]
    if init == "mean":
        centres = [np.average(X, axis=0, weights=w)]
        z = np.zeros(n, dtype=np.int64)
    else:
        centres = []
        z = np.full(n, -1, dtype=np.int64)
    history = []
    for p in range(max_iter):
        order = orders[min(p, len(orders) - 1)]
        new_z = z.copy()
        for i in order:
            d = [float(((X[i] - c) ** 2).sum()) for c in centres]
            if not d or min(d) > lam:
                centres.append(X[i].copy())
                new_z[i] = len(centres) - 1
            else:
                new_z[i] = int(np.argmin(d))
        used = [c for c in range(len(centres)) if (new_z == c).any()]
        remap = {c: r for r, c in enumerate(used)}
        new_z = np.array([remap[c] for c in new_z])
        centres = [np.average(X[new_z == c], axis=0, weights=w[new_z == c]) if w[new_z == c].sum() > 0
                   else X[new_z == c].mean(axis=0) for c in range(len(used))]
        sse = sum(float((w[new_z == c] * ((X[new_z == c] - centres[c]) ** 2).sum(axis=1)).sum())
                  for c in range(len(used)))
        history.append(sse + lam * len(used))
        changed = not np.array_equal(new_z, z)
        z = new_z
        if not changed:
            break
    return z, np.array(centres), history
