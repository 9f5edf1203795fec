"""Command line: ``python -m hpcmm [run|info|bench|report]``.

Examples::

    mpiexec -n 4 python -m hpcmm --m 8192 --n 8192 --k 8192 --out run.h5
    mpiexec -n 2 python -m hpcmm info
    mpiexec -n 2 python -m hpcmm bench
    mpiexec -n 2 python -m hpcmm bench transport
    python -m hpcmm report run.h5 --plot timeline.png

Exit status: 0 success, 1 verification failed (or an unexpected error),
2 bad input.  Only rank 0 prints, except errors: a bad input is reported by
every rank, with the same one line.  An unexpected exception on one rank
aborts the whole job (``MPI.Abort``) so that no rank is left waiting.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading

from .config import DEVICES, DTYPES, MAX_PREFETCH, TRISTATE, VERIFY_MODES, RunConfig, new_output_name
from .config import parse_grid, parse_matrix_source, parse_positive_int, settings_from_environment
from . import status
from .errors import HpcmmError, InputError, collective

__all__ = ["main", "build_parser"]

SUBCOMMANDS = ("run", "info", "bench", "report")


class _Parser(argparse.ArgumentParser):
    """argparse that raises :class:`InputError` (one line) instead of printing usage and exiting."""

    def error(self, message: str):
        raise InputError(message)


def _argtype(parse):
    """An argparse type from one of config's parsers: argparse prints our message as is."""

    def convert(text):
        try:
            return parse(text)
        except InputError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return convert


def _int(name: str, minimum: int = 1, maximum: int | None = None):
    return _argtype(lambda text: parse_positive_int(name, text, minimum=minimum, maximum=maximum))


#: The defaults of RunConfig, for the help texts (one home for every default).
_DEFAULT = RunConfig.__dataclass_fields__

#: How --a and --b name a matrix; the rule for ':' is parse_matrix_source's.
_SOURCE_HELP = ("read the matrix from FILE.h5:DATASET or FILE.npy, each rank its block "
                "(default: generated from --seed); the file name ends at the last ':' after "
                ".h5/.hdf5/.hdf, so paths and dataset names may hold ':' "
                "(run:1/in.h5:/grp/t=0:A is dataset /grp/t=0:A of run:1/in.h5)")


def _default(field: str) -> str:
    return f"(default {_DEFAULT[field].default})"


def _add_common(p: argparse.ArgumentParser) -> None:
    """Options every subcommand takes."""
    from . import __version__  # noqa: PLC0415

    p.add_argument("--version", action="version", version=f"hpcmm {__version__}")
    p.add_argument("--status-file", metavar="PATH",
                   help="rank 0 writes the exit status and a one-line reason to PATH at the end "
                        "(batch scripts read it); written atomically")


def _add_placement_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("placement")
    g.add_argument("--device", choices=DEVICES, help=f"where to compute; auto: the GPU if cupy sees one "
                   f"{_default('device')}")
    g.add_argument("--grid", type=_argtype(parse_grid), metavar="PRxPC",
                   help="process grid (default: the most square grid, MPI.Compute_dims)")
    g.add_argument("--ranks-per-node", type=_int("--ranks-per-node"), metavar="R",
                   help="treat each group of R ranks of a machine as a separate node (default: real nodes)")
    g.add_argument("--cuda-aware-mpi", choices=TRISTATE,
                   help=f"may device buffers go to MPI; auto: ask the MPI library {_default('cuda_aware_mpi')}")


