"""What the default grid's face promises at its edges, one behaviour a test.

Written against the mutants that mutation testing of hpcmm/planning/grid_orientation.py left alive
(docs/mutation.md): the message that refuses an unknown ``HPCMM_GRID_ORIENTATION`` value lists the
values it takes, comma-separated.
"""

from __future__ import annotations

import pytest

from hpcmm.planning.grid_orientation import default_grid, facing


@pytest.mark.parametrize("call", [lambda: facing("square", "float64"),
                                  lambda: default_grid(4, orientation="square")])
def test_an_unknown_orientation_is_refused_with_the_values_it_takes(call):
    with pytest.raises(ValueError) as caught:
        call()
    assert str(caught.value) == "grid orientation 'square': expected one of auto, wide, tall, row"
