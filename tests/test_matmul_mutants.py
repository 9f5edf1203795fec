"""What ``hpcmm.Matmul`` promises that its mutants showed no test pinned (docs/mutation.md).

The ranks' agreement on the settings runs with ranks as threads (tests/thread_comm.py): a rank
given other settings than the rest makes every rank raise the same InputError, naming the setting,
before anything is built; an argument wrong on one rank fails every rank.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
from mpi4py import MPI
from thread_comm import ThreadComm

import hpcmm
from hpcmm.config import RunConfig
from hpcmm.errors import InputError
from hpcmm.matmul import Matmul

SELF = MPI.COMM_SELF


class _Job(ThreadComm):
    """The threads' communicator, also as ``MPI.COMM_WORLD`` (errors name a rank by its rank in the job)."""

    def run(self, body, monkeypatch):
        monkeypatch.setattr(MPI, "COMM_WORLD", self)
        return super().run(body)


def _same_input_error_everywhere(outcomes) -> str:
    """Every rank raised one and the same InputError: its text."""
    assert all(kind == "raised" and isinstance(exc, InputError) for kind, exc in outcomes), outcomes
    messages = {str(exc) for _, exc in outcomes}
    assert len(messages) == 1, messages
    return messages.pop()


@pytest.mark.parametrize("field, values, shown", [
    ("alpha", (1.0, 2.0), ("1.0", "2.0")),
    ("beta", (0.0, 1.5), ("0.0", "1.5")),
    ("op_a", ("N", "T"), ("N", "T")),
    ("op_b", ("N", "T"), ("N", "T")),
], ids=["alpha", "beta", "op_a", "op_b"])
def test_ranks_given_different_semantics_all_fail_naming_the_setting(field, values, shown, monkeypatch):
    job = _Job(2)

    def body(rank):
        Matmul(job, 4, 4, 4, "float64", **{field: values[rank]}).plan()

    message = _same_input_error_everywhere(job.run(body, monkeypatch))
    assert f"the ranks differ in setting {field}: {shown[0]} on rank 0; {shown[1]} on rank 1" in message


def test_ranks_holding_their_blocks_in_different_layouts_all_fail_naming_the_layout(monkeypatch):
    job = _Job(2)
    layouts = (None, hpcmm.Layout.grid(4, 4, 4, (2, 1)))

    def body(rank):
        Matmul(job, 4, 4, 4, "float64", layout=layouts[rank]).plan()

    message = _same_input_error_everywhere(job.run(body, monkeypatch))
    assert "the ranks differ in setting layout:" in message and "on rank 0;" in message


@pytest.mark.parametrize("make", [
    lambda job, rank: Matmul(job, 4, 4, 4, "float7" if rank else "float64"),
    lambda job, rank: Matmul.from_config(job, RunConfig(device="cpu"), shape=(4, 0 if rank else 4, 4)),
], ids=["constructor", "from_config"])
def test_an_argument_wrong_on_one_rank_fails_every_rank(make, monkeypatch):
    job = _Job(2)
    message = _same_input_error_everywhere(job.run(lambda rank: make(job, rank), monkeypatch))
    assert "float7" in message or "n=0" in message


def test_a_lone_error_leaves_the_tear_down_to_the_job():
    """Leaving ``with`` on an error of this rank alone frees nothing collectively (the other ranks
    may wait elsewhere); leaving it normally, or on an error every rank agreed on, frees the plan."""
    with pytest.raises(RuntimeError):
        with Matmul(SELF, 2, 2, 2, "float64") as lone:
            raise RuntimeError("this rank only")
    assert lone.plan_seconds is None and lone._comm is not None
    lone.free()
    with Matmul(SELF, 2, 2, 2, "float64") as calm:
        calm.plan()
    with pytest.raises(InputError, match="was freed"):
        calm.plan()


def test_the_function_form_passes_on_every_argument():
    """``hpcmm.matmul`` multiplies with the caller's layout, ops and options, and names A when A is not an array."""
    rng = np.random.default_rng(11)
    m, n, k = 5, 4, 3
    a = rng.standard_normal((k, m)) + 1j * rng.standard_normal((k, m))  # stored k×m: op_a = "T"
    b = rng.standard_normal((n, k)) + 1j * rng.standard_normal((n, k))  # op_b = "C"
    c = rng.standard_normal((m, n)) + 0j
    want = 2.0 * a.T @ b.conj().T + 0.5 * c
    layout = hpcmm.Layout.grid(m, n, k, (1, 1), op_a="T", op_b="C")
    out = hpcmm.matmul(SELF, a, b, c, m=m, n=n, k=k, layout=layout, alpha=2.0, beta=0.5, op_a="T", op_b="C",
                       options={"panel": 2})
    np.testing.assert_allclose(out, want, rtol=1e-13, atol=1e-13)
    with pytest.raises(InputError, match=r"options \['pannel'\]: not options of hpcmm.Matmul \(known: algo, balance, .*, panel, prefetch"):
        hpcmm.matmul(SELF, a, b, m=m, n=n, k=k, op_a="T", op_b="C", options={"pannel": 2})
    with pytest.raises(InputError, match=r"\bA\b"):
        hpcmm.matmul(SELF, "not an array", b, m=m, n=n, k=k, op_a="T", op_b="C")
    with pytest.raises(InputError, match=r"layout holds A as \(5, 3\)"):  # the layout is the caller's, checked
        hpcmm.matmul(SELF, a, b, m=m, n=n, k=k, layout=hpcmm.Layout.grid(m, n, k, (1, 1)), op_a="T", op_b="C")


