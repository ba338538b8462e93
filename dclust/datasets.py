"""Synthetic data generated lazily and deterministically, chunk by chunk (pure numpy + dask; no I/O).

Rows are drawn in fixed generation blocks of :data:`GENERATION_ROWS` rows, each from its own numpy ``Generator``
seeded by ``SeedSequence(random_state, spawn_key=(1, block, stream))``. A chunk generates only the blocks it
overlaps, so every row depends on ``random_state`` and its row index alone: the data is identical whatever the
scheduler, the order of computation, the ``chunk_rows`` used and even ``n_samples`` (a smaller data set is a prefix of
a larger one).
"""

from __future__ import annotations

import numbers
from typing import Any, NamedTuple

import dask.array as da
import numpy as np

from .errors import InvalidParameterError, message

__all__ = ["Blobs", "make_blobs", "GENERATION_ROWS"]

#: Rows per generation block (the unit that owns a seed). Chunks of a multiple of this size waste no draws.
GENERATION_ROWS = 8192


class Blobs(NamedTuple):
    """Result of :func:`make_blobs`."""

    #: dask.array.Array, shape (n_samples, n_features): the points, row-chunked by ``chunk_rows``.
    X: da.Array
    #: dask.array.Array of int32, shape (n_samples,), or None: the index of the centre each point was drawn from.
    labels: da.Array | None
    #: numpy.ndarray of float64, shape (n_centers, n_features): the centres.
    centers: np.ndarray


def _bad(name: str, expected: str, value: Any, fix: str) -> InvalidParameterError:
    return InvalidParameterError(message(f"make_blobs({name}=...)", expected, repr(value), fix))


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise _bad(name, "an integer >= 1", value, f"Pass a positive integer {name}.")
    return int(value)


def _seed(random_state: Any) -> int:
    if random_state is None:
        return int(np.random.SeedSequence().entropy)
    if isinstance(random_state, np.random.Generator):
        return int(random_state.integers(2**63))
    if isinstance(random_state, bool) or not isinstance(random_state, numbers.Integral) or random_state < 0:
        raise _bad("random_state", "None, an int >= 0 or a numpy.random.Generator", random_state,
                   "Pass random_state=0 (any fixed int) for reproducible data.")
    return int(random_state)


def _block_rows(
    start: int, stop: int, seed: int, centers: np.ndarray, std: np.ndarray, dtype: np.dtype | None
) -> tuple[np.ndarray, np.ndarray | None]:
    """Labels (int32) and, if ``dtype`` is given, points of rows ``[start, stop)``."""
    k, d = centers.shape
    labels = np.empty(stop - start, dtype=np.int32)
    X = np.empty((stop - start, d), dtype=dtype) if dtype is not None else None
    first, last = start // GENERATION_ROWS, (stop - 1) // GENERATION_ROWS
    for b in range(first, last + 1):
        b0 = b * GENERATION_ROWS
        lo, hi = max(start, b0) - b0, min(stop, b0 + GENERATION_ROWS) - b0
        out = slice(b0 + lo - start, b0 + hi - start)
        # Draw the block's first `hi` rows; numpy's draws are sequential, so they are a prefix of the full block.
        lab = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(1, b, 0))).integers(
            0, k, size=hi, dtype=np.int64
        )[lo:hi]
        labels[out] = lab
        if X is not None:
            noise = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(1, b, 1))).standard_normal((hi, d))
            X[out] = centers[lab] + std[lab, None] * noise[lo:hi]
    return labels, X


def _x_block(bounds: np.ndarray, *, seed: int, centers: np.ndarray, std: np.ndarray, out_dtype: str) -> np.ndarray:
    return _block_rows(int(bounds[0, 0]), int(bounds[0, 1]), seed, centers, std, np.dtype(out_dtype))[1]


def _label_block(bounds: np.ndarray, *, seed: int, centers: np.ndarray, std: np.ndarray) -> np.ndarray:
    return _block_rows(int(bounds[0, 0]), int(bounds[0, 1]), seed, centers, std, None)[0]


