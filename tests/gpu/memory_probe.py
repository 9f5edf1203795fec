"""Every large device allocation of one ``python -m hpcmm`` run, with where hpcmm asked for it.

    mpiexec -n 1 python tests/gpu/memory_probe.py 40000 float64 [MiB]

Wraps cupy's pool (its allocator) and the backend's IPC-exported buffers, and prints, on each rank,
one line per allocation of at least MiB (default 64) with the pool's bytes in use and held after
it and the innermost hpcmm frames that asked; then the run's prediction (``/memory needed_bytes``)
beside the pool's peak.  What the memory check must count and does not shows as the difference.
"""
import os
import sys
import tempfile
import traceback

import cupy
from mpi4py import MPI

import hpcmm
from hpcmm.execution.backend import GpuBackend

size, dtype = int(sys.argv[1]), sys.argv[2]
least = int(sys.argv[3] if len(sys.argv) > 3 else 64) << 20
rank = MPI.COMM_WORLD.rank
pool = cupy.get_default_memory_pool()
lines = []


def where() -> str:
    frames = [f for f in traceback.extract_stack()[:-2] if f"{os.sep}hpcmm{os.sep}" in f.filename]
    return " < ".join(f"{os.path.basename(f.filename)}:{f.lineno} {f.name}" for f in frames[-3:][::-1])


def malloc(nbytes):
    memory = pool.malloc(nbytes)
    if nbytes >= least:
        lines.append(f"pool {nbytes / 2**30:8.3f} GiB  used {pool.used_bytes() / 2**30:8.3f}  "
                     f"held {pool.total_bytes() / 2**30:8.3f}  {where()}")
    return memory


exported = GpuBackend.allocate_exported


def allocate_exported(self, nbytes):
    if nbytes >= least:
        lines.append(f"ipc  {nbytes / 2**30:8.3f} GiB  {where()}")
    return exported(self, nbytes)


GpuBackend.allocate_exported = allocate_exported
cupy.cuda.set_allocator(malloc)
out = os.path.join(tempfile.mkdtemp(), f"probe-{rank}.h5") if rank == 0 else None
out = MPI.COMM_WORLD.bcast(out)
result = hpcmm.run(hpcmm.RunConfig(m=size, dtype=dtype, iters=1, warmup=0, timeline=False, quiet=True, out=out))
import h5py  # noqa: E402

needed = None
if rank == 0:
    with h5py.File(out, "r") as f:
        needed = [int(x) for x in f["memory"]["needed_bytes"][:]]
for r in range(MPI.COMM_WORLD.size):
    if r == rank:
        print(f"--- rank {rank}: {len(lines)} allocation(s) of at least {least >> 20} MiB", flush=True)
        print("\n".join(lines), flush=True)
        print(f"rank {rank}: pool peak held {pool.total_bytes() / 2**30:.3f} GiB", flush=True)
    MPI.COMM_WORLD.Barrier()
if rank == 0:
    print(f"needed_bytes per rank (GiB): {[round(x / 2**30, 3) for x in needed]}; tflops {result.summary['tflops']:.2f}")
