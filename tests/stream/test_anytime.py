"""Any-time DP-means: DM4 (random disjoint batches == DP-means on separated blobs), early stop, resume, Zarr."""

import warnings

import dask.array as da
import numpy as np
import pytest

import dclust
from dclust.errors import InvalidDataError, InvalidParameterError
from dclust.metrics import adjusted_rand_score
from dclust.stream import AnytimeDPMeans


def _blobs(n=2000, seed=0):
    """Blobs whose squared diameter (< 2) is below lam = 4 and whose points are > 2 sqrt(lam) apart (DP5)."""
    centers = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0], [10.0, 10.0], [20.0, 5.0]])
    rng = np.random.default_rng(seed)
    y = rng.integers(0, len(centers), size=n)
    return centers[y] + rng.uniform(-0.45, 0.45, size=(n, 2)), y


def test_dm4_anytime_equals_dpmeans_on_separated_blobs():
    X, y = _blobs()
    model = AnytimeDPMeans(lam=4.0, random_state=0).fit(da.from_array(X, chunks=(150, 2)))
    assert model.n_batches_ == 14 and model.n_seen_ == len(X)
    assert sorted(model.batch_order_.tolist()) == list(range(14)) and model.batch_order_.tolist() != list(range(14))
    dp = dclust.DPMeans(lam=4.0, init="empty", random_state=0).fit(X)
    z = model.predict(X)
    assert adjusted_rand_score(dp.predict(X), z) == 1.0 and adjusted_rand_score(y, z) == 1.0
    assert model.n_clusters_ == dp.n_clusters_ == 5
    for cid, center in zip(model.cluster_ids_, model.cluster_centers_):
        np.testing.assert_allclose(center, X[z == cid].mean(axis=0), rtol=1e-10)  # running mean of all its points
    total = sum(((X[z == c] - m) ** 2).sum() for c, m in zip(model.cluster_ids_, model.cluster_centers_))
    assert total + 4.0 * model.n_clusters_ == pytest.approx(dp.objective_, rel=1e-10)


def test_iter_fit_gives_a_usable_model_after_every_batch_and_can_stop():
    X, _ = _blobs(600, seed=1)
    seen = []
    for m in AnytimeDPMeans(lam=4.0, batch_rows=100, random_state=2).iter_fit(X):
        seen.append((m.n_batches_, m.n_seen_, m.n_clusters_, m.cluster_centers_.shape))
        assert m.predict(X[:5]).shape == (5,)
        if m.n_clusters_ == 5:
            break
    assert seen[-1][2] == 5 and seen[-1][0] < 6
    assert [s[1] for s in seen] == [100 * (i + 1) for i in range(len(seen))]
    calls = []
    model = AnytimeDPMeans(lam=4.0, batch_rows=100, random_state=2).fit(X, callback=lambda m: calls.append(1) or
                                                                         len(calls) == 2)
    assert model.n_batches_ == 2 and len(model.history_["objective"]) == 2


def test_resume_after_save_equals_uninterrupted(tmp_path):
    X, _ = _blobs(900, seed=3)
    Xz = dclust.open_array(dclust.write_array(da.from_array(X.astype(np.float32), chunks=(100, 2)),
                                              tmp_path / "x.zarr"))
    full = AnytimeDPMeans(lam=4.0, random_state=5, n_restarts=2).fit(Xz)
    part = AnytimeDPMeans(lam=4.0, random_state=5, n_restarts=2).fit(Xz, callback=lambda m: m.n_batches_ == 4)
    dclust.save(part, tmp_path / "ckpt.zarr")
    resumed = dclust.load(tmp_path / "ckpt.zarr").fit(Xz, resume=True)
    assert resumed.n_batches_ == full.n_batches_ == 9
    np.testing.assert_array_equal(resumed.batch_order_, full.batch_order_)
    np.testing.assert_array_equal(resumed.cluster_ids_, full.cluster_ids_)
    np.testing.assert_array_equal(resumed.cluster_centers_, full.cluster_centers_)
    np.testing.assert_array_equal(resumed.labels_, full.labels_)
    assert resumed.history_["objective"] == full.history_["objective"]
    with pytest.raises(InvalidDataError, match="resume=False"):
        next(dclust.load(tmp_path / "ckpt.zarr").iter_fit(Xz[:500], resume=True))


