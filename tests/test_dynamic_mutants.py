"""What ``--balance dynamic`` promises, over several ranks that are threads of this process.

Written against the mutants that mutation testing of hpcmm/execution/dynamic.py left alive or
without a test (docs/mutation.md: ``tests/mpi/test_dynamic_mpi.py`` runs its several ranks under
mpiexec, outside mutmut's process).  The ranks are threads meeting in :class:`~thread_comm.ThreadComm`'s
collectives, their blocks in the shared windows of :mod:`peer_stand_ins`, the tile counters in a
stand-in of MPI's shared window with its atomic ``Fetch_and_op``.  Each rank is a CPU whose GEMMs take
a known time on a clock of its own (its flops over its rate), so that which rank is slow, and what
each product's records say, is known.  Pinned from outside: C, every product, against numpy; every
tile computed exactly once, where its owner's block holds it; the bytes read from each other rank, by
path; the records of a product (a step and a timeline box per tile); the blocks of other nodes
copied in; a lone worker gathering the operands; the tiles a slow node hands to a fast one; and the
ranks that join a lone worker's slow products.
"""

from __future__ import annotations

import collections
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest
from mpi4py import MPI
from peer_stand_ins import shared_windows
from thread_comm import ThreadComm

from hpcmm.config import RunConfig
from hpcmm.execution import dynamic as dynamic_module
from hpcmm.execution.backend import CpuBackend
from hpcmm.execution.dynamic import DynamicEngine, DynamicTimes
from hpcmm.geometry.layout import Grid, Layout, padded
from hpcmm.planning.choices import summa_choices

_clock = threading.local()  # the backend of the rank this thread runs


class World(ThreadComm):
    """The job's communicator: mpi4py's object reductions, a probe, and buffered point-to-point messages."""

    def __init__(self, size, *split):
        super().__init__(size, *split)  # ``split``: what ThreadComm.Split passes to a communicator of this class
        self.mail = collections.defaultdict(collections.deque)  # (source, dest, tag): messages

    def allreduce(self, value, op=MPI.SUM):
        values = self._exchange(value)
        return min(values) if op == MPI.MIN else max(values) if op == MPI.MAX else sum(values)

    def Iprobe(self, source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG):  # noqa: N802 - MPI's spelling
        assert source == MPI.ANY_SOURCE and tag == MPI.ANY_TAG, (source, tag)  # what the engine serves: any claim
        return False

    def Send(self, buf, dest, tag=0):  # noqa: N802
        key, job = (self.Get_rank(), dest, tag), self._job
        with job.cond:
            self.mail[key].append(np.array(buf, copy=True))
            if job.receiving.get(self.job_ranks[dest]) == (id(self), key):
                job.waiting.discard(self.job_ranks[dest])  # its receive completes: it is no longer waiting
            job.cond.notify_all()

    def Recv(self, buf, source, tag=0):  # noqa: N802
        key, job, me = (source, self.Get_rank(), tag), self._job, self.job_ranks[self.Get_rank()]
        with job.cond:
            # Not once the sender's body has ended without sending (it failed): it never will; nor once every rank
            # still running waits, in a collective or a receive (a deadlock, as a message never sent makes).
            if not self.mail[key]:
                job.waiting.add(me)
                job.receiving[me] = (id(self), key)
                job.check()
                job.cond.wait_for(lambda: self.mail[key] or job.deadlock or self.job_ranks[source] in job.gone,
                                  timeout=60)
                job.waiting.discard(me)
                job.receiving.pop(me, None)
            assert self.mail[key], f"no message {key}"
            got = self.mail[key].popleft()
        assert got.shape == np.shape(buf) and got.dtype == buf.dtype, (got.shape, buf.shape)
        buf[...] = got


class _Counters:
    """MPI's shared window of one 64-bit counter per rank of a node, its atomics under one lock.  As MPI, it
    takes only a member's rank, an epoch to every rank (``Lock_all``) around its atomics, and the one
    displacement the window of one counter has; a ``Flush`` is what completes an atomic for its caller."""

    def __init__(self, comm, cells, lock):
        self.comm, self.cells, self.lock, self.freed = comm, cells, lock, False
        self.held = threading.local()

    def _member(self, rank):
        assert not self.freed
        assert isinstance(rank, int) and 0 <= rank < len(self.cells), f"no rank {rank!r}"

    def Lock_all(self, assertion=0):  # noqa: N802
        assert not getattr(self.held, "all", False), "Lock_all twice"
        self.held.all, self.held.pending = True, {}

    def Unlock_all(self):  # noqa: N802
        assert getattr(self.held, "all", False), "Unlock_all without Lock_all"
        self.held.all = False

    def Flush(self, rank):  # noqa: N802
        self._member(rank)
        assert getattr(self.held, "all", False)
        for result, value in self.held.pending.pop(rank, ()):
            result[0] = value

    def Fetch_and_op(self, origin, result, rank, target_disp=0, op=MPI.SUM):  # noqa: N802
        self._member(rank)
        assert getattr(self.held, "all", False), "an atomic outside an epoch"
        assert isinstance(target_disp, int) and target_disp == 0, f"displacement {target_disp!r}: one counter"
        assert op in (MPI.SUM, MPI.REPLACE), op
        with self.lock:  # the old value reaches ``result`` only at the Flush, as MPI allows
            self.held.pending.setdefault(rank, []).append((result, int(self.cells[rank][0])))
            self.cells[rank][0] = np.asarray(origin)[0] + (self.cells[rank][0] if op == MPI.SUM else 0)

    def Free(self):  # noqa: N802
        assert not getattr(self.held, "all", False), "Free inside an epoch"
        assert not getattr(self.held, "pending", None), "an atomic never flushed"
        self.comm.Barrier()
        self.freed = True


