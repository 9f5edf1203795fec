"""Repeated products leave nothing behind.

200 products through the library API (:func:`hpcmm.run`) must leave the
process's memory, MPI communicators, groups and shared-memory windows, file
descriptors, threads and child processes where they started; on a GPU also
cupy's pool, the device's free memory and the CUDA IPC mappings.

The measurement (:func:`measure`) runs in the pytest process at one rank (mpi4py
starts MPI as a singleton) and, with this file run as a script, on every rank of::

    mpiexec -n 2 python tests/test_leaks.py --device cpu --products 200

MPI cannot list its live objects, so we watch the handles it hands out: after
``Free`` MPICH and Open MPI give the freed slot to the next object of the
kind, so a fresh ``Dup``, group and window get the same handle values after the
runs as before, unless something the runs made is still allocated.

The products cycle through settings that take different paths (prefetch 0-2,
virtual nodes so that panels also go through MPI, every dtype, full and
Freivalds verification, an explicit grid); some write the results file (with
``/result/C``), some fail on purpose (bad input; a corrupted C that fails its
check) so that the error paths are measured too.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import json
import os
import shutil
import sys
import tempfile
import threading
from pathlib import Path

import pytest
from launcher import gpu_count, mpiexec_or_skip, rank_environment, run_launcher

ROOT = Path(__file__).resolve().parents[1]
PRODUCTS = 200
WARMUP = 12
#: Growth of the resident set we accept over 200 products (allocator noise, caches).
RSS_SLACK = 24 << 20
#: MPI objects of each kind allocated to probe the handles (more than a run ever holds at once).
PROBES = 256
#: Device memory the driver may keep moving (streams, cuBLAS workspaces), per CUDA context: the
#: device's free memory is the whole GPU's, so ranks that share a GPU each add their own.
DEVICE_SLACK = 64 << 20


# -- the measurement (pytest process, or each rank of the script) -----------------
def _rss() -> int:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def _children() -> list[int]:
    pids = []
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/children", encoding="ascii") as f:
                pids += [int(p) for p in f.read().split()]
        except OSError:
            pass
    return pids


def _mpi_handles(comm) -> dict[str, int]:
    """The highest handle of many fresh communicators, groups and windows (module docstring).

    One probe is not enough: MPICH keeps freed handles on a last-in-first-out
    list, and an object the library re-creates now and then moves to another
    slot.  But more probes than there are free slots take every free slot and
    then fresh ones, so the highest of them is the ``PROBES + live - 1``-th slot:
    it moves only when the number of live objects does.
    """
    from mpi4py import MPI

    comms = [comm.Dup() for _ in range(PROBES)]
    groups = [c.Get_group().Incl([0]) for c in comms]
    wins = [MPI.Win.Allocate_shared(8, 1, comm=MPI.COMM_SELF) for _ in range(PROBES // 4)]
    # Unsigned, so that MPICH's handle kinds (the top bits) order as its slots do.
    out = {kind: max(o.py2f() & 0xFFFFFFFF for o in objs)
           for kind, objs in (("comm", comms), ("group", groups), ("win", wins))}
    for obj in (*wins, *groups, *comms):
        obj.Free()
    return out


class _GpuCounters:
    """Counts the CUDA IPC mappings hpcmm opens and closes (by wrapping cupy's runtime calls)."""

    NAMES = ("ipcOpenMemHandle", "ipcCloseMemHandle", "ipcOpenEventHandle", "eventDestroy")

    def __init__(self) -> None:
        import cupy

        self.rt = cupy.cuda.runtime
        self.counts = dict.fromkeys(self.NAMES, 0)
        self.saved = {}
        for name in self.NAMES:
            original = getattr(self.rt, name)
            self.saved[name] = original

            def counted(*args, _name=name, _fn=original):
                self.counts[_name] += 1
                return _fn(*args)

            setattr(self.rt, name, counted)

    def restore(self) -> None:
        for name, fn in self.saved.items():
            setattr(self.rt, name, fn)


def _gpu_state() -> dict[str, int]:
    import cupy

    cupy.cuda.Device().synchronize()
    pool = cupy.get_default_memory_pool()
    free, _ = cupy.cuda.runtime.memGetInfo()
    # What the pool caches is free to us; what it lends, and what lives outside it
    # (the buffers exported through CUDA IPC), is not.
    return {"pool_used": int(pool.used_bytes()), "device_free": int(free + pool.free_bytes())}


def _settings(i: int, size: int, device: str, tmp: str) -> tuple[dict, bool, bool, str | None]:
    """The i-th product's settings, whether it writes, whether C is corrupted, the error it must raise."""
    from hpcmm.config import RunConfig

    base = dict(m=37, n=29, k=23, device=device, iters=1, warmup=0, quiet=True, seed=i)
    variants = [
        dict(),
        dict(prefetch=0, verify="full"),
        dict(prefetch=2, dtype="float32"),
        dict(ranks_per_node=1, dtype="complex128"),
        dict(panel=5, dtype="complex64", timeline=False),
        dict(grid=(1, size), verify="none"),
        dict(ranks_per_node=1, prefetch=2, panel=3),
        dict(dtype="float16", verify="full"),
        # Two "nodes" of two ranks along one row (at 4 ranks): relay slots and exported events.
        dict(grid=(1, size), ranks_per_node=2),
    ]
    settings = {**base, **variants[i % len(variants)]}
    write = i % 20 == 7
    corrupt = False
    expect = None
    if write:
        settings.update(out=os.path.join(tmp, "leak.h5"), overwrite=True, save_c=True)
    if i % 25 == 3:
        settings.update(panel=settings["k"] + 1)  # refused before any work
        expect = "InputError"
    elif i % 25 == 11:
        settings.update(verify="full")
        corrupt = True  # C is wrong: the check fails
        expect = "VerificationError"
    return RunConfig(**settings), write, corrupt, expect


@contextlib.contextmanager
def _corrupted(corrupt: bool):
    """Add 100 to rank 0's C[0, 0] just before the check (as tests/fault_runner.py's ``verify:corrupt``)."""
    if not corrupt:
        yield
        return
    run_module = importlib.import_module("hpcmm.cli.run")  # hpcmm.run is the function; the module by name
    original = run_module.full_check

    def corrupting(topo, layout, backend, product):
        if topo.rank == 0 and product.c.size:
            product.c[0, 0] += 100
        return original(topo, layout, backend, product)

    run_module.full_check = corrupting
    try:
        yield
    finally:
        run_module.full_check = original


def measure(device: str = "cpu", products: int = PRODUCTS, comm=None, progress=None) -> dict:
    """Run ``products`` products on ``comm``; what changed (collective).

    ``progress(i)`` is called after product ``i`` (the script prints a line: its hang guard
    is the time between lines, not the total).
    """
    from mpi4py import MPI

    import hpcmm
    from hpcmm.io import h5io

    comm = comm if comm is not None else MPI.COMM_WORLD
    size = comm.Get_size()
    tmp = tempfile.mkdtemp(prefix="hpcmm-leaks-") if comm.Get_rank() == 0 else None
    tmp = comm.bcast(tmp, root=0)
    counters = _GpuCounters() if device == "gpu" else None
    outcomes: dict[str, int] = {}

    def product(i: int) -> None:
        config, write, corrupt, expect = _settings(i, size, device, tmp)
        try:
            with _corrupted(corrupt):
                hpcmm.run(config, comm=comm, write=write)
            got = None
        except hpcmm.HpcmmError as exc:
            got = type(exc).__name__
        if got != expect:
            raise AssertionError(f"product {i} ({config}): expected {expect}, got {got}")
        outcomes[got or "ok"] = outcomes.get(got or "ok", 0) + 1
        if progress is not None:
            progress(i)

    try:
        for i in range(WARMUP):
            product(i)
        gc.collect()
        comm.Barrier()
        before = {"fds": len(os.listdir("/proc/self/fd")), "rss": _rss(), "threads": threading.active_count(),
                  "handles": _mpi_handles(comm), "children": len(_children())}
        if device == "gpu":
            before.update(_gpu_state())
        opened_before = dict(counters.counts) if counters else {}
        for i in range(WARMUP, WARMUP + products):
            product(i)
        gc.collect()
        comm.Barrier()
        after = {"fds": len(os.listdir("/proc/self/fd")), "rss": _rss(), "threads": threading.active_count(),
                 "handles": _mpi_handles(comm), "children": len(_children())}
        if device == "gpu":
            after.update(_gpu_state())
            after["ipc"] = {k: v - opened_before[k] for k, v in counters.counts.items()}
        leftovers = sorted(os.listdir(tmp)) if comm.Get_rank() == 0 else []
        device_ranks = 1
        if device == "gpu":
            import cupy

            here = (MPI.Get_processor_name(), cupy.cuda.runtime.getDevice())
            device_ranks = comm.allgather(here).count(here)
        return {"rank": comm.Get_rank(), "size": size, "device_ranks": device_ranks, "before": before, "after": after,
                "pending": sorted(h5io.PENDING), "files": leftovers, "outcomes": outcomes}
    finally:
        if counters is not None:
            counters.restore()
        comm.Barrier()
        if comm.Get_rank() == 0:
            shutil.rmtree(tmp, ignore_errors=True)


def problems(report: dict) -> list[str]:
    """What a :func:`measure` report shows as leaked, in words (empty: nothing)."""
    b, a = report["before"], report["after"]
    where = f"rank {report['rank']} of {report['size']}"
    out = []
    for key in ("fds", "threads", "children"):
        if a[key] != b[key]:
            out.append(f"{where}: {key} {b[key]} -> {a[key]}")
    for kind, highest in b["handles"].items():
        if a["handles"][kind] != highest:
            out.append(f"{where}: MPI {kind} handles: the highest fresh one moved from "
                       f"{highest:#x} to {a['handles'][kind]:#x} (objects left allocated)")
    if a["rss"] - b["rss"] > RSS_SLACK:
        out.append(f"{where}: resident memory grew {(a['rss'] - b['rss']) / 2**20:.1f} MiB")
    if report["pending"]:
        out.append(f"{where}: temporary files still registered: {report['pending']}")
    stray = [f for f in report["files"] if f != "leak.h5"]
    if stray:
        out.append(f"{where}: files left in the output directory: {stray}")
    if "pool_used" in a:
        if a["pool_used"] != b["pool_used"]:
            out.append(f"{where}: cupy pool in use {b['pool_used']} -> {a['pool_used']} bytes")
        contexts = report.get("device_ranks", 1)
        if b["device_free"] - a["device_free"] > DEVICE_SLACK * contexts:
            out.append(f"{where}: device free memory fell {(b['device_free'] - a['device_free']) / 2**20:.1f} MiB "
                       f"({contexts} rank(s) on the device)")
        ipc = a["ipc"]
        if ipc["ipcOpenMemHandle"] != ipc["ipcCloseMemHandle"]:
            out.append(f"{where}: IPC memory handles opened {ipc['ipcOpenMemHandle']}, "
                       f"closed {ipc['ipcCloseMemHandle']}")
        if ipc["ipcOpenEventHandle"] != ipc["eventDestroy"]:
            out.append(f"{where}: IPC event handles opened {ipc['ipcOpenEventHandle']}, "
                       f"destroyed {ipc['eventDestroy']}")
    return out


# -- the tests ----------------------------------------------------------------------
def _env() -> dict[str, str]:
    return rank_environment()


def _under_mpiexec(ranks: int, device: str, tmp_path: Path) -> list[dict]:
    """Every rank's report of :data:`PRODUCTS` products; a hang is a job silent for :func:`quiet_within`
    seconds (rank 0 prints a line per product), whatever the whole takes on a loaded machine."""
    from test_reliability_budget import quiet_within  # noqa: PLC0415 - not in the script's ranks

    mpiexec = mpiexec_or_skip()
    cmd = [mpiexec, "-n", str(ranks), sys.executable, str(Path(__file__).resolve()),
           "--device", device, "--products", str(PRODUCTS), "--result", str(tmp_path / "leaks.json")]
    proc = run_launcher(cmd, None, cwd=ROOT, env=_env(), stall=quiet_within())
    assert proc.returncode == 0, f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout}"
    # Rank 0 writes every rank's report to a file: the launcher's stdout mixes the ranks' lines.
    assert (tmp_path / "leaks.json").is_file(), proc.stdout
    reports = json.loads((tmp_path / "leaks.json").read_text())
    assert len(reports) == ranks, reports
    return reports


