"""Point-cloud stream segmentation and tracking with Dynamic Means (ALGORITHMS.md 3, 4 and 10.2).

Each frame's points (xyz, optionally colour and normals as extra features with weights) are one time step of
:class:`dclust.DynamicMeans` (or :class:`dclust.SpectralDynamicMeans`), so every point gets a *persistent* segment
id: an object keeps its id while it moves, leaves for a while and comes back (revival), and new objects get new ids.

Speed: a frame is clustered in memory (numpy), not through Dask. Frames larger than ``fit_sample`` are fitted on a
random sample of that many points and every point is then assigned: to the nearest centre of the clusters with
data in this frame (D-Means, the fixed-point rule of ALGORITHMS.md 3.7 DM2), or to the segment of its nearest
sampled point (SD-Means, whose clusters need not be convex).

:func:`track` runs the whole job from files (see :mod:`dclust.io.pointcloud`) to a Zarr store of labels
(frames x max_points, int32, ``-1`` padding), a tracks table (Parquet or CSV) and an optional PNG.
:func:`tracking_scores` evaluates labels against ground truth (the protocol of 10.2).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import numpy as np
from scipy.optimize import linear_sum_assignment

from dclust import ProgressEvent, emit_progress, metrics
from dclust.cluster import nearest, validate_params
from dclust.errors import InvalidDataError, InvalidParameterError, message
from dclust.io.pointcloud import (
    FEATURES,
    FrameLabelsWriter,
    PointFrame,
    atomic_file,
    check_new_file,
    check_new_store,
    scan_frames,
    write_labels_store,
    write_table,
)
from dclust.stream import DynamicMeans, SpectralDynamicMeans

from ._scenes import moving_objects_scene

__all__ = ["PointCloudTracker", "TrackResult", "track", "tracking_scores", "moving_objects_scene"]

_DEFAULT_SAMPLE = {False: 10_000, True: 1_000}
_BLAS: list = []  # the threadpoolctl controller, made once (it inspects the loaded libraries)


def _one_blas_thread() -> Any:
    """BLAS limited to one thread for the ``with`` block."""
    if not _BLAS:
        from threadpoolctl import ThreadpoolController

        _BLAS.append(ThreadpoolController())
    return _BLAS[0].limit(limits=1, user_api="blas")


def _bad(name: str, expected: str, value: Any, fix: str) -> InvalidParameterError:
    return InvalidParameterError(message(f"pointcloud {name}", expected, repr(value), fix))


def _check_features(features: Sequence[str], weights: Sequence[float] | None) -> tuple[tuple[str, ...], np.ndarray]:
    if isinstance(features, str):
        features = [f.strip() for f in features.split(",") if f.strip()]
    features = tuple(features)
    if not features or any(f not in FEATURES for f in features) or len(set(features)) != len(features) \
            or "xyz" not in features:
        raise _bad("features", f"distinct names from {', '.join(FEATURES)}, including 'xyz'", ",".join(features),
                   "Pass e.g. features='xyz,rgb'.")
    if weights is None:
        w = np.ones(len(features))
    else:
        if isinstance(weights, str):
            try:
                weights = [float(v) for v in weights.split(",")]
            except ValueError:
                raise _bad("feature_weights", "comma-separated numbers", weights, "Pass e.g. '1,0.5'.") from None
        w = np.asarray(weights, dtype=np.float64).reshape(-1)
        if w.shape[0] != len(features) or not (np.isfinite(w).all() and (w > 0).all()):
            raise _bad("feature_weights", f"{len(features)} finite weights > 0 (one per feature: "
                       f"{', '.join(features)})", list(np.asarray(weights).tolist()),
                       "Pass one weight per feature, e.g. '1,0.5'.")
    return features, w


class PointCloudTracker:
    """Persistent segmentation of a stream of point-cloud frames, one :meth:`step` per frame.

    Parameters
    ----------
    lam, T_Q, k_tau : float
        D-Means parameters (ALGORITHMS.md 3.1): penalty of a new segment (squared feature-space distance for
        D-Means, kernel units for SD-Means), frames a segment may be unseen and still be revived, revival radius.
    spectral : bool, default False
        Use :class:`dclust.SpectralDynamicMeans` (SD-Means) instead of :class:`dclust.DynamicMeans`.
    kernel : {"rbf", "mst"}, default "rbf"
        SD-Means kernel; ``bandwidth`` is its omega (required with ``spectral=True``).
    features : sequence of {"xyz", "rgb", "normals"}, default ("xyz",)
        Point attributes clustered; each feature's coordinates are multiplied by ``sqrt(weight)``, so its squared
        distances count ``weight`` times.
    feature_weights : sequence of float, optional
        One weight > 0 per feature (default 1 each).
    fit_sample : int, optional
        Points per frame the model is fitted on (default 10,000 for D-Means, 1,000 for SD-Means, whose
        eigendecomposition is cubic); every point is assigned.
    n_restarts, max_iter, max_support : int
        Passed to the estimator (``max_support`` only for SD-Means).
    random_state : int, default 0
        Seeds the estimator and the per-frame samples.

    Attributes
    ----------
    model_ : DynamicMeans or SpectralDynamicMeans
        The estimator (its ``cluster_ids_``, ``history_`` ...).
    n_frames_ : int
        Frames processed.
    origin_ : ndarray (3,)
        Subtracted from xyz before clustering (the first frame's mean; large LAS coordinates keep precision).

    Examples
    --------
    >>> from dclust.apps._scenes import moving_objects_scene
    >>> tr = PointCloudTracker(lam=4.0, T_Q=10, k_tau=1.1)
    >>> scene = moving_objects_scene(n_frames=3, n_points=900, n_objects=3, random_state=0)
    >>> steps = [(f.ids, tr.step(f)) for f in scene]
    >>> round(tracking_scores(steps)["tracking_accuracy"], 2)
    1.0
    """

    def __init__(self, *, lam: float, T_Q: float, k_tau: float, spectral: bool = False, kernel: str = "rbf",
                 bandwidth: float | None = None, features: Sequence[str] = ("xyz",),
                 feature_weights: Sequence[float] | None = None, fit_sample: int | None = None, n_restarts: int = 1,
                 max_iter: int = 100, max_support: int = 50, random_state: int = 0) -> None:
        self.features, self.weights = _check_features(features, feature_weights)
        if fit_sample is not None and not (isinstance(fit_sample, (int, np.integer)) and fit_sample >= 2):
            raise _bad("fit_sample", "an int >= 2 (points per frame to fit on)", fit_sample, "Pass e.g. 30000.")
        if not isinstance(random_state, (int, np.integer)) or random_state < 0:
            raise _bad("random_state", "an int >= 0", random_state, "Pass e.g. 0.")
        self.spectral = bool(spectral)
        self.fit_sample = int(fit_sample) if fit_sample is not None else _DEFAULT_SAMPLE[self.spectral]
        self.random_state = int(random_state)
        if self.spectral:
            if kernel not in ("rbf", "mst"):
                raise _bad("kernel", "'rbf' or 'mst'", kernel, "Pass kernel='rbf'.")
            if bandwidth is None:
                raise _bad("bandwidth", "the SD-Means kernel width omega > 0", bandwidth, "Pass e.g. bandwidth=0.3.")
            self.model_ = SpectralDynamicMeans(lam=lam, T_Q=T_Q, k_tau=k_tau, kernel=kernel, bandwidth=bandwidth,
                                               n_restarts=n_restarts, max_iter=max_iter, max_support=max_support,
                                               random_state=self.random_state)
        else:
            if bandwidth is not None:
                raise _bad("bandwidth", "None with D-Means (it is the SD-Means kernel width)", bandwidth,
                           "Drop bandwidth, or pass spectral=True.")
            self.model_ = DynamicMeans(lam=lam, T_Q=T_Q, k_tau=k_tau, n_restarts=n_restarts, max_iter=max_iter,
                                       random_state=self.random_state)
        for name, value in (("lam", lam), ("T_Q", T_Q), ("k_tau", k_tau)):
            if value is None:
                raise _bad(name, "a number", value, f"Pass {name}.")
        validate_params(self.model_)  # every parameter checked now, before any frame is read
        self.n_frames_ = 0
        self.origin_: np.ndarray | None = None

    # ------------------------------------------------------------------------------------------------------ frames
    def feature_matrix(self, frame: Any) -> np.ndarray:
        """The weighted (n, d) feature matrix of a frame (a :class:`PointFrame`, a scene frame, or an (n, 3) xyz
        array when only xyz is used)."""
        if isinstance(frame, np.ndarray):
            frame = PointFrame(frame)
        xyz = np.asarray(frame.xyz, dtype=np.float64)
        if xyz.ndim != 2 or xyz.shape[1] != 3:
            raise InvalidDataError(message("point-cloud frame", "xyz of shape (n, 3)", f"shape {xyz.shape}",
                                           "Pass x, y, z per point."))
        if self.origin_ is None:
            self.origin_ = xyz.mean(axis=0) if xyz.shape[0] else np.zeros(3)
        cols = []
        for feat, w in zip(self.features, self.weights):
            a = xyz - self.origin_ if feat == "xyz" else getattr(frame, feat, None)
            if a is None:
                raise InvalidDataError(message(f"point-cloud frame {self.n_frames_}", f"the attribute {feat!r}",
                                               "a frame without it", f"Drop {feat!r} from the features."))
            a = np.asarray(a, dtype=np.float64)
            cols.append(a if w == 1.0 else a * np.sqrt(w))
        return np.ascontiguousarray(np.concatenate(cols, axis=1)) if len(cols) > 1 else np.ascontiguousarray(cols[0])

    def step(self, frame: Any) -> np.ndarray:
        """Cluster one frame; return the persistent segment id (int64) of each of its points."""
        X = self.feature_matrix(frame)
        n = X.shape[0]
        idx = None
        if n > self.fit_sample:
            rng = np.random.default_rng((self.random_state, self.n_frames_))
            idx = rng.choice(n, self.fit_sample, replace=False)
        if self.spectral:
            # one BLAS thread for the dense eigendecomposition: on 2 shared cores two OpenBLAS threads made a
            # 650 x 650 eigh 3-20x slower (measured: 0.35 s per frame with one thread, 1-9 s with two)
            with _one_blas_thread():
                self.model_.partial_fit(X if idx is None else X[idx])
        else:
            self.model_.partial_fit(X if idx is None else X[idx])
        labels = np.asarray(self.model_.labels_, dtype=np.int64) if idx is None else self._assign(X, X[idx])
        self.n_frames_ += 1
        return labels

    def _assign(self, X: np.ndarray, sample: np.ndarray) -> np.ndarray:
        m = self.model_
        if self.spectral:
            from scipy.spatial import cKDTree

            _, nn = cKDTree(sample).query(X, k=1)
            return np.asarray(m.labels_, dtype=np.int64)[nn]
        live = m.ages_ == 1  # the clusters with data in this frame
        slots, _ = nearest(X, m.cluster_centers_[live])
        return m.cluster_ids_[live][slots]

    @property
    def history_(self) -> dict:
        return self.model_.history_


# ------------------------------------------------------------------------------------------------------ metrics


def tracking_scores(steps: Iterable[tuple[Any, Any]]) -> dict[str, float]:
    """Segmentation accuracy and id consistency of persistent labels against ground-truth object ids.

    Parameters
    ----------
    steps : iterable of (true_ids, labels)
        One pair per frame (integer arrays of the frame's points).

    Returns
    -------
    dict
        ``tracking_accuracy``: :func:`dclust.metrics.tracking_accuracy` (one-to-one matching per frame that must
        agree with the first mapping of each object, ALGORITHMS.md 9); ``untracked_accuracy``: the same with
        every frame matched on its own; ``mean_frame_accuracy``: mean per-frame matched accuracy;
        ``id_consistency``: over consecutive frame pairs where an object is matched (Hungarian, per frame) in
        both, the fraction where its matched id is the same; ``objects_without_switch``: the fraction of objects
        whose matched id never changes; ``n_objects``, ``n_frames``.
    """
    steps = [(np.asarray(a), np.asarray(b)) for a, b in steps]
    if not steps:
        raise InvalidDataError(message("tracking_scores(steps)", "at least one frame", "none", "Pass frames."))
    tracked = metrics.tracking_accuracy(steps)
    untracked = metrics.tracking_accuracy(steps, tracked=False)
    per_frame, matched = [], {}
    for t, (y, z) in enumerate(steps):
        true_l, pred_l, counts = metrics.contingency_table(y, z)
        rows, cols = linear_sum_assignment(counts, maximize=True)
        per_frame.append(counts[rows, cols].sum() / max(int(counts.sum()), 1))
        for i, j in zip(rows, cols):
            if counts[i, j] > 0:
                matched.setdefault(int(true_l[i]), {})[t] = int(pred_l[j])
    same = pairs = no_switch = 0
    for seq in matched.values():
        ts = sorted(seq)
        ok = True
        for a, b in zip(ts, ts[1:]):
            if b == a + 1:
                pairs += 1
                same += seq[a] == seq[b]
            ok &= seq[a] == seq[b]
        no_switch += ok
    return {
        "tracking_accuracy": float(tracked),
        "untracked_accuracy": float(untracked),
        "mean_frame_accuracy": float(np.mean(per_frame)),
        "id_consistency": float(same / pairs) if pairs else 1.0,
        "objects_without_switch": float(no_switch / max(len(matched), 1)),
        "n_objects": len(matched),
        "n_frames": len(steps),
    }


# ------------------------------------------------------------------------------------------------------ the job


@dataclass
class TrackResult:
    """What :func:`track` wrote and measured."""

    out: str
    tracks: str | None
    plot: str | None
    n_frames: int
    n_points: int
    max_points: int
    n_segments: int
    seconds: float
    frames_per_second: float
    features: tuple[str, ...]
    estimator: str
    history: dict = field(default_factory=dict)


class _Tracks:
    """Per-segment, per-frame centroids (xyz) and counts, accumulated frame by frame (O(segments x frames))."""

    def __init__(self) -> None:
        self.rows: list[np.ndarray] = []

    def add(self, t: int, labels: np.ndarray, xyz: np.ndarray) -> None:
        ids, inv, counts = np.unique(labels, return_inverse=True, return_counts=True)
        sums = np.stack([np.bincount(inv, weights=xyz[:, d], minlength=ids.size) for d in range(3)], axis=1)
        c = sums / counts[:, None]
        self.rows.append(np.column_stack([ids, np.full(ids.size, t), counts, c]))

    def columns(self) -> dict[str, np.ndarray]:
        a = np.concatenate(self.rows) if self.rows else np.zeros((0, 6))
        ids = a[:, 0].astype(np.int64)
        frames = a[:, 1].astype(np.int64)
        uniq, inv = np.unique(ids, return_inverse=True)
        birth = np.full(uniq.size, np.iinfo(np.int64).max)
        death = np.full(uniq.size, -1)
        np.minimum.at(birth, inv, frames)
        np.maximum.at(death, inv, frames)
        order = np.lexsort((frames, ids))
        return {"id": ids[order], "frame": frames[order], "n_points": a[order, 2].astype(np.int64),
                "x": a[order, 3], "y": a[order, 4], "z": a[order, 5], "birth": birth[inv][order],
                "death": death[inv][order]}


def _parse_frames(plot_frames: Any, n_frames: int) -> list[int]:
    if isinstance(plot_frames, str):
        try:
            plot_frames = [int(v) for v in plot_frames.split(",") if v.strip()]
        except ValueError:
            raise _bad("plot_frames", "comma-separated frame indices", plot_frames, "Pass e.g. '0,5'.") from None
    frames = [int(f) + (n_frames if int(f) < 0 else 0) for f in plot_frames]
    if not frames or any(not 0 <= f < n_frames for f in frames):
        raise _bad("plot_frames", f"frame indices in [0, {n_frames}) (negative counts from the end)",
                   list(plot_frames), f"Pass indices below {n_frames}.")
    return sorted(set(frames))


def _matplotlib():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ImportError("plotting segments needs the optional dependency 'matplotlib', which is not installed; "
                          "install the extra: pip install 'dclust[plot]'") from exc
    return plt


def _plot(path: str, shots: dict[int, tuple[np.ndarray, np.ndarray]]) -> None:
    plt = _matplotlib()
    n = len(shots)
    fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 4.2), squeeze=False)
    cmap = plt.get_cmap("tab20")
    for ax, (t, (xyz, lab)) in zip(axes[0], sorted(shots.items())):
        ax.scatter(xyz[:, 0], xyz[:, 1], c=cmap((lab % 20) / 19.0), s=1.0, linewidths=0)
        ax.set_title(f"frame {t}: {len(np.unique(lab))} segments")
        ax.set_aspect("equal")
        ax.set_xlabel("x")
        ax.set_ylabel("y")
    fig.suptitle("point-cloud segments (top view, colour = persistent id)")
    fig.tight_layout()
    fig.savefig(path, dpi=100, format="png")
    plt.close(fig)


def track(source: Any, out: str | os.PathLike, *, lam: float, T_Q: float, k_tau: float, spectral: bool = False,
          kernel: str = "rbf", bandwidth: float | None = None, features: Sequence[str] | str = ("xyz",),
          feature_weights: Sequence[float] | str | None = None, fit_sample: int | None = None,
          tracks: str | os.PathLike | None = None, plot: str | os.PathLike | None = None,
          plot_frames: Sequence[int] | str = (0,), overwrite: bool = False, n_restarts: int = 1,
          random_state: int = 0) -> TrackResult:
    """Segment and track a point-cloud sequence; write persistent labels, a tracks table and a plot.

    Parameters
    ----------
    source : str or sequence of paths
        A directory or glob of ``.ply`` / ``.las`` / ``.laz`` / ``.npy`` frames, or a Zarr store of frames
        (:func:`dclust.io.pointcloud.scan_frames`).
    out : str or os.PathLike
        New Zarr store: group with ``labels`` (frames, max_points) int32 (``-1`` padding) and ``counts``
        (frames,), and the job's parameters in its attributes.
    lam, T_Q, k_tau, spectral, kernel, bandwidth, features, feature_weights, fit_sample, n_restarts, random_state
        See :class:`PointCloudTracker`.
    tracks : str, optional
        Tracks table, ``.parquet`` (pyarrow) or ``.csv``: one row per segment and frame in which it has points:
        ``id, frame, n_points, x, y, z`` (centroid) and the segment's ``birth`` and ``death`` (first and last
        frame with points).
    plot : str, optional
        PNG of the segments (top view) of the frames ``plot_frames`` (needs matplotlib).
    overwrite : bool
        Replace existing outputs; otherwise an existing output raises before anything is read.

    Returns
    -------
    TrackResult

    Notes
    -----
    Every output is written under a temporary name and renamed into place only when the whole sequence is
    done, so a failure (bad frame, interruption) leaves no partial output and any previous output intact.
    Memory is bounded by one frame plus the plotted frames (at most 20,000 points each) and the tracks table.
    A progress event (``ProgressEvent("PointCloudTracker", "frame", t, objective, K, seconds, extra)``) is
    emitted after every frame.
    """
    tracker = PointCloudTracker(lam=lam, T_Q=T_Q, k_tau=k_tau, spectral=spectral, kernel=kernel,
                                bandwidth=bandwidth, features=features, feature_weights=feature_weights,
                                fit_sample=fit_sample, n_restarts=n_restarts, random_state=random_state)
    if not isinstance(overwrite, bool):
        raise _bad("overwrite", "True or False", overwrite, "Pass a bool.")
    local = check_new_store(out, overwrite)
    outputs = {local: "OUT.zarr"}
    tracks_path = plot_path = None
    if tracks is not None:
        tracks_path = check_new_file(os.fspath(tracks), overwrite, "--tracks")
        low = tracks_path.lower()
        if not low.endswith((".parquet", ".pq", ".csv")):
            raise _bad("tracks", "a path ending in .parquet, .pq or .csv", os.fspath(tracks),
                       "Use tracks.parquet or tracks.csv.")
        if low.endswith((".parquet", ".pq")):
            try:
                import pyarrow.parquet  # noqa: F401
            except ImportError as exc:
                raise ImportError("writing a Parquet tracks table needs the optional dependency 'pyarrow', which is "
                                  "not installed; install the extra: pip install 'dclust[pointcloud]' (or write "
                                  ".csv)") from exc
    if plot is not None:
        plot_path = check_new_file(os.fspath(plot), overwrite, "--plot")
        _matplotlib()
    for path, name in ((tracks_path, "--tracks"), (plot_path, "--plot")):
        if path is not None:
            if path in outputs:
                raise _bad(name, "a path of its own", path, f"It is also {outputs[path]}; give every output its "
                           "own path.")
            outputs[path] = name
    src = scan_frames(source)
    src.require(tracker.features)
    for f in src.frames:
        if isinstance(f.loc, str) and os.path.abspath(f.loc) in outputs:
            raise _bad(outputs[os.path.abspath(f.loc)], "an output that is not an input frame", f.loc,
                       "Choose another output path.")
    n_frames, max_points = len(src), src.max_points
    shots_at = set(_parse_frames(plot_frames, n_frames)) if plot_path else set()
    name = type(tracker.model_).__name__
    attrs = {"estimator": name, "lam": float(lam), "T_Q": float(T_Q), "k_tau": float(k_tau),
             "features": list(tracker.features), "feature_weights": tracker.weights.tolist(),
             "fit_sample": tracker.fit_sample, "n_frames": n_frames, "max_points": int(max_points),
             "frames": [f.name for f in src.frames], "source": src.description, "complete": False}
    if spectral:
        attrs.update(kernel=kernel, bandwidth=float(bandwidth))
    table = _Tracks()
    shots: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    done: dict[str, Any] = {}
    tmp_files: list[str] = []

    def fill(tmp: str) -> None:
        writer = FrameLabelsWriter(tmp, n_frames, max_points, src.counts, attrs)
        t0 = time.perf_counter()
        for t in range(n_frames):
            tf = time.perf_counter()
            frame = src.read(t)
            labels = tracker.step(frame)
            writer.write(t, labels.astype(np.int32))
            if tracks_path is not None:
                table.add(t, labels, frame.xyz)
            if t in shots_at:
                keep = np.random.default_rng(t).permutation(len(frame))[:20_000]
                shots[t] = (frame.xyz[keep], labels[keep])
            h = tracker.history_
            emit_progress(ProgressEvent("PointCloudTracker", "frame", t + 1, float(h["objective"][-1]),
                               int(h["n_clusters"][-1]), time.perf_counter() - tf,
                               {"n_points": len(frame), "n_frames": n_frames, "births": int(h["births"][-1]),
                                "deaths": int(h["deaths"][-1]), "revivals": int(h["revivals"][-1]),
                                "n_tracked": int(len(tracker.model_.cluster_ids_))}))
        seconds = time.perf_counter() - t0
        done["seconds"] = seconds
        writer.set_attrs({"complete": True, "next_id": int(tracker.model_.next_id_),
                          "origin": tracker.origin_.tolist(), "seconds": seconds})
        # side outputs go to temporary names now; they are renamed once the store is in place
        if tracks_path is not None:
            tmp_files.append(_hidden(tracks_path))
            write_table(table.columns(), tmp_files[-1])
        if plot_path is not None:
            tmp_files.append(_hidden(plot_path))
            atomic_file(tmp_files[-1], lambda p: _plot(p, shots))

    try:
        write_labels_store(local, overwrite, fill)
        for tmp, final in zip(tmp_files, [p for p in (tracks_path, plot_path) if p is not None]):
            os.replace(tmp, final)
    finally:
        for tmp in tmp_files:
            if os.path.lexists(tmp):
                os.remove(tmp)
    h = tracker.history_
    seconds = float(done["seconds"])
    n_points = int(src.counts.sum())
    return TrackResult(local, tracks_path, plot_path, n_frames, n_points, int(max_points),
                       int(tracker.model_.next_id_), seconds, n_frames / max(seconds, 1e-9), tracker.features, name,
                       {k: list(v) for k, v in h.items()})


def _hidden(path: str) -> str:
    """A hidden sibling name with the same extension (the writers choose the format by it)."""
    return os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.pending-{os.getpid()}"
                        f"{os.path.splitext(path)[1]}")
