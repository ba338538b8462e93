"""Any-time DP-means with ``sample_rows``: D-Means converged on a keyed sample of each batch, then one fused
labelling pass (dclust.stream._anytime_step). The sample loop is serial D-Means (oracle: ``dmeans_reference``), the
fused kernel equals ``dm_propose``, and the model does not depend on the chunking; DM4 still holds."""

import dask.array as da
import numpy as np
import pytest

import dclust
from dclust.kernels.dynmeans import (StepState, dm_assign, dm_propose, dmeans_reference, first_nonfinite_row,
                                     gammas, serial_step)
from dclust.metrics import adjusted_rand_score
from dclust.stream import AnytimeDPMeans


def _overlapping(n, seed=0):
    b = dclust.make_blobs(n, 3, centers=25, cluster_std=1.0, chunk_rows=n, dtype="float64", random_state=seed,
                          return_labels=False)
    return b.X.compute()


def _objective(X, centers, lam):
    return float(((X[:, None, :] - centers[None]) ** 2).sum(-1).min(1).sum() + lam * len(centers))


def _state(ref, lam):
    ages = ref["ages"]
    return StepState(ref["centres"], gammas(ref["weights"], ages, 0.0), ages, lam, 0.0)


def test_serial_step_is_serial_dmeans_on_a_first_and_a_later_batch():
    rng = np.random.default_rng(0)
    B1, B2 = rng.normal(size=(300, 2)) * 3, rng.normal(size=(200, 2)) * 3 + 1.0
    lam = 4.0
    ref1 = dmeans_reference([B1], lam, 0.0, 0.0, [np.arange(300)])
    empty = StepState(np.zeros((0, 2)), np.zeros(0), np.zeros(0, np.int64), lam, 0.0)
    _, res, history, n_iter, converged, _ = serial_step(B1, None, empty, max_iter=100)
    assert converged and history == pytest.approx(ref1["objectives"][0], rel=1e-12) and n_iter == len(history)
    np.testing.assert_allclose(res.theta, ref1["centres"], rtol=1e-12)
    ref2 = dmeans_reference([B1, B2], lam, 0.0, 0.0, [np.arange(300), np.arange(200)])
    _, res, history, _, converged, rate = serial_step(B2, None, _state(ref1, lam), max_iter=100)
    assert converged and rate == 0.0
    assert history == pytest.approx(ref2["objectives"][1], rel=1e-12)
    # slots: the old clusters (ids 0..K1-1), then the new ones in creation order (the next ids)
    np.testing.assert_allclose(res.theta[res.has_data], ref2["centres"][res.has_data], rtol=1e-12)
    assert res.theta.shape[0] == len(ref2["ids"])


