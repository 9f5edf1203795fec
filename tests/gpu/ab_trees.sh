#!/usr/bin/env bash
# The product's speed of this tree against another (OLD: a directory holding that tree's hpcmm/), in
# turns inside one call: ROUNDS rounds of `python -m hpcmm` at each rank count of AB_RANKS, the two
# trees alternating, each run verified; one line per run, then the medians.
#
#   OLD=.old bash tests/gpu/ab_trees.sh     (AB_SIZE, AB_ITERS, AB_RANKS, ROUNDS, MPIEXEC)
set -u
cd "$(dirname "$0")/../.."
here=$PWD
OUT=${OUT:-/tmp/hpcmm-ab}
MPIEXEC=${MPIEXEC:-mpiexec}
mkdir -p "$OUT"
work=$(mktemp -d)
for round in $(seq "${ROUNDS:-2}"); do
  for ranks in ${AB_RANKS:-1 2 8}; do
    for tree in old new; do
      dir=$here; [ "$tree" = old ] && dir=$(cd "$OLD" && pwd)
      out=$work/$tree-$ranks-$round.h5
      # python -m takes hpcmm from the working directory first: each tree runs from its own.
      (cd "$dir" && timeout 300 "$MPIEXEC" -n "$ranks" python3 -m hpcmm --m "${AB_SIZE:-8192}" \
        --iters "${AB_ITERS:-10}" --warmup 2 --out "$out") > "$OUT/$tree-$ranks-$round.log" 2>&1
      python3 - "$out" "$tree" "$ranks" "$round" <<'PY' | tee -a "$OUT/ab.txt"
import sys, h5py
path, tree, ranks, rnd = sys.argv[1:]
try:
    with h5py.File(path, "r") as f:
        s = f["summary"].attrs
        print(f"{tree} ranks={ranks} round={rnd} tflops={s['tflops']:.3f} verified={bool(s['verified'])}")
except OSError as exc:
    print(f"{tree} ranks={ranks} round={rnd} tflops=nan error={exc}")
PY
    done
  done
done
python3 - "$OUT/ab.txt" <<'PY' | tee "$OUT/ab-medians.txt"
import re, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    m = re.match(r"(\w+) ranks=(\d+) round=\d+ tflops=([\d.na]+)", line)
    if m:
        rows.setdefault((int(m[2]), m[1]), []).append(float(m[3]))
for ranks in sorted({r for r, _ in rows}):
    old, new = (rows.get((ranks, t), [float("nan")]) for t in ("old", "new"))
    o, n = statistics.median(old), statistics.median(new)
    print(f"ranks {ranks}: old {o:.2f} [{min(old):.2f}-{max(old):.2f}]  new {n:.2f} [{min(new):.2f}-{max(new):.2f}]  "
          f"new/old {n / o:.3f}")
PY
