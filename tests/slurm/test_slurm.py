"""Every batch script in ``jobs/`` on a real SLURM, and every way a job can end.

The module starts a one-node cluster on this machine: Debian's ``slurm-wlm``
(installed with apt-get when missing) and ``munge``, configured in a temporary
folder for the machine's own hostname, with eight GPUs declared as GRES and
backed by stand-in device files so that the GPU scripts schedule.  Without a
GPU hpcmm then takes its CPU path (``--device auto``).  The site's default MPI
plugin is ``pmi2`` (``MpiDefault``), which the tests' MPICH speaks; the scripts
must use it without being told.

:data:`PLAN` submits each script at a small size on 2-4 tasks, through srun and
through mpiexec, and then every case a user meets in the first hour: GPUs asked
for as ``--gres`` rather than the script's ``--gpus-per-node``, ``sbatch
--export=NONE`` (settings as arguments; the Python found by the script), a
Python without hpcmm, a missing Python, an srun plugin that does not match the
MPI library, bad input, a failed check, a rank that fails alone, an old
``HPCMM_*`` name of the scripts, a bad job setting.  The GPU scripts start an
MPS control daemon per node where a node gets more ranks than GPUs: a stand-in
``nvidia-cuda-mps-control`` on the jobs' PATH records every call in a file of
the job's own, so that each job's starts and stops are counted (success,
failure, ``JOB_MPS=off``, ranks <= GPUs, no such program).  Each job must end in the
state and exit code :data:`PLAN` gives, with the right reason on its last line
(``hpcmm job ID result: ...``); the files of the jobs that succeed are read
back.

Needs root (slurmd starts jobs as any user) and either the SLURM binaries or
apt-get; otherwise the tests are skipped with the reason, or fail where
``REQUIRE_SLURM=1`` says the machine must run them.  The daemons are stopped
and the jobs cancelled at the end, also when a test fails.  The jobs' output
(``slurm-<id>.out``) and the daemons' logs stay in pytest's temporary folder.

Run alone with::

    python -m pytest tests/slurm -rA
"""

from __future__ import annotations

import dataclasses
import os
import re
import secrets
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]
JOBS_DIR = REPO / "jobs"

#: Debian packages that provide slurmctld, slurmd, the client commands and munged.
PACKAGES = ("slurm-wlm", "munge")
#: Programs the cluster needs, looked up on PATH and in the sbin folders.
PROGRAMS = ("munged", "munge", "unmunge", "slurmctld", "slurmd", "sbatch", "scontrol",
            "scancel", "sinfo", "squeue", "srun")
#: The node claims more CPUs than the machine has, so that 4-task jobs fit on 2 cores.
NODE_CPUS = 8
FAKE_GPUS = 8
#: Minutes each job may run (sbatch --time): a hang guard, minutes where a job takes seconds.
#: The jobs share the machine's 2 cores with each other (and with whatever else runs there),
#: so no job is held to a speed; a hung one ends as TIMEOUT with its output.
JOB_MINUTES = 10
#: Seconds the waits below go on without any job changing state (pending, running, ended) before
#: they give up: past a job's own limit, so that a hung job ends as TIMEOUT rather than as a wait
#: that gave up.  The jobs queue for the node's CPUs, so the whole wait is not bounded: however
#: slow a loaded machine is, jobs that start and end are progress.
STALL_SECONDS = JOB_MINUTES * 60 + 120
#: Job states after which a job will not change any more.
FINAL_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
                "BOOT_FAIL", "DEADLINE", "PREEMPTED", "SPECIAL_EXIT"}
#: Pending reasons that will never clear by themselves.
HOPELESS_REASONS = ("PartitionConfig", "BadConstraints", "ReqNodeNotAvail", "InvalidAccount",
                    "PartitionNodeLimit", "NodeDown", "JobLaunchFailure")

# Small products; sizes not multiples of the grid on purpose.  One iteration
# keeps each job to a few seconds on a loaded 2-core machine.
SMALL = {"JOB_M": "97", "JOB_N": "83", "JOB_K": "71", "JOB_ARGS": "--iters 1 --warmup 0"}
#: The same as arguments after the script's name (they survive --export=NONE).
SMALL_ARGS = tuple(f"{k}={v}" for k, v in SMALL.items())
#: The stand-in for NVIDIA's MPS control program.  ``-d`` makes the control
#: socket in ``$CUDA_MPS_PIPE_DIRECTORY`` (a bound UNIX socket, as the daemon's);
#: a command on stdin (``quit``) removes it, or fails as the real one does when
#: no daemon is there.  Each call is a line in ``<records>/mps-<job id>.calls``.
FAKE_MPS_CONTROL = """#!/bin/bash
record={records}/mps-${{SLURM_JOB_ID:-none}}.calls
pipe=${{CUDA_MPS_PIPE_DIRECTORY:-/tmp/nvidia-mps}}
if [[ ${{1:-}} == -d ]]; then
    mkdir -p "$pipe" &&
        {python} -c 'import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' "$pipe/control" ||
        exit 1
    echo "start pipe=$pipe log=${{CUDA_MPS_LOG_DIRECTORY:-}} node=$(hostname -s)" >>"$record"
    exit 0
fi
read -r command
if [[ ! -S $pipe/control ]]; then
    echo "$command pipe=$pipe no-daemon" >>"$record"
    echo "Cannot find MPS control daemon process" >&2
    exit 1
fi
rm -f "$pipe/control"
echo "$command pipe=$pipe" >>"$record"
"""

#: A Python that exists but has no hpcmm: the one this test's venv was made from.
BARE_PYTHON = getattr(sys, "_base_executable", None) or "/usr/bin/python3"
#: Why a job of 2 ranks on 2 GPUs starts no MPS daemon.
NOT_SHARED = r"MPS: not started: no GPU is shared \(2 rank\(s\) per node on 2 GPU\(s\); JOB_MPS=on starts it anyway\)"


