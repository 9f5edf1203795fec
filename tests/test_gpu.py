"""The GPU side: cuBLAS GEMM through the backend, copies, events, CUDA IPC, whole runs.

Marked ``gpu`` (and ``multi_gpu`` where two GPUs are needed); skipped with the
reason where cupy does not import or sees no GPU, so the suite passes on a
CPU-only machine.  Run on a GPU node with::

    python -m pytest -m gpu tests

The multi-GPU tests start ``mpiexec -n 2``: ``$MPIEXEC``, else the ``mpiexec``
first on ``PATH`` (a site's wrapper, as ``.device/env.sh`` puts there), else the
one beside this Python (``launcher.mpiexec_or_skip(path_first=True)``).
"""

from __future__ import annotations

import re
import sys

import h5py
import numpy as np
import pytest
from launcher import mpiexec_or_skip, rank_environment, run_launcher

from hpcmm.execution.backend import GpuBackend, gpu_count, make_backend, orders
from hpcmm.dtypes import read_dataset
from hpcmm.planning.gemm_orders import ORDER_BY_TYPE, ORDERS, label, type_key
from hpcmm.verify import tolerance

GPUS = gpu_count()

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(GPUS == 0, reason="no usable GPU: cupy does not import or sees no CUDA device"),
]


def multi_gpu(count: int):
    """Mark a test ``multi_gpu`` and skip it where fewer than ``count`` GPUs are visible."""

    def mark(test):
        test = pytest.mark.skipif(GPUS < count, reason=f"needs {count} GPUs, this machine has {GPUS}")(test)
        return pytest.mark.multi_gpu(test)

    return mark


@pytest.fixture(scope="module")
def backend():
    be = GpuBackend(0)
    yield be
    be.close()


def host_operands(m, n, w, dtype, seed=0):
    """Random ``a`` (m×w, column-major), ``b`` (w×n) and ``c`` (m×n), never zero."""
    rng = np.random.default_rng(seed)

    def draw(shape):
        x = rng.uniform(-1, 1, shape)
        if np.dtype(dtype).kind == "c":
            x = x + 1j * rng.uniform(-1, 1, shape)
        return x.astype(dtype)

    return np.asfortranarray(draw((m, w))), draw((w, n)), draw((m, n))


def componentwise_error(c, a, b, c0=None) -> float:
    """``max |c - (c0 + a b)| / (|c0| + |a| |b|)`` in float64/complex128."""
    wide = np.complex128 if c.dtype.kind == "c" else np.float64
    a, b = a.astype(wide), b.astype(wide)
    ref = a @ b
    scale = np.abs(a) @ np.abs(b)
    if c0 is not None:
        ref = ref + c0.astype(wide)
        scale = scale + np.abs(c0.astype(wide))
    return float(np.max(np.abs(c.astype(wide) - ref) / scale))


def device_gemm(be, a, b, c0, accumulate, tf32=False, order="FC"):
    """``c0 (+)= a b`` on the device with A and B in ``order`` (A's then B's: C row-major, F column-major)."""
    cupy = be.cupy
    a_d = be.from_host(a, order=order[0])
    b_d = be.from_host(b, order=order[1])
    c_d = be.from_host(c0)
    for x, o in ((a_d, order[0]), (b_d, order[1])):
        assert x.flags.f_contiguous if o == "F" else x.flags.c_contiguous
    be.gemm(a_d, b_d, c_d, accumulate=accumulate, stream=be.compute_stream, tf32=tf32)
    be.stream_synchronize(be.compute_stream)
    assert isinstance(c_d, cupy.ndarray)
    return be.to_host(c_d)


# -- the local GEMM ---------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16", "bfloat16", "complex128", "complex64"])
@pytest.mark.parametrize("accumulate", [False, True])
@pytest.mark.parametrize("shape", [(37, 29, 23), (1, 5, 3), (64, 1, 17), (300, 200, 257)])
def test_gemm_matches_numpy(backend, dtype, accumulate, shape):
    """C = A·B and C += A·B for every dtype, with A column-major and B, C row-major (uneven shapes)."""
    m, n, w = shape
    a, b, c0 = host_operands(m, n, w, dtype)
    c = device_gemm(backend, a, b, c0, accumulate)
    assert c.dtype == np.dtype(dtype)
    error = componentwise_error(c, a, b, c0 if accumulate else None)
    bound = tolerance(dtype, w, steps=1)
    assert error <= bound, f"{dtype} error {error:.3e} > {bound:.3e}"
    if not accumulate:
        # C was overwritten (beta = 0), not added to.
        assert componentwise_error(c, a, b, c0) > bound or np.allclose(c0, 0)


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("dtype, tf32", [("float64", False), ("float32", False), ("float32", True),
                                         ("float16", False), ("bfloat16", False), ("complex128", False),
                                         ("complex64", False)])
