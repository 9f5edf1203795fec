"""Reliability at the edges of a run, class by class, through the real command line at 2 ranks.

Each case is a row of a table; each runs ``mpiexec -n 2`` (an MPMD launch
where one rank must differ) with every rank's stdout and stderr in files of
its own (:mod:`ranklog`: no test reads lines that several processes wrote
into one stream), under a time limit, and asserts the exit status, the one
``hpcmm:`` line of the whole job (and which rank wrote it), what is left on
disk, and that every input file is byte for byte what it was.  Faults come
from ``tests/fault_runner.py``, which wraps hpcmm functions from outside.

Classes (docs/reliability.md): start-up (no hang), inputs never destroyed,
a full disk, refusal before the work, damaged input files, signals at the
edges, ``report``, ``bench transport --sizes``.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
import ranklog
from test_reliability_budget import end_within, hang_within, scaled, within
from ranklog import Part, digest, hpcmm_argv, is_hydra, partials, runner_argv

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

SMALL = ("--device", "cpu", "--m", "60", "--n", "50", "--k", "40", "--iters", "1", "--warmup", "0", "--quiet")
#: Seconds each hang-class case took to end (start-up and signals), printed once the module ends (-s).
SLOWEST: dict[str, float] = {}


@pytest.fixture(scope="module", autouse=True)
def _report_slowest():
    yield
    if SLOWEST:
        name = max(SLOWEST, key=SLOWEST.get)
        sys.__stdout__.write(f"\nslowest hang-class case: {name}: {SLOWEST[name]:.2f} s ({len(SLOWEST)} cases)\n")


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("inputs")
    rng = np.random.default_rng(11)
    with h5py.File(d / "ab.h5", "w") as f:
        f["A"] = rng.random((6, 5))
        f["B"] = rng.random((5, 4))
    np.save(d / "a.npy", rng.random((6, 5)))
    np.save(d / "b.npy", rng.random((5, 4)))
    return d


#: What MPICH's mpiexec (hydra) sometimes reports when one rank ends by itself with a status and hydra
#: then kills the others with SIGKILL: 9, the others' signal, not the rank's status. Measured with a
#: plain mpi4py program (rank 1 os._exit(130) while rank 0 waits in a barrier): 130 in 18 of 20
#: launches, 9 in 2. The launcher's choice, not hpcmm's: hpcmm's rank ends with its own status.
HYDRA_KILLED_OTHERS = 9


def _check_end(o: ranklog.Outcome, status: int, line: str, rank: int | None, out: Path | None,
               before: dict[str, str], alone: bool = False) -> None:
    """``alone``: one rank ended by itself and the launcher killed the rest (see HYDRA_KILLED_OTHERS)."""
    if alone and o.rc == HYDRA_KILLED_OTHERS:
        assert is_hydra(ranklog.mpiexec()), o.describe()
    else:
        assert o.rc == status, o.describe()
    assert within(o.seconds, end_within), o.describe()
    if line is not None:
        who, text = o.the_line()
        assert line in text, f"{line!r} not in {text!r}\n{o.describe()}"
        if rank is not None:
            assert who == rank, o.describe()
    for r in o.ranks():
        assert not any(x.startswith("Traceback") for x in o.err(r)), o.describe()
    if out is not None:
        assert not out.exists(), o.describe()
        assert partials(out.parent) == [], o.describe()
    assert digest(before) == before, "an input file changed"


# -- 1. start-up: no rank can hang the job ---------------------------------------------
@dataclasses.dataclass(frozen=True)
class Start:
    id: str
    rank0: tuple[str, ...]  # argv of rank 0 ("hpcmm" or "runner:FAULT" first)
    rank1: tuple[str, ...]
    status: int
    line: str
    rank: int | None
    env1: tuple[tuple[str, str], ...] = ()


def _argv(spec: tuple[str, ...], out: Path) -> list[str]:
    head, *rest = spec
    args = [a.replace("{out}", str(out)) for a in rest]
    if head == "hpcmm":
        return hpcmm_argv(*args)
    return runner_argv(head.split(",")[1:] if "," in head else [], *args)


RUN = ("--out", "{out}", *SMALL)
START = [
    Start("import-error-rank-1", ("hpcmm", *RUN), ("hpcmm", *RUN), 1,
          "hpcmm: rank 1: ImportError: broken h5py; aborting all ranks", 1, (("PYTHONPATH", "{broken}"),)),
    Start("import-error-rank-0", ("hpcmm", *RUN), ("hpcmm", *RUN), 1,
          "hpcmm: rank 1: ImportError: broken h5py; aborting all ranks", 1, (("PYTHONPATH", "{broken}"),)),
    Start("version-on-rank-1-only", ("hpcmm", *RUN), ("hpcmm", "--version"), 2,
          "hpcmm: error: rank 1 was given --help or --version and rank 0 was not", 0),
    Start("help-on-rank-0-only", ("hpcmm", "--help"), ("hpcmm", *RUN), 2,
          "hpcmm: error: rank 0 was given --help or --version and rank 1 was not", 0),
    Start("exit-3-before-the-command-line", ("runner", *RUN), ("runner,1:start:exit", *RUN), 3,
          "hpcmm: rank 1: exited with status 3 while the other ranks went on; aborting all ranks", 1),
    Start("keyboard-interrupt-before-the-command-line", ("runner,0:start:interrupt", *RUN), ("runner", *RUN), 130,
          "hpcmm: rank 0: interrupted (KeyboardInterrupt); aborting all ranks", 0),
    Start("exception-before-the-command-line", ("runner", *RUN), ("runner,1:start:raise", *RUN), 1,
          "hpcmm: rank 1: RuntimeError: fault at start; aborting all ranks", 1),
    # Inside a collective step: every rank learns of it, rank 0 says it once.
    Start("import-error-in-the-backend", ("runner", *RUN), ("runner,1:backend:import", *RUN), 1,
          "hpcmm: error: ImportError: fault at backend: no module named 'h5py' (raised by rank 1)", 0),
    Start("exit-3-in-the-products", ("runner,0:multiply:exit", *RUN), ("runner", *RUN), 3,
          "hpcmm: rank 0: exited with status 3", 0),
    Start("keyboard-interrupt-in-the-products", ("runner", *RUN), ("runner,1:multiply:interrupt", *RUN), 130,
          "hpcmm: rank 1: interrupted (KeyboardInterrupt); aborting all ranks", 1),
    Start("an-error-of-one-rank-alone", ("runner", *RUN), ("runner,1:command:input", *RUN), 2,
          "hpcmm: rank 1: error: fault at command (an error of this rank alone); aborting all ranks", 1),
    # Inside run(), with the engine's channels open: the rank must not tear them down collectively.
    Start("an-error-of-one-rank-alone-inside-the-run", ("runner", *RUN), ("runner,1:verify:input", *RUN), 2,
          "hpcmm: rank 1: error: fault at verify (an error of this rank alone); aborting all ranks", 1),
    Start("an-error-of-one-rank-alone-in-the-products", ("runner,0:multiply:input", *RUN), ("runner", *RUN), 2,
          "hpcmm: rank 0: error: fault at multiply (an error of this rank alone); aborting all ranks", 0),
]
# The MPMD rows above put the broken module on rank 1; "import-error-rank-0" swaps the parts.


@pytest.fixture(scope="module")
def broken(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("broken")
    (d / "h5py").mkdir()
    (d / "h5py" / "__init__.py").write_text('raise ImportError("broken h5py")\n')
    return d


@pytest.mark.parametrize("case", START, ids=[c.id for c in START])
def test_start_up_never_hangs(case, tmp_path, broken, inputs):
    out = tmp_path / "r.h5"
    before = digest(inputs.iterdir())
    env1 = {k: v.replace("{broken}", f"{broken}{os.pathsep}{ranklog.REPO}") for k, v in case.env1}
    parts = [Part(_argv(case.rank0, out)), Part(_argv(case.rank1, out), env=env1)]
    if case.id == "import-error-rank-0":
        parts = [Part(_argv(case.rank1, out), env=env1), Part(_argv(case.rank0, out))]
        case = dataclasses.replace(case, line=case.line.replace("rank 1", "rank 0"), rank=0)
    o = ranklog.run(parts, tmp_path / "logs", tmp_path, hang_within())
    SLOWEST[case.id] = o.seconds
    _check_end(o, case.status, case.line, case.rank, out, before)


def test_version_everywhere_is_printed_once(tmp_path):
    from hpcmm import __version__

    o = ranklog.run([Part(hpcmm_argv("--version"), ranks=2)], tmp_path / "logs", tmp_path, hang_within())
    assert o.rc == 0, o.describe()
    assert o.out(0).strip() == f"hpcmm {__version__}" and o.out(1) == "", o.describe()


# -- 2. an input is never destroyed ------------------------------------------------------
def _spellings(inputs: Path, tmp: Path) -> dict[str, tuple[str, str]]:
    """``{case: (--out, text the line names)}``: the input ab.h5 (or a.npy) in other spellings."""
    work = tmp / "work"
    work.mkdir()
    (work / "sub").mkdir()
    os.symlink(inputs, work / "linked")
    os.link(inputs / "ab.h5", work / "hard.h5")
    os.symlink(inputs / "ab.h5", work / "soft.h5")
    return {
        "same-path": (str(inputs / "ab.h5"), "is the input file --a="),
        "relative-with-dotdot": (os.path.relpath(inputs / "ab.h5", work / "sub"), "is the input file --a="),
        "symlinked-directory": (str(work / "linked" / "ab.h5"), "is the input file --a="),
        "hard-link": (str(work / "hard.h5"), "is the input file --a="),
        "symbolic-link": (str(work / "soft.h5"), "is the input file --a="),
    }


@pytest.mark.parametrize("case", ["same-path", "relative-with-dotdot", "symlinked-directory", "hard-link",
                                  "symbolic-link"])
def test_out_naming_an_input_is_refused(case, tmp_path, inputs):
    scratch = tmp_path / "in"
    shutil.copytree(inputs, scratch)
    out, text = _spellings(scratch, tmp_path)[case]
    before = digest(scratch.iterdir())
    args = ["--device", "cpu", "--quiet", "--a", f"{scratch}/ab.h5:A", "--b", f"{scratch}/ab.h5:B",
            "--out", out, "--overwrite"]
    o = ranklog.run([Part(hpcmm_argv(*args), ranks=2)], tmp_path / "logs", tmp_path / "work" / "sub", hang_within())
    _check_end(o, 2, text, 0, None, before)
    assert "hpcmm never replaces its inputs" in o.the_line()[1]
    assert partials(scratch) == [] and partials(tmp_path / "work") == []


def _not_hdf5(kind: str, path: Path) -> str:
    if kind == "text-file":
        path.write_text("notes, not results\n")
        return "not an HDF5 file; --overwrite replaces HDF5 files only"
    if kind == "fifo":
        os.mkfifo(path)
        return "not a regular file; --overwrite replaces HDF5 files only"
    if kind == "device-node":
        os.symlink("/dev/null", path)
        return "not a regular file; --overwrite replaces HDF5 files only"
    if kind == "directory":
        path.mkdir()
        return "is a directory"
    if kind == "dangling-symlink":
        os.symlink(path.parent / "nowhere.h5", path)
        return "a symbolic link to"
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["text-file", "fifo", "device-node", "directory", "dangling-symlink"])
def test_overwrite_replaces_hdf5_files_only(kind, tmp_path, inputs):
    out = tmp_path / "taken.h5"
    text = _not_hdf5(kind, out)
    kept = out.read_bytes() if kind == "text-file" else None
    before = digest(inputs.iterdir())
    o = ranklog.run([Part(hpcmm_argv(*SMALL, "--out", str(out), "--overwrite"), ranks=2)], tmp_path / "logs",
                    tmp_path, hang_within())
    _check_end(o, 2, text, 0, None, before)
    assert os.path.lexists(out)
    if kept is not None:
        assert out.read_bytes() == kept
    assert partials(tmp_path) == []


# -- 3. a full disk is an error, not a crash ---------------------------------------------
@pytest.fixture
def small_disk(tmp_path):
    """A 1 MiB tmpfs (root only); skipped where it cannot be mounted."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if shutil.which("mount") is None:
        pytest.skip("no mount command")
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], check=False,
                          capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({made.stderr.strip() or made.returncode}); "
                    f"the injected cases cover a full disk")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


