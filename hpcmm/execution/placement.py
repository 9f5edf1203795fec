"""Where a command runs: the topology and the backend, built together, closed together.

``run``, ``bench`` and ``info`` all start the same way: split the ranks into
nodes and a grid (:class:`~hpcmm.execution.topology.Topology`), then pick each rank's
device (:func:`~hpcmm.execution.backend.make_backend`)::

    with placement(comm, config) as (topo, backend):   # collective
        ...

A run may then place the same ranks on the grid in another order, one whose
weighted blocks balance better (:mod:`hpcmm.planning.arrangement`)::

    with arranged(topo, config, order, grid) as grid_topo:   # collective
        ...
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

from mpi4py import MPI

from .backend import Backend, make_backend
from ..planning.balance import ranks_on_my_device
from ..config import RunConfig
from ..errors import InputError, agree, collective, raised_everywhere
from ..geometry.layout import Grid
from .topology import Topology

__all__ = ["arranged", "placement"]


@contextlib.contextmanager
def placement(comm: MPI.Comm, config: RunConfig) -> Iterator[tuple[Topology, Backend]]:
    """Collective over ``comm``: yield ``(topology, backend)``, close both on the way out.

    The topology's communicators are freed collectively, so only where every
    rank leaves together (:func:`~hpcmm.errors.raised_everywhere`); after an
    error of this rank alone both are left to the end of the job, which the
    caller brings (``cli.main`` aborts it).

    Raises
    ------
    InputError
        On every rank: a grid that does not fit the ranks, a device that is not
        there, or ranks of which some found a GPU and some did not.
    """
    topo = Topology.create(comm, config)
    backend = None
    error = None
    try:
        with collective(topo.comm):
            backend = make_backend(config.device, topo.local_rank, topo.local_size)
        if len(set(topo.comm.allgather(backend.on_gpu))) > 1:
            agree(topo.comm, InputError(f"{config.origin('device')}={config.device}: some ranks found a GPU and some did not"))
        # the GEMM library plans only where a rank has its GPU alone (hpcmm.execution.gemm_library)
        backend.use_gemm_library(config.gemm_library, sharers=ranks_on_my_device(topo.node_comm, backend, topo.host))
        yield topo, backend
    except BaseException as exc:
        error = exc
        raise
    finally:
        # After an error of this rank alone, leave even the backend: its streams may wait on
        # a peer's event that the peer, stuck in a collective, never records.
        if raised_everywhere(error):
            if backend is not None:
                backend.close()
            topo.close()


@contextlib.contextmanager
def arranged(topo: Topology, config: RunConfig, order: Sequence[int], grid: Grid) -> Iterator[Topology]:
    """Collective: the ranks of ``topo`` with launch rank ``order[p]`` at grid position ``p`` of ``grid``.

    ``topo`` itself where ``order`` is its own and ``grid`` its shape; else a
    topology of its own (nodes and devices as in ``topo``), freed on the way
    out under the same rule as :func:`placement`'s.
    """
    if tuple(order) == tuple(range(topo.size)) and grid == topo.grid:
        yield topo
        return
    ordered = Topology.create(topo.comm, config, order=order, grid=grid)
    error = None
    try:
        yield ordered
    except BaseException as exc:
        error = exc
        raise
    finally:
        if raised_everywhere(error):
            ordered.close()
