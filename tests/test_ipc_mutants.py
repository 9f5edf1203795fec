"""What node peers' memory promises: each rank's buffer readable by the others, copies from it, events
they wait on, and nothing left mapped or allocated after ``close``.

Written against the mutants that mutation testing of hpcmm/execution/transport/ipc.py left without a test
on a CPU (docs/mutation.md).  ``shm`` runs on MPI's own window over ``COMM_SELF`` and, for several
ranks, on the stand-in windows of :mod:`peer_stand_ins` over threads; ``ipc`` on that module's
stand-in GPU, whose handles, mappings and events behave as CUDA's do for the calls hpcmm makes
(a handle is mapped by other processes than its owner, once; None is no stream).
"""

from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI
from peer_stand_ins import IpcBackend, IpcNode, shared_windows
from thread_comm import ThreadComm

from hpcmm.execution.backend import CpuBackend
from hpcmm.errors import HpcmmError
from hpcmm.execution.transport.ipc import IpcPeerMemory, PeerMemory, ShmPeerMemory


def _fill(nbytes: int, rank: int) -> np.ndarray:
    return np.random.default_rng([7, rank]).integers(0, 256, nbytes, dtype=np.uint8)


def _run(job, body):
    outcomes = job.run(body)
    assert all(kind == "returned" for kind, _ in outcomes), outcomes
    return [value for _, value in outcomes]


# -- shm ----------------------------------------------------------------------------------


def test_shm_on_one_rank_with_mpis_window():
    peers = ShmPeerMemory(MPI.COMM_SELF, CpuBackend())
    assert isinstance(peers, PeerMemory) and peers.path == "shm"
    peers.close()  # before any allocation: nothing to free
    mine = peers.allocate(24)
    assert mine.dtype == np.uint8 and mine.shape == (24,)
    mine[...] = np.arange(24, dtype=np.uint8)
    dst = np.zeros(10, dtype=np.uint8)
    peers.pull(dst, 0, 5, 7)
    np.testing.assert_array_equal(dst, [5, 6, 7, 8, 9, 10, 11, 0, 0, 0])
    peers.pull(dst, 0, 0, 0)  # nothing to copy
    assert dst[0] == 5
    view = peers.view(0, 6)
    np.testing.assert_array_equal(view, np.arange(6))
    view[0] = 99  # in place
    assert mine[0] == 99
    for noop in (lambda: peers.export_events(3), lambda: peers.record(0, None),
                 lambda: peers.wait_peer_event(None, 0, 0), lambda: peers.sync_peer_event(0, 0)):
        assert noop() is None  # a host copy is over when pull returns
    peers.close()
    peers.close()  # once closed, closing again does nothing


def test_shm_of_nothing_is_empty_on_one_rank():
    peers = ShmPeerMemory(MPI.COMM_SELF, CpuBackend())
    assert peers.allocate(0).shape == (0,)
    peers.close()


@pytest.mark.parametrize("size", [2, 3])
def test_shm_peers_read_and_write_each_others_segments(monkeypatch, size):
    windows = shared_windows(monkeypatch)
    job = ThreadComm(size)
    nbytes = [11 + 5 * r for r in range(size)]

    def rank_body(rank):
        peers = ShmPeerMemory(job, CpuBackend())
        mine = peers.allocate(nbytes[rank])
        assert mine.shape == (nbytes[rank],)
        mine[...] = _fill(nbytes[rank], rank)
        job.Barrier()
        got = {}
        for peer in range(size):
            dst = np.zeros(nbytes[peer], dtype=np.uint8)
            peers.pull(dst, peer, 3, nbytes[peer] - 3)
            got[peer] = (dst[: nbytes[peer] - 3].copy(), np.array(peers.view(peer, 4)))
        job.Barrier()
        peers.view((rank + 1) % size, 1)[0] = rank  # into the next rank's segment
        job.Barrier()
        seen = int(mine[0])
        peers.close()
        return got, seen

    results = _run(job, rank_body)
    for rank, (got, seen) in enumerate(results):
        for peer, (pulled, view) in got.items():
            np.testing.assert_array_equal(pulled, _fill(nbytes[peer], peer)[3:])
            np.testing.assert_array_equal(view, _fill(nbytes[peer], peer)[:4])
        assert seen == (rank - 1) % size
    assert len(windows) == size and all(w.freed for w in windows)  # one window, one segment a rank


# -- ipc ----------------------------------------------------------------------------------


