"""The public block layout: which block of A, B and C each rank of the caller's communicator holds.

A :class:`Layout` is plain data, one half-open ``((row0, row1), (col0, col1))``
range per operand and rank, in the operand *as the caller stores it* (before
``op``): with ``op_a="T"`` the caller's A is k×m and its ranges are of that
k×m matrix.  Any 2-D block layout is a Layout, uneven edges included; the
plan's own (:attr:`hpcmm.Plan.layout`) is the one hpcmm computes in without
moving data.  Blocks of one operand may not overlap where a caller holds them
(every element has one owner), and together they cover the matrix.

Worked example, 4 ranks on a 2 × 2 grid, m = n = k = 5, no op::

    >>> from hpcmm.geometry.distribution import Layout
    >>> lay = Layout.grid(5, 5, 5, (2, 2))
    >>> lay.ranges("A", 3)
    ((3, 5), (3, 5))
    >>> lay.ranges("B", 1)
    ((0, 3), (3, 5))

Helpers: :meth:`Layout.block` cuts a rank's block out of a global array (or an
HDF5 dataset, read in that block only); :func:`hpcmm.gather` brings C's blocks
to one rank or writes them into an HDF5 file.
"""

from __future__ import annotations

import bisect
import dataclasses
import heapq
from collections.abc import Mapping, Sequence

from .layout import block_range

__all__ = ["OPERANDS", "Layout", "Range", "stored_shape"]

#: The three operands, in the order every table of hpcmm names them.
OPERANDS = ("A", "B", "C")

Range = tuple[tuple[int, int], tuple[int, int]]


def stored_shape(operand: str, m: int, n: int, k: int, op: str = "N") -> tuple[int, int]:
    """The global shape of ``operand`` as the caller stores it, for ``op(A)`` m×k and ``op(B)`` k×n.

    >>> stored_shape("A", 4, 3, 2, "T")
    (2, 4)
    """
    shape = {"A": (m, k), "B": (k, n), "C": (m, n)}[operand]
    return shape if op == "N" else shape[::-1]


def _transposed(rng: Range) -> Range:
    return rng[1], rng[0]


@dataclasses.dataclass(frozen=True)
class Layout:
    """One block per rank of each of A, B and C, in the stored (before op) orientation.

    Parameters
    ----------
    shapes : mapping
        ``{"A": (rows, cols), "B": ..., "C": ...}``: each operand's global shape as stored.
    blocks : mapping
        ``{"A": [range of rank 0, range of rank 1, ...], ...}``: each a half-open
        ``((row0, row1), (col0, col1))``; an empty range (``row0 == row1``) is a
        rank that holds nothing of that operand.

    Raises
    ------
    ValueError
        Ranks that differ between the operands, a range outside its matrix,
        blocks that overlap, or blocks that leave part of a matrix unowned.
    """

    shapes: Mapping[str, tuple[int, int]]
    blocks: Mapping[str, tuple[Range, ...]]

    def __post_init__(self) -> None:
        shapes = {name: (int(self.shapes[name][0]), int(self.shapes[name][1])) for name in OPERANDS}
        blocks = {name: tuple(_normal(r) for r in self.blocks[name]) for name in OPERANDS}
        sizes = {name: len(blocks[name]) for name in OPERANDS}
        if len(set(sizes.values())) != 1:
            raise ValueError(f"a layout needs one block per rank for each operand, got {sizes}")
        for name in OPERANDS:
            _check_cover(name, shapes[name], blocks[name])
        object.__setattr__(self, "shapes", shapes)
        object.__setattr__(self, "blocks", blocks)

    # -- constructors ---------------------------------------------------------
    @classmethod
    def grid(cls, m: int, n: int, k: int, grid: tuple[int, int], *, op_a: str = "N", op_b: str = "N",
             order: Sequence[int] | None = None) -> Layout:
        """The SUMMA block layout of a ``rows × cols`` grid, near-equal blocks (:func:`~hpcmm.geometry.layout.block_range`).

        ``order[p]`` is the rank at grid position ``p`` (row-major); default the identity.
        """
        rows, cols = grid
        size = rows * cols
        order = tuple(range(size)) if order is None else tuple(order)
        if sorted(order) != list(range(size)):
            raise ValueError(f"order {order} is not a permutation of the {size} ranks of a {rows}x{cols} grid")
        by_rank: dict[str, list] = {name: [None] * size for name in OPERANDS}
        for position, rank in enumerate(order):
            r, c = divmod(position, cols)
            by_rank["A"][rank] = (block_range(m, rows, r), block_range(k, cols, c))
            by_rank["B"][rank] = (block_range(k, rows, r), block_range(n, cols, c))
            by_rank["C"][rank] = (block_range(m, rows, r), block_range(n, cols, c))
        return cls.from_product_blocks(m, n, k, by_rank, op_a=op_a, op_b=op_b)

    @classmethod
    def from_product_blocks(cls, m: int, n: int, k: int, blocks: Mapping[str, Sequence[Range]], *,
                            op_a: str = "N", op_b: str = "N") -> Layout:
        """A layout from blocks of ``op(A)`` (m×k), ``op(B)`` (k×n) and C: each A or B range
        is turned to the stored orientation where its op transposes."""
        ops = {"A": op_a, "B": op_b, "C": "N"}
        return cls(shapes={name: stored_shape(name, m, n, k, ops[name]) for name in OPERANDS},
                   blocks={name: tuple(r if ops[name] == "N" else _transposed(r) for r in blocks[name])
                           for name in OPERANDS})

    # -- queries --------------------------------------------------------------
    @property
    def size(self) -> int:
        """The number of ranks."""
        return len(self.blocks["A"])

    def ranges(self, operand: str, rank: int) -> Range:
        """``((row0, row1), (col0, col1))`` of ``rank``'s block of ``operand`` (``"A"``, ``"B"`` or ``"C"``)."""
        _check_operand(operand)
        if not 0 <= rank < self.size:
            raise ValueError(f"rank {rank} outside a layout of {self.size} ranks")
        return self.blocks[operand][rank]

    def local_shape(self, operand: str, rank: int) -> tuple[int, int]:
        """The shape of ``rank``'s block of ``operand``."""
        (r0, r1), (c0, c1) = self.ranges(operand, rank)
        return r1 - r0, c1 - c0

    def block(self, operand: str, rank: int, whole):
        """``rank``'s block of ``operand`` cut out of ``whole`` (an array or an h5py dataset of the global shape).

        An HDF5 dataset is read in that block only; an array gives a copy in C order.
        """
        shape = tuple(int(x) for x in whole.shape)
        if shape != self.shapes[operand]:
            raise ValueError(f"{operand} of shape {shape}: the layout holds {operand} as {self.shapes[operand]}")
        (r0, r1), (c0, c1) = self.ranges(operand, rank)
        part = whole[r0:r1, c0:c1]
        copy = getattr(part, "copy", None)
        return copy() if copy is not None else part

    def __str__(self) -> str:
        lines = [f"Layout of {self.size} rank(s): " + ", ".join(
            f"{name} {self.shapes[name][0]}x{self.shapes[name][1]}" for name in OPERANDS)]
        for rank in range(self.size):
            lines.append(f"  rank {rank}: " + "  ".join(
                f"{name}[{r0}:{r1}, {c0}:{c1}]" for name in OPERANDS
                for (r0, r1), (c0, c1) in [self.ranges(name, rank)]))
        return "\n".join(lines)


