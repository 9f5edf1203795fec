"""Block geometry, checked for every rank of virtual grids in one process, with and without weights.

:mod:`hpcmm.geometry.layout` is pure, so the layout of a 4×4 grid is tested here
without 16 processes: each test walks over all ranks of the grid.
"""

from __future__ import annotations

import doctest
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpcmm.geometry import layout as layout_module
from hpcmm.geometry.layout import (
    Grid,
    Layout,
    block_owner,
    block_range,
    bounds_owner,
    fit_grid,
    load_imbalance,
    predicted_imbalance,
    weighted_bounds,
)

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


# -- weighted blocks ----------------------------------------------------------

# Weights as measured rates and GPU shares come: from tiny to large, never zero.
WEIGHT = st.floats(min_value=1e-3, max_value=1e3, allow_nan=False, allow_infinity=False)


def test_module_doctests():
    """The worked examples in the module's docstrings hold."""
    result = doctest.testmod(layout_module)
    assert result.attempted >= 8 and result.failed == 0, result


@given(n=st.integers(0, 3000), weights=st.lists(WEIGHT, min_size=1, max_size=12))
def test_weighted_bounds_tile_and_follow_weights(n, weights):
    """In order, cover [0, n) once, each size its ideal rounded down or up (so within one of it)."""
    bounds = weighted_bounds(n, weights)
    assert len(bounds) == len(weights) + 1
    assert bounds[0] == 0 and bounds[-1] == n
    sizes = [b - a for a, b in zip(bounds, bounds[1:])]
    assert min(sizes) >= 0
    total = sum(Fraction(w) for w in weights)
    for size, w in zip(sizes, weights):
        ideal = n * Fraction(w) / total
        assert math.floor(ideal) <= size <= math.ceil(ideal), (size, float(ideal))
        assert abs(size - n * w / math.fsum(weights)) < 1 + 1e-9


@given(n=st.integers(0, 3000), weights=st.lists(WEIGHT, min_size=1, max_size=12))
def test_weighted_bounds_round_by_largest_remainder(n, weights):
    """A block rounded up never has a smaller remainder than one rounded down (ties: lower index up)."""
    bounds = weighted_bounds(n, weights)
    sizes = [b - a for a, b in zip(bounds, bounds[1:])]
    total = sum(Fraction(w) for w in weights)
    ideal = [n * Fraction(w) / total for w in weights]
    up = [i for i, s in enumerate(sizes) if s > ideal[i]]
    down = [i for i, s in enumerate(sizes) if s < ideal[i]]
    for i in up:
        for j in down:
            ri, rj = ideal[i] - math.floor(ideal[i]), ideal[j] - math.floor(ideal[j])
            assert ri > rj or (ri == rj and i < j), (i, j, sizes)


@given(n=st.integers(0, 3000), parts=st.integers(1, 40), weight=WEIGHT)
def test_equal_weights_give_block_range(n, parts, weight):
    """Any equal weights, however unround (1/3 ...), cut exactly as block_range does."""
    bounds = weighted_bounds(n, [weight] * parts)
    assert [(bounds[i], bounds[i + 1]) for i in range(parts)] == [block_range(n, parts, i) for i in range(parts)]


@pytest.mark.parametrize("n, weights, sizes", [
    (10, [0.5, 1, 0.5], [3, 5, 2]),       # 2.5, 5, 2.5: the tie goes to the first
    (8, [0.5, 1, 0.5], [2, 4, 2]),
    (7, [3, 1], [5, 2]),                  # 5.25, 1.75: the larger remainder wins
    (3, [1, 1000], [0, 3]),               # an empty block for a tiny weight
    (2, [1, 1, 1, 1], [1, 1, 0, 0]),
    (0, [2, 1], [0, 0]),
])
def test_weighted_bounds_hand_made(n, weights, sizes):
    bounds = weighted_bounds(n, weights)
    assert [b - a for a, b in zip(bounds, bounds[1:])] == sizes


