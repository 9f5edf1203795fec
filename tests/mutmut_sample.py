"""A full mutation run's time and score, estimated from a random sample of its mutants (docs/mutation.md).

A full run judges some 26,000 mutants, the slowest last; a sitting ends long before.  A uniform random
sample of the mutants not judged yet, run by mutmut itself, estimates what the rest would take and
how many of them the tests would kill, with a 95 % interval; the mutants judged already are counted
as they are::

    python tests/mutmut_sample.py draw --size 300 --seed 1 > sample.txt   # after `mutmut run` began
    mutmut run --max-children 1 $(cat sample.txt)
    python tests/mutmut_sample.py report sample.txt

The sample is drawn from the mutants without a verdict at the time of the draw; ``report`` reads the
verdicts and durations mutmut recorded (``mutants/**/*.meta``) for the sample and for the rest.  Its
seconds are mutmut's own per-mutant test time (one worker), without the forks between mutants.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from pathlib import Path

from mutmut.stats import status_by_exit_code

#: mutmut's verdicts (its own names for its exit codes) as this estimate counts them: a timeout is a
#: kill; a test process that died of a signal ("segfault") is no verdict on the mutant, left out of
#: the score, whose interval then stands for the others.
KILLED = {"killed", "timeout"}
CRASHED = {"segfault"}


def verdict(exit_code: int | None) -> str:
    """mutmut's name for a mutant's exit code (``not checked`` for None)."""
    return status_by_exit_code[exit_code]


def read_results(mutants_dir: Path) -> dict[str, tuple[int | None, float]]:
    """Every mutant's exit code (None: not judged yet) and recorded test seconds (0 where none)."""
    results = {}
    for meta in sorted(mutants_dir.rglob("*.py.meta")):
        data = json.loads(meta.read_text())
        seconds = data.get("durations_by_key", {})
        for mutant, exit_code in data.get("exit_code_by_key", {}).items():
            results[mutant] = (exit_code, float(seconds.get(mutant) or 0.0))
    return results


def draw(results: dict, size: int, seed: int) -> list[str]:
    """``size`` mutants drawn uniformly, without replacement, from those not judged yet; sorted."""
    pending = sorted(name for name, (exit_code, _) in results.items() if exit_code is None)
    return sorted(random.Random(seed).sample(pending, min(size, len(pending))))


def _interval(total: int, values: list[float]) -> tuple[float, float]:
    """The sum over a population of ``total`` estimated from the sample ``values``: (estimate, 95 % half
    width), with the finite-population correction (a sample of all of it has no error)."""
    n = len(values)
    if n == 0:
        return 0.0, math.inf if total else 0.0
    mean = sum(values) / n
    var = sum((v - mean) ** 2 for v in values) / (n - 1) if n > 1 else 0.0
    correction = (total - n) / total if total > 1 else 0.0
    return total * mean, 1.96 * total * math.sqrt(var / n * correction)


def estimate(results: dict, sample: list[str]) -> dict:
    """The census of the mutants judged outside the sample plus the sample's estimate of the others."""
    sample_set = set(sample)
    missing = sorted(sample_set - set(results))
    if missing:
        raise ValueError(f"{missing[0]} (and {len(missing) - 1} more): not a mutant of this run")
    unrun = [name for name in sample if results[name][0] is None]
    judged_sample = [name for name in sample if results[name][0] is not None]
    rest = [(code, s) for name, (code, s) in results.items() if name not in sample_set]
    census = [(code, s) for code, s in rest if code is not None]
    pending = len(sample) + sum(code is None for code, _ in rest)  # the stratum the sample stands for
    codes = [verdict(results[name][0]) for name in judged_sample]
    census_codes = [verdict(code) for code, _ in census]
    seconds = [results[name][1] for name in judged_sample]
    graded = [c for c in codes if c not in CRASHED | {"no tests"}]  # mutants some test reaches and judged
    census_graded = [c for c in census_codes if c not in CRASHED | {"no tests"}]
    # Pending mutants some test reaches, estimated, and how many of them the tests kill.
    reached, reached_hw = _interval(pending, [float(c not in CRASHED | {"no tests"}) for c in codes])
    killed, killed_hw = _interval(pending, [float(c in KILLED) for c in codes])
    time_s, time_hw = _interval(pending, seconds)
    known_killed = sum(c in KILLED for c in census_graded)
    score = (known_killed + killed) / max(len(census_graded) + reached, 1)
    # The score's interval from the killed share among the sample's reached mutants (a ratio estimate).
    p = sum(c in KILLED for c in graded) / len(graded) if graded else 0.0
    share_hw = 1.96 * math.sqrt(p * (1 - p) / len(graded)) if graded else 1.0
    score_hw = share_hw * reached / max(len(census_graded) + reached, 1)
    return {
        "mutants": len(results), "judged_before": len(census), "pending": pending,
        "sample": len(sample), "sample_run": len(judged_sample), "sample_unrun": len(unrun),
        "sample_killed": sum(c in KILLED for c in codes), "sample_survived": codes.count("survived"),
        "sample_no_tests": codes.count("no tests"), "sample_crashed": sum(c in CRASHED for c in codes),
        "sample_seconds": sum(seconds),
        "census_killed": known_killed, "census_survived": census_codes.count("survived"),
        "census_no_tests": census_codes.count("no tests"), "census_seconds": sum(s for _, s in census),
        "pending_seconds": time_s, "pending_seconds_hw": time_hw,
        "pending_killed": killed, "pending_killed_hw": killed_hw, "pending_reached": reached,
        "pending_reached_hw": reached_hw, "score": score, "score_hw": score_hw,
    }


