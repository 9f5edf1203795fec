"""Which way the default process grid faces: each rank's C block wider than tall, or taller than wide.

``MPI.Compute_dims(size, 2)`` gives the most square grid with ``rows >= cols``: for a square product at
2 ranks a 2 × 1 grid, whose C blocks are ``m/2 × n`` (wider than tall).  Its transpose, 1 × 2, moves as
many bytes per step (A panels ``m × w`` along the row instead of B panels ``w × n`` down the column),
but hands cuBLAS the other shape, and cuBLAS's kernels do not run both at one rate.  On one H200, in
hpcmm's operand orders (A column-major, B and C row-major; ``tests/gpu/gemm_probe.py``, medians of 10,
docs/benchmarks.md), float64:

=====================  ===============  ==============
C block × depth        cublasGemmEx     cuBLASLt tuned
=====================  ===============  ==============
8192 × 16384 × 8192    49.05 TFLOP/s    51.03
16384 × 8192 × 8192    56.43            51.94
8192 × 16384 × 16384   48.93            50.92
16384 × 8192 × 16384   58.17            56.47
16384³ (one GPU)       58.82            57.07
=====================  ===============  ==============

The wide block runs 13–16 % below one GPU's rate on the whole product, the tall one within 4 %: so a
2-rank float64 16384 run on a 2 × 1 grid can reach no more than about 87 % of two GPUs, whatever its
transfers do.  Hence ``auto`` (the default) faces the grid *tall* (``rows <= cols``) for the kinds in
:data:`TALL_KINDS` on GPUs of one (virtual) node, and keeps ``MPI.Compute_dims``'s *wide* grid for the
other types, on CPUs (where no measurement asked for a change) and across nodes: there the grid's face
also decides which panels cross the network and how a node's ranks fill the grid's rows, which the
cost model weighs (:mod:`hpcmm.model`) and no run here has measured.  ``HPCMM_GRID_ORIENTATION=wide``
or ``tall`` fixes it (``row`` too, below); ``--grid`` overrides them all.  Weighted layouts (ranks sharing a
GPU) start from the same grid (:func:`hpcmm.layout.fit_grid`'s preferred shape).

Where ranks share GPUs, ``auto`` goes further for those kinds: one process row (face ``row``, a
``1 × P`` grid), every rank a full-height strip of C.  Only A panels move (along the row, between the
ranks of one GPU as device-to-device copies), B stays where it is, and each GPU's ranks run tall
GEMMs.  Measured on 2 × H200, float64 16384, 8 ranks (four per GPU), one call, products verified:

==========  ===============  ==============
grid        time-sliced      under MPS
==========  ===============  ==============
2 × 4       92.24 TFLOP/s    101.39
4 × 2       92.35            101.07
8 × 1       92.39            99.84
1 × 8       101.41           112.84
==========  ===============  ==============

against 108.09 and 108.31 at 2 ranks in the same call.  The GEMMs alone
(``tests/gpu/sharing_ceiling.py``: four ranks on one GPU, each its 2 × 4 block, 8192 × 4096 in steps
of 2048) ran at 47.88 TFLOP/s time-sliced and 52.31 under MPS, against 59.92 for one rank with a
2-rank run's block: the 2 × 4 grid loses most of its 15 % in the GEMMs' shape before any transfer.
Prime rank counts (3, 5) already take ``1 × P`` under ``tall``; ``row`` changes the composite ones.
It stops at :data:`ROW_MOST_RANKS`: one row of P ranks sends each rank (P − 1)/P of A, where the
most square grid sends it a fraction that falls with √P (8 ranks: 0.88 against 0.50; 24: 0.96 against
0.33), and the cost model (:mod:`hpcmm.model`, the ``h200x8-ndr`` node, float64 16384) has one row of
24 and 32 ranks on 8 GPUs 29 and 24 % slower than the tall grid; no run here had more than 8 ranks.
And it needs each rank's strip to keep :data:`ROW_LEAST_COLUMNS` columns of C: 10007 × 6001 × 3001 at 8
ranks (strips of 750 columns, GEMMs of 10007 × 750) ran 50.52 and 50.59 TFLOP/s on ``1 × 8`` under the
system and the CUDA-aware MPI, against 66.07 and 65.96 on ``2 × 4`` in the check before (products
verified); narrower strips take the tall grid.  Between 750 and 2048 columns nothing was measured.
"""

from __future__ import annotations

import math

from .layout import Grid

__all__ = ["ORIENTATIONS", "ROW_LEAST_COLUMNS", "ROW_MOST_RANKS", "TALL_KINDS", "default_grid", "facing",
           "most_square", "oriented"]

#: ``HPCMM_GRID_ORIENTATION``'s values.
ORIENTATIONS = ("auto", "wide", "tall", "row")
#: The kinds of GEMM (type, or ``tf32``) whose default grid faces tall on GPUs: where the tall C block
#: measured faster (the module's table).
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
