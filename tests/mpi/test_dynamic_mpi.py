"""``--balance dynamic`` (hpcmm/execution/dynamic.py): tiles handed out while the product runs.

C is right (saved C against numpy in float64, poisoned blocks, uneven shapes, every type class,
α and β) at any rank count; each product computes every tile exactly once; a rank that runs
slow has its tiles taken by the others; and what dynamic cannot do is refused on every rank.

Run: ``mpiexec -n 4 python -m pytest --with-mpi tests/mpi/test_dynamic_mpi.py``.
"""

from __future__ import annotations

import collections
import json
import time

import h5py
import pytest
from test_run_mpi import COMM, P, RANK, config, everywhere, on_rank0, raised_everywhere, run_and_compare, shape

import hpcmm
from hpcmm.cli.summary import dynamic_figures
from hpcmm.execution.backend import CpuBackend, GpuBackend
from hpcmm.planning.choices import tile_rows, tiles_per_block

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize("kind", ["uneven", "tall", "wide", "shallow"])
def test_dynamic_products_are_right(mpi_tmp_path, kind):
    m, n, k = shape(kind)
    run_and_compare(mpi_tmp_path, m=m, n=n, k=k, balance="dynamic", iters=2)


@pytest.mark.parametrize("dtype", ["float32", "complex128", "bfloat16"])
def test_dynamic_products_of_other_types(mpi_tmp_path, dtype):
    m, n, k = 130 * P + 7, 41, 67
    run_and_compare(mpi_tmp_path, m=m, n=n, k=k, dtype=dtype, balance="dynamic", seed=5)


def test_dynamic_with_alpha_beta_and_ops(mpi_tmp_path):
    result = hpcmm.run(config(mpi_tmp_path, m=97, n=53, k=71, balance="dynamic", alpha=-1.5, beta=0.75, op_a="T",
                              verify="freivalds", save_c=False), comm=COMM)
    everywhere(result.check.passed, f"residual {result.check.residual}")


def _tiles(path):
    with h5py.File(path, "r") as f:
        return f["timings/tiles"][()], f["summary"].attrs["dynamic_taken_fraction"]


def _grid_cols(path) -> int:
    """The process grid's columns of the run written at ``path``."""
    with h5py.File(path, "r") as f:
        return int(str(f["config"].attrs["grid"]).split("x")[1])


def test_every_tile_is_computed_exactly_once_per_product(mpi_tmp_path):
    # On the CPUs wherever it runs: the counts below are a CPU's tile cut (on one time-sliced GPU, one rank
    # computes every tile, one per block).
    cfg = config(mpi_tmp_path, m=300 * P + 11, n=45, k=120, balance="dynamic", iters=3, warmup=1, panel=32,
                 device="cpu")
    run_and_compare(mpi_tmp_path, m=cfg.m, n=cfg.n, k=cfg.k, balance="dynamic", iters=3, warmup=1, panel=32,
                    device="cpu")

    def check():
        rows, _ = _tiles(cfg.out)
        layout_cols = _grid_cols(cfg.out)
        per_product = collections.defaultdict(list)
        for row in rows:
            per_product[int(row["product"])].append((int(row["owner"]), int(row["tile"])))
        assert sorted(per_product) == [0, 1, 2]
        for product, tiles in per_product.items():
            assert len(tiles) == len(set(tiles)), f"product {product}: a tile computed twice"
            owners = collections.Counter(owner for owner, _ in tiles)
            covered = collections.defaultdict(int)
            for row in rows[rows["product"] == product]:
                covered[int(row["owner"])] += int(row["row1"] - row["row0"])
            assert sum(covered.values()) == cfg.m * layout_cols, covered  # every row of every block, once
            # each block cut as the planner cuts it (300 rows: several tiles), one tile for a lone rank
            count = tiles_per_block(P, P, on_gpu=False)
            expected = {rank: len(tile_rows(covered[rank], False, count)) if P > 1 else 1 for rank in range(P)}
            assert owners == expected and min(owners.values()) > (1 if P > 1 else 0), owners
        _check_share_imbalance(cfg.out)

    on_rank0(check)


