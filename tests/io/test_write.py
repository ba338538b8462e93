"""dclust.io.write_array / write_labels: streamed, atomic Zarr writes on real stores in tmp_path."""

from __future__ import annotations

import os
import time

import dask
import dask.array as da
import numpy as np
import pytest
import xarray as xr
import zarr

from dclust.errors import InvalidDataError, InvalidParameterError, StorageError
from dclust.io import open_array, write_array, write_labels


def _data(n=1000, d=4, seed=0):
    return np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)


def _leftovers(directory):
    """Temporary or set-aside names written by the atomic commit."""
    found = []
    for root, dirs, _ in os.walk(directory):
        found += [os.path.join(root, d) for d in dirs if ".tmp-" in d or ".old-" in d]
    return found


def _failing(data, chunk_rows, bad_block):
    """A dask array equal to ``data`` whose block ``bad_block`` raises when computed."""

    def block(x, block_id=None):
        if block_id[0] == bad_block:
            raise RuntimeError("boom in block %d" % bad_block)
        return x

    return da.from_array(data, chunks=(chunk_rows, -1)).map_blocks(block, dtype=data.dtype)


def _snapshot(path):
    out = {}
    for root, _, files in os.walk(path):
        for f in files:
            p = os.path.join(root, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, path)] = fh.read()
    return out


# ------------------------------------------------------------------------------------------------------ round trip


def test_dask_round_trip_keeps_row_chunks(tmp_path):
    data = _data()
    out = write_array(da.from_array(data, chunks=(300, 4)), tmp_path / "x.zarr")
    assert out == str(tmp_path / "x.zarr")
    z = zarr.open_array(out, mode="r")
    assert z.shape == (1000, 4) and z.chunks == (300, 4) and z.dtype == np.float32
    np.testing.assert_array_equal(z[...], data)
    np.testing.assert_array_equal(open_array(out).compute(), data)
    assert _leftovers(tmp_path) == []


def test_numpy_round_trip_and_chunks_parameter(tmp_path):
    data = _data()
    write_array(data, tmp_path / "a.zarr", chunks=128)
    z = zarr.open_array(str(tmp_path / "a.zarr"), mode="r")
    assert z.chunks == (128, 4)
    np.testing.assert_array_equal(z[...], data)
    write_array(data, tmp_path / "b.zarr", chunks=(500, 2))
    assert zarr.open_array(str(tmp_path / "b.zarr"), mode="r").chunks == (500, 2)
    with pytest.raises(InvalidParameterError, match="chunks"):
        write_array(data, tmp_path / "c.zarr", chunks=-3)
    assert not (tmp_path / "c.zarr").exists()


def test_irregular_and_feature_chunks_are_regularised(tmp_path):
    data = _data(100, 6)
    x = da.from_array(data, chunks=((10, 40, 30, 20), (3, 3)))
    write_array(x, tmp_path / "x.zarr")
    z = zarr.open_array(str(tmp_path / "x.zarr"), mode="r")
    assert z.chunks == (40, 6)
    np.testing.assert_array_equal(z[...], data)


def test_one_chunk_file_per_block(tmp_path):
    x = da.from_array(_data(1000), chunks=(100, 4))
    write_array(x, tmp_path / "x.zarr", codec="none")
    chunk_files = [f for _, _, fs in os.walk(tmp_path / "x.zarr" / "c") for f in fs]
    assert len(chunk_files) == 10


@pytest.mark.parametrize("codec", ["auto", "none", "lz4", "zstd"])
def test_codecs_round_trip(tmp_path, codec):
    data = _data(500)
    write_array(data, tmp_path / "x.zarr", codec=codec)
    z = zarr.open_array(str(tmp_path / "x.zarr"), mode="r")
    np.testing.assert_array_equal(z[...], data)
    names = [type(c).__name__ for c in z.compressors]
    expected = {"auto": [], "none": [], "lz4": ["BloscCodec"], "zstd": ["ZstdCodec"]}[codec]
    assert names == expected + ["Crc32cCodec"]  # the compressor, then the chunk checksum


