"""``hpcmm.write_hdf5`` at one rank: what it replaces, what it refuses, and how a failed write is named.

The MPI suite writes several ranks' blocks in turn (tests/mpi/test_matmul_mpi.py); these pin the rules
a caller meets first: an existing file is replaced only with ``overwrite=True``, never a directory,
and a write that fails is an :class:`~hpcmm.errors.OutputError` naming the file (and the rank whose
block could not be written), raised on every rank.
"""

from __future__ import annotations

import h5py
import numpy as np
import pytest
from mpi4py import MPI

import hpcmm
from hpcmm.errors import InputError, OutputError
from hpcmm.geometry.distribution import Layout


@pytest.fixture
def block():
    return np.random.default_rng(5).standard_normal((7, 5))


LAYOUT = Layout.grid(7, 5, 3, (1, 1))


def test_overwrite_replaces_an_existing_file_with_the_block(tmp_path, block):
    path = tmp_path / "c.h5"
    path.write_bytes(b"an earlier file")
    with pytest.raises(InputError, match=f"^{path}: exists \\(pass overwrite=True to replace a file\\)$"):
        hpcmm.write_hdf5(MPI.COMM_SELF, str(path), LAYOUT, block)
    assert path.read_bytes() == b"an earlier file"
    hpcmm.write_hdf5(MPI.COMM_SELF, str(path), LAYOUT, block, overwrite=True)
    with h5py.File(path, "r") as f:
        assert np.array_equal(f["C"][()], block)


def test_overwrite_never_replaces_a_directory(tmp_path, block):
    (tmp_path / "c.h5").mkdir()
    with pytest.raises(InputError, match="exists"):
        hpcmm.write_hdf5(MPI.COMM_SELF, str(tmp_path / "c.h5"), LAYOUT, block, overwrite=True)
    assert (tmp_path / "c.h5").is_dir() and not list((tmp_path / "c.h5").iterdir())


def test_a_file_that_cannot_be_made_is_an_output_error_naming_it(block):
    path = "/proc/hpcmm-c.h5"  # exists as a directory for everyone, root included, and takes no new file
    with pytest.raises(OutputError) as caught:
        hpcmm.write_hdf5(MPI.COMM_SELF, path, LAYOUT, block)
    assert str(caught.value).startswith(f"{path}: cannot write: ") and "\n" not in str(caught.value)


def test_a_block_that_cannot_be_written_names_its_rank(tmp_path, block, monkeypatch):
    """The file is made, then reopening it for the block fails (a full disk, say): the error names rank 0."""
    real = h5py.File

    def failing(name, mode="r", *args, **kwargs):
        if mode == "r+":
            raise OSError(28, "No space left on device")
        return real(name, mode, *args, **kwargs)

    monkeypatch.setattr(h5py, "File", failing)
    path = tmp_path / "c.h5"
    with pytest.raises(OutputError) as caught:
        hpcmm.write_hdf5(MPI.COMM_SELF, str(path), LAYOUT, block)
    assert str(caught.value) == f"{path}: cannot write rank 0's block: [Errno 28] No space left on device"
