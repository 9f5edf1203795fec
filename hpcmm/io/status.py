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

The status file is hpcmm's bookkeeping, never the user's data: before the first
write (:func:`start`, once the command line is parsed, before any work) the
path is refused as bad input (exit 2, nothing written) when it names a file
that exists and is not an hpcmm status file (an input, an earlier results file,
a note), anything but a regular file (a FIFO, a device, a directory), a
symbolic link that leads nowhere, a path that another argument names (``--out``,
an input, in any spelling), a name that is not UTF-8, or a folder that takes
no new file.  A symbolic link to a status file is followed: the link stays.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import socket
import stat
import sys
from collections.abc import Callable

from ..errors import InputError

__all__ = ["check_status_path", "is_status_text", "note", "recorded", "start", "status_path", "write_status"]

OPTION = "--status-file"

#: What each exit status means when no message was noted.
MEANINGS = {0: "done", 1: "failed", 2: "bad input"}

#: The message of the error hpcmm is ending with (see :func:`note`).
_NOTED: list[str] = []

#: The keys a status file holds, and the states it can be in.
KEYS = ("state", "exit", "reason", "ranks", "command")
STATES = ("running", "finished")

#: The longest status file hpcmm wrote: a longer file is not one of its own (and is not read whole).
MOST_BYTES = 64 << 10

#: The subcommands a status file names.
COMMANDS = ("run", "info", "bench", "report", "model")


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


def is_status_text(data: bytes) -> bool:
    """Whether ``data`` is what :func:`write_status` writes (or nothing at all).

    >>> is_status_text(b"state=finished\\nexit=0\\nreason=done\\n"), is_status_text(b"")
    (True, True)
    >>> is_status_text(b"\\x93NUMPY"), is_status_text(b"state=finished\\nnotes\\n")
    (False, False)
    """
    if not data:
        return True  # an empty file (``touch``, ``mktemp``) holds nothing to lose
    try:
        lines = data.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        return False
    fields = dict(line.split("=", 1) for line in lines if "=" in line)
    return (len(fields) == len(lines) and set(fields) <= set(KEYS) and lines[0].startswith("state=")
            and fields["state"] in STATES)


def _escaped(path: str) -> str:
    """``path`` as it can be printed: bytes that are not UTF-8 as ``\\xNN``."""
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _read_head(path: str) -> bytes:
    """At most :data:`MOST_BYTES` + 1 bytes of a regular file, never blocking (``O_NONBLOCK``)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # replaced since it was looked at
            raise IsADirectoryError(f"{path}: not a regular file")
        return os.read(fd, MOST_BYTES + 1)
    finally:
        os.close(fd)


def _named_elsewhere(path: str, argv: list[str]) -> tuple[str, str] | None:
    """``(flag, value)`` of another argument that names ``path`` (in any spelling), if any."""
    mine = {os.path.abspath(path), os.path.realpath(path)}
    skip = False
    for i, arg in enumerate(argv):
        if skip or arg == OPTION or arg.startswith(OPTION + "="):
            skip = arg == OPTION
            continue
        if arg.startswith("--") and "=" in arg:
            flag, value = arg.split("=", 1)
        else:
            flag, value = (argv[i - 1] if i and argv[i - 1].startswith("-") else "argument"), arg
        for candidate in {value, re.sub(r"(\.(?:h5|hdf5|hdf)):[^:]*$", r"\1", value)}:
            if not candidate or candidate.startswith("-"):
                continue
            if {os.path.abspath(candidate), os.path.realpath(candidate)} & mine:
                return flag, value
            with contextlib.suppress(OSError, ValueError):
                if os.path.samefile(candidate, path):
                    return flag, value
    return None


def check_status_path(path: str, argv: list[str] = ()) -> str:
    """The file that ``--status-file=path`` writes (a symbolic link followed); refuse it as bad input
    unless it is hpcmm's own status file or a new one in a folder that takes files.

    ``argv`` is the whole command line: a path another argument names (``--out``, an input, a
    plot) is never the status file, however spelled.

    Raises
    ------
    InputError
        Naming ``--status-file`` and what is wrong; nothing was written.
    """
    shown = f"{OPTION}={_escaped(path)}"
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        raise InputError(f"{shown}: the name is not UTF-8 (hpcmm writes every name it records in UTF-8)") from None
    if os.path.islink(path) and not os.path.exists(path):
        raise InputError(f"{shown}: a symbolic link to {_escaped(os.readlink(path))}, which does not exist")
    target = os.path.realpath(path)
    elsewhere = _named_elsewhere(path, list(argv))
    if elsewhere is not None:
        other = (f"the argument {_escaped(elsewhere[1])}" if elsewhere[0] == "argument"
                 else f"{elsewhere[0]}={_escaped(elsewhere[1])}")
        raise InputError(f"{shown} is also {other}: the status file must be a file of its own")
    directory = os.path.dirname(target)
    if not os.path.isdir(directory):
        raise InputError(f"{shown}: directory {_escaped(directory)} does not exist")
    try:
        info = os.stat(target)
    except FileNotFoundError:
        info = None
    except OSError as exc:
        raise InputError(f"{shown}: cannot look at it ({exc.strerror})") from None
    if info is not None:
        if stat.S_ISDIR(info.st_mode):
            raise InputError(f"{shown}: is a directory")
        if not stat.S_ISREG(info.st_mode):
            raise InputError(f"{shown}: not a regular file (hpcmm replaces only its own status files)")
        try:
            data = _read_head(target)
        except OSError as exc:
            raise InputError(f"{shown}: cannot read it ({exc.strerror or exc})") from None
        if len(data) > MOST_BYTES or not is_status_text(data):
            raise InputError(f"{shown}: exists and is not an hpcmm status file (hpcmm replaces only its "
                             "own status files)")
    return target


def write_status(path: str, fields: dict[str, object]) -> None:
    """Replace ``path`` with ``key=value`` lines, atomically.

    Raises
    ------
    OSError
        When the folder cannot take the file.
    """
    text = "".join(f"{key}={' '.join(str(value).split())}\n" for key, value in fields.items())
    # Several writers may race (1-rank jobs started by a mismatched launcher): a
    # temporary name of each writer's own, never an existing file, and rename,
    # which replaces atomically.
    tmp = os.path.join(os.path.dirname(os.path.abspath(path)),
                       f".{os.path.basename(path)}.{socket.gethostname()}.{os.getpid()}."
                       f"{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with open(fd, "wb") as fh:
            fh.write(text.encode("utf-8", "backslashreplace"))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
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


class _Record:
    """The status file of this process's command (set by :func:`recorded`)."""

    path: str | None = None  # --status-file as given
    argv: tuple[str, ...] = ()
    target: str | None = None  # the file written, once :func:`start` accepted it
    refused = False  # start() refused it: never written
    write = None  # rank 0: record(fields) -> bool


