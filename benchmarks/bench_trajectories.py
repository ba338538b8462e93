"""Benchmark: [DM] 8.4 aircraft trajectories, D-Means vs DP-means vs Gibbs (paper Table 2 beside dclust).

The paper's 17,895 US ADS-B trajectories and 600 hand labels are not available offline. The stand-in is the real
ADS-B sample that ships inside the ``traffic`` package on PyPI (``traffic/data/samples/collections/
switzerland.json.gz``: 1,243 flights over Switzerland on 2018-08-01, 05:00-22:00 UTC, from the OpenSky Network),
read from the installed package's files without importing it (``pip install --no-deps traffic``).

Features as [DM] 8.4: each flight's velocity (east, north components from ground speed and track, in 100 kt) is
smoothed by a Gaussian process over (latitude, longitude) and its posterior mean queried on a 10 x 20 lattice over
the region: a 400-dim vector per flight. Flights are streamed in half-hour batches by their first timestamp.

Labels: there are no hand labels, so a documented proxy replaces them: the flight's (entry, exit) pair of compass
octants, i.e. where it enters and leaves the region as seen from its centre (a "flow"). Accuracy is the one-to-one
matched accuracy (Hungarian) of the whole labelling against the proxy, counted over flows with >= ``--min-flow``
flights; the paper's is a confidence-weighted accuracy on 600 hand labels.

Methods (paper's protocol): D-Means (3 order restarts) over the half-hour batches; DP-means (3 restarts, best
objective) on all flights at once; the collapsed Gibbs sampler of the DP mixture (``DPMMGibbs``, 50 sweeps) on all
flights. ``lam`` comes from the k-th furthest-first heuristic with k = number of flows (docs/algorithms.md 1.3).

Run: ``.venv/bin/python benchmarks/bench_trajectories.py`` (about 1-2 min); toy: ``--max-flights 150 --sweeps 3``.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import HERE, machine_info, print_table, write_json  # noqa: E402

PAPER = {"dmeans": {"accuracy": 55.9, "seconds": 2.7e2}, "dpmeans": {"accuracy": 55.6, "seconds": 3.1e3},
         "gibbs": {"accuracy": 36.9, "seconds": 1.4e4}}
SAMPLE = ("data", "samples", "collections", "switzerland.json.gz")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--max-flights", type=int, default=0, help="keep the first N flights (0: all)")
    p.add_argument("--sweeps", type=int, default=50, help="Gibbs sweeps")
    p.add_argument("--restarts", type=int, default=3)
    p.add_argument("--min-flow", type=int, default=5, help="flows with fewer flights are not scored")
    p.add_argument("--T-Q", type=float, default=10.0, help="D-Means T_Q (half-hour steps)")
    p.add_argument("--k-tau", type=float, default=1.1, help="D-Means k_tau")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=HERE / "results" / "bench_trajectories.json")
    a = p.parse_args(argv)
    if a.max_flights < 0 or a.sweeps < 1 or a.restarts < 1 or a.min_flow < 1:
        p.error("--max-flights >= 0, --sweeps, --restarts and --min-flow >= 1")
    return a


def sample_path() -> Path:
    spec = importlib.util.find_spec("traffic")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("bench_trajectories needs the ADS-B sample shipped in the 'traffic' package: "
                         "pip install --no-deps traffic")
    return Path(list(spec.submodule_search_locations)[0]).joinpath(*SAMPLE)


def load_flights(args):
    """Per flight: (start time, lat/lon points, east/north velocity); flights are (icao24, callsign) groups."""
    import pandas as pd

    df = pd.read_json(sample_path())
    df = df.dropna(subset=["latitude", "longitude", "track", "groundspeed", "timestamp"])
    flights = []
    for _, g in df.sort_values("timestamp").groupby(["icao24", "callsign"], sort=False):
        if len(g) < 10:
            continue
        th = np.deg2rad(g["track"].to_numpy())
        v = g["groundspeed"].to_numpy()[:, None] / 100.0 * np.stack([np.sin(th), np.cos(th)], 1)
        flights.append((pd.Timestamp(g["timestamp"].iloc[0]), g[["latitude", "longitude"]].to_numpy(), v))
    flights.sort(key=lambda f: f[0])
    if args.max_flights:
        flights = flights[: args.max_flights]
    return flights


def features(flights, n_lat=10, n_lon=20, max_points=60, noise=0.1):
    """GP posterior mean of each flight's velocity field on an n_lat x n_lon lattice: (n_flights, 2 n_lat n_lon)."""
    allp = np.vstack([f[1] for f in flights])
    lo, hi = np.quantile(allp, 0.01, axis=0), np.quantile(allp, 0.99, axis=0)
    scale = np.array([1.0, np.cos(np.deg2rad(allp[:, 0].mean()))])  # degrees of longitude are shorter
    grid = np.stack(np.meshgrid(np.linspace(lo[0], hi[0], n_lat), np.linspace(lo[1], hi[1], n_lon),
                                indexing="ij"), -1).reshape(-1, 2)
    ell = 1.5 * max((hi[0] - lo[0]) / (n_lat - 1), (hi[1] - lo[1]) * scale[1] / (n_lon - 1))

    def k(a, b):
        d = ((a[:, None, :] - b[None]) * scale) ** 2
        return np.exp(-d.sum(-1) / (2 * ell * ell))

    out = np.zeros((len(flights), 2 * len(grid)))
    for i, (_, p, v) in enumerate(flights):
        idx = np.linspace(0, len(p) - 1, min(max_points, len(p))).round().astype(int)
        P, V = p[idx], v[idx]
        alpha = np.linalg.solve(k(P, P) + noise * np.eye(len(P)), V)
        out[i] = (k(grid, P) @ alpha).T.ravel()
    center = (lo + hi) / 2
    return out, center


