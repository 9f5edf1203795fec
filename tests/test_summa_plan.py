"""SUMMA plans: steps cover k in order, stay inside one block of A and of B, roots are right.

Plans are plain data, so every grid is checked here without MPI.
"""

from __future__ import annotations

import doctest
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpcmm.planning.algorithms import Step, auto_panel, own_start, panel_candidates, rank_plan, summa_plan
from hpcmm.geometry.layout import Grid, Layout, block_range

GRIDS = [(1, 1), (1, 2), (2, 1), (2, 2), (3, 1), (1, 3), (2, 3), (3, 2), (4, 4), (1, 4), (4, 1)]


def check_plan(layout: Layout, panel: int, steps: list[Step]) -> None:
    """Every property a plan must have; raises AssertionError naming the bad step."""
    grid, k = layout.grid, layout.k
    assert steps, "a plan has at least one step"
    assert steps[0].k0 == 0 and steps[-1].k1 == k
    for i, s in enumerate(steps):
        assert s.index == i
        assert 0 < s.width <= panel, s
        assert s.width == s.k1 - s.k0
        if i:
            assert s.k0 == steps[i - 1].k1, f"gap or overlap before {s}"
        a_lo, a_hi = block_range(k, grid.cols, s.a_root)
        b_lo, b_hi = block_range(k, grid.rows, s.b_root)
        assert 0 <= s.a_root < grid.cols and 0 <= s.b_root < grid.rows, s
        assert a_lo <= s.k0 < s.k1 <= a_hi, f"{s} straddles A's k blocks ({a_lo}, {a_hi})"
        assert b_lo <= s.k0 < s.k1 <= b_hi, f"{s} straddles B's k blocks ({b_lo}, {b_hi})"
        assert s.a_offset == s.k0 - a_lo and s.b_offset == s.k0 - b_lo, s


def block_edges(layout: Layout) -> list[int]:
    """0, k and every start of A's k blocks (over the columns) and of B's (over the rows), sorted."""
    k = layout.k
    cuts = {0, k}
    cuts |= {block_range(k, layout.grid.cols, c)[0] for c in range(layout.grid.cols)}
    cuts |= {block_range(k, layout.grid.rows, r)[0] for r in range(layout.grid.rows)}
    return sorted(c for c in cuts if c <= k)


def expected_steps(layout: Layout, panel: int) -> int:
    """Greedy count: each piece between two block boundaries of A or B splits into ceil(len/panel)."""
    cuts = block_edges(layout)
    return sum(math.ceil((b - a) / panel) for a, b in zip(cuts, cuts[1:]) if b > a)


@pytest.mark.parametrize("grid", GRIDS)
@pytest.mark.parametrize("k, panel", [(24, 4), (24, 6), (24, 5), (24, 7), (23, 1), (23, 23), (31, 100),
                                      (3, 2), (2, 1), (1, 1), (1000, 128), (1001, 64)])
def test_plan_properties(grid, k, panel):
    """Panels that do and do not divide k, wider than k, width 1, fewer k than ranks."""
    layout = Layout(13, 11, k, Grid(*grid))
    steps = summa_plan(layout, panel)
    check_plan(layout, panel, steps)
    assert len(steps) == expected_steps(layout, panel)


@given(rows=st.integers(1, 6), cols=st.integers(1, 6), k=st.integers(1, 300), panel=st.integers(1, 80))
def test_plan_properties_random(rows, cols, k, panel):
    layout = Layout(5, 7, k, Grid(rows, cols))
    steps = summa_plan(layout, panel)
    check_plan(layout, panel, steps)
    assert len(steps) == expected_steps(layout, panel)


