"""What ``hpcmm bench`` prints and writes, figure by figure, and what it refuses.

Written against the mutants that mutation testing of hpcmm/bench/command.py left alive
(docs/mutation.md).  hpcmm's own run, the one-device candidates' clock and both peers are stand-ins
here, so that every figure is known: the lines on stderr and the final table are pinned to the
character, the file's rows field by field.  Two members of one job run as threads
(:class:`~thread_comm.ThreadComm`): which of them measures a device, which one speaks and writes,
and that a refusal on one reaches both.
"""

from __future__ import annotations

import math
import sys
import threading
from types import SimpleNamespace

import h5py
import numpy as np
import pytest
from mpi4py import MPI
from thread_comm import ThreadComm

from hpcmm.bench import command as bench
from hpcmm.bench.peers import HEAT_LIMIT, PeerResult
from hpcmm.config import RunConfig
from hpcmm.errors import HpcmmError, InputError
from hpcmm.execution.backend import CpuBackend

# The candidates' seconds by name (the 'hpcmm gemm' one takes the run's order, FC on a CPU); A:F B:F fails.
SECONDS = {"numpy.matmul A:C B:C": 1e-5, "numpy.matmul A:C B:F": 2e-5, "numpy.matmul A:F B:C": 1.6e-5,
           "hpcmm gemm A:F B:C": 1.2e-5}


def _timer(candidate, product, warmup, repeats):
    if candidate.name == "numpy.matmul A:F B:F":
        raise RuntimeError("stand-in\n failure")
    return [SECONDS[candidate.name]] * repeats


def _summary(case, seconds, verified=True, full=True):
    s = {"seconds": seconds, "tflops": case.flops / seconds / 1e12, "exposed_comm_fraction": 0.125, "panel": 16,
         "prefetch": 2, "paths": ["self", "mpi"], "verified": verified, "residual": 1e-17, "load_imbalance": 0.03, "gemm_order": "A:F B:C"}
    if full:
        s.update(plan_seconds=0.5, host_overhead_fraction=0.0625, verify_detectable=1e-9)
    return s


class _Stand:
    """hpcmm's run and both peers, each recording what it was given."""

    def __init__(self, monkeypatch, seconds):
        self.runs, self.peers = [], []
        self.seconds = seconds  # hpcmm's seconds per case label
        monkeypatch.setattr(bench, "run", self.run)
        monkeypatch.setattr(bench, "cublasmp", self.cublasmp)
        monkeypatch.setattr(bench, "heat", self.heat)

    def run(self, cfg, comm, write=True):
        self.runs.append((cfg, comm, write))
        case = bench.Case(cfg.dtype, cfg.m, cfg.n, cfg.k, cfg.tf32)
        seconds, verified = self.seconds[case.label]
        return SimpleNamespace(summary=_summary(case, seconds, verified, full=verified))

    def cublasmp(self, comm, backend, m, n, k, dtype, warmup, iters, tf32=False):
        self.peers.append(("cublasmp", comm, backend, m, n, k, dtype, warmup, iters, tf32))
        return PeerResult(seconds=2e-5, flops=2.0 * m * n * k, note="stand-in cuBLASMp",
                          candidates=[{"peer": "cublasmp", "seconds": 2e-5}])

    def heat(self, comm, backend, m, n, k, dtype, warmup, iters, limit):
        self.peers.append(("heat", comm, backend, m, n, k, dtype, warmup, iters, limit))
        raise ValueError("stand-in\n heat  failed")


def _plain(row):
    """A row with NaN as a word (NaN equals nothing) and bytes as text."""
    out = {}
    for key, value in row.items():
        value = value.decode() if isinstance(value, bytes) else value
        out[key] = "nan" if isinstance(value, float) and math.isnan(value) else value
    return out


def _file_rows(table):
    return [_plain({name: getattr(row[name], "item", lambda v=row[name]: v)() for name in table.dtype.names})
            for row in table]


