"""``python -m hpcmm bench transport``: GB/s of each data path between rank pairs.

For the pairs (0, r), r = 1 … P−1 (``--pairs all``: every pair (i, j), i < j,
one pair at a time while the other ranks wait), and sizes from 1 MiB to 1 GiB,
rank r (j) receives a buffer of rank 0's (i's) through every path it can use,
through the same transport classes the product uses:

* ``ipc`` (GPU, same node) and ``shm`` (CPU, same node): a pull from the
  peer's exported buffer;
* ``mpi``: an MPI broadcast of the backend's own buffers (device buffers on
  GPU only where MPI is CUDA-aware);
* ``staged``: device → pinned host → MPI → device (GPU).

Beside them, measured in the same run: the device-to-device copy rate of one
GPU (``d2d``), the copies between a GPU and pinned host memory (``d2h``,
``h2d``: what each chunk of ``staged`` costs before and after MPI), the peer
copy between two GPUs inside one process (``peer``, ``cudaMemcpyPeerAsync``:
what IPC pulls should reach), and the raw MPI rate without hpcmm
(``raw-mpi-device`` where MPI is CUDA-aware, ``raw-mpi-host`` with host
buffers).  GB/s are bytes moved ÷ seconds (each byte counted once).

On a GPU with 4 ranks or more, ``staged-xK`` times K staged transfers at once:
the pairs (0, 1), (2, 3), … of the first 2K ranks each move the same size at
the same time (K = 2 … P/2), as the leaders of a product's channels do; each
receiver's time is a row.  ``model measure`` fits the host's aggregate from
them (what all staged transfers of a host move together).

    mpiexec -n 8 python -m hpcmm bench transport --sizes 4,16,64,128 --out links.h5
"""

from __future__ import annotations

from functools import partial

import numpy as np
from mpi4py import MPI

from ..io import h5io
from ..config import TRANSPORT_SIZES_MIB, RunConfig, new_output_name
from ..errors import InputError, collective
from ..io.metadata import versions
from ..execution.placement import placement
from ..execution.transport import decide
from ..execution.transport.ipc import IpcPeerMemory, ShmPeerMemory
from ..execution.transport.mpi import DirectBroadcast, StagedBroadcast

__all__ = ["transport_main", "pairs_of", "parse_sizes", "default_output", "DEFAULT_SIZES_MIB"]

DEFAULT_SIZES_MIB = TRANSPORT_SIZES_MIB
#: Largest size --sizes takes (MiB): 1 TiB, far beyond any device, small enough for every integer type.
MAX_SIZE_MIB = 1 << 20
#: Buffers of the largest size one rank holds at once (exported or sent, received, staged, spare).
BUFFERS = 4
#: The largest message of the raw MPI rows: an MPI without MPI-4's large counts takes at most a C int's
#: count (2**31 - 1 bytes) in one message.
RAW_MPI_MESSAGE_BYTES = 1 << 30


def parse_sizes(text: str | None) -> list[int]:
    """``--sizes`` (MiB, comma separated) as bytes.

    Raises
    ------
    InputError
        Naming the value: not an integer, below 1 MiB, above :data:`MAX_SIZE_MIB`.

    Examples
    --------
    >>> parse_sizes("1,16")
    [1048576, 16777216]
    """
    if text is None:
        return [s << 20 for s in DEFAULT_SIZES_MIB]
    sizes = []
    for item in str(text).split(","):
        item = item.strip()
        if not item.lstrip("+-").isdigit():
            raise InputError(f"--sizes={text!r}: {item!r} is not a whole number of MiB (e.g. 1,16,256)")
        value = int(item)
        if not 1 <= value <= MAX_SIZE_MIB:
            raise InputError(f"--sizes={text!r}: {value} MiB is outside 1 … {MAX_SIZE_MIB} MiB")
        sizes.append(value << 20)
    return sizes


