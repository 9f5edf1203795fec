"""The engines run by the choices the planner made (hpcmm/planning/choices.py) and decide nothing themselves.

An engine built from hand-made :class:`~hpcmm.planning.choices.EngineChoices` takes their panel, prefetch,
operand orders, step order and steps as given, and multiplies correctly by them; the planner's
choices for a run are the ones the run's plan and engine report.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest
from mpi4py import MPI

from hpcmm.planning.algorithms import panel_candidates, rank_plan
from hpcmm.planning.assemble import engine_for
from hpcmm.execution.backend import CpuBackend
from hpcmm.planning.choices import EngineChoices, memory_needed, summa_choices
from hpcmm.config import RunConfig
from hpcmm.execution.engine import Engine
from hpcmm.errors import InputError
from hpcmm.geometry.layout import Grid, Layout
from hpcmm.execution.topology import Topology


def _topo(config: RunConfig) -> Topology:
    return Topology.create(MPI.COMM_SELF, config)


@pytest.mark.parametrize("panel, prefetch, order", [(3, 0, "FC"), (5, 2, "CF"), (7, 1, "CC")])
def test_an_engine_runs_by_the_choices_it_is_given(panel, prefetch, order):
    """Another panel, prefetch and operand order than the rules would pick: the engine takes them."""
    m, n, k = 11, 9, 19
    config = RunConfig(dtype="float64")
    layout = Layout(m, n, k, Grid(1, 1))
    steps = tuple(rank_plan(layout, 0, panel, prefetch, own_order=False))
    choices = EngineChoices(panel=panel, panel_auto=False, prefetch=prefetch, gemm_order=order,
                            step_order="common", rank_steps=steps, steps=len(steps),
                            needed_bytes=memory_needed(layout, 0, 8, panel, prefetch + 1), device_bytes=0,
                            slots=prefetch + 1)
    rng = np.random.default_rng(panel)
    a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    topo = _topo(config)
    try:
        engine = Engine(topo, CpuBackend(), layout, choices, config, False)
        try:
            assert (engine.panel, engine.prefetch, engine.gemm_order, engine.step_order) == (panel, prefetch, order,
                                                                                              "common")
            assert engine.plan == list(steps) and engine.steps == len(steps) == -(-k // panel)
            assert engine.needed_bytes() == choices.needed_bytes
            engine.load(a, b)
            times = engine.multiply()
            assert times.steps.shape[0] == len(steps)
            np.testing.assert_allclose(np.asarray(engine.C), a @ b, rtol=1e-12, atol=1e-12)
        finally:
            engine.close()
    finally:
        topo.close()


def test_the_planner_chooses_what_the_engine_then_reports():
    """``engine_for`` = the planner's choices + an engine: the two agree on every field."""
    config = RunConfig(dtype="float32", prefetch=2)
    layout = Layout(40, 24, 600, Grid(1, 1))
    topo = _topo(config)
    try:
        choices = summa_choices(topo, CpuBackend(), layout, config)
        assert choices.prefetch == 2 and choices.panel_auto and choices.panel <= layout.k
        assert choices.steps == len(choices.rank_steps) and sum(step.width for step in choices.rank_steps) == layout.k
        engine = engine_for(topo, CpuBackend(), layout, config)
        try:
            # Free memory is a fact read at each call, not a choice: it moves with the machine's load.
            chosen, reported = dataclasses.asdict(choices), dataclasses.asdict(engine.choices)
            assert chosen.pop("free_bytes") > 0 and reported.pop("free_bytes") > 0
            assert reported == chosen
        finally:
            engine.close()
    finally:
        topo.close()


def test_the_planner_refuses_a_panel_wider_than_k_before_any_buffer(monkeypatch):
    """``--panel`` wider than k is the planner's refusal; no engine (no buffer) is made."""
    built = []
    monkeypatch.setattr(Engine, "__init__", lambda self, *args, **kwargs: built.append(args))
    config = RunConfig(panel=64)
    topo = _topo(config)
    try:
        with pytest.raises(InputError, match="panel=64: wider than k=10"):
            summa_choices(topo, CpuBackend(), Layout(8, 8, 10, Grid(1, 1)), config)
        with pytest.raises(InputError, match="panel=64"):
            engine_for(topo, CpuBackend(), Layout(8, 8, 10, Grid(1, 1)), config)
        assert built == []
    finally:
        topo.close()


