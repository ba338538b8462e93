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
