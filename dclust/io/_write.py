"""Writing arrays to Zarr, streamed chunk by chunk and atomically (labels: :mod:`._labels`).

The atomic commit (temporary sibling + rename locally, root metadata last on object stores), the checks of the
output location before any work, and the chunk checksum live in :mod:`dclust._store` (one of each for every
store dclust writes); this module turns arrays into those writes.

Codecs, measured on this project's 2-core machine with zarr 3.1 (4M x 8 float32 = 128 MB in 500,000-row chunks,
read back chunk by chunk from the page cache, best of 5; labels are 4M int32 in [0, 16)):

=====================  ================  =============  ================  ==============
codec                  uniform float32   blobs float32  (ratio)           int32 labels
=====================  ================  =============  ================  ==============
none                   0.068 s           0.066 s        1.00 / 1.00       0.015 s (1.00)
blosc lz4, noshuffle   0.102 s           0.084 s        1.00 / 1.00       0.029 s (2.74)
blosc lz4, shuffle     0.142 s           0.127 s        1.13 / 1.12       0.025 s (3.95)
blosc lz4, bitshuffle  0.150 s           0.157 s        1.22 / 1.10       0.034 s (7.74)
zstd level 1           0.313 s           0.309 s        1.12 / 1.08       0.065 s (4.85)
zstd level 0 (zarr's)  0.298 s           0.314 s        1.12 / 1.08       0.066 s (4.89)
=====================  ================  =============  ================  ==============

Random floats barely compress (at most 1.22x) while every compressor costs 1.3x-4.7x the decode time of raw
chunks, so ``codec="auto"`` writes floating-point data uncompressed. Integer and boolean data (labels) compress
7.7x with blosc-lz4 + bitshuffle for about 2x the (tiny) decode time of raw chunks, so ``"auto"`` uses that for
them.
"""

from __future__ import annotations

import os
import warnings
from typing import Any, Literal

import dask.array as da
import numpy as np
import zarr
from zarr.codecs import BloscCodec, ZstdCodec

from .._dask.passes import from_array, rechunk
from .._validation import DEFAULT_BLOCK_BYTES, _is_xarray
from .._store._atomic import (  # noqa: F401 - also the names other io modules and the CLI import from here
    _atomic_write,
    _atomic_write_remote,
    _check_member_path,
    _check_new_target,
    _HOST,
    _is_zarr_dir,
    _local_only,
    _remote_exists,
    _resolve,
    _tmp_name,
    check_location,
    check_remote_location,
    check_storage_options,
)
from .._store._zarr import checksummed, stream_array
from ._open import counts
from ..errors import InvalidDataError, InvalidParameterError, StorageError, message

__all__ = ["write_array"]

_CODECS = ("auto", "none", "lz4", "zstd")


# --------------------------------------------------------------------------------------------------------------
# arrays, chunks, codecs
# --------------------------------------------------------------------------------------------------------------


def _compressors(codec: Any, dtype: np.dtype) -> list[Any] | None:
    if not isinstance(codec, str) or codec not in _CODECS:
        raise InvalidParameterError(
            message("codec", "one of " + ", ".join(repr(c) for c in _CODECS), repr(codec),
                    "Use codec='auto' unless you have measured otherwise.")
        )
    if codec == "auto":
        codec = "none" if dtype.kind in "fc" else "lz4"
    if codec == "none":
        return checksummed(None)
    if codec == "zstd":
        return checksummed([ZstdCodec(level=1)])
    shuffle: Literal["shuffle", "bitshuffle"] = "shuffle" if dtype.kind in "fc" else "bitshuffle"
    return checksummed([BloscCodec(cname="lz4", clevel=5, shuffle=shuffle, typesize=dtype.itemsize)])


def _check_chunks(chunks: Any, ndim: int) -> int | tuple[int, ...] | None:
    shape = counts(chunks, ndim)
    if shape is not False:
        return shape
    raise InvalidParameterError(
        message("chunks", f"None, a positive int (rows per chunk) or a tuple of {ndim} positive ints",
                repr(chunks), "Pass chunks=500_000, or leave it None to keep the array's row chunks.")
    )


