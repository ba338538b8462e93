"""One D-Means time step on a row-chunked dask batch, with optimistic concurrency (ALGORITHMS.md 8.5).

Every pass is a sequence of epochs. In an epoch each unfinished block, in parallel, takes its rows in its local
order: a row whose best eq. 28 option in the snapshot is an instantiated cluster is final for the pass; a row
whose best option is a revival or a new cluster is proposed. The driver validates the proposals serially, in
(position, block) order, against the state as it stands (earlier validations included). The first pass starts
with a serial prefix of about ``prefix_size`` rows. A pass equals serial D-Means on the permutation of
:class:`dclust._dask.occ.PassRecord` (without T1's preference for the previous label, which only matters on exact
ties: the previous labels are not stored, to keep O(N) data off the driver).
"""

from __future__ import annotations

import dask
import numpy as np

from ..kernels.distances import stats_from_assignment
from ..kernels.dpmeans import DPBlockResult, block_permutation
from ..kernels.dynmeans import StepResult, StepState, best_options, end_of_pass, label_pass
from ..kernels.stats import ClusterStats
from .passes import map_partials
from .occ import EpochRecord, PassRecord, gather_prefix, prefix_counts
from .reduce import tree_reduce

__all__ = ["dm_block", "occ_step"]


def dm_block(Xb, wb, *, offset, block_index, state: StepState, seed, start, max_proposals) -> DPBlockResult:
    """One OCC epoch of D-Means on one block: final rows' statistics (by slot) and the proposals."""
    n = Xb.shape[0]
    perm = block_permutation(seed, block_index, n)[start:]
    Y = np.asarray(Xb[perm], dtype=np.float64)
    islot, icost, _, rcost = best_options(Y, state)
    finite = np.isfinite(Y).all(axis=1)
    final = finite & (islot >= 0) & (icost <= rcost) & (icost <= state.lam)
    propose = finite & ~final
    count = np.cumsum(propose)
    stop = perm.size
    if count.size and count[-1] > max_proposals:
        stop = int(np.searchsorted(count, max_proposals, side="left")) + 1
    done, propose, final = perm[:stop], propose[:stop], final[:stop]
    labels = np.full(n, -1, dtype=np.int32)
    dist = np.zeros(n)
    labels[done[final]] = islot[:stop][final]
    dist[done[final]] = icost[:stop][final]
    stats = stats_from_assignment(Xb, labels, dist, wb, state.n_slots, offset, block_index)
    local = done[propose]
    w = np.ones(local.size) if wb is None else np.asarray(wb, dtype=np.float64)[local]
    return DPBlockResult(
        stats, local.astype(np.int64) + offset, np.flatnonzero(propose) + start, Y[:stop][propose], w, start + stop
    )


def _epoch_partial(Xb, wb, *, offset, block_index, starts, **kwargs):
    return dm_block(Xb, wb, offset=offset, block_index=block_index, start=int(starts[block_index]), **kwargs)


def _stats_of(parts):
    out = np.empty(len(parts), dtype=object)
    out[:] = [p.stats for p in parts]
    return out


def _proposals_of(parts):
    out = np.empty(len(parts), dtype=object)
    out[:] = [(p.index, p.position, p.rows, p.weight, p.stop) for p in parts]
    return out


def _validate(rows, pw, index, state: StepState) -> ClusterStats | None:
    """Serial eq. 28 on the proposals, in order; ``state`` gains the revived and new slots."""
    if index.size == 0:
        return None
    z = np.full(rows.shape[0], -1, dtype=np.int64)
    cost = label_pass(rows, np.arange(rows.shape[0]), z, state, prefer_current=False)
    return ClusterStats.from_labels(rows, z, state.n_slots, pw, cost=float(pw @ cost), index=index)


