"""Zarr persistence of constraint graphs: canonical pairs plus JSON attributes, written atomically.

Layout (a Zarr v3 group): attributes ``{"dclust_constraints": FORMAT, "n_samples", "chunks", "n_must",
"n_cannot", "weighted"}`` and three 1-D arrays of one length: ``i`` and ``j`` (int64 rows, ``i < j``) and
``value`` (float64: ``+w`` must-link, ``-w`` cannot-link).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import zarr

from ..errors import FormatVersionError, StorageError, message
from ._atomic import (
    _atomic_write, _atomic_write_remote, _check_new_target, _local_only, _remote_exists, _resolve,
    check_remote_location, check_storage_options, committed_url,
)
from ._models import open_group_read
from ._zarr import create_array, read_all

__all__ = ["write_constraints", "read_constraints", "FORMAT"]

FORMAT = 1
_CHUNK = 1 << 20  # links per Zarr chunk


def _write_group(store: str, doc: dict, arrays: dict[str, np.ndarray], overwrite: bool) -> None:
    zarr.create_group(store=store, attributes={"dclust_constraints": FORMAT, **doc}, zarr_format=3,
                      overwrite=overwrite)
    for name, values in arrays.items():
        create_array(store, name, data=np.ascontiguousarray(values), chunks=(max(1, min(_CHUNK, values.size)),))


def write_constraints(
    path: str | os.PathLike, doc: dict[str, Any], i: np.ndarray, j: np.ndarray, value: np.ndarray, *,
    overwrite: bool = False, storage_options: dict | None = None,
) -> str:
    """Write canonical pairs and their attributes ``doc`` to a new Zarr group at ``path`` (atomic: temporary
    sibling then rename, or on object stores the commit of :mod:`._atomic`). Returns the store's location."""
    what = "ConstraintGraph.to_zarr"
    options = check_storage_options(storage_options, what)
    arrays = {"i": np.asarray(i, np.int64), "j": np.asarray(j, np.int64), "value": np.asarray(value, np.float64)}
    url, local = _resolve(path, what)
    if local is None:
        if _remote_exists(url, options) and not overwrite:
            raise StorageError(message(f"{what}(path={url!r})", "a new location, or overwrite=True",
                                       "a location that already exists", "Pass overwrite=True or choose another path."))
        check_remote_location(url, what, options)
        _atomic_write_remote(url, lambda tmp: _write_group(tmp, doc, arrays, overwrite=False), what=what,
                             storage_options=options)
        return url
    _local_only(options, what, local)
    _check_new_target(local, overwrite, "ConstraintGraph.to_zarr")
    _atomic_write(local, lambda tmp: _write_group(tmp, doc, arrays, overwrite=False))
    return local


def read_constraints(
    path: str | os.PathLike, *, storage_options: dict | None = None
) -> tuple[dict[str, Any], np.ndarray, np.ndarray, np.ndarray]:
    """``(attributes, i, j, value)`` of a store written by :func:`write_constraints`."""
    options = check_storage_options(storage_options, "ConstraintGraph.from_zarr")
    url, local = _resolve(path, "ConstraintGraph.from_zarr")
    shown = repr(os.fspath(path))
    if local is not None:
        _local_only(options, "ConstraintGraph.from_zarr", local)
    if (not os.path.exists(local)) if local is not None else not _remote_exists(url, options):
        raise StorageError(message(f"ConstraintGraph.from_zarr({shown})", "an existing constraint store",
                                   "a path that does not exist", "Check the path (written by G.to_zarr)."))
    try:
        group = open_group_read(url if local is not None else committed_url(url, options), options)
    except Exception as exc:  # noqa: BLE001 - zarr raises several types for "not a group"
        raise StorageError(message(f"ConstraintGraph.from_zarr({shown})", "a Zarr group written by G.to_zarr",
                                   "something that is not a Zarr group", "Check the path.")) from exc
    doc = dict(group.attrs)
    fmt = doc.get("dclust_constraints")
    if fmt is None or not all(k in group for k in ("i", "j", "value")):
        raise StorageError(message(f"ConstraintGraph.from_zarr({shown})", "a constraint store (G.to_zarr)",
                                   "a Zarr group without the constraint attributes or arrays",
                                   "Point at a store written by ConstraintGraph.to_zarr."))
    if fmt != FORMAT:
        raise FormatVersionError(message(f"ConstraintGraph.from_zarr({shown})", f"format {FORMAT}", f"format {fmt}",
                                         "Re-write the graph with this version of dclust."))
    i, j, value = (read_all(group[name], f"{os.fspath(path)}, {name}") for name in ("i", "j", "value"))
    if not (i.shape == j.shape == value.shape) or i.ndim != 1:
        raise StorageError(message(f"ConstraintGraph.from_zarr({shown})", "arrays i, j, value of one length",
                                   f"shapes {i.shape}, {j.shape}, {value.shape}", "The store is corrupt; re-write it."))
    return doc, i.astype(np.int64), j.astype(np.int64), value.astype(np.float64)
