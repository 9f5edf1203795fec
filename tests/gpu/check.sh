#!/usr/bin/env bash
# The whole GPU check of hpcmm in one call, on a node with (at least) 2 GPUs.
#
#   bash tests/gpu/check.sh [modes...]     modes: system cuda-aware peers quickbench shared speed twofive (default: what the kit holds)
#   (twofive: --algo 2.5d:C beside --algo summa on the same cases, system MPI, TFLOP/s in the table; only when named)
#   (shared: tests/gpu/shared_gpu_check.sh, ranks sharing GPUs with and without MPS; only when named)
#   (speed: tests/gpu/speed_check.sh, the speed table against the best one GPU and cuBLASMp; only when named)
#   CHECK_TIMEOUT (s per product run), CHECK_SIZES (MiB list for bench transport),
#   CHECK_PYTEST_ARGS / CHECK_PYTEST_TIMEOUT (the GPU-marked tests) tune its length.
#
# Needs nothing but the repository, a Python with hpcmm's dependencies and cupy, and the node's
# MPI: each mode runs in a subshell with
#   the node's MPI              `mpiexec` on PATH, or the launcher MPIEXEC names (MPIEXEC="srun --mpi=pmix"
#                               or a path; any words after the first are its options)
#   CHECK_PYTHON                the Python the ranks run (default: .venv/bin/python where the
#                               repository has one, else python3)
#   system                      that MPI as it is: where it is not CUDA-aware hpcmm must stage (never crash)
#   cuda-aware                  that MPI told --cuda-aware-mpi yes: name this mode only where it is CUDA-aware
# Where a kit is in .device/ (.device/env.sh: the machine's MPI for system, a CUDA-aware Open MPI
# for cuda-aware; prepare.sh --peers: cuBLASMp and Heat), each mode sources `.device/env.sh MODE`
# instead, with python3 (CHECK_KIT=no ignores the kit).
# Logs, HDF5 files and the timeline picture go to $OUT (or /tmp/hpcmm-check); a table of every
# check is printed last.  Exit status: the number of failed checks (0 = all passed).
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/hpcmm-check}
work=/tmp/hpcmm-check-work
mkdir -p "$OUT" "$work"
log=$OUT/check.log
table=$OUT/table.txt  # in $OUT, written check by check: a run cut off by its time limit still leaves its rows
: > "$table"
export OMP_NUM_THREADS=1

# The kit (optional) or the node's own MPI and Python.
kit=no
[ -f .device/env.sh ] && [ "${CHECK_KIT:-yes}" != no ] && kit=yes
if [ -n "${CHECK_PYTHON:-}" ]; then
  py=$CHECK_PYTHON
elif [ "$kit" = no ] && [ -x .venv/bin/python ]; then
  py=$PWD/.venv/bin/python
else
  py=python3
fi
# By its absolute path: Open MPI started by an absolute path puts that folder first on the ranks'
# PATH (/usr/bin/mpiexec: /usr/bin/python3, without the node's mpi4py or cupy).
py=$(command -v "$py" || echo "$py")
# The ranks must find this hpcmm wherever the launcher starts them.
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}

