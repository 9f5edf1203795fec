"""The figures of a run and the short summary rank 0 prints at the end.

:func:`summary_figures` is the one place where timings become rates: the
product's time is the median over the timed products of the window from the
first rank's start to the last rank's end (one clock, :mod:`hpcmm.execution.clock`);
flops are ``2mnk`` (``8mnk`` for complex types, a complex multiply-add being
four real ones).  Exposed communication and host overhead are per product
the largest sum over a rank's steps, then the median over the products.
"""

from __future__ import annotations

import collections
import dataclasses
import shutil
import sys

import numpy as np

from ..dtypes import product_flops

__all__ = ["Gathered", "busiest_device", "dynamic_figures", "format_rate", "gathered_figures", "print_summary",
           "share_imbalance_at_rates", "summary_figures", "summary_rows"]

#: An element error (fraction of its row's norm-wise scale) beyond which the summary warns.
DETECTABLE_GOAL = 0.01


#: Columns the summary takes where its output is not a terminal (a file, a pipe).
SUMMARY_WIDTH = 100


def format_rate(tflops: float, digits: int = 3) -> str:
    """A rate in the unit that shows its figure: TFLOP/s from 1 up, GFLOP/s below, MFLOP/s below 1 GFLOP/s.

    >>> format_rate(12.3456), format_rate(0.0042), format_rate(0.0000042), format_rate(float("nan"))
    ('12.346 TFLOP/s', '4.200 GFLOP/s', '4.200 MFLOP/s', '— FLOP/s')
    """
    if tflops != tflops:
        return "— FLOP/s"
    for scale, unit in ((1.0, "TFLOP/s"), (1e-3, "GFLOP/s")):
        if abs(tflops) >= scale:
            return f"{tflops / scale:.{digits}f} {unit}"
    return f"{tflops / 1e-6:.{digits}f} MFLOP/s"


def rate_unit(tflops) -> tuple[float, str]:
    """One unit for a column of rates (TFLOP/s): the one :func:`format_rate` takes for the largest;
    returns the factor a TFLOP/s figure is multiplied by, and the unit."""
    finite = [abs(t) for t in tflops if t == t]
    top = max(finite, default=1.0)
    return (1.0, "TFLOP/s") if top >= 1 or not finite else (1e3, "GFLOP/s") if top >= 1e-3 else (1e6, "MFLOP/s")


@dataclasses.dataclass
class Gathered:
    """Every rank's timings side by side (rank 0, after the products): what the summary and the file take."""

    topology: list[dict]
    iteration_seconds: np.ndarray  # ranks × iters: each rank's own start to end
    step_seconds: np.ndarray  # ranks × iters × steps × 3
    host_seconds: np.ndarray  # ranks × iters × steps
    product_seconds: np.ndarray  # iters: first rank's start to last rank's end
    product_start_seconds: np.ndarray  # iters: first rank's start, on rank 0's perf_counter
    start_seconds: np.ndarray  # ranks × iters: each rank's start after the product's first
    transfers: list[dict]  # src, dst, path, bytes
    paths: set[str]  # the transport paths that moved bytes
    gpus: int  # distinct GPUs of the run


def gathered_figures(reports, windows, transport_paths) -> Gathered:
    """Join the ranks' reports (``hpcmm.cli.run.RankReport``, in rank order) into :class:`Gathered`.

    Parameters
    ----------
    reports : list
        One per rank: ``topology`` (row), ``iteration_seconds``, ``step_seconds``,
        ``host_seconds``, ``starts`` (shared clock) and ``transfers``.
    windows : list of (float, float)
        Each timed product's first start and last end (shared clock).
    transport_paths : collection of str
        The path names that count as transports (``ipc``, ``shm``, ``mpi``, ``staged``).
    """
    topology = [r.topology for r in reports]
    firsts = np.array([first for first, _ in windows])
    transfers = [dict(src=s, dst=d, path=p, bytes=b) for r in reports for (s, d, p, b) in r.transfers]
    gpus = {(row["host"], row["gpu_uuid"] or row["gpu_index"]) for row in topology if row["gpu_index"] >= 0}
    return Gathered(
        topology=topology,
        iteration_seconds=np.stack([r.iteration_seconds for r in reports]),
        step_seconds=np.stack([r.step_seconds for r in reports]),
        host_seconds=np.stack([r.host_seconds for r in reports]),
        product_seconds=np.array([last - first for first, last in windows]),
        product_start_seconds=firsts.astype(np.float64),
        start_seconds=np.stack([r.starts for r in reports]) - firsts,
        transfers=transfers,
        paths={t["path"] for t in transfers if t["path"] in transport_paths},
        gpus=len(gpus),
    )