FULL = "cannot write the results file: No space left on device"


@dataclasses.dataclass(frozen=True)
class Disk:
    id: str
    args: tuple[str, ...]
    fill: int = 0  # bytes of the disk taken beforehand
    existing: bool = False  # an earlier results file at --out (with --overwrite)


DISK = [
    Disk("C-does-not-fit", ("--m", "400", "--n", "400", "--save-c")),
    Disk("timeline-does-not-fit", ("--m", "60", "--n", "50", "--k", "4000", "--panel", "1", "--iters", "5")),
    Disk("summary-does-not-fit", ("--m", "60", "--n", "50"), fill=(1 << 20) - (24 << 10)),
    Disk("earlier-file-kept", ("--m", "400", "--n", "400", "--save-c", "--overwrite"), existing=True),
]


@pytest.mark.parametrize("case", DISK, ids=[c.id for c in DISK])
def test_full_disk_on_a_small_tmpfs(case, small_disk, tmp_path, inputs):
    out = small_disk / "r.h5"
    if case.fill:
        with open(small_disk / "filler", "wb") as f:
            f.write(b"\0" * case.fill)
    kept = None
    if case.existing:
        with h5py.File(out, "w") as f:
            f["earlier"] = np.arange(10.0)
        kept = out.read_bytes()
    before = digest(inputs.iterdir())
    args = ["--device", "cpu", "--k", "40", "--iters", "1", "--warmup", "0", "--quiet", *case.args, "--out", str(out)]
    o = ranklog.run([Part(hpcmm_argv(*args), ranks=2)], tmp_path / "logs", tmp_path, hang_within())
    _check_end(o, 1, FULL, 0, None if kept else out, before)
    assert partials(small_disk) == []
    if kept is not None:
        assert out.read_bytes() == kept


