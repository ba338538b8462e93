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
    """Format the house error message: ``what: expected ...; received ...; fix``."""
    return f"{what}: expected {expected}; received {received}. {fix}"


class DclustError(ValueError):
    """Root of every dclust error."""


class NotFittedError(DclustError, _SklearnNotFittedError):
    """A method that needs a fitted model was called before ``fit`` (also scikit-learn's NotFittedError, itself
    a ValueError and an AttributeError)."""


class ChunkingError(DclustError):
    """The array is chunked in a way dclust cannot use (for example along the feature axis)."""


class InvalidDataError(DclustError):
    """The data cannot be clustered: wrong shape or dtype, empty, NaN/inf, mismatched features."""


class InvalidParameterError(DclustError, TypeError):
    """An estimator or function parameter is out of its valid range or of the wrong type."""


class InfeasibleConstraintsError(DclustError):
    """Must-link and cannot-link constraints contradict each other."""


class StorageError(DclustError):
    """A path is missing, is not a Zarr store, or an output already exists."""


class FormatVersionError(StorageError):
    """A saved model or checkpoint has a format this version of dclust cannot read."""


class ConvergenceWarning(UserWarning):
    """An iterative algorithm stopped at ``max_iter`` before converging."""


class CorruptStoreError(StorageError, InvalidDataError):
    """A chunk of a Zarr store is damaged: its checksum does not match its bytes, its file is empty, or it cannot
    be decoded. The message names the store, the chunk and its rows. (Also an :class:`InvalidDataError`: the data
    cannot be read.)"""

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
