"""``hpcmm.run`` at one CPU rank, at the edges its own steps decide: what it refuses, says and writes.

Written against the mutants that mutation testing of hpcmm/cli/run.py left alive (docs/mutation.md):
inputs that hold NaN or Inf (refused, or run unchecked with ``allow_nonfinite``), complex files for a
real type, the output path checked against the inputs only where a file is written, the host memory
the timings need, the progress lines word for word, β·C₀ in every timed product, and the message of
a failed check.  Every run is a few elements over ``COMM_SELF``, with random data.
"""

from __future__ import annotations

import json
import warnings

import h5py
import numpy as np
import pytest
from mpi4py import MPI

import hpcmm
import hpcmm.cli.run as run_module
from hpcmm.config import RunConfig
from hpcmm.errors import InputError, VerificationError, raised_everywhere
from hpcmm.execution.engine import Engine
from hpcmm.io.inputs import generate_block

GiB = 2**30


def _config(tmp_path, **changes) -> RunConfig:
    base = dict(m=9, n=7, k=11, device="cpu", warmup=0, iters=1, quiet=True, out=str(tmp_path / "r.h5"))
    base.update(changes)
    if base.get("a") is not None:  # the sizes come from the files
        for size in "mnk":
            base.pop(size)
    return RunConfig(**base)


def _npy(tmp_path, name: str, matrix: np.ndarray) -> tuple[str, None]:
    path = tmp_path / f"{name}.npy"
    np.save(path, matrix)
    return (str(path), None)


def _random(shape, seed: int, dtype="float64") -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


# -- inputs that hold NaN or Inf --------------------------------------------------------------


def _poisoned(tmp_path, op_a="N"):
    """A (9 x 11 as op(A)) with NaN at (2, 5) and (7, 1), Inf at (2, 8); B (11 x 7) with -Inf at (10, 0)."""
    a = _random((9, 11), 1)
    a[2, 5], a[7, 1], a[2, 8] = np.nan, np.nan, np.inf
    b = _random((11, 7), 2)
    b[10, 0] = -np.inf
    stored = a if op_a == "N" else a.T.copy()
    return _npy(tmp_path, "a", stored), _npy(tmp_path, "b", b)


def test_nonfinite_inputs_are_refused_with_their_count_and_first_place(tmp_path):
    a, b = _poisoned(tmp_path)
    with pytest.raises(InputError) as caught:
        hpcmm.run(_config(tmp_path, a=a, b=b), comm=MPI.COMM_SELF)
    assert str(caught.value) == (f"--a={a[0]}: 3 non-finite value(s), first at (2, 5); "
                                 f"--b={b[0]}: 1 non-finite value(s), first at (10, 0): "
                                 "refusing to run (pass --allow-nonfinite)")
    assert caught.value.exit_code == 2
    assert not (tmp_path / "r.h5").exists()


def test_a_transposed_input_names_its_place_in_op_a(tmp_path):
    """A stored k x m with --op-a T: the first non-finite value is placed in op(A), not in the file."""
    a, b = _poisoned(tmp_path, op_a="T")
    with pytest.raises(InputError) as caught:
        hpcmm.run(_config(tmp_path, a=a, b=b, op_a="T"), comm=MPI.COMM_SELF)
    assert str(caught.value).startswith(f"--a={a[0]}: 3 non-finite value(s), first at (2, 5); ")


def test_only_b_nonfinite_names_only_b(tmp_path):
    b = _random((11, 7), 3)
    b[4, 6] = np.nan
    a, b = _npy(tmp_path, "a", _random((9, 11), 4)), _npy(tmp_path, "b", b)
    with pytest.raises(InputError) as caught:
        hpcmm.run(_config(tmp_path, a=a, b=b), comm=MPI.COMM_SELF)
    assert str(caught.value) == (f"--b={b[0]}: 1 non-finite value(s), first at (4, 6): "
                                 "refusing to run (pass --allow-nonfinite)")


