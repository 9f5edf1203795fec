"""The GPU backend's copies and fills are complete when they return (no GPU needed).

cupy queues them on its current stream; hpcmm's compute and communication
streams are non-blocking, so they do not wait for it.  A GEMM queued on the
compute stream right after ``from_host`` or ``poison`` could otherwise read the
operand before it lands (it did, in the GPU tests).  A stand-in for cupy records
the order of the calls.
"""

from __future__ import annotations

import contextlib
import types

import numpy as np

from hpcmm.execution.backend import GpuBackend


class _Stream:
    def __init__(self, calls: list[str]) -> None:
        self.calls = calls

    def synchronize(self) -> None:
        self.calls.append("synchronize")


class _Array:
    def __init__(self, calls: list[str], size: int) -> None:
        self.calls, self.size = calls, size

    def fill(self, value) -> None:
        self.calls.append(f"fill {value}")


def _backend() -> tuple[GpuBackend, list[str]]:
    calls: list[str] = []
    stream = _Stream(calls)

    def asarray(array, order="C"):
        calls.append(f"copy {np.asarray(array).shape} {order}")
        return _Array(calls, np.asarray(array).size)

    cupy = types.SimpleNamespace(asarray=asarray, cuda=types.SimpleNamespace(get_current_stream=lambda: stream))
    backend = GpuBackend.__new__(GpuBackend)  # no CUDA here: only the attributes these two methods use
    backend.cupy = cupy
    backend.device = contextlib.nullcontext()
    return backend, calls


def test_from_host_returns_when_the_copy_is_done():
    backend, calls = _backend()
    backend.from_host(np.ones((3, 2)), order="F")
    assert calls == ["copy (3, 2) F", "synchronize"]


def test_poison_returns_when_the_fill_is_done():
    backend, calls = _backend()
    backend.poison(_Array(calls, 6))
    assert calls == ["fill nan", "synchronize"]
    calls.clear()
    backend.poison(_Array(calls, 0))  # nothing to fill, nothing to wait for
    assert calls == []


def _described(props: dict) -> dict:
    backend = GpuBackend.__new__(GpuBackend)  # no CUDA here: describe reads the device's properties only
    backend.cupy = types.SimpleNamespace(cuda=types.SimpleNamespace(
        runtime=types.SimpleNamespace(getDeviceProperties=lambda device: props)))
    backend.device_id = 1
    return backend.describe()


def test_a_gpu_without_a_uuid_describes_none():
    """Ranks with equal UUIDs are taken to share a device: a GPU whose runtime gives no UUID must say ""
    (the device is then told by host and index), never a text that every such GPU shares."""
    facts = _described({"name": b"GPU", "uuid": b"", "pciBusID": 5})
    assert facts["gpu_uuid"] == "" and facts["gpu_index"] == "1" and facts["gpu_name"] == "GPU"
    assert _described({"name": "GPU"})["gpu_uuid"] == ""
    uuid = _described({"name": "GPU", "uuid": bytes(range(16))})["gpu_uuid"]
    assert uuid == "GPU-00010203-0405-0607-0809-0a0b0c0d0e0f"
