"""Options of the MPI test runs (``mpiexec -n N python -m pytest --with-mpi tests/mpi``).

``--junit-per-rank DIR`` makes every rank write its own JUnit XML report,
``DIR/rank-<R>.xml``.  ``tests/test_mpi_suite.py`` decides pass or fail from
these files, one per rank, never from the launcher's stdout, where the ranks'
lines interleave (two ranks' closing lines can arrive glued into one).
"""

from __future__ import annotations

from pathlib import Path

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--junit-per-rank", metavar="DIR", default=None,
                     help="write this rank's JUnit XML report to DIR/rank-<R>.xml")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    # Before pytest's own junitxml plugin reads --junitxml.
    directory = config.getoption("--junit-per-rank")
    if directory is None:
        return
    from mpi4py import MPI  # noqa: PLC0415 - only under mpiexec

    config.option.xmlpath = str(Path(directory) / f"rank-{MPI.COMM_WORLD.Get_rank()}.xml")
