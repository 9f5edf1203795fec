"""Block geometry: global shapes over a process grid.

Pure functions of ``(shape, grid, coordinates)``, so one process can check the
layout of every rank of any virtual grid (the habit of Heat's
``communication.chunk`` and mpi4py-fft's ``_blockdist``).

Worked example, P = 2 × 3, m = 7: rows split 4 + 3 over the two process rows;
k = 5 over three process columns gives 2 + 2 + 1.  Rank 4 sits at (1, 1) and
owns A[4:7, 2:4]; rows with no elements (more ranks than rows) give empty
ranges, and such ranks still take part in every collective.

Weighted blocks.  Ranks need not be equally fast: two ranks that share a GPU
each get half of it.  A :class:`Layout` may carry one weight per rank (its
share of the machine); blocks then follow the weights.  A rank's work is the
area of its C block, ``rows(r) × cols(c)``: the heights come from the process
row, the widths from the process column, so the areas form an outer product
and can follow per-rank weights exactly only when the weights do too
(``w[r, c] = u[r] · v[c]``).  On a 2 × 2 grid with weights ``[[1, 1], [1, ½]]``
the first row asks for equal widths and the second for widths 2 : 1, and no
layout gives both.  So each process row gets the rows of the matrix in
proportion to the summed weight of its ranks (its share of the machine), and
each process column the columns in proportion to its summed weight: exact
whenever the weights are an outer product (equal weights, one rank per GPU
beside ranks that share one in a 1-D grid, a column of shared GPUs beside a
column of whole ones), the rank-1 fit of the capacities otherwise.
:func:`predicted_imbalance` says what is left, and :func:`fit_grid` picks a
grid shape and a placement of the ranks that leaves least.  The k extent
follows the same weights (A's k by column, B's k by row), so a rank also
holds memory in proportion to its weight: a GPU shared by two half-weight
ranks holds what a GPU of one rank does.

Worked example, 3 ranks on 2 GPUs: ranks 0 and 2 share GPU 0, weights
``(½, 1, ½)`` on a 3 × 1 grid, m = 10: rows 0–2, 3–7, 8–9 (2.5, 5, 2.5
rounded by largest remainder, ties to the first), predicted imbalance 0.2
(from the rounding alone; it vanishes when m is a multiple of 4).

Storage orders are chosen so that every panel the algorithm moves is one
contiguous run of memory: A blocks are column-major (a column panel
``A[:, k0:k1]`` is contiguous), B blocks row-major (a row panel ``B[k0:k1, :]``
is contiguous), C blocks row-major.  Each block is stored with a padded
leading dimension (:func:`padded`): A's columns hold ``padded(m_loc)``
elements, B's and C's rows ``padded(n_loc)``; the padding is never read.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import math
from collections.abc import Sequence
from fractions import Fraction

__all__ = [
    "ALIGN_BYTES",
    "GPU_BLOCK_QUANTUM",
    "Grid",
    "GridFit",
    "Layout",
    "block_owner",
    "block_range",
    "bounds_owner",
    "fit_grid",
    "load_imbalance",
    "padded",
    "predicted_imbalance",
    "weighted_bounds",
]


#: What a stored column (A) or row (B, C) is padded to: one cache line.
ALIGN_BYTES = 128


#: Weighted blocks on GPUs start at multiples of this many rows, columns and k (within one
#: quantum of the weights; :mod:`hpcmm.planning.arrangement` and the cost model lay them out so): cuBLAS
#: runs odd and unaligned local shapes far below the rate of aligned ones (benchmarks/results/2026-11-30/shared-gpus.json,
#: "Several ranks on one GPU"), while 64 elements move a block by at most 0.4 % of a 16384 matrix.
GPU_BLOCK_QUANTUM = 64


def padded(extent: int, itemsize: int) -> int:
    """``extent`` rounded up to a whole number of :data:`ALIGN_BYTES` of elements: a leading dimension.

    cuBLAS's fast kernels load operands with wide vector loads and tensor-core
    tiles, which need every column (or row) to start on an aligned address: an
    odd leading dimension (a block of 2731 rows) sends it to slower fallback
    kernels.  ScaLAPACK's ``lld >= local rows`` is the same freedom: a block is
    stored with its columns ``padded(rows)`` elements apart, the padding never
    read.  128 bytes (a cache line) is 16 float64 or 64 float16.

    A thin block stays as it is: where the padding would add more than a
    sixteenth of the extent (fewer than 240 float64 rows, 1008 float16), it
    would multiply the block's memory and every panel's bytes (a block of 8
    rows would take 16) for a GEMM too small for its kernels to matter.  So
    padding costs at most 1/16 of the memory and traffic.

    Examples
    --------
    >>> padded(2731, 8), padded(6001, 2), padded(4096, 8), padded(0, 8), padded(250, 8)
    (2736, 6016, 4096, 0, 256)
    >>> padded(8, 8), padded(1, 16), padded(100, 2)         # thin: left as they are
    (8, 1, 100)
    """
    unit = ALIGN_BYTES // math.gcd(ALIGN_BYTES, itemsize)
    aligned = -(-extent // unit) * unit
    return aligned if 16 * (aligned - extent) <= extent else extent


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


def _check_weights(weights: Sequence[float], what: str = "weight") -> tuple[float, ...]:
    values = tuple(float(w) for w in weights)
    if not values:
        raise ValueError(f"no {what}s given")
    for i, w in enumerate(values):
        if not (math.isfinite(w) and w > 0):
            raise ValueError(f"{what} {i} is {w}: weights must be finite and positive")
    return values


def weighted_bounds(n: int, weights: Sequence[float], quantum: int = 1) -> tuple[int, ...]:
    """Offsets of blocks of ``n`` whose sizes follow ``weights``: block ``i`` is ``[b[i], b[i+1])``.

    Block ``i`` ideally holds ``n · w[i] / Σw`` elements; each gets the whole
    part of its ideal size, and the elements left over go one each to the
    blocks with the largest fractional parts, ties to the lower index
    (largest-remainder rounding).  Every size is the ideal rounded down or up,
    so within one of it, and equal weights give :func:`block_range` exactly.
    The arithmetic is exact (fractions), so ties are real ties.

    With ``quantum`` > 1 every inner offset is the ideal offset rounded to the
    nearest multiple of ``quantum`` (the last block ends at ``n``), so every
    size is within one quantum of its ideal.  GEMMs of an odd or unaligned
    local shape run far below the rate of aligned ones
    (benchmarks/results/2026-11-30/shared-gpus.json).

    Examples
    --------
    >>> weighted_bounds(10, [0.5, 1, 0.5])
    (0, 3, 8, 10)
    >>> weighted_bounds(7, [1, 1, 1]) == (0, *(block_range(7, 3, i)[1] for i in range(3)))
    True
    >>> weighted_bounds(2, [1, 1, 1, 1])
    (0, 1, 2, 2, 2)
    >>> weighted_bounds(16384, [1/3, 1/2, 1/3, 1/2, 1/3], quantum=64)   # 5 ranks on 2 GPUs
    (0, 2752, 6848, 9536, 13632, 16384)
    """
    if n < 0:
        raise ValueError(f"length {n} is negative")
    if quantum < 1:
        raise ValueError(f"quantum {quantum} must be positive")
    exact = [Fraction(w) for w in _check_weights(weights)]
    total = sum(exact)
    if quantum > 1:
        ideal_offsets = itertools.accumulate((n * w / total for w in exact[:-1]), initial=Fraction(0))
        inner = [min(n, quantum * round(x / quantum)) for x in ideal_offsets]
        return (*inner, n)
    ideal = [n * w / total for w in exact]
    sizes = [math.floor(x) for x in ideal]
    left = n - sum(sizes)
    by_remainder = sorted(range(len(sizes)), key=lambda i: (sizes[i] - ideal[i], i))
    for i in by_remainder[:left]:
        sizes[i] += 1
    return tuple(itertools.accumulate(sizes, initial=0))


def bounds_owner(bounds: Sequence[int], i: int) -> int:
    """Index of the block of ``bounds`` (as :func:`weighted_bounds` gives) that holds element ``i``.

    Empty blocks hold nothing, so they are never the owner.

    Examples
    --------
    >>> bounds_owner((0, 3, 3, 5), 3)
    2
    """
    if not bounds[0] <= i < bounds[-1]:
        raise ValueError(f"element {i} out of range for length {bounds[-1]}")
    return bisect.bisect_right(bounds, i) - 1


def load_imbalance(times: Sequence[float]) -> float:
    """Time of the busiest rank over the mean time, minus 1 (0 = balanced).

    The same measure serves predicted times (:func:`predicted_imbalance`) and
    measured GEMM times, so the two can be compared.  All zero: 0.

    Examples
    --------
    >>> load_imbalance([2.0, 1.0, 1.0, 2.0])
    0.33333333333333326
    """
    values = [float(t) for t in times]
    if not values:
        raise ValueError("no times given")
    mean = sum(values) / len(values)
    return max(values) / mean - 1.0 if mean > 0 else 0.0


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


def _equal_bounds(n: int, parts: int) -> tuple[int, ...]:
    return (0, *(block_range(n, parts, i)[1] for i in range(parts)))


@dataclasses.dataclass(frozen=True)
class Layout:
    """Who owns which block of A (m×k), B (k×n) and C (m×n).

    A is split by rows over the grid's rows and by k over its columns; B by k
    over the grid's rows and by columns over its columns; C like A's rows and
    B's columns.

    Parameters
    ----------
    m, n, k : int
        The product's shape: A is m×k, B k×n.
    grid : Grid
        The process grid.
    weights : sequence of float, optional
        One positive weight per rank of the grid (row-major, as ranks are
        numbered): its share of the machine.  Process row ``r`` gets rows (and
        B's k) in proportion to the sum of its ranks' weights, process column
        ``c`` columns (and A's k) in proportion to the sum of its ranks'
        weights.  ``None`` or equal weights: near-equal blocks
        (:func:`block_range`).
    quantum : int
        With weights, the weighted blocks start at multiples of ``quantum``
        (:func:`weighted_bounds`) along every axis long enough for it (at
        least ``4 · quantum`` per block); 1: within one element of the weights.
    """

    m: int
    n: int
    k: int
    grid: Grid
    weights: tuple[float, ...] | None = None
    quantum: int = 1
    _bounds: dict[str, tuple[int, ...]] = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        rows, cols = self.grid.rows, self.grid.cols
        if self.weights is None:
            bounds = {"rows": _equal_bounds(self.m, rows), "cols": _equal_bounds(self.n, cols),
                      "a_k": _equal_bounds(self.k, cols), "b_k": _equal_bounds(self.k, rows)}
        else:
            weights = _check_weights(self.weights)
            if len(weights) != self.grid.size:
                raise ValueError(f"{len(weights)} weights for the {self.grid.size} ranks of a {self.grid} grid")
            object.__setattr__(self, "weights", weights)
            row_w, col_w = self.row_weights, self.col_weights

            def bounds_of(length: int, parts: tuple[float, ...]) -> tuple[int, ...]:
                # A quantum only where every block is several quanta long: short axes keep
                # element-exact blocks rather than empty ones.
                quantum = self.quantum if length >= 4 * self.quantum * len(parts) else 1
                return weighted_bounds(length, parts, quantum)

            bounds = {"rows": bounds_of(self.m, row_w), "cols": bounds_of(self.n, col_w),
                      "a_k": bounds_of(self.k, col_w), "b_k": bounds_of(self.k, row_w)}
        object.__setattr__(self, "_bounds", bounds)

    # -- weights --------------------------------------------------------------
    def rank_weight(self, rank: int) -> float:
        """The weight of ``rank`` (1 without weights)."""
        self.grid.coords(rank)  # range check
        return 1.0 if self.weights is None else self.weights[rank]

    @property
    def row_weights(self) -> tuple[float, ...]:
        """Summed weight of each process row: its share of the matrix's rows."""
        g = self.grid
        return tuple(math.fsum(self.rank_weight(g.rank(r, c)) for c in range(g.cols)) for r in range(g.rows))

    @property
    def col_weights(self) -> tuple[float, ...]:
        """Summed weight of each process column: its share of the matrix's columns."""
        g = self.grid
        return tuple(math.fsum(self.rank_weight(g.rank(r, c)) for r in range(g.rows)) for c in range(g.cols))

    # -- ranges ---------------------------------------------------------------
    def _range(self, axis: str, index: int) -> tuple[int, int]:
        bounds = self._bounds[axis]
        if not 0 <= index < len(bounds) - 1:
            raise ValueError(f"block index {index} out of range for {len(bounds) - 1} parts")
        return bounds[index], bounds[index + 1]

    def rows(self, prow: int) -> tuple[int, int]:
        """Rows of A and C held by process row ``prow``."""
        return self._range("rows", prow)

    def cols(self, pcol: int) -> tuple[int, int]:
        """Columns of B and C held by process column ``pcol``."""
        return self._range("cols", pcol)

    def a_k(self, pcol: int) -> tuple[int, int]:
        """The k range of A's block in process column ``pcol``."""
        return self._range("a_k", pcol)

    def b_k(self, prow: int) -> tuple[int, int]:
        """The k range of B's block in process row ``prow``."""
        return self._range("b_k", prow)

    # -- owners ---------------------------------------------------------------
    def row_owner(self, i: int) -> int:
        """Process row that holds row ``i`` of A and C."""
        return bounds_owner(self._bounds["rows"], i)

    def col_owner(self, j: int) -> int:
        """Process column that holds column ``j`` of B and C."""
        return bounds_owner(self._bounds["cols"], j)

    def a_k_owner(self, kk: int) -> int:
        """Process column whose A block holds index ``kk`` of k."""
        return bounds_owner(self._bounds["a_k"], kk)

    def b_k_owner(self, kk: int) -> int:
        """Process row whose B block holds index ``kk`` of k."""
        return bounds_owner(self._bounds["b_k"], kk)

    # -- blocks ---------------------------------------------------------------
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

    def block_sizes(self) -> dict[str, tuple[int, ...]]:
        """Extents per process row (``rows``, ``b_k``) and column (``cols``, ``a_k``), for the record."""
        return {axis: tuple(b - a for a, b in zip(bounds, bounds[1:])) for axis, bounds in self._bounds.items()}


def predicted_imbalance(layout: Layout) -> float:
    """Load imbalance the layout's blocks predict, by :func:`load_imbalance`.

    Rank ``i`` computes its C block against all of k, at a rate in
    proportion to its weight, so its time is ``area(C_i) / w_i``; k cancels.
    Zero when the blocks follow the weights exactly.

    Examples
    --------
    3 ranks on 2 GPUs (the module's example) balance exactly when m is a
    multiple of 4; a 2 × 2 grid whose last rank is half as fast cannot:

    >>> predicted_imbalance(Layout(8, 6, 4, Grid(3, 1), weights=(0.5, 1, 0.5)))
    0.0
    >>> round(predicted_imbalance(Layout(700, 700, 4, Grid(2, 2), weights=(1, 1, 1, 0.5))), 3)
    0.241
    """
    times = []
    for rank in range(layout.grid.size):
        (r0, r1), (c0, c1) = layout.c_block(rank)
        times.append((r1 - r0) * (c1 - c0) / layout.rank_weight(rank))
    return load_imbalance(times)


@dataclasses.dataclass(frozen=True)
class GridFit:
    """A grid shape and a placement of the ranks on it.

    Attributes
    ----------
    grid : Grid
        The shape.
    order : tuple of int
        ``order[p]`` is the rank (of the communicator the weights were given
        for) that sits at grid position ``p`` (row-major).  The identity keeps
        the launch order.
    weights : tuple of float
        The weights in grid order, ready for :class:`Layout`.
    imbalance : float
        :func:`predicted_imbalance` of the resulting layout.
    """

    grid: Grid
    order: tuple[int, ...]
    weights: tuple[float, ...]
    imbalance: float


def _shapes(size: int, preferred: Grid | None) -> list[Grid]:
    """``preferred`` first, then every other factorization, most square first."""
    shapes = [Grid(r, size // r) for r in range(1, size + 1) if size % r == 0]
    shapes.sort(key=lambda g: (abs(g.rows - g.cols), -g.rows))
    if preferred is not None:
        shapes = [preferred] + [g for g in shapes if g != preferred]
    return shapes


def _placements(weights: tuple[float, ...], grid: Grid) -> list[tuple[int, ...]]:
    """Launch order, then ranks by falling weight filled by columns and by rows.

    Filling columns with equal weights makes the weights an outer product when
    whole GPUs and shared GPUs come in matching counts (6 ranks on 4 GPUs:
    weights 1, 1, ½, ½, ½, ½ fill a 2 × 3 grid as column weights 2, 1, 1).
    """
    size = len(weights)
    identity = tuple(range(size))
    heavy_first = sorted(range(size), key=lambda i: (-weights[i], i))
    by_rows = tuple(heavy_first)
    position = [0] * size  # grid position p ← k-th heaviest, filling columns top to bottom
    for nth, rank in enumerate(heavy_first):
        row, col = nth % grid.rows, nth // grid.rows
        position[grid.rank(row, col)] = rank
    by_cols = tuple(position)
    seen, out = set(), []
    for order in (identity, by_cols, by_rows):
        if order not in seen:
            seen.add(order)
            out.append(order)
    return out


def fit_grid(m: int, n: int, k: int, weights: Sequence[float], preferred: Grid | None = None,
             fixed_shape: bool = False, tolerance: float = 0.02) -> GridFit:
    """The grid shape and rank placement whose weighted layout is best balanced.

    Candidates are tried in order of preference: the ``preferred`` shape (the
    one chosen without weights) before other shapes, and on each shape the
    launch order (keeps the ranks of a node together, which the transports
    like) before placements by weight.  The first candidate whose predicted
    imbalance is within ``tolerance`` of the best wins, so a shape or a
    placement changes only for a real gain.

    Parameters
    ----------
    m, n, k : int
        The product's shape.
    weights : sequence of float
        One positive weight per rank, in rank order.
    preferred : Grid, optional
        The shape to keep unless another balances better.
    fixed_shape : bool
        Only place ranks on ``preferred`` (a shape the user asked for).
    tolerance : float
        How much more predicted imbalance a preferred candidate may have.

    Examples
    --------
    6 ranks on 4 GPUs, GPUs 0 and 1 shared (ranks 0, 4 and 1, 5): in launch
    order a 2 × 3 grid holds weights ``[[½, ½, 1], [1, ½, ½]]``, no outer
    product; placing the whole GPUs in the first column makes one.

    >>> fit = fit_grid(64, 64, 64, [0.5, 0.5, 1, 1, 0.5, 0.5], preferred=Grid(2, 3), fixed_shape=True)
    >>> fit.order, fit.weights, fit.imbalance
    ((2, 0, 4, 3, 1, 5), (1.0, 0.5, 0.5, 1.0, 0.5, 0.5), 0.0)
    """
    values = _check_weights(weights)
    size = len(values)
    if preferred is not None and preferred.size != size:
        raise ValueError(f"a {preferred} grid does not hold {size} ranks")
    if fixed_shape and preferred is None:
        raise ValueError("fixed_shape needs a preferred grid")
    shapes = [preferred] if fixed_shape else _shapes(size, preferred)
    candidates = []
    for grid in shapes:
        for order in _placements(values, grid):
            placed = tuple(values[i] for i in order)
            layout = Layout(m, n, k, grid, weights=placed)
            candidates.append(GridFit(grid, order, placed, predicted_imbalance(layout)))
    best = min(c.imbalance for c in candidates)
    return next(c for c in candidates if c.imbalance <= best + tolerance)
