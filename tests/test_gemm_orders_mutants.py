"""What the rule of the GEMM's operand orders promises at its edges, one behaviour a test.

Written against the mutants that mutation testing of hpcmm/planning/gemm_orders.py left alive
(docs/mutation.md): an order exactly 1 % behind the fastest still counts as fastest, a gain of
exactly 15 % pays for a re-layout, ties go to fewer re-layouts and then to the smaller loss at the
worst size, a type without TF32 named is its own type, and a bad override names the argument.
The rates below are chosen so that the rule's products are exact in binary (0.99 × 100 = 99,
1.15 × 80 = 92).
"""

from __future__ import annotations

import pytest

from hpcmm.errors import InputError
from hpcmm.planning.gemm_orders import choose, gemm_order, type_key


def test_an_order_exactly_one_percent_behind_is_among_the_fastest():
    """CC (one re-layout) at 99 against CF (two) at 100: within 1 %, so the fewer re-layouts win."""
    assert choose({1: {"CC": 99.0, "CF": 100.0, "FC": 50.0, "FF": 10.0}}) == "CC"


def test_a_gain_of_exactly_fifteen_percent_pays_for_a_relayout():
    """CC at 92 against the stored order's 80: 15 % faster, enough to re-lay A's panels out."""
    assert choose({1: {"CC": 92.0, "CF": 10.0, "FC": 80.0, "FF": 10.0}}) == "CC"
    assert choose({1: {"CC": 91.9, "CF": 10.0, "FC": 80.0, "FF": 10.0}}) == "FC"  # 14.9 %: not enough


def test_fewer_relayouts_win_whatever_the_names():
    """FF (B re-laid out) and CF (both) equally fast: FF, though CF comes first alphabetically."""
    assert choose({1: {"CC": 50.0, "CF": 100.0, "FC": 50.0, "FF": 100.0}}) == "FF"


def test_among_equal_relayouts_the_smaller_loss_at_any_size_wins():
    """CC loses 1 % at the second size, FF 0.5 % at the first: FF, though CC's raw rate is the larger
    at the slower size (the loss is a share of each size's fastest, not a rate)."""
    sizes = {1: {"CC": 100.0, "CF": 10.0, "FC": 50.0, "FF": 99.5},
             2: {"CC": 990.0, "CF": 100.0, "FC": 500.0, "FF": 1000.0}}
    assert choose(sizes) == "FF"


def test_float32_without_tf32_named_is_plain_float32():
    """TF32 is asked for, never assumed: the table's float32 row, not its tf32 row."""
    assert type_key("float32") == "float32"
    assert type_key("float32", True) == "tf32" and type_key("float64", True) == "float64"


@pytest.mark.parametrize("override", ["XY", "C", "fcf"])
def test_a_bad_override_names_the_argument_and_the_value(override):
    with pytest.raises(InputError) as caught:
        gemm_order("float64", override=override)
    assert str(caught.value) == (f"gemm_order={override!r}: expected auto or A's and B's order as two letters "
                                 "(C row-major, F column-major): FC, CC, CF, FF")
