"""The library's pieces without a launcher (layouts, plans, the ranks' agreement, arguments), then the
example program and the command line's agreement check under mpiexec.

The products themselves are checked against numpy at 1–4 ranks in tests/mpi/test_matmul_mpi.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
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
    (dict(m=0), "m=0: expected a positive integer"),
    (dict(dtype="int32"), "dtype='int32'"),
    (dict(op_a="X"), "op_a='X'"),
    (dict(alpha=1j), r"alpha=1j: complex, and dtype=float64 is real"),
    (dict(beta=float("nan")), "beta=nan: expected a finite number"),
    (dict(options={"panels": 3}), r"options \['panels'\]"),
    (dict(options={"panel": 0}), "--panel"),
    (dict(layout=hpcmm.Layout.grid(3, 3, 3, (1, 1))), r"layout holds A as \(3, 3\)"),
])
def test_bad_arguments_are_input_errors_naming_the_value(args, message):
    call = dict(m=4, n=4, k=4, dtype="float64") | args
    with pytest.raises(hpcmm.InputError, match=message):
        hpcmm.Matmul(MPI.COMM_SELF, call.pop("m"), call.pop("n"), call.pop("k"), call.pop("dtype"), **call)


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
