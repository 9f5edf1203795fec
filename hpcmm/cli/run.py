"""One run, end to end: checks → ``Matmul.plan()`` → inputs → timed ``execute()``s → verify → HDF5.

The library entry point :func:`run` takes a communicator (no hidden
``COMM_WORLD``), frees everything it made, and raises the same
:class:`~hpcmm.errors.HpcmmError` on every rank when something is wrong.
Its body is a list of steps; each step below is one function.

Example (two ranks)::

    mpiexec -n 2 python -c "import hpcmm; hpcmm.run(hpcmm.RunConfig(m=4096, out='r.h5'))"
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import sys

import numpy as np
from mpi4py import MPI

from ..io import h5io
from ..planning.algo_choice import Choice
from ..planning.arrangement import Arrangement
from ..execution.backend import host_memory
from ..execution.clock import SharedClock, product_window
from ..config import RunConfig
from ..dtypes import numpy_dtype
from ..execution.dynamic import DynamicEngine
from ..execution.engine import PHASES, Engine, IterationTimes
from ..errors import InputError, VerificationError, agree, collective
from ..matmul import Matmul
from ..execution.gemm_library import libraries_used
from ..io.inputs import MatrixSource, check_pair, generate_block, open_source
from ..execution.layered import LayeredEngine
from ..geometry.layout import Layout, predicted_imbalance
from ..io.metadata import topology_row, versions
from ..io.operands import apply_op
from ..planning.plan import Plan, agree_on, settings_fields
from .summary import busiest_device, dynamic_figures, gathered_figures, summary_figures
from ..planning.threads import attributes as blas_attributes
from ..execution.transport import PATHS, CudaAwareness
from ..verify import Check, Product, freivalds, full_check

__all__ = ["RunResult", "run"]


@dataclasses.dataclass
class RunResult:
    """What a run produced, on every rank."""

    summary: dict
    check: Check | None
    path: str | None
    topology: list[dict]
    awareness_reason: str


def run(config: RunConfig, comm: MPI.Comm | None = None, *, progress=None, write: bool = True) -> RunResult:
    """Multiply, verify and (if ``write``) save one product.  Collective over ``comm``.

    Raises
    ------
    InputError
        Bad settings, files or sizes (on every rank, before heavy work).
    VerificationError
        The product failed its check; the file is written, marked ``verified=False``.
    """
    comm = comm if comm is not None else MPI.COMM_WORLD
    say = progress if (progress is not None and comm.Get_rank() == 0) else (lambda msg: None)
    agree_on(comm, settings_fields(config), "setting")
    sources = _check_before_work(comm, config, write)
    shape = None if sources is None else check_pair(*sources, config.op_a, config.op_b)
    # The product is the library's: one plan, then warm-up and timed executes on hpcmm's own blocks.
    with Matmul.from_config(comm, config, shape=shape, progress=say) as matmul:
        plan = matmul.plan()
        parts = matmul.assembly
        config, engine, choice, backend = parts.config, parts.engine, parts.choice, parts.backend
        topo = engine.topo
        _check_bookkeeping(topo, engine, config)
        layout = engine.layout
        # The line starts "grid RxC |" as it always has (job scripts and their tests wait for it).
        say(f"grid {layout.grid}{_layers_note(choice)} | {choice.ran} | {layout.m}x{layout.k} @ "
            f"{layout.k}x{layout.n} {config.dtype} | {backend.name} | panel {engine.panel}, "
            f"{engine.steps} step(s) {engine.step_order}, prefetch {engine.prefetch} | balance {_balance_label(config)}")
        verify = _load_inputs(engine, config, sources, say)
        c0 = _initial_c(engine, config)
        timings = _timed_products(matmul, engine, config, c0, say)
        check = _verify(engine, config, verify, c0)
        setup = Setup(parts.awareness, parts.arrangement, choice, plan, matmul.plan_seconds)
        result = _gather_and_write(engine, config, setup, timings, check, write)
        _raise_if_wrong(check, result, config, write)
        return result


# -- before the work ----------------------------------------------------------------


def _check_before_work(comm, config: RunConfig, write: bool) -> tuple[MatrixSource, MatrixSource] | None:
    """Collective: the output path (never an input) and the input files; rank 0 looks, every rank learns."""
    sources = None
    with collective(comm):
        if comm.Get_rank() == 0:
            if write:
                inputs = [(flag, source[0]) for flag, source in (("--a", config.a), ("--b", config.b)) if source]
                h5io.check_output_path(config.out, config.overwrite, inputs)
            if config.a is not None:
                a = open_source("--a", *config.a)
                b = open_source("--b", *config.b)
                check_pair(a, b, config.op_a, config.op_b)
                for src in (a, b):
                    if numpy_dtype(src.dtype).kind == "c" and numpy_dtype(config.dtype).kind != "c":
                        raise InputError(f"{src.flag}={src.label} holds {src.dtype}: complex input needs "
                                         f"a complex --dtype, not --dtype={config.dtype}")
                sources = (a, b)
    return comm.bcast(sources, root=0)


def _balance_label(config: RunConfig) -> str:
    """``dynamic (auto)`` where the planner chose the mode, else the mode asked."""
    return config.balance + (f" ({config.balance_asked})" if config.balance_asked else "")


def _layers_note(choice: Choice) -> str:
    return "" if choice.layers is None else f" per layer, {choice.layers} layer(s)"


@dataclasses.dataclass(frozen=True)
class Setup:
    """What the ranks decided before the products, for the results."""

    awareness: CudaAwareness
    arrangement: Arrangement
    choice: Choice
    plan: Plan
    #: ``Matmul.plan()`` on the slowest rank: the set-up and, on GPUs, its one untimed product; the
    #: warm-up and timed products excluded.
    plan_seconds: float


#: Host bytes per step of one timed product that rank 0 holds for each rank once the products
#: are over: gemm, comm, wait and host seconds (4 float64) and 3 timeline events of 7 columns,
#: in several copies (the rank's own, gathered, stacked, written).  Measured: rank 0's peak grew
#: 1.0 KiB per step and timed product (20000 steps, 1 and 9 products, one rank, timeline kept).
GATHERED_BYTES_PER_STEP = 1024
#: The same without the timeline (4 of the 25 values per step).
GATHERED_BYTES_PER_STEP_NO_TIMELINE = 256
#: Host bytes per step that a rank holds while one product runs (events, marks, transfers).
LIVE_BYTES_PER_STEP = 2048


def timing_bytes(steps: int, iters: int, ranks: int, timeline: bool) -> int:
    """Host bytes rank 0 needs for the timings of a run: what it gathers, and one product's marks."""
    per_step = GATHERED_BYTES_PER_STEP if timeline else GATHERED_BYTES_PER_STEP_NO_TIMELINE
    return steps * (iters * ranks * per_step + LIVE_BYTES_PER_STEP)


