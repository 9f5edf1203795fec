"""Every command that writes a file can run twice in a row, and twice at once in one folder.

Without ``--out`` each names its file anew (``hpcmm-results-``, ``hpcmm-bench-``,
``hpcmm-transport-YYYYmmdd-HHMMSS.h5``); should another run publish the same name first, the
file takes the next free one (``-2``, ``-3``, ...), and the summary names the file it took.
A name the user gave is never changed: it is refused without ``--overwrite``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

import h5py
import pytest
from launcher import mpiexec_or_skip, rank_environment, run_launcher
from mpi4py import MPI

from hpcmm.bench import command as bench
from hpcmm.io import h5io
from hpcmm.config import RunConfig, new_output_name, next_output_name
from hpcmm.errors import InputError


def _environment() -> dict[str, str]:
    return rank_environment("cpu")


def test_each_kind_has_its_own_sequence(tmp_path):
    import datetime

    now = datetime.datetime(2026, 11, 29, 23, 5, 7)
    first = new_output_name(str(tmp_path), now, kind="bench")
    assert first == "hpcmm-bench-20261129-230507.h5"
    (tmp_path / first).touch()
    assert new_output_name(str(tmp_path), now, kind="bench") == "hpcmm-bench-20261129-230507-2.h5"
    assert new_output_name(str(tmp_path), now, kind="transport") == "hpcmm-transport-20261129-230507.h5"
    assert next_output_name("d/hpcmm-results-20261129-230507-9.h5") == "d/hpcmm-results-20261129-230507-10.h5"
    with pytest.raises(ValueError):
        new_output_name(str(tmp_path), now, kind="other")


def _temporary(tmp_path, text: str) -> str:
    tmp = h5io.temporary_path(str(tmp_path / "x.h5"))
    with open(tmp, "w") as fh:
        fh.write(text)
    return tmp


def test_a_name_hpcmm_chose_gives_way_at_publish_time(tmp_path, monkeypatch):
    monkeypatch.setattr(h5io, "RENAMEABLE", set())
    taken = tmp_path / "hpcmm-results-20261129-230507.h5"
    (tmp_path / "hpcmm-results-20261129-230507-2.h5").write_text("another run's, too")
    taken.write_text("another run's")
    h5io.RENAMEABLE.add(str(taken))
    got = h5io.publish(_temporary(tmp_path, "mine"), str(taken), overwrite=False)
    assert got == str(tmp_path / "hpcmm-results-20261129-230507-3.h5")
    assert open(got).read() == "mine" and taken.read_text() == "another run's"
    assert h5io.PUBLISHED == [got]
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".partial")]


def test_a_name_the_user_gave_is_still_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(h5io, "RENAMEABLE", set())
    out = tmp_path / "mine.h5"
    out.write_text("the user's")
    with pytest.raises(InputError, match=r"file appeared during the run \(pass --overwrite\)"):
        h5io.publish(_temporary(tmp_path, "new"), str(out), overwrite=False)
    assert out.read_text() == "the user's"
    assert h5io.publish(_temporary(tmp_path, "new"), str(out), overwrite=True) == str(out)
    assert out.read_text() == "new"


def test_bench_twice_in_a_row_writes_two_files(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(h5io, "RENAMEABLE", set())
    ns = argparse.Namespace(what="gemm", cases="float64:24", no_peers=True, sizes=None)
    for _ in range(2):
        assert bench.bench_main(ns, RunConfig(device="cpu", warmup=0, iters=1), MPI.COMM_SELF) == 0
    files = sorted(p.name for p in tmp_path.glob("hpcmm-bench-*.h5"))
    assert len(files) == 2, files
    out = capsys.readouterr().out
    assert all(f"figures: {name}" in out for name in files)


def test_two_runs_started_together_both_keep_their_results(tmp_path):
    """Both pick the name of the same second; the one that publishes second takes the next."""
    cmd = [sys.executable, "-m", "hpcmm", "--m", "64", "--warmup", "0", "--iters", "2"]
    procs = [subprocess.Popen(cmd, cwd=tmp_path, env=_environment(), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL) for _ in range(2)]
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    files = sorted(tmp_path.glob("hpcmm-results-*.h5"))
    assert len(files) == 2, outputs
    for path in files:
        with h5py.File(path, "r") as f:
            assert bool(f["summary"].attrs["verified"])
    # each summary names the file its run took
    named = [[f.name for f in files if f.name in text] for text in outputs]
    assert sorted(sum(named, [])) == [f.name for f in files] and all(len(n) == 1 for n in named), named


def test_bench_transport_twice_in_a_row(tmp_path):
    mpiexec = mpiexec_or_skip()
    for _ in range(2):
        proc = run_launcher([mpiexec, "-n", "2", sys.executable, "-m", "hpcmm", "bench", "transport", "--sizes", "1"],
                            180, cwd=tmp_path, env=_environment())
        assert proc.returncode == 0, proc.stdout
    assert len(list(tmp_path.glob("hpcmm-transport-*.h5"))) == 2


def test_a_name_hpcmm_chose_that_another_run_published_first_is_no_error(tmp_path, monkeypatch):
    """The other run published before this one checked its path (it finished while this one started)."""
    monkeypatch.setattr(h5io, "RENAMEABLE", set())
    taken = tmp_path / "hpcmm-results-20261129-230507.h5"
    taken.write_text("another run's")
    with pytest.raises(InputError, match="file exists"):
        h5io.check_output_path(str(taken), overwrite=False)
    h5io.RENAMEABLE.add(str(taken))
    h5io.check_output_path(str(taken), overwrite=False)
