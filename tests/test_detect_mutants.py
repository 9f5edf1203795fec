"""What the CUDA-awareness check promises: each library call's answer and name, the vendors'
spellings of yes, and where the MPI library is found.

Written against the mutants that mutation testing of hpcmm/execution/transport/detect.py left alive
(docs/mutation.md).  The library is a stand-in with the MPIX calls as C functions
(``ctypes.CFUNCTYPE``), so that both calls and both answers are tested on any machine.
"""

from __future__ import annotations

import ctypes
import io

import pytest

from hpcmm.execution.transport import detect
from hpcmm.execution.transport.detect import decide, find_mpi_library, query_library


class _Library:
    """A loaded library with the given MPIX calls (attributes), as ``ctypes.CDLL`` gives one."""

    def __init__(self, **calls):
        self.__dict__.update(calls)


def _use(monkeypatch, library):
    monkeypatch.setattr(detect.ctypes, "CDLL", lambda path: library)


@pytest.mark.parametrize("value, aware", [(1, True), (0, False)])
def test_open_mpi_query_answers(monkeypatch, value, aware):
    fn = ctypes.CFUNCTYPE(ctypes.c_int)(lambda: value)
    _use(monkeypatch, _Library(MPIX_Query_cuda_support=fn))
    assert query_library("libmpi.so.40") == (aware, "MPIX_Query_cuda_support()")


@pytest.mark.parametrize("supported, aware", [(1, True), (0, False)])
def test_mpich_query_answers_for_cuda(monkeypatch, supported, aware):
    asked = []

    def query(kind, out):
        asked.append(kind)
        out[0] = supported if kind == 0 else 1 - supported  # MPIX_GPU_SUPPORT_CUDA is 0
        return 0

    fn = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_int))(query)
    _use(monkeypatch, _Library(MPIX_GPU_query_support=fn))
    assert query_library("libmpi.so.12") == (aware, "MPIX_GPU_query_support(MPIX_GPU_SUPPORT_CUDA)")
    assert asked == [0]


def test_mpich_query_that_fails_gives_no_answer(monkeypatch):
    def query(kind, out):
        out[0] = 1
        return 1  # an MPI error code

    fn = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_int))(query)
    _use(monkeypatch, _Library(MPIX_GPU_query_support=fn))
    assert query_library("libmpi.so.12") == (None, "no MPIX query call in the library")


def test_open_mpi_query_is_asked_first(monkeypatch):
    ompi = ctypes.CFUNCTYPE(ctypes.c_int)(lambda: 0)
    mpich = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_int))(lambda k, o: 0)
    _use(monkeypatch, _Library(MPIX_Query_cuda_support=ompi, MPIX_GPU_query_support=mpich))
    assert query_library("libmpi.so") == (False, "MPIX_Query_cuda_support()")


def test_the_loaded_mpi_library_is_found():
    from mpi4py import MPI  # noqa: F401 - loads the MPI library into the process

    path = find_mpi_library()
    assert path is not None and "/" in path and "libmpi" in path


MAPS = """\
7f00-7f01 r-xp 00000000 08:01 42 /opt/other/libmpich_cxx.so.1
7f01-7f02 r-xp 00000000 08:01 43 /opt/mpi/lib/libmpi_ilp64.so.12
7f02-7f03 r-xp 00000000 08:01 44 /opt/mpi/lib/libmpi.so.40
"""


@pytest.mark.parametrize("maps, found", [
    (MAPS, "/opt/mpi/lib/libmpi_ilp64.so.12"),
    (MAPS.splitlines(True)[2], "/opt/mpi/lib/libmpi.so.40"),
    ("7f00-7f01 rw-p 00000000 00:00 0\n7f02-7f03 r-xp 00000000 08:01 44 /opt/mpi/lib/libmpi.so\n",
     "/opt/mpi/lib/libmpi.so"),
    ("7f00-7f01 r-xp 00000000 08:01 42 /opt/mpi/lib/libmpi_static.a\n", None),
    ("7f00-7f01 r-xp 00000000 08:01 libmpi.so.40\n", None),
])
def test_the_library_is_read_from_the_process_maps(monkeypatch, maps, found):
    opened = []

    def fake_open(path, *args, **kwargs):
        opened.append(path)
        return io.StringIO(maps)

    monkeypatch.setattr(detect, "open", fake_open, raising=False)
    assert find_mpi_library() == found
    assert opened == ["/proc/self/maps"]


@pytest.mark.parametrize("word", ["on", "ON", " enable ", "Enabled", "1", "true", "yes"])
def test_vendor_variables_take_every_spelling_of_yes(word):
    verdict = decide("auto", environ={"MPICH_GPU_SUPPORT_ENABLED": word}, library=lambda: (None, "x"))
    assert verdict.aware and verdict.reason == "MPICH_GPU_SUPPORT_ENABLED=1 (Cray MPICH)"
    verdict = decide("auto", environ={"MV2_USE_CUDA": word}, library=lambda: (None, "x"))
    assert verdict.aware and verdict.reason == "MV2_USE_CUDA=1 (MVAPICH2)"


def test_without_arguments_the_library_decides():
    verdict = decide(environ={}, library=lambda: (True, "MPIX_Query_cuda_support()"))
    assert verdict.aware and verdict.reason == "MPIX_Query_cuda_support() returned 1"
    assert decide("yes").reason == "set by --cuda-aware-mpi=yes"
    unknown = decide(environ={}, library=lambda: (None, "no MPIX query call in the library"))
    assert not unknown.aware and not unknown.known
    assert unknown.reason == "cannot tell (no MPIX query call in the library); assuming not CUDA-aware"
