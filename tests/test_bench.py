"""``bench``, ``bench transport``, the peers and ``report`` on the CPU; the results file appears whole.

The benchmark runs in this process over ``COMM_SELF`` (``bench transport``
needs two ranks: it runs under ``mpiexec``); its figures are checked against
the run's own summary, to the digit, and its words against what ran: a CPU
run names one host and numpy, never a GPU, claims no efficiency, and shows a
peer that did not run as ``—`` with the reason, never ``nan``.
"""

from __future__ import annotations

import argparse
import os
import sys
from types import SimpleNamespace

import h5py
import numpy as np
import pytest
from launcher import REPO, mpiexec_or_skip, quiet_environment, rank_environment, run_launcher
from mpi4py import MPI

import hpcmm
from hpcmm.bench import command as bench
from hpcmm.io import h5io
from hpcmm.bench import peers
from hpcmm.execution.backend import CpuBackend
from hpcmm.config import RunConfig


def _ns(**kw):
    base = dict(what="gemm", cases=None, no_peers=False, sizes=None)
    base.update(kw)
    return argparse.Namespace(**base)


@pytest.fixture
def no_peer_packages(monkeypatch):
    """The peers' packages as absent as on a machine without them."""
    for name in ("heat", "torch", "nvmath", "nvmath.distributed"):
        monkeypatch.setitem(sys.modules, name, None)  # import raises ModuleNotFoundError


def test_bench_on_cpu(tmp_path, capsys, no_peer_packages):
    out = tmp_path / "b.h5"
    config = RunConfig(device="cpu", out=str(out), warmup=1, iters=3)
    status = bench.bench_main(_ns(cases="float64:48;complex64:40x24x56"), config, MPI.COMM_SELF)
    assert status == 0
    captured = capsys.readouterr()
    text = captured.out + captured.err
    assert "GPU" not in text and "efficiency" not in text and "eff." not in text
    assert "nan" not in text.lower()
    assert "one host: numpy.matmul A:C B:C" in captured.err and "hosts" in captured.out and "numpy" in captured.out
    assert "heat not installed" in captured.out
    assert "cuBLASMp needs CUDA devices" in captured.out
    assert "—" in captured.out
    with h5py.File(out, "r") as f:
        assert f.attrs["kind"] == "bench"
        rows = f["bench"][()]
        refs = f["reference"][()]
    assert len(rows) == 2
    assert len(refs) == 2 * 6  # four orders, hpcmm's GEMM, hpcmm at this one rank
    for row in rows:
        mine = refs[refs["case"] == row["case"]]
        winner = mine[mine["best"] == 1]
        assert len(winner) == 1 and winner["seconds"][0] == np.nanmin(mine["seconds"])
        assert row["reference"].decode() == "one host: " + winner["candidate"][0].decode()
        assert row["reference_seconds"] == winner["seconds"][0]
        assert row["device"].decode() == "cpu"
        assert np.isnan(row["efficiency"])
        assert row["hpcmm_over_reference"] == row["hpcmm_tflops"] / row["reference_tflops"]
        assert row["verified"] == 1
        assert np.isnan(row["heat_tflops"]) and row["heat_note"].decode() == "heat not installed"
    complex_row = rows[1]
    assert complex_row["case"].decode() == "complex64:40x24x56"
    assert complex_row["hpcmm_tflops"] == pytest.approx(8 * 40 * 24 * 56 / complex_row["hpcmm_seconds"] / 1e12,
                                                        rel=1e-12)
    assert complex_row["reference_tflops"] == pytest.approx(
        8 * 40 * 24 * 56 / complex_row["reference_seconds"] / 1e12, rel=1e-12)


def test_report_prints_a_missing_figure_of_a_bench_file_as_a_dash(tmp_path, capsys, no_peer_packages):
    """A CPU bench file has no efficiency (NaN in the file): report prints —, never nan."""
    from hpcmm.cli.report import report_main

    out = tmp_path / "b.h5"
    bench.bench_main(_ns(cases="float64:24", no_peers=True), RunConfig(device="cpu", out=str(out)), MPI.COMM_SELF)
    with h5py.File(out, "r") as f:
        assert np.isnan(f["bench"]["efficiency"][0])
    capsys.readouterr()
    assert report_main(argparse.Namespace(file=str(out), plot=None, iteration=None)) == 0
    text = capsys.readouterr().out
    assert "nan" not in text.lower()
    (line,) = [x for x in text.splitlines() if x.split()[:1] == ["efficiency"]]
    assert line.split() == ["efficiency", "—"]