class _Mpi:
    """``mpi4py.MPI`` as hpcmm.execution.dynamic uses it, with shared windows over the threads' communicators."""

    class Win:
        @staticmethod
        def Allocate_shared(size, disp_unit=1, info=MPI.INFO_NULL, comm=MPI.COMM_SELF):  # noqa: N802
            assert (size, disp_unit) == (8, 8), (size, disp_unit)
            cells = comm.allgather(np.zeros(1, dtype=np.int64))
            return _Counters(comm, cells, comm.allgather(threading.Lock())[0])

    def __getattr__(self, name):
        return getattr(MPI, name)


class Clocked(CpuBackend):
    """A CPU rank on a clock of its own: a GEMM takes its flops over ``rate``; copies and messages take no time
    unless ``copy_rate`` (bytes a second) says so.  Events are the clock's readings."""

    def __init__(self, rate=1e9, copy_rate=None):
        super().__init__()
        self.rate, self.copy_rate, self.t, self.gemms, self.types = rate, copy_rate, 0.0, [], set()
        self.pause = 0.0  # real seconds a GEMM also takes, so that other ranks' threads claim tiles meanwhile

    def event(self, stream=None):
        return self.t

    def gemm(self, a, b, c, accumulate, stream=None, tf32=False):
        super().gemm(a, b, c, accumulate, stream, tf32)
        self.gemms.append((a.shape[0], a.shape[1], b.shape[1], accumulate))
        self.types.add((a.dtype, b.dtype, c.dtype))
        self.t += 2.0 * a.shape[0] * a.shape[1] * b.shape[1] / self.rate
        if self.pause:
            time.sleep(self.pause)

    def moved(self, nbytes):
        if self.copy_rate:
            self.t += nbytes / self.copy_rate


def _now():
    return _clock.backend.t


@pytest.fixture
def stand_ins(monkeypatch):
    """Shared windows and counters over the threads' communicators; the engine's host clock is its rank's."""
    shared_windows(monkeypatch)
    monkeypatch.setattr(dynamic_module, "MPI", _Mpi())
    monkeypatch.setattr(dynamic_module, "perf_counter", _now)
    bcast = ThreadComm.Bcast

    def timed_bcast(self, buf, root=0):
        bcast(self, buf, root)
        _clock.backend.moved(np.asarray(buf).nbytes)

    monkeypatch.setattr(ThreadComm, "Bcast", timed_bcast)


def topology(world, rank, grid, vnodes):
    row, col = grid.coords(rank)
    node_comm = world.Split(0, rank)
    vnode_comm = world.Split(vnodes[rank], rank)
    row_comm, col_comm = world.Split(row, col), world.Split(col, row)
    return SimpleNamespace(comm=world, node_comm=node_comm, vnode_comm=vnode_comm, row_comm=row_comm,
                           col_comm=col_comm, vnode=vnodes[rank], vnode_count=len(set(vnodes)), rank=rank,
                           size=world.Get_size())


def operands(m, n, k, dtype=np.float64, seed=7):
    rng = np.random.default_rng(seed)
    return (rng.random((m, k)) * 2 - 1).astype(dtype), (rng.random((k, n)) * 2 - 1).astype(dtype)


def run_dynamic(shape, grid, vnodes, *, products=2, rates=None, worker_of=None, copy_rate=None, between=None,
                dtype="float64", world=None, **options):
    """Build a dynamic engine on every rank, load random A and B, run ``products`` products; returns per rank
    ``{"times": [DynamicTimes], "bytes": [bytes_by_pair of each product], "choices", "gemms", "engine"}``.

    ``rates``: each rank's flops a second; ``between(rank, product, backend)`` runs before each product; ``world``:
    the job's communicator, where the test needs it."""
    m, n, k = shape
    grid = Grid(*grid)
    size = grid.size
    a, b = operands(m, n, k, np.dtype(dtype))
    layout = Layout(m, n, k, grid)
    config = RunConfig(m=m, n=n, k=k, balance="dynamic", dtype=dtype, **options)
    world = world or World(size)
    rates = rates or [1e9] * size

    def body(rank):
        backend = _clock.backend = Clocked(rates[rank], copy_rate)
        topo = topology(world, rank, grid, vnodes)
        choices = summa_choices(topo, backend, layout, config, worker_of)
        engine = DynamicEngine(topo, backend, layout, choices, config, False)
        out = {"times": [], "bytes": [], "choices": choices, "engine": engine}
        with engine:
            (a_rows, a_cols), (b_rows, b_cols) = layout.a_block(rank), layout.b_block(rank)
            engine.load(a[slice(*a_rows), slice(*a_cols)], b[slice(*b_rows), slice(*b_cols)])
            assert np.isnan(engine.C).all()  # poisoned until a product writes it
            for product in range(products):
                if between is not None:
                    between(rank, product, backend)
                backend.gemms = []
                out.setdefault("starts", []).append(backend.t)
                out["times"].append(engine.multiply())
                out["bytes"].append(dict(engine.bytes_by_pair))
                (c_rows, c_cols) = layout.c_block(rank)
                out.setdefault("C", []).append(np.array(engine.C))
                expected = (a.astype(np.float64) @ b.astype(np.float64))[slice(*c_rows), slice(*c_cols)]
                tolerance = 1e-12 if dtype == "float64" else 1e-4
                np.testing.assert_allclose(engine.C, expected, rtol=tolerance, atol=tolerance)
            out["gemms"] = backend.gemms
        assert engine.closed and engine.C is None and engine.counters is None and engine.peers is None
        return out

    outcomes = world.run(body)
    assert all(how == "returned" for how, _ in outcomes), outcomes
    return [value for _, value in outcomes], layout


