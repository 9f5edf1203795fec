"""``python -m hpcmm info``: where each rank runs, and what hpcmm can tell about the stack."""

from __future__ import annotations

from mpi4py import MPI

from ..config import RunConfig
from ..errors import collective
from ..planning.grid_orientation import facing, oriented
from ..io.metadata import device_of, parallel_hdf5, topology_row, versions
from ..planning.mps import detect
from ..execution.placement import placement
from ..execution.transport import decide

__all__ = ["info_main", "gather_info", "mps_by_gpu"]


def gather_info(config: RunConfig, comm: MPI.Comm) -> dict | None:
    """Collective: the per-rank table and the run's facts (on rank 0; ``None`` elsewhere)."""
    with placement(comm, config) as (topo, backend):
        row = topology_row(topo, backend)
        row["node_ranks"] = topo.local_size
        row["free_bytes"], row["total_bytes"] = (int(v) for v in backend.memory_info())
        with collective(topo.comm):
            row["mps"] = detect(backend.device_id if backend.on_gpu else None)
        rows = topo.comm.gather(row, root=0)
        if topo.rank != 0:
            return None
        awareness = decide(config.cuda_aware_mpi, option_source=config.origin("cuda_aware_mpi"))
        gpus_per_host: dict[str, set] = {}
        ranks_per_host: dict[str, int] = {}
        for r in rows:
            ranks_per_host[r["host"]] = ranks_per_host.get(r["host"], 0) + 1
            if r["gpu_index"] >= 0:
                gpus_per_host.setdefault(r["host"], set()).add(r["gpu_uuid"] or r["gpu_index"])
        shared = {h: (ranks_per_host[h], len(g)) for h, g in gpus_per_host.items() if ranks_per_host[h] > len(g)}
        return {
            "rows": rows,
            "versions": versions(backend),
            "grid": str(topo.grid),
            "nodes": topo.vnode_count,
            "cuda_aware": awareness,
            "parallel_hdf5": parallel_hdf5(),
            "oversubscribed": shared,
            "mps": mps_by_gpu(rows),
        }


#: The types whose largest square problem ``info`` names, and their element sizes.
LARGEST_KINDS = {"float64": 8, "float32": 4}


def largest_square(kind: str, itemsize: int, grid: str, devices: list[list[dict]], on_gpu: bool,
                   nodes: int = 1) -> int:
    """The largest ``N`` of an ``N × N × N`` product of ``kind`` that fits every device by the memory check's count.

    ``devices``: per device, its ranks as rows with ``rank`` (in the grid) and ``free_bytes``.  The
    count is :func:`~hpcmm.planning.choices.memory_needed` with near-equal blocks on ``grid``, the default
    prefetch, each channel's slots (no node spans where ``nodes`` is 1) and the narrowest panel the
    planner falls back to, and on a GPU what a rank takes beside them while it runs
    (:func:`~hpcmm.planning.choices.working_bytes`); ``free_bytes`` is measured after the CUDA contexts.
    """
    from ..planning.algorithms import panel_candidates, prefetch_of, ring_depth  # noqa: PLC0415 - info only
    from ..planning.choices import largest_fitting, memory_needed  # noqa: PLC0415
    from ..planning.gemm_orders import gemm_order, scratch_slots  # noqa: PLC0415
    from ..geometry.layout import Grid, Layout  # noqa: PLC0415

    shape = Grid(*(int(x) for x in grid.split("x")))
    shared = on_gpu and any(len(members) > 1 for members in devices)
    prefetch = prefetch_of(RunConfig(dtype=kind), on_gpu)
    slots = ring_depth(prefetch, spans_nodes=nodes > 1)
    relayout = scratch_slots(gemm_order(kind, False, on_gpu), prefetch + 1)

    def total_at(m, n, k, members):
        layout = Layout(m, n, k, shape)
        panel = min(panel_candidates([layout], itemsize, on_gpu, shared=shared)[-1], k)
        return sum(memory_needed(layout, r["rank"], itemsize, panel, slots, relayout, on_gpu)
                   for r in members)

    def fits(n):
        return all(total_at(n, n, n, members) <= min(r["free_bytes"] for r in members) for members in devices)

    # The search's bound: doubled until it no longer fits (a job of much memory fits more than any fixed bound).
    # N = 2**40 is past any machine (its operands alone take 2**83 bytes); the cap ends the loop where no device
    # holds ranks.
    top = 1 << 22
    while top < 1 << 40 and fits(top):
        top <<= 1
    return int(top * min(largest_fitting(lambda m, n, k, members=members: total_at(m, n, k, members),
                                         (top, top, top), min(r["free_bytes"] for r in members))
                         for members in devices))


def memory_by_device(rows: list[dict], grid: str, nodes: int,
                     grids: dict[str, str] | None = None) -> list[tuple[str, list[dict], dict[str, int]]]:
    """Each device (GPU, or a host's memory), its ranks, and the largest square problem per type it allows
    (:func:`largest_square`, the same for every device: the job's), counted on the grid each type runs on
    (``grids``, by type; ``grid`` where it does not say: :func:`kind_grids`)."""
    devices: dict = {}
    for r in rows:
        key, label = device_of(r)
        devices.setdefault(key, (label, []))[1].append(r)
    on_gpu = any(r["gpu_index"] >= 0 for r in rows)
    members = [m for _, m in devices.values()]
    grids = grids or {}
    largest = {kind: largest_square(kind, itemsize, grids.get(kind, grid), members, on_gpu, nodes)
               for kind, itemsize in LARGEST_KINDS.items()}
    return [(label, m, largest) for label, m in devices.values()]


