"""How the ranks of a run are arranged: each rank's weight and MPS state, and the grid they form.

Launch: ``mpiexec -n 3 python -m hpcmm --balance share`` on a node of 2 GPUs.

One collective at set-up, :func:`arrange`, once every rank has its device and
the problem its shape:

1. every rank's weight, its share of the machine (``--balance``,
   :func:`hpcmm.planning.balance.gather_balance`);
2. every rank's MPS state (:func:`hpcmm.planning.mps.detect`, on its GPU);
3. the grid shape and the order of the ranks on it whose weighted blocks are
   best balanced (:func:`hpcmm.geometry.layout.fit_grid`; an explicit ``--grid`` keeps
   its shape, and only the order of the ranks on it is chosen).

When every weight is equal (``--balance none``; ``share`` with one rank per
GPU, or ranks that share one host's CPU) nothing moves: the grid is the one
chosen without weights (``--grid``, or ``MPI.Compute_dims`` turned the way
:mod:`hpcmm.planning.grid_orientation` says for the type), the ranks keep
their launch order and the blocks are the near-equal ones.  Otherwise the
ranks may take other grid positions: the run then works on a communicator of
the same ranks in the fit's order (:func:`hpcmm.execution.placement.arranged`), so
every rank number in the results is a grid-order rank, and ``/config``
``grid_order`` maps it back to the launch rank.

Worked example: 3 ranks on 2 GPUs, ranks 0 and 2 on GPU 0.  ``share`` gives
weights ½, 1, ½; the usual grid, 3 × 1 (1 × 3 for float64 on GPUs),
balances them in launch order (its rows, or columns, in proportion ¼, ½, ¼),
so nothing moves.  With 6 ranks on 4 GPUs (ranks 0, 4 on GPU 0 and 1, 5 on
GPU 1) the wide 3 × 2 holds the weights
``[[½, ½], [1, 1], [½, ½]]``, an outer product, and keeps launch order too;
``--grid 2x3`` takes the order ``(2, 0, 4, 3, 1, 5)``, whole GPUs in its first
column.
"""

from __future__ import annotations

import dataclasses

from .balance import Balance, device_of, gather_balance
from ..errors import collective
from .grid_orientation import facing
from ..geometry.layout import GPU_BLOCK_QUANTUM, Grid, Layout, fit_grid
from .choices import tile_worker_of
from .mps import MpsState, detect, shared_without_mps, sharing_hint
from ..execution.topology import choose_grid

__all__ = ["GPU_BLOCK_QUANTUM", "Arrangement", "arrange", "arrangement_for"]



@dataclasses.dataclass(frozen=True)
class Arrangement:
    """What every rank agreed on at set-up (the same on every rank).

    Attributes
    ----------
    balance : Balance
        Weights, devices and rates, in launch order.
    mps : tuple of MpsState
        Each rank's MPS state, in launch order.
    grid : Grid
        The grid shape.
    order : tuple of int
        ``order[p]``: the launch rank at grid position ``p`` (identity: launch order).
    weighted : bool
        Whether the blocks follow the weights (``False``: every weight is
        equal, and the blocks are the near-equal ones).
    on_gpu : bool
        Whether the ranks compute on GPUs.
    face : str
        Which way the default grid faced (:func:`hpcmm.planning.grid_orientation.facing`: ``wide``, ``tall``
        or ``row``), or ``given`` where ``--grid`` gave the shape.
    """

    balance: Balance
    mps: tuple[MpsState, ...]
    grid: Grid
    order: tuple[int, ...]
    weighted: bool
    on_gpu: bool
    face: str = "wide"

    @property
    def weights(self) -> tuple[float, ...]:
        """The weights in grid order (rank ``p`` of the arranged topology holds ``weights[p]``)."""
        return tuple(self.balance.weights[i] for i in self.order)

    def layout(self, m: int, n: int, k: int) -> Layout:
        """The blocks: weighted when the weights differ (aligned to :data:`GPU_BLOCK_QUANTUM`
        on GPUs), else the near-equal ones."""
        if not self.weighted:
            return Layout(m, n, k, self.grid)
        return Layout(m, n, k, self.grid, weights=self.weights, quantum=GPU_BLOCK_QUANTUM if self.on_gpu else 1)

    def rank_facts(self, position: int) -> dict:
        """The ``/topology`` columns of the rank at grid position ``position``."""
        launch = self.order[position]
        rates = self.balance.rates
        state = self.mps[launch]
        return {"weight": self.balance.weights[launch],
                "gemm_rate": float("nan") if rates is None else float(rates[launch]),
                "ranks_per_device": self.balance.ranks_per_device[launch],
                "mps_active": bool(state.active), "mps_source": state.source}

    @property
    def shared_without_mps(self) -> dict[str, int]:
        """GPUs that several ranks share without MPS: label → ranks (empty on the CPU)."""
        if not self.on_gpu:
            return {}
        return shared_without_mps(self.balance.devices, [s.active for s in self.mps])

    @property
    def tile_worker_of(self) -> tuple[int, ...]:
        """Each grid position's ``--balance dynamic`` tile worker (:func:`hpcmm.planning.choices.tile_worker_of`;
        the positions that compute are :func:`~hpcmm.planning.choices.tile_workers`)."""
        devices = [self.balance.devices[launch].key for launch in self.order]
        return tile_worker_of(devices, [self.mps[launch].active for launch in self.order], self.on_gpu)

    @property
    def mps_everywhere(self) -> bool:
        """The ranks run under MPS: on every GPU that several ranks share (on every GPU where
        none is shared); ``False`` on the CPU."""
        if not self.on_gpu:
            return False
        shared = [s.active for s, count in zip(self.mps, self.balance.ranks_per_device) if count > 1]
        return all(shared) if shared else all(s.active for s in self.mps)

    @property
    def ranks_per_gpu(self) -> int:
        """Most ranks on one GPU (0 on the CPU)."""
        return max(self.balance.ranks_per_device) if self.on_gpu else 0

    @property
    def hint(self) -> str | None:
        """The line rank 0 prints when ranks share a GPU without MPS, else ``None``."""
        return sharing_hint(self.shared_without_mps)

    def summary(self) -> dict:
        """``/summary`` attributes: ``balance``, ``mps``, ``ranks_per_gpu``."""
        return {"balance": self.balance.mode, "mps": self.mps_everywhere, "ranks_per_gpu": self.ranks_per_gpu}

    def attributes(self, layout: Layout) -> dict:
        """``/config`` attributes: the grid's face, the weights and order of the grid, and the block sizes of
        ``layout``."""
        sizes = layout.block_sizes()
        return {"grid_face": self.face, "rank_weights": list(self.weights), "grid_order": list(self.order),
                **{f"block_{axis}": list(sizes[axis]) for axis in ("rows", "cols", "a_k", "b_k")}}


