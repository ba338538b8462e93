"""dclust.metrics: agreement with scikit-learn, numpy == dask, hand-computed cases, properties, errors."""

from __future__ import annotations

import doctest
import math

import dask
import dask.array as da
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn import metrics as skm
from sklearn.metrics.cluster import contingency_matrix

import dclust.metrics as dm
from dclust.errors import InvalidDataError, InvalidParameterError
from dclust.metrics import _contingency, _scores

LABEL_SCORES = [
    dm.rand_score,
    dm.adjusted_rand_score,
    dm.normalized_mutual_info_score,
    dm.pairwise_f_measure,
    dm.pairwise_precision_recall,
    dm.purity_score,
    dm.matched_accuracy,
]


@pytest.fixture(autouse=True, scope="module")
def _sync_scheduler():
    with dask.config.set(scheduler="synchronous"):
        yield


def _labels(rng, n, k, kind):
    y = rng.integers(0, k, size=n)
    if kind == "negative":
        return y - k // 2 - 1  # includes -1 (an ordinary label)
    if kind == "sparse":  # labels spread over int64: the sort-based path of the kernel
        values = rng.permutation(k).astype(np.int64) * (2**62 // k) - 2**61
        return values[y]
    return y


CASES = [
    (n, kt, kp, kind, seed)
    for seed, (n, kt, kp) in enumerate([(2, 2, 2), (10, 3, 4), (200, 5, 5), (200, 1, 7), (3000, 12, 40),
                                        (3000, 50, 3), (50, 50, 50), (1000, 2, 2)])
    for kind in ("plain", "negative", "sparse")
]


# ---------------------------------------------------------------------------------------------------------------
# scikit-learn agreement
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n,kt,kp,kind,seed", CASES)
def test_matches_sklearn_on_random_labelings(n, kt, kp, kind, seed):
    rng = np.random.default_rng(seed)
    yt, yp = _labels(rng, n, kt, kind), _labels(rng, n, kp, kind)
    t, p, counts = dm.contingency_table(yt, yp)
    np.testing.assert_array_equal(t, np.unique(yt))
    np.testing.assert_array_equal(p, np.unique(yp))
    np.testing.assert_array_equal(counts, contingency_matrix(yt, yp))
    assert counts.dtype == np.int64
    for ours, theirs in [(dm.rand_score, skm.rand_score), (dm.adjusted_rand_score, skm.adjusted_rand_score),
                         (dm.normalized_mutual_info_score, skm.normalized_mutual_info_score)]:
        np.testing.assert_allclose(ours(yt, yp), theirs(yt, yp), rtol=1e-12, atol=0)
        assert isinstance(ours(yt, yp), float)


DEGENERATE = {
    "one cluster each": (np.zeros(9, int), np.full(9, 4)),
    "singletons each": (np.arange(9), np.arange(9)[::-1] + 100),
    "one vs singletons": (np.zeros(9, int), np.arange(9)),
    "singletons vs one": (np.arange(9), np.zeros(9, int)),
    "N = 1": (np.array([3]), np.array([-1])),
    "N = 2 split vs joined": (np.array([0, 1]), np.array([0, 0])),
    "identical": (np.array([0, 0, 1, 2, 2, 2]), np.array([7, 7, 5, 6, 6, 6])),
    "independent": (np.array([0, 0, 1, 1]), np.array([0, 1, 0, 1])),
}


@pytest.mark.parametrize("case", list(DEGENERATE))
def test_degenerate_cases_match_sklearn(case):
    yt, yp = DEGENERATE[case]
    assert dm.rand_score(yt, yp) == skm.rand_score(yt, yp)
    assert dm.adjusted_rand_score(yt, yp) == skm.adjusted_rand_score(yt, yp)
    assert dm.normalized_mutual_info_score(yt, yp) == skm.normalized_mutual_info_score(yt, yp)
    np.testing.assert_array_equal(dm.contingency_table(yt, yp)[2], contingency_matrix(yt, yp))


def test_degenerate_values_from_the_spec():
    one, single = np.zeros(5, int), np.arange(5)
    assert dm.adjusted_rand_score(one, one) == 1.0
    assert dm.adjusted_rand_score(single, single) == 1.0
    assert dm.adjusted_rand_score(one, single) == 0.0
    assert dm.normalized_mutual_info_score(one, one) == 1.0
    assert dm.normalized_mutual_info_score(one, single) == 0.0
    assert dm.rand_score([4], [2]) == 1.0
    assert dm.adjusted_rand_score([4], [2]) == 1.0
    assert dm.normalized_mutual_info_score([4], [2]) == 1.0
    assert dm.pairwise_f_measure(single, single) == 0.0  # TP = 0
    assert dm.pairwise_precision_recall(single, one) == (0.0, 0.0)
    assert dm.purity_score([4], [2]) == 1.0 and dm.matched_accuracy([4], [2]) == 1.0


def test_large_n_pair_counts_are_exact_beyond_int64():
    # N > 3e9 uses Python integers; check the helper directly against exact arithmetic.
    x = np.array([4_000_000_000, 3, 1], dtype=np.int64)
    n = int(x.sum())
    assert _scores._c2_sum(x, n) == sum(v * (v - 1) // 2 for v in map(int, x))
    assert _scores._c2_sum(x[1:], 4) == 3


# ---------------------------------------------------------------------------------------------------------------
# numpy == dask, across chunkings and tree shapes
# ---------------------------------------------------------------------------------------------------------------


def _all_scores(yt, yp, **kw):
    out = [f(yt, yp, **kw) for f in LABEL_SCORES]
    out.append(dm.confidence_weighted_accuracy(yt, yp, _conf(yt), **kw))
    t, p, c = dm.contingency_table(yt, yp, **kw)
    return out, (t, p, c)


def _conf(y):
    n = y.shape[0]
    w = (np.arange(n) % 7) / 6.0
    return da.from_array(w, chunks=y.chunks) if isinstance(y, da.Array) else w


def _numpy_and_dask_labels(n=200, seed=11):
    rng = np.random.default_rng(seed)
    yt = rng.integers(-1, 6, n)
    yp = np.where(rng.random(n) < 0.7, yt * 3, rng.integers(0, 30, n))
    return yt, yp


# (chunks, split_every); one-row blocks make a deep tree. (Dask costs ~2 ms per block, so n stays small.)
TREES = [(1, 2), (1, None), (7, 3), (7, 8), (64, 2), (64, None), (199, 2), (200, None), ((100, 0, 60, 40), 2),
         ((100, 0, 60, 40), 3)]


@pytest.mark.parametrize("chunks,split_every", TREES)
def test_dask_contingency_equals_numpy(chunks, split_every):
    yt, yp = _numpy_and_dask_labels()
    ref = dm.contingency_table(yt, yp)
    got = dm.contingency_table(da.from_array(yt, chunks=chunks), da.from_array(yp, chunks=chunks),
                               split_every=split_every)
    for a, b in zip(got, ref):
        np.testing.assert_array_equal(a, b)
        assert a.dtype == b.dtype


@pytest.mark.parametrize("chunks,split_every", [(7, 3), ((100, 0, 60, 40), 2), (200, None)])
def test_dask_scores_equal_numpy(chunks, split_every):
    yt, yp = _numpy_and_dask_labels()
    ref, _ = _all_scores(yt, yp)
    got, _ = _all_scores(da.from_array(yt, chunks=chunks), da.from_array(yp, chunks=chunks),
                         split_every=split_every)
    assert got[:-1] == ref[:-1]  # integer tables: bit-identical scores
    np.testing.assert_allclose(got[-1], ref[-1], rtol=1e-12)  # float weights: summation order differs


def test_mixed_and_misaligned_inputs():
    rng = np.random.default_rng(5)
    yt = rng.integers(0, 4, 500)
    yp = rng.integers(0, 6, 500)
    ref = [f(yt, yp) for f in LABEL_SCORES]
    variants = [
        (da.from_array(yt, chunks=100), yp),  # dask + numpy
        (yt.tolist(), da.from_array(yp, chunks=33)),  # list + dask
        (da.from_array(yt, chunks=100), da.from_array(yp, chunks=37)),  # different chunks: y_pred rechunked
        (da.from_array(yt.astype(np.int8), chunks=50), da.from_array(yp.astype(np.uint16), chunks=50)),
    ]
    for a, b in variants:
        assert [f(a, b, split_every=4) for f in LABEL_SCORES] == ref


def test_weighted_contingency_numpy_and_dask():
    yt = np.array([0, 0, 1, 1, 1, -1])
    yp = np.array([2, 3, 3, 3, 2, 2])
    w = np.array([0.5, 1.0, 2.0, 0.25, 0.0, 4.0])
    t, p, c = dm.contingency_table(yt, yp, sample_weight=w)
    assert c.dtype == np.float64
    np.testing.assert_array_equal(t, [-1, 0, 1])
    np.testing.assert_array_equal(p, [2, 3])
    np.testing.assert_array_equal(c, [[4.0, 0.0], [0.5, 1.0], [0.0, 2.25]])
    for chunks in (1, 2, 4):
        cd = dm.contingency_table(da.from_array(yt, chunks=chunks), yp, sample_weight=w, split_every=2)[2]
        np.testing.assert_allclose(cd, c, rtol=1e-12)


def test_dask_reduction_is_a_tree_of_the_requested_fan_in():
    y = da.from_array(np.arange(64) % 5, chunks=1)  # 64 blocks
    table = _contingency.compute_table(y, y, split_every=4)
    assert table.total == 64
    from dclust._dask.passes import map_partials
    from dclust._dask.reduce import tree_reduce

    parts = map_partials(_contingency._block_cells, y[:, None], y, None)
    graph = tree_reduce(parts, _contingency._merge_cells, split_every=4).__dask_graph__()
    layers = [k for k in graph.layers if "tree-reduce" in k]
    assert len(layers) >= 3  # 64 -> 16 -> 4 -> 1: a tree, not one 64-way merge


def test_works_on_a_distributed_cluster():
    from distributed import Client, LocalCluster

    rng = np.random.default_rng(2)
    yt, yp = rng.integers(0, 5, 2000), rng.integers(0, 5, 2000)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            Client(cluster) as client, dask.config.set(scheduler=client):
        got = dm.adjusted_rand_score(da.from_array(yt, chunks=300), da.from_array(yp, chunks=300), split_every=2)
        with pytest.raises(InvalidDataError, match="row block 1"):
            dm.confidence_weighted_accuracy(da.from_array(yt, chunks=1000), yp, np.r_[np.ones(1999), 2.0])
    assert got == skm.adjusted_rand_score(yt, yp)


# ---------------------------------------------------------------------------------------------------------------
# hand-computed toy cases
# ---------------------------------------------------------------------------------------------------------------


def test_pairwise_precision_recall_f_by_hand():
    yt = [0, 0, 0, 1, 1]  # P_true = 3 + 1 = 4
    yp = [0, 0, 1, 1, 1]  # P_pred = 1 + 3 = 4; TP = C2(2) + C2(1) + C2(2) = 2
    assert dm.pairwise_precision_recall(yt, yp) == (0.5, 0.5)
    assert dm.pairwise_f_measure(yt, yp) == 0.5
    # P = 1/2, R = 1/3: F = 2PR/(P+R) = 0.4
    assert dm.pairwise_precision_recall([0, 0, 0, 1], [0, 0, 1, 1]) == (0.5, 1 / 3)
    assert dm.pairwise_f_measure([0, 0, 0, 1], [0, 0, 1, 1]) == pytest.approx(0.4, rel=1e-15)


def test_purity_by_hand():
    # cluster 7: classes {0: 3, 1: 1}; cluster 8: {1: 1, 2: 2}; cluster 9: {2: 2}  -> (3 + 2 + 2) / 9
    yt = [0, 0, 0, 1, 1, 2, 2, 2, 2]
    yp = [7, 7, 7, 7, 8, 8, 8, 9, 9]
    assert dm.purity_score(yt, yp) == 7 / 9
    assert dm.purity_score([0, 0, 1, 1, 1], [0, 0, 0, 1, 1]) == 0.8


def test_matched_accuracy_rectangular_by_hand():
    # 3 classes, 2 clusters: rows 0: (4: 2, 9: 1); 1: (9: 2); 2: (9: 1) -> 0->4, 1->9: 4 of 6
    assert dm.matched_accuracy([0, 0, 0, 1, 1, 2], [4, 4, 9, 9, 9, 9]) == 4 / 6
    # 2 classes, 4 clusters: row 0: (0: 1, 1: 1, 2: 2); row 1: (3: 2) -> 2 + 2 of 6
    assert dm.matched_accuracy([0, 0, 0, 0, 1, 1], [0, 1, 2, 2, 3, 3]) == 4 / 6
    # rows 0: (5: 3, 6: 2); 1: (5: 3). Greedy takes 0->5 and leaves class 1 unmatched (3 of 8);
    # the optimum is 0->6 (2) + 1->5 (3) = 5 of 8
    yt, yp = [0, 0, 0, 0, 0, 1, 1, 1], [5, 5, 5, 6, 6, 5, 5, 5]
    assert dm.matched_accuracy(yt, yp) == 5 / 8
    assert dm.matched_accuracy([1, 1, 2], [0, 0, 0]) == 2 / 3


def test_confidence_weighted_accuracy_by_hand():
    yt = [0, 0, 1, 1, 9]
    yp = [5, 5, 5, 6, 6]
    w = [1.0, 0.5, 0.25, 1.0, 0.0]  # the unlabelled sample (class 9) has weight 0
    # weighted table: (0, 5) 1.5; (1, 5) 0.25; (1, 6) 1.0; (9, 6) 0 -> match 0->5, 1->6: 2.5 / 2.75
    assert dm.confidence_weighted_accuracy(yt, yp, w) == pytest.approx(2.5 / 2.75, rel=1e-15)
    assert math.isnan(dm.confidence_weighted_accuracy(yt, yp, np.zeros(5)))
    assert dm.confidence_weighted_accuracy(yt, yp, np.ones(5)) == dm.matched_accuracy(yt, yp)
    with pytest.raises(InvalidDataError, match=r"confidence: expected finite values in \[0, 1\]"):
        dm.confidence_weighted_accuracy(yt, yp, [1.0, 1.5, 0, 0, 0])
    with pytest.raises(InvalidDataError, match="confidence"):
        dm.confidence_weighted_accuracy(yt, yp, [1.0, np.nan, 0, 0, 0])
    with pytest.raises(InvalidDataError, match=r"confidence \(row block 2, rows 4..4\)"):
        dm.confidence_weighted_accuracy(da.from_array(np.array(yt), chunks=2), yp, [1, 1, 1, 1, -0.5])
    with pytest.raises(InvalidDataError, match="same length"):
        dm.confidence_weighted_accuracy(yt, yp, [1.0, 1.0])


def test_tracking_accuracy_first_mapping_wins():
    steps = [
        ([0, 0, 1, 1], [10, 10, 11, 11]),  # M = {0: 10, 1: 11}; 4 correct
        ([0, 0, 1, 1], [11, 11, 10, 10]),  # matching 0->11, 1->10 contradicts M: 0 correct
        ([0, 0, 1, 1], [10, 10, 11, 11]),  # consistent again: 4 correct
    ]
    assert dm.tracking_accuracy(steps) == 8 / 12
    assert dm.tracking_accuracy(steps, tracked=False) == 1.0
    assert dm.tracking_accuracy(iter(steps)) == 8 / 12  # a one-shot iterator works


def test_tracking_accuracy_revived_and_taken_ids():
    steps = [
        ([0, 0, 1], [5, 5, 6]),  # M = {0: 5, 1: 6}: 3
        ([0, 0], [5, 5]),  # class 1 and cluster 6 absent: 2
        ([1, 1, 0], [6, 6, 5]),  # cluster 6 revived with its id: still mapped, 3
    ]
    assert dm.tracking_accuracy(steps) == 1.0
    steps = [
        ([0, 0, 1], [5, 5, 6]),  # M = {0: 5, 1: 6}: 3
        ([2, 2], [6, 6]),  # 6 is the image of class 1: no mapping for 2, 0 correct
        ([2, 2, 1], [7, 7, 6]),  # 2 -> 7 established now; 1 -> 6 consistent: 3
    ]
    assert dm.tracking_accuracy(steps) == 6 / 8
    assert dm.tracking_accuracy(steps, tracked=False) == 1.0
    # per-step matching is optimal, not greedy, and labels may be dask arrays
    dsteps = [(da.from_array(np.array(a), chunks=2), da.from_array(np.array(b), chunks=1)) for a, b in steps]
    assert dm.tracking_accuracy(dsteps, split_every=2) == 6 / 8


def test_tracking_accuracy_errors():
    with pytest.raises(InvalidDataError, match="at least one time step"):
        dm.tracking_accuracy([])
    with pytest.raises(InvalidDataError, match=r"steps\[1\]: y_pred"):
        dm.tracking_accuracy([([0], [0]), ([0, 1], [])])
    with pytest.raises(InvalidDataError, match=r"steps\[0\]"):
        dm.tracking_accuracy([[0, 1, 2]])
    with pytest.raises(InvalidParameterError):
        dm.tracking_accuracy([([0], [0])], tracked="yes")


def _toy_video():
    o = np.zeros((4, 2, 2), np.uint8)
    o[1:3] = 10  # O_1 - O_0 = 10, O_2 - O_1 = 0 (NaN frame), O_3 - O_2 = -10
    q = np.zeros((4, 2, 2), np.uint8)
    q[1] = [[5, 15], [5, 15]]  # mean |Q_1 - Q_0| = 10  -> f = 1
    q[2] = 255  # denominator 0 -> NaN
    q[3] = [[250, 255], [245, 255]]  # |diffs| 5, 0, 10, 0 -> 3.75 / 10 (uint8 would wrap)
    return q, o


def test_flicker_by_hand():
    q, o = _toy_video()
    expected = np.array([1.0, np.nan, 0.375])
    np.testing.assert_array_equal(dm.flicker(q, o), expected)
    np.testing.assert_array_equal(dm.flicker(list(q), (f for f in o)), expected)  # streamed frames
    for chunks in (1, 2, 3):
        np.testing.assert_allclose(dm.flicker(da.from_array(q, chunks=(chunks, 1, 2)), o), expected, rtol=1e-12)
    # summary: NaN frame skipped; median of |1 - 1| and |0.375 - 1| = 0.3125
    assert dm.flicker_summary(dm.flicker(q, o)) == 0.3125
    assert dm.flicker_summary([0.5, np.nan, 1.25, 1.0, np.inf]) == 0.25
    assert math.isnan(dm.flicker_summary([np.nan]))
    # the original video against itself has flicker exactly 1
    assert dm.flicker_summary(dm.flicker(o, o)) == 0.0


def test_flicker_errors():
    q, o = _toy_video()
    with pytest.raises(InvalidDataError, match="at least 2 frames"):
        dm.flicker(q[:1], o[:1])
    with pytest.raises(InvalidDataError, match="original_frames ended after 3 frames"):
        dm.flicker(q, o[:3])
    with pytest.raises(InvalidDataError, match=r"original_frames\[0\]"):
        dm.flicker(q, o[:, :1])
    with pytest.raises(InvalidDataError, match="shapes"):
        dm.flicker(da.from_array(q), o[:3])
    with pytest.raises(InvalidDataError, match="1-D"):
        dm.flicker_summary(np.ones((2, 2)))


# ---------------------------------------------------------------------------------------------------------------
# input validation
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fn", LABEL_SCORES + [dm.contingency_table])
def test_invalid_labels(fn):
    with pytest.raises(InvalidDataError,
                       match=r"labels: expected arrays of the same length.*y_true has 3, y_pred has 2"):
        fn([0, 1, 2], [0, 1])
    with pytest.raises(InvalidDataError, match=r"y_true: expected a 1-D array.*received shape \(3, 1\).*ravel"):
        fn(np.zeros((3, 1), int), [0, 1, 2])
    with pytest.raises(InvalidDataError, match="y_pred: expected a 1-D array"):
        fn([0], 5)
    with pytest.raises(InvalidDataError, match="y_true: expected at least one label; received an empty array"):
        fn([], [])
    with pytest.raises(InvalidDataError, match="integer labels; received dtype float64"):
        fn([0.0, 1.0], [0, 1])
    with pytest.raises(InvalidDataError, match="same length"):
        fn(da.arange(4, chunks=2), da.arange(5, chunks=2))
    y = da.arange(6, chunks=2)
    with pytest.raises(InvalidDataError, match="compute_chunk_sizes"):
        fn(y[y > 2], [0, 1, 2])
    with pytest.raises(InvalidParameterError, match="split_every"):
        fn([0, 1], [0, 1], split_every=1)


def test_errors_are_value_errors_with_expected_received_fix():
    with pytest.raises(ValueError) as info:
        dm.adjusted_rand_score([0, 1, 2], [0, 1])
    text = str(info.value)
    assert "expected" in text and "received" in text and text.rstrip().endswith(".")


# ---------------------------------------------------------------------------------------------------------------
# properties
# ---------------------------------------------------------------------------------------------------------------

pairs = st.integers(1, 80).flatmap(
    lambda n: st.tuples(st.lists(st.integers(-3, 6), min_size=n, max_size=n),
                        st.lists(st.integers(-2, 9), min_size=n, max_size=n))
)


def _relabel(y, seed):
    """A bijective relabelling of y's values (permutation plus a shift and sign flip)."""
    u = np.unique(y)
    perm = np.random.default_rng(seed).permutation(u.size)
    return -(np.asarray(u[perm], np.int64) * 7 + 3)[np.searchsorted(u, y)]


@settings(max_examples=40, deadline=None)
@given(pairs, st.integers(0, 2**32 - 1))
def test_scores_invariant_to_label_permutation(yy, seed):
    yt, yp = np.array(yy[0]), np.array(yy[1])
    rt, rp = _relabel(yt, seed), _relabel(yp, seed + 1)
    for f in LABEL_SCORES:
        a, b = f(yt, yp), f(rt, rp)
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-15)
    _, _, c = dm.contingency_table(yt, yp)
    assert c.sum() == yt.size and (c.sum(axis=1) > 0).all() and (c.sum(axis=0) > 0).all()
    assert dm.adjusted_rand_score(yt, yp) == dm.adjusted_rand_score(yp, yt)  # symmetric
    assert dm.normalized_mutual_info_score(yt, yp) == pytest.approx(dm.normalized_mutual_info_score(yp, yt),
                                                                     rel=1e-12, abs=1e-15)


@settings(max_examples=40, deadline=None)
@given(pairs, st.data())
def test_chunking_invariance(yy, data):
    yt, yp = np.array(yy[0]), np.array(yy[1])
    n = yt.size
    cuts = sorted(data.draw(st.lists(st.integers(0, n), max_size=6)))
    chunks = tuple(np.diff([0, *cuts, n]).tolist())
    s = data.draw(st.integers(2, 5))
    ref = dm.contingency_table(yt, yp)
    got = dm.contingency_table(da.from_array(yt, chunks=(chunks,)), yp, split_every=s)
    for a, b in zip(got, ref):
        np.testing.assert_array_equal(a, b)


@settings(max_examples=40, deadline=None)
@given(st.lists(pairs, min_size=1, max_size=3), st.permutations(range(3)))
def test_merge_is_associative_and_commutative(parts, order):
    cells = [_contingency._block_cells(np.array(a), np.array(b), offset=0, block_index=0) for a, b in parts]
    cells = [cells[i] for i in order if i < len(cells)]
    merged = _contingency._merge_cells(cells)
    left = _contingency._merge_cells([_contingency._merge_cells(cells[:1]), _contingency._merge_cells(cells[1:])]) \
        if len(cells) > 1 else merged
    direct = _contingency._block_cells(np.concatenate([c.true.repeat(c.values) for c in cells]),
                                       np.concatenate([c.pred.repeat(c.values) for c in cells]),
                                       offset=0, block_index=0)
    for x, y, z in zip(merged, left, direct):
        np.testing.assert_array_equal(x, y)
        np.testing.assert_array_equal(x, z)


@settings(max_examples=40, deadline=None)
@given(st.lists(pairs, min_size=1, max_size=5))
def test_tracked_never_above_untracked(steps):
    steps = [(np.array(a), np.array(b)) for a, b in steps]
    tracked = dm.tracking_accuracy(steps)
    untracked = dm.tracking_accuracy(steps, tracked=False)
    assert 0.0 <= tracked <= untracked <= 1.0
    per_step = sum(dm.matched_accuracy(a, b) * a.size for a, b in steps) / sum(a.size for a, _ in steps)
    assert untracked == pytest.approx(per_step, rel=1e-12)


# ---------------------------------------------------------------------------------------------------------------
# docs
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("module", [dm, _contingency, _scores])
def test_docstring_examples(module):
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0


def test_public_names():
    assert sorted(dm.__all__) == sorted(n for n in dir(dm) if not n.startswith("_"))
