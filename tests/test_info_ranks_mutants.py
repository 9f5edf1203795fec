"""``hpcmm info``'s facts of several ranks, judged in this process: ranks sharing GPUs per host, the memory rows
and largest square problem per device, and where each rank's MPS state and CUDA-awareness come from.

One process is one rank, so the ranks beyond it are given: :func:`~hpcmm.cli.info.memory_by_device` and
:func:`~hpcmm.cli.info.largest_square` take the gathered rows as they are, and :func:`~hpcmm.cli.info.gather_info`
runs over ``COMM_SELF`` with its real placement, seen as rank 0 of a job whose other ranks' rows arrive at the
gather (:func:`_as_rank_0_of`).  The largest square is checked against the memory check's own count
(:func:`~hpcmm.planning.choices.memory_needed`): it fits every device, and one more row and column does not.
"""

from __future__ import annotations

import contextlib

import pytest
from mpi4py import MPI

from hpcmm.cli import info
from hpcmm.cli.info import LARGEST_KINDS, gather_info, largest_square, memory_by_device
from hpcmm.config import RunConfig
from hpcmm.execution.placement import placement
from hpcmm.geometry.layout import Grid, Layout
from hpcmm.planning.algorithms import DEFAULT_PREFETCH, panel_candidates, ring_depth
from hpcmm.planning.choices import memory_needed
from hpcmm.planning.mps import MpsState, detect

GIB = 2**30


def _row(rank: int, host: str, gpu: int, uuid: str = "", free_gib: float = 40.0) -> dict:
    """One rank's row as ``gather_info`` gathers it (``gpu`` -1: the rank computes on its host's CPU)."""
    return dict(rank=rank, launch_rank=rank, host=host, local_rank=rank, local_size=1, node=0, grid_row=0,
                grid_col=rank, backend="numpy" if gpu < 0 else "cupy", gpu_index=gpu,
                gpu_name="" if gpu < 0 else "H200", gpu_uuid=uuid, gpu_pci="", node_ranks=1,
                free_bytes=int(free_gib * GIB), total_bytes=141 * GIB,
                mps=MpsState(False, "pipe", "/tmp/nvidia-mps", "no MPS control socket"))


def _need(size: int, grid: Grid, members: list[dict], itemsize: int, on_gpu: bool, nodes: int) -> int:
    """Bytes the ranks of one device need for a ``size``³ product by the memory check's count: near-equal blocks
    on ``grid``, the default prefetch's panel slots, the narrowest panel the planner falls back to, and on a GPU
    what each rank takes beside them while it runs."""
    layout = Layout(size, size, size, grid)
    panel = panel_candidates([layout], itemsize, on_gpu)[-1]
    slots = ring_depth(DEFAULT_PREFETCH, spans_nodes=nodes > 1)
    return sum(memory_needed(layout, r["rank"], itemsize, panel, slots, on_gpu=on_gpu) for r in members)


def _fits(size: int, grid: Grid, devices: list[list[dict]], itemsize: int, on_gpu: bool, nodes: int) -> bool:
    """Whether a ``size``³ product fits every device (the least free bytes any of its ranks saw)."""
    return all(_need(size, grid, members, itemsize, on_gpu, nodes) <= min(r["free_bytes"] for r in members)
               for members in devices)


#: Jobs of several ranks: the grid, the rows gathered, the nodes, and the devices they make (ranks by device).
JOBS = {
    # two ranks on GPU 0 (an index of 0 is a GPU): one device, the lesser free memory of the two
    "two_ranks_on_gpu_0": ("2x1", [_row(0, "n1", 0, "GPU-a", 20), _row(1, "n1", 0, "GPU-a", 18.5)], 1,
                           [("GPU 0 of n1", [0, 1])]),
    "three_ranks_on_two_gpus": ("1x3", [_row(0, "n1", 0, "GPU-a", 90), _row(1, "n1", 0, "GPU-a", 100),
                                        _row(2, "n1", 1, "GPU-b", 120)], 1,
                                [("GPU 0 of n1", [0, 1]), ("GPU 1 of n1", [2])]),
    "a_rank_per_gpu_of_two_hosts": ("2x2", [_row(0, "n1", 0, "GPU-a", 60), _row(1, "n1", 1, "GPU-b", 61),
                                            _row(2, "n2", 0, "GPU-c", 62), _row(3, "n2", 1, "GPU-d", 59)], 2,
                                    [("GPU 0 of n1", [0]), ("GPU 1 of n1", [1]), ("GPU 0 of n2", [2]),
                                     ("GPU 1 of n2", [3])]),
    "cpu_ranks_of_two_hosts": ("2x2", [_row(0, "n1", -1, free_gib=30), _row(1, "n1", -1, free_gib=31),
                                       _row(2, "n2", -1, free_gib=12), _row(3, "n2", -1, free_gib=13)], 2,
                               [("host n1", [0, 1]), ("host n2", [2, 3])]),
}


