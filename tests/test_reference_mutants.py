"""What the bench's one-device reference promises: the candidates, their data, their clock, their verdicts.

Written against the mutants that mutation testing of hpcmm/bench/reference.py left alive
(docs/mutation.md).  On the CPU backend, in pytest's own process: the candidates' names and calls,
the operands every candidate multiplies (the case's type, uniform in [-1, 1) with every part random,
the same for every candidate, fixed by the seed), the product written into one row-major C, hpcmm's
own call without accumulation and with TF32 where the case asks, the default clock, warm-ups and rounds,
the median of the rounds, the notes and NaN of a candidate that cannot run, the mean over devices and
the fastest candidate that ran.
"""

from __future__ import annotations

import numpy as np
import pytest

from hpcmm.bench import reference
from hpcmm.bench.command import Case
from hpcmm.bench.reference import Candidate, best_index, candidates, combine, event_timer, measure_candidates
from hpcmm.execution.backend import CpuBackend

NAMES = ["numpy.matmul A:C B:C", "numpy.matmul A:C B:F", "numpy.matmul A:F B:C", "numpy.matmul A:F B:F",
         "hpcmm gemm A:F B:C"]


class Recording(CpuBackend):
    """The CPU backend, its GEMM calls recorded (operands copied, keyword arguments kept)."""

    def __init__(self):
        super().__init__()
        self.gemms = []

    def gemm(self, a, b, c, accumulate, stream=None, tf32=False):
        self.gemms.append((a.copy(order="K"), b.copy(order="K"), c, dict(accumulate=accumulate, stream=stream,
                                                                          tf32=tf32)))
        return super().gemm(a, b, c, accumulate, stream=stream, tf32=tf32)


def _operands(monkeypatch, case, seed=None, backend=None):
    """Every candidate's ``(name, a, b, out)`` as it multiplies, and the rows measured."""
    seen = []
    real = np.matmul

    def matmul(a, b, out=None):
        seen.append((a.copy(order="K"), b.copy(order="K"), out))
        return real(a, b, out=out)

    monkeypatch.setattr(np, "matmul", matmul)
    backend = backend or Recording()
    products = []

    def timer(candidate, product, warmup, repeats):
        seen.clear()
        backend.gemms.clear()
        product()
        if candidate.call == "gemm":
            ((a, b, c, _),) = backend.gemms
            products.append((candidate.name, a, b, c))
        else:
            ((a, b, out),) = seen
            products.append((candidate.name, a, b, out))
        return [1.0] * repeats

    kwargs = {} if seed is None else {"seed": seed}
    rows = measure_candidates(backend, case, warmup=0, repeats=1, timer=timer, **kwargs)
    return products, rows


def _each_one_second(candidate, product, warmup, repeats):
    product()
    return [1.0] * repeats


# -- the candidates ----------------------------------------------------------------------------


def test_the_candidates_and_their_names():
    assert [c.name for c in candidates(False)] == NAMES
    gpu = candidates(True, "CF")
    assert [c.name for c in gpu] == ["cupy.matmul A:C B:C", "cupy.matmul A:C B:F", "cupy.matmul A:F B:C",
                                     "cupy.matmul A:F B:F", "hpcmm gemm A:C B:F"]
    assert [(c.library, c.call) for c in gpu] == [("cupy", "matmul")] * 4 + [("hpcmm", "gemm")]
    assert Candidate("hpcmm", "run", "F", "C").name == "hpcmm 1 rank"


# -- the data ----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "complex128"])
def test_every_candidate_multiplies_the_same_uniform_operands_in_its_orders(monkeypatch, dtype):
    case = Case(dtype, 24, 20, 28)
    products, rows = _operands(monkeypatch, case)
    assert [name for name, *_ in products] == NAMES and all(r["note"] == "" for r in rows)
    first_a, first_b = products[0][1], products[0][2]
    for name, a, b, out in products:
        order = name.split()[-2:]
        assert (a.dtype, b.dtype) == (np.dtype(dtype), np.dtype(dtype))
        assert (a.shape, b.shape) == ((24, 28), (28, 20))
        assert a.flags.f_contiguous == (order[0] == "A:F") and b.flags.f_contiguous == (order[1] == "B:F")
        assert np.array_equal(a, first_a) and np.array_equal(b, first_b)
        # One row-major C of the case's type, made before the clock: the product writes into it.
        assert out is not None and out.shape == (24, 20) and out.dtype == np.dtype(dtype) and out.flags.c_contiguous
        assert out is products[0][3]
    parts = [first_a, first_b] if dtype == "float32" else [first_a.real, first_a.imag, first_b.real, first_b.imag]
    for part in parts:
        assert part.min() >= -1 and part.max() < 1 and part.min() < -0.8 and part.max() > 0.8
        assert len(np.unique(part)) == part.size  # every value its own draw