@pytest.mark.parametrize("shape", [(37, 29, 23), (1, 5, 3), (64, 1, 17), (5, 7, 1), (300, 200, 257)])
def test_gemm_in_every_operand_order(backend, dtype, tf32, order, shape):
    """C += A·B with A and B each row- or column-major: the ops and leading dimensions cuBLAS gets."""
    m, n, w = shape
    a, b, c0 = host_operands(m, n, w, dtype, seed=3)
    c = device_gemm(backend, a, b, c0, accumulate=True, tf32=tf32, order=order)
    error = componentwise_error(c, a, b, c0)
    bound = tolerance(dtype, w, steps=1, tf32=tf32)
    assert error <= bound, f"{dtype}{' tf32' if tf32 else ''} {order} error {error:.3e} > {bound:.3e}"


def padded_on_device(be, host, order: str, pad: int):
    """``host`` copied into a view of a poisoned device block whose rows (``C``) or columns (``F``) are ``pad`` longer.

    Returns the view and its block, so that a test can see the padding was not written.
    """
    rows, cols = host.shape
    block = be.empty((rows, cols + pad) if order == "C" else (rows + pad, cols), host.dtype, order=order)
    be.poison(block)
    view = block[:, :cols] if order == "C" else block[:rows]
    view[...] = be.from_host(host)
    be.synchronize()
    return view, block


def padding_untouched(be, block, shape, order: str) -> bool:
    rows, cols = shape
    host = be.to_host(block).astype(np.complex128 if block.dtype.kind == "c" else np.float64)
    return bool(np.isnan(host[:, cols:] if order == "C" else host[rows:]).all())


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("dtype, tf32", [("float64", False), ("float32", True), ("float16", False),
                                         ("bfloat16", False), ("complex64", False)])
@pytest.mark.parametrize("shape", [(37, 29, 23), (1, 5, 3), (64, 1, 17), (5, 7, 1), (2731, 601, 300)])
def test_gemm_with_padded_operands_in_every_order(backend, dtype, tf32, order, shape):
    """A, B and C as views of padded blocks (as the engine stores them): the leading dimensions come from
    the strides, the product is right and the padding of C is never written."""
    m, n, w = shape
    a, b, c0 = host_operands(m, n, w, dtype, seed=4)
    a_d, _ = padded_on_device(backend, a, order[0], 3)
    b_d, _ = padded_on_device(backend, b, order[1], 5)
    c_d, c_block = padded_on_device(backend, c0, "C", 7)
    assert set(orders(a_d)) >= {order[0]} and set(orders(b_d)) >= {order[1]} and "C" in orders(c_d)
    backend.gemm(a_d, b_d, c_d, accumulate=True, stream=backend.compute_stream, tf32=tf32)
    backend.stream_synchronize(backend.compute_stream)
    error = componentwise_error(backend.to_host(c_d), a, b, c0)
    bound = tolerance(dtype, w, steps=1, tf32=tf32)
    assert error <= bound, f"{dtype}{' tf32' if tf32 else ''} {order} {shape} error {error:.3e} > {bound:.3e}"
    assert padding_untouched(backend, c_block, (m, n), "C")


