"""Run the MPI tests (``tests/mpi``) under ``mpiexec`` at 1, 2, 3 and 4 ranks.

A plain ``python -m pytest`` does not collect ``tests/mpi`` (see
``tests/conftest.py``); this module starts, for each rank count N::

    mpiexec -n N python -m pytest --with-mpi -q tests/mpi

with the Python that runs this test and the ``mpiexec`` beside it (the
virtual environment's MPICH), else the first on ``PATH``; ``MPIEXEC`` names
another (for example a site's launcher wrapper).  Four ranks on a 2-core
machine are fine: each test's products are small.
"""

from __future__ import annotations

import re
import sys

import pytest
from launcher import find_mpiexec, run_launcher

#: Seconds one whole MPI run of tests/mpi may take before it is killed.
LIMIT = 480


@pytest.mark.parametrize("ranks", [1, 2, 3, 4])
@pytest.mark.timeout(LIMIT + 60)
def test_mpi_suite(ranks):
    mpiexec = find_mpiexec()
    if mpiexec is None:
        pytest.skip("no mpiexec beside this Python or on PATH (pip install -e '.[mpich]' brings one)")
    try:
        import pytest_mpi  # noqa: F401
    except ImportError:
        pytest.skip("pytest-mpi is not installed (pip install -e '.[test]')")
    cmd = [mpiexec, "-n", str(ranks), sys.executable, "-m", "pytest", "--with-mpi", "-q",
           "-p", "no:cacheprovider", "tests/mpi"]
    proc = run_launcher(cmd, LIMIT)
    out = proc.stdout
    assert proc.returncode == 0, f"{' '.join(cmd)} exited {proc.returncode}:\n{out[-20000:]}"
    # Every rank's pytest closes with its own counts (the ranks' lines may interleave).
    passed = re.findall(r"\b(\d+) passed\b", out)
    assert len(passed) == ranks and all(int(n) > 0 for n in passed), f"counts {passed}:\n{out[-20000:]}"
    assert not re.search(r"\b\d+ (failed|errors?)\b", out), out[-20000:]
