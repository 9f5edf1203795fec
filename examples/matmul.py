"""Multiply arrays that 4 ranks hold: one plan, 10 executes, C checked against numpy.

    mpiexec -n 4 python examples/matmul.py [numpy|cupy|torch]
"""
import sys

import numpy as np
from mpi4py import MPI

import hpcmm

comm, kind = MPI.COMM_WORLD, (sys.argv[1:] or ["numpy"])[0]
m, n, k = 1000, 700, 900  # op(A) is m×k; with op_a="T" the program stores A as k×m
rng = np.random.default_rng(0)  # the same seed everywhere: every rank makes the same global matrices
a, b = rng.standard_normal((k, m)), rng.standard_normal((k, n))

with hpcmm.Matmul(comm, m, n, k, "float64", alpha=0.5, op_a="T") as mm:
    plan = mm.plan()  # communicators, buffers, IPC handles, GEMM tuning: once
    if comm.rank == 0:
        print(plan)
    # This rank's blocks, as the plan lays them out (a program would make only its own).
    a_mine, b_mine = plan.layout.block("A", comm.rank, a), plan.layout.block("B", comm.rank, b)
    device = plan.devices[comm.rank]  # this rank's GPU, -1 on the host
    if kind == "cupy":
        import cupy
        with cupy.cuda.Device(max(device, 0)):
            a_mine, b_mine = cupy.asarray(a_mine), cupy.asarray(b_mine)
    elif kind == "torch":
        import torch
        where = f"cuda:{device}" if device >= 0 else "cpu"
        a_mine, b_mine = torch.as_tensor(a_mine, device=where), torch.as_tensor(b_mine, device=where)
    for _ in range(10):
        c_mine = mm.execute(a_mine, b_mine)  # only the product
    c = hpcmm.gather(comm, plan.layout, c_mine)  # rank 0: the whole C
    seconds = mm.last.seconds
error = comm.bcast(np.abs(c - 0.5 * a.T @ b).max() if comm.rank == 0 else None)
if comm.rank == 0:
    print(f"{kind}: 10 products, max error {error:.2e}, last execute {seconds * 1e3:.2f} ms")
sys.exit(0 if error < 1e-10 else 1)
