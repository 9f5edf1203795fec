"""Where each rank runs: node, GPU, process grid, node peers.

Launch: ``mpiexec -n 4 python -m hpcmm``.  With 4 ranks on one node of 2 GPUs,
node-local ranks 0..3 take GPUs 0, 1, 0, 1 (reported as oversubscribed); the
grid is ``MPI.Compute_dims(4, 2) == [2, 2]`` and rank 3 sits at (1, 1), its row
communicator holding ranks 2 and 3, its column communicator ranks 1 and 3.

Virtual nodes (``--ranks-per-node R``) cut each machine's ranks into groups of
R consecutive node-local ranks and treat every group as a node of its own, so
that the paths between nodes run, and are tested, on one machine.
"""

from __future__ import annotations

import dataclasses
import socket
from collections.abc import Sequence

from mpi4py import MPI

from ..config import RunConfig
from ..errors import InputError
from ..planning.grid_orientation import oriented
from ..geometry.layout import Grid

__all__ = ["Topology", "choose_grid"]


def choose_grid(size: int, requested: tuple[int, int] | None, face: str = "wide") -> Grid:
    """The process grid: ``requested`` if it fits ``size`` ranks, else ``MPI.Compute_dims`` turned to ``face``.

    ``face`` (:mod:`hpcmm.planning.grid_orientation`): ``wide`` keeps ``MPI.Compute_dims``'s ``rows >= cols``,
    ``tall`` turns it to ``rows <= cols``, ``row`` makes it one process row (``1 × size``).
    """
    if requested is not None:
        rows, cols = requested
        if rows * cols != size:
            raise InputError(
                f"--grid={rows}x{cols}: {rows}*{cols}={rows * cols} does not match {size} ranks"
            )
        return Grid(rows, cols)
    rows, cols = MPI.Compute_dims(size, 2)
    return oriented(rows, cols, face)


@dataclasses.dataclass
class Topology:
    """Communicators and placement of one rank.  Build with :meth:`create`; free with :meth:`close`."""

    comm: MPI.Comm
    node_comm: MPI.Comm
    vnode_comm: MPI.Comm
    cart: MPI.Cartcomm
    row_comm: MPI.Comm
    col_comm: MPI.Comm
    grid: Grid
    host: str
    vnode: int
    vnode_count: int
    ranks_per_node: int | None
    #: This rank's rank in the communicator the topology was made from (launch order).
    launch_rank: int = 0
    #: This rank and the rank count in ``comm``, and on its node (``node_comm``): fixed for
    #: the topology's life, so read once.
    rank: int = dataclasses.field(init=False)
    size: int = dataclasses.field(init=False)
    local_rank: int = dataclasses.field(init=False)
    local_size: int = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        self.local_rank, self.local_size = self.node_comm.Get_rank(), self.node_comm.Get_size()

    @classmethod
    def create(cls, comm: MPI.Comm, config: RunConfig, order: Sequence[int] | None = None,
               grid: Grid | None = None) -> Topology:
        """Collective over ``comm``: split by node, by virtual node, and into the grid.

        Parameters
        ----------
        comm : MPI.Comm
            The ranks, in launch order.
        config : RunConfig
            ``grid`` (when ``grid`` is not given) and ``ranks_per_node``.
        order : sequence of int, optional
            ``order[p]`` is the rank of ``comm`` that takes rank ``p`` of the
            topology, and so grid position ``p`` (:class:`~hpcmm.geometry.layout.GridFit`).
            ``None``: launch order.  Nodes, virtual nodes and node-local ranks
            follow the launch order either way, so a rank keeps the device it
            was given.
        grid : Grid, optional
            The grid shape; ``None``: ``config.grid`` or ``MPI.Compute_dims``.

        Raises
        ------
        InputError
            For a grid that does not multiply to the rank count (on every rank).
        """
        size = comm.Get_size()
        if grid is None:
            grid = choose_grid(size, config.grid)  # same verdict on every rank
        elif grid.size != size:
            raise ValueError(f"a {grid} grid does not hold {size} ranks")
        launch_rank = comm.Get_rank()
        if order is None:
            comm = comm.Dup()
        else:
            if sorted(order) != list(range(size)):
                raise ValueError(f"grid order {tuple(order)} is not a permutation of {size} ranks")
            comm = comm.Split(0, list(order).index(launch_rank))
        node_comm = comm.Split_type(MPI.COMM_TYPE_SHARED, key=launch_rank)
        group = 0
        if config.ranks_per_node is not None:
            group = node_comm.Get_rank() // config.ranks_per_node
        vnode_comm = node_comm.Split(group, node_comm.Get_rank())
        # A global index per virtual node: (world rank of the node's first rank, group).
        node_leader = node_comm.bcast(comm.Get_rank(), root=0)
        keys = comm.allgather((node_leader, group))
        ordered = sorted(set(keys))
        vnode = ordered.index((node_leader, group))
        cart = comm.Create_cart([grid.rows, grid.cols], periods=[False, False], reorder=False)
        row_comm = cart.Sub([False, True])
        col_comm = cart.Sub([True, False])
        return cls(
            comm=comm,
            node_comm=node_comm,
            vnode_comm=vnode_comm,
            cart=cart,
            row_comm=row_comm,
            col_comm=col_comm,
            grid=grid,
            host=socket.gethostname(),
            vnode=vnode,
            vnode_count=len(ordered),
            ranks_per_node=config.ranks_per_node,
            launch_rank=launch_rank,
        )

    @property
    def coords(self) -> tuple[int, int]:
        return self.grid.coords(self.rank)

    def close(self) -> None:
        """Free every communicator this topology made."""
        for name in ("row_comm", "col_comm", "cart", "vnode_comm", "node_comm", "comm"):
            c = getattr(self, name)
            if c is not None and c != MPI.COMM_NULL:
                c.Free()
            setattr(self, name, None)