def test_a_run_that_fits_the_small_tmpfs(small_disk, tmp_path):
    """The control: the same disk takes a small run (the reservation is not absurdly large)."""
    out = small_disk / "r.h5"
    o = ranklog.run([Part(hpcmm_argv(*SMALL, "--save-c", "--out", str(out)), ranks=2)], tmp_path / "logs",
                    tmp_path, hang_within())
    assert o.rc == 0, o.describe()
    with h5py.File(out, "r") as f:
        assert bool(f["summary"].attrs["verified"]) and f["result/C"].shape == (60, 50)


INJECTED = [
    ("reservation-refused", "0:reserve:enospc", ()),
    ("while-rank-0-writes", "0:write:enospc", ()),
    ("while-rank-1-writes-C", "1:write-c:enospc", ("--save-c",)),
]


@pytest.mark.parametrize(("fault", "extra"), [c[1:] for c in INJECTED], ids=[c[0] for c in INJECTED])
@pytest.mark.parametrize("existing", [False, True], ids=["new", "overwrite"])
def test_full_disk_by_injection(fault, extra, existing, tmp_path, inputs):
    out = tmp_path / "r.h5"
    kept = None
    if existing:
        with h5py.File(out, "w") as f:
            f["earlier"] = np.arange(10.0)
        kept = out.read_bytes()
        extra = (*extra, "--overwrite")
    before = digest(inputs.iterdir())
    o = ranklog.run([Part(runner_argv([fault], *SMALL, *extra, "--out", str(out)), ranks=2)], tmp_path / "logs",
                    tmp_path, hang_within())
    _check_end(o, 1, f"--out={out}: {FULL}", 0, None if kept else out, before)
    assert partials(tmp_path) == []
    if kept is not None:
        assert out.read_bytes() == kept


