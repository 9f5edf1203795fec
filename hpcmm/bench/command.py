"""``python -m hpcmm bench``: hpcmm against one GPU's own GEMM and against the peers.

For each case (``dtype:N`` or ``dtype:MxNxK``; ``tf32`` means float32 with
``--tf32``), in one run on the same devices:

* the reference rate: the best one device does on the same global product,
  measured in the same run (:mod:`hpcmm.bench.reference`): ``cupy.matmul``
  with each order of A and B in memory and hpcmm's own GEMM call on one GPU
  (one rank per GPU measuring, concurrently), ``numpy.matmul`` and hpcmm's
  GEMM on one host where there is no GPU, and hpcmm itself where the run has
  one rank on one device; every candidate's time goes to the file, the
  fastest is the reference and is named;
* hpcmm's rate, exposed communication and verification, through :func:`hpcmm.run`;
* on GPUs the efficiency: hpcmm ÷ (GPUs × the reference's rate); on CPUs only
  the ratio hpcmm ÷ one host (ranks on one host share its cores, so no
  efficiency is claimed);
* cuBLASMp (nvmath-python) and Heat on the same global problem, where they
  import (``—`` and a note where they do not; :mod:`hpcmm.bench.peers` says how
  each is called), with the ratio hpcmm ÷ peer.

``python -m hpcmm bench transport`` measures the data paths instead
(:mod:`hpcmm.bench.transport`).  Rank 0 prints a table; the HDF5 file
(``--out``, default ``hpcmm-bench-YYYYmmdd-HHMMSS.h5``, a new name each time) holds every figure.
"""

from __future__ import annotations

import dataclasses
import re
import sys

from mpi4py import MPI

from ..io import h5io
from .reference import HPCMM_ONE_RANK, best_index, combine, measure_candidates
from .transport import default_output
from ..config import BENCH_CASES, RunConfig
from ..errors import InputError, collective
from ..planning.gemm_orders import gemm_order
from ..io.metadata import versions
from .peers import CUBLASMP_MIN_ITERS, CUBLASMP_WARMUP, HEAT_LIMIT, PeerResult, cublasmp, heat
from ..execution.placement import placement
from ..cli.run import run
from ..cli.summary import format_rate, rate_unit
from ..dtypes import product_flops

__all__ = ["bench_main", "parse_cases", "pick_reference"]

DEFAULT_CASES = BENCH_CASES


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


def _baseline(topo, backend, config, case: Case, order: str, timer=None):
    """Every one-device candidate (seconds: mean over devices, one rank per device measuring) and the device count.

    ``order``: the operand orders of the run's GEMM, which the ``hpcmm gemm`` candidate takes.
    """
    first, idents = _first_on_device(topo, backend)
    rows = None
    with collective(topo.comm):
        if first:
            try:
                rows = measure_candidates(backend, case, config.warmup, config.iters, timer=timer, gemm_order=order)
            except MemoryError as exc:  # what _check_reference_memory could not see (another process took it)
                raise InputError(f"bench case {case.label}: the one-device reference does not fit in memory "
                                 f"({' '.join(str(exc).split()) or 'MemoryError'})") from None
    measured = [r for r in topo.comm.allgather(rows) if r is not None]
    return combine(measured), len(set(idents))


def _first_on_device(topo, backend) -> tuple[bool, list]:
    """Collective: whether this rank is the first of its device (the one that measures it), and every rank's device."""
    ident = backend.describe().get("gpu_uuid") or f"{topo.host}:cpu"
    idents = topo.comm.allgather((topo.host, ident))
    return idents.index((topo.host, ident)) == topo.rank, idents


def _check_reference_memory(topo, backend, cases) -> None:
    """Collective: refuse (exit 2), before any case runs, a case whose one-device reference cannot hold
    A, B and C on one device (it used to end in ``MemoryError`` once the earlier cases had run)."""
    from ..dtypes import numpy_dtype  # noqa: PLC0415
    from ..planning.choices import check_memory  # noqa: PLC0415

    first, _ = _first_on_device(topo, backend)
    where = "GPU" if backend.on_gpu else "host"
    for case in cases:
        need = (case.m * case.n + case.m * case.k + case.k * case.n) * numpy_dtype(case.dtype).itemsize
        check_memory(topo, backend, need if first else 0,
                     f"bench case {case.label}: the one-{where} reference (A, B and C on one {where})")


