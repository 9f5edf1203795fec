"""Settings: validation messages, ``HPCMM_*`` variables, the command line and its precedence."""

from __future__ import annotations

import dataclasses
import datetime
import os
import re

import pytest

from hpcmm.cli import main as cli
from hpcmm.config import (
    DEFAULT_SIZE_CPU,
    DEFAULT_SIZE_GPU,
    ENVIRONMENT,
    RunConfig,
    new_output_name,
    parse_grid,
    parse_matrix_source,
    parse_positive_int,
    settings_from_environment,
)
from hpcmm.errors import InputError

# -- RunConfig validation -----------------------------------------------------

#: (keyword arguments, text the message must hold): each names the bad value.
BAD_CONFIGS = [
    ({"m": 0}, "--m=0"),
    ({"n": -4}, "--n=-4"),
    ({"k": "seven"}, "--k='seven'"),
    ({"m": True}, "--m=True"),
    ({"dtype": "int8"}, "--dtype='int8'"),
    ({"dtype": "bfloat32"}, "--dtype='bfloat32'"),
    ({"device": "tpu"}, "--device='tpu'"),
    ({"verify": "maybe"}, "--verify='maybe'"),
    ({"cuda_aware_mpi": "perhaps"}, "--cuda-aware-mpi='perhaps'"),
    ({"balance": "fastest"}, "--balance='fastest': expected one of auto, share, measured, product, dynamic, none"),
    ({"panel": 0}, "--panel=0"),
    ({"prefetch": -1}, "--prefetch=-1"),
    ({"prefetch": 9}, "--prefetch=9: expected an integer from 0 to 8"),
    ({"iters": 0}, "--iters=0"),
    ({"warmup": -2}, "--warmup=-2"),
    ({"seed": -1}, "--seed=-1"),
    ({"ranks_per_node": 0}, "--ranks-per-node=0"),
    ({"tf32": True}, "--dtype=float64"),
    ({"tf32": True, "dtype": "float16"}, "--dtype=float16"),
    ({"a": ("a.h5", "A")}, "--a and --b go together"),
    ({"b": ("b.npy", None)}, "--a and --b go together"),
    ({"a": ("a.h5", "A"), "b": ("b.h5", "B"), "m": 5}, "--m/--n/--k and --a/--b exclude each other"),
    ({"out": "results.txt"}, "--out='results.txt'"),
]


@pytest.mark.parametrize("kwargs, text", BAD_CONFIGS, ids=[str(k) for k, _ in BAD_CONFIGS])
def test_bad_config_names_the_value(kwargs, text):
    with pytest.raises(InputError) as info:
        RunConfig(**kwargs)
    message = str(info.value)
    assert text in message
    assert "\n" not in message
    assert info.value.exit_code == 2


def test_defaults_are_valid_and_complete():
    config = RunConfig()
    assert (config.m, config.n, config.k) == (None, None, None)
    cpu = config.with_default_size(on_gpu=False)
    gpu = config.with_default_size(on_gpu=True)
    assert (cpu.m, cpu.n, cpu.k) == (DEFAULT_SIZE_CPU,) * 3
    assert (gpu.m, gpu.n, gpu.k) == (DEFAULT_SIZE_GPU,) * 3
    # Sizes that were given stay; --n and --k follow --m where they are not given ("default as --m").
    partial = RunConfig(m=17).with_default_size(on_gpu=False)
    assert (partial.m, partial.n, partial.k) == (17, 17, 17)
    mixed = RunConfig(m=3072, k=5).with_default_size(on_gpu=True)
    assert (mixed.m, mixed.n, mixed.k) == (3072, 3072, 5)
    only_n = RunConfig(n=9).with_default_size(on_gpu=False)
    assert (only_n.m, only_n.n, only_n.k) == (DEFAULT_SIZE_CPU, 9, DEFAULT_SIZE_CPU)
    # Sizes from files are not filled in.
    files = RunConfig(a=("a.h5", "A"), b=("a.h5", "B")).with_default_size(on_gpu=True)
    assert files.m is None


def test_replace_validates():
    config = RunConfig(m=4, n=4, k=4)
    assert config.replace(prefetch=3).prefetch == 3
    with pytest.raises(InputError, match="--prefetch=12"):
        config.replace(prefetch=12)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.m = 5  # type: ignore[misc]