def occ_pass(X, w, state: StepState, *, seed, starts, max_proposals, split_every=None):
    """One label pass over the dask batch ``X``; ``state`` is updated in place. Returns (stats, epochs)."""
    sizes = np.asarray(X.chunks[0], dtype=np.int64)
    starts = np.asarray(starts, dtype=np.int64).copy()
    total: list[ClusterStats] = []
    epochs: list[EpochRecord] = []
    while True:
        todo = np.flatnonzero(starts < sizes)
        if todo.size == 0:
            break
        snapshot = StepState(state.phi, state.gamma, state.ages, state.lam, state.Q, state.theta.copy(),
                             state.inst.copy())
        parts = map_partials(_epoch_partial, X, w, blocks=todo, starts=starts, state=snapshot, seed=seed,
                             max_proposals=max_proposals)
        stats_arr = parts.map_blocks(_stats_of, dtype=object)
        props_arr = parts.map_blocks(_proposals_of, dtype=object)
        stats, props = dask.compute(tree_reduce(stats_arr, ClusterStats.merge_all, split_every=split_every),
                                    props_arr)
        total.append(stats[()])
        index = np.concatenate([p[0] for p in props])
        position = np.concatenate([p[1] for p in props])
        block = np.concatenate([np.full(p[0].size, b) for p, b in zip(props, todo)])
        order = np.lexsort((block, position))
        rows = np.concatenate([p[2] for p in props]).reshape(-1, X.shape[1])[order]
        pw = np.concatenate([p[3] for p in props])[order]
        index = index[order]
        before = state.n_slots
        validated = _validate(rows, pw, index, state)
        if validated is not None:
            total.append(validated)
        stops = np.array([p[4] for p in props], dtype=np.int64)
        epochs.append(EpochRecord(todo, starts[todo].copy(), stops, index, state.n_slots - before))
        starts[todo] = stops
    if not total:
        return ClusterStats.identity(state.n_slots, X.shape[1]), epochs
    return ClusterStats.merge_all(total), epochs


def occ_step(X, w, state: StepState, *, seed, max_iter, prefix_size, max_proposals, split_every=None):
    """One time step (one restart) of D-Means on a dask batch. Returns ``(StepResult, first_pass_stats)``.

    ``first_pass_stats`` covers every row with one cluster (its ``bad_block`` names a chunk holding NaN/inf).
    ``StepResult.orders`` holds one :class:`PassRecord` per pass; ``labels`` is None.
    """
    counts = prefix_counts(X.chunks[0], prefix_size)
    all_stats, p_index, p_rows, p_w = gather_prefix(X, w, seed=seed, counts=counts, split_every=split_every)
    if all_stats.bad_block >= 0:
        return None, all_stats
    cur = StepState(state.phi, state.gamma, state.ages, state.lam, state.Q)
    history, records = [], []
    prev_fp = None
    converged = False
    res = None
    for it in range(max_iter):
        prefix_stats = None
        if it == 0 and p_index.size:
            z = np.full(p_rows.shape[0], -1, dtype=np.int64)
            cost = label_pass(p_rows, np.arange(p_rows.shape[0]), z, cur, prefer_current=False)
            prefix_stats = (p_rows, z, p_w, cost)
        stats, epochs = occ_pass(X, w, cur, seed=seed, starts=counts if it == 0 else np.zeros_like(counts),
                                 max_proposals=max_proposals, split_every=split_every)
        if prefix_stats is not None:
            rows, z, pw, cost = prefix_stats
            stats = stats.merge(ClusterStats.from_labels(rows, z, cur.n_slots, pw, cost=float(pw @ cost),
                                                         index=p_index))
        res = end_of_pass(stats.weight, stats.mean, stats.scatter, cur)
        fp = np.zeros(cur.n_slots, dtype=np.uint64)
        fp[: stats.fingerprint.shape[0]] = stats.fingerprint[: cur.n_slots]
        fp = fp[res.keep]
        history.append(res.objective)
        records.append(PassRecord(p_index if it == 0 else PassRecord().prefix, epochs))
        cur = StepState(state.phi, state.gamma, state.ages, state.lam, state.Q, res.theta.copy(),
                        res.has_data.copy())
        if prev_fp is not None and np.array_equal(fp, prev_fp):
            converged = True
            break
        prev_fp = fp
    return StepResult(res, None, history, it + 1, converged, records), all_stats
