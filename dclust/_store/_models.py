"""Saving and loading fitted estimators as Zarr groups: JSON attributes plus arrays. Never pickle.

Format 1 (one Zarr v3 group)::

    model.zarr/
      zarr.json          attributes: {"dclust_format": 1, "dclust_version": "0.1.0", "estimator": "KMeans",
                                      "params": {...}, "attributes": {...}, "unsaved_params": {...}}
      params/<name>      numpy-array constructor parameters (e.g. init=ndarray)
      attributes/<name>  numpy (and dask) learned attributes (e.g. cluster_centers_)

In ``params`` / ``attributes`` every value is plain JSON except tagged objects ``{"__dclust__": kind, ...}``:
``"array"`` (the value is the array ``params/<name>`` or ``attributes/<name>``), ``"dask_array"`` (same, loaded
lazily), ``"float"`` (``"value"``: ``"nan"``, ``"inf"`` or ``"-inf"``), ``"tuple"`` (``"items"``: a list), and
``"str_array"`` (``"dtype"``, ``"items"``: nested lists of a numpy unicode array). ``unsaved_params`` maps the
name of a parameter that could not be stored (a ``numpy.random.Generator`` random_state) to the type it had; it
is loaded as None.
"""

from __future__ import annotations

import json
import math
import numbers
import os
import warnings
from typing import Any

import dask.array as da
import numpy as np
import zarr

from .._version import __version__
from ..errors import DclustError, FormatVersionError, StorageError, message
from ._atomic import (
    _atomic_write, _atomic_write_remote, _check_new_target, _remote_exists, _resolve, check_remote_location,
    _local_only, check_storage_options, committed_url, is_mapper, storage_location,
)
from ._zarr import create_array, dask_from_zarr, read_all, stream_array

__all__ = ["save", "load"]

#: The newest model format this dclust writes and reads.
FORMAT_VERSION = 1
_TAG = "__dclust__"


def _version() -> str:
    return __version__


class _Unsaveable(Exception):
    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


def _encode(value: Any) -> Any:
    """Plain-JSON form of ``value`` (tags for nan/inf, tuples and unicode arrays); raises :class:`_Unsaveable`."""
    if value is None or isinstance(value, (bool, np.bool_)):
        return None if value is None else bool(value)
    if isinstance(value, str):
        return value
    if isinstance(value, os.PathLike):  # e.g. checkpoint=pathlib.Path(...): saved as its str
        return os.fspath(value)
    if is_mapper(value):  # checkpoint=fsspec.get_mapper(url, **storage_options): its URL, never its credentials
        return storage_location(value)[0]
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        f = float(value)
        if math.isfinite(f):
            return f
        return {_TAG: "float", "value": "nan" if math.isnan(f) else ("inf" if f > 0 else "-inf")}
    if isinstance(value, np.ndarray) and value.dtype.kind == "U":
        return {_TAG: "str_array", "dtype": value.dtype.str, "items": value.tolist()}
    if isinstance(value, np.ndarray) and value.dtype == object and value.ndim == 1 and all(
            isinstance(v, str) for v in value.tolist()):  # feature_names_in_, as scikit-learn keeps it
        return {_TAG: "str_object_array", "items": value.tolist()}
    if isinstance(value, list):
        return [_encode(v) for v in value]
    if isinstance(value, tuple):
        return {_TAG: "tuple", "items": [_encode(v) for v in value]}
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value) or _TAG in value:
            raise _Unsaveable("dict with non-str keys (or a reserved key)")
        return {k: _encode(v) for k, v in value.items()}
    raise _Unsaveable(type(value).__module__ + "." + type(value).__qualname__)


def _encode_or_raise(value: Any, what: str, expected: str, fix: str) -> Any:
    """:func:`_encode`, or a :class:`DclustError` naming ``what`` could not be stored."""
    try:
        return _encode(value)
    except _Unsaveable as exc:
        raise DclustError(message(what, expected, f"a value of type {exc.kind}", fix)) from None


def _decode(value: Any) -> Any:
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if isinstance(value, dict):
        tag = value.get(_TAG)
        if tag is None:
            return {k: _decode(v) for k, v in value.items()}
        if tag == "float":
            return float(value["value"])
        if tag == "tuple":
            return tuple(_decode(v) for v in value["items"])
        if tag == "str_array":
            return np.array(value["items"], dtype=value["dtype"])
        if tag == "str_object_array":
            return np.array(value["items"], dtype=object)
        raise StorageError(
            message("load", "a value tagged 'float', 'tuple', 'str_array' or 'str_object_array'", f"tag {tag!r}",
                    "The store was written by an incompatible program; re-save the model with this dclust.")
        )
    return value


