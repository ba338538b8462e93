"""SD-Means: docs/algorithms.md 4.6 (SD1-SD4), the relaxation identity (E-DM3), kernels, state round trip, bad input."""

import itertools

import dask.array as da
import numpy as np
import pytest

import dclust
from dclust.datasets import moving_rings
from dclust.errors import DclustError, InvalidDataError, InvalidParameterError, NotFittedError
from dclust.kernels import sdmeans as K
from dclust.metrics import tracking_accuracy
from dclust.stream._sdmeans import SpectralDynamicMeans

LINEAR = dict(lam=10.0, T_Q=5, k_tau=1.5, kernel="linear")


def _blobs_stream(n_steps=8, n_blobs=4, dim=10, per_blob=50, hide=(2, (3, 4)), seed=0):
    """SD3 data: blobs at 10 e_k (sd 0.1), moving by N(0, 0.05^2) per step; blob hide[0] skips steps hide[1]."""
    rng = np.random.default_rng(seed)
    centers = 10.0 * np.eye(dim)[:n_blobs]
    batches, labels = [], []
    for t in range(n_steps):
        centers = centers + 0.05 * rng.standard_normal(centers.shape)
        y = np.repeat(np.arange(n_blobs), per_blob)
        if hide is not None and t in hide[1]:
            y = y[y != hide[0]]
        batches.append(centers[y] + 0.1 * rng.standard_normal((len(y), dim)))
        labels.append(y)
    return batches, labels


def _run(model, batches):
    out = []
    for X in batches:
        model.partial_fit(X)
        out.append(model.labels_.copy())
    return out


# ------------------------------------------------------------------------------------------------- kernels


def test_mst_path_distance_counts_only_long_edges():
    x = np.array([[0.0, 0.0], [0.05, 0.0], [0.1, 0.0], [0.5, 0.0], [0.6, 0.0]])
    D2 = K.squared_distances(x, x)
    d = K.mst_path_distances(D2, 0.07)
    # chain 0-1-2 (light edges), a 0.4 jump, then a 0.1 edge (heavy, > 0.07)
    assert d[0, 2] == 0.0 and d[0, 3] == pytest.approx(0.4) and d[0, 4] == pytest.approx(0.5)
    assert d[3, 4] == pytest.approx(0.1) and np.allclose(d, d.T)
    G = K.mst_kernel(D2, 0.07)
    assert G[0, 3] == pytest.approx(np.exp(-0.16 / (2 * 0.07**2)))
    # an extra point attached to its nearest tree point: the attaching edge counts when it is long
    y = np.vstack([x, [[0.5, 0.2]]])
    d2 = K.mst_path_distances(K.squared_distances(y, y), 0.07, n_tree=5)
    assert d2[5, 3] == pytest.approx(0.2) and d2[5, 0] == pytest.approx(0.6)
    assert np.allclose(d2[:5, :5], d)


def test_mst_duplicate_points_are_connected():
    x = np.array([[0.0, 0.0], [0.0, 0.0], [1.0, 0.0]])
    d = K.mst_path_distances(K.squared_distances(x, x), 0.07)
    assert d[0, 1] == 0.0 and d[0, 2] == pytest.approx(1.0) and d[1, 2] == pytest.approx(1.0)


def test_rbf_and_linear_kernels():
    A = np.array([[0.0, 0.0], [1.0, 1.0]])
    assert np.allclose(K.linear_kernel(A, A), [[0, 0], [0, 2]])
    assert np.allclose(K.rbf_kernel(A, A, 2.0), [[1, np.exp(-2 / 8)], [np.exp(-2 / 8), 1]])


def _random_problem(rng, n=12, k_old=3, d=4, lam=3.0):
    Y = rng.normal(size=(n, d))
    Phi = rng.normal(size=(k_old, d))
    gamma = rng.uniform(0.5, 5.0, size=k_old)
    penalty = rng.uniform(0.0, 2.0, size=k_old)
    return Y, Phi, Y @ Y.T, Y @ Phi.T, (Phi * Phi).sum(1), gamma, penalty, lam