def tiles_of(results, product):
    """Every rank's tiles of one product: ``(computing rank, owner, tile, row0, row1)``."""
    return sorted((rank, *t[:4]) for rank, r in enumerate(results) for t in r["times"][product].tiles)


def check_every_tile_once(results, layout):
    tiles = results[0]["choices"].tiles
    for product in range(len(results[0]["times"])):
        done = [(owner, tile, row0, row1) for _, owner, tile, row0, row1 in tiles_of(results, product)]
        expected = [(owner, i, *rows) for owner in range(layout.grid.size) for i, rows in enumerate(tiles[owner])]
        assert sorted(done) == expected, product


def read_bytes(layout, owner, row0, row1, reader, itemsize=8):
    """The bytes a tile of ``owner``'s rows ``row0:row1`` reads from each other rank's blocks, on one node:
    for every k, its A row piece from the owner of that k in its grid row, its B row from the owner in its column."""
    grid = layout.grid
    row, col = grid.coords(owner)
    n_loc = layout.local_shapes(owner)["C"][1]
    got = collections.Counter()
    for kk in range(layout.k):
        a_source = grid.rank(row, layout.a_k_owner(kk))
        b_source = grid.rank(layout.b_k_owner(kk), col)
        got[a_source] += (row1 - row0) * itemsize
        got[b_source] += n_loc * itemsize
    return {source: nbytes for source, nbytes in got.items() if source != reader and nbytes}


# -- one node -------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape, grid, dtype", [((300, 45, 37), (2, 2), "float64"), ((520, 40, 33), (4, 1), "float64"),
                                               ((140, 96, 29), (1, 3), "float64"), ((300, 45, 37), (2, 2), "float32")],
                         ids=["square_grid", "column_grid", "row_grid", "float32"])
def test_one_node_computes_every_tile_once_and_counts_what_it_reads(stand_ins, shape, grid, dtype):
    results, layout = run_dynamic(shape, grid, (0,) * (grid[0] * grid[1]), panel=4, dtype=dtype)
    itemsize = np.dtype(dtype).itemsize
    check_every_tile_once(results, layout)
    tiles = results[0]["choices"].tiles
    assert sum(len(t) for t in tiles) > layout.grid.size  # several tiles a block: some to hand out
    for product in range(2):
        for rank, r in enumerate(results):
            expected = collections.Counter()
            for owner, _, row0, row1, _ in r["times"][product].tiles:
                for source, nbytes in read_bytes(layout, owner, row0, row1, rank, itemsize).items():
                    expected[(source, rank, "shm")] += nbytes
            assert r["bytes"][product] == dict(expected), (rank, product)
            assert r["C"][product].dtype == np.dtype(dtype)


def test_a_tile_is_one_gemm_per_pair_of_blocks_it_reads(stand_ins):
    """Panels of 4 over k = 37 on a 2 × 2 grid (blocks of 19 and 18 along k): each tile's GEMMs are one per
    pair of A and B blocks (two), the first writing C, the second adding to it."""
    results, layout = run_dynamic((300, 45, 37), (2, 2), (0,) * 4, panel=4, products=1)
    for rank, r in enumerate(results):
        tiles = r["times"][0].tiles
        assert len(r["gemms"]) == 2 * len(tiles)
        for t, (owner, _, row0, row1, _) in enumerate(tiles):
            n_loc = layout.local_shapes(owner)["C"][1]
            assert r["gemms"][2 * t:2 * t + 2] == [(row1 - row0, 19, n_loc, False), (row1 - row0, 18, n_loc, True)]


def test_the_records_of_a_product_are_its_tiles(stand_ins):
    """Each tile computed is a step (its GEMM seconds on the rank's clock, no communication) and a box of the
    timeline on the compute stream; the product's seconds run from its start to its last tile; the host's
    gaps between tiles are none here (the clock only moves in GEMMs)."""
    rates = [1e9, 2e9, 4e9, 1e9]
    results, layout = run_dynamic((300, 45, 37), (2, 2), (0,) * 4, panel=4, rates=rates, timeline=True)
    steps = results[0]["choices"].steps
    for rank, r in enumerate(results):
        for product, times in enumerate(r["times"]):
            assert isinstance(times, DynamicTimes)
            count = len(times.tiles)
            assert times.steps.shape == (steps, 3) and times.host.shape == (steps,)
            seconds = [2.0 * (row1 - row0) * layout.k * layout.local_shapes(owner)["C"][1] / rates[rank]
                       for owner, _, row0, row1, _ in times.tiles]
            np.testing.assert_allclose(times.steps[:count, 0], seconds, rtol=1e-12)
            np.testing.assert_allclose([t[4] for t in times.tiles], seconds, rtol=1e-12)
            assert not times.steps[:, 1:].any() and not times.steps[count:].any()
            assert not times.host.any()
            assert times.start == r["starts"][product]  # the rank's host clock at the product's start
            assert times.seconds == pytest.approx(sum(seconds), rel=1e-12, abs=0)
            ends = np.cumsum(seconds)
            expected = [(0, 0, i, end - s, end) for i, (s, end) in enumerate(zip(seconds, ends))]
            np.testing.assert_allclose(times.timeline, np.array(expected).reshape(-1, 5), rtol=1e-12, atol=1e-15)


def test_no_timeline_unless_asked_for(stand_ins):
    results, _ = run_dynamic((300, 45, 37), (2, 2), (0,) * 4, panel=4, products=1, timeline=False)
    assert all(r["times"][0].timeline is None for r in results)


