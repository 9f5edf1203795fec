"""The peers of ``hpcmm bench``: cuBLASMp's screening and measurement, Heat's limit, the notes, judged in this process.

Written against the mutants of hpcmm/bench/peers.py (docs/mutation.md).  cuBLASMp runs only on GPUs through
nvmath-python; here nvmath-python's distributed Matmul and the few cupy calls around it are stand-ins
(:class:`_Nvmath`, :class:`_Cupy`) on a clock of their own: each product lasts what :func:`lasting` says for
its configuration and its place in the plan's run, so that every figure the peer reports is known exactly.
Pinned: every configuration screened in order with its figure and note, the fastest measured again on a new
plan with the warm-ups and timed products asked for (at least 1 and 5), the note saying how, TF32, the operands
(each rank's slab, uniform in [-1, 1), column-major, the run's type, drawn once for all configurations), a
configuration refused on one rank noted on every rank, none that ran, nvmath-python initialised once, the
refusals word for word, Heat's and the time limit's figures over several ranks, and a result's TFLOP/s and note.
"""

from __future__ import annotations

import contextlib
import sys
import types
import warnings
from types import SimpleNamespace

import numpy as np
import pytest
from mpi4py import MPI
from thread_comm import ThreadComm

from hpcmm.bench import peers
from hpcmm.bench.peers import PeerResult, PeerUnavailable, cublasmp, heat, timed_within
from hpcmm.execution.backend import CpuBackend

DISTS = ["XYX", "YXX", "YXY"]
ALGOS = ["DEFAULT", "SPLIT_P2P", "ATOMIC_P2P", "NO_OVERLAP"]


def lasting(dist: str, algo: str, index: int) -> float:
    """Seconds of a plan's ``index``-th product: 100 s for its first (a warm-up shows), then uneven but exact
    in binary; ``YXX`` with ``ATOMIC_P2P`` is the fastest."""
    if index == 0:
        return 100.0
    base = 2.0 + DISTS.index(dist) + ALGOS.index(algo) / 4
    if (dist, algo) == ("YXX", "ATOMIC_P2P"):
        base = 1.0
    return base + ((index * 5) % 7) / 8


def median_of(dist, algo, warm, count):
    return float(np.median([lasting(dist, algo, i) for i in range(warm, warm + count)]))


class _Cupy:
    """What ``peers.cublasmp`` uses of cupy: streams, each with a clock its products advance, events recorded on a
    stream (``None``: the default stream, where no product runs), a generator."""

    def __init__(self):
        self.default_stream = SimpleNamespace(non_blocking=False, t=0.0)
        cupy = self

        class Event:
            def record(self, stream):
                self.t = (cupy.default_stream if stream is None else stream).t

            def synchronize(self):
                pass

        self.cuda = SimpleNamespace(Stream=lambda non_blocking=False: SimpleNamespace(non_blocking=non_blocking, t=0.0),
                                    Event=Event, get_elapsed_time=lambda start, stop: (stop.t - start.t) * 1e3)
        self.random = SimpleNamespace(default_rng=np.random.default_rng)
        self.asfortranarray = np.asfortranarray
        self.get_default_memory_pool = lambda: SimpleNamespace(free_all_blocks=lambda: None)


