"""Checkpoints of long fits: a driver that dies resumes where it stopped and ends with the identical model.

Format 2. A checkpoint is one Zarr v3 group (a local directory), replaced atomically after every iteration::

    CK/
      zarr.json                  attributes (JSON, no pickle):
                                   {"dclust_checkpoint": {"format": 2, "dclust_version": "...",
                                    "estimator": "KMeans", "params": {...}, "unsaved_params": {...},
                                    "fingerprint": {...}, "state": {...}},
                                    ...and, when the state includes the model (a finished fit, a stream after a
                                    batch), the keys of a dclust.save model: "dclust_format", "params",
                                    "attributes", ...}
      checkpoint/params/<name>   large array-valued constructor parameters (e.g. KMeans(init=array))
      checkpoint/state/a<i>      the large arrays of the loop state (small ones are inline in the JSON)
      params/ attributes/        the model's arrays (as dclust.save writes them), when included

So a finished fit's checkpoint (and every stream checkpoint) is also a model: ``dclust.load(CK)`` reads it.
In ``state`` every value is JSON. Arrays of up to 4096 finite values are inline, ``{"__dclust__":
"inline_array", "shape": [...], "dtype": "<f8", "data": [...]}`` (exact: floats are written by their shortest
round-trip repr), so the state of a k-means iteration is a single JSON file; larger ones are Zarr arrays tagged
``{"__dclust__": "array", "name": "a3", "shape": [...], "dtype": "<f8"}`` (``"dask_array"`` adds ``"chunks"``:
restored as a dask array with those chunks). Other tags are those of :mod:`dclust._store._models` (``float`` for
nan/inf, ``tuple``, ``str_array``).

Durability (ARCHITECTURE rule 10): :meth:`Checkpointer.save` writes through ``dclust._store._atomic._atomic_write``:
the new state goes to ``.CK.tmp-<random>`` next to ``CK`` and is renamed into place once complete; the previous
one is renamed aside to ``.CK.old-<random>`` just before and deleted just after. A crash in between leaves the
previous complete state as ``.CK.old-*``: :meth:`Checkpointer.resume` renames it back. On object stores (an fsspec
URL, or an fsspec mapper that carries the ``storage_options``) each save is committed by a commit record and
copied into place (``dclust._store._atomic``): a resume reads the last committed state, whenever the writer died.

Validation on resume (before any output is written): the format version (newer, or older than the estimator's
``_checkpoint_since``: :class:`FormatVersionError`),
the estimator, its parameters (all but ``checkpoint`` and ``persist``, which do not change the result), the
input's fingerprint (shape, dtype, row chunks, whether weighted, a hash of its first rows) and, at the first pass
over the data, the one-cluster statistics of the whole input (weight, mean, scatter) recorded by the
interrupted run -- so different data of the same shape is refused without an extra pass. The estimator checks
the shapes of the arrays it reads back (:meth:`Checkpointer.reading` turns a damaged state into
:class:`StorageError`).

The pattern, for an iterative estimator (a few lines; see ``KMeans.fit`` and ``DPMeans.fit``)::

    ck = self._checkpointer(arr, w)            # a no-op object when checkpoint=None: costs nothing
    state = ck.resume()                        # None: start afresh; else the validated state dict
    if state is not None and state["phase"] == "done":
        ck.restore_attributes(self, state)     # a finished fit: the same model, no pass over the data
        return self
    with ck.reading():                         # KeyError/TypeError/... on a damaged state -> StorageError
        ...unpack state, check shapes with ck.require_shape(...)
    ... first pass: ck.check_content(*stats.total())   # compares with the interrupted run's data (or records it)
    ... every iteration, BEFORE emitting its progress event:
        ck.save({"phase": "iter", "iteration": i, "centres": C, "rng": rng_state(rng), ...})
    ck.save_done(self)                         # the final model: a rerun returns it at once

All randomness after a checkpoint must come from saved state (a seed, or ``rng_state(rng)``), never from a live
generator, so that the resumed run is identical bit for bit. Stream estimators save their whole model after each
batch (``dclust.stream._checkpoint``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import warnings
from typing import Any, Iterator

import dask.array as da
import numpy as np
import zarr

from ..errors import CorruptStoreError, DclustError, FormatVersionError, StorageError, message
from ._models import _TAG, _Unsaveable, _decode, _encode, _encode_or_raise, _version, open_group_read
from ._atomic import (
    _atomic_write, _atomic_write_remote, _remote_exists, _resolve, check_location, check_remote_location,
    committed_url, is_temporary, remove_stale_tmp, storage_location,
)
from ._zarr import read_all

__all__ = ["Checkpointer", "data_fingerprint", "graph_fingerprint", "FORMAT_VERSION"]

#: The newest checkpoint format this dclust writes and reads. An estimator whose saved state changed sets
#: ``_checkpoint_since`` (the oldest format it reads; default 1) and older checkpoints of it are refused. Format 2:
#: DPMeans, RDPMeans and BPMeans save their loop state as the fit loop does (``{"loop": {"iteration", "state"}}``).
FORMAT_VERSION = 2
#: Parameters that do not change the result (a resume may change them).
_FREE_PARAMS = ("checkpoint", "persist")
#: Arrays of at most this many elements are stored inline in the JSON state.
_INLINE = 4096


# --------------------------------------------------------------------------------------------------------------
# helpers for estimators
# --------------------------------------------------------------------------------------------------------------


def data_fingerprint(X: da.Array, w: Any = None, head_rows: int = 8) -> dict[str, Any]:
    """Shape, dtype, row chunks, weighted or not, and a SHA-256 of the first ``head_rows`` rows (and weights).

    Reads only the first row chunk (no pass over the data).
    """
    n = int(X.shape[0])
    h = hashlib.sha256()
    if n:
        h.update(np.ascontiguousarray(np.asarray(X[: min(head_rows, n)].compute(), dtype=np.float64)).tobytes())
        if w is not None:
            h.update(np.ascontiguousarray(np.asarray(w[: min(head_rows, n)].compute(), dtype=np.float64)).tobytes())
    return {
        "shape": [int(s) for s in X.shape],
        "dtype": str(np.dtype(X.dtype)),
        "row_chunks": [int(c) for c in X.chunks[0]],
        "weighted": w is not None,
        "head_sha256": h.hexdigest(),
    }


def graph_fingerprint(graph: Any) -> dict[str, Any]:
    """What identifies a :class:`dclust.ConstraintGraph` (or None: no links): its size, numbers of links and a
    SHA-256 of its pairs, signs and weights -- put in a checkpoint's fingerprint by fits with side information."""
    if graph is None:
        return {"n_links": 0}
    a, b, s = graph.pairs()
    h = hashlib.sha256()
    for x in (a.astype(np.int64), b.astype(np.int64), s.astype(np.int8), graph.weights().astype(np.float64)):
        h.update(np.ascontiguousarray(x).tobytes())
    return {"n_samples": int(graph.n_samples), "n_links": int(a.size), "n_must": int((s > 0).sum()),
            "pairs_sha256": h.hexdigest()}