@pytest.mark.parametrize("seed", range(5))
def test_relaxation_identity_and_lower_bound(seed):
    """E-DM3: J(modified penalty) = const - tr[Z^T (G - lam I) Z] with Omega = diag(Q dt); LB <= J_mod <= J."""
    rng = np.random.default_rng(seed)
    Y, Phi, kyy, kyphi, kphiphi, gamma, penalty, lam = _random_problem(rng)
    n, k_old = kyphi.shape
    labels = rng.integers(0, 4, size=n)
    labels[:4] = np.arange(4)
    linked = np.array([2, -1, 0, -1])
    G = K.build_G(kyy, kyphi, kphiphi, gamma, penalty)
    const = K.relaxation_constant(np.trace(kyy), kphiphi, gamma, penalty, lam)
    Z, j_mod = [], np.trace(kyy)
    for l in range(4):
        c = np.zeros(n + k_old)
        c[:n] = labels == l
        nl = c[:n].sum()
        k = linked[l]
        g = 0.0 if k < 0 else gamma[k]
        if k >= 0:
            c[n + k] = np.sqrt(g)
        Z.append(c / np.sqrt(g + nl))
        mean_part = (Y[labels == l].sum(0) + (g * Phi[k] if k >= 0 else 0)) / (g + nl)
        sse = ((Y[labels == l] - mean_part) ** 2).sum() + (g * ((mean_part - Phi[k]) ** 2).sum() if k >= 0 else 0)
        j_mod += (lam if k < 0 else nl / (g + nl) * penalty[k]) + sse - (Y[labels == l] ** 2).sum()
    for k in set(range(k_old)) - set(linked[linked >= 0]):  # inactive old clusters: unit columns
        e = np.zeros(n + k_old)
        e[n + k] = 1.0
        Z.append(e)
    Z = np.array(Z).T
    assert np.allclose(Z.T @ Z, np.eye(Z.shape[1]))
    assert j_mod == pytest.approx(const - np.trace(Z.T @ (G - lam * np.eye(n + k_old)) @ Z), rel=1e-10)
    J = K.exact_cost(labels, linked, kyy, kyphi, kphiphi, gamma, penalty, lam)
    assert j_mod <= J + 1e-9
    assert K.lower_bound(np.linalg.eigvalsh(G), lam, const) <= j_mod + 1e-9


@pytest.mark.parametrize("seed", range(20))
def test_SD2_matching_is_optimal_against_brute_force(seed):
    rng = np.random.default_rng(seed)
    L, Kold = rng.integers(1, 5), rng.integers(1, 5)
    cost = rng.normal(size=(L, Kold))
    match = K.match_clusters(cost)
    got = sum(cost[l, k] for l, k in enumerate(match) if k >= 0)
    assert len(set(match[match >= 0])) == (match >= 0).sum()
    best = 0.0
    for r in range(1, min(L, Kold) + 1):
        for rows in itertools.combinations(range(L), r):
            for cols in itertools.permutations(range(Kold), r):
                best = min(best, sum(cost[i, j] for i, j in zip(rows, cols)))
    assert got == pytest.approx(best, abs=1e-12)


def test_SD2_matching_costs_are_exact_cost_differences():
    rng = np.random.default_rng(7)
    _, _, kyy, kyphi, kphiphi, gamma, penalty, lam = _random_problem(rng)
    labels = np.arange(12) % 3
    cost = K.matching_costs(labels, 3, kyy, kyphi, kphiphi, gamma, penalty, lam)
    none = K.exact_cost(labels, np.array([-1, -1, -1]), kyy, kyphi, kphiphi, gamma, penalty, lam)
    linked = np.array([1, -1, 0])
    J = K.exact_cost(labels, linked, kyy, kyphi, kphiphi, gamma, penalty, lam)
    assert J - none == pytest.approx(cost[0, 1] + cost[2, 0], rel=1e-10)


