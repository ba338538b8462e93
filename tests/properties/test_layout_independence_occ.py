"""Results independent of layout for every OCC estimator (ARCHITECTURE rule 12, issue 14 item 3): the same data
and ``random_state`` give the same model -- K, centres up to summation rounding (rtol 1e-10), labels exactly --
for any row chunking (odd ones and 1-row chunks included) and any number of workers, because the one keyed OCC
engine orders rows by a function of the seed and the global row index alone. ``serial_order_`` stays the oracle
and does not move with the chunking either.
"""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dclust
from dclust import AnytimeDPMeans, BPMeans, DynamicMeans, RDPMeans
from dclust.constraints import ConstraintGraph
from dclust.kernels.bpmeans import bpmeans_reference
from dclust.kernels.rdpmeans import rdpmeans_reference

pytestmark = [pytest.mark.timeout(600), pytest.mark.filterwarnings("ignore::dclust.errors.ConvergenceWarning")]

N = 240


@pytest.fixture(scope="module")
def data():
    """Overlapping blobs (many proposals and epochs: where the order matters most), their labels, must/cannot
    links, and latent-feature data for BP-means."""
    rng = np.random.default_rng(0)
    centers = np.array([[0.0, 0.0], [3.5, 0.0], [0.0, 3.5]])
    y = np.repeat([0, 1, 2], N // 3)
    X = centers[y] + rng.normal(size=(N, 2))
    A = np.array([[3.0, 0.0, 0.0], [0.0, 3.0, 0.0], [0.0, 0.0, 3.0]])
    F = rng.integers(0, 2, size=(N, 3)) @ A + 0.4 * rng.normal(size=(N, 3))
    return X, y, ConstraintGraph.from_labels_sample(y, 0.05, rng=0), F


def _chunks(cuts, n=N):
    """Row chunks from cut points (duplicates and neighbours give 1-row chunks)."""
    edges = sorted({0, n, *[c % n for c in cuts]})
    return tuple(b - a for a, b in zip(edges[:-1], edges[1:]) if b > a)


CHUNKINGS = st.one_of(
    st.lists(st.integers(1, N - 1), min_size=0, max_size=14).map(_chunks),
    st.just((1,) * 7 + (N - 7,)),  # 1-row chunks
    st.just((N // 2 - 1, 1, 1, N // 2 - 1)),
)


def _dp(X, chunks):
    return dclust.DPMeans(lam=6.0, random_state=3, prefix_size=10, max_proposals=3, max_iter=30).fit(
        da.from_array(X, chunks=(chunks, -1)))


def _rdp(X, G, chunks):
    Xd = da.from_array(X, chunks=(chunks, -1))
    return RDPMeans(lam=6.0, random_state=3, prefix_size=10, max_proposals=3, max_iter=12).fit(
        Xd, constraints=G.rechunk(Xd.chunks[0]))


def _bp(F, chunks):
    return BPMeans(lam=4.0, init="empty", random_state=3, prefix_size=10, max_proposals=3, max_iter=8).fit(
        da.from_array(F, chunks=(chunks, -1)))


def _same_centroids(a, b, X):
    assert a.n_clusters_ == b.n_clusters_ and a.n_iter_ == b.n_iter_
    np.testing.assert_allclose(a.cluster_centers_, b.cluster_centers_, rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(np.asarray(a.predict(X)), np.asarray(b.predict(X)))


def _same_rdp(a, b, X):
    _same_centroids(a, b, X)
    np.testing.assert_array_equal(np.asarray(a.labels_), np.asarray(b.labels_))
    assert a.objective_ == pytest.approx(b.objective_, rel=1e-10)


def _same_bp(a, b):
    assert a.n_latent_features_ == b.n_latent_features_ and a.n_iter_ == b.n_iter_
    np.testing.assert_allclose(a.features_, b.features_, rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(np.asarray(a.allocation_), np.asarray(b.allocation_))


def _same_orders(a, b):
    assert [o.tolist() for o in a.serial_order_] == [o.tolist() for o in b.serial_order_]


@pytest.fixture(scope="module")
def references(data):
    X, _, G, F = data
    return _dp(X, N), _rdp(X, G, N), _bp(F, N)


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(chunks=CHUNKINGS)
def test_dpmeans_rdpmeans_bpmeans_same_model_for_any_chunking(data, references, chunks):
    X, _, G, F = data
    dp, rdp, bp = references
    other = _dp(X, chunks)
    _same_centroids(dp, other, X)
    _same_orders(dp, other)
    other = _rdp(X, G, chunks)
    _same_rdp(rdp, other, X)
    _same_orders(rdp, other)
    other = _bp(F, chunks)
    _same_bp(bp, other)
    _same_orders(bp, other)


def test_the_serial_orders_are_the_oracles_for_an_odd_chunking(data, references):
    X, _, G, F = data
    rdp = _rdp(X, G, (1, 50, 1, 77, 111))
    a, b, s = G.pairs()
    z, C, h = rdpmeans_reference(X, a, b, s * G.weights(), rdp.lam_, rdp.serial_order_, max_iter=12)
    np.testing.assert_array_equal(np.asarray(rdp.labels_), z)
    np.testing.assert_allclose(rdp.cluster_centers_, C, rtol=1e-10, atol=1e-12)
    bp = _bp(F, (1, 50, 1, 77, 111))
    Zr, Ar, hr = bpmeans_reference(F, 4.0, bp.serial_order_, max_iter=8)
    np.testing.assert_array_equal(np.asarray(bp.allocation_), Zr)
    np.testing.assert_allclose(bp.features_, Ar, rtol=1e-9, atol=1e-12)
    assert references[1].n_iter_ > 1 and sum(map(sum, bp.proposals_per_epoch_)) > 0  # a real OCC run


def _stream_fit(batches, chunks):
    dm = DynamicMeans(lam=9.0, T_Q=4, k_tau=1.5, random_state=5, prefix_size=10, max_proposals=3)
    for t, batch in enumerate(batches):
        c = chunks[t % len(chunks)]
        dm.partial_fit(batch if c is None else da.from_array(batch, chunks=(c, -1)))
    return dm


@settings(max_examples=4, deadline=None)
@given(chunks=st.lists(st.one_of(st.none(), st.integers(1, 90)), min_size=1, max_size=3))
def test_dynamic_means_same_model_for_any_chunking_of_the_same_batches(chunks):
    rng = np.random.default_rng(1)
    centers = np.array([[0.0, 0.0], [6.0, 0.0], [0.0, 6.0]])
    batches = [centers[rng.integers(0, 3, 90)] + t * 0.3 + rng.normal(size=(90, 2)) for t in range(3)]
    a, b = _stream_fit(batches, [None]), _stream_fit(batches, chunks)
    np.testing.assert_array_equal(a.cluster_ids_, b.cluster_ids_)
    np.testing.assert_allclose(a.cluster_centers_, b.cluster_centers_, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(a.weights_, b.weights_, rtol=1e-10)
    np.testing.assert_array_equal(np.asarray(a.labels_), np.asarray(b.labels_))
    assert a.history_["births"] == b.history_["births"]
    _same_orders(a, b)


def _anytime(X, store_rows, tmp_path):
    path = tmp_path / f"x{store_rows}.zarr"
    if not path.exists():
        dclust.write_array(da.from_array(X, chunks=(store_rows, -1)), path)
    return AnytimeDPMeans(lam=6.0, batch_rows=60, random_state=2).fit(dclust.open_array(path))


def test_anytime_dpmeans_same_model_for_any_store_chunking(data, tmp_path):
    X = data[0]
    ref = _anytime(X, 60, tmp_path)
    for rows in (1, 7, 240):
        other = _anytime(X, rows, tmp_path)
        np.testing.assert_array_equal(ref.cluster_ids_, other.cluster_ids_)
        np.testing.assert_allclose(ref.cluster_centers_, other.cluster_centers_, rtol=1e-10, atol=1e-12)
        np.testing.assert_array_equal(ref.predict(X), other.predict(X))
        np.testing.assert_array_equal(ref.batch_order_, other.batch_order_)


def test_one_and_two_worker_processes_give_the_same_models(data, tmp_path):
    """A real ``distributed.LocalCluster`` of worker processes, 1 and 2 workers, data read from a Zarr store."""
    from distributed import Client, LocalCluster

    X, _, G, F = data
    xs = dclust.write_array(da.from_array(X, chunks=(37, -1)), tmp_path / "x.zarr")
    fs = dclust.write_array(da.from_array(F, chunks=(37, -1)), tmp_path / "f.zarr")
    occ = dict(random_state=3, prefix_size=10, max_proposals=16)
    models = []
    for n_workers in (1, 2):
        with LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True, dashboard_address=":0",
                          host="127.0.0.1") as cluster, Client(cluster):
            Xs, Fs = dclust.open_array(xs), dclust.open_array(fs)
            rdp = RDPMeans(lam=6.0, max_iter=5, **occ).fit(Xs, constraints=G.rechunk(Xs.chunks[0]))
            rdp.labels_ = np.asarray(rdp.labels_)  # computed while the cluster is up
            bp = BPMeans(lam=4.0, init="empty", max_iter=4, **occ).fit(Fs)
            bp.allocation_ = np.asarray(bp.allocation_)
            models.append((dclust.DPMeans(lam=6.0, max_iter=10, **occ).fit(Xs), rdp, bp,
                           AnytimeDPMeans(lam=6.0, batch_rows=60, random_state=2).fit(Xs)))
    (dp1, rdp1, bp1, any1), (dp2, rdp2, bp2, any2) = models
    _same_centroids(dp1, dp2, X)
    _same_rdp(rdp1, rdp2, X)
    _same_bp(bp1, bp2)
    np.testing.assert_allclose(any1.cluster_centers_, any2.cluster_centers_, rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(any1.cluster_ids_, any2.cluster_ids_)
