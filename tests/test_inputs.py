"""Input matrices: generated ones do not depend on how they are cut; files are checked before use."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest

from hpcmm.errors import InputError
from hpcmm.io.inputs import TILE, check_pair, generate_block, open_source, random_vector
from hpcmm.geometry.layout import Grid, Layout

DATA = Path(__file__).resolve().parents[1] / "data"


def full(seed, which, shape, dtype=np.float64):
    return generate_block(seed, which, shape, (0, shape[0]), (0, shape[1]), dtype)


# -- generated matrices -----------------------------------------------------------


@pytest.mark.parametrize("grid", [(1, 1), (2, 1), (1, 3), (2, 2), (3, 2), (4, 4), (4, 1)])
@pytest.mark.parametrize("shape", [(37, 23, 29), (TILE + 37, 5, TILE + 3), (3, 2, 2)])
def test_blocks_of_every_grid_assemble_the_same_matrices(grid, shape):
    """A rank's block equals the same slice of the whole matrix, for any grid and tile crossing."""
    m, n, k = shape
    layout = Layout(m, n, k, Grid(*grid))
    a, b = full(7, "A", (m, k)), full(7, "B", (k, n))
    a_again = np.full((m, k), np.nan)
    b_again = np.full((k, n), np.nan)
    for rank in range(layout.grid.size):
        (r0, r1), (c0, c1) = rows, cols = layout.a_block(rank)
        a_again[r0:r1, c0:c1] = generate_block(7, "A", (m, k), rows, cols, np.float64)
        (r0, r1), (c0, c1) = rows, cols = layout.b_block(rank)
        b_again[r0:r1, c0:c1] = generate_block(7, "B", (k, n), rows, cols, np.float64)
    assert np.array_equal(a, a_again)
    assert np.array_equal(b, b_again)


def test_generated_values_are_random_and_bounded():
    a = full(3, "A", (TILE + 5, 9))
    assert a.dtype == np.float64
    assert np.all((a >= -1) & (a < 1))
    assert np.all(a != 0)
    assert len(np.unique(a)) == a.size
    # Every tile has its own stream: rows TILE apart differ.
    assert not np.array_equal(a[:5], a[TILE:TILE + 5])


def test_seed_and_matrix_change_the_values():
    base = full(1, "A", (11, 13))
    assert not np.array_equal(base, full(2, "A", (11, 13)))
    assert not np.array_equal(base, full(1, "B", (11, 13)))
    assert np.array_equal(base, full(1, "A", (11, 13)))


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_real_dtypes_round_the_float64_values(dtype):
    wide = full(5, "B", (19, 17))
    narrow = full(5, "B", (19, 17), dtype)
    assert narrow.dtype == dtype
    assert np.array_equal(narrow, wide.astype(dtype))


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_complex_dtypes(dtype):
    """Complex matrices have random imaginary parts and are cut the same way as real ones."""
    z = full(9, "A", (TILE + 2, 7), dtype)
    assert z.dtype == dtype
    assert np.all(z.imag != 0) and np.all(z.real != 0)
    assert np.all(np.abs(z.real) <= 1) and np.all(np.abs(z.imag) <= 1)
    part = generate_block(9, "A", (TILE + 2, 7), (TILE - 3, TILE + 2), (2, 6), dtype)
    assert np.array_equal(part, z[TILE - 3:TILE + 2, 2:6])


@pytest.mark.parametrize("threads", [2, 3, 7])
def test_threads_draw_the_same_values_as_one(monkeypatch, threads):
    """The tile rows may be drawn by several threads; each element still comes from its own tile's stream."""
    import hpcmm.planning.threads as threads_module

    shape, rows, cols = (5 * TILE + 37, 2 * TILE + 5), (TILE - 3, 5 * TILE + 20), (11, 2 * TILE + 1)
    one = generate_block(7, "B", shape, rows, cols, np.float32)
    monkeypatch.setattr(threads_module, "_IN_FORCE", [threads_module.BlasThreads(threads, threads, threads,
                                                                                threads, threads, "test", "-")])
    assert threads_module.threads_in_force() == threads
    many = generate_block(7, "B", shape, rows, cols, np.float32)
    assert np.array_equal(one, many)
    full = generate_block(7, "B", shape, (0, shape[0]), (0, shape[1]), np.float32)
    assert np.array_equal(many, full[rows[0]:rows[1], cols[0]:cols[1]])


