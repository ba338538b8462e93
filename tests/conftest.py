"""Shared fixtures: small real datasets and a real distributed LocalCluster."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))  # tests/_support: helpers shared by test modules


@pytest.fixture(scope="session")
def blobs():
    """3,000 x 3 float64 points in 5 Gaussian blobs, with true labels."""
    rng = np.random.default_rng(1)
    centers = rng.uniform(-10, 10, size=(5, 3))
    y = rng.integers(0, 5, size=3000)
    X = centers[y] + rng.normal(size=(3000, 3))
    return X, y


@pytest.fixture(scope="session")
def local_cluster():
    """A real two-process distributed cluster on 127.0.0.1, shared by the tests that need one."""
    from distributed import LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=":0", memory_limit="2GiB") as cluster:
        yield cluster


@pytest.fixture
def client(local_cluster):
    from distributed import Client

    with Client(local_cluster) as c:
        yield c


# ---------------------------------------------------------------------------------------------------------------
# a real S3-compatible server (moto's server mode) on 127.0.0.1, for the object-storage tests
# ---------------------------------------------------------------------------------------------------------------

S3_CREDENTIALS = {"key": "dclust-test", "secret": "dclust-test-secret"}


@pytest.fixture(scope="session")
def s3_endpoint():
    """The endpoint URL of an S3 server (moto, in a thread of this process) on a free port of 127.0.0.1; stopped at
    the end of the session. Worker processes reach it over HTTP like any S3 endpoint."""
    import socket

    import moto.server

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = moto.server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


@pytest.fixture
def s3(s3_endpoint):
    """A fresh bucket on the S3 server: ``(url "s3://bucket", storage_options, s3fs filesystem)``; removed after."""
    import secrets

    import s3fs

    options = {"endpoint_url": s3_endpoint, **S3_CREDENTIALS}
    fs = s3fs.S3FileSystem(**options)
    bucket = f"dclust-{secrets.token_hex(4)}"
    fs.mkdir(bucket)
    try:
        yield f"s3://{bucket}", options, fs
    finally:
        fs.rm(bucket, recursive=True)
        s3fs.S3FileSystem.clear_instance_cache()
