"""Behaviours no other test pinned, one area a section; each test fails where its behaviour breaks.

* verification of rows of A whose norm is zero: a right C passes both checks with finite
  figures, and anything but zero in such a row of C fails them (:mod:`hpcmm.verify`);
* the status file after an unexpected error on rank 0: ``exit=1``, ``reason=failed``, never
  the ``exit=0`` a batch script takes for success (:mod:`hpcmm.io.status`), at the module and
  through ``python -m hpcmm`` at 2 ranks;
* collective errors without MPI: an error passed to :func:`hpcmm.errors.agree` keeps its kind,
  text and exit status; :func:`hpcmm.errors.raised_everywhere` is true only of no error or an
  agreed one (several ranks: tests/mpi/test_unlisted_areas_mpi.py);
* the summary's figures documented as medians over the products, from GEMM, wait and host
  times that differ from product to product and from rank to rank, so that a mean, a maximum,
  the first product or the other axis gives another figure (:mod:`hpcmm.cli.summary`), and the
  GEMM median as a run writes it into ``/summary``;
* the publish step: a file that appeared at ``--out`` while the run worked is neither replaced
  nor renamed around (exit 2, the file left as it was, no temporary left behind); with
  ``--overwrite`` it is replaced by the results (:mod:`hpcmm.cli.run`, :func:`hpcmm.io.h5io.publish`);
  the same for the figures files of ``bench`` (:func:`hpcmm.io.h5io.write_table_file`);
* ``report --plot``: what the chart shows, read back from matplotlib's figure: by default the
  last timed product's bars (lanes, extents, colours), another with ``--iteration``;
* the rule between ``--grid`` and ``--algo``: a grid only with ``summa`` (refused with ``2.5d``,
  ``2.5d:C`` and ``auto``, from the option or ``HPCMM_ALGO``), and ``auto`` choosing among summa
  and the layer counts the nodes allow (:mod:`hpcmm.config`, :mod:`hpcmm.planning.algo_choice`).

Bytes per peer of the 2.5D reduction, the relay path's records and the rank whose error every
rank raises need several ranks: tests/mpi/test_unlisted_areas_mpi.py.
"""

from __future__ import annotations

import argparse
import sys

import h5py
import numpy as np
import pytest
from launcher import REPO, find_mpiexec, rank_environment, run_launcher
from mpi4py import MPI

import hpcmm
from hpcmm.io import h5io
from hpcmm.io import status
from hpcmm.planning.algo_choice import Placed, choose
from hpcmm.cli.main import config_from, parse
from hpcmm.config import RunConfig
from hpcmm.execution.engine import Engine
from hpcmm.errors import HpcmmError, InputError, OutputError, VerificationError, agree, raised_everywhere
from hpcmm.io.inputs import generate_block
from hpcmm.geometry.layout import Grid, Layout
from hpcmm.cli.summary import summary_figures
from hpcmm.verify import Check, Product, freivalds, full_check

SMALL = ["--m", "13", "--n", "7", "--k", "5", "--quiet"]


def _environment() -> dict[str, str]:
    return rank_environment("cpu")


def _read_status(path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines())


# -- 1. verification: rows of A whose norm is zero -------------------------------------


ZERO_ROWS = [0, 5, 17]


def _with_zero_rows(m, n, k, dtype, seed=7):
    """Random A and B, A's rows :data:`ZERO_ROWS` zero, and C = A·B in ``dtype``."""
    a = generate_block(seed, "A", (m, k), (0, m), (0, k), dtype)
    b = generate_block(seed, "B", (k, n), (0, k), (0, n), dtype)
    a[ZERO_ROWS] = 0
    wide = np.complex128 if a.dtype.kind == "c" else np.float64
    c = (a.astype(wide) @ b.astype(wide)).astype(dtype)
    assert np.count_nonzero(c[ZERO_ROWS]) == 0 and np.count_nonzero(c) > 0
    return np.asfortranarray(a), b, c


def _check(method, one_rank, a, b, c, dtype, tf32=False):
    topo, backend = one_rank
    layout = Layout(a.shape[0], b.shape[1], a.shape[1], Grid(1, 1))
    product = Product(a, b, c, dtype, 3, tf32=tf32)
    return freivalds(topo, layout, backend, product, 11) if method == "freivalds" else \
        full_check(topo, layout, backend, product)


#: The types whose tolerance weighs the rows' figures (16-bit stores of C, TF32 inputs) and others.
KINDS = ["float64", "float32", "complex128", "float16", "bfloat16", "tf32"]