# use_mpi MODE: the kit's env.sh for MODE, or the node's MPI: every `mpiexec` below (also under
# `timeout` and `env`) is then the launcher MPIEXEC names, else the mpiexec on PATH (else the one
# beside $py).  Where it cannot be set up, why is in $why.
use_mpi() {
  if [ "$kit" = yes ]; then
    source .device/env.sh "$1" >> "$log" 2>&1 || { why="env.sh $1 failed (see $log)"; return 1; }
    return 0
  fi
  local launcher=${MPIEXEC:-}
  if [ -z "$launcher" ]; then
    # by name, so that Open MPI adds no folder of its own to the ranks' PATH
    command -v mpiexec >/dev/null && launcher=mpiexec
    [ -z "$launcher" ] && [ -x "$(dirname "$py")/mpiexec" ] && launcher=$(dirname "$py")/mpiexec
  fi
  if [ -z "$launcher" ]; then
    why="no MPI launcher: put the node's mpiexec on PATH or name it in MPIEXEC"; return 1
  fi
  local first=${launcher%% *}
  if ! command -v "$first" >/dev/null 2>&1; then
    why="MPIEXEC=$launcher: $first is not a command"; return 1
  fi
  # The wrapper leaves PATH as it found it, so that a launcher named `mpiexec` is the node's, not
  # itself (and Open MPI, called by name, adds no prefix of its own to the ranks' PATH).
  mkdir -p "$work/bin"
  printf '#!/bin/sh\nPATH=${PATH#%s:} exec %s "$@"\n' "$work/bin" "$launcher" > "$work/bin/mpiexec"
  chmod +x "$work/bin/mpiexec"
  export PATH=$work/bin:$PATH
  # Open MPI (ignored by other MPIs): as root too, more ranks than cores (8 ranks on 2 GPUs), no binding.
  export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1} OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}
  export OMPI_MCA_rmaps_base_oversubscribe=${OMPI_MCA_rmaps_base_oversubscribe:-1}
  export OMPI_MCA_hwloc_base_binding_policy=${OMPI_MCA_hwloc_base_binding_policy:-none}
  export PRTE_MCA_rmaps_default_mapping_policy=${PRTE_MCA_rmaps_default_mapping_policy:-:oversubscribe}
  export PRTE_MCA_hwloc_default_binding_policy=${PRTE_MCA_hwloc_default_binding_policy:-none}
  if ! "$py" -c "import hpcmm, mpi4py.MPI, cupy; cupy.cuda.runtime.getDeviceCount()" >> "$log" 2>&1; then
    why="$py cannot import hpcmm, mpi4py and cupy or sees no GPU (see $log; CHECK_PYTHON names another)"; return 1
  fi
  echo "check.sh: $1 with $launcher, $py" >> "$log"
}

modes=("$@")
if [ ${#modes[@]} -eq 0 ]; then
  modes=(system)
  ls .device/wheels/libucx_cu13-*.whl >/dev/null 2>&1 && modes+=(cuda-aware)
  ls .device/wheels/peers/nvmath_python-*.whl >/dev/null 2>&1 && modes+=(peers)
fi

record() {  # record MODE NAME STATUS DETAIL
  printf '%-10s %-44s %-5s %s\n' "$1" "$2" "$3" "$4" >> "$table"
}

# check MODE NAME EXPECT_EXIT EXPECT_PATHS(regex or -) -- command...
# Runs the command, then reads /summary of the --out file: verified, paths.
check() {
  local mode=$1 name=$2 want_rc=$3 want_paths=$4; shift 5
  local out=$work/$mode-$name.h5 rc detail status=PASS
  rm -f "$out"
  echo "=== [$mode] $name: $* --out $out" >> "$log"
  local t0=$SECONDS
  timeout --foreground "${CHECK_TIMEOUT:-240}" "$@" --out "$out" >> "$log" 2>&1; rc=$?
  detail="rc=$rc $((SECONDS - t0))s"
  [ "$rc" = "$want_rc" ] || status=FAIL
  if [ "$want_rc" = 0 ]; then
    local facts
    facts=$($py - "$out" <<'PY' 2>&1
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    s = f["summary"].attrs
    paths = ",".join(p.decode() if isinstance(p, bytes) else p for p in s["paths"])
    gemm = s.get("gemm_order", "-").replace("A:", "").replace(" B:", "")
    grid, prefetch = f["config"].attrs.get("grid", "-"), f["config"].attrs.get("prefetch", "-")
    print(f"grid={grid} prefetch={prefetch} algo={s.get('algo', 'summa')} verified={bool(s['verified'])} paths={paths or '-'} gemm={gemm} tflops={s['tflops']:.2f} "
          f"exposed={100 * s['exposed_comm_fraction']:.2f}% host={100 * s.get('host_overhead_fraction', 0):.2f}% "
          f"residual={s['residual']:.1e} detectable={s.get('verify_detectable', float('nan')):.1e}")
PY
)
    detail="$detail $facts"
    case "$facts" in *verified=True*) ;; *) status=FAIL ;; esac
    if [ "$want_paths" != - ] && ! [[ "$facts" =~ paths=($want_paths)( |$) ]]; then status=FAIL; detail="$detail (want paths $want_paths)"; fi
  fi
  record "$mode" "$name" "$status" "$detail"
}

