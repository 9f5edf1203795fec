"""Command line: ``python -m hpcmm [run|info|bench|report|model]`` (or ``hpcmm ...``, the console script).

Examples::

    mpiexec -n 4 python -m hpcmm --m 8192 --n 8192 --k 8192 --out run.h5
    mpiexec -n 2 python -m hpcmm info
    mpiexec -n 2 python -m hpcmm bench
    mpiexec -n 2 python -m hpcmm bench transport
    python -m hpcmm report run.h5 --plot timeline.png

Exit status: 0 success, 1 verification failed (or an unexpected error),
2 bad input, the same on every rank.  Only rank 0 prints; an error is printed
once, as one line, by the lowest rank that has it (:func:`settle`).  An
unexpected exception on one rank aborts the whole job (``MPI_Abort``, see
:mod:`hpcmm.cli.startup`) so that no rank is left waiting.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import sys
import time

from ..config import BALANCE_MODES, DEVICES, DTYPES, MAX_PREFETCH, OPS, TRISTATE, VERIFY_MODES, RunConfig
from ..config import DEFAULT_SIZE_CPU, DEFAULT_SIZE_GPU, OUTPUT_PATTERN, new_output_name, parse_number
from ..config import check_utf8, parse_grid, parse_matrix_source, parse_positive_int, settings_from_environment
from ..io import status as status_file
from ..planning.algorithms import DEFAULT_PREFETCH, TF32_PREFETCH
from ..planning.algorithms.layers import parse_algo
from ..errors import HpcmmError, InputError, collective
from .startup import one_line

__all__ = ["main", "build_parser"]

SUBCOMMANDS = ("run", "info", "bench", "report", "model")


#: While :func:`_parse_or_show` parses: what argparse would print (help, version), kept for rank 0.
_SHOWN: list[str] | None = None


@dataclasses.dataclass
class _Shown:
    """``--help`` or ``--version`` was asked for: the text to print, and the exit status."""

    text: str
    status: int


class _Exit(Exception):
    """argparse is done (help or version shown): leave the parse."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


class _Parser(argparse.ArgumentParser):
    """argparse that raises :class:`InputError` (one line) instead of printing usage and exiting.

    Inside :func:`_parse_or_show`, help and version texts are kept, not
    printed: the ranks first agree that every one of them was asked for them
    (an MPMD launch may give one rank ``--version`` alone), then rank 0
    prints them once.
    """

    def __init__(self, *args, **kwargs) -> None:
        # A prefix of an option's name is no name: argparse would read `bench --m 4096` as `--machine 4096`
        # (bench has no --m) and `--ranks 2` as `--ranks-per-node 2`, and the value the user meant would be
        # lost without a word.
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        raise InputError(message)

    def _print_message(self, message: str, file=None) -> None:
        if _SHOWN is None:
            super()._print_message(message, file)
        elif message:
            _SHOWN.append(message)

    def exit(self, status: int = 0, message: str | None = None):
        if _SHOWN is None:
            super().exit(status, message)
        if message:
            _SHOWN.append(message)
        raise _Exit(status)


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
    from .. import __version__  # noqa: PLC0415

    p.add_argument("--version", action="version", version=f"hpcmm {__version__}")
    p.add_argument("--status-file", metavar="PATH",
                   help="rank 0 writes the exit status and a one-line reason to PATH at the end "
                        "(batch scripts read it); written atomically (default: none)")


def _add_placement_options(p: argparse.ArgumentParser, grid: bool = True) -> None:
    g = p.add_argument_group("placement")
    g.add_argument("--device", choices=DEVICES, help=f"where to compute; auto: the GPU if cupy sees one "
                   f"{_default('device')}")
    if grid:
        g.add_argument("--grid", type=_argtype(parse_grid), metavar="PRxPC",
                       help="process grid (default: the most square grid, MPI.Compute_dims; rows <= cols for "
                            "float64 on GPUs, HPCMM_GRID_ORIENTATION)")
    g.add_argument("--ranks-per-node", type=_int("--ranks-per-node"), metavar="R",
                   help="treat each group of R ranks of a machine as a separate node (default: real nodes)")
    g.add_argument("--cuda-aware-mpi", choices=TRISTATE,
                   help=f"may device buffers go to MPI; auto: ask the MPI library {_default('cuda_aware_mpi')}")


