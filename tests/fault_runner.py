"""Run ``python -m hpcmm`` with a fault put in from outside, for the reliability tests.

Usage (under ``mpiexec``; everything after ``--`` goes to hpcmm)::

    mpiexec -n 2 python tests/fault_runner.py --fault 1:multiply:raise -- --m 60 --out r.h5

``--fault RANK:WHERE:HOW`` (repeatable) wraps one hpcmm function on rank RANK
so that it fails in the way HOW says, then runs hpcmm exactly as
``python -m hpcmm`` does (:func:`hpcmm.cli.startup.launch`).  The product code
knows nothing of it.

WHERE: ``start`` (once MPI has started, before the command line is read),
``command`` (the ``run`` subcommand, as it starts),
``backend`` (``make_backend``), ``multiply`` (the first product), ``verify``
(the check), ``write`` (rank 0 writing the results file), ``write-c`` (this
rank writing its block of ``/result/C``), ``publish`` (rank 0 publishing the
file), ``reserve`` (the disk reservation of the results file).  Only ``write``
and ``publish`` strike on rank 0 alone; the rest strike on RANK, whichever it is.

HOW: ``raise`` (``RuntimeError``), ``input`` (hpcmm's ``InputError``, raised on
this rank alone), ``enospc`` (``OSError`` "No space left on
device"), ``import`` (``ImportError``), ``exit`` (``SystemExit(3)``),
``interrupt`` (``KeyboardInterrupt``), ``hang`` (sleep until a signal ends
the process; with ``HOLD_MARK`` set, create that file first), ``hang-after`` (``write`` and ``publish`` only: do it, create ``HOLD_MARK``
where set, then hang; after ``write`` the temporary file is complete and unpublished),
``corrupt`` (``verify`` only: add 100 to this rank's first element of C, then
check).
"""

from __future__ import annotations

import errno
import importlib
import os
import sys
import time

# Only the standard library before launch(): it must block signals before any thread starts.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

WHERE = ("start", "command", "backend", "multiply", "verify", "write", "write-c", "publish", "reserve")
HOW = ("raise", "input", "enospc", "import", "exit", "interrupt", "hang", "corrupt", "hang-after")


def _fault(text: str) -> tuple[int, str, str]:
    rank, where, how = text.split(":")
    if where not in WHERE or how not in HOW:
        raise SystemExit(f"fault_runner: bad fault {text!r}")
    return int(rank), where, how


def _parse(argv: list[str]) -> tuple[list[tuple[int, str, str]], list[str]]:
    faults = []
    while argv and argv[0] == "--fault":
        faults.append(_fault(argv[1]))
        argv = argv[2:]
    if argv[:1] == ["--"]:
        argv = argv[1:]
    return faults, argv


def _mark_held() -> None:
    """Tell a waiting test that this rank is held here: create ``HOLD_MARK`` where it is set."""
    if os.environ.get("HOLD_MARK"):
        open(os.environ["HOLD_MARK"], "w").close()


def _strike(where: str, how: str):
    """Fail in the way ``how`` says (or hang)."""
    if how == "raise":
        raise RuntimeError(f"fault at {where}")
    if how == "input":
        from hpcmm.errors import InputError

        raise InputError(f"fault at {where} (an error of this rank alone)")
    if how == "enospc":
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    if how == "import":
        raise ImportError(f"fault at {where}: no module named 'h5py'")
    if how == "exit":
        raise SystemExit(3)
    if how == "interrupt":
        raise KeyboardInterrupt
    if how == "hang":
        _mark_held()
        while True:
            time.sleep(1.0)
    raise AssertionError(how)


def _wrap(module, name: str, where: str, how: str, once: bool = True) -> None:
    original = getattr(module, name)
    fired = []

    def wrapper(*args, **kwargs):
        if not (once and fired):
            fired.append(True)
            _strike(where, how)
        return original(*args, **kwargs)

    setattr(module, name, wrapper)


def _fail_opening(h5io, mode: str, where: str, how: str) -> None:
    """h5py.File(..., mode) fails as ``how`` says (seen from h5io only)."""
    import types

    real = h5io.h5py

    def opening(name, mode_=None, *args, **kwargs):
        if mode_ == mode:
            _strike(where, how)
        return real.File(name, mode_, *args, **kwargs)

    h5io.h5py = types.SimpleNamespace(**{k: getattr(real, k) for k in dir(real) if not k.startswith("__")})
    h5io.h5py.File = opening


def _hang_after(module, name: str) -> None:
    original = getattr(module, name)

    def wrapper(*args, **kwargs):
        original(*args, **kwargs)
        _mark_held()  # the step is done
        while True:
            time.sleep(1.0)

    setattr(module, name, wrapper)


def _corrupt_then_check(module, name: str) -> None:
    original = getattr(module, name)

    def wrapper(topo, layout, backend, product, *args, **kwargs):
        if product.c.size:
            product.c[0, 0] += 100
        return original(topo, layout, backend, product, *args, **kwargs)

    setattr(module, name, wrapper)


def install(faults: list[tuple[int, str, str]]) -> None:
    """Put this rank's faults in place (MPI has started)."""
    from mpi4py import MPI

    rank = MPI.COMM_WORLD.Get_rank()
    for who, where, how in faults:
        if who != rank:
            continue
        if where == "start":
            _strike(where, how)
        # Modules by name: the package attribute hpcmm.run is the function run(), not the module.
        cli, engine, h5io, placement, run = (importlib.import_module(f"hpcmm.{name}") for name in (
            "cli.main", "execution.engine", "io.h5io", "execution.placement", "cli.run"))

        if how == "hang-after" and where in ("write", "publish"):
            _hang_after(h5io, {"write": "write_results", "publish": "publish"}[where])
        elif where == "command":
            _wrap(cli, "_run_main", where, how)
        elif where == "backend":
            _wrap(placement, "make_backend", where, how)
        elif where == "multiply":
            _wrap(engine.Engine, "multiply", where, how)
        elif where == "verify" and how == "corrupt":
            _corrupt_then_check(run, "freivalds")
            _corrupt_then_check(run, "full_check")
        elif where == "verify":
            _wrap(run, "freivalds", where, how)
        elif where == "write":
            _wrap(h5io, "_write_results", where, how)
        elif where == "write-c":
            _fail_opening(h5io, "r+", where, how)  # inside write_c_block, as a full disk would
        elif where == "publish":
            _wrap(h5io, "publish", where, how)
        elif where == "reserve":
            _wrap(h5io.os, "posix_fallocate", where, how)


if __name__ == "__main__":
    FAULTS, ARGS = _parse(sys.argv[1:])
    from hpcmm.cli.startup import launch

    sys.exit(launch(ARGS, prepare=lambda: install(FAULTS)))