@pytest.mark.parametrize("method", ["freivalds", "full"])
@pytest.mark.parametrize("kind", KINDS)
def test_zero_rows_of_a_right_product_pass_with_finite_figures(one_rank, method, kind):
    dtype = "float32" if kind == "tf32" else kind
    a, b, c = _with_zero_rows(23, 13, 19, dtype)
    check = _check(method, one_rank, a, b, c, dtype, tf32=kind == "tf32")
    assert check.passed, check
    assert np.isfinite([check.residual, check.tolerance, check.detectable]).all(), check
    assert 0 <= check.residual <= check.tolerance and check.tolerance > 0, check


@pytest.mark.parametrize("method", ["freivalds", "full"])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("row", ZERO_ROWS)
def test_anything_in_a_zero_row_of_c_fails(one_rank, method, kind, row):
    """A·B is exactly zero there: no rounding excuses any value, however small against C's others."""
    dtype = "float32" if kind == "tf32" else kind
    a, b, c = _with_zero_rows(23, 13, 19, dtype)
    c[row, 4] = 1e-3 * np.abs(c.astype(np.complex128 if c.dtype.kind == "c" else np.float64)).max()
    check = _check(method, one_rank, a, b, c, dtype, tf32=kind == "tf32")
    assert not check.passed, check
    assert check.residual > 1e3 * check.tolerance, check


# -- 2. the status file when rank 0 meets an unexpected error ---------------------------


def test_status_file_of_an_unexpected_error_says_failed(tmp_path):
    path = tmp_path / "job.status"

    def body(argv):
        status.start()
        assert _read_status(path)["state"] == "running"
        raise RuntimeError("a bug")

    with pytest.raises(RuntimeError, match="a bug"):
        status.recorded(["--status-file", str(path)], body)
    assert _read_status(path) == {"state": "finished", "exit": "1", "reason": "failed", "ranks": "1",
                                  "command": "run"}


def test_rank_0s_unexpected_error_is_recorded_as_a_failure(tmp_path):
    """Rank 0 raises (not an hpcmm error) in its first product: the job fails, and the status file
    that a batch script reads says exit=1, never 0."""
    mpiexec = find_mpiexec()
    if mpiexec is None:
        pytest.skip("no mpiexec beside this Python or on PATH")
    path = tmp_path / "job.status"
    runner = [sys.executable, str(REPO / "tests" / "fault_runner.py"), "--fault", "0:multiply:raise", "--"]
    proc = run_launcher([mpiexec, "-n", "2", *runner, *SMALL, "--out", str(tmp_path / "r.h5"),
                         "--status-file", str(path)], 180, cwd=tmp_path, env=_environment())
    assert proc.returncode != 0, proc.stdout
    fields = _read_status(path)
    assert fields.get("exit") == "1" and fields.get("reason") == "failed", (fields, proc.stdout)
    assert fields["state"] == "finished" and fields["ranks"] == "2", fields
    assert not (tmp_path / "r.h5").exists()


# -- 3. collective errors at one process ----------------------------------------------------


@pytest.mark.parametrize("error, kind, code", [
    (InputError("--m=0: bad"), InputError, 2),
    (VerificationError("verification failed: x"), VerificationError, 1),
    (OutputError("disk full"), OutputError, 1),
])
def test_agree_keeps_an_errors_kind_text_and_status(error, kind, code):
    with pytest.raises(HpcmmError) as caught:
        agree(None, error)
    assert type(caught.value) is kind and str(caught.value) == str(error)
    assert caught.value.exit_code == code and caught.value.agreed and raised_everywhere(caught.value)
    assert caught.value.__cause__ is error


def test_agree_names_an_unexpected_error_and_passes_none():
    agree(None, None)  # nothing to raise
    with pytest.raises(HpcmmError) as caught:
        agree(None, KeyError("x"))
    assert type(caught.value) is HpcmmError and str(caught.value) == "KeyError: 'x'"
    assert caught.value.exit_code == 1 and raised_everywhere(caught.value)


def test_only_no_error_or_an_agreed_one_is_raised_everywhere():
    """A collective tear-down after an error of this rank alone would hang: only agreed errors allow it."""
    assert raised_everywhere(None)
    assert not raised_everywhere(InputError("this rank's alone"))
    assert not raised_everywhere(HpcmmError("this rank's alone"))
    assert not raised_everywhere(RuntimeError("a bug"))
    assert not raised_everywhere(KeyboardInterrupt())