def test_as_attributes_is_hdf5_friendly():
    attrs = RunConfig(m=3, n=4, k=5, grid=(2, 3), a=None).as_attributes()
    assert attrs["grid"] == "2x3"
    assert attrs["panel"] == ""
    assert attrs["m"] == 3
    files = RunConfig(a=("x.h5", "A"), b=("y.npy", None)).as_attributes()
    assert files["a"] == "x.h5:A" and files["b"] == "y.npy"
    assert all(v is not None and not isinstance(v, tuple) for v in attrs.values())


@pytest.mark.parametrize("text, value", [("3", 3), (" 12 ", 12), ("+7", 7), (5, 5)])
def test_parse_positive_int(text, value):
    assert parse_positive_int("--x", text) == value


@pytest.mark.parametrize("text", ["0", "-1", "1.5", "", "1e3", "x", None])
def test_parse_positive_int_rejects(text):
    with pytest.raises(InputError, match=r"^--x="):
        parse_positive_int("--x", text)


@pytest.mark.parametrize("text, grid", [("2x4", (2, 4)), ("3X1", (3, 1)), (" 1 × 8 ", (1, 8))])
def test_parse_grid(text, grid):
    assert parse_grid(text) == grid


@pytest.mark.parametrize("text", ["2x0", "0x3", "4", "2x", "axb", "2x3x4", "-1x2"])
def test_parse_grid_rejects(text):
    with pytest.raises(InputError, match=f"--grid={text!r}"):
        parse_grid(text)


@pytest.mark.parametrize("text, parsed", [
    ("in.h5:A", ("in.h5", "A")),
    ("dir/in.hdf5:/group/B", ("dir/in.hdf5", "/group/B")),
    ("a:b.h5:X", ("a:b.h5", "X")),
    ("m.npy", ("m.npy", None)),
    ("/abs/m.npy", ("/abs/m.npy", None)),
    # ':' in the path and in the dataset: the file name ends at the last ':' after .h5.
    ("run:1/in.h5:/grp/t=0:A", ("run:1/in.h5", "/grp/t=0:A")),
    ("in.hdf:a:b", ("in.hdf", "a:b")),
    ("x.h5:dir/in.h5:A", ("x.h5:dir/in.h5", "A")),
    ("c:/data/m.npy", ("c:/data/m.npy", None)),
    ("in.h5:x.h5", ("in.h5", "x.h5")),
])
def test_parse_matrix_source(text, parsed):
    assert parse_matrix_source("--a", text) == parsed


@pytest.mark.parametrize("text, why", [
    ("m.npy:A", "drop ':A'"),
    ("m.txt", "expected FILE.h5:DATASET or FILE.npy"),
    ("in.h5", "name the dataset"),
    ("in.h5:", "name the dataset"),
    ("in:A", "expected FILE.h5:DATASET or FILE.npy"),
    ("dir:x/m.txt:A", "expected FILE.h5:DATASET or FILE.npy"),
])
def test_parse_matrix_source_rejects(text, why):
    with pytest.raises(InputError) as info:
        parse_matrix_source("--b", text)
    assert f"--b={text!r}" in str(info.value) and why in str(info.value)


# -- environment ----------------------------------------------------------------


@pytest.mark.parametrize("name, text, field, value", [
    ("HPCMM_DEVICE", "CPU", "device", "cpu"),
    ("HPCMM_DEVICE", "gpu", "device", "gpu"),
    ("HPCMM_CUDA_AWARE_MPI", "yes", "cuda_aware_mpi", "yes"),
    ("HPCMM_CUDA_AWARE_MPI", "1", "cuda_aware_mpi", "yes"),
    ("HPCMM_CUDA_AWARE_MPI", "off", "cuda_aware_mpi", "no"),
    ("HPCMM_CUDA_AWARE_MPI", "auto", "cuda_aware_mpi", "auto"),
    ("HPCMM_RANKS_PER_NODE", "2", "ranks_per_node", 2),
    ("HPCMM_PANEL", "512", "panel", 512),
    ("HPCMM_PREFETCH", "0", "prefetch", 0),
    ("HPCMM_TIMELINE", "no", "timeline", False),
    ("HPCMM_TIMELINE", "true", "timeline", True),
    ("HPCMM_TIMELINE", "YES", "timeline", True),
    ("HPCMM_TIMELINE", "0", "timeline", False),
    ("HPCMM_PREFETCH", "8", "prefetch", 8),
    ("HPCMM_BALANCE", "measured", "balance", "measured"),
    ("HPCMM_BALANCE", " None ", "balance", "none"),
])
def test_environment_variables(name, text, field, value):
    assert name in ENVIRONMENT
    assert settings_from_environment({name: text}) == {field: value}


