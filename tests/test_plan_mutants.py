"""What the plan, the ranks' agreement and the public layout promise, one behaviour a test.

Written against the mutants that mutation testing of hpcmm/planning/plan.py and hpcmm/geometry/distribution.py left
alive (docs/mutation.md): each test pins a behaviour a caller or a reader of the output sees.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import hpcmm
from hpcmm.geometry.distribution import Layout, stored_shape
from hpcmm.planning.plan import Plan, agree_on, settings_fields

GIB = 2**30


class _Ranks:
    """A communicator whose allgather returns, for each rank, what it would have given.

    ``None`` in ``others`` stands for the caller's own fields."""

    def __init__(self, *others):
        self.others = others

    def allgather(self, mine):
        return [mine if each is None else each for each in self.others]


def _message(comm, fields, *what) -> str:
    with pytest.raises(hpcmm.InputError) as caught:
        agree_on(comm, fields, *what)
    assert caught.value.agreed
    return str(caught.value)


# -- the ranks' agreement -----------------------------------------------------------------


def test_two_ranks_that_differ_fail_with_the_whole_message():
    mine = {"m": "64", "panel": "None"}
    message = _message(_Ranks(None, {"m": "96", "panel": "8"}), mine)
    assert message == ("the ranks differ in plan field m: 64 on rank 0; 96 on rank 1 and in "
                       "plan field panel: None on rank 0; 8 on rank 1 "
                       "(every rank must be given the same settings and environment)")


def test_rank_zero_alone_with_another_value_is_found():
    mine = {"panel": "8"}
    message = _message(_Ranks(None, {"panel": "None"}, {"panel": "None"}), mine, "setting")
    assert "setting panel: 8 on rank 0; None on ranks 1-2 " in message


def test_ranks_are_named_in_runs_and_values_by_their_first_rank():
    a, b = {"grid": "2x2"}, {"grid": "4x1"}
    message = _message(_Ranks(b, a, b, b, b, a, a), b)
    assert "plan field grid: 4x1 on ranks 0, 2-4; 2x2 on ranks 1, 5-6 " in message


def test_a_field_that_one_rank_lacks_is_named_missing():
    message = _message(_Ranks(None, {}), {"tf32": "False"})
    assert "plan field tf32: False on rank 0; (missing) on rank 1 " in message


def test_ranks_that_agree_pass():
    agree_on(_Ranks(None, None, None), {"m": "1"})


def test_settings_fields_hold_each_settings_value_and_leave_out_the_per_rank_ones():
    class Config:
        m, panel, out = 64, 8, "a.h5"

        @staticmethod
        def settings():
            return ["m", "panel", "out"]

    assert settings_fields(Config()) == {"m": "64", "panel": "8"}


# -- the plan ---------------------------------------------------------------------------------


def test_a_plans_fields_are_its_values_as_text():
    fields = Plan(m=8, n=4, k=2, dtype="float64", panel=8, devices=(0, 1)).fields()
    assert fields["panel"] == "8" and fields["devices"] == "(0, 1)" and fields["dtype"] == "'float64'"
    assert "layout" not in fields


def test_the_json_holds_tuples_as_lists_and_leaves_the_layout_out():
    layout = Layout.grid(8, 4, 2, (1, 1))
    plan = Plan(m=8, n=4, k=2, dtype="complex128", alpha=1 + 2j, devices=(0, 1), layout=layout)
    data = json.loads(plan.to_json())
    assert data["devices"] == [0, 1] and data["alpha"] == [1.0, 2.0] and "layout" not in data
    assert plan.digest == Plan(m=8, n=4, k=2, dtype="complex128", alpha=1 + 2j, devices=(0, 1)).digest


def test_the_hdf5_attributes_are_the_json_and_its_digest():
    plan = Plan(m=8, n=4, k=2, dtype="float64")
    assert plan.attributes() == {"plan": plan.to_json(), "plan_digest": plan.digest}


def test_a_default_plan_prints_every_line():
    plan = Plan(m=8, n=4, k=2, dtype="float64")
    assert str(plan) == (
        f"hpcmm plan {plan.digest}: C ← opN(A)·opN(B), 8x2 @ 2x4 float64\n"
        "  ranks 1 on 1 node(s), numpy, up to 1 per device\n"
        "  summa, grid 1x1, balance share\n"
        "  panel 0 (auto), 0 step(s) common, prefetch 0\n"
        "  GEMM , library auto; CUDA-aware MPI no\n"
        "  device memory per rank: 0–0 GiB")