def test_anytime_bad_parameters():
    with pytest.raises(InvalidParameterError, match="lam"):
        AnytimeDPMeans(lam=-1.0).fit(np.zeros((4, 2)))
    with pytest.raises(InvalidParameterError, match="batch_rows"):
        AnytimeDPMeans(lam=1.0, batch_rows=0).fit(np.zeros((4, 2)))


# ------------------------------------------------------------------------------------- consolidation (issue 15)


def _overlapping(n=6000, seed=0):
    """25 overlapping 3-D blobs (unit sd, centres in a 20-wide box): one plain read stays well above batch."""
    b = dclust.make_blobs(n, 3, centers=25, cluster_std=1.0, chunk_rows=n // 10, dtype="float64", random_state=seed,
                          return_labels=False)
    return b.X.compute()


def _objective(X, centers, lam):
    return float(((X[:, None, :] - centers[None]) ** 2).sum(-1).min(1).sum() + lam * len(centers))


def test_consolidate_is_weighted_dpmeans_and_never_raises_the_objective():
    from dclust.stream._consolidate import consolidate

    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 2)) + rng.integers(0, 3, size=(400, 1)) * 6.0
    fine = AnytimeDPMeans(lam=0.5, random_state=0, consolidate=False).fit(da.from_array(X, chunks=(100, 2)))
    lam = 8.0
    centers, weights, groups = consolidate(fine.cluster_centers_, fine.weights_, lam)
    assert weights.sum() == pytest.approx(len(X)) and groups.max() + 1 == len(centers)
    for g in range(len(centers)):  # every group centre is the weighted mean of its summaries
        m = groups == g
        np.testing.assert_allclose(centers[g], np.average(fine.cluster_centers_[m], axis=0, weights=fine.weights_[m]))
    # fixed point: no summary prefers another group (or a new one at cost lam) to its own
    cost = fine.weights_[:, None] * ((fine.cluster_centers_[:, None, :] - centers[None]) ** 2).sum(-1)
    own = cost[np.arange(len(groups)), groups]
    assert (own <= cost.min(axis=1) + 1e-9).all() and (own <= lam + 1e-9).all()
    assert _objective(X, centers, lam) <= _objective(X, fine.cluster_centers_, lam) + 1e-6


def test_one_read_with_fine_summaries_is_within_5_percent_of_batch_on_overlapping_blobs():
    X = _overlapping()
    lam = 30.0
    Xd = da.from_array(X, chunks=(600, 3))
    plain = AnytimeDPMeans(lam=lam, random_state=0).fit(Xd)
    fine = AnytimeDPMeans(lam=lam, random_state=0, summary_factor=0.25).fit(Xd)
    dp = dclust.DPMeans(lam=lam, init="empty", random_state=0, max_iter=300).fit(X)
    batch = dp.objective_
    assert _objective(X, plain.cluster_centers_, lam) > 1.05 * batch  # the defect of issue 15
    assert _objective(X, fine.cluster_centers_, lam) <= 1.05 * batch
    assert fine.n_batches_ == 10 and np.sum(fine.weights_) == pytest.approx(len(X))


def test_refine_pass_lowers_the_objective_and_records_it():
    X = _overlapping(3000, seed=1)
    lam = 30.0
    model = AnytimeDPMeans(lam=lam, random_state=0).fit(da.from_array(X, chunks=(500, 3)))
    before = _objective(X, model.cluster_centers_, lam)
    model.refine(X, n_passes=3)
    after = _objective(X, model.cluster_centers_, lam)
    assert model.objective_history_[0] == pytest.approx(before, rel=1e-9)
    assert after <= before + 1e-6 and 1 <= len(model.objective_history_) <= 3
    assert np.all(np.diff(model.objective_history_) <= 1e-6)
    with pytest.raises(InvalidParameterError, match="n_passes"):
        model.refine(X, n_passes=0)
    with pytest.raises(dclust.errors.NotFittedError):
        AnytimeDPMeans(lam=lam).refine(X)


