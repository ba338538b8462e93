"""Reading from object storage for real: a moto S3 server on 127.0.0.1 (tests/conftest.py), s3fs, and
``open_array(url, storage_options=...)`` on Zarr, Parquet and CSV; fits on S3 data equal fits on local files."""

from __future__ import annotations

import dask.array as da
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest

import dclust
from dclust.errors import StorageError
from dclust.io import feature_names, open_array


pytestmark = pytest.mark.usefixtures("threaded")


def _points(n=1200, seed=0):
    rng = np.random.default_rng(seed)
    centers = rng.uniform(-10, 10, size=(4, 3))
    return (centers[rng.integers(0, 4, n)] + rng.normal(size=(n, 3))).astype(np.float32)


@pytest.fixture
def uploaded(s3, tmp_path):
    """The same points as a Zarr store, a Parquet data set and a CSV file, locally and in the bucket."""
    bucket, options, fs = s3
    X = _points()
    df = pd.DataFrame(X, columns=["a", "b", "c"])
    df["label"] = "p"  # a text column the tests leave out with columns=
    dclust.write_array(da.from_array(X, chunks=(400, -1)), tmp_path / "pts.zarr")
    dd.from_pandas(df, npartitions=3).to_parquet(tmp_path / "pts.parquet", write_index=False)
    df.to_csv(tmp_path / "pts.csv", index=False)
    for name in ("pts.zarr", "pts.parquet", "pts.csv"):
        fs.put(str(tmp_path / name), f"{bucket[5:]}/{name}", recursive=True)
    return bucket, options, X, tmp_path


def test_zarr_parquet_and_csv_from_s3_equal_the_local_files(uploaded):
    bucket, options, X, local = uploaded
    Z = open_array(f"{bucket}/pts.zarr", storage_options=options)
    assert Z.chunks == ((400, 400, 400), (3,))
    np.testing.assert_array_equal(Z.compute(), X)
    for name in ("pts.parquet", "pts.csv"):
        R = open_array(f"{bucket}/{name}", columns=["a", "b", "c"], storage_options=options)
        L = open_array(local / name, columns=["a", "b", "c"])
        assert R.chunks == L.chunks and feature_names(R).tolist() == ["a", "b", "c"]
        np.testing.assert_array_equal(R.compute(), L.compute())
        np.testing.assert_allclose(R.compute(), X, rtol=1e-6)


def test_kmeans_on_s3_equals_kmeans_on_local_files(uploaded):
    bucket, options, _, local = uploaded
    for name, cols in (("pts.zarr", None), ("pts.parquet", ["a", "b", "c"]), ("pts.csv", ["a", "b", "c"])):
        kw = {"columns": cols} if cols else {}
        remote = dclust.KMeans(n_clusters=4, random_state=0).fit(
            open_array(f"{bucket}/{name}", storage_options=options, **kw))
        here = dclust.KMeans(n_clusters=4, random_state=0).fit(open_array(local / name, **kw))
        np.testing.assert_array_equal(remote.cluster_centers_, here.cluster_centers_)
        assert remote.inertia_ == here.inertia_ and remote.n_iter_ == here.n_iter_


def test_the_aws_environment_is_enough(uploaded, monkeypatch, s3_endpoint):
    """No storage_options: s3fs (botocore) reads AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_ENDPOINT_URL."""
    import s3fs

    bucket, options, X, _ = uploaded
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", options["key"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", options["secret"])
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    s3fs.S3FileSystem.clear_instance_cache()
    np.testing.assert_array_equal(open_array(f"{bucket}/pts.zarr").compute(), X)
    assert open_array(f"{bucket}/pts.parquet", columns=["c"]).shape == (1200, 1)


def test_missing_objects_and_unknown_formats_on_s3(uploaded):
    bucket, options, _, _ = uploaded
    with pytest.raises(StorageError, match="does not exist.*storage credentials"):
        open_array(f"{bucket}/missing.zarr", storage_options=options)
    with pytest.raises(StorageError, match="matches none"):
        open_array(f"{bucket}/part-*.csv", storage_options=options)
    with pytest.raises(dclust.errors.InvalidDataError, match="'label'"):
        open_array(f"{bucket}/pts.parquet", storage_options=options)


def test_storage_options_must_be_a_dict():
    with pytest.raises(dclust.errors.InvalidParameterError, match="storage_options"):
        open_array("s3://bucket/x.zarr", storage_options="endpoint_url=http://x")


def test_writes_to_s3_are_checked_before_any_pass_and_commit_whole(s3, monkeypatch, s3_endpoint):
    """write_array / save to the S3 server (AWS_* environment): a missing bucket is refused before the data are
    read; a good location gets the store, readable back, with no temporary or probe object left."""
    import s3fs

    bucket, options, fs = s3
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", options["key"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", options["secret"])
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    s3fs.S3FileSystem.clear_instance_cache()
    reads = []

    def counted(block):
        if block.size:  # (dask calls it once on an empty block for the output's type)
            reads.append(1)
        return block

    X = da.from_array(_points(), chunks=(400, -1)).map_blocks(counted, dtype=np.float32)
    with pytest.raises(StorageError, match="bucket exists"):
        dclust.write_array(X, "s3://no-such-bucket-dclust/x.zarr")
    km = dclust.KMeans(n_clusters=2, random_state=0).fit(_points(200))
    with pytest.raises(StorageError, match="bucket exists"):
        dclust.save(km, "s3://no-such-bucket-dclust/m.zarr")
    assert reads == []  # refused before any pass over the data
    dclust.write_array(X, f"{bucket}/x.zarr")
    np.testing.assert_array_equal(open_array(f"{bucket}/x.zarr").compute(), _points())
    dclust.save(km, f"{bucket}/m.zarr")
    np.testing.assert_array_equal(dclust.load(f"{bucket}/m.zarr").cluster_centers_, km.cluster_centers_)
    fs.invalidate_cache()
    assert sorted(fs.ls(bucket[5:])) == sorted([f"{bucket[5:]}/x.zarr", f"{bucket[5:]}/m.zarr"])
