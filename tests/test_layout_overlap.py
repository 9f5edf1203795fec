"""A caller's layout with overlapping blocks is refused, found by a sweep rather than by every pair.

The sweep (``hpcmm.geometry.distribution._overlapping``) must agree with the definition (two blocks overlap
where both their rows and their columns intersect) on many random sets of blocks, and must name
two ranks whose blocks do overlap.  A layout of 4096 ranks is checked without comparing 8 million
pairs.
"""

from __future__ import annotations

import itertools
import random

import pytest

from hpcmm.geometry.distribution import Layout, _overlapping


def _by_definition(blocks) -> bool:
    return any(ar0 < br1 and br0 < ar1 and ac0 < bc1 and bc0 < ac1
               for (_, (ar0, ar1), (ac0, ac1)), (_, (br0, br1), (bc0, bc1)) in itertools.combinations(blocks, 2))


@pytest.mark.parametrize("seed", range(4))
def test_the_sweep_finds_an_overlap_exactly_where_one_exists(seed):
    rng = random.Random(seed)
    for _ in range(2000):
        blocks = []
        for rank in range(rng.randint(1, 7)):
            r0, c0 = rng.randint(0, 6), rng.randint(0, 6)
            blocks.append((rank, (r0, rng.randint(r0 + 1, 8)), (c0, rng.randint(c0 + 1, 8))))
        found = _overlapping(blocks)
        assert (found is not None) == _by_definition(blocks), blocks
        if found is not None:
            low, high = found
            assert low < high and _by_definition([blocks[low], blocks[high]]), (found, blocks)


def test_many_ranks_are_checked_and_an_overlap_among_them_is_named():
    layout = Layout.grid(4096, 4096, 4096, (64, 64))
    assert len(layout.blocks["C"]) == 4096
    blocks = dict(layout.blocks)
    c = list(blocks["C"])
    (r0, r1), (c0, c1) = c[4095]
    c[4095] = ((r0 - 1, r1), (c0, c1))  # one row into the block above (rank 4031), leaving its last row bare
    with pytest.raises(ValueError, match="C blocks of ranks 4031 and 4095 overlap"):
        Layout(layout.shapes, {**blocks, "C": tuple(c)})
