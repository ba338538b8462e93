"""Grouped passes that keep a result per block where they made it (:func:`dclust._dask.passes.map_groups`, the
epochs of BP-means): the merged partials are Dask's tree reduction of one partial per block bit for bit, whatever
the grouping; a later pass over the same groups takes each block's kept result from its own group's task."""

from __future__ import annotations

import dask
import numpy as np
import pytest

import dclust
from dclust._dask.passes import Held, block_groups, map_groups, map_held, map_partials, persist_and_compute
from dclust._dask.reduce import tree_reduce


def _sums(parts):
    """A merge whose float result depends on the order and grouping of the sums."""
    out = np.zeros_like(parts[0])
    for p in parts:
        out = out + p
    return out


def _kept_and_sums(Xb, prev=None, *, offset, block_index, scale):
    """(kept: the block's row sums plus what it kept before; partial: the column sums of the scaled block)."""
    rows = np.asarray(Xb, dtype=np.float64).sum(axis=1)
    kept = rows if prev is None else prev + rows
    return kept, np.asarray(Xb, dtype=np.float64).sum(axis=0) * scale


def _column_sums(Xb, *, offset, block_index, scale):
    return np.asarray(Xb, dtype=np.float64).sum(axis=0) * scale


@pytest.fixture(scope="module")
def spread(tmp_path_factory):
    """23 blocks of rows whose magnitudes span 12 decades: their float sums depend on the merge tree."""
    rng = np.random.default_rng(5)
    X = rng.normal(size=(23 * 40, 3)) * 10.0 ** rng.integers(-6, 6, size=(23 * 40, 1))
    path = tmp_path_factory.mktemp("groups") / "x.zarr"
    return X, dclust.open_array(dclust.write_array(X, path, chunks=(40, 3)))


@pytest.mark.parametrize("split_every", [2, 3, 8])
@pytest.mark.parametrize("n_tasks", [1, 2, 5, 23])
def test_merged_partials_are_the_tree_reduction_bit_for_bit_for_any_grouping(spread, split_every, n_tasks):
    X, Xs = spread
    single = tree_reduce(map_partials(_column_sums, Xs, grouped=False, scale=3.0), _sums,
                         split_every=split_every).compute()[()]
    groups = block_groups(Xs.numblocks[0], None, n_tasks)
    run = map_groups(_kept_and_sums, _sums, Xs, groups=groups, split_every=split_every, scale=3.0)
    assert run.groups == tuple(tuple(g) for g in groups)
    assert len([k for k in dict(run.parts.__dask_graph__()) if "dclust-groups-" in str(k)]) == len(groups)
    np.testing.assert_array_equal(run.merged.compute()[()], single)
    assert not np.array_equal(_sums([X[i::23].sum(axis=0) * 3.0 for i in range(23)]), single)  # order matters


def test_a_later_pass_takes_each_block_kept_result_from_its_group(spread):
    X, Xs = spread
    groups = block_groups(Xs.numblocks[0], None, 4)
    first = map_groups(_kept_and_sums, _sums, Xs, groups=groups, scale=1.0)
    parts, merged = persist_and_compute(first.parts, first.merged)
    np.testing.assert_allclose(merged, X.sum(axis=0), rtol=1e-12)
    second = map_groups(_kept_and_sums, _sums, Xs, Held(parts), groups=first.groups, scale=1.0)
    kept = map_held(np.multiply, Held(dask.persist(second.parts)[0]), first.groups, (Xs.chunks[0],),
                    dtype=np.float64, block_args=[0.5] * Xs.numblocks[0])
    np.testing.assert_array_equal(kept.compute(), X.sum(axis=1))  # (2 x the row sums) x 0.5
    with pytest.raises(ValueError, match="not the 23 blocks in order"):
        map_groups(_kept_and_sums, _sums, Xs, groups=[[0, 1]] + [[b] for b in range(3, 23)] + [[2]], scale=1.0)


def test_an_epoch_keeps_every_group_on_one_worker_and_moves_no_bits(spread, client):
    """On two worker processes: one task per group, one small task per group for its subtrees and one merge; the
    next pass's task of a group runs where its group's results are, moving nothing but the merge's inputs."""
    from distributed import futures_of, get_task_stream

    X, Xs = spread
    groups = block_groups(Xs.numblocks[0], None, 6)
    run = map_groups(_kept_and_sums, _sums, Xs, groups=groups, scale=1.0)
    parts, _ = persist_and_compute(run.parts, run.merged)
    with get_task_stream() as stream:
        nxt = map_groups(_kept_and_sums, _sums, Xs, Held(parts), groups=run.groups, scale=1.0)
        parts2, merged = persist_and_compute(nxt.parts, nxt.merged)
    np.testing.assert_allclose(merged, X.sum(axis=0), rtol=1e-12)
    names = [str(t["key"]) for t in stream.data]
    assert sum("dclust-groups-" in k for k in names) == 6 and sum("dclust-subtrees-" in k for k in names) == 6
    assert sum("dclust-merge-" in k for k in names) == 1 and len(names) == 13
    moved = [t for t in stream.data if "dclust-groups-" in str(t["key"])
             and any(s["action"] == "transfer" for s in t["startstops"])]
    assert not moved
    held = {k[1]: w for k, w in client.who_has(futures_of(parts)).items()}
    ran = {t["key"][1]: t["worker"] for t in stream.data if "dclust-groups-" in str(t["key"])}
    assert all(ran[g] in held[g] for g in range(6))