# --------------------------------------------------------------------------------------------------------------
# state codec: JSON with arrays in Zarr
# --------------------------------------------------------------------------------------------------------------


def _encode_state(value: Any, arrays: dict[str, Any]) -> Any:
    if isinstance(value, da.Array) and value.dtype.kind in "biuf":
        x = np.asarray(value.compute())
        name = f"a{len(arrays)}"
        arrays[name] = x
        return {_TAG: "dask_array", "name": name, "shape": list(x.shape), "dtype": x.dtype.str,
                "chunks": [list(map(int, c)) for c in value.chunks]}
    if isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
        if value.size <= _INLINE and (value.dtype.kind != "f" or np.isfinite(value).all()):
            # small arrays go inline: exact in JSON (floats by their shortest repr), and a Zarr array costs
            # ~10-20 ms to create -- the checkpoint of a k-means iteration is then one JSON file
            return {_TAG: "inline_array", "shape": list(value.shape), "dtype": value.dtype.str,
                    "data": value.ravel().tolist()}
        name = f"a{len(arrays)}"
        arrays[name] = value
        return {_TAG: "array", "name": name, "shape": list(value.shape), "dtype": value.dtype.str}
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value) or _TAG in value:
            raise _Unsaveable("dict with non-str keys (or a reserved key)")
        return {k: _encode_state(v, arrays) for k, v in value.items()}
    if isinstance(value, list):
        return [_encode_state(v, arrays) for v in value]
    if isinstance(value, tuple):
        return {_TAG: "tuple", "items": [_encode_state(v, arrays) for v in value]}
    return _encode(value)


