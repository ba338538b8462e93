"""GM-PR (docs/algorithms.md 6.7): monotone log-likelihood, dask == numpy oracle, sklearn equivalence without links,
cannot-link posteriors, the class-weight solve, and links that help on data a plain mixture gets wrong."""

from __future__ import annotations

import warnings

import dask.array as da
from distributed import futures_of
import numpy as np
import pytest
from scipy.optimize import minimize_scalar
from scipy.special import logsumexp
from sklearn.metrics import adjusted_rand_score

from dclust._dask.gmpr import LinkPlan, estep, link_payload, persist_payload, total_loglik
from dclust.cluster._gmpr import GMPR
from dclust.constraints import ConstraintGraph
from dclust.errors import (
    ChunkingError, ConvergenceWarning, InfeasibleConstraintsError, InvalidDataError, InvalidParameterError,
)
from dclust.kernels.gmpr import (
    MixtureParams, alpha_objective, estep_reference, link_partial, m_step, pair_posteriors, sub_log_density,
    update_alpha,
)


def _params(rng, M, K, D, diag, offset=0.0):
    means = rng.normal(size=(M, K, D)) * 2 + offset
    if diag:
        cov = rng.uniform(0.5, 2.0, size=(M, K, D))
    else:
        A = rng.normal(size=(M, K, D, D))
        cov = np.einsum("mkij,mklj->mkil", A, A) + np.eye(D)
    alpha = rng.dirichlet(np.ones(M) * 3)
    pi = rng.dirichlet(np.ones(K) * 3, size=M)
    return MixtureParams.build(alpha, pi, means, cov)


def _links(rng, n, m):
    i, j = rng.integers(0, n, m), rng.integers(0, n, m)
    return ConstraintGraph.from_pairs(i, j, rng.random(m) < 0.5, n_samples=n, check_feasible=False)


@pytest.fixture(scope="module")
def elongated():
    """Two long thin parallel classes: a diagonal 2-class mixture cuts them across the long axis."""
    rng = np.random.default_rng(3)
    n = 400
    y = rng.integers(0, 2, n)
    X = np.c_[rng.normal(size=n) * 12.0, rng.normal(size=n) * 0.5 + 1.0 * y]
    return X, y


@pytest.mark.parametrize("diag", [False, True])
def test_estep_on_blocks_equals_the_numpy_oracle(diag):
    rng = np.random.default_rng(0)
    n, D, M, K = 400, 3, 3, 2
    X = rng.normal(size=(n, D)) * 3 + 1e3  # a large offset: Chan's merge must keep the digits
    G = _links(rng, n, 80)
    params = _params(rng, M, K, D, diag, offset=1e3)
    i, j, s = G.pairs()
    ref, ll = estep_reference(X, i, j, s > 0, params)
    for chunk, split in [(n, 8), (97, 2), (50, 3)]:
        Xd = da.from_array(X, chunks=(chunk, -1))
        plan = LinkPlan.from_blocks(Xd.chunks[0], G.rechunk(Xd.chunks[0]).blocks())
        assert plan.n_links == G.n_links and plan.n_cannot == G.n_cannot
        st = estep(Xd, plan, params, split_every=split)
        assert st.n_rows == n - len(G.nodes()) + 2 * G.n_links
        np.testing.assert_allclose(total_loglik(st, params.alpha, plan.n_cannot), ll, rtol=1e-10)
        np.testing.assert_allclose(st.weight, ref.weight, rtol=1e-10)
        np.testing.assert_allclose(st.class_counts, ref.class_counts, rtol=1e-10)
        np.testing.assert_allclose(st.mean, ref.mean, rtol=1e-10)
        np.testing.assert_allclose(st.scatter, ref.scatter, rtol=1e-10, atol=1e-10 * np.abs(ref.scatter).max())


