"""Atomic writes: every output dclust writes goes to a temporary name and is renamed in when complete.

Durability (ARCHITECTURE rule 10): on a local filesystem every output (a Zarr store or a file) is written under a
temporary sibling name ``.{name}.tmp-HOST-PID-RANDOM`` in the same parent directory by :func:`_atomic_write` (the one
helper) and renamed into place only once complete. With ``overwrite=True`` a previous store is first renamed aside
(``.{name}.old-HOST-PID-RANDOM``), the new one renamed in, and only then is the old one deleted; if anything fails
the temporary is removed and the previous version is left untouched. Each write first removes the temporaries that
dead writers of this host left in its directory (:func:`remove_stale_tmp`; ``dclust clean`` does it on demand), and
:func:`check_location` / :func:`_check_new_target` refuse an output that cannot be written before any work.

fsspec URLs other than ``file://`` (``memory://``, ``s3://``, ``gs://``, ``abfs://``) are written through zarr's
store layer (``zarr.storage.FsspecStore``, with the caller's ``storage_options``). Object stores have no atomic
rename, so there a write commits through a *commit record* (docs/object-storage.md tells the same for users):

1. The store is written completely under a temporary sibling prefix ``PARENT/.NAME.tmp-HOST-PID-RANDOM/`` (its root
   ``zarr.json`` included). Nothing under ``PARENT/NAME`` changes; a failure (or a kill) here leaves the previous
   store as it was, and the temporary prefix is never read.
2. **Commit point**: one PUT of the small object ``PARENT/.NAME.commit`` (JSON: the temporary prefix's name, host,
   pid, time). An object PUT is atomic on every object store: from now on the new store *is* the store.
3. Roll forward: the previous store's metadata documents are deleted (root ``zarr.json`` first), then the rest of
   it; every object of the temporary prefix is copied to ``PARENT/NAME/`` (server-side copies), chunks first, then
   metadata documents deepest first, the root ``zarr.json`` last; then the commit record is deleted, then the
   temporary prefix.

Readers (:func:`committed_url`: ``open_array``, ``load``, ``ConstraintGraph.from_zarr``, checkpoint resume) look for
the commit record first: while it exists they read the complete new store under the temporary prefix it names,
otherwise ``PARENT/NAME`` itself. So a dclust reader sees the previous store until the commit point and the new one
after it, whenever the writer was killed; a store that was never committed does not exist for it. Plain zarr
readers, which do not know the record, see the previous store, nothing (no root ``zarr.json``: zarr refuses the
prefix) or the complete new store -- never a partial store under the final name. The next write of the same output
(or ``dclust.clean(URL)``, for a commit that a dead writer of this host left recorded) finishes the work.
Overwriting a store that a running job is reading is unsafe on every filesystem (its chunks disappear under it).
``memory://`` stores live in one process: they work with the threaded scheduler (or a client with
``processes=False``); distributed workers in other processes need a shared store.

Output paths are never followed outside the requested location: a symlink *at* an output path (or, for a write into
an existing group, at the group, at any metadata document or intermediate group on the way to the member, or at the
member) is refused with :class:`~dclust.errors.StorageError` before anything is written; array names may not contain
``..``, ``.`` or empty segments; everything new is written to a fresh temporary directory created by dclust and
renamed in, and replaced stores are renamed aside (the rename moves a link itself, never its target) before they are
deleted with :func:`shutil.rmtree` (which removes links found inside, without following them). The parent
directories of the output path are taken as given (the user chose them).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import socket
import time
from typing import Any, Callable

from ..errors import InvalidParameterError, StorageError, message

__all__ = ["check_location", "clean", "is_temporary", "remove_stale_tmp"]

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


def check_storage_options(storage_options: Any, what: str) -> dict | None:
    """``storage_options`` checked (None or a dict with str keys: the fsspec filesystem's arguments); None if
    empty."""
    if storage_options is None or (isinstance(storage_options, dict)
                                   and all(isinstance(k, str) for k in storage_options)):
        return dict(storage_options) if storage_options else None
    raise InvalidParameterError(
        message(f"{what}(storage_options=...)", "None or a dict of the filesystem's arguments",
                repr(storage_options)[:120], "Pass e.g. storage_options={'endpoint_url': 'http://127.0.0.1:9000'}.")
    )


def storage_location(value: Any) -> tuple[Any, dict | None]:
    """``(path_or_url, storage_options)`` of an output given as a path, a URL, or an fsspec mapper
    (``fsspec.get_mapper(url, **storage_options)``: its URL and its filesystem's ``storage_options``)."""
    if is_mapper(value):
        return value.fs.unstrip_protocol(value.root), (dict(value.fs.storage_options) or None)
    return value, None


def is_mapper(value: Any) -> bool:
    """True for an fsspec mapper (``fsspec.FSMap``): a location that carries its filesystem."""
    return hasattr(value, "fs") and isinstance(getattr(value, "root", None), str) and hasattr(value.fs,
                                                                                               "unstrip_protocol")


def _local_only(options: dict | None, what: str, local: str) -> None:
    """``storage_options`` belong to fsspec URLs: given with a local path they would be ignored, so they raise."""
    if options is not None:
        raise InvalidParameterError(
            message(f"{what}(storage_options=...)", f"None for the local path {local!r}", repr(options)[:120],
                    "storage_options= only applies to fsspec URLs (s3://, gs://, ...); drop it.")
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


def _split_remote(fs: Any, root: str, what: str) -> tuple[str, str]:
    """``(parent, name)`` of a remote store path; a bucket root is refused (there is no sibling prefix)."""
    parent, sep, name = root.rpartition("/")
    if not sep or not name:
        raise StorageError(
            message(f"{what}(path={fs.unstrip_protocol(root)!r})", "a store inside a bucket or directory "
                    "('s3://bucket/data.zarr')", "the root of a bucket", "Add a name: 's3://bucket/data.zarr'.")
        )
    return parent, name


def _journal_path(root: str) -> str | None:
    """The commit record ``PARENT/.NAME.commit`` of the remote store ``root`` (None at a bucket root)."""
    parent, sep, name = root.rpartition("/")
    return f"{parent}/.{name}.commit" if sep and name else None


def _committed_tmp(fs: Any, root: str) -> str | None:
    """The temporary prefix that the commit record of ``root`` names (a commit under way, or interrupted by a
    killed writer), or None when there is no (valid) record."""
    journal = _journal_path(root)
    if journal is None:
        return None
    try:
        doc = json.loads(fs.cat_file(journal))
    except FileNotFoundError:
        return None
    except (ValueError, TypeError):  # a damaged record is no commit: the store itself is what is there
        return None
    tmp = doc.get("tmp") if isinstance(doc, dict) else None
    name = root.rpartition("/")[2]
    m = _TMP_RE.match(tmp) if isinstance(tmp, str) else None
    if m is None or m["name"] != name or m["kind"] != "tmp":
        return None
    return f"{root.rpartition('/')[0]}/{tmp}"


def committed_url(url: str, storage_options: dict | None = None) -> str:
    """The URL a reader opens for the remote store ``url``: ``url`` itself, or -- while a commit is under way, or
    after a writer was killed inside one -- the complete new store under the temporary prefix its commit record
    names (see the module docstring). Local paths never have a commit record."""
    fs, root = _url_fs(url, storage_options)
    fs.invalidate_cache()
    tmp = _committed_tmp(fs, root)
    return url if tmp is None else fs.unstrip_protocol(tmp)


def _remote_exists(url: str, storage_options: dict | None = None) -> bool:
    """True if the remote store ``url`` has objects, or a commit record (a store being committed)."""
    fs, root = _url_fs(url, storage_options)
    fs.invalidate_cache()
    journal = _journal_path(root)
    return bool(fs.exists(root)) or (journal is not None and bool(fs.exists(journal)))


def check_remote_location(url: str, what: str, storage_options: dict | None = None) -> None:
    """Raise :class:`~dclust.errors.StorageError` unless objects can be written beside the store ``url`` (an fsspec
    URL): an empty probe object ``.NAME.probe-HOST-PID-RANDOM`` is written and removed, so a missing bucket,
    missing credentials or a read-only bucket are found before any pass over the data, by the object store
    itself."""
    fs, root = _url_fs(url, storage_options)
    parent, name = _split_remote(fs, root, what)
    probe = _tmp_name(parent, name, "probe")
    try:
        fs.pipe_file(probe, b"")
    except Exception as exc:  # noqa: BLE001 - every backend raises its own errors
        raise StorageError(
            message(f"{what}(path={url!r})", "a location where dclust may write objects",
                    f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''} when writing a "
                    "probe object there", "Check that the bucket exists and that the credentials allow writing "
                    "(storage_options= or the AWS_* environment), or choose another location.")
        ) from None
    try:
        fs.rm_file(probe)
    except Exception:  # noqa: BLE001 - the probe is an empty hidden object
        pass


def _remote_store(fs: Any, path: str, storage_options: dict | None) -> Any:
    """A writable zarr store on the remote prefix ``path`` (the filesystem's arguments go with it to workers)."""
    from zarr.storage import FsspecStore

    return FsspecStore.from_url(fs.unstrip_protocol(path), storage_options=storage_options, read_only=False)


def _depth(key: str) -> int:
    return key.count("/")


def _is_metadata(key: str) -> bool:
    return key.rpartition("/")[2] in _METADATA


def _roll_forward(fs: Any, root: str, tmp: str) -> None:
    """Finish a recorded commit: hide and remove the previous store at ``root`` (metadata documents first, the root
    one first of all), copy every object of ``tmp`` there (data, then metadata documents deepest first, the root
    ``zarr.json`` last), then drop the commit record and the temporary prefix."""
    fs.invalidate_cache()
    if fs.exists(root):
        old = [f[len(root) + 1:] for f in fs.find(root)]
        for key in sorted((k for k in old if _is_metadata(k)), key=_depth):
            fs.rm_file(f"{root}/{key}")
        fs.invalidate_cache()
        if fs.exists(root):
            fs.rm(root, recursive=True)
    new = [f[len(tmp) + 1:] for f in fs.find(tmp)]
    data = [k for k in new if not _is_metadata(k)]
    if data:
        fs.copy([f"{tmp}/{k}" for k in data], [f"{root}/{k}" for k in data])
    for key in sorted((k for k in new if _is_metadata(k)), key=_depth, reverse=True):
        fs.copy([f"{tmp}/{key}"], [f"{root}/{key}"])
    fs.rm_file(_journal_path(root))
    fs.invalidate_cache()
    if fs.exists(tmp):
        fs.rm(tmp, recursive=True)


def _remove_stale_remote(fs: Any, parent: str, name: str, keep: str | None) -> list[str]:
    """Remove the temporary prefixes (and probes) of the store ``name`` in ``parent`` left by killed writers of this
    host (the rule of :func:`remove_stale_tmp`), except ``keep`` (the prefix a commit record names)."""
    fs.invalidate_cache()
    try:
        entries = fs.ls(parent, detail=False)
    except (FileNotFoundError, OSError):
        return []
    removed = []
    for path in entries:
        path = path.rstrip("/")
        m = _TMP_RE.match(path.rpartition("/")[2]) or _PROBE_RE.match(path.rpartition("/")[2])
        if m is None or m["name"] != name or m["host"] != _HOST or path == keep:
            continue
        pid = int(m["pid"])
        if pid == os.getpid() or _process_alive(pid):
            continue
        fs.rm(path, recursive=True)
        removed.append(fs.unstrip_protocol(path))
    return removed


def _atomic_write_remote(
    url: str, write: Callable[[Any], None], *, what: str, storage_options: dict | None = None,
    before_commit: Callable[[], None] | None = None,
) -> None:
    """THE atomic write of a remote store: ``write(store)`` fills a zarr store on a temporary sibling prefix, a
    commit record makes it the store at ``url``, and the copy into place follows (see the module docstring)."""
    fs, root = _url_fs(url, storage_options)
    parent, name = _split_remote(fs, root, what)
    fs.invalidate_cache()
    previous = _committed_tmp(fs, root)  # an interrupted commit's complete store: readers use it until ours
    _remove_stale_remote(fs, parent, name, keep=previous)
    tmp = _tmp_name(parent, name, "tmp")
    try:
        write(_remote_store(fs, tmp, storage_options))
        if before_commit is not None:
            before_commit()
        fs.invalidate_cache()
        if not any(fs.exists(f"{tmp}/{m}") for m in _METADATA):
            raise StorageError(
                message(what, "a written store with root metadata", "a temporary store without zarr.json",
                        "This is a bug in dclust; please report it.")
            )
        record = {"tmp": tmp.rpartition("/")[2], "host": _HOST, "pid": os.getpid(), "time": time.time()}
        fs.pipe_file(_journal_path(root), json.dumps(record).encode())  # THE commit point: one PUT
    except BaseException:
        fs.invalidate_cache()
        if fs.exists(tmp):
            fs.rm(tmp, recursive=True)
        raise
    _roll_forward(fs, root, tmp)
    if previous is not None and fs.exists(previous):
        fs.rm(previous, recursive=True)


def _clean_remote(url: str, storage_options: dict | None) -> list[str]:
    """:func:`clean` on a remote output: finish the commit a dead writer of this host left recorded, remove the
    temporaries of this host's dead writers."""
    fs, root = _url_fs(url, storage_options)
    parent, name = _split_remote(fs, root, "clean")
    fs.invalidate_cache()
    done = []
    journal = _journal_path(root)
    tmp = _committed_tmp(fs, root)
    if tmp is not None:
        record = json.loads(fs.cat_file(journal))
        if record.get("host") == _HOST and not _process_alive(int(record.get("pid", 0))):
            _roll_forward(fs, root, tmp)
            done.append(fs.unstrip_protocol(journal))
            tmp = None
    return done + _remove_stale_remote(fs, parent, name, keep=tmp)


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
    """Raise before anything is written (and before any pass over the data) if ``local`` cannot be written: its
    location is not a writable directory (:func:`check_location`), or it exists and may not (or cannot safely) be
    replaced."""
    check_location(local, what)
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


def check_location(local: str, what: str) -> None:
    """Raise :class:`~dclust.errors.StorageError` unless an output can be created at the local path ``local``.

    The nearest existing ancestor of ``local``'s parent (missing parents are created by the write) must be a
    directory, not a regular file, and dclust must be able to create entries in it. Writability is probed by
    creating and removing an empty temporary directory (``.NAME.tmp-HOST-PID-RANDOM``), which is what the write
    does first: permission bits, read-only mounts, immutable directories and the root user's privileges are then
    all judged by the filesystem itself, not guessed.
    """
    target = local.rstrip(os.sep) or local
    parent = os.path.dirname(target)
    ancestor = parent
    while ancestor and not os.path.lexists(ancestor):
        up = os.path.dirname(ancestor)
        if up == ancestor:
            break
        ancestor = up
    where = f"{what}(path={local!r})"
    if os.path.lexists(ancestor) and not os.path.isdir(ancestor):
        raise StorageError(
            message(where, "an output location inside a directory",
                    f"a path under {ancestor!r}, which is a regular file, not a directory",
                    "Choose an output path whose parent is a directory (or remove that file).")
        )
    probe = _tmp_name(ancestor, os.path.basename(target) or "store", "tmp")
    try:
        os.mkdir(probe)
    except OSError as exc:
        raise StorageError(
            message(where, f"a directory where dclust may create files ({ancestor!r})",
                    f"{exc.strerror or type(exc).__name__} (errno {exc.errno}) when creating a file there",
                    "Make the directory writable (permissions, read-only mount, immutable flag) or choose another "
                    "output path.")
        ) from None
    try:
        os.rmdir(probe)
    except OSError:
        pass


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


#: ``.NAME.tmp-HOST-PID-RANDOM[.ext]``: the temporaries of the writers (``.NAME.old-...``: set-aside outputs)
_TMP_RE = re.compile(r"^\.(?P<name>.+)\.(?P<kind>tmp|old)-(?P<host>[A-Za-z0-9_]+)-(?P<pid>\d+)-[0-9a-f]{12}(\..*)?$")
#: ``.NAME.probe-HOST-PID-RANDOM``: the empty object that :func:`check_remote_location` writes and removes
_PROBE_RE = re.compile(r"^\.(?P<name>.+)\.(?P<kind>probe)-(?P<host>[A-Za-z0-9_]+)-(?P<pid>\d+)-[0-9a-f]{12}$")


def is_temporary(path: str | os.PathLike) -> bool:
    """True if the last component of ``path`` is a temporary (``.NAME.tmp-...``) or set-aside (``.NAME.old-...``)
    name of a dclust writer: never an output."""
    return _TMP_RE.match(os.path.basename(os.fspath(path).rstrip(os.sep))) is not None


def remove_stale_tmp(parent: str, name: str | None = None) -> list[str]:
    """Remove the temporary outputs ``.*.tmp-HOST-PID-*`` in ``parent`` (of the output ``name`` only, when given)
    left by writers of this host that no longer run (a killed driver: nothing was renamed into place, the
    temporary copy is garbage). Every write runs it on the directory it writes into. Temporaries of live
    processes and of other hosts are kept; so are ``.NAME.old-*`` (a previous complete output renamed aside just
    before its replacement came in: data, not garbage). Returns the removed paths."""
    try:
        entries = os.listdir(parent or ".")
    except OSError:
        return []
    removed = []
    for entry in entries:
        m = _TMP_RE.match(entry)
        if m is None or m["kind"] != "tmp" or m["host"] != _HOST or (name is not None and m["name"] != name):
            continue
        pid = int(m["pid"])
        if pid == os.getpid() or _process_alive(pid):
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


def clean(path: str | os.PathLike, *, storage_options: dict | None = None) -> list[str]:
    """Remove the temporaries that killed dclust writers of this host left in a directory.

    Parameters
    ----------
    path : str or os.PathLike
        A directory (its stale temporaries are removed) or an output path such as ``"labels.zarr"`` (the stale
        temporaries of that output, in its parent directory). On an object store (an fsspec URL such as
        ``"s3://bucket/labels.zarr"``: an output path, not a directory) a commit that a killed writer of this
        host left recorded is finished first, then its temporary prefixes are removed.
    storage_options : dict, optional
        Arguments of the fsspec filesystem of a URL (``endpoint_url``, ``key``, ``secret``, ...).

    Returns
    -------
    list of str
        The removed paths. Temporaries of running writers and of other hosts are kept, and so are set-aside
        previous outputs (``.NAME.old-*``).

    Examples
    --------
    >>> import tempfile
    >>> clean(tempfile.mkdtemp())
    []
    """
    options = check_storage_options(storage_options, "clean")
    url, local = _resolve(path, "clean")
    if local is None:
        return _clean_remote(url, options)
    local = local.rstrip(os.sep) or local
    if os.path.isdir(local) and not _is_zarr_dir(local):
        return remove_stale_tmp(local)
    parent = os.path.dirname(local)
    if not os.path.isdir(parent):
        raise StorageError(
            message(f"clean({os.fspath(path)!r})", "an existing directory (or an output path inside one)",
                    "a path whose directory does not exist", "Check the path.")
        )
    return remove_stale_tmp(parent, os.path.basename(local))


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
    suffix: str = "",
) -> None:
    """THE atomic write of a local output: run ``write(tmp)`` (it creates a directory -- a Zarr store -- or a
    file at ``tmp``), then rename ``tmp`` to ``target``.

    ``tmp`` is ``.NAME.tmp-HOST-PID-RANDOM`` + ``suffix`` (a file's extension, for writers that choose the format
    by it) in ``tmp_parent`` (default: ``target``'s parent, which must be on the same filesystem as ``target``);
    stale temporaries of dead writers in that directory are removed first (:func:`remove_stale_tmp`). A file
    replaces an existing file in one rename. An existing directory ``target`` is swapped with the new one in one
    atomic step where the system can (:func:`_exchange`; else renamed aside, replaced, and deleted only after the
    new one is in place). On any failure the temporary is removed and ``target`` keeps its
    previous content.
    """
    parent = tmp_parent or os.path.dirname(target)
    name = os.path.basename(target.rstrip(os.sep)) or "store"
    os.makedirs(parent, exist_ok=True)
    remove_stale_tmp(parent)
    tmp = _tmp_name(parent, name, "tmp") + suffix
    old = None
    try:
        write(tmp)
        if before_commit is not None:
            before_commit()
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if os.path.isdir(tmp) and os.path.lexists(target) and _exchange(tmp, target):
            old = tmp  # one atomic swap: ``target`` holds the new store, ``tmp`` the previous one
        else:
            if os.path.isdir(tmp) and os.path.lexists(target):  # no atomic swap here: two renames
                old = _tmp_name(parent, name, "old")
                os.replace(target, old)
            try:
                os.replace(tmp, target)
            except BaseException:
                if old is not None:
                    os.replace(old, target)
                raise
    except BaseException:
        if os.path.isdir(tmp) and not os.path.islink(tmp):
            _remove_tmp(tmp)
        elif os.path.lexists(tmp):
            os.remove(tmp)
        raise
    if old is not None:
        if os.path.isdir(old) and not os.path.islink(old):
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.remove(old)


#: ``renameat2(2)``'s flag that swaps two paths atomically (Linux >= 3.15, glibc >= 2.28), and "relative to the
#: working directory" for its directory descriptors.
_RENAME_EXCHANGE, _AT_FDCWD = 2, -100
_renameat2: list = []


def _exchange(a: str, b: str) -> bool:
    """Swap the directory entries ``a`` and ``b`` in one atomic step (``renameat2(RENAME_EXCHANGE)``); False when
    this system or filesystem cannot (the caller then renames twice). With the swap, a replaced output is never
    missing: a reader, or a writer killed at any moment, sees the previous store or the new one."""
    if not _renameat2:
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            fn = libc.renameat2
            fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
            _renameat2.append(fn)
        except (OSError, AttributeError):
            _renameat2.append(None)
    fn = _renameat2[0]
    if fn is None:
        return False
    return fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0


def write_bytes(data: bytes, target: str) -> None:
    """Write ``data`` to the local file ``target`` atomically (:func:`_atomic_write`): a crash leaves the previous
    content (see :func:`check_output` for an example)."""

    def write(tmp: str) -> None:
        with open(tmp, "wb") as fh:
            fh.write(data)

    _atomic_write(target, write)


def check_output(path: str | os.PathLike, overwrite: bool, what: str = "output") -> str:
    """Absolute local path of a new output file (or Zarr store) in an existing directory, checked before any work:
    the directory exists and is writable (:func:`check_location`), and an existing ``path`` is replaced only with
    ``overwrite`` (and only if it is a file or a Zarr store).

    Examples
    --------
    >>> import os, tempfile, dclust
    >>> path = dclust.io.check_output(os.path.join(tempfile.mkdtemp(), "report.json"), overwrite=False)
    >>> dclust.io.write_bytes(b"{}", path)
    >>> try:
    ...     dclust.io.check_output(path, overwrite=False)
    ... except dclust.errors.StorageError as exc:
    ...     print(type(exc).__name__, "already exists" in str(exc))
    StorageError True
    """
    local = os.path.abspath(os.fspath(path))
    if os.path.lexists(local):
        if not overwrite:
            raise StorageError(message(f"{what} {os.fspath(path)!r}", "a path where nothing exists yet, or "
                                       "--overwrite", "a path that already exists",
                                       "Pass --overwrite (overwrite=True) to replace it, or choose another path."))
        if os.path.isdir(local) and not _is_zarr_dir(local):
            raise StorageError(message(f"{what} {os.fspath(path)!r}", "a file or Zarr store to replace",
                                       "a directory that is not a Zarr store", "Remove it or choose another path."))
    parent = os.path.dirname(local)
    if not os.path.isdir(parent):
        check_location(local, what)  # a path under a regular file says so
        raise StorageError(message(f"{what} {os.fspath(path)!r}", "a path in an existing directory",
                                   f"a missing directory {parent!r}", "Create the directory first."))
    check_location(local, what)
    return local


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