def _check_operand(operand: str) -> None:
    if operand not in OPERANDS:
        raise ValueError(f"operand {operand!r}: expected one of {', '.join(OPERANDS)}")


def _normal(rng) -> Range:
    (r0, r1), (c0, c1) = rng
    return (int(r0), int(r1)), (int(c0), int(c1))


def _check_cover(name: str, shape: tuple[int, int], blocks: tuple[Range, ...]) -> None:
    """Every range inside the matrix, no two overlapping, their areas adding up to the matrix's."""
    rows, cols = shape
    area = 0
    full = []
    for rank, ((r0, r1), (c0, c1)) in enumerate(blocks):
        if not (0 <= r0 <= r1 <= rows and 0 <= c0 <= c1 <= cols):
            raise ValueError(f"{name} block of rank {rank}, rows {r0}:{r1} and columns {c0}:{c1}, "
                             f"lies outside {name}'s {rows}x{cols}")
        if r1 > r0 and c1 > c0:
            full.append((rank, (r0, r1), (c0, c1)))
            area += (r1 - r0) * (c1 - c0)
    pair = _overlapping(full)
    if pair is not None:
        raise ValueError(f"{name} blocks of ranks {pair[0]} and {pair[1]} overlap")
    if area != rows * cols:
        raise ValueError(f"{name}'s blocks cover {area} of its {rows * cols} elements")


def _overlapping(blocks: list[tuple[int, Range, Range]]) -> tuple[int, int] | None:
    """Two ranks whose (non-empty) blocks overlap, lower rank first, or ``None``; ``O(P log P)``-ish.

    A sweep down the rows: the blocks whose rows the sweep is inside are kept sorted by their
    first column (they are disjoint while no overlap was found), so that a new block need only be
    compared with its neighbours there; a block leaves once the sweep passes its last row.
    """
    active: list[tuple[int, int, int]] = []  # (first column, end column, rank), sorted
    ends: list[tuple[int, int, int, int]] = []  # heap of (end row, first column, end column, rank)
    for rank, (r0, r1), (c0, c1) in sorted(blocks, key=lambda block: block[1][0]):
        while ends and ends[0][0] <= r0:
            _, d0, d1, other = heapq.heappop(ends)
            del active[bisect.bisect_left(active, (d0, d1, other))]
        at = bisect.bisect_left(active, (c0, c1, rank))
        for neighbour in active[max(at - 1, 0): at + 1]:
            n0, n1, other = neighbour
            if n0 < c1 and c0 < n1:
                return min(rank, other), max(rank, other)
        active.insert(at, (c0, c1, rank))
        heapq.heappush(ends, (r1, c0, c1, rank))
    return None
