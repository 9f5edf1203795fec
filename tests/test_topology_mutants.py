"""What a rank's topology promises, one behaviour a test.

Written against the mutants that mutation testing of hpcmm/execution/topology.py left alive
(docs/mutation.md): the grid a rank count gets (a requested one, refused word for word when it does not
fit; the default turned to its face), the checks of a given grid and grid order, that closing frees
every communicator the topology made and may be repeated, and, over several ranks, each rank's place:
its rank in the grid order and in launch order, its node-local rank (launch order whatever the grid
order), its virtual node and their count, and the members of its grid row and column.  One rank runs
on ``MPI.COMM_SELF``; several are threads meeting in a stand-in communicator (``tests/thread_comm.py``)
that adds MPI's shared-memory split, by a host name given to each rank, and Cartesian communicators.
"""

from __future__ import annotations

import pytest
from mpi4py import MPI
from thread_comm import ThreadComm

from hpcmm.config import RunConfig
from hpcmm.errors import InputError
from hpcmm.execution.topology import Topology, choose_grid
from hpcmm.geometry.layout import Grid

COMMUNICATORS = ("comm", "node_comm", "vnode_comm", "cart", "row_comm", "col_comm")


class Hosts(ThreadComm):
    """Ranks as threads on named hosts (``hosts[r]`` is job rank ``r``'s), with MPI's node split and grids."""

    def Split_type(self, split_type, key=0):  # noqa: N802 - MPI's spelling
        """The ranks on this rank's host, ordered by ``(key, rank)``, as ``MPI.COMM_TYPE_SHARED`` splits."""
        assert split_type == MPI.COMM_TYPE_SHARED
        hosts = self._job.hosts
        return self.Split(sorted(set(hosts)).index(hosts[self.job_ranks[self.Get_rank()]]), key)

    def Create_cart(self, dims, periods=None, reorder=False):  # noqa: N802
        """A row-major grid of the ranks in their order (as MPI's, without reordering)."""
        rows, cols = dims
        if rows * cols != self.size:
            raise ValueError(f"a {rows}x{cols} grid of {self.size} ranks")
        cart = self.Split(0, self.Get_rank())
        cart.dims = (rows, cols)
        return cart

    def Sub(self, remain_dims):  # noqa: N802
        """The ranks that share this rank's coordinates along the dimensions not kept."""
        coords = divmod(self.Get_rank(), self.dims[1])
        color = key = 0
        for coord, extent, kept in zip(coords, self.dims, remain_dims):
            if kept:
                key = key * extent + coord
            else:
                color = color * extent + coord
        return self.Split(color, key)


def placed(hosts, config, order=None, grid=None):
    """Each launch rank's topology facts on ``hosts``, and the job's communicators after every rank closed."""
    world = Hosts(len(hosts))
    world._job.hosts = list(hosts)

    def body(rank):
        topo = Topology.create(world, config, order, grid)
        facts = dict(rank=topo.rank, size=topo.size, launch_rank=topo.launch_rank, local=topo.local_rank,
                     local_size=topo.local_size, vnode=topo.vnode, vnodes=topo.vnode_count,
                     vnode_rank=topo.vnode_comm.Get_rank(), vnode_size=topo.vnode_comm.Get_size(),
                     coords=topo.coords, row=(topo.row_comm.Get_rank(), topo.row_comm.Get_size()),
                     col=(topo.col_comm.Get_rank(), topo.col_comm.Get_size()), grid=topo.grid,
                     ranks_per_node=topo.ranks_per_node)
        topo.close()
        return facts

    outcomes = world.run(body)
    assert all(how == "returned" for how, _ in outcomes), outcomes
    return [facts for _, facts in outcomes], world.family


# -- the grid -----------------------------------------------------------------------------


def test_a_requested_grid_is_kept_when_it_holds_the_ranks():
    assert choose_grid(2, (1, 2)) == Grid(1, 2) and choose_grid(6, (2, 3), "tall") == Grid(2, 3)


