"""KD-Means ([DM] 5.1-5.2): docs/algorithms.md 3.7 (DM1-DM3, DM5) in feature space, the shared SD-Means state,
save/load."""

import numpy as np
import pytest

import dclust
from dclust.kernels import sdmeans as K
from dclust.kernels.kdmeans import kernel_dmeans_step
from dclust.metrics import tracking_accuracy
from dclust.stream import DynamicMeans, KernelDynamicMeans, SpectralDynamicMeans

LINEAR = dict(lam=10.0, T_Q=5, k_tau=1.5, kernel="linear")


def _blobs_stream(n_steps=8, n_blobs=4, dim=10, per_blob=50, hide=(2, (3, 4)), seed=0):
    """Blobs at 10 e_k (sd 0.1) moving by N(0, 0.05^2) per step; blob hide[0] skips the steps hide[1]."""
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
    return [model.partial_fit(X).labels_.copy() for X in batches]


def _problem(seed=0, n=40, k_old=3, d=2):
    rng = np.random.default_rng(seed)
    Y = rng.normal(size=(n, d)) + rng.integers(0, 3, size=(n, 1)) * 2.0
    Phi = rng.normal(size=(k_old, d)) * 2.0
    gamma = rng.uniform(0.5, 3.0, size=k_old)
    penalty = rng.uniform(0.0, 1.0, size=k_old)
    return Y, Phi, gamma, penalty


@pytest.mark.parametrize("seed", range(4))
def test_DM1_DM2_monotone_and_fixed_point_with_explicit_centers(seed):
    """Linear kernel, so theta_k = (gamma phi + sum y) / (gamma + n) is explicit: the passes never raise eq. 32 and
    at the end every point's cost is minimal among the eq. 28 options."""
    Y, Phi, gamma, penalty = _problem(seed)
    lam = 3.0
    labels, linked, J, hist = kernel_dmeans_step(Y @ Y.T, Y @ Phi.T, (Phi * Phi).sum(1), gamma, penalty, lam,
                                                 np.random.default_rng(seed).permutation(len(Y)))
    assert np.all(np.diff(hist) <= 1e-9 * np.abs(hist[:-1])) and J == hist[-1]
    theta = []
    for l, k in enumerate(linked):
        pts = Y[labels == l]
        g, phi = (gamma[k], Phi[k]) if k >= 0 else (0.0, 0.0)
        theta.append((g * phi + pts.sum(0)) / (g + len(pts)))
    theta = np.array(theta)
    own = ((Y - theta[labels]) ** 2).sum(1)
    options = [((Y[:, None, :] - theta[None]) ** 2).sum(-1), np.full((len(Y), 1), lam)]
    unused = [k for k in range(len(Phi)) if k not in set(linked.tolist())]
    if unused:
        options.append(penalty[unused] + gamma[unused] / (gamma[unused] + 1) * ((Y[:, None, :] - Phi[unused][None])
                                                                                ** 2).sum(-1))
    assert np.all(own <= np.concatenate(options, axis=1).min(1) + 1e-9)
    # eq. 32 (the exact cost) of the result equals eq. 18 with these centres
    J18 = float(own.sum()) + sum(lam if k < 0 else penalty[k] + gamma[k] * ((theta[l] - Phi[k]) ** 2).sum()
                                 for l, k in enumerate(linked))
    assert J == pytest.approx(J18, rel=1e-9)


def test_DM3_first_batch_equals_dpmeans_cost():
    """One batch, no old clusters, linear kernel: the cost is the DP-means objective of the partition."""
    batches, _ = _blobs_stream(n_steps=1)
    X = batches[0]
    kd = KernelDynamicMeans(**LINEAR, random_state=0).partial_fit(X)
    ids = np.unique(kd.labels_)
    sse = sum(((X[kd.labels_ == i] - X[kd.labels_ == i].mean(0)) ** 2).sum() for i in ids)
    assert len(ids) == 4 and kd.objective_ == pytest.approx(sse + 10.0 * len(ids), rel=1e-9)
    assert np.isnan(kd.lower_bound_)


