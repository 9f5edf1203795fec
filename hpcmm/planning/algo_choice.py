"""Which algorithm a run takes: ``--algo`` checked against the nodes, and ``auto`` decided by the cost model.

Pure (no MPI): the run passes its placement (ranks, the ranks of every node,
ranks per host, CUDA-awareness) and problem; every rank reaches the same
verdict.  ``2.5d:C`` is checked by :func:`~hpcmm.planning.algorithms.layers.check_layers`;
``2.5d`` and ``auto`` ask :func:`hpcmm.model.cost.predict` for every candidate on
the machine description of ``--machine`` (``model``'s resolution and default)
and take the fastest: ``2.5d`` among the valid layer counts above 1,
``auto`` among ``summa`` and those.

>>> choose("2.5d:2", Placed(4, (2, 2), 4, True), (64, 64, 64), "float64").ran
'2.5d:2'
"""

from __future__ import annotations

import dataclasses
import math

from .algorithms.layers import check_layers, parse_algo, valid_layer_counts
from ..errors import InputError

__all__ = ["Choice", "Placed", "choose"]


@dataclasses.dataclass(frozen=True)
class Placed:
    """Where the run's ranks are: what the model needs to know of them."""

    ranks: int
    node_sizes: tuple[int, ...]  # ranks of every (virtual) node
    ranks_per_host: int
    cuda_aware: bool


@dataclasses.dataclass(frozen=True)
class Choice:
    """What runs: ``ran`` (``summa`` or ``2.5d:C``), what was asked, and the model's seconds per candidate."""

    ran: str
    asked: str
    layers: int | None = None  # C of 2.5d; None for summa
    predicted: tuple[tuple[str, float], ...] = ()

    def summary(self) -> dict:
        """``/summary`` attributes (docs/hdf5-schema.md)."""
        out: dict = {"algo": self.ran, "algo_asked": self.asked}
        if self.predicted:
            out["predicted_algos"] = [name for name, _ in self.predicted]
            out["predicted_seconds"] = [seconds for _, seconds in self.predicted]
        return out


def choose(asked: str, placed: Placed, shape: tuple[int, int, int], dtype: str, *, tf32: bool = False,
           machine: str | None = None, panel: int | None = None, prefetch: int | None = None,
           origin: str = "--algo") -> Choice:
    """The algorithm to run, the same on every rank.

    Raises
    ------
    InputError
        ``2.5d:C`` that does not fit the nodes or k; ``2.5d`` where no layer
        count above 1 does; a machine description the model cannot use.
    """
    algo = parse_algo(asked, origin)
    k = shape[2]
    if algo.name == "summa":
        return Choice("summa", str(algo))
    if algo.layers is not None:
        check_layers(algo.layers, placed.node_sizes, k, origin)
        return Choice(str(algo), str(algo), algo.layers)
    sizes = sorted(set(placed.node_sizes))
    counts = valid_layer_counts(sizes[0], k) if len(sizes) == 1 else ()  # layers need nodes of one size
    names = [f"2.5d:{c}" for c in counts]
    if algo.name == "auto":
        names = ["summa", *names]
    elif not names:
        raise InputError(f"{origin}=2.5d: no layer count above 1 divides the ranks of each node "
                         f"({', '.join(map(str, sizes))}) and fits k={k}")
    predicted = _predict(names, placed, shape, dtype, tf32, machine, panel, prefetch, origin, str(algo))
    finite = [p for p in predicted if math.isfinite(p[1])] or predicted
    ran = min(finite, key=lambda p: p[1])[0]
    return Choice(ran, str(algo), None if ran == "summa" else int(ran.split(":")[1]), tuple(predicted))


def _predict(names, placed: Placed, shape, dtype, tf32, machine_spec, panel, prefetch, origin, asked):
    from ..model.cost import DEFAULT_MACHINE, Problem, load_machine, predict  # noqa: PLC0415 - only when asked

    try:
        machine = load_machine(machine_spec or DEFAULT_MACHINE)
        problem = Problem(*shape, "tf32" if tf32 else dtype)
        return [(name, float(predict(problem, placed.ranks, machine, ranks_per_node=placed.node_sizes[0],
                                     ranks_per_host=placed.ranks_per_host, panel=panel, prefetch=prefetch,
                                     algo=name, cuda_aware=placed.cuda_aware).seconds))
                for name in names]
    except InputError as exc:
        raise InputError(f"{origin}={asked}: the cost model cannot predict this run: {exc}") from None
