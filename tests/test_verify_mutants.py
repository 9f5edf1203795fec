"""What the checks of C promise, one behaviour a test: their figures to the digit, on one rank and four.

Written against the mutants that mutation testing of hpcmm/verify.py left alive
(docs/mutation.md).  Pinned here: the size limit of ``--verify full`` and its message, the
rounding models' constants as the module docstring states them, the Freivalds tolerance built
from the ratios it measures, the residuals of C = α·A·B + β·C₀ against a float64 reference, rows
and products that are zero, a C that is not finite on one rank, and the full check's
``detectable``.  Four ranks are four threads with a communicator of their own (sums, gathers and
broadcasts among them), each holding its blocks of a 2×2 grid.
"""

from __future__ import annotations

import math
import types
import warnings

import numpy as np
import pytest
from thread_comm import ThreadComm

from hpcmm import verify
from hpcmm.execution.backend import CpuBackend
from hpcmm.errors import InputError
from hpcmm.geometry.layout import Grid, Layout
from hpcmm.verify import (UNDERFLOW, Product, check_full_size, confidence, detectable, freivalds,
                          freivalds_tolerance, full_check, sign_vectors, tolerance, underflow)

SEED = 17


def _wide(x):
    return x.astype(np.complex128 if x.dtype.kind == "c" else np.float64)


def _check(method, A, B, C, dtype, steps=2, *, ranks=1, alpha=1.0, beta=0.0, C0=None, tf32=False):
    """``method`` ("freivalds" or "full") run on ``ranks`` ranks (1, or 4 on a 2×2 grid); every rank's Check."""
    m, k = A.shape
    n = B.shape[1]
    layout = Layout(m, n, k, Grid(1, 1) if ranks == 1 else Grid(2, 2))

    def body(topo):
        (ar, ac), (br, bc), (cr, cc) = layout.a_block(topo.rank), layout.b_block(topo.rank), layout.c_block(topo.rank)
        product = Product(A[ar[0]:ar[1], ac[0]:ac[1]], B[br[0]:br[1], bc[0]:bc[1]], C[cr[0]:cr[1], cc[0]:cc[1]],
                          dtype, steps, tf32, alpha, beta, None if C0 is None else C0[cr[0]:cr[1], cc[0]:cc[1]])
        if method == "freivalds":
            return freivalds(topo, layout, CpuBackend(), product, SEED)
        return full_check(topo, layout, CpuBackend(), product)

    job = ThreadComm(ranks)
    checks = []
    for kind, value in job.run(lambda rank: body(types.SimpleNamespace(rank=rank, comm=job))):
        if kind == "raised":
            raise value
        checks.append(value)
    assert all(c == checks[0] or (c.residual != c.residual and checks[0].residual != checks[0].residual)
               for c in checks), checks
    return checks[0]


def _freivalds_residual(A, B, C, alpha=1.0, beta=0.0, C0=None):
    """max_i |(C·x − α·A·B·x − β·C₀·x)_i| / (|α|·‖A_i‖·‖B‖_F + |β|·‖C₀_i‖), in float64."""
    A, B, C = _wide(A), _wide(B), _wide(C)
    x = sign_vectors(SEED, B.shape[1])[:, 0]
    target = alpha * (A @ (B @ x))
    scale = abs(alpha) * np.linalg.norm(A, axis=1) * np.linalg.norm(B)
    if C0 is not None:
        target = target + beta * (_wide(C0) @ x)
        scale = scale + abs(beta) * np.linalg.norm(_wide(C0), axis=1)
    diff = np.abs(C @ x - target)
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(np.max(np.where(scale > 0, diff / scale, np.where(diff > 0, np.inf, 0.0))))


