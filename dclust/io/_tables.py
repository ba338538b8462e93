"""Tables as row-chunked dask arrays: Parquet and CSV files (through dask.dataframe), pandas and dask DataFrames.

One row block per partition of the (dask) DataFrame, the selected columns side by side. Only numeric columns can be
clustered: a non-numeric one among those selected is an error naming it (select the others with ``columns=``).
Nullable integer/float columns become float64 with NaN for missing values (caught by the estimators' first pass).

Row counts. Parquet files carry them in their footers: a Parquet file, a directory of part files or a glob of them
becomes one row block per run of consecutive row groups of a file (up to about 64 MiB of the selected columns), its
length read from the footer -- no pass over the data; the blocks read their row groups' selected columns with
pyarrow. Hive-partitioned data sets (``key=value`` directories, whose partition columns live in the paths) are read
through dask.dataframe like CSV. dask.dataframe does not know how many rows each partition of a CSV file (or of a
dask DataFrame) holds, so the array it makes has unknown row-chunk sizes: they are resolved here, once, by one pass
that reads the selected columns and returns only each block's length; after it the array has its exact shape and
row chunks like any Zarr store. The pass costs about one iteration of a fit; for data fitted again and again,
convert it once: ``dclust.write_array(X, "x.zarr")``.
"""

from __future__ import annotations

import functools
import logging
import re
import time
import warnings
from typing import Any

import numpy as np

from .._validation import DEFAULT_BLOCK_BYTES
from ..errors import InvalidDataError, InvalidParameterError, StorageError, message
from .._store._atomic import _url_fs

__all__ = ["PARQUET_SUFFIXES", "CSV_SUFFIXES", "check_columns", "is_dataframe", "from_frame", "read_table"]

PARQUET_SUFFIXES = (".parquet", ".pq", ".parq")
_COMPRESSIONS = ("", ".gz", ".bz2", ".xz", ".zst")
CSV_SUFFIXES = tuple(s + c for s in (".csv", ".tsv") for c in _COMPRESSIONS)

_log = logging.getLogger("dclust")


def _dask_dataframe() -> Any:
    try:
        import dask.dataframe as dd
    except ImportError as exc:  # pandas/pyarrow missing
        raise ImportError(
            f"Reading tables (Parquet, CSV, DataFrames) needs dask.dataframe ({exc}). Install it with: "
            "pip install 'dclust[tables]'"
        ) from exc
    return dd


def check_columns(columns: Any) -> list[str] | None:
    """``columns=``: None, one column name, or a non-empty sequence of distinct names."""
    if columns is None:
        return None
    if isinstance(columns, str):
        return [columns]
    if isinstance(columns, (list, tuple)) and columns and all(isinstance(c, str) for c in columns):
        if len(set(columns)) == len(columns):
            return list(columns)
    raise InvalidParameterError(
        message("open_array(columns=...)", "None (every column) or a non-empty list of distinct column names",
                repr(columns), "Pass e.g. columns=['x', 'y'].")
    )


def is_dataframe(obj: Any) -> bool:
    """A pandas or dask DataFrame (not a Series)."""
    module = type(obj).__module__ or ""
    return module.startswith(("pandas", "dask")) and hasattr(obj, "columns") and hasattr(obj, "dtypes")


def _is_numeric(dtype: Any) -> bool:
    import pandas as pd

    return bool(pd.api.types.is_numeric_dtype(dtype)) and not pd.api.types.is_bool_dtype(dtype)


