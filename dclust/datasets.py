"""Synthetic data generated lazily and deterministically, chunk by chunk (pure numpy + dask; no I/O).

Rows are drawn in fixed generation blocks of :data:`GENERATION_ROWS` rows, each from its own numpy ``Generator``
seeded by ``SeedSequence(random_state, spawn_key=(1, block, stream))``. A chunk generates only the blocks it
overlaps, so every row depends on ``random_state`` and its row index alone: the data is identical whatever the
scheduler, the order of computation, the ``chunk_rows`` used and even ``n_samples`` (a smaller data set is a prefix of
a larger one).
"""

from __future__ import annotations

import numbers
from typing import Any, NamedTuple

import dask.array as da
import numpy as np

from ._dask.passes import from_array, map_blocks
from .errors import InvalidParameterError, message

__all__ = ["Blobs", "make_blobs", "GENERATION_ROWS"]

#: Rows per generation block (the unit that owns a seed). Chunks of a multiple of this size waste no draws.
GENERATION_ROWS = 8192


class Blobs(NamedTuple):
    """Result of :func:`make_blobs`: the points, the true blob of every point and the blob centres.

    Examples
    --------
    >>> import dclust
    >>> blobs = dclust.make_blobs(n_samples=1000, n_features=2, centers=3, chunk_rows=250, random_state=0)
    >>> blobs.X.shape, blobs.X.numblocks, blobs.centers.shape, int(blobs.labels.max().compute())
    ((1000, 2), (4, 1), (3, 2), 2)
    """

    #: dask.array.Array, shape (n_samples, n_features): the points, row-chunked by ``chunk_rows``.
    X: da.Array
    #: dask.array.Array of int32, shape (n_samples,), or None: the index of the centre each point was drawn from.
    labels: da.Array | None
    #: numpy.ndarray of float64, shape (n_centers, n_features): the centres.
    centers: np.ndarray


def _bad(name: str, expected: str, value: Any, fix: str) -> InvalidParameterError:
    return InvalidParameterError(message(f"make_blobs({name}=...)", expected, repr(value), fix))


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise _bad(name, "an integer >= 1", value, f"Pass a positive integer {name}.")
    return int(value)


def _seed(random_state: Any) -> int:
    if random_state is None:
        # numpy's stubs type entropy as int | Sequence[int] | None; a new SeedSequence's is an int
        return int(np.random.SeedSequence().entropy)  # type: ignore[arg-type]
    if isinstance(random_state, np.random.Generator):
        return int(random_state.integers(2**63))
    if isinstance(random_state, bool) or not isinstance(random_state, numbers.Integral) or random_state < 0:
        raise _bad("random_state", "None, an int >= 0 or a numpy.random.Generator", random_state,
                   "Pass random_state=0 (any fixed int) for reproducible data.")
    return int(random_state)


def _block_rows(
    start: int, stop: int, seed: int, centers: np.ndarray, std: np.ndarray, dtype: np.dtype | None
) -> tuple[np.ndarray, np.ndarray | None]:
    """Labels (int32) and, if ``dtype`` is given, points of rows ``[start, stop)``."""
    k, d = centers.shape
    labels = np.empty(stop - start, dtype=np.int32)
    X = np.empty((stop - start, d), dtype=dtype) if dtype is not None else None
    first, last = start // GENERATION_ROWS, (stop - 1) // GENERATION_ROWS
    for b in range(first, last + 1):
        b0 = b * GENERATION_ROWS
        lo, hi = max(start, b0) - b0, min(stop, b0 + GENERATION_ROWS) - b0
        out = slice(b0 + lo - start, b0 + hi - start)
        # Draw the block's first `hi` rows; numpy's draws are sequential, so they are a prefix of the full block.
        lab = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(1, b, 0))).integers(
            0, k, size=hi, dtype=np.int64
        )[lo:hi]
        labels[out] = lab
        if X is not None:
            noise = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(1, b, 1))).standard_normal((hi, d))
            X[out] = centers[lab] + std[lab, None] * noise[lo:hi]
    return labels, X


def _x_block(bounds: np.ndarray, *, seed: int, centers: np.ndarray, std: np.ndarray, out_dtype: str) -> np.ndarray:
    X = _block_rows(int(bounds[0, 0]), int(bounds[0, 1]), seed, centers, std, np.dtype(out_dtype))[1]
    assert X is not None  # a dtype was given, so the rows were drawn
    return X


