"""Graphs for feature-allocation models: bits Z kept as a row-chunked uint8 dask array next to X, maps over
(X block, Z block) pairs, the greedy initialisation (docs/algorithms.md 2.6), K-features passes (2.4) and the
reduction of ``G = Z'Z``, ``B = Z'X`` (8.1)."""

from __future__ import annotations

from dataclasses import dataclass

import dask.array as da
import numpy as np

from ..kernels.bpmeans import gram_partial, sweep_rows
from ..kernels.kfeatures import draw_keys, exhaustive_rows, greedy_rows
from .passes import map_partials
from .reduce import tree_reduce

__all__ = [
    "Gram",
    "map_with_bits",
    "greedy_init",
    "init_bits",
    "kfeatures_pass",
    "transform_bits",
    "FeatureOverflow",
    "bits_from_parts",
]


@dataclass
class Gram:
    """The BP / K-features monoid: ``G = Z'Z`` (K x K), ``B = Z'X`` (K x D), the rows' squared residuals
    ``sse`` and the number of changed bits ``flips``. Merging pads to the largest K (new features are 0 for
    rows that never saw them)."""

    G: np.ndarray
    B: np.ndarray
    sse: float = 0.0
    flips: int = 0

    @staticmethod
    def merge_all(parts) -> "Gram":
        parts = list(parts)
        k = max(p.G.shape[0] for p in parts)
        d = parts[0].B.shape[1]
        G = np.zeros((k, k))
        B = np.zeros((k, d))
        for p in parts:
            kp = p.G.shape[0]
            G[:kp, :kp] += p.G
            B[:kp] += p.B
        return Gram(G, B, float(sum(p.sse for p in parts)), int(sum(p.flips for p in parts)))


class FeatureOverflow(Exception):
    """Raised inside the graph code when more than ``max_features`` features would be opened."""

    def __init__(self, n_features: int, residual: float, where: str) -> None:
        super().__init__(where)
        self.n_features, self.residual, self.where = n_features, residual, where


def map_with_bits(fn, X: da.Array, Z: da.Array, *, blocks=None, **kwargs) -> da.Array:
    """``fn(X_block, Z_block, offset=, block_index=, **kwargs)`` per row block; a 1-D object array of partials.

    ``Z`` has X's row chunks, or one chunk per block of ``blocks`` (one column chunk). ``blocks`` restricts the map
    to those block indices.
    """
    return map_partials(fn, X, Z, blocks=blocks, **kwargs)


def _gram_of(parts):
    out = np.empty(len(parts), dtype=object)
    out[:] = [p[1] for p in parts]
    return out


def _bits_of(part, k):
    return part[0][0]


def bits_from_parts(parts: da.Array, chunks: tuple[int, ...], k: int) -> da.Array:
    """The Z blocks held in persisted partials ``(Z_block, Gram, ...)`` as one (N, k) uint8 dask array."""
    return parts.map_blocks(_bits_of, k, chunks=(tuple(chunks), (k,)), new_axis=1, dtype=np.uint8)


# --------------------------------------------------------------------------------------- greedy init (2.6)


def _greedy_partial(Xb, *, offset, block_index, features, seed, round_, threshold):
    Z, q = greedy_rows(Xb, features)
    w = np.where(q > threshold, q, 0.0) if threshold > 0 else q
    keys = draw_keys(np.arange(offset, offset + Xb.shape[0]), w, seed, round_)
    i = int(np.argmin(keys)) if keys.size else 0
    bad = not np.isfinite(q).all()
    best = (float(keys[i]), offset + i) if keys.size else (np.inf, -1)
    row = np.asarray(Xb[i], dtype=np.float64) if keys.size else np.zeros(Xb.shape[1])
    sse = float(np.nansum(q))
    return sse, best, row, block_index if bad else -1


def _merge_greedy(parts):
    sse = sum(p[0] for p in parts)
    best = min(parts, key=lambda p: p[1])
    bad = [p[3] for p in parts if p[3] >= 0]
    return sse, best[1], best[2], min(bad) if bad else -1


def _greedy_round(X, A, seed, round_, split_every, threshold=0.0):

    parts = map_partials(_greedy_partial, X, features=A, seed=seed, round_=round_, threshold=float(threshold))
    return tree_reduce(parts, _merge_greedy, split_every=split_every).compute()[()]


