"""SUMMA as a plan: which panel of k, from whom, step by step.

Each step multiplies a column panel of A (width ``k1 - k0``) by the matching
row panel of B.  The A panel lives in one process column and travels along
each process row; the B panel lives in one process row and travels down each
process column.  A step never straddles a block boundary of A's or B's k
split, so every panel is one contiguous piece of its owner's block.

Worked example, k = 10 on a 2 × 3 grid with ``panel=4``: A's k blocks are
[0,4) [4,7) [7,10) over the columns, B's [0,5) [5,10) over the rows, and the
steps are [0,4) [4,5) [5,7) [7,10).  The k blocks are the layout's: near-equal,
or following the ranks' weights (:class:`~hpcmm.layout.Layout`), so the plan
asks the layout who owns an index of k.
"""

from __future__ import annotations

import dataclasses

from ..layout import Layout

__all__ = ["Step", "auto_panel", "ring_depth", "summa_plan"]


@dataclasses.dataclass(frozen=True)
class Step:
    """One SUMMA step.

    Attributes
    ----------
    index : int
        Position in the plan.
    k0, k1 : int
        Global k range of the panels.
    a_root : int
        Process column that owns the A panel (root in the row communicator).
    a_offset : int
        Where the panel starts inside the owner's A block (in k).
    b_root : int
        Process row that owns the B panel (root in the column communicator).
    b_offset : int
        Where the panel starts inside the owner's B block (in k).
    """

    index: int
    k0: int
    k1: int
    a_root: int
    a_offset: int
    b_root: int
    b_offset: int

    @property
    def width(self) -> int:
        return self.k1 - self.k0


