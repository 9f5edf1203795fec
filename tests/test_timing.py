"""Every figure of the timings, to the digit, from GEMMs and transfers of known length.

The engine runs on a fake backend (:mod:`fake_backend`) whose GEMMs and
transfers take known virtual times; the product's window, the per-step
GEMM, transfer, wait-for-data and host-overhead times must come out as worked
out by hand below.  The summary maths (:func:`hpcmm.cli.summary.summary_figures`)
and a whole run with known product times are checked the same way.
"""

from __future__ import annotations

import dataclasses
import io
import math
import time

import h5py
import numpy as np
import pytest
from fake_backend import FakeBackend, install
from mpi4py import MPI

import hpcmm
from hpcmm.planning.algorithms import prefetch_of
from hpcmm.execution.backend import CpuBackend
from hpcmm.execution.clock import SharedClock, product_window
from hpcmm.planning.assemble import engine_for
from hpcmm.config import RunConfig
from hpcmm.execution.engine import Engine
from hpcmm.io.inputs import generate_block
from hpcmm.geometry.layout import Grid, Layout
from hpcmm.model.cost import Problem, builtin, predict
from hpcmm.cli.summary import (dynamic_figures, print_summary, share_imbalance_at_rates, summary_figures,
                               summary_rows)
from hpcmm.dtypes import product_flops
from hpcmm.execution.topology import Topology
from hpcmm.verify import Check

M, N, K = 12, 7, 8  # panel 2: four steps


@pytest.fixture
def engine():
    topo = Topology.create(MPI.COMM_SELF, RunConfig(m=1, n=1, k=1, device="cpu"))
    eng = None
    try:
        eng = engine_for(topo, CpuBackend(), Layout(M, N, K, Grid(1, 1)), RunConfig(panel=2, prefetch=1), False)
        a = generate_block(1, "A", (M, K), (0, M), (0, K), np.float64)
        b = generate_block(1, "B", (K, N), (0, K), (0, N), np.float64)
        eng.load(a, b)
        eng.reference = a @ b
        yield eng
    finally:
        if eng is not None:
            eng.close()
        topo.close()


def _prefetch(eng, depth):
    eng.prefetch, eng.ring = depth, depth + 1


def test_transfers_hidden_after_the_first_step(engine, monkeypatch):
    """GEMM 1 s, A 0.5 s and B 0.25 s on the communication stream, prefetch 1.

    Panels of step 0 arrive at 0.75; GEMMs run 0.75–1.75, 1.75–2.75, … 3.75–4.75,
    each next panel pair arriving while the GEMM before it runs.
    """
    fake = FakeBackend(lambda width: 1.0)
    install(monkeypatch, engine, fake, a_seconds=0.5, b_seconds=0.25)
    assert len(engine.plan) == 4
    t = engine.multiply()
    assert t.seconds == 4.75
    assert t.start == 0.0
    np.testing.assert_array_equal(t.steps[:, 0], [1.0, 1.0, 1.0, 1.0])  # GEMM
    np.testing.assert_array_equal(t.steps[:, 1], [0.75, 0.75, 0.75, 0.75])  # A + B transfers
    np.testing.assert_array_equal(t.steps[:, 2], [0.75, 0.0, 0.0, 0.0])  # waiting for data
    np.testing.assert_array_equal(t.host, [0.0, 0.0, 0.0, 0.0])
    timeline = t.timeline
    gemms = timeline[timeline[:, 1] == 0]
    np.testing.assert_array_equal(gemms[:, 3:5], [[0.75, 1.75], [1.75, 2.75], [2.75, 3.75], [3.75, 4.75]])
    np.testing.assert_allclose(engine.C, engine.reference, rtol=1e-13)


