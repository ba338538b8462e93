"""Fixtures of the CLI tests."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def cluster():
    """One single-worker process cluster shared by every CLI test module (the commands reach it with
    ``--scheduler``; none stops or reconfigures it); always closed."""
    from distributed import LocalCluster

    c = LocalCluster(n_workers=1, threads_per_worker=1, processes=True, host="127.0.0.1",
                     dashboard_address=None, memory_limit="1GiB")
    try:
        yield c
    finally:
        c.close()


@pytest.fixture(scope="session")
def address(cluster):
    return cluster.scheduler_address
