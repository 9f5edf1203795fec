"""The life of one ``python -m hpcmm`` process, from its first line to its exit.

A job of many ranks hangs when one rank leaves and the others wait for it in a
collective.  :func:`launch` makes every way out of a rank end the whole job:

* **Signals.**  SIGTERM and SIGINT are blocked on the first line, before any
  thread exists, so every thread started later (MPI's, BLAS's, HDF5's)
  inherits the mask and a signal stays pending until one thread takes it:
  the watcher, which waits for it with ``sigwaitinfo``.  That thread runs
  however busy the main thread is (inside MPI or a BLAS call, or importing a
  module), removes the temporary files of :mod:`hpcmm.io.h5io` and ends the
  process with status 128 + N, once MPI has started (a rank that ends before
  ``MPI_Init`` would leave the launcher waiting for it).  Python never sees
  the signal, so there is no ``KeyboardInterrupt`` and no traceback.
* **MPI first.**  ``mpi4py.MPI`` is imported (``MPI_Init``) right after, before
  anything that can fail on one rank alone: from then on the rank can abort.
* **Standard streams never decide the status.**  Descriptors 0 to 2 that are
  closed get ``/dev/null`` (a file opened later would take their number, and a
  library's message would land in it), and a write to stdout or stderr that
  fails (``... | head``, ``>&-``, ``>/dev/full``) sends the rest of that stream
  to ``/dev/null``: the summary is lost, the exit status is the work's.
* **Whatever leaves the entry point** (an exception, ``SystemExit`` with a
  non-zero status, ``KeyboardInterrupt``) ends the job through ``MPI_Abort``,
  the way ``python -m mpi4py`` does (:func:`mpi4py.run.set_abort_status`),
  after one line ``hpcmm: rank R: ...`` that names the rank and the cause.

Who prints a signal's line: a signal that came from the launcher (the
parent process, forwarding it to every rank) or from the terminal (the
kernel, to a whole process group) reached every rank, and rank 0 alone
reports it (the others wait, up to :data:`SILENT_RANK_WAIT` seconds, for the
launcher to end them once rank 0 has ended, so that rank 0's line is not lost
to the launcher's clean-up); a signal sent to one rank from elsewhere is
reported by that rank.

Example::

    mpiexec -n 2 python -m hpcmm --m 64      # __main__ calls launch()
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence

__all__ = ["launch", "rank_from_environment", "published", "one_line"]

#: Signals that stop a run (a batch system's time limit, Ctrl-C).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)

#: Where each launcher puts the rank before MPI starts (MPICH/hydra, PMIx, Open MPI, SLURM).
_RANK_VARIABLES = ("PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID")


#: A signal that reached every rank: how long the other ranks wait for the launcher to end them
#: once rank 0 has spoken and ended, before they end by themselves (rank 0 may be gone already).
SILENT_RANK_WAIT = 10.0

#: Seconds a signal waits for MPI_Init to return before the rank dies of it all the same.
MPI_START_WAIT = 10.0


class _State:
    """What the watcher needs to know about the main thread (set once each)."""

    mpi_started = threading.Event()  # set when MPI_Init returned, or failed
    mpi_ok = False
    rank: int | None = None
    stopping = threading.Lock()


def rank_from_environment() -> int | None:
    """This process's rank as the launcher announced it, or ``None`` (no launcher)."""
    for name in _RANK_VARIABLES:
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return None


def _rank() -> int | None:
    return _State.rank if _State.rank is not None else rank_from_environment()


def one_line(text: str) -> str:
    """``text`` folded onto one line (HDF5's messages span several)."""
    return " ".join(str(text).split())


def published() -> str | None:
    """The results file this process saw published, if any (for a truthful last word)."""
    done = getattr(sys.modules.get("hpcmm.io.h5io"), "PUBLISHED", None)
    return done[-1] if done else None


def _write(line: str) -> None:
    try:
        os.write(2, (line + "\n").encode(errors="replace"))
    except OSError:
        pass


def _stop(signum: int, sender: int) -> None:
    """Remove partial files, say so (see the module's rule on who speaks) and end the process."""
    _State.stopping.acquire()  # a second signal waits here until the first one has ended the process
    # Whether the signal came during start-up is decided now: the main thread goes on while
    # this one waits for MPI below, and may be past start-up by the time the line is written.
    in_start_up = not _main_started.is_set()
    try:
        # A rank that ends before MPI_Init leaves the launcher waiting: let MPI start first (it
        # waits for the other ranks, so not for ever).
        _State.mpi_started.wait(MPI_START_WAIT)
        # h5io may be half imported (the signal came while it imported h5py): nothing pending then.
        remove_pending = getattr(sys.modules.get("hpcmm.io.h5io"), "remove_pending", None)
        if remove_pending is not None:
            remove_pending()
        rank = _rank()
        to_everyone = sender in (0, os.getppid())
        if to_everyone and rank not in (0, None):
            # Rank 0 speaks for all.  The first rank to end makes the launcher kill the others,
            # so this one waits for that to happen once rank 0 has said it and ended.
            time.sleep(SILENT_RANK_WAIT)
        if rank in (0, None) or not to_everyone:
            name = signal.Signals(signum).name
            who = f"rank {rank}: " if rank is not None and not to_everyone else ""
            when = " during start-up" if in_start_up else ""
            path = published()
            outcome = f"the results were written to {path}" if path else "no results written"
            _write(f"hpcmm: {who}stopped by {name}{when}; {outcome}")
    finally:
        if _State.mpi_ok:
            os._exit(128 + signum)  # the launcher ends the other ranks
        _die_by(signum)  # MPI did not start: a normal exit would leave the launcher waiting


