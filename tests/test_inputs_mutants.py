"""What the operands promise: the generated matrices' values across tiles, the blocks read from
files, and the exact message of each refusal.

Written against the mutants that mutation testing of hpcmm/io/inputs.py left alive
(docs/mutation.md).  The generated matrices are pinned to what the module's docstring says they
are (tile (ti, tj) drawn from its own stream seeded by (seed, matrix, ti, tj), uniform in
[-1, 1)), with blocks that cross tile edges, so that a run reproduces the same A, B and C.
"""

from __future__ import annotations

import os

import h5py
import numpy as np
import pytest
from test_reliability_budget import scaled

from hpcmm.errors import InputError
from hpcmm.io.inputs import TILE, MatrixSource, check_pair, generate_block, open_source, random_vector

IDS = {"A": 1, "B": 2, "C": 4}


def _reference(seed, which, shape, dtype):
    """The whole generated matrix, tile by tile, as the module's docstring describes it."""
    rows, cols = shape
    out = np.empty(shape, dtype=dtype)
    for ti in range(-(-rows // TILE)):
        for tj in range(-(-cols // TILE)):
            r0, r1, c0, c1 = ti * TILE, min((ti + 1) * TILE, rows), tj * TILE, min((tj + 1) * TILE, cols)
            rng = np.random.default_rng([seed, IDS[which], ti, tj])
            values = rng.random((r1 - r0, c1 - c0)) * 2.0 - 1.0
            if np.dtype(dtype).kind == "c":
                values = values + 1j * (rng.random((r1 - r0, c1 - c0)) * 2.0 - 1.0)
            out[r0:r1, c0:c1] = values
    return out


@pytest.mark.parametrize("dtype", [np.float64, np.complex128, np.float32])
def test_blocks_across_tile_edges_are_the_documented_matrix(dtype):
    shape = (TILE + 300, 2 * TILE + 40)
    seed = int(np.random.default_rng(5).integers(1, 10**6))
    want = _reference(seed, "B", shape, dtype)
    rng = np.random.default_rng(seed)
    blocks = [((0, shape[0]), (0, shape[1])), ((TILE - 3, TILE + 9), (2 * TILE - 5, 2 * TILE + 7)),
              ((TILE + 1, TILE + 300), (TILE, 2 * TILE)), ((5, TILE), (TILE - 1, TILE + 1))]
    for _ in range(3):
        r0, c0 = int(rng.integers(0, shape[0] - 1)), int(rng.integers(0, shape[1] - 1))
        blocks.append(((r0, int(rng.integers(r0 + 1, shape[0] + 1))), (c0, int(rng.integers(c0 + 1, shape[1] + 1)))))
    for rows, cols in blocks:
        got = generate_block(seed, "B", shape, rows, cols, dtype)
        assert got.dtype == dtype
        np.testing.assert_array_equal(got, want[rows[0]:rows[1], cols[0]:cols[1]], err_msg=str((rows, cols)))
    assert want.real.min() < -0.99 and want.real.max() > 0.99  # uniform over [-1, 1)


def test_the_verification_vector_is_uniform_in_its_type():
    x = random_vector(17, 5000, np.float32)
    assert x.dtype == np.float32
    ref = (np.random.default_rng([17, 3]).random(5000) * 2.0 - 1.0).astype(np.float32)
    np.testing.assert_array_equal(x, ref)
    assert x.min() < -0.99 and x.max() > 0.99


# -- files --------------------------------------------------------------------------------------


@pytest.fixture()
def data():
    return np.random.default_rng(9).random((7, 6))


def test_a_block_inside_an_h5_dataset(tmp_path, data):
    path = tmp_path / "a.h5"
    with h5py.File(path, "w") as f:
        f["A"] = data
    src = open_source("--a", str(path), "A")
    np.testing.assert_array_equal(src.read((2, 5), (1, 4)), data[2:5, 1:4])


@pytest.mark.parametrize("fortran", [False, True])
@pytest.mark.parametrize("version", [(1, 0), (2, 0)])
def test_a_block_inside_an_npy_file(tmp_path, data, fortran, version):
    path = tmp_path / "a.npy"
    array = np.asfortranarray(data) if fortran else np.ascontiguousarray(data)
    with open(path, "wb") as fh:
        np.lib.format.write_array(fh, array, version=version)
    src = open_source("--a", str(path), None)
    assert src.shape == (7, 6) and src.dtype == "float64" and src.flag == "--a"
    for rows, cols in (((2, 5), (1, 4)), ((0, 7), (0, 6)), ((6, 7), (5, 6))):
        block = src.read(rows, cols)
        np.testing.assert_array_equal(block, data[rows[0]:rows[1], cols[0]:cols[1]])
        assert block.flags.c_contiguous


def test_a_file_cut_short_after_it_was_opened_names_the_block_and_sizes(tmp_path, data):
    path = tmp_path / "b.npy"
    np.save(path, data)
    src = open_source("--b", str(path), None)
    full = os.path.getsize(path)
    os.truncate(path, full - 8 * 10)
    with pytest.raises(InputError) as caught:
        src.read((0, 7), (0, 6))
    assert str(caught.value) == (f"--b={path}: cannot read rows 0:7, columns 0:6 (truncated: {full - 80} bytes, "
                                 f"the data of shape (7, 6) needs {full})")


def test_an_h5_read_that_fails_is_one_line(tmp_path, data):
    path = tmp_path / "a.h5"
    with h5py.File(path, "w") as f:
        f["A"] = data
    src = open_source("--a", str(path), "A")
    os.truncate(path, 100)
    with pytest.raises(InputError) as caught:
        src.read((0, 2), (0, 2))
    message = str(caught.value)
    assert message.startswith(f"--a={path}:A: cannot read rows 0:2, columns 0:2 (") and message.endswith(")")
    assert "\n" not in message and "  " not in message


def test_npy_refusals_name_the_file_alone(tmp_path, data):
    path = tmp_path / "c.npy"
    np.save(path, data)
    os.truncate(path, os.path.getsize(path) - 16)
    with pytest.raises(InputError) as caught:
        open_source("--a", str(path), None)
    size = os.path.getsize(path)
    assert str(caught.value) == f"--a={path}: truncated ({size} bytes, the data of shape (7, 6) needs {size + 16})"
    with pytest.raises(InputError) as caught:
        open_source("--b", str(tmp_path / "none.npy"), None)
    assert str(caught.value) == f"--b={tmp_path / 'none.npy'}: no such file"
    junk = tmp_path / "junk.npy"
    junk.write_bytes(b"not an array at all")
    with pytest.raises(InputError) as caught:
        open_source("--a", str(junk), None)
    assert str(caught.value) == f"--a={junk}: not a NumPy .npy file (ValueError)"
    objects = tmp_path / "objects.npy"
    np.save(objects, np.array([[1, "x"]], dtype=object), allow_pickle=True)
    with pytest.raises(InputError) as caught:
        open_source("--a", str(objects), None)
    assert str(caught.value) == f"--a={objects}: holds Python objects, not numbers"


@pytest.mark.parametrize("dtype", [np.int32, np.uint8, np.int64])
def test_integer_files_are_accepted(tmp_path, dtype):
    path = tmp_path / "i.npy"
    np.save(path, np.random.default_rng(2).integers(0, 100, (3, 4)).astype(dtype))
    assert open_source("--a", str(path), None).dtype == np.dtype(dtype).name


def test_h5_refusals_in_whole_lines(tmp_path, data):
    path = tmp_path / "d.h5"
    with h5py.File(path, "w") as f:
        f["A"] = data
        f["nowhere"] = h5py.SoftLink("/missing")
        f.create_group("group")
        f.create_dataset("null", data=h5py.Empty("f8"))
    cases = {"missing": f"no dataset 'missing' in {path}", "nowhere": "'nowhere' is a link that leads nowhere",
             "group": f"no dataset 'group' in {path}", "null": "the dataset has an empty dataspace (no shape)"}
    for dataset, why in cases.items():
        with pytest.raises(InputError) as caught:
            open_source("--b", str(path), dataset)
        assert str(caught.value) == f"--b={path}:{dataset}: {why}"
    text = tmp_path / "t.h5"
    text.write_text("plain text, not HDF5")
    with pytest.raises(InputError) as caught:
        open_source("--a", str(text), "A")
    assert str(caught.value) == f"--a={text}:A: not an HDF5 file"
    broken = tmp_path / "broken.h5"
    broken.write_bytes(path.read_bytes()[:600])
    with pytest.raises(InputError) as caught:
        open_source("--a", str(broken), "A")
    message = str(caught.value)
    assert message.startswith(f"--a={broken}:A: cannot open it as HDF5 (") and "\n" not in message


# -- check_pair ---------------------------------------------------------------------------------


def _src(flag, name, shape):
    return MatrixSource(flag, f"{name}.h5", name, shape, "float64")


def test_check_pair_with_ops_gives_the_product_shape():
    assert check_pair(_src("--a", "A", (3, 4)), _src("--b", "B", (4, 5))) == (3, 5, 4)
    assert check_pair(_src("--a", "A", (4, 3)), _src("--b", "B", (4, 5)), "T") == (3, 5, 4)
    assert check_pair(_src("--a", "A", (3, 4)), _src("--b", "B", (5, 4)), "N", "C") == (3, 5, 4)
    assert check_pair(_src("--a", "A", (4, 3)), _src("--b", "B", (5, 4)), "C", "T") == (3, 5, 4)


def test_check_pair_mismatch_names_both_files_and_ops():
    with pytest.raises(InputError) as caught:
        check_pair(_src("--a", "A", (3, 4)), _src("--b", "B", (6, 5)))
    assert str(caught.value) == "--a=A.h5:A is 3x4 and --b=B.h5:B is 6x5: k of A (4) != k of B (6)"
    with pytest.raises(InputError) as caught:
        check_pair(_src("--a", "A", (4, 3)), _src("--b", "B", (6, 5)), "T", "C")
    assert str(caught.value) == ("--a=A.h5:A is 4x3 (op T: 3x4) and --b=B.h5:B is 6x5 (op C: 5x6): "
                                 "k of op(A) (4) != k of op(B) (5)")


# -- more edges: a last row at a tile's end, blocks past their first tile, filters, types ---------


def test_blocks_that_end_one_before_a_tile_edge():
    want = _reference(3, "A", (TILE - 1, 40), np.float64)
    np.testing.assert_array_equal(generate_block(3, "A", (TILE - 1, 40), (0, TILE - 1), (0, 40), np.float64), want)
    wide = _reference(3, "A", (40, 2 * TILE - 1), np.float64)
    np.testing.assert_array_equal(generate_block(3, "A", (40, 2 * TILE - 1), (0, 40), (5, 2 * TILE - 1), np.float64),
                                  wide[:, 5:])
    tall = _reference(3, "C", (TILE + 100, TILE + 100), np.float64)
    for rows, cols in (((0, TILE - 1), (0, TILE - 1)), ((TILE + 5, TILE + 100), (TILE + 5, TILE + 100)),
                       ((2, 9), (TILE + 5, TILE + 100))):
        np.testing.assert_array_equal(generate_block(3, "C", tall.shape, rows, cols, np.float64),
                                      tall[rows[0]:rows[1], cols[0]:cols[1]])


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.uint8])
def test_a_block_of_an_npy_file_keeps_its_type(tmp_path, dtype):
    array = (np.random.default_rng(4).random((5, 6)) * 100).astype(dtype)
    path = tmp_path / "t.npy"
    np.save(path, array)
    block = open_source("--a", str(path), None).read((1, 4), (2, 6))
    assert block.dtype == dtype
    np.testing.assert_array_equal(block, array[1:4, 2:6])


def test_a_filter_that_is_not_installed_is_named_and_an_installed_one_is_read(tmp_path):
    path = tmp_path / "f.h5"
    data = np.random.default_rng(8).random((8, 8))
    with h5py.File(path, "w") as f:
        f.create_dataset("U", data=data, chunks=(4, 4), compression=32015, allow_unknown_filter=True)
        f.create_dataset("G", data=data, compression="gzip")
    with pytest.raises(InputError) as caught:
        open_source("--a", str(path), "U")
    assert str(caught.value) == f"--a={path}:U: compressed with HDF5 filter(s) [32015], not installed here"
    np.testing.assert_array_equal(open_source("--a", str(path), "G").read((0, 8), (2, 5)), data[:, 2:5])


def test_a_damaged_h5_file_says_what_hdf5_says(tmp_path):
    path = tmp_path / "whole.h5"
    with h5py.File(path, "w") as f:
        f["A"] = np.random.default_rng(1).random((30, 30))
    broken = tmp_path / "broken.h5"
    broken.write_bytes(path.read_bytes()[:600])
    with pytest.raises(InputError) as caught:
        open_source("--a", str(broken), "A")
    assert "truncated file: eof = 600" in str(caught.value)


def test_a_file_this_user_may_not_read_is_refused_as_such(tmp_path, monkeypatch):
    """As a user without read permission sees it (root may read anything, so ``os.access`` answers as for one)."""
    path = tmp_path / "a.npy"
    np.save(path, np.ones((2, 2)))
    monkeypatch.setattr(os, "access", lambda where, mode: not (where == str(path) and mode == os.R_OK))
    with pytest.raises(InputError) as caught:
        open_source("--a", str(path), None)
    assert str(caught.value) == f"--a={path}: not readable (permission denied)"


def test_a_failure_without_a_message_is_named_by_its_type(tmp_path, monkeypatch):
    path = tmp_path / "a.h5"
    with h5py.File(path, "w") as f:
        f["A"] = np.ones((2, 2))
    source = open_source("--a", str(path), "A")

    def fails(*args, **kwargs):
        raise OSError()  # a file system that fails without saying why

    monkeypatch.setattr(h5py, "File", fails)
    with pytest.raises(InputError) as caught:
        source.read((0, 2), (0, 2))
    assert str(caught.value) == f"--a={path}:A: cannot read rows 0:2, columns 0:2 (OSError)"
    with pytest.raises(InputError) as caught:
        open_source("--b", str(path), "A")
    assert str(caught.value) == f"--b={path}:A: cannot open it as HDF5 (OSError)"


# -- the threads that draw a block -----------------------------------------------------------------


def _threads_in_force(monkeypatch, threads):
    import hpcmm.planning.threads as threads_module

    monkeypatch.setattr(threads_module, "_IN_FORCE", [threads_module.BlasThreads(threads, threads, threads,
                                                                                threads, threads, "test", "-")])
    assert threads_module.threads_in_force() == threads


@pytest.mark.parametrize("threads, tile_rows", [(2, 8), (3, 8), (4, 2), (1, 4)])
def test_a_block_is_drawn_by_as_many_threads_as_are_in_force_and_no_more(monkeypatch, threads, tile_rows):
    """Tile rows are drawn at once by the threads in force (no more than there are tile rows), never by
    more: each draw here holds on until as many are under way, or a while, so that an extra thread
    would be seen; the values are those of one thread."""
    import threading
    import time

    import hpcmm.io.inputs as inputs

    shape = (tile_rows * TILE, 5)
    one = generate_block(3, "A", shape, (0, shape[0]), (0, shape[1]), np.float64)
    expected = min(threads, tile_rows)
    state = {"now": 0, "most": 0, "gave_up": False}
    cond, real = threading.Condition(), inputs._tile
    hang_guard = scaled(10)  # stretched with load; timed here, not in the drawing threads

    def tile(*args):
        with cond:
            state["now"] += 1
            state["most"] = max(state["most"], state["now"])
            cond.notify_all()
            if not state["gave_up"] and not cond.wait_for(lambda: state["most"] >= expected, timeout=hang_guard):
                state["gave_up"] = True
        time.sleep(0.02)  # a thread beyond those in force would start meanwhile
        with cond:
            state["now"] -= 1
        return real(*args)

    _threads_in_force(monkeypatch, threads)
    monkeypatch.setattr(inputs, "_tile", tile)
    many = generate_block(3, "A", shape, (0, shape[0]), (0, shape[1]), np.float64)
    assert np.array_equal(many, one)
    assert state["most"] == expected and not state["gave_up"]


def test_an_error_in_one_tile_row_leaves_the_rows_not_started_undrawn(monkeypatch):
    """Once a tile row fails, the rows no thread has started are dropped, not drawn before the error
    reaches the caller; and every drawing thread has ended by then."""
    import threading
    import time

    import hpcmm.io.inputs as inputs

    drawn, lock, real = [], threading.Lock(), inputs._tile

    def tile(seed, which, ti, tj, shape, dtype):
        with lock:
            drawn.append(ti)
        if ti == 0:
            raise KeyboardInterrupt
        time.sleep(0.02)  # the other rows take a while: the error is seen while most wait
        return real(seed, which, ti, tj, shape, dtype)

    _threads_in_force(monkeypatch, 2)
    monkeypatch.setattr(inputs, "_tile", tile)
    before = set(threading.enumerate())
    rows = 64
    with pytest.raises(KeyboardInterrupt):
        generate_block(1, "B", (rows * TILE, 3), (0, rows * TILE), (0, 3), np.float32)
    assert 0 in drawn and len(drawn) < rows // 2
    assert set(threading.enumerate()) <= before


def test_an_interrupt_while_the_rows_are_queued_leaves_those_not_started_undrawn(monkeypatch):
    """A signal may land while the tile rows are being handed to the threads, before any result is
    awaited: the rows queued but not started are dropped then too, not drawn before the interrupt reaches
    the caller (here the interrupt is raised where the eleventh row would be queued)."""
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    import hpcmm.io.inputs as inputs

    drawn, lock, real = [], threading.Lock(), inputs._tile
    started, released = threading.Event(), threading.Event()
    hang_guard = scaled(30)  # stretched with load; timed here, not in the drawing threads

    def tile(seed, which, ti, tj, shape, dtype):
        with lock:
            drawn.append(ti)
        started.set()
        released.wait(hang_guard)  # the first rows are still being drawn when the interrupt comes
        time.sleep(0.02)
        return real(seed, which, ti, tj, shape, dtype)

    class Interrupted(ThreadPoolExecutor):
        queued = 0

        def submit(self, *args, **kwargs):
            if Interrupted.queued == 10:
                started.wait(hang_guard)  # a row is under way
                released.set()
                raise KeyboardInterrupt
            Interrupted.queued += 1
            return super().submit(*args, **kwargs)

    _threads_in_force(monkeypatch, 2)
    monkeypatch.setattr(inputs, "_tile", tile)
    monkeypatch.setattr(inputs, "ThreadPoolExecutor", Interrupted)
    before = set(threading.enumerate())
    rows = 64
    with pytest.raises(KeyboardInterrupt):
        generate_block(1, "A", (rows * TILE, 2), (0, rows * TILE), (0, 2), np.float64)
    assert Interrupted.queued == 10 and 0 < len(drawn) < 10
    assert set(threading.enumerate()) <= before