def _label_block(bounds: np.ndarray, *, seed: int, centers: np.ndarray, std: np.ndarray) -> np.ndarray:
    return _block_rows(int(bounds[0, 0]), int(bounds[0, 1]), seed, centers, std, None)[0]


def make_blobs(
    n_samples: int,
    n_features: int = 8,
    centers: int | np.ndarray = 16,
    *,
    cluster_std: float | np.ndarray = 1.0,
    center_box: tuple[float, float] = (-10.0, 10.0),
    chunk_rows: int = 500_000,
    dtype: str | np.dtype = "float32",
    random_state: int | np.random.Generator | None = 0,
    return_labels: bool = True,
) -> Blobs:
    """Isotropic Gaussian blobs as a lazy dask array, generated chunk by chunk on the workers.

    Parameters
    ----------
    n_samples : int
        Number of points N.
    n_features : int, default 8
        Number of features D.
    centers : int or array of shape (n_centers, n_features), default 16
        Number of centres (drawn uniformly in ``center_box`` from ``random_state``), or the centres themselves.
    cluster_std : float or array of shape (n_centers,), default 1.0
        Standard deviation of each blob (>= 0).
    center_box : (float, float), default (-10, 10)
        Bounds of the uniform distribution the centres are drawn from.
    chunk_rows : int, default 500_000
        Rows per dask chunk. Does not change the data.
    dtype : {"float32", "float64"}, default "float32"
        dtype of ``X`` (points are computed in float64, then cast).
    random_state : int, numpy.random.Generator or None, default 0
        Seed of everything. A Generator is used once, to draw the seed; None draws a fresh one.
    return_labels : bool, default True
        Also return the ground-truth labels (otherwise ``labels`` is None).

    Returns
    -------
    Blobs
        ``X``: dask array (n_samples, n_features) of ``dtype`` with chunks ``(chunk_rows, n_features)``;
        ``labels``: dask int32 array (n_samples,) with the same row chunks, or None;
        ``centers``: numpy float64 array (n_centers, n_features).

    Examples
    --------
    >>> b = make_blobs(1000, n_features=2, centers=3, chunk_rows=300, random_state=0)
    >>> b.X.shape, b.X.dtype.name, b.X.chunks[0], b.centers.shape
    ((1000, 2), 'float32', (300, 300, 300, 100), (3, 2))
    >>> bool((make_blobs(1000, 2, 3, chunk_rows=64).X.compute() == b.X.compute()).all())
    True
    """
    n_samples = _positive_int("n_samples", n_samples)
    n_features = _positive_int("n_features", n_features)
    chunk_rows = _positive_int("chunk_rows", chunk_rows)
    try:
        dt = np.dtype(dtype)
    except TypeError:
        dt = None
    if dt is None or dt.kind != "f" or dt.itemsize < 4:
        raise _bad("dtype", "'float32' or 'float64'", dtype, "Pass dtype='float32'.")
    if not isinstance(return_labels, bool):
        raise _bad("return_labels", "True or False", return_labels, "Pass a bool.")
    if (
        not isinstance(center_box, (tuple, list))
        or len(center_box) != 2
        or not all(isinstance(v, numbers.Real) and np.isfinite(v) for v in center_box)
        or not center_box[0] < center_box[1]
    ):
        raise _bad("center_box", "a pair (low, high) of finite numbers with low < high", center_box,
                   "Pass e.g. center_box=(-10, 10).")
    seed = _seed(random_state)

    if isinstance(centers, numbers.Integral) and not isinstance(centers, bool):
        k = _positive_int("centers", centers)
        rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(0,)))
        C = rng.uniform(float(center_box[0]), float(center_box[1]), size=(k, n_features))
    else:
        C = np.asarray(centers, dtype=np.float64) if hasattr(centers, "__len__") else None
        if C is None or C.ndim != 2 or C.shape[0] < 1 or C.shape[1] != n_features or not np.isfinite(C).all():
            raise _bad("centers", f"an int >= 1 or a finite array of shape (n_centers, {n_features})",
                       centers if C is None else f"array of shape {C.shape}",
                       "Pass the number of centres, or centres with n_features columns (and n_features=...).")
        k = C.shape[0]
    std = None
    if not isinstance(cluster_std, bool) and np.ndim(cluster_std) in (0, 1) and np.size(cluster_std) in (1, k):
        try:
            std = np.broadcast_to(np.asarray(cluster_std, dtype=np.float64), (k,)).copy()
        except (TypeError, ValueError):
            std = None
    if std is None or not np.isfinite(std).all() or (std < 0).any():
        raise _bad("cluster_std", f"a number >= 0 or {k} numbers >= 0 (one per centre)", cluster_std,
                   "Pass e.g. cluster_std=1.0.")

    rows = tuple(min(chunk_rows, n_samples - s) for s in range(0, n_samples, chunk_rows))
    starts = np.arange(0, n_samples, chunk_rows, dtype=np.int64)
    bounds = from_array(np.stack([starts, starts + np.asarray(rows, dtype=np.int64)], axis=1), (1, 2))
    X = map_blocks(
        bounds, _x_block, seed=seed, centers=C, std=std, out_dtype=dt.str, chunks=(rows, (n_features,)),
        dtype=dt, meta=np.empty((0, 0), dtype=dt), token="make_blobs-X",
    )
    labels = None
    if return_labels:
        labels = map_blocks(
            bounds, _label_block, seed=seed, centers=C, std=std, chunks=(rows,), drop_axis=1, dtype=np.int32,
            meta=np.empty((0,), dtype=np.int32), token="make_blobs-labels",
        )
    return Blobs(X, labels, C)


