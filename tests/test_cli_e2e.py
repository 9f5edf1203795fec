"""The command line end to end: ``mpiexec -n N python -m hpcmm ...``, its exit status and its file.

Each test starts a real job with the launcher of :mod:`launcher` (the
``mpiexec`` beside this Python), on the CPU, and reads back what it wrote.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
import ranklog
from launcher import REPO, mpiexec_or_skip, rank_environment, run_launcher
from test_reliability_budget import scaled

from hpcmm.io.inputs import generate_block
from hpcmm.verify import tolerance

#: Hang guard of one job on an idle machine (they take one or two seconds); stretched as a
#: launch is slower here (tests/test_reliability_budget.py).
IDLE_LIMIT = 120


def limit() -> float:
    return scaled(IDLE_LIMIT)


@pytest.fixture(scope="module")
def mpiexec() -> str:
    return mpiexec_or_skip()


def hpcmm(mpiexec: str, ranks: int, *args: str, cwd: Path = REPO, **env: str):
    """Run ``mpiexec -n RANKS python -m hpcmm ARGS`` on the CPU; returns the finished process."""
    environ = rank_environment("cpu", **env)
    cmd = [mpiexec, "-n", str(ranks), sys.executable, "-m", "hpcmm", *args]
    return run_launcher(cmd, limit(), cwd=cwd, env=environ)


def no_leftovers(folder: Path) -> None:
    partial = [p.name for p in folder.iterdir() if p.name.endswith(".partial")]
    assert not partial, f"temporary files left behind: {partial}"


def test_four_ranks_write_a_complete_file(mpiexec, tmp_path):
    m, n, k = 31, 21, 14  # 7P+3, 5P+1, 3P+2 at P = 4
    out = tmp_path / "x.h5"
    proc = hpcmm(mpiexec, 4, "--m", str(m), "--n", str(n), "--k", str(k), "--out", str(out), "--save-c",
                 "--iters", "2", "--warmup", "1", "--panel", "3", "--seed", "5")
    assert proc.returncode == 0, proc.stdout
    assert "PASSED" in proc.stdout
    no_leftovers(tmp_path)
    with h5py.File(out, "r") as f:
        assert f.attrs["schema_version"] == "1"
        assert int(f.attrs["ranks"]) == 4
        assert "--save-c" in f.attrs["command"]
        summary = dict(f["summary"].attrs)
        assert float(summary["seconds"]) > 0
        assert float(summary["tflops"]) > 0
        assert 0 <= float(summary["residual"]) <= float(summary["tolerance"])
        assert bool(summary["verified"]) and summary["verify"] == "freivalds"
        assert [p.decode() if isinstance(p, bytes) else p for p in summary["paths"]] == ["shm"]
        assert int(summary["ranks"]) == 4

        config = f["config"].attrs
        assert (int(config["m"]), int(config["n"]), int(config["k"])) == (m, n, k)
        assert config["grid"] == "2x2" and int(config["panel"]) == 3
        steps = int(config["steps"])

        topology = f["topology"][()]
        assert len(topology) == 4
        assert list(topology["rank"]) == [0, 1, 2, 3]
        assert list(zip(topology["grid_row"], topology["grid_col"])) == [(0, 0), (0, 1), (1, 0), (1, 1)]
        assert all(b.decode() == "numpy" for b in topology["backend"])

        assert f["timings/iteration_seconds"].shape == (4, 2)
        assert f["timings/step_seconds"].shape == (4, 2, steps, 3)
        # One node: each rank starts k with its own blocks (HPCMM_STEP_ORDER=auto), so the plans differ;
        # /timings/steps is rank 0's, /timings/plans every rank's, each covering k once.
        assert config["step_order_used"] == "own-first"
        plan = f["timings/steps"][()]
        assert plan["k0"][0] == 0 and (plan["k1"] - plan["k0"] <= 3).all()
        plans = f["timings/plans"][()]
        lengths = []
        for rank in range(4):
            mine = plans[plans["rank"] == rank]
            assert list(mine["index"]) == list(range(len(mine)))
            assert sorted(zip(mine["k0"], mine["k1"]))[0][0] == 0 and (mine["k1"] - mine["k0"]).sum() == k
            assert (mine["k1"] - mine["k0"] <= 3).all()
            lengths.append(len(mine))
        assert max(lengths) == steps and len(plan) == lengths[0]
        # The diagonal (0, 0), (1, 1) starts where its own A and B blocks meet, (0, 1) and (1, 0) with
        # their larger own panel: B's at (0, 1) (11 columns against 16 rows of A: A's), A's at (1, 0).
        assert [int(plans[plans["rank"] == r]["k0"][0]) for r in range(4)] == [0, 7, 0, 7]

        events = f["timeline/events"]
        assert events.shape[1] == 7
        assert [c.decode() if isinstance(c, bytes) else c for c in events.attrs["columns"]] == [
            "rank", "iteration", "stream", "kind", "step", "start", "end"]
        ev = events[()]
        assert set(ev[:, 0]) == {0, 1, 2, 3} and set(ev[:, 1]) == {0, 1}
        assert len(ev) == 2 * sum(lengths) * 3  # per rank, iteration and own step: a GEMM, an A and a B transfer
        assert (ev[:, 6] >= ev[:, 5]).all()

        transfers = f["transfers"][()]
        assert len(transfers) > 0 and (transfers["bytes"] > 0).all()
        assert {p.decode() for p in transfers["path"]} == {"shm"}
        assert len(f["memory"][()]) == 4

        c = f["result/C"][()]
    a = generate_block(5, "A", (m, k), (0, m), (0, k), np.float64)
    b = generate_block(5, "B", (k, n), (0, k), (0, n), np.float64)
    assert c.shape == (m, n) and np.isfinite(c).all()
    bound = tolerance("float64", k, steps)
    assert np.max(np.abs(c - a @ b) / (np.abs(a) @ np.abs(b))) <= bound


def test_virtual_nodes_show_both_paths(mpiexec, tmp_path):
    out = tmp_path / "vnodes.h5"
    proc = hpcmm(mpiexec, 4, "--m", "29", "--n", "17", "--k", "23", "--ranks-per-node", "2",
                 "--verify", "full", "--out", str(out), "--quiet")
    assert proc.returncode == 0, proc.stdout
    with h5py.File(out, "r") as f:
        paths = {p.decode() if isinstance(p, bytes) else p for p in f["summary"].attrs["paths"]}
        assert paths == {"mpi", "shm"}
        assert int(f["config"].attrs["nodes"]) == 2
        assert list(f["topology"]["node"]) == [0, 0, 1, 1]


def test_files_as_inputs(mpiexec, tmp_path):
    out = tmp_path / "files.h5"
    data = REPO / "data" / "small.h5"
    proc = hpcmm(mpiexec, 3, "--a", f"{data}:A", "--b", f"{data}:B", "--save-c", "--out", str(out), "--quiet")
    assert proc.returncode == 0, proc.stdout
    with h5py.File(data, "r") as f:
        expected = f["C"][()]
    with h5py.File(out, "r") as f:
        assert np.allclose(f["result/C"][()], expected, rtol=0, atol=1e-13)
        assert f["config"].attrs["a"] == f"{data}:A"


def test_no_arguments_runs_the_default_job(mpiexec, tmp_path):
    """What the README promises: ``mpiexec -n 2 python -m hpcmm`` in an empty folder."""
    proc = hpcmm(mpiexec, 2, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout
    names = [p.name for p in tmp_path.iterdir()]
    assert len(names) == 1 and re.fullmatch(r"hpcmm-results-\d{8}-\d{6}(-\d+)?\.h5", names[0]), names
    with h5py.File(tmp_path / names[0], "r") as f:
        config, summary = f["config"].attrs, f["summary"].attrs
        assert (int(config["m"]), int(config["n"]), int(config["k"])) == (1024, 1024, 1024)
        assert config["backend"] == "numpy"
        assert bool(summary["verified"])
        assert f["timings/iteration_seconds"].shape == (2, 3)
        assert "result" not in f  # C is saved only on request


def test_one_process_without_mpiexec(tmp_path):
    """``python -m hpcmm`` alone (MPI starts as a singleton)."""
    environ = rank_environment()
    proc = run_launcher([sys.executable, "-m", "hpcmm", "--device", "cpu", "--m", "40", "--n", "30", "--k", "20",
                         "--out", "one.h5"], limit(), cwd=tmp_path, env=environ)
    assert proc.returncode == 0, proc.stdout
    with h5py.File(tmp_path / "one.h5", "r") as f:
        assert int(f.attrs["ranks"]) == 1 and bool(f["summary"].attrs["verified"])
        assert len(f["summary"].attrs["paths"]) == 0


@pytest.mark.parametrize("args, ranks, text", [
    (["--m", "0"], 4, "--m=0"),
    (["--grid", "3x3"], 4, "--grid=3x3: 3*3=9 does not match 4 ranks"),
    (["--dtype", "int8"], 2, "invalid choice: 'int8'"),
    (["--balance", "fastest"], 3, "argument --balance: invalid choice: 'fastest'"),
    (["--a", "missing.h5:A", "--b", "missing.h5:B"], 2, "no such file"),
    (["--m", "8", "--n", "8", "--k", "8", "--panel", "9"], 2, "--panel=9: wider than k=8"),
])
def test_bad_input_exits_2_and_writes_nothing(mpiexec, tmp_path, args, ranks, text):
    """One line for the whole job, from rank 0; each rank's stderr is a file of its own (ranklog)."""
    out = tmp_path / "never.h5"
    job = ranklog.run([ranklog.Part(ranklog.hpcmm_argv(*args, "--out", str(out)), ranks=ranks)], tmp_path / "logs",
                      tmp_path, limit(), env={"HPCMM_DEVICE": "cpu"})
    assert job.rc == 2, job.describe()
    rank, error = job.the_line("hpcmm: error:")
    assert rank == 0 and text in error, job.describe()
    assert not any(line.startswith("Traceback") for r in job.ranks() for line in job.err(r)), job.describe()
    assert not out.exists()
    no_leftovers(tmp_path)