def test_auto_codec_compresses_integers(tmp_path):
    write_array(np.arange(1000, dtype=np.int32) % 5, tmp_path / "i.zarr")
    c, crc = zarr.open_array(str(tmp_path / "i.zarr"), mode="r").compressors
    assert type(crc).__name__ == "Crc32cCodec"
    assert type(c).__name__ == "BloscCodec" and c.cname.value == "lz4" and c.shuffle.value == "bitshuffle"


def test_bad_codec(tmp_path):
    with pytest.raises(InvalidParameterError, match="'auto', 'none', 'lz4', 'zstd'"):
        write_array(_data(10), tmp_path / "x.zarr", codec="gzip")
    assert not (tmp_path / "x.zarr").exists()


def test_xarray_is_written_through_its_data(tmp_path):
    xa = xr.DataArray(_data(20), dims=("sample", "feature"))
    write_array(xa, tmp_path / "x.zarr")
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "x.zarr"), mode="r")[...], xa.values)


def test_bad_inputs(tmp_path):
    with pytest.raises(InvalidDataError, match="numeric"):
        write_array(np.array(["a", "b"]), tmp_path / "s.zarr")
    with pytest.raises(InvalidDataError, match="0-d"):
        write_array(np.float32(1.0), tmp_path / "s.zarr")
    with pytest.raises(InvalidParameterError, match="path"):
        write_array(_data(10), 42)
    with pytest.raises(InvalidParameterError, match="component"):
        write_array(_data(10), tmp_path / "g.zarr", component="../escape")
    assert not (tmp_path / "s.zarr").exists() and not (tmp_path / "g.zarr").exists()


def test_parent_directories_are_created(tmp_path):
    write_array(_data(10), tmp_path / "a" / "b" / "x.zarr")
    assert zarr.open_array(str(tmp_path / "a" / "b" / "x.zarr"), mode="r").shape == (10, 4)


# ------------------------------------------------------------------------------------------------------ labels


def test_write_labels_round_trip(tmp_path):
    labels = (da.arange(1000, chunks=300) % 7).astype(np.int32)
    out = write_labels(labels, tmp_path / "labels.zarr")
    z = zarr.open_array(out, mode="r")
    assert z.shape == (1000,) and z.dtype == np.int32 and z.chunks == (300,)
    np.testing.assert_array_equal(z[...], np.arange(1000) % 7)
    y = open_array(out)
    assert y.dtype == np.int32 and y.chunks == ((300, 300, 300, 100),)
    np.testing.assert_array_equal(y.compute(), np.arange(1000) % 7)


def test_write_labels_numpy_int64(tmp_path):
    write_labels(np.array([3, 1, 2], dtype=np.int64), tmp_path / "l.zarr")
    z = zarr.open_array(str(tmp_path / "l.zarr"), mode="r")
    assert z.dtype == np.int64 and z[...].tolist() == [3, 1, 2]


def test_write_labels_rejects_non_labels(tmp_path):
    with pytest.raises(InvalidDataError, match="1-D integer"):
        write_labels(np.zeros((3, 2), dtype=np.int32), tmp_path / "l.zarr")
    with pytest.raises(InvalidDataError, match="1-D integer"):
        write_labels(np.zeros(3, dtype=np.float64), tmp_path / "l.zarr")
    assert not (tmp_path / "l.zarr").exists()


def test_write_labels_existing_message_names_write_labels(tmp_path):
    write_labels(np.zeros(3, dtype=np.int32), tmp_path / "l.zarr")
    with pytest.raises(StorageError, match=r"^write_labels\(path="):
        write_labels(np.zeros(3, dtype=np.int32), tmp_path / "l.zarr")


# ------------------------------------------------------------------------------------------------------ durability


