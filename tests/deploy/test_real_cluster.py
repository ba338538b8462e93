"""End to end on a real Dask cluster: `dask scheduler` and two `dask worker` OS processes on 127.0.0.1.

The CLI pointed at it (``--scheduler``) gives the same model as the embedded LocalCluster and as numpy, and a
worker killed in the middle of a fit changes nothing: Dask recomputes the lost chunks from the store, and dclust
keeps no state only on a worker.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import dask.array as da
import numpy as np
import pytest
import zarr

import dclust
from _support.processes import BIN, dask_processes


@pytest.fixture(scope="module")
def dask_cluster(tmp_path_factory):
    """A scheduler and two single-threaded worker processes (no nanny: killing one really loses it)."""
    with dask_processes(tmp_path_factory.mktemp("cluster"), 2) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    rng = np.random.default_rng(5)
    centers = rng.uniform(-10, 10, size=(6, 4))
    X = (centers[rng.integers(0, 6, 20_000)] + rng.normal(size=(20_000, 4))).astype(np.float32)
    path = tmp_path_factory.mktemp("data") / "points.zarr"
    dclust.write_array(da.from_array(X, chunks=(2_500, -1)), path)
    return path, X


def _cli(*args: str) -> dict:
    out = subprocess.run([str(BIN / "dclust"), *args, "--json", "--quiet"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.parametrize("algo,size", [("kmeans", ["--k", "6"]), ("dpmeans", ["--lam", "60"])])
def test_cli_on_a_real_cluster_equals_the_local_cluster_and_numpy(dask_cluster, store, tmp_path, algo, size):
    address, _ = dask_cluster
    path, X = store
    for name, extra in (("remote", ["--scheduler", address]), ("local", [])):
        _cli("fit", algo, str(path), *size, "--seed", "0", "--labels", str(tmp_path / f"{name}-labels.zarr"),
             "--model", str(tmp_path / f"{name}.zarr"), *extra)
    remote, local = dclust.load(tmp_path / "remote.zarr"), dclust.load(tmp_path / "local.zarr")
    np.testing.assert_array_equal(remote.cluster_centers_, local.cluster_centers_)
    labels = [zarr.open_array(str(tmp_path / f"{n}-labels.zarr"), mode="r")[:] for n in ("remote", "local")]
    np.testing.assert_array_equal(labels[0], labels[1])
    # numpy input, chunked like the store, gives the same model again
    in_memory = type(remote)(**remote.get_params()).fit(da.from_array(X, chunks=(2_500, -1)))
    np.testing.assert_allclose(in_memory.cluster_centers_, remote.cluster_centers_, rtol=1e-10)


def _stream(model, X):
    """Four time steps of 5,000 rows, each a dask batch of two row chunks (OCC within the batch)."""
    for t in range(4):
        model.partial_fit(X[t * 5_000:(t + 1) * 5_000].rechunk((2_500, -1)))
    return model


class _Streamed:
    """DynamicMeans driven through ``fit`` like the batch estimators, so the same kill test applies."""

    def __init__(self):
        self.model = dclust.DynamicMeans(lam=60.0, T_Q=5.0, k_tau=1.1, random_state=1)

    def fit(self, X):
        _stream(self.model, X)
        self.cluster_centers_ = self.model.cluster_centers_
        self.objective_history_ = self.model.history_["objective"]
        return self


@pytest.mark.parametrize(
    "make",
    [lambda: dclust.KMeans(n_clusters=6, random_state=1, max_iter=8, tol=0, persist=True),
     lambda: dclust.DPMeans(lam=60.0, random_state=1, persist=True),
     _Streamed],
    ids=["KMeans", "DPMeans", "DynamicMeans"],
)
def test_a_worker_killed_mid_fit_changes_nothing(dask_cluster, store, make):
    from distributed import Client

    address, procs = dask_cluster
    path, _ = store
    with Client(address, timeout=30) as client:
        undisturbed = make().fit(dclust.open_array(path))
        victim = procs[-1]
        killed = []

        def kill_after_first_iteration(event):
            if event.phase == "iter" and event.iteration == 1 and not killed:
                os.kill(victim.pid, signal.SIGKILL)
                victim.wait(timeout=30)
                killed.append(event)

        with dclust.on_progress(kill_after_first_iteration):
            disturbed = make().fit(dclust.open_array(path))
        assert killed, "the fit never reached its first iteration"
        assert len(client.scheduler_info()["workers"]) == 1
        # restart the victim so later tests have two workers again
        sched_file = Path(victim.args[victim.args.index("--scheduler-file") + 1])
        procs[-1] = subprocess.Popen(victim.args, cwd=sched_file.parent, stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL)
        client.wait_for_workers(2, timeout=90)
    np.testing.assert_array_equal(disturbed.cluster_centers_, undisturbed.cluster_centers_)
    assert disturbed.objective_history_ == undisturbed.objective_history_
