"""The results file: one HDF5 file per run, never seen half-written.

Rank 0 writes the metadata, timings and summary into a hidden temporary file
beside the final name; with ``--save-c`` the ranks then write their blocks of
``/result/C`` (collectively through MPI-IO where h5py has parallel HDF5,
otherwise one rank after another); rank 0 flushes the file to disk and only
then renames it to the final name (``rename`` within one directory is atomic).
Without ``--overwrite`` the final step is ``link``, which fails rather than
replace a file that appeared meanwhile.  The schema is in docs/hdf5-schema.md.

A full disk must reach hpcmm as an error, never inside HDF5: a write that
fails inside the HDF5 library leaves it unable to close the file (HDF5 2.0
ends the process in a segmentation fault there).  The disk space the file
will take (an upper bound) is therefore reserved with ``posix_fallocate``
before HDF5 writes a byte (:func:`_reserve`); a full disk is then a plain
``ENOSPC`` there, reported as :class:`~hpcmm.errors.OutputError` (exit 1) with
one line, and the temporary file is removed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import os
import re
import secrets
import subprocess
import sys
import threading

import h5py
import numpy as np

from ..errors import InputError, OutputError
from .results import unit_of, units_of

__all__ = ["PENDING", "PUBLISHED", "Results", "check_output_path", "probe_directory", "temporary_path", "remove_temporary", "remove_pending",
           "guard_temporary", "release_guard", "write_results", "write_table_file", "write_tables_file", "publish",
           "SCHEMA_VERSION"]

SCHEMA_VERSION = "1"


def check_output_path(path: str, overwrite: bool, inputs=()) -> None:
    """Refuse an output path we cannot or must not write (before any heavy work).

    Parameters
    ----------
    path : str
        ``--out``.
    overwrite : bool
        ``--overwrite``: an existing HDF5 file may be replaced, nothing else.
    inputs : iterable of (flag, path)
        Input files (``("--a", "a.h5")``): ``--out`` must not be one of them,
        however spelled (relative, ``..``, a symbolic link, a hard link).

    Raises
    ------
    InputError
        Naming ``--out`` and what is wrong.
    """
    directory = os.path.dirname(os.path.abspath(path))
    if os.path.islink(path) and not os.path.exists(path):
        raise InputError(f"--out={path}: a symbolic link to {os.readlink(path)}, which does not exist")
    if not os.path.isdir(directory):
        raise InputError(f"--out={path}: directory {directory} does not exist")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise InputError(f"--out={path}: directory {directory} is not writable")
    if os.path.isdir(path):
        raise InputError(f"--out={path}: is a directory")
    for flag, source in inputs:
        with contextlib.suppress(OSError):
            if os.path.samefile(path, source):
                raise InputError(f"--out={path} is the input file {flag}={source}: "
                                 f"hpcmm never replaces its inputs")
    if os.path.exists(path) and path not in RENAMEABLE:  # a name hpcmm chose gives way to the next at publish
        if not overwrite:
            raise InputError(f"--out={path}: file exists (pass --overwrite to replace it)")
        if not os.path.isfile(path):
            raise InputError(f"--out={path}: not a regular file; --overwrite replaces HDF5 files only")
        if not h5py.is_hdf5(path):
            raise InputError(f"--out={path}: not an HDF5 file; --overwrite replaces HDF5 files only")
    # Permission bits do not tell the whole story (root, read-only mounts, ACLs,
    # file systems that take no new files): try what the run will do at the end.
    try:
        probe_directory(path)
    except OSError as exc:
        raise InputError(f"--out={path}: directory {directory} is not writable ({exc.strerror})") from None


def probe_directory(path: str) -> None:
    """Create a file beside ``path`` and remove it: raises the ``OSError`` the final write would meet.

    Guarded (:func:`guard_temporary`), like every file hpcmm creates before it knows the run's
    outcome: a process killed between the two steps (``SIGKILL``, or the launcher ending the job
    because another rank failed at start-up) leaves no hidden file in the user's directory.
    """
    tmp = temporary_path(path, guarded=True)
    try:
        remove_temporary(tmp)
    finally:
        release_guard(tmp)


#: The results file this process published (rank 0), for the signal handler's last word.
PUBLISHED: list[str] = []

#: Names hpcmm chose itself (no ``--out``, :func:`hpcmm.config.new_output_name`): where another run
#: took one by the time :func:`publish` comes to it, the file takes the next free name instead.
RENAMEABLE: set[str] = set()


def _final_name(tmp: str) -> str:
    """``--out`` of a temporary file of :func:`temporary_path`."""
    directory, base = os.path.split(tmp)
    match = re.fullmatch(r"\.(.*)\.[0-9a-f]{12}\.partial", base)
    return os.path.join(directory, match.group(1)) if match else tmp


def _reason(exc: BaseException) -> str:
    """What went wrong, on one line (HDF5's messages span several)."""
    code = getattr(exc, "errno", None)
    if isinstance(code, int) and code > 0:
        return os.strerror(code)
    return " ".join(str(exc).split()) or type(exc).__name__


@contextlib.contextmanager
def _writing(tmp: str):
    """Turn a failure to write the results file into one :class:`OutputError` line."""
    try:
        yield
    except OutputError:
        raise
    except (OSError, RuntimeError, ValueError) as exc:
        raise OutputError(f"--out={_final_name(tmp)}: cannot write the results file: {_reason(exc)}") from exc


def _empty_image() -> bytes:
    """The bytes of an empty HDF5 file (made in memory: no disk involved)."""
    f = h5py.File("hpcmm-empty-image", "w", driver="core", backing_store=False)
    try:
        f.flush()
        return f.id.get_file_image()
    finally:
        f.close()


def _reserve(tmp: str, nbytes: int) -> None:
    """Make ``tmp`` an empty HDF5 file with ``nbytes`` of disk reserved behind it.

    HDF5 later takes its space from there (a file longer than HDF5's own end
    is valid; HDF5 cuts it to size when it closes the file).  Raises
    ``OSError`` (``ENOSPC``) when the disk cannot hold it.  Where the file
    system cannot reserve (no ``fallocate``), the file is written as usual.
    """
    image = _empty_image()
    fd = os.open(tmp, os.O_WRONLY | os.O_TRUNC)
    try:
        os.write(fd, image)
        try:
            os.posix_fallocate(fd, 0, len(image) + int(nbytes))
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                raise
        os.fsync(fd)
    finally:
        os.close(fd)


#: Bytes beyond the data that the results file may take (HDF5's metadata, attributes, heaps).
RESERVE_OVERHEAD = 128 << 10


@dataclasses.dataclass
class Results:
    """What rank 0 writes into the results file besides ``/result/C`` (docs/hdf5-schema.md).

    Attribute groups are dicts of scalars, tables are lists of dicts with the
    same keys, timings are arrays.
    """

    root: dict  # attributes of ``/`` (created, command, ranks)
    config: dict
    versions: dict
    topology: list[dict]
    steps: list[dict]
    iteration_seconds: np.ndarray  # ranks × iters
    step_seconds: np.ndarray  # ranks × iters × steps × 3 (gemm, comm, wait)
    timeline: np.ndarray | None  # events × 7, or None without a timeline
    transfers: list[dict]
    memory: list[dict]
    summary: dict
    c_shape: tuple[int, int] | None  # None: C is not saved
    c_dtype: str
    #: More groups: name → (attributes, {dataset name: array or table rows}).
    extra: dict = dataclasses.field(default_factory=dict)
    timeline_attrs: dict = dataclasses.field(default_factory=dict)


def results_size(meta: Results) -> int:
    """An upper bound of the bytes :func:`write_results` (and ``/result/C``) put on disk."""
    arrays = [meta.iteration_seconds, meta.step_seconds, meta.timeline]
    tables = [meta.topology, meta.steps, meta.transfers, meta.memory]
    for _, datasets in meta.extra.values():
        arrays += [d for d in datasets.values() if not isinstance(d, list)]
        tables += [d for d in datasets.values() if isinstance(d, list)]
    from ..dtypes import numpy_dtype  # noqa: PLC0415 - ml_dtypes only where a C is written

    c_bytes = 0 if meta.c_shape is None else int(np.prod(meta.c_shape)) * numpy_dtype(meta.c_dtype).itemsize
    return _size(arrays, tables, [meta.root, meta.config, meta.versions, meta.summary, meta.timeline_attrs], c_bytes)


def _size(arrays, tables, attribute_groups, c_bytes: int = 0) -> int:
    """An upper bound of the bytes these arrays, tables (lists of rows) and attributes take in a file."""
    total = RESERVE_OVERHEAD + c_bytes
    total += sum(np.asarray(a).nbytes for a in arrays if a is not None)
    # A field takes at most 8 bytes, a string its text plus a global-heap entry (about 32 bytes).
    total += sum(len(row) * 40 + sum(len(str(v)) for v in row.values()) for rows in tables for row in rows or [])
    total += sum(256 + len(str(v)) for attrs in attribute_groups for v in attrs.values())
    return total + total // 16  # chunk indexes, gzip's worst case on incompressible data


#: Temporary files this process is writing; the CLI's signal handlers remove them.
PENDING: set[str] = set()


#: Guard processes of the temporary files this process writes (see :func:`guard_temporary`).
_GUARDS: dict[str, subprocess.Popen] = {}


#: Held while a temporary name is made and its file created, and for good once the process
#: stops: a signal is handled on a thread of its own while the main thread goes on, so
#: without it a file could be created just after :func:`remove_pending` looked.
_NAMING = threading.Lock()


def temporary_path(path: str, guarded: bool = False) -> str:
    """A fresh hidden name beside ``path`` (same file system, so the rename is atomic).

    The name is in :data:`PENDING` before the file exists, so a signal at any
    moment finds it.  With ``guarded`` its guard process is running before the
    file exists, so no moment is left in which a killed process leaves the file
    behind; :func:`release_guard` lets it go.  The file gets the mode of any new
    file (the umask's).  Once :func:`remove_pending` has run (the process is
    stopping), a caller waits here until the process ends.
    """
    directory, base = os.path.split(os.path.abspath(path))
    while True:
        with _NAMING:
            tmp = os.path.join(directory, f".{base}.{secrets.token_hex(6)}.partial")
            PENDING.add(tmp)
            guard = guard_temporary(tmp) if guarded else None
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            except BaseException as exc:
                PENDING.discard(tmp)
                if guard is not None:
                    guard.kill()  # the name is someone else's file (or none): the guard must not act
                    guard.wait()
                if isinstance(exc, FileExistsError):
                    continue
                raise
            os.close(fd)
            if guard is not None:
                _GUARDS[tmp] = guard
            return tmp


def remove_temporary(tmp: str) -> None:
    """Delete a file of :func:`temporary_path` (if it is still there) and forget it."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)
    PENDING.discard(tmp)


def remove_pending() -> None:
    """Remove every temporary file this process is writing (the CLI's SIGTERM/SIGINT handler).

    The process is ending: no new temporary file is made after this (the lock is kept).
    """
    _NAMING.acquire()
    for tmp in list(PENDING):
        with contextlib.suppress(OSError):
            remove_temporary(tmp)


# The guard: waits until its stdin closes (the writer released it, or died), then
# deletes the file if it is still there.  Signals aimed at the whole job do not stop it.
_GUARD = """\
import os, signal, sys
for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(s, signal.SIG_IGN)
sys.stdin.buffer.read()
try:
    os.unlink(sys.argv[1])
except OSError:
    pass
"""


def guard_temporary(tmp: str) -> subprocess.Popen | None:
    """Start a small process that deletes ``tmp`` once this one ends, however it ends.

    A signal handler cannot help a rank that is killed: ``SIGKILL``, or the
    launcher ending every rank after another one failed or called
    ``MPI_Abort`` while this one was writing.  The guard sees its pipe close
    and removes the file.  After a successful publish the name is gone and it
    does nothing.  Best effort: ``None`` if it cannot start.
    """
    try:
        return subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _GUARD, tmp],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            close_fds=True, start_new_session=True,
        )
    except OSError:
        return None


def release_guard(tmp: str | None) -> None:
    """Let the guard of ``tmp`` go (after the file is published or removed)."""
    guard = _GUARDS.pop(tmp, None) if tmp is not None else None
    if guard is None:
        return
    with contextlib.suppress(OSError):
        guard.stdin.close()
    with contextlib.suppress(subprocess.TimeoutExpired):
        guard.wait(timeout=10)


def _attrs(node, values: dict) -> None:
    for key, value in values.items():
        if value is None:
            value = ""
        if isinstance(value, str):
            value = value.replace("\x00", "")
        if isinstance(value, (list, tuple)):
            value = np.array([str(v) for v in value], dtype=h5py.string_dtype()) if (
                not value or isinstance(value[0], str)) else np.asarray(value)
        node.attrs[key] = value


def _table(group, name: str, rows: list[dict], strings=()) -> None:
    """A compound dataset from a list of dicts with the same keys."""
    if not rows:
        return
    fields = []
    for key, value in rows[0].items():
        if key in strings or isinstance(value, str):
            fields.append((key, h5py.string_dtype()))
        elif isinstance(value, float):
            fields.append((key, np.float64))
        else:
            fields.append((key, np.int64))
    data = np.empty(len(rows), dtype=fields)
    for i, row in enumerate(rows):
        data[i] = tuple(row[k] for k, _ in fields)
    group.create_dataset(name, data=data).attrs["units"] = units_of(k for k, _ in fields)


def write_results(tmp: str, meta: Results) -> None:
    """Rank 0: everything but the product itself, into the temporary file.

    Raises
    ------
    OutputError
        The disk cannot hold the file (found before HDF5 writes), or the file
        system failed a write.
    """
    with _writing(tmp):
        _reserve(tmp, results_size(meta))
        _write_results(tmp, meta)


def _write_results(tmp: str, meta: Results) -> None:
    with h5py.File(tmp, "r+") as f:
        _attrs(f, {"schema_version": SCHEMA_VERSION, **meta.root})
        _attrs(f.create_group("config"), meta.config)
        _attrs(f.create_group("versions"), meta.versions)
        _table(f, "topology", meta.topology)
        timings = f.create_group("timings")
        timings.create_dataset("iteration_seconds", data=meta.iteration_seconds)
        sd = timings.create_dataset("step_seconds", data=meta.step_seconds, compression="gzip")
        sd.attrs["phases"] = np.array(["gemm", "comm", "wait"], dtype=h5py.string_dtype())
        sd.attrs["dims"] = np.array(["rank", "iteration", "step", "phase"], dtype=h5py.string_dtype())
        _table(timings, "steps", meta.steps)
        if meta.timeline is not None:
            tl = f.create_group("timeline")
            ev = tl.create_dataset("events", data=meta.timeline, compression="gzip")
            ev.attrs["columns"] = np.array(
                ["rank", "iteration", "stream", "kind", "step", "start", "end"], dtype=h5py.string_dtype()
            )
            ev.attrs["streams"] = np.array(["compute", "comm"], dtype=h5py.string_dtype())
            ev.attrs["kinds"] = np.array(["gemm", "A", "B"], dtype=h5py.string_dtype())
            _attrs(tl, meta.timeline_attrs)
        _table(f, "transfers", meta.transfers)
        _table(f, "memory", meta.memory)
        _attrs(f.create_group("summary"), meta.summary)
        for name, (attrs, datasets) in meta.extra.items():
            group = f.require_group(name)
            _attrs(group, attrs)
            for dname, data in datasets.items():
                if isinstance(data, list):
                    _table(group, dname, data)
                else:
                    group.create_dataset(dname, data=data)
        _write_units(f)
        if meta.c_shape is not None:
            # The fill value in C's own type: h5py cannot convert a float NaN to a complex one.
            # bfloat16 goes in as its raw bits (hpcmm.dtypes), NaN's bits as the fill value.
            from ..dtypes import numpy_dtype, storage_attributes, storage_dtype, to_storage  # noqa: PLC0415

            c_type = numpy_dtype(meta.c_dtype)
            dset = f.create_group("result").create_dataset(
                "C", shape=meta.c_shape, dtype=storage_dtype(c_type),
                fillvalue=to_storage(np.full((1,), np.nan, dtype=c_type))[0],
            )
            _attrs(dset, storage_attributes(c_type))


def _write_units(f) -> None:
    """Every group's ``units`` (JSON: attribute name → unit), and a plain dataset's own unit."""
    for group in [f, *(node for node in f.values() if isinstance(node, h5py.Group))]:
        group.attrs["units"] = units_of(key for key in group.attrs if key != "units")
        for name, node in group.items():
            if isinstance(node, h5py.Dataset) and node.dtype.names is None and "units" not in node.attrs:
                unit = unit_of(name)
                if unit is not None:
                    node.attrs["units"] = unit
    if "timeline/events" in f:
        f["timeline/events"].attrs["units"] = json.dumps({"start": "s", "end": "s"})


def write_c_block(comm, tmp: str, block: np.ndarray, rows, cols) -> None:
    """Collective: every rank writes its block of ``/result/C`` (bfloat16 as its raw bits)."""
    (r0, r1), (c0, c1) = rows, cols
    from ..dtypes import to_storage  # noqa: PLC0415 - ml_dtypes only where a C is written

    block = to_storage(np.ascontiguousarray(block))
    if h5py.get_config().mpi and comm.Get_size() > 1:
        with h5py.File(tmp, "r+", driver="mpio", comm=comm) as f:
            dset = f["result/C"]
            if block.size:
                with dset.collective:
                    dset[r0:r1, c0:c1] = block
            else:
                # h5py returns early on an empty selection, but the write is collective:
                # a rank with no block still takes part, with nothing selected.
                file_space = dset.id.get_space()
                file_space.select_none()
                memory_space = h5py.h5s.create_simple((1,))
                memory_space.select_none()
                transfer = h5py.h5p.create(h5py.h5p.DATASET_XFER)
                transfer.set_dxpl_mpio(h5py.h5fd.MPIO_COLLECTIVE)
                dset.id.write(memory_space, file_space, np.zeros(1, dset.dtype), dxpl=transfer)
        return
    # Serial HDF5: one writer at a time, in rank order, passing a token.
    rank, size = comm.Get_rank(), comm.Get_size()
    if rank > 0:
        comm.recv(source=rank - 1, tag=77)
    error = None
    try:
        if block.size:
            with _writing(tmp), h5py.File(tmp, "r+") as f:
                f["result/C"][r0:r1, c0:c1] = block
    except Exception as exc:  # noqa: BLE001 - pass the token on, then fail together
        error = exc
    if rank + 1 < size:
        comm.send(True, dest=rank + 1, tag=77)
    if error is not None:
        raise error


def publish(tmp: str, path: str, overwrite: bool) -> str:
    """Rank 0: make the complete temporary file appear under ``path``; returns the name it took.

    That is ``path``, or for a name of :data:`RENAMEABLE` that another file took meanwhile the next
    free one of its sequence (:func:`hpcmm.config.next_output_name`).  Returned or raised, ``tmp`` is
    gone and no longer in :data:`PENDING`.
    """
    from ..config import next_output_name  # noqa: PLC0415

    with _writing(tmp), open(tmp, "rb+") as fh:
        os.fsync(fh.fileno())
    if overwrite:
        os.replace(tmp, path)
        PENDING.discard(tmp)  # its bytes are under `path` now: nothing of it is left to remove
    else:
        try:
            while True:
                try:
                    os.link(tmp, path)  # fails if the name exists: nothing is replaced
                    break
                except FileExistsError:
                    if path not in RENAMEABLE:
                        raise InputError(f"--out={path}: file appeared during the run (pass --overwrite)") from None
                    RENAMEABLE.add(path := next_output_name(path))
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            PENDING.discard(tmp)
    PUBLISHED[:] = [path]
    with contextlib.suppress(OSError):
        dfd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
        os.fsync(dfd)
        os.close(dfd)
    return path


def write_table_file(out: str, overwrite: bool, kind: str, name: str, rows: list[dict], vers: dict) -> str:
    """Rank 0: a small file holding one table (the benchmarks' figures), written atomically; its name."""
    return write_tables_file(out, overwrite, kind, {name: rows}, vers)


def write_tables_file(out: str, overwrite: bool, kind: str, tables: dict[str, list[dict]], vers: dict) -> str:
    """Rank 0: a small file of tables (name → rows with the same keys), written atomically; the name
    it took (:func:`publish`)."""
    import datetime  # noqa: PLC0415

    tmp = temporary_path(out, guarded=True)
    try:
        with _writing(tmp):
            _reserve(tmp, _size([], list(tables.values()), [vers]))
            with h5py.File(tmp, "r+") as f:
                _attrs(f, {"schema_version": SCHEMA_VERSION, "kind": kind,
                           "created": datetime.datetime.now(datetime.timezone.utc).isoformat(),
                           "command": " ".join(["python -m hpcmm", *sys.argv[1:]])})
                _attrs(f.create_group("versions"), vers)
                for name, rows in tables.items():
                    _table(f, name, rows)
        return publish(tmp, out, overwrite)
    finally:
        remove_temporary(tmp)
        release_guard(tmp)
