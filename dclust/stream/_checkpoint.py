"""Checkpoints of the online estimators (``checkpoint=PATH``): their whole state after every batch.

A stream estimator's state is its learned attributes (ids, centres, weights, ages, counters, the base seed and the
history), which already make a saved model resume exactly; :func:`save_state` writes them after every
``partial_fit`` batch with :class:`dclust._store._checkpoint.Checkpointer` (atomic replace, Zarr + JSON, no
pickle; the checkpoint is also a model ``dclust.load`` reads), and :func:`resume_state` restores them into an
estimator that has no state yet (validated: format, estimator, parameters, and for ``fit``/``iter_fit`` over one
array its fingerprint). Each estimator checks the shapes of what it got back in ``_check_restored(ck)``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .._store._checkpoint import Checkpointer

__all__ = ["resume_state", "save_state", "fingerprint_of", "check_resumed_length"]


def _checkpointer(model: Any, fingerprint: dict[str, Any] | None, path: Any) -> Checkpointer:
    from .._store._checkpoint import Checkpointer  # imported lazily: only with a checkpoint

    return Checkpointer(model.checkpoint if path is None else path, model, fingerprint)


def fingerprint_of(model: Any, X: Any, w: Any = None) -> dict[str, Any] | None:
    """The data fingerprint of a whole-array fit (None without a checkpoint: nothing is read); pass it to
    :func:`resume_state` to refuse a checkpoint of other data.

    Examples
    --------
    >>> import numpy as np, dask.array as da, dclust
    >>> from dclust.stream import fingerprint_of
    >>> X = da.from_array(np.zeros((4, 2)), chunks=2)
    >>> fingerprint_of(dclust.AnytimeDPMeans(lam=1.0), X) is None
    True
    >>> isinstance(fingerprint_of(dclust.AnytimeDPMeans(lam=1.0, checkpoint="ck"), X), dict)
    True
    """
    if model.checkpoint is None:
        return None
    from .._store._checkpoint import data_fingerprint

    return data_fingerprint(X, w)


def resume_state(model: Any, fingerprint: dict[str, Any] | None = None, path: Any = None) -> bool:
    """Restore the checkpoint's state into ``model``; False when there is no checkpoint (or none yet).

    ``path`` (default: ``model.checkpoint``) lets a caller that saves at its own moments (the CLI, after writing
    a batch's labels) use a checkpoint without setting the parameter.

    Examples
    --------
    >>> import os, tempfile, numpy as np, dclust
    >>> from dclust.stream import resume_state, save_state
    >>> path = os.path.join(tempfile.mkdtemp(), "ck")
    >>> dm = dclust.DynamicMeans(lam=4.0, T_Q=5, k_tau=1.1, random_state=0)
    >>> _ = dm.partial_fit(np.array([[0.0, 0.0], [0.1, 0.0], [9.0, 9.0]]))
    >>> save_state(dm, path=path)
    >>> again = dclust.DynamicMeans(lam=4.0, T_Q=5, k_tau=1.1, random_state=0)
    >>> resume_state(again, path=path), again.n_batches_, again.cluster_ids_.tolist()
    (True, 1, [0, 1])
    """
    if path is None and model.checkpoint is None:
        return False
    ck = _checkpointer(model, fingerprint, path)
    state = ck.resume()
    if state is None:
        return False
    from .._store._checkpoint import learned_attributes

    for name in learned_attributes(model):  # the restored state replaces any state in memory
        delattr(model, name)
    ck.restore_attributes(model, state)
    with ck.reading():
        model._check_restored(ck)
    return True


def save_state(model: Any, fingerprint: dict[str, Any] | None = None, path: Any = None) -> None:
    """Replace the checkpoint (``path``, default ``model.checkpoint``) by the state of ``model``, atomically (see
    :func:`resume_state` for an example).

    Examples
    --------
    >>> import os, tempfile, numpy as np, dclust
    >>> from dclust.stream import resume_state, save_state
    >>> rng = np.random.default_rng(0)
    >>> with tempfile.TemporaryDirectory() as d:
    ...     model = dclust.DynamicMeans(lam=4.0, T_Q=5, k_tau=1.1, random_state=0).partial_fit(rng.normal(size=(30, 2)))
    ...     save_state(model, path=os.path.join(d, "ck"))
    ...     print(sorted(os.listdir(d)))
    ['ck']
    """
    if path is None and model.checkpoint is None:
        return
    _checkpointer(model, fingerprint, path).save({"phase": "batch"}, model=model)


def check_resumed_length(model: Any, done: int, seen: int) -> None:
    """A ``fit`` resumed after ``done`` batches must have been given at least as many."""
    if seen < done:
        from ..errors import StorageError, message

        raise StorageError(
            message(f"{type(model).__name__}(checkpoint={model.checkpoint!r}).fit(batches)",
                    f"at least the {done} batches the checkpoint has processed", f"{seen} batches",
                    "Pass the same stream to resume it, or another checkpoint path to start afresh.")
        )