# -- 4. refuse before the work -----------------------------------------------------------
REFUSE = [
    ("seed-2**64", ("--seed", str(2**64)), {}, f"--seed={2**64}: expected an integer <= {2**63 - 1}"),
    ("seed-2**63", ("--seed", str(2**63)), {}, f"--seed={2**63}: expected an integer <="),
    ("ranks-per-node-2**64", ("--ranks-per-node", str(2**64)), {}, f"--ranks-per-node={2**64}: expected"),
    ("env-ranks-per-node-2**64", (), {"HPCMM_RANKS_PER_NODE": str(2**64)}, f"HPCMM_RANKS_PER_NODE={2**64}"),
    ("iters-2**63", ("--iters", str(2**63)), {}, f"--iters={2**63}: expected an integer <="),
    ("m-2**70", ("--m", str(2**70)), {}, f"--m={2**70}: expected an integer <="),
]


@pytest.mark.parametrize(("args", "env", "text"), [c[1:] for c in REFUSE], ids=[c[0] for c in REFUSE])
def test_values_the_results_file_cannot_hold_are_refused(args, env, text, tmp_path):
    out = tmp_path / "r.h5"
    o = ranklog.run([Part(hpcmm_argv(*SMALL, *args, "--out", str(out)), ranks=2)], tmp_path / "logs",
                    tmp_path, hang_within(), env=env)
    _check_end(o, 2, text, 0, out, {})


def test_the_largest_seed_runs(tmp_path):
    out = tmp_path / "r.h5"
    o = ranklog.run([Part(hpcmm_argv(*SMALL, "--seed", str(2**63 - 1), "--out", str(out)), ranks=2)],
                    tmp_path / "logs", tmp_path, hang_within())
    assert o.rc == 0, o.describe()
    with h5py.File(out, "r") as f:
        assert int(f["config"].attrs["seed"]) == 2**63 - 1