def test_report_lines_up_a_bench_table_with_short_figures(tmp_path, capsys):
    """One line per field, one aligned column per case, figures to four digits, long notes below."""
    from hpcmm.cli.report import CELL_WIDTH, format_table

    rows = np.array([("float64:24", 1.23456789e-3, 105.96323910105902, "n" * 40),
                     ("float32:4096x24x8", float("nan"), 7.0, "short")],
                    dtype=[("case", "S20"), ("hpcmm_seconds", "f8"), ("hpcmm_tflops", "f8"), ("note", "S60")])
    lines = format_table("bench", rows).splitlines()
    assert lines[0].startswith("/bench (2 rows")
    table = {x.split()[0]: x for x in lines[1:5]}
    assert table["hpcmm_seconds"].split() == ["hpcmm_seconds", "0.001235", "—"]
    assert table["hpcmm_tflops"].split() == ["hpcmm_tflops", "106", "7"]
    # The second column starts at the same place on every line.
    starts = {line.index(v) for line, v in zip(lines[1:4], ("float32:4096x24x8", "—", "7"))}
    assert len(starts) == 1
    assert len(table["note"].split()[1]) == CELL_WIDTH and lines[5] == f"  note [0]: {'n' * 40}"


def test_bench_row_to_the_digit():
    case = bench.parse_cases("complex128:100x200x300")[0]
    assert case.flops == 8 * 100 * 200 * 300
    summary = {"seconds": 0.5, "tflops": case.flops / 0.5 / 1e12, "exposed_comm_fraction": 0.125,
               "host_overhead_fraction": 0.0625, "panel": 64, "prefetch": 1, "paths": ["ipc"], "verified": True,
               "residual": 1e-17, "verify_detectable": 1e-9, "load_imbalance": 0.0}
    gpu = bench.bench_row(case, summary, ranks=4, devices=2, on_gpu=True, reference=0.8)
    assert gpu["reference_tflops"] == case.flops / 0.8 / 1e12
    assert gpu["efficiency"] == summary["tflops"] / (2 * gpu["reference_tflops"])
    assert gpu["efficiency"] == pytest.approx(0.8 / 0.5 / 2, rel=1e-12)
    assert gpu["reference"] == "one GPU: "
    cpu = bench.bench_row(case, summary, ranks=4, devices=1, on_gpu=False, reference=0.8)
    assert np.isnan(cpu["efficiency"]) and cpu["hpcmm_over_reference"] == pytest.approx(1.6, rel=1e-12)
    row = dict(cpu, cublasmp_tflops=float("nan"), hpcmm_over_cublasmp=float("nan"), cublasmp_note="x",
               heat_tflops=float("nan"), hpcmm_over_heat=float("nan"), heat_note="heat not installed")
    lines = bench.format_table([row], "f.h5")
    assert "GPU" not in "\n".join(lines) and "nan" not in "\n".join(lines) and "1.60" in lines[1]


def test_reference_times_the_same_work():
    """The CPU candidates: data as hpcmm's, laid out in their order, the warm-ups and timed products, a median."""
    from hpcmm.bench.reference import measure_candidates

    case = bench.parse_cases("complex64:16x8x24")[0]
    seen = []

    def timer(candidate, product, warmup, repeats):
        seen.append((candidate.name, warmup, repeats))
        calls = []
        original = np.matmul

        def counting(a, b, out=None):
            calls.append((a.dtype, a.flags.f_contiguous, b.flags.f_contiguous, bool(np.any(a.imag != 0)),
                          float(np.abs(a).max())))
            return original(a, b, out=out)

        np.matmul = counting
        try:
            for _ in range(warmup + repeats):
                product()
        finally:
            np.matmul = original
        assert len(calls) == warmup + repeats
        dtype, a_f, b_f, imag, top = calls[0]
        assert dtype == np.complex64 and imag and top <= np.sqrt(2)
        assert (a_f, b_f) == (candidate.a_order == "F", candidate.b_order == "F")
        return [1.0, 3.0, 2.0, 9.0, 0.5][:repeats]

    rows = measure_candidates(CpuBackend(), case, warmup=2, repeats=5, timer=timer)
    names = ["numpy.matmul A:C B:C", "numpy.matmul A:C B:F", "numpy.matmul A:F B:C", "numpy.matmul A:F B:F",
             "hpcmm gemm A:F B:C"]
    # Five rounds of one timed product each, the order rotating by one per round; the warm-ups come
    # with a candidate's first turn.
    assert [name for name, _, _ in seen] == [names[(turn + i) % 5] for turn in range(5) for i in range(5)]
    assert [(w, r) for _, w, r in seen] == [(2, 1)] * 5 + [(0, 1)] * 20
    assert [r["seconds"] for r in rows] == [1.0] * 5  # the median of the rounds


