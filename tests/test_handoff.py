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
        times[node_of[move.owner]] += cost.sent_bytes / link - cost.flops / rates[node_of[move.owner]]
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


def test_node_times_add_every_rank_of_a_node():
    tiles = [[TileCost(2.0, 0, 0)], [TileCost(4.0, 0, 0), TileCost(2.0, 0, 0)], [TileCost(3.0, 0, 0)]]
    assert node_times([0, 0, 1], tiles, [2.0, 3.0]) == [4.0, 1.0]


def test_rates_must_be_finite_and_any_positive_link_will_do():
    tile = TileCost(flops=3.0, moved_bytes=0, buffer_bytes=1)
    tiles = [[tile] * 4, [tile] * 4]
    assert handoffs([0, 1], [0, 0], tiles, [1.0, float("inf")], 10.0, ROOMY) == ()
    assert handoffs([0, 1], [0, 0], tiles, [1.0, 3.0], 0.5, ROOMY)  # a slow link, but nothing to move over it


def test_the_tile_that_moves_is_priced_as_itself():
    """The last tile of the slow node costs more to move than it saves: nothing moves, though the tile
    before it would have paid (tiles move from the end of the owner's list, in order)."""
    cheap, dear = TileCost(3.0, 1, 1), TileCost(3.0, 1000, 1)
    assert handoffs([0, 1], [0, 0], [[cheap] * 3 + [dear], [cheap]], [1.0, 3.0], 10.0, ROOMY) == ()
    # A large last tile moves alone: once it has, the taker is the slowest and moving stops.
    small, large = TileCost(1.0, 0, 1), TileCost(8.0, 0, 1)
    assert handoffs([0, 1], [0, 0], [[small] * 3 + [large], [small]], [1.0, 1.0], 1e9, ROOMY) == (Handoff(0, 3, 1),)


def test_an_owner_without_room_is_passed_over_for_the_next():
    """Ranks 0 and 1 on the slow node, both in column 0; rank 0 has no spare memory: rank 1's tiles move."""
    node_of, column_of = [0, 0, 1], [0, 0, 0]
    tiles = [[TILE] * 4, [TILE] * 4, [TILE]]
    moves = handoffs(node_of, column_of, tiles, [1.0, 6.0], 10.0, [0, 100, 100])
    assert moves and {m.owner for m in moves} == {1}


def test_room_for_exactly_one_tile_takes_exactly_one():
    tiles = [[TILE] * 4, [TILE] * 4]
    assert handoffs([0, 1], [0, 0], tiles, [1.0, 40.0], 1e3, [100, 1]) == (Handoff(0, 3, 1),)


def _shorter_after(node_of, column_of, tiles, rates, link, spare, moves):
    """The documented stopping rule, checked from outside: no further move of the slowest node's next tile
    (where it may still give) to a node that may take would shorten the slowest node's predicted time."""
    times = _after(node_of, tiles, rates, link, moves)
    givers = {node_of[m.owner] for m in moves}
    takers = {node_of[m.taker] for m in moves}
    slow = max(range(len(rates)), key=lambda n: times[n])
    if slow in takers:
        return False
    for owner in range(len(tiles)):
        left = len(tiles[owner]) - sum(m.owner == owner for m in moves)
        if node_of[owner] != slow or left <= 1:
            continue
        cost = tiles[owner][left - 1]
        for taker in range(len(tiles)):
            node = node_of[taker]
            if node == slow or node in givers or column_of[taker] != column_of[owner]:
                continue
            after = max(times[slow] - cost.flops / rates[slow] + cost.sent_bytes / link,
                        times[node] + cost.flops / rates[node] + cost.moved_bytes / link)
            if after < times[slow]:
                return True
    return False


