"""What ``python -m hpcmm report`` promises, read from what it prints, refuses and draws.

Written against the mutants that mutation testing of hpcmm/cli/report.py left alive (docs/mutation.md):
most of the command's refusals were pinned only by tests that start hpcmm as a child process
(tests/test_reliability_inputs.py), which mutmut cannot attribute.  Here, in pytest's own process:
the header line of a run file and its transport paths however a file stores them; every refusal of
``--plot``'s path and of a file that is not a results file, word for word; no half report before an
error; the bounds on a table's rows and a timeline's events; a table's header, cut cells and
alignment; and the picture itself: its size in pixels, its format, title, axis label, legend, grid,
bar edges, and the guard process that removes a half-written picture.
"""

from __future__ import annotations

import argparse
import os
import shutil
import struct
import sys

import h5py
import numpy as np
import pytest
from mpi4py import MPI

import hpcmm
from hpcmm.cli import report
from hpcmm.config import RunConfig
from hpcmm.errors import InputError

#: rank, iteration, stream (0 compute, 1 comm), kind (0 GEMM, 1 A, 2 B), step, start, end (seconds).
#: Iteration 2, the last one, has two ranks; rank 0's long GEMM fills the chart's upper right corner.
EVENTS = np.array([
    [0, 0, 0, 0, 0, 0.000, 0.001],
    [0, 0, 1, 1, 0, 0.000, 0.0005],
    [0, 1, 0, 0, 0, 0.002, 0.004],
    [0, 2, 0, 0, 0, 0.001, 0.003],
    [0, 2, 0, 0, 1, 0.003, 0.006],
    [0, 2, 1, 2, 0, 0.000, 0.001],
    [1, 2, 0, 0, 0, 0.0015, 0.0035],
    [1, 2, 1, 1, 0, 0.0005, 0.0015],
], dtype=np.float64)
SUFFIXES = ".png, .pdf, .svg, .svgz, .eps, .ps, .jpg, .jpeg, .tif, .tiff, .webp"


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """A run's results file (24x16x20, three timed products) whose timeline is :data:`EVENTS`."""
    out = tmp_path_factory.mktemp("report") / "made.h5"
    hpcmm.run(RunConfig(m=24, n=16, k=20, device="cpu", warmup=0, iters=3, out=str(out)), comm=MPI.COMM_SELF)
    with h5py.File(out, "r+") as f:
        del f["timeline/events"]
        f["timeline"].create_dataset("events", data=EVENTS)
    return out


@pytest.fixture
def run_file(made, tmp_path):
    """A copy of :func:`made` for one test to change."""
    return shutil.copy(made, tmp_path / "r.h5")


def _ns(path, plot=None, iteration=None):
    return argparse.Namespace(file=str(path), plot=None if plot is None else str(plot), iteration=iteration)


def _refused(path, plot=None, iteration=None) -> str:
    with pytest.raises(InputError) as caught:
        report.report_main(_ns(path, plot, iteration))
    return str(caught.value)


def _reported(path, capsys, plot=None) -> str:
    capsys.readouterr()
    assert report.report_main(_ns(path, plot)) == 0
    return capsys.readouterr().out