def _add_run_options(p: argparse.ArgumentParser, out: str | None = None, problem: bool = True) -> None:
    """``run``'s options; without ``problem`` (``bench gemm``, whose --cases say it) no sizes, type,
    input files or what only a written results file keeps."""
    g = p.add_argument_group("problem")
    own = g.add_argument if problem else (lambda *args, **kwargs: None)
    own("--m", type=_int("--m"), help=f"rows of A and C (default {DEFAULT_SIZE_GPU} on GPUs, {DEFAULT_SIZE_CPU} on CPUs)")
    own("--n", type=_int("--n"), help="columns of B and C (default as --m)")
    own("--k", type=_int("--k"), help="columns of A, rows of B (default as --m)")
    own("--dtype", choices=DTYPES, help=f"element type {_default('dtype')}")
    own("--tf32", action="store_true", default=None, help="float32 on TF32 tensor cores (default off)")
    g.add_argument("--seed", type=_int("--seed", 0), help=f"seed of the generated matrices {_default('seed')}")
    g.add_argument("--alpha", type=_argtype(lambda t: parse_number("--alpha", t)), metavar="X",
                   help=f"C <- alpha op(A) op(B) + beta C {_default('alpha')}")
    g.add_argument("--beta", type=_argtype(lambda t: parse_number("--beta", t)), metavar="X",
                   help=f"beta != 0 adds beta times a C generated from --seed {_default('beta')}")
    g.add_argument("--op-a", choices=OPS, help="op(A): N as stored, T transposed (A stored k x m), C conjugate "
                   f"transposed {_default('op_a')}")
    g.add_argument("--op-b", choices=OPS, help=f"op(B), as --op-a (B stored n x k with T or C) {_default('op_b')}")
    own("--a", type=_argtype(lambda t: parse_matrix_source("--a", t)), metavar="FILE.h5:DATASET|FILE.npy",
        help=f"A: {_SOURCE_HELP}")
    own("--b", type=_argtype(lambda t: parse_matrix_source("--b", t)), metavar="FILE.h5:DATASET|FILE.npy",
        help="B, as --a (default: generated from --seed)")
    own("--allow-nonfinite", action="store_true", default=None,
        help="run even if the inputs hold NaN or Inf; verification is skipped (default: refuse)")
    _add_placement_options(p)
    g = p.add_argument_group("algorithm")
    g.add_argument("--panel", type=_int("--panel"), metavar="W",
                   help="SUMMA panel width (default: up to 8192 on GPUs, 2048 where ranks share them; "
                        "256 on CPUs, 512 in 16-bit types)")
    g.add_argument("--prefetch", type=_int("--prefetch", 0, MAX_PREFETCH), metavar="D",
                   help=f"panels in flight ahead of the GEMM, 0 to {MAX_PREFETCH} "
                        f"(default {DEFAULT_PREFETCH}; {TF32_PREFETCH} for TF32 on GPUs)")
    g.add_argument("--algo", type=_argtype(lambda t: str(parse_algo(t))), metavar="A",
                   help="summa; 2.5d:C (k cut over C layers of each node, partial C reduced in the node); "
                        "2.5d (the C the cost model finds fastest); auto (summa or 2.5d:C, whichever the "
                        f"cost model finds fastest) {_default('algo')}")
    g.add_argument("--machine", metavar="NAME|FILE.json",
                   help="machine description the cost model uses for --algo auto and 2.5d, as "
                        "'model --machine' (default h200x2)")
    g.add_argument("--balance", choices=BALANCE_MODES,
                   help="block sizes follow each rank's weight: auto (dynamic on one node whose GPUs several "
                        "ranks share without MPS, share elsewhere), share (1 / the ranks on its GPU, or on its "
                        "host's CPU), measured (its rate in a short GEMM timing on every rank at start-up), "
                        "product (its rate in untimed products with the share blocks, 0.25 s: time slicing, MPS and "
                        "block shapes included), dynamic (one node: the share blocks cut into tiles that ranks "
                        "which finish early take from the others while the product runs), none (equal blocks) "
                        f"{_default('balance')}")
    g = p.add_argument_group("measurement and output")
    g.add_argument("--warmup", type=_int("--warmup", 0), metavar="W", help=f"untimed products {_default('warmup')}")
    g.add_argument("--iters", type=_int("--iters"), metavar="I", help=f"timed products {_default('iters')}")
    g.add_argument("--verify", choices=VERIFY_MODES,
                   help=f"check of C; none: no check, and exit 0 all the same {_default('verify')}")
    _add_output_options(g, out or f"results file; never replaced without --overwrite (default: a new name, "
                                  f"{_pattern('results')}, printed at the end)")
    own = g.add_argument if problem else (lambda *args, **kwargs: None)
    own("--save-c", action="store_true", default=None, help="store the product as /result/C (default off)")
    own("--no-timeline", dest="timeline", action="store_false", default=None,
        help="do not keep per-event start/end times (default: keep)")
    own("--quiet", action="store_true", default=None,
        help="print only the summary (default: progress too, where the output is a terminal)")


