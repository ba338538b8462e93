"""Any-time DP-means: DM4 (random disjoint batches == DP-means on separated blobs), early stop, resume, Zarr."""

import dask.array as da
import numpy as np
import pytest

import dclust
from dclust.errors import InvalidDataError, InvalidParameterError
from dclust.metrics import adjusted_rand_score
from dclust.stream import AnytimeDPMeans


def _blobs(n=2000, seed=0):
    """Blobs whose squared diameter (< 2) is below lam = 4 and whose points are > 2 sqrt(lam) apart (DP5)."""
    centres = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0], [10.0, 10.0], [20.0, 5.0]])
    rng = np.random.default_rng(seed)
    y = rng.integers(0, len(centres), size=n)
    return centres[y] + rng.uniform(-0.45, 0.45, size=(n, 2)), y


def test_dm4_anytime_equals_dpmeans_on_separated_blobs():
    X, y = _blobs()
    model = AnytimeDPMeans(lam=4.0, random_state=0).fit(da.from_array(X, chunks=(150, 2)))
    assert model.n_batches_ == 14 and model.n_seen_ == len(X)
    assert sorted(model.batch_order_.tolist()) == list(range(14)) and model.batch_order_.tolist() != list(range(14))
    dp = dclust.DPMeans(lam=4.0, init="empty", random_state=0).fit(X)
    z = model.predict(X)
    assert adjusted_rand_score(dp.predict(X), z) == 1.0 and adjusted_rand_score(y, z) == 1.0
    assert model.n_clusters_ == dp.n_clusters_ == 5
    for cid, centre in zip(model.cluster_ids_, model.cluster_centers_):
        np.testing.assert_allclose(centre, X[z == cid].mean(axis=0), rtol=1e-10)  # running mean of all its points
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
