"""The library's pieces without a launcher (layouts, plans, the ranks' agreement, arguments), then the
example program and the command line's agreement check under mpiexec.

The products themselves are checked against numpy at 1–4 ranks in tests/mpi/test_matmul_mpi.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from launcher import mpiexec_or_skip, quiet_environment, run_launcher
from mpi4py import MPI

import hpcmm
from hpcmm.planning.plan import Plan, agree_on
from hpcmm.io.redistribute import overlap, redistribute

REPO = Path(__file__).resolve().parents[1]


# -- Layout -------------------------------------------------------------------------


def test_grid_layout_holds_every_element_once_in_stored_orientation():
    layout = hpcmm.Layout.grid(7, 5, 4, (2, 3), op_a="T", order=(5, 4, 3, 2, 1, 0))
    assert layout.shapes == {"A": (4, 7), "B": (4, 5), "C": (7, 5)}
    for name, shape in layout.shapes.items():
        seen = np.zeros(shape, int)
        for rank in range(6):
            (r0, r1), (c0, c1) = layout.ranges(name, rank)
            seen[r0:r1, c0:c1] += 1
        assert (seen == 1).all(), name
    # rank 5 sits at grid position 0: the first rows of op(A), so the first columns of A as stored
    assert layout.ranges("A", 5) == ((0, 2), (0, 4))
    assert layout.local_shape("C", 0) == (3, 1)


@pytest.mark.parametrize("blocks, message", [
    ([((0, 2), (0, 2)), ((1, 2), (0, 2))], "overlap"),
    ([((0, 1), (0, 2)), ((1, 1), (0, 2))], "cover 2 of its 4"),
    ([((0, 2), (0, 3)), ((0, 0), (0, 0))], "outside"),
])
def test_a_layout_that_is_not_a_partition_is_refused(blocks, message):
    whole = [((0, 2), (0, 2)), ((0, 0), (0, 0))]
    with pytest.raises(ValueError, match=message):
        hpcmm.Layout({"A": (2, 2), "B": (2, 2), "C": (2, 2)}, {"A": blocks, "B": whole, "C": whole})


def test_block_cuts_the_ranks_part_of_a_global_array():
    layout = hpcmm.Layout.grid(4, 4, 4, (2, 2))
    whole = np.arange(16.0).reshape(4, 4)
    part = layout.block("B", 3, whole)
    np.testing.assert_array_equal(part, whole[2:, 2:])
    part[...] = -1  # a copy: the caller's array is left as it was
    assert whole.min() == 0
    with pytest.raises(ValueError, match=r"shape \(3, 4\)"):
        layout.block("B", 3, whole[:3])


def test_redistribute_at_one_rank_and_overlap():
    block = np.arange(12.0).reshape(3, 4)
    got = redistribute(MPI.COMM_SELF, block, [((0, 3), (0, 4))], [((0, 3), (0, 4))])
    np.testing.assert_array_equal(got, block)
    assert overlap(((0, 2), (0, 2)), ((2, 3), (0, 2))) is None


# -- the ranks' agreement -----------------------------------------------------------


class _Ranks:
    """A communicator whose allgather returns what several ranks would have given."""

    def __init__(self, values):
        self.values = values

    def allgather(self, mine):
        return self.values


def test_agree_on_names_each_field_and_the_ranks_of_each_value():
    same = {"m": "64", "panel": "None"}
    with pytest.raises(hpcmm.InputError) as caught:
        agree_on(_Ranks([same, same | {"panel": "8"}, same, same | {"panel": "8"}, same]), same, "setting")
    message = str(caught.value)
    assert "setting panel: None on ranks 0, 2, 4; 8 on ranks 1, 3" in message
    assert "m:" not in message and caught.value.agreed and caught.value.exit_code == 2
    agree_on(_Ranks([same, same]), same)  # no difference, no error


def test_a_plan_prints_and_its_digest_follows_every_field():
    plan = Plan(m=8, n=4, k=2, dtype="float64", alpha=2.0, op_b="T", grid="2x1", panel=2, steps=1)
    assert plan.digest in str(plan) and "opT(B)" in str(plan)
    assert json.loads(plan.to_json())["grid"] == "2x1"
    assert Plan(m=8, n=4, k=2, dtype="float64", alpha=2.0, op_b="T", grid="2x1", panel=2, steps=1).digest == plan.digest
    assert Plan(m=8, n=4, k=2, dtype="float64", alpha=2.0, op_b="T", grid="2x1", panel=4, steps=1).digest != plan.digest
    with pytest.raises(AttributeError):
        plan.panel = 4  # frozen


@pytest.mark.parametrize("args, message", [
    (dict(m=0), "^m=0: expected a positive integer$"),
    (dict(n=0), "^n=0: expected a positive integer$"),
    (dict(k=-3), "^k=-3: expected a positive integer$"),
    (dict(m=True), "^m=True: expected a positive integer$"),
    (dict(n=2.0), r"^n=2\.0: expected a positive integer$"),
    (dict(dtype="int32"), "^dtype='int32': expected one of float64, float32, float16, bfloat16, complex128, complex64$"),
    (dict(dtype=np.int64), "^dtype='int64': expected one of "),
    (dict(op_a="X"), "^op_a='X': expected one of N, T, C$"),
    (dict(op_b="n"), "^op_b='n': expected one of N, T, C$"),
    (dict(alpha=1j), r"^alpha=1j: complex, and dtype=float64 is real$"),
    (dict(beta=2j), r"^beta=2j: complex, and dtype=float64 is real$"),
    (dict(alpha=True), "^alpha=True: expected a finite number$"),
    (dict(alpha="2"), "^alpha='2': expected a finite number$"),
    (dict(beta=float("nan")), "^beta=nan: expected a finite number$"),
    (dict(beta=float("inf")), "^beta=inf: expected a finite number$"),
    (dict(options={"panels": 3}), r"options \['panels'\]"),
    (dict(options={"panel": 0}), "--panel"),
    (dict(layout=hpcmm.Layout.grid(3, 3, 3, (1, 1))), r"layout holds A as \(3, 3\)"),
])
def test_bad_arguments_are_input_errors_naming_the_value(args, message):
    call = dict(m=4, n=4, k=4, dtype="float64") | args
    with pytest.raises(hpcmm.InputError, match=message):
        hpcmm.Matmul(MPI.COMM_SELF, call.pop("m"), call.pop("n"), call.pop("k"), call.pop("dtype"), **call)


def test_the_smallest_problem_and_dtypes_given_as_numpy_types():
    """m = n = k = 1 is a product; a numpy type names the dtype; α and β keep the type's kind."""
    with hpcmm.Matmul(MPI.COMM_SELF, 1, 1, 1, np.float32, alpha=2, beta=0.5) as mm:
        assert mm.dtype == np.float32 and (mm.alpha, mm.beta) == (2.0, 0.5)
        assert type(mm.alpha) is float and type(mm.beta) is float
        c = np.full((1, 1), 4.0, np.float32)
        out = mm.execute(np.full((1, 1), 3.0, np.float32), np.full((1, 1), 5.0, np.float32), c)
        assert out is c and c[0, 0] == 2 * 15 + 0.5 * 4
    with hpcmm.Matmul(MPI.COMM_SELF, 2, 3, 4, np.dtype("complex64"), alpha=1, beta=1j, op_b="C") as mm:
        assert mm.dtype == np.complex64 and mm.beta == 1j and type(mm.alpha) is complex
        plan = mm.plan()
        assert (plan.alpha, plan.beta, plan.op_a, plan.op_b) == (1, 1j, "N", "C")


