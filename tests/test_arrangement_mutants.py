"""What the arrangement of a run's ranks promises at its edges, one behaviour a test.

Written against the mutants that mutation testing of hpcmm/planning/arrangement.py left alive
(docs/mutation.md): what :func:`~hpcmm.planning.arrangement.gather_sharing` asks each rank and
gathers, what :func:`~hpcmm.planning.arrangement.arrange` passes on to the weights and to the grid's
face, a failed MPS check on one rank failing every rank, a given grid's shape kept while a free one may change,
and the defaults and face of :func:`~hpcmm.planning.arrangement.arrangement_for`.  Ranks that differ
are threads meeting in a stand-in communicator (``tests/thread_comm.py``); a GPU is a stand-in that
describes itself as :class:`hpcmm.execution.backend.GpuBackend` does.
"""

from __future__ import annotations

import pytest
from mpi4py import MPI
from thread_comm import ThreadComm

import hpcmm.planning.arrangement as arrangement
import hpcmm.planning.balance as balance_module
from hpcmm.config import RunConfig
from hpcmm.errors import HpcmmError
from hpcmm.execution.backend import CpuBackend
from hpcmm.geometry.layout import GPU_BLOCK_QUANTUM, Grid
from hpcmm.planning.arrangement import Sharing, arrange, arrangement_for, gather_sharing
from hpcmm.planning.balance import Balance, Device, ranks_per_device, weights_for
from hpcmm.planning.grid_orientation import ROW_LEAST_COLUMNS
from hpcmm.planning.mps import MpsState


class StandInGpu:
    """A GPU rank's backend as far as the arrangement reads it: on a GPU, its index, its description."""

    on_gpu = True

    def __init__(self, device_id=0, uuid="GPU-5b3c1d2e-0000-4000-8000-00000000abcd"):
        self.device_id, self.uuid = device_id, uuid

    def describe(self):
        return {"backend": "cupy", "gpu_uuid": self.uuid, "gpu_index": str(self.device_id)}


def state(active: bool, source: str = "pipe") -> MpsState:
    return MpsState(active, source, "/tmp/p", "seen" if active else "not seen")


def balance_of(devices, mode="share", rates=None) -> Balance:
    return Balance(mode, weights_for(mode, devices, rates), tuple(devices), ranks_per_device(devices), rates)


# -- gather_sharing --------------------------------------------------------------------------


@pytest.mark.parametrize("backend, asked, device", [
    (CpuBackend(), None, Device("node7")),
    (StandInGpu(device_id=3), 3, Device("node7", 3, "GPU-5b3c1d2e-0000-4000-8000-00000000abcd")),
])
def test_sharing_asks_mps_about_the_ranks_own_gpu_and_about_no_gpu_on_a_cpu(monkeypatch, backend, asked, device):
    """A GPU rank asks the MPS check about its GPU; a CPU rank about none (the pipe only), even though its
    backend numbers a device 0.  The device gathered is the rank's own, on its host."""
    asks = []

    def detect(device_id=None):
        asks.append(device_id)
        return state(True, "driver" if device_id is not None else "pipe")

    monkeypatch.setattr(arrangement, "detect", detect)
    sharing = gather_sharing(MPI.COMM_SELF, "node7", backend)
    assert asks == [asked]
    assert sharing.devices == (device,) and isinstance(sharing.devices, tuple)
    assert sharing.mps == (state(True, "driver" if asked is not None else "pipe"),)


def test_an_mps_check_that_fails_on_one_rank_fails_every_rank(monkeypatch):
    """Three ranks, the MPS check of rank 1 fails: every rank raises the same error, none waits."""
    comm = ThreadComm(3)

    def detect(device_id=None):
        if comm.Get_rank() == 1:
            raise OSError("cannot read /proc/net/unix")
        return state(False)

    monkeypatch.setattr(arrangement, "detect", detect)
    outcomes = comm.run(lambda rank: gather_sharing(comm, "n1", CpuBackend()))
    assert [how for how, _ in outcomes] == ["raised"] * 3, outcomes
    errors = [error for _, error in outcomes]
    assert all(isinstance(error, HpcmmError) for error in errors), errors
    assert len({str(error) for error in errors}) == 1 and "cannot read /proc/net/unix" in str(errors[0])


# -- arrange: what it passes on ---------------------------------------------------------------


@pytest.mark.parametrize("dtype, tf32", [("float32", True), ("float64", False)])
def test_measured_weights_time_the_runs_type_and_tf32(monkeypatch, dtype, tf32):
    """``--balance measured`` times GEMMs of the run's type, with TF32 where the run takes it."""
    timed = []

    def gemm_rate(backend, dtype, size=None, tf32=False, **kwargs):
        timed.append((dtype, tf32))
        return 2.5e9

    monkeypatch.setattr(balance_module, "gemm_rate", gemm_rate)
    arr = arrange(MPI.COMM_SELF, "n1", CpuBackend(), RunConfig(balance="measured", dtype=dtype, tf32=tf32), (9, 7, 5))
    assert timed == [(dtype, tf32)]
    assert arr.balance.rates == (2.5e9,) and arr.rank_facts(0)["gemm_rate"] == 2.5e9