def _decode_state(value: Any, group: Any, shown: str) -> Any:
    if isinstance(value, list):
        return [_decode_state(v, group, shown) for v in value]
    if not isinstance(value, dict):
        return value
    tag = value.get(_TAG)
    if tag is None:
        return {k: _decode_state(v, group, shown) for k, v in value.items()}
    if tag == "tuple":
        return tuple(_decode_state(v, group, shown) for v in value.get("items", []))
    if tag == "inline_array":
        try:
            dtype = np.dtype(value["dtype"])
            if dtype.kind not in "biuf":
                raise TypeError(f"dtype {dtype}")
            return np.array(value["data"], dtype=dtype).reshape([int(v) for v in value["shape"]])
        except (KeyError, TypeError, ValueError) as exc:
            raise _damaged(shown, "an inline array with a numeric dtype, a shape and its data",
                           f"{type(exc).__name__}: {exc}") from None
    if tag in ("array", "dask_array"):
        name = value.get("name")
        try:
            node = group[f"checkpoint/state/{name}"]
        except KeyError:
            node = None
        if not isinstance(node, zarr.Array):
            raise _damaged(shown, f"the array checkpoint/state/{name}", "none")
        if list(node.shape) != value.get("shape") or node.dtype.str != value.get("dtype"):
            raise _damaged(shown, f"state/{name} of shape {value.get('shape')} and dtype {value.get('dtype')}",
                           f"shape {list(node.shape)} and dtype {node.dtype.str}")
        x = read_all(node, f"{shown.strip(chr(39))}, checkpoint/state/{name}")
        if tag == "dask_array":
            chunks = tuple(tuple(c) for c in value.get("chunks", []))
            try:
                return da.from_array(x, chunks=chunks)
            except Exception as exc:  # noqa: BLE001 - chunks that do not fit the shape
                raise _damaged(shown, f"chunks of state/{name} that fit its shape", repr(chunks)) from exc
        return x
    try:
        return _decode(value)
    except StorageError as exc:
        raise _damaged(shown, "known value tags", str(exc)) from None


# --------------------------------------------------------------------------------------------------------------
# errors
# --------------------------------------------------------------------------------------------------------------


def _damaged(shown: str, expected: str, received: str) -> StorageError:
    return StorageError(
        message(f"checkpoint {shown}", expected, received,
                "The checkpoint is damaged or was not written by dclust; remove it (or pass another checkpoint "
                "path) to start afresh.")
    )


def _other_run(shown: str, expected: str, received: str) -> StorageError:
    return StorageError(
        message(f"checkpoint {shown}", expected, received,
                "It belongs to another fit: pass the same estimator, parameters and data to resume it, or another "
                "checkpoint path (or remove this one) to start afresh.")
    )


# --------------------------------------------------------------------------------------------------------------
# the checkpointer
# --------------------------------------------------------------------------------------------------------------