def test_a_value_beyond_the_type_is_reported_as_that_type(tmp_path):
    """float64 1e6 is finite on disk and Inf as float16: the report says it counts as --dtype, and the cast
    itself warns of nothing (the report is the one message)."""
    a = _random((9, 11), 5)
    a[0, 3] = 1e6
    a, b = _npy(tmp_path, "a", a), _npy(tmp_path, "b", _random((11, 7), 6))
    with pytest.raises(InputError) as caught, warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        hpcmm.run(_config(tmp_path, a=a, b=b, dtype="float16"), comm=MPI.COMM_SELF)
    assert [str(w.message) for w in warned if issubclass(w.category, RuntimeWarning)] == []
    assert str(caught.value) == (f"--a={a[0]}: 1 non-finite value(s) as --dtype=float16, first at (0, 3): "
                                 "refusing to run (pass --allow-nonfinite)")


def test_a_value_stored_in_the_runs_own_type_is_not_said_to_be_cast(tmp_path):
    a = _random((9, 11), 19, "float32")
    a[5, 5] = np.nan
    a, b = _npy(tmp_path, "a", a), _npy(tmp_path, "b", _random((11, 7), 20, "float32"))
    with pytest.raises(InputError) as caught:
        hpcmm.run(_config(tmp_path, a=a, b=b, dtype="float32"), comm=MPI.COMM_SELF)
    assert str(caught.value) == (f"--a={a[0]}: 1 non-finite value(s), first at (5, 5): "
                                 "refusing to run (pass --allow-nonfinite)")


def test_allowed_nonfinite_inputs_run_unchecked_with_a_warning(tmp_path):
    a, b = _poisoned(tmp_path)
    said = []
    config = _config(tmp_path, a=a, b=b, allow_nonfinite=True, verify="full", save_c=True, quiet=False)
    result = hpcmm.run(config, comm=MPI.COMM_SELF, progress=said.append)
    warning = (f"warning: --a={a[0]}: 3 non-finite value(s), first at (2, 5); "
               f"--b={b[0]}: 1 non-finite value(s), first at (10, 0); verification skipped")
    assert warning in said
    assert result.check is None
    assert result.summary["verify"] == "none" and result.summary["verified"] is False
    with h5py.File(config.out, "r") as f:
        c = f["result/C"][()]
    expected = np.load(a[0]) @ np.load(b[0])
    # The product still runs: every finite element of the product is right.
    finite = np.isfinite(expected)
    assert finite.any() and not finite.all()
    np.testing.assert_allclose(c[finite], expected[finite], rtol=1e-12, atol=0)


def test_finite_inputs_from_files_run_checked(tmp_path):
    a, b = _npy(tmp_path, "a", _random((9, 11), 7)), _npy(tmp_path, "b", _random((11, 7), 8))
    said = []
    result = hpcmm.run(_config(tmp_path, a=a, b=b, verify="full", quiet=False), comm=MPI.COMM_SELF,
                       progress=said.append, write=False)
    assert result.check.passed and result.summary["verify"] == "full"
    assert not [line for line in said if line.startswith("warning")]


# -- files: complex inputs, the output path -------------------------------------------------


@pytest.mark.parametrize("which", ["a", "b"])
def test_a_complex_file_needs_a_complex_type(tmp_path, which):
    a, b = _random((9, 11), 9), _random((11, 7), 10)
    if which == "a":
        a = a + 1j * _random((9, 11), 11)
    else:
        b = (b + 1j * _random((11, 7), 12)).astype("complex64")
    a, b = _npy(tmp_path, "a", a), _npy(tmp_path, "b", b)
    source, held = (a, "complex128") if which == "a" else (b, "complex64")
    with pytest.raises(InputError) as caught:
        hpcmm.run(_config(tmp_path, a=a, b=b, dtype="float32"), comm=MPI.COMM_SELF, write=False)
    assert str(caught.value) == (f"--{which}={source[0]} holds {held}: complex input needs a complex --dtype, "
                                 "not --dtype=float32")


def test_complex_files_run_as_a_complex_type(tmp_path):
    a = _random((9, 11), 13) + 1j * _random((9, 11), 14)
    b = _random((11, 7), 15) + 1j * _random((11, 7), 16)
    config = _config(tmp_path, a=_npy(tmp_path, "a", a), b=_npy(tmp_path, "b", b), dtype="complex128",
                     verify="full", save_c=True)
    assert hpcmm.run(config, comm=MPI.COMM_SELF).check.passed
    with h5py.File(config.out, "r") as f:
        np.testing.assert_allclose(f["result/C"][()], a @ b, rtol=1e-12, atol=0)
        # The sizes came from the files, not from the settings: the record says them all the same.
        assert [int(f["config"].attrs[size]) for size in "mnk"] == [9, 7, 11]


