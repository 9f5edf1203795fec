"""What hpcmm.dtypes promises at its edges, one behaviour a test.

Written against the mutants that mutation testing of hpcmm/dtypes.py left alive (docs/mutation.md):
the first use of bfloat16 in a process binds ``BFLOAT16`` (here: the module's binding taken away
first, as in a fresh process) and a later call returns the same dtype; ``numpy_dtype("bfloat16")``
works before ml_dtypes is imported (a fresh process); a missing attribute of the module is named;
a type name is bfloat16 only when it is exactly ``"bfloat16"``; only bfloat16 arrays are marked in a
file; a mark stored as a fixed-length (byte) string is read; the host GEMM of bfloat16 returns the
float32 product of the float32 operands.
"""

from __future__ import annotations

import subprocess
import sys

import h5py
import numpy as np
import pytest
from mpi4py import MPI

import hpcmm
import ranklog
from hpcmm import dtypes
from hpcmm.geometry.distribution import Layout


def test_the_first_use_binds_bfloat16_and_later_calls_return_it(monkeypatch):
    """Without ``BFLOAT16`` bound (a process that has not used bfloat16 yet), reading it binds ml_dtypes' type."""
    import ml_dtypes

    want = np.dtype(ml_dtypes.bfloat16)
    monkeypatch.delitem(vars(dtypes), "BFLOAT16", raising=False)
    assert dtypes.BFLOAT16 is want  # the module's __getattr__, then bfloat16()'s first call
    assert vars(dtypes)["BFLOAT16"] is want
    assert dtypes.bfloat16() is want and dtypes.bfloat16() is want  # the function itself is left alone
    monkeypatch.delitem(vars(dtypes), "BFLOAT16")
    assert dtypes.bfloat16() is want and want.name == "bfloat16" and want.itemsize == 2


def test_a_missing_attribute_of_the_module_is_named():
    with pytest.raises(AttributeError) as caught:
        dtypes.BFLOAT32  # noqa: B018 - the access is the test
    assert str(caught.value) == "module 'hpcmm.dtypes' has no attribute 'BFLOAT32'"


def test_numpy_dtype_names_bfloat16_before_ml_dtypes_is_loaded():
    """In a fresh process numpy knows no "bfloat16": numpy_dtype loads it rather than asking numpy."""
    assert dtypes.numpy_dtype("bfloat16") is dtypes.bfloat16()
    assert dtypes.numpy_dtype(np.dtype("bfloat16")) is dtypes.bfloat16()
    assert dtypes.numpy_dtype("float32") == np.float32
    code = ("import sys; from hpcmm.dtypes import numpy_dtype; before = 'ml_dtypes' in sys.modules; "
            "kind = numpy_dtype('bfloat16'); print(before, kind.name, kind.itemsize, 'ml_dtypes' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=ranklog.REPO, env=ranklog.environment())
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False bfloat16 2 True"


@pytest.mark.parametrize("name, want", [("bfloat16", True), ("float32", False), ("BFLOAT16", False),
                                        ("float16", False), ("", False)],
                         ids=["bfloat16", "float32", "upper", "float16", "empty"])
def test_a_type_name_is_bfloat16_only_when_it_is_exactly_that(name, want):
    assert dtypes.is_bfloat16(name) is want


@pytest.mark.parametrize("kind", ["float64", "float32", "complex128", "uint16"])
def test_only_bfloat16_is_marked_in_a_file(tmp_path, kind):
    """``storage_attributes`` of any other type is empty, and ``write_hdf5`` marks no such dataset."""
    assert dtypes.storage_attributes(np.dtype(kind)) == {}
    assert dtypes.storage_attributes(dtypes.bfloat16()) == {"element_type": "bfloat16"}
    block = (np.random.default_rng(2).random((4, 3)) * 100).astype(kind)
    path = tmp_path / "c.h5"
    hpcmm.write_hdf5(MPI.COMM_SELF, str(path), Layout.grid(4, 3, 2, (1, 1)), block)
    with h5py.File(path, "r") as f:
        assert dict(f["C"].attrs) == {} and f["C"].dtype == np.dtype(kind)
        assert np.array_equal(dtypes.read_dataset(f["C"]), block)


def test_a_mark_stored_as_a_fixed_length_string_is_read(tmp_path):
    """``element_type`` written as fixed-length bytes (h5py reads it as bytes): still bfloat16's raw bits."""
    values = (np.random.default_rng(4).random((3, 5)) * 4 - 2).astype(dtypes.bfloat16())
    path = tmp_path / "bits.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("A", data=dtypes.to_storage(values)).attrs["element_type"] = np.bytes_(b"bfloat16")
    with h5py.File(path, "r") as f:
        got = dtypes.read_dataset(f["A"])
        assert dtypes.stored_type(f["A"].dtype, f["A"].attrs) == dtypes.bfloat16()
    assert got.dtype == dtypes.bfloat16() and np.array_equal(got.view(np.uint16), values.view(np.uint16))


def test_the_host_gemm_of_bfloat16_is_the_float32_product():
    rng = np.random.default_rng(6)
    a = (rng.random((7, 5)) * 2 - 1).astype(dtypes.bfloat16())
    b = (rng.random((5, 3)) * 2 - 1).astype(dtypes.bfloat16())
    got = dtypes.host_matmul(a, b)
    assert got.dtype == np.float32
    assert np.array_equal(got, a.astype(np.float32) @ b.astype(np.float32))
