"""Weighted blocks under MPI: the weights every rank agrees on, and products over uneven weights.

Run with::

    mpiexec -n 4 python -m pytest --with-mpi tests/mpi

(``tests/test_mpi_suite.py`` does this for 1, 2, 3 and 4 ranks.)  The engine
runs here on a weighted :class:`~hpcmm.geometry.layout.Layout` directly, so products
over uneven blocks are checked against numpy before any option selects them.
Verdicts are shared with every rank before any rank asserts.
"""

from __future__ import annotations

import socket

import numpy as np
import pytest
from mpi4py import MPI

from hpcmm.execution.backend import CpuBackend, make_backend
from hpcmm.planning.balance import MODES, Device, gather_balance
from hpcmm.config import RunConfig
from hpcmm.planning.assemble import engine_for
from hpcmm.errors import HpcmmError
from hpcmm.io.inputs import generate_block
from hpcmm.geometry.layout import Grid, Layout, fit_grid, predicted_imbalance
from hpcmm.execution.topology import Topology
from hpcmm.verify import tolerance

COMM = MPI.COMM_WORLD
RANK = COMM.Get_rank()
P = COMM.Get_size()


def everywhere(ok: bool, message: str = "") -> None:
    """Assert on every rank that every rank's ``ok`` holds; the message names the failing ranks."""
    verdicts = COMM.allgather((bool(ok), message))
    failed = [f"rank {r}: {m}" for r, (good, m) in enumerate(verdicts) if not good]
    assert not failed, "; ".join(failed)


@pytest.mark.mpi
@pytest.mark.parametrize("mode", [mode for mode in MODES if mode != "auto"])  # auto: the planner's mode_for first
def test_every_rank_gets_the_same_weights(mode):
    """One host's CPU shared by all ranks: share gives 1/P each; measured gives positive rates, fastest 1."""
    backend = CpuBackend()
    host = socket.gethostname()
    balance = gather_balance(COMM, mode, backend, host, "float64", size=48)
    everyone = COMM.allgather(balance)
    everywhere(all(b == balance for b in everyone), f"ranks disagree: {everyone}")
    everywhere(balance.devices == (Device(host),) * P, f"devices {balance.devices}")
    everywhere(balance.ranks_per_device == (P,) * P, f"ranks per device {balance.ranks_per_device}")
    everywhere(len(balance.weights) == P, f"{balance.weights}")
    if mode in ("share", "product", "dynamic"):  # product: share until a product has run; dynamic starts there
        everywhere(balance.weights == (1.0 / P,) * P and balance.rates is None, f"{balance}")
    elif mode == "none":
        everywhere(balance.weights == (1.0,) * P and balance.rates is None, f"{balance}")
    else:
        rates = balance.rates or ()
        everywhere(len(rates) == P and all(np.isfinite(r) and r > 0 for r in rates), f"rates {rates}")
        everywhere(max(balance.weights) == 1.0 and min(balance.weights) > 0, f"weights {balance.weights}")
        everywhere(balance.weights == tuple(r / max(rates) for r in rates), f"{balance}")


@pytest.mark.mpi
def test_a_bad_mode_fails_on_every_rank():
    message = ""
    try:
        gather_balance(COMM, "fastest", CpuBackend(), socket.gethostname(), "float64")
    except (ValueError, HpcmmError) as exc:
        message = str(exc)
    everywhere("--balance='fastest'" in message, message or "no error")


def uneven_weights(size: int) -> list[float]:
    """Weights 1, ½, ⅓, 2, ... so that no two neighbours are equal."""
    cycle = [1.0, 0.5, 1 / 3, 2.0]
    return [cycle[i % len(cycle)] for i in range(size)]


