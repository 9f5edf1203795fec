"""``python -m hpcmm``: see :mod:`hpcmm.cli`; the process's life is :func:`hpcmm.startup.launch`.

Nothing here may start a thread or MPI before ``launch`` (signals are blocked
first, then MPI starts; see :mod:`hpcmm.startup`), and ``import hpcmm`` itself
loads only the light modules (``hpcmm/__init__.py``).
"""

import sys

from .startup import launch

if __name__ == "__main__":
    sys.exit(launch())