def _check_bookkeeping(topo, engine: Engine, config: RunConfig) -> None:
    """Collective: refuse a run whose timings cannot fit in rank 0's host memory, before the products."""
    steps = engine.steps
    need = timing_bytes(steps, config.iters, topo.size, config.timeline)
    error = None
    if topo.rank == 0:
        free = host_memory()[0]
        if not engine.backend.on_gpu:
            free -= engine.device_bytes  # the blocks of the node's ranks share the host
        if need > free:
            error = InputError(
                f"{steps} steps x {config.iters} timed product(s) x {topo.size} rank(s): the timings need "
                f"{need / 2**30:.2f} GiB of host memory on rank 0, {max(free, 0) / 2**30:.2f} GiB available "
                f"(fewer --iters, a wider --panel, or --no-timeline)")
    agree(topo.comm, error)


def _load_inputs(engine: Engine, config: RunConfig, sources, say) -> str:
    """Collective: read or generate this rank's blocks into the engine; the check to run.

    Blocks are cast to ``--dtype`` first, so that a value finite on disk but
    beyond the range of ``--dtype`` counts as non-finite.
    """
    topo, layout = engine.topo, engine.layout
    blocks = None
    with collective(topo.comm):
        blocks = _read_blocks(topo.rank, layout, config, sources)
    report = _nonfinite_report(topo.comm, layout, topo.rank, blocks, sources, config.dtype)
    verify = config.verify
    if report is not None:
        if not config.allow_nonfinite:
            agree(topo.comm, InputError(f"{report}: refusing to run (pass --allow-nonfinite)"))
        say(f"warning: {report}; verification skipped")
        verify = "none"
    engine.load(*blocks)
    return verify


