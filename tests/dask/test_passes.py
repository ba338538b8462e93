"""The pass engine: grouped store reads give the model of one task per chunk, and a pass's graph does not grow
with the number of chunks it reads."""

from __future__ import annotations

import weakref

import cloudpickle
import dask
import dask.array as da
import numpy as np
import pytest

import dclust
from dclust._dask.init import _stats_partial
from dclust._dask.passes import _groups_for, map_partials, map_reduce
from dclust.kernels.stats import ClusterStats


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    X = np.random.default_rng(0).normal(size=(8_000, 3)).astype(np.float32)
    path = str(tmp_path_factory.mktemp("passes") / "x.zarr")
    dclust.write_array(da.from_array(X, chunks=(10, 3)), path)  # 800 chunks
    return X, path


def _graph_bytes(X) -> int:
    parts = map_reduce(_stats_partial, ClusterStats.merge_all, X, None, centers=np.zeros((4, X.shape[1])))
    (optimized,) = dask.optimize(parts)  # what compute() ships: culled to the keys the pass needs
    return len(cloudpickle.dumps(dict(optimized.__dask_graph__())))


def test_a_store_pass_graph_does_not_grow_with_the_chunk_count(store):
    _, path = store
    X = dclust.open_array(path)
    few, many = X.rechunk({0: 800}), X  # 10 and 800 chunks of the same store (the rechunked one is not a read)
    assert X.numblocks[0] == 800
    grouped = _graph_bytes(many)
    with dask.config.set({"dclust.pass-grouping": False}):
        ungrouped = _graph_bytes(many)
    assert grouped < 40_000  # a few tasks, no per-chunk index
    assert ungrouped > 5 * grouped
    assert few.numblocks[0] == 10


@pytest.mark.parametrize("rows", [7, 10, 333])
def test_grouped_and_ungrouped_passes_agree(store, rows):
    X, path = store
    Xd = dclust.open_array(path) if rows == 10 else da.from_array(X, chunks=(rows, 3))
    C = X[:4].astype(np.float64)
    grouped = map_reduce(_stats_partial, ClusterStats.merge_all, Xd, None, centers=C).compute()[()]
    with dask.config.set({"dclust.pass-grouping": False}):
        single = map_reduce(_stats_partial, ClusterStats.merge_all, Xd, None, centers=C).compute()[()]
    np.testing.assert_array_equal(grouped.weight, single.weight)
    np.testing.assert_allclose(grouped.mean, single.mean, rtol=1e-10)
    np.testing.assert_allclose(grouped.scatter, single.scatter, rtol=1e-10)


@pytest.mark.parametrize("n_blocks,n_tasks", [(20, 8), (21, 8), (8, 8), (5, 8), (80, 8), (1, 4), (17, 3)])
def test_block_groups_are_balanced(n_blocks, n_tasks):
    from dclust._dask.passes import block_groups

    groups = block_groups(n_blocks, n_tasks=n_tasks)
    assert [b for g in groups for b in g] == list(range(n_blocks))  # every block once, in order
    assert len(groups) == min(n_blocks, n_tasks)
    sizes = [len(g) for g in groups]
    assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)
    subset = [1, 2, 3, 7, 9]
    assert block_groups(10, subset, n_tasks=2) == [[1, 2, 3], [7, 9]]


@pytest.mark.parametrize("n_blocks,n_groups", [(1, 1), (3, 2), (20, 2), (31, 2), (32, 4), (48, 6), (64, 8),
                                               (5000, 8)])
def test_a_pass_runs_one_task_per_thread_for_every_eight_blocks_up_to_four(n_blocks, n_groups):
    """Two threads: one task per thread until a thread has 16 blocks (two tasks of 8), four at most."""
    from dclust._dask.passes import block_groups

    with dask.config.set(scheduler="threads", num_workers=2):
        groups = block_groups(n_blocks)
    assert len(groups) == n_groups and [b for g in groups for b in g] == list(range(n_blocks))


