"""Name -> estimator class, so that saved models and the CLI can find the class. Unknown names list the valid ones.

A leaf of the foundation layer (it imports only ``errors``): every estimator registers itself with :func:`register`
when its module is imported, and importing any ``dclust`` module first imports the package, whose ``__init__``
imports every estimator; so by the time anything looks a name up, every estimator is registered.
"""

from __future__ import annotations

from .errors import InvalidParameterError, message

__all__ = ["ESTIMATORS", "register", "get_estimator"]

ESTIMATORS: dict[str, type] = {}


def register(cls: type) -> type:
    """Class decorator: make ``cls`` loadable by name."""
    ESTIMATORS[cls.__name__] = cls
    return cls


def get_estimator(name: str) -> type:
    """The estimator class called ``name`` (case-insensitive, also the CLI names like ``dpmeans``)."""
    by_lower = {k.lower(): v for k, v in ESTIMATORS.items()}
    try:
        return by_lower[name.lower().replace("-", "").replace("_", "")]
    except KeyError:
        raise InvalidParameterError(
            message("estimator name", "one of " + ", ".join(sorted(ESTIMATORS)), repr(name), "Pick a listed name.")
        ) from None
