"""Distributed matrix-product algorithms, written as plans: plain data, no side effects."""

from .summa import Step, auto_panel, own_start, panel_candidates, rank_plan, ring_depth, summa_plan

__all__ = ["Step", "auto_panel", "own_start", "panel_candidates", "rank_plan", "ring_depth", "summa_plan"]