def pick_reference(candidates: list[dict], case: Case, hpcmm_seconds: float | None = None,
                   order: str = "FC") -> tuple[list[dict], int]:
    """Add hpcmm's own run (one rank on one device; its GEMM's operand ``order``) to the candidates, rate them, mark the fastest.

    Returns the rows (``tflops`` and ``best`` filled in) and the index of the fastest.
    """
    rows = [dict(r) for r in candidates]
    if hpcmm_seconds is not None:
        rows.append({"candidate": HPCMM_ONE_RANK, "library": "hpcmm", "a_order": order[0], "b_order": order[1],
                     "seconds": float(hpcmm_seconds), "note": "this run", "devices": 1})
    best = best_index(rows)
    for i, r in enumerate(rows):
        r["tflops"] = case.flops / r["seconds"] / 1e12 if r["seconds"] == r["seconds"] else float("nan")
        r["best"] = int(i == best)
    return rows, best


def _peer(fn, *args, **kwargs) -> PeerResult:
    """The peer's result; NaN (printed as ``—``) where it did not run, and why in its note."""
    try:
        return fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - a peer failing must not end our benchmark
        return PeerResult.failed(exc)


def _reference_label(on_gpu: bool, winner: str) -> str:
    return f"{'one GPU' if on_gpu else 'one host'}: {winner}"


def bench_row(case: Case, summary: dict, ranks: int, devices: int, on_gpu: bool, reference: float,
              winner: str = "") -> dict:
    """hpcmm's figures beside the reference's (the fastest candidate, ``winner``), as one row of the table and file."""
    s = summary
    ref_tflops = case.flops / reference / 1e12
    return {
        "case": case.label, "dtype": case.dtype, "tf32": int(case.tf32), "m": case.m, "n": case.n,
        "k": case.k, "ranks": ranks, "device": "gpu" if on_gpu else "cpu", "devices": devices,
        "hpcmm_seconds": s["seconds"], "hpcmm_tflops": s["tflops"],
        # Set-up once (communicators, buffers, IPC, GEMM tuning) apart from each product's seconds.
        "plan_seconds": s.get("plan_seconds", float("nan")),
        "reference": _reference_label(on_gpu, winner), "reference_seconds": reference, "reference_tflops": ref_tflops,
        "hpcmm_over_reference": s["tflops"] / ref_tflops,
        # Only GPUs have a per-device ceiling to compare with; ranks on one host share its cores.
        "efficiency": s["tflops"] / (devices * ref_tflops) if on_gpu else float("nan"),
        "exposed_comm_fraction": s["exposed_comm_fraction"],
        "host_overhead_fraction": s.get("host_overhead_fraction", float("nan")), "panel": s["panel"],
        "prefetch": s["prefetch"], "gemm_order": s.get("gemm_order", ""), "paths": ",".join(s["paths"]), "verified": int(s["verified"]),
        "residual": s["residual"], "verify_detectable": s.get("verify_detectable", float("nan")),
        "load_imbalance": s["load_imbalance"],
    }


def bench_main(ns, config: RunConfig, comm: MPI.Comm) -> int:
    if ns.what == "transport":
        from .transport import transport_main  # noqa: PLC0415

        return transport_main(ns, config, comm)
    # One placement for every case: the cases change the problem, not where it runs.
    with placement(comm, config) as (topo, backend):
        return _bench_cases(ns, config, comm, topo, backend)


