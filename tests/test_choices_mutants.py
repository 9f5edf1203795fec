"""What the planner's choices promise at their edges and over several ranks, one behaviour a test.

Written against the mutants that mutation testing of hpcmm/planning/choices.py left alive
(docs/mutation.md): the dynamic tiles' counts, rows and workers, the bytes of other nodes' blocks, the
memory check's refusals word for word and its largest problem, and what
:func:`~hpcmm.planning.choices.summa_choices` and :func:`~hpcmm.planning.choices.layered_choices`
choose for every rank of a grid over one or two (virtual) nodes.  Ranks are threads meeting in a
stand-in communicator (``tests/thread_comm.py``) with a topology of stand-in communicators; their
backends report a fixed free memory, so every figure is exact.
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
from mpi4py import MPI
from thread_comm import ThreadComm

from hpcmm.config import RunConfig
from hpcmm.dtypes import numpy_dtype
from hpcmm.errors import InputError
from hpcmm.execution.backend import CpuBackend
from hpcmm.execution.transport.reduce import scratch_bytes
from hpcmm.geometry.layout import Grid, Layout
from hpcmm.planning.algorithms import panel_candidates, prefetch_of, rank_plan, ring_depth
from hpcmm.planning.algorithms.layers import LayeredLayout, Layers
from hpcmm.planning.choices import (
    check_memory,
    gather_bytes,
    largest_fitting,
    layered_choices,
    memory_needed,
    memory_parts,
    node_workers,
    remote_block_bytes,
    scaled,
    summa_choices,
    tile_rows,
    tile_worker_of,
    tile_workers,
    tiles_per_block,
)
from hpcmm.planning.gemm_orders import gemm_order, scratch_slots
from hpcmm.planning.grid_orientation import ROW_LEAST_COLUMNS

BIG = 1 << 50  # free bytes that hold anything here


class World(ThreadComm):
    """The job's communicator, with mpi4py's object reductions (``op=None`` is its default, a sum)."""

    def allreduce(self, value, op=MPI.SUM):
        values = self._exchange(value)
        if op == MPI.MIN:
            return min(values)
        if op == MPI.MAX:
            return max(values)
        return sum(values)


class Host(CpuBackend):
    """A CPU rank whose host has ``free`` bytes free."""

    def __init__(self, free=BIG):
        super().__init__()
        self.free = free

    def memory_info(self):
        return self.free, 1 << 52


class Gpu(Host):
    """A GPU rank (device ``device_id``, ``free`` bytes free on it)."""

    on_gpu = True

    def __init__(self, device_id, free=BIG):
        super().__init__(free)
        self.device_id = device_id


def topology(world, rank, grid, vnodes):
    """Rank ``rank``'s topology on one host: the grid's row and column, the (virtual) nodes ``vnodes``."""
    row, col = grid.coords(rank)
    node_comm = world.Split(0, rank)
    row_comm, col_comm = world.Split(row, col), world.Split(col, row)
    return SimpleNamespace(comm=world, node_comm=node_comm, row_comm=row_comm, col_comm=col_comm,
                           vnode=vnodes[rank], vnode_count=len(set(vnodes)), rank=rank, size=world.Get_size())


def on_threads(size, body):
    """``body(world, rank)`` on ``size`` ranks; every rank's value (an error on any rank fails the test)."""
    world = World(size)
    outcomes = world.run(lambda rank: body(world, rank))
    assert all(how == "returned" for how, _ in outcomes), outcomes
    return [value for _, value in outcomes]


def summa_on(size, grid, vnodes, layout, config, backends, worker_of=None):
    return on_threads(size, lambda world, rank: summa_choices(topology(world, rank, grid, vnodes), backends[rank],
                                                              layout, config, worker_of))


# -- dynamic tiles --------------------------------------------------------------------------


@pytest.mark.parametrize("blocks, workers, on_gpu, tiles", [
    (4, 4, True, 2), (4, 4, False, 8), (8, 2, False, 2), (8, 1, True, 1),
    (2, 2, False, 8),  # two workers share the tiles: 8 each, 16 over two blocks
    (8, 2, True, 1),  # fewer tiles than blocks: one a block, never none
    (3, 2, True, 2),  # 4 tiles over 3 blocks: rounded up
    (1, 2, True, 4),
    (0, 2, True, 4),  # no blocks counted: as one
])
def test_tiles_per_block(blocks, workers, on_gpu, tiles):
    assert tiles_per_block(blocks, workers, on_gpu) == tiles


def test_tile_rows_take_the_devices_count_by_default_and_whole_rows():
    assert tile_rows(300, on_gpu=True) == ((0, 300),)
    assert len(tile_rows(100_000, on_gpu=True)) == 2 and len(tile_rows(100_000, on_gpu=False)) == 8
    rows = tile_rows(1000, False, 8, "even")
    assert rows[:3] == ((0, 120), (120, 248), (248, 368)) and rows[-1][1] == 1000
    assert all(type(edge) is int for tile in rows + tile_rows(3856, False, 8, "decreasing") for edge in tile)