product_checks() {  # product_checks MODE EXTRA_ARGS...   (2 and 8 ranks on the 2 GPUs)
  local mode=$1; shift
  local cross=staged; [ "$mode" = cuda-aware ] && cross=mpi
  check "$mode" n2-8192-f64 0 ipc -- mpiexec -n 2 $py -m hpcmm --m 8192 --n 8192 --k 8192 "$@" --quiet
  check "$mode" n2-uneven 0 ipc -- mpiexec -n 2 $py -m hpcmm --m 10007 --n 6001 --k 3001 "$@" --quiet
  check "$mode" n8-8192-f64 0 ipc -- mpiexec -n 8 $py -m hpcmm --m 8192 --n 8192 --k 8192 "$@" --quiet
  check "$mode" n8-uneven 0 ipc -- mpiexec -n 8 $py -m hpcmm --m 10007 --n 6001 --k 3001 "$@" --quiet
  check "$mode" n2-rpn1-8192 0 "$cross" -- mpiexec -n 2 $py -m hpcmm --m 8192 --n 8192 --k 8192 --ranks-per-node 1 "$@" --quiet
  check "$mode" n2-rpn1-uneven-full 0 "$cross" -- mpiexec -n 2 $py -m hpcmm --m 4099 --n 3001 --k 2001 --ranks-per-node 1 --verify full "$@" --quiet
  check "$mode" n8-rpn1-uneven 0 "$cross" -- mpiexec -n 8 $py -m hpcmm --m 10007 --n 6001 --k 3001 --ranks-per-node 1 "$@" --quiet
  check "$mode" n8-rpn2-uneven 0 "ipc,$cross" -- mpiexec -n 8 $py -m hpcmm --m 10007 --n 6001 --k 3001 --ranks-per-node 2 "$@" --quiet
  check "$mode" n4-rpn2-f32-full 0 "ipc,$cross" -- mpiexec -n 4 $py -m hpcmm --m 3001 --n 2003 --k 1999 --dtype float32 --ranks-per-node 2 --verify full "$@" --quiet
  # --balance dynamic over (virtual) nodes: the blocks of other nodes copied in, tiles moved between nodes
  check "$mode" n4-rpn2-dynamic-full 0 "ipc,$cross" -- mpiexec -n 4 $py -m hpcmm --m 4099 --n 3001 --k 2001 --ranks-per-node 2 --balance dynamic --iters 3 --verify full "$@" --quiet
  check "$mode" n2-rpn1-dynamic-full 0 "$cross" -- mpiexec -n 2 $py -m hpcmm --m 4099 --n 3001 --k 2001 --ranks-per-node 1 --grid 2x1 --balance dynamic --iters 3 --verify full "$@" --quiet
  # the same with each first tile started on its node's blocks before the copies (off by default)
  check "$mode" n4-rpn2-dynamic-early-full 0 "ipc,$cross" -- mpiexec -n 4 $py tests/gpu/with_setting.py "execution.dynamic.EARLY_LOCAL_GEMMS[True]=1" -- --m 4099 --n 3001 --k 2001 --ranks-per-node 2 --balance dynamic --iters 3 --verify full "$@" --quiet
}

bench() {  # bench NAME NRANKS CASES [OPTIONS]   (uses $mode of the caller)
  echo "=== [$mode] bench $1: mpiexec -n $2 $py -m hpcmm bench --cases '$3' ${4:-}" >> "$log"
  local t0=$SECONDS
  timeout --foreground 300 mpiexec -n "$2" $py -m hpcmm bench --cases "$3" ${4:-} --out "$work/bench-$1.h5" --overwrite >> "$log" 2>&1
  local rc=$?
  record "$mode" "bench $1" "$([ $rc = 0 ] && echo PASS || echo FAIL)" "rc=$rc $((SECONDS - t0))s"
}

