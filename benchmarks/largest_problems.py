"""The largest square problem per GPU count, ranks per GPU and type, as hpcmm's memory rule gives it.

    python benchmarks/largest_problems.py --free-gib 139.3 --gpus 1 2 4 8 --ranks-per-gpu 1 2 8

Pure arithmetic (no GPU, no MPI job): for each case the default grid of the job (one node), every
GPU with the same free memory, and :func:`hpcmm.cli.info.largest_square`.  Prints a Markdown table and,
with ``--out``, writes the rows as JSON.  What the rule leaves out (the CUDA context, the memory
pool's rounding, the GEMM library's workspace: about 4.7 GiB beside 54 GiB of operands on one H200
at 49152³ float64, docs/performance.md) is not subtracted: pass a smaller ``--free-gib`` for it.
"""

from __future__ import annotations

import argparse
import json
import sys

from hpcmm.planning.grid_orientation import default_grid
from hpcmm.cli.info import largest_square

KINDS = {"float64": 8, "float32": 4, "bfloat16": 2}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--free-gib", type=float, default=139.3, help="free memory of each GPU (default 139.3)")
    parser.add_argument("--gpus", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--ranks-per-gpu", type=int, nargs="+", default=[1, 2, 8])
    parser.add_argument("--out", help="write the rows as JSON here")
    ns = parser.parse_args()
    free = int(ns.free_gib * 2**30)
    rows = []
    for gpus in ns.gpus:
        for per_gpu in ns.ranks_per_gpu:
            ranks = gpus * per_gpu
            row = {"gpus": gpus, "ranks_per_gpu": per_gpu, "free_gib": ns.free_gib}
            for kind, itemsize in KINDS.items():
                grid = default_grid(ranks, kind, on_gpu=True, shared=per_gpu > 1)
                devices = [[{"rank": g * per_gpu + i, "free_bytes": free} for i in range(per_gpu)]
                           for g in range(gpus)]
                row[kind] = largest_square(kind, itemsize, f"{grid.rows}x{grid.cols}", devices, on_gpu=True)
                row[f"{kind}_grid"] = f"{grid.rows}x{grid.cols}"
            rows.append(row)
    print("| GPUs | ranks per GPU | " + " | ".join(KINDS) + " |")
    print("|---|---|" + "---|" * len(KINDS))
    for row in rows:
        print(f"| {row['gpus']} | {row['ranks_per_gpu']} | " + " | ".join(str(row[k]) for k in KINDS) + " |")
    if ns.out:
        with open(ns.out, "w") as fh:
            json.dump({"command": " ".join(["python", "benchmarks/largest_problems.py", *sys.argv[1:]]),
                       "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