def test_a_bench_at_one_rank_prints_and_writes_every_figure(tmp_path, monkeypatch, capsys):
    """Two cases at one rank: the second tf32 and not verified (exit status 1), Heat not run for it."""
    out = tmp_path / "bench.h5"
    first, second = bench.parse_cases("float64:400x300x200;tf32:64")
    stand = _Stand(monkeypatch, {first.label: (8e-6, True), second.label: (5e-5, False)})
    ns = SimpleNamespace(what="gemm", cases="float64:400x300x200;tf32:64", reference_timer=_timer, heat_limit=7.5)
    config = RunConfig(device="cpu", out=str(out), warmup=0, iters=1)
    assert bench.bench_main(ns, config, MPI.COMM_SELF) == 1

    # hpcmm's run: each case's problem and cuBLASMp's counts, quiet, written by bench only
    assert [(c.m, c.n, c.k, c.dtype, c.tf32, c.quiet, c.out, c.warmup, c.iters, comm, write)
            for c, comm, write in stand.runs] == [
        (400, 300, 200, "float64", False, True, str(out), 2, 5, MPI.COMM_SELF, False),
        (64, 64, 64, "float32", True, True, str(out), 2, 5, MPI.COMM_SELF, False)]
    # the peers: cuBLASMp with the run's counts, Heat with the asked ones (at least one warm-up) and its limit
    assert [(p[0], p[1], type(p[2]), *p[3:]) for p in stand.peers] == [
        ("cublasmp", MPI.COMM_SELF, CpuBackend, 400, 300, 200, "float64", 2, 5, False),
        ("heat", MPI.COMM_SELF, CpuBackend, 400, 300, 200, "float64", 1, 1, 7.5),
        ("cublasmp", MPI.COMM_SELF, CpuBackend, 64, 64, 64, "float32", 2, 5, True)]

    captured = capsys.readouterr()
    assert captured.err.splitlines() == [
        "hpcmm bench: float64:400x300x200: hpcmm 6.00 TFLOP/s (GEMM A:F B:C)",
        "hpcmm bench: float64:400x300x200: one host: numpy.matmul A:C B:C 4.80 TFLOP/s",
        "hpcmm bench: float64:400x300x200: one host: numpy.matmul A:C B:F 2.40 TFLOP/s",
        "hpcmm bench: float64:400x300x200: one host: numpy.matmul A:F B:C 3.00 TFLOP/s",
        "hpcmm bench: float64:400x300x200: one host: numpy.matmul A:F B:F — RuntimeError: stand-in failure",
        "hpcmm bench: float64:400x300x200: one host: hpcmm gemm A:F B:C 4.00 TFLOP/s",
        "hpcmm bench: float64:400x300x200: one host: hpcmm 1 rank 6.00 TFLOP/s (best) this run",
        "hpcmm bench: float64:400x300x200: cublasmp 2.40 TFLOP/s stand-in cuBLASMp",
        "hpcmm bench: float64:400x300x200: heat — ValueError: stand-in heat failed",
        "hpcmm bench: float64:400x300x200 ranks=1 hosts=1: 6.00 TFLOP/s, one host: hpcmm 1 rank 6.00 TFLOP/s, "
        "hpcmm / numpy 1.00, exposed 12.50 %, cuBLASMp 2.40 TFLOP/s stand-in cuBLASMp, Heat — ValueError: "
        "stand-in heat failed",
        "hpcmm bench: tf32:64: hpcmm 10.49 GFLOP/s (GEMM A:F B:C)",
        "hpcmm bench: tf32:64: one host: numpy.matmul A:C B:C 52.43 GFLOP/s (best)",
        "hpcmm bench: tf32:64: one host: numpy.matmul A:C B:F 26.21 GFLOP/s",
        "hpcmm bench: tf32:64: one host: numpy.matmul A:F B:C 32.77 GFLOP/s",
        "hpcmm bench: tf32:64: one host: numpy.matmul A:F B:F — RuntimeError: stand-in failure",
        "hpcmm bench: tf32:64: one host: hpcmm gemm A:F B:C 43.69 GFLOP/s",
        "hpcmm bench: tf32:64: one host: hpcmm 1 rank 10.49 GFLOP/s this run",
        "hpcmm bench: tf32:64: cublasmp 26.21 GFLOP/s stand-in cuBLASMp",
        "hpcmm bench: tf32:64 ranks=1 hosts=1: 10.49 GFLOP/s, one host: numpy.matmul A:C B:C 52.43 GFLOP/s, "
        "hpcmm / numpy 0.20, exposed 12.50 %, cuBLASMp 26.21 GFLOP/s stand-in cuBLASMp, Heat — not run for tf32"]
    assert captured.out.splitlines() == [
        "case                       ranks hosts    hpcmm   numpy  ÷numpy  exposed  cuBLASMp     ÷    Heat      ÷  ok",
        "float64:400x300x200            1     1     6.00    6.00    1.00   12.50%      2.40  2.50       —      — yes",
        "tf32:64                        1     1     0.01    0.05    0.20   12.50%      0.03  0.40       —      —  NO",
        "note: cublasmp: stand-in cuBLASMp",
        "note: heat: ValueError: stand-in heat failed",
        "note: heat: not run for tf32",
        "TFLOP/s; ÷numpy = hpcmm / the best one-host rate of the same run (numpy.matmul by operand order, hpcmm's "
        "GEMM call; ranks share the host's cores); ÷ = hpcmm / peer; — = did not run",
        f"figures: {out}"]

    with h5py.File(out, "r") as f:
        assert sorted(f) == ["bench", "peers", "reference", "versions"]
        rows, refs, peer_rows = (_file_rows(f[name][()]) for name in ("bench", "reference", "peers"))
    common = {"ranks": 1, "device": "cpu", "devices": 1, "efficiency": "nan", "exposed_comm_fraction": 0.125,
              "panel": 16, "prefetch": 2, "paths": "self,mpi", "residual": 1e-17, "load_imbalance": 0.03,
              "reference_candidates": 5, "cublasmp_note": "stand-in cuBLASMp"}
    t1, t2 = first.flops / 8e-6 / 1e12, second.flops / 5e-5 / 1e12
    r1, r2 = t1, second.flops / 1e-5 / 1e12
    p1, p2 = first.flops / 2e-5 / 1e12, second.flops / 2e-5 / 1e12
    expected = [
        dict(common, case="float64:400x300x200", dtype="float64", tf32=0, m=400, n=300, k=200, hpcmm_seconds=8e-6,
             hpcmm_tflops=t1, plan_seconds=0.5, reference="one host: hpcmm 1 rank", reference_seconds=8e-6,
             reference_tflops=r1, hpcmm_over_reference=t1 / r1, host_overhead_fraction=0.0625, gemm_order="A:F B:C",
             verified=1, verify_detectable=1e-9, cublasmp_tflops=p1, hpcmm_over_cublasmp=t1 / p1,
             heat_tflops="nan", hpcmm_over_heat="nan", heat_note="ValueError: stand-in heat failed"),
        dict(common, case="tf32:64", dtype="float32", tf32=1, m=64, n=64, k=64, hpcmm_seconds=5e-5,
             hpcmm_tflops=t2, plan_seconds="nan", reference="one host: numpy.matmul A:C B:C", reference_seconds=1e-5,
             reference_tflops=r2, hpcmm_over_reference=t2 / r2, host_overhead_fraction="nan", gemm_order="A:F B:C",
             verified=0, verify_detectable="nan", cublasmp_tflops=p2, hpcmm_over_cublasmp=t2 / p2,
             heat_tflops="nan", hpcmm_over_heat="nan", heat_note="not run for tf32")]
    assert [{key: row[key] for key in sorted(row)} for row in rows] == \
        [{key: pytest.approx(value, rel=1e-12, abs=0) if isinstance(value, float) else value
          for key, value in sorted(row.items())} for row in expected]

    def candidates(case, seconds, best):
        names = [*SECONDS, "hpcmm 1 rank"]
        names.insert(3, "numpy.matmul A:F B:F")
        secs = [*SECONDS.values(), seconds]
        secs.insert(3, "nan")
        orders = [("C", "C"), ("C", "F"), ("F", "C"), ("F", "F"), ("F", "C"), ("F", "C")]
        libraries = ["numpy"] * 4 + ["hpcmm"] * 2
        notes = ["", "", "", "RuntimeError: stand-in failure", "", "this run"]
        return [{"case": case.label, "candidate": name, "library": lib, "a_order": a, "b_order": b, "seconds": s,
                 "note": note, "devices": 1, "tflops": "nan" if s == "nan" else pytest.approx(case.flops / s / 1e12),
                 "best": int(i == best)}
                for i, (name, lib, (a, b), s, note) in enumerate(zip(names, libraries, orders, secs, notes))]

    assert refs == candidates(first, 8e-6, 5) + candidates(second, 5e-5, 0)
    assert peer_rows == [{"case": "float64:400x300x200", "peer": "cublasmp", "seconds": 2e-5},
                         {"case": "tf32:64", "peer": "cublasmp", "seconds": 2e-5}]