def test_the_output_may_not_be_an_input_only_where_it_is_written(tmp_path):
    """--out naming the inputs' file is refused before any work; without writing, the same settings run."""
    path = tmp_path / "in.h5"
    with h5py.File(path, "w") as f:
        f["A"], f["B"] = _random((9, 11), 17), _random((11, 7), 18)
    config = _config(tmp_path, a=(str(path), "A"), b=(str(path), "B"), out=str(path), overwrite=True)
    with pytest.raises(InputError) as caught:
        hpcmm.run(config, comm=MPI.COMM_SELF)
    assert str(caught.value) == f"--out={path} is the input file --a={path}: hpcmm never replaces its inputs"
    with h5py.File(path, "r") as f:
        assert sorted(f) == ["A", "B"]  # untouched
    result = hpcmm.run(config, comm=MPI.COMM_SELF, write=False)
    assert result.path is None and result.check.passed


def test_the_output_may_not_be_b_either(tmp_path):
    a, b = tmp_path / "a.h5", tmp_path / "b.h5"
    with h5py.File(a, "w") as f:
        f["A"] = _random((9, 11), 21)
    with h5py.File(b, "w") as f:
        f["B"] = _random((11, 7), 22)
    config = _config(tmp_path, a=(str(a), "A"), b=(str(b), "B"), out=str(b), overwrite=True)
    with pytest.raises(InputError) as caught:
        hpcmm.run(config, comm=MPI.COMM_SELF)
    assert str(caught.value) == f"--out={b} is the input file --b={b}: hpcmm never replaces its inputs"


def test_stored_b_transposed(tmp_path):
    """--op-b T: B is stored n x k (7 x 11), and the files' shapes are checked as such."""
    a, b = _random((9, 11), 23), _random((7, 11), 24)
    config = _config(tmp_path, a=_npy(tmp_path, "a", a), b=_npy(tmp_path, "b", b), op_b="T", save_c=True,
                     verify="full")
    assert hpcmm.run(config, comm=MPI.COMM_SELF).check.passed
    with h5py.File(config.out, "r") as f:
        np.testing.assert_allclose(f["result/C"][()], a @ b.T, rtol=1e-12, atol=0)


def test_overwrite_replaces_an_earlier_results_file(tmp_path):
    hpcmm.run(_config(tmp_path, m=5), comm=MPI.COMM_SELF)
    hpcmm.run(_config(tmp_path, overwrite=True), comm=MPI.COMM_SELF)
    with h5py.File(tmp_path / "r.h5", "r") as f:
        assert int(f["config"].attrs["m"]) == 9


def test_an_existing_output_is_refused_only_where_it_is_written(tmp_path):
    (tmp_path / "r.h5").write_bytes(b"mine")
    with pytest.raises(InputError) as caught:
        hpcmm.run(_config(tmp_path), comm=MPI.COMM_SELF)
    assert str(caught.value) == f"--out={tmp_path / 'r.h5'}: file exists (pass --overwrite to replace it)"
    assert hpcmm.run(_config(tmp_path), comm=MPI.COMM_SELF, write=False).path is None
    assert (tmp_path / "r.h5").read_bytes() == b"mine"


# -- the host memory of the timings -----------------------------------------------------------


def test_timing_bytes_per_step_product_and_rank():
    assert run_module.timing_bytes(3, 5, 2, True) == 3 * (5 * 2 * 1024 + 2048)
    assert run_module.timing_bytes(3, 5, 2, False) == 3 * (5 * 2 * 256 + 2048)
    assert run_module.timing_bytes(1, 0, 4, True) == 2048


def _device_bytes_and_steps(tmp_path) -> tuple[int, int]:
    """What the run's own record says its blocks take on the host, and its steps."""
    config = _config(tmp_path, panel=4, out=str(tmp_path / "probe.h5"))
    hpcmm.run(config, comm=MPI.COMM_SELF)
    with h5py.File(config.out, "r") as f:
        plan = json.loads(f["config"].attrs["plan"])
        return plan["memory_bytes"][0], int(f["config"].attrs["steps"])


