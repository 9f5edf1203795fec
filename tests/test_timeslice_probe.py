"""tests/gpu/timeslice_probe.py without a GPU: it says so and exits 2; bad options are refused by name."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

PROBE = Path(__file__).resolve().parent / "gpu" / "timeslice_probe.py"


def _run(*args):
    return subprocess.run([sys.executable, str(PROBE), *args], capture_output=True, text=True, timeout=120)


@pytest.mark.skipif(subprocess.run([sys.executable, "-c", "import cupy; assert cupy.cuda.runtime.getDeviceCount()"],
                                   capture_output=True).returncode == 0, reason="a GPU is here: the probe would run")
def test_without_a_gpu_it_says_so_and_exits_2():
    proc = _run("--seconds", "0.1")
    assert proc.returncode == 2
    assert "needs a GPU" in proc.stderr


@pytest.mark.parametrize("args, message", [(["--shape", "3x4"], "--shape='3x4'"), (["--shape", "3x0x4"], "at least 1"),
                                           (["--copy-mib", "0"], "--copy-mib=0")])
def test_bad_options_are_refused_by_name(args, message):
    proc = _run(*args)
    assert proc.returncode != 0
    assert message in proc.stderr
