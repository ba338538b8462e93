"""GM-PR kernels (docs/algorithms.md section 6): log-densities, E-step partials for unlinked points and for link
blocks, the Gaussian-statistics monoid merged with Chan's rule, the M-step and the class-weight solve.

Pure numpy, one block in, arrays out. Components are indexed flat, ``c = m * n_sub + k`` for class ``m`` and
sub-cluster ``k``. Every probability is handled as a log and normalised with log-sum-exp.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numba
import numpy as np
from llvmlite import binding as _llvm
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.core import config as _numba_config
from numba.extending import intrinsic
from scipy.linalg.lapack import dtrtri
from scipy.special import logsumexp

from .distances import _U, _one_blas_thread
from .simd import transpose_rows, wide_vectors
from .stats import chan_means

__all__ = [
    "MixtureParams",
    "GaussianStats",
    "precision_cholesky",
    "sub_log_density",
    "unlinked_partial",
    "link_partial",
    "link_partial_numpy",
    "m_step",
    "alpha_objective",
    "update_alpha",
    "class_posteriors",
    "pair_posteriors",
    "estep_reference",
]

_LOG_2PI = np.log(2.0 * np.pi)
ALPHA_FLOOR = 1e-12


@dataclass
class MixtureParams:
    """Parameters of a mixture of ``M`` classes, each a mixture of ``K`` Gaussians.

    Attributes
    ----------
    alpha : (M,) class weights (sum 1).
    pi : (M, K) sub-cluster weights (each row sums to 1).
    means : (M, K, D)
    covariances : (M, K, D, D) for ``"full"``, (M, K, D) for ``"diag"``.
    prec_chol : same shape as ``covariances``; the Cholesky factor of the precision (full: upper triangular
        ``U`` with ``U Uᵀ = Σ⁻¹``; diag: ``1/sqrt(σ²)``).
    n_classes, n_sub : int
        ``M`` and ``K`` (from ``pi``).
    diag : bool
        True for diagonal covariances.
    """

    alpha: np.ndarray
    pi: np.ndarray
    means: np.ndarray
    covariances: np.ndarray
    prec_chol: np.ndarray
    n_classes: int = field(init=False)
    n_sub: int = field(init=False)
    diag: bool = field(init=False)

    def __post_init__(self) -> None:
        self.n_classes, self.n_sub = (int(v) for v in self.pi.shape)
        self.diag = self.covariances.ndim == 3

    def __dask_tokenize__(self):
        import hashlib

        h = hashlib.sha1()
        for a in (self.alpha, self.pi, self.means, self.covariances):
            h.update(str(a.shape).encode())
            h.update(np.ascontiguousarray(a).tobytes())
        return "MixtureParams", h.hexdigest()

    @classmethod
    def build(cls, alpha, pi, means, covariances) -> "MixtureParams":
        """Parameters with their precision factors (raises ``numpy.linalg.LinAlgError`` if a covariance is not PD)."""
        cov = np.asarray(covariances, dtype=np.float64)
        return cls(
            np.asarray(alpha, dtype=np.float64), np.asarray(pi, dtype=np.float64),
            np.asarray(means, dtype=np.float64), cov, precision_cholesky(cov),
        )


def precision_cholesky(covariances: np.ndarray) -> np.ndarray:
    """Cholesky factors of the precisions of (M, K, D, D) full or (M, K, D) diagonal covariances."""
    cov = np.asarray(covariances, dtype=np.float64)
    if cov.ndim == 3:
        if not (cov > 0).all():
            raise np.linalg.LinAlgError("a diagonal variance is not positive")
        return 1.0 / np.sqrt(cov)
    M, K, D, _ = cov.shape
    out = np.empty_like(cov)
    low = np.linalg.cholesky(cov)  # batched; raises LinAlgError when one is not positive definite
    for m in range(M):
        for k in range(K):
            # LAPACK's triangular inverse: scipy's solve_triangular(low, eye) (trtrs) takes ~30 ms on a 5 x 5
            # with a 2-thread OpenBLAS on a busy machine, trtri ~2 us
            inv, info = dtrtri(low[m, k], lower=1)
            if info:
                raise np.linalg.LinAlgError(f"a singular Cholesky factor (trtri info {info})")
            out[m, k] = inv.T
    return out


def sub_log_density(X: np.ndarray, params: MixtureParams) -> np.ndarray:
    """``log π_mk + log N(x_n | μ_mk, Σ_mk)`` for every row, shape (n, M, K)."""
    X = np.asarray(X, dtype=np.float64)
    n, D = X.shape
    M, K = params.n_classes, params.n_sub
    pc = params.prec_chol
    if params.diag:
        logdet = np.log(pc).sum(axis=2).reshape(M * K)
        out = _diag_log_density(X, params.means.reshape(M * K, D), pc.reshape(M * K, D), logdet).reshape(n, M, K)
    else:
        out = np.empty((n, M, K))
        for m in range(M):
            for k in range(K):
                y = X @ pc[m, k] - params.means[m, k] @ pc[m, k]
                logdet = np.log(np.diag(pc[m, k])).sum()
                out[:, m, k] = -0.5 * (D * _LOG_2PI + (y * y).sum(axis=1)) + logdet
    with np.errstate(divide="ignore"):
        out += np.log(params.pi)[None]
    return out


@numba.njit(cache=True, nogil=True)
def _diag_log_density(X, means, prec, logdet):
    """``log N(x_n | μ_c, diag σ²_c)`` (n, C) from the precision factors ``1/σ`` (one pass, no (n, C, D)
    temporaries)."""
    n, D = X.shape
    C = means.shape[0]
    out = np.empty((n, C))
    for i in range(n):
        for c in range(C):
            q = 0.0
            for f in range(D):
                v = (X[i, f] - means[c, f]) * prec[c, f]
                q += v * v
            out[i, c] = -0.5 * (D * np.log(2.0 * np.pi) + q) + logdet[c]
    return out


# ----------------------------------------------------------------------------------------------------------------
# the monoid


@dataclass
class GaussianStats:
    """Soft-weighted Gaussian statistics per component, plus GM-PR's class counts and log-likelihood terms.

    Attributes
    ----------
    weight : (C,) float64
        ``N_c = Σ_n w_nc``.
    mean : (C, D) float64
        ``Σ w x / N_c`` (0 where ``N_c = 0``).
    scatter : (C, D, D) or (C, D) float64
        ``Σ w (x − mean)(x − mean)ᵀ`` about the component's own mean (its diagonal for diagonal models).
    class_counts : (M,) float64
        ``c_m`` of docs/algorithms.md 6.4 (a must-link posterior counted once, a cannot-link pair twice).
    loglik : float
        Sum of the log-likelihood terms seen (without the ``−|CL| log(1 − Σα²)`` normaliser).
    n_rows : int
        Rows or link endpoints seen.
    bad_block : int
        Lowest index of a block holding NaN or inf, or -1.
    """

    weight: np.ndarray
    mean: np.ndarray
    scatter: np.ndarray
    class_counts: np.ndarray
    loglik: float = 0.0
    n_rows: int = 0
    bad_block: int = -1

    @classmethod
    def identity(cls, n_components: int, n_features: int, n_classes: int, diag: bool) -> "GaussianStats":
        shape = (n_components, n_features) if diag else (n_components, n_features, n_features)
        return cls(np.zeros(n_components), np.zeros((n_components, n_features)), np.zeros(shape),
                   np.zeros(n_classes))

    @classmethod
    def from_weights(cls, X: np.ndarray, R: np.ndarray, n_classes: int, diag: bool, *,
                     class_counts=None, loglik: float = 0.0) -> "GaussianStats":
        """Statistics of rows ``X`` (n, D) with soft weights ``R`` (n, C)."""
        X = np.asarray(X, dtype=np.float64)
        R = np.asarray(R, dtype=np.float64)
        n, D = X.shape
        C = R.shape[1]
        weight = R.sum(axis=0)
        sums = R.T @ X
        mean = np.divide(sums, weight[:, None], out=np.zeros_like(sums), where=weight[:, None] > 0)
        scatter = np.zeros((C, D) if diag else (C, D, D))
        for c in range(C):
            if weight[c] <= 0:
                continue
            diff = X - mean[c]
            wd = diff * R[:, c : c + 1]
            scatter[c] = (wd * diff).sum(axis=0) if diag else wd.T @ diff
        counts = np.zeros(n_classes) if class_counts is None else np.asarray(class_counts, dtype=np.float64)
        return cls(weight, mean, scatter, counts, float(loglik), int(n))

    @classmethod
    def from_labels(cls, X: np.ndarray, labels: np.ndarray, n_classes: int, n_sub: int, diag: bool
                    ) -> "GaussianStats":
        """Statistics of rows ``X`` (n, D), each wholly in the component ``labels[i]`` (hard weights), by counting
        (no (n, C) weights); class counts are the components' weights summed per class."""
        X = np.asarray(X, dtype=np.float64)
        n, D = X.shape
        C = n_classes * n_sub
        weight = np.bincount(labels, minlength=C).astype(np.float64)
        sums = np.stack([np.bincount(labels, weights=X[:, f], minlength=C) for f in range(D)], axis=1)
        mean = np.divide(sums, weight[:, None], out=np.zeros_like(sums), where=weight[:, None] > 0)
        diff = X - mean[labels]
        if diag:
            scatter = np.stack([np.bincount(labels, weights=diff[:, f] ** 2, minlength=C) for f in range(D)], axis=1)
        else:
            scatter = np.zeros((C, D, D))
            for c in np.flatnonzero(weight):
                d = diff[labels == c]
                scatter[c] = d.T @ d
        return cls(weight, mean, scatter, weight.reshape(n_classes, n_sub).sum(axis=1), 0.0, int(n))

    @property
    def diag(self) -> bool:
        return self.scatter.ndim == 2

    @staticmethod
    def merge_all(parts) -> "GaussianStats":
        """Merge any number of statistics (Chan's parallel rule ``M = Σ M_p + Σ N_p δ_p δ_pᵀ``)."""
        parts = list(parts)
        if len(parts) == 1:
            return parts[0]
        w = np.stack([p.weight for p in parts])
        weight, mean, delta = chan_means(w, np.stack([p.mean for p in parts]))
        if parts[0].diag:
            extra = np.einsum("pc,pcd->cd", w, delta * delta)
        else:
            extra = np.einsum("pc,pcd,pce->cde", w, delta, delta)
        scatter = sum(p.scatter for p in parts) + extra
        bad = [p.bad_block for p in parts if p.bad_block >= 0]
        return GaussianStats(
            weight=weight, mean=mean, scatter=scatter,
            class_counts=sum(p.class_counts for p in parts),
            loglik=float(sum(p.loglik for p in parts)),
            n_rows=int(sum(p.n_rows for p in parts)),
            bad_block=min(bad) if bad else -1,
        )


# ----------------------------------------------------------------------------------------------------------------
# E-step partials


def _sub_responsibilities(post: np.ndarray, sub: np.ndarray, log_g: np.ndarray) -> np.ndarray:
    """``post_m · π_mk N_mk / g_m`` flattened to (n, M*K)."""
    with np.errstate(invalid="ignore"):
        within = np.exp(sub - log_g[:, :, None])
    within = np.nan_to_num(within, nan=0.0)
    return (post[:, :, None] * within).reshape(post.shape[0], post.shape[1] * within.shape[2])


