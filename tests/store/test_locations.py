"""Output locations are checked before any pass over the data (a read-only or immutable directory, a path under a
regular file, an existing output without overwrite), in Python and in the CLI; stale temporaries of killed writes
are removed by the next write into the same directory and by ``dclust clean``."""

from __future__ import annotations

import os
import subprocess
import sys

import dask.array as da
import numpy as np
import pytest
from typer.testing import CliRunner

import dclust
from dclust._cli.main import app
from dclust._store._atomic import _HOST, _tmp_name, is_temporary
from dclust.errors import StorageError


def _recorded(reads: list) -> da.Array:
    """A dask array that records every block it computes (a pass over the data would show up here)."""
    x = np.arange(400 * 2, dtype=np.float64).reshape(400, 2)

    def record(block, block_info=None):
        reads.append(block_info[0]["chunk-location"])
        return block

    return da.from_array(x, chunks=(100, 2)).map_blocks(record, dtype=np.float64)


@pytest.fixture
def unwritable(tmp_path):
    """A directory nobody may create files in. As root, permission bits are not enforced (root bypasses them), so
    the directory is made immutable (chattr +i: EPERM even for root); otherwise chmod 555 is enough."""
    d = tmp_path / "immut"
    d.mkdir()
    if os.geteuid() == 0:
        if subprocess.run(["chattr", "+i", str(d)], capture_output=True).returncode != 0:
            pytest.skip("chattr +i is not permitted here")
        try:
            yield d
        finally:
            subprocess.run(["chattr", "-i", str(d)], check=True)
    else:
        d.chmod(0o555)
        try:
            yield d
        finally:
            d.chmod(0o755)


def _targets(base) -> dict:
    return {
        "write_array": lambda reads: dclust.write_array(_recorded(reads), base / "x.zarr"),
        "write_labels": lambda reads: dclust.write_labels(_recorded(reads)[:, 0].astype(np.int32), base / "l.zarr"),
        "save": lambda reads: dclust.save(dclust.KMeans(n_clusters=2).fit(np.eye(4)), base / "m.zarr"),
    }


@pytest.mark.parametrize("function", ["write_array", "write_labels", "save"])
def test_unwritable_directory_fails_before_any_work(unwritable, function):
    reads: list = []
    with pytest.raises(StorageError, match="expected a directory where dclust may create files") as info:
        _targets(unwritable)[function](reads)
    assert "received Operation not permitted" in str(info.value) or "Permission denied" in str(info.value)
    assert reads == [] and os.listdir(unwritable) == []


@pytest.mark.parametrize("function", ["write_array", "write_labels", "save"])
def test_path_under_a_regular_file_fails_before_any_work(tmp_path, function):
    (tmp_path / "file").write_text("x")
    reads: list = []
    with pytest.raises(StorageError, match="which is a regular file"):
        _targets(tmp_path / "file" / "sub")[function](reads)
    assert reads == []


def test_checkpoint_location_fails_before_any_pass(tmp_path, unwritable):
    (tmp_path / "file").write_text("x")
    X = dclust.write_array(np.random.default_rng(0).normal(size=(400, 2)), tmp_path / "x.zarr", chunks=100)
    for where in (tmp_path / "file" / "ck", unwritable / "ck"):
        events: list = []
        with dclust.on_progress(events.append), pytest.raises(StorageError, match="checkpoint"):
            dclust.KMeans(n_clusters=2, random_state=0, checkpoint=where).fit(dclust.open_array(X))
        assert events == []


def test_cli_refuses_an_unwritable_output_before_the_fit(tmp_path, unwritable):
    X = dclust.write_array(np.random.default_rng(0).normal(size=(400, 2)), tmp_path / "x.zarr", chunks=100)
    (tmp_path / "file").write_text("x")
    for labels in (unwritable / "l.zarr", tmp_path / "file" / "l.zarr"):
        r = CliRunner().invoke(app, ["fit", "kmeans", X, "--k", "2", "--labels", str(labels),
                                     "--model", str(tmp_path / "m.zarr"), "--quiet"])
        assert r.exit_code == 1, r.output
        (line,) = [x for x in r.output.splitlines() if x.strip()]
        assert line.startswith("dclust: error: --labels") and "expected" in line and "Errno" not in line
        assert not (tmp_path / "m.zarr").exists()  # nothing was fitted or written


def _stale(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    names = {
        "dead": f".a.zarr.tmp-{_HOST}-{dead.pid}-0123456789ab",
        "dead_other": f".b.zarr.tmp-{_HOST}-{dead.pid}-0123456789ab",
        "dead_file": f".c.png.tmp-{_HOST}-{dead.pid}-0123456789ab.png",
        "live": f".a.zarr.tmp-{_HOST}-{live.pid}-0123456789ab",
        "other_host": f".a.zarr.tmp-{_HOST}x-{dead.pid}-0123456789ab",
        "old": f".a.zarr.old-{_HOST}-{dead.pid}-0123456789ab",
    }
    for key, name in names.items():
        if key == "dead_file":
            (tmp_path / name).write_bytes(b"half")
        else:
            (tmp_path / name).mkdir()
            (tmp_path / name / "zarr.json").write_text("{}")
    return names, live


def _check_cleaned(tmp_path, names):
    left = set(os.listdir(tmp_path))
    assert not {names[k] for k in ("dead", "dead_other", "dead_file")} & left
    assert {names[k] for k in ("live", "other_host", "old")} <= left


@pytest.mark.parametrize("output", ["a.zarr", "unrelated.zarr"])
def test_a_write_into_the_same_directory_removes_stale_temporaries(tmp_path, output):
    names, live = _stale(tmp_path)
    try:
        dclust.write_labels(np.zeros(10, np.int32), tmp_path / output)
        _check_cleaned(tmp_path, names)
        assert is_temporary(names["live"]) and is_temporary(names["old"]) and not is_temporary(output)
    finally:
        live.kill()
        live.wait()
    tmp = os.path.basename(_tmp_name(str(tmp_path), "x.zarr", "tmp"))
    assert tmp.startswith(f".x.zarr.tmp-{_HOST}-{os.getpid()}-") and is_temporary(tmp)


def test_dclust_clean(tmp_path):
    names, live = _stale(tmp_path)
    try:
        r = CliRunner().invoke(app, ["clean", str(tmp_path), "--json"])
        assert r.exit_code == 0, r.output
        _check_cleaned(tmp_path, names)
        assert '"removed"' in r.output and names["dead"] in r.output
        assert dclust.io.clean(tmp_path) == []  # nothing left to remove
        assert not dclust.io.clean(tmp_path / "a.zarr")  # an output path: its temporaries only
    finally:
        live.kill()
        live.wait()
