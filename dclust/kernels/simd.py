"""Vector width of the numba kernels, and a transpose in registers.

LLVM tunes for 256-bit vectors on Intel's CPUs with AVX-512 (``prefer-256-bit``; AMD's Zen 4 prefers 512 bits
already): its loop vectorizer then leaves half of every 512-bit register unused, even in a loop that only multiplies
and adds float64 values, while the BLAS that scikit-learn and a k-means pass call does use them.
:func:`wide_vectors`, called first in a jitted function, lets LLVM vectorize that function's loops at 512 bits (the
function attribute ``"prefer-vector-width"="512"``, clang's ``-mprefer-vector-width=512``). It changes nothing else:
on a CPU without AVX-512 the widest legal vectors stay 256 bits, other functions keep the default, and no
process-wide setting (``NUMBA_CPU_FEATURES``) is touched.

A loop whose sum is reassociated (``fastmath`` with ``reassoc``) adds its terms in a different order at another
width: results move at the level of rounding, the same on every machine of one kind.

:func:`transpose_rows` puts a tile of row-major rows, centered, into feature-major order (the layout of the
k-means and GM-PR tiles, whose loops then run over contiguous rows): eight rows by eight (or four) features at a
time are loaded as vectors and transposed in registers (:func:`transpose8`, :func:`transpose4`), where a plain loop
reads and stores one value at a time.
"""

from __future__ import annotations

import numba
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = ["transpose4", "transpose8", "transpose_rows", "wide_vectors"]

_ATTRIBUTE = '"prefer-vector-width"="512"'


@intrinsic
def wide_vectors(typingctx):
    """Let LLVM vectorize the calling jitted function's loops with 512-bit vectors where the CPU has them.

    Call it once, first, in the function whose loops should widen; an ``inline="always"`` function's loops
    belong to its caller, which must call it. It adds no instruction.

    Examples
    --------
    >>> import numba, numpy as np
    >>> from dclust.kernels.simd import wide_vectors
    >>> @numba.njit
    ... def scale(x, a):
    ...     wide_vectors()
    ...     for i in range(x.size):
    ...         x[i] *= a
    >>> x = np.arange(4.0)
    >>> scale(x, 2.0)
    >>> x.tolist()
    [0.0, 2.0, 4.0, 6.0]
    """

    def codegen(context, builder, signature, args):
        # llvmlite's FunctionAttributes accepts only keyword attributes; a string attribute such as this one is
        # written into the IR as it is (``define ... "prefer-vector-width"="512" {``), which LLVM reads per
        # function when it chooses the subtarget.
        set.add(builder.function.attributes, _ATTRIBUTE)
        return context.get_dummy_value()

    return types.void(), codegen


def _shuffle_mask(w, high):
    """The lanes of one step of an 8-lane transpose: vectors ``b`` and ``b + w`` (``b & w == 0``) exchange their
    blocks of ``w`` lanes; vector ``b`` (``high`` False) keeps its blocks whose lane has bit ``w`` clear and takes
    vector ``b + w``'s blocks before them, vector ``b + w`` the reverse (lanes 8-15 are the second vector's)."""
    if high:
        return [k + w if not k & w else k + 8 for k in range(8)]
    return [k if not k & w else k - w + 8 for k in range(8)]


def _lanes(lanes):
    """An LLVM shuffle mask: the constant vector of the lanes ``lanes`` (int32)."""
    return ir.Constant(ir.VectorType(ir.IntType(32), len(lanes)), lanes)


_FLOATS = (types.float32, types.float64)