def _full_residual(A, B, C, dtype, steps, alpha=1.0, beta=0.0, C0=None):
    """max_ij |C − α·A·B − β·C₀|_ij / (|α|·(|A|·|B|)_ij + |β|·|C₀|_ij + underflow/tolerance)."""
    A, B, C = _wide(A), _wide(B), _wide(C)
    ref = alpha * (A @ B)
    scale = abs(alpha) * (np.abs(A) @ np.abs(B))
    if C0 is not None:
        ref = ref + beta * _wide(C0)
        scale = scale + abs(beta) * np.abs(C0)
    stores = steps + (0 if alpha == 1 and C0 is None else 1)
    allowed = scale + underflow(dtype, A.shape[1], stores) / tolerance(dtype, A.shape[1], stores)
    diff = np.abs(C - ref)
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(np.max(np.where(allowed > 0, diff / allowed, np.where(diff > 0, np.inf, 0.0))))


def _inputs(m, n, k, dtype, rng, positive=False):
    def draw(shape):
        if positive:
            return rng.random(shape)
        if np.dtype(dtype).kind == "c":
            return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
        return rng.standard_normal(shape)

    A, B = draw((m, k)).astype(dtype), draw((k, n)).astype(dtype)
    return A, B, (_wide(A) @ _wide(B)).astype(dtype)


# -- the size limit of --verify full ----------------------------------------------------------


def test_full_check_takes_problems_up_to_its_limit_and_no_larger():
    check_full_size(8192, 8192, 4096, "float64")  # exactly 2 GiB: A, B, C and the reference in float64
    with pytest.raises(InputError) as caught:
        check_full_size(8192, 8192, 4097, "float64")
    assert str(caught.value) == ("--verify=full needs 2.0 GiB on rank 0 for m=8192, n=8192, k=4097 (limit 2 GiB): "
                                 "use --verify=freivalds")
    with pytest.raises(InputError) as caught:
        check_full_size(8192, 8192, 4096, "complex128")
    assert str(caught.value).startswith("--verify=full needs 4.0 GiB on rank 0 for m=8192, n=8192, k=4096 ")
    check_full_size(4096, 4096, 10240, "complex64")  # complex: twice the bytes, 2 GiB again


def test_full_check_refuses_a_complex_problem_twice_the_size_of_a_real_one(monkeypatch):
    rng = np.random.default_rng(1)
    m, n, k = 6, 5, 4
    monkeypatch.setattr(verify, "FULL_CHECK_LIMIT", 8 * (m * k + k * n + 3 * m * n))
    assert _check("full", *_inputs(m, n, k, "float64", rng), "float64").passed
    with pytest.raises(InputError, match="--verify=full needs"):
        _check("full", *_inputs(m, n, k, "complex128", rng), "complex128")


# -- the rounding models ------------------------------------------------------------------------


def test_a_type_without_a_rounding_model_is_named_with_the_known_ones():
    known = "(known: float64, float32, float16, bfloat16)"
    for call in (lambda: tolerance("int8", 4, 1), lambda: underflow("int8", 4, 1),
                 lambda: freivalds_tolerance("int8", 4, 4, 1)):
        with pytest.raises(InputError) as caught:
            call()
        assert str(caught.value) == f"dtype 'int8': no rounding model {known}"


def test_underflow_bound_of_each_type():
    assert underflow("float64", 100, 3) == 2.0 * (100 + 4) * UNDERFLOW["float64"] == 0.0
    assert underflow("float32", 100, 3) == 2.0 * (100 + 4) * 2.0**-150
    assert underflow("bfloat16", 10, 3) == 2.0 * (10 * 2.0**-150 + 4 * 2.0**-134)
    assert underflow("complex128", 10, 3) == 0.0


def test_tf32_input_rounding_counts_twice_in_the_componentwise_bound():
    assert tolerance("float32", 100, 3, tf32=True) == 2.0 * (100 * 2.0**-24 + 4 * 2.0**-24 + 2 * 2.0**-10)
    assert tolerance("float64", 100, 3) == 2.0 * (100 + 4) * 2.0**-53


def test_confidence_is_the_union_bound_over_the_rows():
    assert confidence(1000) == pytest.approx(math.sqrt(2 * math.log(2 * 1000 / 1e-6)), rel=1e-15, abs=0)
    assert confidence(0) == confidence(1) == pytest.approx(math.sqrt(2 * math.log(2 / 1e-6)), rel=1e-15, abs=0)