def test_a_failing_tile_raises_once_the_threads_stopped(monkeypatch):
    """An error in one thread's tile reaches the caller (with its own message), after every thread stopped."""
    import threading

    import hpcmm.io.inputs as inputs
    import hpcmm.planning.threads as threads_module

    monkeypatch.setattr(threads_module, "_IN_FORCE", [threads_module.BlasThreads(2, 2, 2, 2, 2, "test", "-")])
    drawn, lock, real = [], threading.Lock(), inputs._tile

    def tile(seed, which, ti, tj, shape, dtype):
        with lock:
            drawn.append(ti)
        if ti == 0:
            raise MemoryError("tile 0")
        return real(seed, which, ti, tj, shape, dtype)

    monkeypatch.setattr(inputs, "_tile", tile)
    rows = 64
    with pytest.raises(MemoryError, match="tile 0"):
        generate_block(1, "A", (rows * TILE, 8), (0, rows * TILE), (0, 8), np.float64)
    assert 0 in drawn
    assert not [t for t in threading.enumerate() if t.name.startswith("hpcmm-generate")]


def test_empty_block():
    block = generate_block(1, "A", (4, 4), (4, 4), (0, 4), np.float32)
    assert block.shape == (0, 4) and block.dtype == np.float32


def test_random_vector_is_the_same_everywhere():
    x = random_vector(11, 50)
    assert np.array_equal(x, random_vector(11, 50))
    assert not np.array_equal(x, random_vector(12, 50))
    assert np.all(x != 0) and np.all(np.abs(x) <= 1)


# -- files ------------------------------------------------------------------------


@pytest.fixture
def h5file(tmp_path):
    """An HDF5 file with good and bad datasets."""
    path = tmp_path / "in.h5"
    rng = np.random.default_rng(0)
    with h5py.File(path, "w") as f:
        f["A"] = rng.random((6, 4))
        f["B"] = rng.random((4, 5))
        f["Bwrong"] = rng.random((3, 5))
        f["I"] = rng.integers(-5, 5, (4, 5))
        f["Z"] = rng.random((6, 4)) + 1j * rng.random((6, 4))
        f["cube"] = rng.random((2, 3, 4))
        f["vector"] = rng.random(5)
        f["empty"] = np.zeros((0, 3))
        f["words"] = np.array([["a", "b"], ["c", "d"]], dtype=h5py.string_dtype())
        f["flags"] = np.ones((2, 2), dtype=bool)
        f.create_group("group")
    return path


def test_open_h5_source(h5file):
    src = open_source("--a", str(h5file), "A")
    assert src.shape == (6, 4) and src.dtype == "float64"
    assert src.label == f"{h5file}:A"
    with h5py.File(h5file, "r") as f:
        assert np.array_equal(src.read((1, 5), (2, 4)), f["A"][1:5, 2:4])


@pytest.mark.parametrize("dataset", ["I", "Z"])
def test_integer_and_complex_files_are_accepted(h5file, dataset):
    assert open_source("--b", str(h5file), dataset).dtype in ("int64", "complex128")


def test_npy_source(tmp_path):
    array = np.random.default_rng(1).random((9, 7)).astype(np.float32)
    np.save(tmp_path / "m.npy", array)
    src = open_source("--b", str(tmp_path / "m.npy"), None)
    assert src.shape == (9, 7) and src.dtype == "float32"
    assert src.label == str(tmp_path / "m.npy")
    assert np.array_equal(src.read((2, 9), (0, 3)), array[2:9, 0:3])


