"""``--balance dynamic``: the ranks of each node hand out the node's C tiles while a product runs.

Every rank holds its SUMMA blocks of A, B and C (the ``share`` layout) in memory that every
other rank of its node reads and writes directly: one CUDA IPC (GPU) or MPI shared-memory (CPU)
buffer per rank, mapped once.  A product is cut finer than one block per rank: each rank's C
block into :func:`tile_rows` row tiles.  Each rank keeps a counter of its tiles in an MPI shared-memory window;
a tile is claimed with one atomic ``Fetch_and_op``, so it is computed exactly once.  A rank first
takes its own tiles in order; once they are gone it takes the unclaimed tiles of the others
(the next rank first), reading their A and B panels from their owners' blocks and writing the
tile where its owner's C block holds it.  Every element of C is written once per product; the
blocks are where the verification and the results file look for them.  Ranks that share a GPU by
time slices (no MPS) leave every tile to the first of them (:func:`~hpcmm.planning.choices.tile_workers`):
one context then keeps the GPU busy, each block one tile.  While another program takes time slices
of that GPU, the others join it (:class:`JoinRule`).

On one node no panel moves: the GEMMs read the owners' memory (on one GPU, the same device memory;
between GPUs of a node, over NVLink through peer access).  Over several (virtual) nodes the work
between nodes stays as the ``share`` blocks cut it, and each node balances its own tiles: at the
start of each product every rank copies in, through MPI (:func:`~hpcmm.execution.transport.channel.select_paths`),
the A blocks of its grid row and the B blocks of its grid column that lie on other nodes, into its
shared buffer, where its node's ranks read them for its tiles (the bytes SUMMA would move between
nodes, moved before the tiles instead of under them; :data:`EARLY_LOCAL_GEMMS` starts each rank's first
tile on its node's blocks while they move).  A lone worker, where the operands fit twice,
first gathers the operands whose k the grid cuts (:func:`~hpcmm.planning.choices.lone_worker_gather`)
into one buffer each, on the communication stream while its first tile runs from the owners'
blocks; every later tile is then one GEMM over the whole of k.  The product ends when every rank has
synchronized its device and passed a barrier.

Each tile computed is one "step" of the rank's records (``/timings/steps``: its GEMM seconds,
no communication) and one row of ``/timings/tiles``: which rank computed which owner's tile.
"""

from __future__ import annotations

import collections
import dataclasses
from time import perf_counter

import numpy as np
from mpi4py import MPI

from ..planning.algorithms import Step, rank_plan
from ..planning.choices import EngineChoices
from ..planning.handoff import Handoff, TileCost, handoffs
from ..config import RunConfig
from ..dtypes import numpy_dtype
from .engine import IterationTimes, copy_in
from ..errors import collective_setup, raised_everywhere
from ..geometry.layout import Layout, padded
from .transport.channel import select_paths
from .transport.mpi import PointToPoint

__all__ = ["DynamicEngine", "DynamicTimes", "TileCounters", "block_k_offsets"]

#: Tiles a rank's device may still be running when it claims the next, where several ranks compute:
#: none, so that a slow rank never holds a tile queued behind its running one while a free rank
#: could take it (it would end the product late by one of its slow tiles).  The host's claim between
#: two tiles costs the device some tens of µs against milliseconds of a tile's GEMMs.  Measured
#: (docs/performance.md): two ran 10 % slower with 25 %/75 % MPS limits and no faster beside a
#: co-runner.  A lone worker queues every tile at once: nobody could take them.
QUEUED_TILES = 1

#: A lone worker's product this many times slower than its fastest alone: another program took time
#: slices of the GPU.  Time slices go to contexts in turn, so the ranks that share the GPU with the
#: worker then compute too (each context wins slices back), as ``share`` would.
JOIN_SLOWDOWN = 1.3
#: While they compute, every this many products the worker runs one alone again: the GPU may be free.
RETRY_ALONE = 8
#: Over several nodes, whether a rank queues the GEMMs of its first tile that read its node's blocks alone
#: before it copies in the other nodes' blocks (GPU, CPU), so that the device works while they arrive.  Off:
#: where MPI waits for the device's queued work before it sends, every node waits for the slowest node's
#: early GEMMs (two virtual nodes on one H100 under MPS at 25 %/75 % of the SMs, CUDA-aware Open MPI:
#: 38.1 TFLOP/s against 46.9 without, docs/performance.md); a CPU would run them before its blocks go
#: out.  tests/gpu/dynamic_check.sh's ``dynamic-early`` turns it on for a comparison, tests on CPUs.
EARLY_LOCAL_GEMMS = {True: 0, False: 0}
#: Over several nodes, whether tiles change node between products where the estimate says it pays
#: (:mod:`hpcmm.planning.handoff`); 0 keeps each node to its own tiles (tests/gpu/with_setting.py sets it
#: for a comparison).
NODE_HANDOFFS = 1


