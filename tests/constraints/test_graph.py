"""ConstraintGraph: canonical pairs, block-sparse layout aligned to row chunks, Zarr persistence, feasibility."""

from __future__ import annotations

import os

import numpy as np
import pytest
import zarr

from dclust.constraints import ConstraintGraph, greedy_coloring
from dclust.errors import ChunkingError, InfeasibleConstraintsError, InvalidDataError, StorageError


def _random_graph(n=200, m=300, seed=0, chunks=(50, 70, 80)):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 4, n)
    return ConstraintGraph.from_labels_sample(y, m / (n * (n - 1) / 2), rng=seed, chunks=chunks), y


def test_pairs_are_canonical_deduplicated_and_sorted():
    i = [5, 1, 3, 2, 2, 7, 1]
    j = [1, 5, 3, 9, 9, 0, 4]
    ml = [True, True, True, False, False, True, False]
    G = ConstraintGraph.from_pairs(i, j, ml, n_samples=10, chunks=(4, 6))
    a, b, s = G.pairs()
    # (5,1) and (1,5) merge; (3,3) is a self-pair; (2,9) appears twice; (7,0) becomes (0,7)
    assert list(zip(a.tolist(), b.tolist(), s.tolist())) == [(0, 7, 1), (1, 4, -1), (1, 5, 1), (2, 9, -1)]
    assert (G.n_must, G.n_cannot, G.n_links, len(G)) == (2, 2, 4, 4)
    assert G.must_pairs()[0].tolist() == [0, 1] and G.cannot_pairs()[1].tolist() == [4, 9]
    assert G.nodes().tolist() == [0, 1, 2, 4, 5, 7, 9]
    np.testing.assert_array_equal(G.weights(), np.ones(4))


def test_weighted_duplicates_keep_the_largest_weight():
    G = ConstraintGraph.from_pairs([0, 1, 2], [1, 0, 3], True, n_samples=4, weight=[0.5, 2.0, 1.0])
    assert G.weighted
    np.testing.assert_array_equal(G.weights(), [2.0, 1.0])


def test_blocks_are_aligned_to_the_row_chunks():
    G, _ = _random_graph()
    a, b, s = G.pairs()
    off = G.offsets
    seen = []
    for bi, bj, csr in G.blocks():
        assert bi <= bj and csr.shape == (G.chunks[bi], G.chunks[bj]) and csr.nnz > 0
        c = csr.tocoo()
        seen += list(zip((c.row + off[bi]).tolist(), (c.col + off[bj]).tolist(), np.sign(c.data).astype(int).tolist()))
    assert sorted(seen) == list(zip(a.tolist(), b.tolist(), s.tolist()))
    # only non-empty block pairs are stored
    ba = np.searchsorted(off, a, side="right") - 1
    bb = np.searchsorted(off, b, side="right") - 1
    assert G.block_pairs() == sorted(set(zip(ba.tolist(), bb.tolist())))
    # symmetric iteration: every link once per endpoint, (bj, bi) is the transpose of (bi, bj)
    sym = {(bi, bj): m for bi, bj, m in G.blocks(symmetric=True)}
    assert sum(m.nnz for m in sym.values()) == 2 * G.n_links
    for (bi, bj), m in sym.items():
        np.testing.assert_array_equal(m.toarray(), sym[(bj, bi)].toarray().T)
        np.testing.assert_array_equal(G.block(bi, bj).toarray(), m.toarray() if bi != bj else G.block(bi, bj).toarray())


def test_memory_is_linear_in_the_links_not_in_the_rows():
    y = np.zeros(2_000_000, dtype=np.int8)
    small = ConstraintGraph.from_labels_sample(y[:20_000], 1e-5, rng=0, chunks=1000)
    big = ConstraintGraph.from_labels_sample(y, 1e-9, rng=0, chunks=1000)
    assert big.nbytes == 16 * big.n_links and small.nbytes == 16 * small.n_links
    assert big.n_links == round(1e-9 * 2_000_000 * 1_999_999 / 2)


def test_from_labels_sample_follows_the_protocol():
    y = np.repeat([0, 1, 2], 50)
    G = ConstraintGraph.from_labels_sample(y, 0.05, rng=3)
    a, b, s = G.pairs()
    assert G.n_links == 559 and len(set(zip(a.tolist(), b.tolist()))) == 559
    np.testing.assert_array_equal(s > 0, y[a] == y[b])
    assert G == ConstraintGraph.from_labels_sample(y, 0.05, rng=3)
    noisy = ConstraintGraph.from_labels_sample(y, 0.05, rng=3, p=0.8)
    na, nb, ns = noisy.pairs()
    flipped = ((ns > 0) != (y[na] == y[nb])).mean()
    assert 0.1 < flipped < 0.3
    import dask.array as da

    assert ConstraintGraph.from_labels_sample(da.from_array(y, chunks=40), 0.05, rng=3) == G


def test_zarr_round_trip_is_atomic_and_refuses_to_overwrite(tmp_path):
    G, _ = _random_graph(chunks=(50, 70, 80))
    path = tmp_path / "links.zarr"
    G.to_zarr(path)
    back = ConstraintGraph.from_zarr(path)
    assert back == G and back.chunks == G.chunks and back.n_must == G.n_must
    assert sorted(os.listdir(tmp_path)) == ["links.zarr"]  # no temporary left behind
    with pytest.raises(StorageError, match="exists"):
        G.to_zarr(path)
    H = G.rechunk(40)
    H.to_zarr(path, overwrite=True)
    assert ConstraintGraph.from_zarr(path) == H
    g = zarr.open_group(str(path), mode="r")
    assert g.attrs["n_samples"] == 200 and g["i"].dtype == np.int64
    with pytest.raises(StorageError):
        ConstraintGraph.from_zarr(tmp_path / "missing.zarr")