def test_the_planner_refuses_what_does_not_fit_before_any_buffer(monkeypatch):
    """A problem past the host's free memory: refused by the planner, with its figures."""
    backend = CpuBackend()
    monkeypatch.setattr(backend, "memory_info", lambda: (1 << 20, 1 << 30))
    config = RunConfig(panel=16)
    topo = _topo(config)
    try:
        with pytest.raises(InputError, match=r"does not fit: 1 rank\(s\) per host need .* GiB of host memory, "
                                             r"0\.00 GiB available"):
            summa_choices(topo, backend, Layout(512, 512, 512, Grid(1, 1)), config)
    finally:
        topo.close()


@pytest.mark.parametrize("shape, free_mib", [((512, 512, 512), 1), ((3000, 200, 70000), 40), ((97, 83, 71), 0)])
def test_a_refusal_names_the_largest_problem_of_its_shape_that_fits(monkeypatch, shape, free_mib):
    """The largest problem the refusal names fits by the same count; one 1 % larger does not."""
    backend = CpuBackend()
    free = free_mib << 20
    monkeypatch.setattr(backend, "memory_info", lambda: (free, 1 << 34))
    config = RunConfig(panel=16)
    layout = Layout(*shape, Grid(1, 1))
    topo = _topo(config)
    try:
        with pytest.raises(InputError) as refused:
            summa_choices(topo, backend, layout, config)
    finally:
        topo.close()
    message = str(refused.value)
    assert "\n" not in message
    if free_mib == 0:
        assert message.endswith("; nothing of this shape fits"), message
        return
    found = re.search(r"the largest of this shape that fits: m=(\d+), n=(\d+), k=(\d+)$", message)
    assert found, message
    m, n, k = (int(v) for v in found.groups())
    scale = max(m / shape[0], n / shape[1], k / shape[2])  # the shape kept: each extent within one element
    assert all(abs(v - extent * scale) <= 1 for v, extent in zip((m, n, k), shape)), (m, n, k)

    def need(m, n, k):
        return memory_needed(Layout(m, n, k, Grid(1, 1)), 0, 8, min(16, k), 1)

    assert need(m, n, k) <= free < need(*(int(v * 1.01) + 1 for v in (m, n, k)))
    topo = _topo(config)
    try:  # and the planner accepts it
        assert summa_choices(topo, backend, Layout(m, n, k, Grid(1, 1)), config).device_bytes <= free
    finally:
        topo.close()


def test_info_names_the_largest_square_problem_the_memory_check_accepts():
    """``info``'s largest N fits one device by the memory check's count, and N + 1 % does not."""
    from hpcmm.cli.info import memory_by_device

    free = 3 << 30
    rows = [{"rank": rank, "host": "h", "gpu_index": -1, "gpu_uuid": "", "free_bytes": free, "total_bytes": 4 << 30}
            for rank in range(2)]
    (label, members, largest), = memory_by_device(rows, "2x1", nodes=1)
    assert label == "host h" and len(members) == 2
    for kind, itemsize in (("float64", 8), ("float32", 4)):
        n = largest[kind]

        def need(size):  # the narrowest panel the planner falls back to; CPU: prefetch 1, two slots
            layout = Layout(size, size, size, Grid(2, 1))
            panel = panel_candidates([layout], itemsize, on_gpu=False)[-1]
            return sum(memory_needed(layout, rank, itemsize, panel, 2) for rank in range(2))

        assert need(n) <= free < need(int(n * 1.01)), kind


@pytest.mark.parametrize("kind", ["float64", "float32", "bfloat16"])
def test_on_a_gpu_info_names_the_largest_square_problem_the_planner_accepts(kind, monkeypatch):
    """One rank on a GPU (a stand-in with 2 GiB free): the planner accepts info's largest N with its own
    defaults (prefetch, panel, operand order, what a rank takes while it runs) and refuses N + 1 %."""
    from fake_backend import FakeBackend

    from hpcmm.cli.info import largest_square
    from hpcmm.dtypes import numpy_dtype

    free = 2 << 30
    backend = FakeBackend()
    monkeypatch.setattr(backend, "memory_info", lambda: (free, 4 << 30))
    monkeypatch.setattr(backend, "device_id", 0, raising=False)
    n = largest_square(kind, numpy_dtype(kind).itemsize, "1x1", [[{"rank": 0, "free_bytes": free}]], on_gpu=True)
    config = RunConfig(dtype=kind)
    topo = _topo(config)
    try:
        assert summa_choices(topo, backend, Layout(n, n, n, Grid(1, 1)), config).device_bytes <= free
        larger = int(n * 1.01) + 1
        with pytest.raises(InputError, match="does not fit"):
            summa_choices(topo, backend, Layout(larger, larger, larger, Grid(1, 1)), config)
    finally:
        topo.close()


