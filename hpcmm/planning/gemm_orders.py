"""The operand orders of the local GEMM, per element type: one table, one rule.

Panels travel as they are stored: A column-major (``F``), so that a panel
``A[:, k0:k1]`` is one contiguous piece of its owner's block, B row-major
(``C``).  The kernels cuBLAS picks for the same product differ with the
operands' memory order, by up to 40 %, and no single order is best for every
type.  So the GEMM may take a panel in the other order: the engine re-lays
it out on the communication stream once it has arrived (:mod:`hpcmm.execution.engine`),
and the table below says which types gain from that.

An order is written as two letters, A's then B's: ``FC`` is the stored order
(no re-layout), ``CF`` means A row-major and B column-major.  C is row-major
always.

The rule (:func:`choose`): per type, the order within 1 % of the fastest at
every measured size of the one-GPU rates (:data:`MEASURED`); where several
are, the one with fewest panels to re-lay out; where none is, the stored
order, which costs nothing.  A re-layout must also pay for itself: an order
other than the stored one is taken only where it beats the stored order by
:data:`MIN_GAIN` (15 %) at every measured size, because the transposing copy
runs beside the GEMM and competes with it for the SMs.  On 2 × H200 that
leaves tf32 alone re-laying out (A row-major, ``CC``); float64, float32,
float16 and bfloat16 keep the stored order; the complex types were not
measured.  Evidence: ``benchmarks/results/2026-11-30/gemm-operand-orders.json``
(the rates by order, the cost of a float16 re-layout, tf32 at 2 ranks) and
docs/performance.md, "How to tune".

On the CPU numpy takes any order at the same speed, so the stored order is
used unless ``HPCMM_GEMM_ORDER`` asks for another (which lets a CPU-only test
run the re-layout path).
"""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import InputError

__all__ = ["MEASURED", "ORDERS", "ORDER_BY_TYPE", "STORED", "choose", "gemm_order", "label", "parse_order",
           "relaid", "scratch_slots", "type_key", "MIN_GAIN"]

#: The orders the GEMM takes, A's then B's (C row-major, F column-major).
ORDERS = ("FC", "CC", "CF", "FF")
#: How panels are stored and travel: A column-major, B row-major.
STORED = "FC"
#: ``HPCMM_GEMM_ORDER``'s value for "the table decides".
AUTO = "auto"

#: TFLOP/s of one H200 per type, size and order (the module's docstring).
MEASURED: dict[str, dict[int, dict[str, float]]] = {
    "float64": {16384: {"CC": 55.69, "CF": 49.28, "FC": 58.54, "FF": 53.83},
                32768: {"CC": 51.01, "CF": 56.39, "FC": 55.32, "FF": 50.97}},
    "float32": {16384: {"CC": 53.91, "CF": 50.49, "FC": 54.30, "FF": 51.01},
                32768: {"CC": 52.86, "CF": 49.74, "FC": 54.35, "FF": 51.31}},
    "tf32": {16384: {"CC": 363.66, "CF": 345.72, "FC": 223.17, "FF": 344.85}},
    "float16": {16384: {"CC": 740.78, "CF": 750.35, "FC": 716.61, "FF": 747.60},
                32768: {"CC": 663.02, "CF": 655.38, "FC": 657.01, "FF": 656.42}},
    "bfloat16": {16384: {"CC": 783.26, "CF": 806.67, "FC": 723.03, "FF": 742.52},
                 32768: {"CC": 686.66, "CF": 691.01, "FC": 675.64, "FF": 692.01}},
}

#: The GEMM's operand orders on a GPU, per type (``tf32``: float32 on TF32 tensor cores).
ORDER_BY_TYPE: dict[str, str] = {
    "float64": "FC",
    "float32": "FC",
    "tf32": "CC",
    "float16": STORED,  # FF is within 1 %, but gains 5 % only: less than a re-layout costs
    "bfloat16": STORED,  # CF gains 12 % at 16384 and 2 % at 32768: less than a re-layout costs
    "complex128": STORED,  # not measured
    "complex64": STORED,  # not measured
}

