"""D-Means (Campbell, Kulis & How): clustering a stream of batches with birth, motion, death and revival."""

from __future__ import annotations

from typing import Any, Iterable, Self

import numpy as np

from .._registry import register
from .._validation import SEED, Interval, Options, check_array, temporal_rates
from ..errors import InvalidParameterError, message
from ..cluster._base import CHECKPOINT
from ._checkpoint import fingerprint_of
from ._dynamic import DynamicBase, fit_time_steps, row_blocks
from ..typing import CheckpointLike, Ignored, SeedLike

__all__ = ["DynamicMeans"]


@register
class DynamicMeans(DynamicBase):
    """D-Means ([DM] Alg. 1; docs/algorithms.md section 3): DP-means over time steps, with persistent cluster ids.

    At each time step (a batch of points) every point joins an instantiated cluster (cost ``||y - theta||^2``),
    revives an old cluster ``k`` unseen for ``dt_k`` steps (cost ``Q dt_k + gamma_k/(gamma_k+1) ||y - phi_k||^2``)
    or opens a new one (cost ``lam``). Label passes and centre updates alternate until the labels stop changing;
    the best of ``n_restarts`` random orders is kept. Old clusters are deleted once ``Q * dt > lam``.

    Parameters
    ----------
    lam : float
        Cost of a new cluster, in squared-distance units (> 0).
    T_Q, k_tau : float, optional
        The reparameterisation of [DM] eq. 30: ``T_Q > 1`` is the number of steps a cluster may go unobserved
        and still be revived; ``k_tau >= 1`` (docs/algorithms.md 3.1 allows ``k_tau = 1``, which gives
        ``tau = 1/(T_Q-1)``) scales the largest revival radius, ``k_tau * lam``. Then ``Q = lam/T_Q`` and
        ``tau = (T_Q(k_tau-1)+1)/(T_Q-1)``.
    Q, tau : float, optional
        The raw parameters (both >= 0), instead of ``T_Q`` and ``k_tau``. ``Q = tau = 0`` is any-time DP-means.
        Give exactly one of the pairs.
    max_iter : int, default 100
        Maximum label passes per batch and restart.
    n_restarts : int, default 1
        Random orders tried per batch; the lowest objective is kept ([DM] uses 3).
    random_state : int, Generator or None
        Seeds the orders: batch ``t``, restart ``r`` uses ``(seed_, t, r)``, so a resumed stream repeats exactly.
    prefix_size, max_proposals, split_every
        Optimistic concurrency within a batch, as in :class:`dclust.DPMeans`: every batch (numpy, or dask in any
        row chunking) runs the same keyed epochs, so the model depends on the batches, not on their chunking.
    checkpoint : str or os.PathLike, optional
        A directory where the whole state is saved atomically after every batch (Zarr + JSON, no pickle). An
        estimator without state restores it from there at its first ``partial_fit`` (which then processes the
        batch after the checkpoint's ``n_batches_``); ``fit`` restores it and skips the batches already done, so a
        rerun after a crash ends with the identical model. Other parameters (or, for ``fit`` over an array, other
        data) are refused with ``StorageError``.

    Attributes
    ----------
    cluster_ids_ : ndarray of int64, shape (K,)
        Persistent ids of the tracked clusters (instantiated or revivable), increasing. Ids are never reused.
    cluster_centers_ : ndarray, shape (K, n_features)
        Their centres ``phi`` (for the clusters seen in the last batch, its eq. 29 centres).
    weights_ : ndarray, shape (K,)
        Their weights ``w`` (eq. 24).
    ages_ : ndarray of int64, shape (K,)
        Steps since each cluster last had data (1 = seen in the last batch).
    labels_ : ndarray or dask array, shape (n_t,)
        Persistent ids of the last batch's points: the nearest cluster of the last batch at its final centres
        (equal to the fitted labels when ``converged_``); lazy for a dask batch.
    n_clusters_ : int
        Clusters instantiated in the last batch (those ``predict`` uses).
    objective_, objective_history_, n_iter_, converged_ :
        Eq. 18 objective of the last batch, after each of its passes, the number of passes, convergence.
    history_ : dict of lists
        Per batch: ``n_clusters``, ``objective``, ``births``, ``deaths``, ``revivals``, ``n_samples``,
        ``n_iter``, ``seconds``.
    Q_, tau_ : float
        The rates in use. ``n_batches_``, ``next_id_``, ``seed_`` complete the state.
    serial_order_ : list of ndarray
        For the last batch, per pass, the order serial D-Means visits to give the same result (not saved).

    Notes
    -----
    An empty batch advances every age by one and runs the deletion check; nothing else changes.
    ``sample_weight`` weights the centre updates, carry-over and objective; the label choices are per point.
    For dask batches, exact distance ties between a point's previous cluster and a lower slot go to the lower
    slot (the previous labels are not stored).

    Examples
    --------
    >>> import numpy as np, dclust
    >>> dm = dclust.DynamicMeans(lam=1.0, T_Q=5, k_tau=1.1, random_state=0)
    >>> first = dm.partial_fit(np.array([[0.0, 0.0], [0.1, 0.0], [5.0, 5.0]])).labels_
    >>> second = dm.partial_fit(np.array([[5.1, 5.0], [0.2, 0.0]])).labels_
    >>> bool(second[0] == first[2] and second[1] == first[0]), dm.history_["births"]
    (True, [2, 0])
    """

    _parameter_constraints = {
        "lam": [Interval("real", 0, None, "neither")],
        "T_Q": [Interval("real", 1, None, "neither"), Options((None,))],
        "k_tau": [Interval("real", 1, None, "left"), Options((None,))],
        "Q": [Interval("real", 0, None, "left"), Options((None,))],
        "tau": [Interval("real", 0, None, "left"), Options((None,))],
        "max_iter": [Interval("int", 1, None)],
        "n_restarts": [Interval("int", 1, None)],
        "random_state": [SEED],
        "prefix_size": [Interval("int", 0, None)],
        "max_proposals": [Interval("int", 1, None)],
        "split_every": [Interval("int", 2, None), Options((None,))],
        "checkpoint": [CHECKPOINT],
    }

    lam_: float
    Q_: float
    tau_: float

    def __init__(
        self, *, lam: float | None = None, T_Q: float | None = None, k_tau: float | None = None, Q: float | None = None,
        tau: float | None = None, max_iter: int = 100, n_restarts: int = 1, random_state: SeedLike = None,
        prefix_size: int = 1000, max_proposals: int = 4096, split_every: int | None = None,
        checkpoint: CheckpointLike = None,
    ) -> None:
        self.lam, self.T_Q, self.k_tau, self.Q, self.tau, self.max_iter = lam, T_Q, k_tau, Q, tau, max_iter
        self.n_restarts, self.random_state, self.prefix_size = n_restarts, random_state, prefix_size
        self.max_proposals, self.split_every, self.checkpoint = max_proposals, split_every, checkpoint

    def _rates(self) -> tuple[float, float, float]:
        assert self.lam is not None  # lam=None is refused by _validate_params
        lam = float(self.lam)
        Q, tau = temporal_rates(type(self).__name__, lam, self.T_Q, self.k_tau, self.Q, self.tau)
        self.lam_, self.Q_, self.tau_ = lam, Q, tau
        return lam, Q, tau

    def _validate_params(self) -> None:
        if self.lam is None:
            raise InvalidParameterError(
                message("DynamicMeans(lam=...)", "a penalty lam > 0", "None", "Pass lam, e.g. lam=0.04.")
            )
        super()._validate_params()

    def _predict_mask(self) -> np.ndarray:
        mask = self.ages_ == 1
        return mask if mask.any() else np.ones_like(mask)

    def fit(self, batches: Iterable[Any] | Any, y: Ignored = None, sample_weight: Iterable[Any] | None = None) -> Self:
        """Process a whole stream from scratch.

        Parameters
        ----------
        batches : iterable of array-likes, or a dask/zarr array
            The time steps in order; for a dask or zarr array, each row chunk is one time step; a 2-D numpy array
            is a single time step (as scikit-learn's ``fit(X)``).
        sample_weight : iterable of array-likes, optional
            One weight vector per batch (or None entries); for a single numpy batch, its weight vector.

        Returns
        -------
        self
        """
        self._validate_params()
        self._rates()
        single = isinstance(batches, np.ndarray)
        if single:  # one time step
            batches = [batches]
            sample_weight = None if sample_weight is None else [sample_weight]
        fp, arr = None, None
        if hasattr(batches, "chunks") and hasattr(batches, "shape") and getattr(batches, "ndim", 0) == 2:
            arr, _ = check_array(batches, name="batches", min_samples=0)
            fp = fingerprint_of(self, arr)
            batches = row_blocks(arr)
        self._clear()
        fit_time_steps(self, batches, lambda batch, w: self.partial_fit(batch, sample_weight=w), fp=fp,
                       n_done="n_batches_", arr=arr, single=single, sample_weight=sample_weight)
        return self
