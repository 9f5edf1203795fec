"""``hpcmm info`` called in this process on one CPU rank: every line it prints, word for word.

The command line's own tests start ``hpcmm info`` as a child process, which mutation testing cannot
follow; these call :func:`hpcmm.cli.info.info_main` and :func:`~hpcmm.cli.info.gather_info` directly
over ``COMM_SELF`` and read each line back against what the run's stack says of itself.
"""

from __future__ import annotations

import importlib.util
import re
import socket
import sys

import h5py
import mpi4py
import numpy
import pytest
from mpi4py import MPI

from hpcmm.cli.info import gather_info, info_main
from hpcmm.config import RunConfig
from hpcmm.io.metadata import mpi_library, parallel_hdf5

pytestmark = pytest.mark.skipif(importlib.util.find_spec("cupy") is not None,
                                reason="the lines of a CPU rank: cupy would be named installed")


def _info(capsys, **settings) -> list[str]:
    assert info_main(RunConfig(device="cpu", **settings), MPI.COMM_SELF) == 0
    return capsys.readouterr().out.splitlines()


def test_every_line_of_one_cpu_rank(capsys):
    lines = _info(capsys)
    host = socket.gethostname()
    assert lines[0] == f"{'rank':>4} {'host':<20} {'local':>5} {'node':>4} {'grid':>5}  device"
    assert lines[1] == f"{0:>4} {host:<20} {0:>5} {0:>4} 0,0    cpu (numpy)"
    assert lines[2] == "process grid       1x1 (1 node(s))"
    assert lines[3] == (f"MPI library        {mpi_library()} (MPI {'{}.{}'.format(*MPI.Get_version())}, "
                        f"mpi4py {mpi4py.__version__})")
    assert re.fullmatch(r"CUDA-aware MPI     no: \S.*", lines[4]), lines[4]
    assert lines[5] == "cupy / CUDA        not installed / runtime -, driver -"
    assert lines[6] == "GEMM library       numpy (no GPU)"
    assert lines[7] == (f"h5py / HDF5        {h5py.__version__} / {h5py.version.hdf5_version} "
                        f"(parallel HDF5: {'yes' if parallel_hdf5() else 'no'})")
    assert lines[8] == f"numpy / Python     {numpy.__version__} / {sys.version.split()[0]}"
    memory = re.fullmatch(rf"memory             host {re.escape(host)}: (\d+\.\d) of (\d+\.\d) GiB free, "
                          r"1 rank\(s\)", lines[9])
    assert memory, lines[9]
    free, total = (float(x) for x in memory.groups())
    assert 0 < free <= total
    largest = re.fullmatch(r"largest square     float64 (\d+), float32 (\d+) \(N of N×N×N that fits every "
                           r"device by hpcmm's count\)", lines[10])
    assert largest, lines[10]
    n64, n32 = (int(x) for x in largest.groups())
    # Half the bytes an element: float32's N is about sqrt(2) times float64's (the same memory).
    assert 1 < n64 < n32 and 1.3 < n32 / n64 < 1.5, (n64, n32)
    assert lines[11:] == ["MPS                no GPU"]


def test_cuda_awareness_as_asked_is_said_with_its_reason(capsys):
    said = [line for line in _info(capsys, cuda_aware_mpi="yes") if line.startswith("CUDA-aware MPI")]
    assert len(said) == 1 and re.fullmatch(r"CUDA-aware MPI     yes: \S.*--cuda-aware-mpi.*", said[0]), said


def test_the_facts_of_one_cpu_rank():
    facts = gather_info(RunConfig(device="cpu", cuda_aware_mpi="no"), MPI.COMM_SELF)
    (row,) = facts["rows"]
    assert row["rank"] == 0 and row["node_ranks"] == 1 and row["gpu_index"] < 0
    assert 0 < row["free_bytes"] <= row["total_bytes"]
    assert row["mps"].active is False
    assert facts["grid"] == "1x1" and facts["nodes"] == 1
    assert facts["cuda_aware"].aware is False
    assert facts["parallel_hdf5"] == parallel_hdf5()
    assert facts["oversubscribed"] == {} and facts["mps"] == []
    assert facts["versions"]["numpy"] == numpy.__version__ and facts["versions"]["h5py"] == h5py.__version__