def test_before_and_after_a_product_and_once_freed():
    mm = hpcmm.Matmul(MPI.COMM_SELF, 6, 5, 4, "float64", op_a="T")
    assert mm.plan_seconds is None and mm.last is None
    plan = mm.plan()
    assert mm.plan() is plan and 0 <= mm.plan_seconds < 60  # planned once
    assert (plan.m, plan.n, plan.k) == (6, 5, 4) and plan.algorithm == "summa"
    assert (plan.alpha, plan.beta, plan.op_a, plan.op_b) == (1.0, 0.0, "T", "N")  # the product the plan is of
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((4, 6)), rng.standard_normal((4, 5))
    c = mm.execute(a, b)
    assert np.allclose(c, a.T @ b) and isinstance(mm.last, hpcmm.ExecuteTimes)
    assert mm.last.copied_bytes == (6 * 4 + 4 * 5 + 6 * 5) * 8 and mm.last.moved_bytes == 0  # A, B in; C out
    assert mm.last.product is not None and mm.last.product.seconds == mm.last.product_seconds
    mm.free()
    with pytest.raises(hpcmm.InputError, match="^this Matmul was freed: make a new one$"):
        mm.plan()


def test_host_seconds_leave_out_a_product_that_the_device_ends_late(monkeypatch):
    """A product whose closing synchronize returns late (a device busy with other ranks' slices)
    counts as the product's time, not the host's: host_seconds is the call less the product's
    window on the host."""
    with hpcmm.Matmul(MPI.COMM_SELF, 5, 4, 3, "float64") as mm:
        mm.plan()
        engine = mm.assembly.engine
        multiply = engine.multiply

        def late():
            times = multiply()
            time.sleep(0.3)
            return times

        monkeypatch.setattr(engine, "multiply", late)
        rng = np.random.default_rng(8)
        mm.execute(rng.standard_normal((5, 3)), rng.standard_normal((3, 4)))
        last = mm.last
        assert last.start <= last.product_start <= last.product_end - 0.3 <= last.start + last.seconds - 0.3
        assert 0 <= last.host_seconds <= last.seconds - 0.3
        assert last.host_seconds == pytest.approx(last.seconds - (last.product_end - last.product_start))