@pytest.mark.parametrize("name, text", [
    ("HPCMM_DEVICE", "tpu"),
    ("HPCMM_CUDA_AWARE_MPI", "sometimes"),
    ("HPCMM_RANKS_PER_NODE", "0"),
    ("HPCMM_PANEL", "wide"),
    ("HPCMM_PREFETCH", "-1"),
    # In range for an integer, out of range for the setting: still the variable's name.
    ("HPCMM_PREFETCH", "9"),
    ("HPCMM_TIMELINE", "2"),
    # auto is no value of a yes/no setting (it used to switch the timeline off).
    ("HPCMM_TIMELINE", "auto"),
    ("HPCMM_BALANCE", "equal"),
])
def test_environment_bad_value_names_the_variable(name, text):
    with pytest.raises(InputError) as info:
        settings_from_environment({name: text})
    message = str(info.value)
    assert message.startswith(f"{name}=")
    assert repr(text) in message or text in message
    assert "--" not in message.split(":", 1)[0] and "\n" not in message


def test_environment_error_names_the_variable_not_the_flag_end_to_end():
    """Through the command line too: the variable is named, the flag is not."""
    with pytest.raises(InputError) as info:
        cli.config_from(cli.parse([]), {"HPCMM_PREFETCH": "9"})
    assert str(info.value) == "HPCMM_PREFETCH=9: expected an integer from 0 to 8"
    # The same value as a flag names the flag.
    with pytest.raises(InputError, match=r"^argument --prefetch: --prefetch=9: expected an integer from 0 to 8"):
        cli.parse(["--prefetch", "9"])


def test_unknown_hpcmm_variable_is_rejected():
    with pytest.raises(InputError) as info:
        settings_from_environment({"HPCMM_FOO": "1", "HPCMM_PANEL": "8"})
    message = str(info.value)
    assert message.startswith("HPCMM_FOO='1': unknown setting")
    # The message lists what hpcmm does know.
    assert all(name in message for name in ENVIRONMENT)


def test_other_variables_are_ignored():
    environ = {"PATH": "/bin", "HPCMMX": "1", "OMP_NUM_THREADS": "1", "HPCMM_PANEL": "3",
               # The batch scripts' own settings (jobs/) have a prefix of their own.
               "JOB_ARGS": "--iters 1", "JOB_M": "97", "JOB_SITE_MPI": "openmpi"}
    assert settings_from_environment(environ) == {"panel": 3}


@pytest.mark.parametrize("name", ["HPCMM_M", "HPCMM_ARGS", "HPCMM_SITE_MPI", "HPCMM_PYTHON", "HPCMM_"])
def test_every_unknown_hpcmm_name_is_refused(name):
    """No HPCMM_* name passes silently, the batch scripts' old names included."""
    with pytest.raises(InputError) as info:
        settings_from_environment({name: "100"})
    assert str(info.value).startswith(f"{name}='100': unknown setting")
    assert "\n" not in str(info.value)


def test_environment_defaults_to_os_environ(monkeypatch):
    for name in list(os.environ):
        if name.startswith("HPCMM_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HPCMM_PREFETCH", "3")
    assert settings_from_environment() == {"prefetch": 3}


# -- command line ----------------------------------------------------------------


@pytest.mark.parametrize("argv, command", [
    ([], "run"),
    (["--m", "5"], "run"),
    (["--verify", "full", "--quiet"], "run"),
    (["run", "--m", "5"], "run"),
    (["info"], "info"),
    (["info", "--device", "cpu"], "info"),
    (["report", "x.h5"], "report"),
])
def test_parse_default_subcommand_is_run(argv, command):
    assert cli.parse(argv).command == command


def test_parse_run_options():
    ns = cli.parse(["--m", "7", "--n", "5", "--k", "3", "--grid", "2x1", "--a", "x.h5:A", "--b", "y.npy",
                    "--dtype", "float32", "--tf32", "--no-timeline", "--save-c"])
    assert (ns.m, ns.n, ns.k, ns.grid) == (7, 5, 3, (2, 1))
    assert ns.a == ("x.h5", "A") and ns.b == ("y.npy", None)
    assert ns.tf32 is True and ns.timeline is False and ns.save_c is True
    # Options not given stay None, so the environment can fill them.
    assert ns.panel is None and ns.prefetch is None and ns.overwrite is None


