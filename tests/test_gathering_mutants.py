"""``hpcmm.gather`` and ``hpcmm.write_hdf5`` over three ranks, one behaviour a test.

Written against the mutants that mutation testing of hpcmm/io/gathering.py left alive
(docs/mutation.md), which need several ranks: the ranks are threads of one process
(tests/thread_comm.py) on a communicator that also carries MPI's point-to-point messages, matched
by source and tag in the order sent as MPI matches them.  What is pinned: ``write_hdf5`` passes its
turn from each rank to the next and leaves no message of its own, nor takes one of the caller's, on
the communicator; a refusal on rank 0 or a failed block on any rank fails every rank; ``gather``
gives the whole matrix to the root and ``None`` to the others, which receive nothing.
"""

from __future__ import annotations

import operator

import h5py
import numpy as np
import pytest
from mpi4py import MPI

import hpcmm
from hpcmm.errors import InputError, OutputError
from hpcmm.geometry.distribution import Layout
from thread_comm import ThreadComm

RANKS = 3


class MessageComm(ThreadComm):
    """:class:`ThreadComm` with ``send``/``recv`` and ``Isend``/``Irecv`` (whose requests are complete at once).

    A send is buffered (it returns at once, as MPI's eager sends of small messages do); a receive
    waits for the first matching message, and fails instead of waiting when no rank that could still
    send one runs (every rank waits, or the source has ended).  ``None`` for a rank or a tag is a
    ``TypeError``, as in mpi4py; ``MPI.PROC_NULL`` sends and receives nothing.
    """

    def __init__(self, size: int):
        super().__init__(size)
        self.mail: list[tuple[int, int, int, object]] = []  # (source, dest, tag, payload), in the order sent
        self.received_bytes = [0] * size  # by Irecv, per rank
        self.receiving: set[int] = set()  # the ranks waiting in a receive

    def _post(self, payload, dest, tag) -> None:
        dest, tag = operator.index(dest), operator.index(tag)
        if dest == MPI.PROC_NULL:
            return
        if not 0 <= dest < self.size or tag < 0:
            raise ValueError(f"send to rank {dest} with tag {tag}: invalid")
        with self._job.cond:
            self.mail.append((self.Get_rank(), dest, tag, payload))
            if dest in self.receiving:  # it may go on now: no deadlock while it looks
                self._job.waiting.discard(self.job_ranks[dest])
            self._job.cond.notify_all()

    def _take(self, source, tag):
        source, tag = operator.index(source), operator.index(tag)
        me, job = self.Get_rank(), self._job

        def match():
            for i, (src, dest, t, _) in enumerate(self.mail):
                if dest == me and source in (MPI.ANY_SOURCE, src) and tag in (MPI.ANY_TAG, t):
                    return i
            return None

        def hopeless():
            senders = range(self.size) if source == MPI.ANY_SOURCE else [source]
            return job.deadlock or all(self.job_ranks[s] in job.gone for s in senders if s != me)

        with job.cond:
            self.receiving.add(me)
            try:
                while (found := match()) is None:
                    job.waiting.add(self.job_ranks[me])
                    job.check()
                    if hopeless():
                        raise RuntimeError(f"rank {me} waits for a message from {source} (tag {tag}) that never comes")
                    job.cond.wait(timeout=5)
                return self.mail.pop(found)[3]
            finally:
                self.receiving.discard(me)
                job.waiting.discard(self.job_ranks[me])

    def send(self, obj, dest, tag=0):
        self._post(obj, dest, tag)

    def recv(self, buf=None, source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, status=None):
        if operator.index(source) == MPI.PROC_NULL:
            return None
        return self._take(source, tag)

    def Isend(self, buf, dest, tag=0):  # noqa: N802 - MPI's spelling
        self._post(np.array(buf, copy=True), dest, tag)
        return MPI.REQUEST_NULL

    def Irecv(self, buf, source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG):  # noqa: N802
        got = self._take(source, tag)
        if got.nbytes != np.asarray(buf).nbytes:
            raise ValueError(f"a message of {got.nbytes} bytes into {np.asarray(buf).nbytes}")
        buf[...] = got
        self.received_bytes[self.Get_rank()] += got.nbytes
        return MPI.REQUEST_NULL


