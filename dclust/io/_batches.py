"""Labels written batch by batch: the persistent ids of a stream, durable as they come, renamed into place at the
end (the writer of ``dclust stream dmeans``)."""

from __future__ import annotations

import os
import shutil
from typing import Any

import numpy as np

from .._store._atomic import _atomic_write, _check_new_target, _resolve
from ..errors import InvalidParameterError, StorageError, message
from ._write import _compressors

__all__ = ["BatchLabelsWriter"]


class BatchLabelsWriter:
    """A Zarr store of ``n_samples`` int64 labels written one row batch at a time, resumable, committed atomically.

    The batches go into a hidden store ``.NAME.partial`` next to ``path`` (one chunk per batch, the codec of
    :func:`write_labels`), so what was written survives a crash; :meth:`commit` renames the complete store to
    ``path``. A resumed job reopens the partial store of the interrupted run (``resume=True``) and continues after
    the batches it knows are done.

    Parameters
    ----------
    path : str or os.PathLike
        The labels store to create: a local path (it is renamed into place when complete).
    n_samples : int
        Number of labels.
    batch_rows : int
        Rows per batch (the chunk size of the store).
    resume : bool, default False
        Reopen the partial store of an interrupted run (it must exist with the same shape and chunks) instead of
        starting a new one.
    name : str, default "labels"
        What errors call the store (an option such as ``"--labels"``).

    Raises
    ------
    InvalidParameterError
        ``path`` is a remote URL.
    StorageError
        ``resume=True`` and the partial store is missing or does not match ``n_samples`` and ``batch_rows``.

    Examples
    --------
    >>> import os, tempfile, numpy as np, dclust
    >>> path = os.path.join(tempfile.mkdtemp(), "ids.zarr")
    >>> w = dclust.io.BatchLabelsWriter(path, n_samples=5, batch_rows=2)
    >>> w.write(0, np.array([7, 7]))
    >>> w.write(2, np.array([8, 7]))
    >>> w.write(4, np.array([9]))
    >>> w.commit() == path
    True
    >>> dclust.open_array(path).compute().tolist()
    [7, 7, 8, 7, 9]
    """

    def __init__(self, path: str | os.PathLike[str], n_samples: int, batch_rows: int, *, resume: bool = False,
                 name: str = "labels") -> None:
        import zarr

        local = _resolve(path, name)[1]
        if local is None:
            raise InvalidParameterError(f"{name} {os.fspath(path)!r}: streamed output needs a local path (it is "
                                        "renamed into place when complete).")
        self.path, self.name = local, name
        self.partial = self.partial_path(local)
        chunks = (max(1, min(batch_rows, n_samples)),)
        if resume:
            try:
                self._array = zarr.open_array(self.partial, mode="r+")
                ok = self._array.shape == (n_samples,) and tuple(self._array.chunks) == chunks
            except Exception:  # noqa: BLE001 - missing or unreadable: same message
                ok = False
            if not ok:
                raise StorageError(message(
                    f"the partial labels {self.partial!r}", f"a store of {n_samples} labels in batches of "
                    f"{batch_rows}", "a missing or different store",
                    "Resume with the same input and batch size, or start afresh."))
        else:
            shutil.rmtree(self.partial, ignore_errors=True)  # a stale store of a run nothing can resume
            dtype = np.dtype(np.int64)
            self._array = zarr.create_array(store=self.partial, shape=(n_samples,), dtype=dtype, chunks=chunks,
                                            compressors=_compressors("auto", dtype), zarr_format=3)

    @staticmethod
    def partial_path(path: str | os.PathLike[str]) -> str:
        """The hidden partial store of the labels at the local ``path``: ``.NAME.partial`` next to it."""
        local = os.path.abspath(os.fspath(path))
        return os.path.join(os.path.dirname(local), f".{os.path.basename(local.rstrip(os.sep))}.partial")

    def write(self, start: int, labels: Any) -> None:
        """Write ``labels`` at rows ``start, start + 1, ...`` (durable once this returns)."""
        labels = np.asarray(labels)
        self._array[start:start + labels.shape[0]] = labels

    def commit(self, *, overwrite: bool = False) -> str:
        """Rename the complete store to ``path`` (replacing an existing store only with ``overwrite``); the path."""
        _check_new_target(self.path, overwrite, self.name)
        _atomic_write(self.path, lambda tmp: os.replace(self.partial, tmp))
        return self.path

    def discard(self) -> None:
        """Remove the partial store (a run that nothing will resume)."""
        shutil.rmtree(self.partial, ignore_errors=True)
