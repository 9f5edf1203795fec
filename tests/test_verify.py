"""Verification: tolerances, and checks that catch a wrong or unwritten C (one rank)."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
from mpi4py import MPI

import hpcmm
from hpcmm.config import RunConfig
from hpcmm.execution.engine import Engine
from hpcmm.errors import InputError, VerificationError
from hpcmm.io.inputs import generate_block
from hpcmm.geometry.layout import Grid, Layout
from hpcmm.verify import Product, freivalds, freivalds_tolerance, full_check, tolerance

DTYPES = ["float64", "float32", "float16", "bfloat16", "complex128", "complex64"]


# -- tolerance ------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_tolerance_grows_with_k(dtype):
    values = [tolerance(dtype, k, steps=4) for k in (1, 10, 100, 1000, 10**5)]
    assert all(v > 0 for v in values)
    assert values == sorted(values) and len(set(values)) == len(values)
    # More SUMMA steps round the stored C more often.
    assert tolerance(dtype, 100, steps=50) > tolerance(dtype, 100, steps=1)


def test_tolerance_orders_the_types():
    k = 4096
    t = {d: tolerance(d, k, steps=8) for d in DTYPES}
    assert t["bfloat16"] > t["float16"] > t["float32"] > t["float64"]
    assert t["complex128"] == pytest.approx(2 * t["float64"])
    assert t["complex64"] == pytest.approx(2 * t["float32"])
    # float64 accumulation: about k * 2^-53, far below float32's.
    assert t["float64"] < 1e-11 < t["float32"]


def test_tf32_loosens_float32():
    assert tolerance("float32", 1024, 4, tf32=True) > tolerance("float32", 1024, 4) + 2 * 2.0**-11


# -- the checks, called directly at one rank -------------------------------------


def product(m, n, k, dtype, seed=3):
    a = generate_block(seed, "A", (m, k), (0, m), (0, k), dtype)
    b = generate_block(seed, "B", (k, n), (0, k), (0, n), dtype)
    c = (a.astype(np.complex128 if a.dtype.kind == "c" else np.float64)
         @ b.astype(np.complex128 if b.dtype.kind == "c" else np.float64)).astype(dtype)
    return np.asfortranarray(a), b, c


CHECKS = {
    "freivalds": lambda topo, be, layout, a, b, c, dtype: freivalds(topo, layout, be, Product(a, b, c, dtype, 4), 3),
    "full": lambda topo, be, layout, a, b, c, dtype: full_check(topo, layout, be, Product(a, b, c, dtype, 4)),
}


@pytest.mark.parametrize("method", list(CHECKS))
@pytest.mark.parametrize("dtype", ["float64", "float32", "complex128", "complex64"])
def test_right_product_passes(one_rank, method, dtype):
    topo, be = one_rank
    m, n, k = 31, 17, 23
    a, b, c = product(m, n, k, dtype)
    check = CHECKS[method](topo, be, Layout(m, n, k, Grid(1, 1)), a, b, c, dtype)
    assert check.method == method
    assert check.passed, check
    assert 0 <= check.residual <= check.tolerance
    if method == "full":
        assert check.tolerance == tolerance(dtype, k, 4)
    else:
        # The rounding model with this product's own ratios: never above the data-free worst case.
        assert 0 < check.tolerance <= freivalds_tolerance(dtype, k, n, 4, rows=m)
    assert 0 < check.detectable < 0.01


@pytest.mark.parametrize("method", list(CHECKS))
@pytest.mark.parametrize("dtype", ["float64", "float32", "complex128"])
@pytest.mark.parametrize("where", ["element", "block", "last row"])
def test_corrupted_c_fails(one_rank, method, dtype, where):
    """One element off by 1 %, a block as a skipped panel leaves it, or a row of wrong sign."""
    topo, be = one_rank
    m, n, k = 29, 19, 37
    a, b, c = product(m, n, k, dtype)
    if where == "element":
        c[13, 7] += 1e-2 * (1 + abs(c[13, 7]))
    elif where == "block":
        # C as if the last panel of k had been skipped.
        c[8:20, 5:15] -= a[8:20, 30:] @ b[30:, 5:15]
    else:
        c[-1, :] *= -1
    check = CHECKS[method](topo, be, Layout(m, n, k, Grid(1, 1)), a, b, c, dtype)
    assert not check.passed, check
    if where != "element":  # Freivalds sees one element through a random weight: less margin
        assert check.residual > 10 * check.tolerance


@pytest.mark.parametrize("method", list(CHECKS))
def test_complex_scale_uses_the_modulus(one_rank, method):
    """Purely imaginary A: the bound |A|·|B|·|x| must use |z|, not the (zero) real part."""
    topo, be = one_rank
    m, n, k = 24, 16, 40
    _, b, _ = product(m, n, k, "complex64")
    a = np.asfortranarray(1j * generate_block(4, "A", (m, k), (0, m), (0, k), np.float32)).astype(np.complex64)
    c = a @ b  # complex64 arithmetic: rounding errors of the size the tolerance allows
    assert np.all(a.real == 0)
    check = CHECKS[method](topo, be, Layout(m, n, k, Grid(1, 1)), a, b, c, "complex64")
    assert check.passed, check


@pytest.mark.parametrize("method", list(CHECKS))
@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_poisoned_c_fails(one_rank, method, value):
    """An element the run never wrote is NaN (C is poisoned first); Inf is just as wrong."""
    topo, be = one_rank
    m, n, k = 12, 9, 8
    a, b, c = product(m, n, k, "float64")
    c[11, 8] = value
    check = CHECKS[method](topo, be, Layout(m, n, k, Grid(1, 1)), a, b, c, "float64")
    assert not check.passed
    assert np.isnan(check.residual) or check.residual == np.inf


def test_full_check_refuses_large_problems(one_rank):
    topo, be = one_rank
    empty = np.zeros((0, 0))
    with pytest.raises(InputError, match="--verify=full needs .* use --verify=freivalds"):
        full_check(topo, Layout(30000, 30000, 30000, Grid(1, 1)), be, Product(empty, empty, empty, "float64", 1))


# -- through the library: hpcmm.run with an engine that gets C wrong ---------------


def _corrupting(monkeypatch, damage):
    """Make every product of :class:`Engine` end with ``damage(C)``."""
    original = Engine.multiply

    def multiply(self):
        times = original(self)
        damage(self.C)
        return times

    monkeypatch.setattr(Engine, "multiply", multiply)


def _config(tmp_path, **changes):
    base = dict(m=41, n=23, k=37, device="cpu", warmup=0, iters=1, out=str(tmp_path / "r.h5"))
    base.update(changes)
    return RunConfig(**base)


@pytest.mark.parametrize("verify", ["freivalds", "full"])
def test_run_verifies_a_right_product(tmp_path, verify):
    result = hpcmm.run(_config(tmp_path, verify=verify), comm=MPI.COMM_SELF, write=False)
    assert result.summary["verified"] is True
    assert result.summary["verify"] == verify
    assert result.check.passed and result.summary["residual"] <= result.summary["tolerance"]
    assert result.path is None
    assert not (tmp_path / "r.h5").exists()


@pytest.mark.parametrize("verify", ["freivalds", "full"])
@pytest.mark.parametrize("damage", ["perturb", "poison"])
def test_run_catches_a_wrong_product(tmp_path, monkeypatch, verify, damage):
    """The run raises VerificationError and still writes its file, marked verified=False."""
    def perturb(c):
        c[3:9, 2:5] *= 1.001

    def poison(c):
        c[-1, -1] = np.nan

    _corrupting(monkeypatch, perturb if damage == "perturb" else poison)
    config = _config(tmp_path, verify=verify)
    with pytest.raises(VerificationError) as info:
        hpcmm.run(config, comm=MPI.COMM_SELF)
    assert info.value.exit_code == 1
    assert f"verification failed: {verify} residual" in str(info.value)
    assert "verified=False" in str(info.value)
    with h5py.File(config.out, "r") as f:
        summary = dict(f["summary"].attrs)
    assert not bool(summary["verified"])
    assert summary["verify"] == verify
    residual = float(summary["residual"])
    assert np.isnan(residual) if damage == "poison" else residual > 10 * float(summary["tolerance"])


def test_run_without_verification_reports_none(tmp_path, monkeypatch):
    """--verify none: a wrong C is not caught, and the summary does not claim it was checked."""
    _corrupting(monkeypatch, lambda c: c.fill(0.0))
    result = hpcmm.run(_config(tmp_path, verify="none"), comm=MPI.COMM_SELF, write=False)
    assert result.check is None
    assert result.summary["verified"] is False and result.summary["verify"] == "none"
    assert np.isnan(result.summary["residual"])


def test_full_check_allows_for_results_that_underflow(tmp_path):
    """float16 10×1×1 (seed 232): some elements of C are subnormal, right to the last bit of float16
    yet up to 5 % off the float64 product; the full check passes them (corrupted products still fail:
    the tests above)."""
    from hpcmm.verify import UNDERFLOW, underflow

    assert underflow("float16", k=1, steps=1) == 2.0 * (2.0**-150 + 2 * 2.0**-25)
    assert underflow("complex64", k=3, steps=2) == 4.0 * (3 * UNDERFLOW["float32"] + 3 * UNDERFLOW["float32"])
    cfg = RunConfig(device="cpu", m=10, n=1, k=1, dtype="float16", seed=232, verify="full", warmup=0, iters=1,
                    quiet=True, out=str(tmp_path / "r.h5"))
    result = hpcmm.run(cfg, comm=MPI.COMM_SELF, write=False)
    assert result.check.passed, result.check
    assert 0 < result.check.residual <= result.check.tolerance