def _check_share_imbalance(path) -> None:
    """``/summary`` ``dynamic_share_imbalance`` against the same figure from ``/timings/tiles`` and each rank's
    block columns in ``/config`` (a rank in the file is its grid position, row-major); both absent where some
    rank computed no tile."""
    with h5py.File(path, "r") as f:
        rows, summary = f["timings/tiles"][()], dict(f["summary"].attrs)
        block_cols = list(f["config"].attrs["block_cols"])
    layout_cols = _grid_cols(path)
    tiles = [{name: row[name].item() for name in rows.dtype.names} for row in rows]
    want = dynamic_figures(tiles, range(P), owner_cols=[block_cols[r % layout_cols] for r in range(P)])
    assert ("dynamic_share_imbalance" in summary) == ("dynamic_share_imbalance" in want), (summary, want)
    assert summary.get("dynamic_share_imbalance") == pytest.approx(want.get("dynamic_share_imbalance"))


def test_the_summary_weighs_each_tile_by_its_owners_block_columns(mpi_tmp_path, monkeypatch):
    """On one grid row the blocks differ in columns: the share blocks' imbalance at the rates that ran weighs each
    tile a rank computed by its owner's columns.  Rank 0 runs slow, so that the others take its tiles."""
    if P < 2:
        pytest.skip("needs 2 ranks")
    _slow_rank_0(monkeypatch, 0.2)
    cfg = config(mpi_tmp_path, m=96, n=7 * P + 1, k=16, balance="dynamic", iters=1, warmup=0, panel=16,
                 verify="full", save_c=False, grid=(1, P), device="cpu")
    result = hpcmm.run(cfg, comm=COMM)
    everywhere(result.check.passed, f"residual {result.check.residual}")
    on_rank0(lambda: _check_share_imbalance(cfg.out))


@pytest.mark.timeout(300)  # a hang guard
def test_the_tiles_of_a_slow_rank_are_taken_by_the_others(mpi_tmp_path, monkeypatch):
    """Rank 0's GEMMs take a second each; the other ranks finish theirs at once, then take rank 0's tiles, and
    every tile is computed once (each row of each block in one tile)."""
    if P < 2:
        pytest.skip("needs 2 ranks")
    if RANK == 0:
        for backend in (CpuBackend, GpuBackend):
            real = backend.gemm

            def slow(self, *args, real=real, **kwargs):
                time.sleep(1.0)
                return real(self, *args, **kwargs)

            monkeypatch.setattr(backend, "gemm", slow)
    cfg = config(mpi_tmp_path, m=64 * P, n=24, k=16, balance="dynamic", iters=1, warmup=0, panel=16,
                 verify="full", save_c=False, device="cpu")  # the CPU's tile cut: a GPU's may be one a block
    result = hpcmm.run(cfg, comm=COMM)
    everywhere(result.check.passed, f"residual {result.check.residual}")
    # Rank 0 alone on its share block would have taken seconds, the others milliseconds; where a rank computed
    # no tile (the others took its every tile before it claimed one) its rate, and so that figure, is unknown.
    s = result.summary
    if s["dynamic_tiles_least"] >= 1:
        everywhere(s.get("dynamic_share_imbalance", 0.0) > 0.5, f"{s.get('dynamic_share_imbalance')}")
    else:
        everywhere("dynamic_share_imbalance" not in s,
                   f"{s.get('dynamic_share_imbalance')} with a rank's rate unknown")

    def check():
        rows, taken = _tiles(cfg.out)
        layout_cols = _grid_cols(cfg.out)
        claims = [(int(r["owner"]), int(r["tile"])) for r in rows]
        assert len(claims) == len(set(claims)), "a tile computed twice"
        assert sum(int(r["row1"] - r["row0"]) for r in rows) == cfg.m * layout_cols  # every row of every block
        by_rank = collections.Counter(int(r["rank"]) for r in rows)
        own_tiles = sum(1 for r in rows if int(r["owner"]) == 0)
        assert own_tiles >= 2, own_tiles  # its block has 64 rows or more: tiles of 32
        # Rank 0 runs its first tile (a second or more); the others, done with theirs at once, take at
        # least one of the rest (how many depends on how fast they get there: not pinned).
        taken_from_0 = sum(1 for r in rows if int(r["owner"]) == 0 and int(r["rank"]) != 0)
        assert by_rank[0] < own_tiles and taken_from_0 >= 1 and by_rank[0] + taken_from_0 >= own_tiles, by_rank
        assert taken > 0

    on_rank0(check)