def _bench_cases(ns, config: RunConfig, comm: MPI.Comm, topo, backend) -> int:
    cases = parse_cases(ns.cases or DEFAULT_CASES)
    out = default_output(config, "bench")
    with collective(comm):
        if comm.Get_rank() == 0:
            h5io.check_output_path(out, config.overwrite)
    _check_reference_memory(topo, backend, cases)
    rank = comm.Get_rank()
    rows, references, peer_rows = [], [], []
    peers_ok = not getattr(ns, "no_peers", False)
    heat_limit = float(getattr(ns, "heat_limit", None) or HEAT_LIMIT)
    for case in cases:
        # hpcmm and its one-device candidates are timed as cuBLASMp's final measurement is: at least
        # CUBLASMP_WARMUP untimed products, then the median of at least CUBLASMP_MIN_ITERS.
        cfg = config.replace(m=case.m, n=case.n, k=case.k, dtype=case.dtype, tf32=case.tf32,
                             quiet=True, out=out, warmup=max(config.warmup, CUBLASMP_WARMUP),
                             iters=max(config.iters, CUBLASMP_MIN_ITERS))
        say = (lambda msg: sys.stderr.write(f"hpcmm bench: {case.label}: {msg}\n")) if rank == 0 else (lambda msg: None)
        # The run's GEMM and the 'hpcmm gemm' candidate take the same operand orders.
        order = gemm_order(case.dtype, case.tf32, backend.on_gpu, cfg.gemm_order)
        candidates, devices = _baseline(topo, backend, cfg, case, order, timer=getattr(ns, "reference_timer", None))
        result = run(cfg, comm, write=False)
        say(f"hpcmm {format_rate(result.summary['tflops'], 2)} (GEMM {result.summary['gemm_order']})")
        # hpcmm itself is a one-device candidate only where this run is one rank on one device.
        own = result.summary["seconds"] if comm.Get_size() == 1 and devices == 1 else None
        cand_rows, best = pick_reference(candidates, case, own, order)
        for r in cand_rows:
            say(f"one {'GPU' if backend.on_gpu else 'host'}: {r['candidate']} {_rate(r['tflops'])}"
                f"{' (best)' if r['best'] else ''}{' ' + r['note'] if r['note'] else ''}")
        references += [dict(case=case.label, **r) for r in cand_rows]
        winner = cand_rows[best]
        row = bench_row(case, result.summary, comm.Get_size(), devices, backend.on_gpu, winner["seconds"],
                        winner["candidate"])
        row["reference_candidates"] = sum(r["seconds"] == r["seconds"] for r in cand_rows)
        for name, fn, kwargs in (("cublasmp", cublasmp, {"tf32": case.tf32}),
                                 ("heat", heat, {"limit": heat_limit})):
            if not peers_ok:
                peer = PeerResult(note="skipped (--no-peers)")
            elif name == "heat" and case.tf32:
                peer = PeerResult(note="not run for tf32")
            else:
                # Heat keeps the counts asked for: its own time limit bounds it (peers.heat)
                warmup, iters = (cfg.warmup, cfg.iters) if name == "cublasmp" else (max(config.warmup, 1),
                                                                                      config.iters)
                peer = _peer(fn, comm, backend, case.m, case.n, case.k, case.dtype, warmup=warmup, iters=iters,
                             **kwargs)
                say(f"{name} {_rate(peer.tflops)} {peer.note}")
            peer_rows += [dict(case=case.label, **r) for r in peer.candidates]
            row[f"{name}_tflops"] = peer.tflops
            row[f"hpcmm_over_{name}"] = row["hpcmm_tflops"] / peer.tflops if peer.tflops == peer.tflops else float("nan")
            row[f"{name}_note"] = peer.note
        rows.append(row)
        if rank == 0:
            _print_row(row)
    if rank == 0:
        tables = {"bench": rows, "reference": references}
        if peer_rows:
            tables["peers"] = peer_rows
        out = h5io.write_tables_file(out, config.overwrite, "bench", tables, versions())
        _print_table(rows, out)
    return 0 if all(r["verified"] for r in rows) else 1


def _fmt(value: float, spec: str, suffix: str = "") -> str:
    """A figure, or ``—`` where there is none (a peer that did not run, no efficiency on CPUs)."""
    return "—" if value != value else f"{value:{spec}}{suffix}"