def test_existing_target_without_overwrite_raises_before_writing(tmp_path):
    target = tmp_path / "x.zarr"
    write_array(_data(100), target)
    before = _snapshot(target)
    computed = []

    def spy(x):
        if x.size:  # map_blocks also calls it on an empty block to infer meta
            computed.append(1)
        return x

    lazy = da.from_array(_data(100, seed=1), chunks=(50, 4)).map_blocks(spy, dtype=np.float32)
    with pytest.raises(StorageError) as err:
        write_array(lazy, target)
    text = str(err.value)
    assert "already exists" in text and "overwrite=True" in text
    assert computed == []  # nothing was computed, so nothing was written
    assert _snapshot(target) == before
    assert sorted(os.listdir(tmp_path)) == ["x.zarr"]


def test_overwrite_replaces(tmp_path):
    target = tmp_path / "x.zarr"
    write_array(_data(100), target, chunks=30)
    new = _data(40, 2, seed=5)
    write_array(new, target, overwrite=True)
    z = zarr.open_array(str(target), mode="r")
    assert z.shape == (40, 2)
    np.testing.assert_array_equal(z[...], new)
    assert sorted(os.listdir(tmp_path)) == ["x.zarr"]
    assert not any(f.endswith(".30") for f in os.listdir(target))


def test_overwrite_refuses_non_zarr_paths(tmp_path):
    (tmp_path / "precious").mkdir()
    (tmp_path / "precious" / "thesis.tex").write_text("...")
    with pytest.raises(StorageError, match="not a Zarr store"):
        write_array(_data(10), tmp_path / "precious", overwrite=True)
    assert (tmp_path / "precious" / "thesis.tex").read_text() == "..."


def test_failure_mid_write_keeps_previous_store_and_leaves_no_temp(tmp_path):
    target = tmp_path / "x.zarr"
    old = _data(1000, seed=1)
    write_array(old, target, chunks=100)
    before = _snapshot(target)
    with pytest.raises(RuntimeError, match="boom"):
        write_array(_failing(_data(1000, seed=2), 100, bad_block=7), target, overwrite=True)
    assert _snapshot(target) == before
    np.testing.assert_array_equal(open_array(target).compute(), old)
    assert sorted(os.listdir(tmp_path)) == ["x.zarr"]


def test_failure_on_new_target_leaves_nothing(tmp_path):
    with pytest.raises(RuntimeError, match="boom"):
        write_array(_failing(_data(1000), 100, bad_block=0), tmp_path / "new.zarr")
    assert os.listdir(tmp_path) == []


def test_failure_with_threads_still_cleans_up(tmp_path):
    """Other blocks are still running when the failing one raises; none may resurrect the temp dir later."""

    def block(x, block_id=None):
        if block_id[0] == 3:
            raise RuntimeError("boom in block 3")
        time.sleep(0.3)  # stragglers finish (and try to write) after the failure has been handled
        return x

    x = da.from_array(_data(800), chunks=(100, 4)).map_blocks(block, dtype=np.float32, meta=np.empty((0, 0), "f4"))
    with dask.config.set(scheduler="threads", num_workers=4):
        with pytest.raises(RuntimeError, match="boom in block 3"):
            write_array(x, tmp_path / "x.zarr")
    time.sleep(0.8)
    assert os.listdir(tmp_path) == []


# ------------------------------------------------------------------------------------------------------ components


def test_component_in_new_store_makes_a_group(tmp_path):
    data = _data(50)
    write_array(data, tmp_path / "g.zarr", component="points")
    g = zarr.open_group(str(tmp_path / "g.zarr"), mode="r")
    assert sorted(g.array_keys()) == ["points"]
    np.testing.assert_array_equal(open_array(tmp_path / "g.zarr").compute(), data)


