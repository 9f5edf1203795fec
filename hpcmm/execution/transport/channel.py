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

Which of these a rank does for a root never changes, so it is decided once,
when the channel is built (:meth:`PanelChannel._role`); a step calls the one
method of that role.

Worked example, a row of 4 ranks on 2 nodes {0, 1} {2, 3}, root 1: rank 1
uses its own block; rank 0 pulls from rank 1 over IPC; rank 2 (leader)
receives from rank 1 through MPI in the communicator {1, 2}; rank 3 pulls
from rank 2's ring slot over IPC.

Ordering.  Blocks are written once before the first step, so reading a
root's block needs no synchronization.  A leader's ring slot is rewritten
every ``ring`` steps while its peers read it: the leader records an exported
(interprocess) event when the slot is ready, peers wait on it on their
communication stream and record an exported event when their copy is done,
and the leader waits on those before it writes the slot again, whether it
relays a panel into it or pulls one from a root on its own node (the copy of
a GPU runs on a stream: without the wait it can overwrite a relayed panel a
peer is still copying out).  A barrier of the node's members per step (only
in channels that span nodes) tells each side that the other's event has been
recorded.
"""

from __future__ import annotations

import dataclasses

from mpi4py import MPI

from ...planning.algorithms import ring_depth
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
    """What one fetch did: the panel, its ready event, and the bytes by path.

    ``started`` is the event at which the bytes began to move, after any wait
    for a free slot (``None``: when the fetch was called).  ``host_bound`` says
    that the host moved bytes itself, through MPI: the fetch returned only once
    they had moved, so its end is when the panel was there (``ready`` may be
    ``None`` then: nothing to wait for on a stream).
    """

    panel: object
    ready: object
    source: int  # world rank the bytes came from (self for the root)
    path: str  # "self", "ipc", "shm", "mpi" or "staged"
    nbytes: int
    started: object = None
    host_bound: bool = False


class PanelChannel:
    """Panels of one operand along ``comm``.

    How this rank gets the panels of each root is decided once, here: every
    step from that root takes the same path.  The four roles, one method each:

    ============================  ======================  =====================
    root                          this rank               method
    ============================  ======================  =====================
    this rank                     reads its own block     :meth:`_own`
    on this rank's node           pulls from the block    :meth:`_pull_from_root`
    on another node               is its node's leader    :meth:`_relay`
    on another node               is not                  :meth:`_pull_from_leader`
    ============================  ======================  =====================

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
    prefetch : int
        Panels in flight ahead of the one in use; the ring's depth follows
        (:func:`~hpcmm.planning.algorithms.ring_depth`).
    cuda_aware : bool
        Whether device buffers may go to MPI.
    """

    def __init__(self, comm, world_ranks, vnodes, backend, block_nbytes, slot_nbytes, prefetch, cuda_aware):
        self.comm = comm
        self.backend = backend
        self.me = comm.Get_rank()
        self.world_ranks = list(world_ranks)
        self.vnodes = list(vnodes)
        self.multi_node = len(set(vnodes)) > 1
        self.ring = ring_depth(prefetch, spans_nodes=self.multi_node)
        myv = vnodes[self.me]
        self.node_members = [r for r, v in enumerate(vnodes) if v == myv]
        self.leader = {v: min(r for r, w in enumerate(vnodes) if w == v) for v in set(vnodes)}
        self.my_leader = self.leader[myv]
        # Only channels that span nodes relay panels through slots node peers read.
        self.sync_node = self.multi_node and len(self.node_members) > 1
        self.roles = [self._role(root) for root in range(comm.Get_size())]
        # The node peers that copy panels out of this rank's slots: a leader's, in a channel that relays.
        self.slot_readers = ([self.intra_rank(r) for r in self.node_members if r != self.me]
                             if self.sync_node and self.my_leader == self.me else [])
        peer_cls, bcast_cls = select_paths(backend, cuda_aware)
        self.intra = comm.Split(myv, self.me)
        self.peers: PeerMemory = peer_cls(self.intra, backend)
        self.bcast = bcast_cls(backend) if self.multi_node else None
        self.leaders: dict[int, MPI.Comm] = {}
        self.slot_nbytes = slot_nbytes
        self.closed = False
        # A member alone in its channel fetches only its own panels, in place: no slot to receive into.
        slot_count = self.ring if comm.Get_size() > 1 else 0
        try:
            local = self.peers.allocate(block_nbytes + slot_count * slot_nbytes)
            self.block = local[:block_nbytes]
            self.slots = [
                local[block_nbytes + i * slot_nbytes : block_nbytes + (i + 1) * slot_nbytes]
                for i in range(slot_count)
            ]
            # Where each node peer's ring starts inside its exported buffer.
            self.peer_block_nbytes = self.intra.allgather(block_nbytes)
            if self.multi_node:
                if self.sync_node:
                    self.peers.export_events(self.ring)
                for root in range(comm.Get_size()):
                    self.leaders[root] = self._leaders_comm(root)
        except Exception:
            self.close()
            raise

    # -- set-up ---------------------------------------------------------------
    def _role(self, root: int):
        """The method that fetches ``root``'s panels on this rank."""
        if root == self.me:
            return self._own
        if self.vnodes[root] == self.vnodes[self.me]:
            return self._pull_from_root
        if self.my_leader == self.me:
            return self._relay
        return self._pull_from_leader

    def _leaders_comm(self, root: int) -> MPI.Comm:
        """Collective over ``comm``: {root} and the leader of every other node."""
        me, vnodes = self.me, self.vnodes
        member = me == root or (vnodes[me] != vnodes[root] and self.my_leader == me)
        return self.comm.Split(0 if member else MPI.UNDEFINED, 0 if me == root else me + 1)

    def intra_rank(self, member: int) -> int:
        """Rank in the node communicator of ``member`` (a rank in ``comm`` on this node)."""
        return self.node_members.index(member)

    # -- the step -------------------------------------------------------------
    def fetch(self, root: int, offset: int, nbytes: int, step: int, slot_free) -> Transfer:
        """Bring ``nbytes`` at ``offset`` of ``root``'s block here.

        In a channel that spans nodes, collective over ``comm``: every member
        fetches the same panels in the same order (the relays are broadcasts).
        On one node a fetch is a one-sided pull from a block written before
        the first step, so each member may take the panels in its own order
        (:func:`~hpcmm.planning.algorithms.own_start`).

        Parameters
        ----------
        root : int
            Owner of the panel (rank in ``comm``).
        offset, nbytes : int
            The panel inside the root's block, in bytes.
        step : int
            The step index: the ring slot to receive into is ``step`` modulo this
            channel's ring (a channel between nodes keeps at least two slots).
        slot_free : event or None
            Recorded after the last GEMM that read that slot.

        Returns
        -------
        Transfer
            The panel as a byte view (the root's own block, or the slot) and the
            event after which it is ready.
        """
        return self.roles[root](root, offset, nbytes, step % self.ring, slot_free)

    def _own(self, root: int, offset: int, nbytes: int, slot: int, slot_free) -> Transfer:
        """The panel is mine: use it in place; across nodes, send it to the other nodes' leaders."""
        panel = self.block[offset : offset + nbytes]
        if self.multi_node:
            self.bcast.send(self.leaders[root], panel)
        if self.sync_node:
            self.intra.Barrier()
        return Transfer(panel, None, self.world_ranks[root], "self", 0, host_bound=self.multi_node)

    def _pull_from_root(self, root: int, offset: int, nbytes: int, slot: int, slot_free) -> Transfer:
        """The root is on my node: copy the panel out of its block."""
        be, stream = self.backend, self.backend.comm_stream
        dst = self.slots[slot][:nbytes]
        be.wait(stream, slot_free)
        # A leader's slot may still hold a panel it relayed, which its node peers copy on their own
        # streams: the pull waits for their copies to end (their events of this slot).
        for peer in self.slot_readers:
            self.peers.wait_peer_event(stream, peer, slot)
        self.peers.pull(dst, self.intra_rank(root), offset, nbytes, stream)
        ready = be.event(stream)
        if self.sync_node:
            self.intra.Barrier()
        return Transfer(dst, ready, self.world_ranks[root], self.peers.path, nbytes)

    def _relay(self, root: int, offset: int, nbytes: int, slot: int, slot_free) -> Transfer:
        """The root is on another node and I lead mine: receive through MPI into a slot my peers read."""
        be, stream = self.backend, self.backend.comm_stream
        dst = self.slots[slot][:nbytes]
        # MPI writes from the host: the slot must be free now, not "later on a stream".
        be.event_synchronize(slot_free)
        # ... and my node peers must have finished copying what it held before.
        for peer in self.slot_readers:
            self.peers.sync_peer_event(peer, slot)
        # The transfer starts here: the host's wait for the slot above is no part of it.
        started = be.event(stream)
        ready = self.bcast.receive(self.leaders[root], dst)
        if self.sync_node:
            if ready is None:
                ready = be.event(stream)
            self.peers.record(slot, stream)
            self.intra.Barrier()
        return Transfer(dst, ready, self.world_ranks[root], self.bcast.path, nbytes, started, host_bound=True)

    def _pull_from_leader(self, root: int, offset: int, nbytes: int, slot: int, slot_free) -> Transfer:
        """The root is on another node: copy the panel out of my leader's slot once it is there."""
        be, stream = self.backend, self.backend.comm_stream
        dst = self.slots[slot][:nbytes]
        self.intra.Barrier()  # the leader has recorded its event for this slot
        be.wait(stream, slot_free)
        lead = self.intra_rank(self.my_leader)
        self.peers.wait_peer_event(stream, lead, slot)
        src = self.peer_block_nbytes[lead] + slot * self.slot_nbytes
        self.peers.pull(dst, lead, src, nbytes, stream)
        ready = be.event(stream)
        self.peers.record(slot, stream)
        return Transfer(dst, ready, self.world_ranks[self.my_leader], self.peers.path, nbytes)

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
