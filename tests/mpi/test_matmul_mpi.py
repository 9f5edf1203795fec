"""hpcmm.Matmul on the caller's blocks against numpy in float64, at every rank count of the MPI suite.

Shapes follow the rank count and are uneven on purpose; outputs are poisoned
with NaN wherever β = 0, so that a block left unwritten shows.
"""

from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI

import hpcmm
from hpcmm.config import DTYPES
from hpcmm.dtypes import numpy_dtype

pytestmark = pytest.mark.mpi

OPS = ("N", "T", "C")


def _shape(size: int) -> tuple[int, int, int]:
    return 7 * size + 3, 5 * size + 1, 3 * size + 2


def _global(rng, shape, dtype):
    x = rng.standard_normal(shape)
    if np.dtype(numpy_dtype(dtype)).kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    return x


def _stored(x, op):
    return {"N": x, "T": x.T, "C": x.conj().T}[op]


def _wide(x):
    return np.asarray(x).astype(np.complex128)


def _bound(dtype, k, alpha, beta, a, b, c):
    """An elementwise bound of the rounding of α·A·B + β·C in ``dtype`` (float64 inputs as cast)."""
    unit = 2.0 ** -8 if dtype == "bfloat16" else float(np.finfo(numpy_dtype(dtype)).eps)
    scale = abs(alpha) * (np.abs(a) @ np.abs(b)) + abs(beta) * np.abs(c)
    return 4 * (k + 4) * unit * scale + np.finfo(np.float64).tiny


def _problem(seed, dtype, op_a, op_b):
    comm = MPI.COMM_WORLD
    m, n, k = _shape(comm.size)
    rng = np.random.default_rng(seed)
    a, b, c = _global(rng, (m, k), dtype), _global(rng, (k, n), dtype), _global(rng, (m, n), dtype)
    kind = numpy_dtype(dtype)
    # What hpcmm multiplies: the inputs as the type holds them.
    a, b, c = (x.astype(kind) for x in (a, b, c))
    return (m, n, k), a, b, c, _stored(a, op_a), _stored(b, op_b)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op_a", OPS)
@pytest.mark.parametrize("op_b", OPS)
@pytest.mark.parametrize("beta", [0.0, 1.5])
def test_gemm_against_numpy(dtype, op_a, op_b, beta):
    comm = MPI.COMM_WORLD
    (m, n, k), a, b, c0, a_stored, b_stored = _problem(11, dtype, op_a, op_b)
    alpha = (0.5 - 1.25j) if np.dtype(numpy_dtype(dtype)).kind == "c" else -1.25
    with hpcmm.Matmul(comm, m, n, k, dtype, alpha=alpha, beta=beta, op_a=op_a, op_b=op_b) as mm:
        layout = mm.plan().layout
        rank = comm.rank
        c = layout.block("C", rank, c0)
        if beta == 0:
            c[...] = np.nan  # never read where β = 0: an unwritten block stays NaN
        out = mm.execute(layout.block("A", rank, a_stored), layout.block("B", rank, b_stored), c)
        assert out is c
        whole = hpcmm.gather(comm, layout, out)
    if comm.rank == 0:
        ref = alpha * (_wide(a) @ _wide(b)) + beta * _wide(c0)
        got = _wide(whole.astype(np.complex128 if whole.dtype.kind == "c" else np.float64))
        assert np.isfinite(got).all()
        bound = _bound(dtype, k, alpha, beta, _wide(a), _wide(b), _wide(c0))
        worst = np.max(np.abs(got - ref) / bound)
        assert worst <= 1, f"{dtype} op {op_a}{op_b} beta {beta}: error {worst:.2f} x the bound"


@pytest.mark.parametrize("options", [{"algo": "2.5d:2"}, {"balance": "dynamic"}], ids=["2.5d", "dynamic"])
@pytest.mark.parametrize("beta", [0.0, 1.5])
def test_every_algorithm_through_the_library(options, beta):
    """The plan's algorithm is the caller's to pick: 2.5D layers (even rank counts) and dynamic tiles give
    α·op(A)·op(B) + β·C as SUMMA does, in the plan's layout, executed twice."""
    comm = MPI.COMM_WORLD
    if "algo" in options and comm.size % 2:
        pytest.skip("2.5d:2 needs an even number of ranks on the node")
    (m, n, k), a, b, c0, a_stored, b_stored = _problem(5, "float64", "T", "N")
    with hpcmm.Matmul(comm, m, n, k, "float64", alpha=-0.75, beta=beta, op_a="T", options=options) as mm:
        plan = mm.plan()
        assert plan.algorithm == ("2.5d" if "algo" in options else "summa")
        layout, rank = plan.layout, comm.rank
        for _ in range(2):
            c = layout.block("C", rank, c0)
            if beta == 0:
                c[...] = np.nan
            out = mm.execute(layout.block("A", rank, a_stored), layout.block("B", rank, b_stored), c)
        whole = hpcmm.gather(comm, layout, out)
    if comm.rank == 0:
        ref = -0.75 * (a @ b) + beta * c0
        assert np.isfinite(whole).all()
        assert np.max(np.abs(whole - ref) / _bound("float64", k, -0.75, beta, a, b, c0)) <= 1


