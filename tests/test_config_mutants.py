"""What a run's settings promise: the exact message of each refusal, the values at the edges.

Written against the mutants that mutation testing of hpcmm/config.py left alive
(docs/mutation.md).  Every refusal is one line that names the option (or the ``HPCMM_*``
variable it came from), the bad value and what is expected; these tests pin the whole line.
The parsers of :data:`hpcmm.config.ENVIRONMENT` are made once, when the module is imported,
by ``_choice``, ``_tristate`` and ``_yes_no``: the tests make them afresh the same way.
A config of bfloat16 makes numpy know the type's name, and one of another type leaves ml_dtypes
unloaded: a fresh process shows both.
"""

from __future__ import annotations

import datetime
import os
import re
import subprocess
import sys

import pytest

from hpcmm import config
from hpcmm.config import (ENVIRONMENT, INT_MAX, NO_WORDS, YES_WORDS, RunConfig, check_utf8, new_output_name,
                          parse_matrix_source, parse_number, parse_positive_int, regular_file,
                          settings_from_environment)
from hpcmm.errors import InputError
from hpcmm.execution.gemm_library import LIBRARIES
from hpcmm.planning.gemm_orders import AUTO, ORDERS
from hpcmm.planning.grid_orientation import ORIENTATIONS
from launcher import REPO


def _refused(make, message, error=InputError):
    with pytest.raises(error) as caught:
        make()
    assert str(caught.value) == message
    return caught.value


# -- RunConfig's refusals, whole lines ------------------------------------------------------


@pytest.mark.parametrize("kwargs, message", [
    ({"dtype": "int8"}, "--dtype='int8': expected one of float64, float32, float16, bfloat16, complex128, complex64"),
    ({"device": "tpu"}, "--device='tpu': expected one of auto, gpu, cpu"),
    ({"verify": "some"}, "--verify='some': expected one of freivalds, full, none"),
    ({"cuda_aware_mpi": "maybe"}, "--cuda-aware-mpi='maybe': expected one of auto, yes, no"),
    ({"gemm_order": "XY"}, f"HPCMM_GEMM_ORDER='XY': expected {AUTO} or one of {', '.join(ORDERS)}"),
    ({"gemm_library": "mkl"}, f"HPCMM_GEMM_LIBRARY='mkl': expected one of {', '.join(LIBRARIES)}"),
    ({"grid_orientation": "diagonal"},
     f"HPCMM_GRID_ORIENTATION='diagonal': expected one of {', '.join(ORIENTATIONS)}"),
    ({"step_order": "random"}, "HPCMM_STEP_ORDER='random': expected one of auto, common"),
    ({"alpha": float("inf")}, "--alpha=inf: expected a finite number"),
    ({"beta": float("nan")}, "--beta=nan: expected a finite number"),
    ({"alpha": True}, "--alpha=True: expected a finite number"),
    ({"beta": "1"}, "--beta='1': expected a finite number"),
    ({"op_a": "X"}, "--op-a='X': expected one of N, T, C"),
    ({"op_b": "n"}, "--op-b='n': expected one of N, T, C"),
    ({"a": ("a.h5", "A")}, "--a and --b go together: give both input files or neither"),
    ({"a": ("a.h5", "A"), "b": ("b.h5", "B"), "k": 4},
     "--m/--n/--k and --a/--b exclude each other: sizes come from the files"),
    ({"dtype": "float64", "tf32": True}, "--tf32 applies to float32 only, not --dtype=float64"),
    ({"iters": 0}, "--iters=0: expected an integer >= 1"),
    ({"prefetch": 9}, "--prefetch=9: expected an integer from 0 to 8"),
    ({"warmup": -1}, "--warmup=-1: expected an integer >= 0"),
])
def test_a_bad_setting_is_refused_in_one_whole_line(kwargs, message):
    _refused(lambda: RunConfig(**kwargs), message)


def test_an_algo_from_the_environment_is_named_by_its_variable():
    env = frozenset({"algo"})
    _refused(lambda: RunConfig(algo="fast", from_environment=env),
             "HPCMM_ALGO='fast': expected summa, 2.5d, 2.5d:C (C an integer >= 1) or auto")
    _refused(lambda: RunConfig(algo="fast"), "--algo='fast': expected summa, 2.5d, 2.5d:C (C an integer >= 1) or auto")
    _refused(lambda: RunConfig(algo="2.5d:2", grid=(2, 3), from_environment=env),
             "--grid=2x3: applies to --algo=summa only, not HPCMM_ALGO=2.5d:2 "
             "(each 2.5d layer takes the most square grid)")


