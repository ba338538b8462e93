"""Driver failure: the client process running ``dclust fit dpmeans ... --checkpoint CK`` is SIGKILLed; the same
command run again resumes from the checkpoint and writes the model and labels of an undisturbed run. A driver
killed while writing never leaves a partial output under a final name.

The drivers are real subprocesses connected (``--scheduler``) to a cluster that outlives them; the kill comes
from inside the driver (a progress callback, or a wrapper around the atomic write, in a small launcher script),
so it lands at a known point without timing races.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import dask.array as da
import numpy as np
import pytest
import zarr

import dclust

LAUNCHER = textwrap.dedent('''
    """Run the dclust CLI and SIGKILL this process at a chosen point: after iteration N, or just before the
    labels store is renamed into place (its data complete under the temporary name)."""
    import os, signal, sys

    import dclust
    import dclust.io._write as write_module
    from dclust._cli.main import app

    mode, at, argv = sys.argv[1], int(sys.argv[2]), sys.argv[3:]

    def die():
        os.kill(os.getpid(), signal.SIGKILL)

    def on_event(event):
        if mode == "iter" and event.phase == "iter" and event.iteration == at:
            die()

    if mode == "commit":
        real = write_module._atomic_write

        def atomic_write(target, write, **kw):
            def write_then_die(tmp):
                write(tmp)
                if os.path.basename(target) == "labels.zarr":
                    die()
            return real(target, write_then_die, **kw)

        write_module._atomic_write = atomic_write

    with dclust.on_progress(on_event):
        app(argv, prog_name="dclust")
''')


@pytest.fixture(scope="module")
def address():
    """A scheduler and one worker (threads of this test process) that outlive every driver process."""
    from distributed import LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False, protocol="tcp", host="127.0.0.1",
                      dashboard_address=None) as cluster:
        yield cluster.scheduler_address


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    rng = np.random.default_rng(7)
    centers = rng.uniform(-30, 30, size=(6, 3))
    X = (centers[rng.integers(0, 6, 6000)] + rng.normal(size=(6000, 3))).astype(np.float32)
    path = tmp_path_factory.mktemp("data") / "points.zarr"
    dclust.write_array(da.from_array(X, chunks=(1000, -1)), path)
    return str(path)


def cli(*args, kill=None, cwd):
    """Run ``dclust ARGS`` in a new process (through the launcher when ``kill=(mode, at)``)."""
    if kill is None:
        cmd = [str(Path(sys.executable).parent / "dclust"), *map(str, args)]
    else:
        launcher = cwd / "launcher.py"
        launcher.write_text(LAUNCHER)
        cmd = [sys.executable, str(launcher), kill[0], str(kill[1]), *map(str, args)]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=300)


def fit_args(store, out, address, *extra):
    return ["fit", "dpmeans", store, "--lam", 80, "--seed", 0, "--labels", out / "labels.zarr",
            "--model", out / "model.zarr", "--scheduler", address, "--json", "--quiet", *extra]


def visible(out):
    return sorted(e for e in os.listdir(out) if not e.startswith("."))


def same_outputs(out, ref):
    """The model and labels the CLI wrote in ``out`` are those of the undisturbed fit ``ref``."""
    (expected, labels), model = ref, dclust.load(out / "model.zarr")
    np.testing.assert_array_equal(model.cluster_centers_, expected.cluster_centers_)
    assert model.objective_history_ == expected.objective_history_ and model.n_iter_ == expected.n_iter_
    assert model.assignment_objective_history_ == expected.assignment_objective_history_
    np.testing.assert_array_equal(zarr.open_array(str(out / "labels.zarr"), mode="r")[...], labels)


@pytest.fixture(scope="module")
def undisturbed(store):
    """The fit the CLI runs, undisturbed, in this process (the same model on any scheduler)."""
    X = dclust.open_array(store)
    model = dclust.DPMeans(lam=80.0, random_state=0).fit(X)
    assert model.n_iter_ >= 3 and model.converged_
    return model, model.predict(X).compute()


def test_driver_killed_after_iteration_2_resumes_to_the_undisturbed_result(store, address, undisturbed, tmp_path):
    ck = tmp_path / "ck.zarr"
    r = cli(*fit_args(store, tmp_path, address, "--checkpoint", ck), kill=("iter", 2), cwd=tmp_path)
    assert r.returncode == -signal.SIGKILL, r.stderr
    assert visible(tmp_path) == ["ck.zarr", "launcher.py"]  # no labels, no model: nothing half-written
    state = json.loads((ck / "zarr.json").read_text())["attributes"]["dclust_checkpoint"]["state"]
    assert state["phase"] == "iter" and state["loop"]["iteration"] == 2

    r = cli(*fit_args(store, tmp_path, address, "--checkpoint", ck), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["resumed"] is True and out["checkpoint"] == str(ck)
    same_outputs(tmp_path, undisturbed)
    assert visible(tmp_path) == ["ck.zarr", "labels.zarr", "launcher.py", "model.zarr"]


def test_driver_killed_before_the_labels_are_renamed_leaves_no_labels(store, address, undisturbed, tmp_path):
    ck = tmp_path / "ck.zarr"
    r = cli(*fit_args(store, tmp_path, address, "--checkpoint", ck), kill=("commit", 0), cwd=tmp_path)
    assert r.returncode == -signal.SIGKILL, r.stderr
    # every label chunk was written, but only under the temporary name: nothing visible under labels.zarr
    assert visible(tmp_path) == ["ck.zarr", "launcher.py"]
    assert any(e.startswith(".labels.zarr.tmp-") for e in os.listdir(tmp_path))
    assert json.loads((ck / "zarr.json").read_text())["attributes"]["dclust_checkpoint"]["state"]["phase"] == "done"

    r = cli(*fit_args(store, tmp_path, address, "--checkpoint", ck), cwd=tmp_path)  # returns the finished fit
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["resumed"] is True
    same_outputs(tmp_path, undisturbed)
    # the killed driver's temporary labels were removed by the rerun (its process is gone)
    assert not [e for e in os.listdir(tmp_path) if ".tmp-" in e]
