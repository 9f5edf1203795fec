"""What the rank weights promise at their edges, one behaviour a test.

Written against the mutants that mutation testing of hpcmm/planning/balance.py left alive
(docs/mutation.md): the device a GPU rank reports, the count of ranks on this rank's device, the
exact messages of the refusals, the GEMM timing's defaults, operands and stopping rule, and what
:func:`hpcmm.planning.balance.gather_balance` gathers and returns.  Ranks that differ are threads
meeting in a stand-in communicator (``tests/thread_comm.py``); the GEMMs of the stand-in backends
below record what they were asked and compute nothing, so a timing of 2048 × 2048 operands costs
only its window.
"""

from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI
from thread_comm import ThreadComm

from hpcmm.errors import HpcmmError
from hpcmm.execution.backend import CpuBackend
from hpcmm.planning.balance import (
    Device,
    device_of,
    gather_balance,
    gemm_rate,
    measured_weights,
    ranks_on_my_device,
    share_weights,
    weights_for,
)

MODES_LINE = "expected one of auto, share, measured, product, dynamic, none"


class Recording(CpuBackend):
    """A CPU backend whose GEMMs only record their operands and flags (nothing is computed)."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def gemm(self, a, b, c, accumulate, stream=None, tf32=False):
        self.calls.append({"shapes": (a.shape, b.shape, c.shape), "dtypes": {a.dtype.name, b.dtype.name, c.dtype.name},
                           "orders": (a.flags.f_contiguous, b.flags.c_contiguous, c.flags.c_contiguous),
                           "accumulate": accumulate, "tf32": tf32})


class StandInGpu(Recording):
    """A GPU as :class:`hpcmm.execution.backend.GpuBackend` describes one: its index and UUID as text."""

    on_gpu = True

    def __init__(self, device_id=0, uuid="GPU-5b3c1d2e-0000-4000-8000-00000000abcd"):
        super().__init__()
        self.device_id = device_id
        self.uuid = uuid

    def describe(self):
        return {"backend": "cupy", "gpu_name": "Stand-in", "gpu_uuid": self.uuid, "gpu_pci": "0000:41:00.0",
                "gpu_index": str(self.device_id)}


class Ticks:
    """A clock that moves ``tick`` seconds for every GEMM the backend has run: a known rate."""

    def __init__(self, backend, tick):
        self.backend, self.tick = backend, tick

    def __call__(self):
        return self.tick * len(self.backend.calls)


# -- the device of a rank -----------------------------------------------------------------


def test_a_gpu_rank_reports_its_host_index_and_uuid():
    """The GPU's index as a number and its UUID: two ranks on one GPU get one key, another GPU another."""
    device = device_of(StandInGpu(device_id=3), "node7")
    assert device == Device("node7", 3, "GPU-5b3c1d2e-0000-4000-8000-00000000abcd")
    assert isinstance(device.index, int) and device.label == "GPU 3 of node7"
    same = device_of(StandInGpu(device_id=0), "node7")  # the same GPU seen under another index
    other = device_of(StandInGpu(device_id=3, uuid="GPU-ffffffff-0000-4000-8000-000000000001"), "node7")
    assert share_weights([device, same, other]) == (0.5, 0.5, 1.0)


def test_ranks_on_my_device_counts_what_every_rank_reports():
    """Three ranks, two on host n1's CPU: the ranks of n1 count 2, the one of n2 counts 1."""
    comm = ThreadComm(3)
    hosts = ["n1", "n2", "n1"]
    outcomes = comm.run(lambda rank: ranks_on_my_device(comm, CpuBackend(), hosts[rank]))
    assert outcomes == [("returned", 2), ("returned", 1), ("returned", 2)]


# -- the refusals, word for word ------------------------------------------------------------


@pytest.mark.parametrize("call, message", [
    (lambda: share_weights([]), "no devices given"),
    (lambda: measured_weights([]), "no GEMM rates given"),
    (lambda: weights_for("measured", ["a", "b"]), "--balance measured needs the measured GEMM rates"),
    (lambda: weights_for("auto", ["a"]),
     "--balance auto: the planner turns it into a mode (mode_for) before any weights"),
    (lambda: gather_balance(MPI.COMM_SELF, "fastest", CpuBackend(), "here", "float64"),
     f"--balance='fastest': {MODES_LINE}"),
])
def test_refusals_say_what_is_missing(call, message):
    """The whole message: ``auto`` is told apart from an unknown mode (the planner must resolve it)."""
    with pytest.raises(ValueError) as caught:
        call()
    assert str(caught.value) == message


# -- the GEMM timing ------------------------------------------------------------------------


def test_gemm_rate_defaults_time_2048_operands_in_pairs_for_a_quarter_second():
    """The defaults: 2048 × 2048 operands, batches of 2, at least 0.25 s, no TF32.

    At 10 ms a product the window is full after 13 batches of 2 (0.26 s): 26 timed products and
    the warm-up.
    """
    backend = Recording()
    rate = gemm_rate(backend, "float32", clock=Ticks(backend, 0.01))
    assert len(backend.calls) == 1 + 26
    assert {call["shapes"] for call in backend.calls} == {((2048, 2048),) * 3}
    assert not any(call["tf32"] for call in backend.calls)
    assert rate == pytest.approx(2 * 2048**3 / 0.01)


