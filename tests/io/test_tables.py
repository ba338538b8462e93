"""open_array on the formats users have: Parquet, CSV, NetCDF/HDF5 files written in tmp_path, pandas and dask
DataFrames; the column names that travel with the array; the errors that name what open_array can open."""

from __future__ import annotations

import gzip

import dask.array as da
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
import xarray as xr

import dclust
from dclust.errors import InvalidDataError, InvalidParameterError, StorageError
from dclust.io import feature_names, open_array


pytestmark = pytest.mark.usefixtures("threaded")


def _frame(n=1000, seed=0):
    rng = np.random.default_rng(seed)
    centers = np.array([[0.0, 0.0, 0.0], [8.0, 8.0, 0.0], [0.0, 8.0, 8.0]])
    values = centers[rng.integers(0, 3, n)] + rng.normal(size=(n, 3))
    df = pd.DataFrame(values.astype(np.float32), columns=["x", "y", "z"])
    df["kind"] = np.where(values[:, 0] > 4, "far", "near")  # a text column
    df["count"] = rng.integers(0, 100, n)  # an int column
    return df


def _known(X):
    return not any(np.isnan(c) for c in X.chunks[0])


# ---------------------------------------------------------------------------------------------------------- Parquet


def test_parquet_file_columns_in_order_with_names(tmp_path):
    df = _frame()
    df.to_parquet(tmp_path / "pts.parquet", index=False, row_group_size=300)
    X = open_array(tmp_path / "pts.parquet", columns=["z", "x"])
    assert isinstance(X, da.Array) and X.shape == (1000, 2) and X.dtype == np.float32 and _known(X)
    np.testing.assert_array_equal(X.compute(), df[["z", "x"]].to_numpy())
    assert feature_names(X).tolist() == ["z", "x"]


def test_parquet_directory_of_parts_keeps_one_block_per_partition(tmp_path):
    df = _frame(1200)
    dd.from_pandas(df, npartitions=4).to_parquet(tmp_path / "pts.parquet", write_index=False)
    X = open_array(str(tmp_path / "pts.parquet"), columns=["x", "y", "z"])
    assert _known(X) and sum(X.chunks[0]) == 1200 and X.chunks[1] == (3,)
    np.testing.assert_array_equal(X.compute(), df[["x", "y", "z"]].to_numpy())
    # a directory named without a suffix is recognized by its part files
    dd.from_pandas(df, npartitions=2).to_parquet(tmp_path / "plain", write_index=False)
    assert open_array(tmp_path / "plain", columns=["x"]).shape == (1200, 1)
    # so is a file named without a suffix, by its first bytes
    df.to_parquet(tmp_path / "noext", index=False)
    assert open_array(tmp_path / "noext", columns=["y"]).shape == (1200, 1)


def test_parquet_opens_from_the_footers_without_a_pass(tmp_path):
    """Row counts come from the footers: opening computes nothing; part files keep their natural order
    (part.10 after part.9); row groups of a file are grouped into blocks."""
    from dask.callbacks import Callback

    df = _frame(1300)
    dd.from_pandas(df, npartitions=13).to_parquet(tmp_path / "parts", write_index=False)
    computed = []
    with Callback(start=lambda dsk: computed.append(len(dsk))):
        X = open_array(tmp_path / "parts", columns=["x", "count"])
    assert computed == [] and X.numblocks[0] == 13 and sum(X.chunks[0]) == 1300
    np.testing.assert_array_equal(X.compute(), df[["x", "count"]].to_numpy(dtype=np.float64))
    G = open_array(str(tmp_path / "parts" / "part.1*.parquet"), columns=["y"])  # part.1, part.10, 11, 12
    assert G.numblocks[0] == 4 and G.shape == (400, 1)
    df.to_parquet(tmp_path / "groups.parquet", index=False, row_group_size=100)
    Y = open_array(tmp_path / "groups.parquet", columns=["y"])
    assert Y.numblocks[0] == 1 and Y.shape == (1300, 1)  # 13 row groups of 400 bytes: one block
    np.testing.assert_array_equal(Y.compute()[:, 0], df["y"].to_numpy())


def test_hive_partitioned_parquet_goes_through_dask_dataframe(tmp_path):
    df = _frame(600)
    df.to_parquet(tmp_path / "hive", index=False, partition_cols=["kind"])
    X = open_array(tmp_path / "hive", columns=["x", "y"])
    assert _known(X) and X.shape == (600, 2) and feature_names(X).tolist() == ["x", "y"]
    expected = np.sort(df[["x", "y"]].to_numpy(), axis=0)
    np.testing.assert_array_equal(np.sort(X.compute(), axis=0), expected)
    with pytest.raises(InvalidDataError, match="'kind'"):  # the partition column is text (categorical)
        open_array(tmp_path / "hive")


