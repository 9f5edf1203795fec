"""Where A and B come from: generated from a seed, or read from files.

Generated matrices are cut into fixed tiles of ``TILE × TILE`` elements, and
each tile is drawn from its own stream, seeded by (seed, matrix, tile row,
tile column).  A rank draws the tiles its block touches, so the global matrix
is the same for every rank count and grid, and no rank ever holds more than
its block (plus one tile per thread).  The tile rows are drawn by as many
threads as the rank's BLAS share (:func:`hpcmm.planning.threads.threads_in_force`):
numpy's generators release the GIL, and each tile has its own stream, so the
values do not depend on the thread count.

Files: ``FILE.h5:DATASET`` (h5py) or ``FILE.npy`` (memory-mapped); each rank
reads only its block.  A bfloat16 HDF5 dataset is its raw 16-bit patterns
marked ``element_type = "bfloat16"`` (:mod:`hpcmm.dtypes`), read back as
bfloat16; any float dataset serves ``--dtype bfloat16`` too, rounded.
"""

from __future__ import annotations

import dataclasses
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..config import regular_file
from ..dtypes import is_bfloat16, numpy_dtype, read_dataset, stored_type
from ..errors import InputError
from ..planning.threads import threads_in_force

__all__ = ["TILE", "MatrixSource", "generate_block", "open_source"]

TILE = 1024
_MATRIX_ID = {"A": 1, "B": 2, "x": 3, "C": 4}


def _tile(seed: int, which: str, ti: int, tj: int, shape, dtype: np.dtype) -> np.ndarray:
    rng = np.random.default_rng([seed, _MATRIX_ID[which], ti, tj])
    values = rng.random(shape) * 2.0 - 1.0
    if dtype.kind == "c":
        values = values + 1j * (rng.random(shape) * 2.0 - 1.0)
    return values.astype(dtype, copy=False)


