"""Input and output: the only part of dclust that imports zarr and xarray.

- :func:`open_array` opens a Zarr store, Parquet, CSV or NetCDF/HDF5 file (path or fsspec URL, with
  ``storage_options=``), zarr array, xarray object, pandas/dask DataFrame, dask or numpy array as a lazy row-chunked
  array; :func:`feature_names` gives back the column names of a table it opened.
- :func:`write_array` / :func:`write_labels` stream an array into a new Zarr store, atomically (temp + rename).
- :func:`save` / :func:`load` store fitted estimators as a Zarr group with JSON attributes; never pickle.
"""

from __future__ import annotations

from .._feature_names import feature_names
from ._models import load, save
from ._open import open_array
from ._write import write_array, write_labels

__all__ = ["open_array", "feature_names", "write_array", "write_labels", "save", "load"]
