#!/usr/bin/env bash
# The library on a GPU node, in one call: hpcmm.Matmul against numpy at 1, 2 and 8 ranks on the node's
# GPUs (tests/mpi/test_matmul_mpi.py), examples/matmul.py with numpy, cupy and torch at 4 ranks, and
# the host time of execute() beside the product's (tests/gpu/execute_overhead.py).
#
#   bash tests/gpu/matmul_check.sh            (MPIEXEC names the launcher; default: mpiexec on PATH)
#
# Logs go to $OUT (default /tmp/hpcmm-matmul); the exit status is the number of failed steps.
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/hpcmm-matmul}
MPIEXEC=${MPIEXEC:-mpiexec}
mkdir -p "$OUT"
export OMP_NUM_THREADS=1
failed=0
step() {  # step NAME LIMIT command...
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout --foreground "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  printf '%-28s rc=%-3s %4ss  %s\n' "$name" "$rc" "$((SECONDS - t0))" "$(tail -n 1 "$OUT/$name.log")" | tee -a "$OUT/table.txt"
  [ "$rc" = 0 ] || failed=$((failed + 1))
}
for ranks in ${MATMUL_RANKS:-1 2 8}; do
  step "pytest-matmul-$ranks" 300 "$MPIEXEC" -n "$ranks" python3 -m pytest --with-mpi -q -p no:cacheprovider \
    tests/mpi/test_matmul_mpi.py
done
for kind in numpy cupy torch; do
  step "example-4-$kind" 180 "$MPIEXEC" -n 4 python3 examples/matmul.py "$kind"
done
for ranks in ${OVERHEAD_RANKS:-1 8}; do
  step "overhead-$ranks-8192" 240 "$MPIEXEC" -n "$ranks" python3 tests/gpu/execute_overhead.py 8192 float64
done
exit "$failed"