def test_edge_values_are_accepted():
    assert RunConfig(warmup=0).warmup == 0
    assert RunConfig(seed=0).seed == 0
    assert RunConfig(dtype="float32", tf32=True).tf32
    assert RunConfig(out="run.hdf5").out == "run.hdf5"
    assert RunConfig(algo="2.5d:2").algo == "2.5d:2"  # no grid: nothing to refuse
    assert RunConfig(algo="auto", grid=None).grid is None
    assert RunConfig(alpha=2, beta=-0.5).alpha == 2
    for order in ORDERS:
        assert RunConfig(gemm_order=order).gemm_order == order


def test_provenance_must_name_an_environment_field():
    _refused(lambda: RunConfig(from_environment=frozenset({"bogus", "out"})),
             "from_environment names fields no HPCMM_* variable sets: ['bogus', 'out']", ValueError)
    assert RunConfig(from_environment=frozenset({"panel"}), panel=4).origin("panel") == "HPCMM_PANEL"


def test_settings_leave_out_the_provenance():
    names = RunConfig.settings()
    assert "from_environment" not in names and "argv" not in names
    assert names[:3] == ["m", "n", "k"] and "machine" in names and "quiet" in names



#: In a fresh process: whether ml_dtypes is loaded after a float32 RunConfig, then whether numpy knows
#: the name "bfloat16" after a bfloat16 one.
_TYPE_NAMES = """
import sys, numpy as np
from hpcmm.config import RunConfig
RunConfig(dtype="float32")
light = "ml_dtypes" not in sys.modules
RunConfig(dtype="bfloat16")
print(light, np.dtype("bfloat16").name, "ml_dtypes" in sys.modules)
"""


def test_a_bfloat16_config_makes_the_type_name_known_and_others_stay_light():
    """--dtype bfloat16 makes np.dtype("bfloat16") resolve for the whole run; any other type leaves
    ml_dtypes (most of a second to import) unloaded."""
    assert RunConfig(dtype="bfloat16").dtype == "bfloat16" and RunConfig(dtype="float32").dtype == "float32"
    proc = subprocess.run([sys.executable, "-c", _TYPE_NAMES], capture_output=True, text=True, cwd=REPO,
                          env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.split() == ["True", "bfloat16", "True"], proc.stdout + proc.stderr

# -- parse_positive_int, parse_number ----------------------------------------------------------


def test_the_largest_integer_the_file_stores_is_the_limit():
    assert parse_positive_int("--seed", INT_MAX, minimum=0) == INT_MAX
    assert parse_positive_int("--seed", str(INT_MAX), minimum=0) == INT_MAX
    _refused(lambda: parse_positive_int("--seed", INT_MAX + 1, minimum=0),
             f"--seed={INT_MAX + 1}: expected an integer <= {INT_MAX} (2**63 - 1, what the results file stores)")


def test_a_range_is_stated_only_with_a_maximum():
    _refused(lambda: parse_positive_int("--m", "x"), "--m='x': expected an integer >= 1")
    _refused(lambda: parse_positive_int("--prefetch", "x", minimum=0, maximum=8),
             "--prefetch='x': expected an integer from 0 to 8")


def test_parse_number():
    assert parse_number("--alpha", " -2.5e1 ") == -25.0
    _refused(lambda: parse_number("--alpha", "two"), "--alpha='two': expected a number")
    _refused(lambda: parse_number("--beta", "inf"), "--beta='inf': expected a finite number")
    _refused(lambda: parse_number("--beta", "-nan"), "--beta='-nan': expected a finite number")


# -- file names ---------------------------------------------------------------------------------


NOW = datetime.datetime(2026, 11, 29, 23, 5, 7)


def test_a_name_taken_in_the_current_directory_gives_way(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "hpcmm-results-20261129-230507.h5").write_bytes(b"")
    assert new_output_name(now=NOW) == "hpcmm-results-20261129-230507-2.h5"
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "hpcmm-bench-20261129-230507.h5").write_bytes(b"")
    (sub / "hpcmm-bench-20261129-230507-2.h5").write_bytes(b"")
    assert new_output_name(str(sub), NOW, kind="bench") == "hpcmm-bench-20261129-230507-3.h5"
    assert new_output_name(str(sub), NOW) == "hpcmm-results-20261129-230507.h5"


