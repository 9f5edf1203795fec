"""What ``--status-file`` promises a batch script, one behaviour a test, in one process.

Written against the mutants that mutation testing of hpcmm/io/status.py left alive
(docs/mutation.md); the end-to-end cases under ``mpiexec`` (tests/test_exit_status.py,
tests/test_reliability_inputs.py) are not run by it.  Pinned: which paths are refused and with
which message (a name that is not UTF-8, a dangling link, a path another argument names in any
spelling, a missing folder, a directory, a FIFO, a file that is not a status file), which
files are taken as status files, what the file says at the start and at the end (state, exit,
reason, ranks, command) and that only rank 0 writes it.
"""

from __future__ import annotations

import os

import pytest
from mpi4py import MPI

from hpcmm.io import status
from hpcmm.errors import InputError

GOOD = b"state=finished\nexit=0\nreason=done\nranks=2\ncommand=run\n"


def read_status(path) -> dict[str, str]:
    lines = path.read_text().splitlines()
    assert all("=" in line for line in lines), lines
    return dict(line.split("=", 1) for line in lines)


def _refused(path, argv=()) -> str:
    with pytest.raises(InputError) as caught:
        status.check_status_path(str(path), list(argv))
    return str(caught.value)


# -- what a status file is ---------------------------------------------------------------


@pytest.mark.parametrize("data", [b"", GOOD, b"state=running\n", b"state=running\nranks=4\ncommand=bench\n",
                                  b"state=finished\nreason=bad input: a=b\n"],
                         ids=["empty", "finished", "running", "running-bench", "reason-with-equals"])
def test_status_texts(data):
    assert status.is_status_text(data)


@pytest.mark.parametrize("data", [
    b"\x93NUMPY\x01\x00", b"state=finished\nnotes\n", b"exit=0\nstate=finished\n", b"state=done\n",
    b"state=finished\nuser=me\n", b"state=finished\n\xff\n", b"\n", b"# state=running\n",
], ids=["npy", "a-line-without-equals", "state-not-first", "unknown-state", "unknown-key", "not-utf8", "blank-line",
        "comment"])
def test_other_texts(data):
    assert not status.is_status_text(data)


# -- the path given --------------------------------------------------------------------------


@pytest.mark.parametrize("argv, path", [
    (["--status-file", ""], None),
    (["--status-file-x=a"], None),
    (["--status-files", "a"], None),
    (["x", "--status-file=a=b"], "a=b"),
    (["--status-file=a", "--", "--status-file=b"], "a"),
])
def test_status_path_spellings(argv, path):
    assert status.status_path(argv) == path


def test_a_new_file_in_a_folder_is_taken(tmp_path):
    assert status.check_status_path(str(tmp_path / "job.status")) == str(tmp_path / "job.status")
    assert list(tmp_path.iterdir()) == []


def test_an_empty_file_and_an_own_file_are_taken(tmp_path):
    (tmp_path / "empty").write_bytes(b"")
    (tmp_path / "old").write_bytes(GOOD)
    assert status.check_status_path(str(tmp_path / "empty")) == str(tmp_path / "empty")
    assert status.check_status_path(str(tmp_path / "old")) == str(tmp_path / "old")
    assert (tmp_path / "old").read_bytes() == GOOD


def test_a_link_to_a_status_file_is_followed(tmp_path):
    (tmp_path / "old").write_bytes(GOOD)
    os.symlink(tmp_path / "old", tmp_path / "link")
    assert status.check_status_path(str(tmp_path / "link")) == str(tmp_path / "old")


def test_a_name_that_is_not_utf8_is_refused(tmp_path):
    path = os.fsdecode(os.fsencode(str(tmp_path)) + b"/s\xff")
    assert _refused(path) == (f"--status-file={tmp_path}/s\\xff: the name is not UTF-8 (hpcmm writes every name "
                              "it records in UTF-8)")


