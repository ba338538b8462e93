"""Storage below the estimators: the one atomic-write helper, the checks of output locations, chunk checksums,
the model format (Zarr group + JSON attributes, never pickle), the checkpoint format and its reader, and the
constraint-graph format.

Estimators, ``stream/`` and ``constraints/`` use this package; they never import :mod:`dclust.io` (which is above
them and delegates its writes here).

- :mod:`._atomic`: temporary name ``.NAME.tmp-HOST-PID-RANDOM`` + rename (root metadata last on object stores),
  :func:`check_location` before any work, :func:`remove_stale_tmp` / :func:`clean` for killed writers' leftovers.
- :mod:`._zarr`: every array is created with a CRC-32C checksum after its compressor; damaged or empty chunks
  raise :class:`~dclust.errors.CorruptStoreError` naming the store, the chunk and its rows.
- :mod:`._models`: :func:`save` / :func:`load`.
- :mod:`._checkpoint`: :class:`Checkpointer`, :func:`data_fingerprint`, :func:`graph_fingerprint`.
- :mod:`._constraints`: :func:`write_constraints` / :func:`read_constraints`.
"""

from __future__ import annotations

from ._atomic import check_location, clean, is_temporary, remove_stale_tmp
from ._checkpoint import Checkpointer, data_fingerprint, graph_fingerprint, learned_attributes
from ._constraints import read_constraints, write_constraints
from ._models import load, save
from ._zarr import chunk_error, read_all

__all__ = [
    "Checkpointer", "check_location", "chunk_error", "clean", "data_fingerprint", "graph_fingerprint",
    "is_temporary", "learned_attributes", "load", "read_all", "read_constraints", "remove_stale_tmp", "save",
    "write_constraints",
]
