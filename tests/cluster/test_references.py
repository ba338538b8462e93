"""The in-memory reference algorithms (docs/algorithms.md 7, 10.1): DPMMGibbs, SpectralClustering, IBPGibbs."""

from __future__ import annotations

import math

import dask.array as da
import numpy as np
import pytest
from scipy.special import gammaln

import dclust
from dclust.cluster import DPMMGibbs, IBPGibbs, SpectralClustering
from dclust.datasets import make_tabletop
from dclust.errors import DclustError, InvalidDataError, InvalidParameterError
from dclust.kernels import dpmm, spectral
from dclust.kernels import ibp as ibp_kernels
from dclust.metrics import adjusted_rand_score


@pytest.fixture(scope="module")
def four_blobs():
    rng = np.random.default_rng(3)
    centers = np.array([[0.0, 0.0], [6.0, 0.0], [0.0, 6.0], [6.0, 6.0]])
    y = rng.integers(0, 4, size=400)
    return centers[y] + 0.5 * rng.standard_normal((400, 2)), y


@pytest.fixture(scope="module")
def rings():
    rng = np.random.default_rng(0)
    t = rng.uniform(0, 2 * np.pi, 300)
    y = (np.arange(300) % 2).astype(int)
    r = np.where(y == 0, 1.0, 3.0)
    return np.c_[r * np.cos(t), r * np.sin(t)] + 0.05 * rng.standard_normal((300, 2)), y


# ----------------------------------------------------------------------------------------------------- DPMMGibbs


def test_dpmm_recovers_separated_blobs(four_blobs):
    X, y = four_blobs
    g = DPMMGibbs(sigma2=0.25, rho2=50.0, n_iter=15, random_state=0).fit(X)
    assert adjusted_rand_score(y, g.labels_) > 0.9
    assert g.n_clusters_ == 4
    assert g.cluster_centers_.shape == (4, 2) and g.cluster_sizes_.sum() == len(X)
    assert adjusted_rand_score(y, g.predict(X)) > 0.9


def test_dpmm_log_joint_improves_from_one_cluster(four_blobs):
    X, _ = four_blobs
    g = DPMMGibbs(sigma2=0.25, rho2=50.0, n_iter=10, init="single", keep="last", random_state=1).fit(X)
    start = dpmm.dpmm_log_joint(np.array([len(X)]), X.sum(axis=0)[None], float((X * X).sum()), len(X), 1.0, 0.25, 50.0,
                             X.mean(axis=0))
    hist = g.log_joint_history_
    assert len(hist) == 10 and min(hist) > start + 1000  # leaves the one-cluster state and stays near the mode
    assert g.objective_history_ == [-h for h in hist]
    assert g.log_joint_ == hist[-1]


