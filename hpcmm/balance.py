"""Rank weights: each rank's share of the machine, for blocks that follow it.

Launch: ``mpiexec -n 3 python -m hpcmm --balance share`` on a node of 2 GPUs.

Three modes (``--balance``):

``share`` (the default)
    A rank's share of its device: a GPU shared by two ranks gives each half
    the weight of a GPU's only rank, ``1 / (ranks on the device)``.  Ranks
    without a GPU share their host's CPU the same way.  Needs no timing, and
    is exact for ranks on GPUs of one model.
``measured``
    A short GEMM timing on every rank, all ranks at once so that ranks on a
    shared GPU compete as they will in the run; the weights follow the rates.
    Balances GPUs of different models, and what sharing really gives (under
    MPS two ranks on one GPU may together do more than one).
``none``
    Equal weights: equal blocks, as without balancing.

Worked example: 3 ranks on 2 GPUs, ranks 0 and 2 on GPU 0 (node-local rank
``i`` takes GPU ``i % 2``).  ``share`` gives weights ½, 1, ½; on a 3 × 1 grid
rank 1 then gets half of the rows and ranks 0 and 2 a quarter each, so both
GPUs have half the work.  ``measured`` with rates 26, 52, 26 TFLOP/s gives the
same weights.

The pure functions (:func:`share_weights`, :func:`measured_weights`,
:func:`weights_for`) take what every rank reported; :func:`gemm_rate` times
one rank; :func:`gather_balance` is the collective that joins them.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections import Counter
from collections.abc import Hashable, Sequence
from typing import NamedTuple

import numpy as np

from .errors import collective
from .summary import product_flops

__all__ = [
    "DEFAULT_MODE",
    "MODES",
    "Balance",
    "Device",
    "device_of",
    "equal_weights",
    "gather_balance",
    "gemm_rate",
    "measured_weights",
    "ranks_per_device",
    "share_weights",
    "weights_for",
]

#: Values of ``--balance``.
MODES = ("share", "measured", "none")
#: The mode used when none is given.
DEFAULT_MODE = "share"


class Device(NamedTuple):
    """What a rank computes on: a GPU of a host, or the host's CPU (``index`` is ``None``)."""

    host: str
    index: int | None = None
    uuid: str = ""

    @property
    def key(self) -> tuple[str, str]:
        """Ranks with equal keys share the device.

        The UUID when known: with per-rank ``CUDA_VISIBLE_DEVICES`` one GPU may
        have different indices in different ranks.
        """
        if self.index is None:
            return (self.host, "cpu")
        return (self.host, self.uuid or f"gpu{self.index}")

    @property
    def label(self) -> str:
        return f"the CPU of {self.host}" if self.index is None else f"GPU {self.index} of {self.host}"


def device_of(backend, host: str) -> Device:
    """The :class:`Device` of a backend (``GpuBackend`` or ``CpuBackend``) on ``host``."""
    if not backend.on_gpu:
        return Device(host)
    facts = backend.describe()
    return Device(host, int(facts.get("gpu_index", backend.device_id)), str(facts.get("gpu_uuid", "")))


def _keys(devices: Sequence[Hashable]) -> list[Hashable]:
    return [d.key if isinstance(d, Device) else d for d in devices]


def ranks_per_device(devices: Sequence[Hashable]) -> tuple[int, ...]:
    """For each rank, how many ranks share its device (``devices[i]``: rank ``i``'s device).

    Examples
    --------
    >>> ranks_per_device(["gpu0", "gpu1", "gpu0"])
    (2, 1, 2)
    """
    keys = _keys(devices)
    counts = Counter(keys)
    return tuple(counts[k] for k in keys)


def share_weights(devices: Sequence[Hashable]) -> tuple[float, ...]:
    """Each rank's share of its device: ``1 / (ranks on it)``.

    Examples
    --------
    >>> share_weights(["gpu0", "gpu1", "gpu0"])
    (0.5, 1.0, 0.5)
    """
    if not devices:
        raise ValueError("no devices given")
    return tuple(1.0 / count for count in ranks_per_device(devices))


def measured_weights(rates: Sequence[float]) -> tuple[float, ...]:
    """Weights from measured GEMM rates: each rank's rate over the fastest rank's.

    Raises
    ------
    ValueError
        For a rate that is not finite and positive, naming the rank.

    Examples
    --------
    >>> measured_weights([26e12, 52e12, 26e12])
    (0.5, 1.0, 0.5)
    """
    values = [float(r) for r in rates]
    if not values:
        raise ValueError("no GEMM rates given")
    for rank, rate in enumerate(values):
        if not (math.isfinite(rate) and rate > 0):
            raise ValueError(f"rank {rank} measured a GEMM rate of {rate} flop/s; cannot weigh it")
    fastest = max(values)
    return tuple(rate / fastest for rate in values)


def equal_weights(size: int) -> tuple[float, ...]:
    """``size`` weights of 1: equal blocks."""
    if size < 1:
        raise ValueError(f"{size} ranks: need at least one")
    return (1.0,) * size