@pytest.mark.parametrize("seed", range(40))
def test_moves_follow_the_documented_prediction(seed):
    """Random nodes, rates, tiles and links: what the moves predict (each node's flops over its rate, a
    taker paying the bytes at the link's rate too) saves the gain or more, no further move of the slowest
    node would shorten it, and where nothing moves no single move would have saved the gain."""
    import random

    rng = random.Random(seed)
    nodes = rng.randint(2, 4)
    per_node = rng.randint(1, 2)
    node_of = [r // per_node for r in range(nodes * per_node)]
    column_of = [r % per_node for r in range(nodes * per_node)]
    tiles = [[TileCost(rng.uniform(1, 6), moved, 1, rng.randint(0, moved)) for moved in
              (rng.randint(0, 4) for _ in range(rng.randint(2, 6)))] for _ in node_of]
    rates = [rng.uniform(0.5, 6.0) for _ in range(nodes)]
    link = rng.uniform(0.5, 20.0)
    moves = handoffs(node_of, column_of, tiles, rates, link, ROOMY)
    before = max(node_times(node_of, tiles, rates))
    if moves:
        assert max(_after(node_of, tiles, rates, link, moves)) <= before * (1 - HANDOFF_GAIN)
        assert not _shorter_after(node_of, column_of, tiles, rates, link, ROOMY, moves)
    else:
        times = node_times(node_of, tiles, rates)
        slow = max(range(nodes), key=lambda n: times[n])
        for owner in (r for r in range(len(tiles)) if node_of[r] == slow and len(tiles[r]) > 1):
            for taker in (r for r in range(len(tiles)) if node_of[r] != slow and column_of[r] == column_of[owner]):
                single = (Handoff(owner, len(tiles[owner]) - 1, taker),)
                assert max(_after(node_of, tiles, rates, link, single)) > before * (1 - HANDOFF_GAIN)


def test_each_move_is_the_one_after_which_its_two_nodes_end_soonest():
    """Two nodes of two ranks (columns 0 and 1), rates 2 and 6, a link of 2 bytes a second.  Worked by hand:
    node 0 has 23 flops (11.5 s), node 1 16 (2.67 s).  First, rank 0's last tile (6 flops, 2 bytes) ends the
    pair at max(11.5 - 3, 2.67 + 1 + 1) = 8.5 against rank 1's (2 flops) 10.5: rank 0's goes to rank 2.  Then
    rank 0's next (6 flops, 3 bytes) ends them at max(5.5, 7.17) = 7.17 against rank 1's max(7.5, 5.5) = 7.5:
    rank 0's again.  Node 1 is then the slowest, a taker: the moves end."""
    c = TileCost
    tiles = [[c(3.0, 2, 1), c(6.0, 3, 1), c(6.0, 2, 1)], [c(6.0, 2, 1), c(2.0, 1, 1)],
             [c(6.0, 4, 1), c(1.0, 6, 1)], [c(6.0, 0, 1), c(3.0, 2, 1)]]
    assert handoffs([0, 0, 1, 1], [0, 1, 0, 1], tiles, [2.0, 6.0], 2.0, ROOMY) == (Handoff(0, 1, 2), Handoff(0, 2, 2))


@pytest.mark.parametrize("more", [0, 1])
def test_of_two_owners_alike_the_one_with_more_tiles_left_gives(more):
    """Equal rates, one move possible: rank ``more`` (3 tiles against 2, the same tiles) gives it."""
    tiles = [[TILE] * (3 if more == 0 else 2), [TILE] * (3 if more == 1 else 2), [TILE], [TILE]]
    moves = handoffs([0, 0, 1, 1], [0, 1, 0, 1], tiles, [3.0, 3.0], 1e9, ROOMY, gain=0.0)
    assert moves == (Handoff(more, 2, 2 + more),)


def test_a_move_that_only_ties_the_slowest_is_not_made():
    """Rates 2 and 4, a link of 2: one move takes node 0 from 8 s to 6 and node 1 from 2 to 4; a second
    would take node 1 to exactly 6, no shorter: one move."""
    tiles = [[TileCost(4.0, 2, 1)] * 4, [TileCost(4.0, 2, 1)] * 2]
    assert handoffs([0, 1], [0, 0], tiles, [2.0, 4.0], 2.0, ROOMY) == (Handoff(0, 3, 1),)


def test_moves_that_save_exactly_the_gain_are_made():
    """8 s to 4: exactly half, with a gain of one half asked."""
    tiles = [[TileCost(4.0, 0, 1)] * 2, []]
    assert handoffs([0, 1], [0, 0], tiles, [1.0, 1.0], 1e9, ROOMY, gain=0.5) == (Handoff(0, 1, 1),)


def test_the_owners_node_pays_for_what_it_sends_before_its_tiles():
    """Rates 1 and 3, a link of 1 byte a second: a tile of 3 flops saves the slow node 3 s, but sending its
    A rows first (4 bytes) costs that node 4 s: nothing moves.  With nothing sent first it moves."""
    sent = TileCost(flops=3.0, moved_bytes=4, buffer_bytes=1, sent_bytes=4)
    assert handoffs([0, 1], [0, 0], [[sent] * 4, [sent] * 4], [1.0, 3.0], 1.0, ROOMY, gain=0.0) == ()
    free = TileCost(flops=3.0, moved_bytes=4, buffer_bytes=1)
    assert handoffs([0, 1], [0, 0], [[free] * 4, [free] * 4], [1.0, 3.0], 1.0, ROOMY, gain=0.0)


def test_a_tile_whose_rows_take_longer_to_send_than_to_multiply_stays():
    """Rates 1 and 10, a link of 1: the large last tile (6 flops, nothing to send) moves; the next (1 flop, 2
    bytes sent first) would cost the slow node 2 s to save it 1 s, and stays."""
    small, large = TileCost(1.0, 2, 1, sent_bytes=2), TileCost(6.0, 0, 1)
    tiles = [[small] * 3 + [large], [small]]
    assert handoffs([0, 1], [0, 0], tiles, [1.0, 10.0], 1.0, ROOMY) == (Handoff(0, 3, 1),)