def test_batches_are_read_on_the_driver_unless_the_cluster_holds_them(tmp_path, client):
    """A chunk of a store is read by the driver (no task on the cluster, no transfer of its rows); data persisted
    on the cluster is fetched from it; the model is the same either way and as without a cluster."""
    from distributed import get_task_stream

    from dclust.stream._dynamic import load_block

    X, _ = _blobs(4000, seed=3)
    path = str(tmp_path / "x.zarr")
    dclust.io.write_array(X, path, chunks=(1000, 2))
    Z = dclust.open_array(path)
    with get_task_stream(client) as local:
        Y, wn = load_block(Z.blocks[2], None)
        on_store = AnytimeDPMeans(lam=4.0, random_state=0).fit(Z)
    assert local.data == [] and wn is None
    np.testing.assert_array_equal(Y, X[2000:3000])
    P = Z.persist()
    with get_task_stream(client) as fetched:
        Y, _ = load_block(P.blocks[1], None)
        persisted = AnytimeDPMeans(lam=4.0, random_state=0).fit(P)
    assert len(fetched.data) >= 5  # one fetch per batch (and one for the block above)
    np.testing.assert_array_equal(Y, X[1000:2000])
    alone = AnytimeDPMeans(lam=4.0, random_state=0).fit(da.from_array(X, chunks=(1000, 2)))
    for model in (on_store, persisted):
        np.testing.assert_array_equal(model.cluster_centers_, alone.cluster_centers_)
        np.testing.assert_array_equal(model.weights_, alone.weights_)


def test_the_block_reader_runs_one_blocks_tasks_with_its_weights_and_checks_the_rows(tmp_path):
    """Each batch is read from the array's graph in the calling thread: the block (of a store, re-chunked too) and
    its weights, exactly; a row with NaN fails the fit with InvalidDataError naming it."""
    from dclust.stream._anytime import _BlockReader

    X, _ = _blobs(4000, seed=4)
    path = str(tmp_path / "x.zarr")
    dclust.io.write_array(X, path, chunks=(1000, 2))
    w = np.linspace(0.5, 2.0, 4000)
    Z, W = dclust.open_array(path), da.from_array(w, chunks=1000)
    read = _BlockReader(Z, W)
    for b in (3, 0):
        Y, wb = read(b)
        np.testing.assert_array_equal(Y, X[1000 * b: 1000 * (b + 1)])
        assert wb.dtype == np.float64 and np.array_equal(wb, w[1000 * b: 1000 * (b + 1)])
    R = Z.rechunk((2000, 2))  # batch_rows above the store's chunks: a batch is two chunks
    np.testing.assert_array_equal(_BlockReader(R, None)(1)[0], X[2000:])
    X[2017, 1] = np.nan
    with pytest.raises(InvalidDataError, match=r"X: .* chunk 2 \(rows 2000\.\.2999; first at row 2017\)\..* fit again"):
        AnytimeDPMeans(lam=4.0, batch_rows=1000, random_state=0).fit(da.from_array(X, chunks=(1000, 2)))


def test_batches_are_read_ahead_in_order_and_a_stop_reads_no_further():
    """The batches come out in the fit's order with their own rows, read up to _READ_AHEAD batches ahead; closing
    the stream after the first batch leaves at most the read already under way."""
    from dclust.stream._anytime import _READ_AHEAD, _prefetched

    X = np.arange(20 * 30, dtype=np.float64).reshape(-1, 2)  # 30 rows a batch, 10 batches
    arr = da.from_array(X, chunks=(30, 2))
    order = np.array([3, 1, 4, 0, 9, 2, 6, 5, 8, 7], dtype=np.int64)
    prepared = []
    stream = _prefetched(arr, None, order, 2, lambda j, loaded: prepared.append(j) or j)
    j, batch, wb, (Y, w), mark = next(stream)
    assert (j, mark, wb, w) == (2, 2, None, None)
    np.testing.assert_array_equal(Y, X[120:150])
    np.testing.assert_array_equal(batch.compute(), Y)
    stream.close()
    assert 2 in prepared and set(prepared) <= set(range(2, 3 + _READ_AHEAD))
    rest = list(_prefetched(arr, None, order, 8, lambda j, loaded: loaded[0][0, 0]))
    assert [(j, first) for j, _, _, _, first in rest] == [(8, X[240, 0]), (9, X[210, 0])]


