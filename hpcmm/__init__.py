"""hpcmm: dense matrix products over many GPUs (or CPUs) with MPI.

Launch::

    mpiexec -n 8 python -m hpcmm --m 32768 --n 32768 --k 32768

Library use: multiply the blocks a program holds, planned once, executed many times::

    from mpi4py import MPI
    import hpcmm
    with hpcmm.Matmul(MPI.COMM_WORLD, m, n, k, "float64", alpha=1.0, beta=0.0) as mm:
        plan = mm.plan()                               # plan.layout: who holds which block
        for a, b in batches:
            c = mm.execute(a, b)                       # this rank's block of C

The command line's run (generated or read inputs, timed, verified, written):
``hpcmm.run(hpcmm.RunConfig(m=4096), comm=MPI.COMM_WORLD)``.

``import hpcmm`` loads only light modules: :class:`Matmul`, :func:`run` and
the helpers that need mpi4py's MPI are imported on first use, so that
``python -m hpcmm`` can guard the process (:mod:`hpcmm.cli.startup`) before
anything that can fail on one rank.
"""

import sys
import types

__version__ = "0.1.0"

from .config import RunConfig  # noqa: E402
from .geometry.distribution import Layout  # noqa: E402
from .errors import HpcmmError, InputError, VerificationError  # noqa: E402
from .options import MatmulOptions  # noqa: E402
from .planning.plan import Plan  # noqa: E402

__all__ = ["ExecuteTimes", "HpcmmError", "InputError", "Layout", "Matmul", "MatmulOptions", "Plan", "RunConfig",
           "RunResult", "VerificationError", "gather", "matmul", "run", "write_hdf5", "__version__"]

#: Names imported on first use, and the module each comes from.
_LAZY = {"run": "cli.run", "RunResult": "cli.run", "Matmul": "matmul", "matmul": "matmul",
         "ExecuteTimes": "matmul", "gather": "io.gathering", "write_hdf5": "io.gathering"}


class _Package(types.ModuleType):
    """The package module: the names of :data:`_LAZY` come from their modules on first use."""

    def __getattr__(self, name: str):
        if name in _LAZY:
            import importlib  # noqa: PLC0415

            return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        raise AttributeError(f"module 'hpcmm' has no attribute {name!r}")

    def __setattr__(self, name: str, value) -> None:
        # Importing a submodule binds it here; hpcmm.run and hpcmm.matmul stay the functions.
        if name in ("run", "matmul") and isinstance(value, types.ModuleType) and hasattr(value, name):
            value = getattr(value, name)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
