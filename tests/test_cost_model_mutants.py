"""What the cost model predicts (hpcmm/model/cost.py, from ``GemmCurve`` to ``_predict_25d``), one behaviour a test.

Written against the mutants that mutation testing of the model's core left alive (docs/mutation.md): the built-in
descriptions and every refusal of a bad one word for word, the staged transfer's formula, the chain decision at its
edges, which candidates ``--algo auto`` weighs, the placement of ranks on hosts, devices and NICs, one device's GEMM
time, the memory check to the byte, and the figures ``model predict`` gives for a set of placements that between
them take every path of the simulation (CPU and GPU, IPC and MPI, staged transfers by size, under contention and along
a chain, GPUs shared unevenly, time-sliced and under MPS, the split relay over nodes of different sizes, 2.5D layers on
one host and on several, problems that do not fit).  ``FIGURES`` are the model's own figures for ``CASES`` at tree
3e3de33, kept to 1e-12: a change of the model that moves one must update it on purpose; the tests after them derive
their figures from the documented rules.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from hpcmm.errors import InputError
from hpcmm.geometry.layout import Grid, Layout
from hpcmm.model import cost as model
from hpcmm.model.cost import GemmCurve, Machine, Problem, builtin, predict


def rich(**changes) -> Machine:
    """A GPU description where every figure differs from its default and from the others."""
    base = dict(name="rich", device="gpu", devices_per_node=4, hosts=0, memory_gib=40.0, memory_gbps=3000.0,
                gemm={"float64": GemmCurve(50.0, 100.0, 120.0, 60.0, 9.0, 0.9, ((1000, 1500, 256, 0.7),)),
                      "float32": GemmCurve(60.0, 90.0, 110.0, 70.0, 7.0, 0.8),
                      "tf32": GemmCurve(400.0, 150.0, 160.0, 90.0, 6.0)},
                intra_gbps=150.0, intra_latency_us=12.0, local_gbps=1500.0, net_gbps=20.0, net_latency_us=4.0,
                nics_per_node=2, bcast_efficiency=0.6, staged_gbps=9.0, staged_latency_us=40.0,
                staged_host_gbps=15.0, staged_gbps_by_mib=((0.5, 6.0), (4.0, 11.0)), staged_contention=0.3,
                staged_bcast_efficiency=0.45, staged_chunk_bytes=2 << 20, host_copy_gbps=22.0, cuda_aware=True,
                shared_mpi_us=70.0, shared_copy_us=55.0, shared_device_efficiency=0.8, mps_device_efficiency=0.95,
                host_step_us=20.0, accumulate_passes=2.5)
    base.update(changes)
    return Machine(**base)


def cpu(**changes) -> Machine:
    """A CPU description: two sockets a node, everything blocks the host."""
    base = dict(name="cpu2", device="cpu", devices_per_node=2, hosts=0, memory_gib=64.0, memory_gbps=30.0,
                gemm={"float64": GemmCurve(0.2, 40.0, 50.0, 30.0, 4.0)}, intra_gbps=8.0, intra_latency_us=3.0,
                local_gbps=12.0, net_gbps=5.0, net_latency_us=6.0, nics_per_node=1, bcast_efficiency=0.7,
                host_step_us=15.0, accumulate_passes=4.0)
    base.update(changes)
    return Machine(**base)


# -- the figures of model predict, placement by placement -----------------------------------------

def _case(problem, ranks, machine, **options):
    return problem, ranks, machine, options


#: (problem, ranks, machine, predict's options) by name.
CASES = {
    "cpu-4-rpn2": _case(Problem(1500, 1300, 1700), 4, cpu(), ranks_per_node=2),
    "cpu-6-one-node": _case(Problem(1500, 1300, 1700), 6, cpu(), ranks_per_host=6),
    "cpu-4-split": _case(Problem(1500, 1300, 1700), 4, cpu(), ranks_per_node=2, grid=(1, 4), algo="split-relay"),
    "gpu-8-rpn2-aware": _case(Problem(4000, 3000, 5000), 8, rich(), ranks_per_node=2),
    "gpu-8-rpn2-staged": _case(Problem(4000, 3000, 5000), 8, rich(), ranks_per_node=2, cuda_aware=False),
    "gpu-8-rpn1-chain": _case(Problem(4000, 3000, 5000), 8, rich(), ranks_per_node=1, grid=(4, 2), cuda_aware=False),
    "gpu-8-rpn1-aware": _case(Problem(4000, 3000, 5000), 8, rich(), ranks_per_node=1, grid=(4, 2)),
    "gpu-6-shared-staged": _case(Problem(3000, 2600, 4000), 6, rich(hosts=1), ranks_per_host=6, ranks_per_node=3,
                                 cuda_aware=False),
    "gpu-6-shared-aware": _case(Problem(3000, 2600, 4000), 6, rich(hosts=1), ranks_per_host=6, ranks_per_node=3),
    "gpu-6-shared-mps": _case(Problem(3000, 2600, 4000), 6, rich(hosts=1), ranks_per_host=6, ranks_per_node=3,
                              mps=True, cuda_aware=False),
    "gpu-6-one-node": _case(Problem(3000, 2600, 4000), 6, rich(hosts=1), ranks_per_host=6),
    "gpu-8-split-staged": _case(Problem(4000, 3000, 5000), 8, rich(), ranks_per_node=4, grid=(2, 4),
                                algo="split-relay", cuda_aware=False),
    "gpu-8-split-aware": _case(Problem(4000, 3000, 5000), 8, rich(), ranks_per_node=4, grid=(1, 8),
                               algo="split-relay"),
    "gpu-8-split-3nodes": _case(Problem(4000, 3000, 5000), 12, rich(), ranks_per_node=4, ranks_per_host=4,
                                grid=(1, 12), algo="split-relay"),
    "gpu-4-common-p0": _case(Problem(2000, 2100, 2200), 4, rich(), ranks_per_host=4, step_order="common", prefetch=0),
    "gpu-4-p2-panel": _case(Problem(2000, 2100, 2200), 4, rich(), ranks_per_host=4, prefetch=2, panel=300),
    "gpu-4-tf32": _case(Problem(2000, 2100, 2200, "tf32"), 4, rich(), ranks_per_host=4),
    "gpu-2-measured": _case(Problem(2000, 1500, 1024), 2, rich(), ranks_per_host=2, grid=(2, 1), panel=256),
    "gpu-3-balance-none": _case(Problem(2000, 2100, 2200), 3, rich(devices_per_node=2, hosts=1), ranks_per_host=3,
                                balance="none"),
    "gpu-3-balance-share": _case(Problem(2000, 2100, 2200), 3, rich(devices_per_node=2, hosts=1), ranks_per_host=3),
    "gpu-2p5d-2-host": _case(Problem(2000, 1800, 40000), 8, rich(hosts=1), ranks_per_host=8, ranks_per_node=4,
                             algo="2.5d:2", cuda_aware=False),
    "gpu-2p5d-4": _case(Problem(2000, 1800, 40000), 8, rich(), ranks_per_host=4, algo="2.5d:4"),
    "gpu-2p5d-auto": _case(Problem(2000, 1800, 40000), 8, rich(hosts=1), ranks_per_host=8, algo="2.5d", mps=True),
    "gpu-nofit": _case(Problem(60000, 60000, 60000), 4, rich(memory_gib=1.0), ranks_per_host=4),
    "gpu-2p5d-nofit": _case(Problem(60000, 60000, 60000), 4, rich(memory_gib=1.0), ranks_per_host=4, algo="2.5d:2"),
    "gpu-4-one-device-aware": _case(Problem(2400, 2000, 2600), 4, rich(hosts=1, devices_per_node=1, nics_per_node=1),
                                    ranks_per_host=4, ranks_per_node=1, grid=(1, 4)),
    "gpu-4-one-device-staged": _case(Problem(2400, 2000, 2600), 4,
                                     rich(hosts=1, devices_per_node=1, nics_per_node=1), ranks_per_host=4,
                                     ranks_per_node=1, grid=(1, 4), cuda_aware=False),
    "h200x2-worked": _case(Problem(8192, 8192, 8192), 2, builtin("h200x2")),
    "h200x2-2p5d-16": _case(Problem(1024, 1024, 200000), 16, builtin("h200x2"), algo="2.5d"),
    "h200x8-2p5d-16": _case(Problem(1024, 1024, 200000), 16, builtin("h200x8-ndr"), algo="2.5d"),
    "gpu-6-split-uneven": _case(Problem(3000, 2600, 4000), 6, rich(), ranks_per_host=6, ranks_per_node=4,
                                grid=(2, 3), algo="split-relay"),
    "cpu-6-split-uneven": _case(Problem(1500, 1300, 1700), 6, cpu(), ranks_per_host=6, ranks_per_node=4, grid=(2, 3),
                                algo="split-relay"),
    "gpu-12-split-staged": _case(Problem(4000, 3000, 5000), 12, rich(), ranks_per_node=4, ranks_per_host=4,
                                 grid=(1, 12), algo="split-relay", cuda_aware=False),
    "gpu-5-split-lone-root": _case(Problem(3000, 2600, 4000), 5, rich(), ranks_per_host=5, ranks_per_node=4,
                                   grid=(1, 5), algo="split-relay"),
    "gpu-8-split-gemm-bound": _case(Problem(4000, 3000, 5000), 8, rich(gemm={"float64": GemmCurve(0.5)}),
                                    ranks_per_node=4, grid=(1, 8), prefetch=2, algo="split-relay"),
    "gpu-2p5d-8-on-2-gpus": _case(Problem(2000, 1800, 40000), 8, rich(devices_per_node=2, nics_per_node=1),
                                  ranks_per_host=8, algo="2.5d:4"),
    "gpu-2p5d-6-on-3-gpus": _case(Problem(2000, 1800, 40000), 6, rich(devices_per_node=3, nics_per_node=1, hosts=1),
                                  algo="2.5d:2"),
    "gpu-8-split-p0": _case(Problem(4000, 3000, 5000), 8, rich(gemm={"float64": GemmCurve(5.0)}), ranks_per_node=4,
                            grid=(1, 8), prefetch=0, algo="split-relay"),
    "gpu-8-split-slow-ipc": _case(Problem(8000, 1000, 4000), 8, rich(intra_gbps=4.0, net_gbps=80.0),
                                  ranks_per_node=4, grid=(4, 2), algo="split-relay"),
    "gpu-2p5d-given": _case(Problem(2001, 1801, 40000, "float32"), 8, rich(), ranks_per_host=8, ranks_per_node=4,
                            panel=512, cuda_aware=False, algo="2.5d"),
    "gpu-2p5d-mps-2-gpus": _case(Problem(2001, 1801, 40000), 8, rich(devices_per_node=2, nics_per_node=1, hosts=1),
                                 algo="2.5d:2", mps=True),
    "h200x8-2p5d-4-wins": _case(Problem(1024, 1024, 1000000), 4, builtin("h200x8-ndr"), algo="2.5d"),
    "gpu-2p5d-1": _case(Problem(2001, 1801, 40000), 4, rich(), ranks_per_host=4, algo="2.5d:1"),
    "gpu-2p5d-common": _case(Problem(2001, 1801, 40000), 8, rich(hosts=1), ranks_per_host=8, step_order="common",
                             algo="2.5d:2"),
    "gpu-2p5d-tall": _case(Problem(2001, 1801, 40000), 4, rich(), ranks_per_host=4, algo="2.5d:2",
                           orientation="tall"),
    "gpu-2p5d-wide": _case(Problem(2001, 1801, 40000), 4, rich(), ranks_per_host=4, algo="2.5d:2",
                           orientation="wide"),
    "gpu-12-shared-staged-2-hosts": _case(Problem(3000, 2600, 4000), 12, rich(), ranks_per_host=6, cuda_aware=False),
    "gpu-auto-one-node": _case(Problem(3001, 2801, 6000), 3, rich(devices_per_node=2, nics_per_node=1, hosts=1),
                               ranks_per_host=3, step_order="common", mps=True, prefetch=2, panel=256,
                               orientation="tall", algo="auto"),
    "gpu-auto-balance-none": _case(Problem(3001, 2801, 6000), 3, rich(devices_per_node=2, nics_per_node=1, hosts=1),
                                   ranks_per_host=3, balance="none", algo="auto"),
    "gpu-auto-two-nodes": _case(Problem(3001, 2801, 30000), 8, rich(), ranks_per_host=8, ranks_per_node=4,
                                cuda_aware=False, grid=(2, 4), orientation="tall", panel=512, algo="auto"),
    "gpu-auto-grid": _case(Problem(6000, 5000, 4000), 6, rich(), ranks_per_host=6, ranks_per_node=3, grid=(1, 6),
                           algo="auto"),
    "gpu-10-shared-aware": _case(Problem(3000, 2600, 4000), 10, rich(), ranks_per_host=5),
    "gpu-3-share-grid-3x1": _case(Problem(2001, 2100, 2200), 3, rich(devices_per_node=2, nics_per_node=1, hosts=1),
                                  grid=(3, 1)),
    "gpu-3-share-grid-1x3": _case(Problem(2001, 2100, 2200), 3, rich(devices_per_node=2, nics_per_node=1, hosts=1),
                                  grid=(1, 3)),
    "cpu-3-shared": _case(Problem(1501, 1301, 1700), 3, cpu(hosts=1)),
    "gpu-9-on-2-gpus-grid-3x3": _case(Problem(3000, 2600, 4000), 9,
                                      rich(devices_per_node=2, nics_per_node=1, hosts=1), grid=(3, 3)),
    "gpu-12-shared-staged-vnodes": _case(Problem(3000, 2600, 4000), 12, rich(), ranks_per_host=6, ranks_per_node=3,
                                         grid=(6, 2), cuda_aware=False),
    "gpu-2p5d-6-on-4-gpus": _case(Problem(2001, 1801, 40000), 6, rich(hosts=1), algo="2.5d:2"),
    "gpu-8-relay-p0": _case(Problem(4000, 3000, 5000), 8, rich(), ranks_per_node=4, grid=(1, 8), prefetch=0),
    # the split relay with one rank a node: nothing crosses inside a node
    "cpu-2-split-one-a-node": _case(Problem(1500, 1300, 1700), 2, cpu(), ranks_per_node=1, grid=(1, 2),
                                    algo="split-relay"),
    # a tall problem: a rank's A panel still gathers over IPC when its B panel has arrived
    "gpu-8-split-tall-2x4": _case(Problem(8000, 1000, 4000), 8, rich(), ranks_per_node=4, grid=(2, 4),
                                  algo="split-relay", prefetch=1),
    # MPS clients on two GPUs of one host, CUDA-aware broadcasts between virtual nodes whose leader shares the root's
    # GPU (a copy inside the device) while other members of the column use the other GPU; prefetch 1, a ring of 2
    "gpu-6-mps-aware-vnodes-2-gpus": _case(Problem(3000, 2600, 4000), 6,
                                           rich(hosts=1, devices_per_node=2, local_gbps=300.0), ranks_per_host=6,
                                           ranks_per_node=3, grid=(6, 1), mps=True, prefetch=1),
    # hosts of 5, 5 and 2 ranks on two NICs each: a broadcast's members use the NICs least crowded by the other
    # rows' receivers, and its slowest member sets the rate, not a rank outside it
    "cpu-12-hosts-of-5-2-nics": _case(Problem(3000, 2600, 4000), 12, cpu(nics_per_node=2, devices_per_node=4),
                                      ranks_per_host=5, ranks_per_node=2, grid=(3, 4)),
    # staged broadcasts between virtual nodes of one GPU, slow IPC: a rank's pulls keep its stream busy
    "gpu-6-one-gpu-staged-slow-ipc": _case(Problem(3000, 2600, 4000), 6,
                                           rich(hosts=1, devices_per_node=1, nics_per_node=1, intra_gbps=0.5,
                                                local_gbps=1.0), ranks_per_host=6, ranks_per_node=2, grid=(1, 6),
                                           cuda_aware=False, prefetch=1),
    # 2.5D on one host, staged: in a layer's 3 x 2 grid only one row spans its two virtual nodes
    "gpu-2p5d-12-staged-one-host": _case(Problem(3000, 2600, 40000), 12, rich(hosts=1), ranks_per_host=12,
                                         ranks_per_node=6, algo="2.5d:2", cuda_aware=False),
    # the same GPU, CUDA-aware: a leader's panel is ready when its stream is free too
    "gpu-6-one-gpu-aware-slow-ipc": _case(Problem(3000, 2600, 4000), 6,
                                          rich(hosts=1, devices_per_node=1, nics_per_node=1, intra_gbps=0.5,
                                               local_gbps=1.0), ranks_per_host=6, ranks_per_node=2, prefetch=1),
    # hosts of 4 and 2 ranks on one GPU each, cut into nodes of 3 (the share balance reorders them): the first
    # intra-node bytes of the product are a follower's pull
    "gpu-6-hosts-of-4-nodes-of-3": _case(Problem(3000, 2600, 4000), 6, rich(devices_per_node=1, nics_per_node=1),
                                         ranks_per_host=4, ranks_per_node=3, grid=(2, 3)),
    # one element of float16 in pieces over the two members of each node: the busiest NIC carries one byte
    "cpu-4-split-one-element": _case(Problem(1, 1, 1, "float16"), 4,
                                     cpu(gemm={"float16": GemmCurve(1.0)}, devices_per_node=4, nics_per_node=2),
                                     ranks_per_host=4, ranks_per_node=2, grid=(1, 4), panel=1, algo="split-relay"),
    # 2.5D on one host, staged, too large: the layers' rounds still see each other's transfers
    "gpu-2p5d-staged-nofit": _case(Problem(60000, 60000, 60000), 4, rich(hosts=1, memory_gib=1.0), ranks_per_host=4,
                                   ranks_per_node=2, algo="2.5d:2", cuda_aware=False),
}

#: What ``predict`` says of each case (tree of 2026-12-06).
FIGURES = {
    "cpu-4-rpn2": dict(
        grid='2x2', panel=213, prefetch=1, steps=11, algo='summa', ranks_per_node=2, ranks_per_host=2,
        seconds=0.021190400000000005, gemm_seconds=0.0165999, exposed_seconds=0.0045905000000000026,
        extra_seconds=0.0, nic_bytes_max=8840000.0, nic_bytes_mean=8840000.0, nic_seconds_max=0.001768,
        bytes_by_path={'mpi': 17680000.0, 'shm': 20400000.0}, notes=()),
    "cpu-6-one-node": dict(
        grid='3x2', panel=189, prefetch=1, steps=13, algo='summa', ranks_per_node=6, ranks_per_host=6,
        seconds=0.04541142352941179, gemm_seconds=0.043054823529411784, exposed_seconds=0.0025866000000000044,
        extra_seconds=0.0, nic_bytes_max=0.0, nic_bytes_mean=0.0, nic_seconds_max=0.0,
        bytes_by_path={'shm': 55760000.0}, notes=()),
    "cpu-4-split": dict(
        grid='1x4', panel=213, prefetch=1, steps=11, algo='split-relay', ranks_per_node=2, ranks_per_host=2,
        seconds=0.02418925, gemm_seconds=0.01709725, exposed_seconds=0.0070919999999999985, extra_seconds=0.0,
        nic_bytes_max=10200000.0, nic_bytes_mean=10200000.0, nic_seconds_max=0.00204,
        bytes_by_path={'mpi': 20400000.0, 'shm': 40800000.0}, notes=()),
    "gpu-8-rpn2-aware": dict(
        grid='4x2', panel=1250, prefetch=1, steps=7, algo='summa', ranks_per_node=2, ranks_per_host=4,
        seconds=0.010448376799999999, gemm_seconds=0.0005133375999999992, exposed_seconds=0.009935039199999999,
        extra_seconds=0.0, nic_bytes_max=90000000.0, nic_bytes_mean=90000000.0, nic_seconds_max=0.0045,
        bytes_by_path={'ipc': 160000000.0, 'mpi': 360000000.0}, notes=()),
    "gpu-8-rpn2-staged": dict(
        grid='4x2', panel=1250, prefetch=1, steps=7, algo='summa', ranks_per_node=2, ranks_per_host=4,
        seconds=0.013020439078328633, gemm_seconds=0.0005133375999999991, exposed_seconds=0.012507101478328635,
        extra_seconds=0.0, nic_bytes_max=90000000.0, nic_bytes_mean=90000000.0, nic_seconds_max=0.01,
        bytes_by_path={'ipc': 160000000.0, 'staged': 360000000.0}, notes=()),
    "gpu-8-rpn1-chain": dict(
        grid='4x2', panel=1250, prefetch=1, steps=7, algo='summa', ranks_per_node=1, ranks_per_host=4,
        seconds=0.01967275778568601, gemm_seconds=0.0005133375999999995, exposed_seconds=0.01915942018568601,
        extra_seconds=0.0, nic_bytes_max=130000000.0, nic_bytes_mean=130000000.0,
        nic_seconds_max=0.014444444444444444, bytes_by_path={'staged': 520000000.0}, notes=()),
    "gpu-8-rpn1-aware": dict(
        grid='4x2', panel=1250, prefetch=1, steps=7, algo='summa', ranks_per_node=1, ranks_per_host=4,
        seconds=0.014476376799999998, gemm_seconds=0.0005133375999999989, exposed_seconds=0.0139630392,
        extra_seconds=0.0, nic_bytes_max=130000000.0, nic_bytes_mean=130000000.0, nic_seconds_max=0.0065,
        bytes_by_path={'mpi': 520000000.0}, notes=()),
    "gpu-6-shared-staged": dict(
        grid='3x2', panel=1024, prefetch=1, steps=7, algo='summa', ranks_per_node=3, ranks_per_host=6,
        seconds=0.012399653892693482, gemm_seconds=0.0005461216639999991, exposed_seconds=0.011889386148693483,
        extra_seconds=0.0, nic_bytes_max=65603584.0, nic_bytes_mean=65152000.0, nic_seconds_max=0.007289287111111111,
        bytes_by_path={'ipc': 132096000.0, 'staged': 130304000.0}, notes=()),
    "gpu-6-shared-aware": dict(
        grid='3x2', panel=1024, prefetch=1, steps=7, algo='summa', ranks_per_node=3, ranks_per_host=6,
        seconds=0.004973315263999999, gemm_seconds=0.0009661216640000003, exposed_seconds=0.004300822997333333,
        extra_seconds=0.0, nic_bytes_max=65603584.0, nic_bytes_mean=65152000.0, nic_seconds_max=0.0032801792,
        bytes_by_path={'ipc': 132096000.0, 'mpi': 130304000.0}, notes=()),
    "gpu-6-shared-mps": dict(
        grid='3x2', panel=1024, prefetch=1, steps=7, algo='summa', ranks_per_node=3, ranks_per_host=6,
        seconds=0.012399653892693482, gemm_seconds=0.0005461216639999991, exposed_seconds=0.011939340329746112,
        extra_seconds=0.0, nic_bytes_max=65603584.0, nic_bytes_mean=65152000.0, nic_seconds_max=0.007289287111111111,
        bytes_by_path={'ipc': 132096000.0, 'staged': 130304000.0}, notes=()),
    "gpu-6-one-node": dict(
        grid='2x3', panel=1984, prefetch=1, steps=6, algo='summa', ranks_per_node=6, ranks_per_host=6,
        seconds=0.000914628752, gemm_seconds=0.000627992528, exposed_seconds=0.00031452859733333336,
        extra_seconds=0.0, nic_bytes_max=0.0, nic_bytes_mean=0.0, nic_seconds_max=0.0,
        bytes_by_path={'ipc': 275200000.0}, notes=()),
    "gpu-8-split-staged": dict(
        grid='2x4', panel=1250, prefetch=1, steps=7, algo='split-relay', ranks_per_node=4, ranks_per_host=4,
        seconds=0.008674734800000002, gemm_seconds=0.000523093600000001, exposed_seconds=0.0081516412,
        extra_seconds=0.0, nic_bytes_max=30000000.0, nic_bytes_mean=30000000.0,
        nic_seconds_max=0.0033333333333333335, bytes_by_path={'ipc': 480000000.0, 'staged': 120000000.0}, notes=()),
    "gpu-8-split-aware": dict(
        grid='1x8', panel=625, prefetch=1, steps=11, algo='split-relay', ranks_per_node=4, ranks_per_host=4,
        seconds=0.005055453666666668, gemm_seconds=0.0007135319999999999, exposed_seconds=0.0043419216666666675,
        extra_seconds=0.0, nic_bytes_max=40000000.0, nic_bytes_mean=40000000.0, nic_seconds_max=0.002,
        bytes_by_path={'ipc': 960000000.0, 'mpi': 160000000.0}, notes=()),
    "gpu-8-split-3nodes": dict(
        grid='1x12', panel=417, prefetch=1, steps=15, algo='split-relay', ranks_per_node=4, ranks_per_host=4,
        seconds=0.007936443680000002, gemm_seconds=0.0005890120000000014, exposed_seconds=0.0073474316800000005,
        extra_seconds=0.0, nic_bytes_max=53376000.0, nic_bytes_mean=53333333.333333336, nic_seconds_max=0.0026688,
        bytes_by_path={'ipc': 1440000000.0, 'mpi': 320000000.0}, notes=()),
    "gpu-4-common-p0": dict(
        grid='2x2', panel=1100, prefetch=0, steps=2, algo='summa', ranks_per_node=4, ranks_per_host=4,
        seconds=0.00033150026666666665, gemm_seconds=0.0001472336, exposed_seconds=0.00018426666666666668,
        extra_seconds=0.0, nic_bytes_max=0.0, nic_bytes_mean=0.0, nic_seconds_max=0.0,
        bytes_by_path={'ipc': 72160000.0}, notes=()),
    "gpu-4-p2-panel": dict(
        grid='2x2', panel=300, prefetch=2, steps=10, algo='summa', ranks_per_node=4, ranks_per_host=4,
        seconds=0.00046391759999999993, gemm_seconds=0.00029994399999999996, exposed_seconds=0.00016397359999999997,
        extra_seconds=0.0, nic_bytes_max=0.0, nic_bytes_mean=0.0, nic_seconds_max=0.0,
        bytes_by_path={'ipc': 72160000.0}, notes=()),
    "gpu-4-tf32": dict(
        grid='2x2', panel=1100, prefetch=2, steps=5, algo='summa', ranks_per_node=4, ranks_per_host=4,
        seconds=0.00026057942499999997, gemm_seconds=6.383737499999998e-05, exposed_seconds=0.00019674204999999998,
        extra_seconds=0.0, nic_bytes_max=0.0, nic_bytes_mean=0.0, nic_seconds_max=0.0,
        bytes_by_path={'ipc': 36080000.0}, notes=()),
    "gpu-2-measured": dict(
        grid='2x1', panel=256, prefetch=1, steps=4, algo='summa', ranks_per_node=2, ranks_per_host=2,
        seconds=0.00022342285714285713, gemm_seconds=0.00012377142857142862, exposed_seconds=9.965142857142851e-05,
        extra_seconds=0.0, nic_bytes_max=0.0, nic_bytes_mean=0.0, nic_seconds_max=0.0,
        bytes_by_path={'ipc': 12288000.0}, notes=()),
    "gpu-3-balance-none": dict(
        grid='1x3', panel=734, prefetch=1, steps=3, algo='summa', ranks_per_node=3, ranks_per_host=3,
        seconds=0.000573336, gemm_seconds=0.00042924273333333333, exposed_seconds=0.00025664965333333336,
        extra_seconds=0.0, nic_bytes_max=0.0, nic_bytes_mean=0.0, nic_seconds_max=0.0,
        bytes_by_path={'ipc': 70400000.0}, notes=()),
    "gpu-3-balance-share": dict(
        grid='1x3', panel=1088, prefetch=1, steps=3, algo='summa', ranks_per_node=3, ranks_per_host=3,
        seconds=0.0005537233066666667, gemm_seconds=0.00030648493333333335, exposed_seconds=0.0002472383733333333,
        extra_seconds=0.0, nic_bytes_max=0.0, nic_bytes_mean=0.0, nic_seconds_max=0.0,
        bytes_by_path={'ipc': 70400000.0}, notes=()),
    "gpu-2p5d-2-host": dict(
        grid='2x2', panel=2000, prefetch=1, steps=13, algo='2.5d:2', ranks_per_node=4, ranks_per_host=8,
        seconds=0.04152546020499586, gemm_seconds=0.0016636134545454557, exposed_seconds=0.0398222467504504,
        extra_seconds=3.96e-05, nic_bytes_max=288000000.0, nic_bytes_mean=288000000.0, nic_seconds_max=0.032,
        bytes_by_path={'ipc': 320000000.0, 'staged': 288000000.0}, notes=()),
    "gpu-2p5d-4": dict(
        grid='2x1', panel=5000, prefetch=1, steps=5, algo='2.5d:4', ranks_per_node=4, ranks_per_host=4,
        seconds=0.0079872688, gemm_seconds=0.0009679440000000002, exposed_seconds=0.0069005248,
        extra_seconds=0.0001188, nic_bytes_max=72000000.0, nic_bytes_mean=72000000.0, nic_seconds_max=0.0036,
        bytes_by_path={'mpi': 144000000.0}, notes=()),
    "gpu-2p5d-auto": dict(
        grid='1x1', panel=5000, prefetch=1, steps=1, algo='2.5d:8', ranks_per_node=8, ranks_per_host=8,
        seconds=0.0020138564210526316, gemm_seconds=0.0017366564210526316, exposed_seconds=0.0,
        extra_seconds=0.0002772, nic_bytes_max=0.0, nic_bytes_mean=0.0, nic_seconds_max=0.0, bytes_by_path={},
        notes=()),
    "gpu-nofit": dict(
        grid='2x2', panel=255, prefetch=1, steps=238, algo='summa', ranks_per_node=4, ranks_per_host=4,
        seconds=math.inf, gemm_seconds=4.120267574399994, exposed_seconds=0.0001016, extra_seconds=0.0,
        nic_bytes_max=0.0, nic_bytes_mean=0.0, nic_seconds_max=0.0, bytes_by_path={'ipc': 57600000000.0},
        notes=('does not fit: 1 rank(s) per device need more than 1 GiB',)),
    "gpu-2p5d-nofit": dict(
        grid='1x2', panel=255, prefetch=1, steps=118, algo='2.5d:2', ranks_per_node=4, ranks_per_host=4,
        seconds=math.inf, gemm_seconds=4.094768438399992, exposed_seconds=3.9999999999999996e-05,
        extra_seconds=0.055212, nic_bytes_max=0.0, nic_bytes_mean=0.0, nic_seconds_max=0.0,
        bytes_by_path={'ipc': 14400000000.0},
        notes=('does not fit: 1 rank(s) per device need more than 1 GiB', 'does not fit: a layer rank needs more than 1 GiB')),
    "gpu-4-one-device-aware": dict(
        grid='1x4', panel=650, prefetch=1, steps=7, algo='summa', ranks_per_node=1, ranks_per_host=4,
        seconds=0.004916927999999997, gemm_seconds=0.004447199999999997, exposed_seconds=0.0021196666666666664,
        extra_seconds=0.0, nic_bytes_max=149760000.0, nic_bytes_mean=149760000.0, nic_seconds_max=0.007488,
        bytes_by_path={'mpi': 149760000.0}, notes=()),
    "gpu-4-one-device-staged": dict(
        grid='1x4', panel=650, prefetch=1, steps=7, algo='summa', ranks_per_node=1, ranks_per_host=4,
        seconds=0.009652958414209526, gemm_seconds=0.0006773250000000005, exposed_seconds=0.009199883414209525,
        extra_seconds=0.0, nic_bytes_max=149760000.0, nic_bytes_mean=149760000.0, nic_seconds_max=0.01664,
        bytes_by_path={'staged': 149760000.0}, notes=()),
    "h200x2-worked": dict(
        grid='1x2', panel=4096, prefetch=1, steps=2, algo='summa', ranks_per_node=2, ranks_per_host=2,
        seconds=0.009601793567493525, gemm_seconds=0.009551793567493526, exposed_seconds=4.9999999999999996e-05,
        extra_seconds=0.0, nic_bytes_max=0.0, nic_bytes_mean=0.0, nic_seconds_max=0.0,
        bytes_by_path={'ipc': 536870912.0}, notes=()),
    "h200x2-2p5d-16": dict(
        grid='1x2', panel=1786, prefetch=1, steps=14, algo='2.5d:8', ranks_per_node=16, ranks_per_host=16,
        seconds=0.004728725542692544, gemm_seconds=0.00458978464533797, exposed_seconds=4.9999999999999996e-05,
        extra_seconds=8.894089735457453e-05, nic_bytes_max=0.0, nic_bytes_mean=0.0, nic_seconds_max=0.0,
        bytes_by_path={'ipc': 204800000.0}, notes=()),
    "h200x8-2p5d-16": dict(
        grid='2x1', panel=6250, prefetch=1, steps=7, algo='2.5d:8', ranks_per_node=8, ranks_per_host=8,
        seconds=0.005162323545758127, gemm_seconds=0.0005520850990657069, exposed_seconds=0.004521330430240127,
        extra_seconds=8.890801645229272e-05, nic_bytes_max=102400000.0, nic_bytes_mean=102400000.0,
        nic_seconds_max=0.0022755555555555554, bytes_by_path={'mpi': 204800000.0}, notes=()),
    "gpu-6-split-uneven": dict(
        grid='2x3', panel=1984, prefetch=1, steps=6, algo='split-relay', ranks_per_node=4, ranks_per_host=6,
        seconds=0.0037931375146666676, gemm_seconds=0.00052190272, exposed_seconds=0.0033559098613333343,
        extra_seconds=0.0, nic_bytes_max=61022208.0, nic_bytes_mean=59904000.0, nic_seconds_max=0.0030511104,
        bytes_by_path={'ipc': 179200000.0, 'mpi': 119808000.0}, notes=()),
    "cpu-6-split-uneven": dict(
        grid='2x3', panel=189, prefetch=1, steps=13, algo='split-relay', ranks_per_node=4, ranks_per_host=6,
        seconds=0.04943420411764707, gemm_seconds=0.04339949647058824, exposed_seconds=0.0061275700000000015,
        extra_seconds=0.0, nic_bytes_max=25379600.0, nic_bytes_mean=25379600.0, nic_seconds_max=0.00507592,
        bytes_by_path={'mpi': 25379600.0, 'shm': 36502400.0}, notes=()),
    "gpu-12-split-staged": dict(
        grid='1x12', panel=417, prefetch=1, steps=15, algo='split-relay', ranks_per_node=4, ranks_per_host=4,
        seconds=0.026147828270826692, gemm_seconds=0.0005890119999999947, exposed_seconds=0.0255588162708267,
        extra_seconds=0.0, nic_bytes_max=53376000.0, nic_bytes_mean=53333333.333333336,
        nic_seconds_max=0.0059306666666666666, bytes_by_path={'ipc': 1440000000.0, 'staged': 320000000.0}, notes=()),
    "gpu-5-split-lone-root": dict(
        grid='1x5', panel=1024, prefetch=1, steps=7, algo='split-relay', ranks_per_node=4, ranks_per_host=5,
        seconds=0.006447055040000001, gemm_seconds=0.0006047299200000005, exposed_seconds=0.005993484000000002,
        extra_seconds=0.0, nic_bytes_max=107520000.0, nic_bytes_mean=65280000.0, nic_seconds_max=0.005376,
        bytes_by_path={'ipc': 288000000.0, 'mpi': 130560000.0}, notes=()),
    "gpu-8-split-gemm-bound": dict(
        grid='1x8', panel=625, prefetch=2, steps=11, algo='split-relay', ranks_per_node=4, ranks_per_host=4,
        seconds=0.047812750677333336, gemm_seconds=0.047566777344, exposed_seconds=0.0002459733333333333,
        extra_seconds=0.0, nic_bytes_max=40000000.0, nic_bytes_mean=40000000.0, nic_seconds_max=0.002,
        bytes_by_path={'ipc': 960000000.0, 'mpi': 160000000.0}, notes=()),
    "gpu-2p5d-8-on-2-gpus": dict(
        grid='1x2', panel=1667, prefetch=1, steps=6, algo='2.5d:4', ranks_per_node=8, ranks_per_host=8,
        seconds=0.004894024000000002, gemm_seconds=0.004735224000000002, exposed_seconds=3.9999999999999996e-05,
        extra_seconds=0.0001188, nic_bytes_max=0.0, nic_bytes_mean=0.0, nic_seconds_max=0.0,
        bytes_by_path={'ipc': 160000000.0}, notes=()),
    "gpu-2p5d-6-on-3-gpus": dict(
        grid='1x3', panel=1667, prefetch=1, steps=12, algo='2.5d:2', ranks_per_node=6, ranks_per_host=6,
        seconds=0.005535096000000001, gemm_seconds=0.005446296000000001, exposed_seconds=3.9999999999999996e-05,
        extra_seconds=4.88e-05, nic_bytes_max=0.0, nic_bytes_mean=0.0, nic_seconds_max=0.0,
        bytes_by_path={'ipc': 640000000.0}, notes=()),
    "gpu-8-split-p0": dict(
        grid='1x8', panel=625, prefetch=0, steps=8, algo='split-relay', ranks_per_node=4, ranks_per_host=4,
        seconds=0.009934678109866665, gemm_seconds=0.004716011443200002, exposed_seconds=0.005218666666666663,
        extra_seconds=0.0, nic_bytes_max=40000000.0, nic_bytes_mean=40000000.0, nic_seconds_max=0.002,
        bytes_by_path={'ipc': 960000000.0, 'mpi': 160000000.0}, notes=()),
    "gpu-8-split-slow-ipc": dict(
        grid='4x2', panel=1000, prefetch=1, steps=7, algo='split-relay', ranks_per_node=4, ranks_per_host=4,
        seconds=0.010998871466666667, gemm_seconds=0.00033586026666666835, exposed_seconds=0.010663011200000001,
        extra_seconds=0.0, nic_bytes_max=8000000.0, nic_bytes_mean=8000000.0, nic_seconds_max=0.0001,
        bytes_by_path={'ipc': 320000000.0, 'mpi': 32000000.0}, notes=()),
    "gpu-2p5d-given": dict(
        grid='2x1', panel=512, prefetch=1, steps=22, algo='2.5d:4', ranks_per_node=4, ranks_per_host=8,
        seconds=0.012666151854477172, gemm_seconds=0.0017032696324431925, exposed_seconds=0.01088541779903398,
        extra_seconds=7.7464423e-05, nic_bytes_max=72040000.0, nic_bytes_mean=72040000.0,
        nic_seconds_max=0.008004444444444444, bytes_by_path={'staged': 72040000.0}, notes=()),
    "gpu-2p5d-mps-2-gpus": dict(
        grid='2x2', panel=2000, prefetch=1, steps=13, algo='2.5d:2', ranks_per_node=8, ranks_per_host=8,
        seconds=0.005031254115345028, gemm_seconds=0.004937193151345029, exposed_seconds=5.440266666666667e-05,
        extra_seconds=3.9658297333333334e-05, nic_bytes_max=0.0, nic_bytes_mean=0.0, nic_seconds_max=0.0,
        bytes_by_path={'ipc': 608320000.0}, notes=()),
    "h200x8-2p5d-4-wins": dict(
        grid='1x1', panel=250000, prefetch=1, steps=1, algo='2.5d:4', ranks_per_node=4, ranks_per_host=4,
        seconds=0.009357414877484368, gemm_seconds=0.009304001134994723, exposed_seconds=0.0,
        extra_seconds=5.341374248964465e-05, nic_bytes_max=0.0, nic_bytes_mean=0.0, nic_seconds_max=0.0,
        bytes_by_path={}, notes=()),
    "gpu-2p5d-1": dict(
        grid='2x2', panel=6667, prefetch=1, steps=9, algo='2.5d:1', ranks_per_node=4, ranks_per_host=4,
        seconds=0.003190442050666667, gemm_seconds=0.002155032622222222, exposed_seconds=0.0011879882666666671,
        extra_seconds=0.0, nic_bytes_max=0.0, nic_bytes_mean=0.0, nic_seconds_max=0.0,
        bytes_by_path={'ipc': 1216640000.0}, notes=()),
    "gpu-2p5d-common": dict(
        grid='2x2', panel=2000, prefetch=1, steps=13, algo='2.5d:2', ranks_per_node=8, ranks_per_host=8,
        seconds=0.003152749866222222, gemm_seconds=0.003059890235555555, exposed_seconds=0.00032402346666666635,
        extra_seconds=3.9658297333333334e-05, nic_bytes_max=0.0, nic_bytes_mean=0.0, nic_seconds_max=0.0,
        bytes_by_path={'ipc': 608320000.0}, notes=()),
    "gpu-2p5d-tall": dict(
        grid='1x2', panel=5000, prefetch=1, steps=4, algo='2.5d:2', ranks_per_node=4, ranks_per_host=4,
        seconds=0.0021981437964444443, gemm_seconds=0.0020065212688888884, exposed_seconds=0.00012530522666666627,
        extra_seconds=6.7288964e-05, nic_bytes_max=0.0, nic_bytes_mean=0.0, nic_seconds_max=0.0,
        bytes_by_path={'ipc': 320160000.0}, notes=()),
    "gpu-2p5d-wide": dict(
        grid='2x1', panel=5000, prefetch=1, steps=4, algo='2.5d:2', ranks_per_node=4, ranks_per_host=4,
        seconds=0.0020867282773333333, gemm_seconds=0.00197944238, exposed_seconds=3.9999999999999996e-05,
        extra_seconds=6.728589733333333e-05, nic_bytes_max=0.0, nic_bytes_mean=0.0, nic_seconds_max=0.0,
        bytes_by_path={'ipc': 288160000.0}, notes=()),
    "gpu-12-shared-staged-2-hosts": dict(
        grid='4x3', panel=1024, prefetch=1, steps=7, algo='summa', ranks_per_node=6, ranks_per_host=6,
        seconds=0.012143729190533458, gemm_seconds=0.0003271953309090931, exposed_seconds=0.011843275323866793,
        extra_seconds=0.0, nic_bytes_max=45088768.0, nic_bytes_mean=34240000.0,
        nic_seconds_max=0.0050098631111111114, bytes_by_path={'ipc': 304640000.0, 'staged': 136960000.0}, notes=()),
    "gpu-auto-one-node": dict(
        grid='1x3', panel=256, prefetch=2, steps=26, algo='summa', ranks_per_node=3, ranks_per_host=3,
        seconds=0.0031088014414035075, gemm_seconds=0.0030288014414035077, exposed_seconds=9.359799541520467e-05,
        extra_seconds=0.0, nic_bytes_max=0.0, nic_bytes_mean=0.0, nic_seconds_max=0.0,
        bytes_by_path={'ipc': 288096000.0}, notes=()),
    "gpu-auto-balance-none": dict(
        grid='1x3', panel=2000, prefetch=1, steps=3, algo='summa', ranks_per_node=3, ranks_per_host=3,
        seconds=0.0024628310766666665, gemm_seconds=0.0024228310766666664, exposed_seconds=0.0007217757057777776,
        extra_seconds=0.0, nic_bytes_max=0.0, nic_bytes_mean=0.0, nic_seconds_max=0.0,
        bytes_by_path={'ipc': 288096000.0}, notes=()),
    "gpu-auto-two-nodes": dict(
        grid='1x2', panel=512, prefetch=1, steps=18, algo='2.5d:4', ranks_per_node=4, ranks_per_host=8,
        seconds=0.024631349776198457, gemm_seconds=0.0040842811412121136, exposed_seconds=0.020364352096410583,
        extra_seconds=0.000229402446, nic_bytes_max=180060000.0, nic_bytes_mean=180060000.0,
        nic_seconds_max=0.020006666666666666, bytes_by_path={'staged': 180060000.0}, notes=()),
    "gpu-auto-grid": dict(
        grid='1x6', panel=1024, prefetch=1, steps=8, algo='split-relay', ranks_per_node=3, ranks_per_host=6,
        seconds=0.007613228266666667, gemm_seconds=0.0019812480000000006, exposed_seconds=0.006052268986666666,
        extra_seconds=0.0, nic_bytes_max=96256000.0, nic_bytes_mean=96000000.0, nic_seconds_max=0.0048128,
        bytes_by_path={'ipc': 768000000.0, 'mpi': 192000000.0}, notes=()),
    "gpu-10-shared-aware": dict(
        grid='5x2', panel=1024, prefetch=1, steps=8, algo='summa', ranks_per_node=5, ranks_per_host=5,
        seconds=0.0035407495200000002, gemm_seconds=0.00041599782399999994, exposed_seconds=0.0032124140266666665,
        extra_seconds=0.0, nic_bytes_max=27394048.0, nic_bytes_mean=26432000.0, nic_seconds_max=0.0013697024,
        bytes_by_path={'ipc': 323072000.0, 'mpi': 105728000.0}, notes=()),
    "gpu-3-share-grid-3x1": dict(
        grid='3x1', panel=1088, prefetch=1, steps=3, algo='summa', ranks_per_node=3, ranks_per_host=3,
        seconds=0.0006041709213333334, gemm_seconds=0.0003264976733333334, exposed_seconds=0.000277673248,
        extra_seconds=0.0, nic_bytes_max=0.0, nic_bytes_mean=0.0, nic_seconds_max=0.0,
        bytes_by_path={'ipc': 73920000.0}, notes=()),
    "gpu-3-share-grid-1x3": dict(
        grid='1x3', panel=1088, prefetch=1, steps=3, algo='summa', ranks_per_node=3, ranks_per_host=3,
        seconds=0.000575115796, gemm_seconds=0.0003324748466666667, exposed_seconds=0.00024264094933333332,
        extra_seconds=0.0, nic_bytes_max=0.0, nic_bytes_mean=0.0, nic_seconds_max=0.0,
        bytes_by_path={'ipc': 70435200.0}, notes=()),
    "cpu-3-shared": dict(
        grid='3x1', panel=256, prefetch=1, steps=8, algo='summa', ranks_per_node=3, ranks_per_host=3,
        seconds=0.037752347450980404, gemm_seconds=0.03454541411764707, exposed_seconds=0.003206933333333335,
        extra_seconds=0.0, nic_bytes_max=0.0, nic_bytes_mean=0.0, nic_seconds_max=0.0,
        bytes_by_path={'shm': 35387200.0}, notes=()),
    "gpu-9-on-2-gpus-grid-3x3": dict(
        grid='3x3', panel=1408, prefetch=1, steps=7, algo='summa', ranks_per_node=9, ranks_per_host=9,
        seconds=0.0016593074506666668, gemm_seconds=0.0014499476160000002, exposed_seconds=0.0005494891413333333,
        extra_seconds=0.0, nic_bytes_max=0.0, nic_bytes_mean=0.0, nic_seconds_max=0.0,
        bytes_by_path={'ipc': 358400000.0}, notes=()),
    "gpu-12-shared-staged-vnodes": dict(
        grid='6x2', panel=1024, prefetch=1, steps=8, algo='summa', ranks_per_node=3, ranks_per_host=6,
        seconds=0.01375498694251918, gemm_seconds=0.0004206068533333321, exposed_seconds=0.013451985689185845,
        extra_seconds=0.0, nic_bytes_max=75718656.0, nic_bytes_mean=74688000.0, nic_seconds_max=0.008413184,
        bytes_by_path={'ipc': 213248000.0, 'staged': 298752000.0}, notes=()),
    "gpu-2p5d-6-on-4-gpus": dict(
        grid='1x3', panel=1667, prefetch=1, steps=12, algo='2.5d:2', ranks_per_node=6, ranks_per_host=6,
        seconds=0.004072219943444446, gemm_seconds=0.0036348601753333357, exposed_seconds=0.0019170879040000008,
        extra_seconds=4.8879764e-05, nic_bytes_max=0.0, nic_bytes_mean=0.0, nic_seconds_max=0.0,
        bytes_by_path={'ipc': 640320000.0}, notes=()),
    "gpu-8-relay-p0": dict(
        grid='1x8', panel=625, prefetch=0, steps=8, algo='summa', ranks_per_node=4, ranks_per_host=4,
        seconds=0.009340296, gemm_seconds=0.0006402960000000005, exposed_seconds=0.0087, extra_seconds=0.0,
        nic_bytes_max=80000000.0, nic_bytes_mean=40000000.0, nic_seconds_max=0.004,
        bytes_by_path={'ipc': 960000000.0, 'mpi': 160000000.0}, notes=()),
    "cpu-2-split-one-a-node": dict(
        grid='1x2', panel=213, prefetch=1, steps=11, algo='split-relay', ranks_per_node=1, ranks_per_host=2,
        seconds=0.03706340000000001, gemm_seconds=0.0325874, exposed_seconds=0.0044760000000000095,
        extra_seconds=0.0, nic_bytes_max=20400000.0, nic_bytes_mean=20400000.0, nic_seconds_max=0.00408,
        bytes_by_path={'mpi': 20400000.0}, notes=()),
    "gpu-8-split-tall-2x4": dict(
        grid='2x4', panel=1000, prefetch=1, steps=7, algo='split-relay', ranks_per_node=4, ranks_per_host=4,
        seconds=0.0024319874666666667, gemm_seconds=0.00037387226666666686, exposed_seconds=0.0020581152,
        extra_seconds=0.0, nic_bytes_max=8000000.0, nic_bytes_mean=8000000.0, nic_seconds_max=0.0004,
        bytes_by_path={'ipc': 768000000.0, 'mpi': 32000000.0}, notes=()),
    "gpu-6-mps-aware-vnodes-2-gpus": dict(
        grid='6x1', panel=667, prefetch=1, steps=9, algo='summa', ranks_per_node=3, ranks_per_host=6,
        seconds=0.003690094821052632, gemm_seconds=0.0009412232982456136, exposed_seconds=0.0031730593122807024,
        extra_seconds=0.0, nic_bytes_max=41620800.0, nic_bytes_mean=41600000.0,
        nic_seconds_max=0.00208104, bytes_by_path={'ipc': 332800000.0, 'mpi': 83200000.0}, notes=()),
    "cpu-12-hosts-of-5-2-nics": dict(
        grid='3x4', panel=256, prefetch=1, steps=20, algo='summa', ranks_per_node=2, ranks_per_host=5,
        seconds=0.09781866554621853, gemm_seconds=0.06752000000000001, exposed_seconds=0.04152703731092442,
        extra_seconds=0.0, nic_bytes_max=93760000.0, nic_bytes_mean=53066666.666666664,
        nic_seconds_max=0.018752, bytes_by_path={'mpi': 318400000.0, 'shm': 136000000.0}, notes=()),
    "gpu-6-one-gpu-staged-slow-ipc": dict(
        grid='1x6', panel=667, prefetch=1, steps=9, algo='summa', ranks_per_node=2, ranks_per_host=6,
        seconds=0.18239546157222197, gemm_seconds=0.09320498561820201, exposed_seconds=0.1675692681890106,
        extra_seconds=0.0, nic_bytes_max=192000000.0, nic_bytes_mean=192000000.0,
        nic_seconds_max=0.021333333333333333, bytes_by_path={'ipc': 288000000.0, 'staged': 192000000.0}, notes=()),
    "gpu-2p5d-12-staged-one-host": dict(
        grid='3x2', panel=1667, prefetch=1, steps=15, algo='2.5d:2', ranks_per_node=6, ranks_per_host=12,
        seconds=0.0719656480602877, gemm_seconds=0.004403122280639172, exposed_seconds=0.0691834303463152,
        extra_seconds=5.186666666666666e-05, nic_bytes_max=576000000.0, nic_bytes_mean=576000000.0,
        nic_seconds_max=0.064, bytes_by_path={'ipc': 736000000.0, 'staged': 576000000.0}, notes=()),
    "gpu-6-one-gpu-aware-slow-ipc": dict(
        grid='3x2', panel=1334, prefetch=1, steps=7, algo='summa', ranks_per_node=2, ranks_per_host=6,
        seconds=0.08719329656666668, gemm_seconds=0.0039888911333333344, exposed_seconds=0.08538825796666667,
        extra_seconds=0.0, nic_bytes_max=166400000.0, nic_bytes_mean=166400000.0,
        nic_seconds_max=0.00832, bytes_by_path={'ipc': 96000000.0, 'mpi': 166400000.0}, notes=()),
    "gpu-6-hosts-of-4-nodes-of-3": dict(
        grid='2x3', panel=1984, prefetch=1, steps=6, algo='summa', ranks_per_node=3, ranks_per_host=4,
        seconds=0.014713530666666665, gemm_seconds=0.0042851817066666634, exposed_seconds=0.013713415759999998,
        extra_seconds=0.0, nic_bytes_max=118272000.0, nic_bytes_mean=83328000.0,
        nic_seconds_max=0.0059136, bytes_by_path={'ipc': 108544000.0, 'mpi': 166656000.0}, notes=()),
    "cpu-4-split-one-element": dict(
        grid='1x4', panel=1, prefetch=1, steps=1, algo='split-relay', ranks_per_node=2, ranks_per_host=4,
        seconds=4.916372166666667e-05, gemm_seconds=1.0163396666666667e-05, exposed_seconds=4.2000449999999995e-05,
        extra_seconds=0.0, nic_bytes_max=1.0, nic_bytes_mean=1.0,
        nic_seconds_max=2e-10, bytes_by_path={'mpi': 2.0, 'shm': 4.0}, notes=()),
    "gpu-2p5d-staged-nofit": dict(
        grid='2x1', panel=255, prefetch=1, steps=120, algo='2.5d:2', ranks_per_node=2, ranks_per_host=4,
        seconds=math.inf, gemm_seconds=4.126582656000008, exposed_seconds=0.001778698805194805,
        extra_seconds=0.055212, nic_bytes_max=14400000000.0, nic_bytes_mean=14400000000.0,
        nic_seconds_max=1.6, bytes_by_path={'staged': 14400000000.0},
        notes=('does not fit: 1 rank(s) per device need more than 1 GiB',
               'does not fit: a layer rank needs more than 1 GiB')),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_figures_of_each_placement(name):
    """Seconds, GEMM and exposed time, reduction, bytes by path and by NIC, grid, panel and steps, notes."""
    prob, ranks, machine, options = CASES[name]
    p = predict(prob, ranks, machine, **options)
    want = FIGURES[name]
    for field, value in want.items():
        got = getattr(p, field)
        if isinstance(value, float):
            assert got == pytest.approx(value, rel=1e-12, abs=0), field
        elif isinstance(value, dict):
            assert got.keys() == value.keys(), field
            assert all(got[k] == pytest.approx(v, rel=1e-12, abs=0) for k, v in value.items()), field
        else:
            assert got == value, field
    assert p.ranks == ranks
    if math.isfinite(p.seconds):
        assert p.tflops == pytest.approx(prob.flops / p.seconds / 1e12, rel=1e-12, abs=0)
    else:
        assert p.tflops == 0.0


# -- the descriptions ------------------------------------------------------------------------------


def test_the_built_in_descriptions_are_the_files_shipped_beside_the_model():
    """Every ``hpcmm/model/machines/NAME.json`` is the built-in ``NAME``, read whole, and none other."""
    folder = Path(model.__file__).resolve().parent / "machines"
    shipped = {path.stem: json.loads(path.read_text(encoding="utf-8")) for path in folder.glob("*.json")}
    assert len(shipped) >= 4
    loaded = model._load_builtin()
    assert loaded == shipped and list(loaded) == sorted(shipped)
    assert loaded == model.BUILTIN
    assert all(builtin(name) == Machine(**data) for name, data in shipped.items())


def test_a_description_is_written_one_field_a_line():
    """``to_json`` (what ``model measure --save`` writes): indented by two, readable back to the same machine."""
    machine = rich()
    text = machine.to_json()
    assert text.startswith('{\n  "name": "rich",\n  "description": "",\n')
    assert '\n  "gemm": {\n    "float64": {\n      "tflops": 50.0,\n' in text
    assert Machine(**json.loads(text)) == machine


# -- transfers -------------------------------------------------------------------------------------


def test_a_staged_transfer_end_to_end():
    """Latency, the first chunk to the host, the bytes at the host MPI's rate by message size and
    contention, the last chunk to the device (rates of 0.5 MiB and 4 MiB given, chunks of 2 MiB)."""
    machine = rich()
    mib = 2.0**20
    nbytes = np.array([0.5 * mib, 5 * mib])
    copy = 22e9
    # 0.5 MiB: one chunk at the 0.5 MiB rate; 5 MiB: chunks of 2 MiB, at 2/3 of the way from 6 to 11 in log size
    alone = np.array([6.0, 6.0 + 5.0 * 2.0 / 3.0])
    for k in (1, 2, 3):
        rate = np.minimum(alone / (1 + 0.3 * (k - 1)), 15.0 / k)
        want = 40e-6 + np.array([0.5 * mib, 2 * mib]) / copy + nbytes / (rate * 1e9) + np.array([0.5 * mib, mib]) / copy
        got = model.staged_seconds(nbytes, machine, concurrent=k)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)
    assert model.staged_seconds(5 * mib, machine) == pytest.approx(
        40e-6 + 3 * mib / copy + 5 * mib / ((6.0 + 10.0 / 3.0) * 1e9), rel=1e-12, abs=0)


# -- what --algo auto weighs -----------------------------------------------------------------------

#: (problem, ranks, ranks per host, ranks per node) on h200x8-ndr; the winner varies.
AUTO = [
    (Problem(4096, 4096, 200000), 8, 8, 4),  # 2.5d:2
    (Problem(1024, 1024, 1000000), 4, 4, None),  # 2.5d:4
    (Problem(2048, 2048, 100000), 8, 8, None),  # 2.5d:8
    (Problem(8192, 8192, 8192), 16, 8, None),  # split-relay
    (Problem(8192, 8192, 8192), 4, 4, None),  # summa
    (Problem(1024, 1024, 400000), 12, 6, 4),  # nodes of 4 on hosts of 6: 2.5d:2 only
]


@pytest.mark.parametrize("case", range(len(AUTO)))
def test_auto_is_the_fastest_of_the_layer_counts_every_node_host_and_job_divides(case):
    """``auto`` weighs summa, split-relay and ``2.5d:C`` for C of 2, 4, 8 that divide the ranks of a node, of a
    host and of the job, and returns the fastest."""
    prob, ranks, per_host, per_node = AUTO[case]
    machine = builtin("h200x8-ndr")
    node = per_node or per_host
    names = ["summa", "split-relay"] + [f"2.5d:{c}" for c in (2, 4, 8)
                                        if node % c == 0 and per_host % c == 0 and ranks % c == 0]
    each = {name: predict(prob, ranks, machine, ranks_per_host=per_host, ranks_per_node=per_node, algo=name)
            for name in names}
    best = min(each.values(), key=lambda p: p.seconds)
    auto = predict(prob, ranks, machine, ranks_per_host=per_host, ranks_per_node=per_node, algo="auto")
    assert (auto.algo, auto.seconds) == (best.algo, best.seconds)
    assert best.algo == ["2.5d:2", "2.5d:4", "2.5d:8", "split-relay", "summa", "2.5d:2"][case]


def test_auto_on_one_host_counts_every_rank_on_it():
    """Without ranks per host a one-host machine holds every rank (as :func:`place` puts them): ``auto`` weighs
    every layer count the job divides, not only those of one host's devices (16 ranks on h200x2's 2 GPUs)."""
    prob, machine = Problem(1024, 1024, 1000000), builtin("h200x2")
    each = {name: predict(prob, 16, machine, algo=name) for name in ("summa", "split-relay", "2.5d:2", "2.5d:4", "2.5d:8")}
    best = min(each.values(), key=lambda p: p.seconds)
    auto = predict(prob, 16, machine, algo="auto")
    assert best.algo == "2.5d:8" and (auto.algo, auto.seconds) == (best.algo, best.seconds)


#: (fields of the JSON file besides its name, the message after ``--machine=PATH: ``).
BAD_DESCRIPTIONS = [
    ({"colour": "red", "big": 1}, "unknown field(s) big, colour"),
    ({"description": 5}, "description=5: expected a text"),
    ({"devices_per_node": 2.5}, "devices_per_node=2.5: expected an integer"),
    ({"devices_per_node": True}, "devices_per_node=true: expected an integer"),
    ({"memory_gib": "a"}, 'memory_gib="a": expected a finite number'),
    ({"memory_gib": False}, "memory_gib=false: expected a finite number"),
    ({"memory_gib": float("nan")}, "memory_gib=NaN: expected a finite number"),
    ({"memory_gib": float("inf")}, "memory_gib=Infinity: expected a finite number"),
    ({"shared_copy_us": "x"}, 'shared_copy_us="x": expected a finite number or null'),
    ({"cuda_aware": 1}, "cuda_aware=1: expected true or false"),
    ({"staged_gbps_by_mib": [[1, 2, 3]]}, "staged_gbps_by_mib=[[1, 2, 3]]: expected rows of 2 numbers"),
    ({"staged_gbps_by_mib": [[1, "a"]]}, 'staged_gbps_by_mib=[[1, "a"]]: expected rows of 2 numbers'),
    ({"staged_gbps_by_mib": [1, 2]}, "staged_gbps_by_mib=[1, 2]: expected rows of 2 numbers"),
    ({"staged_gbps_by_mib": [[1, True]]}, "staged_gbps_by_mib=[[1, true]]: expected rows of 2 numbers"),
    ({"staged_gbps_by_mib": {"1": 2}}, 'staged_gbps_by_mib={"1": 2}: expected rows of 2 numbers'),
    ({"gemm": []}, "gemm=[]: expected an object"),
    ({"description": ["x" * 100]}, "description=" + '["' + "x" * 58 + ": expected a text"),  # 60 characters of it
    ({"gemm": {"float8": {"tflops": 1}}},
     "gemm.float8: expected a type of float64, float32, tf32, float16, bfloat16, complex128, complex64 and its curve "
     "with tflops > 0"),
    ({"gemm": {"float64": 3}}, "gemm.float64: expected a type of float64, float32, tf32, float16, bfloat16, "
                               "complex128, complex64 and its curve with tflops > 0"),
    ({"gemm": {"float64": {"half_m": 3}}}, "gemm.float64: expected a type of float64, float32, tf32, float16, "
                                            "bfloat16, complex128, complex64 and its curve with tflops > 0"),
    ({"gemm": {"float64": {"tflops": 0}}}, "gemm.float64: expected a type of float64, float32, tf32, float16, "
                                            "bfloat16, complex128, complex64 and its curve with tflops > 0"),
    ({"gemm": {"float64": {"tflops": "1"}}}, "gemm.float64: expected a type of float64, float32, tf32, float16, "
                                              "bfloat16, complex128, complex64 and its curve with tflops > 0"),
    ({"gemm": {"float64": {"tflops": 1, "colour": 1, "big": 2}}}, "gemm.float64: unknown field(s) big, colour"),
    ({"gemm": {"float64": {"tflops": 1, "half_m": "a"}}}, 'gemm.float64.half_m="a": expected a finite number'),
    ({"gemm": {"float64": {"tflops": 1, "half_m": [1] * 40}}},
     "gemm.float64.half_m=" + json.dumps([1] * 40)[:60] + ": expected a finite number"),
    ({"gemm": {"float64": {"tflops": 1, "shapes": [[1, 2, 3]]}}},
     "gemm.float64.shapes=[[1, 2, 3]]: expected rows of 4 numbers"),
    ({"gemm": {"float64": {"tflops": 1, "shapes": 4}}}, "gemm.float64.shapes=4: expected rows of 4 numbers"),
    ({"gemm": {"float64": {"tflops": 2}, "float8": {"tflops": 1}}},
     "gemm.float8: expected a type of float64, float32, tf32, float16, bfloat16, complex128, complex64 and its curve "
     "with tflops > 0"),
    ({"nics_per_node": 0}, "machine x: nics_per_node=0 must be at least 1"),
    ({"device": "tpu"}, "machine x: device='tpu': expected gpu or cpu"),
    ({"net_gbps": 0}, "machine x: net_gbps=0 must be positive"),
    # integers past a float's range: refused in a line, not an OverflowError
    ({"devices_per_node": 10**400}, f"devices_per_node={str(10**400)[:60]}: expected an integer"),
    ({"memory_gib": 10**400}, f"memory_gib={str(10**400)[:60]}: expected a finite number"),
]


@pytest.mark.parametrize("case", range(len(BAD_DESCRIPTIONS)))
def test_a_bad_description_is_refused_in_one_line(tmp_path, case):
    """``--machine=FILE``: each field of the wrong type, a bad GEMM curve or a bad value, named with its value."""
    fields, message = BAD_DESCRIPTIONS[case]
    path = tmp_path / "m.json"
    path.write_text(json.dumps({"name": "x", **fields}))
    with pytest.raises(InputError) as caught:
        model.load_machine(str(path))
    assert str(caught.value) == f"--machine={path}: {message}"


@pytest.mark.parametrize("text, message", [
    ("[1, 2]", "a machine description is a JSON object, not list"),
    ('"x"', "a machine description is a JSON object, not str"),
    ('{"name": 3}', "name: expected a text"),
    ('{"description": "no name"}', "name: expected a text"),
    ("{", "cannot read a machine description (Expecting property name enclosed in double quotes: line 1 column 2 "
          "(char 1))"),
], ids=["list", "text", "number-name", "no-name", "not-json"])
def test_a_file_that_is_not_a_description_is_refused(tmp_path, text, message):
    path = tmp_path / "m.json"
    path.write_text(text)
    with pytest.raises(InputError) as caught:
        model.load_machine(str(path))
    assert str(caught.value) == f"--machine={path}: {message}"


def test_the_bytes_of_a_description_are_read_as_utf8_and_at_most_16_mib(tmp_path):
    path = tmp_path / "m.json"
    path.write_bytes('{"name": "caf\u00e9"}'.encode("utf-8"))
    assert model.load_machine(str(path)) == Machine("caf\u00e9")
    path.write_bytes(b'{"name": "caf\xe9"}')  # latin-1
    with pytest.raises(InputError, match=r"^--machine=.*m\.json: cannot read a machine description \(.*utf-8"):
        model.load_machine(str(path))
    exact = '{"name": "x"}'
    path.write_text(exact + " " * ((16 << 20) - len(exact)))
    assert model.load_machine(str(path)) == Machine("x")
    path.write_text(exact + " " * ((16 << 20) - len(exact) + 1))
    with pytest.raises(InputError) as caught:
        model.load_machine(str(path))
    assert str(caught.value) == f"--machine={path}: more than 16 MiB, not a machine description"


def test_a_description_that_is_no_regular_file_or_no_file(tmp_path):
    with pytest.raises(InputError) as caught:
        model.load_machine(str(tmp_path))
    assert str(caught.value) == f"--machine={tmp_path}: is a directory"
    with pytest.raises(InputError) as caught:
        model.load_machine("gone.json")
    assert str(caught.value) == "--machine=gone.json: no such file"
    with pytest.raises(InputError) as caught:
        model.load_machine(f"nowhere{__import__('os').sep}m")
    assert str(caught.value) == f"--machine=nowhere{__import__('os').sep}m: no such file"
    with pytest.raises(InputError) as caught:
        model.load_machine("h200x3")
    assert str(caught.value) == ("--machine=h200x3: no such built-in machine (have " + ", ".join(sorted(model.BUILTIN))
                                 + ") and no such file")
    assert model.load_machine("h200x2") == builtin("h200x2")


def test_a_named_file_without_json_suffix_is_read_not_looked_up(tmp_path, monkeypatch):
    """A name that exists as a file is that file, even without ``.json`` or a directory."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "h200x2").write_text(json.dumps({"name": "mine", "memory_gib": 12}))
    assert model.load_machine("h200x2") == Machine("mine", memory_gib=12)


