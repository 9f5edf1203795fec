"""The arrangement of a run's ranks without MPI: weights in grid order, blocks, records, MPS verdicts.

:class:`hpcmm.planning.arrangement.Arrangement` is plain data; here it is built from
what every rank of a virtual run would have reported (devices, rates, MPS
states), so any rank count can be checked in one process.  :func:`arrange`
itself runs at one rank; tests/mpi/test_run_balance_mpi.py runs it at 1–4.
"""

from __future__ import annotations

import math
import socket

import pytest
from mpi4py import MPI

from hpcmm.planning.arrangement import GPU_BLOCK_QUANTUM, arrange, arrangement_for
from hpcmm.execution.backend import CpuBackend
from hpcmm.planning.balance import Balance, Device, ranks_per_device, weights_for
from hpcmm.config import RunConfig
from hpcmm.planning.choices import device_need, memory_needed
from hpcmm.geometry.layout import Grid, Layout, predicted_imbalance
from hpcmm.planning.mps import MpsState


def state(active: bool) -> MpsState:
    return MpsState(active, "pipe", "/tmp/p", "seen" if active else "not seen")


def arrangement(devices, mode="share", rates=None, active=None, grid=None, shape=(64, 48, 40), on_gpu=True):
    """What :func:`arrange` decides for ranks on ``devices`` (in launch order) that report ``rates``."""
    weights = weights_for(mode, devices, rates)
    balance = Balance(mode, weights, tuple(devices), ranks_per_device(devices), rates)
    active = [False] * len(devices) if active is None else active
    explicit = None if grid is None else (grid.rows, grid.cols)
    return arrangement_for(balance, tuple(state(a) for a in active), shape, explicit, on_gpu)


def gpus(*indices, host="n1"):
    return [Device(host, i, f"uuid-{host}-{i}") for i in indices]


def test_three_ranks_on_two_gpus_balance_in_launch_order():
    arr = arrangement(gpus(0, 1, 0), shape=(16384, 16384, 16384))
    assert arr.grid == Grid(3, 1) and arr.order == (0, 1, 2)
    layout = arr.layout(16384, 16384, 16384)
    assert layout.block_sizes()["rows"] == (4096, 8192, 4096)
    assert predicted_imbalance(layout) == 0.0
    assert [arr.rank_facts(p)["ranks_per_device"] for p in range(3)] == [2, 1, 2]


def test_weights_follow_the_ranks_to_their_grid_positions():
    """6 ranks on 4 GPUs on a 2 x 3 grid: the fit moves the whole GPUs' ranks into one column."""
    devices = gpus(0, 1, 2, 3, 0, 1)
    arr = arrangement(devices, grid=Grid(2, 3))
    assert arr.order == (2, 0, 4, 3, 1, 5)
    assert arr.weights == (1.0, 0.5, 0.5, 1.0, 0.5, 0.5)
    for position, launch in enumerate(arr.order):
        facts = arr.rank_facts(position)
        assert facts["weight"] == arr.balance.weights[launch] == arr.weights[position]
        assert facts["ranks_per_device"] == (2 if devices[launch].index in (0, 1) else 1)
        assert math.isnan(facts["gemm_rate"])
    layout = arr.layout(64, 48, 40)
    assert layout.weights == arr.weights and predicted_imbalance(layout) == 0.0


def test_measured_rates_are_recorded_by_grid_position():
    rates = (4e12, 1e12, 3e12, 2e12)
    arr = arrangement(gpus(0, 1, 2, 3), mode="measured", rates=rates, grid=Grid(2, 2))
    assert [arr.rank_facts(p)["gemm_rate"] for p in range(4)] == [rates[i] for i in arr.order]
    assert arr.weights == tuple(rates[i] / 4e12 for i in arr.order)


@pytest.mark.parametrize("devices", [gpus(0, 1), gpus(0, 0, 0, 0), [Device("n1")] * 3])
def test_equal_weights_keep_the_blocks_and_order_of_before(devices):
    m, n, k = 29, 17, 23
    for mode in ("share", "none"):
        arr = arrangement(devices, mode=mode, shape=(m, n, k))
        usual = Grid(*MPI.Compute_dims(len(devices), 2))
        assert not arr.weighted and arr.grid == usual and arr.order == tuple(range(len(devices)))
        assert arr.layout(m, n, k) == Layout(m, n, k, usual)


@pytest.mark.parametrize("devices, rates", [(gpus(0, 1, 0), None), (gpus(0, 1, 0, 1, 0), None),
                                            (gpus(0, 1, 2, 3), (4.0, 1.0, 3.0, 2.0))])
def test_config_records_cover_the_matrix_and_follow_the_weights(devices, rates):
    m, n, k = 101, 67, 43
    arr = arrangement(devices, mode="share" if rates is None else "measured", rates=rates, shape=(m, n, k))
    layout = arr.layout(m, n, k)
    record = arr.attributes(layout)
    assert record["rank_weights"] == list(arr.weights) and record["grid_order"] == list(arr.order)
    assert sum(record["block_rows"]) == m and sum(record["block_cols"]) == n
    assert sum(record["block_a_k"]) == k and sum(record["block_b_k"]) == k
    assert len(record["block_rows"]) == arr.grid.rows and len(record["block_cols"]) == arr.grid.cols
    row_w, col_w = layout.row_weights, layout.col_weights
    for sizes, ws, total in ((record["block_rows"], row_w, m), (record["block_cols"], col_w, n),
                             (record["block_b_k"], row_w, k), (record["block_a_k"], col_w, k)):
        assert all(abs(s - total * w / sum(ws)) < 1 for s, w in zip(sizes, ws)), (sizes, ws)
    if rates is None:  # share: the ranks of each GPU hold one whole GPU's weight
        assert math.isclose(sum(arr.weights), len({d.key for d in devices}))