@pytest.mark.parametrize("job", list(JOBS))
def test_each_device_gets_its_ranks_and_the_largest_square_that_fits_every_device(job):
    """A row per device (GPU 0 counts as a GPU) with its ranks, and for each type the largest ``N`` whose
    ``N × N × N`` product fits every device by the memory check's count (on GPUs with what a rank takes while
    it runs), while ``N + 1`` does not fit some device."""
    grid, rows, nodes, expected = JOBS[job]
    memory = memory_by_device(rows, grid, nodes)
    assert [(label, [r["rank"] for r in members]) for label, members, _ in memory] == expected
    on_gpu = rows[0]["gpu_index"] >= 0
    devices = [members for _, members, _ in memory]
    shape = Grid(*(int(x) for x in grid.split("x")))
    largest = memory[0][2]
    assert list(largest) == list(LARGEST_KINDS)
    for kind, itemsize in LARGEST_KINDS.items():
        n = largest[kind]
        assert _fits(n, shape, devices, itemsize, on_gpu, nodes), (kind, n)
        assert not _fits(n + 1, shape, devices, itemsize, on_gpu, nodes), (kind, n)
    assert all(sizes == largest for _, _, sizes in memory)  # the job's largest, the same on every device


def test_a_gpu_leaves_room_for_what_each_rank_takes_while_it_runs():
    """The same free bytes hold a smaller problem on GPU 0 than on a host: on a GPU each rank also needs a load
    piece, the verification's chunks and the GEMM libraries' memory beside its blocks and buffers."""
    gpu = [_row(0, "n1", 0, "GPU-a", 8), _row(1, "n1", 0, "GPU-a", 8)]
    cpu = [dict(r, gpu_index=-1) for r in gpu]
    (_, _, on_gpu), = memory_by_device(gpu, "2x1", 1)
    (_, _, on_host), = memory_by_device(cpu, "2x1", 1)
    for kind, itemsize in LARGEST_KINDS.items():
        assert on_gpu[kind] < on_host[kind], kind
        # the host's N does not fit the GPU by the GPU's count: the difference is the working memory
        assert not _fits(on_host[kind], Grid(2, 1), [gpu], itemsize, True, 1), kind


@pytest.mark.parametrize("grid, ranks_per_device", [("2x2", 1), ("2x2", 2), ("4x2", 4), ("3x1", 3)])
def test_ranks_sharing_a_device_share_its_memory(grid, ranks_per_device):
    """The ranks of one device need their bytes together: more of them on a device of the same free memory
    leave room for a smaller problem, and the largest square still fits by the memory check's count."""
    shape = Grid(*(int(x) for x in grid.split("x")))
    ranks = list(range(shape.size))
    devices = [[{"rank": r, "free_bytes": 16 * GIB} for r in ranks[i:i + ranks_per_device]]
               for i in range(0, len(ranks), ranks_per_device)]
    alone = [[{"rank": r, "free_bytes": 16 * GIB}] for r in ranks]
    for on_gpu in (True, False):
        n = largest_square("float64", 8, grid, devices, on_gpu)
        assert _fits(n, shape, devices, 8, on_gpu, 1) and not _fits(n + 1, shape, devices, 8, on_gpu, 1)
        if ranks_per_device > 1:
            assert n < largest_square("float64", 8, grid, alone, on_gpu)


