"""One RDP-means pass on Dask (ALGORITHMS.md 8.4): phase 0 (unlinked rows, OCC epochs over X) then one phase per
colour class of the linked rows (OCC epochs over the persisted linked rows), proposals validated serially (in
tasks when the pass runs as one graph, see :func:`_pass_one_graph`; else on the driver).

A pass is serial RDP-means on the permutation recorded in :class:`RDPPassRecord`: the serial prefix (first pass
only), then per phase-0 epoch its non-proposers and its proposals in validation order, then per colour phase and
epoch likewise. Labels of linked rows live on the driver (O(links)); labels of unlinked rows are never gathered.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import dask
import numpy as np

from ..kernels.divergence import divergence_nearest, neg_entropy
from ..kernels.distances import assign_stats
from ..kernels.dpmeans import block_permutation
from ..kernels.rdpmeans import linked_block, unlinked_block, unlinked_order, validate_proposals
from ..kernels.stats import ClusterStats
from .passes import block_offsets
from .links import LinkLayout, fresh_name, map_parts, map_with_args, object_array
from . import occ
from .reduce import tree_reduce

__all__ = ["RDPPassRecord", "PassResult", "init_pass", "extract_linked", "rdp_pass", "final_labels", "records_state",
           "records_from"]


@dataclass
class RDPPassRecord:
    """What one pass did, enough to rebuild its serial order and its labels."""

    prefix: np.ndarray  # global rows of the serial prefix, in order (first pass only)
    epochs: list  # phase-0 epochs: (blocks, starts, stops, proposals (global rows, validation order), K_snapshot)
    linked_order: np.ndarray  # global rows of the linked rows, in serial order

    def permutation(self, seed: int, chunks: tuple[int, ...], layout: LinkLayout) -> np.ndarray:
        offsets = block_offsets(chunks)
        parts = [self.prefix]
        for blocks, starts, stops, props, _ in self.epochs:
            pset = set(props.tolist())
            for b, s, e in zip(blocks, starts, stops):
                idx = unlinked_order(seed, int(b), chunks[b], layout.linked_local(int(b)))[s:e] + offsets[b]
                parts.append(np.array([i for i in idx if i not in pset], dtype=np.int64))
            parts.append(props)
        parts.append(self.linked_order)
        return np.concatenate(parts).astype(np.int64)


def records_state(records: list[RDPPassRecord]) -> dict:
    """The pass records as flat int64 arrays (for checkpoints; :func:`records_from` inverts it). The phase-0
    epochs use the layout of :func:`dclust._dask.occ.records_state` (an epoch's ``accepted`` holds its centre
    snapshot size); the linked rows' serial orders follow."""
    state = occ.records_state([occ.PassRecord(r.prefix, [occ.EpochRecord(b, s, e, p, int(k)) for b, s, e, p, k
                                                         in r.epochs]) for r in records])
    state["linked_sizes"] = np.array([r.linked_order.size for r in records], dtype=np.int64)
    state["linked"] = (np.concatenate([r.linked_order for r in records]).astype(np.int64) if records
                       else np.zeros(0, np.int64))
    return state


def records_from(state: dict) -> list[RDPPassRecord]:
    """The pass records saved by :func:`records_state` (ValueError if the arrays do not fit together)."""
    base = occ.records_from(state)
    sizes = np.asarray(state["linked_sizes"], dtype=np.int64)
    linked = np.asarray(state["linked"], dtype=np.int64)
    if sizes.size != len(base) or sizes.sum() != linked.size or (sizes < 0).any():
        raise ValueError("linked orders that do not fit the pass records")
    off = np.concatenate([[0], np.cumsum(sizes)])
    return [RDPPassRecord(r.prefix, [(ep.blocks, ep.starts, ep.stops, ep.proposals, int(ep.accepted))
                                     for ep in r.epochs], linked[off[p]:off[p + 1]].copy())
            for p, r in enumerate(base)]