def _select(frame: Any, columns: list[str] | None, where: str) -> tuple[list[str], np.dtype]:
    """The columns to use (all by default) and the dtype of the block they make; errors name the culprits."""
    available = [str(c) for c in frame.columns]
    if columns is None:
        columns = available
    else:
        unknown = [c for c in columns if c not in available]
        if unknown:
            raise InvalidParameterError(
                message(f"open_array(columns=...) on {where}", "names of its columns: "
                        + ", ".join(repr(c) for c in available), "unknown column(s) "
                        + ", ".join(repr(c) for c in unknown), "Pick columns from the list (names are case-sensitive).")
            )
    if not columns:
        raise InvalidDataError(
            message(f"open_array on {where}", "a table with at least one column", "no columns", "Check the file.")
        )
    dtypes = frame.dtypes
    non_numeric = [c for c in columns if not _is_numeric(dtypes[c])]
    if non_numeric:
        numeric = [c for c in columns if c not in non_numeric]
        fix = (f"Select the numeric columns with columns={numeric!r} (CLI: --columns {','.join(numeric)})"
               if numeric else "Encode them as numbers first")
        raise InvalidDataError(
            message(f"open_array on {where}", "numeric columns only (int or float)", "non-numeric column(s) "
                    + ", ".join(f"{c!r} ({dtypes[c]})" for c in non_numeric), fix + ".")
        )
    numpy_dtypes = [np.dtype(getattr(dtypes[c], "numpy_dtype", dtypes[c])) for c in columns]
    nullable = any(not isinstance(dtypes[c], np.dtype) for c in columns)  # pandas extension dtypes (NA)
    dtype = np.result_type(*numpy_dtypes)
    if nullable and dtype.kind != "f":
        dtype = np.dtype(np.float64)
    return columns, dtype


def _block(frame: Any, columns: list[str], dtype: np.dtype) -> np.ndarray:
    """One partition as a C-ordered (rows, columns) numpy block."""
    na = {"na_value": np.nan} if dtype.kind == "f" else {}
    return np.ascontiguousarray(frame[columns].to_numpy(dtype=dtype, **na))


def from_frame(frame: Any, columns: list[str] | None, *, where: str | None = None) -> tuple[Any, list[str]]:
    """``(array, column names)`` of a DataFrame: a numpy array for pandas, a dask array (row chunks known, one per
    partition) for dask."""
    where = where or f"a {type(frame).__module__.split('.')[0]} DataFrame"
    columns, dtype = _select(frame, columns, where)
    if not hasattr(frame, "map_partitions"):  # pandas
        return _block(frame, columns, dtype), columns
    arr = frame[columns].map_partitions(
        functools.partial(_block, columns=columns, dtype=dtype), meta=np.empty((0, len(columns)), dtype=dtype)
    )
    return _resolve_lengths(arr, where), columns


def _resolve_lengths(arr: Any, where: str) -> Any:
    """Compute the unknown row-chunk sizes of ``arr`` in one pass (blocks' lengths only reach the driver)."""
    if not any(np.isnan(c) for c in arr.chunks[0]):
        return arr
    t = time.perf_counter()
    with warnings.catch_warnings():
        # dask's Parquet reader calls a pandas API that pandas 3.1 deprecates: dask's concern, not the user's
        warnings.filterwarnings("ignore", message="The inplace keyword", module=r"dask\.")
        arr.compute_chunk_sizes()
    _log.info("%s: row counts of %d partitions resolved in one pass (%.2f s)", where, arr.numblocks[0],
              time.perf_counter() - t)
    return arr