@given(n=st.integers(1, 400), weights=st.lists(WEIGHT, min_size=1, max_size=10), data=st.data())
def test_bounds_owner_agrees_with_bounds(n, weights, data):
    bounds = weighted_bounds(n, weights)
    i = data.draw(st.integers(0, n - 1))
    owner = bounds_owner(bounds, i)
    assert bounds[owner] <= i < bounds[owner + 1], (bounds, i, owner)


@given(n=st.integers(0, 40000), weights=st.lists(WEIGHT, min_size=1, max_size=12),
       quantum=st.sampled_from([2, 8, 64, 128]))
def test_weighted_bounds_with_a_quantum_align_and_stay_within_one_quantum(n, weights, quantum):
    """Cover [0, n) in order; every inner offset a multiple of the quantum; every size within one quantum."""
    bounds = weighted_bounds(n, weights, quantum)
    assert len(bounds) == len(weights) + 1 and bounds[0] == 0 and bounds[-1] == n
    assert all(a <= b for a, b in zip(bounds, bounds[1:]))
    assert all(b % quantum == 0 or b == n for b in bounds)
    total = sum(Fraction(w) for w in weights)
    for (a, b), w in zip(zip(bounds, bounds[1:]), weights):
        assert abs((b - a) - n * Fraction(w) / total) <= quantum, (bounds, weights)


def test_weighted_bounds_rejects_a_quantum_below_one():
    with pytest.raises(ValueError, match="quantum 0"):
        weighted_bounds(100, [1, 2], 0)


def test_layout_aligns_weighted_blocks_only_where_the_axis_is_long_enough():
    """16384 in 3 weighted rows: multiples of 64; 300 columns over 2: too short, element-exact."""
    weights = (0.424, 1.0, 0.43)  # 3 ranks, GPU 0's two time-sliced (measured rates)
    layout = Layout(16384, 16384, 16384, Grid(3, 1), weights=weights, quantum=64)
    assert layout.block_sizes()["rows"] == (3776, 8832, 3776)
    assert layout.block_sizes()["b_k"] == (3776, 8832, 3776)
    exact = Layout(16384, 16384, 16384, Grid(3, 1), weights=weights)
    assert exact.block_sizes()["rows"] == (3747, 8837, 3800)  # element-exact, odd: the slow GEMMs
    short = Layout(300, 300, 300, Grid(1, 2), weights=(1.0, 0.3), quantum=64)
    assert short.block_sizes()["cols"] == Layout(300, 300, 300, Grid(1, 2), weights=(1.0, 0.3)).block_sizes()["cols"]
    assert 0 < predicted_imbalance(layout) < 64 / 3776


@pytest.mark.parametrize("n, parts", [(7, 3), (2, 4), (10, 10), (1, 5), (1000, 7)])
def test_bounds_owner_matches_block_owner_for_equal_weights(n, parts):
    bounds = weighted_bounds(n, [1.0] * parts)
    assert [bounds_owner(bounds, i) for i in range(n)] == [block_owner(n, parts, i) for i in range(n)]


@pytest.mark.parametrize("i", [-1, 5])
def test_bounds_owner_rejects_element_outside(i):
    with pytest.raises(ValueError, match=f"element {i} out of range for length 5"):
        bounds_owner((0, 2, 5), i)


@pytest.mark.parametrize("weights, match", [
    ([1, 0, 1], "weight 1 is 0.0"),
    ([1, -2], "weight 1 is -2.0"),
    ([float("nan"), 1], "weight 0 is nan"),
    ([1, float("inf")], "weight 1 is inf"),
    ([], "no weights"),
])
def test_weighted_bounds_rejects_bad_weights(weights, match):
    with pytest.raises(ValueError, match=match):
        weighted_bounds(10, weights)


