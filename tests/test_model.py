"""The cost model (hpcmm/model.py): pure, no MPI; many grids and machines."""

from __future__ import annotations

import dataclasses
import doctest
import json
import math

import numpy as np
import pytest

from hpcmm import model
from hpcmm.algorithms import Step, auto_panel, own_start, summa_plan
from hpcmm.errors import InputError
from hpcmm.layout import Grid, Layout
from hpcmm.model import GemmCurve, Problem, builtin, predict

MACHINES = sorted(model.BUILTIN)
rng = np.random.default_rng(5)
SHAPES = [(int(a), int(b), int(c)) for a, b, c in rng.integers(300, 9000, size=(6, 3))] + [(4096, 4096, 4096)]


def _cpu() -> model.Machine:
    return model.Machine(name="cpu-test", device="cpu", devices_per_node=1, hosts=1, memory_gib=64,
                         memory_gbps=20, gemm={"float64": GemmCurve(0.05, 16, 16, 16, 5.0)},
                         intra_gbps=5, local_gbps=5, net_gbps=3, nics_per_node=1, accumulate_passes=4)


@pytest.mark.parametrize("name", MACHINES)
@pytest.mark.parametrize("shape", SHAPES)
def test_one_rank_is_the_gemm(name, shape):
    machine = builtin(name)
    p = predict(Problem(*shape, "float64"), 1, machine)
    want = float(machine.gemm_seconds(shape[0], shape[1], shape[2], "float64", False))
    assert p.steps == 1 and p.exposed_seconds == 0.0
    assert p.seconds == pytest.approx(want, rel=1e-12)
    assert p.bytes_by_path == {}


@pytest.mark.parametrize("ranks,rpn,prefetch", [(2, None, 1), (4, 2, 1), (8, 1, 2), (6, 3, 0), (3, 1, 1), (8, 4, 3)])
@pytest.mark.parametrize("shape", SHAPES[:4])
def test_steps_are_summa_plan(ranks, rpn, prefetch, shape):
    """The model walks the engine's own plan: same blocks, panel, ramp and steps."""
    from hpcmm.arrangement import arrangement_for
    from hpcmm.balance import Balance, ranks_per_device, weights_for
    from hpcmm.grid_orientation import facing
    from hpcmm.mps import MpsState

    machine = builtin("h200x2")
    p = predict(Problem(*shape), ranks, machine, ranks_per_node=rpn, prefetch=prefetch)
    # The run's arrangement for the default balance: rank r on GPU r % 2 (3 ranks: weights 1/2, 1, 1/2).
    devices = [r % 2 for r in range(ranks)]
    balance = Balance("share", weights_for("share", devices), tuple(devices), ranks_per_device(devices))
    idle = tuple(MpsState(False, "pipe", "/tmp/p", "not seen") for _ in devices)
    nodes = 1 if rpn is None or rpn >= ranks else -(-ranks // rpn)
    face = facing("auto", "float64", on_gpu=True, nodes=nodes)  # the run turns float64's grid on one node
    layout = arrangement_for(balance, idle, shape, None, on_gpu=True, face=face).layout(*shape)
    rows, cols = layout.grid.rows, layout.grid.cols
    panel = auto_panel(layout, 8, on_gpu=True, shared=ranks > 2)  # h200x2: more than 2 ranks share its GPUs
    if rpn is None or rpn >= ranks:  # one node: each rank's own order, as the engine takes it
        starts = [own_start(layout, r) for r in range(ranks)]
        plans = [summa_plan(layout, panel, ramp=prefetch > 0 and not own, first_k=first) for first, own in starts]
    else:
        plans = [summa_plan(layout, panel, ramp=prefetch > 0 and ranks > 1)]
    assert (p.panel, p.steps, p.grid) == (panel, max(map(len, plans)), f"{rows}x{cols}")


@pytest.mark.parametrize("size", [1, 2, 3, 4, 6, 8, 12, 16, 18, 64, 512])
def test_compute_dims_matches_mpi(size):
    from mpi4py import MPI  # Compute_dims needs no MPI_Init beyond the import

    assert model.compute_dims(size) == tuple(MPI.Compute_dims(size, 2))


def test_bytes_received_follow_the_layout():
    """Every rank receives the panels it does not own: (m·k)(1 - 1/cols)·rows... summed over ranks."""
    m, n, k = 3001, 2003, 1999
    for ranks in (2, 4, 6, 8):
        rows, cols = model.compute_dims(ranks)
        p = predict(Problem(m, n, k), ranks, builtin("h200x2"), ranks_per_node=1, cuda_aware=True)
        layout = Layout(m, n, k, Grid(rows, cols))
        want = 0
        for r in range(ranks):
            (mr, ka), (kb, nr) = layout.local_shapes(r)["A"], layout.local_shapes(r)["B"]
            want += (k - ka) * mr + (k - kb) * nr
        assert sum(p.bytes_by_path.values()) == pytest.approx(want * 8)


@pytest.mark.parametrize("name", MACHINES)
@pytest.mark.parametrize("field", ["net_gbps", "intra_gbps", "staged_gbps", "staged_host_gbps", "local_gbps"])
@pytest.mark.parametrize("ranks,rpn,aware", [(2, 1, True), (8, 2, False), (8, 1, True), (4, 2, False), (16, 4, True)])
def test_more_bandwidth_never_slower(name, field, ranks, rpn, aware):
    machine = builtin(name)
    prob = Problem(6001, 4099, 5003)
    kwargs = dict(ranks_per_node=rpn, cuda_aware=aware, ranks_per_host=ranks)
    if machine.hosts == 0:
        kwargs["ranks_per_host"] = min(ranks, machine.devices_per_node)
    slow = predict(prob, ranks, machine, **kwargs)
    fast = predict(prob, ranks, machine.replace(**{field: getattr(machine, field) * 2}), **kwargs)
    assert fast.seconds <= slow.seconds * (1 + 1e-12)


@pytest.mark.parametrize("ranks,rpn", [(2, 1), (8, 2), (4, 1)])
def test_faster_gemm_never_slower(ranks, rpn):
    machine = builtin("h200x2")
    curves = {t: dataclasses.replace(c, tflops=c.tflops * 2) for t, c in machine.gemm.items()}
    prob = Problem(8192, 8192, 8192)
    assert (predict(prob, ranks, machine.replace(gemm=curves), ranks_per_node=rpn).seconds
            <= predict(prob, ranks, machine, ranks_per_node=rpn).seconds)


def test_time_is_at_least_gemm_and_exposed():
    for ranks, rpn, aware in [(2, 1, False), (8, 2, True), (8, 1, False), (4, None, False)]:
        p = predict(Problem(10007, 6001, 3001), ranks, builtin("h200x2"), ranks_per_node=rpn, cuda_aware=aware)
        assert p.seconds >= p.gemm_seconds - 1e-12
        assert p.seconds == pytest.approx(p.gemm_seconds + p.exposed_seconds, rel=0.25)


def test_staged_slower_than_cuda_aware_and_ipc():
    prob, machine = Problem(8192, 8192, 8192), builtin("h200x2")
    ipc = predict(prob, 2, machine)
    mpi = predict(prob, 2, machine, ranks_per_node=1, cuda_aware=True)
    staged = predict(prob, 2, machine, ranks_per_node=1, cuda_aware=False)
    assert set(ipc.bytes_by_path) == {"ipc"} and set(mpi.bytes_by_path) == {"mpi"}
    assert set(staged.bytes_by_path) == {"staged"}
    assert ipc.seconds <= mpi.seconds < staged.seconds
    # staged is bound by the host MPI: what crosses at 5.9 GB/s
    assert staged.seconds > staged.bytes_by_path["staged"] / (machine.staged_gbps * 1e9)


def test_prefetch_hides_communication():
    prob, machine = Problem(16384, 16384, 16384), builtin("h200x8-ndr")
    none = predict(prob, 16, machine, prefetch=0)
    one = predict(prob, 16, machine, prefetch=1)
    assert one.seconds < none.seconds
    assert none.exposed_seconds > one.exposed_seconds


def test_cpu_blocks_no_overlap():
    """On a CPU the engine copies and multiplies on the host: time = GEMMs + transfers."""
    prob = Problem(700, 500, 600)
    p1 = predict(prob, 4, _cpu(), prefetch=1)
    p3 = predict(prob, 4, _cpu(), prefetch=3)  # the same plan (ramped), deeper prefetch
    assert p1.exposed_seconds > 0
    assert p3.seconds == pytest.approx(p1.seconds, rel=1e-9)
    assert p1.seconds == pytest.approx(p1.gemm_seconds + p1.exposed_seconds, rel=1e-9)


def test_leader_nic_carries_more():
    """At 64 nodes (grid 32x16, a row on two nodes) the row's leader takes every crossing A panel
    for its node on its one NIC, beside the B panels every NIC takes: 2.62 GB against 2.08."""
    p = predict(Problem(65536, 65536, 65536), 512, builtin("h200x8-ndr"))
    a_cross, b_all = 2048 * 32768 * 8, 4096 * 65536 * 8 * 31 / 32
    assert p.nic_bytes_max == pytest.approx(a_cross + b_all)
    assert p.nic_bytes_mean == pytest.approx(b_all + a_cross / 8)


def test_split_relay_and_25d_change_nothing_on_one_node():
    prob, machine = Problem(32768, 32768, 32768), builtin("h200x8-ndr")
    base = predict(prob, 8, machine)
    assert predict(prob, 8, machine, algo="split-relay").seconds == pytest.approx(base.seconds)
    auto = predict(prob, 8, machine, algo="auto")
    assert auto.seconds <= base.seconds


def test_split_relay_helps_many_nodes():
    prob, machine = Problem(131072, 131072, 131072), builtin("h200x8-ndr")
    base = predict(prob, 512, machine)
    split = predict(prob, 512, machine, algo="split-relay")
    assert split.seconds < base.seconds
    assert split.nic_bytes_max < base.nic_bytes_max


def test_25d_refuses_what_does_not_fit_and_bad_layers():
    machine = builtin("h200x8-ndr").replace(memory_gib=1.0)
    p = predict(Problem(65536, 65536, 65536), 64, machine, algo="2.5d:8")
    assert math.isinf(p.seconds) and "does not fit" in p.notes[-1]
    with pytest.raises(InputError, match="2.5d:3"):
        predict(Problem(4096, 4096, 4096), 16, builtin("h200x8-ndr"), algo="2.5d:3")


def test_summa_refuses_what_does_not_fit():
    p = predict(Problem(300000, 300000, 300000), 2, builtin("h200x2"))
    assert math.isinf(p.seconds) and p.tflops == 0.0


def test_memory_rule_is_the_engines():
    from hpcmm.engine import memory_needed

    for shape, grid in [((1001, 999, 1003), Grid(2, 2)), ((4096, 300, 77), Grid(3, 1)), ((8, 9, 10), Grid(1, 4))]:
        layout = Layout(*shape, grid)
        assert model.memory_bytes(Problem(*shape), grid, 64, 3) == memory_needed(layout, 0, 8, 64, 3)
        # with re-laid-out panels (tf32's A, or an HPCMM_GEMM_ORDER override): the scratch too
        for relayout in [(2, 0), (0, 2), (3, 3)]:
            assert model.memory_bytes(Problem(*shape), grid, 64, 3, relayout) == \
                memory_needed(layout, 0, 8, 64, 3, relayout)


def test_gemm_curve_properties():
    machine = builtin("h200x2")
    small = machine.gemm_seconds(4096, 4096, 128, "float64", True) / 128
    big = machine.gemm_seconds(4096, 4096, 2048, "float64", True) / 2048
    assert big < small  # deep panels run nearer the full rate
    assert machine.gemm_seconds(0, 4096, 2048, "float64", True) == 0.0
    odd = machine.gemm_seconds(4097, 4096, 2048, "float64", False)
    even = machine.gemm_seconds(4098, 4096, 2048, "float64", False)
    assert odd > even


def test_measured_shapes_take_their_rate():
    """A shape in ``GemmCurve.shapes`` runs at its measured share of the rate (its passes over C in it);
    any other shape, even of the same area, at the curve's; scaling the rate scales both."""
    curve = GemmCurve(tflops=60.0, half_m=96, half_n=96, half_k=1, launch_us=2.0,
                      shapes=[[8192, 4096, 2048, 0.8], [16384, 2048, 2048, 0.95]])
    machine = builtin("h200x2").replace(gemm={"float64": curve})
    plain = machine.replace(gemm={"float64": dataclasses.replace(curve, shapes=())})
    flops = 2 * 8192 * 4096 * 2048
    for acc in (False, True):
        t = float(machine.gemm_seconds(8192, 4096, 2048, "float64", acc))
        assert t == pytest.approx(2e-6 + flops / (0.8 * 60e12), rel=1e-12)
        assert float(machine.gemm_seconds(16384, 2048, 2048, "float64", acc)) == \
            pytest.approx(2e-6 + flops / (0.95 * 60e12), rel=1e-12)
        # the transposed block and another depth were not measured: the curve
        for shape in ((4096, 8192, 2048), (8192, 4096, 1024)):
            assert float(machine.gemm_seconds(*shape, "float64", acc)) == \
                float(plain.gemm_seconds(*shape, "float64", acc))
    both = machine.gemm_seconds(np.array([8192, 4096]), np.array([4096, 8192]), 2048, "float64", False)
    assert both[0] == pytest.approx(2e-6 + flops / (0.8 * 60e12)) and both[1] == plain.gemm_seconds(4096, 8192, 2048,
                                                                                                     "float64", False)
    faster = machine.replace(gemm={"float64": dataclasses.replace(curve, tflops=120.0)})
    assert float(faster.gemm_seconds(8192, 4096, 2048, "float64", False)) == \
        pytest.approx(2e-6 + flops / (0.8 * 120e12), rel=1e-12)
    assert builtin("h200x2").gemm["float64"].shapes  # the built-in holds the shapes measured on its GPUs


def test_fit_gemm_curve_recovers_a_curve():
    truth = GemmCurve(tflops=40.0, half_m=64, half_n=64, half_k=32, launch_us=5.0)
    machine = builtin("h200x2").replace(gemm={"float64": truth})
    samples = [(m, n, w, acc, float(machine.gemm_seconds(m, n, w, "float64", acc)))
               for m in (256, 1024, 4096) for n in (256, 1024, 4096) for w in (64, 256, 1024) for acc in (False, True)]
    fit = model.fit_gemm_curve(samples, "float64", machine.memory_gbps, machine.accumulate_passes)
    fitted = machine.replace(gemm={"float64": fit})
    for m, n, w, acc, t in samples:
        assert float(fitted.gemm_seconds(m, n, w, "float64", acc)) == pytest.approx(t, rel=0.03)


def test_fit_link():
    samples = [(b, 20e-6 + b / 50e9) for b in (1 << 20, 1 << 24, 1 << 28)]
    gbps, lat = model.fit_link(samples)
    assert gbps == pytest.approx(50, rel=1e-6) and lat == pytest.approx(20, rel=1e-6)


def test_machine_json_round_trip(tmp_path):
    for name in MACHINES:
        machine = builtin(name)
        path = tmp_path / f"{name}.json"
        path.write_text(machine.to_json())
        assert model.load_machine(str(path)) == machine


def test_machine_errors(tmp_path):
    with pytest.raises(InputError, match="no such built-in machine"):
        model.load_machine("no-such-machine")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"name": "x", "colour": "red"}))
    with pytest.raises(InputError, match="unknown field.*colour"):
        model.load_machine(str(bad))
    with pytest.raises(InputError, match="nics_per_node=0"):
        model.Machine(name="x", nics_per_node=0)
    with pytest.raises(InputError, match="no GEMM rate for bfloat16"):
        predict(Problem(64, 64, 64, "bfloat16"), 1, _cpu())
    with pytest.raises(InputError, match="--algo='x'"):
        predict(Problem(64, 64, 64), 2, builtin("h200x2"), algo="x")
    with pytest.raises(InputError, match="--grid=3x3"):
        predict(Problem(64, 64, 64), 8, builtin("h200x2"), grid=(3, 3))


def test_placement_matches_topology_rule():
    """Virtual nodes cut each host's ranks in order, GPUs by host-local rank (as topology and backend)."""
    pl = model.place(8, builtin("h200x2"), ranks_per_node=2)
    assert list(pl.vnode) == [0, 0, 1, 1, 2, 2, 3, 3]
    assert list(pl.device) == [0, 1, 0, 1, 0, 1, 0, 1]
    assert list(pl.sharers) == [4] * 8
    pl = model.place(24, builtin("h200x8-ndr"))
    assert list(pl.vnode) == [0] * 8 + [1] * 8 + [2] * 8
    assert len(set(pl.nic)) == 24


def test_model_command_prints_and_measures_on_cpu(tmp_path, monkeypatch, capsys):
    """`model` predict/show/measure in process (one rank, numpy): the description it writes loads and predicts."""
    import argparse

    from mpi4py import MPI

    from hpcmm import cli, h5io

    ns = cli.parse(["model", "--m", "4096", "--ranks", "4", "--ranks-per-node", "2", "--json"])
    assert model.model_main(ns, MPI.COMM_SELF) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["grid"] == "2x2" and out["seconds"] > 0 and set(out["bytes_by_path"]) == {"ipc", "staged"}
    links = tmp_path / "links.h5"
    rows = [{"src": 0, "dst": 1, "path": p, "bytes": b, "seconds": lat + b / (gbps * 1e9), "gbps": 0.0}
            for p, gbps, lat in (("shm", 8.0, 2e-6), ("mpi", 3.0, 20e-6)) for b in (1 << 20, 1 << 24)]
    h5io.write_table_file(str(links), False, "bench-transport", "transport", rows, {"hpcmm": "test"})
    monkeypatch.setattr(model, "_sweep_shapes", lambda on_gpu: [(64, 64, 16), (128, 96, 64), (96, 128, 32)])
    save = tmp_path / "cpu.json"
    ns = argparse.Namespace(what="measure", machine=None, save=str(save), transport=str(links), dtypes="float64",
                            shapes="96x48x32,40x120x16")
    assert model.measure_main(ns, MPI.COMM_SELF) == 0
    machine = model.load_machine(str(save))
    assert machine.device == "cpu" and machine.gemm["float64"].tflops > 0
    assert machine.intra_gbps == pytest.approx(8.0, rel=1e-6) and machine.net_gbps == pytest.approx(3.0, rel=1e-6)
    assert predict(Problem(300, 200, 100), 2, machine).seconds > 0
    # --shapes: each block timed exactly, its rate kept as a share of the curve's, and taken for that block
    curve = machine.gemm["float64"]
    assert [row[:3] for row in curve.shapes] == [(96.0, 48.0, 32.0), (40.0, 120.0, 16.0)]
    assert all(row[3] > 0 for row in curve.shapes)
    m, n, w, share = curve.shapes[0]
    assert float(machine.gemm_seconds(m, n, w, "float64", True)) == \
        pytest.approx(curve.launch_us * 1e-6 + 2 * m * n * w / (share * curve.tflops * 1e12), rel=1e-12)
    printed = capsys.readouterr().out
    assert "shape float64 m=96 n=48 w=32 beta=1" in printed and "shape float64 m=40 n=120 w=16 beta=1" in printed
    bad = argparse.Namespace(what="measure", machine=None, save=str(tmp_path / "never.json"), transport=None,
                             dtypes="float64", shapes="96x48")
    with pytest.raises(InputError, match="--shapes: '96x48' is not MxNxW"):
        model.measure_main(bad, MPI.COMM_SELF)
    assert not (tmp_path / "never.json").exists()


def test_staged_fit_takes_every_pair_of_the_transport_file(tmp_path):
    """The host MPI's rate is fitted over every staged pair, not pair 0 -> 1 alone (one pair is noisy)."""
    from hpcmm import h5io

    links = tmp_path / "links.h5"
    rows = [{"src": 0, "dst": dst, "path": "staged", "bytes": b, "seconds": 1e-4 + b / (gbps * 1e9), "gbps": 0.0}
            for dst, gbps in ((1, 4.0), (2, 8.0), (3, 8.0)) for b in (1 << 22, 1 << 26, 1 << 27)]
    h5io.write_table_file(str(links), False, "bench-transport", "transport", rows, {"hpcmm": "test"})
    _, staged, _ = model._read_transport(str(links))
    assert len(staged["single"]) == 9
    gbps, _, _ = model.fit_staged(staged["single"], {}, 1e6, 1 << 40)
    assert 4.0 < gbps < 8.0


def test_describe_says_the_split_relay_is_not_built():
    """`model --algo auto` may pick the split relay, which `run` does not have: the text says so."""
    machine = builtin("h200x2")
    prob = Problem(8192, 8192, 8192)
    text = model.describe(prob, predict(prob, 8, machine, ranks_per_node=4, algo="split-relay"), machine)
    assert "algorithm split-relay (a design the model knows; `run` does not build it)" in text
    assert "does not build" not in model.describe(prob, predict(prob, 8, machine, ranks_per_node=4), machine)