def test_float64_tolerance_counts_the_checks_own_arithmetic():
    """float64, k = 1024, n = 16, 4 steps: λ·√((2k + 2s)·u² + 2·(2n + k + 4)·u²), u = 2⁻⁵³."""
    lam = math.sqrt(2 * math.log(2 / 1e-6))
    want = lam * math.sqrt((2 * 1024 + 8) * 2.0**-106 + 2 * (32 + 1024 + 4) * 2.0**-106)
    assert freivalds_tolerance("float64", 1024, 16, 4) == pytest.approx(want, rel=1e-12, abs=0)
    complex_ = lam * math.sqrt(2) * math.sqrt(2 * (2 * 1024 + 8) * 2.0**-106 + 2 * 2 * (32 + 1024 + 4) * 2.0**-106)
    assert freivalds_tolerance("complex128", 1024, 16, 4) == pytest.approx(complex_, rel=1e-12, abs=0)


def test_the_default_ratios_are_the_worst_case_one():
    worst = dict(partial=1.0, terms=1.0, product=1.0)
    assert freivalds_tolerance("float16", 512, 8, 4) == freivalds_tolerance("float16", 512, 8, 4, **worst)
    assert freivalds_tolerance("float32", 512, 8, 4, True) == freivalds_tolerance("float32", 512, 8, 4, True, **worst)


def test_detectable_of_one_column():
    assert detectable(1e-6, 1) == detectable(1e-6, 0) == 2e-6
    assert detectable(1e-6, 16) == 8e-6


def test_sign_vectors_are_random_signs_the_same_for_one_seed():
    x = sign_vectors(SEED, 64)
    assert x.shape == (64, 5) and x.dtype == np.float64
    assert set(np.unique(x)) == {-1.0, 1.0} and all(set(np.unique(col)) == {-1.0, 1.0} for col in x.T)
    assert len({col.tobytes() for col in x.T}) == 5
    np.testing.assert_array_equal(sign_vectors(SEED, 64), x)
    assert not np.array_equal(sign_vectors(SEED + 1, 64), x)
    assert sign_vectors(SEED, 64, count=2).shape == (64, 2)


# -- the Freivalds tolerance, from the ratios it measures ---------------------------------------


def _measured_tolerance(A, B, dtype, steps, tf32=False):
    """The tolerance of the module docstring, with the ratios measured as it says (four probes)."""
    A, B = _wide(A), _wide(B)
    m, k = A.shape
    n = B.shape[1]
    signs = sign_vectors(SEED, n)
    abx = A @ (B @ signs)
    sigma = np.linalg.norm(A, axis=1) * np.linalg.norm(B)
    live = sigma > 0
    est = np.sqrt(np.mean(np.abs(abx[:, 1:]) ** 2, axis=1))
    terms = np.sqrt(np.abs(A) ** 2 @ (np.linalg.norm(B, axis=1) ** 2))
    ratios = dict(partial=float(np.max(est[live] / sigma[live])), terms=float(np.max(terms[live] / sigma[live])),
                  product=float(np.max(np.abs(abx[live, 0]) / sigma[live])))
    return freivalds_tolerance(dtype, k, n, steps, tf32, rows=m, **ratios), ratios


@pytest.mark.parametrize("ranks", [1, 4])
def test_float16_tolerance_grows_with_the_partial_sums(ranks):
    """Positive data: the rows of A·B (``partial``) outgrow the random-sign sums (``terms``)."""
    A, B, C = _inputs(13, 9, 40, "float16", np.random.default_rng(2), positive=True)
    want, ratios = _measured_tolerance(A, B, "float16", 2)
    assert ratios["partial"] > 1.5 * ratios["terms"]
    result = _check("freivalds", A, B, C, "float16", ranks=ranks)
    assert result.tolerance == pytest.approx(want, rel=1e-9, abs=0)
    assert result.detectable == pytest.approx(2 * 3 * want, rel=1e-9, abs=0)
    assert result.passed


