"""Signals and killed ranks, for real: ``mpiexec`` jobs of ``python -m hpcmm`` on the CPU.

* a rank killed from outside (``SIGKILL``) ends the whole job within the end
  limit of tests/test_reliability_budget.py;
* ``SIGTERM``/``SIGINT``, to the launcher (which forwards it) or to one rank,
  end the job within that limit, also when the rank that gets it is waiting inside
  MPI;
* whatever ends the job, no file appears under the final name unless it is
  complete, and no ``.partial`` file is left: not while the ranks multiply,
  and not while rank 0 writes its temporary file (held there by
  ``tests/fault_runner.py --fault 0:write:hang-after``), even when rank 0 itself is killed;
* an interrupted ``--overwrite`` run leaves the previous file byte for byte.

The ranks are found as the launcher's descendants whose environment names
their rank (``PMI_RANK`` under MPICH's hydra, ``OMPI_COMM_WORLD_RANK`` under
Open MPI).  Only processes these tests started are signalled.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from launcher import gpu_count, mpiexec_or_skip, rank_environment
from ranklog import RUNNER, descendants, kill_tree, rank_of, runner_argv, tree_state
from test_reliability_budget import end_within, hang_within, within

# How long a job may take to end once a rank is gone or a signal is sent, and to reach the point
# where the test strikes: derived from a launch timed here (test_reliability_budget), not fixed.


def start_within() -> float:
    return hang_within()


pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def _env(**extra: str) -> dict[str, str]:
    return rank_environment(**extra)  # the ranks run in a temporary directory: hpcmm must import from there


class Job:
    """One ``mpiexec -n N python -m hpcmm ...`` with its output in files."""

    def __init__(self, tmp: Path, ranks: int, args: list[str], device: str = "cpu", fault: str | None = None
                 ) -> None:
        self.tmp, self.ranks = tmp, ranks
        self.out = tmp / "out.h5"
        self.log = tmp / "stderr.txt"
        self.held = tmp / "held"  # made by a rank that a fault holds after its step (HOLD_MARK)
        # A fault (tests/fault_runner.py) holds a rank where the test strikes.
        program = runner_argv([fault]) if fault else [sys.executable, "-m", "hpcmm"]
        cmd = [mpiexec_or_skip(), "-n", str(ranks), *program, "--device", device, "--out", str(self.out), *args]
        with open(self.log, "wb") as err, open(tmp / "stdout.txt", "wb") as out:
            self.proc = subprocess.Popen(cmd, env=_env(HOLD_MARK=str(self.held)), stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=err, cwd=tmp)
        self.started = time.monotonic()

    def stderr(self) -> str:
        return self.log.read_text(errors="replace")

    def partials(self) -> list[str]:
        return sorted(p.name for p in self.tmp.glob(".*.partial"))

    def rank_pids(self) -> dict[int, int]:
        """``{rank: pid}``, once every rank has started."""
        deadline = time.monotonic() + start_within()
        while time.monotonic() < deadline:
            pids = {}
            for pid in descendants(self.proc.pid):
                rank = rank_of(pid, (b"hpcmm", RUNNER.encode()))
                if rank is not None:
                    pids[rank] = pid
            if len(pids) == self.ranks:
                return pids
            assert self.proc.poll() is None, f"the job ended early:\n{self.stderr()}"
            time.sleep(0.05)
        raise AssertionError(f"not all {self.ranks} ranks started:\n{self.stderr()}")

    def wait_for(self, what: str, check) -> None:
        deadline = time.monotonic() + start_within()
        while not check():
            assert self.proc.poll() is None, f"the job ended before {what}:\n{self.stderr()}"
            assert time.monotonic() < deadline, f"no {what} after {start_within()} s:\n{self.stderr()}"
            time.sleep(0.05)

    def wait_for_loop(self) -> None:
        self.wait_for("timed iteration", lambda: "iteration 1/" in self.stderr())

    def wait_for_partial(self) -> None:
        """Until rank 0, held by ``0:write:hang-after``, has written its whole temporary file.

        Not the first hidden file seen: the start-up's probe of the output directory makes one
        for an instant, and the test is about the results file."""
        self.wait_for("complete temporary file", self.held.exists)
        assert self.partials(), f"rank 0 wrote no temporary file:\n{self.stderr()}"

    def ends(self) -> tuple[int, float]:
        """Wait for the job to end; its exit status and the seconds it took from now."""
        t0 = time.monotonic()
        try:
            rc = self.proc.wait(timeout=hang_within())
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the job did not end within {hang_within()} s:\n{self.stderr()}\n"
                                 f"its processes (state:wait channel per thread):\n{tree_state(self.proc.pid)}") from None
        return rc, time.monotonic() - t0

    def pid_of(self, target: str) -> int:
        """The pid behind ``"mpiexec"``, ``"rank 0"``, ``"rank 1"``, ..."""
        return self.proc.pid if target == "mpiexec" else self.rank_pids()[int(target.split()[-1])]

    def assert_ended_cleanly(self) -> None:
        """The job ends, fails, and leaves neither an output file nor a partial one."""
        rc, _ = self.ends()
        assert rc != 0
        assert not self.out.exists()
        assert self.no_partials() == []

    def no_partials(self) -> list[str]:
        """Partial files once the guard of a killed writer has had time to act (should be []).

        The guard acts when its pipe closes; how soon a loaded machine runs it is the launcher's
        business, so the wait ends as soon as the files are gone, at the latest after the time a
        job that fails may take to end."""
        deadline = time.monotonic() + end_within()
        while self.partials() and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.partials()

    def kill(self) -> None:
        """End what is left of this job: only the processes it started."""
        kill_tree(self.proc)


@pytest.fixture
def job(tmp_path):
    jobs = []

    def start(ranks: int, args: list[str], device: str = "cpu", fault: str | None = None) -> Job:
        j = Job(tmp_path, ranks, args, device, fault)
        jobs.append(j)
        return j

    yield start
    for j in jobs:
        j.kill()


LONG = ["--m", "3000", "--n", "3000", "--k", "3000", "--iters", "1000", "--warmup", "0", "--verify", "none"]
LOOP = ["--m", "1200", "--n", "1200", "--k", "1200", "--iters", "1000", "--warmup", "0", "--verify", "none"]
SHORT = ["--m", "60", "--n", "50", "--k", "40", "--iters", "1", "--warmup", "0", "--save-c"]


def test_sigkill_of_one_rank_ends_the_job(job):
    j = job(3, LONG)
    j.wait_for_loop()
    os.kill(j.rank_pids()[1], signal.SIGKILL)
    rc, took = j.ends()
    assert rc != 0
    assert within(took, end_within), f"took {took:.1f} s, more than {end_within():.1f}:\n{j.stderr()}"
    assert not j.out.exists()
    assert j.no_partials() == []


@pytest.mark.parametrize(
    ("target", "sig"),
    [("mpiexec", signal.SIGTERM), ("rank 0", signal.SIGTERM), ("rank 1", signal.SIGTERM),
     ("mpiexec", signal.SIGINT)],
    ids=["SIGTERM-mpiexec", "SIGTERM-rank0", "SIGTERM-rank1", "SIGINT-mpiexec"],
)
def test_signal_during_the_loop_ends_the_job_cleanly(job, target, sig):
    j = job(2, LOOP)
    j.wait_for_loop()
    os.kill(j.pid_of(target), sig)
    j.assert_ended_cleanly()


@pytest.mark.parametrize("target", ["mpiexec", "rank 0", "rank 1"])
def test_sigterm_while_rank_0_writes_removes_the_temporary_file(job, target):
    """Rank 0 holds its complete temporary file (a fault); the other rank waits inside MPI.

    With ``rank 1`` the launcher then kills rank 0 with SIGKILL: no handler runs
    there, and the file's guard process removes it.
    """
    j = job(2, SHORT, fault="0:write:hang-after")
    j.wait_for_partial()
    os.kill(j.pid_of(target), signal.SIGTERM)
    j.assert_ended_cleanly()


def test_sigkill_of_the_writer_leaves_no_temporary_file(job):
    j = job(2, SHORT, fault="0:write:hang-after")
    j.wait_for_partial()
    os.kill(j.rank_pids()[0], signal.SIGKILL)
    rc, _ = j.ends()
    assert rc != 0
    assert not j.out.exists()
    assert j.no_partials() == []


# One process, no launcher: the files hpcmm creates for an instant before the work, and the plot.
_HELD_IN = r"""
import os, sys, time
import numpy as np
from hpcmm.io import h5io
from hpcmm.cli import report
mark, where, path = sys.argv[1:4]


