"""Reliability III: bookkeeping never overwrites, nothing fails late, streams never decide the status,
every subcommand refuses bad input, nothing hangs.

Each class is a table of cases.  Every case starts from the same folder of files (inputs, an
earlier results file, a note, a FIFO, a device, links, a status file, machine descriptions)
and asserts the exit status, the one ``hpcmm:`` line of the job (no traceback on any rank),
that every file that existed before is byte for byte what it was (links and FIFOs too), and
that nothing new is left but what the case names.  The jobs run under ``mpiexec -n 2`` with
each rank's output in files of its own (:mod:`ranklog`); the stream cases run one process
from a shell, since they are about the shell's pipes and closed descriptors.

Time limits are derived from what the test starts (tests/test_reliability_budget.py): a job
that does nothing (``--version`` at 2 ranks) is timed on this machine, and a case may take a
few such launches plus slack; a loaded machine slows both alike, and a case over its limit is
judged again against a launch timed then.  The hang guard that kills a job is twice the limit
of a job that fails (:func:`~test_reliability_budget.hang_within`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
import ranklog
from ranklog import Part, hpcmm_argv
from test_reliability_budget import hang_within, refuse_within, within

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="FIFOs, /dev/null, /proc")

SMALL = ("--device", "cpu", "--m", "24", "--n", "20", "--k", "16", "--iters", "1", "--warmup", "0", "--quiet")
#: Seconds each hang-class case (FIFOs, devices, SIGTERM) took, printed once the module ends (-s).
SLOWEST: dict[str, float] = {}


@pytest.fixture(scope="module", autouse=True)
def _report_slowest():
    yield
    if SLOWEST:
        name = max(SLOWEST, key=SLOWEST.get)
        sys.__stdout__.write(f"\nslowest hang-class case: {name}: {SLOWEST[name]:.2f} s ({len(SLOWEST)} cases)\n")


@pytest.fixture(scope="module")
def earlier(tmp_path_factory) -> Path:
    """A real results file of a 2-rank run (an earlier result that nothing may overwrite)."""
    d = tmp_path_factory.mktemp("earlier")
    out = d / "earlier.h5"
    o = ranklog.run([Part(hpcmm_argv(*SMALL, "--out", str(out)), ranks=2)], d / "logs", d, 600)
    assert o.rc == 0, o.describe()
    return out


def _machine(**fields) -> str:
    import json

    return json.dumps({"name": "test", "device": "cpu", "devices_per_node": 1,
                       "gemm": {"float64": {"tflops": 1.0}}, **fields})


def _results_like(path: Path, **config) -> None:
    """What ``model check`` reads (config, summary, topology), with ``config`` changed."""
    with h5py.File(path, "w") as f:
        f.attrs["ranks"] = 2
        cfg = f.create_group("config").attrs
        for key, value in {"m": 64, "n": 64, "k": 64, "dtype": "float64", "tf32": False, "ranks_per_node": 0,
                           "panel": 32, "prefetch": 1, "grid": "2x1", **config}.items():
            if value is not None:
                cfg[key] = value
        summ = f.create_group("summary").attrs
        summ["seconds"] = 0.01
        f.create_group("topology").create_dataset("local_size", data=np.full(2, 2))


@pytest.fixture
def work(tmp_path, earlier) -> Path:
    """The folder every case starts from."""
    d = tmp_path / "w"
    d.mkdir()
    rng = np.random.default_rng(3)
    np.save(d / "a.npy", rng.random((6, 5)))
    np.save(d / "b.npy", rng.random((5, 4)))
    np.save(d / os.fsdecode(b"a\xfe.npy"), rng.random((6, 5)))
    with h5py.File(d / "ab.h5", "w") as f:
        f["A"] = rng.random((6, 5))
        f["B"] = rng.random((5, 4))
    shutil.copy(earlier, d / "earlier.h5")
    (d / "note.txt").write_text("my notes, not hpcmm's\n")
    (d / "old.status").write_text("state=finished\nexit=0\nreason=done\nranks=2\ncommand=run\n")
    os.mkfifo(d / "fifo")
    os.symlink("/dev/null", d / "device")
    os.link(d / "a.npy", d / "hard.npy")
    os.symlink(d / "a.npy", d / "soft.npy")
    os.symlink(d / "old.status", d / "link.status")
    os.symlink(d / "nowhere", d / "dangling")
    (d / "sub").mkdir()
    (d / "machine.json").write_text(_machine())
    (d / "list.json").write_text("[1, 2]\n")
    (d / "wrong-type.json").write_text(_machine(memory_gib="lots"))
    (d / "zero-rate.json").write_text(_machine(gemm={"float64": {"tflops": 0}}))
    (d / "inf-integer.json").write_text(_machine(devices_per_node=1e400).replace("Infinity", "1e400"))
    _results_like(d / "no-dtype.h5", dtype=None)
    _results_like(d / "inf-m.h5", m=np.inf)
    _results_like(d / "array-panel.h5", panel=np.arange(3))
    with h5py.File(d / "picture.png", "w") as f:  # an HDF5 file under a picture's name
        f["x"] = 1
    _odd_reports(d, earlier)
    return d


def _odd_reports(d: Path, earlier: Path) -> None:
    """Copies of a real results file whose attributes or timeline have an unexpected type or size."""
    changes = {
        "seconds-array": lambda f: f["summary"].attrs.__setitem__("seconds", np.arange(3.0)),
        "algo-array": lambda f: f["summary"].attrs.__setitem__("algo", np.arange(4)),
        "paths-number": lambda f: f["summary"].attrs.__setitem__("paths", 7),
    }

    def sparse(f):
        del f["timeline/events"]
        f["timeline"].create_dataset("events", shape=(2**40, 7), dtype="f8", chunks=(1024, 7))

    def strings(f):
        del f["timeline/events"]
        f["timeline"].create_dataset("events", data=np.array([["x"] * 7], dtype="S1"))

    changes.update({"sparse-timeline": sparse, "string-timeline": strings})
    for name, change in changes.items():
        shutil.copy(earlier, d / f"{name}.h5")
        with h5py.File(d / f"{name}.h5", "r+") as f:
            change(f)


def _snapshot(d: Path) -> dict[str, str]:
    """Every entry below ``d``: a file's SHA-256, a link's target, or what it is."""
    found = {}
    for root, dirs, files in os.walk(d):
        for name in [*dirs, *files]:
            path = Path(root) / name
            key = os.fsencode(path.relative_to(d)).decode("ascii", "backslashreplace")
            info = os.lstat(path)
            if stat.S_ISLNK(info.st_mode):
                found[key] = "link -> " + os.readlink(path)
            elif stat.S_ISREG(info.st_mode):
                found[key] = hashlib.sha256(path.read_bytes()).hexdigest()
            else:
                found[key] = stat.filemode(info.st_mode)[0]
    return found


@dataclasses.dataclass(frozen=True)
class Case:
    id: str
    args: tuple[str, ...]  # {d}: the folder of files
    line: str  # in the job's one hpcmm: line
    status: int = 2
    made: tuple[str, ...] = ()  # entries the job may leave in {d}
    hang: bool = False  # a hang-class case: its time is recorded


def _args(case: Case, d: Path) -> list[str]:
    return [a.replace("{d}", str(d)) for a in case.args]


def _check(o: ranklog.Outcome, case: Case, d: Path, before: dict[str, str]) -> None:
    assert o.rc == case.status, o.describe()
    assert within(o.seconds, refuse_within), \
        f"took {o.seconds:.1f} s, more than {refuse_within():.1f}\n{o.describe()}"
    _, text = o.the_line()
    assert case.line in text, f"{case.line!r} not in {text!r}\n{o.describe()}"
    for r in o.ranks():
        assert not any(x.startswith("Traceback") for x in o.err(r)), o.describe()
    after = _snapshot(d)
    changed = sorted(k for k, v in before.items() if after.get(k) != v)
    assert changed == [], f"changed or removed: {changed}"
    assert sorted(set(after) - set(before)) == sorted(case.made), sorted(set(after) - set(before))


def _run_case(case: Case, tmp_path: Path, d: Path) -> None:
    before = _snapshot(d)
    o = ranklog.run([Part(hpcmm_argv(*_args(case, d)), ranks=2)], tmp_path / "logs", d, hang_within())
    if case.hang:
        SLOWEST[case.id] = o.seconds
    _check(o, case, d, before)


# -- 1. bookkeeping: --status-file never lands on a file of the user's -------------------
RUN = (*SMALL, "--out", "{d}/r.h5")
INPUTS = ("--device", "cpu", "--quiet", "--iters", "1", "--warmup", "0", "--a", "{d}/a.npy", "--b", "{d}/b.npy",
          "--out", "{d}/r.h5")
STATUS = [
    Case("an-input", (*INPUTS, "--status-file", "{d}/a.npy"), "--status-file={d}/a.npy is also --a={d}/a.npy"),
    Case("a-hard-link-to-an-input", (*INPUTS, "--status-file", "{d}/hard.npy"), "is also --a={d}/a.npy"),
    Case("a-symbolic-link-to-an-input", (*INPUTS, "--status-file", "{d}/soft.npy"), "is also --a={d}/a.npy"),
    Case("the-out-file", (*RUN, "--status-file", "{d}/r.h5"), "is also --out={d}/r.h5"),
    Case("the-out-file-through-dotdot", (*RUN, "--status-file", "{d}/sub/../r.h5"), "is also --out={d}/r.h5"),
    Case("an-earlier-results-file", (*RUN, "--status-file", "{d}/earlier.h5"),
         "exists and is not an hpcmm status file"),
    Case("a-note", (*RUN, "--status-file", "{d}/note.txt"), "exists and is not an hpcmm status file"),
    Case("the-file-report-reads", ("report", "{d}/earlier.h5", "--status-file", "{d}/earlier.h5"),
         "is also the argument {d}/earlier.h5"),
    Case("the-machine-model-reads", ("model", "--machine", "{d}/machine.json", "--status-file",
                                     "{d}/machine.json"), "is also --machine={d}/machine.json"),
    Case("a-fifo", (*RUN, "--status-file", "{d}/fifo"), "not a regular file", hang=True),
    Case("a-device", (*RUN, "--status-file", "{d}/device"), "not a regular file", hang=True),
    Case("a-directory", (*RUN, "--status-file", "{d}/sub"), "is a directory"),
    Case("a-dangling-link", (*RUN, "--status-file", "{d}/dangling"), "a symbolic link to {d}/nowhere"),
    Case("a-missing-folder", (*RUN, "--status-file", "{d}/missing/s"), "directory {d}/missing does not exist"),
]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("case", STATUS, ids=[c.id for c in STATUS])
def test_status_file_never_lands_on_a_file_of_the_users(case, tmp_path, work):
    case = dataclasses.replace(case, line=case.line.replace("{d}", str(work)))
    _run_case(case, tmp_path, work)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("target, args, status, reason", [
    ("old.status", RUN, 0, "done"),
    ("link.status", RUN, 0, "done"),  # the link stays, its target is replaced
    ("new.status", ("--m", "0", "--out", "{d}/r.h5"), 2, "bad input: argument --m: --m=0: expected an integer >= 1"),
], ids=["an-earlier-status-file", "a-link-to-a-status-file", "a-new-file-after-bad-input"])
def test_status_file_of_its_own_is_written(target, args, status, reason, tmp_path, work):
    before = _snapshot(work)
    args = [a.replace("{d}", str(work)) for a in (*args, "--status-file", f"{{d}}/{target}")]
    o = ranklog.run([Part(hpcmm_argv(*args), ranks=2)], tmp_path / "logs", work, hang_within())
    assert o.rc == status, o.describe()
    written = work / "old.status" if target == "link.status" else work / target
    fields = dict(line.split("=", 1) for line in written.read_text().splitlines())
    assert fields["state"] == "finished" and fields["exit"] == str(status) and fields["reason"] == reason
    after = _snapshot(work)
    assert after["link.status"] == before["link.status"]
    expected = {"r.h5"} if status == 0 else set()
    expected |= {target} if target == "new.status" else set()
    assert set(after) - set(before) == expected
    assert {k for k, v in before.items() if after[k] != v} <= {"old.status"}


# -- 2. nothing accepted at the start fails after the work --------------------------------
NOT_UTF8 = os.fsdecode(b"\xfe")
LATE = [
    Case("out", (*SMALL, "--out", f"{{d}}/r{NOT_UTF8}.h5"), "(after --out) is not UTF-8 text"),
    Case("an-input", ("--device", "cpu", "--quiet", "--a", f"{{d}}/a{NOT_UTF8}.npy", "--b", "{d}/b.npy",
                      "--out", "{d}/r.h5"), "(after --a) is not UTF-8 text"),
    Case("a-dataset-name", ("--device", "cpu", "--quiet", "--a", f"{{d}}/ab.h5:A{NOT_UTF8}", "--b", "{d}/ab.h5:B",
                            "--out", "{d}/r.h5"), "(after --a) is not UTF-8 text"),
    Case("status-file", (*RUN, "--status-file", f"{{d}}/s{NOT_UTF8}"), "(after --status-file) is not UTF-8 text"),
    Case("report-plot", ("report", "{d}/earlier.h5", "--plot", f"{{d}}/t{NOT_UTF8}.png"),
         "(after --plot) is not UTF-8 text"),
    Case("model-machine", ("model", "--machine", f"{{d}}/m{NOT_UTF8}.json"), "(after --machine) is not UTF-8 text"),
]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("case", LATE, ids=[c.id for c in LATE])
def test_a_name_that_is_not_utf8_is_refused_at_the_start(case, tmp_path, work):
    _run_case(case, tmp_path, work)


# -- 3. the exit status is the work's, whatever happens to stdout and stderr ---------------
@dataclasses.dataclass(frozen=True)
class Stream:
    id: str
    args: tuple[str, ...]
    shell: str  # how the shell starts it: {cmd} is the command
    status: int
    made: tuple[str, ...] = ()


STREAMS = [
    Stream("stdout-reader-left", (*RUN,), "{cmd} | true", 0, ("r.h5",)),
    Stream("stdout-closed", (*RUN,), "{cmd} >&-", 0, ("r.h5",)),
    Stream("stdout-full", (*RUN,), "{cmd} >/dev/full", 0, ("r.h5",)),
    Stream("stdout-and-stderr-closed", (*RUN,), "{cmd} >&- 2>&-", 0, ("r.h5",)),
    Stream("stderr-closed-bad-input", ("--m", "0", "--out", "{d}/r.h5"), "{cmd} 2>&-", 2),
    Stream("stderr-full-bad-input", ("--m", "0", "--out", "{d}/r.h5"), "{cmd} 2>/dev/full", 2),
    Stream("both-closed-bad-input", ("--m", "0", "--out", "{d}/r.h5"), "{cmd} >&- 2>&-", 2),
    Stream("model-into-head", ("model", "scaling", "--nodes", "1,2", "--sizes", "16384"), "{cmd} | head -n 1", 0),
    Stream("model-reader-left", ("model",), "{cmd} | true", 0),
    Stream("report-reader-left", ("report", "{d}/earlier.h5"), "{cmd} | true", 0),
    Stream("info-reader-left", ("info", "--device", "cpu"), "{cmd} | true", 0),
]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("case", STREAMS, ids=[c.id for c in STREAMS])
def test_streams_never_decide_the_exit_status(case, tmp_path, work):
    """One process from a shell (the pipes and descriptors are the shell's): the status is ``PIPESTATUS[0]``."""
    before = _snapshot(work)
    cmd = " ".join(f"'{a}'" for a in [sys.executable, "-m", "hpcmm", *(x.replace("{d}", str(work)) for x in case.args)])
    script = case.shell.replace("{cmd}", cmd) + '; echo "status=${PIPESTATUS[0]}" >&3'
    t0 = time.monotonic()
    proc = subprocess.run(["bash", "-c", f"exec 3>'{tmp_path}/status'; {script}"], check=False, cwd=work,
                          env=ranklog.environment(),
                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          errors="replace", timeout=hang_within())
    seconds = time.monotonic() - t0
    status = (tmp_path / "status").read_text().strip()
    assert status == f"status={case.status}", (status, proc.stderr)
    assert within(seconds, refuse_within), f"took {seconds:.1f} s, more than {refuse_within():.1f}"
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("hpcmm:")]
    assert len(lines) <= 1, proc.stderr
    after = _snapshot(work)
    assert {k for k, v in before.items() if after.get(k) != v} == set()
    assert sorted(set(after) - set(before)) == sorted(case.made)
    if "r.h5" in case.made:
        with h5py.File(work / "r.h5", "r") as f:
            assert bool(f["summary"].attrs["verified"])


