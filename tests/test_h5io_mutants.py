"""What the results file and its writing promise, one behaviour a test, in one process.

Written against the mutants that mutation testing of hpcmm/io/h5io.py left alive
(docs/mutation.md); the runs under ``mpiexec`` that write results files (tests/test_reliability.py)
are not run by it.  Pinned: which ``--out`` paths are refused and with which message; what the
file holds (attributes, tables and their units, timings, timeline, extra groups, a C filled with
NaN) and in which types; the disk space reserved before HDF5 writes and a full disk reported as
one line; the temporary names and their guards (the folder's probe too: one child process is a rank
killed halfway through it); the serial writing of C's blocks rank after rank; publishing without
replacing a file that appeared, and forgetting the temporary; the small table files.
"""

from __future__ import annotations

import errno
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time

import h5py
import numpy as np
import pytest

from hpcmm.io import h5io
from hpcmm.errors import InputError, OutputError
from launcher import REPO
from test_reliability_budget import scaled


@pytest.fixture(autouse=True)
def _own_bookkeeping(monkeypatch):
    monkeypatch.setattr(h5io, "RENAMEABLE", set())
    monkeypatch.setattr(h5io, "PENDING", set())
    monkeypatch.setattr(h5io, "PUBLISHED", [])


def _refused(path, overwrite=False, inputs=()) -> str:
    with pytest.raises(InputError) as caught:
        h5io.check_output_path(str(path), overwrite, inputs)
    return str(caught.value)


def _hdf5(path) -> None:
    with h5py.File(path, "w") as f:
        f.attrs["x"] = 1


def _leftovers(directory) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".partial"))


# -- --out ----------------------------------------------------------------------------------


def test_a_new_name_in_a_folder_is_taken_and_nothing_is_left(tmp_path):
    h5io.check_output_path(str(tmp_path / "r.h5"), False)
    assert list(tmp_path.iterdir()) == [] and h5io.PENDING == set()


def test_a_dangling_link_is_refused(tmp_path):
    os.symlink("gone.h5", tmp_path / "r.h5")
    assert _refused(tmp_path / "r.h5", overwrite=True) == (
        f"--out={tmp_path}/r.h5: a symbolic link to gone.h5, which does not exist")


def test_a_missing_folder_is_refused(tmp_path):
    assert _refused(tmp_path / "no" / "r.h5") == f"--out={tmp_path}/no/r.h5: directory {tmp_path}/no does not exist"


def test_a_directory_is_refused(tmp_path):
    (tmp_path / "d").mkdir()
    assert _refused(tmp_path / "d", overwrite=True) == f"--out={tmp_path}/d: is a directory"


def test_an_input_in_any_spelling_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _hdf5(tmp_path / "a.h5")
    os.link(tmp_path / "a.h5", tmp_path / "hard.h5")
    inputs = [("--b", str(tmp_path / "missing.npy")), ("--a", "a.h5")]
    for out in ("hard.h5", str(tmp_path / "a.h5"), "./a.h5"):
        assert _refused(out, overwrite=True, inputs=inputs) == (
            f"--out={out} is the input file --a=a.h5: hpcmm never replaces its inputs")


def test_an_existing_file_needs_overwrite(tmp_path):
    _hdf5(tmp_path / "r.h5")
    assert _refused(tmp_path / "r.h5") == f"--out={tmp_path}/r.h5: file exists (pass --overwrite to replace it)"
    h5io.check_output_path(str(tmp_path / "r.h5"), True, [("--a", str(tmp_path / "a.npy"))])
    with h5py.File(tmp_path / "r.h5") as f:
        assert f.attrs["x"] == 1
    assert _leftovers(tmp_path) == []


def test_overwrite_replaces_hdf5_files_only(tmp_path):
    (tmp_path / "note.h5").write_text("mine")
    os.mkfifo(tmp_path / "fifo.h5")
    assert _refused(tmp_path / "note.h5", overwrite=True) == (
        f"--out={tmp_path}/note.h5: not an HDF5 file; --overwrite replaces HDF5 files only")
    assert _refused(tmp_path / "fifo.h5", overwrite=True) == (
        f"--out={tmp_path}/fifo.h5: not a regular file; --overwrite replaces HDF5 files only")