def program_name() -> str:
    """How the user started hpcmm: ``hpcmm`` (the console script) or ``python -m hpcmm``."""
    return "hpcmm" if os.path.basename(sys.argv[0] if sys.argv else "") == "hpcmm" else "python -m hpcmm"


_EPILOG = ("run is the default subcommand: '{prog} --m 4096' is '{prog} run --m 4096'. "
           "'{prog} run --help' lists its options (info, bench, report and model have their own --help). "
           "Settings also come from HPCMM_* variables (README.md); an option wins over a variable. "
           "Exit status: 0 done (C passed its check, or was not checked: --verify none), "
           "1 C failed its check or an unexpected error, 2 bad input.")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=program_name(), epilog=_EPILOG.format(prog=program_name()),
                     description="Dense matrix products over many GPUs (or CPUs) with MPI: SUMMA, "
                                 "results in one HDF5 file.")
    from .. import __version__  # noqa: PLC0415

    parser.add_argument("--version", action="version", version=f"hpcmm {__version__}")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser, title="subcommands",
                                metavar="{" + ",".join(SUBCOMMANDS) + "}")
    run = sub.add_parser("run", help="multiply, verify, write the HDF5 file, print a summary (the default)",
                         description="Multiply, verify, write the HDF5 file, print a summary.")
    _add_run_options(run)
    _add_common(run)
    info = sub.add_parser("info", help="where each rank runs; MPI, CUDA, HDF5 facts",
                          description="One line per rank (host, node, grid position, GPU), then the "
                                      "MPI, CUDA-awareness, cupy and HDF5 facts.")
    _add_placement_options(info)
    _add_common(info)
    _add_bench_parsers(sub)
    report = sub.add_parser("report", help="summary of a results file; --plot draws the timeline",
                            description="Summary of a results file; --plot draws the timeline.")
    report.add_argument("file", help="an HDF5 file hpcmm wrote")
    report.add_argument("--plot", metavar="PNG", help="draw the Gantt chart of one timed product into PNG (default: no plot)")
    report.add_argument("--iteration", type=_int("--iteration", 0), default=None, metavar="I",
                        help="which timed product --plot draws, counted from 0 (default: the last)")
    _add_common(report)
    _add_model_parser(sub)
    _add_common(sub.choices["model"])
    return parser


#: ``bench``'s benchmarks; the first is the default (``bench --m 4096`` is ``bench gemm --m 4096``).
BENCHMARKS = ("gemm", "transport")


