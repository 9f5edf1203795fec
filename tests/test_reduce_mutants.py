"""What the fiber's reduce-scatter promises: member ``j`` ends with piece ``j`` of the sum, pulls the
bytes it says, allocates the scratch it says, races nothing, and gives everything back.

Written against the mutants that mutation testing of hpcmm/execution/transport/reduce.py left without a
test on a CPU (docs/mutation.md: the 2.5D runs are under mpiexec).  A fiber's members are threads
(:class:`~thread_comm.ThreadComm`), their partial blocks in the stand-ins of
:mod:`peer_stand_ins`: shared windows on the CPU, CUDA IPC on a stand-in GPU whose adds take
longer than its copies, so that a pull into a scratch piece an add still reads, or an add before
its pull, shows as a race.  The partial blocks hold small integers, so that every order of the
sum is exact.
"""

from __future__ import annotations

from time import perf_counter

import numpy as np
import pytest
from peer_stand_ins import IpcBackend, IpcNode, shared_windows
from thread_comm import ThreadComm

from hpcmm.execution.backend import CpuBackend
from hpcmm.errors import HpcmmError
from hpcmm.geometry.layout import block_range, padded
from hpcmm.execution.transport.reduce import FiberReduction, scratch_bytes


def _partial(shape, dtype, member: int) -> np.ndarray:
    return np.random.default_rng([5, member]).integers(-8, 9, shape).astype(dtype)


class _FailingCpu(CpuBackend):
    def empty(self, shape, dtype, order="C"):
        raise MemoryError("out of memory on this member")


def reduce_fiber(monkeypatch, count, shape, dtype="float64", device="cpu", products=1, fail=None):
    """Every member fills its partial block and reduces it ``products`` times; returns per member
    ``(piece, rows, seconds, pulled bytes, nbytes_from_peers, scratch allocated, partial on arrival)``,
    and the node."""
    job, node = ThreadComm(count), IpcNode()
    windows = shared_windows(monkeypatch)
    backends = [None] * count

    def member(rank):
        if device == "gpu":
            backend = IpcBackend(node, rank, ufunc_seconds=5.0, fail_empty=rank == fail)
        else:
            backend = _FailingCpu() if rank == fail else CpuBackend()
        backends[rank] = backend
        reduction = FiberReduction(job, backend, shape, dtype)  # on a failure, closed before it raises
        try:
            fresh = np.array(backend.to_host(reduction.partial))
            allocated = getattr(backend, "allocated", None)
            for product in range(products):
                reduction.partial[...] = _partial(shape, dtype, rank) * (product + 1)
                before = perf_counter()
                seconds = reduction.reduce()
                outer = perf_counter() - before
                assert 0 <= seconds <= outer
            pulled = sum(w[1] - w[0] for op in node.ops if op.rank == rank and op.what == "pull" for w in op.writes)
            piece = np.array(backend.to_host(reduction.piece()))
            return piece, reduction.rows, pulled, reduction.nbytes_from_peers(), allocated, fresh
        finally:
            reduction.close()
            reduction.close()  # closing again does nothing

    outcomes = job.run(member)
    assert all(window.freed for window in windows)
    assert [backend.exported_bytes for backend in backends] == [0] * count
    return outcomes, node


SHAPES = [(7, 5), (7, 250), (2, 3), (0, 4), (3, 0)]  # 250 columns of float64: rows stored 256 apart


@pytest.mark.parametrize("dtype", ["float64", "float32", "complex128"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("count", [1, 2, 3, 4])
@pytest.mark.parametrize("device", ["cpu", "gpu"])
def test_each_member_ends_with_its_piece_of_the_sum(monkeypatch, device, count, shape, dtype):
    outcomes, node = reduce_fiber(monkeypatch, count, shape, dtype, device, products=2)
    assert all(kind == "returned" for kind, _ in outcomes), outcomes
    itemsize = np.dtype(dtype).itemsize
    total = 2 * sum(_partial(shape, dtype, m) for m in range(count))
    for member, (_, (piece, rows, pulled, said, allocated, fresh)) in enumerate(outcomes):
        r0, r1 = block_range(shape[0], count, member)
        assert rows == (r0, r1)
        assert piece.dtype == np.dtype(dtype) and piece.shape == (r1 - r0, shape[1])
        np.testing.assert_array_equal(piece, total[r0:r1])
        assert fresh.dtype == np.dtype(dtype) and fresh.shape == shape
        assert np.isnan(fresh).all()  # poisoned until the layer's GEMM writes it
        assert said == (count - 1) * (r1 - r0) * padded(shape[1], itemsize) * itemsize
        if device == "gpu":
            assert pulled == 2 * said  # two products
            assert allocated == scratch_bytes(shape, count, member, itemsize)
    assert node.races() == []
    assert node.open_mappings() == 0 and node.live_allocations() == 0


@pytest.mark.parametrize("count, member, shape, itemsize, nbytes", [
    (1, 0, (9, 4), 8, 0),
    (2, 1, (9, 4), 8, 4 * 4 * 8),
    (3, 0, (7, 250), 8, 2 * 3 * 256 * 8),
    (4, 3, (7, 250), 4, 2 * 1 * 256 * 4),
    (5, 2, (11, 3), 2, 2 * 2 * 3 * 2),
    (4, 3, (2, 3), 8, 0),
])
def test_scratch_bytes(count, member, shape, itemsize, nbytes):
    assert scratch_bytes(shape, count, member, itemsize) == nbytes


@pytest.mark.parametrize("device", ["cpu", "gpu"])
def test_a_member_out_of_memory_fails_the_whole_fiber(monkeypatch, device):
    outcomes, node = reduce_fiber(monkeypatch, 3, (6, 4), device=device, fail=1)
    assert [kind for kind, _ in outcomes] == ["raised"] * 3, outcomes
    assert all(isinstance(exc, HpcmmError) and "out of" in str(exc) and "memory" in str(exc)
               for _, exc in outcomes), outcomes
    assert node.open_mappings() == 0 and node.live_allocations() == 0


def test_a_dtype_by_name_or_by_numpy(monkeypatch):
    for dtype in ("float32", np.dtype(np.float32), np.float32):
        outcomes, _ = reduce_fiber(monkeypatch, 2, (3, 2), dtype)
        assert [value[0].dtype for _, value in outcomes] == [np.dtype(np.float32)] * 2