def test_sparsify_is_exact_within_budget_and_spans_a_linear_feature_space():
    rng = np.random.default_rng(0)
    V = rng.normal(size=(30, 3))
    W = V @ V.T
    abar = rng.uniform(0.0, 1.0, size=30) / 30
    idx, coef = K.sparsify(W, abar, 50)
    assert np.array_equal(idx, np.arange(30)) and np.array_equal(coef, abar)
    idx, coef = K.sparsify(W, abar, 3)
    assert len(idx) == 3
    assert np.allclose(coef @ V[idx], abar @ V, atol=1e-8)
    # a non-linear kernel: the error shrinks with the budget
    Wr = K.rbf_kernel(V, V, 1.0)
    errs = []
    for m in (2, 5, 10):
        i, c = K.sparsify(Wr, abar, m)
        x = np.zeros(30)
        x[i] = c
        errs.append((abar - x) @ Wr @ (abar - x))
    assert errs[0] > errs[1] > errs[2] >= -1e-12


def test_discretize_recovers_block_structure():
    rng = np.random.default_rng(1)
    y = rng.integers(0, 3, size=60)
    R = np.linalg.qr(rng.normal(size=(3, 3)))[0]
    Vbar = np.eye(3)[y] @ R + 0.01 * rng.normal(size=(60, 3))
    Vbar /= np.linalg.norm(Vbar, axis=1, keepdims=True)
    labels, loss = K.discretize(Vbar, first=0)
    assert dclust.metrics.adjusted_rand_score(y, labels) == 1.0 and loss < 0.1


# ------------------------------------------------------------------------------------------------ estimator


def test_SD3_linear_kernel_tracks_separated_blobs_perfectly_with_revival():
    batches, labels = _blobs_stream()
    sd = SpectralDynamicMeans(**LINEAR, random_state=0)
    pred = _run(sd, batches)
    for t in range(len(batches)):  # 100% tracking accuracy at every step
        assert tracking_accuracy(list(zip(labels[: t + 1], pred[: t + 1]))) == 1.0
    assert sd.history_["revivals"] == [0, 0, 0, 0, 0, 1, 0, 0]
    assert sd.history_["births"][0] == 4 and sum(sd.history_["births"]) == 4
    assert sd.history_["n_clusters"] == [4, 4, 4, 3, 3, 4, 4, 4]
    assert sd.cluster_ids_.tolist() == [0, 1, 2, 3] and sd.ages_.tolist() == [1, 1, 1, 1]
    from dclust.stream import DynamicMeans

    dm = DynamicMeans(lam=10.0, T_Q=5, k_tau=1.5, random_state=0)
    dpred = _run(dm, batches)
    assert tracking_accuracy(list(zip(labels, dpred))) == 1.0
    # so they agree on the partitions and the correspondences (up to one renaming)
    assert tracking_accuracy(list(zip(dpred, pred))) == 1.0


def test_SD1_lower_bound_below_exact_cost_every_step():
    batches, _ = _blobs_stream()
    sd = SpectralDynamicMeans(**LINEAR, random_state=0).fit(batches)
    r = moving_rings(6, 200, noise_model="radial", random_state=0)
    sd2 = SpectralDynamicMeans(lam=27.5, T_Q=13, k_tau=4.5, kernel="mst", bandwidth=0.07, random_state=0)
    sd2.fit(r.batches)
    for h in (sd.history_, sd2.history_):
        assert len(h["objective"]) == len(h["lower_bound"]) > 0
        assert all(lb <= j + 1e-9 * abs(j) for lb, j in zip(h["lower_bound"], h["objective"]))


