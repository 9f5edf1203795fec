"""The choice of GEMM library per shape (hpcmm.execution.gemm_library), on numpy operands and a stand-in for cuBLASLt."""

from __future__ import annotations

import math
import types

import numpy as np
import pytest

from hpcmm.config import RunConfig, settings_from_environment
from hpcmm.errors import InputError
from hpcmm.execution.gemm_library import MARGIN, ROUNDS, GemmPlans, libraries_used, pick


class Stream:
    """A stream stand-in: ``with stream:`` does nothing, as numpy has no streams."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def fake_advanced(fail: str | None = None, log: list | None = None):
    """A stand-in for ``nvmath.linalg.advanced``: ``Matmul`` computes ``c = a @ b + beta c`` in place with numpy."""
    log = [] if log is None else log

    class MatmulOptions:
        def __init__(self, **options):
            self.options = options

    class Matmul:
        def __init__(self, a, b, c, alpha, beta, options, stream):
            if fail == "construct":
                raise ValueError("layout not supported")
            assert options.options["inplace"] is True
            self.a, self.b, self.c, self.beta = a, b, c, beta
            self.algorithms = [1, 2, 3]
            self.freed = False
            log.append(self)

        def plan(self, stream):
            pass

        def autotune(self, iterations, stream):
            if fail == "autotune":
                raise RuntimeError("autotune refused")
            for _ in range(iterations):  # autotuning runs the product on the operands, as cuBLASLt's does
                self.execute(stream)

        def reset_operands(self, a, b, c, stream):
            self.a, self.b, self.c = a, b, c

        def execute(self, stream):
            # BLAS's rule, which cuBLASLt keeps: with beta = 0, C is not read (it may hold NaN)
            self.c[...] = self.a @ self.b + (self.beta * self.c if self.beta else 0)
            log.append("lt")
            return self.c

        def free(self):
            self.freed = True

    return types.SimpleNamespace(Matmul=Matmul, MatmulOptions=MatmulOptions)


def numpy_gemmex(log):
    def gemmex(a, b, c, accumulate, stream, tf32):
        c[...] = a @ b + (c if accumulate else 0)
        log.append("ex")
    return gemmex


def timer_favouring(winner: str, ratio: float, seconds: float = 0.01):
    """A timer that says the product of ``winner`` takes ``ratio`` of the other's ``seconds``."""
    def timer(product, stream):
        product()
        return seconds * (ratio if (winner == "cublaslt") == ("execute" in product.__code__.co_names) else 1.0)
    return timer


def operands(rng, m=7, n=5, w=3):
    a = np.asfortranarray(rng.random((m, w)))
    b = rng.random((w, n))
    c = rng.random((m, n))
    return a, b, c


def kept_on_gemmex(plans, rng, why: str) -> dict:
    """One C += A·B of a new shape through ``plans``: C holds one product, and the shape's row says GemmEx
    and, first thing in its note, ``why``.  Returns the row."""
    a, b, c = operands(rng)
    want = a @ b + c
    plans(a, b, c, True, Stream(), False)
    np.testing.assert_allclose(c, want, rtol=1e-13)
    (row,) = plans.rows()
    assert row["library"] == "gemmex" and row["note"].startswith(why), row
    return row


@pytest.mark.parametrize("accumulate", [True, False])
@pytest.mark.parametrize("winner, ratio, chosen", [("cublaslt", 0.9, "cublaslt"), ("cublaslt", 1 - MARGIN / 2, "gemmex"),
                                                  ("gemmex", 0.9, "gemmex")])