@pytest.mark.parametrize("dtype", ["float16", "float64", "complex128"])
@pytest.mark.parametrize("shape", [(1, 5), (5, 1), (33, 65), (1000, 37), (0, 4), (2731, 129)])
@pytest.mark.parametrize("src_order, dst_order", [("C", "F"), ("F", "C"), ("C", "C"), ("F", "F")])
def test_relayout_with_padded_source_and_destination(backend, dtype, shape, src_order, dst_order):
    """The transpose (and the 2-D copy where the orders agree) steps over both leading dimensions."""
    from hpcmm.dtypes import numpy_dtype

    rng = np.random.default_rng(9)
    host = rng.uniform(-1, 1, shape).astype(numpy_dtype(dtype))
    src, _ = padded_on_device(backend, host, src_order, 11)
    dst, dst_block = padded_on_device(backend, np.zeros(shape, host.dtype), dst_order, 3)
    backend.poison(dst_block)
    backend.synchronize()
    backend.relayout(dst, src, backend.comm_stream)
    backend.event_synchronize(backend.event(backend.comm_stream))
    assert np.array_equal(backend.to_host(dst), host), (src_order, dst_order)
    assert padding_untouched(backend, dst_block, shape, dst_order)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64", "complex128"])
@pytest.mark.parametrize("shape", [(1, 5), (5, 1), (33, 65), (1000, 37), (0, 4), (4099, 129)])
def test_relayout_is_an_exact_transpose(backend, dtype, shape):
    """Both ways, for every element size, from a view inside a larger buffer (as a panel of a block)."""
    from hpcmm.dtypes import numpy_dtype

    rng = np.random.default_rng(8)
    host = rng.uniform(-1, 1, shape).astype(numpy_dtype(dtype))
    if np.dtype(numpy_dtype(dtype)).kind == "c":
        host = host + 1j * rng.uniform(-1, 1, shape).astype(host.dtype)
    count = host.size
    for src_order, dst_order in (("C", "F"), ("F", "C")):
        buffer = backend.empty((count + 7,), host.dtype)
        backend.poison(buffer)
        src = buffer[5 : 5 + count].reshape(shape, order=src_order)
        src[...] = backend.from_host(host, order=src_order)
        dst = backend.empty(shape, host.dtype, order=dst_order)
        backend.synchronize()
        backend.relayout(dst, src, backend.comm_stream)
        done = backend.event(backend.comm_stream)
        backend.event_synchronize(done)
        assert dst.flags.f_contiguous == (dst_order == "F") or 1 in shape or 0 in shape
        assert np.array_equal(backend.to_host(dst), host), (src_order, dst_order)


def test_spelled_cuda_enumerations_are_cupys():
    """The cudaDataType / cublasComputeType values backend.py spells are cupy's own names' values."""
    from cupy.cuda import runtime
    from cupy_backends.cuda.libs import cublas

    from hpcmm.execution import backend as b

    assert b._CUDA_TYPE == {"float16": runtime.CUDA_R_16F, "bfloat16": runtime.CUDA_R_16BF,
                            "float32": runtime.CUDA_R_32F, "float64": runtime.CUDA_R_64F,
                            "complex64": runtime.CUDA_C_32F, "complex128": runtime.CUDA_C_64F}
    assert (b._COMPUTE_32F, b._COMPUTE_64F, b._COMPUTE_32F_FAST_TF32) == (
        cublas.CUBLAS_COMPUTE_32F, cublas.CUBLAS_COMPUTE_64F, cublas.CUBLAS_COMPUTE_32F_FAST_TF32)
    assert (b._GEMM_DEFAULT, b._OP_N, b._OP_T) == (cublas.CUBLAS_GEMM_DEFAULT, cublas.CUBLAS_OP_N, cublas.CUBLAS_OP_T)


def test_tf32_is_used_and_within_its_bound(backend):
    """TF32 rounds the inputs to 10 bits: much larger error than plain float32, still within its bound."""
    m = n = w = 512
    a, b, c0 = host_operands(m, n, w, "float32", seed=1)
    exact = componentwise_error(device_gemm(backend, a, b, c0, False), a, b)
    fast = componentwise_error(device_gemm(backend, a, b, c0, False, tf32=True), a, b)
    assert fast <= tolerance("float32", w, 1, tf32=True), fast
    assert fast > 10 * exact, f"tf32 error {fast:.2e} vs float32 {exact:.2e}: TF32 not in use?"


