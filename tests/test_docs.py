"""The documents say what the code does: every flag, variable and HDF5 name is documented.

A flag added to ``hpcmm/cli/main.py``, a variable to ``config.ENVIRONMENT`` or a
dataset to the results file without a line in README.md or
docs/hdf5-schema.md fails here.
"""

from __future__ import annotations

import argparse
import re
import sys

import h5py
import pytest
from launcher import REPO, mpiexec_or_skip, quiet_environment, rank_environment, run_launcher

from hpcmm.cli import main as cli
from hpcmm.config import ENVIRONMENT, MAX_PREFETCH, OUTPUT_PATTERN, settings_from_environment
from hpcmm.errors import InputError

README = (REPO / "README.md").read_text()
SCHEMA = (REPO / "docs" / "hdf5-schema.md").read_text()

RUN_COMMAND = "python3 -m venv .venv && .venv/bin/pip install -e '.[mpich]' && .venv/bin/mpiexec -n 2 .venv/bin/python -m hpcmm"
TEST_COMMAND = "python3 -m venv .venv && .venv/bin/pip install -e '.[mpich,test,plot]' && .venv/bin/python -m pytest"


def all_options() -> set[str]:
    """Every ``--flag`` of every subcommand of the command line."""
    found = set()

    def walk(parser):  # the subcommands' parsers, and bench's (gemm, transport)
        for action in parser._actions:
            found.update(action.option_strings)
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    walk(sub)

    walk(cli.build_parser())
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
    # Nothing else that installs or tests, but the parallel HDF5 job, after the suite.
    others = [c for c in commands if c not in (TEST_COMMAND, "set -euo pipefail")]
    assert all(re.match(r"(cd |echo |export REQUIRE_SLURM=1$|bash \.ci/parallel-hdf5$|bash \.ci/pythons$)", c)
               for c in others), others
    assert commands.index("bash .ci/parallel-hdf5") > commands.index(TEST_COMMAND)
    assert commands.index("bash .ci/pythons") > commands.index(TEST_COMMAND)


def test_ci_runs_the_oldest_and_newest_python_the_package_claims():
    """.ci/pythons takes them from pyproject.toml: requires-python's bound and the highest classifier."""
    text = (REPO / "pyproject.toml").read_text()
    low = int(re.search(r'requires-python\s*=\s*">=\s*3\.(\d+)"', text).group(1))
    listed = sorted(int(v) for v in re.findall(r'"Programming Language :: Python :: 3\.(\d+)"', text))
    assert listed == list(range(low, listed[-1] + 1))  # every minor version between them is claimed too
    script = (REPO / ".ci" / "pythons").read_text()
    assert "requires-python" in script and "Programming Language :: Python :: 3" in script
    assert "pip\" install -q -e '.[mpich,test,plot]'" in script and "exit 1" in script
    assert "`.ci/parallel-hdf5`" in README


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
    (tmp_path / "run.h5").write_bytes(results_file.read_bytes())
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "docs/hdf5-schema.md", "exec"), {})  # noqa: S102 - our own documentation


# -- claims of README.md that a test can check -------------------------------------------


def readme_table(heading_line: str) -> list[list[str]]:
    """The rows of the Markdown table whose header line starts with ``heading_line`` (header left out)."""
    lines = README[README.index(heading_line):].splitlines()[1:]
    rows = []
    for line in lines:
        if not line.strip() and not rows:
            continue
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        if not set("".join(cells)) <= set("-: "):
            rows.append(cells)
    return rows


def test_readme_names_the_default_output_file():
    shown = OUTPUT_PATTERN.replace("%Y", "YYYY").replace("%m", "mm").replace("%d", "dd")
    shown = shown.replace("%H", "HH").replace("%M", "MM").replace("%S", "SS") + ".h5"
    assert f"`{shown}`" in README
    assert "hpcmm-results.h5`" not in README  # the old fixed name, which collided


