"""Builds what one product needs, on every rank: placement, algorithm, arrangement, engine.

The one path from a :class:`~hpcmm.config.RunConfig` to a running engine,
taken by the command line's :func:`hpcmm.run` and by the library's
:meth:`hpcmm.Matmul.plan` alike::

    with assembled(comm, config, shape_from, load) as parts:   # collective
        parts.engine.multiply()

Every step is collective and every verdict the same on every rank: the
settings are compared across the ranks first (:func:`~hpcmm.planning.plan.agree_on`),
so that a rank given another value fails at once instead of breaking a
broadcast later.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
from collections.abc import Callable, Iterator

import numpy as np
from mpi4py import MPI

from .algo_choice import Choice, Placed, choose
from .algorithms.layers import Layers
from .arrangement import Arrangement, Sharing, arrange, arrangement_for, gather_sharing
from .balance import mode_for, product_rate, weights_for
from .choices import EngineChoices, layered_choices, summa_choices
from ..config import RunConfig
from ..execution.dynamic import DynamicEngine
from ..execution.engine import Engine
from ..errors import InputError, collective
from ..execution.layered import LayeredEngine, node_ranks
from ..geometry.layout import Layout
from ..execution.placement import arranged, placement
from .plan import Plan, agree_on
from ..dtypes import product_flops
from .threads import limit_blas_threads
from ..execution.transport import CudaAwareness, decide
from ..verify import check_full_size

__all__ = ["Assembly", "PRODUCT_BALANCE_MOST", "PRODUCT_BALANCE_SECONDS", "Semantics", "assembled", "engine_for"]


@dataclasses.dataclass
class Assembly:
    """What :func:`assembled` built, for the products and the record of the run."""

    launch: object  # the topology in launch order
    backend: object
    config: RunConfig  # with the sizes resolved
    shape: tuple[int, int, int]
    awareness: CudaAwareness
    choice: Choice
    arrangement: Arrangement
    nodes: list[list[int]]
    plan: Plan  # agreed by every rank before the engine's buffers were made
    engine: Engine | LayeredEngine


@dataclasses.dataclass(frozen=True)
class Semantics:
    """What the product computes: ``C ← α·op(A)·op(B) + β·C`` (part of the plan, not of the engine)."""

    alpha: complex | float = 1.0
    beta: complex | float = 0.0
    op_a: str = "N"
    op_b: str = "N"


@contextlib.contextmanager
def assembled(comm: MPI.Comm, config: RunConfig, shape_from: Callable[[object, RunConfig], tuple],
              load: Callable[[object], None], say: Callable[[str], None] = lambda message: None, *,
              semantics: Semantics = Semantics()) -> Iterator[Assembly]:
    """Collective over ``comm``: plan the product of ``config``, build its engine, yield the :class:`Assembly`.

    ``shape_from(backend, config)`` gives ``(config, (m, n, k))`` once the
    device is known (the default sizes differ between CPU and GPU);
    ``load(engine)`` fills an engine's blocks with data, for the untimed
    products that ``--balance product`` measures.
    """
    with placement(comm, config) as (launch, backend), _blas_threads(launch):
        config, shape = shape_from(backend, config)
        awareness = decide(config.cuda_aware_mpi, option_source=config.origin("cuda_aware_mpi"))
        nodes = node_ranks(launch)
        # On CPUs MPI moves the blocks' own (host) buffers: the model's "mpi" path, never "staged".
        choice = _choose(launch, config, shape, nodes, awareness.aware or not backend.on_gpu)
        sharing = gather_sharing(launch.comm, launch.host, backend)
        config = _resolve_balance(launch, backend, config, choice, sharing)
        arrangement = arrange(launch.comm, launch.host, backend, config, shape, launch.vnode_count, sharing)
        if arrangement.hint:  # ranks share a GPU without MPS
            say(arrangement.hint)
        if backend.on_gpu and not awareness.known and launch.vnode_count > 1:
            say(awareness.hint)
        if choice.layers is not None:  # 2.5D layers take near-equal blocks in launch order
            arrangement = dataclasses.replace(arrangement, order=tuple(range(launch.size)), weighted=False)
        elif config.balance == "product" and launch.size > 1:
            arrangement = _balance_by_product(launch, backend, config, shape, arrangement, awareness.aware, choice,
                                              nodes, load, say)
        with _engine(launch, backend, config, shape, arrangement, awareness.aware, choice, nodes,
                     semantics) as (plan, engine):
            yield Assembly(launch, backend, config, shape, awareness, choice, arrangement, nodes, plan, engine)


@contextlib.contextmanager
def _blas_threads(topo):
    """Each rank's share of its node's cores for the BLAS (hpcmm/planning/threads.py), given back at the end."""
    setting = limit_blas_threads(topo)
    try:
        yield setting
    finally:
        setting.restore()


def _resolve_balance(launch, backend, config: RunConfig, choice: Choice, sharing: Sharing) -> RunConfig:
    """``config`` with ``--balance auto`` replaced by the mode it stands for
    (:func:`~hpcmm.planning.balance.mode_for`), from the facts every rank gathered alike (``sharing``)."""
    if config.balance != "auto":
        return config
    mode = mode_for("auto", nodes=launch.vnode_count, on_gpu=backend.on_gpu, sliced=sharing.time_sliced,
                    summa=choice.layers is None)
    return dataclasses.replace(config, balance=mode, balance_asked="auto")


def _choose(launch, config: RunConfig, shape, nodes, aware: bool) -> Choice:
    """Collective: the algorithm (``--algo``), the same verdict on every rank, before any work."""
    placed = Placed(launch.size, tuple(len(n) for n in nodes), max(launch.comm.allgather(launch.local_size)),
                    bool(aware))
    with collective(launch.comm):  # the same inputs everywhere, so the same verdict
        return choose(config.algo, placed, shape, config.dtype, tf32=config.tf32, machine=config.machine,
                      panel=config.panel, prefetch=config.prefetch, origin=config.origin("algo"))


@contextlib.contextmanager
def _engine(launch, backend, config: RunConfig, shape, arrangement: Arrangement, aware: bool, choice: Choice,
            nodes, semantics: Semantics = Semantics()):
    """Collective: plan ``choice`` (SUMMA over the arranged grid, or the 2.5D layers), agree, build its engine.

    Yields ``(plan, engine)``.  The choices (:mod:`hpcmm.planning.choices`) and the
    :class:`~hpcmm.planning.plan.Plan` come first, and every rank compares the plan
    (:func:`~hpcmm.planning.plan.agree_on`) before any buffer exists.
    """
    if choice.layers is None:
        with arranged(launch, config, arrangement.order, arrangement.grid) as topo:
            layout = _layout(topo, config, shape, arrangement)
            choices = summa_choices(topo, backend, layout, config, worker_of=arrangement.tile_worker_of)
            weights = () if layout.weights is None else tuple(layout.weights)
            plan = _plan(launch, backend, config, shape, aware, semantics, choices, algorithm="summa", layers=1,
                         grid=str(layout.grid), rank_order=tuple(arrangement.order), weights=weights,
                         tile_workers=choices.workers, tile_gather=choices.gather)
            executor = DynamicEngine if config.balance == "dynamic" else Engine
            with executor(topo, backend, layout, choices, config, aware) as engine:
                yield plan, engine
        return
    if config.balance == "dynamic":  # the same choice on every rank
        raise InputError(f"--balance dynamic runs summa, not {choice.ran}: pass --algo summa")
    if config.verify == "full":
        with collective(launch.comm):
            check_full_size(*shape, config.dtype)
    layers = Layers.build(nodes, choice.layers)
    grid, layout, choices = layered_choices(launch, backend, config, shape, layers)
    plan = _plan(launch, backend, config, shape, aware, semantics, choices, algorithm="2.5d", layers=layers.count,
                 grid=str(grid), rank_order=tuple(range(launch.size)), weights=())
    with LayeredEngine(launch, backend, config, layers, grid, layout, choices, aware) as engine:
        yield plan, engine


def _plan(launch, backend, config: RunConfig, shape, aware: bool, semantics: Semantics, choices: EngineChoices,
          **geometry) -> Plan:
    """Collective over the launch communicator: the :class:`~hpcmm.planning.plan.Plan`, compared by every rank.

    Every field is the same on every rank (the per-rank ones are gathered);
    a rank whose plan differs makes it an :class:`~hpcmm.errors.InputError` on
    every rank, naming the field (:func:`~hpcmm.planning.plan.agree_on`).
    """
    comm = launch.comm
    devices = tuple(comm.allgather(backend.device_id if backend.on_gpu else -1))
    m, n, k = shape
    plan = Plan(
        m=m, n=n, k=k, dtype=config.dtype, alpha=semantics.alpha, beta=semantics.beta, op_a=semantics.op_a,
        op_b=semantics.op_b, ranks=launch.size, nodes=launch.vnode_count, backend=backend.name, devices=devices,
        ranks_per_device=max(collections.Counter(devices).values()), balance=config.balance,
        panel=choices.panel, panel_auto=choices.panel_auto, prefetch=choices.prefetch, steps=choices.steps,
        step_order=choices.step_order, gemm_order=choices.gemm_order_label, gemm_library=config.gemm_library,
        tf32=config.tf32, cuda_aware_mpi=bool(aware), memory_bytes=tuple(comm.allgather(choices.needed_bytes)),
        **geometry)
    agree_on(comm, plan.fields(), "plan field")
    return plan


#: ``--balance product`` measures untimed products until this many seconds have passed (at least
#: one, at most :data:`PRODUCT_BALANCE_MOST`): one product of milliseconds on time-sliced GPUs gives
#: weights far apart for ranks of equal shares (docs/shared-gpus.md).
PRODUCT_BALANCE_SECONDS = 0.25
#: The most untimed products ``--balance product`` measures.
PRODUCT_BALANCE_MOST = 32


def _balance_by_product(launch, backend, config: RunConfig, shape, arrangement: Arrangement, aware: bool,
                        choice: Choice, nodes, load, say) -> Arrangement:
    """Collective: ``--balance product``: the arrangement whose blocks follow each rank's rate in a product.

    With the ``share`` blocks (``arrangement``), one warm-up product, then
    products until :data:`PRODUCT_BALANCE_SECONDS` have passed, all untimed
    for the results; a rank's rate is its flops over its GEMM time in them
    (:func:`~hpcmm.planning.balance.product_rate`), and the blocks of the timed products
    follow those rates.  Where some rank did no work (an empty block) nothing
    can be weighed, and the ``share`` blocks stay.
    """
    with _engine(launch, backend, config, shape, arrangement, aware, choice, nodes) as (_, engine):
        load(engine)
        comm = engine.topo.comm
        comm.Barrier()
        engine.multiply()  # loads kernels and maps the peers' buffers
        gemm_seconds, products, start = 0.0, 0, MPI.Wtime()
        while True:
            comm.Barrier()
            gemm_seconds += float(engine.multiply().steps[:, 0].sum())
            products += 1
            # One verdict for every rank (the slowest rank's clock), so all run the same products.
            if products >= PRODUCT_BALANCE_MOST or \
                    comm.allreduce(MPI.Wtime() - start, op=MPI.MAX) >= PRODUCT_BALANCE_SECONDS:
                break
        flops = products * product_flops(engine.m_loc, engine.n_loc, engine.layout.k, config.dtype)
        rate = product_rate(flops, gemm_seconds)
    backend.release_cached()  # the blocks of the new layout differ in size from the cached ones
    rates = tuple(launch.comm.allgather(rate))
    if not all(np.isfinite(rates)):
        say("balance product: some rank did no work in the untimed product; the blocks stay the share blocks")
        return arrangement
    balance = dataclasses.replace(arrangement.balance, weights=weights_for("product", arrangement.balance.devices,
                                                                          rates), rates=rates)
    face = "wide" if arrangement.face == "given" else arrangement.face  # config.grid decides where given
    with collective(launch.comm):  # the same inputs everywhere, so the same verdict
        return arrangement_for(balance, arrangement.mps, shape, config.grid, backend.on_gpu, face)


def _layout(topo, config: RunConfig, shape: tuple[int, int, int], arrangement: Arrangement) -> Layout:
    """Collective: the blocks of the arranged grid; what the sizes rule out."""
    layout = arrangement.layout(*shape)
    if config.verify == "full":
        with collective(topo.comm):
            check_full_size(*shape, config.dtype)
    return layout


def engine_for(topo, backend, layout: Layout, config: RunConfig, cuda_aware: bool = False) -> Engine:
    """Collective over ``topo``: a SUMMA engine on ``layout``, by the choices :func:`~hpcmm.planning.choices.summa_choices` makes.

    For probes and tests that drive one engine by hand; a run goes through :func:`assembled`.
    """
    return Engine(topo, backend, layout, summa_choices(topo, backend, layout, config), config, cuda_aware)
