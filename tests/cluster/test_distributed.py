"""Fitting on a real distributed.LocalCluster gives exactly the model of the default (threaded) scheduler."""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np
import pytest
import zarr

import dclust


@pytest.mark.parametrize(
    "make,min_ari",
    [
        (lambda: dclust.KMeans(n_clusters=5, random_state=3), 0.95),
        # DP-means is a local search; with the heuristic lam it merges two of the five blobs here
        (lambda: dclust.DPMeans(n_clusters=5, random_state=3, prefix_size=40, max_proposals=8), 0.7),
    ],
    ids=["KMeans", "DPMeans"],
)
def test_fit_on_a_local_cluster_equals_the_threaded_scheduler(make, min_ari, blobs, tmp_path, client):
    X, y = blobs
    store = tmp_path / "x.zarr"
    dclust.write_array(da.from_array(X.astype(np.float32), chunks=(500, -1)), store)
    data = dclust.open_array(store)

    remote = make().fit(data)
    labels = remote.predict(data)
    dclust.write_labels(labels, tmp_path / "labels.zarr")
    with dask.config.set(scheduler="threads"):
        local = make().fit(data)

    np.testing.assert_array_equal(remote.cluster_centers_, local.cluster_centers_)
    assert remote.objective_history_ == local.objective_history_
    written = zarr.open_array(str(tmp_path / "labels.zarr"), mode="r")[:]
    with dask.config.set(scheduler="threads"):
        np.testing.assert_array_equal(written, local.predict(data).compute())
    assert dclust.metrics.adjusted_rand_score(y, written) > min_ari
    assert client.run(lambda: True)  # the work really ran on the cluster's workers


def test_workers_report_every_chunk_they_finish(blobs, client):
    """The CLI's live "chunks done" counter: one event per processed row chunk, logged by the worker."""
    import time

    from dclust._dask.passes import CHUNK_DONE_TOPIC

    seen = []
    client.subscribe_topic(CHUNK_DONE_TOPIC, seen.append)
    try:
        X = da.from_array(blobs[0], chunks=(500, -1))
        km = dclust.KMeans(n_clusters=5, random_state=0, init="random", max_iter=3, tol=0).fit(X)
        deadline = time.monotonic() + 10
        while sum(msg for _, msg in seen) < km.n_iter_ * X.numblocks[0] and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        client.unsubscribe_topic(CHUNK_DONE_TOPIC)
    counts = [msg for _, msg in seen]  # chunks done per task
    assert sum(counts) >= km.n_iter_ * X.numblocks[0]
    assert all(isinstance(c, int) and c >= 1 for c in counts)


def test_a_task_of_many_chunks_reports_them_while_it_runs(client):
    """A task reports its chunks every ``PROGRESS_INTERVAL`` (0.5 s) seconds, not only at its end: 6 chunks of 0.3 s
    in 2 tasks (one per thread) give more events than tasks, and every chunk once."""
    import time

    from dclust._dask.passes import CHUNK_DONE_TOPIC, PROGRESS_INTERVAL, block_groups, map_reduce

    assert PROGRESS_INTERVAL == 0.5 and len(block_groups(6)) == 2
    seen = []
    client.subscribe_topic(CHUNK_DONE_TOPIC, seen.append)
    try:
        X = da.from_array(np.zeros((60, 2)), chunks=(10, 2))
        slow = lambda Xb, offset, block_index: __import__("time").sleep(0.3) or 1  # noqa: E731
        assert map_reduce(slow, sum, X).compute()[()] == 6
        deadline = time.monotonic() + 10
        while sum(msg for _, msg in seen) < 6 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        client.unsubscribe_topic(CHUNK_DONE_TOPIC)
    counts = [msg for _, msg in seen]
    assert sum(counts) == 6 and len(counts) > 2 and min(counts) < 3

