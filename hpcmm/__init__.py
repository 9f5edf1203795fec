"""hpcmm: dense matrix products over many GPUs (or CPUs) with MPI.

Launch::

    mpiexec -n 8 python -m hpcmm --m 32768 --n 32768 --k 32768

Library use::

    from mpi4py import MPI
    import hpcmm
    result = hpcmm.run(hpcmm.RunConfig(m=4096, n=4096, k=4096), comm=MPI.COMM_WORLD)

``import hpcmm`` loads only light modules: :func:`run` (numpy, mpi4py's MPI,
h5py) is imported on first use, so that ``python -m hpcmm`` can guard the
process (:mod:`hpcmm.startup`) before anything that can fail on one rank.
"""

import sys
import types

__version__ = "0.1.0"

from .config import RunConfig  # noqa: E402
from .errors import HpcmmError, InputError, VerificationError  # noqa: E402

__all__ = ["HpcmmError", "InputError", "RunConfig", "RunResult", "VerificationError", "run", "__version__"]


class _Package(types.ModuleType):
    """The package module: ``run`` and ``RunResult`` come from :mod:`hpcmm.run` on first use."""

    def __getattr__(self, name: str):
        if name in ("run", "RunResult"):
            from .run import RunResult, run  # noqa: PLC0415

            return {"run": run, "RunResult": RunResult}[name]
        raise AttributeError(f"module 'hpcmm' has no attribute {name!r}")

    def __setattr__(self, name: str, value) -> None:
        # Importing the submodule hpcmm.run binds it here; hpcmm.run stays the function.
        if name == "run" and isinstance(value, types.ModuleType) and hasattr(value, "run"):
            value = value.run
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
