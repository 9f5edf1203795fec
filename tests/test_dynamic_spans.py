"""The GEMMs of a dynamic tile: its owner's SUMMA steps merged where they read the same two blocks."""

from __future__ import annotations

import pytest

from hpcmm.planning.algorithms import Step, rank_plan
from hpcmm.execution.dynamic import merged_spans
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
