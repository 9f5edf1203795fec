#!/usr/bin/env bash
# hpcmm's speed on 2 GPUs against the best one GPU does and against cuBLASMp, in ONE call (under 9 minutes).
#
# Here (CPU machine), from the project root, bring the peers and numpy's bfloat16 along:
#   bash ../shared/device/prepare.sh --peers ml_dtypes==0.6.0
# On the 2-GPU machine, from the project root:
#   bash tests/gpu/speed_check.sh           the whole table (below)
#   bash tests/gpu/speed_check.sh orders    the GEMM's operand orders only (about 5 minutes): tf32 16384,
#       float16/bfloat16 16384 and 32768, float64 16384 at 2 ranks, each in the order hpcmm.planning.gemm_orders
#       picks (bench-orders-*) and again with HPCMM_GEMM_ORDER=FC, as stored, no re-layout (bench-stored-*)
#   bash tests/gpu/speed_check.sh panels    the panel width by type (about 6 minutes): tf32 and float16 16384,
#       bfloat16 32768 at --panel 2048/4096/8192, float64 8192 at 1024/2048/4096, 4096 at 512/1024/2048, 16384 and 32768 at 8192
#   bash tests/gpu/speed_check.sh steps     each rank's own step order against the common one (HPCMM_STEP_ORDER), side by
#       side in one call (about 4 minutes): 2 ranks at float64 4096/8192/16384, tf32 and float16 16384, bfloat16
#       32768, then 3 and 8 ranks at float64 16384, each product verified, the two orders alternating;
#       STEP_CASES="RANKS:SIZE:TYPE:FIRST ..." runs those cases instead (a case named twice runs twice)
#   bash tests/gpu/speed_check.sh library   the GEMM library per shape (HPCMM_GEMM_LIBRARY): the cuBLASLt GPU tests, then
#       2 ranks with gemmex and with auto, alternating (LIBRARY_CASES="SIZE:TYPE[:OPTION:VALUE...] ..."), each verified,
#       with every rank's planned shapes; then bench under auto with cuBLASMp (LIBRARY_BENCH; peers kit)
#   bash tests/gpu/speed_check.sh grid      which way the default grid faces (HPCMM_GRID_ORIENTATION): wide and tall,
#       alternating, at 2 ranks (float64 4096-32768, float32, tf32, float16) and 3, 5, 8 ranks (float64 16384),
#       each verified (GRID_CASES="RANKS:SIZE:TYPE ..."); then bench for float64 with cuBLASMp (GRID_BENCH=0: not).
#       GRID_SETTING and GRID_VALUES A/B another setting the same way, e.g. the balance at one rank per GPU:
#       GRID_SETTING=HPCMM_BALANCE GRID_VALUES="share product" GRID_CASES="2:16384:float64 ..." GRID_BENCH=0
#   bash tests/gpu/speed_check.sh gemm      hpcmm's GEMM call against cuBLASLt's own choice (nvmath-python's Matmul,
#       heuristic and autotuned) on the shapes of the 2-rank steps, float32 among them (GEMM_PROBE_CASES overrides),
#       one GPU (tests/gpu/gemm_probe.py; peers kit),
#       after hpcmm's call against cupy's on the same operands, in turns, with either algorithm hint
#       (tests/gpu/gemm_hint_probe.py: where float64 loses 6 % to cupy.matmul; GEMM_HINT=0 leaves it out)
#
# In order of priority, each step under `timeout` and inside what is left of SPEED_BUDGET seconds
# (default 510): a warm-up (ten float64 16384 products: the GPUs leave their idle clock), then `hpcmm bench` at 2 ranks (system MPI, peers on; Heat on its own smaller case within
# --heat-limit) for float64/float32 at 4096, 8192, 16384 and float64 32768, tf32 16384, float16 and
# bfloat16 16384, then float64 32768 at --panel 4096 (the default must reach it; the sweep is `panels`),
# then float16/bfloat16 32768 and float32 32768 while time is left.  A step that no longer fits is
# skipped and says so.  Prints one table last.  $OUT (default /tmp/hpcmm-speed) gets speed.log (every
# line of every step), table.txt and files.tgz (the HDF5 files and each step's log): three files.
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/hpcmm-speed}
work=/tmp/hpcmm-speed-work
rm -rf "$work"; mkdir -p "$OUT" "$work"
log=$OUT/speed.log
steps=$work/steps.txt
: > "$log"; : > "$steps"
budget=${SPEED_BUDGET:-510}
export OMP_NUM_THREADS=1

