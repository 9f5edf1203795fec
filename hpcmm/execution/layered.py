"""2.5D: hpcmm's SUMMA engine run by C layers of every node on their share of k, then a reduce-scatter.

Launch: ``mpiexec -n 8 python -m hpcmm --ranks-per-node 4 --algo 2.5d:2``.

:class:`LayeredEngine` wraps :class:`~hpcmm.execution.engine.Engine` and offers what the
run asks of an engine (``topo``, ``layout``, ``load``, ``multiply``, ``A``,
``B``, ``C``, ``plan``, memory and transfer figures), so that the run, the
checks and the file see one engine over all ranks:

1. the ranks split into layers (:class:`~hpcmm.planning.algorithms.layers.Layers`):
   a communicator per layer (``Split`` by layer, ranks in layer-rank order),
   and on it a :class:`~hpcmm.execution.topology.Topology` of its own (virtual nodes of
   ``q`` ranks, its grid from ``MPI.Compute_dims``, turned as summa's on the same nodes);
2. the layer's :class:`~hpcmm.execution.engine.Engine`, unchanged, on ``(m, n, k_l)``;
   its C is the fiber's readable partial block
   (:class:`~hpcmm.execution.transport.reduce.FiberReduction`), and every layer uses
   the same panel width (the widest the layers' own choice would give, no
   wider than the shallowest layer's k);
3. per product: the layer's SUMMA loop, then the fiber's reduce-scatter,
   inside the product's window; its seconds are kept per product
   (:attr:`LayeredTimes.reduce`).

A rank's ``A`` and ``B`` are its layer blocks at the layer's k offset, ``C``
its piece of the sum, all in global coordinates through
:class:`~hpcmm.planning.algorithms.layers.LayeredLayout`.
"""

from __future__ import annotations

import collections
import dataclasses
from time import perf_counter

import numpy as np

from ..planning.algorithms.layers import LayeredLayout, Layers
from ..planning.choices import EngineChoices
from ..config import RunConfig
from ..dtypes import numpy_dtype
from .engine import Engine, IterationTimes
from ..errors import collective_setup, raised_everywhere
from ..geometry.layout import Grid
from .topology import Topology
from .transport.reduce import FiberReduction

__all__ = ["LayeredEngine", "LayeredTimes", "node_ranks"]


@dataclasses.dataclass
class LayeredTimes(IterationTimes):
    """One product's timings on this rank: the layer's SUMMA, and the reduce-scatter after it."""

    reduce: float = 0.0  # seconds of the fiber's reduce-scatter (inside ``seconds``)


def node_ranks(topo: Topology) -> list[list[int]]:
    """Collective: the ranks of every (virtual) node of ``topo``, in node-local order."""
    facts = topo.comm.allgather((topo.vnode, topo.vnode_comm.Get_rank()))
    nodes: dict[int, list[tuple[int, int]]] = collections.defaultdict(list)
    for rank, (vnode, local) in enumerate(facts):
        nodes[vnode].append((local, rank))
    return [[rank for _, rank in sorted(nodes[v])] for v in sorted(nodes)]


