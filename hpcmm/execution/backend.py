"""The array side of a run: numpy on CPU, cupy on GPU.

A backend owns the array module, the local GEMM, the two streams (compute and
communication), events and timers, pinned host buffers and, on the GPU, the
CUDA IPC calls.  Transports and the engine talk to it, never to cupy
directly, so the same engine code runs on a laptop and on a GPU node.
:class:`Backend` is the contract; :class:`CpuBackend` and :class:`GpuBackend`
implement it.

On the CPU there are no streams: work is done when the call returns, events
are host timestamps, and "waiting on an event" is free.
"""

from __future__ import annotations

import abc
import os
import time
from typing import Any

import numpy as np

from ..dtypes import host_matmul, is_bfloat16
from ..errors import InputError
from . import host_blas

__all__ = ["Backend", "CpuBackend", "GpuBackend", "gpu_count", "host_memory", "make_backend", "orders"]


def _import_cupy():
    try:
        import cupy  # noqa: PLC0415 - optional dependency
    except Exception:  # noqa: BLE001 - any failure means "no usable cupy"
        return None
    return cupy


def gpu_count() -> int:
    """GPUs this process can see (0 when cupy or the driver is missing)."""
    cupy = _import_cupy()
    if cupy is None:
        return 0
    try:
        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:  # noqa: BLE001 - no driver, no device
        return 0


