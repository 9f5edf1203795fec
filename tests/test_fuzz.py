"""Fuzzing the product: every drawn setting either verifies against numpy or fails cleanly.

Hypothesis draws sizes (1..40 each), a process grid (none, a factorization of
the rank count, or any small grid, which must be refused), a panel width
(1..k+3: wider than k must be refused), a prefetch depth (0..3), virtual
nodes (so that panels also cross "nodes" through MPI), a dtype and a seed.
Each draw runs :func:`hpcmm.run` with ``verify="full"`` and ``--save-c``;
the product read back from the file must match numpy's within the rounding
bound of :func:`hpcmm.verify.tolerance`.  The only acceptable failure is an
:class:`~hpcmm.errors.InputError`, raised on every rank with the same message,
for the settings that are wrong.  A hang fails the test: the driver prints a line per case, and
a job silent for longer than a few launches of a job that does nothing
(tests/test_reliability_budget.py) is ended, however long the whole takes.

Under MPI every rank must run the same draws.  Hypothesis runs on rank 0
only, inside a driver: each example is broadcast to the other ranks, which
run it too, and every rank's outcome is gathered back to rank 0, where the
test asserts.  Shrinking a failure works the same way (rank 0 draws, all run).
The driver is this file run as a script::

    mpiexec -n 3 python tests/test_fuzz.py --examples 40

The tests run it at 2, 3 and 4 ranks, and the same test at one rank inside
pytest (mpi4py starts MPI as a singleton).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import traceback
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from launcher import mpiexec_or_skip, rank_environment, run_launcher
from test_reliability_budget import quiet_within

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = 40
DTYPES = ("float64", "float32", "complex128", "complex64", "float16")


@st.composite
def cases(draw, ranks: int) -> dict:
    """One set of run settings for ``ranks`` ranks."""
    k = draw(st.integers(1, 40))
    factor = [(r, ranks // r) for r in range(1, ranks + 1) if ranks % r == 0]
    grid = draw(st.one_of(st.none(), st.sampled_from(factor), st.tuples(st.integers(1, 4), st.integers(1, 4))))
    return {
        "m": draw(st.integers(1, 40)),
        "n": draw(st.integers(1, 40)),
        "k": k,
        "grid": grid,
        "panel": draw(st.one_of(st.none(), st.integers(1, k + 3))),
        "prefetch": draw(st.integers(0, 3)),
        "ranks_per_node": draw(st.one_of(st.none(), st.integers(1, ranks))),
        "dtype": draw(st.sampled_from(DTYPES)),
        "seed": draw(st.integers(0, 2**16)),
        "warmup": draw(st.integers(0, 1)),
    }


def expected_error(case: dict, ranks: int) -> str | None:
    """The option an InputError must name for ``case``, or ``None`` if the run must succeed."""
    grid = case["grid"]
    if grid is not None and grid[0] * grid[1] != ranks:
        return "--grid="
    if case["panel"] is not None and case["panel"] > case["k"]:
        return "--panel="
    return None


def run_case(case: dict, comm, directory: str) -> tuple[str, str]:
    """Collective: run ``case``; ``("ok", "")``, ``("InputError", message)`` or what went wrong."""
    import h5py

    import hpcmm
    from hpcmm.io.inputs import generate_block
    from hpcmm.verify import tolerance, underflow

    out = os.path.join(directory, "fuzz.h5")
    try:
        config = hpcmm.RunConfig(device="cpu", verify="full", iters=1, out=out, overwrite=True, save_c=True,
                                 quiet=True, **case)
        result = hpcmm.run(config, comm=comm)
    except hpcmm.InputError as exc:
        return "InputError", str(exc)
    except Exception:  # noqa: BLE001 - reported, the test fails on it
        return "crash", traceback.format_exc()
    if not result.check.passed:
        return "unverified", f"{result.check}"
    if comm.Get_rank() != 0:
        return "ok", ""
    m, n, k, dtype = case["m"], case["n"], case["k"], case["dtype"]
    a = generate_block(case["seed"], "A", (m, k), (0, m), (0, k), dtype)
    b = generate_block(case["seed"], "B", (k, n), (0, k), (0, n), dtype)
    wide = np.complex128 if np.dtype(dtype).kind == "c" else np.float64
    reference = a.astype(wide) @ b.astype(wide)
    scale = np.abs(a.astype(wide)) @ np.abs(b.astype(wide))
    with h5py.File(out, "r") as f:
        c = f["result/C"][...].astype(wide)
        verified = bool(f["summary"].attrs["verified"])
    bound = tolerance(dtype, k, steps=k) * scale + underflow(dtype, k, steps=k)
    worst = float(np.max(np.abs(c - reference) / bound))
    if not verified or not worst <= 1.0:
        return "wrong", f"verified={verified}, worst error {worst:.3g} of the bound"
    return "ok", ""


def judge(case: dict, ranks: int, outcomes: list[tuple[str, str]]) -> None:
    """Assert on rank 0 that every rank's outcome is the one ``case`` calls for."""
    assert len(set(outcomes)) == 1 or all(o[0] == "ok" for o in outcomes), f"ranks disagree: {outcomes}"
    kind, message = outcomes[0]
    want = expected_error(case, ranks)
    if want is None:
        assert kind == "ok", f"{case}: {kind}: {message}"
    else:
        assert kind == "InputError", f"{case}: expected an InputError naming {want}, got {kind}: {message}"
        assert want in message and "\n" not in message, f"{case}: {message!r}"