def test_estep_with_persisted_link_payload_on_a_cluster(client):
    """The fit's path on real workers: the link endpoints gathered and persisted once, every block task handling
    its unlinked rows and its share of the links (cross-block pairs split between both sides), equal to the
    oracle; the same payload serves two parameter sets; a NaN in a linked row names its block."""
    rng = np.random.default_rng(8)
    n, D, M, K = 900, 3, 3, 2
    X = rng.normal(size=(n, D)) * 3 + 50.0
    G = _links(rng, n, 150)
    i, j, s = G.pairs()
    Xd = da.from_array(X, chunks=(200, -1)).persist()
    plan = LinkPlan.from_blocks(Xd.chunks[0], G.rechunk(Xd.chunks[0]).blocks())
    links = persist_payload(link_payload(Xd, plan), Xd)
    workers = set(client.nthreads())
    held = client.who_has(futures_of(links)).values()  # spread over the workers, where the E-step tasks will run
    assert len(workers) > 1 and {w for ws in held for w in ws} == workers
    owned = [p.must.size for p in links.compute()]
    assert sum(owned) == G.n_links and min(owned) > 0
    for seed in (0, 1):
        params = _params(np.random.default_rng(seed), M, K, D, seed == 1, offset=50.0)
        ref, ll = estep_reference(X, i, j, s > 0, params)
        st = estep(Xd, plan, params, split_every=2, links=links)
        assert st.bad_block == -1 and st.n_rows == n - len(G.nodes()) + 2 * G.n_links
        np.testing.assert_allclose(total_loglik(st, params.alpha, plan.n_cannot), ll, rtol=1e-10)
        np.testing.assert_allclose(st.weight, ref.weight, rtol=1e-10)
        np.testing.assert_allclose(st.mean, ref.mean, rtol=1e-10)
        np.testing.assert_allclose(st.scatter, ref.scatter, rtol=1e-10, atol=1e-10 * np.abs(ref.scatter).max())
    bad = X.copy()
    bad[j[0], 0] = np.nan  # a linked row: skipped by the unlinked pass, caught by its block's link check
    Xb = da.from_array(bad, chunks=(200, -1))
    assert estep(Xb, plan, params, links=link_payload(Xb, plan).persist()).bad_block == j[0] // 200


