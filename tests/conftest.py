"""Test-suite configuration shared by every folder under ``tests/``.

Two ways the suite runs:

* ``python -m pytest`` (serial): everything but ``tests/mpi``, whose tests need
  several processes.  ``tests/test_mpi_suite.py`` starts them itself, as
  ``mpiexec -n N python -m pytest --with-mpi tests/mpi`` for N = 1 … 4.
* ``mpiexec -n N python -m pytest --with-mpi tests/mpi``: the MPI tests, one
  pytest per rank (pytest-mpi skips a test whose ``min_size`` exceeds N).

Time limits: pytest-timeout is required (without it the session stops with a
one-line error).  Where no ``--timeout`` was given, a test may take :data:`DEFAULT_TIMEOUT` seconds (``slurm`` tests, which may
install packages and start daemons, :data:`SLURM_TIMEOUT`; MPI tests
:data:`MPI_TIMEOUT`).  Under MPI the limit ends the process from a watchdog
thread: a rank blocked inside an MPI call never returns to Python to see a
signal, and the launcher then ends the other ranks.  These are hang guards of minutes
(tests/hang_guards.py); what a test's work is held to is derived from what it starts
(tests/test_reliability_budget.py), so that a loaded machine does not break it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from deselect_listed import listed_tests
from hang_guards import DEFAULT_TIMEOUT, MPI_TIMEOUT, SLURM_TIMEOUT

_MPI_DIR = Path(__file__).resolve().parent / "mpi"


def _with_mpi(config: pytest.Config) -> bool:
    try:
        return bool(config.getoption("--with-mpi") or config.getoption("--only-mpi"))
    except ValueError:  # pytest-mpi is not installed
        return False


def pytest_ignore_collect(collection_path: Path, config: pytest.Config):
    """Leave ``tests/mpi`` to the MPI runs: without ``--with-mpi`` it is not collected."""
    if not _with_mpi(config) and (collection_path == _MPI_DIR or _MPI_DIR in collection_path.parents):
        return True
    return None


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get("MUTANT_UNDER_TEST") == "stats":
        # mutmut's first pass, which records which tests reach which functions: a child process
        # (hpcmm launched by a test) would try to record too, find no mutmut configuration in its
        # directory and fail.  mutmut keeps its own copy of the mode in this process; the children,
        # without the variable, run hpcmm's code unmutated (in a mutant's run they inherit its name).
        del os.environ["MUTANT_UNDER_TEST"]
    if not config.pluginmanager.hasplugin("timeout"):
        # Without it every time limit is a label only, and a hung test hangs the suite.
        raise pytest.UsageError("pytest-timeout is not installed: every test needs its time limit "
                                "(pip install -e '.[test]' or pip install pytest-timeout)")


def _timeout_configured(config: pytest.Config) -> bool:
    """Whether a limit came from ``--timeout``, ``PYTEST_TIMEOUT`` or the ini file."""
    return bool(config.getoption("timeout", None) or os.environ.get("PYTEST_TIMEOUT")
                or config.getini("timeout"))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--deselect-listed", metavar="FILE", default=None,
        help="leave out the tests FILE names, one a line: a node id, or a test function's id for all its "
             "parameters; lines starting with '#' are comments (mutmut's passes: tests/mutmut_launch_only.txt)")


@pytest.hookimpl(tryfirst=True)  # before any plugin that records the items it is given (mutmut's)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Give every test without its own limit the default one; leave out what ``--deselect-listed`` names."""
    listed = config.getoption("deselect_listed")
    if listed:
        names = listed_tests(listed)
        left_out = [item for item in items if item.nodeid in names or item.nodeid.split("[", 1)[0] in names]
        if left_out:
            dropped = {item.nodeid for item in left_out}
            items[:] = [item for item in items if item.nodeid not in dropped]
            config.hook.pytest_deselected(items=left_out)
    if _timeout_configured(config):
        return
    # A signal cannot interrupt a rank waiting inside the MPI library: use a thread.
    method = "thread" if _with_mpi(config) else None
    for item in items:
        if item.get_closest_marker("timeout") is not None:
            continue
        if item.get_closest_marker("slurm") is not None:
            limit = SLURM_TIMEOUT
        elif item.get_closest_marker("mpi") is not None:
            limit = MPI_TIMEOUT
        else:
            limit = DEFAULT_TIMEOUT
        item.add_marker(pytest.mark.timeout(limit, method=method))


@pytest.fixture
def one_rank():
    """A one-rank topology over ``COMM_SELF`` and a numpy backend, for checks called directly."""
    from mpi4py import MPI  # noqa: PLC0415 - only the tests that ask for it start MPI here

    from hpcmm.execution.backend import CpuBackend  # noqa: PLC0415
    from hpcmm.config import RunConfig  # noqa: PLC0415
    from hpcmm.execution.topology import Topology  # noqa: PLC0415

    topo = Topology.create(MPI.COMM_SELF, RunConfig(m=1, n=1, k=1, device="cpu"))
    try:
        yield topo, CpuBackend()
    finally:
        topo.close()
