"""GM-PR on Dask (docs/algorithms.md 8.4): one E-step pass of the pass engine (every row block's unlinked rows and its
share of the links), partials tree-reduced; initial statistics; class posteriors with or without links.

The driver holds O(links) integers (the link plan) and O(M K D²) parameters. The rows of the links' far
endpoints are gathered once per fit (:func:`link_payload`, O(links · D) floats kept on the cluster), so an
E-step is one round trip like a k-means iteration, its tasks reading their row blocks as a k-means pass does.
"""

from __future__ import annotations

from dataclasses import dataclass

import dask
import dask.array as da
import numpy as np

from ..kernels.distances import nearest
from ..kernels.gmpr import (
    GaussianStats, MixtureParams, _estep_weights, class_posteriors, link_partial, pair_posteriors, sub_log_density,
    unlinked_mask, unlinked_partial,
)
from .passes import map_partials, map_reduce, persist_aligned

__all__ = ["LinkPlan", "estep", "init_stats", "link_payload", "persist_payload", "proba", "total_loglik"]


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


@dataclass
class _BlockLinks:
    """The links a row block's E-step task handles (built once per fit, kept on the cluster next to the block).

    ``keep``: True for the block's rows in no link (the unlinked pass takes them; the mask is built once per fit,
    not per pass); ``own`` and ``other``: the float64 rows of the two endpoints of every link assigned to the block
    (``own`` in it), gathered once since X does not change between iterations, the must-links first; ``must``: the
    link types; ``finite``: no NaN or inf in the block's linked rows; ``usable``: none in ``own`` and ``other``
    either (else the links are skipped: the block that holds the NaN reports it).
    """

    keep: np.ndarray
    own: np.ndarray
    other: np.ndarray
    must: np.ndarray
    finite: bool
    usable: bool


def _assign_links(plan: LinkPlan):
    """Every link to the row block of one of its endpoints, half of a block pair's links to each side (so the
    link work is spread evenly): per block, (own local index, other block, other local index, must), sorted by
    the other block."""
    parts: list[list[tuple]] = [[] for _ in plan.chunks]
    for bi, bj, pos_i, pos_j, must in plan.pairs:
        li, lj = plan.linked[bi][pos_i], plan.linked[bj][pos_j]
        h = must.size if bi == bj else (must.size + 1) // 2
        parts[bi].append((li[:h], np.full(h, bj, np.intp), lj[:h], must[:h]))
        if h < must.size:
            parts[bj].append((lj[h:], np.full(must.size - h, bi, np.intp), li[h:], must[h:]))
    out = []
    for p in parts:
        if not p:
            out.append((np.zeros(0, np.intp), np.zeros(0, np.intp), np.zeros(0, np.intp), np.zeros(0, bool)))
            continue
        own, src, loc, must = (np.concatenate(x) for x in zip(*p))
        order = np.argsort(src, kind="stable")
        out.append((own[order], src[order], loc[order], must[order]))
    return out


def _take_rows(Xb, idx):
    return np.asarray(Xb[idx], dtype=np.float64)


def _assemble(Xb, linked, own, must, *pieces):
    """A block's :class:`_BlockLinks` (takes the block itself, so that it is kept on the block's worker)."""
    rows = [taken[start:stop] for taken, start, stop in pieces]
    other = np.concatenate(rows) if rows else np.zeros((0, Xb.shape[1]))
    order = np.argsort(~must, kind="stable")  # must-links first, as link_partial takes them
    own, other, must = _take_rows(Xb, own[order]), np.ascontiguousarray(other[order]), must[order]
    usable = bool(must.size) and bool(np.isfinite(own).all()) and bool(np.isfinite(other).all())
    out = np.empty(1, dtype=object)
    out[0] = _BlockLinks(unlinked_mask(Xb.shape[0], linked), own, other, must,
                         bool(np.isfinite(Xb[linked]).all()), usable)
    return out


