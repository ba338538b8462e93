"""Choosing the number of clusters: a lam sweep for DP-means and the BIC of GM-PR.

:func:`sweep_dpmeans` fits DP-means on a uniform sample for many candidate ``lam`` and scores all of them on the
full data in one pass (two passes in all); :attr:`LamSweep.suggested_lam` follows a stated rule
(:data:`SUGGESTION_RULE`). :func:`bic` ranks GM-PR models with different numbers of classes. The internal
indices themselves (Calinski-Harabasz, Davies-Bouldin, silhouette) are in :mod:`dclust.metrics`.

Examples
--------
>>> import numpy as np
>>> from dclust.model_selection import sweep_dpmeans
>>> X = np.concatenate([np.random.default_rng(0).normal(c, 0.5, (100, 2)) for c in (0, 20, 40)])
>>> sw = sweep_dpmeans(X, n_lams=12, random_state=0)
>>> sw.suggested_n_clusters, sw.n_passes
(3, 2)
"""

from ._criteria import bic, n_parameters
from ._sweep import SUGGESTION_RULE, LamSweep, suggest_lam, sweep_dpmeans

__all__ = ["sweep_dpmeans", "LamSweep", "suggest_lam", "SUGGESTION_RULE", "bic", "n_parameters"]
