"""The check on the command line, end to end: a wrong low-precision product fails the run.

``HPCMM_FAULT=0:corrupt`` adds 100 to C[0, 0] after the products (the test-only
hook of docs/reliability.md), from outside the product itself.
"""

from __future__ import annotations

import sys

import h5py
import pytest
from launcher import REPO, find_mpiexec, quiet_environment, run_launcher


@pytest.fixture(scope="module")
def mpiexec() -> str:
    found = find_mpiexec()
    if found is None:
        pytest.skip("no mpiexec beside this Python or on PATH (pip install -e '.[mpich]' brings one)")
    return found


def hpcmm(mpiexec, *args, **env):
    environ = quiet_environment()
    environ.update(HPCMM_DEVICE="cpu", PYTHONPATH=":".join(filter(None, [str(REPO), environ.get("PYTHONPATH")])))
    environ.update(env)
    return run_launcher([mpiexec, "-n", "1", sys.executable, "-m", "hpcmm", *args], 300, env=environ)


@pytest.mark.timeout(400)
def test_default_float16_with_one_wrong_element_fails(mpiexec, tmp_path):
    """The default problem (1024³ on CPUs) in float16, C[0, 0] + 100: FAILED, exit 1, verified=False."""
    out = tmp_path / "f16.h5"
    proc = hpcmm(mpiexec, "--dtype", "float16", "--warmup", "0", "--iters", "1", "--out", str(out),
                 HPCMM_FAULT="0:corrupt")
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
    environ = dict(HPCMM_FAULT="1:corrupt")
    proc = run_launcher([mpiexec, "-n", "2", sys.executable, "-m", "hpcmm", "--dtype", dtype, "--m", "97",
                         "--n", "61", "--k", "3001", "--warmup", "0", "--iters", "1", "--quiet", "--out", str(out)],
                        300, env=dict(quiet_environment(), HPCMM_DEVICE="cpu", PYTHONPATH=str(REPO), **environ))
    assert proc.returncode == 1, proc.stdout
    with h5py.File(out, "r") as f:
        assert not bool(f["summary"].attrs["verified"])
