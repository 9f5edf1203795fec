"""``python -m hpcmm``: the process's start, the subcommands (``run``, ``info``, ``report``), progress
and the summary; every product goes through :class:`hpcmm.Matmul`'s planning path.
"""
