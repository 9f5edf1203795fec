"""Bad input, failing ranks and half-written outputs, through the real command line.

Every case runs ``mpiexec -n N python -m hpcmm ...`` on the CPU (N = 2, some 3).

Bad input (one table, :data:`BAD_INPUT`): exit status 2 within a few launches
of a job that does nothing (tests/test_reliability_budget.py), one line
``hpcmm: error: ...`` naming the value for the whole job (from rank 0), and
nothing at the output path (no ``.partial`` file either).

A rank that fails alone (a fault put in by tests/fault_runner.py) brings every
rank down within the budget's end limit with one line naming it; a failure on
rank 0 while it writes is one line, from rank 0; a product that fails verification is written,
complete, marked ``verified=False``, exit 1.

Every rank writes its output into files of its own (:mod:`ranklog`): no test
here reads lines that several processes wrote into one stream, where a line
could be glued to another or cut off by the launcher ending a job.
"""

from __future__ import annotations

import dataclasses
import os
import stat
from pathlib import Path

import h5py
import numpy as np
import pytest
import ranklog
from launcher import gpu_count
from test_reliability_budget import end_within, hang_within, refuse_within, within
from ranklog import Part, hpcmm_argv, runner_argv

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["--m", "60", "--n", "50", "--k", "40", "--iters", "1", "--warmup", "0"]


@dataclasses.dataclass
class Outcome:
    rc: int
    seconds: float
    job: ranklog.Outcome

    def error(self) -> str:
        """The job's one ``hpcmm: error:`` line; it must come from rank 0 (every rank had it)."""
        rank, line = self.job.the_line("hpcmm: error:")
        assert rank == 0, self.job.describe()
        return line

    def stdout(self, rank: int = 0) -> str:
        return self.job.out(rank)

    def describe(self) -> str:
        return self.job.describe()

    def tracebacks(self) -> bool:
        return any(line.startswith("Traceback") for r in self.job.ranks() for line in self.job.err(r))


def hpcmm(ranks: int, args: list[str], cwd: Path, env: dict[str, str] | None = None,
          timeout: float | None = None, parts: list[Part] | None = None) -> Outcome:
    """Run ``mpiexec -n ranks python -m hpcmm args`` in ``cwd`` (or the MPMD ``parts``), quietly.

    ``timeout`` is the hang guard (default: :func:`hang_within`, twice what a job that ends may take).
    """
    parts = parts or [Part(hpcmm_argv(*args, "--quiet"), ranks=ranks)]
    logs = cwd / f"logs-{len(list(cwd.glob('logs-*')))}"
    job = ranklog.run(parts, logs, cwd, hang_within() if timeout is None else timeout, env=env)
    return Outcome(job.rc, job.seconds, job)


def _partials(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.glob(".*.partial"))


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    """Input files, good and bad, in one directory."""
    d = tmp_path_factory.mktemp("inputs")
    rng = np.random.default_rng(7)
    np.save(d / "a.npy", rng.random((6, 5)))
    np.save(d / "b.npy", rng.random((5, 4)))
    np.save(d / "b6.npy", rng.random((6, 4)))
    nan = rng.random((6, 5))
    nan[2, 3] = np.nan
    np.save(d / "nan.npy", nan)
    inf = rng.random((5, 4))
    inf[4, 1] = np.inf
    np.save(d / "inf.npy", inf)
    np.save(d / "complex.npy", rng.random((6, 5)) + 1j)
    huge = rng.random((6, 5))
    huge[1, 2] = 1e300  # finite in float64, beyond float32 and float16
    np.save(d / "huge.npy", huge)
    np.save(d / "words.npy", np.array([["a", "b"], ["c", "d"]]))
    (d / "text.npy").write_text("not an array\n")
    (d / "text.h5").write_text("not HDF5\n")
    with h5py.File(d / "m.h5", "w") as f:
        f["A"] = rng.random((6, 5))
        f["B"] = rng.random((5, 4))
        f["bytes"] = np.array([[b"x", b"y"]])
        f["vector"] = rng.random(5)
        f.create_group("group")
    (d / "folder.h5").mkdir()
    return d


