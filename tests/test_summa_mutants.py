"""What a rank's SUMMA plan promises: its order, its ramp, its panel width, one behaviour a test.

Written against the mutants that mutation testing of hpcmm/planning/algorithms/summa.py left alive
(docs/mutation.md): when :func:`~hpcmm.planning.algorithms.rank_plan` starts a rank at its own blocks and
when it ramps the first panels up, the ramp of a plan that starts inside k, an empty k, the
panel width of weighted blocks two columns apart, and the prefetch a configuration gets.
"""

from __future__ import annotations

import numpy as np
import pytest

from hpcmm.planning.algorithms import auto_panel, own_start, prefetch_of, rank_plan, summa_plan
from hpcmm.config import RunConfig
from hpcmm.geometry.layout import Grid, Layout


def _spans(steps):
    return [(s.k0, s.k1) for s in steps]


def _widths(steps):
    return [s.width for s in steps]


# -- rank_plan: the order ---------------------------------------------------------------------


def test_own_order_starts_every_rank_where_own_start_says():
    rng = np.random.default_rng(11)
    for rows, cols in ((2, 1), (2, 2), (1, 3), (3, 2)):
        m, n, k = (int(x) for x in rng.integers(20, 200, size=3))
        layout = Layout(m, n, k, Grid(rows, cols))
        for rank in range(rows * cols):
            steps = rank_plan(layout, rank, panel=16, prefetch=1, own_order=True)
            assert steps[0].k0 == own_start(layout, rank)[0]
            pieces = sorted(_spans(steps))  # k once, in pieces that tile it
            assert pieces[0][0] == 0 and pieces[-1][1] == k
            assert all(a[1] == b[0] for a, b in zip(pieces, pieces[1:]))


def test_common_order_starts_every_rank_at_zero():
    layout = Layout(64, 64, 16384, Grid(2, 1))
    for rank in range(2):
        for prefetch in (0, 1):
            assert rank_plan(layout, rank, 8192, prefetch, own_order=False)[0].k0 == 0


# -- rank_plan: the ramp ----------------------------------------------------------------------


def test_common_order_ramps_with_prefetch_on_two_ranks():
    layout = Layout(64, 64, 16384, Grid(2, 1))
    for prefetch in (1, 2):
        assert _widths(rank_plan(layout, 1, 8192, prefetch, own_order=False)) == [1024, 1024, 2048, 4096, 8192]


def test_no_prefetch_no_ramp():
    """Nothing overlaps the first transfer without a panel in flight: whole panels from the start."""
    layout = Layout(64, 64, 16384, Grid(2, 1))
    assert _widths(rank_plan(layout, 0, 8192, 0, own_order=False)) == [8192, 8192]
    off_diagonal = Layout(64, 96, 300, Grid(2, 2))
    assert _widths(rank_plan(off_diagonal, 2, 64, 0, own_order=True))[0] == 64


def test_one_rank_never_ramps():
    steps = rank_plan(Layout(4, 4, 1000, Grid(1, 1)), 0, 64, 2, own_order=False)
    assert _widths(steps) == [64] * 15 + [40]


def test_own_first_panels_need_no_ramp():
    """2 ranks at 16384: each starts with its own 8192-deep block in one step."""
    layout = Layout(64, 64, 16384, Grid(2, 1))
    assert _spans(rank_plan(layout, 1, 8192, 1, own_order=True)) == [(8192, 16384), (0, 8192)]
    assert _spans(rank_plan(layout, 0, 8192, 1, own_order=True)) == [(0, 8192), (8192, 16384)]


def test_a_ramp_that_starts_inside_k_fills_the_first_owners_block():
    """Rank 2 of a 2 × 2 grid starts at k = 150 (its A block): the ramp runs up to 300, where
    that block ends, each step at most twice the one before, with no sliver after a whole panel."""
    layout = Layout(64, 96, 300, Grid(2, 2))
    assert own_start(layout, 2) == (150, False)
    steps = rank_plan(layout, 2, 64, 1, own_order=True)
    first = [s for s in steps if s.k0 >= 150]
    assert first[0].k0 == 150 and first[-1].k1 == 300
    widths = _widths(first)
    assert widths[0] < 64 and widths == sorted(widths)
    assert all(b <= 2 * a for a, b in zip(widths, widths[1:])), widths


def test_ramped_plan_of_an_empty_k_is_empty():
    layout = Layout(8, 8, 0, Grid(2, 1))
    assert summa_plan(layout, 4, ramp=True) == []
    assert rank_plan(layout, 1, 4, 1, own_order=False) == []


# -- own_start's tie --------------------------------------------------------------------------


def test_equal_panels_start_at_the_a_block():
    """m = n: A's and B's panels are as long; an off-diagonal rank starts with its A block."""
    layout = Layout(64, 64, 300, Grid(2, 2))
    assert [own_start(layout, r) for r in range(4)] == [(0, True), (150, False), (0, False), (150, True)]


# -- auto_panel -------------------------------------------------------------------------------


@pytest.mark.parametrize("grid", [Grid(1, 2), Grid(2, 1)])
def test_weighted_blocks_two_apart_take_the_shared_target(grid):
    """Weights 1 : 1.0004 over k = 8194 give blocks 4096 and 4098 deep: weighted, so 2048."""
    layout = Layout(64, 64, 8194, grid, weights=(1.0, 1.0004))
    axis = "a_k" if grid.cols == 2 else "b_k"
    assert layout.block_sizes()[axis] == (4096, 4098)
    assert auto_panel(layout, 8, on_gpu=True) == 2048
    assert auto_panel(Layout(64, 64, 8194, grid), 8, on_gpu=True) == 4097  # equal blocks: one step each


def test_an_empty_k_still_gets_a_panel_of_one():
    assert auto_panel(Layout(8, 8, 0, Grid(2, 1)), 8, on_gpu=True) == 1
    assert auto_panel(Layout(8, 8, 0, Grid(2, 2)), 4, on_gpu=False) == 1


# -- prefetch_of ------------------------------------------------------------------------------


def test_prefetch_follows_the_configuration_where_not_given():
    assert prefetch_of(RunConfig(dtype="float64"), on_gpu=True) == 1
    assert prefetch_of(RunConfig(dtype="float32"), on_gpu=True) == 1
    assert prefetch_of(RunConfig(dtype="float32", tf32=True), on_gpu=True) == 2
    assert prefetch_of(RunConfig(dtype="float32", tf32=True), on_gpu=False) == 1
    assert prefetch_of(RunConfig(dtype="float32", tf32=True, prefetch=3), on_gpu=False) == 3
