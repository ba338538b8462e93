"""Opening data for dclust: Zarr stores, Parquet and CSV files, NetCDF/HDF5 files (local paths or fsspec URLs), zarr
arrays, xarray objects, pandas and dask DataFrames, dask and numpy arrays.

Everything here reads metadata only (for Parquet: the footers) -- except CSV files and dask DataFrames, whose
partition lengths are resolved in one pass (see :mod:`dclust.io._tables`); the data stays lazy (dask) and keeps the
source's row chunks.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

import dask.array as da
import numpy as np
import zarr

from .._dask.passes import from_array, rechunk
from .._feature_names import register_feature_names
from .._validation import DEFAULT_BLOCK_BYTES, _is_xarray, _one_feature_chunk
from ..errors import InvalidDataError, InvalidParameterError, StorageError, message
from .._store._atomic import _is_zarr_dir, _resolve, _url_fs, check_storage_options, committed_url
from .._store._zarr import dask_from_zarr
from . import _tables

__all__ = ["open_array"]

FEATURE_DIM = "feature"

#: what open_array can open, as its errors name it
CAN_OPEN = ("a Zarr store (directory), a Parquet file or directory, a CSV/TSV file (or a glob of them), a NetCDF/HDF5 "
            "file; or in memory: a zarr array/group, xarray DataArray/Dataset, pandas or dask DataFrame, dask or "
            "numpy array")
NETCDF_SUFFIXES = (".nc", ".nc4", ".netcdf", ".cdf", ".h5", ".hdf5", ".he5", ".hdf")
_HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"
_WHERE = {
    "component": "Zarr groups, xarray Datasets and NetCDF/HDF5 files.",
    "sample_dim": "xarray objects (or a path opened through xarray: NetCDF/HDF5, or Zarr with sample_dim=).",
    "columns": "tables: Parquet and CSV files, pandas and dask DataFrames.",
    "storage_options": "fsspec URLs (s3://, gs://, abfs://, ...); local paths need none.",
}


def _is_dataset(obj: Any) -> bool:
    return hasattr(obj, "data_vars") and hasattr(obj, "coords") and hasattr(obj, "dims")


def _is_count(value: Any) -> bool:
    """An int >= 1 (numpy ints too; not a bool)."""
    return bool(isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value >= 1)


def counts(chunks: Any, length: int | None = None) -> int | tuple[int, ...] | None | bool:
    """``chunks`` normalized when it is None, a count (int >= 1) or a non-empty tuple of counts (of ``length``
    entries when given); False otherwise (the caller raises its own error)."""
    if chunks is None:
        return None
    if _is_count(chunks):
        return int(chunks)
    if isinstance(chunks, tuple) and chunks and (length is None or len(chunks) == length) and all(
            _is_count(c) for c in chunks):
        return tuple(int(c) for c in chunks)
    return False


def _check_rows(chunks: Any) -> int | tuple[int, ...] | None:
    rows = counts(chunks)
    if rows is not False:
        return rows
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
        arr = rechunk(arr, {0: rows})
    if arr.ndim == 2:
        arr = _one_feature_chunk(arr, "X")
    return arr


def _reject(param: str, value: Any, kind: str) -> None:
    if value is not None:
        raise InvalidParameterError(
            message(f"open_array({param}=...)", f"None for {kind}", repr(value), f"{param}= only applies to "
                    + _WHERE[param])
        )


def open_array(
    source: Any,
    *,
    component: str | None = None,
    sample_dim: str | None = None,
    chunks: int | tuple[int, ...] | None = None,
    columns: str | list[str] | None = None,
    storage_options: dict[str, Any] | None = None,
) -> Any:
    """Open data as a lazy, row-chunked array, reading metadata only (CSV and dask DataFrames: one pass for the
    row counts).

    Parameters
    ----------
    source : str, os.PathLike, zarr.Array, zarr.Group, xarray.DataArray, xarray.Dataset, DataFrame, dask or numpy array
        A local path or fsspec URL (``"s3://bucket/x.zarr"``, ``"memory://x.zarr"``) of

        - a Zarr array or group (a directory with Zarr metadata),
        - a Parquet file (``.parquet``, ``.pq``) or a directory of them (a partitioned data set),
        - a CSV or TSV file (``.csv``, ``.tsv``, optionally ``.gz``/``.bz2``/``.xz``/``.zst``) or a glob of them
          (``"data/part-*.csv"``),
        - a NetCDF or HDF5 file (``.nc``, ``.h5``, ...; or recognized by its first bytes), opened through xarray;

        or an in-memory object: a pandas or dask DataFrame (numeric columns), a zarr array or group, an xarray
        object, a dask or numpy array. Numpy input is wrapped into dask with row blocks of about 64 MiB.
    component : str, optional
        The array inside a Zarr group (``"data"``, ``"run1/points"``), or the variable of an xarray Dataset or a
        NetCDF/HDF5 file (``"temperature"``, ``"group/variable"``). A group or Dataset holding exactly one array may
        omit it. Not allowed for other sources.
    sample_dim : str, optional
        xarray only (xarray objects, NetCDF/HDF5 files, Zarr stores written by xarray): the sample dimension
        (default: the first one). The remaining dimensions are stacked into a single ``"feature"`` dimension. With a
        Zarr path, ``sample_dim`` opens the store through ``xarray.open_zarr`` so that the coordinates of the sample
        dimension survive.
    chunks : int or tuple of int, optional
        Rows per block (int) or the row block sizes (tuple). Default: keep the source's row chunks (Parquet: runs
        of row groups of up to about 64 MiB; CSV and dask DataFrames: one block per partition). Whole rows always
        form one block along the features.
    columns : str or list of str, optional
        Tables only (Parquet, CSV, pandas and dask DataFrames): the columns to use, in this order. Default: every
        column, which must then all be numeric.
    storage_options : dict, optional
        fsspec URLs only: the filesystem's arguments, e.g. ``{"endpoint_url": "http://127.0.0.1:9000", "key": ...,
        "secret": ...}`` for ``s3://`` (s3fs). Without them, the backend's defaults apply (for S3 the ``AWS_*``
        environment variables and ``~/.aws``).

    Returns
    -------
    dask.array.Array of shape (n_samples, n_features) or (n_samples,), or xarray.DataArray
        A dask array (dtype as stored; a table: the common dtype of its columns), or for xarray input and
        NetCDF/HDF5 files a 2-D DataArray with dims ``(sample_dim, "feature")`` backed by dask. The column names of
        a table travel with the returned array: :func:`dclust.io.feature_names` gives them back (and estimators keep
        them as ``feature_names_in_``).

    Raises
    ------
    StorageError
        The path does not exist, or is none of the formats above (the message lists them), or cannot be read.
    InvalidParameterError
        ``component`` is missing (several arrays to choose from) or unknown, ``sample_dim`` is not a dimension,
        ``columns`` names unknown columns, or a parameter is given where it does not apply.
    InvalidDataError
        The array is not 1-D or 2-D (non-xarray sources), or selected table columns are not numeric (the message
        names them).
    ChunkingError
        The feature axis is split in chunks and merging them would make blocks larger than
        ``dclust._validation.MAX_FEATURE_CHUNK_BYTES``; smaller ones are merged with a warning.
    ImportError
        A format whose optional dependency is missing (the message names the extra to install).

    Examples
    --------
    >>> import numpy as np
    >>> X = open_array(np.zeros((10, 3), dtype=np.float32), chunks=4)
    >>> X.shape, X.chunks
    ((10, 3), ((4, 4, 2), (3,)))

    A table keeps its column names:

    >>> import pandas as pd
    >>> from dclust.io import feature_names
    >>> df = pd.DataFrame({"x": [0.0, 1.0, 2.0], "y": [1.0, 2.0, 3.0], "kind": ["a", "b", "c"]})
    >>> X = open_array(df, columns=["y", "x"])
    >>> X.shape, feature_names(X).tolist()
    ((3, 2), ['y', 'x'])
    """
    rows = _check_rows(chunks)
    if component is not None and not isinstance(component, str):
        raise InvalidParameterError(
            message("open_array(component=...)", "None or a str", repr(component), "Pass the array's name.")
        )
    cols = _tables.check_columns(columns)
    options = check_storage_options(storage_options, "open_array")
    if isinstance(source, (str, os.PathLike)):
        return _open_path(source, component, sample_dim, rows, cols, options)
    _reject("storage_options", options, f"{type(source).__name__} (not a path)")
    if _tables.is_dataframe(source):
        _reject("component", component, "a DataFrame (use columns=)")
        _reject("sample_dim", sample_dim, "a DataFrame")
        arr, names = _tables.from_frame(source, cols)
        return register_feature_names(_from_numpy(arr, rows) if isinstance(arr, np.ndarray) else _finish(arr, rows),
                                      names)
    _reject("columns", cols, type(source).__name__)
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
            message("open_array(source=...)", CAN_OPEN, type(source).__name__, "Pass one of those.")
        ) from exc
    if arr.dtype == object:
        raise InvalidDataError(
            message("open_array(source=...)", CAN_OPEN, f"{type(source).__name__} (object dtype)",
                    "Pass numeric data.")
        )
    return _from_numpy(arr, rows)


def _from_numpy(arr: np.ndarray, rows: int | tuple[int, ...] | None) -> da.Array:
    """A numpy array as dask, in row blocks of ``rows`` (default about 64 MiB)."""
    if arr.ndim in (1, 2):
        _check_row_sum(rows, arr.shape[0])
        out = from_array(arr, (rows or _default_rows(arr.shape, arr.dtype.itemsize),) + (-1,) * (arr.ndim - 1))
        rows = None
    else:
        out = from_array(arr, "auto")
    return _finish(out, rows)


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


def _open_node(url: str, shown: str, storage_options: dict[str, Any] | None) -> Any:
    extra: dict[str, Any] = {"storage_options": storage_options} if storage_options else {}
    try:
        return zarr.open(store=url, mode="r", **extra)
    except Exception as exc:  # noqa: BLE001 - zarr raises several types for "not Zarr"
        raise StorageError(
            message("open_array", "a Zarr store (a directory with zarr.json, or .zarray/.zgroup for Zarr v2)",
                    f"path {shown}, which is not a Zarr store ({type(exc).__name__})",
                    "Check the path; to convert other data, open it with numpy/xarray and "
                    "dclust.write_array(...) it.")
        ) from exc


# --------------------------------------------------------------------------------------------------------------
# paths: which format
# --------------------------------------------------------------------------------------------------------------


def _not_openable(shown: str, what: str) -> StorageError:
    return StorageError(
        message("open_array", CAN_OPEN.split("; or in memory")[0], f"path {shown}, which is {what}",
                "Check the path. Other data: open it with pandas/numpy/xarray and pass the object, or convert it "
                "once with dclust.write_array(...).")
    )


def _format_of(fs: Any, root: str, shown: str, local: str | None) -> str:
    """``"zarr"``, ``"parquet"``, ``"csv"`` or ``"netcdf"`` for an existing path (or a glob); errors name what
    open_array can open."""
    name = root.rstrip("/").rsplit("/", 1)[-1].lower()
    by_suffix = ("parquet" if name.endswith(_tables.PARQUET_SUFFIXES) else "csv" if name.endswith(_tables.CSV_SUFFIXES)
                 else "netcdf" if name.endswith(NETCDF_SUFFIXES) else None)
    if any(c in root for c in "*?["):  # a glob of files
        if by_suffix not in ("parquet", "csv"):
            raise InvalidParameterError(
                message("open_array", "a glob of Parquet or CSV files ('data/part-*.csv')", f"{shown}",
                        "Globs name several files of one table; open other files one by one.")
            )
        if not fs.glob(root):
            raise StorageError(
                message("open_array", "a glob that matches files", f"{shown}, which matches none",
                        "Check the pattern.")
            )
        return by_suffix
    fs.invalidate_cache()
    if not fs.exists(root):
        fix = (f"Check the spelling; relative paths are resolved against {os.getcwd()!r}." if local is not None
               else "Check the URL and the storage credentials (storage_options=, or the backend's environment).")
        raise StorageError(
            message("open_array", "an existing Zarr store, Parquet, CSV or NetCDF/HDF5 file",
                    f"{'path' if local is not None else 'URL'} {shown}, which does not exist", fix)
        )
    if fs.isdir(root):
        if (_is_zarr_dir(local) if local is not None
                else any(fs.exists(f"{root}/{m}") for m in ("zarr.json", ".zarray", ".zgroup"))):
            return "zarr"
        entries = [e.rstrip("/").rsplit("/", 1)[-1] for e in fs.ls(root, detail=False)]
        if any(e.lower().endswith(_tables.PARQUET_SUFFIXES) or "=" in e for e in entries):
            return "parquet"  # a Parquet data set: part files, or hive-style key=value directories
        raise _not_openable(shown, "a directory without Zarr metadata or Parquet files"
                            + (" (for CSV files, pass a glob: 'dir/*.csv')"
                               if any(e.lower().endswith(_tables.CSV_SUFFIXES) for e in entries) else ""))
    if by_suffix is not None:
        return by_suffix
    if name.endswith(".zarr"):
        raise _not_openable(shown, "a file, not a Zarr directory")
    with fs.open(root, "rb") as fh:
        head = fh.read(8)
    if head.startswith(b"PAR1"):
        return "parquet"
    if head.startswith(_HDF5_MAGIC) or head[:3] == b"CDF":
        return "netcdf"
    raise _not_openable(shown, "a file of another format (not recognized by its name or its first bytes)")


def _open_path(source: Any, component: str | None, sample_dim: str | None, rows: Any, columns: list[str] | None,
               storage_options: dict[str, Any] | None) -> Any:
    url, local = _resolve(source, "open_array")
    shown = repr(local if local is not None else url)
    if local is not None:
        _reject("storage_options", storage_options, f"the local path {shown}")
    else:  # a store being committed (or whose writer was killed after its commit point): its complete new version
        url = committed_url(url, storage_options)
    fs, root = _url_fs(local if local is not None else url, storage_options)
    kind = _format_of(fs, root, shown, local)
    if kind in ("parquet", "csv"):
        _reject("component", component, f"the {kind} table {shown} (use columns=)")
        _reject("sample_dim", sample_dim, f"the {kind} table {shown}")
        arr, names = _tables.read_table(url, kind, columns, storage_options, shown)
        return register_feature_names(_finish(arr, rows), names)
    _reject("columns", columns, f"{'the Zarr store' if kind == 'zarr' else 'the NetCDF/HDF5 file'} {shown}")
    if kind == "netcdf":
        return _open_netcdf(fs, root, local, shown, component, sample_dim, rows)
    if sample_dim is not None:
        return _open_xarray_path(url, shown, component, sample_dim, rows, storage_options)
    if local is None and component is not None:  # a member replaced by write_array(component=...) on an object store
        member = url.rstrip("/") + "/" + component
        committed = committed_url(member, storage_options)
        if committed != member:
            return _from_zarr(_open_node(committed, shown, storage_options), rows)
    node = _open_node(url, shown, storage_options)
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


def _open_xarray_path(url: str, shown: str, component: str | None, sample_dim: str, rows: Any,
                      storage_options: dict[str, Any] | None) -> Any:
    import xarray as xr

    extra: dict[str, Any] = {"storage_options": storage_options} if storage_options else {}
    try:
        with warnings.catch_warnings():
            # xarray warns when it falls back from consolidated metadata; that is not the user's concern.
            warnings.filterwarnings("ignore", message=".*consolidated.*", category=RuntimeWarning)
            ds = xr.open_zarr(url, chunks={}, **extra)
    except Exception as exc:  # noqa: BLE001 - xarray/zarr raise several types here
        raise StorageError(
            message("open_array(sample_dim=...)", "a Zarr store written by xarray (arrays with dimension names)",
                    f"path {shown}, which xarray cannot open ({type(exc).__name__}: {exc})",
                    "Drop sample_dim= to open it as a plain Zarr array.")
        ) from exc
    return _from_dataarray(_pick_variable(ds, component, f"the xarray store at {shown}"), sample_dim, rows)


def _open_netcdf(fs: Any, root: str, local: str | None, shown: str, component: str | None, sample_dim: str | None,
                 rows: Any) -> Any:
    """A variable of a NetCDF (3 or 4) or HDF5 file through xarray: the h5netcdf engine for HDF5-based files (plain
    HDF5 datasets get "phony" dimension names), scipy's for NetCDF 3. ``component="group/variable"`` reaches into
    groups. Lazily indexed: the row blocks read slices of the file."""
    import xarray as xr

    with fs.open(root, "rb") as fh:
        hdf5 = fh.read(8).startswith(_HDF5_MAGIC)
    if hdf5:
        try:
            import h5netcdf  # noqa: F401
        except ImportError as exc:
            raise ImportError(
                f"Reading NetCDF4/HDF5 files needs h5netcdf ({exc}). Install it with: pip install 'dclust[netcdf]'"
            ) from exc
    group, _, variable = (component or "").rpartition("/")
    kwargs: dict[str, Any] = ({"engine": "h5netcdf", "phony_dims": "sort"} if hdf5 else {"engine": "scipy"})
    if group:
        kwargs["group"] = group
    target = local if local is not None else fs.open(root, "rb")
    try:
        ds = xr.open_dataset(target, chunks=None, **kwargs)
    except Exception as exc:  # noqa: BLE001 - the engines raise many types for unreadable files
        raise StorageError(
            message("open_array", "a readable NetCDF/HDF5 file" + (f" with the group {group!r}" if group else ""),
                    f"path {shown}, which xarray cannot open ({type(exc).__name__}: {exc})",
                    "Check the file (and component='group/variable' for variables inside groups).")
        ) from exc
    return _from_dataarray(_pick_variable(ds, variable or None, f"the file {shown}"), sample_dim, rows)


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
                    + (", ".join(repr(n) for n in names) or "none"), repr(component),
                    "Pick one of the listed variables.")
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
