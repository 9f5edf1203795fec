"""What reading a results file back promises at its edges, one behaviour a test.

Written against the mutants that mutation testing of hpcmm/io/results.py left alive
(docs/mutation.md): the ``units`` attribute's text lists its names in order whatever order they
come in, ``units`` reads the summary unless told otherwise, a node without units has none, a plain
dataset's single unit comes back under the empty name, and attributes stored as fixed-length
(byte) strings, as HDF5 writers other than h5py's ``str`` store them, read as the same text.
"""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest
from mpi4py import MPI

import hpcmm
from hpcmm.io.results import tables, units, units_of


@pytest.fixture(scope="module")
def saved_c_file(tmp_path_factory):
    """A results file with C in it: ``/result/C`` is a dataset with no unit."""
    path = tmp_path_factory.mktemp("results") / "c.h5"
    config = hpcmm.RunConfig(m=24, n=20, k=18, iters=1, warmup=0, quiet=True, save_c=True, out=str(path))
    hpcmm.run(config, comm=MPI.COMM_SELF)
    return str(path)


def test_the_units_text_lists_its_names_sorted_whatever_their_order():
    """Names without a unit are left out; the JSON text is the same for any order of the names."""
    names = ["tflops", "panel", "exposed_comm_seconds", "peak_bytes", "load_imbalance"]
    want = ('{"exposed_comm_seconds": "s", "load_imbalance": "fraction", "peak_bytes": "bytes", '
            '"tflops": "TFLOP/s"}')
    assert units_of(names) == want
    assert units_of(reversed(names)) == want
    assert units_of(iter(["ranks", "panel"])) == "{}"


def test_a_written_summary_lists_its_units_in_sorted_order(saved_c_file):
    with h5py.File(saved_c_file, "r") as f:
        text = f["summary"].attrs["units"]
    keys = list(json.loads(text))
    assert keys == sorted(keys) and len(keys) > 3


def test_units_reads_the_summary_by_default(saved_c_file):
    summary = units(saved_c_file)
    assert summary == units(saved_c_file, "summary")
    assert summary["seconds"] == "s" and summary["tflops"] == "TFLOP/s"


def test_a_node_without_units_has_none(saved_c_file):
    """``/result/C`` holds no figure with a unit and carries no ``units``: an empty dict, not a placeholder."""
    with h5py.File(saved_c_file, "r") as f:
        assert "units" not in f["result/C"].attrs
    assert units(saved_c_file, "result/C") == {}


def test_a_plain_dataset_of_seconds_has_its_unit_under_the_empty_name(saved_c_file):
    assert units(saved_c_file, "timings/iteration_seconds") == {"": "s"}


def _fixed_length(text: str) -> np.bytes_:
    return np.bytes_(text.encode())


def test_units_stored_as_fixed_length_strings_read_as_text(tmp_path):
    """A group's and a plain dataset's units written as fixed-length byte strings (h5py reads them as bytes)."""
    path = tmp_path / "bytes.h5"
    with h5py.File(path, "w") as f:
        f.create_group("summary").attrs["units"] = _fixed_length('{"seconds": "s", "peak_bytes": "bytes"}')
        f.create_dataset("wall_seconds", data=np.random.default_rng(3).random(4)).attrs["units"] = _fixed_length("s")
    assert units(str(path)) == {"seconds": "s", "peak_bytes": "bytes"}
    assert units(str(path), "wall_seconds") == {"": "s"}


def test_a_table_whose_columns_and_units_are_fixed_length_strings(tmp_path):
    """A 2-D table with ``columns`` and ``units`` as fixed-length byte strings: decoded names, the units attached."""
    pandas = pytest.importorskip("pandas")
    path = tmp_path / "table.h5"
    data = np.random.default_rng(5).random((3, 2))
    with h5py.File(path, "w") as f:
        events = f.create_dataset("events", data=data)
        events.attrs["columns"] = np.array([b"start", b"end"], dtype="S5")
        events.attrs["units"] = _fixed_length('{"start": "s", "end": "s"}')
    frame = tables(str(path))["events"]
    assert isinstance(frame, pandas.DataFrame) and list(frame.columns) == ["start", "end"]
    assert frame.attrs["units"] == {"start": "s", "end": "s"}
    assert np.array_equal(frame.to_numpy(), data)
