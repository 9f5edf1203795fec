"""What the broadcasts between nodes promise: the whole panel arrives, in messages no larger
than the chunk, through the backend's buffers or through pinned host memory.  And what a dynamic
tile's trip from one rank to another promises: the array arrives whole, in its own type, in messages
of at most one chunk through one pinned buffer (``staged``) or as one message of the backend's own
buffer up to MPI's largest (``mpi``), matched by source and tag.

Written against the mutants that mutation testing of hpcmm/execution/transport/mpi.py left without a
test on a CPU (docs/mutation.md: the MPI suite runs under mpiexec, outside mutmut).  A pair of
stand-in communicators joins a root and a receiver in one process: what the root's ``Bcast``
sends, the receiver's ``Bcast`` takes, message by message.  Point-to-point moves run two ranks as
threads (:class:`~thread_comm.ThreadComm`), which lists every message sent.
"""

from __future__ import annotations

import numpy as np
import pytest
from thread_comm import ThreadComm

from hpcmm.execution.backend import CpuBackend
from hpcmm.execution.transport import mpi as mpi_module
from hpcmm.execution.transport.mpi import MAX_MESSAGE, DirectBroadcast, PointToPoint, StagedBroadcast


class _Wire:
    """The messages in flight from one root to one receiver."""

    def __init__(self):
        self.messages = []


class _Root:
    def __init__(self, wire):
        self.wire = wire

    def Bcast(self, buf, root):  # noqa: N802 - mpi4py's name
        assert root == 0
        self.wire.messages.append(np.array(buf, copy=True))


class _Receiver:
    def __init__(self, wire):
        self.wire = wire
        self.sizes = []

    def Bcast(self, buf, root):  # noqa: N802
        assert root == 0
        message = self.wire.messages.pop(0)
        assert message.shape == buf.shape, (message.shape, buf.shape)
        buf[...] = message
        self.sizes.append(buf.shape[0])


def _panel(nbytes, seed):
    return np.random.default_rng(seed).integers(0, 256, nbytes, dtype=np.uint8)