def test_ipc_peers_map_each_other_once_and_copy_by_offset():
    job, node = ThreadComm(3), IpcNode()
    nbytes = [16, 0, 9]

    def rank_body(rank):
        backend = IpcBackend(node, rank)
        peers = IpcPeerMemory(job, backend)
        assert peers.path == "ipc"
        mine = peers.allocate(nbytes[rank])
        assert mine.shape == (nbytes[rank],) and backend.exported_bytes == max(nbytes[rank], 1)
        mine[...] = _fill(nbytes[rank], rank)
        job.Barrier()
        mapped = len(node.mapped[rank])
        got = {}
        for peer in (p for p in range(3) if p != rank and nbytes[p]):
            dst = backend.empty((nbytes[peer],), np.uint8)
            dst[...] = 0
            peers.pull(dst, peer, 2, nbytes[peer] - 3)
            one = backend.empty((1,), np.uint8)
            peers.pull(one, peer, nbytes[peer] - 1, 1)
            peers.pull(one[:0], peer, 0, 0)  # nothing to copy
            got[peer] = (np.array(dst), int(one[0]), np.array(peers.view(peer, 3)))
        own = np.array(peers.view(rank, nbytes[rank]))
        job.Barrier()
        peers.close()
        return mapped, got, own, backend.exported_bytes

    results = _run(job, rank_body)
    for rank, (mapped, got, own, left) in enumerate(results):
        assert mapped == 2  # both peers, not itself
        for peer, (dst, last, view) in got.items():
            want = _fill(nbytes[peer], peer)
            np.testing.assert_array_equal(dst[: nbytes[peer] - 3], want[2:-1])
            assert not dst[nbytes[peer] - 3 :].any()
            assert last == want[-1]
            np.testing.assert_array_equal(view, want[:3])
        np.testing.assert_array_equal(own, _fill(nbytes[rank], rank))
        assert left == 0
    assert node.open_mappings() == 0 and node.live_allocations() == 0
    pulls = [op for op in node.ops if op.what == "pull"]
    assert len(pulls) == 4 * 2  # two a non-empty peer; an empty pull copies nothing


def test_ipc_pulls_run_on_the_stream_named_or_the_communication_stream():
    job, node = ThreadComm(2), IpcNode()

    def rank_body(rank):
        backend = IpcBackend(node, rank)
        peers = IpcPeerMemory(job, backend)
        peers.allocate(8)[...] = _fill(8, rank)
        job.Barrier()
        dst = backend.empty((8,), np.uint8)
        backend.compute_stream.t = 50.0
        peers.pull(dst, 1 - rank, 0, 4, stream=backend.compute_stream)
        on_compute = (backend.compute_stream.t, backend.comm_stream.t)
        peers.pull(dst[4:], 1 - rank, 4, 4)  # no stream: the communication stream
        on_comm = (backend.compute_stream.t, backend.comm_stream.t)
        job.Barrier()
        peers.close()
        return on_compute, on_comm, np.array(dst)

    for rank, (on_compute, on_comm, dst) in enumerate(_run(job, rank_body)):
        assert on_compute == (51.0, 0.0) and on_comm == (51.0, 1.0)
        np.testing.assert_array_equal(dst, _fill(8, 1 - rank))


def test_ipc_events_order_a_peer_after_the_owner():
    """A peer's stream waiting for my event ``i``, or its host, runs after what I queued before recording it."""
    job, node = ThreadComm(3), IpcNode()

    def rank_body(rank):
        backend = IpcBackend(node, rank)
        peers = IpcPeerMemory(job, backend)
        peers.allocate(4)
        peers.export_events(2)
        backend.comm_stream.t = 10.0 * (rank + 1)
        peers.record(1, backend.comm_stream)  # at 10, 20, 30
        backend.compute_stream.t = 100.0 + rank
        peers.record(0, backend.compute_stream)  # at 100, 101, 102
        job.Barrier()
        stream = backend.compute_stream
        waits = []
        for peer in (p for p in range(3) if p != rank):
            for index in (0, 1):
                stream.t = 0.0
                peers.wait_peer_event(stream, peer, index)
                waits.append(stream.t)
        backend.host = 0.0
        peers.sync_peer_event((rank + 1) % 3, 1)
        host = backend.host
        job.Barrier()
        peers.close()
        return waits, host

    results = _run(job, rank_body)
    for rank, (waits, host) in enumerate(results):
        others = [p for p in range(3) if p != rank]
        assert waits == [t for p in others for t in (100.0 + p, 10.0 * (p + 1))]
        assert host == 10.0 * ((rank + 1) % 3 + 1)
    assert node.open_mappings() == 0


