"""GM-PR on Dask (ALGORITHMS.md 8.4): one E-step pass over the row blocks and the non-empty link-block pairs,
partials tree-reduced; initial statistics; class posteriors with or without links.

The driver holds O(links) integers (the link plan) and O(M K D²) parameters; no task receives more than two row
blocks, and every block task only the local indices of its own linked rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import dask
import dask.array as da
import numpy as np

from ..kernels.gmpr import (
    GaussianStats, MixtureParams, class_posteriors, link_partial, pair_posteriors, sub_log_density,
    unlinked_partial,
)
from .blocks import map_partials
from .reduce import tree_reduce

__all__ = ["LinkPlan", "estep", "init_stats", "proba", "total_loglik"]


@dataclass
class LinkPlan:
    """Links arranged by row block (built once per fit from a ConstraintGraph aligned to X).

    Attributes
    ----------
    chunks : tuple of int
    linked : list of ndarray
        Per block, the sorted local indices of its rows that are in at least one link.
    pairs : list of (bi, bj, pos_i, pos_j, must)
        Per non-empty block pair, the positions of the endpoints in ``linked[bi]`` / ``linked[bj]`` and the link
        types (True = must-link).
    n_must, n_cannot : int
    """

    chunks: tuple
    linked: list
    pairs: list
    n_must: int = 0
    n_cannot: int = 0

    @classmethod
    def empty(cls, chunks) -> "LinkPlan":
        return cls(tuple(chunks), [np.zeros(0, np.intp) for _ in chunks], [])

    @classmethod
    def from_blocks(cls, chunks, blocks) -> "LinkPlan":
        """From ``(bi, bj, csr)`` triples (local coordinates, +value must-link, −value cannot-link)."""
        chunks = tuple(int(c) for c in chunks)
        triples = []
        ends: list[list[np.ndarray]] = [[] for _ in chunks]
        for bi, bj, csr in blocks:
            coo = csr.tocoo()
            if coo.nnz == 0:
                continue
            li, lj = coo.row.astype(np.intp), coo.col.astype(np.intp)
            triples.append((int(bi), int(bj), li, lj, coo.data > 0))
            ends[bi].append(li)
            ends[bj].append(lj)
        linked = [np.unique(np.concatenate(e)) if e else np.zeros(0, np.intp) for e in ends]
        pairs = []
        n_must = n_cannot = 0
        for bi, bj, li, lj, must in triples:
            pairs.append((bi, bj, np.searchsorted(linked[bi], li), np.searchsorted(linked[bj], lj), must))
            n_must += int(must.sum())
            n_cannot += int((~must).sum())
        return cls(chunks, linked, pairs, n_must, n_cannot)

    @property
    def n_links(self) -> int:
        return self.n_must + self.n_cannot


@dataclass
class _BlockOut:
    partial: GaussianStats
    rows: np.ndarray  # endpoint rows of the block (float64)
    sub: np.ndarray  # their sub-cluster log-densities (n_linked, M, K)


def _mask_chunk(n: int, idx: np.ndarray) -> np.ndarray:
    mask = np.zeros(n, dtype=bool)
    mask[idx] = True
    return mask


def _linked_mask(plan: LinkPlan) -> da.Array:
    """(N,) bool dask array with X's row chunks: True for rows in a link (each task holds its block's indices)."""
    parts = [
        da.from_delayed(dask.delayed(_mask_chunk, pure=True)(n, idx), shape=(n,), dtype=bool)
        for n, idx in zip(plan.chunks, plan.linked)
    ]
    return da.concatenate(parts) if len(parts) > 1 else parts[0]


def _block_kernel(Xb, mask, *, offset, block_index, params):
    linked = np.flatnonzero(mask) if mask is not None else np.zeros(0, np.intp)
    partial = unlinked_partial(Xb, params, linked, block_index=block_index)  # reads float32 as it is
    rows = np.asarray(Xb[linked], dtype=np.float64)
    if linked.size and partial.bad_block < 0 and not np.isfinite(rows).all():
        partial.bad_block = block_index
    sub = sub_log_density(rows, params) if linked.size and np.isfinite(rows).all() else None
    return _BlockOut(partial, rows, sub)


def _strip(block: np.ndarray) -> np.ndarray:
    out = np.empty(block.shape, dtype=object)
    out[0] = block[0].partial
    return out


def _pair_kernel(a, b, pos_i, pos_j, must, params):
    a, b = a[0], b[0]
    M, K, D = params.n_classes, params.n_sub, params.means.shape[2]
    out = np.empty(1, dtype=object)
    if a.sub is None or b.sub is None:  # NaN in an endpoint: the block partial already reports it
        out[0] = GaussianStats.identity(M * K, D, M, params.diag)
    else:
        out[0] = link_partial(a.rows[pos_i], a.sub[pos_i], b.rows[pos_j], b.sub[pos_j], must, params)
    return out


def estep(X: da.Array, plan: LinkPlan, params: MixtureParams, split_every=None) -> GaussianStats:
    """One E-step pass: the merged statistics of all row blocks and link-block pairs.

    ``stats.loglik`` holds ``ℓ`` without the cannot-link normaliser ``−|CL| log(1 − Σα²)``.
    """
    mask = _linked_mask(plan) if plan.n_links else None
    blk = map_partials(_block_kernel, X, mask, params=params)
    parts = [blk.map_blocks(_strip, dtype=object, meta=np.empty(0, dtype=object))]
    if plan.pairs:
        cells = blk.to_delayed().ravel()
        for bi, bj, pos_i, pos_j, must in plan.pairs:
            task = dask.delayed(_pair_kernel, pure=True)(cells[bi], cells[bj], pos_i, pos_j, must, params)
            parts.append(da.from_delayed(task, shape=(1,), dtype=object, meta=np.empty(0, dtype=object)))
    partials = da.concatenate(parts) if len(parts) > 1 else parts[0]
    return tree_reduce(partials, GaussianStats.merge_all, split_every=split_every).compute()[()]


def _init_kernel(Xb, *, offset, block_index, class_centres, sub_centres, diag):
    X = np.asarray(Xb, dtype=np.float64)
    M, K, D = sub_centres.shape
    if not np.isfinite(X).all():
        out = GaussianStats.identity(M * K, D, M, diag)
        out.bad_block = block_index
        return out
    cls = _nearest(X, class_centres)
    sub = np.empty(X.shape[0], dtype=np.intp)
    for m in range(M):
        rows = cls == m
        sub[rows] = _nearest(X[rows], sub_centres[m])
    R = np.zeros((X.shape[0], M * K))
    R[np.arange(X.shape[0]), cls * K + sub] = 1.0
    return GaussianStats.from_weights(X, R, M, diag, class_counts=np.bincount(cls, minlength=M).astype(float))


def _nearest(X: np.ndarray, C: np.ndarray) -> np.ndarray:
    d = (X * X).sum(axis=1)[:, None] - 2.0 * X @ C.T + (C * C).sum(axis=1)[None, :]
    return np.argmin(d, axis=1) if X.shape[0] else np.zeros(0, dtype=np.intp)


def init_stats(X: da.Array, class_centres: np.ndarray, sub_centres: np.ndarray, diag: bool,
               split_every=None) -> GaussianStats:
    """One pass: hard statistics of the rows assigned to their nearest class centre, then to the nearest of that
    class's sub-centres (ALGORITHMS.md 6.5 steps 2 and 3)."""
    parts = map_partials(_init_kernel, X, class_centres=class_centres, sub_centres=sub_centres, diag=diag)
    return tree_reduce(parts, GaussianStats.merge_all, split_every=split_every).compute()[()]


