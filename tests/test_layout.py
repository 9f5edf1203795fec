"""Block geometry, checked for every rank of virtual grids in one process.

:mod:`hpcmm.layout` is pure, so the layout of a 4×4 grid is tested here
without 16 processes: each test walks over all ranks of the grid.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpcmm.layout import Grid, Layout, block_owner, block_range

GRIDS = [(1, 1), (1, 2), (2, 1), (2, 2), (3, 1), (1, 3), (2, 3), (3, 2), (3, 3),
         (4, 1), (1, 4), (2, 4), (4, 2), (4, 3), (4, 4)]


def shapes_for(rows: int, cols: int) -> list[tuple[int, int, int]]:
    """``(m, n, k)`` cases for a grid: uneven, tiny, and fewer rows/columns than ranks."""
    p = rows * cols
    return [
        (7 * p + 3, 5 * p + 1, 3 * p + 2),
        (rows + 1, cols + 2, rows * cols + 1),
        (1, 1, 1),
        (2, 3, 2),  # more ranks than rows, columns or k on the larger grids
        (4 * rows, 4 * cols, 4 * rows * cols),  # even split
    ]


CASES = [(g, s) for g in GRIDS for s in shapes_for(*g)]


# -- block_range / block_owner ------------------------------------------------


@given(n=st.integers(0, 500), parts=st.integers(1, 40))
def test_block_range_tiles_the_range(n, parts):
    """Blocks are in order, disjoint, cover [0, n) and differ in size by at most one."""
    ranges = [block_range(n, parts, i) for i in range(parts)]
    assert ranges[0][0] == 0
    assert ranges[-1][1] == n
    for (lo, hi), (lo2, _) in zip(ranges, ranges[1:]):
        assert hi == lo2, ranges
    sizes = [hi - lo for lo, hi in ranges]
    assert min(sizes) >= 0
    assert max(sizes) - min(sizes) <= 1, sizes
    # The larger blocks come first.
    assert sizes == sorted(sizes, reverse=True)
    assert sum(sizes) == n


@given(n=st.integers(1, 500), parts=st.integers(1, 40), data=st.data())
def test_block_owner_agrees_with_block_range(n, parts, data):
    """The owner of element ``i`` is the block whose range holds ``i``."""
    i = data.draw(st.integers(0, n - 1))
    owner = block_owner(n, parts, i)
    lo, hi = block_range(n, parts, owner)
    assert lo <= i < hi


@pytest.mark.parametrize("n, parts", [(7, 3), (2, 4), (10, 10), (1, 5), (1000, 7)])
def test_block_owner_every_element(n, parts):
    """Walking every element gives each block exactly its range."""
    owners = np.array([block_owner(n, parts, i) for i in range(n)])
    for index in range(parts):
        lo, hi = block_range(n, parts, index)
        assert np.array_equal(np.flatnonzero(owners == index), np.arange(lo, hi))


def test_block_range_documented_examples():
    assert [block_range(7, 3, i) for i in range(3)] == [(0, 3), (3, 5), (5, 7)]
    assert block_range(2, 4, 3) == (2, 2)
    assert [block_range(2, 4, i) for i in range(4)] == [(0, 1), (1, 2), (2, 2), (2, 2)]


@pytest.mark.parametrize("n, parts, index", [(5, 0, 0), (5, 3, 3), (5, 3, -1)])
def test_block_range_rejects_bad_index(n, parts, index):
    with pytest.raises(ValueError, match=str(index)):
        block_range(n, parts, index)


@pytest.mark.parametrize("n, i", [(5, 5), (5, -1), (0, 0)])
def test_block_owner_rejects_element_outside(n, i):
    with pytest.raises(ValueError, match=f"element {i}"):
        block_owner(n, 3, i)


# -- Grid ---------------------------------------------------------------------


@pytest.mark.parametrize("rows, cols", GRIDS)
def test_grid_coords_round_trip(rows, cols):
    """Row-major ranks, as ``MPI.Create_cart`` numbers them."""
    grid = Grid(rows, cols)
    assert grid.size == rows * cols
    assert str(grid) == f"{rows}x{cols}"
    seen = set()
    for rank in range(grid.size):
        r, c = grid.coords(rank)
        assert 0 <= r < rows and 0 <= c < cols
        assert grid.rank(r, c) == rank
        assert rank == r * cols + c
        seen.add((r, c))
    assert len(seen) == grid.size


@pytest.mark.parametrize("rank", [-1, 6])
def test_grid_rejects_rank_outside(rank):
    with pytest.raises(ValueError, match=f"rank {rank} outside a 2x3 grid"):
        Grid(2, 3).coords(rank)


# -- Layout -------------------------------------------------------------------


def _coverage(shape, blocks) -> np.ndarray:
    count = np.zeros(shape, dtype=np.int64)
    for (r0, r1), (c0, c1) in blocks:
        assert 0 <= r0 <= r1 <= shape[0] and 0 <= c0 <= c1 <= shape[1]
        count[r0:r1, c0:c1] += 1
    return count


@pytest.mark.parametrize("grid, shape", CASES, ids=[f"{g[0]}x{g[1]}-{s[0]}x{s[1]}x{s[2]}" for g, s in CASES])
def test_blocks_tile_a_b_and_c_exactly(grid, shape):
    """Every element of A, B and C belongs to exactly one rank's block."""
    m, n, k = shape
    layout = Layout(m, n, k, Grid(*grid))
    ranks = range(layout.grid.size)
    for name, full, block in (("A", (m, k), layout.a_block), ("B", (k, n), layout.b_block),
                              ("C", (m, n), layout.c_block)):
        count = _coverage(full, [block(r) for r in ranks])
        assert (count == 1).all(), f"{name} on {grid}: elements covered {np.unique(count)} times"


