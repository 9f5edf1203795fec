"""The GEMM's operand orders: the table and its rule, the override, the backend's GEMM in every order,
and the engine's re-layout of panels (products, scratch memory, timings), at one rank on the CPU.

The same products at 1–4 ranks, through every transfer path: ``tests/mpi/test_run_mpi.py``
(``test_every_gemm_order``); on a GPU: ``tests/test_gpu.py``.
"""

from __future__ import annotations

import doctest

import numpy as np
import pytest
from fake_backend import FakeBackend, install
from mpi4py import MPI

from hpcmm.planning import gemm_orders
from hpcmm.execution.backend import CpuBackend, orders
from hpcmm.config import DTYPES, ENVIRONMENT, RunConfig, settings_from_environment
from hpcmm.dtypes import BFLOAT16
from hpcmm.planning.assemble import engine_for
from hpcmm.planning.choices import memory_needed
from hpcmm.errors import InputError
from hpcmm.planning.gemm_orders import MEASURED, ORDER_BY_TYPE, ORDERS, STORED, choose, gemm_order, label, relaid
from hpcmm.geometry.layout import Grid, Layout, padded
from hpcmm.execution.topology import Topology


def test_module_doctests():
    result = doctest.testmod(gemm_orders)
    assert result.attempted >= 6 and result.failed == 0


# -- the table ----------------------------------------------------------------------------


def test_every_type_has_an_order():
    assert set(ORDER_BY_TYPE) == {*DTYPES, "tf32"}
    assert all(order in ORDERS for order in ORDER_BY_TYPE.values())
    for dtype in DTYPES:
        assert gemm_order(dtype) == ORDER_BY_TYPE[dtype]
        assert gemm_order(dtype, on_gpu=False) == STORED  # numpy takes any order: nothing to gain
    assert gemm_order("float32", tf32=True) == ORDER_BY_TYPE["tf32"] == "CC"


def test_table_follows_its_rule_on_the_measurements():
    """Measured types: the rule's choice; the others (complex): as stored."""
    for kind, order in ORDER_BY_TYPE.items():
        assert order == (choose(MEASURED[kind]) if kind in MEASURED else STORED), kind
    # What the rule found: only tf32 gains enough from another order to pay for re-laying panels out.
    assert {k: ORDER_BY_TYPE[k] for k in MEASURED} == {"float64": "FC", "float32": "FC", "tf32": "CC",
                                                        "float16": "FC", "bfloat16": "FC"}


def test_measured_rates_are_the_recorded_ones():
    """MEASURED is the one-GPU table of benchmarks/results/2026-11-30/gemm-operand-orders.json (the module's
    docstring points there), and the rule gives each measured type the order that table records."""
    import json
    from pathlib import Path

    data = json.loads((Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "2026-11-30"
                       / "gemm-operand-orders.json").read_text())
    table = next(t for t in data["tables"] if t["columns"][0] == "type")
    recorded: dict[str, dict[int, dict[str, float]]] = {}
    for row in table["rows"]:
        for size, cell in zip((16384, 32768), row[1:3]):
            if cell.strip() != "–":
                rates = [float(v.strip().strip("*")) for v in cell.split(" / ")]
                recorded.setdefault(row[0], {})[size] = dict(zip(("CC", "CF", "FC", "FF"), rates))
    assert recorded == MEASURED
    assert "benchmarks/results/2026-11-30/gemm-operand-orders.json" in gemm_orders.__doc__
    assert {k: choose(v) for k, v in MEASURED.items()} == {k: ORDER_BY_TYPE[k] for k in MEASURED}


def test_rule_prefers_fewer_relayouts_then_the_smaller_loss():
    assert choose({1: {"CC": 100.0, "CF": 100.0, "FC": 100.0, "FF": 100.0}}) == "FC"
    assert choose({1: {"CC": 100.0, "CF": 50.0, "FC": 50.0, "FF": 99.5}}) == "CC"
    # Best at one size, more than 1 % behind at the other, and no order good at both: as stored.
    assert choose({1: {"CC": 100.0, "CF": 90.0, "FC": 90.0, "FF": 90.0},
                   2: {"CC": 90.0, "CF": 100.0, "FC": 90.0, "FF": 90.0}}) == STORED


def test_labels_and_relayouts():
    assert [label(o) for o in ORDERS] == ["A:F B:C", "A:C B:C", "A:C B:F", "A:F B:F"]
    assert [relaid(o) for o in ORDERS] == [(False, False), (True, False), (True, True), (False, True)]


# -- the override ---------------------------------------------------------------------------


@pytest.mark.parametrize("text, value", [("FC", "FC"), ("cf", "CF"), (" Cc ", "CC"), ("ff", "FF"),
                                         ("auto", "auto"), ("AUTO", "auto")])