def mps_by_gpu(rows: list[dict]) -> list[tuple[str, int, list]]:
    """Each GPU of the run (``GPU i of host``), how many ranks it holds, and their MPS states."""
    gpus: dict = {}
    for r in rows:
        if r["gpu_index"] >= 0:
            key, label = device_of(r)
            gpus.setdefault(key, (label, []))[1].append(r["mps"])
    return [(label, len(states), states) for label, states in gpus.values()]


def _mps_line(ranks: int, states: list) -> str:
    """How the ranks of one GPU run: under MPS or not, and what said so."""
    active = sum(s.active for s in states)
    verdict = ("under MPS" if active == len(states) else "without MPS" if active == 0
               else f"{active} of them under MPS")
    details = sorted({f"{s.source}: {s.detail}" for s in states})
    return f"{ranks} rank(s), {verdict} ({'; '.join(details)})"


def kind_grids(config: RunConfig, facts: dict) -> dict[str, str]:
    """The grid a run of each type of :data:`LARGEST_KINDS` takes by default: the one shown, or that grid
    turned (float64 on GPUs of one node; one process row where ranks share GPUs); ``--grid`` fixes it."""
    if config.grid is not None:
        return {kind: facts["grid"] for kind in LARGEST_KINDS}
    on_gpu = any(r["gpu_index"] >= 0 for r in facts["rows"])
    rows, cols = (int(x) for x in facts["grid"].split("x"))
    shared = on_gpu and bool(facts.get("oversubscribed"))  # a host with more ranks than GPUs
    turned = {kind: oriented(rows, cols, facing(config.grid_orientation, kind, on_gpu=on_gpu, nodes=facts["nodes"],
                                                shared=shared, ranks=rows * cols, n=config.n))
              for kind in LARGEST_KINDS}
    return {kind: f"{grid.rows}x{grid.cols}" for kind, grid in turned.items()}


def _turned_note(config: RunConfig, facts: dict) -> str:
    """Where a run's default grid faces otherwise than the one shown (:func:`kind_grids`)."""
    notes = [f"{kind} runs take {grid}" for kind, grid in kind_grids(config, facts).items() if grid != facts["grid"]]
    return f"; {', '.join(notes)} (HPCMM_GRID_ORIENTATION={config.grid_orientation})" if notes else ""


def info_main(config: RunConfig, comm: MPI.Comm) -> int:
    facts = gather_info(config, comm)
    if facts is None:
        return 0
    print(f"{'rank':>4} {'host':<20} {'local':>5} {'node':>4} {'grid':>5}  device")
    for r in facts["rows"]:
        dev = "cpu (numpy)" if r["gpu_index"] < 0 else f"GPU {r['gpu_index']} {r['gpu_name']} {r['gpu_uuid']} pci {r['gpu_pci']}"
        print(f"{r['rank']:>4} {r['host']:<20} {r['local_rank']:>5} {r['node']:>4} "
              f"{r['grid_row']},{r['grid_col']:<3}  {dev}")
    v = facts["versions"]
    aware = facts["cuda_aware"]
    print(f"process grid       {facts['grid']} ({facts['nodes']} node(s)){_turned_note(config, facts)}")
    print(f"MPI library        {v['mpi_library']} (MPI {v['mpi_standard']}, mpi4py {v['mpi4py']})")
    print(f"CUDA-aware MPI     {'yes' if aware.aware else 'no'}: {aware.reason}")
    print(f"cupy / CUDA        {v['cupy'] or 'not installed'} / runtime {v['cuda_runtime'] or '-'}, "
          f"driver {v['cuda_driver'] or '-'}")
    if all(r["gpu_index"] < 0 for r in facts["rows"]):
        print("GEMM library       numpy (no GPU)")
    else:
        print(f"GEMM library       HPCMM_GEMM_LIBRARY={config.gemm_library}; cuBLASLt through nvmath-python "
              f"{v['nvmath_python'] or 'not installed (cublasGemmEx only; pip install nvmath-python)'}")
    print(f"h5py / HDF5        {v['h5py']} / {v['hdf5']} (parallel HDF5: {'yes' if facts['parallel_hdf5'] else 'no'})")
    print(f"numpy / Python     {v['numpy']} / {v['python']}")
    memory = memory_by_device(facts["rows"], facts["grid"], facts["nodes"], kind_grids(config, facts))
    for label, members, _ in memory:
        free, total = min(r["free_bytes"] for r in members), min(r["total_bytes"] for r in members)
        print(f"{'memory':<19}{label}: {free / 2**30:.1f} of {total / 2**30:.1f} GiB free, {len(members)} rank(s)")
    if memory:
        sizes = ", ".join(f"{kind} {n}" for kind, n in memory[0][2].items())
        print(f"{'largest square':<19}{sizes} (N of N×N×N that fits every device by hpcmm's count)")
    for label, ranks, states in facts["mps"]:
        print(f"{'MPS':<19}{label}: {_mps_line(ranks, states)}")
    if not facts["mps"]:
        print("MPS                no GPU")
    for host, (ranks, gpus) in facts["oversubscribed"].items():
        print(f"note: {ranks} ranks share {gpus} GPU(s) on {host}")
    return 0