@pytest.mark.parametrize("ranks", [1, 4])
def test_tf32_tolerance_takes_the_terms_and_the_product(ranks):
    A, B, C = _inputs(11, 7, 30, "float32", np.random.default_rng(3))
    want, _ = _measured_tolerance(A, B, "float32", 2, tf32=True)
    result = _check("freivalds", A, B, C, "float32", ranks=ranks, tf32=True)
    assert result.tolerance == pytest.approx(want, rel=1e-9, abs=0) and result.passed


def test_full_check_tolerance_of_tf32():
    A, B, C = _inputs(6, 5, 8, "float32", np.random.default_rng(4))
    result = _check("full", A, B, C, "float32", steps=3, tf32=True)
    assert result.tolerance == tolerance("float32", 8, 3, True) and result.passed


# -- C = α·A·B + β·C₀ -----------------------------------------------------------------------------


@pytest.mark.parametrize("ranks", [1, 4])
@pytest.mark.parametrize("dtype", ["float32", "complex128"])
def test_alpha_and_beta_right_and_wrong(ranks, dtype):
    rng = np.random.default_rng(5)
    A, B, _ = _inputs(9, 7, 6, dtype, rng)
    C0 = _inputs(9, 7, 6, dtype, rng)[2] * 3.0
    alpha, beta = 1.5, -0.5
    right = (alpha * (_wide(A) @ _wide(B)) + beta * _wide(C0)).astype(dtype)
    for method in ("freivalds", "full"):
        assert _check(method, A, B, right, dtype, ranks=ranks, alpha=alpha, beta=beta, C0=C0).passed
    wrong = _wide(right)
    wrong[7, 5] += 0.05 * np.abs(wrong).max()
    wrong = wrong.astype(dtype)
    f = _check("freivalds", A, B, wrong, dtype, ranks=ranks, alpha=alpha, beta=beta, C0=C0)
    assert not f.passed
    assert f.residual == pytest.approx(_freivalds_residual(A, B, wrong, alpha, beta, C0), rel=1e-6, abs=0)
    full = _check("full", A, B, wrong, dtype, ranks=ranks, alpha=alpha, beta=beta, C0=C0)
    assert not full.passed
    assert full.residual == pytest.approx(_full_residual(A, B, wrong, dtype, 2, alpha, beta, C0), rel=1e-6, abs=0)
    # β·C₀ left out of C: caught.
    alone = (alpha * (_wide(A) @ _wide(B))).astype(dtype)
    assert not _check("freivalds", A, B, alone, dtype, ranks=ranks, alpha=alpha, beta=beta, C0=C0).passed
    assert not _check("full", A, B, alone, dtype, ranks=ranks, alpha=alpha, beta=beta, C0=C0).passed


def test_beta_alone_scales_the_residual():
    """α = 0: the scale is |β|·‖C₀_i‖ alone (freivalds) and |β|·|C₀| (full)."""
    rng = np.random.default_rng(6)
    A, B, C0 = _inputs(5, 4, 3, "float64", rng)
    wrong = -2.0 * C0
    wrong[1, 2] += 0.1
    f = _check("freivalds", A, B, wrong, "float64", alpha=0.0, beta=-2.0, C0=C0)
    assert f.residual == pytest.approx(_freivalds_residual(A, B, wrong, 0.0, -2.0, C0), rel=1e-9, abs=0) and not f.passed
    full = _check("full", A, B, wrong, "float64", alpha=0.0, beta=-2.0, C0=C0)
    assert full.residual == pytest.approx(_full_residual(A, B, wrong, "float64", 2, 0.0, -2.0, C0), rel=1e-9, abs=0)


@pytest.mark.parametrize("method", ["freivalds", "full"])
def test_a_wrong_product_has_the_residual_of_the_reference(method):
    A, B, _ = _inputs(10, 6, 12, "float64", np.random.default_rng(7))
    A, B = 0.1 * A, 0.1 * B  # elements' scales (|A|·|B|)_ij well below 1
    C = A @ B
    C[3, 4] += 1e-5
    C[8, 1] -= 2e-5
    result = _check(method, A, B, C, "float64", ranks=4)
    want = (_freivalds_residual(A, B, C) if method == "freivalds" else _full_residual(A, B, C, "float64", 2))
    assert result.residual == pytest.approx(want, rel=1e-6, abs=0) and not result.passed


