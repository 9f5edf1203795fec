"""Each rank's BLAS threads, sized from the cores the rank may use.

A BLAS library starts one thread per core it sees, in every rank: on a node
where P ranks share C cores, P*C threads then fight for C cores, and the
products run several times slower than with one thread each.  hpcmm gives
each rank its share of the cores instead, with threadpoolctl:

* a CPU of the rank's affinity mask counts ``1/R`` when R ranks of the node
  have it in their masks (ranks bound to cores of their own, e.g.
  ``srun --cpus-per-task=4``, keep all of theirs; unbound ranks split the node);
* the rank's BLAS threads are the sum over its mask, rounded down, at least 1.

With 2 ranks unbound on 2 cores each rank takes 1 thread; 4 ranks bound to 4
cores each on a 16-core node take 4; 1 rank on 16 cores takes 16.

A thread count the user set (``OMP_NUM_THREADS``, ``OPENBLAS_NUM_THREADS``,
``MKL_NUM_THREADS``, ``BLIS_NUM_THREADS``) wins: the pool is left as it is, and
the setting is recorded.  What was decided goes to ``/config`` of the results
file (``blas_threads``, ``blas_threads_max``, ``affinity_cpus``,
``blas_threads_source``, ``blas_library``).
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping, Sequence

__all__ = ["BlasThreads", "attributes", "limit_blas_threads", "share_of_cpus", "threads_in_force"]

#: Variables by which a user sets the BLAS thread count; any of them set wins.
USER_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS")


def share_of_cpus(masks: Sequence[frozenset[int]], index: int) -> int:
    """BLAS threads for the rank ``index`` of a node whose ranks have affinity ``masks``.

    Examples
    --------
    >>> share_of_cpus([frozenset({0, 1})] * 2, 0)           # 2 ranks, 2 cores, unbound
    1
    >>> share_of_cpus([frozenset(range(4)), frozenset(range(4, 8))], 1)   # bound
    4
    >>> share_of_cpus([frozenset({0, 1})] * 3, 2)           # more ranks than cores
    1
    """
    holders: dict[int, int] = {}
    for mask in masks:
        for cpu in mask:
            holders[cpu] = holders.get(cpu, 0) + 1
    share = sum(1.0 / holders[cpu] for cpu in masks[index])
    return max(1, math.floor(share + 1e-9))


def _affinity() -> frozenset[int]:
    """The CPUs this process may run on (all of them where the OS cannot tell)."""
    try:
        return frozenset(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return frozenset(range(os.cpu_count() or 1))


def _blas_pools() -> list[dict]:
    from threadpoolctl import threadpool_info  # noqa: PLC0415

    return [p for p in threadpool_info() if p.get("user_api") == "blas"]


def _describe(pools: list[dict]) -> str:
    return "; ".join(f"{p.get('internal_api')} {p.get('version') or ''} ({p.get('threading_layer') or '-'})"
                     .replace("  ", " ") for p in pools) or "none found"


@dataclasses.dataclass
class BlasThreads:
    """The BLAS threads of this rank and of the run; :meth:`restore` undoes the limit."""

    threads: int
    threads_min: int
    threads_max: int
    affinity_cpus: int
    affinity_cpus_min: int
    source: str
    library: str
    _limiter: object = None

    def attributes(self) -> dict[str, object]:
        """The ``/config`` attributes: the smallest figures over the ranks, and the largest count."""
        return {"blas_threads": self.threads_min, "blas_threads_max": self.threads_max,
                "affinity_cpus": self.affinity_cpus_min, "blas_threads_source": self.source,
                "blas_library": self.library}

    def restore(self) -> None:
        """Give the BLAS pool its thread count back (what it was before the run)."""
        if self._limiter is not None:
            self._limiter.restore_original_limits()
            self._limiter = None
        if _IN_FORCE and _IN_FORCE[0] is self:
            _IN_FORCE.clear()


#: The setting of the run in progress in this process (the BLAS pool is process-wide).
_IN_FORCE: list[BlasThreads] = []


def limit_blas_threads(topo, environ: Mapping[str, str] | None = None) -> BlasThreads:
    """Size this rank's BLAS pool from its share of the node's cores.

    Collective over ``topo.comm``: the ranks of a node compare their affinity
    masks, and all ranks learn the run's smallest and largest counts.

    Parameters
    ----------
    topo : hpcmm.execution.topology.Topology
        The run's topology (``node_comm`` holds the ranks of this machine).
    environ : mapping, optional
        Where to look for a thread count the user set; ``os.environ`` by default.
    """
    environ = os.environ if environ is None else environ
    mask = _affinity()
    masks = topo.node_comm.allgather(mask)
    pools = _blas_pools()
    given = [f"{name}={environ[name]}" for name in USER_VARIABLES if environ.get(name, "").strip()]
    limiter = None
    if given:
        threads = max([p.get("num_threads", 1) for p in pools] or [1])
        source = ", ".join(given)
    else:
        threads = share_of_cpus(masks, topo.node_comm.Get_rank())
        source = "affinity"
        if pools:
            from threadpoolctl import threadpool_limits  # noqa: PLC0415

            limiter = threadpool_limits(limits=threads, user_api="blas")
    counts = topo.comm.allgather((threads, len(mask)))
    setting = BlasThreads(threads=threads, threads_min=min(c[0] for c in counts),
                          threads_max=max(c[0] for c in counts), affinity_cpus=len(mask),
                          affinity_cpus_min=min(c[1] for c in counts), source=source,
                          library=_describe(pools), _limiter=limiter)
    _IN_FORCE[:] = [setting]
    return setting


def attributes() -> dict[str, object]:
    """The ``/config`` attributes of the setting in force in this process (none: ``{}``)."""
    return _IN_FORCE[0].attributes() if _IN_FORCE else {}


def threads_in_force() -> int:
    """This rank's thread count for its own parallel host work: the BLAS share of the run in progress (none: 1)."""
    return _IN_FORCE[0].threads if _IN_FORCE else 1