@dataclasses.dataclass(frozen=True)
class Bad:
    """One row of the bad-input table: arguments (``{in}`` is the inputs' directory) and
    environment, and the text the error line must hold."""

    id: str
    args: tuple[str, ...]
    names: str
    env: tuple[tuple[str, str], ...] = ()
    ranks: int = 2


BAD_INPUT = [
    Bad("m-zero", ("--m", "0"), "--m=0"),
    Bad("n-negative", ("--n", "-3"), "--n=-3"),
    Bad("k-not-integer", ("--k", "1.5"), "--k='1.5'"),
    Bad("m-word", ("--m", "ten"), "--m='ten'"),
    Bad("m-zero-3-ranks", ("--m", "0"), "--m=0", ranks=3),
    Bad("dtype-unknown", ("--dtype", "float8"), "'float8'"),
    Bad("grid-not-rank-count", ("--grid", "3x1"), "--grid=3x1: 3*1=3 does not match 2 ranks"),
    Bad("grid-not-rank-count-3", ("--grid", "2x2"), "--grid=2x2: 2*2=4 does not match 3 ranks", ranks=3),
    Bad("grid-malformed", ("--grid", "2"), "--grid='2'"),
    Bad("panel-zero", ("--panel", "0"), "--panel=0"),
    Bad("panel-wider-than-k", ("--m", "8", "--n", "8", "--k", "8", "--panel", "9"), "--panel=9: wider than k=8"),
    Bad("prefetch-too-deep", ("--prefetch", "9"), "--prefetch=9"),
    Bad("iters-zero", ("--iters", "0"), "--iters=0"),
    Bad("out-not-h5", ("--out", "{in}/result.txt"), "result.txt': expected a file name ending in .h5"),
    Bad("out-directory-missing", ("--out", "{in}/missing/result.h5"), "missing does not exist"),
    Bad("out-is-a-directory", ("--out", "{in}/folder.h5"), "folder.h5: is a directory"),
    Bad("a-missing", ("--a", "{in}/nope.npy", "--b", "{in}/b.npy"), "nope.npy: no such file"),
    Bad("a-not-hdf5", ("--a", "{in}/text.h5:A", "--b", "{in}/b.npy"), "text.h5:A: not an HDF5 file"),
    Bad("a-not-numpy", ("--a", "{in}/text.npy", "--b", "{in}/b.npy"), "text.npy: not a NumPy .npy file"),
    Bad("a-no-dataset", ("--a", "{in}/m.h5:C", "--b", "{in}/m.h5:B"), "no dataset 'C'"),
    Bad("a-group-not-dataset", ("--a", "{in}/m.h5:group", "--b", "{in}/m.h5:B"), "no dataset 'group'"),
    Bad("a-no-dataset-named", ("--a", "{in}/m.h5", "--b", "{in}/m.h5:B"), "name the dataset"),
    Bad("k-disagrees", ("--a", "{in}/a.npy", "--b", "{in}/b6.npy"), "k of A (5) != k of B (6)"),
    Bad("k-disagrees-3-ranks", ("--a", "{in}/a.npy", "--b", "{in}/b6.npy"), "k of A (5) != k of B (6)", ranks=3),
    Bad("a-not-2d", ("--a", "{in}/m.h5:vector", "--b", "{in}/m.h5:B"), "expected a 2-D matrix, found shape (5,)"),
    Bad("a-strings", ("--a", "{in}/words.npy", "--b", "{in}/b.npy"), "unsupported element type <U1"),
    Bad("a-bytes", ("--a", "{in}/m.h5:bytes", "--b", "{in}/m.h5:B"), "unsupported element type |S1"),
    Bad("a-complex-real-dtype", ("--a", "{in}/complex.npy", "--b", "{in}/b.npy"),
        "complex.npy holds complex128: complex input needs a complex --dtype"),
    Bad("a-nan", ("--a", "{in}/nan.npy", "--b", "{in}/b.npy"),
        "nan.npy: 1 non-finite value(s), first at (2, 3): refusing to run (pass --allow-nonfinite)"),
    Bad("b-inf-3-ranks", ("--a", "{in}/a.npy", "--b", "{in}/inf.npy"),
        "inf.npy: 1 non-finite value(s), first at (4, 1): refusing to run", ranks=3),
    Bad("a-overflows-float32", ("--a", "{in}/huge.npy", "--b", "{in}/b.npy", "--dtype", "float32"),
        "huge.npy: 1 non-finite value(s) as --dtype=float32, first at (1, 2): refusing to run"),
    Bad("a-overflows-float16-3-ranks", ("--a", "{in}/huge.npy", "--b", "{in}/b.npy", "--dtype", "float16"),
        "huge.npy: 1 non-finite value(s) as --dtype=float16, first at (1, 2)", ranks=3),
    Bad("sizes-and-files", ("--m", "5", "--a", "{in}/a.npy", "--b", "{in}/b.npy"), "exclude each other"),
    Bad("host-memory", ("--m", "1000000", "--n", "1000000", "--k", "1000000"),
        "problem m=1000000, n=1000000, k=1000000 float64 does not fit: 2 rank(s) per host need"),
    Bad("host-memory-3-ranks", ("--m", "1000000", "--n", "1000000", "--k", "1000000"),
        "does not fit: 3 rank(s) per host need", ranks=3),
    Bad("host-memory-deep-k", ("--m", "2", "--n", "2", "--k", "1000000000000", "--panel", "1"),
        "k=1000000000000 float64 does not fit"),
    # 100000 steps of a product: the timings of a million products cannot fit in host memory.
    Bad("timings-too-big", ("--m", "2", "--n", "2", "--k", "100000", "--panel", "1", "--iters", "1000000"),
        "100000 steps x 1000000 timed product(s) x 2 rank(s): the timings need"),
    Bad("env-panel-wider-than-k", ("--m", "8", "--n", "8", "--k", "8"), "HPCMM_PANEL=9: wider than k=8",
        env=(("HPCMM_PANEL", "9"),)),
    Bad("panel-wider-than-k", ("--m", "8", "--n", "8", "--k", "8", "--panel", "9"), "--panel=9: wider than k=8"),
    Bad("verify-full-too-big", ("--m", "20000", "--n", "20000", "--k", "20000", "--verify", "full"),
        "--verify=full needs 14.9 GiB on rank 0"),
    Bad("tf32-not-float32", ("--tf32",), "--tf32 applies to float32 only, not --dtype=float64"),
    Bad("env-malformed", (), "HPCMM_PANEL='wide'", env=(("HPCMM_PANEL", "wide"),)),
    Bad("env-unknown", (), "HPCMM_PANNEL='4': unknown setting", env=(("HPCMM_PANNEL", "4"),)),
    Bad("env-device", (), "HPCMM_DEVICE='tpu'", env=(("HPCMM_DEVICE", "tpu"),)),
    # Faults are put in from outside (tests/fault_runner.py): the product has no such variable.
    Bad("env-fault-unknown", ("--m", "8"), "HPCMM_FAULT='1:multiply': unknown setting",
        env=(("HPCMM_FAULT", "1:multiply"),)),
]


