"""THE optimistic-concurrency engine (docs/algorithms.md 8.2-8.5): workers propose, the driver validates serially,
proposals capped; DP-means, D-Means, BP-means (here) and RDP-means (:mod:`dclust._dask.rdp`) plug in their rules.

A pass is a sequence of epochs, each a range of order keys (a function of the seed and the global row index). In an
epoch every block, in parallel, decides the rows of the range that the snapshot decides (within reach of a cluster
or a feature: final for the pass) and proposes the others; the driver validates the proposals serially in key
order. The pass is equivalent to the serial algorithm on the order recorded in :class:`KeyedPass`, and neither
that order nor the model depends on the chunking, the grouping of blocks into tasks or the number of workers.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Callable

import dask.array as da
import numpy as np

from ..kernels.bpmeans import bp_block, gram_partial, serial_sweep
from ..kernels.distances import block_stats, epoch_stats, order_keys
from ..kernels.dpmeans import serial_assign
from ..kernels.dynmeans import dm_assign, dm_propose, label_pass
from ..kernels.stats import ClusterStats
from .features import FeatureOverflow, Gram
from .passes import Held, block_offsets, map_groups, map_held, map_reduce, persist_and_compute

__all__ = [
    "KEY_END", "KeyedEpoch", "KeyedPass", "OCCRule", "DPRule", "DMRule", "BPRule", "keyed_pass", "keyed_prefix",
    "next_epoch_end", "opening_rate", "run_pass", "keyed_records_state", "keyed_records_from", "patch_bits",
    "apply_patches", "BPBits",
]


# ------------------------------------------------------------------------------------------------------------------
# The keyed OCC engine: the serial order is a function of (seed, global row index) alone, so the model does not
# depend on the chunking, the grouping of blocks into tasks or the number of workers.
#
# Every row has an order key (``kernels.distances.order_keys``). A pass is a sequence of epochs, each a range of
# keys: every block takes its rows in the range, keeps those the snapshot decides (a row within reach of the
# snapshot's clusters or features) and proposes the others; the driver validates the proposals serially in key
# order. The pass equals the serial algorithm on the order: per epoch, its non-proposing rows (by key), then its
# proposals (by key). The key ranges are chosen by the driver from global counts only (rows and proposals of the
# last epoch), so that about ``max_proposals`` rows are proposed per epoch (the one proposal cap); the first pass
# starts with a serial prefix of about ``prefix_size`` rows of lowest keys.
#
# A model plugs in an :class:`OCCRule`: what a block proposes (``block_task``, run in the tasks), how the driver
# validates the proposals of an epoch and updates its state (``accept``). Data in memory (a numpy array) runs the
# same epochs without Dask, as one block.
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


class OCCRule:
    """What a model plugs into :func:`keyed_pass` (docs/algorithms.md 8.2-8.5).

    Subclasses define:

    - ``block_task()`` -> ``(fn, kwargs)``: ``fn(Xb, wb, *, offset, block_index, mix, lo, hi, **kwargs)`` runs in
      the tasks on one block against the snapshot in ``kwargs`` and returns ``(partial, n_rows, local, extra)``:
      the reducible partial of the rows it keeps, the number of rows in the key range, the local indices of the
      proposals and a tuple of per-proposal arrays (rows first);
    - ``merge(partials)`` (static): the associative merge of the partials;
    - ``accept(partial, index, rows, weight, extra)`` on the driver: validate the proposals (global ``index``,
      ``rows``, ``weight``, ``extra``, all in key order) serially, fold ``partial`` and them into the state;
      return the number of clusters (features) opened.

    ``block_args()`` may give one small object per block (passed to ``fn`` after ``wb``). ``epoch`` runs one
    epoch's tasks; a rule whose blocks carry state (BP-means' bits) overrides it.
    """

    def block_args(self):
        return None

    @staticmethod
    def merge(parts):  # pragma: no cover - abstract
        raise NotImplementedError

    def block_task(self):  # pragma: no cover - abstract
        raise NotImplementedError

    def accept(self, partial, index, rows, weight, extra) -> int:  # pragma: no cover - abstract
        raise NotImplementedError

    def epoch(self, X, w, *, mix: int, lo: int, hi: int, split_every=None):
        """One epoch over the keys ``[lo, hi]``: ``(partial, n_rows, keys, index, rows, weight, extra)``."""
        return self.epoch_graph(X, w, mix=mix, lo=lo, hi=hi, split_every=split_every, compute=True)

    def epoch_graph(self, X, w, *, mix: int, lo: int, hi: int, split_every=None, compute=False):
        """The epoch's tasks (a 0-d object dask array, or its computed value with ``compute``)."""
        fn, kwargs = self.block_task()
        return run_pass(_epoch_partial, partial(_merge_epoch, merge=self.merge), X, w, block_args=self.block_args(),
                        split_every=split_every, compute=compute, propose=fn, mix=mix, lo=lo, hi=hi, **kwargs)


