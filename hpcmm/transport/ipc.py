"""Memory that the ranks of one node read from each other directly.

GPU: CUDA IPC.  Each rank makes one device allocation for everything its node
peers read (its block and its panel ring), exports a handle to it, and every
peer opens that handle once at set-up.  A panel is then pulled with one
asynchronous device-to-device copy on the communication stream (copy engines,
not SMs).  cupy's memory pool sub-allocates, and an IPC handle always names a
whole allocation, so the exported buffer is allocated outside the pool and
peers address its parts by offset.

CPU: an MPI-3 shared-memory window (``MPI.Win.Allocate_shared``) over the
same ranks: a peer's block is a numpy view of its segment.

Both: :meth:`allocate` and :meth:`close` are collective over the node
communicator; a rank's exported memory stays alive until every peer has
closed its mapping (``close`` ends with a barrier before freeing).
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

__all__ = ["IpcPeerMemory", "ShmPeerMemory", "PeerMemory"]


class PeerMemory:
    """One interface for the two same-node paths."""

    path = "abstract"

    def __init__(self, intra: MPI.Comm, backend) -> None:
        self.intra = intra
        self.backend = backend

    def allocate(self, nbytes: int):
        """Collective: a local byte buffer of ``nbytes`` that node peers can read."""
        raise NotImplementedError(f"{type(self).__name__} does not implement allocate")

    def pull(self, dst, peer: int, offset: int, nbytes: int, stream=None) -> None:
        """Copy ``nbytes`` from ``peer``'s buffer at ``offset`` into ``dst``."""
        raise NotImplementedError(f"{type(self).__name__} does not implement pull")

    def export_events(self, count: int) -> None:
        """Collective: make ``count`` events each peer can wait on (GPU only)."""

    def record(self, index: int, stream) -> None:
        """Record this rank's exported event ``index`` on ``stream``."""

    def wait_peer_event(self, stream, peer: int, index: int) -> None:
        """Make ``stream`` wait for ``peer``'s exported event ``index``."""

    def sync_peer_event(self, peer: int, index: int) -> None:
        """Block the host until ``peer``'s exported event ``index`` has happened."""

    def close(self) -> None:
        """Collective: unmap peers' memory, then free this rank's."""


class ShmPeerMemory(PeerMemory):
    """CPU: peers' buffers are segments of one MPI shared-memory window."""

    path = "shm"

    def __init__(self, intra: MPI.Comm, backend) -> None:
        super().__init__(intra, backend)
        self.win: MPI.Win | None = None
        self.views: list[np.ndarray] = []

    def allocate(self, nbytes: int) -> np.ndarray:
        self.win = MPI.Win.Allocate_shared(max(nbytes, 1), 1, comm=self.intra)
        self.views = []
        for peer in range(self.intra.Get_size()):
            buf, _ = self.win.Shared_query(peer)
            self.views.append(np.frombuffer(buf, dtype=np.uint8))
        local = self.views[self.intra.Get_rank()][:nbytes]
        return local

    def pull(self, dst, peer: int, offset: int, nbytes: int, stream=None) -> None:
        dst[:nbytes] = self.views[peer][offset : offset + nbytes]

    def close(self) -> None:
        if self.win is not None:
            self.views = []
            self.win.Free()  # collective: no peer reads a freed segment
            self.win = None


class IpcPeerMemory(PeerMemory):
    """GPU: peers' device buffers opened once through CUDA IPC handles."""

    path = "ipc"

    def __init__(self, intra: MPI.Comm, backend) -> None:
        super().__init__(intra, backend)
        self.cupy = backend.cupy
        self.rt = backend.cupy.cuda.runtime
        self.memory = None
        self.peer_ptrs: list[int | None] = []
        self.events = []
        self.peer_events: list[list[int] | None] = []

    def allocate(self, nbytes: int):
        cupy = self.cupy
        with self.backend.device:
            self.memory = cupy.cuda.memory.Memory(max(nbytes, 1))  # outside the pool
            local = cupy.ndarray((nbytes,), dtype=np.uint8,
                                 memptr=cupy.cuda.MemoryPointer(self.memory, 0))
        self.backend.extra_device_bytes = getattr(self.backend, "extra_device_bytes", 0) + max(nbytes, 1)
        handle = self.rt.ipcGetMemHandle(self.memory.ptr)
        handles = self.intra.allgather(bytes(handle))
        me = self.intra.Get_rank()
        self.peer_ptrs = []
        try:
            with self.backend.device:
                for peer, h in enumerate(handles):
                    # Lazy peer access: the driver enables NVLink/P2P for peers on other GPUs.
                    self.peer_ptrs.append(None if peer == me else self.rt.ipcOpenMemHandle(h))
        except Exception:
            self._close_mappings()
            raise
        return local

    def pull(self, dst, peer: int, offset: int, nbytes: int, stream=None) -> None:
        if nbytes == 0:
            return
        stream = stream if stream is not None else self.backend.comm_stream
        src = self.peer_ptrs[peer] + offset
        self.rt.memcpyAsync(dst.data.ptr, src, nbytes, self.rt.memcpyDeviceToDevice, stream.ptr)

    def export_events(self, count: int) -> None:
        cupy = self.cupy
        with self.backend.device:
            self.events = [cupy.cuda.Event(disable_timing=True, interprocess=True) for _ in range(count)]
            for ev in self.events:
                ev.record(self.backend.comm_stream)  # a recorded event is safe to wait on
            self.backend.comm_stream.synchronize()
        handles = [bytes(self.rt.ipcGetEventHandle(ev.ptr)) for ev in self.events]
        everyone = self.intra.allgather(handles)
        me = self.intra.Get_rank()
        with self.backend.device:
            self.peer_events = [
                None if peer == me else [self.rt.ipcOpenEventHandle(h) for h in hs]
                for peer, hs in enumerate(everyone)
            ]

    def record(self, index: int, stream) -> None:
        self.events[index].record(stream)

    def wait_peer_event(self, stream, peer: int, index: int) -> None:
        self.rt.streamWaitEvent(stream.ptr, self.peer_events[peer][index], 0)

    def sync_peer_event(self, peer: int, index: int) -> None:
        self.rt.eventSynchronize(self.peer_events[peer][index])

    def _close_mappings(self) -> None:
        with self.backend.device:
            for ptr in self.peer_ptrs:
                if ptr is not None:
                    self.rt.ipcCloseMemHandle(ptr)
            self.peer_ptrs = []
            for evs in self.peer_events:
                for ev in evs or ():
                    self.rt.eventDestroy(ev)
            self.peer_events = []

    def close(self) -> None:
        # Our own copies that read peers' memory must finish before we unmap it.
        self.backend.synchronize()
        self._close_mappings()
        # Nobody frees exported memory while a peer may still read it.
        self.intra.Barrier()
        if self.memory is not None:
            self.backend.extra_device_bytes -= self.memory.size
        self.memory = None
        self.events = []


def open_handles(peer_memory: PeerMemory) -> int:
    """How many peer mappings ``peer_memory`` holds open (for leak checks)."""
    return sum(1 for p in getattr(peer_memory, "peer_ptrs", ()) if p is not None)
