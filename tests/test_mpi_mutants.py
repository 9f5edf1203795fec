"""What the broadcasts between nodes promise: the whole panel arrives, in messages no larger
than the chunk, through the backend's buffers or through pinned host memory.

Written against the mutants that mutation testing of hpcmm/execution/transport/mpi.py left without a
test on a CPU (docs/mutation.md: the MPI suite runs under mpiexec, outside mutmut).  A pair of
stand-in communicators joins a root and a receiver in one process: what the root's ``Bcast``
sends, the receiver's ``Bcast`` takes, message by message.
"""

from __future__ import annotations

import numpy as np
import pytest

from hpcmm.execution.backend import CpuBackend
from hpcmm.execution.transport.mpi import MAX_MESSAGE, DirectBroadcast, StagedBroadcast


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