def test_without_peers_nothing_runs_and_the_file_has_no_peers_table(tmp_path, monkeypatch, capsys):
    case = bench.parse_cases("float32:48x40x32")[0]
    stand = _Stand(monkeypatch, {case.label: (1e-5, True)})
    out = tmp_path / "np.h5"
    ns = SimpleNamespace(what="gemm", cases=case.label, reference_timer=_timer, no_peers=True)
    assert bench.bench_main(ns, RunConfig(device="cpu", out=str(out)), MPI.COMM_SELF) == 0
    assert stand.peers == []
    text = capsys.readouterr()
    assert "cuBLASMp — skipped (--no-peers), Heat — skipped (--no-peers)" in text.err
    assert "note: cublasmp: skipped (--no-peers)" in text.out and "note: heat: skipped (--no-peers)" in text.out
    with h5py.File(out, "r") as f:
        assert sorted(f) == ["bench", "reference", "versions"]


def test_heat_takes_its_default_limit_where_none_is_given(tmp_path, monkeypatch):
    case = bench.parse_cases("float64:32")[0]
    stand = _Stand(monkeypatch, {case.label: (1e-5, True)})
    ns = SimpleNamespace(what="gemm", cases=case.label, reference_timer=_timer)
    assert bench.bench_main(ns, RunConfig(device="cpu", out=str(tmp_path / "d.h5"), warmup=3, iters=4),
                            MPI.COMM_SELF) == 0
    assert [p[0] for p in stand.peers] == ["cublasmp", "heat"]
    assert stand.peers[1][-3:] == (3, 4, float(HEAT_LIMIT))