def test_a_dangling_link_is_refused(tmp_path):
    os.symlink("nowhere", tmp_path / "s")
    assert _refused(tmp_path / "s") == f"--status-file={tmp_path}/s: a symbolic link to nowhere, which does not exist"


def test_a_missing_folder_is_refused(tmp_path):
    assert _refused(tmp_path / "no" / "s") == f"--status-file={tmp_path}/no/s: directory {tmp_path}/no does not exist"


def test_a_directory_is_refused(tmp_path):
    assert _refused(tmp_path) == f"--status-file={tmp_path}: is a directory"


def test_a_fifo_is_refused_without_opening_it(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    assert _refused(tmp_path / "fifo") == (f"--status-file={tmp_path}/fifo: not a regular file (hpcmm replaces "
                                           "only its own status files)")


def test_a_name_too_long_to_look_at_is_refused(tmp_path):
    path = tmp_path / ("s" * 300)
    assert _refused(path) == f"--status-file={path}: cannot look at it (File name too long)"


@pytest.mark.parametrize("data", [b"results\n", b"state=finished\nreason=" + b"x" * (64 << 10) + b"\n"],
                         ids=["a-note", "a-status-text-too-long"])
def test_a_file_of_the_users_is_refused(tmp_path, data):
    (tmp_path / "note").write_bytes(data)
    assert _refused(tmp_path / "note") == (f"--status-file={tmp_path}/note: exists and is not an hpcmm status file "
                                           "(hpcmm replaces only its own status files)")
    assert (tmp_path / "note").read_bytes() == data


def test_the_longest_status_file_is_still_one(tmp_path):
    data = (b"state=finished\nreason=" + b"x" * (64 << 10))[: (64 << 10) - 1] + b"\n"
    (tmp_path / "s").write_bytes(data)
    assert len((tmp_path / "s").read_bytes()) == 64 << 10
    assert status.check_status_path(str(tmp_path / "s")) == str(tmp_path / "s")


# -- a path another argument names -------------------------------------------------------------


def test_the_out_file_in_another_spelling_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    path = str(tmp_path / "sub" / ".." / "r.h5")
    message = _refused(path, ["run", "--out=r.h5", "--status-file", path])
    assert message == f"--status-file={path} is also --out=r.h5: the status file must be a file of its own"


def test_an_input_given_as_a_separate_value_is_refused(tmp_path):
    (tmp_path / "a.npy").write_bytes(b"\x93NUMPY")
    path = str(tmp_path / "a.npy")
    assert _refused(path, ["run", "--a", path, "--status-file", path]).endswith(
        f" is also --a={path}: the status file must be a file of its own")


def test_a_positional_argument_is_named_as_such(tmp_path):
    (tmp_path / "r.h5").write_bytes(b"\x89HDF")
    path = str(tmp_path / "r.h5")
    assert _refused(path, ["report", path, f"--status-file={path}"]) == (
        f"--status-file={path} is also the argument {path}: the status file must be a file of its own")


def test_an_hdf5_dataset_of_the_file_is_the_file(tmp_path):
    path = str(tmp_path / "a.h5")
    assert "is also --a=" in _refused(path, ["run", f"--a={path}:/A", "--status-file", path])


def test_a_hard_link_and_a_symbolic_link_to_an_input_are_refused(tmp_path):
    (tmp_path / "a.npy").write_bytes(b"")
    os.link(tmp_path / "a.npy", tmp_path / "hard")
    os.symlink(tmp_path / "a.npy", tmp_path / "soft")
    for name in ("hard", "soft"):
        path = str(tmp_path / name)
        assert f"is also --a={tmp_path}/a.npy" in _refused(path, ["--a", str(tmp_path / "a.npy"),
                                                                 "--status-file", path])


def test_other_arguments_and_the_option_itself_do_not_count(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = str(tmp_path / "s")
    argv = ["run", "--status-file", path, "--status-file=s", "--m", "4", "--out", "r.h5", "-", "--x=", "--dry"]
    assert status.check_status_path(path, argv) == path


# -- the file's content, start and end -----------------------------------------------------------


def test_write_status_keeps_names_that_are_not_utf8_readable(tmp_path):
    path = tmp_path / "s"
    status.write_status(str(path), {"state": "finished", "reason": "bad input: --a=x\udcff.npy"})
    assert path.read_bytes() == b"state=finished\nreason=bad input: --a=x\\udcff.npy\n"
    assert os.stat(path).st_mode & 0o777 == 0o666 & ~_umask()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_a_failed_write_leaves_no_temporary(tmp_path):
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "x").write_text("")  # a directory that is not empty: rename cannot replace it
    with pytest.raises(OSError):
        status.write_status(str(tmp_path / "s"), {"state": "running"})
    assert [p.name for p in tmp_path.iterdir()] == ["s"]


@pytest.mark.parametrize("code, noted, reason", [
    (0, None, "done"), (1, None, "failed"), (2, None, "bad input"), (3, None, "failed"), (130, None, "failed"),
    (1, "verification failed: residual 1e-3", "verification failed: residual 1e-3"),
    (2, "--m=0: expected an integer >= 1", "bad input: --m=0: expected an integer >= 1"),
], ids=["done", "failed", "bad-input", "3", "130", "verification-noted", "bad-input-noted"])
def test_the_reason_at_the_end(tmp_path, code, noted, reason):
    path = tmp_path / "s"

    def body(argv):
        status.start()
        if noted:
            status.note("an earlier message")
            status.note(noted)
        return code

    assert status.recorded(["bench", "--status-file", str(path)], body) == code
    assert read_status(path) == {"state": "finished", "exit": str(code), "reason": reason, "ranks": "1",
                                 "command": "bench"}


def test_a_note_of_an_earlier_command_is_forgotten(tmp_path):
    status.note("left over")
    path = tmp_path / "s"
    assert status.recorded(["--status-file", str(path)], lambda argv: 0) == 0
    assert read_status(path)["reason"] == "done"


def test_the_running_state_before_the_work(tmp_path):
    path = tmp_path / "s"
    seen = {}

    def body(argv):
        status.start()
        seen.update(read_status(path))
        status.start()  # once accepted, not looked at again
        return 0

    assert status.recorded(["model", "--machine", "m.json", "--status-file", str(path)], body) == 0
    assert seen == {"state": "running", "ranks": "1", "command": "model"}


@pytest.mark.parametrize("argv, command", [
    (["--m", "4"], "run"), (["info"], "info"), (["report", "r.h5"], "report"), (["r.h5", "report"], "run"),
    (["-v", "bench"], "bench"),
])
def test_the_command_named(tmp_path, argv, command):
    path = tmp_path / "s"
    assert status.recorded([*argv, "--status-file", str(path)], lambda a: 0) == 0
    assert read_status(path)["command"] == command


def test_a_body_that_ended_before_start_is_recorded(tmp_path):
    path = tmp_path / "s"
    assert status.recorded(["--status-file", str(path)], lambda argv: 2) == 2
    assert read_status(path)["state"] == "finished" and read_status(path)["exit"] == "2"


@pytest.mark.parametrize("code, recorded", [(None, "0"), (0, "0"), (2, "2"), ("usage: ...", "1")],
                         ids=["none", "0", "2", "text"])
def test_system_exit_is_recorded_and_goes_on(tmp_path, code, recorded):
    path = tmp_path / "s"

    def body(argv):
        raise SystemExit(code)

    with pytest.raises(SystemExit):
        status.recorded(["--status-file", str(path)], body)
    assert read_status(path)["exit"] == recorded


def test_an_unexpected_error_is_recorded_as_exit_1(tmp_path):
    path = tmp_path / "s"

    def body(argv):
        status.start()
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        status.recorded(["--status-file", str(path)], body)
    assert read_status(path) == {"state": "finished", "exit": "1", "reason": "failed", "ranks": "1", "command": "run"}
    status.start()  # outside a recorded command: nothing
    assert read_status(path)["state"] == "finished"


def test_without_the_option_nothing_is_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)

    def body(argv):
        status.start()
        return 5

    assert status.recorded(["run", "--m", "4"], body) == 5
    assert list(tmp_path.iterdir()) == []