def test_a_description_the_model_cannot_use_is_refused(tmp_path):
    """Fields of the right types whose values make the model fail are bad input, with what failed."""
    path = tmp_path / "m.json"
    # a description of float32 alone is tried with float32
    path.write_text(json.dumps({"name": "x", "devices_per_node": 10**20, "gemm": {"float32": {"tflops": 1}}}))
    with pytest.raises(InputError) as caught:
        model.load_machine(str(path))
    assert str(caught.value) == (f"--machine={path}: the model cannot use it (OverflowError: Python int too large to "
                                 "convert to C long)")
    path.write_text(json.dumps({"name": "x", "devices_per_node": 10**12, "gemm": {"float64": {"tflops": 1}}}))
    assert model.load_machine(str(path)).devices_per_node == 10**12


def test_the_values_a_description_holds_are_checked():
    """``Machine``'s own refusals, word for word, and the forms it keeps its figures in."""
    for name in ("staged_contention", "shared_mpi_us", "shared_copy_us"):
        with pytest.raises(InputError) as caught:
            Machine("x", **{name: -1.0})
        assert str(caught.value) == f"machine x: {name}=-1.0 must not be negative"
        Machine("x", **{name: 0.0})
    assert Machine("x", shared_copy_us=None).copy_wait_us == 0.0
    for pair in ((0, 5), (5, 0), (-1, 5), (5, -1)):
        with pytest.raises(InputError) as caught:
            Machine("x", staged_gbps_by_mib=((1, 2), pair))
        assert str(caught.value) == (f"machine x: staged_gbps_by_mib has ({float(pair[0])}, {float(pair[1])}): "
                                     "MiB and GB/s must be positive")
    for name in ("devices_per_node", "nics_per_node"):
        with pytest.raises(InputError) as caught:
            Machine("x", **{name: 0})
        assert str(caught.value) == f"machine x: {name}=0 must be at least 1"
        assert getattr(Machine("x", **{name: 1}), name) == 1
    for name in ("memory_gbps", "intra_gbps", "local_gbps", "net_gbps", "staged_gbps", "staged_host_gbps",
                 "host_copy_gbps", "staged_chunk_bytes", "shared_device_efficiency", "mps_device_efficiency",
                 "bcast_efficiency", "staged_bcast_efficiency"):
        for value in (0, -1.5):
            with pytest.raises(InputError) as caught:
                Machine("x", **{name: value})
            assert str(caught.value) == f"machine x: {name}={value} must be positive"
    with pytest.raises(InputError) as caught:
        Machine("x", device="GPU")
    assert str(caught.value) == "machine x: device='GPU': expected gpu or cpu"
    assert Machine("x", device="cpu").device == "cpu"
    kept = Machine("x", gemm={"float64": {"tflops": 2, "shapes": [[1, 2, 3, 0.5]]}, "float32": GemmCurve(3.0)},
                   staged_gbps_by_mib=[[1, 2], [4, 8]])
    assert kept.gemm == {"float64": GemmCurve(2.0, shapes=((1.0, 2.0, 3.0, 0.5),)), "float32": GemmCurve(3.0)}
    assert kept.gemm["float64"].shapes == ((1.0, 2.0, 3.0, 0.5),)
    assert all(type(x) is float for row in kept.gemm["float64"].shapes for x in row)
    assert kept.staged_gbps_by_mib == ((1.0, 2.0), (4.0, 8.0))
    assert all(type(x) is float for row in kept.staged_gbps_by_mib for x in row)
    assert kept.replace(memory_gib=3.0) == Machine("x", gemm=kept.gemm, staged_gbps_by_mib=kept.staged_gbps_by_mib,
                                                   memory_gib=3.0)
    with pytest.raises(InputError) as caught:
        kept.curve("float16")
    assert str(caught.value) == "machine x has no GEMM rate for float16 (has float64, float32)"


