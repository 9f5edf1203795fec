# The part every batch script of jobs/ shares: each script sources it after its
# #SBATCH header and settings.  The job finds everything itself: settings in the
# environment or as NAME=VALUE arguments after the script's name (arguments
# survive `sbatch --export=NONE` and win over the environment), task and GPU
# counts in SLURM's allocation, and how hpcmm ended in the status file it
# writes (--status-file).
# shellcheck shell=bash

# Exit statuses: hpcmm's own (0 ok, 1 verification failed, 2 bad input), then the job's.
EXIT_ENVIRONMENT=3 # no Python with hpcmm, a missing program, a bad job setting
EXIT_LAUNCHER=4    # hpcmm did not start, or its tasks did not form one MPI job
EXIT_UNFINISHED=5  # hpcmm started but did not end by itself (abort, signal)

# finish STATUS LABEL: the job's last line says how it ended, then the job ends.
finish() {
    echo "hpcmm job ${SLURM_JOB_ID:-?} result: $2 (exit status $1)"
    exit "$1"
}

for arg in "$@"; do
    if [[ $arg =~ ^[A-Za-z_][A-Za-z0-9_]*= ]]; then
        export "${arg?}"
    else
        finish $EXIT_ENVIRONMENT "environment: argument '$arg': expected NAME=VALUE, e.g. JOB_M=4096"
    fi
done

# What the job's Python must be able to import (checked without starting MPI).
python_check='import importlib.util, sys
missing = [m for m in ("hpcmm", "mpi4py", "numpy", "h5py") if importlib.util.find_spec(m) is None]
sys.exit("cannot import " + ", ".join(missing) if missing else 0)'

# find_python: sets python to JOB_PYTHON, else the first of the submit folder's
# .venv, python3 and python on PATH that has hpcmm.
find_python() {
    local candidate why tried=()
    if [[ -n ${JOB_PYTHON:-} ]]; then
        python=$(command -v -- "$JOB_PYTHON") ||
            finish $EXIT_ENVIRONMENT "environment: JOB_PYTHON=$JOB_PYTHON: no such program"
        if ! why=$("$python" -c "$python_check" 2>&1); then
            finish $EXIT_ENVIRONMENT "environment: JOB_PYTHON=$JOB_PYTHON ${why##*$'\n'}"
        fi
        return
    fi
    for candidate in "${SLURM_SUBMIT_DIR:-$PWD}/.venv/bin/python" python3 python; do
        if python=$(command -v -- "$candidate") && "$python" -c "$python_check" >/dev/null 2>&1; then
            return
        fi
        tried+=("$candidate")
    done
    finish $EXIT_ENVIRONMENT "environment: no Python with hpcmm (tried ${tried[*]}); name one:\
 JOB_PYTHON=/path/to/venv/bin/python, as a variable or an argument after the script"
}