def test_mixed_int_and_float_columns_and_chunks_override(tmp_path):
    df = _frame(500)
    df.to_parquet(tmp_path / "p.parquet", index=False)
    X = open_array(tmp_path / "p.parquet", columns=["x", "count"], chunks=200)
    assert X.dtype == np.float64 and X.chunks == ((200, 200, 100), (2,))
    np.testing.assert_array_equal(X.compute(), df[["x", "count"]].to_numpy(dtype=np.float64))
    assert feature_names(X).tolist() == ["x", "count"]  # registered after the rechunk


def test_non_numeric_and_unknown_columns_are_named(tmp_path):
    _frame(50).to_parquet(tmp_path / "p.parquet", index=False)
    with pytest.raises(InvalidDataError) as err:
        open_array(tmp_path / "p.parquet")
    text = str(err.value)
    assert "'kind'" in text and "non-numeric" in text and "columns=['x', 'y', 'z', 'count']" in text
    with pytest.raises(InvalidParameterError, match="unknown column.*'w'.*") as err:
        open_array(tmp_path / "p.parquet", columns=["x", "w"])
    assert "'x', 'y', 'z', 'kind', 'count'" in str(err.value)
    with pytest.raises(InvalidParameterError, match="columns"):
        open_array(tmp_path / "p.parquet", columns=["x", "x"])
    with pytest.raises(InvalidParameterError, match="component"):
        open_array(tmp_path / "p.parquet", component="x")


# ---------------------------------------------------------------------------------------------------------- CSV


def test_csv_file_glob_tsv_and_gzip(tmp_path):
    df = _frame(900)
    df.to_csv(tmp_path / "pts.csv", index=False)
    X = open_array(tmp_path / "pts.csv", columns=["x", "y"])
    assert X.dtype == np.float64 and X.shape == (900, 2) and _known(X)
    np.testing.assert_allclose(X.compute(), df[["x", "y"]].to_numpy(), rtol=1e-6)
    assert feature_names(X).tolist() == ["x", "y"]
    for i in range(3):
        df.iloc[300 * i:300 * (i + 1)].to_csv(tmp_path / f"part-{i}.csv", index=False)
    G = open_array(str(tmp_path / "part-*.csv"), columns=["z", "count"])
    assert G.numblocks[0] == 3 and G.chunks[0] == (300, 300, 300)
    np.testing.assert_allclose(G.compute(), df[["z", "count"]].to_numpy(dtype=np.float64), rtol=1e-6)
    df.to_csv(tmp_path / "pts.tsv", sep="\t", index=False)
    np.testing.assert_allclose(open_array(tmp_path / "pts.tsv", columns=["y"]).compute()[:, 0], df["y"], rtol=1e-6)
    with gzip.open(tmp_path / "pts.csv.gz", "wt") as fh:
        df.to_csv(fh, index=False)
    np.testing.assert_allclose(open_array(tmp_path / "pts.csv.gz", columns=["x"]).compute()[:, 0], df["x"],
                               rtol=1e-6)


def test_csv_with_a_float_and_a_gap_after_the_sampled_block(tmp_path):
    """pandas infers dtypes from the first block: an int column that turns float (or empty) later still reads."""
    n = 30_000
    lines = ["a,b"] + [f"{i},{i % 7}" for i in range(n)]
    lines[-2] = f"{n - 2},0.5"
    lines[-1] = f"{n - 1},"
    (tmp_path / "late.csv").write_text("\n".join(lines) + "\n")
    X = open_array(tmp_path / "late.csv", chunks=10_000)
    values = X.compute()
    assert values.shape == (n, 2) and values[-2, 1] == 0.5 and np.isnan(values[-1, 1])
    with pytest.raises(InvalidDataError, match="NaN"):  # the estimators' first pass names it
        dclust.KMeans(n_clusters=2, random_state=0).fit(X)