def test_no_leaks_one_rank_cpu():
    report = measure("cpu")
    assert problems(report) == []
    assert report["outcomes"]["InputError"] >= 8 and report["outcomes"]["VerificationError"] >= 8


def test_no_leaks_two_ranks_cpu(tmp_path):
    for report in _under_mpiexec(2, "cpu", tmp_path):
        assert problems(report) == []


@pytest.mark.gpu
def test_no_leaks_one_rank_gpu():
    if gpu_count() < 1:
        pytest.skip("needs a CUDA GPU and cupy")
    assert problems(measure("gpu")) == []


@pytest.mark.gpu
@pytest.mark.parametrize("ranks", [2, 4])
def test_no_leaks_several_ranks_gpu(ranks, tmp_path):
    """Ranks on one GPU or several: IPC mappings (and, at 4 ranks, events) opened and closed every product."""
    if gpu_count() < 1:
        pytest.skip("needs a CUDA GPU and cupy")
    reports = _under_mpiexec(ranks, "gpu", tmp_path)
    for report in reports:
        assert problems(report) == []
    assert sum(r["after"]["ipc"]["ipcOpenMemHandle"] for r in reports) > 0, "the IPC path was not taken"
    if ranks == 4:
        assert sum(r["after"]["ipc"]["ipcOpenEventHandle"] for r in reports) > 0, "no relay events were made"