def test_readme_variable_values_are_exactly_what_hpcmm_takes():
    """Every value the variables table lists is accepted; HPCMM_TIMELINE=auto is not."""
    rows = readme_table("| variable | sets | values |")
    assert {r[0].strip("`") for r in rows} == set(ENVIRONMENT)
    for name, _, values in rows:
        name = name.strip("`")
        for value in re.findall(r"`([^`]+)`", values):
            settings_from_environment({name: value})
    for name, value in [("HPCMM_TIMELINE", "auto"), ("HPCMM_PREFETCH", str(MAX_PREFETCH + 1))]:
        with pytest.raises(InputError, match=f"^{name}="):
            settings_from_environment({name: value})
    assert f"0 ≤ D ≤ {MAX_PREFETCH}" in README and f"(0 … {MAX_PREFETCH})" in README


def test_readme_says_which_options_info_takes():
    sub = next(a for a in cli.build_parser()._actions if a.dest == "command")
    info = {o for a in sub.choices["info"]._actions for o in a.option_strings} - {"-h", "--help", "--version",
                                                                                  "--status-file"}
    sentence = re.search(r"`info` takes only (.*?)\):", README, re.S).group(1)
    assert set(re.findall(r"`(--[\w-]+)`", sentence)) == info


def test_readme_exit_zero_row_covers_verify_none(tmp_path):
    """Exit 0 is documented for --verify none, and that is what a run does."""
    row = next(r for r in readme_table("| status | meaning |") if r[0] == "0")
    assert "`--verify none`" in row[1]
    environ = rank_environment("cpu")
    out = tmp_path / "none.h5"
    proc = run_launcher([sys.executable, "-m", "hpcmm", "--m", "9", "--n", "8", "--k", "7", "--verify", "none",
                         "--quiet", "--out", str(out)], 120, cwd=tmp_path, env=environ)
    assert proc.returncode == 0, proc.stdout
    with h5py.File(out, "r") as f:
        assert not bool(f["summary"].attrs["verified"]) and f["summary"].attrs["verify"] == "none"


# -- claims of jobs/README.md ----------------------------------------------------------------

JOBS = REPO / "jobs"
JOBS_README = (JOBS / "README.md").read_text()
SCRIPTS = {p.name: p.read_text() for p in sorted(JOBS.glob("*.sbatch"))}
#: The part every script sources (each script: its settings, then ``source "$common/common.sh"``).
COMMON = (JOBS / "common.sh").read_text()


def test_jobs_readme_lists_exactly_the_settings_the_scripts_read():
    used = set()
    for text in [*SCRIPTS.values(), COMMON]:
        used |= set(re.findall(r"\$\{(JOB_[A-Z_]+)", text))
    table = JOBS_README[JOBS_README.index("| variable | meaning | default |"):].split("\n\n")[0]
    documented = set(re.findall(r"`(JOB_[A-Z_]+)`", table))
    assert used == documented


def test_jobs_readme_exit_statuses_match_the_scripts():
    table = JOBS_README[JOBS_README.index("| exit status | result | cause |"):].split("\n\n")[0]
    rows = {int(m.group(1)): m.group(2) for m in re.finditer(r"^\| (\d) \| `([a-z ]+)", table, re.M)}
    assert sorted(rows) == [0, 1, 2, 3, 4, 5]
    assert "EXIT_ENVIRONMENT=3 " in COMMON and "EXIT_LAUNCHER=4 " in COMMON and "EXIT_UNFINISHED=5 " in COMMON
    for code, word in ((3, "environment: "), (4, "launcher: "), (5, "unfinished: ")):
        assert rows[code] == word.strip(": "), rows
        assert word in COMMON


def test_jobs_readme_default_shapes_match_the_sbatch_lines():
    for script, text in SCRIPTS.items():
        row = next(line for line in JOBS_README.splitlines() if line.startswith(f"| `{script}`"))
        shape = row.rsplit("|", 2)[-2]
        nodes = re.search(r"^#SBATCH --nodes=(\d+)", text, re.M).group(1)
        assert f"{nodes} node" in shape, (script, shape)
        gpus = re.search(r"^#SBATCH --gpus-per-node=(\d+)", text, re.M)
        if gpus:
            assert f"× {gpus.group(1)} GPUs" in shape, (script, shape)
        size = re.search(r'^: "\$\{JOB_M:=(\d+)\}"', text, re.M)
        if size:
            assert f"{size.group(1)}³" in shape, (script, shape)


