"""Video colour quantisation with Dynamic Means ([DM] 8.5; ALGORITHMS.md 9 and 10.2).

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

The job is a pipeline of four stages -- decode -> quantise -> encode -> metrics -- configured by one
:class:`VideoOptions`; each frame's palette is fitted between decode and quantise (:mod:`dclust.apps._palettes`),
and the checkpoint (:mod:`dclust.apps._video_checkpoint`) holds the palettes fitted so far.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import queue
import threading
import time
import warnings
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import numpy as np

from dclust import ProgressEvent, emit_progress
from dclust.errors import InvalidDataError, InvalidParameterError, message
from dclust.io import check_output, write_bytes
from dclust.io.video import create_sink, open_frames, read_frame, write_frame, write_png
from dclust.metrics import flicker_summary
from dclust.plot import palette_image

from ._palettes import FITTERS, Palette
from ._video_checkpoint import Checkpoint, checkpoint_dir, fingerprint
from ._video_kernels import CellTable, features, quantise_rows

__all__ = ["VideoOptions", "quantize_video", "psnr", "flicker_ratio", "synthetic_frames", "METHODS"]

METHODS = ("dmeans", "kmeans", "dpmeans")
_QUEUE_FRAMES = 3


# --------------------------------------------------------------------------------------------------- options


@dataclass(frozen=True)
class VideoOptions:
    """Everything :func:`quantize_video` can be told, checked when created (before any frame is read).

    Parameters
    ----------
    method : {"dmeans", "kmeans", "dpmeans"}, default "dmeans"
        D-Means with persistent palette ids (``lam`` and ``T_Q``, ``k_tau``; [DM] 10.2 used 800, 15, 1.1 on RGB in
        [0, 255], the defaults); per-frame k-means with ``k`` colors warm-started from the previous frame; or
        per-frame DP-means with penalty ``lam``. A frame with fewer distinct colors than ``k`` in its fit sample
        (a black frame of a fade-in) is quantised with the colors it has; the report's summary lists those frames
        (``frames_fewer_colors``) and each frame's ``k`` is its number of colors.
    lam : float, default 800
        Penalty of a new color (a squared distance in the color space); ignored by ``method="kmeans"``.
    T_Q, k_tau : float, optional
        D-Means' frames a color may go unseen and be revived (default 15) and revival radius in units of ``lam``
        (default 1.1).
    Q, tau : float, optional
        D-Means' revival cost per frame unseen and transition variance, in place of ``T_Q`` and ``k_tau`` (eq. 30:
        ``Q = lam/T_Q``, ``tau >= 1/(T_Q-1)``). A smaller ``tau`` holds the palette more firmly (less flicker,
        some PSNR); ``tau = 0`` keeps every color's running mean over all frames.
    k : int, optional
        Colors per frame of ``method="kmeans"`` (required there, refused otherwise).
    colorspace : {"rgb", "lab"}, default "rgb"
        Space of the clustering: RGB values 0..255, or CIE Lab (D65). ``lam`` is a squared distance in it.
    max_colors : int, optional
        At most this many colors per frame: the clusters with the most sample pixels are kept.
    fit_sample : int, default 2048
        Pixels per frame used to fit the palette: the same ``fit_sample`` positions (drawn once from ``seed``) in
        every frame; every pixel is assigned. A larger sample lowers the sampling noise of the centers (higher
        PSNR) at the cost of fitting time; with D-Means it also opens more small clusters in the color tails,
        since ``lam`` is an absolute radius.
    max_iter : int, default 100
        Bound on the passes of each frame's fit; the fits converge well within it (typically 8 to 15 passes), so
        the palette of a frame does not depend on where an unfinished fit stopped.
    seed : int, default 0
        Seed of the pixel sample and of the fits.
    palette_png, report : path, optional
        The palette over time as a PNG (one column per frame, one row per persistent cluster; transparent where a
        cluster is absent, :func:`dclust.plot.palette_image`) and a JSON report (``frames`` list of ``k``,
        ``births``, ``deaths``, ``psnr``, ``flicker``, ...; the summary; the flicker series).
    resume : bool, default False
        Continue an interrupted run of the same job from its checkpoint (``.{output}.resume``).
    overwrite : bool, default False
        Replace existing outputs.
    max_frames : int, optional
        Process only the first ``max_frames`` frames.
    codec : str, optional
        Video encoder of a video output (default: H.264 when available).

    Raises
    ------
    InvalidParameterError
        A value out of range, ``k`` missing for (or given to a method other than) ``"kmeans"``, or an incomplete
        pair of D-Means' temporal parameters.

    Examples
    --------
    >>> from dclust.apps.video import VideoOptions
    >>> VideoOptions(method="kmeans", k=8, lam=None).params()["k"]
    8
    >>> VideoOptions(lam=800.0).params()["T_Q"]  # [DM] 10.2's defaults
    15.0
    """

    method: str = "dmeans"
    lam: float | None = 800.0
    T_Q: float | None = None
    k_tau: float | None = None
    Q: float | None = None
    tau: float | None = None
    k: int | None = None
    colorspace: str = "rgb"
    max_colors: int | None = None
    fit_sample: int = 2048
    max_iter: int = 100
    seed: int = 0
    palette_png: str | os.PathLike | None = None
    report: str | os.PathLike | None = None
    resume: bool = False
    overwrite: bool = False
    max_frames: int | None = None
    codec: str | None = None

    def __post_init__(self) -> None:
        self.params()
        m = self.max_frames
        if m is not None and (isinstance(m, bool) or not isinstance(m, int) or m < 1):
            raise InvalidParameterError(message("max_frames", "an integer >= 1 or None", repr(m),
                                                "Pass a valid max_frames."))

    def params(self) -> dict:
        """The checked parameters of the fits (what a checkpoint records and the report shows): the method, the
        color space, the sample, and the method's own parameters (the others None)."""
        return _check_params(self.method, self.lam, self.T_Q, self.k_tau, self.k, self.colorspace, self.max_colors,
                             self.fit_sample, self.max_iter, self.seed, self.Q, self.tau)


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