def flows(flights, center):
    """Proxy label: (entry octant, exit octant) of the flight around the region's centre."""
    def octant(pt):
        ang = np.arctan2(pt[0] - center[0], (pt[1] - center[1]) * np.cos(np.deg2rad(center[0])))
        return int(np.floor((ang + np.pi) / (np.pi / 4))) % 8
    return np.array([8 * octant(p[0]) + octant(p[-1]) for _, p, _ in flights], dtype=np.int64)


def score(y, z, keep):
    from dclust.metrics import matched_accuracy

    return 100.0 * matched_accuracy(y[keep], z[keep])


def main(argv=None) -> dict:
    args = parse_args(argv)
    import dclust
    from dclust.cluster import DPMMGibbs
    from dclust.stream import DynamicMeans

    t0 = time.perf_counter()
    flights = load_flights(args)
    X, center = features(flights)
    y = flows(flights, center)
    counts = np.bincount(y, minlength=64)
    keep = counts[y] >= args.min_flow
    k = int((counts >= args.min_flow).sum())
    start = np.array([f[0].value for f in flights]) / 1e9
    step = ((start - start.min()) // 1800).astype(int)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lam = float(dclust.DPMeans(n_clusters=k, random_state=args.seed).fit(X).lam_)
    res = {"args": {kk: (str(v) if isinstance(v, Path) else v) for kk, v in vars(args).items()},
           "machine": machine_info(), "paper": PAPER, "data": {"sample": "/".join(SAMPLE), "n_flights": len(X),
           "n_features": X.shape[1], "n_steps": int(step.max()) + 1, "n_flows_scored": k,
           "n_flights_scored": int(keep.sum())}, "lam": lam}
    methods = {}
    # D-Means over half-hour batches (steps with no flight are empty batches: clusters age)
    tt = time.process_time()
    dm = DynamicMeans(lam=lam, T_Q=args.T_Q, k_tau=args.k_tau, n_restarts=args.restarts, random_state=args.seed)
    z = np.empty(len(X), np.int64)
    for t in range(int(step.max()) + 1):
        m = step == t
        dm.partial_fit(X[m] if m.any() else np.zeros((0, X.shape[1])))
        if m.any():
            z[m] = dm.labels_
    methods["dmeans"] = {"seconds": time.process_time() - tt, "accuracy": score(y, z, keep),
                         "n_clusters": int(len(np.unique(z)))}
    # DP-means on everything, best of restarts
    tt = time.process_time()
    best = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for r in range(args.restarts):
            dp = dclust.DPMeans(lam=lam, init="empty", random_state=args.seed + r).fit(X)
            if best is None or dp.objective_ < best.objective_:
                best = dp
    methods["dpmeans"] = {"seconds": time.process_time() - tt, "accuracy": score(y, np.asarray(best.predict(X)), keep),
                          "n_clusters": int(best.n_clusters_)}
    # Gibbs: sigma2 from the DP-means clusters' per-coordinate scatter, rho2 from the data's spread
    sigma2 = float(max(best.objective_ - lam * best.n_clusters_, 1e-12) / X.size)
    tt = time.process_time()
    gb = DPMMGibbs(alpha=1.0, sigma2=sigma2, rho2=float(X.var(0).mean()) + sigma2, n_iter=args.sweeps,
                   random_state=args.seed).fit(X)
    methods["gibbs"] = {"seconds": time.process_time() - tt, "accuracy": score(y, gb.labels_, keep),
                        "n_clusters": int(gb.n_clusters_), "sigma2": sigma2}
    res["methods"] = methods
    rows = [[name, f"{PAPER[name]['accuracy']:.1f}", f"{m['accuracy']:.1f}", f"{PAPER[name]['seconds']:.2g}",
             f"{m['seconds']:.3g}", m["n_clusters"]] for name, m in methods.items()]
    res["report"] = print_table(rows, ["method", "paper % acc", "dclust % acc (proxy flows)", "paper s",
                                       "dclust CPU s", "K"],
                                f"[DM] Table 2 on the OpenSky Switzerland sample: {len(X)} flights, "
                                f"{res['data']['n_steps']} half-hour batches, lam={lam:.3g}")
    res["total_seconds"] = time.perf_counter() - t0
    path = write_json(res, args.out)
    print(f"\nwrote {path} (total {res['total_seconds']:.0f} s)")
    return res


if __name__ == "__main__":
    main()