# -- 4. the summary's medians, from times that differ per product ----------------------------

#: Per rank and product: GEMM seconds (two steps, a quarter and three quarters), waits, host gaps.
#: Rank 0's GEMMs 1, 2, 5 s (median 2, mean 2.67); rank 1's 4, 3, 0.5 s (median 3, mean 2.5); the
#: busiest rank of each product took 4, 3, 5 s (median 4).
GEMM = [[1.0, 2.0, 5.0], [4.0, 3.0, 0.5]]
#: Per product the rank that waited most: 0.5, 1.0, 0.25 (median 0.5, mean 0.58).
WAIT = [[0.5, 0.125, 0.25], [0.25, 1.0, 0.125]]
#: Per product the rank with most: 0.125, 0.25, 0.5 (median 0.25, mean 0.29).
HOST = [[0.0625, 0.25, 0.5], [0.125, 0.0625, 0.0625]]
PRODUCTS = [6.5, 7.0, 8.0]


def _per_product_times():
    steps = np.zeros((2, 3, 2, 3))
    steps[..., 0, 0] = np.multiply(GEMM, 0.25)
    steps[..., 1, 0] = np.multiply(GEMM, 0.75)
    steps[..., 1, 1] = steps[..., 1, 2] = WAIT  # all of it waited at the second step
    host = np.zeros((2, 3, 2))
    host[..., 0] = HOST
    return steps, host


def test_summary_medians_of_times_that_differ_per_product():
    steps, host = _per_product_times()
    s = summary_figures(m=10, n=10, k=10, dtype="float64", ranks=2, gpus=0, product_seconds=PRODUCTS,
                        step_seconds=steps, host_seconds=host, check=Check("freivalds", 0.0, 1.0, 0.1), paths=set())
    # GEMM: each rank's median over the products (2 and 3 s); the busiest of those, and its excess over their mean.
    assert s["gemm_seconds_max"] == 3.0
    assert s["load_imbalance"] == pytest.approx(3.0 / 2.5 - 1.0, rel=1e-12)
    assert s["exposed_comm_seconds"] == 0.5 and s["exposed_comm_fraction"] == pytest.approx(0.5 / 7.0, rel=1e-12)
    assert s["host_overhead_seconds"] == 0.25 and s["host_overhead_fraction"] == pytest.approx(0.25 / 7.0, rel=1e-12)
    assert (s["seconds"], s["seconds_min"], s["seconds_max"]) == (7.0, 6.5, 8.0)


def test_a_run_writes_the_median_gemm_time_of_its_products(tmp_path, monkeypatch):
    """One rank, three timed products whose GEMMs take 4, 2 and 1 s: /summary says 2 s, and the
    step table keeps each product's own."""
    gemm = [4.0, 2.0, 1.0]
    original = Engine.multiply
    done = []

    def multiply(self):
        t = original(self)
        seconds = gemm[len(done)]
        done.append(seconds)
        t.steps[:, 0] = seconds / len(t.steps)
        t.steps[:, 1:] = 0.0
        return t

    monkeypatch.setattr(Engine, "multiply", multiply)
    out = tmp_path / "r.h5"
    config = RunConfig(m=20, n=12, k=16, device="cpu", panel=4, warmup=0, iters=3, out=str(out))
    result = hpcmm.run(config, comm=MPI.COMM_SELF)
    assert done == gemm
    assert result.summary["gemm_seconds_max"] == 2.0 and result.summary["load_imbalance"] == 0.0
    with h5py.File(out, "r") as f:
        assert float(f["summary"].attrs["gemm_seconds_max"]) == 2.0
        np.testing.assert_array_equal(f["timings/step_seconds"][()][0, :, :, 0].sum(axis=1), gemm)


# -- 6. the publish step: a file that appeared at --out during the run ----------------------


def _file_appears_while_writing(monkeypatch, out):
    """Another program creates ``out`` while the run writes its temporary file."""
    real = h5io.write_results

    def write_results(tmp, meta):
        real(tmp, meta)
        out.write_text("the user's")

    monkeypatch.setattr(h5io, "write_results", write_results)


def _leftovers(folder, out):
    return sorted(p.name for p in folder.iterdir() if p.name != out.name)


