"""The caller's arrays that hpcmm takes and those it refuses, one behaviour a test.

Written against the mutants that mutation testing of hpcmm/io/operands.py left alive
(docs/mutation.md).  No torch and no GPU here: stand-ins offer what such arrays offer.  A host
tensor shares its memory through DLPack (the product lands in it); a device array is one of a
stand-in cupy module (``sys.modules``), with its GPU, shape and type; objects with only
``__cuda_array_interface__``, or only half of DLPack, and DLPack memory of other kinds are
named in the refusal; so is an operand whose producer refuses to share it, one of the wrong type, a
device operand for a host plan or for another GPU.  Read-only A and B are taken (and ``check`` takes a
read-only operand unless told it is written); a device block is gathered to the host.
"""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest
from mpi4py import MPI

import hpcmm
from hpcmm.errors import InputError
from hpcmm.geometry.distribution import Layout
from hpcmm.io.operands import check, view

M, N, K = 6, 5, 4
GPU = 3  # the stand-in device arrays' GPU


def _kind(x) -> str:
    return f"a {type(x).__module__}.{type(x).__name__}"


class HostTensor:
    """A CPU tensor of another library: DLPack only (as torch's CPU tensors)."""

    def __init__(self, array: np.ndarray):
        self.data = array

    def __dlpack__(self, **kwargs):
        return self.data.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.data.__dlpack_device__()


class DeviceArray:
    """A stand-in cupy array: a GPU, a shape and a type, ``get()`` to the host, and CUDA's array interface."""

    __module__ = "cupy"

    def __init__(self, host: np.ndarray, gpu: int = GPU):
        self.host, self.shape, self.dtype = host, host.shape, host.dtype
        self.device = types.SimpleNamespace(id=gpu)
        self.__cuda_array_interface__ = {"shape": host.shape, "typestr": host.dtype.str, "version": 3}

    def get(self) -> np.ndarray:
        return self.host.copy()


class CudaOnly:
    """A CUDA array offering only ``__cuda_array_interface__`` (as numba's device arrays)."""

    def __init__(self, host: np.ndarray, gpu: int = GPU):
        self.host, self.gpu = host, gpu
        self.__cuda_array_interface__ = {"shape": host.shape, "typestr": host.dtype.str, "version": 3}


class DlpackOn:
    """A DLPack producer whose memory is of device type ``device_type`` (2 CUDA, 3 CUDA host, 13 managed, 4 OpenCL)."""

    def __init__(self, host: np.ndarray, device_type: int, gpu: int = GPU):
        self.host, self.device_type, self.gpu = host, device_type, gpu

    def __dlpack__(self, **kwargs):
        return self.host.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.device_type, self.gpu


@pytest.fixture
def stand_in_cupy(monkeypatch):
    """A cupy module whose ``asarray`` and ``from_dlpack`` give stand-in device arrays on the producer's GPU."""
    cupy = types.ModuleType("cupy")
    cupy.asarray = lambda x: x if isinstance(x, DeviceArray) else DeviceArray(x.host, x.gpu)
    cupy.from_dlpack = lambda x: DeviceArray(x.host, x.__dlpack_device__()[1])
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    return cupy