def test_a_job_of_much_memory_is_named_its_largest_square_not_the_search_bound():
    """256 hosts of 1 TiB free, a rank each on a 16 × 16 grid: float32's largest square (4840416) lies above the
    search's first bound of 2**22; the named ``N`` must still fit while ``N + 1`` does not (float64's, about
    3.42 million, lies below it)."""
    rows = [_row(rank, f"n{rank}", -1, free_gib=1024) for rank in range(256)]
    memory = memory_by_device(rows, "16x16", 256)
    devices = [members for _, members, _ in memory]
    for kind, itemsize in LARGEST_KINDS.items():
        n = memory[0][2][kind]
        assert _fits(n, Grid(16, 16), devices, itemsize, False, 256), (kind, n)
        assert not _fits(n + 1, Grid(16, 16), devices, itemsize, False, 256), (kind, n)


@contextlib.contextmanager
def _as_rank_0_of(others: list[dict], host: str, gpu: int, uuid: str):
    """Make ``info.gather_info``'s placement the real one over ``COMM_SELF``, seen as rank 0 of a job: its
    host is ``host``, its backend describes GPU ``gpu`` (``uuid``), and the gather hands it ``others`` after its
    own row.  The backend stays the CPU's (``on_gpu`` false): MPS and versions are looked up as on a CPU."""

    class JobComm:
        def __init__(self, comm):
            self._comm = comm

        def gather(self, row, root=0):
            return [row, *others] if root == 0 else None

        def __getattr__(self, name):
            return getattr(self._comm, name)

    class Rank0:
        def __init__(self, topo):
            self._topo, self.host, self.comm = topo, host, JobComm(topo.comm)

        def __getattr__(self, name):
            return getattr(self._topo, name)

    class DescribedGpu:
        def __init__(self, backend):
            self._backend = backend

        def describe(self):
            return {**self._backend.describe(), "backend": "cupy", "gpu_index": str(gpu), "gpu_name": "H200",
                    "gpu_uuid": uuid, "gpu_pci": "0000:00:00.0"}

        def __getattr__(self, name):
            return getattr(self._backend, name)

    @contextlib.contextmanager
    def seen_as_rank_0(comm, config):
        with placement(comm, config) as (topo, backend):
            yield Rank0(topo), DescribedGpu(backend)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(info, "placement", seen_as_rank_0)
        yield


@pytest.mark.parametrize("ranks, shared", [
    # GPU 0 holds ranks 0 and 1 (an index of 0 is a GPU), GPU 1 rank 2
    ([("n1", 0, "GPU-a"), ("n1", 0, "GPU-a"), ("n1", 1, "GPU-b")], {"n1": (3, 2)}),
    # GPUs that report no UUID are told apart by their index
    ([("n1", 0, ""), ("n1", 0, ""), ("n1", 1, "")], {"n1": (3, 2)}),
    # a rank on each GPU: no GPU is shared
    ([("n1", 0, "GPU-a"), ("n1", 1, "GPU-b")], {}),
    # counted per host: n1's GPU 0 holds two ranks, n2's two GPUs one each
    ([("n1", 0, "GPU-a"), ("n1", 0, "GPU-a"), ("n2", 0, "GPU-c"), ("n2", 1, "GPU-d")], {"n1": (2, 1)}),
    # both hosts share their GPU 0, ranks interleaved
    ([("n1", 0, "GPU-a"), ("n2", 0, "GPU-c"), ("n1", 0, "GPU-a"), ("n2", 0, "GPU-c")],
     {"n1": (2, 1), "n2": (2, 1)}),
], ids=["three_ranks_on_two_gpus", "gpus_without_uuids", "a_rank_per_gpu", "one_host_of_two_shares",
        "both_hosts_share"])
def test_hosts_with_more_ranks_than_gpus_are_named_with_both_counts(ranks, shared):
    """``oversubscribed``: each host where ranks outnumber the GPUs they use, with its rank and GPU counts
    (what ``info``'s note says); hosts whose ranks have a GPU each are left out."""
    host, gpu, uuid = ranks[0]
    others = [_row(rank, *place) for rank, place in enumerate(ranks) if rank > 0]
    with _as_rank_0_of(others, host, gpu, uuid):
        facts = gather_info(RunConfig(device="cpu"), MPI.COMM_SELF)
    assert [(r["host"], r["gpu_index"], r["gpu_uuid"]) for r in facts["rows"]] == ranks
    assert facts["oversubscribed"] == shared