# -- the problem, the placement and predict's refusals ---------------------------------------------


def test_a_bad_problem_is_refused():
    with pytest.raises(InputError) as caught:
        Problem(4, 4, 4, "int8")
    assert str(caught.value) == ("--dtype='int8': expected one of float64, float32, tf32, float16, bfloat16, "
                                 "complex128, complex64")
    for name, shape in (("m", (0, 4, 4)), ("n", (4, -1, 4)), ("k", (4, 4, 0))):
        with pytest.raises(InputError) as caught:
            Problem(*shape)
        assert str(caught.value) == f"--{name}={min(shape)}: must be at least 1"
    one = Problem(1, 1, 1, "complex64")
    assert (one.itemsize, one.flops) == (8, 8.0)


def test_ranks_fill_hosts_devices_and_nics_in_order():
    """Hosts of 6 ranks, virtual nodes of 4, 4 devices and 2 NICs a host: the placement the run takes."""
    machine = rich()
    pl = model.place(12, machine, ranks_per_node=4, ranks_per_host=6)
    assert pl.host.tolist() == [0] * 6 + [1] * 6
    assert pl.vnode.tolist() == [0, 0, 0, 0, 1, 1, 2, 2, 2, 2, 3, 3]
    assert pl.device.tolist() == [0, 1, 2, 3, 0, 1, 4, 5, 6, 7, 4, 5]
    assert pl.nic.tolist() == [0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3]
    assert pl.sharers.tolist() == [2, 2, 1, 1, 2, 2, 2, 2, 1, 1, 2, 2]
    assert (pl.ranks_per_host, pl.ranks_per_node) == (6, 4)
    default = model.place(10, machine)  # one rank a device, as many hosts as needed
    assert default.host.tolist() == [0, 0, 0, 0, 1, 1, 1, 1, 2, 2] and default.ranks_per_node == 4
    assert default.sharers.tolist() == [1] * 10
    one_host = model.place(10, rich(hosts=1))  # every rank on the one host
    assert one_host.host.tolist() == [0] * 10 and one_host.sharers.tolist() == [3, 3, 2, 2] * 2 + [3, 3]
    assert model.place(8, rich(hosts=2), ranks_per_host=4).host.tolist() == [0] * 4 + [1] * 4