def run_pass(fn: Callable[..., Any], merge: Callable[..., Any], X: Any, w: Any, *, block_args: Any = None,
             split_every: Any = None, compute: bool = True, **kwargs: Any) -> Any:
    """``fn`` on every row block of ``X`` (with the aligned weights ``w`` and ``block_args[b]``), merged: one pass
    of :func:`dclust._dask.passes.map_reduce` (computed unless ``compute=False``), or for an in-memory ``X``
    (numpy) one call on the whole array."""
    if isinstance(X, np.ndarray):
        args = () if block_args is None else (block_args[0],)
        return merge([fn(X, w, *args, offset=0, block_index=0, **kwargs)])
    out = map_reduce(fn, merge, X, w, block_args=block_args, split_every=split_every, **kwargs)
    return out.compute()[()] if compute else out


def _epoch_partial(Xb, wb, *arg, offset, block_index, propose, mix, lo, hi, **kwargs):
    part, n_rows, local, extra = propose(Xb, wb, *arg, offset=offset, block_index=block_index, mix=mix, lo=lo,
                                         hi=hi, **kwargs)
    local = np.asarray(local, dtype=np.int64)
    w = np.ones(local.size) if wb is None else np.asarray(wb, dtype=np.float64)[local]
    rows = np.asarray(Xb[local], dtype=np.float64).reshape(-1, Xb.shape[1])
    return part, int(n_rows), order_keys(mix, local + offset), local + offset, rows, w, tuple(extra)


def _merge_epoch(parts, merge):
    cat = lambda i: np.concatenate([p[i] for p in parts])  # noqa: E731
    extra = tuple(np.concatenate([p[6][j] for p in parts]) for j in range(len(parts[0][6])))
    return merge([p[0] for p in parts]), sum(p[1] for p in parts), cat(2), cat(3), cat(4), cat(5), extra


def next_epoch_end(lo: int, n: int, rate: float, max_proposals: int) -> int:
    """The last key of an epoch starting at ``lo`` that should propose about ``max_proposals`` rows at ``rate``
    proposals per row (global counts only: the same for any chunking)."""
    rows = max_proposals / max(rate, 1.0 / max(n, 1))
    width = int(min(float(KEY_END), max(1.0, rows) * (KEY_END / max(n, 1))))
    return min(KEY_END - 1, lo + max(width, 1) - 1)


def keyed_pass(X, w, rule: OCCRule, *, mix: int, start: int = 0, rate: float = 0.0, max_proposals: int,
               split_every=None) -> tuple[list[KeyedEpoch], float]:
    """One OCC pass of ``rule`` over the keys ``[start, KEY_END)`` of ``X`` (dask or numpy).

    Returns ``(epochs, rate)``: the epochs' records and the proposal rate of the last epoch (it may size the first
    epoch of the next pass). The rule's state holds what the pass computed.
    """
    n = X.shape[0]
    epochs: list[KeyedEpoch] = []
    lo = int(start)
    while lo < KEY_END:
        hi = next_epoch_end(lo, n, rate, max_proposals)
        part, n_rows, keys, index, rows, pw, extra = rule.epoch(X, w, mix=mix, lo=lo, hi=hi,
                                                                split_every=split_every)
        order = np.argsort(keys, kind="stable")
        index = index[order]
        accepted = rule.accept(part, index, rows[order], pw[order], tuple(e[order] for e in extra))
        epochs.append(KeyedEpoch(lo, hi, index, int(accepted)))
        rate = index.size / max(n_rows + index.size, 1)
        lo = hi + 1
    return epochs, rate


