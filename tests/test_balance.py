"""Rank weights from GPU shares and measured GEMM rates, on the CPU.

The collective part (:func:`hpcmm.planning.balance.gather_balance`) runs under MPI in
``tests/mpi/test_balance_mpi.py``.
"""

from __future__ import annotations

import doctest
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpcmm.planning import balance as balance_module
from hpcmm.execution.backend import CpuBackend
from hpcmm.planning.balance import (
    DEFAULT_MODE,
    MODES,
    Device,
    device_of,
    equal_weights,
    mode_for,
    gemm_rate,
    measured_weights,
    ranks_per_device,
    share_weights,
    weights_for,
)
from hpcmm.geometry.layout import Grid, Layout, predicted_imbalance


def test_module_doctests():
    result = doctest.testmod(balance_module)
    assert result.attempted >= 5 and result.failed == 0, result


def test_modes():
    assert MODES == ("auto", "share", "measured", "product", "dynamic", "none") and DEFAULT_MODE == "auto"


@pytest.mark.parametrize("nodes, on_gpu, sliced, summa, mode", [
    (1, True, True, True, "dynamic"),  # ranks take turns on a GPU: dynamic measured ahead
    (1, True, False, True, "share"),  # a GPU per rank, or MPS: not measured ahead everywhere
    (2, True, True, True, "share"),  # dynamic balances one node only
    (1, False, False, True, "share"),  # CPUs
    (1, True, True, False, "share"),  # 2.5D
])
def test_auto_is_dynamic_only_where_ranks_time_slice_a_gpu_of_one_node(nodes, on_gpu, sliced, summa, mode):
    assert mode_for("auto", nodes=nodes, on_gpu=on_gpu, sliced=sliced, summa=summa) == mode
    assert all(mode_for(asked, nodes=nodes, on_gpu=on_gpu, sliced=sliced, summa=summa) == asked
               for asked in MODES if asked != "auto")


# -- share --------------------------------------------------------------------


def test_two_ranks_on_a_gpu_each_get_half_of_a_lone_rank():
    """3 ranks on 2 GPUs, round robin: ranks 0 and 2 share GPU 0."""
    devices = [Device("n1", 0, "GPU-a"), Device("n1", 1, "GPU-b"), Device("n1", 0, "GPU-a")]
    assert share_weights(devices) == (0.5, 1.0, 0.5)
    assert ranks_per_device(devices) == (2, 1, 2)


def test_eight_ranks_on_two_gpus_are_equal():
    devices = [Device("n1", i % 2, f"GPU-{i % 2}") for i in range(8)]
    assert share_weights(devices) == (0.25,) * 8


def test_same_index_on_different_hosts_is_not_shared():
    devices = [Device("n1", 0, "GPU-a"), Device("n2", 0, "GPU-b"), Device("n2", 0, "GPU-b")]
    assert share_weights(devices) == (1.0, 0.5, 0.5)


def test_the_uuid_decides_sharing_when_indices_differ():
    """Per-rank CUDA_VISIBLE_DEVICES: one GPU seen as index 0 by one rank and 1 by another."""
    devices = [Device("n1", 0, "GPU-a"), Device("n1", 1, "GPU-a"), Device("n1", 0, "GPU-b")]
    assert ranks_per_device(devices) == (2, 2, 1)
    # Without UUIDs the index is all there is.
    assert ranks_per_device([Device("n1", 0), Device("n1", 0), Device("n1", 1)]) == (2, 2, 1)


def test_cpu_ranks_share_their_host():
    devices = [Device("n1"), Device("n1"), Device("n2")]
    assert share_weights(devices) == (0.5, 0.5, 1.0)
    assert Device("n1").label == "the CPU of n1" and Device("n1", 3).label == "GPU 3 of n1"


def test_device_of_a_cpu_backend():
    assert device_of(CpuBackend(), "here") == Device("here")


@given(st.lists(st.integers(0, 5), min_size=1, max_size=40))
def test_shares_of_each_device_add_up_to_one(gpus):
    devices = [Device("n", g) for g in gpus]
    weights = share_weights(devices)
    for g in set(gpus):
        assert sum(w for w, d in zip(weights, gpus) if d == g) == pytest.approx(1.0)


def test_share_then_layout_balances_three_ranks_on_two_gpus():
    """The module's worked example: weights ½, 1, ½ on 3 × 1, m = 16384 → rows 4096, 8192, 4096."""
    weights = share_weights(["gpu0", "gpu1", "gpu0"])
    layout = Layout(16384, 16384, 16384, Grid(3, 1), weights=weights)
    assert layout.block_sizes()["rows"] == (4096, 8192, 4096)
    assert predicted_imbalance(layout) == 0.0


# -- measured -----------------------------------------------------------------


def test_measured_weights_follow_rates():
    assert measured_weights([26e12, 52e12, 26e12]) == (0.5, 1.0, 0.5)
    assert measured_weights([3.0]) == (1.0,)


@pytest.mark.parametrize("rates, match", [
    ([1e12, 0.0], "rank 1 measured a GEMM rate of 0.0"),
    ([float("nan"), 1e12], "rank 0 measured a GEMM rate of nan"),
    ([1e12, float("inf")], "rank 1 measured a GEMM rate of inf"),
    ([1e12, -5.0], "rank 1 measured a GEMM rate of -5.0"),
    ([], "no GEMM rates"),
])
def test_measured_weights_refuse_bad_rates(rates, match):
    with pytest.raises(ValueError, match=match):
        measured_weights(rates)


