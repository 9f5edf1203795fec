"""Is C right?  A distributed Freivalds check every run; a full comparison on request.

Freivalds: for a vector ``x`` of independent random signs (±1), ``C·x`` must
equal ``A·(B·x)``.  Both sides cost matrix-vector products only, run where
the blocks live, in float64 (complex128 for complex types) from the stored
inputs, and meet through small MPI reductions of host vectors.

Scale.  Row ``i`` is measured against the norm-wise scale
``σ_i = ‖A[i, :]‖₂ · ‖B‖_F`` (Cauchy–Schwarz bounds ``‖(A·B)[i, :]‖₂`` by it),
and the residual is ``max_i |(C·x)_i − (A·(B·x))_i| / σ_i``.  Unlike the
componentwise ``|A|·|B|·|x|``, which grows like ``k·n`` for data of mixed sign
while the product grows like ``√(k·n)``, this scale does not swamp an error.

Error model (the tolerance).  A correct C differs from the exact product of
the stored inputs by rounding: every addition and multiplication of the
accumulation (``2k`` per element, plus the sums across SUMMA steps) and, where
C is stored narrower than it is accumulated (float16, bfloat16), every store
of C after a step.  Rounding errors are modelled as independent and of mean
zero, each bounded by the unit roundoff times the value it rounds; the values
of the accumulation are partial sums, bounded by ``‖A[i, :]‖·‖B[:, j]‖``
(Cauchy–Schwarz), those of the stores are partial products of C, taken as
at most the larger of ``‖(A·B)[i, :]‖`` (estimated from the inputs with four
random sign vectors) and the size that sums of the same terms with random
signs reach (a sum that grows step by step stays below its end; one of mixed
signs, a random walk, averages half its end's square over the steps).  With ``x`` of random signs, ``(E·x)_i`` is then a sum of
bounded independent terms and Hoeffding's inequality bounds it by ``λ``
standard deviations, ``λ = √(2 ln(2m / 10⁻⁶))`` (a false alarm in at most one
correct product in a million, ``m`` rows).  TF32 rounds the float32 inputs to
10 bits of mantissa (to nearest, or by truncation): a fluctuation of the
same kind plus a bias of at most ``2·2⁻¹⁰`` of the product itself.  The float64
arithmetic of the check adds its own rounding, in the same way.

What it can see.  One element of C off by ``δ`` moves ``(C·x)_i`` by ``±δ``,
so the check catches it for certain once ``δ > 2·tolerance·σ_i``: relative
to the norm-wise scale of one element of its row, ``σ_i/√n``, that is
``detectable = 2·√n·tolerance`` (``/summary`` ``verify_detectable``).  A wrong
panel, block or row changes ``(C·x)_i`` by the norm of the damage and is
caught far above that.  ``--verify full`` compares every element with the
componentwise bound :func:`tolerance` and is the strong form.

A NaN or Inf anywhere in C (outputs are poisoned with NaN before the run, so
an element the run never wrote is one) fails the check.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from mpi4py import MPI

from .dtypes import numpy_dtype
from .errors import InputError

__all__ = ["Check", "Product", "check_full_size", "detectable", "freivalds", "freivalds_tolerance", "full_check",
           "sign_vectors", "tolerance", "underflow", "FULL_CHECK_LIMIT"]

#: Bytes rank 0 may gather for ``--verify full`` (A, B, C and the reference, in float64).
FULL_CHECK_LIMIT = 2 << 30

#: Unit roundoff of each storage type (round to nearest).
UNIT_ROUNDOFF = {"float64": 2.0**-53, "float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8}
#: Half the spacing of each type's subnormal numbers: the absolute error of one rounding whose result
#: underflows (the model is ``fl(x) = x·(1 + δ) + η`` with ``|δ| ≤ u`` and ``|η|`` at most this).
UNDERFLOW = {"float64": 2.0**-1075, "float32": 2.0**-150, "float16": 2.0**-25, "bfloat16": 2.0**-134}
#: TF32 keeps 10 bits of a float32 mantissa; 2⁻¹⁰ bounds truncation as well as rounding to nearest.
TF32_INPUT = 2.0**-10
#: Probability of a false alarm the tolerance allows (per product, under the error model).
FALSE_ALARM = 1e-6
#: Random sign vectors besides ``x`` that estimate the row norms of A·B.
NORM_PROBES = 4


@dataclasses.dataclass(frozen=True)
class Check:
    """A verification's outcome, as it goes to the summary and the file.

    ``detectable``: the error of one element, as a fraction of the norm-wise
    scale of one element of its row (``‖A[i, :]‖·‖B‖_F/√n``), above which the
    check is sure to fail.
    """

    method: str
    residual: float
    tolerance: float
    detectable: float = float("nan")

    @property
    def passed(self) -> bool:
        # Written so that NaN fails.
        return bool(self.residual <= self.tolerance)


@dataclasses.dataclass(frozen=True)
class Product:
    """The product a check looks at: this rank's blocks, and how C was computed.

    ``a``, ``b``, ``c`` are this rank's blocks (where the backend keeps them),
    ``dtype`` their storage type, ``steps`` the SUMMA steps that added to C,
    ``tf32`` whether float32 inputs went through TF32 tensor cores.
    """

    a: object
    b: object
    c: object
    dtype: str
    steps: int
    tf32: bool = False
    #: C = α·A·B + β·C₀: ``c0`` is this rank's block of C₀ (``None`` where β = 0).
    alpha: float = 1.0
    beta: float = 0.0
    c0: object = None

    @property
    def stores(self) -> int:
        """Roundings of C: one per step, and one more where α or β scaled it."""
        return self.steps + (0 if self.alpha == 1 and self.c0 is None else 1)


def _real(dtype: str) -> str:
    return {"complex64": "float32", "complex128": "float64"}.get(str(dtype), str(dtype))


def _units(dtype: str, tf32: bool) -> tuple[float, float, float]:
    """``(u_out, u_acc, u_in)``: C's storage, the accumulation, the inputs as the GEMM sees them."""
    real = _real(dtype)
    if real not in UNIT_ROUNDOFF:
        raise InputError(f"dtype {dtype!r}: no rounding model (known: {', '.join(UNIT_ROUNDOFF)})")
    u_out = UNIT_ROUNDOFF[real]
    # cuBLAS (and numpy, ml_dtypes) accumulate 16-bit products in float32.
    u_acc = UNIT_ROUNDOFF["float32"] if u_out > UNIT_ROUNDOFF["float32"] else u_out
    return u_out, u_acc, (TF32_INPUT if tf32 else 0.0)


