"""Every format on the command line: ``dclust fit/predict`` on Parquet, CSV and NetCDF files in tmp_path and on a
real S3 server (moto, tests/conftest.py) with ``--storage-option`` or the ``AWS_*`` environment; URLs stay URLs in
the JSON report. Commands reach a real process-based LocalCluster with ``--scheduler``."""

from __future__ import annotations

import os
import tempfile

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
import xarray as xr

import dclust
from dclust.io import open_array

from _support.cli import ok_json, one_line_error, read, run

COLS = ["x", "y", "z"]


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    """1,500 points in 3 blobs with a text column, as Parquet (3 parts), CSV and NetCDF."""
    d = tmp_path_factory.mktemp("cli-formats")
    rng = np.random.default_rng(5)
    centers = np.array([[0.0, 0.0, 0.0], [9.0, 9.0, 0.0], [0.0, 9.0, 9.0]])
    values = centers[rng.integers(0, 3, 1500)] + rng.normal(size=(1500, 3))
    df = pd.DataFrame(values, columns=COLS)
    df["site"] = np.where(values[:, 0] > 4, "north", "south")
    dd.from_pandas(df, npartitions=3).to_parquet(d / "pts.parquet", write_index=False)
    df.to_csv(d / "pts.csv", index=False)
    xr.Dataset({"points": (("sample", "band"), values), "other": (("sample",), values[:, 0])}).to_netcdf(
        d / "pts.nc", engine="h5netcdf")
    return d, values


def _fit(address, source, out, *extra):
    return run(["fit", "kmeans", source, "--k", 3, "--seed", 0, "--labels", out / "l.zarr", "--model",
                out / "m.zarr", "--scheduler", address, "--quiet", "--json", *extra])


def _reference(source, **kw):
    return dclust.KMeans(n_clusters=3, random_state=0).fit(open_array(source, **kw))


@pytest.mark.parametrize("name, extra, kw", [
    ("pts.parquet", ["--columns", "x,y,z"], {"columns": COLS}),
    ("pts.csv", ["--columns", "x, y, z"], {"columns": COLS}),
    ("pts.nc", ["--component", "points", "--sample-dim", "sample"], {"component": "points", "sample_dim": "sample"}),
])
def test_fit_kmeans_on_every_format(table, address, tmp_path, name, extra, kw):
    d, values = table
    out = ok_json(_fit(address, d / name, tmp_path, *extra))
    assert out["input"] == str(d / name) and out["n_samples"] == 1500 and out["n_features"] == 3
    assert out["warnings"] == []
    model = dclust.load(tmp_path / "m.zarr")
    np.testing.assert_allclose(model.cluster_centers_, _reference(d / name, **kw).cluster_centers_, rtol=1e-10)
    np.testing.assert_array_equal(read(tmp_path / "l.zarr"), model.predict(values))


def test_predict_on_csv(table, address, tmp_path):
    d, values = table
    ok_json(_fit(address, d / "pts.parquet", tmp_path, "--columns", "x,y,z"))
    r = run(["predict", tmp_path / "m.zarr", d / "pts.csv", "--columns", "x,y,z", "--labels", tmp_path / "p.zarr",
             "--scheduler", address, "--quiet", "--json"])
    assert ok_json(r)["n_samples"] == 1500
    np.testing.assert_array_equal(read(tmp_path / "p.zarr"), dclust.load(tmp_path / "m.zarr").predict(values))


def test_text_columns_are_a_one_line_error_naming_them(table, address, tmp_path):
    d, _ = table
    r = _fit(address, d / "pts.parquet", tmp_path)
    assert r.exit_code == 1
    line = one_line_error(r.stderr)
    assert "'site'" in line and "--columns x,y,z" in line
    r = _fit(address, d / "pts.csv", tmp_path, "--columns", "x,w")
    assert r.exit_code == 2 and "'w'" in one_line_error(r.stderr)
    assert not (tmp_path / "l.zarr").exists()


def test_unknown_format_names_what_can_be_opened(address, tmp_path):
    (tmp_path / "pts.bin").write_bytes(b"\x00\x01 not a data file")
    r = _fit(address, tmp_path / "pts.bin", tmp_path)
    assert r.exit_code == 1
    line = one_line_error(r.stderr)
    assert all(kind in line for kind in ("Zarr store", "Parquet", "CSV", "NetCDF/HDF5"))


def test_malformed_storage_option_is_a_usage_error(table, tmp_path):
    d, _ = table
    r = run(["fit", "kmeans", d / "pts.csv", "--k", 3, "--labels", tmp_path / "l.zarr", "--model",
             tmp_path / "m.zarr", "--storage-option", "endpoint_url"])
    assert r.exit_code == 2 and "KEY=VALUE" in r.stderr


# ------------------------------------------------------------------------------------------------ object storage


@pytest.fixture
def bucket(s3, table):
    url, options, fs = s3
    d, _ = table
    for name in ("pts.parquet", "pts.csv"):
        fs.put(str(d / name), f"{url[5:]}/{name}", recursive=True)
    dclust.write_array(table[1], d / "pts.zarr", overwrite=True, chunks=500)
    fs.put(str(d / "pts.zarr"), f"{url[5:]}/pts.zarr", recursive=True)
    return url, options