# The published clusters of docs/scaling.md section 2: (machine, m, n, k, ranks, TFLOP/s in that table).
PUBLISHED = [
    ("daint-p100", 17408, 17408, 3473408, 128, 115.8),
    ("daint-p100", 17408, 17408, 3473408, 1024, 346.4),
    ("phoenix-cpu", 50000, 50000, 50000, 192, 7.14),
    ("phoenix-cpu", 6000, 6000, 1200000, 192, 3.95),
    ("phoenix-cpu", 1200000, 6000, 6000, 192, 6.19),
    ("phoenix-cpu", 100000, 100000, 5000, 192, 5.48),
    ("phoenix-cpu", 50000, 50000, 50000, 3072, 59.55),
]


@pytest.mark.parametrize("name", ["daint-p100", "phoenix-cpu"])
def test_published_cluster_descriptions_load_and_name_sources(name, tmp_path):
    machine = builtin(name)
    assert machine.source and machine.description and "float64" in machine.gemm
    path = tmp_path / f"{name}.json"
    path.write_text(machine.to_json())
    assert model.load_machine(str(path)) == machine


@pytest.mark.parametrize("name,m,n,k,ranks,table", PUBLISHED)
def test_published_cluster_predictions(name, m, n, k, ranks, table):
    """Finite, positive, below the machine's GEMM peak, and what docs/scaling.md section 2 prints."""
    machine = builtin(name)
    p = predict(Problem(m, n, k), ranks, machine)
    peak = ranks * machine.gemm["float64"].tflops
    assert math.isfinite(p.seconds) and p.seconds > 0 and not p.notes
    assert 0 < p.tflops < peak
    assert p.seconds >= p.gemm_seconds
    assert p.tflops == pytest.approx(table, rel=0.01)


# tests/gpu/model_check.sh on the 2 x H200 machine, 2026-11-29 (docs/scaling.md section 1):
# (MPI kind, ranks, m, n, k, type, --ranks-per-node, the panel the run took, measured seconds).
MEASURED = [
    ("system", 2, 16384, 16384, 16384, "float16", None, 4096, 0.006691),
    ("system", 2, 16384, 16384, 16384, "float64", None, 2048, 0.08609),
    ("system", 2, 8192, 8192, 8192, "float64", None, 2048, 0.01033),
    ("system", 2, 8192, 8192, 8192, "float64", 1, 2048, 0.1038),
    ("system", 2, 12007, 9001, 6003, "float32", None, 1501, 0.01395),
    ("system", 4, 8192, 8192, 8192, "float64", None, 2048, 0.01155),
    ("system", 4, 4096, 4096, 4096, "float64", 1, 2048, 0.02844),
    ("system", 4, 8192, 8192, 8192, "float64", 2, 2048, 0.06334),
    ("system", 8, 16384, 16384, 16384, "float64", None, 2048, 0.09801),
    ("system", 8, 6001, 4099, 3001, "float32", 1, 750, 0.01794),
    ("system", 8, 4096, 4096, 4096, "float64", 2, 1024, 0.03838),
    ("system", 8, 8192, 8192, 8192, "float64", 4, 2048, 0.07013),
    ("cuda-aware", 2, 16384, 16384, 16384, "float16", 1, 4096, 0.006853),
    ("cuda-aware", 2, 16384, 16384, 16384, "float64", 1, 2048, 0.08556),
    ("cuda-aware", 2, 8192, 8192, 8192, "float64", 1, 2048, 0.01061),
    ("cuda-aware", 4, 8192, 8192, 8192, "float32", 1, 2048, 0.0136),
    ("cuda-aware", 4, 8192, 8192, 8192, "float64", 2, 2048, 0.01248),
    ("cuda-aware", 8, 8192, 8192, 8192, "float64", 1, 2048, 0.01721),
    ("cuda-aware", 8, 8192, 8192, 8192, "float64", 2, 2048, 0.01582),
    ("cuda-aware", 8, 10007, 6001, 3001, "float64", 2, 750, 0.01136),
    ("cuda-aware", 8, 16384, 16384, 16384, "float64", 4, 2048, 0.1013),
]
#: Staged cases still more than 15 % off with that run's refitted staged figures (docs/scaling.md
#: section 1): (ranks, m, rpn).  The second call measured the same cases 10-50 % faster; no
#: calibration of that run can follow both (the section says why).  Its description has one staged
#: rate, no rate by size and no contention (its transport file was not kept).
STAGED_OPEN = {(2, 8192, 1), (8, 8192, 4)}  # the first call: staged products 10-50 % slower than later calls


def _measured_machine(kind):
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "data" / "machines" / f"h200x2-2026-11-29-{kind}.json"
    return model.load_machine(str(path))


def _predicted_1129(kind, ranks, m, n, k, dtype, rpn, panel) -> float:
    """Seconds the model gives a row of ``MEASURED`` with the description its call measured."""
    return predict(Problem(m, n, k, dtype), ranks, _measured_machine(kind), ranks_per_node=rpn, ranks_per_host=ranks,
                   cuda_aware=kind == "cuda-aware", panel=panel, orientation="wide").seconds


@pytest.mark.parametrize("kind,ranks,m,n,k,dtype,rpn,panel,seconds", MEASURED)
def test_measured_cases_within_15_percent(kind, ranks, m, n, k, dtype, rpn, panel, seconds, plan_of_their_day):
    """The saved descriptions of 2026-11-29 predict each measured run within 15 %, except the
    staged runs listed open, which must stay off until the model learns what they show."""
    err = abs(_predicted_1129(kind, ranks, m, n, k, dtype, rpn, panel) / seconds - 1)
    if kind == "system" and (ranks, m, rpn) in STAGED_OPEN:
        assert 0.15 < err < 0.35  # the table's "recomputed" rows; a change here must update it
    else:
        assert err <= 0.15


def test_cuda_aware_broadcast_inside_one_device_is_a_copy():
    """Ranks of one device broadcast by a copy inside it: the NIC's rate plays no part."""
    machine = builtin("h200x2").replace(devices_per_node=1, nics_per_node=1)
    prob = Problem(8192, 8192, 8192)
    slow = predict(prob, 4, machine.replace(net_gbps=1.0), ranks_per_node=1, cuda_aware=True)
    fast = predict(prob, 4, machine.replace(net_gbps=1000.0), ranks_per_node=1, cuda_aware=True)
    assert slow.seconds == pytest.approx(fast.seconds, rel=1e-12)
    assert set(slow.bytes_by_path) == {"mpi"}


def test_cuda_aware_broadcast_on_time_sliced_devices():
    """8 ranks on 2 GPUs at --ranks-per-node 1 (grid 4x2): per step a broadcast of two rounds down
    each column (4 members on one GPU) and one round along each row; every round waits for the
    3 other contexts of the device.  The host waits for it and the device's GEMMs lose it, so the
    product grows by at least the column rounds' wait per step and at most twice all rounds'."""
    machine = builtin("h200x2")
    prob = Problem(8192, 8192, 8192)
    base = predict(prob, 8, machine.replace(shared_mpi_us=0.0), ranks_per_node=1, cuda_aware=True)
    sliced = predict(prob, 8, machine, ranks_per_node=1, cuda_aware=True)
    per_round = 3 * machine.shared_mpi_us * 1e-6
    grown = sliced.seconds - base.seconds
    assert 2 * per_round * base.steps <= grown <= 2 * 3 * per_round * base.steps + 1e-9
    # one rank per GPU: nothing to wait for
    one = predict(prob, 2, machine, ranks_per_node=1, cuda_aware=True)
    assert one.seconds == pytest.approx(predict(prob, 2, machine.replace(shared_mpi_us=0.0),
                                                ranks_per_node=1, cuda_aware=True).seconds)



def test_a_staged_copy_waits_its_own_figure():
    """A staged chunk copy waits ``shared_copy_us`` per busy context of its device, a CUDA-aware round
    ``shared_mpi_us``: each figure moves only its own path.  A description without ``shared_copy_us``
    (before the two were apart) takes ``shared_mpi_us`` for both."""
    machine = builtin("h200x2")
    prob = Problem(8192, 8192, 8192)

    def staged(m):
        return predict(prob, 8, m, ranks_per_node=4, cuda_aware=False).seconds

    def aware(m):
        return predict(prob, 8, m, ranks_per_node=1, cuda_aware=True).seconds

    assert staged(machine.replace(shared_mpi_us=500.0)) == staged(machine)
    assert staged(machine.replace(shared_copy_us=500.0)) > staged(machine)
    assert aware(machine.replace(shared_copy_us=500.0)) == aware(machine)
    old = machine.replace(shared_copy_us=None, shared_mpi_us=machine.shared_copy_us)
    assert old.copy_wait_us == machine.shared_copy_us
    assert staged(old) == staged(machine)
    with pytest.raises(InputError, match="shared_copy_us=-1.0 must not be negative"):
        machine.replace(shared_copy_us=-1.0)


def _time_sliced_cuda_aware_errors(monkeypatch, wait_us: float) -> list[float]:
    """Each time-sliced CUDA-aware row (ranks sharing a GPU) of the calls before the fourteenth, predicted with
    ``shared_mpi_us`` = ``wait_us`` and the plan each pinned test walks: the error (predicted / measured - 1)."""
    def machine(load):
        return lambda spec: load(spec).replace(shared_mpi_us=wait_us)

    errors = []
    with monkeypatch.context() as patch:
        patch.setattr(model, "load_machine", machine(model.load_machine))
        patch.setattr(model, "_plans", _plans_of_their_day)
        for kind, ranks, m, n, k, dtype, rpn, panel, seconds in MEASURED:
            if kind == "cuda-aware" and ranks > 2:
                errors.append(_predicted_1129(kind, ranks, m, n, k, dtype, rpn, panel) / seconds - 1)
        errors += [_predicted_1130(row) / row[-1] - 1 for row in MEASURED_1130
                   if row[0].startswith("cuda-aware") and row[1] > 2]
    with monkeypatch.context() as patch:
        patch.setattr(model, "load_machine", machine(model.load_machine))
        errors += [_predicted_call(case, "cuda-aware-f") / float(np.median(runs)) - 1
                   for case, runs in _call_cases(MEASURED_NINTH_1130).items()
                   if case[0] == "cuda-aware" and case[1] > 2]
    return errors


def test_shared_mpi_us_is_the_fit_of_the_calls_before_the_fourteenth(monkeypatch):
    """The built-in's ``shared_mpi_us`` (every h200x2 description's) is the least-squares fit, on a 1 µs grid,
    over the 24 time-sliced CUDA-aware rows of the calls before the fourteenth: the smallest root mean square of
    their errors (docs/scaling.md section 1, "The fourteenth call"; that call's rows are held out).  Its worst
    error is within 0.1 point of the smallest any value gives, and inside 12 %, where 67 µs left 17 %."""
    fitted = builtin("h200x2").shared_mpi_us
    scan = {us: np.abs(_time_sliced_cuda_aware_errors(monkeypatch, float(us))) for us in range(60, 101)}
    assert {len(e) for e in scan.values()} == {24}
    rms = {us: float(np.sqrt(np.mean(e ** 2))) for us, e in scan.items()}
    assert fitted == min(rms, key=rms.get), rms
    assert scan[fitted].max() <= min(e.max() for e in scan.values()) + 1e-3
    assert scan[fitted].max() < 0.12 < np.abs(_time_sliced_cuda_aware_errors(monkeypatch, 67.0)).max()


def test_every_h200x2_description_carries_the_built_in_waits():
    """``shared_mpi_us`` and ``shared_copy_us`` are the model's fitted figures, which no call measures: every
    description of the 2-GPU machine (``model measure`` copies them from the built-in) carries the same."""
    from pathlib import Path

    want = builtin("h200x2")
    files = sorted((Path(__file__).resolve().parents[1] / "data" / "machines").glob("h200x2-*.json"))
    assert len(files) >= 18
    for path in files:
        m = model.load_machine(str(path))
        assert (m.shared_mpi_us, m.shared_copy_us) == (want.shared_mpi_us, want.shared_copy_us), path.name


def test_staged_chunk_is_the_transports():
    """The model's chunk pipeline uses StagedBroadcast's own chunk."""
    import inspect

    from hpcmm.transport.mpi import StagedBroadcast

    default = inspect.signature(StagedBroadcast.__init__).parameters["chunk"].default
    assert model.Machine("x").staged_chunk_bytes == default


def test_fit_staged_recovers_rate_latency_and_host_aggregate():
    """Times made by the model's own staged pipeline (copies of the first and last chunk, host MPI
    shared by k transfers) give back the figures they were made from."""
    truth = model.Machine("t", staged_gbps=7.0, staged_latency_us=40.0, staged_host_gbps=11.0,
                          host_copy_gbps=30.0)
    sizes = [s << 20 for s in (1, 4, 16, 64, 128, 256)]
    single = [(b, float(model.staged_seconds(b, truth))) for b in sizes]
    concurrent = {k: [(b, float(model.staged_seconds(b, truth, concurrent=k))) for b in sizes] for k in (2, 3, 4)}
    gbps, lat, host = model.fit_staged(single, concurrent, truth.host_copy_gbps, truth.staged_chunk_bytes)
    assert gbps == pytest.approx(7.0, rel=1e-6) and lat == pytest.approx(40.0, rel=1e-4)
    assert host == pytest.approx(11.0, rel=1e-6)
    # no concurrent rows: no aggregate; the end-to-end rate is below the host MPI's (copies on top)
    assert model.fit_staged(single, {}, 30.0, truth.staged_chunk_bytes)[2] is None
    assert single[-1][0] / single[-1][1] / 1e9 < 7.0


def test_staged_concurrency_term():
    """k transfers at once each get min(pair rate, host aggregate / k); copies cost the first and last chunk."""
    m = model.Machine("t", staged_gbps=8.0, staged_latency_us=0.0, staged_host_gbps=12.0, host_copy_gbps=1e6)
    b = 1 << 30
    assert float(model.staged_seconds(b, m, concurrent=1)) == pytest.approx(b / 8e9, rel=1e-4)
    assert float(model.staged_seconds(b, m, concurrent=3)) == pytest.approx(b / 4e9, rel=1e-4)
    fill, drain = model.staged_copy_seconds(np.array([10 << 20, 96 << 20, 100 << 20]), m.replace(host_copy_gbps=1.0))
    assert list(fill * 1e9) == [10 << 20, 32 << 20, 32 << 20]
    assert list(drain * 1e9) == [10 << 20, 32 << 20, 4 << 20]


def test_staged_products_slow_down_with_the_host_aggregate():
    """8 ranks at --ranks-per-node 2 (grid 4x2): six staged receivers at once per column phase; a
    host that moves less in aggregate makes the product slower, one pair at a time (2 ranks) does not."""
    machine = builtin("h200x2")
    prob = Problem(8192, 8192, 8192)
    rich, poor = machine.replace(staged_host_gbps=100.0), machine.replace(staged_host_gbps=machine.staged_gbps)
    kw = dict(cuda_aware=False, ranks_per_host=8)
    assert predict(prob, 8, poor, ranks_per_node=2, **kw).seconds > 1.5 * predict(prob, 8, rich, ranks_per_node=2,
                                                                                    **kw).seconds
    kw2 = dict(cuda_aware=False, ranks_per_host=2, ranks_per_node=1)
    assert predict(prob, 2, poor, **kw2).seconds == pytest.approx(predict(prob, 2, rich, **kw2).seconds)


def test_sweep_runs_back_to_back_within_its_bound():
    assert model.sweep_calls(0.002, 0.3) * 0.002 * model.SWEEP_BATCHES == pytest.approx(0.3)
    assert model.sweep_calls(1.0, 0.3) == 1
    shapes = model._sweep_shapes(True)
    per = min(model.SWEEP_SECONDS["gpu"], model.SWEEP_BUDGET_SECONDS / (2 * len(shapes) * 3))
    assert per * 2 * len(shapes) * 3 <= model.SWEEP_BUDGET_SECONDS


def _results_file(path, m, n, k, ranks, seconds, algo=None, rpn=None, mps=None, created=None, **more):
    """A results file with what `model check` reads (config, summary, topology); ``more``: other config attributes;
    ``mps``: the ``/summary`` attribute (absent where ``None``, as in files from before it); ``created``: the
    root's time attribute (absent where ``None``)."""
    import h5py

    with h5py.File(path, "w") as f:
        f.attrs["ranks"] = ranks
        if created is not None:
            f.attrs["created"] = created
        cfg = f.create_group("config").attrs
        attributes = dict(m=m, n=n, k=k, dtype="float64", tf32=False, ranks_per_node=rpn or 0, panel=1024,
                          prefetch=1, grid="x".join(map(str, model.compute_dims(ranks))), cuda_aware_mpi_decision=False)
        for key, value in {**attributes, **more}.items():
            cfg[key] = value
        summ = f.create_group("summary").attrs
        summ["seconds"] = seconds
        summ["paths"] = np.array([b"ipc", b"staged"])
        if algo is not None:
            summ["algo"] = algo
        if mps is not None:
            summ["mps"] = mps
        f.create_group("topology").create_dataset("local_size", data=np.full(ranks, ranks))
    return str(path)


def test_check_table_reads_algo_and_prints_gains_and_repeats(tmp_path):
    """Files without /summary algo are summa; 2.5d files are predicted as 2.5d; pairs that differ only
    in the algorithm get a gain row (measured = t_summa / t_2.5d - 1), repeats a spread row."""
    machine = builtin("h200x2")
    m = n = k = 4096
    files = [_results_file(tmp_path / "a.h5", m, n, k, 4, 0.030, rpn=2),
             _results_file(tmp_path / "b.h5", m, n, k, 4, 0.033, algo="summa", rpn=2),
             _results_file(tmp_path / "c.h5", m, n, k, 4, 0.020, algo="2.5d:2", rpn=2),
             _results_file(tmp_path / "d.h5", 3001, 2003, 1999, 4, 0.010, rpn=2)]
    rows = model.check_rows(files, machine)
    assert [r.algo for r in rows] == ["summa", "summa", "2.5d:2", "summa"]
    want = predict(Problem(m, n, k), 4, machine, ranks_per_node=2, ranks_per_host=4, panel=1024, algo="2.5d:2",
                   cuda_aware=False)
    assert rows[2].predicted == pytest.approx(want.seconds)
    gains = model.gain_rows(rows)
    assert len(gains) == 1 and gains[0][1] == "2.5d:2"
    assert gains[0][2] == pytest.approx(np.median([0.030, 0.033]) / 0.020 - 1)
    assert gains[0][3] == pytest.approx(rows[0].predicted / rows[2].predicted - 1)
    table = model.check_table(files, machine)
    assert "gain over summa" in table and "2 runs: min 0.03 s" in table and "spread 10.0 %" in table
    median_error = 100 * (rows[0].predicted / np.median([0.030, 0.033]) - 1)
    assert f"error of the median {median_error:.1f} %" in table


def _staged_transport(path, gbps: float, created: str) -> str:
    """A ``bench transport`` file of staged pairs at ``gbps`` (and one IPC pair), made at ``created``."""
    import h5py

    from hpcmm import h5io

    rows = [{"src": 0, "dst": dst, "path": "staged", "bytes": b, "seconds": 1e-4 + b / (gbps * 1e9), "gbps": 0.0}
            for dst in (1, 2) for b in (1 << 22, 1 << 24, 1 << 26)]
    rows += [{"src": 0, "dst": 1, "path": "ipc", "bytes": b, "seconds": 1e-5 + b / 300e9, "gbps": 0.0}
             for b in (1 << 20, 1 << 26)]
    h5io.write_table_file(str(path), False, "bench-transport", "transport", rows, {"hpcmm": "test"})
    with h5py.File(path, "r+") as f:
        f.attrs["created"] = created
    return str(path)


def test_model_links_replaces_the_links_and_keeps_the_gemm_curves(tmp_path, capsys):
    """`model links`: a description with a newer transport file's links, its GEMM curves as they were, and
    the file's time; without --transport or --save a one-line error, and no file."""
    from mpi4py import MPI

    from hpcmm import cli

    base = builtin("h200x2")
    links = _staged_transport(tmp_path / "t.h5", 3.0, "2026-11-30T16:47:00+00:00")
    save = tmp_path / "later.json"
    ns = cli.parse(["model", "links", "--machine", "h200x2", "--transport", links, "--save", str(save)])
    assert model.model_main(ns, MPI.COMM_SELF) == 0
    later = model.load_machine(str(save))
    assert later.gemm == base.gemm and later.name == base.name
    assert later.links_measured == "2026-11-30T16:47:00+00:00" and links in later.source
    _, staged, _ = model._read_transport(links)
    want, _ = model.fit_staged_by_size(staged["single"], {}, base.host_copy_gbps, base.staged_chunk_bytes,
                                       later.staged_latency_us)
    assert [mib for mib, _ in later.staged_gbps_by_mib] == [4.0, 16.0, 64.0]
    assert [g for _, g in later.staged_gbps_by_mib] == pytest.approx([g for _, g in want])
    assert max(g for _, g in later.staged_gbps_by_mib) < base.staged_gbps  # the base: one rate, 5.66 GB/s
    assert later.intra_gbps == pytest.approx(300.0, rel=1e-6)
    assert "measured 2026-11-30T16:47:00+00:00" in capsys.readouterr().out
    for args in (["--transport", links], ["--save", str(tmp_path / "never.json")]):
        with pytest.raises(InputError, match="model links: --transport FILE.h5 and --save FILE.json are required"):
            model.model_main(cli.parse(["model", "links", *args]), MPI.COMM_SELF)
    assert not (tmp_path / "never.json").exists()