def _gpu_facts(nvmath: str) -> dict:
    """What three ranks on two GPUs of host n1 would gather: GPU 0 holds ranks 0 and 1 (one under MPS)."""
    import types

    from hpcmm.cli.info import mps_by_gpu
    from hpcmm.planning.mps import MpsState

    gib = 2**30
    on = MpsState(True, "driver", "/tmp/mps", "the device attribute says so")
    off = MpsState(False, "pipe", "/tmp/mps", "no control socket")
    rows = [dict(rank=rank, host="n1", local_rank=rank, node=0, grid_row=0, grid_col=rank, gpu_index=gpu,
                 gpu_name="H200", gpu_uuid=f"GPU-{gpu}", gpu_pci=f"0000:0{gpu}:00.0", free_bytes=free * gib,
                 total_bytes=140 * gib, node_ranks=3, mps=state)
            for rank, gpu, free, state in ((0, 0, 100, on), (1, 0, 90, off), (2, 1, 120, off))]
    versions = dict(mpi_library="Open MPI v4.1.6", mpi_standard="3.1", mpi4py="4.1.2", cupy="14.2.0",
                    cuda_runtime="13.0", cuda_driver="13.1", nvmath_python=nvmath, h5py="3.16.0", hdf5="1.14.6",
                    numpy="2.4.0", python="3.12.3")
    return {"rows": rows, "versions": versions, "grid": "1x3", "nodes": 1,
            "cuda_aware": types.SimpleNamespace(aware=True, reason="--cuda-aware-mpi yes"), "parallel_hdf5": True,
            "oversubscribed": {"n1": (3, 2)}, "mps": mps_by_gpu(rows)}


@pytest.mark.parametrize("nvmath", ["0.8.0", ""])
def test_every_line_of_three_ranks_on_two_gpus(capsys, monkeypatch, nvmath):
    """GPU rows (GPU 0 among them: an index of 0 is a GPU), each GPU's memory and ranks, MPS by GPU, and the
    note of ranks sharing GPUs, from the facts gathered (given here: one process cannot be three ranks)."""
    from hpcmm.cli import info

    monkeypatch.setattr(info, "gather_info", lambda config, comm: _gpu_facts(nvmath))
    assert info.info_main(RunConfig(device="cpu", grid=(1, 3)), MPI.COMM_SELF) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1:4] == [f"{rank:>4} {'n1':<20} {rank:>5} {0:>4} 0,{rank:<3}  GPU {gpu} H200 GPU-{gpu} pci 0000:0{gpu}:00.0"
                          for rank, gpu in ((0, 0), (1, 0), (2, 1))]
    library = ("cuBLASLt through nvmath-python 0.8.0" if nvmath
               else "cuBLASLt through nvmath-python not installed (cublasGemmEx only; pip install nvmath-python)")
    assert lines[4:11] == [
        "process grid       1x3 (1 node(s))",
        "MPI library        Open MPI v4.1.6 (MPI 3.1, mpi4py 4.1.2)",
        "CUDA-aware MPI     yes: --cuda-aware-mpi yes",
        "cupy / CUDA        14.2.0 / runtime 13.0, driver 13.1",
        f"GEMM library       HPCMM_GEMM_LIBRARY=auto; {library}",
        "h5py / HDF5        3.16.0 / 1.14.6 (parallel HDF5: yes)",
        "numpy / Python     2.4.0 / 3.12.3",
    ]
    assert lines[11:13] == ["memory             GPU 0 of n1: 90.0 of 140.0 GiB free, 2 rank(s)",
                            "memory             GPU 1 of n1: 120.0 of 140.0 GiB free, 1 rank(s)"]
    assert re.fullmatch(r"largest square     float64 \d+, float32 \d+ \(N of N×N×N that fits every device by "
                        r"hpcmm's count\)", lines[13]), lines[13]
    assert lines[14:] == [
        "MPS                GPU 0 of n1: 2 rank(s), 1 of them under MPS (driver: the device attribute says so; "
        "pipe: no control socket)",
        "MPS                GPU 1 of n1: 1 rank(s), without MPS (pipe: no control socket)",
        "note: 3 ranks share 2 GPU(s) on n1",
    ]


