"""Does this rank run under NVIDIA's Multi-Process Service (MPS)?

Ranks that share a GPU take turns on it (time slicing) unless an MPS control
daemon runs: then one server holds a single context for all of them and
their kernels run side by side.  When CUDA starts in a process it tries to
reach the daemon through the control socket ``control`` in
``$CUDA_MPS_PIPE_DIRECTORY`` (``/tmp/nvidia-mps`` when unset); if that fails,
the process runs without MPS.  hpcmm only looks; it never starts or stops
the daemon (``docs/shared-gpus.md`` shows how).

How it decides, first answer wins:

1. ``driver``: on a GPU, the device attribute ``cudaDevAttrMpsEnabled``
   (133, CUDA 12.3 and later), "contexts created on this device will be shared
   via MPS": the driver's own word for this process.
2. ``pipe``: the control socket.  It must be a socket, and where
   ``/proc/net/unix`` can be read, some process must listen on it (a daemon
   that died leaves its socket file behind).

Worked example: ``mpiexec -n 8 python -m hpcmm`` on 2 GPUs, no daemon: every
rank finds no ``/tmp/nvidia-mps/control``, and rank 0 prints
:func:`sharing_hint` for the 4 ranks on each GPU.
"""

from __future__ import annotations

import dataclasses
import os
import stat
from collections.abc import Mapping, Sequence

__all__ = [
    "DEFAULT_PIPE_DIRECTORY",
    "MpsState",
    "control_socket_state",
    "detect",
    "driver_mps_enabled",
    "pipe_directory",
    "shared_without_mps",
    "sharing_hint",
]

#: Where the MPS control daemon and its clients meet when ``CUDA_MPS_PIPE_DIRECTORY`` is unset.
DEFAULT_PIPE_DIRECTORY = "/tmp/nvidia-mps"

#: ``cudaDevAttrMpsEnabled`` (``CU_DEVICE_ATTRIBUTE_MPS_ENABLED``) in driver_types.h / cuda.h, CUDA >= 12.3.
_ATTR_MPS_ENABLED = 133

#: ``__SO_ACCEPTCON`` in the Flags column of /proc/net/unix: the socket listens.
_LISTENING = 0x10000


@dataclasses.dataclass(frozen=True)
class MpsState:
    """What one rank found.

    Attributes
    ----------
    active : bool
        Whether this rank's CUDA context runs under an MPS server.
    source : str
        How it was decided: ``driver`` (the device attribute) or ``pipe``
        (the control socket).
    pipe_dir : str
        The pipe directory this rank's CUDA looks in.
    detail : str
        One line for people: what was seen.
    """

    active: bool
    source: str
    pipe_dir: str
    detail: str


def pipe_directory(environ: Mapping[str, str] | None = None) -> str:
    """``$CUDA_MPS_PIPE_DIRECTORY``, or the default ``/tmp/nvidia-mps``."""
    environ = os.environ if environ is None else environ
    return environ.get("CUDA_MPS_PIPE_DIRECTORY") or DEFAULT_PIPE_DIRECTORY


