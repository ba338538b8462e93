"""Every test here runs a benchmark script end to end as a subprocess: marked ``slow`` (``make test-fast`` skips
them; ``make test`` runs them)."""

import pytest


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/benchmarks/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.slow)