def tolerance(dtype: str, k: int, steps: int, tf32: bool = False) -> float:
    """Componentwise rounding bound of ``C = A·B`` in ``dtype``: ``|C − A·B| ≤ tolerance·|A|·|B|``.

    ``2·(k·u_acc + (steps+1)·u_out + 2·u_in)`` (doubled for complex types):
    the worst case of ``k`` accumulations, one rounding of the stored C per
    SUMMA step, and the input rounding of TF32.  ``--verify full`` uses it
    element by element.
    """
    u_out, u_acc, u_in = _units(dtype, tf32)
    bound = 2.0 * (k * u_acc + (steps + 1) * u_out + 2.0 * u_in)
    if str(dtype).startswith("complex"):
        bound *= 2.0  # a complex product is four real ones
    return bound


def underflow(dtype: str, k: int, steps: int) -> float:
    """The absolute part of the componentwise bound: ``|C − A·B| ≤ tolerance·|A|·|B| + underflow``.

    The same roundings as :func:`tolerance` (``k`` accumulations, ``steps + 1``
    stores of C), each off by up to :data:`UNDERFLOW` more where its result is
    subnormal.  Only products with tiny elements feel it: float16 C elements
    below 6.1e-5 are subnormal, and one of -5.1e-7 stored as -5.4e-7 is right
    to the last bit of float16 while 5 % off.
    """
    real = _real(dtype)
    if real not in UNDERFLOW:
        raise InputError(f"dtype {dtype!r}: no rounding model (known: {', '.join(UNDERFLOW)})")
    eta_out = UNDERFLOW[real]
    eta_acc = UNDERFLOW["float32"] if UNIT_ROUNDOFF[real] > UNIT_ROUNDOFF["float32"] else eta_out
    bound = 2.0 * (k * eta_acc + (steps + 1) * eta_out)
    if str(dtype).startswith("complex"):
        bound *= 2.0  # a complex product is four real ones
    return bound


def confidence(rows: int) -> float:
    """``λ``: standard deviations within which all ``rows`` rows stay but once in 1/FALSE_ALARM."""
    return math.sqrt(2.0 * math.log(2.0 * max(int(rows), 1) / FALSE_ALARM))