def test_own_blocks_and_their_views_are_read_in_place():
    """hpcmm's own blocks (Matmul.empty, or a new view of them) are neither checked against the caller's
    shape nor copied; any other array is, a transposed view of an own block included."""
    with hpcmm.Matmul(MPI.COMM_SELF, 6, 6, 6, "float64") as mm:
        mm.plan()
        a, b, c = mm.empty("A"), mm.empty("B"), mm.empty("C")
        assert mm.empty("A") is a and mm.empty("C") is c
        rng = np.random.default_rng(4)
        a[...], b[...] = rng.standard_normal((6, 6)), rng.standard_normal((6, 6))
        want = a @ b
        out = mm.execute(a[...], b, c[...])
        assert mm.last.copied_bytes == 0 and np.allclose(c, want) and np.shares_memory(out, c)
        a_t = a.T  # the same memory, other strides: the caller's A as stored, copied in
        mm.execute(a_t, b)
        assert mm.last.copied_bytes > 0
    with pytest.raises(hpcmm.InputError, match="^operand 'D': expected one of A, B, C$"):
        with hpcmm.Matmul(MPI.COMM_SELF, 2, 2, 2, "float64") as mm:
            mm.empty("D")
    with hpcmm.Matmul(MPI.COMM_SELF, 3, 2, 4, "float64", op_a="T") as mm:
        assert mm.empty("A").shape == (4, 3)  # stored as k×m: not hpcmm's own (m×k) block
        assert mm.empty("B").shape == (4, 2) and mm.empty("C").shape == (3, 2)


def test_a_returned_c_is_the_callers_and_moves_are_counted():
    """Without ``c`` execute returns a new array (a later product does not change it); a caller's layout,
    even the plan's own given explicitly, moves A, B and C through MPI and counts their bytes."""
    rng = np.random.default_rng(6)
    a, b = rng.standard_normal((5, 3)), rng.standard_normal((3, 4))
    with hpcmm.Matmul(MPI.COMM_SELF, 5, 4, 3, "float64", alpha=3.0) as mm:
        mm.plan()
        first = mm.execute(a, b)
        kept = first.copy()
        mm.execute(2 * a, b)
        assert np.array_equal(first, kept) and np.allclose(first, 3 * a @ b)
        assert mm.last.copied_bytes == (15 + 12 + 20) * 8 and mm.last.moved_bytes == 0
    layout = hpcmm.Layout.grid(5, 4, 3, (1, 1))
    with hpcmm.Matmul(MPI.COMM_SELF, 5, 4, 3, "float64", layout=layout, beta=-1.0) as mm:
        mm.plan()
        c = rng.standard_normal((5, 4))
        want = a @ b - c
        out = mm.execute(a, b, c)
        assert out is c and np.allclose(c, want)
        assert mm.last.moved_bytes == (15 + 12 + 20) * 8  # A, B in; C out
        assert mm.empty("C") is not mm.empty("C")  # in a caller's layout every block is the caller's


