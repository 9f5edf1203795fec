"""What the SUMMA engine promises at one rank on the CPU, one behaviour a test.

Written against the mutants that mutation testing of hpcmm/execution/engine.py left alive
(docs/mutation.md): every row of the timeline (its stream, kind and step), no timeline where none
was asked for, the wait for data counted only while the panels were late, a product's timings that
let go of their events once read, an engine left open after an error of its rank alone, and the
re-layout of panels for the GEMM's operand order (timed with the transfer, a one-element C
included, an empty C without one).  Times come from the virtual clock of :mod:`fake_backend`.
"""

from __future__ import annotations

import gc
import weakref

from types import SimpleNamespace

import numpy as np
import pytest
from fake_backend import FakeBackend, install
from mpi4py import MPI
from peer_stand_ins import shared_windows
from thread_comm import ThreadComm

from hpcmm.config import RunConfig
from hpcmm.execution.backend import CpuBackend
from hpcmm.execution import engine as engine_module
from hpcmm.errors import HpcmmError
from hpcmm.execution.engine import DeferredTimes, Engine, copy_in
from hpcmm.execution.topology import Topology
from hpcmm.geometry.layout import Grid, Layout, padded
from hpcmm.planning.assemble import engine_for
from hpcmm.planning.choices import summa_choices


def _engine(m, n, k, *, panel=2, prefetch=1, order="auto", timeline=True, seed=3):
    """An engine at one rank, its blocks loaded with random numbers; returns ``(topo, engine, A·B)``."""
    topo = Topology.create(MPI.COMM_SELF, RunConfig(m=1, n=1, k=1, device="cpu"))
    config = RunConfig(panel=panel, prefetch=prefetch, gemm_order=order, timeline=timeline)
    try:
        engine = engine_for(topo, CpuBackend(), Layout(m, n, k, Grid(1, 1)), config, False)
    except Exception:
        topo.close()
        raise
    rng = np.random.default_rng(seed)
    a, b = rng.random((m, k)) * 2 - 1, rng.random((k, n)) * 2 - 1
    engine.load(a, b)
    return topo, engine, a @ b


@pytest.fixture
def made():
    """Build engines with :func:`_engine`; every one is closed after the test."""
    built = []

    def make(*args, **kwargs):
        topo, engine, product = _engine(*args, **kwargs)
        built.append((topo, engine))
        return engine, product

    yield make
    for topo, engine in built:
        engine.close()
        topo.close()


def test_the_timeline_names_each_bars_stream_kind_and_step(made, monkeypatch):
    """Per step: A's transfer and B's on the communication stream (1), kinds A (1) and B (2), then the GEMM
    on the compute stream (0), kind gemm (0).  A 0.5 s, B 0.25 s, GEMM 1 s, prefetch 1 (as test_timing)."""
    engine, product = made(12, 7, 8)
    install(monkeypatch, engine, FakeBackend(lambda width: 1.0), a_seconds=0.5, b_seconds=0.25)
    t = engine.multiply()
    expected = []
    for s in range(4):
        a_start = 0.0 if s == 0 else 0.75 + (s - 1)  # fetched as GEMM s - 1 is queued
        expected += [(1, 1, s, a_start, a_start + 0.5), (1, 2, s, a_start + 0.5, a_start + 0.75),
                     (0, 0, s, 0.75 + s, 1.75 + s)]
    np.testing.assert_array_equal(t.timeline, np.array(expected, dtype=np.float64))
    assert t.timeline.dtype == np.float64
    np.testing.assert_allclose(engine.C, product, rtol=1e-13)


def test_no_timeline_unless_asked_for(made, monkeypatch):
    engine, product = made(12, 7, 8, timeline=False)
    install(monkeypatch, engine, FakeBackend(lambda width: 1.0), a_seconds=0.5, b_seconds=0.25)
    t = engine.multiply()
    assert t.timeline is None
    np.testing.assert_array_equal(t.steps[:, 0], [1.0] * 4)  # the steps are still there
    assert t.seconds == 4.75


