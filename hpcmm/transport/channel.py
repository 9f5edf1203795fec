"""Moving SUMMA panels along one grid communicator (a process row or column).

A channel owns this rank's block of one operand and its ring of panel
buffers, both in memory its node peers can read (:mod:`.ipc`).  For each step
the owner of the panel (the root) keeps it where it is; every other member
gets it by the best path there is:

* the root is on my node: pull it from the root's block (``ipc`` / ``shm``);
* the root is on another node: one rank per node (the lowest, the *leader*)
  receives it through MPI (``mpi`` or ``staged``), and the node's other ranks
  pull it from the leader's ring slot (``ipc`` / ``shm``).  A panel crosses
  between two nodes once.

Worked example, a row of 4 ranks on 2 nodes {0, 1} {2, 3}, root 1: rank 0
pulls from rank 1 over IPC; rank 2 (leader) receives from rank 1 through MPI
in the communicator {1, 2}; rank 3 pulls from rank 2's ring slot over IPC.

Ordering.  Blocks are written once before the first step, so reading a
root's block needs no synchronization.  A leader's ring slot is rewritten
every ``ring`` steps while its peers read it: the leader records an exported
(interprocess) event when the slot is ready, peers wait on it on their
communication stream and record an exported event when their copy is done,
and the leader waits on those before it writes the slot again.  A barrier of
the node's members per step (only in channels that span nodes) tells each side
that the other's event has been recorded.
"""

from __future__ import annotations

import dataclasses

from mpi4py import MPI

from .ipc import IpcPeerMemory, PeerMemory, ShmPeerMemory
from .mpi import DirectBroadcast, StagedBroadcast

__all__ = ["PanelChannel", "Transfer", "select_paths"]


def select_paths(backend, cuda_aware: bool):
    """The one place that chooses the transports: ``(peer memory class, broadcast class)``."""
    if backend.on_gpu:
        return IpcPeerMemory, (DirectBroadcast if cuda_aware else StagedBroadcast)
    return ShmPeerMemory, DirectBroadcast


@dataclasses.dataclass(frozen=True)
class Transfer:
    """What one fetch did: the panel, its ready event, and the bytes by path."""

    panel: object
    ready: object
    source: int  # world rank the bytes came from (self for the root)
    path: str  # "self", "ipc", "shm", "mpi" or "staged"
    nbytes: int


