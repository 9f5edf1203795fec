"""The ranks compare the plan before any buffer is made (hpcmm/planning/assemble.py, hpcmm/planning/choices.py).

One rank's planner is made to choose otherwise (another prefetch): every rank raises the same
one-line error naming the field and the ranks, and no rank built an engine (no block, no ring,
no IPC handle).  Run: ``mpiexec -n 2 python -m pytest --with-mpi tests/mpi/test_choices_mpi.py``.
"""

from __future__ import annotations

import dataclasses

import pytest
from test_run_mpi import COMM, P, RANK, config, everywhere, raised_everywhere

import hpcmm
from hpcmm.planning import assemble
from hpcmm.execution.engine import Engine

pytestmark = pytest.mark.mpi


@pytest.mark.timeout(300)  # a hang guard: a rank left waiting would block the suite
def test_a_rank_that_plans_otherwise_fails_every_rank_before_any_buffer(mpi_tmp_path, monkeypatch):
    if P < 2:
        pytest.skip("needs 2 ranks")
    planner = assemble.summa_choices

    def last_rank_differs(*args, **kwargs):
        choices = planner(*args, **kwargs)
        return dataclasses.replace(choices, prefetch=choices.prefetch + 1) if RANK == P - 1 else choices

    built = []
    real_init = Engine.__init__

    def recording_init(self, *args, **kwargs):
        built.append(True)
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(assemble, "summa_choices", last_rank_differs)
    monkeypatch.setattr(Engine, "__init__", recording_init)
    cfg = config(mpi_tmp_path, m=37, n=29, k=41, prefetch=1, verify="none", save_c=False)
    message = raised_everywhere(lambda: hpcmm.run(cfg, comm=COMM, write=False))
    assert message.startswith("the ranks differ in plan field prefetch: 1 on rank"), message
    assert f"2 on rank {P - 1}" in message, message
    everywhere(not built, "an engine was built before the plans were compared")
    COMM.Barrier()