def test_a_name_hpcmm_chose_may_exist(tmp_path):
    (tmp_path / "hpcmm-results-20261129-230507.h5").write_text("another run's")
    h5io.RENAMEABLE.add(str(tmp_path / "hpcmm-results-20261129-230507.h5"))
    h5io.check_output_path(str(tmp_path / "hpcmm-results-20261129-230507.h5"), False)


def test_a_folder_that_takes_no_new_file_is_refused(tmp_path, monkeypatch):
    real = os.open

    def read_only(name, flags, *args):
        if flags & os.O_CREAT:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), name)
        return real(name, flags, *args)

    monkeypatch.setattr(os, "open", read_only)
    assert _refused(tmp_path / "r.h5") == (
        f"--out={tmp_path}/r.h5: directory {tmp_path} is not writable (Read-only file system)")
    assert h5io.PENDING == set()



def test_the_probe_of_a_folder_leaves_no_file_and_no_guard(tmp_path):
    """The probe's file and its guard process are both gone once the folder is found writable."""
    h5io.probe_directory(str(tmp_path / "r.h5"))
    assert list(tmp_path.iterdir()) == [] and h5io.PENDING == set() and h5io._GUARDS == {}


def _killed_while_writing(script: str, out) -> None:
    """Run ``script`` (which kills its own process with SIGKILL partway through a write) on ``out`` in a fresh
    Python; return once no hidden temporary is left beside ``out``, or after a hang guard."""
    proc = subprocess.run([sys.executable, "-c", script, str(out)], capture_output=True, text=True, cwd=REPO,
                          env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert proc.returncode == -signal.SIGKILL, proc.stdout + proc.stderr
    # The guard sees its pipe close and removes the file at once; the wait is a hang guard, stretched with load.
    deadline = time.monotonic() + scaled(30)
    while _leftovers(out.parent) and time.monotonic() < deadline:
        time.sleep(0.05)


#: A rank killed (SIGKILL) between creating the probe's file and removing it.
_KILLED_WHILE_PROBING = """
import os, signal, sys
from hpcmm.io import h5io
h5io.remove_temporary = lambda tmp: os.kill(os.getpid(), signal.SIGKILL)
h5io.probe_directory(sys.argv[1])
"""


def test_a_rank_killed_while_it_probes_the_folder_leaves_no_file(tmp_path):
    """The probe's file is guarded like every file hpcmm makes: a rank killed halfway through the probe
    (SIGKILL, or the launcher ending the job) leaves no hidden file in the user's folder."""
    h5io.check_output_path(str(tmp_path / "r.h5"), False)
    _killed_while_writing(_KILLED_WHILE_PROBING, tmp_path / "r.h5")
    assert _leftovers(tmp_path) == []


#: A rank killed (SIGKILL) while it writes a file of tables (``bench``'s results).
_KILLED_WHILE_WRITING_TABLES = """
import os, signal, sys
from hpcmm.io import h5io
h5io._table = lambda f, name, rows: os.kill(os.getpid(), signal.SIGKILL)
h5io.write_tables_file(sys.argv[1], False, "bench", {"a": [{"x": 1}]}, {})
"""


def test_a_rank_killed_while_it_writes_a_table_file_leaves_no_file(tmp_path):
    """A file of tables is guarded like the results file: a rank killed while it writes leaves neither
    the file nor its hidden temporary behind (the same write, not killed, publishes the file)."""
    whole = tmp_path / "whole.h5"
    assert h5io.write_tables_file(str(whole), False, "bench", {"a": [{"x": 1}]}, {}) == str(whole)
    killed = tmp_path / "killed"
    killed.mkdir()
    _killed_while_writing(_KILLED_WHILE_WRITING_TABLES, killed / "b.h5")
    assert list(killed.iterdir()) == []


# -- temporary files -----------------------------------------------------------------------


def test_a_temporary_name_is_hidden_beside_the_file_and_pending(tmp_path):
    tmp = h5io.temporary_path(str(tmp_path / "r.h5"))
    directory, base = os.path.split(tmp)
    assert directory == str(tmp_path) and base.startswith(".r.h5.") and base.endswith(".partial")
    assert len(base) == len(".r.h5.") + 12 + len(".partial")
    assert os.path.getsize(tmp) == 0 and h5io.PENDING == {tmp}
    mask = os.umask(0)
    os.umask(mask)
    assert os.stat(tmp).st_mode & 0o777 == 0o666 & ~mask
    h5io.remove_temporary(tmp)
    h5io.remove_temporary(tmp)  # gone already: no error
    assert h5io.PENDING == set() and list(tmp_path.iterdir()) == []


def test_a_temporary_name_never_takes_an_existing_file(tmp_path, monkeypatch):
    names = iter(["aaaaaaaaaaaa", "bbbbbbbbbbbb"])
    monkeypatch.setattr(h5io.secrets, "token_hex", lambda n: next(names))
    first = tmp_path / ".r.h5.aaaaaaaaaaaa.partial"
    first.write_text("another writer's")
    second = h5io.temporary_path(str(tmp_path / "r.h5"), guarded=True)
    assert second == str(tmp_path / ".r.h5.bbbbbbbbbbbb.partial")
    assert first.read_text() == "another writer's" and h5io.PENDING == {second}
    h5io.release_guard(second)
    assert first.read_text() == "another writer's" and not os.path.exists(second)


def test_a_temporary_name_in_a_missing_folder_raises_and_is_forgotten(tmp_path):
    with pytest.raises(FileNotFoundError):
        h5io.temporary_path(str(tmp_path / "no" / "r.h5"), guarded=True)
    assert h5io.PENDING == set()



def test_an_unguarded_temporary_name_never_takes_an_existing_file(tmp_path, monkeypatch):
    names = iter(["aaaaaaaaaaaa", "bbbbbbbbbbbb", "cccccccccccc"])
    monkeypatch.setattr(h5io.secrets, "token_hex", lambda n: next(names))
    first = tmp_path / ".r.h5.aaaaaaaaaaaa.partial"
    first.write_text("another writer's")
    second = h5io.temporary_path(str(tmp_path / "r.h5"))
    assert second == str(tmp_path / ".r.h5.bbbbbbbbbbbb.partial") and os.path.getsize(second) == 0
    assert first.read_text() == "another writer's" and h5io.PENDING == {second}
    with pytest.raises(FileNotFoundError):
        h5io.temporary_path(str(tmp_path / "no" / "r.h5"))
    assert h5io.PENDING == {second}

def test_the_guard_removes_a_file_its_writer_let_go(tmp_path):
    tmp = h5io.temporary_path(str(tmp_path / "r.h5"), guarded=True)
    assert os.path.exists(tmp)
    h5io.release_guard(tmp)  # the writer is gone (or done): the guard removes what is left
    assert not os.path.exists(tmp)
    h5io.release_guard(tmp)
    h5io.release_guard(None)


def test_the_final_name_of_a_temporary_is_in_the_error(tmp_path, monkeypatch):
    def full(fd, offset, length):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", full)
    tmp = h5io.temporary_path(str(tmp_path / "r.h5"))
    with pytest.raises(OutputError) as caught:
        h5io.write_results(tmp, _results(np.random.default_rng(1)))
    assert str(caught.value) == f"--out={tmp_path}/r.h5: cannot write the results file: No space left on device"
    other = tmp_path / "plain.h5"
    other.write_bytes(b"")
    with pytest.raises(OutputError, match=rf"^--out={other}: cannot write the results file: No space left on device$"):
        h5io.write_results(str(other), _results(np.random.default_rng(1)))


# -- the results file ------------------------------------------------------------------------


def _results(rng, **changes) -> h5io.Results:
    ranks, iters, steps = 2, 3, 4
    fields = dict(
        root={"created": "2026-11-29T23:05:07", "command": "python -m hpcmm run", "ranks": ranks},
        config={"m": 64, "dtype": "float32", "note": None, "text": "a\x00b", "grid": [2, 1], "names": ["x", "y"],
                "empty": [], "seconds": 0.5},
        versions={"hpcmm": "test", "numpy": np.__version__},
        topology=[{"rank": r, "host": "h", "gpu_index": -1, "bytes": 10 + r, "seconds": 0.25 * r}
                  for r in range(ranks)],
        steps=[{"step": s, "panel": 16, "seconds": float(s)} for s in range(steps)],
        iteration_seconds=rng.random((ranks, iters)),
        step_seconds=rng.random((ranks, iters, steps, 3)),
        timeline=rng.random((10, 7)),
        transfers=[{"src": 0, "dst": 1, "path": "shm", "bytes": 1024}],
        memory=[{"rank": 0, "peak_bytes": 4096}],
        summary={"seconds": 1.5, "tflops": 2.0, "verified": True, "paths": ["shm"]},
        c_shape=None, c_dtype="float32",
        extra={"plans": ({"seconds": 0.1, "kind": "p"}, {"rows": [{"rank": 0, "name": "n"}], "data": np.arange(5.0)})},
        timeline_attrs={"clock": "shared", "uncertainty_seconds": 1e-6},
    )
    fields.update(changes)
    return h5io.Results(**fields)


def _written(tmp_path, meta) -> str:
    tmp = h5io.temporary_path(str(tmp_path / "r.h5"))
    h5io.write_results(tmp, meta)
    return tmp


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def test_the_file_holds_every_group_in_its_types(tmp_path):
    meta = _results(np.random.default_rng(7))
    with h5py.File(_written(tmp_path, meta), "r") as f:
        assert _text(f.attrs["schema_version"]) == "1" and f.attrs["ranks"] == 2
        assert _text(f.attrs["command"]) == "python -m hpcmm run"
        c = f["config"].attrs
        assert c["m"] == 64 and _text(c["note"]) == "" and _text(c["text"]) == "ab" and c["seconds"] == 0.5
        assert list(c["grid"]) == [2, 1] and c["grid"].dtype.kind == "i"
        assert [_text(v) for v in c["names"]] == ["x", "y"] and len(c["empty"]) == 0
        assert _text(f["versions"].attrs["hpcmm"]) == "test"
        topo = f["topology"][()]
        assert topo.dtype.names == ("rank", "host", "gpu_index", "bytes", "seconds")
        assert topo.dtype["rank"] == np.int64 and topo.dtype["seconds"] == np.float64
        assert h5py.check_string_dtype(topo.dtype["host"]) is not None
        assert list(topo["bytes"]) == [10, 11] and list(topo["seconds"]) == [0.0, 0.25]
        assert json.loads(f["topology"].attrs["units"]) == {"bytes": "bytes", "seconds": "s"}
        np.testing.assert_array_equal(f["timings/iteration_seconds"][()], meta.iteration_seconds)
        sd = f["timings/step_seconds"]
        np.testing.assert_array_equal(sd[()], meta.step_seconds)
        assert sd.compression == "gzip" and _text(sd.attrs["units"]) == "s"
        assert [_text(v) for v in sd.attrs["phases"]] == ["gemm", "comm", "wait"]
        assert [_text(v) for v in sd.attrs["dims"]] == ["rank", "iteration", "step", "phase"]
        assert _text(f["timings/iteration_seconds"].attrs["units"]) == "s"
        assert list(f["timings/steps"][()]["seconds"]) == [0.0, 1.0, 2.0, 3.0]
        ev = f["timeline/events"]
        np.testing.assert_array_equal(ev[()], meta.timeline)
        assert ev.compression == "gzip"
        assert [_text(v) for v in ev.attrs["columns"]] == ["rank", "iteration", "stream", "kind", "step", "start",
                                                            "end"]
        assert [_text(v) for v in ev.attrs["streams"]] == ["compute", "comm"]
        assert [_text(v) for v in ev.attrs["kinds"]] == ["gemm", "A", "B"]
        assert json.loads(ev.attrs["units"]) == {"start": "s", "end": "s"}
        assert _text(f["timeline"].attrs["clock"]) == "shared"
        assert json.loads(f["timeline"].attrs["units"]) == {"uncertainty_seconds": "s"}
        assert f["transfers"][()]["bytes"][0] == 1024 and _text(f["transfers"][()]["path"][0]) == "shm"
        assert list(f["memory"][()]["peak_bytes"]) == [4096]
        s = f["summary"].attrs
        assert s["seconds"] == 1.5 and bool(s["verified"]) and [_text(v) for v in s["paths"]] == ["shm"]
        assert json.loads(f["summary"].attrs["units"]) == {"seconds": "s", "tflops": "TFLOP/s"}
        assert json.loads(f.attrs["units"]) == {}
        assert json.loads(f["config"].attrs["units"]) == {"seconds": "s"}
        assert f["plans"].attrs["seconds"] == 0.1 and json.loads(f["plans"].attrs["units"]) == {"seconds": "s"}
        assert _text(f["plans/rows"][()]["name"][0]) == "n"
        np.testing.assert_array_equal(f["plans/data"][()], np.arange(5.0))
        assert "result" not in f


def test_without_a_timeline_there_is_no_timeline_group(tmp_path):
    with h5py.File(_written(tmp_path, _results(np.random.default_rng(2), timeline=None)), "r") as f:
        assert "timeline" not in f and "timings" in f


def test_an_extra_group_may_add_to_an_existing_one(tmp_path):
    meta = _results(np.random.default_rng(2), extra={"timings": ({"source": "x"}, {"reduce_seconds": np.ones(3)})})
    with h5py.File(_written(tmp_path, meta), "r") as f:
        assert _text(f["timings"].attrs["source"]) == "x"
        assert _text(f["timings/reduce_seconds"].attrs["units"]) == "s"


def test_a_table_column_named_as_text_is_text(tmp_path):
    rows = [{"gpu_uuid": "GPU-1", "rank": 0}]
    meta = _results(np.random.default_rng(2), topology=rows)
    with h5py.File(_written(tmp_path, meta), "r") as f:
        assert _text(f["topology"][()]["gpu_uuid"][0]) == "GPU-1"


@pytest.mark.parametrize("dtype", ["float32", "complex64", "bfloat16"])
def test_c_is_made_full_of_nan_in_its_type(tmp_path, dtype):
    meta = _results(np.random.default_rng(2), c_shape=(3, 5), c_dtype=dtype)
    with h5py.File(_written(tmp_path, meta), "r") as f:
        c = f["result/C"]
        assert c.shape == (3, 5)
        if dtype == "bfloat16":
            assert _text(c.attrs["element_type"]) == "bfloat16"
            assert (c[()].view(np.uint16) & 0x7F80 == 0x7F80).all()
        else:
            assert c.dtype == np.dtype(dtype) and np.isnan(c[()]).all()


def test_a_write_hdf5_refuses_is_one_line(tmp_path):
    meta = _results(np.random.default_rng(2), extra={"timings": ({}, {"steps": np.ones(2)})})  # taken already
    tmp = h5io.temporary_path(str(tmp_path / "r.h5"))
    with pytest.raises(OutputError) as caught:
        h5io.write_results(tmp, meta)
    message = str(caught.value)
    assert message.startswith(f"--out={tmp_path}/r.h5: cannot write the results file: ") and "\n" not in message
    assert "name already exists" in message
    assert isinstance(caught.value.__cause__, ValueError)


def test_a_file_system_without_fallocate_still_gets_the_file(tmp_path, monkeypatch):
    for code in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
        def unsupported(fd, offset, length, code=code):
            raise OSError(code, os.strerror(code))

        monkeypatch.setattr(os, "posix_fallocate", unsupported)
        with h5py.File(_written(tmp_path, _results(np.random.default_rng(2))), "r") as f:
            assert "summary" in f


def test_the_disk_space_is_reserved_before_hdf5_writes(tmp_path, monkeypatch):
    asked = []
    real = os.posix_fallocate

    def spy(fd, offset, length):
        asked.append((offset, length, os.fstat(fd).st_size))
        real(fd, offset, length)

    monkeypatch.setattr(os, "posix_fallocate", spy)
    meta = _results(np.random.default_rng(3), c_shape=(64, 32), c_dtype="complex128")
    tmp = _written(tmp_path, meta)
    [(offset, length, image)] = asked
    assert offset == 0 and image > 0 and length == image + h5io.results_size(meta)
    assert h5io.results_size(meta) >= os.path.getsize(tmp) + 64 * 32 * 16 - 64 * 32 * 16  # C is not written yet
    assert h5io.results_size(meta) >= 64 * 32 * 16


def test_the_reservation_counts_every_part_of_the_file():
    """128 KiB of HDF5's own, C, the arrays, 40 bytes a field and the text of tables and attributes,
    256 bytes an attribute and its text; one sixteenth more."""
    rng = np.random.default_rng(4)
    meta = _results(rng, timeline=None, extra={"g": ({}, {"d": np.ones(10), "t": [{"a": "xyz"}]})},
                    c_shape=(4, 8), c_dtype="float64")
    arrays = meta.iteration_seconds.nbytes + meta.step_seconds.nbytes + 80
    tables = sum(len(row) * 40 + sum(len(str(v)) for v in row.values())
                 for rows in (meta.topology, meta.steps, meta.transfers, meta.memory, [{"a": "xyz"}]) for row in rows)
    attrs = sum(256 + len(str(v)) for group in (meta.root, meta.config, meta.versions, meta.summary,
                                                meta.timeline_attrs) for v in group.values())
    total = (128 << 10) + 4 * 8 * 8 + arrays + tables + attrs
    assert h5io.results_size(meta) == total + total // 16
    none = _results(rng, timeline=None, extra={})
    base = (128 << 10) + none.iteration_seconds.nbytes + none.step_seconds.nbytes + tables - 40 - 3 + attrs
    assert h5io.results_size(none) == base + base // 16
    bf = _results(rng, timeline=None, extra={}, c_shape=(4, 8), c_dtype="bfloat16")
    assert h5io.results_size(bf) - h5io.results_size(_results(rng, timeline=None, extra={})) in range(64, 64 + 5)


# -- C, rank after rank ------------------------------------------------------------------------


class _Ranks:
    """``size`` ranks as threads, passing messages through queues (``send``/``recv`` by tag)."""

    def __init__(self, size):
        self.size = size
        self.boxes = {(src, dst): queue.Queue() for src in range(size) for dst in range(size)}
        self.order = []

    def comm(self, rank):
        ranks = self

        class Comm:
            def Get_rank(self):  # noqa: N802 - MPI's spelling
                return rank

            def Get_size(self):  # noqa: N802
                return ranks.size

            def send(self, obj, dest, tag):
                ranks.boxes[(rank, dest)].put((tag, obj))

            def recv(self, source, tag):
                got, obj = ranks.boxes[(source, rank)].get(timeout=300)
                assert got == tag
                return obj

        return Comm()


def _c_file(tmp_path, shape, dtype="float64") -> str:
    return _written(tmp_path, _results(np.random.default_rng(5), c_shape=shape, c_dtype=dtype))


def test_one_rank_writes_its_block(tmp_path):
    tmp = _c_file(tmp_path, (6, 4))
    block = np.random.default_rng(6).random((4, 3))
    h5io.write_c_block(_Ranks(1).comm(0), tmp, np.asfortranarray(block), (2, 6), (1, 4))
    h5io.write_c_block(_Ranks(1).comm(0), tmp, np.empty((0, 4)), (6, 6), (0, 4))
    with h5py.File(tmp, "r") as f:
        c = f["result/C"][()]
    np.testing.assert_array_equal(c[2:6, 1:4], block)
    assert np.isnan(c[:2]).all() and np.isnan(c[:, 0]).all()


def test_bfloat16_blocks_go_in_as_their_bits(tmp_path):
    from hpcmm.dtypes import numpy_dtype

    tmp = _c_file(tmp_path, (2, 2), "bfloat16")
    block = np.array([[1.0, -2.0], [0.5, 3.0]]).astype(numpy_dtype("bfloat16"))
    h5io.write_c_block(_Ranks(1).comm(0), tmp, block, (0, 2), (0, 2))
    with h5py.File(tmp, "r") as f:
        np.testing.assert_array_equal(f["result/C"][()], block.view(np.uint16))


def _rank_after_rank(ranks, body):
    outcomes = [None] * ranks.size

    def run(rank):
        try:
            outcomes[rank] = ("returned", body(rank, ranks.comm(rank)))
        except BaseException as exc:  # noqa: BLE001 - inspected by the test
            outcomes[rank] = ("raised", exc)

    threads = [threading.Thread(target=run, args=(r,)) for r in range(ranks.size)]
    for t in reversed(threads):  # the last rank first: it must still wait for its turn
        t.start()
    for t in threads:
        t.join()
    return outcomes


def test_serial_ranks_write_one_after_another_and_each_block_lands(tmp_path):
    tmp = _c_file(tmp_path, (6, 2))
    rng = np.random.default_rng(8)
    blocks = [rng.random((2, 2)) for _ in range(3)]
    ranks = _Ranks(3)
    real = h5py.File

    def logged(name, mode="r", *args, **kwargs):
        if mode == "r+":
            ranks.order.append(threading.current_thread().name)
        return real(name, mode, *args, **kwargs)

    def body(rank, comm):
        threading.current_thread().name = f"rank {rank}"
        h5io.write_c_block(comm, tmp, blocks[rank], (2 * rank, 2 * rank + 2), (0, 2))

    h5io.h5py.File = logged
    try:
        assert _rank_after_rank(ranks, body) == [("returned", None)] * 3
    finally:
        h5io.h5py.File = real
    assert ranks.order == ["rank 0", "rank 1", "rank 2"]
    with h5py.File(tmp, "r") as f:
        np.testing.assert_array_equal(f["result/C"][()], np.vstack(blocks))


def test_a_rank_that_fails_to_write_still_lets_the_next_write(tmp_path):
    tmp = _c_file(tmp_path, (4, 2))
    good = np.random.default_rng(9).random((2, 2))

    def body(rank, comm):
        if rank == 0:  # outside C: h5py refuses
            h5io.write_c_block(comm, tmp, np.ones((2, 2)), (8, 10), (0, 2))
        else:
            h5io.write_c_block(comm, tmp, good, (2, 4), (0, 2))

    outcomes = _rank_after_rank(_Ranks(2), body)
    assert outcomes[1] == ("returned", None)
    kind, error = outcomes[0]
    assert kind == "raised" and "broadcast" in str(error)  # its own error, once the token went on
    with h5py.File(tmp, "r") as f:
        np.testing.assert_array_equal(f["result/C"][2:4], good)


# -- publishing ----------------------------------------------------------------------------------


def test_publish_links_the_file_and_removes_the_temporary(tmp_path):
    tmp = h5io.temporary_path(str(tmp_path / "r.h5"))
    with open(tmp, "w") as fh:
        fh.write("complete")
    assert h5io.publish(tmp, str(tmp_path / "r.h5"), overwrite=False) == str(tmp_path / "r.h5")
    assert (tmp_path / "r.h5").read_text() == "complete" and _leftovers(tmp_path) == []
    assert h5io.PUBLISHED == [str(tmp_path / "r.h5")]



@pytest.mark.parametrize("overwrite", [False, True])
def test_publish_forgets_the_temporary_it_consumed(tmp_path, overwrite):
    """Published or refused, the temporary file is gone and no longer among those a signal removes."""
    out = tmp_path / "r.h5"
    tmp = h5io.temporary_path(str(out))
    with open(tmp, "w") as fh:
        fh.write("first")
    assert h5io.publish(tmp, str(out), overwrite=overwrite) == str(out)
    assert out.read_text() == "first" and _leftovers(tmp_path) == [] and h5io.PENDING == set()
    tmp = h5io.temporary_path(str(out))
    with open(tmp, "w") as fh:
        fh.write("second")
    if overwrite:
        h5io.publish(tmp, str(out), overwrite=True)
    else:
        with pytest.raises(InputError, match="file appeared during the run"):
            h5io.publish(tmp, str(out), overwrite=False)
    assert out.read_text() == ("second" if overwrite else "first")
    assert _leftovers(tmp_path) == [] and h5io.PENDING == set()

def test_a_temporary_that_vanished_is_an_output_error(tmp_path):
    with pytest.raises(OutputError, match=r"^--out=.*/r\.h5: cannot write the results file: No such file or"):
        h5io.publish(str(tmp_path / ".r.h5.0123456789ab.partial"), str(tmp_path / "r.h5"), overwrite=False)
    assert h5io.PUBLISHED == []


def test_a_table_file_is_complete_and_named(tmp_path):
    rows = [{"size": 1024, "seconds": 0.5, "path": "shm"}, {"size": 2048, "seconds": 0.75, "path": "ipc"}]
    out = str(tmp_path / "t.h5")
    assert h5io.write_table_file(out, False, "bench-transport", "transport", rows, {"hpcmm": "test"}) == out
    with h5py.File(out, "r") as f:
        assert _text(f.attrs["kind"]) == "bench-transport" and _text(f.attrs["schema_version"]) == "1"
        assert _text(f.attrs["command"]).startswith("python -m hpcmm")
        assert _text(f.attrs["created"]).endswith("+00:00")
        assert _text(f["versions"].attrs["hpcmm"]) == "test"
        assert list(f["transport"][()]["size"]) == [1024, 2048]
        assert json.loads(f["transport"].attrs["units"]) == {"seconds": "s", "size": "bytes"} or "size" not in json.loads(
            f["transport"].attrs["units"])
    assert _leftovers(tmp_path) == [] and h5io.PENDING == set() and h5io._GUARDS == {}
    with pytest.raises(InputError, match="file appeared during the run"):
        h5io.write_tables_file(out, False, "bench", {"a": rows}, {})
    assert _leftovers(tmp_path) == []
    assert h5io.write_tables_file(out, True, "bench", {"a": rows, "b": rows[:1]}, {}) == out
    with h5py.File(out, "r") as f:
        assert _text(f.attrs["kind"]) == "bench" and len(f["b"]) == 1


def test_a_full_disk_leaves_no_table_file(tmp_path, monkeypatch):
    def full(fd, offset, length):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", full)
    out = str(tmp_path / "t.h5")
    with pytest.raises(OutputError, match=rf"^--out={out}: cannot write the results file: No space left on device$"):
        h5io.write_table_file(out, False, "bench", "t", [{"a": 1}], {})
    assert list(tmp_path.iterdir()) == [] and h5io._GUARDS == {}


def test_an_empty_table_is_no_dataset(tmp_path):
    with h5py.File(_written(tmp_path, _results(np.random.default_rng(2), memory=[])), "r") as f:
        assert "memory" not in f and "transfers" in f


@pytest.mark.parametrize("error, reason", [
    (OSError(errno.EPERM, "Operation not permitted"), "Operation not permitted"),
    (RuntimeError(), "RuntimeError"),
    (RuntimeError("HDF5 said\n   two lines"), "HDF5 said two lines"),
], ids=["errno-1", "no-message", "two-lines"])
def test_the_reason_is_one_line(tmp_path, monkeypatch, error, reason):
    def failing(fd, offset, length):
        raise error

    monkeypatch.setattr(os, "posix_fallocate", failing)
    tmp = h5io.temporary_path(str(tmp_path / "r.h5"))
    with pytest.raises(OutputError) as caught:
        h5io.write_results(tmp, _results(np.random.default_rng(1)))
    assert str(caught.value) == f"--out={tmp_path}/r.h5: cannot write the results file: {reason}"


def test_the_empty_image_is_made_in_memory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _written(tmp_path, _results(np.random.default_rng(1)))
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".partial")) == []


