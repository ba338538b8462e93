"""Information criteria of fitted mixtures: the Bayesian information criterion (Schwarz 1978) of GM-PR."""

from __future__ import annotations

import math
import numbers
from typing import Any

from ..cluster import GMPR
from ..errors import InvalidDataError, InvalidParameterError, NotFittedError, message

__all__ = ["bic", "n_parameters"]


def n_parameters(model: GMPR) -> int:
    """Free parameters of a fitted :class:`dclust.GMPR`.

    ``(M - 1)`` class weights, ``M (m_K - 1)`` sub-cluster weights, ``M m_K D`` means and ``M m_K D (D + 1) / 2``
    (``"full"``) or ``M m_K D`` (``"diag"``) covariance entries.

    Examples
    --------
    >>> import numpy as np, dclust
    >>> from dclust.model_selection import n_parameters
    >>> X = np.random.default_rng(0).normal(size=(60, 2))
    >>> n_parameters(dclust.GMPR(n_classes=2, tol=1e-3, random_state=0).fit(X))
    11
    """
    if not isinstance(model, GMPR):
        raise InvalidParameterError(message("model", "a fitted dclust.GMPR", type(model).__name__,
                                            "Fit a GMPR first, e.g. dclust.GMPR(n_classes=3).fit(X)."))
    if not hasattr(model, "log_likelihood_"):
        raise NotFittedError(message("model", "a fitted dclust.GMPR", "an unfitted GMPR", "Call model.fit(X) first."))
    m, mk, d = int(model.n_classes), int(model.clusters_per_class), int(model.n_features_in_)
    cov = d * (d + 1) // 2 if model.covariance_type == "full" else d
    return (m - 1) + m * (mk - 1) + m * mk * d + m * mk * cov


def bic(model: GMPR, X: Any) -> float:
    """Bayesian information criterion ``-2 log L + p log N`` of a fitted GM-PR model (lower is better).

    ``log L`` is ``model.log_likelihood_`` (docs/algorithms.md 6.2, at the final parameters of the fit on ``X``): with
    no links it is the mixture log-likelihood and the value equals scikit-learn's ``GaussianMixture.bic`` for
    the same parameters; with links it is the composite likelihood of E-GP2, so compare BICs of fits on the same
    data and links. ``p`` is :func:`n_parameters`, ``N`` the number of rows of ``X`` (read from its metadata, no
    pass; an integer is accepted too).

    Parameters
    ----------
    model : dclust.GMPR
        Fitted on ``X``.
    X : array-like, dask or zarr array of shape (n_samples, n_features), or int
        The data of the fit, or its number of rows.

    Returns
    -------
    float

    Examples
    --------
    >>> import dclust
    >>> from dclust.model_selection import bic
    >>> X = dclust.make_blobs(200, 2, centers=[[0, 0], [8, 8]], random_state=0).X
    >>> scores = {m: bic(dclust.GMPR(n_classes=m, max_iter=20, random_state=0).fit(X), X) for m in (1, 2)}
    >>> min(scores, key=scores.get)
    2
    """
    p = n_parameters(model)
    if isinstance(X, numbers.Integral) and not isinstance(X, bool):
        n = int(X)
    else:
        shape = getattr(X, "shape", None)
        if shape is None or len(shape) != 2 or (isinstance(shape[0], float) and math.isnan(shape[0])):
            raise InvalidDataError(message("X", "the (n_samples, n_features) data of the fit, or n_samples",
                                           f"{type(X).__name__} with shape {shape}", "Pass X or X.shape[0]."))
        if int(shape[1]) != int(model.n_features_in_):
            raise InvalidDataError(message("X", f"{model.n_features_in_} features (as in the fit)",
                                           f"{shape[1]} features", "Pass the data the model was fitted on."))
        n = int(shape[0])
    if n < 1:
        raise InvalidDataError(message("n_samples", "at least 1", str(n), "Pass the data the model was fitted on."))
    return float(-2.0 * model.log_likelihood_ + p * math.log(n))