def test_from_config_takes_a_given_shape_or_the_devices_default():
    """The command line's Matmul: the product of a whole RunConfig, its sizes from the input files (``shape``)
    or, where unset, the device's default; α, β, the ops and the type from the config."""
    from hpcmm.config import DEFAULT_SIZE_CPU, RunConfig
    from hpcmm.matmul import Matmul

    config = RunConfig(dtype="float32", alpha=2.0, beta=0.5, op_b="T", device="cpu", quiet=True)
    with Matmul.from_config(MPI.COMM_SELF, config, shape=(5, 6, 7)) as mm:
        plan = mm.plan()
        assert (mm.m, mm.n, mm.k) == (plan.m, plan.n, plan.k) == (5, 6, 7) and mm.dtype == np.float32
        assert (plan.alpha, plan.beta, plan.op_a, plan.op_b) == (2.0, 0.5, "N", "T")
        engine = mm.assembly.engine
        assert engine.A.shape == (5, 7) and engine.B.shape == (7, 6)  # op(A) and op(B), as the engine holds them
        rng = np.random.default_rng(7)
        a, b, c = (rng.standard_normal(s).astype(np.float32) for s in ((5, 7), (6, 7), (5, 6)))
        want = 2 * a @ b.T + 0.5 * c
        mm.execute(a, b, c)
        assert np.allclose(c, want, rtol=1e-5)
    with Matmul.from_config(MPI.COMM_SELF, config.replace(m=9)) as mm:
        assert (mm.plan().m, mm.plan().n, mm.plan().k) == (9, 9, 9)  # --n and --k follow --m
    with Matmul.from_config(MPI.COMM_SELF, config) as mm:
        assert (mm.plan().m, mm.n, mm.k) == (DEFAULT_SIZE_CPU,) * 3 and mm.assembly.config.m == DEFAULT_SIZE_CPU
    with pytest.raises(hpcmm.InputError, match="^n=0: expected a positive integer$"):
        Matmul.from_config(MPI.COMM_SELF, config, shape=(3, 0, 2))


def test_the_one_call_form_takes_its_type_from_a():
    rng = np.random.default_rng(5)
    a, b, c = (rng.standard_normal(s).astype(np.float32) for s in ((3, 4), (4, 2), (3, 2)))
    out = hpcmm.matmul(MPI.COMM_SELF, a, b, c.copy(), m=3, n=2, k=4, alpha=-1.0, beta=2.0)
    assert out.dtype == np.float32 and np.allclose(out, -(a @ b) + 2 * c, rtol=1e-5)


def test_options_beat_the_environment_which_beats_the_default():
    opts = hpcmm.MatmulOptions(prefetch=2)
    config = opts.config(8, 8, 8, "float64", environ={"HPCMM_PANEL": "16", "HPCMM_PREFETCH": "3"})
    assert (config.m, config.n, config.k, config.dtype) == (8, 8, 8, "float64")
    assert config.panel == 16 and config.prefetch == 2 and config.timeline is False
    assert config.from_environment == frozenset({"panel"})
    assert hpcmm.MatmulOptions(timeline=True).config(8, 8, 8, "float64", environ={}).timeline is True
    assert hpcmm.MatmulOptions(algo="2.5d:2").config(8, 8, 8, "float64", environ={}).algo == "2.5d:2"
    assert hpcmm.MatmulOptions(grid=[2, 1]).config(8, 8, 8, "float64", environ={}).grid == (2, 1)
    with pytest.raises(hpcmm.InputError, match=r"^options of type int: expected hpcmm.MatmulOptions, a dict or None$"):
        hpcmm.Matmul(MPI.COMM_SELF, 2, 2, 2, "float64", options=3)


