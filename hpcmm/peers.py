"""Other libraries' products on the same global problem, where they import.

Only public APIs: NVIDIA cuBLASMp through nvmath-python
(``nvmath.distributed.linalg.advanced.Matmul``, planned once, then executed)
and Heat's ``ht.matmul``.  Each function returns seconds per product (median
over ``iters`` timed products after ``warmup`` untimed ones, as hpcmm's own;
the slowest rank's) or raises :class:`PeerUnavailable` with the reason, which
the benchmark prints as a note (``not installed`` where the peer does not
import).  Their data are drawn as hpcmm draws its own: uniform in [-1, 1).
"""

from __future__ import annotations

import time

import numpy as np
from mpi4py import MPI

__all__ = ["PeerUnavailable", "cublasmp_seconds", "heat_seconds"]


class PeerUnavailable(Exception):
    """The peer cannot run this case here (not installed, unsupported layout...)."""


_NVMATH_READY = False


def _unavailable(package: str, exc: Exception) -> PeerUnavailable:
    """The note for a peer that does not import: ``not installed``, or why it fails to import."""
    if isinstance(exc, ModuleNotFoundError):
        return PeerUnavailable(f"{package} not installed")
    return PeerUnavailable(f"{package} does not import ({type(exc).__name__}: {exc})")


def _median_of_slowest(comm, times: list[float]) -> float:
    # The slowest rank sets the pace.
    return float(comm.allreduce(float(np.median(times)), op=MPI.MAX))


def _nvmath_init(comm, device_id: int):
    global _NVMATH_READY
    try:
        import nvmath.distributed  # noqa: PLC0415
        from nvmath.distributed.distribution import Slab  # noqa: PLC0415
        from nvmath.distributed.linalg.advanced import Matmul  # noqa: PLC0415
    except Exception as exc:  # noqa: BLE001 - any import failure means "not here"
        raise _unavailable("nvmath-python", exc) from None
    if not _NVMATH_READY:
        # cuBLASMp needs both NVSHMEM (workspace) and NCCL (communication).
        nvmath.distributed.initialize(device_id, comm, backends=["nvshmem", "nccl"])
        _NVMATH_READY = True
    return Slab, Matmul


def cublasmp_seconds(comm, backend, m, n, k, dtype, warmup=1, iters=3, tf32=False) -> float:
    """cuBLASMp: A row slabs × B column slabs → C row slabs (AllGather + GEMM)."""
    if not backend.on_gpu:
        raise PeerUnavailable("not run: cuBLASMp needs CUDA devices")
    if dtype not in ("float64", "float32"):
        raise PeerUnavailable(f"not run for {dtype}")
    size = comm.Get_size()
    gpus = len(set(comm.allgather(backend.describe().get("gpu_uuid"))))
    if gpus < size:
        raise PeerUnavailable(f"NCCL allows one rank per GPU ({size} ranks on {gpus} GPUs)")
    if m % size or n % size or k % size:
        raise PeerUnavailable(f"Slab distributions need m, n, k divisible by {size}")
    Slab, Matmul = _nvmath_init(comm, backend.device_id)
    cp = backend.cupy
    rank = comm.Get_rank()
    with backend.device:
        rng = cp.random.default_rng(rank + 1)
        a = cp.asfortranarray((rng.random(Slab.X.shape(rank, (m, k)), dtype=np.float64) * 2 - 1).astype(dtype))
        b = cp.asfortranarray((rng.random(Slab.Y.shape(rank, (k, n)), dtype=np.float64) * 2 - 1).astype(dtype))
        options = None
        if tf32:
            from nvmath.distributed.linalg.advanced import MatmulComputeType, MatmulOptions  # noqa: PLC0415

            options = MatmulOptions(compute_type=MatmulComputeType.COMPUTE_32F_FAST_TF32)
        stream = cp.cuda.Stream(non_blocking=True)
        times = []
        with Matmul(a, b, distributions=[Slab.X, Slab.Y, Slab.X], options=options, stream=stream) as mm:
            mm.plan()
            for i in range(warmup + iters):
                comm.Barrier()
                start, stop = cp.cuda.Event(), cp.cuda.Event()
                start.record(stream)
                mm.execute(stream=stream)
                stop.record(stream)
                stop.synchronize()
                if i >= warmup:
                    times.append(cp.cuda.get_elapsed_time(start, stop) / 1e3)
        del a, b
    return _median_of_slowest(comm, times)


def heat_seconds(comm, backend, m, n, k, dtype, warmup=1, iters=3) -> float:
    """Heat: ``ht.matmul`` of two row-split DNDarrays on the same devices."""
    try:
        import heat as ht  # noqa: PLC0415
        import torch  # noqa: PLC0415
    except Exception as exc:  # noqa: BLE001
        raise _unavailable("heat", exc) from None
    if dtype not in ("float64", "float32"):
        raise PeerUnavailable(f"not run for {dtype}")
    device = "gpu" if backend.on_gpu else "cpu"
    if backend.on_gpu:
        torch.cuda.set_device(backend.device_id)
    ht_dtype = ht.float64 if dtype == "float64" else ht.float32
    a = ht.random.rand(m, k, dtype=ht_dtype, split=0, device=device) * 2 - 1
    b = ht.random.rand(k, n, dtype=ht_dtype, split=0, device=device) * 2 - 1
    times = []
    for i in range(warmup + iters):
        comm.Barrier()
        if backend.on_gpu:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        c = ht.matmul(a, b)
        if backend.on_gpu:
            torch.cuda.synchronize()
        elapsed = time.perf_counter() - t0
        del c
        if i >= warmup:
            times.append(elapsed)
    del a, b
    return _median_of_slowest(comm, times)
