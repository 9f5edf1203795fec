"""How long a dynamic tile claim waits while the counter's owner is busy in a GEMM (no MPI call).

``--balance dynamic`` claims tiles with ``Fetch_and_op`` on counters in an MPI shared-memory window
(:class:`hpcmm.execution.dynamic.TileCounters`).  An MPI may serve a lock request, or the atomic itself,
only when the target rank enters MPI; a rank multiplying on its CPU does not for the whole GEMM.  This
measures, for each way of claiming, the seconds one claim on a busy owner's counter takes:

- ``lock``: ``Lock(target, LOCK_SHARED)``, ``Fetch_and_op``, ``Unlock`` per claim;
- ``epoch``: hpcmm's :class:`~hpcmm.execution.dynamic.TileCounters` (one ``Lock_all(MODE_NOCHECK)`` for the
  window's life, ``Fetch_and_op`` and ``Flush`` per claim).

Run on one node with two ranks or more (rank 0 claims, the others multiply)::

    mpiexec -n 2 python benchmarks/claim_latency.py [--n 2500] [--repeats 3]

One line per way and repeat: the claim's seconds against the owner's GEMM seconds.  A claim that waits
for the owner takes about as long as the GEMM; one that does not, microseconds.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from mpi4py import MPI

from hpcmm.execution.dynamic import TileCounters


def _locked_claims(node):
    """The claim as it was before :class:`TileCounters`: a shared lock on the target per claim.  Returns
    (claim on node rank 1's counter, close)."""
    window = MPI.Win.Allocate_shared(8, 8, comm=node)
    one, got = np.ones(1, dtype=np.int64), np.zeros(1, dtype=np.int64)

    def claim() -> None:
        window.Lock(1, MPI.LOCK_SHARED)
        window.Fetch_and_op(one, got, 1, 0, MPI.SUM)
        window.Unlock(1)

    return claim, window.Free


def claim_seconds(node, way: str, n: int) -> tuple[float, float]:
    """One trial: rank 1 multiplies two ``n`` × ``n`` matrices while rank 0 claims from its counter; returns
    (claim seconds, GEMM seconds) on rank 0 (zeros elsewhere)."""
    if way == "lock":
        claim_one, close = _locked_claims(node)
    else:  # hpcmm's own counters
        counters = TileCounters(node)
        claim_one, close = (lambda: counters.claim(1)), counters.close
    a = np.random.default_rng(node.rank).random((n, n))
    node.Barrier()
    claim = gemm = 0.0
    if node.rank == 1:
        start = time.perf_counter()
        a @ a
        gemm = time.perf_counter() - start
    elif node.rank == 0:
        time.sleep(0.05)  # the owner is inside its GEMM
        start = time.perf_counter()
        claim_one()
        claim = time.perf_counter() - start
    gemm = node.allreduce(gemm, op=MPI.MAX)
    close()
    return claim, gemm


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2500, help="the owner's GEMM size (default 2500)")
    parser.add_argument("--repeats", type=int, default=3, help="trials per way (default 3)")
    args = parser.parse_args()
    node = MPI.COMM_WORLD.Split_type(MPI.COMM_TYPE_SHARED)
    if node.size < 2:
        raise SystemExit("claim_latency.py: needs two ranks or more on one node")
    if node.rank == 0:
        print(f"# {MPI.Get_library_version().splitlines()[0].strip(chr(0) + ' ')}; n={args.n}")
        print("way\trepeat\tclaim_s\towner_gemm_s")
    for repeat in range(args.repeats):
        for way in ("lock", "epoch"):
            claim, gemm = claim_seconds(node, way, args.n)
            if node.rank == 0:
                print(f"{way}\t{repeat}\t{claim:.6f}\t{gemm:.3f}", flush=True)
    node.Free()


if __name__ == "__main__":
    main()