def test_bad_gemm_order_exits_2_before_work(mpiexec, tmp_path):
    """HPCMM_GEMM_ORDER is checked with the command line, on every rank: one line, no file, exit 2."""
    out = tmp_path / "never.h5"
    job = ranklog.run([ranklog.Part(ranklog.hpcmm_argv("--m", "8", "--out", str(out)), ranks=2)], tmp_path / "logs",
                      tmp_path, limit(), env={"HPCMM_DEVICE": "cpu", "HPCMM_GEMM_ORDER": "AB"})
    assert job.rc == 2, job.describe()
    rank, error = job.the_line("hpcmm: error:")
    assert rank == 0 and "HPCMM_GEMM_ORDER='AB': expected auto or" in error, job.describe()
    assert not out.exists()
    no_leftovers(tmp_path)


@pytest.mark.parametrize("face,ranks,grid", [("tall", 2, "1x2"), ("tall", 3, "1x3"), ("wide", 3, "3x1"),
                                              ("auto", 2, "2x1"), ("row", 4, "1x4")])
def test_grid_orientation_turns_the_default_grid(mpiexec, tmp_path, face, ranks, grid):
    """HPCMM_GRID_ORIENTATION turns MPI.Compute_dims's grid (auto: wide on CPUs); the product stays exact."""
    out = tmp_path / "turned.h5"
    proc = hpcmm(mpiexec, ranks, "--m", "29", "--n", "17", "--k", "23", "--panel", "5", "--verify", "full",
                 "--out", str(out), "--quiet", HPCMM_GRID_ORIENTATION=face)
    assert proc.returncode == 0, proc.stdout
    with h5py.File(out, "r") as f:
        assert f["config"].attrs["grid"] == grid and f["config"].attrs["grid_orientation"] == face
        assert f["config"].attrs["grid_face"] == ("wide" if face == "auto" else face)  # auto on CPUs: wide
        assert bool(f["summary"].attrs["verified"])