def test_a_row_with_nan_outside_the_sample_of_a_large_batch_fails_the_fit_naming_it():
    """Batches read by the fit are checked by their labelling pass (two threads for a large batch), which sees every
    row: a NaN outside the sample fails the fit with the row named, whichever batch comes first."""
    from dclust.stream._anytime import _BlockReader

    X, _ = _blobs(280_000, seed=6)
    X[140_000 + 70_001, 0] = np.nan
    arr = da.from_array(X, chunks=(140_000, 2))
    assert np.isnan(_BlockReader(arr, None, check=False)(1)[0]).any()  # read as it is: the pass checks it
    for seed in (0, 1, 2):
        for kw in ({}, {"sample_rows": None}):
            with pytest.raises(InvalidDataError, match=r"chunk 1 \(rows 140000\.\.279999; first at row 210001\)"):
                AnytimeDPMeans(lam=4.0, sample_rows=kw.get("sample_rows", 500), random_state=seed,
                               max_iter=3).fit(arr)


@pytest.mark.parametrize("sample_rows", [4096, None])
@pytest.mark.parametrize("where", [0, 1, 2])
def test_a_nan_in_the_sample_of_any_batch_fails_the_fit_before_it_opens_a_cluster(sample_rows, where):
    """A batch whose keyed sample holds the NaN (a batch smaller than sample_rows: all of it) opens no cluster at
    NaN (no RuntimeWarning from the pass) and fails the fit naming the chunk and the row of X, whichever batch
    comes first; the batches before it stay in the model, which a partial_fit of clean rows continues."""
    X, _ = _blobs(3000, seed=7)
    row = 1000 * where + 321
    X[row, 1] = np.inf
    model = AnytimeDPMeans(lam=4.0, sample_rows=sample_rows, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "invalid value encountered" from a cluster opened at NaN
        with pytest.raises(InvalidDataError, match=rf"chunk {where} \(rows {1000 * where}\.\.{1000 * where + 999}; "
                                                   rf"first at row {row}\)"):
            model.fit(da.from_array(X, chunks=(1000, 2)))
    done = int(model.n_batches_)
    assert done == list(model.batch_order_).index(where)
    assert done == 0 or np.isfinite(model.cluster_centers_).all()
    model.partial_fit(X[1000 * ((where + 1) % 3): 1000 * ((where + 1) % 3) + 1000])
    assert model.n_batches_ == done + 1 and np.isfinite(model.cluster_centers_).all()


def _read_on_a_worker(path, block):
    """A block of the store at ``path``, readable only inside a worker process (as when the files are mounted on
    the cluster's side only): on the driver, FileNotFoundError."""
    from distributed import get_worker

    try:
        get_worker()
    except ValueError:
        raise FileNotFoundError(f"{path}: not mounted on the driver") from None
    return dclust.open_array(path).blocks[block].compute(scheduler="synchronous")


def test_a_store_the_driver_cannot_reach_is_read_by_the_workers(tmp_path, client):
    import dask

    X, _ = _blobs(4000, seed=3)
    path = str(tmp_path / "x.zarr")
    dclust.io.write_array(X, path, chunks=(1000, 2))
    W = da.concatenate([da.from_delayed(dask.delayed(_read_on_a_worker)(path, b), (1000, 2), X.dtype)
                        for b in range(4)])
    with pytest.raises(FileNotFoundError):
        W.blocks[0].compute(scheduler="threads")  # the driver really cannot read it
    from_workers = AnytimeDPMeans(lam=4.0, random_state=0).fit(W)
    alone = AnytimeDPMeans(lam=4.0, random_state=0).fit(da.from_array(X, chunks=(1000, 2)))
    np.testing.assert_array_equal(from_workers.cluster_centers_, alone.cluster_centers_)
    np.testing.assert_array_equal(from_workers.weights_, alone.weights_)