@pytest.mark.parametrize("n_groups", [1, 2, 8, 9])
def test_a_pass_of_a_few_tasks_merges_them_in_one_task_bit_for_bit_as_the_tree(store, n_groups, monkeypatch):
    """Up to ``split_every`` task groups, a pass ends in one merge task that depends on the pass's tasks alone (no
    boxing layer, no tree): the tree's one level, so the same statistics bit for bit. More groups: the tree."""
    from dclust._dask import passes

    X, path = store
    Xd = dclust.open_array(path)
    C = X[:4].astype(np.float64)
    monkeypatch.setattr(passes, "block_groups", lambda n, todo=None, n_tasks=None: [
        list(g) for g in np.array_split(np.arange(n) if todo is None else np.asarray(todo), n_groups) if len(g)])
    assert len(_groups_for(Xd, None, grouped=True)) == n_groups
    merged = map_reduce(_stats_partial, ClusterStats.merge_all, Xd, None, centers=C)
    graph = merged.__dask_graph__()
    if n_groups <= 8:
        assert len(graph.layers) == 2 and merged.name.startswith("dclust-reduce-")
        root = graph[(merged.name,)]
        assert {k[0] for k in root.dependencies} == {merged.name.replace("dclust-reduce-", "dclust-pass-")}
    else:
        assert any("dclust-tree-reduce" in name for name in graph.layers)
    got = merged.compute()[()]
    monkeypatch.setattr(passes, "fan_in", lambda split_every: 0)  # the same groups through the tree
    tree = map_reduce(_stats_partial, ClusterStats.merge_all, Xd, None, centers=C)
    assert any("dclust-tree-reduce" in name for name in tree.__dask_graph__().layers)
    reference = tree.compute()[()]
    for a in ("weight", "mean", "scatter"):
        np.testing.assert_array_equal(getattr(got, a), getattr(reference, a))


def _pass_tasks(Xd, C) -> dict:
    parts = map_reduce(_stats_partial, ClusterStats.merge_all, Xd, None, centers=C)
    graph = dict(parts.__dask_graph__())
    return {k: v for k, v in graph.items() if isinstance(k, tuple) and str(k[0]).startswith("dclust-pass-")} | {
        k: v for k, v in graph.items() if str(k).startswith(("dclust-params-", "original-from-zarr-"))}


@pytest.mark.parametrize("inline", [True, False])
def test_small_parameters_travel_inside_the_tasks(store, inline):
    """Small centres (and the store object) are inside every task: the tasks of a store pass depend on no key.
    Large centres, or ``dclust.inline-params: False``, are one key; the results are the same."""
    X, path = store
    Xd = dclust.open_array(path)
    C = X[:4].astype(np.float64)
    with dask.config.set({"dclust.inline-params": inline}):
        tasks = _pass_tasks(Xd, C)
        stats = map_reduce(_stats_partial, ClusterStats.merge_all, Xd, None, centers=C).compute()[()]
    extra = [k for k in tasks if not (isinstance(k, tuple) and str(k[0]).startswith("dclust-pass-"))]
    deps = set().union(*(t.dependencies for k, t in tasks.items() if k not in extra))
    if inline:
        assert extra == [] and deps == set()
    else:
        assert len(extra) == 2 and deps == set(extra)  # the parameters and the store object
    reference = ClusterStats.from_labels(X, np.argmin(((X[:, None, :] - C[None]) ** 2).sum(axis=2), axis=1), 4)
    np.testing.assert_array_equal(stats.weight, reference.weight)
    np.testing.assert_allclose(stats.mean, reference.mean, rtol=1e-6)
    big = np.tile(C, (10_000, 1))  # 320 kB of centres: one key
    assert any(str(k).startswith("dclust-params-") for k in _pass_tasks(Xd, big))


def _propose_with(Xb, *, offset, block_index, propose, centers):
    return propose(Xb, centers, offset=offset, block_index=block_index)


