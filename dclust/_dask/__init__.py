"""Orchestration: builds Dask graphs from the kernels. Imports dask, never zarr or xarray."""