def test_execute_again_gives_the_bits_of_a_fresh_plan():
    comm = MPI.COMM_WORLD
    rank = comm.rank
    results = []
    with hpcmm.Matmul(comm, *_shape(comm.size), "float64", op_b="T") as mm:
        layout = mm.plan().layout
        for seed in (1, 2, 3):
            _, _, _, _, a_stored, b_stored = _problem(seed, "float64", "N", "T")
            results.append(mm.execute(layout.block("A", rank, a_stored), layout.block("B", rank, b_stored)))
        assert mm.last.product_seconds > 0 and mm.last.seconds >= mm.last.product_seconds
    _, _, _, _, a_stored, b_stored = _problem(3, "float64", "N", "T")
    with hpcmm.Matmul(comm, *_shape(comm.size), "float64", op_b="T") as fresh:
        layout = fresh.plan().layout
        again = fresh.execute(layout.block("A", rank, a_stored), layout.block("B", rank, b_stored))
    assert np.array_equal(results[-1], again)
    assert not np.array_equal(results[0], results[1])


def _slabs(shapes, size, reverse):
    """A caller's own layout: every operand by rows, uneven, ranks in reverse order where ``reverse``."""
    from hpcmm.geometry.layout import block_range

    blocks = {}
    for name, (rows, cols) in shapes.items():
        order = range(size - 1, -1, -1) if reverse else range(size)
        bounds = {r: block_range(rows, size, i) for i, r in enumerate(order)}
        blocks[name] = [(bounds[r], (0, cols)) for r in range(size)]
    return hpcmm.Layout(shapes, blocks)


@pytest.mark.parametrize("op_a", ["N", "T"])
def test_a_callers_layout_that_is_not_the_plans(op_a):
    comm = MPI.COMM_WORLD
    rank = comm.rank
    (m, n, k), a, b, c0, a_stored, b_stored = _problem(5, "float64", op_a, "N")
    layout = _slabs({"A": a_stored.shape, "B": b_stored.shape, "C": (m, n)}, comm.size, reverse=True)
    with hpcmm.Matmul(comm, m, n, k, "float64", layout=layout, alpha=2.0, beta=-1.0, op_a=op_a) as mm:
        mm.plan()
        c = layout.block("C", rank, c0)
        mm.execute(layout.block("A", rank, a_stored), layout.block("B", rank, b_stored), c)
        if comm.size > 1:
            assert mm.last.moved_bytes > 0
    whole = hpcmm.gather(comm, layout, c)
    if rank == 0:
        np.testing.assert_allclose(whole, 2.0 * a @ b - c0, rtol=1e-12, atol=1e-12 * k)


def _like(target, host):
    """``host`` as an array of ``target``'s kind (cupy for hpcmm's blocks on a GPU)."""
    if isinstance(target, np.ndarray):
        return host
    import cupy  # noqa: PLC0415 - only where the blocks are on a GPU

    return cupy.asarray(host)


def test_own_blocks_are_not_copied():
    comm = MPI.COMM_WORLD
    rank = comm.rank
    (m, n, k), a, b, c0, _, _ = _problem(7, "float32", "N", "N")
    exact = a.astype(np.float64) @ b
    for alpha, beta in ((1.0, 0.0), (2.0, -1.0)):  # β ≠ 0: hpcmm's own C is read before the product
        with hpcmm.Matmul(comm, m, n, k, "float32", alpha=alpha, beta=beta) as mm:
            layout = mm.plan().layout
            a_own, b_own, c_own = mm.empty("A"), mm.empty("B"), mm.empty("C")
            for own, name, whole in ((a_own, "A", a), (b_own, "B", b), (c_own, "C", c0)):
                own[...] = _like(own, layout.block(name, rank, whole))
            assert mm.execute(a_own, b_own, c_own) is c_own
            assert mm.last.copied_bytes == 0  # A, B and C used where they lie
            got = hpcmm.gather(comm, layout, c_own)
        if rank == 0:
            np.testing.assert_allclose(got, alpha * exact + beta * c0, rtol=1e-4, atol=1e-4 * k)