def test_arrange_weighs_the_devices_of_the_sharing_it_is_given(monkeypatch):
    """Given the sharing, neither the arrangement nor the weights look up a device again."""
    sharing = gather_sharing(MPI.COMM_SELF, "n1", CpuBackend())

    def refuse(*args, **kwargs):
        raise AssertionError("a device looked up again")

    monkeypatch.setattr(arrangement, "device_of", refuse)
    monkeypatch.setattr(balance_module, "device_of", refuse)
    arr = arrange(MPI.COMM_SELF, "n1", CpuBackend(), RunConfig(balance="share"), (9, 7, 5), sharing=sharing)
    assert arr.balance.devices == sharing.devices == (Device("n1"),)


@pytest.mark.parametrize("on_gpu, dtype, nodes, face", [
    (False, "float64", 1, "wide"),  # CPUs: always wide
    (True, "float64", 1, "tall"),  # float64 on the GPUs of one node, none shared: tall, not one row
    (True, "float64", 2, "wide"),  # over several nodes: wide
    (True, "float32", 1, "wide"),
], ids=["cpu-float64", "gpu-float64", "gpu-float64-two-nodes", "gpu-float32"])
def test_the_grid_faces_by_the_device_the_type_and_the_nodes(on_gpu, dtype, nodes, face):
    """One rank on its own device, C wide enough for one process row: the face ``/config`` records."""
    backend = StandInGpu() if on_gpu else CpuBackend()
    device = Device("n1", 0, backend.uuid) if on_gpu else Device("n1")
    sharing = Sharing((device,), (state(False),))
    shape = (64, ROW_LEAST_COLUMNS, 64)
    arr = arrange(MPI.COMM_SELF, "n1", backend, RunConfig(balance="share", dtype=dtype), shape, nodes=nodes, sharing=sharing)
    assert arr.face == face and arr.on_gpu is on_gpu
    assert arr.attributes(arr.layout(*shape))["grid_face"] == face


def test_three_gpu_ranks_of_two_gpus_arrange_weighted_blocks_aligned_for_gpus():
    """Ranks 0 and 2 share GPU 0: half weights, a weighted 3 × 1 grid, GPU-aligned blocks, 2 ranks a GPU."""
    comm = ThreadComm(3)
    devices = tuple(Device("n1", i, f"GPU-{i}") for i in (0, 1, 0))
    sharing = Sharing(devices, (state(False),) * 3)
    shape = (4096, 512, 4096)

    def body(rank):
        return arrange(comm, "n1", StandInGpu(devices[rank].index, devices[rank].uuid), RunConfig(balance="share", dtype="float32"),
                       shape, sharing=sharing)

    outcomes = comm.run(body)
    assert [how for how, _ in outcomes] == ["returned"] * 3, outcomes
    arr = outcomes[0][1]
    assert all(value == arr for _, value in outcomes)
    assert arr.weighted and arr.on_gpu is True and arr.grid == Grid(3, 1) and arr.order == (0, 1, 2)
    assert arr.weights == (0.5, 1.0, 0.5) and arr.ranks_per_gpu == 2
    layout = arr.layout(*shape)
    assert layout.quantum == GPU_BLOCK_QUANTUM and layout.block_sizes()["rows"] == (1024, 2048, 1024)


# -- arrangement_for ----------------------------------------------------------------------------


def test_rank_facts_carry_each_ranks_mps_state_by_grid_position():
    devices = [Device("n1", i, f"GPU-{i}") for i in (0, 1, 0, 1)]
    mps = (state(True, "driver"), state(False), state(True, "driver"), state(False))
    arr = arrangement_for(balance_of(devices), mps, (64, 64, 64), (2, 2), on_gpu=True)
    for position, launch in enumerate(arr.order):
        facts = arr.rank_facts(position)
        assert facts["mps_active"] is mps[launch].active and facts["mps_source"] == mps[launch].source


def test_the_defaults_are_a_wide_grid_of_gpus():
    """Without ``on_gpu`` and ``face``: ranks on GPUs, the wide grid, and ``/config`` says so."""
    devices = [Device("n1", i, f"GPU-{i}") for i in (0, 1, 0, 1)]
    for bal in (balance_of(devices), balance_of(devices[:3])):  # equal weights; weighted
        arr = arrangement_for(bal, (state(False),) * len(bal.weights), (64, 64, 64))
        assert arr.on_gpu is True and arr.face == "wide"
        assert arr.attributes(arr.layout(64, 64, 64))["grid_face"] == "wide"
    assert arr.weighted and arr.layout(64, 64, 64).quantum == GPU_BLOCK_QUANTUM


#: One rank of twice the others' rate: no 2 × 2 placement balances it, four rows do.
UNEVEN = balance_of([Device("n1", i, f"GPU-{i}") for i in range(4)], "measured", (4e12, 2e12, 2e12, 2e12))


def test_weights_a_square_grid_cannot_balance_take_another_shape_where_none_was_given():
    arr = arrangement_for(UNEVEN, (state(False),) * 4, (64, 64, 64), None, on_gpu=True, face="tall")
    assert arr.weighted and arr.grid == Grid(4, 1) and arr.face == "tall"


def test_a_given_grid_keeps_its_shape_whatever_the_weights():
    """``--grid 2x2``: the fit only places the ranks on it, and ``/config`` says the shape was given."""
    arr = arrangement_for(UNEVEN, (state(False),) * 4, (64, 64, 64), (2, 2), on_gpu=True, face="tall")
    assert arr.weighted and arr.grid == Grid(2, 2) and arr.face == "given"
    assert arr.attributes(arr.layout(64, 64, 64))["grid_face"] == "given"