def test_ranks_other_than_the_first_print_nothing_and_succeed(capsys, monkeypatch):
    from hpcmm.cli import info

    monkeypatch.setattr(info, "gather_info", lambda config, comm: None)  # what every rank but 0 gets
    assert info.info_main(RunConfig(device="cpu"), MPI.COMM_SELF) == 0
    assert capsys.readouterr().out == ""


def test_one_rank_on_gpu_0_under_mps(capsys, monkeypatch):
    """GPU 0 alone is still a GPU (the GEMM library line is the GPU's), and ranks all under MPS say so."""
    from hpcmm.cli import info
    from hpcmm.planning.mps import MpsState

    facts = _gpu_facts("0.8.0")
    facts["rows"] = facts["rows"][:1]
    facts["rows"][0]["mps"] = MpsState(True, "driver", "/tmp/mps", "the device attribute says so")
    facts["mps"], facts["oversubscribed"] = info.mps_by_gpu(facts["rows"]), {}
    monkeypatch.setattr(info, "gather_info", lambda config, comm: facts)
    assert info.info_main(RunConfig(device="cpu", grid=(1, 1)), MPI.COMM_SELF) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "GEMM library       HPCMM_GEMM_LIBRARY=auto; cuBLASLt through nvmath-python 0.8.0" in lines
    assert lines[-1] == "MPS                GPU 0 of n1: 1 rank(s), under MPS (driver: the device attribute says so)"


def test_the_largest_square_counts_a_gpu_as_a_gpu():
    """The same free bytes are counted for a GPU as a GPU (its panel widths and what a rank takes while it
    runs), not as a CPU."""
    from hpcmm.cli.info import memory_by_device

    gpu = _gpu_facts("")["rows"]
    cpu = [dict(row, gpu_index=-1) for row in gpu]
    largest = {(kind, nodes): memory_by_device(rows, "1x3", nodes)[0][2]["float64"]
               for kind, rows in (("gpu", gpu), ("cpu", cpu)) for nodes in (1,)}
    assert largest[("gpu", 1)] != largest[("cpu", 1)]


@pytest.mark.parametrize("gpus, shown, oversubscribed, n, note", [
    # 8 ranks on GPU 0 (index 0 is a GPU), strips of 2048 columns: float64 takes one process row
    ([0] * 8, "4x2", True, 16384, "; float64 runs take 1x8 (HPCMM_GRID_ORIENTATION=auto)"),
    # the same with strips of 750 columns, too narrow for one row: float64 stands tall
    ([0] * 8, "4x2", True, 6001, "; float64 runs take 2x4 (HPCMM_GRID_ORIENTATION=auto)"),
    # 16 ranks on GPU 0: more than one row takes; tall is the 4x4 shown
    ([0] * 16, "4x4", True, 16384, ""),
    # a rank on each of eight GPUs: float64 stands tall, and shares no GPU, so takes no row
    (list(range(8)), "4x2", False, 16384, "; float64 runs take 2x4 (HPCMM_GRID_ORIENTATION=auto)"),
    # CPU ranks on a host of more ranks than cores: wide whatever the type
    ([-1] * 8, "4x2", True, 16384, ""),
])
def test_the_note_of_a_grid_that_faces_otherwise(gpus, shown, oversubscribed, n, note):
    """The note after the process grid says which element types take another default grid than the one shown
    (the wide one), by the planner's rules: GPUs or not (GPU 0 counts), shared or not, how many ranks, how wide
    C's strips are."""
    from hpcmm.cli.info import _turned_note

    facts = {"rows": [{"gpu_index": gpu} for gpu in gpus], "grid": shown, "nodes": 1,
             "oversubscribed": {"n1": len(gpus)} if oversubscribed else {}}
    assert _turned_note(RunConfig(device="cpu", n=n), facts) == note
