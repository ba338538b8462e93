"""dclust: distributed, out-of-core clustering on Dask.

Data lives in Zarr (or anything Dask can chunk); every pass over the data is a map over row blocks plus a tree
reduction, and only O(K x D) state reaches the driver.

>>> import numpy as np, dclust
>>> X = np.array([[0.0, 0.0], [0.0, 1.0], [10.0, 0.0], [10.0, 1.0]])
>>> dclust.DPMeans(lam=4.0, random_state=0).fit(X).n_clusters_
2
"""

from __future__ import annotations

from . import constraints, errors, metrics
from ._dask.passes import CHUNK_DONE_TOPIC
from ._fit import ProgressEvent, on_progress
from ._fit import emit as emit_progress
from .cluster import (
    BPMeans,
    CappedDPMeans,
    CollapsedDPMeans,
    CollapsedBPMeans,
    DPMeans,
    DPMMGibbs,
    GMPR,
    IBPGibbs,
    KFeatures,
    KMeans,
    LCVQE,
    MahalanobisKMeans,
    MPCKMeans,
    COPKMeans,
    RDPMeans,
    SpectralClustering,
    StepwiseKFeatures,
    TVClust,
    TVClustVariational,
)
from .constraints import ConstraintGraph
from .stream import AnytimeDPMeans, DynamicMeans, KernelDynamicMeans, SpectralDynamicMeans
from .datasets import make_blobs
from .io import load, open_array, save, write_array, write_labels

from ._version import __version__

__all__ = [
    "__version__",
    "KMeans",
    "MahalanobisKMeans",
    "DPMeans",
    "BPMeans",
    "CollapsedDPMeans",
    "CollapsedBPMeans",
    "CappedDPMeans",
    "KFeatures",
    "StepwiseKFeatures",
    "RDPMeans",
    "GMPR",
    "TVClust",
    "TVClustVariational",
    "MPCKMeans",
    "COPKMeans",
    "LCVQE",
    "DPMMGibbs",
    "IBPGibbs",
    "SpectralClustering",
    "DynamicMeans",
    "AnytimeDPMeans",
    "SpectralDynamicMeans",
    "KernelDynamicMeans",
    "ConstraintGraph",
    "constraints",
    "open_array",
    "write_array",
    "write_labels",
    "save",
    "load",
    "make_blobs",
    "metrics",
    "errors",
    "on_progress",
    "emit_progress",
    "ProgressEvent",
    "CHUNK_DONE_TOPIC",
]