def test_a_plan_with_every_choice_set_prints_every_choice():
    plan = Plan(m=6, n=5, k=3, dtype="complex128", alpha=2.5, beta=0.5, op_a="T", op_b="C", tf32=True,
                ranks=8, nodes=2, backend="cupy", ranks_per_device=2, algorithm="2.5d", layers=2, grid="2x2",
                balance="measured", panel=64, panel_auto=False, steps=3, step_order="ring", prefetch=1,
                gemm_order="A:F B:C", gemm_library="cublaslt", cuda_aware_mpi=True,
                memory_bytes=(GIB, 3 * GIB, GIB // 2))
    assert str(plan) == (
        f"hpcmm plan {plan.digest}: C ← 2.5·opT(A)·opC(B) + 0.5·C, 6x3 @ 3x5 complex128 (tf32)\n"
        "  ranks 8 on 2 node(s), cupy, up to 2 per device\n"
        "  2.5d with 2 layers, grid 2x2, balance measured\n"
        "  panel 64, 3 step(s) ring, prefetch 1\n"
        "  GEMM A:F B:C, library cublaslt; CUDA-aware MPI yes\n"
        "  device memory per rank: 0.5–3 GiB")


# -- the layout -------------------------------------------------------------------------------


def test_no_op_is_the_default_everywhere():
    assert stored_shape("A", 4, 3, 2) == (4, 2)
    assert Layout.grid(7, 5, 4, (1, 1)).shapes == {"A": (7, 4), "B": (4, 5), "C": (7, 5)}
    blocks = {"A": [((0, 7), (0, 4))], "B": [((0, 4), (0, 5))], "C": [((0, 7), (0, 5))]}
    assert Layout.from_product_blocks(7, 5, 4, blocks).shapes == {"A": (7, 4), "B": (4, 5), "C": (7, 5)}


def test_each_op_turns_its_own_operand():
    assert Layout.grid(7, 5, 4, (1, 1), op_b="T").shapes == {"A": (7, 4), "B": (5, 4), "C": (7, 5)}
    assert Layout.grid(7, 5, 4, (1, 1), op_a="N", op_b="N").shapes["A"] == (7, 4)


def test_a_layout_holds_plain_tuples_whatever_it_was_given():
    shapes = {"A": [np.int64(2), 2], "B": [2, 2], "C": [2, 2]}
    blocks = [[[0, 2], [0, 2]], [[0, 0], [0, 0]]]
    layout = Layout(shapes, {"A": blocks, "B": blocks, "C": blocks})
    assert layout.shapes == {"A": (2, 2), "B": (2, 2), "C": (2, 2)}
    assert type(layout.shapes["A"]) is tuple and type(layout.shapes["A"][0]) is int
    assert layout.blocks["A"] == (((0, 2), (0, 2)), ((0, 0), (0, 0)))
    hash(layout.blocks["A"])  # plain tuples


def test_empty_blocks_anywhere_inside_the_matrix_are_accepted():
    whole = ((0, 2), (0, 2))
    for empty in [((0, 0), (0, 0)), ((1, 1), (0, 2)), ((0, 2), (1, 1)), ((2, 2), (2, 2))]:
        layout = Layout({"A": (2, 2), "B": (2, 2), "C": (2, 2)},
                        {"A": [whole, empty], "B": [whole, empty], "C": [whole, empty]})
        assert layout.local_shape("A", 1) in {(0, 0), (0, 2), (2, 0)}


WHOLE, EMPTY = ((0, 2), (0, 2)), ((0, 0), (0, 0))


@pytest.mark.parametrize("blocks, message", [
    ({"A": [WHOLE], "B": [WHOLE, EMPTY], "C": [WHOLE]},
     r"a layout needs one block per rank for each operand, got \{'A': 1, 'B': 2, 'C': 1\}"),
    ({"A": [WHOLE, EMPTY], "B": [WHOLE, EMPTY], "C": [WHOLE, ((1, 2), (0, 2))]},
     "C blocks of ranks 0 and 1 overlap"),
])
def test_a_bad_layout_says_what_is_wrong(blocks, message):
    with pytest.raises(ValueError, match=message):
        Layout({"A": (2, 2), "B": (2, 2), "C": (2, 2)}, blocks)


def test_a_grid_order_that_is_not_a_permutation_is_refused():
    with pytest.raises(ValueError, match=r"order \(0, 0\) is not a permutation of the 2 ranks of a 1x2 grid"):
        Layout.grid(4, 4, 4, (1, 2), order=(0, 0))


def test_ranges_refuse_a_rank_or_operand_outside_the_layout():
    layout = Layout.grid(4, 4, 4, (1, 2))
    with pytest.raises(ValueError, match="rank 2 outside a layout of 2 ranks"):
        layout.ranges("A", 2)
    with pytest.raises(ValueError, match="rank -1 outside"):
        layout.ranges("A", -1)
    with pytest.raises(ValueError, match="operand 'D': expected one of A, B, C"):
        layout.ranges("D", 0)


def test_block_of_an_array_like_without_copy_is_its_slice():
    class Rows:
        """A read-only array-like: a shape and 2-D slicing, no ``copy`` (like some lazy readers)."""

        shape = (2, 3)

        def __getitem__(self, index):
            rows, cols = index
            return tuple(tuple(range(3))[cols] for _ in range(2)[rows])

    layout = Layout.grid(2, 3, 3, (1, 1))
    assert layout.block("C", 0, Rows()) == ((0, 1, 2), (0, 1, 2))


def test_a_layout_prints_each_ranks_blocks():
    layout = Layout.grid(5, 4, 3, (2, 1), op_a="T")
    assert str(layout) == (
        "Layout of 2 rank(s): A 3x5, B 3x4, C 5x4\n"
        "  rank 0: A[0:3, 0:3]  B[0:2, 0:4]  C[0:3, 0:4]\n"
        "  rank 1: A[0:3, 3:5]  B[2:3, 0:4]  C[3:5, 0:4]")
