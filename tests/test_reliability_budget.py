"""Time limits derived from what a test starts, never fixed seconds that a loaded machine breaks.

A job's time is mostly its launch: ``mpiexec`` and 2 Python ranks importing numpy, mpi4py and
h5py.  :func:`launch_seconds` times a job that does nothing (``--version`` at 2 ranks) on this
machine and under its present load; a refusal may then take :data:`REFUSE_LAUNCHES` launches
plus slack, and a job whose rank fails or is signalled may take the waits hpcmm itself builds in
(:data:`PROTOCOL_WAITS`) plus :data:`END_LAUNCHES` launches.  On a loaded 2-core machine the
launches slow down, and the limits with them.

The launch is timed once per test process, and again before any limit fails (:func:`within`):
the load may have grown since the first launch, and a limit is only broken by a job that is
slow against a launch timed at about the same moment.

Two kinds of limit follow from it:

* **Speed limits** (:func:`refuse_within`, :func:`end_within`): what a test proves (a refusal
  comes before any work; a failing rank brings the job down instead of leaving it waiting).
  Checked with :func:`within`.
* **Hang guards** (:func:`hang_within`, :func:`quiet_within`, :func:`scaled`): only there so that
  a hung job fails instead of blocking the suite; generous, several times the speed limits.
  A job that prints as it goes (the fuzz driver, the leak runs, the MPI suite) is ended only
  after :func:`quiet_within` seconds without a word (``launcher.run_launcher(stall=...)``),
  never for its total time.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import ranklog
from ranklog import Part, hpcmm_argv

from hpcmm.cli.main import SETTLE_WAIT
from hpcmm.cli.startup import MPI_START_WAIT, SILENT_RANK_WAIT

REFUSE_LAUNCHES = 4
END_LAUNCHES = 6
SLACK = 10.0
#: The longest waits hpcmm builds in on a job's way out: a signal's silent ranks, a rank
#: failing alone at the end, a signal that waits for MPI to start.
PROTOCOL_WAITS = SILENT_RANK_WAIT + SETTLE_WAIT + MPI_START_WAIT
#: A launch's seconds on an idle 2-core machine: :func:`scaled` stretches a hang guard written
#: for such a machine by how much slower a launch is here (never shortens it).
IDLE_LAUNCH = 1.5

_LAUNCH: list[float] = []


def _time_launch() -> float:
    d = Path(tempfile.mkdtemp(prefix="hpcmm-launch-"))
    try:
        o = ranklog.run([Part(hpcmm_argv("--version"), ranks=2)], d / "logs", d, 600)
        assert o.rc == 0, o.describe()
        return o.seconds
    finally:
        shutil.rmtree(d, ignore_errors=True)


def launch_seconds(again: bool = False) -> float:
    """Seconds of ``mpiexec -n 2 python -m hpcmm --version`` here: the slowest timed so far.

    The first call times one; ``again`` times one more (the load now).
    """
    if again or not _LAUNCH:
        _LAUNCH.append(_time_launch())
    return max(_LAUNCH)


def refuse_within() -> float:
    """A job that refuses its input ends within this many seconds (launch included)."""
    return REFUSE_LAUNCHES * launch_seconds() + SLACK


def end_within() -> float:
    """A job whose rank fails, hangs or is signalled ends within this many seconds."""
    return PROTOCOL_WAITS + END_LAUNCHES * launch_seconds() + SLACK


def hang_within() -> float:
    """Hang guard of a job held to :func:`end_within` (or less): killed after this many seconds."""
    return 2 * end_within()


def quiet_within() -> float:
    """Hang guard of a job that prints as it goes: ended after this many seconds without output."""
    return end_within()


def scaled(seconds: float) -> float:
    """A hang guard of ``seconds`` on an idle machine, stretched as the launch is slower here."""
    return seconds * max(1.0, launch_seconds() / IDLE_LAUNCH)


def within(seconds: float, limit: Callable[[], float]) -> bool:
    """Whether ``seconds < limit()``; before it says no, a launch is timed again and the limit recomputed."""
    if seconds < limit():
        return True
    launch_seconds(again=True)
    return seconds < limit()


def test_the_limits_follow_the_launch():
    launch = launch_seconds()
    assert 0 < launch < refuse_within() < end_within() < hang_within()
    assert end_within() - refuse_within() >= PROTOCOL_WAITS
    assert scaled(60.0) >= 60.0 and quiet_within() >= end_within()


def test_a_limit_is_checked_again_against_a_fresh_launch():
    """A job slower than the limit of the first launch passes if a launch timed now is as slow."""
    first = launch_seconds()
    saved = list(_LAUNCH)
    try:
        _LAUNCH[:] = [first / 10]  # as if the first launch ran before the machine got busy
        assert within(first / 10 * REFUSE_LAUNCHES + SLACK + 0.5 * first, refuse_within)
        assert len(_LAUNCH) == 2
        assert not within(10 * refuse_within(), refuse_within)
    finally:
        _LAUNCH[:] = saved