def copied_bytes(layout, rank, vnodes, itemsize=8):
    """What ``rank`` copies in from other nodes: the A blocks of its grid row and the B blocks of its grid
    column held there, each with its padding."""
    grid, got = layout.grid, {}
    row, col = grid.coords(rank)
    for source in [grid.rank(row, c) for c in range(grid.cols)]:
        if vnodes[source] != vnodes[rank]:
            (m_loc, k_a) = layout.local_shapes(source)["A"]
            got[source] = got.get(source, 0) + padded(m_loc, itemsize) * k_a * itemsize
    for source in [grid.rank(r, col) for r in range(grid.rows)]:
        if vnodes[source] != vnodes[rank]:
            (k_b, n_loc) = layout.local_shapes(source)["B"]
            got[source] = got.get(source, 0) + k_b * padded(n_loc, itemsize) * itemsize
    return got


def node_read_bytes(layout, owner, row0, row1, reader, vnodes, itemsize=8):
    """:func:`read_bytes` over several nodes: a block of another node is read from the owner's copy of it."""
    grid = layout.grid
    row, col = grid.coords(owner)
    n_loc = layout.local_shapes(owner)["C"][1]
    got = collections.Counter()
    for kk in range(layout.k):
        a_source = grid.rank(row, layout.a_k_owner(kk))
        b_source = grid.rank(layout.b_k_owner(kk), col)
        got[a_source if vnodes[a_source] == vnodes[owner] else owner] += (row1 - row0) * itemsize
        got[b_source if vnodes[b_source] == vnodes[owner] else owner] += n_loc * itemsize
    return {source: nbytes for source, nbytes in got.items() if source != reader and nbytes}


@pytest.mark.parametrize("vnodes", [(0, 0, 1, 1), (0, 1, 0, 1), (0, 1, 1, 0)], ids=["rows", "columns", "crossed"])
def test_over_two_nodes_each_copies_in_the_other_nodes_blocks_once(stand_ins, vnodes, monkeypatch):
    """Each node's ranks compute its tiles only (nothing moves: every rank as fast), from the blocks of its node
    and the copies of the other node's blocks that each rank takes in through MPI before its tiles."""
    results, layout = run_dynamic((300, 45, 37), (2, 2), vnodes, panel=4, products=3)
    check_every_tile_once(results, layout)
    for product in range(3):
        for rank, r in enumerate(results):
            expected = collections.Counter()
            for source, nbytes in copied_bytes(layout, rank, vnodes).items():
                expected[(source, rank, "mpi")] += nbytes
            for owner, _, row0, row1, _ in r["times"][product].tiles:
                assert vnodes[owner] == vnodes[rank]
                for source, nbytes in node_read_bytes(layout, owner, row0, row1, rank, vnodes).items():
                    expected[(source, rank, "shm")] += nbytes
            assert r["bytes"][product] == dict(expected), (rank, product)


@pytest.mark.parametrize("early", [0, 1], ids=["copies_first", "early_gemms"])
def test_a_first_tile_may_start_on_its_nodes_blocks_while_the_copies_arrive(stand_ins, monkeypatch, early):
    """With the early GEMMs on, a rank's first tile runs its GEMMs over this node's blocks, then the others once
    the copies are in (a pause on its clock between the two: the copies took 1 s a megabyte); its step counts its
    GEMMs only, and the timeline shows it as two boxes around the pause.  C is right either way."""
    monkeypatch.setitem(dynamic_module.EARLY_LOCAL_GEMMS, False, early)
    monkeypatch.setattr(dynamic_module, "NODE_HANDOFFS", 0)
    results, layout = run_dynamic((300, 45, 37), (2, 2), (0, 1, 0, 1), panel=4, products=2, copy_rate=1e6,
                                  timeline=True)
    check_every_tile_once(results, layout)
    for rank, r in enumerate(results):
        for times in r["times"]:
            seconds = [2.0 * (row1 - row0) * layout.k * layout.local_shapes(owner)["C"][1] / 1e9
                       for owner, _, row0, row1, _ in times.tiles]
            count = len(seconds)
            np.testing.assert_allclose(times.steps[:count, 0], seconds, rtol=1e-12)
            boxes = times.timeline
            assert count or not early  # an early tile is claimed before the copies: every rank has one
            if not count:
                continue
            first = boxes[boxes[:, 2] == 0]
            assert len(first) == (2 if early else 1)
            assert len(boxes) == count + (1 if early else 0)
            np.testing.assert_allclose(sum(first[:, 4] - first[:, 3]), seconds[0], rtol=1e-12)
            # The host's gap before each tile: before the first, the copies where they came first; none after.
            np.testing.assert_allclose(times.host[:count], [boxes[0, 3]] + [0.0] * (count - 1), rtol=1e-12, atol=0)
            assert (boxes[0, 3] > 0) == (not early)
            if early:
                assert first[1, 3] > first[0, 4]  # the pause: the copies
                assert times.tiles[0][:2] == (rank, 0)  # its own first tile


# -- a lone worker ---------------------------------------------------------------------------------