def summary_figures(*, m, n, k, dtype, ranks, gpus, product_seconds, step_seconds, host_seconds, check,
                    paths, workers=None) -> dict:
    """Figures for the terminal and ``/summary``.

    Parameters
    ----------
    product_seconds : array (iters,)
        Each timed product, first rank's start to last rank's end.
    step_seconds : array (ranks, iters, steps, 3)
        ``gemm``, ``comm``, ``wait`` (for data) per step.
    host_seconds : array (ranks, iters, steps)
        The rest of each gap before a GEMM (panels there, GEMM not yet launched).
    check : Check or None
    workers : sequence of int, optional
        The ranks that compute (``--balance dynamic`` leaves the tiles of a time-sliced GPU to one
        rank); the load imbalance compares these only, so a rank given no work does not read as idle.
    """
    product_seconds = np.asarray(product_seconds, dtype=np.float64)
    step_seconds = np.asarray(step_seconds, dtype=np.float64)
    host_seconds = np.asarray(host_seconds, dtype=np.float64)
    median = float(np.median(product_seconds))
    flops = product_flops(m, n, k, dtype)
    busy = step_seconds[..., 0].sum(axis=2)  # ranks × iters: GEMM seconds
    busy_med = np.median(busy, axis=1)[list(workers) if workers else slice(None)]
    imbalance = float(busy_med.max() / busy_med.mean() - 1.0) if busy_med.mean() > 0 else 0.0
    exposed = float(np.median(step_seconds[..., 2].sum(axis=2).max(axis=0)))
    host = float(np.median(host_seconds.sum(axis=2).max(axis=0))) if host_seconds.size else 0.0
    rate = flops / median / 1e12 if median > 0 else 0.0
    return {
        "seconds": median,
        "seconds_min": float(product_seconds.min()),
        "seconds_max": float(product_seconds.max()),
        "flops": flops,
        "tflops": rate,
        "tflops_per_rank": rate / ranks,
        "tflops_per_gpu": rate / gpus if gpus else 0.0,
        "gpus": gpus,
        "load_imbalance": imbalance,
        "gemm_seconds_max": float(busy_med.max()),
        "exposed_comm_seconds": exposed,
        "exposed_comm_fraction": exposed / median if median > 0 else 0.0,
        "host_overhead_seconds": host,
        "host_overhead_fraction": host / median if median > 0 else 0.0,
        "residual": check.residual if check else float("nan"),
        "tolerance": check.tolerance if check else float("nan"),
        "verified": bool(check.passed) if check else False,
        "verify": check.method if check else "none",
        "verify_detectable": check.detectable if check else float("nan"),
        "paths": sorted(paths),
        "ranks": ranks,
    }


def busiest_device(topology: list[dict], memory: list[dict]) -> dict:
    """The memory of the device (or host) whose ranks need the largest share of its free bytes.

    ``topology`` and ``memory`` are the ranks' rows of ``/topology`` and ``/memory``, in rank order;
    ranks of one GPU (or, on CPUs, of one host) add up.  Returns the ``/summary`` fields
    ``memory_ranks``, ``memory_operand_bytes``, ``memory_buffer_bytes``, ``memory_free_bytes`` (when
    the plan was made) and ``memory_peak_bytes`` of that device, or nothing for files without them.

    >>> rows = [{"host": "a", "gpu_index": 0, "gpu_uuid": ""}] * 2
    >>> mem = [{"needed_bytes": 6, "operand_bytes": 4, "free_bytes": 20, "peak_bytes": 7}] * 2
    >>> busiest_device(rows, mem)["memory_buffer_bytes"]
    4
    """
    if not memory or "operand_bytes" not in memory[0]:
        return {}
    from ..io.metadata import device_of  # noqa: PLC0415 - one rule for which ranks share a device

    devices: dict = {}
    for place, mem in zip(topology, memory):
        devices.setdefault(device_of(place)[0], []).append(mem)

    def share(rows):
        return sum(r["needed_bytes"] for r in rows) / max(min(r["free_bytes"] for r in rows), 1)
    rows = max(devices.values(), key=share)
    return {"memory_ranks": len(rows),
            "memory_operand_bytes": sum(r["operand_bytes"] for r in rows),
            "memory_buffer_bytes": sum(r["needed_bytes"] - r["operand_bytes"] for r in rows),
            "memory_free_bytes": min(r["free_bytes"] for r in rows),
            "memory_peak_bytes": sum(r["peak_bytes"] for r in rows)}


