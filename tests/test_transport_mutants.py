"""``hpcmm bench transport`` on the CPU, judged in this process: the pairs, the paths, the figures, the file.

Written against the mutants of hpcmm/bench/transport.py (docs/mutation.md), which no in-process test reached:
``tests/test_bench.py`` runs the command under mpiexec.  Here its ranks are threads
(:class:`~thread_comm.ThreadComm`), their node's shared memory :func:`peer_stand_ins.shared_windows`; rank 0 runs
the real placement over ``COMM_SELF``, seen as rank 0 of the job (:func:`_job`).  The clock is a stand-in
(:class:`_Clock`): :func:`lasting` (c) seconds pass between a rank's c-th reading of it and the next, so that each
figure is known exactly: the median of the timed repetitions after the untimed first one, 20 of them up to 64 MiB,
8 above.
Pinned: the pairs of ``--pairs first`` and ``all``, the paths of ranks on one node and on two, the rows of the
file in order with their seconds and GB/s, the table and the matrices printed, the bytes each raw MPI
repetition moves, a path that delivers other bytes named, the memory check to the byte and its message, the
refusals of ``--sizes``, a run of one rank, an existing file, and the default file name giving way to the next.
"""

from __future__ import annotations

import contextlib
import os
import threading
from types import SimpleNamespace

import h5py
import numpy as np
import pytest
from mpi4py import MPI
from peer_stand_ins import shared_windows
from thread_comm import ThreadComm

from hpcmm.bench import transport
from hpcmm.bench.transport import DEFAULT_SIZES_MIB, default_output, pairs_of, parse_sizes, transport_main
from hpcmm.config import RunConfig
from hpcmm.errors import InputError
from hpcmm.execution.backend import CpuBackend
from hpcmm.execution.placement import placement
from hpcmm.execution.transport.ipc import ShmPeerMemory
from hpcmm.execution.transport.mpi import DirectBroadcast
from hpcmm.io.metadata import versions

MIB = 1 << 20


def lasting(c: int) -> float:
    """Seconds between a rank's c-th reading of the clock and its next: uneven, exact in binary, 8 to 20 µs."""
    return (1.0 + (c * 37 % 101) / 64) / 131072


class _Clock:
    """mpi4py's ``MPI`` with ``Wtime`` a clock per thread: ``lasting(c)`` seconds pass between its c-th reading
    and the next."""

    def __init__(self):
        self.local = threading.local()

    def Wtime(self):  # noqa: N802 - MPI's spelling
        calls, now = getattr(self.local, "calls", 0), getattr(self.local, "now", 0.0)
        self.local.calls, self.local.now = calls + 1, now + lasting(calls)
        return now

    def __getattr__(self, name):
        return getattr(MPI, name)


def _reps(mib: int) -> int:
    return 20 if mib <= 64 else 8


def medians(sizes_mib, readings: int = 0) -> list[float]:
    """The seconds of a receiver's rows for ``sizes_mib`` in turn, after ``readings`` of its clock: each row
    reads the clock once before its untimed first repetition, then before and after each timed one."""
    out = []
    for mib in sizes_mib:
        reps = _reps(mib)
        out.append(float(np.median([lasting(readings + 2 * i - 1) for i in range(1, reps + 1)])))
        readings += 1 + 2 * reps
    return out


class _Memory:
    """A backend that reports ``free`` bytes where its blocks live (a GPU's, with ``on_gpu``)."""

    def __init__(self, backend, free: int, on_gpu: bool = False):
        self._backend, self._free, self.on_gpu = backend, free, on_gpu

    def memory_info(self):
        return self._free, 2 * self._free

    def __getattr__(self, name):
        return getattr(self._backend, name)


def _job(monkeypatch, vnodes, local_size=None, free=None, on_gpu=False):
    """Ranks as threads: rank r on virtual node ``vnodes[r]``, ``local_size`` ranks a node (by default the ranks
    of its node); the clock of :class:`_Clock`; a backend reporting ``free`` bytes where given (a list: rank r's
    ``free[r]``), seen as a GPU with ``on_gpu`` (for the memory check only: nothing runs past it)."""
    shared_windows(monkeypatch)
    monkeypatch.setattr(transport, "MPI", _Clock())

    class InJob:
        def __init__(self, comm, topo=None):
            rank = comm.Get_rank()
            self._topo, self.comm, self.rank, self.vnode = topo, comm, rank, vnodes[rank]
            self.local_size = local_size if local_size is not None else vnodes.count(vnodes[rank])

        def __getattr__(self, name):
            return getattr(self._topo, name)

    def seen(backend, rank):
        if free is None:
            return backend
        return _Memory(backend, free[rank] if isinstance(free, list) else free, on_gpu)

    @contextlib.contextmanager
    def seen_in_job(comm, config):
        if comm.Get_rank() == 0:  # the real placement, over COMM_SELF: one thread calls MPI
            with placement(MPI.COMM_SELF, config) as (topo, backend):
                yield InJob(comm, topo), seen(backend, 0)
        else:
            yield InJob(comm), seen(CpuBackend(), comm.Get_rank())

    monkeypatch.setattr(transport, "placement", seen_in_job)
    return ThreadComm(len(vnodes))


