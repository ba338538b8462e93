"""GM-PR with pairwise relations on synthetic and small real data ([GP] 4.1; docs/algorithms.md 10.4).

Links are random point pairs: a must-link when the true labels agree, a cannot-link otherwise. For each number of
links, every trial draws new links and a new initialisation; the metric is purity (mean ± std over trials).
Datasets: two moons (m_K = 1 against m_K = 2) and scikit-learn's 8x8 digits {1, 2, 3} on their first two
principal components (the offline substitute for MNIST, docs/algorithms.md 10.4). [GP] reports figures only; its
qualitative claims are that links help, and that m_K > 1 helps on non-Gaussian classes.

    python examples/gmpr_constraints.py                     # 5 trials, links 0..256 (a few minutes)
    python examples/gmpr_constraints.py --trials 3 --links 0 64
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np


def _datasets(seed: int):
    from sklearn.datasets import load_digits, make_moons

    Xm, ym = make_moons(n_samples=600, noise=0.08, random_state=seed)
    digits = load_digits()
    keep = np.isin(digits.target, [1, 2, 3])
    Xd = digits.data[keep]
    Xd = Xd - Xd.mean(axis=0)
    _, _, vt = np.linalg.svd(Xd, full_matrices=False)
    return {"moons": (Xm, ym), "digits {1,2,3} (2 PCs)": (Xd @ vt[:2].T, digits.target[keep])}


def _run(X, y, n_links, m_k, trials, seed):
    from dclust import metrics
    from dclust import GMPR
    from dclust.constraints import ConstraintGraph
    from dclust.errors import ConvergenceWarning

    classes = np.unique(y, return_inverse=True)[1]
    scores = []
    for t in range(trials):
        rng = np.random.default_rng([seed, n_links, t])
        G = None
        if n_links:
            i, j = rng.integers(0, len(y), n_links), rng.integers(0, len(y), n_links)
            G = ConstraintGraph.from_pairs(i, j, classes[i] == classes[j], n_samples=len(y))
        gm = GMPR(n_classes=int(classes.max()) + 1, clusters_per_class=m_k, random_state=int(rng.integers(2**31)),
                  max_iter=100, tol=1e-5)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            gm.fit(X, constraints=G)
        scores.append(metrics.purity_score(classes, gm.predict(X)))  # unlinked prediction: the fitted model
    return float(np.mean(scores)), float(np.std(scores))


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--links", type=int, nargs="+", default=[0, 16, 64, 256])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    results = {}
    for name, (X, y) in _datasets(args.seed).items():
        print(f"\n{name}: n={len(y)}, purity mean ± std over {args.trials} trials")
        print(f"{'links':>6} | {'m_K=1':>15} | {'m_K=2':>15}")
        for n_links in args.links:
            row = [_run(X, y, n_links, m_k, args.trials, args.seed) for m_k in (1, 2)]
            results[(name, n_links)] = row
            print(f"{n_links:>6} | " + " | ".join(f"{m:.3f} ± {s:.3f}".rjust(15) for m, s in row))
    return results


if __name__ == "__main__":
    main()