def _add_bench_parsers(sub) -> None:
    """``bench gemm`` (the default) and ``bench transport``, each with its own options only."""
    from ..config import BENCH_CASES, TRANSPORT_SIZES_MIB  # noqa: PLC0415
    from ..bench.peers import HEAT_LIMIT  # noqa: PLC0415

    prog = program_name()
    bench = sub.add_parser("bench", help="benchmarks: hpcmm against one GPU and the peers (gemm, the default); "
                                         "GB/s of each data path (transport)",
                           description="Benchmarks: 'bench gemm' (or 'bench' alone) times hpcmm against one GPU's "
                                       "own GEMM and the peers; 'bench transport' measures GB/s of each data path.",
                           epilog=f"gemm is the default: '{prog} bench --cases float64:8192' is '{prog} bench gemm "
                                  f"--cases float64:8192'. '{prog} bench gemm --help' and '{prog} bench transport "
                                  "--help' list their options.")
    what = bench.add_subparsers(dest="what", parser_class=_Parser, title="benchmarks",
                                metavar="{" + ",".join(BENCHMARKS) + "}")
    gemm = what.add_parser("gemm", help="hpcmm against one GPU's own GEMM and the peers (the default)",
                           description="hpcmm against the best one GPU (or host) does on the same problem, and "
                                       "against cuBLASMp and Heat where they import.")
    _add_run_options(gemm, out=f"figures file; never replaced without --overwrite (default: a new name, "
                               f"{_pattern('bench')}, printed at the end)", problem=False)
    g = gemm.add_argument_group("benchmark")
    g.add_argument("--cases", metavar="CASES",
                   help=f"semicolon-separated cases DTYPE:N or DTYPE:MxNxK, tf32 for float32 on TF32 cores "
                        f"(default '{BENCH_CASES}')")
    g.add_argument("--no-peers", action="store_true", help="skip cuBLASMp and Heat (default: run them where "
                                                           "they import)")
    g.add_argument("--heat-limit", type=_int("--heat-limit", 1), default=None, metavar="SECONDS",
                   help=f"Heat's own time limit per case: no product starts past it (default {HEAT_LIMIT:g})")
    _add_common(gemm)
    transport = what.add_parser("transport", help="GB/s of each data path between rank pairs (2 ranks or more)",
                                description="GB/s of each data path (ipc, shm, mpi, staged) between rank 0 and "
                                            "each other rank (or between every pair of ranks), through the "
                                            "product's own transports.")
    g = transport.add_argument_group("measurement and output")
    g.add_argument("--pairs", choices=("first", "all"), default="first",
                   help="first: rank 0 to each other rank; all: every pair of ranks, one pair at a time, "
                        "printed as a matrix per path (default first)")
    g.add_argument("--sizes", metavar="MIB[,MIB...]",
                   help="message sizes in MiB, comma separated, each 1 ... 1048576 (default "
                        f"{','.join(map(str, TRANSPORT_SIZES_MIB))})")
    _add_output_options(g, f"figures file; never replaced without --overwrite (default: a new name, "
                           f"{_pattern('transport')}, printed at the end)")
    _add_placement_options(transport, grid=False)
    _add_common(transport)


def _pattern(kind: str) -> str:
    """How a default file name of ``kind`` looks (``hpcmm-bench-YYYYmmdd-HHMMSS.h5``)."""
    shown = OUTPUT_PATTERN.replace("results", kind, 1)
    for code, text in (("%Y", "YYYY"), ("%m", "mm"), ("%d", "dd"), ("%H", "HH"), ("%M", "MM"), ("%S", "SS")):
        shown = shown.replace(code, text)
    return shown + ".h5"


def _add_output_options(g, out_help: str) -> None:
    g.add_argument("--out", metavar="FILE.h5", help=out_help)
    g.add_argument("--overwrite", action="store_true", default=None, help="replace an existing --out (default: refuse)")


