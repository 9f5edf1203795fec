"""The Plan: every choice of one product, frozen, printable, the same on every rank.

A plan is made once (:meth:`hpcmm.Matmul.plan`, or each ``python -m hpcmm``
run) and then executed many times.  Every rank computes it from the same
inputs; :func:`agree_on` compares the ranks' values field by field (first the
settings, before anything is built, then the plan itself), so that a rank
launched with another value (an ``HPCMM_PANEL`` set on one rank only, another
``--m``) fails on every rank with a message naming the field and the ranks,
instead of breaking a broadcast later or hanging.

Example (one rank)::

    >>> plan = Plan(m=4, n=4, k=4, dtype="float64")
    >>> plan.digest == Plan(m=4, n=4, k=4, dtype="float64").digest
    True
"""

from __future__ import annotations

import dataclasses
import hashlib
import json

from ..errors import InputError

__all__ = ["Plan", "agree_on", "settings_fields"]

#: RunConfig fields that may differ between ranks: the default output name is picked per rank at a
#: second's turn and rank 0's is the one used (:func:`hpcmm.cli.main.config_from`).
PER_RANK_SETTINGS = frozenset({"out"})


def settings_fields(config) -> dict[str, str]:
    """``config``'s settings as text, for :func:`agree_on` (the per-rank ones left out)."""
    return {name: repr(getattr(config, name)) for name in config.settings() if name not in PER_RANK_SETTINGS}


def agree_on(comm, fields: dict[str, str], what: str = "plan field") -> None:
    """Collective: raise the same :class:`~hpcmm.errors.InputError` on every rank where ``fields`` differ.

    ``fields`` maps names to text; every rank must hold the same names and
    values.  The message names each differing field with the ranks of each
    value, e.g. ``the ranks differ in setting panel: 8 on rank 1; None on
    ranks 0, 2-3``.  One gather: a rank never waits for a verdict that some
    other rank did not reach.
    """
    everyone = comm.allgather(fields)
    if all(other == everyone[0] for other in everyone[1:]):
        return
    names = sorted({name for each in everyone for name in each})
    parts = []
    for name in names:
        by_value: dict[str, list[int]] = {}
        for rank, each in enumerate(everyone):
            by_value.setdefault(each.get(name, "(missing)"), []).append(rank)
        if len(by_value) > 1:
            values = "; ".join(f"{value} on {_ranks(ranks)}" for value, ranks in
                               sorted(by_value.items(), key=lambda item: item[1][0]))
            parts.append(f"{what} {name}: {values}")
    error = InputError("the ranks differ in " + " and in ".join(parts) +
                       " (every rank must be given the same settings and environment)")
    error.agreed = True  # every rank gathered the same fields, so raises this same error
    raise error


def _ranks(ranks: list[int]) -> str:
    """``[0, 2, 3, 4]`` as ``ranks 0, 2-4``.

    >>> _ranks([0, 2, 3, 4]), _ranks([1])
    ('ranks 0, 2-4', 'rank 1')
    """
    runs, start, previous = [], ranks[0], ranks[0]
    for rank in ranks[1:] + [None]:
        if rank is not None and rank == previous + 1:
            previous = rank
            continue
        runs.append(str(start) if start == previous else f"{start}-{previous}")
        start = previous = rank
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(runs)