@pytest.mark.parametrize("timeline", [True, False], ids=["timeline", "no_timeline"])
def test_timings_that_just_fit_beside_the_blocks_run(tmp_path, monkeypatch, timeline):
    blocks, steps = _device_bytes_and_steps(tmp_path)
    assert steps == 3 and blocks > 0
    need = steps * (2 * (1024 if timeline else 256) + 2048)
    free = need + blocks
    monkeypatch.setattr(run_module, "host_memory", lambda: (free, 4 * free))
    config = _config(tmp_path, panel=4, iters=2, timeline=timeline)
    assert hpcmm.run(config, comm=MPI.COMM_SELF, write=False).check.passed
    monkeypatch.setattr(run_module, "host_memory", lambda: (free - 1, 4 * free))
    with pytest.raises(InputError) as caught:
        hpcmm.run(config, comm=MPI.COMM_SELF, write=False)
    assert str(caught.value) == (
        f"3 steps x 2 timed product(s) x 1 rank(s): the timings need {need / GiB:.2f} GiB of host memory on "
        f"rank 0, 0.00 GiB available (fewer --iters, a wider --panel, or --no-timeline)")


def test_timings_beyond_the_host_are_refused_before_the_products(tmp_path, monkeypatch):
    """A million timed products of 3 steps: 2.87 GiB the timings, 2 GiB free less the blocks."""
    blocks, _ = _device_bytes_and_steps(tmp_path)
    monkeypatch.setattr(run_module, "host_memory", lambda: (2 * GiB, 8 * GiB))
    ran = []
    monkeypatch.setattr(Engine, "multiply", lambda self, *args, **kwargs: ran.append(1))
    with pytest.raises(InputError) as caught:
        hpcmm.run(_config(tmp_path, panel=4, iters=10**6), comm=MPI.COMM_SELF)
    need = 3 * (10**6 * 1024 + 2048)
    assert str(caught.value) == (
        f"3 steps x 1000000 timed product(s) x 1 rank(s): the timings need {need / GiB:.2f} GiB of host memory "
        f"on rank 0, {(2 * GiB - blocks) / GiB:.2f} GiB available (fewer --iters, a wider --panel, or "
        f"--no-timeline)")
    assert caught.value.exit_code == 2
    assert not ran and not (tmp_path / "r.h5").exists()


# -- what the run says -------------------------------------------------------------------------


def test_progress_lines_word_for_word(tmp_path):
    said = []
    config = _config(tmp_path, panel=4, warmup=2, iters=3, balance="none", quiet=False)
    hpcmm.run(config, comm=MPI.COMM_SELF, progress=said.append, write=False)
    assert said[0] == ("grid 1x1 | summa | 9x11 @ 11x7 float64 | numpy | panel 4, 3 step(s) own-first, "
                       "prefetch 1 | balance none")
    counts = [line.split(":")[0] for line in said[1:]]
    assert counts == ["warm-up 1/2", "warm-up 2/2", "iteration 1/3", "iteration 2/3", "iteration 3/3"]
    for line in said[1:]:
        assert line.endswith(" s (first start to last end)"), line
        seconds = line.split(": ")[1].split()[0]
        assert len(seconds.split(".")[1]) == 4 and float(seconds) >= 0


def test_the_balance_the_planner_chose_says_so(tmp_path):
    said = []
    hpcmm.run(_config(tmp_path, quiet=False), comm=MPI.COMM_SELF, progress=said.append, write=False)
    assert said[0].endswith(" | balance share (auto)"), said[0]


def test_no_progress_without_a_sink(tmp_path, capsys):
    hpcmm.run(_config(tmp_path, quiet=False), comm=MPI.COMM_SELF, write=False)
    assert capsys.readouterr() == ("", "")


# -- beta, alpha and the products ------------------------------------------------------------


