"""What a 2.5D layer engine promises at one rank, one behaviour a test.

Written against the mutants that mutation testing of hpcmm/execution/layered.py left alive
(docs/mutation.md): one layer (``--algo 2.5d:1``) computes C in the run's own type, a product's
times are whole (every step's GEMM and host seconds, the reduction inside the product's window),
its ``/topology`` facts, its step order and C's store count, closing releases the engine, the
reduction and the communicators (and may be repeated), and a failure while it is built is raised
as it was after what was built is released.  What only several layers can show (the layers' and
fibers' communicators, the bytes between ranks) is left to the MPI suite (tests/mpi/test_twofive_mpi.py).
"""

from __future__ import annotations

from time import perf_counter

import numpy as np
import pytest
from mpi4py import MPI

from hpcmm.config import RunConfig
from hpcmm.errors import OutputError
from hpcmm.execution import layered
from hpcmm.execution.backend import CpuBackend
from hpcmm.execution.layered import LayeredEngine
from hpcmm.execution.topology import Topology
from hpcmm.planning.algorithms.layers import Layers
from hpcmm.planning.choices import layered_choices

SHAPE = (24, 20, 18)


@pytest.fixture
def one_layer():
    """A one-rank, one-layer engine of float32 with panels of 4 (5 steps), and its topology."""
    config = RunConfig(m=SHAPE[0], n=SHAPE[1], k=SHAPE[2], dtype="float32", device="cpu", algo="2.5d:1", panel=4)
    topo = Topology.create(MPI.COMM_SELF, config)
    backend = CpuBackend()
    layers = Layers.build([[0]], 1)
    grid, layout, choices = layered_choices(topo, backend, config, SHAPE, layers)
    try:
        yield topo, backend, config, layers, grid, layout, choices
    finally:
        topo.close()


def test_one_layer_computes_c_in_the_runs_type(one_layer):
    rng = np.random.default_rng(20261206)
    a, b = rng.standard_normal((24, 18)), rng.standard_normal((18, 20))
    with LayeredEngine(*one_layer, False) as engine:
        engine.load(a.astype(np.float32), b.astype(np.float32))
        engine.multiply()
        assert engine.C.dtype == np.float32 and engine.C.shape == (24, 20)
        np.testing.assert_allclose(engine.C, a.astype(np.float32).astype(np.float64) @ b.astype(np.float32),
                                   rtol=0, atol=1e-5)
        assert engine.dtype == np.dtype(np.float32)


def test_a_products_times_are_whole(one_layer):
    rng = np.random.default_rng(7)
    with LayeredEngine(*one_layer, False) as engine:
        engine.load(rng.standard_normal((24, 18)), rng.standard_normal((18, 20)))
        before = perf_counter()
        times = engine.multiply()
        after = perf_counter()
    assert before <= times.start and 0 < times.seconds <= after - before
    assert times.steps.shape == (5, 3) and np.isfinite(times.steps).all() and (times.steps >= 0).all()
    assert times.steps[:, 0].sum() > 0  # the steps ran GEMMs
    assert times.host.shape == (5,) and np.isfinite(times.host).all() and (times.host >= 0).all()
    assert times.host.sum() > 0  # the host's own seconds between the GEMMs
    assert 0 < times.reduce <= times.seconds  # the reduction is inside the product's window


def test_the_records_of_one_layer(one_layer):
    *_, choices = one_layer
    with LayeredEngine(*one_layer, False) as engine:
        assert engine.rank_facts() == {"layer": 0, "layer_rank": 0, "grid_row": 0, "grid_col": 0}
        assert (engine.steps, engine.c_stores) == (5, 5)  # one layer: no partial block added
        assert engine.step_order == choices.step_order and engine.step_order in ("own-first", "common")
        assert (engine.panel, engine.prefetch) == (4, choices.prefetch)


def test_closing_releases_everything_and_may_be_repeated(one_layer):
    engine = LayeredEngine(*one_layer, False)
    inner, reduction, fiber, layer_topo = engine.engine, engine.reduction, engine.fiber, engine.layer_topo
    layer_comm = layer_topo.comm
    assert not (engine.closed or inner.closed or reduction.closed)
    engine.close()
    assert engine.closed and inner.closed and reduction.closed
    assert fiber == MPI.COMM_NULL and layer_comm == MPI.COMM_NULL and layer_topo.comm is None
    engine.close()
    assert (engine.engine, engine.reduction, engine.fiber, engine.layer_topo) == (None, None, None, None)


def test_leaving_with_an_error_raised_everywhere_closes(one_layer):
    with pytest.raises(OutputError, match="^disk full$"):
        with LayeredEngine(*one_layer, False) as engine:
            error = OutputError("disk full")
            error.agreed = True  # as hpcmm.errors.agree raises it on every rank
            raise error
    assert engine.closed and engine.engine is None


def test_an_error_of_this_rank_alone_leaves_the_tear_down_to_the_jobs_end(one_layer):
    """A collective close after an error the other ranks never saw would wait for them forever."""
    with pytest.raises(KeyError):
        with LayeredEngine(*one_layer, False) as engine:
            raise KeyError("only here")
    assert not engine.closed and engine.engine is not None
    engine.close()


def test_a_failure_building_the_engine_releases_the_reduction(one_layer, monkeypatch):
    made = []

    class Reduction(layered.FiberReduction):
        def __init__(self, fiber, *args):
            super().__init__(fiber, *args)
            made.append((self, fiber))

    def failing_engine(*args, **kwargs):
        raise OutputError("no memory for the panels")

    monkeypatch.setattr(layered, "FiberReduction", Reduction)
    monkeypatch.setattr(layered, "Engine", failing_engine)
    with pytest.raises(OutputError, match="^no memory for the panels$"):
        LayeredEngine(*one_layer, False)
    [(reduction, fiber)] = made
    assert reduction.closed and fiber == MPI.COMM_NULL


def test_a_failure_building_the_reduction_frees_the_fiber(one_layer, monkeypatch):
    fibers = []

    def failing_reduction(fiber, *args):
        fibers.append(fiber)
        raise OutputError("no memory for the partial block")

    monkeypatch.setattr(layered, "FiberReduction", failing_reduction)
    with pytest.raises(OutputError, match="^no memory for the partial block$"):
        LayeredEngine(*one_layer, False)
    assert len(fibers) == 1 and fibers[0] == MPI.COMM_NULL