# -- 4. report and bench: bad input, never a crash ------------------------------------------
CRASH = [
    Case("report-seconds-an-array", ("report", "{d}/seconds-array.h5"), "cannot read it as an hpcmm file"),
    Case("report-algo-an-array", ("report", "{d}/algo-array.h5"), "cannot read it as an hpcmm file"),
    Case("report-paths-a-number", ("report", "{d}/paths-number.h5"), "cannot read it as an hpcmm file"),
    Case("report-a-huge-sparse-timeline", ("report", "{d}/sparse-timeline.h5", "--plot", "{d}/t.png"),
         "/timeline/events has 1099511627776 events, more than 16777216"),
    Case("report-a-timeline-of-strings", ("report", "{d}/string-timeline.h5", "--plot", "{d}/t.png"),
         "expected (N, 7) numbers"),
    Case("report-a-fifo", ("report", "{d}/fifo"), "not a regular file", hang=True),
    Case("report-a-device", ("report", "{d}/device"), "not a regular file", hang=True),
    Case("report-plot-onto-its-file", ("report", "{d}/earlier.h5", "--plot", "{d}/earlier.h5"),
         "expected a picture file"),
    Case("report-plot-onto-an-hdf5-file", ("report", "{d}/earlier.h5", "--plot", "{d}/picture.png"),
         "an HDF5 file (results?): --plot replaces pictures only"),
    Case("report-plot-into-a-missing-folder", ("report", "{d}/earlier.h5", "--plot", "{d}/missing/t.png"),
         "directory {d}/missing does not exist"),
    Case("bench-a-case-too-big-for-memory", ("bench", "--device", "cpu", "--no-peers", "--cases",
                                             "float64:64;float64:400000", "--out", "{d}/b.h5"),
         "bench case float64:400000: the one-host reference (A, B and C on one host) does not fit"),
]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("case", CRASH, ids=[c.id for c in CRASH])
def test_report_and_bench_refuse_instead_of_crashing(case, tmp_path, work):
    case = dataclasses.replace(case, line=case.line.replace("{d}", str(work)))
    _run_case(case, tmp_path, work)


