"""Video colour quantisation with Dynamic Means ([DM] 8.5; docs/algorithms.md 9 and 10.2).

Each frame's colours are clustered on a random ``fit_sample`` of its pixels; every pixel is then replaced by the
colour of its nearest centre. ``method="dmeans"`` carries the clusters over time (:class:`dclust.DynamicMeans`:
persistent palette ids, birth, death, revival), so colours do not flicker; ``"kmeans"`` (K given, warm-started from
the previous frame's centres) and ``"dpmeans"`` (a fresh DP-means per frame) are the paper's baselines.

Speed: per frame the fit runs in memory on the sample (no Dask graph), and the quantiser is one fused numba pass
over the pixels (see :mod:`dclust.apps._video_kernels`). Decoding and encoding run in their own threads (PyAV
releases the GIL) with bounded queues, so memory stays at a few frames whatever the length of the video.

Flicker: with the [DM] 10.2 parameters (lam=800, T_Q=15, k_tau=1.1 on RGB 0..255) most of the frame-to-frame
change of the quantised video beyond the original's comes from refitting the palette every frame on the fit
sample (sampling noise of the centres), which warm-started k-means shares: the D-Means carry-over weight is
``gamma = (1/w + tau dt)^-1 <= 1/tau`` (5.6 sample pixels at tau=0.18) against tens of sample pixels per colour,
so the temporal prior barely holds the centres. Births and revivals of small clusters in the colour tails add
to it, the more the larger the sample. eq. 30 cannot go below ``tau = 1/(T_Q - 1)`` (``k_tau = 1``); pass ``Q`` and
``tau`` directly for a firmer prior: ``tau = 0.01`` lets a colour's previous centre count as up to 100 sample
pixels (about one frame of its pixels at the default sample), which halves the flicker for a few tenths of a dB of
PSNR (``benchmarks/bench_video.py`` measures the trade-off against k-means at equal PSNR).

Durability: the output is written under a temporary name and renamed at the end. While running, a checkpoint
(``.{OUT}.resume/``: the per-frame palettes and the model) is saved every few seconds and on interruption; with
``resume=True`` the job re-creates the frames already done from their saved palettes (decode, quantise, encode --
no fitting) and continues fitting where it stopped, so the result equals an uninterrupted run.

With a Dask ``client`` (CLI ``--scheduler``) the input must be a Zarr frames store: the driver fits each frame and
the workers quantise the frames (reading them from the store and writing a Zarr output directly).
"""

from __future__ import annotations

import json
import math
import os
import queue
import threading
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import numpy as np

from .._fit import ProgressEvent, emit
from ..errors import ConvergenceWarning, DclustError, InvalidDataError, InvalidParameterError, StorageError, message
from ..io._video import (
    FrameSource,
    check_output,
    create_sink,
    open_frames,
    read_frame,
    remove_tree,
    write_bytes,
    write_frame,
    write_png,
)
from ..kernels.kmeans import kmeans_plusplus, lloyd
from ..io._models import load, save
from ..stream import DynamicMeans
from ._video_kernels import CellTable, features, palette_rgb, quantise_rows

__all__ = ["quantize_video", "psnr", "flicker_ratio", "flicker_summary", "palette_image", "synthetic_frames",
           "METHODS"]

METHODS = ("dmeans", "kmeans", "dpmeans")
_CHECKPOINT_VERSION = 1
_CHECKPOINT_SECONDS = 5.0
_QUEUE_FRAMES = 3


# --------------------------------------------------------------------------------------------------- metrics


def psnr(mse: float, peak: float = 255.0) -> float:
    """Peak signal-to-noise ratio ``10 log10(peak^2 / mse)`` in dB (inf for ``mse = 0``).

    Parameters
    ----------
    mse : float
        Mean squared error per channel value.
    peak : float, default 255.0
        Largest value a channel can take.

    Returns
    -------
    float

    Examples
    --------
    >>> from dclust.apps.video import psnr
    >>> round(psnr(255.0 ** 2 / 100), 6)
    20.0
    """
    return math.inf if mse <= 0 else 10.0 * math.log10(peak * peak / mse)


def flicker_ratio(dq: float, do: float) -> float:
    """docs/algorithms.md 9: ``f_t = mean|Q_t - Q_{t-1}| / mean|O_t - O_{t-1}|`` from the two sums (same pixel count);
    NaN when the original does not change.

    Parameters
    ----------
    dq : float
        Sum of ``|Q_t - Q_{t-1}|`` over the pixels and channels of the quantised frames.
    do : float
        The same sum for the original frames.

    Returns
    -------
    float
        1 when the quantised video changes as much as the original; NaN when ``do`` is 0.

    Examples
    --------
    >>> import math
    >>> from dclust.apps.video import flicker_ratio
    >>> flicker_ratio(30, 20), math.isnan(flicker_ratio(5, 0))
    (1.5, True)
    """
    return float(dq) / float(do) if do > 0 else math.nan