def test_csv_unknown_partition_lengths_are_resolved(tmp_path):
    df = _frame(3000)
    df.to_csv(tmp_path / "big.csv", index=False)
    raw = dd.read_csv(tmp_path / "big.csv", blocksize=20_000)[["x", "y"]].to_dask_array()
    assert not _known(raw)  # what dask.dataframe gives
    from dask.callbacks import Callback

    frame = dd.read_csv(tmp_path / "big.csv", blocksize=20_000)
    computed = []
    with Callback(start=lambda dsk: computed.append(len(dsk))):
        X = open_array(frame, columns=["x", "y"])
    assert len(computed) == 1  # one pass, for the lengths
    assert frame.npartitions > 1 and X.numblocks[0] == frame.npartitions and _known(X)
    assert sum(X.chunks[0]) == 3000
    np.testing.assert_allclose(X.compute(), df[["x", "y"]].to_numpy(), rtol=1e-6)


def test_a_directory_of_csv_files_needs_a_glob(tmp_path):
    (tmp_path / "d").mkdir()
    _frame(10).to_csv(tmp_path / "d" / "a.csv", index=False)
    with pytest.raises(StorageError, match=r"without Zarr metadata or Parquet files.*glob"):
        open_array(tmp_path / "d")
    with pytest.raises(StorageError, match="matches none"):
        open_array(str(tmp_path / "d" / "*.parquet"))


# ------------------------------------------------------------------------------------------------------ NetCDF / HDF5


def _cube():
    rng = np.random.default_rng(3)
    return xr.DataArray(rng.standard_normal((40, 3, 2)).astype(np.float32), dims=("time", "y", "x"),
                        coords={"time": np.arange(40)}, name="temp")


def test_netcdf4_and_netcdf3_with_component_and_sample_dim(tmp_path):
    ds = xr.Dataset({"temp": _cube(), "other": _cube() * 2})
    ds.to_netcdf(tmp_path / "c.nc", engine="h5netcdf")
    out = open_array(tmp_path / "c.nc", component="temp", sample_dim="time", chunks=16)
    assert isinstance(out, xr.DataArray) and out.dims == ("time", "feature") and out.shape == (40, 6)
    assert out.data.chunks == ((16, 16, 8), (6,))
    np.testing.assert_array_equal(out.values, _cube().values.reshape(40, 6))
    np.testing.assert_array_equal(out["time"].values, np.arange(40))
    with pytest.raises(InvalidParameterError, match="'other', 'temp'"):
        open_array(tmp_path / "c.nc")
    ds.to_netcdf(tmp_path / "c3.nc", engine="scipy")  # NetCDF 3 classic
    np.testing.assert_array_equal(open_array(tmp_path / "c3.nc", component="other", sample_dim="time").values,
                                  (_cube() * 2).values.reshape(40, 6))
    with pytest.raises(InvalidParameterError, match="columns"):
        open_array(tmp_path / "c.nc", component="temp", columns=["a"])


def test_netcdf_feature_coordinate_gives_feature_names(tmp_path):
    values = np.random.default_rng(0).standard_normal((30, 3))
    da_ = xr.DataArray(values, dims=("sample", "band"), coords={"band": ["red", "green", "blue"]}, name="v")
    da_.to_dataset().to_netcdf(tmp_path / "bands.nc", engine="h5netcdf")
    out = open_array(tmp_path / "bands.nc")
    assert feature_names(out).tolist() == ["red", "green", "blue"]
    np.testing.assert_array_equal(out.values, values)


def test_plain_hdf5_dataset_in_a_group(tmp_path):
    import h5py
    values = np.random.default_rng(1).standard_normal((50, 4))
    with h5py.File(tmp_path / "raw.h5", "w") as f:
        f["run1/points"] = values
    out = open_array(tmp_path / "raw.h5", component="run1/points", chunks=20)
    assert out.shape == (50, 4) and out.data.chunks[0] == (20, 20, 10)
    np.testing.assert_array_equal(out.values, values)
    with pytest.raises(StorageError, match="group 'nope'"):
        open_array(tmp_path / "raw.h5", component="nope/points")


# ---------------------------------------------------------------------------------------------------------- DataFrames


def test_pandas_dataframe(tmp_path):
    df = _frame(300)
    X = open_array(df, columns=["y", "x"], chunks=128)
    assert X.chunks == ((128, 128, 44), (2,)) and feature_names(X).tolist() == ["y", "x"]
    np.testing.assert_array_equal(X.compute(), df[["y", "x"]].to_numpy())
    with pytest.raises(InvalidDataError, match="'kind'"):
        open_array(df)
    nullable = pd.DataFrame({"a": pd.array([1, None, 3], dtype="Int64"), "b": [0.5, 1.5, 2.5]})
    values = open_array(nullable).compute()
    assert values.dtype == np.float64 and np.isnan(values[1, 0]) and values[2, 0] == 3.0
    with pytest.raises(InvalidDataError, match="'flag' \\(bool\\)"):
        open_array(pd.DataFrame({"a": [1.0], "flag": [True]}))
    with pytest.raises(InvalidParameterError, match="sample_dim"):
        open_array(df, columns=["x"], sample_dim="rows")


