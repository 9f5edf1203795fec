"""``model check`` says so when a results file was made on a machine its description does not describe."""

from __future__ import annotations

from mpi4py import MPI

import hpcmm
from hpcmm.config import RunConfig
from hpcmm.model.cost import builtin, check_table


def test_a_cpu_file_against_a_gpu_description_is_flagged(tmp_path):
    out = tmp_path / "cpu.h5"
    hpcmm.run(RunConfig(m=48, device="cpu", warmup=0, iters=1, out=str(out)), comm=MPI.COMM_SELF)
    text = check_table([str(out)], builtin("h200x2"))
    assert f"warning: {out}: made on CPUs (numpy), but h200x2 describes GPUs" in text
    assert "warning" not in check_table([str(out)], builtin("phoenix-cpu"))
