"""dclust.io.open_array on real Zarr stores in tmp_path, xarray objects, numpy and dask."""

from __future__ import annotations

import os
import warnings

import dask.array as da
import numpy as np
import pytest
import xarray as xr
import zarr

import dclust._validation as validation
from dclust.errors import ChunkingError, CorruptStoreError, InvalidDataError, InvalidParameterError, StorageError
from dclust.io import open_array


def _data(n=1000, d=4, seed=0):
    return np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)


def _zarr_array(path, data, chunks, name=None):
    z = zarr.create_array(store=str(path), name=name, shape=data.shape, dtype=data.dtype, chunks=chunks)
    z[...] = data
    return z


# ---------------------------------------------------------------------------------------------------------- paths


def test_path_to_array_keeps_row_chunks(tmp_path):
    data = _data()
    _zarr_array(tmp_path / "x.zarr", data, (300, 4))
    X = open_array(tmp_path / "x.zarr")  # PathLike
    assert isinstance(X, da.Array)
    assert X.shape == (1000, 4) and X.dtype == np.float32
    assert X.chunks == ((300, 300, 300, 100), (4,))
    np.testing.assert_array_equal(X.compute(), data)
    X2 = open_array(str(tmp_path / "x.zarr"))  # str
    np.testing.assert_array_equal(X2.compute(), data)


def test_file_url_is_local(tmp_path):
    data = _data(50)
    _zarr_array(tmp_path / "x.zarr", data, (20, 4))
    np.testing.assert_array_equal(open_array(f"file://{tmp_path}/x.zarr").compute(), data)


def test_chunks_override_rows(tmp_path):
    _zarr_array(tmp_path / "x.zarr", _data(), (300, 4))
    X = open_array(tmp_path / "x.zarr", chunks=600)
    assert X.chunks == ((600, 400), (4,))
    X = open_array(tmp_path / "x.zarr", chunks=(500, 500))
    assert X.chunks == ((500, 500), (4,))
    with pytest.raises(InvalidParameterError, match="chunks"):
        open_array(tmp_path / "x.zarr", chunks=0)


def test_path_with_component(tmp_path):
    data = _data()
    g = zarr.create_group(store=str(tmp_path / "g.zarr"))
    g.create_array("points", shape=data.shape, dtype=data.dtype, chunks=(250, 4))[...] = data
    g.create_array("other", shape=(3,), dtype="i4")
    sub = g.create_group("run1")
    sub.create_array("points", shape=(10, 2), dtype="f8", chunks=(5, 2))[...] = 1.0
    X = open_array(tmp_path / "g.zarr", component="points")
    assert X.chunks == ((250,) * 4, (4,))
    np.testing.assert_array_equal(X.compute(), data)
    Y = open_array(tmp_path / "g.zarr", component="run1/points")
    assert Y.shape == (10, 2) and float(Y.sum().compute()) == 20.0


def test_group_with_one_array_is_picked(tmp_path):
    data = _data(100)
    g = zarr.create_group(store=str(tmp_path / "g.zarr"))
    g.create_array("only", shape=data.shape, dtype=data.dtype, chunks=(40, 4))[...] = data
    g.create_group("empty_subgroup")
    X = open_array(tmp_path / "g.zarr")
    np.testing.assert_array_equal(X.compute(), data)


def test_group_with_several_arrays_needs_component(tmp_path):
    g = zarr.create_group(store=str(tmp_path / "g.zarr"))
    g.create_array("a", shape=(4, 2), dtype="f4")
    g.create_array("b", shape=(4, 2), dtype="f4")
    with pytest.raises(InvalidParameterError) as err:
        open_array(tmp_path / "g.zarr")
    assert "'a', 'b'" in str(err.value) and "component=" in str(err.value)
    with pytest.raises(InvalidParameterError, match="'c'.*does not exist"):
        open_array(tmp_path / "g.zarr", component="c")


def test_group_without_arrays(tmp_path):
    g = zarr.create_group(store=str(tmp_path / "g.zarr"))
    g.create_group("inner").create_array("x", shape=(4, 2), dtype="f4")
    with pytest.raises(InvalidParameterError, match="no arrays.*'inner'"):
        open_array(tmp_path / "g.zarr")
    with pytest.raises(InvalidParameterError, match="is a group"):
        open_array(tmp_path / "g.zarr", component="inner")
    assert open_array(tmp_path / "g.zarr", component="inner/x").shape == (4, 2)


def test_component_on_a_single_array_store_is_an_error(tmp_path):
    _zarr_array(tmp_path / "x.zarr", _data(10), (5, 4))
    with pytest.raises(InvalidParameterError, match="single Zarr array"):
        open_array(tmp_path / "x.zarr", component="x")


def test_missing_path(tmp_path):
    missing = tmp_path / "nope.zarr"
    with pytest.raises(StorageError) as err:
        open_array(missing)
    text = str(err.value)
    assert "expected an existing Zarr store" in text and str(missing) in text and "does not exist" in text


