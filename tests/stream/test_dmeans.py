"""D-Means: docs/algorithms.md 3.7 (DM1-DM7), OCC within a batch == serial D-Means, persistent ids, resume, bad
input."""

import dask.array as da
import numpy as np
import pytest

import dclust
from dclust.datasets import moving_gaussians
from dclust.errors import InvalidDataError, InvalidParameterError, NotFittedError
from dclust.kernels.dpmeans import dpmeans_reference
from dclust.kernels.dynmeans import dmeans_reference, gammas, reparameterise
from dclust.metrics import adjusted_rand_score, tracking_accuracy
from dclust.stream import DynamicMeans

PAPER = dict(lam=0.04, T_Q=6.8, k_tau=1.01)


def _stream(n_steps=12, seed=3, process="paper-code"):
    return moving_gaussians(n_steps, process=process, points_per_cluster=25, random_state=seed)


def _intermittent(n_steps=12, seed=3):
    """Moving Gaussians where the first cluster skips steps 3 and 4 (so it must be revived)."""
    data = _stream(n_steps, seed)
    hide = data.labels[0][0]
    return [X[y != hide] if t in (3, 4) else X for t, (X, y) in enumerate(zip(data.batches, data.labels))]


def _separated(seed=0, n=600, centers=((0, 0), (10, 0), (0, 10), (10, 10))):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, len(centers), size=n)
    return np.asarray(centers, float)[y] + rng.uniform(-0.5, 0.5, size=(n, 2)), y


# ------------------------------------------------------------------------------------------- parameters


@pytest.mark.parametrize(
    "lam,T_Q,k_tau,Q,tau",
    [(0.04, 6.8, 1.01, 0.0058824, 0.184138), (800, 15, 1.1, 53.333, 0.178571), (0.1, 15, 1.1, 0.0066667, 0.178571),
     (55, 13, 4.5, 4.23077, 3.875)],
)
def test_reparameterisation_worked_values(lam, T_Q, k_tau, Q, tau):
    q, t = reparameterise(lam, T_Q, k_tau)
    assert q == pytest.approx(Q, abs=5e-4 * Q) and t == pytest.approx(tau, abs=1e-6)
    dm = DynamicMeans(lam=lam, T_Q=T_Q, k_tau=k_tau).partial_fit(np.zeros((1, 2)))
    assert (dm.Q_, dm.tau_) == (q, t)


def test_k_tau_one_gives_tau_one_over_T_Q_minus_one():
    assert reparameterise(2.0, 5.0, 1.0)[1] == pytest.approx(1 / 4)


@pytest.mark.parametrize(
    "kwargs",
    [dict(lam=-1.0, T_Q=5, k_tau=1.1), dict(lam=0.0, T_Q=5, k_tau=1.1), dict(lam=1.0, T_Q=1.0, k_tau=1.1),
     dict(lam=1.0, T_Q=-3, k_tau=1.1), dict(lam=1.0, T_Q=5, k_tau=0.99), dict(lam=1.0, Q=-0.1, tau=0.0),
     dict(lam=1.0, Q=0.1, tau=-1.0), dict(lam=1.0), dict(lam=1.0, T_Q=5), dict(lam=1.0, T_Q=5, k_tau=1.1, Q=0.1),
     dict(lam=1.0, T_Q=5, k_tau=1.1, Q=0.1, tau=0.1), dict(T_Q=5, k_tau=1.1), dict(lam=1.0, Q=0, tau=0, n_restarts=0)],
)
def test_bad_parameters_raise_clear_errors(kwargs):
    with pytest.raises(InvalidParameterError, match="expected .*; received .*"):
        DynamicMeans(**kwargs).partial_fit(np.zeros((3, 2)))


