"""What the block geometry promises at its edges, one behaviour a test.

Written against the mutants that mutation testing of hpcmm/geometry/layout.py left alive (docs/mutation.md):
the padding's alignment for any item size and its one-sixteenth limit, the quantum's rounding and
the length from which a layout applies it, the messages of the errors a caller gets, the weights a
layout reports, and the grid shape :func:`hpcmm.geometry.layout.fit_grid` picks without a preferred one.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpcmm.geometry.layout import ALIGN_BYTES, Grid, Layout, fit_grid, load_imbalance, padded, weighted_bounds
from hpcmm.model.cost import compute_dims

# -- padded ---------------------------------------------------------------------------------


@pytest.mark.parametrize("itemsize", [1, 2, 3, 4, 8, 12, 16, 24, 40])
def test_padded_columns_start_on_aligned_bytes_for_any_item_size(itemsize):
    """A long extent is padded to a whole number of 128-byte units, whatever the item size."""
    rng = np.random.default_rng(itemsize)
    for extent in rng.integers(2000, 50000, size=20):
        lead = padded(int(extent), itemsize)
        assert lead >= extent
        assert (lead * itemsize) % ALIGN_BYTES == 0, (extent, lead)
        # the smallest such: one unit less would no longer hold the extent
        unit = next(u for u in range(1, ALIGN_BYTES + 1) if (u * itemsize) % ALIGN_BYTES == 0)
        assert lead - extent < unit


def test_padding_is_taken_up_to_one_sixteenth_and_no_more():
    """float64 (16 elements a unit): 226 rows pad by 14 (< 226/16), 225 would pad by 15 (> 225/16)."""
    assert padded(226, 8) == 240
    assert padded(225, 8) == 225
    assert padded(241, 8) == 256  # 15 more: 241/16 ≥ 15
    assert padded(239, 8) == 240


# -- weighted_bounds ------------------------------------------------------------------------


def test_quantum_rounds_each_offset_to_the_nearest_multiple():
    assert weighted_bounds(10, [1, 1], quantum=4) == (0, 4, 10)  # ideal 5: 4 is nearer than 8
    assert weighted_bounds(13, [1, 1], quantum=4) == (0, 8, 13)  # ideal 6.5: 8 is nearer than 4


@given(n=st.integers(0, 5000), quantum=st.integers(2, 64),
       weights=st.lists(st.floats(0.01, 100.0), min_size=1, max_size=8))
def test_quantum_offsets_are_the_nearest_multiples_of_the_ideal(n, quantum, weights):
    bounds = weighted_bounds(n, weights, quantum=quantum)
    exact = [Fraction(float(w)) for w in weights]
    total = sum(exact)
    ideal = Fraction(0)
    for offset, w in zip(bounds[:-1], exact):
        assert offset % quantum == 0 or offset == n
        assert abs(offset - ideal) <= Fraction(quantum, 2) or offset == n
        ideal += n * w / total
    assert bounds[-1] == n


def test_negative_length_is_refused_with_its_value():
    with pytest.raises(ValueError, match=r"^length -3 is negative$"):
        weighted_bounds(-3, [1, 1])


def test_load_imbalance_of_nothing_says_so():
    with pytest.raises(ValueError, match=r"^no times given$"):
        load_imbalance([])


# -- Layout ---------------------------------------------------------------------------------


def test_layout_applies_the_quantum_from_four_quanta_a_block():
    """8 rows a quantum, 2 process rows: from 64 rows on, blocks start at multiples of 8."""
    weights = (1.0, 0.7)  # 64 rows: ideally 37.6 + 26.4
    at = Layout(64, 16, 16, Grid(2, 1), weights=weights, quantum=8)
    assert at.rows(0) == (0, 40) and at.rows(1) == (40, 64)
    below = Layout(63, 16, 16, Grid(2, 1), weights=weights, quantum=8)
    assert below.rows(0) == Layout(63, 16, 16, Grid(2, 1), weights=weights).rows(0)
    assert below.rows(0)[1] % 8 != 0
    wide = Layout(16, 72, 72, Grid(1, 2), weights=weights, quantum=8)
    assert wide.cols(0)[1] % 8 == 0 and wide.a_k(0)[1] % 8 == 0


def test_layout_keeps_its_weights_as_a_tuple_of_floats():
    """Weights given as an array or a list: the layout equals (and hashes as) one given a tuple."""
    rng = np.random.default_rng(7)
    raw = rng.uniform(0.2, 2.0, size=6)
    from_array = Layout(50, 40, 30, Grid(2, 3), weights=raw)
    from_list = Layout(50, 40, 30, Grid(2, 3), weights=list(raw))
    from_tuple = Layout(50, 40, 30, Grid(2, 3), weights=tuple(float(w) for w in raw))
    assert isinstance(from_array.weights, tuple) and all(type(w) is float for w in from_array.weights)
    assert from_array == from_tuple and from_list == from_tuple
    assert hash(from_array) == hash(from_list) == hash(from_tuple)


def test_ranks_weigh_one_without_weights():
    layout = Layout(20, 30, 40, Grid(2, 3))
    assert [layout.rank_weight(r) for r in range(6)] == [1.0] * 6
    assert layout.row_weights == (3.0, 3.0) and layout.col_weights == (2.0, 2.0, 2.0)


@pytest.mark.parametrize("accessor, parts", [("rows", 2), ("cols", 3), ("a_k", 3), ("b_k", 2)])
def test_block_one_past_the_last_is_refused_with_the_count(accessor, parts):
    layout = Layout(20, 30, 40, Grid(2, 3), weights=(1, 2, 1, 1, 1, 0.5))
    getattr(layout, accessor)(parts - 1)
    for index in (parts, parts + 1, -1):
        with pytest.raises(ValueError, match=rf"^block index {index} out of range for {parts} parts$"):
            getattr(layout, accessor)(index)


# -- fit_grid -------------------------------------------------------------------------------


def test_fit_grid_finds_a_one_row_grid():
    """4 rows cannot split evenly over 3 ranks, 3 columns can: 1 × 3 balances exactly."""
    fit = fit_grid(4, 3, 8, [1, 1, 1])
    assert fit.grid == Grid(1, 3) and fit.imbalance == 0.0


def test_fit_grid_finds_a_one_column_grid():
    fit = fit_grid(3, 4, 8, [1, 1, 1])
    assert fit.grid == Grid(3, 1) and fit.imbalance == 0.0


def test_fit_grid_leaves_a_preferred_shape_that_balances_worse():
    fit = fit_grid(4, 3, 8, [1, 1, 1], preferred=Grid(3, 1))
    assert fit.grid == Grid(1, 3) and fit.imbalance == 0.0


@pytest.mark.parametrize("size", [2, 6, 8, 12])
def test_fit_grid_breaks_ties_as_compute_dims(size):
    """Every shape balances: the most square one with rows ≥ cols wins, as without weights."""
    fit = fit_grid(240, 240, 240, [0.5] * size)
    assert fit.grid == Grid(*compute_dims(size)) and fit.imbalance == 0.0


def test_fit_grid_with_no_tolerance_picks_a_best_candidate():
    rng = np.random.default_rng(3)
    weights = list(rng.choice([1.0, 0.5, 0.25], size=6))
    fit = fit_grid(97, 61, 8, weights, tolerance=0.0)
    others = [fit_grid(97, 61, 8, weights, preferred=g, fixed_shape=True, tolerance=0.0)
              for g in (Grid(1, 6), Grid(2, 3), Grid(3, 2), Grid(6, 1))]
    assert fit.imbalance == min(o.imbalance for o in others)
    assert fit_grid(4, 3, 8, [1, 1, 1], tolerance=0.0).grid == Grid(1, 3)


def test_fit_grid_without_a_preferred_shape_refuses_a_fixed_one():
    with pytest.raises(ValueError, match=r"^fixed_shape needs a preferred grid$"):
        fit_grid(4, 4, 4, [1, 1], fixed_shape=True)