@dataclasses.dataclass(frozen=True)
class Plan:
    """Every choice of one distributed product ``C ← α·op(A)·op(B) + β·C``, the same on every rank.

    The fields are plain values (text, numbers, tuples), so that a plan prints,
    compares, and goes into a results file's ``/config`` as it is.  What each
    choice is and which function makes it: docs/design.md, "The plan".
    """

    m: int
    n: int
    k: int
    dtype: str
    alpha: complex | float = 1.0
    beta: complex | float = 0.0
    op_a: str = "N"
    op_b: str = "N"
    #: Ranks, nodes (as hpcmm counts them) and the backend they compute on.
    ranks: int = 1
    nodes: int = 1
    backend: str = "numpy"
    #: Each rank's device (-1: the host), and the most ranks that share one device.
    devices: tuple[int, ...] = ()
    ranks_per_device: int = 1
    #: ``summa`` or ``2.5d`` (with its layer count).
    algorithm: str = "summa"
    layers: int = 1
    #: The process grid (of one layer for 2.5d), and the caller's rank at each grid position.
    grid: str = "1x1"
    rank_order: tuple[int, ...] = (0,)
    #: The blocks' balance mode and each rank's weight (``()``: near-equal blocks).
    balance: str = "share"
    weights: tuple[float, ...] = ()
    #: ``--balance dynamic``: the grid positions that compute tiles (ranks that share a GPU by time
    #: slices leave them to the first of them); ``()`` otherwise.
    tile_workers: tuple[int, ...] = ()
    #: ``--balance dynamic`` with one worker: the operands it gathers whole along k (``"A"``, ``"B"``, ``"AB"``;
    #: :func:`~hpcmm.planning.choices.lone_worker_gather`), so that its tiles are one GEMM each; ``""`` otherwise.
    tile_gather: str = ""
    panel: int = 0
    panel_auto: bool = True
    prefetch: int = 0
    steps: int = 0
    step_order: str = "common"
    #: The local GEMM's operand orders (``A:F B:C``) and library (``auto``: per shape, measured at plan time).
    gemm_order: str = ""
    gemm_library: str = "auto"
    tf32: bool = False
    cuda_aware_mpi: bool = False
    #: Each rank's device bytes: blocks, panel rings and re-layout scratch.
    memory_bytes: tuple[int, ...] = ()
    #: The blocks of A, B and C of each rank (:class:`hpcmm.Layout`), as the caller stores them; it follows
    #: from the grid, rank order and weights above, so it is left out of the digest and the JSON.
    layout: object = dataclasses.field(default=None, compare=False, repr=False, metadata={"derived": True})

    @property
    def digest(self) -> str:
        """A short hash of every field: two ranks with the same digest hold the same plan."""
        return hashlib.sha256(self.to_json().encode()).hexdigest()[:16]

    def fields(self) -> dict[str, str]:
        """The fields as text (for :func:`agree_on`)."""
        return {f.name: repr(getattr(self, f.name)) for f in _recorded(self)}

    def to_json(self) -> str:
        """The plan as one JSON object (complex α, β as ``[re, im]``)."""
        def plain(value):
            if isinstance(value, complex):
                return [value.real, value.imag]
            if isinstance(value, tuple):
                return [plain(v) for v in value]
            return value

        return json.dumps({f.name: plain(getattr(self, f.name)) for f in _recorded(self)}, sort_keys=True)

    def attributes(self) -> dict[str, object]:
        """The plan as HDF5 attributes: the JSON text and its digest."""
        return {"plan": self.to_json(), "plan_digest": self.digest}

    def __str__(self) -> str:
        ops = f"{'' if self.alpha == 1 else f'{self.alpha:g}·'}op{self.op_a}(A)·op{self.op_b}(B)" + (
            "" if self.beta == 0 else f" + {self.beta:g}·C")
        lines = [
            f"hpcmm plan {self.digest}: C ← {ops}, {self.m}x{self.k} @ {self.k}x{self.n} {self.dtype}"
            + (" (tf32)" if self.tf32 else ""),
            f"  ranks {self.ranks} on {self.nodes} node(s), {self.backend}, up to {self.ranks_per_device} per device",
            f"  {self.algorithm}" + (f" with {self.layers} layers" if self.layers > 1 else "") +
            f", grid {self.grid}, balance {self.balance}",
            f"  panel {self.panel}{' (auto)' if self.panel_auto else ''}, {self.steps} step(s) {self.step_order}, "
            f"prefetch {self.prefetch}",
            f"  GEMM {self.gemm_order}, library {self.gemm_library}; CUDA-aware MPI {'yes' if self.cuda_aware_mpi else 'no'}",
            f"  device memory per rank: {_gib(min(self.memory_bytes, default=0))}–"
            f"{_gib(max(self.memory_bytes, default=0))} GiB",
        ]
        return "\n".join(lines)


def _recorded(plan: Plan):
    return [f for f in dataclasses.fields(plan) if not f.metadata.get("derived")]


def _gib(nbytes: int) -> str:
    return f"{nbytes / 2**30:.3g}"
