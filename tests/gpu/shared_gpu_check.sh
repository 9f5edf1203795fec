#!/usr/bin/env bash
# Several ranks on the GPUs of one node, with and without an MPS control daemon.
#
#   bash tests/gpu/shared_gpu_check.sh        (a node with 2 GPUs; about 10 minutes)
#
# For each of "no MPS" and "MPS" it runs float64 16384 (one call each) at 2, 3, 5 and 8 ranks
# with the default balance, and at 3, 5 and 8 ranks with --balance none, measured and product;
# an uneven product, fully verified, at 3, 5 and 8 ranks (default, measured and product balance); and
# tests/gpu/shared_gpu_probe.py at 3 ranks (MPS seen as expected, weighted product right).
# The MPS daemon gets its own pipe and log directories under /tmp; it is started before the
# MPS runs (its start is timed) and stopped after them, on success and on failure (trap).
# Each run's file must also say what ran: /summary balance as asked (auto by default: dynamic on a time-sliced GPU) and, where
# ranks share a GPU, mps true with the daemon and false without it.  Where an hpcmm without the
# --balance option runs this script, the cases that need it are recorded as SKIP.
#
#   SHARED_N (default 16384), SHARED_RANKS ("2 3 5 8"), SHARED_TIMEOUT (s per run, 300), SHARED_REPEATS
#   (rounds of the default-balance runs, every rank count in turn, 1; the table adds their medians),
#   SHARED_UNEVEN ("10007 6001 3001"), SHARED_PHASES ("off on"), SHARED_BALANCES (the other
#   balances run at 16384 beside the default: "none measured product"; "" for none) and SHARED_UNEVEN_BALANCES
#   (the balances of the verified uneven product: "default measured product") tune it.
#   SHARED_VARIANTS adds runs of the float64 product with other options, in each phase, one per item
#   RANKS:OPTION,VALUE,... (e.g. "8:--grid,1x8 8:--panel,1024"; default none); SHARED_CEILING=1 runs
#   tests/gpu/sharing_ceiling.py in each phase (the GEMMs alone: 1 rank on GPU 0 with a 2-rank run's
#   block, then 2 and 4 ranks on GPU 0 with the 3- and 8-rank runs' blocks, the latter on 2 x 4 and on 1 x 8).
#
# Expects the kit of ../shared/device in .device/ (sourced in `system` mode) when it is there.
# Logs, HDF5 files and the daemon's logs go to $OUT (or /tmp/hpcmm-shared); the table is
# printed last.  Exit status: the number of failed checks (0 = all passed).
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/hpcmm-shared}
work=/tmp/hpcmm-shared-work
mkdir -p "$OUT" "$work"
log=$OUT/shared.log
table=$work/table.txt
: > "$table"
: > "$log"
export OMP_NUM_THREADS=1
N=${SHARED_N:-16384}
RANKS=${SHARED_RANKS:-2 3 5 8}
read -r UM UN UK <<< "${SHARED_UNEVEN:-10007 6001 3001}"
LIMIT=${SHARED_TIMEOUT:-300}
REPEATS=${SHARED_REPEATS:-1}
REP=

if [ -f .device/env.sh ]; then
  # shellcheck disable=SC1091
  source .device/env.sh system >> "$log" 2>&1 || { echo "env.sh failed" >&2; exit 1; }
fi

# -- the MPS control daemon: ours alone, always stopped ----------------------------------
mps_pipe=/tmp/hpcmm-mps-pipe-$$
mps_log=/tmp/hpcmm-mps-log-$$
mps_pid=
# The clients look here in both phases, so "no MPS" cannot pick up a daemon of someone else.
export CUDA_MPS_PIPE_DIRECTORY=$mps_pipe CUDA_MPS_LOG_DIRECTORY=$mps_log
mkdir -p "$mps_pipe" "$mps_log"

