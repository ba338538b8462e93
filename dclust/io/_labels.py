"""Writing cluster labels: a 1-D integer array checked, then streamed to Zarr by :func:`._write.write_array`'s
writer (the same atomic commit, codec ``"auto"``: blosc-lz4 + bitshuffle for integers)."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from .._validation import _is_xarray
from ..errors import InvalidDataError, message
from ._write import _write

__all__ = ["write_labels"]


def write_labels(
    labels: Any, path: str | os.PathLike[str], *, overwrite: bool = False, storage_options: dict[str, Any] | None = None
) -> str:
    """Write cluster labels to a new Zarr store, streamed and atomic.

    The store's root is the array itself, so ``zarr.open_array(path)`` and ``dclust.open_array(path)`` both
    return it.

    Parameters
    ----------
    labels : dask.array.Array or numpy.ndarray of int, shape (n_samples,)
        Labels, e.g. ``model.predict(X)``; a lazy dask array is computed block by block while it is written.
        An xarray DataArray is written through its ``.data``.
    path : str or os.PathLike
        Local path or fsspec URL of the new store.
    overwrite : bool, default False
        Replace an existing label store; otherwise an existing path raises before anything is written.
    storage_options : dict, optional
        Arguments of the fsspec filesystem of a URL ``path`` (as in :func:`write_array`).

    Returns
    -------
    str
        The store's location.

    Examples
    --------
    >>> import numpy as np, tempfile, os, zarr
    >>> p = write_labels(np.array([0, 1, 1, 0], dtype=np.int32), os.path.join(tempfile.mkdtemp(), "labels.zarr"))
    >>> zarr.open_array(p, mode="r")[:].tolist()
    [0, 1, 1, 0]
    """
    y = labels.data if _is_xarray(labels) else labels
    ndim = getattr(y, "ndim", None)
    dtype = getattr(y, "dtype", None)
    if ndim is None or dtype is None:
        y = np.asarray(y)
        ndim, dtype = y.ndim, y.dtype
    if ndim != 1 or np.dtype(dtype).kind not in "iu":
        raise InvalidDataError(
            message("write_labels(labels=...)", "a 1-D integer array of shape (n_samples,)",
                    f"ndim {ndim}, dtype {dtype}", "Pass model.predict(X) or model.labels_.")
        )
    return _write(y, path, component=None, overwrite=overwrite, codec="auto", chunks=None, what="write_labels",
                  storage_options=storage_options)