@dataclass
class PassResult:
    stats: ClusterStats  # every row, labels in the pass's centre space
    centres: np.ndarray  # snapshot followed by the centres opened in the pass
    record: RDPPassRecord
    driver_rows: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # rows labelled on the driver
    driver_labels: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))


# ---------------------------------------------------------------------------------------------------------------
# set-up passes
# ---------------------------------------------------------------------------------------------------------------


def _init_partial(Xb, linked, *, offset, block_index, seed, counts, kind):
    stats = assign_stats(Xb, np.zeros((1, Xb.shape[1])), offset=offset, block_index=block_index)[0]
    h = 0.0
    if kind == "kl":
        v = neg_entropy(Xb)
        h = float(v[np.isfinite(v)].sum())
    c = int(counts[block_index])
    local = unlinked_order(seed, block_index, Xb.shape[0], linked)[:c]
    return stats, h, np.arange(c), local + offset, np.asarray(Xb[local], dtype=np.float64)


def _merge_init(parts):
    stats = ClusterStats.merge_all([p[0] for p in parts])
    return (stats, float(sum(p[1] for p in parts))) + tuple(np.concatenate([p[i] for p in parts]) for i in (2, 3, 4))


def init_pass(X, layout: LinkLayout, *, seed, counts, kind, split_every=None):
    """One pass: the one-cluster statistics (mean, scatter, fingerprint, NaN check), ``sum h(x)`` for KL, and the
    serial prefix of unlinked rows in (position, block) order. Returns ``(stats, H, index, rows)``."""
    args = [layout.linked_local(b) for b in range(len(X.chunks[0]))]
    parts = map_with_args(_init_partial, X, args, seed=seed, counts=counts, kind=kind)
    stats, H, pos, idx, rows = tree_reduce(parts, _merge_init, split_every=split_every).compute()[()]
    order = np.lexsort((idx, pos))
    return stats, H, idx[order], rows.reshape(-1, X.shape[1])[order]


def _extract(Xb, linked, *, offset, block_index, seed):
    inv = np.empty(Xb.shape[0], dtype=np.int64)
    inv[block_permutation(seed, block_index, Xb.shape[0])] = np.arange(Xb.shape[0])
    return np.asarray(Xb[linked], dtype=np.float64), linked.astype(np.int64) + offset, inv[linked]


def _ranks_of(p):
    return object_array([q[2] for q in p])


def extract_linked(X, layout: LinkLayout, *, seed):
    """Persist each block's linked rows ``(X_linked, global rows, ranks)`` where the blocks are (workers, or memory
    for the local schedulers) and give the layout their processing ranks. Returns the persisted object array."""
    args = [layout.linked_local(b) for b in range(len(X.chunks[0]))]
    parts = map_with_args(_extract, X, args, seed=seed).persist()
    ranks = parts.map_blocks(_ranks_of, dtype=object).compute()
    layout.set_ranks(list(ranks))
    return parts


# ---------------------------------------------------------------------------------------------------------------
# phases
# ---------------------------------------------------------------------------------------------------------------


def _unlinked_partial(Xb, arg, *, offset, block_index, **kw):
    linked, start = arg
    return unlinked_block(Xb, offset=offset, block_index=block_index, start=int(start), linked=linked, **kw)


def _stats_of(parts):
    return object_array([p.stats for p in parts])


def _props_of(parts):
    return object_array([(p.index, p.position, p.rows, p.stop) for p in parts])


def _epoch_graph(X, layout, C, todo, starts, *, lam, kind, seed, max_proposals, split_every):
    """The block tasks of one phase-0 epoch over the blocks ``todo``: the statistics of their parallel rows
    (tree-reduced) and their proposals, both lazy."""
    args = [None] * len(X.chunks[0])
    for b in todo:
        args[int(b)] = (layout.linked_local(int(b)), starts[b])
    parts = map_with_args(_unlinked_partial, X, args, blocks=todo, centres=C, lam=lam, seed=seed,
                          max_proposals=max_proposals, kind=kind)
    stats = tree_reduce(parts.map_blocks(_stats_of, dtype=object, name=fresh_name(_stats_of)),
                        ClusterStats.merge_all, split_every=split_every)
    return stats, parts.map_blocks(_props_of, dtype=object, name=fresh_name(_props_of))


