"""Ranks as threads of one process, sharing a stand-in communicator: collectives without mpiexec.

Mutation testing judges mutants in one process (``tests/mpi`` is left to mpiexec); the checks of C
and the ranks' agreement on an error are collective, so their tests run several ranks as threads
that meet in :class:`ThreadComm`'s collectives.  A collective fails (``BrokenBarrierError``) instead
of waiting when it can no longer complete: a member's body has ended (returned or raised) without
joining it, or every rank of the job waits in a collective (a deadlock, as mismatched collectives
make); a collective every member had joined still completes.  A time limit of minutes is the
backstop.  ``Split`` (and ``Dup``) makes communicators of the same kind; ``Free`` marks one freed by the calling
rank, which may then call no collective on it, as MPI's would be gone.  ``Send`` and ``Recv`` pass a copy of the
buffer from one member to another (a ``Send`` never waits); :attr:`ThreadComm.messages` lists every message sent
in the job, ``(source, dest, bytes)`` by job rank.
"""

from __future__ import annotations

import collections
import threading

import numpy as np
from mpi4py import MPI

TIME_LIMIT = 300  # seconds a collective waits at most: a hang guard


class _Job:
    """What the communicators of one job share: one lock, the ranks waiting, those whose body ended."""

    def __init__(self, size: int):
        self.size = size
        self.cond = threading.Condition()
        self.reset()

    def reset(self) -> None:
        self.waiting: set[int] = set()  # job ranks inside a collective (or a receive) that has not completed
        self.gone: set[int] = set()
        self.deadlock = False
        self.mail: dict[tuple, collections.deque] = {}  # (communicator, source, dest, tag): messages not received
        self.receiving: dict[int, tuple] = {}  # job rank: the mailbox its receive waits on
        self.messages: list[tuple[int, int, int]] = []  # (source, dest, bytes) by job rank, every message sent

    def check(self) -> None:
        """Under ``cond``: a deadlock once every rank still running waits."""
        if self.waiting and self.waiting | self.gone >= set(range(self.size)):
            self.deadlock = True
            self.cond.notify_all()


