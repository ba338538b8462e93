"""dclust.kernels.simd.wide_vectors: the function attribute reaches LLVM, the loops widen where the CPU allows, and
the results do not change."""

import llvmlite.binding as llvm
import numba
import numpy as np
import pytest

from dclust.kernels.simd import wide_vectors


def _saxpy(wide: bool):
    @numba.njit(fastmath={"contract"})
    def f(y, a, x):
        if wide:
            wide_vectors()
        for i in range(y.size):
            y[i] += a * x[i]

    return f


def _compiled(wide: bool):
    f = _saxpy(wide)
    y, x = np.ones(1000), np.arange(1000.0)
    f(y, 2.0, x)
    return f, y


def test_the_attribute_is_in_the_functions_ir_and_only_there():
    wide, _ = _compiled(True)
    plain, _ = _compiled(False)
    assert '"prefer-vector-width"="512"' in next(iter(wide.inspect_llvm().values()))
    assert "prefer-vector-width" not in next(iter(plain.inspect_llvm().values()))


@pytest.mark.skipif("+avx512f" not in llvm.get_host_cpu_features().flatten(),
                    reason="the host has no AVX-512: 256 bits are its widest vectors, so there is nothing to widen")
def test_loops_use_512_bit_registers_on_an_avx512_host():
    wide, _ = _compiled(True)
    plain, _ = _compiled(False)
    assert "zmm" in next(iter(wide.inspect_asm().values()))
    assert "zmm" not in next(iter(plain.inspect_asm().values()))


def test_results_are_unchanged():
    (_, a), (_, b) = _compiled(True), _compiled(False)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, 1.0 + 2.0 * np.arange(1000.0))