def test_matmul_function_and_its_dtype_from_a():
    comm = MPI.COMM_WORLD
    rank = comm.rank
    (m, n, k), a, b, _, _, _ = _problem(9, "complex64", "N", "N")
    layout = hpcmm.Layout.grid(m, n, k, (comm.size, 1))
    c = hpcmm.matmul(comm, layout.block("A", rank, a), layout.block("B", rank, b), m=m, n=n, k=k, layout=layout)
    assert c.dtype == np.complex64
    whole = hpcmm.gather(comm, layout, c)
    if rank == 0:
        np.testing.assert_allclose(whole, _wide(a) @ _wide(b), rtol=1e-4, atol=1e-4 * k)


@pytest.mark.parametrize("bad", ["shape", "dtype", "kind"])
def test_a_bad_operand_on_one_rank_fails_every_rank_naming_it(bad):
    comm = MPI.COMM_WORLD
    rank, last = comm.rank, comm.size - 1
    (m, n, k), a, b, _, _, _ = _problem(3, "float64", "N", "N")
    with hpcmm.Matmul(comm, m, n, k, "float64") as mm:
        layout = mm.plan().layout
        a_block, b_block = layout.block("A", rank, a), layout.block("B", rank, b)
        if rank == last:
            b_block = {"shape": np.zeros((b_block.shape[0] + 1, b_block.shape[1])),
                       "dtype": b_block.astype(np.float32), "kind": b_block.tolist()}[bad]
        with pytest.raises(hpcmm.InputError, match=r"operand B"):
            mm.execute(a_block, b_block)
        # the plan survives a refused call
        mm.execute(layout.block("A", rank, a), layout.block("B", rank, b))


def test_beta_without_c_is_refused():
    comm = MPI.COMM_WORLD
    with hpcmm.Matmul(comm, 4, 4, 4, "float64", beta=1.0) as mm:
        layout = mm.plan().layout
        a = np.ones(layout.local_shape("A", comm.rank))
        b = np.ones(layout.local_shape("B", comm.rank))
        with pytest.raises(hpcmm.InputError, match=r"beta=1.0.*needs c"):
            mm.execute(a, b)


@pytest.mark.mpi(min_size=2)
def test_ranks_given_another_panel_fail_together_naming_it():
    comm = MPI.COMM_WORLD
    options = hpcmm.MatmulOptions(panel=2 if comm.rank == 1 else None)
    with pytest.raises(hpcmm.InputError, match=r"setting panel: None on rank.*; 2 on rank 1"):
        hpcmm.Matmul(comm, 16, 16, 16, "float64", options=options).plan()


def test_torch_operands():
    torch = pytest.importorskip("torch")
    comm = MPI.COMM_WORLD
    rank = comm.rank
    (m, n, k), a, b, _, _, _ = _problem(13, "float64", "N", "N")
    with hpcmm.Matmul(comm, m, n, k, "float64") as mm:
        layout = mm.plan().layout
        c = torch.full(layout.local_shape("C", rank), float("nan"), dtype=torch.float64)
        mm.execute(torch.from_numpy(layout.block("A", rank, a)), torch.from_numpy(layout.block("B", rank, b)), c)
        whole = hpcmm.gather(comm, layout, c.numpy())
    if rank == 0:
        np.testing.assert_allclose(whole, a @ b, rtol=1e-12, atol=1e-12 * k)


@pytest.mark.parametrize("kind", ["cupy", "torch"])
@pytest.mark.parametrize("op_a", ["N", "C"])
def test_device_operands(kind, op_a):
    """cupy arrays and torch tensors on the rank's GPU, in and out (skipped where the plan computes on the host)."""
    comm = MPI.COMM_WORLD
    rank = comm.rank
    (m, n, k), a, b, c0, a_stored, b_stored = _problem(17, "complex128", op_a, "T")
    with hpcmm.Matmul(comm, m, n, k, "complex128", beta=0.5, op_a=op_a, op_b="T") as mm:
        plan = mm.plan()
        device = plan.devices[rank]
        if device < 0:
            pytest.skip("the plan computes on the host")
        lib = pytest.importorskip(kind)
        layout = plan.layout
        blocks = [layout.block(name, rank, x) for name, x in (("A", a_stored), ("B", b_stored), ("C", c0))]
        if kind == "cupy":
            with lib.cuda.Device(device):
                a_dev, b_dev, c_dev = (lib.asarray(x) for x in blocks)
        else:
            a_dev, b_dev, c_dev = (lib.as_tensor(x, device=f"cuda:{device}") for x in blocks)
        out = mm.execute(a_dev, b_dev, c_dev)
        assert out is c_dev
        host = c_dev.get() if kind == "cupy" else c_dev.cpu().numpy()
        whole = hpcmm.gather(comm, layout, host)
    if rank == 0:
        np.testing.assert_allclose(whole, a @ b + 0.5 * c0, rtol=1e-12, atol=1e-12 * k)


