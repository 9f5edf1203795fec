"""What seeing MPS promises at its edges, one behaviour a test.

Written against the mutants that mutation testing of hpcmm/planning/mps.py left alive
(docs/mutation.md): the process environment read when none is passed, the socket table read to its
first entry and past lines it cannot read, paths with spaces or bytes that are not UTF-8, the
driver's answer taken as it is (through a stand-in ``cupy`` module), the pipe directory and socket
table :func:`~hpcmm.planning.mps.detect` is given, a socket present where no table says more, and
which ranks :func:`~hpcmm.planning.mps.shared_without_mps` counts as sharing a GPU without MPS.
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
import tempfile
import types

import pytest

from hpcmm.planning.balance import Device
from hpcmm.planning.mps import (MpsState, control_socket_state, detect, driver_mps_enabled, pipe_directory,
                                shared_without_mps)

HEADER = "Num       RefCount Protocol Flags    Type St Inode Path\n"


def _row(path: str, listening: bool = True) -> str:
    """One line of /proc/net/unix for a SEQPACKET socket bound at ``path``."""
    return f"0000000000000000: 00000002 00000000 {'00010000' if listening else '00000000'} 0005 01 32192 {path}\n"


@pytest.fixture
def pipe_dir():
    # Short, under /tmp: a UNIX socket path must fit in 108 bytes.
    path = tempfile.mkdtemp(prefix="mps-", dir="/tmp")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def listening(pipe_dir):
    """A listening control socket in ``pipe_dir``, as the daemon makes; its path."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    path = os.path.join(pipe_dir, "control")
    sock.bind(path)
    sock.listen(1)
    yield path
    sock.close()


def _table(pipe_dir: str, text: str, mode: str = "w") -> str:
    table = os.path.join(pipe_dir, "unix")
    with open(table, mode) as f:
        f.write(text)
    return table


# -- the pipe directory ---------------------------------------------------------------------


def test_pipe_directory_reads_the_process_environment_when_given_none(monkeypatch):
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", "/run/mps-pipe-test")
    assert pipe_directory() == "/run/mps-pipe-test"
    monkeypatch.delenv("CUDA_MPS_PIPE_DIRECTORY")
    assert pipe_directory() == "/tmp/nvidia-mps"


# -- the socket table -----------------------------------------------------------------------


def test_the_tables_first_socket_counts(pipe_dir, listening):
    assert control_socket_state(pipe_dir, _table(pipe_dir, HEADER + _row(listening))) == "listening"


@pytest.mark.parametrize("line", [
    "0000000000000000: 00000002 00000000 zz 0005 01 7 /bad/flags\n",  # flags that are not hex
    "0000000000000000: 00000003 00000000 00000000 0001 03 8\n",  # an unnamed socket: no path column
])
def test_a_line_without_a_usable_path_is_skipped_not_the_end(pipe_dir, listening, line):
    """Unnamed sockets (most of a real table) come before and after the daemon's."""
    assert control_socket_state(pipe_dir, _table(pipe_dir, HEADER + line + _row(listening))) == "listening"


def test_socket_paths_with_spaces_are_read_whole():
    """The path is everything after the seventh column: a pipe directory may hold spaces."""
    pipe_dir = tempfile.mkdtemp(prefix="mps sp ", dir="/tmp")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        path = os.path.join(pipe_dir, "control")
        sock.bind(path)
        sock.listen(1)
        assert control_socket_state(pipe_dir, _table(pipe_dir, HEADER + _row(path))) == "listening"
        assert control_socket_state(pipe_dir, _table(pipe_dir, HEADER + _row(path, listening=False))) == "stale"
    finally:
        sock.close()
        shutil.rmtree(pipe_dir, ignore_errors=True)


def test_a_socket_path_not_in_utf8_does_not_stop_the_reading(pipe_dir, listening):
    """Socket paths are bytes: another socket's name in Latin-1 is read past."""
    text = (HEADER.encode() + b"0000000000000000: 00000002 00000000 00010000 0005 01 9 /tmp/caf\xe9/control\n"
            + _row(listening).encode())
    table = os.path.join(pipe_dir, "unix")
    with open(table, "wb") as f:
        f.write(text)
    assert control_socket_state(pipe_dir, table) == "listening"


# -- detect ---------------------------------------------------------------------------------


def test_the_drivers_answer_names_the_pipe_directory(pipe_dir):
    state = detect(device_id=2, environ={"CUDA_MPS_PIPE_DIRECTORY": pipe_dir}, driver=lambda device: True)
    assert state == MpsState(True, "driver", pipe_dir, "the driver says contexts on GPU 2 are shared via MPS")


def test_detect_reads_the_socket_table_it_is_given(pipe_dir, listening):
    """A table where nobody listens on the control socket: stale, whatever the system's table says."""
    table = _table(pipe_dir, HEADER + _row(listening, listening=False))
    state = detect(environ={"CUDA_MPS_PIPE_DIRECTORY": pipe_dir}, proc_net_unix=table)
    assert state == MpsState(False, "pipe", pipe_dir,
                             f"nobody listens on {listening} (a daemon that ended left it)")


def test_a_socket_present_without_a_table_counts_as_mps(pipe_dir, listening):
    state = detect(environ={"CUDA_MPS_PIPE_DIRECTORY": pipe_dir}, proc_net_unix=os.path.join(pipe_dir, "none"))
    assert state == MpsState(True, "pipe", pipe_dir, f"MPS control socket {listening} present")


@pytest.mark.parametrize("value, said", [(1, True), (0, False)])
def test_the_drivers_attribute_is_its_answer(monkeypatch, value, said):
    """cupy's ``deviceGetAttribute(cudaDevAttrMpsEnabled, device)``, as a bool (a stand-in cupy here)."""
    asked = []

    def device_get_attribute(attribute, device):
        asked.append((attribute, device))
        return value

    runtime = types.SimpleNamespace(deviceGetAttribute=device_get_attribute)
    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(cuda=types.SimpleNamespace(runtime=runtime)))
    assert driver_mps_enabled(3) is said
    assert asked == [(133, 3)]


# -- who shares without MPS -----------------------------------------------------------------


def test_one_gpu_seen_under_two_indices_is_one_shared_gpu():
    """Per-rank CUDA_VISIBLE_DEVICES: the UUID says the two ranks share a GPU."""
    devices = [Device("n1", 0, "GPU-a"), Device("n1", 1, "GPU-a")]
    assert shared_without_mps(devices, [False, False]) == {"GPU 0 of n1": 2}


@pytest.mark.parametrize("active", [[False, True], [True, False]])
def test_one_rank_without_mps_is_enough_to_time_slice(active):
    devices = [Device("n1", 0, "GPU-a"), Device("n1", 0, "GPU-a")]
    assert shared_without_mps(devices, active) == {"GPU 0 of n1": 2}