@pytest.mark.parametrize("dtype, alpha, beta, warmup, iters", [
    ("float64", -0.75, 2.5, 0, 1), ("float64", -0.75, 2.5, 2, 3), ("float64", 1.0, 1.0, 1, 2),
    ("complex128", 0.5, -1.5, 1, 2),
], ids=["one", "warmup_and_three", "beta_one", "complex"])
def test_every_product_starts_from_c0(tmp_path, dtype, alpha, beta, warmup, iters):
    """C = α·A·B + β·C₀ after any number of products, C₀ generated from the seed in the run's type."""
    m, n, k, seed = 9, 7, 11, 1234
    config = _config(tmp_path, m=m, n=n, k=k, seed=seed, dtype=dtype, alpha=alpha, beta=beta, warmup=warmup,
                     iters=iters, save_c=True, verify="full")
    result = hpcmm.run(config, comm=MPI.COMM_SELF)
    assert result.check.passed
    a = generate_block(seed, "A", (m, k), (0, m), (0, k), dtype)
    b = generate_block(seed, "B", (k, n), (0, k), (0, n), dtype)
    c0 = generate_block(seed, "C", (m, n), (0, m), (0, n), dtype)
    assert np.abs(c0).min() > 0 and (dtype == "float64" or np.abs(c0.imag).min() > 0)
    with h5py.File(config.out, "r") as f:
        np.testing.assert_allclose(f["result/C"][()], alpha * (a @ b) + beta * c0, rtol=1e-12, atol=1e-12)


def test_tf32_loosens_the_check(tmp_path):
    """float32 on TF32 cores is checked against TF32's tolerance, as the GPUs would compute it."""
    plain = hpcmm.run(_config(tmp_path, dtype="float32", verify="full"), comm=MPI.COMM_SELF, write=False)
    tf32 = hpcmm.run(_config(tmp_path, dtype="float32", tf32=True, verify="full"), comm=MPI.COMM_SELF, write=False)
    assert plain.check.passed and tf32.check.passed
    assert tf32.summary["tolerance"] > 100 * plain.summary["tolerance"] > 0


def _file_appears_at(monkeypatch, out):
    """Another program writes ``out`` while the products run."""
    original = Engine.multiply

    def multiply(self, *args, **kwargs):
        times = original(self, *args, **kwargs)
        out.write_text("the user's")
        return times

    monkeypatch.setattr(Engine, "multiply", multiply)