def _add_run_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("problem")
    g.add_argument("--m", type=_int("--m"), help="rows of A and C (default 8192 on GPUs, 1024 on CPUs)")
    g.add_argument("--n", type=_int("--n"), help="columns of B and C (default as --m)")
    g.add_argument("--k", type=_int("--k"), help="columns of A, rows of B (default as --m)")
    g.add_argument("--dtype", choices=DTYPES, help=f"element type {_default('dtype')}")
    g.add_argument("--tf32", action="store_true", default=None, help="float32 on TF32 tensor cores (default off)")
    g.add_argument("--seed", type=_int("--seed", 0), help=f"seed of the generated matrices {_default('seed')}")
    g.add_argument("--a", type=_argtype(lambda t: parse_matrix_source("--a", t)), metavar="FILE.h5:DATASET|FILE.npy",
                   help=f"A: {_SOURCE_HELP}")
    g.add_argument("--b", type=_argtype(lambda t: parse_matrix_source("--b", t)), metavar="FILE.h5:DATASET|FILE.npy",
                   help="B, as --a (default: generated from --seed)")
    g.add_argument("--allow-nonfinite", action="store_true", default=None,
                   help="run even if the inputs hold NaN or Inf; verification is skipped (default: refuse)")
    _add_placement_options(p)
    g = p.add_argument_group("algorithm")
    g.add_argument("--panel", type=_int("--panel"), metavar="W",
                   help="SUMMA panel width (default: up to 2048 on GPUs, 256 on CPUs)")
    g.add_argument("--prefetch", type=_int("--prefetch", 0, MAX_PREFETCH), metavar="D",
                   help=f"panels in flight ahead of the GEMM, 0 to {MAX_PREFETCH} {_default('prefetch')}")
    g = p.add_argument_group("measurement and output")
    g.add_argument("--warmup", type=_int("--warmup", 0), metavar="W", help=f"untimed products {_default('warmup')}")
    g.add_argument("--iters", type=_int("--iters"), metavar="I", help=f"timed products {_default('iters')}")
    g.add_argument("--verify", choices=VERIFY_MODES,
                   help=f"check of C; none: no check, and exit 0 all the same {_default('verify')}")
    g.add_argument("--out", metavar="FILE.h5",
                   help="results file; never replaced without --overwrite (default: a new name, "
                        "hpcmm-results-YYYYmmdd-HHMMSS.h5, printed at the end)")
    g.add_argument("--overwrite", action="store_true", default=None, help="replace an existing --out (default: refuse)")
    g.add_argument("--save-c", action="store_true", default=None, help="store the product as /result/C (default off)")
    g.add_argument("--no-timeline", dest="timeline", action="store_false", default=None,
                   help="do not keep per-event start/end times (default: keep)")
    g.add_argument("--quiet", action="store_true", default=None, help="print only the summary (default: progress too)")


_EPILOG = ("run is the default subcommand: 'python -m hpcmm --m 4096' is 'python -m hpcmm run --m 4096'. "
           "'python -m hpcmm run --help' lists its options (info, bench and report have their own --help). "
           "Settings also come from HPCMM_* variables (README.md); an option wins over a variable. "
           "Exit status: 0 done (C passed its check, or was not checked: --verify none), "
           "1 C failed its check or an unexpected error, 2 bad input.")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m hpcmm", epilog=_EPILOG,
                     description="Dense matrix products over many GPUs (or CPUs) with MPI: SUMMA, "
                                 "results in one HDF5 file.")
    from . import __version__  # noqa: PLC0415

    parser.add_argument("--version", action="version", version=f"hpcmm {__version__}")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser, title="subcommands",
                                metavar="{run,info,bench,report}")
    run = sub.add_parser("run", help="multiply, verify, write the HDF5 file, print a summary (the default)",
                         description="Multiply, verify, write the HDF5 file, print a summary.")
    _add_run_options(run)
    _add_common(run)
    info = sub.add_parser("info", help="where each rank runs; MPI, CUDA, HDF5 facts",
                          description="One line per rank (host, node, grid position, GPU), then the "
                                      "MPI, CUDA-awareness, cupy and HDF5 facts.")
    _add_placement_options(info)
    _add_common(info)
    bench = sub.add_parser("bench", help="benchmark: hpcmm against one GPU and the peers",
                           description="hpcmm against one GPU's own GEMM and the peers; "
                                       "'bench transport': GB/s of each data path.")
    bench.add_argument("what", nargs="?", choices=("gemm", "transport"), default="gemm",
                       help="what to measure (default gemm)")
    _add_run_options(bench)
    bench.add_argument("--cases", help="semicolon-separated cases, e.g. 'float64:16384;float32:8192x4096x2048'")
    bench.add_argument("--sizes", help="transport sizes in MiB, comma separated (default 1..1024)")
    bench.add_argument("--no-peers", action="store_true", help="skip cuBLASMp and Heat")
    _add_common(bench)
    report = sub.add_parser("report", help="summary of a results file; --plot draws the timeline",
                            description="Summary of a results file; --plot draws the timeline.")
    report.add_argument("file", help="an HDF5 file hpcmm wrote")
    report.add_argument("--plot", metavar="PNG", help="draw the Gantt chart of one timed product into PNG")
    report.add_argument("--iteration", type=_int("--iteration", 0), default=None, metavar="I",
                        help="which timed product --plot draws, counted from 0 (default: the last)")
    _add_common(report)
    return parser


def parse(argv: list[str]) -> argparse.Namespace:
    """Parse, with ``run`` as the default subcommand."""
    first = next((a for a in argv if not a.startswith("-")), None)
    if first not in SUBCOMMANDS and not any(a in ("-h", "--help", "--version") for a in argv[:1]):
        argv = ["run", *argv]
    return build_parser().parse_args(argv)