def test_check_predicts_each_run_with_the_links_measured_last_before_it(tmp_path):
    """Several descriptions: a run takes the one whose links were measured last before it ended; runs
    before every one of them (or of no known time) take the first.  The table says how many each predicted."""
    base = builtin("h200x2")
    early = model.relink(base, _staged_transport(tmp_path / "t0.h5", 8.0, "2026-11-30T16:44:00+00:00"))
    late = model.relink(base, _staged_transport(tmp_path / "t1.h5", 4.0, "2026-11-30T16:47:00+00:00"))
    times = ["2026-11-30T16:43:00+00:00", "2026-11-30T16:45:00+00:00", "2026-11-30T16:48:00+00:00",
             "2026-11-30T16:49:00+00:00", None]
    files = [_results_file(tmp_path / f"r{i}.h5", 8192, 8192, 8192, 4, 0.05, rpn=2, created=t)
             for i, t in enumerate(times)]
    rows = model.check_rows(files, [early, late])
    assert [r.links_measured for r in rows] == [early.links_measured] * 2 + [late.links_measured] * 2 \
        + [early.links_measured]
    alone = model.check_rows(files, early)
    assert rows[2].predicted > 1.2 * alone[2].predicted  # half the staged rate
    assert [r.predicted for r in rows[:2]] == [r.predicted for r in alone[:2]]
    table = model.check_table(files[:4], [early, late])
    assert "links measured at 2026-11-30T16:44:00+00:00: 2 run(s), 2026-11-30T16:47:00+00:00: 2 run(s)" in table
    # the four runs repeat one setup: the error of the median of their predictions, two early and two late
    both = (alone[0].predicted + rows[2].predicted) / 2
    assert f"error of the median {100 * (both / 0.05 - 1):.1f} %" in table
    assert "links measured at" not in model.check_table(files, early)


def test_check_reads_the_step_order_and_the_balance_of_each_file(tmp_path):
    """A file of each rank's own order is predicted in it, an older file (no attribute) in the common
    order; a file of equal blocks (balance none, or none recorded) with equal blocks."""
    machine = builtin("h200x2")
    kw = dict(ranks_per_host=2, panel=1024, cuda_aware=False, grid=model.compute_dims(2))  # the files' grid
    files = [_results_file(tmp_path / "own.h5", 4096, 4096, 4096, 2, 0.002, step_order_used="own-first",
                           balance="share"),
             _results_file(tmp_path / "old.h5", 4096, 4096, 4096, 2, 0.002)]
    own, old = model.check_rows(files, machine)
    assert own.predicted == pytest.approx(predict(Problem(4096, 4096, 4096), 2, machine, **kw).seconds)
    assert old.predicted == pytest.approx(predict(Problem(4096, 4096, 4096), 2, machine, step_order="common",
                                                  balance="none", **kw).seconds)
    assert own.predicted < old.predicted  # no ramp, no first pull waited for
    kw["ranks_per_host"] = 3
    files = [_results_file(tmp_path / f"{b}.h5", 6000, 4000, 2000, 3, 0.01, grid="3x1", balance=b)
             for b in ("share", "none")]
    share, none = model.check_rows(files, machine)
    # 3 ranks on 2 GPUs: equal blocks leave GPU 0's two ranks with two thirds of the work
    assert share.predicted < 0.8 * none.predicted
    with pytest.raises(InputError, match="balance='measured'"):
        predict(Problem(64, 64, 64), 2, machine, balance="measured")


def test_layers_that_share_a_device_share_its_gemm_rate():
    """8 ranks on the 2 GPUs of h200x2 in virtual nodes of 4: every GPU holds 4 ranks whatever the layers.

    Four layers of 2 ranks would each see one device per rank if the layer kept the node's GPUs to
    itself; the layer's GEMM rate is scaled to what its ranks really get (4 per GPU, not 2).
    """
    from hpcmm.model import _layer_device_share, builtin

    machine = builtin("h200x2")
    sliced = machine.replace(devices_per_node=1, nics_per_node=1)
    layer = _layer_device_share(machine, sliced, ranks=8, c=4, ranks_per_node=4, per_host=8, rpn=1)
    assert layer.curve("float64").tflops == pytest.approx(machine.curve("float64").tflops / 2)
    # Two layers of 4 ranks on one device each: 4 per GPU either way, nothing to scale.
    layer = _layer_device_share(machine, sliced, ranks=8, c=2, ranks_per_node=4, per_host=8, rpn=2)
    assert layer.curve("float64").tflops == machine.curve("float64").tflops


def _plan_of_their_day(layout, panel, ramp=False):
    """``summa_plan`` as the runs pinned below took it (until the ramp filled the first k block).

    ``panel/8`` doubling up to ``panel`` from the first step, each step cut at the end of its k
    block, so a block's rest beside the ramp became a narrow step of its own before the next block's
    whole panel.  Those runs are predicted with the plan they ran.
    """
    steps, k0, width = [], 0, max(1, panel // 8) if ramp else panel
    while k0 < layout.k:
        a_root, b_root = layout.a_k_owner(k0), layout.b_k_owner(k0)
        (a_lo, a_hi), (b_lo, b_hi) = layout.a_k(a_root), layout.b_k(b_root)
        k1 = min(k0 + width, a_hi, b_hi)
        steps.append(Step(len(steps), k0, k1, a_root, k0 - a_lo, b_root, k0 - b_lo))
        k0, width = k1, min(panel, 2 * width)
    return steps


@pytest.fixture
def plan_of_their_day(monkeypatch):
    """The model walks the plan the pinned runs took (:func:`_plan_of_their_day`), in the common order
    (every rank in the same order: those runs had no ``own-first``)."""
    monkeypatch.setattr(model, "_plans", _plans_of_their_day)


def _plans_of_their_day(layout, panel, prefetch, own_first):
    """``model._plans`` as the pinned runs had it: every rank :func:`_plan_of_their_day`, in the common order."""
    return [_plan_of_their_day(layout, panel, ramp=prefetch > 0 and layout.grid.size > 1)] * layout.grid.size


def test_the_plan_of_their_day_differs_only_where_a_block_had_a_rest():
    """2 ranks, 16384, panel 8192: the old ramp left a 1024 sliver before the second block's 8192."""
    layout = Layout(16384, 16384, 16384, Grid(*model.compute_dims(2)))
    old = [s.k1 - s.k0 for s in _plan_of_their_day(layout, 8192, ramp=True)]
    new = [s.k1 - s.k0 for s in summa_plan(layout, 8192, ramp=True)]
    assert old == [1024, 2048, 4096, 1024, 8192] and new == [1024, 1024, 2048, 4096, 8192]
    assert [s.k1 - s.k0 for s in _plan_of_their_day(layout, 4096)] == [s.k1 - s.k0 for s in summa_plan(layout, 4096)]


# -- the fresh model check of 2026-11-30 -------------------------------------------------------
#: Every case of the six calls of 2026-11-30 (tests/gpu/model_check.sh, sections system, 2.5d,
#: cuda-aware, and system again after the sweep's changes; then system + 2.5d and cuda-aware once
#: more, the "-c" rows), each with the description its own call measured
#: (data/machines/h200x2-2026-11-30-*.json; the staged figures of the first three system
#: descriptions re-fitted over every staged pair of their transport files, as `model measure` does now):
#: (description, ranks, m, n, k, dtype, ranks per node, algo, panel, CUDA-aware, measured seconds).
#: The comment is the model's error when these rows were added (docs/scaling.md, section 1).
MEASURED_1130 = [
    ("system", 2, 16384, 16384, 16384, "float16", None, "summa", 4096, False, 0.0073763),  # -28.5 %
    ("system", 2, 16384, 16384, 16384, "float64", None, "summa", 2048, False, 0.084825),  # -12.4 %
    ("system", 2, 8192, 8192, 8192, "float64", None, "summa", 2048, False, 0.010199),  # -5.6 %
    ("system", 2, 8192, 8192, 8192, "float64", 1, "summa", 2048, False, 0.079646),  # +5.4 %
    ("system", 2, 8192, 8192, 8192, "float64", 1, "summa", 2048, False, 0.088121),  # -4.7 %
    ("system", 2, 8192, 8192, 8192, "float64", 1, "summa", 2048, False, 0.082241),  # +2.1 %
    ("system", 2, 12007, 9001, 6003, "float32", None, "summa", 1501, False, 0.013829),  # -6.8 %
    ("system", 4, 8192, 8192, 8192, "float64", None, "summa", 2048, False, 0.011514),  # -1.2 %
    ("system", 4, 4096, 4096, 4096, "float64", 1, "summa", 2048, False, 0.026423),  # -2.8 %
    ("system", 4, 8192, 8192, 8192, "float64", 2, "summa", 2048, False, 0.047508),  # +2.8 %
    ("system", 8, 16384, 16384, 16384, "float64", None, "summa", 2048, False, 0.096141),  # -8.4 %
    ("system", 8, 6001, 4099, 3001, "float32", 1, "summa", 750, False, 0.015594),  # +5.8 %
    ("system", 8, 4096, 4096, 4096, "float64", 2, "summa", 1024, False, 0.031093),  # -25.2 %
    ("system", 8, 8192, 8192, 8192, "float64", 4, "summa", 2048, False, 0.054701),  # -10.1 %
    ("system", 8, 8192, 8192, 8192, "float64", 4, "summa", 2048, False, 0.061433),  # -20.0 %
    ("cuda-aware", 2, 16384, 16384, 16384, "float16", 1, "summa", 4096, True, 0.0068885),  # -24.0 %
    ("cuda-aware", 2, 16384, 16384, 16384, "float64", 1, "summa", 2048, True, 0.085337),  # -11.6 %
    ("cuda-aware", 2, 8192, 8192, 8192, "float64", 1, "summa", 2048, True, 0.010666),  # -8.5 %
    ("cuda-aware", 4, 8192, 8192, 8192, "float32", 1, "summa", 2048, True, 0.013625),  # +2.0 %
    ("cuda-aware", 4, 8192, 8192, 8192, "float64", 2, "summa", 2048, True, 0.01247),  # -3.5 %
    ("cuda-aware", 8, 8192, 8192, 8192, "float64", 1, "summa", 2048, True, 0.017545),  # -5.4 %
    ("cuda-aware", 8, 8192, 8192, 8192, "float64", 2, "summa", 2048, True, 0.015891),  # -6.1 %
    ("cuda-aware", 8, 10007, 6001, 3001, "float64", 2, "summa", 750, True, 0.010721),  # -17.0 %
    ("cuda-aware", 8, 16384, 16384, 16384, "float64", 4, "summa", 2048, True, 0.10216),  # -10.9 %
    ("system-2.5d", 4, 10007, 6001, 6007, "float64", 2, "2.5d:2", 1501, False, 0.029132),  # -4.2 %
    ("system-2.5d", 4, 10007, 6001, 6007, "float64", 2, "summa", 1502, False, 0.027048),  # +0.4 %
    ("system-2.5d", 4, 8192, 8192, 8192, "float64", 2, "2.5d:2", 2048, False, 0.049983),  # -8.4 %
    ("system-2.5d", 4, 8192, 8192, 8192, "float64", 2, "summa", 2048, False, 0.049187),  # -6.4 %
    ("system-2.5d", 8, 10007, 6001, 6007, "float64", 4, "2.5d:2", 1501, False, 0.021465),  # -9.8 %
    ("system-2.5d", 8, 10007, 6001, 6007, "float64", 4, "2.5d:4", 750, False, 0.023066),  # -19.3 %
    ("system-2.5d", 8, 10007, 6001, 6007, "float64", 4, "summa", 1501, False, 0.035257),  # -9.3 %
    ("system-2.5d", 8, 8192, 8192, 8192, "float64", 4, "2.5d:2", 2048, False, 0.031673),  # -7.6 %
    ("system-2.5d", 8, 8192, 8192, 8192, "float64", 4, "2.5d:4", 1024, False, 0.032426),  # -12.6 %
    ("system-2.5d", 8, 8192, 8192, 8192, "float64", 4, "summa", 2048, False, 0.053141),  # -12.9 %
    # the fourth call (system only), after the sweep drew the run's data and the fit weighed by time
    ("system-b", 2, 16384, 16384, 16384, "float16", None, "summa", 4096, False, 0.0066855),  # +1.0 %
    ("system-b", 2, 16384, 16384, 16384, "float64", None, "summa", 2048, False, 0.08507),  # -2.2 %
    ("system-b", 2, 8192, 8192, 8192, "float64", None, "summa", 2048, False, 0.010292),  # +5.3 %
    ("system-b", 2, 8192, 8192, 8192, "float64", 1, "summa", 2048, False, 0.08875),  # +9.8 %
    ("system-b", 2, 8192, 8192, 8192, "float64", 1, "summa", 2048, False, 0.082214),  # +18.5 %
    ("system-b", 2, 8192, 8192, 8192, "float64", 1, "summa", 2048, False, 0.084325),  # +15.5 %
    ("system-b", 2, 12007, 9001, 6003, "float32", None, "summa", 1501, False, 0.013788),  # -5.1 %
    ("system-b", 4, 8192, 8192, 8192, "float64", None, "summa", 2048, False, 0.011678),  # +10.2 %
    ("system-b", 4, 4096, 4096, 4096, "float64", 1, "summa", 2048, False, 0.026801),  # +8.5 %
    ("system-b", 4, 8192, 8192, 8192, "float64", 2, "summa", 2048, False, 0.050834),  # +10.1 %
    ("system-b", 8, 16384, 16384, 16384, "float64", None, "summa", 2048, False, 0.09698),  # +2.6 %
    ("system-b", 8, 6001, 4099, 3001, "float32", 1, "summa", 750, False, 0.016003),  # +6.3 %
    ("system-b", 8, 4096, 4096, 4096, "float64", 2, "summa", 1024, False, 0.030256),  # -19.7 %
    ("system-b", 8, 8192, 8192, 8192, "float64", 4, "summa", 2048, False, 0.056168),  # +0.0 %
    ("system-b", 8, 8192, 8192, 8192, "float64", 4, "summa", 2048, False, 0.05575),  # +0.8 %
    # the fifth call (system, then its 2.5d section) and the sixth (cuda-aware), the staged fit over every pair
    ("system-c", 2, 16384, 16384, 16384, "float16", None, "summa", 4096, False, 0.0064865),  # +3.6 %
    ("system-c", 2, 16384, 16384, 16384, "float64", None, "summa", 2048, False, 0.085148),  # -3.1 %
    ("system-c", 2, 8192, 8192, 8192, "float64", None, "summa", 2048, False, 0.010018),  # +7.2 %
    ("system-c", 2, 8192, 8192, 8192, "float64", 1, "summa", 2048, False, 0.072255),  # +3.3 %
    ("system-c", 2, 8192, 8192, 8192, "float64", 1, "summa", 2048, False, 0.068666),  # +8.7 %
    ("system-c", 2, 8192, 8192, 8192, "float64", 1, "summa", 2048, False, 0.075759),  # -1.5 %
    ("system-c", 2, 12007, 9001, 6003, "float32", None, "summa", 1501, False, 0.013714),  # -4.8 %
    ("system-c", 4, 8192, 8192, 8192, "float64", None, "summa", 2048, False, 0.011556),  # +10.2 %
    ("system-c", 4, 4096, 4096, 4096, "float64", 1, "summa", 2048, False, 0.026317),  # -12.3 %
    ("system-c", 4, 8192, 8192, 8192, "float64", 2, "summa", 2048, False, 0.051116),  # -12.5 %
    ("system-c", 8, 16384, 16384, 16384, "float64", None, "summa", 2048, False, 0.096909),  # +1.7 %
    ("system-c", 8, 6001, 4099, 3001, "float32", 1, "summa", 750, False, 0.016024),  # -5.2 %
    ("system-c", 8, 4096, 4096, 4096, "float64", 2, "summa", 1024, False, 0.033013),  # -34.2 %
    ("system-c", 8, 8192, 8192, 8192, "float64", 4, "summa", 2048, False, 0.04346),  # +2.7 %
    ("system-c", 8, 8192, 8192, 8192, "float64", 4, "summa", 2048, False, 0.055378),  # -19.4 %
    ("system-c", 4, 10007, 6001, 6007, "float64", 2, "2.5d:2", 1501, False, 0.027693),  # +0.1 %
    ("system-c", 4, 10007, 6001, 6007, "float64", 2, "summa", 1502, False, 0.028613),  # -6.9 %
    ("system-c", 4, 8192, 8192, 8192, "float64", 2, "2.5d:2", 2048, False, 0.053102),  # -16.3 %
    ("system-c", 4, 8192, 8192, 8192, "float64", 2, "summa", 2048, False, 0.067444),  # -33.7 %
    ("system-c", 8, 10007, 6001, 6007, "float64", 4, "2.5d:2", 1501, False, 0.019282),  # +2.1 %
    ("system-c", 8, 10007, 6001, 6007, "float64", 4, "2.5d:4", 750, False, 0.020781),  # -9.1 %
    ("system-c", 8, 10007, 6001, 6007, "float64", 4, "summa", 1501, False, 0.035674),  # -10.3 %
    ("system-c", 8, 8192, 8192, 8192, "float64", 4, "2.5d:2", 2048, False, 0.03112),  # -5.7 %
    ("system-c", 8, 8192, 8192, 8192, "float64", 4, "2.5d:4", 1024, False, 0.031855),  # -10.9 %
    ("system-c", 8, 8192, 8192, 8192, "float64", 4, "summa", 2048, False, 0.052739),  # -15.4 %
    ("cuda-aware-c", 2, 16384, 16384, 16384, "float16", 1, "summa", 4096, True, 0.0068077),  # +3.0 %
    ("cuda-aware-c", 2, 16384, 16384, 16384, "float64", 1, "summa", 2048, True, 0.084979),  # -2.9 %
    ("cuda-aware-c", 2, 8192, 8192, 8192, "float64", 1, "summa", 2048, True, 0.010322),  # +4.1 %
    ("cuda-aware-c", 4, 8192, 8192, 8192, "float32", 1, "summa", 2048, True, 0.013582),  # +2.8 %
    ("cuda-aware-c", 4, 8192, 8192, 8192, "float64", 2, "summa", 2048, True, 0.012124),  # +9.3 %
    ("cuda-aware-c", 8, 8192, 8192, 8192, "float64", 1, "summa", 2048, True, 0.017356),  # +3.1 %
    ("cuda-aware-c", 8, 8192, 8192, 8192, "float64", 2, "summa", 2048, True, 0.015607),  # +3.9 %
    ("cuda-aware-c", 8, 10007, 6001, 3001, "float64", 2, "summa", 750, True, 0.010358),  # -10.8 %
    ("cuda-aware-c", 8, 16384, 16384, 16384, "float64", 4, "summa", 2048, True, 0.099726),  # +0.8 %
]
#: The rows still outside 15 % (docs/scaling.md says why): they must stay below 35 % until fixed.  Those
#: of the staged path (all but 0 and 15) are single runs, where the eighth and ninth calls took medians
#: of three.  22, the CUDA-aware uneven case at 8 ranks, rpn 2, closed with ``shared_mpi_us`` refitted (80 µs).
OPEN_1130 = {0, 14, 15, 45, 61, 63, 67, 70}


def _machine_1130(kind):
    from pathlib import Path

    return model.load_machine(str(Path(__file__).resolve().parents[1] / "data" / "machines"
                                  / f"h200x2-2026-11-30-{kind}.json"))


def _predicted_1130(row, step_order="common"):
    """The model's seconds for a pinned row; those runs took every step in the common order."""
    kind, ranks, m, n, k, dtype, rpn, algo, panel, aware, _ = row
    grid = tuple(model.compute_dims(ranks)) if algo == "summa" else None
    return predict(Problem(m, n, k, dtype), ranks, _machine_1130(kind), ranks_per_node=rpn, ranks_per_host=ranks,
                   grid=grid, panel=panel, prefetch=1, algo=algo, cuda_aware=aware, step_order=step_order).seconds


def _within_15_percent_or_open(err, is_open, what):
    """A measured row's error: within 15 %, or, while the row is open, above 15 % and below 35 % (a row
    that closes must leave its ``OPEN_*`` set, and the docs that list it)."""
    if is_open:
        assert 0.15 < err < 0.35, (what, err)
    else:
        assert err <= 0.15, (what, err)


@pytest.mark.parametrize("index", range(len(MEASURED_1130)))
def test_fresh_cases_within_15_percent(index, plan_of_their_day):
    """The model against the runs of 2026-11-30: within 15 %, but the open rows (below 35 %)."""
    row = MEASURED_1130[index]
    _within_15_percent_or_open(abs(_predicted_1130(row) / row[-1] - 1), index in OPEN_1130, row)


#: The one pair of the second 2.5D call outside 15 %: its summa run took 0.0674 s where the same
#: case took 0.0511 s in the system section of that call (the staged path's spread, docs/scaling.md).
OPEN_GAINS = {("system-c", 4, 8192, "2.5d:2")}


@pytest.mark.parametrize("kind", ["system-2.5d", "system-c"])
def test_fresh_2p5d_gains_within_15_percent(kind, plan_of_their_day):
    """2.5D over summa on the emulated slow network: predicted speed-up within 15 % of the measured one."""
    rows = [r for r in MEASURED_1130 if r[0] == kind and (r[7] != "summa" or r[6] in (2, 4) and r[4] in (6007, 8192))]
    runs = {(r[1], r[2], r[7]): r for r in rows}  # the last summa row of a case: the 2.5d section's own
    pairs = [(key, runs[key[:2] + ("summa",)]) for key in runs if key[2] != "summa"]
    assert len(pairs) == 6
    for key, summa in pairs:
        run = runs[key]
        measured = summa[-1] / run[-1]
        predicted = _predicted_1130(summa) / _predicted_1130(run)
        err = abs(predicted / measured - 1)
        if (kind, *key) in OPEN_GAINS:
            assert 0.15 < err < 0.35, (key, measured, predicted)
        else:
            assert err <= 0.15, (key, measured, predicted)


# -- the model check with the plan whose ramp fills the first k block (2026-11-30, seventh call) ------
#: tests/gpu/model_check.sh, sections system and 2.5d, three runs of every staged and 2.5d case, on the
#: tree whose ramp fills the first k block (the plan of today), with that call's own description
#: (data/machines/h200x2-2026-11-30-system-d.json): (section, ranks, m, n, k, dtype, ranks per node,
#: algo, panel, measured seconds).  The comment is the model's error when the rows were added.
MEASURED_RAMP_1130 = [
    ("system", 2, 16384, 16384, 16384, "float16", None, "summa", 8192, 0.006417),  # -2.5 % (ipc)
    ("system", 2, 16384, 16384, 16384, "float64", None, "summa", 8192, 0.08449),  # -5.7 % (ipc)
    ("system", 2, 16384, 16384, 16384, "tf32", None, "summa", 8192, 0.01445),  # +1.5 % (ipc)
    ("system", 2, 8192, 8192, 8192, "float64", None, "summa", 4096, 0.01021),  # +3.3 % (ipc)
    ("system", 2, 8192, 8192, 8192, "float64", 1, "summa", 4096, 0.1028),  # -20.1 % (staged)
    ("system", 2, 8192, 8192, 8192, "float64", 1, "summa", 4096, 0.1005),  # -18.2 % (staged)
    ("system", 2, 8192, 8192, 8192, "float64", 1, "summa", 4096, 0.0993),  # -17.3 % (staged)
    ("system", 2, 12007, 9001, 6003, "float32", None, "summa", 3001, 0.01364),  # -6.5 % (ipc)
    ("system", 4, 8192, 8192, 8192, "float64", None, "summa", 2048, 0.01167),  # +9.8 % (ipc)
    ("system", 4, 4096, 4096, 4096, "float64", 1, "summa", 2048, 0.02961),  # -16.4 % (staged)
    ("system", 4, 4096, 4096, 4096, "float64", 1, "summa", 2048, 0.02559),  # -3.3 % (staged)
    ("system", 4, 4096, 4096, 4096, "float64", 1, "summa", 2048, 0.02913),  # -15.1 % (staged)
    ("system", 4, 8192, 8192, 8192, "float64", 2, "summa", 2048, 0.05579),  # -16.8 % (ipc,staged)
    ("system", 4, 8192, 8192, 8192, "float64", 2, "summa", 2048, 0.05426),  # -14.4 % (ipc,staged)
    ("system", 4, 8192, 8192, 8192, "float64", 2, "summa", 2048, 0.05366),  # -13.5 % (ipc,staged)
    ("system", 8, 16384, 16384, 16384, "float64", None, "summa", 2048, 0.09652),  # +2.6 % (ipc)
    ("system", 8, 6001, 4099, 3001, "float32", 1, "summa", 750, 0.01726),  # -1.3 % (staged)
    ("system", 8, 6001, 4099, 3001, "float32", 1, "summa", 750, 0.01901),  # -10.4 % (staged)
    ("system", 8, 6001, 4099, 3001, "float32", 1, "summa", 750, 0.01618),  # +5.3 % (staged)
    ("system", 8, 4096, 4096, 4096, "float64", 2, "summa", 1024, 0.03216),  # -21.9 % (ipc,staged)
    ("system", 8, 4096, 4096, 4096, "float64", 2, "summa", 1024, 0.03169),  # -20.8 % (ipc,staged)
    ("system", 8, 4096, 4096, 4096, "float64", 2, "summa", 1024, 0.03529),  # -28.8 % (ipc,staged)
    ("system", 8, 8192, 8192, 8192, "float64", 4, "summa", 2048, 0.05388),  # -11.1 % (ipc,staged)
    ("system", 8, 8192, 8192, 8192, "float64", 4, "summa", 2048, 0.05443),  # -12.0 % (ipc,staged)
    ("system", 8, 8192, 8192, 8192, "float64", 4, "summa", 2048, 0.05318),  # -10.0 % (ipc,staged)
    ("2.5d", 4, 10007, 6001, 6007, "float64", 2, "2.5d:2", 1501, 0.02702),  # +5.2 % (ipc,staged)
    ("2.5d", 4, 10007, 6001, 6007, "float64", 2, "2.5d:2", 1501, 0.03101),  # -8.3 % (ipc,staged)
    ("2.5d", 4, 10007, 6001, 6007, "float64", 2, "2.5d:2", 1501, 0.02589),  # +9.8 % (ipc,staged)
    ("2.5d", 4, 10007, 6001, 6007, "float64", 2, "summa", 1502, 0.02389),  # +11.8 % (ipc,staged)
    ("2.5d", 4, 10007, 6001, 6007, "float64", 2, "summa", 1502, 0.02814),  # -5.1 % (ipc,staged)
    ("2.5d", 4, 10007, 6001, 6007, "float64", 2, "summa", 1502, 0.03254),  # -17.9 % (ipc,staged)
    ("2.5d", 4, 8192, 8192, 8192, "float64", 2, "2.5d:2", 2048, 0.05637),  # -15.3 % (ipc,staged)
    ("2.5d", 4, 8192, 8192, 8192, "float64", 2, "2.5d:2", 2048, 0.0582),  # -18.0 % (ipc,staged)
    ("2.5d", 4, 8192, 8192, 8192, "float64", 2, "2.5d:2", 2048, 0.04826),  # -1.1 % (ipc,staged)
    ("2.5d", 4, 8192, 8192, 8192, "float64", 2, "summa", 2048, 0.04667),  # -0.5 % (ipc,staged)
    ("2.5d", 4, 8192, 8192, 8192, "float64", 2, "summa", 2048, 0.04925),  # -5.7 % (ipc,staged)
    ("2.5d", 4, 8192, 8192, 8192, "float64", 2, "summa", 2048, 0.0491),  # -5.4 % (ipc,staged)
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, "2.5d:2", 1501, 0.01932),  # -2.4 % (ipc,staged)
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, "2.5d:2", 1501, 0.02014),  # -6.4 % (ipc,staged)
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, "2.5d:2", 1501, 0.02498),  # -24.5 % (ipc,staged)
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, "2.5d:4", 750, 0.02382),  # -23.1 % (ipc,staged)
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, "2.5d:4", 750, 0.02102),  # -12.9 % (ipc,staged)
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, "2.5d:4", 750, 0.02112),  # -13.3 % (ipc,staged)
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, "summa", 1501, 0.0333),  # +0.4 % (ipc,staged)
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, "summa", 1501, 0.03622),  # -7.7 % (ipc,staged)
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, "summa", 1501, 0.03704),  # -9.8 % (ipc,staged)
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, "2.5d:2", 2048, 0.02943),  # -0.1 % (ipc,staged)
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, "2.5d:2", 2048, 0.03214),  # -8.5 % (ipc,staged)
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, "2.5d:2", 2048, 0.04119),  # -28.6 % (ipc,staged)
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, "2.5d:4", 1024, 0.03493),  # -17.2 % (ipc,staged)
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, "2.5d:4", 1024, 0.03425),  # -15.6 % (ipc,staged)
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, "2.5d:4", 1024, 0.03292),  # -12.2 % (ipc,staged)
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, "summa", 2048, 0.05064),  # -5.5 % (ipc,staged)
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, "summa", 2048, 0.04856),  # -1.4 % (ipc,staged)
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, "summa", 2048, 0.0519),  # -7.8 % (ipc,staged)
]
#: The case whose median is still outside 15 % (-20.1 %): the staged pair of 2 ranks, which ran 0.099-0.103 s
#: in this call, 0.080-0.089 s in the eighth and 0.100-0.107 s in the ninth (docs/scaling.md, section 1).
#: It must stay below 35 % until fixed.
OPEN_RAMP_1130 = {("system", 2, 8192, 1, "summa")}