def test_bad_grid_orientation_exits_2_before_work(mpiexec, tmp_path):
    out = tmp_path / "never.h5"
    proc = hpcmm(mpiexec, 2, "--m", "8", "--out", str(out), HPCMM_GRID_ORIENTATION="square")
    assert proc.returncode == 2, proc.stdout
    assert "HPCMM_GRID_ORIENTATION='square': expected one of auto, wide, tall, row" in proc.stdout
    assert not out.exists()


def test_unknown_variable_exits_2(mpiexec, tmp_path):
    proc = hpcmm(mpiexec, 2, "--m", "8", "--out", str(tmp_path / "x.h5"), HPCMM_PANLE="4")
    assert proc.returncode == 2, proc.stdout
    assert "HPCMM_PANLE='4': unknown setting" in proc.stdout


def test_existing_output_is_kept(mpiexec, tmp_path):
    """Without --overwrite an existing file stays byte for byte; with it, it is replaced (HDF5 files only:
    tests/test_edges.py shows that --overwrite leaves other files alone)."""
    out = tmp_path / "taken.h5"
    with h5py.File(out, "w") as f:
        f["earlier"] = np.arange(4.0)
    earlier = out.read_bytes()
    proc = hpcmm(mpiexec, 2, "--m", "9", "--n", "8", "--k", "7", "--out", str(out))
    assert proc.returncode == 2, proc.stdout
    assert "file exists (pass --overwrite to replace it)" in proc.stdout
    assert out.read_bytes() == earlier
    no_leftovers(tmp_path)
    proc = hpcmm(mpiexec, 2, "--m", "9", "--n", "8", "--k", "7", "--out", str(out), "--overwrite", "--quiet")
    assert proc.returncode == 0, proc.stdout
    assert h5py.is_hdf5(out)


