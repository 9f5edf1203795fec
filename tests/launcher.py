"""Starting ``mpiexec`` jobs from tests: which launcher, which environment, a hang guard."""

from __future__ import annotations

import functools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
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


@functools.cache
def gpu_count() -> int:
    """hpcmm's count of usable GPUs here (:func:`hpcmm.execution.backend.gpu_count`), asked once, in a child
    process: a test that only decides its skip by it calls no hpcmm in pytest's own process (the rule of
    mutmut's selection, tests/test_mutmut_config.py), and pytest holds no CUDA context of its own."""
    code = "from hpcmm.execution.backend import gpu_count; print(gpu_count())"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    return int(done.stdout.split()[-1])


def quiet_environment() -> dict[str, str]:
    """This environment for the ranks: one BLAS thread each, no ``HPCMM_*`` settings but the device."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HPCMM_") or k == "HPCMM_DEVICE"}
    env.update(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    return env


def rank_environment(device: str | None = None, **extra: str) -> dict[str, str]:
    """:func:`quiet_environment` with this checkout first on ``PYTHONPATH`` (the ranks may run in another
    folder and must still import this hpcmm), ``HPCMM_DEVICE`` set to ``device`` if given, then ``extra``."""
    env = quiet_environment()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    if device is not None:
        env["HPCMM_DEVICE"] = device
    env.update(extra)
    return env


def run_launcher(cmd: list[str], limit: float | None, cwd: Path = REPO, env=None,
                 stall: float | None = None) -> subprocess.CompletedProcess:
    """Run ``cmd`` in a process group of its own; on a hang, kill the whole group and fail.

    A hang is ``limit`` seconds in all (``None``: no such limit), or, with ``stall``,
    ``stall`` seconds in which the job printed nothing: a job that reports as it goes
    (a line per case, per product, per test) is judged by its progress, which a loaded
    machine slows but does not stop, not by its total time.

    Returns
    -------
    subprocess.CompletedProcess
        With stdout and stderr merged into ``stdout``.
    """
    if stall is None:
        return _run_for(cmd, limit, cwd, env)
    with tempfile.TemporaryFile("w+b") as log:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env if env is not None else quiet_environment(),
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        started = heard = time.monotonic()
        size = 0
        why = None
        while proc.poll() is None:
            time.sleep(0.2)
            now, grown = time.monotonic(), os.fstat(log.fileno()).st_size
            if grown != size:
                size, heard = grown, now
            if now - heard > stall:
                why = f"printed nothing for {stall:.0f} s"
            elif limit is not None and now - started > limit:
                why = f"did not finish in {limit} s"
            if why is not None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                break
        log.seek(0)
        out = log.read().decode(errors="replace")
    if why is not None:
        pytest.fail(f"{' '.join(cmd)} {why}; its output:\n{out[-20000:]}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, "")


def _run_for(cmd: list[str], limit: float | None, cwd: Path, env) -> subprocess.CompletedProcess:
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