def _epoch_validate(props, C, *, lam, kind):
    """The end of a phase-0 epoch (on the driver or in a task): the proposals in (position, block) order
    validated serially against the snapshot ``C``. Returns ``(index, rows, labels, dist, new, stops)``."""
    d = C.shape[1]
    index = np.concatenate([p[0] for p in props])
    position = np.concatenate([p[1] for p in props])
    block = np.concatenate([np.full(p[0].size, k) for k, p in enumerate(props)])
    order = np.lexsort((block, position))
    rows = np.concatenate([p[2] for p in props]).reshape(-1, d)[order]
    index = index[order]
    labels, dist, new = validate_proposals(rows, lam, kind, C)
    return index, rows, labels, dist, new, np.array([p[3] for p in props], dtype=np.int64)


def _apply_epoch(v, C, todo, starts, *, total, drv_rows, drv_labels, epochs):
    """Record a validated phase-0 epoch ``v`` (from :func:`_epoch_validate`) on the driver; returns the centres."""
    index, rows, labels, dist, new, stops = v
    k_snap = C.shape[0]
    C = np.vstack([C, new])
    if index.size:
        total.append(ClusterStats.from_labels(rows, labels, C.shape[0], cost=float(dist.sum()), index=index))
        drv_rows.append(index)
        drv_labels.append(labels.astype(np.int64))
    epochs.append((todo, starts[todo].copy(), stops, index, k_snap))
    starts[todo] = stops
    return C


def _phase0(X, layout, C, *, lam, kind, seed, starts, max_proposals, split_every, total, drv_rows, drv_labels,
            epochs=None):
    sizes = np.asarray(X.chunks[0], dtype=np.int64) - np.diff(layout.ptr)
    starts = np.asarray(starts, dtype=np.int64).copy()
    epochs = [] if epochs is None else epochs
    while True:
        todo = np.flatnonzero(starts < sizes)
        if todo.size == 0:
            return C, epochs
        stats, props = _epoch_graph(X, layout, C, todo, starts, lam=lam, kind=kind, seed=seed,
                                    max_proposals=max_proposals, split_every=split_every)
        stats, props = dask.compute(stats, props)
        total.append(stats[()])
        v = _epoch_validate(list(props), C, lam=lam, kind=kind)
        C = _apply_epoch(v, C, todo, starts, total=total, drv_rows=drv_rows, drv_labels=drv_labels, epochs=epochs)


def _linked_partial(part, arg, **kw):
    Xl, index, _ = part
    pb, z_nb, start = arg
    return linked_block(Xl, index, sel=pb.sel, indptr=pb.indptr, cols=pb.cols, vals=pb.vals, z_nb=z_nb,
                        start=int(start), **kw)


def _lprops_of(parts):
    return object_array([(p.labels, p.position, p.rows, p.stop) for p in parts])