@pytest.fixture
def no_cupy(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # `import cupy` fails


@pytest.fixture
def operands():
    rng = np.random.default_rng(8)
    return rng.standard_normal((M, K)), rng.standard_normal((K, N)), rng.standard_normal((M, N))


def _refusal(a, b, c=None) -> str:
    with pytest.raises(InputError) as caught:
        hpcmm.matmul(MPI.COMM_SELF, a, b, c, m=M, n=N, k=K)
    return str(caught.value)


def test_a_host_tensor_is_shared_through_dlpack_and_receives_the_product(operands):
    a, b, c0 = operands
    c = c0.copy()
    got = hpcmm.matmul(MPI.COMM_SELF, HostTensor(a), HostTensor(b), HostTensor(c), m=M, n=N, k=K)
    assert isinstance(got, HostTensor) and got.data is c
    assert np.allclose(c, a @ b, rtol=1e-12, atol=0)
    operand = view("B", HostTensor(b))
    assert operand.name == "B" and operand.on_device is False and operand.device is None
    assert np.shares_memory(operand.array, b)
    assert view("A", a).on_device is False and view("A", a).array is a


@pytest.mark.parametrize("half", ["__dlpack__", "__dlpack_device__"], ids=["export_only", "device_only"])
def test_half_of_dlpack_is_not_dlpack(operands, half):
    a, b, _ = operands
    odd = type("HalfTensor", (), {half: getattr(HostTensor, half), "__init__": HostTensor.__init__})(a)
    assert _refusal(odd, b) == (f"operand A is {_kind(odd)}: expected a numpy or cupy array, or an array offering "
                                "DLPack or __cuda_array_interface__")


def test_an_array_of_no_accepted_kind_is_named(operands):
    a, b, _ = operands
    assert _refusal(a, [[1.0] * N] * K) == ("operand B is a builtins.list: expected a numpy or cupy array, or an "
                                            "array offering DLPack or __cuda_array_interface__")


@pytest.mark.parametrize("device_type", [2, 3, 13], ids=["cuda", "cuda_host", "cuda_managed"])
def test_dlpack_cuda_memory_needs_cupy(operands, no_cupy, device_type):
    """Said as it is: not as a producer that refuses to share (the import's error is caught as no other)."""
    a, b, _ = operands
    x = DlpackOn(b, device_type)
    refusal = _refusal(a, x)
    assert refusal.startswith(f"operand B is {_kind(x)}, and cupy does not import here (") and "DLPack" not in refusal


def test_cuda_array_interface_needs_cupy(operands, no_cupy):
    a, b, _ = operands
    x = CudaOnly(a)
    assert _refusal(x, b).startswith(f"operand A is {_kind(x)}, and cupy does not import here (")


def test_dlpack_memory_of_another_kind_is_refused(operands):
    a, b, c = operands
    x = DlpackOn(c.copy(), 4)
    assert _refusal(a, b, x) == f"operand C ({_kind(x)}) lives on DLPack device type 4: expected host or CUDA memory"


def test_a_producer_that_refuses_to_share_is_named(operands):
    a, b, _ = operands

    class Locked(HostTensor):
        def __dlpack__(self, **kwargs):
            raise BufferError("the tensor is locked")

    x = Locked(a)
    assert _refusal(x, b) == f"operand A ({_kind(x)}) cannot be shared through DLPack: the tensor is locked"


@pytest.mark.parametrize("make", [DeviceArray, CudaOnly, lambda h: DlpackOn(h, 2), lambda h: DlpackOn(h, 13)],
                         ids=["cupy", "cuda_array_interface", "dlpack_cuda", "dlpack_managed"])
def test_device_operands_are_refused_by_a_host_plan_with_their_gpu(operands, stand_in_cupy, make):
    a, b, c = operands
    assert _refusal(a, b, make(c.copy())) == (f"operand C lives on GPU {GPU}: this plan computes on the host "
                                              "(pass host arrays, or plan on the GPU)")
    operand = view("C", make(c.copy()))
    assert operand.name == "C" and operand.on_device is True and operand.device == GPU
    assert isinstance(operand.array, DeviceArray) and np.array_equal(operand.array.get(), c)


def test_a_device_operand_must_sit_on_the_ranks_gpu(operands, stand_in_cupy):
    a, _, _ = operands
    operand = view("A", DeviceArray(a, gpu=1))
    check(operand, (M, K), np.dtype(np.float64), 1)  # its own GPU: taken
    with pytest.raises(InputError) as caught:
        check(operand, (M, K), np.dtype(np.float64), 0)
    assert str(caught.value) == "operand A lives on GPU 1: this rank computes on GPU 0"


def test_an_operand_of_another_type_is_named_with_both_types(operands):
    a, b, _ = operands
    assert _refusal(a, b.astype(np.float32)) == "operand B of dtype float32: the plan multiplies float64"


def test_read_only_a_and_b_are_taken(operands):
    a, b, _ = operands
    a.flags.writeable = b.flags.writeable = False
    got = hpcmm.matmul(MPI.COMM_SELF, a, b, m=M, n=N, k=K)
    assert np.allclose(got, a @ b, rtol=1e-12, atol=0)


def test_check_takes_a_read_only_operand_unless_told_it_is_written(operands):
    a, _, _ = operands
    a.flags.writeable = False
    check(view("A", a), (M, K), np.dtype(np.float64), None)
    with pytest.raises(InputError, match="^operand A is read-only: C is written in place$"):
        check(view("A", a), (M, K), np.dtype(np.float64), None, writable=True)


def test_a_device_block_is_gathered_to_the_host(operands):
    _, _, c = operands
    whole = hpcmm.gather(MPI.COMM_SELF, Layout.grid(M, N, K, (1, 1)), DeviceArray(c))
    assert isinstance(whole, np.ndarray) and np.array_equal(whole, c)
