"""The check on the command line, end to end: a wrong low-precision product fails the run.

``tests/fault_runner.py --fault R:verify:corrupt`` adds 100 to rank R's C[0, 0]
after the products, just before the check, from outside the product itself.
"""

from __future__ import annotations

import h5py
import pytest
from launcher import mpiexec_or_skip, rank_environment, run_launcher
from ranklog import runner_argv
from test_reliability_budget import scaled


@pytest.fixture(scope="module")
def mpiexec() -> str:
    return mpiexec_or_skip()


def corrupted(mpiexec, ranks: int, rank: int, *args):
    """hpcmm at ``ranks`` ranks on the CPU, with 100 added to rank ``rank``'s C[0, 0] before the check."""
    environ = rank_environment("cpu")
    return run_launcher([mpiexec, "-n", str(ranks), *runner_argv([f"{rank}:verify:corrupt"]), *args],
                        scaled(300), env=environ)


@pytest.mark.timeout(1200)  # the backstop: the job's own guard is scaled(300)
def test_default_float16_with_one_wrong_element_fails(mpiexec, tmp_path):
    """The default problem (1024³ on CPUs) in float16, C[0, 0] + 100: FAILED, exit 1, verified=False."""
    out = tmp_path / "f16.h5"
    proc = corrupted(mpiexec, 1, 0, "--dtype", "float16", "--warmup", "0", "--iters", "1", "--out", str(out))
    assert proc.returncode == 1, proc.stdout
    assert "FAILED" in proc.stdout and "verification failed: freivalds residual" in proc.stdout
    with h5py.File(out, "r") as f:
        summary = f["summary"].attrs
        assert not bool(summary["verified"])
        assert float(summary["residual"]) > float(summary["tolerance"])
        assert int(f["config"].attrs["m"]) == 1024


@pytest.mark.parametrize("dtype", ["float32", "complex64"])
def test_one_wrong_element_fails_at_two_ranks(mpiexec, tmp_path, dtype):
    out = tmp_path / "x.h5"
    proc = corrupted(mpiexec, 2, 1, "--dtype", dtype, "--m", "97", "--n", "61", "--k", "3001", "--warmup", "0",
                     "--iters", "1", "--quiet", "--out", str(out))
    assert proc.returncode == 1, proc.stdout
    with h5py.File(out, "r") as f:
        assert not bool(f["summary"].attrs["verified"])