def test_reference_picks_the_fastest_and_names_it(tmp_path, no_peer_packages):
    """A fake timer makes each candidate's speed: the fastest is the reference, every one is in the file."""
    speeds = {"numpy.matmul A:C B:C": 4.0, "numpy.matmul A:C B:F": 3.0, "numpy.matmul A:F B:C": 2.0,
              "numpy.matmul A:F B:F": 5.0, "hpcmm gemm A:F B:C": 2.5}

    def timer(candidate, product, warmup, repeats):
        product()
        return [speeds[candidate.name]] * repeats

    out = tmp_path / "fake.h5"
    status = bench.bench_main(_ns(cases="float64:40x24x32", reference_timer=timer),
                              RunConfig(device="cpu", out=str(out)), MPI.COMM_SELF)
    assert status == 0
    with h5py.File(out, "r") as f:
        row = f["bench"][0]
        refs = f["reference"][()]
    flops = 2 * 40 * 24 * 32
    assert [c.decode() for c in refs["candidate"]] == [*speeds, "hpcmm 1 rank"]
    assert list(refs["seconds"][:5]) == list(speeds.values())
    assert refs["tflops"][2] == flops / 2.0 / 1e12
    # hpcmm itself (microseconds here) beats the fake seconds: at one rank it is its own best one host.
    assert list(refs["best"]) == [0, 0, 0, 0, 0, 1]
    assert row["reference"].decode() == "one host: hpcmm 1 rank" and row["reference_candidates"] == 6
    assert row["hpcmm_over_reference"] == pytest.approx(1.0)


@pytest.mark.parametrize("override, order", [("auto", "FC"), ("CF", "CF"), ("FF", "FF")])
def test_hpcmm_gemm_candidate_takes_the_runs_orders(tmp_path, no_peer_packages, monkeypatch, override, order):
    """The 'hpcmm gemm' candidate multiplies in the orders of the run's GEMM and says so; the file records them."""
    from hpcmm.execution.backend import CpuBackend as Cpu

    given = []
    gemm = Cpu.gemm

    def recording(self, a, b, c, *args, **kwargs):
        given.append("".join("F" if x.flags.f_contiguous else "C" for x in (a, b)))
        return gemm(self, a, b, c, *args, **kwargs)

    def timer(candidate, product, warmup, repeats):
        given.clear()
        product()
        if candidate.call == "gemm":
            assert given == [order], (candidate.name, given)
        return [1.0] * repeats

    monkeypatch.setattr(Cpu, "gemm", recording)
    out = tmp_path / "orders.h5"
    status = bench.bench_main(_ns(cases="float64:40x24x32", reference_timer=timer),
                              RunConfig(device="cpu", out=str(out), gemm_order=override), MPI.COMM_SELF)
    assert status == 0
    label = f"A:{order[0]} B:{order[1]}"
    with h5py.File(out, "r") as f:
        refs = f["reference"][()]
        assert f["bench"]["gemm_order"][0].decode() == label
    names = [c.decode() for c in refs["candidate"]]
    assert names[4] == f"hpcmm gemm {label}"
    own = names.index("hpcmm 1 rank")
    assert (refs["a_order"][own].decode(), refs["b_order"][own].decode()) == (order[0], order[1])


