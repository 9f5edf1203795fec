"""Ranks sharing GPUs: MPS state, weights, and one product over weighted blocks, checked.

Launch (a node of 2 GPUs, 3 ranks: GPU 0 holds two)::

    mpiexec -n 3 python3 tests/gpu/shared_gpu_probe.py [--balance share|measured|none] [--json FILE]

Every rank finds its MPS state (:func:`hpcmm.planning.mps.detect`) and device; the
ranks agree on weights (:func:`hpcmm.planning.balance.gather_balance`), take the grid
and placement :func:`hpcmm.geometry.layout.fit_grid` picks, and multiply an uneven
float64 product over the weighted blocks with the engine.  Rank 0 compares C
with numpy's float64 product, prints one line (and the MPS hint where ranks
share a GPU without it) and writes the facts as JSON.  Exit status 0 when C is
right.  Runs on the CPU as well (every rank then shares the host's CPU).
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import time

import numpy as np
from mpi4py import MPI

from hpcmm.execution.backend import make_backend
from hpcmm.planning.balance import MODES, gather_balance
from hpcmm.config import RunConfig
from hpcmm.planning.assemble import engine_for
from hpcmm.io.inputs import generate_block
from hpcmm.geometry.layout import Grid, Layout, fit_grid, predicted_imbalance
from hpcmm.planning.mps import detect, shared_without_mps, sharing_hint
from hpcmm.execution.topology import Topology
from hpcmm.verify import tolerance


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--balance", choices=MODES, default="share")
    parser.add_argument("--shape", default="3001x2003x1999", help="MxNxK")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    m, n, k = (int(x) for x in args.shape.split("x"))

    world = MPI.COMM_WORLD
    node = world.Split_type(MPI.COMM_TYPE_SHARED, key=world.Get_rank())
    backend = make_backend("auto", node.Get_rank(), node.Get_size())
    host = socket.gethostname()
    state = detect(backend.device_id if backend.on_gpu else None)
    t0 = time.perf_counter()
    balance = gather_balance(world, args.balance, backend, host, "float64")
    balance_seconds = time.perf_counter() - t0
    states = world.allgather(state)

    fit = fit_grid(m, n, k, balance.weights, preferred=Grid(*MPI.Compute_dims(world.Get_size(), 2)))
    comm = world.Split(0, fit.order.index(world.Get_rank()))
    topo = Topology.create(comm, RunConfig(grid=(fit.grid.rows, fit.grid.cols)))
    layout = Layout(m, n, k, topo.grid, weights=fit.weights)
    engine = engine_for(topo, backend, layout, RunConfig(dtype="float64", prefetch=1, timeline=False), cuda_aware=False)
    me = topo.rank
    (ar, ac), (br, bc) = layout.a_block(me), layout.b_block(me)
    engine.load(generate_block(3, "A", (m, k), ar, ac, "float64"), generate_block(3, "B", (k, n), br, bc, "float64"))
    engine.multiply()
    times = engine.multiply()
    gemm_seconds = float(times.steps[:, 0].sum())
    pieces = topo.comm.gather((layout.c_block(me), backend.to_host(engine.C), gemm_seconds), root=0)
    steps = engine.steps
    engine.close()
    topo.close()
    comm.Free()

    ok = True
    if pieces is not None:
        a = generate_block(3, "A", (m, k), (0, m), (0, k), "float64")
        b = generate_block(3, "B", (k, n), (0, k), (0, n), "float64")
        c = np.full((m, n), np.nan)
        for ((r0, r1), (c0, c1)), block, _ in pieces:
            c[r0:r1, c0:c1] = block
        error = float(np.max(np.abs(c - a @ b) / (np.abs(a) @ np.abs(b))))
        ok = bool(np.isfinite(c).all() and error <= tolerance("float64", k, steps, False))
        busy = [p[2] for p in pieces]
        facts = {
            "ranks": world.Get_size(), "balance": balance.mode, "weights": list(balance.weights),
            "ranks_per_device": list(balance.ranks_per_device),
            "devices": [d.label for d in balance.devices],
            "rates_tflops": None if balance.rates is None else [r / 1e12 for r in balance.rates],
            "balance_seconds": balance_seconds, "grid": str(fit.grid), "order": list(fit.order),
            "block_sizes": {key: list(v) for key, v in layout.block_sizes().items()},
            "predicted_imbalance": predicted_imbalance(layout),
            "measured_imbalance": float(max(busy) / np.mean(busy) - 1) if np.mean(busy) > 0 else 0.0,
            "mps": [{"active": s.active, "source": s.source, "pipe_dir": s.pipe_dir, "detail": s.detail}
                    for s in states],
            "error": error, "verified": ok,
        }
        print(f"ranks {facts['ranks']} balance {balance.mode} weights "
              f"{[round(w, 3) for w in balance.weights]} grid {fit.grid} rows {facts['block_sizes']['rows']} "
              f"cols {facts['block_sizes']['cols']} imbalance predicted {facts['predicted_imbalance']:.3f} "
              f"measured {facts['measured_imbalance']:.3f} | MPS {sorted({s.active for s in states})} "
              f"({states[0].source}: {states[0].detail}) | error {error:.1e} {'OK' if ok else 'WRONG'}", flush=True)
        hint = sharing_hint(shared_without_mps(balance.devices, [s.active for s in states]))
        if hint and backend.on_gpu:
            print(hint, flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(facts, f, indent=1)
    ok = world.bcast(ok, root=0)
    backend.close()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
