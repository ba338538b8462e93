"""Results independent of layout (ARCHITECTURE rule 12): the same data and ``random_state`` give the same model for
any row chunking, any grouping of blocks into tasks and any number of workers.

DP-means' serial order is a function of the seed and the global row index alone (order keys), so K, the labels and
the centres (up to summation rounding) do not move with the layout; ``serial_order_`` stays the oracle.
"""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dclust
from dclust._dask import passes
from dclust.kernels.dpmeans import dpmeans_reference

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def overlapping():
    """Overlapping blobs: the case where the serial order matters most (many proposals, many epochs)."""
    return dclust.make_blobs(3000, 3, 12, cluster_std=2.5, chunk_rows=3000, random_state=4).X.compute()


def _fit(X, chunks, **kw):
    params = dict(lam=60.0, random_state=7, prefix_size=60, max_proposals=32, max_iter=40)
    return dclust.DPMeans(**{**params, **kw}).fit(da.from_array(X, chunks=(chunks, -1)))


def _same_model(a, b, X):
    assert a.n_clusters_ == b.n_clusters_
    assert a.n_iter_ == b.n_iter_
    np.testing.assert_allclose(a.cluster_centers_, b.cluster_centers_, rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(a.predict(X), b.predict(X))


def _irregular(n, cuts):
    edges = sorted({0, n, *[c % n for c in cuts]})
    return tuple(b - a for a, b in zip(edges[:-1], edges[1:]) if b > a)


def test_the_issue_case_same_k_for_three_chunkings(overlapping):
    fits = [_fit(overlapping, c) for c in (250, 350, 3000)]
    for other in fits[1:]:
        _same_model(fits[0], other, overlapping)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cuts=st.lists(st.integers(1, 2999), min_size=0, max_size=12), tasks=st.integers(1, 9))
def test_any_chunking_and_task_grouping_gives_the_same_model(overlapping, cuts, tasks, monkeypatch):
    reference = _fit(overlapping, 3000)
    monkeypatch.setattr(passes, "TASKS_PER_THREAD", tasks)
    monkeypatch.setattr(passes, "MIN_BLOCKS_PER_TASK", 1)
    other = _fit(overlapping, _irregular(len(overlapping), cuts))
    _same_model(reference, other, overlapping)


def test_the_serial_order_is_the_oracle_for_any_chunking(overlapping):
    fit = _fit(overlapping, (700, 900, 1400))
    labels, centers, history = dpmeans_reference(overlapping, 60.0, fit.serial_order_, max_iter=40)
    assert centers.shape[0] == fit.n_clusters_
    np.testing.assert_allclose(history, fit.objective_history_, rtol=1e-9)
    same = _fit(overlapping, 3000)
    assert [o.tolist() for o in same.serial_order_] == [o.tolist() for o in fit.serial_order_]


@pytest.mark.parametrize("n_workers", [1, 3])
def test_any_number_of_workers_gives_the_same_model(overlapping, n_workers):
    from distributed import Client, LocalCluster

    reference = _fit(overlapping, 500)
    with LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=False, dashboard_address=None,
                      memory_limit=0) as cluster, Client(cluster):
        X = da.from_array(overlapping, chunks=(300, -1)).persist()
        other = dclust.DPMeans(lam=60.0, random_state=7, prefix_size=60, max_proposals=32, max_iter=40).fit(X)
    _same_model(reference, other, overlapping)