def test_the_largest_problems_script_gives_the_rule_at_one_gpu(tmp_path):
    """``benchmarks/largest_problems.py``: at one rank on one GPU, float64 N²·24 bytes fill the free memory."""
    import json
    import subprocess
    import sys

    from launcher import REPO

    from hpcmm.planning.choices import working_bytes
    from hpcmm.geometry.layout import Grid, Layout

    out = tmp_path / "largest.json"
    subprocess.run([sys.executable, str(REPO / "benchmarks" / "largest_problems.py"), "--free-gib", "10",
                    "--gpus", "1", "2", "--ranks-per-gpu", "1", "--out", str(out)], check=True, capture_output=True)
    rows = json.loads(out.read_text())["rows"]
    one = rows[0]
    size = one["float64"]
    # beside the blocks, what a rank takes while it runs (a load piece, the check's chunks, cuBLAS)
    working = working_bytes(Layout(size, size, size, Grid(1, 1)), 0, 8)
    assert working >= 512 << 20
    assert one["gpus"] == 1 and 24 * size**2 + working <= 10 * 2**30 < 24 * (size + 64) ** 2 + working
    assert one["float64"] < one["float32"] < one["bfloat16"]
    assert rows[1]["float64"] > one["float64"]  # two GPUs hold more


def test_on_a_gpu_the_count_adds_what_a_rank_takes_while_it_runs():
    """A load piece, the verification's chunks and the GEMM libraries: counted on a GPU, not on the host."""
    from hpcmm.planning.choices import GEMM_LIBRARY_BYTES, LOAD_PIECE_BYTES, working_bytes
    from hpcmm.verify import VERIFY_CHUNK_BYTES, VERIFY_COPIES

    layout = Layout(4099, 3001, 2001, Grid(2, 2))
    for rank in range(4):
        host = memory_needed(layout, rank, 8, 256, 2)
        device = memory_needed(layout, rank, 8, 256, 2, on_gpu=True)
        assert device - host == working_bytes(layout, rank, 8) == (
            LOAD_PIECE_BYTES + VERIFY_COPIES * VERIFY_CHUNK_BYTES + GEMM_LIBRARY_BYTES)
    # a line longer than a piece or a chunk: one line at a time, counted as such
    wide = Layout(2, 2, 40_000_000, Grid(1, 1))
    assert working_bytes(wide, 0, 8) == 320_000_000 + VERIFY_COPIES * 640_000_000 + GEMM_LIBRARY_BYTES


class _Node:
    """The node communicator as one rank sees it: its own value first, then those of the others."""

    def __init__(self, others_free):
        self.others_free = others_free  # [(device, free bytes)] the other ranks of the node see

    def allgather(self, mine):
        if len(mine) == 2:  # (device, free bytes)
            return [mine, *self.others_free]
        device_need_rank = mine  # each other rank needs as much
        return [mine, *((device, device_need_rank[1], 1 + i) for i, (device, _) in enumerate(self.others_free))]


def test_the_free_memory_is_the_least_any_rank_of_the_device_sees():
    """A neighbour that measured while another context was being made saw more free than there is."""
    from types import SimpleNamespace

    from hpcmm.planning.choices import check_memory

    backend = SimpleNamespace(on_gpu=True, device_id=0, memory_info=lambda: (100, 200))
    topo = SimpleNamespace(node_comm=_Node([(0, 90), (1, 10)]), comm=None, rank=0)
    # two ranks on device 0 (the one on device 1 does not count there), 45 each of the 90 the other saw
    assert check_memory(topo, backend, 45, "problem") == (90, 90)
    with pytest.raises(InputError, match=r"2 rank\(s\) per device need .* 0\.00 GiB available"):
        check_memory(topo, backend, 46, "problem")