# -- one rank, inside pytest ---------------------------------------------------------
@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("fuzz"))


@settings(max_examples=EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(case=cases(1))
def test_fuzz_one_rank(case, fuzz_dir):
    from mpi4py import MPI

    judge(case, 1, [run_case(case, MPI.COMM_WORLD, fuzz_dir)])


# -- several ranks, through the driver under mpiexec -------------------------------
@pytest.mark.parametrize("ranks", [2, 3, 4])
def test_fuzz_under_mpiexec(ranks, tmp_path):
    mpiexec = mpiexec_or_skip()
    env = rank_environment()
    result = tmp_path / "result.json"
    cmd = [mpiexec, "-n", str(ranks), sys.executable, str(Path(__file__).resolve()),
           "--examples", str(EXAMPLES), "--dir", str(tmp_path), "--result", str(result)]
    # A hang: no new case line (the output's last line names the case that hung).
    proc = run_launcher(cmd, None, cwd=tmp_path, env=env, stall=quiet_within())
    assert proc.returncode == 0, f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout}"
    # The verdict comes from rank 0's own file: the launcher's stdout mixes the ranks' lines.
    assert result.is_file(), f"the driver wrote no result:\n{proc.stdout}"
    outcome = json.loads(result.read_text())
    assert outcome["ranks"] == ranks and outcome["passed"] >= EXAMPLES // 2, (outcome, proc.stdout)


def driver(examples: int, directory: str, result: str | None = None) -> int:
    """Rank 0 draws and judges; every rank runs each case (see the module docstring)."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, ranks = comm.Get_rank(), comm.Get_size()
    if rank != 0:
        while (case := comm.bcast(None, root=0)) is not None:
            comm.gather(run_case(case, comm, directory), root=0)
        return 0
    count = 0

    @settings(max_examples=examples, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
    @given(case=cases(ranks))
    def fuzz(case):
        nonlocal count
        print(f"case {case}", flush=True)  # the last line names the case, should it hang
        comm.bcast(case, root=0)
        judge(case, ranks, comm.gather(run_case(case, comm, directory), root=0))
        count += 1

    try:
        fuzz()
    except Exception:  # noqa: BLE001 - Hypothesis has printed the falsifying example
        traceback.print_exc()
        return 1
    finally:
        comm.bcast(None, root=0)
    print(f"fuzz: {ranks} ranks: {count} examples passed", flush=True)
    if result is not None:
        Path(result).write_text(json.dumps({"ranks": ranks, "passed": count}))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Fuzz hpcmm.run on every rank (run under mpiexec).")
    parser.add_argument("--examples", type=int, default=EXAMPLES)
    parser.add_argument("--dir", default=None, help="where the results files go (default: a temporary one)")
    parser.add_argument("--result", default=None, help="JSON file for rank 0's count of passed examples")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from mpi4py import MPI

    directory = args.dir
    if directory is None:
        directory = MPI.COMM_WORLD.bcast(tempfile.mkdtemp(prefix="hpcmm-fuzz-") if MPI.COMM_WORLD.rank == 0
                                         else None, root=0)
    return driver(args.examples, directory, args.result)


if __name__ == "__main__":
    sys.exit(main())
