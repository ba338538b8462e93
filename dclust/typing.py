"""Type aliases used in dclust's signatures.

>>> from dclust.typing import SeedLike
>>> import numpy as np
>>> isinstance(np.random.default_rng(0), SeedLike.__args__)
True
"""

from __future__ import annotations

import os
from typing import Any, Literal, Optional, Union

import numpy as np

ArrayLike = Union[np.ndarray, Any]  # numpy, dask, zarr arrays and xarray DataArrays
SeedLike = Union[int, np.random.Generator, None]
KMeansInit = Literal["k-means||", "k-means++", "random"]
DPMeansInit = Literal["mean", "empty"]
PersistMode = Literal["auto", True, False]
#: a checkpoint store: None, a path or fsspec URL, or an fsspec mapper (it carries the storage options)
CheckpointLike = Union[str, os.PathLike[str], Any, None]
#: must-link / cannot-link side information of a constrained fit: a dclust.ConstraintGraph over the rows of X, or
#: None (spelled Any: this module is the foundation layer and may not import dclust.constraints)
ConstraintsLike = Optional[Any]
#: ``y`` of scikit-learn's API, accepted and ignored by unsupervised estimators
Ignored = Optional[Any]  # (Optional: a bare Any would document as the class typing.Any)

__all__ = [
    "ArrayLike", "SeedLike", "KMeansInit", "DPMeansInit", "PersistMode", "CheckpointLike", "ConstraintsLike",
    "Ignored",
]