# -- 5. model: options, machine descriptions, results files ---------------------------------
MODEL = [
    Case("m-as-large-as-an-int64", ("model", "--m", str(2**63 - 1)), "takes more than 2**62 bytes"),
    Case("m-a-word", ("model", "--m", "ten"), "--m='ten': expected an integer >= 1"),
    Case("ranks-as-large-as-an-int64", ("model", "--ranks", str(2**63 - 1)), "ranks the model places"),
    Case("more-steps-than-the-model-simulates", ("model", "--m", "20000000"), "more than 32768"),
    Case("more-rank-steps-than-the-model-simulates", ("model", "--ranks", "100000"), "rank-steps"),
    Case("nodes-a-word", ("model", "scaling", "--nodes", "1,x"), "--nodes='x': expected an integer >= 1"),
    Case("sweep-seconds-nan", ("model", "measure", "--save", "{d}/m.json", "--sweep-seconds", "nan"),
         "--sweep-seconds=nan: expected a positive number"),
    Case("machine-a-list", ("model", "--machine", "{d}/list.json"), "a machine description is a JSON object"),
    Case("machine-a-word-for-a-number", ("model", "--machine", "{d}/wrong-type.json"),
         'memory_gib="lots": expected a finite number'),
    Case("machine-a-rate-of-zero", ("model", "--machine", "{d}/zero-rate.json"), "its curve with tflops > 0"),
    Case("machine-an-infinite-integer", ("model", "--machine", "{d}/inf-integer.json"),
         "devices_per_node=Infinity: expected an integer"),
    Case("machine-a-fifo", ("model", "--machine", "{d}/fifo"), "not a regular file", hang=True),
    Case("check-a-missing-field", ("model", "check", "{d}/no-dtype.h5"), "no attribute 'dtype'"),
    Case("check-inf-for-an-integer", ("model", "check", "{d}/inf-m.h5"), "config m=inf: expected an integer"),
    Case("check-an-array-for-an-integer", ("model", "check", "{d}/array-panel.h5"), "config panel=array"),
    Case("check-a-fifo", ("model", "check", "{d}/fifo"), "model check: {d}/fifo: not a regular file", hang=True),
    Case("check-a-device", ("model", "check", "{d}/device"), "not a regular file", hang=True),
    Case("links-a-fifo", ("model", "links", "--transport", "{d}/fifo", "--save", "{d}/m.json"),
         "--transport={d}/fifo: not a regular file", hang=True),
    Case("save-onto-the-machine", ("model", "links", "--machine", "{d}/machine.json", "--transport",
                                   "{d}/earlier.h5", "--save", "{d}/machine.json"),
         "is the input file --machine={d}/machine.json"),
    Case("save-onto-a-note", ("model", "links", "--transport", "{d}/earlier.h5", "--save", "{d}/note.txt"),
         "exists and is not a machine description"),
]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("case", MODEL, ids=[c.id for c in MODEL])
def test_model_refuses_bad_input(case, tmp_path, work):
    case = dataclasses.replace(case, line=case.line.replace("{d}", str(work)))
    _run_case(case, tmp_path, work)