def test_a_read_only_c_is_refused_and_read_only_a_and_b_are_read():
    rng = np.random.default_rng(12)
    a, b = rng.standard_normal((3, 2)), rng.standard_normal((2, 4))
    a.flags.writeable = b.flags.writeable = False
    with Matmul(SELF, 3, 4, 2, "float64") as mm:
        np.testing.assert_allclose(mm.execute(a, b), a @ b, rtol=1e-13)
        c = np.zeros((3, 4))
        c.flags.writeable = False
        with pytest.raises(InputError, match=r"\bC\b"):
            mm.execute(a, b, c)


def test_an_operand_after_a_missing_one_is_still_checked():
    """``c`` is checked though ``b``... is given; and with β ≠ 0 a missing C is refused."""
    rng = np.random.default_rng(13)
    a, b = rng.standard_normal((3, 2)), rng.standard_normal((2, 4))
    with Matmul(SELF, 3, 4, 2, "float64", beta=1.0) as mm:
        with pytest.raises(InputError, match="needs c"):
            mm.execute(a, b)
        with pytest.raises(InputError, match=r"\bC\b"):
            mm.execute(a, b, np.zeros((4, 3)))


def test_an_execute_reports_its_own_seconds_and_copies():
    """``last.seconds`` is the call's own length (at least the product's, at most the wall clock around it),
    and each execute counts its own copies, not the ones before."""
    rng = np.random.default_rng(14)
    a, b = rng.standard_normal((6, 5)), rng.standard_normal((5, 4))
    with Matmul(SELF, 6, 4, 5, "float64", alpha=1.5) as mm:
        mm.plan()
        for _ in range(2):
            c = np.full((6, 4), np.nan)
            before = time.perf_counter()
            out = mm.execute(a, b, c)
            wall = time.perf_counter() - before
            assert out is c and np.allclose(c, 1.5 * a @ b)
            assert mm.last.product_seconds <= mm.last.seconds <= wall
            assert mm.last.copied_bytes == (30 + 20 + 24) * 8


def test_the_caller_writing_hpcmms_own_blocks_is_read_in_place_with_op():
    """Blocks from ``empty`` are hpcmm's own: filled by the caller, read without a copy, C written in place."""
    rng = np.random.default_rng(15)
    with Matmul(SELF, 4, 3, 5, "float64", op_a="T") as mm:
        a, b, c = mm.empty("A"), mm.empty("B"), mm.empty("C")
        assert a.shape == (5, 4) and a.dtype == np.float64
        a[...] = rng.standard_normal((5, 4))
        b[...] = rng.standard_normal((5, 3))
        want = a.T @ b
        out = mm.execute(a, b, c)
        np.testing.assert_allclose(out, want, rtol=1e-13)
        assert mm.last.copied_bytes == 4 * 5 * 8  # only op(A), transposed into hpcmm's block


def test_missing_a_or_b_is_named():
    b = np.ones((2, 4))
    with Matmul(SELF, 3, 4, 2, "float64") as mm:
        for args, name in (((None, b), "A"), ((np.ones((3, 2)), None), "B")):
            with pytest.raises(InputError, match=f"^{name} is None"):
                mm.execute(*args)


def test_a_transposed_view_of_hpcmms_block_is_copied_not_read_in_place():
    """Same memory and shape but other strides: the caller's matrix is the transpose, so it is copied."""
    rng = np.random.default_rng(16)
    with Matmul(SELF, 4, 3, 4, "float64") as mm:
        own = mm.empty("A")
        own[...] = rng.standard_normal((4, 4))
        b = rng.standard_normal((4, 3))
        want = own.T @ b
        np.testing.assert_allclose(mm.execute(own.T, b), want, rtol=1e-13)
        assert mm.last.copied_bytes == (16 + 12 + 12) * 8


def test_blocks_handed_out_have_the_products_type():
    with Matmul(SELF, 3, 4, 2, "float32") as mm:
        assert {mm.empty(name).dtype for name in "ABC"} == {np.dtype(np.float32)}
    with Matmul(SELF, 2, 2, 2, "bfloat16") as mm:  # named as text: a type numpy knows only through ml_dtypes
        assert mm.empty("C").dtype.name == "bfloat16"


@pytest.mark.parametrize("layout, message", [
    ("2x2", "layout of type str: expected hpcmm.Layout"),
    (hpcmm.Layout.grid(3, 4, 2, (2, 1)), "layout of 2 rank(s) for a communicator of 1"),
], ids=["not-a-layout", "other-size"])
def test_a_bad_layout_is_named(layout, message):
    with pytest.raises(InputError) as info:
        Matmul(SELF, 3, 4, 2, "float64", layout=layout)
    assert str(info.value) == message
