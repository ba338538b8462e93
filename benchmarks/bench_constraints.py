"""Benchmark: RDP-means and GM-PR with a block-sparse constraint graph against DPMeans and KMeans on one Zarr store.

Data: ``--n`` x 8 float32 Gaussian blobs (16 centres) in a Zarr store with ``--chunk-rows`` row chunks, and
``--link-fraction * N`` random links (default 0.01 N): 90% are must-links between two rows of one true cluster, 10%
random pairs of rows (cannot-links when their clusters differ, must-links otherwise). The graph is aligned to the
store's chunks and persisted next to it with ``ConstraintGraph.to_zarr``.

Measured in one run on a local cluster of 2 single-threaded worker processes:
  - seconds per iteration (median of the progress events of the passes after the first) of ``RDPMeans``
    (``mode="serial"``, the coloured phases, and ``mode="jacobi"``), ``DPMeans`` and ``KMeans``;
  - seconds per E+M step of ``GMPR`` (``--centers`` classes, one diagonal Gaussian each, the same links, a fixed
    number of iterations) against the KMeans iteration of the same run;
  - the number of colour phases of the link graph;
  - peak resident memory of the workers during each fit;
  - graph memory (bytes per link) at two link counts, and the time to build / write / read the graph; likewise
    the bytes of GM-PR's per-block link plan, and of the link endpoints' float64 rows its fit gathers once and
    keeps on the workers (every E-step is then one task per row block).

Every method runs ``--rounds`` times (default 3), one round after the other: this machine's speed drifts by up to
1.5x within a minute, so each ratio is the median over rounds of the ratio within a round (s/iter: the median over
rounds).

Targets (issue 5): RDP-means per iteration <= 2 x DPMeans per iteration; GM-PR E+M step <= 3 x KMeans per
iteration (diagonal covariances); graph memory linear in the links.

Run: ``.venv/bin/python benchmarks/bench_constraints.py`` (N = 5,000,000); ``--quick``: N = 400,000 (under a
minute once the store exists).
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import HERE, WorkerPeakMemory, add_int_options, fmt_bytes, machine_info, print_table, write_json  # noqa: E402

T_RATIO = 2.0
T_GMPR = 3.0


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_int_options(p, n=5_000_000, d=8, centers=16, chunk_rows=500_000)
    p.add_argument("--link-fraction", type=float, default=0.01, help="links per row")
    p.add_argument("--within", type=float, default=0.9, help="share of links drawn inside a true cluster")
    p.add_argument("--lam", type=float, default=60.0)
    p.add_argument("--iters", type=int, default=6, help="iterations of every method (fixed, for per-iteration timing)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data-dir", type=Path, default=HERE / "data")
    p.add_argument("--out", type=Path, default=HERE / "results" / "bench_constraints.json")
    p.add_argument("--quick", action="store_true", help="N = 400,000 in 100,000-row chunks, 4 iterations")
    p.add_argument("--skip", nargs="*", default=[], choices=["rdp", "gmpr"], help="halves to leave out")
    p.add_argument("--rounds", type=int, default=3,
                   help="rounds of all methods, one after the other (this machine's speed drifts by up to 1.5x within "
                        "a minute: each ratio is the median over rounds of the ratio within a round)")
    args = p.parse_args(argv)
    if args.quick:
        args.n, args.chunk_rows, args.iters, args.rounds = 400_000, 100_000, 4, 1
    return args


def ensure_store(args):
    import dclust
    import zarr

    stem = f"con_blobs_n{args.n}_d{args.d}_c{args.centers}_r{args.chunk_rows}_s{args.seed}"
    path, lpath = args.data_dir / f"{stem}.zarr", args.data_dir / f"{stem}_labels.zarr"
    ok = False
    if path.exists() and lpath.exists():
        try:
            ok = zarr.open_array(str(path), mode="r").shape == (args.n, args.d)
        except Exception:  # noqa: BLE001 - regenerate anything odd
            ok = False
    if not ok:
        args.data_dir.mkdir(parents=True, exist_ok=True)
        print(f"  generating {path.name} ...", flush=True)
        b = dclust.make_blobs(args.n, args.d, centers=args.centers, chunk_rows=args.chunk_rows, dtype="float32",
                              random_state=args.seed)
        dclust.write_array(b.X, str(path), overwrite=True)
        dclust.write_labels(b.labels, str(lpath), overwrite=True)
    return str(path), str(lpath)


def make_links(y: np.ndarray, m: int, within: float, rng: np.random.Generator):
    """``m`` pairs: a share ``within`` inside one true cluster, the rest uniform; type = same true cluster."""
    n = y.size
    m_in = int(round(within * m))
    by = np.argsort(y, kind="stable")
    starts = np.searchsorted(y[by], np.arange(y.max() + 2))
    i = rng.integers(0, n, m_in)
    c = y[i]
    j = by[starts[c] + (rng.random(m_in) * (starts[c + 1] - starts[c])).astype(np.int64)]
    i2, j2 = rng.integers(0, n, m - m_in), rng.integers(0, n, m - m_in)
    a, b = np.concatenate([i, i2]), np.concatenate([j, j2])
    return a, b, y[a] == y[b]


def _warm_gmpr_kernels() -> None:
    """Load GM-PR's numba kernels (from numba's cache) in this process, with the argument types of the fit."""
    from dclust.kernels.gmpr import MixtureParams, link_partial, unlinked_partial

    X = np.random.default_rng(0).normal(size=(64, 8)).astype(np.float32)
    for gap in (0.0, 1e3):  # overlapping components (the float32 E-step on float32 rows), then separated ones
        means = np.zeros((2, 1, 8))
        means[1] += gap
        p = MixtureParams.build(np.full(2, 0.5), np.ones((2, 1)), means, np.ones((2, 1, 8)))
        unlinked_partial(X, p, np.array([0, 1]))
    rows = X[:4].astype(np.float64)
    link_partial(rows[:2], rows[2:], np.array([True, False]), p)


def fit_timed(client, name, make, X, **fit_kw):
    import dclust

    events = []
    with WorkerPeakMemory(client) as mem, dclust.on_progress(events.append), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        model = make().fit(X, **fit_kw)
        wall = time.perf_counter() - t0
    iters = [e.seconds for e in events if e.phase == "iter"]
    later = iters[1:] if len(iters) > 1 else iters
    return model, {
        "name": name, "seconds": wall, "n_iter": len(iters), "iteration_seconds": iters,
        "seconds_per_iteration": float(np.median(later)), "first_iteration_seconds": iters[0] if iters else None,
        "peak_worker_memory": mem.peak, "memory_method": mem.method,
        "n_clusters": int(getattr(model, "n_clusters_", getattr(model, "n_clusters", 0))),
    }


def run(args, client) -> dict:
    import dclust
    from dclust.cluster._rdpmeans import RDPMeans
    from dclust.constraints import ConstraintGraph

    path, lpath = ensure_store(args)
    X = dclust.open_array(path)
    import zarr

    y = np.asarray(zarr.open_array(lpath, mode="r")[:])
    rng = np.random.default_rng(args.seed)
    m = int(round(args.link_fraction * args.n))
    a, b, must = make_links(y, m, args.within, rng)
    t0 = time.perf_counter()
    G = ConstraintGraph.from_pairs(a, b, must, n_samples=args.n, chunks=X.chunks[0], check_feasible=False)
    t_build = time.perf_counter() - t0
    gpath = Path(path).with_name(Path(path).stem + "_links.zarr")
    t0 = time.perf_counter()
    G.to_zarr(gpath, overwrite=True)
    t_write = time.perf_counter() - t0
    t0 = time.perf_counter()
    G = ConstraintGraph.from_zarr(gpath)
    t_read = time.perf_counter() - t0
    half = ConstraintGraph.from_pairs(a[: m // 2], b[: m // 2], must[: m // 2], n_samples=args.n,
                                      chunks=X.chunks[0], check_feasible=False)
    from dclust.constraints import greedy_coloring

    t0 = time.perf_counter()
    n_colors = int(greedy_coloring(G)[1].max() + 1) if G.n_links else 0
    t_color = time.perf_counter() - t0
    from dclust._dask.gmpr import LinkPlan

    def plan_bytes(g):
        plan = LinkPlan.from_blocks(X.chunks[0], g.blocks())
        return int(sum(a.nbytes for a in plan.linked) + sum(sum(x.nbytes for x in p[2:]) for p in plan.pairs))

    graph = {"n_links": G.n_links, "n_must": G.n_must, "n_cannot": G.n_cannot, "block_pairs": len(G.block_pairs()),
             "nbytes": G.nbytes, "bytes_per_link": G.nbytes / max(G.n_links, 1), "half_links": half.n_links,
             "half_nbytes": half.nbytes, "build_seconds": t_build, "write_seconds": t_write, "read_seconds": t_read,
             "coloring_seconds": t_color, "n_colors": n_colors, "path": str(gpath),
             "gmpr_plan_nbytes": plan_bytes(G), "gmpr_plan_half_nbytes": plan_bytes(half),
             "gmpr_endpoint_rows_nbytes": 2 * G.n_links * args.d * 8}
    print(f"  graph: {G}  ({fmt_bytes(G.nbytes)}, {n_colors} colours)", flush=True)

    it = args.iters
    common = dict(random_state=args.seed)
    # warm-up (numba compilation and imports, on the workers too) on a small slice with its own links
    Xs = X[:20_000].compute()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        Gs = ConstraintGraph.from_labels_sample(y[:20_000], 1e-4, rng=0)
        RDPMeans(lam=args.lam, max_iter=2, **common).fit(Xs, constraints=Gs)
        RDPMeans(lam=args.lam, max_iter=2, **common).fit(X[:1_000_000], constraints=G.__class__.from_pairs(
            [0], [1], True, n_samples=min(1_000_000, args.n), chunks=X[:1_000_000].chunks[0]))

    def one_round() -> list[dict]:
        runs = []
        _, r = fit_timed(client, "KMeans", lambda: dclust.KMeans(n_clusters=args.centers, init="random", max_iter=it,
                                                                 tol=0.0, **common), X)
        runs.append(r)
        _, r = fit_timed(client, "DPMeans", lambda: dclust.DPMeans(lam=args.lam, max_iter=it, **common), X)
        runs.append(r)
        for mode in ("serial", "jacobi") if "rdp" not in args.skip else ():
            model, r = fit_timed(client, f"RDPMeans ({mode})", lambda: RDPMeans(
                lam=args.lam, xi0=1.0, xi_rate=2.0, max_iter=it, mode=mode, **common), X, constraints=G)
            labels = np.asarray(model.labels_.compute())
            r.update(n_colors=model.n_colors_, n_violated=list(model.n_violated_),
                     ari=dclust.metrics.adjusted_rand_score(y, labels))
            runs.append(r)
        if "gmpr" not in args.skip:
            with warnings.catch_warnings():  # warm-up: numba and imports on the workers
                warnings.simplefilter("ignore")
                head = X[:200_000]  # (or all of X, when smaller)
                dclust.GMPR(n_classes=args.centers, covariance_type="diag", max_iter=2, tol=0.0, **common).fit(
                    head, constraints=ConstraintGraph.from_pairs([0], [1], [True], n_samples=head.shape[0],
                                                                 chunks=head.chunks[0]))
            client.run(_warm_gmpr_kernels)  # that fit ran on one worker: load the kernels in every worker
            model, r = fit_timed(client, "GMPR (diag)", lambda: dclust.GMPR(
                n_classes=args.centers, covariance_type="diag", max_iter=it, tol=0.0, **common), X, constraints=G)
            labels = np.asarray(model.predict(X).compute())
            r.update(ari=dclust.metrics.adjusted_rand_score(y, labels), n_clusters=args.centers)
            runs.append(r)
        return runs

    rounds = [one_round() for _ in range(args.rounds)]
    runs = combine_rounds(rounds)
    return {"graph": graph, "runs": runs, "n": args.n, "d": args.d, "rounds": [
        {r["name"]: r["seconds_per_iteration"] for r in rnd} for rnd in rounds]}


def combine_rounds(rounds: list[list[dict]]) -> list[dict]:
    """One row per method: the first round's row, with s/iter the median over rounds and each ratio the median over
    rounds of the ratio within the round (both methods timed minutes apart at most)."""
    out = []
    for k, first in enumerate(rounds[0]):
        row = dict(first)
        row["seconds_per_iteration"] = float(np.median([rnd[k]["seconds_per_iteration"] for rnd in rounds]))
        row["peak_worker_memory"] = max(rnd[k]["peak_worker_memory"] for rnd in rounds)
        for key, ref in (("per_iteration_vs_dpmeans", "DPMeans"), ("per_iteration_vs_kmeans", "KMeans")):
            ratios = [rnd[k]["seconds_per_iteration"]
                      / next(r for r in rnd if r["name"] == ref)["seconds_per_iteration"] for rnd in rounds]
            row[key] = float(np.median(ratios))
            row[key + "_rounds"] = ratios
        out.append(row)
    return out


def _rounds(row: dict, ref: str) -> str:
    ratios = row.get(f"per_iteration_vs_{ref}_rounds", [])
    return f" (median of {len(ratios)} rounds: {', '.join(f'{x:.2f}' for x in ratios)})" if len(ratios) > 1 else ""


def report(res: dict) -> str:
    g = res["graph"]
    rows = [[r["name"], r["n_iter"], f"{r['seconds_per_iteration']:.3f}", f"{r['per_iteration_vs_dpmeans']:.2f}x",
             f"{r['per_iteration_vs_kmeans']:.2f}x",
             f"{r['first_iteration_seconds']:.3f}", r.get("n_colors", "-"), r["n_clusters"],
             fmt_bytes(r["peak_worker_memory"]), f"{r['ari']:.3f}" if "ari" in r else "-"] for r in res["runs"]]
    texts = [print_table(rows, ["method", "iters", "s/iter", "vs DPMeans", "vs KMeans", "1st iter s", "colour phases",
                                "K", "peak worker mem", "ARI"],
                         f"{res['n']:,} x {res['d']} float32 in Zarr, {g['n_links']:,} links "
                         f"({g['n_must']:,} must / {g['n_cannot']:,} cannot, {g['block_pairs']} block pairs)")]
    texts.append(f"  graph: {fmt_bytes(g['nbytes'])} for {g['n_links']:,} links ({g['bytes_per_link']:.1f} B/link); "
                 f"{fmt_bytes(g['half_nbytes'])} for {g['half_links']:,} links; build {g['build_seconds']:.2f} s, "
                 f"write {g['write_seconds']:.2f} s, read {g['read_seconds']:.2f} s, colouring "
                 f"{g['coloring_seconds']:.2f} s ({g['n_colors']} colours)")
    texts.append(f"  GM-PR link plan: {fmt_bytes(g['gmpr_plan_nbytes'])} for {g['n_links']:,} links "
                 f"({g['gmpr_plan_nbytes'] / g['n_links']:.1f} B/link); {fmt_bytes(g['gmpr_plan_half_nbytes'])} for "
                 f"{g['half_links']:,} links ({g['gmpr_plan_half_nbytes'] / max(g['half_links'], 1):.1f} B/link); "
                 f"endpoint rows kept on the workers {fmt_bytes(g.get('gmpr_endpoint_rows_nbytes', 0))}")
    linear = abs(g["nbytes"] / g["n_links"] - g["half_nbytes"] / max(g["half_links"], 1)) < 1e-9
    texts.append(f"  graph memory linear in links: {'MET' if linear else 'NOT MET'}")
    for r in res["runs"]:
        if r["name"].startswith("RDPMeans"):
            ok = r["per_iteration_vs_dpmeans"] <= T_RATIO
            texts.append(f"  {r['name']} per iteration = {r['per_iteration_vs_dpmeans']:.2f} x DPMeans "
                         f"(target <= {T_RATIO:.0f}x): {'MET' if ok else 'NOT MET'}{_rounds(r, 'dpmeans')}")
        if r["name"].startswith("GMPR"):
            ok = r["per_iteration_vs_kmeans"] <= T_GMPR
            texts.append(f"  {r['name']} E+M step = {r['per_iteration_vs_kmeans']:.2f} x KMeans per iteration "
                         f"(target <= {T_GMPR:.0f}x): {'MET' if ok else 'NOT MET'}{_rounds(r, 'kmeans')}")
    text = "\n".join(texts)
    print(text)
    return text


def main(argv=None) -> dict:
    args = parse_args(argv)
    from distributed import Client, LocalCluster

    logging.basicConfig(level=logging.WARNING)
    res: dict = {"args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
                 "machine": machine_info(), "targets": {"rdp_over_dp_per_iteration": T_RATIO,
                                                        "gmpr_over_kmeans_per_iteration": T_GMPR}}
    t0 = time.perf_counter()
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        res.update(run(args, client))
    res["total_seconds"] = time.perf_counter() - t0
    res["report"] = report(res)
    path = write_json(res, args.out)
    print(f"\nwrote {path} (total {res['total_seconds']:.0f} s)")
    return res


if __name__ == "__main__":
    main()