def test_the_seed_fixes_the_data(monkeypatch):
    case = Case("float64", 16, 12, 20)
    default = _operands(monkeypatch, case)[0][0]
    seven = _operands(monkeypatch, case, seed=7)[0][0]
    eight = _operands(monkeypatch, case, seed=8)[0][0]
    assert np.array_equal(default[1], seven[1]) and np.array_equal(default[2], seven[2])
    assert not np.array_equal(default[1], eight[1])


def test_hpcmm_s_own_call_overwrites_c_and_takes_tf32_where_the_case_asks(monkeypatch):
    for tf32 in (False, True):
        backend = Recording()
        rows = measure_candidates(backend, Case("float32", 16, 12, 20, tf32), warmup=1, repeats=2,
                                  timer=_each_one_second)
        assert all(r["note"] == "" and r["seconds"] == 1.0 for r in rows), rows  # numpy's candidates run too
        calls = [kwargs for *_, kwargs in backend.gemms]
        assert calls and all(not k["accumulate"] and k["tf32"] == tf32 for k in calls)


# -- the clock ---------------------------------------------------------------------------------


class Clocked(CpuBackend):
    """A backend whose events read a clock that each product advances by its own duration."""

    compute_stream = "compute"

    def __init__(self):
        super().__init__()
        self.compute_stream = "compute"
        self.now = 0.0
        self.events, self.synchronized = [], []

    def event(self, stream=None):
        self.events.append(stream)
        return self.now

    def event_synchronize(self, event):
        self.synchronized.append(event)

    def elapsed(self, start, stop):
        return stop - start


def test_the_event_timer_times_each_product_after_the_warm_ups():
    backend = Clocked()
    durations = iter([5.0, 7.0, 1.0, 2.0, 3.0])

    def product():
        backend.now += next(durations)

    times = event_timer(backend)(candidates(False)[0], product, 2, 3)
    assert times == [1.0, 2.0, 3.0]
    assert backend.events == ["compute"] * 10
    assert backend.synchronized == [5.0, 12.0, 13.0, 15.0, 18.0]  # each product's end


def test_without_a_timer_the_host_clock_times_every_candidate():
    rows = measure_candidates(CpuBackend(), Case("float64", 16, 12, 20), warmup=0, repeats=2)
    assert [r["candidate"] for r in rows] == NAMES
    assert all(r["note"] == "" and 0 < r["seconds"] < 60 for r in rows), rows


def test_the_defaults_one_warm_up_and_three_rounds_and_the_median_of_the_rounds():
    seen = {}
    rounds = {name: iter(values) for name, values in zip(NAMES, ([3.0, 1.0, 2.0], [9.0, 4.0, 5.0], [1.0, 1.0, 7.0],
                                                                  [2.0, 8.0, 6.0], [0.5, 0.25, 0.75]))}

    def timer(candidate, product, warmup, repeats):
        seen.setdefault(candidate.name, []).append((warmup, repeats))
        return [next(rounds[candidate.name])]

    rows = measure_candidates(CpuBackend(), Case("float64", 8, 8, 8), timer=timer)
    assert seen == {name: [(1, 1), (0, 1), (0, 1)] for name in NAMES}
    assert [r["seconds"] for r in rows] == [2.0, 5.0, 1.0, 6.0, 0.5]


@pytest.mark.parametrize(("asked", "taken"), [(0, 1), (-3, 1), (2.7, 2)], ids=["none", "negative", "fraction"])
def test_at_least_one_warm_up(asked, taken):
    seen = []
    measure_candidates(CpuBackend(), Case("float64", 8, 8, 8), warmup=asked, repeats=1,
                       timer=lambda cand, product, warmup, repeats: seen.append(warmup) or [1.0])
    assert seen == [taken] * 5