def test_a_refused_path_is_never_written(tmp_path):
    (tmp_path / "note").write_text("mine")

    def body(argv):
        with pytest.raises(InputError, match="is not an hpcmm status file"):
            status.start()
        return 2

    assert status.recorded(["--status-file", str(tmp_path / "note")], body) == 2
    assert (tmp_path / "note").read_text() == "mine"
    # Refused at the end too (the command ended before start): left alone, nothing said.
    assert status.recorded(["--status-file", str(tmp_path / "note")], lambda argv: 2) == 2
    assert (tmp_path / "note").read_text() == "mine"


def test_a_file_that_cannot_be_written_at_the_end_is_a_warning(tmp_path, capsys):
    path = tmp_path / "s"

    def body(argv):
        status.start()
        path.unlink()
        path.mkdir()  # the status file became a directory that is not empty
        (path / "x").write_text("")
        return 0

    assert status.recorded(["--status-file", str(path)], body) == 0
    err = capsys.readouterr().err
    assert err.startswith(f"hpcmm: warning: --status-file={path}: cannot write it: ") and err.endswith("\n")


def test_the_start_refuses_a_folder_that_takes_no_file(tmp_path, monkeypatch):
    path = tmp_path / "s"
    real = os.open

    def full(name, flags, *args):
        if str(name).endswith(".tmp"):
            raise OSError(28, "No space left on device")
        return real(name, flags, *args)

    def body(argv):
        monkeypatch.setattr(os, "open", full)
        with pytest.raises(InputError) as caught:
            status.start()
        monkeypatch.setattr(os, "open", real)
        assert str(caught.value) == f"--status-file={path}: cannot write it (No space left on device)"
        return 2

    assert status.recorded(["--status-file", str(path)], body) == 2
    assert list(tmp_path.iterdir()) == []


