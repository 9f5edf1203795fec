"""``C += A·B`` as one call of the host BLAS that numpy already uses.

numpy's ``matmul`` has no ``beta``: adding a product into C takes a GEMM into a scratch array and
then ``C += scratch``, which numpy does on one thread while the BLAS threads wait.  Each step of a
SUMMA product and each span of a dynamic tile on a CPU accumulates, so a rank with many BLAS
threads spends a noticeable share of its time in that one-thread add.  OpenBLAS's
``cblas_?gemm`` with ``beta = 1`` does the same in the GEMM itself, on all its threads.

The library is the one numpy loaded, found through threadpoolctl (which already sizes its thread
pool, :mod:`hpcmm.planning.threads`); only OpenBLAS is taken, since its symbols and integer width
can be read from the library itself.  Anything else (another BLAS, a type other than float32 and
float64, a layout BLAS cannot take) leaves :func:`accumulate` returning False, and the caller adds
through numpy as before.  A small product is checked against numpy when the library is first
loaded; one that disagrees turns the path off.
"""

from __future__ import annotations

import ctypes
import functools

import numpy as np

ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112

# (symbol prefix, suffix): numpy's wheels (scipy-openblas, 64-bit integers), then plain OpenBLAS builds.
_NAMINGS = (("scipy_", "64_"), ("", "64_"), ("", ""))

# Element types BLAS multiplies here, by numpy type: the letter of cblas_?gemm and the scalar's C type.
_KINDS = {np.dtype(np.float64): ("d", ctypes.c_double), np.dtype(np.float32): ("s", ctypes.c_float)}


class _OpenBlas:
    """The ``cblas_sgemm`` and ``cblas_dgemm`` of one OpenBLAS library, with its integer width."""

    def __init__(self, library: ctypes.CDLL, prefix: str, suffix: str) -> None:
        config = getattr(library, f"{prefix}openblas_get_config{suffix}")
        config.restype = ctypes.c_char_p
        wide = suffix == "64_" or b"USE64BITINT" in (config() or b"")
        integer = ctypes.c_int64 if wide else ctypes.c_int32
        self.limit = np.iinfo(np.int64 if wide else np.int32).max
        self.gemms = {}
        for dtype, (letter, scalar) in _KINDS.items():
            gemm = getattr(library, f"{prefix}cblas_{letter}gemm{suffix}")
            gemm.restype = None
            gemm.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, integer, integer, integer, scalar,
                             ctypes.c_void_p, integer, ctypes.c_void_p, integer, scalar, ctypes.c_void_p, integer]
            self.gemms[dtype] = gemm


def _operand(array: np.ndarray) -> tuple[int, int] | None:
    """``(transpose flag, leading dimension)`` of an aligned row- or column-major 2-D operand for a
    row-major ``cblas_?gemm``, or None where neither of its strides is one element.

    Aligned, its strides are whole elements.  A dimension of extent one has a stride that means
    nothing (numpy may give it anything, zero included): its leading dimension is the other extent.
    """
    rows, cols = array.shape
    row_stride, col_stride = (stride // array.itemsize for stride in array.strides)
    if col_stride == 1 or cols == 1:
        lead = row_stride if rows > 1 else cols
        if lead >= max(1, cols):
            return NO_TRANS, lead
    if row_stride == 1 or rows == 1:
        lead = col_stride if cols > 1 else rows
        if lead >= max(1, rows):
            return TRANS, lead
    return None


def _call(blas: _OpenBlas, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> bool:
    """``c += a @ b`` through ``blas``; False (nothing done) where BLAS cannot take the operands."""
    dtype = c.dtype
    if dtype not in blas.gemms or a.dtype != dtype or b.dtype != dtype or not c.flags.writeable:
        return False
    if not (a.flags.aligned and b.flags.aligned and c.flags.aligned):
        return False
    m, k = a.shape
    n = b.shape[1]
    if k == 0 or c.size == 0:
        return True  # nothing to add
    if c.strides[1] != c.itemsize and n != 1:
        return False
    ldc = c.strides[0] // c.itemsize if m > 1 else n
    layout_a, layout_b = _operand(a), _operand(b)
    if layout_a is None or layout_b is None or ldc < n:
        return False
    (trans_a, lda), (trans_b, ldb) = layout_a, layout_b
    if max(m, k, lda, ldb, ldc) > blas.limit:  # n <= ldc
        return False
    blas.gemms[dtype](ROW_MAJOR, trans_a, trans_b, m, n, k, 1.0, a.ctypes.data, lda, b.ctypes.data, ldb,
                      1.0, c.ctypes.data, ldc)
    return True


def _agrees(blas: _OpenBlas) -> bool:
    """Whether ``blas`` adds a small product (padded views, both operand orders, both types) as numpy
    does: a library whose calling convention was read wrong gives other numbers, not a crash, here."""
    rng = np.random.default_rng(7)
    for dtype in blas.gemms:
        a = np.asfortranarray(rng.random((5, 7)).astype(dtype))[:3, :6]  # column-major, leading dimension 5
        b = rng.random((6, 9)).astype(dtype)[:, :4]  # row-major, leading dimension 9
        start = rng.random((3, 4)).astype(dtype)
        c = start.copy()
        padded = np.zeros((3, 8), dtype)
        padded[:, :4] = start
        view = padded[:, :4]
        if not (_call(blas, a, b, view) and _call(blas, np.ascontiguousarray(a), b, c)):
            return False
        expected = start.astype(np.float64) + a.astype(np.float64) @ b.astype(np.float64)
        tolerance = 1e-4 if dtype == np.float32 else 1e-12
        if not (np.allclose(view, expected, rtol=tolerance, atol=tolerance)
                and np.allclose(c, expected, rtol=tolerance, atol=tolerance) and not padded[:, 4:].any()):
            return False
    return True


@functools.cache
def _blas() -> _OpenBlas | None:
    """numpy's OpenBLAS, or None where numpy uses another BLAS or its symbols are not found."""
    from threadpoolctl import threadpool_info  # noqa: PLC0415

    for info in threadpool_info():
        if info.get("user_api") != "blas" or info.get("internal_api") != "openblas":
            continue
        try:
            library = ctypes.CDLL(info["filepath"])
        except OSError:
            continue
        for prefix, suffix in _NAMINGS:
            try:
                blas = _OpenBlas(library, prefix, suffix)
            except AttributeError:
                continue
            return blas if _agrees(blas) else None
    return None


def available() -> bool:
    """Whether :func:`accumulate` can add in BLAS on this host (numpy's BLAS is OpenBLAS and agrees)."""
    return _blas() is not None


def accumulate(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> bool:
    """``c += a @ b`` in one BLAS call; returns False, with ``c`` untouched, where this host's BLAS or
    the operands do not allow it (then the caller adds through numpy).

    ``a`` and ``b`` each row- or column-major, ``c`` row-major, each with a leading dimension of at
    least its extent; all of one type, float32 or float64.
    """
    blas = _blas()
    return blas is not None and _call(blas, a, b, c)