# -- candidates that do not run ----------------------------------------------------------------


def test_a_failing_candidate_is_noted_and_not_timed_again_and_the_rest_run_on():
    calls = {}

    def timer(candidate, product, warmup, repeats):
        calls[candidate.name] = calls.get(candidate.name, 0) + 1
        if candidate.name == NAMES[1] or (candidate.name == NAMES[3] and calls[candidate.name] == 2):
            raise RuntimeError("the library\n   said  no " + "x" * 300)
        return [1.0]

    rows = measure_candidates(CpuBackend(), Case("float64", 8, 8, 8), warmup=1, repeats=4, timer=timer)
    assert calls == {NAMES[0]: 4, NAMES[1]: 1, NAMES[2]: 4, NAMES[3]: 2, NAMES[4]: 4}
    note = ("RuntimeError: " + ("the library said no " + "x" * 300)[:200])
    assert [(np.isnan(r["seconds"]), r["note"]) for r in rows] == [
        (False, ""), (True, note), (False, ""), (True, note), (False, "")]
    assert rows[0]["seconds"] == 1.0


def test_a_candidate_whose_operands_cannot_be_laid_out_is_noted(monkeypatch):
    def no_memory(array):
        raise MemoryError("out of\n  memory " + "y" * 300)

    monkeypatch.setattr(np, "asfortranarray", no_memory)
    rows = measure_candidates(CpuBackend(), Case("float64", 8, 8, 8), warmup=1, repeats=1,
                              timer=_each_one_second)
    note = ("MemoryError: " + ("out of memory " + "y" * 300)[:200])
    assert [r["note"] for r in rows] == ["", note, note, note, note]
    assert rows[0]["seconds"] == 1.0 and all(np.isnan(r["seconds"]) for r in rows[1:])


def test_numpy_s_candidates_skip_bfloat16_and_hpcmm_s_call_runs():
    pytest.importorskip("ml_dtypes")
    rows = measure_candidates(CpuBackend(), Case("bfloat16", 8, 8, 8), warmup=1, repeats=1,
                              timer=_each_one_second)
    assert [(r["note"], np.isnan(r["seconds"])) for r in rows] == [("numpy has no bfloat16 GEMM", True)] * 4 + [
        ("", False)]


# -- over devices and the fastest --------------------------------------------------------------


def _row(name, seconds, note=""):
    return {"candidate": name, "library": "numpy", "a_order": "C", "b_order": "C", "seconds": seconds, "note": note}


def test_combine_takes_the_mean_over_devices_and_the_first_reason():
    one = [_row("a", 1.0), _row("b", 2.0), _row("c", float("nan"), "first"), _row("d", 4.0)]
    two = [_row("a", 3.0), _row("b", float("nan"), "only"), _row("c", float("nan"), "second"), _row("d", 4.0, "")]
    rows = combine([one, two])
    assert [r["candidate"] for r in rows] == ["a", "b", "c", "d"]
    assert rows[0]["seconds"] == 2.0 and rows[3]["seconds"] == 4.0
    assert np.isnan(rows[1]["seconds"]) and np.isnan(rows[2]["seconds"])
    assert [r["note"] for r in rows] == ["", "only", "first", ""]
    assert [r["devices"] for r in rows] == [2] * 4
    assert rows[0]["library"] == "numpy"


def test_the_fastest_that_ran_and_the_first_of_equals():
    rows = [_row("zero", 0.0), _row("nan", float("nan"), "x"), _row("slow", 2.0), _row("fast", 1.0),
            _row("also-fast", 1.0), _row("negative", -1.0)]
    assert best_index(rows) == 3


def test_no_candidate_ran_names_every_reason():
    with pytest.raises(RuntimeError) as caught:
        best_index([_row("a", float("nan"), "out of memory"), _row("b", 0.0), _row("c", -2.0)])
    assert str(caught.value) == "no one-device reference ran (a: out of memory; b: no time; c: no time)"


def test_the_rounds_rotate_by_one():
    assert [reference._rotated(3, turn) for turn in range(4)] == [[0, 1, 2], [1, 2, 0], [2, 0, 1], [0, 1, 2]]
