"""Saving and loading fitted estimators: the format lives in :mod:`dclust._store._models` (below the estimators);
this module is where :mod:`dclust.io` (and older imports) find :func:`save` and :func:`load`."""

from __future__ import annotations

from .._store._models import FORMAT_VERSION, load, save

__all__ = ["save", "load", "FORMAT_VERSION"]