def test_dynamic_refuses_2_5d(mpi_tmp_path):
    if P % 2 == 0:
        message = raised_everywhere(lambda: hpcmm.run(config(mpi_tmp_path, m=20, n=20, k=20, balance="dynamic",
                                                             algo="2.5d:2"), comm=COMM, write=False))
        assert message == "--balance dynamic runs summa, not 2.5d:2: pass --algo summa", message


# -- several (virtual) nodes: each node hands out its own tiles -------------------------------


def _slow_rank_0(monkeypatch, seconds: float) -> None:
    """Rank 0's CPU GEMMs each take ``seconds`` more (the other ranks' are as fast as ever)."""
    if RANK == 0:
        real = CpuBackend.gemm

        def slow(self, *args, **kwargs):
            time.sleep(seconds)
            return real(self, *args, **kwargs)

        monkeypatch.setattr(CpuBackend, "gemm", slow)


def _nodes(path) -> list[int]:
    with h5py.File(path, "r") as f:
        return [int(node) for node in f["topology"]["node"]]


@pytest.mark.parametrize("ranks_per_node", [1, 2])
@pytest.mark.parametrize("kind", ["uneven", "tall", "wide", "shallow"])
def test_dynamic_products_over_several_nodes_are_right(mpi_tmp_path, ranks_per_node, kind):
    """Each rank copies in the blocks of its grid row and column that lie on other nodes before every
    product (two products: the copies are made again), and C is right."""
    m, n, k = shape(kind)
    run_and_compare(mpi_tmp_path, m=m, n=n, k=k, balance="dynamic", ranks_per_node=ranks_per_node, iters=2)


@pytest.mark.parametrize("grid", ["Px1", "1xP"])
def test_dynamic_over_several_nodes_on_either_grid_face(mpi_tmp_path, grid):
    """One process column (B blocks all on other nodes but one's own) and one process row (A blocks)."""
    m, n, k = 41 * P + 3, 29, 37
    run_and_compare(mpi_tmp_path, m=m, n=n, k=k, balance="dynamic", ranks_per_node=2, dtype="complex128",
                    grid={"Px1": (P, 1), "1xP": (1, P)}[grid])