@pytest.mark.parametrize("make", [
    lambda: DynamicMeans(lam=1.0, Q=1.0, tau=1.0, random_state=0),
    lambda: dclust.SpectralDynamicMeans(lam=1.0, Q=1.0, tau=1.0, kernel="linear"),
    lambda: dclust.KernelDynamicMeans(lam=1.0, Q=1.0, tau=1.0, kernel="linear"),
], ids=["DynamicMeans", "SpectralDynamicMeans", "KernelDynamicMeans"])
def test_a_nan_in_a_fit_over_time_steps_names_the_step_and_its_row(make):
    """fit over time steps names the step holding NaN/inf (and, for one array, its chunk and row): the steps
    before it are in the model."""
    X = np.random.default_rng(3).normal(size=(300, 2))
    X[123, 1] = np.nan
    cases = [(X, r"^X: .*NaN or infinity in row 123\. .*fit again\.$", 0),
             (da.from_array(X, chunks=(50, 2)), r"^batches: .*chunk 2 \(rows 100\.\.149; first at row 123\)", 2),
             ([X[:100], X[100:200], X[200:]], r"^batches\[1\]: .*row 23\. .*time steps before it are in the model", 1)]
    for batches, match, done in cases:
        model = make()
        with pytest.raises(InvalidDataError, match=match):
            model.fit(batches)
        assert getattr(model, "n_batches_", getattr(model, "n_steps_", 0)) == done


def test_bad_batches_raise_clear_errors():
    dm = DynamicMeans(lam=1.0, T_Q=5, k_tau=1.1, random_state=0).partial_fit(np.zeros((3, 2)))
    with pytest.raises(InvalidDataError, match="2 features"):
        dm.partial_fit(np.zeros((3, 3)))
    bad = np.zeros((40, 2))
    bad[7, 1] = np.nan
    with pytest.raises(InvalidDataError, match="row 7"):
        dm.partial_fit(bad)
    bad[7, 1] = np.inf
    with pytest.raises(InvalidDataError, match=r"chunk 0 \(rows 0\.\.9\)"):
        dm.partial_fit(da.from_array(bad, chunks=(10, 2)))
    with pytest.raises(InvalidDataError, match="weights > 0"):
        dm.partial_fit(np.ones((3, 2)), sample_weight=[1.0, 0.0, 1.0])
    one_step = DynamicMeans(lam=1.0, Q=0, tau=0).fit(np.ones((3, 2)))  # a numpy array is one time step
    assert one_step.n_batches_ == 1 and one_step.labels_.shape == (3,)
    assert dm.n_batches_ == 1 and dm.history_["n_samples"] == [3]  # failed batches leave the state untouched
    with pytest.raises(NotFittedError):
        DynamicMeans(lam=1.0, Q=0, tau=0).predict(np.zeros((2, 2)))


# ------------------------------------------------------------------------------------------- DM3 and the oracle


def test_dm3_one_batch_with_q_tau_zero_is_dpmeans_empty_init(blobs):
    X, _ = blobs
    dm = DynamicMeans(lam=30.0, Q=0.0, tau=0.0, random_state=4).partial_fit(X)
    z, centers, history = dpmeans_reference(X, 30.0, dm.serial_order_[0], init="empty")
    np.testing.assert_array_equal(dm.labels_, z)  # ids are given in creation order, as DP-means labels are
    np.testing.assert_allclose(dm.cluster_centers_, centers, rtol=1e-10)
    np.testing.assert_allclose(dm.objective_history_, history, rtol=1e-10)


def test_dm3_matches_the_dpmeans_estimator_objective():
    X, y = _separated(1)
    dp = dclust.DPMeans(lam=9.0, init="empty", random_state=0).fit(X)
    dm = DynamicMeans(lam=9.0, Q=0.0, tau=0.0, random_state=0).partial_fit(X)
    assert dm.objective_ == pytest.approx(dp.objective_, rel=1e-10)
    assert adjusted_rand_score(dp.predict(X), dm.labels_) == 1.0