def _median_seconds(backend, fn, reps: int, comm: MPI.Comm) -> float:
    times = []
    for i in range(reps + 1):
        comm.Barrier()
        t0 = MPI.Wtime()
        ev = fn()
        if backend.on_gpu:
            backend.stream_synchronize(backend.comm_stream)
            if ev is not None:
                backend.event_synchronize(ev)
        if i:
            times.append(MPI.Wtime() - t0)
    return float(np.median(times))


def _reps(nbytes: int) -> int:
    return 20 if nbytes <= 64 << 20 else 8


def _references(backend, sizes, rows) -> None:
    """This GPU's own copy rate, and a peer copy GPU1→GPU0 in one process."""
    if not backend.on_gpu:
        return
    cp, rt = backend.cupy, backend.cupy.cuda.runtime
    stream = backend.comm_stream
    here = backend.device_id
    other = (here + 1) % rt.getDeviceCount()
    if other != here:
        _enable_peer_access(cp, here, other)
    largest = max(sizes)
    with backend.device:
        src = cp.ones(largest, dtype=np.uint8)
        dst = cp.empty(largest, dtype=np.uint8)
    far = None
    if other != here:
        with cp.cuda.Device(other):
            far = cp.full(largest, 2, dtype=np.uint8)

    def local_copy(nbytes):
        rt.memcpyAsync(dst.data.ptr, src.data.ptr, nbytes, rt.memcpyDeviceToDevice, stream.ptr)

    def peer_copy(nbytes):
        rt.memcpyPeerAsync(dst.data.ptr, here, far.data.ptr, other, nbytes, stream.ptr)

    # the staged path's chunks go through pinned memory of the same kind (StagedBroadcast)
    pinned = backend.pinned_empty(largest)

    def to_host(nbytes):
        rt.memcpyAsync(pinned.ctypes.data, src.data.ptr, nbytes, rt.memcpyDeviceToHost, stream.ptr)

    def to_device(nbytes):
        rt.memcpyAsync(dst.data.ptr, pinned.ctypes.data, nbytes, rt.memcpyHostToDevice, stream.ptr)

    with backend.device:
        for nbytes in sizes:
            rows.append(_event_timed(backend, "d2d", nbytes, local_copy))
            rows.append(_event_timed(backend, "d2h", nbytes, to_host))
            rows.append(_event_timed(backend, "h2d", nbytes, to_device))
            if far is not None:
                rows.append(_event_timed(backend, "peer", nbytes, peer_copy))


def _enable_peer_access(cp, device: int, peer: int) -> None:
    """Let ``device`` read ``peer`` directly where the pair allows it (else the driver stages a peer
    copy through the host); enabling it twice is no error."""
    rt = cp.cuda.runtime
    with cp.cuda.Device(device):
        if rt.deviceCanAccessPeer(device, peer):
            try:
                rt.deviceEnablePeerAccess(peer)
            except rt.CUDARuntimeError:  # already enabled
                pass


def _peer_matrix(backend, nbytes: int, rows) -> None:
    """``peer-gpu``: ``cudaMemcpyPeerAsync`` between every ordered pair of the GPUs this process sees.

    The copy engines' own rate per pair (peer access enabled where the pair allows it), to set
    beside the ``ipc`` matrix of the ranks; ``src`` and ``dst`` are GPU indices here.
    """
    if not backend.on_gpu:
        return
    cp, rt = backend.cupy, backend.cupy.cuda.runtime
    count = rt.getDeviceCount()
    buffers = {}
    for device in range(count):
        with cp.cuda.Device(device):
            buffers[device] = cp.full(nbytes, device, dtype=np.uint8)
    stream = backend.comm_stream
    for dst in range(count):
        for src in range(count):
            if src == dst:
                continue
            _enable_peer_access(cp, dst, src)

            def copy(n, d=dst, s=src):
                rt.memcpyPeerAsync(buffers[d].data.ptr, d, buffers[s].data.ptr, s, n, stream.ptr)

            with backend.device:
                row = _event_timed(backend, "peer-gpu", nbytes, copy)
            rows.append(row | {"src": src, "dst": dst})


