"""How a run ends, as a batch script sees it: ``--status-file`` and the default output name.

The status file is read back after the job, never the ranks' merged output.
"""

from __future__ import annotations

import os
import re
import sys

import h5py
import pytest
from launcher import find_mpiexec, rank_environment, run_launcher
from ranklog import runner_argv

from hpcmm.io import status

SMALL = ["--m", "13", "--n", "7", "--k", "5", "--quiet"]


def read_status(path) -> dict[str, str]:
    lines = path.read_text().splitlines()
    assert all("=" in line for line in lines), lines
    return dict(line.split("=", 1) for line in lines)


# -- the module ---------------------------------------------------------------------


@pytest.mark.parametrize("argv, path", [
    ([], None),
    (["--status-file", "s.txt"], "s.txt"),
    (["run", "--m", "4", "--status-file=a/b.txt"], "a/b.txt"),
    (["--status-file", "x", "--status-file", "y"], "y"),
    (["--status-file"], None),
    (["--status-file="], None),
    (["--", "--status-file", "x"], None),
])
def test_status_path(argv, path):
    assert status.status_path(argv) == path


def test_write_status_replaces_atomically_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "job.status"
    status.write_status(str(target), {"state": "running", "ranks": 2})
    status.write_status(str(target), {"state": "finished", "exit": 2, "reason": "bad input:\n two\tlines"})
    assert read_status(target) == {"state": "finished", "exit": "2", "reason": "bad input: two lines"}
    assert [p.name for p in tmp_path.iterdir()] == ["job.status"]


def test_write_status_into_a_missing_folder_raises(tmp_path):
    with pytest.raises(OSError):
        status.write_status(str(tmp_path / "missing" / "job.status"), {"state": "running"})
    assert list(tmp_path.iterdir()) == []


def test_recorded_keeps_the_exit_status_when_the_file_cannot_be_written(tmp_path, capsys):
    """Refused at the start (a missing folder) or failing at the end: the status is the command's."""
    argv = ["--status-file", str(tmp_path / "missing" / "s")]
    assert status.recorded(argv, lambda a: 2) == 2  # ended before start(): the path is left alone
    assert capsys.readouterr().err == ""

    def refused(argv):
        with pytest.raises(status.InputError, match="directory .* does not exist"):
            status.start()
        return 2

    assert status.recorded(argv, refused) == 2
    assert list(tmp_path.iterdir()) == []
    path = tmp_path / "s"

    def folder_gone(argv):
        status.start()
        path.unlink()
        tmp_path.chmod(0o500)
        return 0

    try:
        if os.geteuid() != 0:
            assert status.recorded(["--status-file", str(path)], folder_gone) == 0
            assert "cannot write it" in capsys.readouterr().err
    finally:
        tmp_path.chmod(0o700)


def test_recorded_notes_the_reason(tmp_path):
    path = tmp_path / "s"

    def body(argv):
        status.start()  # the command line is parsed: before the work starts
        assert read_status(path)["state"] == "running"
        status.note("--m=0: expected an integer >= 1")
        return 2

    assert status.recorded(["--status-file", str(path)], body) == 2
    assert read_status(path) == {"state": "finished", "exit": "2", "ranks": "1", "command": "run",
                                 "reason": "bad input: --m=0: expected an integer >= 1"}


# -- end to end, 2 ranks -----------------------------------------------------------


@pytest.fixture(scope="module")
def mpiexec():
    found = find_mpiexec()
    if found is None:
        pytest.skip("no mpiexec beside this Python or on PATH")
    return found


def hpcmm(mpiexec, tmp_path, args, faults=(), **env):
    """``python -m hpcmm`` at 2 ranks; with ``faults``, through tests/fault_runner.py."""
    environ = rank_environment("cpu", **env)
    program = runner_argv(list(faults)) if faults else [sys.executable, "-m", "hpcmm"]
    cmd = [mpiexec, "-n", "2", *program, *args]
    return run_launcher(cmd, 120, cwd=tmp_path, env=environ)


@pytest.mark.parametrize("args, env, faults, code, state, reason", [
    (SMALL, {}, (), 0, "finished", r"done"),
    (["--m", "0"], {}, (), 2, "finished", r"bad input: argument --m: --m=0: expected an integer >= 1"),
    (SMALL, {"HPCMM_PREFETCH": "9"}, (), 2, "finished",
     r"bad input: HPCMM_PREFETCH=9: expected an integer from 0 to 8"),
    (SMALL, {}, ("1:verify:corrupt",), 1, "finished", r"verification failed: freivalds residual .*"),
    # An unexpected error on one rank aborts every rank: hpcmm did not end by itself.
    (SMALL, {}, ("1:multiply:raise",), None, "running", None),
], ids=["ok", "bad-flag", "bad-variable", "verification", "abort"])
def test_status_file_says_why_the_run_ended(mpiexec, tmp_path, args, env, faults, code, state, reason):
    path = tmp_path / "job.status"
    proc = hpcmm(mpiexec, tmp_path, [*args, "--status-file", str(path)], faults, **env)
    fields = read_status(path)
    assert fields["state"] == state, proc.stdout
    assert fields["ranks"] == "2" and fields["command"] == "run"
    if code is None:
        assert proc.returncode != 0 and "exit" not in fields, proc.stdout
        return
    assert proc.returncode == code, proc.stdout
    assert fields["exit"] == str(code)
    assert re.fullmatch(reason, fields["reason"]), fields


def test_default_command_twice_writes_two_files(mpiexec, tmp_path):
    """Without --out every run gets a new name, printed; an explicit --out still refuses to overwrite."""
    first = hpcmm(mpiexec, tmp_path, SMALL)
    second = hpcmm(mpiexec, tmp_path, SMALL)
    assert first.returncode == 0, first.stdout
    assert second.returncode == 0, second.stdout
    pattern = r"hpcmm-results-\d{8}-\d{6}(?:-\d+)?\.h5"
    names = sorted(p.name for p in tmp_path.iterdir())
    assert len(names) == 2 and all(re.fullmatch(pattern, name) for name in names), names
    # Each summary says where its results are: one name each, the two files.
    printed = [re.findall(pattern, proc.stdout) for proc in (first, second)]
    assert sorted(p[0] for p in printed if len(p) == 1) == names, printed
    for name in names:
        with h5py.File(tmp_path / name, "r") as f:
            assert bool(f["summary"].attrs["verified"])
    again = hpcmm(mpiexec, tmp_path, [*SMALL, "--out", names[0]])
    assert again.returncode == 2 and "file exists" in again.stdout
    assert os.path.getsize(tmp_path / names[0]) > 0
