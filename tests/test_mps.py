"""Seeing MPS: the control socket in a pipe directory of our own, the driver's answer, the hint.

The pipe directory here is a fresh one with a real UNIX socket in it, listening
or left behind, so the checks run on any Linux machine; the driver's answer is
read on a GPU (marked ``gpu``) and passed in elsewhere.
"""

from __future__ import annotations

import doctest
import os
import shutil
import socket
import tempfile

import pytest

from hpcmm.planning import mps as mps_module
from hpcmm.execution.backend import gpu_count
from hpcmm.planning.balance import Device
from hpcmm.planning.mps import (
    DEFAULT_PIPE_DIRECTORY,
    MpsState,
    control_socket_state,
    detect,
    driver_mps_enabled,
    pipe_directory,
    shared_without_mps,
    sharing_hint,
)

LINUX_SOCKETS = os.path.exists("/proc/net/unix")


@pytest.fixture
def pipe_dir():
    # Short, under /tmp: a UNIX socket path must fit in 108 bytes.
    path = tempfile.mkdtemp(prefix="mps-", dir="/tmp")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def control_socket(pipe_dir: str) -> socket.socket:
    """A listening SEQPACKET socket at ``pipe_dir/control``, as the control daemon makes."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    sock.bind(os.path.join(pipe_dir, "control"))
    sock.listen(1)
    return sock


def test_module_doctests():
    result = doctest.testmod(mps_module)
    assert result.attempted >= 4 and result.failed == 0, result


@pytest.mark.parametrize("environ, expected", [
    ({}, DEFAULT_PIPE_DIRECTORY),
    ({"CUDA_MPS_PIPE_DIRECTORY": ""}, DEFAULT_PIPE_DIRECTORY),
    ({"CUDA_MPS_PIPE_DIRECTORY": "/scratch/mps"}, "/scratch/mps"),
])
def test_pipe_directory(environ, expected):
    assert pipe_directory(environ) == expected


def test_no_control_socket(pipe_dir):
    assert control_socket_state(pipe_dir) == "missing"
    assert control_socket_state(os.path.join(pipe_dir, "absent")) == "missing"


def test_a_file_named_control_is_not_a_daemon(pipe_dir):
    with open(os.path.join(pipe_dir, "control"), "w"):
        pass
    assert control_socket_state(pipe_dir) == "not-a-socket"


@pytest.mark.skipif(not LINUX_SOCKETS, reason="no /proc/net/unix")
def test_a_listening_control_socket(pipe_dir):
    sock = control_socket(pipe_dir)
    try:
        assert control_socket_state(pipe_dir) == "listening"
        # Reached through another spelling of the same directory.
        assert control_socket_state(pipe_dir + "/") == "listening"
    finally:
        sock.close()


@pytest.mark.skipif(not LINUX_SOCKETS, reason="no /proc/net/unix")
def test_a_socket_left_behind_is_stale(pipe_dir):
    control_socket(pipe_dir).close()  # the socket file stays, nobody listens
    assert os.path.exists(os.path.join(pipe_dir, "control"))
    assert control_socket_state(pipe_dir) == "stale"


def test_without_proc_net_unix_a_socket_is_taken_at_its_word(pipe_dir):
    sock = control_socket(pipe_dir)
    try:
        assert control_socket_state(pipe_dir, proc_net_unix=os.path.join(pipe_dir, "no-such-file")) == "present"
    finally:
        sock.close()


def test_the_listening_flag_is_read_from_the_socket_table(pipe_dir):
    """A made-up /proc/net/unix: the path counts only on a line with the listening flag."""
    sock = control_socket(pipe_dir)
    path = os.path.join(pipe_dir, "control")
    table = os.path.join(pipe_dir, "unix")
    header = "Num       RefCount Protocol Flags    Type St Inode Path\n"
    try:
        with open(table, "w") as f:
            f.write(header + f"0000000000000000: 00000002 00000000 00000000 0005 01 32192 {path}\n")
        assert control_socket_state(pipe_dir, table) == "stale"
        with open(table, "w") as f:
            f.write(header + "0000000000000000: 00000002 00000000 00010000 0005 01 1 /other/control\n"
                    + f"0000000000000000: 00000002 00000000 00010000 0005 01 32192 {path}\n")
        assert control_socket_state(pipe_dir, table) == "listening"
    finally:
        sock.close()


# -- detect ---------------------------------------------------------------------


def test_detect_from_the_pipe(pipe_dir):
    env = {"CUDA_MPS_PIPE_DIRECTORY": pipe_dir}
    state = detect(environ=env, driver=lambda device: pytest.fail("no device: the driver is not asked"))
    assert state == MpsState(False, "pipe", pipe_dir, f"no MPS control socket {pipe_dir}/control")
    sock = control_socket(pipe_dir)
    try:
        state = detect(environ=env)
        assert state.active and state.source == "pipe" and state.pipe_dir == pipe_dir
        assert "listens on" in state.detail if LINUX_SOCKETS else "present" in state.detail
    finally:
        sock.close()


@pytest.mark.parametrize("said", [True, False])
def test_the_driver_has_the_last_word(pipe_dir, said):
    """With a daemon listening or not, the device attribute decides where it can be read."""
    env = {"CUDA_MPS_PIPE_DIRECTORY": pipe_dir}
    sock = control_socket(pipe_dir)
    try:
        state = detect(device_id=1, environ=env, driver=lambda device: said if device == 1 else None)
    finally:
        sock.close()
    assert state.active is said and state.source == "driver"
    assert f"GPU 1 are {'' if said else 'not '}shared via MPS" in state.detail


def test_a_silent_driver_leaves_it_to_the_pipe(pipe_dir):
    state = detect(device_id=0, environ={"CUDA_MPS_PIPE_DIRECTORY": pipe_dir}, driver=lambda device: None)
    assert not state.active and state.source == "pipe"


def test_driver_answer_without_a_gpu_is_none():
    if gpu_count() > 0:
        pytest.skip("a GPU is visible: see test_driver_answer_on_a_gpu")
    assert driver_mps_enabled(0) is None


@pytest.mark.gpu
@pytest.mark.skipif(gpu_count() == 0, reason="no usable GPU: cupy does not import or sees no CUDA device")
def test_driver_answer_on_a_gpu():
    """CUDA >= 12.3 answers True or False; on a machine without a daemon at the pipe, False."""
    import cupy  # noqa: PLC0415

    said = driver_mps_enabled(0)
    if cupy.cuda.runtime.runtimeGetVersion() < 12030:
        assert said is None
        return
    assert said in (True, False)
    state = detect(device_id=0)
    assert state.source == "driver" and state.active is said
    if control_socket_state(pipe_directory()) == "missing":
        assert said is False


# -- who shares without MPS, and the hint ---------------------------------------------


def test_shared_without_mps_groups_by_device():
    devices = [Device("n1", 0, "GPU-a"), Device("n1", 1, "GPU-b"), Device("n1", 0, "GPU-a"), Device("n1", 1, "GPU-b"),
               Device("n1", 2, "GPU-c")]
    assert shared_without_mps(devices, [False] * 5) == {"GPU 0 of n1": 2, "GPU 1 of n1": 2}
    # GPU 1's ranks both run under MPS; GPU 0 has one that does not.
    assert shared_without_mps(devices, [True, True, False, True, False]) == {"GPU 0 of n1": 2}
    assert shared_without_mps(devices, [True] * 5) == {}


def test_shared_without_mps_refuses_a_count_mismatch():
    with pytest.raises(ValueError, match="2 MPS states for 3 ranks"):
        shared_without_mps(["a", "b", "a"], [True, False])


def test_hint_names_the_busiest_gpu_and_the_recipe():
    hint = sharing_hint({"GPU 0 of n1": 2, "GPU 1 of n1": 3, "GPU 2 of n1": 2})
    assert hint.startswith("3 ranks share GPU 1 of n1 (and 2 more GPUs) without MPS; ")
    assert "export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe-$USER CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log-$USER" in hint
    assert "nvidia-cuda-mps-control -d" in hint and "echo quit | nvidia-cuda-mps-control" in hint
    assert "\n" not in hint


def test_hint_for_one_gpu_and_given_directories():
    hint = sharing_hint({"GPU 0 of n1": 2}, pipe_dir="/scratch/p", log_dir="/scratch/l")
    assert hint.startswith("2 ranks share GPU 0 of n1 without MPS; ")
    assert "CUDA_MPS_PIPE_DIRECTORY=/scratch/p CUDA_MPS_LOG_DIRECTORY=/scratch/l" in hint


@pytest.mark.parametrize("shared", [{}, {"GPU 0 of n1": 1}])
def test_no_hint_when_no_gpu_is_shared(shared):
    assert sharing_hint(shared) is None
