"""SUMMA as a plan: which panel of k, from whom, step by step.

Each step multiplies a column panel of A (width ``k1 - k0``) by the matching
row panel of B.  The A panel lives in one process column and travels along
each process row; the B panel lives in one process row and travels down each
process column.  A step never straddles a block boundary of A's or B's k
split, so every panel is one contiguous piece of its owner's block.

Worked example, k = 10 on a 2 × 3 grid with ``panel=4``: A's k blocks are
[0,4) [4,7) [7,10) over the columns, B's [0,5) [5,10) over the rows, and the
steps are [0,4) [4,5) [5,7) [7,10).  The k blocks are the layout's: near-equal,
or following the ranks' weights (:class:`~hpcmm.geometry.layout.Layout`), so the plan
asks the layout who owns an index of k.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from ...geometry.layout import Layout

__all__ = ["DEFAULT_PREFETCH", "TF32_PREFETCH", "Step", "auto_panel", "auto_prefetch", "own_start", "panel_candidates",
           "prefetch_of", "rank_plan", "ring_depth", "step_order", "summa_plan"]


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


def summa_plan(layout: Layout, panel: int, ramp: bool = False, first_k: int = 0) -> list[Step]:
    """The steps of SUMMA for ``layout`` with panels at most ``panel`` wide.

    With ``ramp`` the first panels are narrower (``panel/8``, doubling up to
    ``panel``): the first panel cannot overlap any GEMM, so its transfer is
    exposed; a narrow one makes that cost small while the later, wide panels
    keep the GEMM at full rate.  The ramp fills the first k range that both
    first owners hold (:func:`_ramp_widths`): what is left of it beside the
    whole panels goes into the ramp in order of width, not after it, because
    a narrow step followed by a whole panel cannot hide that panel's
    transfer (tf32 16384 on 2 × H200: a 1024 sliver before an 8192 step left
    1.6 ms of a 15 ms product waiting).

    ``first_k`` starts the plan there and wraps around: ``[first_k, k)``, then
    ``[0, first_k)`` (:func:`own_start`).  It must be where a block of A or of
    B begins, so that the steps are the same pieces of k in another order.
    """
    if panel < 1:
        raise ValueError(f"panel width {panel} must be positive")
    k = layout.k
    if k and not 0 <= first_k < k or not k and first_k:
        raise ValueError(f"SUMMA plan: first_k={first_k} is outside k={k}")
    steps: list[Step] = []
    widths: list[int] = []
    if ramp and k > 0:
        a_hi = layout.a_k(layout.a_k_owner(first_k))[1]
        b_hi = layout.b_k(layout.b_k_owner(first_k))[1]
        widths = _ramp_widths(min(a_hi, b_hi) - first_k, panel)
    for lo, hi in ((first_k, k), (0, first_k)):
        k0 = lo
        while k0 < hi:
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
            width = widths[len(steps)] if len(steps) < len(widths) else panel
            k1 = min(k0 + width, a_hi, b_hi, hi)
            steps.append(Step(len(steps), k0, k1, a_root, k0 - a_lo, b_root, k0 - b_lo))
            k0 = k1
    if sum(s.width for s in steps) != k or (steps and steps[0].k0 != first_k):
        raise ValueError(f"SUMMA plan does not cover k={k}")
    return steps


def own_start(layout: Layout, rank: int) -> tuple[int, bool]:
    """Where ``rank`` starts k when it takes the steps in an order of its own, and whether both first panels are its own.

    Where every panel is a one-sided pull (all ranks on one node,
    :mod:`hpcmm.execution.transport`), no rank waits for another's order, and each may
    start with what it holds: the k range where its A block and its B block
    meet, if they do (a process row or column of one rank, the diagonal of a
    square grid).  Its first GEMMs then wait for no transfer, need no ramp,
    and hide the next panels' transfers; and ranks that start at different k
    read from different owners at each moment (the skew of Cannon's
    algorithm) where the common order has every rank of a row read one root.
    Where the blocks do not meet, it starts at its own block of the operand
    with the larger panels (A's are ``m_loc`` long per k, B's ``n_loc``), so
    that its first transfer is the smaller one.

    Examples
    --------
    >>> from hpcmm.geometry.layout import Grid
    >>> [own_start(Layout(64, 64, 16384, Grid(2, 1)), r) for r in range(2)]   # 2 ranks: all their own
    [(0, True), (8192, True)]
    >>> [own_start(Layout(64, 96, 300, Grid(2, 2)), r) for r in range(4)]
    [(0, True), (0, False), (150, False), (150, True)]
    """
    row, col = layout.grid.coords(rank)
    (a_lo, a_hi), (b_lo, b_hi) = layout.a_k(col), layout.b_k(row)
    if max(a_lo, b_lo) < min(a_hi, b_hi):
        return max(a_lo, b_lo), True
    # (panel length per k, start) of each own block that holds any k; the larger panel first.
    own = [(layout.extent(layout.rows(row)), a_lo)] if a_hi > a_lo else []
    own += [(layout.extent(layout.cols(col)), b_lo)] if b_hi > b_lo else []
    return (max(own, key=lambda o: o[0])[1] if own else 0), False


def step_order(setting: str, nodes: int) -> str:
    """The order of a rank's SUMMA steps: ``own-first`` or ``common``.

    ``own-first`` (each rank starts k with its own blocks, :func:`own_start`) only where every
    panel is a one-sided pull, on one node; between nodes the broadcasts need every rank in the
    same order.  ``setting`` is ``step_order`` (``HPCMM_STEP_ORDER``): ``auto`` or ``common``.

    >>> step_order("auto", 1), step_order("auto", 2), step_order("common", 1)
    ('own-first', 'common', 'common')
    """
    return "own-first" if setting == "auto" and nodes == 1 else "common"


def rank_plan(layout: Layout, rank: int, panel: int, prefetch: int, own_order: bool) -> list[Step]:
    """The plan ``rank`` runs, as the engine takes it (and the cost model replays it).

    ``own_order``: the rank starts at :func:`own_start` (one node, every panel
    a pull); else the common order from k = 0.  The first panels ramp up
    (:func:`summa_plan`) where transfers exist and can overlap: with prefetch,
    several ranks, and a first step whose panels are not both the rank's own.
    """
    first_k, first_own = own_start(layout, rank) if own_order else (0, False)
    ramp = prefetch > 0 and layout.grid.size > 1 and not first_own
    return summa_plan(layout, panel, ramp=ramp, first_k=first_k)


def _ramp_widths(depth: int, panel: int) -> list[int]:
    """The widths of the ramped steps over the first ``depth`` columns of k (they add up to ``depth``).

    ``panel/8``, ``panel/4``, … below ``panel`` while they fit, then whole
    panels; the rest (narrower than a panel) takes its place among them by
    width, so that no step is more than twice as wide as the one before it,
    or joins the first step where it is narrower than that.

    Examples
    --------
    >>> _ramp_widths(8192, 8192)     # 2 ranks, 16384: no 1024 sliver before the next block's 8192
    [1024, 1024, 2048, 4096]
    >>> _ramp_widths(16384, 8192)
    [1024, 1024, 2048, 4096, 8192]
    >>> _ramp_widths(12288, 8192)
    [1024, 2048, 4096, 5120]
    >>> _ramp_widths(7200, 8192)     # the rest (32) is narrower than the first step: it joins it
    [1056, 2048, 4096]
    """
    ramp: list[int] = []
    width, total = max(1, panel // 8), 0
    while width < panel and total + width <= depth:
        ramp.append(width)
        total += width
        width *= 2
    whole = (depth - total) // panel
    rest = depth - total - whole * panel
    widths = ramp + [panel] * whole
    if rest and widths and rest < widths[0]:
        widths[0] += rest
    elif rest:
        widths = sorted(widths + [rest])
    return widths


#: Panels in flight ahead of the GEMM by default (``--prefetch``): one panel, two for TF32 on GPUs,
#: whose steps are short beside their transfers, so that with one panel ahead the next one arrives late
#: (docs/performance.md, "How to tune"; the rounds: benchmarks/results/2026-11-30/bench-balance-prefetch.json).
DEFAULT_PREFETCH = 1
TF32_PREFETCH = 2


def auto_prefetch(dtype: str, tf32: bool = False, on_gpu: bool = True) -> int:
    """The default of ``--prefetch``: :data:`TF32_PREFETCH` for TF32 on GPUs, else :data:`DEFAULT_PREFETCH`.

    Parameters
    ----------
    dtype : str
        The element type (the cost model's ``"tf32"`` counts as float32 with ``tf32=True``).
    tf32, on_gpu : bool
        TF32 tensor cores; whether the GEMMs run on GPUs (a CPU has no TF32: one panel ahead).

    Examples
    --------
    >>> auto_prefetch("float32", tf32=True), auto_prefetch("tf32"), auto_prefetch("float64")
    (2, 2, 1)
    >>> auto_prefetch("float32", tf32=True, on_gpu=False)
    1
    """
    if on_gpu and (tf32 or dtype == "tf32"):
        return TF32_PREFETCH
    return DEFAULT_PREFETCH


def prefetch_of(config, on_gpu: bool) -> int:
    """The run's panels in flight: ``config.prefetch`` where given, else :func:`auto_prefetch`.

    Examples
    --------
    >>> from hpcmm.config import RunConfig
    >>> prefetch_of(RunConfig(dtype="float32", tf32=True), on_gpu=True), prefetch_of(RunConfig(prefetch=0), True)
    (2, 0)
    """
    if config.prefetch is not None:
        return config.prefetch
    return auto_prefetch(config.dtype, config.tf32, on_gpu)


def auto_panel(layout: Layout, itemsize: int, on_gpu: bool, widest: int | None = None, shared: bool = False) -> int:
    """A panel width that keeps the GEMM efficient and leaves steps to overlap.

    On a GPU every step's GEMM reads and writes its C block once (``beta =
    1``): a wide panel makes that pass a small part of the step, and fewer
    steps cost fewer launches and synchronisations.  The rule, fitted to the
    panel sweeps of docs/performance.md (2 × H200, 2 ranks): aim at
    :data:`GPU_PANEL` columns in every type, so that blocks up to 8192 deep go
    in one step and deeper ones in equal pieces.  A step never crosses the
    edge of an A or a B block, so what is cut is the deepest k range between
    those edges (:func:`_spans`): a block one column deeper than the others
    then takes no step of one column.  The ramp's narrow first
    panels keep the first, exposed transfer small whatever the width.  On a
    CPU the BLAS saturates earlier (256 columns, 512 in 16-bit types).

    Where ranks share GPUs (``shared``: any GPU of the job holds several
    ranks) the target is :data:`SHARED_GPU_PANEL`: their GEMMs interleave on
    one device, and the narrower steps measured faster (docs/performance.md,
    "How to tune").  Blocks of
    different depth (a weighted layout) deeper than it take that target itself: no width
    splits them all evenly, and an even split of the smallest is an odd width
    that every step's GEMM runs at (5 ranks, float64 16384: 2048 ran 3–4 %
    faster than 1365).

    ``widest`` caps the target: the engine narrows the panel this way where
    the ring of panel buffers does not fit in memory at the default width
    (:func:`panel_candidates`).

    Examples
    --------
    >>> from hpcmm.geometry.layout import Grid, Layout
    >>> auto_panel(Layout(32768, 32768, 32768, Grid(2, 1)), 8, on_gpu=True)   # B's k blocks 16384: two steps each
    8192
    >>> auto_panel(Layout(16384, 16384, 16384, Grid(2, 1)), 4, on_gpu=True)   # blocks of 8192: one step each
    8192
    >>> auto_panel(Layout(16384, 16384, 16384, Grid(4, 2)), 8, on_gpu=True, shared=True)   # 8 ranks on 2 GPUs
    2048
    >>> auto_panel(Layout(16384, 16384, 16384, Grid(2, 1)), 8, on_gpu=True, widest=2048)
    2048
    """
    if layout.grid.size == 1:
        return layout.k  # nothing moves: one GEMM of full depth is fastest
    grid = layout.grid
    # The k blocks of A (by column) and B (by row): without weights near k // cols and k // rows.
    a_depths = [layout.extent(layout.a_k(c)) for c in range(grid.cols)]
    b_depths = [layout.extent(layout.b_k(r)) for r in range(grid.rows)]
    weighted = max(a_depths) - min(a_depths) > 1 or max(b_depths) - min(b_depths) > 1
    target = _panel_target(itemsize, on_gpu, narrow=weighted or shared)
    if widest is not None:
        target = max(1, min(target, widest))
    # A step never crosses the edge of an A or a B block (summa_plan), so the k ranges between those
    # edges are what the panel cuts.  The deepest of them sets the width: cut to the shallowest, as
    # this rule once was, the blocks one column deeper (k = 6007 on 4 x 2: 1502, 1502, 1502, 1501)
    # each ran a step of one column after a whole panel, a broadcast round of both operands for
    # almost no GEMM (the cost model prices the two of 10007 x 6001 x 6007 on 8 ranks, rpn 4, over the
    # staged path, at 3.5 ms of 34.9; their B broadcasts were measured at 0.2-0.45 ms by the median and
    # up to 4.4 ms, where a rank waited its time-sliced GPU's turn).
    deepest = max(1, max(_spans(layout), default=layout.k))
    if deepest <= target:
        return deepest
    if weighted:
        # Weighted blocks differ in depth, so no one width splits them all evenly; an even split of
        # the smallest is an odd width that every GEMM then runs at, slower than the target
        # (benchmarks/results/2026-11-30/shared-gpus.json).
        return target
    # Split the deepest range into equal pieces no wider than the target; ranges one column shallower
    # then end in a piece one column narrower, not in a sliver.
    pieces = -(-deepest // target)
    return -(-deepest // pieces)


def _spans(layout: Layout) -> list[int]:
    """The depths of the k ranges between consecutive edges of A's and B's k blocks (the empty ones left out).

    Examples
    --------
    >>> from hpcmm.geometry.layout import Grid
    >>> _spans(Layout(64, 64, 6007, Grid(4, 2)))   # A's blocks 3004 and 3003 deep, B's 1502 (three) and 1501
    [1502, 1502, 1502, 1501]
    >>> _spans(Layout(64, 64, 6000, Grid(3, 2)))   # A's edge at 3000 cuts B's middle block
    [2000, 1000, 1000, 2000]
    """
    grid = layout.grid
    edges = {edge for c in range(grid.cols) for edge in layout.a_k(c)}
    edges |= {edge for r in range(grid.rows) for edge in layout.b_k(r)}
    edges = sorted(edges)
    return [hi - lo for lo, hi in zip(edges, edges[1:]) if hi > lo]


#: The panel width a GPU aims at, in every type: the widest of the sweep won in every type (fewer
#: passes over C; ``tests/gpu/speed_check.sh panels``, docs/performance.md "How to tune").
GPU_PANEL = 8192

#: The GPU's width where ranks share GPUs, and for weighted layouts (blocks of different depth): the
#: measured 8- and 5-rank cases of :func:`auto_panel`.
SHARED_GPU_PANEL = 2048

#: The narrowest width the memory fallback tries (:func:`panel_candidates`) before the problem is refused.
NARROWEST_FALLBACK = 256


def _panel_target(itemsize: int, on_gpu: bool, narrow: bool) -> int:
    """The widest panel :func:`auto_panel` aims at, before it splits blocks evenly."""
    if not on_gpu:
        return 512 if itemsize <= 2 else 256
    return SHARED_GPU_PANEL if narrow else GPU_PANEL


def panel_candidates(layouts: Sequence[Layout], itemsize: int, on_gpu: bool, shared: bool = False) -> list[int]:
    """:func:`auto_panel`'s width first, then narrower ones, for a panel ring that does not fit in memory.

    One width serves every layout (the 2.5D layers' plans line up): the
    widest :func:`auto_panel` gives them, but never wider than the shallowest
    layout's k (a layer's engine refuses a panel wider than its k).  The
    narrowest would cut a layer whose ranges are one column deeper than
    another's into whole panels and one-column steps (layers of k 3002 and
    3003 on 2 × 2: ranges 1501 and 1502).  Each further candidate halves
    the cap of the one before (down to :data:`NARROWEST_FALLBACK`); the engine
    keeps the first that fits, so a problem that fits with narrow panels still
    runs, and the default is the fastest width where memory allows.

    Examples
    --------
    >>> from hpcmm.geometry.layout import Grid, Layout
    >>> panel_candidates([Layout(16384, 16384, 16384, Grid(2, 1))], 8, on_gpu=True)
    [8192, 4096, 2048, 1024, 512, 256]
    >>> panel_candidates([Layout(4096, 4096, 4096, Grid(2, 1))], 8, on_gpu=False)
    [256]
    """
    shallowest = min(layout.k for layout in layouts)

    def width(cap: int | None) -> int:
        widest = max(auto_panel(layout, itemsize, on_gpu, widest=cap, shared=shared) for layout in layouts)
        return max(1, min(widest, shallowest))

    widths = [width(None)]
    cap = widths[0]
    while cap > NARROWEST_FALLBACK:
        cap = max(NARROWEST_FALLBACK, cap // 2)
        narrower = width(cap)
        if narrower < widths[-1]:
            widths.append(narrower)
    return widths


def ring_depth(prefetch: int, spans_nodes: bool) -> int:
    """Panel buffers per operand: the one the GEMM reads plus ``prefetch`` in flight.

    A channel that spans nodes keeps at least two: its leader receives the
    next panel into one relay slot while its node peers may still copy the
    previous one out of the other (:mod:`hpcmm.execution.transport.channel`), even with
    ``prefetch = 0``.

    Examples
    --------
    >>> ring_depth(0, spans_nodes=False), ring_depth(0, spans_nodes=True), ring_depth(3, spans_nodes=True)
    (1, 2, 4)
    """
    ring = prefetch + 1
    return max(ring, 2) if spans_nodes else ring