run_mode() {
  local mode=$1
  case "$mode" in
    system)
      use_mpi system || { record system setup FAIL "$why"; return; }
      mpiexec -n 2 $py -m hpcmm info >> "$log" 2>&1
      product_checks system
      # auto on a library that says it is not CUDA-aware must stage: no crash, no device pointer to MPI
      check system n2-rpn1-auto-stages 0 staged -- mpiexec -n 2 $py -m hpcmm --m 4099 --n 3001 --k 2001 --ranks-per-node 1 --cuda-aware-mpi auto --quiet
      # reliability on the GPU: a problem that cannot fit is refused before allocation (exit 2)
      check system refuse-too-big 2 - -- mpiexec -n 2 $py -m hpcmm --m 300000 --n 300000 --k 300000 --quiet
      # a wrong low-precision product must fail (C[0,0] + 100 put in from outside by tests/fault_runner.py): exit 1
      check system f16-wrong-c-fails 1 - -- mpiexec -n 2 $py tests/fault_runner.py --fault 0:verify:corrupt -- --dtype float16 --quiet
      check system f16-right 0 ipc -- mpiexec -n 2 $py -m hpcmm --dtype float16 --m 16384 --n 16384 --k 16384 --quiet
      check system tf32-right 0 ipc -- mpiexec -n 2 $py -m hpcmm --dtype float32 --tf32 --m 16384 --n 16384 --k 16384 --quiet
      # the GEMM's operand orders (hpcmm.planning.gemm_orders): panels re-laid out after IPC and staged transfers
      check system n2-bf16-uneven-full 0 ipc -- mpiexec -n 2 $py -m hpcmm --dtype bfloat16 --m 4099 --n 3001 --k 2001 --verify full --quiet
      check system n2-rpn1-tf32-full 0 staged -- mpiexec -n 2 $py -m hpcmm --dtype float32 --tf32 --m 4099 --n 3001 --k 2001 --ranks-per-node 1 --verify full --quiet
      for order in CC CF FF; do
        check system "n4-rpn2-order-$order-full" 0 "ipc,staged" -- env HPCMM_GEMM_ORDER=$order mpiexec -n 4 $py -m hpcmm --m 3001 --n 2003 --k 1999 --ranks-per-node 2 --prefetch 2 --verify full --quiet
      done
      grep -a "does not fit" "$log" | tail -1 | sed 's/^/    /' >> "$table"
      echo "=== [system] bench transport" >> "$log"
      mpiexec -n 2 $py -m hpcmm bench transport --sizes "${CHECK_SIZES:-1,4,16,64,256,1024}" --out "$work/transport-system.h5" --overwrite >> "$log" 2>&1
      record system "bench transport" "$([ $? = 0 ] && echo PASS || echo FAIL)" "$work/transport-system.h5"
      # The verification's power with cuBLAS's own products: wrong products fail, 1000 right ones
      # per type pass (float64, float32, TF32, float16, complex64, complex128 at k up to 32768).
      echo "=== [system] verification power on the GPU" >> "$log"
      local tv=$SECONDS
      timeout "${CHECK_PYTEST_TIMEOUT:-1200}" $py -m pytest -q -m gpu -p no:cacheprovider tests/test_verify_power.py >> "$log" 2>&1
      local rv=$?
      record system "verify power (gpu)" "$([ $rv = 0 ] && echo PASS || echo FAIL)" "rc=$rv $((SECONDS - tv))s $(grep -aE '[0-9]+ (passed|failed)' "$log" | tail -1)"
      echo "=== [system] pytest -m gpu" >> "$log"
      local t0=$SECONDS
      timeout "${CHECK_PYTEST_TIMEOUT:-1200}" $py -m pytest -q -m "gpu" -p no:cacheprovider ${CHECK_PYTEST_ARGS:-tests} >> "$log" 2>&1
      local rc=$?
      record system "pytest -m gpu" "$([ $rc = 0 ] && echo PASS || echo FAIL)" "rc=$rc $((SECONDS - t0))s $(grep -aE '[0-9]+ (passed|failed)' "$log" | tail -1)"
      ;;
    cuda-aware)
      use_mpi cuda-aware || { record cuda-aware setup FAIL "$why"; return; }
      product_checks cuda-aware --cuda-aware-mpi yes
      echo "=== [cuda-aware] bench transport" >> "$log"
      mpiexec -n 2 $py -m hpcmm bench transport --sizes "${CHECK_SIZES:-1,4,16,64,256,1024}" --cuda-aware-mpi yes --ranks-per-node 1 \
        --out "$work/transport-cuda-aware.h5" --overwrite >> "$log" 2>&1
      record cuda-aware "bench transport (rpn 1)" "$([ $? = 0 ] && echo PASS || echo FAIL)" "$work/transport-cuda-aware.h5"
      mpiexec -n 2 $py -m hpcmm bench transport --sizes "${CHECK_SIZES:-1,4,16,64,256,1024}" --cuda-aware-mpi yes \
        --out "$work/transport-cuda-aware-node.h5" --overwrite >> "$log" 2>&1
      record cuda-aware "bench transport (node)" "$([ $? = 0 ] && echo PASS || echo FAIL)" "$work/transport-cuda-aware-node.h5"
      ;;
    peers)
      use_mpi system || { record peers setup FAIL "$why"; return; }
      # The peers where the comparison is asked for (16384); the large cases on their own.
      bench n2 2 "float64:32768;float16:32768;float64:30011x20011x16411" --no-peers
      bench n2-peers 2 "float64:16384;float32:16384"
      # Small problems (latency decides there), against cuBLASMp.
      bench n2-small 2 "float64:4096;float64:8192;float32:4096;float32:8192" --heat-limit 20
      bench n1 1 "float64:16384" --no-peers
      bench n8 8 "float64:32768" --no-peers
      bench n3 3 "float64:16384" --no-peers
      # the timeline picture, and what recording it costs
      check peers timeline-on 0 ipc -- mpiexec -n 2 $py -m hpcmm --m 16384 --n 16384 --k 16384 --iters 5 --quiet
      cp "$work/peers-timeline-on.h5" "$work/timeline.h5"
      $py -m hpcmm report "$work/timeline.h5" --plot "$OUT/timeline.png" >> "$log" 2>&1
      check peers timeline-off 0 ipc -- mpiexec -n 2 $py -m hpcmm --m 16384 --n 16384 --k 16384 --iters 5 --no-timeline --quiet
      bench tf32 2 "tf32:16384"
      ;;
    quickbench)
      use_mpi system || { record quickbench setup FAIL "$why"; return; }
      bench n2-32768 2 "float64:32768" --no-peers
      bench n1-16384 1 "float64:16384" --no-peers
      ;;
    twofive)
      # 2.5D (k over C layers of each virtual node, partial C reduce-scattered over IPC) beside
      # summa on the same case: every product verified (uneven: --verify full), TFLOP/s in the detail.
      use_mpi system || { record twofive setup FAIL "$why"; return; }
      local algo
      for algo in summa 2.5d:2; do
        check twofive "n4-rpn2-uneven-full-$algo" 0 "ipc,staged" -- mpiexec -n 4 $py -m hpcmm --m 4099 --n 3001 --k 2001 --ranks-per-node 2 --algo "$algo" --verify full --quiet
        check twofive "n4-rpn2-8192-f64-$algo" 0 "ipc,staged" -- mpiexec -n 4 $py -m hpcmm --m 8192 --n 8192 --k 8192 --ranks-per-node 2 --algo "$algo" --quiet
      done
      for algo in summa 2.5d:2 2.5d:4; do
        check twofive "n8-rpn4-uneven-full-$algo" 0 "ipc,staged" -- mpiexec -n 8 $py -m hpcmm --m 4099 --n 3001 --k 2001 --ranks-per-node 4 --algo "$algo" --verify full --quiet
        check twofive "n8-rpn4-8192-f64-$algo" 0 "ipc,staged" -- mpiexec -n 8 $py -m hpcmm --m 8192 --n 8192 --k 8192 --ranks-per-node 4 --algo "$algo" --quiet
      done
      check twofive "n8-rpn4-8192-f64-auto" 0 "ipc,staged" -- mpiexec -n 8 $py -m hpcmm --m 8192 --n 8192 --k 8192 --ranks-per-node 4 --algo auto --machine data/machines/h200x2-2026-11-29-system.json --quiet
      ;;
    shared)
      OUT=$OUT/shared bash tests/gpu/shared_gpu_check.sh >> "$log" 2>&1
      local rc=$?
      record shared "shared_gpu_check.sh" "$([ $rc = 0 ] && echo PASS || echo FAIL)" "$rc failed; table in $OUT/shared/table.txt"
      ;;
    speed)
      OUT=$OUT/speed bash tests/gpu/speed_check.sh >> "$log" 2>&1
      record speed "speed_check.sh" "$([ -s "$OUT/speed/table.txt" ] && echo PASS || echo FAIL)" "table in $OUT/speed/table.txt"
      ;;
    *) record "$mode" "unknown mode" FAIL "" ;;
  esac
}

nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv >> "$log" 2>&1
for mode in "${modes[@]}"; do
  ( run_mode "$mode" )
done
for f in "$work"/bench-*.h5 "$work"/transport-*.h5; do
  [ -f "$f" ] || continue
  echo "=== $(basename "$f")" >> "$OUT/figures.txt"
  $py -m hpcmm report "$f" >> "$OUT/figures.txt" 2>&1
done
tar czf "$OUT/results.tgz" -C "$work" . 2>/dev/null
grep -aE "^(case|float|tf32|path|ipc|shm|mpi|staged|raw|d2d|peer|note)" "$log" | tail -60 > "$OUT/tables.txt"
cat "$OUT/tables.txt"
echo
printf '%-10s %-44s %-5s %s\n' mode check ok detail
cat "$table"
exit "$(grep -c ' FAIL ' "$table")"