def test_panels_that_arrived_early_are_no_wait_for_data(made, monkeypatch):
    """prefetch 2, 1.5 s of host work before each fetch, A's panels 0.25 s on the communication stream, GEMM 1 s.

    The host fetches panels 0 and 1 (at 1.5 and 3.0; A 0 there at 1.75, A 1 at 3.25), launches GEMM 0 at 3.0
    (3–4), fetches 2 (host 4.5, A 2 at 4.75), launches GEMM 1 at 4.5 (4.5–5.5), fetches 3 (host 6.0, A 3 at 6.25),
    launches GEMM 2 at 6.0 and GEMM 3 at 7.0.  Step 0 waited 1.75 s for A 0, then 1.25 s for the host; after it
    every panel was there before the previous GEMM ended: the gaps (0.5 s, 0.5 s, 0) are the host's alone.
    """
    engine, product = made(12, 7, 8, prefetch=2)
    install(monkeypatch, engine, FakeBackend(lambda width: 1.0), a_seconds=0.25, host_seconds=1.5)
    t = engine.multiply()
    assert t.seconds == 8.0
    np.testing.assert_array_equal(t.steps[:, 0], [1.0] * 4)
    np.testing.assert_array_equal(t.steps[:, 2], [1.75, 0.0, 0.0, 0.0])
    np.testing.assert_array_equal(t.host, [1.25, 0.5, 0.5, 0.0])
    np.testing.assert_allclose(engine.C, product, rtol=1e-13)


def test_read_timings_let_go_of_what_they_were_read_from():
    """``DeferredTimes`` reads its figures once; after that it keeps no reference to their source (the events)."""

    class Details:
        calls = 0

        def __call__(self):
            Details.calls += 1
            return np.ones((2, 3)), None, np.zeros(2)

    details = Details()
    alive = weakref.ref(details)
    times = DeferredTimes(2.5, 1.0, details)
    del details
    np.testing.assert_array_equal(times.steps, np.ones((2, 3)))
    gc.collect()
    assert alive() is None
    assert times.timeline is None and Details.calls == 1
    np.testing.assert_array_equal(times.host, np.zeros(2))
    assert (times.seconds, times.start) == (2.5, 1.0)


def test_an_error_of_this_rank_alone_leaves_the_engine_open(made):
    """Its peers would wait in a collective the tear-down needs: only the caller may close it."""
    engine, _ = made(12, 7, 8)
    with pytest.raises(RuntimeError, match="this rank alone"), engine:
        raise RuntimeError("this rank alone")
    assert not engine.closed and engine.C is not None
    with engine:
        pass
    assert engine.closed and engine.C is None


@pytest.mark.parametrize("shape", [(1, 1, 4), (3, 5, 4)], ids=["one_element", "three_by_five"])
def test_a_relaid_panel_is_part_of_its_transfer(made, monkeypatch, shape):
    """The GEMM takes A row-major (CC): each of A's panels, arrived in 0.5 s, is re-laid out (0.25 s) on the
    communication stream before its GEMM, a one-element C too; prefetch 0, GEMM 1 s, two steps.

    Step 0: A 0–0.5, re-layout to 0.75, GEMM 0.75–1.75; step 1: A 1.75–2.25, re-layout to 2.5, GEMM 2.5–3.5."""
    engine, product = made(*shape, prefetch=0, order="CC")
    install(monkeypatch, engine, FakeBackend(lambda width: 1.0, relayout_seconds=0.25), a_seconds=0.5)
    t = engine.multiply()
    assert t.seconds == 3.5
    np.testing.assert_array_equal(t.steps[:, 1], [0.75, 0.75])
    np.testing.assert_array_equal(t.steps[:, 2], [0.75, 0.75])
    a_bars = t.timeline[t.timeline[:, 1] == 1]
    np.testing.assert_array_equal(a_bars[:, 3:5], [[0.0, 0.75], [1.75, 2.5]])
    np.testing.assert_allclose(engine.C, product, rtol=1e-13)


@pytest.mark.parametrize("shape", [(6, 0, 4), (0, 6, 4)], ids=["no_columns", "no_rows"])
@pytest.mark.parametrize("order", ["CC", "FF", "CF"])
def test_an_empty_c_runs_in_any_operand_order(made, shape, order):
    """No GEMM reads anything, so no panel is re-laid out: the product is the empty C, in every order."""
    engine, product = made(*shape, prefetch=1, order=order)
    t = engine.multiply()
    assert np.asarray(engine.C).shape == product.shape
    assert t.steps.shape == (2, 3)