def test_linear_kernel_tracks_like_dmeans_with_revival():
    """SD3's stream: KD-Means (linear) tracks every blob, revives the hidden one, and agrees with D-Means."""
    batches, labels = _blobs_stream()
    kd = KernelDynamicMeans(**LINEAR, random_state=0)
    pred = _run(kd, batches)
    assert tracking_accuracy(list(zip(labels, pred))) == 1.0
    assert kd.history_["revivals"] == [0, 0, 0, 0, 0, 1, 0, 0] and sum(kd.history_["births"]) == 4
    dpred = _run(DynamicMeans(lam=10.0, T_Q=5, k_tau=1.5, random_state=0), batches)
    assert tracking_accuracy(list(zip(dpred, pred))) == 1.0


def test_DM5_deletion_after_T_Q_steps():
    X = np.zeros((5, 2)) + np.arange(5)[:, None] * 0.01
    kd = KernelDynamicMeans(lam=10.0, Q=2.5, tau=0.1, kernel="linear", random_state=0).partial_fit(X)
    for t in range(4):  # Q * dt <= lam for dt <= 4: kept
        kd.partial_fit(np.zeros((0, 2)))
        assert kd.cluster_ids_.tolist() == [0] and kd.ages_.tolist() == [t + 2] if t < 3 else True
    assert kd.n_clusters_ == 0 and kd.history_["deaths"][-1] == 1


def test_shares_the_sdmeans_state_and_round_trips(tmp_path):
    """The temporal state (support sets, w, dt) is SD-Means's: a KD-Means state continues as SD-Means and back."""
    batches, _ = _blobs_stream(n_steps=4, hide=None)
    kd = KernelDynamicMeans(lam=1.0, T_Q=5, k_tau=1.5, kernel="rbf", bandwidth=3.0, max_support=8, random_state=0)
    kd.fit(batches[:3])
    assert kd.support_size_.max() <= 8 and kd.n_clusters_ == 4
    dclust.save(kd, tmp_path / "kd.zarr")
    back = dclust.load(tmp_path / "kd.zarr")
    assert type(back) is KernelDynamicMeans and back.get_params() == kd.get_params()
    a = kd.partial_fit(batches[3]).labels_
    b = back.partial_fit(batches[3]).labels_
    assert np.array_equal(a, b) and np.array_equal(kd.support_, back.support_)
    assert set(SpectralDynamicMeans().get_params()) == set(KernelDynamicMeans().get_params())


def test_rbf_kernel_separates_non_convex_rings_at_one_step():
    """A kernel (not the linear one) lets KD-Means split two concentric rings D-Means cannot."""
    rng = np.random.default_rng(0)
    ang = rng.uniform(0, 2 * np.pi, 300)
    r = np.where(np.arange(300) < 150, 1.0, 2.0)
    X = r[:, None] * np.stack([np.cos(ang), np.sin(ang)], 1) + 0.02 * rng.standard_normal((300, 2))
    kd = KernelDynamicMeans(lam=1.0, Q=0.1, tau=1.0, kernel="mst", bandwidth=0.5, random_state=0).partial_fit(X)
    truth = (np.arange(300) >= 150).astype(int)
    assert tracking_accuracy([(truth, kd.labels_)]) == 1.0


def test_bad_parameters_are_those_of_sdmeans():
    with pytest.raises(dclust.errors.InvalidParameterError, match="bandwidth"):
        KernelDynamicMeans(lam=1.0, Q=0.0, tau=0.0, kernel="rbf").partial_fit(np.ones((3, 2)))
    with pytest.raises(dclust.errors.NotFittedError):
        KernelDynamicMeans(**LINEAR).predict(np.ones((3, 2)))
    assert K.linear_kernel(np.ones((1, 2)), np.ones((1, 2)))[0, 0] == 2.0