class PanelChannel:
    """Panels of one operand along ``comm``.

    Parameters
    ----------
    comm : MPI.Comm
        The row (for A) or column (for B) communicator.
    world_ranks : list of int
        World rank of each member of ``comm``.
    vnodes : list of int
        (Virtual) node of each member of ``comm``.
    backend : Backend
    block_nbytes, slot_nbytes : int
        Size of this rank's block and of one ring slot.
    ring : int
        Ring slots (panels in flight plus the one in use).
    cuda_aware : bool
        Whether device buffers may go to MPI.
    """

    def __init__(self, comm, world_ranks, vnodes, backend, block_nbytes, slot_nbytes, ring, cuda_aware):
        self.comm = comm
        self.backend = backend
        self.me = comm.Get_rank()
        self.world_ranks = list(world_ranks)
        self.vnodes = list(vnodes)
        self.multi_node = len(set(vnodes)) > 1
        # Between two writes of a relay slot its peers must have passed a barrier.
        self.ring = max(ring, 2) if self.multi_node else ring
        myv = vnodes[self.me]
        self.node_members = [r for r, v in enumerate(vnodes) if v == myv]
        self.leader = {v: min(r for r, w in enumerate(vnodes) if w == v) for v in set(vnodes)}
        peer_cls, bcast_cls = select_paths(backend, cuda_aware)
        self.intra = comm.Split(myv, self.me)
        self.peers: PeerMemory = peer_cls(self.intra, backend)
        self.bcast = bcast_cls(backend) if self.multi_node else None
        self.leaders: dict[int, MPI.Comm] = {}
        self.slot_nbytes = slot_nbytes
        self.closed = False
        try:
            local = self.peers.allocate(block_nbytes + self.ring * slot_nbytes)
            self.block = local[:block_nbytes]
            self.slots = [
                local[block_nbytes + i * slot_nbytes : block_nbytes + (i + 1) * slot_nbytes]
                for i in range(self.ring)
            ]
            # Where each node peer's ring starts inside its exported buffer.
            self.peer_block_nbytes = self.intra.allgather(block_nbytes)
            if self.multi_node:
                if self.intra.Get_size() > 1:
                    self.peers.export_events(self.ring)
                for root in range(comm.Get_size()):
                    self.leaders[root] = self._leaders_comm(root)
        except Exception:
            self.close()
            raise

    # -- set-up ---------------------------------------------------------------
    def _leaders_comm(self, root: int) -> MPI.Comm:
        """Collective over ``comm``: {root} and the leader of every other node."""
        me, vnodes = self.me, self.vnodes
        member = me == root or (vnodes[me] != vnodes[root] and self.leader[vnodes[me]] == me)
        return self.comm.Split(0 if member else MPI.UNDEFINED, 0 if me == root else me + 1)

    def intra_rank(self, member: int) -> int:
        return self.node_members.index(member)

    # -- the step -------------------------------------------------------------
    def fetch(self, root: int, offset: int, nbytes: int, slot: int, slot_free) -> Transfer:
        """Bring ``nbytes`` at ``offset`` of ``root``'s block here.

        Parameters
        ----------
        root : int
            Owner of the panel (rank in ``comm``).
        offset, nbytes : int
            The panel inside the root's block, in bytes.
        slot : int
            Ring slot to receive into, taken modulo this channel's ring: pass the
            step index (a channel between nodes keeps at least two slots).
        slot_free : event or None
            Recorded after the last GEMM that read ``slot``.

        Returns
        -------
        Transfer
            The panel as a byte view (the root's own block, or the slot) and the
            event after which it is ready.
        """
        be, stream = self.backend, self.backend.comm_stream
        me, vnodes = self.me, self.vnodes
        slot = slot % self.ring
        sync_node = self.multi_node and self.intra.Get_size() > 1
        if root == me:
            if self.multi_node and self.leaders[root].Get_size() > 1:
                self.bcast.send(self.leaders[root], self.block[offset : offset + nbytes])
            if sync_node:
                self.intra.Barrier()
            return Transfer(self.block[offset : offset + nbytes], None, self.world_ranks[me], "self", 0)
        dst = self.slots[slot][:nbytes]
        if vnodes[root] == vnodes[me]:
            be.wait(stream, slot_free)
            self.peers.pull(dst, self.intra_rank(root), offset, nbytes, stream)
            ready = be.event(stream)
            if sync_node:
                self.intra.Barrier()
            return Transfer(dst, ready, self.world_ranks[root], self.peers.path, nbytes)
        leader = self.leader[vnodes[me]]
        if me == leader:
            # MPI writes from the host: the slot must be free now, not "later on a stream".
            be.event_synchronize(slot_free)
            if sync_node:
                for peer in range(self.intra.Get_size()):
                    if peer != self.intra.Get_rank():
                        self.peers.sync_peer_event(peer, slot)
            ready = self.bcast.receive(self.leaders[root], dst)
            if sync_node:
                if ready is None:
                    ready = be.event(stream)
                self.peers.record(slot, stream)
                self.intra.Barrier()
            return Transfer(dst, ready, self.world_ranks[root], self.bcast.path, nbytes)
        # A rank of a remote node: take the panel from our leader's ring slot.
        self.intra.Barrier()
        be.wait(stream, slot_free)
        lead = self.intra_rank(leader)
        self.peers.wait_peer_event(stream, lead, slot)
        src = self.peer_block_nbytes[lead] + slot * self.slot_nbytes
        self.peers.pull(dst, lead, src, nbytes, stream)
        ready = be.event(stream)
        self.peers.record(slot, stream)
        return Transfer(dst, ready, self.world_ranks[leader], self.peers.path, nbytes)

    def close(self) -> None:
        """Collective over ``comm``: free the leaders' communicators, the mappings, the memory."""
        if self.closed:
            return
        self.closed = True
        for c in self.leaders.values():
            if c != MPI.COMM_NULL:
                c.Free()
        self.leaders = {}
        if self.bcast is not None:
            self.bcast.close()
        self.block = None
        self.slots = []
        self.peers.close()
        self.intra.Free()
