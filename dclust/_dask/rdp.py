"""One RDP-means pass on Dask (docs/algorithms.md 8.4): phase 0 (the unlinked rows, keyed OCC epochs of
:mod:`dclust._dask.occ` with :class:`RDPRule`) then one phase per colour class of the linked rows (one epoch each
over the linked rows, gathered once per fit into one persisted tile per colour; all colour phases of a pass run in
the task that validates phase 0's last epoch, next to the tiles).

A pass is serial RDP-means on the permutation recorded in :class:`RDPPassRecord`: the serial prefix (first pass
only), then per phase-0 epoch its non-proposers and its proposals, then per colour phase likewise, each by order
key: a function of the seed and the global row index, so the model does not depend on the chunking. Labels of
linked rows live on the driver (O(links)); labels of unlinked rows are never gathered.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from dask.core import flatten

from ..kernels.divergence import divergence_nearest, neg_entropy
from ..kernels.distances import assign_stats, order_keys
from ..kernels.rdpmeans import color_phase, rdp_propose, validate_proposals
from ..kernels.stats import ClusterStats, point_keys
from .links import LinkLayout, fresh_name, map_with_args
from .occ import (
    KEY_END, KeyedEpoch, KeyedPass, OCCRule, keyed_pass, keyed_records_from, keyed_records_state, next_epoch_end,
    opening_rate, run_pass,
)
from .passes import block_offsets

__all__ = ["RDPPassRecord", "RDPRule", "PassResult", "init_pass", "extract_linked", "rdp_pass", "final_labels",
           "records_state", "records_from"]


@dataclass
class RDPPassRecord:
    """What one pass did, enough to rebuild its serial order and its labels."""

    phase0: KeyedPass  # the serial prefix (first pass only) and the keyed epochs over the unlinked rows
    snapshots: np.ndarray  # per phase-0 epoch, the number of centres its parallel rows saw
    linked_order: np.ndarray  # global rows of the linked rows, in serial order

    def permutation(self, mix: int, n: int, layout: LinkLayout) -> np.ndarray:
        order = self.phase0.permutation(mix, n)
        return np.concatenate([order[~np.isin(order, layout.nodes)], self.linked_order]).astype(np.int64)


def records_state(records: list[RDPPassRecord]) -> dict:
    """The pass records as flat arrays (for checkpoints; :func:`records_from` inverts it): the phase-0 records in
    the layout of :func:`dclust._dask.occ.keyed_records_state`, the epochs' snapshot sizes and the linked rows'
    serial orders."""
    state = keyed_records_state([r.phase0 for r in records])
    cat = lambda parts: np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)  # noqa: E731
    state["snapshots"] = cat([r.snapshots for r in records])
    state["linked_sizes"] = np.array([r.linked_order.size for r in records], dtype=np.int64)
    state["linked"] = cat([r.linked_order for r in records])
    return state


def records_from(state: dict) -> list[RDPPassRecord]:
    """The pass records saved by :func:`records_state` (ValueError if the arrays do not fit together)."""
    base = keyed_records_from(state)
    snaps = np.asarray(state["snapshots"], dtype=np.int64)
    sizes = np.asarray(state["linked_sizes"], dtype=np.int64)
    linked = np.asarray(state["linked"], dtype=np.int64)
    n_epochs = [len(r.epochs) for r in base]
    if (sizes.size != len(base) or sizes.sum() != linked.size or (sizes < 0).any()
            or snaps.size != sum(n_epochs)):
        raise ValueError("linked orders or snapshots that do not fit the pass records")
    off = np.concatenate([[0], np.cumsum(sizes)])
    e_off = np.concatenate([[0], np.cumsum(n_epochs)]).astype(np.int64)
    return [RDPPassRecord(r, snaps[e_off[p]:e_off[p + 1]].copy(), linked[off[p]:off[p + 1]].copy())
            for p, r in enumerate(base)]


@dataclass
class PassResult:
    stats: ClusterStats  # every row, labels in the pass's centre space
    centers: np.ndarray  # snapshot followed by the centres opened in the pass
    record: RDPPassRecord
    driver_rows: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # rows labelled on the driver
    driver_labels: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))


# ---------------------------------------------------------------------------------------------------------------
# set-up passes
# ---------------------------------------------------------------------------------------------------------------


def _init_partial(Xb, _, linked, *, offset, block_index, mix, end, kind):
    stats = assign_stats(Xb, np.zeros((1, Xb.shape[1])), offset=offset, block_index=block_index)[0]
    h = 0.0
    if kind == "kl":
        v = neg_entropy(Xb)
        h = float(v[np.isfinite(v)].sum())
    keys = order_keys(mix, np.arange(offset, offset + Xb.shape[0]))
    take = keys < np.uint64(end) if end < KEY_END else np.ones(Xb.shape[0], dtype=bool)
    take[linked] = False
    local = np.flatnonzero(take)
    return stats, h, keys[local], local + offset, np.asarray(Xb[local], dtype=np.float64)


def _merge_init(parts):
    stats = ClusterStats.merge_all([p[0] for p in parts])
    return (stats, float(sum(p[1] for p in parts))) + tuple(np.concatenate([p[i] for p in parts]) for i in (2, 3, 4))


def init_pass(X, layout: LinkLayout, *, mix, prefix_size, kind, split_every=None):
    """One pass: the one-cluster statistics (mean, scatter, fingerprint, NaN check), ``sum h(x)`` for KL, and the
    serial prefix: the unlinked rows whose order key is below ``prefix_end`` (about ``prefix_size`` rows), in key
    order. Returns ``(stats, H, prefix_end, index, rows)``."""
    n = X.shape[0]
    end = KEY_END if prefix_size >= n else (prefix_size * KEY_END) // max(n, 1)
    args = [layout.linked_local(b) for b in range(len(X.chunks[0]))]
    stats, H, keys, idx, rows = run_pass(_init_partial, _merge_init, X, None, block_args=args,
                                         split_every=split_every, mix=mix, end=end, kind=kind)
    order = np.argsort(keys, kind="stable")
    return stats, H, end, idx[order], rows.reshape(-1, X.shape[1])[order]


def _extract(Xb, linked, *, offset, block_index):
    return np.asarray(Xb[linked], dtype=np.float64)


def _gather_tiles(parts, tiles):
    """(In a task, once per fit.) The rows of every colour tile, contiguous in processing order, with their
    :func:`~dclust.kernels.stats.point_keys`: ``[(tile, X_tile, keys)]``. ``parts`` hold the linked rows of every
    block (boxed), in node order."""
    X = np.concatenate([p[0] for p in parts])
    return [(t, np.ascontiguousarray(X[t.ids]), point_keys(t.rows)) for t in tiles]


def extract_linked(X, layout: LinkLayout, *, mix):
    """Order the colour tiles of ``layout`` by order key and gather their rows (float64) into ONE persisted object
    (O(links), built once per fit, where the scheduler puts it): a pass's colour phases run in one task next to it
    (:func:`_epoch_task`), and nothing about the links travels again. Returns the persisted Delayed."""
    from dask._task_spec import DataNode, List, Task, TaskRef
    from dask.delayed import Delayed
    from dask.highlevelgraph import HighLevelGraph

    layout.set_order(mix)
    parts = map_with_args(_extract, X, [layout.linked_local(b) for b in range(len(X.chunks[0]))])
    name = fresh_name(_gather_tiles)
    refs = List(*[TaskRef(k) for k in flatten(parts.__dask_keys__())])
    dsk = {name: Task(name, _gather_tiles, refs, DataNode(None, layout.tiles))}
    return Delayed(name, HighLevelGraph.from_collections(name, dsk, dependencies=[parts])).persist()


# ---------------------------------------------------------------------------------------------------------------
# phase 0: keyed OCC epochs over the unlinked rows
# ---------------------------------------------------------------------------------------------------------------


def _validate_epoch(epoch, C, *, lam, kind):
    """The end of a phase-0 epoch (on the driver or in a task): the proposals of the merged epoch (see
    :meth:`dclust._dask.occ.OCCRule.epoch`) in key order, validated serially against ``C``. Returns
    ``(partial, n_rows, index, rows, labels, dist, new)``."""
    part, n_rows, keys, index, rows = epoch[:5]
    order = np.argsort(keys)  # distinct rows have distinct keys: any sort is the stable one
    index, rows = index[order], rows[order]
    labels, dist, new = validate_proposals(rows, lam, kind, C)
    return part, n_rows, index, rows, labels, dist, new


class RDPRule(OCCRule):
    """Phase 0 of RDP-means: DP-means over the unlinked rows (their link terms are 0) with the divergence
    ``kind``; also keeps the labels of the rows decided on the driver (prefix and proposals)."""

    merge = staticmethod(ClusterStats.merge_all)

    def __init__(self, layout: LinkLayout, centers, lam: float, kind: str):
        self.layout = layout
        self.centers = np.asarray(centers, dtype=np.float64)
        self.lam, self.kind = float(lam), kind
        self.total: list[ClusterStats] = []
        self.driver_rows: list[np.ndarray] = []
        self.driver_labels: list[np.ndarray] = []
        self.snapshots: list[int] = []

    def block_args(self):
        return [self.layout.linked_local(b) for b in range(len(self.layout.chunks))]

    def block_task(self):
        return rdp_propose, {"centers": self.centers, "lam": self.lam, "kind": self.kind}

    def accept(self, partial, index, rows, weight, extra) -> int:
        labels, dist, new = validate_proposals(rows, self.lam, self.kind, self.centers)
        return self.record(partial, index, rows, labels, dist, new)

    def record(self, partial, index, rows, labels, dist, new) -> int:
        """Fold validated proposals (and, for an epoch, its ``partial``) into the state; returns ``len(new)``."""
        if partial is not None:  # an epoch (not the serial prefix): its parallel rows saw these centres
            self.snapshots.append(self.centers.shape[0])
            self.total.append(partial)
        self.centers = np.vstack([self.centers, new])
        if index.size:
            self.total.append(ClusterStats.from_labels(rows, labels, self.centers.shape[0], cost=float(dist.sum()),
                                                       index=index))
            self.driver_rows.append(index)
            self.driver_labels.append(labels.astype(np.int64))
        return int(new.shape[0])


def _color_phase(tile, X, keys, C, z, *, lam, xi, kind):
    """One colour phase (one OCC epoch over the rows of ``tile``) against ``(C, z)``: the rows decided in parallel
    (:func:`dclust.kernels.rdpmeans.color_phase`), then the proposals validated serially in processing order.
    ``z`` is updated in place. Returns ``(C, stats, proposals)`` (positions in the tile)."""
    k0 = C.shape[0]
    labels, stats, prop = color_phase(X, keys, indptr=tile.indptr, cols=tile.cols, vals=tile.vals, z=z, centers=C,
                                      lam=lam, xi=xi, kind=kind)
    keep = labels >= 0
    z[tile.ids[keep]] = labels[keep]
    out = [stats]
    if prop.size:
        rows = X[prop]
        labels, dist, new = validate_proposals(rows, lam, kind)
        C = np.vstack([C, new])
        z[tile.ids[prop]] = k0 + labels
        out.append(ClusterStats.from_labels(rows, k0 + labels, C.shape[0], cost=float(dist.sum()),
                                            index=tile.rows[prop]))
    return C, out, prop


def _all_colors(tiles, C, z, *, lam, xi, kind):
    """Every colour phase of a pass, in one task: phase ``c`` sees the state left by the validation of phase
    ``c - 1``. ``tiles`` is the persisted object of :func:`extract_linked`; the state is ``(C, z)`` (``z``, the
    labels of the linked rows, travels as int32 both ways). Each phase is one OCC epoch: serial RDP-means on the
    recorded order, as if its rows ran in parallel tasks. Returns ``(C, z, stats, proposals per colour)``."""
    z = z.astype(np.int64)
    stats, props = [], []
    for tile, X, keys in tiles:
        C, s, p = _color_phase(tile, X, keys, C, z, lam=lam, xi=xi, kind=kind)
        stats += s
        props.append(p)
    return C, z.astype(np.int32), stats, props


def _epoch_task(epoch, C, tiles, guess, *, lam, xi, kind):
    """:func:`_validate_epoch` in a task (on the epoch's boxed merged result) and, given the colour ``tiles``
    (when the epoch ends phase 0), every colour phase from the centres it leaves in the same task. ``guess`` is
    :func:`_guessed_colors`, run beside the epoch's block tasks from ``C``: its colour phases are the result when
    the validation opens no centre (the centres phase 0 leaves are then ``C``, and the colour phases see nothing
    else of phase 0), else they run again from the new centres. Returns ``(validation, colours or None)``."""
    v = _validate_epoch(epoch[()], C, lam=lam, kind=kind)
    if tiles is None:
        return v, None
    colors, z = guess
    if v[6].shape[0]:
        colors = _all_colors(tiles, np.vstack([C, v[6]]), z, lam=lam, xi=xi, kind=kind)
    return v, colors


def _guessed_colors(tiles, C, z, *, lam, xi, kind):
    """``(_all_colors(tiles, C, z), z)``: the colour phases from the pass's centres, and the labels they started
    from (for :func:`_epoch_task`, should phase 0 open a centre)."""
    return _all_colors(tiles, C, z, lam=lam, xi=xi, kind=kind), z


def _finish_colors(out, layout: LinkLayout, z, total, order_out):
    """Fold the result of :func:`_all_colors` into the pass (on the driver): the labels ``z`` (in place), the
    statistics and the serial order (per colour its non-proposers, then its proposals, each in processing
    order). Returns the centres."""
    C, z_new, stats, props = out
    z[:] = z_new
    total.extend(stats)
    for tile, prop in zip(layout.tiles, props):
        kept = np.ones(tile.rows.size, dtype=bool)
        kept[prop] = False
        order_out += [tile.rows[kept], tile.rows[prop]]
    return C


def _run_task(fn, *args, deps, **kwargs):
    """``fn(*args, **kwargs)`` as one task of its own graph on top of the collections ``deps``, computed."""
    from dask._task_spec import Task
    from dask.delayed import Delayed
    from dask.highlevelgraph import HighLevelGraph

    key = (fresh_name(fn), 0)
    graph = HighLevelGraph.from_collections(key[0], {key: Task(key, fn, *args, **kwargs)}, dependencies=deps)
    return Delayed(key, graph, layer=key[0]).compute(optimize_graph=False)


def _colors_guess(tiles, C, z, *, lam, xi, kind):
    """One task, :func:`_guessed_colors`, ahead of the block tasks queued on its worker, so that the colour phases
    (which would run alone after phase 0's epoch) run beside them. Returns the task as a collection."""
    import dask
    from dask._task_spec import DataNode, Task, TaskRef
    from dask.delayed import Delayed
    from dask.highlevelgraph import HighLevelGraph

    key = (fresh_name(_guessed_colors), 0)
    task = Task(key, _guessed_colors, TaskRef(tiles.key), DataNode(None, C), DataNode(None, z.astype(np.int32)),
                lam=lam, xi=xi, kind=kind)
    with dask.annotate(priority=1):
        graph = HighLevelGraph.from_collections(key[0], {key: task}, dependencies=[tiles])
    return Delayed(key, graph, layer=key[0])


def _color_phases_fused(tiles, layout, C, z, *, lam, xi, kind, total, order_out):
    """All colour phases of a pass in ONE task (one round trip), on the worker that holds the tiles
    (:func:`extract_linked`). Each phase is one OCC epoch (``max_proposals`` applies to phase 0 only): still serial
    RDP-means on the recorded order."""
    from dask._task_spec import DataNode, TaskRef

    if tiles is None:
        return C
    out = _run_task(_all_colors, TaskRef(tiles.key), DataNode(None, C), DataNode(None, z.astype(np.int32)),
                    deps=[tiles], lam=lam, xi=xi, kind=kind)
    return _finish_colors(out, layout, z, total, order_out)


def _first_epoch_and_colors(X, tiles, layout, rule: RDPRule, z, *, lo, hi, xi, mix, split_every, order_out):
    """Phase 0's first epoch (keys ``[lo, hi]``), then in one task its validation and, if it ends phase 0 (``hi``
    is the last key), all colour phases -- found beside the epoch's block tasks from the pass's centres, or run
    again from the centres the validation leaves when it opened one: one graph, one round trip. Returns
    ``(epoch record, n_rows, colours done)``."""
    from dask._task_spec import DataNode, TaskRef

    epoch = rule.epoch_graph(X, None, mix=mix, lo=lo, hi=hi, split_every=split_every)
    (ekey,) = flatten(epoch.__dask_keys__())
    last = hi == KEY_END - 1
    colors = last and tiles is not None
    deps, guess = [epoch], None
    if colors:
        guessed = _colors_guess(tiles, rule.centers, z, lam=rule.lam, xi=xi, kind=rule.kind)
        deps, guess = [epoch, tiles, guessed], TaskRef(guessed.key)
    v, out = _run_task(_epoch_task, TaskRef(ekey), DataNode(None, rule.centers),
                       TaskRef(tiles.key) if colors else None, guess, deps=deps, lam=rule.lam, xi=xi, kind=rule.kind)
    n_rows, index = v[1], v[2]
    accepted = rule.record(*(v[:1] + v[2:]))
    if colors:
        rule.centers = _finish_colors(out, layout, z, rule.total, order_out)
    return KeyedEpoch(lo, hi, index, accepted), n_rows, last


def rdp_pass(X, tiles, layout: LinkLayout, C, z, *, lam, xi, kind, mix, max_proposals, split_every=None,
             prefix=None) -> PassResult:
    """One RDP-means pass. ``z`` (labels of the linked rows, by node id) is updated in place.

    ``prefix`` is ``(prefix_end, index, rows)`` of the serial prefix (first pass; processed first, on the driver,
    against ``C``); phase 0 then runs keyed OCC epochs over the unlinked rows from key ``prefix_end`` (the first
    sized by the prefix's opening rate), then the colour phases of the linked rows. Phase 0's first epoch, its
    validation and all colour phases go to the scheduler as one graph (:func:`_first_epoch_and_colors`). Returns the
    statistics of every row (labels indexing the returned centres), the centres, and the pass record.
    """
    rule = RDPRule(layout, C, lam, kind)
    start, rate = 0, 0.0
    if prefix is not None:
        start, p_index, p_rows = prefix
        rate = 1.0
        if p_index.size:
            rule.accept(None, p_index, p_rows, np.ones(p_index.size), ())
            rate = opening_rate(rule.driver_labels[-1], C.shape[0])
    linked_order: list[np.ndarray] = []
    epochs: list[KeyedEpoch] = []
    colors_done = False
    if start < KEY_END:
        hi = next_epoch_end(start, X.shape[0], rate, max_proposals)
        ep, n_rows, colors_done = _first_epoch_and_colors(X, tiles, layout, rule, z, lo=start, hi=hi, xi=xi,
                                                            mix=mix, split_every=split_every,
                                                            order_out=linked_order)
        epochs.append(ep)
        if hi < KEY_END - 1:
            more, _ = keyed_pass(X, None, rule, mix=mix, start=hi + 1,
                                 rate=ep.proposals.size / max(n_rows + ep.proposals.size, 1),
                                 max_proposals=max_proposals, split_every=split_every)
            epochs += more
    if not colors_done:
        rule.centers = _color_phases_fused(tiles, layout, rule.centers, z, lam=lam, xi=xi, kind=kind,
                                            total=rule.total, order_out=linked_order)
    C = rule.centers
    stats = ClusterStats.merge_all(rule.total) if rule.total else ClusterStats.identity(C.shape[0], X.shape[1])
    if stats.n_clusters < C.shape[0]:
        stats = stats.merge(ClusterStats.identity(C.shape[0], X.shape[1]))
    record = RDPPassRecord(KeyedPass(0 if prefix is None else start, epochs),
                           np.asarray(rule.snapshots, dtype=np.int64),
                           np.concatenate(linked_order) if linked_order else np.zeros(0, np.int64))

    def cat(a: list[np.ndarray]) -> np.ndarray:
        return np.concatenate(a) if a else np.zeros(0, np.int64)

    return PassResult(stats, C, record, cat(rule.driver_rows), cat(rule.driver_labels))


# ---------------------------------------------------------------------------------------------------------------
# labels of the last pass
# ---------------------------------------------------------------------------------------------------------------


def _labels_block(Xb, arg, *, offset, block_index, mix, epochs, centers, remap, kind):
    linked, linked_labels, drv_rows, drv_labels = arg
    n = Xb.shape[0]
    out = np.full(n, -1, dtype=np.int64)
    if epochs:
        keys = order_keys(mix, np.arange(offset, offset + n))
        for lo, hi, k in epochs:
            rows = np.flatnonzero((keys >= np.uint64(lo)) & (keys <= np.uint64(hi)))
            if rows.size:
                out[rows] = divergence_nearest(Xb[rows], centers[:k], kind)[0]
    out[drv_rows - offset] = drv_labels
    out[linked] = linked_labels
    return remap[out].astype(np.int32)


def _unbox(p):
    return p[0]


def final_labels(X, layout: LinkLayout, result: PassResult, z_pass, remap, *, mix, kind):
    """Lazy (n_samples,) int32 labels of the pass ``result``, mapped through ``remap`` (pass id -> final id).

    Rows labelled in parallel are re-assigned to their epoch's snapshot centres; rows labelled on the driver
    (prefix, proposals) and linked rows (``z_pass``, by node id) take their recorded labels.
    """
    import dask.array as da

    nb = len(X.chunks[0])
    rec = result.record
    epochs = [(ep.lo, ep.hi, int(k)) for ep, k in zip(rec.phase0.epochs, rec.snapshots)]
    offsets = block_offsets(X.chunks[0])
    which = np.searchsorted(offsets, result.driver_rows, side="right") - 1
    args = []
    for b in range(nb):
        m = which == b
        lo, hi = int(layout.ptr[b]), int(layout.ptr[b + 1])
        args.append((layout.local[lo:hi], z_pass[lo:hi], result.driver_rows[m], result.driver_labels[m]))
    remap = np.append(np.asarray(remap, dtype=np.int64), -1)  # index -1 (never left) stays -1
    parts = map_with_args(_labels_block, X, args, mix=mix, epochs=epochs, centers=result.centers, remap=remap,
                          kind=kind)
    return da.concatenate([parts.blocks[b].map_blocks(_unbox, dtype=np.int32, chunks=((X.chunks[0][b],),))
                           for b in range(nb)]) if nb else da.zeros(0, dtype=np.int32)
