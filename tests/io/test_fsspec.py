"""Storage beyond local disk: every path dclust reads or writes is an fsspec URL opened through zarr's store layer.

``file://`` URLs go through the local atomic rename; ``memory://`` (an in-process object store without rename)
goes through the object-store commit (temporary prefix, commit record, copies with the root ``zarr.json`` last).
``memory://`` lives in this process, so these tests use dask's threaded scheduler.
"""

from __future__ import annotations

import os
import secrets

import dask
import dask.array as da
import fsspec
import numpy as np
import pytest
import zarr

import dclust
from dclust.errors import StorageError
from dclust.io import _write


@pytest.fixture(autouse=True)
def threaded():
    with dask.config.set(scheduler="threads"):
        yield


@pytest.fixture
def mem():
    """A fresh ``memory://`` prefix, removed afterwards."""
    fs = fsspec.filesystem("memory")
    root = f"/dclust-fsspec-{os.getpid()}-{secrets.token_hex(4)}"
    yield f"memory://{root}", fs, root
    if fs.exists(root):
        fs.rm(root, recursive=True)


def _blobs(n=600, d=3, seed=0):
    rng = np.random.default_rng(seed)
    centers = rng.uniform(-10, 10, size=(4, d))
    return (centers[rng.integers(0, 4, n)] + rng.normal(size=(n, d))).astype(np.float64)


def _listing(fs, root):
    fs.invalidate_cache()
    return sorted(p[len(root) + 1:] for p in fs.find(root))


def test_full_round_trip_through_memory_urls(mem):
    base, fs, root = mem
    X = _blobs()
    dclust.write_array(da.from_array(X, chunks=(200, -1)), f"{base}/x.zarr")
    Xd = dclust.open_array(f"{base}/x.zarr")
    assert Xd.chunks == ((200, 200, 200), (3,))
    km = dclust.KMeans(n_clusters=4, random_state=0, max_iter=20).fit(Xd)
    assert dclust.save(km, f"{base}/km.zarr") == f"{base}/km.zarr"
    dclust.write_labels(km.predict(Xd), f"{base}/labels.zarr")
    km2 = dclust.load(f"{base}/km.zarr")
    np.testing.assert_array_equal(km2.cluster_centers_, km.cluster_centers_)
    np.testing.assert_array_equal(dclust.open_array(f"{base}/labels.zarr").compute(), km.predict(X))
    # the same model on local numpy data: the storage layer changes nothing
    ref = dclust.KMeans(n_clusters=4, random_state=0, max_iter=20).fit(da.from_array(X, chunks=(200, -1)))
    np.testing.assert_array_equal(km.cluster_centers_, ref.cluster_centers_)
    # no temporary prefixes are left behind
    assert not [p for p in _listing(fs, root) if "/." in "/" + p]


def test_constraint_graph_round_trip_through_memory_and_file_urls(mem, tmp_path):
    base, _, _ = mem
    G = dclust.ConstraintGraph.from_pairs(np.array([0, 2, 5]), np.array([1, 3, 9]), np.array([True, False, True]),
                                          n_samples=10, chunks=(5, 5))
    for url in (f"{base}/g.zarr", f"file://{tmp_path}/g.zarr"):
        G.to_zarr(url)
        H = dclust.ConstraintGraph.from_zarr(url)
        assert H.n_samples == 10 and H.chunks == G.chunks
        assert H == G and H.n_must == 2 and H.n_cannot == 1
        with pytest.raises(StorageError, match="already exists"):
            G.to_zarr(url)
    assert os.listdir(tmp_path) == ["g.zarr"]
    with pytest.raises(StorageError, match="does not exist"):
        dclust.ConstraintGraph.from_zarr(f"{base}/missing.zarr")