def link_payload(X: da.Array, plan: LinkPlan) -> da.Array | None:
    """Lazy (n_blocks,) object array: per row block its :class:`_BlockLinks` (None without links).

    One pass gathers every block's link endpoints needed elsewhere; persist the result once per fit
    (``O(links · D)`` floats on the cluster) and pass it to every :func:`estep`.
    """
    if not plan.n_links:
        return None
    assigned = _assign_links(plan)
    nb = len(plan.chunks)
    needed: list[list[np.ndarray]] = [[] for _ in range(nb)]
    spans: list[list[tuple[int, int, int]]] = [[] for _ in range(nb)]
    sizes = np.zeros(nb, np.intp)
    for b, (_, src, loc, _) in enumerate(assigned):
        bounds = np.searchsorted(src, np.arange(nb + 1))
        for c in np.flatnonzero(np.diff(bounds)):
            n = bounds[c + 1] - bounds[c]
            needed[c].append(loc[bounds[c]:bounds[c + 1]])
            spans[b].append((int(c), int(sizes[c]), int(sizes[c] + n)))
            sizes[c] += n
    xb = X.to_delayed().ravel()
    taken = {c: dask.delayed(_take_rows, pure=True)(xb[c], np.concatenate(needed[c]))
             for c in range(nb) if needed[c]}
    parts = []
    for b, (own, _, _, must) in enumerate(assigned):
        pieces = [(taken[c], start, stop) for c, start, stop in spans[b]]
        task = dask.delayed(_assemble, pure=True)(xb[b], plan.linked[b], own, must, *pieces)
        parts.append(da.from_delayed(task, shape=(1,), dtype=object, meta=np.empty(0, dtype=object)))
    return da.concatenate(parts) if nb > 1 else parts[0]


def persist_payload(links: da.Array | None, X: da.Array) -> da.Array | None:
    """Persist :func:`link_payload` ``(X, plan)`` once per fit (``O(links · D)`` floats on the cluster), each block's
    part where the E-step task that takes it will run (:func:`dclust._dask.passes.persist_aligned`): the tasks then
    spread over the workers, where they all went to the one worker that held the payload."""
    return None if links is None else persist_aligned(links, X)


def _estep_kernel(Xb, links, *, offset, block_index, params):
    """One block's E-step partial: its unlinked rows and the links assigned to it, merged."""
    if links is None:
        return unlinked_partial(Xb, params, None, block_index=block_index)
    links = links[0]
    partial = unlinked_partial(Xb, params, block_index=block_index, keep=links.keep)
    if not links.finite and partial.bad_block < 0:
        partial.bad_block = block_index
    if not links.usable:
        return partial  # no links, or NaN in an endpoint: the block that holds it reports it
    return GaussianStats.merge_all([partial, link_partial(links.own, links.other, links.must, params)])


def estep(X: da.Array, plan: LinkPlan, params: MixtureParams, split_every=None, links: da.Array | None = None
          ) -> GaussianStats:
    """One E-step pass of the pass engine (:func:`dclust._dask.passes.map_reduce`: tasks read their row blocks
    themselves and return one merged partial), every block's unlinked rows and its share of the links, tree-reduced.

    ``links`` is :func:`link_payload` ``(X, plan)`` (persisted by the caller; built here, in the same graph,
    when omitted). ``stats.loglik`` holds ``ℓ`` without the cannot-link normaliser ``−|CL| log(1 − Σα²)``.
    """
    if links is None and plan.n_links:
        links = link_payload(X, plan)
    if params.diag:
        _estep_weights(params)  # once, on the driver: kept on params, they travel with it to every task
    return map_reduce(_estep_kernel, GaussianStats.merge_all, X, links, split_every=split_every,
                      params=params).compute()[()]


def _init_kernel(Xb, *, offset, block_index, class_centers, sub_centers, diag):
    M, K, D = sub_centers.shape
    cls, _ = nearest(Xb, class_centers)  # the k-means assignment kernel; -1 for a row with NaN or inf
    if (cls < 0).any():
        out = GaussianStats.identity(M * K, D, M, diag)
        out.bad_block = block_index
        return out
    comp = cls.astype(np.intp) * K
    if K > 1:
        for m in range(M):
            rows = np.flatnonzero(cls == m)
            comp[rows] += nearest(Xb[rows], sub_centers[m])[0]
    return GaussianStats.from_labels(Xb, comp, M, K, diag)


def init_stats(X: da.Array, class_centers: np.ndarray, sub_centers: np.ndarray, diag: bool,
               split_every=None) -> GaussianStats:
    """One pass: hard statistics of the rows assigned to their nearest class centre, then to the nearest of that
    class's sub-centres (docs/algorithms.md 6.5 steps 2 and 3)."""
    return map_reduce(_init_kernel, GaussianStats.merge_all, X, split_every=split_every, class_centers=class_centers,
                      sub_centers=sub_centers, diag=diag).compute()[()]


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
    """``ℓ`` of docs/algorithms.md 6.2 from merged E-step statistics (adds the cannot-link normaliser)."""
    if not n_cannot:
        return float(stats.loglik)
    return float(stats.loglik) - n_cannot * float(np.log(1.0 - float((alpha * alpha).sum())))