def _listening_paths(proc_net_unix: str) -> set[str] | None:
    """Paths of listening UNIX sockets in this network namespace, or ``None`` when unreadable."""
    try:
        with open(proc_net_unix, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()[1:]
    except OSError:
        return None
    paths = set()
    for line in lines:
        # Num RefCount Protocol Flags Type St Inode [Path]
        fields = line.split(None, 7)
        if len(fields) < 8:
            continue
        try:
            flags = int(fields[3], 16)
        except ValueError:
            continue
        if flags & _LISTENING:
            paths.add(fields[7].strip())
    return paths


def control_socket_state(pipe_dir: str, proc_net_unix: str = "/proc/net/unix") -> str:
    """State of the daemon's control socket in ``pipe_dir``.

    Returns
    -------
    str
        ``missing`` (no ``control`` there), ``not-a-socket``, ``stale`` (a
        socket nobody listens on), ``listening``, or ``present`` (a socket,
        and no ``/proc/net/unix`` to say more).
    """
    path = os.path.join(pipe_dir, "control")
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return "missing"
    if not stat.S_ISSOCK(mode):
        return "not-a-socket"
    listening = _listening_paths(proc_net_unix)
    if listening is None:
        return "present"
    names = {os.path.normpath(path), os.path.realpath(path)}
    return "listening" if names & {os.path.normpath(p) for p in listening} else "stale"


def driver_mps_enabled(device_id: int) -> bool | None:
    """``cudaDevAttrMpsEnabled`` of ``device_id`` through cupy, or ``None`` where it cannot be read.

    ``None``: no cupy, no driver, or a CUDA older than 12.3 (the attribute is
    unknown there).  Call it after the rank has chosen its device.
    """
    try:
        import cupy  # noqa: PLC0415 - optional dependency

        value = cupy.cuda.runtime.deviceGetAttribute(_ATTR_MPS_ENABLED, int(device_id))
    except Exception:  # noqa: BLE001 - any failure means "the driver does not say"
        return None
    return bool(value)


_PIPE_DETAIL = {
    "missing": "no MPS control socket {path}",
    "not-a-socket": "{path} is not a socket",
    "stale": "nobody listens on {path} (a daemon that ended left it)",
    "listening": "an MPS control daemon listens on {path}",
    "present": "MPS control socket {path} present",
}


def detect(device_id: int | None = None, environ: Mapping[str, str] | None = None,
           proc_net_unix: str = "/proc/net/unix", driver=driver_mps_enabled) -> MpsState:
    """This rank's MPS state (see the module's notes for the order of evidence).

    Parameters
    ----------
    device_id : int, optional
        This rank's GPU; ``None`` on the CPU (then only the pipe is looked at).
    environ : mapping, optional
        The environment (default ``os.environ``).
    proc_net_unix : str
        Where the kernel lists UNIX sockets.
    driver : callable
        ``driver(device_id) -> bool | None``: the driver's answer.
    """
    pipe_dir = pipe_directory(environ)
    if device_id is not None:
        said = driver(device_id)
        if said is not None:
            return MpsState(said, "driver", pipe_dir,
                            f"the driver says contexts on GPU {device_id} are {'' if said else 'not '}shared via MPS")
    state = control_socket_state(pipe_dir, proc_net_unix)
    detail = _PIPE_DETAIL[state].format(path=os.path.join(pipe_dir, "control"))
    return MpsState(state in ("listening", "present"), "pipe", pipe_dir, detail)


def sharing_hint(shared_without_mps: Mapping[str, int], pipe_dir: str | None = None,
                 log_dir: str | None = None) -> str | None:
    """The one line rank 0 prints when ranks share a GPU without MPS, or ``None`` when none do.

    Parameters
    ----------
    shared_without_mps : mapping of str to int
        GPU label (``"GPU 0 of node1"``) → how many ranks share it, for the
        GPUs whose ranks run without MPS (GPUs of one rank are left out).
    pipe_dir, log_dir : str, optional
        Directories to suggest (default: per-user directories under /tmp).

    Examples
    --------
    >>> print(sharing_hint({"GPU 0 of n1": 4, "GPU 1 of n1": 4}, "/tmp/mps-pipe", "/tmp/mps-log"))
    4 ranks share GPU 0 of n1 (and 1 more GPU) without MPS; starting an MPS control daemon lets their \
kernels run together: export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log; \
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d (before mpiexec; \
stop it after with: echo quit | nvidia-cuda-mps-control; see docs/shared-gpus.md)
    >>> sharing_hint({"GPU 0 of n1": 1}) is None
    True
    """
    shared = {label: ranks for label, ranks in shared_without_mps.items() if ranks > 1}
    if not shared:
        return None
    label, ranks = max(shared.items(), key=lambda item: item[1])
    more = len(shared) - 1
    others = f" (and {more} more GPU{'s' if more > 1 else ''})" if more else ""
    pipe_dir = pipe_dir or "/tmp/mps-pipe-$USER"
    log_dir = log_dir or "/tmp/mps-log-$USER"
    return (f"{ranks} ranks share {label}{others} without MPS; starting an MPS control daemon lets their "
            f"kernels run together: export CUDA_MPS_PIPE_DIRECTORY={pipe_dir} CUDA_MPS_LOG_DIRECTORY={log_dir}; "
            "mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d (before mpiexec; "
            "stop it after with: echo quit | nvidia-cuda-mps-control; see docs/shared-gpus.md)")


def shared_without_mps(devices: Sequence, active: Sequence[bool]) -> dict[str, int]:
    """GPUs that hold more than one rank, not all of them under MPS: label → ranks.

    Parameters
    ----------
    devices : sequence
        Each rank's device: a :class:`hpcmm.planning.balance.Device` (its ``key`` says
        which ranks share, its ``label`` names it) or any hashable label.
    active : sequence of bool
        Each rank's :attr:`MpsState.active`.

    Examples
    --------
    >>> shared_without_mps(["GPU 0", "GPU 1", "GPU 0"], [False, False, False])
    {'GPU 0': 2}
    >>> shared_without_mps(["GPU 0", "GPU 1", "GPU 0"], [True, False, True])
    {}
    """
    if len(devices) != len(active):
        raise ValueError(f"{len(active)} MPS states for {len(devices)} ranks")
    ranks: dict = {}
    served: dict = {}
    labels: dict = {}
    for device, on in zip(devices, active):
        key = getattr(device, "key", device)
        labels.setdefault(key, str(getattr(device, "label", device)))
        ranks[key] = ranks.get(key, 0) + 1
        served[key] = served.get(key, True) and bool(on)
    return {labels[key]: count for key, count in ranks.items() if count > 1 and not served[key]}
