"""Which way the default process grid faces: each rank's C block wider than tall, or taller than wide.

``MPI.Compute_dims(size, 2)`` gives the most square grid with ``rows >= cols`` (2 ranks: 2 × 1, C
blocks ``m/2 × n``).  Its transpose moves as many bytes per step but hands cuBLAS the other block
shape, and float64's kernels run the tall block faster (on one H200 within 4 % of the whole product's
rate, the wide one 13–16 % below).  So ``auto`` (the default) faces the grid *tall* (``rows <= cols``)
for :data:`TALL_KINDS` on the GPUs of one (virtual) node, and keeps the *wide* grid for the other
types, on CPUs and across nodes, where the face also decides which panels cross the network.

Where ranks share GPUs, ``auto`` takes one process row (face ``row``, ``1 × P``): every rank a
full-height strip of C, only A panels moving, each GPU's ranks running tall GEMMs.  It stops at
:data:`ROW_MOST_RANKS` ranks (one row sends each rank (P − 1)/P of A) and needs each strip to keep
:data:`ROW_LEAST_COLUMNS` columns of C; narrower strips take the tall grid.
``HPCMM_GRID_ORIENTATION=wide``, ``tall`` or ``row`` fixes the face; ``--grid`` overrides them all.

Evidence (2 × H200): docs/performance.md, "How to tune"; the GEMM probe by block face and the
wide/tall A/B in ``benchmarks/results/2026-11-30/bench-grid-orientation.json``; the grid for 8 ranks
on 2 GPUs and the strip width in ``benchmarks/results/2026-11-30/shared-gpus.json`` and ``gpu-checks.json``.
"""

from __future__ import annotations

import math

from ..geometry.layout import Grid

__all__ = ["ORIENTATIONS", "ROW_LEAST_COLUMNS", "ROW_MOST_RANKS", "TALL_KINDS", "default_grid", "facing",
           "most_square", "oriented"]

#: ``HPCMM_GRID_ORIENTATION``'s values.
ORIENTATIONS = ("auto", "wide", "tall", "row")
#: The kinds of GEMM (type, or ``tf32``) whose default grid faces tall on GPUs: where the tall C block
#: measured faster (the module's notes).
TALL_KINDS = ("float64",)
#: The most ranks whose default grid is one process row where they share GPUs (the module's notes):
#: as far as it was measured.
ROW_MOST_RANKS = 8
#: The fewest columns of C in each rank's strip of one process row (the module's notes): 16384 at 8
#: ranks (strips 2048 wide) ran 10 % faster in one row, 10007 × 6001 × 3001 at 8 ranks (750 wide) 23 %
#: slower than on the tall grid.
ROW_LEAST_COLUMNS = 2048


def facing(orientation: str, dtype: str, tf32: bool = False, on_gpu: bool = True, nodes: int = 1,
           shared: bool = False, ranks: int | None = None, n: int | None = None) -> str:
    """``"wide"``, ``"tall"`` or ``"row"``: which way the default grid of this run faces.

    Parameters
    ----------
    orientation : str
        ``HPCMM_GRID_ORIENTATION``: ``auto``, ``wide``, ``tall`` or ``row``.
    dtype : str
        The element type (``tf32`` is float32 with ``tf32=True``, or the model's ``"tf32"``).
    tf32, on_gpu : bool
        TF32 tensor cores; whether the GEMMs run on GPUs.
    nodes : int
        The (virtual) nodes of the run.
    shared : bool
        Whether any GPU of the run holds several ranks.
    ranks : int, optional
        The ranks of the grid: one row for shared GPUs takes at most :data:`ROW_MOST_RANKS`
        (unlimited where not given).
    n : int, optional
        The columns of C: one row for shared GPUs needs strips of at least :data:`ROW_LEAST_COLUMNS`
        columns, ``n // ranks`` (any width where either is not given).

    Examples
    --------
    >>> facing("auto", "float64"), facing("auto", "float32"), facing("auto", "float64", on_gpu=False)
    ('tall', 'wide', 'wide')
    >>> facing("auto", "float64", nodes=2), facing("tall", "float64", nodes=2)
    ('wide', 'tall')
    >>> facing("wide", "float64"), facing("tall", "float16", on_gpu=False)
    ('wide', 'tall')
    >>> facing("auto", "float64", shared=True), facing("auto", "float32", shared=True)
    ('row', 'wide')
    >>> facing("auto", "float64", shared=True, ranks=8), facing("auto", "float64", shared=True, ranks=16)
    ('row', 'tall')
    >>> facing("auto", "float64", shared=True, ranks=8, n=16384), facing("auto", "float64", shared=True, ranks=8, n=6001)
    ('row', 'tall')
    """
    if orientation not in ORIENTATIONS:
        raise ValueError(f"grid orientation {orientation!r}: expected one of {', '.join(ORIENTATIONS)}")
    if orientation != "auto":
        return orientation
    kind = "tf32" if tf32 else dtype
    if not (on_gpu and nodes == 1 and kind in TALL_KINDS):
        return "wide"
    if not shared or ranks is not None and ranks > ROW_MOST_RANKS:
        return "tall"
    narrow = ranks is not None and n is not None and n // ranks < ROW_LEAST_COLUMNS
    return "tall" if narrow else "row"


def oriented(rows: int, cols: int, face: str) -> Grid:
    """The grid ``rows × cols`` turned to ``face``: ``wide`` has ``rows >= cols``, ``tall`` ``rows <= cols``,
    and ``row`` is the one process row of as many ranks.

    >>> oriented(2, 1, "tall"), oriented(4, 2, "wide"), oriented(2, 4, "wide"), oriented(4, 2, "row")
    (Grid(rows=1, cols=2), Grid(rows=4, cols=2), Grid(rows=4, cols=2), Grid(rows=1, cols=8))
    """
    if face == "row":
        return Grid(1, rows * cols)
    low, high = sorted((rows, cols))
    return Grid(low, high) if face == "tall" else Grid(high, low)


def most_square(size: int) -> tuple[int, int]:
    """The most square ``rows × cols`` with ``rows >= cols``, as ``MPI.Compute_dims(size, 2)`` (pure).

    >>> most_square(8), most_square(12), most_square(7)
    ((4, 2), (4, 3), (7, 1))
    """
    cols = max(c for c in range(1, math.isqrt(size) + 1) if size % c == 0)
    return size // cols, cols


def default_grid(size: int, dtype: str = "float64", tf32: bool = False, on_gpu: bool = True, nodes: int = 1,
                 orientation: str = "auto", shared: bool = False, n: int | None = None) -> Grid:
    """The grid a run of ``size`` ranks takes without ``--grid`` or weights (scripts that size a product by it).

    >>> default_grid(8), default_grid(8, on_gpu=False), default_grid(8, nodes=2), default_grid(8, shared=True)
    (Grid(rows=2, cols=4), Grid(rows=4, cols=2), Grid(rows=4, cols=2), Grid(rows=1, cols=8))
    >>> default_grid(16, shared=True), default_grid(8, shared=True, n=8192)
    (Grid(rows=4, cols=4), Grid(rows=2, cols=4))
    """
    return oriented(*most_square(size), facing(orientation, dtype, tf32, on_gpu, nodes, shared, size, n))
