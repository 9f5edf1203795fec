"""``bench``'s one-device reference: the best of several ways one device does the same product.

One GPU's rate depends on more than the library: the order of the operands
in memory picks different cuBLAS kernels (float64 16384 on an H200 ran from
50.3 to 55.6 TFLOP/s through ``cupy.matmul`` by order alone, and hpcmm's own
``cublasGemmEx`` call at 58.7).  A reference that is not the best one device
does inflates every efficiency measured against it, so the benchmark times
each candidate below on the same global problem, in the same run, and takes
the fastest:

* ``cupy.matmul`` (GPU) or ``numpy.matmul`` (CPU) with A and B each in C
  (row-major) or F (column-major) order: four candidates;
* ``hpcmm gemm A:x B:y``: hpcmm's own GEMM call (:meth:`Backend.gemm`,
  ``cublasGemmEx`` on GPUs) on the whole product, with A and B in the orders
  the run's GEMM takes for the case's type (:mod:`hpcmm.planning.gemm_orders`: the
  table on GPUs, as stored on CPUs, ``HPCMM_GEMM_ORDER`` where set), which
  its name says; its operands are laid out in those orders before the clock
  starts, so it times the GEMM alone, not the re-layout a distributed run
  pays for panels that arrive in the stored order (tf32);
* ``hpcmm 1 rank``: where the benchmark itself runs one rank on one device,
  hpcmm's own product is a candidate too (a run at one rank per GPU is what
  ``mpiexec -n 1 python -m hpcmm bench`` measures; a run at more ranks does
  not start one inside).

Every candidate draws its data as hpcmm does (uniform in [-1, 1), every
mantissa bit random), lays its operands out before its clock starts, and is
timed as hpcmm is (CUDA events on the compute stream, host clock on CPUs):
``warmup`` untimed products (at least one) before its first timed one, then
``repeats`` rounds in which every candidate times one product, the order
rotating by one from round to round (no candidate always first, when the
GPU is coolest, or last); the median of its rounds.  C is row-major
throughout.  TF32 cases run cupy with its
TF32 compute type switched on for the measurement and hpcmm's call with
``CUBLAS_COMPUTE_32F_FAST_TF32``.  A candidate that cannot run (no bfloat16
GEMM in numpy, out of memory, an error of the library) is kept with NaN and
the reason.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Sequence

import numpy as np

from ..dtypes import is_bfloat16, numpy_dtype
from ..planning.gemm_orders import STORED

__all__ = ["Candidate", "best_index", "candidates", "combine", "measure_candidates"]

#: Operand orders of the matmul candidates: (A, B), C = row-major, F = column-major.
ORDERS = (("C", "C"), ("C", "F"), ("F", "C"), ("F", "F"))
HPCMM_ONE_RANK = "hpcmm 1 rank"


@dataclasses.dataclass(frozen=True)
class Candidate:
    """One way one device computes the product."""

    library: str  # cupy, numpy or hpcmm
    call: str  # matmul, gemm, run
    a_order: str
    b_order: str

    @property
    def name(self) -> str:
        if self.call == "run":
            return HPCMM_ONE_RANK
        return f"{self.library}.{self.call} A:{self.a_order} B:{self.b_order}" if self.library != "hpcmm" \
            else f"hpcmm gemm A:{self.a_order} B:{self.b_order}"


def candidates(on_gpu: bool, gemm_order: str = STORED) -> list[Candidate]:
    """The measured candidates, in the order they run (``hpcmm 1 rank`` is added by the benchmark).

    ``gemm_order`` is the operand order of the run's GEMM (:func:`hpcmm.planning.gemm_orders.gemm_order`), A's then B's.
    """
    lib = "cupy" if on_gpu else "numpy"
    return [Candidate(lib, "matmul", a, b) for a, b in ORDERS] + [Candidate("hpcmm", "gemm", *gemm_order)]


def _uniform(gen, shape, dtype):
    """Uniform in [-1, 1) with every mantissa bit random; complex: both parts (as hpcmm's inputs)."""
    values = gen.random(shape, dtype=np.float64) * 2 - 1
    if numpy_dtype(dtype).kind == "c":
        values = values + 1j * (gen.random(shape, dtype=np.float64) * 2 - 1)
    return values.astype(dtype)


@contextlib.contextmanager
def _cupy_tf32(on: bool):
    """cupy's float32 GEMMs on TF32 tensor cores while inside (cupy's ``CUPY_TF32`` switch, set and restored)."""
    if not on:
        yield
        return
    from cupy._core import _routines_linalg as linalg  # noqa: PLC0415 - where cupy keeps the switch

    before = linalg.get_compute_type(np.float32)
    linalg.set_compute_type(np.float32, linalg.COMPUTE_TYPE_TF32)
    try:
        yield
    finally:
        linalg.set_compute_type(np.float32, before)


def event_timer(backend) -> Callable:
    """Time ``product()`` as hpcmm times itself: events on the compute stream, one product at a time."""

    def timer(candidate: Candidate, product: Callable[[], None], warmup: int, repeats: int) -> list[float]:
        times = []
        for i in range(warmup + repeats):
            t0 = backend.event(backend.compute_stream)
            product()
            t1 = backend.event(backend.compute_stream)
            backend.event_synchronize(t1)
            if i >= warmup:
                times.append(backend.elapsed(t0, t1))
        return times

    return timer


def _product(backend, candidate: Candidate, a, b, c, tf32: bool) -> Callable[[], None]:
    xp = backend.xp
    if candidate.call == "gemm":
        return lambda: backend.gemm(a, b, c, accumulate=False, stream=backend.compute_stream, tf32=tf32)
    if not backend.on_gpu:
        return lambda: np.matmul(a, b, out=c)

    def on_stream():
        with backend.compute_stream:
            xp.matmul(a, b, out=c)

    return on_stream


def measure_candidates(backend, case, warmup: int = 1, repeats: int = 3, timer: Callable | None = None,
                       seed: int = 7, gemm_order: str = STORED) -> list[dict]:
    """Time every candidate of :func:`candidates` on this device: one row each.

    Parameters
    ----------
    backend : Backend
        The device (its compute stream times GPU products).
    case : bench.Case
        ``dtype``, ``m``, ``n``, ``k``, ``tf32``.
    warmup, repeats : int
        Untimed products per candidate (at least 1), and the rounds of one timed product each.
    timer : callable, optional
        ``timer(candidate, product, warmup, repeats) -> [seconds]``; the tests
        give a fake one.  Default: :func:`event_timer`.
    gemm_order : str
        The operand orders of the run's GEMM for this case (``FC``, ``CC``,
        ``CF`` or ``FF``): the ``hpcmm gemm`` candidate takes them.

    Returns
    -------
    list of dict
        ``candidate``, ``library``, ``a_order``, ``b_order``, ``seconds``
        (median, NaN where it did not run) and ``note`` (why not).
    """
    timer = timer or event_timer(backend)
    warmup = max(int(warmup), 1)
    xp = backend.xp
    dtype = numpy_dtype(case.dtype)
    gen = xp.random.default_rng(seed) if backend.on_gpu else np.random.default_rng(seed)
    device = backend.device if backend.on_gpu else contextlib.nullcontext()
    cands = candidates(backend.on_gpu, gemm_order)
    times: list[list[float]] = [[] for _ in cands]
    notes = [""] * len(cands)
    with device:
        c = backend.empty((case.m, case.n), dtype)
        # Every operand order laid out once, before any clock starts (the copies are no part of a
        # product): A and B row-major as drawn, and column-major copies where a candidate takes them.
        laid = {("A", "C"): _uniform(gen, (case.m, case.k), dtype), ("B", "C"): _uniform(gen, (case.k, case.n), dtype)}
        products: list = [None] * len(cands)
        for i, cand in enumerate(cands):
            try:
                for name, order in (("A", cand.a_order), ("B", cand.b_order)):
                    if (name, order) not in laid:
                        laid[(name, order)] = xp.asfortranarray(laid[(name, "C")])
                products[i] = _product(backend, cand, laid[("A", cand.a_order)], laid[("B", cand.b_order)], c,
                                       case.tf32)
            except Exception as exc:  # noqa: BLE001 - out of memory for a copy: that candidate does not run
                notes[i] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
        backend.synchronize()
        # Rounds of one timed product per candidate, the order rotating from round to round: under a
        # long float64 load the clocks drift, and a fixed order would give the first candidates the
        # cooler GPU (benchmarks/results/2026-11-30/gemm-hint-and-cublaslt.json).  A candidate's first turn takes its warm-ups.
        for turn in range(repeats):
            for i in _rotated(len(cands), turn):
                if notes[i]:
                    continue
                cand = cands[i]
                try:
                    if cand.call == "matmul" and not backend.on_gpu and is_bfloat16(dtype):
                        raise _Skip("numpy has no bfloat16 GEMM")
                    switch = _cupy_tf32(case.tf32 and cand.call == "matmul") if backend.on_gpu \
                        else contextlib.nullcontext()
                    with switch:
                        times[i] += timer(cand, products[i], warmup if turn == 0 else 0, 1)
                except _Skip as exc:
                    notes[i] = str(exc)
                except Exception as exc:  # noqa: BLE001 - one candidate failing must not end the benchmark
                    notes[i] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
        del laid, products, c
    # Which library hpcmm's own call took for the case's shape (hpcmm.execution.gemm_library; GPUs only), in its name.
    lt = any(row["library"] == "cublaslt" and (row["m"], row["n"], row["w"]) == (case.m, case.n, case.k)
             for row in backend.gemm_rows())
    backend.forget_gemm_plans()  # they hold the candidates' operands
    backend.release_cached()
    return [{"candidate": cand.name + (" (cuBLASLt)" if lt and cand.library == "hpcmm" else ""),
             "library": cand.library, "a_order": cand.a_order, "b_order": cand.b_order,
             "seconds": float(np.median(times[i])) if times[i] and not notes[i] else float("nan"),
             "note": notes[i]} for i, cand in enumerate(cands)]


def _rotated(count: int, turn: int) -> list[int]:
    """The candidates' order in round ``turn``: rotated by one each round.

    >>> [_rotated(3, turn) for turn in range(4)]
    [[0, 1, 2], [1, 2, 0], [2, 0, 1], [0, 1, 2]]
    """
    shift = turn % count if count else 0
    return list(range(shift, count)) + list(range(shift))


class _Skip(Exception):
    """A candidate that does not apply to this case."""


def combine(per_device: Sequence[list[dict]]) -> list[dict]:
    """One row per candidate: the mean of its seconds over the devices that measured it.

    A candidate that failed on any device keeps NaN and the first reason.
    """
    rows = []
    for i, first in enumerate(per_device[0]):
        mine = [device_rows[i] for device_rows in per_device]
        seconds = [r["seconds"] for r in mine]
        notes = [r["note"] for r in mine if r["note"]]
        rows.append(dict(first, seconds=float(np.mean(seconds)) if all(s == s for s in seconds) else float("nan"),
                         note=notes[0] if notes else "", devices=len(mine)))
    return rows


def best_index(rows: Sequence[dict]) -> int:
    """The fastest candidate that ran (the first of equals).

    Raises
    ------
    RuntimeError
        No candidate ran; the message holds each one's reason.
    """
    timed = [(r["seconds"], i) for i, r in enumerate(rows) if r["seconds"] == r["seconds"] and r["seconds"] > 0]
    if not timed:
        reasons = "; ".join(f"{r['candidate']}: {r['note'] or 'no time'}" for r in rows)
        raise RuntimeError(f"no one-device reference ran ({reasons})")
    return min(timed)[1]