def _add_model_parser(sub) -> None:
    """``model``: the cost model (hpcmm/model/cost.py); its options are its own, not RunConfig's."""
    from ..model.cost import add_model_parser  # noqa: PLC0415

    add_model_parser(sub, _int)


def parse(argv: list[str]) -> argparse.Namespace:
    """Parse, with ``run`` as the default subcommand and ``gemm`` as ``bench``'s."""
    check_utf8(argv)
    first = next((a for a in argv if not a.startswith("-")), None)
    if first not in SUBCOMMANDS and not any(a in ("-h", "--help", "--version") for a in argv[:1]):
        argv = ["run", *argv]
        first = "run"
    if first == "bench":
        at = argv.index("bench") + 1
        if at == len(argv) or argv[at] not in (*BENCHMARKS, "-h", "--help"):
            if "transport" in argv[at:]:
                raise InputError(f"'transport' goes right after 'bench': {program_name()} bench transport "
                                 f"[options]")
            argv = [*argv[:at], BENCHMARKS[0], *argv[at:]]
    return build_parser().parse_args(argv)


def _parse_or_show(argv: list[str]) -> argparse.Namespace | _Shown:
    """:func:`parse`, or what ``--help``/``--version`` would have printed."""
    global _SHOWN
    _SHOWN = []
    try:
        return parse(argv)
    except _Exit as done:
        return _Shown("".join(_SHOWN), done.status)
    finally:
        _SHOWN = None


def config_from(ns: argparse.Namespace, environ=None, argv: list[str] | None = None) -> RunConfig:
    """Command line over ``HPCMM_*`` over defaults, with where each value came from.

    ``run`` without ``--out`` writes to a new file (:func:`~hpcmm.config.new_output_name`);
    the ranks may pick different names at a second's turn: rank 0's is the one used.
    ``argv`` is the command line the results file records.
    """
    values = settings_from_environment(environ)
    from_environment = set(values)
    if getattr(ns, "command", None) == "run" and ns.out is None:
        values["out"] = new_output_name()
    for field in RunConfig.settings():
        if getattr(ns, field, None) is not None:
            values[field] = getattr(ns, field)
            from_environment.discard(field)
    command = None if argv is None else (program_name(), *argv)
    return RunConfig(**values, from_environment=frozenset(from_environment), argv=command)


#: Seconds a rank with an error waits for the others at the end before it aborts the job.
SETTLE_WAIT = 5.0