def test_host_overhead_is_not_waiting_for_data(engine, monkeypatch):
    """No transfers (the panels are the rank's own) but 1.5 s of host work per step, GEMM 1 s.

    The host launches GEMM s at 1.5 (s + 1): gaps of 1.5, 0.5, 0.5, 0.5, all host overhead.
    """
    fake = FakeBackend(lambda width: 1.0)
    install(monkeypatch, engine, fake, host_seconds=1.5)
    t = engine.multiply()
    assert t.seconds == 7.0
    np.testing.assert_array_equal(t.steps[:, 0], [1.0] * 4)
    np.testing.assert_array_equal(t.steps[:, 2], [0.0] * 4)
    np.testing.assert_array_equal(t.host, [1.5, 0.5, 0.5, 0.5])


def test_blocking_transfers_without_prefetch(engine, monkeypatch):
    """prefetch 0, B panels by a host-blocking (MPI-like) transfer of 0.5 s, GEMM 1 s: nothing hides."""
    _prefetch(engine, 0)
    fake = FakeBackend(lambda width: 1.0)
    install(monkeypatch, engine, fake, b_seconds=0.5, blocking=True)
    t = engine.multiply()
    assert t.seconds == 6.0
    np.testing.assert_array_equal(t.steps[:, 1], [0.5] * 4)
    np.testing.assert_array_equal(t.steps[:, 2], [0.5] * 4)
    np.testing.assert_array_equal(t.host, [0.0] * 4)
    np.testing.assert_allclose(engine.C, engine.reference, rtol=1e-13)


def test_mpi_transfers_are_waiting_for_data_not_host_overhead(engine, monkeypatch):
    """prefetch 1, B panels through MPI (the host moves them: no ready event), 2 s each, GEMM 1 s.

    B 0 arrives at 2, GEMM 0 runs 2–3; B 1 is fetched right after GEMM 0 is
    queued, holding the host until 4, so GEMM 1 runs 4–5; and so on: GEMMs at
    2, 4, 6, 8, window 9 s.  Each gap (2, 1, 1, 1) is spent waiting for data.
    """
    fake = FakeBackend(lambda width: 1.0)
    install(monkeypatch, engine, fake, b_seconds=2.0, mpi_wait=0.0)
    t = engine.multiply()
    assert t.seconds == 9.0
    np.testing.assert_array_equal(t.steps[:, 1], [2.0] * 4)
    np.testing.assert_array_equal(t.steps[:, 2], [2.0, 1.0, 1.0, 1.0])
    np.testing.assert_array_equal(t.host, [0.0] * 4)
    np.testing.assert_allclose(engine.C, engine.reference, rtol=1e-13)


def test_mpi_transfer_time_leaves_out_the_wait_for_a_relay_slot(engine, monkeypatch):
    """prefetch 0, B through MPI 0.5 s after a 0.25 s host wait for the relay slot, GEMM 1 s.

    Step s: the wait 1.75 s·s … +0.25, the transfer to +0.75, the GEMM to +1.75.
    The transfer takes 0.5 s (its bar starts after the wait); the whole gap
    before each GEMM (0.75 s) is waiting for data, none of it host overhead.
    """
    _prefetch(engine, 0)
    fake = FakeBackend(lambda width: 1.0)
    install(monkeypatch, engine, fake, b_seconds=0.5, mpi_wait=0.25)
    t = engine.multiply()
    assert t.seconds == 7.0
    np.testing.assert_array_equal(t.steps[:, 1], [0.5] * 4)
    np.testing.assert_array_equal(t.steps[:, 2], [0.75] * 4)
    np.testing.assert_array_equal(t.host, [0.0] * 4)
    b_bars = t.timeline[t.timeline[:, 1] == 2]
    np.testing.assert_array_equal(b_bars[:, 3:5], [[0.25, 0.75], [2.0, 2.5], [3.75, 4.25], [5.5, 6.0]])


def test_gemm_time_follows_the_width(engine, monkeypatch):
    """GEMM seconds proportional to the panel width (0.25 s per column): 4 × 0.5 s, window 2 s."""
    fake = FakeBackend(lambda width: 0.25 * width)
    install(monkeypatch, engine, fake)
    t = engine.multiply()
    assert t.seconds == 2.0
    np.testing.assert_array_equal(t.steps[:, 0], [0.5] * 4)


