"""Is the MPI CUDA-aware?  Every row of the decision table in :mod:`hpcmm.execution.transport.detect`.

The library's own answer is injected (``library=``), so each row is tested on
any machine; the real query runs once against the MPI this process loaded.
"""

from __future__ import annotations

import pytest

from hpcmm.execution.transport import detect
from hpcmm.execution.transport.detect import CudaAwareness, decide, find_mpi_library, query_library


def answers(value):
    """A stand-in for :func:`query_library` that returns ``value`` and counts its calls."""

    def library():
        library.calls += 1
        return value, "MPIX_Test_query()"

    library.calls = 0
    return library


def refuse():
    raise AssertionError("the library must not be asked when the option decides")


@pytest.mark.parametrize("option, aware", [("yes", True), ("no", False)])
@pytest.mark.parametrize("source", ["--cuda-aware-mpi", "HPCMM_CUDA_AWARE_MPI"])
def test_option_decides_without_asking(option, aware, source):
    """An explicit yes/no wins over the library and every variable."""
    environ = {"MPICH_GPU_SUPPORT_ENABLED": "1", "MV2_USE_CUDA": "1", "I_MPI_OFFLOAD": "2"}
    verdict = decide(option, environ=environ, option_source=source, library=refuse)
    assert verdict == CudaAwareness(aware, f"set by {source}={option}")
    assert verdict.known and verdict.hint is None


@pytest.mark.parametrize("answer", [True, False])
def test_library_answer_wins_over_variables(answer):
    """Open MPI's ``MPIX_Query_cuda_support`` or MPICH's ``MPIX_GPU_query_support``."""
    library = answers(answer)
    environ = {"MPICH_GPU_SUPPORT_ENABLED": "1", "MV2_USE_CUDA": "1", "I_MPI_OFFLOAD": "1"}
    verdict = decide("auto", environ=environ, library=library)
    assert library.calls == 1
    assert verdict.aware is answer
    assert verdict.known and verdict.hint is None
    assert verdict.reason == f"MPIX_Test_query() returned {int(answer)}"


@pytest.mark.parametrize("environ, aware, reason", [
    ({"MPICH_GPU_SUPPORT_ENABLED": "1"}, True, "MPICH_GPU_SUPPORT_ENABLED=1 (Cray MPICH)"),
    ({"MPICH_GPU_SUPPORT_ENABLED": "yes"}, True, "Cray MPICH"),
    ({"MV2_USE_CUDA": "1"}, True, "MV2_USE_CUDA=1 (MVAPICH2)"),
    ({"MV2_USE_CUDA": "true"}, True, "MVAPICH2"),
    ({"I_MPI_OFFLOAD": "1"}, True, "I_MPI_OFFLOAD=1 (Intel MPI)"),
    ({"I_MPI_OFFLOAD": "2"}, True, "I_MPI_OFFLOAD=2 (Intel MPI)"),
    # Earlier rows win over later ones.
    ({"MPICH_GPU_SUPPORT_ENABLED": "1", "MV2_USE_CUDA": "1"}, True, "Cray MPICH"),
    ({"MV2_USE_CUDA": "1", "I_MPI_OFFLOAD": "1"}, True, "MVAPICH2"),
])
def test_vendor_variables_when_library_cannot_tell(environ, aware, reason):
    verdict = decide("auto", environ=environ, library=answers(None))
    assert verdict.aware is aware
    assert reason in verdict.reason
    assert verdict.known and verdict.hint is None


@pytest.mark.parametrize("environ", [
    {},
    {"MPICH_GPU_SUPPORT_ENABLED": "0"},
    {"MV2_USE_CUDA": "0"},
    {"MV2_USE_CUDA": ""},
    {"I_MPI_OFFLOAD": "0"},
    {"I_MPI_OFFLOAD": "auto"},
    {"I_MPI_OFFLOAD": "-1"},
    {"OMPI_MCA_opal_cuda_support": "true"},  # not in the table: no guessing
])
def test_unknown_means_not_aware_with_a_hint(environ):
    """Handing device memory to an MPI that is not CUDA-aware crashes: err on the safe side."""
    verdict = decide("auto", environ=environ, library=answers(None))
    assert verdict.aware is False
    assert verdict.known is False
    assert "cannot tell" in verdict.reason and "MPIX_Test_query()" in verdict.reason
    hint = verdict.hint
    assert hint is not None and "\n" not in hint
    assert "--cuda-aware-mpi yes" in hint and "HPCMM_CUDA_AWARE_MPI=yes" in hint


def test_environment_defaults_to_os_environ(monkeypatch):
    for name in ("MPICH_GPU_SUPPORT_ENABLED", "MV2_USE_CUDA", "I_MPI_OFFLOAD"):
        monkeypatch.delenv(name, raising=False)
    assert decide("auto", library=answers(None)).known is False
    monkeypatch.setenv("MV2_USE_CUDA", "1")
    assert decide("auto", library=answers(None)).aware is True


def test_query_library_on_the_loaded_mpi():
    """The real query: returns an answer or says why not, and never crashes the process."""
    from mpi4py import MPI  # noqa: F401 - loads the MPI library into the process

    path = find_mpi_library()
    assert path is None or "libmpi" in path
    answer, source = query_library()
    assert answer in (True, False, None)
    assert isinstance(source, str) and source
    verdict = decide("auto", environ={})
    assert isinstance(verdict.aware, bool)
    if answer is not None:
        assert verdict.known and verdict.aware is answer


def test_query_library_without_a_library(tmp_path, monkeypatch):
    """A path that is no shared library: no answer, and the reason says so."""
    bogus = tmp_path / "libmpi.so.99"
    bogus.write_text("not a library")
    answer, source = query_library(str(bogus))
    assert answer is None and str(bogus) in source
    monkeypatch.setattr(detect, "find_mpi_library", lambda: None)
    assert query_library() == (None, "MPI library not found in the process")


def test_query_library_without_query_calls():
    """A real shared library without any MPIX call (the C library) gives no answer."""
    import ctypes.util

    libc = ctypes.util.find_library("c")
    if libc is None:
        pytest.skip("no C library found by ctypes.util.find_library")
    assert query_library(libc) == (None, "no MPIX query call in the library")