def test_an_unknown_kind_of_file_is_refused():
    _refused(lambda: new_output_name(".", NOW, kind="log"), "kind='log': expected one of results, bench, transport",
             ValueError)


def test_regular_file(tmp_path):
    path = tmp_path / "a.h5"
    path.write_bytes(os.urandom(64))
    assert regular_file(str(path), "--a").st_size == 64
    _refused(lambda: regular_file(str(tmp_path / "none.h5"), "--a=none.h5"), "--a=none.h5: no such file")
    _refused(lambda: regular_file(str(tmp_path), "--b=dir"), "--b=dir: is a directory")
    _refused(lambda: regular_file(str(path / "x.h5"), "--a=a.h5/x.h5"), "--a=a.h5/x.h5: cannot read it (Not a directory)")
    fifo = tmp_path / "fifo.h5"
    os.mkfifo(fifo)
    _refused(lambda: regular_file(str(fifo), "--a=fifo.h5"),
             "--a=fifo.h5: not a regular file (a FIFO, a socket or a device): hpcmm reads files only")


def test_a_second_colon_after_a_npy_name_is_not_a_dataset():
    _refused(lambda: parse_matrix_source("--a", "in.npy:x:y"),
             "--a='in.npy:x:y': expected FILE.h5:DATASET or FILE.npy")


def test_an_argument_that_is_not_utf8_is_shown_escaped_after_its_option():
    bad = os.fsdecode(b"r\xfe.h5")
    _refused(lambda: check_utf8(["--quiet", "--out", bad]),
             "argument 'r\\xfe.h5' (after --out) is not UTF-8 text: hpcmm records its command line "
             "and file names in UTF-8; rename the file")
    _refused(lambda: check_utf8([bad, "--out", "x.h5"]),
             "argument 'r\\xfe.h5' is not UTF-8 text: hpcmm records its command line "
             "and file names in UTF-8; rename the file")
    _refused(lambda: check_utf8(["run", bad, "-q"]),
             "argument 'r\\xfe.h5' is not UTF-8 text: hpcmm records its command line "
             "and file names in UTF-8; rename the file")
    check_utf8(["--out", "résultats-λ.h5", "--m", "8"])


# -- the environment ------------------------------------------------------------------------------


def test_an_unknown_variable_lists_every_known_one():
    _refused(lambda: settings_from_environment({"HPCMM_NOPE": "1"}),
             f"HPCMM_NOPE='1': unknown setting (known: {', '.join(sorted(ENVIRONMENT))})")


def test_choice_parser_takes_any_case_and_names_the_variable():
    parse = config._choice("HPCMM_DEVICE", ("auto", "gpu", "cpu"))
    assert parse(" GPU ") == "gpu" and parse("cpu") == "cpu"
    _refused(lambda: parse("TPU"), "HPCMM_DEVICE='TPU': expected one of auto, gpu, cpu")


def test_tristate_parser_normalises_yes_and_no():
    parse = config._tristate("HPCMM_CUDA_AWARE_MPI")
    for word in YES_WORDS:
        assert parse(word.upper()) == "yes"
    for word in NO_WORDS:
        assert parse(f" {word} ") == "no"
    assert parse("Auto") == "auto"
    words = ", ".join(("auto",) + YES_WORDS + NO_WORDS)
    _refused(lambda: parse("maybe"), f"HPCMM_CUDA_AWARE_MPI='maybe': expected one of {words}")


def test_yes_no_parser_gives_a_bool_and_refuses_auto():
    parse = config._yes_no("HPCMM_TIMELINE")
    assert [parse(w) for w in YES_WORDS] == [True] * len(YES_WORDS)
    assert [parse(w.upper()) for w in NO_WORDS] == [False] * len(NO_WORDS)
    _refused(lambda: parse("auto"), f"HPCMM_TIMELINE='auto': expected one of {', '.join(YES_WORDS + NO_WORDS)}")


def test_the_table_parses_as_the_parsers_do():
    assert settings_from_environment({"HPCMM_CUDA_AWARE_MPI": "ON", "HPCMM_TIMELINE": "off",
                                      "HPCMM_DEVICE": "CPU"}) == {"cuda_aware_mpi": "yes", "timeline": False,
                                                                   "device": "cpu"}
    assert re.fullmatch(r"HPCMM_\w+", next(iter(ENVIRONMENT)))