def test_serial_stream_equals_reference_on_serial_orders():
    batches = _intermittent(10)
    dm = DynamicMeans(**PAPER, random_state=2)
    orders, labels, objectives = [], [], []
    for X in batches:
        dm.partial_fit(X)
        orders.append(dm.serial_order_)
        labels.append(dm.labels_)
        objectives.append(dm.objective_history_)
    ref = dmeans_reference(batches, dm.lam_, dm.Q_, dm.tau_, orders)
    for a, b in zip(labels, ref["labels"]):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(objectives, ref["objectives"]):
        np.testing.assert_allclose(a, b, rtol=1e-10)
    np.testing.assert_array_equal(dm.cluster_ids_, ref["ids"])
    np.testing.assert_array_equal(dm.ages_, ref["ages"])
    np.testing.assert_allclose(dm.cluster_centers_, ref["centres"], rtol=1e-10)
    np.testing.assert_allclose(dm.weights_, ref["weights"], rtol=1e-10)
    assert sum(dm.history_["revivals"]) > 0 and sum(dm.history_["births"]) > 0


# ------------------------------------------------------------------------------------------- OCC within a batch


@pytest.mark.parametrize("rows,prefix_size,max_proposals", [(40, 0, 2), (64, 10, 3), (150, 1000, 4096)])
def test_occ_batch_equals_serial_reference_on_serial_order(rows, prefix_size, max_proposals):
    data = moving_gaussians(4, process="paper-code", points_per_cluster=60, random_state=7)
    b1, b2, b3 = data.batches[0], data.batches[2], data.batches[3]
    dm = DynamicMeans(lam=0.04, Q=0.006, tau=0.2, random_state=1, prefix_size=prefix_size,
                      max_proposals=max_proposals)
    dm.partial_fit(b1)
    o1 = dm.serial_order_
    dm.partial_fit(da.from_array(b2, chunks=(rows, 2)))
    o2 = dm.serial_order_
    lab2 = dm.labels_.compute()
    dm.partial_fit(da.from_array(b3, chunks=(rows, 2)))
    o3 = dm.serial_order_
    assert dm.converged_
    ref = dmeans_reference([b1, b2, b3], dm.lam_, dm.Q_, dm.tau_, [o1, o2, o3], prefer_current=[True, False, False])
    np.testing.assert_array_equal(lab2, ref["labels"][1])
    np.testing.assert_array_equal(dm.labels_.compute(), ref["labels"][2])
    np.testing.assert_allclose(dm.objective_history_, ref["objectives"][2], rtol=1e-10)
    np.testing.assert_array_equal(dm.cluster_ids_, ref["ids"])
    np.testing.assert_allclose(dm.cluster_centers_, ref["centres"], rtol=1e-10)
    for order, n in ((o2, len(b2)), (o3, len(b3))):
        for perm in order:
            np.testing.assert_array_equal(np.sort(perm), np.arange(n))


def test_dask_batch_equals_numpy_batch():
    X1, _ = _separated(2)
    X2, _ = _separated(3, centers=((0.3, 0), (10, 0.2), (20, 20), (0, 10.1)))
    fits = []
    for batch in (X2, da.from_array(X2, chunks=(70, 2))):
        dm = DynamicMeans(lam=9.0, T_Q=4, k_tau=1.5, random_state=0, prefix_size=20, max_proposals=3)
        dm.partial_fit(X1).partial_fit(batch)
        fits.append(dm)
    a, b = fits
    lb = np.asarray(b.labels_.compute())
    np.testing.assert_array_equal(a.labels_, lb)  # old ids are fixed; the single new cluster gets the next id
    np.testing.assert_array_equal(a.cluster_ids_, b.cluster_ids_)
    np.testing.assert_allclose(a.cluster_centers_, b.cluster_centers_, rtol=1e-10)
    np.testing.assert_allclose(a.weights_, b.weights_, rtol=1e-10)
    assert a.objective_ == pytest.approx(b.objective_, rel=1e-10)
    assert a.history_["births"] == b.history_["births"] == [4, 1]