def settle(comm, status: int, line: str | None, wait: float = SETTLE_WAIT) -> int | None:
    """Collective at the end of a command: one exit status for every rank, one error line.

    Every rank brings its status and, if it failed, its line.  The lowest rank
    that failed prints its line (once for the whole job, ``(raised by rank R)``
    added where R is not 0 and the line does not say it), and every rank returns
    that rank's status.  A rank without an error waits for the others as long
    as they take; a rank with one waits ``wait`` seconds, then returns ``None``
    (the others are stuck: the caller must abort).  ``comm`` must be used for
    nothing else, so that this cannot match another collective.
    """
    request = comm.Ibarrier()
    deadline = None if line is None else time.monotonic() + wait
    while not request.Test():
        if deadline is not None and time.monotonic() > deadline:
            return None
        time.sleep(0.001)
    outcomes = comm.allgather((status, line))
    failed = [(rank, code, text) for rank, (code, text) in enumerate(outcomes) if code]
    if not failed:
        return 0
    rank, code, text = failed[0]
    if comm.Get_rank() == rank and text:
        if rank > 0 and "(raised by rank" not in text:
            text = f"{text} (raised by rank {rank})"
        sys.stderr.write(text + "\n")
        sys.stderr.flush()
    return code


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m hpcmm``; returns the exit status, the same on every rank.

    Run it through :func:`hpcmm.cli.startup.launch` (``python -m hpcmm`` does), which
    handles signals and turns whatever leaves this function into ``MPI_Abort``.
    With ``--status-file`` rank 0 also records how it ended (:mod:`hpcmm.io.status`).
    """
    return status_file.recorded(list(sys.argv[1:] if argv is None else argv), _main)


def _main(argv: list[str]) -> int:
    from mpi4py import MPI  # noqa: PLC0415

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    ending = comm.Dup()  # for settle() alone
    status, line = 0, None
    try:
        status = _command(argv, comm)
    except HpcmmError as exc:
        # Usually raised on every rank with the same text; settle() prints it once.
        status, line = exc.exit_code, f"hpcmm: error: {one_line(exc)}"
        status_file.note(one_line(exc))
    agreed = settle(ending, status, line)
    if agreed is None:
        # This rank failed alone and the others wait for it inside a collective.
        sys.stderr.write(f"hpcmm: rank {rank}: {line.removeprefix('hpcmm: ')}; aborting all ranks\n")
        sys.stderr.flush()
        comm.Abort(status)
    ending.Free()
    return agreed


def _command(argv: list[str], comm) -> int:
    """Parse (collectively) and run one subcommand; its exit status on this rank."""
    rank = comm.Get_rank()
    # Collective: HPCMM_* values (and, in an MPMD launch, the arguments) may differ
    # between ranks, and a rank that refuses them must not leave the others waiting.
    with collective(comm):
        ns = _parse_or_show(argv)
        if not isinstance(ns, _Shown) and ns.command not in ("report", "model"):
            config = config_from(ns, argv=argv)
        status_file.start()  # rank 0: --status-file accepted (or refused) before any work
    shown = comm.allgather(ns.status if isinstance(ns, _Shown) else None)
    if any(s is not None for s in shown):
        # --help or --version: the same answer everywhere, or an MPMD launch that mixes them.
        asked = [r for r, s in enumerate(shown) if s is not None]
        if len(asked) < len(shown):
            others = [r for r, s in enumerate(shown) if s is None]
            raise InputError(f"rank {asked[0]} was given --help or --version and rank {others[0]} was "
                             f"not: every rank must get the same command")
        if rank == 0:
            sys.stdout.write(ns.text)
            sys.stdout.flush()
        return max(shown)
    if ns.command == "report":
        from .report import report_main  # noqa: PLC0415

        return report_main(ns) if rank == 0 else 0
    if ns.command == "model":
        from ..model.cost import model_main  # noqa: PLC0415

        return model_main(ns, comm)
    if ns.command == "info":
        from .info import info_main  # noqa: PLC0415

        return info_main(config, comm)
    if ns.command == "bench":
        from ..bench.command import bench_main  # noqa: PLC0415

        return bench_main(ns, config, comm)
    return _run_main(config, comm, named=ns.out is None)


def _run_main(config: RunConfig, comm, named: bool = False) -> int:
    """``run``; ``named``: hpcmm named the file (no ``--out``), which may then take the next free name
    should another run publish one of the same name first (:data:`hpcmm.io.h5io.RENAMEABLE`)."""
    from ..io import h5io  # noqa: PLC0415
    from .progress import RunProgress  # noqa: PLC0415
    from .run import run  # noqa: PLC0415
    from .summary import print_summary  # noqa: PLC0415

    rank = comm.Get_rank()
    config = config.replace(out=comm.bcast(config.out, root=0))  # a default name: rank 0's
    if named:
        h5io.RENAMEABLE.add(config.out)

    def published(path):  # the name the file took (rank 0)
        return h5io.PUBLISHED[-1] if h5io.PUBLISHED else path
    # Rank 0 prints the progress messages, in a terminal with a live line of the phase under way.
    shown = RunProgress(config) if rank == 0 and not config.quiet else None
    result = None
    try:
        with shown or contextlib.nullcontext():
            result = run(config, comm, progress=shown)
    except HpcmmError as exc:
        if rank == 0 and getattr(exc, "summary", None):
            print_summary(exc.summary, published(config.out))
        raise
    if rank == 0:
        print_summary(result.summary, published(result.path))
    return 0
