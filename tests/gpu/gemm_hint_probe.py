"""hpcmm's GEMM call against cupy's on the same operands, in turns, to find where float64 loses 6 %.

    python3 tests/gpu/gemm_hint_probe.py [--cases CASES] [--rounds R] [--json FILE]

One device, no MPI.  In both speed runs with one-GPU candidates (benchmarks/results/2026-11-30/) ``cupy.matmul``
with A column-major and B row-major ran float64 16384³ 5.6–5.9 % faster than hpcmm's own call on the
same orders, while float32 matched within 0.1 %.  Both call ``cublasGemmEx``; cupy passes the
algorithm hint ``CUBLAS_GEMM_DEFAULT_TENSOR_OP`` (99) where hpcmm passes ``CUBLAS_GEMM_DEFAULT`` (-1),
and the benchmark times cupy's candidates before hpcmm's, with the clocks drifting under float64
load.  This probe separates the two: for each case (``TYPE:MxNxK``, A m×k column-major, B k×n
row-major, C m×n row-major, ``beta = 0``) it times

* ``cupy matmul``: ``cupy.matmul(a, b, out=c)`` on the compute stream (numpy's on a CPU);
* ``hpcmm gemm``: :meth:`Backend.gemm`, hint -1, as a run calls it;
* ``hpcmm gemm, hint 99``: the same call with cupy's hint (GPUs only),

in ``--rounds`` rounds, each timing every contender once (one warm-up, three products, events on one
stream), the order rotating from round to round so that no contender always runs first or last.
It prints the median TFLOP/s of each and its ratio to ``cupy matmul``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import hpcmm.execution.backend as backend_module  # noqa: E402
from hpcmm.execution.backend import make_backend  # noqa: E402
from hpcmm.bench.reference import event_timer  # noqa: E402
from hpcmm.dtypes import numpy_dtype  # noqa: E402

DEFAULT_CASES = "float64:16384x16384x16384,float64:8192x16384x8192,float64:8192x8192x8192,float32:16384x16384x16384"
#: cuBLAS's algorithm hints (cublas_api.h): what hpcmm passes, and what cupy passes from compute capability 8.0.
HINT_DEFAULT, HINT_TENSOR_OP = -1, 99


def parse_cases(text: str) -> list[tuple[str, int, int, int]]:
    """``TYPE:MxNxK,...`` into ``(type, m, n, k)``."""
    cases = []
    for item in filter(None, (t.strip() for t in text.split(","))):
        dtype, _, dims = item.partition(":")
        m, n, k = (int(x) for x in dims.lower().split("x"))
        numpy_dtype(dtype)  # an unknown type fails here, before any work
        cases.append((dtype, m, n, k))
    return cases


def rotations(names: list[str], rounds: int) -> list[list[str]]:
    """The contenders' order in each round: rotated by one each round.

    >>> rotations(["a", "b", "c"], 4)
    [['a', 'b', 'c'], ['b', 'c', 'a'], ['c', 'a', 'b'], ['a', 'b', 'c']]
    """
    return [names[r % len(names):] + names[: r % len(names)] for r in range(rounds)]


def contenders(backend, a, b, c) -> dict:
    """Name → a product writing ``c = a @ b`` on the compute stream."""
    xp = backend.xp

    def matmul():
        if backend.on_gpu:
            with backend.compute_stream:
                xp.matmul(a, b, out=c)
        else:
            np.matmul(a, b, out=c)

    def gemm(hint):
        def product():
            saved, backend_module._GEMM_DEFAULT = backend_module._GEMM_DEFAULT, hint
            try:
                backend.gemm(a, b, c, accumulate=False, stream=backend.compute_stream)
            finally:
                backend_module._GEMM_DEFAULT = saved
        return product

    found = {"cupy matmul": matmul, "hpcmm gemm": gemm(HINT_DEFAULT)}
    if backend.on_gpu:
        found["hpcmm gemm, hint 99"] = gemm(HINT_TENSOR_OP)
    return found


def probe(backend, case, rounds: int, timer=None) -> list[dict]:
    """One row per contender: ``case``, ``contender``, ``tflops`` (median over the rounds), ``rounds``."""
    dtype, m, n, k = case
    xp = backend.xp
    gen = xp.random.default_rng(3) if backend.on_gpu else np.random.default_rng(3)
    a = xp.asfortranarray(gen.random((m, k)).astype(numpy_dtype(dtype)) - 0.5)
    b = xp.ascontiguousarray(gen.random((k, n)).astype(numpy_dtype(dtype)) - 0.5)
    c = backend.empty((m, n), numpy_dtype(dtype))
    products = contenders(backend, a, b, c)
    timer = timer or event_timer(backend)
    seconds: dict[str, list[float]] = {name: [] for name in products}
    for order in rotations(list(products), rounds):
        for name in order:
            seconds[name].extend(timer(name, products[name], 1, 3))
    flops = 2.0 * m * n * k
    return [{"case": f"{dtype}:{m}x{n}x{k}", "contender": name, "tflops": flops / float(np.median(s)) / 1e12,
             "rounds": rounds} for name, s in seconds.items()]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=DEFAULT_CASES)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--device", default="auto", choices=("auto", "gpu", "cpu"))
    parser.add_argument("--json", help="write the rows here too")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error(f"--rounds={args.rounds}: at least 1")
    cases = parse_cases(args.cases)
    backend = make_backend(args.device, 0, 1)
    rows = []
    try:
        for case in cases:
            mine = probe(backend, case, args.rounds)
            base = next(r["tflops"] for r in mine if r["contender"] == "cupy matmul")
            for r in mine:
                r["over_cupy"] = r["tflops"] / base
                print(f"{r['case']:<28} {r['contender']:<22} {r['tflops']:9.2f} TFLOP/s  {r['over_cupy']:.3f}",
                      flush=True)
            rows += mine
    finally:
        backend.close()
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