def _transposer(W):
    """The intrinsic ``transpose<W>(X, idx, j, f, o, U)`` (``W`` = 8 or 4): ``U[f + a, j + b] = X[idx[j + b],
    f + a] − o[f + a]`` for ``a < W``, ``b < 8``, in ``U``'s dtype. Eight rows loaded as vectors of ``W`` features,
    converted to ``U``'s dtype (float32 to float64, or none) and centered; for ``W = 4`` rows ``b`` and ``b + 4``
    are joined into one vector of 8; then transposed in registers (steps of two-vector shuffles: lanes of bit ``w``
    exchanged between vectors ``w`` apart, for ``w < W``) and stored as ``W`` vectors of ``U``'s rows. The same
    values as the loop ``U[f, j] = X[idx[j], f] − o[f]`` with ``o`` of ``U``'s dtype, which reads a feature at a
    time and stores it alone. ``X``, ``o`` and ``U`` C-contiguous; ``X`` float32 or of ``U``'s dtype, ``o`` of
    ``U``'s dtype; nothing is bounds-checked (``f + W <= D``, ``j + 8 <= len(idx)``)."""

    def transpose(typingctx, X, idx, j, f, o, U):
        arrays = (X, o, U)
        if not (all(isinstance(a, types.Array) and a.layout == "C" and a.dtype in _FLOATS for a in arrays)
                and X.ndim == U.ndim == 2 and o.ndim == 1 and o.dtype == U.dtype
                and X.dtype in (types.float32, U.dtype) and j == types.intp and f == types.intp):
            return None

        def codegen(context, builder, sig, args):
            Xt, It, _, _, Ot, Ut = sig.args
            x, ix, jv, fv, ov, uv = (context.make_array(t)(context, builder, v) if isinstance(t, types.Array)
                                     else v for t, v in zip(sig.args, args))
            ut = context.get_value_type(Ut.dtype)
            uw, u8, xw = ir.VectorType(ut, W), ir.VectorType(ut, 8), ir.VectorType(context.get_value_type(Xt.dtype), W)
            ualign = Ut.dtype.bitwidth // 8
            lane = context.get_value_type(types.intp)
            center = builder.load(builder.bitcast(cgutils.get_item_pointer(context, builder, Ot, ov, [fv]),
                                                  uw.as_pointer()), align=ualign)
            rows = []
            for b in range(8):
                ib = cgutils.get_item_pointer(context, builder, It, ix, [builder.add(jv, ir.Constant(lane, b))])
                xp = cgutils.get_item_pointer(context, builder, Xt, x, [builder.load(ib), fv])
                v = builder.load(builder.bitcast(xp, xw.as_pointer()), align=Xt.dtype.bitwidth // 8)
                rows.append(builder.fsub(v if Xt.dtype == Ut.dtype else builder.fpext(v, uw), center))
            if W == 4:
                rows = [builder.shuffle_vector(rows[b], rows[b + 4], _lanes(list(range(8)))) for b in range(4)]
            w = 1
            while w < W:
                for b in range(W):
                    if not b & w:
                        p, q = rows[b], rows[b + w]
                        rows[b], rows[b + w] = (builder.shuffle_vector(p, q, _lanes(_shuffle_mask(w, h)))
                                                for h in (False, True))
                w *= 2
            for a in range(W):
                ptr = cgutils.get_item_pointer(context, builder, Ut, uv, [builder.add(fv, ir.Constant(lane, a)), jv])
                builder.store(rows[a], builder.bitcast(ptr, u8.as_pointer()), align=ualign)
            return context.get_dummy_value()

        return types.void(X, idx, j, f, o, U), codegen

    transpose.__name__ = transpose.__qualname__ = f"transpose{W}"
    return intrinsic(transpose)


transpose8 = _transposer(8)
transpose4 = _transposer(4)


@numba.njit(inline="always")
def transpose_rows(X, idx, m, o, U):
    """``U[f, j] = X[idx[j], f] − o[f]`` for the first ``m`` rows listed in ``idx`` and every feature ``f`` of
    ``X``, in ``U``'s dtype (``o``'s; ``X`` float32 or of that dtype): blocks of eight rows by eight, then four,
    features transposed in registers (:func:`transpose8`, :func:`transpose4`), the other features and rows one
    value at a time. Bit for bit the plain loop's values.

    Examples
    --------
    >>> import numba, numpy as np
    >>> from dclust.kernels.simd import transpose_rows
    >>> X = np.arange(40.0, dtype=np.float32).reshape(10, 4)
    >>> U = np.zeros((4, 10))
    >>> numba.njit(lambda X, U: transpose_rows(X, np.arange(10), 10, np.ones(4), U))(X, U)
    >>> bool((U == (X - 1.0).T).all())
    True
    """
    D = X.shape[1]
    m8, D8, D4 = m - m % 8, D - D % 8, D - D % 4
    for j in range(0, m8, 8):
        for f in range(0, D8, 8):
            transpose8(X, idx, j, f, o, U)
        if D4 > D8:
            transpose4(X, idx, j, D8, o, U)
    for f in range(D):
        u = U[f]
        of = o[f]
        for j in range(0 if f >= D4 else m8, m):
            u[j] = X[idx[j], f] - of