def test_bench_transport_runs_the_transport_benchmark(monkeypatch):
    from hpcmm.bench import transport  # noqa: PLC0415

    seen = []
    monkeypatch.setattr(transport, "transport_main", lambda ns, config, comm: seen.append((ns, config, comm)) or 7)
    ns, config = SimpleNamespace(what="transport"), RunConfig(device="cpu")
    assert bench.bench_main(ns, config, MPI.COMM_SELF) == 7
    assert seen == [(ns, config, MPI.COMM_SELF)]


# -- the cases ----------------------------------------------------------------------------


def test_cases_read_as_written():
    assert bench.parse_cases(" float64:12 ; ;tf32:20x30x40;complex64:7") == [
        bench.Case("float64", 12, 12, 12), bench.Case("float32", 20, 30, 40, True), bench.Case("complex64", 7, 7, 7)]
    assert bench.parse_cases("float32:5")[0].tf32 is False
    assert [c.label for c in bench.parse_cases("tf32:8;float32:8x9x10")] == ["tf32:8", "float32:8x9x10"]


@pytest.mark.parametrize("text, message", [
    ("float64:12x13", "--cases item 'float64:12x13': expected DTYPE:N or DTYPE:MxNxK"),
    ("float64:0x4x4", "--cases item 'float64:0x4x4': --m=0: expected an integer >= 1"),
    ("float64:4x0x4", "--cases item 'float64:4x0x4': --n=0: expected an integer >= 1"),
    ("float64:4x4x0", "--cases item 'float64:4x4x0': --k=0: expected an integer >= 1"),
    ("int8:4", "--cases item 'int8:4': "),
    (" ; ", "--cases=' ; ': no case given"),
], ids=["two_sizes", "zero_m", "zero_n", "zero_k", "bad_type", "none"])
def test_a_bad_case_names_itself(text, message):
    with pytest.raises(InputError) as caught:
        bench.parse_cases(text)
    assert str(caught.value).startswith(message)


# -- memory --------------------------------------------------------------------------------


class _Host(CpuBackend):
    def __init__(self, free, uuid=None):
        super().__init__()
        self.free, self.uuid = free, uuid

    def memory_info(self):
        return self.free, 2 * self.free

    def describe(self):
        return {"backend": self.name, **({"gpu_uuid": self.uuid} if self.uuid else {})}


def _topo(comm, rank=0):
    return SimpleNamespace(comm=comm, node_comm=comm, host="node1", rank=rank)