class _Nvmath:
    """nvmath-python's distributed Matmul on :class:`_Cupy`'s clock: each plan made is kept in ``plans``."""

    def __init__(self, cupy, size, refuse=lambda dist, algo, rank: False):
        self.size, self.refuse, self.plans, self.initialised = size, refuse, [], []
        self.rank = lambda: 0
        self.slower = lambda rank: 0.0  # seconds each of a rank's products takes beyond lasting()
        nvmath = self

        class Split:
            def __init__(self, name, axis):
                self.name, self.axis = name, axis

            def shape(self, rank, shape):
                if not isinstance(rank, int) or not 0 <= rank < nvmath.size:
                    raise ValueError(f"Slab.shape: no rank {rank!r}")
                local = list(shape)
                local[self.axis] //= nvmath.size
                return tuple(local)

        self.Slab = SimpleNamespace(X=Split("X", 0), Y=Split("Y", 1))

        class Matmul:
            def __init__(self, a, b, distributions, options, stream):
                self.a, self.b, self.stream, self.options = a, b, stream, options
                self.dist = "".join(d.name for d in distributions)
                self.planned, self.executed = 0, 0
                self.rank = nvmath.rank()
                if nvmath.refuse(self.dist, options.algo_type, self.rank):
                    where = f" on rank {self.rank}" if nvmath.size > 1 else ""
                    raise ValueError(f"algorithm {options.algo_type}\n  not   supported for {self.dist}{where}")
                nvmath.plans.append(self)

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                return False

            def plan(self):
                self.planned += 1

            def execute(self, stream):
                assert stream is self.stream and self.planned == 1
                stream.t += lasting(self.dist, self.options.algo_type, self.executed) + nvmath.slower(self.rank)
                self.executed += 1
                return object()

        class Options:
            def __init__(self, algo_type, compute_type=None):
                self.algo_type, self.compute_type = algo_type, compute_type

        self.advanced = SimpleNamespace(
            Matmul=Matmul, MatmulOptions=Options, MatmulAlgoType=SimpleNamespace(**{a: a for a in ALGOS}),
            MatmulComputeType=SimpleNamespace(COMPUTE_32F_FAST_TF32="tf32"))

    def install(self, monkeypatch):
        root = types.ModuleType("nvmath")
        distributed = types.ModuleType("nvmath.distributed")
        distributed.initialize = lambda device, comm, backends: self.initialised.append((device, comm, backends))
        distribution = types.ModuleType("nvmath.distributed.distribution")
        distribution.Slab = self.Slab
        linalg = types.ModuleType("nvmath.distributed.linalg")
        linalg.advanced = self.advanced
        root.distributed, distributed.distribution, distributed.linalg = distributed, distribution, linalg
        for name, module in (("nvmath", root), ("nvmath.distributed", distributed),
                             ("nvmath.distributed.distribution", distribution),
                             ("nvmath.distributed.linalg", linalg)):
            monkeypatch.setitem(sys.modules, name, module)
        monkeypatch.setattr(peers, "_NVMATH_READY", False)


def _gpu(cupy, uuid="GPU-a", device_id=3):
    return SimpleNamespace(on_gpu=True, device_id=device_id, cupy=cupy, device=contextlib.nullcontext(),
                           describe=lambda: {"gpu_uuid": uuid})


@pytest.fixture
def one_gpu(monkeypatch):
    cupy = _Cupy()
    nvmath = _Nvmath(cupy, 1)
    nvmath.install(monkeypatch)
    return cupy, nvmath


# -- cuBLASMp -----------------------------------------------------------------------------------------------


def test_every_configuration_is_screened_and_the_fastest_measured_again(one_gpu):
    cupy, nvmath = one_gpu
    result = cublasmp(MPI.COMM_SELF, _gpu(cupy), 12, 10, 8, "float32")
    screened = [(d, a) for d in DISTS for a in ALGOS]
    assert result.candidates == [
        {"peer": "cublasmp", "distribution": d, "algo": a, "phase": "screen", "seconds": median_of(d, a, 1, 2),
         "note": ""} for d, a in screened] + [
        {"peer": "cublasmp", "distribution": "YXX", "algo": "ATOMIC_P2P", "phase": "final",
         "seconds": median_of("YXX", "ATOMIC_P2P", 2, 5), "note": "median of 5 after 2 warm-up"}]
    assert result.seconds == median_of("YXX", "ATOMIC_P2P", 2, 5)
    assert result.flops == 2.0 * 12 * 10 * 8
    assert result.note == "Matmul Slab YXX algo ATOMIC_P2P, best of 12; plan once, 2 warm-up, median of 5"
    # each configuration on a plan of its own, planned once: 1 warm-up and 2 timed products, the final 2 and 5
    assert [(p.dist, p.options.algo_type, p.planned, p.executed) for p in nvmath.plans] == [
        (d, a, 1, 3) for d, a in screened] + [("YXX", "ATOMIC_P2P", 1, 7)]
    assert all(p.options.compute_type is None for p in nvmath.plans)
    assert nvmath.initialised == [(3, MPI.COMM_SELF, ["nvshmem", "nccl"])]


