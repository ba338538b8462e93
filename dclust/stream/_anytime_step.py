"""One batch of :class:`~dclust.stream.AnytimeDPMeans`: D-Means converged on a keyed sample of the batch, then one
labelling pass over every row.

D-Means iterates label passes to convergence, each a full read of the batch. Here the iterations run on a sample:
the rows whose order key (a function of the seed and the row's index in the batch, so of neither the chunking nor
the workers) is among the lowest ``sample_rows``, visited in key order by serial D-Means (:func:`serial_step`),
each weighted by ``total weight / sample weight`` so that the balance between an old cluster's weight ``w`` and
the batch in eq. 29 is that of the whole batch. Its fixed point (instantiated centres, revived clusters) is the
snapshot of one keyed OCC label pass over the whole batch with the fused kernel
(:func:`~dclust.kernels.dynmeans.dm_assign`): a row whose best eq. 28 option is an instantiated cluster is folded
into the statistics, the others (a revival or a new cluster, rare after the sample) are validated serially on the
driver; the batch's eq. 29 centres and eq. 18 objective come from that pass. Two reads of each batch in all, one
when it is in memory; when the sample holds the whole batch, the pass starts from D-Means' own fixed point.

The batch that starts a read (no cluster yet) first gets one full D-Means label pass (the sample as its serial
prefix, then keyed OCC epochs with the fused kernel), so that its clusters open as D-Means opens them over every
row: DP-means opens more clusters the more rows a pass sees, and a sample alone would settle with fewer (10-30 %
worse objectives on the benchmark blobs). The sample's iterations then start from that pass's centres. Later
batches open few clusters (the read's clusters are there to revive), and the sample's passes match D-Means over
every row on average over seeds (tests/stream/test_anytime_sample.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from .._dask.occ import KEY_END, DMRule, KeyedPass, keyed_pass, run_pass
from ..kernels.dynmeans import PassResult, StepResult, StepState, end_of_pass, keyed_rows, serial_step
from ..kernels.stats import ClusterStats
from ..typing import ArrayLike

__all__ = ["Sample", "keyed_sample", "sampled_step"]


def _sample_partial(Xb: npt.NDArray[Any], wb: npt.NDArray[Any] | None, *, offset: int, block_index: int, mix: int,
                    end: int, check: bool) -> tuple[int, float, npt.NDArray[Any], npt.NDArray[np.int64],
                                                    npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    local, keys, first_bad = keyed_rows(Xb, mix=mix, offset=offset, end=end, check=check)
    total = float(Xb.shape[0]) if wb is None else float(np.sum(wb, dtype=np.float64))
    w = np.ones(local.size) if wb is None else np.asarray(wb, dtype=np.float64)[local]
    rows = np.asarray(Xb[local], dtype=np.float64).reshape(-1, Xb.shape[1])
    return (block_index if first_bad >= 0 else -1), total, keys, local + offset, rows, w


def _merge_sample(parts: list[tuple[Any, ...]]) -> tuple[Any, ...]:
    bad = [p[0] for p in parts if p[0] >= 0]
    return (min(bad) if bad else -1, sum(p[1] for p in parts)) + tuple(
        np.concatenate([p[i] for p in parts]) for i in (2, 3, 4, 5))


def _fresh(state: StepState, theta: npt.NDArray[np.float64] | None = None,
           inst: npt.NDArray[np.bool_] | None = None) -> StepState:
    # StepState types theta/inst as arrays, yet takes None for them (its default: __post_init__ fills them)
    return StepState(state.phi, state.gamma, state.ages, state.lam, state.Q, theta, inst)  # type: ignore[arg-type]


def _full_pass(X: ArrayLike, w: ArrayLike | None, rule: DMRule, *, mix: int, start: int, rate: float,
               max_proposals: int, split_every: Any) -> tuple[PassResult, KeyedPass, int]:
    """One keyed OCC label pass of ``rule`` over the keys from ``start``; ``(PassResult, KeyedPass, bad_block)``
    with ``bad_block`` the first block holding NaN/inf among the rows of the pass (-1 when none)."""
    epochs, _ = keyed_pass(X, w, rule, mix=mix, start=start, rate=rate, max_proposals=max_proposals,
                           split_every=split_every)
    stats = rule.stats()
    return (end_of_pass(stats.weight, stats.mean, stats.scatter, rule.state), KeyedPass(start, epochs),
            stats.bad_block)


#: A batch's keyed sample as :func:`keyed_sample` gives it: ``(bad_block, total_weight, index, rows, weights)``.
Sample = tuple[int, float, npt.NDArray[np.int64], npt.NDArray[np.float64], npt.NDArray[np.float64]]


def _sample_end(n: int, sample_rows: int) -> int:
    """The key below which a row of a batch of ``n`` rows is in the sample of about ``sample_rows`` rows."""
    return KEY_END if sample_rows >= n else (int(sample_rows) * KEY_END) // max(n, 1)


def keyed_sample(X: ArrayLike, w: ArrayLike | None, *, mix: int, sample_rows: int, split_every: Any = None
                 ) -> Sample:
    """The keyed sample of :func:`sampled_step` (global indices, rows as float64, weights; in key order), the
    batch's total weight, and the first block holding NaN/inf (-1 when none; numpy ``X`` is not checked: its rows
    were checked when loaded, or the labelling pass of :func:`sampled_step` checks them). Rows and keys only: it
    can run before the batch before it is done."""
    end = _sample_end(X.shape[0], sample_rows)
    bad, total, keys, index, rows, sw = run_pass(_sample_partial, _merge_sample, X, w, split_every=split_every,
                                                 mix=mix, end=end, check=not isinstance(X, np.ndarray))
    order = np.argsort(keys, kind="stable")
    return int(bad), float(total), index[order], rows[order], sw[order]


def sampled_step(X: ArrayLike, w: ArrayLike | None, state: StepState, *, mix: int, sample_rows: int, max_iter: int,
                 max_proposals: int, split_every: Any = None, sample: Sample | None = None
                 ) -> tuple[StepResult | None, ClusterStats]:
    """One restart of an any-time DP-means batch on ``X`` (numpy in memory, or dask): see the module docstring.
    ``sample`` is the batch's :func:`keyed_sample` for ``mix`` and ``sample_rows`` when it is already drawn.

    Returns ``(StepResult, check)``; ``check.bad_block`` names a block holding NaN/inf (the StepResult is then
    None): for dask ``X`` found by the sample's read, for numpy ``X`` by the labelling passes, which check every
    row (so a batch in memory need not be checked before). The StepResult's ``history`` holds the batch's eq. 18
    objective after each full pass, ``n_iter`` the full passes plus the sample's, ``converged`` whether the sample
    converged, ``orders`` the records of the full passes (whose serial orders ``serial_order_`` gives).
    """
    n, d = X.shape
    end = _sample_end(n, sample_rows)
    if sample is None:
        sample = keyed_sample(X, w, mix=mix, sample_rows=sample_rows, split_every=split_every)
    bad, total, index, rows, sw = sample
    if bad < 0 and not np.isfinite(rows).all():  # numpy X: its sample is checked here, before it opens clusters
        bad = 0
    check = ClusterStats.identity(0, d)
    check.bad_block = int(bad)
    if bad >= 0:
        return None, check
    history, records, passes = [], [], 0
    cur = state
    if state.n_old == 0:  # no cluster yet: D-Means' first pass over every row opens them (serial prefix: the sample)
        rule = DMRule(_fresh(state), fused=True)
        opened = rule.accept(None, index, rows, sw, ())
        res, rec, check.bad_block = _full_pass(X, w, rule, mix=mix, start=end, rate=opened / max(index.size, 1),
                                               max_proposals=max_proposals, split_every=split_every)
        if check.bad_block >= 0:
            return None, check
        history.append(res.objective)
        records.append(rec)
        passes += 1
        cur = _fresh(state, res.theta.copy(), res.has_data.copy())
    scale = total / float(sw.sum()) if sw.size else 1.0
    cur, _, _, n_iter, converged, rate = serial_step(rows, sw * scale, cur, max_iter=max_iter)
    res, rec, check.bad_block = _full_pass(X, w, DMRule(cur, fused=True), mix=mix, start=0, rate=rate,
                                           max_proposals=max_proposals, split_every=split_every)
    if check.bad_block >= 0:
        return None, check
    history.append(res.objective)
    records.append(rec)
    return StepResult(res, None, history, passes + n_iter + 1, converged, records), check
