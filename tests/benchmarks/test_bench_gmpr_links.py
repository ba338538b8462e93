"""benchmarks/bench_gmpr_links.py ([GP] Figs. 4, 6, 7) at toy size, in process: the (task, kind) units give the same
rows serially and in worker processes, plain EM is reported under every kind, and GM-PR's labels of linked rows
come from their pair posteriors (the paper's "highest posterior")."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_gmpr_links as bench  # noqa: E402


def test_units_in_worker_processes_equal_the_serial_run():
    args = (["thyroid*"], ["mixed", "must"], [0, 8], 2, ["GM-PR", "GMM-EC"])
    seen = []
    serial = bench.run(*args, jobs=1, log=lambda s: None, done=lambda rows: seen.append(len(rows)))
    parallel = bench.run(*args, jobs=2, log=lambda s: None)
    assert serial == parallel
    assert seen == [4, 8]  # after each unit: mixed (0 and 8 links), then must with its copy of 0
    zero = [r for r in serial if r["links"] == 0]
    assert {r["kind"] for r in zero} == {"mixed", "must"}
    assert [r["purity"] for r in zero if r["kind"] == "mixed"] == [r["purity"] for r in zero if r["kind"] == "must"]
    assert all(r["trials"] == 2 and r["failed"] == 0 and 0.5 <= r["purity"] <= 1 for r in serial)


def test_linked_rows_take_their_pair_posteriors():
    X, y = bench.load("thyroid*")
    i, j, must = bench.draw_links(y, 256, "cannot", np.random.default_rng(1))
    assert not must.any() and (y[i] != y[j]).all()
    links = bench.fit_all(X, y, i, j, must, 5, ["GM-PR"])["GM-PR"]
    plain = bench.fit_all(X, y, i, j, must, 5, ["GM-PR"], label_mode="plain")["GM-PR"]
    assert links > plain + 0.02  # the cannot-links decide the rows the two Gaussians share


def test_refuses_bad_sizes():
    with pytest.raises(SystemExit):
        bench.parse_args(["--jobs", "0"])
    assert bench.parse_args(["--trials", "100", "--jobs", "2"]).jobs == 2
