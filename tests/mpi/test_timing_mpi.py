"""A product's time at several ranks: from the first rank's start to the last rank's end.

Each rank's part of every product is made to start ``0.5 × rank`` seconds late
(on its own clock) and to last ``1 + 0.25 × rank`` seconds; the run must then
report, for P ranks, the window ``0.5 (P−1) + 1 + 0.25 (P−1)``, whatever the
ranks' clocks, within the offsets' uncertainty.

    mpiexec -n 4 python -m pytest --with-mpi tests/mpi/test_timing_mpi.py
"""

from __future__ import annotations

import time

import numpy as np
import pytest
from mpi4py import MPI

import hpcmm
from hpcmm.execution.clock import SharedClock
from hpcmm.config import RunConfig
from hpcmm.execution.engine import Engine

COMM = MPI.COMM_WORLD
RANK, P = COMM.Get_rank(), COMM.Get_size()


@pytest.mark.mpi
def test_window_from_first_start_to_last_end(tmp_path_factory, monkeypatch):
    original = Engine.multiply

    def multiply(self):
        t = original(self)
        t.start = time.perf_counter() + 0.5 * RANK
        t.seconds = 1.0 + 0.25 * RANK
        return t

    monkeypatch.setattr(Engine, "multiply", multiply)
    out = str(tmp_path_factory.mktemp("timing") / "t.h5") if RANK == 0 else None
    out = COMM.bcast(out, root=0)
    result = hpcmm.run(RunConfig(m=4 * P + 1, n=3 * P + 2, k=5 * P, device="cpu", warmup=0, iters=2, out=out),
                       comm=COMM, write=False)
    want = 0.75 * (P - 1) + 1.0
    got = result.summary["seconds"]
    ok = abs(got - want) < 0.05  # the barrier before each product and the offsets' error: milliseconds
    verdicts = COMM.allgather((ok, f"rank {RANK}: seconds {got}, want {want}"))
    assert all(v for v, _ in verdicts), [m for v, m in verdicts if not v]
    assert result.summary["tflops"] == pytest.approx(result.summary["flops"] / got / 1e12, rel=1e-12)


@pytest.mark.mpi
def test_offsets_agree_with_rank_0():
    """Every rank's perf_counter on rank 0's clock: a barrier's exit is within milliseconds everywhere."""
    clock = SharedClock(COMM)
    COMM.Barrier()
    now = clock.to_shared(time.perf_counter())
    stamps = COMM.allgather(now)
    assert max(stamps) - min(stamps) < 0.05, stamps
    assert clock.uncertainty >= 0 and np.isfinite(clock.offset)