def test_layout_rejects_weights_of_the_wrong_count():
    with pytest.raises(ValueError, match="3 weights for the 4 ranks of a 2x2 grid"):
        Layout(5, 5, 5, Grid(2, 2), weights=(1, 1, 1))
    with pytest.raises(ValueError, match="weight 2 is 0.0"):
        Layout(5, 5, 5, Grid(2, 2), weights=(1, 1, 0, 1))


@pytest.mark.parametrize("grid, shape", CASES, ids=[f"{g[0]}x{g[1]}-{s[0]}x{s[1]}x{s[2]}" for g, s in CASES])
@pytest.mark.parametrize("weight", [1.0, 0.25, 1 / 3, 51.7e12])
def test_equal_weights_give_todays_layout(grid, shape, weight):
    """Equal weights change nothing: every range, shape and owner is the unweighted layout's."""
    plain = Layout(*shape, Grid(*grid))
    weighted = Layout(*shape, Grid(*grid), weights=[weight] * (grid[0] * grid[1]))
    for rank in range(plain.grid.size):
        assert weighted.a_block(rank) == plain.a_block(rank)
        assert weighted.b_block(rank) == plain.b_block(rank)
        assert weighted.c_block(rank) == plain.c_block(rank)
        assert weighted.local_shapes(rank) == plain.local_shapes(rank)
    assert weighted.block_sizes() == plain.block_sizes()
    m, n, k = shape
    for axis, length, owner, parts in (("row", m, weighted.row_owner, grid[0]), ("col", n, weighted.col_owner, grid[1]),
                                       ("a_k", k, weighted.a_k_owner, grid[1]), ("b_k", k, weighted.b_k_owner, grid[0])):
        assert [owner(i) for i in range(length)] == [block_owner(length, parts, i) for i in range(length)], axis


@given(rows=st.integers(1, 4), cols=st.integers(1, 4), m=st.integers(1, 40), n=st.integers(1, 40),
       k=st.integers(1, 40), data=st.data())
def test_weighted_blocks_tile_a_b_and_c_exactly(rows, cols, m, n, k, data):
    """Any weights: every element of A, B and C belongs to exactly one rank's block."""
    weights = data.draw(st.lists(WEIGHT, min_size=rows * cols, max_size=rows * cols))
    layout = Layout(m, n, k, Grid(rows, cols), weights=weights)
    ranks = range(layout.grid.size)
    for name, full, block in (("A", (m, k), layout.a_block), ("B", (k, n), layout.b_block),
                              ("C", (m, n), layout.c_block)):
        count = _coverage(full, [block(r) for r in ranks])
        assert (count == 1).all(), f"{name}: elements covered {np.unique(count)} times"


@given(rows=st.integers(1, 4), cols=st.integers(1, 4), m=st.integers(1, 300), n=st.integers(1, 300),
       k=st.integers(1, 300), data=st.data())
def test_weighted_blocks_follow_row_and_column_weights(rows, cols, m, n, k, data):
    """Process rows get rows and B's k by their summed weight, columns get columns and A's k by theirs."""
    grid = Grid(rows, cols)
    weights = data.draw(st.lists(WEIGHT, min_size=grid.size, max_size=grid.size))
    layout = Layout(m, n, k, grid, weights=weights)
    row_w = [math.fsum(weights[grid.rank(r, c)] for c in range(cols)) for r in range(rows)]
    col_w = [math.fsum(weights[grid.rank(r, c)] for r in range(rows)) for c in range(cols)]
    assert layout.row_weights == pytest.approx(row_w) and layout.col_weights == pytest.approx(col_w)
    for r in range(rows):
        for extent, length in ((layout.extent(layout.rows(r)), m), (layout.extent(layout.b_k(r)), k)):
            assert abs(extent - length * row_w[r] / sum(row_w)) < 1 + 1e-9
    for c in range(cols):
        for extent, length in ((layout.extent(layout.cols(c)), n), (layout.extent(layout.a_k(c)), k)):
            assert abs(extent - length * col_w[c] / sum(col_w)) < 1 + 1e-9
    for rank in range(grid.size):
        r, c = grid.coords(rank)
        assert layout.c_block(rank) == (layout.rows(r), layout.cols(c))
        assert layout.rank_weight(rank) == weights[rank]