# --------------------------------------------------------------------------------------------------------------
# moving rings ([DM] 8.2, docs/algorithms.md 10.2)
# --------------------------------------------------------------------------------------------------------------


class Rings(NamedTuple):
    """Result of :func:`moving_rings`: one batch of points per time step, their ring indices and the ring centres.

    Examples
    --------
    >>> from dclust.datasets import moving_rings
    >>> rings = moving_rings(n_steps=3, n_points=60, random_state=0)
    >>> len(rings.batches), rings.batches[0].shape, sorted(set(rings.labels[0].tolist())), rings.centers.shape
    (3, (60, 2), [0, 1, 2], (3, 3, 2))
    """

    #: list of numpy float64 arrays, one (n_points, 2) batch per time step.
    batches: list[np.ndarray]
    #: list of numpy int64 arrays, one (n_points,) array of ring indices (0 = first radius) per time step.
    labels: list[np.ndarray]
    #: numpy float64 array (n_steps, n_rings, 2): the centre of every ring at every step (all equal under
    #: ``process="per-axis"``, where the rings move together).
    centers: np.ndarray


def _rings_check(name: str, value: Any, ok: bool, expected: str, fix: str) -> None:
    if not ok:
        raise InvalidParameterError(message(f"moving_rings({name}=...)", expected, repr(value), fix))


def _ring_shares(n_points: int, n_rings: int) -> np.ndarray:
    """Points per ring in the authors' proportions 1 : 1/2 : 1/3 ..., rounded by largest remainder."""
    w = 1.0 / np.arange(1, n_rings + 1)
    raw = n_points * w / w.sum()
    counts = np.floor(raw).astype(np.int64)
    extra = n_points - int(counts.sum())
    counts[np.argsort(-(raw - counts), kind="stable")[:extra]] += 1
    return np.asarray(counts, dtype=np.int64)


def _paper_code_rings(n_steps: int, n_points: int, r: np.ndarray, noise: float, motion: float, start: np.ndarray,
                      seed: int) -> Rings:
    """The ring process of the authors' program (``example/movingringdatagen.hpp``); see :func:`moving_rings`."""
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(5,)))
    n_rings = r.size
    leash = float(r.max()) / (2.0 * n_rings)
    counts = _ring_shares(n_points, n_rings)
    labels_t = np.repeat(np.arange(n_rings, dtype=np.int64), counts)
    c = np.repeat(start[None, :], n_rings, axis=0)
    batches, labels, centers = [], [], np.empty((n_steps, n_rings, 2))
    for t in range(n_steps):
        for j in range(n_rings):  # move, then tether each ring to the one before it
            step, heading = rng.normal(0.0, motion), rng.uniform(0.0, 2.0 * np.pi)
            c[j] += step * np.array([np.cos(heading), np.sin(heading)])
            if j >= 1:
                if leash == 0.0:
                    c[j] = c[j - 1]
                while np.linalg.norm(c[j] - c[j - 1]) > leash:
                    c[j] = (c[j - 1] + c[j]) / 2.0
        centers[t] = c
        length = r[labels_t] + noise * rng.standard_normal(n_points)
        angle = rng.uniform(0.0, 2.0 * np.pi, size=n_points)
        batches.append(c[labels_t] + length[:, None] * np.stack([np.cos(angle), np.sin(angle)], axis=1))
        labels.append(labels_t.copy())
    return Rings(batches, labels, centers)