def _read_blocks(rank: int, layout: Layout, config: RunConfig, sources) -> tuple[np.ndarray, np.ndarray]:
    """This rank's blocks of op(A) and op(B): generated or read as stored, then op applied."""
    blocks = []
    for name, (rows, cols), op, shape in (("A", layout.a_block(rank), config.op_a, (layout.m, layout.k)),
                                          ("B", layout.b_block(rank), config.op_b, (layout.k, layout.n))):
        stored = (rows, cols) if op == "N" else (cols, rows)
        if sources is None:
            block = generate_block(config.seed, name, shape if op == "N" else shape[::-1], *stored, config.dtype)
        else:
            with np.errstate(over="ignore", invalid="ignore"):  # out of range becomes inf: reported next
                block = sources["AB".index(name)].read(*stored).astype(config.dtype, copy=False)
        blocks.append(apply_op(block, op))
    return tuple(blocks)


def _initial_c(engine, config: RunConfig):
    """C₀ of ``C ← α·op(A)·op(B) + β·C₀`` on this rank's device (generated from ``--seed``), or ``None`` where β = 0.

    Every execute reads C where β ≠ 0, so each product starts from a copy of it in hpcmm's C.
    """
    if config.beta == 0:
        return None
    rows, cols = engine.layout.c_block(engine.topo.rank)
    return engine.backend.from_host(generate_block(config.seed, "C", (engine.layout.m, engine.layout.n), rows, cols,
                                                   config.dtype))


def _nonfinite_report(comm, layout, rank, blocks, sources, dtype: str) -> str | None:
    """Collective: count NaN/Inf in the inputs over all ranks; describe the first one of each operand."""
    found = []
    for name, block, where in zip("AB", blocks, (layout.a_block(rank), layout.b_block(rank))):
        bad = ~np.isfinite(block)
        if bad.any():
            i, j = np.argwhere(bad)[0]
            found.append((name, int(bad.sum()), int(i + where[0][0]), int(j + where[1][0])))
    all_found = [x for part in comm.allgather(found) for x in part]
    if not all_found:
        return None
    totals: dict[str, list] = {}
    for name, count, i, j in all_found:
        total = totals.setdefault(name, [0, (i, j)])
        total[0] += count
        total[1] = min(total[1], (i, j))
    labels = {"A": ("A", ""), "B": ("B", "")}
    if sources is not None:
        # A value may be finite on disk and beyond the range of --dtype: say so.
        labels = {s.flag[-1].upper(): (f"{s.flag}={s.label}", "" if numpy_dtype(s.dtype) == numpy_dtype(dtype)
                                       else f" as --dtype={dtype}") for s in sources}
    parts = [f"{labels[n][0]}: {c} non-finite value(s){labels[n][1]}, first at ({p[0]}, {p[1]})"
             for n, (c, p) in sorted(totals.items())]
    return "; ".join(parts)


# -- the work -----------------------------------------------------------------------


@dataclasses.dataclass
class Timings:
    """The timed products of this rank, and the clock that places them on rank 0's."""

    products: list[IterationTimes]
    windows: list[tuple[float, float]]  # (first rank's start, last rank's end) on the shared clock
    clock: SharedClock


