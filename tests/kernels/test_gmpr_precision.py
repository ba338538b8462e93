"""GM-PR's precision factors (dclust.kernels.gmpr.precision_cholesky): LAPACK's triangular inverse of the Cholesky
factor, so that ``P^T Σ P = I`` and ``P P^T = Σ^{-1}``; not positive definite raises LinAlgError."""

import numpy as np
import pytest
from scipy.linalg import solve_triangular

from dclust.kernels.gmpr import precision_cholesky


def test_precision_factors_whiten_every_covariance():
    rng = np.random.default_rng(3)
    A = rng.normal(size=(3, 2, 5, 5))
    cov = A @ np.swapaxes(A, -1, -2) + 0.1 * np.eye(5)
    P = precision_cholesky(cov)
    for m in range(3):
        for k in range(2):
            np.testing.assert_allclose(P[m, k].T @ cov[m, k] @ P[m, k], np.eye(5), atol=1e-10)
            np.testing.assert_allclose(P[m, k] @ P[m, k].T, np.linalg.inv(cov[m, k]), rtol=1e-8, atol=1e-10)
            low = np.linalg.cholesky(cov[m, k])
            np.testing.assert_allclose(P[m, k], solve_triangular(low, np.eye(5), lower=True).T, rtol=1e-10,
                                       atol=1e-12)
            assert np.allclose(P[m, k], np.triu(P[m, k]))  # the transpose of a lower factor's inverse


def test_not_positive_definite_raises():
    cov = np.eye(3)[None, None].repeat(2, axis=1).copy()
    cov[0, 1, 2, 2] = -1.0
    with pytest.raises(np.linalg.LinAlgError):
        precision_cholesky(cov)
    with pytest.raises(np.linalg.LinAlgError):
        precision_cholesky(np.array([[[1.0, 0.0]]]))  # diagonal variances must be positive
