"""tree_reduce's graph names: deterministic, and different for a different merge (its steps tokenize as the merge
does)."""

import dask.array as da

from dclust._dask.passes import map_partials
from dclust._dask.reduce import tree_reduce


def _sum_merge(parts):
    return sum(parts)


def _max_merge(parts):
    return max(parts)


def test_tree_reduce_names_follow_the_merge_and_the_partials():
    parts = map_partials(lambda b, *, offset, block_index: float(b.sum()), da.arange(10.0, chunks=3)[:, None])
    a, b = tree_reduce(parts, _sum_merge), tree_reduce(parts, _sum_merge)
    c = tree_reduce(parts, _max_merge)
    assert a.name == b.name  # deterministic: equal graphs share their keys
    assert a.name != c.name  # a different merge is a different graph, never a cached one
    assert a.compute()[()] == 45.0 and c.compute()[()] == 21.0  # blocks sum to 3, 12, 21, 9
