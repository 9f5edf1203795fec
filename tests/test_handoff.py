"""Which tiles change node between products (hpcmm/planning/handoff.py): only where the estimate says it pays."""

from __future__ import annotations

import itertools

import pytest

from hpcmm.planning.handoff import HANDOFF_GAIN, Handoff, TileCost, handoffs, node_times

TILE = TileCost(flops=3.0, moved_bytes=1, buffer_bytes=1)
ROOMY = [100] * 8


def _after(node_of, tiles, rates, link, moves):
    """Each node's time once ``moves`` are made, counted as the estimate counts them."""
    times = node_times(node_of, tiles, rates)
    for move in moves:
        cost = tiles[move.owner][move.tile]
        times[node_of[move.owner]] -= cost.flops / rates[node_of[move.owner]]
        times[node_of[move.taker]] += cost.flops / rates[node_of[move.taker]] + cost.moved_bytes / link
    return times


def test_nothing_moves_without_rates_a_link_or_a_second_node():
    tiles = [[TILE] * 4, [TILE] * 4]
    assert handoffs([0, 1], [0, 0], tiles, [1.0, 0.0], 10.0, ROOMY) == ()  # a node with no rate yet
    assert handoffs([0, 1], [0, 0], tiles, [1.0, float("nan")], 10.0, ROOMY) == ()
    assert handoffs([0, 1], [0, 0], tiles, [1.0, 3.0], 0.0, ROOMY) == ()  # no copies timed
    assert handoffs([0, 0], [0, 0], tiles, [1.0], 10.0, ROOMY) == ()  # one node


def test_equal_nodes_keep_their_tiles():
    assert handoffs([0, 1], [0, 0], [[TILE] * 4, [TILE] * 4], [2.0, 2.0], 1e9, ROOMY) == ()


def test_the_slow_nodes_last_tiles_go_to_the_fast_node_until_the_two_would_cross():
    """3 : 1 rates, a fast link: two of four tiles move (the last two), the slow node keeps the first two."""
    tiles = [[TILE] * 4, [TILE] * 4]
    moves = handoffs([0, 1], [0, 0], tiles, [1.0, 3.0], 10.0, ROOMY)
    assert moves == (Handoff(0, 2, 1), Handoff(0, 3, 1))
    before = max(node_times([0, 1], tiles, [1.0, 3.0]))
    assert max(_after([0, 1], tiles, [1.0, 3.0], 10.0, moves)) < before * (1 - HANDOFF_GAIN)


def test_a_slow_link_moves_nothing():
    assert handoffs([0, 1], [0, 0], [[TILE] * 4, [TILE] * 4], [1.0, 3.0], 0.1, ROOMY) == ()


def test_moves_that_save_less_than_the_gain_are_not_made():
    """Rates 1 and 1.1: one tile would save under 3 % of the slow node's time."""
    small = TileCost(flops=1.0, moved_bytes=0, buffer_bytes=0)
    tiles = [[small] * 40, [small] * 40]
    assert handoffs([0, 1], [0, 0], tiles, [1.0, 1.04], 1e9, ROOMY) == ()
    assert handoffs([0, 1], [0, 0], tiles, [1.0, 1.04], 1e9, ROOMY, gain=0.0)  # any saving, if asked


def test_a_taker_shares_the_owners_grid_column():
    """2 x 2 grid, one rank a node: rank 0 (column 0) can only give to rank 2, its column's other rank,
    even though rank 1 is faster."""
    node_of, column_of = [0, 1, 2, 3], [0, 1, 0, 1]
    tiles = [[TILE] * 4 for _ in range(4)]
    moves = handoffs(node_of, column_of, tiles, [1.0, 9.0, 3.0, 3.0], 10.0, ROOMY)
    assert moves and {m.owner for m in moves} == {0} and {m.taker for m in moves} == {2}


def test_only_ranks_that_may_take_do():
    """Ranks 1 and 3 on node 1, both in column 0; rank 1 leaves its GPU's tiles to rank 3: only rank 3 takes."""
    node_of, column_of = [0, 1, 0, 1], [0, 0, 0, 0]
    tiles = [[TILE] * 4 for _ in range(4)]
    moves = handoffs(node_of, column_of, tiles, [1.0, 3.0], 10.0, ROOMY, can_take=[True, False, True, True])
    assert moves and {m.taker for m in moves} == {3}
    assert handoffs(node_of, column_of, tiles, [1.0, 3.0], 10.0, ROOMY, can_take=[True, False, True, False]) == ()


def test_an_owner_keeps_a_tile_and_buffers_must_fit():
    """A fast node forty times faster takes all tiles but one; with no spare memory on either side, none."""
    tiles = [[TILE] * 4, [TILE] * 4]
    moves = handoffs([0, 1], [0, 0], tiles, [1.0, 40.0], 1e3, ROOMY)
    assert [m.tile for m in moves] == [1, 2, 3]
    assert handoffs([0, 1], [0, 0], tiles, [1.0, 40.0], 1e3, [100, 0]) == ()
    assert handoffs([0, 1], [0, 0], tiles, [1.0, 40.0], 1e3, [0, 100]) == ()
    assert len(handoffs([0, 1], [0, 0], tiles, [1.0, 40.0], 1e3, [2, 100])) == 2  # two tiles' buffers


def test_a_node_gives_or_takes_never_both_and_the_prediction_only_shortens():
    """Three nodes of two ranks, a 3 x 2 grid (each node one grid row): the slowest node gives (the middle one
    may too, once it is the slowest), no node both gives and takes, and the prediction shortens."""
    node_of = [0, 0, 1, 1, 2, 2]
    column_of = [0, 1, 0, 1, 0, 1]
    tiles = [[TileCost(float(f), 1, 1) for f in (5, 4, 3, 2)] for _ in range(6)]
    for rates in itertools.permutations([1.0, 2.0, 6.0]):
        moves = handoffs(node_of, column_of, tiles, list(rates), 20.0, ROOMY)
        givers = {node_of[m.owner] for m in moves}
        takers = {node_of[m.taker] for m in moves}
        assert not givers & takers
        assert all(column_of[m.owner] == column_of[m.taker] for m in moves)
        assert rates.index(1.0) in givers and rates.index(6.0) not in givers
        before = max(node_times(node_of, tiles, list(rates)))
        assert moves and max(_after(node_of, tiles, list(rates), 20.0, moves)) < before
        # each owner's moved tiles are its last ones
        for owner in {m.owner for m in moves}:
            mine = sorted(m.tile for m in moves if m.owner == owner)
            assert mine == list(range(4 - len(mine), 4))


@pytest.mark.parametrize("seed", range(5))
def test_the_same_inputs_give_the_same_moves(seed):
    """Every rank computes the moves itself: they must not depend on anything but the inputs."""
    import random

    rng = random.Random(seed)
    node_of = [r // 2 for r in range(8)]
    column_of = [r % 2 for r in range(8)]
    tiles = [[TileCost(rng.uniform(1, 5), rng.randint(0, 3), 1) for _ in range(5)] for _ in range(8)]
    rates = [rng.uniform(0.5, 4.0) for _ in range(4)]
    first = handoffs(node_of, column_of, tiles, rates, 10.0, ROOMY)
    assert handoffs(list(node_of), tuple(column_of), [list(t) for t in tiles], list(rates), 10.0, list(ROOMY)) == first
    assert list(first) == sorted(first)