@pytest.mark.parametrize("grid, gathered", [((2, 2), "AB"), ((1, 3), "A"), ((3, 1), "B")], ids=["AB", "A", "B"])
def test_a_lone_worker_gathers_the_cut_operands_and_computes_every_tile(stand_ins, grid, gathered):
    """Every rank's worker is rank 0: it computes every tile, the others none.  Its first tile reads the owners'
    blocks (one GEMM per pair of blocks) while it copies the blocks whose k the grid cuts into whole operands;
    every later tile is one GEMM over the whole of k.  The bytes it reads from each other rank: the blocks it
    gathers, and what its first tile read from them."""
    size = grid[0] * grid[1]
    m, n, k = 150 * grid[0], 30 * grid[1], 37
    results, layout = run_dynamic((m, n, k), grid, (0,) * size, panel=4, worker_of=(0,) * size, products=2)
    assert results[0]["choices"].gather == gathered
    check_every_tile_once(results, layout)
    assert all(not r["times"][p].tiles for r in results[1:] for p in range(2))
    assert all(not r["bytes"][p] for r in results[1:] for p in range(2))  # nor gather anything
    tiles = [t for t in results[0]["times"][0].tiles]
    assert len(tiles) == sum(len(t) for t in results[0]["choices"].tiles) == size  # one tile a block
    first_owner, _, row0, row1, _ = tiles[0]
    assert first_owner == 0
    a_blocks, b_blocks = grid[1], grid[0]
    n0 = layout.local_shapes(0)["C"][1]
    spans = max(a_blocks, b_blocks)
    gemms = results[0]["gemms"]  # the last product's
    assert gemms[:spans] == [(row1 - row0, kk1 - kk0, n0, s > 0) for s, (kk0, kk1) in
                             enumerate(layout.a_k(c) if a_blocks > 1 else layout.b_k(c) for c in range(spans))]
    assert gemms[spans:] == [(r1 - r0, k, layout.local_shapes(owner)["C"][1], False)
                             for owner, _, r0, r1, _ in tiles[1:]]
    expected = collections.Counter()
    grid_ = layout.grid
    for source in range(1, size):
        if "A" in gathered:
            (m_loc, k_a) = layout.local_shapes(source)["A"]
            expected[(source, 0, "shm")] += padded(m_loc, 8) * k_a * 8
        if "B" in gathered:
            (k_b, n_loc) = layout.local_shapes(source)["B"]
            expected[(source, 0, "shm")] += k_b * padded(n_loc, 8) * 8
    for source, nbytes in read_bytes(layout, 0, row0, row1, 0).items():
        expected[(source, 0, "shm")] += nbytes
    for owner, _, r0, r1, _ in tiles[1:]:  # an operand not gathered is read whole from the one block that holds it
        row, col = grid_.coords(owner)
        if "A" not in gathered and grid_.rank(row, 0) != 0:
            expected[(grid_.rank(row, 0), 0, "shm")] += (r1 - r0) * k * 8
        if "B" not in gathered and grid_.rank(0, col) != 0:
            expected[(grid_.rank(0, col), 0, "shm")] += k * layout.local_shapes(owner)["C"][1] * 8
    for product in range(2):
        assert results[0]["bytes"][product] == dict(expected), product


def test_the_ranks_beside_a_lone_worker_join_its_slow_products(stand_ins):
    """Worker 0 for four ranks.  Its second product runs at a third of its first one's rate (another program
    took the device): the third product is joined, the other ranks compute tiles too; once a joined product is
    as fast as the first again (the rate back), the next runs alone."""

    def between(rank, product, backend):
        if rank == 0:
            backend.rate = {0: 1e9, 1: 1e9 / 3, 2: 1e9, 3: 1e9}[product]
            backend.pause = 0.05

    results, layout = run_dynamic((600, 40, 33), (2, 2), (0,) * 4, panel=4, worker_of=(0,) * 4, products=4,
                                  between=between)
    check_every_tile_once(results, layout)
    helped = [sum(len(r["times"][p].tiles) for r in results[1:]) for p in range(4)]
    assert helped[0] == helped[1] == helped[3] == 0
    assert helped[2] > 0


# -- tiles that change node ------------------------------------------------------------------------


def test_a_slow_nodes_last_tiles_go_to_the_fast_node_after_a_product_shows_it(stand_ins):
    """Node 1 (ranks 2 and 3, grid row 1) a hundred times slower than node 0, copies at 1 GB a second.  The first product
    keeps each node to its tiles; after it the estimate hands some of node 1's last tiles to node 0: a taker
    receives the tile's A rows over the whole of k from the owner, computes the tile, and sends its C rows back
    (both through MPI), and C is right where the owner's block holds it."""
    vnodes = (0, 0, 1, 1)
    rates = [1e9, 1e9, 1e7, 1e7]
    results, layout = run_dynamic((600, 45, 37), (2, 2), vnodes, panel=4, products=3, rates=rates, copy_rate=1e9)
    check_every_tile_once(results, layout)
    k = layout.k
    for product in range(3):
        moved = [(rank, t) for rank, r in enumerate(results) for t in r["times"][product].tiles
                 if vnodes[t[0]] != vnodes[rank]]
        if product == 0:
            assert not moved
            continue
        assert moved and all(vnodes[rank] == 0 for rank, _ in moved)
        tiles = results[0]["choices"].tiles
        for rank, (owner, index, row0, row1, _) in moved:
            assert index >= len(tiles[owner]) - len(moved)  # the owner's last tiles
            ld = padded(layout.local_shapes(owner)["C"][1], 8)
            assert results[rank]["bytes"][product][(owner, rank, "mpi")] >= (row1 - row0) * k * 8
            assert results[owner]["bytes"][product][(rank, owner, "mpi")] >= (row1 - row0) * ld * 8
        for owner in (2, 3):  # what an owner receives through MPI: its copies, and the C rows of its moved tiles
            expected = collections.Counter(copied_bytes(layout, owner, vnodes))
            for rank, (o, _, row0, row1, _) in moved:
                if o == owner:
                    expected[rank] += (row1 - row0) * padded(layout.local_shapes(owner)["C"][1], 8) * 8
            received = {src: n for (src, _, path), n in results[owner]["bytes"][product].items() if path == "mpi"}
            assert received == dict(expected)


# -- one rank --------------------------------------------------------------------------------------


def _on_one_rank(m, n, k, body, **options):
    """``body(engine)`` on a dynamic engine of one rank (a thread: its communicators are its own)."""
    world = World(1)
    layout = Layout(m, n, k, Grid(1, 1))
    config = RunConfig(m=m, n=n, k=k, balance="dynamic", **options)

    def rank_main(rank):
        backend = _clock.backend = Clocked()
        topo = topology(world, rank, layout.grid, (0,))
        return body(DynamicEngine(topo, backend, layout, summa_choices(topo, backend, layout, config), config, False))

    (how, value), = world.run(rank_main)
    assert how == "returned", value
    return value


