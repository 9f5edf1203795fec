"""Behaviours no other test pinned that need several ranks; each test fails where its behaviour breaks.

Run with ``mpiexec -n N python -m pytest --with-mpi tests/mpi/test_unlisted_areas_mpi.py``
(``tests/test_mpi_suite.py`` runs tests/mpi at 1 to 4 ranks; these need 2 or more).

* collective errors (:func:`hpcmm.errors.agree`): every rank raises the error of the lowest
  rank that failed, of that rank's kind and exit status, naming it by its rank in the job (on
  a communicator whose order is not the job's too); a message every rank saw alike is kept as
  it is; an agreed error is :func:`~hpcmm.errors.raised_everywhere`;
* bytes per peer of the 2.5D reduction: ``/transfers`` says, for every rank and every fiber
  peer, the bytes its reduce-scatter pulled from that peer in one product (counted at the
  pulls themselves), each piece's stored (padded) rows, ``C - 1`` pieces per rank;
* the relay path: a panel that crossed between nodes through MPI is recorded as such by the
  channel (path ``mpi``/``staged``, from the root, its bytes, moved by the host, its start
  after the wait for the slot), and the engine counts the time until it was there as
  waiting for data, not as host overhead, and its bytes as the root's.
"""

from __future__ import annotations

import collections

import h5py
import numpy as np
import pytest
from test_run_mpi import COMM, DEVICE, P, RANK, everywhere, on_rank0, run_and_compare

from hpcmm.planning.assemble import engine_for
from hpcmm.execution.backend import make_backend
from hpcmm.config import RunConfig
from hpcmm.errors import HpcmmError, InputError, VerificationError, agree, raised_everywhere
from hpcmm.io.inputs import generate_block
from hpcmm.geometry.layout import Grid, Layout, block_range, padded
from hpcmm.execution.topology import Topology
from hpcmm.execution.transport.channel import PanelChannel
from hpcmm.execution.transport.reduce import FiberReduction

# -- collective errors ---------------------------------------------------------------------


def raised(comm, error):
    """``(kind, message, exit status, agreed, raised_everywhere)`` of what :func:`agree` raised here,
    gathered from every rank of the job."""
    try:
        agree(comm, error)
    except HpcmmError as exc:
        mine = (type(exc).__name__, str(exc), exc.exit_code, exc.agreed, raised_everywhere(exc))
    else:
        mine = None
    return COMM.allgather(mine)


@pytest.mark.mpi(min_size=2)
def test_every_rank_raises_the_lowest_failing_ranks_error():
    """Ranks 1 and up fail, each with its own message: rank 1's, naming it, everywhere."""
    error = None if RANK == 0 else InputError(f"--panel=0: rank {RANK}'s complaint")
    outcomes = raised(COMM, error)
    want = ("InputError", "--panel=0: rank 1's complaint (raised by rank 1)", 2, True, True)
    everywhere(outcomes == [want] * P, f"raised {outcomes}")


@pytest.mark.mpi(min_size=2)
def test_the_winners_kind_and_status_go_with_its_message():
    """Rank 0 meets a bug, the others bad input: rank 0's, as an unexpected error (exit 1)."""
    error = RuntimeError("a bug") if RANK == 0 else InputError(f"bad input on rank {RANK}")
    outcomes = raised(COMM, error)
    want = ("HpcmmError", "RuntimeError: a bug (raised by rank 0)", 1, True, True)
    everywhere(outcomes == [want] * P, f"raised {outcomes}")


@pytest.mark.mpi(min_size=2)
def test_one_ranks_error_is_every_ranks():
    error = VerificationError("verification failed: C[0, 0]") if RANK == P - 1 else None
    outcomes = raised(COMM, error)
    want = ("VerificationError", f"verification failed: C[0, 0] (raised by rank {P - 1})", 1, True, True)
    everywhere(outcomes == [want] * P, f"raised {outcomes}")


@pytest.mark.mpi(min_size=2)
def test_a_message_every_rank_saw_is_kept_as_it_is():
    outcomes = raised(COMM, InputError("--m=0: expected an integer >= 1"))
    want = ("InputError", "--m=0: expected an integer >= 1", 2, True, True)
    everywhere(outcomes == [want] * P, f"raised {outcomes}")
    everywhere(raised(COMM, None) == [None] * P, "an error raised where none was passed")


