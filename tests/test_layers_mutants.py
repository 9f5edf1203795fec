"""What the 2.5D geometry promises at its edges, one behaviour a test.

Written against the mutants that mutation testing of hpcmm/planning/algorithms/layers.py left alive
(docs/mutation.md): one layer is a valid ``--algo``, a layer count equal to k is a candidate, the
messages of the errors a caller gets, and the local shapes and block sizes of a layered layout.
"""

from __future__ import annotations

import numpy as np
import pytest

from hpcmm.planning.algorithms.layers import Algo, LayeredLayout, Layers, check_layers, parse_algo, valid_layer_counts
from hpcmm.geometry.layout import Grid


def test_one_layer_is_a_valid_algo():
    assert parse_algo("2.5d:1") == Algo("2.5d", 1)
    assert str(parse_algo(" 2.5D:1 ")) == "2.5d:1"


def test_as_many_layers_as_columns_of_k_are_a_candidate():
    assert valid_layer_counts(4, 4) == (2, 4)
    check_layers(4, [4, 4], k=4)  # what check_layers accepts, auto offers
    assert valid_layer_counts(8, 3) == (2,)


def test_a_rank_on_no_node_is_named():
    layers = Layers.build([[0, 1], [2, 3]], 2)
    with pytest.raises(ValueError, match=r"^rank 9 is on no node$"):
        layers.fiber(9)


def test_a_grid_of_the_wrong_size_is_refused_with_both_sizes():
    layers = Layers.build([[0, 1, 2, 3], [4, 5, 6, 7]], 2)
    with pytest.raises(ValueError, match=r"^a 3x1 grid does not hold the 4 ranks of a layer$"):
        LayeredLayout(10, 10, 10, layers, Grid(3, 1))


@pytest.mark.parametrize("nodes, count, grid", [
    ([[0, 1, 2, 3], [4, 5, 6, 7]], 2, Grid(2, 2)),
    ([[0, 1, 2, 3]], 4, Grid(1, 1)),
    ([[3, 0, 1, 2, 5, 4]], 3, Grid(2, 1)),
])
def test_local_shapes_tile_a_b_and_c(nodes, count, grid):
    """Every rank's A and B blocks and its summed piece of C: their areas add up to each matrix."""
    rng = np.random.default_rng(count)
    m, n, k = (int(x) for x in rng.integers(11, 120, size=3))
    layout = LayeredLayout(m, n, k, Layers.build(nodes, count), grid)
    ranks = [r for node in nodes for r in node]
    shapes = {r: layout.local_shapes(r) for r in ranks}
    for name, total in (("A", m * k), ("B", k * n), ("C", m * n)):
        assert sum(shapes[r][name][0] * shapes[r][name][1] for r in ranks) == total, name
    for r in ranks:
        (a0, a1), (ak0, ak1) = layout.a_block(r)
        assert shapes[r]["A"] == (a1 - a0, ak1 - ak0)
        partial = layout.local_shapes_partial(r)
        assert shapes[r]["C"][1] == partial[1] and shapes[r]["C"][0] <= partial[0]
    # every layer's partial blocks tile C
    for layer in range(count):
        members = layout.layers.members(layer)
        assert sum(np.prod(layout.local_shapes_partial(r)) for r in members) == m * n


def test_block_sizes_are_those_of_layer_zero():
    """k = 53 over 2 layers: layer 0 holds 27 columns (14 + 13 on a 2 × 2 grid), layer 1 26."""
    layout = LayeredLayout(101, 67, 53, Layers.build([[0, 1, 2, 3], [4, 5, 6, 7]], 2), Grid(2, 2))
    assert layout.block_sizes() == {"rows": (51, 50), "cols": (34, 33), "a_k": (14, 13), "b_k": (14, 13)}
