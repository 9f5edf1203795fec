"""What a GEMM on a time-sliced GPU waits for: the other contexts' GEMMs only, or their copies too.

Launch on one node, every rank on GPU 0, no MPS daemon::

    mpiexec -n 4 python3 tests/gpu/timeslice_probe.py [--shape 2502x3001x1501] [--copy-mib 32]
                                                      [--seconds 1.5] [--json FILE]

Rank 0 multiplies float64 blocks (``C = A·B``, by default the C block and panel of a full step of
summa 10007x6001x6007 at 8 ranks, rpn 4: a case docs/scaling.md section 2 lists as open), one
GEMM at a time, each timed with CUDA events as the engine's timeline times it.  The other ranks
are the other contexts of that GPU.  Phases of ``--seconds`` each (the table ``PHASES``):

``gemm alone``
    rank 0 multiplies, the others wait;
``copies alone``
    the others copy ``--copy-mib`` chunks between pinned host memory and the GPU, one way then
    the other (the staged path's chunk copies), rank 0 waits;
``gemm + copies``
    both at once;
``gemm + gemms``
    the others multiply the same blocks meanwhile;
``gemm + both``
    the others multiply and copy at once (a GEMM on one stream, a chunk each way on another, as a
    product's compute and communication streams do);
``both + both``
    rank 0 copies a chunk each way on a second stream beside each of its GEMMs too;
``queued gemms``, ``queued both``
    every rank, rank 0 included, keeps 8 GEMMs (and, in ``queued both``, 8 chunk copies each way
    beside them) queued before it waits, as the engine keeps work queued across its host's MPI
    calls; in the phases above every rank waits for each operation and leaves the GPU idle between;
``queued copies``
    every rank queues 8 chunk copies each way and one GEMM, then waits: a context whose queued
    work is copies, as a rank's is while its panels move (rank 0 times that one GEMM);
``product steps``
    every rank queues 8 steps as the engine queues them, then waits: a chunk copy each way on the
    other stream, the compute stream waiting on its event, then the GEMM (the open case of
    docs/scaling.md section 2 has a GPU idle while its contexts' GEMMs wait so).

Rank 0 prints, per phase, its GEMMs' median, 90th percentile and maximum, the GPU's TFLOP/s over
every rank's GEMMs, and the other ranks' copies in GB/s; ``--json`` writes the same.  The cost model (``hpcmm.model.cost``) runs
a GPU's GEMMs in turn and makes a copy wait for contexts with a GEMM pending; whether a GEMM also
waits for other contexts' copies is what ``gemm + copies`` against ``gemm alone`` says.
Exit status 2 without a usable GPU.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
from mpi4py import MPI

QUEUE = 8  # operations each rank keeps queued in the queued phases
#: Each phase: what one round of rank 0's work and of every other rank's is, ``(GEMMs, chunk copies each
#: way)`` or ``(GEMMs, chunk copies each way, whether each GEMM's stream waits on the copies before it)``,
#: or None (it waits).  A round queues its copies spread before its GEMMs (all of them before the one
#: GEMM of ``queued copies``; a round of no GEMM is its copies alone), then waits for all.
PHASES = {
    "gemm alone": ((1, 0), None),
    "copies alone": (None, (0, 1)),
    "gemm + copies": ((1, 0), (0, 1)),
    "gemm + gemms": ((1, 0), (1, 0)),
    "gemm + both": ((1, 0), (1, 1)),
    "both + both": ((1, 1), (1, 1)),
    "queued gemms": ((QUEUE, 0), (QUEUE, 0)),
    "queued both": ((QUEUE, QUEUE), (QUEUE, QUEUE)),
    "queued copies": ((1, QUEUE), (1, QUEUE)),
    "product steps": ((QUEUE, QUEUE, True), (QUEUE, QUEUE, True)),
}
_STOP = 7  # tag of rank 0's message that ends a phase


def _parse_shape(text: str) -> tuple[int, int, int]:
    try:
        m, n, k = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise SystemExit(f"--shape={text!r}: expected MxNxK, e.g. 2502x3001x1501") from None
    if min(m, n, k) < 1:
        raise SystemExit(f"--shape={text!r}: every extent must be at least 1")
    return m, n, k


def _cupy():
    """cupy on GPU 0, or None where it does not import or sees no device."""
    try:
        import cupy  # noqa: PLC0415

        if cupy.cuda.runtime.getDeviceCount() < 1:
            return None
    except Exception:  # noqa: BLE001 - any failure to reach a GPU means: no GPU here
        return None
    cupy.cuda.Device(0).use()
    return cupy


def _round(cp, a, b, c, stream, queue_copies, gemms: int, copies: int, waits: bool = False,
           timed: bool = False) -> list[float]:
    """One round: ``copies`` chunk copies each way (``queue_copies()``, on another stream), spread
    before ``gemms`` GEMMs, queued, then waited for; with ``waits`` each GEMM's stream first waits on
    the copies before it (an event of the other stream), as a step's GEMM waits on its panels.
    Returns each GEMM's time from CUDA events (milliseconds) where ``timed``."""
    before = copies // gemms if gemms else copies
    marks, side = [], None
    with stream:
        for _ in range(max(gemms, 1)):
            for _ in range(before):
                side = queue_copies()
            if waits and side is not None:
                stream.wait_event(side.record())
            if gemms and timed:
                start, stop = cp.cuda.Event(), cp.cuda.Event()
                start.record(stream)
                cp.matmul(a, b, out=c)
                stop.record(stream)
                marks.append((start, stop))
            elif gemms:
                cp.matmul(a, b, out=c)
    stream.synchronize()
    if side is not None:
        side.synchronize()
    return [cp.cuda.get_elapsed_time(start, stop) for start, stop in marks]


