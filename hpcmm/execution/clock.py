"""One clock for all ranks: a product lasts from the first rank's start to the last rank's end.

Each rank times its own work with its own clock (``time.perf_counter``); to
compare starts and ends across ranks, :class:`SharedClock` knows the offset
of this rank's clock against rank 0's.  Where the MPI library says that
``MPI.Wtime`` is global (``MPI.WTIME_IS_GLOBAL``), ranks already share a
clock and the offsets come from it; otherwise they are estimated once, at
set-up, by ping-pong with rank 0: rank r sends at ``t1``, rank 0 answers with
its time ``t0``, rank r receives at ``t2``; of several rounds the one with the
shortest round trip gives ``offset = t0 − (t1 + t2)/2``, wrong by at most half
that round trip (microseconds on one node).

Example (two ranks)::

    clock = SharedClock(comm)           # collective
    start = clock.to_shared(time.perf_counter())
"""

from __future__ import annotations

import time

import numpy as np
from mpi4py import MPI

__all__ = ["SharedClock", "product_window"]

_TAG = 0x7C0C


class SharedClock:
    """This rank's ``perf_counter`` expressed on rank 0's clock.  Collective to create.

    Attributes
    ----------
    offset : float
        Seconds to add to this rank's ``perf_counter`` to get rank 0's.
    uncertainty : float
        Half the round trip of the best exchange (0 on rank 0 and with a global ``Wtime``).
    method : str
        ``"MPI.Wtime (global)"`` or ``"ping-pong with rank 0"``.
    """

    def __init__(self, comm: MPI.Comm, rounds: int = 16) -> None:
        rank, size = comm.Get_rank(), comm.Get_size()
        self.offset, self.uncertainty = 0.0, 0.0
        is_global = bool(comm.Get_attr(MPI.WTIME_IS_GLOBAL) or False)
        # Every rank must take the same branch: rank 0's answer decides.
        is_global = comm.bcast(is_global, root=0)
        if is_global:
            self.method = "MPI.Wtime (global)"
            here = MPI.Wtime() - time.perf_counter()
            self.offset = here - comm.bcast(here if rank == 0 else None, root=0)
            return
        self.method = "ping-pong with rank 0"
        buf = np.zeros(1)
        for peer in range(1, size):
            comm.Barrier()
            if rank == 0:
                for _ in range(rounds):
                    comm.Recv(buf, source=peer, tag=_TAG)
                    buf[0] = time.perf_counter()
                    comm.Send(buf, dest=peer, tag=_TAG)
            elif rank == peer:
                best = None
                for _ in range(rounds):
                    t1 = time.perf_counter()
                    comm.Send(buf, dest=0, tag=_TAG)
                    comm.Recv(buf, source=0, tag=_TAG)
                    t2 = time.perf_counter()
                    if best is None or t2 - t1 < best[0]:
                        best = (t2 - t1, float(buf[0]) - (t1 + t2) / 2)
                self.uncertainty, self.offset = best[0] / 2, best[1]

    def to_shared(self, local: float) -> float:
        """A ``perf_counter`` value of this rank on rank 0's clock."""
        return local + self.offset


def product_window(comm: MPI.Comm, start: float, seconds: float) -> tuple[float, float]:
    """Collective: ``(first start, last end)`` over the ranks, from each rank's shared start and duration."""
    mine = np.array([-start, start + seconds])
    out = np.empty(2)
    comm.Allreduce(mine, out, op=MPI.MAX)
    return float(-out[0]), float(out[1])