@pytest.mark.parametrize("size, requested", [(4, (1, 2)), (4, (2, 3)), (2, (2, 2))], ids=["4-1x2", "4-2x3", "2-2x2"])
def test_a_requested_grid_that_does_not_hold_the_ranks_is_refused_word_for_word(size, requested):
    rows, cols = requested
    with pytest.raises(InputError) as caught:
        choose_grid(size, requested)
    assert str(caught.value) == f"--grid={rows}x{cols}: {rows}*{cols}={rows * cols} does not match {size} ranks"


@pytest.mark.parametrize("face, grid", [("wide", Grid(3, 2)), ("tall", Grid(2, 3)), ("row", Grid(1, 6))],
                         ids=["wide", "tall", "row"])
def test_the_default_grid_faces_as_asked(face, grid):
    assert choose_grid(6, None, face) == grid
    assert choose_grid(6, None) == Grid(3, 2)


def test_the_configured_grid_is_checked_against_the_ranks():
    with pytest.raises(InputError, match=r"^--grid=1x2: 1\*2=2 does not match 1 ranks$"):
        Topology.create(MPI.COMM_SELF, RunConfig(grid=(1, 2)))


def test_a_given_grid_is_taken_when_it_holds_the_ranks_and_refused_otherwise():
    topo = Topology.create(MPI.COMM_SELF, RunConfig(grid=(1, 2)), grid=Grid(1, 1))  # the given one wins
    try:
        assert topo.grid == Grid(1, 1) and topo.coords == (0, 0)
    finally:
        topo.close()
    with pytest.raises(ValueError) as caught:
        Topology.create(MPI.COMM_SELF, RunConfig(), grid=Grid(1, 2))
    assert str(caught.value) == "a 1x2 grid does not hold 1 ranks"


# -- the grid order -----------------------------------------------------------------------


def test_a_grid_order_of_one_rank_is_taken():
    topo = Topology.create(MPI.COMM_SELF, RunConfig(), order=[0])
    try:
        assert (topo.rank, topo.size, topo.launch_rank, topo.grid) == (0, 1, 0, Grid(1, 1))
    finally:
        topo.close()


@pytest.mark.parametrize("order", [(1,), (0, 0), ()], ids=["other-rank", "twice", "empty"])
def test_a_grid_order_that_is_not_a_permutation_is_refused(order):
    with pytest.raises(ValueError) as caught:
        Topology.create(MPI.COMM_SELF, RunConfig(), order=order)
    assert str(caught.value) == f"grid order {tuple(order)} is not a permutation of 1 ranks"


# -- closing ------------------------------------------------------------------------------


def test_closing_frees_every_communicator_and_may_be_repeated():
    topo = Topology.create(MPI.COMM_SELF, RunConfig(ranks_per_node=1))
    made = [getattr(topo, name) for name in COMMUNICATORS]
    assert all(c != MPI.COMM_NULL for c in made)
    topo.close()
    assert [c == MPI.COMM_NULL for c in made] == [True] * len(COMMUNICATORS)  # mpi4py nulls a freed handle
    assert all(getattr(topo, name) is None for name in COMMUNICATORS)
    topo.close()


def test_every_rank_frees_every_communicator_it_made():
    _, family = placed(["a", "a", "b", "b"], RunConfig(ranks_per_node=1))
    made = family[1:]  # all but the job's own
    assert len(made) >= len(COMMUNICATORS) and all(c.freed for c in made)


def test_the_virtual_node_size_is_recorded():
    topo = Topology.create(MPI.COMM_SELF, RunConfig(ranks_per_node=1))
    try:
        assert topo.ranks_per_node == 1 and (topo.vnode, topo.vnode_count) == (0, 1)
    finally:
        topo.close()


# -- several ranks ------------------------------------------------------------------------