def _returned(outcomes) -> list:
    for kind, value in outcomes:
        if kind == "raised":
            raise value
    return [value for _, value in outcomes]


def _raised(outcomes) -> list[BaseException]:
    assert all(kind == "raised" for kind, _ in outcomes), outcomes
    return [value for _, value in outcomes]


LAYOUT = Layout.grid(9, 6, 4, (RANKS, 1))  # C's rows 0-3, 3-6, 6-9: a block each


@pytest.fixture
def whole():
    return np.random.default_rng(11).standard_normal((9, 6))


def _block(whole, rank):
    (r0, r1), (c0, c1) = LAYOUT.ranges("C", rank)
    return whole[r0:r1, c0:c1].copy()


def test_three_ranks_write_their_blocks_in_turn_and_leave_no_message(tmp_path, whole):
    comm, path = MessageComm(RANKS), str(tmp_path / "c.h5")
    assert _returned(comm.run(lambda r: hpcmm.write_hdf5(comm, path, LAYOUT, _block(whole, r)))) == [None] * RANKS
    assert comm.mail == []
    with h5py.File(path, "r") as f:
        assert np.array_equal(f["C"][()], whole)


def test_the_callers_own_messages_stay_for_the_caller(tmp_path, whole):
    """A message rank 0 sent rank 1 before the call (another tag) is still there after it, and the write is whole."""
    comm, path = MessageComm(RANKS), str(tmp_path / "c.h5")

    def body(rank):
        if rank == 0:
            comm.send("mine", dest=1, tag=7)
        hpcmm.write_hdf5(comm, path, LAYOUT, _block(whole, rank))
        return comm.recv(source=0, tag=7) if rank == 1 else None

    assert _returned(comm.run(body)) == [None, "mine", None]
    assert comm.mail == []
    with h5py.File(path, "r") as f:
        assert np.array_equal(f["C"][()], whole)


def test_a_refusal_on_rank_0_fails_every_rank(tmp_path, whole):
    path = tmp_path / "c.h5"
    path.write_bytes(b"an earlier file")
    comm = MessageComm(RANKS)
    errors = _raised(comm.run(lambda r: hpcmm.write_hdf5(comm, str(path), LAYOUT, _block(whole, r))))
    assert all(isinstance(e, InputError) and str(e).startswith(f"{path}: exists") for e in errors)
    assert path.read_bytes() == b"an earlier file"


def test_a_block_that_fails_on_one_rank_fails_every_rank(tmp_path, whole, monkeypatch):
    """Rank 1 cannot reopen the file for its block: every rank raises the error that names rank 1."""
    comm, path = MessageComm(RANKS), str(tmp_path / "c.h5")
    real = h5py.File

    def failing(name, mode="r", *args, **kwargs):
        if mode == "r+" and comm.Get_rank() == 1:
            raise OSError(28, "No space left on device")
        return real(name, mode, *args, **kwargs)

    monkeypatch.setattr(h5py, "File", failing)
    errors = _raised(comm.run(lambda r: hpcmm.write_hdf5(comm, path, LAYOUT, _block(whole, r))))
    want = f"{path}: cannot write rank 1's block: [Errno 28] No space left on device"
    assert all(isinstance(e, OutputError) and str(e).startswith(want) for e in errors)


@pytest.mark.parametrize("root", [0, 2], ids=["root0", "root2"])
def test_gather_gives_the_root_the_whole_matrix_and_the_others_none(whole, root):
    comm = MessageComm(RANKS)
    got = _returned(comm.run(lambda r: hpcmm.gather(comm, LAYOUT, _block(whole, r), root=root)))
    assert np.array_equal(got[root], whole)
    assert all(got[r] is None for r in range(RANKS) if r != root)
    assert comm.mail == []
    others = sum(whole[slice(*LAYOUT.ranges("C", r)[0])].nbytes for r in range(RANKS) if r != root)
    assert comm.received_bytes == [others if r == root else 0 for r in range(RANKS)]