def _ramp_cases():
    cases = {}
    for row in MEASURED_RAMP_1130:
        section, ranks, m, n, k, dtype, rpn, algo, panel, seconds = row
        cases.setdefault((section, ranks, m, rpn, algo, n, k, dtype, panel), []).append(seconds)
    return cases


def _predicted_ramp(ranks, m, n, k, dtype, rpn, algo, panel):
    """As :func:`_predicted_1130`, with the seventh call's description (system MPI)."""
    return _predicted_1130(("system-d", ranks, m, n, k, dtype, rpn, algo, panel, False, None))


@pytest.mark.parametrize("case", sorted(_ramp_cases(), key=str))
def test_ramp_plan_cases_within_15_percent(case):
    """Today's plan: the median of a case's runs within 15 % (the open cases below 35 %), every run below 35 %."""
    section, ranks, m, rpn, algo, n, k, dtype, panel = case
    runs = _ramp_cases()[case]
    predicted = _predicted_ramp(ranks, m, n, k, dtype, rpn, algo, panel)
    err = abs(predicted / float(np.median(runs)) - 1)
    assert all(abs(predicted / r - 1) < 0.35 for r in runs), (case, runs, predicted)
    _within_15_percent_or_open(err, case[:5] in OPEN_RAMP_1130, case)


def test_ramp_plan_2p5d_gains_within_15_percent():
    """2.5D over summa in the 2.5d section: predicted speed-up within 15 % of the measured one (medians)."""
    cases = {key: runs for key, runs in _ramp_cases().items() if key[0] == "2.5d"}
    summa = {key[1:3]: (key, runs) for key, runs in cases.items() if key[4] == "summa"}
    pairs = [(key, runs) for key, runs in cases.items() if key[4] != "summa"]
    assert len(pairs) == 6
    for key, runs in pairs:
        base_key, base_runs = summa[key[1:3]]
        measured = float(np.median(base_runs)) / float(np.median(runs))
        predicted = _predicted_ramp(*base_key[1:3], *base_key[5:8], base_key[3], base_key[4], base_key[8]) / \
            _predicted_ramp(*key[1:3], *key[5:8], key[3], key[4], key[8])
        assert abs(predicted / measured - 1) <= 0.15, (key, measured, predicted)


def test_model_narrows_the_panel_where_the_ring_does_not_fit():
    """As the engine: the default width where it fits, else the widest narrower one that does."""
    machine = builtin("h200x2")
    problem = Problem(65536, 65536, 65536, "float64")
    roomy = predict(problem, 2, machine)
    assert roomy.panel == 8192 and math.isfinite(roomy.seconds)
    grid = Grid(*model.compute_dims(2))
    need = {p: model.memory_bytes(problem, grid, p, 2) for p in (8192, 4096, 2048)}
    tight = machine.replace(memory_gib=(need[4096] + need[8192]) / 2 / 2**30)
    narrowed = predict(problem, 2, tight)
    assert narrowed.panel == 4096 and math.isfinite(narrowed.seconds)


# The per-type panel sweep of 2026-11-30 (tests/gpu/speed_check.sh panels; the last row from the third
# speed run), 2 ranks on one node over IPC, system MPI: (type, n = m = k, --panel, measured seconds).
# Predicted with that day's description (h200x2-2026-11-30-system-c.json), whose tf32 curve was not
# measured: the built-in h200x2's (hpcmm's GEMM call in the order tf32 runs, A row-major) stands in.
MEASURED_SWEEP_1130 = [
    ("float64", 16384, 8192, 0.084957),  # -6.7 %
    ("float64", 32768, 8192, 0.628541),  # -1.2 %
    ("float64", 4096, 1024, 0.001653),  # -5.5 %
    ("float64", 4096, 2048, 0.001506),  # +1.6 %
    ("float64", 4096, 512, 0.001779),  # -3.6 %
    ("float64", 8192, 1024, 0.010290),  # +9.8 %
    ("float64", 8192, 2048, 0.010026),  # +7.1 %
    ("float64", 8192, 4096, 0.009947),  # +5.5 %
    ("bfloat16", 32768, 2048, 0.056162),  # +10.7 %
    ("bfloat16", 32768, 4096, 0.053009),  # +7.9 %
    ("bfloat16", 32768, 8192, 0.051761),  # +5.8 %
    ("float16", 16384, 2048, 0.006898),  # +6.0 %
    ("float16", 16384, 4096, 0.006558),  # +2.5 %
    ("float16", 16384, 8192, 0.006551),  # -0.2 %
    ("tf32", 16384, 2048, 0.017228),  # -10.2 %
    ("tf32", 16384, 4096, 0.016320),  # -12.8 %
    ("tf32", 16384, 8192, 0.015037),  # -8.2 %
    ("float64", 32768, 4096, 0.633111),  # -0.6 %
]


@pytest.mark.parametrize("dtype,n,panel,seconds", MEASURED_SWEEP_1130)
def test_panel_sweep_within_15_percent(dtype, n, panel, seconds, plan_of_their_day):
    machine = _machine_1130("system-c")
    machine = machine.replace(gemm={**machine.gemm, "tf32": builtin("h200x2").gemm["tf32"]})
    p = predict(Problem(n, n, n, dtype), 2, machine, panel=panel, ranks_per_host=2, orientation="wide")
    assert abs(p.seconds / seconds - 1) <= 0.15, (dtype, n, panel, p.seconds, seconds)


def test_sweep_times_tf32_in_the_order_the_run_takes():
    """tf32's curve must come from the GEMM the run calls (A re-laid out row-major), not the stored order."""
    from hpcmm.gemm_orders import gemm_order

    a, b = model.sweep_operands(np, 6, 5, 4, "tf32", on_gpu=True)
    assert gemm_order("float32", tf32=True) == "CC" and a.flags.c_contiguous and b.flags.c_contiguous
    a, b = model.sweep_operands(np, 6, 5, 4, "float16", on_gpu=True)
    assert a.flags.f_contiguous and b.flags.c_contiguous and a.shape == (6, 4) and b.shape == (4, 5)


# -- each rank's own step order (2026-11-30, later) ---------------------------------------------
#: The step order A/B (docs/benchmarks.md, "Each rank starts with its own block"; `speed_check.sh
#: steps`, system MPI, one node, IPC), median of 5 products per run, predicted with the seventh
#: call's description (data/machines/h200x2-2026-11-30-system-d.json, an earlier call's: these
#: calls measured none): (ranks, n, dtype, panel, HPCMM_STEP_ORDER, seconds).  The first sixteen rows
#: are one call, the last six the next call's float64 16384 pairs.
MEASURED_OWN_1130 = [
    (2, 16384, "float64", 8192, "common", 0.083007),  # -4.0 %
    (2, 16384, "float64", 8192, "auto", 0.084962),  # -8.7 %
    (2, 16384, "tf32", 8192, "auto", 0.011782),  # +15.2 % (open)
    (2, 16384, "tf32", 8192, "common", 0.014341),  # +2.3 %
    (2, 4096, "float64", 2048, "common", 0.001654),  # -8.5 %
    (2, 4096, "float64", 2048, "auto", 0.001487),  # -7.9 %
    (2, 8192, "float64", 4096, "auto", 0.009891),  # +1.3 %
    (2, 8192, "float64", 4096, "common", 0.010069),  # +4.8 %
    (2, 16384, "float16", 8192, "common", 0.006435),  # -2.7 %
    (2, 16384, "float16", 8192, "auto", 0.006100),  # -6.9 %
    (2, 32768, "bfloat16", 8192, "auto", 0.050783),  # +3.7 %
    (2, 32768, "bfloat16", 8192, "common", 0.051852),  # +5.5 %
    (3, 16384, "float64", 2048, "common", 0.093206),  # +5.6 % (the share balance's weighted blocks)
    (3, 16384, "float64", 2048, "auto", 0.092868),  # +3.8 %
    (8, 16384, "float64", 2048, "auto", 0.095615),  # +3.5 %
    (8, 16384, "float64", 2048, "common", 0.096030),  # +3.2 %
    (2, 16384, "float64", 8192, "auto", 0.088186),  # -12.0 %
    (2, 16384, "float64", 8192, "common", 0.086329),  # -7.7 %
    (2, 16384, "float64", 8192, "auto", 0.088433),  # -12.3 %
    (2, 16384, "float64", 8192, "common", 0.088505),  # -10.0 %
    (2, 16384, "float64", 8192, "auto", 0.086982),  # -10.8 %
    (2, 16384, "float64", 8192, "common", 0.086076),  # -7.5 %
]
#: tf32 in its own order: the model's tf32 curve prices the whole-panel steps below what they ran
#: (373 TFLOP/s per GPU in the product); the common order's row is within 2.3 %.
OPEN_OWN_1130 = {2}


@pytest.mark.parametrize("index", range(len(MEASURED_OWN_1130)))
def test_own_order_runs_within_15_percent(index):
    """The model, walking each rank's own plan (or the common one), against the A/B runs."""
    ranks, n, dtype, panel, order, seconds = MEASURED_OWN_1130[index]
    p = predict(Problem(n, n, n, dtype), ranks, _machine_1130("system-d"), ranks_per_host=ranks, panel=panel,
                step_order=order, orientation="wide")  # those runs' grids: MPI.Compute_dims as it comes
    _within_15_percent_or_open(abs(p.seconds / seconds - 1), index in OPEN_OWN_1130,
                               (MEASURED_OWN_1130[index], p.seconds))


def test_own_order_saves_the_ramp_where_both_first_panels_are_a_ranks_own():
    """2 ranks: two whole steps each and nothing exposed but the first pull's latency, where the
    common order ramps through four narrow steps; the model gains what the ramp's GEMMs lost."""
    machine = _machine_1130("system-d")
    own = predict(Problem(16384, 16384, 16384, "tf32"), 2, machine, ranks_per_host=2, panel=8192)
    common = predict(Problem(16384, 16384, 16384, "tf32"), 2, machine, ranks_per_host=2, panel=8192,
                     step_order="common")
    assert (own.steps, common.steps) == (2, 5)
    assert own.seconds < common.seconds and own.gemm_seconds < common.gemm_seconds
    # across (virtual) nodes the broadcasts keep one order for all: the setting changes nothing there
    across = [predict(Problem(8192, 8192, 8192), 4, machine, ranks_per_node=2, step_order=order).seconds
              for order in ("auto", "common")]
    assert across[0] == across[1]


def test_module_doctests():
    """The worked examples in the model's docstrings (staged rate, chain, queue, fits) hold."""
    result = doctest.testmod(model)
    assert result.attempted >= 20 and result.failed == 0, result


def test_the_model_needs_no_mpi():
    """Pure: importing the cost model (with the layout rules it shares with the run) loads neither MPI nor CUDA."""
    import subprocess
    import sys

    code = ("import sys, hpcmm.model; bad = [m for m in sys.modules if m.split('.')[0] in ('mpi4py', 'cupy')]; "
            "assert not bad, bad")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("flags, step_order, balance", [([], "auto", "share"), (["--balance", "none"], "auto", "none"),
                                                        (["--step-order", "common"], "common", "share")])
def test_model_command_takes_the_runs_balance_and_step_order(capsys, flags, step_order, balance):
    """`model --balance` and `--step-order` predict what the run does with `--balance` and HPCMM_STEP_ORDER."""
    from mpi4py import MPI

    from hpcmm import cli

    ns = cli.parse(["model", "--m", "16384", "--ranks", "3", "--ranks-per-host", "3", "--json", *flags])
    assert model.model_main(ns, MPI.COMM_SELF) == 0
    out = json.loads(capsys.readouterr().out)
    want = predict(Problem(16384, 16384, 16384), 3, builtin("h200x2"), ranks_per_host=3, step_order=step_order,
                   balance=balance)
    assert out["seconds"] == pytest.approx(want.seconds) and out["steps"] == want.steps


#: Shared run 9 (docs/benchmarks.md, "Run 9"; 2026-11-30): float64 16384³ on 2 GPUs over IPC, the
#: default grid (1 × 2, and one process row where ranks share the GPUs), no MPS daemon; seconds per
#: product as measured.  Predicted on the seventh call's description.
MEASURED_ROW_1130 = [
    (2, 0.08714),  # -13.5 %
    (2, 0.07971),  # -5.4 %
    (3, 0.08477),  # +1.4 %
    (5, 0.08740),  # +6.4 %
    (8, 0.08557),  # -0.4 %
    (8, 0.08563),  # -0.5 %
]
#: Rows above 15 %: none since the description holds the GEMM rate of the measured block shapes
#: (``GemmCurve.shapes``) and the time-sliced share measured with them (0.91); with one sharing
#: factor (0.85) and the curve alone the 1 × 8 rows were +15.1 and +15.0 % (docs/scaling.md).
OPEN_ROW_1130: set[int] = set()