# -- 5. damaged or unusual input files ---------------------------------------------------
def _damaged(kind: str, d: Path) -> tuple[list[str], str]:
    """Make one damaged input; the ``--a``/``--b`` arguments and the text the line must hold."""
    rng = np.random.default_rng(5)
    good_b = d / "b.npy"
    np.save(good_b, rng.random((5, 4)))
    if kind == "npy-truncated":
        np.save(d / "a.npy", rng.random((6, 5)))
        data = (d / "a.npy").read_bytes()
        (d / "a.npy").write_bytes(data[:-17])
        return [f"{d}/a.npy", str(good_b)], "a.npy: truncated ("
    if kind == "npy-bad-header":
        np.save(d / "a.npy", rng.random((6, 5)))
        data = bytearray((d / "a.npy").read_bytes())
        data[10:20] = b"\xff" * 10
        (d / "a.npy").write_bytes(bytes(data))
        return [f"{d}/a.npy", str(good_b)], "a.npy: not a NumPy .npy file"
    if kind == "npy-objects":
        np.save(d / "a.npy", np.array([[1, "x"], [None, 2.0]], dtype=object), allow_pickle=True)
        return [f"{d}/a.npy", str(good_b)], "a.npy: holds Python objects, not numbers"
    with h5py.File(d / "m.h5", "w") as f:
        f["B"] = rng.random((50, 4))
        if kind == "h5-dangling-soft-link":
            f["A"] = h5py.SoftLink("/nowhere")
        elif kind == "h5-external-link-to-missing-file":
            f["A"] = h5py.ExternalLink(str(d / "missing.h5"), "/A")
        elif kind == "h5-empty-dataspace":
            f.create_dataset("A", data=h5py.Empty("f8"))
        elif kind in ("h5-truncated", "h5-checksum"):
            f.create_dataset("A", data=rng.random((60, 50)), chunks=(10, 50), fletcher32=kind == "h5-checksum")
    b = f"{d}/m.h5:B"
    if kind == "h5-truncated":
        data = (d / "m.h5").read_bytes()
        (d / "m.h5").write_bytes(data[: len(data) // 2])
        return [f"{d}/m.h5:A", b], "m.h5:A: cannot open it as HDF5 ("
    if kind == "h5-checksum":
        with h5py.File(d / "m.h5", "r") as f:
            offset = f["A"].id.get_chunk_info(0).byte_offset
        with open(d / "m.h5", "r+b") as fh:
            fh.seek(offset + 8)
            fh.write(b"\x12\x34\x56\x78")
        return [f"{d}/m.h5:A", b], "m.h5:A: cannot read rows"
    text = {"h5-dangling-soft-link": "'A' is a link that leads nowhere",
            "h5-external-link-to-missing-file": "'A' is a link that leads nowhere",
            "h5-empty-dataspace": "the dataset has an empty dataspace"}[kind]
    return [f"{d}/m.h5:A", b], text


DAMAGED = ["npy-truncated", "npy-bad-header", "npy-objects", "h5-dangling-soft-link",
           "h5-external-link-to-missing-file", "h5-empty-dataspace", "h5-truncated", "h5-checksum"]


@pytest.mark.parametrize("kind", DAMAGED)
def test_damaged_input_files_are_bad_input(kind, tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    (a, b), text = _damaged(kind, d)
    before = digest(d.iterdir())
    out = tmp_path / "r.h5"
    o = ranklog.run([Part(hpcmm_argv("--device", "cpu", "--quiet", "--a", a, "--b", b, "--out", str(out)), ranks=2)],
                    tmp_path / "logs", tmp_path, hang_within())
    _check_end(o, 2, text, 0, out, before)
    assert "--a=" in o.the_line()[1]


def test_a_npy_file_truncated_while_it_is_read(tmp_path):
    """The reader sees fewer bytes than the header promises: bad input, not SIGBUS."""
    from hpcmm.errors import InputError
    from hpcmm.io.inputs import open_source

    path = tmp_path / "a.npy"
    np.save(path, np.arange(60.0).reshape(6, 10))
    source = open_source("--a", str(path), None)
    np.testing.assert_array_equal(source.read((1, 4), (2, 7)), np.arange(60.0).reshape(6, 10)[1:4, 2:7])
    os.truncate(path, path.stat().st_size - 200)
    with pytest.raises(InputError, match=r"--a=.*a\.npy: cannot read rows 0:6, columns 0:10 \(truncated"):
        source.read((0, 6), (0, 10))


def test_fortran_order_npy_blocks(tmp_path):
    from hpcmm.io.inputs import open_source

    full = np.asfortranarray(np.random.default_rng(2).random((7, 9)))
    np.save(tmp_path / "f.npy", full)
    source = open_source("--a", str(tmp_path / "f.npy"), None)
    np.testing.assert_array_equal(source.read((2, 6), (1, 8)), full[2:6, 1:8])


def test_a_path_with_a_colon(tmp_path):
    d = tmp_path / "odd:dir"
    d.mkdir()
    rng = np.random.default_rng(1)
    with h5py.File(d / "m.h5", "w") as f:
        f["A"], f["B"] = rng.random((6, 5)), rng.random((5, 4))
    out = tmp_path / "r.h5"
    o = ranklog.run([Part(hpcmm_argv("--device", "cpu", "--quiet", "--a", f"{d}/m.h5:A", "--b", f"{d}/m.h5:B",
                                     "--out", str(out)), ranks=2)], tmp_path / "logs", tmp_path, hang_within())
    assert o.rc == 0, o.describe()


# -- 6. signals at the edges -------------------------------------------------------------
@pytest.fixture(scope="module")
def held(tmp_path_factory) -> Path:
    """A module path whose h5py marks a file, then holds the rank inside its start-up for a minute."""
    d = tmp_path_factory.mktemp("held")
    (d / "h5py").mkdir()
    (d / "h5py" / "__init__.py").write_text(
        "import os, time\nopen(os.environ['HOLD_MARK'], 'w').close()\ntime.sleep(60)\n")
    (d / "slowsite").mkdir()
    (d / "slowsite" / "sitecustomize.py").write_text(
        "import os, time\nopen(os.environ['HOLD_MARK'], 'w').close()\ntime.sleep(4)\n")
    return d


SIGNALS = [
    ("SIGTERM-to-rank-1-in-start-up", "rank 1", signal.SIGTERM, 143, "hpcmm: rank 1: stopped by SIGTERM; no results written", 1),
    ("SIGINT-to-rank-1-in-start-up", "rank 1", signal.SIGINT, 130, "hpcmm: rank 1: stopped by SIGINT; no results written", 1),
    ("SIGTERM-to-rank-0-in-start-up", "rank 0", signal.SIGTERM, 143, "hpcmm: rank 0: stopped by SIGTERM; no results written", 0),
    ("SIGINT-to-mpiexec-in-start-up", "mpiexec", signal.SIGINT, 130, "hpcmm: stopped by SIGINT; no results written", 0),
    # Rank 1 held after MPI_Init, before the entry point (tests/fault_runner.py --fault 1:start:hang).
    ("SIGTERM-to-rank-1-before-main", "rank 1 start", signal.SIGTERM, 143,
     "hpcmm: rank 1: stopped by SIGTERM during start-up; no results written", 1),
    # Rank 1 started while rank 0 still sleeps before MPI_Init: whether rank 1's MPI_Init waits for
    # rank 0 is the MPI's choice (MPICH may return at once), so rank 1 is in start-up or already in
    # its first collective; either way it must end with its line and 143, and say nothing was written.
    ("SIGTERM-to-rank-1-in-MPI_Init", "rank 1 init", signal.SIGTERM, 143,
     "hpcmm: rank 1: stopped by SIGTERM", 1),
]


def _signals_blocked(pid: int, sig: int) -> bool:
    """Whether ``pid``'s main thread blocks ``sig`` (/proc: hpcmm has reached its first line)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    masks = [line.split()[1] for line in status.splitlines() if line.startswith("SigBlk:")]
    return bool(masks) and bool(int(masks[0], 16) >> (sig - 1) & 1)


@pytest.mark.parametrize(("target", "sig", "status", "line", "rank"), [c[1:] for c in SIGNALS],
                         ids=[c[0] for c in SIGNALS])
def test_signal_during_start_up(target, sig, status, line, rank, tmp_path, held):
    out = tmp_path / "r.h5"
    mark = tmp_path / "held"
    argv = hpcmm_argv(*SMALL, "--out", str(out))
    repo = str(ranklog.REPO)
    if target == "rank 1 init":
        # Rank 0 sleeps in its interpreter's start-up, before MPI_Init.
        parts = [Part(argv, env={"PYTHONPATH": f"{held / 'slowsite'}{os.pathsep}{repo}"}), Part(argv)]
    elif target == "rank 1 start":
        parts = [Part(argv), Part(runner_argv(["1:start:hang"], *SMALL, "--out", str(out)))]
    else:
        # The held rank's h5py import (after MPI started, before any results) never ends.
        holder = {"PYTHONPATH": f"{held}{os.pathsep}{repo}"}
        parts = [Part(argv, env=holder if target == "rank 0" else {}),
                 Part(argv, env={} if target == "rank 0" else holder)]
    job = ranklog.Job(parts, tmp_path / "logs", tmp_path, env={"HOLD_MARK": str(mark)})
    try:
        deadline = time.monotonic() + hang_within()
        while not mark.exists():
            assert job.proc.poll() is None and time.monotonic() < deadline, "the rank never got to its hold"
            time.sleep(0.02)
        pid = job.proc.pid if target == "mpiexec" else job.rank_pid(int(target.split()[1]))
        if target == "rank 1 init":
            # Not a fixed sleep: under load rank 1 may not have reached hpcmm's first line yet, and a
            # signal before it ends the process without a word. Wait until hpcmm blocks the signal.
            while not _signals_blocked(pid, sig):
                assert job.proc.poll() is None and time.monotonic() < deadline, "rank 1 never blocked signals"
                time.sleep(0.01)
        os.kill(pid, sig)
        o = job.wait(hang_within())
    finally:
        job.kill()
    SLOWEST[f"signal {target} {signal.Signals(sig).name}"] = o.seconds
    # To mpiexec: hydra forwards the signal to both ranks, and the one that is not held ends first
    # (with its status); hydra may then kill the held one and report 9 (HYDRA_KILLED_OTHERS), as it
    # does where one rank ends alone: seen once in a suite run beside a CPU hog.
    _check_end(o, status, line, rank, out, {}, alone=True)
    assert o.the_line()[1].endswith("; no results written"), o.describe()


def test_signal_after_the_file_is_published_says_so(tmp_path):
    """Rank 0 has published the file and is held there; SIGTERM must not say "no results written"."""
    out, mark = tmp_path / "r.h5", tmp_path / "held"
    job = ranklog.Job([Part(runner_argv(["0:publish:hang-after"], *SMALL, "--out", str(out)), ranks=2)],
                      tmp_path / "logs", tmp_path, env={"HOLD_MARK": str(mark)})
    try:
        deadline = time.monotonic() + hang_within()
        while not mark.exists():  # publish returned (the file alone may show before it has)
            assert job.proc.poll() is None and time.monotonic() < deadline, "no file was published"
            time.sleep(0.02)
        assert out.exists()
        os.kill(job.rank_pid(0), signal.SIGTERM)
        o = job.wait(hang_within())
    finally:
        job.kill()
    _check_end(o, 143, f"hpcmm: rank 0: stopped by SIGTERM; the results were written to {out}", 0, None, {},
               alone=True)
    with h5py.File(out, "r") as f:
        assert bool(f["summary"].attrs["verified"])
    assert partials(tmp_path) == []


# -- 7. report never crashes -------------------------------------------------------------
def _report_file(kind: str, d: Path) -> tuple[Path, str]:
    path = d / f"{kind}.h5"
    if kind == "missing":
        return path, "no such file"
    if kind == "text":
        path.write_text("hello\n")
        return path, "not an HDF5 file"
    if kind == "foreign":
        with h5py.File(path, "w") as f:
            f["x"] = np.arange(3)
        return path, "no /summary and /config (not an hpcmm results file)"
    if kind == "summary-without-config":
        with h5py.File(path, "w") as f:
            f.create_group("summary").attrs["seconds"] = 1.0
        return path, "no /summary and /config"
    if kind == "truncated":
        with h5py.File(path, "w") as f:
            f.create_group("summary").attrs["seconds"] = 1.0
            f.create_group("config").attrs["m"] = 3
            f["big"] = np.random.default_rng(0).random((200, 200))
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 3])
        return path, "cannot read it as an hpcmm file"
    if kind == "bench-file-with-plot":
        with h5py.File(path, "w") as f:
            f.attrs["kind"] = "bench-transport"
            f["transport"] = np.array([(1, 2.5)], dtype=[("bytes", "i8"), ("gbps", "f8")])
        return path, "has no timeline"
    if kind == "kind-without-table":
        with h5py.File(path, "w") as f:
            f.attrs["kind"] = "bench"
        return path, "a 'bench' file without a bench or transport table"
    raise AssertionError(kind)


REPORT = ["missing", "text", "foreign", "summary-without-config", "truncated", "bench-file-with-plot",
          "kind-without-table"]


@pytest.mark.parametrize("kind", REPORT)
def test_report_never_crashes(kind, tmp_path):
    path, text = _report_file(kind, tmp_path)
    before = digest([path]) if path.exists() else {}
    plot = ["--plot", str(tmp_path / "t.png")] if kind == "bench-file-with-plot" else []
    o = ranklog.run([Part(hpcmm_argv("report", str(path), *plot), ranks=2)], tmp_path / "logs", tmp_path, hang_within())
    _check_end(o, 2, text, 0, None, before)
    assert not (tmp_path / "t.png").exists()


def test_report_plot_without_matplotlib(tmp_path):
    out = tmp_path / "r.h5"
    o = ranklog.run([Part(hpcmm_argv(*SMALL, "--out", str(out)), ranks=2)], tmp_path / "logs", tmp_path, hang_within())
    assert o.rc == 0, o.describe()
    hidden = tmp_path / "no-matplotlib"
    (hidden / "matplotlib").mkdir(parents=True)
    (hidden / "matplotlib" / "__init__.py").write_text("raise ImportError('No module named matplotlib')\n")
    before = digest([out])
    o = ranklog.run([Part(hpcmm_argv("report", str(out), "--plot", str(tmp_path / "t.png")), ranks=2)],
                    tmp_path / "logs2", tmp_path, hang_within(),
                    env={"PYTHONPATH": f"{hidden}{os.pathsep}{ranklog.REPO}"})
    _check_end(o, 2, "report --plot needs matplotlib: pip install 'hpcmm[plot]'", 0, None, before)
    assert "Abort" not in o.launcher_err and not any("Abort" in x for r in o.ranks() for x in o.err(r))


# -- 8. bench transport --sizes ----------------------------------------------------------
SIZES = [
    ("negative", "-1", "-1 MiB is outside 1"),
    ("zero", "1,0", "0 MiB is outside 1"),
    ("not-a-number", "1,x", "'x' is not a whole number of MiB"),
    ("above-the-limit", str(2**21), f"{2**21} MiB is outside 1"),
    ("more-than-memory", "1000000", "1000000 MiB needs"),
]


@pytest.mark.parametrize(("sizes", "text"), [c[1:] for c in SIZES], ids=[c[0] for c in SIZES])
def test_bench_transport_sizes(sizes, text, tmp_path):
    out = tmp_path / "t.h5"
    o = ranklog.run([Part(hpcmm_argv("bench", "transport", "--device", "cpu", "--sizes", sizes, "--out", str(out)),
                          ranks=2)], tmp_path / "logs", tmp_path, hang_within())
    _check_end(o, 2, f"--sizes={sizes!r}: {text}", 0, out, {})


def test_bench_transport_names_its_file(tmp_path):
    out = tmp_path / "t.h5"
    o = ranklog.run([Part(hpcmm_argv("bench", "transport", "--device", "cpu", "--sizes", "1", "--out", str(out)),
                          ranks=2)], tmp_path / "logs", tmp_path, scaled(120))
    assert o.rc == 0, o.describe()
    assert f"figures: {out}" in o.out(0).splitlines(), o.describe()
    with h5py.File(out, "r") as f:
        assert len(f["transport"]) > 0


def test_no_temporary_file_is_made_once_the_process_stops(tmp_path):
    """A signal is handled on its own thread: once it has removed the pending files, the main
    thread, which goes on meanwhile, must not make a new one (it waits for the end instead)."""
    script = f"""
import threading, time
from hpcmm.io import h5io
h5io.remove_pending()  # what the signal's thread does first
made = []
worker = threading.Thread(target=lambda: made.append(h5io.temporary_path({str(tmp_path / 'r.h5')!r})), daemon=True)
worker.start()
worker.join(2.0)
print("blocked" if worker.is_alive() and not made else f"made {{made}}")
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          cwd=ranklog.REPO)
    assert proc.stdout.strip() == "blocked", proc.stdout + proc.stderr
    assert partials(tmp_path) == []


def test_python_m_hpcmm_imports_nothing_heavy_before_it_blocks_signals():
    """``import hpcmm`` and ``hpcmm.__main__`` load only the standard library and hpcmm's light modules.

    ``python -m hpcmm`` runs the package's ``__init__`` before :func:`hpcmm.cli.startup.launch` blocks
    SIGTERM/SIGINT; numpy (whose BLAS starts threads when it loads), mpi4py, h5py or cupy imported
    there would start threads that do not block the signals, and a signal taken by one of them ends
    the rank without a word.
    """
    heavy = ("numpy", "mpi4py", "h5py", "cupy", "threadpoolctl", "ml_dtypes", "rich", "matplotlib")
    code = ("import sys, threading, hpcmm, hpcmm.__main__; "
            f"print(sorted(m for m in {heavy!r} if m in sys.modules), threading.active_count())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=ranklog.REPO, check=True).stdout.split("\n")[0]
    assert out == "[] 1", out