def test_the_operands_are_drawn_once_in_each_slab(one_gpu):
    """A is m x k, B k x n, each in the slab of its distribution, uniform in [-1, 1), column-major, of the case's
    type; every configuration multiplies the same numbers."""
    cupy, nvmath = one_gpu
    cublasmp(MPI.COMM_SELF, _gpu(cupy), 12, 10, 8, "float32")
    for p in nvmath.plans:
        assert p.a.shape == (12, 8) and p.b.shape == (8, 10)
        for x in (p.a, p.b):
            assert x.dtype == np.float32 and x.flags.f_contiguous and not x.flags.c_contiguous
            assert -1 <= x.min() < -0.5 and 0.5 < x.max() < 1 and abs(x.mean()) < 0.3
    first = {}
    for p in nvmath.plans:
        for which, split, x in (("A", p.dist[0], p.a), ("B", p.dist[1], p.b)):
            assert np.array_equal(first.setdefault((which, split), x), x)
    assert not np.array_equal(first[("A", "X")], first[("A", "Y")])


def test_tf32_and_the_counts_asked_for(one_gpu):
    """TF32 asks for the fast TF32 compute type; at least 1 warm-up and 5 timed products whatever is asked."""
    cupy, nvmath = one_gpu
    result = cublasmp(MPI.COMM_SELF, _gpu(cupy), 8, 8, 8, "float32", warmup=0, iters=4, tf32=True,
                      distributions=[("Y", "X", "X")], algos=["ATOMIC_P2P"])
    assert all(p.options.compute_type == "tf32" for p in nvmath.plans)
    # one configuration: nothing to screen, its row says 0 s
    assert [(r["phase"], r["seconds"]) for r in result.candidates] == [
        ("screen", 0.0), ("final", median_of("YXX", "ATOMIC_P2P", 1, 5))]
    assert [(p.planned, p.executed) for p in nvmath.plans] == [(1, 6)]
    assert result.note == "Matmul Slab YXX algo ATOMIC_P2P, best of 1; plan once, 1 warm-up, median of 5"
    assert result.candidates[-1]["note"] == "median of 5 after 1 warm-up"
    result = cublasmp(MPI.COMM_SELF, _gpu(cupy), 8, 8, 8, "float64", warmup=3, iters=7,
                      distributions=[("Y", "X", "X")], algos=["ATOMIC_P2P"])
    assert result.note.endswith("plan once, 3 warm-up, median of 7")
    assert result.seconds == median_of("YXX", "ATOMIC_P2P", 3, 7)
    assert nvmath.plans[-1].options.compute_type is None and nvmath.plans[-1].a.dtype == np.float64
    assert len(nvmath.initialised) == 1  # nvmath-python is initialised once per process


def test_a_refused_configuration_is_noted_and_passed_over(monkeypatch):
    cupy = _Cupy()
    nvmath = _Nvmath(cupy, 1, refuse=lambda dist, algo, rank: (dist, algo) in {("YXX", "ATOMIC_P2P"), ("XYX", "DEFAULT")})
    nvmath.install(monkeypatch)
    result = cublasmp(MPI.COMM_SELF, _gpu(cupy), 8, 8, 8, "float64", distributions=[("Y", "X", "X"), ("X", "Y", "X")],
                      algos=["ATOMIC_P2P", "DEFAULT"])
    rows = result.candidates
    assert [(r["distribution"], r["algo"], r["note"]) for r in rows[:4]] == [
        ("YXX", "ATOMIC_P2P", "ValueError: algorithm ATOMIC_P2P not supported for YXX"),
        ("YXX", "DEFAULT", ""), ("XYX", "ATOMIC_P2P", ""),
        ("XYX", "DEFAULT", "ValueError: algorithm DEFAULT not supported for XYX")]
    assert np.isnan(rows[0]["seconds"]) and np.isnan(rows[3]["seconds"])
    assert rows[1]["seconds"] == median_of("YXX", "DEFAULT", 1, 2)
    assert rows[2]["seconds"] == median_of("XYX", "ATOMIC_P2P", 1, 2) < rows[1]["seconds"]
    assert (rows[4]["distribution"], rows[4]["algo"], rows[4]["phase"]) == ("XYX", "ATOMIC_P2P", "final")
    assert result.note.startswith("Matmul Slab XYX algo ATOMIC_P2P, best of 4;")


