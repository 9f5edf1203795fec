"""What the BLAS thread setting promises, one behaviour a test.

Written against the mutants that mutation testing of hpcmm/planning/threads.py left alive
(docs/mutation.md): the CPUs a rank counts (its own affinity mask, or every CPU where the OS cannot
tell), the ``/config`` attributes word for word (the library's description, the user's settings,
the run's largest count), the process environment read when none is passed, BLAS pools limited and
OpenMP pools left alone, a restore that is safe twice and never undoes a later setting, and the
count :func:`~hpcmm.planning.threads.threads_in_force` hands to host work.  Where the pools matter,
``threadpoolctl.threadpool_info`` is replaced by a stand-in that lists pools of known figures.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

import numpy  # noqa: F401 - loads numpy's BLAS: the pool these tests size
import pytest
import threadpoolctl

from hpcmm.planning.threads import USER_VARIABLES, attributes, limit_blas_threads, threads_in_force


class _Comm:
    """A one-process stand-in for a communicator: this rank first, then what the others gave."""

    def __init__(self, others=()):
        self.others = list(others)

    def allgather(self, value):
        return [value, *self.others]

    def Get_rank(self):  # noqa: N802 - MPI's spelling
        return 0


class _Topo:
    def __init__(self, node_masks=(), ranks=()):
        self.node_comm = _Comm(node_masks)  # the other ranks of this node: their affinity masks
        self.comm = _Comm(ranks)  # the other ranks of the run: (threads, affinity CPUs)


@pytest.fixture
def no_user_setting(monkeypatch):
    for name in USER_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def pools(monkeypatch):
    """Replace the pools threadpoolctl reports by the list the test fills in."""
    listed: list[dict] = []
    monkeypatch.setattr(threadpoolctl, "threadpool_info", lambda: listed)
    return listed


def _limited(topo, environ):
    """``limit_blas_threads``'s setting and the attributes and thread count in force under it (then restored)."""
    setting = limit_blas_threads(topo, environ=environ)
    try:
        return setting, attributes(), threads_in_force()
    finally:
        setting.restore()