def test_weighted_owners_agree_with_ranges():
    layout = Layout(23, 17, 29, Grid(2, 3), weights=(0.5, 1, 0.25, 2, 0.5, 1))
    for i in range(23):
        lo, hi = layout.rows(layout.row_owner(i))
        assert lo <= i < hi
    for j in range(17):
        lo, hi = layout.cols(layout.col_owner(j))
        assert lo <= j < hi
    for kk in range(29):
        assert layout.a_k(layout.a_k_owner(kk))[0] <= kk < layout.a_k(layout.a_k_owner(kk))[1]
        assert layout.b_k(layout.b_k_owner(kk))[0] <= kk < layout.b_k(layout.b_k_owner(kk))[1]


def test_documented_example_three_ranks_on_two_gpus():
    """The module docstring: weights (½, 1, ½) on 3 × 1, m = 10 → rows 0–2, 3–7, 8–9, imbalance 0.2."""
    layout = Layout(10, 6, 5, Grid(3, 1), weights=(0.5, 1, 0.5))
    assert [layout.rows(r) for r in range(3)] == [(0, 3), (3, 8), (8, 10)]
    assert predicted_imbalance(layout) == pytest.approx(0.2)
    assert predicted_imbalance(Layout(8, 6, 5, Grid(3, 1), weights=(0.5, 1, 0.5))) == 0.0
    assert layout.block_sizes() == {"rows": (3, 5, 2), "cols": (6,), "a_k": (5,), "b_k": (1, 3, 1)}


# -- load imbalance -----------------------------------------------------------


@pytest.mark.parametrize("times, expected", [
    ([1.0, 1.0, 1.0], 0.0),
    ([2.0, 1.0, 1.0, 2.0], 2 / 1.5 - 1),
    ([3.0, 0.0, 0.0], 2.0),
    ([0.0, 0.0], 0.0),
    ([5.0], 0.0),
])
def test_load_imbalance(times, expected):
    assert load_imbalance(times) == pytest.approx(expected)


def test_load_imbalance_needs_times():
    with pytest.raises(ValueError, match="no times"):
        load_imbalance([])


@pytest.mark.parametrize("shape, grid, weights, expected", [
    # Without weights every rank counts as equally fast: equal blocks are balanced.
    ((9, 6, 4), (3, 1), None, 0.0),
    # Uneven split with equal rates: 2 columns against 1 of n = 3.
    ((5, 3, 4), (1, 2), None, 2 / 1.5 - 1),
    # More process rows than rows: two ranks idle, two work.
    ((2, 5, 3), (4, 1), None, 1.0),
    # Outer-product weights, sizes exact: balanced.
    ((8, 6, 4), (3, 1), (0.5, 1, 0.5), 0.0),
    ((12, 9, 4), (2, 2), (2, 1, 2, 1), 0.0),
    # No outer product: rows 400/300, columns 400/300; times 160k, 120k, 120k, 90k/0.5 = 180k.
    ((700, 700, 4), (2, 2), (1, 1, 1, 0.5), 180 / 145 - 1),
    # Rounding alone: rows 3, 5, 2 at rates 1/2, 1, 1/2: times 6, 5, 4.
    ((10, 6, 4), (3, 1), (0.5, 1, 0.5), 0.2),
])
def test_predicted_imbalance_hand_made(shape, grid, weights, expected):
    layout = Layout(*shape, Grid(*grid), weights=weights)
    assert predicted_imbalance(layout) == pytest.approx(expected, abs=1e-12)


@given(u=st.lists(st.integers(1, 4), min_size=1, max_size=4), v=st.lists(st.integers(1, 4), min_size=1, max_size=4),
       t=st.integers(1, 5), scale=WEIGHT)