def _meminfo_available() -> int | None:
    """``MemAvailable`` of /proc/meminfo in bytes (Linux), or ``None``."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cgroup_memory_limit() -> int | None:
    """The tightest memory limit on this process's cgroup and its parents (v2 or v1), or ``None``.

    Batch systems set it on the job's cgroup, above the step's and the task's.
    """
    try:
        with open("/proc/self/cgroup", encoding="ascii") as f:
            lines = [line.rstrip("\n").split(":", 2) for line in f]
    except OSError:
        return None
    limits = []
    for fields in lines:
        if len(fields) != 3:
            continue
        hid, controllers, path = fields
        if hid == "0" and not controllers:
            root, name = "/sys/fs/cgroup", "memory.max"
        elif "memory" in controllers.split(","):
            root, name = "/sys/fs/cgroup/memory", "memory.limit_in_bytes"
        else:
            continue
        parts = [p for p in path.split("/") if p]
        # Inside a container the path may name a hierarchy it cannot see: those reads fail.
        for depth in range(len(parts), -1, -1):
            try:
                with open("/".join([root, *parts[:depth], name]), encoding="ascii") as f:
                    text = f.read().strip()
            except OSError:
                continue
            if text.isdigit():  # "max": no limit at this level
                limits.append(int(text))
    return min(limits) if limits else None


def host_memory() -> tuple[int, int]:
    """``(free, total)`` bytes of the host.

    Free is what the kernel can hand out without swapping (``MemAvailable``:
    free memory alone leaves out the page cache it drops on demand), no more
    than the memory limit of this process's cgroup (a batch job's share of
    the node, beyond which the job is killed).
    """
    pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    avail = _meminfo_available()
    if avail is None:
        try:
            avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError):
            avail = pages
    limit = _cgroup_memory_limit()
    if limit is not None and limit < pages:
        avail = min(avail, limit)
    return avail, pages


def orders(x) -> dict[str, int]:
    """The memory orders a 2-D array can be passed in to BLAS, each with its leading dimension.

    ``{"C": ld}`` where each row is contiguous and rows lie ``ld >= columns``
    elements apart, ``{"F": ld}`` likewise by columns; both where either
    describes it (one row or column, or an empty array), none for any other
    strides.  Read from the strides, not the contiguity flags, so that a view
    of a padded block (``block[:, :n]``) is row-major with ``ld`` its padded
    width.  An axis of one element has no stride to speak of: its leading
    dimension is the extent of the other axis (at least 1).

    Examples
    --------
    >>> orders(np.empty((6, 16))[:, :5])
    {'C': 16}
    >>> orders(np.empty((16, 3), order="F")[:5])
    {'F': 16}
    >>> orders(np.empty((1, 4)))
    {'C': 4, 'F': 1}
    """
    rows, cols = x.shape
    row_step, col_step = x.strides
    found = {}
    for order, ld in (("C", _leading(rows, row_step, cols, col_step, x.dtype.itemsize)),
                      ("F", _leading(cols, col_step, rows, row_step, x.dtype.itemsize))):
        if ld is not None:
            found[order] = ld
    return found


def _leading(outer: int, outer_step: int, inner: int, inner_step: int, item: int) -> int | None:
    """The leading dimension where the ``inner`` axis is contiguous, or ``None``."""
    if inner > 1 and inner_step != item:
        return None
    if outer <= 1:
        return max(inner, 1)
    if outer_step % item or outer_step // item < max(inner, 1):
        return None
    return outer_step // item


def _operand(x, prefer: str, what: str) -> tuple[str, int]:
    """``(order, ld)`` of a GEMM operand, ``prefer`` where both describe it."""
    found = orders(x)
    if not found:
        raise ValueError(f"gemm wants {what} row- or column-major with a leading dimension, not shape "
                         f"{x.shape} strides {x.strides}")
    order = prefer if prefer in found else next(iter(found))
    return order, found[order]


class Backend(abc.ABC):
    """What the engine and the transports need from an array library.

    :class:`GpuBackend` adds the CUDA IPC calls of
    :class:`~hpcmm.execution.transport.ipc.IpcPeerMemory`: the transports reach CUDA only
    through the backend.

    Attributes
    ----------
    name : str
        ``numpy`` or ``cupy``, as the results file records it.
    on_gpu : bool
    xp : module
        The array module (numpy or cupy).
    device_id : int
        The GPU this rank uses (0 on the CPU: every rank of a node shares the host).
    exported_bytes : int
        Device bytes allocated outside the array pool for node peers to read
        (CUDA IPC), counted in :meth:`peak_memory`; 0 on the CPU.
    compute_stream, comm_stream : stream or None
        Where GEMMs and transfers are queued (``None`` on the CPU: no streams).
    """

    name: str
    on_gpu: bool
    xp: Any
    device_id: int
    exported_bytes: int
    compute_stream: Any
    comm_stream: Any

    # -- memory ---------------------------------------------------------------
    @abc.abstractmethod
    def empty(self, shape, dtype, order="C"):
        """An uninitialized array where the blocks live."""

    def poison(self, array) -> None:
        """Fill with NaN so that an element the run never writes shows up."""
        if array.size:
            array.fill(np.nan)

    @abc.abstractmethod
    def from_host(self, array, order="C"):
        """A copy of a host array where the blocks live."""

    @abc.abstractmethod
    def to_host(self, array) -> np.ndarray:
        """A host copy of ``array``."""

    @abc.abstractmethod
    def pinned_empty(self, nbytes: int) -> np.ndarray:
        """A host byte buffer the device can copy to and from directly."""

    @abc.abstractmethod
    def memory_info(self) -> tuple[int, int]:
        """``(free, total)`` bytes where the blocks live."""

    @abc.abstractmethod
    def peak_memory(self) -> int:
        """The most bytes this process has held where the blocks live."""

    def device_used(self) -> int:
        """Bytes in use on this rank's device by the driver's count, every process on it together
        (CUDA contexts and libraries included); 0 on the CPU, where :meth:`peak_memory` says it."""
        return 0

    def release_cached(self) -> None:
        """Hand memory that freed arrays left cached back to the device (nothing to do on a CPU).

        Blocks of another size come next (the benchmark's candidates, the
        blocks of a re-balanced layout), and a cache of the old sizes cannot
        serve them.
        """

    # -- streams and events ---------------------------------------------------
    @abc.abstractmethod
    def event(self, stream=None):
        """Record an event on ``stream`` (default: the compute stream)."""

    @abc.abstractmethod
    def wait(self, stream, event) -> None:
        """Make ``stream`` wait for ``event`` (no host wait; ``None``: nothing to wait for)."""

    @abc.abstractmethod
    def event_synchronize(self, event) -> None:
        """Block the host until ``event`` has happened (``None``: return at once)."""

    def event_done(self, event) -> bool:
        """Whether ``event`` has happened, without waiting (the host's events always have)."""
        return True

    @abc.abstractmethod
    def elapsed(self, start, stop) -> float:
        """Seconds between two events."""

    @abc.abstractmethod
    def synchronize(self) -> None:
        """Wait for all work of this rank's device."""

    @abc.abstractmethod
    def stream_synchronize(self, stream) -> None:
        """Wait for the work queued on ``stream``."""

    # -- the local product ----------------------------------------------------
    @abc.abstractmethod
    def gemm(self, a, b, c, accumulate: bool, stream=None, tf32: bool = False) -> None:
        """``c = a @ b`` or ``c += a @ b``; ``a`` and ``b`` each row- or column-major, ``c`` row-major.

        Each may have a leading dimension larger than its extent (a padded
        block's view, :func:`~hpcmm.geometry.layout.padded`): one unit stride, the other
        at least the extent (:func:`orders`).
        """

    def use_gemm_library(self, mode: str, sharers: int = 1) -> None:
        """Which library runs the local GEMMs (:mod:`hpcmm.execution.gemm_library`), with ``sharers`` ranks on this
        device; only GPUs have a choice."""

    def gemm_rows(self) -> list[dict]:
        """The GEMM shapes planned so far and the library each got (``/timings/gemms``); none on a CPU."""
        return []

    def forget_gemm_plans(self) -> None:
        """Free the GEMM shapes' plans (and their hold on the operands they last ran on); the next call of
        a shape plans it again."""

    @abc.abstractmethod
    def copy(self, dst, src, stream=None) -> None:
        """Copy ``src`` into ``dst`` (same size, host or device) on ``stream``."""

    @abc.abstractmethod
    def relayout(self, dst, src, stream=None) -> None:
        """Copy the 2-D ``src`` into ``dst`` of the same shape and the other memory order, on ``stream``.

        Each is row- or column-major with a leading dimension of at least its
        extent (:func:`orders`: a padded view will do); where their orders
        agree (or the shape has one row or column) this is a plain copy.
        """

    @abc.abstractmethod
    def describe(self) -> dict[str, str]:
        """What the results file records about this backend (``backend``, GPU name, ...)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release what the backend holds (streams, pools, scratch buffers)."""


# A CPU's ``C += A·B`` as one BLAS call with beta = 1 where numpy's BLAS allows it (:mod:`.host_blas`), not a
# GEMM into scratch followed by numpy's one-thread add.
ACCUMULATE_IN_BLAS = True


class CpuBackend(Backend):
    """numpy on the host; BLAS does the GEMM.

    There are no streams: work is done when the call returns, events are host
    timestamps, and "waiting on an event" is free.
    """

    name = "numpy"
    on_gpu = False
    xp = np

    def __init__(self) -> None:
        self.device_id = 0
        self.exported_bytes = 0
        self.compute_stream = self.comm_stream = None
        self._scratch: dict[tuple, np.ndarray] = {}

    # -- memory ---------------------------------------------------------------
    def empty(self, shape, dtype, order="C"):
        return np.empty(shape, dtype=dtype, order=order)

    def from_host(self, array, order="C"):
        return np.asarray(np.asarray(array), order=order)

    def to_host(self, array) -> np.ndarray:
        return np.asarray(array)

    def pinned_empty(self, nbytes: int) -> np.ndarray:
        return np.empty(nbytes, dtype=np.uint8)

    def memory_info(self) -> tuple[int, int]:
        """``(free, total)`` bytes of the host (:func:`host_memory`)."""
        return host_memory()

    def peak_memory(self) -> int:
        import resource  # noqa: PLC0415

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    # -- streams and events ---------------------------------------------------
    def event(self, stream=None):
        """The current time: on the host, work is done when its call returns."""
        return time.perf_counter()

    def wait(self, stream, event) -> None:
        pass

    def event_synchronize(self, event) -> None:
        pass

    def elapsed(self, start, stop) -> float:
        return float(stop - start)

    def synchronize(self) -> None:
        pass

    def stream_synchronize(self, stream) -> None:
        pass

    # -- the local product ----------------------------------------------------
    def gemm(self, a, b, c, accumulate: bool, stream=None, tf32: bool = False) -> None:
        if c.size == 0:
            return
        if is_bfloat16(c.dtype):
            # numpy has no bfloat16 GEMM: a float32 one, C added in float32, one rounding to bfloat16.
            product = host_matmul(a, b)
            if accumulate:
                product += c.astype(np.float32)
            c[...] = product.astype(c.dtype)
            return
        if not accumulate:
            np.matmul(a, b, out=c)
            return
        if ACCUMULATE_IN_BLAS and host_blas.accumulate(a, b, c):
            return
        key = (c.shape, c.dtype.str)
        tmp = self._scratch.get(key)
        if tmp is None:
            tmp = self._scratch[key] = np.empty_like(c)
        np.matmul(a, b, out=tmp)
        c += tmp

    def copy(self, dst, src, stream=None) -> None:
        dst[...] = src

    def relayout(self, dst, src, stream=None) -> None:
        dst[...] = src  # numpy walks both memory orders

    def describe(self) -> dict[str, str]:
        return {"backend": self.name}

    def close(self) -> None:
        self._scratch.clear()


# CUDA and cuBLAS enumerations (driver_types.h, cublas_api.h, library_types.h);
# cupy re-exports some of them under different modules across versions, so the
# values are spelled here.  bfloat16 is cupy's ``cupy.cuda.runtime.CUDA_R_16BF`` (14),
# computed in ``cupy_backends.cuda.libs.cublas.CUBLAS_COMPUTE_32F`` (68), as cupy's own
# matmul does; tests/test_gpu.py checks every spelled value against cupy's names.
_MEMCPY_DEVICE_TO_DEVICE = 3  # cudaMemcpyDeviceToDevice
_MEMCPY_DEFAULT = 4  # cudaMemcpyDefault: the driver tells host from device by the address
_CUDA_TYPE = {"float16": 2, "bfloat16": 14, "float32": 0, "float64": 1, "complex64": 4,
              "complex128": 5}  # cudaDataType
_COMPUTE_32F, _COMPUTE_64F, _COMPUTE_32F_FAST_TF32 = 68, 70, 77  # cublasComputeType_t
_COMPUTE = {"float16": _COMPUTE_32F, "bfloat16": _COMPUTE_32F, "float32": _COMPUTE_32F, "float64": _COMPUTE_64F,
            "complex64": _COMPUTE_32F, "complex128": _COMPUTE_64F}
_GEMM_DEFAULT = -1  # CUBLAS_GEMM_DEFAULT
_OP_N, _OP_T = 0, 1  # CUBLAS_OP_N, CUBLAS_OP_T

# The re-layout of a panel: a transpose of its memory, ``rows`` x ``cols`` row-major (rows ``lds``
# elements apart) into ``cols`` x ``rows`` row-major (rows ``ldd`` apart), through 32 x 32 tiles in shared memory so that both the reads
# and the writes of a warp are contiguous (a strided elementwise copy makes one side scattered,
# 2-byte accesses at worst).  It copies bits, so one kernel per element size serves every type;
# cuBLAS geam would transpose only float32, float64 and the complex types.  The grid-stride loops
# keep the grid within CUDA's limits for any panel.
_TRANSPOSE_SOURCE = r"""
template <typename T>
__device__ void transpose(const T* __restrict__ src, T* __restrict__ dst, long long rows, long long cols,
                          long long lds, long long ldd) {
    __shared__ T tile[32][33];  // 33: the column reads of the tile hit 32 different banks
    const long long tiles_r = (rows + 31) / 32, tiles_c = (cols + 31) / 32;
    for (long long tr = blockIdx.y; tr < tiles_r; tr += gridDim.y) {
        for (long long tc = blockIdx.x; tc < tiles_c; tc += gridDim.x) {
            const long long c = tc * 32 + threadIdx.x;
            for (int i = threadIdx.y; i < 32; i += blockDim.y) {
                const long long r = tr * 32 + i;
                if (r < rows && c < cols) tile[i][threadIdx.x] = src[r * lds + c];
            }
            __syncthreads();
            const long long r = tr * 32 + threadIdx.x;
            for (int i = threadIdx.y; i < 32; i += blockDim.y) {
                const long long cc = tc * 32 + i;
                if (r < rows && cc < cols) dst[cc * ldd + r] = tile[threadIdx.x][i];
            }
            __syncthreads();
        }
    }
}
struct bytes16 { unsigned long long lo, hi; };
extern "C" {
__global__ void transpose2(const unsigned short* s, unsigned short* d, long long r, long long c, long long ls, long long ld) {
    transpose(s, d, r, c, ls, ld);
}
__global__ void transpose4(const unsigned int* s, unsigned int* d, long long r, long long c, long long ls, long long ld) {
    transpose(s, d, r, c, ls, ld);
}
__global__ void transpose8(const unsigned long long* s, unsigned long long* d, long long r, long long c, long long ls, long long ld) {
    transpose(s, d, r, c, ls, ld);
}
__global__ void transpose16(const bytes16* s, bytes16* d, long long r, long long c, long long ls, long long ld) {
    transpose(s, d, r, c, ls, ld);
}
}
"""
#: Most blocks of one transpose launch along each grid axis (the loops cover the rest).
_TRANSPOSE_GRID_LIMIT = 65535


class GpuBackend(Backend):
    """cupy on one GPU, chosen before any other CUDA call of the process."""

    name = "cupy"
    on_gpu = True

    def __init__(self, device_id: int) -> None:
        cupy = _import_cupy()
        if cupy is None:
            raise InputError("--device=gpu: cupy does not import; install hpcmm[cuda12] or [cuda13]")
        self.cupy = cupy
        self.xp = cupy
        self.device_id = device_id
        self.exported_bytes = 0
        self.device = cupy.cuda.Device(device_id)
        self.device.use()
        # Non-blocking streams: neither waits for the legacy default stream.
        self.compute_stream = cupy.cuda.Stream(non_blocking=True)
        self.comm_stream = cupy.cuda.Stream(non_blocking=True)
        from cupy_backends.cuda.libs import cublas  # noqa: PLC0415

        self._cublas = cublas
        self._transpose = None  # the RawModule of _TRANSPOSE_SOURCE, compiled on first use
        self._scalars: dict[tuple[str, bool], tuple[np.ndarray, np.ndarray]] = {}
        self._gemm_plans = None  # GemmPlans, once use_gemm_library chose one; until then every GEMM is GemmEx

    def empty(self, shape, dtype, order="C"):
        with self.device:
            return self.cupy.empty(shape, dtype=dtype, order=order)

    def from_host(self, array, order="C"):
        """A device copy of ``array``, complete when this returns.

        cupy copies on its current stream, which the compute and communication
        streams do not wait for (both are non-blocking): a GEMM queued on them
        right after could read the copy before it lands.
        """
        with self.device:
            copy = self.cupy.asarray(np.asarray(array, order=order), order=order)
            self.cupy.cuda.get_current_stream().synchronize()
        return copy

    def poison(self, array) -> None:
        """NaN in every element, complete when this returns (as :meth:`from_host`, for any stream after)."""
        if array.size:  # nothing to fill, nothing to wait for
            with self.device:
                super().poison(array)
                self.cupy.cuda.get_current_stream().synchronize()

    def to_host(self, array) -> np.ndarray:
        return self.cupy.asnumpy(array)

    def pinned_empty(self, nbytes: int) -> np.ndarray:
        import cupyx  # noqa: PLC0415

        return cupyx.empty_pinned((nbytes,), dtype=np.uint8)

    def memory_info(self) -> tuple[int, int]:
        with self.device:
            free, total = self.cupy.cuda.runtime.memGetInfo()
        pool = self.cupy.get_default_memory_pool()
        # Bytes the pool holds but does not use are as good as free to us.
        return int(free + pool.free_bytes()), int(total)

    def device_used(self) -> int:
        with self.device:
            free, total = self.cupy.cuda.runtime.memGetInfo()
        return int(total - free)

    def peak_memory(self) -> int:
        # cupy's pool keeps what it allocated: its total is the high-water mark
        # of this process's device memory, plus what lives outside the pool.
        pool = self.cupy.get_default_memory_pool()
        return int(pool.total_bytes()) + self.exported_bytes

    def event(self, stream=None):
        ev = self.cupy.cuda.Event()
        ev.record(stream if stream is not None else self.compute_stream)
        return ev

    def wait(self, stream, event) -> None:
        if event is not None:
            stream.wait_event(event)

    def event_synchronize(self, event) -> None:
        if event is not None:
            event.synchronize()

    def event_done(self, event) -> bool:
        return event is None or bool(event.done)

    def elapsed(self, start, stop) -> float:
        return self.cupy.cuda.get_elapsed_time(start, stop) / 1e3

    def synchronize(self) -> None:
        self.device.synchronize()

    def stream_synchronize(self, stream) -> None:
        stream.synchronize()

    def copy(self, dst, src, stream=None) -> None:
        nbytes = dst.nbytes
        if nbytes == 0:
            return
        stream = stream if stream is not None else self.comm_stream
        src_ptr = src.data.ptr if hasattr(src, "data") and hasattr(src.data, "ptr") else src.ctypes.data
        dst_ptr = dst.data.ptr if hasattr(dst, "data") and hasattr(dst.data, "ptr") else dst.ctypes.data
        self.cupy.cuda.runtime.memcpyAsync(dst_ptr, src_ptr, nbytes, _MEMCPY_DEFAULT, stream.ptr)

    def _scalar_pair(self, dtype: str, accumulate: bool, tf32: bool):
        key = (dtype, accumulate)
        if key not in self._scalars:
            scale = np.float64 if _COMPUTE[dtype] == _COMPUTE_64F else np.float32
            if dtype.startswith("complex"):
                scale = np.complex128 if dtype == "complex128" else np.complex64
            self._scalars[key] = (np.ones(1, scale), np.full(1, 1 if accumulate else 0, scale))
        return self._scalars[key]

    def relayout(self, dst, src, stream=None) -> None:
        """Copy ``src`` into ``dst`` of the other memory order with a tiled transpose on ``stream``.

        Either may be a padded view (:func:`orders`); the kernel steps over
        each one's leading dimension.  Where one order describes both, a 2-D
        copy.  Queued only: the stream orders it (the engine records an event
        after it).
        """
        if dst.shape != src.shape or dst.dtype != src.dtype or dst.ndim != 2:
            raise ValueError(f"relayout wants two 2-D arrays of one shape and type, not {src.shape} {src.dtype} "
                             f"into {dst.shape} {dst.dtype}")
        if src.size == 0:
            return
        stream = stream if stream is not None else self.comm_stream
        src_orders, dst_orders = orders(src), orders(dst)
        if not src_orders or not dst_orders:
            raise ValueError(f"relayout wants arrays each row- or column-major with a leading dimension, not "
                             f"strides {src.strides} into {dst.strides}")
        rows, cols = src.shape
        item = src.dtype.itemsize
        common = [order for order in ("C", "F") if order in src_orders and order in dst_orders]
        if common:
            # One order describes both: lines of ``length`` elements, ``count`` of them, each side at its pitch.
            order = common[0]
            length, count = (cols, rows) if order == "C" else (rows, cols)
            self.cupy.cuda.runtime.memcpy2DAsync(dst.data.ptr, dst_orders[order] * item, src.data.ptr,
                                                 src_orders[order] * item, length * item, count,
                                                 _MEMCPY_DEVICE_TO_DEVICE, stream.ptr)
            return
        # The orders differ: src's memory is (rows x cols) row-major for a C src, (cols x rows) for an F src.
        source = next(iter(src_orders))
        target = "F" if source == "C" else "C"
        if source == "F":
            rows, cols = cols, rows
        kernel = self._transpose_kernel(item)
        grid = (min(-(-cols // 32), _TRANSPOSE_GRID_LIMIT), min(-(-rows // 32), _TRANSPOSE_GRID_LIMIT))
        with self.device, stream:
            kernel(grid, (32, 8), (src, dst, np.int64(rows), np.int64(cols), np.int64(src_orders[source]),
                                   np.int64(dst_orders[target])))

    def _transpose_kernel(self, itemsize: int):
        """The transpose of ``itemsize``-byte elements, compiled once per backend (cupy caches the binary)."""
        if itemsize not in (2, 4, 8, 16):
            raise ValueError(f"relayout: no transpose for {itemsize}-byte elements")
        if self._transpose is None:
            with self.device:
                self._transpose = self.cupy.RawModule(code=_TRANSPOSE_SOURCE)
        return self._transpose.get_function(f"transpose{itemsize}")

    def use_gemm_library(self, mode: str, sharers: int = 1) -> None:
        from .gemm_library import GemmPlans  # noqa: PLC0415

        if self._gemm_plans is not None:
            self._gemm_plans.close()
        self._gemm_plans = GemmPlans(mode, self._gemm_ex, self._event_seconds, sharers=sharers)

    def gemm_rows(self) -> list[dict]:
        return [] if self._gemm_plans is None else self._gemm_plans.rows()

    def forget_gemm_plans(self) -> None:
        if self._gemm_plans is not None:
            self._gemm_plans.close()

    def _event_seconds(self, product, stream) -> float:
        """Seconds of ``product()`` on ``stream``, by two events around it."""
        start, end = self.cupy.cuda.Event(), self.cupy.cuda.Event()
        start.record(stream)
        product()
        end.record(stream)
        end.synchronize()
        return self.cupy.cuda.get_elapsed_time(start, end) / 1e3

    def gemm(self, a, b, c, accumulate: bool, stream=None, tf32: bool = False) -> None:
        """``c (+)= a @ b`` on ``stream`` (the compute stream by default), by the shape's library.

        ``cublasGemmEx`` (:meth:`_gemm_ex`) unless :meth:`use_gemm_library`
        chose cuBLASLt's autotuned algorithm for this shape (:mod:`hpcmm.execution.gemm_library`).
        """
        if c.shape[0] == 0 or c.shape[1] == 0:
            return
        stream = stream if stream is not None else self.compute_stream
        if self._gemm_plans is None:
            self._gemm_ex(a, b, c, accumulate, stream, tf32)
        else:
            self._gemm_plans(a, b, c, accumulate, stream, tf32)

    def _gemm_ex(self, a, b, c, accumulate: bool, stream, tf32: bool) -> None:
        """``c (+)= a @ b`` through cublasGemmEx on ``stream``.

        ``a`` (m×w) and ``b`` (w×n) are each row- or column-major, ``c`` is
        row-major, each with a leading dimension ``ld`` of at least its extent
        (read from the strides, :func:`orders`).  cuBLAS thinks in
        column-major, so we compute cᵀ = bᵀ·aᵀ: a row-major b's memory is bᵀ
        as is (op N, ld ≥ n), a column-major b's is b (op T, ld ≥ w); a
        column-major a's memory is a (op T, ld ≥ m), a row-major a's is aᵀ
        (op N, ld ≥ w); c's memory is cᵀ (ld ≥ n).  Which kernel cuBLAS picks
        depends on these ops (:mod:`hpcmm.planning.gemm_orders`), and whether it may
        use its fastest ones on the leading dimensions being aligned
        (:func:`~hpcmm.geometry.layout.padded`).
        """
        m, n = c.shape  # not empty: gemm returns before
        w = a.shape[1]
        ld_c = orders(c).get("C")
        if ld_c is None:
            raise ValueError(f"gemm wants c row-major with a leading dimension, not strides {c.strides}")
        order_b, ld_b = _operand(b, "C", "b")
        order_a, ld_a = _operand(a, "F", "a")
        op_b = _OP_N if order_b == "C" else _OP_T
        op_a = _OP_T if order_a == "F" else _OP_N
        dtype = c.dtype.name
        alpha, beta = self._scalar_pair(dtype, accumulate, tf32)
        compute = _COMPUTE_32F_FAST_TF32 if tf32 else _COMPUTE[dtype]
        handle = self.device.cublas_handle
        with stream:
            self._cublas.setStream(handle, stream.ptr)
            self._cublas.gemmEx(
                handle, op_b, op_a, n, m, w,
                alpha.ctypes.data, b.data.ptr, _CUDA_TYPE[dtype], max(ld_b, 1),
                a.data.ptr, _CUDA_TYPE[dtype], max(ld_a, 1),
                beta.ctypes.data, c.data.ptr, _CUDA_TYPE[dtype], ld_c,
                compute, _GEMM_DEFAULT,
            )

    def describe(self) -> dict[str, str]:
        props = self.cupy.cuda.runtime.getDeviceProperties(self.device_id)
        name = props["name"]
        name = name.decode() if isinstance(name, bytes) else str(name)
        uuid = props.get("uuid", b"")
        if isinstance(uuid, (bytes, bytearray)):
            # No UUID must read as none (""), not as the text "b''": ranks with equal UUIDs share a device.
            h = bytes(uuid).hex()
            uuid = f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}" if h else ""
        pci = f"{props.get('pciDomainID', 0):04x}:{props.get('pciBusID', 0):02x}:{props.get('pciDeviceID', 0):02x}.0"
        return {"backend": self.name, "gpu_name": name, "gpu_uuid": str(uuid), "gpu_pci": pci,
                "gpu_index": str(self.device_id)}

    def release_cached(self) -> None:
        self.synchronize()
        with self.device:
            self.cupy.get_default_memory_pool().free_all_blocks()

    def close(self) -> None:
        self.synchronize()
        if self._gemm_plans is not None:
            self._gemm_plans.close()

    # -- CUDA IPC (transport.ipc.IpcPeerMemory) ---------------------------------
    def allocate_exported(self, nbytes: int):
        """A byte array in a device allocation of its own, and the IPC handle that names it.

        The allocation is made outside cupy's memory pool: an IPC handle names a
        whole allocation, and the pool hands out parts of larger ones.  Its
        bytes count in :attr:`exported_bytes` until :meth:`release_exported`.

        Returns
        -------
        array : cupy.ndarray
            ``nbytes`` bytes (``uint8``); at least one byte is allocated.
        handle : bytes
            What a node peer passes to :meth:`open_exported`.
        """
        cupy = self.cupy
        with self.device:
            memory = cupy.cuda.memory.Memory(max(nbytes, 1))
            array = cupy.ndarray((nbytes,), dtype=np.uint8, memptr=cupy.cuda.MemoryPointer(memory, 0))
        handle = bytes(cupy.cuda.runtime.ipcGetMemHandle(memory.ptr))
        self.exported_bytes += memory.size
        return array, handle

    def release_exported(self, array) -> None:
        """Stop counting ``array``'s allocation; it is freed with the last reference to it."""
        self.exported_bytes -= array.data.mem.size

    def _on_device(self, call: str, *args):
        """``cupy.cuda.runtime.<call>(*args)`` with this rank's GPU current."""
        with self.device:
            return getattr(self.cupy.cuda.runtime, call)(*args)

    def open_exported(self, handle: bytes) -> int:
        """Map a node peer's exported allocation here; returns its device address."""
        # Lazy peer access: the driver enables NVLink/P2P for peers on other GPUs.
        return self._on_device("ipcOpenMemHandle", handle)

    def close_exported(self, address: int) -> None:
        """Unmap what :meth:`open_exported` mapped."""
        self._on_device("ipcCloseMemHandle", address)

    def copy_from_address(self, dst, address: int, nbytes: int, stream) -> None:
        """Copy ``nbytes`` at device ``address`` (a mapped peer allocation) into ``dst`` on ``stream``."""
        self.cupy.cuda.runtime.memcpyAsync(dst.data.ptr, address, nbytes, _MEMCPY_DEVICE_TO_DEVICE, stream.ptr)

    def exported_events(self, count: int, stream):
        """``count`` interprocess events, each recorded once on ``stream``, and their IPC handles.

        A peer may wait on an event before its owner records it for a step: a
        recorded event is safe to wait on, a never-recorded one is not.
        """
        cupy = self.cupy
        with self.device:
            events = [cupy.cuda.Event(disable_timing=True, interprocess=True) for _ in range(count)]
            for ev in events:
                ev.record(stream)
            stream.synchronize()
        return events, [bytes(cupy.cuda.runtime.ipcGetEventHandle(ev.ptr)) for ev in events]

    def open_peer_event(self, handle: bytes) -> int:
        """Open a node peer's exported event; returns its raw ``cudaEvent_t``."""
        return self._on_device("ipcOpenEventHandle", handle)

    def close_peer_event(self, event: int) -> None:
        """Destroy what :meth:`open_peer_event` opened."""
        self._on_device("eventDestroy", event)

    def wait_peer_event(self, stream, event: int) -> None:
        """Make ``stream`` wait for an opened peer event (no host wait)."""
        self.cupy.cuda.runtime.streamWaitEvent(stream.ptr, event, 0)

    def view_address(self, ptr: int, nbytes: int):
        """``nbytes`` of device memory at ``ptr`` (a peer's opened IPC buffer) as a cupy byte array, not owned."""
        cp = self.cupy
        memory = cp.cuda.UnownedMemory(ptr, nbytes, None, self.device_id)
        return cp.ndarray((nbytes,), dtype=cp.uint8, memptr=cp.cuda.MemoryPointer(memory, 0))

    def synchronize_peer_event(self, event: int) -> None:
        """Block the host until an opened peer event has happened."""
        self.cupy.cuda.runtime.eventSynchronize(event)


def make_backend(device: str, local_rank: int, local_size: int) -> Backend:
    """Pick numpy or cupy and bind this rank to its GPU.

    Parameters
    ----------
    device : {"auto", "gpu", "cpu"}
        ``auto`` takes a GPU when cupy imports and sees one.
    local_rank, local_size : int
        This rank's place among the ranks of its node: rank ``i`` takes GPU
        ``i % count`` (more ranks than GPUs share them round robin).
    """
    if device == "cpu":
        return CpuBackend()
    count = gpu_count()
    if count == 0:
        if device == "gpu":
            raise InputError("--device=gpu: no usable GPU (cupy missing or no CUDA device visible)")
        return CpuBackend()
    return GpuBackend(local_rank % count)
