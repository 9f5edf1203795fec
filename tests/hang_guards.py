"""The per-test limits of pytest-timeout (tests/conftest.py): hang guards, not speed limits.

Each is minutes where the tests take seconds: it is only there so that a hung test fails
instead of blocking the suite.  Limits that a test's work is held to are derived from what
the test starts (tests/test_reliability_budget.py).
"""

#: A test without a mark of its own.
DEFAULT_TIMEOUT = 600
#: A ``slurm`` test (it may install packages and start daemons, and its jobs queue for 2 cores).
SLURM_TIMEOUT = 3600
#: An MPI test (``tests/mpi``, one pytest per rank): small products, on up to 8 ranks.
MPI_TIMEOUT = 120
