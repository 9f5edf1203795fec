"""The GEMM rate one GPU gives the ranks that share it, with no communication at all.

Launch (every rank on the same GPU)::

    mpiexec -n 4 python3 tests/gpu/sharing_ceiling.py --block 8192x4096 --depth 16384 --panel 2048
    mpiexec -n 1 python3 tests/gpu/sharing_ceiling.py --block 16384x8192 --depth 16384 --panel 8192

Each rank runs the GEMMs of its share of one SUMMA product as hpcmm's engine
calls them (``backend.gemm``: A column-major, B row-major, C row-major, the
first step with ``beta = 0`` and the rest accumulating), ``--depth / --panel``
steps on a ``--block`` C block, and nothing else.  The ranks start together
(a barrier after a warm-up), and the rate is the flops of all the ranks over
the time from the first start to the last end (one host's monotonic clock),
the median of ``--repeats``.  So the rate of 4 ranks of one GPU against 1 rank
doing the same total work says what sharing a GPU costs the GEMMs alone, with
and without an MPS daemon, apart from any transfer: the ceiling of a run with
ranks sharing GPUs.  Rank 0 prints one line (and, with ``--json``, writes it).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from mpi4py import MPI

from hpcmm.execution.backend import GpuBackend
from hpcmm.planning.mps import detect
from hpcmm.dtypes import product_flops


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--block", default="8192x4096", help="each rank's C block, ROWSxCOLS")
    parser.add_argument("--depth", type=int, default=16384, help="k: the depth of the whole product")
    parser.add_argument("--panel", type=int, default=2048, help="the depth of each GEMM")
    parser.add_argument("--dtype", default="float64")
    parser.add_argument("--gpu", type=int, default=0, help="the GPU every rank uses")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    rows, cols = (int(x) for x in args.block.lower().split("x"))
    backend = GpuBackend(args.gpu)
    cp = backend.cupy
    with backend.device:
        rng = cp.random.default_rng(comm.rank + 1)
        a = cp.asfortranarray(rng.standard_normal((rows, args.depth)).astype(args.dtype))
        b = rng.standard_normal((args.depth, cols)).astype(args.dtype)
        c = cp.empty((rows, cols), dtype=args.dtype)
    backend.synchronize()  # the operands, made on cupy's stream, before any GEMM on the compute stream
    steps = [(s, min(s + args.panel, args.depth)) for s in range(0, args.depth, args.panel)]

    def product() -> None:
        for i, (lo, hi) in enumerate(steps):
            backend.gemm(a[:, lo:hi], b[lo:hi, :], c, accumulate=i > 0)
        backend.synchronize()

    product()  # warm-up: cuBLAS's handle and kernels, and the MPS client's connection
    spans = []
    for _ in range(args.repeats):
        comm.Barrier()
        t0 = time.monotonic()
        product()
        t1 = time.monotonic()
        first, last = comm.allreduce(t0, MPI.MIN), comm.allreduce(t1, MPI.MAX)
        spans.append(last - first)
    flops = product_flops(rows, cols, args.depth, args.dtype) * comm.size
    span = statistics.median(spans)
    state = detect(args.gpu)
    facts = {"ranks": comm.size, "block": [rows, cols], "depth": args.depth, "panel": args.panel,
             "dtype": args.dtype, "mps": bool(state.active), "seconds": spans, "median_seconds": span,
             "tflops": flops / span / 1e12}
    if comm.rank == 0:
        print(f"sharing ceiling: {comm.size} rank(s) on GPU {args.gpu}, mps={facts['mps']}, block {rows}x{cols}, "
              f"depth {args.depth} in panels of {args.panel}, {args.dtype}: {facts['tflops']:.2f} TFLOP/s "
              f"(median of {args.repeats}: {span * 1e3:.2f} ms; runs "
              + " ".join(f"{s * 1e3:.2f}" for s in spans) + ")", flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(facts, f, indent=1)
    backend.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
