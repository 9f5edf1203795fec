"""Run the MPI tests (``tests/mpi``) under ``mpiexec`` at 1, 2, 3 and 4 ranks.

A plain ``python -m pytest`` does not collect ``tests/mpi`` (see
``tests/conftest.py``); this module starts, for each rank count N::

    mpiexec -n N python -m pytest --with-mpi -q tests/mpi --junit-per-rank DIR

with the Python that runs this test and the ``mpiexec`` beside it (the
virtual environment's MPICH), else the first on ``PATH``; ``MPIEXEC`` names
another (for example a site's launcher wrapper).  Four ranks on a 2-core
machine are fine: each test's products are small.

Every rank writes its own JUnit XML report (``tests/mpi/conftest.py``), and the
verdict comes from those N files: the launcher's stdout mixes the ranks' lines,
which can arrive cut or glued together, so it is shown, never parsed.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from hang_guards import MPI_TIMEOUT
from launcher import mpiexec_or_skip, run_launcher
from test_reliability_budget import quiet_within

#: The backstop of one whole MPI run of tests/mpi (pytest-timeout).  The run's own hang guard is
#: its progress: pytest prints a mark per test, and a run silent for longer than one test's
#: limit (MPI_TIMEOUT, after which that test's watchdog ends it) plus a few launches is ended.
BACKSTOP = 3600


def rank_report(path: Path) -> tuple[dict[str, int], list[str]]:
    """Counts (tests, failures, errors, skipped, passed) and the failing tests of one rank's report.

    Raises
    ------
    AssertionError
        The report is missing or not a JUnit XML file (the rank died or never ran pytest).
    """
    assert path.is_file(), f"{path.name}: no report (the rank ended before pytest wrote it)"
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as exc:
        raise AssertionError(f"{path.name}: not a JUnit XML report ({exc})") from None
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    counts = {key: sum(int(s.get(key, 0)) for s in suites) for key in ("tests", "failures", "errors", "skipped")}
    counts["passed"] = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    failing = []
    for case in root.iter("testcase"):
        for bad in [*case.findall("failure"), *case.findall("error")]:
            detail = (bad.text or bad.get("message") or "").strip()
            failing.append(f"{case.get('classname')}::{case.get('name')} ({bad.tag}):\n{detail[-4000:]}")
    return counts, failing


def suite_verdict(directory: Path, ranks: int) -> list[str]:
    """What went wrong, rank by rank (empty: every rank ran its tests and none failed)."""
    problems = []
    for rank in range(ranks):
        try:
            counts, failing = rank_report(directory / f"rank-{rank}.xml")
        except AssertionError as exc:
            problems.append(f"rank {rank}: {exc}")
            continue
        if failing:
            problems.append(f"rank {rank}: {counts}\n" + "\n".join(failing))
        elif counts["passed"] <= 0:
            problems.append(f"rank {rank}: no test passed {counts}")
    return problems


@pytest.mark.parametrize("ranks", [1, 2, 3, 4])
@pytest.mark.timeout(BACKSTOP)
def test_mpi_suite(ranks, tmp_path):
    mpiexec = mpiexec_or_skip()
    try:
        import pytest_mpi  # noqa: F401
    except ImportError:
        pytest.skip("pytest-mpi is not installed (pip install -e '.[test]')")
    cmd = [mpiexec, "-n", str(ranks), sys.executable, "-m", "pytest", "--with-mpi", "-q",
           "-p", "no:cacheprovider", "tests/mpi", "--junit-per-rank", str(tmp_path)]
    proc = run_launcher(cmd, None, stall=MPI_TIMEOUT + quiet_within())
    problems = suite_verdict(tmp_path, ranks)
    assert not problems, "\n\n".join(problems) + f"\n\nlauncher output (last part):\n{proc.stdout[-8000:]}"
    assert proc.returncode == 0, f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout[-20000:]}"


# -- the verdict itself, on reports written here ---------------------------------------
_PASSING = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" errors="0"
failures="0" skipped="1" tests="3"><testcase classname="t" name="a"/><testcase classname="t" name="b"/>
<testcase classname="t" name="c"><skipped message="x"/></testcase></testsuite></testsuites>"""
_FAILING = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" errors="0"
failures="1" skipped="0" tests="2"><testcase classname="t" name="a"/><testcase classname="t" name="b">
<failure message="assert 1 == 2">rank 1 saw 1 == 2</failure></testcase></testsuite></testsuites>"""


def test_verdict_reads_every_rank(tmp_path):
    for rank in range(3):
        (tmp_path / f"rank-{rank}.xml").write_text(_PASSING)
    assert suite_verdict(tmp_path, 3) == []


def test_verdict_names_the_failing_rank_and_test(tmp_path):
    (tmp_path / "rank-0.xml").write_text(_PASSING)
    (tmp_path / "rank-1.xml").write_text(_FAILING)
    (problem,) = suite_verdict(tmp_path, 2)
    assert problem.startswith("rank 1:") and "t::b (failure)" in problem and "rank 1 saw 1 == 2" in problem


def test_verdict_fails_a_rank_that_wrote_nothing_or_garbage(tmp_path):
    (tmp_path / "rank-0.xml").write_text(_PASSING)
    (tmp_path / "rank-2.xml").write_text(_PASSING[:60])
    problems = suite_verdict(tmp_path, 3)
    assert [p.split(":")[0] for p in problems] == ["rank 1", "rank 2"]
    assert "no report" in problems[0] and "not a JUnit XML report" in problems[1]


def test_verdict_fails_a_rank_where_nothing_passed(tmp_path):
    (tmp_path / "rank-0.xml").write_text(_PASSING.replace('skipped="1" tests="3"', 'skipped="3" tests="3"'))
    (problem,) = suite_verdict(tmp_path, 1)
    assert "no test passed" in problem
