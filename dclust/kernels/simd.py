"""Vector width of the numba kernels.

LLVM tunes for 256-bit vectors on CPUs with AVX-512 (``prefer-256-bit``): its loop vectoriser then leaves half of
every 512-bit register unused, even in a loop that only multiplies and adds float64 values, while the BLAS that
scikit-learn and a k-means pass call does use them. :func:`wide_vectors`, called first in a jitted function,
lets LLVM vectorise that function's loops at 512 bits (the function attribute ``"prefer-vector-width"="512"``,
clang's ``-mprefer-vector-width=512``). It changes nothing else: on a CPU without AVX-512 the widest legal vectors
stay 256 bits, other functions keep the default, and no process-wide setting (``NUMBA_CPU_FEATURES``) is touched.

A loop whose sum is reassociated (``fastmath`` with ``reassoc``) adds its terms in a different order at another
width: results move at the level of rounding, the same on every machine of one kind.
"""

from __future__ import annotations

from numba import types
from numba.extending import intrinsic

__all__ = ["wide_vectors"]

_ATTRIBUTE = '"prefer-vector-width"="512"'


@intrinsic
def wide_vectors(typingctx):
    """Let LLVM vectorise the calling jitted function's loops with 512-bit vectors where the CPU has them.

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
