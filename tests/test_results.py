"""A results file read back: every figure's unit, and its tables (hpcmm.results)."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
from mpi4py import MPI

import hpcmm
from hpcmm.results import tables, unit_of, units


@pytest.fixture(scope="module")
def results_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("results") / "r.h5"
    config = hpcmm.RunConfig(m=48, n=40, k=36, iters=2, warmup=0, quiet=True, out=str(path))
    hpcmm.run(config, comm=MPI.COMM_SELF)
    return str(path)


@pytest.mark.parametrize("name, unit", [
    ("seconds", "s"), ("exposed_comm_seconds", "s"), ("plan_seconds", "s"), ("exposed_comm_fraction", "fraction"),
    ("load_imbalance", "fraction"), ("peak_memory_bytes_max", "bytes"), ("tflops", "TFLOP/s"), ("flops", "flop"),
    ("panel", None), ("ranks", None), ("paths", None), ("gemm_order", None),
])
def test_unit_of_names(name, unit):
    assert unit_of(name) == unit


def test_every_figure_of_the_summary_with_a_unit_says_it(results_file):
    summary = units(results_file, "summary")
    with h5py.File(results_file, "r") as f:
        attrs = dict(f["summary"].attrs)
        assert f["timings/iteration_seconds"].attrs["units"] == "s"
    assert summary["seconds"] == "s" and summary["load_imbalance"] == "fraction"
    assert set(summary) <= set(attrs)
    # a fraction is stored as the fraction, the summary prints it as a percentage
    assert 0 <= attrs["exposed_comm_fraction"] <= 1
    assert units(results_file, "memory") == {"needed_bytes": "bytes", "peak_bytes": "bytes"}


def test_tables_reads_every_table(results_file):
    found = tables(results_file)
    assert {"topology", "memory", "timings/steps", "timings/plans", "timeline/events"} <= set(found)
    memory = found["memory"]
    rows = len(memory)
    assert rows == 1
    try:
        import pandas  # noqa: F401
    except ImportError:
        assert isinstance(memory, np.ndarray) and memory["peak_bytes"][0] > 0
    else:
        assert memory["peak_bytes"].iloc[0] > 0 and memory.attrs["units"]["peak_bytes"] == "bytes"
        assert list(found["timeline/events"].columns)[-2:] == ["start", "end"]