@dataclasses.dataclass(frozen=True)
class Sharing:
    """Which ranks share a device and how: every rank's device key and MPS state, in launch order."""

    devices: tuple
    mps: tuple[MpsState, ...]

    @property
    def time_sliced(self) -> bool:
        """Whether ranks share a GPU without MPS (their contexts take turns)."""
        return bool(shared_without_mps(self.devices, [state.active for state in self.mps]))


def gather_sharing(comm, host: str, backend) -> Sharing:
    """Collective over ``comm``: every rank's device and MPS state, gathered once for the whole set-up."""
    with collective(comm):
        state = detect(backend.device_id if backend.on_gpu else None)
    return Sharing(tuple(comm.allgather(device_of(backend, host))), tuple(comm.allgather(state)))


def arrange(comm, host: str, backend, config, shape: tuple[int, int, int], nodes: int = 1,
            sharing: Sharing | None = None) -> Arrangement:
    """Collective over ``comm`` (launch order): weights, MPS states and the grid of one run.

    Parameters
    ----------
    comm : MPI.Comm
        The ranks in launch order (the launch topology's ``comm``).
    host : str
        This rank's host name.
    backend : hpcmm.execution.backend.Backend
        This rank's backend, its device chosen.
    config : RunConfig
        ``balance``, ``grid`` (kept when given), ``grid_orientation``, ``dtype`` and ``tf32``.
    shape : (int, int, int)
        ``m``, ``n``, ``k`` of the product.
    nodes : int
        The run's (virtual) nodes: the default grid's face depends on it
        (:func:`hpcmm.planning.grid_orientation.facing`).
    sharing : Sharing, optional
        :func:`gather_sharing` of the same ``comm``, where the caller has it (gathered here otherwise).

    Raises
    ------
    HpcmmError
        On every rank, when any rank fails (its GEMM timing, say).
    """
    sharing = gather_sharing(comm, host, backend) if sharing is None else sharing
    balance = gather_balance(comm, config.balance, backend, host, config.dtype, tf32=config.tf32,
                             devices=sharing.devices)
    states = sharing.mps
    with collective(comm):  # the same inputs everywhere, so the same verdict
        face = facing(config.grid_orientation, config.dtype, config.tf32, backend.on_gpu, nodes,
                      shared=backend.on_gpu and balance.shared, ranks=comm.Get_size(), n=shape[1])
        return arrangement_for(balance, states, shape, config.grid, backend.on_gpu, face)


def arrangement_for(balance: Balance, mps: tuple[MpsState, ...], shape: tuple[int, int, int],
                    grid: tuple[int, int] | None = None, on_gpu: bool = True, face: str = "wide") -> Arrangement:
    """The arrangement of ranks with these weights and MPS states (pure: what :func:`arrange` decides).

    Parameters
    ----------
    balance : Balance
        Every rank's weight, in launch order.
    mps : tuple of MpsState
        Every rank's MPS state, in launch order.
    shape : (int, int, int)
        ``m``, ``n``, ``k``.
    grid : (int, int), optional
        ``--grid``: its shape is kept.
    on_gpu : bool
        Whether the ranks compute on GPUs.
    face : str
        Which way the grid faces where ``grid`` is not given (:func:`hpcmm.planning.grid_orientation.facing`).
    """
    size = len(balance.weights)
    usual = choose_grid(size, grid, face)
    chosen = "given" if grid is not None else face
    weighted = len(set(balance.weights)) > 1
    if not weighted:
        return Arrangement(balance, tuple(mps), usual, tuple(range(size)), False, on_gpu, chosen)
    fit = fit_grid(*shape, balance.weights, preferred=usual, fixed_shape=grid is not None)
    return Arrangement(balance, tuple(mps), fit.grid, fit.order, True, on_gpu, chosen)
