"""What the assembly of a product promises, one behaviour a test.

Written against the mutants that mutation testing of hpcmm/planning/assemble.py left alive
(docs/mutation.md): every field of the plan a one-rank product gets, the cost model's prediction behind
``--algo auto`` (with the run's type, TF32, machine, panel and prefetch) and the option a refused
algorithm is named by, what ``--balance auto`` stands for and that it is recorded as asked, the
``--verify=full`` size check before any buffer, and, over several ranks (threads meeting in
``tests/thread_comm.py``'s communicator), the plan's gathered fields (devices, ranks a device, each
rank's bytes) and its refusal, word for word on every rank, where one rank's plan differs.
"""

from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import pytest
from mpi4py import MPI
from thread_comm import ThreadComm

from hpcmm.config import RunConfig
from hpcmm.errors import InputError
from hpcmm.execution.backend import CpuBackend
from hpcmm.execution.topology import Topology
from hpcmm.geometry.layout import Grid, Layout
from hpcmm.matmul import Matmul
from hpcmm.model.cost import DEFAULT_MACHINE, Problem, load_machine, predict
from hpcmm.planning import assemble
from hpcmm.planning.algo_choice import Choice
from hpcmm.planning.assemble import Semantics
from hpcmm.planning.choices import summa_choices
from hpcmm.planning.plan import Plan

MACHINE = "data/machines/h200x2-2026-11-29-cuda-aware.json"


def planned(config: RunConfig):
    """The plan and the assembly of ``config`` on one rank (``MPI.COMM_SELF``)."""
    with Matmul.from_config(MPI.COMM_SELF, config) as mm:
        return mm.plan(), mm.assembly


def own_choices(config: RunConfig, shape):
    """What the planner chooses for one rank's whole blocks of ``shape`` (the plan must carry it)."""
    topo = Topology.create(MPI.COMM_SELF, config)
    try:
        return summa_choices(topo, CpuBackend(), Layout(*shape, Grid(1, 1)), config)
    finally:
        topo.close()


# -- one rank: the plan -------------------------------------------------------------------


def test_every_field_of_a_one_rank_plan():
    config = RunConfig(m=24, n=20, k=18, dtype="float32", device="cpu", panel=4, prefetch=1, balance="share",
                       cuda_aware_mpi="yes", step_order="common", alpha=2.0, beta=0.5, op_a="T", op_b="C",
                       tf32=True)
    plan, _ = planned(config)
    choices = own_choices(config, (24, 20, 18))
    assert dataclasses.asdict(dataclasses.replace(plan, layout=None)) == dataclasses.asdict(Plan(
        m=24, n=20, k=18, dtype="float32", alpha=2.0, beta=0.5, op_a="T", op_b="C", ranks=1, nodes=1,
        backend="numpy", devices=(-1,), ranks_per_device=1, algorithm="summa", layers=1, grid="1x1", rank_order=(0,),
        balance="share", weights=(), tile_workers=(), tile_gather="", panel=4, panel_auto=False, prefetch=1, steps=5,
        step_order="common", gemm_order=choices.gemm_order_label, gemm_library="auto", tf32=True,
        cuda_aware_mpi=True, memory_bytes=(choices.needed_bytes,)))
    assert choices.gemm_order_label and choices.needed_bytes > 0


def test_a_one_rank_dynamic_plan_names_its_worker():
    plan, _ = planned(RunConfig(m=24, n=20, k=18, device="cpu", balance="dynamic"))
    assert (plan.balance, plan.tile_workers, plan.tile_gather, plan.steps) == ("dynamic", (0,), "", 1)
    assert (plan.panel, plan.panel_auto, plan.step_order) == (18, True, "own-first")


# -- one rank: the algorithm ----------------------------------------------------------------


@pytest.mark.parametrize("dtype, tf32, machine, panel, prefetch, aware", [
    ("float32", False, None, 4, 1, "yes"),
    ("float32", True, MACHINE, 6, 2, "no"),
    ("complex128", False, MACHINE, None, None, "no"),
], ids=["float32", "tf32-machine", "complex-defaults"])
def test_auto_takes_the_models_prediction_for_the_run(dtype, tf32, machine, panel, prefetch, aware):
    config = RunConfig(m=40, n=24, k=36, dtype=dtype, tf32=tf32, machine=machine, panel=panel, prefetch=prefetch,
                       device="cpu", algo="auto", balance="share", cuda_aware_mpi=aware)
    _, assembly = planned(config)
    seconds = predict(Problem(40, 24, 36, "tf32" if tf32 else dtype), 1, load_machine(machine or DEFAULT_MACHINE),
                      ranks_per_node=1, ranks_per_host=1, panel=panel, prefetch=prefetch, algo="summa",
                      cuda_aware=aware == "yes").seconds
    assert assembly.choice == Choice("summa", "auto", None, (("summa", pytest.approx(seconds, rel=1e-12, abs=0)),))


