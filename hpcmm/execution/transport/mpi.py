"""Moving blocks between nodes through MPI: panels by broadcast, dynamic tiles point to point.

``mpi``: the backend's own buffers go straight to MPI: numpy arrays on the CPU,
device arrays on the GPU where the library is CUDA-aware.  The caller has made
sure that no stream still writes the source or reads the destination (the
library knows nothing of our streams).

``staged``: device → pinned host → MPI → pinned host → device, in chunks, two
pinned buffers per side so that the copy of one chunk overlaps the transfer of
the next.  It never hands a device pointer to MPI.
"""

from __future__ import annotations

from mpi4py import MPI

__all__ = ["DirectBroadcast", "PointToPoint", "StagedBroadcast", "MAX_MESSAGE"]

#: Largest single MPI message: MPIs without large-count calls take ``int`` counts.
MAX_MESSAGE = 1 << 30


class DirectBroadcast:
    """MPI broadcast of the backend's own buffers (path ``mpi``)."""

    path = "mpi"

    def __init__(self, backend, chunk: int = MAX_MESSAGE) -> None:
        self.backend = backend
        self.chunk = chunk

    def send(self, comm: MPI.Comm, src) -> None:
        """Root side (rank 0 of ``comm``)."""
        for lo in range(0, src.shape[0], self.chunk):
            comm.Bcast(src[lo : lo + self.chunk], root=0)

    def receive(self, comm: MPI.Comm, dst):
        """Receiving side; returns the event after which ``dst`` is ready (None: now)."""
        for lo in range(0, dst.shape[0], self.chunk):
            comm.Bcast(dst[lo : lo + self.chunk], root=0)
        return None

    def close(self) -> None:
        pass


class StagedBroadcast:
    """Device buffers through pinned host memory (path ``staged``)."""

    path = "staged"

    def __init__(self, backend, chunk: int = 32 << 20) -> None:
        self.backend = backend
        self.chunk = chunk
        self.host = [backend.pinned_empty(chunk) for _ in range(2)]
        self.host_events = [None, None]

    def _reuse(self, i: int) -> None:
        # The pinned buffer's previous copy must be finished before MPI reuses it.
        self.backend.event_synchronize(self.host_events[i])
        self.host_events[i] = None

    def send(self, comm: MPI.Comm, src) -> None:
        be, stream = self.backend, self.backend.comm_stream
        spans = [(lo, min(lo + self.chunk, src.shape[0])) for lo in range(0, src.shape[0], self.chunk)]

        def download(j: int) -> None:
            lo, hi = spans[j]
            self._reuse(j % 2)
            be.copy(self.host[j % 2][: hi - lo], src[lo:hi], stream)
            self.host_events[j % 2] = be.event(stream)

        for j in range(min(2, len(spans))):
            download(j)
        for j, (lo, hi) in enumerate(spans):
            be.event_synchronize(self.host_events[j % 2])
            comm.Bcast(self.host[j % 2][: hi - lo], root=0)
            self.host_events[j % 2] = None
            if j + 2 < len(spans):
                download(j + 2)

    def receive(self, comm: MPI.Comm, dst):
        be, stream = self.backend, self.backend.comm_stream
        for j, lo in enumerate(range(0, dst.shape[0], self.chunk)):
            hi = min(lo + self.chunk, dst.shape[0])
            self._reuse(j % 2)
            comm.Bcast(self.host[j % 2][: hi - lo], root=0)
            be.copy(dst[lo:hi], self.host[j % 2][: hi - lo], stream)
            self.host_events[j % 2] = be.event(stream)
        return be.event(stream)

    def close(self) -> None:
        for i in range(2):
            self._reuse(i)
        self.host = []


class PointToPoint:
    """Blocking sends and receives of one flat array between two ranks: ``mpi`` (the backend's own
    buffers to MPI: numpy, or device arrays where MPI is CUDA-aware) or ``staged`` (device → pinned
    host → MPI, chunk by chunk through one pinned buffer; never a device pointer to MPI).

    The caller has made sure that no stream still writes the source or reads the destination.
    """

    def __init__(self, backend, staged: bool, chunk: int = 32 << 20) -> None:
        self.backend, self.staged = backend, staged
        self.path = "staged" if staged else "mpi"
        self.chunk = chunk if staged else MAX_MESSAGE
        self.host = backend.pinned_empty(chunk) if staged else None

    def _spans(self, array):
        step = max(1, self.chunk // array.dtype.itemsize)
        return [(lo, min(lo + step, array.shape[0])) for lo in range(0, array.shape[0], step)]

    def send(self, comm: MPI.Comm, dest: int, tag: int, src) -> None:
        for lo, hi in self._spans(src):
            if not self.staged:
                comm.Send(src[lo:hi], dest=dest, tag=tag)
                continue
            host = self.host.view(src.dtype)[: hi - lo]
            self.backend.copy(host, src[lo:hi], self.backend.comm_stream)
            self.backend.stream_synchronize(self.backend.comm_stream)
            comm.Send(host, dest=dest, tag=tag)

    def receive(self, comm: MPI.Comm, source: int, tag: int, dst) -> None:
        for lo, hi in self._spans(dst):
            if not self.staged:
                comm.Recv(dst[lo:hi], source=source, tag=tag)
                continue
            host = self.host.view(dst.dtype)[: hi - lo]
            comm.Recv(host, source=source, tag=tag)
            self.backend.copy(dst[lo:hi], host, self.backend.comm_stream)
            self.backend.stream_synchronize(self.backend.comm_stream)

    def close(self) -> None:
        self.host = None
