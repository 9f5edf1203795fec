"""``tests/gpu/check.sh`` needs only the repository and the node's MPI (no kit in ``.device/``).

Run here with stand-ins: a launcher that MPIEXEC names (recording how it is called, also under
``timeout`` and ``env``) and a Python that CHECK_PYTHON names.  The GPU checks themselves run on
a GPU node.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from launcher import REPO

SCRIPT = REPO / "tests" / "gpu" / "check.sh"


def _stub(path: Path, text: str) -> Path:
    path.write_text("#!/bin/sh\n" + text)
    path.chmod(0o755)
    return path


def _check(tmp_path, *modes, **env):
    if shutil.which("bash") is None:
        pytest.skip("no bash")
    environ = {k: v for k, v in os.environ.items() if k not in ("MPIEXEC", "CHECK_PYTHON")}
    environ.update(OUT=str(tmp_path / "out"), CHECK_KIT="no", PATH="/usr/bin:/bin")
    environ.update(env)
    proc = subprocess.run(["bash", str(SCRIPT), *modes], env=environ, capture_output=True, text=True, timeout=120)
    return proc, (tmp_path / "out" / "table.txt").read_text()


def _path_without_mpi(tmp_path) -> str:
    """A PATH with this machine's commands but no MPI launcher (a CI machine may have one)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for folder in (Path("/usr/bin"), Path("/bin")):
        for program in folder.iterdir() if folder.is_dir() else ():
            if program.name.startswith(("mpiexec", "mpirun", "orterun", "srun")):
                continue
            if not (bin_dir / program.name).exists():
                (bin_dir / program.name).symlink_to(program)
    return str(bin_dir)


def test_without_a_launcher_it_says_what_to_do(tmp_path):
    python = _stub(tmp_path / "python", "exit 0\n")
    proc, table = _check(tmp_path, "quickbench", CHECK_PYTHON=str(python), PATH=_path_without_mpi(tmp_path))
    assert "setup" in table and "no MPI launcher: put the node's mpiexec on PATH or name it in MPIEXEC" in table
    assert proc.returncode == 1  # one failed check: the set-up


def test_the_launcher_mpiexec_names_runs_every_product(tmp_path):
    calls = tmp_path / "calls"
    launcher = _stub(tmp_path / "site-launcher", f'echo "$@" >> {calls}\nexit 0\n')
    python = _stub(tmp_path / "python", "exit 0\n")
    proc, table = _check(tmp_path, "quickbench", MPIEXEC=f"{launcher} --site-option",
                         CHECK_PYTHON=str(python))
    assert "setup" not in table, table
    lines = calls.read_text().splitlines()
    assert lines == [f"--site-option -n 2 {python} -m hpcmm bench --cases float64:32768 --no-peers "
                     f"--out /tmp/hpcmm-check-work/bench-n2-32768.h5 --overwrite",
                     f"--site-option -n 1 {python} -m hpcmm bench --cases float64:16384 --no-peers "
                     f"--out /tmp/hpcmm-check-work/bench-n1-16384.h5 --overwrite"], lines
    assert table.count(" PASS ") == 2, table
