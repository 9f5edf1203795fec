"""A co-runner for tests/gpu/dynamic_check.sh: another program's GEMM loop on the GPU.

It takes the GPU's time (or, under MPS, its SMs) away from hpcmm's ranks from a given moment on,
the way a second job on a shared GPU does::

    python tests/gpu/corunner.py --go GO --delay 9.5 --seconds 120 --record corunner.json --stop STOP

After its own warm-up (CUDA context, operands, one GEMM) the loop waits until the file ``--go``
exists (the caller creates it as it launches hpcmm), then ``--delay`` seconds more; it writes
``{"start": ...}`` to ``--record`` at once (a reading of ``time.perf_counter``: on Linux the host's
``CLOCK_MONOTONIC``, the clock of ``/timings/product_start_seconds``; a run killed later still
says when it started), multiplies until ``--seconds`` have passed or the file ``--stop`` exists, and
adds its end and rate.  Ending it by ``--stop`` rather than a signal matters under MPS: a client
killed while its kernels run left the next client's context refused (cudaErrorDevicesUnavailable)
in every other run; the context is also retried for a while for the same reason.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import cupy as cp


def _write(path: str, record: dict) -> None:
    """Replace ``path`` whole (a reader never sees half a record)."""
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(record, f)
    os.replace(tmp, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--go", required=True, help="start once this file exists (after --delay)")
    parser.add_argument("--delay", type=float, default=0.0, help="seconds from --go to the first GEMM")
    parser.add_argument("--seconds", type=float, default=120.0, help="how long to multiply")
    parser.add_argument("--n", type=int, default=8192, help="order of the square float64 GEMM")
    parser.add_argument("--record", required=True, help="JSON file: start, end, GEMMs, TFLOP/s")
    parser.add_argument("--stop", help="end the loop once this file exists")
    args = parser.parse_args()
    for attempt in range(50):  # an MPS server still tearing down a client refuses new ones a moment
        try:
            cp.cuda.Device().synchronize()
            break
        except cp.cuda.runtime.CUDARuntimeError:
            if attempt == 49:
                raise
            time.sleep(0.2)
    x = cp.random.default_rng(1).random((args.n, args.n))
    y = cp.random.default_rng(2).random((args.n, args.n))
    z = cp.matmul(x, y)
    cp.cuda.Device().synchronize()
    while not os.path.exists(args.go):
        time.sleep(0.001)
    start_at = time.perf_counter() + args.delay
    while time.perf_counter() < start_at:
        time.sleep(0.001)
    start = time.perf_counter()
    record = {"start": start, "n": args.n}
    _write(args.record, record)
    gemms = 0
    while time.perf_counter() - start < args.seconds and not (args.stop and os.path.exists(args.stop)):
        cp.matmul(x, y, out=z)
        gemms += 1
        if gemms % 2 == 0:  # a short queue: the loop ends soon after its time is up
            cp.cuda.Device().synchronize()
    cp.cuda.Device().synchronize()
    end = time.perf_counter()
    record.update(end=end, gemms=gemms, tflops=2.0 * args.n**3 * gemms / (end - start) / 1e12)
    _write(args.record, record)


if __name__ == "__main__":
    main()
