"""Jobs whose every rank writes its own stdout and stderr files, for tests that read what ranks said.

Several processes writing into one stream can interleave, glue two lines into
one, or lose the last words of a rank that the launcher kills; a test that
counts lines there can be fooled either way.  Here each rank's file
descriptors 1 and 2 are its own files (``DIR/rank-R.out``, ``DIR/rank-R.err``),
opened by a shell that then ``exec``-s the rank's program (same process, same
pid): what a rank wrote before it died is on disk, in order, whole.  The
launcher's own messages stay in its own stderr.

Launch lines are built for MPICH's hydra (``-env NAME VALUE`` per MPMD part)
and work with Open MPI's ``mpiexec`` for the SPMD case; the rank comes from
``PMI_RANK`` or ``OMPI_COMM_WORLD_RANK``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from launcher import REPO, find_mpiexec, rank_environment

# Each rank: its own output files, then the program itself (exec keeps the pid the launcher knows).
_SHELL = ('r="${PMI_RANK:-${OMPI_COMM_WORLD_RANK:-x}}"; '
          'exec "$@" >"$RANKLOG_DIR/rank-$r.out" 2>"$RANKLOG_DIR/rank-$r.err"')
RUNNER = str(REPO / "tests" / "fault_runner.py")


def mpiexec() -> str:
    found = find_mpiexec()
    if found is None:
        pytest.skip("no mpiexec ($MPIEXEC, beside the Python interpreter, or on PATH)")
    return found


def is_hydra(launcher: str) -> bool:
    version = subprocess.run([launcher, "--version"], check=False, capture_output=True, text=True, timeout=30)
    return "HYDRA" in version.stdout


def environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    return rank_environment(**(extra or {}))


@dataclasses.dataclass
class Part:
    """One part of an MPMD launch: ``ranks`` processes of ``argv``, with ``env`` added."""

    argv: list[str]
    ranks: int = 1
    env: dict[str, str] = dataclasses.field(default_factory=dict)


def hpcmm_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "hpcmm", *args]


def runner_argv(faults: list[str], *args: str) -> list[str]:
    """``tests/fault_runner.py`` with ``--fault F`` for each F, then hpcmm's arguments."""
    return [sys.executable, RUNNER, *[x for f in faults for x in ("--fault", f)], "--", *args]


@dataclasses.dataclass
class Outcome:
    rc: int
    seconds: float
    logs: Path
    launcher_err: str

    def ranks(self) -> list[int]:
        return sorted(int(p.name.split("-")[1].split(".")[0]) for p in self.logs.glob("rank-*.err"))

    def err(self, rank: int) -> list[str]:
        path = self.logs / f"rank-{rank}.err"
        return path.read_text(errors="replace").splitlines() if path.exists() else []

    def out(self, rank: int) -> str:
        path = self.logs / f"rank-{rank}.out"
        return path.read_text(errors="replace") if path.exists() else ""

    def hpcmm_lines(self, prefix: str = "hpcmm: ") -> dict[int, list[str]]:
        """``{rank: [lines starting with prefix]}`` over every rank's stderr."""
        return {r: [line for line in self.err(r) if line.startswith(prefix)] for r in self.ranks()}

    def the_line(self, prefix: str = "hpcmm: ") -> tuple[int, str]:
        """The one ``hpcmm:`` line of the job, and the rank that wrote it (asserts there is one).

        Run with ``--quiet``: rank 0's progress lines start with ``hpcmm:`` too.
        """
        found = [(r, line) for r, lines in self.hpcmm_lines(prefix).items() for line in lines]
        assert len(found) == 1, f"expected exactly one line, found {found}\n{self.describe()}"
        return found[0]

    def describe(self) -> str:
        parts = [f"exit status {self.rc} after {self.seconds:.1f} s"]
        for r in self.ranks():
            parts.append(f"--- rank {r} stderr:\n" + "\n".join(self.err(r)[-40:]))
        parts.append("--- launcher:\n" + self.launcher_err[-3000:])
        return "\n".join(parts)


