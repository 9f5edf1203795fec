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

from hpcmm.algorithms import Step, auto_panel, summa_plan
from hpcmm.layout import Grid, Layout, block_range

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


def expected_steps(layout: Layout, panel: int) -> int:
    """Greedy count: each piece between two block boundaries of A or B splits into ceil(len/panel)."""
    k = layout.k
    cuts = {0, k}
    cuts |= {block_range(k, layout.grid.cols, c)[0] for c in range(layout.grid.cols)}
    cuts |= {block_range(k, layout.grid.rows, r)[0] for r in range(layout.grid.rows)}
    cuts = sorted(c for c in cuts if c <= k)
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
@pytest.mark.parametrize("k, panel", [(24, 8), (24, 5), (1000, 256), (1001, 64), (7, 16), (3, 2)])
def test_ramped_plan(grid, k, panel):
    """With ``ramp`` the first panels start at panel/8 and double; the plan stays valid."""
    layout = Layout(9, 7, k, Grid(*grid))
    steps = summa_plan(layout, panel, ramp=True)
    check_plan(layout, panel, steps)
    start = max(1, panel // 8)
    assert steps[0].width <= start
    for i, s in enumerate(steps):
        assert s.width <= min(panel, start * 2**i), f"step {i} wider than the ramp allows: {s}"
    # The ramp only adds steps, never removes any.
    assert len(steps) >= len(summa_plan(layout, panel))


def test_ramp_widths_double():
    steps = summa_plan(Layout(4, 4, 100, Grid(1, 1)), 32, ramp=True)
    assert [s.width for s in steps] == [4, 8, 16, 32, 32, 8]


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
    """Between 1 and k, no wider than the target unless a block is smaller, whole blocks in equal pieces."""
    for itemsize in (2, 4, 8, 16):
        for k in (1, 2, 3, 17, 255, 256, 257, 1000, 4097, 20000, 32768, 65536):
            layout = Layout(64, 64, k, Grid(*grid))
            panel = auto_panel(layout, itemsize, on_gpu)
            case = f"k={k} itemsize={itemsize}: panel {panel}"
            if grid == (1, 1):
                assert panel == k, f"{case}: one rank moves nothing, one GEMM of full depth"
                continue
            smallest = min(k // grid[1], k // grid[0]) or k
            if not on_gpu:
                target = 512 if itemsize <= 2 else 256
            else:
                target = 4096 if itemsize <= 2 or smallest >= 16384 else 2048
            assert 1 <= panel <= k, case
            assert panel <= target, case
            if smallest <= target:
                assert panel == smallest, case
            else:
                # The smallest block splits into pieces of (nearly) equal width: no sliver step.
                pieces = math.ceil(smallest / panel)
                assert panel * pieces >= smallest > panel * (pieces - 1), case
                assert panel * pieces - smallest < pieces, f"{case}: pieces differ by more than one column"
            check_plan(layout, panel, summa_plan(layout, panel))


# The panel sweep of docs/benchmarks.md (2 x H200, 2 ranks, grid 2x1, float64, 2026-11-29), TFLOP/s by
# --panel; the rule must pick the fastest width, or one within 0.1 % of it.
PANEL_SWEEP = {16384: {1024: 99.67, 2048: 102.01, 4096: 102.06},
               32768: {1024: 100.31, 2048: 105.44, 4096: 109.46}}


@pytest.mark.parametrize("n", sorted(PANEL_SWEEP))
def test_auto_panel_takes_the_measured_best(n):
    """At the measured cases the default is the fastest measured width (within 0.1 %)."""
    rates = PANEL_SWEEP[n]
    panel = auto_panel(Layout(n, n, n, Grid(2, 1)), 8, on_gpu=True)
    assert panel in rates, f"{n}: panel {panel} was not measured"
    assert rates[panel] >= max(rates.values()) * 0.999, f"{n}: panel {panel} at {rates[panel]}, best {rates}"


@pytest.mark.parametrize("n,grid,itemsize,want", [
    (32768, (2, 1), 8, 4096),   # measured: 109.46 at 4096 against 105.44 at 2048
    (16384, (2, 1), 8, 2048),   # measured: equal within 0.05 %; the narrower keeps more steps to overlap
    (32768, (1, 2), 8, 4096),   # the same blocks with the grid turned
    (32768, (2, 1), 4, 4096),   # float32 / tf32: same rule, blocks of 16384
    (32768, (4, 2), 8, 2048),   # 8 ranks: B's k blocks of 8192, too shallow for four 4096-wide panels
    (16384, (2, 1), 2, 4096),   # 16-bit types keep 4096 (the check run's float16 16384 ran at 4096)
    (8192, (2, 1), 2, 4096),
    (4096, (2, 1), 8, 2048),    # the block (2048) itself
    (32768, (2, 1), 16, 4096),  # complex128: same rule as every type wider than 16 bits
])
def test_auto_panel_rule_at_cases(n, grid, itemsize, want):
    assert auto_panel(Layout(n, n, n, Grid(*grid)), itemsize, on_gpu=True) == want


def test_auto_panel_takes_the_target_for_weighted_blocks():
    """Blocks of different depth (ranks sharing GPUs) take the target width, not an even split of the
    smallest block: 5 ranks on 2 GPUs, float64 16384, ran 3-4 % faster at 2048 than at 1365."""
    weights = (1 / 3, 1 / 2, 1 / 3, 1 / 2, 1 / 3)
    layout = Layout(16384, 16384, 16384, Grid(5, 1), weights)
    assert min(layout.extent(layout.b_k(r)) for r in range(5)) == 2730
    assert auto_panel(layout, 8, on_gpu=True) == 2048
    steps = summa_plan(layout, 2048)
    assert steps[0].k0 == 0 and steps[-1].k1 == 16384 and max(s.width for s in steps) == 2048
    assert all(a.k1 == b.k0 for a, b in zip(steps, steps[1:]))
    # equal weights keep the even split (the block's pieces differ by at most a column)
    assert auto_panel(Layout(16384, 16384, 16384, Grid(6, 1), (1.0,) * 6), 8, on_gpu=True) == 1365


def test_auto_panel_threshold_is_four_wide_panels():
    """The wide panel starts exactly where the smallest k block holds four 4096-wide panels."""
    below = Layout(64, 64, 2 * (16384 - 1), Grid(2, 1))
    at = Layout(64, 64, 2 * 16384, Grid(2, 1))
    assert auto_panel(below, 8, on_gpu=True) <= 2048
    assert auto_panel(at, 8, on_gpu=True) == 4096
    # On a CPU the depth stays the BLAS's, whatever the block.
    assert auto_panel(at, 8, on_gpu=False) == 256


def test_auto_panel_weighted_takes_the_smallest_block():
    """With weights the smallest block decides: one shallow block keeps the narrow panel for all."""
    layout = Layout(64, 64, 40000, Grid(2, 1), weights=(1.0, 0.25))   # B's k blocks 32000 and 8000
    assert min(layout.extent(layout.b_k(r)) for r in range(2)) < 16384
    assert auto_panel(layout, 8, on_gpu=True) <= 2048


def test_summa_module_doctests():
    from hpcmm.algorithms import summa as summa_module

    result = doctest.testmod(summa_module)
    assert result.attempted >= 3 and result.failed == 0


def test_auto_panel_gpu_is_deeper_than_cpu():
    layout = Layout(8192, 8192, 8192, Grid(2, 2))
    assert auto_panel(layout, 8, on_gpu=True) > auto_panel(layout, 8, on_gpu=False)
    assert auto_panel(layout, 2, on_gpu=True) >= auto_panel(layout, 8, on_gpu=True)
    # Whole 4096-wide blocks split into equal panels: no sliver steps.
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
        assert panel <= 4096
    check_layout_plan(layout, panel, summa_plan(layout, panel))