@pytest.mark.parametrize("devices, mps, on_gpu, worker_of", [
    (["g0", "g1", "g0", "g1"], [False] * 4, True, (0, 1, 0, 1)),
    (["g0", "g0", "g0"], [False] * 3, True, (0, 0, 0)),
    (["g1", "g0", "g1", "g0"], [False] * 4, True, (0, 1, 0, 1)),
    (["g0", "g0"], [True, True], True, (0, 1)),  # MPS: both compute
    (["g0", "g0"], [True, False], True, (0, 0)),  # not every one under MPS: time slices
    (["g0", "g1"], [False, False], True, (0, 1)),  # nothing shared
    (["cpu"] * 3, [False] * 3, False, (0, 1, 2)),  # CPU ranks each compute
])
def test_tile_worker_of_and_tile_workers(devices, mps, on_gpu, worker_of):
    assert tile_worker_of(devices, mps, on_gpu) == worker_of
    assert tile_workers(devices, mps, on_gpu) == tuple(sorted(set(worker_of)))


def test_node_workers_keep_each_nodes_tiles_on_the_node():
    assert node_workers((0, 0, 0, 0), (0, 0, 1, 1)) == (0, 0, 2, 2)
    assert node_workers((0, 1, 0, 1), (0, 0, 0, 0)) == (0, 1, 0, 1)
    assert node_workers((1, 1, 1, 1), (0, 0, 1, 1)) == (0, 0, 2, 2)
    assert node_workers((0, 1, 2, 3), (0, 1, 0, 1)) == (0, 1, 2, 3)


@pytest.mark.parametrize("rank, vnodes, expected", [
    (0, (0, 0, 1, 1), 20 * 30 * 8),  # rank 2's B block (20 × 30) lies on node 1
    (0, (0, 0, 0, 0), 0),
    (0, (0, 1, 0, 1), 50 * 20 * 8),  # rank 1's A block (50 × 20)
    (3, (0, 1, 1, 0), 50 * 20 * 8 + 20 * 30 * 8),  # rank 2's A block and rank 1's B block
    (0, (0, 1, 1, 1), 50 * 20 * 8 + 20 * 30 * 8),  # both
])
def test_remote_block_bytes_count_the_blocks_of_other_nodes(rank, vnodes, expected):
    layout = Layout(100, 60, 40, Grid(2, 2))
    assert remote_block_bytes(layout, rank, vnodes, 8) == expected


def test_remote_blocks_are_stored_padded():
    layout = Layout(1000, 60, 40, Grid(2, 2))  # A blocks of 500 rows: a padded leading dimension
    a_rows = layout.local_shapes(1)["A"][0]
    from hpcmm.geometry.layout import padded

    assert padded(a_rows, 8) != a_rows
    assert remote_block_bytes(layout, 0, (0, 1, 0, 0), 8) == padded(a_rows, 8) * 20 * 8


def test_memory_parts_count_no_gpu_by_default():
    layout = Layout(100, 60, 40, Grid(1, 1))
    assert memory_parts(layout, 0, 8, 16, 2) == memory_parts(layout, 0, 8, 16, 2, on_gpu=False)
    assert sum(memory_parts(layout, 0, 8, 16, 2)) == memory_needed(layout, 0, 8, 16, 2)


# -- the memory check ----------------------------------------------------------------------------


def one_rank(free, on_gpu=False):
    topo = SimpleNamespace(node_comm=MPI.COMM_SELF, comm=MPI.COMM_SELF, rank=0)
    backend = Gpu(0, free) if on_gpu else Host(free)
    return topo, backend


def test_a_refusal_without_a_size_to_scale_ends_with_the_figures():
    topo, backend = one_rank(3 << 29)
    with pytest.raises(InputError) as refused:
        check_memory(topo, backend, 5 << 30, "bench m=1")
    assert str(refused.value) == ("bench m=1 does not fit: 1 rank(s) per host need 5.00 GiB of host memory, "
                                  "1.50 GiB available")
    topo, backend = one_rank(1 << 29, on_gpu=True)
    with pytest.raises(InputError) as refused:
        check_memory(topo, backend, 3 << 30, "p")
    assert str(refused.value) == "p does not fit: 1 rank(s) per device need 3.00 GiB of device memory, 0.50 GiB available"


def test_a_refusal_names_a_largest_problem_one_element_thin():
    """Scaled down, m = 2 becomes 1: still a problem, named as such."""
    topo, backend = one_rank(1400 * 1400)
    with pytest.raises(InputError) as refused:
        check_memory(topo, backend, 2000 * 2000, "p", lambda rank, m, n, k: n * k, (2, 2000, 2000))
    message = str(refused.value)
    assert message.startswith("p does not fit: 1 rank(s) per host need 0.00 GiB of host memory, 0.00 GiB available; "
                              "the largest of this shape that fits: m=1, n=1")