def test_a_reference_that_cannot_fit_is_refused_before_any_case_runs(tmp_path, monkeypatch):
    """A, B and C of float32:100x200x300 take 4 × (100·200 + 100·300 + 300·200) bytes: one byte short is refused."""
    need = 4 * (100 * 200 + 100 * 300 + 300 * 200)
    stand = _Stand(monkeypatch, {"float32:8": (1e-5, True), "float32:100x200x300": (1e-3, True)})
    ns = SimpleNamespace(what="gemm", cases="float32:8;float32:100x200x300", reference_timer=_timer)
    config = RunConfig(device="cpu", out=str(tmp_path / "m.h5"))
    with pytest.raises(InputError) as caught:
        bench._bench_cases(ns, config, MPI.COMM_SELF, _topo(MPI.COMM_SELF), _Host(need - 1))
    assert str(caught.value) == (
        "bench case float32:100x200x300: the one-host reference (A, B and C on one host) does not fit: 1 rank(s) "
        f"per host need {need / 2**30:.2f} GiB of host memory, {(need - 1) / 2**30:.2f} GiB available")
    assert stand.runs == []
    assert bench._bench_cases(ns, config, MPI.COMM_SELF, _topo(MPI.COMM_SELF), _Host(need)) == 0


def test_an_existing_file_is_refused_before_any_work(tmp_path, monkeypatch):
    (tmp_path / "one.h5").write_bytes(b"taken")
    stand = _Stand(monkeypatch, {"float64:8": (1e-5, True)})
    ns = SimpleNamespace(what="gemm", cases="float64:8", reference_timer=_timer, no_peers=True)
    with pytest.raises(HpcmmError, match="exists"):
        bench.bench_main(ns, RunConfig(device="cpu", out=str(tmp_path / "one.h5")), MPI.COMM_SELF)
    assert stand.runs == [] and (tmp_path / "one.h5").read_bytes() == b"taken"


@pytest.mark.parametrize("text, words", [("no room\n for  B", "no room for B"), ("", "MemoryError")],
                         ids=["reason", "no_reason"])
def test_a_reference_out_of_memory_names_the_case(tmp_path, monkeypatch, text, words):
    def timer(candidate, product, warmup, repeats):
        raise MemoryError(text)

    monkeypatch.setattr(bench, "measure_candidates", lambda *a, **k: timer(None, None, 0, 0))
    ns = SimpleNamespace(what="gemm", cases="float64:8", reference_timer=timer)
    with pytest.raises(InputError) as caught:
        bench.bench_main(ns, RunConfig(device="cpu", out=str(tmp_path / "o.h5")), MPI.COMM_SELF)
    assert str(caught.value) == f"bench case float64:8: the one-device reference does not fit in memory ({words})"


# -- two members of one job ---------------------------------------------------------------


class _Voices:
    """stderr and stdout by the member that wrote them."""

    def __init__(self):
        self.lines = []

    def write(self, text):
        self.lines.append((threading.current_thread().name, text))

    def flush(self):
        pass


def _members(monkeypatch, tmp_path, uuids, cases="float64:16x8x24", config=None):
    """Both members bench ``cases``: member i's device is ``uuids[i]`` (None: the host)."""
    case = bench.parse_cases(cases)[0]
    stand = _Stand(monkeypatch, {case.label: (1e-5, True)})
    timed = []

    def timer(candidate, product, warmup, repeats):
        timed.append((threading.current_thread().name, candidate.name))
        return _timer(candidate, product, warmup, repeats)

    voices = _Voices()
    monkeypatch.setattr(sys, "stderr", voices)
    monkeypatch.setattr(sys, "stdout", voices)
    out = tmp_path / "two.h5"
    config = config or RunConfig(device="cpu", out=str(out))
    comm = ThreadComm(2)

    def member(rank):
        threading.current_thread().name = f"member{rank}"
        ns = SimpleNamespace(what="gemm", cases=cases, reference_timer=timer, no_peers=True)
        return bench._bench_cases(ns, config, comm, _topo(comm, rank), _Host(1 << 40, uuids[rank]))

    outcomes = comm.run(member)
    return outcomes, stand, timed, voices, out


def test_each_device_is_measured_once_and_member_zero_alone_speaks(monkeypatch, tmp_path):
    outcomes, stand, timed, voices, out = _members(monkeypatch, tmp_path, ["GPU-a", "GPU-b"])
    assert outcomes == [("returned", 0), ("returned", 0)]
    assert sorted({who for who, _ in timed}) == ["member0", "member1"]
    assert {who for who, _ in voices.lines} == {"member0"}
    with h5py.File(out, "r") as f:
        row = f["bench"][0]
        refs = f["reference"][()]
    # two devices: no 'hpcmm 1 rank' candidate, each candidate's time the mean of both
    assert (row["ranks"], row["devices"]) == (2, 2)
    assert [c.decode() for c in refs["candidate"]] == ["numpy.matmul A:C B:C", "numpy.matmul A:C B:F",
                                                       "numpy.matmul A:F B:C", "numpy.matmul A:F B:F",
                                                       "hpcmm gemm A:F B:C"]
    assert list(refs["devices"]) == [2] * 5
    # hpcmm's run took both members' communicator
    assert [comm.Get_size() for _, comm, _ in stand.runs] == [2, 2]


