"""Helpers of the GM-PR kernel tests: overlapping diagonal mixtures and the comparison with the float64 numpy twin."""

import numpy as np

from dclust.kernels.gmpr import MixtureParams


def assert_close_to_twin(a, b, dtype):
    """``a`` (the numba E-step) equals ``b`` (the float64 numpy twin) to rounding for float64 rows; float32 rows of
    overlapping components take the float32 E-step (:func:`dclust.kernels.gmpr._diag_kernel32`), within a few
    float32 roundings of the log-densities (``F32_RTOL``)."""
    rtol = 1e-10 if dtype == np.float64 else F32_RTOL
    np.testing.assert_allclose(a.weight, b.weight, rtol=rtol)
    np.testing.assert_allclose(a.mean, b.mean, rtol=rtol, atol=rtol * np.abs(b.mean).max())
    np.testing.assert_allclose(a.scatter, b.scatter, rtol=rtol)
    assert abs(a.loglik / b.loglik - 1) < rtol / 100


#: How close the float32 E-step's statistics are to the float64 twin's on these tests' data (measured: below 8e-7).
F32_RTOL = 2e-6


def overlapping(rng, n, D=6, M=4, K=2):
    means = rng.normal(size=(M, K, D))
    p = MixtureParams.build(np.full(M, 1 / M), np.full((M, K), 1 / K), means, rng.uniform(1.0, 2.0, (M, K, D)))
    return rng.normal(size=(n, D)) * 2, p
