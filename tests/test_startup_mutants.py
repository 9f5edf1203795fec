"""What a ``python -m hpcmm`` process's life promises, one behaviour a test, in pytest's own process.

Written against the mutants that mutation testing of hpcmm/cli/startup.py left without tests
(docs/mutation.md): the suite checks the process's life only in child processes
(tests/test_signals.py, tests/test_reliability*.py), which a mutant's run does not reach.  Here,
in-process: the rank a launcher announces, the exit status and the one line of every way out of
``launch`` (a status, an exception, ``SystemExit``, ``KeyboardInterrupt``, MPI that does not start),
the standard streams that a failing write cannot fail, and what a stop signal's thread says and
the status it ends with.  Where the process would end (``os._exit``, a signal to itself, MPI_Abort
at exit), the end is recorded instead; signals are never blocked or sent here.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import stat
import sys
import threading
import types

import mpi4py
import mpi4py.run
import pytest

from hpcmm.cli import main as main_module
from hpcmm.cli import startup
from hpcmm.cli.startup import launch, one_line, published, rank_from_environment

RANK_VARIABLES = ("PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID")


class Ended(Exception):
    """The process would have ended here, with ``status``."""

    def __init__(self, status):
        super().__init__(status)
        self.status = status


@pytest.fixture
def no_launcher(monkeypatch):
    for name in RANK_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def process(monkeypatch, no_launcher):
    """``launch``'s process state, fresh and restored; signals left alone; MPI_Abort's status recorded."""
    monkeypatch.setattr(startup._State, "rank", None)
    monkeypatch.setattr(startup._State, "mpi_ok", False)
    monkeypatch.setattr(startup._State, "mpi_started", threading.Event())
    monkeypatch.setattr(startup._State, "stopping", threading.Lock())
    monkeypatch.setattr(startup, "_main_started", threading.Event())
    monkeypatch.setattr(startup, "_block_signals", lambda: None)
    monkeypatch.setattr(sys, "stdout", sys.stdout)
    monkeypatch.setattr(sys, "stderr", sys.stderr)
    aborts = []
    monkeypatch.setattr(mpi4py.run, "set_abort_status", aborts.append)
    return aborts


def entry(monkeypatch, outcome):
    """``hpcmm.cli.main.main`` returning ``outcome``, or raising it; records its argv."""
    called = []

    def main(argv):
        called.append(argv)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    monkeypatch.setattr(main_module, "main", main)
    return called


# -- the rank a launcher announces ---------------------------------------------------------------


@pytest.mark.parametrize("name", RANK_VARIABLES)
def test_each_launchers_rank_variable_is_read(monkeypatch, no_launcher, name):
    monkeypatch.setenv(name, "7")
    assert rank_from_environment() == 7


def test_the_first_launchers_variable_wins_and_only_digits_count(monkeypatch, no_launcher):
    assert rank_from_environment() is None
    monkeypatch.setenv("SLURM_PROCID", "5")
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "-1")
    monkeypatch.setenv("PMIX_RANK", "")
    assert rank_from_environment() == 5
    monkeypatch.setenv("PMIX_RANK", "2")
    monkeypatch.setenv("PMI_RANK", "x1")
    assert rank_from_environment() == 2


def test_one_line_folds_any_text():
    assert one_line("HDF5 says:\n  no such file\tat all ") == "HDF5 says: no such file at all"
    assert one_line(KeyError("a\nb")) == "'a\\nb'"


def test_the_published_results_file_is_the_last_one(monkeypatch):
    monkeypatch.delitem(sys.modules, "hpcmm.io.h5io", raising=False)
    assert published() is None
    for files, last in (([], None), (["a.h5", "b.h5"], "b.h5")):
        monkeypatch.setitem(sys.modules, "hpcmm.io.h5io", types.SimpleNamespace(PUBLISHED=files))
        assert published() == last
    monkeypatch.setitem(sys.modules, "hpcmm.io.h5io", types.SimpleNamespace())
    assert published() is None


# -- launch: the status and the last line of every way out ------------------------------------------


@pytest.mark.parametrize("returned, status", [(0, 0), (None, 0), (3, 3), ("failed", 1), (True, 1)],
                         ids=["zero", "none", "three", "text", "true"])
def test_the_entry_points_status_is_the_processs(process, monkeypatch, capfd, returned, status):
    called = entry(monkeypatch, returned)
    order = []
    assert launch(["--m", "8"], prepare=lambda: order.append(list(called))) == status
    assert called == [["--m", "8"]] and order == [[]]  # prepare ran first
    assert process == [] and capfd.readouterr().err == ""
    assert startup._State.mpi_ok and startup._State.rank == 0
    assert startup._State.mpi_started.is_set() and startup._main_started.is_set()


def test_no_arguments_reach_the_entry_point_as_none(process, monkeypatch):
    called = entry(monkeypatch, 0)
    assert launch() == 0 and called == [None]
    assert launch(("--k", "2")) == 0 and called[-1] == ["--k", "2"]


@pytest.mark.parametrize("raised, status, cause", [
    (ValueError("bad\n value"), 1, "ValueError: bad value"),
    (ValueError(), 1, "ValueError"),
    (SystemExit(3), 3, "exited with status 3 while the other ranks went on"),
    (SystemExit("text"), 1, "exited with status 1 while the other ranks went on"),
    (SystemExit(None), 1, "exited with status 0 while the other ranks went on"),
    (KeyboardInterrupt(), 130, "interrupted (KeyboardInterrupt)"),
], ids=["error", "error-without-text", "exit-3", "exit-text", "exit-none", "keyboard-interrupt"])
def test_whatever_leaves_the_entry_point_aborts_the_job_with_one_line(process, monkeypatch, capfd, raised, status,
                                                                      cause):
    entry(monkeypatch, raised)
    assert launch([]) == status
    assert process == [status]  # MPI_Abort with this status at exit
    assert capfd.readouterr().err == f"hpcmm: rank 0: {cause}; aborting all ranks\n"


def test_a_line_that_utf_8_cannot_encode_is_written_with_replacements(process, monkeypatch, capfd):
    """A name read from the file system may hold bytes that are not UTF-8 (lone surrogates in Python)."""
    entry(monkeypatch, OSError("cannot open out\udcff.h5"))
    assert launch([]) == 1
    assert capfd.readouterr().err == "hpcmm: rank 0: OSError: cannot open out?.h5; aborting all ranks\n"


def test_a_failure_in_prepare_aborts_too(process, monkeypatch, capfd):
    called = entry(monkeypatch, 0)

    def prepare():
        raise OSError("injected")

    assert launch([], prepare=prepare) == 1 and called == [] and process == [1]
    assert capfd.readouterr().err == "hpcmm: rank 0: OSError: injected; aborting all ranks\n"
    assert not startup._main_started.is_set()


def test_python_dev_mode_prints_the_traceback_too(process, monkeypatch, capfd):
    entry(monkeypatch, LookupError("where"))
    monkeypatch.setattr(sys, "flags", types.SimpleNamespace(dev_mode=True))
    assert launch([]) == 1
    err = capfd.readouterr().err
    assert err.startswith("hpcmm: rank 0: LookupError: where; aborting all ranks\n")
    assert "Traceback (most recent call last)" in err and err.rstrip().endswith("LookupError: where")


@pytest.fixture
def mpi_fails(monkeypatch):
    """``from mpi4py import MPI`` fails (mpi4py broken on this rank)."""
    monkeypatch.delattr(mpi4py, "MPI", raising=False)
    monkeypatch.setitem(sys.modules, "mpi4py.MPI", None)
    try:
        from mpi4py import MPI  # noqa: F401, PLC0415
    except ImportError as exc:
        return f"{type(exc).__name__}: {exc}"
    raise AssertionError("MPI still imports")


def test_mpi_that_does_not_start_ends_without_a_launcher(process, monkeypatch, capfd, mpi_fails):
    called = entry(monkeypatch, 0)
    died = []
    monkeypatch.setattr(startup, "_die_by", died.append)
    assert launch([]) == 1 and called == [] and process == [] and died == []
    assert capfd.readouterr().err == f"hpcmm: {mpi_fails}; aborting all ranks\n"
    assert startup._State.mpi_started.is_set() and not startup._State.mpi_ok


def test_mpi_that_does_not_start_under_a_launcher_dies_by_a_signal(process, monkeypatch, capfd, mpi_fails):
    monkeypatch.setenv("PMI_RANK", "3")
    died = []
    monkeypatch.setattr(startup, "_die_by", died.append)
    assert launch([]) == 1 and died == [signal.SIGABRT]
    assert capfd.readouterr().err == f"hpcmm: rank 3: {mpi_fails}; aborting all ranks\n"


# -- standard streams -----------------------------------------------------------------------


def _is_dev_null(fd):
    here, null = os.fstat(fd), os.stat(os.devnull)
    return stat.S_ISCHR(here.st_mode) and here.st_rdev == null.st_rdev


@pytest.fixture
def broken_pipe():
    """A text stream on a pipe whose reader has left."""
    read, write = os.pipe()
    os.close(read)
    stream = open(write, "w", buffering=1, encoding="utf-8")  # noqa: SIM115
    yield stream, write
    with contextlib.suppress(OSError):  # what is still buffered has nowhere to go
        stream.close()


def test_a_write_to_a_pipe_whose_reader_left_goes_to_dev_null(broken_pipe):
    stream, fd = broken_pipe
    steady = startup._Steady(stream, fd)
    assert steady.write("summary\n") == 8
    assert _is_dev_null(fd)
    assert steady.write("more\n") == 5
    steady.writelines(["a\n", "b\n"])
    steady.flush()
    assert steady.fileno() == fd and steady.encoding == "utf-8"  # the rest is the stream's


def test_a_flush_that_fails_goes_to_dev_null(broken_pipe):
    stream, fd = broken_pipe
    stream.reconfigure(line_buffering=False)
    steady = startup._Steady(stream, fd)
    assert steady.write("kept in the buffer") == 18
    steady.flush()
    assert _is_dev_null(fd)


def test_a_closed_stream_is_not_an_error(tmp_path):
    with open(tmp_path / "f", "w") as stream:
        fd = os.dup(stream.fileno())
    steady = startup._Steady(stream, fd)
    try:
        assert steady.write("late") == 4
        steady.flush()
        assert _is_dev_null(fd)
    finally:
        os.close(fd)


def test_writelines_writes_every_line(tmp_path):
    buffer = io.StringIO()
    steady = startup._Steady(buffer, -1)
    steady.writelines(["one\n", "two\n"])
    assert buffer.getvalue() == "one\ntwo\n"


def test_text_the_stream_cannot_encode_is_still_an_error(tmp_path):
    with open(tmp_path / "f", "w", encoding="ascii") as stream:
        steady = startup._Steady(stream, stream.fileno())
        with pytest.raises(UnicodeEncodeError):
            steady.write("é")
            steady.flush()


def test_the_standard_streams_become_steady_once(process, monkeypatch):
    out, err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8"), io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    startup._steady_streams()
    assert isinstance(sys.stdout, startup._Steady) and isinstance(sys.stderr, startup._Steady)
    assert (sys.stdout._stream, sys.stdout._fd, sys.stderr._stream, sys.stderr._fd) == (out, 1, err, 2)
    assert out.errors == err.errors == "backslashreplace"  # a name that is not UTF-8 prints, escaped
    first = sys.stdout
    startup._steady_streams()
    assert sys.stdout is first


def test_a_stream_python_gave_up_on_is_opened_again(process, monkeypatch):
    monkeypatch.setattr(sys, "stdout", None)
    startup._steady_streams()
    stream = sys.stdout._stream
    try:
        assert sys.stdout._fd == 1 and stream.fileno() == 1 and stream.line_buffering
        assert (stream.encoding, stream.errors) == ("utf-8", "backslashreplace") and not stream.buffer.raw.closefd
    finally:
        stream.close()  # closefd=False: descriptor 1 stays open
    assert os.fstat(1)


@pytest.mark.parametrize("fd", [0, 1, 2], ids=["stdin", "stdout", "stderr"])
def test_a_closed_standard_descriptor_gets_dev_null(process, fd):
    """No file opened later may take its number (a library's message would land in it)."""
    saved = os.dup(fd)
    try:
        os.close(fd)
        startup._steady_streams()
        assert _is_dev_null(fd)
    finally:
        os.dup2(saved, fd)
        os.close(saved)


def test_standard_error_becomes_steady_where_standard_output_already_is(process, monkeypatch):
    steady = startup._Steady(io.StringIO(), 1)
    monkeypatch.setattr(sys, "stdout", steady)
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    startup._steady_streams()
    assert sys.stdout is steady and isinstance(sys.stderr, startup._Steady) and sys.stderr._fd == 2


def test_the_reopened_standard_output_writes_to_descriptor_1(process, monkeypatch, capfd):
    monkeypatch.setattr(sys, "stdout", None)
    startup._steady_streams()
    try:
        print("the summary")
        sys.stdout.flush()
        assert capfd.readouterr().out == "the summary\n"
    finally:
        sys.stdout._stream.close()


def test_a_stream_that_cannot_be_reconfigured_is_kept(process, monkeypatch, broken_pipe):
    """No ``reconfigure`` (AttributeError), a closed stream (ValueError), a flush that fails (OSError)."""
    closed = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    closed.close()
    pending, _ = broken_pipe
    pending.reconfigure(line_buffering=False)
    pending.write("not yet written")  # reconfigure flushes it first, into the pipe whose reader left
    for stream in (io.StringIO(), closed, pending):
        monkeypatch.setattr(sys, "stdout", stream)
        startup._steady_streams()
        assert isinstance(sys.stdout, startup._Steady) and sys.stdout._stream is stream


# -- a stop signal's thread -------------------------------------------------------------------


@pytest.fixture
def stopping(process, monkeypatch):
    """``_stop`` with the process's end, sleeps and clean-up recorded; MPI started."""
    record = types.SimpleNamespace(sleeps=[], removed=0, died=[])
    startup._State.mpi_started.set()

    def exit_now(status):
        raise Ended(status)

    def die_by(signum):
        record.died.append(signum)
        raise Ended(128 + signum)

    def remove_pending():
        record.removed += 1

    monkeypatch.setattr(startup.os, "_exit", exit_now)
    monkeypatch.setattr(startup.os, "getppid", lambda: 4242)
    monkeypatch.setattr(startup, "_die_by", die_by)
    monkeypatch.setattr(startup.time, "sleep", record.sleeps.append)
    monkeypatch.setitem(sys.modules, "hpcmm.io.h5io", types.SimpleNamespace(PUBLISHED=[],
                                                                           remove_pending=remove_pending))
    return record


def _stopped(signum, sender):
    with pytest.raises(Ended) as ended:
        startup._stop(signum, sender)
    return ended.value.status


@pytest.mark.parametrize("sender", [0, 4242], ids=["terminal", "launcher"])
def test_a_signal_to_every_rank_is_reported_by_rank_0_alone(stopping, monkeypatch, capfd, sender):
    monkeypatch.setattr(startup._State, "rank", 0)
    monkeypatch.setattr(startup._State, "mpi_ok", True)
    startup._main_started.set()
    assert _stopped(signal.SIGTERM, sender) == 128 + signal.SIGTERM
    assert capfd.readouterr().err == "hpcmm: stopped by SIGTERM; no results written\n"
    assert stopping.sleeps == [] and stopping.removed == 1


def test_the_other_ranks_wait_for_the_launcher_silently(stopping, monkeypatch, capfd):
    monkeypatch.setattr(startup._State, "rank", 2)
    monkeypatch.setattr(startup._State, "mpi_ok", True)
    assert _stopped(signal.SIGINT, 4242) == 128 + signal.SIGINT
    assert capfd.readouterr().err == "" and stopping.sleeps == [startup.SILENT_RANK_WAIT]
    assert stopping.removed == 1


def test_a_signal_to_one_rank_is_reported_by_that_rank(stopping, monkeypatch, capfd):
    monkeypatch.setattr(startup._State, "rank", 2)
    monkeypatch.setattr(startup._State, "mpi_ok", True)
    startup._main_started.set()
    sys.modules["hpcmm.io.h5io"].PUBLISHED.append("out.h5")
    assert _stopped(signal.SIGINT, 999) == 130
    assert capfd.readouterr().err == "hpcmm: rank 2: stopped by SIGINT; the results were written to out.h5\n"
    assert stopping.sleeps == []


def test_a_signal_during_start_up_says_so(stopping, monkeypatch, capfd):
    monkeypatch.setattr(startup._State, "mpi_ok", True)
    monkeypatch.setenv("PMI_RANK", "0")
    assert _stopped(signal.SIGTERM, 4242) == 143
    assert capfd.readouterr().err == "hpcmm: stopped by SIGTERM during start-up; no results written\n"


def test_a_signal_before_mpi_started_dies_by_it(stopping, monkeypatch, capfd):
    monkeypatch.setitem(sys.modules, "hpcmm.io.h5io", None)  # h5io never imported: nothing to remove
    assert _stopped(signal.SIGINT, 999) == 130 and stopping.died == [signal.SIGINT]
    assert capfd.readouterr().err == "hpcmm: stopped by SIGINT during start-up; no results written\n"


def test_a_signal_waits_for_mpi_to_start(stopping, monkeypatch, capfd):
    waited = []

    class Started:
        def wait(self, seconds):
            waited.append(seconds)
            return True

    monkeypatch.setattr(startup._State, "mpi_started", Started())
    monkeypatch.setattr(startup._State, "mpi_ok", True)
    assert _stopped(signal.SIGTERM, 999) == 143 and waited == [startup.MPI_START_WAIT]


def test_a_second_signal_waits_for_the_first(stopping, monkeypatch):
    monkeypatch.setattr(startup._State, "mpi_ok", True)
    _stopped(signal.SIGTERM, 999)
    assert startup._State.stopping.locked()  # held until the process ends
