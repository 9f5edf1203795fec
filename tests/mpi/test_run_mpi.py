"""The library under MPI: ``hpcmm.run`` at any rank count, checked against numpy.

Run with::

    mpiexec -n 4 python -m pytest --with-mpi tests/mpi

(``tests/test_mpi_suite.py`` does this for 1, 2, 3 and 4 ranks.)  Every test
works at any size; pytest-mpi skips one whose ``min_size`` exceeds it.  Shapes
are sized from the rank count P and uneven on purpose (m = 7P+3, ...).

Each product is checked twice: by the run's own ``--verify full`` and by
reading ``/result/C`` back and comparing it, on rank 0, with the float64
product of the same generated (or stored) matrices.  A verdict found on one
rank is shared with all (:func:`everywhere`) before any rank asserts, so a
failing rank never leaves the others waiting in the next test's collectives.

The device follows ``HPCMM_DEVICE`` (default ``auto``: numpy where there is
no GPU); on a GPU the same tests take the ``ipc`` and ``mpi``/``staged`` paths.
"""

from __future__ import annotations

import os
from pathlib import Path

import h5py
import numpy as np
import pytest
from mpi4py import MPI

import hpcmm
from hpcmm.config import RunConfig
from hpcmm.planning.algorithms import own_start
from hpcmm.dtypes import BFLOAT16, read_dataset, to_storage
from hpcmm.execution.engine import Engine
from hpcmm.errors import InputError, VerificationError
from hpcmm.planning.gemm_orders import ORDERS, label
from hpcmm.io.inputs import generate_block
from hpcmm.geometry.layout import Grid, Layout, padded
from hpcmm.verify import tolerance

COMM = MPI.COMM_WORLD
RANK = COMM.Get_rank()
P = COMM.Get_size()
DEVICE = os.environ.get("HPCMM_DEVICE", "auto")
DATA = Path(__file__).resolve().parents[2] / "data"


# -- helpers ----------------------------------------------------------------------


def everywhere(ok: bool, message: str = "") -> None:
    """Assert on every rank that every rank's ``ok`` holds; the message names the failing ranks."""
    verdicts = COMM.allgather((bool(ok), message))
    failed = [f"rank {r}: {m}" for r, (good, m) in enumerate(verdicts) if not good]
    assert not failed, "; ".join(failed)


def on_rank0(check) -> None:
    """Run ``check()`` (which asserts) on rank 0 and share its outcome with every rank."""
    message = ""
    if RANK == 0:
        try:
            check()
        except AssertionError as exc:
            message = str(exc) or "assertion failed"
        except Exception as exc:  # noqa: BLE001 - any error on rank 0 must reach every rank, not hang them
            message = f"{type(exc).__name__}: {exc}"
    everywhere(not message, message)


def corrupt_last_rank(monkeypatch, delta: float) -> None:
    """After every product, add ``delta`` to the last rank's C[0, 0] (where it holds a block)."""
    original = Engine.multiply

    def multiply(self, *args, **kwargs):
        times = original(self, *args, **kwargs)
        if RANK == P - 1 and self.C.size:
            self.C[0, 0] += delta
        return times

    monkeypatch.setattr(Engine, "multiply", multiply)


def config(tmp: Path, **kwargs) -> RunConfig:
    """A small checked run that saves C: one product, full verification."""
    base = dict(device=DEVICE, warmup=0, iters=1, verify="full", save_c=True, out=str(tmp / "result.h5"))
    base.update(kwargs)
    return RunConfig(**base)


def generated_product(seed: int, m: int, n: int, k: int, dtype: str):
    """``A``, ``B`` as the run generates them, in float64 (complex128), and their product."""
    wide = np.complex128 if np.dtype(dtype).kind == "c" else np.float64
    a = generate_block(seed, "A", (m, k), (0, m), (0, k), dtype).astype(wide)
    b = generate_block(seed, "B", (k, n), (0, k), (0, n), dtype).astype(wide)
    return a, b