@pytest.mark.parametrize("index", range(len(MEASURED_ROW_1130)))
def test_shared_run_9_within_15_percent(index):
    """The model, with the default grid it shares with the run (1 × P where ranks share GPUs), against run 9."""
    ranks, seconds = MEASURED_ROW_1130[index]
    p = predict(Problem(16384, 16384, 16384, "float64"), ranks, _machine_1130("system-d"), ranks_per_host=ranks)
    assert p.grid == f"1x{ranks}"
    _within_15_percent_or_open(abs(p.seconds / seconds - 1), index in OPEN_ROW_1130,
                               (MEASURED_ROW_1130[index], p.seconds))



def test_mps_clients_share_a_device_at_the_mps_rate():
    """Ranks sharing a GPU under MPS keep ``mps_device_efficiency`` of its rate and wait for no context's
    turn; without sharing MPS changes nothing; ``model check`` takes the state from each file."""
    machine = builtin("h200x2")
    prob = Problem(16384, 16384, 16384)
    sliced, mps = (predict(prob, 8, machine, ranks_per_host=8, mps=flag).seconds for flag in (False, True))
    assert mps < sliced
    alone = machine.replace(shared_device_efficiency=machine.mps_device_efficiency, shared_mpi_us=0.0)
    assert mps == pytest.approx(predict(prob, 8, alone, ranks_per_host=8).seconds)
    assert predict(prob, 2, machine, mps=True).seconds == predict(prob, 2, machine).seconds  # one rank per GPU
    with pytest.raises(InputError, match="mps_device_efficiency"):
        machine.replace(mps_device_efficiency=0.0)


def test_check_reads_the_mps_state_of_each_file(tmp_path, capsys):
    machine = builtin("h200x2")
    kw = dict(grid="1x8", panel=2048)
    files = [_results_file(tmp_path / f"{name}.h5", 16384, 16384, 16384, 8, 0.08, mps=flag, **kw)
             for name, flag in (("on", True), ("off", False), ("old", None))]
    on, off, old = model.check_rows(files, machine)
    assert on.predicted < off.predicted and off.predicted == old.predicted
    assert "8 ranks rpn 8 MPS summa" in model.check_table(files[:1] * 2, machine)


#: Shared run 9 under MPS (docs/benchmarks.md, "Run 9"): float64 16384³, the default grid (one process
#: row) and the 2 × 4 run of the same call; (ranks, grid or None, seconds).  Time-sliced, the model's
#: one sharing factor had them +15 to +27 % slow; with the MPS term +0.9, -3.2, +7.6, +7.7, -0.2, +0.2, +1.5 %.
MEASURED_MPS_1130 = [
    (3, None, 0.08028), (3, None, 0.08365),
    (5, None, 0.07866), (5, None, 0.07852),
    (8, None, 0.07766), (8, None, 0.07742),
    (8, (2, 4), 0.08640),
]


@pytest.mark.parametrize("index", range(len(MEASURED_MPS_1130)))
def test_shared_run_9_under_mps_within_15_percent(index):
    ranks, grid, seconds = MEASURED_MPS_1130[index]
    p = predict(Problem(16384, 16384, 16384, "float64"), ranks, _machine_1130("system-d"), ranks_per_host=ranks,
                grid=grid, mps=True)
    assert abs(p.seconds / seconds - 1) <= 0.15, (MEASURED_MPS_1130[index], p.seconds)


# -- the model with the device's queue, the host MPI's chain, its rate by size and its contention -------
#: tests/gpu/model_check.sh, the eighth call (sections system and 2.5d; repeats back to back) and the ninth
#: (system, 2.5d with repeats in rounds, and cuda-aware), each against the description its call measured
#: (data/machines/h200x2-2026-11-30-system-e.json, -system-f.json, -cuda-aware-f.json): (section, ranks,
#: m, n, k, type, ranks per node, ranks per host, algo, grid, panel, prefetch, CUDA-aware, step order,
#: measured seconds), as ``model check`` reads them from each results file.
MEASURED_EIGHTH_1130 = [
    ("system", 2, 16384, 16384, 16384, "float16", None, 2, "summa", "2x1", 8192, 1, False, "auto", 0.006115),
    ("system", 2, 16384, 16384, 16384, "tf32", None, 2, "summa", "2x1", 8192, 1, False, "auto", 0.013015),
    ("system", 2, 16384, 16384, 16384, "float64", None, 2, "summa", "1x2", 8192, 1, False, "auto", 0.082207),
    ("system", 2, 8192, 8192, 8192, "float64", None, 2, "summa", "1x2", 4096, 1, False, "auto", 0.009564),
    ("system", 2, 8192, 8192, 8192, "float64", 1, 2, "summa", "2x1", 4096, 1, False, "common", 0.088521),
    ("system", 2, 8192, 8192, 8192, "float64", 1, 2, "summa", "2x1", 4096, 1, False, "common", 0.080381),
    ("system", 2, 8192, 8192, 8192, "float64", 1, 2, "summa", "2x1", 4096, 1, False, "common", 0.079897),
    ("system", 2, 12007, 9001, 6003, "float32", None, 2, "summa", "2x1", 3001, 1, False, "auto", 0.012968),
    ("system", 4, 8192, 8192, 8192, "float64", None, 4, "summa", "1x4", 2048, 1, False, "auto", 0.011316),
    ("system", 4, 4096, 4096, 4096, "float64", 1, 4, "summa", "2x2", 2048, 1, False, "common", 0.022508),
    ("system", 4, 4096, 4096, 4096, "float64", 1, 4, "summa", "2x2", 2048, 1, False, "common", 0.027218),
    ("system", 4, 4096, 4096, 4096, "float64", 1, 4, "summa", "2x2", 2048, 1, False, "common", 0.024398),
    ("system", 4, 8192, 8192, 8192, "float64", 2, 4, "summa", "2x2", 2048, 1, False, "common", 0.046595),
    ("system", 4, 8192, 8192, 8192, "float64", 2, 4, "summa", "2x2", 2048, 1, False, "common", 0.064123),
    ("system", 4, 8192, 8192, 8192, "float64", 2, 4, "summa", "2x2", 2048, 1, False, "common", 0.045378),
    ("system", 8, 16384, 16384, 16384, "float64", None, 8, "summa", "1x8", 2048, 1, False, "auto", 0.086645),
    ("system", 8, 6001, 4099, 3001, "float32", 1, 8, "summa", "4x2", 750, 1, False, "common", 0.015252),
    ("system", 8, 6001, 4099, 3001, "float32", 1, 8, "summa", "4x2", 750, 1, False, "common", 0.015834),
    ("system", 8, 6001, 4099, 3001, "float32", 1, 8, "summa", "4x2", 750, 1, False, "common", 0.015622),
    ("system", 8, 4096, 4096, 4096, "float64", 2, 8, "summa", "4x2", 1024, 1, False, "common", 0.027164),
    ("system", 8, 4096, 4096, 4096, "float64", 2, 8, "summa", "4x2", 1024, 1, False, "common", 0.026687),
    ("system", 8, 4096, 4096, 4096, "float64", 2, 8, "summa", "4x2", 1024, 1, False, "common", 0.027821),
    ("system", 8, 8192, 8192, 8192, "float64", 4, 8, "summa", "4x2", 2048, 1, False, "common", 0.053917),
    ("system", 8, 8192, 8192, 8192, "float64", 4, 8, "summa", "4x2", 2048, 1, False, "common", 0.056433),
    ("system", 8, 8192, 8192, 8192, "float64", 4, 8, "summa", "4x2", 2048, 1, False, "common", 0.06868),
    ("2.5d", 4, 10007, 6001, 6007, "float64", 2, 4, "2.5d:2", None, 1501, 1, False, "common", 0.026644),
    ("2.5d", 4, 10007, 6001, 6007, "float64", 2, 4, "2.5d:2", None, 1501, 1, False, "common", 0.025913),
    ("2.5d", 4, 10007, 6001, 6007, "float64", 2, 4, "2.5d:2", None, 1501, 1, False, "common", 0.026996),
    ("2.5d", 4, 10007, 6001, 6007, "float64", 2, 4, "summa", "2x2", 1502, 1, False, "common", 0.020919),
    ("2.5d", 4, 10007, 6001, 6007, "float64", 2, 4, "summa", "2x2", 1502, 1, False, "common", 0.022832),
    ("2.5d", 4, 10007, 6001, 6007, "float64", 2, 4, "summa", "2x2", 1502, 1, False, "common", 0.022648),
    ("2.5d", 4, 8192, 8192, 8192, "float64", 2, 4, "2.5d:2", None, 2048, 1, False, "common", 0.050096),
    ("2.5d", 4, 8192, 8192, 8192, "float64", 2, 4, "2.5d:2", None, 2048, 1, False, "common", 0.048931),
    ("2.5d", 4, 8192, 8192, 8192, "float64", 2, 4, "2.5d:2", None, 2048, 1, False, "common", 0.052866),
    ("2.5d", 4, 8192, 8192, 8192, "float64", 2, 4, "summa", "2x2", 2048, 1, False, "common", 0.047519),
    ("2.5d", 4, 8192, 8192, 8192, "float64", 2, 4, "summa", "2x2", 2048, 1, False, "common", 0.049545),
    ("2.5d", 4, 8192, 8192, 8192, "float64", 2, 4, "summa", "2x2", 2048, 1, False, "common", 0.047131),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "2.5d:2", None, 1501, 1, False, "common", 0.017223),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "2.5d:2", None, 1501, 1, False, "common", 0.019035),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "2.5d:2", None, 1501, 1, False, "common", 0.020721),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "2.5d:4", None, 750, 1, False, "common", 0.018832),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "2.5d:4", None, 750, 1, False, "common", 0.021181),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "2.5d:4", None, 750, 1, False, "common", 0.021705),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "summa", "4x2", 1501, 1, False, "common", 0.033401),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "summa", "4x2", 1501, 1, False, "common", 0.029486),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "summa", "4x2", 1501, 1, False, "common", 0.031934),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "2.5d:2", None, 2048, 1, False, "common", 0.029899),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "2.5d:2", None, 2048, 1, False, "common", 0.02836),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "2.5d:2", None, 2048, 1, False, "common", 0.029318),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "2.5d:4", None, 1024, 1, False, "common", 0.029821),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "2.5d:4", None, 1024, 1, False, "common", 0.027345),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "2.5d:4", None, 1024, 1, False, "common", 0.028115),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "summa", "4x2", 2048, 1, False, "common", 0.049132),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "summa", "4x2", 2048, 1, False, "common", 0.049332),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "summa", "4x2", 2048, 1, False, "common", 0.049916),
]
MEASURED_NINTH_1130 = [
    ("system", 2, 16384, 16384, 16384, "float16", None, 2, "summa", "2x1", 8192, 1, False, "auto", 0.006124),
    ("system", 2, 16384, 16384, 16384, "tf32", None, 2, "summa", "2x1", 8192, 2, False, "auto", 0.01171),
    ("system", 2, 16384, 16384, 16384, "float64", None, 2, "summa", "1x2", 8192, 1, False, "auto", 0.074034),
    ("system", 2, 8192, 8192, 8192, "float64", None, 2, "summa", "1x2", 4096, 1, False, "auto", 0.009986),
    ("system", 2, 8192, 8192, 8192, "float64", 1, 2, "summa", "2x1", 4096, 1, False, "common", 0.107047),
    ("system", 2, 8192, 8192, 8192, "float64", 1, 2, "summa", "2x1", 4096, 1, False, "common", 0.105584),
    ("system", 2, 8192, 8192, 8192, "float64", 1, 2, "summa", "2x1", 4096, 1, False, "common", 0.099722),
    ("system", 2, 12007, 9001, 6003, "float32", None, 2, "summa", "2x1", 3001, 1, False, "auto", 0.01349),
    ("system", 4, 8192, 8192, 8192, "float64", None, 4, "summa", "1x4", 2048, 1, False, "auto", 0.011075),
    ("system", 4, 4096, 4096, 4096, "float64", 1, 4, "summa", "2x2", 2048, 1, False, "common", 0.027575),
    ("system", 4, 4096, 4096, 4096, "float64", 1, 4, "summa", "2x2", 2048, 1, False, "common", 0.02888),
    ("system", 4, 4096, 4096, 4096, "float64", 1, 4, "summa", "2x2", 2048, 1, False, "common", 0.030631),
    ("system", 4, 8192, 8192, 8192, "float64", 2, 4, "summa", "2x2", 2048, 1, False, "common", 0.056941),
    ("system", 4, 8192, 8192, 8192, "float64", 2, 4, "summa", "2x2", 2048, 1, False, "common", 0.052872),
    ("system", 4, 8192, 8192, 8192, "float64", 2, 4, "summa", "2x2", 2048, 1, False, "common", 0.052365),
    ("system", 8, 16384, 16384, 16384, "float64", None, 8, "summa", "1x8", 2048, 1, False, "auto", 0.086465),
    ("system", 8, 6001, 4099, 3001, "float32", 1, 8, "summa", "4x2", 750, 1, False, "common", 0.017342),
    ("system", 8, 6001, 4099, 3001, "float32", 1, 8, "summa", "4x2", 750, 1, False, "common", 0.017233),
    ("system", 8, 6001, 4099, 3001, "float32", 1, 8, "summa", "4x2", 750, 1, False, "common", 0.017249),
    ("system", 8, 4096, 4096, 4096, "float64", 2, 8, "summa", "4x2", 1024, 1, False, "common", 0.037411),
    ("system", 8, 4096, 4096, 4096, "float64", 2, 8, "summa", "4x2", 1024, 1, False, "common", 0.03676),
    ("system", 8, 4096, 4096, 4096, "float64", 2, 8, "summa", "4x2", 1024, 1, False, "common", 0.031473),
    ("system", 8, 8192, 8192, 8192, "float64", 4, 8, "summa", "4x2", 2048, 1, False, "common", 0.058749),
    ("system", 8, 8192, 8192, 8192, "float64", 4, 8, "summa", "4x2", 2048, 1, False, "common", 0.058257),
    ("system", 8, 8192, 8192, 8192, "float64", 4, 8, "summa", "4x2", 2048, 1, False, "common", 0.057469),
    ("2.5d", 4, 10007, 6001, 6007, "float64", 2, 4, "2.5d:2", None, 1501, 1, False, "common", 0.03069),
    ("2.5d", 4, 10007, 6001, 6007, "float64", 2, 4, "2.5d:2", None, 1501, 1, False, "common", 0.044142),
    ("2.5d", 4, 10007, 6001, 6007, "float64", 2, 4, "2.5d:2", None, 1501, 1, False, "common", 0.030653),
    ("2.5d", 4, 10007, 6001, 6007, "float64", 2, 4, "summa", "2x2", 1502, 1, False, "common", 0.033559),
    ("2.5d", 4, 10007, 6001, 6007, "float64", 2, 4, "summa", "2x2", 1502, 1, False, "common", 0.031567),
    ("2.5d", 4, 10007, 6001, 6007, "float64", 2, 4, "summa", "2x2", 1502, 1, False, "common", 0.027518),
    ("2.5d", 4, 8192, 8192, 8192, "float64", 2, 4, "2.5d:2", None, 2048, 1, False, "common", 0.057941),
    ("2.5d", 4, 8192, 8192, 8192, "float64", 2, 4, "2.5d:2", None, 2048, 1, False, "common", 0.058624),
    ("2.5d", 4, 8192, 8192, 8192, "float64", 2, 4, "2.5d:2", None, 2048, 1, False, "common", 0.054314),
    ("2.5d", 4, 8192, 8192, 8192, "float64", 2, 4, "summa", "2x2", 2048, 1, False, "common", 0.05653),
    ("2.5d", 4, 8192, 8192, 8192, "float64", 2, 4, "summa", "2x2", 2048, 1, False, "common", 0.054087),
    ("2.5d", 4, 8192, 8192, 8192, "float64", 2, 4, "summa", "2x2", 2048, 1, False, "common", 0.055902),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "2.5d:2", None, 1501, 1, False, "common", 0.021642),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "2.5d:2", None, 1501, 1, False, "common", 0.022958),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "2.5d:2", None, 1501, 1, False, "common", 0.021373),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "2.5d:4", None, 750, 1, False, "common", 0.024723),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "2.5d:4", None, 750, 1, False, "common", 0.023543),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "2.5d:4", None, 750, 1, False, "common", 0.022175),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "summa", "4x2", 1501, 1, False, "common", 0.036046),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "summa", "4x2", 1501, 1, False, "common", 0.045234),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "summa", "4x2", 1501, 1, False, "common", 0.037331),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "2.5d:2", None, 2048, 1, False, "common", 0.034915),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "2.5d:2", None, 2048, 1, False, "common", 0.033516),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "2.5d:2", None, 2048, 1, False, "common", 0.041898),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "2.5d:4", None, 1024, 1, False, "common", 0.036099),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "2.5d:4", None, 1024, 1, False, "common", 0.037412),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "2.5d:4", None, 1024, 1, False, "common", 0.034223),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "summa", "4x2", 2048, 1, False, "common", 0.060661),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "summa", "4x2", 2048, 1, False, "common", 0.059513),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "summa", "4x2", 2048, 1, False, "common", 0.05627),
    ("cuda-aware", 2, 16384, 16384, 16384, "float16", 1, 2, "summa", "2x1", 8192, 1, True, "common", 0.006378),
    ("cuda-aware", 2, 16384, 16384, 16384, "float64", 1, 2, "summa", "2x1", 8192, 1, True, "common", 0.083776),
    ("cuda-aware", 2, 8192, 8192, 8192, "float64", 1, 2, "summa", "2x1", 4096, 1, True, "common", 0.010251),
    ("cuda-aware", 4, 8192, 8192, 8192, "float32", 1, 4, "summa", "2x2", 2048, 1, True, "common", 0.013083),
    ("cuda-aware", 4, 8192, 8192, 8192, "float64", 2, 4, "summa", "2x2", 2048, 1, True, "common", 0.012268),
    ("cuda-aware", 8, 8192, 8192, 8192, "float64", 1, 8, "summa", "4x2", 2048, 1, True, "common", 0.017105),
    ("cuda-aware", 8, 8192, 8192, 8192, "float64", 2, 8, "summa", "4x2", 2048, 1, True, "common", 0.01575),
    ("cuda-aware", 8, 10007, 6001, 3001, "float64", 2, 8, "summa", "4x2", 750, 1, True, "common", 0.01015),
    ("cuda-aware", 8, 16384, 16384, 16384, "float64", 4, 8, "summa", "4x2", 2048, 1, True, "common", 0.098641),
]
#: The tenth call (sections system and 2.5d, repeats in rounds; the same tree as the ninth), against its own
#: description (data/machines/h200x2-2026-11-30-system-g.json).
MEASURED_TENTH_1130 = [
    ("system", 2, 16384, 16384, 16384, "float16", None, 2, "summa", "2x1", 8192, 1, False, "auto", 0.006314),
    ("system", 2, 16384, 16384, 16384, "tf32", None, 2, "summa", "2x1", 8192, 2, False, "auto", 0.012326),
    ("system", 2, 16384, 16384, 16384, "float64", None, 2, "summa", "1x2", 8192, 1, False, "auto", 0.076088),
    ("system", 2, 8192, 8192, 8192, "float64", None, 2, "summa", "1x2", 4096, 1, False, "auto", 0.01038),
    ("system", 2, 8192, 8192, 8192, "float64", 1, 2, "summa", "2x1", 4096, 1, False, "common", 0.079451),
    ("system", 2, 8192, 8192, 8192, "float64", 1, 2, "summa", "2x1", 4096, 1, False, "common", 0.093962),
    ("system", 2, 8192, 8192, 8192, "float64", 1, 2, "summa", "2x1", 4096, 1, False, "common", 0.078987),
    ("system", 2, 12007, 9001, 6003, "float32", None, 2, "summa", "2x1", 3001, 1, False, "auto", 0.013632),
    ("system", 4, 8192, 8192, 8192, "float64", None, 4, "summa", "1x4", 2048, 1, False, "auto", 0.011782),
    ("system", 4, 4096, 4096, 4096, "float64", 1, 4, "summa", "2x2", 2048, 1, False, "common", 0.02532),
    ("system", 4, 4096, 4096, 4096, "float64", 1, 4, "summa", "2x2", 2048, 1, False, "common", 0.02909),
    ("system", 4, 4096, 4096, 4096, "float64", 1, 4, "summa", "2x2", 2048, 1, False, "common", 0.026557),
    ("system", 4, 8192, 8192, 8192, "float64", 2, 4, "summa", "2x2", 2048, 1, False, "common", 0.072353),
    ("system", 4, 8192, 8192, 8192, "float64", 2, 4, "summa", "2x2", 2048, 1, False, "common", 0.050068),
    ("system", 4, 8192, 8192, 8192, "float64", 2, 4, "summa", "2x2", 2048, 1, False, "common", 0.05072),
    ("system", 8, 16384, 16384, 16384, "float64", None, 8, "summa", "1x8", 2048, 1, False, "auto", 0.087646),
    ("system", 8, 6001, 4099, 3001, "float32", 1, 8, "summa", "4x2", 750, 1, False, "common", 0.016199),
    ("system", 8, 6001, 4099, 3001, "float32", 1, 8, "summa", "4x2", 750, 1, False, "common", 0.016916),
    ("system", 8, 6001, 4099, 3001, "float32", 1, 8, "summa", "4x2", 750, 1, False, "common", 0.015948),
    ("system", 8, 4096, 4096, 4096, "float64", 2, 8, "summa", "4x2", 1024, 1, False, "common", 0.03465),
    ("system", 8, 4096, 4096, 4096, "float64", 2, 8, "summa", "4x2", 1024, 1, False, "common", 0.032231),
    ("system", 8, 4096, 4096, 4096, "float64", 2, 8, "summa", "4x2", 1024, 1, False, "common", 0.029845),
    ("system", 8, 8192, 8192, 8192, "float64", 4, 8, "summa", "4x2", 2048, 1, False, "common", 0.052547),
    ("system", 8, 8192, 8192, 8192, "float64", 4, 8, "summa", "4x2", 2048, 1, False, "common", 0.068834),
    ("system", 8, 8192, 8192, 8192, "float64", 4, 8, "summa", "4x2", 2048, 1, False, "common", 0.054751),
    ("2.5d", 4, 10007, 6001, 6007, "float64", 2, 4, "2.5d:2", None, 1501, 1, False, "common", 0.032636),
    ("2.5d", 4, 10007, 6001, 6007, "float64", 2, 4, "2.5d:2", None, 1501, 1, False, "common", 0.035543),
    ("2.5d", 4, 10007, 6001, 6007, "float64", 2, 4, "2.5d:2", None, 1501, 1, False, "common", 0.034705),
    ("2.5d", 4, 10007, 6001, 6007, "float64", 2, 4, "summa", "2x2", 1502, 1, False, "common", 0.029186),
    ("2.5d", 4, 10007, 6001, 6007, "float64", 2, 4, "summa", "2x2", 1502, 1, False, "common", 0.0279),
    ("2.5d", 4, 10007, 6001, 6007, "float64", 2, 4, "summa", "2x2", 1502, 1, False, "common", 0.029507),
    ("2.5d", 4, 8192, 8192, 8192, "float64", 2, 4, "2.5d:2", None, 2048, 1, False, "common", 0.059494),
    ("2.5d", 4, 8192, 8192, 8192, "float64", 2, 4, "2.5d:2", None, 2048, 1, False, "common", 0.059163),
    ("2.5d", 4, 8192, 8192, 8192, "float64", 2, 4, "2.5d:2", None, 2048, 1, False, "common", 0.060458),
    ("2.5d", 4, 8192, 8192, 8192, "float64", 2, 4, "summa", "2x2", 2048, 1, False, "common", 0.054393),
    ("2.5d", 4, 8192, 8192, 8192, "float64", 2, 4, "summa", "2x2", 2048, 1, False, "common", 0.063337),
    ("2.5d", 4, 8192, 8192, 8192, "float64", 2, 4, "summa", "2x2", 2048, 1, False, "common", 0.05561),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "2.5d:2", None, 1501, 1, False, "common", 0.023266),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "2.5d:2", None, 1501, 1, False, "common", 0.024971),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "2.5d:2", None, 1501, 1, False, "common", 0.021858),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "2.5d:4", None, 750, 1, False, "common", 0.024306),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "2.5d:4", None, 750, 1, False, "common", 0.026779),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "2.5d:4", None, 750, 1, False, "common", 0.023964),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "summa", "4x2", 1501, 1, False, "common", 0.041934),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "summa", "4x2", 1501, 1, False, "common", 0.039901),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "summa", "4x2", 1501, 1, False, "common", 0.039667),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "2.5d:2", None, 2048, 1, False, "common", 0.038099),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "2.5d:2", None, 2048, 1, False, "common", 0.046553),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "2.5d:2", None, 2048, 1, False, "common", 0.035167),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "2.5d:4", None, 1024, 1, False, "common", 0.046216),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "2.5d:4", None, 1024, 1, False, "common", 0.04038),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "2.5d:4", None, 1024, 1, False, "common", 0.03648),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "summa", "4x2", 2048, 1, False, "common", 0.059433),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "summa", "4x2", 2048, 1, False, "common", 0.059476),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "summa", "4x2", 2048, 1, False, "common", 0.056225),
]
#: The eighth call's cases outside 15 % by their median, section by section (docs/scaling.md, section 1):
#: summa 10007x6001x6007 at 4 ranks, rpn 2, in the 2.5d section (+20.8 %; the same case's median was
#: 0.02814 s in the seventh call, 0.02265 s in this one, 0.03157 s in the ninth), and 8192 at 8 ranks,
#: rpn 4, in the system section (-15.2 %; the same case in the 2.5d section of the same call: -3.0 %).
#: They must stay below 35 % until fixed.
OPEN_EIGHTH_1130 = {("2.5d", 4, 10007, "float64", 2, "summa"), ("system", 8, 8192, "float64", 4, "summa")}
#: The tenth call's case outside 15 % by its median (-16.6 %): summa 10007x6001x6007 at 8 ranks, rpn 4, in the
#: 2.5d section (-10.9 % in the ninth call).  Below 35 % until fixed (docs/scaling.md).
OPEN_TENTH_1130 = {("2.5d", 8, 10007, "float64", 4, "summa")}
#: The eleventh call (sections system and 2.5d, the links measured again before every round), against the
#: description measured at its start (data/machines/h200x2-2026-11-30-system-h.json).
MEASURED_ELEVENTH_1130 = [
    ("2.5d", 4, 10007, 6001, 6007, "float64", 2, 4, "2.5d:2", None, 1501, 1, False, "common", 0.0237095),
    ("2.5d", 4, 10007, 6001, 6007, "float64", 2, 4, "2.5d:2", None, 1501, 1, False, "common", 0.026477),
    ("2.5d", 4, 10007, 6001, 6007, "float64", 2, 4, "2.5d:2", None, 1501, 1, False, "common", 0.0292038),
    ("2.5d", 4, 10007, 6001, 6007, "float64", 2, 4, "summa", "2x2", 1502, 1, False, "common", 0.0233823),
    ("2.5d", 4, 10007, 6001, 6007, "float64", 2, 4, "summa", "2x2", 1502, 1, False, "common", 0.0241756),
    ("2.5d", 4, 10007, 6001, 6007, "float64", 2, 4, "summa", "2x2", 1502, 1, False, "common", 0.0248296),
    ("2.5d", 4, 8192, 8192, 8192, "float64", 2, 4, "2.5d:2", None, 2048, 1, False, "common", 0.0417598),
    ("2.5d", 4, 8192, 8192, 8192, "float64", 2, 4, "2.5d:2", None, 2048, 1, False, "common", 0.0471475),
    ("2.5d", 4, 8192, 8192, 8192, "float64", 2, 4, "2.5d:2", None, 2048, 1, False, "common", 0.0507079),
    ("2.5d", 4, 8192, 8192, 8192, "float64", 2, 4, "summa", "2x2", 2048, 1, False, "common", 0.0369908),
    ("2.5d", 4, 8192, 8192, 8192, "float64", 2, 4, "summa", "2x2", 2048, 1, False, "common", 0.0408635),
    ("2.5d", 4, 8192, 8192, 8192, "float64", 2, 4, "summa", "2x2", 2048, 1, False, "common", 0.0433637),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "2.5d:2", None, 1501, 1, False, "common", 0.0174188),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "2.5d:2", None, 1501, 1, False, "common", 0.0187367),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "2.5d:2", None, 1501, 1, False, "common", 0.018887),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "2.5d:4", None, 750, 1, False, "common", 0.0188944),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "2.5d:4", None, 750, 1, False, "common", 0.0190205),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "2.5d:4", None, 750, 1, False, "common", 0.0202285),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "summa", "4x2", 1501, 1, False, "common", 0.0333378),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "summa", "4x2", 1501, 1, False, "common", 0.0358919),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "summa", "4x2", 1501, 1, False, "common", 0.0376741),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "2.5d:2", None, 2048, 1, False, "common", 0.027904),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "2.5d:2", None, 2048, 1, False, "common", 0.0290302),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "2.5d:2", None, 2048, 1, False, "common", 0.0291963),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "2.5d:4", None, 1024, 1, False, "common", 0.0306307),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "2.5d:4", None, 1024, 1, False, "common", 0.0314251),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "2.5d:4", None, 1024, 1, False, "common", 0.0332625),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "summa", "4x2", 2048, 1, False, "common", 0.0439801),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "summa", "4x2", 2048, 1, False, "common", 0.0484733),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "summa", "4x2", 2048, 1, False, "common", 0.0531697),
    ("system", 2, 12007, 9001, 6003, "float32", None, 2, "summa", "2x1", 3001, 1, False, "auto", 0.0134881),
    ("system", 2, 16384, 16384, 16384, "float16", None, 2, "summa", "2x1", 8192, 1, False, "auto", 0.00599373),
    ("system", 2, 16384, 16384, 16384, "float64", None, 2, "summa", "1x2", 8192, 1, False, "auto", 0.0743054),
    ("system", 2, 16384, 16384, 16384, "tf32", None, 2, "summa", "2x1", 8192, 2, False, "auto", 0.0118363),
    ("system", 2, 8192, 8192, 8192, "float64", 1, 2, "summa", "2x1", 4096, 1, False, "common", 0.0687048),
    ("system", 2, 8192, 8192, 8192, "float64", 1, 2, "summa", "2x1", 4096, 1, False, "common", 0.0762276),
    ("system", 2, 8192, 8192, 8192, "float64", 1, 2, "summa", "2x1", 4096, 1, False, "common", 0.0776549),
    ("system", 2, 8192, 8192, 8192, "float64", None, 2, "summa", "1x2", 4096, 1, False, "auto", 0.0098307),
    ("system", 4, 4096, 4096, 4096, "float64", 1, 4, "summa", "2x2", 2048, 1, False, "common", 0.0233976),
    ("system", 4, 4096, 4096, 4096, "float64", 1, 4, "summa", "2x2", 2048, 1, False, "common", 0.0246273),
    ("system", 4, 4096, 4096, 4096, "float64", 1, 4, "summa", "2x2", 2048, 1, False, "common", 0.0268659),
    ("system", 4, 8192, 8192, 8192, "float64", 2, 4, "summa", "2x2", 2048, 1, False, "common", 0.0396022),
    ("system", 4, 8192, 8192, 8192, "float64", 2, 4, "summa", "2x2", 2048, 1, False, "common", 0.0433236),
    ("system", 4, 8192, 8192, 8192, "float64", 2, 4, "summa", "2x2", 2048, 1, False, "common", 0.044194),
    ("system", 4, 8192, 8192, 8192, "float64", None, 4, "summa", "1x4", 2048, 1, False, "auto", 0.0110823),
    ("system", 8, 16384, 16384, 16384, "float64", None, 8, "summa", "1x8", 2048, 1, False, "auto", 0.0861893),
    ("system", 8, 4096, 4096, 4096, "float64", 2, 8, "summa", "4x2", 1024, 1, False, "common", 0.0242333),
    ("system", 8, 4096, 4096, 4096, "float64", 2, 8, "summa", "4x2", 1024, 1, False, "common", 0.0271412),
    ("system", 8, 4096, 4096, 4096, "float64", 2, 8, "summa", "4x2", 1024, 1, False, "common", 0.0324229),
    ("system", 8, 6001, 4099, 3001, "float32", 1, 8, "summa", "4x2", 750, 1, False, "common", 0.0135254),
    ("system", 8, 6001, 4099, 3001, "float32", 1, 8, "summa", "4x2", 750, 1, False, "common", 0.0142497),
    ("system", 8, 6001, 4099, 3001, "float32", 1, 8, "summa", "4x2", 750, 1, False, "common", 0.0145277),
    ("system", 8, 8192, 8192, 8192, "float64", 4, 8, "summa", "4x2", 2048, 1, False, "common", 0.0456032),
    ("system", 8, 8192, 8192, 8192, "float64", 4, 8, "summa", "4x2", 2048, 1, False, "common", 0.0463986),
    ("system", 8, 8192, 8192, 8192, "float64", 4, 8, "summa", "4x2", 2048, 1, False, "common", 0.0481275),
]
#: Its cases outside 15 % with that description: float32 6001x4099x3001 at 8 ranks, rpn 1 (median +15.8 %),
#: summa 8192 at 4 ranks, rpn 2, in the 2.5d section (+15.8 %), and tf32 16384 at 2 ranks (+17.1 %, one run: its
#: wide block was not timed exactly; the twelfth call times it).  Below 35 % until fixed (docs/scaling.md).
OPEN_ELEVENTH_1130 = {("system", 8, 6001, "float32", 1, "summa"), ("2.5d", 4, 8192, "float64", 2, "summa"),
                      ("system", 2, 16384, "tf32", None, "summa")}