def test_jobs_readme_speaks_of_what_exists():
    assert "planned" not in JOBS_README
    for sub in re.findall(r"python -m hpcmm (\w+)", JOBS_README):
        assert sub in cli.SUBCOMMANDS, sub
    for script in re.findall(r"jobs/([\w-]+\.sbatch)", JOBS_README):
        assert script in SCRIPTS, script
    assert "HDF5_USE_FILE_LOCKING=FALSE" in JOBS_README
    assert "export HDF5_USE_FILE_LOCKING=${HDF5_USE_FILE_LOCKING:-FALSE}" in COMMON
    for text in [*SCRIPTS.values(), COMMON]:
        assert 'source "$common/common.sh"' in text or text is COMMON
        assert "--mpi=pmi2" not in text  # the site's default plugin, unless the user names one


def _section(text: str, heading: str) -> str:
    """The Markdown section under ``heading``, up to the next heading of its level."""
    start = text.index(heading + "\n")
    end = text.find("\n## ", start + len(heading))
    return text[start:] if end < 0 else text[start:end]


def _anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    words = re.sub(r"[^\w\- ]", "", heading.lstrip("#").strip().lower())
    return words.replace(" ", "-")


def test_jobs_readme_mps_claims_match_the_scripts():
    """The MPS option's name, values, default, scripts and log lines are the scripts' own."""
    mps = _section(JOBS_README, "## Several ranks per GPU: MPS")
    table = mps[mps.index("| `JOB_MPS` | a daemon on each node of the step |"):].split("\n\n")[0]
    rows = re.findall(r"^\| `(\w+)`( \(default\))? \|", table, re.M)
    values = [value for value, _ in rows[1:]]
    defaults = [value for value, default in rows if default]
    settings = JOBS_README[JOBS_README.index("| variable | meaning | default |"):].split("\n\n")[0]
    row = next(line for line in settings.splitlines() if line.startswith("| `JOB_MPS` |"))
    assert row.endswith(f"| `{defaults[0]}` |"), row
    assert f"#{_anchor('## Several ranks per GPU: MPS')})" in row, row
    for name, text in SCRIPTS.items():
        # The values the scripts accept, in the order of their error message.
        accepted = re.search(r"^case \$\{JOB_MPS:-(\w+)\} in\n([\w |]+)\) ;;$", COMMON, re.M)
        assert accepted, name
        assert accepted.group(1) == defaults[0] == "auto"
        assert [v.strip() for v in accepted.group(2).split("|")] == values == ["auto", "on", "off"]
        assert f"JOB_MPS=$JOB_MPS: expected {', '.join(values[:-1])} or {values[-1]}" in COMMON
        # GPU scripts (those with a --gpus-per-node line) decide MPS for their steps; cpu-smoke never.
        gpu_script = re.search(r"^#SBATCH --gpus-per-node=", text, re.M) is not None
        # (scaling.sbatch through scaling_study, which decides MPS for each point: common.sh's scaling_point)
        assert (re.search(r'^\s*(mps_plan "|scaling_study$)', text, re.M) is not None) == gpu_script, name
        assert (f"`{name}`" in mps.split("\n\n")[1]) == gpu_script, name
        if gpu_script:
            assert re.search(r"^#   JOB_MPS +auto \(default\)", text, re.M), f"{name}: header lacks JOB_MPS"
    assert re.search(r'^scaling_point\(\) \{.*?^    mps_plan "', COMMON, re.S | re.M)
    common = COMMON
    for command in ("nvidia-cuda-mps-control -d", "echo quit | nvidia-cuda-mps-control",
                    "CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY", "/tmp/hpcmm-mps-"):
        assert command in mps and command in common, command
    assert "compute mode" in mps and "nvidia-smi" not in common  # no GPU setting changes
    # Each log line the section quotes is one the scripts print (up to its first variable part).
    lines = re.findall(r"^MPS: .*$", mps, re.M)
    assert len(lines) >= 7, lines
    for line in lines:
        fixed = re.split(r"\d|\(", line.split(": ", 1)[1] if line.startswith("MPS: not") else
                         re.sub(r"^MPS: \S+: ", "", line).replace("MPS: ", ""))[0].strip()
        assert fixed and fixed in common, (line, fixed)