def compare(path: str, a: np.ndarray, b: np.ndarray, dtype: str) -> None:
    """Rank 0: ``/result/C`` of ``path`` is ``a @ b`` within the rounding bound of ``dtype``."""
    with h5py.File(path, "r") as f:
        c = read_dataset(f["result/C"])  # bfloat16 is stored as its raw bits
        steps = int(f["config"].attrs["steps"])
        tf32 = bool(f["config"].attrs["tf32"])
    ref = a @ b
    assert c.shape == ref.shape, f"C is {c.shape}, expected {ref.shape}"
    assert c.dtype == np.dtype(dtype), c.dtype
    assert np.isfinite(c).all(), f"{np.count_nonzero(~np.isfinite(c))} element(s) of C never written"
    c = c.astype(ref.dtype)
    scale = np.abs(a) @ np.abs(b)
    error = float(np.max(np.abs(c - ref) / scale))
    bound = tolerance(dtype, a.shape[1], steps, tf32)
    assert error <= bound, f"max componentwise error {error:.3e} > {bound:.3e}"


def run_and_compare(tmp: Path, *, seed: int = 42, **kwargs) -> hpcmm.RunResult:
    """Run, then check the run's verdict and the saved C on every rank."""
    cfg = config(tmp, seed=seed, **kwargs)
    result = hpcmm.run(cfg, comm=COMM)
    everywhere(result.summary["verified"] is True and result.check.passed,
               f"summary {result.summary.get('verify')}: residual {result.summary.get('residual')}")
    everywhere(result.summary["ranks"] == P, f"ranks {result.summary['ranks']}")

    def check():
        a, b = generated_product(seed, cfg.m, cfg.n, cfg.k, cfg.dtype)
        compare(cfg.out, a, b, cfg.dtype)

    on_rank0(check)
    return result


def same_node_path(result) -> str:
    return "ipc" if result.topology[0]["gpu_index"] >= 0 else "shm"


def cross_node_paths(result) -> set[str]:
    return {"mpi", "staged"} if result.topology[0]["gpu_index"] >= 0 else {"mpi"}


def shape(kind: str) -> tuple[int, int, int]:
    """Problem shapes sized from the rank count; none divides evenly over any grid."""
    return {
        "uneven": (7 * P + 3, 5 * P + 1, 3 * P + 2),
        "tall": (11 * P + 5, 3, P + 4),
        "wide": (5, 9 * P + 2, 2 * P + 3),
        "shallow": (3 * P + 1, 2 * P + 5, 2),  # k smaller than some grids' columns
    }[kind]


# -- products -----------------------------------------------------------------------


@pytest.mark.mpi(min_size=1)
@pytest.mark.parametrize("kind", ["uneven", "tall", "wide", "shallow"])
def test_uneven_shapes(mpi_tmp_path, kind):
    m, n, k = shape(kind)
    run_and_compare(mpi_tmp_path, m=m, n=n, k=k)


@pytest.mark.mpi(min_size=1)
@pytest.mark.parametrize("dtype", ["float32", "complex128", "complex64", "float16", "bfloat16"])
def test_other_dtypes(mpi_tmp_path, dtype):
    m, n, k = shape("uneven")
    run_and_compare(mpi_tmp_path, m=m, n=n, k=k, dtype=dtype, seed=7)


@pytest.mark.mpi(min_size=1)
@pytest.mark.parametrize("grid", ["1xP", "Px1"])
def test_explicit_grids(mpi_tmp_path, grid):
    rows, cols = (1, P) if grid == "1xP" else (P, 1)
    m, n, k = shape("uneven")
    result = run_and_compare(mpi_tmp_path, m=m, n=n, k=k, grid=(rows, cols))
    everywhere([(r["grid_row"], r["grid_col"]) for r in result.topology]
               == [divmod(r, cols) for r in range(P)], "topology rows do not follow the grid")


@pytest.mark.mpi(min_size=1)
@pytest.mark.parametrize("grid, sizes", [("Px1", (2, 7, 5)), ("1xP", (6, 2, 5)), ("1xP", (5, 6, 2)),
                                         ("Px1", (1, 1, 1))])
def test_more_ranks_than_rows_or_columns(mpi_tmp_path, grid, sizes):
    """Ranks whose blocks are empty still take part, and C comes out whole."""
    rows, cols = (1, P) if grid == "1xP" else (P, 1)
    m, n, k = sizes
    layout = Layout(m, n, k, Grid(rows, cols))
    empty = [r for r in range(P) if 0 in layout.local_shapes(r)["C"] or 0 in layout.local_shapes(r)["A"]
             or 0 in layout.local_shapes(r)["B"]]
    if P >= 3:
        assert empty, "the case should leave some rank without a block at this size"
    run_and_compare(mpi_tmp_path, m=m, n=n, k=k, grid=(rows, cols))