def test_SD4_first_step_linear_cost_equals_dmeans_cost():
    batches, _ = _blobs_stream(n_steps=1)
    X = batches[0]
    sd = SpectralDynamicMeans(**LINEAR, random_state=0).partial_fit(X)
    ids = np.unique(sd.labels_)
    sse = sum(((X[sd.labels_ == i] - X[sd.labels_ == i].mean(0)) ** 2).sum() for i in ids)
    assert sd.objective_ == pytest.approx(sse + 10.0 * len(ids), rel=1e-9)


def test_predict_and_feature_space_centers():
    batches, _ = _blobs_stream(n_steps=3, hide=None)
    sd = SpectralDynamicMeans(**LINEAR, random_state=0).fit(batches)
    assert np.array_equal(sd.predict(batches[-1]), sd.labels_)
    # linear kernel: each centre is one explicit support point, the Kalman-style mean of 4.2
    assert sd.support_size_.tolist() == [1, 1, 1, 1]
    for k, cid in enumerate(sd.cluster_ids_):
        assert np.linalg.norm(sd.support_[k, 0] - batches[-1][sd.labels_ == cid].mean(0)) < 0.1
    rbf = SpectralDynamicMeans(lam=10.0, T_Q=5, k_tau=1.5, kernel="rbf", bandwidth=3.0, max_support=7,
                               random_state=0).fit(batches)
    assert rbf.support_size_.max() <= 7
    assert np.array_equal(rbf.predict(batches[-1]), rbf.labels_)


def test_dask_batch_equals_numpy_batch():
    batches, _ = _blobs_stream(n_steps=3, hide=None)
    a = SpectralDynamicMeans(**LINEAR, random_state=0).fit(batches)
    b = SpectralDynamicMeans(**LINEAR, random_state=0).fit(da.from_array(np.vstack(batches), chunks=(200, -1)))
    assert np.array_equal(a.labels_, b.labels_) and np.allclose(a.support_, b.support_)
    assert a.history_["objective"] == pytest.approx(b.history_["objective"], rel=1e-12)


def test_empty_batch_ages_and_deletion():
    batches, _ = _blobs_stream(n_steps=2, hide=None)
    sd = SpectralDynamicMeans(lam=10.0, T_Q=2, k_tau=1.5, kernel="linear", random_state=0).fit(batches)
    sd.partial_fit(np.zeros((0, 10)))
    assert sd.labels_.shape == (0,) and sd.ages_.tolist() == [2, 2, 2, 2]
    assert sd.history_["n_clusters"][-1] == 0 and sd.history_["objective"][-1] == 0.0
    assert sd.history_["lower_bound"][-1] <= 0.0
    sd.partial_fit(np.zeros((0, 10)))  # Q * 3 > lam when T_Q = 2: every cluster is deleted
    assert sd.n_clusters_ == 0 and sd.history_["deaths"][-1] == 4
    with pytest.raises(DclustError, match="at least one cluster"):
        sd.predict(batches[0])
    sd.partial_fit(batches[0])  # new clusters get new ids, never reused
    assert sorted(np.unique(sd.labels_).tolist()) == [4, 5, 6, 7]


def test_save_load_round_trip_and_resume_equals_uninterrupted(tmp_path):
    r = moving_rings(6, 150, noise_model="radial", random_state=2)
    params = dict(lam=20.0, T_Q=13, k_tau=4.5, kernel="mst", bandwidth=0.07, n_restarts=2, max_support=20,
                  random_state=5)
    full = SpectralDynamicMeans(**params)
    full_labels = _run(full, r.batches)
    part = SpectralDynamicMeans(**params)
    first = _run(part, r.batches[:3])
    dclust.save(part, tmp_path / "sd.zarr")
    back = dclust.load(tmp_path / "sd.zarr")
    assert type(back) is SpectralDynamicMeans and back.get_params() == part.get_params()
    for name in ("cluster_ids_", "ages_", "weights_", "support_", "support_coef_", "support_size_", "labels_"):
        got, want = getattr(back, name), getattr(part, name)
        assert got.dtype == want.dtype and np.array_equal(got, want)
    assert back.history_ == part.history_ and back.seed_ == part.seed_ and back.next_id_ == part.next_id_
    rest = _run(back, r.batches[3:])
    for a, b in zip(first + rest, full_labels):
        assert np.array_equal(a, b)
    for key in ("n_clusters", "objective", "lower_bound", "births", "deaths", "revivals"):
        assert back.history_[key] == full.history_[key]
    assert np.array_equal(back.support_, full.support_)


