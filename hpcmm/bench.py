"""``python -m hpcmm bench``: hpcmm against one GPU's own GEMM and against the peers.

For each case (``dtype:N`` or ``dtype:MxNxK``; ``tf32`` means float32 with
``--tf32``), in one run on the same GPUs:

* the one-GPU rate: ``cupy.matmul`` of the same global problem on each GPU
  (one rank per GPU, concurrently), median of repeated timed products;
* hpcmm's rate, exposed communication and verification, through :func:`hpcmm.run`;
* the efficiency: hpcmm ÷ (GPUs × one-GPU rate);
* cuBLASMp (nvmath-python) and Heat on the same global problem, where they
  import, with the ratio hpcmm ÷ peer.

``python -m hpcmm bench transport`` measures the data paths instead
(:mod:`hpcmm.bench_transport`).  Rank 0 prints a table; the HDF5 file
(``--out``, default ``hpcmm-bench.h5``) holds every figure.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import sys

import numpy as np
from mpi4py import MPI

from . import h5io
from .backend import make_backend
from .config import RunConfig
from .errors import InputError, collective
from .metadata import versions
from .peers import PeerUnavailable, cublasmp_seconds, heat_seconds
from .run import run
from .topology import Topology

__all__ = ["bench_main", "parse_cases", "one_gpu_seconds"]

DEFAULT_CASES = "float64:16384;float32:16384"


@dataclasses.dataclass(frozen=True)
class Case:
    dtype: str
    m: int
    n: int
    k: int
    tf32: bool = False

    @property
    def label(self) -> str:
        shape = f"{self.m}" if self.m == self.n == self.k else f"{self.m}x{self.n}x{self.k}"
        return f"{'tf32' if self.tf32 else self.dtype}:{shape}"

    @property
    def flops(self) -> float:
        return (8.0 if self.dtype.startswith("complex") else 2.0) * self.m * self.n * self.k


def parse_cases(text: str) -> list[Case]:
    """``"float64:16384;float32:30011x20011x16411"`` → cases."""
    cases = []
    for item in filter(None, (p.strip() for p in text.split(";"))):
        m = re.fullmatch(r"(\w+):(\d+)(?:x(\d+)x(\d+))?", item)
        if not m:
            raise InputError(f"--cases item {item!r}: expected DTYPE:N or DTYPE:MxNxK")
        dtype, tf32 = m.group(1), m.group(1) == "tf32"
        dtype = "float32" if tf32 else dtype
        size = [int(g) for g in m.groups()[1:] if g]
        mm, nn, kk = (size * 3)[:3] if len(size) == 1 else size
        try:
            RunConfig(m=mm, n=nn, k=kk, dtype=dtype, tf32=tf32)
        except InputError as exc:
            raise InputError(f"--cases item {item!r}: {exc}") from None
        cases.append(Case(dtype, mm, nn, kk, tf32))
    if not cases:
        raise InputError(f"--cases={text!r}: no case given")
    return cases


def one_gpu_seconds(backend, case: Case, iters: int = 5) -> float:
    """Median seconds of ``cupy.matmul`` (or numpy) of the whole problem on this device."""
    xp = backend.xp
    # The same distribution as hpcmm's own inputs (uniform in [-1, 1), every mantissa bit
    # random): data with zero low bits draws less power and runs at higher clocks.
    gen = xp.random.default_rng(7) if backend.on_gpu else np.random.default_rng(7)
    with backend.device if backend.on_gpu else contextlib.nullcontext():
        a = (gen.random((case.m, case.k), dtype=np.float64) * 2 - 1).astype(case.dtype)
        b = (gen.random((case.k, case.n), dtype=np.float64) * 2 - 1).astype(case.dtype)
    c = backend.empty((case.m, case.n), case.dtype)
    times = []
    compute = getattr(backend, "compute_stream", None)
    for i in range(iters + 1):
        t0 = backend.event(compute)
        if backend.on_gpu:
            # cupy's own matmul (cuBLAS), on our compute stream: the "plain cupy" reference.
            with compute:
                if case.tf32:
                    backend.gemm(xp.asfortranarray(a), b, c, accumulate=False, tf32=True)
                else:
                    xp.matmul(a, b, out=c)
        else:
            np.matmul(a, b, out=c)
        t1 = backend.event(compute)
        backend.event_synchronize(t1)
        if i:
            times.append(backend.elapsed(t0, t1))
    del a, b, c
    if backend.on_gpu:
        backend.cupy.get_default_memory_pool().free_all_blocks()
    return float(np.median(times))


def _baseline(comm, config, case: Case):
    """One-GPU seconds (mean over GPUs, one rank per GPU measuring), the GPU count, the backend."""
    topo = Topology.create(comm, config)
    backend = None
    try:
        with collective(topo.comm):
            backend = make_backend(config.device, topo.local_rank, topo.local_size)
        ident = backend.describe().get("gpu_uuid") or f"{topo.host}:cpu"
        idents = topo.comm.allgather((topo.host, ident))
        first = idents.index((topo.host, ident)) == topo.rank
        seconds = None
        with collective(topo.comm):
            if first:
                seconds = one_gpu_seconds(backend, case)
        all_seconds = [s for s in topo.comm.allgather(seconds) if s is not None]
        return float(np.mean(all_seconds)), len(set(idents)), backend
    finally:
        topo.close()


def _peer(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs), ""
    except PeerUnavailable as exc:
        return float("nan"), str(exc)
    except Exception as exc:  # noqa: BLE001 - a peer failing must not end our benchmark
        return float("nan"), f"{type(exc).__name__}: {exc}"


def bench_main(ns, config: RunConfig, comm: MPI.Comm, source: str) -> int:
    if ns.what == "transport":
        from .bench_transport import transport_main  # noqa: PLC0415

        return transport_main(ns, config, comm, source)
    cases = parse_cases(ns.cases or DEFAULT_CASES)
    out = config.out if config.out != RunConfig.out else "hpcmm-bench.h5"
    with collective(comm):
        if comm.Get_rank() == 0:
            h5io.check_output_path(out, config.overwrite)
    rank = comm.Get_rank()
    rows = []
    for case in cases:
        cfg = config.replace(m=case.m, n=case.n, k=case.k, dtype=case.dtype, tf32=case.tf32,
                             quiet=True, out=out, warmup=max(config.warmup, 1))
        say = (lambda msg: sys.stderr.write(f"hpcmm bench: {case.label}: {msg}\n")) if rank == 0 else (lambda msg: None)
        one_gpu, gpus, backend = _baseline(comm, cfg, case)
        say(f"one GPU {case.flops / one_gpu / 1e12:.2f} TFLOP/s")
        result = run(cfg, comm, cuda_aware_source=source, write=False)
        say(f"hpcmm {result.summary['tflops']:.2f} TFLOP/s")
        s = result.summary
        row = {
            "case": case.label, "dtype": case.dtype, "tf32": int(case.tf32), "m": case.m, "n": case.n,
            "k": case.k, "ranks": comm.Get_size(), "gpus": gpus,
            "hpcmm_seconds": s["seconds"], "hpcmm_tflops": s["tflops"],
            "one_gpu_seconds": one_gpu, "one_gpu_tflops": case.flops / one_gpu / 1e12,
            "efficiency": s["tflops"] / (gpus * case.flops / one_gpu / 1e12),
            "exposed_comm_fraction": s["exposed_comm_fraction"], "panel": s["panel"],
            "prefetch": s["prefetch"], "paths": ",".join(s["paths"]), "verified": int(s["verified"]),
            "residual": s["residual"], "load_imbalance": s["load_imbalance"],
        }
        peers_ok = not getattr(ns, "no_peers", False)
        for name, fn, kwargs in (("cublasmp", cublasmp_seconds, {"tf32": case.tf32}), ("heat", heat_seconds, {})):
            if not peers_ok:
                secs, note = float("nan"), "skipped (--no-peers)"
            elif name == "heat" and case.tf32:
                secs, note = float("nan"), "not run for tf32"
            else:
                secs, note = _peer(fn, comm, backend, case.m, case.n, case.k, case.dtype, **kwargs)
                say(f"{name} {case.flops / secs / 1e12 if secs == secs else float('nan'):.2f} TFLOP/s {note}")
            row[f"{name}_tflops"] = case.flops / secs / 1e12 if secs == secs else float("nan")
            row[f"hpcmm_over_{name}"] = row["hpcmm_tflops"] / row[f"{name}_tflops"] if secs == secs else float("nan")
            row[f"{name}_note"] = note
        rows.append(row)
        if rank == 0:
            _print_row(row)
    if rank == 0:
        h5io.write_table_file(out, config.overwrite, "bench", "bench", rows, versions())
        _print_table(rows, out)
    return 0 if all(r["verified"] for r in rows) else 1


def _print_row(r: dict) -> None:
    sys.stderr.write(
        f"hpcmm bench: {r['case']} ranks={r['ranks']} gpus={r['gpus']}: {r['hpcmm_tflops']:.2f} TFLOP/s, "
        f"one GPU {r['one_gpu_tflops']:.2f}, efficiency {100 * r['efficiency']:.1f} %, exposed "
        f"{100 * r['exposed_comm_fraction']:.2f} %, cuBLASMp {r['cublasmp_tflops']:.2f} "
        f"{r['cublasmp_note']}, Heat {r['heat_tflops']:.2f} {r['heat_note']}\n")
    sys.stderr.flush()


def _print_table(rows: list[dict], out: str) -> None:
    head = (f"{'case':<26}{'ranks':>6}{'GPUs':>5}{'hpcmm':>9}{'1-GPU':>8}{'eff.':>7}{'exposed':>9}"
            f"{'cuBLASMp':>10}{'÷':>6}{'Heat':>8}{'÷':>7}{'ok':>4}")
    print(head)
    for r in rows:
        print(f"{r['case']:<26}{r['ranks']:>6}{r['gpus']:>5}{r['hpcmm_tflops']:>9.2f}{r['one_gpu_tflops']:>8.2f}"
              f"{100 * r['efficiency']:>6.1f}%{100 * r['exposed_comm_fraction']:>8.2f}%"
              f"{r['cublasmp_tflops']:>10.2f}{r['hpcmm_over_cublasmp']:>6.2f}{r['heat_tflops']:>8.2f}"
              f"{r['hpcmm_over_heat']:>7.1f}{'yes' if r['verified'] else 'NO':>4}")
    notes = {f"{p}: {r[p + '_note']}" for r in rows for p in ("cublasmp", "heat") if r[p + "_note"]}
    for note in sorted(notes):
        print(f"note: {note}")
    print("TFLOP/s; eff. = hpcmm / (GPUs x one-GPU cupy rate, same run); ÷ = hpcmm / peer")
    print(f"figures: {out}")