@pytest.mark.parametrize("argv, text", [
    (["--m", "0"], "--m=0"),
    (["--m", "x"], "--m='x'"),
    (["--prefetch", "-1"], "--prefetch=-1"),
    (["--bogus"], "unrecognized arguments: --bogus"),
    (["--dtype", "int8"], "invalid choice: 'int8'"),
    (["--grid", "3"], "--grid='3'"),
    (["--a", "x.txt"], "--a='x.txt'"),
    (["--verify", "sometimes"], "invalid choice: 'sometimes'"),
    (["--balance", "fastest"], "argument --balance: invalid choice: 'fastest'"),
    (["--m"], "expected one argument"),
    (["report"], "the following arguments are required: file"),
])
def test_parse_errors_raise_one_line_input_error(argv, text, capsys):
    with pytest.raises(InputError) as info:
        cli.parse(argv)
    assert text in str(info.value)
    assert "\n" not in str(info.value)
    # argparse printed no usage text and did not exit.
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""


def test_version_flag(capsys):
    from hpcmm import __version__

    with pytest.raises(SystemExit) as info:
        cli.parse(["--version"])
    assert info.value.code == 0
    assert __version__ in capsys.readouterr().out


@pytest.mark.parametrize("argv, environ, field, expected", [
    ([], {}, "panel", None),
    ([], {"HPCMM_PANEL": "8"}, "panel", 8),
    (["--panel", "16"], {"HPCMM_PANEL": "8"}, "panel", 16),
    (["--panel", "16"], {}, "panel", 16),
    ([], {}, "prefetch", None),  # None: the run's rule (hpcmm.planning.algorithms.auto_prefetch)
    ([], {"HPCMM_PREFETCH": "3"}, "prefetch", 3),
    # A flag equal to zero (falsy) still wins over the environment.
    (["--prefetch", "0"], {"HPCMM_PREFETCH": "3"}, "prefetch", 0),
    ([], {}, "device", "auto"),
    ([], {"HPCMM_DEVICE": "cpu"}, "device", "cpu"),
    (["--device", "gpu"], {"HPCMM_DEVICE": "cpu"}, "device", "gpu"),
    ([], {}, "timeline", True),
    ([], {"HPCMM_TIMELINE": "no"}, "timeline", False),
    (["--no-timeline"], {"HPCMM_TIMELINE": "yes"}, "timeline", False),
    ([], {"HPCMM_RANKS_PER_NODE": "2"}, "ranks_per_node", 2),
    (["--ranks-per-node", "1"], {"HPCMM_RANKS_PER_NODE": "2"}, "ranks_per_node", 1),
    ([], {}, "balance", "auto"),
    ([], {"HPCMM_BALANCE": "none"}, "balance", "none"),
    (["--balance", "measured"], {"HPCMM_BALANCE": "none"}, "balance", "measured"),
])
def test_config_from_precedence(argv, environ, field, expected):
    """Flag over environment over default."""
    config = cli.config_from(cli.parse(argv), environ)
    assert getattr(config, field) == expected


@pytest.mark.parametrize("argv, environ, source, value", [
    ([], {}, "--cuda-aware-mpi", "auto"),
    ([], {"HPCMM_CUDA_AWARE_MPI": "yes"}, "HPCMM_CUDA_AWARE_MPI", "yes"),
    (["--cuda-aware-mpi", "no"], {"HPCMM_CUDA_AWARE_MPI": "yes"}, "--cuda-aware-mpi", "no"),
    (["--cuda-aware-mpi", "yes"], {}, "--cuda-aware-mpi", "yes"),
])
def test_config_from_reports_where_cuda_awareness_was_set(argv, environ, source, value):
    config = cli.config_from(cli.parse(argv), environ)
    assert (config.cuda_aware_mpi, config.origin("cuda_aware_mpi")) == (value, source)


def test_provenance_is_carried_on_the_config_but_not_written_as_a_setting():
    config = cli.config_from(cli.parse(["--m", "4"]), {"HPCMM_PANEL": "8", "HPCMM_PREFETCH": "2"},
                             argv=["--m", "4"])
    assert (config.origin("panel"), config.origin("prefetch"), config.origin("m")) == (
        "HPCMM_PANEL", "HPCMM_PREFETCH", "--m")
    assert config.argv == ("python -m hpcmm", "--m", "4")
    attributes = config.as_attributes()
    assert "from_environment" not in attributes and "argv" not in attributes
    # A flag given after the variable wins, and the message then names the flag.
    assert cli.config_from(cli.parse(["--panel", "4"]), {"HPCMM_PANEL": "8"}).origin("panel") == "--panel"


def test_config_from_rejects_unknown_environment():
    with pytest.raises(InputError, match="HPCMM_PANLE"):
        cli.config_from(cli.parse(["--panel", "4"]), {"HPCMM_PANLE": "4"})