def _colour_phase(lparts, layout, c, C, z, *, lam, xi, kind, max_proposals, split_every, total, order_out):
    blocks = [b for b, pb in enumerate(layout.phases[c]) if pb is not None]
    starts = {b: 0 for b in blocks}
    d = C.shape[1]
    while True:
        todo = [b for b in blocks if starts[b] < layout.phases[c][b].sel.size]
        if not todo:
            return C
        args = [(layout.phases[c][b], z[layout.phases[c][b].nb], starts[b]) for b in todo]
        parts = map_parts(_linked_partial, lparts, args, todo, centres=C, lam=lam, xi=xi, kind=kind,
                          max_proposals=max_proposals)
        stats, props = dask.compute(
            tree_reduce(parts.map_blocks(_stats_of, dtype=object, name=fresh_name(_stats_of)),
                        ClusterStats.merge_all, split_every=split_every),
            parts.map_blocks(_lprops_of, dtype=object, name=fresh_name(_lprops_of)),
        )
        total.append(stats[()])
        prop_ids, prop_pos, prop_blk, prop_rows = [], [], [], []
        for b, (labels, position, rows, stop) in zip(todo, props):
            pb = layout.phases[c][b]
            ids = pb.ids[starts[b] : stop]
            ok = labels >= 0
            z[ids[ok]] = labels[ok]
            order_out.append(layout.nodes[ids[ok]])
            prop_ids.append(pb.ids[position])
            prop_pos.append(position)
            prop_blk.append(np.full(position.size, b))
            prop_rows.append(rows)
            starts[b] = int(stop)
        order = np.lexsort((np.concatenate(prop_blk), np.concatenate(prop_pos)))
        ids = np.concatenate(prop_ids)[order]
        rows = np.concatenate(prop_rows).reshape(-1, d)[order]
        if ids.size:
            k0 = C.shape[0]
            labels, dist, new = validate_proposals(rows, lam, kind)
            C = np.vstack([C, new])
            z[ids] = k0 + labels
            total.append(ClusterStats.from_labels(rows, k0 + labels, C.shape[0], cost=float(dist.sum()),
                                                  index=layout.nodes[ids]))
            order_out.append(layout.nodes[ids])


def _fused_block(part, phases, state, c, *, lam, xi, kind):
    Xl, index, _ = part[0]
    pb = phases[0][c]
    C, z = state[0], state[1]
    res = linked_block(Xl, index, sel=pb.sel, indptr=pb.indptr, cols=pb.cols, vals=pb.vals, z_nb=z[pb.nb],
                       centres=C, lam=lam, xi=xi, kind=kind, start=0, max_proposals=np.iinfo(np.int64).max)
    return res, pb.ids, index[pb.sel]


def _fused_validate(state, results, blocks, *, lam, kind):
    """The end of one colour phase inside the task graph: commit the blocks' labels, validate the proposals
    serially (in (position, block) order) and return the next state ``(C, z, stats, order)``."""
    C, z, stats, order = state
    z = z.copy()
    stats, order = list(stats), list(order)
    d = C.shape[1]
    prop_ids, prop_pos, prop_blk, prop_rows, prop_nodes = [], [], [], [], []
    for b, (res, ib, nb) in zip(blocks, results):
        ok = res.labels >= 0
        z[ib[ok]] = res.labels[ok]
        order.append(nb[ok])
        stats.append(res.stats)
        prop_ids.append(ib[res.position])
        prop_nodes.append(nb[res.position])
        prop_pos.append(res.position)
        prop_blk.append(np.full(res.position.size, b))
        prop_rows.append(res.rows)
    srt = np.lexsort((np.concatenate(prop_blk), np.concatenate(prop_pos)))
    pid = np.concatenate(prop_ids)[srt]
    if pid.size:
        rows = np.concatenate(prop_rows).reshape(-1, d)[srt]
        nodes_all = np.concatenate(prop_nodes)[srt]
        k0 = C.shape[0]
        labels, dist, new = validate_proposals(rows, lam, kind)
        C = np.vstack([C, new])
        z[pid] = k0 + labels
        stats.append(ClusterStats.from_labels(rows, k0 + labels, C.shape[0], cost=float(dist.sum()),
                                              index=nodes_all))
        order.append(nodes_all)
    return C, z, stats, order


def _phase_parts(layout):
    """Per block, its :class:`PhaseBlock` of every colour (or None), persisted once per fit where the blocks
    are, so a pass's graph carries only the centres and the labels."""
    if layout.phase_parts is None:
        import dask.array as da

        per_block = [tuple(layout.phases[c][b] for c in range(layout.n_colours)) for b in range(len(layout.chunks))]
        layout.phase_parts = da.from_array(object_array(per_block), chunks=1, name=fresh_name(_phase_parts)).persist()
    return layout.phase_parts