def _check_refused(outcome: Outcome, ranks: int, names: str, out: Path) -> None:
    assert outcome.rc == 2, f"exit status {outcome.rc}, expected 2:\n{outcome.describe()}"
    assert within(outcome.seconds, refuse_within), f"took {outcome.seconds:.1f} s, more than {refuse_within():.1f}"
    assert outcome.job.ranks() == list(range(ranks)), outcome.describe()
    error = outcome.error()  # exactly one line for the whole job, from rank 0
    assert names in error, f"{names!r} not in {error!r}"
    assert not outcome.tracebacks(), outcome.describe()
    assert not out.is_file()
    assert _partials(out.parent) == []


@pytest.mark.parametrize("bad", BAD_INPUT, ids=[b.id for b in BAD_INPUT])
def test_bad_input_is_refused_the_same_on_every_rank(bad, inputs, tmp_path):
    args = [a.replace("{in}", str(inputs)) for a in bad.args]
    out = tmp_path / "result.h5"
    if "--out" not in args:
        args += ["--out", str(out)]
    else:
        out = Path(args[args.index("--out") + 1])
    outcome = hpcmm(bad.ranks, ["--device", "cpu", *args], tmp_path, dict(bad.env))
    _check_refused(outcome, bad.ranks, bad.names, out)


