"""bfloat16 on the host: the type's name, the float32 GEMM, HDF5 storage both ways, input files.

The same products at 1–4 ranks, over the shm and mpi paths, run in
``tests/mpi/test_run_mpi.py`` (``test_bfloat16_*``, ``test_other_dtypes``).
"""

from __future__ import annotations

import doctest
import json
import subprocess
import sys

import h5py
import numpy as np
import pytest

from hpcmm import dtypes as dtypes_module
from hpcmm.execution.backend import CpuBackend
from hpcmm.config import DTYPES, RunConfig
from hpcmm.dtypes import BFLOAT16, TYPE_ATTRIBUTE, read_dataset, storage_dtype, to_storage
from hpcmm.io.inputs import generate_block, open_source
from hpcmm.verify import tolerance

import ranklog


def test_module_doctests():
    result = doctest.testmod(dtypes_module)
    assert result.attempted > 0 and result.failed == 0


def test_bfloat16_is_a_run_type():
    assert "bfloat16" in DTYPES
    assert RunConfig(dtype="bfloat16").dtype == "bfloat16"
    assert np.dtype("bfloat16") == BFLOAT16 and BFLOAT16.itemsize == 2


def _operands(m, n, w, seed=3):
    rng = np.random.default_rng(seed)
    draw = lambda shape: (rng.random(shape) * 2 - 1).astype(BFLOAT16)  # noqa: E731
    return np.asfortranarray(draw((m, w))), draw((w, n)), draw((m, n))


@pytest.mark.parametrize("accumulate", [False, True])
@pytest.mark.parametrize("shape", [(37, 29, 23), (1, 5, 3), (64, 1, 300)])
def test_host_gemm_rounds_once_from_float32(accumulate, shape):
    """C (+)= A·B: the float32 sum (C added in float32) rounded to bfloat16 once, within the bound."""
    m, n, w = shape
    a, b, c0 = _operands(m, n, w)
    c = c0.copy()
    CpuBackend().gemm(a, b, c, accumulate=accumulate)
    assert c.dtype == BFLOAT16
    expected = a.astype(np.float32) @ b.astype(np.float32) + (c0.astype(np.float32) if accumulate else 0)
    assert np.array_equal(c, expected.astype(BFLOAT16))
    wide = [x.astype(np.float64) for x in (a, b, c0)]
    ref = wide[0] @ wide[1] + (wide[2] if accumulate else 0)
    scale = np.abs(wide[0]) @ np.abs(wide[1]) + (np.abs(wide[2]) if accumulate else 0)
    assert np.max(np.abs(c.astype(np.float64) - ref) / scale) <= tolerance("bfloat16", w, steps=1)


def test_host_gemm_bfloat16_is_not_float16():
    """A product whose value bfloat16 can hold and float16 cannot (overflow) comes out right."""
    a = np.asfortranarray(np.full((2, 4), 300.0, dtype=BFLOAT16))
    b = np.full((4, 2), 300.0, dtype=BFLOAT16)
    c = np.empty((2, 2), dtype=BFLOAT16)
    CpuBackend().gemm(a, b, c, accumulate=False)
    assert np.array_equal(c.astype(np.float64), np.full((2, 2), 360000.0).astype(BFLOAT16).astype(np.float64))


def test_storage_round_trip_through_hdf5(tmp_path):
    """Raw bits with the element_type attribute read back as the same bfloat16 values; others as they are."""
    values = generate_block(1, "A", (33, 17), (0, 33), (0, 17), "bfloat16")
    values[0, 0] = np.nan
    assert storage_dtype(BFLOAT16) == np.uint16 and storage_dtype(np.float32) == np.float32
    with h5py.File(tmp_path / "s.h5", "w") as f:
        f["raw"] = to_storage(values)
        f["raw"].attrs[TYPE_ATTRIBUTE] = "bfloat16"
        f["unmarked"] = to_storage(values)
        f["wide"] = values.astype(np.float32)
    with h5py.File(tmp_path / "s.h5", "r") as f:
        back = read_dataset(f["raw"])
        part = read_dataset(f["raw"], (slice(2, 5), slice(1, 4)))
        unmarked = read_dataset(f["unmarked"])
        wide = read_dataset(f["wide"])
    assert back.dtype == BFLOAT16 and np.array_equal(back.view(np.uint16), values.view(np.uint16))
    assert np.array_equal(part.view(np.uint16), values[2:5, 1:4].view(np.uint16))
    assert unmarked.dtype == np.uint16  # no attribute: integers, as written
    assert wide.dtype == np.float32 and np.array_equal(wide.astype(BFLOAT16).view(np.uint16), values.view(np.uint16))


