"""What an engine carries out, decided before it is built: panel, prefetch, orders, steps, memory.

The planning step of one product.  :func:`summa_choices` (a SUMMA grid) and
:func:`layered_choices` (2.5D layers) turn the settings and the facts of the
ranks into an :class:`EngineChoices`; the engines
(:class:`~hpcmm.execution.engine.Engine`, :class:`~hpcmm.execution.layered.LayeredEngine`) take it
and decide nothing.  Each field comes from one rule:

=============  ==========================================================  ==================================
field          rule                                                        where its evidence is
=============  ==========================================================  ==================================
``prefetch``   :func:`~hpcmm.planning.algorithms.prefetch_of`                       docs/performance.md, "How to tune"
``gemm_order`` :func:`~hpcmm.planning.gemm_orders.gemm_order`                       docs/performance.md
``panel``      :func:`~hpcmm.planning.algorithms.panel_candidates`, first that fits docs/performance.md
``step_order`` :func:`~hpcmm.planning.algorithms.step_order`                        docs/design.md
``rank_steps`` :func:`~hpcmm.planning.algorithms.rank_plan`                         docs/design.md
``needed``     :func:`memory_needed` (+ the 2.5D reduction's scratch)      docs/design.md, "Memory"
=============  ==========================================================  ==================================

Every function here is collective over the ranks it is given and returns the
same verdict on every rank (the per-rank figures aside); a problem that does
not fit, or a panel wider than k, is an :class:`~hpcmm.errors.InputError` on
every rank before any buffer exists.
"""

from __future__ import annotations

import dataclasses

from mpi4py import MPI

from .algorithms import Step, panel_candidates, prefetch_of, rank_plan, ring_depth, step_order
from .algorithms.layers import LayeredLayout, Layers
from .balance import ranks_per_device
from ..config import RunConfig
from ..dtypes import numpy_dtype
from ..errors import InputError, agree
from .gemm_orders import gemm_order, label, scratch_slots
from .grid_orientation import facing
from ..geometry.layout import Grid, Layout, padded
from ..execution.topology import choose_grid
from ..execution.transport.reduce import scratch_bytes
from ..verify import VERIFY_CHUNK_BYTES, VERIFY_COPIES

__all__ = [
    "EngineChoices", "channel_slots", "check_memory", "device_need", "gather_bytes", "gpus_shared",
    "largest_fitting", "layered_choices", "lone_worker_gather", "memory_needed", "memory_parts", "node_workers",
    "remote_block_bytes", "scaled",
    "summa_choices", "tile_rows",
    "widest_fitting", "working_bytes"
]


#: The fewest rows of a dynamic tile: narrower tiles leave the GEMM too little work (GPU, CPU).
LEAST_TILE_ROWS = {True: 256, False: 32}
#: Tiles start at multiples of these rows (GPU, CPU): a GEMM whose rows start off a multiple of the
#: GPU kernels' tile loses much of its rate (a 25 %/75 % MPS pair at 16384³, decreasing tiles: 37
#: TFLOP/s cut at any row, 49 cut at multiples of 128; docs/performance.md).
TILE_ROW_ALIGN = {True: 128, False: 8}
#: Dynamic tiles per worker (GPU, CPU) where the blocks have rows enough: enough to even out ranks of
#: different speeds, few enough that each GEMM keeps its rate and, on a GPU under MPS, its share of the
#: SMs against another program's kernels (docs/performance.md, 2 ranks at 16384³ on an H200): beside a
#: co-runner under MPS 1, 2, 4 and 8 tiles per worker ran 43.6, 31.8–32.2, 24.1 and 16.4 TFLOP/s against
#: ``share``'s 27.2; with 25 %/75 % SM limits 2 ran 49.2, 8 ran 50.1 and 1 (nothing to hand out)
#: 28.0.  On CPUs (2 ranks given 6 and 2 BLAS threads, 4096³) 32 ran behind 8 in both calls that
#: compared them (0.24 and 0.23 against 0.28 and 0.27 TFLOP/s); 2, 4 and 8 were inside the spread.
TILES_PER_RANK = {True: 2, False: 8}
#: How a block's rows are cut into its tiles (GPU, CPU): ``"even"``, equal tiles; or ``"decreasing"``, tile
#: i of n given rows in proportion to n - i (trapezoid self-scheduling, Tzen and Ni 1993: the first claims
#: the widest GEMMs, the last, which even out the ranks' finishing times, the finest).  On CPUs a rank
#: half as fast as the other (2 ranks, 4096³, one of them beside a busy loop on its core) ran 0.95 of
#: the two ranks' rates alone with decreasing tiles, 0.85-0.87 with even ones, whose last tile of the slow
#: rank kept the fast one idle; where the ranks are even the two ran the same (docs/performance.md).  On a GPU
#: decreasing ran 2 % behind even under MPS (an H200).  tests/gpu/with_setting.py sets the other for a
#: comparison.
TILE_CUT = {True: "even", False: "decreasing"}
#: Whether a lone dynamic worker gathers the whole operands where they fit (:func:`lone_worker_gather`);
#: 0 keeps its tiles reading the owners' blocks (tests/gpu/with_setting.py sets it for a comparison).
LONE_WORKER_GATHER = 1