def test_two_hosts_in_launch_order():
    """Rank 3 of a 2 × 2 grid sits at (1, 1): its row holds ranks 2 and 3, its column ranks 1 and 3."""
    facts, _ = placed(["a", "a", "b", "b"], RunConfig())
    assert [f["rank"] for f in facts] == [0, 1, 2, 3] and [f["launch_rank"] for f in facts] == [0, 1, 2, 3]
    assert [f["local"] for f in facts] == [0, 1, 0, 1] and {f["local_size"] for f in facts} == {2}
    assert [f["vnode"] for f in facts] == [0, 0, 1, 1] and {f["vnodes"] for f in facts} == {2}
    assert [f["coords"] for f in facts] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert [f["row"] for f in facts] == [(0, 2), (1, 2), (0, 2), (1, 2)]
    assert [f["col"] for f in facts] == [(0, 2), (0, 2), (1, 2), (1, 2)]
    assert {f["grid"] for f in facts} == {Grid(2, 2)} and {f["ranks_per_node"] for f in facts} == {None}


def test_a_grid_order_moves_grid_places_not_node_ranks():
    """Launch ranks 3, 1, 2, 0 take grid places 0..3; hosts alternate.  Node-local ranks follow the
    launch order, and virtual nodes are numbered by their first rank's place in the grid order
    (host b's first rank, launch rank 1, has place 1; host a's, launch rank 0, place 3)."""
    facts, _ = placed(["a", "b", "a", "b"], RunConfig(), order=(3, 1, 2, 0), grid=Grid(2, 2))
    assert [f["rank"] for f in facts] == [3, 1, 2, 0] and [f["launch_rank"] for f in facts] == [0, 1, 2, 3]
    assert [f["local"] for f in facts] == [0, 0, 1, 1]
    assert [f["vnode"] for f in facts] == [1, 0, 1, 0] and {f["vnodes"] for f in facts} == {2}
    assert [f["coords"] for f in facts] == [(1, 1), (0, 1), (1, 0), (0, 0)]
    assert [f["row"] for f in facts] == [(1, 2), (1, 2), (0, 2), (0, 2)]
    assert [f["col"] for f in facts] == [(1, 2), (0, 2), (1, 2), (0, 2)]


def test_a_one_row_grid_puts_every_rank_in_one_row():
    facts, _ = placed(["a"] * 3, RunConfig(grid=(1, 3)))
    assert [f["row"] for f in facts] == [(0, 3), (1, 3), (2, 3)] and [f["col"] for f in facts] == [(0, 1)] * 3


@pytest.mark.parametrize("hosts, per_node, vnodes, vnode_ranks", [
    (["a"] * 4, 2, [0, 0, 1, 1], [0, 1, 0, 1]),
    (["a"] * 4, 1, [0, 1, 2, 3], [0, 0, 0, 0]),
    (["a"] * 3, 2, [0, 0, 1], [0, 1, 0]),
    (["a"] * 4 + ["b"] * 4, 2, [0, 0, 1, 1, 2, 2, 3, 3], [0, 1] * 4),
    (["a", "b"] * 2, 1, [0, 2, 1, 3], [0] * 4),
], ids=["one-host-by-2", "one-host-by-1", "one-host-odd", "two-hosts-by-2", "alternating-by-1"])
def test_virtual_nodes_cut_each_host_into_groups_of_consecutive_ranks(hosts, per_node, vnodes, vnode_ranks):
    facts, _ = placed(hosts, RunConfig(ranks_per_node=per_node))
    assert [f["vnode"] for f in facts] == vnodes and {f["vnodes"] for f in facts} == {len(set(vnodes))}
    assert [f["vnode_rank"] for f in facts] == vnode_ranks
    sizes = [vnodes.count(v) for v in vnodes]
    assert [f["vnode_size"] for f in facts] == sizes
    assert {f["ranks_per_node"] for f in facts} == {per_node}