@pytest.mark.mpi(min_size=1)
def test_repeated_products_and_prefetch_ring(mpi_tmp_path):
    """Several warm-up and timed products in a row reuse the panel ring: C stays right."""
    m, n, k = shape("uneven")
    result = run_and_compare(mpi_tmp_path, m=m, n=n, k=k, warmup=2, iters=3, panel=3, prefetch=2)
    on_rank0(lambda: _check_timings(result, mpi_tmp_path / "result.h5", iters=3))


@pytest.mark.mpi(min_size=1)
@pytest.mark.parametrize("step_order, ranks_per_node", [("auto", None), ("common", None), ("auto", 1)])
def test_step_orders(mpi_tmp_path, step_order, ranks_per_node):
    """Each rank's own order on one node, the common one when asked or across (virtual) nodes: C right either way."""
    m, n, k = shape("uneven")
    result = run_and_compare(mpi_tmp_path, m=m, n=n, k=k, panel=3, prefetch=2, iters=2,
                             step_order=step_order, ranks_per_node=ranks_per_node)
    one_node = ranks_per_node is None or P <= ranks_per_node
    expected = "own-first" if step_order == "auto" and one_node else "common"

    def check():
        _check_timings(result, mpi_tmp_path / "result.h5", iters=2)
        with h5py.File(mpi_tmp_path / "result.h5", "r") as f:
            assert f["config"].attrs["step_order_used"] == expected
            plans = f["timings/plans"][()]
            grid = tuple(int(x) for x in f["config"].attrs["grid"].split("x"))
        layout = Layout(m, n, k, Grid(*grid))
        for rank in range(P):
            first = int(plans[plans["rank"] == rank]["k0"][0])
            assert first == (own_start(layout, rank)[0] if expected == "own-first" else 0), (rank, first)

    on_rank0(check)


def _check_timings(result, path, iters):
    with h5py.File(path, "r") as f:
        steps = int(f["config"].attrs["steps"])
        assert f["timings/iteration_seconds"].shape == (P, iters)
        assert f["timings/step_seconds"].shape == (P, iters, steps, 3)
        assert (f["timings/iteration_seconds"][()] > 0).all()
        # /timings/steps is rank 0's plan, /timings/plans every rank's: the longest is `steps` long.
        plans = f["timings/plans"][()]
        lengths = [int((plans["rank"] == r).sum()) for r in range(P)]
        assert max(lengths) == steps and len(f["timings/steps"]) == lengths[0]
        steps_of = {r: plans[plans["rank"] == r] for r in range(P)}
        assert all((mine["k1"] - mine["k0"]).sum() == int(f["config"].attrs["k"]) for mine in steps_of.values())
        if f["config"].attrs["step_order_used"] == "common":
            assert all(np.array_equal(mine[["k0", "k1"]], steps_of[0][["k0", "k1"]]) for mine in steps_of.values())
    assert result.summary["seconds"] > 0 and result.summary["tflops"] > 0


# -- the GEMM's operand orders (hpcmm.planning.gemm_orders) -------------------------------------------


@pytest.mark.mpi(min_size=1)
@pytest.mark.parametrize("prefetch", [0, 1, 2])
@pytest.mark.parametrize("order", ORDERS)
def test_every_gemm_order(mpi_tmp_path, order, prefetch):
    """Panels re-laid out for the GEMM (own and arrived ones), uneven shapes, a narrow last panel."""
    m, n, k = shape("uneven")
    result = run_and_compare(mpi_tmp_path, m=m, n=n, k=k, panel=3, prefetch=prefetch, gemm_order=order)
    everywhere(result.summary["gemm_order"] == label(order), f"summary says {result.summary['gemm_order']}")

    def recorded():
        with h5py.File(mpi_tmp_path / "result.h5", "r") as f:
            assert f["summary"].attrs["gemm_order"] == label(order)
            assert f["config"].attrs["gemm_order"] == order

    on_rank0(recorded)