#: The twelfth call: tf32 16384 at 2 ranks with its block timed exactly, and the case the tenth call left open,
#: time-sliced (data/machines/h200x2-2026-11-30-system-i.json).
MEASURED_TWELFTH_1130 = [
    ("system", 2, 16384, 16384, 16384, "tf32", None, 2, "summa", "2x1", 8192, 2, False, "auto", 0.0118757),
    ("system", 2, 16384, 16384, 16384, "tf32", None, 2, "summa", "2x1", 8192, 2, False, "auto", 0.0119318),
    ("system", 2, 16384, 16384, 16384, "tf32", None, 2, "summa", "2x1", 8192, 2, False, "auto", 0.0119327),
    ("system", 8, 10007, 6001, 6007, "float64", 4, 8, "summa", "4x2", 1501, 1, False, "common", 0.034629),
    ("system", 8, 10007, 6001, 6007, "float64", 4, 8, "summa", "4x2", 1501, 1, False, "common", 0.0352379),
    ("system", 8, 10007, 6001, 6007, "float64", 4, 8, "summa", "4x2", 1501, 1, False, "common", 0.0358389),
]
#: The thirteenth call (section 2.5d, the links measured again before every round), against the description
#: measured at its start (data/machines/h200x2-2026-11-30-system-j.json).
MEASURED_THIRTEENTH_1130 = [
    ("2.5d", 4, 10007, 6001, 6007, "float64", 2, 4, "2.5d:2", None, 1501, 1, False, "common", 0.0314356),
    ("2.5d", 4, 10007, 6001, 6007, "float64", 2, 4, "2.5d:2", None, 1501, 1, False, "common", 0.0315029),
    ("2.5d", 4, 10007, 6001, 6007, "float64", 2, 4, "2.5d:2", None, 1501, 1, False, "common", 0.0425521),
    ("2.5d", 4, 10007, 6001, 6007, "float64", 2, 4, "summa", "2x2", 1502, 1, False, "common", 0.0268718),
    ("2.5d", 4, 10007, 6001, 6007, "float64", 2, 4, "summa", "2x2", 1502, 1, False, "common", 0.0271754),
    ("2.5d", 4, 10007, 6001, 6007, "float64", 2, 4, "summa", "2x2", 1502, 1, False, "common", 0.0283464),
    ("2.5d", 4, 8192, 8192, 8192, "float64", 2, 4, "2.5d:2", None, 2048, 1, False, "common", 0.0519252),
    ("2.5d", 4, 8192, 8192, 8192, "float64", 2, 4, "2.5d:2", None, 2048, 1, False, "common", 0.0535062),
    ("2.5d", 4, 8192, 8192, 8192, "float64", 2, 4, "2.5d:2", None, 2048, 1, False, "common", 0.0580343),
    ("2.5d", 4, 8192, 8192, 8192, "float64", 2, 4, "summa", "2x2", 2048, 1, False, "common", 0.0483848),
    ("2.5d", 4, 8192, 8192, 8192, "float64", 2, 4, "summa", "2x2", 2048, 1, False, "common", 0.0494582),
    ("2.5d", 4, 8192, 8192, 8192, "float64", 2, 4, "summa", "2x2", 2048, 1, False, "common", 0.0512217),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "2.5d:2", None, 1501, 1, False, "common", 0.020228),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "2.5d:2", None, 1501, 1, False, "common", 0.0203135),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "2.5d:2", None, 1501, 1, False, "common", 0.0213155),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "2.5d:4", None, 750, 1, False, "common", 0.0218244),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "2.5d:4", None, 750, 1, False, "common", 0.0219475),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "2.5d:4", None, 750, 1, False, "common", 0.0239192),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "summa", "4x2", 1501, 1, False, "common", 0.035586),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "summa", "4x2", 1501, 1, False, "common", 0.0364828),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "summa", "4x2", 1501, 1, False, "common", 0.0390921),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "2.5d:2", None, 2048, 1, False, "common", 0.0331451),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "2.5d:2", None, 2048, 1, False, "common", 0.0331688),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "2.5d:2", None, 2048, 1, False, "common", 0.0332506),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "2.5d:4", None, 1024, 1, False, "common", 0.0342647),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "2.5d:4", None, 1024, 1, False, "common", 0.03449),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "2.5d:4", None, 1024, 1, False, "common", 0.0349654),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "summa", "4x2", 2048, 1, False, "common", 0.0514278),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "summa", "4x2", 2048, 1, False, "common", 0.0536931),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "summa", "4x2", 2048, 1, False, "common", 0.0660483),
]

