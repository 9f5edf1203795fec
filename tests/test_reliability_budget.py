"""Time limits derived from what a test starts, never fixed seconds that a loaded machine breaks.

A job's time is mostly its launch: ``mpiexec`` and 2 Python ranks importing numpy, mpi4py and
h5py.  :func:`launch_seconds` times a job that does nothing (``--version`` at 2 ranks) once per
test process, on this machine and under its present load; a refusal may then take
:data:`REFUSE_LAUNCHES` launches plus slack, and a job whose rank fails or is signalled may
take the waits hpcmm itself builds in (:data:`PROTOCOL_WAITS`) plus :data:`END_LAUNCHES`
launches.  On a loaded 2-core machine the launches slow down, and the limits with them.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import ranklog
from ranklog import Part, hpcmm_argv

from hpcmm.cli import SETTLE_WAIT
from hpcmm.startup import MPI_START_WAIT, SILENT_RANK_WAIT

REFUSE_LAUNCHES = 4
END_LAUNCHES = 6
SLACK = 10.0
#: The longest waits hpcmm builds in on a job's way out: a signal's silent ranks, a rank
#: failing alone at the end, a signal that waits for MPI to start.
PROTOCOL_WAITS = SILENT_RANK_WAIT + SETTLE_WAIT + MPI_START_WAIT

_LAUNCH: list[float] = []


def launch_seconds() -> float:
    """Seconds of ``mpiexec -n 2 python -m hpcmm --version`` here and now (measured once)."""
    if not _LAUNCH:
        d = Path(tempfile.mkdtemp(prefix="hpcmm-launch-"))
        try:
            o = ranklog.run([Part(hpcmm_argv("--version"), ranks=2)], d / "logs", d, 600)
            assert o.rc == 0, o.describe()
            _LAUNCH.append(o.seconds)
        finally:
            shutil.rmtree(d, ignore_errors=True)
    return _LAUNCH[0]


def refuse_within() -> float:
    """A job that refuses its input ends within this many seconds (launch included)."""
    return REFUSE_LAUNCHES * launch_seconds() + SLACK


def end_within() -> float:
    """A job whose rank fails, hangs or is signalled ends within this many seconds."""
    return PROTOCOL_WAITS + END_LAUNCHES * launch_seconds() + SLACK


def test_the_limits_follow_the_launch():
    launch = launch_seconds()
    assert 0 < launch < refuse_within() < end_within()
    assert end_within() - refuse_within() >= PROTOCOL_WAITS
