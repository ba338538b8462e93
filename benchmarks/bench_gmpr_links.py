"""Benchmark: do links pay? GM-PR against GMM-EC and EM-PC as links are added ([GP] 4.2.2, Figs. 4, 6 and 7;
docs/algorithms.md 10.4).

Tasks (offline stand-ins where the paper's data does not ship; see ``TASKS``):

- Haberman (306 x 3, 2 classes 225/81) -> stand-in: scikit-learn's breast cancer, 306 rows drawn once at Haberman's
  class sizes (225 benign, 81 malignant), z-scored, its 3 leading principal components;
- Thyroid (215 x 5, 2 classes 150/65, Raetsch's benchmark) -> stand-in: breast cancer, 215 rows at 150/65, z-scored,
  5 leading principal components;
- MNIST digits {1,2,3} and {4,5,6,7} on their 2 leading principal components -> scikit-learn's 8x8 digits (1,797
  images; the paper: the 10,000 MNIST test images), the same classes and 2 leading principal components.

For every task, link kind (``mixed``: Fig. 4; ``must``: Fig. 6; ``cannot``: Fig. 7) and number of links, each trial
draws random pairs of rows (a must-link when the classes agree, a cannot-link otherwise, keeping only the kind of
the curve) and a random initialisation (k-means++ seeds, as [GP] 4.1), and fits

- GMM: GM-PR without links (plain EM),
- GM-PR with the link-aware initialisation (``init="chunklets"``: seeds from the must-link closure, cannot-linked
  chunklets in different classes; docs/algorithms.md 6.5) and GM-PR with the paper's plain k-means++ initialisation,
- GMM-EC (Shental et al. 2003): EM in which each must-link chunklet shares one label; cannot-links enter the
  Markov network's E-step by mean field (our reading: Shental's exact junction-tree inference grows exponentially),
- EM-PC (Graca, Ganchev and Taskar 2007), cannot-links only: EM whose E-step penalises the expected number of
  cannot-linked pairs in one class (factorised posteriors, a fixed dual weight of 5; our reading);

all with one Gaussian per class (full covariance, reg 1e-6). The metric is purity of the labels by the highest
posterior ([GP] 4.1): a linked row's posterior carries its links in every method (GM-PR: its pair posteriors,
``predict(X, constraints=G)``; GMM-EC: its chunklet's; EM-PC: its constrained posterior); ``--labels plain`` gives
GM-PR's rows their own posterior instead (the reading before 2026-11). Mean and std over the trials. [GP] gives
figures only, so the targets are its claims: GM-PR >= GMM-EC at every link count, must-links alone help,
cannot-links alone help, and (the issue's requirement) GM-PR's purity rises with the link count on the small
imbalanced sets.

Run: ``.venv/bin/python benchmarks/bench_gmpr_links.py`` (the paper's protocol: 100 trials, 4 tasks x 3 kinds x
links {0, 16, 64, 256}, two worker processes; ~0.1 CPU-second per GM-PR fit, ~30 CPU-minutes in all);
``--trials 5`` for a look; ``--quick``: two tasks, 2 link counts, 3 trials. ``--jobs`` runs the (task, kind) units
in worker processes, the figures in order (every task's mixed links first); the JSON (and plot) is rewritten after
each unit (``"complete": false`` until the end). Writes ``benchmarks/results/bench_gmpr_links.json`` and
``bench_gmpr_links.png``.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _common import machine_info, write_json  # noqa: E402

TASKS = ("haberman*", "thyroid*", "digits 1,2,3", "digits 4,5,6,7")
STAND_INS = {
    "haberman*": "breast cancer, 306 rows at Haberman's 225/81 class sizes, 3 leading PCs (Haberman: no offline copy)",
    "thyroid*": "breast cancer, 215 rows at Thyroid's 150/65 class sizes, 5 leading PCs (Thyroid: no offline copy)",
    "digits 1,2,3": "scikit-learn 8x8 digits 1, 2, 3 (537 rows), 2 leading PCs (MNIST: no offline copy)",
    "digits 4,5,6,7": "scikit-learn 8x8 digits 4, 5, 6, 7 (724 rows), 2 leading PCs (MNIST: no offline copy)",
}
KINDS = ("mixed", "must", "cannot")
METHODS = ("GM-PR", "GM-PR (k-means++ init)", "GMM-EC", "EM-PC")


def _pcs(X: np.ndarray, k: int) -> np.ndarray:
    X = X - X.mean(axis=0)
    _, _, vt = np.linalg.svd(X, full_matrices=False)
    return X @ vt[:k].T


def load(task: str) -> tuple[np.ndarray, np.ndarray]:
    """``(X, y)`` of a task (classes numbered 0..M-1)."""
    from sklearn.datasets import load_breast_cancer, load_digits

    if task.endswith("*"):
        X, y = load_breast_cancer(return_X_y=True)
        sizes, dims = ({1: 225, 0: 81}, 3) if task == "haberman*" else ({1: 150, 0: 65}, 5)
        rng = np.random.default_rng(0)
        rows = np.sort(np.concatenate([rng.choice(np.flatnonzero(y == c), s, replace=False)
                                       for c, s in sizes.items()]))
        X = X[rows]
        return _pcs((X - X.mean(axis=0)) / X.std(axis=0), dims), (1 - y[rows]).astype(np.int64)
    digits = load_digits()
    keep = np.isin(digits.target, [1, 2, 3] if task == "digits 1,2,3" else [4, 5, 6, 7])
    return _pcs(digits.data[keep], 2), np.unique(digits.target[keep], return_inverse=True)[1]


def draw_links(y, n_links: int, kind: str, rng):
    """``(i, j, must)`` of ``n_links`` random pairs of distinct rows with the kind of the curve."""
    i, j, must = [], [], []
    while len(i) < n_links:
        a, b = rng.integers(0, len(y), 2)
        same = bool(y[a] == y[b])
        if a == b or (kind == "must" and not same) or (kind == "cannot" and same):
            continue
        i.append(min(a, b))
        j.append(max(a, b))
        must.append(same)
    return np.array(i, np.int64), np.array(j, np.int64), np.array(must, bool)


def _gauss_logpdf(X, means, covs) -> np.ndarray:
    out = np.empty((X.shape[0], means.shape[0]))
    for m, (mu, c) in enumerate(zip(means, covs)):
        L = np.linalg.cholesky(c)
        z = np.linalg.solve(L, (X - mu).T)
        out[:, m] = -0.5 * (X.shape[1] * np.log(2 * np.pi) + (z * z).sum(axis=0)) - np.log(np.diag(L)).sum()
    return out


def constrained_em(X, M: int, i, j, must, rng, kind: str, max_iter: int = 100, tol: float = 1e-6,
                   reg: float = 1e-6, penalty: float = 5.0) -> np.ndarray:
    """GMM-EC (``kind="ec"``) or EM-PC (``kind="pc"``; must-links ignored) in memory; returns the labels.

    Units are the must-link chunklets (GMM-EC) or single rows (EM-PC). E-step: ``log q_u(m) = log alpha_m + sum_{i
    in u} log N(x_i | m) + c_u(m)`` where the cannot-link term ``c_u`` is ``sum_{v} log(1 - q_v(m))`` (GMM-EC: the
    hard Markov-network factor by mean field) or ``-penalty * sum_v q_v(m)`` (EM-PC), five mean-field rounds; the
    M-step is EM's, every row weighted by its unit's posterior.
    """
    import scipy.sparse as sp
    from scipy.sparse.csgraph import connected_components
    from scipy.special import logsumexp

    from dclust.kernels.kmeans import kmeans_plusplus

    n, d = X.shape
    if kind == "ec" and must.any():
        A = sp.coo_matrix((np.ones(int(must.sum())), (i[must], j[must])), shape=(n, n))
        n_units, unit = connected_components(A, directed=False)
    else:
        n_units, unit = n, np.arange(n)
    ca, cb = unit[i[~must]], unit[j[~must]]
    keep = ca != cb
    ca, cb = ca[keep], cb[keep]
    C = sp.coo_matrix((np.ones(2 * ca.size), (np.concatenate([ca, cb]), np.concatenate([cb, ca]))),
                      shape=(n_units, n_units)).tocsr()
    seeds = kmeans_plusplus(X, np.ones(n), M, rng, n_local_trials=1)
    lab = ((X[:, None, :] - seeds[None]) ** 2).sum(axis=2).argmin(axis=1)
    R = np.eye(M)[lab]
    ll_old = None
    for _ in range(max_iter):
        Nk = R.sum(axis=0) + 1e-12
        alpha = Nk / n
        means = (R.T @ X) / Nk[:, None]
        covs = np.array([((X - means[m]).T * R[:, m]) @ (X - means[m]) / Nk[m] + reg * np.eye(d) for m in range(M)])
        L = np.zeros((n_units, M))
        np.add.at(L, unit, _gauss_logpdf(X, means, covs))
        L += np.log(alpha)
        ll = float(logsumexp(L, axis=1).sum())
        q = np.exp(L - logsumexp(L, axis=1, keepdims=True))
        for _ in range(5 if ca.size else 0):
            extra = C @ np.log(np.clip(1 - q, 1e-12, 1)) if kind == "ec" else -penalty * (C @ q)
            logits = L + extra
            q = np.exp(logits - logsumexp(logits, axis=1, keepdims=True))
        R = q[unit]
        if ll_old is not None and abs(ll - ll_old) <= tol * abs(ll):
            break
        ll_old = ll
    return R.argmax(axis=1)


def fit_all(X, y, i, j, must, seed: int, methods, label_mode: str = "links") -> dict[str, float]:
    """Purity of every method on one draw of links and one initialisation seed.

    ``label_mode="links"`` (the paper's protocol) labels GM-PR's linked rows by their pair posteriors
    (``predict(X, constraints=G)``); ``"plain"`` by their own posterior (``labels_``), links left out.
    """
    import dclust
    from dclust.constraints import ConstraintGraph
    from dclust.errors import ConvergenceWarning

    import dask

    M = int(y.max()) + 1
    G = ConstraintGraph.from_pairs(i, j, must, n_samples=len(y)) if i.size else None
    out = {}
    # a few hundred rows in one block: the synchronous scheduler halves GM-PR's per-pass overhead here
    with warnings.catch_warnings(), dask.config.set(scheduler="synchronous"):
        warnings.simplefilter("ignore", ConvergenceWarning)
        warnings.simplefilter("ignore", UserWarning)
        for m in methods:
            if m == "EM-PC" and must.any():
                continue
            # no links: GM-PR's two inits are one ("chunklets" falls back to k-means++), GMM-EC and EM-PC are EM
            same = next((o for o in out if G is None and o.startswith("GM-PR") == m.startswith("GM-PR")), None)
            if same is not None:
                out[m] = out[same]
                continue
            if m.startswith("GM-PR"):
                init = "k-means++" if "k-means++" in m else "chunklets"
                gm = dclust.GMPR(n_classes=M, init=init, random_state=seed, max_iter=100, tol=1e-6)
                try:
                    gm.fit(X, constraints=G)
                except ZeroDivisionError:  # a GM-PR failure seen with many cannot-links: counted, not hidden
                    out[m] = float("nan")
                    continue
                # [GP] 4.1: "the assignment is according to the highest probability of the posterior": a linked
                # row's posterior is its pair posterior (s or d), as GMM-EC and EM-PC label theirs from theirs
                labels = gm.labels_ if G is None or label_mode == "plain" else gm.predict(X, constraints=G)
            else:
                labels = constrained_em(X, M, i, j, must, np.random.default_rng(seed), "ec" if m == "GMM-EC" else "pc")
            out[m] = dclust.metrics.purity_score(y, labels)
    return out


def run_task(task: str, kinds, counts, trials: int, methods, labels: str = "links", log=print) -> list[dict]:
    """The rows (one per kind, link count and method: mean, std, trials, failures) of one task."""
    from threadpoolctl import threadpool_limits

    X, y = load(task)
    rows: list[dict] = []
    no_links: dict[str, list] = {}  # the same fits for every kind: run once per task
    t0 = time.perf_counter()
    # one BLAS thread: these fits are a few hundred rows, and a 2-thread OpenBLAS spins on a busy machine
    with threadpool_limits(1):
        for kind in kinds:
            for n_links in counts:
                per: dict[str, list] = no_links if n_links == 0 else {}
                for t in range(trials if not (n_links == 0 and no_links) else 0):
                    rng = np.random.default_rng([len(task), n_links and KINDS.index(kind), n_links, t])
                    i, j, must = draw_links(y, n_links, kind, rng)
                    for m, v in fit_all(X, y, i, j, must, int(rng.integers(2**31)), methods, labels).items():
                        per.setdefault(m, []).append(v)
                for m, v in per.items():
                    ok = [x for x in v if np.isfinite(x)]
                    rows.append({"task": task, "kind": kind, "links": n_links, "method": m,
                                 "purity": float(np.mean(ok)) if ok else float("nan"),
                                 "std": float(np.std(ok)) if ok else float("nan"), "trials": len(ok),
                                 "failed": len(v) - len(ok)})
                log(f"  {task:15s} {kind:6s} {n_links:4d} links  " + "  ".join(
                    f"{r['method']} {r['purity']:.3f}±{r['std']:.3f}" + (f" ({r['failed']} failed)" if r["failed"]
                                                                         else "") for r in rows[-len(per):])
                    + f"  [{time.perf_counter() - t0:.0f} s]")
    return rows


def run(tasks, kinds, counts, trials, methods, labels: str = "links", jobs: int = 1, log=print,
        done=lambda rows: None) -> list[dict]:
    """``run_task`` for every task and kind (the figures in order: every task's first kind, then the next), ``jobs``
    at a time in worker processes; ``done(rows so far)`` after each. Links 0 (plain EM) run with the first kind and
    are reported under every kind."""
    units = [(task, kind, [c for c in counts if c or kind == kinds[0]]) for kind in kinds for task in tasks]
    units = [u for u in units if u[2]]
    got: dict[tuple, list] = {}

    def assemble() -> list[dict]:
        rows = []
        for task in tasks:
            base = [r for r in got.get((task, kinds[0]), []) if r["links"] == 0]
            for kind in kinds:
                if kind != kinds[0] and (task, kind) not in got:
                    continue  # not run yet: no curve (its plain EM row comes with it)
                rows += [{**r, "kind": kind} for r in base]
                rows += [r for r in got.get((task, kind), []) if r["links"]]
        return rows

    if jobs <= 1 or len(units) == 1:
        for task, kind, cs in units:
            got[task, kind] = run_task(task, [kind], cs, trials, methods, labels, log)
            done(assemble())
        return assemble()
    from concurrent.futures import ProcessPoolExecutor, as_completed

    with ProcessPoolExecutor(min(jobs, len(units))) as pool:
        futures = {pool.submit(run_task, task, [kind], cs, trials, methods, labels): (task, kind)
                   for task, kind, cs in units}
        for f in as_completed(futures):
            got[futures[f]] = f.result()
            for r in got[futures[f]]:
                log(f"  {r['task']:15s} {r['kind']:6s} {r['links']:4d} links  {r['method']} "
                    f"{r['purity']:.3f}±{r['std']:.3f}" + (f" ({r['failed']} failed)" if r["failed"] else ""))
            done(assemble())
    return assemble()


def claims(rows) -> dict:
    """[GP]'s qualitative claims and the issue's requirement, checked per task."""
    out = {}

    def get(task, kind, m):
        sel = sorted((r for r in rows if r["task"] == task and r["kind"] == kind and r["method"] == m),
                     key=lambda r: r["links"])
        return [r["links"] for r in sel], [r["purity"] for r in sel]

    for task in dict.fromkeys(r["task"] for r in rows):
        for kind in dict.fromkeys(r["kind"] for r in rows if r["task"] == task):
            n, gp = get(task, kind, "GM-PR")
            if len(n) < 2:
                continue
            key = f"{task}, {kind}"
            out[f"{key}: GM-PR purity rises with the links (last > first)"] = bool(gp[-1] > gp[0])
            n2, ec = get(task, kind, "GMM-EC")
            if ec:
                out[f"{key}: GM-PR >= GMM-EC - 0.01 at every count"] = bool(
                    all(a >= b - 0.01 for a, b in zip(gp, ec)))
    return out


def plot(rows, path: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    tasks = list(dict.fromkeys(r["task"] for r in rows))
    kinds = list(dict.fromkeys(r["kind"] for r in rows))
    fig, axes = plt.subplots(len(kinds), len(tasks), figsize=(3.2 * len(tasks), 2.6 * len(kinds)), squeeze=False)
    for a, kind in enumerate(kinds):
        for b, task in enumerate(tasks):
            ax = axes[a][b]
            for m in METHODS:
                sel = sorted((r for r in rows if r["task"] == task and r["kind"] == kind and r["method"] == m),
                             key=lambda r: r["links"])
                if sel:
                    x = [r["links"] for r in sel]
                    mu, sd = np.array([r["purity"] for r in sel]), np.array([r["std"] for r in sel])
                    ax.plot(x, mu, marker="o", ms=3, label=m)
                    ax.fill_between(x, mu - sd, mu + sd, alpha=0.15)
            ax.set_title(f"{task}: {kind}", fontsize=9)
            ax.set_xlabel("links", fontsize=8)
            ax.set_ylabel("purity", fontsize=8)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    ap.add_argument("--kinds", nargs="+", default=list(KINDS), choices=list(KINDS))
    ap.add_argument("--links", type=int, nargs="+", default=[0, 16, 64, 256])
    ap.add_argument("--trials", type=int, default=100, help="random initialisations and link draws (the paper's 100)")
    ap.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    ap.add_argument("--labels", choices=("links", "plain"), default="links",
                    help="GM-PR's labels of linked rows: their pair posteriors (the paper) or their own posterior")
    ap.add_argument("--jobs", type=int, default=2, help="(task, kind) units run at once in worker processes")
    ap.add_argument("--quick", action="store_true", help="haberman* and digits 1,2,3; 0 and 64 links; 3 trials")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "bench_gmpr_links.json")
    args = ap.parse_args(argv)
    if args.trials < 1 or args.jobs < 1 or any(n < 0 for n in args.links):
        ap.error("--trials and --jobs must be >= 1 and --links >= 0")
    if args.quick:
        args.tasks, args.links, args.trials = ["haberman*", "digits 1,2,3"], [0, 64], 3
    return args


def main(argv=None) -> dict:
    args = parse_args(argv)
    t0 = time.perf_counter()
    print(f"[GP] links pay: {', '.join(args.tasks)}; kinds {args.kinds}; links {args.links}; {args.trials} trials",
          flush=True)

    def result(rows, complete: bool) -> dict:
        checks = claims(rows)
        png = plot(rows, args.out.with_suffix(".png"))
        return {"args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
                "stand_ins": {t: STAND_INS[t] for t in args.tasks}, "rows": rows, "claims": checks,
                "complete": complete, "plot": str(png) if png else None, "machine": machine_info(),
                "total_seconds": time.perf_counter() - t0}

    rows = run(args.tasks, args.kinds, args.links, args.trials, args.methods, args.labels, args.jobs,
               log=lambda s: print(s, flush=True), done=lambda rows: write_json(result(rows, False), args.out))
    res = result(rows, True)
    print()
    for k, v in res["claims"].items():
        print(f"  {k}: {'MET' if v else 'NOT MET'}")
    path = write_json(res, args.out)
    png = res["plot"]
    print(f"\nwrote {path}" + (f" and {png}" if png else "") + f" (total {res['total_seconds']:.0f} s)")
    return res


if __name__ == "__main__":
    main()
