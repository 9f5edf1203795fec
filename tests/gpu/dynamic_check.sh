#!/usr/bin/env bash
# --balance dynamic against the static balances on one node's GPU(s), in one call.
#
#   bash tests/gpu/dynamic_check.sh          (about 5 minutes on one H200 for the first three parts)
#
# DYN_PARTS picks the parts (default "verify sliced mps"; all: "verify sliced mps default mpsequal
# corunner threads nodes cpunodes cpuslow"):
# 1. verify: uneven products at 2 and 4 ranks with --balance dynamic --verify full.
# 2. sliced: ranks time-sliced on the GPU (no MPS): for each size of DYN_SIZES (default "8192 16384",
#    float64), 1 rank, then DYN_RANKS ranks (default "2 8") with share and with dynamic, in turns,
#    DYN_ROUNDS rounds (default 3): TFLOP/s, the load imbalance, the tiles taken.
# 3. mps: under an MPS control daemon of its own: 2 ranks, one given 25 % of the SMs and the other 75 %
#    (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, an MPMD launch), with share, measured (the static weights
#    measured at start-up) and dynamic, in turns (DYN_MPS_N, default 16384; DYN_MPS=0 skips it).
# 4. default: the command as a user types it, `mpiexec -n 8 python -m hpcmm`, time-sliced and under
#    MPS: which balance the planner chose (the column "ran").
# 5. mpsequal: DYN_RANKS ranks under MPS with no SM limit, share and dynamic, against 1 rank under MPS.
# 6. corunner: tests/gpu/corunner.py (a GEMM loop in another process) starts halfway through 20
#    products of 2 ranks at DYN_MPS_N, time-sliced and under MPS (the co-runner then an MPS client):
#    share and dynamic, and as the best static split for the capacity left, share and measured
#    with the co-runner there from the start; "after" is the rate of the products that started
#    after the co-runner did (/timings/product_start_seconds against its own clock reading).
#    DYN_CO_SHARING (default "sliced mps") picks the sharings.
# 7. threads: on the CPUs (--device cpu, DYN_CPU_N, default 4096), 2 ranks given DYN_CPU_THREADS
#    (default "6 2") BLAS threads, an MPMD launch, with share, measured, product and dynamic,
#    against the ideal: the sum of each thread count's rate alone at one rank; and against what the
#    two reach side by side as two one-rank runs at the same time ("together", the faster given
#    more products so that both run for about as long).  DYN_CPU_PIN=1 pins each thread count to
#    cores of its own (taskset; one logical CPU per physical core, the first t1 cores for the first,
#    the next t2 for the second, in every run of the part), so that the two never share a core.
#    DYN_CPU_SIDE=0 leaves out the side-by-side runs (the longest at large DYN_CPU_N).
# 8. nodes: two virtual nodes (--ranks-per-node) on a --grid Px1 at DYN_MPS_N: under MPS, 2 ranks (one a node)
#    given 25 % and 75 % of the SMs, share, measured, dynamic and dynamic-nohandoff (tiles kept within
#    each node), DYN_NODE_ITERS products each (default 10: the first moves nothing); time-sliced,
#    DYN_NODE_RANKS ranks (default 8), half a node each, share and dynamic.  DYN_NODE_ARGS adds options
#    (e.g. "--cuda-aware-mpi yes" with DYN_KIT_MODE=cuda-aware).
# 9. cpunodes: on the CPUs (--device cpu, DYN_CPU_N), 2 ranks as two virtual nodes on a 2 x 1 grid, each
#    pinned to a core of its own with one BLAS thread, and a busy loop of another process pinned to the
#    second rank's core throughout (a co-runner on one node): share, measured, dynamic-nohandoff and
#    dynamic, DYN_NODE_ITERS products each, against the ideal: the sum of each rank's rate alone at one
#    rank, pinned as it is (the second beside its busy loop).  Runs on any host of two cores or more.
# 10. cpuslow: as cpunodes on one node (no virtual nodes, the grid the planner picks): 2 ranks pinned to a
#    core each, one BLAS thread, the second made half as fast by the busy loop on its core: share, measured,
#    dynamic-even and dynamic, DYN_NODE_ITERS products each, against the same ideal.  DYN_CPU_HOGS: how many busy
#    loops share the second core in both parts (default 1; on a 2-core virtual machine 2 left its rank half
#    of the core, as 1 did).
# A balance written dynamicQ (dynamic2, say) is --balance dynamic with Q tiles queued per worker,
# dynamic-even (or dynamicQ-even) with even tiles, dynamic-tpT (dynamic-even-tp8) with T tiles per worker,
# dynamic-nogather with a lone worker's tiles read from the owners' blocks, dynamic-dec (dynamic-tp16-dec) with decreasing tiles,
# dynamic-nohandoff with no tile moved between nodes, dynamic-early with the GEMMs of a first tile that read its node's
# blocks queued before the copies of other nodes' blocks, and any balance ending in -numpyadd (share-numpyadd,
# dynamic-dec-numpyadd) with a CPU's C += A·B as a GEMM into scratch and numpy's add (tests/gpu/with_setting.py); DYN_SWEEP_BALANCES (default "share dynamic") and DYN_MPS_BALANCES
# (default "share measured dynamic"), DYN_CPU_BALANCES (default "share measured product dynamic")
# and DYN_CO_VARIANTS take them, for A/B runs in one call.
# Each run's row goes to $OUT/rows.tsv (round, case, ranks, n, balance, rc, TFLOP/s, imbalance,
# tiles taken, the balance that ran, TFLOP/s after a co-runner started, tiles moved between nodes a
# product, and for dynamic the share blocks' imbalance at the rates it ran); the medians and their
# ratios are printed last.  Each --balance dynamic run adds a line per rank to $OUT/tile-rates.tsv: its
# tiles a product, their GFLOP a product, the seconds its tile GEMMs took (median over products), the
# product's seconds, its GFLOP/s while its GEMMs ran and the fraction of the product they filled (a rank
# below its rate alone lost to its neighbours or its tiles' shapes; one with time to spare, to the balance).
# Exit status: failed runs.
# Where .device/env.sh is there (the kit), it is sourced in system mode (DYN_KIT_MODE=cuda-aware: in that
# mode; DYN_KIT=no: the mpiexec on PATH).
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/hpcmm-dynamic}
work=/tmp/hpcmm-dynamic-work
mkdir -p "$OUT" "$work"
log=$OUT/dynamic.log
rows=$OUT/rows.tsv
: > "$log"
printf 'round\tcase\tranks\tn\tbalance\trc\ttflops\timbalance\ttaken\tran\tafter\tmoved\tshare_at_rates\n' > "$rows"
tile_rates=$OUT/tile-rates.tsv
printf 'round\tcase\tranks\tn\tbalance\trank\ttiles\tgflop\tgemm_s\tproduct_s\tgflops_busy\tbusy\n' > "$tile_rates"
export OMP_NUM_THREADS=1
SIZES=${DYN_SIZES:-8192 16384}
RANKS=${DYN_RANKS:-2 8}
ROUNDS=${DYN_ROUNDS:-3}
LIMIT=${DYN_TIMEOUT:-240}
py=${DYN_PYTHON:-python3}
PARTS=" ${DYN_PARTS:-verify sliced mps} "
part() { [[ "$PARTS" == *" $1 "* ]]; }
if [ -f .device/env.sh ] && [ "${DYN_KIT:-yes}" != no ]; then
  # shellcheck disable=SC1091
  source .device/env.sh "${DYN_KIT_MODE:-system}" >> "$log" 2>&1 || { echo "env.sh failed" >&2; exit 1; }