def test_existing_output_without_overwrite_is_left_alone(tmp_path):
    out = tmp_path / "result.h5"
    out.write_bytes(b"an earlier result")
    outcome = hpcmm(2, ["--device", "cpu", *SMALL, "--out", str(out)], tmp_path)
    assert outcome.rc == 2 and within(outcome.seconds, refuse_within)
    assert f"--out={out}: file exists (pass --overwrite to replace it)" in outcome.error()
    assert out.read_bytes() == b"an earlier result"
    assert _partials(tmp_path) == []


def test_output_directory_the_file_system_refuses(tmp_path):
    """No one may create files in /sys, root included: a real "not writable" for any user."""
    if not os.path.isdir("/sys"):
        pytest.skip("no /sys")
    probe = "/sys/.hpcmm-probe"
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        os.unlink(probe)
        pytest.skip("this /sys takes new files")
    except OSError:
        pass
    out = Path("/sys/hpcmm-result.h5")
    outcome = hpcmm(2, ["--device", "cpu", *SMALL, "--out", str(out)], tmp_path)
    assert outcome.rc == 2 and within(outcome.seconds, refuse_within), outcome.describe()
    assert "directory /sys is not writable" in outcome.error()
    assert not out.exists()


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0,
                    reason="root writes to any directory whatever its permission bits; "
                           "test_output_directory_the_file_system_refuses covers root")