def test_gemm_on_a_stream_waits_for_events(backend):
    """A GEMM queued behind an event on another stream sees the data that stream wrote."""
    cupy = backend.cupy
    m, n, w = 129, 65, 33
    a, b, _ = host_operands(m, n, w, "float64", seed=2)
    a_d = backend.empty((m, w), np.float64, order="F")
    b_d = backend.from_host(b)
    c_d = backend.empty((m, n), np.float64)
    backend.poison(c_d)
    pinned = backend.pinned_empty(a.nbytes)
    pinned.view(np.float64)[:] = a.ravel(order="F")
    backend.copy(a_d, pinned, backend.comm_stream)  # raw bytes: a_d is column-major like the source
    ready = backend.event(backend.comm_stream)
    backend.wait(backend.compute_stream, ready)
    backend.gemm(a_d, b_d, c_d, accumulate=False, stream=backend.compute_stream)
    done = backend.event(backend.compute_stream)
    backend.event_synchronize(done)
    assert isinstance(c_d, cupy.ndarray)
    assert componentwise_error(backend.to_host(c_d), a, b) <= tolerance("float64", w, 1)


def test_gemm_empty_and_layout_errors(backend):
    empty_c = backend.empty((0, 4), np.float64)
    backend.gemm(backend.empty((0, 3), np.float64, order="F"), backend.empty((3, 4), np.float64), empty_c,
                 accumulate=False)
    a = backend.from_host(np.ones((4, 6)))[:, ::2]  # a strided view: neither row- nor column-major
    with pytest.raises(ValueError, match="gemm wants a row- or column-major"):
        backend.gemm(a, backend.from_host(np.ones((3, 2))), backend.empty((4, 2), np.float64), accumulate=False)
    c = backend.empty((2, 4), np.float64, order="F")
    with pytest.raises(ValueError, match="gemm wants c row-major"):
        backend.gemm(backend.from_host(np.ones((2, 3))), backend.from_host(np.ones((3, 4))), c, accumulate=False)


# -- the rest of the backend -------------------------------------------------------


def test_copies_between_host_and_device(backend):
    data = np.random.default_rng(4).uniform(-1, 1, 1000)
    pinned = backend.pinned_empty(data.nbytes).view(np.float64)
    pinned[:] = data
    dev = backend.empty(1000, np.float64)
    backend.copy(dev, pinned, backend.comm_stream)
    dev2 = backend.empty(1000, np.float64)
    backend.copy(dev2, dev, backend.comm_stream)
    back = backend.pinned_empty(data.nbytes).view(np.float64)
    back[:] = 0
    backend.copy(back, dev2, backend.comm_stream)
    backend.stream_synchronize(backend.comm_stream)
    assert np.array_equal(back, data)


def test_events_time_and_memory(backend):
    t0 = backend.event(backend.compute_stream)
    x = backend.from_host(np.ones((512, 512)))
    with backend.compute_stream:
        (x @ x).sum()
    t1 = backend.event(backend.compute_stream)
    backend.event_synchronize(t1)
    assert backend.elapsed(t0, t1) >= 0
    free, total = backend.memory_info()
    assert 0 < free <= total
    assert backend.peak_memory() > 0
    desc = backend.describe()
    assert desc["backend"] == "cupy" and desc["gpu_name"] and desc["gpu_index"] == "0"
    assert re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.0", desc["gpu_pci"]), desc["gpu_pci"]


def test_make_backend_binds_by_local_rank():
    be = make_backend("auto", local_rank=GPUS, local_size=GPUS + 1)
    try:
        assert be.on_gpu and be.device_id == 0  # GPUS % GPUS: round robin
    finally:
        be.close()
    assert not make_backend("cpu", 0, 1).on_gpu


# -- CUDA IPC at one rank -------------------------------------------------------------


def test_ipc_allocate_and_close(backend):
    from mpi4py import MPI

    from hpcmm.execution.transport.ipc import IpcPeerMemory

    before = backend.exported_bytes
    peers = IpcPeerMemory(MPI.COMM_SELF, backend)
    local = peers.allocate(4096 + 3)
    try:
        assert local.nbytes == 4099 and local.dtype == np.uint8
        assert [p for p in peers.peer_ptrs if p is not None] == []  # one rank: nothing of a peer to open
        assert backend.exported_bytes == before + 4099
        local[:] = 7
        peers.export_events(2)
        peers.record(1, backend.comm_stream)
        backend.stream_synchronize(backend.comm_stream)
        assert int(local.sum()) == 7 * 4099
    finally:
        peers.close()
    assert peers.memory is None and peers.events == []
    assert backend.exported_bytes == before