def hold(*args, **kwargs):
    open(mark, "w").close()
    while True:
        time.sleep(1.0)


if where == "plot":
    import matplotlib.figure

    def savefig(self, fname, **kwargs):  # half a picture under the hidden name, then held
        with open(fname, "wb") as f:
            f.write(b"\x89PNG half")
        hold()

    matplotlib.figure.Figure.savefig = savefig
    report.plot_timeline(np.array([[0, 0, 0, 0, 0, 0.0, 1e-3]]), path)
else:
    h5io.remove_temporary = hold  # the probe's file exists; held before it is removed
    h5io.check_output_path(path, False) if where == "--out" else report._check_plot_path(path, "r.h5")
"""


@pytest.mark.parametrize(("where", "name"), [("--out", "r.h5"), ("--plot", "t.png"), ("plot", "t.png")],
                         ids=["probe of --out", "probe of --plot", "writing the plot"])
def test_sigkill_while_a_hidden_file_exists_leaves_none(tmp_path, where, name):
    """Killed while its hidden file exists (the directory's probe, or the picture being drawn):
    the guard removes it, and nothing appears under the final name."""
    mark = tmp_path / "held"
    proc = subprocess.Popen([sys.executable, "-c", _HELD_IN, str(mark), where, str(tmp_path / name)],
                            env=_env(), stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=tmp_path)
    try:
        deadline = time.monotonic() + start_within()
        while not mark.exists():
            assert proc.poll() is None, proc.stderr.read().decode(errors="replace")
            assert time.monotonic() < deadline, f"not held after {start_within()} s"
            time.sleep(0.02)
        assert sorted(p.name for p in tmp_path.glob(f".{name}.*.partial")), "held before its hidden file was made"
        proc.kill()
        proc.wait()
    finally:
        proc.kill()
        proc.wait()
        proc.stderr.close()
    deadline = time.monotonic() + end_within()
    while list(tmp_path.glob(".*.partial")) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sorted(p.name for p in tmp_path.glob(".*.partial")) == []
    assert not (tmp_path / name).exists()


def test_sigterm_reaches_a_rank_waiting_inside_mpi(job):
    """Rank 1 hangs before the check (a fault); rank 0 waits for it inside the check's reductions.

    A Python signal handler runs only between bytecodes, which rank 0, inside
    MPI, never reaches; hpcmm's watcher thread acts on the signal all the same.
    """
    j = job(2, ["--m", "60", "--n", "50", "--k", "40", "--iters", "2", "--warmup", "0"],
            fault="1:verify:hang")
    j.wait_for("last product", lambda: "iteration 2/2" in j.stderr())  # rank 0 went on to the check
    time.sleep(0.5)
    os.kill(j.rank_pids()[0], signal.SIGTERM)
    rc, _ = j.ends()
    assert rc != 0
    assert "stopped by SIGTERM" in j.stderr()
    assert not j.out.exists()


@pytest.mark.parametrize("when", ["loop", "write"])
def test_interrupted_overwrite_keeps_the_previous_file(job, tmp_path, when):
    import h5py
    import numpy as np

    # --overwrite replaces only an HDF5 file: the previous results of an earlier run.
    with h5py.File(tmp_path / "out.h5", "w") as f:
        f["x"] = np.random.default_rng(7).random(512)
    previous = (tmp_path / "out.h5").read_bytes()
    if when == "loop":
        j = job(2, [*LOOP, "--overwrite"])
        j.wait_for_loop()
    else:
        j = job(2, [*SHORT, "--overwrite"], fault="0:write:hang-after")
        j.wait_for_partial()
    os.kill(j.proc.pid, signal.SIGTERM)
    rc, _ = j.ends()
    assert rc != 0
    assert (tmp_path / "out.h5").read_bytes() == previous
    assert j.no_partials() == []


# -- the same on GPUs (skipped without one) ------------------------------------------
GPU_LOOP = ["--m", "8192", "--n", "8192", "--k", "8192", "--iters", "1000", "--warmup", "0", "--verify", "none"]


@pytest.mark.gpu
@pytest.mark.parametrize("target", ["mpiexec", "rank 0", "rank 1"])
def test_sigterm_during_the_gpu_loop_ends_the_job_cleanly(job, target):
    """Two ranks on the GPUs (one GPU shared, or one each): CUDA IPC and the GEMMs in flight."""
    if gpu_count() < 1:
        pytest.skip("needs a CUDA GPU and cupy")
    j = job(2, GPU_LOOP, "gpu")
    j.wait_for_loop()
    os.kill(j.pid_of(target), signal.SIGTERM)
    j.assert_ended_cleanly()


@pytest.mark.gpu
@pytest.mark.parametrize("how", ["SIGTERM to rank 1", "SIGKILL to rank 0"])
def test_gpu_run_killed_while_rank_0_writes_leaves_no_temporary_file(job, how):
    if gpu_count() < 1:
        pytest.skip("needs a CUDA GPU and cupy")
    j = job(2, [*SHORT, "--ranks-per-node", "1"], "gpu", fault="0:write:hang-after")
    j.wait_for_partial()
    if how == "SIGTERM to rank 1":
        os.kill(j.rank_pids()[1], signal.SIGTERM)
    else:
        os.kill(j.rank_pids()[0], signal.SIGKILL)
    rc, _ = j.ends()
    assert rc != 0
    assert not j.out.exists()
    assert j.no_partials() == []
