"""What the ranks' shared clock promises, one behaviour a test.

Written against the mutants that mutation testing of hpcmm/execution/clock.py left alive
(docs/mutation.md).  The ranks are threads meeting in a stand-in communicator (``tests/thread_comm.py``,
with point-to-point messages, a maximum and the ``WTIME_IS_GLOBAL`` attribute added here), and each
rank's clocks (``perf_counter`` and ``MPI.Wtime``) read from a script, so that every offset and
uncertainty is exact: with a global ``Wtime`` the offsets come from it; otherwise each rank's offset
is that of its ping-pong round with rank 0 of the shortest round trip (the first of equal ones), off
by half the difference of the two ways' latencies, with half that round trip as its uncertainty.
Rank 0's answer decides the way for all.
"""

from __future__ import annotations

import threading
from types import SimpleNamespace

import numpy as np
import pytest
from mpi4py import MPI
from thread_comm import TIME_LIMIT, ThreadComm

from hpcmm.execution import clock as clock_module
from hpcmm.execution.clock import SharedClock, product_window


class Wire(ThreadComm):
    """Thread ranks with MPI's ``Send``/``Recv`` (by source and tag), ``Allreduce`` by MAX and ``Get_attr``."""

    def Get_attr(self, keyval):  # noqa: N802 - MPI's spelling
        assert keyval == MPI.WTIME_IS_GLOBAL
        return self._job.attrs[self.job_ranks[self.Get_rank()]]

    def Allreduce(self, send, recv, op=MPI.SUM):  # noqa: N802
        values = self._exchange(np.array(send, copy=True))
        if op == MPI.MAX:
            recv[...] = np.max(values, axis=0)
        else:
            assert op == MPI.SUM
            recv[...] = sum(values)

    def Send(self, buf, dest, tag=0):  # noqa: N802
        if not isinstance(buf, np.ndarray) or not isinstance(dest, int) or not isinstance(tag, int):
            raise TypeError(f"Send({type(buf).__name__}, dest={dest!r}, tag={tag!r})")
        if not 0 <= dest < self.size:
            raise ValueError(f"Send to rank {dest} of {self.size}")
        job = self._job
        with job.cond:
            job.mail.setdefault((id(self), self.Get_rank(), dest, tag), []).append(buf.copy())
            job.waiting.discard(self.job_ranks[dest])  # it may go on
            job.cond.notify_all()

    def Recv(self, buf, source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG):  # noqa: N802
        if not isinstance(buf, np.ndarray) or not isinstance(source, int) or not isinstance(tag, int):
            raise TypeError(f"Recv({type(buf).__name__}, source={source!r}, tag={tag!r})")
        me, job = self.Get_rank(), self._job

        def waiting_message():
            for (comm, src, dst, sent_tag), messages in job.mail.items():
                if comm == id(self) and dst == me and messages and source in (src, MPI.ANY_SOURCE) and \
                        tag in (sent_tag, MPI.ANY_TAG):
                    return messages
            return None

        with job.cond:
            if waiting_message() is None:  # only a rank with nothing to receive waits
                job.waiting.add(self.job_ranks[me])
                job.check()
                job.cond.wait_for(lambda: waiting_message() is not None or job.deadlock, timeout=TIME_LIMIT)
                job.waiting.discard(self.job_ranks[me])
            messages = waiting_message()
            if messages is None:
                raise threading.BrokenBarrierError("a receive that cannot complete")
            got = messages.pop(0)
        if got.size > buf.size:
            raise ValueError(f"a message of {got.size} elements into a buffer of {buf.size}")
        buf.reshape(-1)[: got.size] = got.reshape(-1)


def clocks(monkeypatch, attrs, perf, wtime=None, rounds=None):
    """Every rank's SharedClock, each rank reading ``perf[rank]`` (and ``wtime[rank]``) in order.

    Every scripted reading must be read: the script is the whole exchange."""
    world = Wire(len(attrs))
    world._job.attrs, world._job.mail = list(attrs), {}
    here = threading.local()
    perf = [list(readings) for readings in perf]
    wtime = [list(readings) for readings in (wtime or [[]] * len(attrs))]
    monkeypatch.setattr(clock_module, "time", SimpleNamespace(perf_counter=lambda: perf[here.rank].pop(0)))
    monkeypatch.setattr(clock_module, "MPI", SimpleNamespace(WTIME_IS_GLOBAL=MPI.WTIME_IS_GLOBAL, MAX=MPI.MAX,
                                                             Wtime=lambda: wtime[here.rank].pop(0)))

    def body(rank):
        here.rank = rank
        return SharedClock(world) if rounds is None else SharedClock(world, rounds)

    outcomes = world.run(body)
    assert all(how == "returned" for how, _ in outcomes), outcomes
    assert perf == [[]] * len(attrs) and wtime == [[]] * len(attrs)
    return [made for _, made in outcomes]