# -- 6. SIGTERM ends a long prediction ----------------------------------------------------------
@pytest.mark.timeout(600)
def test_sigterm_ends_a_long_prediction(tmp_path):
    """A prediction the model accepts but that takes seconds: SIGTERM to the process ends it with 143."""
    # Some 10 s of CPU on an idle core (32 ranks, 31250 steps), signalled after 1.5 s of it: the margin
    # is for a loaded machine, where this test's own process may wake seconds after its sleep.
    proc = subprocess.Popen([sys.executable, "-m", "hpcmm", "model", "--m", "8000000", "--ranks", "32"],
                            cwd=tmp_path, env=ranklog.environment(), stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        # Once the interpreter has run for a while (CPU time, read from /proc), the model is predicting.
        deadline = time.monotonic() + refuse_within()
        while time.monotonic() < deadline and _cpu_seconds(proc.pid) < 1.5 and proc.poll() is None:
            time.sleep(0.05)
        assert proc.poll() is None, "the prediction ended before it was signalled"
        t0 = time.monotonic()
        os.kill(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=hang_within())
        SLOWEST["sigterm-during-a-prediction"] = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 143, err
    assert "hpcmm: stopped by SIGTERM" in err and "Traceback" not in err, err
    took = SLOWEST["sigterm-during-a-prediction"]
    assert within(took, refuse_within), f"took {took:.1f} s after SIGTERM, more than {refuse_within():.1f}"


def _cpu_seconds(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
