"""2.5D: hpcmm's SUMMA engine run by C layers of every node on their share of k, then a reduce-scatter.

Launch: ``mpiexec -n 8 python -m hpcmm --ranks-per-node 4 --algo 2.5d:2``.

:class:`LayeredEngine` wraps :class:`~hpcmm.engine.Engine` and offers what the
run asks of an engine (``topo``, ``layout``, ``load``, ``multiply``, ``A``,
``B``, ``C``, ``plan``, memory and transfer figures), so that the run, the
checks and the file see one engine over all ranks:

1. the ranks split into layers (:class:`~hpcmm.algorithms.layers.Layers`):
   a communicator per layer (``Split`` by layer, ranks in layer-rank order),
   and on it a :class:`~hpcmm.topology.Topology` of its own (virtual nodes of
   ``q`` ranks, its grid from ``MPI.Compute_dims``, turned as summa's on the same nodes);
2. the layer's :class:`~hpcmm.engine.Engine`, unchanged, on ``(m, n, k_l)``;
   its C is the fiber's readable partial block
   (:class:`~hpcmm.transport.reduce.FiberReduction`), and every layer uses
   the same panel width (the widest the layers' own choice would give, no
   wider than the shallowest layer's k);
3. per product: the layer's SUMMA loop, then the fiber's reduce-scatter,
   inside the product's window; its seconds are kept per product
   (:attr:`LayeredTimes.reduce`).

A rank's ``A`` and ``B`` are its layer blocks at the layer's k offset, ``C``
its piece of the sum, all in global coordinates through
:class:`~hpcmm.algorithms.layers.LayeredLayout`.
"""

from __future__ import annotations

import collections
import dataclasses
from time import perf_counter

import numpy as np
from mpi4py import MPI

from .algorithms import panel_candidates, prefetch_of, ring_depth
from .algorithms.layers import LayeredLayout, Layers
from .config import RunConfig
from .dtypes import numpy_dtype
from .engine import Engine, IterationTimes, check_memory, gpus_shared, memory_needed, widest_fitting
from .errors import InputError, agree, collective_setup, raised_everywhere
from .gemm_orders import gemm_order, scratch_slots
from .grid_orientation import facing
from .topology import Topology, choose_grid
from .transport.reduce import FiberReduction, scratch_bytes

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
    shape : (int, int, int)
        m, n, k.
    layers : Layers
        The layer of every rank (built from :func:`node_ranks`).
    cuda_aware : bool

    Raises
    ------
    InputError
        On every rank: blocks, panels and partial C that do not fit, or a
        panel wider than the k of a layer.
    """

    def __init__(self, topo: Topology, backend, config: RunConfig, shape: tuple[int, int, int], layers: Layers,
                 cuda_aware: bool) -> None:
        m, n, k = shape
        self.topo, self.backend, self.layers = topo, backend, layers
        self.dtype = numpy_dtype(config.dtype)
        self.layer = layers.layer(topo.rank)
        self.layer_rank = layers.layer_rank(topo.rank)
        self.members = layers.members(self.layer)
        # Each layer's grid is turned as a summa run's on the same nodes (hpcmm.grid_orientation), so
        # that one layer is summa block for block.
        shared = gpus_shared(topo, backend)
        face = facing(config.grid_orientation, config.dtype, config.tf32, backend.on_gpu, topo.vnode_count, shared,
                      layers.layer_size, n)
        self.layer_grid = choose_grid(layers.layer_size, None, face)
        self.layout = LayeredLayout(m, n, k, layers, self.layer_grid)
        self.panel_auto = config.panel is None
        #: The layer engines' GEMM operand orders (the same rule as :class:`Engine`'s), for the memory check.
        self.gemm_order = gemm_order(config.dtype, config.tf32, backend.on_gpu, config.gemm_order)
        self.prefetch = prefetch_of(config, backend.on_gpu)
        self.ring = self.prefetch + 1
        # One width for every layer, so that their plans (and step records) line up: the default, or a
        # narrower one where its panel rings would not fit.
        layer_layouts = [self.layout.layer_layout(layer) for layer in range(layers.count)]
        self.panel = config.panel if config.panel is not None else widest_fitting(
            topo, backend, panel_candidates(layer_layouts, self.dtype.itemsize, backend.on_gpu,
                                            shared=shared), self.needed_bytes)
        narrowest = min(layer_layout.k for layer_layout in layer_layouts)
        if self.panel > narrowest:  # the same verdict on every rank; said before the layer engines say less
            agree(topo.comm, InputError(
                f"{config.origin('panel')}={self.panel}: wider than the k of a 2.5d layer (k={k} over "
                f"{layers.count} layers: {narrowest} for the narrowest)"))
        layer_config = config.replace(
            panel=self.panel, grid=None,
            ranks_per_node=layers.per_layer if config.ranks_per_node is not None else None)
        self.engine = self.reduction = self.layer_topo = self.fiber = None
        self.closed = False
        self._check_memory()
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
            self.engine = Engine(self.layer_topo, backend, self.layout.layer_layout(self.layer), layer_config,
                                 cuda_aware, c_storage=self.reduction.storage)
        self.plan = self.engine.plan
        #: The layer engine's step order (the same in every layer: their topologies span the same nodes).
        self.step_order = self.engine.step_order
        #: Steps of the longest layer plan: every rank's step records are that long (zeros after its own).
        self.steps = topo.comm.allreduce(len(self.plan), op=MPI.MAX)

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
        """The layer engine's GEMM operand orders, e.g. ``A:C B:F`` (:mod:`hpcmm.gemm_orders`)."""
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
    def _scratch_bytes(self, rank: int) -> int:
        """The reduction's scratch on ``rank`` (:func:`~hpcmm.transport.reduce.scratch_bytes`)."""
        member = self.layers.fiber(rank).index(rank)
        return scratch_bytes(self.layout.local_shapes_partial(rank), self.layers.count, member,
                             self.dtype.itemsize)

    def needed_bytes(self, panel: int | None = None) -> int:
        """This rank's blocks, panel rings, re-layout scratch, partial C and reduction scratch on its device.

        The partial C is the layer engine's C block (:func:`memory_needed`
        counts it), allocated by the reduction so that its fiber peers can read it.
        ``panel``: at that width instead of the engine's own.
        """
        layout = self.layout.layer_layout(self.layer)
        # A layer's channels span nodes when the job has several (its ranks are one per node at most q).
        ring = ring_depth(self.prefetch, spans_nodes=len(self.layers.nodes) > 1)
        relayout = scratch_slots(self.gemm_order, self.prefetch + 1)
        return memory_needed(layout, self.layer_rank, self.dtype.itemsize, panel or self.panel, ring, relayout) \
            + self._scratch_bytes(self.topo.rank)

    def _check_memory(self) -> None:
        """Collective: every rank of a device counts, whatever its layer (:func:`check_memory`)."""
        layout = self.layout
        self.device_bytes = check_memory(
            self.topo, self.backend, self.needed_bytes(),
            f"problem m={layout.m}, n={layout.n}, k={layout.k} {self.dtype.name} with {self.layers.count} layers")

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