def test_largest_fitting_is_one_where_the_problem_fits_exactly():
    assert largest_fitting(lambda m, n, k: m * n * k, (10, 20, 30), 6000) == 1.0
    assert largest_fitting(lambda m, n, k: m * n * k, (10, 20, 30), 10**9) == 1.0
    scale = largest_fitting(lambda m, n, k: m * n * k, (10, 20, 30), 5999)
    assert scale < 1.0 and scaled((10, 20, 30), scale) == (9, 19, 29)  # the most below scale 1


def test_largest_fitting_finds_the_edge_to_a_thousandth_of_an_element():
    """``m * n * k`` bytes of 1000 × 1000 × 1000 in 125e6 bytes: exactly half of every extent fits, one byte less
    does not."""
    scale = largest_fitting(lambda m, n, k: m * n * k, (1000, 1000, 1000), 125_000_000)
    assert scaled((1000, 1000, 1000), scale) == (500, 500, 500) and 0.5 <= scale < 0.501
    scale = largest_fitting(lambda m, n, k: m * n * k, (1000, 1000, 1000), 125_000_000 - 1)
    assert scaled((1000, 1000, 1000), scale) == (499, 499, 499) and 0.4999 < scale < 0.5


def test_largest_fitting_of_a_shape_with_a_unit_extent():
    """m = 1 stays 1 only at scale 1: a smaller problem of the shape has no rows, so nothing fits; m = 2
    may become 1."""
    assert largest_fitting(lambda m, n, k: n * k, (1, 100, 100), 9999) == 0.0
    scale = largest_fitting(lambda m, n, k: n * k, (2, 100, 100), 2500)
    assert scaled((2, 100, 100), scale) == (1, 50, 50) and 0.5099 < scale < 0.51


def test_one_device_short_of_memory_refuses_on_every_rank():
    """Two GPU ranks on their own devices; device 1 has too little: both ranks raise its refusal."""
    def body(world, rank):
        topo = SimpleNamespace(node_comm=world, comm=world, rank=rank)
        return check_memory(topo, Gpu(rank, free=100 if rank else 1000), 500, "p")

    world = World(2)
    outcomes = world.run(lambda rank: body(world, rank))
    assert [how for how, _ in outcomes] == ["raised", "raised"], outcomes
    assert all(isinstance(error, InputError) and "p does not fit" in str(error) for _, error in outcomes)


# -- summa_choices over several ranks ----------------------------------------------------------


def expected_summa(layout, config, vnodes, rank, panel, slots_a_b, on_gpu=False, extra=0):
    """One rank's blocks and buffers as the documented rules count them (no dynamic tiles)."""
    itemsize = 8
    prefetch = prefetch_of(config, on_gpu)
    order = gemm_order(config.dtype, config.tf32, on_gpu, config.gemm_order)
    relayout = scratch_slots(order, prefetch + 1)
    return memory_needed(layout, rank, itemsize, panel, slots_a_b, relayout, on_gpu) + extra, relayout, order


def test_summa_over_two_nodes_keeps_two_slots_where_a_channel_spans_them():
    """2 × 2 grid, grid rows on nodes 0 and 1, no prefetch: A's channel (a row) stays on its node and keeps one
    slot, B's (a column) spans both and keeps two; steps in the common order; the widest panel."""
    layout = Layout(64, 48, 4000, Grid(2, 2))
    config = RunConfig(dtype="float64", prefetch=0)
    vnodes = (0, 0, 1, 1)
    got = summa_on(4, layout.grid, vnodes, layout, config, [Host() for _ in range(4)])
    panel = panel_candidates([layout], 8, False, shared=False)[0]
    needs = [expected_summa(layout, config, vnodes, rank, panel, (1, 2))[0] for rank in range(4)]
    steps = [tuple(rank_plan(layout, rank, panel, 0, own_order=False)) for rank in range(4)]
    for rank, choices in enumerate(got):
        _, relayout, order = expected_summa(layout, config, vnodes, rank, panel, (1, 2))
        assert choices.panel == panel and choices.panel_auto is True and choices.prefetch == 0
        assert choices.gemm_order == order and choices.slots == 2 and choices.step_order == "common"
        assert choices.rank_steps == steps[rank] and choices.steps == max(len(s) for s in steps)
        assert choices.needed_bytes == needs[rank] and choices.device_bytes == sum(needs)
        assert choices.operand_bytes == memory_parts(layout, rank, 8, panel, (1, 2), relayout)[0]
        assert choices.free_bytes == BIG
        assert (choices.tiles, choices.workers, choices.worker_of, choices.gather) == ((), (), (), "")


def test_summa_on_one_node_runs_each_ranks_own_order_with_the_prefetch_asked():
    layout = Layout(64, 48, 4000, Grid(2, 2))
    config = RunConfig(dtype="float64", prefetch=2, panel=100)
    got = summa_on(4, layout.grid, (0, 0, 0, 0), layout, config, [Host() for _ in range(4)])
    for rank, choices in enumerate(got):
        assert choices.panel == 100 and choices.panel_auto is False and choices.prefetch == 2 and choices.slots == 3
        assert choices.step_order == "own-first"
        assert choices.rank_steps == tuple(rank_plan(layout, rank, 100, 2, own_order=True))
        assert choices.needed_bytes == expected_summa(layout, config, (0,) * 4, rank, 100, (3, 3))[0]


