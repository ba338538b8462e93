"""The palette of each frame of the video job: what a fitter returns (:class:`Palette`) and the three fitters --
D-Means carried over time, per-frame k-means warm-started from the previous frame, per-frame DP-means.

Every fitter has ``fit(t, X, prev) -> Palette`` on the frame's fit sample ``X`` (in the colour space), and
``save(directory, n)`` / ``restore(directory, name, palettes)`` for the job's checkpoint.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass

import numpy as np

from dclust.cluster import kmeans_plusplus, lloyd
from dclust.errors import ConvergenceWarning, DclustError, StorageError
from dclust.io import load, save
from dclust.stream import DynamicMeans

from ._video_kernels import palette_rgb

__all__ = ["Palette", "FITTERS"]


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


FITTERS = {"dmeans": _DMeansFitter, "kmeans": _KMeansFitter, "dpmeans": _DPMeansFitter}
