"""The GEMMs of a dynamic tile: its owner's SUMMA steps merged where they read the same two blocks."""

from __future__ import annotations

import pytest

from hpcmm.planning.algorithms import Step, rank_plan
from hpcmm.execution.dynamic import merged_spans
from hpcmm.planning.choices import LEAST_TILE_ROWS, TILE_ROW_ALIGN, tile_rows
from hpcmm.geometry.layout import Grid, Layout


def _sources(pieces):
    """Each k of the product: (A's grid column, offset in its block, B's grid row, offset in its block)."""
    out = []
    for p in pieces:
        out += [(p.a_root, p.a_offset + i, p.b_root, p.b_offset + i) for i in range(p.width)]
    return out


@pytest.mark.parametrize("grid", [(1, 1), (1, 3), (2, 2), (3, 2), (2, 4)])
@pytest.mark.parametrize("panel", [1, 5, 16, 1000])
def test_spans_read_every_k_where_the_steps_do(grid, panel):
    layout = Layout(37, 29, 101, Grid(*grid))
    for rank in range(layout.grid.size):
        steps = rank_plan(layout, rank, panel, 0, own_order=False)
        spans = merged_spans(steps)
        assert _sources(spans) == _sources(steps)
        assert sum(s.width for s in spans) == layout.k
        # As few as the blocks allow: a new span only where a source block changes.
        changes = sum(1 for a, b in zip(_sources(steps), _sources(steps)[1:]) if (a[0], a[2]) != (b[0], b[2]))
        assert len(spans) == changes + 1


def test_steps_whose_offsets_jump_stay_apart():
    steps = [Step(0, 0, 4, 0, 0, 0, 0), Step(1, 4, 8, 0, 8, 0, 4)]
    assert [s.width for s in merged_spans(steps)] == [4, 4]


@pytest.mark.parametrize("cut", ["even", "decreasing"])
@pytest.mark.parametrize("on_gpu", [True, False])
@pytest.mark.parametrize("rows", [0, 1, 31, 64, 257, 1000, 3001, 8192, 10007])
@pytest.mark.parametrize("count", [1, 3, 8, 16])
def test_tiles_cover_the_block_once_each_wide_enough_and_aligned(cut, on_gpu, rows, count):
    tiles = tile_rows(rows, on_gpu, count, cut)
    least, align = LEAST_TILE_ROWS[on_gpu], TILE_ROW_ALIGN[on_gpu]
    if rows == 0:
        assert tiles == ()
        return
    assert tiles[0][0] == 0 and tiles[-1][1] == rows
    assert all(a[1] == b[0] for a, b in zip(tiles, tiles[1:]))  # contiguous, in order: every row once
    assert len(tiles) == max(1, min(count, rows // least))  # as many as asked where each gets `least` rows
    if len(tiles) > 1:
        assert all(r1 - r0 > least - align for r0, r1 in tiles)
        assert all(r0 % align == 0 for r0, _ in tiles)


def test_decreasing_tiles_shrink_and_even_ones_do_not():
    decreasing = [r1 - r0 for r0, r1 in tile_rows(16384, True, 8, "decreasing")]
    even = [r1 - r0 for r0, r1 in tile_rows(16384, True, 8, "even")]
    assert decreasing == sorted(decreasing, reverse=True) and decreasing[0] >= 3 * decreasing[-1]
    assert even == [2048] * 8
    with pytest.raises(ValueError, match="'guided'"):
        tile_rows(100, False, 2, "guided")
