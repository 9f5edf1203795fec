"""Memory that the ranks of one node read from each other, for ranks that are threads (:mod:`thread_comm`).

Two stand-ins, one per path of :mod:`hpcmm.execution.transport.ipc`:

* ``shm``: :func:`shared_windows` makes ``MPI.Win.Allocate_shared`` (as ``hpcmm.execution.transport.ipc``
  calls it) work over a :class:`~thread_comm.ThreadComm`: every rank's segment is a numpy buffer
  every rank can read.  A real communicator still gets MPI's window.
* ``ipc``: :class:`IpcBackend`, a GPU backend on the virtual clock of
  :class:`~fake_backend.FakeBackend` with CUDA IPC as :class:`~hpcmm.execution.backend.GpuBackend` offers it:
  exported allocations named by handles, mapped by node peers (not by their owner, once each),
  copied from by address; interprocess events recorded on a stream and waited on by peers.  None
  as a stream is what it is to cupy: the current (default) stream for an event, an error for a
  copy or a wait.

The ranks of one node share an :class:`IpcNode`: the handles, the mappings each rank holds, and a
log of every device operation (copies, the element-wise operations on device arrays inside a
stream, and the host's own reads and writes the test reports), each with the bytes it read and
wrote and its start and end on the virtual clock.  :meth:`IpcNode.races` lists the pairs of
operations that touch the same bytes, one of them writing, where the later one (in the order
the hosts issued them) began before the earlier one ended: on a GPU, a data race.  Each copy
takes ``op_seconds`` and each element-wise operation ``ufunc_seconds`` of its stream, so that two
operations that nothing orders overlap.  The backend also counts what a caller could see of its
memory: the bytes it exports, its device arrays and its pinned host memory.
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
import types

import numpy as np
from fake_backend import FakeBackend, FakeStream
from mpi4py import MPI
from numpy.lib.array_utils import byte_bounds
from thread_comm import ThreadComm

from hpcmm.execution.transport import ipc as ipc_module

# -- shm: MPI shared windows over a ThreadComm --------------------------------------------------


class _SharedWindow:
    def __init__(self, comm, segments, disp_unit, registry):
        self.comm, self.segments, self.disp_unit, self.registry = comm, segments, disp_unit, registry
        self.freed = False
        registry.append(self)

    def Shared_query(self, rank):  # noqa: N802 - MPI's spelling
        if self.freed:
            raise RuntimeError("Shared_query on a freed window")
        if not isinstance(rank, int) or not 0 <= rank < len(self.segments):
            raise ValueError(f"Shared_query: no rank {rank!r}")
        return memoryview(self.segments[rank]), self.disp_unit

    def Free(self):  # noqa: N802
        if self.freed:
            raise RuntimeError("a window freed twice")
        self.comm.Barrier()  # collective, as MPI's
        self.freed = True


def shared_windows(monkeypatch) -> list:
    """Give ``hpcmm.execution.transport.ipc`` shared windows over ThreadComms; returns the windows it makes."""
    made: list[_SharedWindow] = []

    def allocate_shared(size, disp_unit=1, info=MPI.INFO_NULL, comm=MPI.COMM_SELF):
        if not isinstance(comm, ThreadComm):
            return MPI.Win.Allocate_shared(size, disp_unit, info, comm)
        if not isinstance(size, int) or not isinstance(disp_unit, int):
            raise TypeError("an integer is required")
        if size < 0 or disp_unit < 1:
            raise ValueError(f"Allocate_shared({size}, {disp_unit})")
        segments = comm.allgather(np.zeros(size, dtype=np.uint8))
        return _SharedWindow(comm, segments, disp_unit, made)

    monkeypatch.setattr(ipc_module, "MPI", types.SimpleNamespace(Win=types.SimpleNamespace(
        Allocate_shared=allocate_shared)))
    return made


# -- ipc: a GPU with CUDA IPC on a virtual clock ------------------------------------------------

_thread = threading.local()  # the backend of the rank this thread runs, and the stream it is inside


def _extent(array) -> tuple[int, int]:
    return byte_bounds(np.asarray(array)) if np.asarray(array).size else (0, 0)


@dataclasses.dataclass
class Op:
    rank: int
    what: str
    start: float
    end: float
    reads: list
    writes: list


def _touch(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


class DeviceArray(np.ndarray):
    """A device array: an element-wise operation on it inside a stream is logged as the stream's."""

    def __array_ufunc__(self, ufunc, method, *inputs, out=None, **kwargs):
        plain = [np.asarray(x) if isinstance(x, DeviceArray) else x for x in inputs]
        outs = tuple(np.asarray(x) if isinstance(x, DeviceArray) else x for x in out) if out else None
        backend = getattr(_thread, "backend", None)
        if backend is not None:
            arrays = [x for x in plain if isinstance(x, np.ndarray)]
            writes = list(outs or ())
            backend._run(getattr(_thread, "stream", None) or backend.default_stream, f"{ufunc.__name__}",
                         arrays, writes, backend.ufunc_seconds)
        if outs is not None:
            kwargs["out"] = outs
        result = getattr(ufunc, method)(*plain, **kwargs)
        return out[0] if out and len(out) == 1 else result


