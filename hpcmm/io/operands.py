"""The caller's arrays as numpy or cupy arrays, checked against what the plan expects.

Accepted: numpy and cupy arrays, and anything offering
``__cuda_array_interface__`` (a CUDA array, e.g. a torch tensor on the GPU)
or DLPack (``__dlpack__``, e.g. a torch tensor on the CPU).  The array is
viewed, not copied: what :class:`hpcmm.Matmul` writes into such a view of C
lands in the caller's own tensor.  Any memory order is taken: operands are
copied into hpcmm's blocks (:meth:`hpcmm.Matmul.empty` hands out those blocks
for callers who want no copy).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..errors import InputError

__all__ = ["Operand", "apply_op", "check", "to_host", "view"]

# DLPack device types (dlpack.h): the host, and memory a CUDA device can read.
_DL_CPU, _DL_CUDA, _DL_CUDA_HOST, _DL_CUDA_MANAGED = 1, 2, 3, 13


@dataclasses.dataclass
class Operand:
    """A caller's array seen as ``array`` (numpy or cupy), and where it lives."""

    name: str
    array: object
    on_device: bool
    device: int | None  # the CUDA device of a device array


def _cupy(name: str, kind: str):
    try:
        import cupy  # noqa: PLC0415 - only for device operands
    except ImportError as exc:
        raise InputError(f"operand {name} is {kind}, and cupy does not import here ({exc})") from None
    return cupy


def view(name: str, x) -> Operand:
    """``x`` as a numpy or cupy array without a copy.

    Raises
    ------
    InputError
        ``x`` is none of the accepted kinds, or its producer refuses to share it.
    """
    kind = f"a {type(x).__module__}.{type(x).__name__}"
    if isinstance(x, np.ndarray):
        return Operand(name, x, False, None)
    if type(x).__module__.startswith("cupy"):
        return Operand(name, x, True, int(x.device.id))
    if hasattr(x, "__cuda_array_interface__"):
        cupy = _cupy(name, kind)
        array = cupy.asarray(x)
        return Operand(name, array, True, int(array.device.id))
    if hasattr(x, "__dlpack__") and hasattr(x, "__dlpack_device__"):
        device_type, device_id = x.__dlpack_device__()
        try:
            if int(device_type) == _DL_CPU:
                return Operand(name, np.from_dlpack(x), False, None)
            if int(device_type) in (_DL_CUDA, _DL_CUDA_HOST, _DL_CUDA_MANAGED):
                array = _cupy(name, kind).from_dlpack(x)
                return Operand(name, array, True, int(device_id))
        except InputError:  # cupy does not import (an InputError is a ValueError): said as it is
            raise
        except (TypeError, BufferError, RuntimeError, ValueError) as exc:
            raise InputError(f"operand {name} ({kind}) cannot be shared through DLPack: {exc}") from None
        raise InputError(f"operand {name} ({kind}) lives on DLPack device type {int(device_type)}: "
                         f"expected host or CUDA memory")
    raise InputError(f"operand {name} is {kind}: expected a numpy or cupy array, or an array offering "
                     f"DLPack or __cuda_array_interface__")


def check(operand: Operand, shape: tuple[int, int], dtype: np.dtype, device: int | None, *,
          writable: bool = False) -> None:
    """Raise :class:`InputError` unless ``operand`` has ``shape`` and ``dtype`` and sits where the plan computes.

    ``device`` is the rank's GPU (``None``: the plan computes on the host, where
    a device array cannot be read).  Host arrays are taken by GPU plans (copied
    in).
    """
    array, name = operand.array, operand.name
    if tuple(array.shape) != tuple(shape):
        raise InputError(f"operand {name} of shape {tuple(array.shape)}: this rank's block of {name} is "
                         f"{tuple(shape)} (plan.layout.ranges({name!r}, rank))")
    if np.dtype(array.dtype) != dtype:
        raise InputError(f"operand {name} of dtype {np.dtype(array.dtype).name}: the plan multiplies {dtype.name}")
    if operand.on_device:
        if device is None:
            raise InputError(f"operand {name} lives on GPU {operand.device}: this plan computes on the host "
                             f"(pass host arrays, or plan on the GPU)")
        if operand.device != device:
            raise InputError(f"operand {name} lives on GPU {operand.device}: this rank computes on GPU {device}")
    if writable and not operand.on_device and not array.flags.writeable:
        raise InputError(f"operand {name} is read-only: C is written in place")


def apply_op(x, op: str):
    """``op(x)`` for ``op`` in ``N``, ``T``, ``C``: a view where it can be one (the conjugate is a copy);
    ``C`` of a real type is its transpose, as in BLAS."""
    if op == "N":
        return x
    return x.T.conj() if op == "C" and x.dtype.kind == "c" else x.T


def to_host(x) -> np.ndarray:
    """``x`` on the host: a numpy array as it is, a device array copied there."""
    return x if isinstance(x, np.ndarray) else x.get()
