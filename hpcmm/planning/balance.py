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
``product``
    The rate each rank reaches in whole products: untimed products with the
    ``share`` blocks for at least 0.25 s after one warm-up, each rank's flops
    over its GEMM time, then the blocks follow those rates (:func:`product_rate`).  Sees
    what a GEMM timing does not: the turns of time-sliced contexts, three
    MPS clients against two, the smaller GEMMs of a smaller block.
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
import time
from collections import Counter
from collections.abc import Hashable, Sequence
from typing import NamedTuple

import numpy as np

from ..config import BALANCE_MODES, DEFAULT_BALANCE
from ..dtypes import numpy_dtype
from ..errors import collective
from ..dtypes import product_flops

__all__ = [
    "DEFAULT_MODE",
    "MODES",
    "Balance",
    "Device",
    "device_of",
    "ranks_on_my_device",
    "equal_weights",
    "gather_balance",
    "gemm_rate",
    "measured_weights",
    "mode_for",
    "product_rate",
    "ranks_per_device",
    "share_weights",
    "weights_for",
]

#: Values of ``--balance``, and the mode used when none is given (defined in :mod:`hpcmm.config`).
MODES, DEFAULT_MODE = BALANCE_MODES, DEFAULT_BALANCE


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


def ranks_on_my_device(comm, backend, host: str) -> int:
    """Collective over ``comm``: how many of its ranks (this one included) share this rank's device.

    The device is told by :func:`device_of` (its UUID where the GPU reports one), so ranks that see
    one GPU under different indices count together.
    """
    return ranks_per_device(comm.allgather(device_of(backend, host)))[comm.Get_rank()]


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
    if mode in ("share", "dynamic"):  # dynamic: each rank starts on its share, then takes tiles of others
        return share_weights(devices)
    if mode == "measured":
        if rates is None:
            raise ValueError("--balance measured needs the measured GEMM rates")
        if len(rates) != len(devices):
            raise ValueError(f"{len(rates)} GEMM rates for {len(devices)} ranks")
        return measured_weights(rates)
    if mode == "product":  # the first product runs with the share weights; its rates give the next ones
        return share_weights(devices) if rates is None else weights_for("measured", devices, rates)
    if mode == "none":
        return equal_weights(len(devices))
    if mode == "auto":
        raise ValueError("--balance auto: the planner turns it into a mode (mode_for) before any weights")
    raise ValueError(f"--balance={mode!r}: expected one of {', '.join(MODES)}")


def mode_for(asked: str, *, nodes: int, on_gpu: bool, sliced: bool, summa: bool) -> str:
    """The mode that ``auto`` stands for; any other mode stays as asked.

    ``dynamic`` where the ranks are on one node and some GPU is shared by several of them without
    MPS (``sliced``: they take turns): there it measured ahead of every static mode, and ``share``
    elsewhere: under MPS it measured ahead or behind by case, and a GPU per rank, CPUs, several nodes
    and 2.5D are not measured ahead (docs/performance.md, "Balance").

    >>> mode_for("auto", nodes=1, on_gpu=True, sliced=True, summa=True)
    'dynamic'
    >>> mode_for("auto", nodes=1, on_gpu=True, sliced=False, summa=True), mode_for("none", nodes=1,
    ...     on_gpu=True, sliced=True, summa=True)
    ('share', 'none')
    """
    if asked != "auto":
        return asked
    return "dynamic" if nodes == 1 and on_gpu and sliced and summa else "share"


def product_rate(flops: float, gemm_seconds: float) -> float:
    """A rank's rate in a product (``--balance product``): its flops over the time its GEMMs took.

    The GEMM time, not the product's: a rank that waits for a slow rank's
    panel is not slow itself.  On a time-sliced GPU a GEMM's span includes the
    other contexts' turns, so the rate is what the rank gets while they work.
    NaN where the rank did no work (an empty block): it cannot be weighed.

    Examples
    --------
    >>> product_rate(2e12, 0.5)
    4000000000000.0
    """
    if flops <= 0 or not gemm_seconds > 0:
        return float("nan")
    return float(flops) / float(gemm_seconds)


