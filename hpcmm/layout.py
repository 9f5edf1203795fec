"""Block geometry: global shapes over a process grid.

Pure functions of ``(shape, grid, coordinates)``, so one process can check the
layout of every rank of any virtual grid (the habit of Heat's
``communication.chunk`` and mpi4py-fft's ``_blockdist``).

Worked example, P = 2 × 3, m = 7: rows split 4 + 3 over the two process rows;
k = 5 over three process columns gives 2 + 2 + 1.  Rank 4 sits at (1, 1) and
owns A[4:7, 2:4]; rows with no elements (more ranks than rows) give empty
ranges, and such ranks still take part in every collective.

Storage orders are chosen so that every panel the algorithm moves is one
contiguous run of memory: A blocks are column-major (a column panel
``A[:, k0:k1]`` is contiguous), B blocks row-major (a row panel ``B[k0:k1, :]``
is contiguous), C blocks row-major.
"""

from __future__ import annotations

import dataclasses

__all__ = ["Grid", "Layout", "block_owner", "block_range"]


def block_range(n: int, parts: int, index: int) -> tuple[int, int]:
    """Half-open range of the ``index``-th of ``parts`` near-equal blocks of ``n``.

    The first ``n % parts`` blocks hold one element more.

    Examples
    --------
    >>> [block_range(7, 3, i) for i in range(3)]
    [(0, 3), (3, 5), (5, 7)]
    >>> block_range(2, 4, 3)
    (2, 2)
    """
    if parts < 1 or not 0 <= index < parts:
        raise ValueError(f"block index {index} out of range for {parts} parts")
    base, extra = divmod(n, parts)
    start = index * base + min(index, extra)
    return start, start + base + (1 if index < extra else 0)


def block_owner(n: int, parts: int, i: int) -> int:
    """Index of the block of :func:`block_range` that holds element ``i``."""
    if not 0 <= i < n:
        raise ValueError(f"element {i} out of range for length {n}")
    base, extra = divmod(n, parts)
    big = extra * (base + 1)
    if i < big:
        return i // (base + 1)
    return extra + (i - big) // base


@dataclasses.dataclass(frozen=True)
class Grid:
    """A ``rows × cols`` process grid, ranks in row-major order (as ``MPI.Create_cart``)."""

    rows: int
    cols: int

    @property
    def size(self) -> int:
        return self.rows * self.cols

    def coords(self, rank: int) -> tuple[int, int]:
        """``(row, col)`` of ``rank``."""
        if not 0 <= rank < self.size:
            raise ValueError(f"rank {rank} outside a {self.rows}x{self.cols} grid")
        return divmod(rank, self.cols)

    def rank(self, row: int, col: int) -> int:
        return row * self.cols + col

    def __str__(self) -> str:
        return f"{self.rows}x{self.cols}"


@dataclasses.dataclass(frozen=True)
class Layout:
    """Who owns which block of A (m×k), B (k×n) and C (m×n).

    A is split by rows over the grid's rows and by k over its columns; B by k
    over the grid's rows and by columns over its columns; C like A's rows and
    B's columns.
    """

    m: int
    n: int
    k: int
    grid: Grid

    def rows(self, prow: int) -> tuple[int, int]:
        """Rows of A and C held by process row ``prow``."""
        return block_range(self.m, self.grid.rows, prow)

    def cols(self, pcol: int) -> tuple[int, int]:
        """Columns of B and C held by process column ``pcol``."""
        return block_range(self.n, self.grid.cols, pcol)

    def a_k(self, pcol: int) -> tuple[int, int]:
        """The k range of A's block in process column ``pcol``."""
        return block_range(self.k, self.grid.cols, pcol)

    def b_k(self, prow: int) -> tuple[int, int]:
        """The k range of B's block in process row ``prow``."""
        return block_range(self.k, self.grid.rows, prow)

    def a_block(self, rank: int) -> tuple[tuple[int, int], tuple[int, int]]:
        r, c = self.grid.coords(rank)
        return self.rows(r), self.a_k(c)

    def b_block(self, rank: int) -> tuple[tuple[int, int], tuple[int, int]]:
        r, c = self.grid.coords(rank)
        return self.b_k(r), self.cols(c)

    def c_block(self, rank: int) -> tuple[tuple[int, int], tuple[int, int]]:
        r, c = self.grid.coords(rank)
        return self.rows(r), self.cols(c)

    @staticmethod
    def extent(rng: tuple[int, int]) -> int:
        return rng[1] - rng[0]

    def local_shapes(self, rank: int) -> dict[str, tuple[int, int]]:
        """Shapes of this rank's A, B and C blocks."""
        return {
            name: tuple(self.extent(r) for r in block(rank))
            for name, block in (("A", self.a_block), ("B", self.b_block), ("C", self.c_block))
        }
