"""The command line called in this process: parsing, refusals, one exit status, one error line, dispatch.

Written against the mutants that mutation testing of hpcmm/cli/main.py left alive (docs/mutation.md).
The command line's own tests start hpcmm as a child process, which mutation testing cannot follow;
these call :func:`hpcmm.cli.main.main` and its parts here, at one rank.  What other ranks bring to
the job's agreements (:func:`~hpcmm.cli.main.settle`, the ``--help`` check of an MPMD launch) comes
from a scripted stand-in communicator: this process as one rank of a job, the others' answers given.
"""

from __future__ import annotations

import io
import os
import sys

import h5py
import pytest
from mpi4py import MPI

import hpcmm
from hpcmm.cli import main as cli
from hpcmm.errors import InputError
from hpcmm.io import h5io

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

SMALL = ["--device", "cpu", "--m", "9", "--n", "7", "--k", "5", "--warmup", "0", "--iters", "1", "--quiet"]


@pytest.fixture(autouse=True)
def _plain(monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")
    monkeypatch.setattr(sys, "argv", ["/repo/hpcmm/__main__.py"])
    for name in [n for n in os.environ if n.startswith("HPCMM_")]:
        monkeypatch.delenv(name)


# -- parse: the default subcommands and the refusals -------------------------------------------


@pytest.mark.parametrize("argv, command", [
    ([], "run"), (["--m", "5"], "run"), (["run", "--m", "5"], "run"), (["info"], "info"),
    (["report", "r.h5"], "report"), (["model", "show"], "model"), (["bench"], "bench"),
], ids=["nothing", "options", "run", "info", "report", "model", "bench"])
def test_run_is_the_default_subcommand(argv, command):
    assert cli.parse(argv).command == command


def test_a_word_before_the_subcommand_makes_it_runs_argument():
    """The first word that is not an option names the subcommand; after an option's value it is too late."""
    with pytest.raises(InputError) as caught:
        cli.parse(["--device", "cpu", "info"])
    assert str(caught.value) == "unrecognized arguments: info"


def test_a_subcommand_after_an_unknown_option_is_still_the_subcommand():
    """``--bogus info``: the subcommand is info (the first word), and the top level refuses the option."""
    with pytest.raises(InputError) as caught:
        cli.parse(["--bogus", "info"])
    assert str(caught.value) == "unrecognized arguments: --bogus"


def test_help_after_a_run_option_is_runs_help():
    assert cli._parse_or_show(["--quiet", "--help"]).text.startswith("usage: python -m hpcmm run [-h]")
    assert cli._parse_or_show(["--quiet", "--version"]).text == f"hpcmm {hpcmm.__version__}\n"


@pytest.mark.parametrize("argv, what", [
    (["bench"], "gemm"), (["bench", "--no-peers"], "gemm"), (["bench", "gemm"], "gemm"),
    (["bench", "transport"], "transport"),
], ids=["alone", "options", "gemm", "transport"])
def test_gemm_is_benchs_default(argv, what):
    assert cli.parse(argv).what == what


def test_transport_after_an_option_says_where_it_goes(monkeypatch):
    with pytest.raises(InputError) as caught:
        cli.parse(["bench", "--no-peers", "transport"])
    assert str(caught.value) == "'transport' goes right after 'bench': python -m hpcmm bench transport [options]"
    monkeypatch.setattr(sys, "argv", ["/bin/hpcmm"])
    with pytest.raises(InputError) as caught:
        cli.parse(["bench", "--no-peers", "transport"])
    assert str(caught.value) == "'transport' goes right after 'bench': hpcmm bench transport [options]"


_BAD = [
    (["--bogus"], "unrecognized arguments: --bogus"),
    (["--m", "x"], "argument --m: --m='x': expected an integer >= 1"),
    (["--m", "0"], "argument --m: --m=0: expected an integer >= 1"),
    (["--n", "0"], "argument --n: --n=0: expected an integer >= 1"),
    (["--k", "0"], "argument --k: --k=0: expected an integer >= 1"),
    (["--iters", "0"], "argument --iters: --iters=0: expected an integer >= 1"),
    (["--panel", "0"], "argument --panel: --panel=0: expected an integer >= 1"),
    (["--ranks-per-node", "0"], "argument --ranks-per-node: --ranks-per-node=0: expected an integer >= 1"),
    (["--warmup", "-1"], "argument --warmup: --warmup=-1: expected an integer >= 0"),
    (["--seed", "-1"], "argument --seed: --seed=-1: expected an integer >= 0"),
    (["--prefetch", "9"], "argument --prefetch: --prefetch=9: expected an integer from 0 to 8"),
    (["--prefetch", "-1"], "argument --prefetch: --prefetch=-1: expected an integer from 0 to 8"),
    (["bench", "--heat-limit", "0"], "argument --heat-limit: --heat-limit=0: expected an integer >= 1"),
    (["report", "r.h5", "--iteration", "-1"], "argument --iteration: --iteration=-1: expected an integer >= 0"),
    (["--grid", "3"], "argument --grid: --grid='3': expected PRxPC with positive integers, e.g. 2x4"),
    (["--alpha", "nan"], "argument --alpha: --alpha='nan': expected a finite number"),
    (["--beta", "inf"], "argument --beta: --beta='inf': expected a finite number"),
    (["--a", "x"], "argument --a: --a='x': expected FILE.h5:DATASET or FILE.npy"),
    (["--b", "x"], "argument --b: --b='x': expected FILE.h5:DATASET or FILE.npy"),
    (["--device", "tpu"], "argument --device: invalid choice: 'tpu' (choose from 'auto', 'gpu', 'cpu')"),
    (["info", "--device", "tpu"], "argument --device: invalid choice: 'tpu' (choose from 'auto', 'gpu', 'cpu')"),
    (["--cuda-aware-mpi", "maybe"],
     "argument --cuda-aware-mpi: invalid choice: 'maybe' (choose from 'auto', 'yes', 'no')"),
    (["--algo", "fast"], "argument --algo: --algo='fast': expected summa, 2.5d, 2.5d:C (C an integer >= 1) or auto"),
]


@pytest.mark.parametrize("argv, message", _BAD,
                         ids=["_".join(argv).replace("-", "").replace(".", "") for argv, _ in _BAD])
def test_bad_arguments_are_one_line_each(argv, message):
    with pytest.raises(InputError) as caught:
        cli.parse(argv)
    assert str(caught.value) == message


@pytest.mark.parametrize("argv, field, value", [
    (["--seed", "0"], "seed", 0), (["--warmup", "0"], "warmup", 0), (["--prefetch", "0"], "prefetch", 0),
    (["--prefetch", "8"], "prefetch", 8), (["--m", "1"], "m", 1), (["--iters", "1"], "iters", 1),
    (["--alpha", "-0.5"], "alpha", -0.5), (["--beta", "2"], "beta", 2.0), (["--grid", "2x3"], "grid", (2, 3)),
    (["--algo", "2.5D:4"], "algo", "2.5d:4"), (["--a", "x.h5:A"], "a", ("x.h5", "A")),
    (["--b", "y.npy"], "b", ("y.npy", None)), (["report", "r.h5", "--iteration", "0"], "iteration", 0),
    (["bench", "--heat-limit", "1"], "heat_limit", 1),
], ids=["seed", "warmup", "prefetch0", "prefetch8", "m", "iters", "alpha", "beta", "grid", "algo", "a", "b",
        "iteration", "heat_limit"])
def test_edges_that_are_accepted(argv, field, value):
    assert getattr(cli.parse(argv), field) == value


def test_a_flag_not_given_is_none_so_that_the_environment_may_set_it():
    ns = cli.parse([])
    for field in ("tf32", "allow_nonfinite", "save_c", "timeline", "quiet", "overwrite", "m", "dtype"):
        assert getattr(ns, field) is None, field
    ns = cli.parse(["--tf32", "--allow-nonfinite", "--save-c", "--no-timeline", "--quiet", "--overwrite"])
    assert (ns.tf32, ns.allow_nonfinite, ns.save_c, ns.timeline, ns.quiet, ns.overwrite) == (
        True, True, True, False, True, True)


# -- help and version ---------------------------------------------------------------------------


def test_version_is_kept_not_printed(capsys):
    shown = cli._parse_or_show(["--version"])
    assert shown == cli._Shown(f"hpcmm {hpcmm.__version__}\n", 0)
    shown = cli._parse_or_show(["info", "--version"])
    assert shown == cli._Shown(f"hpcmm {hpcmm.__version__}\n", 0)
    assert capsys.readouterr() == ("", "")


def test_help_of_the_top_level_and_of_a_subcommand():
    top = cli._parse_or_show(["-h"])
    assert top.status == 0 and top.text.startswith("usage: python -m hpcmm [-h] [--version] "
                                                   "{run,info,bench,report,model} ...\n")
    assert "'python -m hpcmm --m 4096' is 'python -m hpcmm run --m 4096'" in top.text
    assert cli._parse_or_show(["--help"]) == top
    run = cli._parse_or_show(["--m", "4", "--help"])
    assert run.status == 0 and run.text.startswith("usage: python -m hpcmm run [-h] [--m M]")
    bench = cli._parse_or_show(["bench", "-h"])
    assert bench.text.startswith("usage: python -m hpcmm bench [-h] {gemm,transport} ...\n")
    assert cli._parse_or_show(["bench", "--help"]) == bench
    gemm = cli._parse_or_show(["bench", "--help", "--no-peers"])
    assert gemm.text.startswith("usage: python -m hpcmm bench [-h] {gemm,transport} ...")


def test_the_output_and_status_options_as_help_shows_them():
    lines = cli._parse_or_show(["run", "--help"]).text.splitlines()
    assert ("  --status-file PATH    rank 0 writes the exit status and a one-line reason to PATH at the end (batch "
            "scripts read it); written atomically (default: none)") in lines
    assert ("  --out FILE.h5         results file; never replaced without --overwrite (default: a new name, "
            "hpcmm-results-YYYYmmdd-HHMMSS.h5, printed at the end)") in lines
    assert "  --overwrite           replace an existing --out (default: refuse)" in lines
    assert "placement:" in lines and "measurement and output:" in lines


def test_outside_the_collective_parse_argparse_prints_and_exits(capsys):
    """Only :func:`_parse_or_show` keeps the texts; a plain parse prints them and exits, as argparse does."""
    cli._parse_or_show(["--version"])
    with pytest.raises(SystemExit) as caught:
        cli.parse(["--version"])
    assert caught.value.code == 0
    assert capsys.readouterr().out == f"hpcmm {hpcmm.__version__}\n"


def test_the_console_script_and_the_module_name_themselves(monkeypatch):
    assert cli.program_name() == "python -m hpcmm"
    monkeypatch.setattr(sys, "argv", ["/x/bin/hpcmm"])
    assert cli.program_name() == "hpcmm"
    monkeypatch.setattr(sys, "argv", [])
    assert cli.program_name() == "python -m hpcmm"


def test_default_names_as_the_help_shows_them():
    assert cli._pattern("bench") == "hpcmm-bench-YYYYmmdd-HHMMSS.h5"
    assert cli._pattern("results") == "hpcmm-results-YYYYmmdd-HHMMSS.h5"
    assert "(default: a new name, hpcmm-results-YYYYmmdd-HHMMSS.h5, printed at the end)" in \
        cli._parse_or_show(["run", "-h"]).text


# -- config_from ------------------------------------------------------------------------------


def test_config_from_records_the_command_line_and_the_sources(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    config = cli.config_from(cli.parse(["--m", "6", "--prefetch", "0"]), {"HPCMM_PANEL": "8", "HPCMM_PREFETCH": "2"},
                             argv=["--m", "6", "--prefetch", "0"])
    assert config.argv == ("python -m hpcmm", "--m", "6", "--prefetch", "0")
    assert (config.m, config.prefetch, config.panel) == (6, 0, 8)
    assert config.from_environment == frozenset({"panel"})
    assert config.out.startswith("hpcmm-results-") and config.out.endswith(".h5")
    assert cli.config_from(cli.parse([]), {}).argv is None
    assert cli.config_from(cli.parse(["info"]), {}).out != config.out
    assert cli.config_from(cli.parse(["--out", "mine.h5"]), {}).out == "mine.h5"


# -- settle: one exit status, one line ---------------------------------------------------------


class _Request:
    def __init__(self, tests: int | None):
        self.left = tests  # None: never done

    def Test(self):  # noqa: N802 - MPI's spelling
        if self.left is None:
            return False
        self.left -= 1
        return self.left < 0


class _Rank:
    """This process as rank ``rank`` of a job; ``others`` are what the other ranks bring, collective by collective."""

    def __init__(self, rank: int, size: int, others: list[list], barrier_tests: int | None = 0):
        self.rank, self.size, self.others, self.tests = rank, size, list(others), barrier_tests
        self.aborted = None

    def Get_rank(self):  # noqa: N802
        return self.rank

    def Get_size(self):  # noqa: N802
        return self.size

    def Ibarrier(self):  # noqa: N802
        return _Request(self.tests)

    def allgather(self, value):
        rest = self.others.pop(0)
        return [*rest[:self.rank], value, *rest[self.rank:]]

    def Dup(self):  # noqa: N802
        return self

    def Free(self):  # noqa: N802
        pass

    def Abort(self, code):  # noqa: N802
        self.aborted = code


def test_settle_without_failures_is_silent(capsys):
    assert cli.settle(_Rank(0, 3, [[(0, None), (0, None)]], barrier_tests=3), 0, None) == 0
    assert capsys.readouterr() == ("", "")


def test_settle_prints_the_lowest_failing_ranks_line_once_with_its_rank(capsys):
    outcomes = [(0, None), (2, "hpcmm: error: bad")]  # ranks 0 and 2 of three; rank 1 is this one
    assert cli.settle(_Rank(1, 3, [outcomes]), 1, "hpcmm: error: worse") == 1
    assert capsys.readouterr() == ("", "hpcmm: error: worse (raised by rank 1)\n")
    # Rank 2 fails too, with another status: rank 1's wins, and rank 2 prints nothing.
    assert cli.settle(_Rank(2, 3, [[(0, None), (1, "hpcmm: error: worse")]]), 2, "hpcmm: error: bad") == 1
    # Rank 0 has no error: it prints nothing and takes rank 1's status.
    assert cli.settle(_Rank(0, 3, [[(1, "hpcmm: error: worse"), (2, "x")]]), 0, None) == 1
    assert capsys.readouterr() == ("", "")


def test_settle_names_no_rank_for_rank_0_nor_twice(capsys):
    assert cli.settle(_Rank(0, 2, [[(2, "y")]]), 2, "hpcmm: error: at 0") == 2
    assert cli.settle(_Rank(1, 2, [[(0, None)]]), 2, "hpcmm: error: x (raised by rank 3)") == 2
    assert capsys.readouterr().err == "hpcmm: error: at 0\nhpcmm: error: x (raised by rank 3)\n"


def test_settle_with_a_status_and_no_line_prints_nothing(capsys):
    assert cli.settle(_Rank(1, 2, [[(0, None)]]), 1, None) == 1
    assert capsys.readouterr() == ("", "")


def test_a_rank_with_an_error_stops_waiting_for_the_others():
    assert cli.settle(_Rank(1, 2, [], barrier_tests=None), 2, "hpcmm: error: x", wait=0.0) is None


def test_a_rank_with_an_error_waits_for_others_that_come_in_time(capsys):
    assert cli.settle(_Rank(1, 2, [[(0, None)]], barrier_tests=3), 2, "hpcmm: error: x") == 2
    assert capsys.readouterr().err == "hpcmm: error: x (raised by rank 1)\n"


def test_a_rank_without_an_error_waits_as_long_as_the_others_take():
    assert cli.settle(_Rank(0, 2, [[(0, None)]], barrier_tests=50), 0, None, wait=0.0) == 0


# -- main: the exit status and the error line ------------------------------------------------------


def test_main_reads_the_command_line_of_the_process(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["/x/bin/hpcmm", "--version"])
    assert cli.main() == 0
    assert capsys.readouterr().out == f"hpcmm {hpcmm.__version__}\n"


def test_main_prints_a_bad_argument_once_and_exits_2(capsys):
    assert cli.main(["--m", "0"]) == 2
    assert capsys.readouterr() == ("", "hpcmm: error: argument --m: --m=0: expected an integer >= 1\n")


def test_main_writes_the_reason_into_the_status_file(tmp_path, capsys):
    status = tmp_path / "status.txt"
    assert cli.main(["--m", "0", "--status-file", str(status)]) == 2
    assert status.read_text() == ("state=finished\nexit=2\nreason=bad input: argument --m: --m=0: expected an "
                                  "integer >= 1\nranks=1\ncommand=run\n")


def test_a_rank_that_failed_alone_aborts_the_job(monkeypatch, capsys):
    world = _Rank(3, 4, [[None, None, None]])
    monkeypatch.setattr(MPI, "COMM_WORLD", world)
    monkeypatch.setattr(cli, "settle", lambda comm, status, line: None)
    assert cli._main(["--m", "0"]) is None
    assert world.aborted == 2
    assert capsys.readouterr().err == ("hpcmm: rank 3: error: argument --m: --m=0: expected an integer >= 1 "
                                       "(raised by rank 3); aborting all ranks\n")


@pytest.mark.parametrize("argv, code", [(["--version"], 0), (["run", "--help"], 0)], ids=["version", "help"])
def test_help_and_version_on_rank_0_only(monkeypatch, capsys, argv, code):
    text = cli._parse_or_show(argv).text
    assert cli._command(argv, MPI.COMM_SELF) == code
    assert capsys.readouterr().out == text
    assert cli._command(argv, _Rank(1, 2, [[None], [code]])) == code
    assert capsys.readouterr().out == ""


def test_help_on_some_ranks_only_is_refused():
    with pytest.raises(InputError) as caught:
        cli._command(["--version"], _Rank(0, 3, [[None, None], [None, 0]]))
    assert str(caught.value) == ("rank 0 was given --help or --version and rank 1 was not: every rank must get "
                                 "the same command")
    with pytest.raises(InputError) as caught:
        cli._command(SMALL, _Rank(0, 3, [[None, None], [0, 0]]))
    assert str(caught.value) == ("rank 1 was given --help or --version and rank 0 was not: every rank must get "
                                 "the same command")


# -- dispatch -------------------------------------------------------------------------------


def test_each_subcommand_runs_its_own_code(monkeypatch, tmp_path, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli.main([*SMALL, "--out", "r.h5"]) == 0
    out = capsys.readouterr().out
    assert "summa" in out and "r.h5" in out
    with h5py.File("r.h5", "r") as f:
        assert int(f["config"].attrs["m"]) == 9
        assert f.attrs["command"] == " ".join(["python -m hpcmm", *SMALL, "--out", "r.h5"])
    assert cli.main(["report", "r.h5"]) == 0
    assert capsys.readouterr().out.startswith("r.h5: m=9 n=7 k=5 float64 grid 1x1 backend numpy (1 ranks)\n")
    assert cli.main(["info", "--device", "cpu"]) == 0
    assert "process grid       1x1 (1 node(s))" in capsys.readouterr().out
    assert cli.main(["model", "show"]) == 0
    assert capsys.readouterr().out.startswith('{\n  "name": "h200x2",')


def test_report_and_model_ignore_hpcmm_variables(monkeypatch, tmp_path, capsys):
    """They take no run settings: a bad HPCMM_* variable does not stop them."""
    monkeypatch.setenv("HPCMM_PANEL", "0")
    assert cli.main(["model", "show"]) == 0
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HPCMM_PANEL")
    assert cli.main([*SMALL, "--out", "r.h5"]) == 0
    monkeypatch.setenv("HPCMM_PANEL", "0")
    assert cli.main(["report", "r.h5"]) == 0
    assert cli.main(["info", "--device", "cpu"]) == 2
    assert "HPCMM_PANEL" in capsys.readouterr().err


def test_report_prints_on_rank_0_only(monkeypatch, tmp_path, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli.main([*SMALL, "--out", "r.h5"]) == 0
    capsys.readouterr()
    assert cli._command(["report", "r.h5"], _Rank(1, 2, [[None], [None]])) == 0
    assert capsys.readouterr().out == ""


def test_bench_runs_its_cases_with_the_run_settings(monkeypatch, tmp_path, capsys):
    monkeypatch.chdir(tmp_path)
    argv = ["bench", "--device", "cpu", "--cases", "float64:24", "--no-peers", "--warmup", "0", "--iters", "2",
            "--out", "b.h5"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "float64:24" in out and out.rstrip().endswith("figures: b.h5")
    with h5py.File("b.h5", "r") as f:
        assert f.attrs["kind"] == "bench" and "bench" in f


def test_model_prints_on_rank_0_only(capsys):
    assert cli._command(["model", "show"], _Rank(1, 2, [[None], [None], [None]])) == 0
    assert capsys.readouterr().out == ""


def test_a_run_prints_its_summary_and_the_files_name(monkeypatch, tmp_path, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli.main(SMALL) == 0
    names = [p.name for p in tmp_path.iterdir()]
    assert len(names) == 1 and names[0].startswith("hpcmm-results-")
    assert names[0] in capsys.readouterr().out


def test_a_run_reports_its_progress_on_stderr_unless_quiet(monkeypatch, tmp_path, capsys):
    monkeypatch.chdir(tmp_path)
    loud = [arg for arg in SMALL if arg != "--quiet"]
    assert cli.main([*loud, "--out", "loud.h5"]) == 0
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert lines[0].startswith("hpcmm: grid 1x1 | summa | 9x5 @ 5x7 float64 | numpy | panel "), lines
    assert lines[-1].startswith("hpcmm: iteration 1/1: ") and lines[-1].endswith(" s (first start to last end)")
    assert "loud.h5" in out
    assert cli.main([*SMALL, "--out", "quiet.h5"]) == 0
    assert capsys.readouterr().err == ""


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_a_run_in_a_terminal_draws_its_phases(monkeypatch, tmp_path):
    """In a terminal the progress has a live line of the phase under way, which reads the run's settings."""
    monkeypatch.chdir(tmp_path)
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    loud = [arg for arg in SMALL if arg != "--quiet"]
    assert cli.main([*loud, "--warmup", "1", "--out", "r.h5"]) == 0
    assert "hpcmm: grid 1x1 | summa | 9x5 @ 5x7 float64 | numpy" in terminal.getvalue()
    assert (tmp_path / "r.h5").exists()


def test_a_name_hpcmm_chose_gives_way_to_a_file_already_there(monkeypatch, tmp_path, capsys):
    """Without --out the chosen name may be taken by the time the file is written: the next free name."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cli, "new_output_name", lambda: "hpcmm-results-20261206-101010.h5")
    (tmp_path / "hpcmm-results-20261206-101010.h5").write_bytes(b"another run's")
    monkeypatch.setattr(h5io, "RENAMEABLE", set())
    assert cli.main(SMALL) == 0
    assert (tmp_path / "hpcmm-results-20261206-101010.h5").read_bytes() == b"another run's"
    taken = sorted(p.name for p in tmp_path.iterdir())
    assert len(taken) == 2 and taken[1] != taken[0]
    new = [name for name in taken if name != "hpcmm-results-20261206-101010.h5"][0]
    with h5py.File(tmp_path / new, "r") as f:
        assert int(f["config"].attrs["m"]) == 9
    assert new in capsys.readouterr().out
    # Named by the user, the same file is refused.
    monkeypatch.setattr(h5io, "RENAMEABLE", set())
    assert cli.main([*SMALL, "--out", "hpcmm-results-20261206-101010.h5"]) == 2
    assert "file exists" in capsys.readouterr().err


def test_a_failed_check_prints_the_summary_and_exits_1(monkeypatch, tmp_path, capsys):
    from hpcmm.execution.engine import Engine

    original = Engine.multiply

    def multiply(self, *args, **kwargs):
        times = original(self, *args, **kwargs)
        self.C[0, 0] += 1.0
        return times

    monkeypatch.setattr(Engine, "multiply", multiply)
    monkeypatch.chdir(tmp_path)
    assert cli.main([*SMALL, "--verify", "full", "--out", "r.h5"]) == 1
    out, err = capsys.readouterr()
    assert "r.h5" in out and "summa" in out
    assert err.startswith("hpcmm: error: verification failed: full residual ")


# -- the parsers: each subcommand's options, their values, defaults, choices and groups ---------

_RUN = ["--m", "5", "--n", "6", "--k", "7", "--dtype", "float32", "--tf32", "--seed", "3", "--alpha", "2",
        "--beta", "0.5", "--op-a", "T", "--op-b", "C", "--a", "x.h5:A", "--b", "y.npy", "--allow-nonfinite",
        "--device", "cpu", "--grid", "1x2", "--ranks-per-node", "2", "--cuda-aware-mpi", "no", "--panel", "64",
        "--prefetch", "2", "--algo", "2.5d:2", "--machine", "h200x2", "--balance", "none", "--warmup", "0",
        "--iters", "2", "--verify", "full", "--out", "r.h5", "--overwrite", "--save-c", "--no-timeline", "--quiet",
        "--status-file", "s.txt"]
_RUN_NS = {"command": "run", "m": 5, "n": 6, "k": 7, "dtype": "float32", "tf32": True, "seed": 3, "alpha": 2.0,
           "beta": 0.5, "op_a": "T", "op_b": "C", "a": ("x.h5", "A"), "b": ("y.npy", None), "allow_nonfinite": True,
           "device": "cpu", "grid": (1, 2), "ranks_per_node": 2, "cuda_aware_mpi": "no", "panel": 64, "prefetch": 2,
           "algo": "2.5d:2", "machine": "h200x2", "balance": "none", "warmup": 0, "iters": 2, "verify": "full",
           "out": "r.h5", "overwrite": True, "save_c": True, "timeline": False, "quiet": True, "status_file": "s.txt"}
_GEMM = ["bench", "gemm", "--seed", "3", "--alpha", "2", "--beta", "0.5", "--op-a", "T", "--op-b", "C",
         "--device", "cpu", "--grid", "1x2", "--ranks-per-node", "2", "--cuda-aware-mpi", "no", "--panel", "64",
         "--prefetch", "2",
         "--algo", "summa", "--machine", "h200x2", "--balance", "share", "--warmup", "0", "--iters", "2",
         "--verify", "none", "--out", "b.h5", "--overwrite", "--cases", "float64:8", "--no-peers",
         "--heat-limit", "5", "--status-file", "s"]
_GEMM_NS = {"command": "bench", "what": "gemm", "seed": 3, "alpha": 2.0, "beta": 0.5, "op_a": "T", "op_b": "C",
            "device": "cpu", "grid": (1, 2), "ranks_per_node": 2, "cuda_aware_mpi": "no", "panel": 64, "prefetch": 2,
            "algo": "summa", "machine": "h200x2", "balance": "share", "warmup": 0, "iters": 2, "verify": "none",
            "out": "b.h5", "overwrite": True, "cases": "float64:8", "no_peers": True, "heat_limit": 5,
            "status_file": "s"}
_RUN_UNSET = {field: None for field in _RUN_NS} | {"command": "run"}
_GEMM_UNSET = {field: None for field in _GEMM_NS} | {"command": "bench", "what": "gemm", "no_peers": False}

_EVERY = [
    ([], _RUN_UNSET),
    (_RUN, _RUN_NS),
    (["run", *_RUN], _RUN_NS),
    (["info"], {"command": "info", "device": None, "grid": None, "ranks_per_node": None, "cuda_aware_mpi": None,
                "status_file": None}),
    ("info --device gpu --grid 2x1 --ranks-per-node 3 --cuda-aware-mpi yes --status-file s".split(),
     {"command": "info", "device": "gpu", "grid": (2, 1), "ranks_per_node": 3, "cuda_aware_mpi": "yes",
      "status_file": "s"}),
    (["bench"], _GEMM_UNSET),
    (_GEMM, _GEMM_NS),
    (["bench", "transport"], {"command": "bench", "what": "transport", "pairs": "first", "sizes": None, "out": None,
                              "overwrite": None, "device": None, "ranks_per_node": None, "cuda_aware_mpi": None,
                              "status_file": None}),
    ("bench transport --pairs all --sizes 1,2 --out t.h5 --overwrite --device cpu --ranks-per-node 2 "
     "--cuda-aware-mpi auto --status-file s".split(),
     {"command": "bench", "what": "transport", "pairs": "all", "sizes": "1,2", "out": "t.h5", "overwrite": True,
      "device": "cpu", "ranks_per_node": 2, "cuda_aware_mpi": "auto", "status_file": "s"}),
    (["report", "r.h5"], {"command": "report", "file": "r.h5", "plot": None, "iteration": None, "status_file": None}),
    ("report r.h5 --plot t.png --iteration 2 --status-file s".split(),
     {"command": "report", "file": "r.h5", "plot": "t.png", "iteration": 2, "status_file": "s"}),
]


@pytest.mark.parametrize("argv, expected", _EVERY, ids=[
    "run_unset", "run_every", "run_named", "info_unset", "info_every", "gemm_unset", "gemm_every", "transport_unset",
    "transport_every", "report_unset", "report_every"])
def test_every_option_of_each_subcommand_and_its_value(argv, expected):
    """Each subcommand takes its own options, each under its own name, and leaves what is not given unset."""
    assert vars(cli.parse(argv)) == expected


@pytest.mark.parametrize("argv, option", [
    (["bench", "--k", "4"], "--k"), (["bench", "--dtype", "float32"], "--dtype"), (["bench", "--tf32"], "--tf32"),
    (["bench", "--allow-nonfinite"], "--allow-nonfinite"), (["bench", "--save-c"], "--save-c"),
    (["bench", "--no-timeline"], "--no-timeline"), (["bench", "--quiet"], "--quiet"),
    (["bench", "transport", "--grid", "1x2"], "--grid"), (["bench", "transport", "--m", "4"], "--m"),
    (["bench", "transport", "--cases", "float64:8"], "--cases"), (["info", "--m", "4"], "--m"),
    (["info", "--out", "x.h5"], "--out"), (["report", "r.h5", "--device", "cpu"], "--device"),
], ids=["gemm_k", "gemm_dtype", "gemm_tf32", "gemm_allow_nonfinite", "gemm_save_c", "gemm_no_timeline",
        "gemm_quiet", "transport_grid", "transport_m", "transport_cases", "info_m", "info_out", "report_device"])
def test_options_a_subcommand_does_not_take(argv, option):
    with pytest.raises(InputError) as caught:
        cli.parse(argv)
    assert str(caught.value).startswith(f"unrecognized arguments: {option}")


@pytest.mark.parametrize("argv, option", [
    (["bench", "--m", "4096"], "--m"), (["--ranks", "2"], "--ranks"), (["run", "--iter", "5"], "--iter"),
    (["bench", "transport", "--size", "4"], "--size"), (["model", "predict", "--mach", "h200x2"], "--mach"),
], ids=["bench_m_for_machine", "ranks_for_ranks_per_node", "iter_for_iters", "size_for_sizes", "mach_for_machine"])
def test_a_prefix_of_an_options_name_is_refused_not_taken_for_it(argv, option):
    """argparse's default reads a prefix as the option it starts (``bench --m 4096`` as ``--machine 4096``):
    the size the user meant would be dropped without a word.  hpcmm's parsers refuse it in one line."""
    with pytest.raises(InputError) as caught:
        cli.parse(argv)
    assert str(caught.value).startswith(f"unrecognized arguments: {option}")


_CHOICES = [
    ("--dtype", "run", "'float64', 'float32', 'float16', 'bfloat16', 'complex128', 'complex64'"),
    ("--op-a", "run", "'N', 'T', 'C'"),
    ("--op-b", "run", "'N', 'T', 'C'"),
    ("--balance", "run", "'auto', 'share', 'measured', 'product', 'dynamic', 'none'"),
    ("--verify", "run", "'freivalds', 'full', 'none'"),
    ("--op-a", "bench", "'N', 'T', 'C'"),
    ("--op-b", "bench", "'N', 'T', 'C'"),
    ("--balance", "bench", "'auto', 'share', 'measured', 'product', 'dynamic', 'none'"),
    ("--verify", "bench", "'freivalds', 'full', 'none'"),
    ("--device", "bench", "'auto', 'gpu', 'cpu'"),
    ("--pairs", "bench transport", "'first', 'all'"),
    ("--device", "bench transport", "'auto', 'gpu', 'cpu'"),
    ("--cuda-aware-mpi", "bench transport", "'auto', 'yes', 'no'"),
]


@pytest.mark.parametrize("option, where, choices", _CHOICES,
                         ids=[f"{where.replace(' ', '_')}{option.replace('-', '_')}" for option, where, _ in _CHOICES])
def test_a_value_outside_the_choices_is_refused(option, where, choices):
    with pytest.raises(InputError) as caught:
        cli.parse([*where.split(), option, "x"])
    assert str(caught.value) == f"argument {option}: invalid choice: 'x' (choose from {choices})"


_USAGE = {
    "run": "usage: python -m hpcmm run [-h] [--m M] [--n N] [--k K] [--dtype "
           "{float64,float32,float16,bfloat16,complex128,complex64}] [--tf32] [--seed SEED] [--alpha X] [--beta X] "
           "[--op-a {N,T,C}] [--op-b {N,T,C}] [--a FILE.h5:DATASET|FILE.npy] [--b FILE.h5:DATASET|FILE.npy] "
           "[--allow-nonfinite] [--device {auto,gpu,cpu}] [--grid PRxPC] [--ranks-per-node R] "
           "[--cuda-aware-mpi {auto,yes,no}] [--panel W] [--prefetch D] [--algo A] [--machine NAME|FILE.json] "
           "[--balance {auto,share,measured,product,dynamic,none}] [--warmup W] [--iters I] "
           "[--verify {freivalds,full,none}] [--out FILE.h5] [--overwrite] [--save-c] [--no-timeline] [--quiet] "
           "[--version] [--status-file PATH]",
    "info": "usage: python -m hpcmm info [-h] [--device {auto,gpu,cpu}] [--grid PRxPC] [--ranks-per-node R] "
            "[--cuda-aware-mpi {auto,yes,no}] [--version] [--status-file PATH]",
    "bench gemm": "usage: python -m hpcmm bench gemm [-h] [--seed SEED] [--alpha X] [--beta X] [--op-a {N,T,C}] "
                  "[--op-b {N,T,C}] [--device {auto,gpu,cpu}] [--grid PRxPC] [--ranks-per-node R] "
                  "[--cuda-aware-mpi {auto,yes,no}] [--panel W] [--prefetch D] [--algo A] [--machine NAME|FILE.json] "
                  "[--balance {auto,share,measured,product,dynamic,none}] [--warmup W] [--iters I] "
                  "[--verify {freivalds,full,none}] [--out FILE.h5] [--overwrite] [--cases CASES] [--no-peers] "
                  "[--heat-limit SECONDS] [--version] [--status-file PATH]",
    "bench transport": "usage: python -m hpcmm bench transport [-h] [--pairs {first,all}] [--sizes MIB[,MIB...]] "
                       "[--out FILE.h5] [--overwrite] [--device {auto,gpu,cpu}] [--ranks-per-node R] "
                       "[--cuda-aware-mpi {auto,yes,no}] [--version] [--status-file PATH]",
    "report": "usage: python -m hpcmm report [-h] [--plot PNG] [--iteration I] [--version] [--status-file PATH] file",
    "bench": "usage: python -m hpcmm bench [-h] {gemm,transport} ...",
    "": "usage: python -m hpcmm [-h] [--version] {run,info,bench,report,model} ...",
}
_HEADINGS = {
    "run": ["options:", "problem:", "placement:", "algorithm:", "measurement and output:"],
    "info": ["options:", "placement:"],
    "bench gemm": ["options:", "problem:", "placement:", "algorithm:", "measurement and output:", "benchmark:"],
    "bench transport": ["options:", "measurement and output:", "placement:"],
    "report": ["positional arguments:", "options:"],
    "bench": ["options:", "benchmarks:"],
    "": ["options:", "subcommands:"],
}


@pytest.mark.parametrize("where", list(_USAGE), ids=["run", "info", "gemm", "transport", "report", "bench", "top"])
def test_each_help_shows_its_usage_and_groups(where):
    """The usage line names every option with its value's name or choices; the groups come in this order."""
    text = cli._parse_or_show([*where.split(), "--help"]).text
    assert " ".join(text.split("\n\n")[0].split()) == _USAGE[where]
    headings = [line for line in text.splitlines() if line[:1].strip() and line.endswith(":")]
    assert headings == _HEADINGS[where]


def test_each_subcommand_lists_under_its_heading():
    top = cli._parse_or_show(["--help"]).text.splitlines()
    at = top.index("subcommands:")
    assert [line.split()[0] for line in top[at + 2:at + 7]] == ["run", "info", "bench", "report", "model"]
    bench = cli._parse_or_show(["bench", "--help"]).text.splitlines()
    at = bench.index("benchmarks:")
    assert [line.split()[0] for line in bench[at + 2:at + 4]] == ["gemm", "transport"]
