"""``C += A·B`` in one BLAS call on a CPU (hpcmm.execution.host_blas), against numpy in float64."""

import ctypes

import ml_dtypes
import numpy as np
import pytest
import threadpoolctl

from hpcmm.execution import backend as backend_module
from hpcmm.execution import host_blas
from hpcmm.execution.backend import CpuBackend

OPENBLAS = any(info.get("internal_api") == "openblas" for info in threadpoolctl.threadpool_info())
needs_openblas = pytest.mark.skipif(not OPENBLAS, reason="numpy's BLAS is not OpenBLAS here")


def _operands(dtype, a_order, b_order, m=33, n=29, k=41, seed=3):
    """Random views with leading dimensions past their extents: A and B in the given orders, C row-major."""
    rng = np.random.default_rng(seed)
    a = np.array(rng.standard_normal((m + 7, k + 5)), dtype=dtype, order=a_order)[:m, :k]
    b = np.array(rng.standard_normal((k + 3, n + 11)), dtype=dtype, order=b_order)[:k, :n]
    whole = rng.standard_normal((m, n + 6)).astype(dtype)
    return a, b, whole


@needs_openblas
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("a_order", ["C", "F"])
@pytest.mark.parametrize("b_order", ["C", "F"])
def test_accumulate_adds_the_product_into_a_padded_row_major_c(dtype, a_order, b_order):
    a, b, whole = _operands(dtype, a_order, b_order)
    before = whole.copy()
    c = whole[:, :29]
    assert host_blas.accumulate(a, b, c)
    expected = before[:, :29].astype(np.float64) + a.astype(np.float64) @ b.astype(np.float64)
    tolerance = 1e-4 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(c, expected, rtol=tolerance, atol=tolerance)
    np.testing.assert_array_equal(whole[:, 29:], before[:, 29:])  # the padding is not written


@needs_openblas
@pytest.mark.parametrize("shape", [(1, 5, 4), (4, 5, 1), (4, 1, 6), (1, 1, 1)])
def test_accumulate_takes_operands_of_one_row_or_column(shape):
    m, k, n = shape
    rng = np.random.default_rng(5)
    a = np.asfortranarray(rng.standard_normal((m, k)))
    b = rng.standard_normal((k, n))
    c = rng.standard_normal((m, n))
    expected = c + a @ b
    assert host_blas.accumulate(a, b, c)
    np.testing.assert_allclose(c, expected, rtol=1e-12, atol=1e-12)


@needs_openblas
def test_accumulate_over_no_k_leaves_c_as_it_was():
    c = np.arange(6.0).reshape(2, 3)
    assert host_blas.accumulate(np.empty((2, 0)), np.empty((0, 3)), c)
    np.testing.assert_array_equal(c, np.arange(6.0).reshape(2, 3))


@pytest.mark.parametrize("case", ["float16", "bfloat16", "mixed types", "strided c", "strided a", "read-only c"])
def test_accumulate_refuses_what_blas_cannot_take_and_leaves_c(case):
    rng = np.random.default_rng(9)
    dtype = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}.get(case, np.float64)
    a = rng.standard_normal((6, 4)).astype(dtype)
    b = rng.standard_normal((4, 5)).astype(np.float32 if case == "mixed types" else dtype)
    c = rng.standard_normal((6, 10)).astype(dtype)
    if case == "strided c":
        c = c[:, ::2]  # neither stride is one element
    if case == "strided a":
        a = rng.standard_normal((6, 8))[:, ::2]
    if case == "read-only c":
        c = c[:, :5]
        c.flags.writeable = False
    before = c.copy()
    assert not host_blas.accumulate(a, b, c)
    np.testing.assert_array_equal(c, before)


@pytest.mark.parametrize("in_blas", [1, 0])
@pytest.mark.parametrize("dtype", [np.float64, np.float32, ml_dtypes.bfloat16])
def test_the_cpu_backend_accumulates_the_same_either_way(monkeypatch, in_blas, dtype):
    monkeypatch.setattr(backend_module, "ACCUMULATE_IN_BLAS", in_blas)
    a, b, whole = _operands(dtype, "F", "C")
    before = whole.astype(np.float64)
    c = whole[:, :29]
    backend = CpuBackend()
    backend.gemm(a, b, c, accumulate=True)
    backend.gemm(a, b, c, accumulate=True)
    expected = before[:, :29] + 2 * (a.astype(np.float64) @ b.astype(np.float64))
    tolerance = {np.float64: 1e-12, np.float32: 1e-4}.get(dtype, 0.25)
    np.testing.assert_allclose(c.astype(np.float64), expected, rtol=tolerance, atol=tolerance)
    np.testing.assert_array_equal(whole[:, 29:].astype(np.float64), before[:, 29:])


class _BrokenGemm:
    """A stand-in for a cblas_?gemm read with the wrong convention: it returns and writes nothing."""

    def __call__(self, *args):
        return None


def test_a_library_that_gives_other_numbers_is_not_used():
    blas = object.__new__(host_blas._OpenBlas)
    blas.limit = np.iinfo(np.int64).max
    blas.gemms = {np.dtype(np.float64): _BrokenGemm()}
    assert not host_blas._agrees(blas)


def test_a_host_whose_blas_is_not_openblas_adds_through_numpy(monkeypatch):
    monkeypatch.setattr(threadpoolctl, "threadpool_info",
                        lambda: [{"user_api": "blas", "internal_api": "mkl", "filepath": "/nowhere/libmkl_rt.so"}])
    host_blas._blas.cache_clear()
    try:
        assert not host_blas.available()
        c = np.ones((2, 2))
        assert not host_blas.accumulate(np.ones((2, 3)), np.ones((3, 2)), c)
        np.testing.assert_array_equal(c, np.ones((2, 2)))
    finally:
        host_blas._blas.cache_clear()


def test_a_library_without_the_symbols_is_passed_over(monkeypatch):
    monkeypatch.setattr(threadpoolctl, "threadpool_info",
                        lambda: [{"user_api": "blas", "internal_api": "openblas", "filepath": None}])
    monkeypatch.setattr(ctypes, "CDLL", lambda path: object())  # a library that exports nothing
    host_blas._blas.cache_clear()
    try:
        assert not host_blas.available()
    finally:
        host_blas._blas.cache_clear()


@needs_openblas
def test_numpys_openblas_is_found_and_agrees():
    host_blas._blas.cache_clear()
    assert host_blas.available()