def test_each_shape_gets_the_faster_library_and_c_is_exact(accumulate, winner, ratio, chosen):
    rng = np.random.default_rng(5)
    log = []
    plans = GemmPlans("auto", numpy_gemmex(log), timer_favouring(winner, ratio), advanced=fake_advanced(log=log))
    a, b, c = operands(rng)
    want = a @ b + (c if accumulate else 0)
    plans(a, b, c, accumulate, Stream(), False)
    # The planning ran both libraries on C many times; C holds one product, as without planning.
    np.testing.assert_allclose(c, want, rtol=1e-13)
    (row,) = plans.rows()
    assert row["library"] == chosen and (row["m"], row["n"], row["w"], row["beta"]) == (7, 5, 3, int(accumulate))
    assert row["gemmex_seconds"] > 0 and row["cublaslt_seconds"] > 0
    # Later calls of the shape run the chosen library once each, with no more planning.
    log.clear()
    a2, b2, c2 = operands(rng)
    want2 = a2 @ b2 + (c2 if accumulate else 0)
    plans(a2, b2, c2, accumulate, Stream(), False)
    np.testing.assert_allclose(c2, want2, rtol=1e-13)
    assert log == ["lt" if chosen == "cublaslt" else "ex"]
    assert len(plans.rows()) == 1


def test_the_comparison_alternates_and_a_new_shape_is_planned_again():
    rng = np.random.default_rng(6)
    log = []
    plans = GemmPlans("auto", numpy_gemmex(log), timer_favouring("cublaslt", 0.5), advanced=fake_advanced(log=log))
    plans(*operands(rng), True, Stream(), False)
    runs = [x for x in log if isinstance(x, str)]
    # GemmEx untimed and timed once (the shape is short enough to plan), autotune's runs, cuBLASLt once
    # untimed, ROUNDS rounds alternating who goes first, then the call's own product
    assert runs[:2] == ["ex", "ex"] and runs[-2 - 2 * ROUNDS] == "lt"
    assert runs[-1 - 2 * ROUNDS:] == (["ex", "lt", "lt", "ex"] * ROUNDS)[: 2 * ROUNDS] + ["lt"]
    plans(*operands(rng, m=9), True, Stream(), False)
    plans(*operands(rng), False, Stream(), False)  # beta 0 is a shape of its own
    assert [(r["m"], r["beta"]) for r in plans.rows()] == [(7, 1), (9, 1), (7, 0)]


@pytest.mark.parametrize("fail", ["construct", "autotune"])
def test_a_shape_cublaslt_refuses_keeps_gemmex_and_says_why(fail):
    rng = np.random.default_rng(7)
    log = []
    plans = GemmPlans("auto", numpy_gemmex(log), timer_favouring("cublaslt", 0.5),
                      advanced=fake_advanced(fail=fail, log=log))
    # C exact: an autotune that ran products before it failed left no trace
    row = kept_on_gemmex(plans, rng, "cuBLASLt not planned")
    assert math.isnan(row["cublaslt_seconds"])
    matmuls = [x for x in log if not isinstance(x, str)]
    assert all(m.freed for m in matmuls)


def test_gemmex_mode_and_cpus_never_plan():
    rng = np.random.default_rng(8)
    for plans, why in [(GemmPlans("gemmex", numpy_gemmex([]), None, advanced=fake_advanced()),
                        "HPCMM_GEMM_LIBRARY=gemmex"),
                       (GemmPlans("auto", numpy_gemmex([]), None, on_gpu=False), "not on a GPU")]:
        kept_on_gemmex(plans, rng, why)
    with pytest.raises(ValueError, match="cublas"):
        GemmPlans("cublas", numpy_gemmex([]), None)


def test_pick_and_the_words_for_a_run():
    assert pick([1.0] * 3, [0.98] * 3) == "cublaslt"
    assert pick([1.0] * 3, [1.0 - MARGIN] * 3) == "gemmex"  # not faster by more than the margin
    assert pick([1.0, 5.0, 1.0], [0.9, 0.9, 9.0]) == "cublaslt"  # medians, not means
    assert pick([1.0], []) == "gemmex"
    assert libraries_used([{"library": "cublaslt"}] * 2, True) == "cuBLASLt"
    assert libraries_used([{"library": "gemmex"}], True) == libraries_used([], True) == "cublasGemmEx"


def test_the_setting_and_its_variable():
    assert RunConfig().gemm_library == "auto"
    assert settings_from_environment({"HPCMM_GEMM_LIBRARY": "gemmex"}) == {"gemm_library": "gemmex"}
    with pytest.raises(InputError, match="HPCMM_GEMM_LIBRARY='lt'"):
        settings_from_environment({"HPCMM_GEMM_LIBRARY": "lt"})


