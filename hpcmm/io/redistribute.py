"""Moves one matrix from one block layout to another: each rank sends the parts of its block that other ranks hold.

Used where a caller's layout is not the plan's (:class:`hpcmm.Matmul`) and to
gather C (:func:`hpcmm.gather`).  Host arrays only: device blocks are staged
by the caller (the plan's own layout never comes here).  Blocks of the
source must not overlap (every element has one sender); blocks of the target
may (replicated receivers each get their copy).

Worked example, 2 ranks, a 4×4 matrix by rows (rank 0 rows 0:2) to one by
columns (rank 0 columns 0:2): rank 0 keeps ``[0:2, 0:2]``, sends ``[0:2, 2:4]``
to rank 1, and receives ``[2:4, 0:2]`` from it: one message each way.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["MESSAGE_BYTES", "overlap", "redistribute"]

Range = tuple[tuple[int, int], tuple[int, int]]

#: The most bytes of one message: MPI counts are C ints, and a piece larger than this goes in several.
MESSAGE_BYTES = 1 << 30
_TAG = 0x4D4D


def overlap(one: Range, other: Range) -> Range | None:
    """The intersection of two half-open 2-D ranges, ``None`` where it is empty.

    >>> overlap(((0, 2), (0, 4)), ((1, 4), (2, 3)))
    ((1, 2), (2, 3))
    """
    (ar0, ar1), (ac0, ac1) = one
    (br0, br1), (bc0, bc1) = other
    r0, r1, c0, c1 = max(ar0, br0), min(ar1, br1), max(ac0, bc0), min(ac1, bc1)
    return ((r0, r1), (c0, c1)) if r0 < r1 and c0 < c1 else None


def _local(piece: Range, block: Range) -> tuple[slice, slice]:
    """``piece`` as slices of the array that holds ``block``."""
    (r0, r1), (c0, c1) = piece
    return slice(r0 - block[0][0], r1 - block[0][0]), slice(c0 - block[1][0], c1 - block[1][0])


def redistribute(comm, local: np.ndarray, source: Sequence[Range], target: Sequence[Range],
                 out: np.ndarray | None = None) -> np.ndarray:
    """Collective: this rank's block of the target layout, filled from the blocks of the source layout.

    Parameters
    ----------
    comm : MPI.Comm
        Rank ``r`` holds ``source[r]`` (as ``local``) and receives ``target[r]``.
    local : numpy.ndarray
        This rank's source block (any memory order).
    source, target : sequence of ``((row0, row1), (col0, col1))``
        One range per rank of ``comm``.
    out : numpy.ndarray, optional
        Where the target block goes (its shape; any memory order); default a new C-order array.

    Returns
    -------
    numpy.ndarray
        ``out``.
    """
    rank = comm.Get_rank()
    mine_source, mine_target = source[rank], target[rank]
    shape = tuple(hi - lo for lo, hi in mine_target)
    if out is None:
        out = np.empty(shape, dtype=local.dtype)
    requests, keep = [], []
    for peer, theirs in enumerate(target):
        piece = overlap(mine_source, theirs)
        if piece is None:
            continue
        data = local[_local(piece, mine_source)]
        if peer == rank:
            out[_local(piece, mine_target)] = data
            continue
        raw = np.ascontiguousarray(data).view(np.uint8).reshape(-1)
        keep.append(raw)
        for index, start in enumerate(range(0, raw.size, MESSAGE_BYTES)):
            requests.append(comm.Isend(raw[start:start + MESSAGE_BYTES], dest=peer, tag=_TAG + index))
    arrivals = []
    for peer, theirs in enumerate(source):
        piece = overlap(theirs, mine_target)
        if piece is None or peer == rank:
            continue
        extent = (piece[0][1] - piece[0][0], piece[1][1] - piece[1][0])
        raw = np.empty(extent[0] * extent[1] * local.dtype.itemsize, dtype=np.uint8)
        for index, start in enumerate(range(0, raw.size, MESSAGE_BYTES)):
            requests.append(comm.Irecv(raw[start:start + MESSAGE_BYTES], source=peer, tag=_TAG + index))
        arrivals.append((piece, raw, extent))
    from mpi4py import MPI  # noqa: PLC0415 - the geometry above needs no MPI

    MPI.Request.Waitall(requests)
    for piece, raw, extent in arrivals:
        out[_local(piece, mine_target)] = raw.view(local.dtype).reshape(extent)
    return out