#: How far behind the fastest an order may be at a measured size and still count as the fastest.
WITHIN = 0.01
#: How much faster than the stored order an order that re-lays out panels must be, at every measured size.
MIN_GAIN = 0.15


def relaid(order: str) -> tuple[bool, bool]:
    """Whether the A and the B panels must be re-laid out for ``order``.

    Examples
    --------
    >>> relaid("FC"), relaid("CF")
    ((False, False), (True, True))
    """
    return order[0] != STORED[0], order[1] != STORED[1]


def scratch_slots(order: str, ring: int) -> tuple[int, int]:
    """Re-layout scratch slots for A's and B's panels: the engine's ``ring`` where ``order`` re-lays out, else 0.

    What :func:`hpcmm.planning.choices.memory_needed` counts as ``relayout`` (the engine, the 2.5D layers and the
    cost model all ask here).

    Examples
    --------
    >>> scratch_slots("CC", 2), scratch_slots("FC", 2)
    ((2, 0), (0, 0))
    """
    return tuple(ring if r else 0 for r in relaid(order))


def choose(sizes: Mapping[int, Mapping[str, float]]) -> str:
    """The rule of the table: within :data:`WITHIN` of the fastest at every size, fewest re-layouts,
    and a re-layout only for a gain of :data:`MIN_GAIN` over the stored order at every size.

    Examples
    --------
    >>> choose({1: {"CC": 100.0, "CF": 99.5, "FC": 80.0, "FF": 99.0}})
    'CC'
    >>> choose({1: {"CC": 99.5, "CF": 100.0, "FC": 99.2, "FF": 90.0}})
    'FC'
    >>> choose({1: {"CC": 100.0, "CF": 99.5, "FC": 90.0, "FF": 99.0}})   # 11 %: not worth a re-layout
    'FC'
    """
    good = [order for order in ORDERS
            if all(rates[order] >= (1 - WITHIN) * max(rates.values()) for rates in sizes.values())
            and (order == STORED or all(rates[order] >= (1 + MIN_GAIN) * rates[STORED] for rates in sizes.values()))]
    if not good:
        return STORED
    return min(good, key=lambda order: (sum(relaid(order)),
                                        -min(rates[order] / max(rates.values()) for rates in sizes.values())))


def type_key(dtype: str, tf32: bool = False) -> str:
    """The table's name for a run's type: ``tf32`` for float32 on TF32 tensor cores, else ``dtype``."""
    return "tf32" if tf32 and dtype == "float32" else str(dtype)


def parse_order(name: str, text: object) -> str:
    """``auto`` or one of :data:`ORDERS` (any case), as given to ``name``.

    Raises
    ------
    InputError
        Naming ``name`` and the bad value.

    Examples
    --------
    >>> parse_order("HPCMM_GEMM_ORDER", " cf ")
    'CF'
    """
    value = str(text).strip()
    if value.lower() == AUTO:
        return AUTO
    if value.upper() in ORDERS:
        return value.upper()
    raise InputError(f"{name}={text!r}: expected auto or A's and B's order as two letters "
                     f"(C row-major, F column-major): {', '.join(ORDERS)}")


def gemm_order(dtype: str, tf32: bool = False, on_gpu: bool = True, override: str = AUTO) -> str:
    """The operand orders the GEMM of a run takes: ``override`` unless ``auto``, else the table (GPU) or as stored.

    Examples
    --------
    >>> gemm_order("float32", tf32=True), gemm_order("float32", tf32=True, on_gpu=False)
    ('CC', 'FC')
    >>> gemm_order("float64", override="FF")
    'FF'
    """
    if override != AUTO:
        return parse_order("gemm_order", override)
    return ORDER_BY_TYPE[type_key(dtype, tf32)] if on_gpu else STORED


def label(order: str) -> str:
    """``A:C B:F`` for ``CF``: how files and tables name the orders.

    Examples
    --------
    >>> label("FC")
    'A:F B:C'
    """
    return f"A:{order[0]} B:{order[1]}"
