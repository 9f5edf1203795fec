#!/usr/bin/env bash
# The memory check at its limit, on one GPU node: for each case RANKS:DTYPE, the largest square
# problem the check accepts (from the refusal of a problem far too big) must run, and the one 2 %
# larger must be refused (exit 2, before any work).  RANKS:DTYPE:K starts from m = n = 400000 and
# that k instead: C fills the device and A and B stay small, so that the host draws little.  Each accepted run's prediction (the ranks'
# /memory needed_bytes added up) beside what was used: cupy's pool (/memory peak_bytes added up)
# and the driver's peak for the whole GPU (nvidia-smi, sampled every 100 ms, less what was in use
# before the run: CUDA contexts included).
#
#   bash tests/gpu/memory_sweep.sh                        (MEMORY_CASES="1:float64 8:float64 ...")
#   MEMORY_SIZES="65536" MEMORY_CASES="1:float64" bash tests/gpu/memory_sweep.sh   (given sizes)
#   MEMORY_CASES="1:bfloat16:4096" bash tests/gpu/memory_sweep.sh                   (a thin k)
#
# Rows go to $OUT/rows.tsv and are printed last (sizes in GiB).  Exit status: the number of cases
# where an accepted problem failed or a refused one was not refused.  Where .device/env.sh is
# there (the kit), it is sourced in system mode (MEMORY_KIT=no: the mpiexec on PATH).
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/hpcmm-memory}
work=/tmp/hpcmm-memory-work
mkdir -p "$OUT" "$work"
log=$OUT/memory.log
rows=$OUT/rows.tsv
: > "$log"
printf 'ranks\tdtype\tm:n:k\twant\trc\tpredicted_gib\tpool_gib\tdriver_gib\tdriver/predicted\ttflops\tseconds\n' > "$rows"
CASES=${MEMORY_CASES:-1:float64 2:float64 8:float64 1:float32 1:bfloat16}
LIMIT=${MEMORY_TIMEOUT:-300}
py=${MEMORY_PYTHON:-python3}
if [ -f .device/env.sh ] && [ "${MEMORY_KIT:-yes}" != no ]; then
  # shellcheck disable=SC1091
  source .device/env.sh system >> "$log" 2>&1 || { echo "env.sh failed" >&2; exit 1; }
fi
failed=0

used_mib() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 2>/dev/null | head -1; }

# run RANKS DTYPE M:N:K WANT(accept|refuse)
run() {
  local ranks=$1 dtype=$2 n=$3 want=$4
  local m=${n%%:*} rest=${n#*:}
  local nn=${rest%%:*} k=${rest#*:}
  local out=$work/$ranks-$dtype-$m-$nn-$k.h5 samples=$work/smi-$ranks-$dtype-$m-$nn-$k.txt
  rm -f "$out"
  local before
  before=$(used_mib)
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 -lms 100 > "$samples" 2>/dev/null &
  local smi=$!
  echo "=== $ranks:$dtype $n ($want)" >> "$log"
  local t0=$SECONDS
  timeout --foreground "$LIMIT" mpiexec -n "$ranks" $py -m hpcmm --m "$m" --n "$nn" --k "$k" --dtype "$dtype" --iters 1 --warmup 0 \
    --no-timeline --quiet --out "$out" >> "$log" 2>&1
  local rc=$? seconds=$((SECONDS - t0))
  kill "$smi" 2>/dev/null; wait "$smi" 2>/dev/null
  local facts="-\t-\t-\t-\t-"
  if [ "$rc" = 0 ]; then
    facts=$($py - "$out" "$samples" "${before:-0}" <<'PY' 2>> "$log"
import sys, h5py
path, samples, before = sys.argv[1], sys.argv[2], float(sys.argv[3])
with h5py.File(path, "r") as f:
    mem, s = f["memory"], f["summary"].attrs
    predicted = float(mem["needed_bytes"][:].sum()) / 2**30
    pool = float(mem["peak_bytes"][:].sum()) / 2**30
    tflops = float(s["tflops"])
seen = [float(x) for x in open(samples).read().split() if x.replace(".", "").isdigit()]
driver = (max(seen) - before) / 1024 if seen else float("nan")
print(f"{predicted:.2f}\t{pool:.2f}\t{driver:.2f}\t{driver / predicted:.3f}\t{tflops:.2f}")
PY
)
  fi
  printf '%s\t%s\t%s\t%s\t%s\t%b\t%s\n' "$ranks" "$dtype" "$n" "$want" "$rc" "$facts" "$seconds" >> "$rows"
  if { [ "$want" = accept ] && [ "$rc" != 0 ]; } || { [ "$want" = refuse ] && [ "$rc" != 2 ]; }; then
    failed=$((failed + 1))
  fi
}

for case in $CASES; do
  ranks=${case%%:*} rest=${case#*:}
  dtype=${rest%%:*} start_k=400000
  [ "$rest" != "$dtype" ] && start_k=${rest#*:}
  if [ -n "${MEMORY_SIZES:-}" ]; then
    for n in $MEMORY_SIZES; do run "$ranks" "$dtype" "$n:$n:$n" accept; done
    continue
  fi
  # The check's own answer: the largest of this shape that fits.
  refusal=$(timeout --foreground 120 mpiexec -n "$ranks" $py -m hpcmm --m 400000 --n 400000 --k "$start_k" \
    --dtype "$dtype" --quiet --out "$work/refused.h5" 2>&1)
  echo "$refusal" >> "$log"
  fits=$(echo "$refusal" | grep -o 'fits: m=[0-9]*, n=[0-9]*, k=[0-9]*' | head -1)
  if [ -z "$fits" ]; then
    printf '%s\t%s\t-\tlargest\tnone said\n' "$ranks" "$dtype" >> "$rows"; failed=$((failed + 1)); continue
  fi
  read -r m n k <<< "$(echo "$fits" | grep -o '[0-9][0-9]*' | tr '\n' ' ')"
  run "$ranks" "$dtype" "$m:$n:$k" accept
  run "$ranks" "$dtype" "$((m * 102 / 100)):$((n * 102 / 100)):$((k * 102 / 100))" refuse
done
sed "s/\t/  /g" "$rows"
echo "failed cases: $failed"
exit "$failed"