# -- the summary maths -------------------------------------------------------------


def _steps(ranks, iters, nsteps, gemm, wait):
    out = np.zeros((ranks, iters, nsteps, 3))
    out[..., 0], out[..., 2] = gemm, wait
    return out


def test_summary_figures_to_the_digit():
    """Three products of 2, 8 and 4 s (median 4), complex: 8mnk flops."""
    m, n, k = 1000, 2000, 3000
    steps = _steps(2, 3, 2, gemm=0.0, wait=0.0)
    steps[0, :, :, 0] = 1.0  # rank 0: 2 s of GEMM per product
    steps[1, :, :, 0] = 0.5  # rank 1: 1 s
    steps[0, :, 0, 2] = [0.1, 0.3, 0.2]  # waits of rank 0's first step, per product
    steps[1, :, 1, 2] = [0.4, 0.1, 0.1]
    host = np.zeros((2, 3, 2))
    host[1, :, 0] = [0.05, 0.25, 0.5]
    check = Check("freivalds", 1e-9, 2e-8, 0.003)
    s = summary_figures(m=m, n=n, k=k, dtype="complex64", ranks=2, gpus=2, product_seconds=[2.0, 8.0, 4.0],
                        step_seconds=steps, host_seconds=host, check=check, paths={"ipc"})
    assert s["flops"] == 8 * m * n * k == product_flops(m, n, k, "complex128")
    assert product_flops(m, n, k, "float32") == 2 * m * n * k
    assert s["seconds"] == 4.0 and s["seconds_min"] == 2.0 and s["seconds_max"] == 8.0
    assert s["tflops"] == 8 * m * n * k / 4.0 / 1e12
    assert s["tflops_per_rank"] == s["tflops"] / 2 and s["tflops_per_gpu"] == s["tflops"] / 2
    # Per product the rank that waited most: 0.4, 0.3, 0.2 → median 0.3.
    assert s["exposed_comm_seconds"] == 0.3 and s["exposed_comm_fraction"] == 0.3 / 4.0
    assert s["host_overhead_seconds"] == 0.25 and s["host_overhead_fraction"] == 0.25 / 4.0
    assert s["gemm_seconds_max"] == 2.0 and s["load_imbalance"] == 2.0 / 1.5 - 1.0
    assert (s["residual"], s["tolerance"], s["verify_detectable"], s["verified"]) == (1e-9, 2e-8, 0.003, True)
    assert s["paths"] == ["ipc"]


def test_load_imbalance_compares_only_the_ranks_that_computed():
    """Dynamic tiles of a time-sliced GPU go to one worker: the idle ranks are no imbalance, and
    the summary says how many ranks computed."""
    steps = _steps(4, 2, 1, gemm=0.0, wait=0.0)
    steps[0, :, 0, 0] = 3.0  # rank 0 computes for the GPU's four ranks
    steps[2, :, 0, 0] = 2.0  # rank 2: a second GPU's worker, a little ahead
    args = dict(m=8, n=8, k=8, dtype="float64", ranks=4, gpus=2, product_seconds=[3.0, 3.0],
                step_seconds=steps, host_seconds=np.zeros((4, 2, 1)), check=None, paths=set())
    assert summary_figures(**args)["load_imbalance"] == 3.0 / 1.25 - 1.0  # every rank counted
    s = summary_figures(**args, workers=(0, 2))
    assert s["load_imbalance"] == 3.0 / 2.5 - 1.0 and s["gemm_seconds_max"] == 3.0
    rows = [dict(product=p, rank=r, owner=o) for p in (0, 1) for r, o in ((0, 0), (0, 1), (2, 2), (2, 3))]
    s.update(dynamic_figures(rows, (0, 2)), panel=1, prefetch=1)
    assert (s["dynamic_tiles_least"], s["dynamic_tiles_most"], s["dynamic_workers"]) == (2, 2, 2)
    assert s["dynamic_taken_fraction"] == 0.5
    assert dict(summary_rows(s))["tiles taken (dynamic)"].endswith("; 2 of 4 ranks computed "
                                                                  "(the others time-slice a GPU with one of them)")
    assert s["dynamic_joined_products"] == 0
    # Product 1: rank 1 joined its GPU's worker, rank 0, and took its own tile.
    rows[5] = dict(product=1, rank=1, owner=1)
    s.update(dynamic_figures(rows, (0, 2)))
    assert s["dynamic_joined_products"] == 1
    assert dict(summary_rows(s))["tiles taken (dynamic)"].endswith(
        "; 2 of 4 ranks computed (the others time-slice a GPU with one of them; all computed in 1 product(s), "
        "while the GPU ran slow)")