def tiles_per_block(blocks: int, workers: int, on_gpu: bool) -> int:
    """How many tiles each of ``blocks`` C blocks is cut into for ``workers`` ranks that compute them.

    :data:`TILES_PER_RANK` per worker in all; one tile per block where one rank computes every tile
    (nothing to hand out: the fewest, widest GEMMs).

    >>> tiles_per_block(4, 4, True), tiles_per_block(4, 4, False), tiles_per_block(8, 2, False)
    (2, 8, 2)
    >>> tiles_per_block(8, 1, True)
    1
    """
    if workers <= 1:
        return 1
    return max(1, -(-TILES_PER_RANK[on_gpu] * workers // max(1, blocks)))


def tile_rows(rows: int, on_gpu: bool, count: int | None = None,
              cut: str | None = None) -> tuple[tuple[int, int], ...]:
    """The row ranges of one C block's tiles for ``--balance dynamic`` (:mod:`hpcmm.execution.dynamic`): up to
    ``count`` (:func:`tiles_per_block`; by default the device's :data:`TILES_PER_RANK`), none under
    :data:`LEAST_TILE_ROWS` rows (one tile where the block is smaller), the rows beyond that least cut
    as the device's :data:`TILE_CUT` says (or ``cut``).

    >>> tile_rows(1000, on_gpu=False, count=8, cut="even")[:3], len(tile_rows(1000, False, 8, "even"))
    (((0, 120), (120, 248), (248, 368)), 8)
    >>> [r1 - r0 for r0, r1 in tile_rows(3856, False, 8, "decreasing")]
    [832, 728, 632, 536, 432, 328, 232, 136]
    >>> tile_rows(300, on_gpu=True), tile_rows(0, on_gpu=True), tile_rows(4096, on_gpu=True, count=1)
    (((0, 300),), (), ((0, 4096),))
    """
    cut = TILE_CUT[on_gpu] if cut is None else cut
    if cut not in ("decreasing", "even"):
        raise ValueError(f"tile cut {cut!r}: not decreasing or even")
    if rows <= 0:
        return ()
    least = LEAST_TILE_ROWS[on_gpu]
    count = max(1, min(TILES_PER_RANK[on_gpu] if count is None else count, rows // least))
    # Each tile has `least` rows or more; the rows beyond count * least go in proportion to the weights;
    # each cut then moves down to a multiple of `align` (less than `least`: no tile is emptied).
    weights = range(count, 0, -1) if cut == "decreasing" else [1] * count
    total, spare, align = sum(weights), max(0, rows - count * least), TILE_ROW_ALIGN[on_gpu]
    cuts, acc = [0], 0
    for i, weight in enumerate(weights, 1):
        acc += weight
        cuts.append(rows if i == count else (i * least + spare * acc // total) // align * align)
    return tuple(zip(cuts[:-1], cuts[1:]))


def lone_worker_gather(layout: Layout, workers) -> str:
    """The operands a lone dynamic worker gathers whole along k: ``"A"`` where the grid's columns cut A's
    k, ``"B"`` where its rows cut B's, ``""`` with several workers (each claims tiles while the others
    still read the owners' blocks; a copy of every operand per worker would not pay for itself).

    Its tiles are then one GEMM each over the whole of k instead of one per source block: narrow GEMMs
    that read and write their C strip once per block of k lose rate (8 ranks time-sliced on one GPU:
    docs/performance.md, ``--balance``).

    >>> g = lambda rows, cols: Layout(64, 64, 64, Grid(rows, cols))
    >>> lone_worker_gather(g(1, 8), (0,)), lone_worker_gather(g(2, 4), (0,)), lone_worker_gather(g(8, 1), (0,))
    ('A', 'AB', 'B')
    >>> lone_worker_gather(g(1, 1), (0,)), lone_worker_gather(g(1, 8), (0, 4))
    ('', '')
    """
    if len(workers) != 1:
        return ""
    return "A" * (layout.grid.cols > 1) + "B" * (layout.grid.rows > 1)


def gather_bytes(layout: Layout, itemsize: int, gather: str) -> int:
    """Bytes of the whole operands ``gather`` names (:func:`lone_worker_gather`), each grid row's A and each
    grid column's B stored with the blocks' padded leading dimension.

    >>> gather_bytes(Layout(100, 60, 40, Grid(2, 2)), 8, "A"), gather_bytes(Layout(100, 60, 40, Grid(2, 2)), 8, "")
    (32000, 0)
    """
    grid, total = layout.grid, 0
    if "A" in gather:
        total += sum(padded(layout.local_shapes(grid.rank(r, 0))["C"][0], itemsize) for r in range(grid.rows)) * layout.k
    if "B" in gather:
        total += sum(padded(layout.local_shapes(grid.rank(0, c))["C"][1], itemsize) for c in range(grid.cols)) * layout.k
    return total * itemsize


def remote_block_bytes(layout: Layout, rank: int, vnodes, itemsize: int) -> int:
    """Bytes of the blocks of other nodes that ``rank`` copies in for ``--balance dynamic`` over several
    nodes: the A blocks of its grid row and the B blocks of its grid column whose owners' (virtual) node,
    ``vnodes[owner]``, is not its own, each stored as its owner stores it (padded leading dimension).

    A tile of ``rank``'s C block reads every A block of its grid row and every B block of its grid column;
    the node's ranks read those of their node where they lie, and those of other nodes from ``rank``'s
    copies (:mod:`hpcmm.execution.dynamic`).

    >>> lay = Layout(100, 60, 40, Grid(2, 2))  # node 0: grid row 0; rank 0 copies the B block of rank 2 (20 × 30)
    >>> remote_block_bytes(lay, 0, (0, 0, 1, 1), 8), remote_block_bytes(lay, 0, (0, 0, 0, 0), 8)
    (4800, 0)
    """
    grid, mine = layout.grid, vnodes[rank]
    row, col = grid.coords(rank)
    total = 0
    for c in range(grid.cols):
        owner = grid.rank(row, c)
        if vnodes[owner] != mine:
            m_loc, k_a = layout.local_shapes(owner)["A"]
            total += padded(m_loc, itemsize) * k_a
    for r in range(grid.rows):
        owner = grid.rank(r, col)
        if vnodes[owner] != mine:
            k_b, n_loc = layout.local_shapes(owner)["B"]
            total += k_b * padded(n_loc, itemsize)
    return total * itemsize


def node_workers(worker_of, vnodes) -> tuple[int, ...]:
    """``worker_of`` (:func:`tile_worker_of`) kept within each (virtual) node: a rank whose worker is on
    another node takes the first rank of its node that shares that worker (tiles are handed out within a node).

    >>> node_workers((0, 0, 0, 0), (0, 0, 1, 1)), node_workers((0, 1, 0, 1), (0, 0, 0, 0))
    ((0, 0, 2, 2), (0, 1, 0, 1))
    """
    first: dict = {}
    return tuple(first.setdefault((vnodes[rank], worker), rank) for rank, worker in enumerate(worker_of))


def tile_workers(devices, mps_active, on_gpu: bool) -> tuple[int, ...]:
    """The ranks that compute ``--balance dynamic`` tiles: every rank, except that of ranks sharing a
    GPU by time slices (not every one of them under MPS) only the first computes, for all of them.

    Time-sliced contexts run one at a time and pay for each switch; one context keeps the whole GPU
    busy with the fewest, widest GEMMs (measurements: docs/performance.md, ``--balance``).

    Parameters
    ----------
    devices : sequence
        Each rank's device key (ranks with equal keys share the device), in rank order.
    mps_active : sequence of bool
        Each rank's MPS state, in rank order.
    on_gpu : bool
        CPU ranks each compute: their BLAS threads run side by side.

    >>> tile_workers(["g0"] * 4, [False] * 4, True), tile_workers(["g0", "g1", "g0", "g1"], [False] * 4, True)
    ((0,), (0, 1))
    >>> tile_workers(["g0"] * 2, [True, True], True), tile_workers(["cpu"] * 3, [False] * 3, False)
    ((0, 1), (0, 1, 2))
    """
    return tuple(sorted(set(tile_worker_of(devices, mps_active, on_gpu))))


def tile_worker_of(devices, mps_active, on_gpu: bool) -> tuple[int, ...]:
    """Each rank's tile worker (:func:`tile_workers`): the rank itself where it computes, else the lone
    worker of the GPU it time-slices with it (whose slow products it joins: :mod:`hpcmm.execution.dynamic`).

    >>> tile_worker_of(["g0", "g1", "g0", "g1"], [False] * 4, True), tile_worker_of(["g0"] * 2, [True] * 2, True)
    ((0, 1, 0, 1), (0, 1))
    """
    if not on_gpu:
        return tuple(range(len(devices)))
    ranks_of: dict = {}
    for rank, device in enumerate(devices):
        ranks_of.setdefault(device, []).append(rank)
    worker_of = list(range(len(devices)))
    for ranks in ranks_of.values():
        if len(ranks) > 1 and not all(mps_active[r] for r in ranks):
            for rank in ranks:
                worker_of[rank] = ranks[0]
    return tuple(worker_of)


@dataclasses.dataclass(frozen=True)
class EngineChoices:
    """Everything an engine runs by, made before it is built (one rank's view; see the module's table)."""

    #: Panel width (columns of k per step), and whether the rule chose it (``--panel`` unset).
    panel: int
    panel_auto: bool
    #: Panels in flight ahead of the GEMM.
    prefetch: int
    #: The GEMM's operand orders, A's then B's (``"FC"``: as they travel).
    gemm_order: str
    #: ``own-first`` or ``common``.
    step_order: str
    #: This rank's steps, and the most steps any rank runs (every rank's step records are that long).
    rank_steps: tuple[Step, ...]
    steps: int
    #: This rank's device bytes, and those of every rank on its device together (what the check compared).
    needed_bytes: int
    device_bytes: int
    #: Panel slots per operand for a channel with other members (:func:`~hpcmm.planning.algorithms.ring_depth`).
    slots: int
    #: Of ``needed_bytes``, the operands' blocks (the rest: rings and scratch); the device's free bytes
    #: when the check ran.
    operand_bytes: int = 0
    free_bytes: int = 0
    #: ``--balance dynamic``: every rank's C tiles (row ranges of its block), and the ranks that compute
    #: them (:func:`tile_workers`); empty otherwise.
    tiles: tuple = ()
    workers: tuple = ()
    #: Each rank's tile worker (:func:`tile_worker_of`; ``workers`` are those it names); empty otherwise.
    worker_of: tuple = ()
    #: ``--balance dynamic`` with one worker: the operands it gathers whole along k before its tiles
    #: (:func:`lone_worker_gather`: ``"A"``, ``"B"``, ``"AB"``), so that each tile is one GEMM; ``""`` otherwise.
    gather: str = ""
    #: ``--balance dynamic`` over several nodes: every rank's (virtual) node, in rank order; empty otherwise.
    vnodes: tuple = ()

    @property
    def ring(self) -> int:
        """The engine's own ring: which GEMM last read each panel slot (a channel may keep more)."""
        return self.prefetch + 1

    @property
    def gemm_order_label(self) -> str:
        """The operand orders as files name them, e.g. ``A:C B:F``."""
        return label(self.gemm_order)


#: The most bytes of a block that :meth:`~hpcmm.execution.engine.Engine.load` moves to the device at once.
LOAD_PIECE_BYTES = 256 << 20
#: Device bytes of the GEMM libraries beside hpcmm's own allocations: cuBLAS's handle, workspace
#: and the kernels it loads took 82 MiB on an H200 after a first float64 and float32 product
#: (benchmarks/results/2026-12-02/memory-gpu.json); the rest is room for cuBLASLt's workspace.
GEMM_LIBRARY_BYTES = 256 << 20


def working_bytes(layout: Layout, rank: int, itemsize: int) -> int:
    """Device bytes a rank takes beside its blocks and buffers while it runs (on a GPU).

    One piece of a block on its way in (:data:`LOAD_PIECE_BYTES`, or one line where a line is more),
    the verification's row chunks (:data:`~hpcmm.verify.VERIFY_CHUNK_BYTES`, each widened to
    float64 or complex128, :data:`~hpcmm.verify.VERIFY_COPIES` of them at once), and the GEMM
    libraries' own (:data:`GEMM_LIBRARY_BYTES`).  Without them a problem the check accepted at the
    edge of the device failed on its first block.

    >>> working_bytes(Layout(100, 100, 100, Grid(1, 1)), 0, 8) == (256 + 3 * 64 + 256) << 20
    True
    """
    # A line of a piece or a chunk runs along a block's rows or its columns: the longest extent bounds both.
    widest = max((extent for shape in layout.local_shapes(rank).values() for extent in shape), default=0)
    load = max(LOAD_PIECE_BYTES, padded(widest, itemsize) * itemsize)
    check = VERIFY_COPIES * max(VERIFY_CHUNK_BYTES, widest * 16)
    return load + check + GEMM_LIBRARY_BYTES


def memory_needed(layout: Layout, rank: int, itemsize: int, panel: int, ring,
                  relayout: tuple[int, int] = (0, 0), on_gpu: bool = False) -> int:
    """Bytes one rank's blocks, panel ring and re-layout scratch take on its device.

    ``ring`` is the slots per operand, :func:`~hpcmm.planning.algorithms.ring_depth`,
    kept only for an operand whose channel has other members (A along the
    grid's rows, B down its columns): a rank alone in a channel multiplies
    its own panels where they lie and receives nothing.
    ``relayout`` the scratch slots of A's and B's panels (the engine's ring
    where the GEMM takes that operand in the other order, else 0).  Every
    stored column of A and row of B and C is padded
    (:func:`~hpcmm.geometry.layout.padded`), and so are the re-layout scratch's (to
    the panel's width padded).  ``on_gpu``: add what the rank takes beside them while it runs
    (:func:`working_bytes`).
    """
    return sum(memory_parts(layout, rank, itemsize, panel, ring, relayout, on_gpu))


def memory_parts(layout: Layout, rank: int, itemsize: int, panel: int, ring,
                 relayout: tuple[int, int] = (0, 0), on_gpu: bool = False) -> tuple[int, int]:
    """:func:`memory_needed` in two: the operands' blocks (A, B, C, padded), and the buffers (ring,
    scratch, and on a GPU :func:`working_bytes`).

    ``ring`` as :func:`memory_needed` takes it, or ``(A's slots, B's slots)`` as the rank's two
    channels keep them (:func:`channel_slots`).
    """
    shapes = layout.local_shapes(rank)
    (m_loc, k_a), (k_b, n_loc) = shapes["A"], shapes["B"]
    ld_a, ld_bc, ld_panel = (padded(extent, itemsize) for extent in (m_loc, n_loc, panel))
    blocks = ld_a * k_a + k_b * ld_bc + m_loc * ld_bc
    ring_a, ring_b = ring if isinstance(ring, tuple) else (ring * (layout.grid.cols > 1), ring * (layout.grid.rows > 1))
    slots = panel * (ring_a * ld_a + ring_b * ld_bc)
    scratch = ld_panel * (relayout[0] * m_loc + relayout[1] * n_loc)
    working = working_bytes(layout, rank, itemsize) if on_gpu else 0
    return blocks * itemsize, (slots + scratch) * itemsize + working


def device_need(needs, device) -> tuple[int, int]:
    """How many ranks share ``device``, and the bytes they need together.

    ``needs`` holds ``(device, bytes)`` of every rank of a node.  With weighted
    blocks the ranks of one device need different amounts: the sum must fit.

    Examples
    --------
    >>> device_need([(0, 10), (1, 5), (0, 7)], 0)
    (2, 17)
    """
    together = [need for where, need in needs if where == device]
    return len(together), sum(together)


def _on_this_device(topo, backend, needs: list[int]) -> tuple[list[int], list[int], int]:
    """Collective over the node: the ranks (in ``topo.comm``) on this rank's device, each of
    ``needs`` summed over them (:func:`device_need`), and the bytes the device has free.

    ``needs`` holds this rank's bytes for each of several choices (one or more), the same count on
    every rank.  On the CPU every rank of the node shares the host's memory.
    """
    device = backend.device_id if backend.on_gpu else None
    backend.memory_info()  # this rank's CUDA context exists from here on: every rank's, after the gather
    gathered = topo.node_comm.allgather((device, needs, topo.rank))
    mates = [rank for where, _, rank in gathered if where == device]
    totals = [device_need([(where, need[i]) for where, need, _ in gathered], device)[1] for i in range(len(needs))]
    return mates, totals, _least_free(topo, backend, device)


def _least_free(topo, backend, device) -> int:
    """Collective over the node: the bytes ``device`` has free, the least that any of its ranks sees.

    Called once every rank of the node holds its context, so that none counts the memory of a
    neighbour's context, still being made, as free; the least, so that the ranks of a device agree.
    """
    free, _ = backend.memory_info()
    return min(seen for where, seen in topo.node_comm.allgather((device, free)) if where == device)


def check_memory(topo, backend, needed: int, problem: str, need_at=None, shape=None) -> tuple[int, int]:
    """Collective: refuse a problem whose ranks on one device need more than it has free.

    Ranks that share a device share its memory, and with weighted blocks or
    2.5D layers they need different amounts: the sum of their ``needed``
    bytes must fit (on the CPU every rank of the node shares the host's
    memory).  ``problem`` starts the message.  Returns that sum for this
    rank's device, and the bytes it had free.

    ``need_at(rank, m, n, k)``, with ``shape`` the problem's ``(m, n, k)``:
    a rank's bytes at another size of the same layout; the refusal then
    names the largest problem of that shape (``m:n:k`` kept) that fits
    every device (:func:`largest_fitting`).
    """
    mates, (total,), free = _on_this_device(topo, backend, [needed])
    ranks = len(mates)
    where = "device" if backend.on_gpu else "host"
    largest = None
    if need_at is not None:
        scale = largest_fitting(lambda m, n, k: sum(need_at(rank, m, n, k) for rank in mates), shape, free)
        scale = topo.comm.allreduce(scale, op=MPI.MIN)  # the same figure on every rank
        largest = scaled(shape, scale)
    err = None
    if total > free:
        fits = "" if largest is None else (
            "; nothing of this shape fits" if min(largest) < 1 else
            f"; the largest of this shape that fits: m={largest[0]}, n={largest[1]}, k={largest[2]}")
        err = InputError(f"{problem} does not fit: {ranks} rank(s) per {where} need {total / 2**30:.2f} GiB of "
                         f"{where} memory, {free / 2**30:.2f} GiB available{fits}")
    agree(topo.comm, err)
    return total, free


def scaled(shape: tuple[int, int, int], scale: float) -> tuple[int, int, int]:
    """``shape`` times ``scale``, each extent rounded down.

    >>> scaled((1000, 500, 10), 0.5)
    (500, 250, 5)
    """
    return tuple(int(extent * scale) for extent in shape)


def largest_fitting(total_at, shape: tuple[int, int, int], free: int) -> float:
    """The largest ``scale`` ≤ 1 at which ``total_at(*scaled(shape, scale))`` fits in ``free`` bytes.

    A bisection over ``scale`` (the bytes grow with every extent), to a
    thousandth of an element of the longest extent; 1.0 where the problem
    itself fits, 0.0 where not even one element does.
    """
    if total_at(*shape) <= free:
        return 1.0
    low, high = 0.0, 1.0
    while (high - low) * max(shape) > 1e-3:
        middle = (low + high) / 2
        candidate = scaled(shape, middle)
        if min(candidate) >= 1 and total_at(*candidate) <= free:
            low = middle
        else:
            high = middle
    return low


def gpus_shared(topo, backend) -> bool:
    """Collective: whether any GPU of the job holds several ranks (the same answer on every rank).

    The panel rule narrows there (:func:`~hpcmm.planning.algorithms.auto_panel`); every
    rank must take the same width, so one shared GPU anywhere decides for all.
    """
    if not backend.on_gpu:
        return False
    busiest = max(ranks_per_device(topo.node_comm.allgather(backend.device_id)))
    return max(topo.comm.allgather(busiest)) > 1


def widest_fitting(topo, backend, widths: list[int], needed) -> int:
    """Collective: the first of ``widths`` (widest first) at which every device holds what its ranks need.

    ``needed(width)`` is this rank's bytes at that width.  Every rank gets the
    same width (the narrowest that some device needs); where none fits, the
    last, and :func:`check_memory` then refuses the problem with its figures.
    One width needs no collective: every rank has the same list.
    """
    if len(widths) == 1:
        return widths[0]
    _, totals, free = _on_this_device(topo, backend, [needed(width) for width in widths])
    first = next((i for i, total in enumerate(totals) if total <= free), len(widths) - 1)
    return widths[max(topo.comm.allgather(first))]


def channel_slots(prefetch: int, row_vnodes, col_vnodes) -> tuple[int, int]:
    """The panel slots of a rank's A channel (its grid row) and B channel (its grid column).

    ``row_vnodes`` and ``col_vnodes``: the (virtual) node of every member of each.  A rank alone in
    its channel receives nothing and keeps no slot; a channel that spans nodes keeps at least two
    (:func:`~hpcmm.planning.algorithms.ring_depth`), as :class:`~hpcmm.execution.transport.PanelChannel` allocates them.

    >>> channel_slots(0, [0, 0], [0, 1]), channel_slots(2, [0], [0, 0])
    ((1, 2), (0, 3))
    """
    return tuple(ring_depth(prefetch, spans_nodes=len(set(vnodes)) > 1) if len(vnodes) > 1 else 0
                 for vnodes in (row_vnodes, col_vnodes))


def summa_choices(topo, backend, layout: Layout, config: RunConfig, worker_of: tuple[int, ...] | None = None
                  ) -> EngineChoices:
    """Collective over ``topo``: the choices of a SUMMA engine on ``layout``, its memory checked.

    ``config.panel`` ``None``: the widest of :func:`~hpcmm.planning.algorithms.panel_candidates`
    whose rings fit every device (:func:`widest_fitting`).  ``worker_of``: with ``--balance dynamic``,
    each rank's tile worker (:func:`tile_worker_of`; every rank its own where not given); the ranks
    that compute are those it names.

    Raises
    ------
    InputError
        On every rank: a panel wider than k, or blocks and panels that do not fit.
    """
    itemsize = numpy_dtype(config.dtype).itemsize
    prefetch = prefetch_of(config, backend.on_gpu)
    order = gemm_order(config.dtype, config.tf32, backend.on_gpu, config.gemm_order)
    slots = ring_depth(prefetch, spans_nodes=topo.vnode_count > 1)
    operand_slots = channel_slots(prefetch, topo.row_comm.allgather(topo.vnode), topo.col_comm.allgather(topo.vnode))
    relayout = scratch_slots(order, prefetch + 1)
    vnodes = ()
    if config.balance == "dynamic":  # hpcmm.execution.dynamic: GEMMs read the owners' blocks, as stored
        prefetch, order, slots, operand_slots, relayout = 0, "FC", 1, (0, 0), (0, 0)
        if topo.vnode_count > 1:  # the blocks of other nodes are copied in once a product
            vnodes = tuple(topo.comm.allgather(topo.vnode))

    def remote(lay: Layout, rank: int) -> int:
        return remote_block_bytes(lay, rank, vnodes, itemsize) if vnodes else 0

    def needed(width: int) -> int:
        return (memory_needed(layout, topo.rank, itemsize, width, operand_slots, relayout, backend.on_gpu)
                + remote(layout, topo.rank))

    panel = config.panel
    if panel is None:  # the default width, or a narrower one where its panel ring would not fit
        widths = panel_candidates([layout], itemsize, backend.on_gpu, shared=gpus_shared(topo, backend))
        panel = widest_fitting(topo, backend, widths, needed)
    if panel > layout.k:  # the same verdict on every rank
        agree(topo.comm, InputError(f"{config.origin('panel')}={panel}: wider than k={layout.k}"))
    # The memory check before the steps: a huge k must be refused, not planned step by step.
    slots_of = dict(topo.node_comm.allgather((topo.rank, operand_slots)))  # the ranks that may share a device

    def need_at(rank: int, m: int, n: int, k: int) -> int:  # at another size, with the same grid and weights
        other = dataclasses.replace(layout, m=m, n=n, k=k)
        return (memory_needed(other, rank, itemsize, min(panel, k), slots_of[rank], relayout, backend.on_gpu)
                + remote(other, rank))

    device_bytes, free = check_memory(
        topo, backend, needed(panel), f"problem m={layout.m}, n={layout.n}, k={layout.k} {numpy_dtype(config.dtype).name}",
        need_at, (layout.m, layout.n, layout.k))
    # own-first where every panel is a one-sided pull (one node); common where broadcasts need one order.
    order_of_steps = step_order(config.step_order, topo.vnode_count)
    steps = tuple(rank_plan(layout, topo.rank, panel, prefetch, own_order=order_of_steps == "own-first"))
    tiles, most_steps = (), max(topo.comm.allgather(len(steps)))
    gather, own_bytes = "", needed(panel)
    if config.balance == "dynamic":  # any rank may compute every tile: that many records per product
        worker_of = tuple(range(topo.size)) if worker_of is None else tuple(worker_of)
        if vnodes:  # tiles are handed out within a node: each node's ranks have a worker of their own
            worker_of = node_workers(worker_of, vnodes)
        workers = tuple(sorted(set(worker_of)))
        c_shapes = [layout.local_shapes(rank)["C"] for rank in range(topo.size)]
        count = tiles_per_block(topo.size, len(workers), backend.on_gpu)
        tiles = tuple(tile_rows(rows, backend.on_gpu, count) if cols else () for rows, cols in c_shapes)
        most_steps = max(1, sum(len(t) for t in tiles))
        # A lone worker shares its device with every rank (tile_workers): it gathers where the whole
        # operands fit beside the blocks, and multiplies tile by tile from the owners' blocks where not.
        # Over several nodes the blocks of other nodes are only in their copies: no whole operands.
        extra = 0 if vnodes else gather_bytes(layout, itemsize, lone_worker_gather(layout, workers))
        if extra and LONE_WORKER_GATHER and topo.comm.allreduce(int(device_bytes + extra <= free), op=MPI.MIN):
            gather, device_bytes = lone_worker_gather(layout, workers), device_bytes + extra
            own_bytes += extra * (topo.rank in workers)
    else:
        workers, worker_of = (), ()
    return EngineChoices(panel=panel, panel_auto=config.panel is None, prefetch=prefetch, gemm_order=order,
                         step_order=order_of_steps, rank_steps=steps, steps=most_steps, needed_bytes=own_bytes,
                         device_bytes=device_bytes, slots=slots,
                         operand_bytes=memory_parts(layout, topo.rank, itemsize, panel, operand_slots, relayout)[0],
                         free_bytes=int(free), tiles=tiles, workers=workers, worker_of=worker_of, gather=gather,
                         vnodes=vnodes)


def layered_choices(topo, backend, config: RunConfig, shape: tuple[int, int, int],
                    layers: Layers) -> tuple[Grid, LayeredLayout, EngineChoices]:
    """Collective over ``topo`` (all ranks, launch order): the 2.5D layers' grid, layout and choices.

    Each layer's grid faces as a summa run's on the same nodes
    (:func:`~hpcmm.planning.grid_orientation.facing`), so that one layer is summa block
    for block; every layer takes the same panel width (the widest the rule
    gives any layer, no wider than the shallowest layer's k), so that their
    step records line up.  A rank's bytes add the fiber reduction's scratch.

    Raises
    ------
    InputError
        On every rank: a panel wider than a layer's k, or what does not fit.
    """
    m, n, k = shape
    dtype = numpy_dtype(config.dtype)
    shared = gpus_shared(topo, backend)
    face = facing(config.grid_orientation, config.dtype, config.tf32, backend.on_gpu, topo.vnode_count, shared,
                  layers.layer_size, n)
    grid = choose_grid(layers.layer_size, None, face)
    layout = LayeredLayout(m, n, k, layers, grid)
    layer, layer_rank = layers.layer(topo.rank), layers.layer_rank(topo.rank)
    prefetch = prefetch_of(config, backend.on_gpu)
    order = gemm_order(config.dtype, config.tf32, backend.on_gpu, config.gemm_order)
    # A layer's channels span nodes when the job has several (its ranks are one per node at most q).
    slots = ring_depth(prefetch, spans_nodes=len(layers.nodes) > 1)
    # The layer grid's row and column of this rank (row-major over the layer's ranks) and their nodes.
    vnodes = topo.comm.allgather(topo.vnode)

    def slots_for(rank: int) -> tuple[int, int]:
        members = layers.members(layers.layer(rank))
        row, col = divmod(layers.layer_rank(rank), grid.cols)
        return channel_slots(prefetch, [vnodes[r] for r in members[row * grid.cols:(row + 1) * grid.cols]],
                             [vnodes[r] for r in members[col::grid.cols]])

    operand_slots = slots_for(topo.rank)
    relayout = scratch_slots(order, prefetch + 1)
    fiber = layers.fiber(topo.rank)
    reduction = scratch_bytes(layout.local_shapes_partial(topo.rank), layers.count, fiber.index(topo.rank),
                              dtype.itemsize)
    layer_layouts = [layout.layer_layout(index) for index in range(layers.count)]

    def needed(width: int) -> int:
        # The partial C is the layer engine's C block (memory_needed counts it), allocated by the reduction.
        return memory_needed(layer_layouts[layer], layer_rank, dtype.itemsize, width, operand_slots,
                             relayout, backend.on_gpu) + reduction

    panel = config.panel
    if panel is None:
        panel = widest_fitting(topo, backend, panel_candidates(layer_layouts, dtype.itemsize, backend.on_gpu,
                                                               shared=shared), needed)
    narrowest = min(layer_layout.k for layer_layout in layer_layouts)
    if panel > narrowest:  # the same verdict on every rank
        agree(topo.comm, InputError(
            f"{config.origin('panel')}={panel}: wider than the k of a 2.5d layer (k={k} over "
            f"{layers.count} layers: {narrowest} for the narrowest)"))
    def need_at(rank: int, m: int, n: int, k: int) -> int:  # at another size, with the same layers
        if k < layers.count:  # a layer would have no k of its own: never a problem that runs
            return 1 << 62
        other = LayeredLayout(m, n, k, layers, grid)
        partial = scratch_bytes(other.local_shapes_partial(rank), layers.count, layers.fiber(rank).index(rank),
                                dtype.itemsize)
        return memory_needed(other.layer_layout(layers.layer(rank)), layers.layer_rank(rank), dtype.itemsize,
                             min(panel, max(k // layers.count, 1)), slots_for(rank), relayout,
                             backend.on_gpu) + partial

    device_bytes, free = check_memory(topo, backend, needed(panel),
                                      f"problem m={m}, n={n}, k={k} {dtype.name} with {layers.count} layers",
                                      need_at, shape)
    # The layers' topologies span the job's nodes: one node, one-sided pulls; several, broadcasts.
    order_of_steps = step_order(config.step_order, topo.vnode_count)
    steps = tuple(rank_plan(layer_layouts[layer], layer_rank, panel, prefetch,
                            own_order=order_of_steps == "own-first"))
    choices = EngineChoices(panel=panel, panel_auto=config.panel is None, prefetch=prefetch, gemm_order=order,
                            step_order=order_of_steps, rank_steps=steps,
                            steps=topo.comm.allreduce(len(steps), op=MPI.MAX), needed_bytes=needed(panel),
                            device_bytes=device_bytes, slots=slots,
                            operand_bytes=memory_parts(layer_layouts[layer], layer_rank, dtype.itemsize, panel,
                                                       operand_slots, relayout)[0],
                            free_bytes=int(free))
    return grid, layout, choices