def test_the_models_prediction_differs_by_machine_panel_and_type():
    """So that the test above tells each of the run's settings apart."""
    def seconds(dtype="float32", machine=DEFAULT_MACHINE, panel=4, prefetch=1):
        return predict(Problem(40, 24, 36, dtype), 1, load_machine(machine), ranks_per_node=1, ranks_per_host=1,
                       panel=panel, prefetch=prefetch, algo="summa", cuda_aware=True).seconds
    base = seconds()
    assert len({base, seconds("tf32"), seconds(machine=MACHINE), seconds(panel=6), seconds(panel=None)}) == 5


@pytest.mark.parametrize("aware", [True, False], ids=["aware", "not-aware"])
def test_auto_over_several_ranks_predicts_their_placement(tmp_path, aware):
    """4 thread ranks, 4 on their host, in 2 virtual nodes of 2, on a machine of 4 hosts (where the model
    would put 2 ranks a host if not told): the model is told the ranks, nodes, ranks a host, CUDA-awareness,
    panel and prefetch, and summa competes with 2.5d:2."""
    with open(MACHINE) as fh:
        description = json.load(fh)
    description["hosts"] = 4
    machine = tmp_path / "four-hosts.json"
    machine.write_text(json.dumps(description))
    config = RunConfig(m=512, n=512, k=512, algo="auto", machine=str(machine), panel=64, prefetch=2)
    world = ThreadComm(4)
    outcomes = world.run(lambda rank: assemble._choose(SimpleNamespace(size=4, comm=world, local_size=4), config,
                                                       (512, 512, 512), [[0, 1], [2, 3]], aware))
    predicted = tuple((name, predict(Problem(512, 512, 512, "float64"), 4, load_machine(str(machine)),
                                     ranks_per_node=2, ranks_per_host=4, panel=64, prefetch=2, algo=name,
                                     cuda_aware=aware).seconds) for name in ("summa", "2.5d:2"))
    ran = min(predicted, key=lambda p: p[1])[0]
    assert outcomes == [("returned", Choice(ran, "auto", None if ran == "summa" else 2, predicted))] * 4
    others = [predict(Problem(512, 512, 512, "float64"), 4, load_machine(str(machine)), ranks_per_node=2, algo="summa",
                      panel=64, **changed).seconds
              for changed in (dict(ranks_per_host=4, prefetch=2, cuda_aware=aware),
                              dict(ranks_per_host=None, prefetch=2, cuda_aware=aware),
                              dict(ranks_per_host=4, prefetch=None, cuda_aware=aware),
                              dict(ranks_per_host=4, prefetch=2, cuda_aware=not aware))]
    assert len(set(others)) == 4  # each of the placement's facts changes the prediction


@pytest.mark.parametrize("environment", [False, True], ids=["option", "environment"])
def test_a_layer_count_that_does_not_fit_names_its_option(environment):
    config = RunConfig(m=8, n=8, k=8, device="cpu", algo="2.5d:2",
                       from_environment=frozenset({"algo"}) if environment else frozenset())
    with pytest.raises(InputError) as caught:
        planned(config)
    assert str(caught.value).startswith(("HPCMM_ALGO" if environment else "--algo") + "=2.5d:2: ")


# -- one rank: the balance ------------------------------------------------------------------


@pytest.mark.parametrize("asked, ran, recorded", [("auto", "share", "auto"), ("share", "share", None),
                                                  ("none", "none", None)], ids=["auto", "share", "none"])
def test_balance_auto_is_resolved_and_recorded_as_asked(asked, ran, recorded):
    plan, assembly = planned(RunConfig(m=8, n=8, k=8, device="cpu", balance=asked))
    assert (plan.balance, assembly.config.balance, assembly.config.balance_asked) == (ran, ran, recorded)


@pytest.mark.parametrize("nodes, on_gpu, sliced, layers, mode", [
    (1, True, True, None, "dynamic"),
    (2, True, True, None, "share"),
    (1, False, True, None, "share"),
    (1, True, False, None, "share"),
    (1, True, True, 2, "share"),
], ids=["sliced-gpus", "two-nodes", "cpus", "not-sliced", "layers"])
def test_balance_auto_is_dynamic_only_on_one_nodes_time_sliced_gpus_under_summa(nodes, on_gpu, sliced, layers, mode):
    """The facts every rank gathered alike decide (hpcmm.planning.balance.mode_for)."""
    choice = Choice("summa" if layers is None else f"2.5d:{layers}", "auto", layers)
    config = assemble._resolve_balance(SimpleNamespace(vnode_count=nodes), SimpleNamespace(on_gpu=on_gpu),
                                       RunConfig(balance="auto"), choice, SimpleNamespace(time_sliced=sliced))
    assert (config.balance, config.balance_asked) == (mode, "auto")
    asked = RunConfig(balance="share")
    assert assemble._resolve_balance(SimpleNamespace(vnode_count=nodes), SimpleNamespace(on_gpu=on_gpu), asked,
                                     choice, SimpleNamespace(time_sliced=sliced)) is asked


