"""What the choice of GEMM library per shape promises at its edges, one behaviour a test.

Written against the mutants that mutation testing of hpcmm/execution/gemm_library.py left alive or
without a test (docs/mutation.md).  The planning runs on numpy operands with stand-ins for cuBLAS's
GemmEx, the event timer and cuBLASLt (as in tests/test_gemm_library.py), each recording what it was
given: the stream every call is queued on, the product GemmEx times (C += A·B where the step asked for
it), alpha and beta of cuBLASLt's plan; the rows' fields and notes to the character; the limits of the
time a shape's one GEMM may take, at their values; ``close``.
"""

from __future__ import annotations

import math
import sys
import types

import numpy as np
import pytest

from hpcmm.execution.gemm_library import (AUTOTUNE_ITERATIONS, PLAN_FLOOR_SECONDS, PLAN_LIMIT_SECONDS, ROUNDS,
                                          GemmPlans, libraries_used)

FIELDS = {"m", "n", "w", "dtype", "beta", "library", "gemmex_seconds", "cublaslt_seconds", "note"}


class Stream:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class Recorder:
    """GemmEx, the timer and cuBLASLt as stand-ins; ``calls`` holds (what, stream, details)."""

    def __init__(self, lt_ratio=0.5, seconds=0.01, fail=None):
        self.calls, self.matmuls = [], []
        self.lt_ratio, self.seconds, self.fail = lt_ratio, seconds, fail
        rec = self

        class MatmulOptions:
            def __init__(self, **options):
                self.options = options

        class Matmul:
            def __init__(self, a, b, c, alpha, beta, options, stream):
                rec.calls.append(("construct", stream, (alpha, beta, options.options)))
                if rec.fail:
                    raise ValueError(rec.fail)
                self.a, self.b, self.c, self.alpha, self.beta = a, b, c, alpha, beta
                self.algorithms = [1, 2]
                self.freed = False
                rec.matmuls.append(self)

            def plan(self, stream):
                rec.calls.append(("plan", stream, None))

            def autotune(self, iterations, stream):
                rec.calls.append(("autotune", stream, iterations))

            def reset_operands(self, a, b, c, stream):
                rec.calls.append(("reset", stream, None))
                self.a, self.b, self.c = a, b, c

            def execute(self, stream):
                rec.calls.append(("lt", stream, None))
                self.c[...] = self.alpha * (self.a @ self.b) + (self.beta * self.c if self.beta else 0)

            def free(self):
                self.freed = True

        self.advanced = types.SimpleNamespace(Matmul=Matmul, MatmulOptions=MatmulOptions)

    def gemmex(self, a, b, c, accumulate, stream, tf32):
        self.calls.append(("ex", stream, (accumulate, tf32)))
        c[...] = a @ b + (c if accumulate else 0)

    def timer(self, product, stream):
        before = len(self.calls)
        product()
        what = self.calls[before][0]
        self.calls.append(("timed", stream, what))
        return self.seconds * (self.lt_ratio if what == "lt" else 1.0)

    def plans(self, **kw):
        return GemmPlans("auto", self.gemmex, self.timer, advanced=self.advanced, **kw)


def _operands(seed=3, m=6, n=5, w=4, dtype=np.float64):
    gen = np.random.default_rng(seed)
    return (gen.random((m, w)).astype(dtype), gen.random((w, n)).astype(dtype), gen.random((m, n)).astype(dtype))


@pytest.mark.parametrize("accumulate", [True, False], ids=["accumulate", "overwrite"])
def test_every_call_of_a_planned_shape_goes_to_its_stream(accumulate):
    rec = Recorder()
    plans = rec.plans()
    stream, later = Stream(), Stream()
    a, b, c = _operands()
    want = a @ b + (c if accumulate else 0)
    plans(a, b, c, accumulate, stream, False)
    np.testing.assert_allclose(c, want, rtol=1e-14, atol=0)
    assert {s for _, s, _ in rec.calls} == {stream}
    # GemmEx is timed on the product the step asked for, never tf32
    assert {d for what, _, d in rec.calls if what == "ex"} == {(accumulate, False)}
    assert [d for what, _, d in rec.calls if what == "timed"] == ["ex"] + ["ex", "lt", "lt", "ex", "ex", "lt"]
    # cuBLASLt's plan: C (+)= 1·A·B in place, autotuned
    (alpha, beta, options), = [d for what, _, d in rec.calls if what == "construct"]
    assert (alpha, beta, options) == (1.0, 1.0 if accumulate else 0.0, {"inplace": True})
    assert [d for what, _, d in rec.calls if what == "autotune"] == [AUTOTUNE_ITERATIONS]
    (row,) = plans.rows()
    assert set(row) == FIELDS and row["library"] == "cublaslt"
    assert row["note"] == f"cuBLASLt autotuned over 2 algorithm(s), {ROUNDS} rounds each, margin 1%"
    assert (row["gemmex_seconds"], row["cublaslt_seconds"]) == (0.01, 0.005)
    # the next product of the shape: cuBLASLt on the new operands and the later stream
    rec.calls.clear()
    a, b, c = _operands(seed=4)
    want = a @ b + (c if accumulate else 0)
    plans(a, b, c, accumulate, later, False)
    np.testing.assert_allclose(c, want, rtol=1e-14, atol=0)
    assert rec.calls == [("reset", later, None), ("lt", later, None)]


