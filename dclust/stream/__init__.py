"""Online estimators: D-Means, KD-Means and SD-Means over time steps, and any-time DP-means over one large data set.

A stream estimator's checkpoint (``checkpoint=PATH``) is written after every batch; a caller that saves at its own
moments (after writing a batch's labels) uses :func:`save_state` and :func:`resume_state` with ``path=``, and
:func:`fingerprint_of` for the data of a whole-array fit.
"""

from ._anytime import AnytimeDPMeans
from ._checkpoint import fingerprint_of, resume_state, save_state
from ._dmeans import DynamicMeans
from ._kdmeans import KernelDynamicMeans
from ._sdmeans import SpectralDynamicMeans

__all__ = ["DynamicMeans", "AnytimeDPMeans", "SpectralDynamicMeans", "KernelDynamicMeans", "save_state",
           "resume_state", "fingerprint_of"]
