"""One run, end to end: checks → topology → backend → blocks → SUMMA → verify → HDF5.

The library entry point :func:`run` takes a communicator (no hidden
``COMM_WORLD``), frees everything it made, and raises the same
:class:`~hpcmm.errors.HpcmmError` on every rank when something is wrong.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import sys
import time

import numpy as np
from mpi4py import MPI

from . import h5io
from .backend import make_backend
from .clock import SharedClock, product_window
from .config import RunConfig, parse_fault
from .engine import PHASES, Engine, memory_needed
from .errors import HpcmmError, InputError, VerificationError, agree, collective
from .inputs import MatrixSource, check_pair, generate_block, open_source
from .layout import Layout
from .metadata import topology_row, versions
from .summary import summary_figures
from .threads import attributes as blas_attributes
from .threads import limit_blas_threads
from .topology import Topology
from .transport import PATHS, decide
from .verify import Check, check_full_size, freivalds, full_check

__all__ = ["RunResult", "run"]


def _fault(config: RunConfig, rank: int, phase: str) -> bool:
    """The test-only fault hook ``HPCMM_FAULT=RANK:PHASE[:ACTION]`` (docs/reliability.md).

    At ``phase`` on ``rank``: raise ``RuntimeError`` (a failure of this rank
    only), or hang until a signal ends the process.  For ``corrupt`` it only
    answers whether to perturb C.
    """
    if config.fault is None:
        return False
    who, where, action = parse_fault(config.fault)
    if who != rank or where != phase:
        return False
    if phase == "corrupt":
        return True
    if action == "hang":
        while True:
            time.sleep(1.0)
    raise RuntimeError(f"fault injected by HPCMM_FAULT={config.fault}")


@dataclasses.dataclass
class RunResult:
    """What a run produced, on every rank."""

    summary: dict
    check: Check | None
    path: str | None
    topology: list[dict]
    awareness_reason: str


def _inspect_inputs(comm, config: RunConfig) -> tuple[MatrixSource, MatrixSource] | None:
    """Rank 0 opens the input files; every rank gets the verdict."""
    if config.a is None:
        return None
    sources = None
    with collective(comm):
        if comm.Get_rank() == 0:
            a = open_source("--a", *config.a)
            b = open_source("--b", *config.b)
            check_pair(a, b)
            for src in (a, b):
                if np.dtype(src.dtype).kind == "c" and np.dtype(config.dtype).kind != "c":
                    raise InputError(f"{src.flag}={src.label} holds {src.dtype}: complex input needs "
                                     f"a complex --dtype, not --dtype={config.dtype}")
            sources = (a, b)
    return comm.bcast(sources, root=0)


def _load_blocks(topo, layout, config, sources):
    rank = topo.rank
    (ar, ac), (br, bc) = layout.a_block(rank), layout.b_block(rank)
    if sources is None:
        a = generate_block(config.seed, "A", (layout.m, layout.k), ar, ac, config.dtype)
        b = generate_block(config.seed, "B", (layout.k, layout.n), br, bc, config.dtype)
        return a, b
    a = sources[0].read(ar, ac)
    b = sources[1].read(br, bc)
    if np.dtype(config.dtype).kind != "c" and (a.dtype.kind == "c" or b.dtype.kind == "c"):
        raise InputError(f"complex input needs a complex --dtype, not --dtype={config.dtype}")
    return a, b


def _nonfinite_report(comm, layout, rank, blocks, sources) -> str | None:
    """Count NaN/Inf in the inputs over all ranks; describe the first one."""
    found = []
    for (name, block), where in zip(blocks, (layout.a_block(rank), layout.b_block(rank))):
        bad = ~np.isfinite(block)
        if bad.any():
            i, j = np.argwhere(bad)[0]
            found.append((name, int(bad.sum()), int(i + where[0][0]), int(j + where[1][0])))
    everyone = [x for part in comm.allgather(found) for x in part]
    if not everyone:
        return None
    totals: dict[str, list] = {}
    for name, count, i, j in everyone:
        t = totals.setdefault(name, [0, (i, j)])
        t[0] += count
        t[1] = min(t[1], (i, j))
    labels = {"A": "A", "B": "B"} if sources is None else {s.flag[-1].upper(): f"{s.flag}={s.label}" for s in sources}
    parts = [f"{labels[n]}: {c} non-finite value(s), first at ({p[0]}, {p[1]})" for n, (c, p) in sorted(totals.items())]
    return "; ".join(parts)


def run(config: RunConfig, comm: MPI.Comm | None = None, *, cuda_aware_source: str = "--cuda-aware-mpi",
        progress=None, argv: list[str] | None = None, write: bool = True) -> RunResult:
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
    if config.fault is not None and parse_fault(config.fault)[0] >= comm.Get_size():
        raise InputError(f"HPCMM_FAULT={config.fault}: no rank {parse_fault(config.fault)[0]} "
                         f"among {comm.Get_size()} ranks")
    if write:
        with collective(comm):
            if comm.Get_rank() == 0:
                h5io.check_output_path(config.out, config.overwrite)
    sources = _inspect_inputs(comm, config)
    topo = Topology.create(comm, config)
    blas = limit_blas_threads(topo)  # each rank's share of its node's cores (hpcmm/threads.py)
    backend = engine = None
    collective_exit = True
    try:
        with collective(topo.comm):
            backend = make_backend(config.device, topo.local_rank, topo.local_size)
        kinds = topo.comm.allgather(backend.on_gpu)
        if len(set(kinds)) > 1:
            agree(topo.comm, InputError(f"--device={config.device}: some ranks found a GPU and some did not"))
        _fault(config, topo.rank, "setup")
        if sources is not None:
            m, n, k = check_pair(*sources)
        else:
            config = config.with_default_size(backend.on_gpu)
            m, n, k = config.m, config.n, config.k
        layout = Layout(m, n, k, topo.grid)
        if config.verify == "full":
            check_full_size(m, n, k, config.dtype)  # same verdict on every rank, before the work
        awareness = decide(config.cuda_aware_mpi, option_source=cuda_aware_source)
        if backend.on_gpu and not awareness.known and topo.vnode_count > 1:
            say(awareness.hint)
        with collective(topo.comm):
            if config.panel is not None and config.panel > k:
                raise InputError(f"--panel={config.panel}: wider than k={k}")
        engine = Engine(topo, backend, layout, config.dtype, config.panel, config.prefetch,
                        awareness.aware, tf32=config.tf32, timeline=config.timeline)
        say(f"grid {topo.grid} | {layout.m}x{layout.k} @ {layout.k}x{layout.n} {config.dtype} | "
            f"{backend.name} | panel {engine.panel}, {len(engine.plan)} step(s), prefetch {engine.prefetch}")
        blocks = None
        with collective(topo.comm):
            blocks = _load_blocks(topo, layout, config, sources)
        verify = config.verify
        report = _nonfinite_report(topo.comm, layout, topo.rank, zip("AB", blocks), sources)
        if report is not None:
            if not config.allow_nonfinite:
                agree(topo.comm, InputError(f"{report}: refusing to run (pass --allow-nonfinite)"))
            say(f"warning: {report}; verification skipped")
            verify = "none"
        engine.load(*blocks)
        del blocks
        clock = SharedClock(topo.comm)
        times, windows = [], []
        for i in range(config.warmup + config.iters):
            topo.comm.Barrier()
            if i == 0:
                _fault(config, topo.rank, "multiply")
            timed = i >= config.warmup
            engine.bytes_by_pair.clear()
            t = engine.multiply(record=True)
            # A product lasts from the first rank's start to the last rank's end (one clock).
            t.start = clock.to_shared(t.start)
            first, last = product_window(topo.comm, t.start, t.seconds)
            if timed:
                times.append(t)
                windows.append((first, last))
            say(f"{'iteration' if timed else 'warm-up'} {i + 1 - (config.warmup if timed else 0)}/"
                f"{config.iters if timed else config.warmup}: {last - first:.4f} s (first start to last end)")
        if _fault(config, topo.rank, "corrupt") and engine.C.size:
            engine.C[0, 0] += 100
        _fault(config, topo.rank, "verify")
        check = None
        if verify == "freivalds":
            check = freivalds(topo, layout, backend, engine.A, engine.B, engine.C, config.seed,
                              config.dtype, len(engine.plan), config.tf32)
        elif verify == "full":
            check = full_check(topo, layout, backend, engine.A, engine.B, engine.C, config.dtype,
                               len(engine.plan), config.tf32)
        result = _gather_and_write(config, topo, backend, layout, engine, awareness, (times, windows, clock),
                                   check, argv, write)
        if check is not None and not check.passed:
            error = VerificationError(
                f"verification failed: {check.method} residual {check.residual:.3e} > tolerance "
                f"{check.tolerance:.3e}" + (f" (results in {config.out}, marked verified=False)" if write else "")
            )
            error.summary = result.summary  # the CLI prints it all the same
            raise error
        return result
    except HpcmmError:
        raise  # raised on every rank: the collective tear-down below is safe
    except BaseException:
        # This rank alone failed while the others wait in a collective: tearing down
        # collectively would hang it too.  The caller ends the job (cli.main: MPI.Abort).
        collective_exit = False
        raise
    finally:
        blas.restore()
        if collective_exit:
            if engine is not None:
                engine.close()
            if backend is not None:
                backend.close()
            topo.close()


def _gather_and_write(config, topo, backend, layout, engine, awareness, timing, check, argv, write) -> RunResult:
    comm, rank = topo.comm, topo.rank
    times, windows, clock = timing
    iters = np.array([t.seconds for t in times])
    steps = np.stack([t.steps for t in times]) if times else np.zeros((0, len(engine.plan), len(PHASES)))
    host = np.stack([t.host for t in times]) if times else np.zeros((0, len(engine.plan)))
    timeline = None
    if config.timeline and times:
        timeline = np.concatenate([
            np.column_stack([np.full(len(t.timeline), rank), np.full(len(t.timeline), i), t.timeline])
            for i, t in enumerate(times)
        ]) if any(len(t.timeline) for t in times) else np.zeros((0, 7))
    transfers = [(src, dst, path, nbytes) for (src, dst, path), nbytes in engine.bytes_by_pair.items()]
    need = memory_needed(layout, rank, np.dtype(config.dtype).itemsize, engine.panel, engine.ring)
    mine = {
        "topology": topology_row(topo, backend),
        "iters": iters,
        "steps": steps,
        "host": host,
        "starts": np.array([t.start for t in times]),
        "clock_uncertainty": clock.uncertainty,
        "timeline": timeline,
        "transfers": transfers,
        "memory": {"rank": rank, "peak_bytes": int(backend.peak_memory()), "needed_bytes": int(need),
                   "device": "gpu" if backend.on_gpu else "cpu"},
    }
    if rank != 0 or not write:
        _fault(config, rank, "write")
    everyone = comm.gather(mine, root=0)
    vers = versions(backend)
    summary = topo_rows = None
    path = config.out if write else None
    tmp = None
    error = None
    if rank == 0:
        try:
            topo_rows = [e["topology"] for e in everyone]
            iteration_seconds = np.stack([e["iters"] for e in everyone])
            step_seconds = np.stack([e["steps"] for e in everyone])
            host_seconds = np.stack([e["host"] for e in everyone])
            firsts = np.array([w[0] for w in windows])
            product_seconds = np.array([last - first for first, last in windows])
            start_seconds = np.stack([e["starts"] for e in everyone]) - firsts
            rows = [dict(src=s, dst=d, path=p, bytes=b) for e in everyone for (s, d, p, b) in e["transfers"]]
            paths = {r["path"] for r in rows if r["path"] in PATHS}
            gpus = len({(r["host"], r["gpu_uuid"] or r["gpu_index"]) for r in topo_rows if r["gpu_index"] >= 0})
            summary = summary_figures(m=layout.m, n=layout.n, k=layout.k, dtype=config.dtype, ranks=topo.size,
                                      gpus=gpus, product_seconds=product_seconds, step_seconds=step_seconds,
                                      host_seconds=host_seconds, check=check, paths=paths)
            summary["panel"] = engine.panel
            summary["prefetch"] = engine.prefetch
            summary["peak_memory_bytes_max"] = max(e["memory"]["peak_bytes"] for e in everyone)
            if write:
                # Guarded: removed even should this process be killed while it writes.
                tmp = h5io.temporary_path(config.out, guarded=True)
                cfg = config.as_attributes()
                cfg.update(m=layout.m, n=layout.n, k=layout.k, grid=str(topo.grid), panel=engine.panel,
                           panel_auto=engine.panel_auto, prefetch=engine.prefetch, ring=engine.ring,
                           backend=backend.name, steps=len(engine.plan),
                           cuda_aware_mpi_decision=awareness.aware, cuda_aware_mpi_reason=awareness.reason,
                           ranks_per_node=topo.ranks_per_node or 0, nodes=topo.vnode_count)
                cfg.update(blas_attributes())
                tl = [e["timeline"] for e in everyone if e["timeline"] is not None]
                h5io.write_results(tmp, {
                    "root": {"created": datetime.datetime.now(datetime.timezone.utc).isoformat(),
                             "command": " ".join(argv if argv is not None else sys.argv),
                             "ranks": topo.size},
                    "config": cfg,
                    "versions": vers,
                    "topology": topo_rows,
                    "steps": [dict(index=s.index, k0=s.k0, k1=s.k1, a_root=s.a_root, b_root=s.b_root)
                              for s in engine.plan],
                    "iteration_seconds": iteration_seconds,
                    "step_seconds": step_seconds,
                    "timeline": np.concatenate(tl) if tl else None,
                    "transfers": rows,
                    "memory": [e["memory"] for e in everyone],
                    "summary": summary,
                    "c_shape": (layout.m, layout.n) if config.save_c else None,
                    "c_dtype": config.dtype,
                    "extra": {"timings": (
                        {"clock": clock.method,
                         "clock_uncertainty": max(e["clock_uncertainty"] for e in everyone)},
                        {"product_seconds": product_seconds, "start_seconds": start_seconds,
                         "host_seconds": host_seconds})},
                })
                _fault(config, rank, "write")  # rank 0: the temporary file exists, unpublished
        except Exception as exc:  # noqa: BLE001 - every rank learns of it
            error = exc
    tmp = comm.bcast(tmp, root=0)
    try:
        agree(comm, error)
        if write and config.save_c:
            err = None
            try:
                h5io.write_c_block(comm, tmp, backend.to_host(engine.C), *layout.c_block(rank))
            except Exception as exc:  # noqa: BLE001
                err = exc
            agree(comm, err)
        if write:
            with collective(comm):
                if rank == 0:
                    h5io.publish(tmp, config.out, config.overwrite)
    finally:
        if rank == 0 and tmp is not None:
            with contextlib.suppress(OSError):
                h5io.remove_temporary(tmp)  # gone already once published
        h5io.release_guard(tmp)
    summary = comm.bcast(summary, root=0)
    topo_rows = comm.bcast(topo_rows, root=0)
    return RunResult(summary, check, path, topo_rows, awareness.reason)
