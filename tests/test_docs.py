"""The documents say what the code does: every flag, variable and HDF5 name is documented.

A flag added to ``hpcmm/cli.py``, a variable to ``config.ENVIRONMENT`` or a
dataset to the results file without a line in README.md or
docs/hdf5-schema.md fails here.
"""

from __future__ import annotations

import re
import sys

import h5py
import pytest
from launcher import REPO, mpiexec_or_skip, quiet_environment, run_launcher

from hpcmm import cli
from hpcmm.config import ENVIRONMENT

README = (REPO / "README.md").read_text()
SCHEMA = (REPO / "docs" / "hdf5-schema.md").read_text()

RUN_COMMAND = "python3 -m venv .venv && .venv/bin/pip install -e '.[mpich]' && .venv/bin/mpiexec -n 2 .venv/bin/python -m hpcmm"
TEST_COMMAND = "python3 -m venv .venv && .venv/bin/pip install -e '.[mpich,test,plot]' && .venv/bin/python -m pytest"


def all_options() -> set[str]:
    """Every ``--flag`` of every subcommand of the command line."""
    parser = cli.build_parser()
    found = {o for a in parser._actions for o in a.option_strings}
    sub = next(a for a in parser._actions if a.dest == "command")
    for p in sub.choices.values():
        found |= {o for a in p._actions for o in a.option_strings}
    return {o for o in found if o.startswith("--")} - {"--help"}


def test_readme_has_the_two_setup_commands():
    assert RUN_COMMAND in README
    assert TEST_COMMAND in README
    assert "bash tests/gpu/check.sh" in README


def test_ci_runs_exactly_the_readme_test_command():
    ci = (REPO / ".ci" / "run").read_text()
    commands = [line for line in ci.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    assert TEST_COMMAND in commands
    assert "set -euo pipefail" in commands
    # Nothing else that installs or tests.
    others = [c for c in commands if c not in (TEST_COMMAND, "set -euo pipefail")]
    assert all(re.match(r"(cd |echo |export REQUIRE_SLURM=1$)", c) for c in others), others


@pytest.mark.parametrize("option", sorted(all_options()))
def test_readme_documents_every_option(option):
    assert re.search(rf"`{re.escape(option)}\b", README), f"README.md does not document {option}"


@pytest.mark.parametrize("name", sorted(ENVIRONMENT))
def test_readme_documents_every_variable(name):
    assert f"`{name}`" in README


def test_readme_documents_subcommands_and_exit_codes():
    for sub in cli.SUBCOMMANDS:
        assert f"| `{sub}" in README, sub
    for code in ("| 0 |", "| 1 |", "| 2 |"):
        assert code in README


@pytest.fixture(scope="module")
def results_file(tmp_path_factory):
    """A real file with every part: 2 ranks on 2 virtual nodes (transfers), C saved, timeline kept."""
    mpiexec = mpiexec_or_skip()
    out = tmp_path_factory.mktemp("schema") / "all.h5"
    env = quiet_environment()
    env["HPCMM_DEVICE"] = "cpu"
    proc = run_launcher([mpiexec, "-n", "2", sys.executable, "-m", "hpcmm", "--m", "13", "--n", "11", "--k", "7",
                         "--ranks-per-node", "1", "--save-c", "--quiet", "--out", str(out)], 120, env=env)
    assert proc.returncode == 0, proc.stdout
    return out


def test_schema_documents_every_name(results_file):
    """Every group, dataset, table column and attribute of a real file appears in docs/hdf5-schema.md."""
    missing = []

    def documented(name: str) -> bool:
        return f"`{name}`" in SCHEMA or f"`/{name}`" in SCHEMA or re.search(rf"\b\d+ `{re.escape(name)}`", SCHEMA)

    def visit(path, obj):
        leaf = path.rsplit("/", 1)[-1]
        if not (documented(path) or documented(leaf)):
            missing.append(path)
        for attr in obj.attrs:
            if not documented(attr):
                missing.append(f"{path}@{attr}")
        if isinstance(obj, h5py.Dataset) and obj.dtype.names:
            missing.extend(f"{path}.{col}" for col in obj.dtype.names if not documented(col))

    with h5py.File(results_file, "r") as f:
        for attr in f.attrs:
            if not documented(attr):
                missing.append(f"/@{attr}")
        f.visititems(visit)
        names = set()
        f.visit(names.add)
    assert not missing, f"not in docs/hdf5-schema.md: {missing}"
    assert {"summary", "config", "versions", "topology", "timings/step_seconds", "timeline/events",
            "transfers", "memory", "result/C"} <= names


def test_schema_reading_example_runs(results_file, tmp_path, monkeypatch):
    """The h5py example at the end of docs/hdf5-schema.md runs on a real file."""
    code = re.findall(r"```python\n(.*?)```", SCHEMA, re.S)[-1]
    (tmp_path / "hpcmm-results.h5").write_bytes(results_file.read_bytes())
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "docs/hdf5-schema.md", "exec"), {})  # noqa: S102 - our own documentation