def flicker_summary(series: Any) -> float:
    """Median of ``|f_t - 1|`` over the frames with a defined ratio (NaN if none).

    Parameters
    ----------
    series : iterable of float or None
        The flicker ratio of every frame (:func:`flicker_ratio`); None and NaN entries are skipped.

    Returns
    -------
    float
        0 for a quantised video that changes exactly as the original does.

    Examples
    --------
    >>> from dclust.apps.video import flicker_summary
    >>> round(flicker_summary([float("nan"), 1.5, 0.9, 1.0]), 12)
    0.1
    """
    f = np.asarray([x for x in series if x is not None], dtype=np.float64)
    f = f[np.isfinite(f)]
    return float(np.median(np.abs(f - 1.0))) if f.size else math.nan


# --------------------------------------------------------------------------------------------------- fitters


@dataclass
class Palette:
    """One frame's palette: persistent ids, centres in the colour space, their RGB, and the fit's counts."""

    ids: np.ndarray
    centers: np.ndarray
    rgb: np.ndarray
    births: int = 0
    deaths: int = 0
    revivals: int = 0
    n_iter: int = 0
    converged: bool = True

    def to_json(self) -> dict:
        return {"ids": self.ids.tolist(), "centres": self.centers.tolist(), "rgb": self.rgb.tolist(),
                "births": self.births, "deaths": self.deaths, "revivals": self.revivals, "n_iter": self.n_iter,
                "converged": self.converged}

    @classmethod
    def from_json(cls, d: dict) -> "Palette":
        return cls(np.asarray(d["ids"], np.int64), np.asarray(d["centres"], np.float64).reshape(-1, 3),
                   np.asarray(d["rgb"], np.uint8).reshape(-1, 3), int(d["births"]), int(d["deaths"]),
                   int(d["revivals"]), int(d["n_iter"]), bool(d["converged"]))


def _top(ids, centers, counts, max_colors):
    """The ``max_colors`` clusters with the most sample pixels (lower id first on ties), in id order."""
    if max_colors is None or ids.size <= max_colors:
        return ids, centers
    order = np.lexsort((ids, -counts))[:max_colors]
    keep = np.sort(order)
    return ids[keep], centers[keep]


class _DMeansFitter:
    def __init__(self, p: dict) -> None:
        self.p = p
        self.model = DynamicMeans(lam=p["lam"], T_Q=p["T_Q"], k_tau=p["k_tau"], Q=p["Q"], tau=p["tau"],
                                  max_iter=p["max_iter"], random_state=p["seed"])

    def fit(self, t: int, X: np.ndarray, prev: Palette | None) -> Palette:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            m = self.model.partial_fit(X)
        seen = m.ages_ == 1
        ids, centers = m.cluster_ids_[seen], m.cluster_centers_[seen]
        counts = np.array([np.count_nonzero(m.labels_ == i) for i in ids]) if self.p["max_colors"] else None
        ids, centers = _top(ids, centers, counts, self.p["max_colors"])
        h = m.history_
        return Palette(ids, centers, palette_rgb(centers, self.p["colorspace"]), int(h["births"][-1]),
                       int(h["deaths"][-1]), int(h["revivals"][-1]), int(m.n_iter_), bool(m.converged_))

    def save(self, directory: str, n: int) -> str:
        """The model as ``model-{n}.zarr`` (``dclust.save``: Zarr + JSON, written atomically)."""
        name = f"model-{n}.zarr"
        save(self.model, os.path.join(directory, name), overwrite=True)
        return name

    def restore(self, directory: str, name: str | None, palettes: list[Palette]) -> None:
        path = os.path.join(directory, name or "")
        try:
            model = load(path)
        except DclustError as exc:
            raise StorageError(f"the checkpoint model {path!r} cannot be read ({exc}); remove {directory!r} to "
                               "start afresh.") from exc
        if not isinstance(model, DynamicMeans) or int(model.n_batches_) != len(palettes):
            raise StorageError(f"the checkpoint in {directory!r} is inconsistent (its model does not match its "
                               f"{len(palettes)} frames); remove it and start afresh.")
        self.model = model


class _KMeansFitter:
    """Per-frame Lloyd iterations on the sample, K fixed, warm-started from the previous frame's centres.

    A frame whose fit sample holds ``m < k`` distinct colours (a black frame of a fade-in) is quantised with
    exactly those ``m`` colours (its palette has ``m`` entries; the report counts such frames); the next frame with
    at least ``k`` colours is seeded afresh (k-means++ on its distinct colours), and the frames after it warm-start
    again.
    """

    def __init__(self, p: dict) -> None:
        self.p = p
        self.centers: np.ndarray | None = None

    def fit(self, t: int, X: np.ndarray, prev: Palette | None) -> Palette:
        k = self.p["k"]
        births = deaths = 0
        uniq = np.unique(X, axis=0)
        if uniq.shape[0] < k:  # every colour of the sample is a centre: nothing to fit
            self.centers = uniq
            return Palette(np.arange(uniq.shape[0], dtype=np.int64), uniq, palette_rgb(uniq, self.p["colorspace"]),
                           uniq.shape[0], 0 if prev is None else int(prev.ids.size), 0, 0, True)
        if self.centers is None or self.centers.shape[0] < k:  # first frame, or after a frame of fewer colours
            births, deaths = k, 0 if prev is None else int(prev.ids.size)
            C = kmeans_plusplus(uniq, np.ones(uniq.shape[0]), k, np.random.default_rng([self.p["seed"], t, 1]))
        else:
            C = self.centers.copy()
        C, _, n_iter, converged, _ = lloyd(X, None, C, max_iter=self.p["max_iter"], rtol=1e-8)
        self.centers = C
        return Palette(np.arange(k, dtype=np.int64), C, palette_rgb(C, self.p["colorspace"]), births, deaths, 0,
                       n_iter, converged)

    def save(self, directory: str, n: int) -> None:
        return None

    def restore(self, directory: str, name: str | None, palettes: list[Palette]) -> None:
        self.centers = palettes[-1].centers.copy() if palettes else None