def make_blobs(
    n_samples: int,
    n_features: int = 8,
    centers: int | np.ndarray = 16,
    *,
    cluster_std: float | np.ndarray = 1.0,
    center_box: tuple[float, float] = (-10.0, 10.0),
    chunk_rows: int = 500_000,
    dtype: str | np.dtype = "float32",
    random_state: int | np.random.Generator | None = 0,
    return_labels: bool = True,
) -> Blobs:
    """Isotropic Gaussian blobs as a lazy dask array, generated chunk by chunk on the workers.

    Parameters
    ----------
    n_samples : int
        Number of points N.
    n_features : int, default 8
        Number of features D.
    centers : int or array of shape (n_centers, n_features), default 16
        Number of centres (drawn uniformly in ``center_box`` from ``random_state``), or the centres themselves.
    cluster_std : float or array of shape (n_centers,), default 1.0
        Standard deviation of each blob (>= 0).
    center_box : (float, float), default (-10, 10)
        Bounds of the uniform distribution the centres are drawn from.
    chunk_rows : int, default 500_000
        Rows per dask chunk. Does not change the data.
    dtype : {"float32", "float64"}, default "float32"
        dtype of ``X`` (points are computed in float64, then cast).
    random_state : int, numpy.random.Generator or None, default 0
        Seed of everything. A Generator is used once, to draw the seed; None draws a fresh one.
    return_labels : bool, default True
        Also return the ground-truth labels (otherwise ``labels`` is None).

    Returns
    -------
    Blobs
        ``X``: dask array (n_samples, n_features) of ``dtype`` with chunks ``(chunk_rows, n_features)``;
        ``labels``: dask int32 array (n_samples,) with the same row chunks, or None;
        ``centers``: numpy float64 array (n_centers, n_features).

    Examples
    --------
    >>> b = make_blobs(1000, n_features=2, centers=3, chunk_rows=300, random_state=0)
    >>> b.X.shape, b.X.dtype.name, b.X.chunks[0], b.centers.shape
    ((1000, 2), 'float32', (300, 300, 300, 100), (3, 2))
    >>> bool((make_blobs(1000, 2, 3, chunk_rows=64).X.compute() == b.X.compute()).all())
    True
    """
    n_samples = _positive_int("n_samples", n_samples)
    n_features = _positive_int("n_features", n_features)
    chunk_rows = _positive_int("chunk_rows", chunk_rows)
    try:
        dt = np.dtype(dtype)
    except TypeError:
        dt = None
    if dt is None or dt.kind != "f" or dt.itemsize < 4:
        raise _bad("dtype", "'float32' or 'float64'", dtype, "Pass dtype='float32'.")
    if not isinstance(return_labels, bool):
        raise _bad("return_labels", "True or False", return_labels, "Pass a bool.")
    if (
        not isinstance(center_box, (tuple, list))
        or len(center_box) != 2
        or not all(isinstance(v, numbers.Real) and np.isfinite(v) for v in center_box)
        or not center_box[0] < center_box[1]
    ):
        raise _bad("center_box", "a pair (low, high) of finite numbers with low < high", center_box,
                   "Pass e.g. center_box=(-10, 10).")
    seed = _seed(random_state)

    if isinstance(centers, numbers.Integral) and not isinstance(centers, bool):
        k = _positive_int("centers", centers)
        rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(0,)))
        C = rng.uniform(float(center_box[0]), float(center_box[1]), size=(k, n_features))
    else:
        C = np.asarray(centers, dtype=np.float64) if hasattr(centers, "__len__") else None
        if C is None or C.ndim != 2 or C.shape[0] < 1 or C.shape[1] != n_features or not np.isfinite(C).all():
            raise _bad("centers", f"an int >= 1 or a finite array of shape (n_centers, {n_features})",
                       centers if C is None else f"array of shape {C.shape}",
                       "Pass the number of centres, or centres with n_features columns (and n_features=...).")
        k = C.shape[0]
    std = None
    if not isinstance(cluster_std, bool) and np.ndim(cluster_std) in (0, 1) and np.size(cluster_std) in (1, k):
        try:
            std = np.broadcast_to(np.asarray(cluster_std, dtype=np.float64), (k,)).copy()
        except (TypeError, ValueError):
            std = None
    if std is None or not np.isfinite(std).all() or (std < 0).any():
        raise _bad("cluster_std", f"a number >= 0 or {k} numbers >= 0 (one per centre)", cluster_std,
                   "Pass e.g. cluster_std=1.0.")

    rows = tuple(min(chunk_rows, n_samples - s) for s in range(0, n_samples, chunk_rows))
    starts = np.arange(0, n_samples, chunk_rows, dtype=np.int64)
    bounds = da.from_array(np.stack([starts, starts + np.asarray(rows, dtype=np.int64)], axis=1), chunks=(1, 2))
    X = da.map_blocks(
        _x_block, bounds, seed=seed, centers=C, std=std, out_dtype=dt.str, chunks=(rows, (n_features,)),
        dtype=dt, meta=np.empty((0, 0), dtype=dt), token="make_blobs-X",
    )
    labels = None
    if return_labels:
        labels = da.map_blocks(
            _label_block, bounds, seed=seed, centers=C, std=std, chunks=(rows,), drop_axis=1, dtype=np.int32,
            meta=np.empty((0,), dtype=np.int32), token="make_blobs-labels",
        )
    return Blobs(X, labels, C)