@pytest.mark.parametrize("prefetch", [0, 1])
@pytest.mark.parametrize("order", ORDERS)
def test_blocks_with_and_without_padding(mpi_tmp_path, order, prefetch):
    """Local extents that are whole cache lines (multiples of 16 float64: stored unpadded) beside ones
    that are not (padded: at least 240 float64, layout.padded), and a thin k."""
    m, n, k = 256 * P, 256 * P + 3, 3 * P + 2
    run_and_compare(mpi_tmp_path, m=m, n=n, k=k, panel=4, prefetch=prefetch, gemm_order=order)


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("order", ["CC", "CF", "FF"])
@pytest.mark.parametrize("ranks_per_node", [1, 2])
def test_gemm_orders_across_nodes(mpi_tmp_path, order, ranks_per_node):
    """Re-laid-out panels that came through MPI, and through a node's leader."""
    m, n, k = shape("uneven")
    run_and_compare(mpi_tmp_path, m=m, n=n, k=k, panel=2, prefetch=1, ranks_per_node=ranks_per_node,
                    gemm_order=order)


@pytest.mark.mpi(min_size=1)
@pytest.mark.parametrize("dtype, order", [("bfloat16", "CF"), ("float16", "FF"), ("float32", "CC"),
                                          ("complex64", "CF")])
def test_gemm_orders_of_other_types(mpi_tmp_path, dtype, order):
    m, n, k = shape("wide")
    run_and_compare(mpi_tmp_path, m=m, n=n, k=k, dtype=dtype, panel=4, gemm_order=order, seed=11)


# -- paths between (virtual) nodes ------------------------------------------------------


@pytest.mark.mpi(min_size=2)
def test_one_node_uses_the_same_node_path(mpi_tmp_path):
    m, n, k = shape("uneven")
    result = run_and_compare(mpi_tmp_path, m=m, n=n, k=k)
    everywhere(result.summary["paths"] == [same_node_path(result)], f"paths {result.summary['paths']}")


@pytest.mark.mpi(min_size=2)
def test_one_rank_per_node_uses_mpi(mpi_tmp_path):
    """--ranks-per-node 1: every rank is a node of its own, every panel crosses through MPI."""
    m, n, k = shape("uneven")
    result = run_and_compare(mpi_tmp_path, m=m, n=n, k=k, ranks_per_node=1)
    paths = set(result.summary["paths"])
    everywhere(len(paths) == 1 and paths <= cross_node_paths(result), f"paths {sorted(paths)}")
    everywhere({r["node"] for r in result.topology} == set(range(P)), "one node per rank expected")