def test_override_from_the_environment(text, value):
    assert "HPCMM_GEMM_ORDER" in ENVIRONMENT
    assert settings_from_environment({"HPCMM_GEMM_ORDER": text}) == {"gemm_order": value}
    assert gemm_order("float64", override=value) == (value if value != "auto" else "FC")
    assert gemm_order("bfloat16", on_gpu=False, override=value) == (value if value != "auto" else STORED)


@pytest.mark.parametrize("text", ["", "C", "CFC", "XY", "rc", "A:C B:F", "F C"])
def test_bad_override_is_one_line_naming_the_variable(text):
    with pytest.raises(InputError) as info:
        settings_from_environment({"HPCMM_GEMM_ORDER": text})
    message = str(info.value)
    assert message.startswith(f"HPCMM_GEMM_ORDER={text!r}: expected auto or")
    assert "FC, CC, CF, FF" in message and "\n" not in message


def test_run_config_refuses_an_unknown_order():
    with pytest.raises(InputError, match="HPCMM_GEMM_ORDER='cf': expected auto or one of FC, CC, CF, FF"):
        RunConfig(gemm_order="cf")  # the library takes the normalised spelling only
    assert RunConfig().gemm_order == "auto" and RunConfig(gemm_order="CF").gemm_order == "CF"


# -- the backend's GEMM and re-layout on the CPU ------------------------------------------------


def _operands(dtype, m, n, w, order, seed=5):
    rng = np.random.default_rng(seed)
    a = (rng.random((m, w)) * 2 - 1).astype(dtype)
    b = (rng.random((w, n)) * 2 - 1).astype(dtype)
    a = np.asfortranarray(a) if order[0] == "F" else np.ascontiguousarray(a)
    b = np.asfortranarray(b) if order[1] == "F" else np.ascontiguousarray(b)
    return a, b


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("dtype", ["float64", "float32", BFLOAT16])
def test_cpu_gemm_takes_every_order(order, dtype):
    a, b = _operands(dtype, 9, 7, 5, order)
    assert (a.flags.f_contiguous, b.flags.f_contiguous) == (order[0] == "F", order[1] == "F")
    backend = CpuBackend()
    c = np.full((9, 7), np.nan, dtype=dtype)
    backend.gemm(a, b, c, accumulate=False)
    backend.gemm(a, b, c, accumulate=True)
    exact = 2 * (a.astype(np.float64) @ b.astype(np.float64))
    bound = {"float64": 1e-14, "float32": 1e-5, BFLOAT16: 2e-2}[dtype] * 5 * 2
    assert np.max(np.abs(c.astype(np.float64) - exact)) <= bound


def _padded_view(x: np.ndarray, order: str, pad: int = 5, fill=7.0) -> np.ndarray:
    """``x`` copied into a view of a larger block: rows (``C``) or columns (``F``) ``pad`` elements longer."""
    rows, cols = x.shape
    if order == "C":
        storage = np.full((rows, cols + pad), fill, dtype=x.dtype)
        view = storage[:, :cols]
    else:
        storage = np.full((rows + pad, cols), fill, dtype=x.dtype, order="F")
        view = storage[:rows]
    view[...] = x
    return view


def test_orders_reads_leading_dimensions_from_the_strides():
    assert orders(np.empty((6, 16))[:, :5]) == {"C": 16}
    assert orders(np.empty((16, 3), order="F")[:5]) == {"F": 16}
    assert orders(np.empty((4, 3))) == {"C": 3} and orders(np.empty((4, 3), order="F")) == {"F": 4}
    # One row or column: either order, the leading dimension as small as cuBLAS allows.
    assert orders(np.empty((1, 4))) == {"C": 4, "F": 1}
    assert orders(np.empty((16, 3), order="F")[:5, :1]) == {"C": 1, "F": 5}
    assert orders(np.empty((5, 16))[:, :1]) == {"C": 16}
    # Neither order: a step in both axes, rows overlapping, reversed.
    assert orders(np.empty((6, 8))[::2, ::2]) == {}
    assert orders(np.lib.stride_tricks.as_strided(np.empty(8), (3, 4), (16, 8))) == {}
    assert orders(np.empty((4, 3))[::-1]) == {}


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("shape", [(9, 7, 5), (1, 7, 5), (9, 1, 5), (9, 7, 1), (1, 1, 1)])
def test_cpu_gemm_takes_padded_operands(order, shape):
    """Operands and C as views of padded blocks: the product is right and the padding untouched."""
    m, n, w = shape
    a, b = _operands("float64", m, n, w, order)
    a_view, b_view = _padded_view(a, "F" if order[0] == "F" else "C"), _padded_view(b, order[1])
    c = _padded_view(np.full((m, n), np.nan), "C", fill=7.0)
    backend = CpuBackend()
    backend.gemm(a_view, b_view, c, accumulate=False)
    backend.gemm(a_view, b_view, c, accumulate=True)
    np.testing.assert_allclose(c, 2 * (a @ b), rtol=0, atol=1e-13)
    assert (c.base[:, n:] == 7.0).all()


