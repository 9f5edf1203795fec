"""``python -m hpcmm``: see :mod:`hpcmm.cli.main`; the process's life is :func:`hpcmm.cli.startup.launch`.

Nothing here may start a thread or MPI before ``launch`` (signals are blocked
first, then MPI starts; see :mod:`hpcmm.cli.startup`), and ``import hpcmm`` itself
loads only the light modules (``hpcmm/__init__.py``).
"""

import sys

from .cli.startup import launch

if __name__ == "__main__":
    sys.exit(launch())
