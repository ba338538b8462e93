"""Batch estimators with scikit-learn conventions."""

from ._kmeans import KMeans

__all__ = ["KMeans"]