@pytest.mark.parametrize("grid, shape", CASES, ids=[f"{g[0]}x{g[1]}-{s[0]}x{s[1]}x{s[2]}" for g, s in CASES])
def test_blocks_follow_the_grid(grid, shape):
    """A: rows by process row, k by process column; B: k by row, columns by column; C: A's rows, B's columns."""
    m, n, k = shape
    rows, cols = grid
    layout = Layout(m, n, k, Grid(rows, cols))
    for rank in range(rows * cols):
        r, c = divmod(rank, cols)
        a_rows, a_k = layout.a_block(rank)
        b_k, b_cols = layout.b_block(rank)
        c_rows, c_cols = layout.c_block(rank)
        assert a_rows == c_rows == block_range(m, rows, r)
        assert b_cols == c_cols == block_range(n, cols, c)
        assert a_k == layout.a_k(c) == block_range(k, cols, c)
        assert b_k == layout.b_k(r) == block_range(k, rows, r)
        shapes = layout.local_shapes(rank)
        assert shapes == {
            "A": (a_rows[1] - a_rows[0], a_k[1] - a_k[0]),
            "B": (b_k[1] - b_k[0], b_cols[1] - b_cols[0]),
            "C": (c_rows[1] - c_rows[0], c_cols[1] - c_cols[0]),
        }


@pytest.mark.parametrize("grid", [(4, 1), (3, 1), (4, 4), (4, 2)])
def test_more_ranks_than_rows_gives_empty_blocks(grid):
    """m = 2 over more process rows than that: the last rows own nothing, and say so."""
    rows, cols = grid
    layout = Layout(2, 5, 3, Grid(rows, cols))
    empty = [rank for rank in range(rows * cols) if layout.local_shapes(rank)["C"][0] == 0]
    assert len(empty) == (rows - 2) * cols
    for rank in empty:
        shapes = layout.local_shapes(rank)
        assert shapes["A"][0] == 0 and shapes["C"][0] == 0
        # An empty range still sits at the end of the rows, not at a random place.
        assert layout.c_block(rank)[0] == (2, 2)


def test_documented_example_two_by_three():
    """The module docstring's P = 2 × 3, m = 7, k = 5 example."""
    layout = Layout(7, 9, 5, Grid(2, 3))
    assert [layout.rows(r) for r in range(2)] == [(0, 4), (4, 7)]
    assert [layout.a_k(c) for c in range(3)] == [(0, 2), (2, 4), (4, 5)]
    assert layout.a_block(4) == ((4, 7), (2, 4))
