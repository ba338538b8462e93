"""benchmarks/bench_engine.py runs end to end at toy size, as a subprocess (as the lead runs it), and its JSON has
every row of the table for every configuration."""

from __future__ import annotations

import json
import math

import pytest

from _support.benchmarks import assert_no_traceback, assert_refused_before_any_work, import_as_worker, run_script

SCRIPT = "bench_engine.py"


def run_bench(*args, cwd=None, timeout=300):
    return run_script(SCRIPT, *args, cwd=cwd, timeout=timeout)


def test_importing_runs_nothing(tmp_path, monkeypatch):
    """Worker processes re-import the script as ``__mp_main__``: that must start no cluster and write nothing."""
    namespace = import_as_worker(SCRIPT, tmp_path, monkeypatch)
    assert len(namespace["ROWS"]) == len(set(namespace["ROWS"]))


@pytest.mark.parametrize("bad", [["--configs", "10x4"], ["--configs", "4x2x8"], ["--iter-lo", "5", "--iter-hi", "5"],
                                 ["--chunk-rows", "0"]])
def test_bad_arguments_are_refused_before_any_work(bad, tmp_path):
    assert_refused_before_any_work(SCRIPT, bad, tmp_path)


def test_toy_run_writes_every_row(tmp_path):
    out, data = tmp_path / "bench_engine.json", tmp_path / "data"
    # the smallest run that still fills every row: 4 row blocks, one timed run of 1 and 2 iterations per marginal,
    # one pass per peak-memory fit; the optional peers whose rows the assertions allow to be skipped are skipped
    n, d, k = 8_000, 3, 4
    r = run_bench("--configs", f"{n}x{d}x{k}", "--chunk-rows", 2_000, "--centers", 4, "--iter-hi", 2, "--iter-lo", 1,
                  "--repeats", 1, "--io-repeats", 1, "--mem-factor", 2, "--mem-iter", 1, "--skip", "daskml", "faiss",
                  "--data-dir", data, "--out", out)
    assert r.returncode == 0, f"STDOUT:\n{r.stdout}\nSTDERR:\n{r.stderr}"
    assert_no_traceback(r.stderr)
    res = json.loads(out.read_text())
    rows = res["rows"]
    assert "floor" in rows and "kmeans_persisted" in rows and "memory_dpmeans_mN" in rows
    (cfg,) = res["configs"]
    assert (cfg["n"], cfg["d"], cfg["k"]) == (n, d, k)
    assert cfg["errors"] == {}
    by_id = {row["id"]: row for row in cfg["rows"]}
    assert [row["id"] for row in cfg["rows"]] == rows

    # every measured row has a positive figure; only the peer asked to be skipped has none
    for rid, row in by_id.items():
        if rid in ("daskml", "faiss"):
            assert row["value"] is None and row["note"].startswith("skipped")
            continue
        assert row["value"] is not None and math.isfinite(row["value"]), row
        if rid.startswith(("read_", "memory_", "anytime", "dpmeans", "rdpmeans", "bpmeans", "gmpr",
                           "kmeans_processes_")):
            assert row["value"] > 0, row  # wall times and byte counts (marginal costs can dip below 0 at toy size)
    # the stores differ only in codec: the same data, and every one of them on disk
    assert by_id["read_none"]["note"].endswith("1.00x of uncompressed read")
    sizes = {c: s["bytes_on_disk"] for c, s in cfg["stores"].items()}
    assert sizes["none_crc32c"] > sizes["none"] >= n * d * 4
    # the marginal fits ran exactly max_iter iterations
    for key in ("sklearn", "kmeans_default", "kmeans_default_crc32c", "kmeans_processes", "kmeans_threads_cluster",
                "kmeans_persisted"):
        assert cfg["m"][key]["exact_iterations"], (key, cfg["m"][key])
    # ratios and verdicts are consistent with the figures they are computed from (at toy size on a loaded machine a
    # marginal cost can dip to or below zero: then there is no ratio and no verdict, never a false "MET")
    def expected(a, b):
        return a / b if a > 0 and b > 0 else None

    floor = by_id["floor"]["value"]
    assert floor == pytest.approx(by_id["read_none"]["value"] + by_id["sklearn"]["value"])
    km = by_id["kmeans_processes"]
    assert km["ratio"] == pytest.approx(expected(km["value"], floor))
    assert km["met"] == (None if km["ratio"] is None else km["ratio"] <= km["limit"])
    dp = by_id["dpmeans"]
    assert dp["ratio"] == pytest.approx(dp["value"] / by_id["kmeans_processes_events"]["value"])
    assert dp["met"] == (dp["ratio"] <= 1.2)
    assert by_id["rdpmeans"]["ratio"] == pytest.approx(by_id["rdpmeans"]["value"] / dp["value"])
    mem = by_id["memory_kmeans_mN"]
    assert mem["unit"] == "B" and mem["ratio"] == pytest.approx(mem["value"] / by_id["memory_kmeans_N"]["value"])
    assert cfg["m"]["memory_kmeans_mN"]["n"] == 2 * n
    assert cfg["links"]["n_links"] > 0
    # the printed table carries the same rows
    for label in ("FLOOR = zarr read + scikit-learn iteration", "(iv) persisted in (ii)", "dask-ml KMeans (marginal)"):
        assert label in r.stdout
    assert res["report"] in r.stdout