def test_config_from_validates_the_combination():
    """Each flag is fine alone; together they are not, and the message says why."""
    with pytest.raises(InputError, match="--tf32 applies to float32 only"):
        cli.config_from(cli.parse(["--tf32", "--dtype", "float64"]), {})
    with pytest.raises(InputError, match="exclude each other"):
        cli.config_from(cli.parse(["--a", "a.h5:A", "--b", "a.h5:B", "--m", "4"]), {})


# -- help, version and the default output name ------------------------------------


def _subparser(name: str):
    parser = cli.build_parser()
    return next(a for a in parser._actions if a.dest == "command").choices[name]


@pytest.mark.parametrize("argv", [["--version"], ["run", "--version"], ["info", "--version"],
                                  ["bench", "--version"], ["report", "--version"]])
def test_every_subcommand_takes_version(argv, capsys):
    from hpcmm import __version__

    with pytest.raises(SystemExit) as info:
        cli.parse(argv)
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"hpcmm {__version__}"


def test_top_level_help_lists_subcommands_and_points_to_run_help():
    text = cli.build_parser().format_help()
    for sub in cli.SUBCOMMANDS:
        assert sub in text
    assert "python -m hpcmm run --help" in text
    assert "run is the default subcommand" in text
    assert "--verify none" in text  # exit 0 is said truthfully


def test_every_option_has_help_and_value_options_say_their_default():
    """--a, --b, --iteration and the rest: no option without help; defaults shown."""
    for name in ("run", "info", "bench", "report"):
        for action in _subparser(name)._actions:
            if not action.option_strings or action.dest in ("help", "version"):
                continue
            flag = action.option_strings[0]
            assert action.help, f"{name} {flag} has no help"
            if action.dest in RunConfig.__dataclass_fields__ or flag == "--iteration":
                assert "default" in action.help, f"{name} {flag}: help does not say the default"


@pytest.mark.parametrize("flag, field", [("--dtype", "dtype"), ("--seed", "seed"),
                                         ("--iters", "iters"), ("--warmup", "warmup"), ("--verify", "verify"),
                                         ("--balance", "balance")])
def test_help_shows_the_real_default(flag, field):
    action = next(a for a in _subparser("run")._actions if flag in a.option_strings)
    assert f"(default {getattr(RunConfig(), field)})" in action.help


def test_help_shows_the_prefetch_rule():
    """--prefetch has no single default: its help gives both of the rule's values."""
    from hpcmm.planning.algorithms import DEFAULT_PREFETCH, TF32_PREFETCH
    action = next(a for a in _subparser("run")._actions if "--prefetch" in a.option_strings)
    assert f"(default {DEFAULT_PREFETCH}; {TF32_PREFETCH} for TF32 on GPUs)" in action.help


def test_matrix_source_help_says_how_colons_are_written():
    action = next(a for a in _subparser("run")._actions if "--a" in a.option_strings)
    assert "':'" in action.help
    # The example in the help parses as the help says.
    assert parse_matrix_source("--a", "run:1/in.h5:/grp/t=0:A") == ("run:1/in.h5", "/grp/t=0:A")
    assert "dataset /grp/t=0:A of run:1/in.h5" in action.help


def test_info_lists_only_the_options_info_uses():
    flags = {o for a in _subparser("info")._actions for o in a.option_strings}
    assert flags == {"-h", "--help", "--version", "--status-file", "--device", "--grid",
                     "--ranks-per-node", "--cuda-aware-mpi"}
    with pytest.raises(InputError, match="unrecognized arguments: --m"):
        cli.parse(["info", "--m", "5"])


def test_run_without_out_gets_a_new_name_and_explicit_out_is_kept(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = cli.config_from(cli.parse([]), {})
    assert re.fullmatch(r"hpcmm-results-\d{8}-\d{6}(-\d+)?\.h5", config.out)
    config = cli.config_from(cli.parse(["--out", "mine.h5"]), {})
    assert config.out == "mine.h5" and config.overwrite is False
    # Other subcommands keep their own default files.
    config = cli.config_from(cli.parse(["info"]), {})
    assert config.out == RunConfig().out


def test_new_output_name_never_collides(tmp_path):
    now = datetime.datetime(2026, 11, 29, 23, 5, 7)
    first = new_output_name(str(tmp_path), now)
    assert first == "hpcmm-results-20261129-230507.h5"
    (tmp_path / first).touch()
    second = new_output_name(str(tmp_path), now)
    assert second == "hpcmm-results-20261129-230507-2.h5"
    (tmp_path / second).touch()
    assert new_output_name(str(tmp_path), now) == "hpcmm-results-20261129-230507-3.h5"