def dynamic_figures(tiles: list[dict], workers, node_of=None, owner_cols=None) -> dict:
    """``--balance dynamic``: the share of tiles a rank computed for another, and the most one rank computed.

    ``tiles``: the rows of ``/timings/tiles`` (``product``, ``rank``, ``owner`` ...); ``workers``:
    the ranks that compute tiles; ``node_of``: each rank's (virtual) node, where there are several;
    ``owner_cols``: each rank's C block columns, for ``dynamic_share_imbalance``
    (:func:`share_imbalance_at_rates`).
    Medians over the timed products: ``dynamic_taken_fraction`` (tiles computed by a rank other than
    their owner, over all tiles), ``dynamic_tiles_most`` and ``dynamic_tiles_least`` (per worker),
    ``dynamic_workers`` (how many ranks compute tiles), ``dynamic_joined_products``: the products in
    which ranks that are not workers computed tiles too (they time-slice a GPU with its worker, and
    joined it while it ran slow); with ``node_of``, ``dynamic_node_handoffs``: the median of the tiles
    computed on another node than their owner's, and ``dynamic_handoff_products``: the products with any.

    >>> rows = [dict(product=0, rank=0, owner=0), dict(product=0, rank=0, owner=1), dict(product=0, rank=1, owner=1)]
    >>> dynamic_figures(rows, (0, 1))["dynamic_taken_fraction"]
    0.3333333333333333
    >>> figures = dynamic_figures(rows, (0, 1), node_of=(0, 1))
    >>> figures["dynamic_node_handoffs"], figures["dynamic_handoff_products"]
    (1, 1)
    """
    by_product = collections.defaultdict(list)
    for row in tiles:
        by_product[row["product"]].append(row)
    if not by_product:
        return {}
    per_product = [by_product[product] for product in sorted(by_product)]
    taken, most, least, joined = [], [], [], 0
    for mine in per_product:
        joined += any(row["rank"] not in workers for row in mine)
        taken.append(sum(row["rank"] != row["owner"] for row in mine) / len(mine))
        counts = collections.Counter(row["rank"] for row in mine)
        most.append(max(counts.values()))
        least.append(min(counts.get(rank, 0) for rank in workers))
    figures = {"dynamic_taken_fraction": float(np.median(taken)), "dynamic_tiles_most": int(np.median(most)),
               "dynamic_tiles_least": int(np.median(least)), "dynamic_workers": len(workers),
               "dynamic_joined_products": joined}
    if node_of is not None and len(set(node_of)) > 1:
        moved = [sum(node_of[row["rank"]] != node_of[row["owner"]] for row in mine) for mine in per_product]
        figures.update(dynamic_node_handoffs=int(np.median(moved)), dynamic_handoff_products=sum(m > 0 for m in moved))
    if owner_cols is not None:
        static = [share_imbalance_at_rates(mine, owner_cols) for mine in per_product]
        if all(value == value for value in static):  # NaN where not every owner computed tiles
            figures["dynamic_share_imbalance"] = float(np.median(static))
    return figures