def test_a_placement_beyond_the_machine_is_refused():
    with pytest.raises(InputError) as caught:
        model.place(4, rich(), ranks_per_host=0)
    assert str(caught.value) == "--ranks-per-host=0: must be at least 1"
    with pytest.raises(InputError) as caught:
        model.place(9, rich(hosts=2), ranks_per_host=4)
    assert str(caught.value) == "9 ranks at 4 per host need more than the 2 host(s) of rich"
    with pytest.raises(InputError) as caught:
        model.place(9, rich(hosts=2))
    assert str(caught.value) == "9 ranks at 4 per host need more than the 2 host(s) of rich"


@pytest.mark.parametrize("options, message", [
    (dict(balance="weighted"), "balance='weighted': the model lays out share or none"),
    (dict(ranks=0), "--ranks=0: must be at least 1"),
    (dict(prefetch=-1), "--prefetch=-1: must be at least 0"),
    (dict(algo="cannon"), "--algo='cannon': expected one of summa, split-relay, 2.5d, 2.5d:C, auto"),
    (dict(grid=(3, 3)), "--grid=3x3: 9 ranks, not 4"),
    (dict(panel=65), "--panel=65: wider than k=64"),
    (dict(algo="2.5d:x"), "--algo='2.5d:x': expected 2.5d or 2.5d:C with C an integer"),
    (dict(algo="2.5d:"), "--algo='2.5d:': expected 2.5d or 2.5d:C with C an integer"),
    (dict(algo="2.5dx"), "--algo='2.5dx': expected 2.5d or 2.5d:C with C an integer"),
    (dict(algo="2.5d:2:1"), "--algo='2.5d:2:1': expected 2.5d or 2.5d:C with C an integer"),
    (dict(algo="2.5d:3"), "--algo=2.5d:3: 3 layers must divide the 4 ranks of each node"),
    (dict(algo="2.5d:0"), "--algo=2.5d:0: 0 layers must divide the 4 ranks of each node"),
    (dict(algo="2.5d:4", ranks_per_node=2), "--algo=2.5d:4: 4 layers must divide the 2 ranks of each node"),
    (dict(algo="2.5d:2", ranks=6, ranks_per_node=2, ranks_per_host=3),
     "--algo=2.5d:2: 2 layers must divide the 2 ranks of each node"),
    (dict(algo="2.5d:2", ranks=3, ranks_per_node=2, ranks_per_host=4),
     "--algo=2.5d:2: 2 layers must divide the 2 ranks of each node"),
    (dict(algo="2.5d", ranks=3, ranks_per_host=3),
     "--algo=2.5d: no layer count of 2, 4, 8 divides the 3 ranks of each node"),
    (dict(algo="2.5d", ranks=6, ranks_per_node=3), "--algo=2.5d: no layer count of 2, 4, 8 divides the 3 ranks of "
                                                   "each node"),
], ids=lambda x: "")
def test_what_predict_refuses(options, message):
    options = {"ranks": 4, "ranks_per_host": 4, **options}
    ranks = options.pop("ranks")
    with pytest.raises(InputError) as caught:
        predict(Problem(64, 64, 64), ranks, rich(), **options)
    assert str(caught.value) == message


