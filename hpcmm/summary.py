"""The short summary rank 0 prints at the end of a run."""

from __future__ import annotations

import sys

__all__ = ["print_summary", "summary_rows"]


def summary_rows(summary: dict) -> list[tuple[str, str]]:
    s = summary
    verdict = "PASSED" if s.get("verified") else ("skipped" if s.get("verify") == "none" else "FAILED")
    return [
        ("ranks / GPUs", f"{s['ranks']} / {s.get('gpus', 0)}"),
        ("seconds (median, min, max)", f"{s['seconds']:.4f}  {s['seconds_min']:.4f}  {s['seconds_max']:.4f}"),
        ("TFLOP/s total", f"{s['tflops']:.3f}"),
        ("TFLOP/s per rank", f"{s['tflops_per_rank']:.3f}"),
        ("load imbalance", f"{100 * s['load_imbalance']:.1f} %"),
        ("exposed communication", f"{100 * s['exposed_comm_fraction']:.1f} % ({s['exposed_comm_seconds']:.4f} s)"),
        ("panel / prefetch", f"{s.get('panel')} / {s.get('prefetch')}"),
        ("paths", ", ".join(s["paths"]) or "(none: one rank)"),
        ("verification", f"{s['verify']}: {verdict}, residual {s['residual']:.2e} (tolerance {s['tolerance']:.2e})"),
    ]


def print_summary(summary: dict, path: str | None, file=None) -> None:
    """A two-column table; with rich where it is installed."""
    file = file or sys.stdout
    rows = summary_rows(summary)
    if path:
        rows.append(("results", path))
    try:
        from rich.console import Console  # noqa: PLC0415
        from rich.table import Table  # noqa: PLC0415
    except ImportError:
        width = max(len(k) for k, _ in rows)
        for key, value in rows:
            file.write(f"{key:<{width}}  {value}\n")
        file.flush()
        return
    table = Table(title="hpcmm", show_header=False)
    table.add_column(style="bold")
    table.add_column()
    for key, value in rows:
        table.add_row(key, value)
    Console(file=file, width=110).print(table)