def test_output_directory_without_write_permission(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        outcome = hpcmm(2, ["--device", "cpu", *SMALL, "--out", str(locked / "r.h5")], tmp_path)
    finally:
        locked.chmod(stat.S_IRWXU)
    _check_refused(outcome, 2, f"directory {locked} is not writable", locked / "r.h5")


def test_gpu_asked_for_where_there_is_none(tmp_path):
    if gpu_count() > 0:
        pytest.skip("this machine has a usable GPU")
    out = tmp_path / "r.h5"
    outcome = hpcmm(2, ["--device", "gpu", *SMALL, "--out", str(out)], tmp_path)
    _check_refused(outcome, 2, "--device=gpu: no usable GPU", out)
    outcome = hpcmm(2, [*SMALL, "--out", str(out)], tmp_path, {"HPCMM_DEVICE": "gpu"})
    _check_refused(outcome, 2, "--device=gpu: no usable GPU", out)


@pytest.mark.gpu
@pytest.mark.parametrize("ranks", [2, 3])
def test_problem_too_big_for_device_memory(tmp_path, ranks):
    """Refused before any device allocation, with the bytes needed and available."""
    if gpu_count() < 1:
        pytest.skip("needs a CUDA GPU and cupy")
    out = tmp_path / "r.h5"
    outcome = hpcmm(ranks, ["--device", "gpu", "--m", "1000000", "--n", "1000000", "--k", "1000000",
                            "--out", str(out)], tmp_path)
    assert outcome.rc == 2, outcome.describe()
    assert within(outcome.seconds, refuse_within), f"took {outcome.seconds:.1f} s, more than {refuse_within():.1f}"
    error = outcome.error()
    assert "problem m=1000000, n=1000000, k=1000000 float64 does not fit" in error
    assert "GiB of device memory" in error and "GiB available" in error
    assert not out.exists()
    assert _partials(tmp_path) == []


def test_settings_that_differ_between_ranks_do_not_hang(tmp_path):
    """An MPMD launch where one rank's environment is bad: every rank exits 2, none waits."""
    out = tmp_path / "r.h5"
    rank = hpcmm_argv("--device", "cpu", *SMALL, "--quiet", "--out", str(out))
    outcome = hpcmm(2, [], tmp_path, parts=[Part(rank, env={"HPCMM_PANEL": "0"}), Part(rank)])
    assert outcome.rc == 2 and within(outcome.seconds, refuse_within), outcome.describe()
    assert "HPCMM_PANEL=0: expected an integer >= 1 (raised by rank 0)" in outcome.error()
    assert not out.exists()


# -- failing ranks ----------------------------------------------------------------
@pytest.mark.parametrize(
    ("ranks", "fault"),
    [(2, "1:multiply:raise"), (3, "1:multiply:raise"), (3, "0:multiply:raise"), (2, "1:verify:raise"),
     (3, "2:verify:raise")],
)
def test_one_failing_rank_ends_every_rank(tmp_path, ranks, fault):
    """The failing rank's line is read from its own stderr file: MPI_Abort cannot cut it off."""
    out = tmp_path / "r.h5"
    rank, where, _ = fault.split(":")
    outcome = hpcmm(ranks, [], tmp_path,
                    parts=[Part(runner_argv([fault], "--device", "cpu", *SMALL, "--quiet", "--out", str(out)),
                                ranks=ranks)])
    assert outcome.rc == 1, outcome.describe()
    assert within(outcome.seconds, end_within), outcome.describe()
    who, line = outcome.job.the_line()
    assert who == int(rank), outcome.describe()
    assert line == f"hpcmm: rank {rank}: RuntimeError: fault at {where}; aborting all ranks", outcome.describe()
    assert not out.exists()
    assert _partials(tmp_path) == []


def test_failure_while_rank_0_writes_is_reported_once(tmp_path):
    out = tmp_path / "r.h5"
    outcome = hpcmm(3, [], tmp_path, parts=[Part(runner_argv(["0:write:raise"], "--device", "cpu", *SMALL,
                                                             "--save-c", "--quiet", "--out", str(out)), ranks=3)])
    assert outcome.rc == 1, outcome.describe()
    assert (f"--out={out}: cannot write the results file: fault at write (raised by rank 0)"
            in outcome.error())
    assert not out.exists()
    assert _partials(tmp_path) == []


# -- outputs ----------------------------------------------------------------------
@pytest.mark.parametrize("verify", ["freivalds", "full"])
def test_failed_verification_is_written_complete_and_marked(tmp_path, verify):
    out = tmp_path / "r.h5"
    outcome = hpcmm(2, [], tmp_path, parts=[Part(runner_argv(
        ["0:verify:corrupt"], "--device", "cpu", *SMALL, "--verify", verify, "--save-c", "--quiet",
        "--out", str(out)), ranks=2)])
    assert outcome.rc == 1, outcome.describe()
    error = outcome.error()
    assert f"verification failed: {verify} residual" in error
    assert "marked verified=False" in error
    assert "FAILED" in outcome.stdout(0)  # the summary is printed all the same
    with h5py.File(out, "r") as f:
        assert not f["summary"].attrs["verified"]
        assert f["summary"].attrs["verify"] == verify
        c = f["result/C"][...]
    assert c.shape == (60, 50) and np.isfinite(c).all()  # complete: every block was written
    assert _partials(tmp_path) == []


def test_a_good_run_publishes_a_complete_file_with_the_usual_mode(tmp_path):
    out = tmp_path / "r.h5"
    outcome = hpcmm(3, ["--device", "cpu", *SMALL, "--verify", "full", "--save-c", "--out", str(out)], tmp_path)
    assert outcome.rc == 0, outcome.describe()
    with h5py.File(out, "r") as f:
        assert f["summary"].attrs["verified"]
        assert "fault" not in f["config"].attrs  # no test hook in the product, nor in its file
        assert np.isfinite(f["result/C"][...]).all()
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(out.stat().st_mode) == 0o666 & ~umask
    assert _partials(tmp_path) == []
