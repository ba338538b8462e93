"""Input and output: the only part of dclust that imports zarr and xarray.

- :func:`open_array` opens a Zarr store, Parquet, CSV or NetCDF/HDF5 file (path or fsspec URL, with
  ``storage_options=``), zarr array, xarray object, pandas/dask DataFrame, dask or numpy array as a lazy row-chunked
  array; :func:`feature_names` gives back the column names of a table it opened.
- :func:`write_array` / :func:`write_labels` stream an array into a new Zarr store, atomically (temp + rename
  locally; a commit record on object stores, docs/object-storage.md), with ``storage_options=`` for URLs.
- :func:`save` / :func:`load` store fitted estimators as a Zarr group with JSON attributes; never pickle.
- :func:`check_outputs` checks all the outputs of a job before any work; :func:`check_output` one output file,
  which :func:`write_bytes` then writes atomically; :class:`BatchLabelsWriter` writes labels batch by batch
  (resumable) and renames them into place at the end.
- :mod:`dclust.io.video` (video files and Zarr frames) and :mod:`dclust.io.pointcloud` (point-cloud frames) hold
  the readers and writers of the applications.
- :func:`read_links` reads a links CSV (``i, j, type[, weight]``) into :class:`LinkPairs` for
  :meth:`dclust.ConstraintGraph.from_pairs`.
- :func:`clean` removes the temporaries of killed writes (``dclust clean PATH``) and finishes a commit a killed
  writer left recorded on an object store.

The atomic writes, output checks, checksums and formats live in :mod:`dclust._store`; this package delegates.
"""

from __future__ import annotations

from .._store._atomic import check_output, clean, write_bytes
from .._validation import feature_names
from ._batches import BatchLabelsWriter
from ._checks import check_outputs
from ._models import load, save
from ._open import open_array
from ._labels import write_labels
from ._links import LinkPairs, read_links
from ._write import write_array

__all__ = ["open_array", "feature_names", "write_array", "write_labels", "save", "load", "clean", "check_outputs",
           "check_output", "write_bytes", "BatchLabelsWriter", "read_links", "LinkPairs"]