fi
failed=0

# hpcmm_cmd BALANCE: the words that start hpcmm with that balance (dynamicQ: Q tiles queued per
# worker; -even: even tiles; -tpT: T tiles per worker, GPU and CPU alike; -nogather: a lone worker
# reads the owners' blocks, no whole operands)
hpcmm_cmd() {
  local balance=$1 set=()
  if [[ $balance == *-numpyadd ]]; then  # any balance: a CPU's C += A·B through numpy's add, not BLAS's beta
    balance=${balance%-numpyadd}
    set+=(execution.backend.ACCUMULATE_IN_BLAS=0)
  fi
  if [[ $balance =~ ^dynamic([0-9]*)(-even)?(-tp([0-9]+))?(-nogather)?(-dec)?(-nohandoff)?(-early)?$ ]] && [ "$balance" != dynamic ]; then
    [ -n "${BASH_REMATCH[8]}" ] && set+=("execution.dynamic.EARLY_LOCAL_GEMMS[True]=1")
    [ -n "${BASH_REMATCH[7]}" ] && set+=(execution.dynamic.NODE_HANDOFFS=0)
    [ -n "${BASH_REMATCH[6]}" ] && set+=("planning.choices.TILE_CUT[True]=decreasing" "planning.choices.TILE_CUT[False]=decreasing")
    [ -n "${BASH_REMATCH[5]}" ] && set+=(planning.choices.LONE_WORKER_GATHER=0)
    [ -n "${BASH_REMATCH[1]}" ] && set+=("execution.dynamic.QUEUED_TILES=${BASH_REMATCH[1]}")
    [ -n "${BASH_REMATCH[2]}" ] && set+=("planning.choices.TILE_CUT[True]=even" "planning.choices.TILE_CUT[False]=even")
    [ -n "${BASH_REMATCH[4]}" ] && set+=("planning.choices.TILES_PER_RANK[True]=${BASH_REMATCH[4]}" \
                                         "planning.choices.TILES_PER_RANK[False]=${BASH_REMATCH[4]}")
    balance=dynamic
  fi
  if ((${#set[@]})); then
    echo "$py tests/gpu/with_setting.py ${set[*]} -- --balance $balance"
  else
    echo "$py -m hpcmm --balance $balance"
  fi
}

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
  local facts="nan\tnan\tnan\t-\tnan\t0\tnan"
  if [ "$rc" = 0 ]; then
    facts=$($py - "$out" "${CORUNNER_RECORD:-}" "$tile_rates" "$round" "$case" "$ranks" "$n" "$balance" <<'PY' 2>> "$log"
import json, os, sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r") as f:
    if "timings/tiles" in f:  # each rank's tile GEMMs: what they did a product, and at what rate
        config, tiles = f["config"].attrs, f["timings/tiles"][()]
        cols = {int(r["rank"]): int(config["block_cols"][int(r["grid_col"])]) for r in f["topology"][()]}
        product_s = float(np.median(f["timings/product_seconds"][()]))
        products = sorted(set(int(p) for p in tiles["product"]))
        with open(sys.argv[3], "a") as rates:
            for rank in sorted(cols):
                per = [tiles[(tiles["rank"] == rank) & (tiles["product"] == p)] for p in products]
                flops = [sum(2.0 * (int(t["row1"]) - int(t["row0"])) * cols[int(t["owner"])] * int(config["k"]) for t in x)
                         for x in per]
                busy = float(np.median([x["seconds"].sum() for x in per]))
                gflop = float(np.median(flops)) / 1e9
                rate = gflop / busy if busy > 0 else float("nan")
                rates.write("\t".join(sys.argv[4:9]) + f"\t{rank}\t{np.median([len(x) for x in per]):.0f}\t{gflop:.2f}\t"
                            f"{busy:.4f}\t{product_s:.4f}\t{rate:.2f}\t{busy / product_s:.3f}\n")
    s = f["summary"].attrs
    after = float("nan")
    if sys.argv[2] and os.path.exists(sys.argv[2]):  # the products that started after the co-runner did
        began = json.load(open(sys.argv[2]))["start"]
        late = f["timings/product_seconds"][()][f["timings/product_start_seconds"][()] >= began]
        after = s["flops"] / np.median(late) / 1e12 if late.size else float("nan")
    print(f"{s['tflops']:.3f}\t{s['load_imbalance']:.4f}\t{s.get('dynamic_taken_fraction', 0.0):.4f}\t"
          f"{s['balance']}\t{after:.3f}\t{s.get('dynamic_node_handoffs', 0)}\t{s.get('dynamic_share_imbalance', float('nan')):.4f}")
PY
)
  fi
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%b\n' "$round" "$case" "$ranks" "$n" "$balance" "$rc" "$facts" >> "$rows"
}

# 1. correctness
part verify && for ranks in 2 4; do
  one 0 verify "$ranks" 10007 dynamic -- mpiexec -n "$ranks" $py -m hpcmm --m 10007 --n 6001 --k 3001 \
    --balance dynamic --verify full --quiet
done

# rank_sweep CASE: for each round and size, 1 rank, then DYN_RANKS ranks with share and dynamic in turns
rank_sweep() {
  local case=$1 round n ranks balance
  for round in $(seq "$ROUNDS"); do
    for n in $SIZES; do
      one "$round" "$case" 1 "$n" share -- mpiexec -n 1 $py -m hpcmm --m "$n" --quiet
      for ranks in $RANKS; do
        for balance in ${DYN_SWEEP_BALANCES:-share dynamic}; do
          # shellcheck disable=SC2046
          one "$round" "$case" "$ranks" "$n" "$balance" -- mpiexec -n "$ranks" $(hpcmm_cmd "$balance") --m "$n" --quiet
        done
      done
    done
  done
}

# 2. time-sliced
part sliced && rank_sweep sliced

N_CO=${DYN_MPS_N:-16384}
CO_ITERS=20
# corunner_runs CASE: the co-runner part for one sharing (the MPS daemon, where wanted, already up)
corunner_runs() {
  local case=$1 start_at halfway record pid stop
  # When the products are halfway: the first product's start after launch, and their length,
  # from one run without the co-runner (the second of two: a first run of a call starts far later,
  # its files not yet in the page cache, and would put the co-runner after the last product).
  local clock_now='import time; print(time.perf_counter())'
  one 0 "$case-calibrate" 2 "$N_CO" share -- mpiexec -n 2 $py -m hpcmm --m "$N_CO" --iters "$CO_ITERS" \
    --balance share --quiet
  start_at=$($py -c "$clock_now")
  one 0 "$case-calibrate" 2 "$N_CO" share -- mpiexec -n 2 $py -m hpcmm --m "$N_CO" --iters "$CO_ITERS" \
    --balance share --quiet
  halfway=$($py - "$(outfile 0 "$case-calibrate" 2 "$N_CO" share)" "$start_at" <<'PY' 2>> "$log"
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r") as f:
    first = f["timings/product_start_seconds"][0] - float(sys.argv[2])
    print(first + np.median(f["timings/product_seconds"][()]) * len(f["timings/product_seconds"]) / 2)
PY
)
  [ -n "$halfway" ] || { echo "$case: no calibration run" | tee -a "$log"; return; }
  for round in $(seq "$ROUNDS"); do
    for variant in ${DYN_CO_VARIANTS:-share:half dynamic:half share:always measured:always}; do
      local balance=${variant%%:*} when=${variant##*:} go delay=0
      record=$work/corunner-$case-$round-$balance-$when.json
      go=$work/corunner-go-$$ stop=$work/corunner-stop-$$
      rm -f "$record" "$go" "$stop"
      [ "$when" = half ] && delay=$halfway
      $py tests/gpu/corunner.py --go "$go" --delay "$delay" --record "$record" --stop "$stop" >> "$log" 2>&1 &
      pid=$!
      sleep "${DYN_CO_WARMUP:-4}"  # its CUDA context and first GEMM before hpcmm starts
      touch "$go"
      if [ "$when" = always ]; then  # it runs before hpcmm starts
        for _ in $(seq 600); do [ -f "$record" ] && break; sleep 0.1; done
      fi
      # shellcheck disable=SC2046
      CORUNNER_RECORD=$record one "$round" "$case-$when" 2 "$N_CO" "$balance" -- mpiexec -n 2 $(hpcmm_cmd "$balance") \
        --m "$N_CO" --iters "$CO_ITERS" --quiet
      # Ended by its stop file (a signal mid-kernel left MPS refusing the next client), killed after 30 s.
      touch "$stop"
      for _ in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
      [ -f "$record" ] || echo "$case round $round $variant: the co-runner never started (see $log)" | tee -a "$log"
    done
  done
}

# 8. nodes, time-sliced: DYN_NODE_RANKS ranks, two virtual nodes
N_NODE_ITERS=${DYN_NODE_ITERS:-10}
read -r -a NODE_ARGS <<< "${DYN_NODE_ARGS:-}"
if part nodes; then
  node_ranks=${DYN_NODE_RANKS:-8}
  for round in $(seq "$ROUNDS"); do
    for balance in ${DYN_NODE_BALANCES:-share dynamic}; do
      # shellcheck disable=SC2046
      one "$round" nodes-sliced "$node_ranks" "$N_CO" "$balance" -- mpiexec -n "$node_ranks" $(hpcmm_cmd "$balance") \
        --m "$N_CO" --ranks-per-node $((node_ranks / 2)) --iters "$N_NODE_ITERS" "${NODE_ARGS[@]}" --quiet
    done
  done
fi

# 4. the mission command, time-sliced
part default && one 0 default-sliced 8 0 default -- mpiexec -n 8 $py -m hpcmm --quiet
# 6. co-runner, time-sliced
co_sharing() { [[ " ${DYN_CO_SHARING:-sliced mps} " == *" $1 "* ]]; }
part corunner && co_sharing sliced && corunner_runs corunner-sliced

# 7. CPU threads
if part threads; then
  n=${DYN_CPU_N:-4096}
  read -r t1 t2 <<< "${DYN_CPU_THREADS:-6 2}"
  cpu=(--device cpu --m "$n" --quiet)
  pin1=() pin2=()
  if [ "${DYN_CPU_PIN:-0}" = 1 ]; then
    # One logical CPU per physical core (the first of its siblings), in order.
    mapfile -t cores < <(for f in /sys/devices/system/cpu/cpu[0-9]*/topology/thread_siblings_list; do
                           cut -d, -f1 < "$f" | cut -d- -f1; done | sort -n -u)
    if [ "${#cores[@]}" -lt $((t1 + t2)) ]; then
      echo "DYN_CPU_PIN: ${#cores[@]} physical cores, fewer than $t1 + $t2 threads" | tee -a "$log"; exit 1
    fi
    pin1=(taskset -c "$(IFS=,; echo "${cores[*]:0:t1}")") pin2=(taskset -c "$(IFS=,; echo "${cores[*]:t1:t2}")")
    echo "DYN_CPU_PIN: ${pin1[*]} / ${pin2[*]} (of ${#cores[@]} physical cores)" | tee -a "$log"
  fi
  for round in $(seq "$ROUNDS"); do
    one "$round" threads 1 "$n" "alone-$t1" -- mpiexec -n 1 env OMP_NUM_THREADS="$t1" OPENBLAS_NUM_THREADS="$t1" \
      "${pin1[@]}" $py -m hpcmm "${cpu[@]}"
    one "$round" threads 1 "$n" "alone-$t2" -- mpiexec -n 1 env OMP_NUM_THREADS="$t2" OPENBLAS_NUM_THREADS="$t2" \
      "${pin2[@]}" $py -m hpcmm "${cpu[@]}"
    # Side by side: the faster one given t1/t2 times the products, so that both run for about as long.
    if [ "${DYN_CPU_SIDE:-1}" = 1 ]; then
      iters2=3 iters1=$(( 3 * t1 / t2 ))
      one "$round" threads 1 "$n" "together-$t1" -- mpiexec -n 1 env OMP_NUM_THREADS="$t1" OPENBLAS_NUM_THREADS="$t1" \
        "${pin1[@]}" $py -m hpcmm "${cpu[@]}" --iters "$iters1" &
      one "$round" threads 1 "$n" "together-$t2" -- mpiexec -n 1 env OMP_NUM_THREADS="$t2" OPENBLAS_NUM_THREADS="$t2" \
        "${pin2[@]}" $py -m hpcmm "${cpu[@]}" --iters "$iters2"
      wait
    fi
    for balance in ${DYN_CPU_BALANCES:-share measured product dynamic}; do
      # shellcheck disable=SC2207
      args=($(hpcmm_cmd "$balance") "${cpu[@]}" --out "$(outfile "$round" threads 2 "$n" "$balance")")
      one "$round" threads 2 "$n" "$balance" -- mpiexec -n 1 env OMP_NUM_THREADS="$t1" OPENBLAS_NUM_THREADS="$t1" \
        "${pin1[@]}" "${args[@]}" : -n 1 env OMP_NUM_THREADS="$t2" OPENBLAS_NUM_THREADS="$t2" "${pin2[@]}" "${args[@]}"
    done
  done
fi

# 9. two CPU nodes, a co-runner on the second; 10. one node, a rank made slow
if part cpunodes || part cpuslow; then
  n=${DYN_CPU_N:-4096}
  mapfile -t cores < <(for f in /sys/devices/system/cpu/cpu[0-9]*/topology/thread_siblings_list; do
                         cut -d, -f1 < "$f" | cut -d- -f1; done | sort -n -u)
  c0=${cores[0]} c1=${cores[1]:-}
  if [ -z "$c1" ]; then
    echo "cpunodes: one physical core; needs two" | tee -a "$log"
  else
    hogs=()
    for _ in $(seq "${DYN_CPU_HOGS:-1}"); do taskset -c "$c1" $py -c 'while True: pass' & hogs+=($!); done
    cpu=(--device cpu --m "$n" --iters "$N_NODE_ITERS" --quiet)
    for round in $(seq "$ROUNDS"); do
      for case in cpunodes cpuslow; do
        part "$case" || continue
        one "$round" "$case" 1 "$n" alone-0 -- mpiexec -n 1 taskset -c "$c0" $py -m hpcmm "${cpu[@]}"
        one "$round" "$case" 1 "$n" alone-1 -- mpiexec -n 1 taskset -c "$c1" $py -m hpcmm "${cpu[@]}"
        if [ "$case" = cpunodes ]; then
          balances=${DYN_CPU_NODE_BALANCES:-share measured dynamic-nohandoff dynamic} nodes=(--ranks-per-node 1 --grid 2x1)
        else
          balances=${DYN_CPU_SLOW_BALANCES:-share measured dynamic-even dynamic} nodes=()
        fi
        for balance in $balances; do
          # shellcheck disable=SC2207
          args=($(hpcmm_cmd "$balance") "${cpu[@]}" "${nodes[@]}" --out "$(outfile "$round" "$case" 2 "$n" "$balance")")
          one "$round" "$case" 2 "$n" "$balance" -- mpiexec -n 1 taskset -c "$c0" "${args[@]}" : \
            -n 1 taskset -c "$c1" "${args[@]}"
        done
      done
    done
    kill "${hogs[@]}"; wait "${hogs[@]}" 2>/dev/null
  fi
fi

# 3. MPS, 25 % and 75 % of the SMs (and parts 4 to 6 under MPS)
if { part mps || part default || part mpsequal || part corunner || part nodes; } && [ "${DYN_MPS:-1}" != 0 ] \
   && command -v nvidia-cuda-mps-control >/dev/null; then
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/hpcmm-dyn-mps-pipe-$$ CUDA_MPS_LOG_DIRECTORY=/tmp/hpcmm-dyn-mps-log-$$
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  trap 'echo quit | nvidia-cuda-mps-control >/dev/null 2>&1' EXIT
  if nvidia-cuda-mps-control -d >> "$log" 2>&1; then
    n=${DYN_MPS_N:-16384}
    part mps && for round in $(seq "$ROUNDS"); do
      for balance in ${DYN_MPS_BALANCES:-share measured dynamic}; do
        # shellcheck disable=SC2207
        args=($(hpcmm_cmd "$balance") --m "$n" --quiet --out "$(outfile "$round" mps25-75 2 "$n" "$balance")")
        one "$round" mps25-75 2 "$n" "$balance" -- mpiexec -n 1 env CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25 "${args[@]}" \
          : -n 1 env CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=75 "${args[@]}"
      done
    done
    part nodes && for round in $(seq "$ROUNDS"); do
      for balance in ${DYN_NODE_MPS_BALANCES:-share measured dynamic dynamic-nohandoff}; do
        # shellcheck disable=SC2207
        args=($(hpcmm_cmd "$balance") --m "$N_CO" --ranks-per-node 1 --grid 2x1 --iters "$N_NODE_ITERS" "${NODE_ARGS[@]}"
              --quiet --out "$(outfile "$round" nodes-mps25-75 2 "$N_CO" "$balance")")
        one "$round" nodes-mps25-75 2 "$N_CO" "$balance" -- mpiexec -n 1 env CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25 \
          "${args[@]}" : -n 1 env CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=75 "${args[@]}"
      done
    done
    part default && one 0 default-mps 8 0 default -- mpiexec -n 8 $py -m hpcmm --quiet
    part mpsequal && rank_sweep mpsequal
    part corunner && co_sharing mps && corunner_runs corunner-mps
    echo quit | nvidia-cuda-mps-control >> "$log" 2>&1
    trap - EXIT
  else
    echo "MPS daemon did not start (see $log)" | tee -a "$log"
  fi
fi

# The medians, and each against its reference of the same call.
$py - "$rows" <<'PY'
import csv, os, statistics, sys
from collections import defaultdict
runs = defaultdict(list)
with open(sys.argv[1]) as f:
    for r in csv.DictReader(f, delimiter="\t"):
        if r["rc"] == "0" and r["tflops"] not in ("", "nan"):
            runs[(r["case"], int(r["ranks"]), int(r["n"]), r["balance"])].append(r)
def med(key, field):
    vals = [float(r[field]) for r in runs.get(key, []) if r.get(field) not in (None, "nan", "")]
    return statistics.median(vals) if vals else float("nan")
def best_static(case, n):
    """The co-runner cases' reference: the better of share and measured with the co-runner there throughout."""
    keys = [(case.replace("-half", "-always"), 2, n, b) for b in ("share", "measured")]
    return max(keys, key=lambda k: med(k, "after") if runs.get(k) else float("-inf"))
print(f"{'case':<20} {'ranks':>5} {'n':>6} {'balance':<9} {'ran':<8} {'runs':>4} {'TFLOP/s median [range]':<24} "
      f"{'imbalance':>9} {'taken':>6} {'after':>7} {'moved':>5} {'ratio':>6}  reference")
for key in sorted(runs, key=lambda k: (k[0], k[2], k[1], k[3])):
    case, ranks, n, balance = key
    vals = sorted(float(r["tflops"]) for r in runs[key])
    field = "tflops"
    if case in ("sliced", "mpsequal"):
        ref, what = (case, 1, n, "share"), "1 rank"
    elif case in ("mps25-75", "nodes-mps25-75"):
        ref, what = (case, 2, n, "measured"), "measured"
    elif case == "nodes-sliced":
        ref, what = (case, ranks, n, "share"), "share"
    elif case.startswith("corunner") and case.endswith("-half"):
        ref = best_static(case, n)
        what, field = f"best static ({ref[3]}, co-runner throughout), after the co-runner's start", "after"
    elif case in ("cpunodes", "cpuslow") and ranks == 2:
        alone = [(case, 1, n, f"alone-{r}") for r in (0, 1)]
        ideal = sum(med(k, "tflops") for k in alone)
        ratio = med(key, "tflops") / ideal
        ref, what = None, "ideal: " + " + ".join(f"{k[3]} {med(k, 'tflops'):.4f}" for k in alone)
    elif case == "threads" and ranks == 2:
        alone = [("threads", 1, n, f"alone-{t}") for t in os.environ.get("DYN_CPU_THREADS", "6 2").split()]
        ideal = sum(med(k, "tflops") for k in alone)
        ratio = med(key, "tflops") / ideal
        ref, what = None, "ideal: " + " + ".join(f"{k[3]} {med(k, 'tflops'):.3f}" for k in alone)
        side = [("threads", 1, n, f"together-{t}") for t in os.environ.get("DYN_CPU_THREADS", "6 2").split()]
        if all(runs.get(k) for k in side):
            together = sum(med(k, "tflops") for k in side)
            what += f"; {med(key, 'tflops') / together:.3f} of side by side {together:.3f}"
    else:
        ref, what = None, ""
    if ref:
        ratio = med(key, field) / med(ref, field)
    elif not (case in ("threads", "cpunodes", "cpuslow") and ranks == 2):
        ratio = float("nan")
    ran = runs[key][0].get("ran", "-")
    digits = 2 if vals[-1] >= 1 else 3  # CPU rates are a few hundredths of a TFLOP/s
    print(f"{case:<20} {ranks:>5} {n:>6} {balance:<9} {ran:<8} {len(vals):>4} "
          f"{statistics.median(vals):>8.{digits}f} [{vals[0]:.{digits}f}-{vals[-1]:.{digits}f}]{'':<3} "
          f"{100 * med(key, 'imbalance'):>8.1f}% {100 * med(key, 'taken'):>5.1f}% {med(key, 'after'):>7.2f} "
          f"{med(key, 'moved'):>5.0f} "
          f"{ratio:>6.3f}  {what}")
    if med(key, "share_at_rates") == med(key, "share_at_rates"):  # dynamic, every rank computed: its share blocks
        print(f"{'':<20} {'':>5} {'':>6} {'':<9} the share blocks at the rates it ran: "
              f"{100 * med(key, 'share_at_rates'):.1f}% imbalance")
PY
echo "failed runs: $failed"
exit "$failed"
