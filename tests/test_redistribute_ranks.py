"""hpcmm.io.redistribute at several ranks in one process: each rank a thread, the messages through a mailbox.

The same moves run under mpiexec through :class:`hpcmm.Matmul` in tests/mpi; here every rank's
result is held against the global matrix, for layouts where blocks are split, kept, replicated or
empty, and for pieces larger than one message.
"""

from __future__ import annotations

import threading
import types

import mpi4py
import numpy as np
import pytest

from hpcmm.io import redistribute as module
from hpcmm.geometry.distribution import Layout
from hpcmm.io.redistribute import overlap, redistribute


class _Mailbox:
    def __init__(self):
        self.messages: dict[tuple[int, int, int], list[np.ndarray]] = {}
        self.arrived = threading.Condition()


class _Send:
    def complete(self):
        pass


class _Receive:
    def __init__(self, box, source, dest, tag, buffer):
        self.box, self.key, self.buffer = box, (source, dest, tag), buffer

    def complete(self):
        with self.box.arrived:
            assert self.box.arrived.wait_for(lambda: self.box.messages.get(self.key), timeout=60), self.key
            data = self.box.messages[self.key].pop(0)
        assert data.size == self.buffer.size, (self.key, data.size, self.buffer.size)
        self.buffer[...] = data


class _Comm:
    """One rank's end: Isend copies into the mailbox at once; Irecv's buffer is filled at Waitall."""

    def __init__(self, box, rank, size):
        self.box, self.rank, self.size = box, rank, size

    def Get_rank(self):
        return self.rank

    def Get_size(self):
        return self.size

    def Isend(self, buf, dest, tag):
        assert dest != self.rank and buf.dtype == np.uint8 and buf.flags.c_contiguous
        with self.box.arrived:
            self.box.messages.setdefault((self.rank, dest, tag), []).append(buf.copy())
            self.box.arrived.notify_all()
        return _Send()

    def Irecv(self, buf, source, tag):
        assert source != self.rank
        return _Receive(self.box, source, self.rank, tag, buf)


def _waitall(requests):
    for request in requests:
        request.complete()


@pytest.fixture
def mailbox_mpi(monkeypatch):
    """``from mpi4py import MPI`` inside redistribute finds a Request.Waitall that completes these requests."""
    monkeypatch.setattr(mpi4py, "MPI", types.SimpleNamespace(Request=types.SimpleNamespace(Waitall=_waitall)),
                        raising=False)


def _run(whole, source, target, outs=None):
    """Every rank's target block, each rank in a thread."""
    box, size = _Mailbox(), len(source)
    results, errors = [None] * size, []

    def rank_main(rank):
        try:
            (r0, r1), (c0, c1) = source[rank]
            local = np.asfortranarray(whole[r0:r1, c0:c1]) if rank % 2 else whole[r0:r1, c0:c1].copy()
            out = None if outs is None else outs[rank]
            results[rank] = redistribute(_Comm(box, rank, size), local, source, target, out=out)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            errors.append(exc)

    threads = [threading.Thread(target=rank_main, args=(rank,)) for rank in range(size)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not any(thread.is_alive() for thread in threads), "a rank did not finish"
    if errors:
        raise errors[0]
    assert not any(box.messages.values()), "messages sent that no rank received"
    return results


def _check(whole, target, results):
    for rank, ((r0, r1), (c0, c1)) in enumerate(target):
        assert results[rank].shape == (r1 - r0, c1 - c0), rank
        np.testing.assert_array_equal(results[rank], whole[r0:r1, c0:c1], err_msg=f"rank {rank}")


@pytest.mark.parametrize("dtype", ["float64", "complex64", "int16"])
def test_rows_to_columns_at_two_ranks(mailbox_mpi, dtype):
    whole = (np.arange(4 * 6).reshape(4, 6) * (1 + 1j if dtype == "complex64" else 1)).astype(dtype)
    source = [((0, 2), (0, 6)), ((2, 4), (0, 6))]
    target = [((0, 4), (0, 2)), ((0, 4), (2, 6))]
    results = _run(whole, source, target)
    _check(whole, target, results)
    assert all(r.dtype == whole.dtype for r in results)


def test_one_grid_to_another_at_six_ranks_uneven(mailbox_mpi):
    whole = np.random.default_rng(1).standard_normal((7, 9))
    source = Layout.grid(7, 9, 9, (2, 3)).blocks["C"]
    target = Layout.grid(7, 9, 9, (3, 2), order=(5, 3, 1, 0, 2, 4)).blocks["C"]
    _check(whole, target, _run(whole, source, target))


def test_a_rank_with_nothing_and_replicated_receivers(mailbox_mpi):
    whole = np.arange(20.0).reshape(4, 5)
    source = [((0, 4), (0, 5)), ((0, 0), (0, 0)), ((0, 0), (0, 0))]
    target = [((1, 3), (1, 4)), ((0, 4), (0, 5)), ((0, 4), (0, 5))]  # target blocks may overlap
    _check(whole, target, _run(whole, source, target))


def test_into_a_given_fortran_order_out(mailbox_mpi):
    whole = np.arange(12.0).reshape(3, 4)
    source = [((0, 3), (0, 2)), ((0, 3), (2, 4))]
    target = [((0, 2), (0, 4)), ((2, 3), (0, 4))]
    outs = [np.zeros((2, 4), order="F"), np.zeros((1, 4), order="F")]
    results = _run(whole, source, target, outs)
    assert results[0] is outs[0] and results[1] is outs[1]
    _check(whole, target, results)


def test_pieces_larger_than_one_message_go_in_several(mailbox_mpi, monkeypatch):
    monkeypatch.setattr(module, "MESSAGE_BYTES", 24)  # three float64 a message
    whole = np.arange(5 * 7.0).reshape(5, 7)
    source = [((0, 5), (0, 3)), ((0, 5), (3, 7))]
    target = [((0, 2), (0, 7)), ((2, 5), (0, 7))]
    _check(whole, target, _run(whole, source, target))


def test_overlap_is_empty_where_ranges_only_touch():
    assert overlap(((0, 2), (0, 4)), ((1, 4), (2, 3))) == ((1, 2), (2, 3))
    assert overlap(((0, 2), (0, 4)), ((2, 4), (0, 4))) is None
    assert overlap(((0, 2), (0, 4)), ((0, 2), (4, 6))) is None
    assert overlap(((0, 3), (1, 4)), ((1, 5), (0, 2))) == ((1, 3), (1, 2))