def test_a_shape_kept_on_gemmex_runs_on_the_stream_with_its_tf32():
    rec = Recorder()
    plans = rec.plans()
    stream = Stream()
    a, b, c = _operands(dtype=np.float32)
    plans(a, b, c, True, stream, True)  # tf32: not planned
    plans(a, b, c, True, stream, False)  # the same shape without tf32: planned apart
    assert [row["dtype"] for row in plans.rows()] == ["tf32", "float32"]
    rec.calls.clear()
    plans(a, b, c, False, stream, True)
    assert [row["dtype"] for row in plans.rows()] == ["tf32", "float32", "tf32"]
    assert rec.calls == [("ex", stream, (False, True))]


@pytest.mark.parametrize("seconds, planned", [(PLAN_LIMIT_SECONDS, True), (PLAN_FLOOR_SECONDS, True)],
                         ids=["at_the_limit", "at_the_floor"])
def test_a_gemm_at_either_limit_is_still_planned(seconds, planned):
    rec = Recorder(seconds=seconds, lt_ratio=0.5)
    plans = rec.plans()
    plans(*_operands(), True, Stream(), False)
    (row,) = plans.rows()
    assert row["library"] == "cublaslt" and row["note"].startswith("cuBLASLt autotuned"), row


def test_a_gemm_too_short_to_time_says_its_microseconds():
    rec = Recorder(seconds=1.234999e-5)
    plans = rec.plans()
    plans(*_operands(), True, Stream(), False)
    (row,) = plans.rows()
    assert set(row) == FIELDS and row["library"] == "gemmex" and math.isnan(row["cublaslt_seconds"])
    assert row["note"] == "not planned: one GEMM takes 12.3 us, under 100 us (hpcmm.execution.gemm_library)"


def test_a_refusal_of_cublaslt_is_noted_in_one_line_of_at_most_160_characters():
    reason = "layout\n  not   supported " + "x" * 200
    rec = Recorder(fail=reason)
    plans = rec.plans()
    a, b, c = _operands()
    want = a @ b + c
    plans(a, b, c, True, Stream(), False)
    np.testing.assert_allclose(c, want, rtol=1e-14, atol=0)
    (row,) = plans.rows()
    assert row["library"] == "gemmex"
    assert row["note"] == "cuBLASLt not planned: ValueError: " + ("layout not supported " + "x" * 200)[:160]


def test_rows_of_shapes_never_planned_have_every_field():
    rec = Recorder()
    plans = GemmPlans("gemmex", rec.gemmex, rec.timer, advanced=rec.advanced)
    assert plans.mode == "gemmex"
    plans(*_operands(), False, Stream(), False)
    (row,) = plans.rows()
    assert set(row) == FIELDS and math.isnan(row["gemmex_seconds"]) and math.isnan(row["cublaslt_seconds"])
    assert row["note"] == "HPCMM_GEMM_LIBRARY=gemmex"
    assert rec.plans().mode == "auto"


def test_two_ranks_on_one_gpu_plan_nothing():
    rec = Recorder()
    plans = rec.plans(sharers=2)
    plans(*_operands(), True, Stream(), False)
    (row,) = plans.rows()
    assert row["library"] == "gemmex"
    assert row["note"] == "2 ranks share this GPU: the comparison would time their kernels too"
    assert [what for what, _, _ in rec.calls] == ["ex"]


def test_a_missing_nvmath_is_named_by_its_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "nvmath", None)
    monkeypatch.setitem(sys.modules, "nvmath.linalg", None)
    rec = Recorder()
    plans = GemmPlans("auto", rec.gemmex, rec.timer)
    plans(*_operands(), True, Stream(), False)
    assert plans.rows()[0]["note"] == "nvmath-python does not import (ModuleNotFoundError)"


def test_an_unknown_library_is_refused_with_the_choices():
    with pytest.raises(ValueError) as caught:
        GemmPlans("cublas", None, None)
    assert str(caught.value) == "gemm library 'cublas': expected one of auto, gemmex"


def test_a_cpu_run_says_numpy():
    assert libraries_used([{"library": "cublaslt"}], on_gpu=False) == "numpy"


def test_close_frees_every_cublaslt_plan_and_forgets_every_shape():
    """One shape kept on cuBLASLt, one lost to GemmEx (its plan freed at once), one never planned."""
    rec = Recorder(lt_ratio=0.5)
    plans = rec.plans()
    plans(*_operands(m=6), True, Stream(), False)
    rec.lt_ratio = 2.0
    plans(*_operands(m=7), True, Stream(), False)
    plans(*_operands(m=8, dtype=np.complex128), True, Stream(), False)
    assert [row["library"] for row in plans.rows()] == ["cublaslt", "gemmex", "gemmex"]
    kept, lost = rec.matmuls
    assert (kept.freed, lost.freed) == (False, True)
    plans.close()
    assert kept.freed and plans.rows() == []
    plans.close()  # again: nothing left to free
    rec.calls.clear()
    plans(*_operands(m=6), True, Stream(), False)  # planned anew
    assert [what for what, _, _ in rec.calls].count("construct") == 1
