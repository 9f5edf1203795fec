"""tests/mutmut_sample.py: a full mutation run's time and score, estimated from a random sample."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from launcher import REPO

# The script reads mutmut's own names for its verdicts; mutmut comes with the test extra.
pytest.importorskip("mutmut", reason="mutmut is not installed (pip install -e '.[test]')")
from mutmut_sample import draw, estimate, read_results  # noqa: E402

SCRIPT = REPO / "tests" / "mutmut_sample.py"


def _mutants(tmp_path, codes: dict, seconds: dict):
    root = tmp_path / "mutants"
    (root / "hpcmm").mkdir(parents=True)
    (root / "hpcmm" / "a.py.meta").write_text(json.dumps({"exit_code_by_key": codes, "durations_by_key": seconds}))
    return root


def _names(n, start=0):
    return [f"hpcmm.a.x_f__mutmut_{i}" for i in range(start, start + n)]


def test_the_draw_takes_only_mutants_without_a_verdict_and_repeats_with_its_seed(tmp_path):
    codes = {**dict.fromkeys(_names(10), 1), **dict.fromkeys(_names(40, 10), None)}
    results = read_results(_mutants(tmp_path, codes, {}))
    first = draw(results, 15, seed=3)
    assert len(first) == len(set(first)) == 15 and set(first) <= set(_names(40, 10))
    assert draw(results, 15, seed=3) == first and draw(results, 15, seed=4) != first
    assert sorted(draw(results, 100, seed=1)) == sorted(_names(40, 10))  # no more than there are


def test_a_sample_of_every_pending_mutant_is_the_census(tmp_path):
    """The whole stratum sampled: the estimate is the count itself, with no interval."""
    judged = {**dict.fromkeys(_names(6), 1), **dict.fromkeys(_names(2, 6), 0), **dict.fromkeys(_names(2, 8), 33)}
    sample = {**dict.fromkeys(_names(3, 10), 1), **dict.fromkeys(_names(1, 13), 0)}
    seconds = {name: 2.0 for name in [*judged, *sample]}
    found = estimate(read_results(_mutants(tmp_path, {**judged, **sample}, seconds)), list(sample))
    assert found["pending"] == 4 and found["judged_before"] == 10
    assert found["pending_killed"] == 3 and found["pending_killed_hw"] == 0
    assert found["pending_seconds"] == 8.0 and found["pending_seconds_hw"] == 0
    assert found["census_seconds"] == 20.0
    assert found["score"] == pytest.approx((6 + 3) / (8 + 4)) and found["census_no_tests"] == 2


def test_a_part_stands_for_the_pending_stratum(tmp_path):
    """Two of four pending mutants run, one killed in 1 s, one survived in 3 s: the other two by them."""
    codes = {**dict.fromkeys(_names(4), 1), _names(1, 4)[0]: 1, _names(1, 5)[0]: 0,
             **dict.fromkeys(_names(2, 6), None)}
    seconds = {_names(1, 4)[0]: 1.0, _names(1, 5)[0]: 3.0}
    found = estimate(read_results(_mutants(tmp_path, codes, seconds)), _names(2, 4))
    assert found["pending"] == 4 and found["sample_run"] == 2
    assert found["pending_seconds"] == pytest.approx(8.0) and found["pending_killed"] == pytest.approx(2.0)
    assert found["pending_seconds_hw"] > 0 and found["score"] == pytest.approx((4 + 2) / 8)


def test_the_command_draws_reports_and_refuses(tmp_path):
    codes = {**dict.fromkeys(_names(5), 1), **dict.fromkeys(_names(5, 5), None)}
    root = _mutants(tmp_path, codes, {})
    run = [sys.executable, str(SCRIPT), "--mutants", str(root)]
    drawn = subprocess.run([*run, "draw", "--size", "3"], capture_output=True, text=True, check=True).stdout
    assert len(drawn.split()) == 3
    sample = tmp_path / "sample.txt"
    sample.write_text(drawn)
    out = subprocess.run([*run, "report", str(sample)], capture_output=True, text=True, check=True).stdout
    assert "sample 3 of the pending (0 judged, 3 not yet)" in out
    sample.write_text("hpcmm.b.x_g__mutmut_1\n")
    bad = subprocess.run([*run, "report", str(sample)], capture_output=True, text=True)
    assert bad.returncode == 2 and "hpcmm.b.x_g__mutmut_1 (and 0 more): not a mutant of this run" in bad.stderr
    none = subprocess.run([sys.executable, str(SCRIPT), "--mutants", str(tmp_path / "x"), "draw"],
                          capture_output=True, text=True)
    assert none.returncode == 2 and "no mutmut results" in none.stderr


def test_a_crashed_test_process_is_no_verdict(tmp_path):
    """mutmut's "segfault" (the test process died of a signal): neither killed nor survived."""
    codes = {**dict.fromkeys(_names(4), 1), _names(1, 4)[0]: -11, _names(1, 5)[0]: 0}
    found = estimate(read_results(_mutants(tmp_path, codes, {})), _names(2, 4))
    assert found["sample_crashed"] == 1 and found["sample_killed"] == 0 and found["sample_survived"] == 1
    assert found["pending_reached"] == pytest.approx(1.0) and found["score"] == pytest.approx(4 / 5)