def test_a_relay_slot_is_free_only_once_the_gemm_that_read_it_is_done(made, monkeypatch):
    """prefetch 0, A's panels through MPI (the host moves them) 0.5 s after a 0.25 s wait for the relay slot,
    GEMM 1 s: the slot of step s is the one GEMM s - 1 read, so the host waits for that GEMM before the 0.25 s
    and the transfer; its bar starts after the wait.  As test_timing's case for B, for A."""
    engine, product = made(12, 7, 8, prefetch=0)
    install(monkeypatch, engine, FakeBackend(lambda width: 1.0), a_seconds=0.5, mpi_wait=0.25)
    t = engine.multiply()
    assert t.seconds == 7.0
    np.testing.assert_array_equal(t.steps[:, 1], [0.5] * 4)
    np.testing.assert_array_equal(t.steps[:, 2], [0.75] * 4)
    np.testing.assert_array_equal(t.host, [0.0] * 4)
    a_bars = t.timeline[t.timeline[:, 1] == 1]
    np.testing.assert_array_equal(a_bars[:, 3:5], [[0.25, 0.75], [2.0, 2.5], [3.75, 4.25], [5.5, 6.0]])
    np.testing.assert_allclose(engine.C, product, rtol=1e-13)


# -- a block's copy onto a device, in pieces --------------------------------------------------------


class Device(CpuBackend):
    """A device that records what the host hands it: each piece's shape, type and memory order."""

    on_gpu = True

    def __init__(self):
        super().__init__()
        self.pieces = []
        self.xp = SimpleNamespace(asarray=self._asarray)

    def _asarray(self, array):
        f, c = array.flags.f_contiguous, array.flags.c_contiguous
        order = "either" if f and c else "F" if f else "C" if c else "neither"  # one line is both
        self.pieces.append((array.shape, array.dtype, order))
        return np.array(array)


@pytest.mark.parametrize("axis", [1, 0], ids=["columns", "rows"])
def test_a_block_reaches_the_device_in_pieces_of_whole_lines_in_its_type(monkeypatch, axis):
    """Pieces of at most ``LOAD_PIECE_BYTES`` (here 100 bytes: 3 lines of 7 float32, or of 8 rows for a column),
    whole columns of a column-major block or whole rows of a row-major one, each converted to the block's
    type and order before it goes, the last piece what is left."""
    monkeypatch.setattr(engine_module, "LOAD_PIECE_BYTES", 100)
    host = np.random.default_rng(5).random((8, 7) if axis == 1 else (7, 8))
    target = np.full(host.shape, np.nan, dtype=np.float32, order="F" if axis == 1 else "C")
    device = Device()
    copy_in(device, target, host, np.dtype(np.float32), axis)
    np.testing.assert_array_equal(target, host.astype(np.float32))
    order = "F" if axis == 1 else "C"
    line = (8, 3) if axis == 1 else (3, 8)
    last = (8, 1) if axis == 1 else (1, 8)
    assert device.pieces == [(line, np.float32, order)] * 2 + [(last, np.float32, "either")]


def test_a_line_wider_than_a_piece_goes_alone_and_an_empty_block_not_at_all(monkeypatch):
    monkeypatch.setattr(engine_module, "LOAD_PIECE_BYTES", 16)
    host = np.random.default_rng(6).random((5, 3))
    target = np.empty((5, 3), order="F")
    device = Device()
    copy_in(device, target, host, np.dtype(np.float64), axis=1)
    np.testing.assert_array_equal(target, host)
    assert device.pieces == [((5, 1), np.float64, "either")] * 3
    copy_in(device, np.empty((0, 3)), np.empty((0, 3)), np.dtype(np.float64), axis=1)
    assert len(device.pieces) == 3


def test_on_a_cpu_a_block_is_copied_whole(monkeypatch):
    monkeypatch.setattr(engine_module, "LOAD_PIECE_BYTES", 16)
    host = np.random.default_rng(7).random((5, 4))
    target = np.empty((5, 4), dtype=np.float32)
    backend = CpuBackend()
    backend.xp = SimpleNamespace(asarray=lambda array: pytest.fail("a CPU copies the block whole"))
    copy_in(backend, target, host, np.dtype(np.float32), axis=0)
    np.testing.assert_array_equal(target, host.astype(np.float32))


