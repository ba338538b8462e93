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
