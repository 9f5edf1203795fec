"""The host time of ``Matmul.execute`` beside the product's, for operands in hpcmm's blocks and copied in.

    mpiexec -n 8 python tests/gpu/execute_overhead.py 8192 float64 [--profile]

Prints, on rank 0, one JSON line per operand kind: the medians over 10 executes of the call's
window (first rank's call to last rank's return) and of the product's on the host (first rank's
first launch to the last rank's return from the product's closing synchronize), on the clock the
ranks of one node share, and the difference over the product: the host's part of an execute
(``host_s``).  Beside it ``outside_events_s``: the call's window less the product's as its device
events time it (first rank's launch plus its events' span, as the command line times a product);
on a GPU shared by time slices it adds the slices in which the device ran other ranks' work
before this rank's first event or after its last.  ``--profile``: then
rank 0's functions by their own time over 10 more executes on hpcmm's blocks (cProfile), and the
host's seconds of one execute before its product's window and after it.
"""
import cProfile
import json
import pstats
import sys

import numpy as np
from mpi4py import MPI

import hpcmm

comm = MPI.COMM_WORLD
size, dtype = int(sys.argv[1]), sys.argv[2]
with hpcmm.Matmul(comm, size, size, size, dtype) as mm:
    plan = mm.plan()
    xp = mm.empty("C").__class__.__module__.split(".")[0]
    xp = __import__(xp)
    a_own, b_own = mm.empty("A"), mm.empty("B")
    rng = xp.random.default_rng(comm.rank) if hasattr(xp.random, "default_rng") else xp.random
    a_own[...] = rng.standard_normal(a_own.shape)
    b_own[...] = rng.standard_normal(b_own.shape)
    c_own = mm.empty("C")
    kinds = {"own blocks": (a_own, b_own, c_own), "copied in": (a_own.copy(), b_own.copy(), c_own.copy())}
    for kind, (a, b, c) in kinds.items():
        calls, products, by_events = [], [], []
        for i in range(13):
            mm.execute(a, b, c)
            if i >= 3:
                last = mm.last
                marks = comm.allgather((last.start, last.start + last.seconds, last.product_start,
                                        last.product_end, last.product_start + last.product_seconds))
                calls.append(max(m[1] for m in marks) - min(m[0] for m in marks))
                products.append(max(m[3] for m in marks) - min(m[2] for m in marks))
                by_events.append(max(m[4] for m in marks) - min(m[2] for m in marks))
        call, product, events = (float(np.median(x)) for x in (calls, products, by_events))
        if comm.rank == 0:
            print(json.dumps({"ranks": comm.size, "n": size, "dtype": dtype, "operands": kind, "execute_s": call,
                              "product_s": product, "host_s": call - product,
                              "host_fraction": (call - product) / product,
                              "product_events_s": events, "outside_events_s": call - events,
                              "outside_events_fraction": (call - events) / events,
                              "tflops": 2 * size ** 3 / call / 1e12, "plan_s": mm.plan_seconds,
                              "backend": plan.backend}))

    if "--profile" in sys.argv:
        # Where the host's time of an execute goes: the two device synchronizations and the engine's
        # entry, timed by wrapping them, beside the product's window.
        from time import perf_counter

        engine, backend = mm.assembly.engine, mm.assembly.backend
        marks = {"sync": [], "multiply": []}
        sync, multiply = backend.synchronize, engine.multiply

        def timed_sync():
            sync()
            marks["sync"].append(perf_counter())

        def timed_multiply():
            marks["multiply"].append(perf_counter())
            return multiply()

        backend.synchronize, engine.multiply = timed_sync, timed_multiply
        profile = cProfile.Profile()
        parts = []
        for _ in range(10):
            comm.Barrier()
            marks["sync"].clear()
            marks["multiply"].clear()
            profile.enable()
            mm.execute(a_own, b_own, c_own)
            profile.disable()
            last = mm.last
            end = last.product_start + last.product_seconds
            first_sync, entry, last_sync = marks["sync"][0], marks["multiply"][0], marks["sync"][-1]
            parts.append({"to_first_sync": first_sync - last.start, "agreement": entry - first_sync,
                          "entry_to_product": last.product_start - entry, "product_end_to_sync": last_sync - end,
                          "sync_to_return": last.start + last.seconds - last_sync})
        backend.synchronize, engine.multiply = sync, multiply
        if comm.rank == 0:
            print(json.dumps({"ranks": comm.size, "median_us": {k: round(float(np.median([p[k] for p in parts])) * 1e6, 1)
                                                               for k in parts[0]}}))
            pstats.Stats(profile, stream=sys.stdout).sort_stats("tottime").print_stats(18)
