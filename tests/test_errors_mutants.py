"""What the ranks' agreement on an error promises, one behaviour a test.

Written against the mutants that mutation testing of hpcmm/errors.py left alive
(docs/mutation.md).  The ranks are threads here, meeting in a communicator of their own whose
``allgather`` waits for all of them; ``MPI.COMM_WORLD`` is replaced by one that tells each thread
its rank in the job.  Pinned: which error every rank raises, its type, message, exit status and
the rank it names; that a collective block fails on every rank or none; and that a set-up step's
``close`` runs on every rank after any rank failed.
"""

from __future__ import annotations

import pytest
from mpi4py import MPI
from thread_comm import ThreadComm

from hpcmm.errors import (HpcmmError, InputError, OutputError, VerificationError, agree, collective,
                          collective_setup, raised_everywhere)


class _Job(ThreadComm):
    """The threads' communicator, also as ``MPI.COMM_WORLD``: errors name a rank by its rank in the job."""

    def run(self, body, monkeypatch):
        monkeypatch.setattr(MPI, "COMM_WORLD", self)
        return super().run(body)


def _agreed(job, monkeypatch, errors):
    """Every rank calls ``agree`` with its entry of ``errors``; returns what each raised."""
    outcomes = job.run(lambda rank: agree(job, errors[rank]), monkeypatch)
    assert all(kind == "raised" for kind, _ in outcomes), outcomes
    return [exc for _, exc in outcomes]


# -- the kinds and their exit statuses ------------------------------------------------------


def test_exit_statuses_of_each_kind():
    assert (HpcmmError.exit_code, InputError.exit_code, OutputError.exit_code, VerificationError.exit_code) == (
        1, 2, 1, 1)
    assert issubclass(InputError, ValueError) and issubclass(InputError, HpcmmError)
    assert not any(cls("x").agreed for cls in (HpcmmError, InputError, OutputError, VerificationError))


# -- one process ---------------------------------------------------------------------------


def test_no_error_raises_nothing(monkeypatch):
    assert agree(None, None) is None
    job = _Job(3)
    assert job.run(lambda rank: agree(job, None), monkeypatch) == [("returned", None)] * 3


def test_one_process_keeps_the_message_kind_and_status():
    cause = OutputError("disk full")
    with pytest.raises(OutputError) as caught:
        agree(None, cause)
    error = caught.value
    assert str(error) == "disk full" and error.exit_code == 1 and error.agreed
    assert error is not cause and error.__cause__ is cause
    assert not hasattr(error, "origin")
    assert raised_everywhere(error) and not raised_everywhere(cause)


def test_an_unexpected_error_keeps_its_type_in_the_message():
    with pytest.raises(HpcmmError) as caught:
        agree(None, KeyError("m"))
    assert type(caught.value) is HpcmmError
    assert str(caught.value) == "KeyError: 'm'" and caught.value.exit_code == 1


def test_an_error_of_a_kind_not_listed_keeps_its_status():
    class Special(InputError):
        exit_code = 3

    with pytest.raises(HpcmmError) as caught:
        agree(None, Special("odd"))
    assert type(caught.value) is HpcmmError and caught.value.exit_code == 3 and str(caught.value) == "odd"


@pytest.mark.parametrize("kind", [HpcmmError, InputError, OutputError, VerificationError])
def test_each_kind_comes_back_as_itself(kind):
    with pytest.raises(kind) as caught:
        agree(None, kind("wrong"))
    assert type(caught.value) is kind and caught.value.exit_code == kind.exit_code


# -- several ranks -------------------------------------------------------------------------


def test_an_error_of_one_rank_is_raised_on_all_naming_it(monkeypatch):
    job = _Job(3)
    cause = InputError("--m=0: expected an integer >= 1")
    errors = _agreed(job, monkeypatch, [None, cause, None])
    for error in errors:
        assert type(error) is InputError and error.exit_code == 2 and error.agreed
        assert str(error) == "--m=0: expected an integer >= 1 (raised by rank 1)"
        assert error.origin == 1
        assert raised_everywhere(error)
    assert errors[1].__cause__ is cause
    assert errors[0].__cause__ is None and errors[2].__cause__ is None