class DeviceStream(FakeStream):
    """A stream; ``with stream:`` makes it the current one (cupy's), as the transports use it."""

    def __enter__(self):
        self._outer = getattr(_thread, "stream", None)
        _thread.stream = self
        return self

    def __exit__(self, *exc):
        _thread.stream = self._outer


def _stream_ptr(stream) -> None:
    """What cupy's ``stream.ptr`` does with anything but a stream."""
    if not isinstance(stream, DeviceStream):
        raise AttributeError(f"{type(stream).__name__!r} object has no attribute 'ptr'")  # noqa: TRY004 - as cupy


class Event:
    """An exported (interprocess) event: when it happens on the virtual clock."""

    def __init__(self, backend, name: bytes):
        self.backend, self.name, self.time = backend, name, 0.0

    def record(self, stream=None):
        stream = stream if stream is not None else self.backend.default_stream  # cupy: the current stream
        stream.t = max(stream.t, self.backend.host)
        self.time = stream.t


class IpcNode:
    """What the ranks of one node share: handles, each rank's mappings, the log of device operations."""

    def __init__(self):
        self.lock = threading.Lock()
        self.memory: dict[bytes, tuple[int, np.ndarray]] = {}  # handle: (owner, allocation)
        self.released: set[bytes] = set()
        self.events: dict[bytes, tuple[int, Event]] = {}
        self.mapped: dict[int, dict[int, bytes]] = {}  # rank: {address: handle}
        self.opened_events: dict[int, dict[int, Event]] = {}  # rank: {id: event}
        self.ops: list[Op] = []
        self.numbers = itertools.count(1)  # raw event handles as open_peer_event gives them

    def log(self, op: Op) -> None:
        with self.lock:
            self.ops.append(op)

    def races(self) -> list[str]:
        """Later operations that began before an earlier one on the same bytes ended (one of them writing)."""
        found = []
        for j, later in enumerate(self.ops):
            for earlier in self.ops[:j]:
                conflict = (any(_touch(w, x) for w in earlier.writes for x in later.reads + later.writes)
                            or any(_touch(r, w) for r in earlier.reads for w in later.writes))
                if conflict and later.start < earlier.end:
                    found.append(f"rank {later.rank} {later.what} at {later.start} began before rank "
                                 f"{earlier.rank} {earlier.what} ended at {earlier.end}")
        return found

    def open_mappings(self) -> int:
        return sum(len(m) for m in self.mapped.values()) + sum(len(e) for e in self.opened_events.values())

    def live_allocations(self) -> int:
        return len(set(self.memory) - self.released)