def _is_saved_array(value: Any) -> bool:
    return isinstance(value, (np.ndarray, da.Array)) and value.dtype.kind in "biufc"


def _encode_section(
    values: dict[str, Any], section: str, model_name: str, fix: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(JSON entries, arrays to write) for one of ``params`` / ``attributes``."""
    entries: dict[str, Any] = {}
    arrays: dict[str, Any] = {}
    for name, value in values.items():
        if _is_saved_array(value):
            arrays[name] = value
            entries[name] = {_TAG: "dask_array" if isinstance(value, da.Array) else "array",
                             "shape": [int(n) for n in value.shape], "dtype": value.dtype.str}
            continue
        entries[name] = _encode_or_raise(
            value, f"save({model_name}): {section[:-1]} {name!r}",
            "None, bool, int, float, str, numeric numpy/dask arrays, or lists/tuples/dicts of those", fix)
    return entries, arrays


def _collect(model: Any) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The attrs document and the arrays (by section) of ``model``; raises before anything is written."""
    cls = type(model).__name__
    if not hasattr(model, "get_params"):
        raise DclustError(
            message("save(model=...)", "a dclust estimator (with get_params)", f"a {cls}", "Pass a fitted estimator.")
        )
    try:
        params = dict(model.get_params(deep=False))
    except TypeError:
        params = dict(model.get_params())
    unsaved: dict[str, str] = {}
    for name, value in list(params.items()):
        if isinstance(value, np.random.Generator):
            params[name] = None
            unsaved[name] = "numpy.random.Generator"
    if unsaved:
        warnings.warn(
            f"save({cls}): {', '.join(unsaved)} was a numpy.random.Generator, which cannot be saved; the loaded "
            "model has None there. Pass an int random_state for reproducible refits.",
            UserWarning,
            stacklevel=3,
        )
    transient = set(getattr(model, "_transient_attributes", ()))
    learned = {
        k: v for k, v in vars(model).items() if k.endswith("_") and not k.startswith("_") and k not in transient
    }
    p_entries, p_arrays = _encode_section(
        params, "params", cls, "Pass that parameter as a plain value (or an array) before saving."
    )
    a_entries, a_arrays = _encode_section(
        learned, "attributes", cls,
        f"dclust developers: add the name to {cls}._transient_attributes, or store it as an array or plain value.",
    )
    doc = {
        "dclust_format": FORMAT_VERSION,
        "dclust_version": _version(),
        "estimator": cls,
        "params": p_entries,
        "attributes": a_entries,
        "unsaved_params": unsaved,
    }
    json.dumps(doc, allow_nan=False)  # must be strict JSON
    return doc, {"params": p_arrays, "attributes": a_arrays}


def _write_model(store: str, doc: dict[str, Any], arrays: dict[str, dict[str, Any]], sentinel: str | None) -> None:
    zarr.create_group(store=store, attributes=doc, zarr_format=3, overwrite=sentinel is None)
    for section, items in arrays.items():
        if not items:
            continue
        zarr.open_group(store=store, path=section, mode="a", zarr_format=3)
        for name, value in items.items():
            if isinstance(value, da.Array):
                x = value.rechunk({ax: -1 for ax in range(1, value.ndim)}) if value.ndim > 1 else value
                stream_array(x, store, f"{section}/{name}", None, sentinel)
            else:
                value = np.ascontiguousarray(value)
                create_array(store, f"{section}/{name}", data=value)


def save(
    model: Any, path: str | os.PathLike, *, overwrite: bool = False, storage_options: dict[str, Any] | None = None
) -> str:
    """Save a fitted estimator to a Zarr group (JSON attributes + arrays), atomically. Never pickles.

    Parameters
    ----------
    model : estimator
        A dclust estimator. Its ``get_params()`` and every learned attribute (a name in ``vars(model)`` ending
        in ``_`` and not starting with ``_``, except the class's ``_transient_attributes``) are saved. Numeric
        numpy arrays go to Zarr arrays (shape and dtype kept); lazy dask arrays are streamed to Zarr arrays and
        loaded back lazily; plain values go to JSON.
    path : str or os.PathLike
        Local path or fsspec URL of the new store (a directory, by convention ``*.zarr``).
    overwrite : bool, default False
        Replace an existing model store; otherwise an existing path raises before anything is written.
    storage_options : dict, optional
        Arguments of the fsspec filesystem of a URL ``path`` (for ``s3://``: ``endpoint_url``, ``key``,
        ``secret``...); without them the backend's own configuration applies (the ``AWS_*`` environment).

    Returns
    -------
    str
        The store's location.

    Raises
    ------
    DclustError
        A parameter or learned attribute has a type that cannot be saved (its name is in the message).
    StorageError
        The path exists and ``overwrite`` is False (or it is not a Zarr store).

    Warns
    -----
    UserWarning
        ``random_state`` was a ``numpy.random.Generator``: it is saved as None.

    Notes
    -----
    Local paths are written under a temporary sibling name and renamed into place when complete; a failure
    leaves any previous store intact. Non-local fsspec URLs are written under a temporary prefix, committed by a
    commit record and copied into place root metadata last (docs/object-storage.md): a killed save never leaves
    a model that :func:`load` reads, and a killed overwrite leaves the previous model (or, once committed, the
    new one) loadable.

    Examples
    --------
    >>> import os, tempfile, numpy as np, dclust
    >>> km = dclust.KMeans(n_clusters=2, random_state=0).fit(np.array([[0.0], [0.1], [5.0], [5.1]]))
    >>> p = save(km, os.path.join(tempfile.mkdtemp(), "model.zarr"))
    >>> load(p).cluster_centers_.shape
    (2, 1)
    """
    options = check_storage_options(storage_options, "save")
    doc, arrays = _collect(model)
    url, local = _resolve(path, "save")
    if local is None:
        if _remote_exists(url, options) and not overwrite:
            raise StorageError(
                message(f"save(path={url!r})", "a location where no store exists yet, or overwrite=True",
                        "a location that already exists", "Pass overwrite=True or choose another path.")
            )
        check_remote_location(url, "save", options)
        _atomic_write_remote(url, lambda tmp: _write_model(tmp, doc, arrays, None), what="save",
                             storage_options=options)
        return url
    _local_only(options, "save", local)
    _check_new_target(local, overwrite, "save")
    _atomic_write(local, lambda tmp: _write_model(tmp, doc, arrays, os.path.join(tmp, "zarr.json")))
    return local


def open_group_read(url: str, storage_options: dict | None) -> Any:
    """``zarr.open_group(url, mode="r")`` with the filesystem's ``storage_options`` (None: its defaults)."""
    return zarr.open_group(store=url, mode="r", **({"storage_options": storage_options} if storage_options else {}))


def _corrupt(shown: str, expected: str, received: str) -> StorageError:
    return StorageError(
        message(f"load({shown})", expected, received,
                "This is not a model saved by dclust.save (or it is damaged); re-save the model.")
    )


def load(path: str | os.PathLike, *, storage_options: dict[str, Any] | None = None) -> Any:
    """Load an estimator saved with :func:`save`.

    Parameters
    ----------
    path : str or os.PathLike
        Local path or fsspec URL of the model store.
    storage_options : dict, optional
        Arguments of the fsspec filesystem of a URL ``path`` (as in :func:`save`).

    Returns
    -------
    estimator
        A new instance of the saved class, built with the saved parameters, with its learned attributes set
        (numpy arrays read into memory; attributes saved from dask arrays come back as lazy dask arrays reading
        from the store).

    Raises
    ------
    FormatVersionError
        The model was saved by a newer dclust (a newer format than this dclust reads).
    StorageError
        The path does not exist, is not a dclust model, or names an estimator this dclust does not know.

    Examples
    --------
    >>> import os, tempfile, numpy as np, dclust
    >>> X = np.array([[0.0], [0.2], [9.0], [9.2]])
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     path = dclust.save(dclust.KMeans(n_clusters=2, random_state=0).fit(X), os.path.join(tmp, "km.zarr"))
    ...     model = dclust.load(path)
    >>> type(model).__name__, model.predict([[0.1], [9.1]]).tolist() in ([0, 1], [1, 0])
    ('KMeans', True)
    """
    options = check_storage_options(storage_options, "load")
    url, local = _resolve(path, "load")
    shown = repr(local if local is not None else url)
    if local is not None:
        _local_only(options, "load", local)
    exists = os.path.exists(local) if local is not None else _remote_exists(url, options)
    if not exists:
        raise StorageError(
            message("load", "an existing model store", f"path {shown}, which does not exist",
                    "Check the path (models are written by dclust.save).")
        )
    try:
        group = open_group_read(url if local is not None else committed_url(url, options), options)
    except Exception as exc:  # noqa: BLE001 - zarr raises several types for "not a group"
        raise _corrupt(shown, "a Zarr group", f"something that is not a Zarr group ({type(exc).__name__})") from exc
    attrs = dict(group.attrs)
    fmt = attrs.get("dclust_format")
    if fmt is None:
        raise _corrupt(shown, "a 'dclust_format' attribute", "a Zarr group without one")
    if isinstance(fmt, bool) or not isinstance(fmt, int) or fmt < 1:
        raise _corrupt(shown, "an integer 'dclust_format' >= 1", repr(fmt))
    if fmt > FORMAT_VERSION:
        raise FormatVersionError(
            message(f"load({shown})", f"model format {FORMAT_VERSION} (what this dclust reads)",
                    f"format {fmt}, saved by a newer dclust ({attrs.get('dclust_version', 'unknown version')})",
                    "Upgrade dclust to load it.")
        )
    name = attrs.get("estimator")
    params = attrs.get("params")
    learned = attrs.get("attributes")
    if not isinstance(name, str) or not isinstance(params, dict) or not isinstance(learned, dict):
        raise _corrupt(shown, "'estimator' (str), 'params' and 'attributes' (objects)",
                       f"estimator={name!r}, params of type {type(params).__name__}, "
                       f"attributes of type {type(learned).__name__}")
    cls = _estimator_class(name, shown)
    for section, names in (("params", params), ("attributes", learned)):
        bad = [k for k in names if not (isinstance(k, str) and k.isidentifier() and not k.startswith("_")
                                        and (section == "params" or k.endswith("_")))]
        if bad:
            raise _corrupt(shown, f"{section} named like Python attributes"
                           + (" ending in '_'" if section == "attributes" else ""), f"names {bad!r}")
    kwargs = {k: _read_value(group, "params", k, v, shown) for k, v in params.items()}
    try:
        model = cls(**kwargs)
    except TypeError as exc:
        raise StorageError(
            message(f"load({shown})", f"parameters accepted by {name}", f"{sorted(kwargs)} ({exc})",
                    f"The model was saved by dclust {attrs.get('dclust_version')}; load it with that version.")
        ) from exc
    if hasattr(model, "_validate_params"):
        try:
            model._validate_params()
        except DclustError as exc:
            raise _corrupt(shown, f"valid {name} parameters", str(exc)) from exc
    for k, v in learned.items():
        setattr(model, k, _read_value(group, "attributes", k, v, shown))
    _check_consistent(model, shown)
    return model


_NUMERIC = "biufc"


def _read_value(group: Any, section: str, name: str, entry: Any, shown: str) -> Any:
    if isinstance(entry, dict) and entry.get(_TAG) in ("array", "dask_array"):
        try:
            node = group[f"{section}/{name}"]
        except Exception:  # noqa: BLE001 - KeyError, or zarr refusing damaged/unsafe metadata
            node = None
        if not isinstance(node, zarr.Array):
            raise _corrupt(shown, f"an array {section}/{name}", "none (missing or unreadable)")
        _check_safe_array(node, shown, f"{section}/{name}")
        shape, dtype = entry.get("shape"), entry.get("dtype")
        if shape is not None and list(node.shape) != shape:
            raise _corrupt(shown, f"{section}/{name} of shape {tuple(shape)} (as saved)", f"shape {node.shape}")
        if dtype is not None and np.dtype(node.dtype).str != dtype:
            raise _corrupt(shown, f"{section}/{name} of dtype {dtype} (as saved)", f"dtype {node.dtype}")
        if entry[_TAG] == "dask_array":
            return dask_from_zarr(node)  # lazy; a damaged chunk raises CorruptStoreError when read
        return read_all(node, f"{shown.strip(chr(39))}, {section}/{name}")
    try:
        return _decode(entry)
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, DclustError):
            raise
        raise _corrupt(shown, f"a valid JSON value for {section}/{name}", repr(entry)[:80]) from exc