def test_non_zarr_directory_and_file(tmp_path):
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "data.csv").write_text("1,2\n")
    with pytest.raises(StorageError, match="not a Zarr store|without Zarr metadata"):
        open_array(tmp_path / "plain")
    (tmp_path / "file.zarr").write_text("not zarr")
    with pytest.raises(StorageError, match="a file, not a Zarr directory"):
        open_array(tmp_path / "file.zarr")


def test_zarr_v2_store(tmp_path):
    data = _data(60)
    z = zarr.create_array(store=str(tmp_path / "v2.zarr"), shape=data.shape, dtype=data.dtype, chunks=(25, 4),
                          zarr_format=2)
    z[...] = data
    X = open_array(tmp_path / "v2.zarr")
    assert X.chunks[0] == (25, 25, 10)
    np.testing.assert_array_equal(X.compute(), data)


def test_memory_url():
    data = _data(30)
    url = f"memory://dclust-test-open-{os.getpid()}/x.zarr"
    _zarr_array(url, data, (10, 4))
    np.testing.assert_array_equal(open_array(url).compute(), data)
    with pytest.raises(StorageError, match="does not exist"):
        open_array(f"memory://dclust-test-open-{os.getpid()}/missing.zarr")


def test_validation_reads_metadata_only(tmp_path):
    data = _data(100)
    _zarr_array(tmp_path / "x.zarr", data, (25, 4))
    for root, _, files in os.walk(tmp_path / "x.zarr" / "c"):  # corrupt every chunk
        for f in files:
            with open(os.path.join(root, f), "wb") as fh:
                fh.write(b"garbage")
    X = open_array(tmp_path / "x.zarr")  # fine: only zarr.json is read
    assert X.shape == (100, 4) and X.chunks[0] == (25,) * 4
    with pytest.raises(CorruptStoreError, match="undecodable chunk"):  # at compute, with the chunk named
        X.compute()


def test_three_dimensional_store_is_refused(tmp_path):
    zarr.create_array(store=str(tmp_path / "v.zarr"), shape=(10, 4, 3), dtype="f4")
    with pytest.raises(InvalidDataError, match="sample_dim"):
        open_array(tmp_path / "v.zarr")


# ---------------------------------------------------------------------------------------------------- feature chunks


def test_small_feature_chunked_store_is_rechunked_with_a_warning(tmp_path):
    data = _data(1000, 8)
    _zarr_array(tmp_path / "f.zarr", data, (250, 3))
    with pytest.warns(UserWarning, match="chunked along features"):
        X = open_array(tmp_path / "f.zarr")
    assert X.chunks == ((250,) * 4, (8,))
    np.testing.assert_array_equal(X.compute(), data)


def test_large_feature_chunked_store_raises(tmp_path, monkeypatch):
    _zarr_array(tmp_path / "f.zarr", _data(1000, 8), (250, 3))
    monkeypatch.setattr(validation, "MAX_FEATURE_CHUNK_BYTES", 1000)
    with pytest.raises(ChunkingError, match=r"rechunk\(\{1: -1\}\)"):
        open_array(tmp_path / "f.zarr")


