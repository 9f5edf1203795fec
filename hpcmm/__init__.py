"""hpcmm: dense matrix products over many GPUs (or CPUs) with MPI.

Launch::

    mpiexec -n 8 python -m hpcmm --m 32768 --n 32768 --k 32768

Library use::

    from mpi4py import MPI
    import hpcmm
    result = hpcmm.run(hpcmm.RunConfig(m=4096, n=4096, k=4096), comm=MPI.COMM_WORLD)
"""

__version__ = "0.1.0"

from .config import RunConfig  # noqa: E402
from .errors import HpcmmError, InputError, VerificationError  # noqa: E402
from .run import RunResult, run  # noqa: E402

__all__ = ["HpcmmError", "InputError", "RunConfig", "RunResult", "VerificationError", "run", "__version__"]