def gemm_rate(backend, dtype: str, size: int = 2048, window: float = 0.25, batch: int = 2,
              tf32: bool = False, seed: int = 0, clock=time.perf_counter) -> float:
    """This rank's GEMM throughput in flop/s: products completed per wall-clock second.

    ``size × size`` operands of random data in the run's element type and
    storage orders (A column-major, B and C row-major), one warm-up product
    first; then batches of ``batch`` products, each batch waited for, until
    at least ``window`` seconds have passed.  The rate is the flops of the
    completed products over the wall-clock time they took.

    Why wall clock over a long window, not device events around a few
    products: ranks that share a GPU without MPS take turns on it in time
    slices of milliseconds, and a timing shorter than a slice sees the whole
    GPU.  On 2 × H200 with 3 ranks (two on GPU 0, no MPS), 4 float64
    products of 2048 timed by events (about 1.2 ms) gave weights 0.96, 0.99
    and 1.0, where the run's own steps showed each sharing rank getting about
    0.44 of a GPU.  When every rank starts together (a barrier) and measures
    for at least ``window`` seconds, each rank's window overlaps all the
    others', so a rate is what the rank gets while the others work too.

    Parameters
    ----------
    backend : hpcmm.execution.backend.Backend
        This rank's backend.
    dtype : str
        Element type of the run.
    size : int
        Operand order.
    window : float
        Least seconds of products to count (about 0.25 s at start-up).
    batch : int
        Products queued between waits; a rank's window ends at most one batch late.
    tf32 : bool
        Whether the run's float32 products use TF32.
    seed : int
        Seed of the random operands.
    clock : callable
        Seconds (``time.perf_counter``; tests pass their own).
    """
    if size < 1 or batch < 1 or not window > 0:
        raise ValueError(f"GEMM timing needs positive size, window and batch, not {size}, {window}, {batch}")
    rng = np.random.default_rng(seed)
    dtype = numpy_dtype(dtype)
    a = backend.from_host(np.asfortranarray(rng.standard_normal((size, size)).astype(dtype)), order="F")
    b = backend.from_host(rng.standard_normal((size, size)).astype(dtype), order="C")
    c = backend.empty((size, size), dtype, order="C")
    # the first call loads kernels, sets up the handle and plans the shape (hpcmm.execution.gemm_library): untimed
    backend.gemm(a, b, c, accumulate=False, tf32=tf32)
    backend.synchronize()
    done = 0
    start = clock()
    while True:
        for _ in range(batch):
            backend.gemm(a, b, c, accumulate=False, tf32=tf32)
        backend.stream_synchronize(backend.compute_stream)
        done += batch
        seconds = clock() - start
        if seconds >= window:
            break
    backend.forget_gemm_plans()  # a plan holds the operands it last ran on
    del a, b, c
    return product_flops(size, size, size, dtype) * done / seconds


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
        Measured rates in flop/s: the GEMM timing's (``measured``) or the
        untimed product's (``product``, once it ran).
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
                   size: int | None = None, devices=None) -> Balance:
    """Collective over ``comm``: every rank's device (and rate), and the weights of ``mode``.

    With ``measured`` all ranks start the timing together (a barrier), so
    ranks that share a GPU share it while they are timed; ``size`` is the
    operands' order (default 2048 on a GPU, where a product takes about a
    third of a millisecond, and 256 on a CPU); every rank counts products for
    at least a quarter of a second (:func:`gemm_rate`).  A failure on any rank (out of
    memory for the operands, a bad mode) raises the same error on every rank.  ``devices``: every
    rank's :func:`device_of`, where the caller gathered them already.
    """
    if size is None:
        size = 2048 if backend.on_gpu else 256
    if mode not in MODES:
        raise ValueError(f"--balance={mode!r}: expected one of {', '.join(MODES)}")
    devices = tuple(comm.allgather(device_of(backend, host)) if devices is None else devices)
    rates = None
    if mode == "measured":
        comm.Barrier()
        with collective(comm):
            rate = gemm_rate(backend, dtype, size=size, tf32=tf32)
        rates = tuple(comm.allgather(rate))
    with collective(comm):  # same inputs everywhere, so the same verdict; kept collective all the same
        weights = weights_for(mode, devices, rates)
    return Balance(mode, weights, devices, ranks_per_device(devices), rates)
