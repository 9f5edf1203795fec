"""Distributed matrix-product algorithms, written as plans: plain data, no side effects."""

from .summa import (DEFAULT_PREFETCH, TF32_PREFETCH, Step, auto_panel, auto_prefetch, own_start, panel_candidates,
                    prefetch_of, rank_plan, ring_depth, step_order, summa_plan)

__all__ = ["DEFAULT_PREFETCH", "TF32_PREFETCH", "Step", "auto_panel", "auto_prefetch", "own_start", "panel_candidates",
           "prefetch_of", "rank_plan", "ring_depth", "step_order", "summa_plan"]