def test_ipc_events_are_recorded_once_on_the_communication_stream_when_made():
    job, node = ThreadComm(2), IpcNode()

    def rank_body(rank):
        backend = IpcBackend(node, rank)
        backend.comm_stream.t = 7.0 + rank
        peers = IpcPeerMemory(job, backend)
        peers.allocate(1)
        peers.export_events(3)
        stream = backend.compute_stream
        peers.wait_peer_event(stream, 1 - rank, 2)  # a peer may wait before any step records it
        waited, host = stream.t, backend.host  # the host waited for the events' recording
        peers.close()
        return waited, host

    assert _run(job, rank_body) == [(8.0, 7.0), (7.0, 8.0)]


@pytest.mark.parametrize("closes", [1, 2])
def test_ipc_close_unmaps_first_and_frees_after_every_peer(closes):
    job, node = ThreadComm(3), IpcNode()

    def rank_body(rank):
        backend = IpcBackend(node, rank)
        peers = IpcPeerMemory(job, backend)
        peers.close()  # nothing allocated yet
        peers.allocate(5)
        peers.export_events(2)
        for _ in range(closes):
            peers.close()
        return backend.exported_bytes

    assert _run(job, rank_body) == [0, 0, 0]
    assert node.open_mappings() == 0 and node.live_allocations() == 0


def test_ipc_allocation_failing_on_one_rank_fails_on_all_and_gives_back_the_others():
    job, node = ThreadComm(3), IpcNode()

    def rank_body(rank):
        backend = IpcBackend(node, rank, fail_export=rank == 2)
        peers = IpcPeerMemory(job, backend)
        try:
            peers.allocate(64)
        finally:
            peers.close()  # as the channel and the reduction do
            assert backend.exported_bytes == 0
        return "allocated"

    outcomes = job.run(rank_body)
    assert [kind for kind, _ in outcomes] == ["raised"] * 3, outcomes
    assert all(isinstance(exc, HpcmmError) and "out of device memory on rank 2" in str(exc)
               for _, exc in outcomes)
    assert node.open_mappings() == 0 and node.live_allocations() == 0


def test_ipc_a_peer_that_cannot_be_mapped_leaves_no_mapping():
    """Every rank maps its first peer, then is refused the second: the first is closed again."""
    job, node = ThreadComm(3), IpcNode()

    def rank_body(rank):
        backend = IpcBackend(node, rank, opens=1)
        peers = IpcPeerMemory(job, backend)
        try:
            peers.allocate(8)
        finally:
            mapped = len(node.mapped[rank])
            peers.close()
            assert (mapped, backend.exported_bytes) == (0, 0)

    outcomes = job.run(rank_body)
    assert all(kind == "raised" and "peer access refused" in str(exc) for kind, exc in outcomes), outcomes
    assert node.open_mappings() == 0 and node.live_allocations() == 0


def test_ipc_a_peer_refused_on_one_rank_only_fails_on_every_rank():
    """Rank 1 alone cannot map its peers: every rank raises from ``allocate``, none goes on into the
    next collective (the events' exchange) while rank 1 waits in its tear-down."""
    job, node = ThreadComm(3), IpcNode()

    def rank_body(rank):
        backend = IpcBackend(node, rank, opens=0 if rank == 1 else None)
        peers = IpcPeerMemory(job, backend)
        try:
            peers.allocate(8)
            peers.export_events(1)
        finally:
            peers.close()
            assert backend.exported_bytes == 0
        return "went on"

    outcomes = job.run(rank_body)
    assert [kind for kind, _ in outcomes] == ["raised"] * 3, outcomes
    assert all("peer access refused" in str(exc) and "rank 1" in str(exc) for _, exc in outcomes), outcomes
    assert node.open_mappings() == 0 and node.live_allocations() == 0


class _EventsRefused(IpcBackend):
    def open_peer_event(self, handle: bytes) -> int:
        raise RuntimeError(f"cudaIpcOpenEventHandle: peer access refused on rank {self.rank}")


def test_ipc_an_event_refused_on_one_rank_only_fails_on_every_rank():
    """Rank 2 alone cannot open its peers' events: every rank raises from ``export_events`` with
    rank 2 named, and closing afterwards leaves no event open."""
    job, node = ThreadComm(3), IpcNode()

    def rank_body(rank):
        backend = (_EventsRefused if rank == 2 else IpcBackend)(node, rank)
        peers = IpcPeerMemory(job, backend)
        try:
            peers.allocate(8)
            peers.export_events(1)
            job.Barrier()  # the next collective: only reached where the events' failure was not agreed
        finally:
            peers.close()
        return "went on"

    outcomes = job.run(rank_body)
    assert [kind for kind, _ in outcomes] == ["raised"] * 3, outcomes
    # (the agreement names the rank in the job, which thread ranks share: the message names it here)
    assert all("peer access refused on rank 2" in str(exc) for _, exc in outcomes), outcomes
    assert all(not opened for opened in node.opened_events.values())
    assert node.open_mappings() == 0 and node.live_allocations() == 0
