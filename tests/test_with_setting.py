"""``tests/gpu/with_setting.py`` (dynamic_check.sh's A/B runs) sets the constant it names for that run only."""

from __future__ import annotations

import subprocess
import sys

import h5py
import pytest
from launcher import REPO, mpiexec_or_skip, quiet_environment, run_launcher

SCRIPT = REPO / "tests" / "gpu" / "with_setting.py"


def _run(tmp_path, *settings, ranks=1):
    out = tmp_path / f"r{len(list(tmp_path.iterdir()))}.h5"
    cmd = [sys.executable, str(SCRIPT), *settings, "--", "--device", "cpu", "--m", "4096", "--n", "64", "--k", "64",
           "--balance", "dynamic", "--iters", "1", "--warmup", "0", "--quiet", "--out", str(out)]
    if ranks > 1:  # no time limit: the job's own progress (stall) judges a hang on a loaded machine
        return run_launcher([mpiexec_or_skip(), "-n", str(ranks), *cmd], None, env=quiet_environment(), stall=300), out
    return subprocess.run(cmd, capture_output=True, text=True, cwd=REPO), out


def _tiles(out):
    with h5py.File(out, "r") as f:
        return f["timings/tiles"][()]


def _tile_rows(out):
    with h5py.File(out, "r") as f:
        tiles = f["timings/tiles"][()]
    return sorted(int(t["row1"]) - int(t["row0"]) for t in tiles)


def test_a_constant_set_changes_the_run_and_the_default_stays(tmp_path):
    proc, even = _run(tmp_path, "planning.choices.TILE_CUT[False]=even", ranks=2)
    assert proc.returncode == 0, proc.stdout
    proc, decreasing = _run(tmp_path, ranks=2)
    assert proc.returncode == 0, proc.stdout
    assert sum(_tile_rows(even)) == sum(_tile_rows(decreasing)) == 4096  # every row of C once
    assert len(set(_tile_rows(even))) == 1 and len(set(_tile_rows(decreasing))) > 2


def test_an_entry_of_a_dict_constant_is_set_for_that_run(tmp_path):
    proc, fewer = _run(tmp_path, "planning.choices.TILES_PER_RANK[False]=4", ranks=2)
    assert proc.returncode == 0, proc.stdout
    proc, default = _run(tmp_path, ranks=2)
    assert proc.returncode == 0, proc.stdout
    assert len(_tiles(fewer)) == 2 * 4 and len(_tiles(default)) > 2 * 4
    assert sum(_tile_rows(fewer)) == sum(_tile_rows(default)) == 4096


@pytest.mark.parametrize("setting", ["planning.choices.TILES_PER_RANK[7]=4", "execution.dynamic.QUEUED_TILES[0]=2"],
                         ids=["no-such-key", "not-a-dict"])
def test_a_bad_entry_is_named(tmp_path, setting):
    proc, out = _run(tmp_path, setting)
    assert proc.returncode != 0 and "has no entry" in proc.stderr and not out.exists()


def test_an_unknown_constant_is_named(tmp_path):
    proc, out = _run(tmp_path, "planning.choices.NO_SUCH=1")
    assert proc.returncode != 0 and "'NO_SUCH'" in proc.stderr and not out.exists()