def generate_block(seed: int, which: str, shape, rows, cols, dtype) -> np.ndarray:
    """The block ``[rows[0]:rows[1], cols[0]:cols[1]]`` of generated matrix ``which``.

    Parameters
    ----------
    seed : int
        The run's seed.
    which : {"A", "B", "C"}
    shape : tuple of int
        Global shape (only the tiling depends on it).
    rows, cols : tuple of int
        Half-open global ranges.
    dtype : numpy dtype

    Examples
    --------
    >>> full = generate_block(1, "A", (5, 3), (0, 5), (0, 3), np.float64)
    >>> np.array_equal(generate_block(1, "A", (5, 3), (2, 4), (1, 3), np.float64), full[2:4, 1:3])
    True
    """
    dtype = numpy_dtype(dtype)
    r0, r1 = rows
    c0, c1 = cols
    out = np.empty((r1 - r0, c1 - c0), dtype=dtype)
    if out.size == 0:
        return out
    rows_total, cols_total = shape

    def tile_row(ti: int) -> None:
        tr0, tr1 = ti * TILE, min((ti + 1) * TILE, rows_total)
        for tj in range(c0 // TILE, (c1 - 1) // TILE + 1):
            tc0, tc1 = tj * TILE, min((tj + 1) * TILE, cols_total)
            tile = _tile(seed, which, ti, tj, (tr1 - tr0, tc1 - tc0), dtype)
            lo_r, hi_r = max(r0, tr0), min(r1, tr1)
            lo_c, hi_c = max(c0, tc0), min(c1, tc1)
            out[lo_r - r0 : hi_r - r0, lo_c - c0 : hi_c - c0] = tile[
                lo_r - tr0 : hi_r - tr0, lo_c - tc0 : hi_c - tc0
            ]

    tile_rows = range(r0 // TILE, (r1 - 1) // TILE + 1)
    workers = min(threads_in_force(), len(tile_rows))
    if workers <= 1:
        for ti in tile_rows:
            tile_row(ti)
        return out
    # Each tile row writes its own rows of ``out``; list() re-raises a worker's error here.  On any
    # exception (a signal's included) the rows not yet started are dropped, not drawn first.
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="hpcmm-generate")
    try:
        list(pool.map(tile_row, tile_rows))
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return out


def random_vector(seed: int, n: int, dtype=np.float64) -> np.ndarray:
    """The verification vector: the same on every rank."""
    rng = np.random.default_rng([seed, _MATRIX_ID["x"]])
    return (rng.random(n) * 2.0 - 1.0).astype(dtype)


_SUPPORTED_KINDS = "fc"


@dataclasses.dataclass(frozen=True)
class MatrixSource:
    """A matrix in a file: where, its shape and element type."""

    flag: str
    path: str
    dataset: str | None
    shape: tuple[int, int]
    dtype: str

    @property
    def label(self) -> str:
        return f"{self.path}:{self.dataset}" if self.dataset else self.path

    def read(self, rows, cols) -> np.ndarray:
        """Read the block ``[rows, cols]`` (this rank's only).

        Raises
        ------
        InputError
            The file cannot give the block (truncated, corrupt, a filter that
            is not installed, a failed checksum): the operand, the file and why.
        """
        (r0, r1), (c0, c1) = rows, cols
        try:
            if self.dataset is None:
                return _read_npy_block(self.path, rows, cols)
            import h5py  # noqa: PLC0415

            with h5py.File(self.path, "r") as f:
                return read_dataset(f[self.dataset], (slice(r0, r1), slice(c0, c1)))
        except Exception as exc:  # noqa: BLE001 - whatever the library says, the file is bad input
            raise InputError(f"{self.flag}={self.label}: cannot read rows {r0}:{r1}, columns {c0}:{c1} "
                             f"({_reason(exc)})") from exc


def _reason(exc: BaseException) -> str:
    """A library's message on one line (HDF5's span several)."""
    return " ".join(str(exc).split()) or type(exc).__name__


def _npy_header(fh) -> tuple[tuple[int, ...], bool, np.dtype, int]:
    """``(shape, fortran_order, dtype, data offset)`` of an open .npy file."""
    fmt = np.lib.format
    version = fmt.read_magic(fh)
    read_header = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
    shape, fortran, dtype = read_header(fh)
    return shape, fortran, dtype, fh.tell()


def _read_npy_block(path: str, rows, cols) -> np.ndarray:
    """The block of a 2-D .npy file, read with ``pread`` (no memory map).

    A memory-mapped file that shrinks while it is read ends the process with
    SIGBUS; a short read is an error we can report.
    """
    (r0, r1), (c0, c1) = rows, cols
    with open(path, "rb") as fh:
        shape, fortran, dtype, offset = _npy_header(fh)
        m, n = shape
        # Lines of the file: rows (C order) or columns (Fortran order); we need a span of each.
        (l0, l1), (s0, s1), length = ((c0, c1), (r0, r1), m) if fortran else ((r0, r1), (c0, c1), n)
        out = np.empty((l1 - l0, s1 - s0), dtype=dtype)
        want = (s1 - s0) * dtype.itemsize
        fd = fh.fileno()
        for i, line in enumerate(range(l0, l1)):
            data = os.pread(fd, want, offset + (line * length + s0) * dtype.itemsize)
            if len(data) != want:
                raise OSError(f"truncated: {os.fstat(fd).st_size} bytes, the data of shape {tuple(shape)} "
                              f"needs {offset + m * n * dtype.itemsize}")
            out[i] = np.frombuffer(data, dtype=dtype)
    return np.ascontiguousarray(out.T) if fortran else out


def open_source(flag: str, path: str, dataset: str | None) -> MatrixSource:
    """Inspect a matrix file without reading its data.

    Raises
    ------
    InputError
        Missing file, not HDF5/NumPy, missing dataset, not 2-D, empty, or an
        element type that is not real or complex floating point or integer.
    """
    label = f"{flag}={path}" + (f":{dataset}" if dataset else "")
    regular_file(path, label)  # a FIFO or a device is refused as what it is, before anything opens it
    if not os.access(path, os.R_OK):
        raise InputError(f"{label}: not readable (permission denied)")
    if dataset is None:
        try:
            with open(path, "rb") as fh:
                shape, _, dtype, offset = _npy_header(fh)
                size = os.fstat(fh.fileno()).st_size
        except Exception as exc:  # noqa: BLE001 - any parse failure is bad input
            raise InputError(f"{label}: not a NumPy .npy file ({type(exc).__name__})") from exc
        if dtype.hasobject:
            raise InputError(f"{label}: holds Python objects, not numbers")
        need = offset + int(np.prod(shape)) * dtype.itemsize
        if size < need:
            raise InputError(f"{label}: truncated ({size} bytes, the data of shape {tuple(shape)} needs {need})")
    else:
        shape, dtype = _inspect_hdf5(label, path, dataset)
    if len(shape) != 2:
        raise InputError(f"{label}: expected a 2-D matrix, found shape {tuple(shape)}")
    if 0 in shape:
        raise InputError(f"{label}: empty matrix of shape {tuple(shape)}")
    if dtype.kind not in _SUPPORTED_KINDS + "iu" and not is_bfloat16(dtype):
        raise InputError(f"{label}: unsupported element type {dtype} (expected float, complex or int)")
    return MatrixSource(flag, path, dataset, (int(shape[0]), int(shape[1])), str(dtype))


def _inspect_hdf5(label: str, path: str, dataset: str):
    """Shape and type of ``path:dataset``, or why the file cannot give them."""
    import h5py  # noqa: PLC0415

    try:
        if not h5py.is_hdf5(path):
            raise InputError(f"{label}: not an HDF5 file")
        with h5py.File(path, "r") as f:
            if f.get(dataset, getlink=True) is None:
                raise InputError(f"{label}: no dataset '{dataset}' in {path}")
            try:
                node = f[dataset]
            except KeyError:
                raise InputError(f"{label}: '{dataset}' is a link that leads nowhere") from None
            if not isinstance(node, h5py.Dataset):
                raise InputError(f"{label}: no dataset '{dataset}' in {path}")
            if node.shape is None:
                raise InputError(f"{label}: the dataset has an empty dataspace (no shape)")
            missing = [fid for fid in _filters(node) if not h5py.h5z.filter_avail(fid)]
            if missing:
                raise InputError(f"{label}: compressed with HDF5 filter(s) {missing}, not installed here")
            return node.shape, stored_type(node.dtype, node.attrs)
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - a damaged or locked file is bad input
        raise InputError(f"{label}: cannot open it as HDF5 ({_reason(exc)})") from exc


def _filters(node) -> list[int]:
    """The HDF5 filter ids of a dataset's pipeline."""
    plist = node.id.get_create_plist()
    return [plist.get_filter(i)[0] for i in range(plist.get_nfilters())]


def check_pair(a: MatrixSource, b: MatrixSource, op_a: str = "N", op_b: str = "N") -> tuple[int, int, int]:
    """``(m, n, k)`` of op(A)·op(B), or why the shapes do not agree (with op ``T`` or ``C`` a file holds A as k×m)."""
    (m, ka), (kb, n) = (a.shape if op_a == "N" else a.shape[::-1]), (b.shape if op_b == "N" else b.shape[::-1])
    if ka != kb:
        shown = [f"{flag}={source.label} is {source.shape[0]}x{source.shape[1]}"
                 + ("" if op == "N" else f" (op {op}: {rows}x{cols})")
                 for flag, source, op, (rows, cols) in (("--a", a, op_a, (m, ka)), ("--b", b, op_b, (kb, n)))]
        a_name, b_name = ("A" if op_a == "N" else "op(A)"), ("B" if op_b == "N" else "op(B)")
        raise InputError(f"{shown[0]} and {shown[1]}: k of {a_name} ({ka}) != k of {b_name} ({kb})")
    return m, n, ka