def _epoch_task(chunks, C, *, lam, kind):
    """:func:`_epoch_validate` in a task, on the proposals' chunks; also the state the colour phases start from."""
    v = _epoch_validate([p for ch in chunks for p in ch], C, lam=lam, kind=kind)
    return v, np.vstack([C, v[4]])


def _colour_state(v, z):
    return v[1], z, [], []


def _colour_graph(lparts, layout, state, *, lam, xi, kind):
    """The task specs of all colour phases of a pass, starting from ``state`` (a task spec giving
    ``(C, z, stats, order)``). Returns ``(dsk, last key, dependencies)`` or None without colour phases."""
    from dask._task_spec import DataNode, List, Task, TaskRef

    pparts = _phase_parts(layout)
    tag = fresh_name(_fused_block)
    part_keys = list(lparts.__dask_keys__())
    phase_keys = list(pparts.__dask_keys__())
    dsk: dict = {}
    last = None
    for c in range(layout.n_colours):
        blocks = [b for b, pb in enumerate(layout.phases[c]) if pb is not None]
        if not blocks:
            continue
        res = []
        for b in blocks:
            key = (f"{tag}-block", c, b)
            dsk[key] = Task(key, _fused_block, TaskRef(part_keys[b]), TaskRef(phase_keys[b]), state, c,
                            lam=lam, xi=xi, kind=kind)
            res.append(TaskRef(key))
        last = (f"{tag}-validate", c)
        dsk[last] = Task(last, _fused_validate, state, List(*res), DataNode(None, blocks), lam=lam, kind=kind)
        state = TaskRef(last)
    return None if last is None else (dsk, last, tag, [lparts, pparts])


def _finish_colours(out, z, total, order_out):
    C, z_new, stats, order = out
    z[:] = z_new
    total.extend(stats)
    order_out.extend(order)
    return C


def _colour_phases_fused(lparts, layout, C, z, *, lam, xi, kind, total, order_out):
    """All colour phases of a pass in ONE task graph (one round trip): phase ``c``'s block tasks read the state
    left by phase ``c - 1``'s validation task, which runs on a worker instead of the driver. Each phase is one
    OCC epoch (``max_proposals`` applies to phase 0 only): still serial RDP-means on the recorded order.

    The graph is written as task specs with fixed keys (no tokenising); the O(links) phase lists are persisted
    once per fit (:func:`_phase_parts`)."""
    from dask._task_spec import DataNode
    from dask.delayed import Delayed
    from dask.highlevelgraph import HighLevelGraph

    if lparts is None or layout.n_colours == 0:
        return C, z
    g = _colour_graph(lparts, layout, DataNode(None, (C, z, [], [])), lam=lam, xi=xi, kind=kind)
    if g is None:
        return C, z
    dsk, last, tag, deps = g
    graph = HighLevelGraph.from_collections(f"{tag}-validate", dsk, dependencies=deps)
    out = Delayed(last, graph, layer=f"{tag}-validate").compute()
    return _finish_colours(out, z, total, order_out), z


