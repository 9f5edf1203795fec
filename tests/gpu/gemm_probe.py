"""hpcmm's local GEMM against cuBLASLt's own choice of algorithm, on the shapes a run's steps multiply.

    python3 tests/gpu/gemm_probe.py [--cases CASES] [--repeats R] [--autotune N] [--json FILE]

One device, no MPI.  A case is ``TYPE:MxNxW``: C is m×n row-major and a step adds A·B to it, A m×w
and B w×n in the operand orders the run's GEMM takes for the type (:func:`hpcmm.planning.gemm_orders.gemm_order`;
``tf32`` is float32 on TF32 tensor cores).  For each case:

* ``hpcmm gemm``: hpcmm's own call (``Backend.gemm``, cublasGemmEx with ``beta = 1``), as a step runs it;
* ``nvmath heuristic``: nvmath-python's ``nvmath.linalg.advanced.Matmul`` (cuBLASLt), planned once, with
  the algorithm its heuristics rank first (in place on C with ``beta = 1`` where that nvmath offers it);
* ``nvmath autotuned``: the same object after ``autotune``, which times its candidates and keeps the fastest.

Each is timed by events on one stream, median of ``--repeats`` after one warm-up, and printed in TFLOP/s
with its ratio to ``hpcmm gemm``: where cuBLASLt's choice beats cublasGemmEx on these shapes, hpcmm's
GEMM should take it (benchmarks/results/2026-11-30/gemm-hint-and-cublaslt.json).  Where nvmath does not import, or the device is a CPU (numpy:
only ``hpcmm gemm`` runs), its rows say why.  The default cases are the steps of 2 ranks on 2 GPUs
(16384: C blocks 8192×16384, panels up to 8192 and the ramp's 1024; 32768 for bfloat16; 4096 and 8192).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from hpcmm.execution.backend import make_backend  # noqa: E402
from hpcmm.bench.reference import event_timer  # noqa: E402
from hpcmm.dtypes import numpy_dtype  # noqa: E402
from hpcmm.planning.gemm_orders import gemm_order  # noqa: E402
from hpcmm.model.cost import sweep_operands  # noqa: E402

DEFAULT_CASES = ("float64:8192x16384x8192,float64:8192x16384x1024,tf32:8192x16384x8192,tf32:8192x16384x1024,"
                 "float16:8192x16384x8192,bfloat16:16384x32768x8192,float64:2048x4096x2048,float64:4096x8192x4096")


@dataclasses.dataclass(frozen=True)
class Case:
    dtype: str
    tf32: bool
    m: int
    n: int
    w: int

    @property
    def name(self) -> str:
        return f"{'tf32' if self.tf32 else self.dtype}:{self.m}x{self.n}x{self.w}"

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.w


def parse_cases(text: str) -> list[Case]:
    """``TYPE:MxNxW,...`` → cases (``tf32`` is float32 on TF32 tensor cores)."""
    cases = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        kind, _, shape = item.partition(":")
        try:
            m, n, w = (int(x) for x in shape.lower().split("x"))
        except ValueError:
            raise SystemExit(f"gemm_probe: case {item!r} is not TYPE:MxNxW") from None
        if min(m, n, w) < 1:
            raise SystemExit(f"gemm_probe: case {item!r} has an extent below 1")
        cases.append(Case("float32" if kind == "tf32" else kind, kind == "tf32", m, n, w))
    return cases


def operands(backend, case: Case):
    """A, B and C of the case, random in [-1, 1), A and B in the run's operand orders for the type
    (drawn as ``model measure``'s sweep draws them, :func:`hpcmm.model.cost.sweep_operands`)."""
    kind = "tf32" if case.tf32 else case.dtype
    a, b = sweep_operands(backend.xp, case.m, case.n, case.w, kind, backend.on_gpu)
    c = backend.xp.ascontiguousarray((backend.xp.random.random((case.m, case.n)) * 2 - 1)
                                     .astype(numpy_dtype(case.dtype)))
    return a, b, c, gemm_order(case.dtype, case.tf32, backend.on_gpu)


def timed(backend, product, repeats: int) -> float:
    """Median seconds of ``product()`` over ``repeats`` runs after one warm-up, by events on the compute
    stream, as ``bench`` times its one-device candidates (:func:`hpcmm.bench.reference.event_timer`)."""
    return float(np.median(event_timer(backend)(None, product, 1, repeats)))


def nvmath_rows(backend, case: Case, a, b, c, repeats: int, autotune: int) -> list[dict]:
    """cuBLASLt through nvmath-python: the heuristics' first algorithm, then the autotuned one."""
    rows = [{"method": "nvmath heuristic"}, {"method": "nvmath autotuned"}]
    if not backend.on_gpu:
        for row in rows:
            row["note"] = "not on a GPU"
        return rows
    try:
        from nvmath.linalg import advanced  # noqa: PLC0415 - optional: the peers' kit brings it
    except Exception as exc:  # noqa: BLE001 - any import failure means "not here"
        for row in rows:
            row["note"] = f"nvmath-python does not import: {type(exc).__name__}: {exc}"
        return rows
    options = {}
    fields = {f.name for f in dataclasses.fields(advanced.MatmulOptions)}
    inplace = "inplace" in fields
    if inplace:
        options["inplace"] = True  # C += A·B into C itself, as a step does
    if case.tf32:
        compute = getattr(advanced, "MatmulComputeType", None)
        if compute is None:
            from nvmath.linalg import ComputeType as compute  # noqa: PLC0415 - where older versions keep it
        options["compute_type"] = compute.COMPUTE_32F_FAST_TF32
    how = "in place on C" if inplace else "out of place (this nvmath has no inplace option)"
    stream = backend.compute_stream
    try:
        with backend.device, advanced.Matmul(a, b, c=c, beta=1.0, options=advanced.MatmulOptions(**options),
                                             stream=stream) as mm:
            mm.plan(stream=stream)
            rows[0]["seconds"] = timed(backend, lambda: mm.execute(stream=stream), repeats)
            rows[0]["note"] = f"{how}; {len(mm.algorithms)} algorithm(s) offered"
            try:
                mm.autotune(iterations=autotune, stream=stream)
                rows[1]["seconds"] = timed(backend, lambda: mm.execute(stream=stream), repeats)
                rows[1]["note"] = f"{how}; autotune, {autotune} iterations"
            except Exception as exc:  # noqa: BLE001 - autotune refused: the heuristic row still stands
                rows[1]["note"] = f"autotune: {type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
    except Exception as exc:  # noqa: BLE001 - a shape or type nvmath refuses is noted, not fatal
        for row in rows:
            row.setdefault("note", f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}")
    return rows


def probe(backend, case: Case, repeats: int, autotune: int) -> list[dict]:
    """Every method on one case: rows of method, seconds, TFLOP/s, ratio to hpcmm's GEMM and a note."""
    a, b, c, order = operands(backend, case)
    stream = backend.compute_stream
    own = timed(backend, lambda: backend.gemm(a, b, c, accumulate=True, stream=stream, tf32=case.tf32), repeats)
    rows = [{"method": "hpcmm gemm", "seconds": own, "note": f"cublasGemmEx, orders A:{order[0]} B:{order[1]}"
             if backend.on_gpu else "numpy"}]
    rows += nvmath_rows(backend, case, a, b, c, repeats, autotune)
    for row in rows:
        seconds = row.setdefault("seconds", float("nan"))
        row.update(case=case.name, order=order, tflops=case.flops / seconds / 1e12, over_hpcmm=own / seconds)
        row.setdefault("note", "")
    del a, b, c
    backend.release_cached()
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default=DEFAULT_CASES, help="TYPE:MxNxW,... (default: the 2-rank steps)")
    parser.add_argument("--repeats", type=int, default=10, help="timed products per method (median)")
    parser.add_argument("--autotune", type=int, default=5, help="iterations of nvmath's autotune per algorithm")
    parser.add_argument("--device", default="auto", choices=("auto", "gpu", "cpu"))
    parser.add_argument("--json", default=None, help="also write the rows here")
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.autotune < 1:
        parser.error(f"--repeats {args.repeats} and --autotune {args.autotune} must be at least 1")
    backend = make_backend(args.device, 0, 1)
    rows = []
    print(f"{'case':28} {'method':18} {'TFLOP/s':>10} {'÷ hpcmm':>8}  note", flush=True)
    for case in parse_cases(args.cases):
        for row in probe(backend, case, args.repeats, args.autotune):
            rows.append(row)
            print(f"{row['case']:28} {row['method']:18} {row['tflops']:10.2f} {row['over_hpcmm']:8.3f}  {row['note']}",
                  flush=True)
    backend.close()
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