#: Runs of the planned-shape leak test after its warm-up runs, and the shape: one float64 GEMM of about
#: 0.3 ms on an H200, inside the GEMM library's planning window (hpcmm.execution.gemm_library).
PLANNED_RUNS, PLANNED_WARMUP, PLANNED_SIZE = 30, 3, 2048


@pytest.mark.gpu
def test_no_leaks_when_every_run_plans_its_gemms(tmp_path):
    """Each run plans its shapes anew (cuBLASLt autotuned, timed against GemmEx) and lets the plans go when
    its engine closes: 30 runs leave cupy's pool, device memory, resident memory, threads and descriptors
    where 3 warm-up runs left them."""
    if gpu_count() < 1:
        pytest.skip("needs a CUDA GPU and cupy")
    pytest.importorskip("nvmath.linalg.advanced", reason="needs nvmath-python (the cublaslt extra)")
    import h5py
    from mpi4py import MPI

    import hpcmm
    from hpcmm.config import RunConfig

    def product(i: int) -> None:
        out = tmp_path / f"planned-{i}.h5"
        config = RunConfig(m=PLANNED_SIZE, n=PLANNED_SIZE, k=PLANNED_SIZE, device="gpu", iters=1, warmup=1,
                           quiet=True, seed=i, out=str(out), gemm_library="auto")
        hpcmm.run(config, comm=MPI.COMM_SELF, write=True)
        with h5py.File(out, "r") as f:
            notes = [n.decode() if isinstance(n, bytes) else str(n) for n in f["timings/gemms"]["note"]]
        out.unlink()
        assert any(n.startswith("cuBLASLt autotuned") for n in notes), f"run {i} planned nothing: {notes}"

    for i in range(PLANNED_WARMUP):
        product(i)
    gc.collect()
    before = {"fds": len(os.listdir("/proc/self/fd")), "rss": _rss(), "threads": threading.active_count(),
              **_gpu_state()}
    for i in range(PLANNED_WARMUP, PLANNED_WARMUP + PLANNED_RUNS):
        product(i)
    gc.collect()
    after = {"fds": len(os.listdir("/proc/self/fd")), "rss": _rss(), "threads": threading.active_count(),
             **_gpu_state()}
    assert (after["fds"], after["threads"]) == (before["fds"], before["threads"]), (before, after)
    assert after["pool_used"] == before["pool_used"], (before, after)
    assert before["device_free"] - after["device_free"] <= DEVICE_SLACK, (before, after)
    assert after["rss"] - before["rss"] <= RSS_SLACK, (before, after)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Measure leaks over repeated products on every rank.")
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    parser.add_argument("--products", type=int, default=PRODUCTS)
    parser.add_argument("--result", default=None, help="JSON file for every rank's report (else stdout)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from mpi4py import MPI

    rank = MPI.COMM_WORLD.Get_rank()
    report = measure(args.device, args.products,
                     progress=lambda i: rank == 0 and print(f"product {i} done", flush=True))
    reports = MPI.COMM_WORLD.gather(report, root=0)
    if rank == 0:
        if args.result is not None:
            Path(args.result).write_text(json.dumps(reports))
        else:
            for r in reports:
                print(json.dumps(r), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
