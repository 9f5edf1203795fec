"""What a panel channel promises: every root's panels, by the right path, counted, without a data race.

Written against the mutants that mutation testing of hpcmm/execution/transport/channel.py left without a
test on a CPU (docs/mutation.md: ``tests/mpi/test_channel_mpi.py`` runs under mpiexec, outside
mutmut).  The members of a channel are threads here (:class:`~thread_comm.ThreadComm`), their
node memory the stand-ins of :mod:`peer_stand_ins`: MPI shared windows on the CPU (paths ``shm``
and ``mpi``), and on a stand-in GPU CUDA IPC with ``mpi`` (CUDA-aware) or ``staged`` between
nodes.  Every member fetches every piece of every root's block, as the engine does step by step:
it waits for the panel's ready event, reads it in a GEMM on its compute stream, and passes the
event after that GEMM as the slot's ``slot_free`` when the ring comes back to the slot.  Pinned:
the bytes, the path, the source rank, the bytes counted, ``host_bound`` and ``started``; the
memory a member exports and the pinned memory it stages through; that nothing is left mapped, allocated or unfreed after ``close``; and,
on the GPU's virtual clock with one side of a node late, that no copy, relay or GEMM touches bytes
another one is still writing or reading (the order ``tests/mpi`` checks by its calls).
"""

from __future__ import annotations

import numpy as np
import pytest
from peer_stand_ins import IpcBackend, IpcNode, shared_windows
from thread_comm import ThreadComm

from hpcmm.planning.algorithms import ring_depth
from hpcmm.execution.backend import CpuBackend
from hpcmm.errors import HpcmmError
from hpcmm.execution.transport import channel as channel_module
from hpcmm.execution.transport.channel import PanelChannel, Transfer, select_paths
from hpcmm.execution.transport.ipc import IpcPeerMemory, ShmPeerMemory
from hpcmm.execution.transport.mpi import DirectBroadcast, StagedBroadcast

GEMM_SECONDS = 10.0  # a GEMM outlasts the copies (1 s each): a slot reused too early shows
SLOW_GEMM_SECONDS, FAST_GEMM_SECONDS = 30.0, 1.0  # one side of a node slower than the other


def world_rank(rank: int) -> int:
    """Members' ranks in the job differ from their ranks in the channel."""
    return 10 + 3 * rank


def block_bytes(rank: int) -> np.ndarray:
    """Uneven blocks, the third one empty."""
    size = 0 if rank == 2 else 7 * rank + 13
    return np.random.default_rng([41, rank]).integers(0, 256, size, dtype=np.uint8)