def test_fit_on_one_chunk_equals_fit_on_many_chunks():
    rng = np.random.default_rng(1)
    n = 600
    X = np.concatenate([rng.normal(0, 1, (n // 2, 2)), rng.normal(4, 1.5, (n // 2, 2))])
    G = _links(rng, n, 60)
    kw = dict(n_classes=2, clusters_per_class=2, random_state=0, max_iter=8, tol=0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        one = GMPR(**kw).fit(da.from_array(X, chunks=(n, -1)), constraints=G)
        many = GMPR(**kw, split_every=2).fit(da.from_array(X, chunks=(160, -1)),
                                             constraints=G.rechunk((160,) * 3 + (120,)))
    np.testing.assert_allclose(many.objective_history_, one.objective_history_, rtol=1e-10)
    for attr in ("weights_", "sub_weights_", "means_", "covariances_"):
        np.testing.assert_allclose(getattr(many, attr), getattr(one, attr), rtol=1e-8, atol=1e-12)


@pytest.mark.parametrize("cov", ["full", "diag"])
@pytest.mark.parametrize("M,K", [(2, 1), (3, 2)])
def test_log_likelihood_never_decreases(cov, M, K):
    """GP1 with reg_covar = 0 on well-conditioned data, with must- and cannot-links (M = 3: the SLSQP path)."""
    rng = np.random.default_rng(2)
    n = 500
    centers = rng.uniform(-6, 6, size=(5, 2))
    X = centers[rng.integers(0, 5, n)] + rng.normal(size=(n, 2))
    G = _links(rng, n, 120)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        gm = GMPR(n_classes=M, clusters_per_class=K, covariance_type=cov, reg_covar=0.0, max_iter=12,
                  random_state=0).fit(X, constraints=G)
    h = np.asarray(gm.objective_history_)
    assert len(h) == gm.n_iter_ + 1 >= 3
    assert np.all(np.diff(h) >= -1e-9 * np.abs(h[1:])), np.diff(h)
    assert h[-1] > h[0]
    assert gm.n_must_ + gm.n_cannot_ == G.n_links
    np.testing.assert_allclose(gm.weights_.sum(), 1.0)
    np.testing.assert_allclose(gm.sub_weights_.sum(axis=1), 1.0)


@pytest.mark.parametrize("cov", ["full", "diag"])
@pytest.mark.parametrize("K", [1, 2])
def test_one_iteration_without_links_matches_sklearn(cov, K):
    """GP2: from the same parameters, one EM step equals sklearn's GaussianMixture on the flat M*K mixture."""
    from sklearn.mixture import GaussianMixture

    rng = np.random.default_rng(4)
    n, D, M = 500, 3, 2
    X = rng.normal(size=(n, D)) * 2 + rng.integers(0, 3, size=(n, 1)) * 3
    params = _params(rng, M, K, D, cov == "diag")
    reg = 1e-3
    Xd = da.from_array(X, chunks=(90, -1))
    stats = estep(Xd, LinkPlan.empty(Xd.chunks[0]), params, split_every=3)
    new, _ = m_step(stats, params, reg)
    alpha, accepted = update_alpha(stats.class_counts, 0, params.alpha)
    assert accepted

    flat_w = (params.alpha[:, None] * params.pi).ravel()
    flat_cov = params.covariances.reshape((M * K,) + params.covariances.shape[2:])
    prec = 1.0 / flat_cov if cov == "diag" else np.linalg.inv(flat_cov)
    sk = GaussianMixture(n_components=M * K, covariance_type=cov, reg_covar=reg, max_iter=1, weights_init=flat_w,
                         means_init=params.means.reshape(M * K, D), precisions_init=prec)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sk.fit(X)
    np.testing.assert_allclose((alpha[:, None] * new.pi).ravel(), sk.weights_, rtol=1e-10)
    np.testing.assert_allclose(new.means.reshape(M * K, D), sk.means_, rtol=1e-10)
    np.testing.assert_allclose(new.covariances.reshape(sk.covariances_.shape), sk.covariances_, rtol=1e-10)
    # and the log-likelihood of the E-step is the mixture's
    flat = sub_log_density(X, params).reshape(n, M * K) + np.log(params.alpha).repeat(K)
    np.testing.assert_allclose(stats.loglik, logsumexp(flat, axis=1).sum(), rtol=1e-12)


def test_cannot_link_posteriors():
    """GP3, including two points that both strongly prefer one class (no catastrophic cancellation)."""
    rng = np.random.default_rng(5)
    params = _params(rng, 4, 2, 2, False)
    Xa = np.concatenate([rng.normal(size=(20, 2)) * 3, params.means[0, :1] + 1e-3])
    Xb = np.concatenate([rng.normal(size=(20, 2)) * 3, params.means[0, :1] - 1e-3])
    sa, sb = sub_log_density(Xa, params), sub_log_density(Xb, params)
    d_a, d_b = pair_posteriors(sa, sb, np.zeros(21, bool), params)
    assert np.isfinite(d_a).all() and np.isfinite(d_b).all()
    np.testing.assert_allclose(d_a.sum(axis=1), 1.0)
    np.testing.assert_allclose(d_b.sum(axis=1), 1.0)
    assert (d_a + d_b <= 1.0 + 1e-12).all()  # because P(m, m) = 0
    part = link_partial(Xa, Xb, np.zeros(21, bool), params)
    np.testing.assert_allclose(part.class_counts, d_a.sum(axis=0) + d_b.sum(axis=0))
    np.testing.assert_allclose(part.weight.sum(), 42.0)


def test_must_link_of_two_identical_points():
    """GP5: s^m is proportional to alpha_m g(m)^2."""
    rng = np.random.default_rng(6)
    params = _params(rng, 3, 2, 2, False)
    x = rng.normal(size=(1, 2))
    sub = sub_log_density(x, params)
    part = link_partial(x, x, np.ones(1, bool), params)
    log_g = logsumexp(sub[0], axis=1)
    expected = params.alpha * np.exp(2 * log_g)
    np.testing.assert_allclose(part.class_counts, expected / expected.sum(), rtol=1e-12)
    np.testing.assert_allclose(part.weight.sum(), 2.0)  # the pair's posterior goes to both points


def test_two_class_closed_form_is_the_optimum():
    """GP4: the M = 2 closed form agrees with a numerical maximisation of F to 1e-6."""
    rng = np.random.default_rng(7)
    for _ in range(5):
        n_cl = int(rng.integers(1, 50))
        c = np.array([n_cl, n_cl], dtype=float) + rng.uniform(1, 100, size=2)
        alpha, accepted = update_alpha(c, n_cl, np.array([0.5, 0.5]))
        res = minimize_scalar(lambda a: -alpha_objective(np.array([a, 1 - a]), c, n_cl), bounds=(1e-9, 1 - 1e-9),
                              method="bounded", options={"xatol": 1e-12})
        assert accepted
        np.testing.assert_allclose(alpha[0], res.x, atol=1e-6)


def test_class_weight_solve_never_lowers_the_objective():
    """E-GP4: SLSQP with generalised-EM acceptance (M >= 3)."""
    rng = np.random.default_rng(8)
    for _ in range(10):
        M = int(rng.integers(3, 6))
        n_cl = int(rng.integers(0, 200))
        c = rng.uniform(0, 100, size=M) + 2 * n_cl / M
        old = rng.dirichlet(np.ones(M))
        new, _ = update_alpha(c, n_cl, old)
        np.testing.assert_allclose(new.sum(), 1.0)
        assert (new >= 1e-12).all()
        assert alpha_objective(new, c, n_cl) >= alpha_objective(old, c, n_cl)
        if n_cl == 0:
            np.testing.assert_allclose(new, c / c.sum(), rtol=1e-10)


def test_newton_class_weights_reach_the_slsqp_optimum():
    """The class-weight solve's Newton step on the Lagrange conditions lands where SLSQP does from the same start
    (up to SLSQP's tolerance), never below it, up to 64 classes; it defers to SLSQP for an empty class."""
    from dclust.kernels.gmpr import _newton_alpha, _slsqp_alpha

    rng = np.random.default_rng(21)
    for M in (3, 7, 16, 64):
        n_cl = int(rng.integers(100, 50_000))
        c = rng.uniform(0, 1e5, size=M) + 2 * n_cl / M
        new, ref = _newton_alpha(c, n_cl), _slsqp_alpha(c, n_cl)
        np.testing.assert_allclose(new.sum(), 1.0, rtol=1e-14)
        np.testing.assert_allclose(new, ref, rtol=1e-5)
        assert (alpha_objective(new, c, n_cl)
                >= alpha_objective(ref, c, n_cl) - 1e-12 * abs(alpha_objective(ref, c, n_cl)))
        s = 2.0 * n_cl / (1.0 - (new * new).sum())
        lam = c / new + s * new
        np.testing.assert_allclose(lam, lam.mean(), rtol=1e-9)  # stationary: one multiplier for every class
    assert _newton_alpha(np.array([5.0, 0.0, 3.0]), 2) is None


def test_links_improve_the_clustering_and_are_respected(elongated):
    X, y = elongated
    rng = np.random.default_rng(9)
    i, j = rng.integers(0, len(y), 400), rng.integers(0, len(y), 400)
    G = ConstraintGraph.from_pairs(i, j, y[i] == y[j], n_samples=len(y))
    kw = dict(n_classes=2, covariance_type="diag", random_state=0)
    plain = GMPR(**kw).fit(X)
    linked = GMPR(**kw).fit(X, constraints=G)
    ari_plain = adjusted_rand_score(y, plain.predict(X))
    labels = linked.predict(X, constraints=G)
    ari_linked = adjusted_rand_score(y, labels)
    assert ari_plain < 0.35 and ari_linked > 0.65, (ari_plain, ari_linked)
    a, b, s = G.pairs()
    satisfied = np.where(s > 0, labels[a] == labels[b], labels[a] != labels[b])
    assert satisfied.mean() >= 0.9, satisfied.mean()
    # the model fitted with links separates the classes better than the plain one, even for unlinked prediction
    assert adjusted_rand_score(y, linked.predict(X)) > ari_plain + 0.1


def test_predict_proba_shapes_and_laziness(elongated):
    X, _ = elongated
    gm = GMPR(n_classes=2, clusters_per_class=2, random_state=0, max_iter=100, tol=1e-3).fit(X)
    P = gm.predict_proba(X)
    assert isinstance(P, np.ndarray) and P.shape == (len(X), 2)
    np.testing.assert_allclose(P.sum(axis=1), 1.0)
    lazy = gm.predict_proba(da.from_array(X, chunks=(64, -1)))
    assert isinstance(lazy, da.Array)
    np.testing.assert_allclose(lazy.compute(), P, rtol=1e-12)
    np.testing.assert_array_equal(gm.predict(X), P.argmax(axis=1))


def test_bad_input(elongated):
    X, y = elongated
    n = len(y)
    G = ConstraintGraph.from_pairs([0, 1], [2, 3], [True, False], n_samples=n)
    with pytest.raises(InfeasibleConstraintsError, match="n_classes"):
        GMPR(n_classes=1).fit(X, constraints=G)
    with pytest.raises(ChunkingError, match=r"rechunk\(X.chunks\[0\]\)"):
        GMPR().fit(da.from_array(X, chunks=(100, -1)), constraints=G)
    with pytest.raises(InvalidDataError, match="rows"):
        GMPR().fit(X, constraints=ConstraintGraph.from_pairs([0], [1], [True], n_samples=n + 1))
    with pytest.raises(InvalidParameterError, match="ConstraintGraph"):
        GMPR().fit(X, constraints=[(0, 1)])
    weighted = ConstraintGraph.from_pairs([0, 1], [2, 3], [True, False], n_samples=n, weight=[0.5, 2.0])
    with pytest.raises(InvalidDataError, match="weight"):
        GMPR().fit(X, constraints=weighted)
    with pytest.raises(InvalidDataError, match="at least"):
        GMPR(n_classes=3, clusters_per_class=2).fit(X[:5])
    bad = X.copy()
    bad[250, 1] = np.nan
    with pytest.raises(InvalidDataError, match="chunk 2"):
        GMPR(init_sample_size=10, random_state=0).fit(da.from_array(bad, chunks=(100, -1)))  # sample misses row 250
    with pytest.raises(InvalidParameterError, match="covariance_type"):
        GMPR(covariance_type="spherical").fit(X)
    with pytest.raises(InvalidParameterError, match="reg_covar"):
        GMPR(reg_covar=-1.0).fit(X)


def test_light_components_warn_and_nonconvergence_warns():
    rng = np.random.default_rng(10)
    X = rng.normal(size=(12, 3))
    with pytest.warns(UserWarning, match="fewer than n_features"):
        GMPR(n_classes=3, clusters_per_class=2, max_iter=3, tol=1.0, random_state=0).fit(X)
    with pytest.warns(ConvergenceWarning, match="max_iter=1"):
        GMPR(n_classes=2, max_iter=1, random_state=0).fit(rng.normal(size=(100, 2)))


@pytest.mark.parametrize("diag", [True, False])
def test_fused_unlinked_kernel_equals_the_numpy_twin(diag):
    """The numba E-step pass (one exp per component, scatter about the current means) against plain numpy,
    with sub-clusters, a zero sub-cluster weight, far-away rows and skipped (linked) rows."""
    from dclust.kernels.gmpr import unlinked_partial, unlinked_partial_numpy

    rng = np.random.default_rng(5)
    M, K, D = 3, 2, 4
    p = _params(rng, M, K, D, diag)
    p = MixtureParams.build(p.alpha, np.array([[0.4, 0.6], [1.0, 0.0], [0.5, 0.5]]), p.means, p.covariances)
    X = np.concatenate([rng.normal(size=(600, D)) * 3, rng.normal(size=(5, D)) + 40.0]).astype(np.float32)
    linked = rng.choice(605, 50, replace=False)
    for arr in (X, X.astype(np.float64)):  # float32 rows of overlapping diagonal components: the float32 E-step
        tol = 2e-6 if diag and arr.dtype == np.float32 else 1e-9
        a, b = unlinked_partial(arr, p, linked), unlinked_partial_numpy(arr, p, linked)
        np.testing.assert_allclose(a.weight, b.weight, rtol=tol, atol=1e-12)
        np.testing.assert_allclose(a.mean, b.mean, rtol=tol, atol=tol)
        np.testing.assert_allclose(a.scatter, b.scatter, rtol=tol, atol=10 * tol)
        np.testing.assert_allclose(a.class_counts, b.class_counts, rtol=tol)
        assert a.loglik == pytest.approx(b.loglik, rel=tol / 100) and a.n_rows == b.n_rows == 555
    assert a.weight[3] == 0.0  # pi = 0
    bad = X.copy()
    bad[7, 0] = np.nan
    assert unlinked_partial(bad, p, linked, block_index=4).bad_block == (4 if 7 not in linked else -1)


@pytest.mark.parametrize("n_sub", [1, 3])
def test_diag_kernel_on_separated_and_overlapping_tiles_equals_the_numpy_twin(n_sub):
    """The diagonal E-step's two tile paths against plain numpy: rows each near one of many separated components
    (sparse tiles: the float32 screen lists a row's few components, computed exactly and folded row by row) after
    rows that overlap every component (dense tiles: every density exactly, folded by dot products; the screen
    backs off, then finds the sparse tiles again); responsibilities below exp(-60) of a row's largest count as 0,
    so the components' statistics agree to rounding."""
    from dclust.kernels.gmpr import _DIAG_TILE, unlinked_partial, unlinked_partial_numpy

    rng = np.random.default_rng(11)
    M, D = 8, 16
    C = M * n_sub
    centers = rng.uniform(-40, 40, size=(C, D))
    cov = rng.uniform(0.5, 2.0, size=(M, n_sub, D))
    p = MixtureParams.build(rng.dirichlet(np.ones(M) * 3), rng.dirichlet(np.ones(n_sub) * 3, size=M),
                            centers.reshape(M, n_sub, D), cov)
    n_dense, n_sparse = 2 * _DIAG_TILE, 3 * _DIAG_TILE + 17
    overlapping = rng.normal(size=(n_dense, D)) * 60.0
    separated = centers[rng.integers(0, C, n_sparse)] + rng.normal(size=(n_sparse, D))
    X = np.concatenate([overlapping, separated]).astype(np.float32)
    linked = rng.choice(len(X), 40, replace=False)
    a, b = unlinked_partial(X, p, linked), unlinked_partial_numpy(X, p, linked)
    np.testing.assert_allclose(a.weight, b.weight, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(a.mean, b.mean, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(a.scatter, b.scatter, rtol=1e-9, atol=1e-9 * np.abs(b.scatter).max())
    np.testing.assert_allclose(a.class_counts, b.class_counts, rtol=1e-10)
    assert a.loglik == pytest.approx(b.loglik, rel=1e-12) and a.n_rows == b.n_rows == len(X) - 40


def test_diag_screen_keeps_every_component_that_counts():
    """The float32 screen of the diagonal E-step only chooses which log-densities are computed exactly: with
    variances spread over four decades inside a component (loose bounds), data far from the origin (float32
    rounding of the products) and components just separated enough that a row's second component is near the
    exp(-60) cut, the statistics equal plain numpy's; a finite row too large for float32 is not dropped."""
    from dclust.kernels.gmpr import _DIAG_TILE, unlinked_partial, unlinked_partial_numpy

    rng = np.random.default_rng(12)
    M, K, D = 6, 2, 12
    C = M * K
    centers = 1e4 + rng.uniform(-30, 30, size=(C, D))
    var = 10.0 ** rng.uniform(-2, 2, size=(M, K, D))
    p = MixtureParams.build(rng.dirichlet(np.ones(M) * 3), rng.dirichlet(np.ones(K) * 3, size=M),
                            centers.reshape(M, K, D), var)
    n = 3 * _DIAG_TILE + 5
    pick = rng.integers(0, C, n)
    X = centers[pick] + rng.normal(size=(n, D)) * np.sqrt(var.reshape(C, D)[pick]) * 3
    linked = rng.choice(n, 30, replace=False)
    for arr in (X.astype(np.float32), X):
        a, b = unlinked_partial(arr, p, linked), unlinked_partial_numpy(arr, p, linked)
        np.testing.assert_allclose(a.weight, b.weight, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(a.mean, b.mean, rtol=1e-12)
        np.testing.assert_allclose(a.scatter, b.scatter, rtol=1e-8, atol=1e-9 * np.abs(b.scatter).max())
        np.testing.assert_allclose(a.class_counts, b.class_counts, rtol=1e-10, atol=1e-12)
        assert a.loglik == pytest.approx(b.loglik, rel=1e-12)
    huge = X.copy()
    keep = np.setdiff1d(np.arange(n), linked)
    huge[keep[7]] = 1e39  # finite in float64, infinite once scaled into float32
    out = unlinked_partial(huge, p, linked)
    assert out.bad_block == -1 and np.isfinite(out.loglik)
    assert out.weight.sum() == pytest.approx(n - linked.size, rel=1e-12)  # every kept row's mass, that one's too


def test_diag_screen_groups_neighbouring_components_into_a_permutation():
    """The screen lists components in groups of neighbours (a matter of speed only): the order is a permutation
    of the components for any count and for non-finite scaled means, and four tight clusters of four means come
    out as four groups."""
    from dclust.kernels.gmpr import _GROUP, _screen_order

    rng = np.random.default_rng(13)
    for C in (1, 3, _GROUP, 2 * _GROUP + 3):
        Nv = rng.normal(size=(C, 6)).astype(np.float32)
        if C > 2:
            Nv[1], Nv[2] = np.inf, np.nan
        assert sorted(_screen_order(Nv, _GROUP)) == list(range(C))
    blobs = rng.permutation(np.repeat(np.arange(4), 4))
    Nv = (rng.normal(size=(4, 6)) * 100)[blobs] + rng.normal(size=(16, 6))
    order = _screen_order(Nv.astype(np.float32), 4)
    assert all(len(set(blobs[order[i:i + 4]])) == 1 for i in range(0, 16, 4))


def test_predict_with_a_block_pair_holding_only_must_links():
    """A block pair whose links are all must-links has no cannot-link posterior to normalise (it used to fail
    reshaping an empty array)."""
    rng = np.random.default_rng(0)
    X = np.concatenate([rng.normal(0, 1, (60, 2)), rng.normal(6, 1, (60, 2))])
    G = ConstraintGraph.from_pairs([0, 1, 70], [2, 65, 110], [True, False, True], n_samples=120, chunks=60)
    Xd = da.from_array(X, chunks=(60, -1))
    gm = GMPR(n_classes=2, random_state=0).fit(Xd, constraints=G)
    proba = gm.predict_proba(Xd, constraints=G).compute()
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    labels = gm.predict(Xd, constraints=G).compute()
    assert labels[0] == labels[2] and labels[70] == labels[110] and labels[1] != labels[65]


@pytest.mark.parametrize("diag,K", [(True, 2), (False, 2), (True, 1)])
def test_numba_link_kernel_equals_the_numpy_twin(diag, K):
    """The numba link pass (diagonal: BLAS tiles of one link type, several tiles and a ragged last one of each;
    full: one scalar loop) against plain numpy, with must- and cannot-links, a zero sub-cluster weight (K = 2),
    one sub-cluster per class (its fast path) and far-away endpoints."""
    from dclust.kernels.gmpr import _DIAG_TILE, link_partial_numpy

    rng = np.random.default_rng(6)
    M, D, L = 3, 4, 2 * _DIAG_TILE + 37
    p = _params(rng, M, K, D, diag)
    if K == 2:
        p = MixtureParams.build(p.alpha, np.array([[0.4, 0.6], [1.0, 0.0], [0.5, 0.5]]), p.means, p.covariances)
    Xa = np.concatenate([rng.normal(size=(L - 3, D)) * 3, rng.normal(size=(3, D)) + 40.0])
    Xb = rng.normal(size=(L, D)) * 3
    must = rng.random(L) < 0.6
    a, b = link_partial(Xa, Xb, must, p), link_partial_numpy(Xa, Xb, must, p)
    np.testing.assert_allclose(a.weight, b.weight, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(a.mean, b.mean, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(a.scatter, b.scatter, rtol=1e-10, atol=1e-10 * np.abs(b.scatter).max())
    np.testing.assert_allclose(a.class_counts, b.class_counts, rtol=1e-10)
    assert a.loglik == pytest.approx(b.loglik, rel=1e-12) and a.n_rows == b.n_rows == 2 * L
    assert K == 1 or a.weight[3] == 0.0  # pi = 0
    empty = link_partial(Xa[:0], Xb[:0], must[:0], p)
    assert empty.n_rows == 0 and not empty.weight.any()


def test_diag_kernel_path_matches_the_full_path():
    """The diagonal fast path (two BLAS products per tile, vectorised exp, sums about the mean of the means) gives
    the full path's statistics with diagonal Cholesky factors: equal sums and the same count of rows with NaN/inf,
    for float64 and float32 rows; rows far from all but one component and rows between components both occur."""
    from dclust.kernels.gmpr import _DIAG_TILE, unlinked_partial

    rng = np.random.default_rng(7)
    M, K, D = 3, 2, 5
    means, var = rng.normal(size=(M, K, D)) * 3, rng.uniform(0.25, 4.0, size=(M, K, D))
    diag = MixtureParams.build(np.full(M, 1 / M), np.full((M, K), 0.5), means, var)
    full = MixtureParams.build(diag.alpha, diag.pi, means, var[..., None] * np.eye(D))
    n = 2 * _DIAG_TILE + 13  # whole tiles and a ragged last one
    X = np.concatenate([rng.normal(size=(n - 100, D)) * 4, means.reshape(M * K, D)[rng.integers(0, M * K, 100)] * 10])
    linked = np.flatnonzero(rng.random(n) > 0.9)
    for arr in (X, X.astype(np.float32)):
        tol = 1e-11 if arr.dtype == np.float64 else 2e-6  # float32 rows: the diagonal path's float32 E-step
        a, b = unlinked_partial(arr, diag, linked), unlinked_partial(arr, full, linked)
        np.testing.assert_allclose(b.scatter[:, np.arange(D), np.arange(D)], a.scatter, rtol=tol,
                                   atol=tol / 10 * np.abs(a.scatter).max())
        for f in ("weight", "mean", "class_counts"):
            np.testing.assert_allclose(getattr(a, f), getattr(b, f), rtol=tol,
                                       atol=tol / 10 * np.abs(getattr(b, f)).max())
        assert a.loglik == pytest.approx(b.loglik, rel=tol / 10) and a.n_rows == b.n_rows == n - linked.size
        bad = arr.copy()
        keep = np.setdiff1d(np.arange(n), linked)
        bad[keep[[3, -5]], 1] = [np.nan, np.inf]
        assert unlinked_partial(bad, diag, linked, block_index=5).bad_block == 5
        bad[keep[[3, -5]], 1] = 0.0
        bad[linked[:2], 0] = np.nan  # NaN only in skipped rows: the link pass reports them
        assert unlinked_partial(bad, diag, linked, block_index=5).bad_block == -1


@pytest.mark.parametrize("diag", [True, False])
def test_cannot_link_inside_one_far_class_has_a_posterior(diag):
    """Regression: a cannot-link between two points deep inside one class made every term ``a_m B_m`` underflow to
    0 and ``_link_kernel`` raised ZeroDivisionError. In logs its posterior is the numpy oracle's, and a fit with
    such links (and a must-link pair, a chunklet of two) runs."""
    rng = np.random.default_rng(11)
    D = 8
    X = np.concatenate([rng.normal(0, 1, (200, D)), rng.normal(60, 1, (200, D))])
    p = _params(rng, 2, 1, D, diag)
    p = MixtureParams.build(p.alpha, p.pi, np.stack([X[:200].mean(0), X[200:].mean(0)])[:, None], p.covariances)
    i, j = np.array([0, 1, 210, 3]), np.array([5, 250, 260, 4])
    must = np.array([False, False, False, True])
    Xa, Xb = X[i], X[j]
    a = link_partial(Xa, Xb, must, p)
    from dclust.kernels.gmpr import link_partial_numpy

    b = link_partial_numpy(Xa, Xb, must, p)
    assert np.isfinite(a.loglik) and np.isfinite(a.weight).all()
    np.testing.assert_allclose(a.weight, b.weight, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(a.class_counts, b.class_counts, rtol=1e-10, atol=1e-12)
    assert a.loglik == pytest.approx(b.loglik, rel=1e-12)
    G = ConstraintGraph.from_pairs(i, j, must, n_samples=X.shape[0], check_feasible=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        gm = GMPR(n_classes=2, covariance_type="diag" if diag else "full", max_iter=5, random_state=0).fit(
            X, constraints=G)
    assert np.isfinite(gm.log_likelihood_)
    assert np.diff(gm.objective_history_).min() >= -1e-8 * abs(gm.log_likelihood_)


@pytest.mark.parametrize("diag", [True, False])
def test_init_pass_equals_the_dense_hard_assignment(diag):
    """The initial pass (nearest class centre, then nearest of its sub-centres, statistics by counting) equals the
    statistics of the dense one-hot weights of that assignment; a block with NaN is reported."""
    from dclust._dask.gmpr import init_stats
    from dclust.kernels.gmpr import GaussianStats

    rng = np.random.default_rng(1)
    n, D, M, K = 3000, 3, 3, 2
    X = rng.normal(size=(n, D)) * 3 + 50.0
    cc, sc = rng.normal(size=(M, D)) * 3 + 50.0, rng.normal(size=(M, K, D)) * 3 + 50.0
    st = init_stats(da.from_array(X, chunks=700), cc, sc, diag, split_every=2)
    cls = np.argmin(((X[:, None] - cc[None]) ** 2).sum(axis=2), axis=1)
    sub = np.argmin(((X[:, None] - sc[cls]) ** 2).sum(axis=2), axis=1)
    R = np.zeros((n, M * K))
    R[np.arange(n), cls * K + sub] = 1.0
    ref = GaussianStats.from_weights(X, R, M, diag, class_counts=np.bincount(cls, minlength=M).astype(float))
    np.testing.assert_array_equal(st.weight, ref.weight)
    np.testing.assert_array_equal(st.class_counts, ref.class_counts)
    np.testing.assert_allclose(st.mean, ref.mean, rtol=1e-12)
    np.testing.assert_allclose(st.scatter, ref.scatter, rtol=1e-10, atol=1e-10 * np.abs(ref.scatter).max())
    assert st.n_rows == n and st.bad_block == -1
    X[1500, 2] = np.nan
    assert init_stats(da.from_array(X, chunks=700), cc, sc, diag).bad_block == 2


@pytest.mark.parametrize("diag", [True, False])
def test_unlinked_partial_with_a_mask_built_once_equals_the_linked_indices(diag):
    """The E-step task passes the unlinked-row mask built once per fit (``keep=``); the partial is the one of the
    linked rows' indices, bit for bit, and a row left out of the mask is left out of the sums."""
    from dclust.kernels.gmpr import unlinked_mask, unlinked_partial

    rng = np.random.default_rng(12)
    p = _params(rng, 3, 2, 4, diag)
    X = rng.normal(size=(700, 4)) * 2
    linked = np.unique(rng.integers(0, 700, 60))
    keep = unlinked_mask(700, linked)
    assert keep.sum() == 700 - linked.size and not keep[linked].any()
    a, b = unlinked_partial(X, p, linked), unlinked_partial(X, p, keep=keep)
    for f in ("weight", "mean", "scatter", "class_counts"):
        np.testing.assert_array_equal(getattr(a, f), getattr(b, f))
    assert a.loglik == b.loglik and a.n_rows == b.n_rows == 700 - linked.size
    c = unlinked_partial(X, p, keep=np.ones(700, bool))
    assert c.n_rows == 700 and c.weight.sum() > b.weight.sum()
