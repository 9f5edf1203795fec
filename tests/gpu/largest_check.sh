#!/usr/bin/env bash
# The largest float64 problem at one rank on one GPU against cupy.matmul on the same GPU, in one call.
#
#   LARGEST_N=65536 bash tests/gpu/largest_check.sh      (OUT: logs and the results file)
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/hpcmm-largest}
N=${LARGEST_N:-65536}
mkdir -p "$OUT"
timeout --foreground 420 python3 -m hpcmm --m "$N" --iters 2 --warmup 1 --no-timeline --out "$OUT/largest-$N.h5" \
  > "$OUT/hpcmm-$N.log" 2>&1
echo "hpcmm rc=$?"; tail -n 25 "$OUT/hpcmm-$N.log"
python3 - "$OUT/largest-$N.h5" "$N" <<'PY'
import sys, time
import h5py
import cupy as cp
path, n = sys.argv[1], int(sys.argv[2])
try:
    with h5py.File(path, "r") as f:
        s, mem = f["summary"].attrs, f["memory"]
        print(f"hpcmm {n}^3 float64: {s['tflops']:.2f} TFLOP/s, verified={bool(s['verified'])}, "
              f"peak {mem['peak_bytes'][0] / 2**30:.1f} GiB, needed {mem['needed_bytes'][0] / 2**30:.1f} GiB")
        hp = float(s["tflops"])
except OSError as exc:
    print("no results file:", exc); hp = float("nan")
a = cp.random.default_rng(1).standard_normal((n, n))
b = cp.random.default_rng(2).standard_normal((n, n))
c = a @ b
cp.cuda.Device().synchronize()
best = 0.0
for _ in range(2):
    t = time.perf_counter(); cp.matmul(a, b, out=c); cp.cuda.Device().synchronize()
    best = max(best, 2 * n ** 3 / (time.perf_counter() - t) / 1e12)
print(f"cupy.matmul {n}^3 float64 (C order): {best:.2f} TFLOP/s; hpcmm / cupy = {hp / best:.3f}")
PY
