#!/usr/bin/env bash
# --balance dynamic against the static balances on one node's GPU(s), in one call.
#
#   bash tests/gpu/dynamic_check.sh          (about 5 minutes on one H200)
#
# 1. Correctness: uneven products at 2 and 4 ranks with --balance dynamic --verify full.
# 2. Ranks time-sliced on the GPU (no MPS): for each size of DYN_SIZES (default "8192 16384",
#    float64), 1 rank, then DYN_RANKS ranks (default "2 8") with share and with dynamic, in turns,
#    DYN_ROUNDS rounds (default 3): TFLOP/s, the load imbalance, the tiles taken.
# 3. Under an MPS control daemon of its own: 2 ranks, one given 25 % of the SMs and the other 75 %
#    (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, an MPMD launch), with share, measured (the static weights
#    measured at start-up) and dynamic, in turns (DYN_MPS_N, default 16384; DYN_MPS=0 skips it).
# Each run's row goes to $OUT/rows.tsv (round, case, ranks, n, balance, rc, TFLOP/s, imbalance,
# tiles taken); the medians and their ratios are printed last.  Exit status: failed runs.
# Where .device/env.sh is there (the kit), it is sourced in system mode (DYN_KIT=no: the mpiexec on PATH).
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/hpcmm-dynamic}
work=/tmp/hpcmm-dynamic-work
mkdir -p "$OUT" "$work"
log=$OUT/dynamic.log
rows=$OUT/rows.tsv
: > "$log"
printf 'round\tcase\tranks\tn\tbalance\trc\ttflops\timbalance\ttaken\n' > "$rows"
export OMP_NUM_THREADS=1
SIZES=${DYN_SIZES:-8192 16384}
RANKS=${DYN_RANKS:-2 8}
ROUNDS=${DYN_ROUNDS:-3}
LIMIT=${DYN_TIMEOUT:-240}
py=${DYN_PYTHON:-python3}
if [ -f .device/env.sh ] && [ "${DYN_KIT:-yes}" != no ]; then
  # shellcheck disable=SC1091
  source .device/env.sh system >> "$log" 2>&1 || { echo "env.sh failed" >&2; exit 1; }
fi
failed=0

outfile() { echo "$work/$2-$3-$4-$5-$1.h5"; }  # outfile ROUND CASE RANKS N BALANCE

# one ROUND CASE RANKS N BALANCE -- launcher words... : one run (given --out $(outfile ...) where
# the command names it itself, as an MPMD launch must for each of its programs), its row in rows.tsv
one() {
  local round=$1 case=$2 ranks=$3 n=$4 balance=$5; shift 6
  local out
  out=$(outfile "$round" "$case" "$ranks" "$n" "$balance")
  rm -f "$out"
  local cmd=("$@")
  [[ " $* " == *" --out "* ]] || cmd+=(--out "$out")
  echo "=== $case round $round: ${cmd[*]}" >> "$log"
  timeout --foreground "$LIMIT" "${cmd[@]}" >> "$log" 2>&1
  local rc=$?
  [ "$rc" = 0 ] || failed=$((failed + 1))
  local facts="nan\tnan\tnan"
  if [ "$rc" = 0 ]; then
    facts=$($py - "$out" <<'PY' 2>> "$log"
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    s = f["summary"].attrs
    print(f"{s['tflops']:.3f}\t{s['load_imbalance']:.4f}\t{s.get('dynamic_taken_fraction', 0.0):.4f}")
PY
)
  fi
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%b\n' "$round" "$case" "$ranks" "$n" "$balance" "$rc" "$facts" >> "$rows"
}

# 1. correctness
for ranks in 2 4; do
  one 0 verify "$ranks" 10007 dynamic -- mpiexec -n "$ranks" $py -m hpcmm --m 10007 --n 6001 --k 3001 \
    --balance dynamic --verify full --quiet
done

# 2. time-sliced
for round in $(seq "$ROUNDS"); do
  for n in $SIZES; do
    one "$round" sliced 1 "$n" share -- mpiexec -n 1 $py -m hpcmm --m "$n" --quiet
    for ranks in $RANKS; do
      for balance in share dynamic; do
        one "$round" sliced "$ranks" "$n" "$balance" -- mpiexec -n "$ranks" $py -m hpcmm --m "$n" --balance "$balance" --quiet
      done
    done
  done
done

# 3. MPS, 25 % and 75 % of the SMs
if [ "${DYN_MPS:-1}" != 0 ] && command -v nvidia-cuda-mps-control >/dev/null; then
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/hpcmm-dyn-mps-pipe-$$ CUDA_MPS_LOG_DIRECTORY=/tmp/hpcmm-dyn-mps-log-$$
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  trap 'echo quit | nvidia-cuda-mps-control >/dev/null 2>&1' EXIT
  if nvidia-cuda-mps-control -d >> "$log" 2>&1; then
    n=${DYN_MPS_N:-16384}
    for round in $(seq "$ROUNDS"); do
      for balance in share measured dynamic; do
        args=(-m hpcmm --m "$n" --balance "$balance" --quiet --out "$(outfile "$round" mps25-75 2 "$n" "$balance")")
        one "$round" mps25-75 2 "$n" "$balance" -- mpiexec -n 1 env CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25 $py "${args[@]}" \
          : -n 1 env CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=75 $py "${args[@]}"
      done
    done
    echo quit | nvidia-cuda-mps-control >> "$log" 2>&1
    trap - EXIT
  else
    echo "MPS daemon did not start (see $log)" | tee -a "$log"
  fi
fi

# The medians, and each against its reference of the same call.
$py - "$rows" <<'PY'
import csv, statistics, sys
from collections import defaultdict
runs = defaultdict(list)
with open(sys.argv[1]) as f:
    for r in csv.DictReader(f, delimiter="\t"):
        if r["rc"] == "0":
            runs[(r["case"], int(r["ranks"]), int(r["n"]), r["balance"])].append(r)
def med(key, field):
    vals = [float(r[field]) for r in runs.get(key, [])]
    return statistics.median(vals) if vals else float("nan")
print(f"{'case':<9} {'ranks':>5} {'n':>6} {'balance':<9} {'runs':>4} {'TFLOP/s median [range]':<24} "
      f"{'imbalance':>9} {'taken':>6} {'ratio':>6}  reference")
for key in sorted(runs, key=lambda k: (k[0], k[2], k[1], k[3])):
    case, ranks, n, balance = key
    vals = sorted(float(r["tflops"]) for r in runs[key])
    if case == "sliced":
        ref, what = ("sliced", 1, n, "share"), "1 rank"
    elif case == "mps25-75":
        ref, what = ("mps25-75", 2, n, "measured"), "measured"
    else:
        ref, what = None, ""
    ratio = med(key, "tflops") / med(ref, "tflops") if ref else float("nan")
    print(f"{case:<9} {ranks:>5} {n:>6} {balance:<9} {len(vals):>4} "
          f"{statistics.median(vals):>8.2f} [{vals[0]:.2f}-{vals[-1]:.2f}]{'':<3} "
          f"{100 * med(key, 'imbalance'):>8.1f}% {100 * med(key, 'taken'):>5.1f}% {ratio:>6.3f}  {what}")
PY
echo "failed runs: $failed"
exit "$failed"
