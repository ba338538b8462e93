"""Batch estimators with scikit-learn conventions."""

from ._bpmeans import BPMeans
from ._copkmeans import COPKMeans
from ._collapsed import CappedDPMeans, CollapsedBPMeans, CollapsedDPMeans
from ._dpmeans import DPMeans
from ._gmpr import GMPR
from ._kfeatures import KFeatures, StepwiseKFeatures
from ._kmeans import KMeans
from ._lcvqe import LCVQE
from ._mahalanobis import MahalanobisKMeans
from ._mpckmeans import MPCKMeans
from ._rdpmeans import RDPMeans
from ._dpmm import DPMMGibbs
from ._ibp import IBPGibbs
from ._spectral import SpectralClustering
from ._tvclust import TVClust
from ._tvclust_variational import TVClustVariational

__all__ = [
    "BPMeans",
    "CappedDPMeans",
    "CollapsedDPMeans",
    "CollapsedBPMeans",
    "COPKMeans",
    "DPMeans",
    "DPMMGibbs",
    "GMPR",
    "IBPGibbs",
    "KFeatures",
    "KMeans",
    "LCVQE",
    "MahalanobisKMeans",
    "MPCKMeans",
    "RDPMeans",
    "SpectralClustering",
    "StepwiseKFeatures",
    "TVClust",
    "TVClustVariational",
]
