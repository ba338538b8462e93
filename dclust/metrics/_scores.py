"""Scores computed from the reduced contingency table (docs/algorithms.md section 9); no O(N^2) pair loop anywhere.

Pair counts use exact integer arithmetic (``TP = sum C2(n_ij)`` and so on), so the Rand index and the ARI are the
correctly rounded values of exact rationals and agree with scikit-learn's to the last bits.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable, TypeVar

import dask.array as da
import numpy as np
from scipy.optimize import linear_sum_assignment

from .._dask.passes import asarray, astype, compute
from ..errors import InvalidDataError, InvalidParameterError, message
from ._contingency import check_split_every, compute_table

__all__ = [
    "rand_score",
    "adjusted_rand_score",
    "normalized_mutual_info_score",
    "pairwise_precision_recall",
    "pairwise_f_measure",
    "purity_score",
    "matched_accuracy",
    "confidence_weighted_accuracy",
    "tracking_accuracy",
    "flicker",
    "flicker_summary",
]

_INT64_SAFE_N = 3_000_000_000  # below this, N*(N-1) and every sum of C2 fit in int64


# --------------------------------------------------------------------------------------------------------------
# pair counts
# --------------------------------------------------------------------------------------------------------------


#: The parameters of a score of two labelings, the start of the ``{labelings}`` section of its docstring.
_LABELINGS_DOC = """Parameters
    ----------
    y_true, y_pred : array-like or dask.array.Array, shape (n_samples,)
        Integer labels (numpy, list or 1-D dask arrays; dask inputs are tree-reduced).
    split_every : int, optional
        Fan-in of the tree reduction for dask inputs."""


_Score = TypeVar("_Score", bound=Callable[..., Any])


def _labelings_doc(returns: str | None = None) -> Callable[[_Score], _Score]:
    """Decorator: put the Parameters of a score of two labelings (and, given ``returns``, the Returns section of a
    float described by ``returns``) in place of ``{labelings}`` in the score's docstring."""
    section = _LABELINGS_DOC + (f"\n\n    Returns\n    -------\n    float\n        {returns}" if returns else "")

    def decorate(score: _Score) -> _Score:
        if score.__doc__:  # None under python -OO
            score.__doc__ = score.__doc__.replace("{labelings}", section)
        return score

    return decorate