def test_summa_narrows_the_panel_where_gpus_are_shared():
    """Two GPU ranks on one GPU: the shared target (narrower than the unshared one), on every rank."""
    layout = Layout(16384, 16384, 16384, Grid(2, 1))
    config = RunConfig(dtype="float64")
    shared = summa_on(2, layout.grid, (0, 0), layout, config, [Gpu(0), Gpu(0)])
    alone = summa_on(2, layout.grid, (0, 0), layout, config, [Gpu(0), Gpu(1)])
    assert shared[0].panel == shared[1].panel == panel_candidates([layout], 8, True, shared=True)[0]
    assert alone[0].panel == panel_candidates([layout], 8, True, shared=False)[0] > shared[0].panel
    assert alone[0].needed_bytes == memory_needed(layout, 0, 8, alone[0].panel, (0, alone[0].slots),
                                                  scratch_slots(alone[0].gemm_order, alone[0].prefetch + 1), True)


def test_summa_falls_back_to_the_widest_panel_that_fits_every_rank():
    """Four GPU ranks, two a GPU: the second width fits exactly, so every rank takes it."""
    layout = Layout(4096, 4096, 65536, Grid(2, 2))
    config = RunConfig(dtype="float64")
    widths = panel_candidates([layout], 8, True, shared=True)
    assert len(widths) > 2
    prefetch = prefetch_of(config, True)
    relayout = scratch_slots(gemm_order("float64", False, True, config.gemm_order), prefetch + 1)
    slots = ring_depth(prefetch, False)
    need = [memory_needed(layout, rank, 8, widths[1], (slots, slots), relayout, True) for rank in range(4)]
    free = [need[0] + need[2], need[1] + need[3]]  # ranks 0 and 2 on GPU 0, 1 and 3 on GPU 1
    got = summa_on(4, layout.grid, (0,) * 4, layout, config, [Gpu(rank % 2, free[rank % 2]) for rank in range(4)])
    assert [c.panel for c in got] == [widths[1]] * 4 and [c.device_bytes for c in got] == free * 2


def test_a_panel_wider_than_k_is_refused_on_every_rank_by_its_origin():
    layout = Layout(8, 8, 10, Grid(2, 1))
    config = RunConfig(panel=64, from_environment=frozenset({"panel"}))
    world = World(2)
    outcomes = world.run(lambda rank: summa_choices(topology(world, rank, layout.grid, (0, 0)), Host(), layout, config))
    assert all(how == "raised" and str(error) == "HPCMM_PANEL=64: wider than k=10" for how, error in outcomes), outcomes


def dynamic(**settings):
    return RunConfig(dtype="float64", balance="dynamic", panel=8, **settings)


def dynamic_need(layout, rank, vnodes=None):
    return memory_needed(layout, rank, 8, 8, (0, 0), (0, 0)) + (remote_block_bytes(layout, rank, vnodes, 8) if vnodes else 0)


def test_dynamic_over_two_nodes_copies_the_other_nodes_blocks_and_hands_tiles_out_per_node():
    layout = Layout(200, 96, 64, Grid(2, 2))
    vnodes = (0, 0, 1, 1)
    got = summa_on(4, layout.grid, vnodes, layout, dynamic(), [Host() for _ in range(4)], worker_of=(0, 0, 0, 0))
    needs = [dynamic_need(layout, rank, vnodes) for rank in range(4)]
    assert all(remote_block_bytes(layout, rank, vnodes, 8) > 0 for rank in range(4))
    count = tiles_per_block(4, 2, False)
    tiles = tuple(tile_rows(layout.local_shapes(rank)["C"][0], False, count) for rank in range(4))
    for rank, choices in enumerate(got):
        assert (choices.prefetch, choices.gemm_order, choices.slots, choices.step_order) == (0, "FC", 1, "common")
        assert choices.worker_of == (0, 0, 2, 2) and choices.workers == (0, 2)
        assert choices.tiles == tiles and choices.steps == sum(len(t) for t in tiles)
        assert choices.rank_steps == tuple(rank_plan(layout, rank, 8, 0, own_order=False))
        assert choices.needed_bytes == needs[rank] and choices.device_bytes == sum(needs) and choices.gather == ""
        assert choices.operand_bytes == memory_parts(layout, rank, 8, 8, (0, 0))[0]


def test_dynamic_on_one_node_every_rank_its_own_worker():
    layout = Layout(200, 96, 64, Grid(2, 2))
    got = summa_on(4, layout.grid, (0,) * 4, layout, dynamic(), [Host() for _ in range(4)])
    count = tiles_per_block(4, 4, False)
    for rank, choices in enumerate(got):
        assert choices.worker_of == (0, 1, 2, 3) and choices.workers == (0, 1, 2, 3) and choices.gather == ""
        assert choices.tiles == tuple(tile_rows(layout.local_shapes(r)["C"][0], False, count) for r in range(4))
        assert choices.step_order == "own-first" and choices.needed_bytes == dynamic_need(layout, rank)