# ------------------------------------------------------------------------------------------- DM1, DM2


def test_dm1_objective_does_not_increase_within_a_step():
    data = _stream(15, seed=5, process="per-axis")
    dm = DynamicMeans(**PAPER, n_restarts=2, random_state=0)
    passes = 0
    for t, X in enumerate(data.batches):
        batch = X if t % 2 else da.from_array(X, chunks=(30, 2))
        dm.partial_fit(batch)
        J = dm.objective_history_
        passes += len(J)
        for a, b in zip(J, J[1:]):
            assert b <= a * (1 + 1e-12)
    assert passes > len(data.batches)  # some steps needed several passes


def test_dm2_fixed_point_at_convergence():
    data = _stream(6, seed=11)
    dm = DynamicMeans(**PAPER, random_state=0)
    for X in data.batches[:-1]:
        dm.partial_fit(X)
    ids0, phi0, w0, age0 = dm.cluster_ids_.copy(), dm.cluster_centers_.copy(), dm.weights_.copy(), dm.ages_.copy()
    Y = data.batches[-1]
    dm.partial_fit(Y)
    assert dm.converged_
    g = gammas(w0, age0, dm.tau_)
    z = dm.labels_
    seen = np.isin(ids0, z)
    cost_options = []
    for k, cid in enumerate(ids0):  # old clusters: instantiated (with data) or revival options
        if seen[k]:
            theta = dm.cluster_centers_[dm.cluster_ids_ == cid][0]
            m = z == cid
            expected = (g[k] * phi0[k] + Y[m].sum(axis=0)) / (g[k] + m.sum())  # eq. 29
            np.testing.assert_allclose(theta, expected, rtol=1e-10)
            cost_options.append(((Y - theta) ** 2).sum(axis=1))
        else:
            cost_options.append(dm.Q_ * age0[k] + g[k] / (g[k] + 1) * ((Y - phi0[k]) ** 2).sum(axis=1))
    for cid in np.setdiff1d(np.unique(z), ids0):  # new clusters: the mean of their points
        theta = dm.cluster_centers_[dm.cluster_ids_ == cid][0]
        np.testing.assert_allclose(theta, Y[z == cid].mean(axis=0), rtol=1e-10)
        cost_options.append(((Y - theta) ** 2).sum(axis=1))
    best = np.minimum(np.min(cost_options, axis=0), dm.lam_)
    own = np.array([((y - dm.cluster_centers_[dm.cluster_ids_ == c][0]) ** 2).sum() for y, c in zip(Y, z)])
    assert (own <= best * (1 + 1e-9) + 1e-15).all()


# ------------------------------------------------------------------------------------------- DM5-DM7, ids


@pytest.mark.parametrize("gap", [3, 4])
def test_dm5_revival_iff_q_dt_le_lam_then_deletion(gap):
    x = np.array([[0.5, 0.5]])
    dm = DynamicMeans(lam=1.0, Q=0.25, tau=0.0, random_state=0).partial_fit(x)  # T_Q = 4
    for _ in range(gap - 1):
        dm.partial_fit(np.zeros((0, 2)))
    assert dm.ages_.tolist() == [gap]
    dm.partial_fit(x)  # Q * dt = 0.25 * gap <= lam: revived (on equality too, by T2)
    assert dm.labels_.tolist() == [0] and dm.history_["revivals"][-1] == 1 and dm.history_["births"][-1] == 0
    for _ in range(4):
        dm.partial_fit(np.zeros((0, 2)))
    assert dm.cluster_ids_.size == 0 and dm.history_["deaths"][-1] == 1  # dt = 5 > T_Q: dropped
    dm.partial_fit(x)
    assert dm.labels_.tolist() == [1]  # a new id: ids are never reused


