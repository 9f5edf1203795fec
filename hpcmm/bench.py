"""``python -m hpcmm bench``: hpcmm against one GPU's own GEMM and against the peers.

For each case (``dtype:N`` or ``dtype:MxNxK``; ``tf32`` means float32 with
``--tf32``), in one run on the same devices:

* the reference rate: the same global product on one device of each kind
  the run uses — ``cupy.matmul`` on one GPU (one rank per GPU, concurrently),
  or ``numpy.matmul`` on one host where there is no GPU — with data drawn as
  hpcmm draws its own (uniform in [-1, 1), complex parts both random), laid
  out before the clock starts, and the same warm-up and timed products as
  hpcmm (``--warmup``, at least 1, and ``--iters``); the median;
* hpcmm's rate, exposed communication and verification, through :func:`hpcmm.run`;
* on GPUs the efficiency: hpcmm ÷ (GPUs × one-GPU rate); on CPUs only the
  ratio hpcmm ÷ one host's numpy (ranks on one host share its cores, so no
  efficiency is claimed);
* cuBLASMp (nvmath-python) and Heat on the same global problem, where they
  import (``—`` and a note where they do not), with the ratio hpcmm ÷ peer.

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
from .config import RunConfig
from .errors import InputError, collective
from .metadata import versions
from .peers import PeerUnavailable, cublasmp_seconds, heat_seconds
from .placement import placement
from .run import run
from .summary import product_flops

__all__ = ["bench_main", "parse_cases", "reference_seconds"]

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
        return product_flops(self.m, self.n, self.k, self.dtype)


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


def _uniform(gen, shape, dtype: str):
    """Uniform in [-1, 1) with every mantissa bit random; complex: both parts (as hpcmm's inputs)."""
    values = gen.random(shape, dtype=np.float64) * 2 - 1
    if np.dtype(dtype).kind == "c":
        values = values + 1j * (gen.random(shape, dtype=np.float64) * 2 - 1)
    return values.astype(dtype)


def reference_seconds(backend, case: Case, warmup: int = 1, iters: int = 3) -> float:
    """Median seconds of the whole product on this device: ``cupy.matmul`` (one GPU) or numpy (one host).

    The same work hpcmm times: data as hpcmm draws it, laid out (column-major
    A for the TF32 GEMM) before the clock starts, ``warmup`` untimed and
    ``iters`` timed products.
    """
    xp = backend.xp
    gen = xp.random.default_rng(7) if backend.on_gpu else np.random.default_rng(7)
    with backend.device if backend.on_gpu else contextlib.nullcontext():
        a = _uniform(gen, (case.m, case.k), case.dtype)
        b = _uniform(gen, (case.k, case.n), case.dtype)
        if case.tf32:
            a = xp.asfortranarray(a)  # hpcmm's A is column-major before its clock starts, too
        c = backend.empty((case.m, case.n), case.dtype)
    backend.synchronize()
    times = []
    compute = backend.compute_stream
    for i in range(warmup + iters):
        t0 = backend.event(compute)
        if backend.on_gpu:
            # cupy's own matmul (cuBLAS), on our compute stream: the "plain cupy" reference.
            with compute:
                if case.tf32:
                    backend.gemm(a, b, c, accumulate=False, tf32=True)
                else:
                    xp.matmul(a, b, out=c)
        else:
            np.matmul(a, b, out=c)
        t1 = backend.event(compute)
        backend.event_synchronize(t1)
        if i >= warmup:
            times.append(backend.elapsed(t0, t1))
    del a, b, c
    if backend.on_gpu:
        backend.cupy.get_default_memory_pool().free_all_blocks()
    return float(np.median(times))


def _baseline(topo, backend, config, case: Case):
    """Reference seconds (mean over devices, one rank per device measuring) and the device count."""
    ident = backend.describe().get("gpu_uuid") or f"{topo.host}:cpu"
    idents = topo.comm.allgather((topo.host, ident))
    first = idents.index((topo.host, ident)) == topo.rank
    seconds = None
    with collective(topo.comm):
        if first:
            seconds = reference_seconds(backend, case, config.warmup, config.iters)
    all_seconds = [s for s in topo.comm.allgather(seconds) if s is not None]
    return float(np.mean(all_seconds)), len(set(idents))


def _peer(fn, *args, **kwargs):
    """``(seconds, note)``; seconds NaN (printed as ``—``) where the peer did not run, and why."""
    try:
        return fn(*args, **kwargs), ""
    except PeerUnavailable as exc:
        return float("nan"), str(exc)
    except Exception as exc:  # noqa: BLE001 - a peer failing must not end our benchmark
        return float("nan"), f"{type(exc).__name__}: {exc}"


def _reference_label(on_gpu: bool) -> str:
    return "one GPU (cupy)" if on_gpu else "one host (numpy)"


def bench_row(case: Case, summary: dict, ranks: int, devices: int, on_gpu: bool, reference: float) -> dict:
    """hpcmm's figures beside the reference's, as one row of the table and of the file."""
    s = summary
    ref_tflops = case.flops / reference / 1e12
    return {
        "case": case.label, "dtype": case.dtype, "tf32": int(case.tf32), "m": case.m, "n": case.n,
        "k": case.k, "ranks": ranks, "device": "gpu" if on_gpu else "cpu", "devices": devices,
        "hpcmm_seconds": s["seconds"], "hpcmm_tflops": s["tflops"],
        "reference": _reference_label(on_gpu), "reference_seconds": reference, "reference_tflops": ref_tflops,
        "hpcmm_over_reference": s["tflops"] / ref_tflops,
        # Only GPUs have a per-device ceiling to compare with; ranks on one host share its cores.
        "efficiency": s["tflops"] / (devices * ref_tflops) if on_gpu else float("nan"),
        "exposed_comm_fraction": s["exposed_comm_fraction"],
        "host_overhead_fraction": s.get("host_overhead_fraction", float("nan")), "panel": s["panel"],
        "prefetch": s["prefetch"], "paths": ",".join(s["paths"]), "verified": int(s["verified"]),
        "residual": s["residual"], "verify_detectable": s.get("verify_detectable", float("nan")),
        "load_imbalance": s["load_imbalance"],
    }


def bench_main(ns, config: RunConfig, comm: MPI.Comm) -> int:
    if ns.what == "transport":
        from .bench_transport import transport_main  # noqa: PLC0415

        return transport_main(ns, config, comm)
    # One placement for every case: the cases change the problem, not where it runs.
    with placement(comm, config) as (topo, backend):
        return _bench_cases(ns, config, comm, topo, backend)


def _bench_cases(ns, config: RunConfig, comm: MPI.Comm, topo, backend) -> int:
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
        reference, devices = _baseline(topo, backend, cfg, case)
        say(f"{_reference_label(backend.on_gpu)} {case.flops / reference / 1e12:.2f} TFLOP/s")
        result = run(cfg, comm, write=False)
        say(f"hpcmm {result.summary['tflops']:.2f} TFLOP/s")
        row = bench_row(case, result.summary, comm.Get_size(), devices, backend.on_gpu, reference)
        peers_ok = not getattr(ns, "no_peers", False)
        for name, fn, kwargs in (("cublasmp", cublasmp_seconds, {"tf32": case.tf32}), ("heat", heat_seconds, {})):
            if not peers_ok:
                secs, note = float("nan"), "skipped (--no-peers)"
            elif name == "heat" and case.tf32:
                secs, note = float("nan"), "not run for tf32"
            else:
                secs, note = _peer(fn, comm, backend, case.m, case.n, case.k, case.dtype,
                                   warmup=cfg.warmup, iters=cfg.iters, **kwargs)
                say(f"{name} {_fmt(case.flops / secs / 1e12 if secs == secs else float('nan'), '.2f')} "
                    f"TFLOP/s {note}")
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


def _fmt(value: float, spec: str, suffix: str = "") -> str:
    """A figure, or ``—`` where there is none (a peer that did not run, no efficiency on CPUs)."""
    return "—" if value != value else f"{value:{spec}}{suffix}"


def _print_row(r: dict) -> None:
    gpu = r["device"] == "gpu"
    ratio = (f"efficiency {_fmt(100 * r['efficiency'], '.1f', ' %')}" if gpu
             else f"hpcmm / numpy {_fmt(r['hpcmm_over_reference'], '.2f')}")
    sys.stderr.write(
        f"hpcmm bench: {r['case']} ranks={r['ranks']} {'GPUs' if gpu else 'hosts'}={r['devices']}: "
        f"{r['hpcmm_tflops']:.2f} TFLOP/s, {r['reference']} {r['reference_tflops']:.2f}, {ratio}, exposed "
        f"{100 * r['exposed_comm_fraction']:.2f} %, cuBLASMp {_fmt(r['cublasmp_tflops'], '.2f')} "
        f"{r['cublasmp_note']}, Heat {_fmt(r['heat_tflops'], '.2f')} {r['heat_note']}\n")
    sys.stderr.flush()


def format_table(rows: list[dict], out: str) -> list[str]:
    """The lines of the final table (one kind of device per run)."""
    gpu = bool(rows) and rows[0]["device"] == "gpu"
    devices, ref, ratio = ("GPUs", "1-GPU", "eff.") if gpu else ("hosts", "numpy", "÷numpy")
    lines = [f"{'case':<26}{'ranks':>6}{devices:>6}{'hpcmm':>9}{ref:>8}{ratio:>8}{'exposed':>9}"
             f"{'cuBLASMp':>10}{'÷':>6}{'Heat':>8}{'÷':>7}{'ok':>4}"]
    for r in rows:
        share = _fmt(100 * r["efficiency"], ".1f", "%") if gpu else _fmt(r["hpcmm_over_reference"], ".2f")
        lines.append(
            f"{r['case']:<26}{r['ranks']:>6}{r['devices']:>6}{r['hpcmm_tflops']:>9.2f}{r['reference_tflops']:>8.2f}"
            f"{share:>8}{100 * r['exposed_comm_fraction']:>8.2f}%"
            f"{_fmt(r['cublasmp_tflops'], '.2f'):>10}{_fmt(r['hpcmm_over_cublasmp'], '.2f'):>6}"
            f"{_fmt(r['heat_tflops'], '.2f'):>8}{_fmt(r['hpcmm_over_heat'], '.1f'):>7}"
            f"{'yes' if r['verified'] else 'NO':>4}")
    notes = {f"{p}: {r[p + '_note']}" for r in rows for p in ("cublasmp", "heat") if r[p + "_note"]}
    lines += [f"note: {note}" for note in sorted(notes)]
    if gpu:
        lines.append("TFLOP/s; eff. = hpcmm / (GPUs x one-GPU cupy rate, same run); ÷ = hpcmm / peer; — = did not run")
    else:
        lines.append("TFLOP/s; ÷numpy = hpcmm / one host's numpy.matmul (same run; ranks share the host's "
                     "cores); ÷ = hpcmm / peer; — = did not run")
    lines.append(f"figures: {out}")
    return lines


def _print_table(rows: list[dict], out: str) -> None:
    print("\n".join(format_table(rows, out)))
