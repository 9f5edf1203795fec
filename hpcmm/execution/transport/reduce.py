"""The reduce-scatter of 2.5D: C partial blocks of one node summed over IPC (GPU) or a shared window (CPU).

A fiber is the ``C`` ranks of one node that computed partial sums of the same
block of C (one per layer, :mod:`hpcmm.planning.algorithms.layers`).  Each member's
partial block lives in memory its fiber peers can read
(:class:`~hpcmm.execution.transport.ipc.PeerMemory`).  The block's rows are cut into
``C`` near-equal pieces; member ``j`` pulls piece ``j`` of the ``C - 1``
other partial blocks and adds them to its own, so that it ends with piece
``j`` of the sum, in place.

Order (GPU): the partial blocks are complete once every member's compute
stream is done, so each member synchronizes its device and then the fiber
meets in a barrier; pulls then run on the communication stream into two
alternating scratch pieces, each add on the compute stream after its pull's
event, and a pull into a scratch piece waits for the add that last read it.
A second barrier, once this member's pulls and adds are over, keeps every
member from overwriting its partial block (the next product) while a peer may
still read it.  Pieces are contiguous (C blocks are row-major), so each pull
is one copy.

Launch: part of ``mpiexec -n 4 python -m hpcmm --ranks-per-node 2 --algo 2.5d:2``.
"""

from __future__ import annotations

from time import perf_counter

import numpy as np

from ...dtypes import numpy_dtype
from ...errors import collective
from ...geometry.layout import block_range, padded
from .ipc import IpcPeerMemory, ShmPeerMemory

__all__ = ["FiberReduction"]


def scratch_bytes(shape: tuple[int, int], count: int, member: int, itemsize: int) -> int:
    """Bytes of the scratch :class:`FiberReduction` allocates on fiber member ``member``.

    Up to two pieces (pulls alternate between them), each the member's rows of
    the ``shape`` partial block, stored ``padded`` apart as the block is.
    """
    r0, r1 = block_range(shape[0], count, member)
    return min(2, count - 1) * (r1 - r0) * padded(shape[1], itemsize) * itemsize


class FiberReduction:
    """One rank's side of its fiber's reduce-scatter; collective over the fiber at set-up and close.

    Parameters
    ----------
    fiber : MPI.Comm
        The fiber's ranks, member ``j`` at rank ``j`` (all on one node).
    backend : Backend
    shape : (int, int)
        The partial block (the same on every member).
    dtype : numpy dtype

    Attributes
    ----------
    partial : array
        The partial block (row-major), in memory the fiber can read: the
        engine multiplies into it, and after :meth:`reduce` rows
        :attr:`rows` hold this member's piece of the sum.
    rows : (int, int)
        This member's piece, rows of the partial block.
    """

    def __init__(self, fiber, backend, shape: tuple[int, int], dtype) -> None:
        self.fiber, self.backend = fiber, backend
        self.dtype = numpy_dtype(dtype)
        self.count, self.member = fiber.Get_size(), fiber.Get_rank()
        self.shape = tuple(int(x) for x in shape)
        rows, cols = self.shape
        self.pieces = [block_range(rows, self.count, j) for j in range(self.count)]
        self.rows = self.pieces[self.member]
        #: Rows stored ``ld`` elements apart, as the engine stores C (:func:`~hpcmm.geometry.layout.padded`):
        #: the layer's GEMM writes into this block, and a piece is whole stored rows, one contiguous pull.
        self.ld = padded(cols, self.dtype.itemsize)
        self.row_bytes = self.ld * self.dtype.itemsize
        self.peers = (IpcPeerMemory if backend.on_gpu else ShmPeerMemory)(fiber, backend)
        self.scratch = []
        self.closed = False
        raw = self.peers.allocate(rows * self.row_bytes)  # collective over the fiber, agreed inside
        # What follows may fail on this rank alone (out of memory): the fiber learns of it, and its
        # members close the shared block together.
        try:
            with collective(fiber):
                count = rows * self.ld
                flat = raw.view(self.dtype)[:count] if count else raw[:0].view(self.dtype)
                #: The partial block's storage, ``(rows, ld)``: what the layer's engine multiplies into.
                self.storage = flat.reshape((rows, self.ld))
                self.partial = self.storage[:, :cols]
                backend.poison(self.storage)
                piece_rows = self.rows[1] - self.rows[0]
                self.scratch = [backend.empty((piece_rows, self.ld), self.dtype)
                                for _ in range(min(2, self.count - 1))]
        except Exception:
            self.close()
            raise

    def piece(self) -> object:
        """This member's piece of the partial block (its piece of C once :meth:`reduce` returned)."""
        return self.partial[self.rows[0]:self.rows[1]]

    def nbytes_from_peers(self) -> int:
        """Bytes one reduction pulls into this member."""
        return (self.count - 1) * (self.rows[1] - self.rows[0]) * self.row_bytes

    def reduce(self) -> float:
        """Collective over the fiber: sum this member's piece over the fiber; returns its seconds.

        Call once the partial block is complete on this rank's side (the
        engine's product returns after synchronizing its device).
        """
        backend = self.backend
        start = perf_counter()
        backend.synchronize()
        self.fiber.Barrier()  # every member's partial block is complete
        mine = self.piece()
        cols = self.shape[1]
        nbytes = (self.rows[1] - self.rows[0]) * self.row_bytes if mine.size else 0
        if nbytes:
            offset = self.rows[0] * self.row_bytes
            added = [None] * len(self.scratch)
            for turn in range(1, self.count):
                peer = (self.member + turn) % self.count  # spread the pulls over the peers
                slot = (turn - 1) % len(self.scratch)
                scratch = self.scratch[slot]
                backend.wait(backend.comm_stream, added[slot])
                self.peers.pull(scratch.reshape(-1).view(np.uint8), peer, offset, nbytes,
                                stream=backend.comm_stream)
                pulled = backend.event(backend.comm_stream)
                backend.wait(backend.compute_stream, pulled)
                self._add(mine, scratch[:, :cols])
                added[slot] = backend.event(backend.compute_stream)
        backend.synchronize()
        self.fiber.Barrier()  # no member overwrites its partial block while a peer still reads it
        return perf_counter() - start

    def _add(self, mine, scratch) -> None:
        backend = self.backend
        if backend.on_gpu:
            with backend.compute_stream:
                mine += scratch
        else:
            mine += scratch

    def close(self) -> None:
        """Collective over the fiber: unmap peers' memory and free this rank's."""
        if self.closed:
            return
        self.closed = True
        self.backend.synchronize()
        self.partial = self.storage = None
        self.scratch = []
        self.peers.close()
