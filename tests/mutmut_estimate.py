"""How long a full mutation run will take, read from mutmut's first pass (docs/mutation.md).

mutmut's first pass records which tests reach each function and how long each test took
(``mutants/mutmut-stats.json``); each mutant then runs the tests that reach its function, and a
surviving mutant runs all of them.  This sums those times per module, the *worst case*: a killed
mutant stops at its first failing test, so the real run is shorter.  It also names the tests that
reach no function (only their child processes run hpcmm): the first pass pays for them, no
mutant's run selects them.  Where mutants were already judged, it sets their count beside the
worst case::

    python tests/mutmut_estimate.py            # from the repository root, after `mutmut run` began

``--write-launch-only FILE`` writes those tests, the ones that reach no function, as the list that
``--deselect-listed`` leaves out of mutmut's passes (pyproject.toml): a test function's id where
none of its parameters reaches hpcmm in-process, else the node ids one by one.  Write it from a
first pass that ran without the list (its tests are not in a pass that left them out).
"""

from __future__ import annotations

import argparse
import collections
import json
from pathlib import Path

from mutmut.utils.format_utils import mangled_name_from_mutant_name


def function_key(mutant: str) -> str:
    """The function a mutant mutates, as the first pass names it: mutmut's own lookup of a mutant's tests."""
    return mangled_name_from_mutant_name(mutant.replace("__init__.", ""))


def estimate(mutants_dir: Path) -> dict:
    """Per module: mutants, mutants without tests, judged, worst-case seconds; and the unused tests."""
    stats = json.loads((mutants_dir / "mutmut-stats.json").read_text())
    tests_of = {name: set(tests) for name, tests in stats["tests_by_mangled_function_name"].items()}
    seconds = stats["duration_by_test"]
    modules = {}
    for meta in sorted(mutants_dir.rglob("*.py.meta")):
        results = json.loads(meta.read_text()).get("exit_code_by_key", {})
        row = modules.setdefault(str(meta.relative_to(mutants_dir))[:-len(".meta")],
                                 {"mutants": 0, "no_tests": 0, "judged": 0, "worst_s": 0.0})
        for mutant, exit_code in results.items():
            tests = tests_of.get(function_key(mutant), ())
            row["mutants"] += 1
            row["no_tests"] += not tests
            row["judged"] += exit_code is not None
            row["worst_s"] += sum(seconds.get(test, 0.0) for test in tests)
    used = set().union(*tests_of.values()) if tests_of else set()
    unused = {test: s for test, s in seconds.items() if test not in used}
    return {"modules": modules, "unused_tests": unused, "first_pass_s": sum(seconds.values())}


def launch_only_lines(seconds: dict[str, float], unused: dict[str, float]) -> list[str]:
    """The ``--deselect-listed`` lines for the ``unused`` tests: a whole test function where all the node ids
    of it that the first pass ran are unused, else those node ids; sorted."""
    by_function = collections.defaultdict(list)
    for test in seconds:
        by_function[test.split("[", 1)[0]].append(test)
    lines = []
    for function, tests in by_function.items():
        left = [t for t in tests if t in unused]
        lines += [function] if len(left) == len(tests) else left
    return sorted(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mutants", type=Path, default=Path("mutants"), help="mutmut's working copy (default: mutants)")
    parser.add_argument("--top", type=int, default=15, help="modules and unused tests to list (default 15)")
    parser.add_argument("--write-launch-only", type=Path, metavar="FILE",
                        help="write the tests that reach no function as a --deselect-listed file")
    options = parser.parse_args(argv)
    if not (options.mutants / "mutmut-stats.json").is_file():
        parser.exit(2, f"{options.mutants / 'mutmut-stats.json'}: not there; `mutmut run` writes it after its first pass\n")
    found = estimate(options.mutants)
    modules = found["modules"]
    total = collections.Counter()
    for row in modules.values():
        total.update(row)
    print(f"first pass: the selected tests' own time {found['first_pass_s'] / 60:.1f} min")
    print(f"{'module':48} {'mutants':>8} {'no tests':>8} {'judged':>8} {'worst case':>11}")
    for path, row in sorted(modules.items(), key=lambda item: -item[1]["worst_s"])[:options.top]:
        print(f"{path:48} {row['mutants']:8d} {row['no_tests']:8d} {row['judged']:8d} {row['worst_s'] / 3600:9.2f} h")
    print(f"{'all ' + str(len(modules)) + ' modules':48} {total['mutants']:8d} {total['no_tests']:8d} "
          f"{total['judged']:8d} {total['worst_s'] / 3600:9.2f} h")
    unused = sorted(found["unused_tests"].items(), key=lambda item: -item[1])
    print(f"tests no mutant's run selects: {len(unused)}, {sum(s for _, s in unused) / 60:.1f} min of the first pass")
    for test, s in unused[:options.top]:
        print(f"  {s:8.1f} s  {test}")
    if options.write_launch_only:
        stats = json.loads((options.mutants / "mutmut-stats.json").read_text())
        lines = launch_only_lines(stats["duration_by_test"], found["unused_tests"])
        options.write_launch_only.write_text(
            f"# Tests that reach hpcmm only through the processes they start: no mutant's run selects them, so\n"
            f"# mutmut's passes leave them out (--deselect-listed in pyproject.toml; docs/mutation.md).\n"
            f"# Written by `python tests/mutmut_estimate.py --write-launch-only {options.write_launch_only}`.\n"
            + "".join(f"{line}\n" for line in lines))
        print(f"{options.write_launch_only}: {len(lines)} lines for {len(unused)} tests")


if __name__ == "__main__":
    main()
