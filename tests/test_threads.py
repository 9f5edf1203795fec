"""BLAS threads per rank: the share of the node's cores, and what the results file records."""

from __future__ import annotations

import os
import sys

import h5py
import pytest
from launcher import find_mpiexec, quiet_environment, run_launcher
from threadpoolctl import threadpool_info

from hpcmm.planning import threads
from hpcmm.planning.threads import USER_VARIABLES, share_of_cpus


@pytest.mark.parametrize("masks, expected", [
    ([{0, 1}, {0, 1}], [1, 1]),                                  # 2 ranks unbound on 2 cores
    ([{0, 1}], [2]),                                            # 1 rank takes the node
    ([set(range(16))] * 4, [4, 4, 4, 4]),                       # unbound: 16 cores / 4 ranks
    ([set(range(4)), set(range(4, 8))], [4, 4]),                # bound to 4 cores each
    ([set(range(8)), set(range(8))] + [{8, 9}], [4, 4, 2]),     # two share 8, one has 2 alone
    ([{0, 1}] * 3, [1, 1, 1]),                                  # more ranks than cores: at least 1
    ([set(range(6))] * 4, [1, 1, 1, 1]),                        # 1.5 each, rounded down
])
def test_share_of_cpus(masks, expected):
    masks = [frozenset(m) for m in masks]
    assert [share_of_cpus(masks, i) for i in range(len(masks))] == expected


class _Comm:
    """A one-process stand-in for the communicators limit_blas_threads gathers over."""

    def __init__(self, others):
        self.others = others

    def allgather(self, value):
        return [value, *self.others]

    def Get_rank(self):
        return 0


class _Topo:
    def __init__(self, node_masks):
        self.node_comm = _Comm(node_masks)
        self.comm = _Comm([])


def _blas_threads() -> int:
    return max(p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas")


def test_limit_sets_the_pool_and_restore_gives_it_back():
    mask = frozenset(os.sched_getaffinity(0))
    before = _blas_threads()
    # Pretend one more rank shares this rank's cores: half of them each.
    setting = threads.limit_blas_threads(_Topo([mask]), environ={})
    try:
        assert setting.threads == max(1, len(mask) // 2) == _blas_threads()
        assert setting.source == "affinity" and setting.affinity_cpus == len(mask)
        attrs = threads.attributes()
        assert attrs["blas_threads"] == setting.threads and attrs["affinity_cpus"] == len(mask)
        assert "openblas" in attrs["blas_library"] or "mkl" in attrs["blas_library"]
    finally:
        setting.restore()
    assert _blas_threads() == before
    assert threads.attributes() == {}


@pytest.mark.parametrize("name", USER_VARIABLES)
def test_a_count_the_user_set_wins(name):
    before = _blas_threads()
    setting = threads.limit_blas_threads(_Topo([frozenset(os.sched_getaffinity(0))] * 7), environ={name: "3"})
    try:
        assert setting.source == f"{name}=3"
        assert setting.threads == before == _blas_threads()  # the pool is left alone
    finally:
        setting.restore()


def test_two_ranks_record_their_share(tmp_path):
    """Without a thread variable each of 2 ranks takes half the cores; the file says so."""
    mpiexec = find_mpiexec()
    if mpiexec is None:
        pytest.skip("no mpiexec beside this Python or on PATH")
    env = {k: v for k, v in quiet_environment().items() if k not in USER_VARIABLES}
    env["HPCMM_DEVICE"] = "cpu"
    out = tmp_path / "t.h5"
    proc = run_launcher([mpiexec, "-n", "2", sys.executable, "-m", "hpcmm", "--m", "13", "--n", "9", "--k", "7",
                         "--quiet", "--out", str(out)], 120, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stdout
    cpus = len(os.sched_getaffinity(0))
    with h5py.File(out, "r") as f:
        config = f["config"].attrs
        assert config["blas_threads_source"] == "affinity"
        assert int(config["affinity_cpus"]) == cpus
        assert int(config["blas_threads"]) == int(config["blas_threads_max"]) == max(1, cpus // 2)
