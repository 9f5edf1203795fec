"""Is the MPI library CUDA-aware?  Ask it; when it cannot tell, assume not.

Handing a device pointer to an MPI that is not CUDA-aware crashes the rank
(a segfault inside the library), so the answer must err on the safe side.

Decision table (first match wins):

====================================  ===========================================
what we see                           decision
====================================  ===========================================
``--cuda-aware-mpi yes|no``           that, "set by --cuda-aware-mpi"
``HPCMM_CUDA_AWARE_MPI=yes|no``       that, "set by HPCMM_CUDA_AWARE_MPI"
Open MPI ``MPIX_Query_cuda_support``  its answer (1 yes, 0 no)
MPICH ``MPIX_GPU_query_support``      its answer for CUDA
``MPICH_GPU_SUPPORT_ENABLED=1``       yes (Cray MPICH)
``MV2_USE_CUDA=1``                    yes (MVAPICH2-GDR)
``I_MPI_OFFLOAD>=1``                  yes (Intel MPI)
anything else                         no, "cannot tell" (rank 0 prints a hint)
====================================  ===========================================
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
from collections.abc import Callable, Mapping

__all__ = ["CudaAwareness", "decide", "find_mpi_library", "query_library"]


@dataclasses.dataclass(frozen=True)
class CudaAwareness:
    """The verdict and the reason for it, as ``info`` prints it."""

    aware: bool
    reason: str
    known: bool = True

    @property
    def hint(self) -> str | None:
        """The one line rank 0 prints when the library could not tell."""
        if self.known:
            return None
        return (
            "hpcmm: cannot tell whether this MPI is CUDA-aware; staging GPU buffers through "
            "host memory (set --cuda-aware-mpi yes or HPCMM_CUDA_AWARE_MPI=yes if it is)"
        )


def find_mpi_library() -> str | None:
    """Path of the MPI shared library this process has loaded (Linux)."""
    try:
        with open("/proc/self/maps", encoding="utf-8") as maps:
            for line in maps:
                path = line.split()[-1] if len(line.split()) >= 6 else ""
                base = os.path.basename(path)
                if base.startswith(("libmpi.so", "libmpi_")) and ".so" in base:
                    return path
    except OSError:
        pass
    return None


def query_library(path: str | None = None) -> tuple[bool | None, str]:
    """Ask the loaded MPI library through its own extension calls.

    Returns
    -------
    answer : bool or None
        ``None`` when the library offers no such call.
    source : str
        Which call answered.
    """
    path = path or find_mpi_library()
    if path is None:
        return None, "MPI library not found in the process"
    try:
        lib = ctypes.CDLL(path)
    except OSError as exc:
        return None, f"cannot open {path}: {exc}"
    fn = getattr(lib, "MPIX_Query_cuda_support", None)
    if fn is not None:
        fn.restype = ctypes.c_int
        return bool(fn()), "MPIX_Query_cuda_support()"
    fn = getattr(lib, "MPIX_GPU_query_support", None)
    if fn is not None:
        supported = ctypes.c_int(0)
        mpix_gpu_support_cuda = 0
        fn.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_int)]
        fn.restype = ctypes.c_int
        if fn(mpix_gpu_support_cuda, ctypes.byref(supported)) == 0:
            return bool(supported.value), "MPIX_GPU_query_support(MPIX_GPU_SUPPORT_CUDA)"
    return None, "no MPIX query call in the library"


def _env_true(value: str | None) -> bool:
    return value is not None and value.strip().lower() in {"1", "yes", "true", "on", "enable", "enabled"}


def decide(
    option: str = "auto",
    environ: Mapping[str, str] | None = None,
    option_source: str = "--cuda-aware-mpi",
    library: Callable[[], tuple[bool | None, str]] = query_library,
) -> CudaAwareness:
    """Decide whether device buffers may go to MPI.

    Parameters
    ----------
    option : {"auto", "yes", "no"}
        The resolved setting (command line over ``HPCMM_CUDA_AWARE_MPI``).
    environ : mapping, optional
        The environment (default ``os.environ``), for the vendors' variables.
    option_source : str
        Where ``option`` came from, for the reason text.
    library : callable
        Returns the library's own answer (injected by tests).
    """
    environ = os.environ if environ is None else environ
    if option in ("yes", "no"):
        return CudaAwareness(option == "yes", f"set by {option_source}={option}")
    answer, source = library()
    if answer is not None:
        return CudaAwareness(answer, f"{source} returned {int(answer)}")
    if _env_true(environ.get("MPICH_GPU_SUPPORT_ENABLED")):
        return CudaAwareness(True, "MPICH_GPU_SUPPORT_ENABLED=1 (Cray MPICH)")
    if _env_true(environ.get("MV2_USE_CUDA")):
        return CudaAwareness(True, "MV2_USE_CUDA=1 (MVAPICH2)")
    offload = environ.get("I_MPI_OFFLOAD", "").strip()
    if offload.isdigit() and int(offload) >= 1:
        return CudaAwareness(True, f"I_MPI_OFFLOAD={offload} (Intel MPI)")
    return CudaAwareness(False, f"cannot tell ({source}); assuming not CUDA-aware", known=False)