start_mps() {
  local t0 t1
  t0=$(date +%s.%N)
  nvidia-cuda-mps-control -d >> "$log" 2>&1 || { echo "nvidia-cuda-mps-control -d failed" >> "$log"; return 1; }
  for _ in $(seq 200); do [ -S "$mps_pipe/control" ] && break; sleep 0.05; done
  t1=$(date +%s.%N)
  [ -S "$mps_pipe/control" ] || { echo "no control socket in $mps_pipe after 10 s" >> "$log"; return 1; }
  mps_pid=$(cat "$mps_pipe/nvidia-cuda-mps-control.pid" 2>/dev/null)
  mps_start=$(python3 -c "print(f'{$t1 - $t0:.3f}')")
  echo "=== MPS control daemon (pid ${mps_pid:-?}) ready after $mps_start s" >> "$log"
}

stop_mps() {
  [ -n "$mps_pid" ] || mps_pid=$(cat "$mps_pipe/nvidia-cuda-mps-control.pid" 2>/dev/null)
  [ -S "$mps_pipe/control" ] || [ -n "$mps_pid" ] || return 0
  echo quit | nvidia-cuda-mps-control >> "$log" 2>&1
  if [ -n "$mps_pid" ]; then
    for _ in $(seq 300); do [ -d "/proc/$mps_pid" ] || break; sleep 0.05; done
    [ -d "/proc/$mps_pid" ] && echo "MPS control daemon $mps_pid still running 15 s after quit" >> "$log"
  fi
  mps_pid=
  echo "=== MPS control daemon stopped" >> "$log"
}

