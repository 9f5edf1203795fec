"""Ranks as threads of one process, sharing a stand-in communicator: collectives without mpiexec.

Mutation testing judges mutants in one process (``tests/mpi`` is left to mpiexec); the checks of C
and the ranks' agreement on an error are collective, so their tests run several ranks as threads
that meet in :class:`ThreadComm`'s collectives.  A rank that raises while others wait for it in a
collective breaks the barrier, so that they fail instead of waiting (a collective all ranks have
left is not disturbed); the barrier's time limit is the backstop.
"""

from __future__ import annotations

import threading

import numpy as np
from mpi4py import MPI


class ThreadComm:
    """``size`` ranks as threads: :meth:`run` calls ``body(rank)`` on each, the collectives wait for all."""

    def __init__(self, size: int):
        self.size = size
        self._barrier = threading.Barrier(size, timeout=300)  # a broken collective fails, not hangs
        self._slots = [None] * size
        self._local = threading.local()

    # -- the communicator's side ---------------------------------------------------------
    def _exchange(self, value):
        self._slots[self._local.rank] = value
        self._barrier.wait()
        got = list(self._slots)
        self._barrier.wait()
        return got

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

    def Get_size(self):  # noqa: N802
        return self.size

    def Get_rank(self):  # noqa: N802
        return self._local.rank

    # -- the job -------------------------------------------------------------------------
    def run(self, body) -> list[tuple[str, object]]:
        """``("returned", value)`` or ``("raised", exception)`` of ``body(rank)`` on each rank."""
        self._barrier.reset()  # a rank of an earlier run may have broken it
        outcomes: list = [None] * self.size

        def rank_main(rank):
            self._local.rank = rank
            try:
                outcomes[rank] = ("returned", body(rank))
            except BaseException as exc:  # noqa: BLE001 - the test looks at it
                outcomes[rank] = ("raised", exc)
                if self._barrier.n_waiting:  # ranks wait in a collective this one will never join
                    self._barrier.abort()

        threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(self.size)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return outcomes
