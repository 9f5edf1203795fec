"""Is C right?  A distributed Freivalds check every run; a full comparison on request.

Freivalds: for a random x, C·x must equal A·(B·x).  Both sides cost
matrix-vector products only, run where the blocks live, in float64 (complex128
for complex types), and meet through small MPI reductions of host vectors.

The residual is ``max_i |(C·x)_i − (A·(B·x))_i| / (|A|·|B|·|x|)_i``, the
componentwise error bound of a matrix product, so its tolerance is the
rounding bound of the product in the run's type: ``2·(k·u_acc + s·u_out + 2·u_in)``
where ``u_acc`` is the unit roundoff of the accumulation, ``u_out`` that of
the stored C (rounded once per SUMMA step, ``s`` steps), and ``u_in`` that of
the inputs as the GEMM sees them (TF32 rounds float32 inputs to 10 bits).
A NaN anywhere in C (outputs are poisoned with NaN before the run, so an
element the run never wrote is one) fails the check.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from mpi4py import MPI

from .errors import InputError
from .inputs import random_vector

__all__ = ["Check", "check_full_size", "freivalds", "full_check", "tolerance", "FULL_CHECK_LIMIT"]

#: Bytes rank 0 may gather for ``--verify full`` (A, B, C and the reference, in float64).
FULL_CHECK_LIMIT = 2 << 30

_UNIT_ROUNDOFF = {"float64": 2.0**-53, "float32": 2.0**-24, "float16": 2.0**-11}
_TF32_INPUT = 2.0**-11


@dataclasses.dataclass(frozen=True)
class Check:
    """A verification's outcome, as it goes to the summary and the file."""

    method: str
    residual: float
    tolerance: float

    @property
    def passed(self) -> bool:
        # Written so that NaN fails.
        return bool(self.residual <= self.tolerance)


def tolerance(dtype: str, k: int, steps: int, tf32: bool = False) -> float:
    """Rounding bound of ``C = A·B`` in ``dtype`` (see the module docstring)."""
    real = {"complex64": "float32", "complex128": "float64"}.get(dtype, dtype)
    u_out = _UNIT_ROUNDOFF[real]
    # cuBLAS (and numpy) accumulate float16 products in float32.
    u_acc = _UNIT_ROUNDOFF["float32"] if real == "float16" else u_out
    u_in = _TF32_INPUT if tf32 else 0.0
    bound = 2.0 * (k * u_acc + (steps + 1) * u_out + 2.0 * u_in)
    if dtype.startswith("complex"):
        bound *= 2.0  # a complex product is four real ones
    return bound


def _wide(dtype) -> type:
    return np.complex128 if np.dtype(dtype).kind == "c" else np.float64


def _matvec(backend, block, vector: np.ndarray, absolute: bool = False, rows_per_chunk: int = 4096):
    """``block @ vector`` in float64 on the block's device, in row chunks to bound memory."""
    xp = backend.xp
    wide = _wide(block.dtype) if not absolute else np.float64
    v = xp.asarray(vector)
    out = np.zeros(block.shape[0], dtype=np.result_type(wide, vector.dtype))
    if block.shape[0] == 0 or block.shape[1] == 0:
        return out
    for lo in range(0, block.shape[0], rows_per_chunk):
        part = block[lo : lo + rows_per_chunk]
        # |z| before the cast: casting a complex block to float64 would keep only its real part.
        part = xp.abs(part).astype(wide) if absolute else part.astype(wide)
        out[lo : lo + part.shape[0]] = backend.to_host(part @ v)
    return out


def freivalds(topo, layout, backend, a_block, b_block, c_block, seed, dtype, steps, tf32=False) -> Check:
    """Distributed Freivalds check; collective over the topology's communicators."""
    rank = topo.rank
    (bk0, bk1), cols = layout.b_block(rank)
    ak0, ak1 = layout.a_k(topo.coords[1])
    x = random_vector(seed, layout.n)[cols[0] : cols[1]]
    wide = _wide(dtype)

    def reduce(vec, comm, op=MPI.SUM):
        out = np.empty_like(vec)
        comm.Allreduce(vec, out, op=op)
        return out

    def product(absolute: bool):
        bx = np.zeros(layout.k, dtype=wide if not absolute else np.float64)
        bx[bk0:bk1] = _matvec(backend, b_block, np.abs(x) if absolute else x.astype(wide), absolute)
        bx = reduce(bx, topo.comm)
        return reduce(_matvec(backend, a_block, bx[ak0:ak1], absolute), topo.row_comm)

    cx = reduce(_matvec(backend, c_block, x.astype(wide)), topo.row_comm)
    abx = product(absolute=False)
    scale = product(absolute=True)
    diff = np.abs(cx - abx)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(scale > 0, diff / np.where(scale > 0, scale, 1), np.where(diff > 0, np.inf, 0))
    local = float(np.max(ratio)) if ratio.size else 0.0
    if np.isnan(cx).any() or np.isnan(abx).any():
        local = float("nan")
    flags = topo.comm.allgather(local)
    residual = float("nan") if any(np.isnan(flags)) else max(flags)
    return Check("freivalds", residual, tolerance(dtype, layout.k, steps, tf32))


def check_full_size(m: int, n: int, k: int, dtype) -> None:
    """Refuse ``--verify=full`` for a problem rank 0 cannot gather (checked before the run, too).

    Raises
    ------
    InputError
        With the bytes needed and the limit.
    """
    need = 8 * (m * k + k * n + 3 * m * n) * (2 if np.dtype(dtype).kind == "c" else 1)
    if need > FULL_CHECK_LIMIT:
        raise InputError(
            f"--verify=full needs {need / 2**30:.1f} GiB on rank 0 for m={m}, n={n}, k={k} "
            f"(limit {FULL_CHECK_LIMIT / 2**30:.0f} GiB): use --verify=freivalds"
        )


def full_check(topo, layout, backend, a_block, b_block, c_block, dtype, steps, tf32=False) -> Check:
    """Gather A, B and C on rank 0 and compare C with the float64 product elementwise."""
    m, n, k = layout.m, layout.n, layout.k
    check_full_size(m, n, k, dtype)
    wide = _wide(dtype)
    mine = tuple(backend.to_host(x).astype(wide) for x in (a_block, b_block, c_block))
    gathered = topo.comm.gather(mine, root=0)
    residual = None
    if topo.rank == 0:
        A = np.full((m, k), np.nan, dtype=wide)
        B = np.full((k, n), np.nan, dtype=wide)
        C = np.full((m, n), np.nan, dtype=wide)
        for r, (a, b, c) in enumerate(gathered):
            for target, block, (rr, cc) in (
                (A, a, layout.a_block(r)),
                (B, b, layout.b_block(r)),
                (C, c, layout.c_block(r)),
            ):
                target[rr[0] : rr[1], cc[0] : cc[1]] = block
        ref = A @ B
        scale = np.abs(A) @ np.abs(B)
        diff = np.abs(C - ref)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(scale > 0, diff / np.where(scale > 0, scale, 1), np.where(diff > 0, np.inf, 0))
        residual = float("nan") if np.isnan(C).any() else float(ratio.max())
    residual = topo.comm.bcast(residual, root=0)
    return Check("full", residual, tolerance(dtype, k, steps, tf32))