# -- zero rows, zero products, empty C ---------------------------------------------------------


@pytest.mark.parametrize("ranks", [1, 4])
@pytest.mark.parametrize("method", ["freivalds", "full"])
def test_a_zero_row_is_right_only_where_c_is_zero(method, ranks):
    A, B, C = _inputs(8, 6, 5, "float64", np.random.default_rng(8))
    A[2] = 0.0
    C = (A @ B).copy()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        right = _check(method, A, B, C, "float64", ranks=ranks)
        C[2, 3] = 0.5
        wrong = _check(method, A, B, C, "float64", ranks=ranks)
    assert right.passed and math.isfinite(right.tolerance)
    assert not wrong.passed and wrong.residual == math.inf


@pytest.mark.parametrize("dtype, tf32", [("float16", False), ("float32", True)])
def test_a_zero_product_has_the_tolerance_of_no_terms(dtype, tf32):
    A, B = np.zeros((6, 4), dtype=dtype), np.zeros((4, 5), dtype=dtype)
    result = _check("freivalds", A, B, np.zeros((6, 5), dtype=dtype), dtype, tf32=tf32)
    assert result.passed and result.residual == 0.0
    assert result.tolerance == freivalds_tolerance(dtype, 4, 5, 2, tf32, rows=6, partial=0.0, terms=0.0, product=0.0)
    wrong = np.zeros((6, 5), dtype=dtype)
    wrong[0, 0] = 1.0
    assert _check("freivalds", A, B, wrong, dtype, tf32=tf32).residual == math.inf


@pytest.mark.parametrize("method", ["freivalds", "full"])
def test_an_empty_c_passes(method):
    A, B = np.zeros((0, 4)), np.ones((4, 3))
    result = _check(method, A, B, np.zeros((0, 3)), "float64")
    assert result.passed and result.residual == 0.0


# -- C not finite ------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["freivalds", "full"])
def test_an_infinite_element_makes_the_residual_nan(method):
    A, B, C = _inputs(6, 5, 4, "float64", np.random.default_rng(9))
    C = C.copy()
    C[4, 1] = np.inf
    result = _check(method, A, B, C, "float64")
    assert math.isnan(result.residual) and not result.passed


@pytest.mark.parametrize("method", ["freivalds", "full"])
def test_nan_on_one_rank_of_four_fails_on_every_rank(method):
    A, B, C = _inputs(8, 6, 4, "float64", np.random.default_rng(10))
    C = C.copy()
    C[7, 5] = np.nan  # in the last rank's block only
    result = _check(method, A, B, C, "float64", ranks=4)
    assert math.isnan(result.residual) and not result.passed


# -- what --verify full can see ------------------------------------------------------------------


def _full_power(A, B, dtype, steps):
    """2·tolerance·max_ij (|A|·|B|)_ij / (‖A_i‖·‖B‖_F/√n), rows of zeros left out."""
    A, B = _wide(A), _wide(B)
    scale = np.abs(A) @ np.abs(B)
    row = np.linalg.norm(A, axis=1) * np.linalg.norm(B) / math.sqrt(max(B.shape[1], 1))
    worst = max((scale[i] / row[i]).max() for i in range(A.shape[0]) if row[i] > 0)
    return 2.0 * tolerance(dtype, A.shape[1], steps) * worst, worst


@pytest.mark.parametrize("shape", [(12, 9, 200), (5, 1, 3)])
def test_full_check_detectable_to_the_digit(shape):
    m, n, k = shape
    rng = np.random.default_rng(11)
    A, B, C = _inputs(m, n, k, "float64", rng)
    A, B = A * 1e-3, B * 1e-2  # rows of small norm: their scale is below 1
    A[1] = 0.0
    C = A @ B
    want, worst = _full_power(A, B, "float64", 2)
    assert worst < 1.0
    result = _check("full", A, B, C, "float64", ranks=4 if n > 1 else 1)
    assert result.detectable == pytest.approx(want, rel=1e-12, abs=0) and result.passed


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_full_check_cannot_say_what_it_sees_in_an_infinite_input():
    A, B, C = _inputs(4, 3, 2, "float64", np.random.default_rng(12))
    A = A.copy()
    A[0, 0] = np.inf
    result = _check("full", A, B, C, "float64")
    assert result.detectable == math.inf and not result.passed


