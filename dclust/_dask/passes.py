"""THE pass engine: every pass over the data is built here.

A pass is a few tasks, each taking a *group* of consecutive row blocks. A task reads its blocks itself when the
array is a plain read of a store (``dask.array.from_zarr`` / ``from_array``: the same ``getter`` call Dask would
make, without one task per chunk), or takes them from the tasks that make them (a persisted array's blocks, or a
computed array), runs the kernel block by block and returns only what the reduction needs. The parameters of a
pass (centres, thresholds) and the store object travel inside every task when they are small (so the tasks of a
pass on a distributed cluster wait for no other key), else they are one key of the graph, sent once per worker.
No block is concatenated or copied on the way.

How many tasks (``dask.config.set({"dclust.pass-grouping": False})`` keeps one task per block, for comparisons): a
store read is grouped into 1 to ``TASKS_PER_THREAD`` tasks per thread of the cluster (one per
``MIN_BLOCKS_PER_TASK`` blocks), so the scheduling cost of a pass follows the cluster's cores, not the store's
chunk count. Blocks a distributed cluster holds
(persisted: :func:`persist_if_fits` spreads them over the workers in one contiguous run per thread) are grouped by
those runs, one task per run on the worker that holds it; the tasks merge their blocks' partials in the subtrees
of the tree of one task per block that they hold whole and one task finishes the tree, so the merge order does not
depend on where the blocks are: a fit that loses a worker gives the same centres bit for bit. Blocks computed by
other tasks keep one task per block (fused with the task that makes it). Results never depend on the grouping
except through the rounding of floating-point sums of grouped store reads.

:func:`map_reduce` is the pass of every fit (a tree-reduced result); :func:`map_partials` returns one partial
per block (proposal steps that need them block by block); :func:`map_labels` gives per-row outputs.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import time
import types
import uuid
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple, Sequence

import dask
import dask.array as da
import numpy as np
from dask._task_spec import DataNode, GraphNode, List, Task, TaskRef
from dask.array.chunk import getitem
from dask.array.optimization import _is_getter_task
from dask.highlevelgraph import HighLevelGraph

from ..errors import DclustError
from .reduce import boxed, fan_in, merge_nodes, merge_subtrees, tree_reduce

__all__ = [
    "map_reduce",
    "map_partials",
    "persist_aligned",
    "map_groups",
    "Grouped",
    "Held",
    "map_held",
    "persist_and_compute",
    "map_labels",
    "block_offsets",
    "block_groups",
    "compute",
    "persist_if_fits",
    "CHUNK_DONE_TOPIC",
    "TASKS_PER_THREAD",
    "MIN_BLOCKS_PER_TASK",
]

#: Tasks per thread of the cluster in a grouped pass over a store, at most: a few, so that a slow worker does not
#: hold the pass (the others take its tasks that have not started)...
TASKS_PER_THREAD = 4
#: ... but a task reads at least this many blocks where the pass has that many per thread: every task costs the
#: pass a round trip. 20 blocks of 500,000 x 8 on 2 threads: 8 tasks 162-179 ms per KMeans pass, 2 tasks 140-153
#: ms (worker processes); 112-120 against 103-115 ms (threads).
MIN_BLOCKS_PER_TASK = 8

#: Topic of the events a distributed worker logs when it has processed row chunks (``Client.subscribe_topic``);
#: the message is the number of chunks done.
CHUNK_DONE_TOPIC = "dclust-chunk-done"


def block_offsets(chunks: tuple[int, ...]) -> np.ndarray:
    """Global index of the first row of every block."""
    return np.concatenate([[0], np.cumsum(chunks)[:-1]]).astype(np.int64)


#: glibc's ``mallopt`` parameters and the values a pass sets in a process whose environment disabled the dynamic
#: mmap threshold (see :func:`_reuse_chunk_buffers`).
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_MMAP_THRESHOLD, _TRIM_THRESHOLD = 32 * 2**20, 128 * 2**20
_malloc_tuned: list[bool] = []


def _reuse_chunk_buffers() -> None:
    """Let glibc reuse freed chunk-sized buffers in this process (once per process; Linux/glibc only).

    distributed's nanny starts workers with ``MALLOC_TRIM_THRESHOLD_=65536``. Setting it switches glibc's dynamic
    mmap threshold off, so every chunk-sized array a task allocates (a decoded Zarr chunk) is a fresh ``mmap``
    whose pages fault in one by one, and is unmapped again when freed: reading a store in a worker process measured
    3-5 x slower than in a plain process. Where that variable is set, a pass sets the mmap threshold to 32 MiB and
    the trim threshold to 128 MiB, so freed chunk buffers are reused and a worker keeps at most 128 MiB of freed
    memory. Switch it off with ``dask.config.set({"dclust.reuse-chunk-buffers": False})``.
    """
    if _malloc_tuned:
        return
    _malloc_tuned.append(True)
    if not dask.config.get("dclust.reuse-chunk-buffers", True) or "MALLOC_TRIM_THRESHOLD_" not in os.environ:
        return
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)
        libc.mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD)
    except (OSError, AttributeError):  # not glibc: nothing to do
        pass


def _report_chunks_done(n: int) -> None:
    """Tell subscribers (the CLI's live display) that ``n`` chunks are done; nothing outside a distributed worker."""
    try:
        from distributed import get_worker

        worker = get_worker()
    except (ImportError, ValueError):
        return
    worker.log_event(CHUNK_DONE_TOPIC, n)


#: A task of a pass reports the chunks it has done at most this often (seconds), and when it ends: a task of a large
#: store reads hundreds of chunks, and the live display must not wait for its end.
PROGRESS_INTERVAL = 0.5


class _ChunkCounter:
    """The chunks a task has done, reported every :data:`PROGRESS_INTERVAL` seconds and at :meth:`flush`."""

    def __init__(self) -> None:
        self.pending, self.last = 0, time.monotonic()

    def done(self) -> None:
        self.pending += 1
        now = time.monotonic()
        if now - self.last >= PROGRESS_INTERVAL:
            self.flush()
            self.last = now

    def flush(self) -> None:
        if self.pending:
            _report_chunks_done(self.pending)
            self.pending = 0


def _block_info_array(X: da.Array) -> da.Array:
    """(n_blocks, 2) int64 array of (offset, block index), one row per row block of X (for blockwise maps that
    carry extra per-block arrays: the link and feature passes)."""
    offsets = block_offsets(X.chunks[0])
    info = np.stack([offsets, np.arange(len(offsets))], axis=1)
    return da.from_array(info, chunks=(1, 2))


def _partial_block(fn, kwargs, info, Xb, *aligned):
    """The blockwise task of :func:`_block_info_array` maps: one boxed partial."""
    out = np.empty(1, dtype=object)
    out[0] = fn(Xb, *aligned, offset=int(info[0, 0]), block_index=int(info[0, 1]), **kwargs)
    _report_chunks_done(1)
    return out


# ------------------------------------------------------------------------------------------ where blocks come from


@dataclass(frozen=True)
class _Reader:
    """The blocks of an array that is a plain read of one source object: ``getter(source, index[b], asarray, lock)``."""

    getter: Callable
    source: Any  # TaskRef to the graph key holding the source object
    index: tuple  # per block: the getter's index
    asarray: bool
    lock: Any
    canonical: bool  # index[b] is the block's whole row range and every column (rebuilt in the task, not shipped)


@dataclass(frozen=True)
class _Getter:
    """How a task reads a block (sent once per pass, with the pass's parameters)."""

    getter: Callable
    asarray: bool
    lock: Any


_reader_cache: dict[str, _Reader | None] = {}


def _reader_of(X: da.Array) -> _Reader | None:
    """The :class:`_Reader` of ``X`` when every block is one ``getter`` call on the same source, else None."""
    graph = X.__dask_graph__()
    if X.name in _reader_cache:
        # A persisted array keeps its name but no longer holds the source key, nor getter tasks: neither answer
        # cached for one of the pair holds for the other (a store read after a persisted fit of the same store
        # went one task per block through Dask's reads).
        cached = _reader_cache[X.name]
        if cached is not None and cached.source.key in graph:
            return cached
        if cached is None:
            first = graph.get((X.name,) + (0,) * X.ndim)
            if first is None or _is_getter_task(first) is None:
                return None
    reader = None
    if X.numblocks[1:] == (1,) * (X.ndim - 1):
        index, source, getter, asarray, lock = [], None, None, None, None
        for b in range(X.numblocks[0]):
            task = graph.get((X.name, b) + (0,) * (X.ndim - 1))
            found = _is_getter_task(task) if task is not None else None
            if found is None:
                break
            get, src, idx, asa, lk = found
            if get is getitem or not isinstance(src, TaskRef) or (source is not None and src.key != source.key):
                break
            source, getter, asarray, lock = src, get, asa, lk
            index.append(idx.value if isinstance(idx, DataNode) else idx)
        else:
            if source is not None:
                offsets = block_offsets(X.chunks[0])
                canonical = all(idx == _whole_rows(int(off), int(size), X.shape[1:])
                                for idx, off, size in zip(index, offsets, X.chunks[0]))
                reader = _Reader(getter, source, tuple(index), bool(asarray) if asarray is not None else True, lock,
                                 canonical)
    if len(_reader_cache) > 256:
        _reader_cache.clear()
    _reader_cache[X.name] = reader
    return reader


def _read(reader: "_Getter", source: Any, index: Any, b: int, first: int, size: int) -> np.ndarray:
    try:
        return reader.getter(source, index, reader.asarray, reader.lock)
    except (OSError, DclustError):  # the storage itself (network, permissions), or already named
        raise
    except Exception as exc:  # noqa: BLE001 - any decoding failure of the store: a checksum, an empty chunk file
        from .._store._zarr import chunk_error  # only on this error path: names the store's damaged chunk

        raise chunk_error(source, first, first + size - 1, exc, block=b) from exc


@dataclass(frozen=True)
class _Source:
    """The source object of a :class:`_Reader` as ``X``'s graph holds it."""

    node: Any  # the graph's value under the source key (a DataNode, a task, or the object itself)
    value: Any  # the object (a DataNode's value), or the node
    plain: bool  # a plain object (a store), not a task or an in-memory array: it may travel inside every task


def _source_of(X: da.Array, reader: _Reader) -> _Source:
    """The source object of ``reader`` in ``X``'s graph. An in-memory source (a numpy array, a memory map) would
    be pickled with its data into every task, and a task's output is no object to inline: neither is plain."""
    node = X.__dask_graph__()[reader.source.key]
    value = node.value if isinstance(node, DataNode) else node
    return _Source(node, value, not isinstance(value, (GraphNode, np.ndarray)))


# ------------------------------------------------------------------------------------------------------ groups


def _cluster_threads() -> int:
    """Threads that run tasks: the distributed client's workers, or the local scheduler's pool."""
    client = current_client()
    if client is not None:
        threads = sum(client.nthreads().values())
        if threads:
            return int(threads)
    return int(dask.config.get("num_workers", None) or _cpu_count())


def _cpu_count() -> int:
    from dask.system import CPU_COUNT

    return int(CPU_COUNT)


def block_groups(n_blocks: int, blocks: Sequence[int] | None = None, n_tasks: int | None = None) -> list[list[int]]:
    """``n_tasks`` groups of consecutive blocks (default all; at most one group per block) whose sizes differ by at
    most one, larger first: with as many tasks per thread, every thread gets the same number of blocks (20 blocks
    in 8 tasks are 3, 3, 3, 3, 2, 2, 2, 2 -- not 3, ..., 3, 2, which would leave one of 2 threads idle for the
    last task). The default: per cluster thread, one task for every ``MIN_BLOCKS_PER_TASK`` blocks, between 1 and
    ``TASKS_PER_THREAD``."""
    todo = list(range(n_blocks)) if blocks is None else [int(b) for b in blocks]
    if not todo:
        return []
    if n_tasks is None:
        threads = _cluster_threads()
        n_tasks = threads * min(TASKS_PER_THREAD, max(1, len(todo) // (threads * MIN_BLOCKS_PER_TASK)))
    n_groups = min(len(todo), max(1, int(n_tasks)))
    size, larger = divmod(len(todo), n_groups)
    bounds = np.cumsum([0] + [size + 1] * larger + [size] * (n_groups - larger))
    return [todo[a:b] for a, b in zip(bounds[:-1], bounds[1:])]


# ---------------------------------------------------------------------------------------------------- the task


def _whole_rows(first: int, size: int, tail: tuple) -> tuple:
    """The getter index of rows ``first .. first + size - 1`` with every column."""
    return (slice(first, first + size, None),) + tuple(slice(0, int(n), None) for n in tail)


@dataclass(frozen=True)
class _Layout:
    """The row blocks of a pass as run-length ``(size, count)`` pairs, shipped once with the pass's parameters
    (not per task), so a task's arguments do not grow with the number of blocks it reads."""

    runs: tuple
    tail: tuple

    @staticmethod
    def of(chunks: tuple[int, ...], tail: tuple) -> "_Layout":
        runs: list[list[int]] = []
        for c in chunks:
            if runs and runs[-1][0] == c:
                runs[-1][1] += 1
            else:
                runs.append([int(c), 1])
        return _Layout(tuple((a, b) for a, b in runs), tuple(int(n) for n in tail))

    def blocks(self) -> tuple[np.ndarray, np.ndarray]:
        """``(offsets, sizes)`` of every block (computed once per process)."""
        return _layout_arrays(self.runs)


@functools.lru_cache(maxsize=16)
def _layout_arrays(runs: tuple) -> tuple[np.ndarray, np.ndarray]:
    sizes = np.repeat([r[0] for r in runs], [r[1] for r in runs]).astype(np.int64)
    return block_offsets(tuple(sizes)), sizes


#: Parameters of a pass up to this size (the numpy arrays among them) travel inside every task; larger ones are one
#: key of the graph, sent once per worker. Inside the tasks, a pass on a distributed cluster has no dependency to
#: wait for: no round trip through the scheduler for the parameters' (and the store object's) key before its
#: tasks start, and no transfer of them from the worker that made them to the other workers.
_INLINE_BYTES = 256 * 2**10


_SCALARS = (int, float, complex, str, bool, type(None), np.generic)


def _by_reference(v) -> bool:
    """A function that pickles as its module and name (a few bytes): defined at a module's top level, no closure."""
    return (isinstance(v, types.FunctionType) and v.__closure__ is None and "<" not in v.__qualname__
            and getattr(v, "__module__", None) is not None)


def _inline_bytes(v) -> int | None:
    """The bytes ``v`` adds to a task that carries it, or None when unknown (it may be large): numpy arrays,
    scalars, top-level functions (the block kernel an OCC epoch proposes with), and tuples, lists and dataclass
    instances (a mixture's parameters, a D-Means step's state) made of them."""
    if isinstance(v, np.ndarray):
        return v.nbytes if v.dtype != object else None
    if isinstance(v, _SCALARS) or _by_reference(v):
        return 0
    if isinstance(v, (tuple, list)):
        parts = [_inline_bytes(x) for x in v]
    elif dataclasses.is_dataclass(v) and not isinstance(v, type):
        parts = [_inline_bytes(getattr(v, f.name)) for f in dataclasses.fields(v)]
    else:
        return None
    return None if None in parts else sum(parts)  # type: ignore[arg-type]


def _is_small(kwargs: dict) -> bool:
    """Whether the keyword arguments of a pass travel inside its tasks: at most ``_INLINE_BYTES`` of what
    :func:`_inline_bytes` can size (any other object may be large: it stays one key).
    ``dask.config.set({"dclust.inline-params": False})`` always keeps them one key (for comparisons)."""
    if not dask.config.get("dclust.inline-params", True):
        return False
    size = _inline_bytes(list(kwargs.values()))
    return size is not None and size <= _INLINE_BYTES


@dataclass(frozen=True)
class _Params:
    """What every task of a pass shares: the kernel, the merge, its keyword arguments, how to read, the layout."""

    fn: Callable
    merge: Callable | None
    kwargs: dict
    getter: "_Getter | None"
    layout: _Layout
    tree: "_Tree | None" = None


@dataclass(frozen=True)
class _Tree:
    """A pass whose tasks merge their blocks' partials in the subtrees of :func:`dclust._dask.reduce.merge_tree`'s
    tree over the ``n`` blocks that they hold whole (:func:`_merged_held`); ``starts`` maps the first block of every
    group to its position among the ``n``."""

    merge: Callable
    n: int
    split_every: int | None
    starts: dict
    keep: bool = False  # map_groups: every block's output is (kept, partial); the kept stay with the subtrees


def _run_group(params, blocks, source, data, extra, *aligned):
    """Run ``fn`` on every block of the group, reading the blocks from ``source`` (``data`` are then the getter's
    indices, or None for whole-row reads) or taking them from ``data``; merge the results (``merge``) or return them
    in a 1-D object array (the output chunk of :func:`map_partials`), or in the subtrees of ``tree``. ``extra``
    holds the group's per-block arguments (or is None)."""
    fn, merge, kwargs, reader, layout = params.fn, params.merge, params.kwargs, params.getter, params.layout
    _reuse_chunk_buffers()
    offsets, sizes = layout.blocks()
    out = []
    counter = _ChunkCounter()
    for i, b in enumerate(blocks):
        off, size = int(offsets[b]), int(sizes[b])
        if reader is None:
            Xb = data[i]
        else:
            index = _whole_rows(off, size, layout.tail) if data is None else data[i]
            Xb = _read(reader, source, index, b, off, size)
        others = [None if a is None else a[i] for a in aligned]
        if extra is not None:
            others.append(extra[i])
        out.append(fn(Xb, *others, offset=off, block_index=b, **kwargs))
        del Xb, others  # freed before the next block is read: a task holds one chunk at a time, not two
        counter.done()
    counter.flush()
    tree = params.tree
    if tree is not None and tree.keep:  # (map_groups) the blocks' kept outputs, then the subtrees of the partials
        nodes = merge_subtrees([o[1] for o in out], tree.merge, first=tree.starts[blocks[0]], n=tree.n,
                               split_every=tree.split_every)
        return [o[0] for o in out] + [nodes]
    if tree is not None:
        return merge_subtrees(out, tree.merge, first=tree.starts[blocks[0]], n=tree.n, split_every=tree.split_every)
    if merge is None:
        return _boxed_list(out)
    return merge(out) if len(out) > 1 else out[0]


def _compact(blocks: list[int]):
    """A ``range`` for consecutive block indices (a few bytes in the graph), else the list."""
    if blocks and blocks == list(range(blocks[0], blocks[0] + len(blocks))):
        return range(blocks[0], blocks[0] + len(blocks))
    return list(blocks)


def _boxed_list(parts: list) -> np.ndarray:
    box = np.empty(len(parts), dtype=object)
    box[:] = parts
    return box


def _block_key(X: da.Array, b: int) -> tuple:
    return (X.name, b) + (0,) * (X.ndim - 1)


def _aligned_index(a: da.Array, X: da.Array, todo: list[int]) -> dict[int, int] | None:
    """Block b of X -> the block of ``a`` that goes with it: the same index when ``a`` has X's row blocks (or one
    element per block of X), the position in ``todo`` when ``a`` has one block per listed block."""
    if a.numblocks[0] == X.numblocks[0]:
        return None
    if a.numblocks[0] == len(todo):
        return {b: i for i, b in enumerate(todo)}
    raise ValueError(f"an aligned array with {a.numblocks[0]} row blocks for {X.numblocks[0]} blocks of X")


def _pass_graph(fn, merge, X: da.Array, aligned, groups, kwargs, kind: str, block_args=None, tree=None):
    """The tasks of a pass over ``groups``; returns ``(graph, name)``, task ``(name, g)`` for group g."""
    aligned = [a if a is None or isinstance(a, Held) or a.ndim < 2 or a.numblocks[1] == 1 else a.rechunk({1: -1})
               for a in aligned]
    todo = [b for g in groups for b in g]
    where = [None if a is None or isinstance(a, Held) else _aligned_index(a, X, todo) for a in aligned]
    token = uuid.uuid4().hex  # a pass is built once; hashing its parameters (centres) would only cost time
    name, params_key = f"dclust-{kind}-{token}", f"dclust-params-{token}"
    reader = _reader_of(X)
    getter = None if reader is None else _Getter(reader.getter, reader.asarray, reader.lock)
    layout = _Layout.of(X.chunks[0], X.shape[1:])
    params = _Params(fn, merge, kwargs, getter, layout, tree)
    src = None if reader is None else _source_of(X, reader)
    inline = _is_small(kwargs) and (src is None or src.plain)
    layer: dict = {}
    if not inline:
        layer[params_key] = DataNode(params_key, params)
    for g, blocks in enumerate(groups):
        if reader is None:
            source, data = None, List(*[TaskRef(_block_key(X, b)) for b in blocks])
        else:
            source = src.value if inline else reader.source
            data = None if reader.canonical else [reader.index[b] for b in blocks]
        others = [None if a is None else TaskRef((a.array.name, g)) if isinstance(a, Held)
                  else List(*[TaskRef(_block_key(a, b if m is None else m[b])) for b in blocks])
                  for a, m in zip(aligned, where)]
        extra = None if block_args is None else [block_args[b] for b in blocks]
        layer[(name, g)] = Task(
            (name, g), _run_group, params if inline else TaskRef(params_key), _compact(blocks), source, data, extra,
            *others,
        )
    deps = [a.array if isinstance(a, Held) else a for a in aligned if a is not None]
    if reader is None:
        deps.insert(0, X)
    elif not inline:  # only the source object is needed: not X's layer of one getter task per chunk, which the
        layer[reader.source.key] = src.node  # scheduler would otherwise receive and cull on every pass
    return HighLevelGraph.from_collections(name, layer, dependencies=deps), name


def _groups_for(X: da.Array, blocks, grouped: bool) -> list[list[int]]:
    todo = list(range(X.numblocks[0])) if blocks is None else [int(b) for b in blocks]
    if not grouped or not dask.config.get("dclust.pass-grouping", True):
        return [[b] for b in todo]
    if _reader_of(X) is not None:
        return block_groups(X.numblocks[0], todo)
    held = _held_groups(X, todo)
    return [[b] for b in todo] if held is None else held


def _held_groups(X: da.Array, todo: list[int]) -> list[list[int]] | None:
    """The blocks of ``todo`` grouped as :func:`_persist_spread` placed them (one contiguous run per thread of the
    cluster), when X's blocks are held by a distributed cluster (persisted); else None.

    One task per run, on the worker that holds it, instead of one per block: a pass over persisted data is a few
    tasks and one merge (:func:`map_reduce`), not a task per block and a reduction tree across the workers. Where a
    run's blocks are elsewhere (a lost worker's blocks made again on another; an array persisted by Dask's own
    placement), the task takes them from there: only the speed depends on the placement, never the result.
    """
    if X.ndim > 2 or X.numblocks[1:] != (1,) * (X.ndim - 1) or current_client() is None or not on_cluster(X):
        return None
    n_runs = _spread_runs.get(X.name) or _cluster_threads()  # (known: no round trip to the scheduler per pass)
    run_of = {b: r for r, run in enumerate(block_groups(X.numblocks[0], None, n_runs)) for b in run}
    groups: list[list[int]] = []
    for i, b in enumerate(todo):  # consecutive blocks of ``todo`` in one run: the groups list ``todo`` in order
        if i and run_of[b] == run_of[todo[i - 1]]:
            groups[-1].append(b)
        else:
            groups.append([b])
    return groups


def map_reduce(
    fn: Callable[..., Any], merge: Callable[[Sequence[Any]], Any], X: da.Array, *aligned: da.Array | None,
    blocks=None, block_args=None, split_every: int | None = None, **kwargs,
) -> da.Array:
    """One pass: ``fn(X_block, *aligned_blocks, offset=, block_index=, **kwargs)`` on every row block, merged.

    ``merge(list_of_partials) -> partial`` must be associative; blocks are merged inside their task, then across
    tasks by :func:`dclust._dask.reduce.tree_reduce`. ``aligned`` are arrays with the row blocks of ``X`` (a
    ``None`` is passed through); ``block_args`` one small object per block, as in :func:`map_partials`. ``blocks``
    restricts the pass to those block indices (offsets and indices stay global). Returns a 0-d object dask array:
    ``.compute()[()]`` is the merged partial.
    """
    groups = _groups_for(X, blocks, grouped=True)
    if any(len(g) > 1 for g in groups) and _reader_of(X) is None:  # persisted blocks, grouped where they are
        return _merged_held(fn, merge, X, aligned, groups, kwargs, block_args, split_every)
    graph, name = _pass_graph(fn, merge, X, aligned, groups, kwargs, "pass", block_args)
    parts = da.Array(graph, name, chunks=((1,) * len(groups),), dtype=object, meta=np.empty(0, dtype=object))
    if len(groups) <= fan_in(split_every):  # the tree is one merge: one task, right after the pass's tasks
        refs = List(*[TaskRef((name, g)) for g in range(len(groups))])
        return _root_task(f"dclust-reduce-{name[len('dclust-pass-'):]}", parts, _merge_all, merge, refs)
    boxed = parts.map_blocks(_box_one, dtype=object, meta=np.empty(0, dtype=object))
    return tree_reduce(boxed, merge, split_every=split_every)


def _merge_all(merge, parts) -> np.ndarray:
    """The one merge of :func:`map_reduce`'s tree over a few groups' partials (its level of ``split_every`` or fewer:
    the same merge as :func:`dclust._dask.reduce.tree_reduce`'s, bit for bit)."""
    return boxed(merge(list(parts)), 0)


def _merged_held(fn, merge, X, aligned, groups, kwargs, block_args, split_every) -> da.Array:
    """:func:`map_reduce` over blocks held by the cluster (:func:`_held_groups`): every task merges its blocks'
    partials in the subtrees of :func:`dclust._dask.reduce.merge_tree`'s tree over the listed blocks that it holds
    whole, and one task finishes the tree -- the tree of one task per block, so the result is the same bit for bit
    however the blocks are grouped or placed (a fit that loses a worker gives the same centres), and no task
    receives more than a few partials per level of the tree from each group."""
    tree = _group_tree(merge, groups, split_every)
    graph, name = _pass_graph(fn, None, X, aligned, groups, kwargs, "pass", block_args, tree)
    parts = da.Array(graph, name, chunks=((1,) * len(groups),), dtype=object, meta=np.empty(0, dtype=object))
    return _tree_root(tree, name[len("dclust-pass-"):], [TaskRef((name, g)) for g in range(len(groups))], parts)


def _group_tree(merge, groups, split_every, keep: bool = False) -> _Tree:
    """The tree of :func:`dclust._dask.reduce.merge_tree` over the blocks of ``groups`` (in order), with the
    position of each group's first block."""
    starts = np.cumsum([0] + [len(g) for g in groups])
    return _Tree(merge, int(starts[-1]), split_every, {g[0]: int(a) for g, a in zip(groups, starts)}, keep)


def _tree_root(tree: _Tree, token: str, subtrees: list, parts: da.Array, layer: dict | None = None) -> da.Array:
    """0-d object array: the task that finishes ``tree`` from the tasks ``subtrees`` (refs to the groups' merged
    subtrees) over ``parts``, with the further tasks ``layer`` in its graph layer."""
    return _root_task(f"dclust-merge-{token}", parts, _merge_held, tree.merge, tree.n, tree.split_every,
                      List(*subtrees), layer=layer)


def _root_task(out: str, parts: da.Array, fn: Callable, *args, layer: dict | None = None) -> da.Array:
    """0-d object array: the one task ``out`` = ``fn(*args)`` over the tasks of ``parts``, with the further tasks
    ``layer`` in its graph layer."""
    layer = dict(layer or {})
    layer[(out,)] = Task((out,), fn, *args)
    graph = HighLevelGraph.from_collections(out, layer, dependencies=[parts])
    return da.Array(graph, out, chunks=(), dtype=object, meta=np.empty((), dtype=object))


def _merge_held(merge, n, split_every, subtrees) -> np.ndarray:
    """The task of :func:`_merged_held`: the root of the tree from the groups' subtrees."""
    return boxed(merge_nodes({k: v for nodes in subtrees for k, v in nodes.items()}, merge, n=n,
                             split_every=split_every), 0)


def _box_one(part) -> np.ndarray:
    return boxed(part, 1)


def map_partials(fn: Callable[..., Any], X: da.Array, *aligned: da.Array | None, blocks=None, block_args=None,
                 grouped: bool = True, **kwargs) -> da.Array:
    """One partial per row block: ``fn(X_block, *aligned_blocks[, block_args[b]], offset=, block_index=, **kwargs)``.

    Like :func:`map_reduce` without the merge; the result is a 1-D object array with one element per block (of
    ``blocks`` when given), for :func:`dclust._dask.reduce.tree_reduce` or for steps that need every block's
    partial (the proposals of the OCC epochs). ``aligned`` arrays have X's row blocks (or one block per listed
    block); ``block_args`` is a sequence with one small object per block of X, shipped only to its block's task.
    Blocks are grouped into tasks as in :func:`map_reduce`; ``grouped=False`` keeps one task, and one output chunk,
    per block (for results that are persisted and addressed block by block).
    """
    todo = list(range(X.numblocks[0])) if blocks is None else [int(b) for b in blocks]
    groups = _groups_for(X, todo, grouped=grouped)
    graph, name = _pass_graph(fn, None, X, aligned, groups, kwargs, "partials", block_args)
    parts = da.Array(graph, name, chunks=(tuple(len(g) for g in groups),), dtype=object,
                     meta=np.empty(0, dtype=object))  # each task boxes its blocks' partials: no layer of its own
    done = [b for g in groups for b in g]
    if done != todo:  # grouped by worker: back to the order of ``blocks``
        where = {b: i for i, b in enumerate(done)}
        parts = parts[np.array([where[b] for b in todo])]
    return parts


@dataclass(frozen=True)
class Held:
    """An aligned input of :func:`map_groups` that is the ``parts`` of an earlier :func:`map_groups` over the same
    groups: block ``i`` of group ``g`` takes the ``kept`` its block gave there, from the task's own result (one
    dependency per task, on the worker that made it: nothing moves)."""

    array: da.Array


class Grouped(NamedTuple):
    """What :func:`map_groups` returns."""

    parts: da.Array
    merged: da.Array
    groups: tuple


def map_groups(fn: Callable[..., Any], merge: Callable[[Sequence[Any]], Any], X: da.Array, *aligned: Any,
               groups: Sequence[Sequence[int]] | None = None, block_args=None, split_every: int | None = None,
               **kwargs: Any) -> Grouped:
    """One pass whose tasks keep a result per block where they made it and merge the rest: for state that stays
    on the workers from pass to pass (BP-means' bits).

    ``fn(X_block, *aligned_blocks[, block_args[b]], offset=, block_index=, **kwargs) -> (kept, partial)`` on
    every row block; one task per group of consecutive blocks (``groups``, default as :func:`map_reduce` groups
    them). Each task returns ``[kept_0, ..., kept_m-1, nodes]``: its blocks' ``kept`` and the subtrees of
    :func:`dclust._dask.reduce.merge_tree`'s tree over every block's ``partial`` that it holds whole. ``aligned``
    are as in :func:`map_reduce`, or :class:`Held` (the ``parts`` of an earlier call over the same ``groups``).

    Returns :class:`Grouped` ``(parts, merged, groups)``: ``parts`` the tasks (a 1-D object array, one chunk per
    group: persist it and use it as :class:`Held`, never compute it as an array); ``merged`` a 0-d object array,
    the root of the tree: ``merge`` of the partials as :func:`dclust._dask.reduce.tree_reduce` merges them, bit
    for bit, however the blocks are grouped or placed (a small task per group takes its subtrees where they are,
    and one task finishes the tree); ``groups`` the groups, a tuple of tuples of block indices.
    """
    groups = _groups_for(X, None, grouped=True) if groups is None else [list(g) for g in groups]
    if [b for g in groups for b in g] != list(range(X.numblocks[0])):
        raise ValueError(f"groups {groups} that are not the {X.numblocks[0]} blocks in order")
    tree = _group_tree(merge, groups, split_every, keep=True)
    graph, name = _pass_graph(fn, None, X, aligned, groups, kwargs, "groups", block_args, tree)
    parts = da.Array(graph, name, chunks=(tuple(len(g) for g in groups),), dtype=object,
                     meta=np.empty(0, dtype=object))
    token = name[len("dclust-groups-"):]
    sub = f"dclust-subtrees-{token}"
    layer = {(sub, g): Task((sub, g), _last, TaskRef((name, g))) for g in range(len(groups))}
    merged = _tree_root(tree, token, [TaskRef(key) for key in layer], parts, layer)
    return Grouped(parts, merged, tuple(tuple(int(b) for b in g) for g in groups))


def map_held(fn: Callable[..., Any], held: Held, groups: Sequence[Sequence[int]], chunks: tuple, *, dtype: Any,
             block_args=None, **kwargs: Any) -> da.Array:
    """A lazy array with one row block per block of ``groups``: block ``b`` is ``fn(kept_b[, block_args[b]],
    **kwargs)`` of the ``kept`` it gave in the :func:`map_groups` whose ``parts`` are ``held``, made where that
    is held. ``chunks`` are the array's dask chunks (one row block per block)."""
    token = uuid.uuid4().hex
    name = f"dclust-held-{token}"
    run = functools.partial(fn, **kwargs)
    layer: dict = {}
    for g, blocks in enumerate(groups):
        for i, b in enumerate(blocks):
            key = (name, int(b)) + (0,) * (len(chunks) - 1)
            args = () if block_args is None else (block_args[b],)
            layer[key] = Task(key, _held_block, run, TaskRef((held.array.name, g)), i, *args)
    graph = HighLevelGraph.from_collections(name, layer, dependencies=[held.array])
    return da.Array(graph, name, chunks=chunks, dtype=dtype, meta=np.empty((0,) * len(chunks), dtype=dtype))


def _held_block(fn: Callable[..., Any], items: list, i: int, *args: Any) -> Any:
    return fn(items[i], *args)


def _last(items: list) -> Any:
    """(On the worker holding a :func:`map_groups` task's result.) Its subtrees, without the kept outputs."""
    return items[-1]


def _first(parts: np.ndarray) -> np.ndarray:
    return parts[0]


def map_labels(fn: Callable[..., np.ndarray], X: da.Array, dtype=np.int32, **kwargs) -> da.Array:
    """Lazy per-row output ``fn(X_block, offset=, block_index=, **kwargs) -> (n_b,)`` with X's row chunks.

    The output block ``b`` is a task that takes the result of the pass's task for block ``b``, written out (no
    ``map_blocks``: its signature inspection and tokenizing took 3 x the time of the rest, which counts for a
    stream that labels every batch)."""
    groups = _groups_for(X, None, grouped=False)
    graph, name = _pass_graph(fn, None, X, (), groups, kwargs, "labels")
    parts = da.Array(graph, name, chunks=((1,) * len(groups),), dtype=object, meta=np.empty(0, dtype=object))
    out = f"{name}-rows"
    layer = {(out, g): Task((out, g), _first, TaskRef((name, g))) for g in range(len(groups))}
    return da.Array(HighLevelGraph.from_collections(out, layer, dependencies=[parts]), out, chunks=(X.chunks[0],),
                    dtype=dtype, meta=np.empty(0, dtype=dtype))


# Typed entry points to dask's array API for the strictly typed modules above this layer: dask annotates neither
# compute, persist, from_array, asarray, from_delayed, concatenate nor the methods rechunk, astype and
# compute_chunk_sizes, and types the method Array.map_blocks by functools.wraps as the module-level da.map_blocks
# (whose first parameter is the function), so a type checker rejects every method call.


def compute(*collections: Any, scheduler: str | None = None) -> tuple[Any, ...]:
    """Compute dask collections together (shared inputs are read once); ``compute(x)[0]`` is ``x.compute()``.
    ``scheduler`` names one (``"threads"``: in this process) instead of the default (a ``distributed`` client's)."""
    return dask.compute(*collections, scheduler=scheduler)


def single_chunk(X: da.Array) -> Any:
    """The one chunk of ``X`` (one block along every dimension) as a Delayed: computing it gives the chunk itself,
    without the copy of Dask's concatenation that ``compute(X)`` makes."""
    return X.to_delayed().ravel()[0]


def current_client() -> Any | None:
    """The ``distributed`` client that runs Dask's work here, or None: there is none, or the configured scheduler
    is another (``dask.config.set(scheduler="threads")`` beside a client means the threads)."""
    try:
        from distributed import default_client

        client = default_client()
    except (ImportError, ValueError):
        return None
    return client if getattr(dask.base.get_scheduler(), "__self__", None) is client else None


def on_cluster(*collections: Any) -> bool:
    """Whether any of the dask ``collections`` (None skipped) depends on data a ``distributed`` cluster holds
    (persisted futures)."""
    try:
        from distributed import futures_of
    except ImportError:  # pragma: no cover - distributed is a dependency
        return False
    return any(c is not None and bool(futures_of(c)) for c in collections)


def persist(X: da.Array) -> da.Array:
    """``X.persist()``: its blocks computed and kept in (cluster) memory."""
    return X.persist()


def map_blocks(X: da.Array, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> da.Array:
    """``X.map_blocks(fn, *args, **kwargs)``."""
    return X.map_blocks(fn, *args, **kwargs)


def from_array(x: Any, chunks: Any) -> da.Array:
    """``da.from_array(x, chunks=chunks)``."""
    return da.from_array(x, chunks=chunks)


def rechunk(X: da.Array, chunks: Any) -> da.Array:
    """``X.rechunk(chunks)``."""
    return X.rechunk(chunks)


def astype(X: da.Array, dtype: Any) -> da.Array:
    """``X.astype(dtype)``."""
    return X.astype(dtype)


def compute_chunk_sizes(X: da.Array) -> da.Array:
    """``X.compute_chunk_sizes()``: unknown (NaN) chunk sizes resolved by one pass over the blocks' lengths."""
    return X.compute_chunk_sizes()


def asarray(x: Any) -> da.Array:
    """``da.asarray(x)``."""
    return da.asarray(x)


def from_delayed(value: Any, shape: tuple[int, ...], dtype: Any) -> da.Array:
    """``da.from_delayed(value, shape=shape, dtype=dtype)``."""
    return da.from_delayed(value, shape=shape, dtype=dtype)


def concatenate(arrays: Sequence[da.Array], axis: int = 0) -> da.Array:
    """``da.concatenate(arrays, axis=axis)``."""
    return da.concatenate(arrays, axis=axis)


def persist_if_fits(X: da.Array, persist, logger) -> da.Array:
    """Persist ``X`` in (cluster) memory when asked to, or, for ``"auto"``, when it fits comfortably.

    "Fits" means the array takes at most half the memory of the distributed cluster's workers (or a quarter of
    this machine's memory under the local schedulers).
    """
    if persist is False or persist is None:
        return X
    if persist == "auto":
        budget = _memory_budget()
        if budget is None or X.nbytes > budget:
            return X
        logger.info("persisting the data in memory (%.1f MB of a %.1f MB budget)", X.nbytes / 1e6, budget / 1e6)
    else:
        logger.info("persisting the data in memory (%.1f MB)", X.nbytes / 1e6)
    try:
        return _persisted(_persist_spread(X))
    except (OSError, DclustError):  # the storage itself (network, permissions), or already named
        raise
    except Exception as exc:  # noqa: BLE001 - Dask's own read of a damaged chunk: name it as a pass would
        reader = _reader_of(X)
        if reader is None:
            raise
        from .._store._zarr import chunk_error  # only on this error path

        raise chunk_error(_source_of(X, reader).value, 0, max(int(X.shape[0]) - 1, 0), exc) from exc


def _read_block(reader: "_Getter", source: Any, index: Any, b: int, first: int, size: int) -> np.ndarray:
    """The task that reads block ``b`` into the memory of the worker chosen for it (:func:`_persist_spread`)."""
    _reuse_chunk_buffers()
    return _read(reader, source, index, b, first, size)


#: Array name -> the number of contiguous runs :func:`_persist_spread` placed its blocks in (one per thread).
_spread_runs: dict[str, int] = {}


def _persist_spread(X: da.Array) -> da.Array:
    """``X.persist()``, with its row blocks spread over the workers of a distributed cluster in contiguous runs,
    as many blocks per worker as its share of the cluster's threads.

    Left to itself, the scheduler puts the read of every chunk of a store where the store object (the one
    dependency of those tasks) is: 18 of 20 blocks on one of two workers was measured, and a persisted pass then
    runs on that worker alone (its tasks go where their blocks are). A plain read of a store is
    persisted as one read task per block with the store object inside (no key to fetch first). Every block task is
    bound to its worker until the blocks are in memory (a loose binding ended 13:7 on a loaded machine: work
    stealing moves such tasks), then loosely (a lost worker's blocks are made again elsewhere). The persisted array
    keeps X's name and chunks; blocks made by other tasks (not a plain read) are placed the same way.
    """
    client = current_client()
    if client is None:
        return X.persist()
    threads = client.nthreads()
    if not threads or X.ndim > 2 or X.numblocks[1:] != (1,) * (X.ndim - 1):
        return client.persist(X)
    slots = _thread_slots(threads)
    if len(_spread_runs) > 256:
        _spread_runs.clear()
    _spread_runs[X.name] = len(slots)
    reader = _reader_of(X)
    src = None if reader is None else _source_of(X, reader)
    if reader is not None and src.plain:
        getter = _Getter(reader.getter, reader.asarray, reader.lock)
        offsets = block_offsets(X.chunks[0])
        layer = {_block_key(X, b): Task(_block_key(X, b), _read_block, getter, src.value, reader.index[b], b,
                                        int(offsets[b]), int(X.chunks[0][b])) for b in range(X.numblocks[0])}
        X = da.Array(HighLevelGraph.from_collections(X.name, layer, dependencies=[]), X.name, X.chunks, X.dtype,
                     meta=X._meta)
    return _persist_placed(client, X, zip(slots, block_groups(X.numblocks[0], None, len(slots))), sorted(threads))


def persist_aligned(A: da.Array, X: da.Array) -> da.Array:
    """Persist ``A``, whose row blocks are aligned with X's (an input of every pass over X, such as GM-PR's links),
    where the tasks of a pass over X run: on a distributed cluster, the blocks of A that one task of the pass takes
    together on one worker, the tasks dealt to the cluster's threads in turn (a pass over a store), or in the runs
    X's own blocks were spread in (X persisted by :func:`persist_if_fits`).

    A pass's tasks go where their blocks of A are. Left to the scheduler, A was all on one worker, and so were 8 of 8
    GM-PR E-step tasks of every pass while the other worker idled; copies of A on every worker do not last
    (distributed's active memory manager drops the replicas that no waiting task needs within seconds).
    """
    client = current_client()
    if client is None or A.ndim > 2 or A.numblocks[1:] != (1,) * (A.ndim - 1) or A.numblocks[0] != X.numblocks[0]:
        return persist(A)
    if _held_groups(X, list(range(X.numblocks[0]))) is not None:
        return _persist_spread(A)  # X's runs: the same contiguous runs over the same threads
    threads = client.nthreads()
    if not threads:
        return client.persist(A)
    slots = _thread_slots(threads, dealt=True)
    groups = _groups_for(X, None, grouped=True)
    where = ((slots[g % len(slots)], blocks) for g, blocks in enumerate(groups))
    return _persist_placed(client, A, where, sorted(threads))


def _thread_slots(threads: dict, dealt: bool = False) -> list:
    """One entry per thread of the cluster: its worker's address, workers sorted; with ``dealt``, the workers in
    turn (one thread of each, then a second of each...: fewer tasks than threads still reach every worker)."""
    counts = {w: max(1, int(threads[w])) for w in sorted(threads)}
    if not dealt:
        return [w for w, c in counts.items() for _ in range(c)]
    return [w for i in range(max(counts.values(), default=0)) for w, c in counts.items() if c > i]


def _persist_placed(client: Any, X: da.Array, where, workers: list) -> da.Array:
    """``client.persist(X)`` with the row blocks of every ``(worker, blocks)`` of ``where`` bound to that worker
    until they are in memory, then loosely (see :func:`_persist_spread`); ``workers``: every worker of the cluster,
    sorted (read once by the caller)."""
    place: dict = {}
    for worker, blocks in where:
        place.update({_block_key(X, b): [worker] for b in blocks})
    with dask.annotate(workers=functools.partial(_placement, place, workers)):
        Xp = client.persist(X)
    try:
        _persisted(Xp)
    finally:  # in place now: a lost worker's blocks may be made again anywhere
        client.run_on_scheduler(_loosen, keys=list(place))
    return Xp


def _placement(place: dict, every: list, key: Any) -> list:
    """The workers a task of :func:`_persist_spread` asks for: its block's, or any (other tasks of the graph)."""
    return place.get(key, every)


def _loosen(keys: list, dask_scheduler: Any = None) -> None:
    """(On the scheduler.) The placement of the persisted blocks ``keys`` becomes a preference."""
    for key in keys:
        ts = dask_scheduler.tasks.get(key)
        if ts is not None:
            ts.loose_restrictions = True


def _persisted(Xp: da.Array) -> da.Array:
    """``Xp`` once its blocks are in (cluster) memory: a failed read raises here, not inside the first pass."""
    try:
        from distributed import futures_of, wait
    except ImportError:
        return Xp
    futures = futures_of(Xp)
    if futures:
        wait(futures)
        for f in futures:
            if f.status == "error":
                f.result()  # raises the task's exception
    return Xp


def persist_and_compute(kept: da.Array, value: da.Array) -> tuple[da.Array, Any]:
    """``kept`` persisted (in cluster memory) and the element of the 0-d object array ``value``, computed in the same
    submission (its result is fetched as it is, without the finalize task of a second ``compute``)."""
    kept, value = dask.persist(kept, value)
    try:
        from distributed import futures_of
    except ImportError:  # pragma: no cover - distributed is a dependency
        futures_of = None
    futures = [] if futures_of is None else futures_of(value)
    return kept, (futures[0].result() if futures else value.compute())[()]


def _memory_budget() -> float | None:
    client = current_client()
    if client is not None:
        workers = client.scheduler_info().get("workers", {})
        limits = [w.get("memory_limit") or 0 for w in workers.values()]
        total = float(sum(limits))
        return total / 2 if total > 0 else None
    try:
        import psutil

        return psutil.virtual_memory().total / 4
    except ImportError:  # pragma: no cover - psutil ships with distributed
        return None