def test_row_chunks_override_reads_whole_rows(tmp_path):
    _zarr_array(tmp_path / "f.zarr", _data(1000, 8), (250, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        X = open_array(tmp_path / "f.zarr", chunks=500)
    assert X.chunks == ((500, 500), (8,))


# ---------------------------------------------------------------------------------------------------- in memory


def test_zarr_array_and_group_objects(tmp_path):
    data = _data(100)
    z = _zarr_array(tmp_path / "x.zarr", data, (30, 4))
    X = open_array(z)
    assert X.chunks[0] == (30, 30, 30, 10)
    np.testing.assert_array_equal(X.compute(), data)
    g = zarr.create_group(store=str(tmp_path / "g.zarr"))
    g.create_array("a", shape=(6, 2), dtype="f4", chunks=(3, 2))
    assert open_array(g).shape == (6, 2)
    assert open_array(g, component="a").chunks == ((3, 3), (2,))
    with pytest.raises(InvalidParameterError, match="component"):
        open_array(z, component="a")


def test_numpy_becomes_row_chunked_dask():
    data = _data(100)
    X = open_array(data)
    assert isinstance(X, da.Array) and X.chunks == ((100,), (4,))
    np.testing.assert_array_equal(X.compute(), data)
    X = open_array(data, chunks=40)
    assert X.chunks == ((40, 40, 20), (4,))
    labels = open_array(np.arange(10, dtype=np.int32), chunks=4)
    assert labels.dtype == np.int32 and labels.chunks == ((4, 4, 2),)
    big = np.zeros((2**20, 16), dtype=np.float64)  # 128 MiB -> 64 MiB row blocks
    assert open_array(big).chunks[0] == (2**19, 2**19)


def test_numpy_errors():
    with pytest.raises(InvalidParameterError, match="sample_dim"):
        open_array(_data(10), sample_dim="time")
    with pytest.raises(InvalidParameterError, match="component"):
        open_array(_data(10), component="x")
    with pytest.raises(InvalidDataError, match="1-D .* or 2-D"):
        open_array(np.zeros((2, 3, 4)))
    with pytest.raises(InvalidDataError):
        open_array(np.array([object(), object()]))


def test_dask_keeps_row_chunks_and_merges_small_feature_chunks():
    x = da.ones((100, 6), chunks=(30, 6), dtype=np.float32)
    X = open_array(x)
    assert X.chunks == x.chunks and X.dtype == np.float32
    with pytest.warns(UserWarning, match="chunked along features"):
        Y = open_array(da.ones((100, 6), chunks=(30, 2)))
    assert Y.chunks == ((30, 30, 30, 10), (6,))
    assert open_array(x, chunks=50).chunks == ((50, 50), (6,))


# ---------------------------------------------------------------------------------------------------- xarray


def _cube():
    rng = np.random.default_rng(1)
    values = rng.standard_normal((3, 4, 50)).astype(np.float32)
    return xr.DataArray(
        values,
        dims=("y", "x", "time"),
        coords={"time": np.arange(50) * 10, "y": [0.5, 1.5, 2.5], "x": list("abcd")},
        name="v",
    )


def test_dataarray_3d_with_sample_dim_stacks_features_and_keeps_coords():
    cube = _cube()
    out = open_array(cube, sample_dim="time", chunks=20)
    assert isinstance(out, xr.DataArray)
    assert out.dims == ("time", "feature") and out.shape == (50, 12)
    assert isinstance(out.data, da.Array) and out.data.chunks == ((20, 20, 10), (12,))
    np.testing.assert_array_equal(out["time"].values, cube["time"].values)
    expected = cube.transpose("time", "y", "x").values.reshape(50, 12)
    np.testing.assert_array_equal(out.values, expected)
    np.testing.assert_array_equal(out["y"].values, np.repeat([0.5, 1.5, 2.5], 4))  # stacked coords kept too


def test_dataarray_default_sample_dim_and_2d_rename():
    cube = _cube()
    out = open_array(cube)
    assert out.dims == ("y", "feature") and out.shape == (3, 200)
    flat = cube.isel(y=0).transpose("time", "x")
    out2 = open_array(flat)
    assert out2.dims == ("time", "feature") and list(out2["feature"].values) == list("abcd")
    one = open_array(cube.isel(y=0, x=0))
    assert one.dims == ("time", "feature") and one.shape == (50, 1)


def test_dataarray_bad_sample_dim():
    with pytest.raises(InvalidParameterError, match="'y', 'x', 'time'"):
        open_array(_cube(), sample_dim="frames")
    with pytest.raises(InvalidParameterError, match="component"):
        open_array(_cube(), component="v")


def test_dask_backed_dataarray_keeps_row_chunks_and_checks_feature_chunks(monkeypatch):
    cube = _cube().chunk({"time": 25, "x": 2})
    with pytest.warns(UserWarning, match="chunked along features"):
        out = open_array(cube, sample_dim="time")
    assert out.data.chunks == ((25, 25), (12,))
    monkeypatch.setattr(validation, "MAX_FEATURE_CHUNK_BYTES", 10)
    with pytest.raises(ChunkingError):
        open_array(cube, sample_dim="time")


def test_dataset_with_component():
    ds = xr.Dataset({"v": _cube(), "w": _cube() * 2})
    out = open_array(ds, component="w", sample_dim="time")
    np.testing.assert_array_equal(out.values, (_cube() * 2).transpose("time", "y", "x").values.reshape(50, 12))
    with pytest.raises(InvalidParameterError, match="'v', 'w'"):
        open_array(ds, sample_dim="time")
    with pytest.raises(InvalidParameterError, match="'z'"):
        open_array(ds, component="z")
    assert open_array(xr.Dataset({"v": _cube()}), sample_dim="time").shape == (50, 12)


def test_xarray_zarr_store_with_sample_dim_keeps_coords(tmp_path):
    ds = xr.Dataset({"v": _cube().drop_vars("x").chunk({"time": 20})})  # str coords: unstable Zarr v3 dtype
    ds.to_zarr(tmp_path / "cube.zarr", zarr_format=3, consolidated=False)
    out = open_array(tmp_path / "cube.zarr", component="v", sample_dim="time")
    assert out.dims == ("time", "feature") and out.data.chunks == ((20, 20, 10), (12,))
    np.testing.assert_array_equal(out["time"].values, np.arange(50) * 10)
    np.testing.assert_array_equal(out.values, _cube().transpose("time", "y", "x").values.reshape(50, 12))
    with pytest.raises(InvalidParameterError, match="'v'"):  # without component: several arrays (v + coords)
        open_array(tmp_path / "cube.zarr")
    plain = open_array(tmp_path / "cube.zarr", component="time")
    assert plain.shape == (50,)
