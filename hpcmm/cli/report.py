"""``python -m hpcmm report FILE [--plot timeline.png]``: read a results file back.

Prints the summary of a run file (and the tables of benchmark files); with
``--plot`` draws the timeline of one timed iteration as a Gantt chart, one
lane per rank and stream (compute: GEMMs; comm: A and B panel transfers),
so that overlap, or its absence, is visible.
"""

from __future__ import annotations

import io
import os
import stat
import sys

import numpy as np

from ..config import regular_file
from ..errors import InputError
from .summary import print_summary

__all__ = ["report_main", "plot_timeline"]


def _decode(v):
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, np.ndarray) and v.dtype.kind in "OS":
        return [x.decode() if isinstance(x, bytes) else x for x in v]
    return v


def _need_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401, PLC0415
    except ImportError:
        raise InputError("report --plot needs matplotlib: pip install 'hpcmm[plot]'") from None


#: The most rows of a table, and events of a timeline, that ``report`` reads: a sparse dataset
#: of any size takes a few bytes on disk, and reading it whole would take all memory.
MOST_ROWS = 2**20
MOST_EVENTS = 2**24

#: What ``--plot`` may write (matplotlib picks the format by the suffix).
PLOT_SUFFIXES = (".png", ".pdf", ".svg", ".svgz", ".eps", ".ps", ".jpg", ".jpeg", ".tif", ".tiff", ".webp")


def _check_plot_path(path: str, source: str) -> None:
    """``--plot``: a new file or an existing picture, never ``source`` nor an HDF5 file, in a folder that
    takes files; checked before the results file is read."""
    who = f"--plot={path}"
    if not path.lower().endswith(PLOT_SUFFIXES):
        raise InputError(f"{who}: expected a picture file ({', '.join(PLOT_SUFFIXES)})")
    directory = os.path.dirname(os.path.abspath(path))
    if os.path.islink(path) and not os.path.exists(path):
        raise InputError(f"{who}: a symbolic link to {os.readlink(path)}, which does not exist")
    if not os.path.isdir(directory):
        raise InputError(f"{who}: directory {directory} does not exist")
    if os.path.lexists(path):
        if os.path.isdir(path):
            raise InputError(f"{who}: is a directory")
        if os.path.exists(source) and os.path.samefile(path, source):
            raise InputError(f"{who} is the file being reported: hpcmm never replaces its inputs")
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise InputError(f"{who}: not a regular file")
        import h5py  # noqa: PLC0415

        if h5py.is_hdf5(path):
            raise InputError(f"{who}: an HDF5 file (results?): --plot replaces pictures only")
    from ..io.h5io import probe_directory  # noqa: PLC0415

    try:
        probe_directory(path)
    except OSError as exc:
        raise InputError(f"{who}: directory {directory} is not writable ({exc.strerror})") from None


def report_main(ns) -> int:
    """``report FILE``: print what the file holds; exit status 0, or :class:`InputError` (2).

    Any file may be given: a truncated, corrupt or foreign one, or one whose
    attributes have values of an unexpected type, is bad input (one line
    naming the file and what is wrong), never a traceback; a FIFO or device is
    refused before it is opened (HDF5 would wait on it for ever, with the
    interpreter's lock held).
    """
    import h5py  # noqa: PLC0415

    if ns.plot:
        _need_matplotlib()  # before the file is read: the fix is an install, not another file
        _check_plot_path(ns.plot, ns.file)
    regular_file(ns.file, f"report {ns.file}")
    try:
        if not h5py.is_hdf5(ns.file):
            raise InputError(f"report {ns.file}: not an HDF5 file")
        out = io.StringIO()  # printed once the whole file was read: no half report before an error
        with h5py.File(ns.file, "r") as f:
            status = _report(f, ns, out)
        sys.stdout.write(out.getvalue())
        sys.stdout.flush()
        return status
    except InputError:
        raise
    except (OSError, LookupError, ValueError, TypeError, AttributeError, ArithmeticError, RuntimeError) as exc:
        # h5py reports damage (truncation, bad checksums, missing filters) as these; attributes of
        # another type than hpcmm writes (an array where a text is, inf where an integer is) too.
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise InputError(f"report {ns.file}: cannot read it as an hpcmm file ({type(exc).__name__}: "
                         f"{reason[:200]})") from exc


def _cell(value) -> str:
    """One figure as the tables print it: four significant digits, ``—`` for one that does not exist."""
    value = _decode(value)
    if isinstance(value, (float, np.floating)):
        # NaN is a figure that does not exist (no efficiency on CPUs, a peer that did not run).
        return "—" if value != value else f"{value:.4g}"
    return str(value)


#: Widest cell of a table; a longer text is shortened there and given whole below the table.
CELL_WIDTH = 30


def format_table(name: str, rows: np.ndarray) -> str:
    """A table of a bench or transport file, one line per field and one column per row.

    The files hold dozens of fields per case: printed across, a row would not fit a
    terminal; printed down, the cases line up side by side.  Long texts (the peers'
    notes) are cut in the table and printed whole after it.
    """
    fields = rows.dtype.names
    cells = [[_cell(r[c]) for r in rows] for c in fields]
    notes = []
    for field, values in zip(fields, cells):
        for i, text in enumerate(values):
            if len(text) > CELL_WIDTH:
                notes.append(f"  {field} [{i}]: {text}")
                values[i] = text[: CELL_WIDTH - 1] + "…"
    label = max(len(c) for c in fields)
    widths = [max(len(col[i]) for col in cells) for i in range(len(rows))]
    lines = [f"/{name} ({len(rows)} row{'s' if len(rows) != 1 else ''}, [0] … [{len(rows) - 1}] left to right)"]
    for field, values in zip(fields, cells):
        lines.append("  ".join([f"{field:<{label}}", *(f"{v:<{w}}" for v, w in zip(values, widths))]).rstrip())
    return "\n".join(lines + notes)


