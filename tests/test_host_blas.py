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


def _plain(text: str) -> str:
    """A test id without spaces or commas (mutmut passes ids on a command line)."""
    return text.replace(", ", "-").replace(" ", "-")


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


@pytest.mark.parametrize("case", ["float16", "bfloat16", "mixed types", "strided c", "strided a", "read-only c",
                                  "a of two columns, both strides past one", "a of two rows, both strides past one",
                                  "a whose columns lie far apart", "c whose rows overlap"], ids=_plain)
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
    if case == "a of two columns, both strides past one":
        a, b = rng.standard_normal((6, 4))[:, ::2], rng.standard_normal((2, 5))
    if case == "a of two rows, both strides past one":
        a, c = rng.standard_normal((4, 8))[::2, ::2], rng.standard_normal((2, 5))
    if case == "a whose columns lie far apart":  # neither stride one; the columns' stride would pass for a lead
        a = rng.standard_normal((3, 16))[:, ::4]
        c = rng.standard_normal((3, 5))
    if case == "c whose rows overlap":
        c = np.lib.stride_tricks.as_strided(rng.standard_normal(40), (6, 5), (16, 8))
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


def _misaligned(shape, dtype=np.float64):
    """A writable array of ``shape`` whose data starts one byte past an element boundary."""
    raw = np.zeros(int(np.prod(shape)) * np.dtype(dtype).itemsize + 1, dtype=np.uint8)
    array = raw[1:].view(dtype).reshape(shape)
    assert not array.flags.aligned
    return array


@needs_openblas
@pytest.mark.parametrize("which", ["a", "b", "c"])
def test_accumulate_refuses_an_operand_that_is_not_aligned(which):
    rng = np.random.default_rng(11)
    operands = {"a": rng.standard_normal((4, 3)), "b": rng.standard_normal((3, 5)), "c": rng.standard_normal((4, 5))}
    misaligned = _misaligned(operands[which].shape)
    misaligned[...] = operands[which]
    operands[which] = misaligned
    before = operands["c"].copy()
    assert not host_blas.accumulate(operands["a"], operands["b"], operands["c"])
    np.testing.assert_array_equal(operands["c"], before)


def test_accumulate_refuses_a_c_of_two_columns_a_stride_apart():
    rng = np.random.default_rng(12)
    c = rng.standard_normal((6, 4))[:, ::2]  # two columns, two elements apart: not row-major
    before = c.copy()
    assert not host_blas.accumulate(rng.standard_normal((6, 3)), rng.standard_normal((3, 2)), c)
    np.testing.assert_array_equal(c, before)


@needs_openblas
@pytest.mark.parametrize("order", ["C", "F"])
def test_accumulate_reads_a_padded_a_of_two_rows_or_columns(order):
    """Two rows (row-major) or two columns (column-major): the padding's stride, not the extent, is the lead."""
    rng = np.random.default_rng(15)
    a = rng.standard_normal((2, 9))[:, :4] if order == "C" else np.asfortranarray(rng.standard_normal((9, 2)))[:4]
    b = rng.standard_normal((a.shape[1], 5))
    c = rng.standard_normal((a.shape[0], 5))
    expected = c + a @ b
    assert host_blas.accumulate(a, b, c)
    np.testing.assert_allclose(c, expected, rtol=1e-12, atol=1e-12)


