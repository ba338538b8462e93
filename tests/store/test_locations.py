"""Output locations are checked before any pass over the data (a read-only or immutable directory, a path under a
regular file, an existing output without overwrite), in Python and in the CLI; stale temporaries of killed writes
are removed by the next write into the same directory and by ``dclust clean``."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Callable

import dask
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


#: uid and gid of ``nobody``: as root, where the directory cannot be made immutable, the write runs as nobody.
NOBODY = 65534


class Unwritable:
    """A directory nobody may create files in (``path``), beside a directory every user may read (``base``, for
    the inputs of a test), and :meth:`run`, which runs a test's check against them.

    As root, permission bits are not enforced (root bypasses them): the directory is made immutable (``chattr +i``:
    EPERM even for root) and the check runs here; where the kernel refuses ``chattr +i`` (no CAP_LINUX_IMMUTABLE),
    the directory is chmod 555 and the check runs in a forked child that has dropped to uid/gid 65534 (nobody). As
    any other user, chmod 555 is enough and the check runs here.
    """

    def __init__(self, base: Path, as_nobody: bool) -> None:
        self.base, self.path, self.as_nobody = base, base / "immut", as_nobody

    def run(self, check: Callable[[Path], None], timeout: float = 120.0) -> None:
        """``check(path)``; as nobody in a child process when the directory is only chmod 555 and we are root."""
        if not self.as_nobody:
            check(self.path)
            return
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: never returns into pytest
            status = 1
            try:
                os.close(read)
                os.setgroups([])
                os.setgid(NOBODY)
                os.setuid(NOBODY)
                with dask.config.set(scheduler="synchronous"):  # no thread pool of the parent (its threads are gone)
                    check(self.path)
                status = 0
            except BaseException:  # noqa: BLE001 - every failure goes back to the parent as text
                os.write(write, traceback.format_exc().encode())
            finally:
                os._exit(status)
        os.close(write)
        deadline = time.monotonic() + timeout
        while (done := os.waitpid(pid, os.WNOHANG))[0] == 0:
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                pytest.fail(f"the check did not finish in {timeout:.0f} s as nobody (did a pass over the data start?)")
            time.sleep(0.05)
        with os.fdopen(read, "rb") as f:
            report = f.read().decode(errors="replace")
        assert os.waitstatus_to_exitcode(done[1]) == 0, f"the check failed as nobody (uid {NOBODY}):\n{report}"


@pytest.fixture
def unwritable():
    base = Path(tempfile.mkdtemp(prefix="dclust-locations-"))
    base.chmod(0o755)  # traversable and readable by nobody (tmp_path's parents are private to the user)
    d = base / "immut"
    d.mkdir()
    immutable = False
    if os.geteuid() == 0:
        try:
            immutable = subprocess.run(["chattr", "+i", str(d)], capture_output=True).returncode == 0
        except OSError:  # no chattr at all
            immutable = False
    if not immutable:
        d.chmod(0o555)
    try:
        yield Unwritable(base, as_nobody=os.geteuid() == 0 and not immutable)
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(d)], check=True)
        d.chmod(0o755)
        shutil.rmtree(base)


def _targets(base) -> dict:
    model = dclust.KMeans(n_clusters=2).fit(np.eye(4))  # fitted here: only the writes are timed against base
    return {
        "write_array": lambda reads: dclust.write_array(_recorded(reads), base / "x.zarr"),
        "write_labels": lambda reads: dclust.write_labels(_recorded(reads)[:, 0].astype(np.int32), base / "l.zarr"),
        "save": lambda reads: dclust.save(model, base / "m.zarr"),
    }


@pytest.mark.parametrize("function", ["write_array", "write_labels", "save"])
def test_unwritable_directory_fails_before_any_work(unwritable, function):
    write = _targets(unwritable.path)[function]

    def check(d):
        reads: list = []
        with pytest.raises(StorageError, match="expected a directory where dclust may create files") as info:
            write(reads)
        assert "received Operation not permitted" in str(info.value) or "Permission denied" in str(info.value)
        assert reads == [] and os.listdir(d) == []

    unwritable.run(check)


@pytest.mark.parametrize("function", ["write_array", "write_labels", "save"])
def test_path_under_a_regular_file_fails_before_any_work(tmp_path, function):
    (tmp_path / "file").write_text("x")
    reads: list = []
    with pytest.raises(StorageError, match="which is a regular file"):
        _targets(tmp_path / "file" / "sub")[function](reads)
    assert reads == []


def test_checkpoint_location_fails_before_any_pass(unwritable):
    base = unwritable.base
    (base / "file").write_text("x")
    X = dclust.write_array(np.random.default_rng(0).normal(size=(400, 2)), base / "x.zarr", chunks=100)

    def check(d):
        for where in (base / "file" / "ck", d / "ck"):
            events: list = []
            with dclust.on_progress(events.append), pytest.raises(StorageError, match="checkpoint"):
                dclust.KMeans(n_clusters=2, random_state=0, checkpoint=where).fit(dclust.open_array(X))
            assert events == []

    unwritable.run(check)


def test_cli_refuses_an_unwritable_output_before_the_fit(unwritable):
    base = unwritable.base
    X = dclust.write_array(np.random.default_rng(0).normal(size=(400, 2)), base / "x.zarr", chunks=100)
    (base / "file").write_text("x")
    (base / "out").mkdir(mode=0o777)
    (base / "out").chmod(0o777)  # the model's directory is writable by anyone: only --labels may be refused

    def check(d):
        for labels in (d / "l.zarr", base / "file" / "l.zarr"):
            r = CliRunner().invoke(app, ["fit", "kmeans", X, "--k", "2", "--labels", str(labels),
                                         "--model", str(base / "out" / "m.zarr"), "--quiet"])
            assert r.exit_code == 1, r.output
            (line,) = [x for x in r.output.splitlines() if x.strip()]
            assert line.startswith("dclust: error: --labels") and "expected" in line and "Errno" not in line
            assert not (base / "out" / "m.zarr").exists()  # nothing was fitted or written

    unwritable.run(check)


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
