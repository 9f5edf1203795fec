"""Put known bugs into a scratch copy of hpcmm and check that the tests catch each one.

    python tests/mutation.py [--only NAME ...] [--limit SECONDS]

For each mutation: copy ``hpcmm/``, ``tests/``, ``data/``, ``benchmarks/`` and ``pyproject.toml`` into a
temporary directory, apply the bug (an exact text replacement that must match
once, so a mutation that no longer applies is reported, not silently
skipped), run the tests that guard that figure there (with a time limit:
a bug may turn a loop endless), and print a table: bug → killed / survived.
A mutation is killed when its tests fail or time out; the unmutated copy must
pass the same tests first (``baseline``), or the table means nothing.
Exit status: the number of survivors (and 1 more if the baseline fails).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

#: name → (file, old text, new text, tests to run)
MUTATIONS = {
    "TF32 keeps one panel in flight": (
        "hpcmm/planning/algorithms/summa.py",
        "        return TF32_PREFETCH\n",
        "        return DEFAULT_PREFETCH\n",
        ["tests/test_timing.py"],
    ),
    "the planner ignores the prefetch rule": (
        "hpcmm/planning/choices.py",
        "    prefetch = prefetch_of(config, backend.on_gpu)\n    order = gemm_order(config.dtype, config.tf32, backend.on_gpu, config.gemm_order)\n    slots",
        "    prefetch = config.prefetch if config.prefetch is not None else 2\n    order = gemm_order(config.dtype, config.tf32, backend.on_gpu, config.gemm_order)\n    slots",
        ["tests/test_timing.py"],
    ),
    "timing window after step 0": (
        "hpcmm/execution/engine.py",
        "        product_end = backend.event(compute_stream)\n",
        "        product_end = backend.event(compute_stream)\n        product_start = marks[0].gemm_end\n",
        ["tests/test_timing.py"],
    ),
    "complex flops counted 2mnk": (
        "hpcmm/dtypes.py",
        'return (8.0 if str(dtype).startswith("complex") else 2.0) * m * n * k',
        "return 2.0 * m * n * k",
        ["tests/test_timing.py", "tests/test_bench.py"],
    ),
    "median of products -> minimum": (
        "hpcmm/cli/summary.py",
        "median = float(np.median(product_seconds))",
        "median = float(np.min(product_seconds))",
        ["tests/test_timing.py"],
    ),
    "verification tolerance x 10": (
        "hpcmm/verify.py",
        "    return lam * math.sqrt(variance) + bias\n",
        "    return 10 * (lam * math.sqrt(variance) + bias)\n",
        ["tests/test_verify_power.py", "tests/test_verify.py"],
    ),
    "in-place write, no atomic publish": (
        "hpcmm/cli/run.py",
        "tmp = h5io.temporary_path(config.out, guarded=True)",
        "tmp = config.out\n                h5io.publish = lambda *args: None\n"
        "                h5io.remove_temporary = lambda path: None",
        ["tests/test_bench.py::test_final_name_never_holds_a_partial_file"],
    ),
    "panel owner from the wrong grid dimension": (
        "hpcmm/planning/algorithms/summa.py",
        "a_root = layout.a_k_owner(k0)",
        "a_root = layout.b_k_owner(k0)",
        ["tests/test_summa_plan.py"],
    ),
    "weighted blocks ignored": (
        "hpcmm/planning/arrangement.py",
        "        if not self.weighted:\n            return Layout(m, n, k, self.grid)\n",
        "        if True:\n            return Layout(m, n, k, self.grid)\n",
        ["tests/test_arrangement.py"],
    ),
    "weighted blocks not aligned on GPUs": (
        "hpcmm/planning/arrangement.py",
        "quantum=GPU_BLOCK_QUANTUM if self.on_gpu else 1)",
        "quantum=1)",
        ["tests/test_arrangement.py"],
    ),
    "one product weighs the product balance": (
        "hpcmm/planning/assemble.py",
        "            if products >= PRODUCT_BALANCE_MOST or \\\n",
        "            if True or \\\n",
        ["tests/test_mpi_suite.py::test_mpi_suite[2]"],
    ),
    "a rank off the diagonal starts with its smaller own panel": (
        "hpcmm/planning/algorithms/summa.py",
        "return (max(own, key=lambda o: o[0])[1] if own else 0), False",
        "return (min(own, key=lambda o: o[0])[1] if own else 0), False",
        ["tests/test_summa_plan.py"],
    ),
    "each rank's own order forgets the wrap": (
        "hpcmm/planning/algorithms/summa.py",
        "    for lo, hi in ((first_k, k), (0, first_k)):\n",
        "    for lo, hi in ((first_k, k),):\n",
        ["tests/test_summa_plan.py", "tests/test_cli_e2e.py"],
    ),
    "the one-GPU candidates always in one order": (
        "hpcmm/bench/reference.py",
        "    shift = turn % count if count else 0\n",
        "    shift = 0\n",
        ["tests/test_bench.py::test_reference_times_the_same_work"],
    ),
    "ramp leaves the block's rest after it": (
        "hpcmm/planning/algorithms/summa.py",
        "        widths = sorted(widths + [rest])\n",
        "        widths = widths + [rest]\n",
        ["tests/test_summa_plan.py"],
    ),
    "weights left in launch order": (
        "hpcmm/planning/arrangement.py",
        "return tuple(self.balance.weights[i] for i in self.order)",
        "return self.balance.weights",
        ["tests/test_arrangement.py"],
    ),
    "ranks on one device: the largest need, not the sum": (
        "hpcmm/planning/choices.py",
        "return len(together), sum(together)",
        "return len(together), max(together, default=0)",
        ["tests/test_arrangement.py"],
    ),
    "one rank under MPS counts for its GPU": (
        "hpcmm/planning/arrangement.py",
        "return all(shared) if shared else",
        "return any(shared) if shared else",
        ["tests/test_arrangement.py"],
    ),
    "--balance takes any value": (
        "hpcmm/config.py",
        "        if self.balance not in BALANCE_MODES:\n",
        "        if False:\n",
        ["tests/test_config.py"],
    ),
    "grid order ignored when the ranks are placed": (
        "hpcmm/execution/topology.py",
        "comm = comm.Split(0, list(order).index(launch_rank))",
        "comm = comm.Split(0, launch_rank)",
        ["tests/test_mpi_suite.py::test_mpi_suite[4]"],
    ),
    "panel offset without the padding": (
        "hpcmm/execution/engine.py",
        "            a = self.row.fetch(step.a_root, step.a_offset * self.ld_a * itemsize,",
        "            a = self.row.fetch(step.a_root, step.a_offset * self.m_loc * itemsize,",
        ["tests/test_gemm_orders.py"],
    ),
    "2.5d layers all multiply the first k range": (
        "hpcmm/planning/algorithms/layers.py",
        "        return block_range(k, self.count, layer)\n",
        "        return block_range(k, self.count, 0)\n",
        ["tests/test_twofive.py"],
    ),
    "a leader pulls into a relay slot without waiting for its node peers' copies": (
        "hpcmm/execution/transport/channel.py",
        "        for peer in self.slot_readers:\n            self.peers.wait_peer_event(stream, peer, slot)\n",
        "",
        ["tests/test_mpi_suite.py::test_mpi_suite[4]"],
    ),
    "2.5d reduction pulls every peer's first piece": (
        "hpcmm/execution/transport/reduce.py",
        "            offset = self.rows[0] * self.row_bytes\n",
        "            offset = 0\n",
        ["tests/test_mpi_suite.py::test_mpi_suite[2]"],
    ),
    "re-layout taken for any gain": (
        "hpcmm/planning/gemm_orders.py",
        "MIN_GAIN = 0.15",
        "MIN_GAIN = 0.0",
        ["tests/test_gemm_orders.py"],
    ),
    "gemm planning leaves its products in C": (
        "hpcmm/execution/gemm_library.py",
        "                    c[...] = saved  # the planning's products added to C: put back what the step found\n",
        "                    pass\n",
        ["tests/test_gemm_library.py"],
    ),
    "gemm library: cuBLASLt kept where slower": (
        "hpcmm/execution/gemm_library.py",
        "    faster = statistics.median(cublaslt_seconds) < (1 - margin) * statistics.median(gemmex_seconds)",
        "    faster = statistics.median(cublaslt_seconds) < (1 + margin) * statistics.median(gemmex_seconds)",
        ["tests/test_gemm_library.py"],
    ),
    "gemm library: tf32 planned too": (
        "hpcmm/execution/gemm_library.py",
        '        if row["dtype"] not in PLANNED_KINDS:',
        "        if False:",
        ["tests/test_gemm_library.py"],
    ),
    "engine keeps its gemm plans": (
        "hpcmm/execution/engine.py",
        "        self.backend.forget_gemm_plans()\n",
        "",
        ["tests/test_gemm_library.py"],
    ),
    "bench: hpcmm timed with the counts asked, cuBLASMp with its own": (
        "hpcmm/bench/command.py",
        "                             iters=max(config.iters, CUBLASMP_MIN_ITERS))",
        "                             iters=config.iters)",
        ["tests/test_bench.py"],
    ),
    "gemm library: long shapes planned too": (
        "hpcmm/execution/gemm_library.py",
        "            if once > PLAN_LIMIT_SECONDS:",
        "            if False:",
        ["tests/test_gemm_library.py"],
    ),
    "gemm library: ranks sharing a GPU plan too": (
        "hpcmm/execution/gemm_library.py",
        "        elif sharers > 1:",
        "        elif False:",
        ["tests/test_gemm_library.py"],
    ),
    "gemm library: tiny shapes planned too": (
        "hpcmm/execution/gemm_library.py",
        "            if once < PLAN_FLOOR_SECONDS:",
        "            if False:",
        ["tests/test_gemm_library.py"],
    ),
    "grid orientation: auto never turns float64": (
        "hpcmm/planning/grid_orientation.py",
        "    if not (on_gpu and nodes == 1 and kind in TALL_KINDS):",
        "    if True:",
        ["tests/test_grid_orientation.py"],
    ),
    "grid orientation: turned across nodes too": (
        "hpcmm/planning/grid_orientation.py",
        "    if not (on_gpu and nodes == 1 and kind in TALL_KINDS):",
        "    if not (on_gpu and kind in TALL_KINDS):",
        ["tests/test_grid_orientation.py"],
    ),
    "grid orientation: shared GPUs keep the tall grid": (
        "hpcmm/planning/grid_orientation.py",
        '    return "tall" if narrow else "row"',
        '    return "tall"',
        ["tests/test_grid_orientation.py"],
    ),
    "grid orientation: one row for any number of ranks": (
        "hpcmm/planning/grid_orientation.py",
        "    if not shared or ranks is not None and ranks > ROW_MOST_RANKS:",
        "    if not shared:",
        ["tests/test_grid_orientation.py"],
    ),
    "grid orientation: one row however narrow the strips": (
        "hpcmm/planning/grid_orientation.py",
        "    narrow = ranks is not None and n is not None and n // ranks < ROW_LEAST_COLUMNS",
        "    narrow = False",
        ["tests/test_grid_orientation.py"],
    ),
    "grid orientation: the run does not see its GPUs shared": (
        "hpcmm/planning/arrangement.py",
        "                      shared=backend.on_gpu and balance.shared, ranks=comm.Get_size(), n=shape[1])",
        "                      shared=False, ranks=comm.Get_size(), n=shape[1])",
        ["tests/test_grid_orientation.py", "tests/test_arrangement.py"],
    ),
    "grid orientation: the run does not pass C's columns": (
        "hpcmm/planning/arrangement.py",
        "                      shared=backend.on_gpu and balance.shared, ranks=comm.Get_size(), n=shape[1])",
        "                      shared=backend.on_gpu and balance.shared, ranks=comm.Get_size())",
        ["tests/test_grid_orientation.py"],
    ),
    "balance product: the re-laid grid forgets the run's face": (
        "hpcmm/planning/assemble.py",
        "        return arrangement_for(balance, arrangement.mps, shape, config.grid, backend.on_gpu, face)",
        "        return arrangement_for(balance, arrangement.mps, shape, config.grid, backend.on_gpu)",
        ["tests/test_mpi_suite.py::test_mpi_suite[2]"],
    ),
    "backend: from_host returns before its copy lands": (
        "hpcmm/execution/backend.py",
        "            copy = self.cupy.asarray(np.asarray(array, order=order), order=order)\n"
        "            self.cupy.cuda.get_current_stream().synchronize()\n",
        "            copy = self.cupy.asarray(np.asarray(array, order=order), order=order)\n",
        ["tests/test_backend_streams.py"],
    ),
    "backend: poison returns before its fill lands": (
        "hpcmm/execution/backend.py",
        "                super().poison(array)\n                self.cupy.cuda.get_current_stream().synchronize()\n",
        "                super().poison(array)\n",
        ["tests/test_backend_streams.py"],
    ),
    "model measure: the timed shapes left out of the description": (
        "hpcmm/model/cost.py",
        "        gemm[t] = dataclasses.replace(curve, tflops=curve.tflops * sharers, unaligned=odd, shapes=shapes)",
        "        gemm[t] = dataclasses.replace(curve, tflops=curve.tflops * sharers, unaligned=odd)",
        ["tests/test_model.py"],
    ),
    "model: a staged copy waits the CUDA-aware round's figure": (
        "hpcmm/model/cost.py",
        "                        end = end + chunks * others * machine.copy_wait_us * 1e-6",
        "                        end = end + chunks * others * machine.shared_mpi_us * 1e-6",
        ["tests/test_model.py"],
    ),
    "model: the built-in keeps the CUDA-aware round's old wait": (
        "hpcmm/model/machines/h200x2.json",
        '  "shared_mpi_us": 80.0,',
        '  "shared_mpi_us": 67.0,',
        ["tests/test_model.py"],
    ),
    "the 2.5D layers take the narrowest layer's panel again (one-column steps)": (
        "hpcmm/planning/algorithms/summa.py",
        "        widest = max(auto_panel(layout, itemsize, on_gpu, widest=cap, shared=shared) for layout in layouts)\n",
        "        widest = min(auto_panel(layout, itemsize, on_gpu, widest=cap, shared=shared) for layout in layouts)\n",
        ["tests/test_summa_plan.py"],
    ),
    "the default panel cuts to the shallowest range again (one-column steps)": (
        "hpcmm/planning/algorithms/summa.py",
        "    deepest = max(1, max(_spans(layout), default=layout.k))\n",
        "    deepest = max(1, min(_spans(layout), default=layout.k))\n",
        ["tests/test_summa_plan.py"],
    ),
    "model: measured GEMM shapes ignored": (
        "hpcmm/model/cost.py",
        "        eff = np.where(np.isnan(measured), eff, measured)",
        "        eff = eff",
        ["tests/test_model.py"],
    ),
    "model: MPS clients priced as time-sliced": (
        "hpcmm/model/cost.py",
        "    return machine.mps_device_efficiency if mps else machine.shared_device_efficiency",
        "    return machine.shared_device_efficiency",
        ["tests/test_model.py"],
    ),
    "model check: every run predicted with the first description": (
        "hpcmm/model/cost.py",
        "            return machines[max(before)[1]]",
        "            return machines[0]",
        ["tests/test_model.py"],
    ),
    "model check: repeats judged by the first run's prediction": (
        "hpcmm/model/cost.py",
        "    return float(np.median([r.predicted for r in runs]))",
        "    return runs[0].predicted",
        ["tests/test_model.py"],
    ),
    "model links: the GEMM curves replaced too": (
        "hpcmm/model/cost.py",
        "    fields = dataclasses.asdict(base)\n    _with_links(fields, transport, base.device == \"gpu\")",
        "    fields = dataclasses.asdict(base)\n    fields[\"gemm\"] = {}\n    _with_links(fields, transport, base.device == \"gpu\")",
        ["tests/test_model.py"],
    ),
    "model check: the file's MPS state ignored": (
        "hpcmm/model/cost.py",
        '    mps = bool(summ.get("mps", False))',
        "    mps = False",
        ["tests/test_model.py"],
    ),
    "model: ranks of one GPU stretch every GEMM by their number": (
        "hpcmm/model/cost.py",
        "    share = np.where(pl.sharers > 1, (1.0 if on_gpu else pl.sharers) / _sharing_efficiency(machine, mps), 1.0)",
        "    share = np.where(pl.sharers > 1, pl.sharers / _sharing_efficiency(machine, mps), 1.0)",
        ["tests/test_model.py"],
    ),
    "model: a staged broadcast among 4 reaches all at once": (
        "hpcmm/model/cost.py",
        "    return (members >= lo) & (members <= hi) & (np.asarray(nbytes, dtype=float) >= STAGED_CHAIN_BYTES)",
        "    return np.zeros(np.broadcast(members, nbytes).shape, dtype=bool)",
        ["tests/test_model.py"],
    ),
    "model: staged transfers at once do not slow each other": (
        "hpcmm/model/cost.py",
        "    return np.minimum(alone / (1.0 + machine.staged_contention * (k - 1.0)), machine.staged_host_gbps / k)",
        "    return np.minimum(alone, machine.staged_host_gbps / k)",
        ["tests/test_model.py"],
    ),
    "model: the 2.5d layers of one host share nothing": (
        "hpcmm/model/cost.py",
        "        layers = 1.0 + (c - 1) * duty[-1]",
        "        layers = 1.0",
        ["tests/test_model.py"],
    ),
    "grid orientation: the model keeps the wide grid": (
        "hpcmm/model/cost.py",
        "    grid = Grid(*grid_shape) if grid_shape else oriented(*compute_dims(ranks), face)",
        "    grid = Grid(*(grid_shape or compute_dims(ranks)))",
        ["tests/test_grid_orientation.py"],
    ),
    "verification: a zero row of A excuses any error in C": (
        "hpcmm/verify.py",
        "ratio = np.where(scaled, diff / np.where(scaled, scale, 1.0), np.where(diff > 0, np.inf, 0.0))",
        "ratio = np.where(scaled, diff / np.where(scaled, scale, 1.0), 0.0)",
        ["tests/test_unlisted_areas.py"],
    ),
    "verification: zero rows of A weigh the tolerance's ratios": (
        "hpcmm/verify.py",
        "live, scaled = sigma > 0, scale > 0",
        "live, scaled = sigma >= 0, scale > 0",
        ["tests/test_unlisted_areas.py"],
    ),
    "full check: zero rows of A in its detectable error": (
        "hpcmm/verify.py",
        "worst = np.where(row_scale[:, None] > 0, scale / np.where(row_scale > 0, row_scale, 1)[:, None], 0)",
        "worst = scale / row_scale[:, None]",
        ["tests/test_unlisted_areas.py"],
    ),
    "status file: an unexpected error recorded as exit 0": (
        "hpcmm/io/status.py",
        "    code = 1\n    try:\n        code = body(argv)",
        "    code = 0\n    try:\n        code = body(argv)",
        ["tests/test_unlisted_areas.py"],
    ),
    "collective errors: the highest failing rank's error wins": (
        "hpcmm/errors.py",
        "kind, message, code, origin, named = failed[0]",
        "kind, message, code, origin, named = failed[-1]",
        ["tests/test_mpi_suite.py::test_mpi_suite[2]"],
    ),
    "collective errors: the rank named is the communicator's": (
        "hpcmm/errors.py",
        "mine = (*_describe(exc), _job_rank(comm) if origin is None else origin, origin is not None)",
        "mine = (*_describe(exc), (comm.Get_rank() if comm is not None else 0) if origin is None else origin, "
        "origin is not None)",
        ["tests/test_mpi_suite.py::test_mpi_suite[2]"],
    ),
    "summary: GEMM time the mean over the products": (
        "hpcmm/cli/summary.py",
        "busy_med = np.median(busy, axis=1)",
        "busy_med = np.mean(busy, axis=1)",
        ["tests/test_unlisted_areas.py"],
    ),
    "summary: exposed communication the mean over the products": (
        "hpcmm/cli/summary.py",
        "exposed = float(np.median(step_seconds[..., 2].sum(axis=2).max(axis=0)))",
        "exposed = float(np.mean(step_seconds[..., 2].sum(axis=2).max(axis=0)))",
        ["tests/test_unlisted_areas.py"],
    ),
    "2.5d reduction: C pieces counted, not C - 1": (
        "hpcmm/execution/transport/reduce.py",
        "return (self.count - 1) * (self.rows[1] - self.rows[0]) * self.row_bytes",
        "return self.count * (self.rows[1] - self.rows[0]) * self.row_bytes",
        ["tests/test_mpi_suite.py::test_mpi_suite[2]"],
    ),
    "2.5d reduction: every peer counted with all the pieces": (
        "hpcmm/execution/layered.py",
        "piece = self.reduction.nbytes_from_peers() // max(self.layers.count - 1, 1)",
        "piece = self.reduction.nbytes_from_peers()",
        ["tests/test_mpi_suite.py::test_mpi_suite[3]"],
    ),
    "2.5d reduction: bytes recorded from the rank to its peer": (
        "hpcmm/execution/layered.py",
        "out[(peer, self.topo.rank, self.reduction.peers.path)] += piece",
        "out[(self.topo.rank, peer, self.reduction.peers.path)] += piece",
        ["tests/test_mpi_suite.py::test_mpi_suite[2]"],
    ),
    "2.5d reduction: bytes counted without the padding": (
        "hpcmm/execution/transport/reduce.py",
        "return (self.count - 1) * (self.rows[1] - self.rows[0]) * self.row_bytes",
        "return (self.count - 1) * (self.rows[1] - self.rows[0]) * self.shape[1] * self.dtype.itemsize",
        ["tests/test_mpi_suite.py::test_mpi_suite[2]"],
    ),
    "figures files replace a file that appeared at --out": (
        "hpcmm/io/h5io.py",
        "        return publish(tmp, out, overwrite)\n",
        "        return publish(tmp, out, True)\n",
        ["tests/test_unlisted_areas.py"],
    ),
    "report --plot draws the first product by default": (
        "hpcmm/cli/report.py",
        "it = int(iterations[-1] if iteration is None else iteration)",
        "it = int(iterations[0] if iteration is None else iteration)",
        ["tests/test_unlisted_areas.py"],
    ),
    "report --plot draws every product over each other": (
        "hpcmm/cli/report.py",
        "ev = events[events[:, 1] == it]",
        "ev = events",
        ["tests/test_unlisted_areas.py"],
    ),
    "--grid taken with --algo auto": (
        "hpcmm/config.py",
        'if algo.name != "summa" and self.grid is not None:',
        'if algo.name == "2.5d" and self.grid is not None:',
        ["tests/test_unlisted_areas.py"],
    ),
    "--grid taken with 2.5d without C": (
        "hpcmm/config.py",
        'if algo.name != "summa" and self.grid is not None:',
        'if algo.layers is not None and self.grid is not None:',
        ["tests/test_unlisted_areas.py"],
    ),
    "auto weighs layers over nodes of different sizes": (
        "hpcmm/planning/algo_choice.py",
        "counts = valid_layer_counts(sizes[0], k) if len(sizes) == 1 else ()",
        "counts = valid_layer_counts(sizes[0], k)",
        ["tests/test_unlisted_areas.py"],
    ),
    "a relayed panel not marked as moved by the host": (
        "hpcmm/execution/transport/channel.py",
        "return Transfer(dst, ready, self.world_ranks[root], self.bcast.path, nbytes, started, host_bound=True)",
        "return Transfer(dst, ready, self.world_ranks[root], self.bcast.path, nbytes, started, host_bound=False)",
        ["tests/test_mpi_suite.py::test_mpi_suite[2]"],
    ),
    "a relayed panel's start before the wait for its slot": (
        "hpcmm/execution/transport/channel.py",
        "return Transfer(dst, ready, self.world_ranks[root], self.bcast.path, nbytes, started, host_bound=True)",
        "return Transfer(dst, ready, self.world_ranks[root], self.bcast.path, nbytes, None, host_bound=True)",
        ["tests/test_mpi_suite.py::test_mpi_suite[2]"],
    ),
}


def _copy(scratch: Path) -> None:
    for name in ("hpcmm", "tests"):
        shutil.copytree(REPO / name, scratch / name, ignore=shutil.ignore_patterns("__pycache__", "*.h5"))
    # The small input files the MPI tests read (tests/mpi: data/small.h5, ...).
    shutil.copytree(REPO / "data", scratch / "data", ignore=shutil.ignore_patterns("__pycache__"))
    # The measurements the model's tests check it against (benchmarks/results/*/*.csv).
    shutil.copytree(REPO / "benchmarks", scratch / "benchmarks", ignore=shutil.ignore_patterns("*.h5"))
    shutil.copy2(REPO / "pyproject.toml", scratch / "pyproject.toml")


def _apply(scratch: Path, path: str, old: str, new: str) -> None:
    target = scratch / path
    text = target.read_text()
    if text.count(old) != 1:
        raise SystemExit(f"mutation does not apply: {path} holds {text.count(old)} copies of {old!r}")
    target.write_text(text.replace(old, new))


def _run_tests(scratch: Path, tests: list[str], limit: float) -> tuple[str, float, str]:
    """``("passed" | "failed" | "timed out", seconds, the first failing test)`` for ``tests`` in ``scratch``."""
    env = dict(os.environ, PYTHONPATH=str(scratch), OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "--timeout", str(int(limit)), *tests]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=scratch, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=limit + 30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.communicate()
        return "timed out", time.monotonic() - t0, ""
    first = next((line.split(" - ")[0][len("FAILED "):] for line in out.decode(errors="replace").splitlines()
                  if line.startswith(("FAILED ", "ERROR "))), "")
    return ("passed" if proc.returncode == 0 else "failed"), time.monotonic() - t0, first


def _imports_scratch(scratch: Path) -> bool:
    env = dict(os.environ, PYTHONPATH=str(scratch))
    out = subprocess.run([sys.executable, "-c", "import hpcmm; print(hpcmm.__file__)"], cwd=scratch, env=env,
                         capture_output=True, text=True, check=False).stdout.strip()
    return out.startswith(str(scratch))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="names (or parts of names) of the mutations to run")
    parser.add_argument("--limit", type=float, default=300.0, help="seconds the tests of one mutation may take")
    args = parser.parse_args(argv)
    chosen = {n: m for n, m in MUTATIONS.items() if not args.only or any(o in n for o in args.only)}
    rows, survivors = [], 0
    with tempfile.TemporaryDirectory(prefix="hpcmm-mutation-") as root:
        base = Path(root) / "baseline"
        _copy(base)
        if not _imports_scratch(base):
            raise SystemExit("the scratch copy's hpcmm is not the one imported: check PYTHONPATH handling")
        all_tests = sorted({t for *_, tests in chosen.values() for t in tests})
        status, seconds, first = _run_tests(base, all_tests, args.limit * 2)
        rows.append(("baseline (no bug)", first or " ".join(all_tests), "ok" if status == "passed" else status,
                     seconds))
        failed_baseline = status != "passed"
        for i, (name, (path, old, new, tests)) in enumerate(chosen.items()):
            scratch = Path(root) / f"m{i}"
            _copy(scratch)
            _apply(scratch, path, old, new)
            status, seconds, first = _run_tests(scratch, tests, args.limit)
            verdict = "survived" if status == "passed" else f"killed ({status})"
            survivors += status == "passed"
            rows.append((name, first or " ".join(tests), verdict, seconds))
            shutil.rmtree(scratch, ignore_errors=True)
    width = max(len(r[0]) for r in rows)
    print(f"{'bug':<{width}}  {'result':<20}  {'s':>6}  first failing test (or the tests run)")
    for name, tests, verdict, seconds in rows:
        print(f"{name:<{width}}  {verdict:<20}  {seconds:>6.1f}  {tests}")
    return survivors + int(failed_baseline)


if __name__ == "__main__":
    sys.exit(main())
