"""The Freivalds check separates right from wrong, for every type, at k up to 32768.

For float64, float32, TF32, float16, bfloat16, complex64 and complex128: a
product with one panel missing, one block from the wrong rank, or one element
off by 1 % of its row's scale (``‖A[i, :]‖·‖B‖_F/√n``) fails; a correct product
passes, with no false alarm in 1000 random products per type.  Where rounding
hides a defect, the summary says so and the figure it gives is true.  The
products are computed as a run computes them (:mod:`products`); on a GPU the
same tests run with cuBLAS's own products (``-m gpu``).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from mpi4py import MPI
from products import TYPES, emulate, inputs, row_scale, run_dtype, steps, storage

from hpcmm.execution.backend import CpuBackend, gpu_count
from hpcmm.config import RunConfig
from hpcmm.geometry.layout import Grid, Layout
from hpcmm.cli.summary import summary_rows
from hpcmm.execution.topology import Topology
from hpcmm.verify import Product, confidence, detectable, freivalds, freivalds_tolerance, tolerance

M = N = 16


@pytest.fixture(scope="module")
def one_rank():
    topo = Topology.create(MPI.COMM_SELF, RunConfig(m=1, n=1, k=1, device="cpu"))
    try:
        yield topo
    finally:
        topo.close()


def check(topo, backend, a, b, c, kind, nsteps, seed=11):
    m, k = a.shape
    return freivalds(topo, Layout(m, b.shape[1], k, Grid(1, 1)), backend,
                     Product(a, b, c, run_dtype(kind), nsteps, kind == "tf32"), seed)


def gpu_panel(kind: str) -> int:
    """A panel hpcmm picks on GPUs (auto_panel): 4096 for 16-bit types, else its narrowest default, 2048.

    Wider types take 4096 where the k blocks are 16384 or deeper; the narrower panel is the harder
    one to miss, so the check's power is shown at 2048.
    """
    return 4096 if storage(kind).itemsize <= 2 else 2048


def defects(a, b, c, kind, panel):
    """The wrong products: one panel lost, one block from another rank, one element off by 1 %."""
    wrong = {"panel": emulate(a, b, kind, panel, skip=steps(a.shape[1], panel) // 2)}
    block = c.copy()
    block[: M // 2, : N // 2] = c[: M // 2, N // 2 :]  # the block of the rank beside
    wrong["block"] = block
    wide = np.complex128 if c.dtype.kind == "c" else np.float64
    element = c.astype(wide)
    element[5, 9] += 0.01 * row_scale(a, b)[5]
    wrong["element"] = element.astype(c.dtype)
    return wrong


# -- the tolerance, to the digit -------------------------------------------------------


def test_tolerance_formula():
    """float32, k = 1024, n = 16, 4 steps, worst-case ratios: λ·√((2k + 2s)·u² + 2(2n + k + 4)·u64²)."""
    lam = math.sqrt(2 * math.log(2 * 1 / 1e-6))
    want = lam * math.sqrt((2 * 1024 + 8) * 2.0**-48 + 2 * (32 + 1024 + 4) * 2.0**-106)
    assert freivalds_tolerance("float32", 1024, 16, 4) == pytest.approx(want, rel=1e-12, abs=0)
    assert confidence(1) == pytest.approx(lam, rel=1e-12, abs=0)
    assert detectable(want, 16) == pytest.approx(8 * want, rel=1e-12, abs=0)


def test_tolerance_terms():
    """float16 stores C after each step; TF32 adds its input rounding and bias; complex doubles and widens."""
    base = dict(k=4096, n=16, steps=8, rows=16, partial=0.01, terms=0.01, product=0.01)
    f16 = freivalds_tolerance("float16", **base)
    lam = confidence(16)
    var32 = (2 * 4096 + 16) * 2.0**-48 + 2 * (32 + 4096 + 4) * 2.0**-106
    assert f16 == pytest.approx(lam * math.sqrt(var32 + 16 * (2.0**-11 * 0.01) ** 2), rel=1e-12, abs=0)
    bf16 = freivalds_tolerance("bfloat16", **base)
    assert bf16 == pytest.approx(lam * math.sqrt(var32 + 16 * (2.0**-8 * 0.01) ** 2), rel=1e-12, abs=0)
    tf32 = freivalds_tolerance("float32", tf32=True, **base)
    assert tf32 == pytest.approx(lam * math.sqrt(var32 + 2 * (2.0**-10 * 0.01) ** 2) + 2 * 2.0**-10 * 0.01,
                                 rel=1e-12, abs=0)
    c64 = freivalds_tolerance("complex64", **base)
    assert c64 == pytest.approx(lam * math.sqrt(2) * math.sqrt(2 * var32), rel=1e-12, abs=0)
    assert tolerance("bfloat16", 100, 2) == pytest.approx(2 * (100 * 2.0**-24 + 3 * 2.0**-8))


# -- power at k up to 32768 (CPU, products as a run makes them) -------------------------


@pytest.mark.parametrize("k", [4096, 32768])
@pytest.mark.parametrize("kind", TYPES)
def test_wrong_products_fail(one_rank, kind, k):
    rng = np.random.default_rng([k, TYPES.index(kind)])
    a, b = inputs(kind, M, N, k, rng)
    panel = gpu_panel(kind)
    c = emulate(a, b, kind, panel)
    be = CpuBackend()
    right = check(one_rank, be, a, b, c, kind, steps(k, panel))
    assert right.passed, right
    # The claim the summary makes: at these sizes an element off by 1 % of its row's scale shows.
    assert right.detectable < 0.01, right
    for name, wrong in defects(a, b, c, kind, panel).items():
        result = check(one_rank, be, a, b, wrong, kind, steps(k, panel))
        assert not result.passed, (name, result)


@pytest.mark.parametrize("kind", TYPES)
def test_no_false_alarm_in_1000_products(one_rank, kind):
    """1000 correct products of random shapes, depths and panels: none fails."""
    rng = np.random.default_rng([7, TYPES.index(kind)])
    be = CpuBackend()
    worst = 0.0
    for trial in range(1000):
        m, n = (int(x) for x in rng.integers(1, 13, size=2))
        k = int(rng.integers(1, 400))
        panel = int(rng.integers(max(1, k // 16), k + 1))
        a, b = inputs(kind, m, n, k, rng)
        c = emulate(a, b, kind, panel)
        result = check(one_rank, be, a, b, c, kind, steps(k, panel), seed=trial)
        assert result.passed, (trial, m, n, k, panel, result)
        worst = max(worst, result.residual / result.tolerance)
    assert worst < 1.0


def test_undetectable_defects_are_declared(one_rank):
    """bfloat16 stored 128 times (panel 256, k = 32768): the summary says how large an error hides."""
    kind, k, panel = "bfloat16", 32768, 256
    a, b = inputs(kind, M, N, k, np.random.default_rng(5))
    c = emulate(a, b, kind, panel)
    result = check(one_rank, CpuBackend(), a, b, c, kind, steps(k, panel))
    assert result.passed and result.detectable > 0.01, result
    summary = {"verify": "freivalds", "verified": True, "residual": result.residual,
               "tolerance": result.tolerance, "verify_detectable": result.detectable}
    text = summary_rows({"ranks": 1, "gpus": 0, "seconds": 1, "seconds_min": 1, "seconds_max": 1, "tflops": 1,
                         "tflops_per_rank": 1, "load_imbalance": 0, "exposed_comm_fraction": 0,
                         "exposed_comm_seconds": 0, "paths": [], **summary})[-1][1]
    assert f"less than {100 * result.detectable:.3g} % of its row's scale would not show" in text
    # The figure is true: an element off by just more than it fails.
    wrong = c.astype(np.float64)
    wrong[3, 4] += 1.01 * result.detectable * row_scale(a, b)[3]
    assert not check(one_rank, CpuBackend(), a, b, wrong.astype(c.dtype), kind, steps(k, panel)).passed


def test_float16_panel_1_zero_c_fails(one_rank):
    """float16 with a panel of 1 at k = 2048: C = 0 must not pass (the old tolerance was 2.0)."""
    a, b = inputs("float16", M, N, 2048, np.random.default_rng(9))
    c = emulate(a, b, "float16", 1)
    be = CpuBackend()
    assert check(one_rank, be, a, b, c, "float16", 2048).passed
    assert not check(one_rank, be, a, b, np.zeros_like(c), "float16", 2048).passed


def test_huge_wrong_element_does_not_loosen_the_tolerance(one_rank):
    """The tolerance comes from the inputs only: a wild C cannot raise its own bar."""
    a, b = inputs("float32", M, N, 512, np.random.default_rng(3))
    c = emulate(a, b, "float32", 128)
    be = CpuBackend()
    right = check(one_rank, be, a, b, c, "float32", 4)
    wild = c.copy()
    wild[0, 0] = 1e30
    wrong = check(one_rank, be, a, b, wild, "float32", 4)
    assert wrong.tolerance == right.tolerance and not wrong.passed


# -- the same on the GPU, with cuBLAS's products ----------------------------------------


GPU_TYPES = ("float64", "float32", "tf32", "float16", "bfloat16", "complex64", "complex128")


def _gpu_product(be, a, b, kind, panel):
    """C = A·B panel by panel with the run's own GEMM (cublasGemmEx, beta = 1 after the first step)."""
    c = be.empty((a.shape[0], b.shape[1]), a.dtype)
    for s, k0 in enumerate(range(0, a.shape[1], panel)):
        be.gemm(a[:, k0 : k0 + panel], b[k0 : k0 + panel], c, accumulate=s > 0, tf32=kind == "tf32")
    be.synchronize()
    return c


