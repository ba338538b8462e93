"""Batch estimators with scikit-learn conventions, and the in-memory k-means pieces they share
(:func:`kmeans_plusplus`, :func:`lloyd`, :func:`nearest`) and the parameter check of every estimator
(:func:`validate_params`)."""

from .._validation import validate_params
from ..kernels.distances import nearest
from ..kernels.kmeans import kmeans_plusplus, lloyd
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
    "kmeans_plusplus",
    "lloyd",
    "nearest",
    "validate_params",
]
