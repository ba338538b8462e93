"""Fixtures of the io tests."""

from __future__ import annotations

import dask
import pytest


@pytest.fixture
def threaded():
    """Dask's threaded scheduler for the test (stores in this process: memory://, the S3 server's thread)."""
    with dask.config.set(scheduler="threads"):
        yield