def moving_rings(
    n_steps: int = 100,
    n_points: int = 400,
    *,
    process: str = "per-axis",
    radii: tuple[float, ...] = (0.4, 0.2, 0.0),
    noise: float | None = None,
    motion: float = 0.05,
    start: tuple[float, float] = (0.5, 0.5),
    noise_model: str | None = None,
    random_state: int | np.random.Generator | None = 0,
) -> Rings:
    """Rings moving over time, the SD-Means benchmark of [DM] 8.2 (docs/algorithms.md 10.2).

    Two processes, as for :func:`moving_gaussians`:

    - ``"per-axis"`` (the paper's text, as docs/algorithms.md 10.2 reads it): concentric rings move together. At
      every step, each point picks a ring uniformly at random and an angle uniformly in [0, 2 pi), and is placed at
      ``centre + radius (cos, sin) + noise offset``. After the points of a step are emitted, the common centre moves
      by ``N(0, motion^2 I)``. The choices [DM] leaves open (start centre, per-point ring choice, number of steps)
      are those of E-DM8.
    - ``"paper-code"`` (the authors' program, ``example/mainsdm.cpp`` with ``movingringdatagen.hpp`` at
      github.com/trevorcampbell/dynamic-means): every ring has its own centre, all starting at ``start``. Before
      the points of every step (the first included), ring j moves by a radial step (length ``N(0, motion^2)``,
      uniform direction); then, for j >= 1, its centre is moved halfway to the centre of ring j - 1 until the two
      are at most ``max(radii) / (2 n_rings)`` apart (0.067 for the default radii), so the rings stay nearly
      concentric. Ring j emits a share of ``n_points`` proportional to ``1 / (j + 1)`` (``n_points=367`` gives the
      program's 200, 100 and 67 points), each at distance ``radius_j + N(0, noise^2)`` from its centre in a
      uniform direction (radial noise only). The points come ordered by ring.

    Parameters
    ----------
    n_steps : int, default 100
        Number of time steps.
    n_points : int, default 400
        Points per step (400 in [DM] 8.2).
    process : {"per-axis", "paper-code"}, default "per-axis"
        The generating process (above).
    radii : tuple of float, default (0.4, 0.2, 0.0)
        Ring radii (>= 0); the label of a point is the index of its ring in ``radii``. A radius of 0 is a blob.
    noise : float, optional
        Scale of the noise of every point (see ``noise_model``). Default: 0.03 (the paper's text) with
        ``"per-axis"``, 0.01 (the program's ``clusterStdDev``) with ``"paper-code"``.
    motion : float, default 0.05
        ``"per-axis"``: standard deviation of the per-axis displacement of the common centre between steps;
        ``"paper-code"``: standard deviation of the length of each ring's radial step.
    start : (float, float), default (0.5, 0.5)
        Centre at the first step (``"paper-code"``: before the first move).
    noise_model : {"per-axis", "radial"}, optional
        ``"per-axis"`` only (default ``"per-axis"``): ``"per-axis"`` adds ``N(0, noise^2 I)``
        (docs/algorithms.md 10.2); ``"radial"`` adds an offset of length ``N(0, noise^2)`` in a uniform direction
        (about ``noise / sqrt(2)`` per axis). ``"paper-code"`` has its own noise (above) and accepts only None.
    random_state : int, numpy.random.Generator or None, default 0
        Seed. Fewer steps give a prefix of more steps.

    Returns
    -------
    Rings
        ``batches`` (list of (n_points, 2) arrays), ``labels`` (list of (n_points,) int64 ring indices) and
        ``centers`` ((n_steps, n_rings, 2)).

    Examples
    --------
    >>> r = moving_rings(n_steps=3, n_points=30, random_state=0)
    >>> len(r.batches), r.batches[0].shape, sorted(set(r.labels[0].tolist())), r.centers.shape
    (3, (30, 2), [0, 1, 2], (3, 3, 2))
    >>> bool(np.array_equal(moving_rings(2, 30).batches[1], r.batches[1]))
    True
    >>> code = moving_rings(n_steps=2, n_points=367, process="paper-code", random_state=0)
    >>> np.bincount(code.labels[0]).tolist()
    [200, 100, 67]
    """
    for name, value in (("n_steps", n_steps), ("n_points", n_points)):
        _rings_check(name, value, isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= 1,
                     "an integer >= 1", f"Pass a positive integer {name}.")
    _rings_check("process", process, process in ("per-axis", "paper-code"), "'per-axis' or 'paper-code'",
                 "Pass process='per-axis' (the paper's text) or 'paper-code' (the authors' program).")
    r = np.asarray(radii, dtype=np.float64) if isinstance(radii, (tuple, list, np.ndarray)) else None
    _rings_check("radii", radii, r is not None and r.ndim == 1 and r.size >= 1 and bool(np.isfinite(r).all())
                 and bool((r >= 0).all()), "a non-empty sequence of finite radii >= 0", "Pass e.g. (0.4, 0.2, 0.0).")
    if noise is None:
        noise = 0.03 if process == "per-axis" else 0.01
    for name, number in (("noise", noise), ("motion", motion)):
        _rings_check(name, number, isinstance(number, numbers.Real) and not isinstance(number, bool)
                     and np.isfinite(number) and number >= 0, "a finite number >= 0", f"Pass e.g. {name}=0.05.")
    s = np.asarray(start, dtype=np.float64) if isinstance(start, (tuple, list, np.ndarray)) else None
    _rings_check("start", start, s is not None and s.shape == (2,) and bool(np.isfinite(s).all()),
                 "a pair (x, y) of finite numbers", "Pass e.g. start=(0.5, 0.5).")
    _rings_check("random_state", random_state, random_state is None or isinstance(random_state, np.random.Generator)
                 or (isinstance(random_state, numbers.Integral) and not isinstance(random_state, bool)
                     and random_state >= 0), "None, an int >= 0 or a numpy.random.Generator",
                 "Pass random_state=0 (any fixed int) for reproducible data.")
    if process == "paper-code":
        _rings_check("noise_model", noise_model, noise_model is None,
                     "None with process='paper-code' (its noise is radial to each ring)",
                     "Leave noise_model out with process='paper-code', or use process='per-axis'.")
    else:
        noise_model = "per-axis" if noise_model is None else noise_model
        _rings_check("noise_model", noise_model, noise_model in ("per-axis", "radial"), "'per-axis' or 'radial'",
                     "Pass noise_model='per-axis' (docs/algorithms.md 10.2) or 'radial'.")
    assert r is not None and s is not None  # _rings_check raised otherwise
    seed = _seed(random_state)
    if process == "paper-code":
        return _paper_code_rings(int(n_steps), int(n_points), r, float(noise), float(motion), s, seed)
    steps = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(4,))).standard_normal((n_steps, 2))
    centers = s[None, :] + motion * np.concatenate([np.zeros((1, 2)), np.cumsum(steps[:-1], axis=0)])
    batches, labels = [], []
    for t in range(n_steps):
        rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(3, t)))
        lab = rng.integers(0, r.size, size=n_points).astype(np.int64)
        angle = rng.uniform(0.0, 2.0 * np.pi, size=n_points)
        ring = r[lab, None] * np.stack([np.cos(angle), np.sin(angle)], axis=1)
        if noise_model == "per-axis":
            offset = noise * rng.standard_normal((n_points, 2))
        else:
            length, phi = noise * rng.standard_normal(n_points), rng.uniform(0.0, 2.0 * np.pi, size=n_points)
            offset = length[:, None] * np.stack([np.cos(phi), np.sin(phi)], axis=1)
        batches.append(centers[t] + ring + offset)
        labels.append(lab)
    return Rings(batches, labels, np.repeat(centers[:, None, :], r.size, axis=1))