# --------------------------------------------------------------------------------------------------- the job


def quantize_video(input: str | os.PathLike, output: str | os.PathLike, options: VideoOptions | None = None, *,
                   client: Any = None, _stop_after: int | None = None, **legacy_kwargs: Any) -> dict:
    """Quantise the colors of a video (or Zarr frames store) frame by frame; write the quantised frames.

    Parameters
    ----------
    input, output : path
        A video file readable by PyAV or a Zarr array ``(T, H, W, 3)`` uint8 (``*.zarr``); the output is a Zarr
        store for ``*.zarr`` paths, else a video (container from the extension; H.264 via libx264 when available,
        the input's frame rate).
    options : VideoOptions, optional
        The method, its parameters and the outputs besides ``output`` (default: ``VideoOptions()``, D-Means with
        [DM] 10.2's parameters).
    client : distributed.Client, optional
        Quantise on a Dask cluster (Zarr input required).
    **legacy_kwargs
        Deprecated: the fields of :class:`VideoOptions` as keywords (``method="kmeans", k=8``); they still work
        for one release, with a DeprecationWarning.

    Returns
    -------
    dict
        The report (also written to ``options.report`` when given): input, output, method, params, size, fps,
        codec, ``n_frames``, ``resumed_frames``, seconds, ``frames_per_second``, ``summary`` (PSNR, flicker, K,
        births, deaths, ...), the ``flicker`` series and the per-frame records ``frames``.

    Raises
    ------
    InvalidParameterError
        Bad options, an output at the input's path, two outputs at one path, or a ``client`` with a video file.
    InvalidDataError
        An unreadable input, or one without frames.
    StorageError
        An existing output without ``overwrite``, or a checkpoint of other parameters or another input.

    Examples
    --------
    >>> import os, tempfile
    >>> from dclust.apps.video import VideoOptions, quantize_video, synthetic_frames
    >>> from dclust.io.video import write_video
    >>> d = tempfile.mkdtemp()
    >>> clip = write_video(synthetic_frames(4, 32, 24), os.path.join(d, "clip.zarr"))
    >>> doc = quantize_video(clip, os.path.join(d, "q.zarr"), VideoOptions(lam=800.0, fit_sample=256))
    >>> doc["n_frames"], doc["summary"]["psnr"] > 20
    (4, True)
    """
    options = _options(options, legacy_kwargs)
    p = options.params()
    src = open_frames(input)
    out = _check_outputs(input, output, options, src, client)
    ckpt = Checkpoint(checkpoint_dir(out), p, fingerprint(src))
    fitter = FITTERS[options.method](p)
    palettes: list[Palette] = []
    if options.resume:
        state = ckpt.load()
        if state is not None:
            palettes, model_name = state
            fitter.restore(ckpt.dir, model_name, palettes)
            ckpt.saved_n = len(palettes)
    else:
        ckpt.remove()
    max_frames = options.max_frames
    n_total = src.n_frames if max_frames is None or src.n_frames is None else min(src.n_frames, max_frames)
    sink = create_sink(out, src.width, src.height, src.fps, n_frames=n_total, codec=options.codec)
    job = _Job(src, p, fitter, palettes, ckpt, len(palettes), n_total, max_frames, _stop_after)
    try:
        if client is not None:
            _run_distributed(job, sink, client)
        else:
            _run_local(job, sink)
        if not job.records:
            raise InvalidDataError(message(f"input {src.path!r}", "at least one video frame", "zero frames",
                                           "Pass a video that holds frames."))
        seconds = time.perf_counter() - job.t_start
        doc = _report(src, out, p, job.records, palettes, seconds, job.done, getattr(sink, "codec", "zarr"))
        if options.palette_png is not None:
            write_png(palette_image(job.records), options.palette_png, overwrite=options.overwrite)
        if options.report is not None:
            write_bytes(json.dumps(_jsonable(doc), indent=1).encode(),
                        check_output(options.report, options.overwrite, "report"))
        sink.commit()
    except BaseException:
        sink.abort()
        if len(palettes) > job.done or (palettes and ckpt.saved_n != len(palettes)):
            try:
                ckpt.save(palettes, fitter, force=True)
            except Exception:  # noqa: BLE001 - the original error matters more
                pass
        raise
    ckpt.remove()
    return doc