def test_run_refuses_to_replace_a_file_that_appeared_at_out(tmp_path, monkeypatch):
    out = tmp_path / "mine.h5"
    _file_appears_while_writing(monkeypatch, out)
    config = RunConfig(m=20, n=12, k=16, device="cpu", warmup=0, iters=1, out=str(out))
    with pytest.raises(InputError, match=r"file appeared during the run \(pass --overwrite\)") as caught:
        hpcmm.run(config, comm=MPI.COMM_SELF)
    assert caught.value.exit_code == 2
    assert out.read_text() == "the user's"
    assert _leftovers(tmp_path, out) == []


def test_run_with_overwrite_replaces_a_file_that_appeared_at_out(tmp_path, monkeypatch):
    out = tmp_path / "mine.h5"
    _file_appears_while_writing(monkeypatch, out)
    config = RunConfig(m=20, n=12, k=16, device="cpu", warmup=0, iters=1, out=str(out), overwrite=True)
    hpcmm.run(config, comm=MPI.COMM_SELF)
    with h5py.File(out, "r") as f:
        assert bool(f["summary"].attrs["verified"])
    assert _leftovers(tmp_path, out) == []


def test_a_figures_file_that_appeared_at_out_is_kept(tmp_path, monkeypatch):
    """``bench`` and ``bench transport`` publish their figures through the same step."""
    out = tmp_path / "figures.h5"
    real = h5io._table

    def table(group, name, rows, strings=()):
        real(group, name, rows, strings)
        out.write_text("the user's")

    monkeypatch.setattr(h5io, "_table", table)
    rows = [{"case": "float64:24", "seconds": 0.5}]
    with pytest.raises(InputError, match=r"file appeared during the run \(pass --overwrite\)"):
        h5io.write_table_file(str(out), False, "bench", "bench", rows, {"hpcmm": hpcmm.__version__})
    assert out.read_text() == "the user's"
    assert _leftovers(tmp_path, out) == []
    assert h5io.write_table_file(str(out), True, "bench", "bench", rows, {"hpcmm": hpcmm.__version__}) == str(out)
    with h5py.File(out, "r") as f:
        assert f["bench"]["seconds"][0] == 0.5
    assert _leftovers(tmp_path, out) == []


RUNNER = """
import sys
sys.path.insert(0, {repo!r})
from hpcmm.cli.startup import launch


def prepare():
    from hpcmm.io import h5io
    real = h5io.write_results

    def write_results(tmp, meta):
        real(tmp, meta)
        with open({out!r}, "w") as fh:
            fh.write("the user's")

    h5io.write_results = write_results


sys.exit(launch(sys.argv[1:], prepare=prepare))
"""


def test_the_command_keeps_a_file_that_appeared_at_out(tmp_path):
    """``python -m hpcmm --out mine.h5``: the name the user gave is never replaced nor changed."""
    out = tmp_path / "mine.h5"
    script = tmp_path / "appear.py"
    script.write_text(RUNNER.format(repo=str(REPO), out=str(out)))
    proc = run_launcher([sys.executable, str(script), *SMALL, "--out", str(out)], 180, cwd=tmp_path,
                        env=_environment())
    assert proc.returncode == 2, proc.stdout
    assert f"--out={out}: file appeared during the run (pass --overwrite)" in proc.stdout
    assert out.read_text() == "the user's"
    assert _leftovers(tmp_path, out) == ["appear.py"]


# -- 7. report --plot: what the chart shows ---------------------------------------------------

#: rank, iteration, stream (0 compute, 1 comm), kind (0 GEMM, 1 A, 2 B), step, start, end (seconds).
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
COLOURS = {0: "#1f77b4", 1: "#ff7f0e", 2: "#2ca02c"}


@pytest.fixture
def run_file(tmp_path):
    """A run's results file (three timed products) whose timeline is :data:`EVENTS`."""
    out = tmp_path / "r.h5"
    hpcmm.run(RunConfig(m=24, n=16, k=20, device="cpu", warmup=0, iters=3, out=str(out)), comm=MPI.COMM_SELF)
    with h5py.File(out, "r+") as f:
        attrs = dict(f["timeline/events"].attrs)
        del f["timeline/events"]
        f["timeline"].create_dataset("events", data=EVENTS)
        f["timeline/events"].attrs.update(attrs)
    return out


def _plotted(monkeypatch, path, png, iteration):
    """Run ``report path --plot png``; returns the figure it saved."""
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    from hpcmm.cli.report import report_main

    saved = []
    real = Figure.savefig

    def savefig(self, *args, **kwargs):
        saved.append(self)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", savefig)
    assert report_main(argparse.Namespace(file=str(path), plot=str(png), iteration=iteration)) == 0
    assert len(saved) == 1 and png.stat().st_size > 0
    return saved[0]