def report_text(found: dict) -> str:
    """``estimate``'s figures as the lines the docs quote."""
    f = found
    hours = (f["census_seconds"] + f["pending_seconds"]) / 3600
    return "\n".join([
        f"mutants {f['mutants']}: judged before the sample {f['judged_before']} "
        f"(killed {f['census_killed']}, survived {f['census_survived']}, no tests {f['census_no_tests']}; "
        f"{f['census_seconds'] / 3600:.2f} h of tests), pending {f['pending']}",
        f"sample {f['sample']} of the pending ({f['sample_run']} judged, {f['sample_unrun']} not yet): "
        f"killed {f['sample_killed']}, survived {f['sample_survived']}, no tests {f['sample_no_tests']}, "
        f"crashed {f['sample_crashed']}, "
        f"{f['sample_seconds'] / 60:.1f} min of tests",
        f"pending, estimated: {f['pending_seconds'] / 3600:.1f} ± {f['pending_seconds_hw'] / 3600:.1f} h of tests "
        f"(one worker), {f['pending_killed']:.0f} ± {f['pending_killed_hw']:.0f} killed of "
        f"{f['pending_reached']:.0f} ± {f['pending_reached_hw']:.0f} that tests reach and judge",
        f"full run, estimated: {hours:.1f} ± {f['pending_seconds_hw'] / 3600:.1f} h of tests at one worker; "
        f"killed {100 * f['score']:.1f} ± {100 * f['score_hw']:.1f} % of the mutants tests reach "
        f"(equivalent ones not taken out)",
    ])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mutants", type=Path, default=Path("mutants"), help="mutmut's working copy (default: mutants)")
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("draw", help="print a random sample of the mutants not judged yet, one name a line")
    d.add_argument("--size", type=int, default=300, help="mutants to draw (default 300)")
    d.add_argument("--seed", type=int, default=1, help="the draw's seed (default 1)")
    r = sub.add_parser("report", help="estimate the full run from a sample mutmut has run")
    r.add_argument("sample", type=Path, help="the file `draw` wrote")
    r.add_argument("--json", action="store_true", help="print the figures as JSON")
    options = parser.parse_args(argv)
    if not any(options.mutants.rglob("*.py.meta")):
        parser.exit(2, f"{options.mutants}: no mutmut results; `mutmut run` makes them\n")
    results = read_results(options.mutants)
    if options.command == "draw":
        if options.size < 1:
            parser.exit(2, f"--size={options.size}: expected at least 1\n")
        print("\n".join(draw(results, options.size, options.seed)))
        return 0
    sample = [line.strip() for line in options.sample.read_text().splitlines() if line.strip()]
    try:
        found = estimate(results, sample)
    except ValueError as exc:
        parser.exit(2, f"{options.sample}: {exc}\n")
    print(json.dumps(found, indent=2) if options.json else report_text(found))
    return 0


if __name__ == "__main__":
    sys.exit(main())
