"""Opening data for dclust: Zarr stores (local paths or fsspec URLs), zarr arrays, xarray objects, dask, numpy.

Everything here reads metadata only; the data stays lazy (dask) and keeps the store's row chunks.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

import dask.array as da
import numpy as np
import zarr

from .._validation import DEFAULT_BLOCK_BYTES, _is_xarray, _one_feature_chunk
from ..errors import InvalidDataError, InvalidParameterError, StorageError, message
from .._store._zarr import dask_from_zarr
from ._write import _is_zarr_dir, _remote_exists, _resolve

__all__ = ["open_array"]

FEATURE_DIM = "feature"


def _is_dataset(obj: Any) -> bool:
    return hasattr(obj, "data_vars") and hasattr(obj, "coords") and hasattr(obj, "dims")


def _check_rows(chunks: Any) -> int | tuple[int, ...] | None:
    if chunks is None:
        return None
    if isinstance(chunks, (int, np.integer)) and not isinstance(chunks, bool) and chunks >= 1:
        return int(chunks)
    if (
        isinstance(chunks, tuple)
        and chunks
        and all(isinstance(c, (int, np.integer)) and not isinstance(c, bool) and c >= 1 for c in chunks)
    ):
        return tuple(int(c) for c in chunks)
    raise InvalidParameterError(
        message("open_array(chunks=...)", "None (keep the store's row chunks), a positive int (rows per block) "
                "or a tuple of positive ints (the row block sizes)", repr(chunks),
                "Pass e.g. chunks=500_000, or leave it None.")
    )


def _check_row_sum(rows: int | tuple[int, ...] | None, n: int) -> None:
    """Row block sizes given as a tuple must add up to the number of rows."""
    if isinstance(rows, tuple) and sum(rows) != n:
        raise InvalidParameterError(
            message("open_array(chunks=...)", f"row block sizes adding up to the {n} rows", f"{rows} (sum "
                    f"{sum(rows)})", "Pass an int (rows per block) instead, or sizes that add up to the rows.")
        )


def _default_rows(shape: tuple[int, ...], itemsize: int) -> int:
    row_bytes = max(1, int(np.prod(shape[1:], dtype=np.int64)) * itemsize)
    return max(1, DEFAULT_BLOCK_BYTES // row_bytes)


def _finish(arr: da.Array, rows: int | tuple[int, ...] | None) -> da.Array:
    """Apply a row-chunk override, check the dimensionality and merge (or refuse) a split feature axis."""
    if arr.ndim not in (1, 2):
        raise InvalidDataError(
            message("open_array", "a 1-D (labels) or 2-D (n_samples, n_features) array",
                    f"shape {arr.shape}",
                    "Reshape it (X.reshape(len(X), -1)), or open it as an xarray DataArray with sample_dim= so the "
                    "other dimensions are stacked into features.")
        )
    if rows is not None:
        _check_row_sum(rows, arr.shape[0])
        arr = arr.rechunk({0: rows})
    if arr.ndim == 2:
        arr = _one_feature_chunk(arr, "X")
    return arr


def _reject(param: str, value: Any, kind: str) -> None:
    if value is not None:
        raise InvalidParameterError(
            message(f"open_array({param}=...)", f"None for {kind}", repr(value),
                    f"{param}= only applies to " + ("Zarr groups and xarray Datasets." if param == "component"
                                                    else "xarray objects (or a path opened through xarray)."))
        )


def open_array(
    source: Any,
    *,
    component: str | None = None,
    sample_dim: str | None = None,
    chunks: int | tuple[int, ...] | None = None,
) -> Any:
    """Open data as a lazy, row-chunked array, reading metadata only.

    Parameters
    ----------
    source : str, os.PathLike, zarr.Array, zarr.Group, xarray.DataArray, xarray.Dataset, dask or numpy array
        A local path or fsspec URL (``"s3://bucket/x.zarr"``, ``"memory://x.zarr"``) of a Zarr array or group,
        or an in-memory object. Numpy input is wrapped into dask with row blocks of about 64 MiB.
    component : str, optional
        The array inside a Zarr group (``"data"``, ``"run1/points"``), or the variable of an xarray Dataset. A
        group or Dataset holding exactly one array may omit it. Not allowed for other sources.
    sample_dim : str, optional
        xarray only: the sample dimension (default: the first one). The remaining dimensions are stacked into a
        single ``"feature"`` dimension. With a path, ``sample_dim`` opens the store through ``xarray.open_zarr``
        so that the coordinates of the sample dimension survive.
    chunks : int or tuple of int, optional
        Rows per block (int) or the row block sizes (tuple). Default: keep the store's (or dask array's) row
        chunks. Whole rows always form one block along the features.

    Returns
    -------
    dask.array.Array of shape (n_samples, n_features) or (n_samples,), or xarray.DataArray
        A dask array (dtype as stored), or for xarray input a 2-D DataArray with dims ``(sample_dim, "feature")``
        backed by dask.

    Raises
    ------
    StorageError
        The path does not exist or is not a Zarr store.
    InvalidParameterError
        ``component`` is missing (several arrays to choose from) or unknown, ``sample_dim`` is not a dimension,
        or a parameter is given where it does not apply.
    InvalidDataError
        The array is not 1-D or 2-D (non-xarray sources).
    ChunkingError
        The feature axis is split in chunks and merging them would make blocks larger than
        ``dclust._validation.MAX_FEATURE_CHUNK_BYTES``; smaller ones are merged with a warning.

    Examples
    --------
    >>> import numpy as np
    >>> X = open_array(np.zeros((10, 3), dtype=np.float32), chunks=4)
    >>> X.shape, X.chunks
    ((10, 3), ((4, 4, 2), (3,)))
    """
    rows = _check_rows(chunks)
    if component is not None and not isinstance(component, str):
        raise InvalidParameterError(
            message("open_array(component=...)", "None or a str", repr(component), "Pass the array's name.")
        )
    if isinstance(source, (str, os.PathLike)):
        return _open_path(source, component, sample_dim, rows)
    if _is_dataset(source):
        return _from_dataarray(_pick_variable(source, component, "the Dataset"), sample_dim, rows)
    if _is_xarray(source):
        _reject("component", component, "a DataArray")
        return _from_dataarray(source, sample_dim, rows)
    _reject("sample_dim", sample_dim, type(source).__name__)
    if isinstance(source, zarr.Group):
        return _from_zarr(_pick_array(source, component, "the Zarr group"), rows)
    _reject("component", component, type(source).__name__)
    if isinstance(source, zarr.Array):
        return _from_zarr(source, rows)
    if isinstance(source, da.Array):
        return _finish(source, rows)
    try:
        arr = np.asarray(source)
    except Exception as exc:  # noqa: BLE001 - anything numpy refuses
        raise InvalidDataError(
            message("open_array(source=...)", "a path, zarr array/group, xarray object, dask or numpy array",
                    type(source).__name__, "Pass one of those.")
        ) from exc
    if arr.dtype == object:
        raise InvalidDataError(
            message("open_array(source=...)", "a path, zarr array/group, xarray object, dask or numpy array",
                    f"{type(source).__name__} (object dtype)", "Pass numeric data.")
        )
    if arr.ndim in (1, 2):
        _check_row_sum(rows, arr.shape[0])
        arr = da.from_array(arr, chunks=(rows or _default_rows(arr.shape, arr.dtype.itemsize),) + (-1,) * (arr.ndim - 1))
        rows = None
    else:
        arr = da.from_array(arr)
    return _finish(arr, rows)


# --------------------------------------------------------------------------------------------------------------
# Zarr
# --------------------------------------------------------------------------------------------------------------


def _from_zarr(z: Any, rows: int | tuple[int, ...] | None) -> da.Array:
    if z.ndim not in (1, 2):
        return _finish(dask_from_zarr(z), rows)  # raises the dimensionality error
    if rows is None:
        arr = dask_from_zarr(z)  # the store's chunks; reads name damaged chunks (CorruptStoreError)
    else:  # whole rows: one block along the features
        _check_row_sum(rows, z.shape[0])
        arr = dask_from_zarr(z, chunks=(rows,) + tuple((s,) for s in z.shape[1:]))
    return _finish(arr, None)


def _pick_array(group: Any, component: str | None, where: str) -> Any:
    arrays = sorted(group.array_keys())
    if component is None:
        if len(arrays) == 1:
            return group[arrays[0]]
        if arrays:
            received = f"a group with {len(arrays)} arrays: {', '.join(repr(a) for a in arrays)}"
        else:
            subgroups = sorted(group.group_keys())
            received = "a group with no arrays at its top level" + (
                f" (subgroups: {', '.join(repr(g) for g in subgroups)})" if subgroups else ""
            )
        raise InvalidParameterError(
            message(f"open_array on {where}", "a group with exactly one array, or component=<array name>",
                    received, "Pass component='<name>' to pick the array (use 'sub/name' inside subgroups).")
        )
    try:
        node = group[component]
    except KeyError:
        node = None
    if not isinstance(node, zarr.Array):
        received = f"component={component!r}, which " + ("is a group" if node is not None else "does not exist")
        raise InvalidParameterError(
            message(f"open_array on {where}", "component= naming an array; arrays here: "
                    + (", ".join(repr(a) for a in arrays) or "none"), received, "Pick one of the listed arrays.")
        )
    return node


def _open_node(url: str, shown: str) -> Any:
    try:
        return zarr.open(store=url, mode="r")
    except Exception as exc:  # noqa: BLE001 - zarr raises several types for "not Zarr"
        raise StorageError(
            message("open_array", "a Zarr store (a directory with zarr.json, or .zarray/.zgroup for Zarr v2)",
                    f"path {shown}, which is not a Zarr store ({type(exc).__name__})",
                    "Check the path; to convert other data, open it with numpy/xarray and "
                    "dclust.write_array(...) it.")
        ) from exc


def _open_path(source: Any, component: str | None, sample_dim: str | None, rows: Any) -> Any:
    url, local = _resolve(source, "open_array")
    shown = repr(local if local is not None else url)
    if local is not None:
        if not os.path.exists(local):
            raise StorageError(
                message("open_array", "an existing Zarr store", f"path {shown}, which does not exist",
                        f"Check the spelling; relative paths are resolved against {os.getcwd()!r}.")
            )
        if not _is_zarr_dir(local):
            raise StorageError(
                message("open_array", "a Zarr store (a directory with zarr.json, or .zarray/.zgroup for Zarr v2)",
                        f"path {shown}, which is " + ("a directory without Zarr metadata" if os.path.isdir(local)
                                                      else "a file, not a Zarr directory"),
                        "Check the path; to convert other data, open it with numpy/xarray and "
                        "dclust.write_array(...) it.")
            )
    elif not _remote_exists(url):
        raise StorageError(
            message("open_array", "an existing Zarr store", f"URL {shown}, which does not exist",
                    "Check the URL and the storage credentials.")
        )
    if sample_dim is not None:
        return _open_xarray_path(url, shown, component, sample_dim, rows)
    node = _open_node(url, shown)
    if isinstance(node, zarr.Group):
        return _from_zarr(_pick_array(node, component, f"the group at {shown}"), rows)
    if component is not None:
        raise InvalidParameterError(
            message("open_array(component=...)", f"None, because {shown} is a single Zarr array",
                    repr(component), "Drop component=.")
        )
    return _from_zarr(node, rows)


# --------------------------------------------------------------------------------------------------------------
# xarray
# --------------------------------------------------------------------------------------------------------------


def _open_xarray_path(url: str, shown: str, component: str | None, sample_dim: str, rows: Any) -> Any:
    import xarray as xr

    try:
        with warnings.catch_warnings():
            # xarray warns when it falls back from consolidated metadata; that is not the user's concern.
            warnings.filterwarnings("ignore", message=".*consolidated.*", category=RuntimeWarning)
            ds = xr.open_zarr(url, chunks={})
    except Exception as exc:  # noqa: BLE001 - xarray/zarr raise several types here
        raise StorageError(
            message("open_array(sample_dim=...)", "a Zarr store written by xarray (arrays with dimension names)",
                    f"path {shown}, which xarray cannot open ({type(exc).__name__}: {exc})",
                    "Drop sample_dim= to open it as a plain Zarr array.")
        ) from exc
    return _from_dataarray(_pick_variable(ds, component, f"the xarray store at {shown}"), sample_dim, rows)


def _pick_variable(ds: Any, component: str | None, where: str) -> Any:
    names = sorted(str(v) for v in ds.data_vars)
    if component is None:
        if len(names) == 1:
            return ds[names[0]]
        raise InvalidParameterError(
            message(f"open_array on {where}", "a Dataset with exactly one data variable, or component=<variable>",
                    f"{len(names)} variables: {', '.join(repr(n) for n in names) or 'none'}",
                    "Pass component='<variable>'.")
        )
    if component not in ds.data_vars:
        raise InvalidParameterError(
            message(f"open_array on {where}", "component= naming a data variable: "
                    + (", ".join(repr(n) for n in names) or "none"), repr(component), "Pick one of the listed variables.")
        )
    return ds[component]


def _from_dataarray(xa: Any, sample_dim: str | None, rows: Any) -> Any:
    dims = [str(d) for d in xa.dims]
    if xa.ndim == 0:
        raise InvalidDataError(
            message("open_array", "a DataArray with a sample dimension", "a 0-d DataArray", "Pass array data.")
        )
    if sample_dim is None:
        sample_dim = dims[0]
    elif sample_dim not in dims:
        raise InvalidParameterError(
            message("open_array(sample_dim=...)", "one of the DataArray's dims: " + ", ".join(repr(d) for d in dims),
                    repr(sample_dim), "Pass the name of the dimension that indexes samples.")
        )
    others = [d for d in dims if d != sample_dim]
    if FEATURE_DIM in others and len(others) > 1:
        raise InvalidDataError(
            message("open_array", f"no dimension called {FEATURE_DIM!r} besides the ones to stack",
                    f"dims {tuple(dims)}", f"Rename the {FEATURE_DIM!r} dimension first (xa.rename(...)).")
        )
    xa = xa.transpose(sample_dim, *others)
    if xa.chunks is None:  # numpy-backed: wrap into dask
        n_rows = rows if rows is not None else _default_rows(xa.shape, xa.dtype.itemsize)
        xa = xa.chunk({sample_dim: n_rows, **{d: -1 for d in others}})
    elif rows is not None:
        xa = xa.chunk({sample_dim: rows})
    if not others:
        xa = xa.expand_dims(FEATURE_DIM, axis=1)
    elif len(others) == 1:
        if others[0] != FEATURE_DIM:
            xa = xa.rename({others[0]: FEATURE_DIM})
    else:
        xa = xa.stack({FEATURE_DIM: others})
    data = _one_feature_chunk(xa.data, "X")
    if data is not xa.data:
        xa = xa.copy(data=data)
    return xa