@pytest.mark.parametrize("name", ["pts.zarr", "pts.parquet", "pts.csv"])
def test_fit_kmeans_from_s3_with_storage_options(table, bucket, address, tmp_path, name):
    d, _ = table
    url, options = bucket
    flags = [f for k, v in options.items() for f in ("--storage-option", f"{k}={v}")]
    columns = [] if name == "pts.zarr" else ["--columns", "x,y,z"]
    out = ok_json(_fit(address, f"{url}/{name}", tmp_path, *flags, *columns))
    assert out["input"] == f"{url}/{name}"  # a URL stays a URL
    local = _reference(d / name, **({"columns": COLS} if columns else {}))
    np.testing.assert_array_equal(dclust.load(tmp_path / "m.zarr").cluster_centers_, local.cluster_centers_)


def test_fit_kmeans_from_s3_with_the_aws_environment(bucket, s3_endpoint, table, tmp_path, monkeypatch):
    """Only AWS_* set, no --storage-option: s3fs (botocore) reads the environment. The cluster runs in this process
    (threads), so its workers see the same environment, as workers started from a shell with AWS_* would."""
    import s3fs
    from distributed import LocalCluster

    d, _ = table
    url, options = bucket
    for key, value in {"AWS_ACCESS_KEY_ID": options["key"], "AWS_SECRET_ACCESS_KEY": options["secret"],
                       "AWS_ENDPOINT_URL": s3_endpoint, "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(key, value)
    s3fs.S3FileSystem.clear_instance_cache()
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None) as cluster:
        out = ok_json(_fit(cluster.scheduler_address, f"{url}/pts.parquet", tmp_path, "--columns", "x,y,z"))
    assert out["input"] == f"{url}/pts.parquet"
    local = _reference(d / "pts.parquet", columns=COLS)
    np.testing.assert_array_equal(dclust.load(tmp_path / "m.zarr").cluster_centers_, local.cluster_centers_)


def test_storage_option_values_and_locations():
    from dclust._cli._options import _location, _storage_options

    assert _storage_options(["endpoint_url=http://127.0.0.1:9000", "anon=true", "client_kwargs.region_name=eu-west-1",
                             "client_kwargs.retries=3", "token=a=b"]) == {
        "endpoint_url": "http://127.0.0.1:9000", "anon": True, "token": "a=b",
        "client_kwargs": {"region_name": "eu-west-1", "retries": 3}}
    assert _storage_options(None) is None
    assert _location("s3://bkt/pts.zarr") == "s3://bkt/pts.zarr"
    assert _location("gs://bkt/a b.parquet") == "gs://bkt/a b.parquet"
    local = os.path.join(tempfile.gettempdir(), "x.zarr")
    assert _location("file://" + local) == local
    assert _location("rel/x.zarr") == os.path.abspath("rel/x.zarr") and _location(None) is None


def test_stream_and_constraints_commands_take_tables(table, address, tmp_path):
    """The input options are shared: a streaming command and 'constraints import' read CSV/Parquet too."""
    d, values = table
    r = run(["stream", "anytime-dpmeans", d / "pts.csv", "--columns", "x,y,z", "--lam", 40, "--batch-rows", 500,
             "--seed", 0, "--labels", tmp_path / "s.zarr", "--model", tmp_path / "sm.zarr", "--scheduler", address,
             "--quiet", "--json"])
    out = ok_json(r)
    assert out["input"] == str(d / "pts.csv") and out["n_seen"] == 1500
    assert read(tmp_path / "s.zarr").shape == (1500,)
    (tmp_path / "links.csv").write_text("i,j,type\n0,1,must\n2,3,cannot\n")
    r = run(["constraints", "import", tmp_path / "links.csv", "--chunks-like", d / "pts.parquet", "--columns", "x",
             tmp_path / "g.zarr", "--quiet", "--json"])
    out = ok_json(r)
    assert out["chunks_like"] == str(d / "pts.parquet")
    graph = dclust.ConstraintGraph.from_zarr(tmp_path / "g.zarr")
    assert graph.n_samples == 1500 and graph.chunks == open_array(d / "pts.parquet", columns=["x"]).chunks[0]


def test_storage_options_reach_every_url_of_the_command(table, bucket, address, tmp_path, monkeypatch):
    """--storage-option applies to the outputs on the same filesystem too (labels and model written to S3), only
    while the command runs."""
    import fsspec.config

    d, values = table
    url, options = bucket
    flags = [f for k, v in options.items() for f in ("--storage-option", f"{k}={v}")]
    r = run(["fit", "kmeans", f"{url}/pts.parquet", "--columns", "x,y,z", "--k", 3, "--seed", 0, "--labels",
             f"{url}/out/l.zarr", "--model", f"{url}/out/m.zarr", "--scheduler", address, "--quiet", "--json", *flags])
    out = ok_json(r)
    assert (out["labels"], out["model"]) == (f"{url}/out/l.zarr", f"{url}/out/m.zarr")
    assert "s3" not in fsspec.config.conf  # restored after the command
    labels = open_array(f"{url}/out/l.zarr", storage_options=options).compute()
    monkeypatch.setitem(fsspec.config.conf, "s3", options)
    model = dclust.load(f"{url}/out/m.zarr")
    np.testing.assert_array_equal(labels, model.predict(values))
    np.testing.assert_array_equal(model.cluster_centers_, _reference(d / "pts.parquet", columns=COLS).cluster_centers_)
