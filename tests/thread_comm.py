"""Ranks as threads of one process, sharing a stand-in communicator: collectives without mpiexec.

Mutation testing judges mutants in one process (``tests/mpi`` is left to mpiexec); the checks of C
and the ranks' agreement on an error are collective, so their tests run several ranks as threads
that meet in :class:`ThreadComm`'s collectives.  A collective fails (``BrokenBarrierError``) instead
of waiting when it can no longer complete: a member's body has ended (returned or raised) without
joining it, or every rank of the job waits in a collective (a deadlock, as mismatched collectives
make); a collective every member had joined still completes.  A time limit of minutes is the
backstop.  ``Split`` (and ``Dup``) makes communicators of the same kind; ``Free`` marks one freed by the calling
rank, which may then call no collective on it, as MPI's would be gone.
"""

from __future__ import annotations

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
        self.waiting: set[int] = set()  # job ranks inside a collective that has not completed
        self.gone: set[int] = set()
        self.deadlock = False

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