def _options(options: VideoOptions | None, legacy: dict[str, Any]) -> VideoOptions:
    """``options``, or (deprecated) a :class:`VideoOptions` made of keywords."""
    if not legacy:
        return VideoOptions() if options is None else options
    names = {f.name for f in dataclasses.fields(VideoOptions)}
    unknown = sorted(set(legacy) - names)
    if unknown:
        raise TypeError(f"quantize_video() got an unexpected keyword argument {unknown[0]!r}")
    if options is not None:
        raise InvalidParameterError(message("quantize_video", "options=VideoOptions(...) or keywords, not both",
                                            f"options and {', '.join(sorted(legacy))}",
                                            "Put every setting into the VideoOptions."))
    warnings.warn("quantize_video(..., " + ", ".join(f"{k}=..." for k in legacy) + ") is deprecated and will be "
                  "removed in the next release; pass options=VideoOptions(...) instead.", DeprecationWarning,
                  stacklevel=3)
    return VideoOptions(**legacy)


def _check_outputs(input: Any, output: Any, options: VideoOptions, src: Any, client: Any) -> str:
    """Before any work: the output, the palette PNG and the report are new (or ``overwrite``), in existing
    directories, at paths of their own; a ``client`` needs a Zarr input."""
    out = check_output(output, options.overwrite)
    if out == os.path.abspath(os.fspath(input)):
        raise InvalidParameterError(message("output", "a path other than the input", f"the input {out!r}",
                                            "Write the quantised video to a new path."))
    paths = {os.path.abspath(os.fspath(input)): "input", out: "output"}
    for name, path in {"palette_png": options.palette_png, "report": options.report}.items():
        if path is None:
            continue
        local = check_output(path, options.overwrite, name)
        if local in paths:
            raise InvalidParameterError(message(name, "a path of its own", f"the same path as the {paths[local]}",
                                                "Give every output its own path."))
        paths[local] = name
    if client is not None and src.kind != "zarr":
        raise InvalidParameterError(message("input", "a Zarr frames store (T, H, W, 3) when a scheduler is used "
                                            "(workers read the frames from it)", f"a video file {src.path!r}",
                                            "Convert the video to Zarr first (dclust video quantize IN OUT.zarr "
                                            "--method ... writes frames), or drop --scheduler."))
    return out