cleanup() {
  stop_mps
  cp -r "$mps_log" "$OUT/mps-log" 2>/dev/null
  rm -rf "$mps_pipe" "$mps_log"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# -- one run, one row ------------------------------------------------------------
has_balance=0
python3 -m hpcmm run --help 2>/dev/null | grep -q -- '--balance' && has_balance=1

record() {  # record MPS RANKS BALANCE CASE STATUS TFLOPS VERIFIED IMBALANCE DETAIL  (one tab-separated row)
  local IFS=$'\t'
  echo "$*" >> "$table"
}

# run_case MPS RANKS BALANCE(default|none|measured|product) CASE -- hpcmm options...
run_case() {
  local mps=$1 ranks=$2 balance=$3 name=$4; shift 5
  local out=$work/$mps-n$ranks-$balance-$name${REP:+-r$REP}.h5 rc facts
  if [ "$balance" != default ] && [ "$has_balance" = 0 ]; then
    record "$mps" "$ranks" "$balance" "$name" SKIP - - - "no --balance option in this hpcmm"
    return
  fi
  local extra=(); [ "$balance" != default ] && extra=(--balance "$balance")
  rm -f "$out"
  echo "=== [$mps] mpiexec -n $ranks python3 -m hpcmm $* ${extra[*]} --out $out" >> "$log"
  local t0=$SECONDS
  timeout --foreground "$LIMIT" mpiexec -n "$ranks" python3 -m hpcmm "$@" "${extra[@]}" --quiet --out "$out" --overwrite >> "$log" 2>&1
  rc=$?
  if [ "$rc" != 0 ]; then
    record "$mps" "$ranks" "$balance" "$name" FAIL - - - "rc=$rc $((SECONDS - t0))s"
    return
  fi
  facts=$(python3 - "$out" "$balance" "$mps" <<'PY' 2>&1
import sys, h5py
asked = "auto" if sys.argv[2] == "default" else sys.argv[2]
with h5py.File(sys.argv[1], "r") as f:
    s = f["summary"].attrs
    pred = s.get("predicted_imbalance")
    imb = f"{'-' if pred is None else f'{pred:.3f}'}/{s['load_imbalance']:.3f}"
    wrong = []
    # The default, auto, is dynamic on a GPU that ranks time-slice (hpcmm.planning.balance.mode_for).
    sliced = int(s.get("ranks_per_gpu", 1)) > 1 and not bool(s.get("mps", False))
    ran = {"auto": "dynamic" if sliced else "share"}.get(asked, asked)
    if "balance" in s and (s["balance"] != ran or s.get("balance_asked", asked) != asked):
        wrong.append(f"balance={s['balance']} (asked {s.get('balance_asked', '?')})")
    if "mps" in s and int(s["ranks_per_gpu"]) > 1 and bool(s["mps"]) != (sys.argv[3] == "on"):
        wrong.append(f"mps={bool(s['mps'])}")
    shown = f"mps={bool(s['mps'])},{int(s['ranks_per_gpu'])}/gpu" if "mps" in s else "-"
    print(f"{s['tflops']:.2f} {bool(s['verified']) and not wrong} {imb} {shown}{' WRONG:' + ','.join(wrong) if wrong else ''}")
PY
)
  read -r tflops verified imbalance shown <<< "$facts"
  local status=PASS; [ "$verified" = True ] || status=FAIL
  record "$mps" "$ranks" "$balance" "$name" "$status" "$tflops" "$verified" "$imbalance" "$((SECONDS - t0))s $shown"
}

probe() {  # probe MPS EXPECT_ACTIVE BALANCE
  local json=$work/probe-$1-$3.json
  echo "=== [$1] mpiexec -n 3 python3 tests/gpu/shared_gpu_probe.py --balance $3" >> "$log"
  timeout --foreground "$LIMIT" mpiexec -n 3 python3 tests/gpu/shared_gpu_probe.py --balance "$3" --json "$json" >> "$log" 2>&1
  local rc=$? facts
  facts=$(python3 - "$json" "$2" <<'PY' 2>&1
import json, sys
f = json.load(open(sys.argv[1]))
want = sys.argv[2] == "1"
seen = {m["active"] for m in f["mps"]}
ok = f["verified"] and seen == {want}
print(("PASS" if ok else "FAIL"),
      f"mps={sorted(seen)}({f['mps'][0]['source']}) weights={[round(w, 3) for w in f['weights']]} "
      f"rows={f['block_sizes']['rows']} imb={f['predicted_imbalance']:.3f}/{f['measured_imbalance']:.3f}")
PY
)
  local status=${facts%% *}
  [ "$rc" = 0 ] || status=FAIL
  [ "$status" = PASS ] || [ "$status" = FAIL ] || status=FAIL
  record "$1" 3 "$3" probe "$status" - - - "rc=$rc ${facts#* }"
}

cuda_init_seconds() {  # seconds for a fresh process to make its first CUDA context (and allocation)
  python3 - <<'PY' 2>> "$log"
import time
t0 = time.perf_counter()
import cupy
cupy.cuda.Device(0).use()
cupy.zeros(1).sum().item()
print(f"{time.perf_counter() - t0:.3f}")
PY
}

# -- the runs --------------------------------------------------------------------
nvidia-smi --query-gpu=index,name,memory.total,driver_version,compute_mode --format=csv >> "$log" 2>&1
mps_start=-
init_off=$(cuda_init_seconds)
init_on=-
for phase in ${SHARED_PHASES:-off on}; do
  if [ "$phase" = on ]; then
    if ! start_mps; then
      record on - - daemon FAIL - - - "the MPS control daemon did not start (see $log)"
      continue
    fi
    init_on=$(cuda_init_seconds)  # the first client also starts the MPS server
  fi
  mpiexec -n 3 python3 -m hpcmm info >> "$log" 2>&1
  # The default-balance runs, SHARED_REPEATS rounds of every rank count in turn (the table takes the median)
  for REP in $(seq "$REPEATS"); do
    [ "$REPEATS" = 1 ] && REP=
    for ranks in $RANKS; do
      run_case "$phase" "$ranks" default "$N" -- --m "$N" --n "$N" --k "$N"
    done
  done
  REP=
  for variant in ${SHARED_VARIANTS:-}; do
    IFS=, read -r -a options <<< "${variant#*:}"
    run_case "$phase" "${variant%%:*}" default "$N$(printf '%s' "${options[@]}" | tr -d -)" -- --m "$N" --n "$N" --k "$N" "${options[@]}"
  done
  if [ "${SHARED_CEILING:-0}" = 1 ]; then
    # The GEMMs of one GPU's ranks alone, float64 N (blocks of the default grids: 1 x 2 at 2 ranks, 1 x 3 at
    # 3, where GPU 0's two ranks each hold a quarter of C, and 8 ranks on 2 x 4 and on 1 x 8)
    for spec in "1 $N"x"$((N / 2)) $((N / 2))" "2 $N"x"$((N / 4)) $((N / 8))" "4 $((N / 2))"x"$((N / 4)) $((N / 8))" \
                "4 $N"x"$((N / 8)) $((N / 8))"; do
      read -r ceiling_ranks block panel <<< "$spec"
      echo "=== [$phase] sharing ceiling: $ceiling_ranks rank(s), block $block, panel $panel" >> "$log"
      timeout --foreground "$LIMIT" mpiexec -n "$ceiling_ranks" python3 tests/gpu/sharing_ceiling.py --block "$block" --depth "$N" \
        --panel "$panel" --json "$work/ceiling-$phase-$ceiling_ranks.json" >> "$log" 2>&1
      grep -a "sharing ceiling: $ceiling_ranks rank" "$log" | tail -1 >> "$OUT/ceiling.txt"
    done
  fi
  for ranks in $RANKS; do
    [ "$ranks" -gt 2 ] || continue
    for balance in ${SHARED_BALANCES-none measured product}; do
      run_case "$phase" "$ranks" "$balance" "$N" -- --m "$N" --n "$N" --k "$N"
    done
  done
  for ranks in $RANKS; do
    [ "$ranks" -gt 2 ] || continue
    for balance in ${SHARED_UNEVEN_BALANCES-default measured product}; do
      run_case "$phase" "$ranks" "$balance" uneven -- --m "$UM" --n "$UN" --k "$UK" --verify full
    done
  done
  probe "$phase" "$([ "$phase" = on ] && echo 1 || echo 0)" share
  probe "$phase" "$([ "$phase" = on ] && echo 1 || echo 0)" measured
  [ "$phase" = on ] && stop_mps
done

# -- the table: TFLOP/s as a share of 2 ranks in the same phase ----------------------------------
tar czf "$OUT/results.tgz" -C "$work" . 2>/dev/null
echo
echo "float64 $N, one call: % of the 2-rank figure of the same phase (with SHARED_REPEATS > 1: medians); imbalance predicted/measured"
python3 - "$table" <<'PY' | tee "$OUT/table.txt"
import statistics, sys
rows = [line.rstrip("\n").split("\t") for line in open(sys.argv[1]) if line.strip()]
runs = {}  # (mps, ranks, balance, case) -> TFLOP/s of each run
for r in rows:
    if r[5] != "-":
        runs.setdefault(tuple(r[:4]), []).append(float(r[5]))
median = {key: statistics.median(v) for key, v in runs.items()}
ref = {key[0]: m for key, m in median.items() if key[1] == "2" and key[2] == "default"}
fmt = "{:<3} {:>5}  {:<8} {:<8} {:<5} {:>8}  {:>6}  {:<8} {:<13} {}"
print(fmt.format("MPS", "ranks", "balance", "case", "ok", "TFLOP/s", "% of 2", "verified", "imbalance", "detail"))
share = lambda mps, case, tflops: f"{100 * tflops / ref[mps]:.1f}" if case != "uneven" and ref.get(mps) else "-"
for mps, ranks, balance, case, ok, tflops, verified, imbalance, detail in rows:
    print(fmt.format(mps, ranks, balance, case, ok, tflops, share(mps, case, float(tflops)) if tflops != "-" else "-",
                     verified, imbalance, detail))
repeated = [(key, v) for key, v in runs.items() if len(v) > 1]
if repeated:
    print("\nmedians of the repeated runs (% of the 2-rank median of the same phase):")
    for (mps, ranks, balance, case), v in repeated:
        m = median[(mps, ranks, balance, case)]
        print(fmt.format(mps, ranks, balance, case, f"x{len(v)}", f"{m:.2f}", share(mps, case, m), "-", "-",
                         "runs " + " ".join(f"{x:.2f}" for x in v)))
PY
[ -f "$OUT/ceiling.txt" ] && cat "$OUT/ceiling.txt"
echo "MPS control daemon start (control socket ready): $mps_start s; first CUDA context: ${init_off:-?} s without MPS, ${init_on:-?} s under MPS (it starts the server)"
exit "$(cut -f5 "$table" | grep -c '^FAIL$')"
