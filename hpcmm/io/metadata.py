"""What the run ran on: versions of everything, and one row per rank of the topology."""

from __future__ import annotations

import platform
import sys

from mpi4py import MPI

__all__ = ["mpi_library", "versions", "topology_row", "parallel_hdf5"]


def parallel_hdf5() -> bool:
    import h5py  # noqa: PLC0415

    return bool(h5py.get_config().mpi)


def versions(backend=None) -> dict[str, str]:
    """Versions of hpcmm and its stack, as strings ("" where a piece is absent)."""
    import h5py  # noqa: PLC0415
    import mpi4py  # noqa: PLC0415
    import numpy  # noqa: PLC0415

    from .. import __version__  # noqa: PLC0415

    out = {
        "hpcmm": __version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "numpy": numpy.__version__,
        "mpi4py": mpi4py.__version__,
        "mpi_library": mpi_library(),
        "mpi_standard": "{}.{}".format(*MPI.Get_version()),
        "h5py": h5py.__version__,
        "hdf5": h5py.version.hdf5_version,
        "hdf5_parallel": str(parallel_hdf5()),
        "cupy": "",
        "cuda_runtime": "",
        "cuda_driver": "",
        "nvmath_python": _installed("nvmath-python"),
    }
    if backend is not None and backend.on_gpu:
        cupy = backend.cupy
        out["cupy"] = cupy.__version__
        out["cuda_runtime"] = _cuda_version(cupy.cuda.runtime.runtimeGetVersion())
        out["cuda_driver"] = _cuda_version(cupy.cuda.runtime.driverGetVersion())
    else:
        try:
            import cupy  # noqa: PLC0415

            out["cupy"] = cupy.__version__
        except Exception:  # noqa: BLE001 - optional
            pass
    return out


def _installed(distribution: str) -> str:
    """The installed version of a distribution, read from its metadata (nothing is imported); ``""`` if absent."""
    from importlib import metadata  # noqa: PLC0415

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return ""


def mpi_library() -> str:
    """First line of the MPI library's version text (Open MPI pads it with NULs)."""
    text = MPI.Get_library_version().replace("\x00", "").strip()
    return text.splitlines()[0].strip() if text else ""


def _cuda_version(v: int) -> str:
    return f"{v // 1000}.{(v % 1000) // 10}"


def device_of(row: dict) -> tuple[tuple, str]:
    """The device of a ``/topology`` row: a key (one per GPU, or per host where the rank computes on
    its CPU) and how to name it.

    >>> device_of({"host": "n1", "gpu_index": 2, "gpu_uuid": ""}), device_of({"host": "n1", "gpu_index": -1})
    ((('n1', 2), 'GPU 2 of n1'), (('n1', 'host'), 'host n1'))
    """
    gpu = row.get("gpu_index", -1)
    if gpu >= 0:
        return (row.get("host", ""), row.get("gpu_uuid") or gpu), f"GPU {gpu} of {row.get('host', '')}"
    return (row.get("host", ""), "host"), f"host {row.get('host', '')}"


def topology_row(topo, backend) -> dict:
    """This rank's line of the topology table."""
    row, col = topo.coords
    desc = backend.describe()
    return {
        "rank": topo.rank,
        "launch_rank": topo.launch_rank,
        "host": topo.host,
        "local_rank": topo.local_rank,
        "local_size": topo.local_size,
        "node": topo.vnode,
        "grid_row": row,
        "grid_col": col,
        "backend": desc.get("backend", ""),
        "gpu_index": int(desc.get("gpu_index", -1)),
        "gpu_name": desc.get("gpu_name", ""),
        "gpu_uuid": desc.get("gpu_uuid", ""),
        "gpu_pci": desc.get("gpu_pci", ""),
    }
