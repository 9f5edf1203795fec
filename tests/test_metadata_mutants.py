"""What a results file records of the machine a run ran on, one behaviour a test.

Written against the mutants that mutation testing of hpcmm/io/metadata.py left alive
(docs/mutation.md): every key of ``versions`` and its value, with and without a GPU backend (a
stand-in's cupy and CUDA versions), a parallel HDF5 build and an installed nvmath-python (stand-ins
of h5py's configuration and of the installed distributions); the MPI library's first line from
Open MPI's NUL-padded text, from several lines, or from none; the key and the name of a rank's
device (one key per GPU, by its UUID where there is one); and each field of a topology row.
"""

from __future__ import annotations

import platform
import re
import sys
import types
from importlib import metadata as distributions

import h5py
import mpi4py
import numpy
import pytest
from mpi4py import MPI

import hpcmm
from hpcmm.io.metadata import device_of, mpi_library, parallel_hdf5, topology_row, versions

KEYS = ["hpcmm", "python", "platform", "numpy", "mpi4py", "mpi_library", "mpi_standard", "h5py", "hdf5",
        "hdf5_parallel", "cupy", "cuda_runtime", "cuda_driver", "nvmath_python"]


@pytest.fixture
def no_cupy(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)


def _installed_only(monkeypatch, installed: dict[str, str]) -> None:
    """Distributions as ``importlib.metadata`` finds them: names compared as it compares them (normalised)."""
    def version(name):
        key = re.sub(r"[-_.]+", "-", name).lower()
        if key not in installed:
            raise distributions.PackageNotFoundError(name)
        return installed[key]

    monkeypatch.setattr(distributions, "version", version)


def test_versions_without_a_backend_name_every_piece(no_cupy, monkeypatch):
    _installed_only(monkeypatch, {})
    got = versions()
    assert list(got) == KEYS
    assert got == {"hpcmm": hpcmm.__version__, "python": sys.version.split()[0], "platform": platform.platform(),
                   "numpy": numpy.__version__, "mpi4py": mpi4py.__version__, "mpi_library": mpi_library(),
                   "mpi_standard": "{}.{}".format(*MPI.Get_version()), "h5py": h5py.__version__,
                   "hdf5": h5py.version.hdf5_version, "hdf5_parallel": str(bool(h5py.get_config().mpi)),
                   "cupy": "", "cuda_runtime": "", "cuda_driver": "", "nvmath_python": ""}


def test_an_installed_nvmath_python_is_named_by_its_distribution(no_cupy, monkeypatch):
    _installed_only(monkeypatch, {"nvmath-python": "0.8.0"})
    assert versions()["nvmath_python"] == "0.8.0"


def test_a_parallel_hdf5_build_is_said(no_cupy, monkeypatch):
    monkeypatch.setattr(h5py, "get_config", lambda: types.SimpleNamespace(mpi=True))
    assert parallel_hdf5() is True
    assert versions()["hdf5_parallel"] == "True"


def test_a_gpu_backend_gives_cupy_and_cuda_versions():
    """CUDA numbers its versions 1000 × major + 10 × minor: 12010 is 12.1, 12090 is 12.9."""
    runtime = types.SimpleNamespace(runtimeGetVersion=lambda: 12010, driverGetVersion=lambda: 12090)
    backend = types.SimpleNamespace(on_gpu=True, cupy=types.SimpleNamespace(__version__="13.3.0",
                                                                             cuda=types.SimpleNamespace(runtime=runtime)))
    got = versions(backend)
    assert (got["cupy"], got["cuda_runtime"], got["cuda_driver"]) == ("13.3.0", "12.1", "12.9")
    assert list(got) == KEYS


def test_a_host_backend_names_cupy_where_it_imports(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(__version__="14.0.1"))
    got = versions(types.SimpleNamespace(on_gpu=False))
    assert (got["cupy"], got["cuda_runtime"], got["cuda_driver"]) == ("14.0.1", "", "")


