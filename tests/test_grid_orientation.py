"""Which way the default grid faces (:mod:`hpcmm.planning.grid_orientation`), pure, and where the run and the model take it."""

from __future__ import annotations

import doctest

import pytest

from hpcmm.planning import grid_orientation as module
from hpcmm.planning.arrangement import arrangement_for
from hpcmm.planning.balance import Balance, ranks_per_device, weights_for
from hpcmm.planning.grid_orientation import ROW_LEAST_COLUMNS, ROW_MOST_RANKS, TALL_KINDS, facing, oriented
from hpcmm.geometry.layout import Grid
from hpcmm.model.cost import Problem, builtin, compute_dims, predict
from hpcmm.planning.mps import MpsState


def test_module_doctests():
    result = doctest.testmod(module)
    assert result.attempted and not result.failed


@pytest.mark.parametrize("size", [1, 2, 3, 4, 6, 8, 12, 16, 18])
@pytest.mark.parametrize("face", ["wide", "tall", "row"])
def test_oriented_keeps_the_factors_and_turns_them(size, face):
    rows, cols = compute_dims(size)
    grid = oriented(rows, cols, face)
    if face == "row":  # one process row of all the ranks
        assert grid == Grid(1, size)
        return
    assert grid.size == size and {grid.rows, grid.cols} == {rows, cols}
    assert (grid.rows >= grid.cols) if face == "wide" else (grid.rows <= grid.cols)


@pytest.mark.parametrize("dtype,tf32", [("float64", False), ("float32", False), ("float32", True), ("float16", False),
                                        ("bfloat16", False), ("complex128", False), ("tf32", False)])
def test_auto_turns_only_the_measured_kinds_on_gpus_of_one_node(dtype, tf32):
    kind = "tf32" if tf32 else dtype
    assert facing("auto", dtype, tf32) == ("tall" if kind in TALL_KINDS else "wide")
    assert facing("auto", dtype, tf32, on_gpu=False) == "wide"
    assert facing("auto", dtype, tf32, nodes=2) == "wide"
    # ranks sharing GPUs: one process row for the same kinds, on one node only
    assert facing("auto", dtype, tf32, shared=True) == ("row" if kind in TALL_KINDS else "wide")
    assert facing("auto", dtype, tf32, nodes=2, shared=True) == "wide"
    assert facing("auto", dtype, tf32, on_gpu=False, shared=True) == "wide"
    assert facing("auto", dtype, tf32, shared=True, ranks=ROW_MOST_RANKS + 1) == ("tall" if kind in TALL_KINDS else "wide")
    # strips of C narrower than ROW_LEAST_COLUMNS: the tall grid (10007 x 6001 x 3001 at 8 ranks ran 23 % slower in one row)
    for ranks in (2, 3, ROW_MOST_RANKS):
        assert facing("auto", dtype, tf32, shared=True, ranks=ranks, n=ranks * ROW_LEAST_COLUMNS) == \
            ("row" if kind in TALL_KINDS else "wide")
        assert facing("auto", dtype, tf32, shared=True, ranks=ranks, n=ranks * ROW_LEAST_COLUMNS - 1) == \
            ("tall" if kind in TALL_KINDS else "wide")
    for fixed in ("wide", "tall", "row"):
        assert facing(fixed, dtype, tf32, on_gpu=False, nodes=4) == fixed
        assert facing(fixed, dtype, tf32, shared=True) == fixed
    with pytest.raises(ValueError, match="'square'"):
        facing("square", dtype)


def _idle(devices):
    balance = Balance("share", weights_for("share", devices), tuple(devices), ranks_per_device(devices))
    return balance, tuple(MpsState(False, "pipe", "/tmp/p", "not seen") for _ in devices)


@pytest.mark.parametrize("ranks", [2, 3, 4, 5, 6, 8, 12, 16])
def test_the_run_and_the_model_take_the_same_grid(ranks):
    """``arrangement_for`` (the run) and ``predict`` (the model) turn the grid alike, shared GPUs included."""
    shape = (16384, 16384, 16384)
    balance, idle = _idle([r % 2 for r in range(ranks)])
    for dtype in ("float64", "float32"):
        face = facing("auto", dtype, shared=balance.shared, ranks=ranks, n=shape[1])
        run = arrangement_for(balance, idle, shape, None, on_gpu=True, face=face).grid
        model = predict(Problem(*shape, dtype), ranks, builtin("h200x2")).grid
        assert model == f"{run.rows}x{run.cols}", (dtype, ranks)
        if dtype == "float64" and 2 < ranks <= ROW_MOST_RANKS:  # ranks share the 2 GPUs: one process row
            assert run == Grid(1, ranks), run
        elif dtype == "float64" and ranks > ROW_MOST_RANKS:  # past what was measured: the tall grid
            assert run.rows > 1 and run.rows <= run.cols, run
    two = arrangement_for(*_idle([0, 1]), shape, None, on_gpu=True, face=facing("auto", "float64")).grid
    assert two == Grid(1, 2)  # each rank's C block 16384 × 8192: the fast float64 shape
    four = arrangement_for(*_idle([0, 1, 2, 3]), shape, None, on_gpu=True, face=facing("auto", "float64")).grid
    assert four == Grid(2, 2)  # one rank per GPU (4 GPUs): tall, not one row