class ThreadComm:
    """``size`` ranks as threads: :meth:`run` calls ``body(rank)`` on each, the collectives wait for all."""

    def __init__(self, size: int, family: list | None = None, job_ranks: list[int] | None = None,
                 job: _Job | None = None):
        self.size = size
        self.job_ranks = list(range(size)) if job_ranks is None else job_ranks  # each rank's in the job
        self._job = job if job is not None else _Job(size)
        self._reset()
        self._local = threading.local()
        self.freed_by: set[int] = set()  # the ranks that freed it
        #: This communicator and every one split from it (or from those): the job's communicators.
        self.family = family if family is not None else []
        self.family.append(self)

    def _reset(self) -> None:
        self._generation = 0  # collectives completed
        self._arrived: dict[int, object] = {}  # rank: value, in the collective under way
        self._results: dict[int, list] = {}  # generation: every rank's value

    # -- the communicator's side ---------------------------------------------------------
    def _exchange(self, value):
        rank, job = self._local.rank, self._job
        if rank in self.freed_by:
            raise RuntimeError("a collective on a freed communicator")
        with job.cond:
            generation = self._generation
            self._arrived[rank] = value
            if len(self._arrived) == self.size:
                self._results[generation] = [self._arrived[r] for r in range(self.size)]
                self._results.pop(generation - 1, None)  # every rank has read it: all are here
                job.waiting -= {self.job_ranks[r] for r in self._arrived}
                self._arrived = {}
                self._generation += 1
                job.cond.notify_all()
            else:
                job.waiting.add(self.job_ranks[rank])
                job.check()

                def over():
                    return generation in self._results or job.deadlock or self._missing()

                job.cond.wait_for(over, timeout=TIME_LIMIT)
                if generation not in self._results:
                    job.waiting.discard(self.job_ranks[rank])
                    why = "every rank waits" if job.deadlock else f"ranks {self._missing()} have left"
                    raise threading.BrokenBarrierError(f"a collective that cannot complete: {why}")
            return list(self._results[generation])

    def _missing(self) -> list[int]:
        """Members whose body ended without joining the collective under way."""
        return [r for r in range(self.size) if self.job_ranks[r] in self._job.gone and r not in self._arrived]

    def allgather(self, value):
        return self._exchange(value)

    def gather(self, value, root=0):
        got = self._exchange(value)
        return got if self._local.rank == root else None

    def bcast(self, value, root=0):
        return self._exchange(value)[root]

    def allreduce(self, value, op=MPI.SUM):
        """Every rank's ``value`` reduced by ``MPI.SUM``, ``MPI.MAX`` or ``MPI.MIN``."""
        values = self._exchange(value)
        if op == MPI.SUM:
            return sum(values[1:], values[0])
        if op in (MPI.MAX, MPI.MIN):
            return (max if op == MPI.MAX else min)(values)
        raise NotImplementedError(f"allreduce with {op}")

    def Allreduce(self, send, recv, op=MPI.SUM):  # noqa: N802 - MPI's spelling
        assert op == MPI.SUM
        recv[...] = sum(self._exchange(np.array(send, copy=True)))

    def Barrier(self):  # noqa: N802
        self._exchange(None)

    def Bcast(self, buf, root=0):  # noqa: N802
        """``root``'s ``buf`` into every rank's, which must have its size (as an MPI message must)."""
        sent = self._exchange(np.array(buf, copy=True) if self._local.rank == root else None)[root]
        if sent.shape != np.shape(buf):
            raise ValueError(f"Bcast of {sent.shape} into {np.shape(buf)}")
        if self._local.rank != root:
            buf[...] = sent

    def Send(self, buf, dest, tag=0):  # noqa: N802
        """A copy of ``buf`` to member ``dest``, received by its :meth:`Recv` of the same ``tag``."""
        if not isinstance(dest, int) or not 0 <= dest < self.size:
            raise ValueError(f"Send: no rank {dest!r} in a communicator of {self.size}")
        if self._local.rank in self.freed_by:
            raise RuntimeError("a Send on a freed communicator")
        me, job, data = self._local.rank, self._job, np.array(buf, copy=True).reshape(-1).view(np.uint8)
        key = (id(self), me, dest, tag)
        with job.cond:
            job.mail.setdefault(key, collections.deque()).append(data)
            job.messages.append((self.job_ranks[me], self.job_ranks[dest], data.nbytes))
            if job.receiving.get(self.job_ranks[dest]) == key:
                job.waiting.discard(self.job_ranks[dest])  # its receive completes: it is no longer waiting
            job.cond.notify_all()

    def Recv(self, buf, source, tag=0):  # noqa: N802
        """Member ``source``'s next message of ``tag`` into ``buf``, which must hold it (as MPI's must)."""
        if not isinstance(source, int) or not 0 <= source < self.size:
            raise ValueError(f"Recv: no rank {source!r} in a communicator of {self.size}")
        me, job = self._local.rank, self._job
        key, mine = (id(self), source, me, tag), self.job_ranks[me]
        with job.cond:
            if not job.mail.get(key):
                job.waiting.add(mine)
                job.receiving[mine] = key
                job.check()
                job.cond.wait_for(lambda: job.mail.get(key) or job.deadlock or self.job_ranks[source] in job.gone,
                                  timeout=TIME_LIMIT)
                job.waiting.discard(mine)
                job.receiving.pop(mine, None)
                if not job.mail.get(key):
                    raise threading.BrokenBarrierError(f"a receive from rank {source} that cannot complete")
            data = job.mail[key].popleft()
        out = np.asarray(buf).reshape(-1).view(np.uint8)
        if data.nbytes > out.nbytes:
            raise ValueError(f"Recv: a message of {data.nbytes} bytes into {out.nbytes} (truncated)")
        out[: data.nbytes] = data

    @property
    def messages(self) -> list[tuple[int, int, int]]:
        """``(source, dest, bytes)`` of every message sent in the job, by job rank, in the order sent."""
        return self._job.messages

    def Split(self, color=0, key=0):  # noqa: N802
        """MPI's split: ranks of one colour in a new communicator, ordered by ``(key, rank)``."""
        if not isinstance(color, int) or not isinstance(key, int):
            raise TypeError(f"Split({color!r}, {key!r}): an integer is required")
        if color < 0 and color != MPI.UNDEFINED:
            raise ValueError(f"Split: invalid colour {color}")
        me = self._local.rank
        entries = self._exchange((color, key, me))
        members = [r for _, r in sorted((k, r) for c, k, r in entries if c == color)]
        founder = color != MPI.UNDEFINED and me == min(members)
        made = self._exchange(type(self)(len(members), self.family, [self.job_ranks[m] for m in members],
                                         self._job) if founder else None)
        if color == MPI.UNDEFINED:
            return MPI.COMM_NULL
        child = made[min(members)]
        child._local.rank = members.index(me)
        return child

    def Dup(self):  # noqa: N802
        """A communicator of the same members in the same order (MPI's ``Dup``): a ``Split`` by rank."""
        return self.Split(0, self.Get_rank())

    def Free(self):  # noqa: N802
        if self._local.rank in self.freed_by:
            raise RuntimeError("a communicator freed twice")
        self.freed_by.add(self._local.rank)

    @property
    def freed(self) -> bool:
        """Whether every rank freed it."""
        return len(self.freed_by) == self.size

    def Get_size(self):  # noqa: N802
        return self.size

    def Get_rank(self):  # noqa: N802
        return self._local.rank

    # -- the job -------------------------------------------------------------------------
    def run(self, body) -> list[tuple[str, object]]:
        """``("returned", value)`` or ``("raised", exception)`` of ``body(rank)`` on each rank."""
        job = self._job
        with job.cond:
            job.reset()  # every rank of an earlier run has left
            self._reset()
        outcomes: list = [None] * self.size

        def rank_main(rank):
            self._local.rank = rank
            try:
                outcomes[rank] = ("returned", body(rank))
            except BaseException as exc:  # noqa: BLE001 - the test looks at it
                outcomes[rank] = ("raised", exc)
            with job.cond:  # ranks wait, or will, in collectives this one never joins
                job.gone.add(rank)
                job.check()
                job.cond.notify_all()

        threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(self.size)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return outcomes