@pytest.mark.parametrize("dataset, text", [
    ("nothere", "no dataset 'nothere'"),
    ("group", "no dataset 'group'"),
    ("cube", "expected a 2-D matrix, found shape (2, 3, 4)"),
    ("vector", "expected a 2-D matrix, found shape (5,)"),
    ("empty", "empty matrix of shape (0, 3)"),
    ("words", "unsupported element type"),
    ("flags", "unsupported element type bool"),
])
def test_bad_h5_inputs(h5file, dataset, text):
    with pytest.raises(InputError) as info:
        open_source("--a", str(h5file), dataset)
    message = str(info.value)
    assert message.startswith(f"--a={h5file}:{dataset}: ")
    assert text in message


def test_missing_file(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        open_source("--a", str(tmp_path / "nope.h5"), "A")
    with pytest.raises(InputError, match="no such file"):
        open_source("--b", str(tmp_path / "nope.npy"), None)


def test_not_hdf5(tmp_path):
    fake = tmp_path / "fake.h5"
    fake.write_text("this is text, not HDF5\n")
    with pytest.raises(InputError, match="not an HDF5 file"):
        open_source("--a", str(fake), "A")


def test_not_npy(tmp_path):
    fake = tmp_path / "fake.npy"
    fake.write_bytes(b"\x00garbage" * 10)
    with pytest.raises(InputError, match=r"not a NumPy \.npy file"):
        open_source("--a", str(fake), None)


def test_npy_object_array_is_refused(tmp_path):
    np.save(tmp_path / "obj.npy", np.array([[1, "x"]], dtype=object), allow_pickle=True)
    with pytest.raises(InputError):
        open_source("--a", str(tmp_path / "obj.npy"), None)


def test_check_pair(h5file):
    a = open_source("--a", str(h5file), "A")
    assert check_pair(a, open_source("--b", str(h5file), "B")) == (6, 5, 4)
    wrong = open_source("--b", str(h5file), "Bwrong")
    with pytest.raises(InputError) as info:
        check_pair(a, wrong)
    message = str(info.value)
    assert "k of A (4) != k of B (3)" in message
    assert f"{h5file}:A is 6x4" in message and f"{h5file}:Bwrong is 3x5" in message


def test_shipped_data_holds_its_products():
    """data/make_data.py's files: the stored C is A @ B (what the MPI tests compare with)."""
    with h5py.File(DATA / "small.h5", "r") as f:
        a, b, c = f["A"][()], f["B"][()], f["C"][()]
    assert a.shape == (37, 23) and b.shape == (23, 29)
    assert np.allclose(a @ b, c, rtol=0, atol=1e-13)
    a2, b2 = np.load(DATA / "A.npy"), np.load(DATA / "B.npy")
    assert np.allclose(a2 @ b2, np.load(DATA / "C_npy.npy"), rtol=0, atol=1e-13)
    src_a = open_source("--a", str(DATA / "small.h5"), "A")
    src_b = open_source("--b", str(DATA / "small.h5"), "B")
    assert check_pair(src_a, src_b) == (37, 29, 23)
    assert check_pair(open_source("--a", str(DATA / "A.npy"), None),
                      open_source("--b", str(DATA / "B.npy"), None)) == (19, 13, 11)


def test_an_input_that_is_a_fifo_or_a_folder_is_named_for_what_it_is(tmp_path):
    """A FIFO is refused before anything opens it (opening it would wait for a writer), as a FIFO."""
    import os

    fifo = tmp_path / "a.npy"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match=r"--a=.*a\.npy: not a regular file \(a FIFO, a socket or a device\)"):
        open_source("--a", str(fifo), None)
    (tmp_path / "dir.h5").mkdir()
    with pytest.raises(InputError, match=r"dir\.h5:A: is a directory"):
        open_source("--a", str(tmp_path / "dir.h5"), "A")
