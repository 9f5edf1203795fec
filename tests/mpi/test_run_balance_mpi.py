"""``hpcmm.run`` with ``--balance``: weighted blocks end to end, checked against numpy.

Run with::

    mpiexec -n 4 python -m pytest --with-mpi tests/mpi

(``tests/test_mpi_suite.py`` does this for 1, 2, 3 and 4 ranks.)  On CPU
ranks ``share`` gives every rank the same weight (they share one host), so
uneven weights come from ``measured`` (a real GEMM timing: whatever the rates,
C must be right) and from a GEMM timing replaced by fixed, unequal rates (the
weights then really differ, and the blocks, grid order and records can be
checked against them).  Shapes are sized from the rank count and uneven.
Verdicts are shared with every rank before any rank asserts.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import h5py
import numpy as np
import pytest
from mpi4py import MPI

import hpcmm
from hpcmm.planning import balance as balance_module
from hpcmm.config import RunConfig
from hpcmm.planning.grid_orientation import facing
from hpcmm.io.inputs import generate_block
from hpcmm.geometry.layout import Grid, Layout, load_imbalance, predicted_imbalance
from hpcmm.execution.topology import choose_grid
from hpcmm.verify import tolerance
from test_run_mpi import everywhere, on_rank0

COMM = MPI.COMM_WORLD
RANK = COMM.Get_rank()
P = COMM.Get_size()
DEVICE = os.environ.get("HPCMM_DEVICE", "auto")
#: GEMM rates (flop/s) the replaced timing reports, by launch rank: no two neighbours equal.
RATES = (4e9, 1e9, 3e9, 2e9)


def usual_grid(ranks_per_node: int | None = None) -> Grid:
    """The grid of a run without weights or ``--grid``: ``MPI.Compute_dims``, turned as the run turns it
    (float64 on GPUs of one node faces tall, or takes one process row where ranks share the GPUs,
    :mod:`hpcmm.planning.grid_orientation`; the suite's ranks are on one host)."""
    from hpcmm.execution.backend import gpu_count

    on_gpu = DEVICE != "cpu" and gpu_count() > 0
    nodes = 1 if ranks_per_node is None or ranks_per_node >= P else -(-P // ranks_per_node)
    shared = on_gpu and P > gpu_count()
    return choose_grid(P, None, facing("auto", "float64", on_gpu=on_gpu, nodes=nodes, shared=shared, ranks=P,
                                       n=shape()[1]))


def shape() -> tuple[int, int, int]:
    return 7 * P + 3, 5 * P + 1, 3 * P + 2


def run(tmp: Path, name: str, **kwargs) -> hpcmm.RunResult:
    m, n, k = shape()
    config = RunConfig(device=DEVICE, m=m, n=n, k=k, warmup=0, iters=1, verify="full", save_c=True,
                       out=str(tmp / f"{name}.h5"), **kwargs)
    result = hpcmm.run(config, comm=COMM)
    everywhere(result.summary["verified"] is True, f"verify: residual {result.summary.get('residual')}")
    return result


def check_product(path: Path) -> None:
    """Rank 0: ``/result/C`` is the float64 product of the generated A and B."""
    m, n, k = shape()
    a = generate_block(42, "A", (m, k), (0, m), (0, k), "float64")
    b = generate_block(42, "B", (k, n), (0, k), (0, n), "float64")
    with h5py.File(path, "r") as f:
        c = f["result/C"][()]
        steps = int(f["config"].attrs["steps"])
    assert np.isfinite(c).all(), f"{np.count_nonzero(~np.isfinite(c))} element(s) of C never written"
    error = float(np.max(np.abs(c - a @ b) / (np.abs(a) @ np.abs(b))))
    assert error <= tolerance("float64", k, steps, False), f"max componentwise error {error:.3e}"


def check_record(path: Path, mode: str) -> dict:
    """Rank 0: the balance fields of the file agree with each other; returns them."""
    m, n, k = shape()
    with h5py.File(path, "r") as f:
        cfg, s = f["config"].attrs, f["summary"].attrs
        topology = f["topology"][()]
        weights = tuple(float(w) for w in cfg["rank_weights"])
        order = tuple(int(i) for i in cfg["grid_order"])
        rows, cols = (int(x) for x in str(cfg["grid"]).split("x"))
        sizes = {axis: tuple(int(x) for x in cfg[f"block_{axis}"]) for axis in ("rows", "cols", "a_k", "b_k")}
        record = dict(weights=weights, order=order, grid=Grid(rows, cols), sizes=sizes, topology=topology,
                      balance=str(s["balance"]), predicted=float(s["predicted_imbalance"]),
                      measured=float(s["load_imbalance"]), mps=bool(s["mps"]),
                      ranks_per_gpu=int(s["ranks_per_gpu"]), config_balance=str(cfg["balance"]))
    assert record["balance"] == record["config_balance"] == mode, record
    assert sorted(order) == list(range(P)), f"grid_order {order} is no permutation of {P} ranks"
    assert len(weights) == P and all(w > 0 and math.isfinite(w) for w in weights), weights
    # The blocks cover m, n and k once each, one extent per process row or column.
    assert (len(sizes["rows"]), len(sizes["b_k"])) == (rows, rows), sizes
    assert (len(sizes["cols"]), len(sizes["a_k"])) == (cols, cols), sizes
    assert (sum(sizes["rows"]), sum(sizes["cols"]), sum(sizes["a_k"]), sum(sizes["b_k"])) == (m, n, k, k), sizes
    # The topology's rows are the grid's ranks, their weights those of /config.
    assert [int(r) for r in topology["rank"]] == list(range(P))
    assert [(int(r), int(c)) for r, c in zip(topology["grid_row"], topology["grid_col"])] == \
        [divmod(p, cols) for p in range(P)]
    assert tuple(float(w) for w in topology["weight"]) == weights
    # Each grid position holds the launch rank the order names (as that rank itself reports).
    assert tuple(int(r) for r in topology["launch_rank"]) == order, (topology["launch_rank"], order)
    assert all(int(r) >= 1 for r in topology["ranks_per_device"])
    assert {bytes(src).decode() for src in topology["mps_source"]} <= {"pipe", "driver"}
    assert all(int(a) in (0, 1) for a in topology["mps_active"])
    # The predicted imbalance is the layout's own.
    layout = Layout(m, n, k, record["grid"], weights=weights if len(set(weights)) > 1 else None)
    assert layout.block_sizes() == sizes, (layout.block_sizes(), sizes)
    assert math.isclose(record["predicted"], predicted_imbalance(layout), abs_tol=1e-12), record
    assert record["measured"] >= 0
    if not any(int(g) >= 0 for g in topology["gpu_index"]):
        assert record["ranks_per_gpu"] == 0 and record["mps"] is False, record
        assert all(int(r) == P for r in topology["ranks_per_device"]), "CPU ranks share one host's CPU"
    return record


def check_weights_follow_rates(record: dict) -> None:
    """Rank 0: every rank's recorded rate is positive, and its weight is that rate over the fastest's."""
    assert max(record["weights"]) == 1.0, record["weights"]  # the fastest rank's rate over itself
    rates = [float(r) for r in record["topology"]["gemm_rate"]]
    assert all(math.isfinite(r) and r > 0 for r in rates), rates
    assert all(math.isclose(w, r / max(rates)) for w, r in zip(record["weights"], rates)), (rates, record)


def fixed_rates(monkeypatch) -> None:
    """Replace the GEMM timing: launch rank ``r`` reports ``RATES[r % 4]`` flop/s."""
    monkeypatch.setattr(balance_module, "gemm_rate", lambda backend, dtype, **kwargs: RATES[RANK % len(RATES)])


# -- measured and product: real rates, whatever they say ------------------------------------


@pytest.mark.mpi(min_size=1)
@pytest.mark.parametrize("mode", ["measured", "product"])
@pytest.mark.parametrize("ranks_per_node", [None, 1])
def test_rate_balance_gives_the_right_product(mpi_tmp_path, mode, ranks_per_node):
    """Real rates on every rank (``measured``: a GEMM timing; ``product``: an untimed product with the
    share blocks): the weights are whatever was measured, C is right all the same."""
    result = run(mpi_tmp_path, mode, balance=mode, ranks_per_node=ranks_per_node)
    path = mpi_tmp_path / f"{mode}.h5"

    def check():
        check_product(path)
        record = check_record(path, mode)
        if mode == "product" and P == 1:  # one rank: nothing to balance, no product run before the timed ones
            rates = [float(r) for r in record["topology"]["gemm_rate"]]
            assert record["weights"] == (1.0,) and all(math.isnan(r) for r in rates), (record, rates)
            return
        check_weights_follow_rates(record)

    on_rank0(check)
    everywhere(result.summary["balance"] == mode, f"{result.summary.get('balance')}")


# -- product: the rates decide the blocks ------------------------------------------------------


@pytest.mark.mpi(min_size=2)
def test_product_rates_decide_the_blocks(mpi_tmp_path, monkeypatch):
    """Rates 4 : 1 : 3 : 2 from the untimed product: the timed products' blocks follow them."""
    import importlib

    run_module = importlib.import_module("hpcmm.planning.assemble")  # where --balance product measures
    monkeypatch.setattr(run_module, "product_rate", lambda flops, seconds: RATES[RANK % len(RATES)])
    run(mpi_tmp_path, "rates", balance="product")
    m, n, k = shape()

    def check():
        check_product(mpi_tmp_path / "rates.h5")
        record = check_record(mpi_tmp_path / "rates.h5", "product")
        expected = tuple(RATES[i % len(RATES)] / max(RATES[:P]) for i in record["order"])
        assert record["weights"] == pytest.approx(expected, rel=1e-12), (record["weights"], expected)
        assert record["sizes"] != Layout(m, n, k, record["grid"]).block_sizes(), record["sizes"]

    on_rank0(check)


@pytest.mark.mpi(min_size=2)
def test_product_balance_keeps_the_face_of_the_grid(mpi_tmp_path, monkeypatch):
    """The blocks ``product`` lays out again face as the run's grid did (``tall`` here, set), not as
    ``MPI.Compute_dims`` gives it (at 2 and 3 ranks the two differ)."""
    import importlib

    from hpcmm.planning.grid_orientation import most_square, oriented

    run_module = importlib.import_module("hpcmm.planning.assemble")  # where --balance product measures
    monkeypatch.setattr(run_module, "product_rate", lambda flops, seconds: 1e9)  # equal rates: the usual grid
    run(mpi_tmp_path, "faced", balance="product", grid_orientation="tall")

    def check():
        with h5py.File(mpi_tmp_path / "faced.h5", "r") as f:
            grid, face = str(f["config"].attrs["grid"]), str(f["config"].attrs["grid_face"])
        assert (grid, face) == (str(oriented(*most_square(P), "tall")), "tall"), (grid, face)

    on_rank0(check)


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("seconds, most, measured", [(0.0, 32, 1), (1e9, 3, 3)])
def test_product_balance_measures_products_for_its_time(mpi_tmp_path, monkeypatch, seconds, most, measured):
    """After its warm-up, ``product`` measures products until its time has passed (at least one, at
    most its cap), the same number on every rank, and weighs the flops of all of them."""
    import importlib

    from hpcmm.execution.engine import Engine

    assemble = importlib.import_module("hpcmm.planning.assemble")
    monkeypatch.setattr(assemble, "PRODUCT_BALANCE_SECONDS", seconds)
    monkeypatch.setattr(assemble, "PRODUCT_BALANCE_MOST", most)
    calls, weighed = [], []
    multiply = Engine.multiply

    def counted(self, *args, **kwargs):
        calls.append(1)
        return multiply(self, *args, **kwargs)

    monkeypatch.setattr(Engine, "multiply", counted)
    monkeypatch.setattr(assemble, "product_rate", lambda flops, gemm: weighed.append(flops) or 1e9)
    run(mpi_tmp_path, "count", balance="product")  # warmup=0, iters=1: one timed product after the balance
    # CPU ranks share one host: the share blocks are the near-equal ones, in launch order.
    m, n, k = shape()
    (r0, r1), (c0, c1) = Layout(m, n, k, usual_grid()).c_block(RANK)
    everywhere(len(calls) == 1 + measured + 1, f"rank {RANK}: {len(calls)} products, expected {measured + 2}")
    everywhere(weighed == [measured * 2.0 * (r1 - r0) * (c1 - c0) * k], f"rank {RANK}: weighed {weighed}")
    counts = COMM.allgather(len(calls))
    everywhere(len(set(counts)) == 1, f"products by rank: {counts}")


# -- unequal rates: the weights really differ -------------------------------------------


@pytest.mark.mpi(min_size=1)
@pytest.mark.parametrize("grid, ranks_per_node", [(None, None), (None, 1), ("Px1", None), ("1xP", 2), ("dims", None)])
def test_unequal_rates_give_blocks_that_follow_them(mpi_tmp_path, monkeypatch, grid, ranks_per_node):
    """Rates 4 : 1 : 3 : 2: the blocks follow the weights, C is right, an explicit grid keeps its shape."""
    fixed_rates(monkeypatch)
    # dims: the usual shape, given explicitly (2 x 2 at 4 ranks): only the ranks' order can balance it.
    explicit = {"Px1": (P, 1), "1xP": (1, P), "dims": tuple(MPI.Compute_dims(P, 2)), None: None}[grid]
    run(mpi_tmp_path, "rates", balance="measured", grid=explicit, ranks_per_node=ranks_per_node)
    path = mpi_tmp_path / "rates.h5"
    m, n, k = shape()

    def check():
        check_product(path)
        record = check_record(path, "measured")
        order, weights, g = record["order"], record["weights"], record["grid"]
        expected = tuple(RATES[i % len(RATES)] / max(RATES[:P]) for i in order)
        assert weights == pytest.approx(expected, rel=1e-12), (weights, expected, order)
        assert [float(r) for r in record["topology"]["gemm_rate"]] == [RATES[i % len(RATES)] for i in order]
        if explicit is not None:
            assert (g.rows, g.cols) == explicit, f"--grid {explicit} became {g}"
        if P > 1:
            # The weights differ, so do the blocks, and they balance better than equal ones would.
            equal = Layout(m, n, k, g)
            assert record["sizes"] != equal.block_sizes(), record["sizes"]
            times = [Layout.extent(equal.c_block(p)[0]) * Layout.extent(equal.c_block(p)[1]) / weights[p]
                     for p in range(P)]
            assert record["predicted"] < load_imbalance(times), (record["predicted"], load_imbalance(times))
            # Each process row's rows and each column's columns within one of their weight's share.
            rows, cols = g.rows, g.cols
            row_w = [sum(weights[r * cols + c] for c in range(cols)) for r in range(rows)]
            col_w = [sum(weights[r * cols + c] for r in range(rows)) for c in range(cols)]
            for got, ws, total in ((record["sizes"]["rows"], row_w, m), (record["sizes"]["cols"], col_w, n)):
                assert all(abs(x - total * w / sum(ws)) < 1 for x, w in zip(got, ws)), (got, ws)

    on_rank0(check)


# -- equal weights: the blocks of before --------------------------------------------------


@pytest.mark.mpi(min_size=1)
@pytest.mark.parametrize("ranks_per_node", [None, 1])
def test_balance_none_keeps_equal_blocks_and_launch_order(mpi_tmp_path, monkeypatch, ranks_per_node):
    """``none`` ignores any rate and keeps the usual grid; ``share`` gives each device a whole weight.

    On CPU ranks (one host) ``share`` weighs them equally: then grid, blocks
    and C, bit for bit, are those of ``none``.  Both runs take cublasGemmEx on a
    GPU: where a shape is planned, the choice between it and cuBLASLt goes by
    timings, which may differ between the runs, and so may C's last bits.
    """
    fixed_rates(monkeypatch)  # would make measured blocks uneven; none must not look
    run(mpi_tmp_path, "none", balance="none", ranks_per_node=ranks_per_node, gemm_library="gemmex")
    run(mpi_tmp_path, "share", balance="share", ranks_per_node=ranks_per_node, gemm_library="gemmex")
    m, n, k = shape()

    def check():
        none, share = (check_record(mpi_tmp_path / f"{mode}.h5", mode) for mode in ("none", "share"))
        check_product(mpi_tmp_path / "none.h5")
        check_product(mpi_tmp_path / "share.h5")
        usual = usual_grid(ranks_per_node)
        assert none["grid"] == usual and none["order"] == tuple(range(P)), none
        assert none["sizes"] == Layout(m, n, k, usual).block_sizes(), none["sizes"]
        assert none["weights"] == (1.0,) * P, none["weights"]
        for record in (none, share):
            assert all(math.isnan(float(r)) for r in record["topology"]["gemm_rate"])
        # share: the ranks of one device share it, their weights sum to 1.
        devices = {(bytes(h), int(g), bytes(u)) if int(g) >= 0 else (bytes(h),)
                   for h, g, u in zip(share["topology"]["host"], share["topology"]["gpu_index"],
                                      share["topology"]["gpu_uuid"])}
        assert math.isclose(sum(share["weights"]), len(devices)), (share["weights"], devices)
        if len(set(share["weights"])) == 1:  # CPU ranks on one host, or one rank per GPU: as none
            assert (share["grid"], share["order"], share["sizes"]) == (none["grid"], none["order"], none["sizes"])
            with h5py.File(mpi_tmp_path / "none.h5", "r") as f, h5py.File(mpi_tmp_path / "share.h5", "r") as g:
                assert np.array_equal(f["result/C"][()], g["result/C"][()])

    on_rank0(check)