class TileCounters:
    """One 64-bit tile counter per rank of a node, in MPI shared memory, claimed with MPI's atomics.

    The window stays in one passive epoch to every rank (``Lock_all`` with ``MODE_NOCHECK``) from its
    creation to :meth:`close`: a claim is one ``Fetch_and_op`` and a ``Flush``, with no lock to acquire.
    A lock per claim waits until the counter's owner enters MPI (MPICH grants it by message): a rank that
    ran out of tiles then stood idle for one whole GEMM of a busy owner (0.33 s a product, 4096³ on two CPU
    cores; Open MPI's shared windows take the lock in place).

    Collective over ``comm`` (the node) to build and to close.
    """

    def __init__(self, comm) -> None:
        self.window = MPI.Win.Allocate_shared(8, 8, comm=comm)
        self.window.Lock_all(MPI.MODE_NOCHECK)
        self._one, self._zero = np.ones(1, dtype=np.int64), np.zeros(1, dtype=np.int64)
        self._got = np.zeros(1, dtype=np.int64)

    def claim(self, target: int) -> int:
        """Add one to node rank ``target``'s counter; returns its value before (the tile claimed)."""
        self.window.Fetch_and_op(self._one, self._got, target, 0, MPI.SUM)
        self.window.Flush(target)
        return int(self._got[0])

    def reset(self, target: int) -> None:
        """Set ``target``'s counter to 0 (atomically, as the claims are); complete when this returns.  The
        others may claim from it only after a collective that follows."""
        self.window.Fetch_and_op(self._zero, self._got, target, 0, MPI.REPLACE)
        self.window.Flush(target)

    def close(self) -> None:
        """Collective: end the epoch and free the window."""
        self.window.Unlock_all()
        self.window.Free()


class JoinRule:
    """Whether the ranks that time-slice a lone worker's GPU compute tiles too, one decision a product.

    Joined while the GPU is slow: after a product alone :data:`JOIN_SLOWDOWN` times slower than the
    fastest alone, until a joined product is that fast again (the GPU is free: alone is faster there),
    with one product alone every :data:`RETRY_ALONE` to look.

    >>> rule = JoinRule()
    >>> [rule.record(t) for t in (1.0, 1.1, 2.0, 1.7, 1.2)]
    [False, False, True, True, False]
    """

    def __init__(self) -> None:
        self.fastest_alone = float("inf")
        self.joined, self.joined_in_a_row = False, 0

    def record(self, seconds: float) -> bool:
        """The product that just ended took ``seconds``: whether the next one is joined."""
        slow = seconds > JOIN_SLOWDOWN * self.fastest_alone
        if self.joined:
            self.joined_in_a_row += 1
            self.joined = slow and self.joined_in_a_row % RETRY_ALONE != 0
        else:
            self.fastest_alone = min(self.fastest_alone, seconds)
            self.joined, self.joined_in_a_row = slow, 0
        return self.joined


def merged_spans(steps: list[Step]) -> list[Step]:
    """``steps`` (in k order) as the fewest GEMMs: consecutive steps that read the same two blocks at
    contiguous offsets become one step over their joint k range.

    Nothing moves in a dynamic product (a tile reads its panels where they lie), so the panel width
    only sets the GEMMs' count; one GEMM per pair of source blocks keeps each GEMM as wide as the
    owners allow.

    >>> [s.width for s in merged_spans([Step(0, 0, 4, 0, 0, 0, 0), Step(1, 4, 8, 0, 4, 0, 4),
    ...                                  Step(2, 8, 11, 1, 0, 0, 8)])]
    [8, 3]
    """
    spans: list[Step] = []
    for step in steps:
        last = spans[-1] if spans else None
        if (last is not None and (last.a_root, last.b_root) == (step.a_root, step.b_root) and last.k1 == step.k0
                and last.a_offset + last.width == step.a_offset and last.b_offset + last.width == step.b_offset):
            spans[-1] = dataclasses.replace(last, k1=step.k1)
        else:
            spans.append(step)
    return spans


def block_k_offsets(layout: Layout) -> tuple[list[int], list[int]]:
    """Where each grid column's A block and each grid row's B block start along k: the offsets at which a
    lone worker's whole operands (:func:`~hpcmm.planning.choices.lone_worker_gather`) hold them.

    >>> from hpcmm.geometry.layout import Grid
    >>> block_k_offsets(Layout(10, 10, 11, Grid(2, 3)))
    ([0, 4, 8], [0, 6])
    """
    grid = layout.grid
    a_widths = [layout.local_shapes(grid.rank(0, col))["A"][1] for col in range(grid.cols)]
    b_heights = [layout.local_shapes(grid.rank(row, 0))["B"][0] for row in range(grid.rows)]
    return [int(x) for x in np.cumsum([0] + a_widths[:-1])], [int(x) for x in np.cumsum([0] + b_heights[:-1])]


@dataclasses.dataclass
class DynamicTimes(IterationTimes):
    """One product's timings on this rank, and the tiles it computed: ``(owner, tile, row0, row1, seconds)``."""

    tiles: list = dataclasses.field(default_factory=list)