def share_imbalance_at_rates(tiles: list[dict], owner_cols) -> float:
    """The load imbalance the share blocks would have had at the rates the ranks ran: what ``dynamic`` saved.

    Each rank's rate is the C area of the tiles it computed (rows × their owner's block columns) over
    their GEMM seconds; its time under the static share, its own block's area over that rate; the
    imbalance, as ``load_imbalance``: the longest time over the mean, less one.  NaN where a rank that
    owns tiles computed none (a time-sliced GPU's lone worker): its rate is not known.

    >>> tiles = [dict(rank=0, owner=0, row0=0, row1=10, seconds=2.0), dict(rank=1, owner=0, row0=10, row1=20,
    ...          seconds=1.0), dict(rank=1, owner=1, row0=0, row1=20, seconds=2.0)]
    >>> share_imbalance_at_rates(tiles, owner_cols=(5, 5))  # rank 0 alone would take 4 s, rank 1 2 s
    0.33333333333333326
    """
    area, seconds, own = collections.Counter(), collections.Counter(), collections.Counter()
    for row in tiles:
        rows = row["row1"] - row["row0"]
        area[row["rank"]] += rows * owner_cols[row["owner"]]
        seconds[row["rank"]] += row["seconds"]
        own[row["owner"]] += rows * owner_cols[row["owner"]]
    if any(area[owner] <= 0 or seconds[owner] <= 0 for owner in own):
        return float("nan")
    times = np.array([own[owner] * seconds[owner] / area[owner] for owner in own])
    return float(times.max() / times.mean() - 1.0)


def _memory(s: dict) -> str:
    """``operands 54.0 + buffers 0.5 of 139.1 GiB free; peak 55.2``: the busiest device, in GiB."""
    gib = 2.0**30
    return (f"operands {s['memory_operand_bytes'] / gib:.1f} + buffers {s['memory_buffer_bytes'] / gib:.1f} of "
            f"{s['memory_free_bytes'] / gib:.1f} GiB free; peak {s['memory_peak_bytes'] / gib:.1f}")


def _verification(s: dict) -> str:
    verdict = "PASSED" if s.get("verified") else ("skipped" if s.get("verify") == "none" else "FAILED")
    text = f"{s['verify']}: {verdict}, residual {s['residual']:.2e} (tolerance {s['tolerance']:.2e})"
    detectable = s.get("verify_detectable", float("nan"))
    if s.get("verify") != "none" and detectable == detectable:
        if detectable > DETECTABLE_GOAL:
            text += (f"; an element off by less than {100 * detectable:.3g} % of its row's scale would "
                     f"not show{' (--verify full is stronger)' if s['verify'] != 'full' else ''}")
        else:
            text += f"; an element off by more than {100 * detectable:.2g} % of its row's scale fails"
    return text


def _imbalance(s: dict) -> str:
    """Measured GEMM imbalance, with the balance mode and what its layout predicted (where recorded), and with
    ``dynamic`` what the share blocks would have had at the rates the ranks ran."""
    measured = f"{100 * s['load_imbalance']:.1f} %"
    if "balance" not in s:  # a file written before --balance
        return measured
    asked = s.get("balance_asked", s["balance"])
    mode = s["balance"] if asked == s["balance"] else f"{s['balance']}, the planner's for {asked}"
    text = f"{measured} measured, {100 * s['predicted_imbalance']:.1f} % predicted (balance {mode})"
    if "dynamic_share_imbalance" in s:  # what the share blocks would have cost at the rates that ran
        text += f"; the share blocks at these ranks' rates: {100 * s['dynamic_share_imbalance']:.1f} %"
    return text


def _workers(s: dict) -> str:
    """``; 1 of 8 ranks computed (the others share its GPU by time slices)`` where not every rank computed."""
    workers, ranks = s.get("dynamic_workers", s["ranks"]), s["ranks"]
    if workers == ranks:
        return ""
    joined = s.get("dynamic_joined_products", 0)
    also = f"; all computed in {joined} product(s), while the GPU ran slow" if joined else ""
    return f"; {workers} of {ranks} ranks computed (the others time-slice a GPU with one of them{also})"


def _mps(s: dict) -> str:
    ranks = int(s["ranks_per_gpu"])
    if ranks == 0:
        return "- (no GPU)"
    return f"{'yes' if s['mps'] else 'no'}, {ranks} rank(s) per GPU at most"


def _algorithm(s: dict) -> str:
    asked = s.get("algo_asked", s["algo"])
    return s["algo"] if asked == s["algo"] else f"{s['algo']} ({asked}: the cost model's choice)"