def test_a_long_reason_is_cut_to_200_characters(monkeypatch):
    cupy = _Cupy()
    nvmath = _Nvmath(cupy, 1, refuse=lambda dist, algo, rank: dist == "XYX")
    nvmath.install(monkeypatch)
    original = nvmath.advanced.Matmul.__init__

    def init(self, a, b, distributions, options, stream):
        if distributions[0].name == "X":
            raise RuntimeError("w" * 150 + "\n " + "z" * 150)
        original(self, a, b, distributions, options, stream)

    monkeypatch.setattr(nvmath.advanced.Matmul, "__init__", init)
    result = cublasmp(MPI.COMM_SELF, _gpu(cupy), 8, 8, 8, "float64", distributions=[("X", "Y", "X"), ("Y", "X", "X")],
                      algos=["DEFAULT"])
    assert result.candidates[0]["note"] == "RuntimeError: " + "w" * 150 + " " + "z" * 49


def test_no_configuration_that_ran_is_unavailable_with_every_reason(monkeypatch):
    cupy = _Cupy()
    nvmath = _Nvmath(cupy, 1, refuse=lambda dist, algo, rank: True)
    nvmath.install(monkeypatch)
    with pytest.raises(PeerUnavailable) as info:
        cublasmp(MPI.COMM_SELF, _gpu(cupy), 8, 8, 8, "float64", distributions=[("Y", "X", "X"), ("X", "Y", "X")],
                 algos=["NO_OVERLAP"])
    assert str(info.value) == ("no configuration ran: YXX/NO_OVERLAP: ValueError: algorithm NO_OVERLAP not supported"
                               " for YXX; XYX/NO_OVERLAP: ValueError: algorithm NO_OVERLAP not supported for XYX")


def test_two_ranks_note_rank_0s_reason_and_keep_the_slower_ranks_figures(monkeypatch):
    """``XYX`` refused on both ranks, each with its own reason: both note rank 0's and pass it over; rank 1's
    products take 1 s longer, so every figure is rank 1's."""
    comm = ThreadComm(2)
    cupies = [_Cupy(), _Cupy()]
    nvmath = _Nvmath(None, 2, refuse=lambda dist, algo, rank: dist == "XYX")
    nvmath.rank = comm.Get_rank
    nvmath.slower = lambda rank: 1.0 * rank  # rank 1: 1 s more a product
    nvmath.install(monkeypatch)
    outcomes = comm.run(lambda rank: cublasmp(comm, _gpu(cupies[rank], uuid=f"GPU-{rank}", device_id=rank),
                                              8, 12, 4, "float64", distributions=[("X", "Y", "X"), ("Y", "X", "X")],
                                              algos=["DEFAULT"]))
    assert [kind for kind, _ in outcomes] == ["returned", "returned"], outcomes
    for _, result in outcomes:
        rows = result.candidates
        assert rows[0]["note"] == "ValueError: algorithm DEFAULT not supported for XYX on rank 0"
        assert np.isnan(rows[0]["seconds"])
        assert rows[1]["seconds"] == median_of("YXX", "DEFAULT", 1, 2) + 1
        assert result.seconds == median_of("YXX", "DEFAULT", 2, 5) + 1
    # each rank's slab: A (8 x 4) split by columns (Y), B (4 x 12) by rows (X)
    assert {(p.dist, p.a.shape, p.b.shape) for p in nvmath.plans} == {("YXX", (8, 2), (2, 12))}