@dataclasses.dataclass
class JobSpec:
    """One ``sbatch`` submission and how it must end.

    Parameters
    ----------
    label
        Test id, e.g. ``single-node-srun``.
    script
        File name in ``jobs/``.
    sbatch_args
        Options before the script (they override its ``#SBATCH`` lines).
    env
        Variables for the job (sbatch exports the environment to it by default).
    args
        ``NAME=VALUE`` arguments after the script.
    exit_code
        The job's exit status: 0 (then COMPLETED) or the script's status for
        the failure (then FAILED).
    result
        Regular expression the reason on the job's last line must match.
    h5_files
        How many HDF5 files a successful job writes.
    python
        Whether the submitting environment names the Python (``JOB_PYTHON``);
        without it the script must find one itself.
    folder
        Where to submit from: ``work`` has a ``.venv`` (a link to this
        Python's environment), ``bare`` has none.
    fault
        ``RANK:WHERE:HOW`` of tests/fault_runner.py: the job's Python then runs
        ``-m hpcmm`` through that runner, with this fault put in from outside.
    mps
        How many MPS control daemons the job starts (and must stop).
    mps_line
        Regular expression of the job's ``MPS: not started: ...`` lines;
        ``None``: no such line (the job ends before); empty: the usual one,
        :data:`NOT_SHARED` for a job that starts no daemon, none for one
        that does or for ``cpu-smoke.sbatch`` (no GPU, no MPS).
    fake_mps
        Whether the stand-in ``nvidia-cuda-mps-control`` is on the job's PATH.
    cancel_when
        Regular expression: once the job's log has a line that matches it,
        the test cancels the job (``scancel --full``: SIGTERM to the batch
        script and the step, as a time limit sends).
    """

    label: str
    script: str
    sbatch_args: tuple[str, ...]
    env: dict[str, str]
    args: tuple[str, ...] = ()
    exit_code: int = 0
    result: str = "ok"
    h5_files: int = 1
    python: bool = True
    folder: str = "work"
    fault: str | None = None
    mps: int = 0
    mps_line: str | None = ""
    fake_mps: bool = True
    cancel_when: str | None = None

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    @property
    def state(self) -> str:
        """The job's final state."""
        if self.cancel_when:
            return "CANCELLED"
        return "COMPLETED" if self.ok else "FAILED"

    @property
    def mps_note(self) -> str | None:
        """The ``MPS: not started`` line the job's log must have, if any."""
        if self.script == "cpu-smoke.sbatch":
            return None
        if self.mps_line == "":
            return None if self.mps else NOT_SHARED
        return self.mps_line

    def command(self) -> list[str]:
        """The submit line, relative to the repository root as in jobs/README.md."""
        return ["sbatch", *self.sbatch_args, f"jobs/{self.script}", *self.args]

    def command_line(self) -> str:
        """The submit line with its variables, as a user would type it."""
        env = [f"{k}={shlex.quote(v)}" for k, v in self.env.items()]
        return " ".join([*env, *map(shlex.quote, self.command())])


#: Every submission; together they cover every script in jobs/, both launchers, and
#: every way a job ends (exit statuses: jobs/README.md).
PLAN = (
    # srun with the site's default plugin (pmi2 here), not one the script picks.
    JobSpec("single-node-srun", "single-node.sbatch",
            ("--ntasks-per-node=2", "--gpus-per-node=2"), dict(SMALL)),
    # GPUs asked for as --gres: the step takes the job's 2, not the script's 8.
    # JOB_MPS=on: a daemon although no GPU is shared.
    JobSpec("single-node-gres", "single-node.sbatch",
            ("--gres=gpu:2", "--ntasks-per-node=2"), dict(SMALL, JOB_MPS="on"), mps=1),
    # 4 ranks on 2 GPUs, but no nvidia-cuda-mps-control on the node.
    JobSpec("multi-node-mpiexec", "multi-node.sbatch",
            ("-N", "1", "--ntasks-per-node=4", "--gpus-per-node=2"),
            dict(SMALL, JOB_LAUNCHER="mpiexec", JOB_SITE_MPI="none"), fake_mps=False,
            mps_line=r"MPS: not started: no nvidia-cuda-mps-control on PATH \(4 rank\(s\) per node on 2 GPU\(s\);.*"),
    # One GPU: the 1-rank points run alone on it, each 2-rank point under a daemon of its own.
    JobSpec("scaling-srun", "scaling.sbatch",
            ("-N", "1", "--ntasks-per-node=2", "--gpus-per-node=1"),
            {"JOB_SIZES": "61", "JOB_ARGS": "--iters 1 --warmup 0"}, h5_files=4, mps=2,
            mps_line=r"MPS: not started: no GPU is shared \(1 rank\(s\) per node on 1 GPU\(s\);.*"),
    # More ranks than GPUs: a daemon per node before the step, stopped after it.
    JobSpec("single-node-mps", "single-node.sbatch",
            ("--ntasks-per-node=3", "--gpus-per-node=2"), dict(SMALL), mps=1),
    # The same through mpiexec, and hpcmm refuses its input: the daemon is stopped all the same.
    JobSpec("single-node-mps-bad-input-mpiexec", "single-node.sbatch",
            ("--ntasks-per-node=3", "--gpus-per-node=2"),
            dict(SMALL, JOB_LAUNCHER="mpiexec", JOB_ARGS="--m 0"), mps=1, exit_code=2,
            result=r"bad input: argument --m: --m=0: expected an integer >= 1"),
    JobSpec("single-node-mps-off", "single-node.sbatch",
            ("--ntasks-per-node=3", "--gpus-per-node=2"), dict(SMALL, JOB_MPS="off"),
            mps_line=r"MPS: not started: JOB_MPS=off \(3 rank\(s\) per node on 2 GPU\(s\)\)"),
    # A rank that hangs in its first product (after hpcmm said its grid), and the job is
    # cancelled (SIGTERM, as at a time limit): the daemon is stopped and the last line
    # says why the job ended.
    JobSpec("single-node-mps-cancelled", "single-node.sbatch",
            ("--ntasks-per-node=3", "--gpus-per-node=2"), SMALL, fault="0:multiply:hang",
            mps=1, exit_code=5, cancel_when=r"^hpcmm: grid \d+x\d+ \| ",
            result=r"unfinished: the job got SIGTERM \(its time limit, or scancel\)"),
    JobSpec("single-node-bad-mps-setting", "single-node.sbatch",
            ("--ntasks-per-node=3", "--gpus-per-node=2"), dict(SMALL, JOB_MPS="yes"), exit_code=3,
            result=r"environment: JOB_MPS=yes: expected auto, on or off", mps_line=None),
    JobSpec("cpu-smoke-mpiexec", "cpu-smoke.sbatch", ("--ntasks=2",),
            dict(SMALL, JOB_LAUNCHER="mpiexec")),
    # --export=NONE: no variable of the submitting shell reaches the job.
    JobSpec("cpu-smoke-export-none", "cpu-smoke.sbatch", ("--export=NONE", "--ntasks=2"), {},
            args=(*SMALL_ARGS, "JOB_PYTHON=" + sys.executable), python=False),
    JobSpec("cpu-smoke-export-none-finds-venv", "cpu-smoke.sbatch", ("--export=NONE", "--ntasks=2"), {},
            args=SMALL_ARGS, python=False),
    JobSpec("cpu-smoke-export-none-no-python", "cpu-smoke.sbatch", ("--export=NONE", "--ntasks=2"), {},
            args=SMALL_ARGS, python=False, folder="bare", exit_code=3,
            result=r"environment: no Python with hpcmm \(tried .*/bare/\.venv/bin/python python3 python\);"
                   r" name one: JOB_PYTHON=.*"),
    JobSpec("cpu-smoke-python-without-hpcmm", "cpu-smoke.sbatch", ("--ntasks=2",),
            dict(SMALL, JOB_PYTHON=BARE_PYTHON), exit_code=3,
            result=rf"environment: JOB_PYTHON={re.escape(BARE_PYTHON)} cannot import hpcmm\b.*"),
    JobSpec("cpu-smoke-missing-python", "cpu-smoke.sbatch", ("--ntasks=2",),
            dict(SMALL, JOB_PYTHON="/nonexistent/bin/python"), exit_code=3,
            result=r"environment: JOB_PYTHON=/nonexistent/bin/python: no such program"),
    JobSpec("cpu-smoke-bad-launcher", "cpu-smoke.sbatch", ("--ntasks=2",),
            dict(SMALL, JOB_LAUNCHER="qsub"), exit_code=3,
            result=r"environment: JOB_LAUNCHER=qsub: expected srun or mpiexec"),
    # An srun plugin the MPI library does not speak: each task is a 1-rank job.
    JobSpec("cpu-smoke-wrong-plugin", "cpu-smoke.sbatch", ("--ntasks=2",),
            dict(SMALL, JOB_SRUN_MPI="none"), exit_code=4,
            result=r"launcher: the 2 tasks did not form one MPI job \(hpcmm saw 1 rank\(s\)\): "
                   r"srun --mpi=none does not match the MPI library; .*JOB_SRUN_MPI"),
    JobSpec("cpu-smoke-bad-input-srun", "cpu-smoke.sbatch", ("--ntasks=2",),
            dict(SMALL, JOB_ARGS="--m 0"), exit_code=2,
            result=r"bad input: argument --m: --m=0: expected an integer >= 1"),
    JobSpec("single-node-bad-input-mpiexec", "single-node.sbatch",
            ("--ntasks-per-node=2", "--gpus-per-node=2"),
            dict(SMALL, JOB_LAUNCHER="mpiexec", JOB_ARGS="--m 0"), exit_code=2,
            result=r"bad input: argument --m: --m=0: expected an integer >= 1"),
    # The scripts' settings used to be HPCMM_*; hpcmm refuses names it does not know.
    JobSpec("cpu-smoke-old-variable", "cpu-smoke.sbatch", ("--ntasks=2",),
            dict(SMALL, HPCMM_M="97"), exit_code=2,
            result=r"bad input: HPCMM_M='97': unknown setting \(known: .*\)"),
    JobSpec("cpu-smoke-verification-failed", "cpu-smoke.sbatch", ("--ntasks=2",),
            SMALL, exit_code=1, fault="1:verify:corrupt",
            result=r"verification failed: full residual .* > tolerance .*"),
    # A rank that fails alone aborts the job: hpcmm does not end by itself.
    JobSpec("cpu-smoke-rank-fails", "cpu-smoke.sbatch", ("--ntasks=2",),
            SMALL, exit_code=5, fault="1:multiply:raise",
            result=r"unfinished: hpcmm started on 2 ranks but did not end by itself .*"),
)