# make_launch TASKS [SRUN OPTIONS...]: the launcher's command in launch=(), its
# description in launcher_text.
make_launch() {
    local tasks=$1 words=() plugin
    shift
    case ${JOB_LAUNCHER:-srun} in
    srun)
        # The site's default MPI plugin unless JOB_SRUN_MPI names one: the
        # default is what the site's MPI speaks.  --export=ALL: under
        # `sbatch --export=NONE` srun would start the ranks with no environment.
        launch=(srun --export=ALL --kill-on-bad-exit=1 --ntasks="$tasks"
            ${JOB_SRUN_MPI:+--mpi="$JOB_SRUN_MPI"} "$@")
        plugin=${JOB_SRUN_MPI:-${SLURM_MPI_TYPE:-}}
        if [[ -n $plugin ]]; then
            launcher_text="srun --mpi=$plugin"
        else
            plugin=$(scontrol show config 2>/dev/null | sed -n 's/^MpiDefault *= *//p')
            launcher_text="srun --mpi=${plugin:-?} (the site's default)"
        fi
        ;;
    mpiexec)
        read -r -a words <<<"${JOB_MPIEXEC:-}"
        if ((${#words[@]} == 0)); then
            # The MPI beside the job's Python (a venv's MPICH), else the one on PATH.
            words=(mpiexec)
            if [[ -x ${python%/*}/mpiexec ]]; then words=("${python%/*}/mpiexec"); fi
        fi
        command -v -- "${words[0]}" >/dev/null ||
            finish $EXIT_ENVIRONMENT "environment: ${JOB_MPIEXEC:+JOB_MPIEXEC=}${words[0]}: no such program"
        launch=("${words[@]}" -n "$tasks")
        launcher_text="${words[*]}"
        ;;
    *)
        finish $EXIT_ENVIRONMENT "environment: JOB_LAUNCHER=$JOB_LAUNCHER: expected srun or mpiexec"
        ;;
    esac
}

# outcome LAUNCHER_STATUS STATUS_FILE TASKS: result (exit status) and label from
# hpcmm's status file (hpcmm/io/status.py), not guessed from the launcher's status.
outcome() {
    local code=$1 file=$2 tasks=$3 key value state='' exit='' reason='' ranks=''
    if [[ -f $file ]]; then
        while IFS='=' read -r key value; do
            case $key in
            state) state=$value ;;
            exit) exit=$value ;;
            reason) reason=$value ;;
            ranks) ranks=$value ;;
            esac
        done <"$file"
    fi
    if [[ -z $state ]]; then
        result=$EXIT_LAUNCHER
        label="launcher: hpcmm did not start (launcher exit status $code; see its errors above)"
    elif [[ $ranks != "$tasks" ]]; then
        result=$EXIT_LAUNCHER
        label="launcher: the $tasks tasks did not form one MPI job (hpcmm saw $ranks rank(s)):"
        label+=" $launcher_text does not match the MPI library; name a plugin of srun --mpi=list in JOB_SRUN_MPI"
    elif [[ $state != finished ]]; then
        result=$EXIT_UNFINISHED
        label="unfinished: hpcmm started on $ranks ranks but did not end by itself (an unexpected"
        label+=" error on one rank aborts all ranks; or a signal, a time limit; launcher exit status $code)"
    elif [[ $exit == 0 && $code != 0 ]]; then
        result=$EXIT_LAUNCHER
        label="launcher: hpcmm ended with 0 but the launcher with $code"
    elif [[ $exit == 0 ]]; then
        result=0 label="ok"
    else
        result=$exit label=${reason:-exit status $exit}
    fi
}

# --- MPS: one control daemon per node where a node's ranks share its GPUs -----------
# NVIDIA's Multi-Process Service lets the ranks that share a GPU run their
# kernels side by side instead of in turns (docs/shared-gpus.md).  JOB_MPS=auto
# starts it where a node gets more ranks than GPUs, on: wherever the job holds
# GPUs, off: never.  The daemon runs inside hpcmm's job step: the first task
# of each node starts it (mps_node) before any rank starts CUDA, the others
# wait for it, and the first stops it when its rank has ended.  A daemon
# started by a step of its own would be killed when that step ends (sites
# that track a step's processes in a cgroup) and would not see the GPUs that
# only hpcmm's step holds.  Each daemon has pipe and log directories of the
# job's own on the node's local /tmp.  No GPU setting (compute mode) changes.
case ${JOB_MPS:-auto} in
auto | on | off) ;;
*) finish $EXIT_ENVIRONMENT "environment: JOB_MPS=$JOB_MPS: expected auto, on or off" ;;
esac
mps_steps=0 mps_base='' mps_wrap=() mps_shown=''

# most_tasks_per_node: the most tasks SLURM gives one node ("4(x2),3" -> 4).
most_tasks_per_node() {
    local items item most=0
    IFS=',' read -r -a items <<<"${SLURM_TASKS_PER_NODE:-${SLURM_NTASKS:-1}}"
    for item in "${items[@]}"; do
        item=${item%%(*}
        if ((item > most)); then most=$item; fi
    done
    echo "$most"
}

# mps_listening DIR: whether a process has the control socket DIR/control open
# (a daemon that died leaves the file; /proc/net/unix lists live sockets only).
mps_listening() {
    [[ -S $1/control ]] || return 1
    [[ -r /proc/net/unix ]] || return 0
    awk -v path="$1/control" '$8 == path { found = 1 } END { exit !found }' /proc/net/unix
}

# mps_plan RANKS_PER_NODE GPUS_PER_NODE: whether the next step runs under MPS,
# said in the log; sets mps_wrap=() (the per-task wrapper placed before the
# program) and mps_shown (the same, short, for the log's command line).
mps_plan() {
    local per_node=$1 gpus=$2 mode=${JOB_MPS:-auto} shares
    mps_wrap=() mps_shown='' mps_base=''
    shares="$per_node rank(s) per node on $gpus GPU(s)"
    if [[ $mode == off ]]; then
        echo "MPS: not started: JOB_MPS=off ($shares)"
        return
    elif ((gpus == 0)); then
        echo "MPS: not started: the job holds no GPU"
        return
    elif [[ $mode == auto ]] && ((per_node <= gpus)); then
        echo "MPS: not started: no GPU is shared ($shares; JOB_MPS=on starts it anyway)"
        return
    elif mps_listening "${CUDA_MPS_PIPE_DIRECTORY:-/tmp/nvidia-mps}"; then
        echo "MPS: not started: a control daemon already listens on" \
            "${CUDA_MPS_PIPE_DIRECTORY:-/tmp/nvidia-mps}/control (the site's); the ranks use it"
        return
    elif ! command -v nvidia-cuda-mps-control >/dev/null; then
        if [[ $mode == on ]]; then
            finish $EXIT_ENVIRONMENT "environment: JOB_MPS=on: nvidia-cuda-mps-control: no such program"
        fi
        echo "MPS: not started: no nvidia-cuda-mps-control on PATH ($shares; the ranks take turns on each GPU)"
        return
    fi
    mps_steps=$((mps_steps + 1))
    # Unique per job, restart and step; short, for the socket path's 108 bytes.
    mps_base=/tmp/hpcmm-mps-${SLURM_JOB_ID:-$$}-${SLURM_RESTART_COUNT:-0}-$mps_steps
    rm -rf "$mps_base"
    mps_wrap=(bash -c "$(declare -f mps_node); mps_node \"\$@\"" hpcmm-mps "$mps_base")
    mps_shown="hpcmm-mps $mps_base "
    echo "MPS: starting a control daemon on each node of the step ($shares, JOB_MPS=$mode):" \
        "pipe dir $mps_base/pipe, log dir $mps_base/log"
}

# mps_node BASE PROGRAM [ARGS...]: runs in every task of the step.  The first
# task of a node (the one that makes BASE) starts the node's daemon, runs its
# rank, stops the daemon; the others wait until the daemon is up, then run.
mps_node() {
    local base=$1 node=${SLURMD_NODENAME:-$(hostname -s)} start ns status=0 i pid child
    shift
    export CUDA_MPS_PIPE_DIRECTORY=$base/pipe CUDA_MPS_LOG_DIRECTORY=$base/log
    if ! mkdir "$base" 2>/dev/null; then
        for ((i = 0; i < 600; i++)); do
            if [[ -e $base/ready || -e $base/failed ]]; then break; fi
            sleep 0.1
        done
        exec "$@"
    fi
    mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
    start=$(date +%s%N)
    if nvidia-cuda-mps-control -d; then
        for ((i = 0; i < 300; i++)); do
            if [[ -S $CUDA_MPS_PIPE_DIRECTORY/control ]]; then break; fi
            sleep 0.1
        done
    fi
    ns=$(($(date +%s%N) - start))
    if [[ -S $CUDA_MPS_PIPE_DIRECTORY/control ]]; then
        printf 'MPS: %s: control daemon started in %d.%03d s, pipe dir %s\n' \
            "$node" $((ns / 1000000000)) $((ns / 1000000 % 1000)) "$CUDA_MPS_PIPE_DIRECTORY"
        touch "$base/ready"
    else
        echo "MPS: $node: the control daemon did not start (no control socket after" \
            "$((ns / 1000000000)) s); the ranks of this node take turns on each GPU"
        tail -n 5 "$CUDA_MPS_LOG_DIRECTORY/control.log" 2>/dev/null
        touch "$base/failed"
    fi
    # A signal (srun ending the step, a time limit) goes on to the rank; the
    # daemon is stopped once the rank has ended, or a second later: SLURM's
    # SIGKILL follows within KillWait, and a rank stuck in MPI may outlast it.
    echo "$$" >"$base/starter"
    local signalled=''
    trap 'signalled=1; kill -TERM "$child" 2>/dev/null' TERM INT
    "$@" &
    child=$!
    wait "$child" || status=$?
    # wait returns early when a trapped signal arrives.
    while [[ -z $signalled ]] && kill -0 "$child" 2>/dev/null; do
        status=0
        wait "$child" || status=$?
    done
    if [[ -n $signalled ]]; then
        status=143
        for ((i = 0; i < 10; i++)); do
            if ! kill -0 "$child" 2>/dev/null; then break; fi
            sleep 0.1
        done
    fi
    if [[ -e $base/ready ]]; then
        pid=$(cat "$CUDA_MPS_PIPE_DIRECTORY/nvidia-cuda-mps-control.pid" 2>/dev/null) || pid=''
        start=$(date +%s%N)
        # The daemon ends once the clients still attached are gone.
        echo quit | nvidia-cuda-mps-control
        for ((i = 0; i < 100; i++)); do
            if [[ -z $pid ]] || ! kill -0 "$pid" 2>/dev/null; then break; fi
            sleep 0.1
        done
        ns=$(($(date +%s%N) - start))
        printf 'MPS: %s: control daemon stopped (quit took %d.%03d s)\n' \
            "$node" $((ns / 1000000000)) $((ns / 1000000 % 1000))
    fi
    rm -rf "$base"
    return "$status"
}

# mps_after: after a step (or on SIGTERM, during it), stop a daemon the step
# left on this node (its first task was killed before it could) and remove
# its folder.  A first task still at work (stopping its daemon after a signal)
# is given 3 s, less than SLURM's KillWait, and then left to SLURM.
mps_after() {
    local starter i
    if [[ -z $mps_base ]]; then return; fi
    starter=$(cat "$mps_base/starter" 2>/dev/null) || starter=''
    for ((i = 0; i < 30; i++)); do
        if [[ -z $starter ]] || ! kill -0 "$starter" 2>/dev/null; then break; fi
        sleep 0.1
    done
    if [[ -n $starter ]] && kill -0 "$starter" 2>/dev/null; then
        echo "MPS: $(hostname -s): the step's first task (pid $starter) is still stopping its control daemon"
    else
        if [[ -S $mps_base/pipe/control ]]; then
            echo quit | CUDA_MPS_PIPE_DIRECTORY=$mps_base/pipe nvidia-cuda-mps-control || true
            echo "MPS: $(hostname -s): control daemon stopped (the step left it running)"
        fi
        rm -rf "$mps_base"
    fi
    mps_base=''
}

# However the job ends, no daemon outlives it; a time limit or scancel sends
# SIGTERM, which lets the last line say so.
trap mps_after EXIT
trap 'mps_after; finish $EXIT_UNFINISHED "unfinished: the job got SIGTERM (its time limit, or scancel)"' TERM
trap 'mps_after; finish $EXIT_UNFINISHED "unfinished: the job got SIGINT"' INT

# Shared file systems (Lustre, NFS, GPFS) often refuse HDF5's file locks;
# hpcmm writes each file under a name of its own and renames it when complete.
export HDF5_USE_FILE_LOCKING=${HDF5_USE_FILE_LOCKING:-FALSE}
export PYTHONUNBUFFERED=1

# --- the site's MPI ------------------------------------------------------------------
# site_mpi: the GPU settings of the site's MPI (JOB_SITE_MPI).  Each block sets
# only what is not set already, so a site's module or the user's environment
# wins.  HPCMM_CUDA_AWARE_MPI tells hpcmm whether it may hand device buffers to
# MPI; `yes` on an MPI that is not CUDA-aware crashes the ranks, so say `yes`
# only where the block is right for the site.  The srun plugin stays the site's
# default (MpiDefault) unless JOB_SRUN_MPI names one.
site_mpi() {
    site_mpi=${JOB_SITE_MPI:-auto}
    # Each block sets only what is not set already, so a site's module or the
    # user's environment wins.  HPCMM_CUDA_AWARE_MPI tells hpcmm whether it may
    # hand device buffers to MPI; `yes` on an MPI that is not CUDA-aware crashes
    # the ranks, so say `yes` only where the block is right for the site.  The srun
    # plugin stays the site's default (MpiDefault) unless JOB_SRUN_MPI names one.
    site_mpi=${JOB_SITE_MPI:-auto}
    case "$site_mpi" in
    openmpi)
        # Open MPI moves device memory through UCX: cuda_copy and cuda_ipc on the
        # node, rc (InfiniBand, GPUDirect RDMA where the driver has it) between
        # nodes, gdr_copy for small messages.  The smcuda/openib BTLs would
        # compete with UCX for device buffers.
        export OMPI_MCA_pml=${OMPI_MCA_pml:-ucx}
        export OMPI_MCA_osc=${OMPI_MCA_osc:-ucx}
        export OMPI_MCA_btl=${OMPI_MCA_btl:-^smcuda,openib}
        export UCX_TLS=${UCX_TLS:-rc,sm,self,cuda_copy,cuda_ipc,gdr_copy}
        # CuPy's memory pool hands out the same addresses again; UCX's cache of
        # memory types could then take device memory for host memory.
        export UCX_MEMTYPE_CACHE=${UCX_MEMTYPE_CACHE:-n}
        export HPCMM_CUDA_AWARE_MPI=${HPCMM_CUDA_AWARE_MPI:-yes}
        ;;
    cray)
        # Cray MPICH (HPE Cray EX): GPU buffers need MPICH_GPU_SUPPORT_ENABLED=1
        # and the GTL library.  Load the accelerator module before submitting
        # (e.g. craype-accel-nvidia80).  mpi4py is rarely linked against GTL; if
        # the ranks crash on the first transfer, preload it:
        #   export LD_PRELOAD=$CRAY_MPICH_ROOTDIR/gtl/lib/libmpi_gtl_cuda.so
        export MPICH_GPU_SUPPORT_ENABLED=${MPICH_GPU_SUPPORT_ENABLED:-1}
        export HPCMM_CUDA_AWARE_MPI=${HPCMM_CUDA_AWARE_MPI:-yes}
        ;;
    mvapich2)
        # MVAPICH2-GDR: CUDA support is off unless asked for; GDRCopy speeds up
        # small messages where the gdrdrv module is loaded.  Python loads libmpi
        # late; the GDR user guide preloads it for Python programs:
        #   export LD_PRELOAD=$MV2_PATH/lib/libmpi.so
        export MV2_USE_CUDA=${MV2_USE_CUDA:-1}
        export MV2_USE_GDRCOPY=${MV2_USE_GDRCOPY:-1}
        export HPCMM_CUDA_AWARE_MPI=${HPCMM_CUDA_AWARE_MPI:-yes}
        ;;
    intel)
        # Intel MPI: device buffers need I_MPI_OFFLOAD=1; pick the CUDA backend
        # explicitly.  Under srun Intel MPI also needs SLURM's PMI library, e.g.
        #   export I_MPI_PMI_LIBRARY=/usr/lib64/libpmi2.so
        export I_MPI_OFFLOAD=${I_MPI_OFFLOAD:-1}
        export I_MPI_OFFLOAD_MODE=${I_MPI_OFFLOAD_MODE:-cuda}
        export HPCMM_CUDA_AWARE_MPI=${HPCMM_CUDA_AWARE_MPI:-yes}
        ;;
    none)
        # The MPI is not CUDA-aware (e.g. a distribution's Open MPI, PyPI's
        # MPICH): hpcmm copies each panel to host memory, sends it, and copies
        # it back.  Slower between nodes, correct everywhere.
        export HPCMM_CUDA_AWARE_MPI=${HPCMM_CUDA_AWARE_MPI:-no}
        ;;
    auto)
        # Nothing set: hpcmm decides from what mpi4py reports.
        ;;
    *)
        finish $EXIT_ENVIRONMENT "environment: JOB_SITE_MPI=$site_mpi: expected openmpi, cray, mvapich2, intel, none or auto"
        ;;
    esac
}

# --- the allocation ------------------------------------------------------------------
# job_facts: the job's task, node and GPU counts (tasks, nnodes, gpus): the
# allocation's, never a second copy.
job_facts() {
    tasks=${SLURM_NTASKS:?run this script with sbatch (SLURM_NTASKS is not set)}
    nnodes=${SLURM_JOB_NUM_NODES:-1}
    gpus=${SLURM_GPUS_ON_NODE:-0}
}

# --- one product -------------------------------------------------------------------
# product_files: the job's HDF5 file and status file in JOB_OUT_DIR (out, status_file).
product_files() {
    out_dir=${JOB_OUT_DIR:-${SLURM_SUBMIT_DIR:-$PWD}/results}
    mkdir -p "$out_dir" || finish $EXIT_ENVIRONMENT "environment: cannot make the folder $out_dir"
    out="$out_dir/${SLURM_JOB_NAME:-hpcmm}-${SLURM_JOB_ID}.h5"
    status_file="$out_dir/${SLURM_JOB_NAME:-hpcmm}-${SLURM_JOB_ID}.status"
    rm -f "$status_file"
}

# gpu_launch TASKS [SRUN OPTIONS...]: make_launch for a GPU step.  The step asks
# for the GPUs the job holds on each node (sbatch's --gpus-per-node or --gres),
# not for the #SBATCH line's count.  CUDA IPC needs every rank to see every GPU
# of its node: hpcmm picks its GPU from the node-local rank and opens its
# neighbours' buffers on theirs.  Hence --gpu-bind=none; a per-task binding
# (JOB_GPU_BIND=single:1) hides the peers' GPUs, and their IPC handles may then
# fail to open.  Since SLURM 22.05 srun does not inherit --cpus-per-task: it is
# passed on.
gpu_launch() {
    local tasks=$1 options=(--cpus-per-task="${SLURM_CPUS_PER_TASK:-1}")
    shift
    if ((gpus > 0)); then
        options+=(--gpus-per-node="$gpus" --gpu-bind="${JOB_GPU_BIND:-none}")
    fi
    make_launch "$tasks" "$@" "${options[@]}"
}

# run_step TASKS STATUS_FILE: runs launch + MPS wrapper + program, then sets
# result and label from how it ended (outcome).
run_step() {
    local cmd=("${launch[@]}" ${mps_wrap[@]+"${mps_wrap[@]}"} "${program[@]}")
    echo "+ ${launch[*]} $mps_shown${program[*]}"
    code=0
    # In the background: bash runs the SIGTERM trap only once a foreground
    # command ends, and a step may outlast SLURM's KillWait.
    "${cmd[@]}" &
    wait $! || code=$?
    mps_after
    outcome "$code" "$2" "$1"
}

# run_product OPTIONS...: one `hpcmm run` over the job's tasks, its options
# first (the device, the check), then the job's sizes, grid and JOB_ARGS; the
# job then ends with hpcmm's result.
run_product() {
    local extra=() grid=()
    read -r -a extra <<<"${JOB_ARGS:-}"
    if [[ -n ${JOB_GRID:-} ]]; then grid=(--grid "$JOB_GRID"); fi
    # ${extra[@]+...}: bash before 4.4 calls an empty array unbound under set -u.
    program=("$python" -m hpcmm run "$@" --m "$JOB_M" --n "$JOB_N" --k "$JOB_K" --dtype "${JOB_DTYPE:-float64}"
        ${grid[@]+"${grid[@]}"} --out "$out" --overwrite --status-file "$status_file" ${extra[@]+"${extra[@]}"})
    echo "launcher: $launcher_text; Python: $python; HDF5_USE_FILE_LOCKING=$HDF5_USE_FILE_LOCKING"
    run_step "$tasks" "$status_file"
    finish "$result" "$label"
}

# --- the scaling study -------------------------------------------------------------
# hpcmm's grid for p ranks on n nodes, as hpcmm itself chooses it (the most
# square, MPI_Dims_create in two dimensions, turned by type: float64 on the
# GPUs of one node faces tall, rows <= columns, or takes one process row where
# up to 8 ranks share GPUs and each gets 2048 columns of C or more;
# HPCMM_GRID_ORIENTATION).  Arguments: ranks, nodes, type, ranks and GPUs of the
# busiest node, C's columns were the grid one row.
hpcmm_grid() {
    # The batch shell runs on the job's first node: its GPUs are the ones the ranks find.
    "$python" -c 'import os, sys
from hpcmm.execution.backend import gpu_count
from hpcmm.planning.grid_orientation import default_grid
p, nodes, dtype, n = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[6])  # n: C columns on one row
device = os.environ.get("HPCMM_DEVICE", "auto")
on_gpu = device == "gpu" or device == "auto" and gpu_count() > 0
per_node, gpus = int(sys.argv[4]), int(sys.argv[5]) or gpu_count()  # ranks and GPUs of the busiest node
shared = on_gpu and 0 < gpus < per_node  # ranks share its GPUs
print(default_grid(p, dtype, on_gpu=on_gpu, nodes=nodes, orientation=os.environ.get("HPCMM_GRID_ORIENTATION", "auto"),
                   shared=shared, n=n))
' "$@"
}

# scaling_plan: the study's points, one line "study size ranks nodes grid m n k"
# each in points=(); a point with fewer ranks than the job takes only the nodes
# it fills (per_node: ranks per node when the job is full).
scaling_plan() {
    local study size p nodes columns grid sizes=() studies=() ranks=()
    read -r -a sizes <<<"${JOB_SIZES:-16384 32768}"
    read -r -a studies <<<"${JOB_STUDY:-strong weak}"
    read -r -a ranks <<<"${JOB_RANKS:-}"
    for study in "${studies[@]}"; do
        case $study in
        strong | weak) ;;
        *) finish $EXIT_ENVIRONMENT "environment: JOB_STUDY: '$study' is not strong or weak" ;;
        esac
    done
    if ((${#ranks[@]} == 0)); then
        for ((p = 1; p < tasks; p *= 2)); do ranks+=("$p"); done
        ranks+=("$tasks")
    fi
    per_node=$(((tasks + nnodes - 1) / nnodes))
    points=()
    for study in "${studies[@]}"; do
        for size in "${sizes[@]}"; do
            for p in "${ranks[@]}"; do
                if ((p > tasks)); then
                    echo "skip $study size $size on $p ranks: the job has $tasks tasks"
                    continue
                fi
                nodes=$(((p + per_node - 1) / per_node))
                # C's columns were the grid one process row: weak scaling gives each of its p ranks size columns.
                columns=$size; [ "$study" = weak ] && columns=$((size * p))
                grid=$(hpcmm_grid "$p" "$nodes" "$dtype" $((p < per_node ? p : per_node)) "$gpus" "$columns") ||
                    finish $EXIT_ENVIRONMENT "environment: $python could not give hpcmm's grid for $p ranks"
                case "$study" in
                strong) points+=("$study $size $p $nodes $grid $size $size $size") ;;
                weak) points+=("$study $size $p $nodes $grid $((size * ${grid%x*})) $((size * ${grid#*x})) $size") ;;
                esac
            done
        done
    done
    echo "hpcmm scaling job $SLURM_JOB_ID: $nnodes node(s) ($SLURM_JOB_NODELIST), $tasks tasks," \
        "$gpus GPU(s) per node; studies: ${studies[*]}; sizes: ${sizes[*]}; ranks: ${ranks[*]}"
}

# scaling_point STUDY SIZE RANKS NODES GRID M N K: one point, its line in the index.
# mpiexec fills each node's task slots in turn, so p ranks land on the first
# ceil(p / per_node) nodes; each point decides MPS for its own ranks.
scaling_point() {
    local study=$1 size=$2 p=$3 nodes=$4 grid=$5 m=$6 n=$7 k=$8 extra=() file status_file
    read -r -a extra <<<"${JOB_ARGS:-}"
    file="$run_dir/$study-s$size-p$p.h5"
    status_file="${file%.h5}.status"
    gpu_launch "$p" --nodes="$nodes" --ntasks-per-node="$(((p + nodes - 1) / nodes))"
    program=("$python" -m hpcmm run --m "$m" --n "$n" --k "$k" --dtype "$dtype" --grid "$grid"
        --verify freivalds --out "$file" --overwrite --status-file "$status_file" ${extra[@]+"${extra[@]}"})
    echo "=== $study size $size: $p ranks on $nodes node(s), grid $grid, ${m}x${n}x${k}"
    echo "launcher: $launcher_text; Python: $python; HDF5_USE_FILE_LOCKING=$HDF5_USE_FILE_LOCKING"
    mps_plan "$((p < per_node ? p : per_node))" "$gpus"
    rm -f "$status_file"
    run_step "$p" "$status_file"
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$study" "$size" "$p" "$nodes" \
        "$grid" "$m" "$n" "$k" "$result" "$file" "${label//$'\t'/ }" >>"$index"
    echo "point: $label"
    if ((result != 0 && first_failure == 0)); then
        first_failure=$result first_label="$study size $size on $p ranks: $label"
    fi
}

# scaling_study: every point in turn (the study goes on past a failed point,
# so that one bad size costs one point), then the table; the job ends with the
# first failure's status, or 0.
scaling_study() {
    local point
    run_dir="$out_dir/${SLURM_JOB_NAME:-hpcmm}-${SLURM_JOB_ID}"
    mkdir -p "$run_dir" || finish $EXIT_ENVIRONMENT "environment: cannot make the folder $run_dir"
    # One line per point, whatever happened to it; the table below reads it.
    index="$run_dir/points.tsv"
    printf 'study\tsize\tranks\tnodes\tgrid\tm\tn\tk\tstatus\tfile\tresult\n' >"$index"
    first_failure=0 first_label=""
    for point in "${points[@]}"; do
        # shellcheck disable=SC2086 # a point is eight words
        scaling_point $point
    done
    scaling_table
    if ((first_failure != 0)); then
        finish "$first_failure" "$first_label"
    fi
    if ((table_status != 0)); then
        finish $EXIT_LAUNCHER "launcher: every point ended with 0, but not every point's /summary could be read back"
    fi
    finish 0 "ok"
}

# scaling_table: one row per point, read back from every file's /summary
# attributes: the table shows what was written, not what the runs printed.
scaling_table() {
    table_status=0
    "$python" - "$index" <<'PY' || table_status=$?
import csv
import sys

import h5py
import numpy as np


def text(value):
    """An HDF5 attribute (bytes, str or an array of them) as plain text."""
    items = [v.decode() if isinstance(v, bytes) else str(v) for v in np.atleast_1d(value)]
    return ",".join(items) or "-"


with open(sys.argv[1], newline="") as f:
    points = list(csv.DictReader(f, delimiter="\t"))

rows, reference, unreadable = [], {}, 0
for p in points:
    row = dict(p, seconds=None, tflops=None, residual=None, verified="-", paths="-")
    if p["status"] == "0":
        try:
            with h5py.File(p["file"], "r") as h5:
                attrs = h5["/summary"].attrs
                row.update(
                    seconds=float(attrs["seconds"]),
                    tflops=float(attrs["tflops"]),
                    residual=float(attrs["residual"]),
                    verified="yes" if bool(attrs["verified"]) else "NO",
                    paths=text(attrs["paths"]),
                )
        except (OSError, KeyError) as exc:
            # A run that exited 0 must have written its summary.
            print(f"{p['file']}: {exc}", file=sys.stderr)
            row["verified"] = "no file"
            unreadable += 1
            rows.append(row)
            continue
        series = (p["study"], p["size"])
        rate = row["tflops"] / int(p["ranks"])
        reference.setdefault(series, rate)
        row["efficiency"] = rate / reference[series] if reference[series] > 0 else None
    rows.append(row)


def fmt(value, spec):
    return "-" if value is None else format(value, spec)


header = ("study", "size", "ranks", "nodes", "grid", "m x n x k", "seconds", "TFLOP/s",
          "eff", "residual", "verified", "paths", "exit")
print()
print("{:<6} {:>6} {:>5} {:>5} {:>6} {:>22} {:>10} {:>9} {:>5} {:>9} {:>8}  {:<14} {}".format(*header))
for r in rows:
    print("{:<6} {:>6} {:>5} {:>5} {:>6} {:>22} {:>10} {:>9} {:>5} {:>9} {:>8}  {:<14} {}".format(
        r["study"], r["size"], r["ranks"], r["nodes"], r["grid"],
        f'{r["m"]}x{r["n"]}x{r["k"]}',
        fmt(r["seconds"], ".4g"), fmt(r["tflops"], ".4g"), fmt(r.get("efficiency"), ".2f"),
        fmt(r["residual"], ".1e"), r["verified"], r["paths"],
        r["status"] if r["status"] == "0" else f'{r["status"]}: {r["result"]}'))
sys.exit(1 if unreadable else 0)
PY
}