def test_jobs_readme_mps_recipe_is_the_shared_gpus_one():
    """The plain-mpiexec recipe of jobs/README.md is docs/shared-gpus.md's, and the links resolve."""
    shared = (REPO / "docs" / "shared-gpus.md").read_text()
    mps = _section(JOBS_README, "## Several ranks per GPU: MPS")
    for link in re.findall(r"\]\(\.\./docs/shared-gpus\.md(#[\w-]+)?\)", mps):
        if link:
            headings = re.findall(r"^#+ .*$", shared, re.M)
            assert link[1:] in {_anchor(h) for h in headings}, link
    recipe = re.findall(r"```bash\n(.*?)```", mps, re.S)[-1].splitlines()
    original = re.findall(r"```bash\n(.*?)```", shared, re.S)[0].splitlines()
    same = [line for line in recipe if line.startswith(("export CUDA_MPS", "mkdir", "nvidia-cuda", "trap"))]
    assert len(same) == 4 and all(line in original for line in same), same


# -- claims of docs/performance.md and docs/scaling.md ----------------------------------------


@pytest.mark.parametrize("page", ["performance.md", "scaling.md"])
def test_speed_pages_name_what_exists(page):
    """Every option, variable and file the pages name exists: hpcmm's options and HPCMM_* variables, the
    jobs' JOB_* settings, and each repository path (data files of benchmarks/results/, scripts, modules)."""
    text = (REPO / "docs" / page).read_text()
    for option in set(re.findall(r"(?<![\w-])(--[a-z][\w-]*)", text)):
        assert option in all_options(), f"{page}: {option}"
    for name in set(re.findall(r"\bHPCMM_[A-Z_]+", text)):
        assert name in ENVIRONMENT, f"{page}: {name}"
    for name in set(re.findall(r"\bJOB_[A-Z_]+", text)):
        assert f"`{name}`" in JOBS_README, f"{page}: {name}"
    named = set(re.findall(r"`((?:benchmarks/results|tests|hpcmm|jobs)/[\w./-]+)`", text))
    named |= {"benchmarks/results/2026-11-30/" + f for f in re.findall(r"`([\w-]+\.(?:json|csv))`", text)}
    assert named, page
    for path in named:
        assert (REPO / path).exists(), f"{page}: {path}"


# -- the package: licence, metadata, the console script ------------------------------------------


def test_the_package_is_complete():
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    licence = (REPO / "LICENSE").read_text()
    assert project["license"] == "BSD-3-Clause" and project["license-files"] == ["LICENSE"]
    assert licence.startswith("BSD 3-Clause License\n\nCopyright (c) 2026, the hpcmm developers\n")
    assert "Neither the name of the copyright holder" in licence
    classifiers = project["classifiers"]
    low = re.search(r">=\s*3\.(\d+)", project["requires-python"]).group(1)
    assert f"Programming Language :: Python :: 3.{low}" in classifiers
    assert not [c for c in classifiers if c.startswith("License ::")]  # the SPDX expression says it
    assert {"Homepage", "Documentation", "Source", "Issues"} <= set(project["urls"])
    # The console script starts as `python -m hpcmm` does (hpcmm.cli.startup.launch), and the README says so.
    assert project["scripts"] == {"hpcmm": "hpcmm.cli.startup:launch"}
    assert "`hpcmm ...`" in README and ".venv/bin/hpcmm" in README
