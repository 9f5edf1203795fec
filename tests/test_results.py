"""A results file read back: every figure's unit, and its tables (hpcmm.io.results)."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
from mpi4py import MPI

import hpcmm
from hpcmm.io.results import tables, unit_of, units


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
    assert units(results_file, "memory") == {"needed_bytes": "bytes", "peak_bytes": "bytes", "operand_bytes": "bytes",
                                             "free_bytes": "bytes", "device_used_bytes": "bytes"}


def _stored_tables(path):
    """Every table of the file as h5py reads it: compound datasets, and 2-D ones with ``columns``."""
    stored = {}

    def visit(name, obj):
        if isinstance(obj, h5py.Dataset) and (obj.dtype.names is not None
                                              or ("columns" in obj.attrs and obj.ndim == 2)):
            stored[name] = (obj[()], dict(obj.attrs))

    with h5py.File(path, "r") as f:
        f.visititems(visit)
    return stored


def _assert_same_column(got, want, where) -> None:
    """A column read by ``tables`` against the stored one: numbers equal (NaN where NaN), strings decoded."""
    if want.dtype.kind in "OS":
        decoded = [v.decode() if isinstance(v, bytes) else v for v in want]
        assert list(got) == decoded and all(isinstance(v, str) for v in got), where
    else:
        assert np.array_equal(np.asarray(got), want, equal_nan=want.dtype.kind in "fc"), where


def test_tables_are_dataframes_of_the_stored_rows_with_their_units(results_file):
    """With pandas: one DataFrame per table, its columns and rows as stored, strings decoded, units attached."""
    pandas = pytest.importorskip("pandas")
    found, stored = tables(results_file), _stored_tables(results_file)
    assert {"topology", "memory", "timings/steps", "timings/plans", "timeline/events"} <= set(found)
    assert set(found) == set(stored)
    for name, (data, attrs) in stored.items():
        frame = found[name]
        assert isinstance(frame, pandas.DataFrame) and len(frame) == len(data), name
        names = data.dtype.names or [c.decode() if isinstance(c, bytes) else str(c) for c in attrs["columns"]]
        assert list(frame.columns) == list(names), name
        for i, column in enumerate(names):
            _assert_same_column(frame[column], data[column] if data.dtype.names else data[:, i], (name, column))
    assert found["memory"].attrs["units"]["peak_bytes"] == "bytes"
    assert found["timeline/events"].attrs["units"] == {"start": "s", "end": "s"}
    assert list(found["timeline/events"].columns)[-2:] == ["start", "end"]
    assert found["topology"].attrs["units"] == units(results_file, "topology")
    assert isinstance(found["topology"]["host"].iloc[0], str)


def test_tables_are_the_stored_arrays_without_pandas(results_file, monkeypatch):
    """Without pandas (its import fails): every table as the numpy array h5py reads, the same values."""
    import sys

    monkeypatch.setitem(sys.modules, "pandas", None)
    found, stored = tables(results_file), _stored_tables(results_file)
    assert set(found) == set(stored) and "timeline/events" in found
    for name, (data, _) in stored.items():
        assert isinstance(found[name], np.ndarray) and found[name].dtype == data.dtype, name
        if data.dtype.names is None:  # a 2-D table of numbers, as stored
            assert np.array_equal(found[name], data, equal_nan=data.dtype.kind in "fc"), name
        for column in data.dtype.names or ():
            assert np.array_equal(found[name][column], data[column], equal_nan=data[column].dtype.kind in "fc") \
                if data[column].dtype.kind != "O" else list(found[name][column]) == list(data[column]), (name, column)
    assert found["memory"]["peak_bytes"][0] > 0


def test_one_rank_records_its_operands_and_no_buffers(results_file):
    """At one rank no panel travels: every byte the rank needs is its operands' blocks (no ring, no scratch)."""
    import h5py

    with h5py.File(results_file, "r") as f:
        memory = f["memory"][()]
        summary = dict(f["summary"].attrs)
    row = memory[0]
    padded_blocks = (48 * 36 + 36 * 40 + 48 * 40) * 8  # the elements; padding may add to them
    assert row["operand_bytes"] == row["needed_bytes"] >= padded_blocks
    assert 0 < row["free_bytes"]
    assert summary["memory_ranks"] == 1 and summary["memory_buffer_bytes"] == 0
    assert summary["memory_operand_bytes"] == row["operand_bytes"]
    assert summary["memory_free_bytes"] == row["free_bytes"]


def test_the_busiest_device_is_the_one_nearest_full():
    """Ranks of one device add up; the device reported is the one with the largest share of its free bytes."""
    from hpcmm.cli.summary import busiest_device, summary_rows

    topology = [{"host": "a", "gpu_index": 0, "gpu_uuid": "u0"}, {"host": "a", "gpu_index": 0, "gpu_uuid": "u0"},
                {"host": "a", "gpu_index": 1, "gpu_uuid": "u1"}, {"host": "b", "gpu_index": 0, "gpu_uuid": "u2"}]
    memory = [{"needed_bytes": 30, "operand_bytes": 20, "free_bytes": 100, "peak_bytes": 31},
              {"needed_bytes": 25, "operand_bytes": 20, "free_bytes": 99, "peak_bytes": 26},
              {"needed_bytes": 50, "operand_bytes": 50, "free_bytes": 60, "peak_bytes": 55},
              {"needed_bytes": 10, "operand_bytes": 10, "free_bytes": 100, "peak_bytes": 11}]
    busiest = busiest_device(topology, memory)
    assert busiest == {"memory_ranks": 1, "memory_operand_bytes": 50, "memory_buffer_bytes": 0,
                       "memory_free_bytes": 60, "memory_peak_bytes": 55}
    memory[0]["needed_bytes"] = 60  # GPU 0 of a now needs 85 of 99 (GPU 1: 50 of 60): the busiest
    assert busiest_device(topology, memory) == {"memory_ranks": 2, "memory_operand_bytes": 40,
                                                "memory_buffer_bytes": 45, "memory_free_bytes": 99,
                                                "memory_peak_bytes": 57}
    assert busiest_device(topology, [{"needed_bytes": 1, "peak_bytes": 1}] * 4) == {}  # an older file
    summary = {"ranks": 4, "seconds": 1.0, "seconds_min": 1.0, "seconds_max": 1.0, "tflops": 1.0,
               "tflops_per_rank": 0.25, "load_imbalance": 0.0, "exposed_comm_fraction": 0.0,
               "exposed_comm_seconds": 0.0, "paths": [], "verify": "none", "verified": False, "residual": 0.0,
               "tolerance": 0.0, **{k: v * 2**30 if k.endswith("bytes") else v for k, v in busiest.items()}}
    assert ("memory (1 rank(s)/device)", "operands 50.0 + buffers 0.0 of 60.0 GiB free; peak 55.0") \
        in summary_rows(summary)