def _die_by(signum: int) -> None:
    signal.signal(signum, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signum})
    os.kill(os.getpid(), signum)
    os._exit(128 + signum)


_main_started = threading.Event()  # the entry point runs (start-up is over)


def _watch() -> None:
    while True:
        info = signal.sigwaitinfo(set(STOP_SIGNALS))
        threading.Thread(target=_stop, args=(info.si_signo, info.si_pid), daemon=True).start()


def _block_signals() -> None:
    """Block SIGTERM/SIGINT in this (still only) thread and start the watcher."""
    signal.pthread_sigmask(signal.SIG_BLOCK, set(STOP_SIGNALS))
    threading.Thread(target=_watch, name="hpcmm-signals", daemon=True).start()


def _status_of(exc: BaseException) -> int:
    if isinstance(exc, SystemExit):
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    if isinstance(exc, KeyboardInterrupt):
        return 128 + signal.SIGINT
    return 1


def _cause(exc: BaseException) -> str:
    if isinstance(exc, SystemExit):
        return f"exited with status {_status_of(exc)} while the other ranks went on"
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted (KeyboardInterrupt)"
    text = one_line(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _fail(exc: BaseException) -> int:
    """One line naming the rank and the cause; MPI_Abort at exit (or die, where MPI never started)."""
    status = _status_of(exc) or 1
    rank = _rank()
    who = f"rank {rank}: " if rank is not None else ""
    _write(f"hpcmm: {who}{_cause(exc)}; aborting all ranks")
    if sys.flags.dev_mode:  # python -X dev -m hpcmm: the traceback too
        import traceback  # noqa: PLC0415

        traceback.print_exception(exc)
    if _State.mpi_ok:
        from mpi4py.run import set_abort_status  # noqa: PLC0415

        set_abort_status(status)  # mpi4py calls MPI_Abort(COMM_WORLD, status) instead of MPI_Finalize
        sys.stderr.flush()
        return status
    if rank_from_environment() is not None:
        # Under a launcher, but MPI never started here: only a death by signal ends the job.
        _die_by(signal.SIGABRT)
    return status


class _Steady:
    """``sys.stdout``/``sys.stderr`` that a reader who left, a closed or a failing stream cannot fail.

    The exit status is the work's, not the terminal's: a write that fails (``EPIPE`` from
    ``... | head``, ``EBADF``, ``EIO``) points the descriptor at ``/dev/null`` and goes on there, so
    the text is lost and nothing else (Python's own flush at exit included) fails after it.
    """

    def __init__(self, stream, fd: int) -> None:
        self._stream = stream
        self._fd = fd

    def _lost(self) -> None:
        try:
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, self._fd)
            os.close(null)
            self._stream.flush()  # what was buffered goes to /dev/null now
        except (OSError, ValueError):
            pass

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except UnicodeError:
            raise
        except (OSError, ValueError):
            self._lost()
            return len(text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except UnicodeError:
            raise
        except (OSError, ValueError):
            self._lost()

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def _steady_streams() -> None:
    """Descriptors 0 to 2 open (``/dev/null`` where one was closed: no file hpcmm opens later may take
    their numbers, or a library's message would land in it) and :class:`_Steady` standard streams."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
    for name, fd in (("stdout", 1), ("stderr", 2)):
        stream = getattr(sys, name)
        if isinstance(stream, _Steady):
            continue
        if stream is None:  # closed when Python started: it gave up on the stream
            stream = open(fd, "w", buffering=1, encoding="utf-8", errors="backslashreplace",  # noqa: SIM115
                          closefd=False)
        else:
            with contextlib.suppress(AttributeError, ValueError, OSError):
                stream.reconfigure(errors="backslashreplace")  # a name that is not UTF-8 prints, escaped
        setattr(sys, name, _Steady(stream, fd))


def launch(argv: Sequence[str] | None = None, prepare: Callable[[], None] | None = None) -> int:
    """Run ``hpcmm.cli.main.main(argv)`` as the whole life of this process; return its exit status.

    Call it from the process's first lines (``python -m hpcmm``), before any
    other module starts a thread.  ``prepare`` runs once MPI has started,
    before the entry point (test fault injection).  The caller passes the
    status to :func:`sys.exit`; after a failure mpi4py then aborts the job.
    """
    _block_signals()
    _steady_streams()
    try:
        from mpi4py import MPI  # noqa: PLC0415 - MPI_Init: from here on the rank can abort

        _State.rank = MPI.COMM_WORLD.Get_rank()
        _State.mpi_ok = True
    except BaseException as exc:  # noqa: BLE001 - mpi4py missing or broken on this rank
        _State.mpi_started.set()
        return _fail(exc)
    _State.mpi_started.set()
    try:
        if prepare is not None:
            prepare()
        from .main import main  # noqa: PLC0415

        _main_started.set()
        status = main(None if argv is None else list(argv))
    except BaseException as exc:  # noqa: BLE001 - whatever leaves main ends the job
        return _fail(exc)
    if status and not isinstance(status, int):
        status = 1
    return int(status or 0)
