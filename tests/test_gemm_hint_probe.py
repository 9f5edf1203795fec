"""tests/gpu/gemm_hint_probe.py on the CPU: rotating order, its rows and its file (the hint contender is GPU-only)."""

from __future__ import annotations

import doctest
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

PROBE = Path(__file__).resolve().parent / "gpu" / "gemm_hint_probe.py"


def _probe_module():
    spec = importlib.util.spec_from_file_location("gemm_hint_probe", PROBE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_doctests():
    assert doctest.testmod(_probe_module()).failed == 0


def test_every_contender_takes_every_place_in_turn():
    rounds = _probe_module().rotations(["a", "b", "c"], 6)
    for name in "abc":
        assert sorted(order.index(name) for order in rounds) == [0, 0, 1, 1, 2, 2]


def test_contenders_are_timed_in_rotating_order_and_compute_the_product():
    probe = _probe_module()
    from hpcmm.execution.backend import make_backend

    seen = []

    def timer(name, product, warmup, repeats):
        seen.append(name)
        product()
        return [1e-3] * repeats

    backend = make_backend("cpu", 0, 1)
    rows = probe.probe(backend, ("float64", 6, 5, 4), rounds=2, timer=timer)
    assert seen == ["cupy matmul", "hpcmm gemm", "hpcmm gemm", "cupy matmul"]
    assert [r["contender"] for r in rows] == ["cupy matmul", "hpcmm gemm"]
    assert all(abs(r["tflops"] - 2 * 6 * 5 * 4 / 1e-3 / 1e12) < 1e-12 for r in rows)


def test_probe_runs_on_the_cpu_and_writes_its_rows(tmp_path):
    out = tmp_path / "rows.json"
    proc = subprocess.run([sys.executable, str(PROBE), "--device", "cpu", "--cases", "float64:64x48x32,float32:33x17x9",
                           "--rounds", "2", "--json", str(out)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(out.read_text())
    assert [(r["case"], r["contender"]) for r in rows] == [
        ("float64:64x48x32", "cupy matmul"), ("float64:64x48x32", "hpcmm gemm"),
        ("float32:33x17x9", "cupy matmul"), ("float32:33x17x9", "hpcmm gemm")]
    assert all(np.isfinite(r["tflops"]) and r["tflops"] > 0 for r in rows)
    assert [r["over_cupy"] for r in rows][::2] == [1.0, 1.0]
