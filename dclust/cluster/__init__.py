"""Batch estimators with scikit-learn conventions."""

from ._dpmeans import DPMeans
from ._kmeans import KMeans

__all__ = ["DPMeans", "KMeans"]