def _event_timed(backend, path, nbytes, fn) -> dict:
    cp, stream = backend.cupy, backend.comm_stream
    times = []
    for i in range(_reps(nbytes) + 1):
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        start.record(stream)
        fn(nbytes)
        stop.record(stream)
        stop.synchronize()
        if i:
            times.append(cp.cuda.get_elapsed_time(start, stop) / 1e3)
    sec = float(np.median(times))
    return {"src": -1, "dst": -1, "path": path, "bytes": nbytes, "seconds": sec, "gbps": nbytes / sec / 1e9}


def default_output(config: RunConfig, kind: str) -> str:
    """``config.out``, or where it is RunConfig's own default (no name given) a new name of ``kind``
    (:func:`~hpcmm.config.new_output_name`) that gives way to the next free one should another run take it."""
    if config.out != RunConfig.out:
        return config.out
    out = new_output_name(kind=kind)
    h5io.RENAMEABLE.add(out)
    return out


def transport_main(ns, config: RunConfig, comm: MPI.Comm) -> int:
    size = comm.Get_size()
    if size < 2:
        raise InputError("bench transport needs at least 2 ranks (mpiexec -n 2 ...)")
    sizes = parse_sizes(ns.sizes)
    out = default_output(config, "transport")
    with collective(comm):
        if comm.Get_rank() == 0:
            h5io.check_output_path(out, config.overwrite)
    rows: list[dict] = []
    with placement(comm, config) as (topo, backend):
        with collective(topo.comm):
            _check_memory(backend, topo, ns.sizes, max(sizes))
        aware = decide(config.cuda_aware_mpi, option_source=config.origin("cuda_aware_mpi"))
        rank = topo.rank
        if rank == 0:
            _references(backend, sizes, rows)
            if getattr(ns, "pairs", "first") == "all":
                _peer_matrix(backend, max(sizes), rows)
        vnodes = topo.comm.allgather(topo.vnode)
        for source, peer in pairs_of(size, getattr(ns, "pairs", "first")):
            pair = topo.comm.Split(0 if rank in (source, peer) else MPI.UNDEFINED, 0 if rank == source else 1)
            if pair != MPI.COMM_NULL:
                rows += _pair(backend, pair, source, peer, sizes, vnodes[source] == vnodes[peer], aware.aware)
                pair.Free()
        if backend.on_gpu:
            rows += _staged_concurrent(backend, topo.comm, sizes)
        gathered = topo.comm.gather(rows, root=0)
    if comm.Get_rank() == 0:
        rows = [r for part in gathered for r in part]
        _print(rows)
        if getattr(ns, "pairs", "first") == "all":
            _print_matrices(rows, size)
        out = h5io.write_table_file(out, config.overwrite, "bench-transport", "transport", rows, versions())
        print(f"figures: {out}")
    return 0


def _check_memory(backend, topo, text, largest: int) -> None:
    """Refuse sizes whose buffers cannot fit, before any is allocated."""
    free, _ = backend.memory_info()
    sharing = topo.local_size  # ranks of a node share its host memory (and may share a GPU)
    need = BUFFERS * largest * sharing
    if need > free:
        where = "device" if backend.on_gpu else "host"
        raise InputError(f"--sizes={text!r}: {largest >> 20} MiB needs {need / 2**30:.1f} GiB of {where} "
                         f"memory ({BUFFERS} buffers x {sharing} rank(s)), {free / 2**30:.1f} GiB available")


def pairs_of(size: int, which: str) -> list[tuple[int, int]]:
    """The (sender, receiver) pairs of ``--pairs``: ``first`` from rank 0, ``all`` every pair once.

    >>> pairs_of(3, "first"), pairs_of(3, "all")
    ([(0, 1), (0, 2)], [(0, 1), (0, 2), (1, 2)])
    """
    if which == "first":
        return [(0, peer) for peer in range(1, size)]
    return [(source, peer) for source in range(size) for peer in range(source + 1, size)]