def _report(f, ns, out) -> int:
    kind = _decode(f.attrs.get("kind", "run"))
    if kind != "run" and "summary" not in f:
        tables = [name for name in ("bench", "transport") if name in f]
        if not tables:
            raise InputError(f"report {ns.file}: a '{kind}' file without a bench or transport table")
        if ns.plot:
            raise InputError(f"report {ns.file} --plot: a '{kind}' file has no timeline (only run files do)")
        for name in tables:
            table = f[name]
            if not hasattr(table, "dtype") or table.dtype.names is None or table.ndim != 1:
                raise InputError(f"report {ns.file}: /{name} is not a table")
            if table.size > MOST_ROWS:
                raise InputError(f"report {ns.file}: /{name} has {table.size} rows, more than {MOST_ROWS}")
            rows = table[:]
            print(format_table(name, rows), file=out)
        return 0
    if "summary" not in f or "config" not in f:
        raise InputError(f"report {ns.file}: no /summary and /config (not an hpcmm results file)")
    summary = {k: _decode(v) for k, v in f["summary"].attrs.items()}
    cfg = {k: _decode(v) for k, v in f["config"].attrs.items()}
    print(f"{ns.file}: m={cfg.get('m')} n={cfg.get('n')} k={cfg.get('k')} {cfg.get('dtype')} "
          f"grid {cfg.get('grid')} backend {cfg.get('backend')} ({f.attrs.get('ranks')} ranks)", file=out)
    print_summary(summary, None, file=out)
    if ns.plot:
        if "timeline" not in f or "events" not in f["timeline"]:
            raise InputError(f"report {ns.file}: no /timeline (the run used --no-timeline)")
        events = f["timeline/events"]
        if not hasattr(events, "shape") or events.ndim != 2 or events.shape[1] != 7 or events.dtype.kind not in "iuf":
            raise InputError(f"report {ns.file}: /timeline/events has shape {getattr(events, 'shape', None)}, "
                             "expected (N, 7) numbers")
        if events.shape[0] > MOST_EVENTS:
            raise InputError(f"report {ns.file}: /timeline/events has {events.shape[0]} events, more than "
                             f"{MOST_EVENTS} (a run's timeline holds ranks x iterations x steps x 3)")
        events = events[()].astype(np.float64)
        if not np.isfinite(events).all():
            raise InputError(f"report {ns.file}: /timeline/events holds NaN or Inf")
        plot_timeline(events, ns.plot, iteration=ns.iteration,
                      title=f"{cfg.get('m')}x{cfg.get('n')}x{cfg.get('k')} {cfg.get('dtype')}, "
                            f"grid {cfg.get('grid')}, {cfg.get('backend')}, paths "
                            f"{', '.join(summary.get('paths', [])) or '-'}")
        print(f"timeline: {ns.plot}", file=out)
    return 0


def plot_timeline(events: np.ndarray, path: str, iteration: int | None = None, title: str = "") -> None:
    """Gantt chart of one iteration: rows (rank, stream), bars per GEMM and transfer.

    ``events`` columns: rank, iteration, stream (0 compute, 1 comm), kind
    (0 GEMM, 1 A panel, 2 B panel), step, start, end (seconds from the
    iteration's start on that rank).
    """
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415
    from matplotlib.patches import Patch  # noqa: PLC0415

    if events.size == 0:
        raise InputError("no timeline events to plot")
    iterations = np.unique(events[:, 1]).astype(int)
    it = int(iterations[-1] if iteration is None else iteration)
    if it not in iterations:
        held = [int(i) for i in iterations]  # plain integers: no numpy reprs in the message
        shown = f"{held[0]} to {held[-1]}" if held == list(range(held[0], held[-1] + 1)) else ", ".join(map(str, held))
        raise InputError(f"--iteration={it}: the file holds iterations {shown}")
    ev = events[events[:, 1] == it]
    ranks = np.unique(ev[:, 0]).astype(int)
    colors = {0: "#1f77b4", 1: "#ff7f0e", 2: "#2ca02c"}
    fig, ax = plt.subplots(figsize=(12, 1.0 + 0.55 * 2 * len(ranks)))
    labels, y = [], 0
    for r in ranks:
        for stream, name in ((0, "compute"), (1, "comm")):
            sel = ev[(ev[:, 0] == r) & (ev[:, 2] == stream)]
            bars = [(s * 1e3, max((e - s) * 1e3, 1e-4)) for s, e in sel[:, 5:7]]
            ax.broken_barh(bars, (y - 0.4, 0.8), facecolors=[colors[int(k)] for k in sel[:, 3]],
                           edgecolor="white", linewidth=0.3)
            labels.append(f"rank {r} {name}")
            y += 1
    ax.set_yticks(range(len(labels)), labels)
    ax.invert_yaxis()
    ax.set_xlabel("milliseconds from the start of the iteration")
    ax.set_title(title or f"iteration {it}")
    ax.legend(handles=[Patch(color=colors[0], label="GEMM"), Patch(color=colors[1], label="A panel"),
                       Patch(color=colors[2], label="B panel")], loc="upper right", fontsize=8)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    from ..io.h5io import release_guard, remove_temporary, temporary_path  # noqa: PLC0415

    # Whole or not at all: a hidden name beside it, then a rename.  A signal removes the hidden
    # file; the guard removes it should the process be killed while matplotlib writes.
    tmp = temporary_path(path, guarded=True)
    try:
        fig.savefig(tmp, dpi=120, format=os.path.splitext(path)[1].lstrip(".").lower() or "png")
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        remove_temporary(tmp)
        release_guard(tmp)
