"""Other libraries' products on the same global problem, where they import, each at its best.

Only public APIs.  Each function returns a :class:`PeerResult`: seconds per
product (the median over the timed products of the slowest rank), the
operations of the product it ran, a note saying how it was called or why it
stopped, and every configuration it tried.  Where the peer cannot run it
raises :class:`PeerUnavailable` with the reason (``not installed`` where it
does not import), which the benchmark prints as a note.  Their data are drawn
as hpcmm draws its own: uniform in [-1, 1).

**cuBLASMp** through nvmath-python, as its documentation recommends for
repeated products: the stateful ``nvmath.distributed.linalg.advanced.Matmul``,
planned once (``plan()``), then ``execute()``d, after warm-up products, the
median of at least :data:`CUBLASMP_MIN_ITERS` timed ones (CUDA events on the
product's stream, a barrier before each).  Operands are column-major
(cuBLASMp's layout) in ``Slab`` distributions, the ones uniform partitions
allow; it runs every pairing of :data:`CUBLASMP_DISTRIBUTIONS` (AllGather +
GEMM with A and C split by rows and B by columns; k split, GEMM +
ReduceScatter, C by rows or by columns) with every algorithm of
:data:`CUBLASMP_ALGOS` (``MatmulOptions(algo_type=...)``; the multicast
algorithms are left out: NVLink multicast stays off).  Each configuration is
screened with one warm-up and :data:`SCREEN_ITERS` timed products; the
fastest is then measured in full on a fresh plan.  TF32 cases ask for
``COMPUTE_32F_FAST_TF32``.

**Heat**: ``ht.matmul`` of two row-split DNDarrays, on a case of its own:
each dimension at most :data:`HEAT_MAX_SIZE` (Heat stages through the host
here and runs long), within a time limit of its own (``limit`` seconds, all
ranks agreeing after each product whether the next still fits).  Its note
says what it did: the size it ran, or that it ran out of time.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import numpy as np
from mpi4py import MPI

from ..dtypes import numpy_dtype

__all__ = ["PeerResult", "PeerUnavailable", "cublasmp", "heat", "timed_within"]

#: The fewest timed products of cuBLASMp's final measurement, and its warm-ups.
CUBLASMP_MIN_ITERS = 5
CUBLASMP_WARMUP = 2
#: Timed products per configuration while screening (after one warm-up).
SCREEN_ITERS = 2
#: (A, B, C) distributions tried, by name of ``nvmath.distributed.distribution.Slab``: X splits rows, Y columns.
CUBLASMP_DISTRIBUTIONS = (("X", "Y", "X"), ("Y", "X", "X"), ("Y", "X", "Y"))
#: ``MatmulAlgoType`` members tried (the multicast ones need NVLink multicast, which stays off).
CUBLASMP_ALGOS = ("DEFAULT", "SPLIT_P2P", "ATOMIC_P2P", "NO_OVERLAP")
#: Heat's case: no dimension larger (the peer stages through the host and runs long).
HEAT_MAX_SIZE = 8192
#: Heat's own time limit (seconds) unless the benchmark is given another.
HEAT_LIMIT = 120.0


class PeerUnavailable(Exception):
    """The peer cannot run this case here (not installed, unsupported layout...)."""


@dataclasses.dataclass
class PeerResult:
    """What one peer did on one case."""

    seconds: float = float("nan")
    flops: float = float("nan")
    note: str = ""
    candidates: list[dict] = dataclasses.field(default_factory=list)

    @property
    def tflops(self) -> float:
        return self.flops / self.seconds / 1e12 if self.seconds == self.seconds and self.seconds > 0 else float("nan")

    @classmethod
    def failed(cls, exc: BaseException) -> PeerResult:
        """A peer that did not run: the reason as its note."""
        note = str(exc) if isinstance(exc, PeerUnavailable) else f"{type(exc).__name__}: {' '.join(str(exc).split())}"
        return cls(note=note[:300])


_NVMATH_READY = False


def _unavailable(package: str, exc: Exception) -> PeerUnavailable:
    """The note for a peer that does not import: ``not installed``, or why it fails to import."""
    if isinstance(exc, ModuleNotFoundError):
        return PeerUnavailable(f"{package} not installed")
    return PeerUnavailable(f"{package} does not import ({type(exc).__name__}: {exc})")


def _median_of_slowest(comm, times: list[float]) -> float:
    # The slowest rank sets the pace.
    return float(comm.allreduce(float(np.median(times)), op=MPI.MAX))


def _flops(m, n, k, dtype) -> float:
    return (8.0 if str(dtype).startswith("complex") else 2.0) * m * n * k


def _nvmath_init(comm, device_id: int):
    global _NVMATH_READY
    try:
        import nvmath.distributed  # noqa: PLC0415
        from nvmath.distributed.distribution import Slab  # noqa: PLC0415
        from nvmath.distributed.linalg import advanced  # noqa: PLC0415
    except Exception as exc:  # noqa: BLE001 - any import failure means "not here"
        raise _unavailable("nvmath-python", exc) from None
    if not _NVMATH_READY:
        # cuBLASMp needs both NVSHMEM (workspace) and NCCL (communication).
        nvmath.distributed.initialize(device_id, comm, backends=["nvshmem", "nccl"])
        _NVMATH_READY = True
    return Slab, advanced


def _cublasmp_checks(comm, backend, m, n, k, dtype) -> None:
    if not backend.on_gpu:
        raise PeerUnavailable("not run: cuBLASMp needs CUDA devices")
    if dtype not in ("float64", "float32", "float16", "bfloat16"):
        raise PeerUnavailable(f"not run for {dtype}")
    size = comm.Get_size()
    gpus = len(set(comm.allgather(backend.describe().get("gpu_uuid"))))
    if gpus < size:
        raise PeerUnavailable(f"NCCL allows one rank per GPU ({size} ranks on {gpus} GPUs)")
    if m % size or n % size or k % size:
        raise PeerUnavailable(f"Slab distributions need m, n, k divisible by {size}")


def cublasmp(comm, backend, m, n, k, dtype, warmup=CUBLASMP_WARMUP, iters=CUBLASMP_MIN_ITERS, tf32=False,
             distributions=CUBLASMP_DISTRIBUTIONS, algos=CUBLASMP_ALGOS) -> PeerResult:
    """cuBLASMp at its best for the shape: every distribution and algorithm screened, the fastest measured."""
    _cublasmp_checks(comm, backend, m, n, k, dtype)
    Slab, advanced = _nvmath_init(comm, backend.device_id)
    cp = backend.cupy
    rank = comm.Get_rank()
    options = {}
    if tf32:
        options["compute_type"] = advanced.MatmulComputeType.COMPUTE_32F_FAST_TF32
    warmup, iters = max(int(warmup), 1), max(int(iters), CUBLASMP_MIN_ITERS)
    stream = cp.cuda.Stream(non_blocking=True)
    operands: dict[tuple[str, str], object] = {}

    def operand(which: str, split: str, shape):
        key = (which, split)
        if key not in operands:
            local = getattr(Slab, split).shape(rank, shape)
            rng = cp.random.default_rng(7 + 1000 * rank + 10 * "AB".index(which) + "XY".index(split))
            with backend.device:
                values = rng.random(local, dtype=np.float64) * 2 - 1
                operands[key] = cp.asfortranarray(values.astype(numpy_dtype(dtype)))
        return operands[key]

    def timed(dist, algo, warm, count) -> float:
        a = operand("A", dist[0], (m, k))
        b = operand("B", dist[1], (k, n))
        opts = advanced.MatmulOptions(algo_type=getattr(advanced.MatmulAlgoType, algo), **options)
        times = []
        with backend.device, advanced.Matmul(a, b, distributions=[getattr(Slab, d) for d in dist],
                                             options=opts, stream=stream) as mm:
            mm.plan()
            for i in range(warm + count):
                comm.Barrier()
                start, stop = cp.cuda.Event(), cp.cuda.Event()
                start.record(stream)
                result = mm.execute(stream=stream)
                stop.record(stream)
                stop.synchronize()
                del result
                if i >= warm:
                    times.append(cp.cuda.get_elapsed_time(start, stop) / 1e3)
        return _median_of_slowest(comm, times)

    rows = []
    configs = [(d, a) for d in distributions for a in algos]
    for dist, algo in configs:
        seconds, note = float("nan"), ""
        try:
            if len(configs) > 1:
                seconds = timed(dist, algo, 1, SCREEN_ITERS)
        except Exception as exc:  # noqa: BLE001 - a configuration nvmath refuses is noted, not fatal
            note = f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
        # Every rank must agree before the next collective plan.
        seconds = comm.allreduce(seconds if note == "" else float("nan"), op=MPI.MAX) if len(configs) > 1 else 0.0
        notes = [x for x in comm.allgather(note) if x]
        rows.append({"peer": "cublasmp", "distribution": "".join(dist), "algo": algo, "phase": "screen",
                     "seconds": seconds if not notes else float("nan"), "note": notes[0] if notes else ""})
    timed_rows = [(r["seconds"], i) for i, r in enumerate(rows) if r["seconds"] == r["seconds"]]
    if not timed_rows:
        raise PeerUnavailable("no configuration ran: " + "; ".join(f"{r['distribution']}/{r['algo']}: {r['note']}"
                                                                    for r in rows))
    best = rows[min(timed_rows)[1]]
    dist = tuple(best["distribution"])
    seconds = timed(dist, best["algo"], warmup, iters)
    rows.append(dict(best, phase="final", seconds=seconds, note=f"median of {iters} after {warmup} warm-up"))
    operands.clear()
    cp.get_default_memory_pool().free_all_blocks()
    how = (f"Matmul Slab {''.join(dist)} algo {best['algo']}, best of {len(configs)}; plan once, {warmup} warm-up, "
           f"median of {iters}")
    return PeerResult(seconds, _flops(m, n, k, dtype), how, rows)


def timed_within(comm, product: Callable[[], None], warmup: int, iters: int, limit: float,
                 clock: Callable[[], float] = time.perf_counter) -> tuple[list[float], str]:
    """Run ``warmup`` then ``iters`` products while the next one still fits in ``limit`` seconds.

    After each product every rank learns the slowest rank's time, and all stop
    together once another product of that length would pass the limit, so no
    rank waits in a collective the others left.

    Returns
    -------
    times : list of float
        The timed products' seconds (the slowest rank's); empty if none ran.
    note : str
        ``""``, or how far it got before the limit.
    """
    start = clock()
    times: list[float] = []
    for i in range(warmup + iters):
        comm.Barrier()
        t0 = clock()
        product()
        elapsed = comm.allreduce(clock() - t0, op=MPI.MAX)
        if i >= warmup:
            times.append(elapsed)
        spent = comm.allreduce(clock() - start, op=MPI.MAX)
        if i + 1 < warmup + iters and spent + elapsed > limit:
            done = max(0, i + 1 - warmup)
            return times, f"timed out: {done} of {iters} timed products within {limit:g} s"
    return times, ""


def heat(comm, backend, m, n, k, dtype, warmup=1, iters=3, limit=HEAT_LIMIT, max_size=HEAT_MAX_SIZE,
         clock: Callable[[], float] = time.perf_counter) -> PeerResult:
    """Heat: ``ht.matmul`` of two row-split DNDarrays on a case of at most ``max_size`` per dimension."""
    try:
        import heat as ht  # noqa: PLC0415
        import torch  # noqa: PLC0415
    except Exception as exc:  # noqa: BLE001
        raise _unavailable("heat", exc) from None
    if dtype not in ("float64", "float32"):
        raise PeerUnavailable(f"not run for {dtype}")
    m, n, k = (min(int(x), int(max_size)) for x in (m, n, k))
    device = "gpu" if backend.on_gpu else "cpu"
    if backend.on_gpu:
        torch.cuda.set_device(backend.device_id)
    ht_dtype = ht.float64 if dtype == "float64" else ht.float32
    a = ht.random.rand(m, k, dtype=ht_dtype, split=0, device=device) * 2 - 1
    b = ht.random.rand(k, n, dtype=ht_dtype, split=0, device=device) * 2 - 1

    def product():
        c = ht.matmul(a, b)
        if backend.on_gpu:
            torch.cuda.synchronize()
        del c

    times, stopped = timed_within(comm, product, warmup, iters, limit, clock)
    a = b = None  # the operands go before the next case's
    shape = f"{m}" if m == n == k else f"{m}x{n}x{k}"
    rows = [{"peer": "heat", "distribution": "split 0 x split 0", "algo": "ht.matmul", "phase": "final",
             "seconds": float(np.median(times)) if times else float("nan"), "note": stopped}]
    if not times:
        return PeerResult(float("nan"), _flops(m, n, k, dtype), f"at {shape}: {stopped}", rows)
    return PeerResult(float(np.median(times)), _flops(m, n, k, dtype),
                      f"at {shape}" + (f" ({stopped})" if stopped else ""), rows)