def config_from(ns: argparse.Namespace, environ=None) -> tuple[RunConfig, str]:
    """Command line over ``HPCMM_*`` over defaults.  Also returns where CUDA-awareness was set.

    ``run`` without ``--out`` writes to a new file (:func:`~hpcmm.config.new_output_name`);
    the ranks may pick different names at a second's turn: rank 0's is the one used.
    """
    values = settings_from_environment(environ)
    if getattr(ns, "command", None) == "run" and ns.out is None:
        values["out"] = new_output_name()
    source = "HPCMM_CUDA_AWARE_MPI" if "cuda_aware_mpi" in values else "--cuda-aware-mpi"
    for field in RunConfig.__dataclass_fields__:
        if getattr(ns, field, None) is not None:
            values[field] = getattr(ns, field)
            if field == "cuda_aware_mpi":
                source = "--cuda-aware-mpi"
    return RunConfig(**values), source


_STOPPING = threading.Lock()
_WATCHER: list[threading.Thread] = []


def _stop(signum: int) -> None:
    """Remove partial files and end the process (whichever thread sees the signal first)."""
    from .h5io import remove_pending  # noqa: PLC0415

    _STOPPING.acquire()  # a second caller waits here until the first one has ended the process
    remove_pending()
    name = signal.Signals(signum).name
    sys.stderr.write(f"hpcmm: stopped by {name}; no results written\n")
    sys.stderr.flush()
    os._exit(128 + signum)


def _install_signal_handlers() -> None:
    """SIGTERM/SIGINT (a batch system's time limit, Ctrl-C): remove partial files and leave.

    No collective work is attempted: the other ranks get the same signal or are
    ended by the launcher.  Exported device memory is released by the driver
    when the process ends.

    Python runs a signal handler in the main thread between two bytecodes, so a
    rank waiting inside MPI (or a BLAS call) would never get to it.  The signal
    number is therefore also written to a wakeup pipe, and a watcher thread
    (MPI and BLAS calls release the GIL) acts on it at once.
    """
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, frame: _stop(signum))
    if _WATCHER:
        return
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    previous = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    if previous != -1:
        # Someone else (an event loop) owns the wakeup fd: leave it to them.
        signal.set_wakeup_fd(previous)
        os.close(read_fd)
        os.close(write_fd)
        return

    def watch() -> None:
        while True:
            for signum in os.read(read_fd, 64):
                if signum in (signal.SIGTERM, signal.SIGINT):
                    _stop(signum)

    _WATCHER.append(threading.Thread(target=watch, name="hpcmm-signals", daemon=True))
    _WATCHER[0].start()


def _print(rank: int, text: str, err: bool = False) -> None:
    if rank == 0:
        stream = sys.stderr if err else sys.stdout
        stream.write(text + "\n")
        stream.flush()


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m hpcmm``; returns the exit status (also to ``--status-file``)."""
    return status.recorded(list(sys.argv[1:] if argv is None else argv), _main)


def _main(argv: list[str]) -> int:
    argv = list(argv)
    from mpi4py import MPI  # noqa: PLC0415

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    _install_signal_handlers()
    try:
        # Collective: HPCMM_* values (and, in an MPMD launch, the arguments) may differ
        # between ranks, and a rank that refuses them must not leave the others waiting.
        with collective(comm):
            ns = parse(argv)
            if ns.command != "report":
                config, source = config_from(ns)
        if ns.command == "report":
            from .report import report_main  # noqa: PLC0415

            return report_main(ns) if rank == 0 else 0
        if ns.command == "info":
            from .info import info_main  # noqa: PLC0415

            return info_main(config, comm, source)
        if ns.command == "bench":
            from .bench import bench_main  # noqa: PLC0415

            return bench_main(ns, config, comm, source)
        return _run_main(config, comm, source, argv)
    except HpcmmError as exc:
        # Raised on every rank with the same text (bad input is checked everywhere).
        status.note(str(exc))
        sys.stderr.write(f"hpcmm: error: {exc}\n")
        sys.stderr.flush()
        return exc.exit_code
    except Exception as exc:  # noqa: BLE001 - a bug or a failure on this rank only
        import traceback  # noqa: PLC0415

        traceback.print_exc()
        sys.stderr.write(f"hpcmm: rank {rank}: {type(exc).__name__}: {exc}; aborting all ranks\n")
        sys.stderr.flush()
        if comm.Get_size() > 1:
            comm.Abort(1)
        return 1


def _run_main(config: RunConfig, comm, source: str, argv: list[str]) -> int:
    from .run import run  # noqa: PLC0415
    from .summary import print_summary  # noqa: PLC0415

    rank = comm.Get_rank()
    config = config.replace(out=comm.bcast(config.out, root=0))  # a default name: rank 0's
    progress = None if config.quiet else (lambda msg: _print(rank, f"hpcmm: {msg}", err=True))
    result = None
    try:
        result = run(config, comm, cuda_aware_source=source, progress=progress,
                     argv=["python -m hpcmm", *argv])
    except HpcmmError as exc:
        if rank == 0 and getattr(exc, "summary", None):
            print_summary(exc.summary, config.out)
        raise
    if rank == 0:
        print_summary(result.summary, result.path)
    return 0