@pytest.mark.parametrize("factor,revived", [(1 - 1e-6, True), (1 + 1e-6, False)])
def test_dm6_k_tau_is_the_revival_radius_for_heavy_clusters(factor, revived):
    lam, k_tau = 2.0, 1.7
    dm = DynamicMeans(lam=lam, T_Q=5.0, k_tau=k_tau, random_state=0)
    dm.partial_fit(np.array([[1.0, 2.0]]), sample_weight=[1e12])  # w = 1e12
    r = np.sqrt(k_tau * lam * factor)
    dm.partial_fit(np.array([[1.0 + r, 2.0]]))  # dt = 1
    assert (dm.labels_.tolist() == [0]) is revived


def test_dm7_tau_limits():
    rng = np.random.default_rng(0)
    a, b = rng.normal(0, 0.1, (30, 2)), rng.normal(0.2, 0.1, (20, 2))
    dm = DynamicMeans(lam=5.0, Q=0.0, tau=0.0, random_state=0).partial_fit(a).partial_fit(b)
    np.testing.assert_allclose(dm.cluster_centers_[0], np.vstack([a, b]).mean(axis=0), rtol=1e-10)
    assert dm.weights_.tolist() == [50.0]
    dm = DynamicMeans(lam=5.0, Q=0.0, tau=1e12, random_state=0).partial_fit(a).partial_fit(b)
    np.testing.assert_allclose(dm.cluster_centers_[0], b.mean(axis=0), rtol=1e-9)


def test_persistent_ids_under_revival_and_predict():
    A, B, C = np.array([[0.0, 0.0]]), np.array([[5.0, 5.0]]), np.array([[0.0, 9.0]])
    jitter = np.array([[0.0, 0.01], [0.01, 0.0]])
    dm = DynamicMeans(lam=1.0, T_Q=6, k_tau=1.2, random_state=0)
    dm.partial_fit(np.vstack([A + jitter, B + jitter]))
    ida, idb = dm.labels_[0], dm.labels_[2]
    dm.partial_fit(B + jitter)  # A unseen
    dm.partial_fit(np.vstack([C, B]))  # A unseen, C born
    dm.partial_fit(np.vstack([A, B]))  # A revived
    assert dm.labels_.tolist() == [ida, idb]
    assert dm.history_["revivals"] == [0, 0, 0, 1] and dm.history_["births"] == [2, 0, 1, 0]
    assert dm.cluster_ids_.tolist() == [0, 1, 2] and dm.ages_.tolist() == [1, 1, 2]
    assert dm.n_clusters_ == 2
    assert dm.predict(np.array([[0.1, 0.0], [0.0, 8.0], [5.0, 5.2]])).tolist() == [ida, idb, idb]  # C not current
    lazy = dm.predict(da.from_array(np.array([[0.1, 0.0], [5.0, 5.2]]), chunks=(1, 2)))
    assert isinstance(lazy, da.Array) and lazy.compute().tolist() == [ida, idb]


def test_empty_batch_only_advances_ages():
    dm = DynamicMeans(lam=1.0, T_Q=3, k_tau=1.1, random_state=0).partial_fit(np.array([[0.0, 0.0], [5.0, 5.0]]))
    before = dm.cluster_centers_.copy(), dm.weights_.copy(), dm.cluster_ids_.copy()
    dm.partial_fit(np.zeros((0, 2)))
    np.testing.assert_array_equal(dm.cluster_centers_, before[0])
    np.testing.assert_array_equal(dm.weights_, before[1])
    np.testing.assert_array_equal(dm.cluster_ids_, before[2])
    assert dm.ages_.tolist() == [2, 2] and dm.labels_.shape == (0,) and dm.history_["n_clusters"][-1] == 0
    dm.partial_fit(np.zeros((0, 2))).partial_fit(np.zeros((0, 2)))  # dt = 4 > T_Q = 3
    assert dm.cluster_ids_.size == 0 and dm.history_["deaths"] == [0, 0, 0, 2]