def pieces(size: int) -> list[tuple[int, int]]:
    """``(offset, nbytes)``: whole, inner, the last byte, empty."""
    return [(0, size), (size // 3, size // 2), (max(size - 1, 0), min(size, 1)), (size // 2, 0)]


def schedule(size: int) -> list[tuple[int, int, int]]:
    """``(root, offset, nbytes)`` of every step, the same on every member: a root's panels in a row, as
    SUMMA takes them along k, so that a relay slot comes back while its last panel may still be read."""
    return [(root, *piece) for root in range(size) for piece in pieces(block_bytes(root).size)]


def expected_route(vnodes, me: int, root: int) -> tuple[str, int]:
    """``(role, member the bytes come from)``."""
    if root == me:
        return "self", me
    if vnodes[root] == vnodes[me]:
        return "node", root
    leader = min(r for r, v in enumerate(vnodes) if v == vnodes[me])
    return ("relay", root) if leader == me else ("leader", leader)


class _HostMpi(DirectBroadcast):
    """MPI with device buffers: the host itself writes the slot (logged on a stand-in GPU)."""

    def receive(self, comm, dst):
        if isinstance(self.backend, IpcBackend):
            self.backend.host_access("MPI receive", writes=[dst])
        return super().receive(comm, dst)


def run_channels(monkeypatch, vnodes, device="cpu", aware=True, prefetch=0, late=()):
    """Every member fetches :func:`schedule`; returns ``(per member: (steps, (exported bytes, pinned
    bytes) once built, exported bytes left after close), node, job)``.

    ``late``: the members whose host gets to every step 5 s after the others and whose GEMMs take
    :data:`SLOW_GEMM_SECONDS` (the others' :data:`FAST_GEMM_SECONDS`); without any, every GEMM
    takes :data:`GEMM_SECONDS`.
    """
    size = len(vnodes)
    job = ThreadComm(size)
    node = IpcNode()
    node.windows = shared_windows(monkeypatch)
    monkeypatch.setattr(channel_module, "DirectBroadcast", _HostMpi)
    largest = max(block_bytes(r).size for r in range(size))
    ring = ring_depth(prefetch, spans_nodes=len(set(vnodes)) > 1)

    def member(rank):
        backend = IpcBackend(node, rank) if device == "gpu" else CpuBackend()
        mine = block_bytes(rank)
        channel = PanelChannel(job, [world_rank(r) for r in range(size)], vnodes, backend, mine.size, largest,
                               prefetch, cuda_aware=aware)
        exported = (backend.exported_bytes, getattr(backend, "pinned", 0))
        steps = []
        try:
            channel.block[...] = mine
            job.Barrier()  # peers read the blocks from now on
            slot_free = [None] * ring
            for step, (root, offset, nbytes) in enumerate(schedule(size)):
                if rank in late:
                    backend.host += 5.0
                free = slot_free[step % ring]
                transfer = channel.fetch(root, offset, nbytes, step, free)
                end = backend.event(backend.comm_stream)  # where the engine ends the transfer's bar
                if transfer.started is not None:  # the bar starts once the slot is free, before its end
                    assert (free or 0.0) <= transfer.started <= end, (free, transfer.started, end)
                got = np.array(backend.to_host(transfer.panel))
                if device == "gpu":
                    backend.wait(backend.compute_stream, transfer.ready)
                    gemm = (GEMM_SECONDS if not late else SLOW_GEMM_SECONDS if rank in late else FAST_GEMM_SECONDS)
                    backend._run(backend.compute_stream, "GEMM", [transfer.panel], [], gemm)
                slot_free[step % ring] = backend.event(backend.compute_stream)
                steps.append((transfer, got))
            assert np.array_equal(backend.to_host(channel.block), mine), "a root's block changed"
        finally:
            channel.close()
        backend.synchronize()
        return steps, exported, backend.exported_bytes

    outcomes = job.run(member)
    assert all(kind == "returned" for kind, _ in outcomes), outcomes
    return [value for _, value in outcomes], node, job


def check_transfers(results, vnodes, peer_path, cross_path):
    size = len(vnodes)
    for me, (steps, _, _) in enumerate(results):
        assert len(steps) == len(schedule(size))
        for (root, offset, nbytes), (transfer, got) in zip(schedule(size), steps, strict=True):
            role, source = expected_route(vnodes, me, root)
            where = f"member {me}, root {root} ({role}), {offset}+{nbytes}"
            assert isinstance(transfer, Transfer), where
            np.testing.assert_array_equal(got, block_bytes(root)[offset : offset + nbytes], err_msg=where)
            path = {"self": "self", "node": peer_path, "relay": cross_path, "leader": peer_path}[role]
            assert (transfer.path, transfer.source) == (path, world_rank(source)), where
            assert transfer.nbytes == (0 if role == "self" else nbytes), where
            # The host moves the bytes itself only through MPI, and a root sends its own panel there.
            crosses = len(set(vnodes)) > 1
            assert transfer.host_bound == (role == "relay" or (role == "self" and crosses)), where
            assert (transfer.started is not None) == (role == "relay"), where


def check_nothing_left(results, node, job):
    for comm in job.family[1:]:
        assert comm.freed, "a communicator the channel split is left unfreed"
    assert all(window.freed for window in node.windows)
    assert all(left == 0 for _, _, left in results)


def exported_bytes(size, vnodes, me, prefetch):
    """What one member exports: its block and, in a channel of several, one ring of slots."""
    largest = max(block_bytes(r).size for r in range(size))
    slots = ring_depth(prefetch, spans_nodes=len(set(vnodes)) > 1) if size > 1 else 0
    return max(block_bytes(me).size + slots * largest, 1)


NODES = {
    "a-pair": [3, 3],
    "two-of-one": [1, 0],
    "one-node": [4, 4, 4, 4],
    "two-nodes": [0, 0, 1, 1],
    "interleaved": [0, 1, 0, 1],
    "three-and-one": [1, 1, 1, 0],
    "leader-not-first": [1, 0, 0],
    "one-rank-a-node": [2, 0, 1],
}


@pytest.mark.parametrize("prefetch", [0, 2])
@pytest.mark.parametrize("nodes", list(NODES))
def test_every_root_on_the_cpu(monkeypatch, nodes, prefetch):
    vnodes = NODES[nodes]
    results, node, job = run_channels(monkeypatch, vnodes, "cpu", prefetch=prefetch)
    check_transfers(results, vnodes, "shm", "mpi")
    check_nothing_left(results, node, job)


@pytest.mark.parametrize("late", ["nobody", "leaders", "the-others"])
@pytest.mark.parametrize("aware", [True, False], ids=["mpi", "staged"])
@pytest.mark.parametrize("nodes", ["two-nodes", "interleaved", "three-and-one", "one-node", "a-pair", "two-of-one"])
def test_every_root_on_a_gpu_without_a_race(monkeypatch, nodes, aware, late):
    vnodes = NODES[nodes]
    leaders = {min(r for r, w in enumerate(vnodes) if w == v) for v in vnodes}
    slow = {"nobody": (), "leaders": leaders, "the-others": set(range(len(vnodes))) - leaders}[late]
    results, node, job = run_channels(monkeypatch, vnodes, "gpu", aware=aware, prefetch=1, late=slow)
    check_transfers(results, vnodes, "ipc", "mpi" if aware else "staged")
    assert node.races() == []
    check_nothing_left(results, node, job)
    assert node.open_mappings() == 0 and node.live_allocations() == 0
    staging = 0 if aware or len(set(vnodes)) == 1 else 2 * (32 << 20)  # two pinned chunks, only between nodes
    for me, (_, exported, _) in enumerate(results):
        assert exported == (exported_bytes(len(vnodes), vnodes, me, 1), staging)


@pytest.mark.parametrize("prefetch", [0, 3])
@pytest.mark.parametrize("nodes", ["one-node", "two-nodes", "one-rank-a-node", "a-pair"])
def test_the_memory_a_member_exports(monkeypatch, nodes, prefetch):
    vnodes = NODES[nodes]
    results, _, _ = run_channels(monkeypatch, vnodes, "gpu", prefetch=prefetch)
    assert [exported for (_, exported, _) in results] == [
        (exported_bytes(len(vnodes), vnodes, me, prefetch), 0) for me in range(len(vnodes))]


def test_the_ready_event_follows_the_copy_on_a_gpu(monkeypatch):
    """A pulled panel is ready after its copy, not before; a relayed one once the host has it."""
    vnodes = NODES["two-nodes"]
    results, node, _ = run_channels(monkeypatch, vnodes, "gpu", aware=True)
    pulls = {op.end for op in node.ops if op.what == "pull"}
    for me, (steps, _, _) in enumerate(results):
        for (root, _, nbytes), (transfer, _) in zip(schedule(4), steps, strict=True):
            role, _ = expected_route(vnodes, me, root)
            if role == "self":
                assert transfer.ready is None
            elif role in ("node", "leader") and nbytes:
                assert transfer.ready in pulls


def test_a_member_alone_uses_its_block_in_place():
    """One rank, MPI's own COMM_SELF: no slot, no copy; the panel is a view of the block."""
    from mpi4py import MPI

    backend = CpuBackend()
    channel = PanelChannel(MPI.COMM_SELF, [7], [0], backend, 32, 16, prefetch=2, cuda_aware=False)
    try:
        channel.block[...] = np.arange(32, dtype=np.uint8)
        transfer = channel.fetch(0, 8, 16, step=5, slot_free=None)
        assert (transfer.path, transfer.source, transfer.nbytes, transfer.ready, transfer.started,
                transfer.host_bound) == ("self", 7, 0, None, None, False)
        np.testing.assert_array_equal(transfer.panel, np.arange(8, 24, dtype=np.uint8))
        assert np.shares_memory(transfer.panel, channel.block)
    finally:
        channel.close()
    channel.close()  # a second close does nothing


def test_a_member_alone_on_a_gpu_exports_only_its_block(monkeypatch):
    job, node = ThreadComm(1), IpcNode()

    def alone(rank):
        backend = IpcBackend(node, rank)
        channel = PanelChannel(job, [3], [0], backend, 40, 24, prefetch=1, cuda_aware=True)
        exported = backend.exported_bytes
        channel.close()
        return exported, backend.exported_bytes

    assert job.run(alone) == [("returned", (40, 0))]


def test_a_failed_allocation_fails_every_member_and_leaves_nothing(monkeypatch):
    """Out of device memory on one member of a node: every member raises the same error, all is given back."""
    job, node = ThreadComm(3), IpcNode()
    monkeypatch.setattr(channel_module, "DirectBroadcast", _HostMpi)

    def member(rank):
        backend = IpcBackend(node, rank, fail_export=rank == 1)
        try:
            PanelChannel(job, [0, 1, 2], [0, 0, 0], backend, 16, 16, prefetch=0, cuda_aware=True)
        finally:
            assert backend.exported_bytes == 0
        return "built"

    outcomes = job.run(member)
    assert [kind for kind, _ in outcomes] == ["raised"] * 3, outcomes
    assert all(isinstance(exc, HpcmmError) and "out of device memory on rank 1" in str(exc)
               for _, exc in outcomes), outcomes
    assert all(comm.freed for comm in job.family[1:])
    assert node.open_mappings() == 0 and node.live_allocations() == 0


def test_the_transports_each_device_gets():
    class Gpu:
        on_gpu = True

    assert select_paths(CpuBackend(), cuda_aware=True) == (ShmPeerMemory, DirectBroadcast)
    assert select_paths(CpuBackend(), cuda_aware=False) == (ShmPeerMemory, DirectBroadcast)
    assert select_paths(Gpu(), cuda_aware=True) == (IpcPeerMemory, DirectBroadcast)
    assert select_paths(Gpu(), cuda_aware=False) == (IpcPeerMemory, StagedBroadcast)