def start() -> None:
    """Rank 0, once the command line is parsed and before any work: accept ``--status-file`` and
    write ``state=running``; elsewhere, or without the option, nothing.

    Call it inside a :func:`~hpcmm.errors.collective` block: a refusal is every rank's.

    Raises
    ------
    InputError
        The path is refused (:func:`check_status_path`) or its folder takes no file.
    """
    if _Record.write is None or _Record.path is None or _Record.target is not None:
        return
    try:
        _Record.target = check_status_path(_Record.path, _Record.argv)
    except InputError:
        _Record.refused = True
        raise
    try:
        write_status(_Record.target, _Record.write({"state": "running"}))
    except OSError as exc:
        _Record.target, _Record.refused = None, True
        raise InputError(f"{OPTION}={_escaped(_Record.path)}: cannot write it ({exc.strerror or exc})") from None


def recorded(argv: list[str], body: Callable[[list[str]], int]) -> int:
    """Run ``body(argv)`` and record how it ended in ``--status-file``, if given.

    Rank 0 of ``MPI.COMM_WORLD`` writes: ``state=running`` when ``body`` calls
    :func:`start`, and how it ended when it returns.  A path :func:`start`
    refused is never written; where ``body`` ended before it (an argument it
    could not parse), the path is checked then.  A status file that cannot be
    written at the end is reported on stderr and leaves the exit status alone.
    """
    path = status_path(argv)
    if path is None:
        return body(argv)
    from mpi4py import MPI  # noqa: PLC0415

    world = MPI.COMM_WORLD
    command = next((a for a in argv if not a.startswith("-")), "run")
    command = command if command in COMMANDS else "run"

    def fields(values: dict[str, object]) -> dict[str, object]:
        return {**values, "ranks": world.Get_size(), "command": command}

    _Record.path, _Record.argv, _Record.target, _Record.refused = path, tuple(argv), None, False
    _Record.write = fields if world.Get_rank() == 0 else None
    _NOTED.clear()
    code = 1
    try:
        code = body(argv)
    except SystemExit as exc:  # --help and --version end here, and so may argparse
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        raise
    finally:
        if _Record.write is not None and not _Record.refused:
            _finish(path, argv, fields({"state": "finished", "exit": code, "reason": _reason(code)}))
        _Record.write = None
    return code


def _finish(path: str, argv: list[str], values: dict[str, object]) -> None:
    target = _Record.target
    if target is None:  # the command ended before start(): the path is looked at now
        try:
            target = check_status_path(path, argv)
        except InputError:
            return  # hpcmm ends with its own error already; a path it refuses is left alone
    try:
        write_status(target, values)
    except OSError as exc:
        sys.stderr.write(f"hpcmm: warning: {OPTION}={_escaped(path)}: cannot write it: {exc.strerror or exc}\n")