def _bars(figure):
    """``(lane label, start ms, end ms, colour)`` of every bar, sorted."""
    from matplotlib.colors import to_hex

    (ax,) = figure.axes
    labels = [t.get_text() for t in ax.get_yticklabels()]
    bars = []
    for collection in ax.collections:
        colours = collection.get_facecolors()
        for i, path in enumerate(collection.get_paths()):
            xs, ys = path.vertices[:, 0], path.vertices[:, 1]
            lane = round(float(ys.min() + ys.max()) / 2)
            bars.append((labels[lane], round(float(xs.min()), 9), round(float(xs.max()), 9),
                         to_hex(colours[i % len(colours)])))
    return labels, sorted(bars)


def _expected(iteration):
    ev = EVENTS[EVENTS[:, 1] == iteration]
    ranks = sorted({int(r) for r in ev[:, 0]})
    labels = [f"rank {r} {name}" for r in ranks for name in ("compute", "comm")]
    bars = sorted((f"rank {int(r)} {'compute' if s == 0 else 'comm'}", round(start * 1e3, 9), round(end * 1e3, 9),
                   COLOURS[int(k)]) for r, _, s, k, _, start, end in ev)
    return labels, bars


def test_report_plot_draws_the_last_product_by_default(run_file, tmp_path, monkeypatch):
    figure = _plotted(monkeypatch, run_file, tmp_path / "t.png", None)
    assert _bars(figure) == _expected(2)


@pytest.mark.parametrize("iteration", [0, 1])
def test_report_plot_draws_the_product_asked_for(run_file, tmp_path, monkeypatch, iteration):
    figure = _plotted(monkeypatch, run_file, tmp_path / "t.png", iteration)
    assert _bars(figure) == _expected(iteration)


# -- 8. --grid and the algorithms -------------------------------------------------------------


@pytest.mark.parametrize("algo", ["2.5d", "2.5d:2", "2.5D:1", "auto"])
def test_a_grid_is_refused_with_every_algorithm_but_summa(algo):
    with pytest.raises(InputError, match=rf"^--grid=2x1: applies to --algo=summa only, not --algo={algo}"):
        RunConfig(algo=algo, grid=(2, 1))
    ns = parse(["--grid", "1x2", "--algo", algo])
    with pytest.raises(InputError, match=r"^--grid=1x2: applies to --algo=summa only, not --algo="):
        config_from(ns, environ={}, argv=[])


def test_a_grid_is_refused_with_an_algorithm_from_the_environment():
    ns = parse(["--grid", "2x1"])
    with pytest.raises(InputError, match=r"^--grid=2x1: applies to --algo=summa only, not HPCMM_ALGO=auto"):
        config_from(ns, environ={"HPCMM_ALGO": "auto"}, argv=[])


def test_a_grid_goes_with_summa():
    assert RunConfig(algo="summa", grid=(2, 1)).grid == (2, 1)
    assert RunConfig(grid=(1, 3)).algo == "summa"  # the default algorithm takes a grid
    cfg = config_from(parse(["--grid", "2x1", "--algo", "SUMMA"]), environ={}, argv=[])
    assert (cfg.algo, cfg.grid) == ("summa", (2, 1))
    assert config_from(parse(["--algo", "auto"]), environ={}, argv=[]).grid is None


def test_auto_runs_summa_where_no_layer_count_fits_the_nodes():
    """Nodes of one rank (or of different sizes) take no 2.5d layers: auto weighs summa alone and runs it."""
    for placed in (Placed(2, (1, 1), 2, False), Placed(6, (2, 4), 6, False)):
        choice = choose("auto", placed, (64, 64, 64), "float64")
        assert (choice.ran, choice.layers, choice.asked) == ("summa", None, "auto")
        assert [name for name, _ in choice.predicted] == ["summa"]


def test_auto_weighs_summa_and_every_layer_count_of_the_nodes():
    choice = choose("auto", Placed(8, (4, 4), 8, False), (4096, 4096, 4096), "float64")
    predicted = dict(choice.predicted)
    assert set(predicted) == {"summa", "2.5d:2", "2.5d:4"}
    assert choice.ran == min(predicted, key=predicted.get)
    assert choice.layers == (None if choice.ran == "summa" else int(choice.ran.split(":")[1]))
    summary = choice.summary()
    assert summary["algo"] == choice.ran and summary["algo_asked"] == "auto"
    assert summary["predicted_algos"] == [name for name, _ in choice.predicted]