def _run(comm, ns, config):
    outcomes = comm.run(lambda rank: transport_main(ns, config, comm))
    for kind, value in outcomes:
        if kind == "raised":
            raise value
    return [value for _, value in outcomes]


def _rows(path):
    with h5py.File(path, "r") as f:
        rows = f["transport"][()]
        kind = f.attrs["kind"]
        vers = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f["versions"].attrs.items()}
    return [(r["path"].decode(), int(r["src"]), int(r["dst"]), int(r["bytes"]), float(r["seconds"]),
             float(r["gbps"])) for r in rows], kind, vers


def _expected(plan):
    """File rows of ``plan``: per receiver, in rank order, ``(paths, src, dst, sizes)`` in the order it measured."""
    rows = []
    for receiver_rows in plan:
        readings = 0
        for paths, src, dst, sizes in receiver_rows:
            for path in paths:
                for size, seconds in zip(sizes, medians(sizes, readings)):
                    rows.append((path, src, dst, size * MIB, seconds))
                readings += sum(1 + 2 * _reps(s) for s in sizes)
    return rows


def _check_rows(got, want):
    assert [r[:5] for r in got] == want
    for path, src, dst, nbytes, seconds, gbps in got:
        assert gbps == pytest.approx(nbytes / seconds / 1e9, rel=1e-12, abs=0)


# -- the runs ------------------------------------------------------------------------------------------


def test_two_ranks_of_one_node_measure_shm_mpi_and_raw_mpi(monkeypatch, tmp_path, capsys):
    """Rank 1 pulls rank 0's buffer through shm, receives its broadcast, then raw MPI; each figure is the median
    of 20 repetitions after a first one untimed; the file holds rank 1's rows and the versions; rank 0 prints."""
    comm = _job(monkeypatch, [0, 0])
    out = tmp_path / "t.h5"
    assert _run(comm, SimpleNamespace(sizes="2,1", pairs="first"), RunConfig(device="cpu", out=str(out))) == [0, 0]
    got, kind, vers = _rows(out)
    _check_rows(got, _expected([[], [(("shm", "mpi", "raw-mpi-host"), 0, 1, (2, 1))]]))
    assert kind == "bench-transport"
    assert vers == {k: v for k, v in versions().items()}
    printed = capsys.readouterr().out
    assert printed == (
        "path               pair        1 MiB        2 MiB\n"
        "shm                0->1         78.2        159.2\n"
        "mpi                0->1         80.0        162.9\n"
        "raw-mpi-host       0->1         77.2        157.1\n"
        "GB/s (bytes moved / seconds, median); d2d = one GPU's own copy, peer = cudaMemcpyPeer in one process"
        " (peer-gpu: between GPU indices, not ranks)\n"
        f"figures: {out}\n")
    assert [(m[0], m[1]) for m in comm.messages] == [(0, 1)] * 42  # raw MPI: 21 messages of each size, 0 to 1
    assert [m[2] for m in comm.messages] == [2 * MIB] * 21 + [MIB] * 21