def _timed_products(matmul: Matmul, engine, config: RunConfig, c0, say) -> Timings:
    """Collective: ``--warmup`` untimed executes, then ``--iters`` timed ones, on hpcmm's own blocks (no copies).

    An execute's first step is an agreement over the ranks (a barrier); its product window is the
    engine's, from which the first rank's start and the last rank's end are taken (one clock).
    """
    comm = engine.topo.comm
    timings = Timings([], [], SharedClock(comm))
    a, b, c = engine.A, engine.B, engine.C
    for i in range(config.warmup + config.iters):
        timed = i >= config.warmup
        if c0 is not None and c.size:
            c[...] = c0  # β reads C: every product starts from C₀
        matmul.execute(a, b, c)
        product = matmul.last.product
        product.start = timings.clock.to_shared(product.start)
        first, last = product_window(comm, product.start, product.seconds)
        if timed:
            timings.products.append(product)
            timings.windows.append((first, last))
        say(f"{'iteration' if timed else 'warm-up'} {i + 1 - (config.warmup if timed else 0)}/"
            f"{config.iters if timed else config.warmup}: {last - first:.4f} s (first start to last end)")
    return timings


def _verify(engine: Engine, config: RunConfig, verify: str, c0=None) -> Check | None:
    """Collective: the check of C that ``verify`` names (``none``: no check)."""
    product = Product(engine.A, engine.B, engine.C, config.dtype, engine.c_stores, config.tf32, alpha=config.alpha,
                      beta=config.beta, c0=c0)
    if verify == "freivalds":
        return freivalds(engine.topo, engine.layout, engine.backend, product, config.seed)
    if verify == "full":
        return full_check(engine.topo, engine.layout, engine.backend, product)
    return None


def _raise_if_wrong(check: Check | None, result: RunResult, config: RunConfig, write: bool) -> None:
    if check is None or check.passed:
        return
    error = VerificationError(
        f"verification failed: {check.method} residual {check.residual:.3e} > tolerance "
        f"{check.tolerance:.3e}" + (f" (results in {config.out}, marked verified=False)" if write else "")
    )
    error.agreed = True  # every rank holds the same check (reduced over the ranks)
    error.summary = result.summary  # the CLI prints it all the same
    raise error


# -- gather, summarize, write -------------------------------------------------------


@dataclasses.dataclass
class RankReport:
    """What each rank sends rank 0 after the products."""

    topology: dict
    iteration_seconds: np.ndarray  # (iters,) this rank's own start to end
    step_seconds: np.ndarray  # (iters, steps, 3)
    host_seconds: np.ndarray  # (iters, steps)
    starts: np.ndarray  # (iters,) on the shared clock
    clock_uncertainty: float
    timeline: np.ndarray | None  # (events, 7): rank, iteration, then the engine's 5 columns
    transfers: list[tuple[int, int, str, int]]
    memory: dict
    reduce_seconds: np.ndarray | None = None  # (iters,) 2.5D: the reduce-scatter inside each product
    plan: list[dict] = dataclasses.field(default_factory=list)  # this rank's steps, rows of /timings/plans
    gemms: list[dict] = dataclasses.field(default_factory=list)  # this rank's GEMM shapes, rows of /timings/gemms
    tiles: list[dict] | None = None  # --balance dynamic: the tiles this rank computed, rows of /timings/tiles