def _pass_one_graph(X, lparts, layout, C, z, starts, *, lam, xi, kind, seed, max_proposals, split_every, total,
                    drv_rows, drv_labels, order_out):
    """Phase 0's first epoch, its validation (in a task) and all colour phases in ONE graph and one
    ``dask.compute``. The colour phases start from the centres of that epoch, so they are kept only if it
    finished phase 0 (no block stopped at ``max_proposals``); otherwise they are dropped, phase 0 goes on
    epoch by epoch and the colour phases run after it (the serial order is the same either way).
    Returns ``(C, epochs)``."""
    from dask._task_spec import List, Task, TaskRef
    from dask.delayed import Delayed
    from dask.highlevelgraph import HighLevelGraph

    sizes = np.asarray(X.chunks[0], dtype=np.int64) - np.diff(layout.ptr)
    starts = np.asarray(starts, dtype=np.int64).copy()
    todo = np.flatnonzero(starts < sizes)
    epochs: list = []
    st, props = _epoch_graph(X, layout, C, todo, starts, lam=lam, kind=kind, seed=seed,
                             max_proposals=max_proposals, split_every=split_every)
    tag = fresh_name(_epoch_task)
    vkey, skey = (f"{tag}-validate", 0), (f"{tag}-state", 0)
    dsk = {vkey: Task(vkey, _epoch_task, List(*(TaskRef(k) for k in props.__dask_keys__())), C, lam=lam,
                      kind=kind)}
    deps = [props]
    g = None
    if lparts is not None and layout.n_colours:
        dsk[skey] = Task(skey, _colour_state, TaskRef(vkey), z)
        g = _colour_graph(lparts, layout, TaskRef(skey), lam=lam, xi=xi, kind=kind)
    if g is not None:
        dsk.update(g[0])
        deps += g[3]
    hlg = HighLevelGraph.from_collections(tag, dsk, dependencies=deps)
    layers = [Delayed(vkey, hlg, layer=tag)] + ([Delayed(g[1], hlg, layer=tag)] if g is not None else [])
    out = dask.compute(st, *layers, optimize_graph=False)  # one graph: the epoch tasks are shared, not fused twice
    total.append(out[0][()])
    v, _ = out[1]
    C = _apply_epoch(v, C, todo, starts, total=total, drv_rows=drv_rows, drv_labels=drv_labels, epochs=epochs)
    if (starts >= sizes).all():
        if g is not None:
            C = _finish_colours(out[2], z, total, order_out)
        return C, epochs
    C, epochs = _phase0(X, layout, C, lam=lam, kind=kind, seed=seed, starts=starts, max_proposals=max_proposals,
                        split_every=split_every, total=total, drv_rows=drv_rows, drv_labels=drv_labels,
                        epochs=epochs)
    C, _ = _colour_phases_fused(lparts, layout, C, z, lam=lam, xi=xi, kind=kind, total=total,
                                order_out=order_out)
    return C, epochs


def rdp_pass(X, lparts, layout: LinkLayout, C, z, *, lam, xi, kind, seed, starts, max_proposals, split_every=None,
             prefix=None, fused=True) -> PassResult:
    """One RDP-means pass. ``z`` (labels of the linked rows, by node id) is updated in place.

    ``prefix`` is ``(index, rows)`` of the serial prefix (first pass; processed first, on the driver, against
    ``C``). ``fused``: phase 0's first epoch, its validation and all colour phases in one task graph and one
    compute (:func:`_pass_one_graph`; later phase-0 epochs, if any, one compute each); otherwise one round trip
    per phase-0 epoch and per colour phase and epoch (at most ``max_proposals`` proposals per block and epoch).
    Returns the statistics of every row (labels indexing the returned centres), the centres, and the pass record.
    """
    total: list[ClusterStats] = []
    drv_rows: list[np.ndarray] = []
    drv_labels: list[np.ndarray] = []
    p_index = np.zeros(0, np.int64)
    if prefix is not None and prefix[0].size:
        p_index, p_rows = prefix
        labels, dist, new = validate_proposals(p_rows, lam, kind, C)
        C = np.vstack([C, new])
        total.append(ClusterStats.from_labels(p_rows, labels, C.shape[0], cost=float(dist.sum()), index=p_index))
        drv_rows.append(p_index)
        drv_labels.append(labels.astype(np.int64))
    linked_order: list[np.ndarray] = []
    sizes = np.asarray(X.chunks[0], dtype=np.int64) - np.diff(layout.ptr)
    if fused and (np.asarray(starts) < sizes).any():
        C, epochs = _pass_one_graph(X, lparts, layout, C, z, starts, lam=lam, xi=xi, kind=kind, seed=seed,
                                    max_proposals=max_proposals, split_every=split_every, total=total,
                                    drv_rows=drv_rows, drv_labels=drv_labels, order_out=linked_order)
    elif fused:
        C, epochs = _phase0(X, layout, C, lam=lam, kind=kind, seed=seed, starts=starts,
                            max_proposals=max_proposals, split_every=split_every, total=total, drv_rows=drv_rows,
                            drv_labels=drv_labels)
        C, z = _colour_phases_fused(lparts, layout, C, z, lam=lam, xi=xi, kind=kind, total=total,
                                    order_out=linked_order)
    else:
        C, epochs = _phase0(X, layout, C, lam=lam, kind=kind, seed=seed, starts=starts,
                            max_proposals=max_proposals, split_every=split_every, total=total, drv_rows=drv_rows,
                            drv_labels=drv_labels)
        for c in range(layout.n_colours):
            C = _colour_phase(lparts, layout, c, C, z, lam=lam, xi=xi, kind=kind, max_proposals=max_proposals,
                              split_every=split_every, total=total, order_out=linked_order)
    stats = ClusterStats.merge_all(total) if total else ClusterStats.identity(C.shape[0], X.shape[1])
    if stats.n_clusters < C.shape[0]:
        stats = stats.merge(ClusterStats.identity(C.shape[0], X.shape[1]))
    record = RDPPassRecord(p_index, epochs, np.concatenate(linked_order) if linked_order else np.zeros(0, np.int64))
    cat = (lambda a: np.concatenate(a) if a else np.zeros(0, np.int64))
    return PassResult(stats, C, record, cat(drv_rows), cat(drv_labels))