def test_component_added_to_existing_group_keeps_members(tmp_path):
    data = _data(50)
    write_array(data, tmp_path / "g.zarr", component="points")
    write_labels_like = np.arange(50, dtype=np.int32) % 3
    write_array(write_labels_like, tmp_path / "g.zarr", component="run1/labels")
    g = zarr.open_group(str(tmp_path / "g.zarr"), mode="r")
    assert sorted(g.array_keys()) == ["points"] and sorted(g.group_keys()) == ["run1"]
    np.testing.assert_array_equal(open_array(tmp_path / "g.zarr", component="points").compute(), data)
    np.testing.assert_array_equal(
        open_array(tmp_path / "g.zarr", component="run1/labels").compute(), write_labels_like
    )
    with pytest.raises(StorageError, match="already exists"):
        write_array(data, tmp_path / "g.zarr", component="points")
    with pytest.raises(StorageError, match="not an array"):
        write_array(data, tmp_path / "g.zarr", component="run1", overwrite=True)
    write_array(data[:10], tmp_path / "g.zarr", component="points", overwrite=True)
    assert open_array(tmp_path / "g.zarr", component="points").shape == (10, 4)
    assert _leftovers(tmp_path) == [] and sorted(os.listdir(tmp_path)) == ["g.zarr"]


def test_component_failure_keeps_group_intact(tmp_path):
    data = _data(200)
    write_array(data, tmp_path / "g.zarr", component="points")
    before = _snapshot(tmp_path / "g.zarr")
    with pytest.raises(RuntimeError, match="boom"):
        write_array(_failing(data, 50, 2), tmp_path / "g.zarr", component="points", overwrite=True)
    with pytest.raises(RuntimeError, match="boom"):
        write_array(_failing(data, 50, 2), tmp_path / "g.zarr", component="new")
    assert _snapshot(tmp_path / "g.zarr") == before
    assert sorted(os.listdir(tmp_path)) == ["g.zarr"]


def test_component_inside_an_array_store_is_refused(tmp_path):
    write_array(_data(10), tmp_path / "x.zarr")
    with pytest.raises(StorageError, match="not a Zarr group"):
        write_array(_data(10), tmp_path / "x.zarr", component="more")


@pytest.mark.filterwarnings("ignore:Consolidated metadata:UserWarning")
def test_consolidated_group_is_reconsolidated(tmp_path):
    write_array(_data(10), tmp_path / "g.zarr", component="a")
    zarr.consolidate_metadata(str(tmp_path / "g.zarr"))
    write_array(_data(10), tmp_path / "g.zarr", component="b")
    g = zarr.open_group(str(tmp_path / "g.zarr"), mode="r")  # reads the consolidated metadata
    assert sorted(g.array_keys()) == ["a", "b"]


# -------------------------------------------------------------------------------------------------- fsspec, distributed


def test_memory_url_writes_directly():
    url = f"memory://dclust-test-write-{os.getpid()}/x.zarr"
    data = _data(100)
    assert write_array(da.from_array(data, chunks=(30, 4)), url) == url
    np.testing.assert_array_equal(open_array(url).compute(), data)
    with pytest.raises(StorageError, match="already exists"):
        write_array(data, url)
    write_array(data[:5], url, overwrite=True)
    assert open_array(url).shape == (5, 4)
    write_labels(np.arange(5, dtype=np.int32), url + "-labels")
    assert zarr.open_array(url + "-labels", mode="r")[...].tolist() == [0, 1, 2, 3, 4]
    gurl = f"memory://dclust-test-write-{os.getpid()}/g.zarr"
    write_array(data, gurl, component="a")
    write_array(data[:3], gurl, component="b")
    assert open_array(gurl, component="b").shape == (3, 4)


def test_write_through_a_distributed_cluster(tmp_path, client):
    # the session's cluster of worker processes (conftest.py): what matters is pickling the target
    data = _data(2000)
    write_array(da.from_array(data, chunks=(250, 4)), tmp_path / "x.zarr")
    write_labels(da.arange(2000, chunks=250).astype(np.int32), tmp_path / "l.zarr")
    np.testing.assert_array_equal(open_array(tmp_path / "x.zarr").compute(), data)
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "l.zarr"), mode="r")[...], np.arange(2000))
    assert sorted(os.listdir(tmp_path)) == ["l.zarr", "x.zarr"]