# --- small helpers -------------------------------------------------------------


def run(cmd: list[str], *, timeout: float = 60, check: bool = True, **kwargs
        ) -> subprocess.CompletedProcess:
    """Run ``cmd`` with a time limit, capturing text output.

    Raises
    ------
    RuntimeError
        When ``check`` and the command fails, with its output in the message.
    """
    if "input" not in kwargs:
        kwargs["stdin"] = subprocess.DEVNULL
    try:
        proc = subprocess.run(cmd, check=False, capture_output=True, text=True,
                              timeout=timeout, **kwargs)
    except subprocess.TimeoutExpired as exc:
        raise RuntimeError(f"{' '.join(cmd)}: no answer within {timeout} s") from exc
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n"
                           f"{proc.stdout}\n{proc.stderr}")
    return proc


def find_program(name: str) -> str | None:
    """``name`` on PATH or in the sbin folders (not on a plain user's PATH)."""
    path = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin", "/usr/bin"])
    return shutil.which(name, path=path)


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports nobody listens on now (the daemons bind them next)."""
    socks = [socket.socket() for _ in range(count)]
    try:
        for s in socks:
            s.bind(("", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def tail(path: Path, lines: int = 40) -> str:
    """The last ``lines`` lines of a text file, or a note that it is missing."""
    if not path.exists():
        return f"({path} does not exist)"
    text = path.read_text(errors="replace").splitlines()
    return f"--- {path} (last {min(lines, len(text))} lines) ---\n" + "\n".join(text[-lines:])


def parse_scontrol(line: str) -> dict[str, str]:
    """``Key=Value`` pairs of one ``scontrol show -o`` line.

    A token without ``=`` continues the previous value (values may hold spaces).
    """
    fields: dict[str, str] = {}
    key = None
    for token in line.split():
        name, sep, value = token.partition("=")
        if sep and re.fullmatch(r"[A-Za-z][\w:/]*", name):
            key = name
            fields[key] = value
        elif key is not None:
            fields[key] += " " + token
    return fields


def skip_or_fail(reason: str) -> None:
    """Skip, unless ``REQUIRE_SLURM=1`` says this machine must run the cluster."""
    if os.environ.get("REQUIRE_SLURM") == "1":
        pytest.fail(f"REQUIRE_SLURM=1 but {reason}")
    pytest.skip(reason)


def ensure_slurm_installed() -> None:
    """Find the SLURM and munge programs, installing Debian's packages if needed.

    Skips (see :func:`skip_or_fail`) where this machine cannot run the daemons.
    """
    if os.geteuid() != 0:
        skip_or_fail("slurmd must run as root to start jobs, and this is not root")
    missing = [p for p in PROGRAMS if find_program(p) is None]
    if not missing:
        return
    if shutil.which("apt-get") is None:
        skip_or_fail(f"{', '.join(missing)} not found and no apt-get to install "
                     f"{' '.join(PACKAGES)}")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *PACKAGES]
    proc = run(install, timeout=600, check=False, env=env)
    if proc.returncode != 0:
        # A new machine may have no package lists yet.
        run(["apt-get", "update", "-q"], timeout=300, check=False, env=env)
        proc = run(install, timeout=600, check=False, env=env)
    missing = [p for p in PROGRAMS if find_program(p) is None]
    if proc.returncode != 0 or missing:
        skip_or_fail(f"could not install {' '.join(PACKAGES)} (apt-get exited "
                     f"{proc.returncode}; missing {missing}):\n{proc.stdout[-2000:]}\n"
                     f"{proc.stderr[-2000:]}")


def make_fake_gpu(path: Path) -> None:
    """A stand-in device file for one GPU in ``gres.conf``.

    A character device (a copy of /dev/null's numbers) is what slurmd expects
    of a GPU and makes it set CUDA_VISIBLE_DEVICES in the jobs as on a real
    node; where mknod is not allowed an empty file still lets the node
    schedule GPU jobs (slurmd only logs an error about it).
    """
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except OSError:
        path.touch()


def clean_environment() -> dict[str, str]:
    """This process's environment without SLURM's, hpcmm's, the scripts' or MPS's variables.

    A test run inside a SLURM job (or with ``HPCMM_*``, ``JOB_*`` or
    ``CUDA_MPS_*`` set) would otherwise hand the outer job's settings to the
    inner cluster's jobs.
    """
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("SLURM_", "SBATCH_", "SRUN_", "SALLOC_", "HPCMM_", "JOB_",
                                 "CUDA_MPS_"))}


# --- the cluster ---------------------------------------------------------------


class Cluster:
    """munged, slurmctld and slurmd for one node, all files under ``root``.

    Parameters
    ----------
    root
        An empty folder; it keeps the configuration, state, logs and job output.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.host = socket.gethostname().split(".")[0]
        self.conf = root / "slurm.conf"
        self.munge_socket = root / "munge" / "munge.socket"
        self.work = root / "work"
        self.mps_bin = root / "mps-bin"
        self.mps_records = root / "mps-records"
        self.procs: dict[str, subprocess.Popen] = {}
        self.env = clean_environment()
        self.env["SLURM_CONF"] = str(self.conf)
        self.first_job_id = 1000 + secrets.randbelow(60_000_000)

    # -- configuration --

    def write_config(self) -> None:
        """Write the munge key, ``slurm.conf``, ``gres.conf`` and the GPU files."""
        for sub in ("munge", "state", "spool", "log", "gpus", "work", "bare", "mps-bin", "mps-records"):
            (self.root / sub).mkdir(mode=0o755, exist_ok=True)
        fake = self.mps_bin / "nvidia-cuda-mps-control"
        fake.write_text(FAKE_MPS_CONTROL.format(records=shlex.quote(str(self.mps_records)),
                                                python=shlex.quote(sys.executable)))
        fake.chmod(0o755)
        # The submit folder's .venv is where the scripts look for a Python first.
        (self.work / ".venv").symlink_to(sys.prefix, target_is_directory=True)
        key = self.root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        gpus = [self.root / "gpus" / f"gpu{i}" for i in range(FAKE_GPUS)]
        for gpu in gpus:
            make_fake_gpu(gpu)
        log = self.root / "log"
        ctld_port, slurmd_port = free_ports(2)
        self.conf.write_text("\n".join([
            "ClusterName=hpcmmtest",
            f"SlurmctldHost={self.host}(127.0.0.1)",
            # Ports of our own, so that a SLURM already on this machine is left alone.
            f"SlurmctldPort={ctld_port}",
            f"SlurmdPort={slurmd_port}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self.munge_socket}",
            f"StateSaveLocation={self.root / 'state'}",
            f"SlurmdSpoolDir={self.root / 'spool'}",
            f"SlurmctldPidFile={self.root / 'slurmctld.pid'}",
            f"SlurmdPidFile={self.root / 'slurmd.pid'}",
            f"SlurmctldLogFile={log / 'slurmctld.log'}",
            f"SlurmdLogFile={log / 'slurmd.log'}",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
            # No cgroups: the machine may not let us have them.
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            # The site's default plugin: the one its MPI (the tests' MPICH) speaks.
            "MpiDefault=pmi2",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "SchedulerType=sched/backfill",
            # No accounting daemon: job states come from scontrol, so finished
            # jobs must stay listed for the whole test.
            "AccountingStorageType=accounting_storage/none",
            "JobAcctGatherType=jobacct_gather/none",
            "JobCompType=jobcomp/filetxt",
            f"JobCompLoc={log / 'jobcomp.txt'}",
            "MinJobAge=3600",
            # Job ids of their own for each cluster: MPICH names its shared memory after
            # srun's PMI job id, and an aborted rank leaves that memory behind; a job of a
            # later cluster with the same id would attach to it and fail in MPI_Init.
            f"FirstJobId={self.first_job_id}",
            "ReturnToService=2",
            "InactiveLimit=0",
            "KillWait=5",
            "MailProg=/bin/true",
            # The node's CPU count is larger than the machine's.
            "SlurmdParameters=config_overrides",
            "GresTypes=gpu",
            (f"NodeName={self.host} NodeAddr=127.0.0.1 CPUs={NODE_CPUS} "
             f"Gres=gpu:{FAKE_GPUS} State=UNKNOWN"),
            f"PartitionName=test Nodes={self.host} Default=YES MaxTime=30 State=UP",
            "",
        ]))
        # slurmd drops a GPU without File= and then drains the node.
        (self.root / "gres.conf").write_text("".join(
            f"NodeName={self.host} Name=gpu File={gpu}\n" for gpu in gpus))

    # -- daemons --

    def start_daemon(self, name: str, cmd: list[str]) -> None:
        """Start ``cmd`` in the foreground mode of its daemon, output to log/NAME.out."""
        # The daemon keeps its own copy of the file descriptor.
        with open(self.root / "log" / f"{name}.out", "wb") as out:
            self.procs[name] = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out,
                                                stderr=subprocess.STDOUT, env=self.env,
                                                start_new_session=True)

    def wait_until(self, what: str, ready, timeout: float = 60) -> None:
        """Poll ``ready()`` until true; fail with the daemons' logs if a daemon exits.

        Raises
        ------
        RuntimeError
            After ``timeout`` seconds or when a daemon has exited.
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            dead = {n: p.returncode for n, p in self.procs.items() if p.poll() is not None}
            if dead:
                raise RuntimeError(f"{what}: daemon exited {dead}\n{self.logs()}")
            if ready():
                return
            time.sleep(0.5)
        raise RuntimeError(f"{what}: not ready after {timeout} s\n{self.logs()}")

    def munge_ok(self) -> bool:
        """Whether munged encodes and decodes a credential on our socket."""
        sock = str(self.munge_socket)
        if not self.munge_socket.exists():
            return False
        cred = run([find_program("munge"), "-n", "-S", sock], check=False, timeout=10)
        if cred.returncode != 0:
            return False
        back = run([find_program("unmunge"), "-S", sock], check=False, timeout=10,
                   input=cred.stdout)
        return back.returncode == 0

    def controller_up(self) -> bool:
        """Whether ``scontrol ping`` finds slurmctld UP."""
        proc = self.scontrol("ping", check=False)
        return proc.returncode == 0 and "UP" in proc.stdout

    def node_state(self) -> str:
        """The node's state as ``sinfo`` shows it (idle, mixed, drained, ...)."""
        proc = run([find_program("sinfo"), "-h", "-n", self.host, "-o", "%T"], check=False,
                   timeout=20, env=self.env)
        return proc.stdout.strip()

    def node_ready(self) -> bool:
        """Whether the node takes jobs; raises at once if it drained or went down."""
        state = self.node_state()
        # A down node comes back when slurmd registers (ReturnToService=2); a
        # drained one stays out, e.g. when its GPUs do not match gres.conf.
        if "drain" in state:
            raise RuntimeError(f"node {self.host} is {state}:\n"
                               f"{self.scontrol('show', 'node', self.host).stdout}\n{self.logs()}")
        return state in ("idle", "mixed", "allocated")

    def start(self) -> None:
        """Write the configuration and start munged, slurmctld and slurmd.

        Raises
        ------
        RuntimeError
            When a daemon does not come up, with the daemons' logs.
        """
        self.write_config()
        munge_dir = self.root / "munge"
        # --force: pytest's temporary folders are private (mode 700), which
        # munged would refuse for its socket; only root uses this cluster.
        self.start_daemon("munged", [
            find_program("munged"), "--foreground", "--force",
            f"--socket={self.munge_socket}", f"--key-file={munge_dir / 'munge.key'}",
            f"--pid-file={munge_dir / 'munged.pid'}", f"--seed-file={munge_dir / 'munged.seed'}",
            "--num-threads=4"])
        self.wait_until("munged", self.munge_ok, timeout=30)
        self.start_daemon("slurmctld", [find_program("slurmctld"), "-D", "-i",
                                        "-f", str(self.conf)])
        self.wait_until("slurmctld", self.controller_up, timeout=60)
        self.start_daemon("slurmd", [find_program("slurmd"), "-D", "-N", self.host,
                                     "-f", str(self.conf)])
        self.wait_until("slurmd", self.node_ready, timeout=60)

    def stop(self) -> None:
        """Cancel every job, stop slurmd, slurmctld and munged, then end stragglers.

        Safe to call however far :meth:`start` got.
        """
        if "slurmctld" in self.procs and self.procs["slurmctld"].poll() is None:
            run([find_program("scancel"), "--full", "--user=root"], check=False, timeout=20,
                env=self.env)
            self.wait_for_no_running_jobs(timeout=30)
        for name in ("slurmd", "slurmctld", "munged"):
            proc = self.procs.get(name)
            if proc is None or proc.poll() is not None:
                continue
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        self.kill_leftovers()

    def kill_leftovers(self) -> None:
        """SIGKILL what this cluster started and left behind (slurmstepd, ranks).

        They are recognised by ``SLURM_CONF`` naming this cluster's
        configuration in their environment: slurmd passes it to the job steps
        and sbatch to the jobs, and no other process has that path.
        """
        marker = f"SLURM_CONF={self.conf}".encode()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                environ = (entry / "environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if marker in environ:
                try:
                    os.kill(int(entry.name), signal.SIGKILL)
                except OSError:
                    pass

    def wait_for_no_running_jobs(self, timeout: float) -> None:
        """Give cancelled jobs up to ``timeout`` seconds to leave the node."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            proc = run([find_program("squeue"), "-h", "-t", "RUNNING,COMPLETING",
                        "-o", "%i"], check=False, timeout=20, env=self.env)
            if proc.returncode != 0 or not proc.stdout.strip():
                return
            time.sleep(1)

    def logs(self) -> str:
        """The tails of the daemons' logs, for failure messages."""
        names = ["slurmctld.log", "slurmd.log", "munged.out", "slurmctld.out", "slurmd.out"]
        return "\n".join(tail(self.root / "log" / n, 25) for n in names)

    # -- jobs --

    def scontrol(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        """Run ``scontrol`` against this cluster."""
        return run([find_program("scontrol"), *args], check=check, timeout=30, env=self.env)

    def job_env(self, spec: JobSpec) -> dict[str, str]:
        """The submitting environment: this Python's bin folder first on PATH.

        The jobs then start ``python`` and ``mpiexec`` from the environment
        that runs the tests (the venv with hpcmm, mpi4py and MPICH).
        """
        env = dict(self.env)
        bin_dir = str(Path(sys.executable).parent)
        if spec.python:
            env["PATH"] = os.pathsep.join([bin_dir, env.get("PATH", "")])
            env["JOB_PYTHON"] = sys.executable
        else:
            env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                          if p != bin_dir)
            env.pop("VIRTUAL_ENV", None)
        if spec.fake_mps:
            env["PATH"] = os.pathsep.join([str(self.mps_bin), env.get("PATH", "")])
        env.update(spec.env)
        if spec.fault:
            env["JOB_PYTHON"] = str(self.fault_python(spec.fault))
        return env

    def fault_python(self, fault: str) -> Path:
        """A "Python" for the job script that runs ``-m hpcmm`` through tests/fault_runner.py with ``fault``."""
        path = self.root / f"python-fault-{fault.replace(':', '-')}"
        python, runner = shlex.quote(sys.executable), shlex.quote(str(REPO / "tests" / "fault_runner.py"))
        path.write_text("#!/bin/sh\n"
                        f'if [ "$1" = -m ] && [ "$2" = hpcmm ]; then shift 2; '
                        f'exec {python} {runner} --fault {shlex.quote(fault)} -- "$@"; fi\n'
                        f'exec {python} "$@"\n')
        path.chmod(0o755)
        return path

    def mps_calls(self, job_id: str) -> list[str]:
        """The stand-in MPS control program's calls in job ``job_id``, one line each."""
        path = self.mps_records / f"mps-{job_id}.calls"
        return path.read_text().splitlines() if path.exists() else []

    def submit(self, spec: JobSpec) -> str:
        """Submit ``spec`` from its folder and return the job id."""
        cmd = spec.command()
        cmd[0] = find_program("sbatch")
        cmd[cmd.index(f"jobs/{spec.script}")] = str(JOBS_DIR / spec.script)
        cmd[1:1] = ["--parsable", f"--time={JOB_MINUTES}",
                    f"--output={self.root / 'slurm-%j.out'}"]
        proc = run(cmd, timeout=30, env=self.job_env(spec), cwd=self.root / spec.folder)
        return proc.stdout.strip().split(";")[0]

    def job(self, job_id: str) -> dict[str, str]:
        """``scontrol show job`` fields of one job."""
        return parse_scontrol(self.scontrol("show", "job", "-o", job_id).stdout)

    def wait_for_jobs(self, job_ids: list[str], stall: float) -> dict[str, dict[str, str]]:
        """Poll until every job is in a final state.

        Raises
        ------
        RuntimeError
            After ``stall`` seconds in which no job changed state, or at once for a job
            pending for a reason that never clears (e.g. the node cannot hold it), with its details.
        """
        deadline, states = time.monotonic() + stall, None
        while True:
            jobs = {j: self.job(j) for j in job_ids}
            if all(info.get("JobState") in FINAL_STATES for info in jobs.values()):
                return jobs
            now = {j: info.get("JobState") for j, info in jobs.items()}
            if now != states:
                deadline, states = time.monotonic() + stall, now
            for j, info in jobs.items():
                reason = info.get("Reason", "")
                if info.get("JobState") == "PENDING" and reason.startswith(HOPELESS_REASONS):
                    raise RuntimeError(f"job {j} cannot start (Reason={reason}):\n"
                                       f"{self.scontrol('show', 'job', j).stdout}\n"
                                       f"{self.scontrol('show', 'node', self.host).stdout}")
            if time.monotonic() > deadline:
                states = {j: (i.get("JobState"), i.get("Reason")) for j, i in jobs.items()}
                outputs = "\n".join(f"--- slurm-{j}.out ---\n{self.output(j)}" for j, i in
                                     jobs.items() if i.get("JobState") not in FINAL_STATES)
                raise RuntimeError(f"no job changed state for {stall} s: {states}\n"
                                   f"{outputs}\n{self.logs()}")
            time.sleep(1)

    def cancel_when(self, job_id: str, pattern: str, stall: float, job_ids: list[str]) -> None:
        """``scancel --full`` the job once its log has a line matching ``pattern``.

        Raises
        ------
        RuntimeError
            When the job ends first, or after ``stall`` seconds in which none of ``job_ids``
            (the job waits for the others' CPUs) changed state and its log did not grow.
        """
        deadline, seen = time.monotonic() + stall, None
        while not re.search(pattern, output := self.output(job_id), re.M):
            if self.job(job_id).get("JobState") in FINAL_STATES or time.monotonic() > deadline:
                raise RuntimeError(f"job {job_id} never printed {pattern!r}:\n{output}")
            now = (len(output), tuple(self.job(j).get("JobState") for j in job_ids))
            if now != seen:
                deadline, seen = time.monotonic() + stall, now
            time.sleep(0.5)
        # --full: SIGTERM to the batch script as well, as a time limit sends it
        # (a plain scancel leaves the script to SIGKILL).
        run([find_program("scancel"), "--full", job_id], timeout=20, env=self.env)

    def output(self, job_id: str) -> str:
        """The job's ``slurm-<id>.out``."""
        path = self.root / f"slurm-{job_id}.out"
        return path.read_text(errors="replace") if path.exists() else f"({path} missing)"


@dataclasses.dataclass
class Finished:
    """A job that ended: its plan, id, ``scontrol`` fields and output."""

    spec: JobSpec
    job_id: str
    info: dict[str, str]
    output: str
    results: list[Path]
    mps_calls: list[str]

    @property
    def result(self) -> str | None:
        """The reason on the job's last line (``hpcmm job ID result: REASON (exit status N)``)."""
        found = re.findall(rf"^hpcmm job {self.job_id} result: (.*) \(exit status (\d+)\)$",
                           self.output, re.MULTILINE)
        return found[-1][0] if found else None

    def line(self) -> str:
        """``SLURM job <id> <script> <state> ExitCode=<code> [verdict] result: ... (<label>: <line>)``."""
        state = self.info.get("JobState")
        expected = self.spec.state
        code = f"{self.spec.exit_code}:0"
        good = (state == expected and self.info.get("ExitCode") == code
                and re.fullmatch(self.spec.result, self.result or "") is not None)
        verdict = "as expected" if good else f"EXPECTED {expected} {code} {self.spec.result!r}"
        return (f"SLURM job {self.job_id} {self.spec.script} {state} ExitCode={self.info.get('ExitCode')} "
                f"[{verdict}] result: {self.result} ({self.spec.label}: {self.spec.command_line()})")

    def explain(self) -> str:
        """Everything needed to see why a job went wrong."""
        fields = " ".join(f"{k}={v}" for k, v in self.info.items()
                          if k in ("JobState", "Reason", "ExitCode", "DerivedExitCode",
                                   "RunTime", "NumTasks", "TRES"))
        calls = "\n".join(self.mps_calls) or "(none)"
        return (f"{self.line()}\n{fields}\n--- slurm-{self.job_id}.out ---\n{self.output}"
                f"\n--- nvidia-cuda-mps-control calls ---\n{calls}")


# --- fixtures ------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A running one-node cluster; stopped at the end of the module, pass or fail."""
    ensure_slurm_installed()
    c = Cluster(tmp_path_factory.mktemp("slurm"))
    try:
        c.start()
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def finished(cluster, slurm_job_log) -> dict[str, Finished]:
    """Submit every job of :data:`PLAN` at once and wait for all of them."""
    ids = {spec.label: cluster.submit(spec) for spec in PLAN}
    for spec in PLAN:
        if spec.cancel_when:
            cluster.cancel_when(ids[spec.label], spec.cancel_when, STALL_SECONDS, list(ids.values()))
    infos = cluster.wait_for_jobs(list(ids.values()), stall=STALL_SECONDS)
    done = {}
    for spec in PLAN:
        job_id = ids[spec.label]
        folder = cluster.root / spec.folder / "results"
        results = sorted(folder.glob(f"*-{job_id}.h5"))
        results += sorted(folder.glob(f"*-{job_id}/*.h5"))
        done[spec.label] = Finished(spec, job_id, infos[job_id], cluster.output(job_id),
                                    results, cluster.mps_calls(job_id))
        slurm_job_log.append(done[spec.label].line())
        print(done[spec.label].line())
    return done


# --- tests ---------------------------------------------------------------------


def test_plan_covers_every_script():
    """A script added to jobs/ without a submission here fails this test."""
    scripts = {p.name for p in JOBS_DIR.glob("*.sbatch")}
    planned = {spec.script for spec in PLAN}
    assert scripts == planned, f"jobs/ has {sorted(scripts)}, the plan {sorted(planned)}"


@pytest.mark.parametrize("script", sorted(p.name for p in JOBS_DIR.glob("*.sbatch")))
def test_script_is_well_formed(script):
    """Each script parses, stops on errors, and names its submit line."""
    path = JOBS_DIR / script
    text = path.read_text()
    proc = run(["bash", "-n", str(path)], check=False, timeout=10)
    assert proc.returncode == 0, proc.stderr
    assert "set -euo pipefail" in text
    assert f"sbatch jobs/{script}" in text or re.search(rf"sbatch .*jobs/{script}", text)
    assert re.search(r"^##SBATCH --account=", text, re.MULTILINE), "account placeholder missing"
    assert re.search(r"^##SBATCH --partition=", text, re.MULTILINE), "partition placeholder missing"


@pytest.mark.parametrize("label", [s.label for s in PLAN])
def test_job_ends_as_planned_with_its_reason(finished, label):
    """State, exit code and the reason on the last line: the real cause, not a guess."""
    job = finished[label]
    expected = job.spec.state
    assert job.info.get("JobState") == expected, job.explain()
    assert job.info.get("ExitCode") == f"{job.spec.exit_code}:0", job.explain()
    assert job.result is not None, f"no result line\n{job.explain()}"
    assert re.fullmatch(job.spec.result, job.result), job.explain()
    if job.spec.exit_code in (2, 3):  # bad input or environment: nothing ran, nothing written
        assert not job.results, f"a failed job left {job.results}"


@pytest.mark.parametrize("label", [s.label for s in PLAN if s.ok])
def test_job_completes_and_verifies(finished, label):
    """The job's HDF5 files are verified; the grid is hpcmm's own choice."""
    import h5py
    from mpi4py import MPI

    from hpcmm.planning.grid_orientation import facing, oriented

    job = finished[label]
    assert job.info.get("JobState") == "COMPLETED", job.explain()
    assert len(job.results) == job.spec.h5_files, (
        f"expected {job.spec.h5_files} HDF5 files, found {job.results}\n{job.explain()}")
    for path in job.results:
        with h5py.File(path, "r") as h5:
            attrs = dict(h5["/summary"].attrs)
            config = dict(h5["/config"].attrs)
            ranks = int(h5.attrs["ranks"])
            on_gpu = bool((h5["/topology"]["gpu_index"][()] >= 0).any())
        assert bool(attrs["verified"]), f"{path}: /summary {attrs}\n{job.explain()}"
        for name in ("seconds", "tflops", "residual", "paths"):
            assert name in attrs, f"{path}: /summary lacks {name!r}: {attrs}"
        # MPI.Compute_dims, turned as hpcmm turns it (float64 on GPUs of one node: tall)
        face = facing(str(config["grid_orientation"]), str(config["dtype"]), bool(config.get("tf32", False)),
                      on_gpu, int(config["nodes"]))
        want = oriented(*MPI.Compute_dims(ranks, 2), face)
        assert config["grid"] == str(want), f"{path}: grid {config['grid']}, hpcmm's is {want}"
        print(f"{path.name}: ranks={ranks} grid={config['grid']} seconds={float(attrs['seconds']):.4g} "
              f"residual={float(attrs['residual']):.2e} paths={list(attrs['paths'])}")


def test_launch_facts_come_from_the_allocation(finished):
    """The plugin is the site's default, the GPUs the job's, and the HDF5 setting is made."""
    srun, gres = finished["single-node-srun"], finished["single-node-gres"]
    for job in (srun, gres):
        assert "launcher: srun --mpi=pmi2 (the site's default)" in job.output, job.explain()
        assert " --mpi=" not in job.output.split("\n+ ", 1)[1].splitlines()[0], job.explain()
        assert "2 tasks, 2 GPU(s)" in job.output, job.explain()
    for job in finished.values():
        if job.spec.ok:
            assert "HDF5_USE_FILE_LOCKING=FALSE" in job.output, job.explain()
    # Under --export=NONE the script found the submit folder's .venv by itself.
    venv = finished["cpu-smoke-export-none-finds-venv"]
    assert re.search(r"Python: \S*/work/\.venv/bin/python;", venv.output), venv.explain()


def test_scaling_prints_table(finished):
    """The scaling job reads every point back and prints one table row per point."""
    job = finished["scaling-srun"]
    rows = [line for line in job.output.splitlines()
            if re.match(r"(strong|weak)\s+\d+\s+\d+\s+\d+\s+\d+x\d+\s", line)]
    assert "TFLOP/s" in job.output, job.explain()
    assert len(rows) == job.spec.h5_files, job.explain()
    assert all(" yes " in row for row in rows), job.explain()
    # Weak scaling on 2 ranks: hpcmm's grid 2x1, so C is (61*2) x 61.
    assert any(re.match(r"weak\s+61\s+2\s+1\s+2x1\s+122x61x61\s", row) for row in rows), rows


#: Lines a batch script may have: a cluster user reads it in a screen or two.
MOST_SCRIPT_LINES = 80


@pytest.mark.parametrize("script", sorted(p.name for p in JOBS_DIR.glob("*.sbatch")))
def test_script_is_its_header_settings_and_the_shared_part(script):
    """Each script: the #SBATCH header first, then the settings a user edits, then it sources
    jobs/common.sh (found beside the script as submitted, since SLURM runs a copy), in at most
    80 lines; the shared code lives in common.sh alone."""
    lines = (JOBS_DIR / script).read_text().splitlines()
    assert len(lines) <= MOST_SCRIPT_LINES, f"{script}: {len(lines)} lines"
    sbatch = [i for i, line in enumerate(lines) if re.match(r"#+SBATCH ", line)]
    settings = [i for i, line in enumerate(lines) if re.match(r': "\$\{JOB_[A-Z_]+:=', line)]
    source = [i for i, line in enumerate(lines) if line.startswith('source "$common/common.sh"')]
    code = [i for i, line in enumerate(lines[1:], 1) if line.strip() and not line.startswith("#")]
    assert sbatch and settings and len(source) == 1, script
    assert code[0] == settings[0] and max(sbatch) < settings[0] < source[0], script
    assert "Command=" in "\n".join(lines[settings[-1]:source[0]])  # the script's own path, from scontrol
    shared = ("finish()", "find_python()", "make_launch()", "outcome()", "mps_plan()", "EXIT_ENVIRONMENT=")
    assert not [name for name in shared if any(line.startswith(name) for line in lines)], script


def test_scripts_find_the_shared_part_from_a_copy(tmp_path):
    """Run as SLURM runs it (a copy in a spool folder, the submit folder elsewhere), a script still
    sources jobs/common.sh: through scontrol's Command=, else the submit folder's jobs/."""
    spool = tmp_path / "spool"
    spool.mkdir()
    copy = spool / "slurm_script"
    text = (JOBS_DIR / "cpu-smoke.sbatch").read_text()
    stop = text.index('source "$common/common.sh"')
    copy.write_text(text[:stop] + 'echo "found $common"\n')
    env = {"PATH": os.environ["PATH"], "SLURM_SUBMIT_DIR": str(REPO), "SLURM_JOB_ID": "0"}
    proc = run(["bash", str(copy)], check=False, timeout=30, env=env, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.strip() == f"found {REPO}/jobs", proc.stdout + proc.stderr
    env["SLURM_SUBMIT_DIR"] = str(tmp_path)
    proc = run(["bash", str(copy)], check=False, timeout=30, env=env, cwd=tmp_path)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "result: environment: no jobs/common.sh" in proc.stdout, proc.stdout


@pytest.mark.parametrize("script", ["scaling.sbatch"])
@pytest.mark.parametrize("device,nodes,dtype,gpus,turned", [
    ("cpu", 1, "float64", 4, False), ("gpu", 1, "float32", 4, False), ("gpu", 1, "float64", 64, True),
    ("gpu", 2, "float64", 4, False), ("gpu", 1, "float64", 2, "row"), ("gpu", 1, "float32", 2, False)])
def test_scaling_grid_is_hpcmms(script, device, nodes, dtype, gpus, turned):
    """The scaling script's grid is MPI_Dims_create's for 1 to 64 ranks, turned (rows <= columns) where hpcmm
    turns it: float64 on the GPUs of one node, and one process row where its ranks outnumber the node's GPUs
    and each keeps ROW_LEAST_COLUMNS columns of C (narrower strips: the turned grid)."""
    from mpi4py import MPI

    from hpcmm.planning.grid_orientation import ROW_LEAST_COLUMNS, ROW_MOST_RANKS

    assert "scaling_plan" in (JOBS_DIR / script).read_text()  # whose grids come from common.sh's hpcmm_grid
    text = (JOBS_DIR / "common.sh").read_text()
    function = re.search(r"^hpcmm_grid\(\) \{.*?^\}$", text, re.S | re.M).group(0)
    python = sys.executable
    counts = [*range(1, 17), 24, 30, 32, 48, 64]
    env = {**os.environ, "HPCMM_DEVICE": device, "PYTHONPATH": str(JOBS_DIR.parent)}
    env.pop("HPCMM_GRID_ORIENTATION", None)
    dims = [MPI.Compute_dims(p, 2) for p in counts]
    for strip in (ROW_LEAST_COLUMNS, ROW_LEAST_COLUMNS - 1):  # each rank's columns of C on one row
        loop = (f'\npython={python}\nfor p in {" ".join(map(str, counts))}; '
                f'do hpcmm_grid "$p" {nodes} {dtype} "$p" {gpus} $((p * {strip})); done')
        proc = run(["bash", "-c", function + loop], timeout=60, env=env)
        # one process row, as far as measured
        row = [turned == "row" and gpus < p <= ROW_MOST_RANKS and strip >= ROW_LEAST_COLUMNS for p in counts]
        expected = [f"1x{p}" if in_row else f"{min(d)}x{max(d)}" if turned else f"{d[0]}x{d[1]}"
                    for p, d, in_row in zip(counts, dims, row)]
        assert proc.stdout.split() == expected, (strip, proc.stderr)


def test_no_script_uses_an_hpcmm_name_hpcmm_does_not_know():
    """The scripts' own settings are JOB_*; any HPCMM_* name in them is one of hpcmm's."""
    from hpcmm.config import ENVIRONMENT

    for path in [*JOBS_DIR.glob("*.sbatch"), JOBS_DIR / "common.sh"]:
        names = set(re.findall(r"\bHPCMM_[A-Z_]+", path.read_text()))
        assert names <= set(ENVIRONMENT), f"{path.name}: {sorted(names - set(ENVIRONMENT))}"


@pytest.mark.parametrize("label", [s.label for s in PLAN])
def test_mps_daemon_started_and_stopped_as_planned(finished, label):
    """Each daemon the job starts is stopped, success or failure, and the log says so.

    The calls come from the stand-in's record (one writer at a time, its own
    file per job); the log must say the same: the decision, each start with
    its time and pipe directory, each stop, or why no daemon was started.
    """
    job = finished[label]
    starts = [line for line in job.mps_calls if line.startswith("start ")]
    quits = [line for line in job.mps_calls if line.startswith("quit ")]
    assert len(starts) == job.spec.mps, job.explain()
    pipes = [re.search(r"pipe=(\S+)", line).group(1) for line in starts]
    # Every daemon stopped once: by the task that started it, or, where the launcher
    # killed that task first (a failed job), by the batch script after the step.
    assert sorted(re.search(r"pipe=(\S+)", line).group(1) for line in quits) == sorted(pipes), job.explain()
    assert not any("no-daemon" in line for line in job.mps_calls), job.explain()
    assert len(set(pipes)) == len(pipes), f"pipe directories reused: {pipes}"
    for pipe in pipes:
        # Job-unique and node-local; gone when the step has ended.
        assert re.fullmatch(rf"/tmp/hpcmm-mps-{job.job_id}-0-\d+/pipe", pipe), pipe
        assert not Path(pipe).parent.exists(), f"{pipe} left behind"
        assert re.search(rf"^MPS: starting a control daemon on each node of the step .*: pipe dir {pipe}, "
                         rf"log dir {pipe[:-4]}log$", job.output, re.M), job.explain()
        assert re.search(rf"^MPS: \S+: control daemon started in \d+\.\d{{3}} s, pipe dir {pipe}$",
                         job.output, re.M), job.explain()
    stopped = re.findall(r"^MPS: \S+: control daemon stopped \((quit took \d+\.\d{3} s|the step left it running)\)$",
                         job.output, re.M)
    assert len(stopped) == job.spec.mps, job.explain()
    if job.spec.ok:
        assert "the step left it running" not in job.output, job.explain()
    note = job.spec.mps_note
    notes = re.findall(r"^MPS: not started: .*$", job.output, re.M)
    if note is None:
        assert not notes, job.explain()
    else:
        assert notes and all(re.fullmatch(note, line) for line in notes), job.explain()
