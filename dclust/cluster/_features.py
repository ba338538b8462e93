"""Shared pieces of the feature-allocation estimators (BPMeans, KFeatures, StepwiseKFeatures): the first pass
over the data, the max_features error, and transform/predict returning the binary feature allocation Z."""

from __future__ import annotations

from typing import Callable

import dask.array as da
import numpy as np
import numpy.typing as npt

from .._dask.features import FeatureOverflow, transform_bits
from .._dask.occ import keyed_prefix
from .._validation import check_array
from ..errors import InvalidParameterError, message
from ._base import TransformerMixin, finite_rows, raise_if_bad_block, wrap_output
from ..typing import ArrayLike, Ignored

__all__ = ["FeatureMixin", "first_pass", "overflow_error"]

#: What :func:`first_pass` returns: ``(mean (1, D), sq_norm, prefix_end, prefix_index, prefix_rows)``.
FirstPass = tuple[npt.NDArray[np.float64], float, int, npt.NDArray[np.int64], npt.NDArray[np.float64]]


def first_pass(arr: da.Array, *, split_every: int | None, mix: int = 0, prefix_size: int = 0,
               check_content: Callable[..., None] | None = None) -> FirstPass:
    """One pass: NaN/inf check, the mean, ``||X||_F^2`` and the serial prefix rows (about ``prefix_size`` rows of
    lowest order key, see :func:`dclust._dask.occ.keyed_prefix`).

    ``check_content(weight, mean, scatter)``, when given (a checkpoint's), receives the one-cluster statistics.
    Returns ``(mean (1, D), sq_norm, prefix_end, prefix_index, prefix_rows)``.
    """
    stats, p_end, p_index, p_rows, _ = keyed_prefix(arr, None, mix=mix, prefix_size=prefix_size,
                                                    split_every=split_every)
    raise_if_bad_block(stats, arr)
    if check_content is not None:
        check_content(*stats.total())
    mean = stats.mean[:1].copy()
    sq_norm = float(stats.scatter[0] + stats.weight[0] * (mean[0] @ mean[0]))
    return mean, sq_norm, p_end, p_index, p_rows


def overflow_error(name: str, lam: float, max_features: int, exc: FeatureOverflow) -> InvalidParameterError:
    """The error for ``lam`` so small that more than ``max_features`` features would be opened."""
    return InvalidParameterError(
        message(
            f"{name}(lam={lam!r}, max_features={max_features})",
            f"at most max_features={max_features} features",
            f"a fit whose {exc.where} would open feature {exc.n_features} (squared residuals up to "
            f"{exc.residual:.4g} exceed lam)",
            f"Increase lam (a larger penalty per feature opens fewer features; residuals above lam open one, so "
            f"a lam near {exc.residual:.4g} or larger stops these), or raise max_features if Z (n_samples x "
            f"max_features bytes) fits in memory.",
        )
    )


class FeatureMixin(TransformerMixin):
    """transform / predict / fit_transform for models with learned features ``features_`` (K, D)."""

    def _check_features(self) -> None:
        self._check_fitted("features_")

    def transform(self, X: ArrayLike) -> ArrayLike:
        """Binary feature allocation of new rows, shape (n_samples, n_latent_features_), uint8.

        Each row starts with no feature and is swept coordinate-wise over ``features_`` (each bit set iff that
        strictly lowers ``||x - z A||^2``) until it stops changing. Returns an ndarray for numpy input and a lazy
        dask array (writable with :func:`dclust.write_array`) for dask/zarr input.
        """
        self._check_features()
        arr, info = check_array(X, n_features=self.features_.shape[1])
        return wrap_output(transform_bits(finite_rows(arr, "transform"), self.features_), info, "features")

    def predict(self, X: ArrayLike) -> ArrayLike:
        """Same as :meth:`transform`: for a feature allocation the prediction is the binary row ``z``."""
        return self.transform(X)

    def reconstruct(self, Z: ArrayLike) -> ArrayLike:
        """``Z @ features_``: the model's reconstruction of rows with allocation ``Z``."""
        self._check_features()
        return Z.astype(np.float64) @ self.features_

    def fit_transform(self, X: ArrayLike, y: Ignored = None) -> ArrayLike:
        """``fit(X)`` then the allocation learned for the training rows (``allocation_``)."""
        return self.fit(X).allocation_
