"""scikit-learn's own estimator checks (``parametrize_with_checks``) on every dclust estimator.

Each estimator is checked with parameters that suit scikit-learn's check data (a few dozen standardised rows):
the penalties of the DP-means family are in squared-distance units, so they are scaled to unit variance here.
The checks an estimator cannot pass are listed in ``EXPECTED_FAILED`` with the reason; scikit-learn then runs them
as expected failures (xfail), so a check that starts passing is reported.
"""

from __future__ import annotations

import inspect

import pytest
from sklearn.utils.estimator_checks import parametrize_with_checks

import dclust
from dclust._registry import ESTIMATORS

#: Parameters for scikit-learn's check data (about 50 standardised rows, 2-10 features).
CHECK_CONFIGS = {
    "KMeans": dict(n_clusters=3, random_state=0, init="k-means++"),
    "DPMeans": dict(n_clusters=3, random_state=0, prefix_size=50, max_proposals=16),
    "RDPMeans": dict(n_clusters=3, random_state=0, prefix_size=50, max_proposals=16, max_iter=4),
    "BPMeans": dict(lam=1.0, random_state=0, prefix_size=50, max_proposals=16, max_iter=5),
    "KFeatures": dict(n_components=3, random_state=0, max_iter=5),
    "StepwiseKFeatures": dict(lam=20.0, random_state=0, max_iter=3, max_features=10),
    "GMPR": dict(n_classes=3, random_state=0, max_iter=5, tol=1e-3),
    "TVClust": dict(random_state=0, n_sweeps=3),
    "CollapsedDPMeans": dict(lam=1.0, random_state=0),
    "CappedDPMeans": dict(lam=1.0, max_clusters=4, random_state=0),
    "CollapsedBPMeans": dict(lam=1.0, random_state=0, max_iter=2),
    "DPMMGibbs": dict(n_iter=10, sigma2=0.1, random_state=0),
    "SpectralClustering": dict(n_clusters=3, affinity="nearest_neighbors", n_neighbors=5, n_init=2, random_state=0),
    "IBPGibbs": dict(sigma_x=1.0, sigma_a=10.0, n_iter=3, random_state=0),
    "AnytimeDPMeans": dict(lam=1.0, random_state=0),
    "DynamicMeans": dict(lam=1.0, T_Q=5.0, k_tau=1.1, random_state=0),
    "SpectralDynamicMeans": dict(lam=1.0, T_Q=5.0, k_tau=1.1, kernel="linear", random_state=0),
    "KernelDynamicMeans": dict(lam=1.0, T_Q=5.0, k_tau=1.1, kernel="linear", random_state=0),
    "TVClustVariational": dict(random_state=0, max_iter=10),
    "MPCKMeans": dict(n_clusters=3, random_state=0, max_iter=10),
    "LCVQE": dict(n_clusters=3, random_state=0, max_iter=20),
    "MahalanobisKMeans": dict(n_clusters=3, lam=1.0, random_state=0, max_iter=10),
    "COPKMeans": dict(n_clusters=3, random_state=0, n_init=2),
}

_SAMPLE_WEIGHT = ("dclust's seeding draws rows with probabilities that depend on the weights, so a weight of 2 "
                  "is not the same random draw as a repeated row (as for scikit-learn's KMeans)")
_OBJECT = ("object arrays are refused (InvalidDataError, a ValueError: dclust errors are one family), even of "
           "numbers: convert them to float first")
_ONE_SAMPLE = ("with one sample the n_clusters heuristic has no distance to choose lam from; the error says so "
               "(fewer distinct points than n_clusters) without scikit-learn's phrase")

_EMPTY_STEP = ("a stream's fit takes an empty batch as a valid time step (its clusters age and may die), so 0 rows "
               "are not an error")
_NOT_AN_ARRAY = ("DynamicMeans.fit takes a numpy array as one time step and any other iterable (here an array-like "
                 "that is not an ndarray) as a sequence of time steps")
_ZERO_WEIGHT = "D-Means refuses a weight of 0 (every observed cluster needs w > 0); the check gives zeros"

#: check name -> reason, per estimator; every estimator refuses object arrays (``_OBJECT``).
EXPECTED_FAILED: dict[str, dict[str, str]] = {
    "KMeans": {"check_sample_weight_equivalence_on_dense_data": _SAMPLE_WEIGHT},
    "DPMeans": {"check_sample_weight_equivalence_on_dense_data": _SAMPLE_WEIGHT, "check_fit2d_1sample": _ONE_SAMPLE},
    "RDPMeans": {"check_fit2d_1sample": _ONE_SAMPLE},
    "AnytimeDPMeans": {"check_sample_weight_equivalence_on_dense_data": _ZERO_WEIGHT},
    "DynamicMeans": {"check_sample_weight_equivalence_on_dense_data": _ZERO_WEIGHT,
                     "check_estimators_empty_data_messages": _EMPTY_STEP,
                     "check_sample_weights_not_an_array": _NOT_AN_ARRAY},
    "SpectralDynamicMeans": {"check_estimators_empty_data_messages": _EMPTY_STEP},
    "KernelDynamicMeans": {"check_estimators_empty_data_messages": _EMPTY_STEP},
}


def _expected_failures(estimator) -> dict[str, str]:
    return {"check_dtype_object": _OBJECT, **EXPECTED_FAILED.get(type(estimator).__name__, {})}


def _estimators():
    for name in sorted(CHECK_CONFIGS):
        yield ESTIMATORS[name](**CHECK_CONFIGS[name])


def test_every_estimator_is_checked():
    import importlib.util
    import pathlib

    spec = importlib.util.spec_from_file_location(
        "common", pathlib.Path(__file__).parents[1] / "cluster" / "test_common.py")
    common = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(common)
    public = {n for n in dclust.__all__ if inspect.isclass(getattr(dclust, n)) and hasattr(getattr(dclust, n), "fit")}
    everything = public | set(common.CONFIGS)
    assert everything == set(CHECK_CONFIGS)


@parametrize_with_checks(list(_estimators()),
                         expected_failed_checks=_expected_failures)
def test_sklearn_check(estimator, check):
    check(estimator)


@pytest.fixture(autouse=True)
def _synchronous_dask():
    """scikit-learn's check data are a few dozen rows: one thread computes them faster than a pool."""
    import dask

    with dask.config.set(scheduler="synchronous"):
        yield