@dataclass
class _Job:
    """The state of one run: the input, the fit parameters ``p``, the fitter and the palettes fitted so far (the
    first ``done`` of them replayed from a checkpoint), and the metrics stage's records."""

    src: Any
    p: dict
    fitter: Any
    palettes: list[Palette]
    checkpoint: Checkpoint
    done: int
    n_total: int | None
    max_frames: int | None
    stop_after: int | None
    records: list[dict] = field(default_factory=list)
    t_start: float = field(default_factory=time.perf_counter)

    def palette(self, t: int, frame: np.ndarray) -> Palette:
        """Frame ``t``'s palette: replayed from the checkpoint, or fitted on the frame's sample."""
        if t < self.done:
            return self.palettes[t]
        pal = self.fitter.fit(t, _sample(frame, t, self.p), self.palettes[-1] if self.palettes else None)
        self.palettes.append(pal)
        return pal

    def fitted(self, t: int) -> None:
        """After frame ``t``'s palette: save the checkpoint (every few seconds); the test hook's interruption."""
        if t < self.done:
            return
        self.checkpoint.save(self.palettes, self.fitter)
        if self.stop_after is not None and len(self.palettes) >= self.stop_after:
            raise KeyboardInterrupt(f"stopped after {self.stop_after} frames (test hook)")

    def measured(self, t: int, pal: Palette, sums: tuple[int, int, int], seconds: float) -> None:
        """The metrics stage: frame ``t``'s record (PSNR, flicker, palette) from the quantiser's sums, and its
        progress event."""
        sse, dq, do = sums
        mse = sse / (self.src.width * self.src.height * 3)
        rec = {"t": t, "k": int(pal.ids.size), "births": pal.births, "deaths": pal.deaths, "revivals": pal.revivals,
               "psnr": psnr(mse), "mse": mse, "flicker": flicker_ratio(dq, do) if t > 0 else math.nan,
               "n_iter": pal.n_iter, "converged": pal.converged, "ids": pal.ids.tolist(), "rgb": pal.rgb.tolist()}
        self.records.append(rec)
        emit_progress(ProgressEvent("video", "iter", t + 1, rec["psnr"], rec["k"], seconds,
                                    {"n_frames": self.n_total, "births": rec["births"], "deaths": rec["deaths"],
                                     "flicker": rec["flicker"],
                                     "fps": (t + 1) / max(time.perf_counter() - self.t_start, 1e-9),
                                     "replayed": t < self.done}))


# --------------------------------------------------------------------------------------------------- in process


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


def _get(q: queue.Queue, stop: threading.Event) -> Any:
    """The next item, or None once ``stop`` is set."""
    while not stop.is_set():
        try:
            return q.get(timeout=0.1)
        except queue.Empty:
            continue
    return None


def _run_local(job: _Job, sink: Any) -> None:
    """decode -> (fit) -> quantise -> encode in threads with bounded queues; metrics on this thread.

    Decoding, quantising and encoding run in their own threads; this thread fits each frame's palette (the fit of
    frame t+1 overlaps the quantisation of frame t) and runs the metrics stage as the quantiser's sums arrive, so
    the progress events are emitted where the callbacks live."""
    stop = threading.Event()
    q_in: queue.Queue = queue.Queue(_QUEUE_FRAMES)
    q_fit: queue.Queue = queue.Queue(_QUEUE_FRAMES)
    q_out: queue.Queue = queue.Queue(_QUEUE_FRAMES)
    measured: deque = deque()  # (t, palette, sums, seconds) from the quantiser, for the metrics stage
    colorspace = job.p["colorspace"]

    def decode() -> None:
        for t, frame in enumerate(job.src.frames(0, job.max_frames)):
            if not _put(q_in, (t, frame), stop):
                return
        _put(q_in, None, stop)

    def quantise() -> None:
        table = CellTable()
        prevO = prevQ = None
        while True:
            item = _get(q_fit, stop)
            if item is None:
                break
            t, O, pal, watch = item
            Q = np.empty_like(O)
            table.reset()
            sums = quantise_rows(O, 0, O.shape[0], colorspace, pal.centers, pal.rgb, prevO, prevQ, Q, table)
            prevO, prevQ = O, Q
            measured.append((t, pal, sums, time.perf_counter() - watch))
            if not _put(q_out, Q, stop, encoder):
                return
        _put(q_out, None, stop, encoder)

    def encode() -> None:
        while True:
            item = _get(q_out, stop)
            if item is None:
                return
            sink.write(item)

    decoder = _Worker(decode, "dclust-video-decode")
    quantiser = _Worker(quantise, "dclust-video-quantise")
    encoder = _Worker(encode, "dclust-video-encode")
    workers = (decoder, quantiser, encoder)
    for w in workers:
        w.start()

    def metrics() -> None:
        while measured:
            job.measured(*measured.popleft())

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
                metrics()
                continue
            if item is None:
                break
            t, O = item
            watch = time.perf_counter()
            pal = job.palette(t, O)
            if not _put(q_fit, (t, O, pal, watch), stop, quantiser):
                break
            metrics()
            job.fitted(t)
        _put(q_fit, None, stop, quantiser)
        while quantiser.is_alive() or encoder.is_alive():
            check()
            metrics()
            quantiser.join(timeout=0.1)
            encoder.join(timeout=0.1)
        check()
        metrics()
    finally:
        stop.set()
        for w in workers:
            w.join(timeout=120)