def _proba_block(Xb, params):
    X = np.asarray(Xb, dtype=np.float64)
    return class_posteriors(sub_log_density(X, params), params)


def _pair_posterior_task(a, b, pos_i, pos_j, must, params):
    a, b = a[0], b[0]
    if a.sub is None or b.sub is None:
        return None
    return pair_posteriors(a.sub[pos_i], b.sub[pos_j], must, params)


def _linked_proba_block(Xb, idx, params, *contribs):
    """Posteriors of a block: ℓ for unlinked rows, the mean of the link posteriors for linked rows."""
    X = np.asarray(Xb, dtype=np.float64)
    out = class_posteriors(sub_log_density(X, params), params)
    if idx.size == 0:
        return out
    acc = np.zeros((idx.size, params.n_classes))
    count = np.zeros(idx.size)
    for result, side, pos in contribs:
        if result is None:
            continue
        np.add.at(acc, pos, result[side])
        np.add.at(count, pos, 1.0)
    seen = count > 0
    out[idx[seen]] = acc[seen] / count[seen, None]
    return out


def proba(X: da.Array, params: MixtureParams, plan: LinkPlan | None = None) -> da.Array:
    """Lazy (N, M) class posteriors; with a plan, linked rows use their (averaged) pair posteriors (6.5)."""
    M = params.n_classes
    if plan is None or not plan.n_links:
        return X.map_blocks(_proba_block, params, dtype=np.float64, chunks=(X.chunks[0], (M,)))
    mask = _linked_mask(plan)
    blk = map_partials(_block_kernel, X, mask, params=params)
    cells = blk.to_delayed().ravel()
    contribs: list[list] = [[] for _ in plan.chunks]
    for bi, bj, pos_i, pos_j, must in plan.pairs:
        task = dask.delayed(_pair_posterior_task, pure=True)(cells[bi], cells[bj], pos_i, pos_j, must, params)
        contribs[bi].append((task, 0, pos_i))
        contribs[bj].append((task, 1, pos_j))
    xb = X.to_delayed().ravel()
    parts = [
        da.from_delayed(dask.delayed(_linked_proba_block)(xb[b], plan.linked[b], params, *contribs[b]),
                        shape=(n, M), dtype=np.float64)
        for b, n in enumerate(plan.chunks)
    ]
    return da.concatenate(parts, axis=0) if len(parts) > 1 else parts[0]


def total_loglik(stats: GaussianStats, alpha: np.ndarray, n_cannot: int) -> float:
    """``ℓ`` of ALGORITHMS.md 6.2 from merged E-step statistics (adds the cannot-link normaliser)."""
    if not n_cannot:
        return float(stats.loglik)
    return float(stats.loglik) - n_cannot * float(np.log(1.0 - float((alpha * alpha).sum())))

