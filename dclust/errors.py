"""Exceptions and warnings raised by dclust.

Every error message says what was expected, what was received and how to fix it. All errors derive from
:class:`DclustError`, itself a :class:`ValueError`, so ``except ValueError`` keeps working for callers that do not
know dclust.
"""

from __future__ import annotations

from sklearn.exceptions import NotFittedError as _SklearnNotFittedError

__all__ = [
    "DclustError",
    "NotFittedError",
    "ChunkingError",
    "InvalidDataError",
    "InvalidParameterError",
    "InfeasibleConstraintsError",
    "StorageError",
    "FormatVersionError",
    "CorruptStoreError",
    "ConvergenceWarning",
    "message",
]


def message(what: str, expected: str, received: str, fix: str) -> str:
    """Format the house error message: ``what: expected ...; received ...; fix``.

    Parameters
    ----------
    what : str
        The thing that is wrong (a parameter, an input, a store).
    expected : str
        What dclust needs.
    received : str
        What it got.
    fix : str
        How to fix it: one sentence, ideally a call or an option to use.

    Returns
    -------
    str

    Examples
    --------
    >>> from dclust import errors
    >>> errors.message("lam", "a float > 0", "-1.0", "Pass a positive penalty, e.g. lam=4.0.")
    'lam: expected a float > 0; received -1.0. Pass a positive penalty, e.g. lam=4.0.'
    """
    return f"{what}: expected {expected}; received {received}. {fix}"


class DclustError(ValueError):
    """Root of every dclust error (a :class:`ValueError`).

    Examples
    --------
    >>> import dclust
    >>> try:
    ...     dclust.KMeans(n_clusters=0).fit([[0.0], [1.0]])
    ... except dclust.errors.DclustError as exc:
    ...     print(type(exc).__name__, isinstance(exc, ValueError))
    InvalidParameterError True
    """


class NotFittedError(DclustError, _SklearnNotFittedError):  # type: ignore[misc]  # scikit-learn has no stubs
    """A method that needs a fitted model was called before ``fit`` (also scikit-learn's NotFittedError, itself
    a ValueError and an AttributeError).

    Examples
    --------
    >>> import dclust
    >>> from sklearn.exceptions import NotFittedError as SklearnNotFittedError
    >>> try:
    ...     dclust.DPMeans(lam=1.0).predict([[0.0, 0.0]])
    ... except dclust.errors.NotFittedError as exc:
    ...     print(isinstance(exc, SklearnNotFittedError))
    True
    """


class ChunkingError(DclustError):
    """The array is chunked in a way dclust cannot use (for example along the feature axis).

    Examples
    --------
    >>> import dclust
    >>> try:   # row blocks of 4 + 4 rows for 10 rows
    ...     dclust.ConstraintGraph.from_pairs([0], [1], [True], n_samples=10, chunks=(4, 4))
    ... except dclust.errors.ChunkingError as exc:
    ...     print("X.chunks[0]" in str(exc))
    True
    """


class InvalidDataError(DclustError):
    """The data cannot be clustered: wrong shape or dtype, empty, NaN/inf, mismatched features.

    Examples
    --------
    >>> import numpy as np, dclust
    >>> try:
    ...     dclust.KMeans(n_clusters=1).fit(np.array([[0.0, np.nan]]))
    ... except dclust.errors.InvalidDataError as exc:
    ...     print(type(exc).__name__)
    InvalidDataError
    """


class InvalidParameterError(DclustError, TypeError):
    """An estimator or function parameter is out of its valid range or of the wrong type.

    Examples
    --------
    >>> import dclust
    >>> try:
    ...     dclust.DPMeans(lam=-1.0).fit([[0.0], [1.0]])
    ... except dclust.errors.InvalidParameterError as exc:
    ...     print("lam" in str(exc), isinstance(exc, TypeError))
    True True
    """


class InfeasibleConstraintsError(DclustError):
    """Must-link and cannot-link constraints contradict each other.

    Examples
    --------
    >>> import dclust
    >>> try:   # 0-1 and 1-2 must link, so 0-2 cannot be a cannot-link
    ...     dclust.ConstraintGraph.from_pairs([0, 1, 0], [1, 2, 2], [True, True, False], n_samples=3)
    ... except dclust.errors.InfeasibleConstraintsError as exc:
    ...     print(type(exc).__name__)
    InfeasibleConstraintsError
    """


class StorageError(DclustError):
    """A path is missing, is not a Zarr store, or an output already exists.

    Examples
    --------
    >>> import dclust
    >>> dclust.open_array("no-such-store.zarr")
    Traceback (most recent call last):
    ...
    dclust.errors.StorageError: ...no-such-store.zarr...
    """


class FormatVersionError(StorageError):
    """A saved model or checkpoint has a format this version of dclust cannot read.

    Examples
    --------
    >>> import dclust
    >>> issubclass(dclust.errors.FormatVersionError, dclust.errors.StorageError)
    True
    """


class ConvergenceWarning(UserWarning):
    """An iterative algorithm stopped at ``max_iter`` before converging.

    Examples
    --------
    >>> import warnings, numpy as np, dclust
    >>> X = np.random.default_rng(0).normal(size=(500, 2))
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     _ = dclust.GMPR(n_classes=3, max_iter=2, random_state=0).fit(X)
    >>> any(issubclass(w.category, dclust.errors.ConvergenceWarning) for w in caught)
    True
    """


class CorruptStoreError(StorageError, InvalidDataError):
    """A chunk of a Zarr store is damaged: its checksum does not match its bytes, its file is empty, or it cannot
    be decoded. The message names the store, the chunk and its rows. (Also an :class:`InvalidDataError`: the data
    cannot be read.)

    Examples
    --------
    >>> from dclust.errors import CorruptStoreError
    >>> err = CorruptStoreError.of_chunk("points.zarr", "c/7/0", 700, 799, "checksum mismatch")
    >>> "chunk c/7/0 (rows 700..799)" in str(err)
    True
    """

    @classmethod
    def of_chunk(cls, store: str, chunk: str, first: int, last: int, problem: str,
                 block: int | None = None) -> "CorruptStoreError":
        """The error for the chunk ``chunk`` (its key) holding rows ``first..last`` of ``store`` (read by the row
        block ``block`` of a pass, if given)."""
        where = "" if block is None else f", read by row block {block}"
        return cls(
            message(f"store {store!r}", "every chunk intact (checksum matching, file not empty)",
                    f"{problem} in chunk {chunk} (rows {first}..{last}{where})",
                    "The store is damaged: restore it from its source or rewrite it (dclust.write_array, "
                    "dclust.save, or rerun the command that wrote it).")
        )