def _lse(a: np.ndarray, axis: int) -> np.ndarray:
    """``log Σ exp`` along ``axis`` (plain numpy: scipy's is slow on the many small arrays here); -inf when every
    entry is -inf."""
    a = np.asarray(a, dtype=np.float64)
    m = a.max(axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(divide="ignore"):
        return np.log(np.exp(a - m).sum(axis=axis)) + np.squeeze(m, axis=axis)


def _log_alpha(alpha: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.log(alpha)


#: A responsibility below ``exp(_NEGLIGIBLE)`` times its row's largest counts as 0 (no exp, nothing folded). The
#: bound: a row's cut components then add at most ``(C − 1) e⁻⁶⁰ ≈ C · 8.8e-27`` to its normaliser, below half an
#: ulp of float64 (1.1e-16) for any ``C`` under 10⁹, so the row's log-likelihood and its other responsibilities
#: are unchanged to rounding, and a component's sums lose only terms below 1e-26 of a row's mass. ``-40``
#: (4.2e-18 per component) would keep that only for ``C`` below ~26, and saves nothing measurable: at 8-D,
#: K = 16 (overlapping blobs) 12 of 16 components lie within 40 nats of a row's best and the dense tiles compute
#: every density anyway; at 64-D, K = 64 the ~4 components a row keeps all lie within 20.
_NEGLIGIBLE = -60.0


_FAST = dict(cache=True, nogil=True, error_model="numpy", fastmath={"contract", "arcp"})
_TILE = 1024  # rows whose responsibilities are folded in by one call of _fold_rows


@numba.njit(**_FAST)
def _fold_rows(X, lo, ks, idx, rs, means, weight, sums, scat, diff, y):
    """Add the rows ``X[lo + j]`` (``j < len(ks)``), row ``j`` with the weights ``rs[j, :ks[j]]`` of the components
    ``idx[j, :ks[j]]``, to ``weight`` and to the sums and full scatter about ``means`` (``diff``, ``y``: scratch of
    length D). One call per tile of rows: a call per row (its array arguments' reference counts) costs as much
    as the folding itself."""
    wide_vectors()
    D = means.shape[1]
    for j in range(ks.shape[0]):
        for q in range(ks[j]):
            c = idx[j, q]
            r = rs[j, q]
            weight[c] += r
            for f in range(D):
                diff[f] = np.float64(X[lo + j, f]) - means[c, f]
                sums[c, f] += r * diff[f]
            for f in range(D):
                y[f] = r * diff[f]
            for f in range(D):
                for g in range(D):
                    scat[c, f * D + g] += y[f] * diff[g]


#: Rows per tile of the diagonal E-step kernels (unlinked rows; link endpoints): a tile's rows and its (C, rows)
#: log-densities stay in cache, and the BLAS products per tile amortise their call (256: at 64 components the
#: (C, rows) products and log-densities stay in L2; equal to 512 or a few % faster at 64-D, K = 64, same at 8-D).
_DIAG_TILE = 256
_EXP_FLOOR = -708.0  # exp below this is taken as 0 (exp(-708) ~ 3e-308, the smallest normal double)


@numba.njit(cache=True, nogil=True, inline="always")
def _row_finite(X, i):
    """No NaN or inf in row ``i``: one sum (finite only if every value is; an overflowing float64 sum of finite
    values is told apart by a second look)."""
    s = 0.0
    for f in range(X.shape[1]):
        s += np.float64(X[i, f])
    if np.isfinite(s):
        return True
    for f in range(X.shape[1]):
        if not np.isfinite(X[i, f]):
            return False
    return True


@intrinsic
def _bitcast(typingctx, v):
    """The float64 whose IEEE-754 bits are the int64 ``v``, or the bits of the float64 ``v`` (an LLVM bitcast:
    free, and it vectorises)."""
    if v == types.int64:
        to = types.float64
    elif v == types.float64:
        to = types.int64
    else:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(signature.return_type))

    return to(v), codegen


@intrinsic
def _flag_bits(typingctx, a, i):
    """The bits of the 64 uint8 flags ``a[i:i + 64]`` (bit ``k`` set where ``a[i + k]`` is not 0; one vector load,
    compare and mask move: a C-contiguous 1-D ``a``, ``i + 64 <= len(a)``), a uint64."""
    if not (isinstance(a, types.Array) and a.dtype == types.uint8 and a.ndim == 1 and a.layout == "C"
            and isinstance(i, types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        arr = context.make_array(signature.args[0])(context, builder, args[0])
        k = context.cast(builder, args[1], signature.args[1], types.intp)
        vec = ir.VectorType(ir.IntType(8), 64)
        p = builder.bitcast(builder.gep(arr.data, [k]), vec.as_pointer())
        v = builder.load(p, align=1)
        return builder.bitcast(builder.icmp_unsigned("!=", v, ir.Constant(vec, None)), ir.IntType(64))

    return types.uint64(a, i), codegen


@intrinsic
def _low_bit(typingctx, b):
    """The index of the lowest set bit of the uint64 ``b`` (not 0): one ``tzcnt``."""
    if b != types.uint64:
        return None

    def codegen(context, builder, signature, args):
        return builder.cttz(args[0], ir.Constant(ir.IntType(1), 0))  # 64 for 0 (defined: no poison)

    return types.uint64(b), codegen


_SHIFTER = 1.5 * 2.0**52  # x·log2(e) + this rounds to the nearest integer k, held in the sum's low mantissa bits


@numba.njit(inline="always", **_FAST)
def _exp_cut(x, cut):
    """``exp(x)`` for ``x <= 0``, exactly 0 for ``x <= cut`` (``cut >= _EXP_FLOOR``), -inf or NaN; ``exp(0) = 1``
    exactly. Inlined into a loop it vectorises (SIMD; libm's exp does not), and it is branch-free: ``k =
    round(x / ln 2)`` by adding ``_SHIFTER`` (no round or float-to-int conversion: ``2^k`` is built from the sum's
    bits), ``r = x − k ln 2`` by Cody-Waite (``|r| <= ln 2 / 2``, ``ln 2`` in two parts, ``k ln2_hi`` exact), and
    ``e^r ≈ 1 + r + r² q(r)`` with ``q`` of degree 9, minimax in relative error on ``|r| <= 1.0001 ln 2 / 2``
    (Lawson's algorithm, 40 digits): 1.1e-17 with its float64 coefficients in exact arithmetic, below 3e-16 with
    the evaluation's rounding (measured against a long-double exp: at most 1.5e-16 over 8e7 points in [-708, 0]
    and every multiple and half-multiple of ln 2; the degree-13 Taylor polynomial it replaces was held below
    2e-15). Its callers must not reassociate (``fastmath`` without ``reassoc``): ``(x·log2 e + S) − S`` would be
    folded away."""
    kf = x * 1.4426950408889634 + _SHIFTER  # x <= cut: any value (the final select gives 0)
    k = kf - _SHIFTER
    r = (x - k * 6.93147180369123816490e-01) - k * 1.90821492927058770002e-10
    q = 2.5000063549227567e-08
    q = q * r + 2.7630248931898857e-07
    q = q * r + 2.7557586370338484e-06
    q = q * r + 2.4801493097261267e-05
    q = q * r + 0.00019841269506578428
    q = q * r + 0.0013888888943631803
    q = q * r + 0.008333333333494465
    q = q * r + 0.04166666666653015
    q = q * r + 0.16666666666666413
    q = q * r + 0.5000000000000011
    scale = _bitcast((_bitcast(kf) + 1023) << 52)  # 2^k: the low bits of kf's mantissa hold k (mod 2^12)
    return ((q * r + 1.0) * r + 1.0) * scale if x > cut else 0.0


def _has_avx512() -> bool:
    """Numba compiles for a CPU with AVX-512F (the host's, unless ``NUMBA_CPU_NAME``/``NUMBA_CPU_FEATURES`` say
    otherwise): :func:`_exp8`'s instructions exist."""
    features = _numba_config.CPU_FEATURES
    if features is None:
        if _numba_config.CPU_NAME:
            return False
        features = _llvm.get_host_cpu_features().flatten()
    return "+avx512f" in features.split(",")


_AVX512 = _has_avx512()
#: ``2^(i/16)``, ``i < 16``, rounded to float64 (from long double), the table of :func:`_exp8`.
_EXP2_16 = [float(v) for v in np.exp2(np.arange(16, dtype=np.longdouble) / 16)]


@intrinsic
def _exp8(typingctx, g, mx, acc, j, cut):
    """``e = exp(g[j:j+8] − mx[j:j+8])`` (0 where the exponent is not above ``cut >= _EXP_FLOOR``, -inf or NaN)
    into ``g[j:j+8]`` and added to ``acc[j:j+8]`` (unless ``acc`` is None): eight lanes in AVX-512 instructions
    (only where :data:`_AVX512`; nothing is bounds-checked). ``x = k ln 2 / 16 + r`` with ``k`` rounded as in
    :func:`_exp_cut` (``|r| <= ln 2 / 32``), ``e^x = 2^⌊k/16⌋ · 2^((k mod 16)/16) · e^r``: the table value
    ``2^(i/16)`` picked in a register (``vpermi2pd`` on the low four bits of ``k`` held in the shifted sum's
    mantissa), ``e^r − 1 ≈ r + r² q(r)`` with the degree-5 Taylor ``q`` (truncation below 1.3e-18), ``T + T (e^r
    − 1)`` by one multiply-add, the power of two applied by ``vscalefpd``, which also zeroes the cut lanes: 18
    vector operations where :func:`_exp_cut` takes 21. Error: the table's rounding (half an ulp) and the last
    multiply-add's, below 2.3e-16 relative; ``exp(0) = 1`` exactly."""
    sums = acc != types.none
    arrays = (g, mx, acc) if sums else (g, mx)
    if not (all(isinstance(a, types.Array) and a.layout == "C" and a.dtype == types.float64 and a.ndim == 1
                for a in arrays) and j == types.intp and cut == types.float64):
        return None

    def codegen(context, builder, sig, args):
        if not _AVX512:  # the callers never reach it there (m8 = 0); emit no AVX-512 instruction, even unoptimised
            return context.get_dummy_value()
        dbl = ir.DoubleType()
        v8, i8x8 = ir.VectorType(dbl, 8), ir.VectorType(ir.IntType(64), 8)
        mod = builder.module

        def splat(v):
            return ir.Constant(v8, [v] * 8)

        def fn(name, ret, *argtys):
            return cgutils.get_or_insert_function(mod, ir.FunctionType(ret, argtys), name)

        fma = fn("llvm.fma.v8f64", v8, v8, v8, v8)
        perm = fn("llvm.x86.avx512.vpermi2var.pd.512", v8, v8, i8x8, v8)
        scalef = fn("llvm.x86.avx512.mask.scalef.pd.512", v8, v8, v8, v8, ir.IntType(8), ir.IntType(32))
        jv, cv = args[3], args[4]
        ptrs = []
        for t, v in zip(sig.args[:len(arrays)], args[:len(arrays)]):
            a = context.make_array(t)(context, builder, v)
            ptrs.append(builder.bitcast(cgutils.get_item_pointer(context, builder, t, a, [jv]), v8.as_pointer()))
        gp, mp = ptrs[:2]
        i32 = ir.IntType(32)
        one = builder.insert_element(ir.Constant(v8, ir.Undefined), cv, ir.Constant(i32, 0))
        cuts = builder.shuffle_vector(one, one, ir.Constant(ir.VectorType(i32, 8), [0] * 8))
        x = builder.fsub(builder.load(gp, align=8), builder.load(mp, align=8))
        mask = builder.bitcast(builder.fcmp_ordered(">", x, cuts), ir.IntType(8))
        kf = builder.call(fma, [x, splat(16 / np.log(2)), splat(_SHIFTER)])
        k = builder.fsub(kf, splat(_SHIFTER))
        r = builder.call(fma, [k, splat(-6.93147180369123816490e-01 / 16), x])
        r = builder.call(fma, [k, splat(-1.90821492927058770002e-10 / 16), r])
        t = builder.call(perm, [ir.Constant(v8, _EXP2_16[:8]), builder.bitcast(kf, i8x8),
                                ir.Constant(v8, _EXP2_16[8:])])
        q = builder.call(fma, [r, splat(1 / 5040), splat(1 / 720)])
        for c in (1 / 120, 1 / 24, 1 / 6, 0.5):
            q = builder.call(fma, [q, r, splat(c)])
        p = builder.call(fma, [builder.fmul(r, r), q, r])
        y = builder.call(fma, [t, p, t])
        e = builder.call(scalef, [y, builder.fmul(k, splat(1 / 16)), ir.Constant(v8, [0.0] * 8), mask,
                                  ir.Constant(i32, 4)])
        builder.store(e, gp, align=8)
        if sums:
            builder.store(builder.fadd(builder.load(ptrs[2], align=8), e), ptrs[2], align=8)
        return context.get_dummy_value()

    return types.void(g, mx, acc, j, cut), codegen


@numba.njit(inline="always", **_FAST)
def _vexp(g, mx, m):
    """``g[:m] ← exp(g[:m] − mx[:m])``, vectorized (:func:`_exp8` eight at a time where the CPU has AVX-512,
    :func:`_exp_cut` for the rest; relative error < 3e-16); an exponent at or below ``_EXP_FLOOR``, -inf or NaN
    gives exactly 0."""
    wide_vectors()
    m8 = m - m % 8 if _AVX512 else 0
    for j in range(0, m8, 8):
        _exp8(g, mx, None, j, _EXP_FLOOR)
    for j in range(m8, m):
        g[j] = _exp_cut(g[j] - mx[j], _EXP_FLOOR)


@numba.njit(inline="always", **_FAST)
def _exp_sum(G, lo, hi, mx, m, acc, cut):
    """``G[c, :m] ← exp(G[c, :m] − mx[:m])`` for the rows ``lo <= c < hi``, 0 where the exponent is at most ``cut``
    (one loop per row: :func:`_exp8`, eight columns a step, where the CPU has AVX-512, and :func:`_exp_cut` for
    the last ``m % 8`` columns or every column elsewhere), their column sums in ``acc[:m]``."""
    wide_vectors()
    for j in range(m):
        acc[j] = 0.0
    m8 = m - m % 8 if _AVX512 else 0
    for c in range(lo, hi):
        g = G[c]
        for j in range(0, m8, 8):
            _exp8(g, mx, acc, j, cut)
        for j in range(m8, m):
            e = _exp_cut(g[j] - mx[j], cut)
            g[j] = e
            acc[j] += e


@numba.njit(inline="always", **_FAST)
def _fold_tile(G, W, per, m, A, part, S):
    """``S += (G ∘ W) A``: the weights ``G[c] · W[c // per]`` (``G`` (C, T)) of the first ``m`` rows of the design
    ``A`` (the others get weight 0) folded into the sums ``S`` (C, 2D + 1) by one BLAS product, or, when at most
    1 / ``_SPARSE`` of the weights exceed ``exp(_NEGLIGIBLE)`` (separated components: an endpoint weighs in a few
    of them), row by row for those weights alone (``part`` unused): a weight below that adds less than rounding
    to every sum (an endpoint's weights sum to its class posterior, at most 1), as in the unlinked rows' E-step."""
    C = G.shape[0]
    tiny = np.exp(_NEGLIGIBLE)
    nz = 0
    for c in range(C):
        g, w = G[c], W[c // per]
        for j in range(m):
            g[j] *= w[j]
            nz += 1 if g[j] > tiny else 0
        for j in range(m, G.shape[1]):
            g[j] = 0.0
    F = A.shape[1]
    if nz * _SPARSE > C * m:
        np.dot(G, A, part)
        for c in range(C):
            for f in range(F):
                S[c, f] += part[c, f]
        return
    for c in range(C):
        g, s = G[c], S[c]
        for j in range(m):
            r = g[j]
            if r > tiny:
                a = A[j]
                for f in range(F):
                    s[f] += r * a[f]


#: A tile whose responsibilities that count are at most 1 / _SPARSE of all is computed and folded pair by pair.
_SPARSE = 8


#: Lanes of :func:`_tile_loglik`'s partial sums and products (one 512-bit vector of float64).
_LANES = 8
_MANTISSA = (1 << 52) - 1
_LN2 = 0.6931471805599453


@numba.njit(inline="always", **_FAST)
def _tile_loglik(mx, acc, m, ls, lp):
    """``Σ_j mx[j] + log acc[j]`` over a tile's first ``m`` rows, and ``acc[j] ← 1 / acc[j]``, or 0 where that is
    not ``<= 1`` (a row sum is ``>= 1``, its largest term being ``exp(0) = 1``, unless the row holds NaN or inf or
    all its densities are -inf); returns ``(loglik, number of rows set to 0)``. Vectorized: the ``mx`` and the
    ``acc`` (each in ``[1, C]``) are summed and multiplied in ``_LANES`` lanes (``ls``, ``lp``: scratch of that
    length), row ``j`` in lane ``j % _LANES``, and ``log Π acc`` is ``E ln 2 + log Π m_l`` for the lane products
    ``m_l 2^e_l`` (``m_l ∈ [1, 2)``, ``E = Σ e_l``): one log per tile. A lane product that is not a finite number
    ``>= 1`` (NaN or inf rows, or one over 2^1024 when ``C^(T / _LANES)`` is) sends the tile to the scalar
    product, rescaled before it can overflow. The inverses: a float32 division (16 lanes a step where a float64
    one takes 4 times as long), then two Newton steps ``a += a (1 − x a)`` (error 2^-24 → 2^-48 → below 2^-96
    before the last rounding): within an ulp, and equal to the correctly rounded ``1 / x`` on 2e5 random row sums
    (``x = 1`` gives exactly 1). A row sum of 0, inf or NaN gives NaN (set to 0, counted); a finite one above
    float32's range gives 0.
    Rounding: the sum of the ``mx`` in another order (1e-16 relative)."""
    s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = 0.0
    p0 = p1 = p2 = p3 = p4 = p5 = p6 = p7 = 1.0
    full = m - m % _LANES
    for b in range(0, full, _LANES):
        s0, s1, s2, s3 = s0 + mx[b], s1 + mx[b + 1], s2 + mx[b + 2], s3 + mx[b + 3]
        s4, s5, s6, s7 = s4 + mx[b + 4], s5 + mx[b + 5], s6 + mx[b + 6], s7 + mx[b + 7]
        p0, p1, p2, p3 = p0 * acc[b], p1 * acc[b + 1], p2 * acc[b + 2], p3 * acc[b + 3]
        p4, p5, p6, p7 = p4 * acc[b + 4], p5 * acc[b + 5], p6 * acc[b + 6], p7 * acc[b + 7]
    ls[0], ls[1], ls[2], ls[3], ls[4], ls[5], ls[6], ls[7] = s0, s1, s2, s3, s4, s5, s6, s7
    lp[0], lp[1], lp[2], lp[3], lp[4], lp[5], lp[6], lp[7] = p0, p1, p2, p3, p4, p5, p6, p7
    for j in range(full, m):
        ls[j - full] += mx[j]
        lp[j - full] *= acc[j]
    ll = 0.0
    e = 0
    pm = 1.0
    fast = True
    for q in range(_LANES):
        ll += ls[q]
        p = lp[q]
        fast = fast and 1.0 <= p < np.inf
        bits = _bitcast(p)
        e += (bits >> 52) - 1023
        pm *= _bitcast((bits & _MANTISSA) | (1023 << 52))
    if fast:
        ll += e * _LN2 + np.log(pm)
    else:
        prod = 1.0
        for j in range(m):
            prod *= acc[j]
            if prod > 1e280:
                ll += np.log(prod)
                prod = 1.0
        ll += np.log(prod)
    nz = 0
    for j in range(m):
        x = acc[j]
        a = np.float64(np.float32(1.0) / np.float32(x))
        a += a * (1.0 - x * a)
        a += a * (1.0 - x * a)
        ok = a <= 1.0
        acc[j] = a if ok else 0.0
        nz += 0 if ok else 1
    return ll, nz


#: ``_FAST`` with reassociation, for the loops that sum over a row's features or a tile's rows (vectorised
#: reductions; rounding at the level of the summation order). Called, not inlined: an inlined function takes its
#: caller's flags.
_RFAST = dict(cache=True, nogil=True, error_model="numpy", fastmath={"contract", "arcp", "reassoc"})
#: After a screened tile turned out dense, this many tiles at most go to the dense path without a screen (a dense
#: tile whose first ``_HINT_ROWS`` rows look sparse ends the run early: see :func:`_looks_sparse`).
_MAX_SKIP = 256
_HINT_ROWS = 64


@numba.njit(**_RFAST)
def _screen_rows(X, idx, m, o, sc, Y, V, ny2, ny, RF, VC):
    """The rows ``X[idx[:m]]`` centred on ``o``: in float64 into ``V`` (T, D) (the exact pairs read them there,
    converted once per row), and scaled by ``sc`` in float32 into ``Y`` (the rows from ``m`` on zeroed), with their
    squared norms ``ny2`` (float64) and norms ``ny``; the features ``RF`` of ``V`` feature-major in ``VC`` (their
    columns, for :func:`_refine`: vector loads there instead of gathers); returns the count of NaN and inf values.
    A row's values are counted only when its squared norm is not finite (a NaN or inf value makes it so; finite
    values that overflow it count 0): a test per row, where one per value cost a third of the loop."""
    wide_vectors()
    D = X.shape[1]
    bad = 0
    for j in range(m):
        r = idx[j]
        s2 = 0.0
        for f in range(D):
            v = np.float64(X[r, f]) - o[f]
            V[j, f] = v
            y = v * sc[f]
            Y[j, f] = y
            s2 += y * y
        ny2[j] = s2
        ny[j] = np.sqrt(s2)
        for a in range(RF.shape[0]):  # the refined components' features, feature-major (one value at a time)
            VC[a, j] = V[j, RF[a]]
        if not np.isfinite(s2):
            for f in range(D):
                bad += 0 if np.isfinite(X[r, f]) else 1
    for j in range(m, Y.shape[0]):
        for f in range(D):
            Y[j, f] = 0.0
    return bad


@numba.njit(inline="always", **_RFAST)
def _put_t(t, k, lj, lv, mx):
    j = _U(lj[k])
    lv[k] = t
    mx[j] = t if t > mx[j] else mx[j]


@numba.njit(**_RFAST)
def _exact_pairs(V, sq, sm, base, order, cs, lj, lv, mx, m):
    """``lv[k] = t_c(x_j)`` exactly (float64, ``base_c − Σ_f (sq_cf v_jf − sm_cf)²`` on the centred rows ``V`` with
    :func:`_dense_weights`' ``sq``, ``sm``: two fused multiply-adds per feature) for the screened pairs, listed
    component by component (component ``c = order[i]``'s rows ``lj[cs[i]:cs[i + 1]]``), and every row's largest in
    ``mx[:m]``. Four rows of a component per sweep of its ``sq_c``, ``sm_c`` (a third less time than one by one)."""
    wide_vectors()
    C, D = sq.shape[0], V.shape[1]
    for j in range(m):
        mx[j] = -np.inf
    for i in range(C):
        c = order[i]
        b, qc, mc = base[c], sq[c], sm[c]
        k, k1 = _U(cs[i]), _U(cs[i + 1])
        while k + _U(4) <= k1:
            k_1, k_2, k_3 = k + _U(1), k + _U(2), k + _U(3)
            v0, v1, v2, v3 = V[_U(lj[k])], V[_U(lj[k_1])], V[_U(lj[k_2])], V[_U(lj[k_3])]
            s0 = s1 = s2 = s3 = 0.0
            for f in range(D):
                qf, mf = qc[f], mc[f]
                d0, d1, d2, d3 = qf * v0[f] - mf, qf * v1[f] - mf, qf * v2[f] - mf, qf * v3[f] - mf
                s0 += d0 * d0
                s1 += d1 * d1
                s2 += d2 * d2
                s3 += d3 * d3
            _put_t(b - s0, k, lj, lv, mx)
            _put_t(b - s1, k_1, lj, lv, mx)
            _put_t(b - s2, k_2, lj, lv, mx)
            _put_t(b - s3, k_3, lj, lv, mx)
            k += _U(4)
        while k < k1:  # the rest, one by one
            v = V[_U(lj[k])]
            s = 0.0
            for f in range(D):
                d = qc[f] * v[f] - mc[f]
                s += d * d
            _put_t(b - s, k, lj, lv, mx)
            k += _U(1)


@numba.njit(**_FAST)
def _keep_pairs(cs, lj, lv, mx):
    """The listed pairs whose ``t`` is within ``_NEGLIGIBLE`` of their row's largest kept, compacted in place with
    ``lv[k] ← t − mx[row]`` (still component by component: ``cs`` updated); returns their count."""
    wide_vectors()
    C = cs.shape[0] - 1
    w = _U(0)
    for c in range(C):
        k, k1 = _U(cs[c]), _U(cs[c + 1])
        cs[c] = w
        while k < k1:
            j = lj[k]
            d = lv[k] - mx[_U(j)]
            lj[w], lv[w] = j, d
            w += _U(1) if d > _NEGLIGIBLE else _U(0)
            k += _U(1)
    cs[C] = w
    return np.intp(w)


@numba.njit(**_RFAST)
def _fold_pairs(V, order, cs, lj, lv, acc, S):
    """``S[c] += r [v², v, 1]`` for the kept pairs (component by component, as :func:`_exact_pairs`), ``r = lv[k] ·
    acc[row]``, ``v`` the centred row in ``V``; four rows of a component per pass over ``S[c]`` (a third less
    time than one by one)."""
    wide_vectors()
    C = cs.shape[0] - 1
    D = V.shape[1]
    for i in range(C):
        c = order[i]
        s1, s2 = S[c, D:2 * D], S[c, :D]  # separate views: the loops vectorise (one row of S did not)
        k, k1 = _U(cs[i]), _U(cs[i + 1])
        s0 = 0.0
        while k + _U(4) <= k1:
            k_1, k_2, k_3 = k + _U(1), k + _U(2), k + _U(3)
            j0, j1, j2, j3 = _U(lj[k]), _U(lj[k_1]), _U(lj[k_2]), _U(lj[k_3])
            r0, r1, r2, r3 = lv[k] * acc[j0], lv[k_1] * acc[j1], lv[k_2] * acc[j2], lv[k_3] * acc[j3]
            v0, v1, v2, v3 = V[j0], V[j1], V[j2], V[j3]
            for f in range(D):  # chains of multiply-adds (fewer operations than products, then sums)
                x0, x1, x2, x3 = v0[f], v1[f], v2[f], v3[f]
                s1[f] += r0 * x0 + r1 * x1 + r2 * x2 + r3 * x3
                s2[f] += r0 * x0 * x0 + r1 * x1 * x1 + r2 * x2 * x2 + r3 * x3 * x3
            s0 += (r0 + r1) + (r2 + r3)
            k += _U(4)
        while k < k1:  # the rest, one by one
            j = _U(lj[k])
            rr = lv[k] * acc[j]
            v = V[j]
            for f in range(D):
                a = rr * v[f]
                s1[f] += a
                s2[f] += a * v[f]
            s0 += rr
            k += _U(1)
        S[c, 2 * D] += s0


#: Features per sweep of the dense tiles' loops over a component's row (the feature-major rows and the weights of
#: the densities are padded with zeros to a multiple of it).
_SWEEP = 4


@numba.njit(**_RFAST)
def _dense_weights(mu, p):
    """The dense tiles' weights ``sq = sqrt(p / 2)`` and ``sm = sq · mu`` (C, D padded to a multiple of
    ``_SWEEP`` with zeros): ``t_c(x) = base_c − Σ_f (sq_cf u_f − sm_cf)²`` for ``u = x − o``, two fused
    multiply-adds per feature. ``sq u − sm`` is rounded once, with an error of a few ulps of ``sq (|u| + |mu|)``
    like the direct form's ``u − mu`` (``u`` itself is rounded to an ulp of ``|u|``)."""
    C, D = mu.shape
    Dp = -(-D // _SWEEP) * _SWEEP
    sq, sm = np.zeros((C, Dp)), np.zeros((C, Dp))
    for c in range(C):
        for f in range(D):
            sq[c, f] = np.sqrt(0.5 * p[c, f])
            sm[c, f] = sq[c, f] * mu[c, f]
    return sq, sm


@numba.njit(**_RFAST)
def _dense_rows(X, idx, m, o, U):
    """The rows ``X[idx[:m]]`` centered on ``o``, feature-major into the first D rows of ``U`` (in ``o``'s dtype:
    float64, or float32 for the float32 E-step), transposed in registers
    (:func:`dclust.kernels.simd.transpose_rows`)."""
    wide_vectors()
    transpose_rows(X, idx, m, o, U)


@numba.njit(**_RFAST)
def _dense_densities(U, m, sq, sm, base, G, mx):
    """``G[c, j] = t_c(x_j) = base_c − Σ_f (sq_cf u_fj − sm_cf)²`` (:func:`_dense_weights`) for every component and
    the first ``m`` rows of ``U``, ``_SWEEP`` features per sweep of ``G[c]``, every row's largest in ``mx``."""
    wide_vectors()
    C, Dp = sq.shape
    for j in range(m):
        mx[j] = -np.inf
    for c in range(C):
        g = G[c]
        b = base[c]
        for f in range(0, Dp, _SWEEP):
            s0, s1, s2, s3 = sq[c, f], sq[c, f + 1], sq[c, f + 2], sq[c, f + 3]
            q0, q1, q2, q3 = sm[c, f], sm[c, f + 1], sm[c, f + 2], sm[c, f + 3]
            u0, u1, u2, u3 = U[f], U[f + 1], U[f + 2], U[f + 3]
            first, last = f == 0, f + _SWEEP == Dp
            for j in range(m):
                d0, d1, d2, d3 = s0 * u0[j] - q0, s1 * u1[j] - q1, s2 * u2[j] - q2, s3 * u3[j] - q3
                t = (b if first else g[j]) - ((d0 * d0 + d1 * d1) + (d2 * d2 + d3 * d3))
                g[j] = t
                if last:
                    mx[j] = t if t > mx[j] else mx[j]


@numba.njit(inline="always", **_RFAST)
def _add_pair(S, c, C, f, D, a0, a1, b0, b1):
    """``S[c, D + f + k] += a_k``, ``S[c, f + k] += b_k`` for the features ``f + k < D`` (``k < 2``), if ``c < C``."""
    if c < C:
        S[c, D + f] += a0
        S[c, f] += b0
        if f + 1 < D:
            S[c, D + f + 1] += a1
            S[c, f + 1] += b1


@numba.njit(**_RFAST)
def _to_responsibilities(G, U, m, acc, any_zero):
    """``G[c, j] ← G[c, j] · acc[j]`` for the first ``m`` rows (their exps times their rows' inverse sums: the
    responsibilities, rounded once to ``G``'s dtype); if ``any_zero``, the column of ``U`` of a row whose ``acc``
    is 0 (set aside) is zeroed too, so that the row folds exactly 0 even where its ``u²`` would overflow."""
    wide_vectors()
    for c in range(G.shape[0]):
        g = G[c]
        for j in range(m):
            g[j] = g[j] * acc[j]
    if any_zero:
        for j in range(m):
            if acc[j] == 0.0:
                for f in range(U.shape[0]):
                    U[f, j] = 0.0


@numba.njit(**_RFAST)
def _fold_dense(G, U, m, S):
    """``S[c] += Σ_j r_cj [u_j², u_j, 1]`` with the responsibilities ``r_cj = G[c, j]`` over the first ``m`` rows
    of ``U`` (D, T, zero-padded to a multiple of ``_SWEEP``, which is even), summed in float64 whatever the dtype
    of ``G`` and ``U``: two fused multiply-adds per feature and pair. A sweep takes four components and two
    features (16 vector accumulators): ``u²`` is formed once per row for the four, 8 loads and 2 multiplies per
    16 multiply-adds (stored squares cost more in stores than the multiplies they save); the sums of ``r`` come
    with the first sweep."""
    wide_vectors()
    C = G.shape[0]
    D = (S.shape[1] - 1) // 2
    for c in range(0, C, 4):
        g0, g1, g2, g3 = G[c], G[min(c + 1, C - 1)], G[min(c + 2, C - 1)], G[min(c + 3, C - 1)]  # past C: not added
        s0 = s1 = s2 = s3 = 0.0
        for f in range(0, D, 2):
            u0, u1 = U[f], U[f + 1]
            first = f == 0
            a00 = a01 = a10 = a11 = a20 = a21 = a30 = a31 = 0.0
            b00 = b01 = b10 = b11 = b20 = b21 = b30 = b31 = 0.0
            for j in range(m):
                r0, r1, r2, r3 = np.float64(g0[j]), np.float64(g1[j]), np.float64(g2[j]), np.float64(g3[j])
                if first:
                    s0 += r0
                    s1 += r1
                    s2 += r2
                    s3 += r3
                x0, x1 = np.float64(u0[j]), np.float64(u1[j])
                y0, y1 = x0 * x0, x1 * x1
                a00 += r0 * x0
                a01 += r0 * x1
                a10 += r1 * x0
                a11 += r1 * x1
                a20 += r2 * x0
                a21 += r2 * x1
                a30 += r3 * x0
                a31 += r3 * x1
                b00 += r0 * y0
                b01 += r0 * y1
                b10 += r1 * y0
                b11 += r1 * y1
                b20 += r2 * y0
                b21 += r2 * y1
                b30 += r3 * y0
                b31 += r3 * y1
            _add_pair(S, c, C, f, D, a00, a01, b00, b01)
            _add_pair(S, c + 1, C, f, D, a10, a11, b10, b11)
            _add_pair(S, c + 2, C, f, D, a20, a21, b20, b21)
            _add_pair(S, c + 3, C, f, D, a30, a31, b30, b31)
        for k, sk in enumerate((s0, s1, s2, s3)):
            if c + k < C:
                S[c + k, 2 * D] += sk


#: A row whose norm times the largest component norm (both scaled) is not below this is not screened (every
#: component listed): below it no float32 product ``ν · y`` (at most ``|ν| |y|`` up to rounding) can overflow.
_F32_SAFE = 1e37


#: A scaled squared norm or log-density bound from this on is not put into float32 by :func:`_screen`'s second sweep
#: (the row, or every row, then lists every component): below it no float32 value of that sweep can overflow.
_F32_BIG = 1e30
_U32 = 2.0**-24  # unit roundoff of float32


#: Features per component that :func:`_screen` takes exactly for a component whose precision ratios ``p_cf / sc_f²``
#: are spread (a few far below the rest): see :func:`_screen_consts`.
_FEW = 4
#: A component is refined when its ``_FEW + 1``-th smallest precision ratio is at least this times its smallest,
#: at most ``_MAX_REFINED`` of them (those of largest ratio): :func:`_screen_rows` copies their features one value
#: at a time, which costs more than the refinement saves when many components are spread (64 features, 56 of 64
#: components refined: the block kernel took twice as long).
_SPREAD = 1.5
_MAX_REFINED = 4


@numba.njit(**_FAST)
def _screen_consts(base, lo_c, hi_c, nv, nv2, kappa, K32, KU, mu, p, sc):
    """Per-component constants of :func:`_screen`'s two float32 sweeps, with ``δ² = |y|² + |ν|² + 2g`` (``g = −ν ·
    y`` from float32, error at most ``κ (|y| + |ν|)²``):

    - ``K32``: the lower bound ``base − ½ hi (δ² + err) = A − B |y|² − H g − E |y|`` as ``(A, B, H, E)``;
    - ``KU``: ``δ² − err − ε = (1 − κ₂)|y|² + Q + 2g − R |y|`` as ``(Q, R)`` with ``κ₂ = κ + 16 u`` (``u = 2⁻²⁴``:
      the extra ``16 u (|y| + |ν|)²`` covers the float32 rounding ``ε`` of that sum, at most ``7 u (|y| + |ν|)²``:
      four roundings of partial sums bounded by ``(1 + 3κ)(|y| + |ν|)²`` and those of ``h``, ``Q``, ``R |y|``), and
      ``W = base − _NEGLIGIBLE``, ``L = ½ lo``: a pair is listed unless ``W − L max(δ² − err − ε, 0)`` is below the
      row's largest lower bound.

    Returns ``max |W|`` over the finite ``W`` (:func:`_screen` widens each row's cut by ``16 u (max |W| + |ml|)``
    for the rounding of ``W − L s − ml``), or inf when a constant could overflow float32 (every pair is then
    listed); and the refinement of components with spread precision ratios ``r_cf = p_cf / sc_f²``: ``RI`` (C,
    ``_FEW``), the features ``F_c`` of the ``_FEW`` smallest ``r_cf``, ``RE`` (C, ``_FEW``) their weights ``e_cf
    = max(ℓ_c − r_cf, 0) sc_f²``, ``RM`` their means ``μ_cf``, and ``RL`` (C,) ``½ ℓ_c``, with ``ℓ_c`` the
    ``_FEW + 1``-th smallest ``r_cf`` shrunk by ``1e-12`` (so ``r_cf >= ℓ_c`` off ``F_c`` despite rounding), 0 for a
    component that is not refined (``ℓ_c < _SPREAD lo_c``, or not among the ``_MAX_REFINED`` of largest ``ℓ_c /
    lo_c``). Then ``Σ_f p_cf (v_f − μ_cf)² = Σ_f r_cf sc_f² (v_f −
    μ_cf)² >= ℓ_c δ² − Σ_{f ∈ F_c} e_cf (v_f − μ_cf)²``: the ``lo_c δ²`` of the plain bound, with the few features
    of low ratio taken exactly (at 64-D, K = 64, one vanishing component whose ratios go down to 0.21 was listed
    by nine rows in ten and kept by none)."""
    C, D = mu.shape
    f = min(_FEW, D - 1)
    RI, RE, RM, RL = np.zeros((C, _FEW), np.intp), np.zeros((C, _FEW)), np.zeros((C, _FEW)), np.zeros(C)
    RF = np.zeros(_MAX_REFINED * _FEW, np.intp)
    r = np.empty(D)
    gain = np.zeros(C)
    for c in range(C):
        for d in range(D):
            r[d] = p[c, d] / (sc[d] * sc[d])
        ell = np.sort(r)[f] * (1.0 - 1e-12)
        if f > 0 and ell >= _SPREAD * lo_c[c] and ell < np.inf:
            gain[c] = ell / lo_c[c] if lo_c[c] > 0.0 else np.inf
    n = 0
    for c in np.argsort(-gain)[:_MAX_REFINED]:
        if gain[c] == 0.0:
            break
        for d in range(D):
            r[d] = p[c, d] / (sc[d] * sc[d])
        srt = np.argsort(r)
        ell = r[srt[f]] * (1.0 - 1e-12)
        RL[c] = 0.5 * ell
        for a in range(_FEW):
            d = srt[min(a, f - 1)]
            RI[c, a] = n + min(a, f - 1)
            RE[c, a] = max(ell - r[d], 0.0) * (sc[d] * sc[d]) if a < f else 0.0
            RM[c, a] = mu[c, d]
        for a in range(f):
            RF[n] = srt[a]
            n += 1
    k2 = kappa + 16.0 * _U32
    wmax = 0.0
    for c in range(base.shape[0]):
        hi, nc, n2 = hi_c[c], nv[c], nv2[c]
        K32[0, c] = base[c] - 0.5 * hi * (n2 + kappa * n2)
        K32[1, c] = 0.5 * hi * (1.0 + kappa)
        K32[2, c] = hi
        K32[3, c] = hi * kappa * nc
        KU[0, c] = (1.0 - k2) * n2
        KU[1, c] = 2.0 * k2 * nc
        KU[2, c] = base[c] - _NEGLIGIBLE
        KU[3, c] = 0.5 * lo_c[c]
        w = abs(base[c] - _NEGLIGIBLE)
        if w < np.inf:
            wmax = max(wmax, w)
        if not (n2 < _F32_BIG and 0.5 * lo_c[c] < _F32_BIG):  # NaN too
            wmax = np.inf
    return (wmax if wmax < _F32_BIG else np.inf), RF[:n].copy(), np.zeros((max(n, 1), _DIAG_TILE)), RI, RE, RM, RL


#: Groups of neighbouring components in :func:`_screen_order`'s order; ``_GROUP · T`` pairs of room are kept past
#: :func:`_screen`'s cap (which it lists component by component: at most ``T`` past the cap).
_GROUP = 4


@numba.njit(**_FAST)
def _screen_order(Nv, g):
    """An order of the components in which groups of ``g`` neighbours follow each other (each group: the first
    component not yet taken and its ``g − 1`` nearest not yet taken, by the scaled means ``Nv``). Only a matter of
    speed, and no longer needed by :func:`_screen`, which lists component by component from bit masks (it took
    the rows of a group together)."""
    C, D = Nv.shape
    d2 = np.empty((C, C))
    for a in range(C):
        for b in range(C):
            s = 0.0
            for f in range(D):
                t = np.float64(Nv[a, f]) - np.float64(Nv[b, f])
                s += t * t
            d2[a, b] = s
    taken = np.zeros(C, np.bool_)
    order = np.empty(C, np.intp)
    n = 0
    for a in range(C):
        if taken[a]:
            continue
        taken[a] = True
        order[n] = a
        n += 1
        for _ in range(g - 1):
            best, bd = -1, np.inf
            for b in range(C):  # the first one not taken at least (a NaN distance is never "nearer")
                if not taken[b] and (best < 0 or d2[a, b] < bd):
                    best, bd = b, d2[a, b]
            if best < 0:
                break
            taken[best] = True
            order[n] = best
            n += 1
    return order


@numba.njit(inline="always", **_FAST)
def _refine(G32, ny2, ny, m, c, nv, nv2, k2, base, ml32, fl, VC, RI, RE, RM, RL):
    """Unflag the rows ``j`` flagged in ``fl`` for the refined component ``c`` (``RL[c] > 0``:
    :func:`_screen_consts`) whose tighter bound ``t_c <= base_c − ½ max(ℓ_c s − Z, 0)`` is below ``ml − _NEGLIGIBLE``
    by more than its rounding, in float64: ``s = (1 − κ₂)(|y|² + |ν|²) + 2g − 2κ₂ |y||ν| <= δ²`` (the bound of
    :func:`_screen`'s second sweep, whose float64 rounding is far below the extra ``16 u (|y| + |ν|)²`` of
    ``κ₂``), ``Z = (1 + 1e-12) Σ_{f ∈ F_c} e_cf (v_jf − μ_cf)²`` from the centred rows ``V``, and ``ml`` the row's
    ``ml32`` (a lower bound of its largest ``t``). The comparison keeps a slack of ``1e-12`` times the sum of the
    magnitudes (float64 rounding is ~1e-16 of it); NaN keeps the pair. ``_FEW`` is 4 here."""
    hl, n2, nc, w = RL[c], nv2[c], nv[c], base[c] - _NEGLIGIBLE
    v0, v1, v2, v3 = VC[RI[c, 0]], VC[RI[c, 1]], VC[RI[c, 2]], VC[RI[c, 3]]
    e0, e1, e2, e3 = RE[c, 0], RE[c, 1], RE[c, 2], RE[c, 3]
    m0, m1, m2, m3 = RM[c, 0], RM[c, 1], RM[c, 2], RM[c, 3]
    g32 = G32[c]
    a2, b2 = 1.0 - k2, 2.0 * k2 * nc
    for j in range(m):  # every row, branch-free (SIMD)
        s = a2 * (ny2[j] + n2) + 2.0 * np.float64(g32[j]) - b2 * ny[j]
        d0, d1, d2, d3 = v0[j] - m0, v1[j] - m1, v2[j] - m2, v3[j] - m3
        z = ((e0 * d0 * d0 + e1 * d1 * d1) + (e2 * d2 * d2 + e3 * d3 * d3)) * (1.0 + 1e-12)
        u = hl * s - 0.5 * z
        u = u if u > 0.0 else 0.0
        ml = np.float64(ml32[j])
        e = w - u - ml + 1e-12 * (abs(w) + abs(hl * s) + z + abs(ml))
        fl[j] = 0 if e < 0.0 else fl[j]


@numba.njit(**_FAST)
def _screen(G32, ny2, ny, m, base, hi_c, nv, nv2, kappa, K32, KU, wmax, yf, arg, best, order, flag, cs, lj, VC, RI,
            RE, RM, RL):
    """Which components can count for each row, from the float32 products ``G32 = −ν · y`` (``y``, ``ν``: rows and
    means centred and scaled): with ``δ² = |y|² + |ν|² − 2 y·ν`` (error at most ``κ (|y| + |ν|)²``), ``t_c`` lies in
    ``[base_c − ½ hi_c (δ² + err), base_c − ½ lo_c max(δ² − err, 0)]`` (constants in ``K32``, ``KU``, ``wmax``:
    :func:`_screen_consts`). A component whose upper bound is within ``_NEGLIGIBLE`` of a lower bound of the
    row's largest ``t`` is listed, component by component in ``order``: component ``order[i]``'s rows in
    ``lj[cs[i]:cs[i + 1]]``.

    First sweep, in float32 (eight rows per SIMD step): each row's component ``c*`` of largest lower bound; that
    bound is then recomputed in float64 with its error term, so the row's ``ml`` is a rigorous lower bound of
    ``t_c*(x_j)``, hence of the row's largest ``t`` (float32 rounding only chooses ``c*``). Second sweep, also in
    float32 (sixteen pairs per SIMD step), component by component: its upper bounds ``W − L max(s, 0)`` compared
    with ``ml32`` (flags in ``flag``), tightened for a component with spread precision ratios (:func:`_refine`),
    then its flagged rows listed from 64-bit masks of the flags (:func:`_flag_bits`, :func:`_low_bit`; eight
    branch-free steps per mask, a loop only past eight: the per-group row lists this replaced cost a serial pass
    over the tile per group, 7 of the screen's ~17 Mcycles in the 64-D bench block).

    Why no component within ``_NEGLIGIBLE`` of the row's largest ``t`` is dropped: let ``c`` be one, ``t_c >=
    t_max + _NEGLIGIBLE >= ml + _NEGLIGIBLE``. (1) ``s`` (float32) is at most ``δ_c² − err − ε + ε <= δ_c²`` (the
    exact ``y``-``ν_c`` distance; :func:`_screen_consts`), so in exact arithmetic ``E = W_c − L_c max(s, 0) −
    ml >= W_c − L_c δ_c² − ml >= t_c − _NEGLIGIBLE − ml >= 0`` (``lo_c`` bounds ``p_c / sc²`` from below). (2)
    Then ``L_c s <= W_c − ml``, so the float32 evaluation of ``W − L s − ml`` (roundings of ``W``, ``L``, the
    product and two differences, each at most ``u`` times a partial value bounded by ``|W_c| + |L_c s| + |ml|
    <= 2 (|W_c| + |ml|)``) errs by at most ``8 u (max |W| + |ml|)``; ``ml32 = ml − 16 u (max |W| + |ml|)`` (its
    own float32 rounding at most ``u |ml32|``) makes the computed value positive: listed. The row's best
    component is one of these. A row that could overflow float32 (``|y| max|ν| >= _F32_SAFE``, ``|y|²`` or
    ``|ml|`` from ``_F32_BIG``, or a ``wmax`` of inf) or holds NaN gets ``ml32 = −inf``: every component listed
    (``W − L s + inf`` is inf or NaN, and a NaN bound lists its pair). :func:`_refine` only unflags a pair whose
    tighter bound is proven below the cut. Scratch: ``yf`` (4, T) float32, ``arg`` (T,) int32, ``best`` (T,)
    float32, ``flag`` (T,) uint8; ``VC``, ``RI``, ``RE``, ``RM``, ``RL``: the
    refinement's columns (:func:`_screen_rows`) and constants (:func:`_screen_consts`). Returns the count of
    listed pairs; one above ``len(lj) − _GROUP · T`` stops the listing (a dense tile)."""
    wide_vectors()
    C, T = G32.shape
    cap = lj.shape[0] - _GROUP * T
    ny2f, nyf, h, ml32 = yf[0], yf[1], yf[2], yf[3]
    for j in range(m):
        ny2f[j] = ny2[j]
        nyf[j] = ny[j]
    A, B, H, E = K32[0], K32[1], K32[2], K32[3]
    g32 = G32[0]
    a0, b0, h0, e0 = A[0], B[0], H[0], E[0]
    for j in range(m):
        best[j] = a0 - b0 * ny2f[j] - h0 * g32[j] - e0 * nyf[j]
        arg[j] = 0
    for c in range(1, C):
        g32 = G32[c]
        ac, bc, hc, ec = A[c], B[c], H[c], E[c]
        ci = np.int32(c)
        for j in range(m):
            v = ac - bc * ny2f[j] - hc * g32[j] - ec * nyf[j]
            up = v > best[j]
            best[j] = v if up else best[j]
            arg[j] = ci if up else arg[j]
    big = 0.0
    for c in range(C):
        big = max(big, nv[c])
    for j in range(m):
        c = _U(arg[j])
        d2 = ny2[j] + nv2[c] + 2.0 * np.float64(G32[c, j])
        r = ny[j] + nv[c]
        e = d2 + kappa * r * r
        ok = e - e == 0.0 and ny[j] * big < _F32_SAFE  # NaN and rows that could overflow float32: every c
        mj = base[c] - 0.5 * hi_c[c] * e if ok else -np.inf
        ok = ok and ny2[j] < _F32_BIG and abs(mj) < _F32_BIG and wmax < np.inf
        ml32[j] = mj - 16.0 * _U32 * (wmax + abs(mj)) if ok else -np.inf
        h[j] = (1.0 - kappa - 16.0 * _U32) * ny2[j]
    Q, R, W, L = KU[0], KU[1], KU[2], KU[3]
    k2 = kappa + 16.0 * _U32
    for j in range(m, flag.shape[0]):  # the flags past the tile's rows stay 0
        flag[j] = 0
    q = _U(0)
    for i in range(C):
        c = order[i]
        cs[i] = q
        if q > _U(cap):
            continue
        g32 = G32[c]
        qc, rc, wc, lc = Q[c], R[c], W[c], L[c]
        for j in range(m):  # SIMD
            s = h[j] + qc + np.float32(2.0) * g32[j] - rc * nyf[j]
            s = s if s > np.float32(0.0) else np.float32(0.0)
            flag[j] = 0 if wc - lc * s - ml32[j] < np.float32(0.0) else 1  # NaN lists the pair
        if RL[c] > 0.0:
            _refine(G32, ny2, ny, m, c, nv, nv2, k2, base, ml32, flag, VC, RI, RE, RM, RL)
        for j0 in range(0, m, 64):  # the flagged rows, 64 at a time from a bit mask
            if j0 + 64 <= flag.shape[0]:
                b = _flag_bits(flag, j0)
            else:  # a tile not a multiple of 64 rows long: its last flags one by one
                b = _U(0)
                for k in range(flag.shape[0] - j0):
                    b |= _U(flag[j0 + k]) << _U(k)
            for _ in range(8):  # branch-free: a row's bit is cleared once listed, an empty mask lists nothing
                lj[q] = j0 + _low_bit(b)
                q += _U(1) if b != _U(0) else _U(0)
                b &= b - _U(1)
            while b != _U(0):  # more than 8 (rare)
                lj[q] = j0 + _low_bit(b)
                q += _U(1)
                b &= b - _U(1)
    cs[C] = q
    return np.intp(q)


@numba.njit(inline="always", **_FAST)
def _looks_sparse(G, m):
    """A dense tile's exps ``G`` (0 at or below the cut) look like a sparse tile's: at most 1 / ``_SPARSE`` of the
    pairs of its first ``_HINT_ROWS`` rows count. Then the next tile is screened again (the screen lists a superset
    of the pairs that count: rows that do not look sparse would not have been screened sparse); otherwise the
    run of tiles without a screen goes on, up to ``_MAX_SKIP`` (at 8 features, K = 16 a screen costs about 6 µs,
    half a dense tile, and 1 tile in 17 was screened with runs of 16: 3 % of the block kernel)."""
    s = min(m, _HINT_ROWS)
    nz = 0
    for c in range(G.shape[0]):
        g = G[c]
        for j in range(s):
            nz += 1 if g[j] > 0.0 else 0
    return nz * _SPARSE <= G.shape[0] * s


@numba.njit(inline="always", **_FAST)
def _next_tile(keep, i, idx):
    """The kept rows of the next tile, from row ``i`` on: their indices in ``idx[:m]`` (``m`` at most ``len(idx)``);
    returns ``(i, m)``, ``i`` past the last row looked at."""
    m = 0
    while m < idx.shape[0] and i < keep.shape[0]:
        idx[m] = i
        m += 1 if keep[i] else 0
        i += 1
    return i, m


@numba.njit(**_FAST)
def _diag_kernel(X, keep, o, mu, p, base, sc, Nv, nv2, lo_c, hi_c, kappa):
    """The E-step of the kept rows of a block for diagonal covariances, tile by tile in one read: the
    responsibilities of every component, folded into the tile's sums, all in float64.

    ``t_c(x) = base_c − ½ Σ_f p_cf (x_f − μ_cf)²`` (``p = σ⁻²``, ``base_c = log α_m + log π_mk − D/2 log 2π −
    log|Σ_c|/2``), about ``o`` (the mean of the component means; ``mu = μ − o``). A tile of ``_DIAG_TILE`` kept
    rows is first screened in float32 (:func:`_screen`: one BLAS product of the rows and the means, centred and
    scaled by ``sc``, as a k-means pass; ``lo_c``/``hi_c`` bound ``p_c / sc²``), which lists the components that
    can be within ``_NEGLIGIBLE`` of a row's largest ``t`` (a responsibility below ``exp(_NEGLIGIBLE)`` times the
    row's largest counts as 0: below rounding of every sum it would add to). A sparse tile (separated components;
    at most 1 / ``_SPARSE`` of the pairs listed) gets exact ``t`` for the listed pairs only, their exps and a
    fold pair by pair. A dense tile (overlapping components) gets every ``t`` in float64 over contiguous rows
    (:func:`_dense_densities`), a vectorised exp with the cut (:func:`_exp_sum`) and a fold by sums over its rows (a
    tile that skipped the screen counts the NaN and inf values of the rows whose sum of exps is not >= 1, the
    only ones that can hold any); after a dense tile the next ones skip the screen
    (1, 3, 7, ... then ``_MAX_SKIP`` tiles while they stay dense, until a dense tile looks sparse:
    :func:`_looks_sparse`). The screen only chooses which pairs are computed:
    the statistics are those of the exact ``t``. Returns ``(S, loglik, n_bad)`` with ``S`` (C, 2D + 1):
    ``[Σ r (x − o)², Σ r (x − o), Σ r]``; ``n_bad`` counts the NaN and inf values of the kept rows (the caller
    drops the block's sums when there is one)."""
    wide_vectors()
    n, D = X.shape
    C = mu.shape[0]
    T = _DIAG_TILE
    idx = np.empty(T, np.intp)
    sq, sm = _dense_weights(mu, p)
    U = np.zeros((sq.shape[1], T))  # the padding rows stay 0
    Y = np.zeros((T, D), np.float32)
    ny2, ny, mx, acc = np.empty(T), np.empty(T), np.empty(T), np.empty(T)
    ls, lp = np.empty(_LANES), np.empty(_LANES)
    G32 = np.empty((C, T), np.float32)
    G = np.empty((C, T))
    S = np.zeros((C, 2 * D + 1))
    cap = max(T, C * T // _SPARSE + 1) + _GROUP * T
    zero, lv, lj = np.zeros(cap), np.empty(cap), np.empty(cap, np.intp)
    nv = np.sqrt(nv2)
    V, yf = np.empty((T, D)), np.empty((4, T), np.float32)
    arg, best, cs = np.empty(T, np.int32), np.empty(T, np.float32), np.empty(C + 1, np.intp)
    flag, order = np.empty(T, np.uint8), _screen_order(Nv, _GROUP)
    K32, KU = np.empty((4, C), np.float32), np.empty((4, C), np.float32)
    wmax, RF, VC, RI, RE, RM, RL = _screen_consts(base, lo_c, hi_c, nv, nv2, kappa, K32, KU, mu, p, sc)
    loglik = 0.0
    n_bad = 0
    wait = 0  # dense tiles left before the next screen
    skip = 0
    i = 0
    while i < n:
        i, m = _next_tile(keep, i, idx)
        if m == 0:
            break
        sparse = False
        q = 0
        screened = wait == 0
        if screened:
            n_bad += _screen_rows(X, idx, m, o, sc, Y, V, ny2, ny, RF, VC)
            np.dot(Nv, Y.T, G32)
            q = _screen(G32, ny2, ny, m, base, hi_c, nv, nv2, kappa, K32, KU, wmax, yf, arg, best, order, flag,
                        cs, lj, VC, RI, RE, RM, RL)
            sparse = q * _SPARSE <= C * m
            skip = 0 if sparse else min(2 * skip + 1, _MAX_SKIP)
            wait = skip
        else:
            wait -= 1
        if sparse:
            _exact_pairs(V, sq, sm, base, order, cs, lj, lv, mx, m)
            w = _keep_pairs(cs, lj, lv, mx)
            _vexp(lv, zero, w)
            for j in range(m):
                acc[j] = 0.0
            for k in range(w):
                acc[_U(lj[k])] += lv[k]
            loglik += _tile_loglik(mx, acc, m, ls, lp)[0]
            _fold_pairs(V, order, cs, lj, lv, acc, S)
        else:
            _dense_rows(X, idx, m, o, U)
            _dense_densities(U, m, sq, sm, base, G, mx)
            _exp_sum(G, 0, C, mx, m, acc, _NEGLIGIBLE)
            ll, nz = _tile_loglik(mx, acc, m, ls, lp)
            loglik += ll
            if nz and not screened:  # rows set to 0: NaN or inf values, or all densities -inf
                for j in range(m):
                    if acc[j] == 0.0:
                        for f in range(D):
                            n_bad += 0 if np.isfinite(X[idx[j], f]) else 1
            _to_responsibilities(G, U, m, acc, nz > 0)
            _fold_dense(G, U, m, S)
            if wait > 0 and _looks_sparse(G, m):
                wait = 0
    return S, loglik, n_bad


#: A float32 row whose largest log-density is below this is done again in float64: the float32 rounding of its
#: log-densities, about ``2^-22 (|base| + |t|)`` nats, could exceed ~1e-3 nats there.
_FAR32 = -1024.0
_SHIFTER32 = 1.5 * 2.0**23  # as _SHIFTER, for float32


@intrinsic
def _pow2_32(typingctx, kf):
    """``2^k`` as a float32, where ``k`` (-126 to 127) sits in the low mantissa bits of the float32 ``kf = k +
    _SHIFTER32``: ``(bits(kf) + 127) << 23`` as int32 (the shifter's own bits leave at the top); free, and it
    vectorises."""
    if kf != types.float32:
        return None

    def codegen(context, builder, signature, args):
        i32 = ir.IntType(32)
        b = builder.add(builder.bitcast(args[0], i32), ir.Constant(i32, 127))
        return builder.bitcast(builder.shl(b, ir.Constant(i32, 23)), ir.FloatType())

    return types.float32(kf), codegen


@numba.njit(inline="always", **_FAST)
def _exp_cut32(x, cut):
    """float32 ``exp(x)`` for ``-87 < cut <= x <= 0``, exactly 0 at or below ``cut`` (and for NaN or -inf): as
    :func:`_exp_cut` with ``ln 2`` in two float32 parts (``k ln2_hi`` exact) and Cephes' degree-5 minimax
    polynomial for ``e^r`` on ``|r| <= ln 2 / 2``; within 2 ulps of float32 (a few 1e-7 relative); branch-free,
    it vectorises sixteen lanes a step."""
    kf = x * np.float32(1.4426950408889634) + np.float32(_SHIFTER32)
    k = kf - np.float32(_SHIFTER32)
    r = (x - k * np.float32(0.693359375)) - k * np.float32(-2.12194440e-4)
    q = np.float32(1.9875691500e-4)
    q = q * r + np.float32(1.3981999507e-3)
    q = q * r + np.float32(8.3334519073e-3)
    q = q * r + np.float32(4.1665795894e-2)
    q = q * r + np.float32(1.6666665459e-1)
    q = q * r + np.float32(5.0000001201e-1)
    return ((q * r) * r + r + np.float32(1.0)) * _pow2_32(kf) if x > cut else np.float32(0.0)


@numba.njit(**_FAST)
def _exp_sum32(G, mx, m, acc, cut):
    """``G[c, :m] ← exp(G[c, :m] − mx[:m])`` in float32 for every row ``c`` of ``G``, 0 where the exponent is at
    most ``cut``; their column sums in ``acc[:m]``."""
    wide_vectors()
    for j in range(m):
        acc[j] = 0.0
    for c in range(G.shape[0]):
        g = G[c]
        for j in range(m):
            e = _exp_cut32(g[j] - mx[j], cut)
            g[j] = e
            acc[j] += e


@numba.njit(**_FAST)
def _diag_kernel32(X, keep, o, sq, sm, base):
    """:func:`_diag_kernel` for float32 rows of overlapping components (:func:`_dense_in_float32`): every tile
    dense, the rows centred on ``o`` (float32), their log-densities, exps, row sums and responsibilities in
    float32 (as scikit-learn's ``GaussianMixture`` on float32 data), folded into float64 sums about ``o``
    (:func:`_fold_dense`, the same sums as :func:`_diag_kernel`). Each row's values depend on the row alone, not
    on its tile, so the statistics do not depend on the chunking (to the float64 rounding of the sums). A row
    whose exps all vanish (NaN or inf values, counted in ``n_bad``, or log-densities that overflow float32) or
    whose largest log-density is below ``_FAR32`` (float32 rounding too coarse there) adds nothing here and is
    marked in ``retry`` (the caller does those rows in float64 with :func:`_diag_kernel`). ``sq``, ``sm``
    (:func:`_dense_weights`) and ``base`` in float32. Returns ``(S, loglik, n_bad, retry)``, ``retry`` empty
    when no row was marked."""
    wide_vectors()
    n, D = X.shape
    C = sq.shape[0]
    T = _DIAG_TILE
    idx = np.empty(T, np.intp)
    U = np.zeros((sq.shape[1], T), np.float32)  # the padding rows stay 0
    G = np.empty((C, T), np.float32)
    mx32, acc32 = np.empty(T, np.float32), np.empty(T, np.float32)
    mx, acc = np.empty(T), np.empty(T)
    aside = np.empty(T, np.bool_)  # rows that add nothing here
    ls, lp = np.empty(_LANES), np.empty(_LANES)
    S = np.zeros((C, 2 * D + 1))
    retry = np.zeros(0, np.bool_)
    loglik = 0.0
    n_bad = 0
    i = 0
    while i < n:
        i, m = _next_tile(keep, i, idx)
        if m == 0:
            break
        _dense_rows(X, idx, m, o, U)
        _dense_densities(U, m, sq, sm, base, G, mx32)
        _exp_sum32(G, mx32, m, acc32, np.float32(_NEGLIGIBLE))
        odd = 0
        for j in range(m):
            mx[j] = mx32[j]
            acc[j] = acc32[j]
            aside[j] = not (acc32[j] >= 1.0 and mx32[j] >= _FAR32)
            odd += aside[j]
        if odd:
            for j in range(m):
                if aside[j]:
                    bad = 0
                    for f in range(D):
                        bad += 0 if np.isfinite(X[idx[j], f]) else 1
                    n_bad += bad
                    if bad == 0:
                        if retry.size == 0:
                            retry = np.zeros(n, np.bool_)
                        retry[idx[j]] = True
                    mx[j], acc[j] = 0.0, 1.0  # adds 0 to the log-likelihood
        loglik += _tile_loglik(mx, acc, m, ls, lp)[0]
        if odd:
            for j in range(m):
                if aside[j]:
                    acc[j] = 0.0  # folds exactly 0
        _to_responsibilities(G, U, m, acc, odd > 0)
        _fold_dense(G, U, m, S)
    return S, loglik, n_bad, retry


def _dense_in_float32(o: np.ndarray, mu: np.ndarray, p: np.ndarray, base: np.ndarray) -> bool:
    """Whether float32 rows take :func:`_diag_kernel32` (every tile dense, in float32) rather than
    :func:`_diag_kernel`: the components overlap (at the component means, on average more than 1 / ``_SPARSE``
    of the components lie within ``_NEGLIGIBLE`` of the best: a screen would list almost every pair anyway), and
    a typical row's best log-density, ``base_c − D/2``, is above ``_FAR32 / 2`` for every component that has
    weight (with many features every row would fall below ``_FAR32`` and be done twice), and the centre ``o`` is
    a float32 value (:func:`_diag_screen_weights` rounds it, unless the means lie beyond float32's range).
    Decided from the parameters alone: every block of a pass takes the same path."""
    with np.errstate(over="ignore"):
        if not (o.astype(np.float32) == o).all():
            return False
    C, D = mu.shape
    live = base > -np.inf
    if not live.any() or (base[live] - 0.5 * D).min() < _FAR32 / 2:
        return False
    t = np.empty((C, C))
    for c in range(C):  # t[c, c'] = t_c'(μ_c)
        t[c] = base - 0.5 * (((mu[c] - mu) ** 2) * p).sum(axis=1)
    listed = (t >= t.max(axis=1, keepdims=True) + _NEGLIGIBLE).sum(axis=1)
    return bool(listed.mean() * _SPARSE > C)


def _diag_screen_weights(params: MixtureParams):
    """The arguments of :func:`_diag_kernel` after ``X, keep``: ``o`` (mean of the component means), ``mu = μ − o``
    (C, D), ``p = σ⁻²`` (C, D), ``base`` (C,), the screen's feature scales ``sc`` (the geometric mean of the
    precisions over the components, square-rooted), ``−ν = −(μ − o) sc`` (C, D) in float32 and ``|ν|²``, the
    bounds ``lo_c``/``hi_c`` of ``p_c / sc²`` over the features, and ``κ``, the bound on the float32 screen's
    relative error (eight times the textbook ``(D + 1) u`` for a length-D dot product and the rounding of y)."""
    M, K, D = params.n_classes, params.n_sub, params.means.shape[2]
    C = M * K
    o, _, bsub = _diag_design_weights(params)
    with np.errstate(over="ignore"):
        o32 = o.astype(np.float32)
    if np.isfinite(o32).all():
        o = o32.astype(np.float64)  # float32 rows centred on it (the float32 E-step) are rounded once
    mu = np.ascontiguousarray(params.means.reshape(C, D) - o)
    pc = params.prec_chol.reshape(C, D)
    p = np.ascontiguousarray(pc * pc)
    base = np.repeat(_log_alpha(params.alpha), K) + bsub
    sc2 = np.exp(np.log(p).mean(axis=0))
    ratio = p / sc2
    nu = np.ascontiguousarray(-(mu * np.sqrt(sc2)), dtype=np.float32)
    nv2 = (nu.astype(np.float64) ** 2).sum(axis=1)
    kappa = 4.0 * (D + 8) * 2.0**-24
    return o, mu, p, base, np.sqrt(sc2), nu, nv2, ratio.min(axis=1), ratio.max(axis=1), kappa


@numba.njit(inline="always", **_FAST)
def _design_row(A, m, X, i, o):
    """Row ``m`` of the diagonal design ``[(x − o)², x − o, 1]`` from ``X[i]``; returns how many of the row's
    values are NaN or inf (``v − v`` is 0 only for a finite ``v``: a count that vectorises, where a per-row float
    sum is a serial chain)."""
    D = o.shape[0]
    bad = 0
    for f in range(D):
        v = np.float64(X[i, f]) - o[f]
        A[m, f] = v * v
        A[m, D + f] = v
        bad += 0 if v - v == 0.0 else 1
    A[m, 2 * D] = 1.0
    return bad


@numba.njit(**_FAST)
def _link_tile(A, h, must, WT, bsub, log_alpha, n_sub, G, g, P, Q, mx, acc, ends, part, S, counts):
    """One tile of :func:`_diag_link_kernel`: ``h`` links of one type, their first endpoints in rows ``[0, h)`` of
    the design ``A`` and their second in ``[h, 2h)``; the endpoints' weights folded into ``S`` by one BLAS
    product (:func:`_fold_tile`), the class posteriors added to ``counts``; returns the links' log-likelihood.

    Every loop but the rare log-space fallback runs over the tile's columns innermost (SIMD, :func:`_vexp`):
    ``G`` (C, T) the sub-cluster log-densities then the endpoints' weights, ``g`` (M, T) the class
    log-marginals ``log g(m)``, ``P`` (M, T) the pair posteriors of both endpoints, ``Q`` (M, T) sums over the
    other classes."""
    wide_vectors()
    C, T = G.shape
    M = g.shape[0]
    m2 = 2 * h
    np.dot(WT, A.T, G)  # squared Mahalanobis distances
    for c in range(C):
        b = bsub[c]
        r = G[c]
        for j in range(m2):
            r[j] = b - 0.5 * r[j]  # log π_c + log N_c
    for k in range(M):  # log g(k) and the within-class weights exp(sub_c − log g(k)) (0 where both are -inf)
        gk = g[k]
        if n_sub == 1:
            r = G[k]
            for j in range(m2):
                gk[j] = r[j]
                r[j] = 1.0 if r[j] > -np.inf else 0.0
            continue
        for j in range(m2):
            mx[j] = -np.inf
        for c in range(k * n_sub, (k + 1) * n_sub):
            r = G[c]
            for j in range(m2):
                mx[j] = r[j] if r[j] > mx[j] else mx[j]
        for j in range(m2):
            mx[j] = mx[j] if mx[j] > -np.inf else 0.0
        _exp_sum(G, k * n_sub, (k + 1) * n_sub, mx, m2, acc, _EXP_FLOOR)
        for j in range(m2):
            gk[j] = mx[j] + np.log(acc[j]) if acc[j] > 0.0 else -np.inf
            acc[j] = 1.0 / acc[j] if acc[j] > 0.0 else 0.0
        for c in range(k * n_sub, (k + 1) * n_sub):
            r = G[c]
            for j in range(m2):
                r[j] *= acc[j]
    ll = 0.0
    if must:  # s_k ∝ α_k g_a(k) g_b(k), for both endpoints; counted once
        for j in range(h):
            mx[j] = -np.inf
        for k in range(M):
            for j in range(h):
                t = log_alpha[k] + g[k, j] + g[k, h + j]
                P[k, j] = t
                mx[j] = t if t > mx[j] else mx[j]
        _exp_sum(P, 0, M, mx, h, acc, _EXP_FLOOR)
        for j in range(h):
            ll += mx[j] + np.log(acc[j])
            acc[j] = 1.0 / acc[j]
        for k in range(M):
            for j in range(h):
                s = P[k, j] * acc[j]
                P[k, j] = s
                P[k, h + j] = s
                counts[k] += s
    else:  # d_a(k) ∝ a_k B_k, d_b(k) ∝ b_k A_k (a_k = α_k g_a(k), B_k = Σ_{l≠k} b_l), both counted
        for j in range(m2):
            mx[j] = -np.inf
        for k in range(M):
            for j in range(m2):
                t = log_alpha[k] + g[k, j]
                P[k, j] = t
                mx[j] = t if t > mx[j] else mx[j]
        for j in range(m2):
            mx[j] = mx[j] if mx[j] > -np.inf else 0.0
        for j in range(m2):
            acc[j] = 0.0  # running prefix sum over the classes
        for k in range(M):
            pk = P[k]
            _vexp(pk, mx, m2)
            for j in range(m2):
                Q[k, j] = acc[j]
                acc[j] += pk[j]
        for j in range(m2):
            acc[j] = 0.0  # suffix sums: no cancellation
        for k in range(M - 1, -1, -1):
            for j in range(m2):
                Q[k, j] += acc[j]
                acc[j] += P[k, j]
        for j in range(h):
            acc[j] = 0.0
        for k in range(M):
            for j in range(h):
                acc[j] += P[k, j] * Q[k, h + j]  # Z = Σ a_k B_k
        for j in range(h):
            tot = acc[j]
            if tot > 1e-250:  # every term that counts is a normal double
                ll += np.log(tot) + mx[j] + mx[h + j]
                acc[j] = 1.0 / tot
            else:
                acc[j] = 0.0
        for k in range(M):
            for j in range(h):
                a = P[k, j] * Q[k, h + j] * acc[j]
                b = P[k, h + j] * Q[k, j] * acc[j]
                P[k, j] = a
                P[k, h + j] = b
        ea, eb, oa, ob = ends[:M], ends[M : 2 * M], mx[m2 : m2 + M], mx[m2 + M : m2 + 2 * M]
        for j in range(h):
            if acc[j] > 0.0:
                continue
            for k in range(M):  # a pair deep inside one class: every a_k B_k underflows; the same in logs
                ea[k] = log_alpha[k] + g[k, j]
                eb[k] = log_alpha[k] + g[k, h + j]
            _log_sum_others(ea, oa)
            _log_sum_others(eb, ob)
            for k in range(M):
                ea[k] += ob[k]  # log a_k B_k
                eb[k] += oa[k]  # log b_k A_k
            ll += _softmax(ea)
            _softmax(eb)
            for k in range(M):
                P[k, j] = ea[k]
                P[k, h + j] = eb[k]
        for k in range(M):
            for j in range(m2):
                counts[k] += P[k, j]
    _fold_tile(G, P, n_sub, m2, A, part, S)  # within-class weights times the class posteriors
    return ll


@numba.njit(**_FAST)
def _diag_link_kernel(Xa, Xb, order, n_must, o, WT, bsub, log_alpha, n_sub):
    """Every link for diagonal covariances by BLAS tiles: the endpoints of
    ``_DIAG_TILE // 2`` links of one type at a time (``order``: link indices, its first ``n_must`` the
    must-links) in one design ``[(x − o)², x − o, 1]``, their sub-cluster log-densities from one product ``W A``,
    pair posteriors by vectorised exps (:func:`_link_tile`) and the endpoints' weights folded in by a second
    product. Returns ``(S, counts, loglik)``, ``S`` (C, 2D + 1) as :func:`_diag_kernel`'s."""
    wide_vectors()
    L, D = Xa.shape
    C = WT.shape[0]
    M = log_alpha.shape[0]
    T = _DIAG_TILE
    H = T // 2
    A = np.zeros((T, 2 * D + 1))
    G = np.empty((C, T))
    g, P, Q = np.empty((M, T)), np.empty((M, T)), np.empty((M, T))
    part = np.empty((C, 2 * D + 1))
    S = np.zeros((C, 2 * D + 1))
    counts = np.zeros(M)
    mx, acc = np.empty(T + 2 * M), np.empty(T)
    ends = np.empty(2 * M)
    loglik = 0.0
    for start, stop, must in ((0, n_must, True), (n_must, L, False)):
        for lo in range(start, stop, H):
            h = min(H, stop - lo)
            for j in range(h):
                _design_row(A, j, Xa, order[lo + j], o)
                _design_row(A, h + j, Xb, order[lo + j], o)
            loglik += _link_tile(A, h, must, WT, bsub, log_alpha, n_sub, G, g, P, Q, mx, acc, ends, part, S, counts)
    return S, counts, loglik


@numba.njit(**_FAST)
def _full_kernel(X, keep, means, prec, logdet, log_pi, log_alpha, n_sub):
    """One fused pass over the kept rows for full covariances: responsibilities of every component folded into
    weights, sums and scatter about the shift ``means`` (the current parameters, near the new means: no
    cancellation), class counts and the log-likelihood. ``prec`` is (C, D * D), the upper Cholesky factors.

    ``r_mk = post_m · π_mk N_mk / g_m = exp(t_mk − log z)`` with ``t_mk = log α_m + log π_mk + log N_mk`` and
    ``log z = logsumexp(t)``. Only the components whose ``t_mk`` is within 60 of the row's largest get an exp
    and are folded in (the others have ``r < 1e-26``, below rounding of every sum a row adds to); with one such
    component (separated clusters) ``r = 1`` and ``log z = t_max`` exactly, without a call. The finiteness test
    is one sum per row (finite only if every value is)."""
    wide_vectors()
    n, D = X.shape
    C = means.shape[0]
    weight = np.zeros(C)
    sums = np.zeros((C, D))
    scat = np.zeros((C, D * D))
    counts = np.zeros(C // n_sub)
    loglik = 0.0
    t = np.empty(C)
    ks = np.zeros(_TILE, np.intp)
    idx = np.empty((_TILE, C), np.intp)
    rs = np.empty((_TILE, C))
    diff, y = np.empty(D), np.empty(D)
    base, cls = np.empty(C), np.empty(C, np.intp)
    for c in range(C):
        cls[c] = c // n_sub
        base[c] = log_alpha[cls[c]] + log_pi[c] - 0.5 * D * np.log(2.0 * np.pi) + logdet[c]
    n_bad = 0
    for lo in range(0, n, _TILE):
        hi = min(n, lo + _TILE)
        for i in range(lo, hi):
            j = i - lo
            ks[j] = 0
            if not keep[i]:
                continue
            if not _row_finite(X, i):
                n_bad += 1
                continue
            for c in range(C):
                for f in range(D):
                    diff[f] = X[i, f] - means[c, f]
                q = 0.0
                for h in range(D):
                    v = 0.0
                    for f in range(h + 1):
                        v += diff[f] * prec[c, f * D + h]
                    q += v * v
                t[c] = q
            mx = -np.inf
            for c in range(C):
                t[c] = base[c] - 0.5 * t[c]
                mx = max(mx, t[c])
            k = 0
            for c in range(C):  # the components that count, without a branch per component
                idx[j, k] = c
                k += 1 if t[c] - mx > _NEGLIGIBLE else 0
            if k == 1:
                rs[j, 0] = 1.0  # exp(0) / 1
                loglik += mx  # + log 1
            else:
                acc = 0.0
                for q in range(k):
                    rs[j, q] = np.exp(t[idx[j, q]] - mx)
                    acc += rs[j, q]
                loglik += mx + np.log(acc)
                inv = 1.0 / acc
                for q in range(k):
                    rs[j, q] *= inv
            for q in range(k):
                counts[cls[idx[j, q]]] += rs[j, q]
            ks[j] = k
        _fold_rows(X, lo, ks[: hi - lo], idx, rs, means, weight, sums, scat, diff, y)
    return weight, sums, scat, counts, loglik, n_bad


def _diag_design_weights(params: MixtureParams):
    """The diagonal tile path's ``o`` (mean of the component means), ``W`` (C, 2D + 1) with ``W [(x − o)², x − o,
    1] = (x − μ)ᵀ Σ⁻¹ (x − μ)``, and ``log π_c − D/2 log 2π − log|Σ_c|/2`` (C,)."""
    C, D = params.n_classes * params.n_sub, params.means.shape[2]
    shift = params.means.reshape(C, D)
    prec = params.prec_chol.reshape(C, D)
    with np.errstate(divide="ignore"):
        log_pi = np.log(params.pi).reshape(C)
    o = shift.mean(axis=0)
    p2 = prec * prec
    WT = np.concatenate([p2, -2.0 * (shift - o) * p2, ((shift - o) ** 2 * p2).sum(axis=1, keepdims=True)], axis=1)
    return o, WT, log_pi - 0.5 * D * _LOG_2PI + np.log(prec).sum(axis=1)


def unlinked_partial(Xb: np.ndarray, params: MixtureParams, linked_local: np.ndarray | None = None, *,
                     block_index: int = 0, keep: np.ndarray | None = None) -> GaussianStats:
    """E-step partial of the rows of a block that are in no link (the set U of E-GP1).

    One fused numba pass over the block (:func:`_diag_kernel` for diagonal covariances, the fast path, or
    :func:`_diag_kernel32` for float32 rows of overlapping components; :func:`_full_kernel` otherwise); equal to
    :func:`unlinked_partial_numpy` up to rounding (float64's, or float32's on the float32 path: about 1e-6).

    Parameters
    ----------
    Xb : (n, D) array
    params : MixtureParams
    linked_local : (L,) int array, optional
        Local indices of the block's rows that are in at least one link; they are skipped here.
    block_index : int
        Reported in ``bad_block`` when the block holds NaN or inf.
    keep : (n,) bool array, optional
        Instead of ``linked_local``: True for the rows to take (the complement of the linked rows, built once per
        fit by the caller).
    """
    Xb = np.asarray(Xb)
    if Xb.dtype not in (np.float32, np.float64) or not Xb.flags.c_contiguous:
        Xb = np.ascontiguousarray(Xb, dtype=np.float64)
    if keep is None:
        keep = unlinked_mask(Xb.shape[0], linked_local)
    M, K, D = params.n_classes, params.n_sub, Xb.shape[1]
    C = M * K
    if params.diag:
        prep = _estep_weights(params)
        if Xb.dtype == np.float32 and prep.dense32 is not None:
            S, loglik, n_bad, retry = _diag_kernel32(Xb, keep, *prep.dense32)
            if len(retry) and not n_bad:
                with _one_blas_thread():
                    S64, loglik64, n_bad = _diag_kernel(Xb, retry, *prep.weights)
                S += S64
                loglik += loglik64
        else:
            with _one_blas_thread():
                S, loglik, n_bad = _diag_kernel(Xb, keep, *prep.weights)
        if n_bad:
            return _bad_block_stats(C, D, M, params.diag, block_index)
        return _from_tile_sums(S, prep.weights[0], M, loglik, np.count_nonzero(keep))
    shift = np.ascontiguousarray(params.means.reshape(C, D))
    with np.errstate(divide="ignore"):
        log_pi = np.log(params.pi).reshape(C)
    log_alpha = _log_alpha(params.alpha)
    U = params.prec_chol.reshape(C, D, D)
    logdet = np.log(np.diagonal(U, axis1=1, axis2=2)).sum(axis=1)
    weight, sums, scat, counts, loglik, n_bad = _full_kernel(Xb, keep, shift, np.ascontiguousarray(U.reshape(C, D * D)),
                                                             logdet, log_pi, log_alpha, K)
    if n_bad:
        return _bad_block_stats(C, D, M, params.diag, block_index)
    return _from_shifted(weight, sums, scat, shift, counts, loglik, np.count_nonzero(keep))


@dataclass
class _EstepWeights:
    """The diagonal E-step's weights: ``weights`` :func:`_diag_kernel`'s arguments after ``X, keep``
    (:func:`_diag_screen_weights`), ``dense32`` :func:`_diag_kernel32`'s (``o``, ``sq``, ``sm``, ``base`` in
    float32) when float32 rows take it (:func:`_dense_in_float32`), else None, and ``design`` the links' ``(o,
    WT, bsub)`` (:func:`_diag_design_weights`)."""

    weights: tuple
    dense32: tuple | None
    design: tuple


def _estep_weights(params: MixtureParams) -> _EstepWeights:
    """:class:`_EstepWeights` of diagonal ``params``, computed once per parameters object and kept on it: the
    blocks of a task share them, and the driver computes them before a pass (:func:`dclust._dask.gmpr.estep`) so
    that they travel to the workers with the parameters."""
    cached = params.__dict__.get("_estep_weights")
    if cached is None:
        weights = _diag_screen_weights(params)
        o, mu, p, base = weights[:4]
        dense32 = None
        if _dense_in_float32(o, mu, p, base):
            sq, sm = _dense_weights(mu, p)
            f32 = np.float32
            dense32 = (o.astype(f32), sq.astype(f32), sm.astype(f32), base.astype(f32))
        cached = params.__dict__["_estep_weights"] = _EstepWeights(weights, dense32, _diag_design_weights(params))
    return cached


def unlinked_mask(n: int, linked_local: np.ndarray | None) -> np.ndarray:
    """(n,) bool, True for the rows of a block of ``n`` rows that are not in ``linked_local``."""
    keep = np.ones(n, dtype=bool)
    if linked_local is not None and len(linked_local):
        keep[np.asarray(linked_local, dtype=np.intp)] = False
    return keep


def _bad_block_stats(C: int, D: int, M: int, diag: bool, block_index: int) -> GaussianStats:
    out = GaussianStats.identity(C, D, M, diag)
    out.bad_block = int(block_index)
    return out


def _from_tile_sums(S: np.ndarray, o: np.ndarray, n_classes: int, loglik: float, n_rows: int, counts=None
                    ) -> GaussianStats:
    """Diagonal statistics from :func:`_diag_kernel`'s sums ``[Σ r (x − o)², Σ r (x − o), Σ r]`` per component.

    The scatter about the component's mean, ``Σ r (x − o)² − N (mean − o)²``, loses about
    ``(|mean − o| / σ)²`` ulps to cancellation: ``o`` is the mean of the current component means, so this stays
    small unless components lie thousands of their standard deviations from the others. ``counts``: the class
    counts when they are not the weights summed per class (links).
    """
    C = S.shape[0]
    D = (S.shape[1] - 1) // 2
    weight = S[:, 2 * D].copy()
    live = weight > 0
    delta = np.divide(S[:, D:2 * D], weight[:, None], out=np.zeros((C, D)), where=live[:, None])
    mean = np.where(live[:, None], o + delta, 0.0)
    scatter = np.where(live[:, None], np.maximum(S[:, :D] - weight[:, None] * delta * delta, 0.0), 0.0)
    if counts is None:  # unlinked rows: c_m = Σ_n post_m = Σ_k N_mk
        counts = weight.reshape(n_classes, C // n_classes).sum(axis=1)
    return GaussianStats(weight, mean, scatter, counts, float(loglik), n_rows)


def unlinked_partial_numpy(Xb: np.ndarray, params: MixtureParams, linked_local: np.ndarray | None = None, *,
                           block_index: int = 0) -> GaussianStats:
    """Plain-numpy twin of :func:`unlinked_partial` (the test oracle)."""
    Xb = np.asarray(Xb, dtype=np.float64)
    X = Xb[unlinked_mask(Xb.shape[0], linked_local)]
    M, K, D = params.n_classes, params.n_sub, Xb.shape[1]
    if not np.isfinite(X).all():
        return _bad_block_stats(M * K, D, M, params.diag, block_index)
    sub = sub_log_density(X, params)
    log_g = logsumexp(sub, axis=2)
    L = _log_alpha(params.alpha)[None] + log_g
    log_z = logsumexp(L, axis=1)
    post = np.exp(L - log_z[:, None])
    R = _sub_responsibilities(post, sub, log_g)
    return GaussianStats.from_weights(X, R, M, params.diag, class_counts=post.sum(axis=0), loglik=log_z.sum())


@numba.njit(cache=True, nogil=True)
def _lse_row(a, lo, hi):
    mx = -np.inf
    for c in range(lo, hi):
        if a[c] > mx:
            mx = a[c]
    if not np.isfinite(mx):
        mx = 0.0
    acc = 0.0
    for c in range(lo, hi):
        acc += np.exp(a[c] - mx)
    return np.log(acc) + mx


@numba.njit(cache=True, nogil=True)
def _softmax(v):
    """``v ← softmax(v)`` in place; returns ``logsumexp(v)`` (-inf, and NaN entries, when every entry is -inf)."""
    mx = -np.inf
    for m in range(v.shape[0]):
        mx = max(mx, v[m])
    acc = 0.0
    for m in range(v.shape[0]):
        v[m] = np.exp(v[m] - mx)
        acc += v[m]
    for m in range(v.shape[0]):
        v[m] /= acc
    return mx + np.log(acc)


@numba.njit(cache=True, nogil=True)
def _sum_others(e, out):
    """``out[m] = Σ_{h≠m} e[h]`` for every m in O(M): prefix and suffix sums (no cancellation)."""
    run = 0.0
    for m in range(e.shape[0]):
        out[m] = run
        run += e[m]
    run = 0.0
    for m in range(e.shape[0] - 1, -1, -1):
        out[m] += run
        run += e[m]


@numba.njit(cache=True, nogil=True)
def _log_add(a, b):
    """``log(exp(a) + exp(b))`` (-inf when both are)."""
    mx = max(a, b)
    if mx == -np.inf:
        return mx
    return mx + np.log1p(np.exp(min(a, b) - mx))


@numba.njit(cache=True, nogil=True)
def _log_sum_others(e, out):
    """``out[m] = log Σ_{h≠m} exp(e[h])`` for every m in O(M): prefix and suffix log-sums."""
    run = -np.inf
    for m in range(e.shape[0]):
        out[m] = run
        run = _log_add(run, e[m])
    run = -np.inf
    for m in range(e.shape[0] - 1, -1, -1):
        out[m] = _log_add(out[m], run)
        run = _log_add(run, e[m])


@numba.njit(cache=True, nogil=True)
def _endpoint_weights(sub, g, post, n_sub, idx, rs):
    """An endpoint's component weights ``post_m · exp(sub_c − g_m)`` (NaN, from −inf − −inf, and 0 left out):
    ``idx[:k]``, ``rs[:k]``; returns ``k``."""
    k = 0
    for c in range(sub.shape[0]):
        m = c // n_sub
        if n_sub == 1:  # exp(sub - g) is exactly 1 (NaN, taken as 0, when both are -inf)
            w = post[m] if g[m] > -np.inf else 0.0
        else:
            w = post[m] * np.exp(sub[c] - g[m])
        if not w == w or w == 0.0:  # NaN (-inf - -inf) counts as 0, as in _sub_responsibilities
            continue
        idx[k] = c
        rs[k] = w
        k += 1
    return k


@numba.njit(cache=True, nogil=True)
def _link_kernel(Xa, sub_a, Xb, sub_b, must, log_alpha, shift, n_sub):
    """All links in one pass, full covariances: class log-marginals, the pair posterior (``s`` or ``d_a, d_b``),
    counts, the link log-likelihood and the endpoints' weighted sums and scatter about ``shift``.

    O(M) per link: with ``a_m = α_m g_a(m)`` (``b`` likewise) a must-link has ``s ∝ a_m b_m / α_m``; a cannot-link
    has ``Z = Σ_m a_m B_m`` with ``B_m = Σ_{h≠m} b_h`` (prefix and suffix sums, no cancellation), ``d_a(m) =
    a_m B_m / Z`` and ``d_b(h) = b_h A_h / Z``; a cannot-link between two points deep inside one class, whose every
    term underflows, is redone in logs (:func:`_log_sum_others`)."""
    L = Xa.shape[0]
    C, D = shift.shape
    M = C // n_sub
    weight = np.zeros(C)
    sums = np.zeros((C, D))
    scat = np.zeros((C, D * D))
    counts = np.zeros(M)
    loglik = 0.0
    g_a = np.empty(M)
    g_b = np.empty(M)
    pa = np.empty(M)
    pb = np.empty(M)
    ea = np.empty(M)
    eb = np.empty(M)
    ex_a = np.empty(M)
    ex_b = np.empty(M)
    diff = np.empty(D)
    y = np.empty(D)
    ks_a, ks_b = np.zeros(_TILE, np.intp), np.zeros(_TILE, np.intp)
    idx_a, idx_b = np.empty((_TILE, C), np.intp), np.empty((_TILE, C), np.intp)
    rs_a, rs_b = np.empty((_TILE, C)), np.empty((_TILE, C))
    for lo in range(0, L, _TILE):
        hi = min(L, lo + _TILE)
        for l in range(lo, hi):
            for m in range(M):
                if n_sub == 1:  # log-sum-exp of one entry is the entry
                    g_a[m] = sub_a[l, m]
                    g_b[m] = sub_b[l, m]
                else:
                    g_a[m] = _lse_row(sub_a[l], m * n_sub, (m + 1) * n_sub)
                    g_b[m] = _lse_row(sub_b[l], m * n_sub, (m + 1) * n_sub)
            if must[l]:
                for m in range(M):
                    pa[m] = log_alpha[m] + g_a[m] + g_b[m]
                z = _softmax(pa)
                for m in range(M):
                    pb[m] = pa[m]
                    counts[m] += pa[m]
            else:
                mxa = -np.inf
                mxb = -np.inf
                for m in range(M):
                    ea[m] = log_alpha[m] + g_a[m]
                    eb[m] = log_alpha[m] + g_b[m]
                    mxa = max(mxa, ea[m])
                    mxb = max(mxb, eb[m])
                mxa = mxa if np.isfinite(mxa) else 0.0
                mxb = mxb if np.isfinite(mxb) else 0.0
                for m in range(M):
                    ea[m] = np.exp(ea[m] - mxa)
                    eb[m] = np.exp(eb[m] - mxb)
                _sum_others(ea, ex_a)
                _sum_others(eb, ex_b)
                tot = 0.0
                for m in range(M):
                    tot += ea[m] * ex_b[m]
                if tot > 1e-250:  # every term that counts is a normal double
                    z = np.log(tot) + mxa + mxb
                    inv = 1.0 / tot
                    for m in range(M):
                        pa[m] = ea[m] * ex_b[m] * inv
                        pb[m] = eb[m] * ex_a[m] * inv
                else:  # a pair deep inside one class: every a_m B_m underflows; the same in logs
                    for m in range(M):
                        ea[m] = log_alpha[m] + g_a[m]
                        eb[m] = log_alpha[m] + g_b[m]
                    _log_sum_others(ea, ex_a)
                    _log_sum_others(eb, ex_b)
                    for m in range(M):
                        pa[m] = ea[m] + ex_b[m]  # log a_m B_m
                        pb[m] = eb[m] + ex_a[m]  # log b_m A_m
                    z = _softmax(pa)
                    _softmax(pb)
                for m in range(M):
                    counts[m] += pa[m] + pb[m]
            loglik += z
            ks_a[l - lo] = _endpoint_weights(sub_a[l], g_a, pa, n_sub, idx_a[l - lo], rs_a[l - lo])
            ks_b[l - lo] = _endpoint_weights(sub_b[l], g_b, pb, n_sub, idx_b[l - lo], rs_b[l - lo])
        _fold_rows(Xa, lo, ks_a[: hi - lo], idx_a, rs_a, shift, weight, sums, scat, diff, y)
        _fold_rows(Xb, lo, ks_b[: hi - lo], idx_b, rs_b, shift, weight, sums, scat, diff, y)
    return weight, sums, scat, counts, loglik


def _from_shifted(weight, sums, scat, shift, counts, loglik, n_rows) -> GaussianStats:
    """Full-covariance statistics from weights, sums and scatter (C, D * D) accumulated about ``shift`` (the
    current means)."""
    C, D = shift.shape
    safe = np.where(weight > 0, weight, 1.0)
    delta = sums / safe[:, None]
    mean = np.where(weight[:, None] > 0, shift + delta, 0.0)
    scatter = scat.reshape(C, D, D) - weight[:, None, None] * delta[:, :, None] * delta[:, None, :]
    scatter = 0.5 * (scatter + scatter.transpose(0, 2, 1))
    scatter[weight <= 0] = 0.0
    return GaussianStats(weight, mean, scatter, counts, float(loglik), int(n_rows))


def link_partial(Xa: np.ndarray, Xb: np.ndarray, must: np.ndarray, params: MixtureParams) -> GaussianStats:
    """E-step partial of a set of links, given their endpoints' rows.

    Diagonal covariances: BLAS tiles (:func:`_diag_link_kernel`: densities and the fold of
    the endpoints' weights by two matrix products per tile, vectorised exps); full: the endpoints' densities
    (:func:`sub_log_density`) and one numba pass (:func:`_link_kernel`). Equal to :func:`link_partial_numpy` up
    to rounding; parameters and return value as there.
    """
    M, K = params.n_classes, params.n_sub
    D = params.means.shape[2]
    must = np.asarray(must, dtype=bool)
    L = must.shape[0]
    if L == 0:
        return GaussianStats.identity(M * K, D, M, params.diag)
    f64 = lambda a, shape: np.ascontiguousarray(np.asarray(a, dtype=np.float64).reshape(shape))  # noqa: E731
    Xa, Xb = f64(Xa, (L, D)), f64(Xb, (L, D))
    if params.diag:
        o, WT, bsub = _estep_weights(params).design
        order = np.concatenate([np.flatnonzero(must), np.flatnonzero(~must)])
        with _one_blas_thread():
            S, counts, loglik = _diag_link_kernel(Xa, Xb, order, int(must.sum()), o, WT, bsub,
                                                  _log_alpha(params.alpha), K)
        return _from_tile_sums(S, o, M, loglik, 2 * L, counts)
    shift = np.ascontiguousarray(params.means.reshape(M * K, D))
    sub = sub_log_density(np.concatenate([Xa, Xb]), params).reshape(2 * L, M * K)
    weight, sums, scat, counts, loglik = _link_kernel(
        Xa, np.ascontiguousarray(sub[:L]), Xb, np.ascontiguousarray(sub[L:]), must, _log_alpha(params.alpha), shift,
        K)
    return _from_shifted(weight, sums, scat, shift, counts, loglik, 2 * L)


def link_partial_numpy(Xa: np.ndarray, Xb: np.ndarray, must: np.ndarray, params: MixtureParams) -> GaussianStats:
    """E-step partial of a set of links, given their endpoints' rows (plain numpy, the test oracle of
    :func:`link_partial`).

    Parameters
    ----------
    Xa, Xb : (L, D) arrays
        Rows of the first and second endpoint of every link.
    must : (L,) bool array
        True for a must-link, False for a cannot-link.
    params : MixtureParams

    Returns
    -------
    GaussianStats
        Endpoint statistics (each endpoint weighted by its link posterior), ``c_m`` (must-link posterior once,
        cannot-link ``d_a + d_b``) and the link log-likelihood terms (cannot-link normaliser excluded).
    """
    M, K = params.n_classes, params.n_sub
    D = params.means.shape[2]
    must = np.asarray(must, dtype=bool)
    Xa, Xb = np.asarray(Xa, dtype=np.float64).reshape(-1, D), np.asarray(Xb, dtype=np.float64).reshape(-1, D)
    sub_a, sub_b = sub_log_density(Xa, params), sub_log_density(Xb, params)
    log_a = _log_alpha(params.alpha)
    rows, weights = [], []
    counts = np.zeros(M)
    loglik = 0.0
    g_a, g_b = _lse(sub_a, axis=2), _lse(sub_b, axis=2)
    ml, cl = must, ~must
    if ml.any():
        S = log_a[None] + g_a[ml] + g_b[ml]
        log_z = _lse(S, axis=1)
        s = np.exp(S - log_z[:, None])
        counts += s.sum(axis=0)
        loglik += float(log_z.sum())
        rows += [Xa[ml], Xb[ml]]
        weights += [_sub_responsibilities(s, sub_a[ml], g_a[ml]), _sub_responsibilities(s, sub_b[ml], g_b[ml])]
    if cl.any():
        La = log_a[None] + g_a[cl]
        Lb = log_a[None] + g_b[cl]
        P = La[:, :, None] + Lb[:, None, :]
        P[:, np.arange(M), np.arange(M)] = -np.inf
        log_z = _lse(P.reshape(P.shape[0], M * M), axis=1)
        post = np.exp(P - log_z[:, None, None])
        d_a, d_b = post.sum(axis=2), post.sum(axis=1)
        counts += d_a.sum(axis=0) + d_b.sum(axis=0)
        loglik += float(log_z.sum())
        rows += [Xa[cl], Xb[cl]]
        weights += [_sub_responsibilities(d_a, sub_a[cl], g_a[cl]), _sub_responsibilities(d_b, sub_b[cl], g_b[cl])]
    if not rows:
        return GaussianStats.identity(M * K, D, M, params.diag)
    return GaussianStats.from_weights(np.concatenate(rows), np.concatenate(weights), M, params.diag,
                                      class_counts=counts, loglik=loglik)


def class_posteriors(sub: np.ndarray, params: MixtureParams) -> np.ndarray:
    """Class posterior of unlinked rows from their sub-cluster log-densities (n, M, K): softmax of ``L_n(m)``."""
    L = _log_alpha(params.alpha)[None] + _lse(sub, axis=2)
    return np.exp(L - _lse(L, axis=1)[:, None])


def pair_posteriors(sub_a: np.ndarray, sub_b: np.ndarray, must: np.ndarray, params: MixtureParams):
    """Class posteriors of both endpoints of links: ``s`` for must-links, ``(d_a, d_b)`` for cannot-links."""
    log_a = _log_alpha(params.alpha)
    La = log_a[None] + _lse(sub_a, axis=2)
    Lb = log_a[None] + _lse(sub_b, axis=2)
    M = params.n_classes
    out_a, out_b = np.empty_like(La), np.empty_like(Lb)
    must = np.asarray(must, dtype=bool)
    S = La[must] + _lse(sub_b[must], axis=2)
    s = np.exp(S - _lse(S, axis=1)[:, None])
    out_a[must], out_b[must] = s, s
    P = La[~must][:, :, None] + Lb[~must][:, None, :]
    P[:, np.arange(M), np.arange(M)] = -np.inf
    post = np.exp(P - _lse(P.reshape(P.shape[0], M * M), axis=1)[:, None, None])
    out_a[~must], out_b[~must] = post.sum(axis=2), post.sum(axis=1)
    return out_a, out_b


# ----------------------------------------------------------------------------------------------------------------
# M-step


def m_step(stats: GaussianStats, params: MixtureParams, reg_covar: float) -> tuple[MixtureParams, np.ndarray]:
    """New ``π``, ``μ``, ``Σ`` from merged statistics (α is left to :func:`update_alpha`).

    Components with no weight keep their mean and covariance. Returns the new parameters and the (C,) weights
    ``N_mk`` (the caller warns about components lighter than ``D + 1``).
    """
    M, K = params.n_classes, params.n_sub
    D = params.means.shape[2]
    N = stats.weight.reshape(M, K)
    class_n = N.sum(axis=1, keepdims=True)
    pi = np.where(class_n > 0, N / np.where(class_n > 0, class_n, 1.0), params.pi)
    means = params.means.copy()
    cov = params.covariances.copy()
    live = N > 0
    safe = np.where(live, N, 1.0)
    means[live] = stats.mean.reshape(M, K, D)[live]
    if params.diag:
        new_cov = stats.scatter.reshape(M, K, D) / safe[:, :, None] + reg_covar
    else:
        new_cov = stats.scatter.reshape(M, K, D, D) / safe[:, :, None, None] + reg_covar * np.eye(D)
    cov[live] = new_cov[live]
    return MixtureParams.build(params.alpha, pi, means, cov), stats.weight


def alpha_objective(alpha: np.ndarray, counts: np.ndarray, n_cannot: int) -> float:
    """``F(α) = Σ c_m log α_m − |CL| log(1 − Σ α_m²)`` (−inf outside the feasible set)."""
    alpha = np.asarray(alpha, dtype=np.float64)
    if (alpha <= 0).any():
        return -np.inf
    out = float((counts * np.log(alpha)).sum())
    if n_cannot:
        rest = 1.0 - float((alpha * alpha).sum())
        if rest <= 0:
            return -np.inf
        out -= n_cannot * np.log(rest)
    return out


def _project(alpha: np.ndarray) -> np.ndarray:
    a = np.clip(np.asarray(alpha, dtype=np.float64), ALPHA_FLOOR, 1.0)
    return a / a.sum()


def update_alpha(counts: np.ndarray, n_cannot: int, alpha_old: np.ndarray) -> tuple[np.ndarray, bool]:
    """Class weights maximising :func:`alpha_objective` (docs/algorithms.md 6.4, E-GP4), with GEM acceptance.

    Two classes: the closed form ``α_1 = (c_1 − |CL|) / (c_1 + c_2 − 2|CL|)``. Otherwise the local maximum
    reached from ``α⁰ = c / Σc``: Newton on the Lagrange conditions (:func:`_newton_alpha`), SLSQP where that
    declines. The new weights are kept only if ``F(α_new) ≥ F(α_old)``.

    Returns
    -------
    alpha : (M,) array
    accepted : bool
        False when the old weights were kept.
    """
    counts = np.asarray(counts, dtype=np.float64)
    M = counts.shape[0]
    if M == 1:
        return np.ones(1), True
    if n_cannot == 0:
        cand = _project(counts / counts.sum()) if counts.sum() > 0 else alpha_old
    elif M == 2:
        den = counts.sum() - 2.0 * n_cannot
        if den <= 0:
            return alpha_old, False
        a1 = (counts[0] - n_cannot) / den
        cand = _project(np.array([a1, 1.0 - a1]))
    else:
        cand = _newton_alpha(counts, n_cannot)
        if cand is None:
            cand = _slsqp_alpha(counts, n_cannot)
    f_old = alpha_objective(alpha_old, counts, n_cannot)
    if alpha_objective(cand, counts, n_cannot) >= f_old:
        return cand, True
    return alpha_old, False


def _newton_alpha(counts: np.ndarray, n_cannot: int, max_iter: int = 60) -> np.ndarray | None:
    """The stationary point of :func:`alpha_objective` on the simplex that SLSQP (:func:`_slsqp_alpha`) converges
    to from the same start ``c / Σc``, by Newton's method on its Lagrange conditions ``c_m / α_m + s α_m = λ``,
    ``Σ α = 1`` (``s = 2|CL| / (1 − Σα²)``): an (M + 1)-square solve per step, damped to stay feasible, so O(M³)
    and well under a millisecond where SLSQP took up to a second at M = 64. None (the caller uses SLSQP) when a
    count is not positive, Newton does not converge, or the point is not a local maximum above the start."""
    if not (counts > 0).all():
        return None
    M = counts.size
    a = _project(counts / counts.sum())
    f_start = alpha_objective(a, counts, n_cannot)
    K = np.zeros((M + 1, M + 1))
    K[:M, M] = -1.0
    K[M, :M] = 1.0
    rhs = np.empty(M + 1)
    rest = 1.0 - float(a @ a)
    lam = float(np.mean(counts / a + 2.0 * n_cannot / rest * a))
    for _ in range(max_iter):
        s = 2.0 * n_cannot / rest
        rhs[:M] = -(counts / a + s * a - lam)
        rhs[M] = -(a.sum() - 1.0)
        K[:M, :M] = np.outer(a, (2.0 * s / rest) * a)
        K[np.arange(M), np.arange(M)] += s - counts / (a * a)
        try:
            step = np.linalg.solve(K, rhs)
        except np.linalg.LinAlgError:
            return None
        t = 1.0
        while True:  # damped: positive weights, Σα² < 1
            cand = a + t * step[:M]
            if (cand > 0).all() and float(cand @ cand) < 1.0:
                break
            t *= 0.5
            if t < 1e-12:
                return None
        a, lam = cand, lam + t * step[M]
        rest = 1.0 - float(a @ a)
        if t == 1.0 and np.abs(step[:M]).max() <= 1e-15 * np.abs(a).max():
            break
    else:
        return None
    # a local maximum on the simplex: the Lagrangian's Hessian negative definite on {Σ d = 0}
    s = 2.0 * n_cannot / rest
    H = np.outer(a, (2.0 * s / rest) * a)
    H[np.arange(M), np.arange(M)] += s - counts / (a * a)
    Z = np.eye(M)[:, :-1] - np.eye(M)[:, -1:]  # a basis of {Σ d = 0}
    if (a < ALPHA_FLOOR).any() or np.linalg.eigvalsh(Z.T @ H @ Z).max() >= 0:
        return None
    a = _project(a)
    return a if alpha_objective(a, counts, n_cannot) >= f_start else None


def _slsqp_alpha(counts: np.ndarray, n_cannot: int) -> np.ndarray:
    from scipy.optimize import minimize

    start = _project(counts / counts.sum()) if counts.sum() > 0 else np.full(counts.size, 1.0 / counts.size)

    def neg(a):
        val = alpha_objective(a, counts, n_cannot)
        return 1e300 if not np.isfinite(val) else -val

    def grad(a):
        a = np.maximum(a, ALPHA_FLOOR)
        rest = max(1.0 - float((a * a).sum()), 1e-300)
        return -(counts / a + n_cannot * 2.0 * a / rest)

    res = minimize(neg, start, jac=grad, method="SLSQP", bounds=[(ALPHA_FLOOR, 1.0)] * counts.size,
                   constraints=[{"type": "eq", "fun": lambda a: a.sum() - 1.0, "jac": lambda a: np.ones_like(a)}],
                   options={"maxiter": 200, "ftol": 1e-14})
    cand = _project(res.x)
    if alpha_objective(cand, counts, n_cannot) >= alpha_objective(start, counts, n_cannot):
        return cand
    return start


# ----------------------------------------------------------------------------------------------------------------
# plain-numpy oracle


def estep_reference(X, i, j, must, params: MixtureParams) -> tuple[GaussianStats, float]:
    """The whole E-step in memory (the test oracle): statistics and ``ℓ(ϑ)`` of docs/algorithms.md 6.2.

    ``i, j`` are global row indices of the links and ``must`` their types. Accumulates per point and per link in
    one pass, without blocks, so it checks the blocked/tree-reduced computation.
    """
    X = np.asarray(X, dtype=np.float64)
    i, j, must = np.asarray(i, dtype=np.intp), np.asarray(j, dtype=np.intp), np.asarray(must, dtype=bool)
    n, D = X.shape
    M, K = params.n_classes, params.n_sub
    sub = sub_log_density(X, params)
    log_g = logsumexp(sub, axis=2)
    log_a = _log_alpha(params.alpha)
    linked = np.zeros(n, dtype=bool)
    linked[i] = linked[j] = True
    W = np.zeros((n, M * K))
    counts = np.zeros(M)
    ll = 0.0
    for r in np.flatnonzero(~linked):
        L = log_a + log_g[r]
        z = logsumexp(L)
        post = np.exp(L - z)
        W[r] += (post[:, None] * np.exp(sub[r] - log_g[r][:, None])).ravel()
        counts += post
        ll += z
    n_cannot = 0
    for a, b, ml in zip(i, j, must):
        if ml:
            S = log_a + log_g[a] + log_g[b]
            z = logsumexp(S)
            pa = pb = np.exp(S - z)
            counts += pa
        else:
            n_cannot += 1
            P = (log_a + log_g[a])[:, None] + (log_a + log_g[b])[None, :]
            np.fill_diagonal(P, -np.inf)
            z = logsumexp(P)
            post = np.exp(P - z)
            pa, pb = post.sum(axis=1), post.sum(axis=0)
            counts += pa + pb
        ll += z
        W[a] += (pa[:, None] * np.exp(sub[a] - log_g[a][:, None])).ravel()
        W[b] += (pb[:, None] * np.exp(sub[b] - log_g[b][:, None])).ravel()
    stats = GaussianStats.from_weights(X, W, M, params.diag, class_counts=counts, loglik=ll)
    if n_cannot:
        ll -= n_cannot * np.log(1.0 - float((params.alpha ** 2).sum()))
    return stats, float(ll)