@pytest.mark.mpi(min_size=3)
@pytest.mark.parametrize("grid", [None, "Px1", "1xP"])
def test_two_ranks_per_node_use_both_paths(mpi_tmp_path, grid):
    """--ranks-per-node 2: panels cross between nodes by MPI and within a node by shared memory."""
    grid = {None: None, "Px1": (P, 1), "1xP": (1, P)}[grid]
    m, n, k = shape("uneven")
    result = run_and_compare(mpi_tmp_path, m=m, n=n, k=k, ranks_per_node=2, grid=grid)
    paths = set(result.summary["paths"])
    everywhere(same_node_path(result) in paths and paths & cross_node_paths(result), f"paths {sorted(paths)}")
    everywhere([r["node"] for r in result.topology] == [r // 2 for r in range(P)],
               f"nodes {[r['node'] for r in result.topology]}")


@pytest.mark.mpi(min_size=4)
@pytest.mark.parametrize("prefetch", [0, 1, 3])
def test_relay_through_the_node_leader(mpi_tmp_path, prefetch):
    """Px1, two ranks per node: rank 3 takes rank 0's B panel from its leader, rank 2, not from rank 0.

    The leader rewrites its relay slots while its node peer reads them; with
    ``prefetch 0`` too the slots must alternate.
    """
    m, n, k = shape("uneven")
    run_and_compare(mpi_tmp_path, m=m, n=n, k=k, ranks_per_node=2, grid=(P, 1), panel=2, prefetch=prefetch,
                    warmup=1, iters=2)

    def check():
        with h5py.File(mpi_tmp_path / "result.h5", "r") as f:
            rows = {(int(t["src"]), int(t["dst"])): t["path"].decode() for t in f["transfers"][()]}
        assert rows.get((2, 3)) in ("shm", "ipc"), f"no relay 2 -> 3 in {rows}"
        assert (0, 3) not in rows, "rank 3 read rank 0's panel across nodes directly"
        assert rows.get((0, 2)) in ("mpi", "staged"), rows

    on_rank0(check)


def expected_bytes(layout: Layout, plan_widths: list[tuple[int, int, int]], itemsize: int) -> int:
    """Bytes one product moves: every step, each rank outside the panel's owner column (row) gets its piece.

    A panel travels as stored: whole columns of A and rows of B, each padded to 128 bytes (``padded``).
    """
    total = 0
    for width, a_root, b_root in plan_widths:
        for rank in range(layout.grid.size):
            r, c = layout.grid.coords(rank)
            if c != a_root:
                total += padded(layout.rows(r)[1] - layout.rows(r)[0], itemsize) * width * itemsize
            if r != b_root:
                total += padded(layout.cols(c)[1] - layout.cols(c)[0], itemsize) * width * itemsize
    return total


@pytest.mark.mpi(min_size=1)
@pytest.mark.parametrize("ranks_per_node", [None, 1, 2])
def test_transfer_table_accounts_for_every_byte(mpi_tmp_path, ranks_per_node):
    """/transfers holds exactly the bytes SUMMA must move, each panel received once per rank."""
    m, n, k = shape("uneven")
    result = run_and_compare(mpi_tmp_path, m=m, n=n, k=k, ranks_per_node=ranks_per_node, panel=4)

    def check():
        with h5py.File(mpi_tmp_path / "result.h5", "r") as f:
            table = f["transfers"][()] if "transfers" in f else np.zeros(0, dtype=[("bytes", "i8")])
            plan = [(int(s["k1"] - s["k0"]), int(s["a_root"]), int(s["b_root"])) for s in f["timings/steps"][()]]
            grid = tuple(int(x) for x in f["config"].attrs["grid"].split("x"))
        layout = Layout(m, n, k, Grid(*grid))
        want = expected_bytes(layout, plan, 8)
        got = int(table["bytes"].sum()) if len(table) else 0
        assert got == want, f"/transfers sums to {got} bytes, SUMMA moves {want}"
        if len(table):
            assert (table["bytes"] > 0).all()
            assert {p.decode() for p in table["path"]} == set(result.summary["paths"])

    on_rank0(check)


# -- algorithm settings -------------------------------------------------------------------


@pytest.mark.mpi(min_size=1)
@pytest.mark.parametrize("prefetch", [0, 1, 2, 3])
@pytest.mark.parametrize("panel", [5, 7])
@pytest.mark.parametrize("ranks_per_node", [None, 2])
def test_prefetch_and_panel_widths(mpi_tmp_path, prefetch, panel, ranks_per_node):
    """k = 30: a panel of 5 divides it, 7 does not; 0 to 3 panels in flight, one node or several."""
    m, n, k = 5 * P + 2, 3 * P + 4, 30
    result = run_and_compare(mpi_tmp_path, m=m, n=n, k=k, panel=panel, prefetch=prefetch,
                             ranks_per_node=ranks_per_node, warmup=1, iters=2)
    everywhere(result.summary["panel"] == panel and result.summary["prefetch"] == prefetch, str(result.summary))


@pytest.mark.mpi(min_size=1)
def test_panel_as_wide_as_k(mpi_tmp_path):
    m, n, k = shape("uneven")
    run_and_compare(mpi_tmp_path, m=m, n=n, k=k, panel=k, prefetch=0)


@pytest.mark.mpi(min_size=1)
def test_run_without_writing(mpi_tmp_path):
    """write=False: the product is verified, nothing is written."""
    m, n, k = shape("tall")
    result = hpcmm.run(config(mpi_tmp_path, m=m, n=n, k=k, verify="freivalds"), comm=COMM, write=False)
    everywhere(result.summary["verified"] is True and result.path is None, str(result.summary))
    everywhere(not any(mpi_tmp_path.iterdir()), f"files written: {list(mpi_tmp_path.iterdir())}")


@pytest.mark.mpi(min_size=1)
def test_sub_communicator(mpi_tmp_path):
    """The run takes any communicator: here the even ranks alone (no hidden COMM_WORLD)."""
    color = RANK % 2
    sub = COMM.Split(color, RANK)
    try:
        size = sub.Get_size()
        m, n, k = 4 * size + 3, 3 * size + 2, 2 * size + 5
        result = None
        if color == 0:
            result = hpcmm.run(config(mpi_tmp_path, m=m, n=n, k=k, verify="full"), comm=sub, write=False)
        everywhere(color == 1 or (result.summary["verified"] and result.summary["ranks"] == size),
                   "run on the even ranks failed")
    finally:
        sub.Free()


# -- inputs from files ------------------------------------------------------------------------


@pytest.mark.mpi(min_size=1)
@pytest.mark.parametrize("ranks_per_node", [None, 1])
def test_inputs_from_hdf5(mpi_tmp_path, ranks_per_node):
    cfg = config(mpi_tmp_path, a=(str(DATA / "small.h5"), "A"), b=(str(DATA / "small.h5"), "B"),
                 ranks_per_node=ranks_per_node)
    result = hpcmm.run(cfg, comm=COMM)
    everywhere(result.summary["verified"] is True, str(result.summary))

    def check():
        with h5py.File(DATA / "small.h5", "r") as f:
            a, b, c = f["A"][()], f["B"][()], f["C"][()]
        compare(cfg.out, a, b, "float64")
        with h5py.File(cfg.out, "r") as f:
            assert np.allclose(f["result/C"][()], c, rtol=0, atol=1e-13)
            assert (int(f["config"].attrs["m"]), int(f["config"].attrs["n"]), int(f["config"].attrs["k"])) == (37, 29, 23)

    on_rank0(check)


@pytest.mark.mpi(min_size=1)
def test_inputs_from_npy(mpi_tmp_path):
    cfg = config(mpi_tmp_path, a=(str(DATA / "A.npy"), None), b=(str(DATA / "B.npy"), None), dtype="float32")
    result = hpcmm.run(cfg, comm=COMM)
    everywhere(result.summary["verified"] is True, str(result.summary))

    def check():
        a = np.load(DATA / "A.npy").astype(np.float32).astype(np.float64)
        b = np.load(DATA / "B.npy").astype(np.float32).astype(np.float64)
        compare(cfg.out, a, b, "float32")
        with h5py.File(cfg.out, "r") as f:
            assert np.allclose(f["result/C"][()], np.load(DATA / "C_npy.npy"), rtol=0, atol=1e-5)

    on_rank0(check)


# -- bfloat16: 2-byte elements through every path, files both ways --------------------------


@pytest.mark.mpi(min_size=1)
@pytest.mark.parametrize("ranks_per_node, verify", [(None, "freivalds"), (1, "full"), (2, "full")])
def test_bfloat16_on_every_path(mpi_tmp_path, ranks_per_node, verify):
    """shm (one node), mpi (a node per rank), both (two ranks a node): bytes move as they are."""
    m, n, k = shape("uneven")
    result = run_and_compare(mpi_tmp_path, m=m, n=n, k=k, dtype="bfloat16", panel=3, verify=verify,
                             ranks_per_node=ranks_per_node, seed=11)
    expected = {None: {same_node_path(result)}, 1: cross_node_paths(result)}.get(ranks_per_node)
    paths = set(result.summary["paths"])
    if P > 1 and expected is not None:
        everywhere(bool(paths) and paths <= expected, f"paths {sorted(paths)}")


@pytest.mark.mpi(min_size=1)
def test_bfloat16_inputs_raw_bits_and_float32(mpi_tmp_path):
    """A as bfloat16 raw bits (element_type attribute), B as float32 (rounded to bfloat16 on reading)."""
    m, n, k = shape("uneven")
    path = mpi_tmp_path / "in.h5"
    rng = np.random.default_rng(5)
    a = (rng.random((m, k)) * 2 - 1).astype(BFLOAT16)
    b = (rng.random((k, n)) * 2 - 1).astype(np.float32)
    if RANK == 0:
        with h5py.File(path, "w") as f:
            f["A"] = to_storage(a)
            f["A"].attrs["element_type"] = "bfloat16"
            f["B"] = b
    COMM.Barrier()
    cfg = config(mpi_tmp_path, a=(str(path), "A"), b=(str(path), "B"), dtype="bfloat16")
    result = hpcmm.run(cfg, comm=COMM)
    everywhere(result.summary["verified"] is True, str(result.summary))
    on_rank0(lambda: compare(cfg.out, a.astype(np.float64), b.astype(BFLOAT16).astype(np.float64), "bfloat16"))


@pytest.mark.mpi(min_size=1)
def test_bfloat16_wrong_element_fails(mpi_tmp_path, monkeypatch):
    """One wrong element of a bfloat16 C fails both checks on every rank."""
    corrupt_last_rank(monkeypatch, 64.0)
    m, n, k = shape("uneven")
    for verify in ("freivalds", "full"):
        message = raised_everywhere(lambda: hpcmm.run(config(
            mpi_tmp_path, m=m, n=n, k=k, dtype="bfloat16", verify=verify,
            out=str(mpi_tmp_path / f"{verify}.h5")), comm=COMM), VerificationError)
        assert message.startswith(f"verification failed: {verify} residual")


def raised_everywhere(run, error_type=InputError) -> str:
    """Call ``run()``; every rank must raise ``error_type`` with the same one-line message."""
    message = None
    try:
        run()
    except error_type as exc:
        message = str(exc)
    messages = COMM.allgather(message)
    assert all(msg is not None for msg in messages), f"not raised on every rank: {messages}"
    assert len(set(messages)) == 1, f"ranks disagree: {messages}"
    assert "\n" not in messages[0]
    return messages[0]


@pytest.mark.mpi(min_size=1)
def test_bad_input_files_fail_on_every_rank(mpi_tmp_path):
    missing = raised_everywhere(lambda: hpcmm.run(
        config(mpi_tmp_path, a=(str(mpi_tmp_path / "nope.h5"), "A"), b=(str(DATA / "small.h5"), "B")), comm=COMM))
    assert "no such file" in missing
    mismatch = raised_everywhere(lambda: hpcmm.run(
        config(mpi_tmp_path, a=(str(DATA / "small.h5"), "A"), b=(str(DATA / "B.npy"), None)), comm=COMM))
    assert "k of A (23) != k of B (11)" in mismatch
    everywhere(not (mpi_tmp_path / "result.h5").exists(), "a failed run left its output file")


@pytest.mark.mpi(min_size=1)
def test_bad_settings_fail_on_every_rank(mpi_tmp_path):
    m, n, k = shape("uneven")
    grid = raised_everywhere(lambda: hpcmm.run(config(mpi_tmp_path, m=m, n=n, k=k, grid=(P + 1, 1)), comm=COMM))
    assert f"does not match {P} ranks" in grid
    wide = raised_everywhere(lambda: hpcmm.run(config(mpi_tmp_path, m=m, n=n, k=k, panel=k + 1), comm=COMM))
    assert f"--panel={k + 1}: wider than k={k}" in wide
    if RANK == 0:
        (mpi_tmp_path / "taken.h5").write_bytes(b"keep me")
    COMM.Barrier()
    exists = raised_everywhere(lambda: hpcmm.run(
        config(mpi_tmp_path, m=m, n=n, k=k, out=str(mpi_tmp_path / "taken.h5")), comm=COMM))
    assert "file exists" in exists
    everywhere((mpi_tmp_path / "taken.h5").read_bytes() == b"keep me", "an existing file was replaced")


@pytest.mark.mpi(min_size=1)
def test_wrong_block_on_one_rank_fails_everywhere(mpi_tmp_path, monkeypatch):
    """The last rank's C goes wrong: every rank raises VerificationError, and the file says so."""
    corrupt_last_rank(monkeypatch, 1.0)
    m, n, k = shape("uneven")
    for verify in ("freivalds", "full"):
        out = mpi_tmp_path / f"{verify}.h5"
        message = raised_everywhere(
            lambda: hpcmm.run(config(mpi_tmp_path, m=m, n=n, k=k, verify=verify, out=str(out)), comm=COMM),
            VerificationError)
        assert message.startswith(f"verification failed: {verify} residual")

        def check():
            with h5py.File(out, "r") as f:
                assert not bool(f["summary"].attrs["verified"])

        on_rank0(check)