def test_pick_reference_without_hpcmm_and_with_failures():
    case = bench.parse_cases("float32:10")[0]
    cands = [{"candidate": "a", "library": "cupy", "a_order": "C", "b_order": "C", "seconds": float("nan"),
              "note": "out of memory", "devices": 2},
             {"candidate": "b", "library": "cupy", "a_order": "C", "b_order": "F", "seconds": 0.2, "note": "",
              "devices": 2},
             {"candidate": "c", "library": "hpcmm", "a_order": "F", "b_order": "C", "seconds": 0.1, "note": "",
              "devices": 2}]
    rows, best = bench.pick_reference(cands, case)
    assert best == 2 and [r["best"] for r in rows] == [0, 0, 1] and np.isnan(rows[0]["tflops"])
    gpu = bench.bench_row(case, {"seconds": 0.1, "tflops": case.flops / 0.1 / 1e12, "exposed_comm_fraction": 0.0,
                                 "panel": 1, "prefetch": 1, "paths": [], "verified": True, "residual": 0.0,
                                 "load_imbalance": 0.0}, ranks=2, devices=2, on_gpu=True,
                          reference=rows[best]["seconds"], winner=rows[best]["candidate"])
    assert gpu["efficiency"] == pytest.approx(0.5) and gpu["reference"] == "one GPU: c"
    with pytest.raises(RuntimeError, match="a: out of memory"):
        bench.pick_reference(cands[:1], case)


# -- peers: every way they do not run --------------------------------------------------


def test_peers_skip_with_reasons(no_peer_packages):
    be = CpuBackend()
    with pytest.raises(peers.PeerUnavailable, match="cuBLASMp needs CUDA devices"):
        peers.cublasmp(MPI.COMM_SELF, be, 8, 8, 8, "float64")
    with pytest.raises(peers.PeerUnavailable, match="^heat not installed$"):
        peers.heat(MPI.COMM_SELF, be, 8, 8, 8, "float64")
    gpu_like = SimpleNamespace(on_gpu=True, describe=lambda: {"gpu_uuid": "x"})
    with pytest.raises(peers.PeerUnavailable, match="not run for complex128"):
        peers.cublasmp(MPI.COMM_SELF, gpu_like, 8, 8, 8, "complex128")
    with pytest.raises(peers.PeerUnavailable, match="nvmath-python not installed"):
        peers.cublasmp(MPI.COMM_SELF, SimpleNamespace(on_gpu=True, device_id=0,
                       describe=lambda: {"gpu_uuid": "x"}), 8, 8, 8, "float64")
    result = bench._peer(peers.heat, MPI.COMM_SELF, be, 8, 8, 8, "float64")
    assert result.note == "heat not installed" and np.isnan(result.tflops)
    crashed = bench._peer(lambda *a, **k: 1 / 0)
    assert crashed.note == "ZeroDivisionError: division by zero"