#: The fourteenth call (each section in its own call: system with five runs of each staged case, 2.5d with four, then
#: cuda-aware; the links measured again before every round), against the descriptions measured at each call's
#: start (data/machines/h200x2-2026-11-30-system-k.json, -system-l.json, -cuda-aware-k.json).
MEASURED_FOURTEENTH_1130 = [
    ("2.5d", 4, 10007, 6001, 6007, "float64", 2, 4, "2.5d:2", None, 1501, 1, False, "common", 0.0310718),
    ("2.5d", 4, 10007, 6001, 6007, "float64", 2, 4, "2.5d:2", None, 1501, 1, False, "common", 0.0338003),
    ("2.5d", 4, 10007, 6001, 6007, "float64", 2, 4, "2.5d:2", None, 1501, 1, False, "common", 0.0343326),
    ("2.5d", 4, 10007, 6001, 6007, "float64", 2, 4, "2.5d:2", None, 1501, 1, False, "common", 0.0352533),
    ("2.5d", 4, 10007, 6001, 6007, "float64", 2, 4, "summa", "2x2", 1502, 1, False, "common", 0.0261975),
    ("2.5d", 4, 10007, 6001, 6007, "float64", 2, 4, "summa", "2x2", 1502, 1, False, "common", 0.0273353),
    ("2.5d", 4, 10007, 6001, 6007, "float64", 2, 4, "summa", "2x2", 1502, 1, False, "common", 0.0307799),
    ("2.5d", 4, 10007, 6001, 6007, "float64", 2, 4, "summa", "2x2", 1502, 1, False, "common", 0.031923),
    ("2.5d", 4, 8192, 8192, 8192, "float64", 2, 4, "2.5d:2", None, 2048, 1, False, "common", 0.050932),
    ("2.5d", 4, 8192, 8192, 8192, "float64", 2, 4, "2.5d:2", None, 2048, 1, False, "common", 0.056635),
    ("2.5d", 4, 8192, 8192, 8192, "float64", 2, 4, "2.5d:2", None, 2048, 1, False, "common", 0.0567614),
    ("2.5d", 4, 8192, 8192, 8192, "float64", 2, 4, "2.5d:2", None, 2048, 1, False, "common", 0.0688556),
    ("2.5d", 4, 8192, 8192, 8192, "float64", 2, 4, "summa", "2x2", 2048, 1, False, "common", 0.0495748),
    ("2.5d", 4, 8192, 8192, 8192, "float64", 2, 4, "summa", "2x2", 2048, 1, False, "common", 0.0568926),
    ("2.5d", 4, 8192, 8192, 8192, "float64", 2, 4, "summa", "2x2", 2048, 1, False, "common", 0.0575285),
    ("2.5d", 4, 8192, 8192, 8192, "float64", 2, 4, "summa", "2x2", 2048, 1, False, "common", 0.0575522),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "2.5d:2", None, 1501, 1, False, "common", 0.0215071),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "2.5d:2", None, 1501, 1, False, "common", 0.0215266),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "2.5d:2", None, 1501, 1, False, "common", 0.0228398),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "2.5d:2", None, 1501, 1, False, "common", 0.0285652),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "2.5d:4", None, 750, 1, False, "common", 0.0232946),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "2.5d:4", None, 750, 1, False, "common", 0.0243651),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "2.5d:4", None, 750, 1, False, "common", 0.0249091),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "2.5d:4", None, 750, 1, False, "common", 0.0257574),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "summa", "4x2", 1501, 1, False, "common", 0.0388319),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "summa", "4x2", 1501, 1, False, "common", 0.0389402),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "summa", "4x2", 1501, 1, False, "common", 0.0393844),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "summa", "4x2", 1501, 1, False, "common", 0.0406122),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "2.5d:2", None, 2048, 1, False, "common", 0.0325555),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "2.5d:2", None, 2048, 1, False, "common", 0.0350791),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "2.5d:2", None, 2048, 1, False, "common", 0.0353153),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "2.5d:2", None, 2048, 1, False, "common", 0.0428157),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "2.5d:4", None, 1024, 1, False, "common", 0.0357675),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "2.5d:4", None, 1024, 1, False, "common", 0.0373052),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "2.5d:4", None, 1024, 1, False, "common", 0.0374959),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "2.5d:4", None, 1024, 1, False, "common", 0.0375424),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "summa", "4x2", 2048, 1, False, "common", 0.0570869),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "summa", "4x2", 2048, 1, False, "common", 0.0572502),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "summa", "4x2", 2048, 1, False, "common", 0.0579359),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "summa", "4x2", 2048, 1, False, "common", 0.0593691),
    ("cuda-aware", 2, 16384, 16384, 16384, "float16", 1, 2, "summa", "2x1", 8192, 1, True, "common", 0.0064889),
    ("cuda-aware", 2, 16384, 16384, 16384, "float64", 1, 2, "summa", "2x1", 8192, 1, True, "common", 0.0828837),
    ("cuda-aware", 2, 8192, 8192, 8192, "float64", 1, 2, "summa", "2x1", 4096, 1, True, "common", 0.0101608),
    ("cuda-aware", 4, 8192, 8192, 8192, "float32", 1, 4, "summa", "2x2", 2048, 1, True, "common", 0.0135466),
    ("cuda-aware", 4, 8192, 8192, 8192, "float64", 2, 4, "summa", "2x2", 2048, 1, True, "common", 0.0123513),
    ("cuda-aware", 8, 10007, 6001, 3001, "float64", 2, 8, "summa", "4x2", 750, 1, True, "common", 0.0110221),
    ("cuda-aware", 8, 16384, 16384, 16384, "float64", 4, 8, "summa", "4x2", 2048, 1, True, "common", 0.0988962),
    ("cuda-aware", 8, 8192, 8192, 8192, "float64", 1, 8, "summa", "4x2", 2048, 1, True, "common", 0.0176251),
    ("cuda-aware", 8, 8192, 8192, 8192, "float64", 2, 8, "summa", "4x2", 2048, 1, True, "common", 0.0156727),
    ("system", 2, 12007, 9001, 6003, "float32", None, 2, "summa", "2x1", 3001, 1, False, "auto", 0.0136509),
    ("system", 2, 16384, 16384, 16384, "float16", None, 2, "summa", "2x1", 8192, 1, False, "auto", 0.00608591),
    ("system", 2, 16384, 16384, 16384, "float64", None, 2, "summa", "1x2", 8192, 1, False, "auto", 0.0731559),
    ("system", 2, 16384, 16384, 16384, "tf32", None, 2, "summa", "2x1", 8192, 2, False, "auto", 0.0116475),
    ("system", 2, 8192, 8192, 8192, "float64", 1, 2, "summa", "2x1", 4096, 1, False, "common", 0.0965302),
    ("system", 2, 8192, 8192, 8192, "float64", 1, 2, "summa", "2x1", 4096, 1, False, "common", 0.105216),
    ("system", 2, 8192, 8192, 8192, "float64", 1, 2, "summa", "2x1", 4096, 1, False, "common", 0.109054),
    ("system", 2, 8192, 8192, 8192, "float64", 1, 2, "summa", "2x1", 4096, 1, False, "common", 0.109507),
    ("system", 2, 8192, 8192, 8192, "float64", 1, 2, "summa", "2x1", 4096, 1, False, "common", 0.115077),
    ("system", 2, 8192, 8192, 8192, "float64", None, 2, "summa", "1x2", 4096, 1, False, "auto", 0.00990627),
    ("system", 4, 4096, 4096, 4096, "float64", 1, 4, "summa", "2x2", 2048, 1, False, "common", 0.0290634),
    ("system", 4, 4096, 4096, 4096, "float64", 1, 4, "summa", "2x2", 2048, 1, False, "common", 0.0291721),
    ("system", 4, 4096, 4096, 4096, "float64", 1, 4, "summa", "2x2", 2048, 1, False, "common", 0.0294743),
    ("system", 4, 4096, 4096, 4096, "float64", 1, 4, "summa", "2x2", 2048, 1, False, "common", 0.0327045),
    ("system", 4, 4096, 4096, 4096, "float64", 1, 4, "summa", "2x2", 2048, 1, False, "common", 0.0333193),
    ("system", 4, 8192, 8192, 8192, "float64", 2, 4, "summa", "2x2", 2048, 1, False, "common", 0.0553619),
    ("system", 4, 8192, 8192, 8192, "float64", 2, 4, "summa", "2x2", 2048, 1, False, "common", 0.0571974),
    ("system", 4, 8192, 8192, 8192, "float64", 2, 4, "summa", "2x2", 2048, 1, False, "common", 0.0591446),
    ("system", 4, 8192, 8192, 8192, "float64", 2, 4, "summa", "2x2", 2048, 1, False, "common", 0.0613938),
    ("system", 4, 8192, 8192, 8192, "float64", 2, 4, "summa", "2x2", 2048, 1, False, "common", 0.0624314),
    ("system", 4, 8192, 8192, 8192, "float64", None, 4, "summa", "1x4", 2048, 1, False, "auto", 0.0112133),
    ("system", 8, 16384, 16384, 16384, "float64", None, 8, "summa", "1x8", 2048, 1, False, "auto", 0.0852522),
    ("system", 8, 4096, 4096, 4096, "float64", 2, 8, "summa", "4x2", 1024, 1, False, "common", 0.0358858),
    ("system", 8, 4096, 4096, 4096, "float64", 2, 8, "summa", "4x2", 1024, 1, False, "common", 0.0360138),
    ("system", 8, 4096, 4096, 4096, "float64", 2, 8, "summa", "4x2", 1024, 1, False, "common", 0.0377222),
    ("system", 8, 4096, 4096, 4096, "float64", 2, 8, "summa", "4x2", 1024, 1, False, "common", 0.038561),
    ("system", 8, 4096, 4096, 4096, "float64", 2, 8, "summa", "4x2", 1024, 1, False, "common", 0.0385661),
    ("system", 8, 6001, 4099, 3001, "float32", 1, 8, "summa", "4x2", 750, 1, False, "common", 0.0174111),
    ("system", 8, 6001, 4099, 3001, "float32", 1, 8, "summa", "4x2", 750, 1, False, "common", 0.0182635),
    ("system", 8, 6001, 4099, 3001, "float32", 1, 8, "summa", "4x2", 750, 1, False, "common", 0.0187445),
    ("system", 8, 6001, 4099, 3001, "float32", 1, 8, "summa", "4x2", 750, 1, False, "common", 0.0190294),
    ("system", 8, 6001, 4099, 3001, "float32", 1, 8, "summa", "4x2", 750, 1, False, "common", 0.0191741),
    ("system", 8, 8192, 8192, 8192, "float64", 4, 8, "summa", "4x2", 2048, 1, False, "common", 0.0566163),
    ("system", 8, 8192, 8192, 8192, "float64", 4, 8, "summa", "4x2", 2048, 1, False, "common", 0.0621181),
    ("system", 8, 8192, 8192, 8192, "float64", 4, 8, "summa", "4x2", 2048, 1, False, "common", 0.0629541),
    ("system", 8, 8192, 8192, 8192, "float64", 4, 8, "summa", "4x2", 2048, 1, False, "common", 0.0640279),
    ("system", 8, 8192, 8192, 8192, "float64", 4, 8, "summa", "4x2", 2048, 1, False, "common", 0.0714272),
]
#: Its cases outside 15 % with those descriptions (docs/scaling.md section 1, "The fourteenth call"): three staged
#: medians of the system section, whose host moved a staged panel slower than its `bench transport` said (-19.0,
#: -21.6 and -19.6 %; with each round's links -15.2, -13.9 and -11.9 %), 2.5d:4 at 10007x6001x6007 on 8 ranks
#: (-17.0 %; -14.4 % with each round's links).  Below 35 % until fixed.  (The CUDA-aware uneven case at 8 ranks,
#: rpn 2, -19.8 % with ``shared_mpi_us`` at 67 µs, is -14.1 % with it refitted on the calls before: 80 µs.)
OPEN_FOURTEENTH_1130 = {("system", 2, 8192, "float64", 1, "summa"), ("system", 8, 4096, "float64", 2, "summa"),
                        ("system", 8, 8192, "float64", 4, "summa"), ("2.5d", 8, 10007, "float64", 4, "2.5d:4")}


#: The fifteenth call (each section in its own call: system with five runs of each staged case, then check.sh system,
#: then cuda-aware with its four cases of 4 ranks per GPU in rounds, then 2.5d with three runs; the links measured
#: again before every round), against the descriptions measured at each section's start
#: (data/machines/h200x2-2026-11-30-system-m.json, -cuda-aware-m.json, -system-n.json).
MEASURED_FIFTEENTH_1130 = [
    ("2.5d", 4, 10007, 6001, 6007, "float64", 2, 4, "2.5d:2", None, 1501, 1, False, "common", 0.0325068),
    ("2.5d", 4, 10007, 6001, 6007, "float64", 2, 4, "2.5d:2", None, 1501, 1, False, "common", 0.0332013),
    ("2.5d", 4, 10007, 6001, 6007, "float64", 2, 4, "2.5d:2", None, 1501, 1, False, "common", 0.0337563),
    ("2.5d", 4, 10007, 6001, 6007, "float64", 2, 4, "summa", "2x2", 1502, 1, False, "common", 0.0286837),
    ("2.5d", 4, 10007, 6001, 6007, "float64", 2, 4, "summa", "2x2", 1502, 1, False, "common", 0.029853),
    ("2.5d", 4, 10007, 6001, 6007, "float64", 2, 4, "summa", "2x2", 1502, 1, False, "common", 0.0409602),
    ("2.5d", 4, 8192, 8192, 8192, "float64", 2, 4, "2.5d:2", None, 2048, 1, False, "common", 0.055496),
    ("2.5d", 4, 8192, 8192, 8192, "float64", 2, 4, "2.5d:2", None, 2048, 1, False, "common", 0.0565674),
    ("2.5d", 4, 8192, 8192, 8192, "float64", 2, 4, "2.5d:2", None, 2048, 1, False, "common", 0.0594567),
    ("2.5d", 4, 8192, 8192, 8192, "float64", 2, 4, "summa", "2x2", 2048, 1, False, "common", 0.0515477),
    ("2.5d", 4, 8192, 8192, 8192, "float64", 2, 4, "summa", "2x2", 2048, 1, False, "common", 0.0555311),
    ("2.5d", 4, 8192, 8192, 8192, "float64", 2, 4, "summa", "2x2", 2048, 1, False, "common", 0.0558512),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "2.5d:2", None, 1501, 1, False, "common", 0.023628),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "2.5d:2", None, 1501, 1, False, "common", 0.0239549),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "2.5d:2", None, 1501, 1, False, "common", 0.0248395),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "2.5d:4", None, 750, 1, False, "common", 0.0227183),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "2.5d:4", None, 750, 1, False, "common", 0.023127),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "2.5d:4", None, 750, 1, False, "common", 0.0243475),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "summa", "4x2", 1501, 1, False, "common", 0.0359259),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "summa", "4x2", 1501, 1, False, "common", 0.0424299),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "summa", "4x2", 1501, 1, False, "common", 0.0424711),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "2.5d:2", None, 2048, 1, False, "common", 0.0312534),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "2.5d:2", None, 2048, 1, False, "common", 0.034401),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "2.5d:2", None, 2048, 1, False, "common", 0.0370063),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "2.5d:4", None, 1024, 1, False, "common", 0.0353196),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "2.5d:4", None, 1024, 1, False, "common", 0.0370118),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "2.5d:4", None, 1024, 1, False, "common", 0.0381759),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "summa", "4x2", 2048, 1, False, "common", 0.0558233),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "summa", "4x2", 2048, 1, False, "common", 0.058678),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "summa", "4x2", 2048, 1, False, "common", 0.0610763),
    ("cuda-aware", 2, 16384, 16384, 16384, "float16", 1, 2, "summa", "2x1", 8192, 1, True, "common", 0.00652639),
    ("cuda-aware", 2, 16384, 16384, 16384, "float64", 1, 2, "summa", "2x1", 8192, 1, True, "common", 0.086951),
    ("cuda-aware", 2, 8192, 8192, 8192, "float64", 1, 2, "summa", "2x1", 4096, 1, True, "common", 0.0104684),
    ("cuda-aware", 4, 8192, 8192, 8192, "float32", 1, 4, "summa", "2x2", 2048, 1, True, "common", 0.0130254),
    ("cuda-aware", 4, 8192, 8192, 8192, "float64", 2, 4, "summa", "2x2", 2048, 1, True, "common", 0.0127174),
    ("cuda-aware", 8, 10007, 6001, 3001, "float64", 2, 8, "summa", "4x2", 750, 1, True, "common", 0.00988364),
    ("cuda-aware", 8, 10007, 6001, 3001, "float64", 2, 8, "summa", "4x2", 750, 1, True, "common", 0.0103972),
    ("cuda-aware", 8, 10007, 6001, 3001, "float64", 2, 8, "summa", "4x2", 750, 1, True, "common", 0.0113244),
    ("cuda-aware", 8, 16384, 16384, 16384, "float64", 4, 8, "summa", "4x2", 2048, 1, True, "common", 0.10177),
    ("cuda-aware", 8, 16384, 16384, 16384, "float64", 4, 8, "summa", "4x2", 2048, 1, True, "common", 0.103348),
    ("cuda-aware", 8, 16384, 16384, 16384, "float64", 4, 8, "summa", "4x2", 2048, 1, True, "common", 0.103522),
    ("cuda-aware", 8, 8192, 8192, 8192, "float64", 1, 8, "summa", "4x2", 2048, 1, True, "common", 0.016915),
    ("cuda-aware", 8, 8192, 8192, 8192, "float64", 1, 8, "summa", "4x2", 2048, 1, True, "common", 0.0175409),
    ("cuda-aware", 8, 8192, 8192, 8192, "float64", 1, 8, "summa", "4x2", 2048, 1, True, "common", 0.0183879),
    ("cuda-aware", 8, 8192, 8192, 8192, "float64", 2, 8, "summa", "4x2", 2048, 1, True, "common", 0.0161932),
    ("cuda-aware", 8, 8192, 8192, 8192, "float64", 2, 8, "summa", "4x2", 2048, 1, True, "common", 0.0162822),
    ("cuda-aware", 8, 8192, 8192, 8192, "float64", 2, 8, "summa", "4x2", 2048, 1, True, "common", 0.0166532),
    ("system", 2, 12007, 9001, 6003, "float32", None, 2, "summa", "2x1", 3001, 1, False, "auto", 0.0136038),
    ("system", 2, 16384, 16384, 16384, "float16", None, 2, "summa", "2x1", 8192, 1, False, "auto", 0.00630089),
    ("system", 2, 16384, 16384, 16384, "float64", None, 2, "summa", "1x2", 8192, 1, False, "auto", 0.0754553),
    ("system", 2, 16384, 16384, 16384, "tf32", None, 2, "summa", "2x1", 8192, 2, False, "auto", 0.0120948),
    ("system", 2, 8192, 8192, 8192, "float64", 1, 2, "summa", "2x1", 4096, 1, False, "common", 0.0664864),
    ("system", 2, 8192, 8192, 8192, "float64", 1, 2, "summa", "2x1", 4096, 1, False, "common", 0.0682225),
    ("system", 2, 8192, 8192, 8192, "float64", 1, 2, "summa", "2x1", 4096, 1, False, "common", 0.0691616),
    ("system", 2, 8192, 8192, 8192, "float64", 1, 2, "summa", "2x1", 4096, 1, False, "common", 0.0771627),
    ("system", 2, 8192, 8192, 8192, "float64", 1, 2, "summa", "2x1", 4096, 1, False, "common", 0.0844699),
    ("system", 2, 8192, 8192, 8192, "float64", None, 2, "summa", "1x2", 4096, 1, False, "auto", 0.0101923),
    ("system", 4, 4096, 4096, 4096, "float64", 1, 4, "summa", "2x2", 2048, 1, False, "common", 0.0245937),
    ("system", 4, 4096, 4096, 4096, "float64", 1, 4, "summa", "2x2", 2048, 1, False, "common", 0.0246724),
    ("system", 4, 4096, 4096, 4096, "float64", 1, 4, "summa", "2x2", 2048, 1, False, "common", 0.0253913),
    ("system", 4, 4096, 4096, 4096, "float64", 1, 4, "summa", "2x2", 2048, 1, False, "common", 0.0255114),
    ("system", 4, 4096, 4096, 4096, "float64", 1, 4, "summa", "2x2", 2048, 1, False, "common", 0.0271616),
    ("system", 4, 8192, 8192, 8192, "float64", 2, 4, "summa", "2x2", 2048, 1, False, "common", 0.0422889),
    ("system", 4, 8192, 8192, 8192, "float64", 2, 4, "summa", "2x2", 2048, 1, False, "common", 0.0441564),
    ("system", 4, 8192, 8192, 8192, "float64", 2, 4, "summa", "2x2", 2048, 1, False, "common", 0.0482238),
    ("system", 4, 8192, 8192, 8192, "float64", 2, 4, "summa", "2x2", 2048, 1, False, "common", 0.0486629),
    ("system", 4, 8192, 8192, 8192, "float64", 2, 4, "summa", "2x2", 2048, 1, False, "common", 0.0574729),
    ("system", 4, 8192, 8192, 8192, "float64", None, 4, "summa", "1x4", 2048, 1, False, "auto", 0.0112608),
    ("system", 8, 16384, 16384, 16384, "float64", None, 8, "summa", "1x8", 2048, 1, False, "auto", 0.0874049),
    ("system", 8, 4096, 4096, 4096, "float64", 2, 8, "summa", "4x2", 1024, 1, False, "common", 0.0263795),
    ("system", 8, 4096, 4096, 4096, "float64", 2, 8, "summa", "4x2", 1024, 1, False, "common", 0.0281596),
    ("system", 8, 4096, 4096, 4096, "float64", 2, 8, "summa", "4x2", 1024, 1, False, "common", 0.0284746),
    ("system", 8, 4096, 4096, 4096, "float64", 2, 8, "summa", "4x2", 1024, 1, False, "common", 0.0288002),
    ("system", 8, 4096, 4096, 4096, "float64", 2, 8, "summa", "4x2", 1024, 1, False, "common", 0.0341365),
    ("system", 8, 6001, 4099, 3001, "float32", 1, 8, "summa", "4x2", 750, 1, False, "common", 0.0149348),
    ("system", 8, 6001, 4099, 3001, "float32", 1, 8, "summa", "4x2", 750, 1, False, "common", 0.0155295),
    ("system", 8, 6001, 4099, 3001, "float32", 1, 8, "summa", "4x2", 750, 1, False, "common", 0.0156651),
    ("system", 8, 6001, 4099, 3001, "float32", 1, 8, "summa", "4x2", 750, 1, False, "common", 0.0158659),
    ("system", 8, 6001, 4099, 3001, "float32", 1, 8, "summa", "4x2", 750, 1, False, "common", 0.0174468),
    ("system", 8, 8192, 8192, 8192, "float64", 4, 8, "summa", "4x2", 2048, 1, False, "common", 0.0492234),
    ("system", 8, 8192, 8192, 8192, "float64", 4, 8, "summa", "4x2", 2048, 1, False, "common", 0.0501399),
    ("system", 8, 8192, 8192, 8192, "float64", 4, 8, "summa", "4x2", 2048, 1, False, "common", 0.0502859),
    ("system", 8, 8192, 8192, 8192, "float64", 4, 8, "summa", "4x2", 2048, 1, False, "common", 0.0508844),
    ("system", 8, 8192, 8192, 8192, "float64", 4, 8, "summa", "4x2", 2048, 1, False, "common", 0.0533182),
]
#: Its cases outside 15 % with those descriptions (docs/scaling.md section 1, "The fifteenth call"): the staged
#: 8192^3 at 2 ranks, rpn 1, +23.9 % (+15.5 % with each round's links; the fourteenth call's host had it at -19.0 %),
#: and summa at 10007x6001x6007 on 8 ranks, rpn 4, -17.7 % (-18.6 %), the case the tenth and eleventh calls left
#: open.  Below 35 % until fixed.
OPEN_FIFTEENTH_1130 = {("system", 2, 8192, "float64", 1, "summa"), ("2.5d", 8, 10007, "float64", 4, "summa")}


