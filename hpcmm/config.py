"""The settings of one run: a frozen dataclass, the ``HPCMM_*`` table, validation.

Precedence is explicit argument > environment variable > default, as in
COSMA's ``environment_variables.hpp``; every ``HPCMM_*`` name lives in
:data:`ENVIRONMENT` and nowhere else.  Validation raises
:class:`~hpcmm.errors.InputError` with the bad value in the message.  It uses no
MPI, so every rank validates the same arguments and reaches the same verdict.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
import os
import re
import stat
from collections.abc import Callable, Mapping

from .errors import InputError
from .execution.gemm_library import LIBRARIES as GEMM_LIBRARIES
from .planning.grid_orientation import ORIENTATIONS as GRID_ORIENTATIONS
from .planning.gemm_orders import AUTO as GEMM_ORDER_AUTO
from .planning.gemm_orders import ORDERS as GEMM_ORDERS
from .planning.gemm_orders import parse_order
from .planning.algorithms.layers import parse_algo

#: Values of ``--balance`` (:mod:`hpcmm.planning.balance`; kept here, where no module imports numpy, so that
#: ``import hpcmm`` stays light and ``python -m hpcmm`` blocks signals before any thread exists).
BALANCE_MODES = ("auto", "share", "measured", "product", "dynamic", "none")
#: The balance used when none is given: ``dynamic`` where it measured ahead, else ``share``
#: (:func:`hpcmm.planning.balance.mode_for`).
DEFAULT_BALANCE = "auto"

__all__ = [
    "BALANCE_MODES",
    "DTYPES",
    "ENVIRONMENT",
    "RunConfig",
    "check_utf8",
    "new_output_name",
    "next_output_name",
    "parse_grid",
    "parse_matrix_source",
    "parse_positive_int",
    "settings_from_environment",
]

#: Element types the product supports (``--dtype``).
#: ``bfloat16`` is ml_dtypes' type (:mod:`hpcmm.dtypes`).
DTYPES = ("float64", "float32", "float16", "bfloat16", "complex128", "complex64")
DEVICES = ("auto", "gpu", "cpu")
VERIFY_MODES = ("freivalds", "full", "none")
TRISTATE = ("auto", "yes", "no")

#: Default problem: big enough to keep one modern GPU busy, small enough for a laptop.
DEFAULT_SIZE_GPU = 8192
DEFAULT_SIZE_CPU = 1024
#: Most panels in flight ahead of the GEMM (``--prefetch``).
MAX_PREFETCH = 8
#: ``HPCMM_STEP_ORDER``: the SUMMA steps' order on each rank (:class:`RunConfig` ``step_order``).
STEP_ORDERS = ("auto", "common")
#: op(A), op(B): as stored, transposed, conjugate transposed (the transpose for real types, as in BLAS).
OPS = ("N", "T", "C")
#: Files the command line names itself when ``--out`` is not given (see :func:`new_output_name`).
OUTPUT_PATTERN = "hpcmm-results-%Y%m%d-%H%M%S"


#: The largest integer a setting may take: the results file stores every one as a 64-bit integer.
INT_MAX = 2**63 - 1


def parse_positive_int(name: str, text: object, *, minimum: int = 1, maximum: int | None = None) -> int:
    """Parse ``text`` as an integer of at least ``minimum`` and at most ``maximum`` (:data:`INT_MAX`).

    Raises
    ------
    InputError
        Naming ``name`` and the bad value.
    """
    wanted = f">= {minimum}" if maximum is None else f"from {minimum} to {maximum}"
    if isinstance(text, bool):
        raise InputError(f"{name}={text!r}: expected an integer {wanted}")
    if isinstance(text, int):
        value = text
    else:
        s = str(text).strip()
        if not re.fullmatch(r"[+-]?\d+", s):
            raise InputError(f"{name}={text!r}: expected an integer {wanted}")
        value = int(s)
    if value < minimum or (maximum is not None and value > maximum):
        raise InputError(f"{name}={value}: expected an integer {wanted}")
    if value > INT_MAX:
        raise InputError(f"{name}={value}: expected an integer <= {INT_MAX} (2**63 - 1, what the results file stores)")
    return value


#: What each command that writes a file names it when ``--out`` is not given: ``run``'s results,
#: ``bench``'s and ``bench transport``'s figures (``hpcmm-bench-YYYYmmdd-HHMMSS.h5``, ...).
OUTPUT_KINDS = ("results", "bench", "transport")
#: ``bench``'s cases when ``--cases`` is not given (:mod:`hpcmm.bench.command`; here, where the help reads it).
BENCH_CASES = "float64:16384;float32:16384"
#: ``bench transport``'s sizes in MiB when ``--sizes`` is not given (:mod:`hpcmm.bench.transport`).
TRANSPORT_SIZES_MIB = (1, 4, 16, 64, 256, 1024)


def new_output_name(directory: str = ".", now: datetime.datetime | None = None, kind: str = "results") -> str:
    """A file name that no file in ``directory`` has yet, for a ``kind`` of :data:`OUTPUT_KINDS`.

    ``hpcmm-results-YYYYmmdd-HHMMSS.h5`` from the local time (``hpcmm-bench-...``
    for ``bench``), with ``-2``, ``-3``, ... appended when runs start within the
    same second, so that running the same command twice never collides with the
    first run's file.  Two runs started at once may still pick the same name:
    the one that publishes second takes the next free one
    (:func:`next_output_name`, :func:`hpcmm.io.h5io.publish`).

    Examples
    --------
    >>> new_output_name("/nonexistent", datetime.datetime(2026, 11, 29, 23, 5, 7))
    'hpcmm-results-20261129-230507.h5'
    >>> new_output_name("/nonexistent", datetime.datetime(2026, 11, 29, 23, 5, 7), kind="transport")
    'hpcmm-transport-20261129-230507.h5'
    """
    if kind not in OUTPUT_KINDS:
        raise ValueError(f"kind={kind!r}: expected one of {', '.join(OUTPUT_KINDS)}")
    stem = (now or datetime.datetime.now()).strftime(OUTPUT_PATTERN.replace("results", kind, 1))
    name = f"{stem}.h5"
    while os.path.lexists(os.path.join(directory, name)):
        name = next_output_name(name)
    return name


def next_output_name(path: str) -> str:
    """The name after ``path`` in :func:`new_output_name`'s sequence (whether or not a file has it).

    >>> next_output_name("out/hpcmm-results-20261129-230507.h5"), next_output_name("hpcmm-bench-20261129-230507-2.h5")
    ('out/hpcmm-results-20261129-230507-2.h5', 'hpcmm-bench-20261129-230507-3.h5')
    >>> next_output_name("mine.h5")
    'mine-2.h5'
    """
    directory, base = os.path.split(path)
    stem, ext = os.path.splitext(base)
    counted = re.fullmatch(r"(hpcmm-[a-z]+-\d{8}-\d{6})-(\d+)", stem)  # the time stamp's digits are no count
    name = f"{counted.group(1)}-{int(counted.group(2)) + 1}" if counted else f"{stem}-2"
    return os.path.join(directory, name + ext)


def check_utf8(argv) -> None:
    """Refuse an argument that is not UTF-8 text (a file name with a byte such as 0xfe).

    The results file records the command line, its paths and its dataset names as UTF-8
    strings, and the summary prints them: such a name would pass every check, and the write
    would fail after the product.  It is refused here, before any work.

    >>> check_utf8(["--out", os.fsdecode(b"r\\xfe.h5")])
    Traceback (most recent call last):
    ...
    hpcmm.errors.InputError: argument 'r\\xfe.h5' (after --out) is not UTF-8 text: ...
    """
    for i, arg in enumerate(argv):
        try:
            str(arg).encode("utf-8")
        except UnicodeEncodeError:
            shown = str(arg).encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
            after = f" (after {argv[i - 1]})" if i and str(argv[i - 1]).startswith("-") else ""
            raise InputError(f"argument '{shown}'{after} is not UTF-8 text: hpcmm records its command line "
                             "and file names in UTF-8; rename the file") from None


def regular_file(path: str, who: str) -> os.stat_result:
    """Refuse ``path`` unless it is a regular file, before anything opens it; ``who`` starts the message.

    Opening a FIFO waits for a writer, and h5py holds the interpreter's lock while HDF5
    opens a file, so that nothing (not even the SIGTERM watcher) runs until one comes;
    a device never ends.  Both are bad input.

    Raises
    ------
    InputError
        ``who``, then what ``path`` is.
    """
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise InputError(f"{who}: no such file") from None
    except OSError as exc:
        raise InputError(f"{who}: cannot read it ({exc.strerror or exc})") from None
    if stat.S_ISDIR(info.st_mode):
        raise InputError(f"{who}: is a directory")
    if not stat.S_ISREG(info.st_mode):
        raise InputError(f"{who}: not a regular file (a FIFO, a socket or a device): hpcmm reads files only")
    return info


def parse_number(name: str, text: str) -> float:
    """A finite real number (``--alpha``, ``--beta``).

    >>> parse_number("--alpha", "-1.5e0")
    -1.5
    """
    try:
        value = float(text)
    except ValueError:
        raise InputError(f"{name}={text!r}: expected a number") from None
    if not math.isfinite(value):
        raise InputError(f"{name}={text!r}: expected a finite number")
    return value


def parse_grid(text: str) -> tuple[int, int]:
    """Parse ``PRxPC`` (for example ``2x4``) into ``(rows, cols)``."""
    m = re.fullmatch(r"\s*(\d+)\s*[xX×]\s*(\d+)\s*", str(text))
    if not m or int(m.group(1)) < 1 or int(m.group(2)) < 1:
        raise InputError(f"--grid={text!r}: expected PRxPC with positive integers, e.g. 2x4")
    return int(m.group(1)), int(m.group(2))


HDF5_SUFFIXES = (".h5", ".hdf5", ".hdf")


def parse_matrix_source(name: str, text: str) -> tuple[str, str | None]:
    """Split ``FILE.h5:DATASET`` or ``FILE.npy`` into ``(path, dataset)``.

    The file name ends at the last ``:`` that follows ``.h5``, ``.hdf5`` or
    ``.hdf``, so that both the path and the dataset may hold ``:``; a text
    ending in ``.npy`` is a path as a whole.

    Examples
    --------
    >>> parse_matrix_source("--a", "run:1/in.h5:/group/A")
    ('run:1/in.h5', '/group/A')
    >>> parse_matrix_source("--a", "in.h5:t=0:A")
    ('in.h5', 't=0:A')
    >>> parse_matrix_source("--b", "c:/data/b.npy")
    ('c:/data/b.npy', None)
    """
    text = str(text)
    if text.endswith(".npy"):
        return text, None
    cuts = [i for i, ch in enumerate(text) if ch == ":" and text[:i].endswith(HDF5_SUFFIXES)]
    if cuts:
        path, dataset = text[: cuts[-1]], text[cuts[-1] + 1 :]
    else:
        path, _, dataset = text.rpartition(":")
        if not path:
            path, dataset = text, None
    if path.endswith(".npy"):
        raise InputError(f"{name}={text!r}: a .npy file holds one array; drop ':{dataset}'")
    if not path.endswith(HDF5_SUFFIXES):
        raise InputError(f"{name}={text!r}: expected FILE.h5:DATASET or FILE.npy")
    if not dataset:
        raise InputError(f"{name}={text!r}: name the dataset, as FILE.h5:DATASET")
    return path, dataset


def _choice(name: str, allowed: tuple[str, ...]):
    def parse(text: str) -> str:
        value = str(text).strip().lower()
        if value not in allowed:
            raise InputError(f"{name}={text!r}: expected one of {', '.join(allowed)}")
        return value

    return parse


#: Words taken for yes and no in ``HPCMM_*`` variables.
YES_WORDS = ("yes", "1", "true", "on")
NO_WORDS = ("no", "0", "false", "off")


def _tristate(name: str):
    """``auto``, or yes/no in any of their spellings, normalised to ``auto``/``yes``/``no``."""
    parse = _choice(name, ("auto",) + YES_WORDS + NO_WORDS)

    def norm(text: str) -> str:
        value = parse(text)
        return "yes" if value in YES_WORDS else "no" if value in NO_WORDS else value

    return norm


def _yes_no(name: str):
    """Yes/no in any of their spellings as a bool; ``auto`` or anything else is refused."""
    parse = _choice(name, YES_WORDS + NO_WORDS)
    return lambda text: parse(text) in YES_WORDS


@dataclasses.dataclass(frozen=True)
class EnvSetting:
    """One ``HPCMM_*`` variable: which field it sets and how it is parsed."""

    field: str
    parse: Callable[[str], object]
    help: str


#: Every environment variable hpcmm reads.  Unknown ``HPCMM_*`` names are rejected.
ENVIRONMENT: dict[str, EnvSetting] = {
    "HPCMM_DEVICE": EnvSetting("device", _choice("HPCMM_DEVICE", DEVICES), "auto, gpu or cpu"),
    "HPCMM_CUDA_AWARE_MPI": EnvSetting(
        "cuda_aware_mpi", _tristate("HPCMM_CUDA_AWARE_MPI"), "auto, yes or no"
    ),
    "HPCMM_RANKS_PER_NODE": EnvSetting(
        "ranks_per_node",
        lambda t: parse_positive_int("HPCMM_RANKS_PER_NODE", t),
        "treat each group of R ranks of a machine as one node",
    ),
    "HPCMM_PANEL": EnvSetting(
        "panel", lambda t: parse_positive_int("HPCMM_PANEL", t), "SUMMA panel width"
    ),
    "HPCMM_PREFETCH": EnvSetting(
        "prefetch",
        lambda t: parse_positive_int("HPCMM_PREFETCH", t, minimum=0, maximum=MAX_PREFETCH),
        "panels in flight ahead of the GEMM",
    ),
    "HPCMM_BALANCE": EnvSetting(
        "balance", _choice("HPCMM_BALANCE", BALANCE_MODES), "auto, share, measured, product, dynamic or none"
    ),
    "HPCMM_ALGO": EnvSetting(
        "algo", lambda t: str(parse_algo(t, "HPCMM_ALGO")),
        "summa, 2.5d, 2.5d:C or auto",
    ),
    "HPCMM_TIMELINE": EnvSetting(
        "timeline", _yes_no("HPCMM_TIMELINE"), "record every transfer and GEMM (yes or no)"
    ),
    "HPCMM_STEP_ORDER": EnvSetting(
        "step_order", _choice("HPCMM_STEP_ORDER", STEP_ORDERS),
        "auto (on one node each rank starts k with its own blocks) or common (every rank in the same order)",
    ),
    "HPCMM_GEMM_LIBRARY": EnvSetting(
        "gemm_library", _choice("HPCMM_GEMM_LIBRARY", GEMM_LIBRARIES),
        "auto (per GEMM shape, cuBLASLt's autotuned algorithm where it is faster; GPUs with nvmath-python) "
        "or gemmex (cublasGemmEx for every shape)",
    ),
    "HPCMM_GRID_ORIENTATION": EnvSetting(
        "grid_orientation", _choice("HPCMM_GRID_ORIENTATION", GRID_ORIENTATIONS),
        "auto (per type: float64 on GPUs faces tall, each rank's C block taller than wide), wide "
        "(MPI.Compute_dims, rows >= cols) or tall (rows <= cols); --grid overrides it",
    ),
    "HPCMM_GEMM_ORDER": EnvSetting(
        "gemm_order", lambda t: parse_order("HPCMM_GEMM_ORDER", t),
        "the GEMM's operand orders, A's then B's (FC, CC, CF, FF; auto: hpcmm.planning.gemm_orders' table)",
    ),
}


def settings_from_environment(environ: Mapping[str, str] | None = None) -> dict[str, object]:
    """Read the ``HPCMM_*`` variables into config field values.

    Every value is checked here as :class:`RunConfig` would check it, so that
    the message names the variable the bad value came from, not the flag.

    Raises
    ------
    InputError
        For a malformed value or an ``HPCMM_*`` name hpcmm does not know.
    """
    environ = os.environ if environ is None else environ
    values: dict[str, object] = {}
    for name, text in sorted(environ.items()):
        if not name.startswith("HPCMM_"):
            continue
        setting = ENVIRONMENT.get(name)
        if setting is None:
            known = ", ".join(sorted(ENVIRONMENT))
            raise InputError(f"{name}={text!r}: unknown setting (known: {known})")
        value = setting.parse(text)
        try:
            RunConfig(**{setting.field: value})
        except InputError as exc:
            reason = str(exc).split(": ", 1)[-1]
            raise InputError(f"{name}={text!r}: {reason}") from None
        values[setting.field] = value
    return values


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """Everything one product run needs to know.

    Sizes left as ``None`` are resolved once the device is known
    (:meth:`with_default_size`) or taken from the input files.
    """

    m: int | None = None
    n: int | None = None
    k: int | None = None
    dtype: str = "float64"
    device: str = "auto"
    grid: tuple[int, int] | None = None
    panel: int | None = None
    prefetch: int | None = None
    balance: str = DEFAULT_BALANCE
    seed: int = 42
    a: tuple[str, str | None] | None = None
    b: tuple[str, str | None] | None = None
    verify: str = "freivalds"
    warmup: int = 1
    iters: int = 3
    out: str = "hpcmm-results.h5"
    overwrite: bool = False
    save_c: bool = False
    cuda_aware_mpi: str = "auto"
    ranks_per_node: int | None = None
    allow_nonfinite: bool = False
    tf32: bool = False
    #: C ← α·op(A)·op(B) + β·C; β ≠ 0 reads a C generated from ``seed``.  With op ``T`` or ``C`` the
    #: stored (generated or read) A is k×m, B n×k.
    alpha: float = 1.0
    beta: float = 0.0
    op_a: str = "N"
    op_b: str = "N"
    timeline: bool = True
    quiet: bool = False
    #: The local GEMM's operand orders (:mod:`hpcmm.planning.gemm_orders`): ``auto`` (the table) or FC, CC, CF, FF.
    gemm_order: str = GEMM_ORDER_AUTO
    #: The order of the SUMMA steps on each rank: ``auto`` (each starts with its own blocks where every
    #: panel is a one-sided pull, :func:`~hpcmm.planning.algorithms.own_start`) or ``common`` (the same everywhere).
    step_order: str = "auto"
    #: The library of the local GEMMs (:mod:`hpcmm.execution.gemm_library`): ``auto`` (per shape, measured) or ``gemmex``.
    gemm_library: str = "auto"
    #: Which way the default grid faces (:mod:`hpcmm.planning.grid_orientation`): ``auto`` (by type and sharing),
    #: ``wide``, ``tall`` or ``row``.
    grid_orientation: str = "auto"
    #: ``summa``, ``2.5d`` (the layer count the cost model finds fastest), ``2.5d:C`` or ``auto``.
    algo: str = "summa"
    #: Machine description for ``--algo auto`` and ``2.5d`` (a built-in name or a JSON file; ``None``: the model's default).
    machine: str | None = None
    # Provenance, not settings: carried to the messages and the results file, not to /config.
    #: Fields whose value came from an ``HPCMM_*`` variable (a message then names the variable).
    from_environment: frozenset[str] = dataclasses.field(default=frozenset(), metadata={"provenance": True})
    #: The command line that started the run (the file's ``command`` attribute); ``None``: ``sys.argv``.
    argv: tuple[str, ...] | None = dataclasses.field(default=None, metadata={"provenance": True})
    #: ``auto`` where ``balance`` is the mode the planner chose for it; ``None`` where it was asked as is.
    balance_asked: str | None = dataclasses.field(default=None, metadata={"provenance": True})

    def __post_init__(self) -> None:
        for name in ("m", "n", "k"):
            value = getattr(self, name)
            if value is not None:
                parse_positive_int(f"--{name}", value)
        if self.dtype not in DTYPES:
            raise InputError(f"--dtype={self.dtype!r}: expected one of {', '.join(DTYPES)}")
        if self.dtype == "bfloat16":
            # ml_dtypes only where bfloat16 is used: numpy knows np.dtype("bfloat16") from here on.
            from .dtypes import bfloat16  # noqa: PLC0415

            bfloat16()
        if self.device not in DEVICES:
            raise InputError(f"--device={self.device!r}: expected one of {', '.join(DEVICES)}")
        if self.verify not in VERIFY_MODES:
            raise InputError(f"--verify={self.verify!r}: expected one of {', '.join(VERIFY_MODES)}")
        if self.cuda_aware_mpi not in TRISTATE:
            raise InputError(
                f"--cuda-aware-mpi={self.cuda_aware_mpi!r}: expected one of {', '.join(TRISTATE)}"
            )
        if self.balance not in BALANCE_MODES:
            raise InputError(f"--balance={self.balance!r}: expected one of {', '.join(BALANCE_MODES)}")
        if self.panel is not None:
            parse_positive_int("--panel", self.panel)
        if self.prefetch is not None:
            parse_positive_int("--prefetch", self.prefetch, minimum=0, maximum=MAX_PREFETCH)
        parse_positive_int("--iters", self.iters)
        parse_positive_int("--warmup", self.warmup, minimum=0)
        parse_positive_int("--seed", self.seed, minimum=0)
        if self.ranks_per_node is not None:
            parse_positive_int("--ranks-per-node", self.ranks_per_node)
        if self.gemm_order != GEMM_ORDER_AUTO and self.gemm_order not in GEMM_ORDERS:
            raise InputError(f"HPCMM_GEMM_ORDER={self.gemm_order!r}: expected {GEMM_ORDER_AUTO} or one of "
                             f"{', '.join(GEMM_ORDERS)}")
        if self.gemm_library not in GEMM_LIBRARIES:
            raise InputError(f"HPCMM_GEMM_LIBRARY={self.gemm_library!r}: expected one of {', '.join(GEMM_LIBRARIES)}")
        if self.grid_orientation not in GRID_ORIENTATIONS:
            raise InputError(f"HPCMM_GRID_ORIENTATION={self.grid_orientation!r}: expected one of "
                             f"{', '.join(GRID_ORIENTATIONS)}")
        if self.step_order not in STEP_ORDERS:
            raise InputError(f"HPCMM_STEP_ORDER={self.step_order!r}: expected one of {', '.join(STEP_ORDERS)}")
        algo = parse_algo(self.algo, self.origin("algo"))
        if algo.name != "summa" and self.grid is not None:
            raise InputError(f"--grid={self.grid[0]}x{self.grid[1]}: applies to --algo=summa only, not "
                             f"{self.origin('algo')}={self.algo} (each 2.5d layer takes the most square grid)")
        for name in ("alpha", "beta"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise InputError(f"--{name}={value!r}: expected a finite number")
        for name in ("op_a", "op_b"):
            if getattr(self, name) not in OPS:
                raise InputError(f"--{name.replace('_', '-')}={getattr(self, name)!r}: expected one of {', '.join(OPS)}")
        if self.tf32 and self.dtype != "float32":
            raise InputError(f"--tf32 applies to float32 only, not --dtype={self.dtype}")
        if (self.a is None) != (self.b is None):
            raise InputError("--a and --b go together: give both input files or neither")
        if self.a is not None and any(v is not None for v in (self.m, self.n, self.k)):
            raise InputError("--m/--n/--k and --a/--b exclude each other: sizes come from the files")
        if not str(self.out).endswith((".h5", ".hdf5")):
            raise InputError(f"--out={self.out!r}: expected a file name ending in .h5")
        unknown = set(self.from_environment) - {s.field for s in ENVIRONMENT.values()}
        if unknown:
            raise ValueError(f"from_environment names fields no HPCMM_* variable sets: {sorted(unknown)}")

    @classmethod
    def settings(cls) -> list[str]:
        """The names of the fields that are settings (the provenance fields left out)."""
        return [f.name for f in dataclasses.fields(cls) if not f.metadata.get("provenance")]

    def origin(self, field: str) -> str:
        """Who set ``field``: its ``HPCMM_*`` variable, or else its option (``panel`` → ``--panel``).

        Examples
        --------
        >>> RunConfig(panel=8, from_environment=frozenset({"panel"})).origin("panel")
        'HPCMM_PANEL'
        >>> RunConfig().origin("cuda_aware_mpi")
        '--cuda-aware-mpi'
        """
        if field in self.from_environment:
            return next(name for name, s in ENVIRONMENT.items() if s.field == field)
        return "--" + field.replace("_", "-")

    def with_default_size(self, on_gpu: bool) -> RunConfig:
        """Fill unset sizes: ``m`` with the device's default, ``n`` and ``k`` with ``m``."""
        if self.a is not None:
            return self
        m = self.m or (DEFAULT_SIZE_GPU if on_gpu else DEFAULT_SIZE_CPU)
        # --n and --k follow --m, as the help says ("--m 3072" is 3072x3072 @ 3072x3072).
        return dataclasses.replace(self, m=m, n=self.n or m, k=self.k or m)

    def replace(self, **changes) -> RunConfig:
        """A copy with ``changes`` applied (and validated)."""
        return dataclasses.replace(self, **changes)

    def as_attributes(self) -> dict[str, object]:
        """The settings as HDF5-friendly scalars (``None`` becomes ``""``)."""
        out: dict[str, object] = {}
        for f in dataclasses.fields(self):
            if f.metadata.get("provenance"):
                continue
            value = getattr(self, f.name)
            if value is None:
                value = ""
            elif isinstance(value, tuple):
                value = "x".join(map(str, value)) if f.name == "grid" else ":".join(
                    v for v in value if v
                )
            out[f.name] = value
        return out