def _check_safe_array(node: Any, shown: str, name: str) -> None:
    """Numeric dtype only, and no codec that unpickles (numcodecs' ``pickle``): never execute stored bytes."""
    if np.dtype(node.dtype).kind not in _NUMERIC:
        raise _corrupt(shown, f"a numeric array {name}", f"dtype {node.dtype}")

    def codecs(obj: Any) -> Any:
        if isinstance(obj, dict):
            for key, value in obj.items():
                if key in ("id", "name") and isinstance(value, str):
                    yield value
                yield from codecs(value)
        elif isinstance(obj, (list, tuple)):
            for value in obj:
                yield from codecs(value)

    unsafe = [c for c in codecs(node.metadata.to_dict()) if "pickle" in c.lower()]
    if unsafe:
        raise _corrupt(shown, f"{name} without object-deserialising codecs", f"codecs {unsafe}")


#: Learned attributes that are always arrays when present, and the per-cluster vectors among them (length K).
_ARRAY_ATTRIBUTES = ("cluster_centers_", "cluster_ids_", "weights_", "ages_", "features_", "init_features_",
                     "means_", "covariances_", "sub_weights_")
_PER_CLUSTER = ("cluster_ids_", "ages_", "weights_")
_COUNTS = ("n_features_in_", "n_clusters_", "n_iter_", "n_latent_features_", "n_batches_")