@pytest.mark.mpi
@pytest.mark.parametrize("shape", ["fit", "dims"])
@pytest.mark.parametrize("ranks_per_node", [None, 1])
@pytest.mark.parametrize("dims, panel, prefetch", [((29, 23, 31), None, 1), ((17, 40, 26), 3, 2), ((5, 3, 7), 1, 0)])
def test_product_over_weighted_blocks(shape, ranks_per_node, dims, panel, prefetch):
    """Blocks that follow uneven weights, on the shared-memory path and through MPI: C equals A @ B.

    ``fit``: the grid and placement :func:`fit_grid` picks (1-D grids balance
    any weights); ``dims``: the unweighted grid shape (2 × 2 at 4 ranks), the
    ranks placed on it by the fit.
    """
    m, n, k = (d + P for d in dims)
    weights = uneven_weights(P)
    if shape == "fit":
        fit = fit_grid(m, n, k, weights)
    else:
        fit = fit_grid(m, n, k, weights, preferred=Grid(*MPI.Compute_dims(P, 2)), fixed_shape=True)
    uneven = Layout(m, n, k, fit.grid, weights=fit.weights).block_sizes() != Layout(m, n, k, fit.grid).block_sizes()
    everywhere(uneven or P == 1, f"weights {fit.weights} on {fit.grid} give equal blocks: nothing tested")
    # The grid positions follow the fit's placement: rank order[p] sits at position p.
    position = fit.order.index(RANK)
    comm = COMM.Split(0, position)
    topo = engine = None
    backend = make_backend("cpu", 0, 1)
    try:
        topo = Topology.create(comm, RunConfig(grid=(fit.grid.rows, fit.grid.cols), ranks_per_node=ranks_per_node))
        layout = Layout(m, n, k, topo.grid, weights=fit.weights)
        everywhere(predicted_imbalance(layout) == fit.imbalance, "layout and fit disagree")
        engine = engine_for(topo, backend, layout, RunConfig(panel=panel, prefetch=prefetch, timeline=False),
                            cuda_aware=False)
        me = topo.rank
        (ar, ac), (br, bc) = layout.a_block(me), layout.b_block(me)
        engine.load(generate_block(5, "A", (m, k), ar, ac, "float64"), generate_block(5, "B", (k, n), br, bc, "float64"))
        engine.multiply()
        pieces = topo.comm.gather((layout.c_block(me), backend.to_host(engine.C)), root=0)
        steps = engine.steps
    finally:
        if engine is not None:
            engine.close()
        if topo is not None:
            topo.close()
        comm.Free()
    message = ""
    if pieces is not None:
        a = generate_block(5, "A", (m, k), (0, m), (0, k), "float64")
        b = generate_block(5, "B", (k, n), (0, k), (0, n), "float64")
        c = np.full((m, n), np.nan)
        for ((r0, r1), (c0, c1)), block in pieces:
            c[r0:r1, c0:c1] = block
        error = float(np.nanmax(np.abs(c - a @ b) / (np.abs(a) @ np.abs(b))))
        if not np.isfinite(c).all():
            message = f"{np.count_nonzero(~np.isfinite(c))} element(s) of C never written"
        elif error > tolerance("float64", k, steps, False):
            message = f"max componentwise error {error:.3e} on weights {fit.weights}"
    everywhere(not message, message)


# -- the panel's collectives (choices.gpus_shared, choices.widest_fitting) on real communicators --------


class _GpuLike:
    """What the two collectives read of a GPU backend: its device and that device's free bytes."""

    on_gpu = True

    def __init__(self, device_id: int, free: int) -> None:
        self.device_id, self.free = device_id, free

    def memory_info(self) -> tuple[int, int]:
        return self.free, 2 * self.free


@pytest.mark.mpi
@pytest.mark.parametrize("devices", [1, 2, 8])
def test_panel_collectives_give_every_rank_one_answer(devices):
    """Ranks on ``devices`` GPUs (node-local rank modulo): shared where some GPU holds two ranks; the
    width is the first that fits on every device, the ranks of one device counted together."""
    from hpcmm.planning.choices import gpus_shared, widest_fitting

    topo = Topology.create(COMM, RunConfig())
    try:
        device = topo.local_rank % devices
        per_device = COMM.allgather(device).count(device)  # one host here: the node is the world
        shared = gpus_shared(topo, _GpuLike(device, 0))
        everywhere(shared == (max(COMM.allgather(per_device)) > 1), f"shared {shared}, {per_device} per device")
        widths = [8192, 4096, 2048]
        need = {8192: 40, 4096: 20, 2048: 10}
        # Room for 2 ranks at 4096 (40 bytes): one rank per device fits 8192; two, 4096; more, 2048.
        width = widest_fitting(topo, _GpuLike(device, 40), widths, need.__getitem__)
        busiest = max(COMM.allgather(per_device))
        expected = 8192 if busiest == 1 else 4096 if busiest == 2 else 2048
        everywhere(width == expected, f"width {width}, expected {expected} ({busiest} ranks on the busiest device)")
        everywhere(len(set(COMM.allgather(width))) == 1, "ranks disagree on the width")
    finally:
        topo.close()
