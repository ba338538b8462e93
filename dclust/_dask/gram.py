"""Dense pairwise matrices (Gram or squared distances) of one small point set, built blockwise with dask.

Used by SD-Means (docs/algorithms.md 8.5): the row blocks of the (n, n) matrix are computed as separate tasks from the
kernel functions in :mod:`dclust.kernels.sdmeans`, then gathered on the driver for the eigendecomposition.
"""

from __future__ import annotations

from typing import Callable

import dask.array as da
import numpy as np

__all__ = ["pairwise_matrix"]


def _block(Pb: np.ndarray, *, P: np.ndarray, fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> np.ndarray:
    return np.asarray(fn(Pb, P), dtype=np.float64)


def pairwise_matrix(P: np.ndarray, fn: Callable[[np.ndarray, np.ndarray], np.ndarray], *,
                    block_rows: int = 1024) -> np.ndarray:
    """``fn(P, P)`` as a float64 (n, n) ndarray, one dask task per block of ``block_rows`` rows.

    Parameters
    ----------
    P : ndarray (n, d)
        The points (rows).
    fn : callable
        ``fn(A, B) -> (len(A), len(B))`` pairwise function (a kernel or squared distances).
    block_rows : int, default 1024
        Rows per task.

    Returns
    -------
    ndarray (n, n) float64.

    Examples
    --------
    >>> P = np.arange(6.0).reshape(3, 2)
    >>> bool(np.array_equal(pairwise_matrix(P, lambda a, b: a @ b.T, block_rows=2), P @ P.T))
    True
    """
    P = np.ascontiguousarray(P, dtype=np.float64)
    n = P.shape[0]
    if n == 0:
        return np.zeros((0, 0))
    rows = da.from_array(P, chunks=(max(1, int(block_rows)), -1))
    out = rows.map_blocks(_block, P=P, fn=fn, dtype=np.float64, chunks=(rows.chunks[0], (n,)),
                          meta=np.empty((0, 0), dtype=np.float64))
    G = out.compute()
    # Blocks are computed independently; make the result exactly symmetric.
    return 0.5 * (G + G.T)