@pytest.mark.parametrize("shape", [(7, 3), (1, 5), (5, 1), (0, 4)])
def test_cpu_relayout_both_ways_with_padding(shape):
    src = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    for source, target in (("C", "F"), ("F", "C")):
        dst = _padded_view(np.zeros(shape, np.float32), target, fill=-1.0)
        CpuBackend().relayout(dst, _padded_view(src, source))
        assert np.array_equal(dst, src)
        assert (dst.base == -1.0).sum() == dst.base.size - src.size


@pytest.mark.parametrize("shape", [(7, 3), (1, 5), (5, 1), (0, 4)])
def test_cpu_relayout_both_ways(shape):
    src = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    for source, target in ((np.ascontiguousarray(src), np.empty(shape, np.float32, order="F")),
                           (np.asfortranarray(src), np.empty(shape, np.float32, order="C"))):
        CpuBackend().relayout(target, source)
        assert np.array_equal(target, src)


# -- the engine ------------------------------------------------------------------------------


def _engine(m, n, k, order, *, panel=3, prefetch=1, dtype="float64", seed=2):
    topo = Topology.create(MPI.COMM_SELF, RunConfig(m=1, n=1, k=1, device="cpu"))
    config = RunConfig(panel=panel, prefetch=prefetch, dtype=dtype, gemm_order=order)
    try:
        engine = engine_for(topo, CpuBackend(), Layout(m, n, k, Grid(1, 1)), config, False)
    except Exception:
        topo.close()
        raise
    rng = np.random.default_rng(seed)
    a, b = rng.random((m, k)) * 2 - 1, rng.random((k, n)) * 2 - 1
    engine.load(a, b)
    return topo, engine, a, b


@pytest.mark.parametrize("prefetch", [0, 1, 2])
@pytest.mark.parametrize("order", ORDERS)
def test_engine_product_in_every_order(order, prefetch, monkeypatch):
    """Uneven shape, panels of 3 (a last narrow one): C (poisoned with NaN first) is A·B, and every
    GEMM got its panels in the orders asked for; 250 rows and 245 columns are stored 256 apart."""
    topo, engine, a, b = _engine(250, 245, 11, order, prefetch=prefetch)
    seen = []
    gemm = CpuBackend.gemm

    lds = set()

    def recording(self, a_panel, b_panel, c, *args, **kwargs):
        # m = 250, n = 245 and panels of 2 or 3: each panel is in one order only.
        (a_order, a_ld), = orders(a_panel).items()
        (b_order, b_ld), = orders(b_panel).items()
        seen.append(a_order + b_order)
        lds.update((a_ld, b_ld, orders(c)["C"]))
        return gemm(self, a_panel, b_panel, c, *args, **kwargs)

    monkeypatch.setattr(CpuBackend, "gemm", recording)
    try:
        assert np.isnan(engine.C).all() and np.isnan(engine.C.base).all()  # the padding poisoned too
        for _ in range(2):  # a second product reuses the scratch slots
            engine.multiply()
            c = np.array(engine.C)
            assert np.isfinite(c).all()
            np.testing.assert_allclose(c, a @ b, rtol=0, atol=1e-13)
        assert seen == [order] * 2 * len(engine.plan)
        # Blocks padded to 128 bytes (256 float64); a re-layout scratch has lines of the step's
        # width, 3 or 2, too thin to pad (layout.padded).
        assert lds == {256} | ({2, 3} if order != STORED else set())
        assert engine.gemm_order == order and engine.gemm_order_label == label(order)
        used = [(x is not None, y is not None) for x, y in engine.scratch]
        assert used == [relaid(order)] * (prefetch + 1)
    finally:
        engine.close()
        topo.close()


@pytest.mark.parametrize("order", ORDERS)
def test_memory_figure_grows_by_the_scratch_exactly_when_a_relayout_is_needed(order):
    m, n, k, panel, prefetch = 13, 8, 11, 3, 2
    topo, engine, _, _ = _engine(m, n, k, order, panel=panel, prefetch=prefetch)
    try:
        ring = prefetch + 1
        plain = memory_needed(engine.layout, 0, 8, panel, engine.slots_per_operand())
        relayout_a, relayout_b = relaid(order)
        extra = ring * padded(panel, 8) * (m * relayout_a + n * relayout_b) * 8
        assert engine.needed_bytes() == plain + extra
        assert engine.device_bytes == engine.needed_bytes()  # the figure the memory check used
        held = sum(x.nbytes for pair in engine.scratch for x in pair if x is not None)
        assert held == extra
        assert (extra > 0) == (order != STORED)
    finally:
        engine.close()
        topo.close()


