"""The library's options: how :class:`hpcmm.Matmul` plans, as one validated record.

Every field left ``None`` takes its ``HPCMM_*`` variable where one is set, else
the default the command line has (:class:`~hpcmm.config.RunConfig`): an
explicit option beats the environment, which beats the default, as on the
command line.  What a field means is documented where the command line
describes its flag (``python -m hpcmm run --help``, README "Environment").

Example::

    opts = hpcmm.MatmulOptions(panel=1024, step_order="common")
    with hpcmm.Matmul(comm, m, n, k, "float64", options=opts) as mm: ...
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping

from .config import ENVIRONMENT, RunConfig, settings_from_environment
from .errors import InputError

__all__ = ["MatmulOptions", "as_options"]


@dataclasses.dataclass(frozen=True)
class MatmulOptions:
    """How a :class:`~hpcmm.Matmul` plans; ``None``: the ``HPCMM_*`` variable, else the default.

    Attributes
    ----------
    algo : {"summa", "2.5d:C", "auto"}
        The algorithm; ``2.5d`` and ``auto`` ask the cost model (``machine``), ``summa`` never does.
    machine : str
        The machine description of ``algo="auto"`` or ``2.5d`` (a built-in name or a JSON file).
    device : {"auto", "gpu", "cpu"}
    grid : (int, int)
        The SUMMA process grid; default: the planner's.
    panel, prefetch : int
        SUMMA panel width and panels in flight ahead of the GEMM; default: the planner's rule.
    balance : {"auto", "share", "measured", "product", "dynamic", "none"}
        How blocks follow the ranks' speeds (measured at ``plan()``); ``auto``: ``dynamic`` on one
        node whose GPUs several ranks share without MPS, else ``share``.
    cuda_aware_mpi : {"auto", "yes", "no"}
        Whether device buffers may go to MPI between nodes.
    ranks_per_node : int
        Treat each group of this many ranks of a machine as one node.
    tf32 : bool
        float32 GEMMs on TF32 tensor cores.
    step_order : {"auto", "common"}
    gemm_library : {"auto", "gemmex"}
    grid_orientation : {"auto", "wide", "tall", "row"}
    gemm_order : {"auto", "FC", "CC", "CF", "FF"}
        The local GEMM's operand orders, A's then B's.
    timeline : bool
        Record the start and end of every transfer and GEMM of each ``execute()`` (default off in
        the library: nothing reads it there).
    seed : int
        Seed of the untimed data ``balance="product"`` measures with.
    """

    algo: str | None = None
    machine: str | None = None
    device: str | None = None
    grid: tuple[int, int] | None = None
    panel: int | None = None
    prefetch: int | None = None
    balance: str | None = None
    cuda_aware_mpi: str | None = None
    ranks_per_node: int | None = None
    tf32: bool | None = None
    step_order: str | None = None
    gemm_library: str | None = None
    grid_orientation: str | None = None
    gemm_order: str | None = None
    timeline: bool | None = None
    seed: int | None = None

    def config(self, m: int, n: int, k: int, dtype: str, environ: Mapping[str, str] | None = None) -> RunConfig:
        """The run configuration these options give for an ``m × k`` by ``k × n`` product of ``dtype``.

        Raises
        ------
        InputError
            A bad value, named by its option (or its ``HPCMM_*`` variable).
        """
        values = settings_from_environment(os.environ if environ is None else environ)
        from_environment = set(values)
        values.setdefault("timeline", False)  # the library's default: nothing reads a timeline there
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if value is not None:
                values[field.name] = tuple(value) if field.name == "grid" else value
                from_environment.discard(field.name)
        return RunConfig(m=m, n=n, k=k, dtype=dtype, verify="none", **values,
                         from_environment=frozenset(from_environment & {s.field for s in ENVIRONMENT.values()}))


def as_options(options) -> MatmulOptions:
    """``options`` as a :class:`MatmulOptions`: one already, a mapping of its fields, or ``None``.

    Raises
    ------
    InputError
        A mapping with a key that is not an option.
    """
    if options is None:
        return MatmulOptions()
    if isinstance(options, MatmulOptions):
        return options
    if isinstance(options, Mapping):
        known = {f.name for f in dataclasses.fields(MatmulOptions)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise InputError(f"options {unknown}: not options of hpcmm.Matmul (known: {', '.join(sorted(known))})")
        return MatmulOptions(**options)
    raise InputError(f"options of type {type(options).__name__}: expected hpcmm.MatmulOptions, a dict or None")