def test_the_summary_says_what_the_share_blocks_would_have_cost_at_the_rates_that_ran():
    """With dynamic tiles the load imbalance also gives the share blocks' at the rates the ranks ran: a rank
    half as fast whose tiles were taken ran even, and would have run 1/3 behind the mean on its own block."""
    # 2 ranks, blocks of 40 rows (rank 0's 6 columns wide, rank 1's 3): rank 1 computes twice rank 0's rate.
    rows = [dict(product=p, rank=0, owner=0, tile=0, row0=0, row1=20, seconds=2.0) for p in (0, 1)]
    rows += [dict(product=p, rank=1, owner=0, tile=1, row0=20, row1=40, seconds=1.0) for p in (0, 1)]
    rows += [dict(product=p, rank=1, owner=1, tile=0, row0=0, row1=40, seconds=1.0) for p in (0, 1)]
    # rates: rank 0 120 / 2 s = 60, rank 1 (120 + 120) / 2 s = 120; alone: 240 / 60 = 4 s, 120 / 120 = 1 s
    assert share_imbalance_at_rates(rows[::2], owner_cols=(6, 3)) == pytest.approx(4.0 / 2.5 - 1.0)
    figures = dynamic_figures(rows, (0, 1), owner_cols=(6, 3))
    assert figures["dynamic_share_imbalance"] == pytest.approx(0.6)
    assert "dynamic_share_imbalance" not in dynamic_figures(rows, (0, 1))  # no columns: not worked out
    # Product 1 slower for rank 0 (rate 30: 8 s alone): the median of the products, not the mean or the last.
    rows[1] = dict(rows[1], seconds=4.0)
    rows.append(dict(product=2, rank=0, owner=0, tile=0, row0=0, row1=40, seconds=1.0))  # rate 240: 1 s
    rows.append(dict(product=2, rank=1, owner=1, tile=0, row0=0, row1=40, seconds=1.0))  # 1 s: even
    static = [share_imbalance_at_rates([r for r in rows if r["product"] == p], (6, 3)) for p in (0, 1, 2)]
    assert static == pytest.approx([0.6, 8.0 / 4.5 - 1.0, 0.0])
    assert dynamic_figures(rows, (0, 1), owner_cols=(6, 3))["dynamic_share_imbalance"] == pytest.approx(0.6)
    # A rate needs both area and seconds: a tile timed at 0 s (the clock's resolution), or empty tiles alone,
    # leave it unknown; one row of one column is area enough.
    tiny = [dict(rank=0, owner=0, row0=0, row1=1, seconds=0.5), dict(rank=1, owner=1, row0=0, row1=1, seconds=0.0)]
    assert math.isnan(share_imbalance_at_rates(tiny, (1, 1)))
    tiny[1]["seconds"] = 0.25
    assert share_imbalance_at_rates(tiny, (1, 1)) == pytest.approx(0.5 / 0.375 - 1.0)
    empty = [dict(rank=0, owner=0, row0=0, row1=0, seconds=0.001), dict(rank=1, owner=1, row0=0, row1=4, seconds=1.0)]
    assert math.isnan(share_imbalance_at_rates(empty, (3, 3)))
    # A time-sliced GPU's lone worker computed every tile: the others' rates are not known.
    lone = [dict(product=0, rank=0, owner=o, tile=0, row0=0, row1=10, seconds=1.0) for o in (0, 1)]
    assert math.isnan(share_imbalance_at_rates(lone, (4, 4)))
    assert "dynamic_share_imbalance" not in dynamic_figures(lone, (0,), owner_cols=(4, 4))
    s = summary_figures(m=8, n=8, k=8, dtype="float64", ranks=2, gpus=0, product_seconds=[1.0],
                        step_seconds=_steps(2, 1, 1, 1.0, 0.0), host_seconds=np.zeros((2, 1, 1)), check=None,
                        paths=set())
    s.update(figures, balance="dynamic", predicted_imbalance=0.0, panel=1, prefetch=1)
    assert dict(summary_rows(s))["load imbalance"] == ("0.0 % measured, 0.0 % predicted (balance dynamic); "
                                                       "the share blocks at these ranks' rates: 60.0 %")
    del s["dynamic_share_imbalance"]
    assert dict(summary_rows(s))["load imbalance"] == "0.0 % measured, 0.0 % predicted (balance dynamic)"


