"""tests/gpu/gemm_probe.py on the CPU: its cases, its rows and its file (the GPU methods say why they did not run)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

PROBE = Path(__file__).resolve().parent / "gpu" / "gemm_probe.py"


def _probe_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("gemm_probe", PROBE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks itself up there
    spec.loader.exec_module(module)
    return module


def test_cases_parse_with_tf32_as_float32():
    probe = _probe_module()
    cases = probe.parse_cases("float64:8x6x4, tf32:5x3x2")
    assert [(c.dtype, c.tf32, c.m, c.n, c.w) for c in cases] == [("float64", False, 8, 6, 4), ("float32", True, 5, 3, 2)]
    assert cases[1].name == "tf32:5x3x2" and cases[0].flops == 2.0 * 8 * 6 * 4


@pytest.mark.parametrize("text", ["float64:8x6", "float64:8x0x4", "float64:axbxc"])
def test_bad_cases_are_refused_by_name(text):
    with pytest.raises(SystemExit, match="gemm_probe: case"):
        _probe_module().parse_cases(text)


def test_probe_runs_on_the_cpu_and_writes_its_rows(tmp_path):
    out = tmp_path / "rows.json"
    done = subprocess.run([sys.executable, str(PROBE), "--device", "cpu", "--cases", "float64:64x48x16,float32:30x20x10",
                           "--repeats", "2", "--json", str(out)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    rows = json.loads(out.read_text())
    assert [(r["case"], r["method"]) for r in rows] == [
        (case, method) for case in ("float64:64x48x16", "float32:30x20x10")
        for method in ("hpcmm gemm", "nvmath heuristic", "nvmath autotuned")]
    for row in rows:
        if row["method"] == "hpcmm gemm":
            assert row["seconds"] > 0 and row["over_hpcmm"] == 1.0 and row["tflops"] > 0, row
        else:
            assert math.isnan(row["seconds"]) and row["note"] == "not on a GPU", row
    assert "hpcmm gemm" in done.stdout and "not on a GPU" in done.stdout


def test_probe_refuses_zero_repeats():
    done = subprocess.run([sys.executable, str(PROBE), "--device", "cpu", "--repeats", "0"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and "--repeats 0" in done.stderr