def test_outer_product_weights_balance_exactly(u, v, t, scale):
    """w[r, c] = u[r] · v[c] with sizes that divide evenly: the blocks follow the weights exactly."""
    grid = Grid(len(u), len(v))
    weights = [scale * u[r] * v[c] for r in range(grid.rows) for c in range(grid.cols)]
    layout = Layout(sum(u) * t, sum(v) * t, 7, grid, weights=weights)
    assert predicted_imbalance(layout) == pytest.approx(0.0, abs=1e-9)


# -- choosing a grid for weights ----------------------------------------------


def test_fit_grid_keeps_shape_and_launch_order_when_balanced():
    fit = fit_grid(16384, 16384, 16384, [0.25] * 8, preferred=Grid(4, 2))
    assert fit.grid == Grid(4, 2) and fit.order == tuple(range(8)) and fit.imbalance == 0.0


def test_fit_grid_places_shared_gpus_together():
    """6 ranks on 4 GPUs (round robin: ranks 0, 4 on GPU 0 and 1, 5 on GPU 1) on a 2 × 3 grid."""
    weights = [0.5, 0.5, 1, 1, 0.5, 0.5]
    identity = predicted_imbalance(Layout(600, 600, 600, Grid(2, 3), weights=weights))
    assert identity > 0.3
    fit = fit_grid(600, 600, 600, weights, preferred=Grid(2, 3), fixed_shape=True)
    assert fit.grid == Grid(2, 3) and fit.imbalance == 0.0
    assert fit.weights == tuple(weights[i] for i in fit.order)
    # Without a fixed shape the preferred one still wins: it balances.
    assert fit_grid(600, 600, 600, weights, preferred=Grid(2, 3)).grid == Grid(2, 3)


def test_fit_grid_changes_shape_only_for_a_real_gain():
    """5 ranks on 2 GPUs: only 5 × 1 and 1 × 5 exist; 3 ranks of weight ⅓, 2 of ½ balance on either."""
    weights = [1 / 3, 1 / 2, 1 / 3, 1 / 2, 1 / 3]
    fit = fit_grid(16384, 16384, 16384, weights, preferred=Grid(5, 1))
    assert fit.grid == Grid(5, 1) and fit.order == tuple(range(5))
    assert fit.imbalance < 1e-3


@given(size=st.integers(1, 8), m=st.integers(1, 200), n=st.integers(1, 200), data=st.data())
def test_fit_grid_result_is_consistent(size, m, n, data):
    weights = data.draw(st.lists(st.sampled_from([1.0, 0.5, 1 / 3, 0.25, 0.8]), min_size=size, max_size=size))
    shapes = [Grid(r, size // r) for r in range(1, size + 1) if size % r == 0]
    preferred = data.draw(st.sampled_from(shapes))
    fit = fit_grid(m, n, 9, weights, preferred=preferred)
    assert sorted(fit.order) == list(range(size))
    assert fit.weights == tuple(weights[i] for i in fit.order)
    assert fit.imbalance == predicted_imbalance(Layout(m, n, 9, fit.grid, weights=fit.weights))
    launch = predicted_imbalance(Layout(m, n, 9, preferred, weights=weights))
    assert fit.imbalance <= launch + 1e-12  # never worse than launch order on the preferred shape
    fixed = fit_grid(m, n, 9, weights, preferred=preferred, fixed_shape=True)
    assert fixed.grid == preferred


def test_fit_grid_rejects_mismatches():
    with pytest.raises(ValueError, match="a 2x2 grid does not hold 3 ranks"):
        fit_grid(4, 4, 4, [1, 1, 1], preferred=Grid(2, 2))
    with pytest.raises(ValueError, match="fixed_shape needs a preferred grid"):
        fit_grid(4, 4, 4, [1, 1], fixed_shape=True)