@pytest.mark.parametrize("dtype, m, n, ld", [("float64", 250, 245, 256), ("float16", 1010, 1001, 1024),
                                            ("float64", 13, 8, None)])
def test_memory_figure_counts_the_padding_exactly(dtype, m, n, ld):
    """A's columns and B's and C's rows take a multiple of 128 bytes (256 float64, 1024 float16 here);
    a thin block (13 × 8) is stored as it is."""
    k, panel, prefetch = 11, 3, 1
    topo, engine, a, b = _engine(m, n, k, "FC", panel=panel, prefetch=prefetch, dtype=dtype)
    try:
        item = np.dtype(dtype).itemsize
        ld_a, ld_b = (ld, ld) if ld else (m, n)
        assert (engine.ld_a, engine.ld_b, engine.ld_c) == (ld_a, ld_b, ld_b)
        ring = engine.slots_per_operand()
        # One rank: it receives no panel, so it keeps no ring (its own panels are used where they lie).
        expected = (ld_a * k + k * ld_b + m * ld_b) * item
        assert memory_needed(engine.layout, 0, item, panel, ring) == engine.needed_bytes() == expected
        assert engine.row.slots == [] and engine.col.slots == []
        # What the engine holds: the padded blocks, C's padded storage.
        assert engine.row.block.nbytes == ld_a * k * item and engine.col.block.nbytes == k * ld_b * item
        assert (engine.C.base if engine.C.base is not None else engine.C).nbytes == m * ld_b * item
        # The logical views keep their shapes.
        assert engine.A.shape == (m, k) and engine.B.shape == (k, n) and engine.C.shape == (m, n)
        np.testing.assert_array_equal(np.asarray(engine.A), a.astype(dtype))
        np.testing.assert_array_equal(np.asarray(engine.B), b.astype(dtype))
    finally:
        engine.close()
        topo.close()


def test_poison_shows_a_block_the_gemm_never_wrote(monkeypatch):
    """A GEMM that writes nothing leaves the padded C all NaN: no step's panels land in the padding."""
    topo, engine, _, _ = _engine(13, 8, 11, "CF", panel=3)
    monkeypatch.setattr(CpuBackend, "gemm", lambda *args, **kwargs: None)
    try:
        engine.multiply()
        assert np.isnan(engine.C).all() and np.isnan(engine.C.base).all()
    finally:
        engine.close()
        topo.close()


def test_memory_check_counts_the_scratch(monkeypatch):
    """A device with room for the blocks and rings, not for the scratch: refused only where a re-layout is needed."""
    m, n, k, panel = 13, 8, 11, 3
    base = memory_needed(Layout(m, n, k, Grid(1, 1)), 0, 8, panel, 2)
    monkeypatch.setattr(CpuBackend, "memory_info", lambda self: (base, base))
    topo, engine, _, _ = _engine(m, n, k, "FC", panel=panel)
    engine.close()
    topo.close()
    with pytest.raises(InputError, match="does not fit"):
        _engine(m, n, k, "FF", panel=panel)


def test_relayout_is_communication_stream_work_overlapping_the_previous_gemm(monkeypatch):
    """Own panels only (one rank), A re-laid out (CC) in 0.25 s, GEMMs of 1 s, prefetch 1, four steps.

    Step 0: A's copy 0 → 0.25, GEMM 0.25 → 1.25 (waited 0.25 for data).  Step 1's copy runs
    0.25 → 0.5, under GEMM 0; step 2's waits for GEMM 0 to free its slot (1.25 → 1.5), under
    GEMM 1.  So every step's comm is 0.25, only the first GEMM waits, the product takes 4.25.
    """
    topo, engine, a, b = _engine(12, 7, 8, "CC", panel=2, prefetch=1)
    try:
        fake = FakeBackend(lambda width: 1.0, relayout_seconds=0.25)
        install(monkeypatch, engine, fake)
        times = engine.multiply()
        np.testing.assert_allclose(np.array(engine.C), a @ b, rtol=0, atol=1e-13)
        assert times.steps[:, 0].tolist() == [1.0] * 4
        assert times.steps[:, 1].tolist() == [0.25] * 4
        assert times.steps[:, 2].tolist() == [0.25, 0.0, 0.0, 0.0]
        assert times.seconds == 4.25
        # The timeline's A bars are the copies, on the communication stream.
        a_bars = [(start, end) for stream, kind, _, start, end in times.timeline if kind == 1]
        assert a_bars == [(0.0, 0.25), (0.25, 0.5), (1.25, 1.5), (2.25, 2.5)]
    finally:
        engine.close()
        topo.close()
