"""tests/mutmut_estimate.py: the full mutation run's worst case, from mutmut's first pass."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from launcher import REPO

# The script reads mutmut's own name helper; mutmut comes with the test extra, not with every GPU
# node's Python.
pytest.importorskip("mutmut", reason="mutmut is not installed (pip install -e '.[test]')")
from mutmut_estimate import estimate  # noqa: E402


def _mutants(tmp_path):
    root = tmp_path / "mutants"
    (root / "hpcmm" / "io").mkdir(parents=True)
    (root / "mutmut-stats.json").write_text(json.dumps({
        "tests_by_mangled_function_name": {"hpcmm.io.a.x_f": ["t1", "t2"], "hpcmm.io.a.x_g": ["t2"]},
        "duration_by_test": {"t1": 3.0, "t2": 0.5, "t_child_only": 40.0}}))
    (root / "hpcmm" / "io" / "a.py.meta").write_text(json.dumps({"exit_code_by_key": {
        "hpcmm.io.a.x_f__mutmut_1": 1, "hpcmm.io.a.x_f__mutmut_2": None, "hpcmm.io.a.x_g__mutmut_1": None,
        "hpcmm.io.a.x_h__mutmut_1": None}}))
    return root


def test_each_mutant_counts_the_tests_of_its_function(tmp_path):
    found = estimate(_mutants(tmp_path))
    row = found["modules"]["hpcmm/io/a.py"]
    assert row == {"mutants": 4, "no_tests": 1, "judged": 1, "worst_s": 3.5 + 3.5 + 0.5}
    assert found["unused_tests"] == {"t_child_only": 40.0} and found["first_pass_s"] == 43.5


def test_the_command_prints_the_total_and_refuses_without_a_first_pass(tmp_path):
    root = _mutants(tmp_path)
    script = REPO / "tests" / "mutmut_estimate.py"
    out = subprocess.run([sys.executable, str(script), "--mutants", str(root)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "all 1 modules" in out.stdout and "0.00 h" in out.stdout and "t_child_only" in out.stdout
    (root / "mutmut-stats.json").unlink()
    out = subprocess.run([sys.executable, str(script), "--mutants", str(root)], capture_output=True, text=True)
    assert out.returncode == 2 and "mutmut-stats.json: not there" in out.stderr


def test_the_launch_only_list_names_a_function_whole_only_where_all_its_parameters_are_unused():
    from mutmut_estimate import launch_only_lines

    seconds = {"tests/a.py::t[1]": 1.0, "tests/a.py::t[2]": 1.0, "tests/a.py::u[x]": 1.0, "tests/a.py::u[y]": 1.0,
               "tests/a.py::v": 1.0, "tests/b.py::w": 1.0}
    unused = {"tests/a.py::t[1]": 1.0, "tests/a.py::t[2]": 1.0, "tests/a.py::u[y]": 1.0, "tests/b.py::w": 1.0}
    assert launch_only_lines(seconds, unused) == ["tests/a.py::t", "tests/a.py::u[y]", "tests/b.py::w"]


def test_the_written_list_is_what_deselect_listed_leaves_out(tmp_path):
    root = tmp_path / "mutants"
    (root / "hpcmm").mkdir(parents=True)
    (root / "mutmut-stats.json").write_text(json.dumps({
        "tests_by_mangled_function_name": {"hpcmm.a.x_f": ["tests/test_k.py::test_in[1]"]},
        "duration_by_test": {"tests/test_k.py::test_in[1]": 1.0, "tests/test_k.py::test_in[2 #3]": 2.0,
                             "tests/test_k.py::test_out": 3.0}}))
    listed = tmp_path / "launch_only.txt"
    script = REPO / "tests" / "mutmut_estimate.py"
    out = subprocess.run([sys.executable, str(script), "--mutants", str(root), "--write-launch-only", str(listed)],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    # A test file like the ones these ids name, collected with and without the list.
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_k.py").write_text(
        "import pytest\n\n@pytest.mark.parametrize('p', ['1', '2 #3'])\ndef test_in(p):\n    pass\n\n"
        "def test_out():\n    pass\n\ndef test_other():\n    pass\n")
    (tmp_path / "tests" / "conftest.py").write_text((REPO / "tests" / "conftest.py").read_text())
    for helper in ("hang_guards.py", "deselect_listed.py"):
        (tmp_path / "tests" / helper).write_text((REPO / "tests" / helper).read_text())
    collect = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "tests"]
    out = subprocess.run([*collect, "--deselect-listed", str(listed)], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    kept = sorted(line for line in out.stdout.splitlines() if line.startswith("tests/"))
    assert kept == ["tests/test_k.py::test_in[1]", "tests/test_k.py::test_other"], out.stdout
    assert "2 deselected" in out.stdout