def test_a_top_level_kernel_among_the_parameters_travels_inside_the_tasks(store):
    """An OCC epoch passes its block kernel as a parameter: a top-level function pickles as its name, so the pass's
    tasks still depend on no key (a key for it made every pass wait for the parameters' transfer to the other
    workers); a closure, whose size is unknown, stays one key."""
    from dclust.kernels.distances import block_stats

    X, path = store
    Xd = dclust.open_array(path)
    C = X[:4].astype(np.float64)

    def tasks_with(propose):
        graph = dict(map_reduce(_propose_with, ClusterStats.merge_all, Xd, propose=propose, centers=C)
                     .__dask_graph__())
        return [k for k in graph if str(k).startswith("dclust-params-")]

    assert tasks_with(block_stats) == []
    assert len(tasks_with(lambda Xb, C, **kw: block_stats(Xb, C, **kw))) == 1
    stats = map_reduce(_propose_with, ClusterStats.merge_all, Xd, propose=block_stats, centers=C).compute()[()]
    reference = ClusterStats.from_labels(X, np.argmin(((X[:, None, :] - C[None]) ** 2).sum(axis=2), axis=1), 4)
    np.testing.assert_array_equal(stats.weight, reference.weight)


def test_dataclasses_of_small_arrays_travel_inside_the_tasks():
    """A mixture's parameters or a D-Means step's state (dataclasses of arrays and scalars) are sized by their
    fields: small ones travel inside the tasks; one holding an object of unknown size, or too many bytes, is a key."""
    from dclust._dask.passes import _INLINE_BYTES, _is_small
    from dclust.kernels.dynmeans import StepState
    from dclust.kernels.gmpr import MixtureParams

    params = MixtureParams.build(np.full(16, 1 / 16), np.ones((16, 1)), np.zeros((16, 1, 8)), np.ones((16, 1, 8)))
    state = StepState(np.zeros((5, 8)), np.ones(5), np.ones(5, np.int64), 1.0, 0.0)
    assert _is_small({"params": params}) and _is_small({"state": state, "mix": 3})
    assert not _is_small({"state": StepState(np.zeros((_INLINE_BYTES // 64 + 1, 8)), np.ones(1), np.ones(1, np.int64),
                                             1.0, 0.0)})
    assert not _is_small({"params": params, "other": object()})
    assert not _is_small({"boxed": np.empty(2, dtype=object)})


def test_a_persisted_store_is_spread_evenly_and_each_block_is_used_where_it_is(store, client):
    """Persisted on a cluster of two single-threaded workers, the 800 chunks of the store are split 400:400 in two
    contiguous runs (left to Dask, nearly all of them landed where the store object was, and a pass ran on one
    worker); a pass over them moves no block and gives the statistics of the store read; the placement is loose
    afterwards (a lost worker's blocks may be read again on the other)."""
    import logging

    from distributed import get_task_stream

    from dclust._dask.passes import persist_if_fits

    X, path = store
    Xd = dclust.open_array(path)
    Xp = persist_if_fits(Xd, True, logging.getLogger("dclust"))
    assert Xp.name == Xd.name and Xp.chunks == Xd.chunks
    holders = client.who_has(Xp)
    first = [holders[(Xp.name, b, 0)][0] for b in range(Xp.numblocks[0])]
    assert first[:400] == [first[0]] * 400 and first[400:] == [first[400]] * 400 and first[0] != first[400]
    C = X[:4].astype(np.float64)
    with get_task_stream() as stream:
        held = map_reduce(_stats_partial, ClusterStats.merge_all, Xp, None, centers=C).compute()[()]
    passes = [t for t in stream.data if "dclust-pass-" in str(t["key"])]
    assert {t["worker"] for t in passes} == set(first)
    assert not [t for t in passes if any(s["action"] == "transfer" for s in t["startstops"])]
    read = map_reduce(_stats_partial, ClusterStats.merge_all, Xd, None, centers=C).compute()[()]
    np.testing.assert_array_equal(held.weight, read.weight)
    np.testing.assert_allclose(held.mean, read.mean, rtol=1e-10)
    restrictions = client.run_on_scheduler(
        lambda dask_scheduler: {ts.loose_restrictions for k, ts in dask_scheduler.tasks.items()
                                if isinstance(k, tuple) and k[0] == Xp.name})
    assert restrictions == {True}


def test_a_pass_over_persisted_blocks_is_one_task_per_thread_and_one_merge(client):
    """Persisted on two single-threaded workers, a pass is two tasks (each over the run of blocks its worker holds,
    moving none) and one merge task -- not a task per block and a reduction tree across the workers -- and its
    result is that of one task per block bit for bit, over every block and over a shuffled subset."""
    import logging

    from distributed import get_task_stream

    from dclust._dask.passes import persist_if_fits

    X = np.random.default_rng(3).normal(size=(3_000, 4)) * 5 + 1e3
    Xp = persist_if_fits(da.from_array(X, chunks=(150, -1)), True, logging.getLogger("dclust"))
    C = X[:5].copy()
    # (a shuffled subset: one task per stretch of consecutive listed blocks that one worker holds)
    for blocks, n_tasks in ((None, 2), ([0, 2, 3, 7, 13, 19], 2), ([13, 2, 7, 19, 3, 0], 4)):
        lazy = map_reduce(_stats_partial, ClusterStats.merge_all, Xp, None, centers=C, blocks=blocks)
        assert len([k for k in dict(lazy.__dask_graph__()) if Xp.name not in str(k)]) == n_tasks + 1
        with get_task_stream() as stream:
            held = lazy.compute()[()]
        passes = [t for t in stream.data if "dclust-pass-" in str(t["key"])]
        assert len(passes) == n_tasks and len({t["worker"] for t in passes}) == 2
        assert not [t for t in passes if any(s["action"] == "transfer" for s in t["startstops"])]
        with dask.config.set({"dclust.pass-grouping": False}):  # one task per block, Dask's reduction tree
            single = map_reduce(_stats_partial, ClusterStats.merge_all, Xp, None, centers=C, blocks=blocks)
            assert len(dict(single.__dask_graph__())) > 20 + (20 if blocks is None else 6)
            single = single.compute()[()]
        for field in ("weight", "mean", "scatter", "fingerprint"):
            np.testing.assert_array_equal(getattr(held, field), getattr(single, field))
        assert held.cost == single.cost and held.n_rows == single.n_rows
        rows = np.concatenate([np.arange(b * 150, (b + 1) * 150) for b in (range(20) if blocks is None else blocks)])
        np.testing.assert_array_equal(held.weight, ClusterStats.from_labels(
            X[rows], np.argmin(((X[rows, None, :] - C[None]) ** 2).sum(axis=2), axis=1), 5).weight)



def _row_sums(Xb, *, offset, block_index):
    return np.asarray(Xb).sum(axis=0)


def test_map_partials_gives_one_element_per_block_when_its_tasks_read_several(tmp_path):
    """A store's blocks are read in groups, and each task boxes its blocks' partials itself: the result still has
    one element per block, in block order, each the block's partial as it was returned."""
    data = np.arange(400.0).reshape(200, 2)
    X = dclust.open_array(dclust.write_array(data, tmp_path / "x.zarr", chunks=(5, 2)))
    parts = map_partials(_row_sums, X).compute()
    assert X.numblocks[0] == 40 and parts.shape == (40,) and all(p.shape == (2,) for p in parts)
    np.testing.assert_array_equal(np.stack(list(parts)), data.reshape(40, 5, 2).sum(axis=1))
    assert any(len(g) > 1 for g in _groups_for(X, None, grouped=True))  # the case: several blocks in one task


def _row_count(Xb, *, offset, block_index):
    return np.array([len(Xb)])


def test_a_task_holds_one_chunk_at_a_time(tmp_path, monkeypatch):
    """A task that reads several chunks lets go of each before it reads the next: a worker's peak memory is one
    chunk per thread (plus the kernel's buffers), not two."""
    from dclust._dask import passes

    X = dclust.open_array(dclust.write_array(np.ones((200, 2)), tmp_path / "x.zarr", chunks=(5, 2)))
    assert any(len(g) > 1 for g in _groups_for(X, None, grouped=True))  # the case: several blocks in one task
    read, seen, alive_at_read = passes._read, [], []

    def watched_read(*args):
        alive_at_read.append(sum(ref() is not None for ref in seen))
        block = read(*args)
        seen.append(weakref.ref(block))
        return block

    monkeypatch.setattr(passes, "_read", watched_read)
    parts = map_partials(_row_count, X).compute(scheduler="sync")
    assert [int(p[0]) for p in parts] == [5] * 40 and len(seen) == 40
    assert alive_at_read == [0] * 40


def test_a_store_read_is_grouped_after_a_persisted_copy_of_the_same_store(store):
    """A persisted array keeps the store array's name: after a pass over the persisted copy, a pass over the store
    still reads its chunks in groups (it went one task per block through Dask's reads when the persisted copy's
    "no reader" was cached for the name)."""
    _, path = store
    X = dclust.open_array(path)
    grouped = _groups_for(X, None, grouped=True)
    assert len(grouped) < X.numblocks[0]
    Xp = X.persist()
    assert Xp.name == X.name and _groups_for(Xp, None, grouped=True) == [[b] for b in range(X.numblocks[0])]
    assert _groups_for(X, None, grouped=True) == grouped
    assert _groups_for(Xp, None, grouped=True) == [[b] for b in range(X.numblocks[0])]


def test_an_input_aligned_with_a_store_is_persisted_where_the_pass_tasks_will_run(tmp_path, client, monkeypatch):
    """An aligned input of every pass over a store (GM-PR's links) is placed by the pass's task groups, the groups
    dealt to the workers in turn: each task finds its blocks on one worker, and the tasks of a pass over the store
    run on both workers (left to the scheduler, the input sat on one worker and so did every task of the pass)."""
    from distributed import futures_of, get_task_stream

    from dclust._dask import passes
    from dclust._dask.passes import _groups_for, persist_aligned

    monkeypatch.setattr(passes, "MIN_BLOCKS_PER_TASK", 1)  # several tasks per thread: dealt in more than one round
    data = np.arange(4000.0).reshape(2000, 2)
    X = dclust.open_array(dclust.write_array(data, tmp_path / "x.zarr", chunks=(100, 2)))
    A = da.from_array(np.arange(20.0), chunks=1)
    Ap = persist_aligned(A, X)
    holders = {k[1]: set(v) for k, v in client.who_has(futures_of(Ap)).items()}
    groups = _groups_for(X, None, grouped=True)
    assert len(groups) > 2 and all(len(holders[b]) == 1 for b in range(20))
    owner = [holders[g[0]] for g in groups]
    assert all(holders[b] == owner[i] for i, g in enumerate(groups) for b in g)  # a task's blocks on one worker
    assert owner[0] != owner[1] and set.union(*owner) == set(client.nthreads())  # dealt in turn
    with get_task_stream() as stream:
        total = map_reduce(lambda Xb, a, **kw: float(np.asarray(Xb).sum()) + float(a[0]), sum, X, Ap).compute()[()]
    assert total == data.sum() + np.arange(20.0).sum()
    assert len({t["worker"] for t in stream.data if "dclust-pass-" in str(t["key"])}) == 2


def test_aligned_inputs_are_dealt_to_the_workers_in_turn_whatever_their_threads():
    """Groups of a pass dealt to thread slots reach every worker before any worker's second thread, so a pass of
    fewer tasks than threads still runs on every worker; persisted runs keep each worker's slots together."""
    from dclust._dask.passes import _thread_slots

    threads = {"tcp://b": 2, "tcp://a": 2, "tcp://c": 1}
    assert _thread_slots(threads) == ["tcp://a", "tcp://a", "tcp://b", "tcp://b", "tcp://c"]
    assert _thread_slots(threads, dealt=True) == ["tcp://a", "tcp://b", "tcp://c", "tcp://a", "tcp://b"]