def test_an_error_of_this_rank_alone_leaves_the_dynamic_engine_open(stand_ins):
    def body(engine):
        with pytest.raises(RuntimeError, match="this rank alone"), engine:
            raise RuntimeError("this rank alone")
        left_open = not engine.closed and engine.C is not None
        with engine:
            pass
        return left_open, engine.closed and engine.C is None

    assert _on_one_rank(40, 8, 6, body) == (True, True)


def test_the_dynamic_engine_loads_a_by_columns_and_b_by_rows_in_the_runs_type(stand_ins, monkeypatch):
    """As the SUMMA engine (tests/test_engine_mutants.py): pieces of whole columns of A and whole rows of B,
    each already float32, on a device."""
    from test_engine_mutants import Device  # noqa: PLC0415 - the recording device of the engine's tests

    from hpcmm.execution import engine as engine_module  # noqa: PLC0415

    monkeypatch.setattr(engine_module, "LOAD_PIECE_BYTES", 256)
    device = Device()
    rng = np.random.default_rng(8)
    a, b = rng.random((37, 5)), rng.random((5, 29))

    def body(engine):
        backend, engine.backend = engine.backend, device
        try:
            engine.load(a, b)
            return np.array(engine.A), np.array(engine.B)
        finally:
            engine.backend = backend
            engine.close()

    got_a, got_b = _on_one_rank(37, 29, 5, body, dtype="float32")
    np.testing.assert_array_equal(got_a, a.astype(np.float32))
    np.testing.assert_array_equal(got_b, b.astype(np.float32))
    a_pieces = [((37, 1), np.float32, "either")] * 5
    b_pieces = [((2, 29), np.float32, "C"), ((2, 29), np.float32, "C"), ((1, 29), np.float32, "either")]
    assert device.pieces == a_pieces + b_pieces


# -- which tiles a rank takes, early tiles over several nodes, the estimate's inputs ----------------


def test_a_rank_out_of_tiles_takes_the_next_ranks_first(stand_ins):
    """Three ranks of one node, blocks of 33, 32 and 32 columns: ranks 1 and 2 stop in their first GEMM until rank 0
    has taken a tile that is not its own; that tile is rank 1's, the next rank, not rank 2's.  They wait as in a
    collective, so that rank 0 waiting in one too (it took none) is the stand-in's deadlock, not a hang."""
    world = World(3)
    job, taken, holding = world._job, [], set()

    def between(rank, product, backend):
        gemm, held = backend.gemm, [rank != 0 and product == 0]

        def gemm_held(a, b, c, accumulate, stream=None, tf32=False):
            if rank == 0 and c.shape[1] != 33:
                with job.cond:
                    taken.append(True)
                    job.waiting -= holding  # their wait is over: they are no longer waiting
                    job.cond.notify_all()
            if held[0]:
                held[0] = False
                with job.cond:
                    if not taken:
                        holding.add(rank)
                        job.waiting.add(rank)
                        job.check()
                        job.cond.wait_for(lambda: taken or job.deadlock or 0 in job.gone)
                        job.waiting.discard(rank)
                        holding.discard(rank)
            gemm(a, b, c, accumulate, stream, tf32)

        backend.gemm = gemm_held

    results, layout = run_dynamic((140, 97, 29), (1, 3), (0,) * 3, panel=4, products=1, between=between, world=world)
    check_every_tile_once(results, layout)
    owners = [owner for owner, *_ in results[0]["times"][0].tiles]
    assert owners[0] == 0 and [owner for owner in owners if owner != 0][:1] == [1], owners


def test_a_rank_that_is_not_a_worker_starts_no_early_tile(stand_ins, monkeypatch):
    """Two nodes, one worker each (ranks 0 and 2), the early GEMMs on: the ranks beside them compute no tile, not
    even the first part of one, every tile is computed once, by its node's worker, and the estimate of the tiles
    that change node is told that only the workers may take one."""
    monkeypatch.setitem(dynamic_module.EARLY_LOCAL_GEMMS, False, 1)
    calls = []
    monkeypatch.setattr(dynamic_module, "handoffs", _moving(calls=calls))
    results, layout = run_dynamic((300, 45, 37), (2, 2), (0, 0, 1, 1), panel=4, products=2, worker_of=(0, 0, 2, 2))
    check_every_tile_once(results, layout)
    assert [call["can_take"] for call in calls] == [[True, False, True, False]] * 4  # no tile moves to them either
    for rank in (1, 3):
        assert all(not times.tiles for times in results[rank]["times"])
        assert not results[rank]["gemms"]


def test_a_rank_with_no_gemm_on_its_nodes_blocks_waits_for_the_copies(stand_ins, monkeypatch):
    """Crossed placement on a 2 × 2 grid (nodes {0, 3} and {1, 2}), the early GEMMs on: ranks 1 and 2 read no pair of blocks that both lie on
    their node, so their first tile starts once the copies are in (one box, the copies as the host's gap before
    it); ranks 0 and 3 start theirs early (two boxes, no gap)."""
    monkeypatch.setitem(dynamic_module.EARLY_LOCAL_GEMMS, False, 1)
    monkeypatch.setattr(dynamic_module, "NODE_HANDOFFS", 0)
    results, layout = run_dynamic((300, 45, 37), (2, 2), (0, 1, 1, 0), panel=4, products=2, copy_rate=1e6,
                                  timeline=True)
    check_every_tile_once(results, layout)
    for rank, r in enumerate(results):
        for times in r["times"]:
            boxes = times.timeline
            assert times.tiles or rank in (1, 2)  # an early tile is claimed before the copies; 1 and 2 may find none
            if not times.tiles:
                continue
            first = boxes[boxes[:, 2] == 0]
            if rank in (1, 2):
                assert len(first) == 1 and times.host[0] == boxes[0, 3] > 0
            else:
                assert len(first) == 2 and times.host[0] == 0


