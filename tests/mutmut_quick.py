"""Mutation testing of a few modules with their own tests: the quick mode of docs/mutation.md.

mutmut reads one configuration, ``[tool.mutmut]`` in pyproject.toml, made for the full run (every
module of hpcmm/, the whole CPU suite).  This runs mutmut with two of its settings narrowed for one
call: the modules to mutate and the tests that judge them::

    python tests/mutmut_quick.py --mutate hpcmm/planning/plan.py --mutate hpcmm/geometry/distribution.py \\
        --tests 'tests/test_matmul.py -k "not four_ranks and not another_setting"' run --max-children 1
    python tests/mutmut_quick.py --mutate hpcmm/planning/plan.py --tests tests/test_matmul.py results

Everything after the options is mutmut's own command line (``run``, ``results``, ``show NAME``, ...).
Run it from the repository root.
"""

from __future__ import annotations

import argparse
import shlex
import sys


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mutate", action="append", required=True, metavar="PATH",
                        help="a module (or glob, e.g. 'hpcmm/execution/transport/*') to mutate; repeat for more")
    parser.add_argument("--tests", required=True, metavar="PYTEST_ARGS",
                        help="pytest's arguments that select the tests, as one shell-quoted string")
    options, mutmut_args = parser.parse_known_args(argv)

    from mutmut import configuration  # noqa: PLC0415 - after the options, so that --help needs no mutmut

    settings = configuration.config()  # loads [tool.mutmut] once; mutmut reads this same object later
    settings.only_mutate = list(options.mutate)
    settings.pytest_add_cli_args_test_selection = shlex.split(options.tests)

    from mutmut.__main__ import cli  # noqa: PLC0415

    cli(mutmut_args or ["run", "--max-children", "1"], prog_name="mutmut")


if __name__ == "__main__":
    main(sys.argv[1:])