def test_input_file_of_raw_bits_is_bfloat16(tmp_path):
    a = generate_block(2, "A", (9, 7), (0, 9), (0, 7), "bfloat16")
    path = tmp_path / "in.h5"
    with h5py.File(path, "w") as f:
        f["A"] = to_storage(a)
        f["A"].attrs[TYPE_ATTRIBUTE] = "bfloat16"
    source = open_source("--a", str(path), "A")
    assert (source.shape, source.dtype) == ((9, 7), "bfloat16")
    block = source.read((1, 4), (2, 7))
    assert block.dtype == BFLOAT16 and np.array_equal(block.view(np.uint16), a[1:4, 2:7].view(np.uint16))


def test_generated_bfloat16_is_the_rounded_float64_draw():
    """Generated blocks are the float64 draw rounded to bfloat16, tile for tile as every type's."""
    wide = generate_block(4, "B", (1500, 9), (0, 1500), (0, 9), "float64")
    narrow = generate_block(4, "B", (1500, 9), (0, 1500), (0, 9), "bfloat16")
    assert np.array_equal(narrow.view(np.uint16), wide.astype(BFLOAT16).view(np.uint16))
    assert len(np.unique(narrow.astype(np.float64))) > 200  # random, not zeros


#: Runs hpcmm's command line once per argument list in one process; prints, for each, its exit
#: status and whether ml_dtypes was imported by then (then whether reading the file of argv[2]'s C
#: gives bfloat16, and whether that imported it).
_COMMANDS = """
import json, sys
import hpcmm.cli.main
steps = []
for argv in json.loads(sys.argv[1]):
    try:
        status = hpcmm.cli.main.main(argv)
    except SystemExit as exc:
        status = exc.code
    steps.append([argv[0], status, "ml_dtypes" in sys.modules])
if sys.argv[2]:
    import h5py
    from hpcmm.dtypes import read_dataset
    with h5py.File(sys.argv[2], "r") as f:
        steps.append(["read C", str(read_dataset(f["result/C"]).dtype), "ml_dtypes" in sys.modules])
print(json.dumps(steps))
"""


def _commands(tmp_path, commands, read_c=""):
    proc = subprocess.run([sys.executable, "-c", _COMMANDS, json.dumps(commands), read_c], capture_output=True,
                          text=True, timeout=300, cwd=tmp_path, env=ranklog.environment())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_ml_dtypes_is_imported_only_where_bfloat16_is_used(tmp_path):
    """float64 runs, --help, model, report and info never import ml_dtypes (most of a second to load);
    a bfloat16 run does, and its C is written and read back as bfloat16."""
    small = ["--m", "24", "--n", "20", "--k", "16", "--device", "cpu", "--save-c", "--verify", "full", "--quiet"]
    bf16 = str(tmp_path / "bf16.h5")
    assert _commands(tmp_path, [["run", *small, "--dtype", "bfloat16", "--out", bf16]]) == [["run", 0, True]]
    f64 = str(tmp_path / "f64.h5")
    steps = _commands(tmp_path, [
        ["--help"], ["--version"], ["run", "--help"], ["bench", "--help"],
        ["run", *small, "--out", f64],
        ["report", f64], ["report", bf16],
        ["model", "predict", "--m", "4096", "--ranks", "4"],
        ["model", "predict", "--m", "4096", "--ranks", "4", "--dtype", "bfloat16"],
        ["info", "--device", "cpu"],
    ], read_c=bf16)
    *light, read = steps
    assert all(status == 0 and not loaded for _, status, loaded in light), light
    assert read == ["read C", "bfloat16", True]


def test_bfloat16_name_is_known_once_a_config_names_it():
    """A RunConfig (and so --dtype bfloat16, a bench case) of bfloat16 makes np.dtype("bfloat16") resolve."""
    code = ("import sys, numpy as np; from hpcmm.config import RunConfig; from hpcmm import dtypes; "
            "before = 'ml_dtypes' in sys.modules; RunConfig(dtype='float32'); light = 'ml_dtypes' in sys.modules; "
            "RunConfig(dtype='bfloat16'); print(before, light, np.dtype('bfloat16') is dtypes.BFLOAT16, "
            "dtypes.is_bfloat16(np.float32), dtypes.is_bfloat16('bfloat16'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=ranklog.REPO, check=True).stdout.strip()
    assert out == "False False True False True", out


def test_is_bfloat16_says_no_without_ml_dtypes():
    code = ("import sys, numpy as np; from hpcmm import dtypes; "
            "print([dtypes.is_bfloat16(t) for t in (np.float64, np.dtype('float16'), 'float32', np.uint16)], "
            "dtypes.numpy_dtype('float16'), 'ml_dtypes' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=ranklog.REPO, check=True).stdout.strip()
    assert out == "[False, False, False, False] float16 False", out