@pytest.mark.gpu
@pytest.mark.skipif(gpu_count() == 0, reason="no usable GPU: cupy does not import or sees no CUDA device")
@pytest.mark.parametrize("kind", GPU_TYPES)
def test_power_on_the_gpu(one_rank, kind):
    from hpcmm.execution.backend import GpuBackend

    be = GpuBackend(0)
    cp = be.cupy
    try:
        rng = np.random.default_rng(TYPES.index(kind))
        for k in (4096, 32768):
            panel = gpu_panel(kind)
            a, b = inputs(kind, M, N, k, rng)
            # as the engine holds them, copied before any stream reads them (from_host returns when done)
            a_d, b_d = be.from_host(a, order="F"), be.from_host(b)
            c_d = _gpu_product(be, a_d, b_d, kind, panel)
            right = check(one_rank, be, a_d, b_d, c_d, kind, steps(k, panel))
            assert right.passed and right.detectable < 0.01, (k, right)
            lost = be.from_host(np.zeros(c_d.shape, c_d.dtype))
            skip = steps(k, panel) // 2
            for s, k0 in enumerate(range(0, k, panel)):
                if s != skip:
                    be.gemm(a_d[:, k0 : k0 + panel], b_d[k0 : k0 + panel], lost, accumulate=True,
                            tf32=kind == "tf32")
            be.synchronize()
            c_host = be.to_host(c_d)
            wrong = {"panel": lost}
            for name, host in defects(a, b, c_host, kind, panel).items():
                if name != "panel":
                    wrong[name] = cp.asarray(host)
            for name, bad in wrong.items():
                result = check(one_rank, be, a_d, b_d, bad, kind, steps(k, panel))
                assert not result.passed, (k, name, result)
        # No false alarm in 1000 products of cuBLAS.
        for trial in range(1000):
            m, n = (int(x) for x in rng.integers(1, 13, size=2))
            k = int(rng.integers(1, 400))
            panel = int(rng.integers(max(1, k // 16), k + 1))
            a, b = inputs(kind, m, n, k, rng)
            a_d, b_d = be.from_host(a, order="F"), be.from_host(b)
            c_d = _gpu_product(be, a_d, b_d, kind, panel)
            result = check(one_rank, be, a_d, b_d, c_d, kind, steps(k, panel), seed=trial)
            assert result.passed, (trial, m, n, k, panel, result)
    finally:
        be.close()