def test_a_cpu_rank_reads_mps_from_the_pipe_not_from_a_gpu(monkeypatch):
    """A rank computing on its CPU asks no GPU whether it runs under MPS (on a host with GPUs the driver would
    answer for GPU 0): its state is the control pipe's."""
    asked = []

    def driver_or_pipe(device_id=None):
        asked.append(device_id)
        if device_id is not None:  # as the driver answers where cupy and a GPU are there
            return MpsState(True, "driver", "/tmp/nvidia-mps", f"the driver says GPU {device_id} runs under MPS")
        return detect(None)

    monkeypatch.setattr(info, "detect", driver_or_pipe)
    facts = gather_info(RunConfig(device="cpu"), MPI.COMM_SELF)
    (row,) = facts["rows"]
    assert asked == [None]
    assert row["mps"] == detect(None) and row["mps"].source == "pipe"


@pytest.mark.parametrize("from_environment, source", [
    (frozenset({"cuda_aware_mpi"}), "HPCMM_CUDA_AWARE_MPI"),
    (frozenset(), "--cuda-aware-mpi"),
], ids=["environment", "option"])
def test_cuda_awareness_names_where_it_was_set(from_environment, source):
    """The reason of an asked CUDA-awareness names what asked it: ``HPCMM_CUDA_AWARE_MPI`` or the option."""
    config = RunConfig(device="cpu", cuda_aware_mpi="no", from_environment=from_environment)
    facts = gather_info(config, MPI.COMM_SELF)
    assert facts["cuda_aware"].aware is False
    assert facts["cuda_aware"].reason == f"set by {source}=no"


def test_each_type_is_counted_on_the_grid_it_runs_on():
    """8 ranks on 2 GPUs of one host: the grid shown is 4 × 2, float64 runs take 1 × 8 (``info`` says so), so
    float64's largest square is the one that fits 1 × 8, which is not the one 4 × 2 would hold."""
    rows = [dict(_row(rank, "n1", rank // 4, f"GPU-{rank // 4}", 80), grid_row=rank // 2, grid_col=rank % 2)
            for rank in range(8)]
    facts = dict(rows=rows, grid="4x2", nodes=1, oversubscribed={"n1": (8, 2)})
    grids = info.kind_grids(RunConfig(), facts)
    assert grids["float64"] != "4x2"  # the turn this test is about
    assert info.kind_grids(RunConfig(grid="4x2"), facts) == {"float64": "4x2", "float32": "4x2"}
    memory = memory_by_device(rows, "4x2", 1, grids)
    devices = [members for _, members, _ in memory]
    for kind, itemsize in LARGEST_KINDS.items():
        shape = Grid(*(int(x) for x in grids[kind].split("x")))
        n = memory[0][2][kind]
        assert _fits(n, shape, devices, itemsize, True, 1) and not _fits(n + 1, shape, devices, itemsize, True, 1)
    shown = memory_by_device(rows, "4x2", 1)[0][2]["float64"]
    assert memory[0][2]["float64"] != shown


def test_info_prints_each_types_largest_square_on_the_grid_it_runs_on(capsys, monkeypatch):
    """The printed line counts float64 on the grid the note names, not on the grid shown."""
    import re
    import types

    from hpcmm.cli.info import mps_by_gpu

    rows = [dict(_row(rank, "n1", rank // 4, f"GPU-{rank // 4}", 80), grid_row=rank // 2, grid_col=rank % 2)
            for rank in range(8)]
    versions = dict(mpi_library="MPI", mpi_standard="3.1", mpi4py="4.1.2", cupy="14.2.0", cuda_runtime="13.0",
                    cuda_driver="13.1", nvmath_python="", h5py="3.16.0", hdf5="1.14.6", numpy="2.4.0", python="3.12.3")
    facts = dict(rows=rows, grid="4x2", nodes=1, oversubscribed={"n1": (8, 2)}, versions=versions,
                 cuda_aware=types.SimpleNamespace(aware=False, reason="asked"), parallel_hdf5=False,
                 mps=mps_by_gpu(rows))
    monkeypatch.setattr(info, "gather_info", lambda config, comm: facts)
    assert info.info_main(RunConfig(), MPI.COMM_SELF) == 0
    out = capsys.readouterr().out
    assert "float64 runs take 1x8" in out
    printed = re.search(r"largest square     float64 (\d+), float32 (\d+) ", out)
    expected = memory_by_device(rows, "4x2", 1, info.kind_grids(RunConfig(), facts))[0][2]
    assert (int(printed.group(1)), int(printed.group(2))) == (expected["float64"], expected["float32"])