# ------------------------------------------------------------------------------------------- fit, resume


def test_fit_on_dask_time_steps_equals_partial_fit_loop():
    data = _stream(6, seed=2)
    X = da.concatenate([da.from_array(b, chunks=(len(b), 2)) for b in data.batches])
    a = DynamicMeans(**PAPER, random_state=3).fit(X)
    b = DynamicMeans(**PAPER, random_state=3)
    for batch in data.batches:
        b.partial_fit(batch)
    np.testing.assert_array_equal(np.asarray(a.labels_), b.labels_)
    np.testing.assert_array_equal(a.cluster_ids_, b.cluster_ids_)
    np.testing.assert_allclose(a.cluster_centers_, b.cluster_centers_, rtol=1e-12)
    assert a.history_["objective"] == b.history_["objective"]
    c = DynamicMeans(**PAPER, random_state=3).fit(data.batches)
    assert c.history_["objective"] == b.history_["objective"]


def _state(m):
    h = {k: v for k, v in m.history_.items() if k != "seconds"}
    return (m.cluster_ids_.tolist(), m.cluster_centers_.tolist(), m.weights_.tolist(), m.ages_.tolist(), m.next_id_,
            m.n_batches_, h, np.asarray(m.labels_).tolist(), m.objective_history_)


def test_resume_from_checkpoint_equals_uninterrupted_run(tmp_path):
    data = _stream(8, seed=4)
    batches = [b if t % 3 else da.from_array(b, chunks=(40, 2)) for t, b in enumerate(data.batches)]
    params = dict(**PAPER, n_restarts=2, random_state=9, prefix_size=10, max_proposals=5)
    full = DynamicMeans(**params).fit(batches)
    part = DynamicMeans(**params)
    for b in batches[:5]:
        part.partial_fit(b)
    dclust.save(part, tmp_path / "ckpt.zarr")
    resumed = dclust.load(tmp_path / "ckpt.zarr")
    assert isinstance(resumed, DynamicMeans) and resumed.get_params() == part.get_params()
    assert _state(resumed) == _state(part)
    for b in batches[5:]:
        resumed.partial_fit(b)
    assert _state(resumed) == _state(full)


def test_progress_events_per_batch():
    events = []
    with dclust.on_progress(events.append):
        DynamicMeans(**PAPER, random_state=0).fit(_stream(3).batches)
    assert [e.iteration for e in events] == [1, 2, 3] and events[0].extra["births"] >= 1


# ------------------------------------------------------------------------------------------- experiments (10.2)


@pytest.mark.parametrize("process,floor", [("paper-code", 0.6), ("per-axis", 0.25)])
def test_moving_gaussians_tracking_accuracy(process, floor):
    accs, nts = [], []
    for seed in range(2):
        data = moving_gaussians(60, process=process, random_state=seed)
        dm = DynamicMeans(**PAPER, n_restarts=3, random_state=seed)
        preds = [dm.partial_fit(X).labels_ for X in data.batches]
        accs.append(tracking_accuracy(zip(data.labels, preds)))
        nts.append(tracking_accuracy(zip(data.labels, preds), tracked=False))
    assert np.mean(accs) > floor
    assert all(nt >= a for nt, a in zip(nts, accs))


def test_example_script_runs_at_toy_size(capsys):
    import runpy
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "examples" / "moving_gaussians.py"
    main = runpy.run_path(str(script))["main"]  # run_name is not "__main__": nothing runs on import
    out = main(["--steps", "12", "--every", "6", "--restarts", "1", "--seed", "1"])
    printed = capsys.readouterr().out
    assert out["tracking_accuracy"] > 0.6 and out["untracked_accuracy"] >= out["tracking_accuracy"]
    assert printed.count("\n") == 4 and "tracking accuracy" in printed