def test_members_of_one_device_measure_it_once(monkeypatch, tmp_path):
    outcomes, _, timed, _, out = _members(monkeypatch, tmp_path, ["GPU-a", "GPU-a"])
    assert outcomes == [("returned", 0), ("returned", 0)]
    assert {who for who, _ in timed} == {"member0"}
    with h5py.File(out, "r") as f:
        assert f["bench"][0]["devices"] == 1 and list(f["reference"]["devices"]) == [1] * 5


def test_members_on_one_host_without_a_gpu_share_it(monkeypatch, tmp_path):
    outcomes, _, timed, _, out = _members(monkeypatch, tmp_path, [None, None])
    assert outcomes == [("returned", 0), ("returned", 0)]
    assert {who for who, _ in timed} == {"member0"}
    with h5py.File(out, "r") as f:
        assert f["bench"][0]["devices"] == 1


def test_an_existing_file_is_refused_on_every_member_before_any_work(monkeypatch, tmp_path):
    (tmp_path / "two.h5").write_bytes(b"taken")
    outcomes, stand, timed, _, _ = _members(monkeypatch, tmp_path, ["GPU-a", "GPU-b"])
    assert [kind for kind, _ in outcomes] == ["raised", "raised"]
    assert all(isinstance(exc, HpcmmError) and "exists" in str(exc) and str(exc).endswith("(raised by rank 0)")
               for _, exc in outcomes), outcomes
    assert (stand.runs, timed) == ([], [])
    assert (tmp_path / "two.h5").read_bytes() == b"taken"


def test_an_existing_file_is_replaced_where_overwrite_is_asked(monkeypatch, tmp_path):
    with h5py.File(tmp_path / "two.h5", "w") as f:
        f.attrs["kind"] = "bench"
    config = RunConfig(device="cpu", out=str(tmp_path / "two.h5"), overwrite=True)
    outcomes, _, _, _, out = _members(monkeypatch, tmp_path, ["GPU-a", "GPU-b"], config=config)
    assert outcomes == [("returned", 0), ("returned", 0)]
    with h5py.File(out, "r") as f:
        assert f["bench"][0]["devices"] == 2


# -- the table and the line of a GPU run ---------------------------------------------------


def _gpu_row(**kw):
    row = {"case": "float64:8192", "ranks": 8, "device": "gpu", "devices": 4, "hpcmm_tflops": 200.0,
           "reference": "one GPU: cupy.matmul A:C B:C", "reference_tflops": 60.0, "efficiency": 200.0 / 240.0,
           "hpcmm_over_reference": 200.0 / 60.0, "exposed_comm_fraction": 0.0375, "cublasmp_tflops": 150.0,
           "hpcmm_over_cublasmp": 200.0 / 150.0, "cublasmp_note": "", "heat_tflops": 40.0,
           "hpcmm_over_heat": 5.0, "heat_note": "", "verified": 1}
    row.update(kw)
    return row


def test_a_gpu_table_gives_the_efficiency_and_the_best_one_gpu_candidate():
    rows = [_gpu_row(), _gpu_row(case="tf32:4096x2048x1024", reference="one GPU: hpcmm gemm A:F B:C (cuBLASLt)",
                                 efficiency=float("nan"), verified=0, heat_tflops=float("nan"),
                                 hpcmm_over_heat=float("nan"), heat_note="not run for tf32")]
    assert bench.format_table(rows, "g.h5") == [
        "case                       ranks  GPUs    hpcmm   1-GPU    eff.  exposed  cuBLASMp     ÷    Heat      ÷  ok",
        "float64:8192                   8     4   200.00   60.00   83.3%    3.75%    150.00  1.33   40.00    5.0 yes",
        "tf32:4096x2048x1024            8     4   200.00   60.00       —    3.75%    150.00  1.33       —      —  NO",
        "note: heat: not run for tf32",
        "TFLOP/s; eff. = hpcmm / (GPUs x the best one-GPU rate of the same run: best of cupy.matmul by operand "
        "order, hpcmm's GEMM call, hpcmm at 1 rank); ÷ = hpcmm / peer; — = did not run",
        "1-GPU best for float64:8192: cupy.matmul A:C B:C",
        "1-GPU best for tf32:4096x2048x1024: hpcmm gemm A:F B:C (cuBLASLt)",
        "figures: g.h5"]