def test_remove_pending_removes_every_temporary(tmp_path, monkeypatch):
    monkeypatch.setattr(h5io, "_NAMING", threading.Lock())  # remove_pending keeps the lock for good
    first = h5io.temporary_path(str(tmp_path / "a.h5"))
    second = h5io.temporary_path(str(tmp_path / "b.h5"))
    os.unlink(first)
    os.mkdir(first)  # what cannot be removed is left, the rest goes
    h5io.remove_pending()
    assert not os.path.exists(second) and os.path.isdir(first)
    assert h5io.PENDING == {first}


def test_a_missing_temporary_is_one_output_error_for_its_block(tmp_path):
    tmp = _c_file(tmp_path, (2, 2))
    os.unlink(tmp)
    with pytest.raises(OutputError) as caught:
        h5io.write_c_block(_Ranks(1).comm(0), tmp, np.ones((2, 2)), (0, 2), (0, 2))
    assert str(caught.value).startswith(f"--out={tmp_path}/r.h5: cannot write the results file: ")


def test_a_table_file_may_replace_an_earlier_one(tmp_path, monkeypatch):
    monkeypatch.setattr(h5io.sys, "argv", ["hpcmm", "bench", "--cases", "float64:24"])
    out = str(tmp_path / "t.h5")
    _hdf5(out)
    assert h5io.write_table_file(out, True, "bench", "gemm", [{"n": 24}], {}) == out
    with h5py.File(out, "r") as f:
        assert list(f["gemm"][()]["n"]) == [24] and "x" not in f.attrs
        assert _text(f.attrs["command"]) == "python -m hpcmm bench --cases float64:24"