def _rank_report(engine: Engine, config: RunConfig, arrangement: Arrangement, timings: Timings) -> RankReport:
    rank, products, nsteps = engine.topo.rank, timings.products, engine.steps
    timeline = None
    if config.timeline and products:
        timeline = np.concatenate([
            np.column_stack([np.full(len(t.timeline), rank), np.full(len(t.timeline), i), t.timeline])
            for i, t in enumerate(products)
        ]) if any(len(t.timeline) for t in products) else np.zeros((0, 7))
    backend = engine.backend
    layered = isinstance(engine, LayeredEngine)
    layered_facts = engine.rank_facts() if layered else {}
    return RankReport(
        topology=topology_row(engine.topo, backend) | arrangement.rank_facts(rank) | layered_facts,
        iteration_seconds=np.array([t.seconds for t in products]),
        step_seconds=np.stack([t.steps for t in products]) if products else np.zeros((0, nsteps, len(PHASES))),
        host_seconds=np.stack([t.host for t in products]) if products else np.zeros((0, nsteps)),
        starts=np.array([t.start for t in products]),
        clock_uncertainty=timings.clock.uncertainty,
        timeline=timeline,
        transfers=[(src, dst, path, nbytes) for (src, dst, path), nbytes in engine.bytes_by_pair.items()],
        memory={"rank": rank, "peak_bytes": int(backend.peak_memory()), "needed_bytes": int(engine.needed_bytes()),
                "operand_bytes": int(engine.choices.operand_bytes), "free_bytes": int(engine.choices.free_bytes),
                "device_used_bytes": backend.device_used(), "device": "gpu" if backend.on_gpu else "cpu"},
        reduce_seconds=np.array([t.reduce for t in products]) if layered else None,
        plan=[dict(rank=rank, **_step_row(s)) for s in engine.plan],
        gemms=[dict(rank=rank, **row) for row in backend.gemm_rows()],
        tiles=[dict(product=i, rank=rank, owner=owner, tile=tile, row0=row0, row1=row1, seconds=seconds)
               for i, t in enumerate(products) for owner, tile, row0, row1, seconds in t.tiles]
        if isinstance(engine, DynamicEngine) else None,
    )


def _step_row(step) -> dict:
    """A SUMMA step as a row of ``/timings/steps`` and ``/timings/plans``."""
    return dict(index=step.index, k0=step.k0, k1=step.k1, a_root=step.a_root, b_root=step.b_root)


def _results(engine: Engine, config: RunConfig, setup: Setup, reports: list[RankReport],
             figures, summary: dict, clock_method: str) -> h5io.Results:
    """Rank 0: the results file's record."""
    topo, layout, backend, awareness = engine.topo, engine.layout, engine.backend, setup.awareness
    attributes = config.as_attributes()
    attributes.update(m=layout.m, n=layout.n, k=layout.k, grid=str(layout.grid), panel=engine.panel,
                      panel_auto=engine.panel_auto, prefetch=engine.prefetch, ring=engine.ring,
                      backend=backend.name, steps=engine.steps, step_order_used=engine.step_order,
                      cuda_aware_mpi_decision=awareness.aware, cuda_aware_mpi_reason=awareness.reason,
                      ranks_per_node=topo.ranks_per_node or 0, nodes=topo.vnode_count)
    attributes.update(setup.arrangement.attributes(layout))
    attributes.update(setup.plan.attributes(), plan_seconds=setup.plan_seconds)
    attributes.update(blas_attributes())
    timelines = [r.timeline for r in reports if r.timeline is not None]
    return h5io.Results(
        root={"created": datetime.datetime.now(datetime.timezone.utc).isoformat(),
              "command": " ".join(config.argv if config.argv is not None else sys.argv),
              "ranks": topo.size},
        config=attributes,
        versions=versions(backend),
        topology=figures.topology,
        steps=[_step_row(s) for s in engine.plan],
        iteration_seconds=figures.iteration_seconds,
        step_seconds=figures.step_seconds,
        timeline=np.concatenate(timelines) if timelines else None,
        transfers=figures.transfers,
        memory=[r.memory for r in reports],
        summary=summary,
        c_shape=(layout.m, layout.n) if config.save_c else None,
        c_dtype=config.dtype,
        extra={"timings": (
            {"clock": clock_method, "clock_uncertainty": max(r.clock_uncertainty for r in reports)},
            {"product_seconds": figures.product_seconds, "start_seconds": figures.start_seconds,
             "product_start_seconds": figures.product_start_seconds,
             "host_seconds": figures.host_seconds, "plans": [row for r in reports for row in r.plan],
             "gemms": [row for r in reports for row in r.gemms],
             **({"tiles": [row for r in reports for row in r.tiles]} if reports[0].tiles is not None else {}),
             **({"reduce_seconds": np.stack([r.reduce_seconds for r in reports])}
                if reports[0].reduce_seconds is not None else {})})},
    )


