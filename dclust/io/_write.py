"""Writing arrays and labels to Zarr, streamed chunk by chunk and atomically.

Durability (ARCHITECTURE rule 10): on a local filesystem every store is written under a temporary sibling name
``.{name}.tmp-<random>`` in the same parent directory and renamed into place only once every chunk is on disk. With
``overwrite=True`` the previous store is first renamed aside (``.{name}.old-<random>``), the new one renamed in,
and only then is the old one deleted; if anything fails the temporary directory is removed and the previous
version is left untouched.

fsspec URLs other than ``file://`` (``memory://``, ``s3://``, ``gs://``, ``abfs://``) are opened through zarr's
store layer (``zarr.storage.FsspecStore``). Object stores have no atomic rename of a prefix, so there the commit
relies on a *completion marker*: a Zarr store (or group member) is only a store once its root metadata document
(``zarr.json``) exists -- zarr, and therefore every dclust reader, refuses a prefix without one. The store is
first written completely under a temporary sibling prefix ``.{name}.tmp-<random>``; the commit then (1) hides an
existing target by deleting its root ``zarr.json`` first and then the rest of it, (2) moves every object of the
temporary prefix except its root ``zarr.json`` to the target (``fs.mv``: a server-side copy + delete on S3/GCS/
Azure, a rename on local and in-memory filesystems), and (3) moves the root ``zarr.json`` last. A reader therefore
sees the complete old store, no store, or the complete new store -- never a half-written one under the final name.
A failure before the commit removes the temporary prefix and leaves the old store intact; a crash inside the short
commit window leaves the target without metadata (refused by readers, never mistaken for a store) and the new
store complete under the temporary prefix. ``memory://`` stores live in one process: they work with the threaded
scheduler (or a client with ``processes=False``); distributed workers in other processes need a shared store
(a local path on a shared filesystem, or ``s3://``/``gs://``/``abfs://``).

Output paths are never followed outside the requested location: a symlink *at* an output path (or, for a write into
an existing group, at the group, at any metadata document or intermediate group on the way to the member, or at the
member) is refused with :class:`~dclust.errors.StorageError` before anything is written; array names may not contain
``..``, ``.`` or empty segments; everything new is written to a fresh temporary directory created by dclust and
renamed in, and replaced stores are renamed aside (the rename moves a link itself, never its target) before they are
deleted with :func:`shutil.rmtree` (which removes links found inside, without following them). The parent
directories of the output path are taken as given (the user chose them).

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
import re
import secrets
import shutil
import socket
import time
import warnings
from typing import Any, Callable

import dask.array as da
import numpy as np
import zarr
from zarr.codecs import BloscCodec, ZstdCodec

from .._validation import DEFAULT_BLOCK_BYTES, _is_xarray
from ..errors import InvalidDataError, InvalidParameterError, StorageError, message

__all__ = ["write_array", "write_labels"]

_CODECS = ("auto", "none", "lz4", "zstd")


# --------------------------------------------------------------------------------------------------------------
# paths
# --------------------------------------------------------------------------------------------------------------


def _resolve(path: Any, what: str) -> tuple[str, str | None]:
    """``(url_or_path, local_path)``; ``local_path`` is None for non-local fsspec URLs."""
    if not isinstance(path, (str, os.PathLike)):
        raise InvalidParameterError(
            message(f"{what}(path=...)", "a str or os.PathLike (a local path or an fsspec URL)",
                    f"{type(path).__name__}", "Pass the store's location, e.g. 'data.zarr'.")
        )
    text = os.fspath(path)
    if not isinstance(text, str):  # bytes paths
        text = os.fsdecode(text)
    if "://" in text:
        protocol, rest = text.split("://", 1)
        if protocol in ("file", "local"):
            return rest, os.path.abspath(rest)
        return text, None
    local = os.path.abspath(os.path.expanduser(text))
    return local, local


def _is_zarr_dir(local: str) -> bool:
    """True if ``local`` is a directory holding Zarr metadata (v3 ``zarr.json`` or v2 ``.zarray``/``.zgroup``)."""
    return os.path.isdir(local) and any(
        os.path.isfile(os.path.join(local, f)) for f in ("zarr.json", ".zarray", ".zgroup")
    )


def _url_fs(url: str, storage_options: dict | None = None) -> tuple[Any, str]:
    """``(filesystem, path)`` of an fsspec URL (``storage_options``: the filesystem's arguments); a missing backend
    raises an error naming the extra."""
    import fsspec

    try:
        fs, root = fsspec.core.url_to_fs(url, **(storage_options or {}))
    except (ImportError, ValueError) as exc:
        raise StorageError(
            message("storage URL", "an fsspec URL whose backend is installed", f"{url!r} ({exc})",
                    "Install the backend: pip install 'dclust[cloud]' (s3fs for s3://, gcsfs for gs://, adlfs for "
                    "abfs://).")
        ) from exc
    return fs, root.rstrip("/")


def _remote_exists(url: str) -> bool:
    fs, root = _url_fs(url)
    fs.invalidate_cache()
    return bool(fs.exists(root))


def _remote_tmp(fs: Any, root: str, what: str) -> str:
    parent, sep, name = root.rpartition("/")
    if not sep or not name:
        raise StorageError(
            message(f"{what}(path={fs.unstrip_protocol(root)!r})", "a store inside a bucket or directory "
                    "('s3://bucket/data.zarr')", "the root of a bucket", "Add a name: 's3://bucket/data.zarr'.")
        )
    return f"{parent}/.{name}.tmp-{secrets.token_hex(6)}"


def _atomic_write_remote(
    url: str, write: Callable[[str], None], *, what: str, before_commit: Callable[[], None] | None = None
) -> None:
    """Run ``write(tmp_url)`` into a temporary sibling prefix, then commit it to ``url`` root metadata last.

    See the module docstring for the design (completion marker: the root ``zarr.json``).
    """
    fs, root = _url_fs(url)
    tmp = _remote_tmp(fs, root, what)
    try:
        write(fs.unstrip_protocol(tmp))
        if before_commit is not None:
            before_commit()
        fs.invalidate_cache()
        files = sorted(f.rstrip("/")[len(tmp) + 1:] for f in fs.find(tmp))
        markers = [f for f in files if f in _METADATA]
        if not markers:
            raise StorageError(
                message(what, "a written store with root metadata", "a temporary store without zarr.json",
                        "This is a bug in dclust; please report it.")
            )
        if fs.exists(root):  # hide the old store (metadata first), then remove the rest of it
            for m in _METADATA:
                if fs.exists(f"{root}/{m}"):
                    fs.rm_file(f"{root}/{m}")
            fs.rm(root, recursive=True)
        for f in [f for f in files if f not in markers] + markers:
            fs.mv(f"{tmp}/{f}", f"{root}/{f}")
    except BaseException:
        fs.invalidate_cache()
        if fs.exists(tmp):
            fs.rm(tmp, recursive=True)
        raise
    fs.invalidate_cache()
    if fs.exists(tmp):
        fs.rm(tmp, recursive=True)


_METADATA = ("zarr.json", ".zgroup", ".zarray", ".zattrs", ".zmetadata")


def _refuse_link(path: str, what: str) -> None:
    if os.path.islink(path):
        raise StorageError(
            message(what, "an output location that is not a symbolic link",
                    f"{path!r}, a symbolic link to {os.readlink(path)!r}",
                    "dclust never writes through links at or inside an output; remove the link or choose another "
                    "path.")
        )


def _check_member_path(local: str, component: str, what: str) -> None:
    """No link at the group, its root metadata, an intermediate group (or its metadata), or the member."""
    _refuse_link(local, what)
    node = local
    for part in [""] + component.split("/"):
        node = os.path.join(node, part) if part else node
        _refuse_link(node, what)
        for m in _METADATA:
            _refuse_link(os.path.join(node, m), what)


def _check_new_target(local: str, overwrite: bool, what: str) -> None:
    """Raise before anything is written if ``local`` exists and may not (or cannot safely) be replaced."""
    if not os.path.lexists(local):
        return
    _refuse_link(local, f"{what}(path={local!r})")
    if not overwrite:
        raise StorageError(
            message(f"{what}(path={local!r})", "a path where no store exists yet, or overwrite=True",
                    "a path that already exists", "Pass overwrite=True to replace it, or choose another path.")
        )
    if not _is_zarr_dir(local):
        raise StorageError(
            message(f"{what}(path={local!r}, overwrite=True)", "an existing Zarr store to replace",
                    "a path that exists but is not a Zarr store",
                    "dclust only replaces Zarr stores; remove it yourself or choose another path.")
        )


# --------------------------------------------------------------------------------------------------------------
# atomic commit
# --------------------------------------------------------------------------------------------------------------


#: this machine's name as it appears in temporary names (no "-": the name is split on it)
_HOST = re.sub(r"[^A-Za-z0-9_]", "_", socket.gethostname()) or "host"


def _tmp_name(parent: str, name: str, kind: str) -> str:
    """``.NAME.KIND-HOST-PID-RANDOM``: the writer's host and process id let a later run on the same host find
    (and remove) what a killed writer left behind, see :func:`remove_stale_tmp`."""
    return os.path.join(parent, f".{name}.{kind}-{_HOST}-{os.getpid()}-{secrets.token_hex(6)}")


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):  # exists but is not ours, or cannot tell: keep its files
        return True
    return True


def remove_stale_tmp(parent: str, name: str) -> list[str]:
    """Remove the temporary outputs ``.NAME.tmp-*`` in ``parent`` left by writers of this host that no longer run
    (a killed driver: nothing was renamed into place, the temporary copy is garbage). Temporaries of live
    processes and of other hosts are kept; so are ``.NAME.old-*`` (a previous complete output renamed aside just
    before its replacement came in: data, not garbage). Returns the removed paths."""
    prefix = f".{name}.tmp-{_HOST}-"
    try:
        entries = [e for e in os.listdir(parent or ".") if e.startswith(prefix)]
    except OSError:
        return []
    removed = []
    for entry in entries:
        pid = entry[len(prefix):].split("-", 1)[0]
        if not pid.isdigit() or int(pid) == os.getpid() or _process_alive(int(pid)):
            continue
        path = os.path.join(parent, entry)
        if os.path.isdir(path) and not os.path.islink(path):
            _remove_tmp(path)
        else:
            try:
                os.remove(path)
            except OSError:
                continue
        removed.append(path)
    return removed


def _remove_tmp(tmp: str) -> None:
    """Remove a temporary store, also against straggler tasks still finishing their chunk after a failure.

    The sentinel (the temporary root's ``zarr.json``) goes first: :class:`_GuardedTarget` refuses to write once it
    is gone, so a task still computing when the graph failed cannot recreate the directory later.
    """
    for sentinel in ("zarr.json", ".zgroup", ".zarray"):
        try:
            os.remove(os.path.join(tmp, sentinel))
        except OSError:
            pass
    for delay in (0.0, 0.05, 0.2):
        time.sleep(delay)
        shutil.rmtree(tmp, ignore_errors=True)


def _atomic_write(
    target: str,
    write: Callable[[str], None],
    *,
    tmp_parent: str | None = None,
    before_commit: Callable[[], None] | None = None,
) -> None:
    """Run ``write(tmp)`` into a temporary directory, then rename it to ``target``.

    ``tmp_parent`` (default: ``target``'s parent) must be on the same filesystem as ``target``. An existing
    ``target`` is renamed aside, replaced, and deleted only after the new one is in place; on any failure the
    temporary directory is removed and ``target`` keeps its previous content.
    """
    parent = tmp_parent or os.path.dirname(target)
    name = os.path.basename(target.rstrip(os.sep)) or "store"
    os.makedirs(parent, exist_ok=True)
    remove_stale_tmp(parent, name)
    tmp = _tmp_name(parent, name, "tmp")
    try:
        write(tmp)
        if before_commit is not None:
            before_commit()
        os.makedirs(os.path.dirname(target), exist_ok=True)
        old = None
        if os.path.lexists(target):
            old = _tmp_name(parent, name, "old")
            os.replace(target, old)
        try:
            os.replace(tmp, target)
        except BaseException:
            if old is not None:
                os.replace(old, target)
            raise
    except BaseException:
        _remove_tmp(tmp)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


class _GuardedTarget:
    """``__setitem__`` target for :func:`dask.array.store` that stops writing once the sentinel file is gone."""

    def __init__(self, array: Any, sentinel: str | None) -> None:
        self.array = array
        self.sentinel = sentinel
        self.shape = array.shape
        self.dtype = array.dtype

    def __setitem__(self, key: Any, value: Any) -> None:
        if self.sentinel is not None and not os.path.exists(self.sentinel):
            raise StorageError(
                message("write", "the temporary store to exist while writing", "a removed temporary store",
                        "The write was aborted after an earlier failure; see the first error.")
            )
        self.array[key] = value


# --------------------------------------------------------------------------------------------------------------
# arrays, chunks, codecs
# --------------------------------------------------------------------------------------------------------------


def _compressors(codec: Any, dtype: np.dtype) -> list | None:
    if not isinstance(codec, str) or codec not in _CODECS:
        raise InvalidParameterError(
            message("codec", "one of " + ", ".join(repr(c) for c in _CODECS), repr(codec),
                    "Use codec='auto' unless you have measured otherwise.")
        )
    if codec == "auto":
        codec = "none" if dtype.kind in "fc" else "lz4"
    if codec == "none":
        return None
    if codec == "zstd":
        return [ZstdCodec(level=1)]
    shuffle = "shuffle" if dtype.kind in "fc" else "bitshuffle"
    return [BloscCodec(cname="lz4", clevel=5, shuffle=shuffle, typesize=dtype.itemsize)]


def _check_chunks(chunks: Any, ndim: int) -> int | tuple[int, ...] | None:
    if chunks is None:
        return None
    if isinstance(chunks, (int, np.integer)) and not isinstance(chunks, bool) and chunks >= 1:
        return int(chunks)
    if (
        isinstance(chunks, tuple)
        and len(chunks) == ndim
        and all(isinstance(c, (int, np.integer)) and not isinstance(c, bool) and c >= 1 for c in chunks)
    ):
        return tuple(int(c) for c in chunks)
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
        x = da.from_array(xn, chunks=(rows,) + tuple(-1 for _ in xn.shape[1:])) if xn.ndim else da.from_array(xn)
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
        return x.rechunk(chunks)
    if isinstance(chunks, int):
        rows = chunks
    else:
        rows = max(x.chunks[0]) if x.shape[0] else 1
    target = {0: rows, **{ax: -1 for ax in range(1, x.ndim)}}
    first = x.chunks[0]
    regular = all(c == rows for c in first[:-1]) and (not first or first[-1] <= rows)
    if not regular or any(len(c) > 1 for c in x.chunks[1:]):
        x = x.rechunk(target)
    return x


def _zarr_chunk_shape(x: da.Array) -> tuple[int, ...]:
    return tuple(max(1, max(c) if c else 1) for c in x.chunks)


def _store(x: da.Array, store: str, name: str | None, compressors: list | None, sentinel: str | None) -> None:
    """Create the Zarr array ``name`` in ``store`` and stream ``x`` into it block by block."""
    z = zarr.create_array(
        store=store,
        name=name,
        shape=x.shape,
        dtype=x.dtype,
        chunks=_zarr_chunk_shape(x),
        compressors=compressors,
        zarr_format=3,
    )
    da.store(x, _GuardedTarget(z, sentinel), lock=False, compute=True)


def _check_component(component: Any, what: str) -> str | None:
    if component is None:
        return None
    parts = component.split("/") if isinstance(component, str) else []
    if not parts or any(p in ("", ".", "..") or p.startswith("__") for p in parts):
        raise InvalidParameterError(
            message(f"{what}(component=...)", "None or a '/'-separated name like 'labels' or 'run1/labels'",
                    repr(component), "Names may not be empty, '.', '..', or start with '__'.")
        )
    return component


# --------------------------------------------------------------------------------------------------------------
# public
# --------------------------------------------------------------------------------------------------------------


def write_array(
    x: Any,
    path: str | os.PathLike,
    *,
    component: str | None = None,
    overwrite: bool = False,
    codec: str = "auto",
    chunks: int | tuple[int, ...] | None = None,
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
    (``memory://``, ``s3://``...) have no atomic rename: they are written under a temporary prefix and moved into
    place with the root ``zarr.json`` last, so no reader ever sees a partial store (see the module docstring).
    A symbolic link at ``path`` (or inside an existing group on the way to ``component``) is refused.

    Examples
    --------
    >>> import numpy as np, tempfile, os, zarr
    >>> d = tempfile.mkdtemp()
    >>> p = write_array(np.arange(12.0).reshape(6, 2), os.path.join(d, "x.zarr"), chunks=4)
    >>> z = zarr.open_array(p, mode="r"); z.shape, z.chunks
    ((6, 2), (4, 2))
    """
    return _write(x, path, component=component, overwrite=overwrite, codec=codec, chunks=chunks, what="write_array")


def _write(
    x: Any, path: Any, *, component: str | None, overwrite: bool, codec: str, chunks: Any, what: str
) -> str:
    """:func:`write_array`, with ``what`` naming the public function in error messages."""
    if not isinstance(overwrite, bool):
        raise InvalidParameterError(message(f"{what}(overwrite=...)", "True or False", repr(overwrite), "Pass a bool."))
    component = _check_component(component, what)
    arr = _as_dask(x, chunks, what)
    compressors = _compressors(codec, arr.dtype)
    url, local = _resolve(path, what)
    if local is None:
        _write_remote(arr, url, component, overwrite, compressors, what)
        return url
    if component is None or not os.path.lexists(local):
        _check_new_target(local, overwrite, what)

        def write(tmp: str) -> None:
            if component is not None:
                zarr.create_group(store=tmp, zarr_format=3)
            _store(arr, tmp, component, compressors, os.path.join(tmp, "zarr.json"))

        _atomic_write(local, write)
        return local
    _write_member(arr, local, component, overwrite, compressors, what)
    return local


def _write_member(
    arr: da.Array, local: str, component: str, overwrite: bool, compressors: list | None, what: str
) -> None:
    """Add (or replace) the array ``component`` inside the existing local Zarr v3 group ``local``, atomically."""
    where = f"{what}(path={local!r}, component={component!r})"
    _check_member_path(local, component, where)
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
        lambda tmp: _store(arr, tmp, None, compressors, os.path.join(tmp, "zarr.json")),
        tmp_parent=os.path.dirname(local),
        before_commit=before_commit,
    )
    if consolidated:  # the store already uses (v3, not yet standard) consolidated metadata: keep it current
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Consolidated metadata", category=UserWarning)
            zarr.consolidate_metadata(local)


def _write_remote(
    arr: da.Array, url: str, component: str | None, overwrite: bool, compressors: list | None, what: str
) -> None:
    """Write to a non-local fsspec URL: a temporary prefix, committed root metadata last (see the module doc)."""
    exists = _remote_exists(url)
    if component is None or not exists:
        if exists and not overwrite:
            raise StorageError(
                message(f"{what}(path={url!r})", "a location where no store exists yet, or overwrite=True",
                        "a location that already exists", "Pass overwrite=True or choose another path.")
            )

        def write(tmp: str) -> None:
            if component is not None:
                zarr.create_group(store=tmp, zarr_format=3)
            _store(arr, tmp, component, compressors, None)

        _atomic_write_remote(url, write, what=what)
        return
    where = f"{what}(path={url!r}, component={component!r})"
    group = _open_remote_group(url, what)
    if group.metadata.zarr_format != 3:
        raise StorageError(
            message(where, "a Zarr v3 group", f"a Zarr v{group.metadata.zarr_format} group",
                    "Write to a new store instead (or convert the store to Zarr v3).")
        )
    try:
        node = group[component]
    except KeyError:
        node = None
    if node is not None and not overwrite:
        raise StorageError(
            message(where, "a component that does not exist yet, or overwrite=True", "an existing component",
                    "Pass overwrite=True or pick another name.")
        )
    if node is not None and not isinstance(node, zarr.Array):
        raise StorageError(
            message(where, "an existing Zarr array to replace", "a group", "Choose another component name.")
        )
    parent_component = "/".join(component.split("/")[:-1])

    def before_commit() -> None:
        if parent_component:
            zarr.open_group(store=url, mode="r+").require_group(parent_component)

    _atomic_write_remote(
        url.rstrip("/") + "/" + component,
        lambda tmp: _store(arr, tmp, None, compressors, None),
        what=what,
        before_commit=before_commit,
    )


def _open_remote_group(url: str, what: str) -> Any:
    try:
        return zarr.open_group(store=url, mode="r+")
    except Exception as exc:  # noqa: BLE001
        raise StorageError(
            message(f"{what}(path={url!r})", "an existing Zarr group (or a new location)",
                    "a location that exists but is not a Zarr group", "Choose another path.")
        ) from exc


def write_labels(labels: Any, path: str | os.PathLike, *, overwrite: bool = False) -> str:
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
    return _write(y, path, component=None, overwrite=overwrite, codec="auto", chunks=None, what="write_labels")