def test_dask_dataframe_and_persist_keeps_names():
    df = _frame(400)
    ddf = dd.from_pandas(df, npartitions=3)
    X = open_array(ddf, columns=["x", "count"])
    assert X.numblocks[0] == 3 and _known(X) and feature_names(X).tolist() == ["x", "count"]
    np.testing.assert_array_equal(X.compute(), df[["x", "count"]].to_numpy(dtype=np.float64))
    assert feature_names(X.persist()).tolist() == ["x", "count"]
    assert feature_names(X[:, :1]) is None and feature_names(X * 2) is None  # derived arrays: other data
    assert feature_names(open_array(df[["x", "y"]].to_numpy())) is None
    assert feature_names(df).tolist() == list(df.columns) and feature_names(ddf).tolist() == list(df.columns)


def test_columns_is_refused_where_it_does_not_apply(tmp_path):
    with pytest.raises(InvalidParameterError, match="columns= only applies to tables"):
        open_array(np.zeros((4, 2)), columns=["a"])
    dclust.write_array(np.zeros((4, 2)), tmp_path / "x.zarr")
    with pytest.raises(InvalidParameterError, match="columns= only applies to tables"):
        open_array(tmp_path / "x.zarr", columns=["a"])
    with pytest.raises(InvalidParameterError, match="storage_options= only applies to fsspec URLs"):
        open_array(tmp_path / "x.zarr", storage_options={"anon": True})
    with pytest.raises(InvalidParameterError, match="storage_options"):
        open_array(np.zeros((4, 2)), storage_options={"anon": True})


def test_unknown_formats_name_what_can_be_opened(tmp_path):
    (tmp_path / "notes.bin").write_bytes(b"hello, not data")
    with pytest.raises(StorageError) as err:
        open_array(tmp_path / "notes.bin")
    text = str(err.value)
    for kind in ("Zarr store", "Parquet", "CSV", "NetCDF/HDF5"):
        assert kind in text
    with pytest.raises(InvalidDataError, match="pandas or dask DataFrame"):
        open_array(np.array([{"a": 1}]))


# ---------------------------------------------------------------------------------------------------------- estimators


def test_kmeans_on_parquet_csv_and_dataframe_equals_kmeans_on_numpy(tmp_path):
    df = _frame(1500, seed=4)
    cols = ["x", "y", "z"]
    dd.from_pandas(df, npartitions=3).to_parquet(tmp_path / "p.parquet", write_index=False)
    df.to_csv(tmp_path / "p.csv", index=False)
    values = df[cols].to_numpy(dtype=np.float64)
    for source in (tmp_path / "p.parquet", tmp_path / "p.csv", df):
        X = open_array(source, columns=cols)
        km = dclust.KMeans(n_clusters=3, random_state=0).fit(X.astype(np.float64))
        ref = dclust.KMeans(n_clusters=3, random_state=0).fit(da.from_array(values, chunks=X.chunks))
        np.testing.assert_allclose(km.cluster_centers_, ref.cluster_centers_, rtol=1e-5)
        assert km.inertia_ == pytest.approx(ref.inertia_, rel=1e-5)


def test_tables_and_netcdf_through_fsspec_urls(tmp_path):
    """Any fsspec URL: the in-process memory:// filesystem holds a Parquet file and a NetCDF4 file."""
    import os

    import fsspec

    fs = fsspec.filesystem("memory")
    root = f"/dclust-tables-{os.getpid()}"
    df = _frame(200)
    df.to_parquet(tmp_path / "p.parquet", index=False)
    xr.Dataset({"v": _cube()}).to_netcdf(tmp_path / "c.nc", engine="h5netcdf")
    fs.put(str(tmp_path / "p.parquet"), f"{root}/p.parquet")
    fs.put(str(tmp_path / "c.nc"), f"{root}/c.nc")
    try:
        X = open_array(f"memory://{root}/p.parquet", columns=["x", "y"])
        np.testing.assert_array_equal(X.compute(), df[["x", "y"]].to_numpy())
        out = open_array(f"memory://{root}/c.nc", sample_dim="time")
        np.testing.assert_array_equal(out.values, _cube().values.reshape(40, 6))
    finally:
        fs.rm(root, recursive=True)