@pytest.mark.parametrize("method", ["freivalds", "full"])
def test_a_complex_check_says_nothing_on_stderr(method):
    """Norms of complex blocks are real: no warning that an imaginary part was dropped."""
    rng = np.random.default_rng(13)
    A, B, C = _inputs(6, 5, 4, "complex64", rng)
    C0 = _inputs(6, 5, 4, "complex64", rng)[2]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _check(method, A, B, C, "complex64", ranks=4).passed
        right = (_wide(A) @ _wide(B) - 0.5 * _wide(C0)).astype("complex64")
        assert _check(method, A, B, right, "complex64", beta=-0.5, C0=C0).passed


class _ChunkRows(CpuBackend):
    """The CPU backend, noting the rows of each chunk the check brings to the host."""

    def __init__(self):
        super().__init__()
        self.rows = []

    def to_host(self, array):
        self.rows.append(array.shape[0])
        return super().to_host(array)


def test_the_check_widens_a_block_in_chunks_of_bounded_bytes():
    """``_matmul`` on the device takes at most ``chunk_bytes`` of widened rows at once (one row where a
    row is more), whatever the block's shape, and gives the product of the whole block."""
    from hpcmm.execution.backend import CpuBackend
    from hpcmm.verify import _matmul

    rng = np.random.default_rng(5)
    block = rng.standard_normal((37, 50)).astype(np.float32)
    right = rng.standard_normal((50, 2))
    for chunk_bytes, rows in ((50 * 8 * 4, 4), (1, 1), (1 << 30, 37)):
        backend = _ChunkRows()
        got = _matmul(backend, block, right, chunk_bytes=chunk_bytes)
        np.testing.assert_allclose(got, block.astype(np.float64) @ right, rtol=1e-12)
        assert max(backend.rows) == rows and sum(backend.rows) == 37, (chunk_bytes, backend.rows)
        squared = _matmul(_ChunkRows(), block, right, squared=True, chunk_bytes=chunk_bytes)
        np.testing.assert_allclose(squared, np.abs(block.astype(np.float64)) ** 2 @ right, rtol=1e-12)


@pytest.mark.parametrize("dtype, itemsize", [(np.float32, 8), (np.complex64, 16)])
def test_a_tall_block_is_taken_in_chunks_of_its_widened_rows(dtype, itemsize):
    """A block of more rows than columns gives the product of every row, each chunk at most ``chunk_bytes``
    of rows as the check widens them: 8 bytes an element of a real block, 16 of a complex one.  ``right``
    is in the block's wide type (real for the squared block), as the checks pass it."""
    from hpcmm.verify import _matmul

    rng = np.random.default_rng(11)
    block = rng.standard_normal((37, 5))
    if np.dtype(dtype).kind == "c":
        block = block + 1j * rng.standard_normal((37, 5))
    block = block.astype(dtype)
    right = rng.standard_normal((5, 3)) + (1j * rng.standard_normal((5, 3)) if block.dtype.kind == "c" else 0)
    row = 5 * itemsize
    for chunk_bytes, rows in ((4 * row, 4), (5 * row - 1, 4), (row - 1, 1), (1 << 30, 37)):
        backend = _ChunkRows()
        got = _matmul(backend, block, right, chunk_bytes=chunk_bytes)
        np.testing.assert_allclose(got, _wide(block) @ right, rtol=1e-12)
        assert max(backend.rows) == rows and sum(backend.rows) == 37, (chunk_bytes, backend.rows)
        backend = _ChunkRows()
        squared = _matmul(backend, block, right.real, squared=True, chunk_bytes=chunk_bytes)
        np.testing.assert_allclose(squared, np.abs(_wide(block)) ** 2 @ right.real, rtol=1e-12)
        assert max(backend.rows) == rows and sum(backend.rows) == 37, (chunk_bytes, backend.rows)
