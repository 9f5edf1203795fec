"""Where a command runs: the topology and the backend, built together, closed together.

``run``, ``bench`` and ``info`` all start the same way: split the ranks into
nodes and a grid (:class:`~hpcmm.topology.Topology`), then pick each rank's
device (:func:`~hpcmm.backend.make_backend`)::

    with placement(comm, config) as (topo, backend):   # collective
        ...
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from mpi4py import MPI

from .backend import Backend, make_backend
from .config import RunConfig
from .errors import InputError, agree, collective, raised_everywhere
from .topology import Topology

__all__ = ["placement"]


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
