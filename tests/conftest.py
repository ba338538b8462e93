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
    centres = rng.uniform(-10, 10, size=(5, 3))
    y = rng.integers(0, 5, size=3000)
    X = centres[y] + rng.normal(size=(3000, 3))
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