def test_each_operand_is_the_slab_of_its_own_distribution(monkeypatch):
    """On two ranks A (8 x 4) and B (4 x 12) take the slabs their distribution names: X splits rows, Y columns."""
    comm = ThreadComm(2)
    nvmath = _Nvmath(None, 2)
    nvmath.rank = comm.Get_rank
    nvmath.install(monkeypatch)
    comm.run(lambda rank: cublasmp(comm, _gpu(_Cupy(), uuid=f"GPU-{rank}", device_id=rank), 8, 12, 4, "float32",
                                   distributions=[("X", "Y", "X"), ("Y", "X", "Y")], algos=["DEFAULT"]))
    slab = {"A": {"X": (4, 4), "Y": (8, 2)}, "B": {"X": (2, 12), "Y": (4, 6)}}
    assert len(nvmath.plans) == 6  # two screened, one final, on each rank
    for p in nvmath.plans:
        assert (p.a.shape, p.b.shape) == (slab["A"][p.dist[0]], slab["B"][p.dist[1]]), p.dist


@pytest.mark.parametrize("backend, dtype, shape, message", [
    (CpuBackend(), "float64", (8, 8, 8), "not run: cuBLASMp needs CUDA devices"),
    (SimpleNamespace(on_gpu=True, describe=lambda: {"gpu_uuid": "a"}), "complex64", (8, 8, 8), "not run for complex64"),
    (SimpleNamespace(on_gpu=True, describe=lambda: {"gpu_uuid": "a"}), "int8", (8, 8, 8), "not run for int8"),
], ids=["cpu", "complex64", "int8"])
def test_cublasmp_refusals_on_one_rank(backend, dtype, shape, message):
    with pytest.raises(PeerUnavailable) as info:
        cublasmp(MPI.COMM_SELF, backend, *shape, dtype)
    assert str(info.value) == message


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16", "bfloat16"])
def test_cublasmp_takes_the_real_types(one_gpu, dtype):
    cupy, nvmath = one_gpu
    result = cublasmp(MPI.COMM_SELF, _gpu(cupy), 8, 8, 8, dtype, distributions=[("Y", "X", "X")], algos=["DEFAULT"])
    assert result.flops == 2.0 * 8**3 and len(nvmath.plans) == 1


@pytest.mark.parametrize("uuids, shape, message", [
    (["GPU-a", "GPU-a"], (8, 8, 8), "NCCL allows one rank per GPU (2 ranks on 1 GPUs)"),
    (["GPU-a", "GPU-b"], (9, 8, 8), "Slab distributions need m, n, k divisible by 2"),
    (["GPU-a", "GPU-b"], (8, 9, 8), "Slab distributions need m, n, k divisible by 2"),
    (["GPU-a", "GPU-b"], (8, 8, 9), "Slab distributions need m, n, k divisible by 2"),
], ids=["one_gpu_two_ranks", "m", "n", "k"])
def test_cublasmp_refusals_on_two_ranks(monkeypatch, uuids, shape, message):
    monkeypatch.setitem(sys.modules, "nvmath", None)
    comm = ThreadComm(2)
    outcomes = comm.run(lambda rank: cublasmp(comm, _gpu(None, uuid=uuids[rank]), *shape, "float64"))
    assert [(kind, type(error), str(error)) for kind, error in outcomes] == [("raised", PeerUnavailable, message)] * 2


def test_nvmath_that_does_not_import_says_why(monkeypatch):
    def failing_import(name, *args, **kwargs):
        if name.startswith("nvmath"):
            raise OSError("libcublasMp.so.0: cannot open shared object file")
        return real_import(name, *args, **kwargs)

    real_import = __builtins__["__import__"] if isinstance(__builtins__, dict) else __builtins__.__import__
    monkeypatch.setattr("builtins.__import__", failing_import)
    with pytest.raises(PeerUnavailable) as info:
        cublasmp(MPI.COMM_SELF, _gpu(None), 8, 8, 8, "float64")
    assert str(info.value) == ("nvmath-python does not import (OSError: libcublasMp.so.0: cannot open shared object"
                               " file)")