def test_every_pair_of_three_ranks_on_two_nodes(monkeypatch, tmp_path, capsys):
    """``--pairs all``: (0, 1) on one node through shm as well, (0, 2) and (1, 2) across nodes through MPI only,
    one pair at a time; a matrix per path at its largest size, sender by row, receiver by column."""
    comm = _job(monkeypatch, [0, 0, 1])
    out = tmp_path / "t.h5"
    _run(comm, SimpleNamespace(sizes="1,3", pairs="all"), RunConfig(device="cpu", out=str(out)))
    got, _, _ = _rows(out)
    _check_rows(got, _expected([[], [(("shm", "mpi", "raw-mpi-host"), 0, 1, (1, 3))],
                                [(("mpi", "raw-mpi-host"), 0, 2, (1, 3)), (("mpi", "raw-mpi-host"), 1, 2, (1, 3))]]))
    assert [m[:2] for m in comm.messages] == [(0, 1)] * 42 + [(0, 2)] * 42 + [(1, 2)] * 42
    printed = capsys.readouterr().out
    assert printed == (
        "path               pair        1 MiB        3 MiB\n"
        "shm                0->1         79.6        234.6\n"
        "mpi                0->1         81.4        239.9\n"
        "raw-mpi-host       0->1         78.5        231.5\n"
        "mpi                0->2         79.6        234.6\n"
        "raw-mpi-host       0->2         81.4        239.9\n"
        "mpi                1->2         78.5        231.5\n"
        "raw-mpi-host       1->2         78.2        230.5\n"
        "GB/s (bytes moved / seconds, median); d2d = one GPU's own copy, peer = cudaMemcpyPeer in one process"
        " (peer-gpu: between GPU indices, not ranks)\n"
        "shm at 3 MiB, GB/s (row: sending rank, column: receiving rank)\n"
        "              0        1        2\n"
        "     0        -    234.6        -\n"
        "     1        -        -        -\n"
        "     2        -        -        -\n"
        "mpi at 3 MiB, GB/s (row: sending rank, column: receiving rank)\n"
        "              0        1        2\n"
        "     0        -    239.9    234.6\n"
        "     1        -        -    231.5\n"
        "     2        -        -        -\n"
        "raw-mpi-host at 3 MiB, GB/s (row: sending rank, column: receiving rank)\n"
        "              0        1        2\n"
        "     0        -    231.5    239.9\n"
        "     1        -        -    230.5\n"
        "     2        -        -        -\n"
        f"figures: {out}\n")


@pytest.mark.parametrize("ns", [SimpleNamespace(sizes="1", pairs="first"), SimpleNamespace(sizes="1")],
                         ids=["first", "not_given"])
def test_the_first_pairs_are_rank_0_with_each_other_rank(monkeypatch, tmp_path, capsys, ns):
    """``--pairs first`` (also where the options hold no ``pairs``): (0, 1), then (0, 2); no matrix printed."""
    comm = _job(monkeypatch, [0, 1, 1])
    out = tmp_path / "t.h5"
    _run(comm, ns, RunConfig(device="cpu", out=str(out)))
    got, _, _ = _rows(out)
    _check_rows(got, _expected([[], [(("mpi", "raw-mpi-host"), 0, 1, (1,))], [(("mpi", "raw-mpi-host"), 0, 2, (1,))]]))
    assert "GB/s (row:" not in capsys.readouterr().out


def test_sizes_up_to_64_mib_are_timed_20_times_larger_ones_8():
    """The repetitions of a size (the runs above time 20 of each small size; moving 65 MiB 9 times in threads
    would take seconds)."""
    assert [transport._reps(n) for n in (MIB, 64 * MIB, 64 * MIB + 1, 1 << 30)] == [20, 20, 8, 8]


def test_each_broadcast_moves_the_size_of_its_row(monkeypatch, tmp_path):
    """``mpi``: every repetition hands MPI a buffer of exactly the row's bytes, on both ranks of the pair."""
    handed = []

    class Recording(DirectBroadcast):
        def send(self, comm, src):
            handed.append((threading.current_thread().name, np.asarray(src).nbytes))
            return super().send(comm, src)

        def receive(self, comm, dst):
            handed.append((threading.current_thread().name, np.asarray(dst).nbytes))
            return super().receive(comm, dst)

    comm = _job(monkeypatch, [0, 1])
    monkeypatch.setattr(transport, "DirectBroadcast", Recording)
    _run(comm, SimpleNamespace(sizes="2,1", pairs="first"), RunConfig(device="cpu", out=str(tmp_path / "t.h5")))
    threads = sorted({name for name, _ in handed})
    assert len(threads) == 2
    for name in threads:
        assert [n for t, n in handed if t == name] == [2 * MIB] * 21 + [MIB] * 21


class _Corrupting(DirectBroadcast):
    """MPI that delivers every byte but one: byte ``AT`` comes in one higher."""

    AT = 0

    def receive(self, comm, dst):
        super().receive(comm, dst)
        dst[self.AT] += 1