def test_file_urls_are_local_paths_with_the_atomic_rename(tmp_path):
    X = _blobs(50)
    url = f"file://{tmp_path}/x.zarr"
    assert dclust.write_array(X, url) == str(tmp_path / "x.zarr")
    np.testing.assert_array_equal(dclust.open_array(url).compute(), X)
    dp = dclust.DPMeans(lam=50.0, random_state=0).fit(X)
    dclust.save(dp, f"file://{tmp_path}/dp.zarr")
    assert dclust.load(f"file://{tmp_path}/dp.zarr").n_clusters_ == dp.n_clusters_
    assert sorted(os.listdir(tmp_path)) == ["dp.zarr", "x.zarr"]


def test_overwrite_replaces_the_whole_store_without_stale_chunks(mem):
    base, fs, root = mem
    url = f"{base}/x.zarr"
    dclust.write_array(da.from_array(_blobs(600), chunks=(100, -1)), url)
    assert len([p for p in _listing(fs, root) if p.startswith("x.zarr/c/")]) == 6
    dclust.write_array(da.from_array(_blobs(150, seed=1), chunks=(100, -1)), url, overwrite=True)
    assert [p for p in _listing(fs, root) if p.startswith("x.zarr/c/")] == ["x.zarr/c/0/0", "x.zarr/c/1/0"]
    np.testing.assert_array_equal(dclust.open_array(url).compute(), _blobs(150, seed=1))


def test_components_into_an_existing_memory_group(mem):
    base, fs, root = mem
    url = f"{base}/g.zarr"
    dclust.write_array(_blobs(20), url, component="a")
    dclust.write_array(_blobs(10), url, component="run/b")
    g = zarr.open_group(url, mode="r")
    assert sorted(g.array_keys()) == ["a"] and g["run/b"].shape == (10, 3)
    with pytest.raises(StorageError, match="already exists|existing component"):
        dclust.write_array(_blobs(5), url, component="a")
    dclust.write_array(_blobs(5), url, component="a", overwrite=True)
    assert dclust.open_array(url, component="a").shape == (5, 3)
    assert not [p for p in _listing(fs, root) if ".tmp-" in p]


class _Boom(Exception):
    pass


def test_a_failed_memory_write_leaves_the_old_store_and_no_temporary(mem):
    base, fs, root = mem
    url = f"{base}/x.zarr"
    dclust.write_array(_blobs(40), url, chunks=10)
    before = _listing(fs, root)

    def fail(block):
        raise _Boom("disk full")

    bad = da.from_array(_blobs(40), chunks=(10, -1)).map_blocks(fail, dtype=np.float64)
    with pytest.raises(_Boom):
        dclust.write_array(bad, url, overwrite=True)
    assert _listing(fs, root) == before
    np.testing.assert_array_equal(dclust.open_array(url).compute(), _blobs(40))


def test_the_root_metadata_is_committed_last(mem, monkeypatch):
    """Watch every copy of the roll-forward: the commit record exists throughout, the target has no root zarr.json
    (not a store) until the very last copy, and the record is gone once the store is in place."""
    base, fs, root = mem
    url = f"{base}/x.zarr"
    dclust.write_array(_blobs(30), url, chunks=10)
    seen = []
    real_copy = type(fs).copy

    def spy(self, src, dst, *args, **kwargs):
        keys = [d.rsplit("/x.zarr/", 1)[-1] for d in (dst if isinstance(dst, list) else [dst])]
        seen.append((keys, self.exists(f"{root}/x.zarr/zarr.json"), self.exists(f"{root}/.x.zarr.commit")))
        return real_copy(self, src, dst, *args, **kwargs)

    monkeypatch.setattr(type(fs), "copy", spy)
    dclust.write_array(_blobs(30, seed=2), url, chunks=10, overwrite=True)
    assert seen[-1][0] == ["zarr.json"]  # the marker goes last
    assert sorted(seen[0][0]) == ["c/0/0", "c/1/0", "c/2/0"]  # the chunks first, in one batch
    assert all(not visible and recorded for _, visible, recorded in seen)  # old store hidden, commit recorded
    assert not fs.exists(f"{root}/.x.zarr.commit")
    np.testing.assert_array_equal(dclust.open_array(url).compute(), _blobs(30, seed=2))


