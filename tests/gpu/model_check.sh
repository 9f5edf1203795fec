#!/usr/bin/env bash
# The cost model against measured runs, in one call.  On a node with 2 GPUs (the kit of
# ../shared/device in .device/, as for check.sh):
#
#   bash tests/gpu/model_check.sh            both MPIs: system (ipc, staged) and cuda-aware (mpi)
#   MODEL_CHECK_DEVICE=cpu bash tests/gpu/model_check.sh     the same machinery with numpy (no GPU)
#
# Per MPI kind: `bench transport` measures the links, `model measure` adds a GEMM sweep and
# writes a machine description, the cases run (2, 4, 8 ranks; --ranks-per-node 1, 2, 4; fast
# paths and the staged path; several sizes and types), and `model check` prints predicted
# against measured with the error.  Logs and files in $OUT (or /tmp/hpcmm-model-check).
# About 6 minutes of GPU time.  Exit status: 0 when every case ran (the errors are reported,
# not judged: docs/scaling.md holds the table and its verdict).
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/hpcmm-model-check}
mkdir -p "$OUT"
log=$OUT/model-check.log
: > "$log"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
device=${MODEL_CHECK_DEVICE:-gpu}
failed=0

case_run() {  # case_run KIND NAME RANKS ARGS...
  local kind=$1 name=$2 n=$3; shift 3
  echo "=== [$kind] $name: mpiexec -n $n python3 -m hpcmm $*" >> "$log"
  timeout "${MODEL_CHECK_TIMEOUT:-120}" mpiexec -n "$n" python3 -m hpcmm --device "$device" --iters 3 --quiet \
    --out "$OUT/$kind-$name.h5" --overwrite "$@" >> "$log" 2>&1 || { echo "FAILED: [$kind] $name" | tee -a "$log"; failed=$((failed + 1)); }
}

calibrate() {  # calibrate KIND [transport options]
  local kind=$1; shift
  local dtypes=float64,float32,float16 base=(--machine h200x2)  # the broadcast figures of h200x2 start the GPU description
  [ "$device" = cpu ] && { dtypes=float64,float32; base=(); }
  mpiexec -n 2 python3 -m hpcmm bench transport --device "$device" --sizes 1,4,16,64,256 "$@" \
    --out "$OUT/transport-$kind.h5" --overwrite >> "$log" 2>&1 || failed=$((failed + 1))
  # one rank per GPU for the GEMM sweep; the model divides a shared device itself
  mpiexec -n 2 python3 -m hpcmm model measure "${base[@]}" --transport "$OUT/transport-$kind.h5" --dtypes "$dtypes" \
    --save "$OUT/machine-$kind.json" >> "$log" 2>&1 || failed=$((failed + 1))
}

if [ "$device" = cpu ]; then
  python3 -c "import hpcmm" 2>/dev/null || export PATH="$PWD/.venv/bin:$PATH"
  calibrate cpu
  case_run cpu n1 1 --m 1536 --n 1536 --k 1536
  case_run cpu n2 2 --m 1536 --n 1536 --k 1536
  case_run cpu n2-rpn1 2 --m 1536 --n 1536 --k 1536 --ranks-per-node 1
  case_run cpu n2-uneven 2 --m 2001 --n 1503 --k 1799
  case_run cpu n3 3 --m 1536 --n 1536 --k 1536
  case_run cpu n4-rpn2 4 --m 2048 --n 2048 --k 2048 --ranks-per-node 2
  case_run cpu n4-rpn1-f32 4 --m 2048 --n 1536 --k 1024 --ranks-per-node 1 --dtype float32
  python3 -m hpcmm model check "$OUT"/cpu-*.h5 --machine "$OUT/machine-cpu.json" | tee "$OUT/table-cpu.txt"
  exit "$failed"
fi

(
  source .device/env.sh system >> "$log" 2>&1 || exit 1
  calibrate system
  case_run system n2-8192 2 --m 8192 --n 8192 --k 8192
  case_run system n2-16384 2 --m 16384 --n 16384 --k 16384
  case_run system n2-16384-f16 2 --m 16384 --n 16384 --k 16384 --dtype float16
  case_run system n2-uneven-f32 2 --m 12007 --n 9001 --k 6003 --dtype float32
  case_run system n4-8192 4 --m 8192 --n 8192 --k 8192
  case_run system n8-16384 8 --m 16384 --n 16384 --k 16384
  case_run system n2-rpn1-8192 2 --m 8192 --n 8192 --k 8192 --ranks-per-node 1
  case_run system n4-rpn2-8192 4 --m 8192 --n 8192 --k 8192 --ranks-per-node 2
  case_run system n4-rpn1-4096 4 --m 4096 --n 4096 --k 4096 --ranks-per-node 1
  case_run system n8-rpn2-4096 8 --m 4096 --n 4096 --k 4096 --ranks-per-node 2
  case_run system n8-rpn4-8192 8 --m 8192 --n 8192 --k 8192 --ranks-per-node 4
  case_run system n8-rpn1-f32 8 --m 6001 --n 4099 --k 3001 --dtype float32 --ranks-per-node 1
  python3 -m hpcmm model check "$OUT"/system-*.h5 --machine "$OUT/machine-system.json" | tee "$OUT/table-system.txt"
  exit "$failed"
) || failed=$((failed + $?))

if ls .device/wheels/libucx_cu13-*.whl >/dev/null 2>&1; then
(
  source .device/env.sh cuda-aware >> "$log" 2>&1 || exit 1
  calibrate cuda-aware --cuda-aware-mpi yes --ranks-per-node 1
  ca="--cuda-aware-mpi yes"
  case_run cuda-aware n2-rpn1-8192 2 --m 8192 --n 8192 --k 8192 --ranks-per-node 1 $ca
  case_run cuda-aware n2-rpn1-16384 2 --m 16384 --n 16384 --k 16384 --ranks-per-node 1 $ca
  case_run cuda-aware n2-rpn1-16384-f16 2 --m 16384 --n 16384 --k 16384 --dtype float16 --ranks-per-node 1 $ca
  case_run cuda-aware n4-rpn2-8192 4 --m 8192 --n 8192 --k 8192 --ranks-per-node 2 $ca
  case_run cuda-aware n4-rpn1-f32 4 --m 8192 --n 8192 --k 8192 --dtype float32 --ranks-per-node 1 $ca
  case_run cuda-aware n8-rpn1-8192 8 --m 8192 --n 8192 --k 8192 --ranks-per-node 1 $ca
  case_run cuda-aware n8-rpn2-8192 8 --m 8192 --n 8192 --k 8192 --ranks-per-node 2 $ca
  case_run cuda-aware n8-rpn4-16384 8 --m 16384 --n 16384 --k 16384 --ranks-per-node 4 $ca
  case_run cuda-aware n8-rpn2-uneven 8 --m 10007 --n 6001 --k 3001 --ranks-per-node 2 $ca
  python3 -m hpcmm model check "$OUT"/cuda-aware-*.h5 --machine "$OUT/machine-cuda-aware.json" | tee "$OUT/table-cuda-aware.txt"
  exit "$failed"
) || failed=$((failed + $?))
fi
echo "model check: $failed failure(s); tables in $OUT/table-*.txt, log $log"
exit "$failed"