@needs_openblas
@pytest.mark.parametrize("rows", [1, 2, 3])
def test_accumulate_into_the_first_rows_of_a_padded_c(rows):
    rng = np.random.default_rng(13)
    whole = rng.standard_normal((rows, 9))
    before = whole.copy()
    a = np.asfortranarray(rng.standard_normal((rows, 4)))
    b = rng.standard_normal((4, 5))
    assert host_blas.accumulate(a, b, whole[:, :5])
    np.testing.assert_allclose(whole[:, :5], before[:, :5] + a @ b, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(whole[:, 5:], before[:, 5:])


@needs_openblas
@pytest.mark.parametrize("case", ["a of one row, stride 0", "a of one column, stride 0", "b of one row, stride 0",
                                  "b of one column, stride 0", "c of one row, stride 0"], ids=_plain)
def test_accumulate_reads_a_stride_of_an_extent_one_dimension_as_nothing(case):
    """numpy may give an extent-one dimension any stride (here 0): the operand is still the one row or column."""
    rng = np.random.default_rng(14)
    shapes = {"a": (1, 4) if "a of one row" in case else (3, 1) if "a of one column" in case else (3, 4),
              "b": (4, 5) if not case.startswith("b") else (1, 5) if "row" in case else (4, 1)}
    if case.startswith("b"):
        shapes["a"] = (3, shapes["b"][0])
    if case.startswith("c"):
        shapes["a"] = (1, 4)
    m, k = shapes["a"]
    n = shapes["b"][1]
    a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    c = rng.standard_normal((m, n))
    expected = c + a @ b
    zero_stride = np.lib.stride_tricks.as_strided
    if case.startswith("a"):
        a = zero_stride(a, a.shape, (0, 8) if m == 1 else (8, 0))
    elif case.startswith("b"):
        b = zero_stride(b, b.shape, (0, 8) if k == 1 else (8, 0))
    else:
        c = zero_stride(c, c.shape, (0, 8))
    assert host_blas.accumulate(a, b, c)
    np.testing.assert_allclose(c, expected, rtol=1e-12, atol=1e-12)


class _ExportsOnly:
    """A stand-in for a loaded library: the named functions, each a recording stand-in."""

    def __init__(self, config: bytes | None, names) -> None:
        self._config = config
        for name in names:
            setattr(self, name, _Symbol(name, config))


class _Symbol:
    """One exported function: ``restype`` and ``argtypes`` as ctypes keeps them; the config function
    returns its text only where ``restype`` asks for a C string (ctypes returns an int otherwise)."""

    def __init__(self, name: str, config) -> None:
        self.name, self._config, self.restype, self.argtypes = name, config, ctypes.c_int, None

    def __call__(self, *args):
        return self._config if self.restype is ctypes.c_char_p else 12345


@pytest.mark.parametrize("naming, config, wide", [
    (("scipy_", "64_"), b"OpenBLAS 0.3.31 NO_AFFINITY", True),      # numpy's wheels: 64-bit by their name
    (("", ""), b"OpenBLAS 0.3.21 USE64BITINT DYNAMIC_ARCH", True),  # a plain build of 64-bit integers
    (("", ""), b"OpenBLAS 0.3.21 DYNAMIC_ARCH", False),             # a plain build of 32-bit integers
    (("", ""), None, False),                                        # a build that says nothing
], ids=["numpy-wheel", "plain-64-bit", "plain-32-bit", "plain-silent"])
def test_the_integer_width_of_a_library(naming, config, wide):
    prefix, suffix = naming
    names = [f"{prefix}openblas_get_config{suffix}", f"{prefix}cblas_dgemm{suffix}", f"{prefix}cblas_sgemm{suffix}"]
    blas = host_blas._OpenBlas(_ExportsOnly(config, names), prefix, suffix)
    integer = ctypes.c_int64 if wide else ctypes.c_int32
    assert blas.limit == np.iinfo(np.int64 if wide else np.int32).max
    for dtype, scalar in ((np.float64, ctypes.c_double), (np.float32, ctypes.c_float)):
        gemm = blas.gemms[np.dtype(dtype)]
        assert gemm.restype is None
        assert gemm.argtypes[3:6] == [integer] * 3 and gemm.argtypes[8] is integer and gemm.argtypes[13] is integer
        assert gemm.argtypes[6] is scalar and gemm.argtypes[11] is scalar


class _Wrapped:
    """A cblas_?gemm that runs the real one, then changes what it wrote: ``effect(self, C with its padding, n)``."""

    def __init__(self, gemm, effect, scalar=ctypes.c_double) -> None:
        self.gemm, self.effect, self.scalar, self.calls = gemm, effect, scalar, 0

    def __call__(self, order, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):
        self.gemm(order, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
        self.calls += 1
        whole = np.ctypeslib.as_array(ctypes.cast(c, ctypes.POINTER(self.scalar)), shape=(m, ldc))
        self.effect(self, whole, n)


def _off_by(amount, only_call=None):
    def effect(wrapper, whole, n):
        if only_call is None or wrapper.calls == only_call:
            whole[:, :n] += amount
    return effect


def _writes_past(wrapper, whole, n):
    if whole.shape[1] > n:
        whole[:, n] = 1.0


@needs_openblas
@pytest.mark.parametrize("dtype, effect", [
    (np.float64, _off_by(1e-6)), (np.float64, _off_by(1e-10)), (np.float64, _off_by(1e-6, only_call=1)),
    (np.float64, _off_by(1e-6, only_call=2)), (np.float64, _off_by(1e-10, only_call=1)),
    (np.float64, _off_by(1e-10, only_call=2)), (np.float64, _writes_past), (np.float32, _off_by(1e-3))],
    ids=[_plain(text) for text in ("off by 1e-6", "off by 1e-10", "first call off", "second call off",
                                    "first call off by 1e-10", "second call off by 1e-10", "writes the padding",
                                    "float32 off by 1e-3")])
def test_a_library_that_writes_other_numbers_fails_the_check(dtype, effect):
    """The check at load: 1e-12 in float64 (1e-10 off fails), 1e-4 in float32, both calls, not the padding."""
    host_blas._blas.cache_clear()
    real = host_blas._blas()
    assert real is not None
    blas = object.__new__(host_blas._OpenBlas)
    blas.limit = real.limit
    scalar = ctypes.c_double if dtype == np.float64 else ctypes.c_float
    blas.gemms = {np.dtype(dtype): _Wrapped(real.gemms[np.dtype(dtype)], effect, scalar)}
    assert not host_blas._agrees(blas)


@needs_openblas
def test_a_library_that_refuses_the_check_is_not_used():
    host_blas._blas.cache_clear()
    real = host_blas._blas()
    blas = object.__new__(host_blas._OpenBlas)
    blas.limit = 2  # every operand of the check is larger: _call refuses
    blas.gemms = dict(real.gemms)
    assert not host_blas._agrees(blas)


def _past_the_limit(past):
    """Operands whose only extent or leading dimension past 10 is ``past`` (11): A (4 × 3) and B (3 × 5)
    in the orders and paddings that leave the other five at 10 or less (n cannot be alone: C's leading
    dimension is at least n)."""
    if past == "m":  # A row-major: its leading dimension is k
        return np.ones((11, 3)), np.ones((3, 5)), np.zeros((11, 5))
    if past == "k":  # A column-major (leading dimension m), B row-major (leading dimension n)
        return np.asfortranarray(np.ones((4, 11))), np.ones((11, 5)), np.zeros((4, 5))
    if past == "lda":
        return np.asfortranarray(np.ones((11, 3)))[:4], np.ones((3, 5)), np.zeros((4, 5))
    if past == "ldb":
        return np.ones((4, 3)), np.ones((3, 11))[:, :5], np.zeros((4, 5))
    return np.ones((4, 3)), np.ones((3, 5)), np.zeros((4, 11))[:, :5]  # ldc


@pytest.mark.parametrize("past", ["m", "k", "lda", "ldb", "ldc"])
def test_accumulate_refuses_extents_past_the_librarys_integers(past):
    """A library of 32-bit integers cannot take an extent or leading dimension past 2**31 - 1: here the
    limit is 10 and one of them is 11."""
    a, b, c = _past_the_limit(past)
    calls = []
    blas = object.__new__(host_blas._OpenBlas)
    blas.limit = 10
    blas.gemms = {np.dtype(np.float64): lambda *args: calls.append(args)}
    assert not host_blas._call(blas, a, b, c)
    assert not calls
    blas.limit = 11
    assert host_blas._call(blas, a, b, c) and len(calls) == 1