def test_dpmm_log_joint_is_the_chain_rule_of_crp_and_predictives():
    """log p(X, z) == sum_n log[CRP seat probability (alpha/(alpha+n-1) for a new table) * predictive]."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((9, 3))
    z = np.array([0, 0, 1, 0, 2, 1, 1, 2, 0])
    alpha, s2, r2, mu0 = 0.7, 0.5, 4.0, np.array([0.1, -0.2, 0.3])
    total = 0.0
    for n in range(len(X)):
        prev = z[:n]
        k = z[n]
        nk = int((prev == k).sum())
        if nk == 0:
            seat, v, m = alpha / (alpha + n), r2, mu0
        else:
            seat = nk / (alpha + n)
            v, m = dpmm.dpmm_posterior(np.array([nk]), X[:n][prev == k].sum(axis=0)[None], s2, r2, mu0)
            v, m = float(v[0]), m[0]
        s = s2 + v
        total += math.log(seat) - 0.5 * 3 * math.log(2 * math.pi * s) - ((X[n] - m) ** 2).sum() / (2 * s)
    counts = np.bincount(z)
    sums = np.stack([X[z == k].sum(axis=0) for k in range(3)])
    got = dpmm.dpmm_log_joint(counts, sums, float((X * X).sum()), len(X), alpha, s2, r2, mu0)
    assert got == pytest.approx(total, rel=1e-12)


def test_dpmm_same_seed_same_sample_and_dask_input(four_blobs):
    X, _ = four_blobs
    a = DPMMGibbs(sigma2=0.25, n_iter=5, random_state=7).fit(X)
    b = DPMMGibbs(sigma2=0.25, n_iter=5, random_state=7).fit(da.from_array(X, chunks=(64, -1)))
    np.testing.assert_array_equal(a.labels_, b.labels_)
    assert a.log_joint_history_ == b.log_joint_history_


# --------------------------------------------------------------------------------------------- SpectralClustering


def test_spectral_separates_rings_where_kmeans_cannot(rings):
    X, y = rings
    sc = SpectralClustering(n_clusters=2, affinity="nearest_neighbors", n_neighbors=10, random_state=0).fit(X)
    km = dclust.KMeans(n_clusters=2, random_state=0).fit(X)
    assert adjusted_rand_score(y, sc.labels_) > 0.99
    assert adjusted_rand_score(y, km.predict(X)) < 0.1
    np.testing.assert_array_equal(sc.predict(X), sc.labels_)


def test_spectral_sweep_takes_the_argmin_ncut(rings):
    X, y = rings
    sc = SpectralClustering(n_clusters=2, affinity="rbf", gamma=2.0, assign_labels="sweep", random_state=0).fit(X)
    assert adjusted_rand_score(y, sc.labels_) > 0.99
    # the chosen split is the best threshold: no other split of the sorted eigenvector has a lower Ncut
    W = spectral.rbf_affinity(X, 2.0)
    _, U, deg = spectral.spectral_embedding(W, 2, np.random.default_rng(0))
    labels, ncuts = spectral.ncut_sweep(W, U[:, 1] / np.sqrt(deg), deg)
    assert sc.ncut_ == pytest.approx(ncuts.min(), rel=1e-9)
    assert spectral.ncut_value(W, labels, deg) == pytest.approx(ncuts.min(), rel=1e-9)
    assert ncuts.max() > 10 * ncuts.min()  # argmax (the slide's typo) would be a very different split


def test_ncut_sweep_matches_brute_force_on_a_small_graph():
    rng = np.random.default_rng(2)
    W = rng.random((12, 12))
    W = W + W.T
    deg = W.sum(axis=1)
    y = rng.standard_normal(12)
    labels, ncuts = spectral.ncut_sweep(W, y, deg)
    order = np.argsort(y)
    brute = []
    for t in range(1, 12):
        lab = np.zeros(12, dtype=int)
        lab[order[t:]] = 1
        brute.append(spectral.ncut_value(W, lab, deg))
    np.testing.assert_allclose(ncuts, brute, rtol=1e-10)
    assert spectral.ncut_value(W, labels, deg) == pytest.approx(min(brute))


@pytest.mark.filterwarnings("ignore:Graph is not fully connected")  # scikit-learn, on well-separated blobs
def test_spectral_separates_two_moons_and_agrees_with_scikit_learn():
    sklearn_datasets = pytest.importorskip("sklearn.datasets")
    sk_cluster = pytest.importorskip("sklearn.cluster")
    X, y = sklearn_datasets.make_moons(300, noise=0.05, random_state=0)
    sc = SpectralClustering(n_clusters=2, affinity="nearest_neighbors", random_state=0).fit(X)
    assert adjusted_rand_score(y, sc.labels_) > 0.99
    assert adjusted_rand_score(y, dclust.KMeans(n_clusters=2, random_state=0).fit(X).predict(X)) < 0.6
    Xb, _ = sklearn_datasets.make_blobs(300, centers=3, cluster_std=0.6, random_state=1)
    for kw in (dict(affinity="rbf", gamma=1.0), dict(affinity="nearest_neighbors", n_neighbors=10)):
        ours = SpectralClustering(n_clusters=3, random_state=0, **kw).fit(Xb).labels_
        theirs = sk_cluster.SpectralClustering(n_clusters=3, random_state=0, **kw).fit(Xb).labels_
        assert adjusted_rand_score(theirs, ours) > 0.99


def test_spectral_same_seed_same_result(four_blobs):
    X, _ = four_blobs
    a = SpectralClustering(n_clusters=4, random_state=3).fit(X)
    b = SpectralClustering(n_clusters=4, random_state=3).fit(X)
    np.testing.assert_array_equal(a.labels_, b.labels_)
    np.testing.assert_array_equal(a.embedding_, b.embedding_)
    assert a.objective_history_ == b.objective_history_


# ------------------------------------------------------------------------------------------------------- IBPGibbs


def _sign_aware_recovery(true_features, true_Z, features, Z):
    """Per generating feature: the best RMS over learned features a with a ~ +f (same bits) or a ~ -f (the
    complement bits; [MB] 5.1's recoding with the object in the base feature), and that feature's bit accuracy."""
    out = []
    for f, z in zip(true_features, true_Z.T):
        best = (np.inf, 0.0)
        for a, w in zip(features, Z.T):
            for sign, bits in ((1, z), (-1, 1 - z)):
                rms = float(np.sqrt(((a - sign * f) ** 2).mean()))
                if rms < best[0]:
                    best = (rms, float((w == bits).mean()))
        out.append(best)
    return out


def test_ibp_recovers_the_four_tabletop_objects():
    t = make_tabletop(100, noise=0.1, random_state=1)
    ibp = IBPGibbs(sigma_x=0.1, sigma_a=1.0, n_iter=150, anneal_factor=5.0, random_state=0).fit(t.X)
    rec = _sign_aware_recovery(t.features, t.Z, ibp.features_, ibp.allocation_)
    assert all(rms < 0.1 and acc >= 0.9 for rms, acc in rec), rec
    assert 5 <= ibp.n_latent_features_ <= 8
    clean = t.background + t.Z @ t.features
    assert np.sqrt(((ibp.reconstruct(ibp.allocation_) - clean) ** 2).mean()) < 0.1
    # the kept sample is the best of the post-burn-in sweeps, and better than the empty model
    assert ibp.log_joint_ == max(ibp.log_joint_history_[75:])
    empty = ibp_kernels.ibp_log_joint(np.zeros((100, 0), np.uint8), np.zeros((0, 0)), np.zeros((0, 36)),
                            float((t.X ** 2).sum()), 1.0, 0.1, 1.0)
    assert ibp.log_joint_ > empty
    codes = ibp.transform(t.X)
    assert codes.shape == ibp.allocation_.shape and (codes == ibp.allocation_).mean() > 0.95


def test_ibp_log_joint_ratio_is_the_predictive_ratio():
    """The sampler's bit conditional uses the predictive of x_n given the other rows: check it against the
    marginal likelihood P(X | Z) of Griffiths & Ghahramani (prior terms excluded)."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((15, 4))
    Z = rng.integers(0, 2, size=(15, 3)).astype(np.uint8)
    sx, sa, n = 0.7, 1.3, 4

    def loglik(Zc):  # log P(X | Z) up to terms that do not depend on Z (K = 3 is fixed here)
        Zf = Zc.astype(float)
        G, B = Zf.T @ Zf, Zf.T @ X
        M = np.linalg.inv(G + (sx / sa) ** 2 * np.eye(3))
        _, logdet = np.linalg.slogdet(G + (sx / sa) ** 2 * np.eye(3))
        return -0.5 * 4 * logdet - ((X * X).sum() - (B * (M @ B)).sum()) / (2 * sx**2)

    Z1, Z0 = Z.copy(), Z.copy()
    Z1[n, 1], Z0[n, 1] = 1, 0
    rest = np.arange(15) != n
    Zm = Z[rest].astype(float)
    M = np.linalg.inv(Zm.T @ Zm + (sx / sa) ** 2 * np.eye(3))
    H = M @ Zm.T @ X[rest]

    def pred(z):
        s = sx**2 * (1 + z @ M @ z)
        return -2 * math.log(2 * math.pi * s) - ((X[n] - z @ H) ** 2).sum() / (2 * s)

    assert loglik(Z1) - loglik(Z0) == pytest.approx(pred(Z1[n].astype(float)) - pred(Z0[n].astype(float)), rel=1e-9)
    # and ibp_log_joint's likelihood part is the same marginal likelihood (the prior part cancels in differences)
    lj = [ibp_kernels.ibp_log_joint(Zc, Zc.T.astype(float) @ Zc, Zc.T.astype(float) @ X, float((X * X).sum()), 1.0,
                                    sx, sa)
          for Zc in (Z1, Z0)]
    prior = []
    for Zc in (Z1, Z0):
        mk = Zc.sum(axis=0).astype(float)
        _, mult = np.unique(Zc.T, axis=0, return_counts=True)
        prior.append(-float((1 / np.arange(1, 16)).sum()) - gammaln(mult + 1).sum()
                     + (gammaln(15 - mk + 1) + gammaln(mk) - gammaln(16)).sum())
    assert (lj[0] - prior[0]) - (lj[1] - prior[1]) == pytest.approx(loglik(Z1) - loglik(Z0), rel=1e-9)


def test_ibp_same_seed_same_sample():
    t = make_tabletop(30, noise=0.2, random_state=2)
    a = IBPGibbs(sigma_x=0.2, n_iter=10, random_state=5).fit(t.X)
    b = IBPGibbs(sigma_x=0.2, n_iter=10, random_state=5).fit(da.from_array(t.X, chunks=(7, -1)))
    np.testing.assert_array_equal(a.allocation_, b.allocation_)
    np.testing.assert_array_equal(a.features_, b.features_)
    assert a.log_joint_history_ == b.log_joint_history_


def test_ibp_feature_overflow_is_a_clear_error():
    X = np.random.default_rng(0).standard_normal((50, 5)) * 10
    with pytest.raises(DclustError, match="max_features") as info:
        IBPGibbs(sigma_x=0.01, alpha=20.0, max_features=3, n_iter=2, random_state=0).fit(X)
    assert "alpha" in str(info.value) and "received" in str(info.value)
    assert isinstance(info.value, InvalidParameterError) and "center X" not in str(info.value)


def test_ibp_feature_overflow_on_data_far_from_the_origin_says_to_center_it():
    X = np.random.default_rng(0).standard_normal((100, 4)) + 1e9
    with pytest.raises(InvalidParameterError, match=r"max_features=100.*center X \(X - X.mean\(axis=0\)\)"):
        IBPGibbs(n_iter=5, random_state=0).fit(X)


# ------------------------------------------------------------------------------------------- size limits, bad input


@pytest.mark.parametrize(
    "est", [DPMMGibbs(max_samples=100), SpectralClustering(n_clusters=2, max_samples=100), IBPGibbs(max_samples=100)],
    ids=["DPMMGibbs", "SpectralClustering", "IBPGibbs"],
)
def test_size_limit_is_checked_before_computing(est):
    def boom(block):
        raise AssertionError("the data must not be computed above max_samples")

    X = da.zeros((10_000, 3), chunks=(1000, 3)).map_blocks(boom, dtype=float)
    with pytest.raises(InvalidDataError, match="max_samples=100") as info:
        est.fit(X)
    text = str(info.value)
    assert "10000 rows" in text and "expected" in text and "Subsample" in text


@pytest.mark.parametrize("make", [lambda: DPMMGibbs(n_iter=2), lambda: SpectralClustering(n_clusters=2),
                                  lambda: IBPGibbs(n_iter=2)], ids=["DPMMGibbs", "SpectralClustering", "IBPGibbs"])
def test_non_finite_values_name_the_chunk(make):
    X = np.random.default_rng(0).standard_normal((400, 3))
    X[250, 1] = np.nan
    with pytest.raises(InvalidDataError, match=r"chunk 2 \(rows 200..299") as info:
        make().fit(da.from_array(X, chunks=(100, -1)))
    assert "expected" in str(info.value)


def test_bad_parameters_and_shapes(four_blobs):
    X, _ = four_blobs
    with pytest.raises(InvalidParameterError, match="mu0"):
        DPMMGibbs(mu0=[0.0, 0.0, 0.0]).fit(X)
    with pytest.raises(InvalidParameterError, match="sigma2"):
        DPMMGibbs(sigma2=0.0).fit(X)
    with pytest.raises(InvalidParameterError, match="n_clusters=2"):
        SpectralClustering(n_clusters=3, assign_labels="sweep").fit(X)
    with pytest.raises(InvalidDataError, match="n_clusters"):
        SpectralClustering(n_clusters=5).fit(X[:5])
    with pytest.raises(InvalidDataError, match="shape"):
        IBPGibbs().fit(X[:, 0])
    fitted = DPMMGibbs(n_iter=2, random_state=0).fit(X)
    with pytest.raises(InvalidDataError, match="features"):
        fitted.predict(np.ones((3, 5)))


def test_make_tabletop():
    t = make_tabletop(50, image_shape=(6, 6), n_objects=4, noise=0.0, random_state=3)
    assert t.X.shape == (50, 36) and t.Z.shape == (50, 4) and t.features.shape == (4, 36)
    np.testing.assert_allclose(t.X, t.background + t.Z @ t.features)
    assert ((t.features == 0) | (t.features == 1)).all() and (t.features.sum(axis=1) >= 2).all()
    assert (t.features.sum(axis=0) <= 1).all()  # objects do not overlap
    np.testing.assert_array_equal(make_tabletop(50, noise=0.0, random_state=3).X, t.X)
    with pytest.raises(InvalidParameterError, match="n_objects"):
        make_tabletop(10, image_shape=(2, 2), n_objects=3)
    with pytest.raises(InvalidParameterError, match="noise"):
        make_tabletop(10, noise=-1.0)
    with pytest.raises(InvalidParameterError, match=r"make_tabletop\(random_state"):
        make_tabletop(10, random_state=-1)


def test_tabletop_example_runs_at_toy_size(capsys):
    import runpy
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "examples" / "tabletop.py"
    main = runpy.run_path(str(script), run_name="__mp_main__")["main"]
    rows = main(["--n", "40", "--restarts", "1", "--sweeps", "40", "--noise", "0.1"])
    out = capsys.readouterr().out
    assert set(rows) == {"BP-means", "stepwise K-features", "IBP Gibbs"}
    for name, row in rows.items():
        assert name in out and row["seconds"] > 0 and row["K"] >= 1 and 0 <= row["recovered"] <= 4