class DynamicEngine:
    """One rank's blocks, its node peers' mapped blocks, the tile counters, and the product loop.

    Collective over ``topo.comm`` (which must be one node), built and closed together.

    Parameters
    ----------
    topo : Topology
    backend : Backend
    layout : Layout
        The SUMMA blocks (each rank starts on its own).
    choices : EngineChoices
        The panel width each tile's GEMMs take along k, and the memory counted.
    config : RunConfig
    cuda_aware : bool
    """

    def __init__(self, topo, backend, layout: Layout, choices: EngineChoices, config: RunConfig,
                 cuda_aware: bool) -> None:
        self.topo, self.backend, self.layout, self.choices = topo, backend, layout, choices
        self.dtype = numpy_dtype(config.dtype)
        self.tf32, self.record_timeline = config.tf32, config.timeline
        self.panel, self.panel_auto, self.prefetch, self.ring = choices.panel, choices.panel_auto, 0, 1
        self.gemm_order, self.step_order = choices.gemm_order, choices.step_order
        self.gemm_order_label = choices.gemm_order_label
        self.device_bytes = choices.device_bytes
        size, itemsize = topo.size, self.dtype.itemsize
        shapes = [layout.local_shapes(rank) for rank in range(size)]
        self.m_loc, self.n_loc = shapes[topo.rank]["C"]
        #: Per rank: leading dimensions (A's columns, B's and C's rows, padded) and byte offsets.
        self._ld_a = [padded(s["C"][0], itemsize) for s in shapes]
        self._ld_bc = [padded(s["C"][1], itemsize) for s in shapes]
        self._sizes = [(self._ld_a[r] * s["A"][1], s["B"][0] * self._ld_bc[r], s["C"][0] * self._ld_bc[r])
                       for r, s in enumerate(shapes)]
        #: Every rank's tiles (:func:`~hpcmm.planning.choices.tile_rows`), and the plan each tile runs (its owner's
        #: SUMMA steps, in k order).
        self.tiles = choices.tiles
        #: The ranks of this rank's (virtual) node, in the node's order: they share tiles and memory.
        self.node_comm = topo.vnode_comm
        self.node_ranks = tuple(self.node_comm.allgather(topo.rank))
        self._node_index = {rank: i for i, rank in enumerate(self.node_ranks)}
        #: Every rank's (virtual) node, where there are several (else ``None``), as the planner gathered them.
        self.vnodes = choices.vnodes or None
        #: The ranks that compute tiles (:func:`~hpcmm.planning.choices.tile_workers`), and how many tiles a
        #: worker's device may hold when it claims the next.
        self.workers = choices.workers or tuple(range(size))
        #: Each rank's worker: a rank that is not one joins its worker's slow products (:class:`JoinRule`).
        self.worker_of = choices.worker_of or tuple(range(size))
        #: This node's workers: one alone queues every tile of the node (nobody could take them).
        self.node_workers = tuple(w for w in self.workers if w in self._node_index)
        self.queued = (QUEUED_TILES if len(self.node_workers) > 1
                       else max(1, sum(len(self.tiles[r]) for r in self.node_ranks)))
        self.join_rule = JoinRule()
        self.joined = False
        self._steps = [self._owner_steps(rank) for rank in range(size)]
        self.plan = self._steps[topo.rank]
        #: Per rank: the GEMMs each of its tiles runs (its steps merged where they read the same blocks).
        self._spans = [merged_spans(steps) for steps in self._steps]
        #: The most times one element of C is stored in a product (a tile's GEMMs): the check's rounding model.
        self.c_stores = max(len(spans) for spans in self._spans)
        #: Records per product: any rank may compute every tile.
        self.steps = choices.steps
        self.closed = False
        self.peers = self.counters = self.broadcast = self.moved = None
        self._copy_comms: list = []
        self.bytes_by_pair: collections.Counter = collections.Counter()
        #: Per rank of the node: where each of its copies of another node's block lies in its buffer,
        #: ``{("A" or "B", source rank): (offset, size)}`` in elements after its A, B and C.
        self._copies = {rank: self._copy_places(rank) for rank in self.node_ranks}
        peer_cls, broadcast_cls = select_paths(backend, cuda_aware)
        with collective_setup(topo.comm, self.close):
            self.peers = peer_cls(self.node_comm, backend)
            self._raw = self.peers.allocate(self._extent(topo.rank) * itemsize)
        with collective_setup(topo.comm, self.close):
            self.counters = TileCounters(self.node_comm)  # tiles are handed out within a node
        with collective_setup(topo.comm, self.close):
            self._copy_comms = self._copy_communicators()
            self.broadcast = broadcast_cls(backend) if self._copy_comms else None
        self._views = {rank: self._blocks(rank) for rank in self.node_ranks}
        self.A, self.B, self.C = self._views[topo.rank]
        #: Per rank of the node: the A blocks of its grid row and the B blocks of its grid column, by grid
        #: column and row, as its tiles read them (the owner's own block on this node, else the rank's copy).
        self._sources = {rank: self._tile_sources(rank) for rank in self.node_ranks}
        #: Per rank of the node: its tiles' GEMMs, those that read only this node's blocks first, and how many
        #: those are (all of them on one node): a rank queues them for its first tile before the copies.
        self._ordered = {rank: self._local_first(rank) for rank in self.node_ranks}
        #: Several nodes: every rank's tiles' costs for the estimate, what its device holds beyond its blocks,
        #: the path tiles take between nodes, and what this rank's last product did (:meth:`_handoffs`).
        self.handing = topo.vnode_count > 1 and bool(NODE_HANDOFFS)
        self._costs, self._spare, self._last_work = [], (), None
        if self.handing:
            self._costs = self._tile_costs()
            #: Each rank's grid column (a taker shares the owner's) and whether it may take a tile (a worker).
            self._columns = [self.layout.grid.coords(rank)[1] for rank in range(size)]
            self._can_take = [rank in self.workers for rank in range(size)]
            devices = self.node_comm.allgather(backend.device_id if backend.on_gpu else -1)
            sharers = devices.count(devices[self.node_comm.Get_rank()])
            self._spare = tuple(topo.comm.allgather(max(0, choices.free_bytes - choices.device_bytes) // sharers))
            # Tiles take the path the copies take: staged through pinned host memory where MPI is not CUDA-aware.
            self.moved = PointToPoint(backend, staged=broadcast_cls.path == "staged")
        #: The whole operands a lone worker gathers (per grid row for A, per grid column for B), and the
        #: copies that fill them: (destination, source, source rank) of flat views.
        self.gather = choices.gather if topo.rank in self.workers else ""
        self._whole_a, self._whole_b, self._gather_copies = self._gather_buffers()
        backend.poison(self.C)
        backend.synchronize()
        topo.comm.Barrier()

    def __enter__(self) -> DynamicEngine:
        return self

    def __exit__(self, kind, error, traceback) -> None:
        if raised_everywhere(error):
            self.close()

    # -- set-up ---------------------------------------------------------------
    def _owner_steps(self, rank: int):
        """The SUMMA steps of ``rank``'s block in k order, at the plan's panel width (no ramp: nothing moves)."""
        return rank_plan(self.layout, rank, self.panel, 0, own_order=False)

    def _copy_places(self, rank: int) -> dict:
        """Where ``rank`` keeps its copies of other nodes' blocks (:attr:`_copies`): the A blocks of its grid
        row, then the B blocks of its grid column, each stored as its owner stores it."""
        grid, places = self.layout.grid, {}
        row, col = grid.coords(rank)
        offset = sum(self._sizes[rank])
        sources = [("A", grid.rank(row, c)) for c in range(grid.cols)] + \
                  [("B", grid.rank(r, col)) for r in range(grid.rows)]
        for operand, source in sources:
            if source not in self._node_index:
                size = self._sizes[source][0 if operand == "A" else 1]
                places[(operand, source)] = (offset, size)
                offset += size
        return places

    def _extent(self, rank: int) -> int:
        """Elements of ``rank``'s buffer: its A, B and C, then its copies."""
        return sum(self._sizes[rank]) + sum(size for _, size in self._copies[rank].values())

    def _flat(self, rank: int):
        """``rank``'s buffer (A, B, C one after the other, then its copies) as a flat array of the product's type."""
        nbytes = self._extent(rank) * self.dtype.itemsize
        raw = self._raw if rank == self.topo.rank else self.peers.view(self._node_index[rank], nbytes)
        return raw.view(self.dtype)

    def _tile_costs(self) -> list[list[TileCost]]:
        """Every rank's tiles as the estimate counts them: ``2·rows·n·k`` flops, A's rows over the whole of k and
        C's rows as bytes that cross, the taker's buffers for both, and A's rows as what the owner sends before
        its own tiles (:meth:`_send_handed`)."""
        k, itemsize, costs = self.layout.k, self.dtype.itemsize, []
        for rank, tiles in enumerate(self.tiles):
            n_loc, ld = self.layout.local_shapes(rank)["C"][1], self._ld_bc[rank]
            costs.append([TileCost(2.0 * (r1 - r0) * n_loc * k, (r1 - r0) * (k + n_loc) * itemsize,
                                   (r1 - r0) * (k + ld) * itemsize, (r1 - r0) * k * itemsize) for r0, r1 in tiles])
        return costs

    def _copy_communicators(self) -> list:
        """Collective over the grid's rows and columns: per block this rank sends or copies in, ``(operand,
        source, communicator)``, the communicator holding the block's owner (its rank 0) and the ranks of its
        grid row (A) or column (B) on other nodes; empty on one node.

        Every rank of a row (column) splits once per grid column (row), in the same order.
        """
        topo, grid = self.topo, self.layout.grid
        if topo.vnode_count == 1:
            return []
        vnodes = self.vnodes
        me, (row, col) = topo.rank, grid.coords(topo.rank)
        comms = []
        for operand, line, count, position in (("A", topo.row_comm, grid.cols, col), ("B", topo.col_comm, grid.rows, row)):
            for root in range(count):
                source = grid.rank(row, root) if operand == "A" else grid.rank(root, col)
                member = me == source or vnodes[me] != vnodes[source]
                comm = line.Split(0 if member else MPI.UNDEFINED, (position - root) % count)
                if comm == MPI.COMM_NULL:
                    continue
                if comm.Get_size() == 1:
                    comm.Free()
                    continue
                comms.append((operand, source, comm))
        return comms

    def _tile_sources(self, rank: int) -> tuple[list, list]:
        """``rank``'s tiles' operands (:attr:`_sources`): A blocks by grid column, B blocks by grid row, each
        ``(array, rank whose memory holds it)``."""
        grid = self.layout.grid
        row, col = grid.coords(rank)
        flat = self._flat(rank) if self._copies[rank] else None

        def block(operand: str, source: int):
            if source in self._node_index:
                return self._views[source][0 if operand == "A" else 1], source
            offset, size = self._copies[rank][(operand, source)]
            shapes = self.layout.local_shapes(source)
            if operand == "A":
                (m_loc, k_a), ld = shapes["A"], self._ld_a[source]
                return flat[offset:offset + size].reshape((ld, k_a), order="F")[:m_loc], rank
            (k_b, n_loc), ld = shapes["B"], self._ld_bc[source]
            return flat[offset:offset + size].reshape((k_b, ld))[:, :n_loc], rank

        return ([block("A", grid.rank(row, c)) for c in range(grid.cols)],
                [block("B", grid.rank(r, col)) for r in range(grid.rows)])

    def _local_first(self, rank: int) -> tuple[list, int]:
        """``rank``'s merged spans (:attr:`_ordered`), those whose A and B blocks both lie on this node first,
        and how many those are.  A sum's order does not change what it is, only its rounding."""
        grid = self.layout.grid
        row, col = grid.coords(rank)
        spans = self._spans[rank]
        here = [grid.rank(row, span.a_root) in self._node_index and grid.rank(span.b_root, col) in self._node_index
                for span in spans]
        return [s for s, h in zip(spans, here) if h] + [s for s, h in zip(spans, here) if not h], sum(here)

    def _gather_buffers(self):
        """The whole operands of :attr:`gather` (empty lists where none), and the copies that fill them.

        A column-major A block is its columns one after the other, a row-major B block its rows: the
        blocks of one grid row (A) or column (B) laid end to end at their k offsets
        (:func:`block_k_offsets`) are the whole operand with the blocks' leading dimension, so each
        block is one contiguous copy.
        """
        grid, k, copies = self.layout.grid, self.layout.k, []
        a_offsets, b_offsets = block_k_offsets(self.layout)
        whole_a, whole_b = [], []
        for row in range(grid.rows if "A" in self.gather else 0):
            first = grid.rank(row, 0)
            ld, m_loc = self._ld_a[first], self.layout.local_shapes(first)["A"][0]
            whole = self.backend.empty((ld * k,), self.dtype)
            whole_a.append(whole.reshape((ld, k), order="F")[:m_loc])
            for col, offset in enumerate(a_offsets):
                source = grid.rank(row, col)
                size = self._sizes[source][0]
                copies.append((whole[ld * offset:ld * offset + size], self._flat(source)[:size], source))
        for col in range(grid.cols if "B" in self.gather else 0):
            first = grid.rank(0, col)
            ld, n_loc = self._ld_bc[first], self.layout.local_shapes(first)["B"][1]
            whole = self.backend.empty((k * ld,), self.dtype)
            whole_b.append(whole.reshape((k, ld))[:, :n_loc])
            for row, offset in enumerate(b_offsets):
                source = grid.rank(row, col)
                a_size, b_size, _ = self._sizes[source]
                copies.append((whole[ld * offset:ld * offset + b_size], self._flat(source)[a_size:a_size + b_size],
                               source))
        return whole_a, whole_b, copies

    def _blocks(self, rank: int):
        """``rank``'s A (column-major), B and C (row-major) as arrays of their logical shapes."""
        flat = self._flat(rank)
        a_size, b_size, c_size = self._sizes[rank]
        shapes = self.layout.local_shapes(rank)
        (m_loc, k_a), (k_b, n_loc) = shapes["A"], shapes["B"]
        ld_a, ld_bc = self._ld_a[rank], self._ld_bc[rank]
        a = flat[:a_size].reshape((ld_a, k_a), order="F")[:m_loc]
        b = flat[a_size:a_size + b_size].reshape((k_b, ld_bc))[:, :n_loc]
        c = flat[a_size + b_size:a_size + b_size + c_size].reshape((m_loc, ld_bc))[:, :n_loc]
        return a, b, c

    def needed_bytes(self) -> int:
        """This rank's blocks on its device (no ring: no panel moves)."""
        return self.choices.needed_bytes

    def load(self, a_host: np.ndarray, b_host: np.ndarray) -> None:
        """Copy this rank's blocks in (host arrays of the block shapes), then align the ranks."""
        copy_in(self.backend, self.A, a_host, self.dtype, axis=1)
        copy_in(self.backend, self.B, b_host, self.dtype, axis=0)
        self.backend.synchronize()
        self.topo.comm.Barrier()

    # -- the product ----------------------------------------------------------
    def _progress(self) -> None:
        """Let MPI serve the other ranks' claims on this rank's counter.

        Where an MPI's one-sided atomics on a node still need the target to enter MPI (no
        asynchronous progress without a helper thread; :class:`TileCounters` needs no lock), a rank
        busy multiplying calls in after every GEMM, so that a rank that ran out of work waits one
        GEMM at most for its claim.
        """
        self.topo.comm.Iprobe(MPI.ANY_SOURCE, MPI.ANY_TAG)

    def _claim(self, owner: int) -> int:
        """The next unclaimed tile of ``owner`` (one past its last once all are taken)."""
        return self.counters.claim(self._node_index[owner])

    def _copy_in(self) -> tuple[int, float]:
        """Several nodes: send this rank's A and B blocks to the ranks of its grid row and column on other
        nodes, and copy in theirs (:attr:`_copies`); returns once the node's ranks may read every copy, with
        the bytes this rank received and the seconds it took (the link's rate for :meth:`_handoffs`).

        The blocks are not written during a product (the last one ended with the device synchronized),
        so MPI may read them at once.  Every rank walks its communicators in the same order: A's along its
        row by grid column, then B's down its column by grid row.
        """
        if not self._copy_comms:
            return 0, 0.0
        start, received = perf_counter(), 0
        # The broadcasts move bytes (as the SUMMA channel's panels): offsets in elements times the item size.
        me, raw, item = self.topo.rank, self._raw, self.dtype.itemsize
        a_size, b_size, _ = self._sizes[me]
        for operand, source, comm in self._copy_comms:
            if source == me:
                self.broadcast.send(comm, raw[:a_size * item] if operand == "A"
                                    else raw[a_size * item:(a_size + b_size) * item])
                continue
            offset, size = self._copies[me][(operand, source)]
            self.broadcast.receive(comm, raw[offset * item:(offset + size) * item])
            self.bytes_by_pair[(source, me, self.broadcast.path)] += size * item
            received += size * item
        self.backend.synchronize()  # a staged copy lands on the communication stream
        seconds = perf_counter() - start
        self.node_comm.Barrier()  # every copy of the node is in place before any tile reads it
        return received, seconds

    # -- tiles that change node ----------------------------------------------
    def _handoffs(self, works) -> tuple[Handoff, ...]:
        """The estimate's moves for this product (:func:`~hpcmm.planning.handoff.handoffs`), from every rank's
        last product ``(compute seconds, flops, bytes copied in, seconds copying)``: each node's rate is its
        ranks' flops over the longest of their compute spans, the link's the median rate of the copies."""
        if not self.handing or any(work is None for work in works):
            return ()
        nodes = self.topo.vnode_count
        flops, spans = [0.0] * nodes, [0.0] * nodes
        for rank, (span, done, _, _) in enumerate(works):
            flops[self.vnodes[rank]] += done
            spans[self.vnodes[rank]] = max(spans[self.vnodes[rank]], span)
        rates = [f / s if s > 0 else 0.0 for f, s in zip(flops, spans)]
        links = [moved / seconds for _, _, moved, seconds in works if moved > 0 and seconds > 0]
        link = float(np.median(links)) if links else 0.0
        return handoffs(self.vnodes, self._columns, self._costs, rates, link, self._spare, can_take=self._can_take)

    def _a_rows(self, row0: int, row1: int):
        """A buffer for a tile's A rows over the whole of k: flat, and as a column-major matrix."""
        rows, k = row1 - row0, self.layout.k
        flat = self.backend.empty((rows * k,), self.dtype)
        return flat, flat.reshape((rows, k), order="F")

    def _send_handed(self, moves) -> list:
        """This rank's part of the moves before the tiles, in the moves' order (every rank walks them alike, so
        no send waits on a receive that waits on it): an owner packs each moved tile's A rows (its grid row's
        blocks, or its copies of them) and sends them; a taker receives them.  Returns the taker's
        ``(move, A rows)``."""
        me, comm, received = self.topo.rank, self.topo.comm, []
        a_offsets, _ = block_k_offsets(self.layout)
        for move in moves:
            if me not in (move.owner, move.taker):
                continue
            row0, row1 = self.tiles[move.owner][move.tile]
            flat, a_rows = self._a_rows(row0, row1)
            if me == move.owner:
                for col, (block, _) in enumerate(self._sources[me][0]):
                    offset = a_offsets[col]
                    self.backend.relayout(a_rows[:, offset:offset + block.shape[1]], block[row0:row1],
                                          self.backend.compute_stream)
                self.backend.stream_synchronize(self.backend.compute_stream)
                self.moved.send(comm, move.taker, move.tile, flat)
            else:
                self.moved.receive(comm, move.owner, move.tile, flat)
                self.bytes_by_pair[(move.owner, me, self.moved.path)] += flat.nbytes
                received.append((move, a_rows))
        return received

    def _handed_tile(self, move: Handoff, a_rows, stream):
        """Queue a moved tile's GEMMs (its owner's spans, A from the rows received, B this rank's grid
        column's blocks: the owner's own column) into a C buffer; returns the buffer, flat."""
        row0, row1 = self.tiles[move.owner][move.tile]
        n_loc, ld = self.layout.local_shapes(move.owner)["C"][1], self._ld_bc[move.owner]
        flat = self.backend.empty(((row1 - row0) * ld,), self.dtype)
        c = flat.reshape((row1 - row0, ld))[:, :n_loc]
        b_blocks = self._sources[self.topo.rank][1]
        for s, span in enumerate(self._spans[move.owner]):
            b = b_blocks[span.b_root][0][span.b_offset:span.b_offset + span.width]
            self.backend.gemm(a_rows[:, span.k0:span.k1], b, c, accumulate=s > 0, stream=stream, tf32=self.tf32)
            self._progress()
        return flat

    def _return_handed(self, moves, results: dict) -> None:
        """After the tiles, in the moves' order: a taker sends each moved tile's C rows back, its owner
        receives them where its C block holds them."""
        me, comm = self.topo.rank, self.topo.comm
        a_size, b_size, _ = self._sizes[me]
        ld = self._ld_bc[me]
        for move in moves:
            if me == move.taker:
                self.moved.send(comm, move.owner, move.tile, results[move])
            elif me == move.owner:
                row0, row1 = self.tiles[me][move.tile]
                rows = self._flat(me)[a_size + b_size + row0 * ld:a_size + b_size + row1 * ld]
                self.moved.receive(comm, move.taker, move.tile, rows)
                self.bytes_by_pair[(move.taker, me, self.moved.path)] += rows.nbytes

    def _gather(self, product_start) -> object:
        """Queue the copies that fill the whole operands on the communication stream, after
        ``product_start`` (the product's time holds them); returns the event of their end."""
        stream = self.backend.comm_stream
        self.backend.wait(stream, product_start)
        for dst, src, source in self._gather_copies:
            self.backend.copy(dst, src, stream=stream)
            if source != self.topo.rank:
                self.bytes_by_pair[(source, self.topo.rank, self.peers.path)] += src.nbytes
        return self.backend.event(stream)

    def _whole_tile(self, owner: int, row0: int, row1: int, stream) -> None:
        """Queue ``owner``'s C rows ``row0:row1`` = their A rows · B as one GEMM over the whole of k, from the
        gathered operands (an operand whose k the grid does not cut is its one block: the owner's own)."""
        grid = self.layout.grid
        row, col = grid.coords(owner)
        a = (self._whole_a[row] if self._whole_a else self._views[grid.rank(row, 0)][0])[row0:row1]
        b = self._whole_b[col] if self._whole_b else self._views[grid.rank(0, col)][1]
        self.backend.gemm(a, b, self._views[owner][2][row0:row1], accumulate=False, stream=stream, tf32=self.tf32)
        self._progress()
        for source, part, whole in ((grid.rank(row, 0), a, self._whole_a), (grid.rank(0, col), b, self._whole_b)):
            if not whole and source != self.topo.rank:
                self.bytes_by_pair[(source, self.topo.rank, self.peers.path)] += part.nbytes

    def _tile(self, owner: int, row0: int, row1: int, stream, first: int = 0, stop: int | None = None) -> None:
        """Queue ``owner``'s C rows ``row0:row1`` = their A rows · B, one GEMM per merged step (:attr:`_ordered`'s
        ``first:stop`` of them: a first tile's GEMMs may be queued in two parts); counts the bytes read
        from other ranks' blocks (:attr:`bytes_by_pair`)."""
        a_blocks, b_blocks = self._sources[owner]
        c = self._views[owner][2][row0:row1]
        spans = self._ordered[owner][0]
        for s, span in enumerate(spans[first:stop], first):
            (a_block, a_owner), (b_block, b_owner) = a_blocks[span.a_root], b_blocks[span.b_root]
            a = a_block[row0:row1, span.a_offset:span.a_offset + span.width]
            b = b_block[span.b_offset:span.b_offset + span.width]
            self.backend.gemm(a, b, c, accumulate=s > 0, stream=stream, tf32=self.tf32)
            self._progress()
            for source, part in ((a_owner, a), (b_owner, b)):
                if source != self.topo.rank:
                    self.bytes_by_pair[(source, self.topo.rank, self.peers.path)] += part.nbytes

    def multiply(self) -> DynamicTimes:
        """One product ``C = A·B`` over the node: own tiles first, then the others' unclaimed ones (a rank
        that is not a worker computes none: its device's worker takes them)."""
        backend, comm, me = self.backend, self.topo.comm, self.topo.rank
        stream = backend.compute_stream
        self.bytes_by_pair.clear()
        mine = self._node_index[me]
        self.counters.reset(mine)
        # Every counter is 0, the last product's tiles are written, and every rank knows which workers' GPUs
        # ran slow (the one exchange a product needs anyway, in place of a barrier).
        # With several nodes each rank's last product rides along, for the estimate of the tiles that move.
        reports = comm.allgather((self.joined if me in self.workers else False, self._last_work))
        self.joined = reports[self.worker_of[me]][0]
        start = perf_counter()
        product_start = backend.event(stream)
        moves = self._handoffs([work for _, work in reports])
        limit = {owner: len(self.tiles[owner]) - sum(move.owner == owner for move in moves) for owner in self.node_ranks}
        computes = me in self.workers or self.joined
        # Where EARLY_LOCAL_GEMMS is on, over several nodes, the rank's first tile starts on its GEMMs that read
        # this node's blocks alone while the other nodes' blocks are copied in: (tile, start event, event where
        # those GEMMs end) or None.
        early = self._early_tile(limit[me], stream) if computes else None
        copied = self._copy_in()
        handed = self._send_handed(moves)
        done = []  # (owner, tile, start event, end event, (pause's start event, its end event) or None)
        size = len(self.node_ranks)
        # A joined product: the worker keeps no more tiles queued than the ranks that join it.
        queued = QUEUED_TILES if self.joined else self.queued
        owners = [self.node_ranks[(mine + shift) % size] for shift in range(size)] if computes else []
        gathered = self._gather(product_start) if self.gather else None
        for owner in owners:
            tiles = self.tiles[owner]
            while True:
                if early is not None:  # its other GEMMs, now that the copies are in
                    index, begin, paused = early
                    early, resumed = None, backend.event(stream)
                    self._tile(owner, *tiles[index], stream, first=self._ordered[owner][1])
                    done.append((owner, index, begin, backend.event(stream), (paused, resumed)))
                    continue
                # A GPU runs behind its host: claim a tile only once the device has fewer than
                # `queued` left, so that the tiles go to the ranks whose device is free, not whose
                # host is fast.
                while len(done) >= queued and not backend.event_done(done[-queued][3]):
                    self._progress()
                index = self._claim(owner)
                if index >= limit[owner]:  # a moved tile is one of the last: another node computes it
                    break
                if gathered is not None and done:  # the first tile ran while the copies did
                    backend.wait(stream, gathered)
                    gathered = None
                begin = backend.event(stream)
                if self.gather and done:
                    self._whole_tile(owner, *tiles[index], stream)
                else:
                    self._tile(owner, *tiles[index], stream)
                done.append((owner, index, begin, backend.event(stream), None))
        results = {}
        for move, a_rows in handed:
            begin = backend.event(stream)
            results[move] = self._handed_tile(move, a_rows, stream)
            done.append((move.owner, move.tile, begin, backend.event(stream), None))
        backend.synchronize()
        self._return_handed(moves, results)
        product_end = backend.event(stream)
        backend.synchronize()
        comm.Barrier()  # every tile of every block is written
        if me in self.workers and len(self.node_workers) < size:
            self.joined = self.join_rule.record(perf_counter() - start)
        if self.handing:
            # The node's rate counts its GEMMs' time, not the wait for the copies inside its first tile.
            span = backend.elapsed(done[0][2], done[-1][3]) - sum(map(self._paused, done)) if done else 0.0
            flops = sum(self._costs[owner][index].flops for owner, index, *_ in done)
            self._last_work = (span, flops, *copied)
        return self._times(product_start, product_end, done, start)

    def _early_tile(self, limit: int, stream):
        """Several nodes: claim this rank's first tile and queue its GEMMs that read this node's blocks alone,
        before the copies of the other nodes' blocks (:meth:`_copy_in`), so that the device works while they
        arrive; returns ``(tile, start event, event after those GEMMs)``, or ``None`` where there is nothing
        to start (one node, no such GEMM, a lone worker's gathered operands, or no tile left to this node)."""
        me = self.topo.rank
        if not (self._copy_comms and EARLY_LOCAL_GEMMS[self.backend.on_gpu]) or self.gather or not self._ordered[me][1]:
            return None
        index = self._claim(me)
        if index >= limit:  # its tiles all went to other nodes; the loop's next claim finds none either
            return None
        begin = self.backend.event(stream)
        self._tile(me, *self.tiles[me][index], stream, stop=self._ordered[me][1])
        return index, begin, self.backend.event(stream)

    def _paused(self, entry) -> float:
        """Seconds a tile of ``done`` waited between its two parts (:meth:`_early_tile`): no GEMM of it ran."""
        pause = entry[4]
        return self.backend.elapsed(*pause) if pause is not None else 0.0

    def _times(self, product_start, product_end, done, start: float) -> DynamicTimes:
        elapsed = self.backend.elapsed
        steps = np.zeros((self.steps, 3))
        host = np.zeros(self.steps)
        rows, tiles, previous = [], [], 0.0
        for i, entry in enumerate(done):
            owner, index, begin, end, _ = entry
            t0, t1 = elapsed(product_start, begin), elapsed(product_start, end)
            steps[i, 0] = t1 - t0 - self._paused(entry)
            host[i] = max(0.0, t0 - previous)
            previous = t1
            row0, row1 = self.tiles[owner][index]
            tiles.append((owner, index, row0, row1, steps[i, 0]))
            if self.record_timeline:  # a tile in two parts is two boxes, the copies' wait between them
                pause = entry[4]
                cuts = (t0, t1) if pause is None else (t0, *(elapsed(product_start, e) for e in pause), t1)
                rows.extend((0, 0, i, cuts[j], cuts[j + 1]) for j in range(0, len(cuts), 2))
        timeline = np.array(rows, dtype=np.float64).reshape(-1, 5) if self.record_timeline else None
        return DynamicTimes(elapsed(product_start, product_end), steps, timeline, start, host, tiles)

    # -- tear-down ------------------------------------------------------------
    def close(self) -> None:
        """Collective: the counters' window, then the mapped blocks."""
        if self.closed:
            return
        self.closed = True
        self.backend.synchronize()
        self.backend.forget_gemm_plans()
        self._views, self._sources = {}, {}
        self._whole_a, self._whole_b, self._gather_copies = [], [], []
        self.A = self.B = self.C = None
        for _, _, comm in self._copy_comms:
            comm.Free()
        self._copy_comms = []
        if self.broadcast is not None:
            self.broadcast.close()
            self.broadcast = None
        if self.moved is not None:
            self.moved.close()
            self.moved = None
        if self.counters is not None:
            self.counters.close()
            self.counters = None
        if self.peers is not None:
            self.peers.close()
            self.peers = None