def weights_for(mode: str, devices: Sequence[Hashable], rates: Sequence[float] | None = None) -> tuple[float, ...]:
    """The weights of ``mode`` for ranks on ``devices`` (and their measured ``rates``).

    Examples
    --------
    >>> weights_for("share", ["a", "b", "a"])
    (0.5, 1.0, 0.5)
    >>> weights_for("none", ["a", "b", "a"])
    (1.0, 1.0, 1.0)
    """
    if mode == "share":
        return share_weights(devices)
    if mode == "measured":
        if rates is None:
            raise ValueError("--balance measured needs the measured GEMM rates")
        if len(rates) != len(devices):
            raise ValueError(f"{len(rates)} GEMM rates for {len(devices)} ranks")
        return measured_weights(rates)
    if mode == "none":
        return equal_weights(len(devices))
    raise ValueError(f"--balance={mode!r}: expected one of {', '.join(MODES)}")


def gemm_rate(backend, dtype: str, size: int = 2048, repeats: int = 4, rounds: int = 3,
              tf32: bool = False, seed: int = 0) -> float:
    """This rank's GEMM rate in flop/s: the median of ``rounds`` timings of ``repeats`` products.

    ``size × size`` operands of random data in the run's element type and
    storage orders (A column-major, B and C row-major), one warm-up product
    first.  Times with the backend's events on its compute stream, so on a
    GPU the figure is what the device gave this rank, other ranks' kernels on
    the same GPU included.  About 0.3 ms per float64 product of 2048 on an
    H200, 3 × 32 MiB of memory.

    Parameters
    ----------
    backend : hpcmm.backend.Backend
        This rank's backend.
    dtype : str
        Element type of the run.
    size, repeats, rounds : int
        Operand size and how many products each of how many timings runs.
    tf32 : bool
        Whether the run's float32 products use TF32.
    seed : int
        Seed of the random operands.
    """
    if size < 1 or repeats < 1 or rounds < 1:
        raise ValueError(f"GEMM timing needs positive size, repeats and rounds, not {size}, {repeats}, {rounds}")
    rng = np.random.default_rng(seed)
    a = backend.from_host(np.asfortranarray(rng.standard_normal((size, size)).astype(dtype)), order="F")
    b = backend.from_host(rng.standard_normal((size, size)).astype(dtype), order="C")
    c = backend.empty((size, size), dtype, order="C")
    backend.gemm(a, b, c, accumulate=False, tf32=tf32)  # first call loads kernels, sets up the handle
    backend.synchronize()
    flops = product_flops(size, size, size, dtype) * repeats
    rates = []
    for _ in range(rounds):
        start = backend.event(backend.compute_stream)
        for _ in range(repeats):
            backend.gemm(a, b, c, accumulate=False, tf32=tf32)
        stop = backend.event(backend.compute_stream)
        backend.event_synchronize(stop)
        seconds = backend.elapsed(start, stop)
        rates.append(flops / seconds if seconds > 0 else math.inf)
    del a, b, c
    return float(statistics.median(rates))


@dataclasses.dataclass(frozen=True)
class Balance:
    """Every rank's weight, and what it came from (the same on every rank).

    Attributes
    ----------
    mode : str
        One of :data:`MODES`.
    weights : tuple of float
        One per rank of the communicator, in rank order.
    devices : tuple of Device
        Each rank's device.
    ranks_per_device : tuple of int
        For each rank, how many ranks share its device.
    rates : tuple of float or None
        Measured GEMM rates in flop/s (``measured`` only).
    """

    mode: str
    weights: tuple[float, ...]
    devices: tuple[Device, ...]
    ranks_per_device: tuple[int, ...]
    rates: tuple[float, ...] | None = None

    @property
    def shared(self) -> bool:
        """Whether any device holds more than one rank."""
        return max(self.ranks_per_device) > 1


def gather_balance(comm, mode: str, backend, host: str, dtype: str, tf32: bool = False,
                   size: int | None = None) -> Balance:
    """Collective over ``comm``: every rank's device (and rate), and the weights of ``mode``.

    With ``measured`` all ranks start the timing together (a barrier), so
    ranks that share a GPU share it while they are timed; ``size`` is the
    operands' order (default 2048 on a GPU, where a product takes about a
    third of a millisecond, and 256 on a CPU).  A failure on any rank (out of
    memory for the operands, a bad mode) raises the same error on every rank.
    """
    if size is None:
        size = 2048 if backend.on_gpu else 256
    if mode not in MODES:
        raise ValueError(f"--balance={mode!r}: expected one of {', '.join(MODES)}")
    devices = tuple(comm.allgather(device_of(backend, host)))
    rates = None
    if mode == "measured":
        comm.Barrier()
        with collective(comm):
            rate = gemm_rate(backend, dtype, size=size, tf32=tf32)
        rates = tuple(comm.allgather(rate))
    with collective(comm):  # same inputs everywhere, so the same verdict; kept collective all the same
        weights = weights_for(mode, devices, rates)
    return Balance(mode, weights, devices, ranks_per_device(devices), rates)
