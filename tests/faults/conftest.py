"""The fault tests kill real writer, worker and scheduler processes: marked ``slow`` (``make test-fast`` skips
them; ``make test`` runs them)."""

import pytest


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/faults/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.slow)
