"""Pure numpy/numba kernels: one block in, arrays out. No dask, zarr, validation or I/O here."""