class Checkpointer:
    """Read, validate and atomically rewrite the checkpoint of one fit (see the module docstring).

    Parameters
    ----------
    path : str, os.PathLike or fsspec.FSMap
        The checkpoint store: a local path (or ``file://`` URL), an fsspec URL (``s3://bucket/ck.zarr``: the
        backend's default configuration, e.g. the ``AWS_*`` environment), or an fsspec mapper
        (``fsspec.get_mapper(url, **storage_options)``), which carries the filesystem's ``storage_options``.
        Written at the first :meth:`save`.
    estimator : BaseEstimator
        The estimator being fitted: its class name and parameters are recorded and checked on resume.
    fingerprint : dict, optional
        What identifies the input (:func:`data_fingerprint`); checked on resume. None for stream estimators fed
        batch by batch, whose state does not depend on one data set.
    """

    active = True

    def __init__(self, path: Any, estimator: Any, fingerprint: dict[str, Any] | None = None) -> None:
        where = f"{type(estimator).__name__}(checkpoint=...)"
        location, self.options = storage_location(path)
        url, local = _resolve(location, "checkpoint")
        self.remote = local is None
        if self.remote:
            self.path = url
            check_remote_location(url, where, self.options)  # before any pass over the data
        else:
            self.path = local.rstrip(os.sep) or local
            check_location(self.path, where)  # before any pass over the data
        self.shown = repr(location)
        self.estimator = estimator
        self.name = type(estimator).__name__
        self.fingerprint = dict(fingerprint) if fingerprint is not None else None
        self.content: list[float] | None = None
        self._params, self._param_arrays, self._unsaved = self._encode_params(estimator)

    # ---------------------------------------------------------------------------------------------- params
    def _encode_params(self, estimator: Any) -> tuple[dict, dict, dict]:
        params = {k: v for k, v in estimator.get_params().items() if k not in _FREE_PARAMS}
        entries: dict[str, Any] = {}
        arrays: dict[str, np.ndarray] = {}
        unsaved: dict[str, str] = {}
        for k, v in params.items():
            if isinstance(v, np.random.Generator):
                entries[k], unsaved[k] = None, "numpy.random.Generator"
            elif isinstance(v, np.ndarray) and v.dtype.kind in "biuf":
                entries[k] = _encode_state(v, {})  # inline when small: compared as JSON
                if entries[k][_TAG] == "array":
                    arrays[k] = np.ascontiguousarray(v)
                    entries[k] = {_TAG: "array", "shape": list(v.shape), "dtype": v.dtype.str}
            else:
                entries[k] = _encode_or_raise(
                    v, f"{self.name}(checkpoint=...): parameter {k!r}",
                    "None, bool, int, float, str, numeric arrays, or lists/tuples/dicts of those",
                    "Pass that parameter as a plain value to use a checkpoint.")
        return entries, arrays, unsaved

    # ---------------------------------------------------------------------------------------------- resume
    def _siblings(self, kind: str) -> list[str]:
        parent, name = os.path.dirname(self.path), os.path.basename(self.path)
        if not os.path.isdir(parent):
            return []
        prefix = f".{name}.{kind}-"
        return [os.path.join(parent, e) for e in os.listdir(parent) if e.startswith(prefix)]

    def _recover(self) -> None:
        """After a crash between the two renames of a save: put the previous complete state back in place."""
        if os.path.lexists(self.path):
            return
        olds = [p for p in self._siblings("old") if os.path.isfile(os.path.join(p, "zarr.json"))]
        if olds:
            os.replace(max(olds, key=os.path.getmtime), self.path)

    def resume(self) -> dict[str, Any] | None:
        """The validated state of the checkpoint, or None when there is none yet (start afresh).

        Raises
        ------
        FormatVersionError
            Written by a newer dclust.
        StorageError
            Damaged, not a checkpoint, or of another estimator, parameters or input.
        """
        if self.remote:  # a commit under way or interrupted: the recorded (complete) state is the checkpoint
            if not _remote_exists(self.path, self.options):
                return None
            store = committed_url(self.path, self.options)
        else:
            self._recover()
            remove_stale_tmp(os.path.dirname(self.path))  # temporaries of killed saves (this host's dead writers)
            for tmp in self._siblings("tmp"):  # and of writers before host/pid names (this fit owns the checkpoint)
                if not is_temporary(tmp):
                    shutil.rmtree(tmp, ignore_errors=True)
            if not os.path.lexists(self.path):
                return None
            if os.path.islink(self.path) or not os.path.isdir(self.path):
                raise _damaged(self.shown, "a checkpoint directory (a Zarr group)", "a path that is not a directory")
            store = self.path
        try:
            group = open_group_read(store, self.options)
            attrs = dict(group.attrs)
        except Exception as exc:  # noqa: BLE001 - zarr raises many types (JSONDecodeError, KeyError, ...)
            raise _damaged(self.shown, "a readable Zarr group with JSON attributes",
                           f"{type(exc).__name__}: {exc}") from exc
        ck = attrs.get("dclust_checkpoint")
        if not isinstance(ck, dict):
            raise _damaged(self.shown, "a 'dclust_checkpoint' attribute (an object)",
                           "a Zarr group without one" if ck is None else repr(type(ck).__name__))
        fmt = ck.get("format")
        if isinstance(fmt, bool) or not isinstance(fmt, int) or fmt < 1:
            raise _damaged(self.shown, "an integer checkpoint format >= 1", repr(fmt))
        if fmt > FORMAT_VERSION:
            raise FormatVersionError(
                message(f"checkpoint {self.shown}", f"checkpoint format {FORMAT_VERSION} (what this dclust reads)",
                        f"format {fmt}, written by a newer dclust ({ck.get('dclust_version', 'unknown')})",
                        "Resume it with that dclust version, or remove the checkpoint to start afresh.")
            )
        if ck.get("estimator") != self.name:
            raise _other_run(self.shown, f"a checkpoint of {self.name}", f"one of {ck.get('estimator')!r}")
        since = getattr(self.estimator, "_checkpoint_since", 1)
        if fmt < since:
            raise FormatVersionError(
                message(f"checkpoint {self.shown}", f"a {self.name} checkpoint of format {since} or newer",
                        f"format {fmt}, written by an older dclust ({ck.get('dclust_version', 'unknown')}) whose "
                        f"{self.name} saved another state", "Remove the checkpoint to start afresh, or resume it "
                        "with the dclust that wrote it.")
            )
        self._check_params(group, ck.get("params"), ck.get("unsaved_params"))
        self._check_fingerprint(ck.get("fingerprint"))
        state = ck.get("state")
        if not isinstance(state, dict):
            raise _damaged(self.shown, "a 'state' object", repr(type(state).__name__))
        state = _decode_state(state, group, self.shown)
        if "attributes" in attrs:  # the model is included: its learned attributes, read as dclust.load does
            state["attributes"] = self._model_attributes()
        return state

    def _check_fingerprint(self, saved: Any) -> None:
        if not isinstance(saved, dict):
            raise _damaged(self.shown, "a 'fingerprint' object", repr(type(saved).__name__))
        ours = {k: v for k, v in (self.fingerprint or {}).items() if k != "content"}
        theirs = {k: v for k, v in saved.items() if k != "content"}
        if ours != theirs:
            diff = [f"{k}={theirs.get(k)!r} (now {ours.get(k)!r})" for k in sorted(set(ours) | set(theirs))
                    if ours.get(k) != theirs.get(k)]
            raise _other_run(self.shown, "the input of the interrupted fit", "other data: " + "; ".join(diff))
        content = saved.get("content")
        if content is not None:
            if not (isinstance(content, list) and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                      for v in content)):
                raise _damaged(self.shown, "a list of numbers as fingerprint content", repr(content))
            self.content = [float(v) for v in content]

    def _model_attributes(self) -> dict[str, Any]:
        from ._models import load

        try:
            model = load(self.path, storage_options=self.options)
        except (FormatVersionError, CorruptStoreError):
            raise
        except StorageError as exc:
            raise _damaged(self.shown, "a readable model in the checkpoint", str(exc)) from exc
        if type(model).__name__ != self.name:
            raise _damaged(self.shown, f"a {self.name} model", f"a {type(model).__name__}")
        out = {}
        for k, v in learned_attributes(model).items():  # dask arrays read from CK, which the next save replaces
            out[k] = da.from_array(np.asarray(v.compute()), chunks=v.chunks) if isinstance(v, da.Array) else v
        return out

    def _check_params(self, group: Any, saved: Any, unsaved: Any) -> None:
        if not isinstance(saved, dict):
            raise _damaged(self.shown, "a 'params' object", repr(type(saved).__name__))
        diff = []
        for k in sorted(set(saved) | set(self._params)):
            ours, theirs = self._params.get(k, "<absent>"), saved.get(k, "<absent>")
            if k in self._param_arrays and ours == theirs:
                try:
                    stored = read_all(group[f"checkpoint/params/{k}"], f"{self.path}, checkpoint/params/{k}")
                except CorruptStoreError:
                    raise
                except Exception:  # noqa: BLE001 - missing or unreadable
                    stored = None
                if stored is None or not np.array_equal(stored, self._param_arrays[k]):
                    diff.append(f"{k}=<another array>")
            elif ours != theirs:
                arrays = [isinstance(v, dict) and v.get(_TAG) in ("inline_array", "array") for v in (ours, theirs)]
                diff.append(f"{k}=<another array>" if all(arrays) else f"{k}={theirs!r} (now {ours!r})")
        if (unsaved or {}) != self._unsaved:
            diff.append(f"unsaved parameters {unsaved!r} (now {self._unsaved!r})")
        if diff:
            raise _other_run(self.shown, f"the parameters of this {self.name}", "other ones: " + "; ".join(diff))

    @contextlib.contextmanager
    def reading(self) -> Iterator[None]:
        """Turn the errors of unpacking a damaged (but well-formed) state into :class:`StorageError`."""
        try:
            yield
        except DclustError:
            raise
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
            raise _damaged(self.shown, f"the state of a {self.name} fit", f"{type(exc).__name__}: {exc}") from exc

    def require_shape(self, what: str, value: Any, shape: tuple) -> np.ndarray:
        """``value`` as an array of ``shape`` (None entries match any size), else :class:`StorageError`."""
        arr = np.asarray(value)
        ok = arr.ndim == len(shape) and all(s is None or s == a for s, a in zip(shape, arr.shape))
        if not ok:
            shown = "(" + ", ".join("any" if s is None else str(s) for s in shape) + ")"
            raise _damaged(self.shown, f"{what} of shape {shown}", f"shape {arr.shape}")
        return arr

    def check_content(self, weight: float, mean: np.ndarray, scatter: float) -> None:
        """Compare the input's one-cluster statistics with the interrupted run's (or record them).

        Equal data and chunking give equal sums up to the merge order of the clusters (relative 1e-8 allowed).
        """
        values = [float(weight), float(scatter)] + [float(v) for v in np.ravel(mean)]
        if self.content is None:
            self.content = values
            return
        old = np.asarray(self.content)
        new = np.asarray(values)
        spread = np.sqrt(max(abs(old[1]), 0.0) / max(abs(old[0]), 1e-300)) if old.size > 1 else 0.0
        if old.shape != new.shape:
            ok = False
        else:
            tol = np.r_[1e-8 * abs(old[0]), 1e-8 * abs(old[1]), np.full(old.size - 2, 1e-8 * spread)]
            ok = bool((np.abs(old - new) <= tol + 1e-300).all())
        if not ok:
            raise _other_run(self.shown, "the data of the interrupted fit (its total weight, mean and scatter)",
                             f"other data (weight {new[0]:.6g}, scatter {new[1]:.6g}; recorded {old[0]:.6g}, "
                             f"{old[1]:.6g})")

    # ---------------------------------------------------------------------------------------------- save
    def save(self, state: dict[str, Any], model: Any = None) -> None:
        """Replace the checkpoint by ``state`` (and ``model``'s parameters and learned attributes), atomically."""
        from ._models import _collect, _write_model

        arrays: dict[str, Any] = {}
        try:
            encoded = _encode_state(state, arrays)
        except _Unsaveable as exc:  # a dclust bug, never user input
            raise DclustError(f"checkpoint of {self.name}: a state value of type {exc.kind} cannot be saved") from None
        fingerprint = dict(self.fingerprint or {})
        if self.content is not None:
            fingerprint["content"] = self.content
        doc: dict[str, Any] = {}
        sections: dict[str, dict[str, Any]] = {}
        if model is not None:
            with warnings.catch_warnings():  # a Generator random_state: said once by the fit, not every save
                warnings.simplefilter("ignore")
                doc, sections = _collect(model)
        doc = dict(doc)
        doc["dclust_checkpoint"] = {
            "format": FORMAT_VERSION, "dclust_version": _version(), "estimator": self.name, "params": self._params,
            "unsaved_params": self._unsaved, "fingerprint": fingerprint, "state": encoded,
        }
        sections = {**sections, "checkpoint/params": self._param_arrays, "checkpoint/state": arrays}
        if self.remote:  # the commit of an object store (dclust._store._atomic)
            _atomic_write_remote(self.path, lambda store: _write_model(store, doc, sections, None),
                                 what=f"{self.name}(checkpoint=...)", storage_options=self.options)
            return
        if any(sections.values()):
            write = lambda tmp: _write_model(tmp, doc, sections, os.path.join(tmp, "zarr.json"))  # noqa: E731
        else:  # the usual iteration state: one JSON document, the Zarr v3 metadata of a group (zarr reads it)
            text = json.dumps({"zarr_format": 3, "node_type": "group", "attributes": doc}, allow_nan=False)
            write = lambda tmp: _write_group_json(tmp, text)  # noqa: E731
        _atomic_write(self.path, write)

    # ---------------------------------------------------------------------------------------------- models
    def save_done(self, model: Any, **extra: Any) -> None:
        """Save the final model (and ``extra`` private state): a rerun returns it; ``dclust.load`` reads it."""
        self.save({"phase": "done", "extra": extra}, model=model)

    def restore_attributes(self, model: Any, state: dict[str, Any]) -> dict[str, Any]:
        """Set the learned attributes saved with the model (:meth:`save_done`, stream batches) on ``model``;
        returns the ``extra`` entries."""
        with self.reading():
            attrs = state["attributes"]
            if not isinstance(attrs, dict) or not all(k.endswith("_") and not k.startswith("_") for k in attrs):
                raise TypeError("attributes must be a mapping of learned attribute names (ending in '_')")
            for k, v in attrs.items():
                setattr(model, k, v)
            return dict(state.get("extra") or {})


def _write_group_json(tmp: str, text: str) -> None:
    os.makedirs(tmp)
    with open(os.path.join(tmp, "zarr.json"), "w", encoding="utf-8") as fh:
        fh.write(text)


def learned_attributes(model: Any) -> dict[str, Any]:
    """The learned attributes :func:`dclust.save` would store (``name_`` in ``vars``, not transient)."""
    transient = set(getattr(model, "_transient_attributes", ()))
    return {k: v for k, v in vars(model).items() if k.endswith("_") and not k.startswith("_") and k not in transient}