def test_a_file_that_appeared_at_out_is_replaced_only_with_overwrite(tmp_path, monkeypatch):
    out = tmp_path / "r.h5"
    _file_appears_at(monkeypatch, out)
    with pytest.raises(InputError) as caught:
        hpcmm.run(_config(tmp_path), comm=MPI.COMM_SELF)
    assert str(caught.value) == f"--out={out}: file appeared during the run (pass --overwrite)"
    assert out.read_text() == "the user's"
    out.unlink()
    hpcmm.run(_config(tmp_path, overwrite=True), comm=MPI.COMM_SELF)
    with h5py.File(out, "r") as f:
        assert bool(f["summary"].attrs["verified"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.h5"]


@pytest.mark.parametrize("op", ["T", "C"])
def test_generated_transposed_operands(tmp_path, op):
    """op T or C: A is generated as stored (k x m), B as stored (n x k), and the product uses op of them."""
    m, n, k, seed = 9, 7, 11, 99
    config = _config(tmp_path, m=m, n=n, k=k, seed=seed, op_a=op, op_b=op, dtype="complex128", save_c=True,
                     verify="full")
    assert hpcmm.run(config, comm=MPI.COMM_SELF).check.passed
    a = generate_block(seed, "A", (k, m), (0, k), (0, m), "complex128")
    b = generate_block(seed, "B", (n, k), (0, n), (0, k), "complex128")
    a, b = (a.T, b.T) if op == "T" else (a.conj().T, b.conj().T)
    with h5py.File(config.out, "r") as f:
        np.testing.assert_allclose(f["result/C"][()], a @ b, rtol=1e-12, atol=0)


# -- a failed check ----------------------------------------------------------------------------


def _damaging(monkeypatch):
    original = Engine.multiply

    def multiply(self, *args, **kwargs):
        times = original(self, *args, **kwargs)
        self.C[1, 2] += 1.0
        return times

    monkeypatch.setattr(Engine, "multiply", multiply)


@pytest.mark.parametrize("write", [True, False], ids=["written", "not_written"])
def test_a_failed_check_says_its_residual_and_where_the_results_are(tmp_path, monkeypatch, write):
    _damaging(monkeypatch)
    config = _config(tmp_path, verify="full")
    with pytest.raises(VerificationError) as caught:
        hpcmm.run(config, comm=MPI.COMM_SELF, write=write)
    summary = caught.value.summary
    assert summary["verified"] is False and summary["verify"] == "full"
    where = f" (results in {config.out}, marked verified=False)" if write else ""
    assert str(caught.value) == (f"verification failed: full residual {summary['residual']:.3e} > tolerance "
                                 f"{summary['tolerance']:.3e}{where}")
    assert caught.value.exit_code == 1
    assert raised_everywhere(caught.value)  # every rank holds the same check: a collective tear-down is safe
    assert (tmp_path / "r.h5").exists() == write


# -- the record of the steps, 2.5D at one rank ------------------------------------------------------


def test_the_steps_and_plans_tables_name_each_column(tmp_path):
    config = _config(tmp_path, panel=4)
    hpcmm.run(config, comm=MPI.COMM_SELF)
    with h5py.File(config.out, "r") as f:
        steps, plans = f["timings/steps"][()], f["timings/plans"][()]
    assert steps.dtype.names == ("index", "k0", "k1", "a_root", "b_root")
    assert [tuple(int(x) for x in row) for row in steps] == [(0, 0, 4, 0, 0), (1, 4, 8, 0, 0), (2, 8, 11, 0, 0)]
    assert plans.dtype.names == ("rank", "index", "k0", "k1", "a_root", "b_root")
    assert [tuple(int(x) for x in row) for row in plans] == [(0, 0, 0, 4, 0, 0), (0, 1, 4, 8, 0, 0),
                                                               (0, 2, 8, 11, 0, 0)]


def test_a_layered_run_at_one_rank_says_its_layers(tmp_path):
    said = []
    config = _config(tmp_path, algo="2.5d:1", quiet=False, save_c=True, verify="full", seed=7)
    result = hpcmm.run(config, comm=MPI.COMM_SELF, progress=said.append)
    assert said[0] == ("grid 1x1 per layer, 1 layer(s) | 2.5d:1 | 9x11 @ 11x7 float64 | numpy | panel 11, "
                       "1 step(s) own-first, prefetch 1 | balance share (auto)")
    assert result.check.passed and result.summary["predicted_imbalance"] == 0.0
    a = generate_block(7, "A", (9, 11), (0, 9), (0, 11), "float64")
    b = generate_block(7, "B", (11, 7), (0, 11), (0, 7), "float64")
    with h5py.File(config.out, "r") as f:
        np.testing.assert_allclose(f["result/C"][()], a @ b, rtol=1e-12, atol=0)
        assert f["timings/reduce_seconds"].shape == (1, 1)
        topology = f["topology"][()]
        assert [int(topology[name][0]) for name in ("layer", "layer_rank", "grid_row", "grid_col")] == [0, 0, 0, 0]


# -- the results file: every part of the record -------------------------------------------------------


def _attrs(group) -> dict:
    return {name: value for name, value in group.attrs.items() if name != "units"}


@pytest.mark.parametrize("panel, timeline, ranks_per_node", [(4, True, 1), (None, False, None)],
                         ids=["panel_given", "panel_auto"])
def test_the_results_file_records_the_run(tmp_path, panel, timeline, ranks_per_node):
    import datetime

    config = _config(tmp_path, panel=panel, warmup=1, iters=2, timeline=timeline, verify="full",
                     ranks_per_node=ranks_per_node,
                     argv=("hpcmm", "--m", "9"))
    before = datetime.datetime.now(datetime.timezone.utc)
    result = hpcmm.run(config, comm=MPI.COMM_SELF)
    after = datetime.datetime.now(datetime.timezone.utc)
    steps = 3 if panel else 1
    with h5py.File(config.out, "r") as f:
        root = dict(f.attrs)
        assert root["command"] == "hpcmm --m 9" and int(root["ranks"]) == 1
        assert before <= datetime.datetime.fromisoformat(root["created"]) <= after
        attrs = dict(f["config"].attrs)
        expected = dict(m=9, n=7, k=11, grid="1x1", panel=4 if panel else 11, panel_auto=panel is None, prefetch=1,
                        ring=2, backend="numpy", steps=steps, step_order_used="own-first",
                        cuda_aware_mpi_decision=False, cuda_aware_mpi_reason=result.awareness_reason,
                        ranks_per_node=ranks_per_node or 0, nodes=1, iters=2, warmup=1, dtype="float64", verify="full",
                        timeline=timeline, out=config.out)
        for name, value in expected.items():
            assert attrs[name] == value, name
        plan = json.loads(attrs["plan"])
        assert plan["panel"] == attrs["panel"] and plan["steps"] == steps and len(attrs["plan_digest"]) == 16
        assert attrs["plan_seconds"] == result.summary["plan_seconds"] > 0
        assert attrs["block_rows"].tolist() == [9] and attrs["rank_weights"].tolist() == [1.0]
        assert attrs["blas_threads"] >= 1 and attrs["blas_library"]
        versions = dict(f["versions"].attrs)
        assert versions["hpcmm"] == hpcmm.__version__ and versions["numpy"] == np.__version__
        summary = _attrs(f["summary"])
        for name, value in result.summary.items():
            if isinstance(value, float) and np.isnan(value):
                assert np.isnan(summary[name]), name
            elif isinstance(value, (list, tuple)):
                assert list(summary[name]) == list(value), name
            else:
                assert summary[name] == value, name
        assert summary["panel"] == attrs["panel"] and summary["prefetch"] == 1
        assert summary["gemm_order"] == "A:F B:C" and summary["gemm_library_used"] == "numpy"
        assert summary["balance_asked"] == "auto" and summary["predicted_imbalance"] == 0.0
        # The busiest device's memory, the arrangement and the algorithm chosen.
        assert summary["memory_ranks"] == 1 and summary["memory_operand_bytes"] == plan["memory_bytes"][0]
        assert summary["memory_peak_bytes"] == summary["peak_memory_bytes_max"]
        assert summary["memory_free_bytes"] > 0 and summary["memory_buffer_bytes"] == 0
        assert summary["balance"] == "share" and summary["mps"] == False and summary["ranks_per_gpu"] == 0  # noqa: E712
        assert summary["algo"] == "summa" and summary["algo_asked"] == "summa"
        memory = f["memory"][()]
        assert memory.dtype.names == ("rank", "peak_bytes", "needed_bytes", "operand_bytes", "free_bytes",
                                      "device_used_bytes", "device")
        (row,) = memory
        assert int(row["rank"]) == 0 and row["device"] in (b"cpu", "cpu")
        assert int(row["needed_bytes"]) == plan["memory_bytes"][0] == int(row["operand_bytes"])
        assert int(row["peak_bytes"]) == summary["peak_memory_bytes_max"] > 0
        assert int(row["free_bytes"]) > 0 and int(row["device_used_bytes"]) == 0
        topology = f["topology"][()]
        assert len(topology) == 1 and int(topology["rank"][0]) == 0 and result.topology[0]["rank"] == 0
        assert [r["host"] for r in result.topology] == [h.decode() if isinstance(h, bytes) else h
                                                       for h in topology["host"]]
        timings = f["timings"]
        assert timings.attrs["clock"] in ("MPI.Wtime (global)", "ping-pong with rank 0")
        assert timings.attrs["clock_uncertainty"] >= 0
        assert timings["product_seconds"].shape == (2,) and timings["start_seconds"].shape == (1, 2)
        assert timings["product_start_seconds"].shape == (2,)
        assert timings["host_seconds"].shape == (1, 2, steps)
        assert timings["step_seconds"].shape == (1, 2, steps, 3)
        assert timings["iteration_seconds"].shape == (1, 2)
        assert len(timings["plans"]) == steps and "tiles" not in timings and "reduce_seconds" not in timings
        assert np.all(timings["product_seconds"][()] > 0)
        if timeline:
            events = f["timeline/events"][()]
            assert events.shape[1] == 7 and set(events[:, 0]) == {0} and set(events[:, 1]) == {0, 1}
        else:
            assert "timeline" not in f
        assert "result" not in f  # no --save-c


def test_a_results_file_of_a_run_without_a_recorded_command_line_names_this_process(tmp_path, monkeypatch):
    monkeypatch.setattr("sys.argv", ["my-driver.py", "--fast"])
    config = _config(tmp_path)
    hpcmm.run(config, comm=MPI.COMM_SELF)
    with h5py.File(config.out, "r") as f:
        assert f.attrs["command"] == "my-driver.py --fast"


def test_a_dynamic_run_records_its_tiles(tmp_path):
    config = _config(tmp_path, balance="dynamic", iters=2, verify="full")
    result = hpcmm.run(config, comm=MPI.COMM_SELF)
    assert result.check.passed
    assert result.summary["dynamic_workers"] == 1
    assert result.summary["dynamic_tiles_most"] == result.summary["dynamic_tiles_least"] >= 1
    with h5py.File(config.out, "r") as f:
        tiles = f["timings/tiles"][()]
    assert tiles.dtype.names == ("product", "rank", "owner", "tile", "row0", "row1", "seconds")
    assert np.all(tiles["seconds"] >= 0)
    assert sorted(set(int(p) for p in tiles["product"])) == [0, 1]
    assert set(int(r) for r in tiles["rank"]) == {0} and int(tiles["row0"].min()) == 0
    assert int(tiles["row1"].max()) == 9


# -- writing: failures, temporary files, the guard ---------------------------------------------------


def _children() -> dict[int, str]:
    """This process's running child processes: pid and command line (Linux)."""
    import glob
    import os

    found = {}
    for tasks in glob.glob(f"/proc/{os.getpid()}/task/*/children"):
        with open(tasks) as f:
            for pid in f.read().split():
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as cmd:
                        found[int(pid)] = cmd.read().replace(b"\0", b" ").decode(errors="replace")
                except OSError:
                    pass
    return found


def test_the_file_is_written_under_a_guard_that_ends_with_the_run(tmp_path, monkeypatch):
    """While rank 0 writes, a guard process watches the temporary file (it removes it should this process be
    killed); once the file is published, the guard is gone."""
    import hpcmm.io.h5io as h5io

    before = set(_children())
    seen = []
    real = h5io.write_results

    def write_results(tmp, results):
        seen.append(set(_children()) - before)
        return real(tmp, results)

    monkeypatch.setattr(h5io, "write_results", write_results)
    config = _config(tmp_path)
    result = hpcmm.run(config, comm=MPI.COMM_SELF)
    assert result.path == config.out
    ((guards),) = seen
    assert len(guards) == 1
    assert not set(_children()) - before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.h5"]


def test_a_failure_while_writing_the_record_is_raised_and_leaves_nothing(tmp_path, monkeypatch):
    import hpcmm.io.h5io as h5io

    def write_results(tmp, results):
        with open(tmp, "w") as f:
            f.write("half")
        raise InputError("--out: disk full")

    monkeypatch.setattr(h5io, "write_results", write_results)
    with pytest.raises(InputError) as caught:
        hpcmm.run(_config(tmp_path), comm=MPI.COMM_SELF)
    assert str(caught.value) == "--out: disk full"
    assert list(tmp_path.iterdir()) == []


def test_a_failure_while_writing_c_leaves_no_temporary_file(tmp_path, monkeypatch):
    import hpcmm.io.h5io as h5io

    def write_c_block(*args, **kwargs):
        raise InputError("--out: disk full")

    monkeypatch.setattr(h5io, "write_c_block", write_c_block)
    with pytest.raises(InputError) as caught:
        hpcmm.run(_config(tmp_path, save_c=True), comm=MPI.COMM_SELF)
    assert str(caught.value) == "--out: disk full"
    assert list(tmp_path.iterdir()) == []


def test_without_a_communicator_the_run_takes_the_whole_job(tmp_path):
    """No ``comm``: MPI.COMM_WORLD, here this one process."""
    result = hpcmm.run(_config(tmp_path, verify="full"), write=False)
    assert result.check.passed and result.summary["ranks"] == MPI.COMM_WORLD.Get_size() == 1