# -- whole runs -------------------------------------------------------------------------


@pytest.mark.parametrize("dtype, tf32", [("float64", False), ("float32", False), ("float32", True),
                                         ("float16", False), ("bfloat16", False), ("complex128", False),
                                         ("complex64", False)])
@pytest.mark.parametrize("verify", ["freivalds", "full"])
def test_one_rank_run_on_the_gpu(tmp_path, dtype, tf32, verify):
    from mpi4py import MPI

    import hpcmm

    config = hpcmm.RunConfig(m=1031, n=517, k=777, dtype=dtype, tf32=tf32, device="gpu", verify=verify,
                             warmup=1, iters=2, panel=128, save_c=True, out=str(tmp_path / "gpu.h5"))
    result = hpcmm.run(config, comm=MPI.COMM_SELF)
    assert result.summary["verified"] is True, result.summary
    assert result.topology[0]["backend"] == "cupy" and result.topology[0]["gpu_index"] == 0
    with h5py.File(config.out, "r") as f:
        c = read_dataset(f["result/C"])
        steps = int(f["config"].attrs["steps"])
    assert c.dtype == np.dtype(dtype)
    from hpcmm.io.inputs import generate_block

    a = generate_block(42, "A", (1031, 777), (0, 1031), (0, 777), dtype)
    b = generate_block(42, "B", (777, 517), (0, 777), (0, 517), dtype)
    assert componentwise_error(c, a, b) <= tolerance(dtype, 777, steps, tf32)


@pytest.mark.parametrize("order", [*ORDERS, "auto"])
@pytest.mark.parametrize("dtype, tf32", [("float64", False), ("float32", True), ("float16", False),
                                         ("bfloat16", False)])
@pytest.mark.parametrize("prefetch", [0, 2])
def test_one_rank_run_in_every_gemm_order(tmp_path, dtype, tf32, order, prefetch):
    """Every GEMM order through the engine (re-laid-out own panels, scratch ring), C checked in full."""
    from mpi4py import MPI

    import hpcmm
    from hpcmm.io.inputs import generate_block

    m, n, k = 1031, 517, 777
    config = hpcmm.RunConfig(m=m, n=n, k=k, dtype=dtype, tf32=tf32, device="gpu", verify="full", warmup=1,
                             iters=2, panel=128, prefetch=prefetch, gemm_order=order, save_c=True,
                             out=str(tmp_path / "order.h5"))
    result = hpcmm.run(config, comm=MPI.COMM_SELF)
    used = ORDER_BY_TYPE[type_key(dtype, tf32)] if order == "auto" else order
    assert result.summary["verified"] is True and result.summary["gemm_order"] == label(used), result.summary
    with h5py.File(config.out, "r") as f:
        c = read_dataset(f["result/C"])
        steps = int(f["config"].attrs["steps"])
    a = generate_block(42, "A", (m, k), (0, m), (0, k), dtype)
    b = generate_block(42, "B", (k, n), (0, k), (0, n), dtype)
    assert componentwise_error(c, a, b) <= tolerance(dtype, k, steps, tf32)


# -- several GPUs -------------------------------------------------------------------------


@multi_gpu(2)
@pytest.mark.parametrize("extra, paths", [([], {"ipc"}), (["--ranks-per-node", "1"], {"mpi", "staged"})])
def test_two_gpus_from_the_command_line(tmp_path, extra, paths):
    out = tmp_path / "two.h5"
    env = rank_environment()
    mpiexec = mpiexec_or_skip(path_first=True)
    proc = run_launcher([mpiexec, "-n", "2", sys.executable, "-m", "hpcmm", "--device", "gpu", "--m", "2053",
                         "--n", "1031", "--k", "999", "--verify", "full", "--save-c", "--out", str(out), *extra],
                        300, env=env)
    assert proc.returncode == 0, proc.stdout
    with h5py.File(out, "r") as f:
        used = {p.decode() if isinstance(p, bytes) else p for p in f["summary"].attrs["paths"]}
        assert len(used) == 1 and used <= paths, used
        assert sorted(f["topology"]["gpu_index"]) == [0, 1]
        assert np.isfinite(f["result/C"][()]).all()


