"""Optimistic concurrency control for BP-means (ALGORITHMS.md 8.3).

A pass is a sequence of epochs. In an epoch every unfinished block, in parallel, sweeps the bits of its next rows
over the snapshot features (final for the pass) and proposes the rows whose squared residual still exceeds
``lam``. The driver validates the proposals serially, in (position, block) order: it sweeps each proposal's bits
over the features opened earlier in the same validation, then opens the proposal's residual as a new feature if
its squared norm still exceeds ``lam``. The pass equals serial BP-means on the order recorded in
:class:`~dclust._dask.occ.PassRecord` (features are visited old first, then new, which is the serial order too).

The bits Z stay on the workers: each epoch's block results are persisted, and the driver's decisions for
proposals reach the blocks as small *patches* applied by the next epoch (or at the end of the pass).
"""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np

from ..kernels.bpmeans import bp_block, gram_partial, serial_sweep
from ..kernels.dpmeans import block_permutation
from .passes import block_offsets
from .features import FeatureOverflow, Gram, _gram_of, bits_from_parts, map_with_bits, widen
from .occ import EpochRecord

__all__ = ["bp_occ_pass", "patch_bits", "apply_patches"]


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


def _epoch_partial(Xb, Zb, *, offset, block_index, seed, starts, features, lam, max_proposals, patches):
    k = features.shape[0]
    Z = np.zeros((Zb.shape[0], k), np.uint8)
    Z[:, : Zb.shape[1]] = Zb
    apply_patches(Z, patches.get(block_index, ()))
    perm = block_permutation(seed, block_index, Xb.shape[0])
    res = bp_block(Xb, Z, offset=offset, perm=perm, features=features, lam=lam, start=int(starts[block_index]),
                   max_proposals=max_proposals)
    props = (res.index, res.position, res.rows, res.resid, res.zbits, res.stop)
    return res.Z, Gram(res.G, res.B, res.sse, res.flips), props


def _props_of(parts):
    out = np.empty(len(parts), dtype=object)
    out[:] = [p[2] for p in parts]
    return out


def _finish_block(Zb, patches, k):
    Z = np.zeros((Zb.shape[0], k), np.uint8)
    Z[:, : Zb.shape[1]] = Zb
    return apply_patches(Z, patches)


def _merge_patches(into: dict, new: dict) -> None:
    for b, items in new.items():
        into.setdefault(b, []).extend(items)


def bp_occ_pass(X: da.Array, Z: da.Array, A: np.ndarray, lam: float, *, seed: int, starts: np.ndarray,
                patches: dict, max_proposals: int, max_features: int, capped: bool = False, split_every=None):
    """One BP-means step 1 with OCC over the rows not yet processed (``starts`` per block).

    Parameters
    ----------
    X : dask array (N, D)
    Z : dask array (N, K0') uint8
        Bits at the start of the pass (X's row chunks).
    A : (K0, D) features at the start (including any opened by a serial prefix).
    patches : dict
        Pending driver decisions per block (e.g. the serial prefix's rows).
    capped : bool
        Capped BP-means ([MB] eq. 15): at ``max_features`` features, rows stop opening features (and blocks stop
        proposing) instead of raising :class:`FeatureOverflow`.

    Returns
    -------
    Z : dask array (N, K) uint8, lazy over persisted pieces
    A : (K, D) the start features followed by the features opened in the pass
    gram : Gram of every row processed here (padded to K)
    epochs : list of EpochRecord
    proposals : list of int, proposals per epoch
    """
    chunks = tuple(X.chunks[0])
    sizes = np.asarray(chunks, dtype=np.int64)
    zb = [Z.blocks[b] for b in range(len(chunks))]
    starts = np.asarray(starts, dtype=np.int64).copy()
    pending: dict[int, list] = {}
    _merge_patches(pending, patches)
    A = np.asarray(A, dtype=np.float64).reshape(-1, X.shape[1])
    grams: list[Gram] = []
    epochs: list[EpochRecord] = []
    n_props: list[int] = []
    while True:
        todo = np.flatnonzero(starts < sizes)
        if todo.size == 0:
            break
        K = A.shape[0]
        Zt = da.concatenate([widen(zb[b], K) for b in todo]) if todo.size > 1 else widen(zb[todo[0]], K)
        kw_patches = {int(b): pending.pop(int(b)) for b in todo if int(b) in pending}
        parts = map_with_bits(
            _epoch_partial, X, Zt, blocks=todo, seed=seed, starts=starts, features=A,
            lam=np.inf if capped and K >= max_features else float(lam),
            max_proposals=int(max_proposals), patches=kw_patches,
        ).persist()
        gram, props = dask.compute(
            _tree(parts, split_every), parts.map_blocks(_props_of, dtype=object)
        )
        grams.append(gram[()])
        index = np.concatenate([p[0] for p in props])
        position = np.concatenate([p[1] for p in props])
        block = np.concatenate([np.full(p[0].size, b) for p, b in zip(props, todo)])
        order = np.lexsort((block, position))
        d = X.shape[1]
        m = index.size
        rows = np.concatenate([p[2] for p in props]).reshape(m, d)[order]
        resid = np.concatenate([p[3] for p in props]).reshape(m, d)[order]
        zbits = np.concatenate([p[4] for p in props]).reshape(m, K)[order]
        index = index[order]
        n_props.append(int(index.size))
        new = np.empty((0, d))
        if index.size:
            Zv, new, q, flips, overflow = serial_sweep(
                rows, zbits, A, lam, R=resid, k_from=np.full(index.size, K), max_new=max(0, max_features - K),
                saturate=capped,
            )
            if overflow >= 0:
                raise FeatureOverflow(max_features + 1, float((resid * resid).sum(axis=1).max()), "OCC validation")
            grams.append(Gram(*gram_partial(rows, Zv), float(q.sum()), int(flips)))
            if new.shape[0]:
                _merge_patches(pending, patch_bits(index, K, Zv[:, K:], chunks))
            A = np.vstack([A, new])
        stops = np.array([p[5] for p in props], dtype=np.int64)
        epochs.append(EpochRecord(todo, starts[todo].copy(), stops, index, int(new.shape[0])))
        starts[todo] = stops
        Znew = bits_from_parts(parts, tuple(sizes[todo]), K)
        for i, b in enumerate(todo):
            zb[b] = Znew.blocks[i]
    K = A.shape[0]
    final = [
        zb[b].map_blocks(_finish_block, pending.get(b, ()), K, chunks=((chunks[b],), (K,)), dtype=np.uint8)
        for b in range(len(chunks))
    ]
    Zout = da.concatenate(final) if len(final) > 1 else final[0]
    gram = Gram.merge_all(grams) if grams else Gram(np.zeros((K, K)), np.zeros((K, X.shape[1])))
    return Zout, A, gram, epochs, n_props


def _tree(parts, split_every):
    from .reduce import tree_reduce

    return tree_reduce(parts.map_blocks(_gram_of, dtype=object), Gram.merge_all, split_every=split_every)