@pytest.mark.parametrize("on_gpu, aligned", [(True, True), (False, False)])
def test_weighted_blocks_are_aligned_on_gpus(on_gpu, aligned):
    """On GPUs weighted blocks start at multiples of GPU_BLOCK_QUANTUM; on CPUs they follow the weights exactly."""
    shape = (16384, 10007, 16384)
    arr = arrangement(gpus(0, 1, 0, 1, 0), shape=shape, on_gpu=on_gpu)
    assert arr.weighted
    layout = arr.layout(*shape)
    assert layout.quantum == (GPU_BLOCK_QUANTUM if on_gpu else 1)
    sizes = layout.block_sizes()
    inner = [s for axis in ("rows", "b_k") for s in sizes[axis][:-1]]
    assert all(s % GPU_BLOCK_QUANTUM == 0 for s in inner) == aligned, sizes
    assert sum(sizes["rows"]) == 16384 and sum(sizes["cols"]) == 10007


@pytest.mark.parametrize("devices, active, everywhere, hinted", [
    (gpus(0, 1, 0, 1), [True] * 4, True, False),
    (gpus(0, 1, 0, 1), [True, False, True, False], False, True),  # GPU 1's ranks take turns
    (gpus(0, 1, 0), [True, False, True], True, False),  # the GPU of one rank needs no MPS
    (gpus(0, 1), [False, False], False, False),  # nothing shared: no hint, and no MPS either
    (gpus(0, 1), [True, True], True, False),
])
def test_mps_verdict_and_hint(devices, active, everywhere, hinted):
    arr = arrangement(devices, active=active)
    assert arr.summary()["mps"] is everywhere
    assert arr.summary()["ranks_per_gpu"] == max(ranks_per_device(devices))
    assert (arr.hint is not None) is hinted
    if hinted:
        assert "without MPS" in arr.hint and "nvidia-cuda-mps-control -d" in arr.hint and "\n" not in arr.hint


def test_cpu_ranks_have_no_gpu_to_share():
    arr = arrangement([Device("n1")] * 4, active=[True] * 4, on_gpu=False)
    assert arr.summary() == {"balance": "share", "mps": False, "ranks_per_gpu": 0}
    assert arr.hint is None


def test_memory_of_ranks_that_share_a_device_adds_up():
    """Weighted blocks need different amounts on one device: the check adds them, rank by rank."""
    layout = Layout(64, 64, 64, Grid(3, 1), weights=(0.5, 1.0, 0.5))
    needs = [(device, memory_needed(layout, rank, 8, 16, 2)) for rank, device in enumerate((0, 1, 0))]
    assert needs[0][1] != needs[1][1]
    assert device_need(needs, 0) == (2, needs[0][1] + needs[2][1])
    assert device_need(needs, 1) == (1, needs[1][1])
    assert device_need(needs, 7) == (0, 0)


@pytest.mark.parametrize("mode", ["share", "measured", "none"])
def test_arrange_at_one_rank(mode):
    backend = CpuBackend()
    arr = arrange(MPI.COMM_SELF, socket.gethostname(), backend, RunConfig(balance=mode), (9, 7, 5))
    assert arr.balance.mode == mode and arr.weights == (1.0,) and arr.order == (0,) and arr.grid == Grid(1, 1)
    assert not arr.weighted and arr.layout(9, 7, 5) == Layout(9, 7, 5, Grid(1, 1))
    assert arr.mps[0].source == "pipe" and arr.summary()["ranks_per_gpu"] == 0
    rate = arr.rank_facts(0)["gemm_rate"]
    assert (rate > 0) if mode == "measured" else math.isnan(rate)


def _state(active):
    return MpsState(active, "pipe", "/tmp/p", "seen" if active else "not seen")


def test_sharing_says_time_sliced_only_where_ranks_share_a_gpu_without_mps():
    from hpcmm.planning.arrangement import Sharing

    assert Sharing(("g0", "g0"), (_state(False), _state(False))).time_sliced
    assert not Sharing(("g0", "g0"), (_state(True), _state(True))).time_sliced
    assert not Sharing(("g0", "g1"), (_state(False), _state(False))).time_sliced
    assert Sharing(("g0", "g1", "g0"), (_state(False), _state(True), _state(False))).time_sliced


def test_arrange_takes_the_sharing_it_is_given_and_gathers_nothing_again(monkeypatch):
    import hpcmm.planning.arrangement as arrangement

    sharing = arrangement.gather_sharing(MPI.COMM_SELF, socket.gethostname(), CpuBackend())
    expected = arrange(MPI.COMM_SELF, socket.gethostname(), CpuBackend(), RunConfig(balance="share"), (9, 7, 5))

    def refuse(*args, **kwargs):
        raise AssertionError("gathered again")

    monkeypatch.setattr(arrangement, "detect", refuse)
    monkeypatch.setattr(arrangement, "device_of", refuse)
    given = arrange(MPI.COMM_SELF, socket.gethostname(), CpuBackend(), RunConfig(balance="share"), (9, 7, 5),
                    sharing=sharing)
    assert given == expected