#: The sixteenth call, on the tree whose default panel cuts the deepest k range between block edges (no
#: one-column steps) and whose relay leaders wait for their node peers before pulling into a relay slot: a
#: section of its own ("panel": summa 10007x6001x6007 at 8 ranks, rpn 4, with --panel 1501 (the old plan's
#: one-column steps) and the default 1502, and 12007x9001x6003 float32 at 2 ranks with --panel 3001 and the default
#: 3002, in four rounds), then check.sh system and cuda-aware, then the 2.5d section with three runs and the system
#: section with three runs of each staged case; the links measured again before every round.  Against the
#: descriptions measured at each section's start (data/machines/h200x2-2026-11-30-system-o.json, -system-p.json,
#: -system-q.json).  No case outside 15 %.
MEASURED_SIXTEENTH_1130 = [
    ("panel", 2, 12007, 9001, 6003, "float32", None, 2, "summa", "2x1", 3001, 1, False, "auto", 0.0134585),
    ("panel", 2, 12007, 9001, 6003, "float32", None, 2, "summa", "2x1", 3001, 1, False, "auto", 0.0134592),
    ("panel", 2, 12007, 9001, 6003, "float32", None, 2, "summa", "2x1", 3001, 1, False, "auto", 0.0134604),
    ("panel", 2, 12007, 9001, 6003, "float32", None, 2, "summa", "2x1", 3001, 1, False, "auto", 0.0135574),
    ("panel", 2, 12007, 9001, 6003, "float32", None, 2, "summa", "2x1", 3002, 1, False, "auto", 0.0130334),
    ("panel", 2, 12007, 9001, 6003, "float32", None, 2, "summa", "2x1", 3002, 1, False, "auto", 0.0130895),
    ("panel", 2, 12007, 9001, 6003, "float32", None, 2, "summa", "2x1", 3002, 1, False, "auto", 0.0131755),
    ("panel", 2, 12007, 9001, 6003, "float32", None, 2, "summa", "2x1", 3002, 1, False, "auto", 0.0132035),
    ("panel", 8, 10007, 6001, 6007, "float64", 4, 8, "summa", "4x2", 1501, 1, False, "common", 0.0313217),
    ("panel", 8, 10007, 6001, 6007, "float64", 4, 8, "summa", "4x2", 1501, 1, False, "common", 0.0330907),
    ("panel", 8, 10007, 6001, 6007, "float64", 4, 8, "summa", "4x2", 1501, 1, False, "common", 0.0336189),
    ("panel", 8, 10007, 6001, 6007, "float64", 4, 8, "summa", "4x2", 1501, 1, False, "common", 0.0341234),
    ("panel", 8, 10007, 6001, 6007, "float64", 4, 8, "summa", "4x2", 1502, 1, False, "common", 0.0246445),
    ("panel", 8, 10007, 6001, 6007, "float64", 4, 8, "summa", "4x2", 1502, 1, False, "common", 0.0256883),
    ("panel", 8, 10007, 6001, 6007, "float64", 4, 8, "summa", "4x2", 1502, 1, False, "common", 0.0272192),
    ("panel", 8, 10007, 6001, 6007, "float64", 4, 8, "summa", "4x2", 1502, 1, False, "common", 0.0313333),
    ("2.5d", 4, 10007, 6001, 6007, "float64", 2, 4, "2.5d:2", None, 1502, 1, False, "common", 0.023236),
    ("2.5d", 4, 10007, 6001, 6007, "float64", 2, 4, "2.5d:2", None, 1502, 1, False, "common", 0.0262636),
    ("2.5d", 4, 10007, 6001, 6007, "float64", 2, 4, "2.5d:2", None, 1502, 1, False, "common", 0.0311137),
    ("2.5d", 4, 10007, 6001, 6007, "float64", 2, 4, "summa", "2x2", 1502, 1, False, "common", 0.0204932),
    ("2.5d", 4, 10007, 6001, 6007, "float64", 2, 4, "summa", "2x2", 1502, 1, False, "common", 0.0268213),
    ("2.5d", 4, 10007, 6001, 6007, "float64", 2, 4, "summa", "2x2", 1502, 1, False, "common", 0.0279943),
    ("2.5d", 4, 8192, 8192, 8192, "float64", 2, 4, "2.5d:2", None, 2048, 1, False, "common", 0.0428464),
    ("2.5d", 4, 8192, 8192, 8192, "float64", 2, 4, "2.5d:2", None, 2048, 1, False, "common", 0.0478653),
    ("2.5d", 4, 8192, 8192, 8192, "float64", 2, 4, "2.5d:2", None, 2048, 1, False, "common", 0.0506029),
    ("2.5d", 4, 8192, 8192, 8192, "float64", 2, 4, "summa", "2x2", 2048, 1, False, "common", 0.0409256),
    ("2.5d", 4, 8192, 8192, 8192, "float64", 2, 4, "summa", "2x2", 2048, 1, False, "common", 0.0438418),
    ("2.5d", 4, 8192, 8192, 8192, "float64", 2, 4, "summa", "2x2", 2048, 1, False, "common", 0.047128),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "2.5d:2", None, 1502, 1, False, "common", 0.0186203),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "2.5d:2", None, 1502, 1, False, "common", 0.0200366),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "2.5d:2", None, 1502, 1, False, "common", 0.020621),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "2.5d:4", None, 751, 1, False, "common", 0.0184087),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "2.5d:4", None, 751, 1, False, "common", 0.0211865),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "2.5d:4", None, 751, 1, False, "common", 0.0221458),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "summa", "4x2", 1502, 1, False, "common", 0.0242007),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "summa", "4x2", 1502, 1, False, "common", 0.0289586),
    ("2.5d", 8, 10007, 6001, 6007, "float64", 4, 8, "summa", "4x2", 1502, 1, False, "common", 0.0329227),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "2.5d:2", None, 2048, 1, False, "common", 0.0277198),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "2.5d:2", None, 2048, 1, False, "common", 0.03084),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "2.5d:2", None, 2048, 1, False, "common", 0.0359714),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "2.5d:4", None, 1024, 1, False, "common", 0.0285024),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "2.5d:4", None, 1024, 1, False, "common", 0.0330912),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "2.5d:4", None, 1024, 1, False, "common", 0.033181),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "summa", "4x2", 2048, 1, False, "common", 0.0430399),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "summa", "4x2", 2048, 1, False, "common", 0.0503942),
    ("2.5d", 8, 8192, 8192, 8192, "float64", 4, 8, "summa", "4x2", 2048, 1, False, "common", 0.0507474),
    ("system", 2, 12007, 9001, 6003, "float32", None, 2, "summa", "2x1", 3002, 1, False, "auto", 0.0131702),
    ("system", 2, 16384, 16384, 16384, "float16", None, 2, "summa", "2x1", 8192, 1, False, "auto", 0.00622221),
    ("system", 2, 16384, 16384, 16384, "float64", None, 2, "summa", "1x2", 8192, 1, False, "auto", 0.0755362),
    ("system", 2, 16384, 16384, 16384, "tf32", None, 2, "summa", "2x1", 8192, 2, False, "auto", 0.0118986),
    ("system", 2, 8192, 8192, 8192, "float64", 1, 2, "summa", "2x1", 4096, 1, False, "common", 0.0590417),
    ("system", 2, 8192, 8192, 8192, "float64", 1, 2, "summa", "2x1", 4096, 1, False, "common", 0.0784003),
    ("system", 2, 8192, 8192, 8192, "float64", 1, 2, "summa", "2x1", 4096, 1, False, "common", 0.0802517),
    ("system", 2, 8192, 8192, 8192, "float64", None, 2, "summa", "1x2", 4096, 1, False, "auto", 0.0101048),
    ("system", 4, 4096, 4096, 4096, "float64", 1, 4, "summa", "2x2", 2048, 1, False, "common", 0.0196188),
    ("system", 4, 4096, 4096, 4096, "float64", 1, 4, "summa", "2x2", 2048, 1, False, "common", 0.0214588),
    ("system", 4, 4096, 4096, 4096, "float64", 1, 4, "summa", "2x2", 2048, 1, False, "common", 0.0225468),
    ("system", 4, 8192, 8192, 8192, "float64", 2, 4, "summa", "2x2", 2048, 1, False, "common", 0.0345447),
    ("system", 4, 8192, 8192, 8192, "float64", 2, 4, "summa", "2x2", 2048, 1, False, "common", 0.0432871),
    ("system", 4, 8192, 8192, 8192, "float64", 2, 4, "summa", "2x2", 2048, 1, False, "common", 0.0462124),
    ("system", 4, 8192, 8192, 8192, "float64", None, 4, "summa", "1x4", 2048, 1, False, "auto", 0.0112235),
    ("system", 8, 16384, 16384, 16384, "float64", None, 8, "summa", "1x8", 2048, 1, False, "auto", 0.0873435),
    ("system", 8, 4096, 4096, 4096, "float64", 2, 8, "summa", "4x2", 1024, 1, False, "common", 0.0218712),
    ("system", 8, 4096, 4096, 4096, "float64", 2, 8, "summa", "4x2", 1024, 1, False, "common", 0.0245409),
    ("system", 8, 4096, 4096, 4096, "float64", 2, 8, "summa", "4x2", 1024, 1, False, "common", 0.0246862),
    ("system", 8, 6001, 4099, 3001, "float32", 1, 8, "summa", "4x2", 751, 1, False, "common", 0.0135996),
    ("system", 8, 6001, 4099, 3001, "float32", 1, 8, "summa", "4x2", 751, 1, False, "common", 0.0144924),
    ("system", 8, 6001, 4099, 3001, "float32", 1, 8, "summa", "4x2", 751, 1, False, "common", 0.0171765),
    ("system", 8, 8192, 8192, 8192, "float64", 4, 8, "summa", "4x2", 2048, 1, False, "common", 0.0430249),
    ("system", 8, 8192, 8192, 8192, "float64", 4, 8, "summa", "4x2", 2048, 1, False, "common", 0.0485251),
    ("system", 8, 8192, 8192, 8192, "float64", 4, 8, "summa", "4x2", 2048, 1, False, "common", 0.0507948),
]

def _call_cases(rows):
    cases = {}
    for row in rows:
        cases.setdefault(row[:-1], []).append(row[-1])
    return cases


def _predicted_call(case, kind):
    section, ranks, m, n, k, dtype, rpn, local, algo, grid, panel, prefetch, aware, order = case
    return predict(Problem(m, n, k, dtype), ranks, _machine_1130(kind), ranks_per_node=rpn, ranks_per_host=local,
                   grid=model._parse_grid(grid) if grid else None, panel=panel, prefetch=prefetch, algo=algo,
                   cuda_aware=aware, step_order=order).seconds


_CALLS = {"eighth": (MEASURED_EIGHTH_1130, OPEN_EIGHTH_1130), "ninth": (MEASURED_NINTH_1130, set()),
          "tenth": (MEASURED_TENTH_1130, OPEN_TENTH_1130), "eleventh": (MEASURED_ELEVENTH_1130, OPEN_ELEVENTH_1130),
          "twelfth": (MEASURED_TWELFTH_1130, set()), "thirteenth": (MEASURED_THIRTEENTH_1130, set()),
          "fourteenth": (MEASURED_FOURTEENTH_1130, OPEN_FOURTEENTH_1130),
          "fifteenth": (MEASURED_FIFTEENTH_1130, OPEN_FIFTEENTH_1130), "sixteenth": (MEASURED_SIXTEENTH_1130, set())}


#: The calls that ran each section in a call of its own, with a description of its own: by section.
_SECTION_KINDS = {"fourteenth": {"system": "system-k", "2.5d": "system-l", "cuda-aware": "cuda-aware-k"},
                  "fifteenth": {"system": "system-m", "2.5d": "system-n", "cuda-aware": "cuda-aware-m"},
                  "sixteenth": {"panel": "system-o", "2.5d": "system-p", "system": "system-q"}}


def _call_kind(case, call):
    if call == "ninth" and case[0] == "cuda-aware":
        return "cuda-aware-f"
    if call in _SECTION_KINDS:
        return _SECTION_KINDS[call][case[0]]
    return {"eighth": "system-e", "ninth": "system-f", "tenth": "system-g", "eleventh": "system-h",
            "twelfth": "system-i", "thirteenth": "system-j"}[call]


@pytest.mark.parametrize("call, case", [(call, c) for call in _CALLS for c in _call_cases(_CALLS[call][0])], ids=str)
def test_latest_calls_within_15_percent(call, case):
    """Every case of the latest calls (the eighth to sixteenth): the median of its runs within 15 % (the open cases
    below 35 %), against the description the call measured at its start."""
    rows, open_cases = _CALLS[call]
    runs = _call_cases(rows)[case]
    err = abs(_predicted_call(case, _call_kind(case, call)) / float(np.median(runs)) - 1)
    key = (case[0], case[1], case[2], case[5], case[6], case[8])
    _within_15_percent_or_open(err, key in open_cases, (call, case, runs))


#: Speed-ups outside 15 %: the eleventh call's 2.5d:2 and 2.5d:4 over summa at 10007x6001x6007, 8 ranks, rpn 4
#: (measured 1.92 and 1.89, predicted 1.59, -17.2 and -15.9 %; their summa median is the case the tenth call
#: left open).  Below 35 % until fixed.
OPEN_GAINS_1130 = {("eleventh", 8, 10007, "2.5d:2"), ("eleventh", 8, 10007, "2.5d:4")}


@pytest.mark.parametrize("call", [call for call in _CALLS if any(row[0] == "2.5d" for row in _CALLS[call][0])])
def test_latest_2p5d_gains_within_15_percent(call):
    """2.5D over summa on the emulated slow network, medians of the 2.5d section: the predicted speed-up
    within 15 % of the measured one (the tenth call's 2.5d:2 at 10007x6001x6007, 4 ranks: +14.99 %), the open
    ones (``OPEN_GAINS_1130``) below 35 %."""
    rows = _CALLS[call][0]
    cases = {c: r for c, r in _call_cases(rows).items() if c[0] == "2.5d"}
    summa = {c[1:8]: c for c in cases if c[8] == "summa"}
    pairs = [(c, summa[c[1:8]]) for c in cases if c[8] != "summa"]
    assert len(pairs) == 6
    for case, base in pairs:
        measured = float(np.median(cases[base])) / float(np.median(cases[case]))
        predicted = _predicted_call(base, _call_kind(base, call)) / _predicted_call(case, _call_kind(case, call))
        _within_15_percent_or_open(abs(predicted / measured - 1), (call, case[1], case[2], case[8]) in OPEN_GAINS_1130,
                                   (call, case, measured, predicted))


def test_a_shared_gpu_runs_its_ranks_gemms_one_after_the_other():
    """GEMMs of ranks that share a GPU and do not meet in time lose nothing; those that meet wait in turn."""
    free = np.zeros(2)
    devices = np.array([0, 0, 1])
    end = model._device_queue(np.array([0.0, 5.0, 0.0]), np.array([1.0, 1.0, 1.0]), devices, free)
    assert end.tolist() == [1.0, 6.0, 1.0]
    end = model._device_queue(np.array([10.0, 10.5, 10.0]), np.array([1.0, 1.0, 2.0]), devices, free)
    assert end.tolist() == [11.0, 12.0, 12.0]
    assert free.tolist() == [12.0, 12.0]
    # GEMM-bound, 4 ranks on 2 GPUs: each GPU still does half the flops at the shared rate
    machine = builtin("h200x2")
    prob = Problem(16384, 16384, 16384)
    half = prob.flops / 2 / (machine.curve("float64").tflops * 1e12)
    assert predict(prob, 4, machine, ranks_per_host=4).seconds > half / machine.shared_device_efficiency * 0.95


def test_a_copy_waits_only_for_the_contexts_with_a_gemm_pending():
    device = np.array([0, 0, 0, 1])
    gstart = np.array([[np.nan], [0.0], [20.0], [0.0]])
    gend = np.array([[np.nan], [10.0], [30.0], [10.0]])
    busy = model._busy_others(device, gstart, gend, np.array([0.0, 0, 0, 0]), np.array([10.0, 10, 10, 10]))
    assert busy.tolist() == [1.0, 0.0, 1.0, 0.0]  # rank 3 has its device alone
    busy = model._busy_others(device, gstart, gend, np.full(4, 5.0), np.full(4, 25.0))
    assert busy[0] == pytest.approx(0.5)


def test_a_staged_broadcast_among_four_is_a_chain(monkeypatch):
    """Open MPI's broadcast of 1 MiB or more among 4 to 7 ranks: one hop after the other, each member leaving
    once it has passed the message on; a product whose staged broadcasts have 4 members takes longer for it."""
    from types import SimpleNamespace

    ro = SimpleNamespace(comm=np.zeros(4, dtype=int),
                         role=np.array([model._LEADER, model._SELF, model._LEADER, model._LEADER]))
    chain, whole = np.ones(4, dtype=bool), 1 << 40
    ends = model._chain_ends(ro, chain, np.zeros(4), np.full(4, 1e9), np.ones(4), 0.0, whole)
    assert ends.tolist() == [2.0, 1.0, 3.0, 3.0]  # root (rank 1) after one hop, the last member after three
    ends = model._chain_ends(ro, chain, np.array([0.0, 0.0, 5.0, 0.0]), np.full(4, 1e9), np.ones(4), 0.0, whole)
    assert ends.tolist() == [6.0, 1.0, 7.0, 7.0]  # a member that comes late holds up the rest of the chain
    # in chunks of a quarter, the later chunks follow the first down the chain: 3 hops of a chunk, then 3 chunks
    ends = model._chain_ends(ro, chain, np.zeros(4), np.full(4, 1e9), np.ones(4), 0.0, 250_000_000)
    assert ends.tolist() == pytest.approx([1.25, 1.0, 1.5, 1.5])
    prob = Problem(4096, 4096, 4096)
    kw = dict(ranks_per_node=2, ranks_per_host=8, cuda_aware=False)
    machine = _machine_1130("system-f")  # the ninth call's description: 4096^3 there ran 0.0368 s, 0.0313 predicted
    chained = predict(prob, 8, machine, **kw).seconds
    monkeypatch.setattr(model, "STAGED_CHAIN_MEMBERS", (0, 0))
    assert chained > 1.1 * predict(prob, 8, machine, **kw).seconds


def test_staged_rate_by_size_and_contention_from_the_transport_file(tmp_path):
    """``bench transport``'s staged rows by size and its rows of pairs at once give the description's
    rate by size and contention; the model then slows k transfers at once by 1 + c (k - 1)."""
    from hpcmm import h5io

    links = tmp_path / "links.h5"
    sizes = (1 << 22, 1 << 24, 1 << 26)
    rate = {1 << 22: 6.0, 1 << 24: 8.0, 1 << 26: 7.0}
    rows = [{"src": 0, "dst": dst, "path": "staged", "bytes": b, "seconds": 1e-4 + b / (rate[b] * 1e9), "gbps": 0.0}
            for dst in (1, 2) for b in sizes]
    rows += [{"src": 0, "dst": 1, "path": f"staged-x{k}", "bytes": b,
              "seconds": 1e-4 + b * (1 + 0.2 * (k - 1)) / (rate[b] * 1e9), "gbps": 0.0} for k in (2, 3) for b in sizes]
    h5io.write_table_file(str(links), False, "bench-transport", "transport", rows, {"hpcmm": "test"})
    _, staged, _ = model._read_transport(str(links))
    by_mib, contention = model.fit_staged_by_size(staged["single"], staged["concurrent"], 1e6, 1 << 40, 100.0)
    assert [mib for mib, _ in by_mib] == [4.0, 16.0, 64.0]
    assert [g for _, g in by_mib] == pytest.approx([6.0, 8.0, 7.0], rel=1e-3)
    assert contention == pytest.approx(0.2, rel=1e-3)
    m = model.Machine("t", staged_gbps_by_mib=by_mib, staged_contention=contention, staged_host_gbps=1e3,
                      staged_chunk_bytes=1 << 40)
    assert model.staged_rate(1 << 24, m, concurrent=3) == pytest.approx(8.0 / 1.4, rel=1e-3)
    # the host MPI moves a chunk at a time: a message of many chunks moves at a chunk's rate
    assert model.staged_rate(1 << 26, m.replace(staged_chunk_bytes=1 << 24)) == pytest.approx(8.0, rel=1e-3)
    with pytest.raises(InputError, match="staged_contention"):
        m.replace(staged_contention=-0.1)


def test_the_2p5d_layers_of_one_host_share_its_staged_path(monkeypatch):
    """On one host the c layers' staged transfers meet: each layer is simulated with 1 + (c - 1) x its duty
    transfers at once; layers on hosts of their own (``hosts`` 0) meet none."""
    seen = []
    simulate = model._simulate

    def spy(*args, **kw):
        seen.append(kw.get("host_layers", 1.0))
        return simulate(*args, **kw)

    monkeypatch.setattr(model, "_simulate", spy)
    prob = Problem(8192, 8192, 8192)
    machine = builtin("h200x2").replace(staged_contention=0.2)
    kw = dict(ranks_per_node=4, ranks_per_host=8, cuda_aware=False, algo="2.5d:4")
    shared = predict(prob, 8, machine, **kw).seconds
    assert seen[0] == 1.0 and 1.0 < seen[-1] < 4.0
    monkeypatch.setattr(model, "_simulate", lambda *a, **k: simulate(*a, **{**k, "host_layers": 1.0}))
    assert shared > predict(prob, 8, machine, **kw).seconds
    seen.clear()
    monkeypatch.setattr(model, "_simulate", spy)
    predict(prob, 16, builtin("h200x8-ndr"), ranks_per_node=8, cuda_aware=False, algo="2.5d:4")
    assert seen == [1.0]
