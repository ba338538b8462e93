"""Clustering metrics, streamed over numpy or dask labels (docs/algorithms.md section 9).

Every score is computed from the contingency table ``n_ij`` of the two labelings. For dask inputs each row block
yields its sparse cells (unique ``(true, pred)`` pairs with counts) and the partials are merged with a tree
reduction, so the driver only ever holds O(#cells) numbers, never N labels, and nothing is O(N^2).

Internal indices (no ground truth) take the points too: :func:`calinski_harabasz_score` and
:func:`davies_bouldin_score` are tree reductions of per-label statistics over the row blocks of ``X``;
:func:`silhouette_score` is exact on a uniform sample of rows.

Labels are integers; every value (``-1`` included) is an ordinary label. To leave samples out, drop them, or use
a weight of 0 with :func:`confidence_weighted_accuracy`.

Examples
--------
>>> import dask.array as da
>>> from dclust import metrics
>>> y_true = [0, 0, 1, 1, 2, 2]
>>> y_pred = da.from_array([1, 1, 0, 0, 0, 2], chunks=2)
>>> round(metrics.adjusted_rand_score(y_true, y_pred), 6)
0.444444
>>> metrics.matched_accuracy(y_true, y_pred)
0.8333333333333334
"""

from ._contingency import contingency_table
from ._internal import calinski_harabasz_score, davies_bouldin_score, silhouette_from_distances, silhouette_score
from ._links import link_satisfaction
from ._scores import (
    adjusted_rand_score,
    confidence_weighted_accuracy,
    flicker,
    flicker_summary,
    matched_accuracy,
    normalized_mutual_info_score,
    pairwise_f_measure,
    pairwise_precision_recall,
    purity_score,
    rand_score,
    tracking_accuracy,
)

# written out (not built from the submodules' __all__): a type checker reads only a literal list as the exports
__all__ = [
    "contingency_table",
    "rand_score", "adjusted_rand_score", "normalized_mutual_info_score", "pairwise_precision_recall",
    "pairwise_f_measure", "purity_score", "matched_accuracy", "confidence_weighted_accuracy", "tracking_accuracy",
    "flicker", "flicker_summary",
    "calinski_harabasz_score", "davies_bouldin_score", "silhouette_score", "silhouette_from_distances",
    "link_satisfaction",
]