def test_failed_verification_exits_1(mpiexec, tmp_path):
    """float32 inputs near its largest value overflow in the product: the check fails, the file says so."""
    rng = np.random.default_rng(3)
    np.save(tmp_path / "big_a.npy", rng.uniform(1e30, 2e30, (13, 11)))
    np.save(tmp_path / "big_b.npy", rng.uniform(1e30, 2e30, (11, 7)))
    out = tmp_path / "overflow.h5"
    proc = hpcmm(mpiexec, 2, "--a", str(tmp_path / "big_a.npy"), "--b", str(tmp_path / "big_b.npy"),
                 "--dtype", "float32", "--out", str(out))
    assert proc.returncode == 1, proc.stdout
    assert "verification failed" in proc.stdout
    assert "FAILED" in proc.stdout  # the summary table is printed all the same
    with h5py.File(out, "r") as f:
        assert not bool(f["summary"].attrs["verified"])
    no_leftovers(tmp_path)


def test_info_at_two_ranks(mpiexec, tmp_path):
    proc = hpcmm(mpiexec, 2, "info", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout
    lines = proc.stdout.splitlines()
    header = [line for line in lines if line.split()[:2] == ["rank", "host"]]
    assert len(header) == 1, "only rank 0 prints"
    rows = [line.split() for line in lines if line[:4].strip().isdigit()]
    assert [r[0] for r in rows] == ["0", "1"] and all("cpu" in " ".join(r) for r in rows)
    text = proc.stdout
    assert "process grid       2x1 (1 node(s))" in text
    assert "MPI library" in text and "CUDA-aware MPI     no:" in text
    assert "h5py / HDF5" in text
    assert "GEMM library       numpy (no GPU)" in text  # on CPUs there is no library to choose
    assert not list(tmp_path.iterdir()), "info writes no file"


def test_version():
    proc = run_launcher([sys.executable, "-m", "hpcmm", "--version"], limit())
    from hpcmm import __version__

    assert proc.returncode == 0 and proc.stdout.strip() == f"hpcmm {__version__}"
