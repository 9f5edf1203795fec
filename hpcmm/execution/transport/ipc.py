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

import abc

import numpy as np
from mpi4py import MPI

from ...errors import collective

__all__ = ["IpcPeerMemory", "ShmPeerMemory", "PeerMemory"]


class PeerMemory(abc.ABC):
    """One interface for the two same-node paths.

    Parameters
    ----------
    intra : MPI.Comm
        The ranks of one (virtual) node that read each other's memory.
    backend : Backend

    Attributes
    ----------
    path : str
        The path's name in the results file (``ipc`` or ``shm``).
    """

    path: str

    def __init__(self, intra: MPI.Comm, backend) -> None:
        self.intra = intra
        self.backend = backend

    @abc.abstractmethod
    def allocate(self, nbytes: int):
        """Collective: a local byte buffer of ``nbytes`` that node peers can read."""

    @abc.abstractmethod
    def pull(self, dst, peer: int, offset: int, nbytes: int, stream=None) -> None:
        """Copy ``nbytes`` from ``peer``'s buffer at ``offset`` into ``dst`` (on ``stream``)."""

    @abc.abstractmethod
    def view(self, peer: int, nbytes: int):
        """``peer``'s buffer (its first ``nbytes``) as a byte array this rank reads and writes in place."""

    @abc.abstractmethod
    def export_events(self, count: int) -> None:
        """Collective: make ``count`` events of this rank that each peer can wait on."""

    @abc.abstractmethod
    def record(self, index: int, stream) -> None:
        """Record this rank's exported event ``index`` on ``stream``."""

    @abc.abstractmethod
    def wait_peer_event(self, stream, peer: int, index: int) -> None:
        """Make ``stream`` wait for ``peer``'s exported event ``index``."""

    @abc.abstractmethod
    def sync_peer_event(self, peer: int, index: int) -> None:
        """Block the host until ``peer``'s exported event ``index`` has happened."""

    @abc.abstractmethod
    def close(self) -> None:
        """Collective: unmap peers' memory, then free this rank's."""


class ShmPeerMemory(PeerMemory):
    """CPU: peers' buffers are segments of one MPI shared-memory window.

    A host copy is over when :meth:`pull` returns, so the events are empty: the
    node barrier of a relay step alone orders a slot's writer and its readers.
    """

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
        return self.views[self.intra.Get_rank()][:nbytes]

    def pull(self, dst, peer: int, offset: int, nbytes: int, stream=None) -> None:
        dst[:nbytes] = self.views[peer][offset : offset + nbytes]

    def view(self, peer: int, nbytes: int) -> np.ndarray:
        return self.views[peer][:nbytes]

    def export_events(self, count: int) -> None:
        pass

    def record(self, index: int, stream) -> None:
        pass

    def wait_peer_event(self, stream, peer: int, index: int) -> None:
        pass

    def sync_peer_event(self, peer: int, index: int) -> None:
        pass

    def close(self) -> None:
        if self.win is not None:
            self.views = []
            self.win.Free()  # collective: no peer reads a freed segment
            self.win = None


class IpcPeerMemory(PeerMemory):
    """GPU: peers' device buffers opened once through CUDA IPC handles (all CUDA calls via the backend)."""

    path = "ipc"

    def __init__(self, intra: MPI.Comm, backend) -> None:
        super().__init__(intra, backend)
        self.memory = None  # this rank's exported buffer
        self.peer_ptrs: list[int | None] = []
        self.events = []
        self.peer_events: list[list[int] | None] = []

    def allocate(self, nbytes: int):
        # The allocation may fail on this rank alone (out of memory): agree before the exchange,
        # so that no peer waits in the allgather for a handle that never comes.
        try:
            with collective(self.intra):
                self.memory, handle = self.backend.allocate_exported(nbytes)
        except Exception:
            if self.memory is not None:  # a peer failed: give this rank's allocation back
                self.backend.release_exported(self.memory)
                self.memory = None
            raise
        handles = self.intra.allgather(handle)
        me = self.intra.Get_rank()
        self.peer_ptrs = []
        # Mapping a peer may fail on this rank alone too: agree, so that no rank goes on into the
        # next collective while this one tears down.
        try:
            with collective(self.intra):
                for peer, h in enumerate(handles):
                    self.peer_ptrs.append(None if peer == me else self.backend.open_exported(h))
        except Exception:
            self._close_mappings()
            raise
        return self.memory

    def pull(self, dst, peer: int, offset: int, nbytes: int, stream=None) -> None:
        if nbytes == 0:
            return
        stream = stream if stream is not None else self.backend.comm_stream
        self.backend.copy_from_address(dst, self.peer_ptrs[peer] + offset, nbytes, stream)

    def view(self, peer: int, nbytes: int):
        if peer == self.intra.Get_rank():
            return self.memory[:nbytes]
        return self.backend.view_address(self.peer_ptrs[peer], nbytes)

    def export_events(self, count: int) -> None:
        self.events, handles = self.backend.exported_events(count, self.backend.comm_stream)
        by_peer = self.intra.allgather(handles)
        me = self.intra.Get_rank()
        self.peer_events = []
        with collective(self.intra):  # as a peer's memory in allocate: a failure on one rank fails all
            for peer, peer_handles in enumerate(by_peer):
                opened = [] if peer != me else None
                self.peer_events.append(opened)
                for h in peer_handles if peer != me else ():
                    opened.append(self.backend.open_peer_event(h))

    def record(self, index: int, stream) -> None:
        self.events[index].record(stream)

    def wait_peer_event(self, stream, peer: int, index: int) -> None:
        self.backend.wait_peer_event(stream, self.peer_events[peer][index])

    def sync_peer_event(self, peer: int, index: int) -> None:
        self.backend.synchronize_peer_event(self.peer_events[peer][index])

    def _close_mappings(self) -> None:
        for ptr in self.peer_ptrs:
            if ptr is not None:
                self.backend.close_exported(ptr)
        self.peer_ptrs = []
        for evs in self.peer_events:
            for ev in evs or ():
                self.backend.close_peer_event(ev)
        self.peer_events = []

    def close(self) -> None:
        # Our own copies that read peers' memory must finish before we unmap it.
        self.backend.synchronize()
        self._close_mappings()
        # Nobody frees exported memory while a peer may still read it.
        self.intra.Barrier()
        if self.memory is not None:
            self.backend.release_exported(self.memory)
        self.memory = None
        self.events = []

