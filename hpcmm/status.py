"""The status file (``--status-file PATH``): how a batch script learns why hpcmm ended.

A launcher's exit status says little: 1 is a failed check, an unexpected error,
or a Python without hpcmm; 2 is bad input or a shell that could not find a
program.  With ``--status-file PATH`` rank 0 writes a few ``key=value`` lines,
first when hpcmm has started and again when it ends::

    state=finished
    exit=2
    reason=bad input: --m=0: expected an integer >= 1
    ranks=4
    command=run

``state=running`` once the job is over means hpcmm started but did not end by
itself (an unexpected error on some rank aborted all ranks, a signal, a time
limit); no file at all means hpcmm never started (no Python, no hpcmm, a
launcher that failed).  ``ranks`` is the size of the MPI job as rank 0 saw it:
a launcher whose process-management interface does not match the MPI library
starts every process as a 1-rank job of its own, and each then writes
``ranks=1``.

Each write is atomic (a temporary file in the same folder, then ``rename``),
so a reader sees the old content or the new, never half of it.  The option is
read from the arguments before they are parsed, so that a bad argument is
recorded too; it must be spelled out (``--status-file PATH`` or
``--status-file=PATH``).
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Callable

__all__ = ["note", "recorded", "status_path", "write_status"]

OPTION = "--status-file"

#: What each exit status means when no message was noted.
MEANINGS = {0: "done", 1: "failed", 2: "bad input"}

#: The message of the error hpcmm is ending with (see :func:`note`).
_NOTED: list[str] = []


def status_path(argv: list[str]) -> str | None:
    """The path given with ``--status-file`` in ``argv`` (the last one wins), else ``None``."""
    path = None
    for i, arg in enumerate(argv):
        if arg == "--":
            break
        if arg == OPTION and i + 1 < len(argv):
            path = argv[i + 1]
        elif arg.startswith(OPTION + "="):
            path = arg[len(OPTION) + 1:]
    return path or None


def write_status(path: str, fields: dict[str, object]) -> None:
    """Replace ``path`` with ``key=value`` lines, atomically.

    Raises
    ------
    OSError
        When the folder cannot take the file.
    """
    text = "".join(f"{key}={' '.join(str(value).split())}\n" for key, value in fields.items())
    # Several writers may race (1-rank jobs started by a mismatched launcher): a
    # temporary name of each writer's own, and rename, which replaces atomically.
    tmp = os.path.join(os.path.dirname(os.path.abspath(path)),
                       f".{os.path.basename(path)}.{socket.gethostname()}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def note(message: str) -> None:
    """Remember the message of the error hpcmm ends with, for the status file's ``reason``."""
    _NOTED[:] = [message]


def _reason(code: int) -> str:
    meaning = MEANINGS.get(code, "failed")
    if not _NOTED:
        return meaning
    message = _NOTED[0]
    # Verification messages say so themselves ("verification failed: ...").
    return message if code != 2 else f"{meaning}: {message}"


def recorded(argv: list[str], body: Callable[[list[str]], int]) -> int:
    """Run ``body(argv)`` and record how it ended in ``--status-file``, if given.

    Rank 0 of ``MPI.COMM_WORLD`` writes; a status file that cannot be written
    is reported on stderr and leaves the exit status alone.
    """
    path = status_path(argv)
    if path is None:
        return body(argv)
    from mpi4py import MPI  # noqa: PLC0415

    world = MPI.COMM_WORLD
    command = next((a for a in argv if not a.startswith("-")), "run")
    command = command if command in ("run", "info", "bench", "report") else "run"
    writing = world.Get_rank() == 0

    def record(fields: dict[str, object]) -> bool:
        try:
            write_status(path, {**fields, "ranks": world.Get_size(), "command": command})
            return True
        except OSError as exc:
            sys.stderr.write(f"hpcmm: warning: {OPTION}={path}: cannot write it: {exc.strerror or exc}\n")
            return False

    if writing:
        writing = record({"state": "running"})
    _NOTED.clear()
    code = 1
    try:
        code = body(argv)
    except SystemExit as exc:  # --help and --version end here, and so may argparse
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        raise
    finally:
        if writing:
            record({"state": "finished", "exit": code, "reason": _reason(code)})
    return code