def test_gemm_rate_runs_the_runs_products():
    """The run's element type in all three operands, A column-major, B and C row-major, TF32 as asked,
    and each product overwriting C (``empty`` C holds whatever was in memory: no accumulating into it)."""
    backend = Recording()
    gemm_rate(backend, "float32", size=16, window=0.1, batch=2, tf32=True, clock=Ticks(backend, 0.01))
    assert len(backend.calls) > 1
    for call in backend.calls:
        assert call["dtypes"] == {"float32"} and call["orders"] == (True, True, True)
        assert call["tf32"] and not call["accumulate"]
        assert call["shapes"] == ((16, 16),) * 3


def test_gemm_rate_times_one_by_one_operands():
    """Size 1 is a product (2 flops); only 0 is refused."""
    backend = Recording()
    rate = gemm_rate(backend, "float64", size=1, window=0.5, batch=1, clock=Ticks(backend, 0.125))
    assert rate == pytest.approx(2 / 0.125)


def test_gemm_rate_stops_once_the_window_is_full():
    """At least ``window`` seconds, and no batch more: 0.125 s a product, batches of 2, a 0.5 s window
    is full after exactly two batches (the clock's sums are exact in binary)."""
    backend = Recording()
    rate = gemm_rate(backend, "float64", size=4, window=0.5, batch=2, clock=Ticks(backend, 0.125))
    assert len(backend.calls) == 1 + 4
    assert rate == 2 * 4**3 * 4 / 0.5


# -- gather_balance -------------------------------------------------------------------------


def test_gather_balance_returns_the_mode_devices_and_shares():
    """Three ranks, two on GPU 0 of n1: ``share`` gives ½, 1, ½ and names its mode; nothing was timed."""
    comm = ThreadComm(3)
    backends = [StandInGpu(0), StandInGpu(1, uuid="GPU-other"), StandInGpu(0)]
    outcomes = comm.run(lambda rank: gather_balance(comm, "share", backends[rank], "n1", "float64"))
    assert all(kind == "returned" for kind, _ in outcomes), outcomes
    balance = outcomes[0][1]
    assert all(b == balance for _, b in outcomes)
    assert balance.mode == "share" and balance.weights == (0.5, 1.0, 0.5) and balance.rates is None
    assert balance.devices == (Device("n1", 0, backends[0].uuid), Device("n1", 1, "GPU-other"),
                               Device("n1", 0, backends[0].uuid))
    assert balance.ranks_per_device == (2, 1, 2) and balance.shared
    assert not any(b.calls for b in backends)


def test_gather_balance_keeps_the_devices_the_caller_gathered():
    """``devices`` given: they are the balance's, not gathered again."""
    devices = (Device("n1", 0, "GPU-a"),)
    balance = gather_balance(MPI.COMM_SELF, "none", CpuBackend(), "elsewhere", "float64", devices=devices)
    assert balance.devices == devices and balance.weights == (1.0,) and balance.mode == "none"


@pytest.mark.parametrize("kind, size", [(Recording, 256), (StandInGpu, 2048)])
def test_measured_times_256_on_a_cpu_and_2048_on_a_gpu(kind, size):
    """Without ``size``: 256 × 256 products on a CPU, 2048 × 2048 on a GPU, in the run's type, no TF32."""
    backend = kind()
    balance = gather_balance(MPI.COMM_SELF, "measured", backend, "here", "float32")
    assert balance.mode == "measured" and balance.weights == (1.0,) and len(balance.rates) == 1
    assert {call["shapes"] for call in backend.calls} == {((size, size),) * 3}
    assert all(call["dtypes"] == {"float32"} and not call["tf32"] for call in backend.calls)


def test_measured_times_the_size_type_and_tf32_asked():
    backend = StandInGpu()
    gather_balance(MPI.COMM_SELF, "measured", backend, "here", "float32", tf32=True, size=24)
    assert {call["shapes"] for call in backend.calls} == {((24, 24),) * 3}
    assert all(call["dtypes"] == {"float32"} and call["tf32"] for call in backend.calls)


def test_a_timing_that_fails_on_one_rank_fails_on_every_rank(monkeypatch):
    """Rank 1 runs out of memory for its operands: all three ranks raise the same error naming it."""

    class NoMemory(Recording):
        def from_host(self, array, order="C"):
            raise MemoryError("out of memory allocating 2048 bytes")

    comm = ThreadComm(3)
    monkeypatch.setattr(MPI, "COMM_WORLD", comm)  # errors name the rank in the job
    backends = [Recording(), NoMemory(), Recording()]
    outcomes = comm.run(lambda rank: gather_balance(comm, "measured", backends[rank], "n1", "float64", size=16))
    assert [kind for kind, _ in outcomes] == ["raised"] * 3
    errors = [exc for _, exc in outcomes]
    assert all(isinstance(exc, HpcmmError) for exc in errors), errors
    assert {str(exc) for exc in errors} == {"MemoryError: out of memory allocating 2048 bytes (raised by rank 1)"}


def test_measured_weights_of_threads_follow_their_rates():
    """Every rank gets every rank's rate, and the weights are the rates over the fastest."""
    comm = ThreadComm(2)
    backends = [Recording(), Recording()]
    outcomes = comm.run(lambda rank: gather_balance(comm, "measured", backends[rank], "n1", "float64", size=8))
    balance = outcomes[0][1]
    assert outcomes[1][1] == balance
    assert len(balance.rates) == 2 and all(np.isfinite(r) and r > 0 for r in balance.rates)
    assert balance.weights == measured_weights(balance.rates)
