"""The GEMMs of a dynamic tile: its owner's SUMMA steps merged where they read the same two blocks, or, for a
lone worker, one GEMM over the whole operands it gathers."""

from __future__ import annotations

import pytest

from hpcmm.planning.algorithms import Step, rank_plan
from hpcmm.execution.dynamic import block_k_offsets, merged_spans
from hpcmm.planning.choices import LEAST_TILE_ROWS, TILE_ROW_ALIGN, gather_bytes, lone_worker_gather, tile_rows
from hpcmm.geometry.layout import Grid, Layout, padded


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


@pytest.mark.parametrize("grid", [(1, 1), (1, 4), (3, 1), (2, 3), (4, 2)])
@pytest.mark.parametrize("shape", [(37, 29, 101), (5, 7, 3), (64, 64, 64)])
def test_the_whole_operands_hold_each_block_where_the_steps_read_it(grid, shape):
    """A lone worker's whole A (B) holds grid column j's (row i's) block from ``block_k_offsets``: every step
    of every rank reads A and B at the global k its offsets give, so one GEMM over the whole k adds the same."""
    layout = Layout(*shape, Grid(*grid))
    a_offsets, b_offsets = block_k_offsets(layout)
    assert len(a_offsets) == grid[1] and len(b_offsets) == grid[0]
    for rank in range(layout.grid.size):
        covered = []
        for step in rank_plan(layout, rank, 4, 0, own_order=False):
            assert a_offsets[step.a_root] + step.a_offset == step.k0
            assert b_offsets[step.b_root] + step.b_offset == step.k0
            covered += range(step.k0, step.k1)
        assert covered == list(range(layout.k))


def test_a_lone_worker_gathers_the_operands_whose_k_the_grid_cuts():
    layout = lambda rows, cols: Layout(96, 80, 64, Grid(rows, cols))  # noqa: E731
    assert [lone_worker_gather(layout(*g), (0,)) for g in [(1, 1), (1, 4), (4, 1), (2, 2)]] == ["", "A", "B", "AB"]
    assert lone_worker_gather(layout(1, 4), (0, 2)) == ""  # several workers read the owners' blocks
    assert lone_worker_gather(layout(2, 2), ()) == ""


@pytest.mark.parametrize("itemsize", [4, 8])
def test_the_gathered_bytes_are_the_whole_operands_with_their_blocks_padding(itemsize):
    exact = Layout(512, 256, 40, Grid(2, 2))  # 256 and 128 rows or columns per block: no padding
    assert gather_bytes(exact, itemsize, "A") == 512 * 40 * itemsize
    assert gather_bytes(exact, itemsize, "B") == 40 * 256 * itemsize
    assert gather_bytes(exact, itemsize, "AB") == (512 + 256) * 40 * itemsize
    assert gather_bytes(exact, itemsize, "") == 0
    uneven = Layout(1001, 999, 33, Grid(3, 2))  # blocks of 334 or 333 rows and 500 or 499 columns, padded
    rows = [padded(uneven.local_shapes(uneven.grid.rank(r, 0))["C"][0], itemsize) for r in range(3)]
    cols = [padded(uneven.local_shapes(uneven.grid.rank(0, c))["C"][1], itemsize) for c in range(2)]
    assert rows != [334, 333, 333] and sum(rows) > 1001
    assert gather_bytes(uneven, itemsize, "AB") == (sum(rows) + sum(cols)) * 33 * itemsize
