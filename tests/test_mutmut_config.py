"""pyproject.toml's [tool.mutmut] test selection: it leaves out exactly the test files that never call hpcmm in
pytest's own process (mutmut would give them no mutant; docs/mutation.md)."""

from __future__ import annotations

import ast

import pytest

from launcher import REPO


def _reaches_hpcmm_in_process(path) -> bool:
    """Whether the test file imports hpcmm anywhere (at the top or inside a test) or asks for the
    ``one_rank`` fixture (tests/conftest.py, which builds hpcmm's topology and backend)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "hpcmm" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "hpcmm":
            return True
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
                a.arg == "one_rank" for a in node.args.args):
            return True
    return False


def _ignored_files() -> set[str]:
    tomllib = pytest.importorskip("tomllib")
    selection = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mutmut"][
        "pytest_add_cli_args_test_selection"]
    return {arg.removeprefix("--ignore=") for arg in selection if arg.startswith("--ignore=tests/test_")}


def test_the_files_left_out_are_those_that_never_call_hpcmm_in_process():
    files = sorted(REPO.glob("tests/test_*.py")) + sorted(REPO.glob("tests/mpi/test_*.py"))
    never = {str(f.relative_to(REPO)) for f in files if not _reaches_hpcmm_in_process(f)}
    assert _ignored_files() == never


def test_the_rule_tells_a_child_process_test_from_an_in_process_one(tmp_path):
    child = tmp_path / "test_child.py"
    child.write_text("import subprocess, sys\n\ndef test_x():\n    subprocess.run([sys.executable, '-m', 'hpcmm'])\n")
    inside = tmp_path / "test_inside.py"
    inside.write_text("def test_x():\n    from hpcmm.layout import Grid\n    assert Grid\n")
    fixture = tmp_path / "test_fixture.py"
    fixture.write_text("def test_x(tmp_path, one_rank):\n    assert one_rank\n")
    assert not _reaches_hpcmm_in_process(child)
    assert _reaches_hpcmm_in_process(inside) and _reaches_hpcmm_in_process(fixture)


def _defined_tests(path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    return {node.name for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}


def test_the_tests_left_out_one_by_one_exist_and_none_asks_for_hpcmm_in_process():
    """tests/mutmut_launch_only.txt: each line a test of an in-process file that is still there, and none of
    them takes the ``one_rank`` fixture (which would put hpcmm in pytest's process)."""
    tomllib = pytest.importorskip("tomllib")
    selection = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mutmut"][
        "pytest_add_cli_args_test_selection"]
    listed = selection[selection.index("--deselect-listed") + 1]
    from deselect_listed import listed_tests  # not conftest: tests/slurm has one of that name too

    for node in sorted(listed_tests(REPO / listed)):
        file, _, name = node.partition("::")
        assert (REPO / file).is_file(), node
        function = name.split("[", 1)[0]
        assert function in _defined_tests(REPO / file), node
        tree = ast.parse((REPO / file).read_text())
        for fn in ast.walk(tree):
            if isinstance(fn, ast.FunctionDef) and fn.name == function:
                assert "one_rank" not in [a.arg for a in fn.args.args], node
