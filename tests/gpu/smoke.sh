#!/usr/bin/env bash
# Quick GPU smoke: both MPI modes, 2 ranks, a square and an uneven product.
set -u
out=${OUT:-/tmp/hpcmm-out}; mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total --format=csv | tee "$out/smoke.log"
( source .device/env.sh system
  mpiexec -n 2 python3 -m hpcmm info
  mpiexec -n 2 python3 -m hpcmm --m 8192 --n 8192 --k 8192 --out /tmp/s1.h5 --overwrite --save-c && python3 -c "import h5py; f=h5py.File(\"/tmp/s1.h5\"); print(dict(f[\"summary\"].attrs)); print(f[\"result/C\"].shape)"
  mpiexec -n 2 python3 -m hpcmm --m 10007 --n 6001 --k 3001 --verify full --out /tmp/s2.h5 --overwrite --quiet
  mpiexec -n 2 python3 -m hpcmm --m 4099 --n 3001 --k 2001 --ranks-per-node 1 --out /tmp/s3.h5 --overwrite --quiet
  mpiexec -n 8 python3 -m hpcmm --m 4099 --n 3001 --k 2001 --ranks-per-node 2 --out /tmp/s4.h5 --overwrite --quiet
) 2>&1 | tee -a "$out/smoke.log"
( source .device/env.sh cuda-aware
  mpiexec -n 2 python3 -m hpcmm --m 4099 --n 3001 --k 2001 --ranks-per-node 1 --cuda-aware-mpi yes --out /tmp/s5.h5 --overwrite --quiet
  mpiexec -n 8 python3 -m hpcmm --m 4099 --n 3001 --k 2001 --ranks-per-node 2 --cuda-aware-mpi yes --out /tmp/s6.h5 --overwrite --quiet --verify full
  mpiexec -n 4 python3 -m hpcmm --m 4099 --n 3001 --k 2001 --ranks-per-node 1 --cuda-aware-mpi no --out /tmp/s7.h5 --overwrite --quiet --dtype float32
) 2>&1 | tee -a "$out/smoke.log"