# --------------------------------------------------------------------------------------------------- on a cluster


def _quantise_task(path: str, t: int, C, rgb, C_prev, rgb_prev, colorspace: str, out_tmp: str | None):
    """decode -> quantise -> encode of frame t on a worker, from the Zarr input (and t-1 for the flicker)."""
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


def _run_distributed(job: _Job, sink: Any, client: Any) -> None:
    """The driver fits each palette; workers decode, quantise and (Zarr output) encode the frames; the driver
    encodes a video output and runs the metrics stage, in frame order."""
    src = job.src
    n = job.n_total or src.n_frames
    to_zarr = getattr(sink, "array", None) is not None
    out_tmp = sink.tmp if to_zarr else None
    in_flight = max(2, 2 * len(client.scheduler_info().get("workers", {})))
    pending: deque = deque()

    def drain_one() -> None:
        t, fut, pal, watch = pending.popleft()
        sums, Q = fut.result()
        if Q is not None:
            sink.write(Q)
        job.measured(t, pal, sums, time.perf_counter() - watch)

    for t in range(n):
        watch = time.perf_counter()
        pal = job.palette(t, src.frame(t) if t >= job.done else None)
        prev = job.palettes[t - 1] if t > 0 else pal
        fut = client.submit(_quantise_task, src.path, t, pal.centers, pal.rgb, prev.centers, prev.rgb,
                            job.p["colorspace"], out_tmp, pure=False)
        pending.append((t, fut, pal, watch))
        while len(pending) >= in_flight:
            drain_one()
        job.fitted(t)
    while pending:
        drain_one()
    if to_zarr:
        sink.n = n


# --------------------------------------------------------------------------------------------------- metrics


def psnr(mse: float, peak: float = 255.0) -> float:
    """``10 log10(peak^2 / mse)`` in dB (inf for ``mse = 0``).

    >>> round(psnr(255.0 ** 2 / 100), 6)
    20.0
    """
    return math.inf if mse <= 0 else 10.0 * math.log10(peak * peak / mse)


def flicker_ratio(dq: float, do: float) -> float:
    """ALGORITHMS.md 9: ``f_t = mean|Q_t - Q_{t-1}| / mean|O_t - O_{t-1}|`` from the two sums (same pixel count);
    NaN when the original does not change.

    >>> flicker_ratio(30, 20), math.isnan(flicker_ratio(5, 0))
    (1.5, True)
    """
    return float(dq) / float(do) if do > 0 else math.nan



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



# --------------------------------------------------------------------------------------------------- test data


def synthetic_frames(n_frames: int, width: int, height: int, *, seed: int = 0, n_shapes: int = 6,
                     texture: float = 6.0, noise: float = 0.0) -> Iterator[np.ndarray]:
    """Frames ``(height, width, 3)`` uint8 of moving, shaded coloured shapes (discs and boxes) bouncing over a
    slowly brightening and darkening vertical gradient.

    Every surface carries a fixed grain texture (standard deviation ``texture``) that moves with it, so frames have
    many distinct colours while the frame-to-frame change comes from motion and lighting, as in rendered video;
    ``noise`` adds fresh per-frame sensor noise on top.

    Examples
    --------
    >>> from dclust.apps.video import synthetic_frames
    >>> frames = list(synthetic_frames(3, 32, 24, seed=1))
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