# -- the results ------------------------------------------------------------------------------------------


def test_tflops_of_a_result():
    assert PeerResult(seconds=2.0, flops=6e12).tflops == 3.0
    for seconds in (0.0, -1.0, float("nan")):
        assert np.isnan(PeerResult(seconds=seconds, flops=6e12).tflops)
    assert np.isnan(PeerResult().tflops) and PeerResult().note == "" and PeerResult().candidates == []
    assert PeerResult().candidates is not PeerResult().candidates


def test_a_failed_peers_note():
    assert PeerResult.failed(PeerUnavailable("heat not installed")).note == "heat not installed"
    assert PeerResult.failed(RuntimeError("out of\n  memory\tnow")).note == "RuntimeError: out of memory now"
    long = PeerResult.failed(ValueError("x" * 400))
    assert long.note == "ValueError: " + "x" * 288 and np.isnan(long.seconds) and np.isnan(long.flops)
    assert PeerResult.failed(PeerUnavailable("y" * 301)).note == "y" * 300


def test_complex_products_count_four_times_the_operations(monkeypatch):
    assert peers._flops(2, 3, 4, "complex128") == 8.0 * 24 and peers._flops(2, 3, 4, "float32") == 2.0 * 24


# -- the time limit and Heat over several ranks ---------------------------------------------------------------


def test_the_time_limit_goes_by_the_slowest_rank(monkeypatch):
    """Rank 1's products take 10 s, rank 0's 4 s: both stop where another 10 s would pass 35 s since the start,
    and both keep rank 1's times (the clocks read 1000 and 5000 at the start)."""
    comm = ThreadComm(2)
    clocks = [[1000.0], [5000.0]]

    def body(rank):
        def product():
            clocks[rank][0] += 10.0 if rank == 1 else 4.0

        return timed_within(comm, product, warmup=1, iters=5, limit=35.0, clock=lambda: clocks[rank][0])

    outcomes = comm.run(body)
    assert outcomes == [("returned", ([10.0, 10.0], "timed out: 2 of 5 timed products within 35 s"))] * 2


def test_the_time_limit_is_not_reached_by_the_last_product(monkeypatch):
    """A product that would end past the limit is still run when it is the last one asked for."""
    clock = [0.0]

    def product():
        clock[0] += 10.0

    times, note = timed_within(MPI.COMM_SELF, product, warmup=0, iters=3, limit=25.0, clock=lambda: clock[0])
    assert times == [10.0, 10.0] and note == "timed out: 2 of 3 timed products within 25 s"
    clock[0] = 0.0
    times, note = timed_within(MPI.COMM_SELF, product, warmup=0, iters=3, limit=30.0, clock=lambda: clock[0])
    assert times == [10.0, 10.0, 10.0] and note == ""
    clock[0] = 0.0
    times, note = timed_within(MPI.COMM_SELF, product, warmup=2, iters=1, limit=15.0, clock=lambda: clock[0])
    assert times == [] and note == "timed out: 0 of 1 timed products within 15 s"


def _fake_heat(monkeypatch, clock, seconds=5.0, multiplied=None):
    """Heat whose arrays are numpy's (uniform in [0, 1) as ``ht.random.rand``'s) and whose products take
    ``seconds`` on ``clock``; ``multiplied`` collects the operands of each product."""
    made = []
    rng = np.random.default_rng(5)

    def rand(*shape, dtype, split, device):
        made.append((shape, dtype, split, device))
        return rng.random(shape)

    def matmul(a, b):
        clock[0] += seconds
        if multiplied is not None:
            multiplied.append((a, b))
        return a @ b

    monkeypatch.setitem(sys.modules, "heat", SimpleNamespace(float64="f8", float32="f4",
                                                            random=SimpleNamespace(rand=rand), matmul=matmul))
    monkeypatch.setitem(sys.modules, "torch", SimpleNamespace())
    return made


