"""Errors that every rank agrees on.

An MPI program that raises on one rank and not on the others hangs: the others
wait in the next collective.  hpcmm therefore turns a local failure into the
same exception on all ranks (:func:`agree`), the way Heat combines error flags
with an ``allreduce``, and reserves ``MPI.Abort`` for failures that cannot be
made collective (see :mod:`hpcmm.cli.main`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

__all__ = [
    "HpcmmError",
    "InputError",
    "OutputError",
    "VerificationError",
    "agree",
    "collective",
    "collective_setup",
    "raised_everywhere",
]


class HpcmmError(Exception):
    """Base of hpcmm's errors; ``exit_code`` is the process exit status.

    ``agreed`` is true once every rank raises it (:func:`agree`): only then may
    the ranks tear down collectively.
    """

    exit_code = 1
    agreed = False


class InputError(HpcmmError, ValueError):
    """Bad input: a setting, a file or a size the run cannot use (exit status 2)."""

    exit_code = 2


class OutputError(HpcmmError):
    """The results file could not be written (a full disk, a failing file system): exit status 1."""

    exit_code = 1


class VerificationError(HpcmmError):
    """The product failed its check (exit status 1)."""

    exit_code = 1


def _describe(exc: BaseException) -> tuple[str, str, int]:
    if isinstance(exc, HpcmmError):
        return type(exc).__name__, str(exc), exc.exit_code
    # An unexpected exception: keep its type in the text so the cause stays visible.
    return "HpcmmError", f"{type(exc).__name__}: {exc}", 1


_KINDS = {cls.__name__: cls for cls in (HpcmmError, InputError, OutputError, VerificationError)}


def _job_rank(comm) -> int:
    """This process's rank in ``MPI.COMM_WORLD`` (0 without MPI)."""
    if comm is None:
        return 0
    from mpi4py import MPI  # noqa: PLC0415 - only where a communicator exists

    return MPI.COMM_WORLD.Get_rank()


def agree(comm, exc: BaseException | None) -> None:
    """Raise the same error on every rank if any rank passes one.

    Collective over ``comm``.  The error of the lowest failing rank wins; an
    error that only some ranks saw is re-raised everywhere with the rank that
    saw it named, unless all ranks saw the same message (bad input checked on
    every rank), which is then kept as it is.

    Parameters
    ----------
    comm : mpi4py.MPI.Comm or None
        Communicator; ``None`` means a single process.
    exc : BaseException or None
        This rank's failure, or ``None``.

    Raises
    ------
    HpcmmError
        On every rank, when any rank passed an error.
    """
    mine = None
    if exc is not None:
        # Name the process by its rank in the job (what mpiexec and the logs show), not in ``comm``;
        # an error already agreed on a smaller communicator keeps the rank it named.
        origin = getattr(exc, "origin", None)
        mine = (*_describe(exc), _job_rank(comm) if origin is None else origin, origin is not None)
    everyone = [mine] if comm is None else comm.allgather(mine)
    failed = [err for err in everyone if err is not None]
    if not failed:
        return
    kind, message, code, origin, named = failed[0]
    same_everywhere = len(failed) == len(everyone) and all(err[1] == message for err in failed)
    if not same_everywhere and len(everyone) > 1 and not named:
        message = f"{message} (raised by rank {origin})"
    error = _KINDS.get(kind, HpcmmError)(message)
    error.exit_code = code
    error.agreed = True
    if named or (not same_everywhere and len(everyone) > 1):
        error.origin = origin
    if exc is not None and error.__cause__ is None:
        raise error from exc
    raise error


def raised_everywhere(error: BaseException | None) -> bool:
    """Whether every rank leaves with ``error`` (none, or one from :func:`agree`).

    A collective tear-down (freeing communicators, closing IPC mappings) is safe
    only then: after an error of this rank alone the others wait in some
    collective, and a tear-down that waits for them would hang this rank too.
    """
    return error is None or (isinstance(error, HpcmmError) and error.agreed)


@contextlib.contextmanager
def collective(comm) -> Iterator[None]:
    """Run a block whose failure on any rank must fail it on all ranks.

    Every rank must enter and leave the block; the exit is a collective call.

    Examples
    --------
    >>> with collective(comm):          # doctest: +SKIP
    ...     check_output_path(path)      # may raise on rank 0 only
    """
    try:
        yield
    except Exception as exc:  # noqa: BLE001 - re-raised on every rank below
        agree(comm, exc)
        raise  # unreachable: agree always raises when given an error
    agree(comm, None)


@contextlib.contextmanager
def collective_setup(comm, close) -> Iterator[None]:
    """A :func:`collective` set-up step: a failure on any rank calls ``close()`` (which
    undoes what was built, collectively) on every rank, then raises there.

    Examples
    --------
    >>> with collective_setup(comm, self.close):   # doctest: +SKIP
    ...     self.C = backend.empty(shape)           # may fail on one rank only
    """
    try:
        with collective(comm):
            yield
    except Exception:
        close()
        raise