@given(st.lists(st.floats(1e6, 1e15), min_size=1, max_size=16))
def test_measured_weights_keep_ratios(rates):
    weights = measured_weights(rates)
    assert max(weights) == 1.0
    for w, r in zip(weights, rates):
        assert w == pytest.approx(r / max(rates))


# -- weights_for --------------------------------------------------------------


def test_weights_for_each_mode():
    devices = ["a", "b", "a"]
    assert weights_for("share", devices) == (0.5, 1.0, 0.5)
    assert weights_for("none", devices) == (1.0, 1.0, 1.0)
    assert weights_for("measured", devices, [1.0, 4.0, 2.0]) == (0.25, 1.0, 0.5)


@pytest.mark.parametrize("call, match", [
    (lambda: weights_for("fastest", ["a"]), "--balance='fastest': expected one of auto, share, measured, product, dynamic, none"),
    (lambda: weights_for("measured", ["a", "b"]), "needs the measured GEMM rates"),
    (lambda: weights_for("measured", ["a", "b"], [1.0]), "1 GEMM rates for 2 ranks"),
    (lambda: share_weights([]), "no devices"),
    (lambda: equal_weights(0), "0 ranks"),
])
def test_weights_for_refuses(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# -- the GEMM timing ----------------------------------------------------------


class CountingClock(CpuBackend):
    """A CPU backend whose events count GEMMs, each taking 10 ms of its clock: a known rate."""

    def __init__(self):
        super().__init__()
        self.gemms = 0
        self.products = []

    def gemm(self, a, b, c, accumulate, stream=None, tf32=False):
        super().gemm(a, b, c, accumulate, stream, tf32)
        self.gemms += 1
        self.products.append((a.flags.f_contiguous, b.flags.c_contiguous, c.flags.c_contiguous, c.dtype.name))

    def event(self, stream=None, interprocess=False):
        return self.gemms

    def elapsed(self, start, stop):
        return 0.01 * (stop - start)


class TickingClock:
    """A clock that moves 10 ms for every GEMM the backend has run: a known rate."""

    def __init__(self, backend):
        self.backend = backend

    def __call__(self):
        return 0.01 * self.backend.gemms


@pytest.mark.parametrize("dtype, per_product", [("float64", 2 * 24**3), ("float32", 2 * 24**3),
                                                ("complex128", 8 * 24**3)])
def test_gemm_rate_counts_flops_over_wall_time(dtype, per_product):
    backend = CountingClock()
    rate = gemm_rate(backend, dtype, size=24, window=0.1, batch=3, clock=TickingClock(backend))
    assert rate == pytest.approx(per_product / 0.01)
    # One warm-up, then whole batches until the window (10 products) is full: 4 batches of 3.
    assert backend.gemms == 1 + 12
    # The run's storage orders and element type.
    assert set(backend.products) == {(True, True, True, dtype)}


def test_gemm_rate_sees_a_shared_device():
    """Two ranks taking turns on one device: each one's rate is half of the device's."""
    backend = CountingClock()
    shared = TickingClock(backend)
    alone = gemm_rate(backend, "float64", size=8, window=0.1, batch=1, clock=shared)
    own_gemm = backend.gemm

    def taking_turns(*args, **kwargs):  # the other rank's product runs after each of ours
        own_gemm(*args, **kwargs)
        backend.gemms += 1

    backend.gemm = taking_turns
    sharing = gemm_rate(backend, "float64", size=8, window=0.1, batch=1, clock=shared)
    assert sharing == pytest.approx(alone / 2)


def test_gemm_rate_on_the_cpu_is_a_rate():
    """The real clock: positive and finite (no claim about speed)."""
    rate = gemm_rate(CpuBackend(), "float64", size=32, window=0.01)
    assert np.isfinite(rate) and rate > 0


@pytest.mark.parametrize("size, window, batch", [(0, 0.1, 1), (8, 0.0, 1), (8, 0.1, 0)])
def test_gemm_rate_refuses_empty_timings(size, window, batch):
    with pytest.raises(ValueError, match="positive size, window and batch"):
        gemm_rate(CpuBackend(), "float64", size=size, window=window, batch=batch)


# -- product -------------------------------------------------------------------


def test_product_weights_are_share_first_then_the_rates():
    from hpcmm.planning.balance import product_rate

    assert weights_for("product", ["a", "b", "a"]) == (0.5, 1.0, 0.5)
    assert weights_for("product", ["a", "b", "a"], [1e12, 4e12, 2e12]) == (0.25, 1.0, 0.5)
    assert product_rate(8e12, 2.0) == 4e12
    assert math.isnan(product_rate(0.0, 1.0)) and math.isnan(product_rate(1e9, 0.0))
    with pytest.raises(ValueError, match="rank 1 measured a GEMM rate of nan"):
        weights_for("product", ["a", "b"], [1e12, product_rate(0.0, 0.0)])


def test_ranks_on_my_device_counts_this_rank():
    """The count the GEMM library is told (hpcmm.execution.placement): one rank alone on its device is 1."""
    from mpi4py import MPI

    from hpcmm.execution.backend import CpuBackend
    from hpcmm.planning.balance import ranks_on_my_device

    assert ranks_on_my_device(MPI.COMM_SELF, CpuBackend(), "node0") == 1


def test_dynamic_starts_each_rank_on_its_share():
    assert weights_for("dynamic", ["a", "b", "a"]) == weights_for("share", ["a", "b", "a"]) == (0.5, 1.0, 0.5)