@pytest.mark.parametrize("text, first", [
    ("Open MPI v4.1.6, package: Open MPI builder, ident: 4.1.6, repo rev: v4.1.6, Sep 30, 2023\x00\x00\x00",
     "Open MPI v4.1.6, package: Open MPI builder, ident: 4.1.6, repo rev: v4.1.6, Sep 30, 2023"),
    ("  MPICH Version:      5.0.2  \nMPICH Release date: unreleased\nMPICH ABI:          0:0:0\n",
     "MPICH Version:      5.0.2"),
    ("\x00\x00", ""),
    ("", ""),
], ids=["open_mpi_padded", "mpich_lines", "only_nuls", "empty"])
def test_the_mpi_library_is_the_first_line_of_its_text(monkeypatch, text, first):
    monkeypatch.setattr(MPI, "Get_library_version", lambda: text)
    assert mpi_library() == first


def test_this_mpi_librarys_first_line():
    assert mpi_library() == MPI.Get_library_version().replace("\x00", "").strip().splitlines()[0].strip() != ""


def test_a_gpu_is_keyed_by_its_uuid_and_named_by_its_index():
    """One GPU seen under two indices (each rank's CUDA_VISIBLE_DEVICES) is one device; two GPUs are two."""
    one = device_of({"host": "n1", "gpu_index": 0, "gpu_uuid": "GPU-7f3a"})
    again = device_of({"host": "n1", "gpu_index": 1, "gpu_uuid": "GPU-7f3a"})
    other = device_of({"host": "n1", "gpu_index": 1, "gpu_uuid": "GPU-0c21"})
    assert one == (("n1", "GPU-7f3a"), "GPU 0 of n1") and again == (("n1", "GPU-7f3a"), "GPU 1 of n1")
    assert other[0] != one[0]
    assert device_of({"host": "n1", "gpu_index": 2, "gpu_uuid": ""}) == (("n1", 2), "GPU 2 of n1")


def test_a_row_without_a_host_or_a_gpu():
    """Missing fields read as no host (``""``) and no GPU: the host itself is the device."""
    assert device_of({"gpu_index": 3}) == (("", 3), "GPU 3 of ")
    assert device_of({"host": "n2"}) == (("n2", "host"), "host n2")
    assert device_of({}) == (("", "host"), "host ")
    assert device_of({"host": "n2", "gpu_index": -1, "gpu_uuid": "GPU-7f3a"}) == (("n2", "host"), "host n2")


def _topology(rank=3, coords=(1, 2)):
    return types.SimpleNamespace(coords=coords, rank=rank, launch_rank=5, host="n2", local_rank=1, local_size=4,
                                 vnode=1)


def test_a_topology_row_holds_the_rank_its_place_and_its_gpu():
    gpu = {"backend": "cupy", "gpu_index": "1", "gpu_name": "NVIDIA H100", "gpu_uuid": "GPU-7f3a",
           "gpu_pci": "0000:41:00.0"}
    row = topology_row(_topology(), types.SimpleNamespace(describe=lambda: gpu))
    assert row == {"rank": 3, "launch_rank": 5, "host": "n2", "local_rank": 1, "local_size": 4, "node": 1,
                   "grid_row": 1, "grid_col": 2, "backend": "cupy", "gpu_index": 1, "gpu_name": "NVIDIA H100",
                   "gpu_uuid": "GPU-7f3a", "gpu_pci": "0000:41:00.0"}


def test_a_topology_row_of_a_backend_that_says_nothing():
    row = topology_row(_topology(rank=0, coords=(0, 0)), types.SimpleNamespace(describe=dict))
    assert {k: row[k] for k in ("backend", "gpu_index", "gpu_name", "gpu_uuid", "gpu_pci")} == {
        "backend": "", "gpu_index": -1, "gpu_name": "", "gpu_uuid": "", "gpu_pci": ""}