def test_an_engine_lets_its_gemm_plans_go_when_it_closes():
    """cuBLASLt's plans hold the operands they last ran on (the engine's panels and C): the engine frees them."""
    from mpi4py import MPI

    from hpcmm.execution.backend import CpuBackend
    from hpcmm.planning.assemble import engine_for
    from hpcmm.geometry.layout import Grid, Layout
    from hpcmm.execution.topology import Topology

    class Counting(CpuBackend):
        forgotten = 0

        def forget_gemm_plans(self):
            self.forgotten += 1

    backend = Counting()
    topo = Topology.create(MPI.COMM_SELF, RunConfig(m=1, n=1, k=1, device="cpu"))
    try:
        engine = engine_for(topo, backend, Layout(12, 7, 8, Grid(1, 1)), RunConfig(panel=2, prefetch=1), False)
        assert backend.forgotten == 0
        engine.close()
        assert backend.forgotten == 1
    finally:
        topo.close()


@pytest.mark.parametrize("dtype, tf32", [("float32", True), ("float16", False), ("complex128", False)])
def test_auto_leaves_the_kinds_cublaslt_lost_in_products_to_gemmex(dtype, tf32):
    """tf32 lost 5-6 % in products with cuBLASLt (the panel re-layout runs beside it), the 16-bit types never
    took it: auto plans float64 and float32 only, and says why a shape of another kind kept GemmEx."""
    rng = np.random.default_rng(9)
    log = []
    plans = GemmPlans("auto", numpy_gemmex(log), timer_favouring("cublaslt", 0.5), advanced=fake_advanced(log=log))
    a, b, c = (x.astype(dtype) for x in operands(rng))
    plans(a, b, c, True, Stream(), tf32)
    (row,) = plans.rows()
    assert row["library"] == "gemmex" and "as measured in products" in row["note"]
    assert log == ["ex"]  # no cuBLASLt plan, no comparison: one product
    assert row["dtype"] == ("tf32" if tf32 else dtype)


def test_cublaslt_is_imported_at_the_first_shape_to_plan_and_only_then(monkeypatch):
    """A run with nothing to plan (tf32, 16-bit) never loads nvmath-python; a float64 shape loads it once,
    and where it does not import, every planned shape keeps GemmEx and says why."""
    import sys

    seen = []
    log = []
    linalg = types.ModuleType("nvmath.linalg")
    linalg.__getattr__ = lambda name: (seen.append(name), fake_advanced(log=log))[1]
    monkeypatch.setitem(sys.modules, "nvmath", types.ModuleType("nvmath"))
    monkeypatch.setitem(sys.modules, "nvmath.linalg", linalg)
    rng = np.random.default_rng(10)
    plans = GemmPlans("auto", numpy_gemmex(log), timer_favouring("cublaslt", 0.5))
    a, b, c = (x.astype("float16") for x in operands(rng))
    plans(a, b, c, True, Stream(), False)
    assert seen == []
    plans(*operands(rng), True, Stream(), False)
    assert "advanced" in seen
    monkeypatch.setitem(sys.modules, "nvmath.linalg", None)  # a second import would fail now: there is none
    plans(*operands(rng, m=9), True, Stream(), False)
    assert [r["library"] for r in plans.rows()] == ["gemmex", "cublaslt", "cublaslt"]

    monkeypatch.setitem(sys.modules, "nvmath.linalg", None)  # not installed: the import fails
    plans = GemmPlans("auto", numpy_gemmex(log), timer_favouring("cublaslt", 0.5))
    kept_on_gemmex(plans, rng, "nvmath-python does not import")


