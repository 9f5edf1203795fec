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


def test_every_tile_is_computed_exactly_once_per_product(mpi_tmp_path):
    cfg = config(mpi_tmp_path, m=300 * P + 11, n=45, k=120, balance="dynamic", iters=3, warmup=1, panel=32)
    run_and_compare(mpi_tmp_path, m=cfg.m, n=cfg.n, k=cfg.k, balance="dynamic", iters=3, warmup=1, panel=32)

    def check():
        rows, _ = _tiles(cfg.out)
        with h5py.File(cfg.out, "r") as f:
            layout_cols = int(str(f["config"].attrs["grid"]).split("x")[1])
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

    on_rank0(check)


@pytest.mark.timeout(300)  # a hang guard
def test_the_tiles_of_a_slow_rank_are_taken_by_the_others(mpi_tmp_path, monkeypatch):
    """Rank 0's GEMMs take a second each; the other ranks finish theirs at once, then take rank 0's tiles."""
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
                 verify="full", save_c=False)
    result = hpcmm.run(cfg, comm=COMM)
    everywhere(result.check.passed, f"residual {result.check.residual}")

    def check():
        rows, taken = _tiles(cfg.out)
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
def test_a_slow_ranks_tiles_are_taken_only_within_its_node(mpi_tmp_path, monkeypatch, ranks_per_node):
    """Rank 0's GEMMs take half a second each: its node's other rank (if any) takes its tiles, no rank of
    another node does; every tile is computed once per product, C in full checked, and the bytes of the
    other nodes' blocks are counted on an MPI path (the node's own on its shared memory)."""
    if P < 2:
        pytest.skip("needs 2 ranks")
    if RANK == 0:
        real = CpuBackend.gemm

        def slow(self, *args, **kwargs):
            time.sleep(0.5)
            return real(self, *args, **kwargs)

        monkeypatch.setattr(CpuBackend, "gemm", slow)
    cfg = config(mpi_tmp_path, m=64 * P, n=24, k=48, balance="dynamic", iters=2, warmup=0, panel=16,
                 verify="full", save_c=False, ranks_per_node=ranks_per_node, device="cpu")
    result = hpcmm.run(cfg, comm=COMM)
    everywhere(result.check.passed, f"residual {result.check.residual}")

    def check():
        rows, _ = _tiles(cfg.out)
        nodes = _nodes(cfg.out)
        assert len(set(nodes)) == -(-P // ranks_per_node)
        for product in (0, 1):
            mine = rows[rows["product"] == product]
            claims = [(int(r["owner"]), int(r["tile"])) for r in mine]
            assert len(claims) == len(set(claims)), f"product {product}: a tile computed twice"
            assert {owner for owner, _ in claims} == set(range(P))  # every block, within its node
            assert all(nodes[int(r["rank"])] == nodes[int(r["owner"])] for r in mine), \
                [(int(r["rank"]), int(r["owner"])) for r in mine]
        taken_from_0 = sum(1 for r in rows if int(r["owner"]) == 0 and int(r["rank"]) != 0)
        assert (taken_from_0 >= 1) == (ranks_per_node == 2), taken_from_0  # rank 1 shares its node or not
        with h5py.File(cfg.out, "r") as f:
            table = f["transfers"][()]
            plan = json.loads(f["config"].attrs["plan"])
        grid_rows, grid_cols = (int(x) for x in plan["grid"].split("x"))
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


def test_the_library_plans_and_executes_dynamic_products():
    """``hpcmm.Matmul`` with ``MatmulOptions(balance="dynamic")``: executes many times, each right."""
    import numpy as np

    m, n, k = 83 * P + 5, 37, 61
    rng = np.random.default_rng(11)
    a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    with hpcmm.Matmul(COMM, m, n, k, "float64", options=hpcmm.MatmulOptions(balance="dynamic", device="cpu")) as mm:
        plan = mm.plan()
        assert plan.balance == "dynamic" and plan.prefetch == 0
        lay = mm.layout
        for scale in (1.0, -2.0):
            c = mm.execute(lay.block("A", RANK, a * scale), lay.block("B", RANK, b))
            np.testing.assert_allclose(c, lay.block("C", RANK, (a * scale) @ b), rtol=1e-12, atol=1e-10)


@pytest.mark.parametrize("verify", ["freivalds", "full"])
def test_a_wrong_tile_fails_the_check(mpi_tmp_path, monkeypatch, verify):
    """One element of the last rank's C off by 0.05 after each product: both checks catch it."""
    from hpcmm.execution.dynamic import DynamicEngine

    original = DynamicEngine.multiply

    def multiply(self, *args, **kwargs):
        times = original(self, *args, **kwargs)
        if RANK == P - 1 and self.C.size:
            self.C[0, 0] += 0.05
        return times

    monkeypatch.setattr(DynamicEngine, "multiply", multiply)
    cfg = config(mpi_tmp_path, m=64 * P + 3, n=33, k=120, balance="dynamic", verify=verify, save_c=False)
    message = raised_everywhere(lambda: hpcmm.run(cfg, comm=COMM, write=False), hpcmm.errors.VerificationError)
    assert message.startswith(f"verification failed: {verify} residual"), message


def test_ranks_that_time_slice_one_gpu_leave_every_tile_to_one_worker(mpi_tmp_path, monkeypatch):
    """Where the ranks share one GPU by time slices the first of them computes every block, one tile each,
    and the product is still right (here on CPU, the workers given as the plan would find them)."""
    from hpcmm.execution import dynamic
    from hpcmm.planning.arrangement import Arrangement

    monkeypatch.setattr(Arrangement, "tile_worker_of", property(lambda self: (0,) * len(self.order)))
    # Products of milliseconds on a loaded host vary by more than JOIN_SLOWDOWN: here nobody joins.
    monkeypatch.setattr(dynamic, "JOIN_SLOWDOWN", float("inf"))
    cfg = config(mpi_tmp_path, m=300 * P + 11, n=45, k=120, balance="dynamic", iters=2, warmup=1, panel=32,
                 verify="full", save_c=False)
    result = hpcmm.run(cfg, comm=COMM)
    everywhere(result.check.passed, f"residual {result.check.residual}")

    def check():
        rows, taken = _tiles(cfg.out)
        with h5py.File(cfg.out, "r") as f:
            plan = json.loads(f["config"].attrs["plan"])
        assert plan["tile_workers"] == [0]
        grid_rows, grid_cols = (int(x) for x in plan["grid"].split("x"))
        # The lone worker multiplies the operands whose k the grid cuts from whole copies (C checked in full).
        assert plan["tile_gather"] == "A" * (grid_cols > 1) + "B" * (grid_rows > 1)
        others = [b for r, b in enumerate(plan["memory_bytes"]) if r != 0]
        assert P == 1 or plan["memory_bytes"][0] > max(others)  # the whole operands are counted on its device
        assert {int(r["rank"]) for r in rows} == {0}
        per_product = collections.Counter((int(r["product"]), int(r["owner"]), int(r["tile"])) for r in rows)
        assert sorted(per_product) == [(p, owner, 0) for p in range(2) for owner in range(P)]  # one tile a block
        assert set(per_product.values()) == {1}
        assert taken == (0.0 if P == 1 else (P - 1) / P)

    on_rank0(check)


def test_a_lone_worker_multiplies_from_the_owners_blocks_where_whole_operands_do_not_fit(mpi_tmp_path, monkeypatch):
    """No room for the whole operands beside the blocks: the lone worker gathers nothing, every tile's GEMMs
    read the owners' blocks, and C is still right."""
    from hpcmm.planning import choices
    from hpcmm.planning.arrangement import Arrangement

    monkeypatch.setattr(Arrangement, "tile_worker_of", property(lambda self: (0,) * len(self.order)))
    monkeypatch.setattr(choices, "gather_bytes", lambda layout, itemsize, gather: 2**62 if gather else 0)
    cfg = config(mpi_tmp_path, m=200 * P + 5, n=39, k=90, balance="dynamic", iters=2, warmup=0, panel=16,
                 verify="full", save_c=False)
    result = hpcmm.run(cfg, comm=COMM)
    everywhere(result.check.passed, f"residual {result.check.residual}")

    def check():
        with h5py.File(cfg.out, "r") as f:
            plan = json.loads(f["config"].attrs["plan"])
        assert plan["tile_workers"] == [0] and plan["tile_gather"] == ""

    on_rank0(check)


@pytest.mark.timeout(300)  # a hang guard
def test_the_ranks_beside_a_lone_worker_join_it_once_its_gpu_runs_slow(mpi_tmp_path, monkeypatch):
    """A lone worker (rank 0, as on a time-sliced GPU) whose GEMMs, and everyone's, turn 20 times slower
    from the third product (another program took time slices of the GPU): the others compute too from
    the product after, each tile of each product is computed once, and C is right."""
    if P < 2:
        pytest.skip("needs 2 ranks")
    from hpcmm.execution.dynamic import DynamicEngine
    from hpcmm.planning.arrangement import Arrangement

    monkeypatch.setattr(Arrangement, "tile_worker_of", property(lambda self: (0,) * len(self.order)))
    products = []
    multiply, gemm = DynamicEngine.multiply, CpuBackend.gemm

    def counted(self, *args, **kwargs):
        products.append(None)
        return multiply(self, *args, **kwargs)

    def slowed(self, *args, **kwargs):
        time.sleep(0.02 if len(products) <= 2 else 0.4)
        return gemm(self, *args, **kwargs)

    monkeypatch.setattr(DynamicEngine, "multiply", counted)
    monkeypatch.setattr(CpuBackend, "gemm", slowed)
    cfg = config(mpi_tmp_path, m=40 * P + 3, n=29, k=50)  # its m, n, k and the results file's name
    run_and_compare(mpi_tmp_path, m=cfg.m, n=cfg.n, k=cfg.k, balance="dynamic", iters=6, warmup=0, panel=16)

    def check():
        rows, _ = _tiles(cfg.out)
        by_product = collections.defaultdict(list)
        for row in rows:
            by_product[int(row["product"])].append((int(row["rank"]), int(row["owner"]), int(row["tile"])))
        assert sorted(by_product) == list(range(6))
        for product, tiles in by_product.items():
            assert sorted((o, t) for _, o, t in tiles) == [(owner, 0) for owner in range(P)], (product, tiles)
        # The first two products alone (the rule needs a product to compare); from the fourth on, the
        # third's slowness seen, the others compute too.
        assert {r for p in (0, 1) for r, _, _ in by_product[p]} == {0}, dict(by_product)
        for product in (3, 4, 5):
            assert {r for r, _, _ in by_product[product]} - {0}, (product, by_product[product])
        with h5py.File(cfg.out, "r") as f:
            assert int(f["summary"].attrs["dynamic_joined_products"]) >= 3

    on_rank0(check)