@pytest.mark.parametrize("grid", GRIDS)
@pytest.mark.parametrize("k, panel", [(24, 8), (24, 5), (1000, 256), (1001, 64), (7, 16), (3, 2), (16384, 8192)])
def test_ramped_plan(grid, k, panel):
    """With ``ramp`` the first panels start near panel/8 and at most double, step by step, through
    the first k range both first owners hold; the plan stays valid."""
    layout = Layout(9, 7, k, Grid(*grid))
    steps = summa_plan(layout, panel, ramp=True)
    check_plan(layout, panel, steps)
    start = max(1, panel // 8)
    assert steps[0].width < 2 * start
    first_block = min(layout.extent(layout.a_k(0)), layout.extent(layout.b_k(0)))
    ramped = [s for s in steps if s.k1 <= first_block]
    assert ramped[-1].k1 == first_block, "the ramp ends where the first block does"
    for before, step in zip(ramped, ramped[1:]):
        assert step.width <= 2 * before.width, f"{step} more than twice as wide as {before}"
    # The ramp only adds steps, never removes any.
    assert len(steps) >= len(summa_plan(layout, panel))


def test_ramp_widths_double():
    steps = summa_plan(Layout(4, 4, 100, Grid(1, 1)), 32, ramp=True)
    assert [s.width for s in steps] == [4, 8, 8, 16, 32, 32]   # the rest (8) among the ramp, not last


@pytest.mark.parametrize("k, panel, widths", [
    (16384, 8192, [1024, 1024, 2048, 4096, 8192]),              # blocks of 8192: no 1024 sliver before 8192
    (32768, 8192, [1024, 1024, 2048, 4096, 8192, 8192, 8192]),  # blocks of 16384
    (8192, 4096, [512, 512, 1024, 2048, 4096]),
])
def test_ramp_fills_the_first_block_on_two_ranks(k, panel, widths):
    """2 ranks (grid 2x1, B's k blocks k/2): a whole panel follows a step at least half as wide."""
    assert [s.width for s in summa_plan(Layout(64, 64, k, Grid(2, 1)), panel, ramp=True)] == widths


@given(depth=st.integers(1, 70000), panel=st.integers(1, 9000))
def test_ramp_widths_cover_the_block(depth, panel):
    from hpcmm.planning.algorithms.summa import _ramp_widths

    widths = _ramp_widths(depth, panel)
    assert sum(widths) == depth and all(1 <= w <= panel for w in widths)
    assert widths[0] < 2 * max(1, panel // 8)
    assert all(b <= 2 * a for a, b in zip(widths, widths[1:])), widths


def test_documented_example():
    """k = 10 on a 2 × 3 grid with panel 4 (the module docstring)."""
    steps = summa_plan(Layout(5, 5, 10, Grid(2, 3)), 4)
    assert [(s.k0, s.k1) for s in steps] == [(0, 4), (4, 5), (5, 7), (7, 10)]
    assert [s.a_root for s in steps] == [0, 1, 1, 2]
    assert [s.b_root for s in steps] == [0, 0, 1, 1]
    assert [s.a_offset for s in steps] == [0, 0, 1, 0]
    assert [s.b_offset for s in steps] == [0, 4, 0, 2]


def test_one_rank_panel_divides_k():
    steps = summa_plan(Layout(3, 3, 12, Grid(1, 1)), 4)
    assert [(s.k0, s.k1, s.a_offset, s.b_offset) for s in steps] == [(0, 4, 0, 0), (4, 8, 4, 4), (8, 12, 8, 8)]


@pytest.mark.parametrize("panel", [0, -3])
def test_plan_rejects_non_positive_panel(panel):
    with pytest.raises(ValueError, match=f"panel width {panel}"):
        summa_plan(Layout(4, 4, 4, Grid(1, 1)), panel)


# -- auto_panel -----------------------------------------------------------------


@pytest.mark.parametrize("on_gpu", [False, True])
@pytest.mark.parametrize("grid", GRIDS)
def test_auto_panel_is_sane(on_gpu, grid):
    """Between 1 and k, no wider than the target; the deepest k range between block edges whole where it fits
    the target, else in equal pieces."""
    for itemsize in (2, 4, 8, 16):
        for k in (1, 2, 3, 17, 255, 256, 257, 1000, 4097, 20000, 32768, 65536):
            layout = Layout(64, 64, k, Grid(*grid))
            panel = auto_panel(layout, itemsize, on_gpu)
            case = f"k={k} itemsize={itemsize}: panel {panel}"
            if grid == (1, 1):
                assert panel == k, f"{case}: one rank moves nothing, one GEMM of full depth"
                continue
            # the k ranges between the edges of A's blocks (k split over columns) and B's (over rows)
            edges = block_edges(layout)
            deepest = max(hi - lo for lo, hi in zip(edges, edges[1:]))
            target = (512 if itemsize <= 2 else 256) if not on_gpu else 8192
            assert 1 <= panel <= k, case
            assert panel <= target, case
            if deepest <= target:
                assert panel == deepest, case
            else:
                # The deepest range splits into pieces of (nearly) equal width: no sliver step.
                pieces = math.ceil(deepest / panel)
                assert panel * pieces >= deepest > panel * (pieces - 1), case
                assert panel * pieces - deepest < pieces, f"{case}: pieces differ by more than one column"
            check_plan(layout, panel, summa_plan(layout, panel))


@pytest.mark.parametrize("on_gpu", [False, True])
@pytest.mark.parametrize("grid", [g for g in GRIDS + [(4, 2), (2, 4), (8, 1)] if g != (1, 1) and max(g) % min(g) == 0])
def test_auto_panel_leaves_no_sliver_step(on_gpu, grid):
    """On a grid whose rows divide its columns (or the other way round) every step of the default plan is at
    least half a panel wide, except in a k range the layout's block edges make narrower: blocks one column
    deeper than the others take no step of one column after a whole panel (10007 x 6001 x 6007 on 4 x 2 once
    ran steps of 1501 and 1, each 1-column step a broadcast round of both operands).  (Where they do not
    divide, ranges differ in depth by layout: 2 x 3 cuts k into ranges of a third and a sixth.)"""
    for shared in (False, True):
        for k in (3, 17, 257, 1001, 3001, 3002, 6006, 6007, 20001, 65537):
            layout = Layout(64, 64, k, Grid(*grid))
            _assert_narrow_only_in_narrow_ranges(layout, auto_panel(layout, 8, on_gpu, shared=shared))


# The panel sweeps of docs/performance.md and benchmarks/results/2026-11-30/panel-sweep-float64.json (2 x H200, 2 ranks, grid 2x1), TFLOP/s by --panel; the rule
# must pick the fastest width, or one within 0.1 % of it.  Keys: (n, itemsize, type).
PANEL_SWEEP = {
    (16384, 8, "float64"): {1024: 99.67, 2048: 102.01, 4096: 102.06, 8192: 103.54},
    (32768, 8, "float64"): {1024: 100.31, 2048: 105.44, 4096: 109.46, 8192: 111.96},
    (8192, 8, "float64"): {1024: 106.86, 2048: 109.66, 4096: 110.54},
    (4096, 8, "float64"): {512: 77.25, 1024: 83.13, 2048: 91.27},
    (16384, 4, "tf32"): {2048: 510.56, 4096: 538.98, 8192: 584.97},
    (16384, 2, "float16"): {2048: 1275.24, 4096: 1341.37, 8192: 1342.62},
    (32768, 2, "bfloat16"): {2048: 1252.97, 4096: 1327.50, 8192: 1359.50},
}


@pytest.mark.parametrize("case", sorted(PANEL_SWEEP), ids=str)
def test_auto_panel_takes_the_measured_best(case):
    """At the measured cases the default is the fastest measured width (within 0.1 %)."""
    n, itemsize, _ = case
    rates = PANEL_SWEEP[case]
    panel = auto_panel(Layout(n, n, n, Grid(2, 1)), itemsize, on_gpu=True)
    assert panel in rates, f"{case}: panel {panel} was not measured"
    assert rates[panel] >= max(rates.values()) * 0.999, f"{case}: panel {panel} at {rates[panel]}, best {rates}"


@pytest.mark.parametrize("n,grid,itemsize,want", [
    (32768, (2, 1), 8, 8192),   # blocks of 16384 in two steps (measured: 111.96 against 109.46 at 4096)
    (16384, (2, 1), 8, 8192),   # whole blocks of 8192 (103.54 against 102.06 at 4096)
    (32768, (1, 2), 8, 8192),   # the same blocks with the grid turned
    (16384, (2, 1), 4, 8192),   # tf32 (585.0 against 510.6 at 2048)
    (32768, (4, 2), 8, 8192),   # 8 ranks: B's k blocks of 8192, one step each
    (16384, (4, 2), 8, 4096),   # 8 ranks: B's k blocks of 4096, one step each
    (16384, (2, 1), 2, 8192),   # 16-bit types the same (float16 1342.6 at 8192, 1341.4 at 4096)
    (4096, (2, 1), 8, 2048),    # the block (2048) itself (91.27 against 83.13 at 1024)
    (65536, (2, 1), 16, 8192),  # complex128: blocks of 32768 in four steps
    (30000, (2, 1), 8, 7500),   # blocks of 15000 in two equal steps, no sliver
])
def test_auto_panel_rule_at_cases(n, grid, itemsize, want):
    assert auto_panel(Layout(n, n, n, Grid(*grid)), itemsize, on_gpu=True) == want


def test_auto_panel_takes_the_target_for_weighted_blocks():
    """Blocks of different depth (ranks sharing GPUs) take the weighted target width, not an even split of
    the smallest block: 5 ranks on 2 GPUs, float64 16384, ran 3-4 % faster at 2048 than at 1365."""
    weights = (1 / 3, 1 / 2, 1 / 3, 1 / 2, 1 / 3)
    layout = Layout(16384, 16384, 16384, Grid(5, 1), weights)
    assert min(layout.extent(layout.b_k(r)) for r in range(5)) == 2730
    assert auto_panel(layout, 8, on_gpu=True) == 2048
    steps = summa_plan(layout, 2048)
    assert steps[0].k0 == 0 and steps[-1].k1 == 16384 and max(s.width for s in steps) == 2048
    assert all(a.k1 == b.k0 for a, b in zip(steps, steps[1:]))
    # equal weights keep whole blocks (2730 or 2731 deep: the deepest, so that each is one step)
    assert auto_panel(Layout(16384, 16384, 16384, Grid(6, 1), (1.0,) * 6), 8, on_gpu=True) == 2731


def test_auto_panel_widest_caps_the_target():
    """``widest`` narrows the target, and the blocks still split evenly under it."""
    layout = Layout(16384, 16384, 16384, Grid(2, 1))   # blocks of 8192
    assert [auto_panel(layout, 8, True, widest=w) for w in (None, 8192, 5000, 4096, 1000, 1)] == \
        [8192, 8192, 4096, 4096, 911, 1]   # 8192 in 9 pieces under 1000
    # On a CPU the depth stays the BLAS's, whatever the block.
    assert auto_panel(Layout(64, 64, 2 * 16384, Grid(2, 1)), 8, on_gpu=False) == 256


@pytest.mark.parametrize("on_gpu", [False, True])
@pytest.mark.parametrize("grid", GRIDS)
def test_panel_candidates_narrow_from_the_default(on_gpu, grid):
    """The default first, then strictly narrower widths down to the fallback's end; each a valid plan's width."""
    for k in (1, 300, 4097, 20000, 65536):
        layout = Layout(64, 64, k, Grid(*grid))
        for itemsize in (2, 8):
            widths = panel_candidates([layout], itemsize, on_gpu)
            assert widths[0] == auto_panel(layout, itemsize, on_gpu)
            assert all(a > b for a, b in zip(widths, widths[1:])), widths
            if grid != (1, 1):  # one rank takes the whole k: nothing moves, no ring
                assert widths[-1] <= 256, widths
            for width in widths:
                check_plan(layout, width, summa_plan(layout, width))


def test_panel_candidates_take_the_widest_layer_up_to_the_shallowest_k():
    """2.5D layers share one width: the widest auto_panel gives any of them, no wider than the shallowest k."""
    deep, shallow = Layout(64, 64, 16384, Grid(2, 1)), Layout(64, 64, 6000, Grid(2, 1))
    assert auto_panel(shallow, 8, True) == 3000 and auto_panel(deep, 8, True) == 8192
    assert panel_candidates([deep, shallow], 8, True)[0] == 6000
    for width in panel_candidates([deep, shallow], 8, True):
        for layout in (deep, shallow):
            check_plan(layout, width, summa_plan(layout, width))


@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("k", [6003, 6005, 6006, 6007, 3001, 20003])
@pytest.mark.parametrize("layers, grid", [(2, (2, 2)), (2, (4, 1)), (4, (2, 1)), (4, (1, 2)), (2, (2, 4))])
def test_panel_candidates_leave_no_layer_a_sliver_step(layers, grid, k, shared):
    """The layers of 2.5D (k cut over them as the run cuts it) take one width, and no layer's plan has a step
    narrower than half of it where the layout does not make the range narrower: a layer one column deeper
    than another (k 3003 beside 3002 on 2 x 2) takes 1502-wide steps, not 1501 and then 1."""
    ks = [hi - lo for lo, hi in (block_range(k, layers, layer) for layer in range(layers))]
    layouts = [Layout(64, 64, depth, Grid(*grid)) for depth in ks]
    width = panel_candidates(layouts, 8, True, shared=shared)[0]
    for layout in layouts:
        _assert_narrow_only_in_narrow_ranges(layout, width)


def _assert_narrow_only_in_narrow_ranges(layout, panel):
    """Every step of ``summa_plan(layout, panel)`` at least half as wide as the panel, or as its k range between
    block edges where that range is narrower (a range the layout itself makes narrow)."""
    edges = block_edges(layout)
    for step in summa_plan(layout, panel):
        lo = max(e for e in edges if e <= step.k0)
        hi = min(e for e in edges if e > step.k0)
        assert step.width * 2 >= min(panel, hi - lo), f"k={layout.k} grid={layout.grid}: panel {panel}, {step}"


def test_auto_panel_weighted_takes_the_narrow_target():
    """With weights, blocks deeper than the narrow target take it, whatever the deepest block."""
    layout = Layout(64, 64, 40000, Grid(2, 1), weights=(1.0, 0.25))   # B's k blocks 32000 and 8000
    assert min(layout.extent(layout.b_k(r)) for r in range(2)) < 16384
    assert auto_panel(layout, 8, on_gpu=True) <= 2048


def test_summa_module_doctests():
    from hpcmm.planning.algorithms import summa as summa_module

    result = doctest.testmod(summa_module)
    assert result.attempted >= 3 and result.failed == 0


def test_auto_panel_gpu_is_deeper_than_cpu():
    layout = Layout(8192, 8192, 8192, Grid(2, 2))
    assert auto_panel(layout, 8, on_gpu=True) > auto_panel(layout, 8, on_gpu=False)
    assert auto_panel(layout, 2, on_gpu=True) >= auto_panel(layout, 8, on_gpu=True)
    # Whole 4096-deep blocks in one step each: no sliver steps.
    steps = summa_plan(layout, auto_panel(layout, 8, on_gpu=True))
    assert len({s.width for s in steps}) == 1


# -- weighted layouts -------------------------------------------------------------

WEIGHT = st.floats(min_value=1e-2, max_value=1e2, allow_nan=False, allow_infinity=False)


def check_layout_plan(layout: Layout, panel: int, steps: list[Step]) -> None:
    """:func:`check_plan` against the layout's own k blocks (weighted ones are not near-equal)."""
    grid, k = layout.grid, layout.k
    covered = np.zeros(k, dtype=np.int64)
    assert steps[0].k0 == 0 and steps[-1].k1 == k
    for i, s in enumerate(steps):
        assert s.index == i and 0 < s.width <= panel, s
        if i:
            assert s.k0 == steps[i - 1].k1, f"gap or overlap before {s}"
        assert 0 <= s.a_root < grid.cols and 0 <= s.b_root < grid.rows, s
        a_lo, a_hi = layout.a_k(s.a_root)
        b_lo, b_hi = layout.b_k(s.b_root)
        assert a_lo <= s.k0 < s.k1 <= a_hi, f"{s} straddles A's k blocks ({a_lo}, {a_hi})"
        assert b_lo <= s.k0 < s.k1 <= b_hi, f"{s} straddles B's k blocks ({b_lo}, {b_hi})"
        assert s.a_offset == s.k0 - a_lo and s.b_offset == s.k0 - b_lo, s
        covered[s.k0:s.k1] += 1
    assert (covered == 1).all(), "k not covered exactly once"


def layout_steps_expected(layout: Layout, panel: int) -> int:
    k = layout.k
    cuts = {0, k} | {layout.a_k(c)[0] for c in range(layout.grid.cols)}
    cuts |= {layout.b_k(r)[0] for r in range(layout.grid.rows)}
    cuts = sorted(cuts)
    return sum(math.ceil((b - a) / panel) for a, b in zip(cuts, cuts[1:]) if b > a)


@given(rows=st.integers(1, 5), cols=st.integers(1, 5), k=st.integers(1, 400), panel=st.integers(1, 90),
       ramp=st.booleans(), data=st.data())
def test_plans_over_weighted_layouts_cover_k_once(rows, cols, k, panel, ramp, data):
    """Any weights (tiny ones leave empty k blocks): steps cover k once and stay inside one block of A and B."""
    weights = data.draw(st.lists(WEIGHT, min_size=rows * cols, max_size=rows * cols))
    layout = Layout(7, 5, k, Grid(rows, cols), weights=weights)
    steps = summa_plan(layout, panel, ramp=ramp)
    check_layout_plan(layout, panel, steps)
    if not ramp:
        assert len(steps) == layout_steps_expected(layout, panel)


def test_weighted_plan_example():
    """3 ranks on 2 GPUs (weights ½, 1, ½ on 3 × 1), k = 8: B's k blocks 2, 4, 2; A's one block of 8."""
    layout = Layout(8, 8, 8, Grid(3, 1), weights=(0.5, 1, 0.5))
    steps = summa_plan(layout, 3)
    assert [(s.k0, s.k1, s.b_root, s.b_offset) for s in steps] == [(0, 2, 0, 0), (2, 5, 1, 0), (5, 6, 1, 3),
                                                                   (6, 8, 2, 0)]
    assert all(s.a_root == 0 and s.a_offset == s.k0 for s in steps)


@pytest.mark.parametrize("grid", GRIDS)
@pytest.mark.parametrize("k", [1, 3, 257, 4097, 20000])
def test_auto_panel_equal_weights_unchanged(grid, k):
    """Equal weights give the panel of the unweighted layout."""
    plain = Layout(64, 64, k, Grid(*grid))
    weighted = Layout(64, 64, k, Grid(*grid), weights=[0.3] * (grid[0] * grid[1]))
    for itemsize in (2, 8):
        for on_gpu in (False, True):
            assert auto_panel(weighted, itemsize, on_gpu) == auto_panel(plain, itemsize, on_gpu)


@given(rows=st.integers(1, 4), cols=st.integers(1, 4), k=st.integers(1, 30000), data=st.data())
def test_auto_panel_weighted_gives_a_valid_plan(rows, cols, k, data):
    weights = data.draw(st.lists(WEIGHT, min_size=rows * cols, max_size=rows * cols))
    layout = Layout(64, 64, k, Grid(rows, cols), weights=weights)
    panel = auto_panel(layout, 8, on_gpu=True)
    assert 1 <= panel <= k
    if rows * cols > 1:
        assert panel <= 8192
    check_layout_plan(layout, panel, summa_plan(layout, panel))


# -- the memory fallback (choices.widest_fitting) -----------------------------------------


class _Gather:
    """A communicator's allgather as one rank sees it: its own value first, then the others' (given).

    The others' ``(device, needs)``, ranked 1, 2, ... where the rank gathers ``(device, needs, rank)``;
    where it gathers ``(device, free bytes)`` (the memory check's free memory), each other rank saw
    as much free on its device as this one.
    """

    def __init__(self, others=()):
        self.others = list(others)

    def allgather(self, mine):
        if isinstance(mine, tuple) and len(mine) == 2 and isinstance(mine[1], int):
            return [mine, *((device, mine[1]) for device, _ in self.others)]
        if isinstance(mine, tuple) and len(mine) == 3:
            return [mine, *((device, needs, 1 + i) for i, (device, needs) in enumerate(self.others))]
        return [mine, *self.others]


class _NoCollective:
    def allgather(self, mine):
        raise AssertionError("one width needs no collective")


def _fitting(widths, needs, free, node_others=(), world_others=(), device=0):
    from types import SimpleNamespace

    from hpcmm.planning.choices import widest_fitting

    topo = SimpleNamespace(node_comm=_Gather(node_others), comm=_Gather(world_others), rank=0)
    backend = SimpleNamespace(on_gpu=True, device_id=device, memory_info=lambda: (free, 2 * free))
    return widest_fitting(topo, backend, widths, dict(zip(widths, needs)).__getitem__)


def test_widest_fitting_takes_the_widest_that_fits():
    widths = [8192, 4096, 2048, 1024]
    assert _fitting(widths, [10, 6, 3, 2], free=100) == 8192
    assert _fitting(widths, [10, 6, 3, 2], free=7) == 4096
    assert _fitting(widths, [10, 6, 3, 2], free=3) == 2048
    # none fits: the last, which the memory check then refuses with its figures
    assert _fitting(widths, [10, 6, 3, 2], free=1) == 1024


def test_widest_fitting_counts_the_ranks_of_one_device_together():
    widths = [8192, 4096, 2048]
    # a second rank on this device needs as much: 6 + 6 > 7, 3 + 3 <= 7
    assert _fitting(widths, [10, 6, 3], free=7, node_others=[(0, [10, 6, 3])]) == 2048
    # a rank on the other device does not count here
    assert _fitting(widths, [10, 6, 3], free=7, node_others=[(1, [10, 6, 3])]) == 4096


def test_widest_fitting_gives_every_rank_the_narrowest_any_device_needs():
    """A rank elsewhere that only fits at the third width decides for all (its index is the largest)."""
    assert _fitting([8192, 4096, 2048], [1, 1, 1], free=100, world_others=[2, 0]) == 2048


def test_widest_fitting_with_one_width_is_local():
    from types import SimpleNamespace

    from hpcmm.planning.choices import widest_fitting

    topo = SimpleNamespace(node_comm=_NoCollective(), comm=_NoCollective())
    assert widest_fitting(topo, SimpleNamespace(on_gpu=True), [256], lambda width: 1 << 60) == 256


def test_shared_gpus_take_the_narrow_target():
    """Ranks sharing GPUs aim at 2048 (8 ranks on 2 GPUs under MPS: 2048 ran 2 % faster than 4096),
    splitting blocks evenly under it; without sharing the same layout takes whole 4096-deep blocks."""
    layout = Layout(16384, 16384, 16384, Grid(4, 2))   # B's k blocks 4096, A's 8192
    assert auto_panel(layout, 8, on_gpu=True) == 4096
    assert auto_panel(layout, 8, on_gpu=True, shared=True) == 2048
    assert panel_candidates([layout], 8, True, shared=True)[0] == 2048
    # On a CPU sharing changes nothing.
    assert auto_panel(layout, 8, on_gpu=False, shared=True) == auto_panel(layout, 8, on_gpu=False)


def test_gpus_shared_is_one_answer_for_every_rank():
    """One GPU with two ranks anywhere makes every rank narrow (their plans must agree)."""
    from types import SimpleNamespace

    from hpcmm.planning.choices import gpus_shared

    def ask(node_devices, world_counts, device=0, on_gpu=True):
        topo = SimpleNamespace(node_comm=_Gather(node_devices), comm=_Gather(world_counts))
        return gpus_shared(topo, SimpleNamespace(on_gpu=on_gpu, device_id=device))

    assert ask([1], []) is False                    # two ranks, one per GPU
    assert ask([0], []) is True                     # two ranks on GPU 0
    assert ask([], [2]) is True                     # this rank's GPU alone, another node's shared
    assert ask([0], [], on_gpu=False) is False      # CPUs: no panel narrowing


# -- each rank's own order (own_start) ------------------------------------------------


def check_own_plan(layout: Layout, rank: int, panel: int, ramp: bool) -> list[Step]:
    """The engine's plan in the rank's own order (``rank_plan``; ``ramp``: with a panel in flight, so that
    its ramp rule applies): the same pieces of k once each, from the rank's start around to it."""
    first_k, first_own = own_start(layout, rank)
    steps = rank_plan(layout, rank, panel, prefetch=1 if ramp else 0, own_order=True)
    k = layout.k
    assert steps[0].k0 == first_k
    assert [s.index for s in steps] == list(range(len(steps)))
    wrapped = [s for s in steps if s.k0 < first_k]
    assert steps == [s for s in steps if s.k0 >= first_k] + wrapped, "from the start to k, then from 0"
    covered = sorted((s.k0, s.k1) for s in steps)
    assert covered[0][0] == 0 and covered[-1][1] == k
    assert all(a[1] == b[0] for a, b in zip(covered, covered[1:])), f"k covered with gaps or twice: {covered}"
    for s in steps:
        assert 0 < s.width <= panel, s
        a_lo, a_hi = layout.a_k(s.a_root)
        b_lo, b_hi = layout.b_k(s.b_root)
        assert a_lo <= s.k0 < s.k1 <= a_hi and b_lo <= s.k0 < s.k1 <= b_hi, s
        assert s.a_offset == s.k0 - a_lo and s.b_offset == s.k0 - b_lo, s
    row, col = layout.grid.coords(rank)
    if first_own:
        assert (steps[0].a_root, steps[0].b_root) == (col, row), "the first panels are the rank's own"
    elif layout.extent(layout.a_k(col)) or layout.extent(layout.b_k(row)):
        assert steps[0].a_root == col or steps[0].b_root == row, "one of the first panels is the rank's own"
    return steps


@pytest.mark.parametrize("grid", GRIDS)
@pytest.mark.parametrize("k, panel", [(24, 4), (24, 5), (23, 1), (31, 100), (3, 2), (1001, 64), (16384, 8192)])
@pytest.mark.parametrize("ramp", [False, True])
def test_own_order_plans(grid, k, panel, ramp):
    layout = Layout(13, 11, k, Grid(*grid))
    for rank in range(layout.grid.size):
        check_own_plan(layout, rank, panel, ramp)


@given(rows=st.integers(1, 5), cols=st.integers(1, 5), k=st.integers(1, 300), panel=st.integers(1, 80),
       m=st.integers(1, 40), n=st.integers(1, 40), data=st.data())
def test_own_order_plans_random(rows, cols, k, panel, m, n, data):
    """Weighted blocks too (some empty where k is short): every rank's plan is valid."""
    weights = data.draw(st.none() | st.lists(st.floats(0.1, 1.0), min_size=rows * cols, max_size=rows * cols))
    layout = Layout(m, n, k, Grid(rows, cols), weights=weights)
    for rank in range(rows * cols):
        check_own_plan(layout, rank, panel, ramp=data.draw(st.booleans()))


def test_two_ranks_start_with_their_own_block():
    """2 ranks at 16384 (grid 2x1): each multiplies its own 8192-deep block first, in one whole step,
    without a ramp, while the other block's panel arrives; then that panel."""
    layout = Layout(64, 64, 16384, Grid(2, 1))
    plans = []
    for rank in range(2):
        assert own_start(layout, rank)[1]
        plans.append([(s.k0, s.k1, s.b_root) for s in rank_plan(layout, rank, 8192, prefetch=1, own_order=True)])
    assert plans == [[(0, 8192, 0), (8192, 16384, 1)], [(8192, 16384, 1), (0, 8192, 0)]]


def test_off_diagonal_ranks_start_with_their_larger_own_panel():
    """2x2, m = 100 rows against n = 10 columns: A's panels (50 per k) are the larger, so ranks off
    the diagonal start at their own A block; B's first panel is the one they wait for."""
    layout = Layout(100, 10, 40, Grid(2, 2))
    assert [own_start(layout, r) for r in range(4)] == [(0, True), (20, False), (0, False), (20, True)]
    wide = Layout(10, 100, 40, Grid(2, 2))  # B's panels (50 per k) are the larger
    assert [own_start(wide, r) for r in range(4)] == [(0, True), (0, False), (20, False), (20, True)]


@pytest.mark.parametrize("first_k", [-1, 24, 30])
def test_plan_rejects_a_start_outside_k(first_k):
    with pytest.raises(ValueError, match=f"first_k={first_k}"):
        summa_plan(Layout(4, 4, 24, Grid(2, 1)), 4, first_k=first_k)