@pytest.mark.timeout(300)  # a hang guard
@pytest.mark.parametrize("ranks_per_node", [1, 2])
def test_a_slow_ranks_tiles_change_node_only_after_a_product_shows_it_slow(mpi_tmp_path, monkeypatch,
                                                                          ranks_per_node):
    """Rank 0's GEMMs take half a second each.  In the first product its tiles are taken only by its node's
    other rank (if any); in the second, from the rates the first showed, other nodes take some of its node's
    tiles too (the ranks of the owner's grid column, which hold the B blocks they read), and rank 0's node
    keeps one of its tiles at least.  Every
    tile is computed once per product, C is checked in full, and the bytes between nodes go by MPI."""
    if P < 2:
        pytest.skip("needs 2 ranks")
    _slow_rank_0(monkeypatch, 0.5)
    cfg = config(mpi_tmp_path, m=64 * P, n=24, k=48, balance="dynamic", iters=2, warmup=0, panel=16,
                 verify="full", save_c=False, ranks_per_node=ranks_per_node, device="cpu")
    result = hpcmm.run(cfg, comm=COMM)
    everywhere(result.check.passed, f"residual {result.check.residual}")

    def check():
        rows, _ = _tiles(cfg.out)
        nodes = _nodes(cfg.out)
        with h5py.File(cfg.out, "r") as f:
            table = f["transfers"][()]
            plan = json.loads(f["config"].attrs["plan"])
        grid_cols = int(plan["grid"].split("x")[1])
        assert len(set(nodes)) == -(-P // ranks_per_node)
        crossed = {}
        for product in (0, 1):
            mine = rows[rows["product"] == product]
            claims = [(int(r["owner"]), int(r["tile"])) for r in mine]
            assert len(claims) == len(set(claims)), f"product {product}: a tile computed twice"
            assert {owner for owner, _ in claims} == set(range(P))
            crossed[product] = [(int(r["rank"]), int(r["owner"])) for r in mine
                                if nodes[int(r["rank"])] != nodes[int(r["owner"])]]
            # Only the slow node gives, only to a rank of the owner's grid column.
            assert all(nodes[owner] == nodes[0] and taker % grid_cols == owner % grid_cols
                       for taker, owner in crossed[product]), crossed
            assert any(nodes[int(r["rank"])] == nodes[0] for r in mine if int(r["owner"]) == 0)
        assert crossed[0] == [], crossed  # no rates yet: each node computes its own tiles
        if ranks_per_node == 1:  # rank 0 alone on its node, its column's other ranks far faster
            assert crossed[1], "no tile of the slow node moved"
        else:
            assert any(int(r["owner"]) == 0 and int(r["rank"]) == 1 for r in rows[rows["product"] == 0])
        for t in table:
            src, dst = int(t["src"]), int(t["dst"])
            assert t["path"].decode() == ("mpi" if nodes[src] != nodes[dst] else "shm"), (src, dst, t["path"])
            assert t["bytes"] > 0
        crossing = {(int(t["src"]), int(t["dst"])) for t in table if nodes[int(t["src"])] != nodes[int(t["dst"])]}
        # Every rank receives each block of its grid row (A) and column (B) that lies on another node.
        want = {(src, dst) for dst in range(P) for src in range(P) if nodes[src] != nodes[dst]
                and (src // grid_cols == dst // grid_cols or src % grid_cols == dst % grid_cols)}
        assert crossing == want, (crossing, want)

    on_rank0(check)


@pytest.mark.timeout(300)  # a hang guard
def test_blocks_and_tiles_cross_nodes_staged_through_host_buffers(mpi_tmp_path, monkeypatch):
    """The path a GPU takes where MPI is not CUDA-aware (``staged``: device → pinned host → MPI), run with the
    CPU backend's copies: the copies of other nodes' blocks and the moved tiles (rank 0 made slow, so that
    its tiles move in the later products) arrive whole, C is checked in full and /transfers says staged."""
    if P < 2:
        pytest.skip("needs 2 ranks")
    from hpcmm.execution import dynamic
    from hpcmm.execution.transport.ipc import ShmPeerMemory
    from hpcmm.execution.transport.mpi import StagedBroadcast

    monkeypatch.setattr(dynamic, "select_paths", lambda backend, aware: (ShmPeerMemory, StagedBroadcast))
    _slow_rank_0(monkeypatch, 0.2)
    m, n, k = 64 * P + 9, 33, 70
    result = run_and_compare(mpi_tmp_path, m=m, n=n, k=k, balance="dynamic", ranks_per_node=1, grid=(P, 1),
                             iters=3, panel=16, device="cpu")
    everywhere(set(result.summary["paths"]) == {"staged"}, f"paths {result.summary['paths']}")

    def check():
        rows, _ = _tiles(mpi_tmp_path / "result.h5")
        assert any(int(r["rank"]) != int(r["owner"]) for r in rows), "no tile moved between nodes"

    on_rank0(check)


def _early_gemms(monkeypatch, early: int, record: list) -> None:
    """Run the first tile's early GEMMs on CPUs too (``early``), and record per product the GEMMs this rank
    ran before its copies of other nodes' blocks; the copies are NaN at each product's start (the last
    product's would still be right), so that a GEMM that read one before it arrived spoils C.  It counts the
    CPU's GEMMs: the runs that use it pass ``device="cpu"``."""
    import numpy as np

    from hpcmm.execution import dynamic

    monkeypatch.setitem(dynamic.EARLY_LOCAL_GEMMS, False, early)
    real_multiply, real_copy_in, real_gemm = (dynamic.DynamicEngine.multiply, dynamic.DynamicEngine._copy_in,
                                              CpuBackend.gemm)
    state = {"copied": True}

    def multiply(self):
        for offset, size in self._copies[self.topo.rank].values():
            self._flat(self.topo.rank)[offset:offset + size] = np.nan
        record.append(0)
        state["copied"] = False
        return real_multiply(self)

    def copy_in(self):
        state["copied"] = True
        return real_copy_in(self)

    def gemm(self, *args, **kwargs):
        if not state["copied"]:
            record[-1] += 1
        return real_gemm(self, *args, **kwargs)

    monkeypatch.setattr(dynamic.DynamicEngine, "multiply", multiply)
    monkeypatch.setattr(dynamic.DynamicEngine, "_copy_in", copy_in)
    monkeypatch.setattr(CpuBackend, "gemm", gemm)


@pytest.mark.parametrize("grid", ["Px1", "1xP", "auto"])
@pytest.mark.parametrize("ranks_per_node", [1, 2])
def test_a_first_tile_starts_on_its_nodes_blocks_while_the_copies_arrive(mpi_tmp_path, monkeypatch, grid,
                                                                         ranks_per_node):
    """Over several nodes, where a device can overlap them (here forced on CPUs), a rank runs the GEMMs of its
    first tile that read its node's blocks alone before it copies in the other nodes' blocks, in every product,
    and none of them reads a copy before it arrived (C is right, the copies NaN until then).  On one grid row or
    column every rank's first tile has such GEMMs (the operand the grid does not cut lies whole on the rank, the
    other's own block beside it); on a grid of both, rank 0's does (its A and B blocks cover the same k)."""
    if P <= ranks_per_node:
        pytest.skip("needs 2 nodes")
    before = []
    _early_gemms(monkeypatch, 1, before)
    m, n, k = 37 * P + 5, 29, 3 * P + 40
    run_and_compare(mpi_tmp_path, m=m, n=n, k=k, balance="dynamic", ranks_per_node=ranks_per_node, iters=3,
                    warmup=1, panel=8, grid={"Px1": (P, 1), "1xP": (1, P), "auto": None}[grid], device="cpu")
    started = len(before) == 4 and min(before) >= 1
    everywhere(started or (grid == "auto" and RANK != 0), f"GEMMs before the copies, per product: {before}")


def test_by_default_a_rank_copies_before_it_multiplies(mpi_tmp_path, monkeypatch):
    """No GEMM runs before the copies where the early GEMMs are off (the default: a rank's GEMMs could keep the
    other nodes waiting for its blocks)."""
    if P < 2:
        pytest.skip("needs 2 ranks")
    before = []
    _early_gemms(monkeypatch, 0, before)
    run_and_compare(mpi_tmp_path, m=23 * P + 3, n=19, k=31, balance="dynamic", ranks_per_node=1, iters=2,
                    device="cpu")
    everywhere(before == [0, 0], f"GEMMs before the copies, per product: {before}")


def test_the_wait_for_the_copies_is_no_tiles_time(mpi_tmp_path, monkeypatch):
    """The first tile's two parts lie either side of the copies: its seconds in /timings/tiles (and its step's)
    count its GEMMs, not the wait between them, which the product's time does hold; the timeline draws it as
    two boxes.  The copies take 1000 s
    of a clock that jumps (the host clock the CPU's events read, moved on by the copy)."""
    if P < 2:
        pytest.skip("needs 2 ranks")
    import time as real_time

    from hpcmm.execution import backend as backend_module
    from hpcmm.execution import dynamic

    monkeypatch.setitem(dynamic.EARLY_LOCAL_GEMMS, False, 1)
    jump = {"by": 0.0}

    class Clock:
        @staticmethod
        def perf_counter():
            return real_time.perf_counter() + jump["by"]

        def __getattr__(self, name):
            return getattr(real_time, name)

    monkeypatch.setattr(backend_module, "time", Clock())
    real_copy_in = dynamic.DynamicEngine._copy_in

    def copy_in(self):
        jump["by"] += 1000.0
        return real_copy_in(self)

    monkeypatch.setattr(dynamic.DynamicEngine, "_copy_in", copy_in)
    result = run_and_compare(mpi_tmp_path, m=40 * P + 7, n=21, k=33, balance="dynamic", ranks_per_node=1,
                             iters=2, timeline=True, device="cpu")
    everywhere(result.summary["ranks"] == P)

    def check():
        rows, _ = _tiles(mpi_tmp_path / "result.h5")
        assert len(rows) and max(float(r["seconds"]) for r in rows) < 1000.0, rows
        with h5py.File(mpi_tmp_path / "result.h5", "r") as f:
            gemm_seconds = f["timings/step_seconds"][..., 0]
            products = f["timings/iteration_seconds"][()]
            boxes = f["timeline/events"][()]
        assert float(gemm_seconds.max()) < 1000.0
        assert len(boxes) > len(rows) and float((boxes[:, 6] - boxes[:, 5]).max()) < 1000.0  # two boxes a first tile
        assert float(products.min()) >= 1000.0, products

    on_rank0(check)