def test_a_lone_worker_gathers_the_operands_exactly_where_they_fit():
    """One worker for a 2 × 2 grid: A and B whole where the node has their bytes beside the blocks, else not."""
    layout = Layout(200, 96, 64, Grid(2, 2))
    needs = [dynamic_need(layout, rank) for rank in range(4)]
    extra = gather_bytes(layout, 8, "AB")
    assert extra > 0
    fits = summa_on(4, layout.grid, (0,) * 4, layout, dynamic(), [Host(sum(needs) + extra) for _ in range(4)],
                    worker_of=(0, 0, 0, 0))
    for rank, choices in enumerate(fits):
        assert choices.gather == "AB" and choices.workers == (0,) and choices.device_bytes == sum(needs) + extra
        assert choices.needed_bytes == needs[rank] + (extra if rank == 0 else 0)
        assert choices.tiles == tuple(((0, layout.local_shapes(r)["C"][0]),) for r in range(4)) and choices.steps == 4
    short = summa_on(4, layout.grid, (0,) * 4, layout, dynamic(), [Host(sum(needs) + extra - 1) for _ in range(4)],
                     worker_of=(0, 0, 0, 0))
    for rank, choices in enumerate(short):
        assert choices.gather == "" and choices.device_bytes == sum(needs) and choices.needed_bytes == needs[rank]


def test_a_lone_worker_gathers_only_where_every_device_holds_the_operands():
    """Two GPUs, one worker for both: rank 1's device is short of the whole A, so neither rank gathers."""
    layout = Layout(200, 96, 64, Grid(1, 2))
    need = [memory_needed(layout, rank, 8, 8, (0, 0), (0, 0), True) for rank in range(2)]
    extra = gather_bytes(layout, 8, "A")
    got = summa_on(2, layout.grid, (0, 0), layout, dynamic(),
                   [Gpu(0, need[0] + extra), Gpu(1, need[1] + extra - 1)], worker_of=(0, 0))
    assert [c.gather for c in got] == ["", ""] and [c.device_bytes for c in got] == need


def test_a_dynamic_refusal_names_the_largest_problem_with_the_other_nodes_blocks():
    layout = Layout(2000, 960, 640, Grid(2, 2))
    vnodes = (0, 0, 1, 1)
    needs = [dynamic_need(layout, rank, vnodes) for rank in range(4)]
    free = sum(needs) // 3

    def need_at(rank, m, n, k):
        other = dataclasses.replace(layout, m=m, n=n, k=k)
        return memory_needed(other, rank, 8, min(8, k), (0, 0), (0, 0)) + remote_block_bytes(other, rank, vnodes, 8)

    largest = scaled((2000, 960, 640), largest_fitting(lambda m, n, k: sum(need_at(r, m, n, k) for r in range(4)),
                                                       (2000, 960, 640), free))
    world = World(4)
    outcomes = world.run(lambda rank: summa_choices(topology(world, rank, layout.grid, vnodes), Host(free), layout,
                                                    dynamic()))
    message = (f"problem m=2000, n=960, k=640 float64 does not fit: 4 rank(s) per host need {sum(needs) / 2**30:.2f} "
               f"GiB of host memory, {free / 2**30:.2f} GiB available; the largest of this shape that fits: "
               f"m={largest[0]}, n={largest[1]}, k={largest[2]}")
    assert all(how == "raised" and str(error) == message for how, error in outcomes), (message, outcomes)


# -- layered_choices over several ranks -----------------------------------------------------------


def layered_on(nodes, count, vnodes, shape, config, backends):
    layers = Layers.build(nodes, count)
    size = layers.size

    def body(world, rank):
        topo = SimpleNamespace(comm=world, node_comm=world.Split(0, rank), vnode=vnodes[rank],
                               vnode_count=len(set(vnodes)), rank=rank, size=size)
        return layered_choices(topo, backends[rank], config, shape, layers)

    return layers, on_threads(size, body)


def expected_layered(layers, grid, shape, config, vnodes, rank, panel, on_gpu):
    itemsize = numpy_dtype(config.dtype).itemsize
    layout = LayeredLayout(*shape, layers, grid)
    prefetch = prefetch_of(config, on_gpu)
    order = gemm_order(config.dtype, config.tf32, on_gpu, config.gemm_order)
    members = layers.members(layers.layer(rank))
    row, col = divmod(layers.layer_rank(rank), grid.cols)
    row_v = [vnodes[r] for r in members[row * grid.cols:(row + 1) * grid.cols]]
    col_v = [vnodes[r] for r in members[col::grid.cols]]
    ring = lambda v: (ring_depth(prefetch, len(set(v)) > 1) if len(v) > 1 else 0)  # noqa: E731
    relayout = scratch_slots(order, prefetch + 1)
    reduction = scratch_bytes(layout.local_shapes_partial(rank), layers.count, layers.fiber(rank).index(rank), itemsize)
    own = layout.layer_layout(layers.layer(rank))
    return (memory_needed(own, layers.layer_rank(rank), itemsize, panel, (ring(row_v), ring(col_v)), relayout, on_gpu)
            + reduction, own, relayout, (ring(row_v), ring(col_v)))