def test_an_empty_table_is_a_cpu_one():
    assert bench.format_table([], "e.h5")[0].split()[:5] == ["case", "ranks", "hosts", "hpcmm", "numpy"]


def test_a_gpu_line_gives_the_efficiency(capsys):
    bench._print_row(_gpu_row(cublasmp_note="n1", heat_note="n2"))
    bench._print_row(_gpu_row(efficiency=float("nan"), heat_tflops=float("nan")))
    assert capsys.readouterr().err.splitlines() == [
        "hpcmm bench: float64:8192 ranks=8 GPUs=4: 200.00 TFLOP/s, one GPU: cupy.matmul A:C B:C 60.00 TFLOP/s, "
        "efficiency 83.3 %, exposed 3.75 %, cuBLASMp 150.00 TFLOP/s n1, Heat 40.00 TFLOP/s n2",
        "hpcmm bench: float64:8192 ranks=8 GPUs=4: 200.00 TFLOP/s, one GPU: cupy.matmul A:C B:C 60.00 TFLOP/s, "
        "efficiency —, exposed 3.75 %, cuBLASMp 150.00 TFLOP/s , Heat — "]


def test_a_row_without_the_optional_figures_leaves_them_empty():
    case = bench.parse_cases("float32:6x7x8")[0]
    s = _summary(case, 1e-6, full=False)
    del s["gemm_order"]
    row = bench.bench_row(case, s, ranks=1, devices=1, on_gpu=True, reference=2e-6, winner="w")
    assert (row["device"], row["reference"], row["gemm_order"]) == ("gpu", "one GPU: w", "")
    assert all(math.isnan(row[key]) for key in ("plan_seconds", "host_overhead_fraction", "verify_detectable"))
    assert row["efficiency"] == pytest.approx(2.0, rel=1e-12, abs=0)
    assert bench.pick_reference([], case, 1e-6)[0][0]["a_order"] == "F"
    assert bench.pick_reference([], case, 1e-6)[0][0]["b_order"] == "C"
    assert np.isnan(bench.bench_row(case, s, 1, 1, False, 2e-6)["efficiency"])


def test_members_of_one_device_need_its_memory_once(monkeypatch, tmp_path):
    """The first member of a device holds the reference: two members fit where one reference fits."""
    need = 8 * (16 * 8 + 16 * 24 + 24 * 8)
    case = bench.parse_cases("float64:16x8x24")[0]
    stand = _Stand(monkeypatch, {case.label: (1e-5, True)})
    comm = ThreadComm(2)

    def member(rank, free):
        ns = SimpleNamespace(what="gemm", cases=case.label, reference_timer=_timer, no_peers=True)
        return bench._bench_cases(ns, RunConfig(device="cpu", out=str(tmp_path / f"{free}.h5")), comm,
                                  _topo(comm, rank), _Host(free, "GPU-a"))

    assert comm.run(lambda rank: member(rank, need)) == [("returned", 0), ("returned", 0)]
    refused = comm.run(lambda rank: member(rank, need - 1))
    assert [kind for kind, _ in refused] == ["raised", "raised"] and "does not fit" in str(refused[1][1])
    assert len(stand.runs) == 2


def test_a_reference_out_of_memory_on_one_member_fails_both(monkeypatch, tmp_path):
    real = bench.measure_candidates

    def measure(*args, **kwargs):
        if threading.current_thread().name == "member1":
            raise MemoryError("gone")
        return real(*args, **kwargs)

    monkeypatch.setattr(bench, "measure_candidates", measure)
    outcomes, stand, _, _, _ = _members(monkeypatch, tmp_path, ["GPU-a", "GPU-b"])
    assert [kind for kind, _ in outcomes] == ["raised", "raised"]
    assert all(isinstance(exc, InputError) and "the one-device reference does not fit in memory (gone)" in str(exc)
               for _, exc in outcomes), outcomes
    assert stand.runs == []