__all__ += ["Rings", "moving_rings"]


# --------------------------------------------------------------------------------------------------------------
# moving Gaussians ([DM] 8.1; docs/algorithms.md 10.2)
# --------------------------------------------------------------------------------------------------------------


class MovingGaussians(NamedTuple):
    """Result of :func:`moving_gaussians`: one entry per time step.

    Examples
    --------
    >>> from dclust.datasets import moving_gaussians
    >>> steps = moving_gaussians(n_steps=4, points_per_cluster=15, random_state=0)
    >>> len(steps.batches), steps.batches[0].shape[1], len(steps.labels[0]) == len(steps.batches[0])
    (4, 2, True)
    """

    #: list of float64 arrays (n_t, 2): the points of each step.
    batches: list[np.ndarray]
    #: list of int64 arrays (n_t,): the id of the cluster that emitted each point (ids are never reused).
    labels: list[np.ndarray]
    #: list of float64 arrays (k_t, 2): the centres of the live clusters when they emitted.
    centers: list[np.ndarray]


def moving_gaussians(
    n_steps: int = 100,
    n_clusters: int = 5,
    points_per_cluster: int = 15,
    *,
    process: str = "paper-code",
    std: float = 0.05,
    death_prob: float = 0.05,
    birth_prob: float = 0.10,
    initial_clusters: int = 4,
    boundary: str = "none",
    random_state: Any = None,
) -> MovingGaussians:
    """Gaussian clusters that move, die and are born in [0, 1]^2 ([DM] 8.1; docs/algorithms.md 10.2).

    Parameters
    ----------
    n_steps : int, default 100
    n_clusters : int, default 5
        ``process="per-axis"``: the fixed number of live clusters (ignored by ``"paper-code"``).
    points_per_cluster : int, default 15
        Points each live cluster emits per step.
    process : {"paper-code", "per-axis"}, default "paper-code"
        ``"paper-code"`` follows the authors' example program: start with ``initial_clusters``; each step (after
        the first) every live cluster dies with probability ``death_prob``, else moves by a radial step
        (length ~ N(0, std), uniform direction); a new cluster is born uniformly with probability ``birth_prob``
        (or when none lives); then every live cluster emits points at radial offsets N(0, std).
        ``"per-axis"`` follows the paper's text: ``n_clusters`` clusters emit from N(c, std^2 I); then each dies
        with probability ``death_prob`` and is replaced by a new one at a uniform location; then the survivors
        move by N(0, std^2 I).
    std : float, default 0.05
        Spread of the points and of the motion.
    death_prob, birth_prob : float
        Per-step probabilities (``birth_prob`` is used by ``"paper-code"`` only).
    initial_clusters : int, default 4
        ``"paper-code"``: clusters alive at the start.
    boundary : {"none", "reflect"}, default "none"
        Centres are not clipped (``"none"``), or reflected back into [0, 1] (``"reflect"``).
    random_state : int, Generator or None

    Returns
    -------
    MovingGaussians
        ``batches``, ``labels`` and ``centers``, one entry per step.

    Examples
    --------
    >>> data = moving_gaussians(n_steps=3, random_state=0)
    >>> len(data.batches), data.batches[0].shape
    (3, (60, 2))
    """
    for name, value in (("n_steps", n_steps), ("n_clusters", n_clusters), ("points_per_cluster", points_per_cluster),
                        ("initial_clusters", initial_clusters)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
            raise InvalidParameterError(message(f"moving_gaussians({name}=...)", "an integer >= 1", repr(value),
                                                f"Pass a positive integer {name}."))
    if process not in ("paper-code", "per-axis"):
        raise InvalidParameterError(message("moving_gaussians(process=...)", "'paper-code' or 'per-axis'",
                                            repr(process), "Pick one of the two processes."))
    if boundary not in ("none", "reflect"):
        raise InvalidParameterError(message("moving_gaussians(boundary=...)", "'none' or 'reflect'", repr(boundary),
                                            "Pick one of the two boundary rules."))
    for name, number in (("std", std), ("death_prob", death_prob), ("birth_prob", birth_prob)):
        if isinstance(number, bool) or not isinstance(number, numbers.Real) or not 0 <= number < np.inf or (
                name != "std" and number > 1):
            raise InvalidParameterError(message(f"moving_gaussians({name}=...)", "a number >= 0 (<= 1 for a "
                                                "probability)", repr(number), f"Pass a valid {name}."))
    rng = np.random.default_rng(np.random.SeedSequence(_seed(random_state), spawn_key=(2,)))

    def fold(c: np.ndarray) -> np.ndarray:
        if boundary == "reflect":
            c = np.abs(c)
            c = np.where(c > 1, 2 - c, c)
        return c

    def radial(k: int) -> np.ndarray:
        r = rng.normal(0.0, std, size=k)
        a = rng.uniform(0.0, 2 * np.pi, size=k)
        return np.stack([r * np.cos(a), r * np.sin(a)], axis=1)

    start = initial_clusters if process == "paper-code" else n_clusters
    centers = {i: rng.uniform(0, 1, size=2) for i in range(start)}
    next_id = start
    batches, labels, snapshots = [], [], []
    for t in range(n_steps):
        if process == "paper-code" and t > 0:
            for i in list(centers):
                if rng.random() < death_prob:
                    del centers[i]
                else:
                    centers[i] = fold(centers[i] + radial(1)[0])
            if rng.random() < birth_prob or not centers:
                centers[next_id] = rng.uniform(0, 1, size=2)
                next_id += 1
        ids = np.array(sorted(centers), dtype=np.int64)
        C = np.array([centers[i] for i in ids])
        y = np.repeat(ids, points_per_cluster)
        base = np.repeat(C, points_per_cluster, axis=0)
        off = radial(y.size) if process == "paper-code" else rng.normal(0.0, std, size=(y.size, 2))
        batches.append(base + off)
        labels.append(y)
        snapshots.append(C)
        if process == "per-axis":
            for i in list(centers):
                if rng.random() < death_prob:
                    del centers[i]
                    centers[next_id] = rng.uniform(0, 1, size=2)
                    next_id += 1
            for i in list(centers):
                centers[i] = fold(centers[i] + rng.normal(0.0, std, size=2))
    return MovingGaussians(batches, labels, snapshots)
__all__ += ["MovingGaussians", "moving_gaussians"]


# --------------------------------------------------------------------------------------------------------------
# tabletop-style images ([MB] 5.1; docs/algorithms.md 10.1)
# --------------------------------------------------------------------------------------------------------------


class Tabletop(NamedTuple):
    """Result of :func:`make_tabletop`: the images, which objects each holds, the objects and the empty table.

    Examples
    --------
    >>> import numpy as np
    >>> from dclust.datasets import make_tabletop
    >>> t = make_tabletop(n_images=20, n_objects=4, noise=0.0, random_state=0)
    >>> t.X.shape, t.Z.shape, t.features.shape
    ((20, 36), (20, 4), (4, 36))
    >>> bool(np.allclose(t.X, t.background + t.Z @ t.features))
    True
    """

    #: float64 (n_images, n_pixels): the images as rows, ``background + Z @ features + noise``.
    X: np.ndarray
    #: uint8 (n_images, n_objects): which objects are present in each image.
    Z: np.ndarray
    #: float64 (n_objects, n_pixels): what each object adds to the image (1 on its pixels, 0 elsewhere).
    features: np.ndarray
    #: float64 (n_pixels,): the empty table (the base feature every image holds).
    background: np.ndarray


def make_tabletop(
    n_images: int = 100,
    image_shape: tuple[int, int] = (6, 6),
    n_objects: int = 4,
    noise: float = 0.1,
    random_state: Any = 0,
    *,
    p_present: float = 0.5,
) -> Tabletop:
    """Synthetic stand-in for the tabletop images of [MB] 5.1 (docs/algorithms.md 10.1): objects on a table.

    The image is split in a grid of ``ceil(sqrt(n_objects))`` rows of cells; object k always lies in cell k, on a
    random shape of that cell (each pixel on with probability 0.6, at least two pixels), and adds 1 to its pixels
    when present. The table is a horizontal brightness gradient from 0.2 to 0.5. Every object is present
    independently with probability ``p_present``, and every pixel gets ``N(0, noise^2)``. The generating feature
    allocation is the base feature (the table) plus one feature per object.

    Parameters
    ----------
    n_images : int, default 100
    image_shape : (int, int), default (6, 6)
        Height and width in pixels.
    n_objects : int, default 4
        At most one object per two pixels.
    noise : float, default 0.1
        Standard deviation of the pixel noise (>= 0).
    random_state : int, Generator or None, default 0
        Seeds the shapes, the presences and the noise.
    p_present : float, default 0.5
        Probability that an object is on the table in an image.

    Returns
    -------
    Tabletop
        ``X`` (n_images, height * width), ``Z`` (n_images, n_objects) uint8, ``features`` (n_objects, pixels)
        and ``background`` (pixels,).

    Examples
    --------
    >>> t = make_tabletop(10, random_state=0)
    >>> t.X.shape, t.Z.shape, t.features.shape, t.background.shape
    ((10, 36), (10, 4), (4, 36), (36,))
    >>> bool(np.allclose(make_tabletop(10, noise=0.0).X, t.background + t.Z @ t.features))
    True
    """

    def bad(name: str, expected: str, value: Any, fix: str) -> InvalidParameterError:
        return InvalidParameterError(message(f"make_tabletop({name}=...)", expected, repr(value), fix))

    if isinstance(n_images, bool) or not isinstance(n_images, numbers.Integral) or n_images < 1:
        raise bad("n_images", "an integer >= 1", n_images, "Pass a positive number of images.")
    shape_ok = (
        isinstance(image_shape, (tuple, list)) and len(image_shape) == 2
        and all(isinstance(s, numbers.Integral) and not isinstance(s, bool) and s >= 1 for s in image_shape)
    )
    if not shape_ok:
        raise bad("image_shape", "a pair (height, width) of integers >= 1", image_shape, "Pass e.g. (6, 6).")
    h, w = int(image_shape[0]), int(image_shape[1])
    if isinstance(n_objects, bool) or not isinstance(n_objects, numbers.Integral) or not 1 <= n_objects <= h * w // 2:
        raise bad("n_objects", f"an integer in [1, {h * w // 2}] (one object per two pixels at most)", n_objects,
                  "Use fewer objects or a larger image_shape.")
    for name, value, hi in (("noise", noise, np.inf), ("p_present", p_present, 1.0)):
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 <= value <= hi or not np.isfinite(
                value):
            raise bad(name, f"a finite number in [0, {hi}]", value, f"Pass e.g. {name}=0.1.")
    rows_of_cells = int(np.ceil(np.sqrt(n_objects)))
    cols_of_cells = int(np.ceil(n_objects / rows_of_cells))
    row_bounds = np.array_split(np.arange(h), rows_of_cells)
    col_bounds = np.array_split(np.arange(w), cols_of_cells)
    cells = [(r, c) for r in row_bounds for c in col_bounds][:n_objects]
    if any(r.size * c.size < 2 for r, c in cells):
        raise bad("n_objects", f"at most as many objects as cells of >= 2 pixels fit in {image_shape}", n_objects,
                  "Use fewer objects or a larger image_shape.")
    if not (random_state is None or isinstance(random_state, np.random.Generator) or (
            isinstance(random_state, numbers.Integral) and not isinstance(random_state, bool) and random_state >= 0)):
        raise bad("random_state", "None, an int >= 0 or a numpy.random.Generator", random_state,
                  "Pass random_state=0 (any fixed int) for reproducible data.")
    seed = _seed(random_state)
    shape_rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(5, 0)))
    features = np.zeros((n_objects, h, w))
    for k, (r, c) in enumerate(cells):
        on = shape_rng.random((r.size, c.size)) < 0.6
        if on.sum() < 2:
            on[:] = True
        features[k][np.ix_(r, c)] = on
    features = features.reshape(n_objects, h * w)
    background = np.broadcast_to(np.linspace(0.2, 0.5, w)[None, :], (h, w)).reshape(-1).copy()
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(5, 1)))
    Z = (rng.random((n_images, n_objects)) < p_present).astype(np.uint8)
    X = background[None, :] + Z @ features + noise * rng.standard_normal((n_images, h * w))
    return Tabletop(X, Z, features, background)


__all__ += ["Tabletop", "make_tabletop"]
