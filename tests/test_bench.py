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
from launcher import REPO, find_mpiexec, quiet_environment, run_launcher
from mpi4py import MPI

import hpcmm
from hpcmm import bench, h5io, peers
from hpcmm.backend import CpuBackend
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
    assert "one host (numpy)" in captured.err and "hosts" in captured.out and "numpy" in captured.out
    assert "heat not installed" in captured.out
    assert "cuBLASMp needs CUDA devices" in captured.out
    assert "—" in captured.out
    with h5py.File(out, "r") as f:
        assert f.attrs["kind"] == "bench"
        rows = f["bench"][()]
    assert len(rows) == 2
    for row in rows:
        assert row["device"].decode() == "cpu" and row["reference"].decode() == "one host (numpy)"
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
    from hpcmm.report import report_main

    out = tmp_path / "b.h5"
    bench.bench_main(_ns(cases="float64:24", no_peers=True), RunConfig(device="cpu", out=str(out)), MPI.COMM_SELF)
    with h5py.File(out, "r") as f:
        assert np.isnan(f["bench"]["efficiency"][0])
    capsys.readouterr()
    assert report_main(argparse.Namespace(file=str(out), plot=None, iteration=None)) == 0
    text = capsys.readouterr().out
    header, row = text.splitlines()[:2]
    assert "nan" not in text.lower()
    assert row.split("  ")[header.split("  ").index("efficiency")] == "—"


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
    assert gpu["reference"] == "one GPU (cupy)"
    cpu = bench.bench_row(case, summary, ranks=4, devices=1, on_gpu=False, reference=0.8)
    assert np.isnan(cpu["efficiency"]) and cpu["hpcmm_over_reference"] == pytest.approx(1.6, rel=1e-12)
    row = dict(cpu, cublasmp_tflops=float("nan"), hpcmm_over_cublasmp=float("nan"), cublasmp_note="x",
               heat_tflops=float("nan"), hpcmm_over_heat=float("nan"), heat_note="heat not installed")
    lines = bench.format_table([row], "f.h5")
    assert "GPU" not in "\n".join(lines) and "nan" not in "\n".join(lines) and "1.60" in lines[1]


def test_reference_times_the_same_work():
    """The CPU reference: data as hpcmm's, the given warm-up and timed products, a median."""
    case = bench.parse_cases("complex64:16x8x24")[0]
    calls = []
    be = CpuBackend()
    original = np.matmul

    def counting(a, b, out=None):
        calls.append((a.dtype, bool(np.any(a.imag != 0)), float(np.abs(a).max())))
        return original(a, b, out=out)

    np.matmul = counting
    try:
        seconds = bench.reference_seconds(be, case, warmup=2, iters=5)
    finally:
        np.matmul = original
    assert seconds > 0
    assert len(calls) == 7  # 2 warm-up + 5 timed, as hpcmm's own
    assert all(dtype == np.complex64 and imag for dtype, imag, _ in calls)
    assert all(top <= np.sqrt(2) for _, _, top in calls)


# -- peers: every way they do not run --------------------------------------------------


def test_peers_skip_with_reasons(no_peer_packages):
    be = CpuBackend()
    with pytest.raises(peers.PeerUnavailable, match="cuBLASMp needs CUDA devices"):
        peers.cublasmp_seconds(MPI.COMM_SELF, be, 8, 8, 8, "float64")
    with pytest.raises(peers.PeerUnavailable, match="^heat not installed$"):
        peers.heat_seconds(MPI.COMM_SELF, be, 8, 8, 8, "float64")
    gpu_like = SimpleNamespace(on_gpu=True, describe=lambda: {"gpu_uuid": "x"})
    with pytest.raises(peers.PeerUnavailable, match="not run for float16"):
        peers.cublasmp_seconds(MPI.COMM_SELF, gpu_like, 8, 8, 8, "float16")
    with pytest.raises(peers.PeerUnavailable, match="nvmath-python not installed"):
        peers.cublasmp_seconds(MPI.COMM_SELF, SimpleNamespace(on_gpu=True, device_id=0,
                               describe=lambda: {"gpu_uuid": "x"}), 8, 8, 8, "float64")
    assert bench._peer(peers.heat_seconds, MPI.COMM_SELF, be, 8, 8, 8, "float64")[1] == "heat not installed"


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
    found = find_mpiexec()
    if found is None:
        pytest.skip("no mpiexec beside this Python or on PATH (pip install -e '.[mpich]' brings one)")
    return found


def _hpcmm(mpiexec, ranks, *args, cwd=REPO):
    env = quiet_environment()
    env["HPCMM_DEVICE"] = "cpu"
    env["PYTHONPATH"] = ":".join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
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