def _engine_workers(engine) -> tuple[int, ...]:
    """The ranks that compute: with ``--balance dynamic``, the tile workers; else every rank."""
    return tuple(getattr(engine, "workers", None) or range(engine.topo.size))


def _block_columns(engine) -> list[int]:
    """Each rank's C block columns: a row of its tiles is this wide (``--balance dynamic``, one layer)."""
    layout = engine.layout
    return [layout.extent(layout.c_block(rank)[1]) for rank in range(engine.topo.size)]


def _predicted_imbalance(engine) -> float:
    """The blocks' predicted imbalance (2.5D: of one layer's grid; every layer has the same rows and columns)."""
    if isinstance(engine, LayeredEngine):
        return predicted_imbalance(engine.layout.layer_layout(0))
    return predicted_imbalance(engine.layout)


def _gather_and_write(engine: Engine, config: RunConfig, setup: Setup, timings: Timings,
                      check: Check | None, write: bool) -> RunResult:
    """Collective: rank 0 gathers every rank's report, works out the summary and (if ``write``) writes the file."""
    topo = engine.topo
    comm, rank = topo.comm, topo.rank
    reports = comm.gather(_rank_report(engine, config, setup.arrangement, timings), root=0)
    summary = topology = tmp = error = None
    if rank == 0:
        try:
            figures = gathered_figures(reports, timings.windows, PATHS)
            topology = figures.topology
            summary = summary_figures(m=engine.layout.m, n=engine.layout.n, k=engine.layout.k, dtype=config.dtype,
                                      ranks=topo.size, gpus=figures.gpus, product_seconds=figures.product_seconds,
                                      step_seconds=figures.step_seconds, host_seconds=figures.host_seconds,
                                      check=check, paths=figures.paths, workers=_engine_workers(engine))
            summary.update(panel=engine.panel, prefetch=engine.prefetch, gemm_order=engine.gemm_order_label,
                           gemm_library_used=libraries_used([row for r in reports for row in r.gemms],
                                                            engine.backend.on_gpu),
                           peak_memory_bytes_max=max(r.memory["peak_bytes"] for r in reports),
                           **busiest_device([r.topology for r in reports], [r.memory for r in reports]),
                           **(dynamic_figures([row for r in reports for row in r.tiles], _engine_workers(engine),
                                              getattr(engine, "vnodes", None), _block_columns(engine))
                              if reports[0].tiles is not None else {}),
                           predicted_imbalance=_predicted_imbalance(engine), plan_seconds=setup.plan_seconds,
                           **setup.arrangement.summary(), balance_asked=config.balance_asked or config.balance,
                           **setup.choice.summary())
            if write:
                # Guarded: removed even should this process be killed while it writes.
                tmp = h5io.temporary_path(config.out, guarded=True)
                h5io.write_results(tmp, _results(engine, config, setup, reports, figures, summary,
                                                 timings.clock.method))
        except Exception as exc:  # noqa: BLE001 - every rank learns of it
            error = exc
    tmp = comm.bcast(tmp, root=0)
    try:
        agree(comm, error)
        if write:
            _write_c_and_publish(engine, config, tmp)
    finally:
        if rank == 0 and tmp is not None:
            with contextlib.suppress(OSError):
                h5io.remove_temporary(tmp)  # gone already once published
        h5io.release_guard(tmp)
    summary, topology = comm.bcast((summary, topology), root=0)
    return RunResult(summary, check, config.out if write else None, topology, setup.awareness.reason)


def _write_c_and_publish(engine: Engine, config: RunConfig, tmp: str) -> None:
    """Collective: every rank's block of C into the temporary file (``--save-c``), then rank 0 publishes it."""
    comm, rank = engine.topo.comm, engine.topo.rank
    if config.save_c:
        with collective(comm):
            h5io.write_c_block(comm, tmp, engine.backend.to_host(engine.C), *engine.layout.c_block(rank))
    with collective(comm):
        if rank == 0:
            h5io.publish(tmp, config.out, config.overwrite)