def _pair(backend, pair: MPI.Comm, source: int, peer: int, sizes, same_node: bool, aware: bool) -> list[dict]:
    """Rank 0 of ``pair`` (world rank ``source``) sends, rank 1 (``peer``) receives; rows from the receiver."""
    me = pair.Get_rank()
    rows = []
    largest = max(sizes)
    paths = []
    if same_node:
        paths.append(IpcPeerMemory if backend.on_gpu else ShmPeerMemory)
    if backend.on_gpu:
        paths.append(DirectBroadcast if aware else None)
        paths.append(StagedBroadcast)
        if aware:
            paths.append("raw-mpi-device")
    else:
        paths.append(DirectBroadcast)
    paths.append("raw-mpi-host")
    for path in filter(None, paths):
        if path in (IpcPeerMemory, ShmPeerMemory):
            peers = path(pair, backend)
            buf = peers.allocate(largest)
            if me == 0:
                _fill(backend, buf)
            backend.synchronize()
            pair.Barrier()
            for nbytes in sizes:
                dst = backend.empty(nbytes, np.uint8)
                fn = (lambda d=dst, n=nbytes: peers.pull(d, 0, 0, n, backend.comm_stream)) if me == 1 else (lambda: None)
                rows.append(_row(path.path, source, peer, nbytes, _median_seconds(backend, fn, _reps(nbytes), pair)))
                if me == 1:
                    _check(backend, dst)
            peers.close()
        elif path in (DirectBroadcast, StagedBroadcast):
            mover = path(backend)
            for nbytes in sizes:
                buf = backend.empty(nbytes, np.uint8)
                if me == 0:
                    _fill(backend, buf)
                else:
                    buf.fill(0)
                backend.synchronize()
                fn = (lambda b=buf: mover.send(pair, b)) if me == 0 else (lambda b=buf: mover.receive(pair, b))
                rows.append(_row(path.path, source, peer, nbytes, _median_seconds(backend, fn, _reps(nbytes), pair)))
                if me == 1:
                    backend.synchronize()
                    _check(backend, buf)
            mover.close()
        else:  # raw MPI point to point, no hpcmm code in the way
            device = path == "raw-mpi-device"
            for nbytes in sizes:
                buf = backend.empty(nbytes, np.uint8) if device else np.empty(nbytes, np.uint8)
                buf.fill(1)
                backend.synchronize()
                move = partial(_raw_mpi_move, pair, buf)
                rows.append(_row(path, source, peer, nbytes, _median_seconds(backend, move, _reps(nbytes), pair)))
    return rows if me == 1 else []


def _raw_mpi_move(pair: MPI.Comm, buf) -> None:
    """Rank 0 of ``pair`` sends ``buf`` to rank 1 by plain ``Send``/``Recv``, in messages of at most
    :data:`RAW_MPI_MESSAGE_BYTES`."""
    sender = pair.Get_rank() == 0
    for lo in range(0, buf.shape[0], RAW_MPI_MESSAGE_BYTES):
        piece = buf[lo : lo + RAW_MPI_MESSAGE_BYTES]
        if sender:
            pair.Send(piece, dest=1)
        else:
            pair.Recv(piece, source=0)