class FakeClock:
    """A clock that products advance by the seconds they are told to take."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_time_limit_stops_before_the_product_that_would_pass_it():
    clock = FakeClock()
    ran = []

    def product():
        ran.append(1)
        clock.now += 10.0

    times, note = peers.timed_within(MPI.COMM_SELF, product, warmup=1, iters=5, limit=35.0, clock=clock)
    # warm-up 10 s, timed 10 s, 10 s: a fourth product would end at 40 s > 35 s.
    assert len(ran) == 3 and times == [10.0, 10.0]
    assert note == "timed out: 2 of 5 timed products within 35 s"
    clock.now, ran[:] = 0.0, []
    times, note = peers.timed_within(MPI.COMM_SELF, product, warmup=1, iters=2, limit=35.0, clock=clock)
    assert len(ran) == 3 and times == [10.0, 10.0] and note == ""
    clock.now, ran[:] = 0.0, []
    times, note = peers.timed_within(MPI.COMM_SELF, product, warmup=1, iters=3, limit=5.0, clock=clock)
    assert times == [] and note == "timed out: 0 of 3 timed products within 5 s"


def test_heat_runs_its_smaller_case_within_its_limit(monkeypatch):
    """Heat (faked: its module is not installed here) runs at most HEAT_MAX_SIZE and reports a time-out."""
    clock = FakeClock()
    shapes = []

    class FakeArray:
        def __init__(self, shape):
            self.shape = shape

        def __mul__(self, other):
            return self

        __sub__ = __mul__

    def rand(*shape, **kw):
        shapes.append(shape)
        return FakeArray(shape)

    def matmul(a, b):
        clock.now += 50.0
        return FakeArray((a.shape[0], b.shape[1]))

    fake_heat = SimpleNamespace(float64="f8", float32="f4", random=SimpleNamespace(rand=rand), matmul=matmul)
    monkeypatch.setitem(sys.modules, "heat", fake_heat)
    monkeypatch.setitem(sys.modules, "torch", SimpleNamespace())
    result = peers.heat(MPI.COMM_SELF, CpuBackend(), 16384, 16384, 16384, "float64", warmup=1, iters=3,
                        limit=120.0, clock=clock)
    assert shapes == [(8192, 8192), (8192, 8192)]
    assert result.flops == 2.0 * 8192**3 and result.seconds == 50.0
    assert result.note == "at 8192 (timed out: 1 of 3 timed products within 120 s)"
    assert result.candidates[0]["note"].startswith("timed out")


def test_peer_import_failure_says_why():
    error = peers._unavailable("heat", RuntimeError("no CUDA driver"))
    assert str(error) == "heat does not import (RuntimeError: no CUDA driver)"


def test_bench_without_peers_notes_it(tmp_path, capsys):
    status = bench.bench_main(_ns(cases="float32:32", no_peers=True), RunConfig(device="cpu", out=str(tmp_path / "n.h5")),
                              MPI.COMM_SELF)
    assert status == 0
    out = capsys.readouterr().out
    assert "skipped (--no-peers)" in out and "nan" not in out.lower()


# -- bench transport and report, through the command line ---------------------------------


@pytest.fixture(scope="module")
def mpiexec() -> str:
    return mpiexec_or_skip()


def _hpcmm(mpiexec, ranks, *args, cwd=REPO):
    env = rank_environment("cpu")
    return run_launcher([mpiexec, "-n", str(ranks), sys.executable, "-m", "hpcmm", *args], 180, cwd=cwd, env=env)


def test_bench_transport_on_cpu(mpiexec, tmp_path):
    out = tmp_path / "t.h5"
    proc = _hpcmm(mpiexec, 2, "bench", "transport", "--sizes", "1,2", "--out", str(out))
    assert proc.returncode == 0, proc.stdout
    with h5py.File(out, "r") as f:
        rows = f["transport"][()]
    paths = {r["path"].decode() for r in rows}
    assert {"shm", "mpi", "raw-mpi-host"} <= paths and not paths & {"ipc", "staged", "d2d", "peer"}
    for r in rows:
        assert r["gbps"] == pytest.approx(r["bytes"] / r["seconds"] / 1e9, rel=1e-12)
        assert (r["src"], r["dst"]) == (0, 1)
    assert sorted({int(r["bytes"]) for r in rows}) == [1 << 20, 2 << 20]


def test_bench_transport_between_every_pair(mpiexec, tmp_path):
    """``--pairs all``: each pair of 3 ranks once, every path, and a matrix per path at the largest size."""
    out = tmp_path / "t.h5"
    proc = _hpcmm(mpiexec, 3, "bench", "transport", "--pairs", "all", "--sizes", "1,2", "--out", str(out))
    assert proc.returncode == 0, proc.stdout
    with h5py.File(out, "r") as f:
        rows = f["transport"][()]
    for path in ("shm", "mpi", "raw-mpi-host"):
        pairs = sorted((int(r["src"]), int(r["dst"]), int(r["bytes"])) for r in rows if r["path"].decode() == path)
        assert pairs == [(s, d, b) for s, d in ((0, 1), (0, 2), (1, 2)) for b in (1 << 20, 2 << 20)], (path, pairs)
        assert f"{path} at 2 MiB, GB/s (row: sending rank, column: receiving rank)" in proc.stdout
    matrix = proc.stdout.split("shm at 2 MiB")[1].splitlines()[2:5]  # the header line, then ranks 0, 1, 2
    cells = [line.split()[1:] for line in matrix]
    assert [c[0] for c in cells] == ["-", "-", "-"] and cells[2] == ["-", "-", "-"]  # no pair twice, none to itself
    assert all(float(v) > 0 for v in (cells[0][1], cells[0][2], cells[1][2]))


def test_report_reads_back_a_run(mpiexec, tmp_path):
    out = tmp_path / "r.h5"
    config = RunConfig(m=24, n=16, k=20, device="cpu", warmup=0, iters=2, out=str(out))
    result = hpcmm.run(config, comm=MPI.COMM_SELF)
    proc = run_launcher([sys.executable, "-m", "hpcmm", "report", str(out), "--plot", str(tmp_path / "t.png")],
                        120, env=dict(quiet_environment(), PYTHONPATH=str(REPO)))
    assert proc.returncode == 0, proc.stdout
    assert f"{result.summary['seconds']:.4f}" in proc.stdout
    assert "PASSED" in proc.stdout and "host overhead" in proc.stdout
    assert (tmp_path / "t.png").stat().st_size > 0


# -- the results file is published whole ---------------------------------------------------


def test_final_name_never_holds_a_partial_file(tmp_path, monkeypatch):
    """While the file is written, and after a failure half-way, nothing is under the final name."""
    out = tmp_path / "whole.h5"
    seen = []
    original = h5io.write_results

    def write_then_fail(tmp, meta):
        original(tmp, meta)
        seen.append((os.path.exists(out), tmp != str(out)))
        raise OSError("disk full")

    monkeypatch.setattr(h5io, "write_results", write_then_fail)
    with pytest.raises(hpcmm.HpcmmError, match="disk full"):
        hpcmm.run(RunConfig(m=9, n=7, k=5, device="cpu", warmup=0, iters=1, out=str(out)), comm=MPI.COMM_SELF)
    assert seen == [(False, True)]
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".partial")]


def test_the_hpcmm_candidate_names_cublaslt_where_its_shape_took_it():
    """Where hpcmm's GEMM took cuBLASLt for the case's shape (hpcmm.execution.gemm_library), its candidate says so."""
    from hpcmm.bench.reference import measure_candidates

    case = bench.parse_cases("float64:16x8x24")[0]

    class Planned(CpuBackend):
        def __init__(self, library):
            super().__init__()
            self.library = library

        def gemm_rows(self):
            return [{"m": 16, "n": 8, "w": 24, "library": self.library}, {"m": 16, "n": 8, "w": 3, "library": "cublaslt"}]

    def timer(candidate, product, warmup, repeats):
        product()
        return [1.0] * repeats

    for library, suffix in (("cublaslt", " (cuBLASLt)"), ("gemmex", "")):
        rows = measure_candidates(Planned(library), case, warmup=0, repeats=1, timer=timer)
        assert [r["candidate"] for r in rows if r["library"] == "hpcmm"] == ["hpcmm gemm A:F B:C" + suffix]
        assert all("cuBLASLt" not in r["candidate"] for r in rows if r["library"] != "hpcmm")


def test_hpcmm_its_candidates_and_cublasmp_are_timed_alike(tmp_path, monkeypatch, no_peer_packages):
    """With `--warmup 1 --iters 3` asked, hpcmm's run, its one-device candidates and cuBLASMp's final
    measurement all take cuBLASMp's protocol: 2 untimed products, then the median of 5."""
    from hpcmm.bench.peers import CUBLASMP_MIN_ITERS, CUBLASMP_WARMUP, PeerResult

    seen = {}
    real_run = bench.run

    def run(cfg, comm, write):
        seen["hpcmm"] = (cfg.warmup, cfg.iters)
        return real_run(cfg, comm, write=write)

    def timer(candidate, product, warmup, repeats):
        product()
        seen.setdefault("candidates", 0)
        seen["candidates"] += warmup
        seen.setdefault("rounds", 0)
        seen["rounds"] += repeats
        return [1.0] * repeats

    def cublasmp(comm, backend, m, n, k, dtype, warmup, iters, tf32=False):
        seen["cublasmp"] = (warmup, iters)
        return PeerResult(note="stand-in")

    monkeypatch.setattr(bench, "run", run)
    monkeypatch.setattr(bench, "cublasmp", cublasmp)
    status = bench.bench_main(_ns(cases="float64:40x24x32", reference_timer=timer),
                              RunConfig(device="cpu", out=str(tmp_path / "b.h5"), warmup=1, iters=3), MPI.COMM_SELF)
    assert status == 0
    assert seen["hpcmm"] == seen["cublasmp"] == (CUBLASMP_WARMUP, CUBLASMP_MIN_ITERS) == (2, 5)
    # five candidates, each its warm-ups in its first turn and one timed product per round
    assert (seen["candidates"], seen["rounds"]) == (5 * 2, 5 * 5)
