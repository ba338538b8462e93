"""Checkpoints of long fits: the format and its reader live in :mod:`dclust._store._checkpoint` (below the
estimators, which import it from there); the names stay importable from here."""

from __future__ import annotations

from .._fit import rng_state, set_rng_state
from .._store._checkpoint import (
    FORMAT_VERSION,
    Checkpointer,
    data_fingerprint,
    graph_fingerprint,
    learned_attributes,
)

__all__ = ["Checkpointer", "data_fingerprint", "graph_fingerprint", "learned_attributes", "rng_state",
           "set_rng_state", "FORMAT_VERSION"]
