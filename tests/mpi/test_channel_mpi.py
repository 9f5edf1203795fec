"""The panel channel on its own: every root's panels, through every path, compared byte for byte.

Run with::

    mpiexec -n 4 python -m pytest --with-mpi tests/mpi

(``tests/test_mpi_suite.py`` does this for 1, 2, 3 and 4 ranks.)  A round
trip in the manner of mpi4py-fft's ``test_pencil.py``: every rank fills its
block with random bytes that any rank can draw again (seeded by its world
rank); every member of every row and column channel then fetches pieces of
every root's block, as the engine does step by step, and compares them with
the root's bytes.  This for every grid of P ranks; one node, or virtual nodes
of 1 or 2 ranks (so that the roles "pull from the root", "relay as the
leader" and "pull from the leader" all occur); prefetch 0 and 2 (rings of 1 and 3 slots, at least 2 across nodes); and
between nodes both broadcasts, ``mpi`` (``DirectBroadcast``) and ``staged``
(``StagedBroadcast``), with chunks of a few bytes so that a panel takes
several messages and both staging buffers.  On each node leader, the order
of its calls is checked too: a slot its node peers copy out of is written
again only after waiting for their copies (:func:`unguarded_writes`).

Blocks are uneven (7·rank + 13 bytes) and every third rank's is empty.  A
verdict found on one rank is shared with all (:func:`everywhere`) before any
rank asserts.  The device follows ``HPCMM_DEVICE`` (numpy where there is no
GPU): on the CPU the paths are ``shm`` and ``mpi``/``staged``, on a GPU
``ipc`` and ``staged`` (``mpi`` where MPI is CUDA-aware).
"""

from __future__ import annotations

import functools
import os

import numpy as np
import pytest
from mpi4py import MPI

from hpcmm.execution.backend import make_backend
from hpcmm.config import RunConfig
from hpcmm.execution.topology import Topology
from hpcmm.execution.transport import channel as channel_module
from hpcmm.execution.transport import decide
from hpcmm.execution.transport.channel import PanelChannel, select_paths
from hpcmm.execution.transport.mpi import DirectBroadcast, StagedBroadcast

COMM = MPI.COMM_WORLD
RANK = COMM.Get_rank()
P = COMM.Get_size()
DEVICE = os.environ.get("HPCMM_DEVICE", "auto")
SEED = 20261129

#: Bytes per broadcast message: a few, so that every panel between nodes takes several.
CHUNK = {"mpi": 5, "staged": 7}


def everywhere(ok: bool, message: str = "") -> None:
    """Assert on every rank that every rank's ``ok`` holds; the message names the failing ranks."""
    verdicts = COMM.allgather((bool(ok), message))
    failed = [f"rank {r}: {m}" for r, (good, m) in enumerate(verdicts) if not good]
    assert not failed, "; ".join(failed)


def block_bytes(world_rank: int) -> np.ndarray:
    """The block of ``world_rank``, as every rank can draw it: uneven sizes, every third one empty."""
    size = 0 if world_rank % 3 == 2 else 7 * world_rank + 13
    return np.random.default_rng([SEED, world_rank]).integers(0, 256, size, dtype=np.uint8)