def summary_rows(summary: dict) -> list[tuple[str, str]]:
    s = summary
    rows = [
        ("ranks / GPUs", f"{s['ranks']} / {s.get('gpus', 0)}"),
        ("seconds (median, min, max)", f"{s['seconds']:.4f}  {s['seconds_min']:.4f}  {s['seconds_max']:.4f}"),
        ("rate", format_rate(s["tflops"])),
        ("rate per rank", format_rate(s["tflops_per_rank"])),
        ("load imbalance", _imbalance(s)),
        ("exposed communication", f"{100 * s['exposed_comm_fraction']:.1f} % ({s['exposed_comm_seconds']:.4f} s)"),
    ]
    if "ranks_per_gpu" in s:
        rows.insert(1, ("MPS", _mps(s)))
    if "algo" in s:
        rows.insert(0, ("algorithm", _algorithm(s)))
    if "host_overhead_seconds" in s:
        rows.append(("host overhead", f"{100 * s['host_overhead_fraction']:.1f} % "
                                      f"({s['host_overhead_seconds']:.4f} s)"))
    rows.append(("panel / prefetch", f"{s.get('panel')} / {s.get('prefetch')}"))
    if "gemm_order" in s:  # files written before the GEMM's operand order was recorded have none
        rows.append(("GEMM operand order", s["gemm_order"]))
    if s.get("gemm_library_used", "numpy") != "numpy":  # what ran the GEMMs: only GPUs have a choice
        rows.append(("GEMM library", s["gemm_library_used"]))
    if "dynamic_taken_fraction" in s:
        rows.append(("tiles taken (dynamic)", f"{100 * s['dynamic_taken_fraction']:.1f} % of the tiles computed by a "
                                              f"rank not their owner; {s['dynamic_tiles_least']}–"
                                              f"{s['dynamic_tiles_most']} per rank"
                                              f"{_workers(s)}"))
    if "dynamic_node_handoffs" in s:
        rows.append(("tiles between nodes", f"{s['dynamic_node_handoffs']} a product (median); "
                                            f"{s['dynamic_handoff_products']} timed product(s) moved any"))
    if "memory_operand_bytes" in s:
        rows.append((f"memory ({s['memory_ranks']} rank(s)/device)", _memory(s)))
    rows += [
        ("paths", ", ".join(s["paths"]) or "(none: one rank)"),
        ("verification", _verification(s)),
    ]
    return rows


def _columns(file) -> int:
    """The terminal's width where ``file`` is a terminal, else :data:`SUMMARY_WIDTH`."""
    try:
        tty = file.isatty()
    except (AttributeError, ValueError, OSError):
        tty = False
    return max(40, shutil.get_terminal_size((SUMMARY_WIDTH, 24)).columns) if tty else SUMMARY_WIDTH


def print_summary(summary: dict, path: str | None, file=None, width: int | None = None) -> None:
    """A two-column table as wide as the terminal (``width``; 100 columns where the output is no
    terminal), long values wrapped inside their column; with rich where it is installed.  The
    results file's name follows on a line of its own, whole, to be copied."""
    file = file or sys.stdout
    width = width or _columns(file)
    rows = summary_rows(summary)
    keys = max(len(k) for k, _ in rows)
    try:
        from rich.console import Console  # noqa: PLC0415
        from rich.table import Table  # noqa: PLC0415
    except ImportError:
        import textwrap  # noqa: PLC0415

        for key, value in rows:
            lines = textwrap.wrap(value, max(20, width - keys - 2)) or [""]
            file.write(f"{key:<{keys}}  {lines[0]}\n")
            file.writelines(f"{'':<{keys}}  {line}\n" for line in lines[1:])
    else:
        table = Table(title="hpcmm", show_header=False)
        table.add_column(style="bold", no_wrap=True)
        table.add_column(overflow="fold")
        for key, value in rows:
            table.add_row(key, value)
        # As wide as the longest row (borders and padding: 7 characters), at most the terminal.
        needed = keys + max(len(v) for _, v in rows) + 7
        Console(file=file, width=max(40, min(needed, width))).print(table)
    if path:
        file.write(f"results: {path}\n")
    file.flush()