def test_the_ranks_beside_a_lone_worker_join_only_while_its_gpu_runs_slow():
    """JoinRule: a product alone 1.3 times slower than the fastest alone joins the next; a joined product
    that fast again, or every RETRY_ALONE-th joined one, goes back alone."""
    from hpcmm.execution.dynamic import JOIN_SLOWDOWN, RETRY_ALONE, JoinRule

    rule = JoinRule()
    assert [rule.record(t) for t in (2.0, 1.0, 1.25, 1.3)] == [False, False, False, False]  # not over 1.3 × 1.0
    assert rule.record(1.31) is True  # another program took half the GPU, say
    joined = [rule.record(1.6) for _ in range(RETRY_ALONE)]
    assert joined == [True] * (RETRY_ALONE - 1) + [False]  # one product alone to look
    assert rule.record(2.0) is True and rule.fastest_alone == 1.0  # still slow alone: joined again
    assert rule.record(JOIN_SLOWDOWN * 1.0) is False  # joined and fast: the GPU is free
    assert rule.record(0.9) is False and rule.fastest_alone == 0.9


def test_summary_is_printed_whole():
    """A long value (a deep output path) is printed on one line, not cut at a terminal width."""
    s = summary_figures(m=1, n=1, k=1, dtype="float64", ranks=1, gpus=0, product_seconds=[1.0],
                        step_seconds=_steps(1, 1, 1, 1.0, 0.0), host_seconds=np.zeros((1, 1, 1)),
                        check=Check("freivalds", 0.0, 1.0, 0.5), paths=set())
    s.update(panel=1, prefetch=1)
    path = "/very/" + "deep/" * 40 + "results.h5"
    out = io.StringIO()
    print_summary(s, path, file=out)
    text = out.getvalue()
    assert path in text
    assert "would not show" in text and "50 %" in text


# -- a whole run with products of known length ---------------------------------------


def _known_times(monkeypatch, seconds, wait, host):
    """Every product of the engine takes ``seconds.pop(0)``, with known waits and host gaps."""
    original = Engine.multiply

    def multiply(self):
        t = original(self)
        t.seconds = seconds.pop(0)
        t.start = time.perf_counter()
        t.steps[:, 2] = wait
        t.host = np.full(len(t.steps), host)
        return t

    monkeypatch.setattr(Engine, "multiply", multiply)