def test_a_half_committed_store_is_refused_by_readers(mem):
    """A crash inside the commit window leaves chunks without zarr.json: readers refuse it, never misread it."""
    base, fs, root = mem
    url = f"{base}/x.zarr"
    dclust.write_array(_blobs(30), url, chunks=10)
    fs.rm_file(f"{root}/x.zarr/zarr.json")
    with pytest.raises(StorageError):
        dclust.open_array(url)


def test_unknown_protocol_names_the_extra(tmp_path):
    with pytest.raises(StorageError, match=r"dclust\[cloud\]"):
        dclust.open_array("nosuchproto://bucket/x.zarr")
    with pytest.raises(StorageError, match=r"dclust\[cloud\]"):
        dclust.write_array(np.zeros((3, 2)), "nosuchproto://bucket/x.zarr")


def test_a_bucket_root_is_not_a_store_location():
    with pytest.raises(StorageError, match="root of a bucket"):
        _write._atomic_write_remote("memory://", lambda tmp: None, what="write_array")


def test_cli_arguments_are_urls(mem, tmp_path):
    """The CLI end to end on fsspec URLs; an in-process cluster (threads) shares this process's memory:// store."""
    from distributed import LocalCluster
    from typer.testing import CliRunner

    from dclust._cli.main import app

    base, _, _ = mem
    X = _blobs(400)
    dclust.write_array(da.from_array(X, chunks=(100, -1)), f"{base}/x.zarr")
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=":0") as cluster:
        for where in (base, f"file://{tmp_path}"):
            args = ["fit", "kmeans", f"{base}/x.zarr", "--k", "4", "--seed", "0", "--labels", f"{where}/l.zarr",
                    "--model", f"{where}/m.zarr", "--scheduler", cluster.scheduler_address, "--quiet", "--json"]
            r = CliRunner().invoke(app, args)
            assert r.exit_code == 0, r.output
            model = dclust.load(f"{where}/m.zarr")
            labels = dclust.open_array(f"{where}/l.zarr").compute()
            np.testing.assert_array_equal(labels, model.predict(X))
        r = CliRunner().invoke(app, args)  # outputs exist now: refused before any work
        assert r.exit_code == 1 and "already exists" in r.output
    assert sorted(os.listdir(tmp_path)) == ["l.zarr", "m.zarr"]


def test_a_member_whose_commit_was_interrupted_reads_as_its_new_version(mem, monkeypatch):
    """A replaced group member whose roll-forward stopped after the commit point (the writer died there: here the
    copy raises) is read through its commit record -- by component= -- and the next write of it finishes."""
    import dclust._store._atomic as atomic

    base, fs, root = mem
    url = f"{base}/g.zarr"
    dclust.write_array(_blobs(30), url, component="run/x", chunks=10)
    dclust.write_array(_blobs(30, seed=5), url, component="y", chunks=10)

    def stop(*args, **kwargs):
        raise KeyboardInterrupt("the writer dies inside the roll-forward")

    monkeypatch.setattr(atomic, "_roll_forward", stop)
    with pytest.raises(KeyboardInterrupt):
        dclust.write_array(_blobs(30, seed=2), url, component="run/x", chunks=10, overwrite=True)
    monkeypatch.undo()
    assert fs.exists(f"{root}/g.zarr/run/.x.commit")
    np.testing.assert_array_equal(dclust.open_array(url, component="run/x").compute(), _blobs(30, seed=2))
    np.testing.assert_array_equal(dclust.open_array(url, component="y").compute(), _blobs(30, seed=5))
    with pytest.raises(StorageError, match="already exists|existing component"):
        dclust.write_array(_blobs(30, seed=3), url, component="run/x", chunks=10)
    dclust.write_array(_blobs(30, seed=3), url, component="run/x", chunks=10, overwrite=True)
    assert [p for p in _listing(fs, f"{root}/g.zarr") if "/." in "/" + p] == []
    np.testing.assert_array_equal(dclust.open_array(url, component="run/x").compute(), _blobs(30, seed=3))