@pytest.mark.parametrize("panel", [2, 3, 8])
def test_an_engine_whose_gemms_are_planned_multiplies_right(panel):
    """A whole product through the engine's steps (beta 0 first, then beta 1), each new shape planned in
    passing by the stand-in cuBLASLt that wins every comparison: C is right in the first product, which
    plans, and in the second, which only runs the plans."""
    from mpi4py import MPI

    from hpcmm.execution.backend import CpuBackend
    from hpcmm.planning.assemble import engine_for
    from hpcmm.io.inputs import generate_block
    from hpcmm.geometry.layout import Grid, Layout
    from hpcmm.execution.topology import Topology

    class Planned(CpuBackend):
        def __init__(self):
            super().__init__()
            self.plans = GemmPlans("auto", lambda a, b, c, acc, stream, tf32: CpuBackend.gemm(self, a, b, c, acc),
                                   timer_favouring("cublaslt", 0.5), advanced=fake_advanced())

        def gemm(self, a, b, c, accumulate, stream=None, tf32=False):
            self.plans(a, b, c, accumulate, Stream(), tf32)

        def gemm_rows(self):
            return self.plans.rows()

    m, n, k = 13, 7, 9
    backend = Planned()
    topo = Topology.create(MPI.COMM_SELF, RunConfig(m=1, n=1, k=1, device="cpu"))
    engine = None
    try:
        engine = engine_for(topo, backend, Layout(m, n, k, Grid(1, 1)), RunConfig(panel=panel, prefetch=1), False)
        a = generate_block(3, "A", (m, k), (0, m), (0, k), np.float64)
        b = generate_block(3, "B", (k, n), (0, k), (0, n), np.float64)
        engine.load(a, b)
        for _ in range(2):
            engine.multiply()
            np.testing.assert_allclose(backend.to_host(engine.C), a @ b, rtol=1e-12, atol=1e-12)
        rows = backend.gemm_rows()
        assert rows and all(r["library"] == "cublaslt" for r in rows)
        assert {r["beta"] for r in rows} == ({0, 1} if len(engine.plan) > 1 else {0})
    finally:
        if engine is not None:
            engine.close()
        topo.close()


def test_a_shape_whose_gemm_is_long_is_not_planned():
    """One GEMM over PLAN_LIMIT_SECONDS: planning would run some 30 of them for gains measured on shapes of
    milliseconds, so the shape keeps GemmEx, says why, and C holds one product."""
    from hpcmm.execution.gemm_library import PLAN_LIMIT_SECONDS

    rng = np.random.default_rng(11)
    log = []
    plans = GemmPlans("auto", numpy_gemmex(log), timer_favouring("cublaslt", 0.5, seconds=2 * PLAN_LIMIT_SECONDS),
                      advanced=fake_advanced(log=log))
    row = kept_on_gemmex(plans, rng, "not planned: one GEMM takes 0.200 s")
    assert row["gemmex_seconds"] == 2 * PLAN_LIMIT_SECONDS and math.isnan(row["cublaslt_seconds"])
    assert log == ["ex", "ex", "ex"]  # untimed, timed, then the call's product: no cuBLASLt plan at all


def test_a_rank_whose_gpu_others_share_plans_nothing():
    """Several ranks on one GPU: their kernels run between or beside the comparison's, and all would
    autotune at once; every shape keeps GemmEx and says why."""
    rng = np.random.default_rng(12)
    log = []
    plans = GemmPlans("auto", numpy_gemmex(log), timer_favouring("cublaslt", 0.5), advanced=fake_advanced(log=log),
                      sharers=4)
    kept_on_gemmex(plans, rng, "4 ranks share this GPU")
    assert log == ["ex"]


def test_a_shape_whose_gemm_is_too_short_to_time_is_not_planned():
    """One GEMM under PLAN_FLOOR_SECONDS: its timings would be launch noise and planning would cost more than
    it could gain, so the shape keeps GemmEx, says why, and C holds one product."""
    from hpcmm.execution.gemm_library import PLAN_FLOOR_SECONDS

    rng = np.random.default_rng(12)
    log = []
    plans = GemmPlans("auto", numpy_gemmex(log), timer_favouring("cublaslt", 0.5, seconds=PLAN_FLOOR_SECONDS / 4),
                      advanced=fake_advanced(log=log))
    row = kept_on_gemmex(plans, rng, "not planned: one GEMM takes 25.0 us, under 100 us")
    assert row["gemmex_seconds"] == PLAN_FLOOR_SECONDS / 4 and math.isnan(row["cublaslt_seconds"])
    assert log == ["ex", "ex", "ex"]  # untimed, timed, then the call's product: no cuBLASLt plan at all
