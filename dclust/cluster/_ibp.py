"""Collapsed Gibbs for the Indian-buffet linear-Gaussian model (docs/algorithms.md 10.1): the sampler BP-means is
compared with, in memory, seeded.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from .._dask.passes import map_blocks
from .._fit import ProgressEvent, Stopwatch, emit, rng_state
from .._registry import register
from .._validation import COUNT, POSITIVE, Interval, Options, as_generator, constrain
from ..errors import InvalidParameterError, message
from ..kernels import ibp as K
from ._base import MEMORY_PARAMETERS, TransformerMixin, wrap_output

from ._inmemory import _InMemory
from ..typing import ArrayLike, CheckpointLike, Ignored, SeedLike

__all__ = ["IBPGibbs"]


def _ibp_codes(Xb: npt.NDArray[Any], features: np.ndarray, probs: np.ndarray, sigma_x: float) -> np.ndarray:
    return K.ibp_map_codes(Xb, features, probs, sigma_x)


def _offset_hint(X: np.ndarray) -> str:
    """Advice for data far from the origin: the model ``X = Z A + noise`` has no intercept, so an offset common to
    every row is a feature that every row holds, and an offset far above the noise takes many features."""
    mean, spread = np.abs(X.mean(axis=0)), X.std(axis=0)
    if np.any(mean > 10 * (spread + float(np.finfo(np.float64).tiny))):
        return "The rows sit far from the origin (the model has no intercept): center X (X - X.mean(axis=0)). "
    return ""


@register
class IBPGibbs(TransformerMixin, _InMemory):
    """Collapsed Gibbs sampler for the Indian-buffet linear-Gaussian feature model (Griffiths & Ghahramani 2006),
    the sampler [MB] 5.1 compares BP-means with (docs/algorithms.md 10.1).

    Model: ``Z ~ IBP(alpha)``, feature means ``A_k ~ N(0, sigma_a^2 I)``, ``x_n ~ N(z_n A, sigma_x^2 I)``.
    *Collapsed*: A is integrated out, as in Griffiths & Ghahramani's sampler. Each sweep visits the rows in a fresh
    random order; every bit of a feature used by another row is drawn from its exact conditional
    (prior ``m_-n,k / N`` times the Gaussian predictive of ``x_n``), features used only by row n are dropped and
    the number of new features for row n is drawn exactly from the Poisson(``alpha / N``) prior times the
    predictive, truncated at ``max_new_features``. The hyperparameters are fixed (not resampled). O(N K^3) per
    sweep, in memory. The sampler starts from no feature. The data are not centred: a feature shared by all rows
    plays the base feature (background) of [MB].

    The collapsed sampler mixes slowly at small noise: a new feature must pay for its variance in every dimension,
    so early "whole image" features persist. ``anneal_factor > 1`` adds a continuation burn-in: during the first
    half of the sweeps ``sigma_x`` is multiplied by a factor that decreases geometrically from ``anneal_factor``
    to 1; only sweeps at the true ``sigma_x`` are eligible for ``keep="best"``. As in [MB] 5.1, features are
    identifiable only up to recodings (a base feature holding an object plus a negative copy of that object).

    Parameters
    ----------
    alpha : float, default 1.0
        IBP mass parameter (the paper's experiment: 1).
    sigma_x : float, default 1.0
        Noise standard deviation.
    sigma_a : float, default 1.0
        Standard deviation of the feature means (the paper's experiment: variance 0.5).
    n_iter : int, default 100
        Gibbs sweeps.
    max_new_features : int, default 4
        Truncation of the number of new features proposed per row.
    max_features : int, default 100
        Capacity of Z; exceeding it raises (lower ``alpha`` or raise ``sigma_x``).
    anneal_factor : float, default 1.0
        Initial multiplier of ``sigma_x`` for the continuation burn-in (1 = the plain sampler).
    keep : {"best", "last"}, default "best"
        Report the sample with the highest log joint over all sweeps, or the last one.
    max_samples : int, default 5000
        Largest N accepted.
    random_state : int, Generator or None
    checkpoint : str or os.PathLike, optional
        As in :class:`~dclust.cluster.KMeans`: the chain (Z, its Gram statistics, the kept sample, histories and
        the generator's exact state) is saved atomically after every sweep; an interrupted fit resumes at the next
        sweep and draws the identical chain, bit for bit.

    Attributes
    ----------
    allocation_ : ndarray (n_samples, n_latent_features_) uint8
        Binary features of the kept sample, columns in left-ordered form (sorted by the binary number they read
        from the first row down).
    features_ : ndarray (n_latent_features_, n_features_in_)
        Posterior mean of A given ``allocation_``: ``(Z^T Z + sigma_x^2/sigma_a^2 I)^-1 Z^T X``.
    feature_counts_ : ndarray (n_latent_features_,) int64
        Rows holding each feature.
    n_latent_features_ : int
        K, the number of features (``n_features_in_`` is D, as in scikit-learn and BPMeans).
    log_joint_ : float
        ``log P(X | Z) + log P([Z])`` of the kept sample.
    log_joint_history_ : list of float
        The log joint (at the true ``sigma_x``) after every sweep.
    objective_history_ : list of float
        ``-log_joint_history_`` (lower is better).
    n_latent_features_history_ : list of int
    n_iter_ : int
    n_features_in_ : int

    Examples
    --------
    >>> import numpy as np
    >>> from dclust.cluster import IBPGibbs
    >>> rng = np.random.default_rng(0)
    >>> A = np.array([[4.0, 0, 0, 0], [0, 0, 4.0, 4.0]])
    >>> Z = rng.integers(0, 2, size=(40, 2))
    >>> X = Z @ A + 0.1 * rng.standard_normal((40, 4))
    >>> ibp = IBPGibbs(sigma_x=0.1, sigma_a=3.0, n_iter=40, anneal_factor=10.0, random_state=0).fit(X)
    >>> ibp.n_latent_features_, np.round(ibp.features_, 1).tolist()
    (2, [[4.0, 0.0, 0.1, 0.0], [-0.0, -0.0, 3.9, 4.0]])
    """

    allocation_: np.ndarray  # uint8
    features_: npt.NDArray[np.float64]
    feature_counts_: npt.NDArray[np.int64]
    n_latent_features_: int

    _parameter_constraints = {
        **constrain(POSITIVE, "alpha", "sigma_x", "sigma_a"),
        **constrain(COUNT, "n_iter", "max_new_features", "max_features"),
        "anneal_factor": [Interval("real", 1, None)],
        "keep": [Options(("best", "last"))],
        **MEMORY_PARAMETERS,
    }
    _cost_note = "a serial collapsed Gibbs sampler, O(N K^3) per sweep"

    def __init__(
        self, *, alpha: float = 1.0, sigma_x: float = 1.0, sigma_a: float = 1.0, n_iter: int = 100,
        max_new_features: int = 4, max_features: int = 100, anneal_factor: float = 1.0,
        keep: Literal["best", "last"] = "best", max_samples: int = 5000, random_state: SeedLike = None,
        checkpoint: CheckpointLike = None,
    ) -> None:
        self.alpha, self.sigma_x, self.sigma_a, self.n_iter = alpha, sigma_x, sigma_a, n_iter
        self.max_new_features, self.max_features, self.anneal_factor = max_new_features, max_features, anneal_factor
        self.keep, self.max_samples, self.random_state = keep, max_samples, random_state
        self.checkpoint = checkpoint

    def fit(self, X: ArrayLike, y: Ignored = None) -> "IBPGibbs":
        """Run the sampler on ``X`` (numpy, dask, zarr or xarray; shape (n_samples, n_features))."""
        self._validate_params()
        X, _ = self._load(X)
        n, d = X.shape
        ck, state = self._memory_checkpointer(X)
        if self._restore_done(ck, state):
            return self
        rng = as_generator(self.random_state)
        cap = self.max_features
        Z = np.zeros((n, cap), dtype=np.uint8)
        G = np.zeros((cap, cap))
        B = np.zeros((cap, d))
        m = np.zeros(cap, dtype=np.int64)
        k = 0
        sq_total = float((X * X).sum())
        sx, sa = float(self.sigma_x), float(self.sigma_a)
        first, rng, kept_lj, history, ks = self._start_sweeps(ck, state, "n_features", rng)
        kept = None
        if state is not None:
            with ck.reading():
                k = int(state["k"])
                if not 0 <= k <= cap:
                    raise ValueError(f"{k} features with max_features={cap}")
                Z = ck.require_shape("Z", state["Z"], (n, cap)).astype(np.uint8)
                G = ck.require_shape("G", state["G"], (cap, cap)).astype(np.float64)
                B = ck.require_shape("B", state["B"], (cap, d)).astype(np.float64)
                m = ck.require_shape("feature counts", state["m"], (cap,)).astype(np.int64)
                if state["kept"] is not None:
                    kept = ck.require_shape("kept sample", state["kept"], (n, None)).astype(np.uint8)
        watch = Stopwatch()
        n_anneal = self.n_iter // 2 if self.anneal_factor > 1 else 0
        for it in range(first, self.n_iter):
            order = rng.permutation(n).astype(np.int64)
            scale = float(self.anneal_factor) ** (1.0 - it / n_anneal) if it < n_anneal else 1.0
            k = K.ibp_sweep(X, Z, G, B, m, k, order, float(self.alpha), sx * scale, sa, int(self.max_new_features),
                            rng)
            if k < 0:
                raise InvalidParameterError(
                    message(f"IBPGibbs(max_features={cap})", f"at most {cap} features",
                            f"a sweep that needed more (sweep {it + 1})",
                            _offset_hint(X) + "Lower alpha, raise sigma_x (the noise level may be underestimated), "
                            "or raise max_features.")
                )
            Zk = Z[:, :k].astype(np.float64)  # re-accumulate exactly
            G[:k, :k] = Zk.T @ Zk
            B[:k] = Zk.T @ X
            m[:k] = Z[:, :k].sum(axis=0)
            lj = K.ibp_log_joint(Z[:, :k], G[:k, :k], B[:k], sq_total, self.alpha, sx, sa)
            history.append(lj)
            ks.append(int(k))
            if it >= n_anneal and (self.keep == "last" or lj > kept_lj):
                kept, kept_lj = Z[:, :k].copy(), lj
            if ck.active and it + 1 < self.n_iter:  # all of Z, G, B, m: the next sweep reads them as they are
                ck.save({"phase": "sweep", "sweep": it + 1, "rng": rng_state(rng), "k": int(k), "Z": Z, "G": G,
                         "B": B, "m": m, "kept": kept, "kept_log_joint": kept_lj, "history": history,
                         "n_features": ks})
            emit(ProgressEvent("IBPGibbs", "iter", it + 1, -lj, int(k), watch.lap()))
        assert kept is not None  # set by a sweep after the annealing (kept_lj starts at -inf) or by the checkpoint
        order = np.lexsort(1 - kept[::-1].astype(np.int64)) if kept.shape[1] else np.zeros(0, dtype=np.int64)
        Zk = np.ascontiguousarray(kept[:, order])
        Zf = Zk.astype(np.float64)
        self.allocation_ = Zk
        self.features_ = K.ibp_posterior_features(Zf.T @ Zf, Zf.T @ X, sx, sa)
        self.feature_counts_ = Zk.sum(axis=0).astype(np.int64)
        self.n_latent_features_ = int(Zk.shape[1])
        self._finish_sweeps(ck, kept_lj, history, ks, "n_latent_features_history_", self.n_latent_features_, d)
        return self

    def transform(self, X: ArrayLike) -> ArrayLike:
        """Binary codes of rows with the features fixed at ``features_``: the MAP ``z`` under
        ``N(x | z A, sigma_x^2 I)`` and the IBP predictive prior ``m_k / (N + 1)`` per feature (exact enumeration
        up to 10 features, coordinate ascent beyond).

        Returns an (n, n_latent_features_) uint8 ndarray for numpy input, a lazy dask array for dask/zarr input.
        """
        arr, info = self._new_input(X, "features_")
        probs = self.feature_counts_ / (self.allocation_.shape[0] + 1.0)
        k = self.n_latent_features_
        out = map_blocks(arr, _ibp_codes, self.features_, probs, float(self.sigma_x), dtype=np.uint8,
                         chunks=(arr.chunks[0], (k,)))
        return wrap_output(out, info, "codes")

    def fit_transform(self, X: ArrayLike, y: Ignored = None) -> ArrayLike:
        """``fit(X).allocation_``: the sampled features of the training rows."""
        return self.fit(X).allocation_

    def predict(self, X: ArrayLike) -> ArrayLike:
        """Same as :meth:`transform` (as for BPMeans: the prediction of a feature model is the binary row z)."""
        return self.transform(X)

    def reconstruct(self, Z: ArrayLike) -> ArrayLike:
        """``Z @ features_``: the model's reconstruction of rows with allocation ``Z``."""
        self._check_fitted("features_")
        return np.asarray(Z, dtype=np.float64) @ self.features_