@pytest.mark.parametrize("gpus", [False, True], ids=["cpu", "gpu"])
def test_two_layers_on_one_node(gpus):
    """4 ranks, 2 layers of 2 on one node: float64 on GPUs faces tall (1 × 2), on CPUs wide (2 × 1)."""
    shape = (64, 48, 4000)
    config = RunConfig(dtype="float64")
    backends = [Gpu(rank) if gpus else Host() for rank in range(4)]
    layers, got = layered_on([(0, 1, 2, 3)], 2, (0,) * 4, shape, config, backends)
    grid = Grid(1, 2) if gpus else Grid(2, 1)
    layer_layouts = [LayeredLayout(*shape, layers, grid).layer_layout(i) for i in range(2)]
    panel = panel_candidates(layer_layouts, 8, gpus, shared=False)[0]
    needs = [expected_layered(layers, grid, shape, config, (0,) * 4, r, panel, gpus)[0] for r in range(4)]
    prefetch = prefetch_of(config, gpus)
    for rank, (g, layout, choices) in enumerate(got):
        need, own, relayout, slots_a_b = expected_layered(layers, grid, shape, config, (0,) * 4, rank, panel, gpus)
        assert g == grid and layout == LayeredLayout(*shape, layers, grid)
        assert choices.panel == panel and choices.panel_auto is True and choices.prefetch == prefetch
        assert choices.gemm_order == gemm_order("float64", False, gpus, config.gemm_order)
        assert choices.slots == ring_depth(prefetch, False) and choices.step_order == "own-first"
        steps = tuple(rank_plan(own, layers.layer_rank(rank), panel, prefetch, own_order=True))
        assert choices.rank_steps == steps and choices.steps == max(len(c.rank_steps) for _, _, c in got)
        assert choices.needed_bytes == need
        assert choices.device_bytes == (need if gpus else sum(needs))
        assert choices.operand_bytes == memory_parts(own, layers.layer_rank(rank), 8, panel, slots_a_b, relayout)[0]
        assert choices.free_bytes == BIG


def test_two_layers_over_two_nodes_keep_two_slots_and_the_common_order():
    shape = (64, 48, 4000)
    config = RunConfig(dtype="float64", prefetch=0, panel=50)
    vnodes = (0, 0, 1, 1)
    layers, got = layered_on([(0, 1), (2, 3)], 2, vnodes, shape, config, [Host() for _ in range(4)])
    grid = Grid(2, 1)
    for rank, (g, _, choices) in enumerate(got):
        need, own, _, slots_a_b = expected_layered(layers, grid, shape, config, vnodes, rank, 50, False)
        assert g == grid and slots_a_b == (0, 2)
        assert choices.slots == 2 and choices.step_order == "common" and choices.panel_auto is False
        assert choices.rank_steps == tuple(rank_plan(own, layers.layer_rank(rank), 50, 0, own_order=False))
        assert choices.needed_bytes == need


def test_layers_on_shared_gpus_face_one_row_where_c_is_wide_and_tall_where_not():
    """8 ranks on 4 GPUs, 2 layers of 4: float64 takes one row (1 × 4) only where each strip of C is wide enough."""
    backends = [Gpu(rank % 4) for rank in range(8)]
    config = RunConfig(dtype="float64")
    for n, grid in ((4 * ROW_LEAST_COLUMNS, Grid(1, 4)), (4 * ROW_LEAST_COLUMNS - 4, Grid(2, 2))):
        _, got = layered_on([tuple(range(8))], 2, (0,) * 8, (64, n, 256), config, backends)
        assert {g for g, _, _ in got} == {grid}
        assert got[0][2].panel == panel_candidates([got[0][1].layer_layout(0), got[0][1].layer_layout(1)], 8, True,
                                                   shared=True)[0]


def test_a_panel_wider_than_a_layers_k_is_refused_by_its_origin():
    world = World(4)
    layers = Layers.build([(0, 1, 2, 3)], 2)

    def body(rank):
        topo = SimpleNamespace(comm=world, node_comm=world.Split(0, rank), vnode=0, vnode_count=1, rank=rank, size=4)
        return layered_choices(topo, Host(), RunConfig(panel=64), (16, 16, 101), layers)

    outcomes = world.run(body)
    message = "--panel=64: wider than the k of a 2.5d layer (k=101 over 2 layers: 50 for the narrowest)"
    assert all(how == "raised" and str(error) == message for how, error in outcomes), outcomes


