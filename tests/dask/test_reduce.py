import dask.array as da
from dask.core import get_dependencies
import numpy as np
import pytest

from dclust._dask.passes import map_labels, map_partials
from dclust._dask.reduce import tree_reduce
from dclust.kernels.distances import assign_stats, nearest
from dclust.kernels.stats import ClusterStats


def _partial(Xb, wb, *, offset, block_index, centers):
    return assign_stats(Xb, centers, wb, offset=offset, block_index=block_index)[0]


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(5003, 4)) * 3 + 100.0
    w = rng.uniform(0, 2, size=5003)
    C = rng.normal(size=(6, 4)) * 3 + 100.0
    return X, w, C


@pytest.mark.parametrize("split_every", [2, 3, 8])
@pytest.mark.parametrize("rows", [5003, 1000, 333, 97])
def test_tree_result_equals_single_chunk(data, split_every, rows):
    X, w, C = data
    single = assign_stats(X, C, w)[0]
    dX = da.from_array(X, chunks=(rows, -1))
    dw = da.from_array(w, chunks=(rows,))
    tree = tree_reduce(map_partials(_partial, dX, dw, centers=C), ClusterStats.merge_all, split_every=split_every)
    s = tree.compute()[()]
    np.testing.assert_allclose(s.weight, single.weight, rtol=1e-10)
    np.testing.assert_allclose(s.mean, single.mean, rtol=1e-10)
    np.testing.assert_allclose(s.scatter, single.scatter, rtol=1e-10)
    np.testing.assert_allclose(s.cost, single.cost, rtol=1e-10)
    np.testing.assert_array_equal(s.fingerprint, single.fingerprint)
    assert s.n_rows == X.shape[0]


@pytest.mark.parametrize("split_every", [2, 3, 8])
def test_fan_in_is_bounded_by_split_every(data, split_every):
    X, w, C = data
    dX = da.from_array(X, chunks=(50, -1))  # 101 blocks
    tree = tree_reduce(map_partials(_partial, dX, None, centers=C), ClusterStats.merge_all, split_every=split_every)
    graph = tree.__dask_graph__()
    layers = [name for name in graph.layers if "dclust-tree-reduce" in name]
    assert layers, "the reduction must go through dask.array.reduction"
    flat = dict(graph)
    fan_ins = [len(get_dependencies(flat, key)) for name in layers for key in graph.layers[name]]
    # every combine task takes at most split_every inputs, and some take exactly that many (101 blocks)
    assert max(fan_ins) == split_every
    assert len(layers) >= int(np.ceil(np.log(101) / np.log(split_every)))


def test_map_labels_keeps_row_chunks(data):
    X, _, C = data
    dX = da.from_array(X, chunks=(700, -1))
    labels = map_labels(lambda xb, offset, block_index, centers: nearest(xb, centers)[0], dX, centers=C)
    assert labels.chunks == (dX.chunks[0],)
    np.testing.assert_array_equal(labels.compute(), nearest(X, C)[0])


def test_map_partials_on_a_subset_of_blocks_keeps_global_offsets(data):
    X, _, C = data
    dX = da.from_array(X, chunks=(1000, -1))
    parts = map_partials(lambda xb, offset, block_index: (offset, block_index, xb.shape[0]), dX, blocks=[1, 3])
    out = parts.compute()
    assert [tuple(p) for p in out] == [(1000, 1, 1000), (3000, 3, 1000)]


def test_a_store_read_then_persisted_keeps_working(tmp_path):
    """The pass engine reads a store's chunks itself; once the array is persisted (same name, other graph) it takes
    the persisted blocks instead."""
    import dclust
    from dclust._dask.init import reduce_stats

    X = np.random.default_rng(0).normal(size=(1000, 3)).astype(np.float32)
    dclust.write_array(da.from_array(X, chunks=(100, -1)), tmp_path / "x.zarr")
    arr = dclust.open_array(tmp_path / "x.zarr")
    C = X[:4].astype(np.float64)
    first = reduce_stats(arr, None, C)
    again = reduce_stats(arr.persist(), None, C)
    np.testing.assert_allclose(again.mean, first.mean, rtol=1e-12)
    assert again.weight.sum() == 1000


def _float_sum(parts):
    """A merge whose result depends on its tree: float sums rounded differently in every other grouping."""
    return float(np.sum(np.asarray(parts, dtype=np.float64)))


@pytest.mark.parametrize("split_every", [2, 3, 8])
@pytest.mark.parametrize("n", [1, 2, 7, 8, 9, 20, 64, 65])
def test_merge_tree_is_the_tree_of_tree_reduce_bit_for_bit(split_every, n):
    """The in-process merge (persisted passes) and Dask's reduction tree merge the same partials in the same tree,
    so their results agree in every bit, although the merge rounds differently in other groupings."""
    from dclust._dask.reduce import merge_tree

    values = np.random.default_rng(n).normal(size=n) * 10.0 ** np.random.default_rng(split_every).integers(-8, 9, n)
    boxed = np.empty(n, dtype=object)
    boxed[:] = list(values)
    lazy = tree_reduce(da.from_array(boxed, chunks=1), _float_sum, split_every=split_every).compute()[()]
    assert merge_tree(list(values), _float_sum, split_every=split_every) == lazy
    if n >= 20:  # the merge is sensitive to the tree: another fan-in rounds otherwise
        assert len({merge_tree(list(values), _float_sum, split_every=s) for s in (2, 3, 8, n)}) > 1
    with pytest.raises(ValueError):
        merge_tree([], _float_sum)


def _shape(parts):
    """A merge that records its tree: equal results mean the same tree, node for node."""
    return "(" + ",".join(parts) + ")"


@pytest.mark.parametrize("split_every", [2, 3, 8])
@pytest.mark.parametrize("n", [1, 7, 8, 9, 20, 64, 65, 513])
def test_subtrees_of_any_ranges_finish_into_the_same_tree(split_every, n):
    """Runs of consecutive partials merged where they are (merge_subtrees), then finished together (merge_nodes),
    give the tree of tree_reduce exactly, whatever the runs; a run sends on O(split_every x depth) nodes, not one per
    partial."""
    from dclust._dask.reduce import merge_nodes, merge_subtrees, merge_tree

    parts = [str(i) for i in range(n)]
    boxed = np.empty(n, dtype=object)
    boxed[:] = parts
    whole = tree_reduce(da.from_array(boxed, chunks=1), _shape, split_every=split_every).compute()[()]
    assert merge_tree(parts, _shape, split_every=split_every) == whole
    depth = max(1, int(np.ceil(np.log(n) / np.log(split_every) - 1e-12)))
    rng = np.random.default_rng(n * split_every)
    for n_runs in {1, min(n, 2), min(n, 5)}:
        cuts = rng.choice(np.arange(1, n), n_runs - 1, replace=False).tolist() if n_runs > 1 else []
        bounds = [0, *sorted(cuts), n]
        nodes = {}
        for a, b in zip(bounds[:-1], bounds[1:]):
            sub = merge_subtrees(parts[a:b], _shape, first=a, n=n, split_every=split_every)
            assert len(sub) <= 2 * (split_every - 1) * depth + 1
            nodes.update(sub)
        assert merge_nodes(nodes, _shape, n=n, split_every=split_every) == whole