def freivalds_tolerance(dtype: str, k: int, n: int, steps: int, tf32: bool = False, *, rows: int = 1,
                        partial: float = 1.0, terms: float = 1.0, product: float = 1.0) -> float:
    """Bound on ``|(C·x − A·B·x)_i| / σ_i`` for a correct C (see the module docstring).

    Parameters
    ----------
    dtype : str
        Storage type of A, B and C (``bfloat16`` too).
    k, n : int
        Depth of the product and columns of C.
    steps : int
        SUMMA steps (each adds to C and, for 16-bit types, stores it).
    tf32 : bool
        float32 inputs rounded to TF32.
    rows : int
        Rows of C (the union bound of the confidence).
    partial, terms, product : float
        Largest ratio to ``σ_i`` over the rows of: the norm of the row of
        ``A·B``, ``√(Σ_j Σ_l |a_il b_lj|²)`` (what sums of the same terms with
        random signs reach) and ``|(A·B·x)_i|``.  1 is their worst case.
    """
    u_out, u_acc, u_in = _units(dtype, tf32)
    u_ref = UNIT_ROUNDOFF["float64"]
    complex_ = str(dtype).startswith("complex")
    c = 2.0 if complex_ else 1.0  # a complex multiply-add rounds twice as many real values
    variance = c * (2.0 * k + 2.0 * steps) * u_acc**2
    if u_out > u_acc:
        # C stored in its own type after every step (numpy rounds the step's product, then the sum).
        grown = max(partial, terms)
        variance += 2.0 * steps * (u_out * grown) ** 2
    variance += c * 2.0 * (2.0 * n + k + NORM_PROBES) * u_ref**2  # the check's own float64 arithmetic
    bias = 0.0
    if u_in:
        variance += c * 2.0 * (u_in * terms) ** 2
        bias = 2.0 * u_in * product
    lam = confidence(rows) * (math.sqrt(2.0) if complex_ else 1.0)  # |z| of a complex residual
    return lam * math.sqrt(variance) + bias


def detectable(tol: float, n: int) -> float:
    """The element error (fraction of its row's norm-wise element scale) the check surely catches."""
    return 2.0 * math.sqrt(max(n, 1)) * tol


def sign_vectors(seed: int, n: int, count: int = 1 + NORM_PROBES) -> np.ndarray:
    """``n × count`` independent random signs (±1.0), the same on every rank; column 0 is ``x``."""
    rng = np.random.default_rng([seed, 3, 1])
    return rng.integers(0, 2, size=(n, count)).astype(np.float64) * 2.0 - 1.0


def _wide(dtype) -> type:
    return np.complex128 if numpy_dtype(dtype).kind == "c" else np.float64


#: The most bytes of a block's rows, widened, that the check takes at once on the device: each chunk
#: makes up to :data:`VERIFY_COPIES` temporaries of this size (widened, magnitude, square), so the
#: check's scratch is bounded whatever the shape, and the memory check counts it
#: (:func:`hpcmm.planning.choices.working_bytes`).
VERIFY_CHUNK_BYTES = 64 << 20
VERIFY_COPIES = 3