def test_rings_sd_means_beats_linear_d_means():
    """10.2 at small size (400 points, 8 steps, radial noise): SD-Means tracks the rings better than D-Means."""
    from dclust.stream import DynamicMeans

    r = moving_rings(8, 400, noise_model="radial", random_state=1)
    sd = SpectralDynamicMeans(lam=55.0, T_Q=13, k_tau=4.5, kernel="mst", bandwidth=0.07, random_state=0)
    dm = DynamicMeans(lam=0.1, T_Q=15, k_tau=1.1, random_state=0)
    sd_steps = list(zip(r.labels, _run(sd, r.batches)))
    dm_steps = list(zip(r.labels, _run(dm, r.batches)))
    assert tracking_accuracy(sd_steps) > tracking_accuracy(dm_steps) + 0.1
    assert tracking_accuracy(sd_steps, tracked=False) > tracking_accuracy(dm_steps, tracked=False) + 0.2


# ------------------------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    "kwargs,match",
    [(dict(T_Q=5, k_tau=1.5, kernel="linear"), "lam"),
     (dict(lam=1.0, kernel="linear"), "exactly one complete pair"),
     (dict(lam=1.0, T_Q=5, kernel="linear"), "exactly one complete pair"),
     (dict(lam=1.0, T_Q=5, k_tau=1.5, Q=1.0, tau=1.0, kernel="linear"), "exactly one complete pair"),
     (dict(lam=1.0, T_Q=5, k_tau=0.5, kernel="linear"), "k_tau"),
     (dict(lam=1.0, T_Q=1.0, k_tau=1.5, kernel="linear"), "T_Q"),
     (dict(lam=-1.0, Q=0.0, tau=0.0, kernel="linear"), "lam"),
     (dict(lam=1.0, Q=0.0, tau=0.0, kernel="rbf"), "bandwidth"),
     (dict(lam=1.0, Q=0.0, tau=0.0, kernel="linear", bandwidth=1.0), "bandwidth"),
     (dict(lam=1.0, Q=0.0, tau=0.0, kernel="cosine"), "kernel"),
     (dict(lam=1.0, Q=0.0, tau=0.0, kernel="linear", max_support=0), "max_support"),
     (dict(lam=1.0, Q=0.0, tau=0.0, kernel="linear", support_space="rbf"), "support_space")],
)
def test_bad_parameters(kwargs, match):
    with pytest.raises(InvalidParameterError, match=match):
        SpectralDynamicMeans(**kwargs).partial_fit(np.ones((3, 2)))


def test_bad_batches():
    sd = SpectralDynamicMeans(**LINEAR, random_state=0)
    with pytest.raises(NotFittedError):
        sd.predict(np.ones((2, 10)))
    sd.partial_fit(_blobs_stream(n_steps=1)[0][0])
    with pytest.raises(InvalidDataError, match="10 features"):
        sd.partial_fit(np.ones((5, 3)))
    bad = np.ones((5, 10))
    bad[3, 2] = np.nan
    with pytest.raises(InvalidDataError, match="row 3"):
        sd.partial_fit(bad)
    small = SpectralDynamicMeans(**LINEAR, max_batch=100)
    with pytest.raises(InvalidDataError, match=r"120\^2 x 8 bytes") as err:
        small.partial_fit(np.ones((120, 10)))
    assert "Split the stream into smaller batches" in str(err.value)
    assert not hasattr(small, "n_steps_")  # nothing was learned from the rejected batch


