"""The memory check counts every buffer hpcmm allocates for a product (hpcmm/planning/choices.py).

Every device allocation of a product's set-up goes through one of two doors: a transport's
``PeerMemory.allocate`` (blocks with their panel rings, the 2.5D partial C) or
``Backend.empty`` (C, re-layout scratch, the reduction's scratch).  Here both are counted while
``assembled`` builds the engine, and the sum must equal the bytes the planner predicted for the
rank (``EngineChoices.needed_bytes``), for every kind of buffer: one rank (no ring at all), a
rank alone in its grid row or column (no ring for that operand), prefetch 0 to 2, a GEMM that
re-lays panels out (scratch), channels that span nodes (deeper rings) beside channels that do not,
and 2.5D on one node and across nodes.

Run: ``mpiexec -n 4 python -m pytest --with-mpi tests/mpi/test_memory_count_mpi.py``.
"""

from __future__ import annotations

import pytest
from test_run_mpi import COMM, DEVICE, P, everywhere

from hpcmm.planning.assemble import assembled
from hpcmm.execution.backend import CpuBackend, GpuBackend
from hpcmm.config import RunConfig
from hpcmm.execution.transport.ipc import IpcPeerMemory, ShmPeerMemory

pytestmark = pytest.mark.mpi

CASES = {
    "default": {},
    "prefetch-0-panel-5": {"prefetch": 0, "panel": 5},
    "prefetch-2-panel-7": {"prefetch": 2, "panel": 7},
    "relaid-panels": {"gemm_order": "CF", "prefetch": 1, "panel": 6},
    "relaid-a-only": {"gemm_order": "CC", "panel": 9},
    "one-rank-per-node": {"ranks_per_node": 1, "prefetch": 0, "panel": 8},
    "two-ranks-per-node": {"ranks_per_node": 2, "prefetch": 0, "panel": 8},
    "grid-row": {"grid": (1, P)},
    "grid-column": {"grid": (P, 1), "prefetch": 2},
    "2.5d": {"algo": "2.5d:2", "ranks_per_node": P, "panel": 4},
    "dynamic": {"balance": "dynamic", "panel": 9},
    "2.5d-nodes-of-2": {"algo": "2.5d:2", "ranks_per_node": 2, "prefetch": 0, "panel": 6},
}


@pytest.mark.timeout(300)  # a hang guard
@pytest.mark.parametrize("case", sorted(CASES))
def test_every_allocation_of_a_product_is_counted(case, monkeypatch):
    settings = CASES[case]
    if settings.get("algo") == "2.5d:2" and (P % 2 or settings["ranks_per_node"] % 2):
        pytest.skip("2 layers need an even number of ranks per node")
    counted = []

    def counting(real, size_of):
        def call(self, *args, **kwargs):
            counted.append(size_of(*args, **kwargs))
            return real(self, *args, **kwargs)
        return call

    def nbytes(nbytes):
        return int(nbytes)

    def array_bytes(shape, dtype, order="C"):
        import numpy as np  # noqa: PLC0415

        return int(np.prod(shape)) * np.dtype(dtype).itemsize

    for memory in (ShmPeerMemory, IpcPeerMemory):
        monkeypatch.setattr(memory, "allocate", counting(memory.allocate, nbytes))
    for backend in (CpuBackend, GpuBackend):
        monkeypatch.setattr(backend, "empty", counting(backend.empty, array_bytes))
    config = RunConfig(device=DEVICE, m=61, n=47, k=53, warmup=0, iters=1, verify="none", **settings)
    with assembled(COMM, config, lambda backend, cfg: (cfg, (cfg.m, cfg.n, cfg.k)), lambda engine: None) as parts:
        predicted = parts.engine.needed_bytes()
        allocated = sum(counted)
        assert parts.plan.memory_bytes[COMM.rank] == predicted
    everywhere(allocated == predicted, f"{case}: allocated {allocated} bytes, the planner counted {predicted}")