# -- the CPUs a rank counts -----------------------------------------------------------------


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no affinity masks here")
def test_a_rank_counts_the_cpus_of_its_own_mask():
    """Bound to one CPU: one CPU and one thread, whatever the machine (or its first process) has."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(before)})
    try:
        setting, attrs, in_force = _limited(_Topo(), {"OMP_NUM_THREADS": "1"})
    finally:
        os.sched_setaffinity(0, before)
    assert setting.affinity_cpus == 1 and attrs["affinity_cpus"] == 1


@pytest.mark.parametrize("cpus, counted", [(6, 6), (None, 1)])
@pytest.mark.parametrize("missing", ["attribute", "error"])
def test_where_the_os_keeps_the_mask_every_cpu_counts(monkeypatch, no_user_setting, pools, cpus, counted, missing):
    """No ``sched_getaffinity`` (not Linux), or one that fails: all ``os.cpu_count()`` CPUs, 1 where unknown."""
    if missing == "attribute":
        monkeypatch.delattr(os, "sched_getaffinity", raising=False)
    else:
        def refuse(pid):
            raise OSError(38, "Function not implemented")
        monkeypatch.setattr(os, "sched_getaffinity", refuse)
    monkeypatch.setattr(os, "cpu_count", lambda: cpus)
    setting, attrs, in_force = _limited(_Topo(), {})
    assert setting.affinity_cpus == counted and setting.threads == counted and in_force == counted


# -- the /config attributes -----------------------------------------------------------------


def test_the_attributes_name_the_pools_and_the_users_settings(pools):
    """Two BLAS pools (one without version or threading layer), an OpenMP pool that is not BLAS, two settings."""
    pools += [{"user_api": "blas", "internal_api": "openblas", "version": "0.3.27", "threading_layer": "pthreads",
               "num_threads": 4},
              {"user_api": "openmp", "internal_api": "openmp", "version": None, "num_threads": 16},
              {"user_api": "blas", "internal_api": "mkl", "version": None, "threading_layer": None}]
    environ = {"OMP_NUM_THREADS": "4", "MKL_NUM_THREADS": " 2 ", "BLIS_NUM_THREADS": " "}
    topo = _Topo(ranks=[(2, 8), (3, 8)])  # two more ranks: 2 and 3 threads on 8 CPUs each
    setting, attrs, in_force = _limited(topo, environ)
    mask = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert attrs == {"blas_threads": 2, "blas_threads_max": 4, "affinity_cpus": min(mask, 8),
                     "blas_threads_source": "OMP_NUM_THREADS=4, MKL_NUM_THREADS= 2 ",
                     "blas_library": "openblas 0.3.27 (pthreads); mkl (-)"}
    assert setting.threads == 4 == in_force  # the largest pool, left as it is


@pytest.mark.parametrize("listed, threads_seen", [([], 1), ([{"user_api": "blas", "internal_api": "blis"}], 1)])
def test_without_a_count_a_user_set_the_pool_is_taken_as_one_thread(pools, listed, threads_seen):
    pools += listed
    setting, attrs, in_force = _limited(_Topo(), {"OPENBLAS_NUM_THREADS": "8"})
    assert setting.threads == threads_seen == in_force
    assert attrs["blas_library"] == ("none found" if not listed else "blis (-)")


def test_the_process_environment_is_read_when_none_is_given(monkeypatch, no_user_setting):
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "3")
    setting = limit_blas_threads(_Topo())
    try:
        assert setting.source == "OPENBLAS_NUM_THREADS=3"
    finally:
        setting.restore()


@pytest.mark.skipif(not ctypes.util.find_library("gomp"), reason="no OpenMP runtime to load")
def test_only_blas_pools_are_limited(no_user_setting):
    """An OpenMP runtime in the process keeps its thread count; the BLAS share applies to BLAS."""
    ctypes.CDLL(ctypes.util.find_library("gomp"))
    mask = frozenset(os.sched_getaffinity(0))
    openmp = [p for p in threadpoolctl.threadpool_info() if p["user_api"] == "openmp"]
    if not openmp or len(mask) < 2:
        pytest.skip("no OpenMP pool, or one CPU: the share would equal its count")
    before = [p["num_threads"] for p in openmp]
    setting = limit_blas_threads(_Topo([mask]), environ={})  # another rank shares the cores: half each
    try:
        assert setting.threads == len(mask) // 2
        assert [p["num_threads"] for p in threadpoolctl.threadpool_info() if p["user_api"] == "openmp"] == before
    finally:
        setting.restore()


# -- restore and the setting in force -------------------------------------------------------


def test_restore_gives_the_blas_pool_its_count_back(no_user_setting):
    """The pool at one thread a CPU, then the rank's half share, then back to one a CPU."""
    mask = frozenset(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else frozenset(range(os.cpu_count()))
    if len(mask) < 2 or not [p for p in threadpoolctl.threadpool_info() if p["user_api"] == "blas"]:
        pytest.skip("no BLAS pool, or one CPU: the share would equal the count")

    def blas():
        return {p["num_threads"] for p in threadpoolctl.threadpool_info() if p["user_api"] == "blas"}

    with threadpoolctl.threadpool_limits(limits=len(mask), user_api="blas"):
        setting = limit_blas_threads(_Topo([mask]), environ={})
        assert blas() == {len(mask) // 2}
        setting.restore()
        assert blas() == {len(mask)}


def test_restore_twice_is_harmless(no_user_setting):
    setting = limit_blas_threads(_Topo(), environ={})
    setting.restore()
    setting.restore()
    assert attributes() == {} and threads_in_force() == 1


def test_restoring_an_earlier_setting_keeps_the_later_one_in_force(pools):
    pools.append({"user_api": "blas", "internal_api": "openblas", "version": "0.3.27", "num_threads": 3})
    first = limit_blas_threads(_Topo(), environ={"OMP_NUM_THREADS": "3"})
    second = limit_blas_threads(_Topo(), environ={"MKL_NUM_THREADS": "3"})
    try:
        first.restore()
        assert attributes()["blas_threads_source"] == "MKL_NUM_THREADS=3" and threads_in_force() == 3
    finally:
        second.restore()
    assert attributes() == {} and threads_in_force() == 1