def test_callable_kernel_matches_builtin():
    batches, _ = _blobs_stream(n_steps=2, hide=None)
    a = SpectralDynamicMeans(**LINEAR, random_state=0).fit(batches)
    b = SpectralDynamicMeans(lam=10.0, T_Q=5, k_tau=1.5, kernel=lambda A, B: A @ B.T, random_state=0).fit(batches)
    assert np.array_equal(a.labels_, b.labels_)
    assert a.history_["objective"] == pytest.approx(b.history_["objective"], rel=1e-9)


# ------------------------------------------------------------------------------------------------ [DM] 8.2 fixes


def test_mst_rss_combines_long_edges_by_root_sum_of_squares():
    """The authors' MST distance: sqrt(sum of squared long-edge lengths); light edges and short hops count 0."""
    x = np.array([[0.0, 0.0], [0.05, 0.0], [0.15, 0.0], [0.25, 0.0]])
    D2 = K.squared_distances(x, x)
    d_sum = K.mst_path_distances(D2, 0.07)
    d_rss = K.mst_path_distances(D2, 0.07, combine="rss")
    assert d_sum[0, 3] == pytest.approx(0.2) and d_rss[0, 3] == pytest.approx(np.sqrt(0.02))
    assert d_rss[0, 1] == 0.0 and d_rss[1, 2] == pytest.approx(0.1)
    y = np.vstack([x, [[0.25, 0.1]]])  # attached to point 3 by a long hop of 0.1
    d2 = K.mst_path_distances(K.squared_distances(y, y), 0.07, n_tree=4, combine="rss")
    assert d2[4, 0] == pytest.approx(np.sqrt(0.02 + 0.01))
    G = K.mst_kernel(D2, 0.07, combine="rss")
    assert G[0, 3] == pytest.approx(np.exp(-0.02 / (2 * 0.07**2)))


@pytest.mark.parametrize("lam", [0.5, 3.0, 1e6])
def test_spectral_embedding_computes_only_eigenpairs_above_lam(lam):
    rng = np.random.default_rng(3)
    A = rng.normal(size=(30, 5))
    G = A @ A.T
    Vbar, sigma = K.spectral_embedding(G, 25, lam)
    full, V = np.linalg.eigh(G)
    keep = full > lam if (full > lam).any() else full == full.max()
    np.testing.assert_allclose(np.sort(sigma), np.sort(full[keep]), rtol=1e-10)
    ref = V[:25][:, keep]
    ref /= np.linalg.norm(ref, axis=1, keepdims=True)
    np.testing.assert_allclose(Vbar @ Vbar.T, ref @ ref.T, atol=1e-8)  # same rows up to the eigenvector signs
    const = 10.0
    assert K.lower_bound(sigma, lam, const) == pytest.approx(K.lower_bound(full, lam, const))


def test_rings_support_spreads_over_the_ring_and_tracks_through_motion():
    """[DM] 8.2 with the authors' ring noise (0.01): each old centre keeps many support points spread over its ring
    (not the single point an exact fit in the batch's MST kernel keeps); SD-Means separates the rings at every step
    and tracks them through the first steps (a jump of 0.12 at step 4 swaps the blob and the inner ring: their old
    supports attach to each other's new points, see docs/reproduction.md)."""
    r = moving_rings(10, 400, noise=0.01, random_state=0)
    sd = SpectralDynamicMeans(lam=55.0, T_Q=13, k_tau=4.5, kernel="mst-rss", bandwidth=0.07, random_state=0)
    steps = list(zip(r.labels, _run(sd, r.batches)))
    assert tracking_accuracy(steps, tracked=False) > 0.99
    assert tracking_accuracy(steps[:4]) > 0.99
    ring = int(np.argmax(sd.support_size_))
    assert sd.support_size_[ring] >= 20
    pts = sd.support_[ring, : sd.support_size_[ring]]
    angles = np.arctan2(*(pts - pts.mean(0)).T[::-1])
    assert np.ptp(angles) > np.pi  # the support covers more than half of the ring


