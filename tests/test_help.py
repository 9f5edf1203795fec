"""Every help text states the true default of every option, and each subcommand lists only its own.

The defaults are read from where they live (the parser, :class:`~hpcmm.config.RunConfig`, the
benchmarks' constants), so a default changed in the code and not in its help fails here.
"""

from __future__ import annotations

import argparse
import sys

import pytest

from hpcmm.cli import main as cli
from hpcmm.config import BENCH_CASES, DEFAULT_SIZE_CPU, DEFAULT_SIZE_GPU, TRANSPORT_SIZES_MIB, RunConfig
from hpcmm.bench.peers import HEAT_LIMIT


def parsers() -> dict[str, argparse.ArgumentParser]:
    """Every parser of the command line by its command (``bench transport``), the top level as ``""``."""
    found = {}

    def walk(name, parser):
        found[name] = parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub, p in action.choices.items():
                    walk(f"{name} {sub}".strip(), p)

    walk("", cli.build_parser())
    return found


PARSERS = parsers()


def _shown(value) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, tuple):
        return ",".join(map(str, value))
    return str(value)


def _options(command):
    return [(command, a) for a in PARSERS[command]._actions
            if a.dest not in ("help", "version", "command", "what") or (a.option_strings == [] and a.default)]


@pytest.mark.parametrize("command, action", [pair for c in PARSERS for pair in _options(c)],
                         ids=lambda x: x if isinstance(x, str) else (x.option_strings or [x.dest])[0])
def test_every_option_states_its_true_default(command, action):
    if isinstance(action, argparse._SubParsersAction):
        return
    if not action.option_strings and action.default is None:
        return  # a required positional (report FILE, model's FILE.h5 list)
    flag = (action.option_strings or [action.dest])[0]
    assert action.help and ("default" in action.help or "required" in action.help), f"{command} {flag}: no default"
    if action.default not in (None, False, True, argparse.SUPPRESS):
        # the parser's own default (model --m 8192, bench's 'gemm')
        assert _shown(action.default) in action.help or str(action.default) in action.help, \
            f"{command} {flag}: default {action.default!r} not said"
    field = RunConfig.__dataclass_fields__.get(action.dest)
    if field is not None and command in ("run", "info", "bench gemm", "bench transport"):
        value = field.default
        if value is not None and not isinstance(value, bool) and action.dest != "out":
            assert any(f"(default {text})" in action.help for text in (_shown(value), str(value))), \
                f"{command} {flag}: RunConfig's {value!r} not said"


@pytest.fixture(autouse=True)
def _wide(monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")  # argparse wraps at the terminal's width: a line per option here


def _help(*argv) -> str:
    shown = cli._parse_or_show([*argv, "--help"])
    assert isinstance(shown, cli._Shown) and shown.status == 0
    return shown.text


def test_defaults_that_live_outside_the_parser_are_said():
    run = _help("run")
    assert f"(default {DEFAULT_SIZE_GPU} on GPUs, {DEFAULT_SIZE_CPU} on CPUs)" in run
    assert run.count("(default as --m)") == 2
    gemm = _help("bench", "gemm")
    assert BENCH_CASES in gemm and f"(default {HEAT_LIMIT:g})" in gemm
    assert "hpcmm-bench-YYYYmmdd-HHMMSS.h5" in gemm
    transport = _help("bench", "transport")
    assert f"(default {','.join(map(str, TRANSPORT_SIZES_MIB))})" in transport
    assert "hpcmm-transport-YYYYmmdd-HHMMSS.h5" in transport
    model = " ".join(_help("model").split())
    for text in ("--m M rows of A and C (default 8192)", "(default 2)", "--panel W SUMMA panel width (default:",
                 "(default h200x2;", "(default predict)"):
        assert text in model, text


def test_each_subcommand_lists_only_its_own_options():
    transport = _help("bench", "transport")
    for flag in ("--cases", "--m ", "--panel", "--iters", "--verify", "--no-peers", "--heat-limit", "--grid",
                 "--save-c"):
        assert flag not in transport, flag
    assert "--sizes" in transport and "--out" in transport and "--device" in transport
    gemm = _help("bench", "gemm")
    assert "--sizes" not in gemm and "--cases" in gemm and "--no-peers" in gemm
    # the cases give the sizes and types: bench takes no --m, --dtype, --a or --save-c it would ignore
    for flag in ("--m ", "--n ", "--k ", "--dtype", "--tf32", "--a ", "--save-c", "--no-timeline"):
        assert flag not in gemm, flag
    bench = _help("bench")
    assert "gemm" in bench and "transport" in bench and "--cases CASES" not in bench
    assert len(_help("bench", "transport").splitlines()) < 40


@pytest.mark.parametrize("argv, what", [(["bench"], "gemm"), (["bench", "--cases", "float64:64"], "gemm"),
                                        (["bench", "gemm", "--no-peers"], "gemm"),
                                        (["bench", "transport", "--sizes", "1"], "transport")])
def test_gemm_is_benchs_default(argv, what):
    assert cli.parse(argv).what == what


def test_transport_after_options_is_refused_with_the_way_to_say_it():
    from hpcmm.errors import InputError

    with pytest.raises(InputError, match="'transport' goes right after 'bench'"):
        cli.parse(["bench", "--device", "cpu", "transport"])


def test_n_and_k_follow_m_as_the_help_says():
    config = cli.config_from(cli.parse(["--m", "3072"]), {}).with_default_size(on_gpu=False)
    assert (config.m, config.n, config.k) == (3072, 3072, 3072)
    config = cli.config_from(cli.parse(["--m", "3072", "--k", "64"]), {}).with_default_size(on_gpu=True)
    assert (config.m, config.n, config.k) == (3072, 3072, 64)


def test_the_console_script_says_hpcmm(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["/somewhere/bin/hpcmm", "--help"])
    parser = cli.build_parser()
    assert parser.format_usage().startswith("usage: hpcmm ")
    assert "'hpcmm --m 4096' is 'hpcmm run --m 4096'" in parser.format_help()
    monkeypatch.setattr(sys, "argv", ["/repo/hpcmm/__main__.py"])
    assert cli.build_parser().format_usage().startswith("usage: python -m hpcmm ")