def greedy_init(X: da.Array, mean: np.ndarray, *, lam: float, n_features: int | None, seed: int,
                max_features: int, split_every=None, capped: bool = False):
    """Greedy K-means++-style features (docs/algorithms.md 2.6, E-MB3): one pass per feature.

    Starts from the base feature ``mean``; each pass computes the greedy bits and squared residuals ``d_n`` of
    the current features and draws the next feature's row with probability proportional to ``d_n`` (an
    exponential race, so the draw is a min-reduction). The new feature is that row's residual. For fixed
    ``n_features`` it stops at that many features (padding with zero features if the residual vanishes); for
    unknown K (``n_features=None``) it stops when ``sum d + lam*K`` does not decrease (the last feature is undone)
    and, in addition, draws only among rows whose squared residual exceeds ``lam`` (stopping when there are
    none). That is BP-means' own opening rule (T3): a row within ``lam`` of its reconstruction never opens a
    feature in BP-means, so the initialisation does not open features that BP-means would not. Without it, on
    large N the penalised objective keeps falling by refitting noise (about ``N sigma^2 / pi`` per feature),
    and the greedy start had 60-80 features on 20,000 6 x 6 images where the data have 4.

    Returns ``(A, sse, passes)``. Raises :class:`FeatureOverflow` when more than ``max_features`` are needed,
    unless ``capped`` (then it stops at ``max_features``).
    """
    A = np.asarray(mean, dtype=np.float64).reshape(1, -1)
    threshold = float(lam) if n_features is None else 0.0
    sse, (key, idx), row, _ = _greedy_round(X, A, seed, 0, split_every, threshold)
    passes = 1
    while n_features is None or A.shape[0] < n_features:
        if not np.isfinite(key) or sse <= 0:
            break
        resid = row - greedy_rows(row[None], A)[0][0].astype(np.float64) @ A
        cand = np.vstack([A, resid])
        sse2, (key2, idx2), row2, _ = _greedy_round(X, cand, seed, passes, split_every, threshold)
        passes += 1
        if n_features is None:
            if not sse2 + lam * cand.shape[0] < sse + lam * A.shape[0]:
                break
            if cand.shape[0] > max_features:
                if capped:  # capped BP-means: stop at the cap instead
                    break
                raise FeatureOverflow(cand.shape[0], float(resid @ resid), "greedy initialisation")
        A, sse, key, row = cand, sse2, key2, row2
    if n_features is not None and A.shape[0] < n_features:
        A = np.vstack([A, np.zeros((n_features - A.shape[0], A.shape[1]))])
    return A, float(sse), passes


def _init_bits_block(Xb, features):
    return greedy_rows(Xb, features)[0]


def init_bits(X: da.Array, A: np.ndarray, greedy: bool) -> da.Array:
    """Lazy initial Z: the greedy bits of ``A`` (a pure function of each row), or no features at all."""
    k = A.shape[0]
    if not greedy or k == 0:
        return da.zeros((X.shape[0], k), dtype=np.uint8, chunks=(X.chunks[0], (k,)))
    return X.map_blocks(_init_bits_block, A, chunks=(X.chunks[0], (k,)), dtype=np.uint8)


# --------------------------------------------------------------------------------------- K-features (2.4)


def _kf_partial(Xb, Zb, *, offset, block_index, features, exhaustive):
    Z = np.array(Zb, dtype=np.uint8, order="C", copy=True)
    if exhaustive:
        Z, flips = exhaustive_rows(Xb, Z, features)
        Zf = Z.astype(np.float64)
        R = np.asarray(Xb, dtype=np.float64) - Zf @ features
        q = (R * R).sum(axis=1)
    else:
        q, flips = sweep_rows(Xb, Z, features, repeat=True)
    G, B = gram_partial(Xb, Z)
    return Z, Gram(G, B, float(q.sum()), int(flips))


def kfeatures_pass(X: da.Array, Z: da.Array, A: np.ndarray, *, exhaustive: bool, split_every=None):
    """One K-features step 1 (every row independently, docs/algorithms.md 2.4) and the reduction of (G, B).

    Returns ``(Z_new persisted, Gram)``; ``Gram.sse`` is ``||X - Z_new A||^2`` with the old A.
    """
    parts = map_with_bits(_kf_partial, X, Z, features=np.asarray(A, dtype=np.float64), exhaustive=exhaustive)
    parts = parts.persist()
    gram = tree_reduce(parts.map_blocks(_gram_of, dtype=object), Gram.merge_all, split_every=split_every)
    gram = gram.compute()[()]
    Znew = bits_from_parts(parts, X.chunks[0], A.shape[0]).persist()
    return Znew, gram


def _transform_block(Xb, features):
    Z = np.zeros((Xb.shape[0], features.shape[0]), np.uint8)
    sweep_rows(Xb, Z, features, repeat=True)
    return Z


def transform_bits(X: da.Array, A: np.ndarray) -> da.Array:
    """Lazy Z for new rows: from all-zero bits, coordinate sweeps against fixed ``A`` until each row is stable."""
    A = np.asarray(A, dtype=np.float64)
    return X.map_blocks(_transform_block, A, chunks=(X.chunks[0], (A.shape[0],)), dtype=np.uint8)