def _until_stopped(comm, work) -> int:
    """Run ``work()`` (one round, waited for) until rank 0 says stop; the rounds done."""
    done = 0
    while not comm.Iprobe(source=0, tag=_STOP):
        work()
        done += 1
    comm.recv(source=0, tag=_STOP)
    return done


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", default="2502x3001x1501", help="MxNxK of rank 0's GEMM (C is MxN)")
    parser.add_argument("--copy-mib", type=int, default=32, help="chunk of each copy (MiB)")
    parser.add_argument("--seconds", type=float, default=1.5, help="length of each phase")
    parser.add_argument("--json", default=None, help="write the figures here (rank 0)")
    args = parser.parse_args()
    m, n, k = _parse_shape(args.shape)
    if args.copy_mib < 1 or not args.seconds > 0:
        raise SystemExit(f"--copy-mib={args.copy_mib} and --seconds={args.seconds} must be positive")
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    cp = _cupy()
    if not all(comm.allgather(cp is not None)):
        if rank == 0:
            print("timeslice_probe: needs a GPU on every rank (cupy does not import or sees no device)",
                  file=sys.stderr)
        return 2
    if size < 2:
        print("timeslice_probe: needs at least 2 ranks (mpiexec -n 4 ...)", file=sys.stderr)
        return 2
    import cupyx  # noqa: PLC0415

    rng = cp.random.default_rng(rank)
    a = cp.asfortranarray(rng.standard_normal((m, k)))
    b = cp.asfortranarray(rng.standard_normal((k, n)))
    c = cp.empty((m, n), order="F")
    chunk = args.copy_mib << 20
    host = cupyx.empty_pinned((chunk,), dtype=np.uint8)
    host[:] = 1
    dev = cp.empty(chunk, dtype=np.uint8)
    stream = cp.cuda.Stream(non_blocking=True)
    side = cp.cuda.Stream(non_blocking=True)  # the communication stream's part

    def queue_copies():
        dev.set(host, stream=side)
        dev.get(stream=side, out=host)
        return side

    def timed_rounds(spec, seconds: float) -> list[float]:
        times, end = [], time.perf_counter() + seconds
        while time.perf_counter() < end:
            times += _round(cp, a, b, c, stream, queue_copies, *spec, timed=True)
        return times

    timed_rounds((1, 0), 0.2)  # warm: cuBLAS handle, clocks
    _round(cp, a, b, c, stream, queue_copies, 0, 1)
    results = {}
    for phase, (mine, theirs) in PHASES.items():
        comm.Barrier()
        if rank == 0:
            t0 = time.perf_counter()
            if mine is None:
                time.sleep(args.seconds)
                times = []
            else:
                times = timed_rounds(mine, args.seconds)
            elapsed = time.perf_counter() - t0
            for r in range(1, size):
                comm.send(None, dest=r, tag=_STOP)
            rounds = comm.reduce(0, op=MPI.SUM, root=0)  # the other ranks' rounds, all together
            gemms, chunks = (theirs or (0, 0))[:2]
            row = {"gemms": len(times), "others_gemms": rounds * gemms, "others_chunks": rounds * chunks,
                   "seconds": elapsed, "copies_gbps": 2 * rounds * chunks * chunk / elapsed / 1e9}
            if times:
                row.update(median_ms=float(np.median(times)), p90_ms=float(np.percentile(times, 90)),
                           max_ms=float(np.max(times)))
            results[phase] = row
        else:
            if theirs is None:
                _until_stopped(comm, lambda: time.sleep(0.001))
                done = 0
            else:
                done = _until_stopped(comm, lambda spec=theirs: _round(cp, a, b, c, stream, queue_copies, *spec))
            comm.reduce(done, op=MPI.SUM, root=0)
    if rank == 0:
        flops = 2.0 * m * n * k
        print(f"GPU 0 shared by {size} ranks; rank 0's GEMM {m}x{n}x{k} float64, the others' copies "
              f"{args.copy_mib} MiB each way")
        print(f"{'phase':16s} {'GEMMs':>6s} {'median ms':>10s} {'p90 ms':>8s} {'max ms':>8s} {'GPU TFLOP/s':>12s} "
              f"{'copies GB/s':>12s}")
        for phase, row in results.items():
            row["gpu_tflops"] = (row["gemms"] + row["others_gemms"]) * flops / row["seconds"] / 1e12  # every GEMM
            if row["gemms"]:
                print(f"{phase:16s} {row['gemms']:6d} {row['median_ms']:10.3f} {row['p90_ms']:8.3f} "
                      f"{row['max_ms']:8.3f} {row['gpu_tflops']:12.2f} {row['copies_gbps']:12.1f}")
            else:
                print(f"{phase:16s} {'-':>6s} {'-':>10s} {'-':>8s} {'-':>8s} {'-':>12s} {row['copies_gbps']:12.1f}")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"ranks": size, "shape": [m, n, k], "copy_mib": args.copy_mib, "phases": results}, f,
                          indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