@multi_gpu(2)
def test_mpi_suite_on_two_gpus():
    """tests/mpi (runs and channels) at 2 ranks with HPCMM_DEVICE=gpu: ipc, mpi/staged, every dtype."""
    pytest.importorskip("pytest_mpi")
    env = rank_environment("gpu")
    mpiexec = mpiexec_or_skip(path_first=True)
    proc = run_launcher([mpiexec, "-n", "2", sys.executable, "-m", "pytest", "--with-mpi", "-q",
                         "-p", "no:cacheprovider", "tests/mpi"], 540, env=env)
    assert proc.returncode == 0, proc.stdout[-20000:]


@multi_gpu(2)
def test_second_gpu_in_process():
    be = GpuBackend(1)
    try:
        a, b, c0 = host_operands(65, 33, 17, "float64", seed=9)
        c_d = be.from_host(c0)
        assert c_d.device.id == 1
        be.gemm(be.from_host(a, order="F"), be.from_host(b), c_d, accumulate=True)
        be.synchronize()
        assert componentwise_error(be.to_host(c_d), a, b, c0) <= tolerance("float64", 17, 1)
    finally:
        be.close()


# -- cuBLASLt's autotuned algorithms (hpcmm.execution.gemm_library) -----------------------------


@pytest.fixture
def lt_backend(monkeypatch):
    """A backend whose every GEMM shape takes cuBLASLt (where nvmath-python plans it), whatever the timings."""
    pytest.importorskip("nvmath.linalg.advanced", reason="nvmath-python (the cublaslt extra) is not installed")
    import hpcmm.execution.gemm_library as gemm_library

    monkeypatch.setattr(gemm_library, "pick", lambda ex, lt, margin=0: "cublaslt")
    # shapes of microseconds too: the floor that leaves them to GemmEx in a run would hide the path under test
    monkeypatch.setattr(gemm_library, "PLAN_FLOOR_SECONDS", 0.0)
    # every kind, those auto leaves to GemmEx by measurement too: the cuBLASLt path itself is right for each
    monkeypatch.setattr(gemm_library, "PLANNED_KINDS", ("float64", "float32", "tf32", "float16", "bfloat16",
                                                        "complex64"))
    be = GpuBackend(0)
    be.use_gemm_library("auto")
    yield be
    be.close()


@pytest.mark.parametrize("order", ["FC", "CC"])
@pytest.mark.parametrize("dtype, tf32", [("float64", False), ("float32", False), ("float32", True),
                                         ("float16", False), ("bfloat16", False), ("complex64", False)])
@pytest.mark.parametrize("accumulate", [False, True])
@pytest.mark.parametrize("shape", [(37, 29, 23), (2731, 601, 300)])
def test_gemm_through_cublaslt_on_padded_operands(lt_backend, dtype, tf32, order, accumulate, shape):
    """The first call of a shape plans it (autotune and the timed comparison run products on C), yet C holds
    one product; the second call, on new operands, runs the plan; the padding of C is never written."""
    be, (m, n, w) = lt_backend, shape
    for seed in (5, 6):
        a, b, c0 = host_operands(m, n, w, dtype, seed=seed)
        a_d, _ = padded_on_device(be, a, order[0], 3)
        b_d, _ = padded_on_device(be, b, order[1], 5)
        c_d, c_block = padded_on_device(be, c0, "C", 7)
        if not accumulate:
            be.poison(c_block)  # beta = 0: C is not read, so the NaN the engine poisons it with must not show
            be.synchronize()
        be.gemm(a_d, b_d, c_d, accumulate=accumulate, stream=be.compute_stream, tf32=tf32)
        be.stream_synchronize(be.compute_stream)
        error = componentwise_error(be.to_host(c_d), a, b, c0 if accumulate else None)
        bound = tolerance(dtype, w, steps=1, tf32=tf32)
        assert error <= bound, f"{dtype}{' tf32' if tf32 else ''} {order} {shape} error {error:.3e} > {bound:.3e}"
        assert padding_untouched(be, c_block, (m, n), "C")
    (row,) = be.gemm_rows()
    # cuBLASLt took the shape, or its row says why not (a layout it refuses): never silently GemmEx
    assert row["library"] == "cublaslt" or "not planned" in row["note"], row
    assert row["library"] == "cublaslt" or dtype == "complex64", row