def test_the_engine_loads_a_by_columns_and_b_by_rows_in_the_runs_type(monkeypatch):
    """float32 blocks from float64 host arrays, pieces of 256 bytes: A (column-major, 37 rows) goes by whole
    columns, B (row-major, 29 columns) by whole rows, each piece already float32."""
    monkeypatch.setattr(engine_module, "LOAD_PIECE_BYTES", 256)
    topo = Topology.create(MPI.COMM_SELF, RunConfig(m=1, n=1, k=1, device="cpu"))
    engine = engine_for(topo, CpuBackend(), Layout(37, 29, 5, Grid(1, 1)), RunConfig(panel=2, dtype="float32"), False)
    try:
        device = engine.backend = Device()
        rng = np.random.default_rng(8)
        a, b = rng.random((37, 5)), rng.random((5, 29))
        engine.load(a, b)
        np.testing.assert_array_equal(engine.A, a.astype(np.float32))
        np.testing.assert_array_equal(engine.B, b.astype(np.float32))
        a_pieces = [((37, 1), np.float32, "either")] * 5  # 148 bytes a column: one a piece
        b_pieces = [((2, 29), np.float32, "C"), ((2, 29), np.float32, "C"), ((1, 29), np.float32, "either")]
        assert device.pieces == a_pieces + b_pieces
    finally:
        engine.backend = CpuBackend()
        engine.close()
        topo.close()


# -- several ranks -----------------------------------------------------------------------------------


class World(ThreadComm):
    def allreduce(self, value, op=MPI.SUM):
        values = self._exchange(value)
        return min(values) if op == MPI.MIN else max(values) if op == MPI.MAX else sum(values)


def test_the_bytes_of_a_product_are_counted_by_source_and_path(monkeypatch):
    """Four ranks on one node (a 2 × 2 grid of threads, node memory in shared windows): each rank's product
    counts, per other rank, every byte of the panels it read from it (a panel travels with its padding, as
    its block is stored), the same in a second product."""
    shared_windows(monkeypatch)
    m, n, k = 30, 21, 13
    layout = Layout(m, n, k, Grid(2, 2))
    rng = np.random.default_rng(9)
    a, b = rng.random((m, k)) * 2 - 1, rng.random((k, n)) * 2 - 1
    world = World(4)

    def body(rank):
        row, col = layout.grid.coords(rank)
        topo = SimpleNamespace(comm=world, node_comm=world.Split(0, rank), row_comm=world.Split(row, col),
                               col_comm=world.Split(col, row), vnode=0, vnode_count=1, rank=rank, size=4)
        engine = engine_for(topo, CpuBackend(), layout, RunConfig(panel=3, prefetch=1), False)
        with engine:
            (ar, ac), (br, bc), (cr, cc) = layout.a_block(rank), layout.b_block(rank), layout.c_block(rank)
            engine.load(a[slice(*ar), slice(*ac)], b[slice(*br), slice(*bc)])
            counted = []
            for _ in range(2):
                engine.multiply()
                np.testing.assert_allclose(engine.C, (a @ b)[slice(*cr), slice(*cc)], rtol=1e-12, atol=1e-12)
                counted.append(dict(engine.bytes_by_pair))
        return counted

    outcomes = world.run(body)
    assert all(how == "returned" for how, _ in outcomes), outcomes
    for rank, (_, counted) in enumerate(outcomes):
        row, col = layout.grid.coords(rank)
        m_loc, n_loc = layout.local_shapes(rank)["C"]
        a_peer, b_peer = layout.grid.rank(row, 1 - col), layout.grid.rank(1 - row, col)
        expected = {(a_peer, rank, "shm"): layout.local_shapes(a_peer)["A"][1] * padded(m_loc, 8) * 8,
                    (b_peer, rank, "shm"): layout.local_shapes(b_peer)["B"][0] * padded(n_loc, 8) * 8}
        assert counted == [expected, expected], rank


# -- C's storage --------------------------------------------------------------------------------------


def _summa(m, n, k, config):
    topo = Topology.create(MPI.COMM_SELF, RunConfig(m=1, n=1, k=1, device="cpu"))
    layout = Layout(m, n, k, Grid(1, 1))
    return topo, layout, summa_choices(topo, CpuBackend(), layout, config)


def test_c_goes_where_the_caller_keeps_it():
    """A caller's storage of ``(m, ld)`` in the run's type (the 2.5D reduction's partial block) holds the
    product: the engine neither allocates C nor poisons the caller's padding."""
    config = RunConfig(panel=3, prefetch=1)
    topo, layout, choices = _summa(13, 21, 8, config)
    storage = np.full((13, padded(21, 8)), 7.0)
    rng = np.random.default_rng(10)
    a, b = rng.random((13, 8)), rng.random((8, 21))
    try:
        with Engine(topo, CpuBackend(), layout, choices, config, False, c_storage=storage) as engine:
            engine.load(a, b)
            engine.multiply()
            np.testing.assert_allclose(storage[:, :21], a @ b, rtol=1e-13)
            assert (storage[:, 21:] == 7.0).all()
    finally:
        topo.close()