def _c2_sum(x: np.ndarray, n_total: int) -> int:
    """Exact ``sum_k x_k (x_k - 1) / 2`` as a Python int (``n_total >= sum(x)`` bounds the result)."""
    if n_total <= _INT64_SAFE_N:
        x = x.astype(np.int64, copy=False)
        return int((x * (x - 1) // 2).sum())
    return sum(v * (v - 1) // 2 for v in x.tolist())


def _pair_counts(y_true: Any, y_pred: Any, split_every: int | None) -> tuple[int, int, int, int]:
    """``(TP, P_true, P_pred, P_all)``: pairs together in both, in y_true, in y_pred, and all pairs."""
    table = compute_table(y_true, y_pred, split_every=split_every)
    n = int(table.total)  # counts: an int already
    return _c2_sum(table.values, n), _c2_sum(table.a, n), _c2_sum(table.b, n), n * (n - 1) // 2


@_labelings_doc("In [0, 1].")
def rand_score(y_true: Any, y_pred: Any, *, split_every: int | None = None) -> float:
    """Rand index: the fraction of unordered sample pairs on which the two labelings agree.

    ``(TP + TN) / C2(N)`` with ``TN = C2(N) - P_true - P_pred + TP``; 1.0 when N < 2.

    {labelings}

    Examples
    --------
    >>> rand_score([0, 0, 1, 2], [0, 0, 1, 1])
    0.8333333333333334
    """
    tp, pt, pp, pall = _pair_counts(y_true, y_pred, split_every)
    if pall == 0:
        return 1.0
    return (pall - pt - pp + 2 * tp) / pall


@_labelings_doc("At most 1; about 0 for random labelings; can be negative.")
def adjusted_rand_score(y_true: Any, y_pred: Any, *, split_every: int | None = None) -> float:
    """Adjusted Rand index (Hubert and Arabie): ``(TP - E) / (0.5 (P_true + P_pred) - E)``.

    ``E = P_true P_pred / C2(N)``. When the denominator is 0 (both labelings trivial — one cluster each or all
    singletons each — or N = 1) the score is 1.0, as in scikit-learn.

    {labelings}

    Examples
    --------
    >>> adjusted_rand_score([0, 0, 1, 1], [1, 1, 0, 0])
    1.0
    >>> adjusted_rand_score([0, 0, 1, 1], [0, 1, 0, 1])
    -0.5
    """
    tp, pt, pp, pall = _pair_counts(y_true, y_pred, split_every)
    # multiply numerator and denominator by 2 * P_all: exact integers, one correctly rounded division
    num = 2 * (tp * pall - pt * pp)
    den = (pt + pp) * pall - 2 * pt * pp
    if den == 0:
        return 1.0
    return num / den


def _entropy(counts: np.ndarray) -> float:
    if counts.size == 1:
        return 0.0
    pi = counts.astype(np.float64)
    s = np.sum(pi)
    return float(-np.sum((pi / s) * (np.log(pi) - math.log(s))))


@_labelings_doc("In [0, 1].")
def normalized_mutual_info_score(y_true: Any, y_pred: Any, *, split_every: int | None = None) -> float:
    """Normalised mutual information ``I(U; V) / ((H(U) + H(V)) / 2)``, natural logarithms.

    The arithmetic mean is scikit-learn's default (the papers do not say which; docs/algorithms.md E-TV6). Degenerate
    cases as in scikit-learn: both labelings with a single label (zero entropies, including N = 1) give 1.0; any
    other case with zero mutual information gives 0.0.

    {labelings}

    Examples
    --------
    >>> normalized_mutual_info_score([0, 0, 1, 1], [5, 5, 7, 7])
    1.0
    """
    table = compute_table(y_true, y_pred, split_every=split_every)
    if table.a.size == 1 and table.b.size == 1:
        return 1.0
    if table.a.size == 1 or table.b.size == 1:
        return 0.0
    nz = table.values.astype(np.float64)
    n = float(table.total)
    a, b = table.a.astype(np.float64), table.b.astype(np.float64)
    c_nm = nz / n
    log_outer = -np.log(a[table.row] * b[table.col]) + math.log(a.sum()) + math.log(b.sum())
    mi = c_nm * (np.log(nz) - math.log(n)) + c_nm * log_outer
    mi = np.where(np.abs(mi) < np.finfo(np.float64).eps, 0.0, mi)
    mi_sum = max(float(mi.sum()), 0.0)
    if mi_sum == 0.0:
        return 0.0
    return float(mi_sum / np.mean([_entropy(table.a), _entropy(table.b)]))


@_labelings_doc()
def pairwise_precision_recall(y_true: Any, y_pred: Any, *, split_every: int | None = None) -> tuple[float, float]:
    """Pairwise precision ``TP / P_pred`` and recall ``TP / P_true`` over all unordered pairs.

    A ratio with a zero denominator (no pair together in ``y_pred``, resp. ``y_true``) is 0.0, consistent with
    :func:`pairwise_f_measure` being 0 when TP = 0.

    {labelings}

    Returns
    -------
    precision, recall : float

    Examples
    --------
    >>> pairwise_precision_recall([0, 0, 0, 1], [0, 0, 1, 1])
    (0.5, 0.3333333333333333)
    """
    tp, pt, pp, _ = _pair_counts(y_true, y_pred, split_every)
    return (tp / pp if pp else 0.0), (tp / pt if pt else 0.0)


@_labelings_doc("In [0, 1].")
def pairwise_f_measure(y_true: Any, y_pred: Any, *, split_every: int | None = None) -> float:
    """Pairwise F-measure ``2PR / (P + R) = 2 TP / (P_true + P_pred)`` ([TV], after Bilenko et al. 2004).

    0.0 when no pair is together in both labelings (TP = 0).

    {labelings}

    Examples
    --------
    >>> pairwise_f_measure([0, 0, 0, 1], [0, 0, 1, 1])
    0.4
    >>> pairwise_f_measure([0, 0, 1], [5, 5, 2])  # the same partition under other label names
    1.0
    """
    tp, pt, pp, _ = _pair_counts(y_true, y_pred, split_every)
    return 2 * tp / (pt + pp) if tp else 0.0


# --------------------------------------------------------------------------------------------------------------
# matching-based scores
# --------------------------------------------------------------------------------------------------------------


@_labelings_doc("In (0, 1].")
def purity_score(y_true: Any, y_pred: Any, *, split_every: int | None = None) -> float:
    """Purity ``(1/N) sum_j max_i n_ij``: every cluster takes its majority class ([GP]).

    {labelings}

    Examples
    --------
    >>> purity_score([0, 0, 1, 1, 1], [0, 0, 0, 1, 1])
    0.8
    >>> purity_score([0, 0, 1, 1], [0, 1, 2, 3])  # one cluster per point is pure: purity rewards over-splitting
    1.0
    """
    table = compute_table(y_true, y_pred, split_every=split_every)
    col_max = np.maximum.reduceat(table.values[table.order_by_col], table.col_starts)
    return int(col_max.sum()) / table.total


def _matched(counts: np.ndarray) -> np.number[Any]:
    """Weight of a maximum-weight one-to-one matching of rows to columns (rectangular allowed)."""
    rows, cols = linear_sum_assignment(counts, maximize=True)  # same optimum as linear_sum_assignment(-counts)
    weight: np.number[Any] = counts[rows, cols].sum()  # (scipy has no stubs)
    return weight


@_labelings_doc("In (0, 1].")
def matched_accuracy(y_true: Any, y_pred: Any, *, split_every: int | None = None) -> float:
    """Accuracy under the best one-to-one matching of clusters to classes (Hungarian algorithm).

    ``max_pi sum_i n_{i, pi(i)} / N`` over partial one-to-one matchings; the numbers of classes and clusters may
    differ (unmatched samples count as errors).

    {labelings}

    Examples
    --------
    >>> matched_accuracy([0, 0, 1, 1, 2], [7, 7, 7, 3, 3])
    0.6
    """
    table = compute_table(y_true, y_pred, split_every=split_every)
    return int(_matched(table.dense())) / table.total


def confidence_weighted_accuracy(y_true: Any, y_pred: Any, confidence: Any, *,
                                 split_every: int | None = None) -> float:
    """Accuracy with per-sample confidence weights ``w_i in [0, 1]`` ([DM] 8.4).

    ``sum_i w_i 1[pred_i correct] / sum_i w_i``, where "correct" goes through the maximum-weight one-to-one matching
    of clusters to classes on the *weighted* contingency table. Unlabelled samples take ``w_i = 0`` (their
    ``y_true`` is then irrelevant).

    Parameters
    ----------
    y_true, y_pred : array-like or dask.array.Array, shape (n_samples,)
        Integer labels.
    confidence : array-like or dask.array.Array, shape (n_samples,)
        Finite weights in [0, 1]; checked inside the pass (the error names the row block).
    split_every : int, optional
        Fan-in of the tree reduction for dask inputs.

    Returns
    -------
    float
        In [0, 1]; NaN when every weight is 0.

    Examples
    --------
    >>> confidence_weighted_accuracy([0, 0, 1, 1], [5, 5, 5, 6], [1.0, 0.5, 0.25, 1.0])
    0.9090909090909091
    """
    table = compute_table(y_true, y_pred, weights=confidence, weight_name="confidence", weight_upper=1.0,
                          split_every=split_every)
    total = table.total
    if total == 0:
        return float("nan")
    return float(_matched(table.dense()) / total)


def tracking_accuracy(steps: Iterable[tuple[Any, Any]], *, tracked: bool = True,
                      split_every: int | None = None) -> float:
    """Tracking accuracy over time steps ([DM] 8.1): per-step maximum matching, consistent over time.

    A global one-to-one map ``M: true id -> learned id`` starts empty. At each step the maximum-weight matching of
    the step's contingency table ``C_t`` is solved; for each matched pair ``(a, b)`` with ``C_t[a, b] > 0``,
    ``a -> b`` is added to ``M`` if ``a`` is unmapped and ``b`` is not already the image of another class, and then
    ``C_t[a, b]`` counts as correct iff ``M[a] == b``. The first mapping wins (docs/algorithms.md E-DM9): a later pair
    that contradicts ``M`` counts 0. Learned ids must be persistent (D-Means ids), so a revived cluster keeps its
    mapping. The result is ``sum_t correct_t / sum_t N_t``. Ties between maximum matchings are broken by
    :func:`scipy.optimize.linear_sum_assignment`.

    Parameters
    ----------
    steps : iterable of (y_true_t, y_pred_t)
        One pair of integer label arrays per time step, each of shape (n_t,) (numpy, list or dask); consumed once,
        so a generator works.
    tracked : bool, default True
        False gives the untracked ("NT") variant: every step is matched on its own, ignoring ``M``.
        Untracked accuracy is never below tracked accuracy.
    split_every : int, optional
        Fan-in of the tree reduction for dask inputs.

    Returns
    -------
    float
        In [0, 1].

    Examples
    --------
    >>> steps = [([0, 0, 1], [5, 5, 6]), ([0, 1, 1], [6, 5, 5])]
    >>> tracking_accuracy(steps)
    0.5
    >>> tracking_accuracy(steps, tracked=False)
    1.0
    """
    if not isinstance(tracked, (bool, np.bool_)):
        raise InvalidParameterError(message("tracked", "a bool", repr(tracked), "Pass tracked=True or False."))
    split_every = check_split_every(split_every)
    mapping: dict[int, int] = {}
    images: set[int] = set()
    correct = total = 0
    t = -1
    for t, step in enumerate(steps):
        try:
            y_true_t, y_pred_t = step
        except (TypeError, ValueError):
            raise InvalidDataError(
                message(f"steps[{t}]", "a pair (y_true_t, y_pred_t)", f"{type(step).__name__}",
                        "Pass an iterable of (true labels, predicted labels) pairs, one per time step.")
            ) from None
        try:
            table = compute_table(y_true_t, y_pred_t, split_every=split_every)
        except InvalidDataError as exc:
            raise InvalidDataError(f"steps[{t}]: {exc}") from None
        counts = table.dense()
        rows, cols = linear_sum_assignment(counts, maximize=True)
        for i, j in zip(rows, cols):
            c = int(counts[i, j])
            if c == 0:
                continue
            if not tracked:
                correct += c
                continue
            a, b = int(table.true_labels[i]), int(table.pred_labels[j])
            if a not in mapping and b not in images:
                mapping[a] = b
                images.add(b)
            if mapping.get(a) == b:
                correct += c
        total += int(table.total)  # counts: an int already
    if t < 0:
        raise InvalidDataError(message("steps", "at least one time step", "an empty iterable",
                                       "Pass one (y_true_t, y_pred_t) pair per time step."))
    return correct / total


# --------------------------------------------------------------------------------------------------------------
# flicker (video colour quantisation)
# --------------------------------------------------------------------------------------------------------------


def _frame(x: Any, name: str, t: int, shape: tuple[int, ...] | None) -> np.ndarray:
    f = np.asarray(x)
    if f.dtype.kind not in "iufb" or f.size == 0 or (shape is not None and f.shape != shape):
        expected = f"a non-empty numeric array of shape {shape}" if shape else "a non-empty numeric array"
        raise InvalidDataError(
            message(f"{name}[{t}]", expected, f"dtype {f.dtype}, shape {f.shape}",
                    "Pass frames of one shape, e.g. (height, width, channels); quantised and original alike.")
        )
    return f.astype(np.float64, copy=False)


def _mean_abs_diff_series(q: Any, o: Any) -> tuple[np.ndarray, np.ndarray]:
    """Per-frame ``mean|Q_t - Q_{t-1}|`` and ``mean|O_t - O_{t-1}|`` for t = 1..T-1, streaming over frames."""
    num: list[float] = []
    den: list[float] = []
    q_prev = o_prev = None
    shape = None
    t = -1
    it_q, it_o = iter(q), iter(o)
    while True:
        fq, fo = next(it_q, None), next(it_o, None)
        if fq is None and fo is None:
            break
        t += 1
        if fq is None or fo is None:
            short = "quantized_frames" if fq is None else "original_frames"
            raise InvalidDataError(message("frames", "as many quantised frames as original frames",
                                           f"{short} ended after {t} frames",
                                           "Pass the two videos over the same frames."))
        fq = _frame(fq, "quantized_frames", t, shape)
        shape = fq.shape
        fo = _frame(fo, "original_frames", t, shape)
        if q_prev is not None:
            num.append(float(np.mean(np.abs(fq - q_prev))))
            den.append(float(np.mean(np.abs(fo - o_prev))))
        q_prev, o_prev = fq, fo
    if t < 1:
        raise InvalidDataError(message("frames", "at least 2 frames", f"{t + 1} frame(s)",
                                       "Flicker compares consecutive frames; pass a longer video."))
    return np.asarray(num), np.asarray(den)


def _dask_series(q: da.Array, o: da.Array) -> tuple[np.ndarray, np.ndarray]:
    if q.shape != o.shape or q.ndim < 2 or q.shape[0] < 2 or q.size == 0:
        raise InvalidDataError(
            message("frames", "two arrays of one shape (n_frames >= 2, ...)", f"shapes {q.shape} and {o.shape}",
                    "Pass the quantised and original videos as (n_frames, height, width, channels) arrays.")
        )
    if q.dtype.kind not in "iufb" or o.dtype.kind not in "iufb":
        raise InvalidDataError(message("frames", "numeric arrays", f"dtypes {q.dtype} and {o.dtype}",
                                       "Pass numeric frames."))
    axes = tuple(range(1, q.ndim))

    def series(x: da.Array) -> da.Array:
        x = astype(x, np.float64)
        diffs: da.Array = da.abs(x[1:] - x[:-1]).mean(axis=axes)
        return diffs

    num, den = compute(series(q), series(o))
    return np.asarray(num), np.asarray(den)


def flicker(quantized_frames: Any, original_frames: Any) -> np.ndarray:
    """Per-frame flicker ratio of a quantised video against the original ([DM] 8.5).

    ``f_t = mean|Q_t - Q_{t-1}| / mean|O_t - O_{t-1}|`` over all pixels and channels, for t = 2..T (1-based). A
    frame with ``O_t == O_{t-1}`` (zero denominator) gets ``f_t = NaN``; :func:`flicker_summary` skips it.
    The reference level is 1 (the original video). Differences are taken in float64, so uint8 frames are safe.

    Parameters
    ----------
    quantized_frames, original_frames : array, shape (n_frames, ...), or iterable of arrays
        Either two arrays of the same shape (numpy or dask; frames along axis 0), or two iterables yielding frames
        of one shape (e.g. (height, width, channels)), streamed with only the previous frame kept.

    Returns
    -------
    ndarray, shape (n_frames - 1,)
        ``f_2, ..., f_T`` (float64).

    Examples
    --------
    >>> import numpy as np
    >>> O = np.array([[0.0, 0.0], [2.0, 2.0], [2.0, 2.0], [6.0, 6.0]])
    >>> Q = np.array([[0.0, 0.0], [1.0, 1.0], [3.0, 3.0], [3.0, 3.0]])
    >>> flicker(Q, O)
    array([0.5, nan, 0. ])
    """
    if isinstance(quantized_frames, da.Array) or isinstance(original_frames, da.Array):
        num, den = _dask_series(asarray(quantized_frames),
                                asarray(original_frames))
    else:
        num, den = _mean_abs_diff_series(quantized_frames, original_frames)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def flicker_summary(series: Any) -> float:
    """Median of ``|f_t - 1|`` over the finite values of a flicker series (NaN frames are skipped).

    Parameters
    ----------
    series : array-like, shape (n,)
        The output of :func:`flicker`.

    Returns
    -------
    float
        0 means flicker exactly like the original video; NaN when no value is finite.

    Examples
    --------
    >>> flicker_summary([0.5, float("nan"), 1.25, 1.0])
    0.25
    """
    f = np.asarray(series, dtype=np.float64)
    if f.ndim != 1:
        raise InvalidDataError(message("series", "a 1-D flicker series", f"shape {f.shape}",
                                       "Pass the output of dclust.metrics.flicker."))
    f = f[np.isfinite(f)]
    return float(np.median(np.abs(f - 1.0))) if f.size else float("nan")