def _matmul(backend, block, right: np.ndarray, squared: bool = False, chunk_bytes: int = VERIFY_CHUNK_BYTES):
    """``block @ right`` (or ``|block|² @ right``) in float64/complex128 on the block's device.

    In row chunks of at most ``chunk_bytes`` widened (one row where a row is more); returns a
    host array.
    """
    xp = backend.xp
    wide = np.float64 if squared else _wide(block.dtype)
    out = np.zeros((block.shape[0], right.shape[1]), dtype=np.result_type(wide, right.dtype))
    if block.shape[0] == 0 or block.shape[1] == 0:
        return out
    r = xp.asarray(right)
    rows_per_chunk = max(1, chunk_bytes // (block.shape[1] * np.dtype(_wide(block.dtype)).itemsize))
    for lo in range(0, block.shape[0], rows_per_chunk):
        part = block[lo : lo + rows_per_chunk]
        # Widened first (bfloat16 and float16 arithmetic stays out of it); complex blocks to
        # complex128, since casting them to float64 would keep only their real part.  A block
        # already wide is read where it lies.
        part = part.astype(_wide(block.dtype), copy=False)
        part = xp.abs(part) ** 2 if squared else part
        out[lo : lo + part.shape[0]] = backend.to_host(part @ r)
    return out


def _reduce(vec: np.ndarray, comm) -> np.ndarray:
    out = np.empty_like(vec)
    comm.Allreduce(np.ascontiguousarray(vec), out, op=MPI.SUM)
    return out


def freivalds(topo, layout, backend, product: Product, seed: int) -> Check:
    """Distributed Freivalds check; collective over ``topo.comm``.

    Works from the global ranges of every rank's blocks (``layout.a_block``,
    ``b_block``, ``c_block``), so any layout in which every element of A, B
    and C has one owner will do (SUMMA's, 2.5D's).  ``residual`` and
    ``tolerance`` are relative to the rows' norm-wise scales (module
    docstring); ``detectable`` says what one wrong element must be to be
    caught.
    """
    a_block, b_block, c_block = product.a, product.b, product.c
    rank = topo.rank
    (bk0, bk1), b_cols = layout.b_block(rank)
    (a_rows, (ak0, ak1)) = layout.a_block(rank)
    c_rows, c_cols = layout.c_block(rank)
    signs = sign_vectors(seed, layout.n)
    wide = _wide(c_block.dtype)
    k, m = layout.k, layout.m

    # B·X (k × probes) and the squared row norms of B, summed over every rank's block.
    bx = np.zeros((k, signs.shape[1]), dtype=wide)
    bx[bk0:bk1] = _matmul(backend, b_block, signs[b_cols[0] : b_cols[1]].astype(wide))
    bx = _reduce(bx, topo.comm)
    b_rows = np.zeros((k, 1))
    b_rows[bk0:bk1] = _matmul(backend, b_block, np.ones((b_block.shape[1], 1)), squared=True)
    b_rows = _reduce(b_rows, topo.comm)[:, 0]
    b_frob2 = float(b_rows.sum())

    # A·(B·X), ‖A_i‖² and Σ_l |a_il|²‖B_l‖² for every row, and C·x, summed over every rank's block.
    abx = np.zeros((m, signs.shape[1]), dtype=wide)
    abx[a_rows[0] : a_rows[1]] = _matmul(backend, a_block, bx[ak0:ak1])
    abx = _reduce(abx, topo.comm)
    a_sq = np.zeros((m, 2))
    a_sq[a_rows[0] : a_rows[1]] = _matmul(backend, a_block, np.stack([np.ones(ak1 - ak0), b_rows[ak0:ak1]], axis=1),
                                          squared=True)
    a_sq = _reduce(a_sq, topo.comm)
    cx = np.zeros(m, dtype=wide)
    cx[c_rows[0] : c_rows[1]] = _matmul(backend, c_block, signs[c_cols[0] : c_cols[1], :1].astype(wide))[:, 0]
    cx = _reduce(cx, topo.comm)

    sigma = np.sqrt(a_sq[:, 0] * b_frob2)
    # C = α·A·B + β·C₀: the same projection of α·A·B + β·C₀, relative to the scale of both terms.
    # The tolerance's terms below stay those of A·B (relative to its own scale, sigma).
    target = product.alpha * abx[:, 0]
    scale = abs(product.alpha) * sigma
    if product.c0 is not None:
        c0x = np.zeros((m, 2), dtype=wide)
        c0x[c_rows[0] : c_rows[1], :1] = _matmul(backend, product.c0, signs[c_cols[0] : c_cols[1], :1].astype(wide))
        c0x[c_rows[0] : c_rows[1], 1:] = _matmul(backend, product.c0, np.ones((product.c0.shape[1], 1)), squared=True)
        c0x = _reduce(c0x, topo.comm)
        target = target + product.beta * c0x[:, 0]
        scale = scale + abs(product.beta) * np.sqrt(np.abs(c0x[:, 1]))
    diff = np.abs(cx - target)
    live, scaled = sigma > 0, scale > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(scaled, diff / np.where(scaled, scale, 1.0), np.where(diff > 0, np.inf, 0.0))
        est = np.sqrt(np.mean(np.abs(abx[:, 1:]) ** 2, axis=1))
        partial = float(np.max(est[live] / sigma[live])) if live.any() else 0.0
        terms = float(np.max(np.sqrt(a_sq[live, 1]) / sigma[live])) if live.any() else 0.0
        product_ratio = float(np.max(np.abs(abx[live, 0]) / sigma[live])) if live.any() else 0.0
    local = float(np.max(ratio)) if ratio.size else 0.0
    if not np.isfinite(cx).all() or not np.isfinite(abx).all():
        local = float("nan")
    gathered = topo.comm.allgather((local, partial, terms, product_ratio))
    residuals = [g[0] for g in gathered]
    residual = float("nan") if any(np.isnan(residuals)) else max(residuals)
    partial, terms, product_ratio = (max(g[i] for g in gathered) for i in (1, 2, 3))
    tol = freivalds_tolerance(product.dtype, k, layout.n, product.stores, product.tf32, rows=layout.m,
                              partial=partial, terms=terms, product=product_ratio)
    return Check("freivalds", residual, tol, detectable(tol, layout.n))


def check_full_size(m: int, n: int, k: int, dtype) -> None:
    """Refuse ``--verify=full`` for a problem rank 0 cannot gather (checked before the run, too).

    Raises
    ------
    InputError
        With the bytes needed and the limit.
    """
    need = 8 * (m * k + k * n + 3 * m * n) * (2 if numpy_dtype(dtype).kind == "c" else 1)
    if need > FULL_CHECK_LIMIT:
        raise InputError(
            f"--verify=full needs {need / 2**30:.1f} GiB on rank 0 for m={m}, n={n}, k={k} "
            f"(limit {FULL_CHECK_LIMIT / 2**30:.0f} GiB): use --verify=freivalds"
        )


def full_check(topo, layout, backend, product: Product) -> Check:
    """Gather A, B and C on rank 0 and compare C with the float64 product elementwise."""
    m, n, k = layout.m, layout.n, layout.k
    check_full_size(m, n, k, product.dtype)
    wide = _wide(product.c.dtype)
    # C₀ travels only where β·C₀ was added (β ≠ 0): the usual check gathers A, B and C alone.
    blocks = (product.a, product.b, product.c) + (() if product.c0 is None else (product.c0,))
    mine = tuple(backend.to_host(x).astype(wide) for x in blocks)
    gathered = topo.comm.gather(mine, root=0)
    residual = power = None
    tol = tolerance(product.dtype, k, product.stores, product.tf32)
    floor = underflow(product.dtype, k, product.stores)
    if topo.rank == 0:
        A = np.full((m, k), np.nan, dtype=wide)
        B = np.full((k, n), np.nan, dtype=wide)
        C = np.full((m, n), np.nan, dtype=wide)
        C0 = None if product.c0 is None else np.full((m, n), np.nan, dtype=wide)
        for r, blocks_of_r in enumerate(gathered):
            for target, block, (rr, cc) in zip((A, B, C, C0), blocks_of_r,
                                               (layout.a_block(r), layout.b_block(r), layout.c_block(r),
                                                layout.c_block(r))):
                target[rr[0] : rr[1], cc[0] : cc[1]] = block
        # C = α·A·B + β·C₀; an element's scale is that of both terms.
        ref = product.alpha * (A @ B)
        scale = abs(product.alpha) * (np.abs(A) @ np.abs(B))
        if C0 is not None:
            ref += product.beta * C0
            scale += abs(product.beta) * np.abs(C0)
        diff = np.abs(C - ref)
        with np.errstate(divide="ignore", invalid="ignore"):
            # An element fails once its error exceeds tol·(|A||B|)_ij + floor (results that underflow
            # round to a fixed grid): in units of tol, its error over (|A||B|)_ij + floor/tol.
            allowed = scale + floor / tol
            ratio = np.where(allowed > 0, diff / np.where(allowed > 0, allowed, 1), np.where(diff > 0, np.inf, 0))
            # An element fails once its error exceeds tol·(|A||B|)_ij; in units of its row's
            # norm-wise element scale that is at most 2·tol·max (|A||B|)_ij / (‖A_i‖‖B‖_F/√n).
            row_scale = np.linalg.norm(A, axis=1) * np.linalg.norm(B) / math.sqrt(max(n, 1))
            worst = np.where(row_scale[:, None] > 0, scale / np.where(row_scale > 0, row_scale, 1)[:, None], 0)
        residual = float("nan") if not np.isfinite(C).all() else float(ratio.max(initial=0.0))
        power = 2.0 * tol * float(worst.max(initial=0.0)) if np.isfinite(worst).all() else float("inf")
    residual, power = topo.comm.bcast((residual, power), root=0)
    return Check("full", residual, tol, power)