def _check_consistent(model: Any, shown: str) -> None:
    """Learned attributes have the types and agree on the shapes that a fitted model always has."""
    learned = vars(model)
    for name, value in learned.items():
        if name in _COUNTS and value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise _corrupt(shown, f"{name} as a non-negative int", repr(value)[:60])
    for name in _ARRAY_ATTRIBUTES:
        if name in learned and not (isinstance(learned[name], (np.ndarray, da.Array))
                                    and learned[name].dtype.kind in _NUMERIC and learned[name].ndim >= 1):
            raise _corrupt(shown, f"{name} as a numeric array", f"{type(learned[name]).__name__}")
    lengths = {name: learned[name].shape for name in _PER_CLUSTER if name in learned}
    if "cluster_centers_" in learned and lengths:
        lengths["cluster_centers_"] = learned["cluster_centers_"].shape[:1]
    if len({shape[:1] for shape in lengths.values()}) > 1 or any(len(s) != 1 for n, s in lengths.items()
                                                                   if n != "cluster_centers_"):
        raise _corrupt(shown, "per-cluster attributes of one length K", f"shapes {lengths} (mismatched shapes)")
    n_features = learned.get("n_features_in_")
    for name in ("features_", "means_"):
        if name in learned and isinstance(n_features, int) and learned[name].shape[-1] != n_features:
            raise _corrupt(shown, f"{name} with n_features_in_={n_features} columns",
                           f"shape {learned[name].shape} (mismatched shapes)")
    centers = learned.get("cluster_centers_")
    if centers is None:
        return
    if not isinstance(centers, (np.ndarray, da.Array)) or centers.ndim != 2 or centers.dtype.kind not in "fc":
        raise _corrupt(shown, "cluster_centers_ as a 2-D float array",
                       f"{type(centers).__name__} {getattr(centers, 'shape', '')} {getattr(centers, 'dtype', '')}")
    n_features = getattr(model, "n_features_in_", None)
    if isinstance(n_features, int) and centers.shape[1] != n_features:
        raise _corrupt(shown, f"cluster_centers_ with n_features_in_={n_features} columns",
                       f"shape {centers.shape} (mismatched shapes)")
    k = vars(model).get("n_clusters_")  # a stored attribute; DynamicMeans' is a property (clusters of the last batch)
    if isinstance(k, int) and not isinstance(k, bool) and centers.shape[0] != k:
        raise _corrupt(shown, f"cluster_centers_ with n_clusters_={k} rows",
                       f"shape {centers.shape} (mismatched shapes)")


def _estimator_class(name: str, shown: str) -> type:
    from .. import _registry

    for module in ("dclust.cluster", "dclust.stream"):  # importing them registers their estimators
        try:
            __import__(module)
        except ImportError:
            pass
    cls = _registry.ESTIMATORS.get(name)
    if cls is None:
        known = ", ".join(sorted(_registry.ESTIMATORS)) or "none registered"
        raise StorageError(
            message(f"load({shown})", f"a known estimator ({known})", f"estimator {name!r}",
                    "Load it with the dclust version (or the plug-in) that defines this estimator.")
        )
    return cls