def test_a_prefetch_of_0_is_taken_and_the_default_is_the_runs():
    prob = Problem(2000, 2100, 2200)
    assert predict(prob, 4, rich(), ranks_per_host=4, prefetch=0).prefetch == 0
    assert predict(prob, 4, rich(), ranks_per_host=4).prefetch == 1
    assert predict(Problem(2000, 2100, 2200, "tf32"), 4, rich(), ranks_per_host=4).prefetch == 2
    assert predict(Problem(2000, 2100, 2200, "tf32"), 4, rich(device="cpu", gemm={"tf32": GemmCurve(1.0)}),
                   ranks_per_host=4).prefetch == 1


def test_auto_without_a_feasible_candidate_is_the_fastest_refused_one():
    """Nothing fits: ``auto`` returns a candidate anyway (infinite seconds, the reason in its notes)."""
    p = predict(Problem(60000, 60000, 60000), 4, rich(memory_gib=1.0), ranks_per_host=4, algo="auto")
    assert p.algo == "summa" and math.isinf(p.seconds)
    assert p.notes == ("does not fit: 1 rank(s) per device need more than 1 GiB",)
    # 1.56 GiB: summa fits (a narrower panel), no 2.5D layer does; 1.62 GiB: 2.5d:4 fits and is fastest
    prob = Problem(4000, 4000, 100000)
    for gib, fastest in ((1.56, "summa"), (1.62, "2.5d:4")):
        auto = predict(prob, 4, rich(memory_gib=gib), ranks_per_host=4, algo="auto")
        assert auto.algo == fastest
        assert auto.seconds == predict(prob, 4, rich(memory_gib=gib), ranks_per_host=4, algo=fastest).seconds