def test_a_layered_refusal_names_the_largest_problem_of_its_shape():
    shape = (2000, 960, 640)
    config = RunConfig(dtype="float64", panel=8)
    layers = Layers.build([(0, 1, 2, 3)], 2)
    grid = Grid(2, 1)
    needs = [expected_layered(layers, grid, shape, config, (0,) * 4, r, 8, False)[0] for r in range(4)]
    free = sum(needs) // 3

    def need_at(rank, m, n, k):
        if k < 2:
            return 1 << 62
        need, *_ = expected_layered(layers, grid, (m, n, k), config, (0,) * 4, rank, min(8, max(k // 2, 1)), False)
        return need

    largest = scaled(shape, largest_fitting(lambda m, n, k: sum(need_at(r, m, n, k) for r in range(4)), shape, free))
    world = World(4)

    def body(rank):
        topo = SimpleNamespace(comm=world, node_comm=world.Split(0, rank), vnode=0, vnode_count=1, rank=rank, size=4)
        return layered_choices(topo, Host(free), config, shape, layers)

    outcomes = world.run(body)
    message = (f"problem m=2000, n=960, k=640 float64 with 2 layers does not fit: 4 rank(s) per host need "
               f"{sum(needs) / 2**30:.2f} GiB of host memory, {free / 2**30:.2f} GiB available; the largest of this "
               f"shape that fits: m={largest[0]}, n={largest[1]}, k={largest[2]}")
    assert all(how == "raised" and str(error) == message for how, error in outcomes), (message, outcomes)


# -- the type, TF32, the operand orders and the prefetch on GPUs ----------------------------------


@pytest.mark.parametrize("gpus, dtype, tf32, orders, expected_order, expected_prefetch", [
    (True, "float32", True, "auto", "CC", 2),  # TF32 on a GPU: row-major operands, two panels ahead
    (True, "float32", False, "auto", "FC", 1),
    (False, "float32", True, "auto", "FC", 1),  # on a CPU as stored
    (False, "float64", False, "CF", "CF", 1),  # an order asked for: A's panels re-laid out
], ids=["gpu-tf32", "gpu-float32", "cpu-tf32", "cpu-cf"])
def test_the_gemm_order_and_prefetch_follow_the_device_type_and_tf32(gpus, dtype, tf32, orders, expected_order,
                                                                      expected_prefetch):
    config = RunConfig(dtype=dtype, tf32=tf32, gemm_order=orders, panel=16)
    layout = Layout(96, 64, 128, Grid(2, 1))
    itemsize = numpy_dtype(dtype).itemsize
    backends = [Gpu(rank) if gpus else Host() for rank in range(2)]
    got = summa_on(2, layout.grid, (0, 0), layout, config, backends)
    for rank, choices in enumerate(got):
        assert (choices.gemm_order, choices.prefetch) == (expected_order, expected_prefetch)
        ring = expected_prefetch + 1
        assert choices.needed_bytes == memory_needed(layout, rank, itemsize, 16, (0, ring),
                                                     scratch_slots(expected_order, ring), gpus)
    layers, layered = layered_on([(0, 1, 2, 3)], 2, (0,) * 4, (96, 64, 128), config,
                                 [Gpu(rank) if gpus else Host() for rank in range(4)])
    for rank, (grid, _, choices) in enumerate(layered):
        assert (choices.gemm_order, choices.prefetch) == (expected_order, expected_prefetch)
        need, *_ = expected_layered(layers, grid, (96, 64, 128), config, (0,) * 4, rank, 16, gpus)
        assert choices.needed_bytes == need


def test_no_prefetch_on_one_node_keeps_one_slot():
    config = RunConfig(dtype="float64", prefetch=0, panel=16)
    layout = Layout(64, 48, 128, Grid(2, 2))
    assert {c.slots for c in summa_on(4, layout.grid, (0,) * 4, layout, config, [Host() for _ in range(4)])} == {1}
    _, layered = layered_on([(0, 1, 2, 3)], 2, (0,) * 4, (64, 48, 128), config, [Host() for _ in range(4)])
    assert {c.slots for _, _, c in layered} == {1}


def test_a_grid_row_that_spans_nodes_keeps_two_slots_for_a():
    """Grid columns on nodes 0 and 1: A's channel (a row) spans them, B's (a column) does not."""
    layout = Layout(64, 48, 128, Grid(2, 2))
    config = RunConfig(dtype="float64", prefetch=0, panel=16)
    got = summa_on(4, layout.grid, (0, 1, 0, 1), layout, config, [Host() for _ in range(4)])
    for rank, choices in enumerate(got):
        assert choices.needed_bytes == memory_needed(layout, rank, 8, 16, (2, 1))


def test_a_gpus_refusal_names_the_largest_problem_with_what_a_rank_takes_while_it_runs():
    """One float32 rank on a GPU: the largest problem counts the working bytes (:func:`working_bytes`) too."""
    layout = Layout(20000, 20000, 20000, Grid(1, 1))
    config = RunConfig(dtype="float32", panel=256)
    need = memory_needed(layout, 0, 4, 256, (0, 0), (0, 0), True)
    free = need // 2

    def need_at(m, n, k):
        return memory_needed(dataclasses.replace(layout, m=m, n=n, k=k), 0, 4, min(256, k), (0, 0), (0, 0), True)

    largest = scaled((20000,) * 3, largest_fitting(need_at, (20000,) * 3, free))
    world = World(1)
    outcomes = world.run(lambda rank: summa_choices(topology(world, 0, layout.grid, (0,)), Gpu(0, free), layout, config))
    message = (f"problem m=20000, n=20000, k=20000 float32 does not fit: 1 rank(s) per device need {need / 2**30:.2f} "
               f"GiB of device memory, {free / 2**30:.2f} GiB available; the largest of this shape that fits: "
               f"m={largest[0]}, n={largest[1]}, k={largest[2]}")
    assert outcomes[0][0] == "raised" and str(outcomes[0][1]) == message, (message, outcomes)


def test_a_layered_gpu_refusal_counts_what_a_rank_takes_while_it_runs():
    shape = (20000, 20000, 20000)
    config = RunConfig(dtype="float64", panel=256)
    layers = Layers.build([(0, 1)], 2)
    grid = Grid(1, 1)
    needs = [expected_layered(layers, grid, shape, config, (0, 0), r, 256, True)[0] for r in range(2)]
    free = needs[0] // 2

    def need_at(rank, m, n, k):
        if k < 2:
            return 1 << 62
        return expected_layered(layers, grid, (m, n, k), config, (0, 0), rank, min(256, max(k // 2, 1)), True)[0]

    largest = [scaled(shape, largest_fitting(lambda m, n, k: need_at(r, m, n, k), shape, free)) for r in range(2)]
    world = World(2)

    def body(rank):
        topo = SimpleNamespace(comm=world, node_comm=world.Split(0, rank), vnode=0, vnode_count=1, rank=rank, size=2)
        return layered_choices(topo, Gpu(rank, free), config, shape, layers)

    outcomes = world.run(body)
    smallest = min(largest)
    assert all(how == "raised" and str(error).endswith(
        f"the largest of this shape that fits: m={smallest[0]}, n={smallest[1]}, k={smallest[2]}")
        for how, error in outcomes), (smallest, outcomes)


@pytest.mark.parametrize("k, target", [(4, (2400, 2400, 2)), (7, (2000, 2000, 3))], ids=["k-4", "k-7"])
def test_the_largest_problem_of_thin_layers(k, target):
    """k over 2 layers of 2 ranks: the largest problem may have one column of k a layer (k = 2), with the panel
    of a layer's k (1 for k = 2 or 3), never less than one column a layer."""
    shape = (4000, 4000, k)
    config = RunConfig(dtype="float64", panel=2)
    layers = Layers.build([(0, 1, 2, 3)], 2)
    grid = Grid(2, 1)

    def need_at(rank, m, n, k):
        if k < 2:
            return 1 << 62
        return expected_layered(layers, grid, (m, n, k), config, (0,) * 4, rank, min(2, max(k // 2, 1)), False)[0]

    def total(m, n, k):
        return sum(need_at(r, m, n, k) for r in range(4))

    free = total(*target)
    largest = scaled(shape, largest_fitting(total, shape, free))
    assert largest[2] == target[2]

    def refusal(free):
        world = World(4)

        def body(rank):
            topo = SimpleNamespace(comm=world, node_comm=world.Split(0, rank), vnode=0, vnode_count=1, rank=rank,
                                   size=4)
            return layered_choices(topo, Host(free), config, shape, layers)

        outcomes = world.run(body)
        assert all(how == "raised" for how, _ in outcomes), outcomes
        return str(outcomes[0][1])

    assert refusal(free).endswith(f"the largest of this shape that fits: m={largest[0]}, n={largest[1]}, k={target[2]}")
    assert refusal(1).endswith("; nothing of this shape fits")


def test_dynamic_tiles_of_a_block_without_columns_and_of_one_rank():
    """n = 1 over two grid columns: rank 1's C block has no columns and no tiles.  One rank, one tile: one step."""
    layout = Layout(200, 1, 64, Grid(1, 2))
    got = summa_on(2, layout.grid, (0, 0), layout, dynamic(), [Host(), Host()])
    assert got[0].tiles == (tile_rows(200, False, tiles_per_block(2, 2, False)), ())
    single = Layout(40, 8, 16, Grid(1, 1))
    (one,) = summa_on(1, single.grid, (0,), single, dynamic(), [Host()])
    assert one.tiles == (((0, 40),),) and one.steps == 1


def test_remote_blocks_of_two_owners_in_a_row_add_up():
    layout = Layout(60, 90, 40, Grid(1, 3))
    from hpcmm.geometry.layout import padded

    a = [layout.local_shapes(r)["A"] for r in range(3)]
    assert remote_block_bytes(layout, 0, (0, 1, 1), 8) == sum(padded(m, 8) * k for m, k in a[1:]) * 8


def test_layers_on_shared_gpus_take_the_shared_panel():
    """4 ranks on 2 GPUs, 2 layers of 2, a deep k: the narrower panel of shared GPUs."""
    shape = (16384, 16384, 32768)
    config = RunConfig(dtype="float64")
    _, got = layered_on([(0, 1, 2, 3)], 2, (0,) * 4, shape, config, [Gpu(rank % 2) for rank in range(4)])
    layouts = [got[0][1].layer_layout(i) for i in range(2)]
    shared, alone = panel_candidates(layouts, 8, True, shared=True)[0], panel_candidates(layouts, 8, True)[0]
    assert shared < alone and {c.panel for _, _, c in got} == {shared}