class Job:
    """A running launch with per-rank logs; :meth:`wait` gives its :class:`Outcome`."""

    def __init__(self, parts: list[Part], logs: Path, cwd: Path, env: dict[str, str] | None = None) -> None:
        launcher = mpiexec()
        if len(parts) > 1 or any(p.env for p in parts):
            if not is_hydra(launcher):
                pytest.skip("needs MPICH's hydra for MPMD launches with per-part -env")
        logs.mkdir(parents=True, exist_ok=True)
        self.logs = logs
        cmd = [launcher]
        for i, part in enumerate(parts):
            if i:
                cmd.append(":")
            cmd += ["-n", str(part.ranks)]
            for name, value in part.env.items():
                cmd += ["-env", name, value]
            cmd += ["sh", "-c", _SHELL, "sh", *part.argv]
        self.err_path = logs / "launcher.err"
        with open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen(cmd, cwd=cwd, env=environment({**(env or {}), "RANKLOG_DIR": str(logs)}),
                                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                                         start_new_session=True)
        self.started = time.monotonic()

    def wait(self, limit: float) -> Outcome:
        """Wait at most ``limit`` seconds (from now); on time-out kill the job's processes and fail."""
        t0 = time.monotonic()
        try:
            rc = self.proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            self.kill()
            outcome = Outcome(-1, time.monotonic() - self.started, self.logs, self.err_path.read_text())
            pytest.fail(f"the job did not end within {limit} s\n{outcome.describe()}")
        return Outcome(rc, time.monotonic() - t0, self.logs, self.err_path.read_text(errors="replace"))

    def rank_pid(self, rank: int, limit: float | None = None) -> int:
        """The pid of ``rank`` (a descendant of the launcher whose environment names it).

        ``limit``: the hang guard (default: test_reliability_budget.hang_within()).
        """
        if limit is None:
            from test_reliability_budget import hang_within  # noqa: PLC0415 - it imports this module

            limit = hang_within()
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            for pid in descendants(self.proc.pid):
                if rank_of(pid) == rank:
                    return pid
            assert self.proc.poll() is None, "the job ended early"
            time.sleep(0.02)
        raise AssertionError(f"rank {rank} did not start within {limit} s")

    def kill(self) -> None:
        """End what is left of this job: only the processes it started."""
        kill_tree(self.proc)


def run(parts: list[Part], logs: Path, cwd: Path, limit: float, env: dict[str, str] | None = None) -> Outcome:
    """Launch ``parts`` and wait for the end (at most ``limit`` seconds)."""
    return Job(parts, logs, cwd, env).wait(limit)


def descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{parent}/task/{tid}/children", encoding="ascii") as f:
                    kids = [int(p) for p in f.read().split()]
            except OSError:
                continue
            found += kids
            todo += kids
    return found


def tree_state(pid: int) -> str:
    """One line per process of ``pid``'s tree: pid, parent, state and wait channel of each thread, command.

    What a job that did not end was doing, for the failure message of a test that waited for it."""
    lines = []
    for each in [pid, *descendants(pid)]:
        try:
            with open(f"/proc/{each}/stat", encoding="ascii", errors="replace") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{each}/cmdline", "rb") as f:
                command = " ".join(f.read().replace(b"\0", b" ").decode(errors="replace").split())
            threads = []
            for tid in sorted(os.listdir(f"/proc/{each}/task"), key=int):
                with open(f"/proc/{each}/task/{tid}/stat", encoding="ascii", errors="replace") as f:
                    state = f.read().rsplit(")", 1)[1].split()[0]
                with open(f"/proc/{each}/task/{tid}/wchan", encoding="ascii", errors="replace") as f:
                    threads.append(f"{state}:{f.read().strip() or '-'}")
        except OSError:
            continue  # ended meanwhile
        lines.append(f"{each} ppid {fields[1]} {fields[0]} [{' '.join(threads)}] {command[:160]}")
    return "\n".join(lines) or f"{pid}: gone"


def kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL ``proc`` and every process below it, if it still runs, then reap it."""
    if proc.poll() is None:
        for pid in [*descendants(proc.pid), proc.pid]:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        proc.wait()


def rank_of(pid: int, program: tuple[bytes, ...] = ()) -> int | None:
    """The rank a launcher gave ``pid`` (from its environment), if it is a Python rank.

    ``program``: where given, ``pid``'s command line must also hold one of these
    words (e.g. ``b"hpcmm"``, the fault runner's path).
    """
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            environ = f.read().split(b"\0")
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read().split(b"\0")
    except OSError:
        return None
    if not cmdline or b"python" not in os.path.basename(cmdline[0]):
        return None
    if program and not any(word in cmdline for word in program):
        return None
    for entry in environ:
        for key in (b"PMI_RANK=", b"OMPI_COMM_WORLD_RANK="):
            if entry.startswith(key):
                return int(entry[len(key):])
    return None


def digest(paths) -> dict[str, str]:
    """SHA-256 of each file (to show that inputs are left byte for byte)."""
    return {str(p): hashlib.sha256(Path(p).read_bytes()).hexdigest() for p in paths}


def partials(directory: Path) -> list[str]:
    return sorted(p.name for p in Path(directory).glob(".*.partial"))