class _DPMeansFitter:
    """A fresh DP-means per frame (D-Means' first step: no old clusters), ids local to the frame."""

    def __init__(self, p: dict) -> None:
        self.p = p

    def fit(self, t: int, X: np.ndarray, prev: Palette | None) -> Palette:
        seed = int(np.random.default_rng([self.p["seed"], t, 2]).integers(2**62))
        m = DynamicMeans(lam=self.p["lam"], Q=0.0, tau=0.0, max_iter=self.p["max_iter"], random_state=seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            m.partial_fit(X)
        ids, centers = np.arange(m.cluster_ids_.size, dtype=np.int64), m.cluster_centers_
        counts = np.bincount(m.labels_, minlength=ids.size) if self.p["max_colors"] else None
        ids, centers = _top(ids, centers, counts, self.p["max_colors"])
        ids = np.arange(ids.size, dtype=np.int64)
        return Palette(ids, centers, palette_rgb(centers, self.p["colorspace"]), int(ids.size),
                       0 if prev is None else int(prev.ids.size), 0, int(m.n_iter_), bool(m.converged_))

    def save(self, directory: str, n: int) -> None:
        return None

    def restore(self, directory: str, name: str | None, palettes: list[Palette]) -> None:
        return None


_FITTERS = {"dmeans": _DMeansFitter, "kmeans": _KMeansFitter, "dpmeans": _DPMeansFitter}


# --------------------------------------------------------------------------------------------------- params


def _check_params(method, lam, T_Q, k_tau, k, colorspace, max_colors, fit_sample, max_iter, seed, Q=None,
                  tau=None) -> dict:
    def bad(name, expected, value, fix):
        raise InvalidParameterError(message(name, expected, repr(value), fix))

    def real(name, value, low, inclusive=False):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and (
            value >= low if inclusive else value > low)
        if not ok:
            bad(name, f"a finite number {'>=' if inclusive else '>'} {low:g}", value, f"Pass a valid {name}.")
        return float(value)

    def integer(name, value, low, optional=False):
        if value is None and optional:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
            bad(name, f"an integer >= {low}", value, f"Pass a valid {name}.")
        return int(value)

    if method not in METHODS:
        bad("method", f"one of {', '.join(METHODS)}", method, "Choose a method.")
    if colorspace not in ("rgb", "lab"):
        bad("colorspace", "'rgb' or 'lab'", colorspace, "Choose a colour space.")
    p = {"method": method, "colorspace": colorspace, "max_colors": integer("max_colors", max_colors, 1, True),
         "fit_sample": integer("fit_sample", fit_sample, 1), "max_iter": integer("max_iter", max_iter, 1),
         "seed": integer("seed", seed, 0), "lam": None, "T_Q": None, "k_tau": None, "Q": None, "tau": None,
         "k": None}
    if method == "kmeans":
        if k is None:
            bad("k", "the number of colours for method='kmeans'", k, "Pass k (--k N).")
        p["k"] = integer("k", k, 1)
        if p["max_colors"] is not None and p["max_colors"] < p["k"]:
            bad("max_colors", f">= k={p['k']} for method='kmeans'", max_colors, "Lower --k or raise --max-colors.")
        if p["k"] > 32767:
            bad("k", "at most 32767 colours", k, "Use fewer colours.")
        return p
    if k is not None:
        bad("k", f"None for method={method!r} (the number of colours follows from lam)", k, "Drop --k.")
    p["lam"] = real("lam", lam, 0.0)
    if method != "dmeans":
        return p
    if Q is None and tau is None:  # eq. 30's reparameterisation, [DM] 10.2's values by default
        p["T_Q"] = real("T_Q", 15.0 if T_Q is None else T_Q, 1.0)
        p["k_tau"] = real("k_tau", 1.1 if k_tau is None else k_tau, 1.0, inclusive=True)
        return p
    if Q is None or tau is None or T_Q is not None or k_tau is not None:
        given = ", ".join(n for n, v in (("T_Q", T_Q), ("k_tau", k_tau), ("Q", Q), ("tau", tau)) if v is not None)
        bad("T_Q, k_tau, Q, tau", "one complete pair: (T_Q, k_tau) or (Q, tau)", given,
            "Pass --T-Q and --k-tau, or --Q and --tau.")
    p["Q"] = real("Q", Q, 0.0, inclusive=True)
    p["tau"] = real("tau", tau, 0.0, inclusive=True)
    return p


# --------------------------------------------------------------------------------------------------- checkpoint


def _checkpoint_dir(output: str) -> str:
    parent, name = os.path.split(os.path.abspath(output).rstrip(os.sep))
    return os.path.join(parent, f".{name}.resume")


def _fingerprint(src: FrameSource) -> dict:
    st = os.stat(src.path)
    return {"path": os.path.abspath(src.path), "kind": src.kind, "width": src.width, "height": src.height,
            "size": st.st_size if src.kind == "video" else None,
            "mtime_ns": st.st_mtime_ns if src.kind == "video" else None, "n_frames": src.n_frames}


class _Checkpoint:
    def __init__(self, directory: str, params: dict, fingerprint: dict) -> None:
        self.dir, self.params, self.fingerprint = directory, params, fingerprint
        self.last = time.perf_counter()
        self.saved_n = -1

    def load(self) -> tuple[list[Palette], str | None] | None:
        path = os.path.join(self.dir, "state.json")
        if not os.path.isfile(path):
            return None
        try:
            with open(path) as f:
                doc = json.load(f)
        except (OSError, ValueError) as exc:
            raise StorageError(f"the checkpoint {path!r} cannot be read ({exc}); remove {self.dir!r} to start "
                               "afresh.") from exc
        if doc.get("version") != _CHECKPOINT_VERSION:
            raise StorageError(f"the checkpoint {path!r} has version {doc.get('version')!r}, this dclust reads "
                               f"{_CHECKPOINT_VERSION}; remove {self.dir!r} to start afresh.")
        diff = [f"{k}={doc['params'].get(k)!r} (now {v!r})" for k, v in self.params.items()
                if doc["params"].get(k) != v]
        if diff:
            raise StorageError(f"the checkpoint in {self.dir!r} was written with other parameters: "
                               f"{', '.join(diff)}; pass the same parameters to resume, or drop --resume.")
        theirs = {k: v for k, v in doc["input"].items() if k != "n_frames"}
        ours = {k: v for k, v in self.fingerprint.items() if k != "n_frames"}
        if theirs != ours:
            raise StorageError(f"the checkpoint in {self.dir!r} belongs to another input ({doc['input']['path']!r}, "
                               "or the file changed since); resume with the same input, or drop --resume.")
        return [Palette.from_json(d) for d in doc["palettes"]], doc.get("model")

    def save(self, palettes: list[Palette], fitter: Any, force: bool = False) -> None:
        n = len(palettes)
        if n == self.saved_n or not n or (not force and time.perf_counter() - self.last < _CHECKPOINT_SECONDS):
            return
        os.makedirs(self.dir, exist_ok=True)
        model = fitter.save(self.dir, n)
        doc = {"version": _CHECKPOINT_VERSION, "params": self.params, "input": self.fingerprint, "model": model,
               "palettes": [p.to_json() for p in palettes]}
        write_bytes(json.dumps(doc).encode(), os.path.join(self.dir, "state.json"))
        for name in os.listdir(self.dir):  # older models
            if name.startswith("model-") and name != model:
                remove_tree(os.path.join(self.dir, name))
        self.last, self.saved_n = time.perf_counter(), n

    def remove(self) -> None:
        remove_tree(self.dir)


# --------------------------------------------------------------------------------------------------- pipeline


@dataclass
class _Metrics:
    records: list = field(default_factory=list)
    prevO: np.ndarray | None = None
    prevQ: np.ndarray | None = None


def _record(t: int, pal: Palette, sse: int, dq: int, do: int, n_values: int) -> dict:
    mse = sse / n_values
    return {"t": t, "k": int(pal.ids.size), "births": pal.births, "deaths": pal.deaths, "revivals": pal.revivals,
            "psnr": psnr(mse), "mse": mse, "flicker": flicker_ratio(dq, do) if t > 0 else math.nan,
            "n_iter": pal.n_iter, "converged": pal.converged, "ids": pal.ids.tolist(), "rgb": pal.rgb.tolist()}


class _Worker(threading.Thread):
    """A daemon thread running ``fn``; its exception is kept for the caller."""

    def __init__(self, fn: Callable[[], None], name: str) -> None:
        super().__init__(name=name, daemon=True)
        self.fn, self.error = fn, None

    def run(self) -> None:
        try:
            self.fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread
            self.error = exc


def _put(q: queue.Queue, item: Any, stop: threading.Event, consumer: _Worker | None = None) -> bool:
    """Put ``item`` unless ``stop`` is set first; raise the consumer thread's error if it died."""
    while not stop.is_set():
        try:
            q.put(item, timeout=0.1)
            return True
        except queue.Full:
            if consumer is not None and consumer.error is not None:
                raise consumer.error
    return False


_SAMPLE_CACHE: dict = {}


def _sample(frame: np.ndarray, t: int, p: dict) -> np.ndarray:
    """The fit sample of a frame: ``fit_sample`` pixel positions drawn once from ``seed`` and used for every frame.

    The same positions in every frame keep the palette still where the picture is still (a fresh draw per frame
    would move the centres by sampling noise alone, which is flicker)."""
    pixels = frame.reshape(-1, 3)
    n = pixels.shape[0]
    if p["fit_sample"] >= n:
        return features(pixels, p["colorspace"])
    key = (n, p["fit_sample"], p["seed"])
    idx = _SAMPLE_CACHE.get(key)
    if idx is None:
        idx = np.sort(np.random.default_rng([p["seed"], n]).choice(n, p["fit_sample"], replace=False))
        _SAMPLE_CACHE.clear()
        _SAMPLE_CACHE[key] = idx
    return features(pixels[idx], p["colorspace"])


def _quantise_task(path: str, t: int, C, rgb, C_prev, rgb_prev, colorspace: str, out_tmp: str | None):
    """Worker side of the distributed path: quantise frame t (and t-1 for the flicker) from the Zarr input."""
    O = read_frame(path, t)
    prevO = prevQ = None
    if t > 0:
        prevO = read_frame(path, t - 1)
        prevQ = np.empty_like(prevO)
        quantise_rows(prevO, 0, prevO.shape[0], colorspace, C_prev, rgb_prev, None, None, prevQ)
    Q = np.empty_like(O)
    sums = quantise_rows(O, 0, O.shape[0], colorspace, C, rgb, prevO, prevQ, Q)
    if out_tmp is not None:
        write_frame(out_tmp, t, Q)
        return sums, None
    return sums, Q


def quantize_video(
    input: str | os.PathLike,
    output: str | os.PathLike,
    *,
    method: str = "dmeans",
    lam: float | None = 800.0,
    T_Q: float | None = None,
    k_tau: float | None = None,
    k: int | None = None,
    Q: float | None = None,
    tau: float | None = None,
    colorspace: str = "rgb",
    max_colors: int | None = None,
    fit_sample: int = 2048,
    max_iter: int = 100,
    seed: int = 0,
    palette_png: str | os.PathLike | None = None,
    report: str | os.PathLike | None = None,
    resume: bool = False,
    overwrite: bool = False,
    max_frames: int | None = None,
    codec: str | None = None,
    client: Any = None,
    _stop_after: int | None = None,
) -> dict:
    """Quantise the colours of a video (or Zarr frames store) frame by frame; write the quantised frames.

    Parameters
    ----------
    input, output : path
        A video file readable by PyAV or a Zarr array ``(T, H, W, 3)`` uint8 (``*.zarr``); the output is a Zarr
        store for ``*.zarr`` paths, else a video (container from the extension; H.264 via libx264 when available,
        the input's frame rate).
    method : {"dmeans", "kmeans", "dpmeans"}
        D-Means with persistent palette ids (``lam`` and ``T_Q``, ``k_tau``; [DM] 10.2 used 800, 15, 1.1 on RGB in
        [0, 255], the defaults); per-frame k-means with ``k`` colours warm-started from the previous frame; or
        per-frame DP-means with penalty ``lam``. A frame with fewer distinct colours than ``k`` in its fit sample
        (a black frame of a fade-in) is quantised with the colours it has; the report's summary lists those frames
        (``frames_fewer_colors``) and each frame's ``k`` is its number of colours.
    Q, tau : float, optional
        D-Means' revival cost per frame unseen and transition variance, in place of ``T_Q`` and ``k_tau`` (eq. 30:
        ``Q = lam/T_Q``, ``tau >= 1/(T_Q-1)``). A smaller ``tau`` holds the palette more firmly (less flicker,
        some PSNR); ``tau = 0`` keeps every colour's running mean over all frames.
    colorspace : {"rgb", "lab"}
        Space of the clustering: RGB values 0..255, or CIE Lab (D65). ``lam`` is a squared distance in it.
    max_colors : int, optional
        At most this many colours per frame: the clusters with the most sample pixels are kept.
    fit_sample : int, default 2048
        Pixels per frame used to fit the palette: the same ``fit_sample`` positions (drawn once from ``seed``) in
        every frame; every pixel is assigned. A larger sample lowers the sampling noise of the centres (higher
        PSNR) at the cost of fitting time; with D-Means it also opens more small clusters in the colour tails,
        since ``lam`` is an absolute radius.
    max_iter : int, default 100
        Bound on the passes of each frame's fit; the fits converge well within it (typically 8 to 15 passes), so
        the palette of a frame does not depend on where an unfinished fit stopped.
    palette_png, report : path, optional
        The palette over time as a PNG (one column per frame, one row per persistent cluster; transparent where a
        cluster is absent) and a JSON report (``frames`` list of ``k``, ``births``, ``deaths``, ``psnr``,
        ``flicker``, ...; the summary; the flicker series).
    resume : bool
        Continue an interrupted run of the same job from its checkpoint (``.{output}.resume``).
    overwrite : bool
        Replace existing outputs.
    max_frames : int, optional
        Process only the first ``max_frames`` frames.
    client : distributed.Client, optional
        Quantise on a Dask cluster (Zarr input required).

    Returns
    -------
    dict
        The report (also written to ``report`` when given).

    Examples
    --------
    A Zarr frames store in, a Zarr frames store out (a video file works the same way with PyAV installed):

    >>> import os, tempfile, numpy as np, zarr
    >>> from dclust.apps.video import quantize_video, synthetic_frames
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     zarr.save_array(os.path.join(tmp, "in.zarr"), np.stack(list(synthetic_frames(4, 32, 24))))
    ...     report = quantize_video(os.path.join(tmp, "in.zarr"), os.path.join(tmp, "out.zarr"), lam=800.0,
    ...                             T_Q=15, k_tau=1.1)
    ...     shape = zarr.open_array(os.path.join(tmp, "out.zarr")).shape
    >>> shape, len(report["frames"]), report["summary"]["psnr"] > 25
    ((4, 24, 32, 3), 4, True)
    """
    p = _check_params(method, lam, T_Q, k_tau, k, colorspace, max_colors, fit_sample, max_iter, seed, Q, tau)
    if max_frames is not None and (isinstance(max_frames, bool) or not isinstance(max_frames, int) or max_frames < 1):
        raise InvalidParameterError(message("max_frames", "an integer >= 1 or None", repr(max_frames),
                                            "Pass a valid max_frames."))
    src = open_frames(input)
    out = check_output(output, overwrite)
    if out == os.path.abspath(os.fspath(input)):
        raise InvalidParameterError(message("output", "a path other than the input", f"the input {out!r}",
                                            "Write the quantised video to a new path."))
    extra = {"palette_png": palette_png, "report": report}
    paths = {os.path.abspath(os.fspath(input)): "input", out: "output"}
    for name, path in extra.items():
        if path is None:
            continue
        local = check_output(path, overwrite, name)
        if local in paths:
            raise InvalidParameterError(message(name, "a path of its own", f"the same path as the {paths[local]}",
                                                "Give every output its own path."))
        paths[local] = name
    if client is not None and src.kind != "zarr":
        raise InvalidParameterError(message("input", "a Zarr frames store (T, H, W, 3) when a scheduler is used "
                                            "(workers read the frames from it)", f"a video file {src.path!r}",
                                            "Convert the video to Zarr first (dclust video quantize IN OUT.zarr "
                                            "--method ... writes frames), or drop --scheduler."))
    ckpt = _Checkpoint(_checkpoint_dir(out), p, _fingerprint(src))
    fitter = _FITTERS[method](p)
    palettes: list[Palette] = []
    if resume:
        state = ckpt.load()
        if state is not None:
            palettes, model_name = state
            fitter.restore(ckpt.dir, model_name, palettes)
            ckpt.saved_n = len(palettes)
    else:
        ckpt.remove()
    done = len(palettes)
    n_total = src.n_frames if max_frames is None or src.n_frames is None else min(src.n_frames, max_frames)
    sink = create_sink(out, src.width, src.height, src.fps, n_frames=n_total, codec=codec)
    t0 = time.perf_counter()
    metrics = _Metrics()
    try:
        runner = _run_distributed if client is not None else _run_local
        runner(src, sink, p, fitter, palettes, metrics, ckpt, max_frames, n_total, done, client, _stop_after)
        if not metrics.records:
            raise InvalidDataError(message(f"input {src.path!r}", "at least one video frame", "zero frames",
                                           "Pass a video that holds frames."))
        seconds = time.perf_counter() - t0
        doc = _report(src, out, p, metrics.records, palettes, seconds, done, getattr(sink, "codec", "zarr"))
        if palette_png is not None:
            write_png(palette_image(metrics.records), palette_png, overwrite=overwrite)
        if report is not None:
            write_bytes(json.dumps(_jsonable(doc), indent=1).encode(), check_output(report, overwrite, "report"))
        sink.commit()
    except BaseException:
        sink.abort()
        if len(palettes) > done or (palettes and ckpt.saved_n != len(palettes)):
            try:
                ckpt.save(palettes, fitter, force=True)
            except Exception:  # noqa: BLE001 - the original error matters more
                pass
        raise
    ckpt.remove()
    return doc


def _get(q: queue.Queue, stop: threading.Event) -> Any:
    """The next item, or None once ``stop`` is set."""
    while not stop.is_set():
        try:
            return q.get(timeout=0.1)
        except queue.Empty:
            continue
    return None


def _run_local(src, sink, p, fitter, palettes, metrics, ckpt, max_frames, n_total, done, client, stop_after):
    """Four stages in threads with bounded queues: decode -> fit (this thread) -> quantise -> encode.

    The fit of frame t+1 overlaps the quantisation of frame t; progress events are emitted from this thread (the
    callbacks live in its context) as the quantiser's records arrive."""
    stop = threading.Event()
    q_in: queue.Queue = queue.Queue(_QUEUE_FRAMES)
    q_fit: queue.Queue = queue.Queue(_QUEUE_FRAMES)
    q_out: queue.Queue = queue.Queue(_QUEUE_FRAMES)
    n_values = src.width * src.height * 3

    def read() -> None:
        for t, frame in enumerate(src.frames(0, max_frames)):
            if not _put(q_in, (t, frame), stop):
                return
        _put(q_in, None, stop)

    def quantise() -> None:
        table = CellTable()
        while True:
            item = _get(q_fit, stop)
            if item is None:
                break
            t, O, pal, watch = item
            Q = np.empty_like(O)
            table.reset()
            sse, dq, do = quantise_rows(O, 0, O.shape[0], p["colorspace"], pal.centers, pal.rgb, metrics.prevO,
                                        metrics.prevQ, Q, table)
            metrics.prevO, metrics.prevQ = O, Q
            rec = _record(t, pal, sse, dq, do, n_values)
            rec["_seconds"] = time.perf_counter() - watch
            metrics.records.append(rec)
            if not _put(q_out, Q, stop, writer):
                return
        _put(q_out, None, stop, writer)

    def write() -> None:
        while True:
            item = _get(q_out, stop)
            if item is None:
                return
            sink.write(item)

    reader = _Worker(read, "dclust-video-decode")
    quantiser = _Worker(quantise, "dclust-video-quantise")
    writer = _Worker(write, "dclust-video-encode")
    workers = (reader, quantiser, writer)
    for w in workers:
        w.start()
    t_start = time.perf_counter()
    emitted = 0

    def report_progress() -> None:
        nonlocal emitted
        while emitted < len(metrics.records):
            rec = metrics.records[emitted]
            _progress(rec, rec["t"], n_total, rec.pop("_seconds"), t_start, done)
            emitted += 1

    def check() -> None:
        for w in workers:
            if w.error is not None:
                raise w.error

    try:
        while True:
            try:
                item = q_in.get(timeout=0.1)
            except queue.Empty:
                check()
                report_progress()
                continue
            if item is None:
                break
            t, O = item
            watch = time.perf_counter()
            if t < done:
                pal = palettes[t]
            else:
                pal = fitter.fit(t, _sample(O, t, p), palettes[-1] if palettes else None)
                palettes.append(pal)
            if not _put(q_fit, (t, O, pal, watch), stop, quantiser):
                break
            report_progress()
            if t >= done:
                ckpt.save(palettes, fitter)
            if stop_after is not None and len(palettes) >= stop_after and t >= done:
                raise KeyboardInterrupt(f"stopped after {stop_after} frames (test hook)")
        _put(q_fit, None, stop, quantiser)
        while quantiser.is_alive() or writer.is_alive():
            check()
            report_progress()
            quantiser.join(timeout=0.1)
            writer.join(timeout=0.1)
        check()
        report_progress()
    finally:
        stop.set()
        for w in workers:
            w.join(timeout=120)


def _run_distributed(src, sink, p, fitter, palettes, metrics, ckpt, max_frames, n_total, done, client, stop_after):
    from collections import deque

    n = n_total or src.n_frames
    to_zarr = getattr(sink, "array", None) is not None
    out_tmp = sink.tmp if to_zarr else None
    n_values = src.width * src.height * 3
    in_flight = max(2, 2 * len(client.scheduler_info().get("workers", {})))
    pending: deque = deque()
    t_start = time.perf_counter()

    def drain_one() -> None:
        t, fut, pal, watch = pending.popleft()
        (sse, dq, do), Q = fut.result()
        rec = _record(t, pal, sse, dq, do, n_values)
        metrics.records.append(rec)
        if Q is not None:
            sink.write(Q)
        _progress(rec, t, n, time.perf_counter() - watch, t_start, done)

    for t in range(n):
        watch = time.perf_counter()
        if t < done:
            pal = palettes[t]
        else:
            pal = fitter.fit(t, _sample(src.frame(t), t, p), palettes[-1] if palettes else None)
            palettes.append(pal)
        prev = palettes[t - 1] if t > 0 else pal
        fut = client.submit(_quantise_task, src.path, t, pal.centers, pal.rgb, prev.centers, prev.rgb,
                            p["colorspace"], out_tmp, pure=False)
        pending.append((t, fut, pal, watch))
        while len(pending) >= in_flight:
            drain_one()
        if t >= done:
            ckpt.save(palettes, fitter)
        if stop_after is not None and len(palettes) >= stop_after and t >= done:
            raise KeyboardInterrupt(f"stopped after {stop_after} frames (test hook)")
    while pending:
        drain_one()
    if to_zarr:
        sink.n = n


def _progress(rec: dict, t: int, n_total: int | None, seconds: float, t_start: float, done: int) -> None:
    now = time.perf_counter()
    emit(ProgressEvent("video", "iter", t + 1, rec["psnr"], rec["k"], seconds,
                       {"n_frames": n_total, "births": rec["births"], "deaths": rec["deaths"],
                        "flicker": rec["flicker"], "fps": (t + 1) / max(now - t_start, 1e-9),
                        "replayed": t < done}))


# --------------------------------------------------------------------------------------------------- outputs


def _report(src, out, p, records, palettes, seconds, resumed, codec) -> dict:
    flick = [r["flicker"] for r in records]
    mse = float(np.mean([r["mse"] for r in records]))
    ks = [r["k"] for r in records]
    return {
        "input": os.path.abspath(src.path), "output": out, "method": p["method"], "params": p,
        "width": src.width, "height": src.height, "fps": float(src.fps), "codec": codec,
        "n_frames": len(records), "resumed_frames": resumed, "seconds": seconds,
        "frames_per_second": len(records) / max(seconds, 1e-9),
        "summary": {
            "psnr": psnr(mse), "mse": mse, "psnr_mean": float(np.mean([r["psnr"] for r in records])),
            "flicker_median_abs_dev": flicker_summary(flick),
            "flicker_median": float(np.nanmedian(flick)) if any(np.isfinite(flick)) else math.nan,
            "k_median": float(np.median(ks)), "k_mean": float(np.mean(ks)), "k_max": int(max(ks)),
            "births": int(sum(r["births"] for r in records)), "deaths": int(sum(r["deaths"] for r in records)),
            "revivals": int(sum(r["revivals"] for r in records)),
            "frames_not_converged": int(sum(not r["converged"] for r in records)),
            "frames_fewer_colors": ([r["t"] for r in records if r["k"] < p["k"]] if p["method"] == "kmeans"
                                    else []),
        },
        "flicker": flick,
        "frames": records,
    }


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    return value


def palette_image(records: list[dict], *, cell_height: int = 8, max_width: int = 2048) -> np.ndarray:
    """RGBA image of the palette over time: column = frame, row = persistent cluster id (in id order),
    transparent where the cluster is absent. Each frame is ``max(1, min(8, max_width // T))`` pixels wide.

    Parameters
    ----------
    records : list of dict
        One per frame, with ``"ids"`` (the persistent ids of its colours) and ``"rgb"`` (their colours, uint8
        triples): the ``frames`` of a :func:`quantize_video` report.
    cell_height : int, default 8
        Pixel rows per colour.
    max_width : int, default 2048
        Width budget of the image, shared by the frames.

    Returns
    -------
    ndarray of uint8, shape (n_ids * cell_height, T * frame_width, 4)

    Examples
    --------
    >>> from dclust.apps.video import palette_image
    >>> records = [{"ids": [0, 1], "rgb": [(255, 0, 0), (0, 0, 255)]}, {"ids": [1], "rgb": [(0, 0, 250)]}]
    >>> img = palette_image(records, cell_height=2)
    >>> img.shape, int(img[0, -1, 3])          # id 0 is absent from the second frame: transparent
    ((4, 16, 4), 0)
    """
    ids = sorted({i for r in records for i in r["ids"]})
    row = {i: j for j, i in enumerate(ids)}
    T = len(records)
    img = np.zeros((max(1, len(ids)), T, 4), np.uint8)
    for t, r in enumerate(records):
        for i, c in zip(r["ids"], r["rgb"]):
            img[row[i], t, :3] = c
            img[row[i], t, 3] = 255
    cw = max(1, min(8, max_width // max(T, 1)))
    return np.repeat(np.repeat(img, cell_height, axis=0), cw, axis=1)


# --------------------------------------------------------------------------------------------------- test data


def synthetic_frames(n_frames: int, width: int, height: int, *, seed: int = 0, n_shapes: int = 6,
                     texture: float = 6.0, noise: float = 0.0) -> Iterator[np.ndarray]:
    """Frames ``(height, width, 3)`` uint8 of moving, shaded coloured shapes (discs and boxes) bouncing over a
    slowly brightening and darkening vertical gradient.

    Every surface carries a fixed grain texture (standard deviation ``texture``) that moves with it, so frames have
    many distinct colours while the frame-to-frame change comes from motion and lighting, as in rendered video;
    ``noise`` adds fresh per-frame sensor noise on top.

    Parameters
    ----------
    n_frames, width, height : int
        Number and size of the frames.
    seed : int, default 0
        Seed of the scene (same seed, same frames).
    n_shapes : int, default 6
        Moving discs and boxes.
    texture, noise : float
        Standard deviations of the fixed grain and of the per-frame noise.

    Yields
    ------
    ndarray of uint8, shape (height, width, 3)

    Examples
    --------
    >>> from dclust.apps.video import synthetic_frames
    >>> frames = list(synthetic_frames(3, 32, 24, seed=0))
    >>> len(frames), frames[0].shape, frames[0].dtype.name
    (3, (24, 32, 3), 'uint8')
    """
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    cols = rng.integers(30, 226, size=(n_shapes, 3)).astype(np.float32)
    pos = rng.random((n_shapes, 2)) * [width, height]
    vel = (rng.random((n_shapes, 2)) - 0.5) * [width, height] * 0.03
    size = (0.08 + 0.12 * rng.random(n_shapes)) * min(width, height)
    kind = rng.integers(0, 2, n_shapes)
    bg0, bg1 = rng.integers(0, 256, 3).astype(np.float32), rng.integers(0, 256, 3).astype(np.float32)
    grain = rng.normal(0.0, texture, (height, width)).astype(np.float32)  # background grain, fixed in place
    tex = rng.normal(0.0, texture, (256, 256)).astype(np.float32)  # object grain, moves with each object
    a = (yy / max(height - 1, 1))[..., None]
    for t in range(n_frames):
        ph = 0.5 + 0.5 * np.sin(2 * np.pi * t / max(n_frames, 2))
        img = bg0 * (1 - a) + bg1 * a * (0.7 + 0.3 * ph) + grain[..., None]
        for s in range(n_shapes):
            dx, dy = xx - pos[s, 0], yy - pos[s, 1]
            if kind[s]:
                r = np.sqrt(dx * dx + dy * dy)
                m = r < size[s]
                shade = 1.0 - 0.5 * (r[m] / size[s])
            else:
                m = (np.abs(dx) < size[s]) & (np.abs(dy) < 0.6 * size[s])
                shade = 0.6 + 0.4 * (dx[m] + size[s]) / (2 * size[s])
            g = tex[np.rint(dy[m]).astype(np.int64) % 256, np.rint(dx[m]).astype(np.int64) % 256]
            img[m] = cols[s] * shade[:, None] + g[:, None]
        pos += vel
        for d, lim in ((0, width), (1, height)):
            out = (pos[:, d] < 0) | (pos[:, d] > lim)
            vel[out, d] *= -1
        if noise > 0:
            img += rng.normal(0.0, noise, img.shape[:2])[..., None].astype(np.float32)
        yield np.clip(img, 0, 255).astype(np.uint8)
