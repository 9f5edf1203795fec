"""The summary a run prints: within 100 columns (or the terminal's width), rates in a unit that shows them."""

from __future__ import annotations

import io
import re

import numpy as np
import pytest

from hpcmm.bench import command as bench
from hpcmm.cli.summary import format_rate, print_summary, rate_unit, summary_figures
from hpcmm.verify import Check


def _summary(seconds: float = 1.0, flops_m: int = 100) -> dict:
    s = summary_figures(m=flops_m, n=flops_m, k=flops_m, dtype="float64", ranks=2, gpus=0,
                        product_seconds=[seconds], step_seconds=np.zeros((2, 1, 1, 3)),
                        host_seconds=np.zeros((2, 1, 1)), check=Check("freivalds", 1e-17, 1e-14, 0.5), paths={"shm"})
    s.update(panel=256, prefetch=1, algo="summa", balance="share", predicted_imbalance=0.0, ranks_per_gpu=0,
             mps=False, gemm_order="A:F B:C")
    return s


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("width", [100, 72])
def test_the_summary_fits_the_width(width):
    out = io.StringIO()
    path = "/very/" + "deep/" * 30 + "results.h5"
    print_summary(_summary(), path, file=out, width=width)
    lines = out.getvalue().splitlines()
    assert f"results: {path}" in lines  # whole, on a line of its own, to be copied
    assert max(len(line) for line in lines if not line.startswith("results: ")) <= width
    assert "would not show" in " ".join(" ".join(lines).replace("│", " ").split())


def test_the_summary_takes_the_terminals_width(monkeypatch):
    monkeypatch.setenv("COLUMNS", "64")
    out = _Terminal()
    print_summary(_summary(), None, file=out)
    plain = re.sub(r"\x1b\[[0-9;]*m", "", out.getvalue())  # rich colours a terminal
    assert max(map(len, plain.splitlines())) == 64
    monkeypatch.setenv("COLUMNS", "300")
    out = io.StringIO()  # not a terminal: 100 columns
    print_summary(_summary(), None, file=out)
    assert max(map(len, out.getvalue().splitlines())) <= 100


def test_a_cpu_rate_shows_its_figure():
    s = _summary(seconds=0.0005)  # 2e6 flops in 0.5 ms: 4 GFLOP/s
    out = io.StringIO()
    print_summary(s, None, file=out)
    text = out.getvalue()
    assert "4.000 GFLOP/s" in text and "0.00" not in text.split("GFLOP/s")[0].split("rate")[-1]
    assert format_rate(123.4) == "123.400 TFLOP/s" and format_rate(4e-7) == "0.400 MFLOP/s"
    assert format_rate(0.999) == "999.000 GFLOP/s" and format_rate(1.0) == "1.000 TFLOP/s"
    assert rate_unit([0.004, float("nan"), 0.0002]) == (1e3, "GFLOP/s")
    assert rate_unit([2.0, 0.004]) == (1.0, "TFLOP/s")


def test_a_cpu_bench_table_is_in_gflops():
    row = {"case": "float64:256", "ranks": 1, "devices": 1, "device": "cpu", "hpcmm_tflops": 0.045,
           "reference_tflops": 0.05, "efficiency": float("nan"), "hpcmm_over_reference": 0.9,
           "exposed_comm_fraction": 0.0, "cublasmp_tflops": float("nan"), "hpcmm_over_cublasmp": float("nan"),
           "heat_tflops": float("nan"), "hpcmm_over_heat": float("nan"), "cublasmp_note": "", "heat_note": "",
           "verified": 1, "reference": "one host: numpy.matmul"}
    lines = bench.format_table([row], "f.h5")
    assert "45.00" in lines[1] and "50.00" in lines[1] and lines[-2].startswith("GFLOP/s;")