def _drawn(monkeypatch, call):
    """Run ``call()``; the figures it saved and the file names they were saved under."""
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    saved = []
    real = Figure.savefig

    def savefig(self, fname, *args, **kwargs):
        saved.append((self, str(fname), _guards_of(str(fname))))
        return real(self, fname, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", savefig)
    call()
    return saved


def _guards_of(name: str) -> list[int]:
    """This process's children whose command line names ``name`` (the guards of a hidden file)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                parent = int(f.read().rsplit(b")", 1)[1].split()[1])
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                words = f.read().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue
        if parent == os.getpid() and os.fsencode(name) in words:
            found.append(int(pid))
    return found


def _table_file(path, kind="bench", **tables):
    with h5py.File(path, "w") as f:
        if kind is not None:
            f.attrs["kind"] = kind
        for name, data in tables.items():
            if isinstance(data, str):
                f.create_group(name)
            else:
                f[name] = data
    return path


ROWS = np.array([(b"float64:24", 0.5), (b"f32:8", 1.25e-3)], dtype=[("case", "S12"), ("seconds", "f8")])


# -- a run file ------------------------------------------------------------------------------


def test_a_run_file_is_headed_by_its_product_its_grid_and_its_ranks(run_file, capsys):
    out = _reported(run_file, capsys)
    assert out.splitlines()[0] == f"{run_file}: m=24 n=16 k=20 float64 grid 1x1 backend numpy (1 ranks)"
    assert "(none: one rank)" in out


@pytest.mark.parametrize("stored", ["fixed-bytes", "variable-text"])
def test_the_paths_are_read_however_the_file_stores_their_texts(run_file, capsys, stored):
    """h5py gives fixed-length texts as bytes and variable-length ones as str: both print as text."""
    with h5py.File(run_file, "r+") as f:
        if stored == "fixed-bytes":
            f["summary"].attrs["paths"] = np.array([b"ipc", b"mpi"])
        else:
            f["summary"].attrs["paths"] = np.array(["ipc", "mpi"], dtype=h5py.string_dtype())
    out = _reported(run_file, capsys)
    assert "ipc, mpi" in out and "b'" not in out


def test_a_file_with_a_summary_is_a_run_whatever_its_kind(run_file, capsys):
    with h5py.File(run_file, "r+") as f:
        f.attrs["kind"] = "bench"
    assert _reported(run_file, capsys).splitlines()[0].startswith(f"{run_file}: m=24 n=16 k=20")


@pytest.mark.parametrize("kind", [None, "run"], ids=["no-kind", "run"])
def test_a_run_file_without_its_summary_is_refused_though_it_holds_a_table(tmp_path, kind):
    path = _table_file(tmp_path / "r.h5", kind, bench=ROWS)
    assert _refused(path) == f"report {path}: no /summary and /config (not an hpcmm results file)"


@pytest.mark.parametrize("missing", ["summary", "config"])
def test_a_run_file_needs_both_its_summary_and_its_config(run_file, missing):
    with h5py.File(run_file, "r+") as f:
        del f[missing]
    assert _refused(run_file) == f"report {run_file}: no /summary and /config (not an hpcmm results file)"


# -- what is not a results file --------------------------------------------------------------


def test_a_missing_file_a_text_and_a_damaged_file_are_refused_in_one_line(tmp_path, run_file):
    assert _refused(tmp_path / "gone.h5") == f"report {tmp_path / 'gone.h5'}: no such file"
    text = tmp_path / "t.h5"
    text.write_text("not hdf5\n")
    assert _refused(text) == f"report {text}: not an HDF5 file"
    with h5py.File(run_file, "r+") as f:
        f["summary"].attrs["seconds"] = np.array([1.0, 2.0])
    message = _refused(run_file)
    assert message.startswith(f"report {run_file}: cannot read it as an hpcmm file (TypeError: ")
    assert "\n" not in message and message.endswith(")")


@pytest.mark.parametrize(("error", "said"), [
    (ValueError("a bad\n   value  here"), "ValueError: a bad value here"),
    (ArithmeticError(), "ArithmeticError: ArithmeticError"),
    (OSError("x" * 300), "OSError: " + "x" * 200),
], ids=["words-on-one-line", "no-words", "cut-at-200"])
def test_an_error_while_reading_is_named_by_its_kind_and_its_words(run_file, monkeypatch, error, said):
    """Whatever h5py or the summary raise on a damaged file: one line, its words joined, 200 at most."""

    def damaged(*args, **kwargs):
        raise error

    monkeypatch.setattr(report, "print_summary", damaged)
    assert _refused(run_file) == f"report {run_file}: cannot read it as an hpcmm file ({said})"


# -- bench and transport files ---------------------------------------------------------------


@pytest.mark.parametrize("name", ["bench", "transport"])
def test_a_table_file_prints_its_table(tmp_path, capsys, name):
    path = _table_file(tmp_path / "b.h5", name, **{name: ROWS})
    assert _reported(path, capsys) == report.format_table(name, ROWS) + "\n"
    assert _reported(path, capsys).startswith(f"/{name} (2 rows, ")


def test_a_table_file_without_a_table_or_with_plot_is_refused(tmp_path):
    empty = _table_file(tmp_path / "e.h5", "bench")
    assert _refused(empty) == f"report {empty}: a 'bench' file without a bench or transport table"
    path = _table_file(tmp_path / "b.h5", "bench", bench=ROWS)
    assert _refused(path, tmp_path / "t.png") == (
        f"report {path} --plot: a 'bench' file has no timeline (only run files do)")


@pytest.mark.parametrize("data", ["plain", "two-dimensional", "group"])
def test_a_dataset_that_is_not_a_table_is_refused(tmp_path, data):
    table = {"plain": np.arange(3), "two-dimensional": np.stack([ROWS, ROWS]), "group": "group"}[data]
    path = _table_file(tmp_path / "b.h5", "bench", bench=table)
    assert _refused(path) == f"report {path}: /bench is not a table"


def test_no_table_is_printed_before_a_later_one_is_refused(tmp_path, capsys):
    path = _table_file(tmp_path / "b.h5", "bench", bench=ROWS, transport=np.arange(3))
    capsys.readouterr()
    assert _refused(path) == f"report {path}: /transport is not a table"
    assert capsys.readouterr().out == ""


def test_a_table_of_more_rows_than_report_reads_is_refused_unread(tmp_path):
    path = tmp_path / "b.h5"
    with h5py.File(path, "w") as f:
        f.attrs["kind"] = "bench"
        f.create_dataset("bench", shape=(report.MOST_ROWS + 1,), dtype=ROWS.dtype, chunks=(1024,))
    assert _refused(path) == f"report {path}: /bench has {report.MOST_ROWS + 1} rows, more than {report.MOST_ROWS}"


def test_a_table_of_exactly_the_most_rows_is_printed(tmp_path, capsys, monkeypatch):
    path = _table_file(tmp_path / "b.h5", "bench", bench=ROWS)
    monkeypatch.setattr(report, "MOST_ROWS", 2)
    assert _reported(path, capsys).startswith("/bench (2 rows")
    monkeypatch.setattr(report, "MOST_ROWS", 1)
    assert _refused(path) == f"report {path}: /bench has 2 rows, more than 1"


def test_a_table_is_headed_by_its_row_count_and_lined_up_without_trailing_spaces():
    assert report.format_table("bench", ROWS).splitlines() == [
        "/bench (2 rows, [0] … [1] left to right)",
        "case     float64:24  f32:8",
        "seconds  0.5         0.00125",
    ]
    assert report.format_table("transport", ROWS[1:]).splitlines()[0] == "/transport (1 row, [0] … [0] left to right)"


def test_a_cell_of_thirty_characters_is_whole_and_a_longer_one_cut_with_a_note():
    rows = np.array([(b"a" * 30,), (b"b" * 31,)], dtype=[("note", "S40")])
    lines = report.format_table("bench", rows).splitlines()
    assert lines[1] == "note  " + "a" * 30 + "  " + "b" * 29 + "…"
    assert lines[2:] == ["  note [1]: " + "b" * 31]


def test_a_cell_of_several_texts_prints_them_as_texts(tmp_path, capsys):
    """A field holding several variable-length texts comes back as bytes: printed as texts."""
    rows = np.array([(np.array([b"ipc", b"mpi"], dtype=object),)],
                    dtype=[("paths", h5py.string_dtype("ascii"), (2,))])
    path = _table_file(tmp_path / "b.h5", "transport", transport=rows)
    assert _reported(path, capsys).splitlines()[1] == "paths  ['ipc', 'mpi']"
    fixed = np.array([(np.array([b"ipc", b"mpi"]),)], dtype=[("paths", "S3", (2,))])
    assert report.format_table("t", fixed).splitlines()[1] == "paths  ['ipc', 'mpi']"


# -- --plot: its path ------------------------------------------------------------------------


def test_plot_needs_matplotlib_before_the_file_is_read(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert _refused(tmp_path / "gone.h5", tmp_path / "t.png") == (
        "report --plot needs matplotlib: pip install 'hpcmm[plot]'")


def test_plot_refuses_paths_that_take_no_picture(run_file, tmp_path):
    pytest.importorskip("matplotlib")
    assert _refused(run_file, tmp_path / "t.txt") == f"--plot={tmp_path}/t.txt: expected a picture file ({SUFFIXES})"
    os.symlink(tmp_path / "gone.png", tmp_path / "dangling.png")
    assert _refused(run_file, tmp_path / "dangling.png") == (
        f"--plot={tmp_path}/dangling.png: a symbolic link to {tmp_path}/gone.png, which does not exist")
    assert _refused(run_file, tmp_path / "missing" / "t.png") == (
        f"--plot={tmp_path}/missing/t.png: directory {tmp_path}/missing does not exist")
    (tmp_path / "d.png").mkdir()
    assert _refused(run_file, tmp_path / "d.png") == f"--plot={tmp_path}/d.png: is a directory"
    os.mkfifo(tmp_path / "f.png")
    assert _refused(run_file, tmp_path / "f.png") == f"--plot={tmp_path}/f.png: not a regular file"
    shutil.copy(run_file, tmp_path / "h.png")
    assert _refused(run_file, tmp_path / "h.png") == (
        f"--plot={tmp_path}/h.png: an HDF5 file (results?): --plot replaces pictures only")
    assert _refused(run_file, "/proc/t.png") == (
        "--plot=/proc/t.png: directory /proc is not writable (No such file or directory)")


def test_plot_never_replaces_the_file_being_reported(run_file, tmp_path):
    pytest.importorskip("matplotlib")
    os.symlink(run_file, tmp_path / "same.png")
    assert _refused(run_file, tmp_path / "same.png") == (
        f"--plot={tmp_path}/same.png is the file being reported: hpcmm never replaces its inputs")
    with h5py.File(run_file, "r") as f:
        assert "summary" in f


def test_a_missing_file_with_an_existing_picture_is_a_missing_file(tmp_path):
    pytest.importorskip("matplotlib")
    (tmp_path / "t.png").write_bytes(b"an earlier picture")
    assert _refused(tmp_path / "gone.h5", tmp_path / "t.png") == f"report {tmp_path}/gone.h5: no such file"


@pytest.mark.parametrize("through", ["file", "link"])
def test_plot_replaces_an_earlier_picture(run_file, tmp_path, capsys, through):
    pytest.importorskip("matplotlib")
    (tmp_path / "old.png").write_bytes(b"an earlier picture")
    png = tmp_path / "old.png"
    if through == "link":
        os.symlink(tmp_path / "old.png", tmp_path / "link.png")
        png = tmp_path / "link.png"
    out = _reported(run_file, capsys, png)
    assert out.splitlines()[-1] == f"timeline: {png}" and out.splitlines()[0].startswith(f"{run_file}: m=24")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# -- --plot: what the file must hold ---------------------------------------------------------


@pytest.mark.parametrize("missing", ["events", "timeline"])
def test_plot_of_a_run_without_a_timeline_prints_nothing_and_refuses(run_file, tmp_path, capsys, missing):
    pytest.importorskip("matplotlib")
    with h5py.File(run_file, "r+") as f:
        del f["timeline/events" if missing == "events" else "timeline"]
    capsys.readouterr()
    assert _refused(run_file, tmp_path / "t.png") == f"report {run_file}: no /timeline (the run used --no-timeline)"
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize(("events", "shape"), [
    (np.zeros((3, 6)) + 1.5, "(3, 6)"),
    (np.arange(7.0), "(7,)"),
    (np.full((3, 7), b"x"), "(3, 7)"),
    ("group", "None"),
], ids=["six-columns", "one-dimensional", "texts", "group"])
def test_plot_refuses_events_that_are_not_rows_of_seven_numbers(run_file, tmp_path, events, shape):
    pytest.importorskip("matplotlib")
    with h5py.File(run_file, "r+") as f:
        del f["timeline/events"]
        if isinstance(events, str):
            f["timeline"].create_group("events")
        else:
            f["timeline/events"] = events
    assert _refused(run_file, tmp_path / "t.png") == (
        f"report {run_file}: /timeline/events has shape {shape}, expected (N, 7) numbers")


def test_plot_refuses_more_events_than_it_reads_unread(run_file, tmp_path):
    pytest.importorskip("matplotlib")
    with h5py.File(run_file, "r+") as f:
        del f["timeline/events"]
        f["timeline"].create_dataset("events", shape=(report.MOST_EVENTS + 1, 7), dtype="f8", chunks=(4096, 7))
    assert _refused(run_file, tmp_path / "t.png") == (
        f"report {run_file}: /timeline/events has {report.MOST_EVENTS + 1} events, more than {report.MOST_EVENTS} "
        "(a run's timeline holds ranks x iterations x steps x 3)")


def test_plot_draws_exactly_the_most_events(run_file, tmp_path, capsys, monkeypatch):
    pytest.importorskip("matplotlib")
    monkeypatch.setattr(report, "MOST_EVENTS", len(EVENTS))
    assert _reported(run_file, capsys, tmp_path / "t.png").endswith(f"timeline: {tmp_path}/t.png\n")
    monkeypatch.setattr(report, "MOST_EVENTS", len(EVENTS) - 1)
    assert _refused(run_file, tmp_path / "t.png").startswith(f"report {run_file}: /timeline/events has 8 events, ")


def test_plot_refuses_a_timeline_that_is_not_finite(run_file, tmp_path):
    pytest.importorskip("matplotlib")
    with h5py.File(run_file, "r+") as f:
        f["timeline/events"][3, 6] = np.nan
    assert _refused(run_file, tmp_path / "t.png") == f"report {run_file}: /timeline/events holds NaN or Inf"


# -- --plot: the picture ---------------------------------------------------------------------


def _png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


@pytest.mark.parametrize(("paths", "named"), [
    (["ipc", "mpi"], "ipc, mpi"), ([], "-"),
], ids=["two-paths", "no-paths"])
def test_the_chart_is_titled_by_the_product_and_its_paths(run_file, tmp_path, capsys, monkeypatch, paths, named):
    pytest.importorskip("matplotlib")
    with h5py.File(run_file, "r+") as f:
        f["summary"].attrs["paths"] = np.array(paths, dtype=h5py.string_dtype())
    png = tmp_path / "t.png"
    ((figure, _, _),) = _drawn(monkeypatch, lambda: _reported(run_file, capsys, png))
    assert figure.axes[0].get_title() == f"24x16x20 float64, grid 1x1, numpy, paths {named}"


def test_the_picture_is_twelve_inches_wide_at_120_dpi_and_a_lane_pair_per_rank(tmp_path):
    pytest.importorskip("matplotlib")
    report.plot_timeline(EVENTS, str(tmp_path / "two.png"))  # iteration 2: ranks 0 and 1
    assert _png_size(tmp_path / "two.png") == (1440, round((1.0 + 0.55 * 2 * 2) * 120))
    report.plot_timeline(EVENTS, str(tmp_path / "one.png"), iteration=0)  # rank 0 alone
    assert _png_size(tmp_path / "one.png") == (1440, round((1.0 + 0.55 * 2) * 120))


def test_the_format_follows_the_suffix_and_is_png_without_one(tmp_path):
    pytest.importorskip("matplotlib")
    report.plot_timeline(EVENTS, str(tmp_path / "t.svg"))
    assert b"<svg" in (tmp_path / "t.svg").read_bytes()[:400]
    report.plot_timeline(EVENTS, str(tmp_path / "timeline"))
    assert (tmp_path / "timeline").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_chart_without_a_title_is_titled_by_its_iteration(tmp_path, monkeypatch):
    saved = _drawn(monkeypatch, lambda: (report.plot_timeline(EVENTS, str(tmp_path / "a.png")),
                                         report.plot_timeline(EVENTS, str(tmp_path / "b.png"), title="T")))
    assert [figure.axes[0].get_title() for figure, _, _ in saved] == ["iteration 2", "T"]


def test_the_chart_s_axis_legend_grid_and_bar_edges(tmp_path, monkeypatch):
    """Under a matplotlibrc whose patches are black, too: the legend shows the bars' own colours."""
    import matplotlib
    from matplotlib.colors import to_hex

    with matplotlib.rc_context({"patch.facecolor": "black"}):
        ((figure, _, _),) = _drawn(monkeypatch, lambda: report.plot_timeline(EVENTS, str(tmp_path / "t.png")))
    (ax,) = figure.axes
    assert ax.get_xlabel() == "milliseconds from the start of the iteration"
    legend = ax.get_legend()
    assert [(t.get_text(), t.get_fontsize()) for t in legend.get_texts()] == [
        ("GEMM", 8.0), ("A panel", 8.0), ("B panel", 8.0)]
    assert [to_hex(p.get_facecolor()) for p in legend.get_patches()] == ["#1f77b4", "#ff7f0e", "#2ca02c"]
    figure.canvas.draw()
    box, frame = legend.get_window_extent(), ax.get_window_extent()
    assert frame.x1 - box.x1 < 0.05 * frame.width and frame.y1 - box.y1 < 0.1 * frame.height  # upper right
    assert all(line.get_visible() and line.get_alpha() == 0.3 for line in ax.xaxis.get_gridlines())
    assert not any(line.get_visible() for line in ax.yaxis.get_gridlines())
    for bars in ax.collections:
        assert [to_hex(c) for c in bars.get_edgecolor()] == ["#ffffff"]
        assert list(bars.get_linewidth()) == [0.3]


def test_a_missing_iteration_names_the_range_the_file_holds(tmp_path):
    events = np.array([[0, it, 0, 0, 0, 0.0, 1.0] for it in (1, 2, 3)], dtype=np.float64)
    with pytest.raises(InputError) as caught:
        report.plot_timeline(events, str(tmp_path / "t.png"), iteration=7)
    assert str(caught.value) == "--iteration=7: the file holds iterations 1 to 3"


def test_no_events_is_refused_in_words(tmp_path):
    with pytest.raises(InputError) as caught:
        report.plot_timeline(np.empty((0, 7)), str(tmp_path / "t.png"))
    assert str(caught.value) == "no timeline events to plot"


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads the process table from /proc")
def test_the_picture_is_written_under_a_guarded_hidden_name_and_the_guard_let_go(tmp_path, monkeypatch):
    """A guard process waits on the hidden file while matplotlib writes (it removes it should this
    process be killed), and is gone once the picture is in place."""
    ((_, hidden, guards),) = _drawn(monkeypatch, lambda: report.plot_timeline(EVENTS, str(tmp_path / "t.png")))
    assert os.path.basename(hidden).startswith(".t.png.") and hidden.endswith(".partial")
    assert len(guards) == 1
    assert _guards_of(hidden) == [] and sorted(p.name for p in tmp_path.iterdir()) == ["t.png"]