def summa_plan(layout: Layout, panel: int, ramp: bool = False) -> list[Step]:
    """The steps of SUMMA for ``layout`` with panels at most ``panel`` wide.

    With ``ramp`` the first panels are narrower (``panel/8``, doubling up to
    ``panel``): the first panel cannot overlap any GEMM, so its transfer is
    exposed; a narrow one makes that cost small while the later, wide panels
    keep the GEMM at full rate.
    """
    if panel < 1:
        raise ValueError(f"panel width {panel} must be positive")
    k = layout.k
    steps: list[Step] = []
    width = max(1, panel // 8) if ramp else panel
    k0 = 0
    while k0 < k:
        # The layout's own owners: with weights the k blocks are not near-equal.
        a_root = layout.a_k_owner(k0)
        b_root = layout.b_k_owner(k0)
        a_lo, a_hi = layout.a_k(a_root)
        b_lo, b_hi = layout.b_k(b_root)
        # Each step must start inside both owners' blocks and move k on: a plan that
        # does not cover k is a bug, and it must fail here rather than loop for ever.
        if not (a_lo <= k0 < a_hi and b_lo <= k0 < b_hi):
            raise ValueError(f"SUMMA plan: k={k0} is not in the A block [{a_lo}, {a_hi}) of column "
                             f"{a_root} or the B block [{b_lo}, {b_hi}) of row {b_root} (grid {layout.grid})")
        k1 = min(k0 + width, a_hi, b_hi)
        steps.append(Step(len(steps), k0, k1, a_root, k0 - a_lo, b_root, k0 - b_lo))
        k0 = k1
        width = min(panel, 2 * width)
    if not steps and k > 0 or (steps and (steps[0].k0, steps[-1].k1) != (0, k)):
        raise ValueError(f"SUMMA plan does not cover k={k}")
    return steps


def auto_panel(layout: Layout, itemsize: int, on_gpu: bool) -> int:
    """A panel width that keeps the GEMM efficient and leaves steps to overlap.

    On a GPU the local GEMM needs a deep k (>= 1024) to run near the cuBLAS
    rate; beyond a few thousand the gain is gone while fewer steps leave less
    to overlap.  We also align to the k blocks, so that whole blocks split into
    equal panels (no sliver steps).  On a CPU the BLAS saturates earlier.

    The GPU rule, fitted to the panel sweep of docs/benchmarks.md (2 × H200,
    float64, grid 2×1): 4096 columns where the smallest k block holds at least
    four of them (:data:`WIDE_PANEL_MIN_BLOCK`), else 2048; 16-bit types 4096
    always.  Each step reads and writes C once (``beta = 1``), a cost that a
    wider panel halves; the ramp's narrow first panels and the sliver at the
    block's end grow with the panel, and only a deep block pays them back.
    A four-panel block also caps the ring of panel buffers at the share of the
    local operands that 2048-wide panels take in 8192-deep blocks.

    Blocks of different depth (a weighted layout, ranks sharing GPUs) take the
    target width itself: no width splits them all evenly, and an even split of
    the smallest is an odd width that every step's GEMM runs at (5 ranks on
    2 × H200, float64 16384: 2048 ran 3–4 % faster than 1365).

    Examples
    --------
    >>> from hpcmm.layout import Grid, Layout
    >>> auto_panel(Layout(32768, 32768, 32768, Grid(2, 1)), 8, on_gpu=True)   # B's k blocks 16384
    4096
    >>> auto_panel(Layout(16384, 16384, 16384, Grid(2, 1)), 8, on_gpu=True)   # blocks of 8192
    2048
    """
    if layout.grid.size == 1:
        return layout.k  # nothing moves: one GEMM of full depth is fastest
    grid = layout.grid
    # The k blocks of A (by column) and B (by row): without weights near k // cols and k // rows.
    a_depths = [layout.extent(layout.a_k(c)) for c in range(grid.cols)]
    b_depths = [layout.extent(layout.b_k(r)) for r in range(grid.rows)]
    smallest_block = max(1, min(a_depths + b_depths) or layout.k)
    target = _panel_target(smallest_block, itemsize, on_gpu)
    if smallest_block <= target:
        return max(1, smallest_block)
    if max(a_depths) - min(a_depths) > 1 or max(b_depths) - min(b_depths) > 1:
        # Weighted blocks (ranks sharing GPUs) differ in depth, so no one width splits them all
        # evenly; an even split of the smallest is an odd width that every GEMM then runs at.
        # Measured (float64 16384, 5 ranks on 2 GPUs, blocks 2730 and 4096 deep): 2048 ran at
        # 88.53 TFLOP/s against 85.98 at 1365 under MPS, 80.78 against 77.68 time-sliced.
        return target
    # Split the block into equal pieces no wider than the target.
    pieces = -(-smallest_block // target)
    return -(-smallest_block // pieces)


#: The smallest k block (columns) from which a GPU takes 4096-wide panels in types wider than 16 bits:
#: four whole panels.  Measured (float64, 2 ranks): blocks of 16384 ran 3.8 % faster at 4096 than at
#: 2048 (109.46 against 105.44 TFLOP/s), blocks of 8192 the same within 0.05 % (102.06, 102.01).
WIDE_PANEL_MIN_BLOCK = 4 * 4096


def _panel_target(smallest_block: int, itemsize: int, on_gpu: bool) -> int:
    """The widest panel :func:`auto_panel` aims at, before it splits blocks evenly."""
    if not on_gpu:
        return 512 if itemsize <= 2 else 256
    if itemsize <= 2 or smallest_block >= WIDE_PANEL_MIN_BLOCK:
        return 4096
    return 2048


def ring_depth(prefetch: int, spans_nodes: bool) -> int:
    """Panel buffers per operand: the one the GEMM reads plus ``prefetch`` in flight.

    A channel that spans nodes keeps at least two: its leader receives the
    next panel into one relay slot while its node peers may still copy the
    previous one out of the other (:mod:`hpcmm.transport.channel`), even with
    ``prefetch = 0``.

    Examples
    --------
    >>> ring_depth(0, spans_nodes=False), ring_depth(0, spans_nodes=True), ring_depth(3, spans_nodes=True)
    (1, 2, 4)
    """
    ring = prefetch + 1
    return max(ring, 2) if spans_nodes else ring