@pytest.mark.parametrize("shape, dtype", [((13, 20), np.float64), ((12, 21), np.float64), ((13, 21), np.float32)],
                         ids=["narrow", "short", "float32"])
def test_c_storage_of_another_shape_or_type_is_refused(shape, dtype):
    config = RunConfig(panel=3, prefetch=1)
    topo, layout, choices = _summa(13, 21, 8, config)
    assert padded(21, 8) == 21
    storage = np.zeros(shape, dtype=dtype)
    try:
        with pytest.raises(HpcmmError) as caught:
            Engine(topo, CpuBackend(), layout, choices, config, False, c_storage=storage)
        assert str(caught.value) == (f"ValueError: C storage of shape {shape} {np.dtype(dtype)}: the engine needs "
                                     "(13, 21) float64")
    finally:
        topo.close()


def test_an_empty_block_is_of_the_runs_type(made):
    """No rows: A's block holds nothing, yet it is float32 like the run (a caller reads its type)."""
    topo = Topology.create(MPI.COMM_SELF, RunConfig(m=1, n=1, k=1, device="cpu"))
    engine = engine_for(topo, CpuBackend(), Layout(0, 6, 4, Grid(1, 1)), RunConfig(panel=2, dtype="float32"), False)
    try:
        assert (engine.A.shape, engine.A.dtype) == ((0, 4), np.float32)
        assert (engine.C.shape, engine.C.dtype) == ((0, 6), np.float32)
    finally:
        engine.close()
        topo.close()


class _NoRoomForC(CpuBackend):
    """A rank whose device has no room left for its C block (a ``(rows, ld)`` allocation)."""

    def empty(self, shape, dtype, order="C"):
        if len(shape) == 2:
            raise MemoryError("out of memory for C")
        return super().empty(shape, dtype, order)


def test_a_rank_without_room_for_c_fails_every_rank_and_frees_what_was_built(monkeypatch):
    """Two ranks of a 1 × 2 grid (threads, node memory in shared windows); rank 1 cannot allocate C: both raise
    the one agreed error, and the channels' shared windows are freed on both."""
    windows = shared_windows(monkeypatch)
    layout = Layout(16, 20, 12, Grid(1, 2))
    world = World(2)

    def body(rank):
        topo = SimpleNamespace(comm=world, node_comm=world.Split(0, rank), row_comm=world.Split(0, rank),
                               col_comm=world.Split(rank, 0), vnode=0, vnode_count=1, rank=rank, size=2)
        backend = _NoRoomForC() if rank == 1 else CpuBackend()
        engine_for(topo, backend, layout, RunConfig(panel=3, prefetch=1), False)

    outcomes = world.run(body)
    assert [how for how, _ in outcomes] == ["raised", "raised"], outcomes
    errors = [error for _, error in outcomes]
    assert all(isinstance(error, HpcmmError) and error.agreed for error in errors), errors
    # One message on both (its rank is the process's in the job: the threads share one).
    assert str(errors[0]) == str(errors[1]) and str(errors[0]).startswith("MemoryError: out of memory for C (raised by")
    assert windows and all(window.freed for window in windows)


def test_a_channel_that_fails_to_build_fails_the_engine_and_closes_the_one_built(monkeypatch):
    """B's channel cannot be built: the engine raises the agreed error (not its own tear-down's) and A's channel,
    already built, is closed."""
    built, real = [], engine_module.PanelChannel

    def a_only(*args, **kwargs):
        if built:
            raise MemoryError("no room for B's panels")
        built.append(real(*args, **kwargs))
        return built[-1]

    monkeypatch.setattr(engine_module, "PanelChannel", a_only)
    topo = Topology.create(MPI.COMM_SELF, RunConfig(m=1, n=1, k=1, device="cpu"))
    try:
        with pytest.raises(HpcmmError, match="no room for B's panels") as caught:
            engine_for(topo, CpuBackend(), Layout(12, 7, 8, Grid(1, 1)), RunConfig(panel=2), False)
    finally:
        topo.close()
    assert caught.value.agreed
    assert len(built) == 1 and built[0].closed
