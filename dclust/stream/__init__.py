"""Online estimators: D-Means, KD-Means and SD-Means over time steps, and any-time DP-means over one large data set."""

from ._anytime import AnytimeDPMeans
from ._dmeans import DynamicMeans
from ._kdmeans import KernelDynamicMeans
from ._sdmeans import SpectralDynamicMeans

__all__ = ["DynamicMeans", "AnytimeDPMeans", "SpectralDynamicMeans", "KernelDynamicMeans"]
