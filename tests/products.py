"""Products as hpcmm computes them, in every type, for the verification's power tests.

:func:`emulate` multiplies panel by panel the way a SUMMA run does: each
step's product accumulated in the GEMM's accumulation type (float32 for the
16-bit types and TF32), stored in C's type, then added to C and stored again
(numpy's ``C += A_s B_s``).  TF32 is emulated on the CPU by rounding the
float32 inputs to 10 bits of mantissa (to nearest, ties to even).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

#: Every type the verification models: the CLI's types, TF32 and bfloat16.
TYPES = ("float64", "float32", "tf32", "float16", "bfloat16", "complex64", "complex128")


def storage(kind: str):
    """numpy type of A, B and C for ``kind``."""
    special = {"bfloat16": np.dtype(ml_dtypes.bfloat16), "tf32": np.dtype(np.float32)}
    return special[kind] if kind in special else np.dtype(kind)


def run_dtype(kind: str) -> str:
    """The ``dtype`` name the run (and :func:`hpcmm.verify.freivalds`) is given."""
    return "float32" if kind == "tf32" else kind


def accumulation(kind: str):
    return np.float32 if kind in ("float16", "bfloat16", "tf32") else storage(kind)


def to_tf32(x: np.ndarray) -> np.ndarray:
    """float32 rounded to TF32 (10 explicit mantissa bits), to nearest, ties to even."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0xFFF + ((bits >> 13) & 1)) & ~np.uint64(0x1FFF)
    return bits.astype(np.uint32).view(np.float32).reshape(x.shape)


def inputs(kind: str, m: int, n: int, k: int, rng: np.random.Generator):
    """A (m×k, column-major) and B (k×n) uniform in [-1, 1) (complex: both parts), in ``kind``'s storage."""
    def draw(shape):
        values = rng.random(shape) * 2 - 1
        if kind.startswith("complex"):
            values = values + 1j * (rng.random(shape) * 2 - 1)
        return values.astype(storage(kind))

    return np.asfortranarray(draw((m, k))), draw((k, n))


def emulate(a: np.ndarray, b: np.ndarray, kind: str, panel: int, skip: int | None = None) -> np.ndarray:
    """C = A·B in ``kind``, ``panel`` columns of k per step; ``skip`` leaves one step out (a lost panel)."""
    out, acc = storage(kind), accumulation(kind)
    if kind == "tf32":
        a, b = to_tf32(a), to_tf32(b)
    c = np.zeros((a.shape[0], b.shape[1]), dtype=out)
    for step, k0 in enumerate(range(0, a.shape[1], panel)):
        if step == skip:
            continue
        part = (a[:, k0 : k0 + panel].astype(acc) @ b[k0 : k0 + panel].astype(acc)).astype(out)
        c = (c.astype(acc) + part.astype(acc)).astype(out)
    return c


def steps(k: int, panel: int) -> int:
    return -(-k // panel)


def row_scale(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The norm-wise scale of one element of each row of C: ‖A[i, :]‖·‖B‖_F/√n (float64)."""
    wide = np.complex128 if a.dtype.kind == "c" else np.float64
    return np.linalg.norm(a.astype(wide), axis=1) * np.linalg.norm(b.astype(wide)) / np.sqrt(b.shape[1])