def pieces(size: int) -> list[tuple[int, int]]:
    """``(offset, nbytes)`` panels of a block of ``size`` bytes: whole, inner, last byte, empty."""
    return [(0, size), (size // 3, size // 2), (max(size - 1, 0), min(size, 1)), (size // 2, 0)]


def grids() -> list[tuple[int, int]]:
    return [(rows, P // rows) for rows in range(1, P + 1) if P % rows == 0]


def expected_route(members, vnodes, me: int, root: int) -> tuple[str, int]:
    """``(role, rank in the channel the bytes come from)`` for ``root``'s panels on member ``me``."""
    if root == me:
        return "self", me
    if vnodes[root] == vnodes[me]:
        return "same node", root
    leader = min(r for r in range(len(members)) if vnodes[r] == vnodes[me])
    return ("relay", root) if leader == me else ("leader", leader)


def address(buffer) -> int:
    """Where ``buffer`` starts in memory (a numpy or a CuPy array)."""
    return buffer.data.ptr if hasattr(buffer.data, "ptr") else buffer.__array_interface__["data"][0]


def logging_peers(peer_cls):
    """``peer_cls`` that logs, per channel, each pull (a write into ``dst``) and each wait for a peer's event."""

    class Logged(peer_cls):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.log: list[tuple] = []

        def pull(self, dst, peer, offset, nbytes, stream=None):
            self.log.append(("write", address(dst)))
            super().pull(dst, peer, offset, nbytes, stream)

        def wait_peer_event(self, stream, peer, index):
            self.log.append(("wait", peer, index))
            super().wait_peer_event(stream, peer, index)

        def sync_peer_event(self, peer, index):
            self.log.append(("wait", peer, index))
            super().sync_peer_event(peer, index)

    return Logged


def log_relays(channel: PanelChannel) -> None:
    """Log the relays' receives into ``channel``'s slots beside its pulls (:func:`logging_peers`)."""
    if channel.bcast is None:
        return
    receive = channel.bcast.receive

    def logged(comm, dst):
        channel.peers.log.append(("write", address(dst)))
        return receive(comm, dst)

    channel.bcast.receive = logged


def unguarded_writes(channel: PanelChannel) -> list[str]:
    """The writes into a leader's slot that its node peers read, made without waiting for their copies of it.

    A node peer copies a relayed panel out of its leader's slot on its own
    stream; before the leader writes that slot again (a relay, or a pull
    from a root on its node), it must wait for every node peer's event of
    the slot.  On the CPU a copy is over when it returns, so no byte shows
    the race there; the order of the calls does.
    """
    intra = channel.intra
    if not (channel.sync_node and channel.my_leader == channel.me):
        return []
    readers = {p for p in range(intra.Get_size()) if p != intra.Get_rank()}
    slot_of = {address(slot): i for i, slot in enumerate(channel.slots)}
    waited: dict[int, set] = {}
    written: set[int] = set()
    failures = []
    for n, entry in enumerate(channel.peers.log):
        if entry[0] == "wait":
            waited.setdefault(entry[2], set()).add(entry[1])
            continue
        slot = slot_of.get(entry[1])
        if slot is None:
            continue
        if slot in written and waited.get(slot, set()) != readers:
            failures.append(f"call {n}: slot {slot} written again after waiting for peers "
                            f"{sorted(waited.get(slot, set()))} of {sorted(readers)}")
        written.add(slot)
        waited[slot] = set()
    return failures


def round_trip(channel: PanelChannel, backend, vnodes_by_world: list[int], peer_path: str, cross_path: str):
    """Fetch every piece of every root's block through ``channel``; returns what differed."""
    comm = channel.comm
    me, members = comm.Get_rank(), channel.world_ranks
    vnodes = [vnodes_by_world[w] for w in members]
    failures = []
    step = 0
    for index in range(len(pieces(0))):
        for root in range(comm.Get_size()):
            want_block = block_bytes(members[root])
            offset, nbytes = pieces(want_block.size)[index]
            transfer = channel.fetch(root, offset, nbytes, step, None)
            backend.synchronize()
            got = backend.to_host(transfer.panel)
            role, source = expected_route(members, vnodes, me, root)
            path = {"self": "self", "same node": peer_path, "relay": cross_path, "leader": peer_path}[role]
            where = f"root {root} ({role}), piece {offset}+{nbytes}, step {step}"
            if not np.array_equal(got, want_block[offset : offset + nbytes]):
                failures.append(f"{where}: bytes differ")
            if (transfer.path, transfer.source) != (path, members[source]):
                failures.append(f"{where}: came by {transfer.path} from {transfer.source}, "
                                f"expected {path} from {members[source]}")
            if transfer.nbytes != (0 if role == "self" else nbytes):
                failures.append(f"{where}: counted {transfer.nbytes} bytes")
            step += 1
    return failures


@pytest.mark.mpi(min_size=1)
@pytest.mark.parametrize("prefetch", [0, 2])
@pytest.mark.parametrize("between_nodes", ["mpi", "staged"])
@pytest.mark.parametrize("ranks_per_node", [None, 1, 2])
@pytest.mark.parametrize("grid", grids(), ids=lambda g: f"{g[0]}x{g[1]}")
def test_every_root_through_every_channel(monkeypatch, grid, ranks_per_node, between_nodes, prefetch):
    if ranks_per_node is None and between_nodes == "staged":
        pytest.skip("one node: nothing crosses between nodes")
    topo = Topology.create(COMM, RunConfig(device=DEVICE, grid=grid, ranks_per_node=ranks_per_node))
    backend = None
    channels: list[PanelChannel] = []
    try:
        backend = make_backend(DEVICE, topo.local_rank, topo.local_size)
        aware = backend.on_gpu and decide(os.environ.get("HPCMM_CUDA_AWARE_MPI", "auto")).aware
        if backend.on_gpu and between_nodes == "mpi" and not aware:
            pytest.skip("MPI is not CUDA-aware: device buffers go staged")
        peer_cls, _ = select_paths(backend, cuda_aware=False)
        peer_cls = logging_peers(peer_cls)
        broadcast = functools.partial({"mpi": DirectBroadcast, "staged": StagedBroadcast}[between_nodes],
                                      chunk=CHUNK[between_nodes])
        monkeypatch.setattr(channel_module, "select_paths", lambda *_: (peer_cls, broadcast))
        largest = max(block_bytes(w).size for w in range(P))
        vnodes = topo.comm.allgather(topo.vnode)
        mine = block_bytes(topo.rank)
        for comm in (topo.row_comm, topo.col_comm):
            members = comm.allgather(topo.rank)
            channel = PanelChannel(comm, members, [vnodes[w] for w in members], backend, mine.size, largest,
                                   prefetch, cuda_aware=aware)
            channels.append(channel)
            log_relays(channel)
            if mine.size:
                channel.block[...] = backend.from_host(mine)
        backend.synchronize()
        topo.comm.Barrier()  # peers read the blocks from now on

        failures = []
        for channel in channels:
            failures += round_trip(channel, backend, vnodes, peer_cls.path, between_nodes)
            failures += unguarded_writes(channel)
        for channel in channels:
            if not np.array_equal(backend.to_host(channel.block), mine):
                failures.append("a root's block changed")
        everywhere(not failures, "; ".join(failures[:4]))
    finally:
        for channel in reversed(channels):
            channel.close()
        if backend is not None:
            backend.close()
        topo.close()