# -- one device's GEMM ------------------------------------------------------------------------------


def test_a_gemm_takes_its_launch_its_flops_at_the_curves_rate_and_its_passes_over_c():
    """The documented curve, the unaligned factor (leading dimensions not a multiple of 16 bytes), a measured
    shape's own rate (its passes over C in it), the passes of an accumulating GEMM, nothing for an empty C."""
    machine = rich()
    c = machine.gemm["float64"]

    def curve(m, n, w, passes, factor=1.0):
        eff = m / (m + 100.0) * n / (n + 120.0) * w / (w + 60.0) * factor
        return 9e-6 + 2.0 * m * n * w / (50e12 * eff) + passes * m * n * 8 / 3000e9

    m = np.array([1000, 1001, 1000, 1000, 1000, 0, 1000])
    n = np.array([1500, 1500, 1501, 1500, 1500, 1500, 1500])
    w = np.array([256, 256, 256, 255, 128, 256, 0])
    got = machine.gemm_seconds(m, n, w, "float64", np.array([True, True, False, False, True, True, False]))
    measured = 9e-6 + 2.0 * 1000 * 1500 * 256 / (50e12 * 0.7)
    want = [measured, curve(1001, 1500, 256, 2.5, 0.9), curve(1000, 1501, 256, 1.0, 0.9), curve(1000, 1500, 255, 1.0),
            curve(1000, 1500, 128, 2.5), 0.0, 9e-6 + 1000 * 1500 * 8 / 3000e9]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)
    assert c.measured_share(1000, 1500, 256) == 0.7 and np.isnan(c.measured_share(1000, 1500, 255))
    # the alignment unit is 16 bytes: 4 float32, 8 float16, every complex128
    f32 = Machine("x", gemm={"float32": GemmCurve(10.0, 0, 0, 0, 0, 0.5), "float16": GemmCurve(10.0, 0, 0, 0, 0, 0.5),
                             "complex128": GemmCurve(10.0, 0, 0, 0, 0, 0.5)}, memory_gbps=1e30)
    for dtype, unit in (("float32", 4), ("float16", 8), ("complex128", 1)):
        flops = 2.0 * unit * unit * 10 * (4 if dtype == "complex128" else 1)
        assert float(f32.gemm_seconds(unit, unit, 10, dtype, False)) == pytest.approx(flops / 10e12, rel=1e-12, abs=0)
        if unit > 1:
            assert float(f32.gemm_seconds(unit + 1, unit, 10, dtype, False)) == pytest.approx(
                2.0 * (unit + 1) * unit * 10 / 5e12, rel=1e-12, abs=0)
            assert float(f32.gemm_seconds(unit, 3 * unit + 2, 10, dtype, False)) == pytest.approx(
                2.0 * unit * (3 * unit + 2) * 10 / 5e12, rel=1e-12, abs=0)