def test_rechunk_keeps_the_links_and_moves_the_blocks():
    G, _ = _random_graph(chunks=(50, 70, 80))
    H = G.rechunk((100, 100))
    assert H.chunks == (100, 100) and H.n_blocks == 2
    assert all(np.array_equal(x, y) for x, y in zip(G.pairs(), H.pairs()))
    assert H.rechunk(G.chunks) == G
    H.check_aligned((100, 100))
    with pytest.raises(ChunkingError, match=r"G.rechunk\(X.chunks\[0\]\)"):
        H.check_aligned((50, 70, 80))
    with pytest.raises(InvalidDataError, match="200 rows"):
        H.check_aligned((100, 101))
    with pytest.raises(ChunkingError, match="sum"):
        G.rechunk((100, 99))


def test_out_of_range_and_malformed_input():
    with pytest.raises(InvalidDataError, match=r"\(3, 10\)"):
        ConstraintGraph.from_pairs([0, 3], [1, 10], True, n_samples=10)
    with pytest.raises(InvalidDataError, match=r"\(-1, 2\)"):
        ConstraintGraph.from_pairs([-1], [2], True, n_samples=10)
    with pytest.raises(InvalidDataError, match="one length"):
        ConstraintGraph.from_pairs([0, 1], [2], True, n_samples=10)
    with pytest.raises(InvalidDataError, match="weights"):
        ConstraintGraph.from_pairs([0], [2], True, n_samples=10, weight=[0.0])


def test_a_pair_both_must_and_cannot_is_rejected_even_for_noisy_links():
    for check in (True, False):
        with pytest.raises(InfeasibleConstraintsError, match=r"pair \(1, 4\) as both"):
            ConstraintGraph.from_pairs([1, 4, 0], [4, 1, 2], [True, False, True], n_samples=5, check_feasible=check)


def test_a_cannot_link_from_a_row_to_itself_is_rejected_by_every_constructor(tmp_path):
    # no clustering puts a row apart from itself: refused with or without the feasibility check, in any pair order
    for check in (True, False):
        with pytest.raises(InfeasibleConstraintsError, match=r"\(3, 3\) from a row to itself \(1 in all\)"):
            ConstraintGraph.from_pairs([3], [3], [False], n_samples=10, chunks=5, check_feasible=check)
    with pytest.raises(InfeasibleConstraintsError, match=r"\(2, 2\), \(7, 7\) from a row to itself \(2 in all\)"):
        ConstraintGraph.from_pairs([0, 7, 2, 2], [1, 7, 2, 2], [False, False, False, False], n_samples=10,
                                   weight=[1.0, 2.0, 0.5, 1.0], check_feasible=False)
    # a must-link to itself always holds: dropped, the rest kept
    G = ConstraintGraph.from_pairs([3, 0], [3, 1], [True, False], n_samples=10)
    assert (G.n_must, G.n_cannot) == (0, 1)
    # a store holding a self-pair (written by hand: to_zarr only writes canonical pairs) is refused as corrupt
    from dclust._store._constraints import write_constraints

    doc = {"n_samples": 10, "chunks": [10], "n_must": 0, "n_cannot": 1, "weighted": False}
    write_constraints(tmp_path / "self.zarr", doc, np.array([3]), np.array([3]), np.array([-1.0]))
    with pytest.raises(StorageError, match="canonical pairs"):
        ConstraintGraph.from_zarr(tmp_path / "self.zarr")


def test_contradiction_through_the_must_link_closure_names_the_chain():
    # 2 - 7 - 4 - 9 must-linked, cannot (2, 9)
    i, j, ml = [7, 4, 9, 2, 0], [2, 7, 4, 9, 1], [True, True, True, False, False]
    with pytest.raises(InfeasibleConstraintsError) as info:
        ConstraintGraph.from_pairs(i, j, ml, n_samples=10)
    text = str(info.value)
    assert "(2, 9)" in text and "2 -> 7 -> 4 -> 9" in text and "check_feasible=False" in text
    G = ConstraintGraph.from_pairs(i, j, ml, n_samples=10, check_feasible=False)
    assert (G.n_must, G.n_cannot) == (3, 2)
    # a long chain is elided in the middle
    n = 40
    with pytest.raises(InfeasibleConstraintsError, match=r"more\)"):
        ConstraintGraph.from_pairs(list(range(n - 1)) + [0], list(range(1, n)) + [n - 1], [True] * (n - 1) + [False],
                                   n_samples=n)


def test_noiseless_labels_are_always_feasible_and_noisy_ones_need_the_flag():
    y = np.repeat([0, 1], 30)
    ConstraintGraph.from_labels_sample(y, 0.3, rng=0, check_feasible=True)
    with pytest.raises(InfeasibleConstraintsError):
        ConstraintGraph.from_labels_sample(y, 0.5, rng=0, p=0.6, check_feasible=True)
    assert ConstraintGraph.from_labels_sample(y, 0.5, rng=0, p=0.6).n_links == round(0.5 * 60 * 59 / 2)


def test_greedy_coloring_separates_linked_rows():
    G, _ = _random_graph(n=300, m=900, seed=4, chunks=(100, 200))
    nodes, color = greedy_coloring(G)
    a, b, _ = G.pairs()
    ca, cb = color[np.searchsorted(nodes, a)], color[np.searchsorted(nodes, b)]
    assert (ca != cb).all()
    degree = np.bincount(np.searchsorted(nodes, np.concatenate([a, b])))
    assert color.max() + 1 <= degree.max() + 1
    np.testing.assert_array_equal(nodes, G.nodes())