@pytest.mark.parametrize("at", [0, MIB - 1], ids=["first_byte", "last_byte_checked"])
def test_a_path_that_delivers_other_bytes_is_named(monkeypatch, tmp_path, at):
    """The receiver checks what came in against what was sent, and fails naming the size."""
    comm = _job(monkeypatch, [0, 1])
    monkeypatch.setattr(_Corrupting, "AT", at)
    monkeypatch.setattr(transport, "DirectBroadcast", _Corrupting)
    outcomes = comm.run(lambda rank: transport_main(SimpleNamespace(sizes="2", pairs="first"),
                                                    RunConfig(device="cpu", out=str(tmp_path / "t.h5")), comm))
    kind, error = outcomes[1]
    assert kind == "raised" and isinstance(error, RuntimeError)
    assert str(error) == f"transport check failed for {2 * MIB} bytes: data differs"
    assert not (tmp_path / "t.h5").exists()


def test_a_shared_memory_pull_that_reads_other_bytes_is_named(monkeypatch, tmp_path):
    comm = _job(monkeypatch, [0, 0])

    def pull(self, dst, peer, offset, nbytes, stream=None):
        dst[:nbytes] = self.views[peer][offset : offset + nbytes]
        dst[nbytes // 2] ^= 0xFF

    monkeypatch.setattr(ShmPeerMemory, "pull", pull)
    outcomes = comm.run(lambda rank: transport_main(SimpleNamespace(sizes="1", pairs="first"),
                                                    RunConfig(device="cpu", out=str(tmp_path / "t.h5")), comm))
    kind, error = outcomes[1]
    assert kind == "raised" and str(error) == f"transport check failed for {MIB} bytes: data differs"


# -- what is refused before anything is measured ---------------------------------------------------------


def test_one_rank_is_refused():
    with pytest.raises(InputError) as info:
        transport_main(SimpleNamespace(sizes="1", pairs="first"), RunConfig(device="cpu"), MPI.COMM_SELF)
    assert str(info.value) == "bench transport needs at least 2 ranks (mpiexec -n 2 ...)"


@pytest.mark.parametrize("local_size", [2, 3], ids=["two_a_node", "three_a_node"])
def test_the_buffers_must_fit_the_host_to_the_byte(monkeypatch, tmp_path, local_size):
    """4 buffers of the largest size for every rank of the node: exactly that much free runs, a byte less is
    refused on every rank before anything is allocated or moved."""
    need = 4 * 2 * MIB * local_size
    comm = _job(monkeypatch, [0, 0], local_size=local_size, free=need)
    out = tmp_path / "t.h5"
    _run(comm, SimpleNamespace(sizes="1,2", pairs="first"), RunConfig(device="cpu", out=str(out)))
    assert out.exists()
    comm = _job(monkeypatch, [0, 0], local_size=local_size, free=need - 1)
    outcomes = comm.run(lambda rank: transport_main(SimpleNamespace(sizes="1,2", pairs="first"),
                                                    RunConfig(device="cpu", out=str(tmp_path / "u.h5")), comm))
    assert all(kind == "raised" and isinstance(error, InputError) for kind, error in outcomes)
    assert str(outcomes[1][1]).startswith(f"--sizes='1,2': 2 MiB needs 0.0 GiB of host memory (4 buffers x "
                                          f"{local_size} rank(s))")
    assert comm.messages == [] and not (tmp_path / "u.h5").exists()


def test_the_memory_refusal_names_the_size_the_need_and_what_is_free(monkeypatch, tmp_path):
    comm = _job(monkeypatch, [0, 0, 0], free=int(11.3 * 2**30))
    outcomes = comm.run(lambda rank: transport_main(SimpleNamespace(sizes="16, 1024", pairs="first"),
                                                    RunConfig(device="cpu", out=str(tmp_path / "t.h5")), comm))
    assert {str(error) for _, error in outcomes} == {
        "--sizes='16, 1024': 1024 MiB needs 12.0 GiB of host memory (4 buffers x 3 rank(s)), 11.3 GiB available"}


def test_a_gpus_buffers_must_fit_its_device(monkeypatch, tmp_path):
    comm = _job(monkeypatch, [0, 0], free=int(2.25 * 2**30), on_gpu=True)
    outcomes = comm.run(lambda rank: transport_main(SimpleNamespace(sizes="512", pairs="first"),
                                                    RunConfig(device="cpu", out=str(tmp_path / "t.h5")), comm))
    assert {str(error) for _, error in outcomes} == {
        "--sizes='512': 512 MiB needs 4.0 GiB of device memory (4 buffers x 2 rank(s)), 2.2 GiB available"}


def test_one_rank_short_of_memory_stops_every_rank(monkeypatch, tmp_path):
    """Rank 1 alone lacks the memory: every rank fails with its message, none goes on to measure."""
    need = 4 * MIB * 2
    comm = _job(monkeypatch, [0, 0], free=[need, need - 1])
    outcomes = comm.run(lambda rank: transport_main(SimpleNamespace(sizes="1", pairs="first"),
                                                    RunConfig(device="cpu", out=str(tmp_path / "t.h5")), comm))
    assert all(kind == "raised" and isinstance(error, InputError) for kind, error in outcomes), outcomes
    assert str(outcomes[0][1]).startswith("--sizes='1': 1 MiB needs 0.0 GiB of host memory (4 buffers x 2 rank(s))")
    assert comm.messages == []


@pytest.mark.parametrize("overwrite", [False, True], ids=["kept", "overwritten"])
def test_an_existing_file_is_replaced_only_when_asked(monkeypatch, tmp_path, overwrite):
    out = tmp_path / "t.h5"
    with h5py.File(out, "w") as f:
        f.attrs["kind"] = "earlier"
    comm = _job(monkeypatch, [0, 1])
    outcomes = comm.run(lambda rank: transport_main(SimpleNamespace(sizes="1", pairs="first"),
                                                    RunConfig(device="cpu", out=str(out), overwrite=overwrite), comm))
    with h5py.File(out, "r") as f:
        kind = f.attrs["kind"]
    if overwrite:
        assert outcomes == [("returned", 0)] * 2 and kind == "bench-transport"
    else:
        assert {str(error) for _, error in outcomes} == {f"--out={out}: file exists (pass --overwrite to replace it) (raised by rank 0)"}
        assert kind == "earlier" and comm.messages == []


def test_the_default_name_gives_way_to_a_run_that_took_it(monkeypatch, tmp_path, capsys):
    """No ``--out``: a new ``hpcmm-transport-...`` name in the working directory; should another run publish
    that name first, this one takes the next (``-2``) instead of failing."""
    monkeypatch.chdir(tmp_path)
    real = transport.new_output_name
    taken, lock = [], threading.Lock()

    def named_then_taken(*args, **kwargs):
        with lock:  # every rank names the file; the first naming is every rank's (they start within a second)
            if not taken:
                taken.append(real(*args, **kwargs))
                open(taken[0], "wb").close()  # another run published it meanwhile
        return taken[0]

    monkeypatch.setattr(transport, "new_output_name", named_then_taken)
    comm = _job(monkeypatch, [0, 1])
    _run(comm, SimpleNamespace(sizes="1", pairs="first"), RunConfig(device="cpu"))
    [name] = taken
    assert name.startswith("hpcmm-transport-") and name.endswith(".h5")
    assert os.path.getsize(name) == 0  # the other run's file, left as it is
    assert capsys.readouterr().out.endswith(f"figures: {name[:-3]}-2.h5\n")
    assert _rows(tmp_path / f"{name[:-3]}-2.h5")[1] == "bench-transport"


def test_a_given_name_is_kept():
    assert default_output(RunConfig(out="mine.h5"), "transport") == "mine.h5"


# -- --sizes and --pairs ------------------------------------------------------------------------------


def test_sizes_default_and_given():
    assert parse_sizes(None) == [s * MIB for s in DEFAULT_SIZES_MIB] == [s * MIB for s in (1, 4, 16, 64, 256, 1024)]
    assert parse_sizes(" 1, +16 ,1048576") == [MIB, 16 * MIB, 1 << 40]


@pytest.mark.parametrize("text, message", [
    ("0", "--sizes='0': 0 MiB is outside 1 … 1048576 MiB"),
    ("1,1048577", "--sizes='1,1048577': 1048577 MiB is outside 1 … 1048576 MiB"),
    ("-4", "--sizes='-4': -4 MiB is outside 1 … 1048576 MiB"),
    ("1,2.5", "--sizes='1,2.5': '2.5' is not a whole number of MiB (e.g. 1,16,256)"),
    ("1,,2", "--sizes='1,,2': '' is not a whole number of MiB (e.g. 1,16,256)"),
    ("4MiB", "--sizes='4MiB': '4MiB' is not a whole number of MiB (e.g. 1,16,256)"),
    ("X4", "--sizes='X4': 'X4' is not a whole number of MiB (e.g. 1,16,256)"),
], ids=["zero", "above_1_tib", "negative", "fraction", "empty", "unit", "letter_first"])
def test_sizes_refused(text, message):
    with pytest.raises(InputError) as info:
        parse_sizes(text)
    assert str(info.value) == message


def test_pairs():
    assert pairs_of(4, "first") == [(0, 1), (0, 2), (0, 3)]
    assert pairs_of(4, "all") == [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]
    assert pairs_of(2, "all") == pairs_of(2, "first") == [(0, 1)]


# -- the tables a GPU run prints -------------------------------------------------------------------------


def _gpu_rows():
    """Rows as a GPU run on two ranks gathers them (one GPU's references, the peer copies, the pairs)."""
    def row(path, src, dst, mib, gbps):
        return {"src": src, "dst": dst, "path": path, "bytes": mib * MIB, "seconds": mib * MIB / gbps / 1e9,
                "gbps": gbps}
    return [row("d2d", -1, -1, 1, 1234.56), row("d2d", -1, -1, 4, 2345.67), row("peer", -1, -1, 4, 99.95),
            row("peer-gpu", 1, 0, 4, 150.04), row("peer-gpu", 0, 3, 4, 160.0), row("peer-gpu", 0, 1, 1, 7.0),
            row("ipc", 0, 1, 1, 80.25), row("ipc", 0, 1, 4, 120.5), row("staged", 0, 1, 4, 20.0),
            row("staged-x2", 0, 1, 4, 11.0)]


def test_the_table_shows_references_without_a_pair_and_a_missing_size_as_nan(capsys):
    transport._print(_gpu_rows())
    assert capsys.readouterr().out == (
        "path               pair        1 MiB        4 MiB\n"
        "d2d                   -       1234.6       2345.7\n"
        "peer                  -          nan        100.0\n"
        "peer-gpu           1->0          nan        150.0\n"
        "peer-gpu           0->3          nan        160.0\n"
        "peer-gpu           0->1          7.0          nan\n"
        "ipc                0->1         80.2        120.5\n"
        "staged             0->1          nan         20.0\n"
        "staged-x2          0->1          nan         11.0\n"
        "GB/s (bytes moved / seconds, median); d2d = one GPU's own copy, peer = cudaMemcpyPeer in one process"
        " (peer-gpu: between GPU indices, not ranks)\n")


def test_the_matrices_cover_gpu_indices_beyond_the_ranks_and_leave_out_references(capsys):
    """``peer-gpu`` is by GPU index (4 GPUs seen by 2 ranks: 4 rows), at its largest size only; ``d2d``,
    ``peer`` (no pair) and ``staged-x2`` (concurrent transfers) get no matrix."""
    transport._print_matrices(_gpu_rows(), 2)
    assert capsys.readouterr().out == (
        "peer-gpu at 4 MiB, GB/s (row: sending GPU, column: receiving GPU)\n"
        "              0        1        2        3\n"
        "     0        -        -        -    160.0\n"
        "     1    150.0        -        -        -\n"
        "     2        -        -        -        -\n"
        "     3        -        -        -        -\n"
        "ipc at 4 MiB, GB/s (row: sending rank, column: receiving rank)\n"
        "              0        1\n"
        "     0        -    120.5\n"
        "     1        -        -\n"
        "staged at 4 MiB, GB/s (row: sending rank, column: receiving rank)\n"
        "              0        1\n"
        "     0        -     20.0\n"
        "     1        -        -\n")


class _Recorder:
    """One side of a pair: records each message it sends or receives, with its size."""

    def __init__(self, rank):
        self.rank, self.messages = rank, []

    def Get_rank(self):
        return self.rank

    def Send(self, piece, dest):
        self.messages.append(("send to", dest, piece.nbytes))

    def Recv(self, piece, source):
        self.messages.append(("receive from", source, piece.nbytes))


@pytest.mark.parametrize("rank", [0, 1], ids=["sender", "receiver"])
def test_raw_mpi_messages_fit_a_c_int_count_and_cover_the_buffer(rank):
    """A buffer past 4 GiB (a broadcast view: no memory) crosses whole, in messages an MPI without large counts
    takes (at most 2**31 - 1 bytes each)."""
    nbytes = (4 << 30) + 123
    buf = np.broadcast_to(np.zeros(1, np.uint8), (nbytes,))
    side = _Recorder(rank)
    transport._raw_mpi_move(side, buf)
    how = ("send to", 1) if rank == 0 else ("receive from", 0)
    assert {message[:2] for message in side.messages} == {how}
    sizes = [size for *_, size in side.messages]
    assert all(0 < size <= 2**31 - 1 for size in sizes) and sum(sizes) == nbytes
