"""dclust.kernels.simd.wide_vectors: the function attribute reaches LLVM, the loops widen where the CPU allows, and
the results do not change."""

import llvmlite.binding as llvm
import numba
import numpy as np
import pytest

from dclust.kernels.simd import transpose_rows, wide_vectors


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


#: LLVM's names of the Intel CPUs with AVX-512 whose tuning prefers 256-bit vectors (``TuningPrefer256Bit``); AMD's
#: Zen 4 (``znver4``) prefers 512 bits already.
_PREFER_256 = ("skylake-avx512", "cascadelake", "cooperlake", "cannonlake", "icelake", "tigerlake", "rocketlake",
               "sapphirerapids", "emeraldrapids", "graniterapids")


@pytest.mark.skipif("+avx512f" not in llvm.get_host_cpu_features().flatten(),
                    reason="the host has no AVX-512: 256 bits are its widest vectors, so there is nothing to widen")
def test_loops_use_512_bit_registers_on_an_avx512_host():
    """With the attribute a loop uses 512-bit registers on every AVX-512 host. Without it the host's tuning
    decides: 256 bits on Intel's AVX-512 CPUs (where the attribute is what widens the loops), 512 on Zen 4."""
    wide, _ = _compiled(True)
    plain, _ = _compiled(False)
    assert "zmm" in next(iter(wide.inspect_asm().values()))
    if llvm.get_host_cpu_name().startswith(_PREFER_256):
        assert "zmm" not in next(iter(plain.inspect_asm().values()))


def test_results_are_unchanged():
    (_, a), (_, b) = _compiled(True), _compiled(False)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, 1.0 + 2.0 * np.arange(1000.0))


@numba.njit
def _transposed(X, idx, m, o, U):
    transpose_rows(X, idx, m, o, U)


@pytest.mark.parametrize("x_dtype, u_dtype", [(np.float32, np.float32), (np.float32, np.float64),
                                              (np.float64, np.float64)])
@pytest.mark.parametrize("d", [1, 3, 4, 8, 11, 12, 16, 21])
def test_transpose_rows_is_the_plain_loop_bit_for_bit(x_dtype, u_dtype, d):
    rng = np.random.default_rng(d)
    X = (rng.normal(size=(300, d)) * 1e3 + 7.0).astype(x_dtype)
    o = rng.normal(size=d).astype(u_dtype)
    for idx, m in ((np.arange(40, 140), 100), (np.sort(rng.choice(300, 61, replace=False)), 61), (np.arange(5), 5)):
        U = np.full((d + 2, m + 3), -1.0, dtype=u_dtype)
        _transposed(X, idx.astype(np.intp), m, o, U)
        expected = X[idx[:m]].astype(u_dtype) - o  # numpy rounds the difference in u_dtype, as the loop does
        np.testing.assert_array_equal(U[:d, :m], expected.T)
        assert (U[d:] == -1).all() and (U[:, m:] == -1).all()  # nothing written outside the D x m corner


def test_transpose_rows_refuses_a_narrowing_conversion():
    X, U = np.zeros((8, 8)), np.zeros((8, 8), np.float32)
    with pytest.raises(numba.core.errors.TypingError):
        _transposed(X, np.arange(8), 8, np.zeros(8, np.float32), U)