def opening_rate(labels: np.ndarray, k0: int) -> float:
    """Clusters opened per row in the second half of a serial run (1 when the run is too short to tell): it
    sizes the first epoch after the serial prefix."""
    m = labels.size
    if m < 16:
        return 1.0
    new_rows = np.flatnonzero(labels >= k0)
    first_rows = new_rows[np.unique(labels[new_rows], return_index=True)[1]]
    return float(np.count_nonzero(first_rows >= m // 2)) / (m - m // 2)


def _prefix_rows_partial(Xb, wb, *, offset, block_index, mix, end):
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
    stats, keys, idx, rows, pw = run_pass(_prefix_rows_partial, _merge_rows, X, w, split_every=split_every, mix=mix,
                                          end=end)
    order = np.argsort(keys, kind="stable")
    return stats, end, idx[order], rows[order], pw[order]


# ------------------------------------------------------------------------------------------------------------------
# DP-means (docs/algorithms.md 8.2) and D-Means (8.5)
# ------------------------------------------------------------------------------------------------------------------


def _stats_or_identity(total: list, k: int, d: int) -> ClusterStats:
    stats = ClusterStats.merge_all(total) if total else ClusterStats.identity(k, d)
    return stats.merge(ClusterStats.identity(k, d)) if stats.n_clusters < k else stats


def _dp_propose(Xb, wb, *, offset, block_index, mix, lo, hi, centers, lam):
    stats, local = epoch_stats(Xb, centers, lam, wb, offset=offset, block_index=block_index, mix=mix, lo=lo, hi=hi)
    return stats, stats.n_rows, local, ()


class DPRule(OCCRule):
    """DP-means: a row farther than ``lam`` from every snapshot centre is proposed; the driver runs serial
    DP-means on the proposals against the centres as they stand (docs/algorithms.md 8.2)."""

    merge = staticmethod(ClusterStats.merge_all)

    def __init__(self, centers: np.ndarray, lam: float):
        self.centers = np.asarray(centers, dtype=np.float64)
        self.lam = float(lam)
        self.total: list[ClusterStats] = []
        self.labels = np.zeros(0, np.int64)  # labels of the last accepted proposals

    def block_task(self):
        return _dp_propose, {"centers": self.centers, "lam": self.lam}

    def accept(self, partial, index, rows, weight, extra) -> int:
        labels, dist, new = serial_assign(rows, self.centers, self.lam)
        self.centers = np.vstack([self.centers, new])
        self.labels = labels
        if partial is not None:
            self.total.append(partial)
        if index.size:
            self.total.append(ClusterStats.from_labels(rows, labels, self.centers.shape[0], weight,
                                                       cost=float(weight @ dist), index=index))
        return int(new.shape[0])

    def stats(self) -> ClusterStats:
        """Statistics of every row accepted so far, labels indexing :attr:`centers`."""
        return _stats_or_identity(self.total, *self.centers.shape)


#: Rows below which a fused D-Means epoch in memory runs in one thread.
_MIN_HALF = 65536
_POOL: list = []


def _halves_pool() -> ThreadPoolExecutor:
    """The two threads of in-memory fused D-Means epochs (started once per process)."""
    if not _POOL:
        _POOL.append(ThreadPoolExecutor(2, thread_name_prefix="dclust-dm"))
    return _POOL[0]


class DMRule(OCCRule):
    """D-Means (one label pass of a time step): a row whose best eq. 28 option in the snapshot is an
    instantiated cluster is kept; a row whose best option is a revival or a new cluster is proposed, and the
    driver runs the serial label pass on the proposals against the state as it stands (docs/algorithms.md 8.5).

    The previous labels are not stored (O(N)), so exact ties between a row's previous cluster and a lower slot go
    to the lower slot. ``fused=True`` runs the blocks with :func:`~dclust.kernels.dynmeans.dm_assign` (one fused
    read per block, distances from BLAS tiles; a row within rounding of a tie may take the other slot)."""

    merge = staticmethod(ClusterStats.merge_all)

    def __init__(self, state, *, fused: bool = False):
        self.state = state
        self.fused = bool(fused)
        self.total: list[ClusterStats] = []

    def block_task(self):
        s = self.state
        snapshot = type(s)(s.phi, s.gamma, s.ages, s.lam, s.Q, s.theta.copy(), s.inst.copy())
        return (dm_assign if self.fused else dm_propose), {"state": snapshot}

    def epoch(self, X, w, *, mix: int, lo: int, hi: int, split_every=None):
        """As :meth:`OCCRule.epoch`; a large batch in memory with ``fused`` runs as two halves in two threads
        (the kernel releases the GIL; the halves are fixed by the batch's length, so the sums are too)."""
        if not (self.fused and isinstance(X, np.ndarray) and X.shape[0] >= 2 * _MIN_HALF):
            return super().epoch(X, w, mix=mix, lo=lo, hi=hi, split_every=split_every)
        fn, kwargs = self.block_task()
        cuts = (0, X.shape[0] // 2, X.shape[0])

        def half(i):
            a, b = cuts[i], cuts[i + 1]
            return _epoch_partial(X[a:b], None if w is None else w[a:b], offset=a, block_index=0, propose=fn,
                                  mix=mix, lo=lo, hi=hi, **kwargs)

        return _merge_epoch(list(_halves_pool().map(half, (0, 1))), self.merge)

    def accept(self, partial, index, rows, weight, extra) -> int:
        before = self.state.n_slots
        if partial is not None:
            self.total.append(partial)
        if index.size:
            z = np.full(rows.shape[0], -1, dtype=np.int64)
            cost = label_pass(rows, np.arange(rows.shape[0]), z, self.state, prefer_current=False)
            self.total.append(ClusterStats.from_labels(rows, z, self.state.n_slots, weight,
                                                       cost=float(weight @ cost), index=index))
        return self.state.n_slots - before

    def stats(self) -> ClusterStats:
        return _stats_or_identity(self.total, self.state.n_slots, self.state.phi.shape[1])


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


# ------------------------------------------------------------------------------------------------------------------
# BP-means (docs/algorithms.md 8.3): the bits Z stay on the workers, inside the persisted results of the last epoch's
# tasks (one per group of blocks: :func:`dclust._dask.passes.map_groups`). An epoch is one graph: every group task
# takes its blocks' bits from its own last result, applies the driver's pending decisions (small *patches*) and the
# pass's pruning, sweeps, keeps its bits and merges its blocks' partials; one small task per group takes the merged
# subtrees and one finishes the tree, whose root comes back to the driver in the same submission.
# ------------------------------------------------------------------------------------------------------------------


def apply_patches(Z: np.ndarray, patches) -> np.ndarray:
    """Write driver decisions into a block's bits: each patch is ``(local rows, first column, bits)``."""
    for local, col0, bits in patches:
        Z[local, col0: col0 + bits.shape[1]] = bits
    return Z


def patch_bits(index: np.ndarray, col0: int, bits: np.ndarray, chunks) -> dict:
    """Split rows given by global ``index`` into per-block patches ``{block: [(local, col0, bits)]}``."""
    offsets = block_offsets(chunks)
    block = np.searchsorted(offsets, index, side="right") - 1
    out: dict[int, list] = {}
    for b in np.unique(block):
        sel = block == b
        out.setdefault(int(b), []).append((index[sel] - offsets[b], int(col0), np.ascontiguousarray(bits[sel])))
    return out


@dataclass
class BPBits:
    """Where the bits Z of a BP-means fit are: ``source``, a uint8 dask array (N, ``width``) with X's row chunks,
    or, with ``groups``, the persisted results of an epoch's group tasks (the ``parts`` of
    :func:`dclust._dask.passes.map_groups`: block ``b`` of group ``g`` kept ``(Z_block, pattern keys)``, ``width``
    columns); then the driver's ``pending`` patches ``{block: [(local, col0, bits)]}`` (columns below ``width`` or
    beyond it, which are first added as zeros), then the columns ``keep`` (None: all) and zero columns up to ``k``.
    :meth:`array` is the (N, k) uint8 dask array; a BP-means epoch takes the blocks themselves."""

    source: da.Array
    width: int
    k: int
    pending: dict = field(default_factory=dict)
    keep: np.ndarray | None = None
    groups: tuple | None = None  # the blocks of each task of the epoch whose results ``source`` holds

    @staticmethod
    def of(Z: da.Array) -> "BPBits":
        """The bits of a uint8 dask array."""
        return BPBits(Z, int(Z.shape[1]), int(Z.shape[1]))

    def select(self, keep: np.ndarray) -> "BPBits":
        """These bits with only the columns ``keep`` (an increasing selection of the ``k`` columns)."""
        keep = np.asarray(keep, dtype=np.int64)
        if keep.size == self.k and np.array_equal(keep, np.arange(self.k)):
            return self
        cols = keep if self.keep is None else self.keep[keep]
        return replace(self, k=int(keep.size), keep=cols)

    def patched(self, k: int, patches: dict) -> "BPBits":
        """These bits with ``k`` columns and the ``patches`` ``{block: [(local, col0, bits)]}`` (columns as the
        pending ones') applied after the pending ones."""
        pending = {b: list(items) for b, items in self.pending.items()}
        for b, items in patches.items():
            pending.setdefault(b, []).extend(items)
        return replace(self, k=int(k), pending=pending)

    def array(self, chunks: tuple[int, ...]) -> da.Array:
        """The bits as a lazy (N, k) uint8 dask array with the row chunks ``chunks`` (X's)."""
        if self.groups is None and not self.pending and self.keep is None and self.k == self.width:
            return self.source
        kw = {"keep": self.keep, "k": self.k}
        out = (tuple(chunks), (self.k,))
        if self.groups is not None:  # one task per block, on the worker holding its group's result
            patches = [self.pending.get(b, ()) for b in range(len(chunks))]
            return map_held(_held_bits, Held(self.source), self.groups, out, dtype=np.uint8, block_args=patches,
                            **kw)
        return self.source.map_blocks(_bits_block, pending=self.pending, chunks=out, dtype=np.uint8,
                                      meta=np.empty((0, 0), np.uint8), **kw)


def _bits_block(Zb, pending, keep, k, block_info=None):
    """(map_blocks over a uint8 :attr:`BPBits.source`) the block's bits."""
    b = block_info[None]["chunk-location"][0]
    return _prepared_bits(Zb, pending.get(b, ()), keep, k, copy=False)


def _held_bits(kept, patches, *, keep, k):
    """(:func:`~dclust._dask.passes.map_held` over an epoch's results) a block's bits from what its task kept."""
    return _prepared_bits(kept[0], patches, keep, k, copy=False)


def _prepared_bits(Zb, patches, keep, k, *, copy: bool) -> np.ndarray:
    """A block's bits from its source ``Zb`` (uint8): the patches applied, the columns ``keep`` taken, zero columns
    up to ``k``. A new array when ``copy`` or when anything changes; else ``Zb`` itself."""
    if patches:
        width = max([Zb.shape[1]] + [c + bits.shape[1] for _, c, bits in patches])
        Z = np.zeros((Zb.shape[0], width), np.uint8)
        Z[:, : Zb.shape[1]] = Zb
        Zb = apply_patches(Z, patches)
        copy = False
    if keep is not None:
        Zb = np.ascontiguousarray(Zb[:, keep])
        copy = False
    if Zb.shape[1] != k:
        Z = np.zeros((Zb.shape[0], k), np.uint8)
        Z[:, : min(k, Zb.shape[1])] = Zb[:, :k]
        return Z
    return np.array(Zb, dtype=np.uint8, order="C", copy=True) if copy else Zb


def _bp_propose(Xb, src, patches, *, offset, block_index, features, lam, mix, lo, hi, keep):
    """(:func:`~dclust._dask.passes.map_groups`) one block of a BP-means epoch: ``(kept, partial)``.

    ``src`` is the block of a uint8 source (copied: other tasks may read it) or ``(Z, pattern keys)``, what the
    block's task kept in the last epoch. Only this block's task of this epoch reads those (the next epoch takes
    what this one keeps), so its bits, unless patched or selected into a new array, are swept in place."""
    held = isinstance(src, tuple)
    Zb = src[0] if held else src
    Z = _prepared_bits(Zb, patches, keep, features.shape[0], copy=not held)
    # the last epoch's pattern keys of these bits, when they are its bits unchanged
    res = bp_block(Xb, Z, offset=offset, features=features, lam=lam, mix=mix, lo=lo, hi=hi, copy=False,
                   keys=src[1] if held and Z is Zb else None)
    index = res.local + offset
    rows = np.asarray(Xb[res.local], dtype=np.float64).reshape(-1, Xb.shape[1])
    props = (order_keys(mix, index), index, rows, res.resid, res.zbits, res.n_rows)
    return (res.Z, res.keys), (Gram(res.G, res.B, res.sse, res.flips), props)


def _merge_summaries(parts):
    gram = Gram.merge_all([p[0] for p in parts])
    props = tuple(np.concatenate([p[1][i] for p in parts]) for i in range(5)) + (sum(p[1][5] for p in parts),)
    return gram, props


class BPRule(OCCRule):
    """BP-means step 1: every row in the epoch's key range has its bits swept over the snapshot features; a row
    whose squared residual still exceeds ``lam`` is proposed. The driver sweeps each proposal over the features
    opened earlier in the validation and opens its residual as a new feature if its squared norm still exceeds
    ``lam`` (features are visited old first, then new, which is the serial order too).

    ``bits`` (:class:`BPBits`) are the bits at the start, over the ``features``' columns (their pending patches
    hold, e.g., the serial prefix's rows). ``capped``: capped BP-means ([MB] eq. 15): at ``max_features`` features
    rows stop opening features (and blocks stop proposing) instead of raising
    :class:`~dclust._dask.features.FeatureOverflow`.
    """

    merge = staticmethod(Gram.merge_all)

    def __init__(self, X, bits: BPBits, features, lam: float, *, max_features: int, capped: bool = False):
        self.chunks = tuple(X.chunks[0])
        self.features = np.asarray(features, dtype=np.float64).reshape(-1, X.shape[1])
        if bits.k != self.features.shape[0]:
            raise ValueError(f"bits over {bits.k} features for {self.features.shape[0]} features")
        self.bits = bits
        self.lam = float(lam)
        self.max_features = int(max_features)
        self.capped = bool(capped)
        self.grams: list[Gram] = []

    def epoch(self, X, w, *, mix: int, lo: int, hi: int, split_every=None):
        K, bits = self.features.shape[0], self.bits
        lam = np.inf if self.capped and K >= self.max_features else self.lam
        patches = [bits.pending.get(b, ()) for b in range(len(self.chunks))]
        run = map_groups(_bp_propose, _merge_summaries, X, bits.source if bits.groups is None else Held(bits.source),
                         groups=bits.groups, block_args=patches, split_every=split_every, features=self.features,
                         lam=lam, mix=mix, lo=lo, hi=hi, keep=bits.keep)
        # one submission: the bits stay where their tasks ran, the merged summary comes back
        parts, (gram, (keys, index, rows, resid, zbits, n_rows)) = persist_and_compute(run.parts, run.merged)
        self.bits = BPBits(parts, K, K, groups=run.groups)
        d = X.shape[1]
        extra = (resid.reshape(index.size, d), zbits.reshape(index.size, K))
        return gram, int(n_rows), keys, index, rows.reshape(index.size, d), np.ones(index.size), extra

    def accept(self, partial, index, rows, weight, extra) -> int:
        if partial is not None:
            self.grams.append(partial)
        if not index.size:
            return 0
        resid, zbits = extra
        K = self.features.shape[0]
        Zv, new, q, flips, overflow = serial_sweep(rows, zbits, self.features, self.lam, R=resid,
                                                   k_from=np.full(index.size, K),
                                                   max_new=max(0, self.max_features - K), saturate=self.capped)
        if overflow >= 0:
            raise FeatureOverflow(self.max_features + 1, float((resid * resid).sum(axis=1).max()), "OCC validation")
        self.grams.append(Gram(*gram_partial(rows, Zv), float(q.sum()), int(flips)))
        self.features = np.vstack([self.features, new])
        if new.shape[0]:
            self.bits = self.bits.patched(self.features.shape[0], patch_bits(index, K, Zv[:, K:], self.chunks))
        return int(new.shape[0])

    def result(self) -> tuple[BPBits, Gram]:
        """``(bits, gram)``: the bits after the pass and the Gram of every row accepted (padded to the number of
        features)."""
        K, d = self.features.shape
        return self.bits, Gram.merge_all(self.grams + [Gram(np.zeros((K, K)), np.zeros((K, d)))])