def test_fused_kernel_equals_dm_propose():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(3000, 3)) * 4
    phi = rng.normal(size=(6, 3)) * 4
    theta = np.vstack([phi[:3] + 0.1, np.zeros((3, 3)), rng.normal(size=(2, 3)) * 4])
    inst = np.array([True, True, True, False, False, False, True, True])
    state = StepState(phi, np.full(6, 50.0), np.array([1, 2, 1, 3, 1, 1]), 9.0, 0.5, theta, inst)
    w = rng.uniform(0.5, 2.0, size=3000)
    for lo, hi in ((0, 2**64 - 1), (2**62, 2**63)):
        a, na, pa, _ = dm_assign(X, w, offset=10, block_index=2, mix=77, lo=lo, hi=hi, state=state)
        b, nb, pb, _ = dm_propose(X, w, offset=10, block_index=2, mix=77, lo=lo, hi=hi, state=state)
        assert na == nb and 0 < pa.size < na
        np.testing.assert_array_equal(np.sort(pa), np.sort(pb))
        np.testing.assert_allclose(a.weight, b.weight, rtol=1e-12)
        has = a.weight > 0
        np.testing.assert_allclose(a.mean[has], b.mean[has], rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(a.scatter, b.scatter, rtol=1e-9)
        assert not a.fingerprint.any() and b.fingerprint[b.weight > 0].all()  # the fused pass keeps none
        assert a.cost == pytest.approx(b.cost, rel=1e-10) and a.bad_block == b.bad_block == -1
    X[1234, 1] = np.nan
    assert dm_assign(X, None, offset=0, block_index=5, mix=1, lo=0, hi=2**64 - 1, state=state)[0].bad_block == 5
    assert first_nonfinite_row(X) == 1234 and first_nonfinite_row(X[:1000]) == -1


def test_keyed_rows_are_the_rows_whose_order_key_is_below_the_end():
    """The sample's rows, found a tile of keys at a time, are exactly those of order_keys below the end, in order,
    for blocks shorter than, as long as and longer than a tile."""
    from dclust.kernels.dynmeans import keyed_rows
    from dclust.kernels.distances import order_keys

    X = np.zeros((3000, 1))
    for n in (0, 1, 1023, 1024, 1025, 3000):
        for end in (0, 2**57, 2**63, 2**64 - 1):
            local, keys, bad = keyed_rows(X[:n], mix=99, offset=7, end=end)
            expected = np.flatnonzero(order_keys(99, np.arange(7, 7 + n)) < np.uint64(end))
            np.testing.assert_array_equal(local, expected)
            np.testing.assert_array_equal(keys, order_keys(99, expected + 7))
            assert bad == -1


def _fit(X, store_rows, tmp_path, **kw):
    path = tmp_path / f"x{store_rows}.zarr"
    if not path.exists():
        dclust.write_array(da.from_array(X, chunks=(store_rows, -1)), path)
    return AnytimeDPMeans(lam=6.0, batch_rows=400, sample_rows=90, random_state=2, **kw).fit(dclust.open_array(path))


def test_sampled_batches_give_the_same_model_for_any_store_chunking(tmp_path):
    X = _overlapping(1600)
    ref = _fit(X, 400, tmp_path, n_restarts=2)
    assert ref.n_clusters_ > 5 and max(ref.history_["n_iter"]) > 2
    for rows in (1, 37, 1600):
        other = _fit(X, rows, tmp_path, n_restarts=2)
        np.testing.assert_array_equal(ref.cluster_ids_, other.cluster_ids_)
        np.testing.assert_allclose(ref.cluster_centers_, other.cluster_centers_, rtol=1e-10, atol=1e-12)
        np.testing.assert_array_equal(ref.predict(X), other.predict(X))
        np.testing.assert_array_equal(np.asarray(ref.labels_), np.asarray(other.labels_))


def test_a_batch_over_dask_equals_the_batch_in_memory():
    X = _overlapping(1200, seed=4)
    first, second = X[:700], X[700:]
    models = []
    for chunks in (None, 130, 17):
        m = AnytimeDPMeans(lam=6.0, sample_rows=150, random_state=0)
        for B in (first, second):  # the first batch runs the full first pass, the second the sample only
            m.partial_fit(B if chunks is None else da.from_array(B, chunks=(chunks, -1)))
        models.append(m)
    for m in models[1:]:
        np.testing.assert_array_equal(models[0].cluster_ids_, m.cluster_ids_)
        np.testing.assert_allclose(models[0].cluster_centers_, m.cluster_centers_, rtol=1e-10, atol=1e-12)
        np.testing.assert_array_equal(models[0].labels_, np.asarray(m.labels_))
        assert models[0].history_["n_iter"] == m.history_["n_iter"]
    assert len(models[0].serial_order_) == 1 and np.sort(models[0].serial_order_[0]).tolist() == list(range(500))


def test_a_large_batch_in_memory_runs_in_two_halves_with_the_same_result():
    X = np.concatenate([_overlapping(70_000, seed=5), _overlapping(70_000, seed=6) + 3.0])
    a = AnytimeDPMeans(lam=6.0, sample_rows=2000, random_state=1).partial_fit(X)  # >= 2 x 65536 rows: 2 threads
    b = AnytimeDPMeans(lam=6.0, sample_rows=2000, random_state=1).partial_fit(da.from_array(X, chunks=(9000, -1)))
    np.testing.assert_array_equal(a.cluster_ids_, b.cluster_ids_)
    np.testing.assert_allclose(a.cluster_centers_, b.cluster_centers_, rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(a.labels_, np.asarray(b.labels_))


def test_dm4_holds_with_samples_smaller_than_the_batches():
    centers = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0], [10.0, 10.0], [20.0, 5.0]])
    rng = np.random.default_rng(0)
    y = rng.integers(0, len(centers), size=3000)
    X = centers[y] + rng.uniform(-0.45, 0.45, size=(3000, 2))
    model = AnytimeDPMeans(lam=4.0, sample_rows=25, random_state=0).fit(da.from_array(X, chunks=(300, 2)))
    z = model.predict(X)
    assert model.n_clusters_ == 5 and adjusted_rand_score(y, z) == 1.0
    for cid, center in zip(model.cluster_ids_, model.cluster_centers_):
        np.testing.assert_allclose(center, X[z == cid].mean(axis=0), rtol=1e-10)


def test_sampled_read_is_on_a_par_with_iterating_on_every_row():
    """Which clusters DP-means opens depends on the order (single seeds differ by up to ~12 % either way on these
    overlapping blobs); over seeds the sampled read matches D-Means iterated on every row of every batch."""
    X = _overlapping(6000)
    lam = 30.0
    Xd = da.from_array(X, chunks=(1500, 3))
    exact, sampled = [], []
    for seed in range(6):
        exact.append(_objective(X, AnytimeDPMeans(lam=lam, random_state=seed, sample_rows=None).fit(Xd)
                                .cluster_centers_, lam))
        sampled.append(_objective(X, AnytimeDPMeans(lam=lam, random_state=seed, sample_rows=300).fit(Xd)
                                  .cluster_centers_, lam))
    assert np.mean(sampled) <= 1.03 * np.mean(exact), (exact, sampled)


def test_resume_with_samples_equals_uninterrupted(tmp_path):
    X = _overlapping(1500, seed=2)
    Xd = da.from_array(X, chunks=(300, 3))
    params = {"lam": 6.0, "sample_rows": 60, "random_state": 5, "checkpoint": tmp_path / "ck"}
    full = AnytimeDPMeans(**{**params, "checkpoint": None}).fit(Xd)
    AnytimeDPMeans(**params).fit(Xd, callback=lambda m: m.n_batches_ == 2)
    resumed = AnytimeDPMeans(**params).fit(Xd)
    assert resumed.n_batches_ == full.n_batches_ == 5
    np.testing.assert_array_equal(resumed.cluster_ids_, full.cluster_ids_)
    np.testing.assert_array_equal(resumed.cluster_centers_, full.cluster_centers_)
    assert resumed.history_["objective"] == full.history_["objective"]


def test_sample_rows_is_validated():
    with pytest.raises(dclust.errors.InvalidParameterError, match="sample_rows"):
        AnytimeDPMeans(lam=1.0, sample_rows=0).fit(np.zeros((4, 2)))
