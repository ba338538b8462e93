"""The check of a job's outputs before any work: distinct paths, none of them an input, each writable."""

from __future__ import annotations

import os
from typing import Iterable, Mapping

from .._store._atomic import _check_new_target, _resolve, check_location
from ..errors import InvalidParameterError

__all__ = ["check_outputs"]


def check_outputs(outputs: Mapping[str, str | os.PathLike[str]], inputs: Iterable[str | os.PathLike[str]] = (), *,
                  overwrite: bool = False, rewritten: Mapping[str, str | os.PathLike[str]] | None = None) -> None:
    """Check, before any pass over the data, that every output of a job can be written.

    The same check :func:`write_array`, :func:`write_labels` and :func:`save` run when they start, done for all
    the outputs of a job at once: no output is an input or another output, and every local output's directory is
    writable and the output itself new (or, with ``overwrite``, an existing Zarr store). Remote URLs are checked
    by their writers (still before anything is written).

    Parameters
    ----------
    outputs : mapping of str to path
        The outputs by the name errors should call them (an option such as ``"--labels"``, or a parameter name).
    inputs : iterable of path, optional
        The job's inputs; an output at one of them is refused.
    overwrite : bool, default False
        Existing Zarr stores may be replaced.
    rewritten : mapping of str to path, optional
        Existing local outputs rewritten in place (a checkpoint being resumed), by name: only their directory must
        be writable.

    Raises
    ------
    InvalidParameterError
        Two outputs, or an output and an input, are the same path.
    StorageError
        An output exists (without ``overwrite``, or is not a Zarr store) or its directory is not writable.

    Examples
    --------
    >>> import os, tempfile, numpy as np, dclust
    >>> d = tempfile.mkdtemp()
    >>> X = os.path.join(d, "X.zarr")
    >>> _ = dclust.write_array(np.zeros((4, 2)), X)
    >>> dclust.io.check_outputs({"labels": os.path.join(d, "labels.zarr")}, [X])
    >>> try:
    ...     dclust.io.check_outputs({"labels": X}, [X])
    ... except dclust.errors.InvalidParameterError as exc:
    ...     print(type(exc).__name__, "same store as input" in str(exc))
    InvalidParameterError True
    """
    for name, path in (rewritten or {}).items():
        check_location(os.path.abspath(os.fspath(path)), name)
    seen: dict[str, str] = {}
    for path in inputs:
        seen[_resolve(path, "input")[0]] = f"input {os.fspath(path)}"
    for name, path in outputs.items():
        url, local = _resolve(path, name)
        if url in seen:
            raise InvalidParameterError(f"{name} {os.fspath(path)!r} is the same store as {seen[url]}; give every "
                                        "output its own path.")
        seen[url] = name
        if local is not None:
            _check_new_target(local, overwrite, name)
