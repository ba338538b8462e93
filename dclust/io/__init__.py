"""Input and output: the only part of dclust that imports zarr and xarray.

- :func:`open_array` opens a Zarr store (path or fsspec URL), zarr array, xarray object, dask or numpy array as a
  lazy row-chunked array, from metadata only.
- :func:`write_array` / :func:`write_labels` stream an array into a new Zarr store, atomically (temp + rename).
- :func:`save` / :func:`load` store fitted estimators as a Zarr group with JSON attributes; never pickle.
"""

from __future__ import annotations

from ._models import load, save
from ._open import open_array
from ._write import write_array, write_labels

__all__ = ["open_array", "write_array", "write_labels", "save", "load"]