@pytest.mark.skipif(not Path("/proc/self/mem").is_file(), reason="needs Linux's /proc")
def test_a_description_that_cannot_be_read_says_why():
    """A regular file whose read fails (``/proc/self/mem`` at offset 0: unmapped) names the system's reason."""
    with pytest.raises(InputError) as caught:
        model.load_machine("/proc/self/mem")
    assert str(caught.value) == "--machine=/proc/self/mem: cannot read a machine description (Input/output error)"


def test_a_staged_broadcast_is_a_chain_from_4_to_7_members_and_from_1_mib():
    """Both ends of Open MPI's chain decision are included: 4 and 7 members, exactly 1 MiB."""
    members = np.array([3, 4, 5, 7, 8, 4, 7])
    nbytes = np.array([2.0, 2.0, 2.0, 2.0, 2.0, 1.0, 1.0]) * 2**20
    assert model.staged_chain(members, nbytes).tolist() == [False, True, True, True, False, True, True]
    assert model.staged_chain(np.array([4, 7]), np.array([2**20 - 1, 2**20 - 1])).tolist() == [False, False]


def test_the_host_rate_of_the_smallest_messages_is_read_at_one_byte():
    """Messages are read in the rate table at 1 byte at least (an empty one too): a table that starts below
    one byte interpolates there, in log size."""
    machine = Machine("x", staged_gbps_by_mib=((2.0**-22, 1.0), (1.0, 23.0)), staged_host_gbps=1e3)
    one_byte = 1.0 + 22.0 * 2.0 / 22.0  # log2 of 1 byte in MiB is -20: 2 of the table's 22 steps up
    np.testing.assert_allclose(model.staged_rate(np.array([0.0, 0.5, 1.0, 2.0]), machine),
                               [one_byte, one_byte, one_byte, one_byte + 1.0], rtol=1e-12, atol=0)