def test_run_reports_median_window_and_complex_flops(tmp_path, monkeypatch):
    m, n, k = 20, 10, 16
    _known_times(monkeypatch, [9.0, 2.0, 8.0, 4.0], wait=0.25, host=0.125)  # warm-up 9, timed 2 8 4
    said = []
    config = RunConfig(m=m, n=n, k=k, dtype="complex64", device="cpu", panel=4, warmup=1, iters=3,
                       out=str(tmp_path / "r.h5"))
    before = time.perf_counter()
    result = hpcmm.run(config, comm=MPI.COMM_SELF, progress=said.append)
    after = time.perf_counter()
    s = result.summary
    assert s["seconds"] == pytest.approx(4.0, rel=1e-9)
    assert s["tflops"] == pytest.approx(8 * m * n * k / 4.0 / 1e12, rel=1e-9)
    assert s["exposed_comm_seconds"] == 4 * 0.25
    assert s["exposed_comm_fraction"] == pytest.approx(1.0 / 4.0, rel=1e-9)
    assert s["host_overhead_fraction"] == pytest.approx(0.5 / 4.0, rel=1e-9)
    assert s["verified"] is True
    # Progress lines show the product's window, the figure the summary uses.
    lines = [line for line in said if line.startswith(("warm-up", "iteration"))]
    assert [line.split(": ")[1].split()[0] for line in lines] == ["9.0000", "2.0000", "8.0000", "4.0000"]
    with h5py.File(config.out, "r") as f:
        np.testing.assert_allclose(f["timings/product_seconds"][()], [2.0, 8.0, 4.0], rtol=1e-9)
        assert f["timings/start_seconds"].shape == (1, 3)
        # On this process's own clock, in order: other programs' events can be placed among them.
        starts = f["timings/product_start_seconds"][()]
        assert starts.shape == (3,) and before < starts[0] <= starts[1] <= starts[2] < after
        assert f["timings/host_seconds"].shape == (1, 3, 4)
        assert f["timings"].attrs["clock"] in ("MPI.Wtime (global)", "ping-pong with rank 0")
        assert float(f["summary"].attrs["seconds"]) == pytest.approx(4.0, rel=1e-9)


def test_clock_at_one_rank():
    clock = SharedClock(MPI.COMM_SELF)
    assert clock.offset == 0.0 and clock.to_shared(12.5) == 12.5
    assert product_window(MPI.COMM_SELF, 3.0, 2.5) == (3.0, 5.5)


@pytest.mark.parametrize("dtype, tf32, given, on_gpu, expected", [
    ("float32", True, None, True, 2),    # TF32 on a GPU: two panels ahead (hpcmm.planning.algorithms.TF32_PREFETCH)
    ("float32", False, None, True, 1),
    ("float64", False, None, True, 1),
    ("float32", True, None, False, 1),   # a CPU has no TF32
    ("float64", False, None, False, 1),
    ("float32", True, 1, True, 1),       # --prefetch wins over the rule
    ("float64", False, 3, False, 3),
])
def test_the_prefetch_rule_in_the_run_and_the_model(dtype, tf32, given, on_gpu, expected):
    """Where --prefetch is not given: TF32_PREFETCH panels in flight for TF32 on GPUs, one otherwise;
    the cost model predicts with the same number, and an engine on the CPU takes it with its ring."""
    config = RunConfig(panel=2, prefetch=given, dtype=dtype, tf32=tf32)
    assert prefetch_of(config, on_gpu) == expected
    machine = builtin("h200x2") if on_gpu else dataclasses.replace(builtin("h200x2"), device="cpu")
    assert predict(Problem(4096, 4096, 4096, "tf32" if tf32 else dtype), 2, machine, prefetch=given).prefetch == expected
    if on_gpu:
        return
    topo = Topology.create(MPI.COMM_SELF, RunConfig(m=1, n=1, k=1, device="cpu"))
    eng = None
    try:
        eng = engine_for(topo, CpuBackend(), Layout(M, N, K, Grid(1, 1)), config, False)
        assert (eng.prefetch, eng.ring) == (expected, expected + 1)
    finally:
        if eng is not None:
            eng.close()
        topo.close()