class _World:
    def __init__(self, rank, size):
        self.rank, self.size = rank, size

    def Get_rank(self):  # noqa: N802 - MPI's spelling
        return self.rank

    def Get_size(self):  # noqa: N802
        return self.size


def test_only_rank_zero_writes_and_it_names_the_jobs_size(tmp_path, monkeypatch):
    path = tmp_path / "s"

    def body(argv):
        status.start()
        return 0

    monkeypatch.setattr(MPI, "COMM_WORLD", _World(1, 4))
    assert status.recorded(["--status-file", str(path)], body) == 0
    assert not path.exists()
    monkeypatch.setattr(MPI, "COMM_WORLD", _World(0, 4))
    assert status.recorded(["--status-file", str(path)], body) == 0
    assert read_status(path)["ranks"] == "4"


# -- more of the path's checks ---------------------------------------------------------------------


def test_a_file_that_became_a_fifo_after_it_was_looked_at_is_refused_without_blocking(tmp_path, monkeypatch):
    """A regular file when looked at, a FIFO when opened: refused, and the open does not wait for a writer."""
    (tmp_path / "decoy").write_bytes(b"")
    os.mkfifo(tmp_path / "s")
    real = os.stat

    def looked_at_before(path, *args, **kwargs):
        return real(tmp_path / "decoy") if str(path) == str(tmp_path / "s") else real(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", looked_at_before)
    assert _refused(tmp_path / "s") == f"--status-file={tmp_path}/s: cannot read it ({tmp_path}/s: not a regular file)"


def test_the_first_argument_and_those_after_the_option_count_too(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert "is also --out=r.h5" in _refused("r.h5", ["--out=r.h5", "--status-file", "r.h5"])
    assert "is also --out=r.h5" in _refused("r.h5", ["run", "--status-file", "r.h5", "--m", "4", "--out=r.h5"])
    assert "is also --out=r.h5" in _refused("r.h5", ["run", "--status-file=r.h5", "--out", "r.h5"])


def test_a_value_with_an_equals_sign_is_compared_whole(tmp_path):
    path = str(tmp_path / "a=b.npy")
    assert _refused(path, ["run", f"--a={path}", "--status-file", path]) == (
        f"--status-file={path} is also --a={path}: the status file must be a file of its own")


def test_a_flag_is_no_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert status.check_status_path("-v", ["run", "-v", "--status-file=-v"]) == str(tmp_path / "-v")


def test_write_status_works_from_a_folder_that_is_gone(tmp_path, monkeypatch):
    (tmp_path / "gone").mkdir()
    monkeypatch.chdir(tmp_path / "gone")
    os.rmdir(tmp_path / "gone")
    status.write_status(str(tmp_path / "s"), {"state": "running"})
    assert read_status(tmp_path / "s") == {"state": "running"}


def test_start_checks_the_other_arguments(tmp_path):
    out = tmp_path / "r.h5"

    def body(argv):
        with pytest.raises(InputError, match=r"is also --out="):
            status.start()
        return 2

    assert status.recorded(["run", "--out", str(out), "--status-file", str(out)], body) == 2
    assert not out.exists()


def test_a_path_named_elsewhere_is_left_alone_at_the_end(tmp_path):
    out = tmp_path / "r.h5"
    out.write_bytes(b"")  # an empty file: taken as a status file, were it not the --out file
    assert status.recorded(["run", "--out", str(out), "--status-file", str(out)], lambda argv: 2) == 2
    assert out.read_bytes() == b""


def test_a_path_refused_at_the_start_stays_unwritten_though_it_is_gone_by_the_end(tmp_path):
    note = tmp_path / "note"
    note.write_text("mine")

    def body(argv):
        with pytest.raises(InputError):
            status.start()
        note.unlink()
        return 2

    assert status.recorded(["--status-file", str(note)], body) == 2
    assert not note.exists()


def test_once_accepted_the_path_is_not_looked_at_again(tmp_path):
    path = tmp_path / "s"

    def body(argv):
        status.start()
        path.write_text("not a status file any more")
        status.start()  # no error: accepted already
        return 0

    assert status.recorded(["--status-file", str(path)], body) == 0
    assert read_status(path)["state"] == "finished"


def test_the_body_gets_the_arguments(tmp_path):
    argv = ["run", "--m", "4"]
    assert status.recorded(argv, lambda a: len(a)) == 3
    path = tmp_path / "s"
    assert status.recorded([*argv, "--status-file", str(path)], lambda a: len(a)) == 5
    assert read_status(path)["exit"] == "5"


def test_only_options_name_the_run_command(tmp_path):
    path = tmp_path / "s"
    assert status.recorded(["--m=4", f"--status-file={path}"], lambda a: 0) == 0
    assert read_status(path)["command"] == "run"


def test_start_outside_a_recorded_command_does_nothing(tmp_path):
    path = tmp_path / "s"
    assert status.recorded(["--status-file", str(path)], lambda argv: 0) == 0  # never started
    before = path.read_bytes()
    status.start()
    assert path.read_bytes() == before


def test_the_warning_at_the_end_names_the_system_error(tmp_path, capsys):
    path = tmp_path / "s"

    def body(argv):
        status.start()
        path.unlink()
        path.mkdir()
        (path / "x").write_text("")
        return 0

    assert status.recorded(["--status-file", str(path)], body) == 0
    probe = tmp_path / "probe"
    probe.write_text("")
    try:
        os.replace(probe, path)
    except OSError as exc:
        reason = exc.strerror
    assert capsys.readouterr().err == f"hpcmm: warning: --status-file={path}: cannot write it: {reason}\n"