def _as_dask(x: Any, chunks: Any, what: str) -> da.Array:
    """``x`` as a dask array whose chunks are regular, so that each dask block maps onto whole Zarr chunks."""
    if _is_xarray(x):
        x = x.data
    if not isinstance(x, da.Array):
        try:
            xn = np.asarray(x)
        except Exception as exc:  # noqa: BLE001 - anything numpy refuses
            raise InvalidDataError(
                message(f"{what}(x=...)", "a dask or numpy array", type(x).__name__, "Pass an array.")
            ) from exc
        if xn.dtype.kind not in "biufc":
            raise InvalidDataError(
                message(f"{what}(x=...)", "numeric or boolean data", f"dtype {xn.dtype}", "Convert it first.")
            )
        row_bytes = max(1, int(np.prod(xn.shape[1:], dtype=np.int64)) * xn.dtype.itemsize)
        rows = max(1, DEFAULT_BLOCK_BYTES // row_bytes)
        x = from_array(xn, (rows,) + tuple(-1 for _ in xn.shape[1:])) if xn.ndim else from_array(xn, "auto")
    assert isinstance(x, da.Array)  # a dask array given, or the numpy one wrapped above
    if x.dtype.kind not in "biufc":
        raise InvalidDataError(
            message(f"{what}(x=...)", "numeric or boolean data", f"dtype {x.dtype}", "Convert it first.")
        )
    if x.ndim == 0:
        raise InvalidDataError(
            message(f"{what}(x=...)", "an array with at least one dimension", "a 0-d array", "Reshape it: x[None].")
        )
    chunks = _check_chunks(chunks, x.ndim)
    if isinstance(chunks, tuple):
        return rechunk(x, chunks)
    if isinstance(chunks, int):
        rows = chunks
    else:
        rows = max(x.chunks[0]) if x.shape[0] else 1
    target = {0: rows, **{ax: -1 for ax in range(1, x.ndim)}}
    first = x.chunks[0]
    regular = all(c == rows for c in first[:-1]) and (not first or first[-1] <= rows)
    if not regular or any(len(c) > 1 for c in x.chunks[1:]):
        return rechunk(x, target)
    return x


def _check_component(component: Any, what: str) -> str | None:
    if component is None:
        return None
    parts = component.split("/") if isinstance(component, str) else []
    if not parts or any(p in ("", ".", "..") or p.startswith("__") for p in parts):
        raise InvalidParameterError(
            message(f"{what}(component=...)", "None or a '/'-separated name like 'labels' or 'run1/labels'",
                    repr(component), "Names may not be empty, '.', '..', or start with '__'.")
        )
    assert isinstance(component, str)  # else parts is empty
    return component


# --------------------------------------------------------------------------------------------------------------
# public
# --------------------------------------------------------------------------------------------------------------


def write_array(
    x: Any,
    path: str | os.PathLike[str],
    *,
    component: str | None = None,
    overwrite: bool = False,
    codec: str = "auto",
    chunks: int | tuple[int, ...] | None = None,
    storage_options: dict[str, Any] | None = None,
) -> str:
    """Write an array to a new Zarr (v3) store, streamed chunk by chunk and atomically.

    Parameters
    ----------
    x : dask.array.Array or numpy.ndarray, shape (n_samples, ...)
        Data to write. An xarray DataArray is written through its ``.data`` (coordinates are not stored). Dask
        blocks are written as they are computed: the array is never materialised in full.
    path : str or os.PathLike
        Local path or fsspec URL of the store.
    component : str, optional
        ``None`` (default) makes the store itself the array (``zarr.open_array(path)``). A name such as
        ``"labels"`` writes the array inside a group: a new group store when ``path`` does not exist, otherwise
        a new member of the existing Zarr v3 group at ``path`` (the other members are left alone).
    overwrite : bool, default False
        Replace an existing store (or an existing array ``component``). Without it an existing target raises
        :class:`~dclust.errors.StorageError` before anything is written. Paths that exist but are not Zarr are
        never replaced.
    codec : {"auto", "none", "lz4", "zstd"}, default "auto"
        ``"auto"``: uncompressed for floating-point data (fastest to decode, random floats barely compress),
        blosc-lz4 with bitshuffle for integers and booleans (see the module docstring for the measurement).
        ``"lz4"``: blosc-lz4 (byte shuffle for floats, bitshuffle otherwise); ``"zstd"``: zstd level 1.
    chunks : int or tuple of int, optional
        Rows per Zarr chunk (int) or the full chunk shape (tuple). Default: the dask array's row chunks (numpy
        input: about 64 MiB per chunk); the other axes are always one chunk unless a tuple says otherwise.
    storage_options : dict, optional
        Arguments of the fsspec filesystem of a URL ``path`` (for ``s3://``: ``endpoint_url``, ``key``,
        ``secret``, ``client_kwargs``...); without them the backend's own configuration applies (for S3 the
        ``AWS_*`` environment). Local paths take none.

    Returns
    -------
    str
        The store's location (absolute path for local stores).

    Raises
    ------
    StorageError
        The target exists and ``overwrite`` is False, or it exists but is not a Zarr store, or ``component`` is
        requested inside something that is not a Zarr v3 group.

    Notes
    -----
    Local paths are written to ``.{name}.tmp-<random>`` next to the target and renamed into place when complete;
    on failure the temporary directory is removed and any previous store is intact. Non-local fsspec URLs
    (``memory://``, ``s3://``...) have no atomic rename: they are written under a temporary prefix and committed
    by a commit record, then copied into place root ``zarr.json`` last, so no reader ever sees a partial store
    (docs/object-storage.md).
    A symbolic link at ``path`` (or inside an existing group on the way to ``component``) is refused.

    Examples
    --------
    >>> import numpy as np, tempfile, os, zarr
    >>> d = tempfile.mkdtemp()
    >>> p = write_array(np.arange(12.0).reshape(6, 2), os.path.join(d, "x.zarr"), chunks=4)
    >>> z = zarr.open_array(p, mode="r"); z.shape, z.chunks
    ((6, 2), (4, 2))
    """
    return _write(x, path, component=component, overwrite=overwrite, codec=codec, chunks=chunks, what="write_array",
                  storage_options=storage_options)


def _write(
    x: Any, path: Any, *, component: str | None, overwrite: bool, codec: str, chunks: Any, what: str,
    storage_options: dict[str, Any] | None = None,
) -> str:
    """:func:`write_array`, with ``what`` naming the public function in error messages."""
    options = check_storage_options(storage_options, what)
    if not isinstance(overwrite, bool):
        raise InvalidParameterError(message(f"{what}(overwrite=...)", "True or False", repr(overwrite), "Pass a bool."))
    component = _check_component(component, what)
    arr = _as_dask(x, chunks, what)
    compressors = _compressors(codec, arr.dtype)
    url, local = _resolve(path, what)
    if local is None:
        _write_remote(arr, url, component, overwrite, compressors, what, options)
        return url
    _local_only(options, what, local)
    if component is None or not os.path.lexists(local):
        _check_new_target(local, overwrite, what)

        def write(tmp: str) -> None:
            if component is not None:
                zarr.create_group(store=tmp, zarr_format=3)
            stream_array(arr, tmp, component, compressors, os.path.join(tmp, "zarr.json"))

        _atomic_write(local, write)
        return local
    _write_member(arr, local, component, overwrite, compressors, what)
    return local


def _write_member(
    arr: da.Array, local: str, component: str, overwrite: bool, compressors: list[Any] | None, what: str
) -> None:
    """Add (or replace) the array ``component`` inside the existing local Zarr v3 group ``local``, atomically."""
    where = f"{what}(path={local!r}, component={component!r})"
    _check_member_path(local, component, where)
    check_location(os.path.join(local, *component.split("/")), what)  # before any pass over the data
    try:
        group = zarr.open_group(store=local, mode="r")
    except Exception as exc:  # noqa: BLE001 - zarr raises several types for "not a group"
        raise StorageError(
            message(where, "a path that is an existing Zarr group (or does not exist yet)",
                    "a path that exists but is not a Zarr group",
                    "Drop component= to write a standalone array store, or choose another path.")
        ) from exc
    if group.metadata.zarr_format != 3:
        raise StorageError(
            message(where, "a Zarr v3 group", f"a Zarr v{group.metadata.zarr_format} group",
                    "Write to a new store instead (or convert the store to Zarr v3).")
        )
    member = os.path.join(local, *component.split("/"))
    if os.path.lexists(member):
        try:
            node = group[component]
        except KeyError:
            node = None
        if not overwrite:
            raise StorageError(
                message(where, "a component that does not exist yet, or overwrite=True",
                        "a component that already exists", "Pass overwrite=True to replace it, or pick another name.")
            )
        if not isinstance(node, zarr.Array):
            raise StorageError(
                message(where, "an existing Zarr array to replace", "a path inside the store that is not an array",
                        "Choose another component name.")
            )
    consolidated = group.metadata.consolidated_metadata is not None
    parent_component = "/".join(component.split("/")[:-1])

    def before_commit() -> None:
        if parent_component:
            zarr.open_group(store=local, mode="r+").require_group(parent_component)

    _atomic_write(
        member,
        lambda tmp: stream_array(arr, tmp, None, compressors, os.path.join(tmp, "zarr.json")),
        tmp_parent=os.path.dirname(local),
        before_commit=before_commit,
    )
    if consolidated:  # the store already uses (v3, not yet standard) consolidated metadata: keep it current
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Consolidated metadata", category=UserWarning)
            zarr.consolidate_metadata(local)


def _write_remote(
    arr: da.Array, url: str, component: str | None, overwrite: bool, compressors: list[Any] | None, what: str,
    options: dict[str, Any] | None,
) -> None:
    """Write to a non-local fsspec URL: a temporary prefix, then the commit (:mod:`dclust._store._atomic`)."""
    exists = _remote_exists(url, options)
    if component is None or not exists:
        if exists and not overwrite:
            raise StorageError(
                message(f"{what}(path={url!r})", "a location where no store exists yet, or overwrite=True",
                        "a location that already exists", "Pass overwrite=True or choose another path.")
            )
        check_remote_location(url, what, options)  # before any pass over the data

        def write(tmp: Any) -> None:
            if component is not None:
                zarr.create_group(store=tmp, zarr_format=3)
            stream_array(arr, tmp, component, compressors, None)

        _atomic_write_remote(url, write, what=what, storage_options=options)
        return
    where = f"{what}(path={url!r}, component={component!r})"
    group = _open_remote_group(url, what, options)
    if group.metadata.zarr_format != 3:
        raise StorageError(
            message(where, "a Zarr v3 group", f"a Zarr v{group.metadata.zarr_format} group",
                    "Write to a new store instead (or convert the store to Zarr v3).")
        )
    try:
        node = group[component]
    except KeyError:
        node = None
    member = url.rstrip("/") + "/" + component
    if (node is not None or _remote_exists(member, options)) and not overwrite:  # (a commit record counts)
        raise StorageError(
            message(where, "a component that does not exist yet, or overwrite=True", "an existing component",
                    "Pass overwrite=True or pick another name.")
        )
    if node is not None and not isinstance(node, zarr.Array):
        raise StorageError(
            message(where, "an existing Zarr array to replace", "a group", "Choose another component name.")
        )
    parent_component = "/".join(component.split("/")[:-1])
    check_remote_location(member, what, options)  # before any pass over the data

    def before_commit() -> None:
        if parent_component:
            _open_remote_group(url, what, options).require_group(parent_component)

    _atomic_write_remote(
        member,
        lambda tmp: stream_array(arr, tmp, None, compressors, None),
        what=what,
        storage_options=options,
        before_commit=before_commit,
    )


def _open_remote_group(url: str, what: str, options: dict[str, Any] | None) -> Any:
    extra: dict[str, Any] = {"storage_options": options} if options else {}
    try:
        return zarr.open_group(store=url, mode="r+", **extra)
    except Exception as exc:  # noqa: BLE001
        raise StorageError(
            message(f"{what}(path={url!r})", "an existing Zarr group (or a new location)",
                    "a location that exists but is not a Zarr group", "Choose another path.")
        ) from exc
