"""Between nodes, ``--balance dynamic`` moves a C tile only where the estimate says it pays.

Within a node a tile is claimed while the product runs and read where it lies
(:mod:`hpcmm.execution.dynamic`).  Between nodes a tile's A rows (the whole of k) must travel to the
taker and its C rows back, through MPI: a cost the tile's own GEMM may not repay.  So the nodes
balance among themselves one product at a time: from the rates each node reached in the last
product and the rate the copies between nodes reached, :func:`handoffs` predicts every node's time
and moves the last tiles of the slowest node, one at a time, to the rank of another node in the same
grid column (which holds the B blocks that tile reads) whose node then ends soonest (the taker's node
pays the tile's GEMMs and every byte it moves, the owner's node the bytes it sends before its own
tiles), for as long as each move shortens the predicted product,
and keeps the moves only if together they shorten it by :data:`HANDOFF_GAIN` or more.  With no
rates yet (the first product) nothing moves.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

__all__ = ["HANDOFF_GAIN", "Handoff", "TileCost", "handoffs", "node_times"]

#: The least share of the predicted product a node's hand-offs must save to be made: a prediction from
#: one product's rates is only that good (a rate moves by several per cent between products).
HANDOFF_GAIN = 0.03


@dataclasses.dataclass(frozen=True)
class TileCost:
    """One tile: its GEMMs' flops, the bytes that cross between nodes if another node computes it (A's rows
    there, C's rows back), the bytes of the buffers the taker and the owner hold for it meanwhile, and of
    the crossing bytes those the owner sends before its node's tiles (A's rows: its node waits for them)."""

    flops: float
    moved_bytes: int
    buffer_bytes: int
    sent_bytes: int = 0


@dataclasses.dataclass(frozen=True, order=True)
class Handoff:
    """``owner``'s tile ``tile`` (a grid position and an index among its tiles), computed by ``taker``."""

    owner: int
    tile: int
    taker: int


def node_times(node_of: Sequence[int], tiles: Sequence[Sequence[TileCost]], rates: Sequence[float]) -> list[float]:
    """Each node's predicted seconds: the flops of its ranks' tiles over the node's rate.

    >>> node_times([0, 1], [[TileCost(4.0, 0, 0)] * 2, [TileCost(4.0, 0, 0)] * 2], [1.0, 4.0])
    [8.0, 2.0]
    """
    flops = [0.0] * len(rates)
    for rank, costs in enumerate(tiles):
        flops[node_of[rank]] += sum(cost.flops for cost in costs)
    return [f / r for f, r in zip(flops, rates)]


def handoffs(node_of: Sequence[int], column_of: Sequence[int], tiles: Sequence[Sequence[TileCost]],
             rates: Sequence[float], link_rate: float, spare_bytes: Sequence[int],
             gain: float = HANDOFF_GAIN, can_take: Sequence[bool] | None = None) -> tuple[Handoff, ...]:
    """The tiles that change node for the next product, the same on every rank given the same inputs.

    Parameters
    ----------
    node_of, column_of : sequence of int
        Each rank's (virtual) node and grid column.
    tiles : sequence of sequences of TileCost
        Each rank's tiles, in the order its node claims them (a moved tile is one of the last).
    rates : sequence of float
        Each node's rate in the last product (flop/s); any that is not positive and finite: nothing moves.
    link_rate : float
        Bytes per second between nodes, as the last product's copies moved them (not positive: nothing moves).
    spare_bytes : sequence of int
        What each rank's device holds beyond its blocks: the buffers of the tiles it gives or takes.
    gain : float
        The least share of the slowest node's predicted time the moves together must save.
    can_take : sequence of bool, optional
        Which ranks may compute a moved tile (every rank where not given): a rank that leaves its GPU's
        tiles to another (time slices) takes none either.

    Returns
    -------
    tuple of Handoff
        Sorted.  A node gives or takes, never both; a taker shares the owner's grid column.

    Examples
    --------
    Two nodes of one rank each in one grid column, the second three times as fast; each tile's bytes
    cross in a tenth of what its GEMMs take on the fast node:

    >>> tile = TileCost(flops=3.0, moved_bytes=1, buffer_bytes=1)
    >>> handoffs([0, 1], [0, 0], [[tile] * 4, [tile] * 4], [1.0, 3.0], link_rate=10.0, spare_bytes=[8, 8])
    (Handoff(owner=0, tile=2, taker=1), Handoff(owner=0, tile=3, taker=1))

    A link ten times slower: moving a tile costs more than it saves.

    >>> handoffs([0, 1], [0, 0], [[tile] * 4, [tile] * 4], [1.0, 3.0], link_rate=0.1, spare_bytes=[8, 8])
    ()
    """
    nodes = len(rates)
    if nodes < 2 or not link_rate > 0 or not all(0 < r < float("inf") for r in rates):
        return ()
    times = node_times(node_of, tiles, rates)
    before = max(times)
    left = [len(costs) for costs in tiles]
    spare = list(spare_bytes)
    givers: set[int] = set()
    takers: set[int] = set()
    moves: list[Handoff] = []
    while True:
        slow = max(range(nodes), key=lambda n: times[n])
        if slow in takers:
            break
        best = None  # ((the two nodes' predicted time after the move, the owner's tiles left negated), owner, taker)
        # An owner keeps one tile at least: its node's rate in this product is the next one's estimate.
        for owner in (r for r in range(len(tiles)) if node_of[r] == slow and left[r] > 1):
            cost = tiles[owner][left[owner] - 1]
            if spare[owner] < cost.buffer_bytes:
                continue
            for taker in range(len(tiles)):
                node = node_of[taker]
                if (node == slow or node in givers or column_of[taker] != column_of[owner]
                        or spare[taker] < cost.buffer_bytes or (can_take is not None and not can_take[taker])):
                    continue
                after = max(times[slow] - cost.flops / rates[slow] + cost.sent_bytes / link_rate,
                            times[node] + cost.flops / rates[node] + cost.moved_bytes / link_rate)
                if best is None or ((after, -left[owner]), owner, taker) < best:
                    best = ((after, -left[owner]), owner, taker)
        if best is None or best[0][0] >= times[slow]:
            break
        _, owner, taker = best
        cost = tiles[owner][left[owner] - 1]
        node = node_of[taker]
        times[slow] += cost.sent_bytes / link_rate - cost.flops / rates[slow]
        times[node] += cost.flops / rates[node] + cost.moved_bytes / link_rate
        left[owner] -= 1
        spare[owner] -= cost.buffer_bytes
        spare[taker] -= cost.buffer_bytes
        givers.add(slow)
        takers.add(node)
        moves.append(Handoff(owner, left[owner], taker))
    if not moves or max(times) > before * (1 - gain):
        return ()
    return tuple(sorted(moves))
