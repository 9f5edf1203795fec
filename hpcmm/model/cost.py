"""A cost model of hpcmm as built: the time of one product, without running it.

Pure (numpy and the plan's own geometry, no MPI): it takes the problem, the
grid, the placement of ranks on nodes, the panel and prefetch, and a
:class:`Machine`, and replays what :mod:`hpcmm.execution.engine` and
:mod:`hpcmm.execution.transport.channel` do, step by step, for every rank at once:

* the plan is :func:`hpcmm.planning.algorithms.summa_plan` itself (ramp included), on
  one node each rank's own (from :func:`hpcmm.planning.algorithms.own_start`, as the
  engine's ``own-first`` order: ``step_order="common"`` models the other), and
  the panel the engine's (:func:`hpcmm.planning.algorithms.auto_panel`, narrowed by
  :func:`hpcmm.planning.algorithms.panel_candidates` where its ring would not fit);
* the blocks of the run's default balance (``share``, :mod:`hpcmm.planning.arrangement`): where ranks share
  devices unevenly, each weighs 1 / the ranks on its device, on the grid and in the order
  :func:`hpcmm.geometry.layout.fit_grid` picks (2.5D layers: near-equal blocks, as the run takes them);
* the host loop of the engine: panels ``0 … prefetch-1`` fetched first, then
  per step the GEMM is queued and the fetch of step ``s + prefetch`` follows
  (it waits for GEMM ``s - 1``, which released its slot);
* per channel and step, every member's role: the root sends (or does nothing),
  a member on the root's node pulls over IPC (``ipc``/``shm``), the lowest
  member of every other node (the leader) receives through an MPI broadcast
  among {root, leaders} (``mpi`` or ``staged``), and the other members of that
  node pull from the leader's ring slot after the node's barrier;
* MPI transfers and barriers block the host, IPC pulls run on the
  communication stream; the compute stream waits on the panels' ready events;
  on a CPU everything blocks the host;
* the GEMM rate by local shape (a fitted curve per type, plus the pass over C
  that ``beta = 1`` costs; symmetric in m and n, so it does not see the C block's face that
  :mod:`hpcmm.planning.grid_orientation` turns by, except for the block shapes whose rate the description
  holds measured, ``GemmCurve.shapes``); a GPU shared by several ranks runs their GEMMs one after
  the other as they become ready (time-sliced, each at ``shared_device_efficiency`` of its rate; as
  clients of an MPS server, ``mps_device_efficiency``), so ranks whose GEMMs do not meet lose nothing,
  a copy of a time-sliced rank waits a turn (``shared_copy_us``) for each other rank of its GPU
  that has a GEMM pending meanwhile, and each round of a CUDA-aware broadcast one
  (``shared_mpi_us``) for each other rank of its GPU;
* links are shared: pulls from one source device share its port, broadcasts
  through one NIC share it, staged transfers share the host's MPI: its rate by message size
  (a chunk's), slowed by each other staged transfer at once (``staged_contention``), and its
  broadcast algorithm (a chain among 4 to 7 members, :func:`staged_chain`); the 2.5D layers of one
  host share it too.

Worked example: ``predict(Problem(8192, 8192, 8192, "float64"), ranks=2,
machine=builtin("h200x2"))`` gives a 1×2 grid (float64 on one node faces tall,
:mod:`hpcmm.planning.grid_orientation`), one A panel per step over IPC,
and a time just above the GEMM alone: each rank multiplies its own block first
(one whole step, no ramp) while the other block's panel arrives.

Beside SUMMA (``summa``) it predicts ``2.5d:C`` (k cut over C layers of every
node, partial C reduced over IPC at the end; built: :mod:`hpcmm.execution.layered`, and
``run --algo auto`` picks by this model) and a design not in the code,
``split-relay`` (a crossing panel cut into one piece per node member, each on
its own NIC, gathered in the node over IPC).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import datetime
import json
import math
import os
import re
import secrets
import stat
from pathlib import Path

import numpy as np

from ..planning.algorithms import auto_prefetch, panel_candidates, rank_plan, ring_depth
from ..errors import InputError
from ..planning.gemm_orders import gemm_order, scratch_slots
from ..planning.grid_orientation import facing, most_square, oriented
from ..geometry.layout import GPU_BLOCK_QUANTUM, Grid, Layout, fit_grid, padded
from ..dtypes import product_flops

__all__ = [
    "ALGOS", "BUILTIN", "GemmCurve", "Machine", "Prediction", "Problem", "builtin",
    "compute_dims", "fit_gemm_curve", "fit_link", "fit_staged", "load_machine", "predict", "staged_seconds",
]

#: Bytes per element; ``tf32`` is float32 on tensor cores, ``bfloat16`` a 2-byte type.
ITEMSIZE = {"float64": 8, "float32": 4, "tf32": 4, "float16": 2, "bfloat16": 2,
            "complex128": 16, "complex64": 8}
ALGOS = ("summa", "split-relay", "2.5d", "auto")
#: The machine description ``--machine`` names when it is not given (``model`` and ``run --algo auto``).
DEFAULT_MACHINE = "h200x2"
_SELF, _PULL, _LEADER, _FOLLOWER = 0, 1, 2, 3


@dataclasses.dataclass(frozen=True)
class GemmCurve:
    """Local GEMM time of one type on one device.

    ``t = launch + flops / (rate · m/(m+half_m) · n/(n+half_n) · w/(w+half_k))``
    plus the pass over C (see :meth:`Machine.gemm_seconds`).

    Attributes
    ----------
    tflops : float
        Rate of large products (TFLOP/s of one device).
    half_m, half_n, half_k : float
        The extent at which that dimension alone halves the rate.
    launch_us : float
        Fixed cost of one call.
    shapes : tuple of (m, n, w, share)
        Measured local shapes: C block m×n in steps of depth w ran at ``share`` of ``tflops``, the pass
        over C included.  Such a shape takes its measured rate instead of the curve's, which has one
        term per dimension and cannot tell a tall block from a wide one of the same area (on one H200,
        float64, 8192×4096 ran 11 % slower than 16384×2048, docs/scaling.md section 1).
    """

    tflops: float
    half_m: float = 128.0
    half_n: float = 128.0
    half_k: float = 64.0
    launch_us: float = 8.0
    unaligned: float = 1.0
    shapes: tuple = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "shapes", tuple(tuple(float(x) for x in row) for row in self.shapes))

    def measured_share(self, m, n, w):
        """The measured share of ``tflops`` for each (m, n, w), NaN where the shape was not measured."""
        share = np.full(np.broadcast(m, n, w).shape, np.nan)
        for sm, sn, sw, value in self.shapes:
            share = np.where((m == sm) & (n == sn) & (w == sw), value, share)
        return share

    def factor(self, m, n, itemsize: int):
        """Rate factor: cuBLAS runs slower when a leading dimension is not a multiple of 16 bytes."""
        a = max(1, 16 // itemsize)
        return np.where((np.asarray(m) % a == 0) & (np.asarray(n) % a == 0), 1.0, self.unaligned)


@dataclasses.dataclass(frozen=True)
class Machine:
    """What the model knows of a machine.  GB/s are 1e9 bytes per second, one direction.

    Attributes
    ----------
    name, description, source : str
        What it is and where its figures come from.
    device : str
        ``gpu`` (streams overlap transfers with GEMMs) or ``cpu`` (everything blocks).
    devices_per_node : int
        GPUs of a node (1 for a CPU host: its BLAS uses every core).
    hosts : int
        1 for a single machine (every rank on it, nodes only virtual); 0: as many as needed.
    memory_gib : float
        Memory of one device.
    memory_gbps : float
        Bytes read plus written per second by one device (the pass over C each step).
    gemm : dict of str to GemmCurve
        By type (``float64``, ``float32``, ``tf32``, ``float16``, ``bfloat16``, ``complex128``, ``complex64``).
    intra_gbps, intra_latency_us : float
        A pull between two devices of a node (``ipc``/``shm``); a device's port is
        shared by the pulls from it (and into it).
    local_gbps : float
        A copy inside one device (ranks that share a device).
    net_gbps, net_latency_us : float
        The ``mpi`` path between nodes, per NIC.
    nics_per_node : int
        NICs of a node; a rank uses NIC ``(local rank) % nics_per_node``.
    staged_gbps, staged_latency_us : float
        The host MPI's rate and latency inside one ``staged`` transfer (device → pinned host →
        MPI → device), its chunks' copies excluded: what one pair moves through the host.
    staged_gbps_by_mib : tuple of (float, float)
        ``(MiB, GB/s)``: ``staged_gbps`` by message size, as ``bench transport`` measured it
        (:func:`staged_rate`); empty: ``staged_gbps`` at every size.
    staged_contention : float
        How much each other staged transfer on the host at once slows one down: k transfers
        at once each move at ``1 / (1 + staged_contention · (k - 1))`` of the rate of one
        alone (the host's memory, cores and MPI progress), as ``bench transport`` measured
        with 2, 3 and 4 pairs at once; 0: not measured.
    staged_host_gbps : float
        What all staged transfers of one host move together at most: k transfers at once
        each get no more than ``staged_host_gbps / k`` (:func:`staged_rate`).
    staged_chunk_bytes : int
        Chunk of :class:`hpcmm.execution.transport.mpi.StagedBroadcast`: the copies of one chunk
        overlap the MPI transfer of the next, so a transfer costs the first chunk's copy
        to the host, the MPI time of all chunks, then the last chunk's copy to the device.
    host_copy_gbps : float
        A copy between a device and pinned host memory (either way).
    bcast_efficiency, staged_bcast_efficiency : float
        Share of the link rate a receiver gets in a broadcast among more than two
        (``mpi`` and ``staged``): 0.5 for scatter + allgather; an MPI that segments
        device buffers into small pieces gets less.
    shared_mpi_us : float
        Wait of one round of an ``mpi`` broadcast (``ceil(log2(members))`` rounds) per
        other rank that time-slices the device of a member: each round's device copy runs
        only in its context's turn, and the device computes nothing meanwhile.
    shared_copy_us : float or None
        Wait of a ``staged`` transfer's chunk copy, once per chunk for each other rank of its
        device with a GEMM pending (the copy runs in its context's turn, as an ``mpi`` round's
        does).  None: ``shared_mpi_us`` (descriptions from before the two were apart).
    cuda_aware : bool
        Whether the MPI takes device buffers (``mpi``) or hpcmm stages (``staged``).
    shared_device_efficiency : float
        Rate kept when several ranks time-slice one device.
    mps_device_efficiency : float
        Rate kept when several ranks share one device as clients of an MPS server (their kernels
        run side by side): 1.0 by the runs of docs/performance.md, where 3, 5 and 8 ranks on 2 GPUs
        under MPS ran at 101–107 % of 2 ranks.
    host_step_us : float
        Host time of one channel's fetch call (Python, MPI bookkeeping).
    accumulate_passes : float
        Passes over C of an accumulating GEMM (2 on GPUs: read and write; 4 with numpy's temporary).
    links_measured : str
        When its links were measured (ISO 8601, the ``created`` of the ``bench transport`` file):
        ``model check`` given several descriptions predicts each run with the one measured last
        before it (:func:`machine_for`).  Empty: not known.
    """

    name: str
    description: str = ""
    source: str = ""
    # The node and its devices.
    device: str = "gpu"
    devices_per_node: int = 1
    hosts: int = 0
    memory_gib: float = 80.0
    memory_gbps: float = 4000.0
    gemm: dict = dataclasses.field(default_factory=dict)
    # Inside a node: IPC pulls between devices, copies inside one.
    intra_gbps: float = 300.0
    intra_latency_us: float = 10.0
    local_gbps: float = 2000.0
    # Between nodes: the MPI on device buffers, per NIC.
    net_gbps: float = 25.0
    net_latency_us: float = 5.0
    nics_per_node: int = 1
    bcast_efficiency: float = 0.5
    # Between nodes through pinned host memory.
    staged_gbps: float = 10.0
    staged_latency_us: float = 50.0
    staged_host_gbps: float = 20.0
    staged_gbps_by_mib: tuple = ()
    staged_contention: float = 0.0
    staged_bcast_efficiency: float = 0.5
    staged_chunk_bytes: int = 32 << 20
    host_copy_gbps: float = 25.0
    # What the code itself costs, and what sharing a device costs.
    cuda_aware: bool = True
    shared_mpi_us: float = 0.0
    shared_copy_us: float | None = None
    shared_device_efficiency: float = 0.85
    mps_device_efficiency: float = 1.0
    host_step_us: float = 25.0
    accumulate_passes: float = 2.0
    links_measured: str = ""

    def __post_init__(self) -> None:
        curves = {k: (v if isinstance(v, GemmCurve) else GemmCurve(**v)) for k, v in self.gemm.items()}
        object.__setattr__(self, "gemm", curves)
        object.__setattr__(self, "staged_gbps_by_mib",
                           tuple((float(a), float(b)) for a, b in self.staged_gbps_by_mib))
        for name in ("staged_contention", "shared_mpi_us", "shared_copy_us"):
            if (getattr(self, name) or 0.0) < 0:
                raise InputError(f"machine {self.name}: {name}={getattr(self, name)} must not be negative")
        bad = [pair for pair in self.staged_gbps_by_mib if not (pair[0] > 0 and pair[1] > 0)]
        if bad:
            raise InputError(f"machine {self.name}: staged_gbps_by_mib has {bad[0]}: MiB and GB/s must be positive")
        for name in ("devices_per_node", "nics_per_node"):
            if getattr(self, name) < 1:
                raise InputError(f"machine {self.name}: {name}={getattr(self, name)} must be at least 1")
        for name in ("memory_gbps", "intra_gbps", "local_gbps", "net_gbps", "staged_gbps",
                     "staged_host_gbps", "host_copy_gbps", "staged_chunk_bytes", "shared_device_efficiency",
                     "mps_device_efficiency", "bcast_efficiency", "staged_bcast_efficiency"):
            if not getattr(self, name) > 0:
                raise InputError(f"machine {self.name}: {name}={getattr(self, name)} must be positive")
        if self.device not in ("gpu", "cpu"):
            raise InputError(f"machine {self.name}: device={self.device!r}: expected gpu or cpu")

    @property
    def copy_wait_us(self) -> float:
        """A staged chunk copy's wait per other busy context of its device (``shared_copy_us``)."""
        return self.shared_mpi_us if self.shared_copy_us is None else self.shared_copy_us

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2)

    def replace(self, **changes) -> "Machine":
        return dataclasses.replace(self, **changes)

    def curve(self, dtype: str) -> GemmCurve:
        if dtype not in self.gemm:
            raise InputError(f"machine {self.name} has no GEMM rate for {dtype} (has {', '.join(self.gemm)})")
        return self.gemm[dtype]

    def gemm_seconds(self, m, n, w, dtype: str, accumulate):
        """Seconds of ``C (+)= A·B`` with A m×w, B w×n on one device (arrays broadcast)."""
        c = self.curve(dtype)
        m, n, w = (np.asarray(x, dtype=float) for x in (m, n, w))
        flops = product_flops(m, n, w, dtype)
        eff = (m / (m + c.half_m)) * (n / (n + c.half_n)) * (w / (w + c.half_k)) * c.factor(m, n, ITEMSIZE[dtype])
        measured = c.measured_share(m, n, w)
        eff = np.where(np.isnan(measured), eff, measured)
        with np.errstate(divide="ignore", invalid="ignore"):
            compute = np.where(flops > 0, flops / (c.tflops * 1e12 * np.maximum(eff, 1e-300)),
                               0.0)
        passes = np.where(accumulate, self.accumulate_passes, 1.0)
        # a measured shape's rate has its passes over C in it
        memory = np.where(np.isnan(measured), passes * m * n * ITEMSIZE[dtype] / (self.memory_gbps * 1e9), 0.0)
        return np.where(m * n > 0, c.launch_us * 1e-6 + compute + memory, 0.0)


def _load_builtin() -> dict[str, dict]:
    """The descriptions shipped in ``hpcmm/model/machines/*.json``, by name (each names its sources)."""
    folder = Path(__file__).resolve().parent / "machines"
    found = {}
    for path in sorted(folder.glob("*.json")):
        with open(path, encoding="utf-8") as f:
            found[path.stem] = json.load(f)
    return found


#: Built-in descriptions (``--machine NAME``), from ``hpcmm/model/machines/NAME.json``.
BUILTIN: dict[str, dict] = _load_builtin()


def builtin(name: str) -> Machine:
    """A built-in description by name."""
    if name not in BUILTIN:
        raise InputError(f"--machine={name}: no such built-in machine (have {', '.join(sorted(BUILTIN))}) "
                         "and no such file")
    return Machine(**BUILTIN[name])


#: The longest file the model reads whole (a machine description, a saved one it replaces).
MOST_DESCRIPTION_BYTES = 16 << 20


def regular_file(flag: str, path: str) -> os.stat_result:
    """:func:`hpcmm.config.regular_file` with the message naming ``flag`` (``--transport=PATH``,
    ``model check: PATH``)."""
    from ..config import regular_file as check  # noqa: PLC0415 - the model imports config only on use

    return check(path, f"{flag}={path}" if flag.startswith("-") else f"{flag}: {path}")


def _read_json(flag: str, path: str, what: str):
    """The JSON value in the regular file ``path`` (at most :data:`MOST_DESCRIPTION_BYTES`)."""
    regular_file(flag, path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        try:
            data = os.read(fd, MOST_DESCRIPTION_BYTES + 1)
        finally:
            os.close(fd)
    except OSError as exc:
        raise InputError(f"{flag}={path}: cannot read {what} ({exc.strerror or exc})") from None
    if len(data) > MOST_DESCRIPTION_BYTES:
        raise InputError(f"{flag}={path}: more than {MOST_DESCRIPTION_BYTES >> 20} MiB, not {what}")
    try:
        return json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError) as exc:
        raise InputError(f"{flag}={path}: cannot read {what} ({' '.join(str(exc).split())})") from None


def _number(value, *, whole: bool = False) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        finite = math.isfinite(value)
    except OverflowError:  # an integer past a float's range: no number the model can compute with
        return False
    return isinstance(value, int) if whole else finite


def _rows_of_numbers(value, width: int) -> bool:
    return isinstance(value, list) and all(
        isinstance(row, list) and len(row) == width and all(_number(x) for x in row) for row in value)


def _description_problem(data: dict) -> str | None:
    """What is wrong with the fields of a machine description read from JSON, or ``None``."""
    if not isinstance(data.get("name"), str):
        return "name: expected a text"
    for f in dataclasses.fields(Machine):
        if f.name not in data:
            continue
        value, kind = data[f.name], str(f.type)
        ok = {"str": isinstance(value, str), "int": _number(value, whole=True), "float": _number(value),
              "float | None": value is None or _number(value), "bool": isinstance(value, bool),
              "tuple": _rows_of_numbers(value, 2)}.get(kind)
        if f.name == "gemm":
            ok = isinstance(value, dict)
            for dtype, curve in value.items() if ok else ():
                if dtype not in ITEMSIZE or not isinstance(curve, dict) or not _number(curve.get("tflops")) \
                        or not curve["tflops"] > 0:
                    return f"gemm.{dtype}: expected a type of {', '.join(ITEMSIZE)} and its curve with tflops > 0"
                fields = {g.name for g in dataclasses.fields(GemmCurve)}
                bad = sorted(set(curve) - fields)
                if bad:
                    return f"gemm.{dtype}: unknown field(s) {', '.join(bad)}"
                for name, x in curve.items():
                    if not (_rows_of_numbers(x, 4) if name == "shapes" else _number(x)):
                        return f"gemm.{dtype}.{name}={json.dumps(x)[:60]}: expected " + (
                            "rows of 4 numbers" if name == "shapes" else "a finite number")
        if ok is False:
            expected = {"str": "a text", "int": "an integer", "float": "a finite number", "bool": "true or false",
                        "float | None": "a finite number or null", "tuple": "rows of 2 numbers",
                        "dict": "an object"}.get(kind, kind)
            return f"{f.name}={json.dumps(value)[:60]}: expected {expected}"
    return None


def load_machine(spec: str) -> Machine:
    """``spec`` is a JSON file (a saved :class:`Machine`) or a built-in name.

    A file is bad input (:class:`InputError`, one line) unless it is a regular file
    holding a JSON object whose fields have the types of :class:`Machine`'s, and the
    model can predict a small product with it.
    """
    if not (os.path.lexists(spec) or spec.endswith(".json") or os.sep in spec):
        return builtin(spec)
    data = _read_json("--machine", spec, "a machine description")
    if not isinstance(data, dict):
        raise InputError(f"--machine={spec}: a machine description is a JSON object, not {type(data).__name__}")
    known = {f.name for f in dataclasses.fields(Machine)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise InputError(f"--machine={spec}: unknown field(s) {', '.join(unknown)}")
    wrong = _description_problem(data)
    if wrong is not None:
        raise InputError(f"--machine={spec}: {wrong}")
    try:
        machine = Machine(**data)
    except (TypeError, ValueError, ArithmeticError) as exc:
        raise InputError(f"--machine={spec}: {exc}") from None
    try:  # what the fields' types cannot say (a rate of 0 a division meets): a small product tells
        for dtype in machine.gemm:
            predict(Problem(512, 512, 512, dtype), 2, machine)
    except InputError:
        pass  # a setting the real prediction reports, naming its option
    except Exception as exc:  # noqa: BLE001 - a description the model cannot use is bad input
        raise InputError(f"--machine={spec}: the model cannot use it ({type(exc).__name__}: "
                         f"{' '.join(str(exc).split())})") from None
    return machine


# -- the problem and the placement ------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Problem:
    """C (m×n) = A (m×k) · B (k×n) of ``dtype`` (``tf32``: float32 on tensor cores)."""

    m: int
    n: int
    k: int
    dtype: str = "float64"

    def __post_init__(self) -> None:
        if self.dtype not in ITEMSIZE:
            raise InputError(f"--dtype={self.dtype!r}: expected one of {', '.join(ITEMSIZE)}")
        for name in ("m", "n", "k"):
            if getattr(self, name) < 1:
                raise InputError(f"--{name}={getattr(self, name)}: must be at least 1")

    @property
    def itemsize(self) -> int:
        return ITEMSIZE[self.dtype]

    @property
    def flops(self) -> float:
        return product_flops(self.m, self.n, self.k, self.dtype)


def compute_dims(size: int) -> tuple[int, int]:
    """The most square ``rows × cols`` with rows ≥ cols, as ``MPI.Compute_dims(size, 2)``.

    >>> compute_dims(8), compute_dims(12), compute_dims(7)
    ((4, 2), (4, 3), (7, 1))
    """
    return most_square(size)


@dataclasses.dataclass(frozen=True)
class Placement:
    """Where each rank sits: host, virtual node, device, NIC (arrays over ranks)."""

    host: np.ndarray
    vnode: np.ndarray
    device: np.ndarray  # unique id over the whole job
    nic: np.ndarray  # unique id over the whole job
    sharers: np.ndarray  # ranks on this rank's device
    ranks_per_host: int
    ranks_per_node: int


def _default_ranks_per_host(ranks: int, machine: Machine) -> int:
    """The ranks of a host where none are given: every rank on a one-host machine, else one a device."""
    return ranks if machine.hosts == 1 else min(ranks, machine.devices_per_node)


def place(ranks: int, machine: Machine, ranks_per_node: int | None = None,
          ranks_per_host: int | None = None) -> Placement:
    """Ranks fill hosts in order; ``ranks_per_node`` cuts each host into virtual nodes (``--ranks-per-node``).

    A rank's device is its host-local rank modulo the devices (as the backend
    picks it), its NIC the same modulo the NICs.
    """
    if ranks_per_host is None:
        ranks_per_host = _default_ranks_per_host(ranks, machine)
    if ranks_per_host < 1:
        raise InputError(f"--ranks-per-host={ranks_per_host}: must be at least 1")
    if machine.hosts and -(-ranks // ranks_per_host) > machine.hosts:
        raise InputError(f"{ranks} ranks at {ranks_per_host} per host need more than the "
                         f"{machine.hosts} host(s) of {machine.name}")
    r = np.arange(ranks)
    host, local = r // ranks_per_host, r % ranks_per_host
    rpn = ranks_per_node or ranks_per_host
    group = local // rpn
    groups_per_host = -(-ranks_per_host // rpn)
    vnode = host * groups_per_host + group
    _, vnode = np.unique(vnode, return_inverse=True)
    device = host * machine.devices_per_node + local % machine.devices_per_node
    nic = host * machine.nics_per_node + local % machine.nics_per_node
    counts = np.bincount(device)
    return Placement(host, vnode, device, nic, counts[device], ranks_per_host, rpn)


# -- channels: every member's role, decided once per root --------------------------------


@dataclasses.dataclass
class _Roles:
    role: np.ndarray  # _SELF, _PULL, _LEADER, _FOLLOWER per rank
    source: np.ndarray  # rank it pulls from (root or leader), or itself
    comm: np.ndarray  # id of the rank's communicator (row or column)
    intra: np.ndarray  # id of (communicator, vnode): the node barrier's group
    sync: np.ndarray  # bool: the channel spans nodes and the node has several members
    bcast: np.ndarray  # bool: takes part in the broadcast among {root, leaders}
    bcast_size: np.ndarray  # members of that broadcast
    node_members: np.ndarray  # members of my vnode in this communicator


def _roles(grid: Grid, pl: Placement, operand: str, root: int) -> _Roles:
    """Roles in every row (A) or column (B) communicator for the panel owned by ``root``."""
    P = grid.size
    ranks = np.arange(P)
    rows, cols = ranks // grid.cols, ranks % grid.cols
    if operand == "A":  # row communicators, members by column, root = column a_root
        comm, comm_members = rows, lambda c: c * grid.cols + np.arange(grid.cols)
    else:  # column communicators, members by row, root = row b_root
        comm, comm_members = cols, lambda c: np.arange(grid.rows) * grid.cols + c
    role = np.full(P, _SELF)
    source = ranks.copy()
    sync = np.zeros(P, bool)
    bcast = np.zeros(P, bool)
    bcast_size = np.zeros(P, int)
    node_members = np.zeros(P, int)
    for c in np.unique(comm):
        members = comm_members(c)
        vn = pl.vnode[members]
        rr = members[root]
        multi = len(np.unique(vn)) > 1
        leaders = {v: members[vn == v].min() for v in np.unique(vn)}
        participants = [rr] + [leaders[v] for v in leaders if v != pl.vnode[rr]]
        for mbr, v in zip(members, vn):
            node_members[mbr] = int((vn == v).sum())
            sync[mbr] = multi and node_members[mbr] > 1
            if mbr == rr:
                role[mbr] = _SELF
            elif v == pl.vnode[rr]:
                role[mbr], source[mbr] = _PULL, rr
            elif mbr == leaders[v]:
                role[mbr], source[mbr] = _LEADER, rr
            else:
                role[mbr], source[mbr] = _FOLLOWER, leaders[v]
            if multi and mbr in participants and len(participants) > 1:
                bcast[mbr], bcast_size[mbr] = True, len(participants)
    intra = comm * (pl.vnode.max() + 1) + pl.vnode
    return _Roles(role, source, comm, intra, sync, bcast, bcast_size, node_members)


def _group_max(values: np.ndarray, groups: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """For every rank, the max of ``values`` over the masked ranks of its group (-inf if none)."""
    out = np.full(groups.max() + 1 if groups.size else 1, -np.inf)
    np.maximum.at(out, groups[mask], values[mask])
    return out[groups]


def _bcast_seconds(nbytes, size, gbps, latency_us, efficiency):
    """MPI broadcast: one message between two; among more, each receiver gets ``efficiency`` of the rate."""
    size = np.maximum(size, 2)
    factor = np.where(size <= 2, 1.0, 1.0 / efficiency)
    return np.ceil(np.log2(size)) * latency_us * 1e-6 + factor * nbytes / (gbps * 1e9)


def staged_copy_seconds(nbytes, machine: Machine):
    """``(fill, drain)`` of one staged transfer of ``nbytes``: the first chunk's copy to the host
    before the host MPI starts, the last chunk's copy to the device after it ends.

    The copies of the chunks between overlap the MPI transfer of the chunk before
    (:class:`hpcmm.execution.transport.mpi.StagedBroadcast` keeps two pinned buffers per side).

    >>> m = Machine("x", host_copy_gbps=32.0, staged_chunk_bytes=32 << 20)
    >>> [round(float(x) * 1e3, 3) for x in staged_copy_seconds(80 << 20, m)]  # 32 MiB first, 16 MiB last
    [1.049, 0.524]
    """
    nbytes = np.asarray(nbytes, dtype=float)
    chunk = float(machine.staged_chunk_bytes)
    first = np.minimum(nbytes, chunk)
    last = nbytes - np.maximum(np.ceil(nbytes / chunk) - 1, 0) * chunk
    rate = machine.host_copy_gbps * 1e9
    return first / rate, last / rate


#: Open MPI's fixed broadcast decision (``coll/tuned``, 4.1) for 4 to 7 members and 1 MiB or more:
#: a chain, in one piece.  The staged path broadcasts host buffers, so this is the decision it gets.
STAGED_CHAIN_MEMBERS = (4, 7)
STAGED_CHAIN_BYTES = 1 << 20


def staged_chain(members, nbytes):
    """Whether a staged broadcast of ``nbytes`` among ``members`` ranks (root included) runs as a chain.

    :class:`hpcmm.execution.transport.mpi.StagedBroadcast` calls the host MPI's ``Bcast`` once per
    chunk, and the host MPI picks its algorithm by members and bytes: Open MPI 4.1 passes a
    message of 1 MiB or more among 4 to 7 ranks along a chain, whole: the root sends to the
    next member, which sends on once it holds the message.  The last of B members has it
    after B - 1 transfers one after the other, where a tree would have moved them at once.

    >>> staged_chain(np.array([2, 4, 4, 8]), np.array([16e6, 16e6, 0.5e6, 16e6])).tolist()
    [False, True, False, False]
    """
    lo, hi = STAGED_CHAIN_MEMBERS
    members = np.asarray(members)
    return (members >= lo) & (members <= hi) & (np.asarray(nbytes, dtype=float) >= STAGED_CHAIN_BYTES)


def _chain_ends(ro, chain, ready, size, gbps, latency_us, chunk_bytes):
    """When each member of a chained broadcast (:func:`staged_chain`) leaves the MPI call.

    The chain runs from the root through the other members in their order in the broadcast's
    communicator.  Member j receives the first chunk once member j - 1 holds it and member j
    has arrived (``ready``; for the root: its first chunk on the host), one hop at the
    sender's ``gbps``; the later chunks follow it down the chain, one broadcast each, so
    member j holds the whole message their time after its first chunk.  The root leaves once
    the next member holds the message, a member inside the chain once it has passed the
    message on, the last one once it has it.
    """
    out = np.full(len(chain), np.nan)
    for c in np.unique(ro.comm[chain]):
        group = np.flatnonzero(chain & (ro.comm == c))
        root = group[ro.role[group] == _SELF]
        order = [*root, *(r for r in group if r not in root)]
        rate = gbps[order[0]] * 1e9
        first = min(size[order[0]], float(chunk_bytes))
        hop, rest = latency_us * 1e-6 + first / rate, (size[order[0]] - first) / rate
        held = ready[order[0]]
        received = []
        for member in order[1:]:
            held = max(held, ready[member]) + hop
            received.append(held + rest)
        for j, member in enumerate(order):
            out[member] = received[min(j, len(received) - 1)]
    return out


def staged_rate(nbytes, machine: Machine, concurrent=1):
    """The host MPI's rate (GB/s) inside one staged transfer of ``nbytes`` while ``concurrent``
    staged transfers (this one included) run on the host.

    One alone moves at ``staged_gbps_by_mib`` at the size of its messages (interpolated in log size,
    held at its ends): a chunk's (``staged_chunk_bytes``) where the transfer is longer, since the host
    MPI moves one chunk at a time; ``staged_gbps`` where the description has no rates by size.  k at
    once each at
    ``1 / (1 + staged_contention · (k - 1))`` of that, and no more than ``staged_host_gbps / k``.

    >>> m = Machine("x", staged_gbps=7.0, staged_gbps_by_mib=((4, 8.0), (64, 6.0)),
    ...             staged_contention=0.25, staged_host_gbps=12.0)
    >>> staged_rate(np.array([1, 16, 128]) * 2.0**20, m).tolist()   # 128 MiB: chunks of 32 MiB
    [8.0, 7.0, 6.5]
    >>> staged_rate(16 * 2.0**20, m, concurrent=np.array([2, 3])).tolist()
    [5.6, 4.0]
    """
    nbytes = np.asarray(nbytes, dtype=float)
    k = np.maximum(np.asarray(concurrent, dtype=float), 1.0)
    if machine.staged_gbps_by_mib:
        mib, gbps = np.array(machine.staged_gbps_by_mib, dtype=float).T
        # the host MPI moves one chunk at a time: its rate is that of a chunk's size
        message = np.clip(nbytes, 1.0, float(machine.staged_chunk_bytes))
        alone = np.interp(np.log2(message / 2.0**20), np.log2(mib), gbps)
    else:
        alone = np.full(nbytes.shape, machine.staged_gbps)
    return np.minimum(alone / (1.0 + machine.staged_contention * (k - 1.0)), machine.staged_host_gbps / k)


def staged_seconds(nbytes, machine: Machine, concurrent=1):
    """One staged transfer between two ranks, end to end (what ``bench transport`` times), while
    ``concurrent`` staged transfers (this one included) share the host:
    latency + first chunk's copy + ``nbytes / staged_rate(nbytes, concurrent)`` + last chunk's copy."""
    fill, drain = staged_copy_seconds(nbytes, machine)
    gbps = staged_rate(nbytes, machine, concurrent)
    return machine.staged_latency_us * 1e-6 + fill + np.asarray(nbytes, float) / (gbps * 1e9) + drain


# -- the simulation ---------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Prediction:
    """What the model says of one product.

    Attributes
    ----------
    seconds : float
        One product (the slowest rank, as ``/summary/seconds``).
    tflops : float
    gemm_seconds : float
        GEMM time of the busiest rank.
    exposed_seconds : float
        Time the compute stream of the worst rank waited for panels (as ``exposed_comm_seconds``).
    extra_seconds : float
        Work after the SUMMA loop (the reduction of ``2.5d``), 0 for ``summa``.
    grid, panel, prefetch, steps, algo :
        What was modelled.
    bytes_by_path : dict
        Bytes received per product, by path (``ipc``, ``shm``, ``mpi``, ``staged``).
    nic_bytes_max, nic_bytes_mean : float
        Bytes through the busiest NIC and the mean over NICs (the leaders' NICs carry more).
    nic_seconds_max : float
        The busiest NIC's bytes at its rate: the floor the network sets.
    notes : tuple of str
    """

    seconds: float
    tflops: float
    gemm_seconds: float
    exposed_seconds: float
    extra_seconds: float
    grid: str
    panel: int
    prefetch: int
    steps: int
    algo: str
    ranks: int
    ranks_per_node: int
    ranks_per_host: int
    bytes_by_path: dict
    nic_bytes_max: float
    nic_bytes_mean: float
    nic_seconds_max: float
    notes: tuple = ()

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def predict(problem: Problem, ranks: int, machine: Machine, *, ranks_per_node: int | None = None,
            ranks_per_host: int | None = None, grid: tuple[int, int] | None = None,
            panel: int | None = None, prefetch: int | None = None, algo: str = "summa",
            cuda_aware: bool | None = None, step_order: str = "auto", balance: str = "share",
            orientation: str = "auto", mps: bool = False) -> Prediction:
    """Predict one product.  See the module docstring for what is modelled.

    Parameters
    ----------
    problem : Problem
    ranks : int
    machine : Machine
    ranks_per_node : int, optional
        Virtual node size (``--ranks-per-node``); default: the ranks of a host.
    ranks_per_host : int, optional
        Ranks on one physical host; default: one per device (all of them on a one-host machine).
    grid : (rows, cols), optional
        Default :func:`compute_dims`, turned as the run turns it (``orientation``).
    panel : int, optional
        Default: the engine's choice (:func:`hpcmm.planning.algorithms.auto_panel`, or a
        narrower :func:`~hpcmm.planning.algorithms.panel_candidates` width where memory is short).
    prefetch : int, optional
        Default: the run's (:func:`hpcmm.planning.algorithms.auto_prefetch`: 2 for ``tf32`` on a GPU machine, else 1).
    algo : str
        ``summa`` (hpcmm as built), ``split-relay``, ``2.5d`` / ``2.5d:C``, or ``auto`` (the fastest).
    cuda_aware : bool, optional
        Default: the machine's.
    step_order : str
        ``auto``: as the engine, each rank in its own order where the job is on one
        (virtual) node; ``common``: every rank in the same order (``HPCMM_STEP_ORDER``).
    balance : str
        ``share`` (the run's default: weighted blocks where ranks share devices
        unevenly) or ``none`` (equal blocks).
    orientation : str
        ``HPCMM_GRID_ORIENTATION``: which way the default grid faces (:mod:`hpcmm.planning.grid_orientation`;
        ``auto``: by type, as the run).
    mps : bool
        Whether ranks that share a device run as clients of an MPS server (the machine's
        ``mps_device_efficiency``) or time-slice it (``shared_device_efficiency``).
    """
    if balance not in ("share", "none"):
        raise InputError(f"balance={balance!r}: the model lays out share or none")
    if ranks < 1:
        raise InputError(f"--ranks={ranks}: must be at least 1")
    if prefetch is None:
        prefetch = auto_prefetch(problem.dtype, on_gpu=machine.device == "gpu")
    if prefetch < 0:
        raise InputError(f"--prefetch={prefetch}: must be at least 0")
    if algo == "auto":
        options = [predict(problem, ranks, machine, ranks_per_node=ranks_per_node, ranks_per_host=ranks_per_host,
                           grid=grid, panel=panel, prefetch=prefetch, algo=a, cuda_aware=cuda_aware,
                           step_order=step_order, balance=balance, orientation=orientation, mps=mps)
                   for a in _auto_candidates(ranks, machine, ranks_per_node, ranks_per_host)]
        feasible = [p for p in options if math.isfinite(p.seconds)]
        return min(feasible or options, key=lambda p: p.seconds)
    if algo.startswith("2.5d"):
        return _predict_25d(problem, ranks, machine, algo, ranks_per_node, ranks_per_host, panel, prefetch,
                            cuda_aware, step_order, orientation, mps)
    if algo not in ("summa", "split-relay"):
        raise InputError(f"--algo={algo!r}: expected one of summa, split-relay, 2.5d, 2.5d:C, auto")
    return _simulate(problem, ranks, machine, ranks_per_node, ranks_per_host, grid, panel, prefetch, algo,
                     machine.cuda_aware if cuda_aware is None else cuda_aware, step_order=step_order,
                     balance=balance, orientation=orientation, mps=mps)


def _auto_candidates(ranks, machine, ranks_per_node, ranks_per_host):
    per_host = ranks_per_host or _default_ranks_per_host(ranks, machine)
    node = ranks_per_node or per_host
    out = ["summa", "split-relay"]
    out += [f"2.5d:{c}" for c in (2, 4, 8) if node % c == 0 and per_host % c == 0 and ranks % c == 0]
    return out


def _plans(layout: Layout, panel: int, prefetch: int, own_first: bool) -> list[list]:
    """Every rank's plan, as the engine makes it (:func:`~hpcmm.planning.algorithms.rank_plan`); in the common
    order the one plan serves every rank."""
    ranks = layout.grid.size
    if not own_first:
        return [rank_plan(layout, 0, panel, prefetch, own_order=False)] * ranks
    return [rank_plan(layout, rank, panel, prefetch, own_order=True) for rank in range(ranks)]


def _merged_roles(roles: dict, operand: str, roots: np.ndarray) -> _Roles:
    """Each rank's role for its own step's root (``-1``: no step, the rank's own, nothing moves)."""
    present = [int(r) for r in np.unique(roots) if r >= 0]
    if len(present) == 1 and (roots >= 0).all():
        return roles[(operand, present[0])]
    base = roles[(operand, present[0])]
    ranks = np.arange(len(roots))
    merged = _Roles(np.full(len(roots), _SELF), ranks.copy(), base.comm, base.intra, np.zeros(len(roots), bool),
                    np.zeros(len(roots), bool), np.zeros(len(roots), int), base.node_members)
    for root in present:
        mine, ro = roots == root, roles[(operand, root)]
        for field in ("role", "source", "sync", "bcast", "bcast_size"):
            getattr(merged, field)[mine] = getattr(ro, field)[mine]
    return merged


def _shared_layout(problem, grid: Grid, pl: Placement, on_gpu: bool, fixed_shape: bool):
    """The run's default balance (``share``, :mod:`hpcmm.planning.arrangement`): each rank weighs 1 / the ranks on
    its device; where the weights differ, the blocks follow them on the grid and in the rank order that
    :func:`~hpcmm.geometry.layout.fit_grid` picks, aligned as on GPUs.  Returns the layout and the placement in
    grid order."""
    weights = tuple(float(w) for w in 1.0 / pl.sharers)
    if len(set(weights)) == 1:
        return Layout(problem.m, problem.n, problem.k, grid), pl
    fit = fit_grid(problem.m, problem.n, problem.k, weights, preferred=grid, fixed_shape=fixed_shape)
    order = np.array(fit.order)
    placed = dataclasses.replace(pl, host=pl.host[order], vnode=pl.vnode[order], device=pl.device[order],
                                 nic=pl.nic[order], sharers=pl.sharers[order])
    layout = Layout(problem.m, problem.n, problem.k, fit.grid, weights=fit.weights,
                    quantum=GPU_BLOCK_QUANTUM if on_gpu else 1)
    return layout, placed


def _simulate(problem, ranks, machine, ranks_per_node, ranks_per_host, grid_shape, panel, prefetch, algo,
              cuda_aware, notes=(), step_order="auto", balance="share", orientation="auto", mps=False,
              host_layers=1.0, duty=None):
    on_gpu = machine.device == "gpu"
    isz = problem.itemsize
    pl = place(ranks, machine, ranks_per_node, ranks_per_host)
    nodes = len(np.unique(pl.vnode))  # (virtual) nodes; the balance below reorders ranks, not nodes
    sharers = int(pl.sharers.max())  # the most ranks on one device (the balance reorders them too)
    shared = on_gpu and sharers > 1  # the grid's face and the panel rule both ask
    face = facing(orientation, problem.dtype, on_gpu=on_gpu, nodes=nodes, shared=shared, ranks=ranks, n=problem.n)
    grid = Grid(*grid_shape) if grid_shape else oriented(*compute_dims(ranks), face)
    if grid.size != ranks:
        raise InputError(f"--grid={grid}: {grid.size} ranks, not {ranks}")
    layout = Layout(problem.m, problem.n, problem.k, grid)
    if balance == "share":
        layout, pl = _shared_layout(problem, grid, pl, on_gpu, fixed_shape=grid_shape is not None)
        grid = layout.grid
    if panel is None:  # the engine's choice: the default width, or the widest narrower one that fits
        widths = panel_candidates([layout], isz, on_gpu, shared=shared)
        panel = next((w for w in widths if _fits(problem, grid, w, prefetch, machine, sharers)), widths[-1])
    if panel > problem.k:
        raise InputError(f"--panel={panel}: wider than k={problem.k}")
    # The engine's own-first order needs every panel to be a pull: one (virtual) node.
    own_first = step_order == "auto" and ranks > 1 and nodes == 1
    plans = _plans(layout, panel, prefetch, own_first)
    P, S = ranks, max(len(plan) for plan in plans)
    # (ranks, steps): each rank's step f, padded past the end of a shorter plan (width 0, root -1);
    # every step is at least one column wide, so the rank has a step f where its width is not 0.
    def per_step(field: str, pad: int) -> np.ndarray:
        return np.array([[getattr(plan[f], field) if f < len(plan) else pad for f in range(S)]
                         for plan in plans]).reshape(P, S)

    widths, a_roots, b_roots = per_step("width", 0), per_step("a_root", -1), per_step("b_root", -1)
    has = widths > 0
    ranks_arr = np.arange(P)
    prow, pcol = ranks_arr // grid.cols, ranks_arr % grid.cols
    m_loc = np.array([layout.extent(layout.rows(r)) for r in prow])
    n_loc = np.array([layout.extent(layout.cols(c)) for c in pcol])
    staged = on_gpu and not cuda_aware
    path_net = "staged" if staged else "mpi"
    path_intra = "ipc" if on_gpu else "shm"

    roles = {("A", int(r)): _roles(grid, pl, "A", int(r)) for r in np.unique(a_roots[has])}
    roles.update({("B", int(r)): _roles(grid, pl, "B", int(r)) for r in np.unique(b_roots[has])})
    ring = prefetch + 1
    ring_ch = {op: max(ring, 2) if any((roles[key].bcast.any()) for key in roles if key[0] == op) else ring
               for op in ("A", "B")}

    # A GPU shared by several ranks runs their GEMMs one after the other (_device_queue), each at the
    # rate sharing keeps: ranks whose GEMMs do not meet in time lose nothing to each other.  The cores
    # of a CPU host shared by several ranks are shared all the time (each rank's BLAS runs meanwhile).
    share = np.where(pl.sharers > 1, (1.0 if on_gpu else pl.sharers) / _sharing_efficiency(machine, mps), 1.0)
    turns = 0.0 if mps else 1.0  # MPS clients of one device run side by side: no context waits its turn
    gemm = np.stack([np.where(has[:, i], machine.gemm_seconds(m_loc, n_loc, widths[:, i], problem.dtype, i > 0), 0.0)
                     * share for i in range(S)], axis=1) if S else np.zeros((P, 0))
    device_free = np.zeros(pl.device.max() + 1)
    gstart = np.full((P, S), np.nan)  # when each GEMM could start (its panels there): from then its rank
    # has work on the device, and a copy of another rank of that device waits for its turn

    host = np.zeros(P)
    stream = np.zeros(P)  # the communication stream (== host on a CPU)
    gend = np.full((P, S), np.nan)
    ready = {op: np.zeros((P, S)) for op in ("A", "B")}
    relay_end = {op: np.zeros((P, ring_ch[op])) for op in ("A", "B")}
    bytes_by_path: dict[str, float] = {}
    nic_bytes = np.zeros(pl.nic.max() + 1)
    step_us = machine.host_step_us * 1e-6 if P > 1 else 0.0
    in_mpi = np.zeros(P)  # each rank's time inside staged broadcasts

    def pull_seconds(nbytes, pulling, src):
        """Pulls of this phase: a device's port is shared by the pulls from (and into) it."""
        same = pl.device[src] == pl.device
        dev_src, dev_dst = pl.device[src], pl.device
        out_count = np.bincount(dev_src[pulling], minlength=pl.device.max() + 1)
        in_count = np.bincount(dev_dst[pulling], minlength=pl.device.max() + 1)
        crowd = np.maximum(np.maximum(out_count[dev_src], in_count[dev_dst]), 1)
        gbps = np.where(same, machine.local_gbps, machine.intra_gbps) / crowd
        return machine.intra_latency_us * 1e-6 + nbytes / (gbps * 1e9)

    def host_crowd(movers):
        """For every rank, the staged transfers on its host at once: the ``movers`` there, on each of the
        2.5D layers that share it (``host_layers``)."""
        return np.bincount(pl.host[movers], minlength=pl.host.max() + 1)[pl.host] * host_layers

    def net_gbps(receivers, nbytes):
        """Per-rank rate of this phase's network transfers of ``nbytes``: the receivers share a NIC
        (or, staged, the host)."""
        if staged:
            return staged_rate(nbytes, machine, host_crowd(receivers))
        crowd = np.bincount(pl.nic[receivers], minlength=pl.nic.max() + 1)[pl.nic]
        return machine.net_gbps / np.maximum(crowd, 1)

    def fetch(f: int) -> None:
        nonlocal host, stream, in_mpi
        free = gend[:, f - prefetch - 1] if f - prefetch - 1 >= 0 else np.zeros(P)
        for op, roots, rows in (("A", a_roots[:, f], m_loc), ("B", b_roots[:, f], n_loc)):
            ro = _merged_roles(roles, op, roots)
            nbytes = (widths[:, f] * rows * isz).astype(float)
            slot = f % ring_ch[op]
            t = host + np.where(has[:, f], step_us, 0.0)
            new_host, new_stream, rdy = t.copy(), stream.copy(), np.zeros(P)
            pulls = ro.role == _PULL
            split = algo == "split-relay" and ro.bcast.any()
            # same node as the root: pull from its block
            if pulls.any():
                start = np.maximum.reduce([t, stream, free]) if on_gpu else t
                end = start + pull_seconds(nbytes, pulls, ro.source)
                new_stream = np.where(pulls, end, new_stream)
                rdy = np.where(pulls, end, rdy)
                if not on_gpu:
                    new_host = np.where(pulls, end, new_host)
                bytes_by_path[path_intra] = bytes_by_path.get(path_intra, 0.0) + nbytes[pulls].sum()
            leaders = ro.role == _LEADER
            followers = ro.role == _FOLLOWER
            if split:
                _split_relay(ro, nbytes, t, free, new_host, new_stream, rdy, nic_bytes, bytes_by_path,
                             path_net, path_intra, machine=machine, pl=pl, on_gpu=on_gpu, staged=staged,
                             stream=stream, net_gbps=net_gbps)
            elif ro.bcast.any():
                # leaders host-wait their slot and their peers' last pulls from it; the root is ready at once
                peers_done = _group_max(relay_end[op][:, slot], ro.intra, followers)
                arrive = np.where(leaders, np.maximum.reduce([t, free, np.maximum(peers_done, 0)]), t)
                if staged:
                    arrive = np.where(ro.bcast, np.maximum(arrive, stream), arrive)
                gbps = net_gbps(leaders, _group_max(nbytes, ro.comm, ro.bcast))
                if not staged and on_gpu:
                    # A CUDA-aware MPI moves device buffers between two ranks of one device as a
                    # copy inside that device, not through a NIC (virtual nodes on one host).
                    one_device = (_group_max(pl.device.astype(float), ro.comm, ro.bcast)
                                  == -_group_max(-pl.device.astype(float), ro.comm, ro.bcast))
                    gbps = np.where(one_device, machine.local_gbps, gbps)
                slowest = -_group_max(-gbps, ro.comm, ro.bcast)
                lat = machine.staged_latency_us if staged else machine.net_latency_us
                eff = machine.staged_bcast_efficiency if staged else machine.bcast_efficiency
                start = _group_max(arrive, ro.comm, ro.bcast)
                # the panel's bytes: the root's (receivers all get the same panel)
                size = _group_max(nbytes, ro.comm, ro.bcast)
                end = start + _bcast_seconds(size, ro.bcast_size, slowest, lat, eff)
                if staged:
                    # StagedBroadcast: the root copies the first chunk to the host before MPI
                    # starts; the later chunks' copies overlap the MPI transfer of the one before.
                    fill, drain = staged_copy_seconds(size, machine)
                    end = end + fill
                    chain = ro.bcast & staged_chain(ro.bcast_size, size)
                    if chain.any():
                        # One hop at a time along each chain: the host carries one transfer per
                        # chain (and the receivers of every other broadcast of the phase).
                        movers = (chain & (ro.role == _SELF)) | (leaders & ~chain)
                        hop = staged_rate(size, machine, host_crowd(movers))
                        first = np.where(ro.role == _SELF, arrive + fill, arrive)
                        end = np.where(chain, _chain_ends(ro, chain, first, size, hop, lat,
                                                          machine.staged_chunk_bytes), end)
                    if on_gpu:
                        # Every chunk, root and receivers wait on the host for a copy of their
                        # device; time-sliced by S ranks, that copy runs in its context's turn,
                        # after the other S - 1 contexts' work (as a CUDA-aware round does below).
                        # Only the contexts with a GEMM pending meanwhile take a turn before it.
                        busy = _busy_others(pl.device, gstart, gend, start, end)
                        others = _group_max(busy, ro.comm, ro.bcast) * turns
                        chunks = np.ceil(size / float(machine.staged_chunk_bytes))
                        end = end + chunks * others * machine.copy_wait_us * 1e-6
                if on_gpu and not staged:
                    # Each round of the tree is a device copy the host waits for.  On a device
                    # time-sliced by S ranks it runs only in its context's turn, after the other
                    # S - 1 contexts' work; the device runs one context at a time, so the GEMMs
                    # of the ranks in the broadcast lose that time too.
                    others = (_group_max(pl.sharers.astype(float), ro.comm, ro.bcast) - 1) * turns
                    rounds = np.ceil(np.log2(np.maximum(ro.bcast_size, 2)))
                    lost = rounds * others * machine.shared_mpi_us * 1e-6
                    end = end + lost
                    # (once per device: its ranks' GEMMs run one after the other, each carries its share)
                    gemm[:, f] += np.where(ro.bcast, lost / pl.sharers, 0.0)
                new_host = np.where(ro.bcast, end, new_host)
                if staged:
                    in_mpi += np.where(ro.bcast, end - start, 0.0)
                done = np.maximum(end, stream) if on_gpu else end
                if staged:
                    # the receiver's last chunk goes to the device on its stream, after the host is free
                    done = done + drain
                rdy = np.where(leaders, done, rdy)
                new_stream = np.where(leaders, done, new_stream)
                bytes_by_path[path_net] = bytes_by_path.get(path_net, 0.0) + nbytes[leaders].sum()
                np.add.at(nic_bytes, pl.nic[leaders], nbytes[leaders])
            if ro.sync.any() and not split:
                # the node barrier of channels that span nodes: followers arrive before their pull
                arrive_b = np.where(followers, t, new_host)
                release = _group_max(arrive_b, ro.intra, ro.sync) + machine.intra_latency_us * 1e-6
                new_host = np.where(ro.sync, np.maximum(new_host, release), new_host)
                if followers.any():
                    lead_ready = rdy[ro.source]
                    start = np.maximum.reduce([new_host, new_stream, free, lead_ready]) if on_gpu \
                        else np.maximum(new_host, lead_ready)
                    end = start + pull_seconds(nbytes, followers, ro.source)
                    new_stream = np.where(followers, end, new_stream)
                    rdy = np.where(followers, end, rdy)
                    relay_end[op][:, slot] = np.where(followers, end, relay_end[op][:, slot])
                    if not on_gpu:
                        new_host = np.where(followers, end, new_host)
                    bytes_by_path[path_intra] = bytes_by_path.get(path_intra, 0.0) + nbytes[followers].sum()
            host = new_host
            stream = new_stream if on_gpu else new_host
            ready[op][:, f] = rdy

    wait = np.zeros((P, S))
    # Ranks outside a phase's groups compute with ±inf placeholders that np.where discards.
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        for f in range(min(prefetch, S)):
            fetch(f)
        previous = np.zeros(P)
        for s in range(S):
            if prefetch == 0:
                fetch(s)
            start = np.maximum.reduce([host, previous, ready["A"][:, s], ready["B"][:, s]])
            # past the end of its plan a rank has no GEMM: it ended with its last one
            start = np.where(has[:, s], start, previous)
            gstart[:, s] = np.where(has[:, s], start, np.nan)
            if shared:
                gend[:, s] = np.where(has[:, s], _device_queue(start, gemm[:, s], pl.device, device_free), previous)
            else:  # one rank per device (or a CPU host's cores, shared all the time): each GEMM when it is ready
                gend[:, s] = start + gemm[:, s]
            wait[:, s] = start - previous
            previous = gend[:, s]
            if not on_gpu:
                host = gend[:, s].copy()
                stream = host
            if prefetch and s + prefetch < S:
                fetch(s + prefetch)
    seconds = float(gend[:, -1].max()) if S else 0.0
    notes = list(notes)
    if not _fits(problem, grid, panel, prefetch, machine, sharers):
        # hpcmm refuses such a problem before it allocates (choices.check_memory)
        notes.append(f"does not fit: {sharers} rank(s) per device need more than "
                     f"{machine.memory_gib:g} GiB")
        seconds = math.inf
    if duty is not None:  # the share of the product the busiest rank spends in staged transfers
        duty.append(float(in_mpi.max()) / seconds if 0 < seconds < math.inf else 0.0)
    nic_rate = machine.staged_gbps if staged else machine.net_gbps
    used = nic_bytes[nic_bytes > 0]
    return Prediction(
        seconds=seconds, tflops=problem.flops / seconds / 1e12 if 0 < seconds < math.inf else 0.0,
        gemm_seconds=float(np.nansum(gend - np.where(has, gstart, gend), axis=1).max()) if S else 0.0,
        exposed_seconds=float(wait.sum(axis=1).max()),
        extra_seconds=0.0, grid=str(grid), panel=int(panel), prefetch=prefetch, steps=S, algo=algo,
        ranks=P, ranks_per_node=pl.ranks_per_node, ranks_per_host=pl.ranks_per_host,
        bytes_by_path={k: float(v) for k, v in sorted(bytes_by_path.items()) if v},
        nic_bytes_max=float(nic_bytes.max()) if nic_bytes.size else 0.0,
        nic_bytes_mean=float(nic_bytes.mean()) if nic_bytes.size else 0.0,
        nic_seconds_max=float(used.max() / (nic_rate * 1e9)) if used.size else 0.0, notes=tuple(notes))


def _device_queue(ready, work, device, free):
    """When each rank's GEMM ends on a device that runs the GEMMs of its ranks one after the other.

    ``ready``: when each rank's GEMM could start; ``work``: its seconds on the device; ``free``
    (by device, updated in place): when each device ends the work queued before.  The GEMMs of a
    device start in the order they are ready (ties by rank).  A device of one rank starts each
    GEMM when it is ready: its previous one has ended by then.

    >>> free = np.zeros(1)
    >>> _device_queue(np.array([0.0, 0.5]), np.array([1.0, 1.0]), np.array([0, 0]), free).tolist()
    [1.0, 2.0]
    """
    end = np.empty(len(ready))
    for r in np.lexsort((np.arange(len(ready)), ready)):
        d = device[r]
        end[r] = max(ready[r], free[d]) + work[r]
        if work[r] > 0:
            free[d] = end[r]
    return end


def _busy_others(device, gstart, gend, lo, hi):
    """For every rank, how many other ranks of its device have a GEMM pending (ready, not yet ended)
    during ``[lo, hi]``, on average over that interval: the contexts a copy of its device waits for."""
    P = len(device)
    busy = np.zeros(P)
    span = np.maximum(hi - lo, 1e-12)
    for d in np.unique(device):
        ranks = np.flatnonzero(device == d)
        if len(ranks) < 2:
            continue
        a, b = np.nan_to_num(gstart[ranks], nan=np.inf), np.nan_to_num(gend[ranks], nan=-np.inf)
        for r in ranks:
            over = np.clip(np.minimum(hi[r], b) - np.maximum(lo[r], a), 0.0, None)
            total = over.sum(axis=1) / span[r]
            busy[r] = float(np.clip(total[ranks != r], 0.0, 1.0).sum())
    return busy


def _split_relay(ro, nbytes, t, free, new_host, new_stream, rdy, nic_bytes, bytes_by_path, path_net,
                 path_intra, *, machine, pl, on_gpu, staged, stream, net_gbps):
    """The split relay (a design, not in the code): piece j of a crossing panel travels from member j
    of the root's node to member j of every other node, on its own NIC; each node then gathers the
    pieces over IPC.  Updates the arrays in place."""
    remote = (ro.role == _LEADER) | (ro.role == _FOLLOWER)
    senders = ((ro.role == _SELF) | (ro.role == _PULL)) & (_group_max(ro.bcast_size.astype(float), ro.comm,
                                                                       ro.bcast) > 1)
    q = ro.node_members.astype(float)
    q_root = _group_max(np.where(ro.role == _SELF, q, 0.0), ro.comm, ro.role == _SELF)
    nodes = _group_max(ro.bcast_size.astype(float), ro.comm, ro.bcast)
    pieces = np.maximum(1.0, np.minimum(q, q_root))
    size = _group_max(nbytes, ro.comm, ro.role == _SELF)
    piece = size / pieces
    members = remote | senders
    arrive = np.where(remote, np.maximum(t, free), t)
    start = _group_max(arrive, ro.comm, members)
    # a sender other than the root first pulls its own piece from the root
    first = np.where(q_root > 1, machine.intra_latency_us * 1e-6 + piece / (machine.intra_gbps * 1e9), 0.0)
    gbps = -_group_max(-net_gbps(remote, piece), ro.comm, members)
    lat = machine.staged_latency_us if staged else machine.net_latency_us
    eff = machine.staged_bcast_efficiency if staged else machine.bcast_efficiency
    end = start + first + _bcast_seconds(piece, nodes, gbps, lat, eff)
    gather = np.where(q > 1, machine.intra_latency_us * 1e-6 + (q - 1) / q * size / (machine.intra_gbps * 1e9),
                      0.0)
    done = end + gather
    new_host[:] = np.where(members, end if on_gpu else np.where(remote, done, end), new_host)
    new_stream[:] = np.where(remote, np.maximum(done, stream) if on_gpu else done, new_stream)
    rdy[:] = np.where(remote, new_stream, rdy)
    bytes_by_path[path_net] = bytes_by_path.get(path_net, 0.0) + piece[remote].sum()
    bytes_by_path[path_intra] = bytes_by_path.get(path_intra, 0.0) + ((q - 1) / q * size)[remote].sum()
    np.add.at(nic_bytes, pl.nic[remote], piece[remote])


def memory_bytes(problem: Problem, grid: Grid, panel: int, ring: int, relayout: tuple[int, int] = (0, 0)) -> int:
    """Device bytes of the busiest rank: blocks, panel ring and re-layout scratch (``choices.memory_needed``'s rule).

    ``relayout``: the scratch slots of A's and B's panels where the GEMM takes
    them in the other order (the engine's ring, ``prefetch + 1``), else 0.
    """
    layout = Layout(problem.m, problem.n, problem.k, grid)
    m_loc = layout.extent(layout.rows(0))
    n_loc = layout.extent(layout.cols(0))
    k_a, k_b = layout.extent(layout.a_k(0)), layout.extent(layout.b_k(0))
    # Stored columns of A and rows of B and C are padded to 128 bytes (layout.padded), as the engine stores them.
    ld_a, ld_bc = padded(m_loc, problem.itemsize), padded(n_loc, problem.itemsize)
    blocks = ld_a * k_a + k_b * ld_bc + m_loc * ld_bc
    scratch = padded(panel, problem.itemsize) * (relayout[0] * m_loc + relayout[1] * n_loc)
    # Ring slots only for an operand whose channel has other members (choices.memory_needed).
    slots = ring * panel * (ld_a * (grid.cols > 1) + ld_bc * (grid.rows > 1))
    return (blocks + slots + scratch) * problem.itemsize


def _sharing_efficiency(machine: Machine, mps: bool) -> float:
    """The rate a device keeps for the ranks that share it: as MPS clients, or time-sliced."""
    return machine.mps_device_efficiency if mps else machine.shared_device_efficiency


def _fits(problem, grid, panel, prefetch, machine, sharers: int, extra: int = 0) -> bool:
    ring = ring_depth(prefetch, spans_nodes=True)  # the deepest a channel keeps
    # The GEMM orders of a GPU run of this type (tf32 re-lays its A panels out: gemm_orders).
    order = gemm_order("float32", tf32=True) if problem.dtype == "tf32" else gemm_order(problem.dtype)
    relayout = scratch_slots(order, prefetch + 1)
    need = (memory_bytes(problem, grid, panel, ring, relayout) + extra) * sharers
    return need <= machine.memory_gib * 2**30


def _layer_device_share(machine, sliced, ranks, c, ranks_per_node, per_host, rpn, mps=False) -> Machine:
    """The layer's machine with the GEMM rate its ranks really get.

    A layer is simulated on ``1/c`` of a node's devices; where a node has
    fewer devices than layers (several ranks per GPU, virtual nodes on one
    host) the layers share devices, and a layer rank shares its device with
    the ranks of the other layers too.  The GEMM rates are scaled by the
    layer's share over the real one (:func:`place` counts both).
    """
    def share(s: int) -> float:
        return s / _sharing_efficiency(machine, mps) if s > 1 else 1.0

    real = int(place(ranks, machine, ranks_per_node, per_host).sharers.max())
    layer = int(place(ranks // c, sliced, rpn, per_host // c).sharers.max())
    scale = share(layer) / share(real)
    if scale >= 1.0:
        return sliced
    return sliced.replace(gemm={k: dataclasses.replace(v, tflops=v.tflops * scale) for k, v in sliced.gemm.items()})


def _predict_25d(problem, ranks, machine, algo, ranks_per_node, ranks_per_host, panel, prefetch, cuda_aware,
                 step_order="auto", orientation="auto", mps=False):
    """2.5D with k cut over ``c`` layers inside each node (``run --algo 2.5d:C``, :mod:`hpcmm.execution.layered`).

    Each layer runs hpcmm's SUMMA on (m, n, k/c) over ranks/c ranks, using the
    node's devices and NICs of its layer; the c partial C blocks of a node are
    then reduced over IPC (a reduce-scatter: each device pulls (c-1)/c of its
    block from c-1 peers and adds).  Inputs need no replication (each layer
    owns its k range); the memory price is a whole partial C per rank.
    """
    per_host = ranks_per_host or _default_ranks_per_host(ranks, machine)
    # Layers cut every (virtual) node: layer l is its node-local ranks [l·q, (l+1)·q)
    # (hpcmm.planning.algorithms.layers, the rule the run uses).
    node = ranks_per_node or per_host
    if algo == "2.5d":
        options = [_predict_25d(problem, ranks, machine, f"2.5d:{c}", ranks_per_node, ranks_per_host, panel,
                                prefetch, cuda_aware, step_order, orientation, mps)
                   for c in (2, 4, 8) if node % c == 0 and ranks % c == 0]
        if not options:
            raise InputError(f"--algo=2.5d: no layer count of 2, 4, 8 divides the {node} ranks of each node")
        return min(options, key=lambda p: p.seconds)
    try:
        c = int(algo.split(":", 1)[1])
    except (IndexError, ValueError):
        raise InputError(f"--algo={algo!r}: expected 2.5d or 2.5d:C with C an integer") from None
    if c < 1 or node % c or ranks % c or per_host % c:
        raise InputError(f"--algo={algo}: {c} layers must divide the {node} ranks of each node")
    sub = Problem(problem.m, problem.n, -(-problem.k // c), problem.dtype)
    sliced = machine.replace(devices_per_node=max(1, machine.devices_per_node // c),
                             nics_per_node=max(1, machine.nics_per_node // c))
    rpn = node // c
    sliced = _layer_device_share(machine, sliced, ranks, c, ranks_per_node, per_host, rpn, mps)
    # 2.5D layers take near-equal blocks in launch order (hpcmm.run), each layer on MPI.Compute_dims's grid
    # turned as summa's on the same nodes (hpcmm.execution.layered): a layer's nodes are the job's.
    # The c layers run at once on the same host(s): on one host their staged transfers share it.  Each
    # other layer is in a transfer for the share of the product one layer is (its duty), so a layer's
    # transfers meet 1 + (c - 1) · duty of them on average; two rounds settle that share.
    layers, duty = 1.0, []
    for _ in range(3 if machine.hosts == 1 and c > 1 else 1):
        pred = _simulate(sub, ranks // c, sliced, rpn, per_host // c, None, panel, prefetch, "summa",
                         machine.cuda_aware if cuda_aware is None else cuda_aware, step_order=step_order,
                         balance="none", orientation=orientation, mps=mps, host_layers=layers, duty=duty)
        layers = 1.0 + (c - 1) * duty[-1]
    rows, cols = (int(x) for x in pred.grid.split("x"))
    block = -(-problem.m // rows) * -(-problem.n // cols) * problem.itemsize
    reduce = 0.0
    if c > 1:
        reduce = ((c - 1) * machine.intra_latency_us * 1e-6 + (c - 1) / c * block / (machine.intra_gbps * 1e9)
                  + 3 * (c - 1) / c * block / (machine.memory_gbps * 1e9))
    seconds = pred.seconds + reduce
    notes = list(pred.notes)
    if not _fits(sub, Grid(rows, cols), pred.panel, prefetch, machine, 1):
        notes.append(f"does not fit: a layer rank needs more than {machine.memory_gib:g} GiB")
        seconds = math.inf
    return dataclasses.replace(
        pred, seconds=seconds, tflops=problem.flops / seconds / 1e12 if math.isfinite(seconds) else 0.0,
        extra_seconds=reduce, algo=f"2.5d:{c}", ranks=ranks, ranks_per_node=ranks_per_node or per_host,
        ranks_per_host=per_host, notes=tuple(notes))


# -- calibration: fitting measured figures ---------------------------------------------


#: The least share of the largest transfer's time that :func:`fit_link`'s bytes term must explain for its rate to be
#: one the samples measured.
LINK_SLOPE_NOISE = 1e-6


def fit_link(samples) -> tuple[float, float]:
    """``(GB/s, latency µs)`` of ``t = latency + bytes / rate`` from ``(bytes, seconds)`` pairs.

    Relative least squares (each sample weighs by its own size), so small
    transfers set the latency and large ones the rate.
    """
    x = np.array([s[0] for s in samples], dtype=float)
    t = np.array([s[1] for s in samples], dtype=float)
    if x.size == 0 or np.any(t <= 0):
        raise InputError("fit_link: needs transfers with positive times")
    if x.size == 1 or np.ptp(x) == 0:
        return float(x.mean() / t.mean() / 1e9), 0.0
    w = 1.0 / t
    a = np.stack([np.ones_like(x), x], axis=1) * w[:, None]
    (lat, inv), *_ = np.linalg.lstsq(a, t * w, rcond=None)
    big = np.argmax(x)
    # Noise: a slope of zero or less, or one whose bytes explain almost none of the largest transfer's time (times
    # that do not grow with the size fit a slope of rounding error, about 1e-26 s a byte): the largest alone.
    if inv * x[big] <= LINK_SLOPE_NOISE * t[big]:
        return float(x[big] / t[big] / 1e9), 0.0
    return float(1.0 / inv / 1e9), float(max(lat, 0.0) * 1e6)


def _less_copies(samples, copy_gbps: float, chunk_bytes: int) -> list[tuple[float, float, float]]:
    """``(bytes, seconds, seconds less the first and last chunk's copies)`` of staged transfers timed end
    to end (:func:`staged_copy_seconds` at ``copy_gbps`` and ``chunk_bytes``): the host MPI's share."""
    probe = Machine("fit", host_copy_gbps=copy_gbps, staged_chunk_bytes=int(chunk_bytes))
    out = []
    for nbytes, seconds in samples:
        fill, drain = staged_copy_seconds(nbytes, probe)
        out.append((nbytes, seconds, seconds - float(fill) - float(drain)))
    return out


def fit_staged(single, concurrent, copy_gbps: float, chunk_bytes: int) -> tuple[float, float, float | None]:
    """The staged path's figures from ``bench transport``: ``(staged_gbps, staged_latency_us,
    staged_host_gbps)``.

    Parameters
    ----------
    single : list of (bytes, seconds)
        One pair alone (path ``staged``), each transfer timed end to end.
    concurrent : dict of int to list of (bytes, seconds)
        ``k`` pairs at once (paths ``staged-xK``): each receiver's time.
    copy_gbps, chunk_bytes : float, int
        The device ↔ pinned host copy rate and the transfer's chunk: the first and last
        chunk's copies (:func:`staged_copy_seconds`) are taken off each time before the
        host MPI's rate and latency are fitted (:func:`fit_link`).

    Returns
    -------
    The per-transfer rate and latency of one pair, and what the host moves with every
    pair busy: the largest ``k × rate`` over the concurrent runs (None without them).
    A host not saturated by ``k`` pairs gives a lower bound, which is what the model
    needs up to ``k`` transfers at once.
    """
    def net(samples):
        # copies slower than assumed: keep the raw time
        return [(nbytes, left if left > 0 else seconds)
                for nbytes, seconds, left in _less_copies(samples, copy_gbps, chunk_bytes)]

    gbps, lat = fit_link(net(single))
    host = None
    for k, samples in sorted(concurrent.items()):
        if k >= 2 and samples:
            host = max(host or 0.0, k * fit_link(net(samples))[0])
    return gbps, lat, host


def fit_staged_by_size(single, concurrent, copy_gbps: float, chunk_bytes: int,
                       latency_us: float) -> tuple[tuple, float]:
    """The staged path's rate by message size and its contention, from ``bench transport``:
    ``(staged_gbps_by_mib, staged_contention)`` (:func:`staged_rate`).

    Each transfer's host MPI time is its time less the latency and the first and last chunk's
    copies (:func:`staged_copy_seconds`).  The rate of one pair at each size is the median over
    every pair of the file; the contention, the median over every size and ``k`` of
    ``(rate alone / rate of each of k at once - 1) / (k - 1)``: one figure, as the pairs at
    once slowed each other by about the same share at every size from 4 to 128 MiB
    (docs/scaling.md, section 2).  Sizes under 4 MiB are left out of it: the host's latency,
    not its rate, sets them.

    >>> single = [(2**20 * s, 74e-6 + 2**20 * s / 8e9) for s in (4, 16)]
    >>> pairs = {2: [(2**20 * s, 74e-6 + 2**20 * s / 7e9) for s in (4, 16)]}
    >>> by, c = fit_staged_by_size(single, pairs, 1e9, 1 << 40, 74.0)   # copies too fast to count
    >>> [(round(mib), round(gbps, 3)) for mib, gbps in by], round(c, 4)
    ([(4, 8.0), (16, 8.0)], 0.1429)
    """
    def rates(samples):
        out: dict[float, list[float]] = {}
        for nbytes, _, left in _less_copies(samples, copy_gbps, chunk_bytes):
            left -= latency_us * 1e-6
            if left > 0:
                out.setdefault(float(nbytes), []).append(nbytes / left / 1e9)
        return {b: float(np.median(v)) for b, v in out.items()}

    alone = rates(single)
    by_mib = tuple((b / 2**20, g) for b, g in sorted(alone.items()))
    shares = [(alone[b] / g - 1.0) / (k - 1)
              for k, samples in concurrent.items() if k >= 2
              for b, g in rates(samples).items() if b in alone and b >= 4 * 2**20]
    return by_mib, max(float(np.median(shares)), 0.0) if shares else 0.0


def fit_gemm_curve(samples, dtype: str, memory_gbps: float, accumulate_passes: float = 2.0) -> GemmCurve:
    """Fit a :class:`GemmCurve` to ``(m, n, w, accumulate, seconds)`` samples of one type.

    The half extents and the launch cost are searched on a grid; for each the
    rate is the weighted least-squares solution; the best fit wins.  Each
    sample's squared error weighs ``1 / t`` (its relative error squared, times
    its time): the long GEMMs a product is made of count for more than the
    launch-bound small ones.  With equal relative weights (``1 / t²``) the
    small samples of an H200's float16 sweep pulled the curve to 893 TFLOP/s
    and 868 at 16384³, where that sweep's own largest shape ran at 628 and a
    product at one rank at 731; weighted by time, 748 and 730.
    """
    arr = np.array([[s[0], s[1], s[2], float(s[3]), s[4]] for s in samples], dtype=float)
    if arr.size == 0:
        raise InputError(f"fit_gemm_curve: no samples for {dtype}")
    m, n, w, acc, t = arr.T
    flops = product_flops(m, n, w, dtype)
    memory = np.where(acc > 0, accumulate_passes, 1.0) * m * n * ITEMSIZE[dtype] / (memory_gbps * 1e9)
    best = None
    for launch in (0.0, 2e-6, 5e-6, 10e-6, 20e-6, 50e-6):
        if launch >= t.min():
            continue
        for hmn in (1, 8, 16, 32, 64, 96, 128, 160, 192, 256, 384, 512):
            for hk in (1, 8, 16, 32, 48, 64, 96, 128, 192, 256, 384, 512):
                f = flops / ((m / (m + hmn)) * (n / (n + hmn)) * (w / (w + hk)))
                y = t - launch - memory
                wt = 1.0 / t
                inv_rate = float(np.sum(wt * y * f) / np.sum(wt * f * f))
                if inv_rate <= 0:
                    continue
                err = float(np.sum(((launch + memory + f * inv_rate) - t) ** 2 * wt))
                if best is None or err < best[0]:
                    best = (err, 1.0 / inv_rate / 1e12, hmn, hk, launch)
    if best is None:
        raise InputError(f"fit_gemm_curve: no positive rate fits the {dtype} samples")
    _, rate, hmn, hk, launch = best
    return GemmCurve(tflops=rate, half_m=float(hmn), half_n=float(hmn), half_k=float(hk), launch_us=launch * 1e6)


# -- the command: python -m hpcmm model [predict|measure|check|show|scaling] -----------------


def add_model_parser(sub, argtype_int) -> None:
    """The ``model`` subcommand's parser (``argtype_int(name, minimum)`` is the CLI's int type)."""
    p = sub.add_parser("model", help="predict a product's time from a machine description (no GPUs needed)",
                       description="The cost model: predict a product's time (predict), fit a description of this "
                                   "machine (measure, links), compare results files with predictions (check), "
                                   "print a description (show) or scaling tables (scaling).")
    p.add_argument("what", nargs="?", choices=("predict", "measure", "links", "check", "show", "scaling"),
                   default="predict", help="what to do (default predict)")
    p.add_argument("files", nargs="*", metavar="FILE.h5", help="check: results files of measured runs")
    p.add_argument("--machine", default=None,
                   help=f"built-in name or JSON file (default {DEFAULT_MACHINE}; measure: the description to start "
                        "from; links: the description whose links are replaced; check: several, comma separated, "
                        "each run predicted with the one whose links were measured last before it)")
    p.add_argument("--m", type=argtype_int("--m", 1), default=8192, help="rows of A and C (default 8192)")
    p.add_argument("--n", type=argtype_int("--n", 1), default=None, help="columns of B and C (default as --m)")
    p.add_argument("--k", type=argtype_int("--k", 1), default=None, help="columns of A, rows of B (default as --m)")
    p.add_argument("--dtype", choices=tuple(ITEMSIZE), default="float64", help="element type (default float64)")
    p.add_argument("--ranks", type=argtype_int("--ranks", 1), default=2, help="ranks of the run (default 2)")
    p.add_argument("--ranks-per-node", type=argtype_int("--ranks-per-node", 1), default=None, metavar="R",
                   help="the run's --ranks-per-node (default: the ranks of a host)")
    p.add_argument("--ranks-per-host", type=argtype_int("--ranks-per-host", 1), default=None, metavar="H",
                   help="ranks on one physical host (default one per device; all on a one-host machine)")
    p.add_argument("--grid", default=None, metavar="PRxPC",
                   help="process grid (default: the run's, the most square grid turned by type)")
    p.add_argument("--panel", type=argtype_int("--panel", 1), default=None, metavar="W",
                   help="SUMMA panel width (default: the run's choice, narrower where memory is short)")
    p.add_argument("--prefetch", type=argtype_int("--prefetch", 0), default=None,
                   help="panels in flight (default: the run's, 2 for tf32 on a GPU machine, else 1)")
    p.add_argument("--algo", default="summa", help="summa (as built), split-relay, 2.5d, 2.5d:C, auto "
                                                   "(default summa)")
    p.add_argument("--cuda-aware", choices=("yes", "no"), default=None, help="MPI takes device buffers "
                                                                             "(default: the machine's)")
    p.add_argument("--balance", choices=("share", "none"), default="share",
                   help="the run's --balance: share (the default: weighted blocks where ranks share GPUs "
                        "unevenly) or none (equal blocks)")
    p.add_argument("--mps", choices=("yes", "no"), default="no",
                   help="ranks that share a GPU run under an MPS daemon (yes) or time-slice it (no) (default no)")
    p.add_argument("--step-order", choices=("auto", "common"), default="auto",
                   help="the run's HPCMM_STEP_ORDER: auto (each rank its own order on one node) or common "
                        "(default auto)")
    p.add_argument("--json", action="store_true", help="print the prediction as JSON (default: as text)")
    p.add_argument("--transport", metavar="FILE.h5[,FILE.h5]",
                   help="measure, links: `bench transport` file(s) for the links (several pairs at once: staged-xK "
                        "rows; links: required; measure: default the links of --machine)")
    p.add_argument("--dtypes", default=None, help="measure: types of the GEMM sweep (default float64,float32)")
    p.add_argument("--save", metavar="FILE.json", help="measure, links: where to write the description "
                                                        "(required there; no default)")
    p.add_argument("--shapes", default=None, metavar="MxNxW[,MxNxW...]",
                   help="measure: C blocks (M x N, in steps of depth W) to time exactly beside the sweep, as a "
                        "run's ranks hold them; each takes its measured rate in the description (the curve "
                        "cannot tell a tall block from a wide one of the same area; default: none)")
    p.add_argument("--sweep-seconds", type=float, default=None, metavar="S",
                   help="measure: seconds each GEMM shape runs back to back (default 0.3 on a GPU, 0.02 on a "
                        f"CPU; the whole sweep stays within {SWEEP_BUDGET_SECONDS:g} s)")
    p.add_argument("--nodes", default="1,2,4,8,16,32,64", help="scaling: node counts (default 1,2,4,8,16,32,64)")
    p.add_argument("--sizes", default="16384,32768,65536,131072,262144",
                   help="scaling: sizes (default 16384,32768,65536,131072,262144)")


def _parse_grid(text):
    if text is None:
        return None
    try:
        r, c = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise InputError(f"--grid={text!r}: expected PRxPC, e.g. 2x4") from None
    return r, c


def parse_shapes(text: str | None) -> list[tuple[int, int, int]]:
    """``model measure --shapes``: ``"MxNxW,..."`` as (m, n, w) triples of positive integers.

    >>> parse_shapes("8192x4096x2048, 16384X2048x2048"), parse_shapes(None)
    ([(8192, 4096, 2048), (16384, 2048, 2048)], [])
    """
    shapes = []
    for item in (text or "").split(","):
        if not item.strip():
            continue
        try:
            m, n, w = (int(x) for x in item.strip().lower().split("x"))
        except ValueError:
            raise InputError(f"--shapes: {item.strip()!r} is not MxNxW (e.g. 8192x4096x2048)") from None
        if min(m, n, w) < 1:
            raise InputError(f"--shapes: {item.strip()!r} has an extent below 1")
        shapes.append((m, n, w))
    return shapes


#: The most SUMMA steps (k / panel) one prediction may simulate, and the most rank-steps (ranks
#: times steps): the model walks every step of every rank in Python, about 0.1 ms per step and
#: 6 µs per rank-step, so these bounds keep a prediction within seconds.  Above them the sizes
#: are bad input (a wider --panel or fewer ranks bring a problem back under them).
MOST_STEPS = 2**15
MOST_RANK_STEPS = 2**20

#: The most bytes an operand may take: the model counts them in 64-bit integers.
MOST_OPERAND_BYTES = 2**62


def check_problem(prob: Problem, ranks: int, machine: Machine, *, panel: int | None = None,
                  algo: str = "summa", grid: tuple[int, int] | None = None, ranks_per_host: int | None = None,
                  what: str = "") -> None:
    """Refuse a prediction the model cannot compute in seconds, before it starts.

    The bound is on the fewest steps the prediction can take: ``k`` over the widest
    panel it could choose (:data:`~hpcmm.planning.algorithms.summa.GPU_PANEL`, or ``k`` on one rank;
    where the operands exceed the memory of every rank's device together, nothing fits and the
    model takes its narrowest width, :data:`~hpcmm.planning.algorithms.summa.NARROWEST_FALLBACK`),
    shared among at most 8 layers for 2.5d.

    Raises
    ------
    InputError
        Naming the sizes (and ``what``: the file they came from) and the bound.
    """
    from ..planning.algorithms.summa import GPU_PANEL, NARROWEST_FALLBACK  # noqa: PLC0415

    where = f"{what}: " if what else ""
    shape = f"--m={prob.m} --n={prob.n} --k={prob.k}"
    for name, rows, cols in (("A", prob.m, prob.k), ("B", prob.k, prob.n), ("C", prob.m, prob.n)):
        if rows * cols * prob.itemsize > MOST_OPERAND_BYTES:
            raise InputError(f"{where}{shape}: {name} ({rows} x {cols} {prob.dtype}) takes more than 2**62 bytes, "
                             "more than the model counts")
    if ranks > MOST_RANK_STEPS:
        raise InputError(f"{where}--ranks={ranks}: more than the {MOST_RANK_STEPS} ranks the model places")
    operands = (prob.m * prob.k + prob.k * prob.n + prob.m * prob.n) * prob.itemsize
    # The devices the ranks sit on (place()'s rule).
    per_host = ranks_per_host or _default_ranks_per_host(ranks, machine)
    devices = min(ranks, -(-ranks // max(1, per_host)) * machine.devices_per_node)
    held = devices * machine.memory_gib * 2**30
    widest = panel or (min(NARROWEST_FALLBACK, prob.k) if operands > held else prob.k if ranks == 1 else GPU_PANEL)
    text = str(algo)
    layers = 1 if not text.startswith("2.5d") else (
        int(text.split(":", 1)[1]) if text.startswith("2.5d:") and text.split(":", 1)[1].isdigit() else 8)
    steps = -(-prob.k // (min(widest, prob.k) * max(1, layers)))
    why = (f"at least {steps} steps (k over a panel of {min(widest, prob.k)}"
           + (f", the narrowest: the operands' {operands / 2**30:.4g} GiB exceed the {held / 2**30:.4g} GiB of "
              f"{devices} device(s)" if operands > held and not panel else "") + ")")
    if layers == 1:  # SUMMA's panels end at every block edge: a step at least per block of k
        blocks = min(prob.k, max(grid or compute_dims(ranks)))
        if blocks > steps:
            steps, why = blocks, f"at least {blocks} steps (one per block of k on the grid)"
    if steps > MOST_STEPS:
        raise InputError(f"{where}{shape}: the model would simulate {why}, more than {MOST_STEPS}; "
                         "give a wider --panel or a smaller problem")
    if steps * ranks > MOST_RANK_STEPS:
        raise InputError(f"{where}{shape} --ranks={ranks}: the model would simulate {why} on each of {ranks} "
                         f"ranks, more than {MOST_RANK_STEPS} rank-steps")


def _whole_numbers(flag: str, text: str) -> list[int]:
    """``--nodes``/``--sizes``: comma-separated integers of at least 1."""
    from ..config import parse_positive_int  # noqa: PLC0415

    values = [parse_positive_int(flag, item) for item in str(text).split(",") if item.strip()]
    if not values:
        raise InputError(f"{flag}={text!r}: expected comma-separated integers >= 1")
    return values


def _check_save(path: str, inputs: list[tuple[str, str]]) -> None:
    """``--save``: a new file, or a machine description hpcmm may replace; never one of ``inputs``."""
    directory = os.path.dirname(os.path.abspath(path))
    if os.path.islink(path) and not os.path.exists(path):
        raise InputError(f"--save={path}: a symbolic link to {os.readlink(path)}, which does not exist")
    if not os.path.isdir(directory):
        raise InputError(f"--save={path}: directory {directory} does not exist")
    for flag, source in inputs:
        with contextlib.suppress(OSError):
            if os.path.abspath(source) == os.path.abspath(path) or os.path.samefile(source, path):
                raise InputError(f"--save={path} is the input file {flag}={source}: hpcmm never replaces its inputs")
    if os.path.lexists(path):
        try:
            data = _read_json("--save", path, "a machine description")
        except InputError as exc:
            if os.path.exists(path) and stat.S_ISREG(os.stat(path).st_mode):
                data = None  # a file, but not JSON: not a description
            else:
                raise exc from None
        if not isinstance(data, dict) or not isinstance(data.get("name"), str):
            raise InputError(f"--save={path}: exists and is not a machine description (hpcmm replaces only those)")
    try:
        fd, tmp = _new_beside(path)
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        raise InputError(f"--save={path}: directory {directory} is not writable ({exc.strerror or exc})") from None


def _new_beside(path: str) -> tuple[int, str]:
    """A new hidden file beside ``path`` (never an existing one): its descriptor and name."""
    directory, base = os.path.split(os.path.abspath(path))
    while True:
        tmp = os.path.join(directory, f".{base}.{secrets.token_hex(6)}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), tmp
        except FileExistsError:
            continue


def check_options(ns) -> None:
    """Everything ``model`` reads, checked before it predicts, measures or writes anything.

    Options, machine descriptions, results and ``bench transport`` files, and
    ``--save``: each a bad input of its own (:class:`InputError`, one line).
    """
    from ..config import parse_positive_int  # noqa: PLC0415

    specs = (ns.machine or DEFAULT_MACHINE).split(",") if ns.what == "check" else [ns.machine or DEFAULT_MACHINE]
    machines = [load_machine(spec) for spec in specs]
    if ns.files and ns.what != "check":
        raise InputError(f"model {ns.what}: takes no files (given {ns.files[0]}); model check reads results files")
    transport = [p for p in (ns.transport or "").split(",") if p] if ns.transport else []
    if ns.transport is not None and not transport:
        raise InputError(f"--transport={ns.transport!r}: name a `bench transport` file")
    for path in transport:
        regular_file("--transport", path)
    if ns.what in ("measure", "links") and ns.save:
        inputs = [("--transport", p) for p in transport]
        inputs += [("--machine", spec) for spec in specs if os.path.lexists(spec)]
        _check_save(ns.save, inputs)
    if ns.sweep_seconds is not None and not (math.isfinite(ns.sweep_seconds) and ns.sweep_seconds > 0):
        raise InputError(f"--sweep-seconds={ns.sweep_seconds}: expected a positive number of seconds")
    if ns.what == "scaling":
        nodes, sizes = _whole_numbers("--nodes", ns.nodes), _whole_numbers("--sizes", ns.sizes)
        machine = machines[0]
        for x in nodes:
            ranks = parse_positive_int("--nodes", x * machine.devices_per_node)
            for size in [*sizes, int(round(sizes[0] * math.sqrt(x) / 256)) * 256 or 1]:
                check_problem(Problem(size, size, size, ns.dtype), ranks, machine, what=f"--nodes={x} --sizes")
    if ns.what == "predict":
        prob = Problem(ns.m, ns.n or ns.m, ns.k or ns.m, ns.dtype)
        check_problem(prob, ns.ranks, machines[0], panel=ns.panel, algo=ns.algo, grid=_parse_grid(ns.grid),
                      ranks_per_host=ns.ranks_per_host)


def model_main(ns, comm=None) -> int:
    """``python -m hpcmm model ...``; prints on rank 0 only (``measure`` is collective)."""
    from ..errors import collective  # noqa: PLC0415

    with collective(comm) if comm is not None else contextlib.nullcontext():
        check_options(ns)  # every rank: the same verdict, before any work
    if ns.what == "measure":
        return measure_main(ns, comm)
    rank = comm.Get_rank() if comm is not None else 0
    if ns.what == "check":  # several descriptions: each run predicted with the links measured last before it
        machines = [load_machine(spec) for spec in (ns.machine or DEFAULT_MACHINE).split(",")]
        text = check_table(ns.files, machines)
        if rank == 0:
            print(text)
        return 0
    machine = load_machine(ns.machine or DEFAULT_MACHINE)
    if ns.what == "links":
        if not (ns.transport and ns.save):
            raise InputError("model links: --transport FILE.h5 and --save FILE.json are required")
        desc = relink(machine, ns.transport)
        if rank == 0:
            save_machine(desc, ns.save)
            print(f"hpcmm model: {ns.save}: {machine.name} with the links of {ns.transport} "
                  f"(measured {desc.links_measured})")
        return 0
    if ns.what == "show":
        text = machine.to_json()
    elif ns.what == "scaling":
        text = scaling_tables(machine, ns.dtype, _whole_numbers("--nodes", ns.nodes),
                              _whole_numbers("--sizes", ns.sizes))
    else:
        prob = Problem(ns.m, ns.n or ns.m, ns.k or ns.m, ns.dtype)
        aware = None if ns.cuda_aware is None else ns.cuda_aware == "yes"
        pred = predict(prob, ns.ranks, machine, ranks_per_node=ns.ranks_per_node, ranks_per_host=ns.ranks_per_host,
                       grid=_parse_grid(ns.grid), panel=ns.panel, prefetch=ns.prefetch, algo=ns.algo,
                       cuda_aware=aware, step_order=ns.step_order, balance=ns.balance, mps=ns.mps == "yes")
        text = json.dumps(pred.as_dict(), indent=2) if ns.json else describe(prob, pred, machine)
    if rank == 0:
        print(text)
    return 0


def describe(prob: Problem, pred: Prediction, machine: Machine) -> str:
    """The prediction in a few lines."""
    shape = f"{prob.m}x{prob.n}x{prob.k}"
    design = " (a design the model knows; `run` does not build it)" if pred.algo == "split-relay" else ""
    lines = [f"hpcmm model: {shape} {prob.dtype} on {pred.ranks} rank(s), grid {pred.grid}, "
             f"{pred.ranks_per_node} per node, {pred.ranks_per_host} per host, machine {machine.name}",
             f"  algorithm {pred.algo}{design}, panel {pred.panel}, prefetch {pred.prefetch}, {pred.steps} steps"]
    if not math.isfinite(pred.seconds):
        lines.append("  refused: " + "; ".join(pred.notes))
        return "\n".join(lines)
    devices = min(pred.ranks, pred.ranks_per_host * max(1, -(-pred.ranks // pred.ranks_per_host)))
    lines.append(f"  predicted {pred.seconds:.4g} s, {pred.tflops:.2f} TFLOP/s "
                 f"({pred.tflops / max(1, devices):.2f} per rank)")
    s = pred.seconds
    lines.append(f"  GEMM {pred.gemm_seconds:.4g} s ({100 * pred.gemm_seconds / s:.1f} %), exposed communication "
                 f"{pred.exposed_seconds:.4g} s ({100 * pred.exposed_seconds / s:.1f} %)"
                 + (f", reduction {pred.extra_seconds:.4g} s" if pred.extra_seconds else ""))
    if pred.bytes_by_path:
        moved = ", ".join(f"{k} {v / 1e9:.3g} GB" for k, v in pred.bytes_by_path.items())
        lines.append(f"  received per product: {moved}")
    if pred.nic_bytes_max:
        lines.append(f"  busiest NIC {pred.nic_bytes_max / 1e9:.3g} GB ({pred.nic_seconds_max:.3g} s at its rate), "
                     f"mean over NICs {pred.nic_bytes_mean / 1e9:.3g} GB")
    lines += [f"  note: {n}" for n in pred.notes]
    return "\n".join(lines)


def _attr(value):
    return value.decode() if isinstance(value, bytes) else value


@dataclasses.dataclass(frozen=True)
class CheckRow:
    """One measured results file against its prediction (:func:`check_rows`)."""

    path: str
    problem: Problem
    ranks: int
    ranks_per_node: int
    algo: str
    paths: str
    measured: float
    predicted: float
    #: what identifies the run apart from its algorithm (files equal in it are repeats or algorithm pairs)
    setup: tuple
    #: when the links of the description that predicted it were measured (``Machine.links_measured``)
    links_measured: str = ""
    #: why the description does not describe the machine the file was made on (:func:`machine_mismatch`)
    mismatch: str = ""

    @property
    def error(self) -> float:
        return self.predicted / self.measured - 1


#: A GPU model in a name (H200, A100, P100, MI250): what a description and a file's GPUs are compared by; not an
#: NVLink count as ``nvidia-smi topo`` writes it (NV18).
_GPU_MODEL = re.compile(r"(?<![a-z0-9])(?!nv\d)([a-z]{1,2}\d{2,4})", re.I)


def machine_mismatch(backends, gpu_names, machine: Machine) -> str:
    """Why ``machine`` does not describe the machine a results file was made on ('' where it may).

    ``backends`` and ``gpu_names``: the file's ``/topology`` columns (``numpy`` or ``cupy``; the GPUs'
    names).  A CPU file against a GPU description (or the other way round) is a mismatch, and so
    are GPUs of a model that a description naming GPU models does not name.

    >>> h200 = Machine("h200x2", description="the 2 x H200 test machine")
    >>> machine_mismatch(["numpy"], [""], h200)
    'made on CPUs (numpy), but h200x2 describes GPUs'
    >>> machine_mismatch(["cupy"], ["NVIDIA A100-SXM4-80GB"], h200)
    'made on NVIDIA A100-SXM4-80GB, but h200x2 describes H200'
    >>> machine_mismatch(["cupy"], ["NVIDIA A100"], Machine("h200x2", description="2 x H200 (NV18 NVLink)"))
    'made on NVIDIA A100, but h200x2 describes H200'
    >>> machine_mismatch(["cupy"], ["NVIDIA H200"], h200), machine_mismatch(["cupy"], ["NVIDIA A100"], Machine("mine"))
    ('', '')
    """
    on_gpu = any(str(b) == "cupy" for b in backends) or any(str(g) for g in gpu_names)
    device = "gpu" if on_gpu else "cpu"
    if device != machine.device:
        made = "CPUs (numpy)" if device == "cpu" else f"GPUs ({', '.join(sorted({str(g) for g in gpu_names if g}))})"
        return f"made on {made}, but {machine.name} describes {machine.device.upper()}s"
    described = {m.upper() for m in _GPU_MODEL.findall(f"{machine.name} {machine.description}")}
    names = sorted({str(g) for g in gpu_names if g})
    found = {m.upper() for g in names for m in _GPU_MODEL.findall(g)}
    if on_gpu and described and found and not found & described:
        return f"made on {', '.join(names)}, but {machine.name} describes {', '.join(sorted(described))}"
    return ""


def machine_for(created: str, machines) -> Machine:
    """Which of several descriptions predicts a run that ended at ``created`` (ISO 8601): the one
    whose links were measured last before it; a run before all of them (or of no known time),
    the first.  The machine's links drift (docs/scaling.md section 2): a run is predicted with the
    links measured nearest before it.

    >>> a, b = Machine("a", links_measured="2026-11-30T16:44:00+00:00"), Machine("b", links_measured="2026-11-30T16:47:00+00:00")
    >>> [machine_for(t, [a, b]).name for t in ("2026-11-30T16:45:00+00:00", "2026-11-30T16:48:00+00:00", "")]
    ['a', 'b', 'a']
    """
    machines = list(machines)
    when = _instant(created)
    if when is not None:
        before = [(t, i) for i, m in enumerate(machines)
                  if (t := _instant(m.links_measured)) is not None and t <= when]
        if before:
            return machines[max(before)[1]]
    return machines[0]


def _instant(text: str):
    """An ISO 8601 time (UTC where it names no zone), or None."""
    try:
        t = datetime.datetime.fromisoformat(str(text))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=datetime.timezone.utc)


def check_rows(files, machines) -> list[CheckRow]:
    """Read each results file's problem, placement, algorithm (``/summary`` ``algo``, ``summa`` when
    absent), step order, balance and MPS state (``/summary`` ``mps``), and predict it with
    ``machines`` (one description, or several: :func:`machine_for` picks by the file's ``created``)."""
    import h5py  # noqa: PLC0415

    if not files:
        raise InputError("model check: give the results files (FILE.h5 ...) of measured runs")
    machines = [machines] if isinstance(machines, Machine) else list(machines)
    rows = []
    for path in files:
        try:
            rows.append(_check_row(h5py, path, machines))
        except InputError as exc:
            text = str(exc)
            raise InputError(text if text.startswith(f"model check: {path}:") else f"model check: {path}: {text}") \
                from None
        except (OSError, KeyError, ValueError, TypeError, IndexError, AttributeError, ArithmeticError,
                RuntimeError) as exc:
            # A file of another program, of an older hpcmm, or damaged: a field missing or of the wrong type.
            reason = " ".join(str(exc).split()) or type(exc).__name__
            if isinstance(exc, KeyError) and exc.args and isinstance(exc.args[0], str) and " " not in exc.args[0]:
                reason = f"no attribute {exc.args[0]!r}"
            raise InputError(f"model check: {path}: not a results file the model can read "
                             f"({type(exc).__name__}: {reason})") from None
    return rows


def _whole(value, field: str, minimum: int = 1) -> int:
    """An integer attribute of a results file (an integral float too), or :class:`InputError` naming it."""
    from ..config import INT_MAX  # noqa: PLC0415

    if isinstance(value, np.ndarray) and value.shape == ():
        value = value[()]
    ok = isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))
    if isinstance(value, (float, np.floating)) and math.isfinite(value) and float(value).is_integer():
        ok, value = True, int(value)
    if not ok or not minimum <= int(value) <= INT_MAX:
        raise InputError(f"{field}={_shown(value)}: expected an integer from {minimum} to {INT_MAX}")
    return int(value)


def _text(value, field: str) -> str:
    if not isinstance(value, str):
        raise InputError(f"{field}={_shown(value)}: expected a text")
    return value


def _seconds(value) -> float:
    if isinstance(value, np.ndarray) and value.shape == ():
        value = value[()]
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)) \
            or not (math.isfinite(value) and value > 0):
        raise InputError(f"summary seconds={_shown(value)}: expected a positive number of seconds")
    return float(value)


def _shown(value) -> str:
    """A value of a file, shortened for one line."""
    if isinstance(value, np.generic):
        value = value.item()
    text = " ".join(repr(value).split())
    return text if len(text) <= 60 else text[:57] + "..."


def _check_row(h5py, path: str, machines) -> CheckRow:
    """One results file of :func:`check_rows`, read and predicted."""
    regular_file("model check", path)
    if not h5py.is_hdf5(path):
        raise InputError(f"model check: {path}: not an HDF5 file")
    with h5py.File(path, "r") as f:
        cfg = {k: _attr(v) for k, v in f["config"].attrs.items()}
        summ = {k: _attr(v) for k, v in f["summary"].attrs.items()}
        ranks = _whole(f.attrs["ranks"], "ranks")
        topology = f["topology"]
        rows = (topology if isinstance(topology, h5py.Dataset) else topology["local_size"]).size
        if rows > MOST_RANK_STEPS:  # a sparse dataset of any size takes a few bytes on disk
            raise InputError(f"model check: {path}: /topology has {rows} rows, more than {MOST_RANK_STEPS} ranks")
        local = max(_whole(x, "topology local_size") for x in f["topology"]["local_size"][()])
        machine = machine_for(_attr(f.attrs.get("created", "")), machines)
        columns = (topology.dtype.names or ()) if isinstance(topology, h5py.Dataset) else tuple(topology)
        made_on = [[_attr(v) for v in topology[c][()]] if c in columns else [] for c in ("backend", "gpu_name")]
    dtype = "tf32" if bool(cfg.get("tf32")) else cfg["dtype"]
    prob = Problem(_whole(cfg["m"], "config m"), _whole(cfg["n"], "config n"), _whole(cfg["k"], "config k"),
                   _text(dtype, "config dtype"))
    rpn = _whole(cfg.get("ranks_per_node") or 0, "config ranks_per_node", 0) or None
    algo = str(summ.get("algo") or "summa")
    aware = bool(cfg.get("cuda_aware_mpi_decision", True))
    grid = _parse_grid(_text(cfg["grid"], "config grid")) if algo == "summa" else None  # 2.5d: the layers' own grids
    # The file's step order and blocks: files from before either existed ran the common order on
    # equal blocks; a measured or product balance is laid out as its shares would be.
    order = "auto" if cfg.get("step_order_used") == "own-first" else "common"
    balance = "share" if cfg.get("balance", "none") != "none" else "none"
    mps = bool(summ.get("mps", False))  # the ranks that shared a GPU ran under MPS (files before: no)
    panel, prefetch = _whole(cfg["panel"], "config panel"), _whole(cfg["prefetch"], "config prefetch", 0)
    check_problem(prob, ranks, machine, panel=panel, algo=algo, grid=grid, ranks_per_host=local)
    pred = predict(prob, ranks, machine, ranks_per_node=rpn, ranks_per_host=local, grid=grid,
                   panel=panel, prefetch=prefetch, algo=algo, cuda_aware=aware,
                   step_order=order, balance=balance, mps=mps)
    paths = summ.get("paths")
    paths = ",".join(_attr(p) for p in paths) if paths is not None and len(paths) else "-"
    setup = (prob, ranks, rpn or local, local, prefetch, aware, mps)
    return CheckRow(str(path), prob, ranks, rpn or local, algo, paths, _seconds(summ["seconds"]),
                    pred.seconds, setup, machine.links_measured, machine_mismatch(*made_on, machine))


def check_table(files, machines) -> str:
    """Predicted against measured for hpcmm results files: one row per file, the error last;
    then the spread of repeated runs, and the gain of each algorithm over ``summa`` measured
    beside predicted where files differ only in the algorithm.  ``machines``: one description or
    several (:func:`check_rows`)."""
    machines = [machines] if isinstance(machines, Machine) else list(machines)
    rows = check_rows(files, machines)
    head = (f"{'case':<34}{'algo':>8}{'ranks':>6}{'rpn':>5}{'paths':>12}{'measured s':>12}{'predicted s':>13}"
            f"{'error':>8}{'meas. TF':>10}{'pred. TF':>10}")
    out = [head]
    for r in rows:
        p = r.problem
        label = f"{p.m}x{p.n}x{p.k} {p.dtype}"
        pred_tf = p.flops / r.predicted / 1e12 if 0 < r.predicted < math.inf else 0.0
        out.append(f"{label:<34}{r.algo:>8}{r.ranks:>6}{r.ranks_per_node:>5}{r.paths:>12}{r.measured:>12.4g}"
                   f"{r.predicted:>13.4g}{100 * r.error:>7.1f}%{p.flops / r.measured / 1e12:>10.3g}{pred_tf:>10.3g}")
    worst = max(abs(r.error) for r in rows)
    out.append(f"worst error {100 * worst:.1f} % over {len(rows)} case(s), machine {machines[0].name}")
    # A prediction for another machine than the one that ran says nothing of the model.
    out += [f"warning: {r.path}: {r.mismatch}: its error compares two different machines" for r in rows if r.mismatch]
    if len(machines) > 1:  # which links predicted how many runs
        used = collections.Counter(r.links_measured for r in rows)
        out.append("links measured at " + ", ".join(f"{m.links_measured or '(unknown)'}: {used[m.links_measured]} run(s)"
                                                    for m in machines))
    out += _repeat_lines(rows) + _gain_lines(rows)
    return "\n".join(out)


def _label(r: CheckRow) -> str:
    p = r.problem
    return f"{p.m}x{p.n}x{p.k} {p.dtype} {r.ranks} ranks rpn {r.ranks_per_node}{' MPS' if r.setup[-1] else ''}"


def _repeat_lines(rows) -> list[str]:
    """Runs of one setup and algorithm measured more than once: their spread (max ÷ min − 1) and the
    error of the median of their predictions (one each: runs with other links differ) against their median."""
    groups: dict[tuple, list[CheckRow]] = {}
    for r in rows:
        groups.setdefault((r.setup, r.algo), []).append(r)
    lines = []
    for group in groups.values():
        if len(group) > 1:
            t = sorted(r.measured for r in group)
            median = float(np.median(t))
            lines.append(f"{_label(group[0]) + ' ' + group[0].algo:<52} {len(t)} runs: min {t[0]:.4g} s, median "
                         f"{median:.4g} s, max {t[-1]:.4g} s, spread {100 * (t[-1] / t[0] - 1):.1f} %, "
                         f"error of the median {100 * (_predicted_median(group) / median - 1):.1f} %")
    return ["", "repeated runs:", *lines] if lines else []


def _predicted_median(runs) -> float:
    """The median prediction of repeated runs: each run is predicted with the links measured last before it."""
    return float(np.median([r.predicted for r in runs]))


def gain_rows(rows) -> list[tuple[str, str, float, float]]:
    """``(case, algo, measured gain, predicted gain)`` for every algorithm run beside ``summa`` on the
    same setup; gain = time of summa ÷ time of the algorithm − 1 (medians where repeated, of the measured
    and of the predicted times)."""
    groups: dict[tuple, dict[str, list[CheckRow]]] = {}
    for r in rows:
        groups.setdefault(r.setup, {}).setdefault(r.algo, []).append(r)
    out = []
    for by_algo in groups.values():
        if "summa" not in by_algo:
            continue
        base = by_algo["summa"]
        t_base = float(np.median([r.measured for r in base]))
        p_base = _predicted_median(base)
        for algo, runs in sorted(by_algo.items()):
            if algo != "summa":
                t = float(np.median([r.measured for r in runs]))
                out.append((_label(base[0]), algo, t_base / t - 1, p_base / _predicted_median(runs) - 1))
    return out


def _gain_lines(rows) -> list[str]:
    gains = gain_rows(rows)
    if not gains:
        return []
    lines = ["", f"{'gain over summa':<44}{'algo':>8}{'measured':>10}{'predicted':>11}{'difference':>12}"]
    for label, algo, meas, pred in gains:
        lines.append(f"{label:<44}{algo:>8}{100 * meas:>9.1f}%{100 * pred:>10.1f}%{100 * (pred - meas):>9.1f} pp")
    return lines


def scaling_tables(machine: Machine, dtype: str, nodes, sizes) -> str:
    """Markdown: strong scaling (fixed sizes over node counts) and weak scaling (size grows with √nodes)."""
    per = machine.devices_per_node
    out = [f"Strong scaling, {dtype}, {machine.name} ({per} ranks per node): TFLOP/s (exposed communication %)",
           "", "| n = m = k | " + " | ".join(f"{x} node{'s' * (x > 1)}" for x in nodes) + " |",
           "|---" * (len(nodes) + 1) + "|"]
    for size in sizes:
        cells = []
        for x in nodes:
            p = predict(Problem(size, size, size, dtype), per * x, machine)
            cells.append("does not fit" if not math.isfinite(p.seconds)
                         else f"{p.tflops:.0f} ({100 * p.exposed_seconds / p.seconds:.0f} %)")
        out.append(f"| {size} | " + " | ".join(cells) + " |")
    base = sizes[0]
    out += ["", f"Weak scaling, {dtype}: n = {base}·√nodes (the same memory per GPU); TFLOP/s per GPU, "
            "exposed %, busiest NIC ÷ mean NIC bytes", "",
            "| nodes | n | grid | TFLOP/s per GPU | exposed | busiest/mean NIC |", "|---|---|---|---|---|---|"]
    for x in nodes:
        size = int(round(base * math.sqrt(x) / 256)) * 256
        p = predict(Problem(size, size, size, dtype), per * x, machine)
        ratio = f"{p.nic_bytes_max / p.nic_bytes_mean:.2f}" if p.nic_bytes_mean else "–"
        out.append(f"| {x} | {size} | {p.grid} | {p.tflops / (per * x):.1f} | "
                   f"{100 * p.exposed_seconds / p.seconds:.1f} % | {ratio} |")
    return "\n".join(out)


def _sweep_shapes(on_gpu: bool):
    if on_gpu:
        return [(m, n, w) for m in (1024, 4096, 16384) for n in (1024, 4096, 16384) for w in (128, 512, 2048)
                if m * n * w <= 16384 * 16384 * 2048]
    return [(m, n, w) for m in (256, 1024) for n in (256, 1024) for w in (64, 256, 1024)]


def measure_main(ns, comm) -> int:
    """Collective: a GEMM sweep on every rank at once (ranks that share a device share it, as in a run),
    plus the links of a ``bench transport`` file; rank 0 fits and saves a description."""
    from ..execution.backend import make_backend  # noqa: PLC0415
    from ..planning.balance import ranks_on_my_device  # noqa: PLC0415
    from ..config import settings_from_environment  # noqa: PLC0415

    if not ns.save:
        raise InputError("model measure: --save FILE.json is required")
    exact_shapes = parse_shapes(getattr(ns, "shapes", None))  # before any work: a bad one ends the command here
    from mpi4py import MPI  # noqa: PLC0415

    comm = comm or MPI.COMM_WORLD
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    backend = make_backend("auto", node.Get_rank(), node.Get_size())
    # the GEMM library a run would use (HPCMM_GEMM_LIBRARY), so that the rates are the runs' rates
    backend.use_gemm_library(settings_from_environment().get("gemm_library", "auto"),
                             sharers=ranks_on_my_device(node, backend, MPI.Get_processor_name()))
    try:
        dtypes = (ns.dtypes or "float64,float32").split(",")
        for t in dtypes:
            if t not in ITEMSIZE or t == "bfloat16":
                raise InputError(f"--dtypes: {t!r} cannot be measured here (have {', '.join(ITEMSIZE)} but bfloat16)")
        samples = {t: [] for t in dtypes}
        exact = {t: [] for t in dtypes}
        shapes = _sweep_shapes(backend.on_gpu)
        kind = "gpu" if backend.on_gpu else "cpu"
        per_shape = getattr(ns, "sweep_seconds", None) or SWEEP_SECONDS[kind]
        # the sweep's bound: every sample gets the same share of it
        per_shape = min(per_shape, SWEEP_BUDGET_SECONDS / max(1, 2 * len(shapes) * len(dtypes)))
        if SWEEP_WARMUP[kind]:
            # bring the device to the clock it holds under load before the first sample
            _time_gemm(backend, comm, *max(shapes, key=lambda s: s[0] * s[1] * s[2]), dtypes[0], True,
                       SWEEP_WARMUP[kind])
        for t in dtypes:
            for m, n, w in shapes:
                for acc in (False, True):
                    samples[t].append((m, n, w, acc, _time_gemm(backend, comm, m, n, w, t, acc, per_shape)))
            # a run's own blocks, accumulating as all but a product's first step do
            for m, n, w in exact_shapes:
                exact[t].append((m, n, w, _time_gemm(backend, comm, m, n, w, t, True, per_shape)))
        mem = _time_copy(backend, comm)
        sharers = _sharers(backend, node)
        if comm.Get_rank() == 0:  # the raw sweep, for the log: what the fitted curves rest on
            for t, rows in samples.items():
                for m, n, w, acc, sec in rows:
                    print(f"sweep {t} m={m} n={n} w={w} beta={int(acc)} {sec * 1e3:.4f} ms "
                          f"{product_flops(m, n, w, t) / sec / 1e12:.1f} TFLOP/s")
            for t, rows in exact.items():
                for m, n, w, sec in rows:
                    print(f"shape {t} m={m} n={n} w={w} beta=1 {sec * 1e3:.4f} ms "
                          f"{product_flops(m, n, w, t) / sec / 1e12:.1f} TFLOP/s")
    finally:
        backend.close()
        node.Free()
    if comm.Get_rank() == 0:
        base = load_machine(ns.machine) if ns.machine else None
        desc = _describe_measured(base, backend.on_gpu, samples, mem, sharers, ns.transport, comm.Get_size(), exact)
        save_machine(desc, ns.save)
        print(f"hpcmm model: machine description written to {ns.save}")
        print(desc.to_json())
    return 0


def save_machine(machine: Machine, path: str) -> None:
    """Write a description as JSON, whole or not at all (a temporary name, then a rename)."""
    tmp = None
    try:
        fd, tmp = _new_beside(path)  # a name of its own: never a file of the user's
        with open(fd, "w", encoding="utf-8") as f:
            f.write(machine.to_json() + "\n")
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError, TypeError):
            os.remove(tmp)
        raise InputError(f"--save={path}: cannot write the description ({exc.strerror or exc})") from None


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _sharers(backend, node) -> int:
    """Ranks on this rank's device; on a CPU each core is a "device" (one BLAS thread per rank)."""
    if not backend.on_gpu:
        return -(-node.Get_size() // _cores())
    ident = getattr(backend, "device_id", 0)
    return node.allgather(ident).count(ident)


#: Seconds each shape of the GEMM sweep runs back to back, GPU and CPU: a device boosts its
#: clock after idle gaps and settles under load; products run their GEMMs back to back.
SWEEP_SECONDS = {"gpu": 0.3, "cpu": 0.02}
#: Upper bound of the whole sweep (all types, both accumulate modes): the per-shape time shrinks to fit.
SWEEP_BUDGET_SECONDS = 60.0
#: Batches per shape (the median is kept) and seconds of load before the sweep.
SWEEP_BATCHES = 3
SWEEP_WARMUP = {"gpu": 1.0, "cpu": 0.0}


def sweep_calls(first_call_seconds: float, seconds: float, batches: int = SWEEP_BATCHES) -> int:
    """Calls per batch so that ``batches`` batches run about ``seconds`` back to back.

    >>> sweep_calls(0.002, 0.3), sweep_calls(0.5, 0.3), sweep_calls(0.0, 0.3)
    (50, 1, 1000)
    """
    per_batch = seconds / max(batches, 1)
    return max(1, min(1000, math.ceil(per_batch / first_call_seconds) if first_call_seconds > 0 else 1000))


def _time_gemm(backend, comm, m, n, w, dtype, acc, seconds: float) -> float:
    """Seconds of one call at the rate the device holds when GEMMs run back to back.

    A first call (synchronized) sizes the batches; then :data:`SWEEP_BATCHES` batches
    of that many calls are queued without a pause, timed by events around each
    batch; the median per call is returned.  All ranks run at once and the same
    number of calls (a device shared by several ranks is shared here too).
    """
    from mpi4py import MPI  # noqa: PLC0415

    np_dtype = "float32" if dtype == "tf32" else dtype
    a, b = sweep_operands(backend.xp, m, n, w, dtype, backend.on_gpu)
    c = backend.empty((m, n), np_dtype)
    c.fill(0)
    stream = getattr(backend, "compute_stream", None)

    def batch(calls: int) -> float:
        comm.Barrier()
        t0 = backend.event(stream)
        for _ in range(calls):
            backend.gemm(a, b, c, accumulate=acc, stream=stream, tf32=dtype == "tf32")
        t1 = backend.event(stream)
        backend.event_synchronize(t1)
        return backend.elapsed(t0, t1) / calls

    # Untimed: where the run's GEMM library plans a shape (hpcmm.execution.gemm_library), the first call does it.
    backend.gemm(a, b, c, accumulate=acc, stream=stream, tf32=dtype == "tf32")
    backend.synchronize()
    first = comm.allreduce(batch(1), op=MPI.MAX)
    calls = sweep_calls(first, seconds)
    times = [batch(calls) for _ in range(SWEEP_BATCHES)]
    backend.forget_gemm_plans()  # a plan holds its operands
    del a, b, c
    return float(np.median(times))


def sweep_operands(xp, m: int, n: int, w: int, dtype: str, on_gpu: bool = True):
    """A (m × w) and B (w × n) of a sweep sample, in the memory orders the run's GEMM takes for ``dtype``.

    The orders of :func:`hpcmm.planning.gemm_orders.gemm_order`: stored (A column-major,
    B row-major) for most types, both row-major for tf32, whose panels the
    engine re-lays out because cuBLAS's kernels for a column-major A run at
    about 60 % of the row-major ones.  Timing tf32 in the stored order fitted
    a curve of about 235 TFLOP/s to products whose steps ran at 394.

    Data as the run's (uniform in [-1, 1), every mantissa bit random), drawn on
    the device: a GPU's clock under load follows the power its data draws, and
    with non-negative data in [0, 1) this sweep fitted float16 at 950-1116
    TFLOP/s per H200, where products of hpcmm's data hold about 650.

    Examples
    --------
    >>> import numpy as np
    >>> a, b = sweep_operands(np, 4, 3, 2, "tf32")
    >>> a.flags.c_contiguous, b.flags.c_contiguous, a.dtype.name
    (True, True, 'float32')
    >>> a, b = sweep_operands(np, 4, 3, 2, "float64")
    >>> a.flags.f_contiguous, b.flags.c_contiguous
    (True, True)
    """
    np_dtype = "float32" if dtype == "tf32" else dtype
    order = gemm_order(np_dtype, tf32=dtype == "tf32", on_gpu=on_gpu)

    def draw(shape, layout):
        data = (xp.random.random(shape) * 2 - 1).astype(np_dtype)
        return xp.asfortranarray(data) if layout == "F" else xp.ascontiguousarray(data)

    return draw((m, w), order[0]), draw((w, n), order[1])


def _time_copy(backend, comm) -> float:
    """GB/s (1e9 bytes a second) read plus written by a copy on this device (all ranks at once).

    The size is that of a C block of the sweep: on a CPU such a block lives in
    the caches, on a GPU in device memory.
    """
    nbytes = (256 << 20) if backend.on_gpu else (4 << 20)
    src = backend.empty(nbytes, np.uint8)
    src.fill(1)
    dst = backend.empty(nbytes, np.uint8)
    stream = getattr(backend, "comm_stream", None)
    times = []
    for i in range(6):
        comm.Barrier()
        t0 = backend.event(stream)
        backend.copy(dst, src, stream)
        t1 = backend.event(stream)
        backend.event_synchronize(t1)
        if i:
            times.append(backend.elapsed(t0, t1))
    return 2 * nbytes / float(np.median(times)) / 1e9


def _meminfo():
    from ..execution.backend import _meminfo_available  # noqa: PLC0415

    return _meminfo_available()


def _read_transport(spec: str) -> tuple[dict, dict, str]:
    """Rows of ``bench transport`` files (``spec``: one or several, comma separated), by path.

    Returns ``(links, staged, created)``: ``links`` maps a path to ``(GB/s, latency µs)`` of
    :func:`fit_link`, from the pair 0 → 1 where the file has it (a file of more
    ranks also times pairs that share a device); ``staged`` holds the raw
    ``(bytes, seconds)`` of ``staged`` (``single``, every pair of the file) and of
    ``staged-xK`` (``concurrent``, by K) for :func:`fit_staged`.  Every staged pair goes
    through the same host MPI, and one pair alone is noisy (pair 0 → 1 gave 6.19 and 7.29 GB/s
    in two calls on the same kind of machine, docs/scaling.md): the fit takes them all.
    ``created`` is the latest of the files' ``created``: when the links were measured.
    """
    import re  # noqa: PLC0415

    import h5py  # noqa: PLC0415

    rows, created = [], []
    for path in spec.split(","):
        regular_file("--transport", path)
        try:
            with h5py.File(path, "r") as f:
                if f["transport"].size > MOST_RANK_STEPS:
                    raise InputError(f"--transport={path}: /transport has {f['transport'].size} rows, more than "
                                     f"{MOST_RANK_STEPS}")
                rows += [(_attr(r["path"]), int(r["dst"]), float(r["bytes"]), float(r["seconds"]))
                         for r in f["transport"][()]]
                created.append(str(_attr(f.attrs.get("created", ""))))
        except InputError:
            raise
        except (OSError, KeyError, ValueError, TypeError, IndexError, AttributeError, ArithmeticError) as exc:
            reason = " ".join(str(exc).split()) or type(exc).__name__
            raise InputError(f"--transport={path}: not a `bench transport` file ({reason})") from None
    by_path: dict[str, list] = {}
    for name, dst, nbytes, seconds in rows:
        by_path.setdefault(name, []).append((dst, nbytes, seconds))
    links, staged = {}, {"single": [], "concurrent": {}}
    for name, found in by_path.items():
        many = re.fullmatch(r"staged-x(\d+)", name)
        if many:
            staged["concurrent"].setdefault(int(many.group(1)), []).extend((b, t) for _, b, t in found)
            continue
        first = [(b, t) for d, b, t in found if d in (1, -1)] or [(b, t) for _, b, t in found]
        links[name] = fit_link(first)
        if name == "staged":
            staged["single"] = [(b, t) for _, b, t in found]
    return links, staged, max(created)


def _describe_measured(base, on_gpu, samples, mem_gbps, sharers, transport, ranks, exact=None) -> Machine:
    passes = 2.0 if on_gpu else 4.0
    # A device shared by several ranks during the sweep: its own rate is the ranks' sum.
    gemm = {}
    for t, rows in samples.items():
        curve = fit_gemm_curve(rows, t, mem_gbps / sharers, passes)
        # The sweep's shapes are all aligned: the penalty of odd leading dimensions stays the base's.
        odd = base.gemm[t].unaligned if base is not None and t in base.gemm else 1.0
        # --shapes: each block's rate as a share of the fitted rate (both one rank's), which scaling keeps
        shapes = [(m, n, w, product_flops(m, n, w, t) / sec / (curve.tflops * 1e12))
                  for m, n, w, sec in (exact or {}).get(t, [])]
        gemm[t] = dataclasses.replace(curve, tflops=curve.tflops * sharers, unaligned=odd, shapes=shapes)
    fields = dataclasses.asdict(base) if base is not None else {}
    fields.update(
        name=f"measured-{'gpu' if on_gpu else 'cpu'}",
        description=f"measured by `model measure` at {ranks} rank(s), {sharers} per device",
        source=f"GEMM sweep here; links from {transport or (base.name if base else 'defaults')}",
        # measured types replace the base's; the others keep the base's curves
        device="gpu" if on_gpu else "cpu", memory_gbps=mem_gbps,
        gemm={**fields.get("gemm", {}), **{k: dataclasses.asdict(v) for k, v in gemm.items()}},
        accumulate_passes=passes, shared_device_efficiency=1.0 if sharers > 1 else fields.get(
            "shared_device_efficiency", 0.85))
    if not on_gpu:
        # One BLAS thread per rank (OMP_NUM_THREADS=1): the cores are the devices.
        fields.update(devices_per_node=_cores(), nics_per_node=1, hosts=1, cuda_aware=True,
                      memory_gib=(_meminfo() or 8 * 2**30) / 2**30)
    if transport:
        _with_links(fields, transport, on_gpu)
    return Machine(**fields)


def _with_links(fields: dict, transport: str, on_gpu: bool) -> None:
    """Put the links of ``bench transport`` file(s) into a description's ``fields``, in place: the
    pulls, the MPI, the copies to and from the host and the staged path, and when they were
    measured (``links_measured``)."""
    links, staged, created = _read_transport(transport)
    for path, key in (("ipc", "intra"), ("shm", "intra"), ("mpi", "net")):
        if path in links:
            gbps, lat = links[path]
            fields[f"{key}_gbps"], fields[f"{key}_latency_us"] = gbps, lat
    if "d2d" in links:
        fields["local_gbps"] = links["d2d"][0]
    if not on_gpu and "shm" in links:
        fields["local_gbps"] = links["shm"][0]
    copies = [links[p][0] for p in ("d2h", "h2d") if p in links]
    if copies:
        fields["host_copy_gbps"] = min(copies)
    if staged["single"]:
        # the host MPI's share of a staged transfer: the chunk copies the model adds itself are taken off
        gbps, lat, host = fit_staged(staged["single"], staged["concurrent"],
                                     fields.get("host_copy_gbps", Machine.host_copy_gbps),
                                     fields.get("staged_chunk_bytes", Machine.staged_chunk_bytes))
        fields.update(staged_gbps=gbps, staged_latency_us=lat)
        if host is not None:
            fields["staged_host_gbps"] = host
        by_mib, contention = fit_staged_by_size(staged["single"], staged["concurrent"],
                                                fields.get("host_copy_gbps", Machine.host_copy_gbps),
                                                fields.get("staged_chunk_bytes", Machine.staged_chunk_bytes),
                                                lat)
        fields.update(staged_gbps_by_mib=by_mib, staged_contention=contention)
    fields["links_measured"] = created


def relink(base: Machine, transport: str) -> Machine:
    """``base`` with the links of newer ``bench transport`` file(s) (``model links``): its GEMM
    curves kept, every link the files measure replaced.

    A link can drift while a GEMM curve holds: the host MPI's rate of one staged pair went from 7.68
    to 9.38 GB/s within minutes of one call (benchmarks/results/2026-11-30/model-check-summary.json).
    """
    fields = dataclasses.asdict(base)
    _with_links(fields, transport, base.device == "gpu")
    fields["source"] = f"{base.source}; links from {transport}"
    return Machine(**fields)