class IpcBackend(FakeBackend):
    """Rank ``rank``'s GPU on ``node``; make it in the rank's thread (device operations are logged as its)."""

    name = "ipc-fake"

    def __init__(self, node: IpcNode, rank: int, op_seconds: float = 1.0, ufunc_seconds: float | None = None,
                 fail_export: bool = False, opens: int | None = None, fail_empty: bool = False):
        """``op_seconds`` per copy, ``ufunc_seconds`` (the same by default) per element-wise operation;
        ``fail_export``, ``fail_empty``: out of device memory there; ``opens``: the peer handles this
        rank can map before the next fails."""
        super().__init__()
        self.node, self.rank, self.op_seconds = node, rank, op_seconds
        self.ufunc_seconds = op_seconds if ufunc_seconds is None else ufunc_seconds
        self.fail_export, self.opens, self.fail_empty = fail_export, opens, fail_empty
        self.compute_stream, self.comm_stream = DeviceStream(), DeviceStream()
        self.default_stream = DeviceStream()
        self.allocated = 0  # bytes of device arrays made by empty()
        self.pinned = 0  # bytes of pinned host memory
        node.mapped[rank], node.opened_events[rank] = {}, {}
        self._made = 0
        _thread.backend = self

    # -- the clock and the log --------------------------------------------------------------
    def _run(self, stream, what, reads, writes, seconds=None) -> None:
        """One operation on ``stream``: it starts once the stream and the host are there."""
        start = max(stream.t, self.host)
        stream.t = start + (self.op_seconds if seconds is None else seconds)
        self.node.log(Op(self.rank, what, start, stream.t, [_extent(a) for a in reads],
                         [_extent(a) for a in writes]))

    def host_access(self, what, reads=(), writes=(), seconds=1.0) -> None:
        """The host itself reads or writes device memory (MPI with device buffers): it is busy meanwhile."""
        start = self.host
        self.host += seconds
        self.node.log(Op(self.rank, what, start, self.host, [_extent(a) for a in reads],
                         [_extent(a) for a in writes]))

    def synchronize(self) -> None:
        self.host = max(self.host, self.compute_stream.t, self.comm_stream.t, self.default_stream.t)

    # -- memory ------------------------------------------------------------------------------
    def empty(self, shape, dtype, order="C"):
        if self.fail_empty:
            raise MemoryError(f"out of device memory on rank {self.rank}")
        array = np.empty(shape, dtype=dtype, order=order).view(DeviceArray)
        self.allocated += array.nbytes
        return array

    def pinned_empty(self, nbytes: int) -> np.ndarray:
        self.pinned += nbytes
        return super().pinned_empty(nbytes)

    def to_host(self, array) -> np.ndarray:
        return np.array(array)

    def copy(self, dst, src, stream=None) -> None:
        if dst.nbytes == 0:
            return
        stream = stream if stream is not None else self.comm_stream
        self._run(stream, "copy", [src], [dst])
        np.asarray(dst)[...] = np.asarray(src)

    # -- CUDA IPC ------------------------------------------------------------------------------
    def _name(self, kind: str) -> bytes:
        self._made += 1
        return f"{kind}:{self.rank}:{self._made}".encode()

    def allocate_exported(self, nbytes: int):
        if self.fail_export:
            raise MemoryError(f"out of device memory on rank {self.rank}")
        memory = np.zeros(max(nbytes, 1), dtype=np.uint8).view(DeviceArray)
        handle = self._name("memory")
        with self.node.lock:
            self.node.memory[handle] = (self.rank, memory)
        self.exported_bytes += memory.nbytes
        return memory[:nbytes], handle

    def _allocation(self, array) -> bytes:
        lo = _extent(array)[0] if np.asarray(array).size else np.asarray(array).__array_interface__["data"][0]
        for handle, (owner, memory) in self.node.memory.items():
            start, end = byte_bounds(np.asarray(memory))
            if owner == self.rank and start <= lo < end and handle not in self.node.released:
                return handle
        raise RuntimeError("release_exported: not a live exported allocation of this rank")

    def release_exported(self, array) -> None:
        if not isinstance(array, np.ndarray):
            raise AttributeError(f"{type(array).__name__!r} object has no attribute 'data'")  # noqa: TRY004 - as cupy
        handle = self._allocation(array)
        if any(handle in mapped.values() for mapped in self.node.mapped.values()):
            raise RuntimeError("exported memory freed while a peer still maps it")
        self.node.released.add(handle)
        self.exported_bytes -= self.node.memory[handle][1].nbytes

    def open_exported(self, handle: bytes) -> int:
        owner, memory = self.node.memory[handle]
        if owner == self.rank:
            raise RuntimeError("cudaIpcOpenMemHandle: a handle is opened by another process than its owner")
        if handle in self.node.mapped[self.rank].values():
            raise RuntimeError("cudaIpcOpenMemHandle: this handle is mapped here already")
        if self.opens is not None:
            if self.opens == 0:
                raise RuntimeError(f"cudaIpcOpenMemHandle: peer access refused on rank {self.rank}")
            self.opens -= 1
        address = byte_bounds(np.asarray(memory))[0]
        self.node.mapped[self.rank][address] = handle
        return address

    def close_exported(self, address: int) -> None:
        if address not in self.node.mapped[self.rank]:
            raise RuntimeError(f"cudaIpcCloseMemHandle: {address!r} is not mapped here")
        del self.node.mapped[self.rank][address]

    def _mapped(self, address, nbytes: int) -> np.ndarray:
        """The bytes at a mapped peer address."""
        for base, handle in self.node.mapped[self.rank].items():
            memory = np.asarray(self.node.memory[handle][1])
            if isinstance(address, int) and base <= address and address + nbytes <= base + memory.nbytes:
                if handle in self.node.released:
                    raise RuntimeError("a copy from memory its owner has freed")
                return memory[address - base : address - base + nbytes]
        raise RuntimeError(f"cudaErrorInvalidValue: {nbytes} bytes at {address!r} are not mapped here")

    def copy_from_address(self, dst, address: int, nbytes: int, stream) -> None:
        _stream_ptr(stream)
        src = self._mapped(address, nbytes)
        out = np.asarray(dst).reshape(-1).view(np.uint8)
        if out.nbytes < nbytes:
            raise RuntimeError(f"a copy of {nbytes} bytes into {out.nbytes}")
        self._run(stream, "pull", [src], [out[:nbytes]])
        out[:nbytes] = src

    def view_address(self, ptr: int, nbytes: int):
        return self._mapped(ptr, nbytes).view(DeviceArray)

    def exported_events(self, count: int, stream):
        events = [Event(self, self._name("event")) for _ in range(count)]
        for ev in events:
            ev.record(stream)
        self.stream_synchronize(stream)
        with self.node.lock:
            self.node.events.update({ev.name: (self.rank, ev) for ev in events})
        return events, [ev.name for ev in events]

    def open_peer_event(self, handle: bytes) -> int:
        owner, event = self.node.events[handle]
        if owner == self.rank:
            raise RuntimeError("cudaIpcOpenEventHandle: a handle is opened by another process than its owner")
        number = next(self.node.numbers)
        self.node.opened_events[self.rank][number] = event
        return number

    def close_peer_event(self, event: int) -> None:
        if event not in self.node.opened_events[self.rank]:
            raise RuntimeError(f"cudaEventDestroy: {event!r} is not open here")
        del self.node.opened_events[self.rank][event]

    def _peer_event(self, event: int) -> Event:
        if event not in self.node.opened_events[self.rank]:
            raise RuntimeError(f"{event!r} is no open peer event")
        return self.node.opened_events[self.rank][event]

    def wait_peer_event(self, stream, event: int) -> None:
        _stream_ptr(stream)
        stream.t = max(stream.t, self._peer_event(event).time)

    def synchronize_peer_event(self, event: int) -> None:
        self.host = max(self.host, self._peer_event(event).time)