def _rate(tflops: float) -> str:
    """A rate in the unit that shows it (:func:`~hpcmm.cli.summary.format_rate`), or ``—`` where there is none."""
    return "—" if tflops != tflops else format_rate(tflops, 2)


def _print_row(r: dict) -> None:
    gpu = r["device"] == "gpu"
    ratio = (f"efficiency {_fmt(100 * r['efficiency'], '.1f', ' %')}" if gpu
             else f"hpcmm / numpy {_fmt(r['hpcmm_over_reference'], '.2f')}")
    sys.stderr.write(
        f"hpcmm bench: {r['case']} ranks={r['ranks']} {'GPUs' if gpu else 'hosts'}={r['devices']}: "
        f"{_rate(r['hpcmm_tflops'])}, {r['reference']} {_rate(r['reference_tflops'])}, {ratio}, exposed "
        f"{100 * r['exposed_comm_fraction']:.2f} %, cuBLASMp {_rate(r['cublasmp_tflops'])} "
        f"{r['cublasmp_note']}, Heat {_rate(r['heat_tflops'])} {r['heat_note']}\n")
    sys.stderr.flush()


def format_table(rows: list[dict], out: str) -> list[str]:
    """The lines of the final table (one kind of device per run); rates in one unit that shows
    them (GFLOP/s where TFLOP/s would print 0.00)."""
    gpu = bool(rows) and rows[0]["device"] == "gpu"
    scale, unit = rate_unit([r[f] for r in rows for f in ("hpcmm_tflops", "reference_tflops", "cublasmp_tflops",
                                                          "heat_tflops")])
    devices, ref, ratio = ("GPUs", "1-GPU", "eff.") if gpu else ("hosts", "numpy", "÷numpy")
    lines = [f"{'case':<26}{'ranks':>6}{devices:>6}{'hpcmm':>9}{ref:>8}{ratio:>8}{'exposed':>9}"
             f"{'cuBLASMp':>10}{'÷':>6}{'Heat':>8}{'÷':>7}{'ok':>4}"]
    for r in rows:
        share = _fmt(100 * r["efficiency"], ".1f", "%") if gpu else _fmt(r["hpcmm_over_reference"], ".2f")
        lines.append(
            f"{r['case']:<26}{r['ranks']:>6}{r['devices']:>6}{scale * r['hpcmm_tflops']:>9.2f}"
            f"{scale * r['reference_tflops']:>8.2f}"
            f"{share:>8}{100 * r['exposed_comm_fraction']:>8.2f}%"
            f"{_fmt(scale * r['cublasmp_tflops'], '.2f'):>10}{_fmt(r['hpcmm_over_cublasmp'], '.2f'):>6}"
            f"{_fmt(scale * r['heat_tflops'], '.2f'):>8}{_fmt(r['hpcmm_over_heat'], '.1f'):>7}"
            f"{'yes' if r['verified'] else 'NO':>4}")
    notes = {f"{p}: {r[p + '_note']}" for r in rows for p in ("cublasmp", "heat") if r[p + "_note"]}
    lines += [f"note: {note}" for note in sorted(notes)]
    if gpu:
        lines.append(f"{unit}; eff. = hpcmm / (GPUs x the best one-GPU rate of the same run: best of cupy.matmul "
                     "by operand order, hpcmm's GEMM call, hpcmm at 1 rank); ÷ = hpcmm / peer; — = did not run")
        lines += [f"1-GPU best for {r['case']}: {r['reference'].split(': ', 1)[-1]}" for r in rows]
    else:
        lines.append(f"{unit}; ÷numpy = hpcmm / the best one-host rate of the same run (numpy.matmul by operand "
                     "order, hpcmm's GEMM call; ranks share the host's cores); ÷ = hpcmm / peer; — = did not run")
    lines.append(f"figures: {out}")
    return lines


def _print_table(rows: list[dict], out: str) -> None:
    print("\n".join(format_table(rows, out)))