@pytest.mark.mpi(min_size=2)
def test_the_error_names_the_rank_in_the_job_not_in_the_communicator():
    """On a communicator in the reverse order, job rank 0 (last there) fails alone: 'rank 0' it says."""
    reverse = COMM.Split(0, P - 1 - RANK)
    try:
        outcomes = raised(reverse, InputError("a file rank 0 cannot read") if RANK == 0 else None)
    finally:
        reverse.Free()
    want = ("InputError", "a file rank 0 cannot read (raised by rank 0)", 2, True, True)
    everywhere(outcomes == [want] * P, f"raised {outcomes}")


# -- bytes per peer of the 2.5D reduction -----------------------------------------------------


@pytest.mark.mpi(min_size=2)
def test_transfers_count_the_bytes_the_reduction_pulls_from_each_peer(mpi_tmp_path, monkeypatch):
    """One node of P ranks, P layers of one rank each (no panels move): every byte in /transfers is
    the reduce-scatter's, and for each (peer, rank) it is what that rank pulled from that peer."""
    m, n, k = 37, 250, 41  # rows of 250 float64 are stored 256 apart: the padding travels too
    iters = 2
    pulled: collections.Counter = collections.Counter()
    real_init = FiberReduction.__init__

    def counting_init(self, fiber, *args, **kwargs):
        real_init(self, fiber, *args, **kwargs)
        fiber_group, job_group = fiber.Get_group(), COMM.Get_group()
        to_job = dict(enumerate(fiber_group.Translate_ranks(list(range(fiber.Get_size())), job_group)))
        fiber_group.Free()
        job_group.Free()
        real_pull = self.peers.pull

        def pull(dst, peer, offset, nbytes, stream=None):
            pulled[to_job[peer]] += nbytes
            return real_pull(dst, peer, offset, nbytes, stream)

        self.peers.pull = pull

    monkeypatch.setattr(FiberReduction, "__init__", counting_init)
    result = run_and_compare(mpi_tmp_path, m=m, n=n, k=k, ranks_per_node=P, algo=f"2.5d:{P}", iters=iters)
    everywhere(result.summary["algo"] == f"2.5d:{P}", f"algo {result.summary['algo']}")
    everywhere(all(v % iters == 0 for v in pulled.values()), f"pulls {dict(pulled)} over {iters} products")
    mine = {(src, RANK): v // iters for src, v in pulled.items()}
    counted = {key: v for part in COMM.allgather(mine) for key, v in part.items()}

    def check():
        with h5py.File(mpi_tmp_path / "result.h5", "r") as f:
            rows = [(int(t["src"]), int(t["dst"]), t["path"].decode(), int(t["bytes"])) for t in f["transfers"][()]]
            layers = {int(r["rank"]): int(r["layer"]) for r in f["topology"][()]}
        table = {(src, dst): nbytes for src, dst, _, nbytes in rows}
        assert len(table) == len(rows), f"one row per pair expected: {rows}"
        assert {path for *_, path, _ in rows} <= {"shm", "ipc"}, rows
        assert table == counted, f"/transfers {table}, pulled per product {counted}"
        row_bytes = padded(n, 8) * 8
        for (src, dst), nbytes in table.items():
            lo, hi = block_range(m, P, layers[dst])
            assert nbytes == (hi - lo) * row_bytes, f"{src} -> {dst}: {nbytes} bytes, its piece is {hi - lo} rows"
        assert sorted(table) == [(s, d) for s in range(P) for d in range(P) if s != d], sorted(table)
        assert sum(table.values()) == (P - 1) * m * row_bytes

    on_rank0(check)


# -- the relay path ---------------------------------------------------------------------------


def _column_channel(topo, backend, nbytes):
    """The B channel of a Px1 grid, one rank per node: every other root's panel is relayed to this rank."""
    members = topo.col_comm.allgather(topo.rank)
    vnodes = topo.comm.allgather(topo.vnode)
    channel = PanelChannel(topo.col_comm, members, [vnodes[w] for w in members], backend, nbytes, nbytes, 1,
                           cuda_aware=False)
    return channel, members


@pytest.mark.mpi(min_size=2)
def test_a_relayed_panel_is_recorded_as_crossing_through_mpi():
    topo = Topology.create(COMM, RunConfig(device=DEVICE, grid=(P, 1), ranks_per_node=1))
    backend = channel = None
    try:
        backend = make_backend(DEVICE, topo.local_rank, topo.local_size)
        size = 24 + 8 * RANK
        channel, members = _column_channel(topo, backend, 24 + 8 * (P - 1))
        mine = np.random.default_rng([5, RANK]).integers(0, 256, size, dtype=np.uint8)
        channel.block[:size] = backend.from_host(mine)
        backend.synchronize()
        COMM.Barrier()
        failures = []
        me = topo.col_comm.Get_rank()
        for step, root in enumerate(range(topo.col_comm.Get_size())):
            nbytes = 24 + 8 * members[root] - 8
            t = channel.fetch(root, 8, nbytes, step, None)
            backend.synchronize()
            want = np.random.default_rng([5, members[root]]).integers(0, 256, nbytes + 8, dtype=np.uint8)[8:]
            if not np.array_equal(backend.to_host(t.panel), want):
                failures.append(f"root {root}: bytes differ")
            if root == me:
                seen = (t.path, t.source, t.nbytes, t.host_bound)
                if seen != ("self", members[root], 0, True):
                    failures.append(f"own panel recorded as {seen}")
                continue
            seen = (t.path, t.source, t.nbytes, t.host_bound, t.started is not None)
            if seen != (channel.bcast.path, members[root], nbytes, True, True):
                failures.append(f"root {root}: relayed panel recorded as (path, source, bytes, host-bound, "
                                f"start) {seen}")
        everywhere(not failures, "; ".join(failures))
        everywhere(channel.bcast.path in ("mpi", "staged"), channel.bcast.path)
    finally:
        if channel is not None:
            channel.close()
        if backend is not None:
            backend.close()
        topo.close()


@pytest.mark.mpi(min_size=2)
def test_the_wait_for_a_relayed_panel_is_waiting_for_data():
    """Px1, one rank per node, no prefetch: a step whose B panel is relayed waits for it after the
    last GEMM; all of that wait is waiting for data (at least the panel's transfer), none host
    overhead; its bytes are the root's, by MPI."""
    m, n, k, panel = 5 * P + 3, 11, 4 * P + 2, 2
    topo = Topology.create(COMM, RunConfig(device=DEVICE, grid=(P, 1), ranks_per_node=1))
    backend = engine = None
    try:
        backend = make_backend(DEVICE, topo.local_rank, topo.local_size)
        if backend.on_gpu:
            pytest.skip("the host clock pins the wait on the CPU; a GPU relay has a ready event of its own")
        layout = Layout(m, n, k, Grid(P, 1))
        config = RunConfig(device=DEVICE, panel=panel, prefetch=0, ranks_per_node=1)
        engine = engine_for(topo, backend, layout, config, False)
        (r0, r1), (c0, c1) = layout.a_block(RANK)
        a = generate_block(3, "A", (m, k), (r0, r1), (c0, c1), np.float64)
        (r0, r1), (c0, c1) = layout.b_block(RANK)
        b = generate_block(3, "B", (k, n), (r0, r1), (c0, c1), np.float64)
        engine.load(a, b)
        COMM.Barrier()
        times = engine.multiply()
        row = layout.grid.coords(RANK)[0]
        column = topo.col_comm.allgather(topo.rank)  # job rank of each row of the grid
        failures, relayed, want_bytes = [], 0, collections.Counter()
        for s, step in enumerate(engine.plan):
            _, comm, wait = times.steps[s]
            if step.b_root == row:
                continue
            relayed += 1
            want_bytes[(column[step.b_root], RANK, "mpi")] += step.width * engine.ld_b * 8
            if not (comm > 0 and wait >= comm and times.host[s] >= 0):
                failures.append(f"step {s}: comm {comm}, wait {wait}, host {times.host[s]}")
        everywhere(relayed > 0, "no step relayed a panel")
        everywhere(not failures, "; ".join(failures))
        everywhere(dict(engine.bytes_by_pair) == dict(want_bytes),
                   f"bytes {dict(engine.bytes_by_pair)}, expected {dict(want_bytes)}")
    finally:
        if engine is not None:
            engine.close()
        if backend is not None:
            backend.close()
        topo.close()