class LayeredEngine:
    """One rank's layer engine and fiber reduction.  Collective over ``topo.comm``, built and closed together.

    Parameters
    ----------
    topo : Topology
        All ranks (launch order).
    backend : Backend
    config : RunConfig
    layers : Layers
        The layer of every rank (built from :func:`node_ranks`).
    grid, layout, choices
        What :func:`~hpcmm.planning.choices.layered_choices` made of them (memory checked there): each
        layer's grid, the layered layout, and the choices every layer engine runs by.
    cuda_aware : bool
    """

    def __init__(self, topo: Topology, backend, config: RunConfig, layers: Layers, grid: Grid,
                 layout: LayeredLayout, choices: EngineChoices, cuda_aware: bool) -> None:
        self.topo, self.backend, self.layers, self.choices = topo, backend, layers, choices
        self.dtype = numpy_dtype(config.dtype)
        self.layer = layers.layer(topo.rank)
        self.layer_rank = layers.layer_rank(topo.rank)
        self.members = layers.members(self.layer)
        self.layer_grid, self.layout = grid, layout
        self.panel, self.panel_auto, self.prefetch = choices.panel, choices.panel_auto, choices.prefetch
        self.gemm_order, self.ring = choices.gemm_order, choices.ring
        self.device_bytes = choices.device_bytes
        layer_config = config.replace(
            panel=self.panel, grid=None,
            ranks_per_node=layers.per_layer if config.ranks_per_node is not None else None)
        self.engine = self.reduction = self.layer_topo = self.fiber = None
        self.closed = False
        layer_comm = topo.comm.Split(self.layer, self.layer_rank)
        try:
            self.layer_topo = Topology.create(layer_comm, layer_config, grid=self.layer_grid)
        finally:
            layer_comm.Free()
        self.fiber = topo.comm.Split(self.layer_rank, self.layer)
        # Two stages, each agreed by every rank: a rank that failed the first must not leave
        # its layer waiting in the engine's collectives.
        with collective_setup(topo.comm, self.close):
            self.reduction = FiberReduction(self.fiber, backend, self.layout.local_shapes_partial(topo.rank),
                                            self.dtype)
        # The engine multiplies into the partial block its fiber peers read (stored as it stores C).
        with collective_setup(topo.comm, self.close):
            self.engine = Engine(self.layer_topo, backend, self.layout.layer_layout(self.layer), choices,
                                 layer_config, cuda_aware, c_storage=self.reduction.storage)
        self.plan = self.engine.plan
        self.step_order = choices.step_order
        #: Steps of the longest layer plan: every rank's step records are that long (zeros after its own).
        self.steps = choices.steps
        #: C's stores: the longest layer's steps, and once more per partial block the reduction adds.
        self.c_stores = self.steps + layers.count - 1

    def __enter__(self) -> LayeredEngine:
        return self

    def __exit__(self, kind, error, traceback) -> None:
        if raised_everywhere(error):
            self.close()

    # -- what the run reads -----------------------------------------------------
    @property
    def A(self):
        return self.engine.A

    @property
    def B(self):
        return self.engine.B

    @property
    def gemm_order_label(self) -> str:
        """The layer engine's GEMM operand orders, e.g. ``A:C B:F`` (:mod:`hpcmm.planning.gemm_orders`)."""
        return self.engine.gemm_order_label

    @property
    def C(self):
        """This rank's piece of C (its rows of the summed partial block)."""
        return self.reduction.piece()

    @property
    def bytes_by_pair(self) -> collections.Counter:
        """Bytes of the last product by (source rank, this rank, path): the layer's panels and the reduction's pieces."""
        out: collections.Counter = collections.Counter()
        for (src, dst, path), nbytes in self.engine.bytes_by_pair.items():
            out[(self.members[src], self.members[dst], path)] += nbytes
        piece = self.reduction.nbytes_from_peers() // max(self.layers.count - 1, 1)
        if piece:
            for peer in self.layers.fiber(self.topo.rank):
                if peer != self.topo.rank:
                    out[(peer, self.topo.rank, self.reduction.peers.path)] += piece
        return out

    def rank_facts(self) -> dict:
        """``/topology`` columns of 2.5D: the layer, and the position in the layer's grid."""
        row, col = self.layout.grid.coords(self.layer_rank)
        return {"layer": self.layer, "layer_rank": self.layer_rank, "grid_row": row, "grid_col": col}

    # -- memory -----------------------------------------------------------------
    def needed_bytes(self) -> int:
        """This rank's blocks, panel rings, re-layout scratch, partial C and reduction scratch on its device."""
        return self.choices.needed_bytes

    # -- the work ---------------------------------------------------------------
    def load(self, a_host: np.ndarray, b_host: np.ndarray) -> None:
        """This rank's blocks (the shapes of ``layout.a_block``/``b_block``), then align every rank."""
        self.engine.load(a_host, b_host)
        self.topo.comm.Barrier()

    def multiply(self) -> LayeredTimes:
        """One product: the layer's SUMMA into the partial block, then the fiber's reduce-scatter."""
        times = self.engine.multiply()
        reduce = self.reduction.reduce()
        # The product ends when the reduction does: from the engine's start (host clock) to now, so
        # that the host's work between the last GEMM and the reduction's start counts too.
        seconds = perf_counter() - times.start
        steps = np.zeros((self.steps, times.steps.shape[1]))
        steps[: len(times.steps)] = times.steps
        host = np.zeros(self.steps)
        if times.host is not None:
            host[: len(times.host)] = times.host
        return LayeredTimes(seconds, steps, times.timeline, times.start, host, reduce)

    # -- tear-down ----------------------------------------------------------------
    def close(self) -> None:
        """Collective: the engine (layer), the reduction (fiber), then the communicators."""
        if self.closed:
            return
        self.closed = True
        if self.engine is not None:
            self.engine.close()
        if self.reduction is not None:
            self.reduction.close()
        if self.fiber is not None:
            self.fiber.Free()
        if self.layer_topo is not None:
            self.layer_topo.close()
        self.engine = self.reduction = self.fiber = self.layer_topo = None
