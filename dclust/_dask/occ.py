"""Optimistic concurrency control for DP-means (ALGORITHMS.md 8.2).

A pass is a sequence of epochs. In an epoch every unfinished block, in parallel, assigns the rows that are within
``lam`` of a snapshot centre (final for the pass) and proposes the others; the driver then validates the
proposals serially, in (position, block) order, opening a centre for each proposal still farther than ``lam``
from every centre. The pass is equivalent to serial DP-means on the permutation recorded in :class:`PassRecord`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import dask
import numpy as np

from ..kernels.dpmeans import block_permutation, dp_block, serial_assign
from ..kernels.stats import ClusterStats
from ..kernels.distances import block_stats
from .passes import block_offsets, map_partials, map_reduce
from .reduce import tree_reduce

__all__ = ["EpochRecord", "PassRecord", "gather_prefix", "occ_pass", "prefix_counts", "records_state", "records_from"]


@dataclass
class EpochRecord:
    blocks: np.ndarray  # blocks processed in this epoch
    starts: np.ndarray  # their first processed position
    stops: np.ndarray  # their next unprocessed position
    proposals: np.ndarray  # global indices of the proposals, in validation order
    accepted: int = 0


@dataclass
class PassRecord:
    prefix: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    epochs: list = field(default_factory=list)

    def permutation(self, seed: int, chunks: tuple[int, ...]) -> np.ndarray:
        """The serial order this pass is equivalent to: prefix, then per epoch its non-proposers and proposals."""
        offsets = block_offsets(chunks)
        parts = [self.prefix]
        for ep in self.epochs:
            props = set(ep.proposals.tolist())
            for b, s, e in zip(ep.blocks, ep.starts, ep.stops):
                idx = block_permutation(seed, int(b), chunks[b])[s:e] + offsets[b]
                parts.append(np.array([i for i in idx if i not in props], dtype=np.int64))
            parts.append(ep.proposals)
        return np.concatenate(parts).astype(np.int64)


def prefix_counts(chunks: tuple[int, ...], b0: int) -> np.ndarray:
    """How many rows each block contributes to the serial prefix (proportional to its size, about b0 in all)."""
    sizes = np.asarray(chunks, dtype=np.int64)
    n = int(sizes.sum())
    if b0 <= 0 or n == 0:
        return np.zeros_like(sizes)
    return np.minimum(sizes, -(-b0 * sizes // n))


def _prefix_partial(Xb, wb, *, offset, block_index, seed, counts, centre):
    stats = block_stats(Xb, centre, wb, offset=offset, block_index=block_index)
    c = int(counts[block_index])
    local = block_permutation(seed, block_index, Xb.shape[0])[:c]
    w = np.ones(c) if wb is None else np.asarray(wb, dtype=np.float64)[local]
    return stats, np.arange(c), local + offset, np.asarray(Xb[local], dtype=np.float64), w


def _merge_prefix(parts):
    stats = ClusterStats.merge_all([p[0] for p in parts])
    return (stats,) + tuple(np.concatenate([p[i] for p in parts]) for i in range(1, 5))


def gather_prefix(X, w, *, seed: int, counts: np.ndarray, split_every=None):
    """One pass: the one-cluster statistics of all rows (mean, fingerprint, NaN check) and the prefix rows.

    Returns ``(stats, index, rows, weights)`` with the prefix in (position, block) order.
    """
    zero = np.zeros((1, X.shape[1]))
    stats, pos, idx, rows, pw = map_reduce(_prefix_partial, _merge_prefix, X, w, split_every=split_every, seed=seed,
                                           counts=counts, centre=zero).compute()[()]
    order = np.lexsort((idx, pos))
    return stats, idx[order], rows[order], pw[order]


def _epoch_partial(Xb, wb, *, offset, block_index, starts, **kwargs):
    return dp_block(Xb, wb, offset=offset, block_index=block_index, start=int(starts[block_index]), **kwargs)


def _stats_of(parts):
    out = np.empty(len(parts), dtype=object)
    out[:] = [p.stats for p in parts]
    return out


def _proposals_of(parts):
    out = np.empty(len(parts), dtype=object)
    out[:] = [(p.index, p.position, p.rows, p.weight, p.stop) for p in parts]
    return out


def occ_pass(X, w, centres, lam, *, seed, starts, max_proposals, split_every=None):
    """One DP-means pass with OCC. Returns ``(stats, centres, epochs)``; ``stats`` covers every processed row,
    with labels indexing the returned ``centres`` (the snapshot followed by the centres opened in the pass)."""
    sizes = np.asarray(X.chunks[0], dtype=np.int64)
    starts = np.asarray(starts, dtype=np.int64).copy()
    C = np.asarray(centres, dtype=np.float64).reshape(-1, X.shape[1])
    total: list[ClusterStats] = []
    epochs: list[EpochRecord] = []
    while True:
        todo = np.flatnonzero(starts < sizes)
        if todo.size == 0:
            break
        parts = map_partials(
            _epoch_partial, X, w, blocks=todo, starts=starts, centres=C, lam=lam, seed=seed,
            max_proposals=max_proposals,
        )
        stats_arr = parts.map_blocks(_stats_of, dtype=object)
        props_arr = parts.map_blocks(_proposals_of, dtype=object)
        stats, props = dask.compute(tree_reduce(stats_arr, ClusterStats.merge_all, split_every=split_every), props_arr)
        total.append(stats[()])
        index = np.concatenate([p[0] for p in props])
        position = np.concatenate([p[1] for p in props])
        block = np.concatenate([np.full(p[0].size, b) for p, b in zip(props, todo)])
        order = np.lexsort((block, position))
        rows = np.concatenate([p[2] for p in props]).reshape(-1, X.shape[1])[order]
        pw = np.concatenate([p[3] for p in props])[order]
        index = index[order]
        labels, dist, new = serial_assign(rows, C, lam)
        C = np.vstack([C, new])
        if index.size:
            total.append(ClusterStats.from_labels(rows, labels, C.shape[0], pw, cost=float(pw @ dist), index=index))
        stops = np.array([p[4] for p in props], dtype=np.int64)
        epochs.append(EpochRecord(todo, starts[todo].copy(), stops, index, int(new.shape[0])))
        starts[todo] = stops
    if not total:  # the serial prefix already covered every row
        return ClusterStats.identity(C.shape[0], X.shape[1]), C, epochs
    return ClusterStats.merge_all(total), C, epochs


def records_state(records: list[PassRecord]) -> dict:
    """The pass records as a few flat int64 arrays (for checkpoints; :func:`records_from` inverts it)."""
    epochs = [(p, ep) for p, rec in enumerate(records) for ep in rec.epochs]
    cat = lambda parts: np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)  # noqa: E731
    return {
        "n_passes": len(records),
        "prefixes": cat([r.prefix for r in records]),
        "prefix_sizes": np.array([r.prefix.size for r in records], dtype=np.int64),
        "epoch_pass": np.array([p for p, _ in epochs], dtype=np.int64),
        "epoch_blocks": np.array([ep.blocks.size for _, ep in epochs], dtype=np.int64),
        "epoch_proposals": np.array([ep.proposals.size for _, ep in epochs], dtype=np.int64),
        "accepted": np.array([ep.accepted for _, ep in epochs], dtype=np.int64),
        "blocks": cat([ep.blocks for _, ep in epochs]),
        "starts": cat([ep.starts for _, ep in epochs]),
        "stops": cat([ep.stops for _, ep in epochs]),
        "proposals": cat([ep.proposals for _, ep in epochs]),
    }


def records_from(state: dict) -> list[PassRecord]:
    """The pass records saved by :func:`records_state` (ValueError if the arrays do not fit together)."""
    n = int(state["n_passes"])
    sizes = np.asarray(state["prefix_sizes"], dtype=np.int64)
    ep_pass, ep_blocks, ep_props = (np.asarray(state[k], dtype=np.int64)
                                    for k in ("epoch_pass", "epoch_blocks", "epoch_proposals"))
    accepted = np.asarray(state["accepted"], dtype=np.int64)
    blocks, starts, stops, props = (np.asarray(state[k], dtype=np.int64)
                                    for k in ("blocks", "starts", "stops", "proposals"))
    prefixes = np.asarray(state["prefixes"], dtype=np.int64)
    if (sizes.size != n or sizes.sum() != prefixes.size or not (ep_pass.size == ep_blocks.size == ep_props.size
            == accepted.size) or ep_blocks.sum() != blocks.size or blocks.size != starts.size or starts.size
            != stops.size or ep_props.sum() != props.size or (ep_pass.size and not (0 <= ep_pass).all())
            or (ep_pass.size and ep_pass.max() >= n)):
        raise ValueError("pass records whose arrays do not fit together")
    p_off = np.concatenate([[0], np.cumsum(sizes)])
    records = [PassRecord(prefixes[p_off[p]:p_off[p + 1]].copy(), []) for p in range(n)]
    b, q = 0, 0
    for p, nb, nq, acc in zip(ep_pass, ep_blocks, ep_props, accepted):
        records[p].epochs.append(EpochRecord(blocks[b:b + nb].copy(), starts[b:b + nb].copy(),
                                             stops[b:b + nb].copy(), props[q:q + nq].copy(), int(acc)))
        b, q = b + nb, q + nq
    return records


# ------------------------------------------------------------------------------------------------------------------
# Keyed OCC: the serial order is a function of (seed, global row index) alone, so the model does not depend on the
# chunking, the grouping of blocks into tasks or the number of workers.
#
# Every row has an order key (``kernels.distances.order_keys``). A pass is a sequence of epochs, each a range of
# keys: every block takes its rows in the range, folds those within ``lam`` of a snapshot centre into statistics and
# proposes the others; the driver validates the proposals serially in key order. The pass equals serial DP-means on
# the order: per epoch, its non-proposing rows (by key), then its proposals (by key). The key ranges are chosen by
# the driver from global counts only (rows and proposals of the last epoch), so that about ``max_proposals`` rows
# are proposed per epoch; the first pass starts with a serial prefix of about ``prefix_size`` rows of lowest keys.
# ------------------------------------------------------------------------------------------------------------------

#: Keys are 64-bit: a range is ``[lo, hi]`` (inclusive) within ``[0, KEY_END)``.
KEY_END = 2**64


@dataclass
class KeyedEpoch:
    lo: int  # first key of the epoch
    hi: int  # last key of the epoch (inclusive)
    proposals: np.ndarray  # global indices of the proposals, in key (validation) order
    accepted: int = 0


@dataclass
class KeyedPass:
    prefix_end: int = 0  # keys below it were processed serially on the driver (first pass only)
    epochs: list = field(default_factory=list)

    def permutation(self, mix: int, n: int) -> np.ndarray:
        """The serial order this pass is equivalent to (O(n) memory: computed on demand only)."""
        from ..kernels.distances import order_keys

        keys = order_keys(mix, np.arange(n))
        order = np.argsort(keys, kind="stable")
        sorted_keys = keys[order]
        bound = lambda k: int(np.searchsorted(sorted_keys, np.uint64(k), side="left")) if k < KEY_END else n  # noqa
        parts = [order[: bound(self.prefix_end)]]
        for ep in self.epochs:
            rows = order[bound(ep.lo): bound(ep.hi + 1)]
            parts.append(rows[~np.isin(rows, ep.proposals)])
            parts.append(ep.proposals)
        return np.concatenate(parts).astype(np.int64)


def _prefix_rows_partial(Xb, wb, *, offset, block_index, mix, end):
    from ..kernels.distances import order_keys

    stats = block_stats(Xb, np.zeros((1, Xb.shape[1])), wb, offset=offset, block_index=block_index)
    keys = order_keys(mix, np.arange(offset, offset + Xb.shape[0]))
    local = np.flatnonzero(keys < np.uint64(end)) if end < KEY_END else np.arange(Xb.shape[0])
    w = np.ones(local.size) if wb is None else np.asarray(wb, dtype=np.float64)[local]
    return stats, keys[local], local + offset, np.asarray(Xb[local], dtype=np.float64).reshape(-1, Xb.shape[1]), w


def _merge_rows(parts):
    stats = ClusterStats.merge_all([p[0] for p in parts])
    return (stats,) + tuple(np.concatenate([p[i] for p in parts]) for i in range(1, 5))


def keyed_prefix(X, w, *, mix: int, prefix_size: int, split_every=None):
    """One pass: the one-cluster statistics of all rows (mean, fingerprint, NaN check) and the serial prefix: the
    rows whose key is below ``prefix_end`` (about ``prefix_size`` of them), in key order.

    Returns ``(stats, prefix_end, index, rows, weights)``."""
    n = X.shape[0]
    end = KEY_END if prefix_size >= n else (prefix_size * KEY_END) // max(n, 1)
    stats, keys, idx, rows, pw = map_reduce(_prefix_rows_partial, _merge_rows, X, w, split_every=split_every,
                                            mix=mix, end=end).compute()[()]
    order = np.argsort(keys, kind="stable")
    return stats, end, idx[order], rows[order], pw[order]


def _keyed_epoch_partial(Xb, wb, *, offset, block_index, centers, lam, mix, lo, hi):
    from ..kernels.distances import epoch_stats, order_keys

    stats, local = epoch_stats(Xb, centers, lam, wb, offset=offset, block_index=block_index, mix=mix, lo=lo, hi=hi)
    w = np.ones(local.size) if wb is None else np.asarray(wb, dtype=np.float64)[local]
    rows = np.asarray(Xb[local], dtype=np.float64).reshape(-1, Xb.shape[1])
    return stats, order_keys(mix, local + offset), local + offset, rows, w


def next_epoch_end(lo: int, n: int, rate: float, max_proposals: int) -> int:
    """The last key of an epoch starting at ``lo`` that should propose about ``max_proposals`` rows at ``rate``
    proposals per row (global counts only: the same for any chunking)."""
    rows = max_proposals / max(rate, 1.0 / max(n, 1))
    width = int(min(float(KEY_END), max(1.0, rows) * (KEY_END / max(n, 1))))
    return min(KEY_END - 1, lo + max(width, 1) - 1)


def keyed_pass(X, w, centers, lam, *, mix: int, start: int, rate: float, max_proposals: int, split_every=None):
    """One DP-means pass over the keys ``[start, KEY_END)`` with keyed OCC.

    Returns ``(stats, centers, epochs, rate)``: ``stats`` covers every processed row with labels indexing the
    returned centres (the snapshot followed by the centres opened in the pass); ``rate`` is the proposal rate of
    the last epoch (it sizes the first epoch of the next pass).
    """
    from ..kernels.dpmeans import serial_assign

    n, d = X.shape
    C = np.asarray(centers, dtype=np.float64).reshape(-1, d)
    total: list[ClusterStats] = []
    epochs: list[KeyedEpoch] = []
    lo = start
    while lo < KEY_END:
        hi = next_epoch_end(lo, n, rate, max_proposals)
        stats, keys, index, rows, pw = map_reduce(
            _keyed_epoch_partial, _merge_rows, X, w, split_every=split_every, centers=C, lam=lam, mix=mix, lo=lo,
            hi=hi,
        ).compute()[()]
        order = np.argsort(keys, kind="stable")
        index, rows, pw = index[order], rows[order], pw[order]
        labels, dist, new = serial_assign(rows, C, lam)
        C = np.vstack([C, new])
        total.append(stats)
        if index.size:
            total.append(ClusterStats.from_labels(rows, labels, C.shape[0], pw, cost=float(pw @ dist), index=index))
        epochs.append(KeyedEpoch(lo, hi, index, int(new.shape[0])))
        rate = index.size / max(stats.n_rows + index.size, 1)
        lo = hi + 1
    if not total:
        return ClusterStats.identity(C.shape[0], d), C, epochs, rate
    return ClusterStats.merge_all(total), C, epochs, rate


def keyed_records_state(records: list[KeyedPass]) -> dict:
    """The keyed pass records as flat arrays (for checkpoints; :func:`keyed_records_from` inverts it)."""
    epochs = [(p, ep) for p, rec in enumerate(records) for ep in rec.epochs]
    props = [ep.proposals for _, ep in epochs]
    return {
        "n_passes": len(records),
        "prefix_end": np.array([r.prefix_end - 1 if r.prefix_end else 0 for r in records], dtype=np.uint64),
        "has_prefix": np.array([bool(r.prefix_end) for r in records], dtype=np.int64),
        "epoch_pass": np.array([p for p, _ in epochs], dtype=np.int64),
        "epoch_lo": np.array([ep.lo for _, ep in epochs], dtype=np.uint64),
        "epoch_hi": np.array([ep.hi for _, ep in epochs], dtype=np.uint64),
        "epoch_proposals": np.array([ep.proposals.size for _, ep in epochs], dtype=np.int64),
        "accepted": np.array([ep.accepted for _, ep in epochs], dtype=np.int64),
        "proposals": np.concatenate(props).astype(np.int64) if props else np.zeros(0, np.int64),
    }


def keyed_records_from(state: dict) -> list[KeyedPass]:
    """The records saved by :func:`keyed_records_state` (ValueError if the arrays do not fit together)."""
    n = int(state["n_passes"])
    ends = np.asarray(state["prefix_end"], dtype=np.uint64)
    has = np.asarray(state["has_prefix"], dtype=np.int64)
    ep_pass = np.asarray(state["epoch_pass"], dtype=np.int64)
    lo, hi = np.asarray(state["epoch_lo"], dtype=np.uint64), np.asarray(state["epoch_hi"], dtype=np.uint64)
    counts = np.asarray(state["epoch_proposals"], dtype=np.int64)
    accepted = np.asarray(state["accepted"], dtype=np.int64)
    props = np.asarray(state["proposals"], dtype=np.int64)
    if (ends.size != n or has.size != n or not (ep_pass.size == lo.size == hi.size == counts.size == accepted.size)
            or counts.sum() != props.size or (ep_pass.size and not (0 <= ep_pass.min() and ep_pass.max() < n))):
        raise ValueError("pass records whose arrays do not fit together")
    records = [KeyedPass(int(e) + 1 if h else 0, []) for e, h in zip(ends, has)]
    q = 0
    for p, a, b, c, acc in zip(ep_pass, lo, hi, counts, accepted):
        records[p].epochs.append(KeyedEpoch(int(a), int(b), props[q:q + c].copy(), int(acc)))
        q += c
    return records