def _staged_concurrent(backend, comm: MPI.Comm, sizes) -> list[dict]:
    """``staged-xK``: K staged transfers at once, pairs (0, 1) … (2K-2, 2K-1), K = 2 … P/2.

    Collective over ``comm``: every rank passes the same barriers, the ranks
    outside the K pairs idle; each pair's receiver returns its rows.
    """
    rank, size = comm.Get_rank(), comm.Get_size()
    rows: list[dict] = []
    if size < 4:
        return rows
    mover = StagedBroadcast(backend)
    buf = backend.empty(max(sizes), np.uint8)
    try:
        for k in range(2, size // 2 + 1):
            active = rank < 2 * k
            pair = comm.Split(rank // 2 if active else MPI.UNDEFINED, rank % 2)
            me = pair.Get_rank() if active else -1
            for nbytes in sizes:
                view = buf[:nbytes]
                if me == 0:
                    _fill(backend, view)
                elif me == 1:
                    view.fill(0)  # what the check finds must have come in this round
                backend.synchronize()
                if me == 0:
                    fn = lambda v=view: mover.send(pair, v)  # noqa: E731
                elif me == 1:
                    fn = lambda v=view: mover.receive(pair, v)  # noqa: E731
                else:
                    fn = lambda: None  # noqa: E731
                seconds = _median_seconds(backend, fn, _reps(nbytes), comm)  # one barrier over all ranks
                if me == 1:
                    backend.synchronize()
                    _check(backend, view)
                    rows.append(_row(f"staged-x{k}", rank - 1, rank, nbytes, seconds))
            if active:
                pair.Free()
    finally:
        mover.close()
    return rows


def _fill(backend, buf) -> None:
    n = buf.shape[0]
    pattern = (np.arange(n, dtype=np.uint32) % 251).astype(np.uint8)
    buf[...] = backend.xp.asarray(pattern) if backend.on_gpu else pattern


def _check(backend, dst) -> None:
    n = dst.shape[0]
    got = backend.to_host(dst[: min(n, 1 << 20)])
    want = (np.arange(got.shape[0], dtype=np.uint32) % 251).astype(np.uint8)
    if not np.array_equal(got, want):
        raise RuntimeError(f"transport check failed for {n} bytes: data differs")


def _row(path, source, peer, nbytes, seconds) -> dict:
    return {"src": source, "dst": peer, "path": path, "bytes": nbytes, "seconds": seconds,
            "gbps": nbytes / seconds / 1e9}


def _print_matrices(rows: list[dict], size: int) -> None:
    """Per path, the GB/s of every pair at the largest size it moved: sender by row, receiver by column."""
    for path in dict.fromkeys(r["path"] for r in rows if r["src"] >= 0 and not r["path"].startswith("staged-x")):
        mine = [r for r in rows if r["path"] == path]
        largest = max(r["bytes"] for r in mine)
        rate = {(r["src"], r["dst"]): r["gbps"] for r in mine if r["bytes"] == largest}
        count = max(size, 1 + max(max(pair) for pair in rate))
        what = "GPU" if path == "peer-gpu" else "rank"
        print(f"{path} at {largest >> 20} MiB, GB/s (row: sending {what}, column: receiving {what})")
        print(f"{'':>6}" + "".join(f"{dst:>9}" for dst in range(count)))
        for src in range(count):
            cells = (f"{rate[(src, dst)]:>9.1f}" if (src, dst) in rate else f"{'-':>9}" for dst in range(count))
            print(f"{src:>6}" + "".join(cells))


def _print(rows: list[dict]) -> None:
    sizes = sorted({r["bytes"] for r in rows})
    keys = []
    for r in rows:
        key = (r["path"], r["src"], r["dst"])
        if key not in keys:
            keys.append(key)
    print(f"{'path':<16}{'pair':>7}" + "".join(f"{s >> 20:>9} MiB" for s in sizes))
    for path, src, dst in keys:
        vals = {r["bytes"]: r["gbps"] for r in rows if (r["path"], r["src"], r["dst"]) == (path, src, dst)}
        pair = "-" if src < 0 else f"{src}->{dst}"
        print(f"{path:<16}{pair:>7}" + "".join(f"{vals.get(s, float('nan')):>13.1f}" for s in sizes))
    print("GB/s (bytes moved / seconds, median); d2d = one GPU's own copy, peer = cudaMemcpyPeer in one process"
          " (peer-gpu: between GPU indices, not ranks)")