def _moving(pairs=(), calls=None):
    """A stand-in of the estimate (:func:`hpcmm.planning.handoff.handoffs`) that moves every tile of each ``owner``
    of ``pairs`` to its ``taker``, recording in ``calls`` what it is given."""

    def moves(node_of, column_of, tiles, rates, link_rate, spare_bytes, gain=None, can_take=None):
        if calls is not None:
            calls.append({"node_of": tuple(node_of), "column_of": list(column_of), "tiles": tiles,
                          "rates": list(rates), "link": link_rate, "spare": tuple(spare_bytes), "gain": gain,
                          "can_take": can_take})
        return tuple(dynamic_module.Handoff(owner, tile, taker) for owner, taker in pairs
                     for tile in range(len(tiles[owner])))

    return moves


def test_where_every_tile_of_a_rank_moves_it_starts_none_and_the_rows_cross_in_the_runs_type(stand_ins,
                                                                                             monkeypatch):
    """The early GEMMs on, float32, two nodes by grid rows; from the second product every tile of rank 2 goes to
    rank 0 (its grid column on the other node).  Rank 2 starts no early tile (none is left to it), every tile is
    computed once, and what crosses through MPI is the blocks' copies, each moved tile's A rows over the whole of k
    and its C rows, 4 bytes an element."""
    monkeypatch.setitem(dynamic_module.EARLY_LOCAL_GEMMS, False, 1)
    monkeypatch.setattr(dynamic_module, "handoffs", _moving([(2, 0)]))
    vnodes = (0, 0, 1, 1)
    results, layout = run_dynamic((300, 45, 37), (2, 2), vnodes, panel=4, products=2, dtype="float32")
    check_every_tile_once(results, layout)
    tiles, k = results[0]["choices"].tiles, layout.k
    assert sorted(t[:2] for t in results[0]["times"][1].tiles if t[0] == 2) == [(2, i) for i in range(len(tiles[2]))]
    assert not [t for t in results[2]["times"][1].tiles if t[0] == 2]
    rows = sum(row1 - row0 for row0, row1 in tiles[2])
    ld = padded(layout.local_shapes(2)["C"][1], 4)
    for rank, extra in ((0, (2, rows * k * 4)), (2, (0, rows * ld * 4))):
        expected = collections.Counter(copied_bytes(layout, rank, vnodes, itemsize=4))
        expected[extra[0]] += extra[1]
        received = {src: n for (src, _, path), n in results[rank]["bytes"][1].items() if path == "mpi"}
        assert received == dict(expected), rank


@pytest.mark.parametrize("grid, vnodes", [((2, 2), (0, 0, 1, 1)), ((1, 3), (0, 1, 1))], ids=["rows", "row_of_three"])
def test_the_estimate_is_given_the_last_products_rates_and_every_tiles_costs(stand_ins, monkeypatch, grid, vnodes):
    """The early GEMMs on, copies at 1 MB a second (a pause inside each first tile), node 1 four times slower.  What
    the estimate is given before the second product, the same on every rank: each rank's node and grid column; each
    tile's flops (2·rows·n·k), the bytes that would cross (A's rows over k, C's rows), the taker's buffers (C's rows
    padded) and what the owner sends first (A's rows); each node's rate, its tiles' flops over its ranks' longest
    GEMM time (the copies' wait left out, the first tile counted); the link's rate, the median over the ranks of the
    bytes each copied in over the seconds its copies took (rank 0 of the row of three copies two blocks in); every
    rank a taker."""
    monkeypatch.setitem(dynamic_module.EARLY_LOCAL_GEMMS, False, 1)
    calls = []
    monkeypatch.setattr(dynamic_module, "handoffs", _moving(calls=calls))
    size = len(vnodes)
    results, layout = run_dynamic((300, 45, 38), grid, vnodes, panel=4, products=2, copy_rate=1e6,
                                  rates=[2.5e8 if node else 1e9 for node in vnodes], timeline=True)
    assert len(calls) == size  # every rank, the second product only
    columns = [layout.grid.coords(rank)[1] for rank in range(size)]
    assert all(call["node_of"] == vnodes and call["column_of"] == columns for call in calls)
    assert all(call["can_take"] == [True] * size and call["gain"] is None for call in calls)
    k, flops, spans, links = layout.k, [0.0, 0.0], [0.0, 0.0], []
    tiles = results[0]["choices"].tiles
    expected_costs = []
    for owner in range(size):
        n_loc = layout.local_shapes(owner)["C"][1]
        ld = padded(n_loc, 8)
        expected_costs.append([dynamic_module.TileCost(2.0 * (r1 - r0) * n_loc * k, (r1 - r0) * (k + n_loc) * 8,
                                                       (r1 - r0) * (k + ld) * 8, (r1 - r0) * k * 8)
                               for r0, r1 in tiles[owner]])
    for rank, r in enumerate(results):
        times = r["times"][0]
        flops[vnodes[rank]] += sum(2.0 * (row1 - row0) * k * layout.local_shapes(owner)["C"][1]
                                   for owner, _, row0, row1, _ in times.tiles)
        spans[vnodes[rank]] = max(spans[vnodes[rank]], sum(t[4] for t in times.tiles))
        first = times.timeline[times.timeline[:, 2] == 0]
        received = sum(n for (_, _, path), n in r["bytes"][0].items() if path == "mpi")
        links.append(received / (first[1, 3] - first[0, 4]))  # the copies: the pause inside the first tile
    # What each rank's device holds beyond its blocks, shared among the node's ranks on one device (a CPU: all).
    spare = tuple(max(0, r["choices"].free_bytes - r["choices"].device_bytes) // vnodes.count(vnodes[rank])
                  for rank, r in enumerate(results))
    for call in calls:
        assert call["spare"] == spare and all(isinstance(x, int) for x in call["spare"])
        assert call["tiles"] == expected_costs
        np.testing.assert_allclose(call["rates"], [f / s for f, s in zip(flops, spans)], rtol=1e-12)
        assert call["link"] == pytest.approx(float(np.median(links)), rel=1e-12)