def read_table(url: str, kind: str, columns: list[str] | None, storage_options: dict[str, Any] | None,
               shown: str) -> tuple[Any, list[str]]:
    """``(dask array, column names)`` of a Parquet (``kind="parquet"``) or CSV file, directory or glob."""
    dd = _dask_dataframe()
    options = {"storage_options": storage_options} if storage_options else {}
    try:
        if kind == "parquet":
            fs, root = _url_fs(url, storage_options)
            files = _parquet_files(fs, root)
            if files is not None:
                return _read_parquet_files(fs, files, columns, shown)
            frame = dd.read_parquet(url, **options)
        else:
            name = url.lower()
            sep = "\t" if any(name.endswith(".tsv" + c) for c in _COMPRESSIONS) else ","
            compressed = not any(name.endswith(s) for s in (".csv", ".tsv"))
            csv = {"sep": sep, **({"blocksize": None, "compression": "infer"} if compressed else {})}
            frame = dd.read_csv(url, **csv, **options)
            selected, _ = _select(frame, columns, shown)  # unknown or non-numeric columns: refused here
            # dtypes come from a sample of the first block: read every number as float64, so that a float or an
            # empty field further down does not break the pass
            frame = dd.read_csv(url, usecols=selected, dtype={c: "float64" for c in selected}, **csv, **options)
        return from_frame(frame, columns, where=shown)
    except (InvalidParameterError, InvalidDataError):
        raise
    except Exception as exc:  # noqa: BLE001 - pyarrow/pandas raise many types for unreadable files
        raise StorageError(
            message("open_array", f"a readable {'Parquet' if kind == 'parquet' else 'CSV'} file",
                    f"{shown}, which cannot be read ({type(exc).__name__}: {_short(exc)})",
                    "Check the file (and the storage options for URLs).")
        ) from exc


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= 300 else text[:297] + "..."


# --------------------------------------------------------------------------------------------------------------
# Parquet files: row blocks from the footers
# --------------------------------------------------------------------------------------------------------------


def _natural(path: str) -> list[int | str]:
    """Sort key: 'part.10' after 'part.9' (as dask.dataframe orders part files)."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", path)]


def _parquet_files(fs: Any, root: str) -> list[str] | None:
    """The Parquet files of a file, a glob or a directory, in order; None for a hive-partitioned data set."""
    if any(c in root for c in "*?["):
        return sorted(fs.glob(root), key=_natural)
    if not fs.isdir(root):
        return [root]
    found = sorted(fs.find(root), key=_natural)
    if any("=" in part for f in found for part in f[len(root):].strip("/").split("/")[:-1]):
        return None
    return [f for f in found if f.lower().endswith(PARQUET_SUFFIXES)]


def _read_row_groups(fs: Any, path: str, groups: tuple[int, ...], columns: list[str], dtype: np.dtype) -> np.ndarray:
    """One row block: the selected columns of row groups ``groups`` of the Parquet file ``path``."""
    import pyarrow.parquet as pq

    with fs.open(path, "rb") as fh:
        table = pq.ParquetFile(fh).read_row_groups(list(groups), columns=columns)
    return _block(table.to_pandas(), columns, dtype)


def _read_parquet_files(fs: Any, files: list[str], columns: list[str] | None, shown: str) -> tuple[Any, list[str]]:
    import dask
    import pyarrow.parquet as pq

    from .._dask.passes import concatenate, from_delayed

    if not files:
        raise StorageError(message("open_array", "a directory holding Parquet files", f"{shown}, which holds none",
                                   "Check the path."))
    with fs.open(files[0], "rb") as fh:
        schema = pq.ParquetFile(fh).schema_arrow
    columns, dtype = _select(schema.empty_table().to_pandas(), columns, shown)
    row_bytes = len(columns) * dtype.itemsize
    blocks: list[tuple[str, tuple[int, ...], int]] = []
    for path in files:
        with fs.open(path, "rb") as fh:
            meta = pq.ParquetFile(fh).metadata
        groups: list[int] = []
        rows = 0
        for i in range(meta.num_row_groups):
            n = meta.row_group(i).num_rows
            if groups and (rows + n) * row_bytes > DEFAULT_BLOCK_BYTES:
                blocks.append((path, tuple(groups), rows))
                groups, rows = [], 0
            groups.append(i)
            rows += n
        if rows:
            blocks.append((path, tuple(groups), rows))
    if not blocks:
        raise InvalidDataError(message(f"open_array on {shown}", "a table with rows", "0 rows", "Check the file."))
    read = dask.delayed(_read_row_groups, pure=True)
    parts = [from_delayed(read(fs, path, groups, columns, dtype), (n, len(columns)), dtype)
             for path, groups, n in blocks]
    return (concatenate(parts) if len(parts) > 1 else parts[0]), columns