# -- one rank: the full check's size ----------------------------------------------------------


@pytest.mark.parametrize("dtype, size, gib", [("float64", 8000, "2.4"), ("complex128", 6000, "2.7")],
                         ids=["real", "complex"])
def test_verify_full_refuses_a_problem_rank_0_cannot_gather_before_any_buffer(dtype, size, gib):
    """Complex numbers count twice: 6000³ fits the limit in a real type, not in a complex one."""
    config = RunConfig(m=size, n=size, k=size, dtype=dtype, device="cpu", verify="full", balance="share")
    with pytest.raises(InputError) as caught:
        planned(config)
    assert str(caught.value) == (f"--verify=full needs {gib} GiB on rank 0 for m={size}, n={size}, k={size} "
                                 "(limit 2 GiB): use --verify=freivalds")


# -- several ranks: the plan's gathered fields and its agreement ----------------------------------


def _plan_on_threads(backends, choices, *, nodes=2, aware=True, geometry=None):
    """``assemble._plan`` on one thread rank a backend; what each rank returned or raised."""
    world = ThreadComm(len(backends))
    config = RunConfig(dtype="float32", tf32=True, balance="share", gemm_library="gemmex")
    semantics = Semantics(alpha=2.0, beta=1.0, op_a="T", op_b="C")
    geometry = geometry or dict(algorithm="summa", layers=1, grid=f"1x{len(backends)}",
                                rank_order=tuple(reversed(range(len(backends)))), weights=(0.25, 0.75),
                                tile_workers=(0,), tile_gather="AB")

    def body(rank):
        launch = SimpleNamespace(comm=world, size=len(backends), vnode_count=nodes)
        return assemble._plan(launch, backends[rank], config, (30, 20, 10), aware, semantics, choices[rank],
                              **geometry)

    return world.run(body)


def _choices(needed, panel=4):
    return SimpleNamespace(panel=panel, panel_auto=False, prefetch=2, steps=3, step_order="own-first",
                           gemm_order_label="A:C B:F", needed_bytes=needed)


def _gpu(device):
    return SimpleNamespace(on_gpu=True, device_id=device, name="cupy")


def test_the_plan_gathers_every_ranks_device_and_bytes():
    outcomes = _plan_on_threads([_gpu(1), _gpu(0), _gpu(1)], [_choices(100), _choices(300), _choices(200)])
    assert [how for how, _ in outcomes] == ["returned"] * 3
    expected = Plan(m=30, n=20, k=10, dtype="float32", alpha=2.0, beta=1.0, op_a="T", op_b="C", ranks=3, nodes=2,
                    backend="cupy", devices=(1, 0, 1), ranks_per_device=2, algorithm="summa", layers=1, grid="1x3",
                    rank_order=(2, 1, 0), balance="share", weights=(0.25, 0.75), tile_workers=(0,), tile_gather="AB",
                    panel=4, panel_auto=False, prefetch=2, steps=3, step_order="own-first", gemm_order="A:C B:F",
                    gemm_library="gemmex", tf32=True, cuda_aware_mpi=True, memory_bytes=(100, 300, 200))
    assert [dataclasses.asdict(plan) for _, plan in outcomes] == [dataclasses.asdict(expected)] * 3


def test_cpu_ranks_are_on_the_host_whatever_their_device_number():
    cpu = SimpleNamespace(on_gpu=False, device_id=0, name="numpy")
    outcomes = _plan_on_threads([cpu, cpu], [_choices(8), _choices(8)], nodes=1, aware=False,
                                geometry=dict(algorithm="2.5d", layers=2, grid="1x1", rank_order=(0, 1), weights=()))
    plans = [plan for _, plan in outcomes]
    assert {(p.devices, p.ranks_per_device, p.nodes, p.backend, p.cuda_aware_mpi) for p in plans} == {
        ((-1, -1), 2, 1, "numpy", False)}
    assert {(p.algorithm, p.layers, p.tile_workers, p.tile_gather) for p in plans} == {("2.5d", 2, (), "")}


def test_a_rank_whose_plan_differs_fails_every_rank_naming_the_field():
    outcomes = _plan_on_threads([_gpu(0), _gpu(1)], [_choices(64, panel=4), _choices(64, panel=8)])
    assert [how for how, _ in outcomes] == ["raised"] * 2
    assert {type(error) for _, error in outcomes} == {InputError}
    assert {str(error) for _, error in outcomes} == {
        "the ranks differ in plan field panel: 4 on rank 0; 8 on rank 1 (every rank must be given the same settings "
        "and environment)"}
