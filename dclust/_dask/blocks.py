"""Per-block maps: a kernel applied to every row block, with the block's offset and index."""

from __future__ import annotations

from typing import Any, Callable

import dask
import dask.array as da
import numpy as np

__all__ = ["map_partials", "map_labels", "block_offsets", "compute", "persist_if_fits"]


def block_offsets(chunks: tuple[int, ...]) -> np.ndarray:
    """Global index of the first row of every block."""
    return np.concatenate([[0], np.cumsum(chunks)[:-1]]).astype(np.int64)


#: Topic of the events a distributed worker logs when it has processed one row chunk (``Client.subscribe_topic``).
CHUNK_DONE_TOPIC = "dclust-chunk-done"


def _report_chunk_done(block_index: int) -> None:
    """Tell subscribers (the CLI's live display) that a chunk is done; nothing outside a distributed worker."""
    try:
        from distributed import get_worker

        worker = get_worker()
    except (ImportError, ValueError):
        return
    worker.log_event(CHUNK_DONE_TOPIC, block_index)


def _partial_block(fn, kwargs, info, Xb, *aligned):
    out = np.empty(1, dtype=object)
    out[0] = fn(Xb, *aligned, offset=int(info[0, 0]), block_index=int(info[0, 1]), **kwargs)
    _report_chunk_done(int(info[0, 1]))
    return out


def _block_info_array(X: da.Array) -> da.Array:
    """(n_blocks, 2) int64 array of (offset, block index), one row per row block of X."""
    offsets = block_offsets(X.chunks[0])
    info = np.stack([offsets, np.arange(len(offsets))], axis=1)
    return da.from_array(info, chunks=(1, 2))


def map_partials(
    fn: Callable[..., Any], X: da.Array, *aligned: da.Array | None, blocks=None, **kwargs
) -> da.Array:
    """Apply ``fn(X_block, *aligned_blocks, offset=, block_index=, **kwargs)`` to every row block.

    ``aligned`` are 1-D arrays with the same row chunks as ``X``; a ``None`` is passed through as ``None``.
    ``blocks`` restricts the map to those block indices (offsets and indices stay global). The result is a 1-D
    object array with one partial per block, ready for :func:`dclust._dask.reduce.tree_reduce`.
    """
    info = _block_info_array(X)
    for a in aligned:
        if a is not None and a.chunks[0] != X.chunks[0]:
            raise ValueError("aligned arrays must have the row chunks of X")
    if blocks is not None:
        blocks = [int(b) for b in blocks]
        info, X = info.blocks[blocks], X.blocks[blocks]
        aligned = tuple(None if a is None else a.blocks[blocks] for a in aligned)
    pairs: list[Any] = [info, "ij", X, "ik"]
    for a in aligned:
        pairs += [a, "i" if a is not None else None]
    return da.blockwise(
        _partial_block,
        "i",
        fn,
        None,
        kwargs,
        None,
        *pairs,
        dtype=object,
        concatenate=True,
        align_arrays=False,
        adjust_chunks={"i": 1},
        meta=np.empty(0, dtype=object),
    )


def _labels_block(fn, kwargs, info, Xb):
    return fn(Xb, offset=int(info[0, 0]), block_index=int(info[0, 1]), **kwargs)


def map_labels(fn: Callable[..., np.ndarray], X: da.Array, dtype=np.int32, **kwargs) -> da.Array:
    """Lazy per-row output ``fn(X_block, offset=, block_index=, **kwargs) -> (n_b,)`` with X's row chunks."""
    return da.blockwise(
        _labels_block, "i", fn, None, kwargs, None, _block_info_array(X), "ij", X, "ik",
        dtype=dtype, concatenate=True, align_arrays=False, adjust_chunks={"i": X.chunks[0]},
        meta=np.empty(0, dtype=dtype),
    )


def compute(*collections):
    """Compute dask collections together (shared inputs are read once)."""
    return dask.compute(*collections)


def persist_if_fits(X: da.Array, persist, logger) -> da.Array:
    """Persist ``X`` in (cluster) memory when asked to, or, for ``"auto"``, when it fits comfortably.

    "Fits" means the array takes at most half the memory of the distributed cluster's workers (or a quarter of
    this machine's memory under the local schedulers).
    """
    if persist is False or persist is None:
        return X
    if persist == "auto":
        budget = _memory_budget()
        if budget is None or X.nbytes > budget:
            return X
        logger.info("persisting the data in memory (%.1f MB of a %.1f MB budget)", X.nbytes / 1e6, budget / 1e6)
    else:
        logger.info("persisting the data in memory (%.1f MB)", X.nbytes / 1e6)
    return X.persist()


def _memory_budget() -> float | None:
    try:
        from distributed import default_client

        client = default_client()
    except (ImportError, ValueError):
        client = None
    if client is not None:
        workers = client.scheduler_info().get("workers", {})
        limits = [w.get("memory_limit") or 0 for w in workers.values()]
        total = float(sum(limits))
        return total / 2 if total > 0 else None
    try:
        import psutil

        return psutil.virtual_memory().total / 4
    except ImportError:  # pragma: no cover - psutil ships with distributed
        return None