def test_a_given_grid_is_kept_and_the_model_can_turn():
    balance, idle = _idle([0, 1])
    shape = (64, 64, 64)
    assert arrangement_for(balance, idle, shape, (2, 1), on_gpu=True, face="tall").grid == Grid(2, 1)
    machine = builtin("h200x2")
    assert predict(Problem(*shape), 2, machine, orientation="wide").grid == "2x1"
    assert predict(Problem(*shape), 2, machine, orientation="tall").grid == "1x2"
    assert predict(Problem(*shape), 2, machine, grid=(2, 1), orientation="tall").grid == "2x1"
    # across (virtual) nodes auto keeps the wide grid
    assert predict(Problem(*shape), 4, machine, ranks_per_node=2).grid == "2x2"
    assert predict(Problem(*shape), 8, machine, ranks_per_node=4).grid == "4x2"


def test_info_says_where_a_run_would_turn_the_grid():
    """``hpcmm info`` shows the launch grid, with a note where float64 (or a fixed setting) turns it."""
    from hpcmm.config import RunConfig
    from hpcmm.cli.info import _turned_note

    gpu, cpu = [{"gpu_index": 0}, {"gpu_index": 1}], [{"gpu_index": -1}, {"gpu_index": -1}]
    note = _turned_note(RunConfig(), {"rows": gpu, "grid": "2x1", "nodes": 1})
    assert note == "; float64 runs take 1x2 (HPCMM_GRID_ORIENTATION=auto)"
    assert _turned_note(RunConfig(), {"rows": cpu, "grid": "2x1", "nodes": 1}) == ""
    assert _turned_note(RunConfig(), {"rows": gpu, "grid": "2x1", "nodes": 2}) == ""
    assert _turned_note(RunConfig(grid=(2, 1)), {"rows": gpu, "grid": "2x1", "nodes": 1}) == ""
    both = _turned_note(RunConfig(grid_orientation="tall"), {"rows": cpu, "grid": "4x2", "nodes": 1})
    assert both == "; float64 runs take 2x4, float32 runs take 2x4 (HPCMM_GRID_ORIENTATION=tall)"
    eight = [{"gpu_index": r % 2} for r in range(8)]  # 8 ranks on 2 GPUs: one process row for float64
    note = _turned_note(RunConfig(), {"rows": eight, "grid": "4x2", "nodes": 1, "oversubscribed": {"h": (8, 2)}})
    assert note == "; float64 runs take 1x8 (HPCMM_GRID_ORIENTATION=auto)"


class _FourRanksOfOneGpu:
    """A communicator of one process that answers ``allgather`` as four ranks alike would."""

    def __getattr__(self, name):
        from mpi4py import MPI

        return getattr(MPI.COMM_SELF, name)

    def allgather(self, value):
        return [value] * 4

    def Get_size(self):  # noqa: N802 - mpi4py's name
        return 4


@pytest.mark.parametrize("dtype,grid", [("float64", Grid(1, 4)), ("float32", Grid(2, 2))])
def test_arrange_sees_its_gpus_shared(monkeypatch, dtype, grid):
    """The run's own arrangement (collective) passes the sharing and C's columns on: 4 ranks of 2 GPUs take
    one row in float64 where each strip is 2048 columns wide, and the tall grid where strips would be narrower."""
    import types

    import hpcmm.planning.arrangement as arrangement
    from hpcmm.config import RunConfig

    balance, idle = _idle([0, 1, 0, 1])
    monkeypatch.setattr(arrangement, "gather_balance", lambda *args, **kwargs: balance)
    monkeypatch.setattr(arrangement, "detect", lambda device: idle[0])
    monkeypatch.setattr(arrangement, "device_of", lambda backend, host: (host, "gpu", 0))
    backend = types.SimpleNamespace(on_gpu=True, device_id=0)
    wide_c = (64, 4 * ROW_LEAST_COLUMNS, 64)
    arr = arrangement.arrange(_FourRanksOfOneGpu(), "n1", backend, RunConfig(dtype=dtype), wide_c)
    assert arr.grid == grid
    assert arr.attributes(arr.layout(*wide_c))["grid_face"] == ("row" if dtype == "float64" else "wide")
    narrow_c = (64, 4 * ROW_LEAST_COLUMNS - 1, 64)
    narrow = arrangement.arrange(_FourRanksOfOneGpu(), "n1", backend, RunConfig(dtype=dtype), narrow_c)
    assert narrow.grid == Grid(2, 2)
    assert narrow.attributes(narrow.layout(*narrow_c))["grid_face"] == ("tall" if dtype == "float64" else "wide")
    given = arrangement.arrange(_FourRanksOfOneGpu(), "n1", backend, RunConfig(dtype=dtype, grid=(4, 1)), wide_c)
    assert given.grid == Grid(4, 1) and given.face == "given"
