"""Whole matrices from the ranks' blocks: to one rank (:func:`gather`) or into an HDF5 file (:func:`write_hdf5`).

Both are collective over the communicator the blocks were laid out on.
A rank's block is a numpy or cupy array (cupy is brought to the host).

Example::

    c = mm.execute(a, b)
    whole = hpcmm.gather(comm, plan.layout, c)                   # rank 0: m×n, else None
    hpcmm.write_hdf5(comm, "c.h5", plan.layout, c, dataset="C")  # each rank writes its block
"""

from __future__ import annotations

import os

import numpy as np

from ..geometry.distribution import Layout
from ..dtypes import storage_attributes, storage_dtype, to_storage
from ..errors import InputError, OutputError, collective
from .operands import to_host
from .redistribute import redistribute

__all__ = ["gather", "write_hdf5"]


def gather(comm, layout: Layout, block, operand: str = "C", root: int = 0) -> np.ndarray | None:
    """Collective: the whole ``operand`` on rank ``root`` (``None`` on the others).

    ``block`` is this rank's block of ``operand`` in ``layout``.  The root
    needs memory for the whole matrix; for large ones write it to a file
    (:func:`write_hdf5`).
    """
    rank, size = comm.Get_rank(), comm.Get_size()
    rows, cols = layout.shapes[operand]
    target = [((0, rows), (0, cols)) if r == root else ((0, 0), (0, 0)) for r in range(size)]
    whole = redistribute(comm, to_host(block), layout.blocks[operand], target)
    return whole if rank == root else None


def write_hdf5(comm, path: str, layout: Layout, block, operand: str = "C", dataset: str = "C", *,
               overwrite: bool = False) -> None:
    """Collective: write ``operand``'s blocks into ``dataset`` of a new HDF5 file ``path``, one rank after another.

    bfloat16 goes in as its raw bits with an ``element_type`` attribute, as in
    hpcmm's results files.  An existing ``path`` is refused unless
    ``overwrite``.

    Raises
    ------
    InputError
        ``path`` exists (without ``overwrite``), or is not a file.
    OutputError
        The file could not be written.
    """
    import h5py  # noqa: PLC0415 - only where a file is written

    host = to_host(block)
    rank, size = comm.Get_rank(), comm.Get_size()
    with collective(comm):
        if rank == 0:
            if os.path.lexists(path) and not (overwrite and os.path.isfile(path)):
                raise InputError(f"{path}: exists (pass overwrite=True to replace a file)")
            try:
                with h5py.File(path, "w") as f:
                    d = f.create_dataset(dataset, shape=layout.shapes[operand], dtype=storage_dtype(host.dtype))
                    d.attrs.update(storage_attributes(host.dtype))
            except OSError as exc:
                raise OutputError(f"{path}: cannot write: {exc}") from exc
    (r0, r1), (c0, c1) = layout.ranges(operand, rank)
    error = None
    if rank > 0:
        comm.recv(source=rank - 1, tag=0x4857)
    try:
        if host.size:
            with h5py.File(path, "r+") as f:
                f[dataset][r0:r1, c0:c1] = to_storage(np.ascontiguousarray(host))
    except OSError as exc:
        error = OutputError(f"{path}: cannot write rank {rank}'s block: {exc}")
    if rank + 1 < size:
        comm.send(True, dest=rank + 1, tag=0x4857)
    with collective(comm):
        if error is not None:
            raise error