def test_import_hpcmm_and_a_plan_do_not_import_the_cost_model():
    code = ("import sys, numpy as np; from mpi4py import MPI; import hpcmm\n"
            "with hpcmm.Matmul(MPI.COMM_SELF, 8, 8, 8, 'float64') as mm:\n"
            "    p = mm.plan(); c = mm.execute(np.ones((8, 8)), np.ones((8, 8)))\n"
            "assert (c == 8).all(), c\n"
            "print('hpcmm.model.cost' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                         env=quiet_environment(), check=True)
    assert out.stdout.strip() == "False"


# -- under mpiexec --------------------------------------------------------------------

#: A guard against a hang, never a speed limit: the runs take a few seconds.
HANG_GUARD = 300


def test_the_example_multiplies_at_four_ranks():
    mpiexec = mpiexec_or_skip()
    done = run_launcher([mpiexec, "-n", "4", sys.executable, "examples/matmul.py"], HANG_GUARD,
                        env=quiet_environment())
    assert done.returncode == 0, done.stdout
    assert "numpy: 10 products, max error" in done.stdout


@pytest.mark.parametrize("first, second, field", [
    ({"HPCMM_PANEL": "8"}, {}, "setting panel: 8 on rank 0; None on rank 1"),
    ({}, {"--m": "96"}, "setting m: 64 on rank 0; 96 on rank 1"),
])
def test_a_rank_given_another_setting_fails_every_rank_with_one_line(tmp_path, first, second, field):
    """MPMD: one rank alone is launched with another valid value; every rank exits 2, one line names it."""
    mpiexec = mpiexec_or_skip()

    def rank_command(env, flags, index):
        options = {"--m": "64", "--out": str(tmp_path / "r.h5")} | flags
        args = " ".join(f"{key} {value}" for key, value in options.items())
        setting = " ".join(f"{key}={value}" for key, value in env.items())
        return ["-n", "1", "sh", "-c", f"env {setting} {sys.executable} -m hpcmm {args} 2>{tmp_path}/err.{index}; "
                                       f"echo $? > {tmp_path}/rc.{index}"]

    cmd = [mpiexec, *rank_command(first, {}, 0), ":", *rank_command({}, second, 1)]
    done = run_launcher(cmd, HANG_GUARD, cwd=tmp_path, env=quiet_environment())
    codes = [(tmp_path / f"rc.{i}").read_text().strip() for i in range(2)]
    assert codes == ["2", "2"], done.stdout
    errors = "".join((tmp_path / f"err.{i}").read_text() for i in range(2)).strip().splitlines()
    assert len(errors) == 1 and field in errors[0], errors
    assert not (tmp_path / "r.h5").exists()


@pytest.mark.parametrize("verify", ["freivalds", "full"])
@pytest.mark.parametrize("wrong", ["beta ignored", "alpha ignored"])
def test_the_check_catches_a_wrong_alpha_or_beta(monkeypatch, verify, wrong):
    """The check of ``run`` judges C against α·A·B + β·C₀ of the blocks as loaded: an execute that left α
    or β out fails it.  (How the blocks are loaded, op included, is held against numpy in
    tests/mpi/test_matmul_mpi.py.)"""
    from hpcmm.config import RunConfig
    from hpcmm.matmul import Matmul

    scale_own = Matmul._scale_own

    def wrong_scale(self, kept):
        if wrong == "beta ignored":
            return scale_own(self, None)  # α applied, β·C₀ left out
        alpha, self.alpha = self.alpha, 1.0
        try:
            return scale_own(self, kept)  # β·C₀ added, α left out
        finally:
            self.alpha = alpha

    monkeypatch.setattr(Matmul, "_scale_own", wrong_scale)
    config = RunConfig(m=40, n=31, k=27, dtype="complex128", alpha=1.5, beta=-0.5, op_a="C", verify=verify,
                       iters=1, warmup=0, quiet=True)
    with pytest.raises(hpcmm.VerificationError):
        hpcmm.run(config, comm=MPI.COMM_SELF, write=False)