def test_a_node_that_computed_nothing_has_rate_zero_and_no_copy_time_no_link(stand_ins, monkeypatch):
    """Copies that take no time, and from the second product every tile of node 1 (ranks 2 and 3) goes to node 0:
    before the third product the estimate is given node 1's rate as 0 (no GEMM time) and the link's as 0."""
    calls = []
    monkeypatch.setattr(dynamic_module, "handoffs", _moving([(2, 0), (3, 1)], calls))
    results, layout = run_dynamic((300, 45, 37), (2, 2), (0, 0, 1, 1), panel=4, products=3)
    check_every_tile_once(results, layout)
    assert not results[2]["times"][1].tiles and not results[3]["times"][1].tiles
    assert len(calls) == 8
    assert all(call["link"] == 0.0 for call in calls)
    assert all(call["rates"][0] > 0 for call in calls) and all(call["rates"][1] == 0.0 for call in calls[4:])


@pytest.mark.parametrize("grid", [(1, 2), (2, 1)], ids=["row", "column"])
def test_a_node_of_one_rank_computes_its_tiles_after_its_early_one(stand_ins, monkeypatch, grid):
    """Two nodes of one rank each, the early GEMMs on: each rank finishes its first tile once the copies are in, then
    computes the rest of its tiles (nobody else could): every tile once, C right."""
    monkeypatch.setitem(dynamic_module.EARLY_LOCAL_GEMMS, False, 1)
    monkeypatch.setattr(dynamic_module, "NODE_HANDOFFS", 0)
    results, layout = run_dynamic((300, 45, 37), grid, (0, 1), panel=4, products=2)
    check_every_tile_once(results, layout)
    assert all(len(r["times"][p].tiles) > 1 for r in results for p in range(2))


def test_the_run_reads_no_prefetch_one_ring_and_the_planned_gemm_order(stand_ins):
    """What the run's summary and records read from the engine (hpcmm/cli/run.py): nothing moves in a dynamic
    product, so no panel is prefetched and one buffer of each is held; the GEMM order is the planner's."""

    def body(engine):
        with engine:
            choices = engine.choices
            return (engine.panel, engine.prefetch, engine.ring, engine.gemm_order_label), choices

    got, choices = _on_one_rank(40, 8, 6, body, panel=2)
    assert got == (choices.panel, 0, 1, choices.gemm_order_label) and choices.gemm_order_label is not None


@pytest.mark.parametrize("step", ["peers", "copies"])
def test_a_set_up_step_that_fails_on_one_rank_fails_on_every_rank(stand_ins, monkeypatch, step):
    """Two nodes of two ranks: the mapping of the blocks or the copies' communicators fails on rank 1 alone, once
    the collective calls are made; every rank raises that error (none waits on a collective rank 1 never joins),
    and what was built is undone on every rank (the undoing is collective too: it would hang where it failed)."""

    def fail_on_rank_1(original, rank_of):
        def wrapped(self, *args):
            got = original(self, *args)
            if rank_of(self) == 1:
                raise RuntimeError(f"the {step} fail here")
            return got
        return wrapped

    if step == "peers":
        select = dynamic_module.select_paths

        def select_paths(backend, cuda_aware):
            peer_cls, broadcast_cls = select(backend, cuda_aware)

            class Failing(peer_cls):
                allocate = fail_on_rank_1(peer_cls.allocate, lambda peers: _clock.rank)

            return Failing, broadcast_cls

        monkeypatch.setattr(dynamic_module, "select_paths", select_paths)
    else:
        monkeypatch.setattr(DynamicEngine, "_copy_communicators",
                            fail_on_rank_1(DynamicEngine._copy_communicators, lambda engine: engine.topo.rank))
    world, grid = World(4), Grid(2, 2)
    layout = Layout(300, 45, 37, grid)
    config = RunConfig(m=300, n=45, k=37, balance="dynamic")

    def body(rank):
        backend = _clock.backend = Clocked()
        _clock.rank = rank
        topo = topology(world, rank, grid, (0, 0, 1, 1))
        DynamicEngine(topo, backend, layout, summa_choices(topo, backend, layout, config), config, False)

    outcomes = world.run(body)
    assert all(how == "raised" for how, _ in outcomes), outcomes
    assert all(f"the {step} fail here" in str(error) for _, error in outcomes), outcomes


@pytest.mark.parametrize("grid, gathered", [((2, 2), "AB"), ((1, 3), "A"), ((3, 1), "B")], ids=["AB", "A", "B"])
def test_a_lone_workers_gathered_operands_are_in_the_runs_type(stand_ins, grid, gathered):
    """float32: the whole operands a lone worker gathers hold float32, as its blocks do: every GEMM reads and
    writes float32 only."""
    size = grid[0] * grid[1]
    results, _ = run_dynamic((150 * grid[0], 30 * grid[1], 37), grid, (0,) * size, panel=4, worker_of=(0,) * size,
                             products=2, dtype="float32")
    assert results[0]["choices"].gather == gathered
    assert results[0]["engine"].backend.types == {(np.dtype(np.float32),) * 3}
