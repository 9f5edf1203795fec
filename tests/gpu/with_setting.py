"""``python -m hpcmm`` with module constants of hpcmm set for one run: the A/B runs of dynamic_check.sh.

Two settings compared in one call (``--balance dynamic``'s queue depth, its tile cut, its tiles per
rank) need them set per run without editing the tree.  Each ``MODULE.NAME=VALUE`` before ``--`` sets
one constant of ``hpcmm.MODULE``, ``MODULE.NAME[KEY]=VALUE`` one entry of a dict constant (KEY a
Python literal); VALUE is an int where it is digits, else the string.  The rest is hpcmm's command
line::

    mpiexec -n 2 python tests/gpu/with_setting.py execution.dynamic.QUEUED_TILES=2 \\
        planning.choices.TILE_CUT=even "planning.choices.TILES_PER_RANK[False]=8" -- --m 16384 --balance dynamic
"""

import ast
import importlib
import re
import runpy
import sys

if __name__ == "__main__":
    if "--" not in sys.argv:
        sys.exit("with_setting.py: MODULE.NAME=VALUE ... -- HPCMM_ARGUMENTS")
    split = sys.argv.index("--")
    for setting in sys.argv[1:split]:
        target, _, text = setting.partition("=")
        value = int(text) if text.isdigit() else text
        entry = re.fullmatch(r"(.*)\[(.*)\]", target)
        module_name, _, name = (entry.group(1) if entry else target).rpartition(".")
        module = importlib.import_module(f"hpcmm.{module_name}")
        if not _ or not hasattr(module, name):
            sys.exit(f"with_setting.py: {setting!r}: no constant {name!r} in hpcmm.{module_name}")
        if entry:
            table = getattr(module, name)
            try:
                key = ast.literal_eval(entry.group(2))
            except (ValueError, SyntaxError):
                key = entry.group(2)
            if not isinstance(table, dict) or key not in table:
                sys.exit(f"with_setting.py: {setting!r}: hpcmm.{module_name}.{name} has no entry {key!r}")
            table[key] = value
        else:
            setattr(module, name, value)
    sys.argv = ["hpcmm", *sys.argv[split + 1:]]
    runpy.run_module("hpcmm", run_name="__main__", alter_sys=True)
