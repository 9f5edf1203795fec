"""A backend whose GEMMs and transfers take known times, on a virtual clock.

It behaves like a GPU (``on_gpu``): two streams, each at a virtual time;
an event recorded on a stream happens when the stream gets to it (never
before the host queued it); a stream that waits on an event jumps to it; a
GEMM occupies its stream for ``gemm_seconds(width)`` and computes the real
product with numpy, so the run's C is right.  The host has a clock of its
own, which the test moves (host work between launches) and which
``synchronize`` brings up to the streams.  A re-layout of a panel copies it
and occupies its stream for ``relayout_seconds``.  Install it with :func:`install`,
which also makes the engine read the host time from it.
"""

from __future__ import annotations

import dataclasses

from hpcmm.execution import engine as engine_module
from hpcmm.execution.backend import CpuBackend
from hpcmm.execution.transport.channel import Transfer


@dataclasses.dataclass
class FakeStream:
    t: float = 0.0


class FakeBackend(CpuBackend):
    name = "fake"
    on_gpu = True

    def __init__(self, gemm_seconds=lambda width: 1.0, relayout_seconds: float = 0.0) -> None:
        super().__init__()
        self.host = 0.0
        self.compute_stream, self.comm_stream = FakeStream(), FakeStream()
        self.gemm_seconds = gemm_seconds
        self.relayout_seconds = relayout_seconds

    def now(self) -> float:
        return self.host

    def event(self, stream=None, interprocess=False):
        stream = stream if stream is not None else self.compute_stream
        stream.t = max(stream.t, self.host)
        return stream.t

    def wait(self, stream, event) -> None:
        if event is not None:
            stream.t = max(stream.t, event)

    def event_synchronize(self, event) -> None:
        if event is not None:
            self.host = max(self.host, event)

    def elapsed(self, start, stop) -> float:
        return float(stop - start)

    def synchronize(self) -> None:
        self.host = max(self.host, self.compute_stream.t, self.comm_stream.t)

    def stream_synchronize(self, stream) -> None:
        self.host = max(self.host, stream.t)

    def gemm(self, a, b, c, accumulate, stream=None, tf32=False) -> None:
        super().gemm(a, b, c, accumulate)
        stream = stream if stream is not None else self.compute_stream
        stream.t = max(stream.t, self.host) + self.gemm_seconds(a.shape[1])

    def relayout(self, dst, src, stream=None) -> None:
        """The real copy, taking ``relayout_seconds`` of ``stream`` (the communication stream by default)."""
        super().relayout(dst, src)
        stream = stream if stream is not None else self.comm_stream
        stream.t = max(stream.t, self.host) + self.relayout_seconds

    def transfer(self, seconds: float, blocking: bool) -> float:
        """A transfer of ``seconds`` on the communication stream; MPI-like ones hold the host too."""
        stream = self.comm_stream
        stream.t = max(stream.t, self.host) + seconds
        if blocking:
            self.host = stream.t
        return stream.t


def install(monkeypatch, engine, fake: FakeBackend, *, a_seconds=0.0, b_seconds=0.0, host_seconds=0.0,
            blocking=False, mpi_wait=None) -> None:
    """Make ``engine`` (built and loaded with a real backend) run on ``fake``.

    Every fetch of an A panel costs the host ``host_seconds`` first (Python, not
    a transfer); A and B panels then take ``a_seconds`` and ``b_seconds`` on
    the communication stream (``0``: the panel is the rank's own, no transfer).
    With ``mpi_wait`` (seconds) the transfers are as the channel's MPI relay
    makes them: the host first waits ``mpi_wait`` for a free relay slot, then
    moves the bytes itself (it is held until they are there), and the transfer
    has no ready event, only its start and ``host_bound``.
    """
    monkeypatch.setattr(engine_module, "perf_counter", fake.now)
    engine.backend = fake

    def wrap(fetch, seconds, host):
        def fake_fetch(root, offset, nbytes, slot, slot_free):
            own = fetch(root, offset, nbytes, slot, slot_free)
            fake.host += host
            if not seconds:
                return own
            fake.wait(fake.comm_stream, slot_free)
            if mpi_wait is None:
                return Transfer(own.panel, fake.transfer(seconds, blocking), 0, "fake", nbytes)
            fake.event_synchronize(slot_free)
            fake.host += mpi_wait
            started = fake.event(fake.comm_stream)
            fake.transfer(seconds, blocking=True)
            return Transfer(own.panel, None, 0, "fake", nbytes, started, host_bound=True)

        return fake_fetch

    monkeypatch.setattr(engine.row, "fetch", wrap(engine.row.fetch, a_seconds, host_seconds))
    monkeypatch.setattr(engine.col, "fetch", wrap(engine.col.fetch, b_seconds, 0.0))
