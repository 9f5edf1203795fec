"""Starting ``mpiexec`` jobs from tests: which launcher, which environment, a hard time limit."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def find_mpiexec(path_first: bool = False) -> str | None:
    """``$MPIEXEC``, else the ``mpiexec`` beside this Python, else the first on ``PATH``.

    Parameters
    ----------
    path_first : bool
        Look on ``PATH`` before beside this Python: a site's wrapper (as the GPU
        kit's ``.device/env.sh`` puts there) then wins over the one pip installed.
    """
    named = os.environ.get("MPIEXEC")
    if named:
        return shutil.which(named)
    beside = Path(sys.executable).parent / "mpiexec"
    beside = str(beside) if beside.is_file() and os.access(beside, os.X_OK) else None
    on_path = shutil.which("mpiexec")
    return (on_path or beside) if path_first else (beside or on_path)


def mpiexec_or_skip(path_first: bool = False) -> str:
    """:func:`find_mpiexec`, or skip the calling test, saying where it looked."""
    found = find_mpiexec(path_first)
    if found is None:
        places = "on PATH or beside this Python" if path_first else "beside this Python or on PATH"
        pytest.skip(f"no mpiexec ($MPIEXEC, {places}; pip install -e '.[mpich]' brings one)")
    return found


def quiet_environment() -> dict[str, str]:
    """This environment for the ranks: one BLAS thread each, no ``HPCMM_*`` settings but the device."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HPCMM_") or k == "HPCMM_DEVICE"}
    env.update(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    return env


def run_launcher(cmd: list[str], limit: float, cwd: Path = REPO, env=None) -> subprocess.CompletedProcess:
    """Run ``cmd`` in a process group of its own; on timeout, kill the whole group and fail.

    Returns
    -------
    subprocess.CompletedProcess
        With stdout and stderr merged into ``stdout``.
    """
    proc = subprocess.Popen(cmd, cwd=cwd, env=env if env is not None else quiet_environment(),
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"{' '.join(cmd)} did not finish in {limit} s; its output:\n{out[-20000:]}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, "")