@pytest.mark.parametrize("cls", [DirectBroadcast, StagedBroadcast])
@pytest.mark.parametrize("nbytes, chunk", [(1000, 64), (1024, 256), (7, 64), (64, 64), (65, 64), (300, 1)])
def test_the_whole_panel_arrives_in_chunks(cls, nbytes, chunk):
    backend = CpuBackend()
    sender, receiver = cls(backend, chunk=chunk), cls(backend, chunk=chunk)
    wire = _Wire()
    src = _panel(nbytes, nbytes + chunk)
    dst = np.zeros_like(src)
    sender.send(_Root(wire), src)
    sent = [m.shape[0] for m in wire.messages]
    assert sum(sent) == nbytes and all(0 < s <= chunk for s in sent)
    assert len(sent) == -(-nbytes // chunk)
    comm = _Receiver(wire)
    event = receiver.receive(comm, dst)
    backend.event_synchronize(event)
    np.testing.assert_array_equal(dst, src)
    assert comm.sizes == sent and not wire.messages
    sender.close()
    receiver.close()


def test_staged_broadcast_reuses_two_pinned_buffers_of_one_chunk():
    backend = CpuBackend()
    staged = StagedBroadcast(backend, chunk=128)
    assert len(staged.host) == 2 and all(h.nbytes >= 128 for h in staged.host)
    wire = _Wire()
    for seed in range(3):  # one broadcast after another through the same buffers
        src = _panel(1000, seed)
        staged.send(_Root(wire), src)
        dst = np.zeros_like(src)
        backend.event_synchronize(StagedBroadcast(backend, chunk=128).receive(_Receiver(wire), dst))
        np.testing.assert_array_equal(dst, src)
    staged.close()
    assert staged.host == []


def test_paths_and_the_default_chunk():
    backend = CpuBackend()
    assert DirectBroadcast.path == "mpi" and StagedBroadcast.path == "staged"
    assert DirectBroadcast(backend).chunk == MAX_MESSAGE == 2**30
    assert StagedBroadcast(backend).chunk == 32 << 20
    assert DirectBroadcast(backend).receive(_Receiver(_Wire()), np.zeros(0, np.uint8)) is None


# -- point to point: a dynamic tile's rows from one rank to another ------------------------------------

#: MPI's largest message in these tests, so that a direct move's spans stay few even where a wrong
#: count of spans runs up to the largest message (2**30 bytes: a list of up to 2**30 spans).
LARGEST = 1 << 14


@pytest.fixture(autouse=True)
def _largest_message(monkeypatch):
    monkeypatch.setattr(mpi_module, "MAX_MESSAGE", LARGEST)


class _PinCounting(CpuBackend):
    """A CPU backend that counts the pinned host memory it hands out."""

    def __init__(self):
        super().__init__()
        self.pinned = []

    def pinned_empty(self, nbytes):
        self.pinned.append(nbytes)
        return super().pinned_empty(nbytes)


def _array(dtype, count, seed):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "u":
        return rng.integers(1, 256, count).astype(dtype)
    values = rng.standard_normal(count) + 1  # nonzero (almost surely): an element left 0 shows
    if np.dtype(dtype).kind == "c":
        values = values + 1j * (rng.standard_normal(count) + 1)
    return values.astype(dtype)


def _move(arrays, staged, chunk=None, source=0, dest=1):
    """``arrays`` (``(tag, array)``) sent by ``source`` in order and received by ``dest`` in order, two
    ranks as threads each with its own :class:`PointToPoint`; returns what ``dest`` received, the sent
    arrays afterwards, the messages and both sides' movers (closed)."""
    comm = ThreadComm(2)
    kwargs = {} if chunk is None else {"chunk": chunk}
    movers = [PointToPoint(CpuBackend(), staged, **kwargs) for _ in range(2)]
    sent = [(tag, array.copy()) for tag, array in arrays]
    got = [np.zeros_like(array) for _, array in arrays]

    def body(rank):
        for (tag, array), dst in zip(sent, got):
            if rank == source:
                movers[rank].send(comm, dest, tag, array)
            else:
                movers[rank].receive(comm, source, tag, dst)
        movers[rank].close()

    for kind, value in comm.run(body):
        if kind == "raised":
            raise value
    return got, [array for _, array in sent], comm.messages, movers


@pytest.mark.parametrize("staged", [False, True])
@pytest.mark.parametrize("dtype", ["uint8", "float32", "float64", "complex128"])
@pytest.mark.parametrize("count, chunk_items", [(1000, 64), (1000, 1), (999, 7), (7, 64), (64, 64), (65, 64),
                                                (1, 1), (0, 4)])
def test_a_tile_arrives_whole_in_messages_of_at_most_a_chunk_when_staged(staged, dtype, count, chunk_items):
    item = np.dtype(dtype).itemsize
    chunk = chunk_items * item
    src = _array(dtype, count, count + chunk)
    got, after, messages, movers = _move([(5, src)], staged, chunk)
    np.testing.assert_array_equal(got[0], src)
    assert got[0].dtype == src.dtype
    np.testing.assert_array_equal(after[0], src)  # the sender's array is left as it was
    sizes = [nbytes for _, _, nbytes in messages]
    assert all((s, d) == (0, 1) for s, d, _ in messages)
    assert sum(sizes) == src.nbytes and all(s > 0 for s in sizes)
    if staged:  # one chunk a message: every one full but the last
        assert sizes == [min(chunk, src.nbytes - lo) for lo in range(0, src.nbytes, chunk)]
    else:  # the backend's own buffer, whole (up to MPI's largest message), whatever the chunk
        assert src.nbytes <= LARGEST and sizes == ([src.nbytes] if count else [])
    assert [m.path for m in movers] == ["staged" if staged else "mpi"] * 2


@pytest.mark.parametrize("staged", [False, True])
def test_tiles_go_both_ways_matched_by_source_and_tag_through_the_same_buffer(staged):
    """Several tiles of several types over one pair of movers, each with its own tag, from rank 1 to
    rank 0 (the ranks' order does not matter), each received whole into its own array."""
    arrays = [(3, _array("float64", 300, 1)), (11, _array("complex64", 77, 2)), (2, _array("uint8", 1000, 3)),
              (7, _array("float32", 129, 4))]
    got, after, messages, _ = _move(arrays, staged, chunk=64, source=1, dest=0)
    for (_, src), received, left in zip(arrays, got, after):
        np.testing.assert_array_equal(received, src)
        np.testing.assert_array_equal(left, src)
    assert {(s, d) for s, d, _ in messages} == {(1, 0)}
    assert sum(n for *_, n in messages) == sum(src.nbytes for _, src in arrays)


def test_a_receive_waits_for_its_own_tag_and_source():
    """A tile sent with another tag, or by another rank, is not the one a receive takes: it waits."""
    comm = ThreadComm(3)
    mover = PointToPoint(CpuBackend(), staged=True, chunk=64)
    dst = np.zeros(10)

    def body(rank):
        if rank == 0:
            PointToPoint(CpuBackend(), staged=True, chunk=64).send(comm, 2, 4, np.ones(10))
        elif rank == 1:
            PointToPoint(CpuBackend(), staged=False).send(comm, 2, 3, np.ones(10))
        else:
            mover.receive(comm, 0, 3, dst)

    outcomes = comm.run(body)
    assert [kind for kind, _ in outcomes] == ["returned", "returned", "raised"]
    assert not dst.any()


@pytest.mark.parametrize("staged", [False, True])
def test_only_the_staged_path_takes_pinned_memory_one_chunk_of_it(staged):
    backend = _PinCounting()
    mover = PointToPoint(backend, staged, chunk=4096)
    assert backend.pinned == ([4096] if staged else [])
    assert mover.path == ("staged" if staged else "mpi")
    backend = _PinCounting()
    PointToPoint(backend, staged)
    assert backend.pinned == ([32 << 20] if staged else [])  # the default chunk: 32 MiB


@pytest.mark.parametrize("largest_items", [1, 16, 999, 1000])
def test_a_direct_move_larger_than_mpis_largest_message_is_split(monkeypatch, largest_items):
    """MPIs without large-count calls take messages of at most MAX_MESSAGE bytes (made small here): the
    direct path sends a larger array in pieces of at most that."""
    monkeypatch.setattr(mpi_module, "MAX_MESSAGE", largest_items * 8)
    src = _array("float64", 1000, largest_items)
    got, _, messages, _ = _move([(6, src)], staged=False, chunk=8000)
    np.testing.assert_array_equal(got[0], src)
    sizes = [n for *_, n in messages]
    assert sizes == [min(largest_items * 8, src.nbytes - lo) for lo in range(0, src.nbytes, largest_items * 8)]
