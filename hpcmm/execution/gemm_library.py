"""Which library runs each local GEMM shape: cuBLAS's ``GemmEx`` or cuBLASLt's autotuned algorithm.

``cublasGemmEx`` takes the algorithm its heuristics rank first for a shape.  cuBLASLt, through
nvmath-python's :class:`nvmath.linalg.advanced.Matmul`, can instead time its candidates on the shape
and keep the fastest (``autotune``).  Neither wins everywhere: measured per shape and per product
(``tests/gpu/gemm_probe.py``; benchmarks/results/2026-11-30/gemm-hint-and-cublaslt.json), the
autotuned algorithm wins some float64 and float32 shapes and loses the 16-bit ones, and tf32
products lose beside their panels' re-layout kernels (:mod:`hpcmm.planning.gemm_orders`).

So under ``HPCMM_GEMM_LIBRARY=auto`` (the default; it acts where nvmath-python imports) every new
float64 or float32 shape (:data:`PLANNED_KINDS`; extents, strides, ``beta``) a rank multiplies is
planned once, on its own operands: the cuBLASLt plan is autotuned, then both libraries are timed in
turns and the faster is kept, cuBLASLt only where it is faster by more than :data:`MARGIN`; a shape
whose one GEMM takes over :data:`PLAN_LIMIT_SECONDS` is not planned, nor is one under
:data:`PLAN_FLOOR_SECONDS` (its timings are noise, and planning would cost more than it could gain).
``C`` is saved before and restored after, so a product planned in passing is still exact.  tf32 and the other
types keep ``cublasGemmEx`` (their rows say so), and so does a rank whose GPU other ranks share (no
comparison can time one rank's GEMM alone there); ``gemmex`` keeps it for every shape.  What was chosen,
and the times it was chosen by, go to ``/timings/gemms`` (:meth:`GemmPlans.rows`).

Where nvmath-python is missing, a shape cannot be planned (the device memory for the copy of ``C``,
a layout cuBLASLt refuses) or the device is a CPU, the shape keeps ``cublasGemmEx`` and its row says why.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable

__all__ = ["LIBRARIES", "MARGIN", "PLAN_FLOOR_SECONDS", "PLAN_LIMIT_SECONDS", "PLANNED_KINDS", "GemmPlans",
           "libraries_used", "pick"]

#: ``HPCMM_GEMM_LIBRARY``'s values.
LIBRARIES = ("auto", "gemmex")
#: cuBLASLt is taken for a shape only where its median time is below ``(1 - MARGIN)`` × GemmEx's:
#: the two differ by less than this between rounds of the same call.
MARGIN = 0.01
#: Rounds of the comparison (each times both libraries once, in alternating order), and
#: iterations per candidate of cuBLASLt's autotune.
ROUNDS = 3
AUTOTUNE_ITERATIONS = 3
#: A shape whose one GEMM takes longer than this is not planned: planning runs some 30 of them (the
#: autotune's candidates and the comparison), and the measured gains were on shapes of milliseconds
#: (float32 16384×32768×8192, 0.16 s, gained nothing; 32768³ on one GPU would cost some 40 s).
PLAN_LIMIT_SECONDS = 0.1
#: Nor is a shape whose one GEMM takes less than this: its event timings are launch noise (a pick between
#: algorithms by noise), the planning's some 30 GEMMs and cuBLASLt's plan cost more host time than the shape
#: could ever gain in a run, and the smallest shape measured to gain took 0.7 ms (float64 2048×4096×2048).
PLAN_FLOOR_SECONDS = 1e-4
#: The kinds of GEMM (type, or ``tf32``) that ``auto`` plans: where cuBLASLt's choice gained in products
#: (the module's measurements); complex types were not measured.
PLANNED_KINDS = ("float64", "float32")


def pick(gemmex_seconds: list[float], cublaslt_seconds: list[float], margin: float = MARGIN) -> str:
    """``"cublaslt"`` where its median time beats GemmEx's by more than ``margin``, else ``"gemmex"``.

    >>> pick([1.0, 1.0, 1.1], [0.9, 0.95, 0.9])
    'cublaslt'
    >>> pick([1.0, 1.0, 1.0], [0.995, 0.995, 0.995])
    'gemmex'
    """
    if not cublaslt_seconds:
        return "gemmex"
    faster = statistics.median(cublaslt_seconds) < (1 - margin) * statistics.median(gemmex_seconds)
    return "cublaslt" if faster else "gemmex"


def libraries_used(rows: list[dict], on_gpu: bool) -> str:
    """What ran the GEMMs of a run, in words (the summary's ``gemm_library_used``), from every rank's rows.

    >>> libraries_used([{"library": "cublaslt"}, {"library": "gemmex"}, {"library": "cublaslt"}], True)
    'cuBLASLt for 2 of 3 shapes, cublasGemmEx for the rest'
    >>> libraries_used([], False)
    'numpy'
    """
    if not on_gpu:
        return "numpy"
    lt = sum(row["library"] == "cublaslt" for row in rows)
    if lt == 0:
        return "cublasGemmEx"
    if lt == len(rows):
        return "cuBLASLt"
    return f"cuBLASLt for {lt} of {len(rows)} shapes, cublasGemmEx for the rest"


@dataclasses.dataclass
class _Plan:
    library: str
    row: dict
    matmul: object = None


class GemmPlans:
    """One library per GEMM shape, chosen the first time the shape comes (see the module).

    Parameters
    ----------
    mode : str
        ``auto`` or ``gemmex`` (:data:`LIBRARIES`).
    gemmex : callable
        ``gemmex(a, b, c, accumulate, stream, tf32)``: the ``cublasGemmEx`` call.
    timer : callable
        ``timer(product, stream) -> seconds``: one product timed on ``stream`` (events on a GPU).
    advanced : module or None
        ``nvmath.linalg.advanced`` (``None``: imported at the first shape to plan, where it imports, so
        that a run with nothing to plan never loads it).
    on_gpu : bool
        cuBLASLt runs on GPUs only.
    sharers : int
        Ranks on this rank's GPU (this one included).  Where several share it, nothing is planned: their
        kernels run between or beside the comparison's (time-sliced, or together under MPS), so its
        timings would be of them too, and every sharer would autotune at once.
    """

    def __init__(self, mode: str, gemmex: Callable, timer: Callable, advanced=None, on_gpu: bool = True,
                 sharers: int = 1) -> None:
        if mode not in LIBRARIES:
            raise ValueError(f"gemm library {mode!r}: expected one of {', '.join(LIBRARIES)}")
        self.mode = mode
        self._gemmex = gemmex
        self._timer = timer
        self._plans: dict[tuple, _Plan] = {}
        self._advanced, self.unavailable = advanced, ""
        if mode == "gemmex":
            self.unavailable = "HPCMM_GEMM_LIBRARY=gemmex"
        elif not on_gpu:
            self.unavailable = "not on a GPU"
        elif sharers > 1:
            self.unavailable = f"{sharers} ranks share this GPU: the comparison would time their kernels too"

    def _cublaslt(self):
        """``nvmath.linalg.advanced``, imported on first need; ``None`` (and :attr:`unavailable` says why)."""
        if self._advanced is None and not self.unavailable:
            try:
                from nvmath.linalg import advanced  # noqa: PLC0415 - optional dependency
                self._advanced = advanced
            except Exception as exc:  # noqa: BLE001 - any failure to import means "not here"
                self.unavailable = f"nvmath-python does not import ({type(exc).__name__})"
        return None if self.unavailable else self._advanced

    def __call__(self, a, b, c, accumulate: bool, stream, tf32: bool) -> None:
        """``c (+)= a @ b`` on ``stream`` with the shape's library (planned on its first call)."""
        key = (c.dtype.str, bool(tf32), bool(accumulate), a.shape, a.strides, b.shape, b.strides, c.shape, c.strides)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = self._plan(a, b, c, accumulate, stream, tf32)
        if plan.library == "cublaslt":
            plan.matmul.reset_operands(a=a, b=b, c=c, stream=stream)
            plan.matmul.execute(stream=stream)
        else:
            self._gemmex(a, b, c, accumulate, stream, tf32)

    def rows(self) -> list[dict]:
        """One row per planned shape, in the order they came (``/timings/gemms``)."""
        return [plan.row for plan in self._plans.values()]

    def close(self) -> None:
        """Free every cuBLASLt plan (its workspace, its hold on the operands) and forget every shape."""
        for plan in self._plans.values():
            if plan.matmul is not None:
                plan.matmul.free()
                plan.matmul = None
        self._plans.clear()

    # -- planning a shape ------------------------------------------------------
    def _plan(self, a, b, c, accumulate: bool, stream, tf32: bool) -> _Plan:
        row = {"m": int(c.shape[0]), "n": int(c.shape[1]), "w": int(a.shape[1]),
               "dtype": "tf32" if tf32 else c.dtype.name, "beta": int(accumulate), "library": "gemmex",
               "gemmex_seconds": math.nan, "cublaslt_seconds": math.nan, "note": self.unavailable}
        if self.unavailable:
            return _Plan("gemmex", row)
        if row["dtype"] not in PLANNED_KINDS:
            row["note"] = f"{row['dtype']}: cublasGemmEx, as measured in products (hpcmm.execution.gemm_library)"
            return _Plan("gemmex", row)
        if self._cublaslt() is None:
            row["note"] = self.unavailable
            return _Plan("gemmex", row)
        saved = matmul = None
        library = "gemmex"
        try:
            with stream:
                saved = c.copy()

            def ex():
                self._gemmex(a, b, c, accumulate, stream, tf32)

            ex()  # untimed: first-call costs stay out of every timing
            once = self._timer(ex, stream)
            if once > PLAN_LIMIT_SECONDS:
                row.update(gemmex_seconds=float(once), note=f"not planned: one GEMM takes {once:.3f} s, "
                                                            f"over {PLAN_LIMIT_SECONDS} s (hpcmm.execution.gemm_library)")
                return _Plan("gemmex", row)
            if once < PLAN_FLOOR_SECONDS:
                row.update(gemmex_seconds=float(once),
                           note=f"not planned: one GEMM takes {1e6 * once:.1f} us, "
                                f"under {1e6 * PLAN_FLOOR_SECONDS:.0f} us (hpcmm.execution.gemm_library)")
                return _Plan("gemmex", row)
            matmul = self._matmul(a, b, c, accumulate, stream, tf32)

            def lt():
                matmul.execute(stream=stream)

            times = {"gemmex": [], "cublaslt": []}
            lt()  # untimed, as GemmEx's first call was
            for r in range(ROUNDS):
                for name in (("gemmex", "cublaslt") if r % 2 == 0 else ("cublaslt", "gemmex")):
                    times[name].append(self._timer(ex if name == "gemmex" else lt, stream))
            library = pick(times["gemmex"], times["cublaslt"])
            row.update(library=library, gemmex_seconds=float(statistics.median(times["gemmex"])),
                       cublaslt_seconds=float(statistics.median(times["cublaslt"])),
                       note=f"cuBLASLt autotuned over {len(matmul.algorithms)} algorithm(s), "
                            f"{ROUNDS} rounds each, margin {MARGIN:.0%}")
        except Exception as exc:  # noqa: BLE001 - a shape cuBLASLt cannot take keeps GemmEx
            library = "gemmex"
            row.update(note=f"cuBLASLt not planned: {type(exc).__name__}: {' '.join(str(exc).split())[:160]}")
        finally:
            if saved is not None:
                with stream:
                    c[...] = saved  # the planning's products added to C: put back what the step found
                del saved
        if library != "cublaslt" and matmul is not None:
            matmul.free()
            matmul = None
        return _Plan(library, row, matmul)

    def _matmul(self, a, b, c, accumulate: bool, stream, tf32: bool):
        """cuBLASLt's plan for ``c (+)= a @ b`` in place on ``c``, autotuned on these operands."""
        advanced = self._advanced
        options = {"inplace": True}
        if tf32:
            compute = getattr(advanced, "MatmulComputeType", None)
            if compute is None:
                from nvmath.linalg import ComputeType as compute  # noqa: PLC0415 - where older versions keep it
            options["compute_type"] = compute.COMPUTE_32F_FAST_TF32
        matmul = advanced.Matmul(a, b, c=c, alpha=1.0, beta=1.0 if accumulate else 0.0,
                                 options=advanced.MatmulOptions(**options), stream=stream)
        try:
            matmul.plan(stream=stream)
            matmul.autotune(iterations=AUTOTUNE_ITERATIONS, stream=stream)
        except BaseException:
            matmul.free()
            raise
        return matmul
