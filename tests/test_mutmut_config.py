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


def test_every_module_is_in_one_group_of_the_full_run():
    """tests/mutmut_all.py's groups: every module of hpcmm/ that holds a mutant is judged by one group, and
    every test path a group names exists (a module added later must be given its tests there)."""
    import mutmut_all

    assert mutmut_all.problems() == []


def test_the_modules_said_to_hold_no_mutant_have_no_function_mutmut_mutates():
    """mutmut 3 mutates functions and methods, leaving decorated ones alone (other than static and class
    methods): NO_MUTANTS must hold none of those."""
    import mutmut_all

    for module in mutmut_all.NO_MUTANTS:
        tree = ast.parse((REPO / module).read_text())
        mutated = [node.name for node in ast.walk(tree)
                   if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                   and all(ast.unparse(d) in ("staticmethod", "classmethod") for d in node.decorator_list)]
        assert mutated == [], module


def test_a_problem_in_the_groups_is_named(tmp_path):
    import mutmut_all

    (tmp_path / "hpcmm").mkdir()
    (tmp_path / "hpcmm" / "new_module.py").write_text("def f():\n    return 1\n")
    found = mutmut_all.problems(tmp_path)
    assert "hpcmm/new_module.py: in no group and not in NO_MUTANTS" in found
    assert "hpcmm/verify.py: no such module" in found
    assert any(p.startswith("hpcmm/verify.py: no test file tests/test_verify.py") for p in found)


def test_a_groups_test_paths_leave_option_values_out():
    import mutmut_all

    tests = ('tests/a.py tests/b.py::test_x -k "not c and not d.py" --deselect-listed tests/list.txt'
             ' -m "not gpu" --with-mpi')
    assert mutmut_all.test_paths(tests) == ["tests/a.py", "tests/b.py::test_x", "tests/list.txt"]


def test_the_summary_counts_each_verdict_by_module(tmp_path):
    """The kept ``.meta`` files (mutmut's exit codes: 1 killed, -24 timeout, 0 survived, 33 no tests, None not
    run, anything else a crashed test process) become the table's rows and totals."""
    import json

    import mutmut_all

    meta = tmp_path / "hpcmm" / "verify.py.meta"
    meta.parent.mkdir(parents=True)
    codes = {"a": 1, "b": 1, "c": -24, "d": 0, "e": 33, "f": None, "g": -11}
    meta.write_text(json.dumps({"exit_code_by_key": {f"hpcmm.verify.x_{k}": v for k, v in codes.items()}}))
    other = tmp_path / "hpcmm" / "errors.py.meta"
    other.write_text(json.dumps({"exit_code_by_key": {"hpcmm.errors.x_a": 0}}))
    results = mutmut_all.read_module_results(tmp_path)
    assert results["hpcmm/verify.py"] == {"mutants": 7, "killed": 3, "timeouts": 1, "survived": 1,
                                          "no tests": 1, "not run": 1, "crashed": 1}
    table = mutmut_all.summary_table(results, {"hpcmm/verify.py": 90.0, "hpcmm/cli/summary.py (+1)": 30.0})
    assert "| hpcmm/verify.py | 7 | 3 (1) | 1 | 1 | 1 | 1 | 1.5 |" in table
    assert "| hpcmm/errors.py | 1 | 0 (0) | 1 | 0 | 0 | 0 |  |" in table
    assert "| total | 8 | 3 (1) | 2 | 1 | 1 | 1 | 2.0 |" in table
    assert "Killed: 3 of the 5 mutants that tests reach and judge (60.0 %)" in table


def test_a_group_ended_by_a_signal_stops_the_run_and_keeps_no_time(tmp_path, monkeypatch):
    """The first group finishes, the second's mutmut is killed: its verdicts so far are kept, its minutes are
    not (a partial group would pass for a whole one), and no later group starts."""
    import json
    import subprocess

    import mutmut_all

    groups = mutmut_all.GROUPS[:3]
    started = []

    def fake_mutmut(command, cwd, check):
        started.append(command)
        module = command[command.index("--mutate") + 1]
        meta = tmp_path / "mutants" / (module + ".meta")
        meta.parent.mkdir(parents=True, exist_ok=True)
        meta.write_text(json.dumps({"exit_code_by_key": {"x_a": 1, "x_b": None}}))
        return subprocess.CompletedProcess(command, -9 if len(started) == 2 else 0)

    monkeypatch.setattr(mutmut_all, "REPO", tmp_path)
    monkeypatch.setattr(mutmut_all.subprocess, "run", fake_mutmut)
    kept = tmp_path / "kept"
    assert mutmut_all.run(groups, kept, 1) == 137
    assert len(started) == 2
    seconds = json.loads((kept / "seconds.json").read_text())
    assert list(seconds) == [groups[0].name]
    assert (kept / "meta" / (groups[1].modules[0] + ".meta")).is_file()


def test_the_survivors_are_shown_as_diffs_of_the_tree(tmp_path):
    """Only survivors are shown (not killed ones), each as the diff mutmut would show, made from the module."""
    import json

    import mutmut_all

    pytest.importorskip("mutmut")
    module = tmp_path / "hpcmm" / "tiny.py"
    module.parent.mkdir(parents=True)
    module.write_text("def grow(a):\n    return a + 1\n")
    kept = tmp_path / "kept"
    (kept / "hpcmm").mkdir(parents=True)
    codes = {"hpcmm.tiny.x_grow__mutmut_1": 0, "hpcmm.tiny.x_grow__mutmut_2": 1}
    (kept / "hpcmm" / "tiny.py.meta").write_text(json.dumps({"exit_code_by_key": codes}))
    shown = mutmut_all.survivor_diffs(kept, None, root=tmp_path)
    assert shown.startswith("# hpcmm.tiny.x_grow__mutmut_1: survived\n")
    assert "-    return a + 1" in shown and "__mutmut_2" not in shown
    assert mutmut_all.survivor_diffs(kept, ["hpcmm/other.py"], root=tmp_path) == ""