def test_the_same_error_on_every_rank_is_kept_as_it_is(monkeypatch):
    job = _Job(3)
    errors = _agreed(job, monkeypatch, [InputError("bad --dtype"), InputError("bad --dtype"),
                                        InputError("bad --dtype")])
    for error in errors:
        assert str(error) == "bad --dtype" and not hasattr(error, "origin") and error.exit_code == 2


def test_the_lowest_failing_rank_wins(monkeypatch):
    job = _Job(4)
    errors = _agreed(job, monkeypatch, [None, OutputError("disk full"), VerificationError("C is wrong"),
                                        OutputError("disk full")])
    for error in errors:
        assert type(error) is OutputError
        assert str(error) == "disk full (raised by rank 1)" and error.origin == 1


def test_different_errors_on_every_rank_name_rank_zero(monkeypatch):
    job = _Job(2)
    errors = _agreed(job, monkeypatch, [InputError("no such file a.npy"), InputError("no such file b.npy")])
    assert [str(e) for e in errors] == ["no such file a.npy (raised by rank 0)"] * 2
    assert [e.origin for e in errors] == [0, 0]


def test_an_error_agreed_before_keeps_its_message_and_rank(monkeypatch):
    """An error already agreed on a smaller communicator names the rank it named there."""
    job = _Job(3)
    first = OutputError("disk full (raised by rank 5)")
    first.origin = 5
    errors = _agreed(job, monkeypatch, [None, None, first])
    for error in errors:
        assert str(error) == "disk full (raised by rank 5)" and error.origin == 5
    with pytest.raises(OutputError) as caught:
        agree(None, first)
    assert caught.value.origin == 5 and str(caught.value) == "disk full (raised by rank 5)"


# -- collective blocks ---------------------------------------------------------------------


def test_a_collective_block_fails_on_every_rank_or_none(monkeypatch):
    job = _Job(3)

    def body(rank):
        with collective(job):
            if rank == 2:
                raise FileNotFoundError("a.npy")
        return "done"

    outcomes = job.run(body, monkeypatch)
    assert all(kind == "raised" for kind, _ in outcomes)
    assert {str(exc) for _, exc in outcomes} == {"FileNotFoundError: a.npy (raised by rank 2)"}
    assert all(type(exc) is HpcmmError and exc.agreed for _, exc in outcomes)

    def fine(rank):
        with collective(job):
            pass
        return rank

    assert job.run(fine, monkeypatch) == [("returned", 0), ("returned", 1), ("returned", 2)]


def test_a_collective_block_without_communicator():
    with pytest.raises(InputError, match=r"^bad$") as caught:
        with collective(None):
            raise InputError("bad")
    assert caught.value.agreed
    with collective(None):
        pass


def test_a_failed_set_up_is_undone_on_every_rank(monkeypatch):
    job = _Job(3)
    closed = []

    def body(rank):
        with collective_setup(job, lambda: closed.append(rank)):
            if rank == 0:
                raise MemoryError("out of device memory")
        return "built"

    outcomes = job.run(body, monkeypatch)
    assert sorted(closed) == [0, 1, 2]
    assert all(kind == "raised" and str(exc) == "MemoryError: out of device memory (raised by rank 0)"
               for kind, exc in outcomes)


def test_a_set_up_that_worked_is_kept(monkeypatch):
    job = _Job(2)
    closed = []

    def body(rank):
        with collective_setup(job, lambda: closed.append(rank)):
            pass
        return "built"

    assert job.run(body, monkeypatch) == [("returned", "built")] * 2
    assert closed == []


def test_raised_everywhere_only_for_none_or_an_agreed_error():
    assert raised_everywhere(None)
    agreed = InputError("x")
    agreed.agreed = True
    assert raised_everywhere(agreed)
    assert not raised_everywhere(InputError("x"))
    stranger = ValueError("x")
    stranger.agreed = True
    assert not raised_everywhere(stranger)