@pytest.mark.parametrize("dtype, op_a, op_b, alpha, beta, verify", [
    ("float64", "T", "N", 2.5, -1.5, "freivalds"),
    ("complex128", "C", "T", -0.5, 0.75, "full"),
    ("float32", "N", "C", 1.0, 2.0, "freivalds"),
    ("bfloat16", "T", "T", 1.0, 0.0, "full"),
])
def test_the_command_lines_gemm_semantics(mpi_tmp_path, dtype, op_a, op_b, alpha, beta, verify):
    """``run`` with --alpha/--beta/--op-a/--op-b: C as saved against numpy on the generated inputs, checked."""
    import h5py

    from hpcmm.config import RunConfig
    from hpcmm.dtypes import read_dataset
    from hpcmm.io.inputs import generate_block

    comm = MPI.COMM_WORLD
    m, n, k = _shape(comm.size)
    out = str(mpi_tmp_path / "gemm.h5")
    config = RunConfig(m=m, n=n, k=k, dtype=dtype, op_a=op_a, op_b=op_b, alpha=alpha, beta=beta, verify=verify,
                       save_c=True, out=out, iters=1, warmup=0, quiet=True, overwrite=True)
    result = hpcmm.run(config, comm=comm)
    assert result.check.passed
    if comm.rank == 0:
        kind = numpy_dtype(dtype)
        stored_a = generate_block(42, "A", (m, k)[::1 if op_a == "N" else -1], (0, (m, k)[op_a != "N"]),
                                  (0, (m, k)[op_a == "N"]), kind)
        stored_b = generate_block(42, "B", (k, n)[::1 if op_b == "N" else -1], (0, (k, n)[op_b != "N"]),
                                  (0, (k, n)[op_b == "N"]), kind)
        c0 = generate_block(42, "C", (m, n), (0, m), (0, n), kind)
        a, b = _wide(_stored(stored_a, op_a)), _wide(_stored(stored_b, op_b))
        ref = alpha * (a @ b) + beta * _wide(c0)
        with h5py.File(out, "r") as f:
            got = _wide(read_dataset(f["result/C"]).astype(np.complex128 if np.dtype(kind).kind == "c"
                                                            else np.float64))
        bound = _bound(dtype, k, alpha, beta, a, b, _wide(c0))
        assert np.max(np.abs(got - ref) / bound) <= 1


@pytest.mark.parametrize("dtype", ["float64", "bfloat16"])
def test_write_hdf5_holds_the_whole_c(mpi_tmp_path, dtype):
    """Every rank's block of C into one dataset, in turn; read back whole (bfloat16 through its raw bits)."""
    import h5py

    from hpcmm.dtypes import read_dataset

    comm = MPI.COMM_WORLD
    (m, n, k), a, b, _, _, _ = _problem(21, dtype, "N", "N")
    path = str(mpi_tmp_path / f"c-{dtype}.h5")
    with hpcmm.Matmul(comm, m, n, k, dtype) as mm:
        layout = mm.plan().layout
        c = mm.execute(layout.block("A", comm.rank, a), layout.block("B", comm.rank, b))
        hpcmm.write_hdf5(comm, path, layout, c)
        whole = hpcmm.gather(comm, layout, c)
        with pytest.raises(hpcmm.InputError, match="exists"):
            hpcmm.write_hdf5(comm, path, layout, c)
    if comm.rank == 0:
        with h5py.File(path, "r") as f:
            written = read_dataset(f["C"])
        assert written.dtype == whole.dtype and np.array_equal(written.view(np.uint8), whole.view(np.uint8))


def test_a_rank_keeps_ring_slots_only_for_panels_it_receives():
    """On a 1 × P grid A's panels travel along the row (slots where P > 1) and B's never leave their rank."""
    comm = MPI.COMM_WORLD
    with hpcmm.Matmul(comm, 64, 48, 40, "float64", options={"grid": (1, comm.size)}) as mm:
        plan = mm.plan()
        engine = mm._engine
        assert len(engine.col.slots) == 0
        assert len(engine.row.slots) == (engine.row.ring if comm.size > 1 else 0)
        assert plan.memory_bytes[comm.rank] == engine.needed_bytes()