left() { echo $((budget - SECONDS)); }

# step NAME LIMIT command...   runs the command under timeout min(LIMIT, time left - 15 s)
step() {
  local name=$1 limit=$2; shift 2
  local room=$(( $(left) - 15 ))
  [ "$room" -lt "$limit" ] && limit=$room
  if [ "$limit" -lt 30 ]; then
    printf '%-28s %-8s %s\n' "$name" skipped "no time left ($(left) s)" >> "$steps"
    return
  fi
  echo "=== $name (limit ${limit}s): $*" >> "$log"
  local t0=$SECONDS
  timeout --kill-after=10 "$limit" "$@" > "$work/$name.log" 2>&1
  local rc=$?
  cat "$work/$name.log" >> "$log"
  local what=rc=$rc; [ "$rc" = 124 ] || [ "$rc" = 137 ] && what="timed out (rc=$rc)"
  printf '%-28s %-8s %s\n' "$name" "$what" "$((SECONDS - t0)) s" >> "$steps"
}

bench() {  # bench NAME LIMIT CASES [OPTIONS...]   ($GEMM_ORDER, where set, goes to hpcmm as HPCMM_GEMM_ORDER)
  local name=$1 limit=$2 cases=$3; shift 3
  step "bench-$name" "$limit" env ${GEMM_ORDER:+HPCMM_GEMM_ORDER=$GEMM_ORDER} \
    mpiexec -n 2 python3 -m hpcmm bench --cases "$cases" --warmup 2 --iters 5 --out "$work/bench-$name.h5" --overwrite "$@"
}

panel() {  # panel SIZE WIDTH [TYPE]   (TYPE: float64 by default; tf32 = float32 with --tf32)
  local type=${3:-float64} tag=; [ -n "${3:-}" ] && tag=$3-
  local opts=(--dtype "$type"); [ "$type" = tf32 ] && opts=(--dtype float32 --tf32)
  step "panel-$tag$1-$2" 90 mpiexec -n 2 python3 -m hpcmm --m "$1" --n "$1" --k "$1" --panel "$2" "${opts[@]}" \
    --iters 3 --quiet --out "$work/panel-$tag$1-$2.h5" --overwrite
}

{
  echo "speed_check: $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=index,name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv
  nvidia-smi topo -m
} >> "$log" 2>&1
source .device/env.sh system >> "$log" 2>&1 || { echo "env.sh system failed" | tee -a "$log"; exit 2; }
python3 - >> "$log" 2>&1 <<'PY'
import importlib
for name in ("numpy", "cupy", "ml_dtypes", "mpi4py", "h5py", "nvmath", "heat", "torch"):
    try:
        print(name, getattr(importlib.import_module(name), "__version__", "?"))
    except Exception as exc:
        print(name, "does not import:", type(exc).__name__, exc)
try:
    import cupy, ml_dtypes
    x = cupy.ones((64, 64), dtype=ml_dtypes.bfloat16)
    print("cupy bfloat16 matmul:", float((x @ x)[0, 0]))
except Exception as exc:
    print("cupy bfloat16 does not work here:", type(exc).__name__, exc)
PY

