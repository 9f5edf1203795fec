"""``python -m hpcmm`` with module constants of hpcmm set for one run: the A/B runs of dynamic_check.sh.

Two settings compared in one call (``--balance dynamic``'s queue depth, its tile cut) need them
set per run without editing the tree.  Each ``MODULE.NAME=VALUE`` before ``--`` sets one constant
of ``hpcmm.MODULE`` (an int where VALUE is digits, else the string); the rest is hpcmm's command line::

    mpiexec -n 2 python tests/gpu/with_setting.py execution.dynamic.QUEUED_TILES=2 \\
        planning.choices.TILE_CUT=even -- --m 16384 --balance dynamic
"""

import importlib
import runpy
import sys

if __name__ == "__main__":
    if "--" not in sys.argv:
        sys.exit("with_setting.py: MODULE.NAME=VALUE ... -- HPCMM_ARGUMENTS")
    split = sys.argv.index("--")
    for setting in sys.argv[1:split]:
        target, _, text = setting.partition("=")
        module_name, _, name = target.rpartition(".")
        module = importlib.import_module(f"hpcmm.{module_name}")
        if not _ or not hasattr(module, name):
            sys.exit(f"with_setting.py: {setting!r}: no constant {name!r} in hpcmm.{module_name}")
        setattr(module, name, int(text) if text.isdigit() else text)
    sys.argv = ["hpcmm", *sys.argv[split + 1:]]
    runpy.run_module("hpcmm", run_name="__main__", alter_sys=True)