# ------------------------------------------------------------------------------------------------ rings data


def test_paper_code_rings_follow_the_authors_program():
    """moving_rings(process="paper-code"): example/movingringdatagen.hpp of the authors' program (10.2)."""
    r = moving_rings(300, 367, process="paper-code", random_state=0)
    assert np.bincount(r.labels[0]).tolist() == [200, 100, 67]  # the program's 200 / 100 / 67
    assert np.bincount(moving_rings(1, 400, process="paper-code").labels[0]).tolist() == [218, 109, 73]
    assert r.centers.shape == (300, 3, 2) and not np.allclose(r.centers[0, 0], 0.5)  # it moves before step 1
    # each ring is tethered to the previous one within max(radii) / (2 * 3)
    tether = np.linalg.norm(np.diff(r.centers, axis=1), axis=2)
    assert tether.max() <= 0.4 / 6 + 1e-12 and tether.max() > 0.05
    # ring 0 moves by a radial step N(0, 0.05): its RMS length is 0.05 (per-axis N(0, 0.05^2 I) gives 0.05 sqrt 2)
    rms = np.sqrt((np.linalg.norm(np.diff(r.centers[:, 0], axis=0), axis=1) ** 2).mean())
    assert 0.045 < rms < 0.055
    axis = moving_rings(300, 30, random_state=0).centers[:, 0]
    assert 0.065 < np.sqrt((np.linalg.norm(np.diff(axis, axis=0), axis=1) ** 2).mean()) < 0.076
    # radial noise 0.01 (the program's clusterStdDev) around each ring's own centre
    t = 7
    for j, radius in enumerate((0.4, 0.2)):
        dist = np.linalg.norm(r.batches[t][r.labels[t] == j] - r.centers[t, j], axis=1)
        assert abs(dist.mean() - radius) < 0.003 and 0.008 < dist.std() < 0.012
    blob = np.linalg.norm(r.batches[t][r.labels[t] == 2] - r.centers[t, 2], axis=1)
    assert np.sqrt((blob ** 2).mean()) == pytest.approx(0.01, rel=0.25)
    # fewer steps give a prefix
    short = moving_rings(3, 367, process="paper-code", random_state=0)
    assert all(np.array_equal(a, b) for a, b in zip(short.batches, r.batches[:3]))


@pytest.mark.parametrize("kwargs,match", [(dict(process="paper"), "process"),
                                          (dict(process="paper-code", noise_model="radial"), "noise_model"),
                                          (dict(noise_model="isotropic"), "noise_model"),
                                          (dict(process="paper-code", noise=-0.1), "noise")])
def test_moving_rings_bad_arguments(kwargs, match):
    with pytest.raises(InvalidParameterError, match=match):
        moving_rings(2, 30, **kwargs)


def test_paper_code_rings_tracked_and_support_space():
    """[DM] 8.2 on the authors' ring process: SD-Means with the paper's parameters tracks the rings; with
    support_space="kernel" (the authors' support fit in the batch's MST kernel) each old centre keeps one or two
    points (a ring is one light component) and tracks worse, with the same partitions."""
    r = moving_rings(12, 400, process="paper-code", random_state=3)
    params = dict(lam=55.0, T_Q=13, k_tau=4.5, kernel="mst-rss", bandwidth=0.07, max_support=20, random_state=0)
    auto = SpectralDynamicMeans(**params)
    own = SpectralDynamicMeans(support_space="kernel", **params)
    auto_steps = list(zip(r.labels, _run(auto, r.batches)))
    own_steps = list(zip(r.labels, _run(own, r.batches)))
    assert tracking_accuracy(auto_steps) > 0.95
    assert auto.support_size_.tolist() == [20, 20, 20] and own.support_size_.max() <= 2
    assert tracking_accuracy(own_steps) < tracking_accuracy(auto_steps) - 0.1
    assert tracking_accuracy(own_steps, tracked=False) == tracking_accuracy(auto_steps, tracked=False)