if [ "${1:-all}" = panels ]; then
  # the panel width by type, where the GEMM outruns the memory most (each step's beta = 1 pass over C)
  for width in 2048 4096 8192; do panel 16384 "$width" tf32; done
  for width in 2048 4096 8192; do panel 16384 "$width" float16; done
  for width in 2048 4096 8192; do panel 32768 "$width" bfloat16; done
  for width in 1024 2048 4096; do panel 8192 "$width"; done
  for width in 512 1024 2048; do panel 4096 "$width"; done
  panel 16384 8192  # float64: whole 8192-deep blocks per step (2048 and 4096 are in the full run)
  panel 32768 8192  # float64: two steps per 16384-deep block (97.2 % at 4096, the target 98 %)
elif [ "${1:-all}" = steps ]; then
  # own-first (the default on one node) against common, one run each per case, alternating which goes first
  ab() {  # ab RANKS SIZE TYPE FIRST
    local ranks=$1 size=$2 type=$3 first=$4 opts=(--dtype "$3") second=common name
    [ "$type" = tf32 ] && opts=(--dtype float32 --tf32)
    [ "$first" = common ] && second=auto
    for order in "$first" "$second"; do
      name=order-$order-n$ranks-$type-$size
      while [ -e "$work/$name.h5" ]; do name=$name-again; done
      step "$name" 90 env HPCMM_STEP_ORDER=$order mpiexec -n "$ranks" python3 -m hpcmm \
        --m "$size" --n "$size" --k "$size" "${opts[@]}" --iters 5 --quiet --out "$work/$name.h5"
    done
  }
  step warm-up 40 mpiexec -n 2 python3 -m hpcmm --m 16384 --n 16384 --k 16384 --iters 10 --verify none \
    --no-timeline --quiet --out "$work/warm-up.h5" --overwrite
  if [ -n "${STEP_CASES:-}" ]; then
    for case in $STEP_CASES; do ab ${case//:/ }; done
  else
  ab 2 16384 float64 common
  ab 2 16384 tf32 auto
  ab 2 4096 float64 common
  ab 2 8192 float64 auto
  ab 2 16384 float16 common
  ab 2 32768 bfloat16 auto
  ab 3 16384 float64 common
  ab 8 16384 float64 auto
  ab 2 16384 tf32 common
  ab 2 4096 float64 auto
  fi
elif [ "${1:-all}" = gemm ]; then
  # hpcmm's GEMM (cublasGemmEx) against cuBLASLt's heuristic and autotuned choice on the 2-rank steps
  step warm-up 40 mpiexec -n 2 python3 -m hpcmm --m 16384 --n 16384 --k 16384 --iters 10 --verify none \
    --no-timeline --quiet --out "$work/warm-up.h5" --overwrite
  [ "${GEMM_HINT:-1}" = 1 ] && step gemm-hint 150 python3 tests/gpu/gemm_hint_probe.py --json "$OUT/gemm-hint.json"
  step gemm-probe 300 python3 tests/gpu/gemm_probe.py --json "$OUT/gemm-probe.json" \
    --cases "${GEMM_PROBE_CASES:-float64:8192x16384x8192,float64:16384x8192x8192,float64:8192x16384x16384,float64:16384x16384x16384,float32:8192x16384x8192,float32:4096x8192x4096,float32:16384x32768x8192,tf32:8192x16384x8192,float16:8192x16384x8192,bfloat16:16384x32768x8192,float64:4096x8192x4096,float64:8192x16384x1024}"
elif [ "${1:-all}" = library ]; then
  # cublasGemmEx for every shape (HPCMM_GEMM_LIBRARY=gemmex) against each shape's faster of it and cuBLASLt
  # autotuned (auto), alternating, 2 ranks; then bench under auto against the best one GPU and cuBLASMp
  [ "${LIBRARY_TESTS:-1}" = 1 ] && step gpu-tests 150 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py -k cublaslt
  step warm-up 40 mpiexec -n 2 python3 -m hpcmm --m 16384 --n 16384 --k 16384 --iters 10 --verify none \
    --no-timeline --quiet --out "$work/warm-up.h5" --overwrite
  lib() {  # lib SIZE TYPE [hpcmm options...]: gemmex, then auto
    local size=$1 type=$2 opts=(--dtype "$2") name; shift 2
    [ "$type" = tf32 ] && opts=(--dtype float32 --tf32)
    for library in gemmex auto; do
      name=library-$library-$type-$size${1:+-${*// /}}
      while [ -e "$work/$name.h5" ]; do name=$name-again; done
      step "$name" 90 env HPCMM_GEMM_LIBRARY=$library mpiexec -n 2 python3 -m hpcmm \
        --m "$size" --n "$size" --k "$size" "${opts[@]}" --iters 5 --quiet --out "$work/$name.h5" "$@"
    done
  }
  for case in ${LIBRARY_CASES:-16384:float64 8192:float64 4096:float64 16384:tf32 16384:float32 8192:float32 \
                              16384:float64:--panel:1024 16384:float64}; do lib ${case//:/ }; done
  bench lt 170 "${LIBRARY_BENCH:-float64:8192;float32:8192;float64:16384;float32:16384}" --heat-limit 5
  [ -z "${LIBRARY_BENCH:-}" ] && bench lt-f32-32768 140 "float32:32768" --heat-limit 5
elif [ "${1:-all}" = grid ]; then
  # which way the default grid faces (HPCMM_GRID_ORIENTATION): wide (MPI.Compute_dims) against tall, alternating,
  # each product verified; then bench (default options) for float64 against the best one GPU and cuBLASMp
  step warm-up 40 mpiexec -n 2 python3 -m hpcmm --m 16384 --n 16384 --k 16384 --iters 10 --verify none \
    --no-timeline --quiet --out "$work/warm-up.h5" --overwrite
  setting=${GRID_SETTING:-HPCMM_GRID_ORIENTATION}
  turn() {  # turn RANKS SIZE TYPE: each of GRID_VALUES (wide, then tall) in turn
    local ranks=$1 size=$2 type=$3 opts=(--dtype "$3") name
    [ "$type" = tf32 ] && opts=(--dtype float32 --tf32)
    for face in ${GRID_VALUES:-wide tall}; do
      name=grid-$face-n$ranks-$type-$size
      while [ -e "$work/$name.h5" ]; do name=$name-again; done
      step "$name" 90 env "$setting=$face" mpiexec -n "$ranks" python3 -m hpcmm \
        --m "$size" --n "$size" --k "$size" "${opts[@]}" --iters 5 --quiet --out "$work/$name.h5"
    done
  }
  for case in ${GRID_CASES:-2:16384:float64 2:8192:float64 2:4096:float64 2:16384:float32 2:8192:float32 \
                           2:16384:tf32 2:16384:float16 3:16384:float64 8:16384:float64 2:16384:float64 \
                           2:32768:float64 5:16384:float64}; do turn ${case//:/ }; done
  [ "${GRID_BENCH:-1}" = 1 ] && bench f64 130 "float64:4096;float64:8192;float64:16384" --heat-limit 5
  [ "${GRID_BENCH:-1}" = 1 ] && bench f64-32768 170 "float64:32768" --heat-limit 5
elif [ "${1:-all}" = orders ]; then
  for kind in orders stored; do
    GEMM_ORDER=; [ "$kind" = stored ] && GEMM_ORDER=FC
    bench "$kind-tf32-16384" 60 "tf32:16384" --no-peers
    bench "$kind-16bit-16384" 80 "float16:16384;bfloat16:16384" --no-peers
    bench "$kind-16bit-32768" 120 "float16:32768;bfloat16:32768" --no-peers
    bench "$kind-f64-16384" 60 "float64:16384" --no-peers
  done
  GEMM_ORDER=
else
  # The GPUs idle at their lowest clock (345 MHz when a call starts): a few seconds of products first,
  # so that the small cases, which come first and last a few milliseconds, meet the clock the rest meet.
  step warm-up 40 mpiexec -n 2 python3 -m hpcmm --m 16384 --n 16384 --k 16384 --iters 10 --verify none \
    --no-timeline --quiet --out "$work/warm-up.h5" --overwrite
  bench small 120 "float64:4096;float64:8192;float32:4096;float32:8192" --heat-limit 20
  bench 16384 110 "float64:16384;float32:16384" --heat-limit 20
  bench f64-32768 170 "float64:32768" --heat-limit 10
  bench tf32-16384 60 "tf32:16384"
  bench 16bit-16384 80 "float16:16384;bfloat16:16384"
  panel 32768 4096  # --panel 4096 beside the default (8192 there): the default must reach it
  bench 16bit-32768 120 "float16:32768;bfloat16:32768" --no-peers
  bench f32-32768 120 "float32:32768" --heat-limit 20
fi

python3 - "$work" > "$OUT/table.txt" 2>&1 <<'PY'
import glob, os, sys
import h5py
import numpy as np

work = sys.argv[1]
dec = lambda v: v.decode() if isinstance(v, bytes) else str(v)
fmt = lambda v, s=".2f": "—" if v != v else format(v, s)
print(f"{'case (2 ranks, 2 GPUs)':<22}{'GEMM':>9}{'hpcmm':>9}{'1-GPU best':>11}{'eff.':>7}  {'1-GPU winner':<26}"
      f"{'cuBLASMp':>9}{'÷':>6}{'Heat':>7}  {'ok':<3} cuBLASMp config / Heat")
for path in sorted(glob.glob(os.path.join(work, "bench-*.h5"))):
    with h5py.File(path, "r") as f:
        for r in f["bench"][()]:
            order = dec(r["gemm_order"]).replace("A:", "").replace(" B:", "") if "gemm_order" in r.dtype.names else "?"
            print(f"{dec(r['case']):<22}{order:>9}{r['hpcmm_tflops']:>9.2f}{r['reference_tflops']:>11.2f}"
                  f"{fmt(100 * r['efficiency'], '.1f'):>6}%  {dec(r['reference']).split(': ', 1)[-1]:<26}"
                  f"{fmt(r['cublasmp_tflops']):>9}{fmt(r['hpcmm_over_cublasmp']):>6}{fmt(r['heat_tflops']):>7}  "
                  f"{'yes' if r['verified'] else 'NO':<3} {dec(r['cublasmp_note'])[:60]} / {dec(r['heat_note'])[:40]}")
print()
print(f"{'panel sweep':<30}{'TFLOP/s':>9}{'exposed':>9}{'host':>8}  ok")
def panel_key(path):
    *tag, size, width = os.path.basename(path)[6:-3].split("-")
    return ("-".join(tag) or "float64", int(size), int(width))
for path in sorted(glob.glob(os.path.join(work, "panel-*.h5")), key=panel_key):
    with h5py.File(path, "r") as f:
        s = f["summary"].attrs
        kind, size, width = panel_key(path)
        print(f"{f'{kind} {size} --panel {width}':<30}{s['tflops']:>9.2f}{100 * s['exposed_comm_fraction']:>8.2f}%"
              f"{100 * s['host_overhead_fraction']:>7.2f}%  {'yes' if s['verified'] else 'NO'}")
print()
def gemm_ms(f):
    """Each rank's GEMM milliseconds per product (median over the timed products)."""
    return " ".join(f"{1e3 * x:.2f}" for x in np.median(f["timings/step_seconds"][:, :, :, 0].sum(axis=2), axis=1))
orders = sorted(glob.glob(os.path.join(work, "order-*.h5")), key=os.path.getmtime)
if orders:
    print(f"{'step order (HPCMM_STEP_ORDER)':<34}{'TFLOP/s':>9}{'exposed':>9}{'host':>8}{'steps':>6}  used        ok")
for path in orders:
    with h5py.File(path, "r") as f:
        s, c = f["summary"].attrs, f["config"].attrs
        print(f"{os.path.basename(path)[6:-3]:<34}{s['tflops']:>9.2f}{100 * s['exposed_comm_fraction']:>8.2f}%"
              f"{100 * s['host_overhead_fraction']:>7.2f}%{int(c['steps']):>6}  {dec(c['step_order_used']):<11} "
              f"{'yes' if s['verified'] else 'NO'}  GEMM ms by rank: " + gemm_ms(f))
turned = sorted(glob.glob(os.path.join(work, "grid-*.h5")), key=os.path.getmtime)
if turned:
    print(f"{'setting A/B (' + os.environ.get('GRID_SETTING', 'HPCMM_GRID_ORIENTATION') + ')':<44}{'grid':>6}"
          f"{'TFLOP/s':>9}{'exposed':>9}  ok")
for path in turned:
    with h5py.File(path, "r") as f:
        s, c = f["summary"].attrs, f["config"].attrs
        print(f"{os.path.basename(path)[5:-3]:<44}{dec(c['grid']):>6}{s['tflops']:>9.2f}"
              f"{100 * s['exposed_comm_fraction']:>8.2f}%  {'yes' if s['verified'] else 'NO'}  GEMM ms by rank: " + gemm_ms(f))
libraries = sorted(glob.glob(os.path.join(work, "library-*.h5")), key=os.path.getmtime)
if libraries:
    print(f"{'GEMM library (HPCMM_GEMM_LIBRARY)':<44}{'TFLOP/s':>9}{'exposed':>9}  {'used':<44}ok")
for path in libraries:
    with h5py.File(path, "r") as f:
        s = f["summary"].attrs
        print(f"{os.path.basename(path)[8:-3]:<44}{s['tflops']:>9.2f}{100 * s['exposed_comm_fraction']:>8.2f}%  "
              f"{dec(s.get('gemm_library_used', '?'))[:42]:<44}{'yes' if s['verified'] else 'NO'}  GEMM ms by rank: " + gemm_ms(f))
        for g in (f["timings/gemms"][()] if "timings/gemms" in f else []):
            print(f"    rank {g['rank']} {dec(g['dtype'])} {g['m']}x{g['n']}x{g['w']} beta {g['beta']}: {dec(g['library'])}"
                  f"  GemmEx {1e3 * g['gemmex_seconds']:.3f} ms, cuBLASLt {1e3 * g['cublaslt_seconds']:.3f} ms"
                  f"  ({dec(g['note'])[:70]})")
print()
print("one-GPU candidates (TFLOP/s, mean of the 2 GPUs; * = best):")
for path in sorted(glob.glob(os.path.join(work, "bench-*.h5"))):
    with h5py.File(path, "r") as f:
        refs = f["reference"][()]
        for case in dict.fromkeys(refs["case"]):
            mine = refs[refs["case"] == case]
            print(f"  {dec(case):<20}" + "  ".join(
                f"{dec(r['candidate']).replace('cupy.matmul ', '')} {fmt(r['tflops'])}{'*' if r['best'] else ''}"
                for r in mine))
PY
[ -f "$work/gemm-hint.log" ] && { echo; echo "gemm hint probe (one GPU):"; cat "$work/gemm-hint.log"; } >> "$OUT/table.txt"
[ -f "$work/gemm-probe.log" ] && { echo; echo "gemm probe (one GPU):"; cat "$work/gemm-probe.log"; } >> "$OUT/table.txt"
{ echo; echo "steps:"; cat "$steps"; } >> "$OUT/table.txt"
tar czf "$OUT/files.tgz" -C "$work" . 2>/dev/null
cat "$OUT/table.txt"