def ping_pong(offset, latencies, start=100.0):
    """The readings of one peer's rounds: ``(rank 0's, the peer's)``.  In round ``j`` the peer sends at
    ``t1 = start + 10 j`` (its clock), rank 0 reads ``t1 + offset + out`` and the peer receives at
    ``t1 + out + back`` (its clock); ``latencies`` is the rounds' ``(out, back)``."""
    zero, peer = [], []
    for j, (out, back) in enumerate(latencies):
        t1 = start + 10 * j
        zero.append(t1 + offset + out)
        peer += [t1, t1 + out + back]
    return zero, peer


# Round trips 1, 0.75, 0.75, 3: the first of the two shortest is taken, off by (0.25 - 0.5) / 2.
LATENCIES = [(0.5, 0.5), (0.25, 0.5), (0.5, 0.25), (1.0, 2.0)]


def test_ping_pong_takes_the_first_shortest_round_trip_of_each_rank(monkeypatch):
    zero_1, peer_1 = ping_pong(2.5, LATENCIES)
    zero_2, peer_2 = ping_pong(-1.25, LATENCIES[::-1], start=300.0)  # rounds 2 and 1 tie: round 2 (0.5, 0.25) first
    made = clocks(monkeypatch, [None, True, True], [zero_1 + zero_2, peer_1, peer_2], rounds=4)
    assert [c.method for c in made] == ["ping-pong with rank 0"] * 3
    assert [(c.offset, c.uncertainty) for c in made] == [(0.0, 0.0), (2.5 - 0.125, 0.375), (-1.25 + 0.125, 0.375)]
    assert made[1].to_shared(12.5) == 12.5 + 2.375 and made[2].to_shared(12.5) == 12.5 - 1.125
    assert made[0].to_shared(12.5) == 12.5


def test_ping_pong_runs_sixteen_rounds_by_default(monkeypatch):
    latencies = [(0.5, 0.5)] * 15 + [(0.125, 0.25)]  # the shortest last
    zero, peer = ping_pong(4.0, latencies)
    made = clocks(monkeypatch, [0, 0], [zero, peer])
    assert [(c.offset, c.uncertainty) for c in made] == [(0.0, 0.0), (4.0 - 0.0625, 0.1875)]


def test_a_global_wtime_gives_the_offsets_without_messages(monkeypatch):
    """Rank r's Wtime − perf_counter less rank 0's: 47, 37.5, 27.75."""
    made = clocks(monkeypatch, [True, False, None], perf=[[3.0], [13.0], [23.25]], wtime=[[50.0], [50.5], [51.0]])
    assert [c.method for c in made] == ["MPI.Wtime (global)"] * 3
    assert [(c.offset, c.uncertainty) for c in made] == [(0.0, 0.0), (-9.5, 0.0), (-19.25, 0.0)]
    assert made[2].to_shared(20.0) == 0.75


def test_one_rank_has_no_offset_either_way(monkeypatch):
    assert [(c.method, c.offset, c.uncertainty) for c in clocks(monkeypatch, [False], [[]])] == [
        ("ping-pong with rank 0", 0.0, 0.0)]
    assert [(c.method, c.offset, c.uncertainty) for c in clocks(monkeypatch, [True], [[7.0]], [[9.0]])] == [
        ("MPI.Wtime (global)", 0.0, 0.0)]


@pytest.mark.parametrize("starts, seconds, window", [
    ([3.0, 1.0, 2.0], [1.0, 5.0, 0.5], (1.0, 6.0)),
    ([-2.0, 4.0], [10.0, 1.0], (-2.0, 8.0)),
], ids=["three-ranks", "first-ends-last"])
def test_a_products_window_runs_from_the_first_start_to_the_last_end(starts, seconds, window):
    world = Wire(len(starts))
    outcomes = world.run(lambda rank: product_window(world, starts[rank], seconds[rank]))
    assert outcomes == [("returned", window)] * len(starts)