@pytest.mark.parametrize("dtype, kind", [("float64", "f8"), ("float32", "f4")], ids=["float64", "float32"])
def test_heat_runs_row_split_operands_of_the_case(monkeypatch, dtype, kind):
    clock, multiplied = [0.0], []
    made = _fake_heat(monkeypatch, clock, multiplied=multiplied)
    result = heat(MPI.COMM_SELF, CpuBackend(), 30, 20, 10, dtype, clock=lambda: clock[0])
    assert made == [((30, 10), kind, 0, "cpu"), ((10, 20), kind, 0, "cpu")]
    assert clock[0] == 20.0  # 1 warm-up and 3 timed products by default
    for a, b in multiplied:  # uniform in [-1, 1)
        for x in (a, b):
            assert -1 <= x.min() < -0.8 and 0.8 < x.max() < 1 and abs(x.mean()) < 0.2
    assert result.seconds == 5.0 and result.flops == 2.0 * 30 * 20 * 10 and result.note == "at 30x20x10"
    assert result.candidates == [{"peer": "heat", "distribution": "split 0 x split 0", "algo": "ht.matmul",
                                  "phase": "final", "seconds": 5.0, "note": ""}]


def test_heat_of_a_square_case_within_its_limit(monkeypatch):
    clock = [0.0]
    _fake_heat(monkeypatch, clock)
    result = heat(MPI.COMM_SELF, CpuBackend(), 16, 16, 16, "float64", warmup=2, iters=2, limit=1000.0,
                  max_size=10, clock=lambda: clock[0])
    assert result.note == "at 10" and result.flops == 2.0 * 1000 and clock[0] == 20.0


def test_heat_that_times_nothing_says_so(monkeypatch):
    clock = [0.0]
    _fake_heat(monkeypatch, clock, seconds=50.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning of a median of nothing
        result = heat(MPI.COMM_SELF, CpuBackend(), 16, 16, 16, "float32", warmup=1, iters=3, limit=60.0,
                      clock=lambda: clock[0])
    assert np.isnan(result.seconds) and result.flops == 2.0 * 16**3
    assert result.note == "at 16: timed out: 0 of 3 timed products within 60 s"
    assert np.isnan(result.candidates[0]["seconds"]) and result.candidates[0]["note"].startswith("timed out: 0")


@pytest.mark.parametrize("dtype", ["complex128", "float16"])
def test_heat_refuses_other_types(monkeypatch, dtype):
    _fake_heat(monkeypatch, [0.0])
    with pytest.raises(PeerUnavailable) as info:
        heat(MPI.COMM_SELF, CpuBackend(), 8, 8, 8, dtype)
    assert str(info.value) == f"not run for {dtype}"


def test_heat_that_does_not_import_says_why(monkeypatch):
    monkeypatch.setitem(sys.modules, "heat", None)
    with pytest.raises(PeerUnavailable) as info:
        heat(MPI.COMM_SELF, CpuBackend(), 8, 8, 8, "float64")
    assert str(info.value) == "heat not installed"


def test_heat_on_a_gpu_runs_on_the_ranks_device_and_waits_for_each_product(monkeypatch):
    clock = [0.0]
    made = _fake_heat(monkeypatch, clock)
    cuda = SimpleNamespace(devices=[], synchronized=[])
    cuda.set_device = cuda.devices.append
    cuda.synchronize = lambda: cuda.synchronized.append(clock[0])
    monkeypatch.setitem(sys.modules, "torch", SimpleNamespace(cuda=cuda))
    result = heat(MPI.COMM_SELF, SimpleNamespace(on_gpu=True, device_id=2), 8, 8, 8, "float64", warmup=1, iters=2,
                  clock=lambda: clock[0])
    assert cuda.devices == [2] and [m[3] for m in made] == ["gpu", "gpu"]
    assert cuda.synchronized == [5.0, 10.0, 15.0]  # after each product, before its time is read
    assert result.seconds == 5.0