def test_a_file_named_by_an_option_or_by_a_command(tmp_path):
    """``regular_file`` names an option as ``--flag=PATH`` and anything else (``model check``) as ``WHO: PATH``."""
    missing = tmp_path / "gone.h5"
    with pytest.raises(InputError) as caught:
        model.regular_file("--transport", str(missing))
    assert str(caught.value) == f"--transport={missing}: no such file"
    with pytest.raises(InputError) as caught:
        model.regular_file("model check", str(missing))
    assert str(caught.value) == f"model check: {missing}: no such file"
    missing.write_bytes(b"")
    assert model.regular_file("model check", str(missing)).st_size == 0


def test_the_memory_check_is_exact_to_the_byte():
    """One rank, float64 1024³: its three blocks are exactly 24 MiB (no ring, no padding). A device of exactly that
    fits; one byte less does not, and the prediction says why."""
    prob = Problem(1024, 1024, 1024)
    exact = 24 / 1024  # GiB
    fits = predict(prob, 1, rich(memory_gib=exact))
    assert math.isfinite(fits.seconds) and fits.notes == ()
    short = predict(prob, 1, rich(memory_gib=exact - 2.0**-30))
    assert math.isinf(short.seconds) and short.tflops == 0.0
    assert short.notes == ("does not fit: 1 rank(s) per device need more than 0.0234375 GiB",)


@pytest.mark.parametrize("dtype, prefetch", [("float64", 0), ("float64", 1), ("tf32", 1), ("tf32", 2)])
def test_the_memory_check_takes_the_deepest_ring_and_tf32s_scratch(dtype, prefetch):
    """Two ranks, a 1 × 2 grid: a device holds exactly what the engine's rule (``choices.memory_needed``) counts
    with the ring of a channel that spans nodes and, for TF32, the re-laid-out A panels; one byte less does not."""
    from hpcmm.planning.algorithms import ring_depth
    from hpcmm.planning.choices import memory_needed
    from hpcmm.planning.gemm_orders import gemm_order, scratch_slots

    prob = Problem(1000, 1200, 1100, dtype)
    order = gemm_order("float32", tf32=True) if dtype == "tf32" else gemm_order(dtype)
    need = memory_needed(Layout(1000, 1200, 1100, Grid(1, 2)), 0, prob.itemsize, 256,
                         ring_depth(prefetch, spans_nodes=True), scratch_slots(order, prefetch + 1))
    options = dict(grid=(1, 2), panel=256, prefetch=prefetch, ranks_per_host=2)
    assert math.isfinite(predict(prob, 2, rich(memory_gib=need / 2**30), **options).seconds)
    assert math.isinf(predict(prob, 2, rich(memory_gib=(need - 1) / 2**30), **options).seconds)


def test_the_measured_share_has_the_shape_of_every_argument():
    """NaN (not measured) for each (m, n, w), broadcast over all three, with or without measured shapes."""
    for curve in (GemmCurve(1.0), rich().gemm["float64"]):
        share = curve.measured_share(np.array([[1000], [2000]]), 1500, np.array([256, 128, 64]))
        assert share.shape == (2, 3)
        assert np.isnan(share).sum() == (6 if not curve.shapes else 5)
        for args in ((np.array([1000, 1001]), 1500, 256), (1000, np.array([1500, 1501]), 256),
                     (1000, 1500, np.array([256, 255]))):
            share = curve.measured_share(*args)
            assert share.shape == (2,)
            assert np.isnan(share).tolist() == ([True, True] if not curve.shapes else [False, True])


def test_an_empty_or_huge_gemm():
    """No rows or no columns of C cost nothing (not even the launch); sizes whose product passes 64-bit integers are
    timed in floating point."""
    machine = rich()
    assert machine.gemm_seconds(np.array([0, 1000, 0]), np.array([1500, 0, 0]), 256, "float64", True).tolist() == \
        [0.0, 0.0, 0.0]
    big, w = 2_000_000_000, 64  # C holds 4e18 elements, 3.2e19 bytes > 2**63
    want = 9e-6 + 2.0 * big * big * w / (50e12 * (big / (big + 100.0)) * (big / (big + 120.0)) * (w / (w + 60.0))) \
        + big * big * 8.0 / 3000e9
    assert float(machine.gemm_seconds(big, big, w, "float64", False)) == pytest.approx(want, rel=1e-12, abs=0)