# ---------------------------------------------------------------------------------------------------------------
# labels of the last pass
# ---------------------------------------------------------------------------------------------------------------


def _labels_block(Xb, arg, *, offset, block_index, seed, centres, remap, kind):
    linked, linked_labels, segments, drv_rows, drv_labels = arg
    n = Xb.shape[0]
    out = np.full(n, -1, dtype=np.int64)
    if segments:
        order = unlinked_order(seed, block_index, n, linked)
        for s, e, k in segments:
            rows = order[s:e]
            out[rows] = divergence_nearest(Xb[rows], centres[:k], kind)[0]
    out[drv_rows - offset] = drv_labels
    out[linked] = linked_labels
    return remap[out].astype(np.int32)


def _unbox(p):
    return p[0]


def final_labels(X, layout: LinkLayout, result: PassResult, z_pass, remap, *, seed, kind):
    """Lazy (n_samples,) int32 labels of the pass ``result``, mapped through ``remap`` (pass id -> final id).

    Rows labelled in parallel are re-assigned to their epoch's snapshot centres; rows labelled on the driver
    (prefix, proposals) and linked rows (``z_pass``, by node id) take their recorded labels.
    """
    import dask.array as da

    nb = len(X.chunks[0])
    segs: list[list] = [[] for _ in range(nb)]
    for blocks, starts, stops, _, k in result.record.epochs:
        for b, s, e in zip(blocks, starts, stops):
            segs[int(b)].append((int(s), int(e), int(k)))
    offsets = block_offsets(X.chunks[0])
    which = np.searchsorted(offsets, result.driver_rows, side="right") - 1
    args = []
    for b in range(nb):
        m = which == b
        lo, hi = int(layout.ptr[b]), int(layout.ptr[b + 1])
        args.append((layout.local[lo:hi], z_pass[lo:hi], segs[b], result.driver_rows[m], result.driver_labels[m]))
    remap = np.append(np.asarray(remap, dtype=np.int64), -1)  # index -1 (never left) stays -1
    parts = map_with_args(_labels_block, X, args, seed=seed, centres=result.centres, remap=remap, kind=kind)
    return da.concatenate([parts.blocks[b].map_blocks(_unbox, dtype=np.int32, chunks=((X.chunks[0][b],),))
                           for b in range(nb)]) if nb else da.zeros(0, dtype=np.int32)
