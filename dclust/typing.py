"""Type aliases used in dclust's signatures."""

from __future__ import annotations

from typing import Any, Literal, Union

import numpy as np

ArrayLike = Union[np.ndarray, Any]  # numpy, dask, zarr arrays and xarray DataArrays
SeedLike = Union[int, np.random.Generator, None]
KMeansInit = Literal["k-means||", "k-means++", "random"]
DPMeansInit = Literal["mean", "empty"]
PersistMode = Literal["auto", True, False]

__all__ = ["ArrayLike", "SeedLike", "KMeansInit", "DPMeansInit", "PersistMode"]
