"""Runs a SUMMA plan: the one module that joins the transports and the local GEMM.

Per step ``s`` (ring of ``prefetch + 1`` panel buffers per operand):

1. the compute stream waits for the events that say panels ``s`` are ready,
   multiplies (``C = A_s B_s`` for the first step, ``C += A_s B_s`` after), and
   records ``gemm_done[s % ring]``;
2. the panels of step ``s + prefetch`` are fetched into the slot that GEMM
   ``s - 1`` just released: on the communication stream, which first waits on
   ``gemm_done`` of that slot.  Same-node pulls are asynchronous copies, so the
   host runs ahead; MPI transfers block the host, but GEMM ``s`` is already
   queued, so the GPU keeps computing while the host moves the bytes.

No device-wide synchronization happens inside the loop; streams wait on
events.  With ``prefetch = 0`` a step fetches then multiplies (no overlap).
On the CPU the same code runs with synchronous copies and no streams.

Timing, per step: the GEMM (events around it on the compute stream), the
transfers (events around them on the communication stream), and the gap on
the compute stream between the previous GEMM's end (the product's start for
step 0) and this one's start, split in two: ``wait``, the part before the
step's panels were there (communication the overlap did not hide), and
``host``, the rest (the host was late to launch the GEMM: Python, MPI calls,
launches).  A product's window opens before anything of step 0 is queued and
closes after its last GEMM; :attr:`IterationTimes.start` is the host time
(``perf_counter``) at which it opened, so that the run can place every rank's
window on one clock (:mod:`hpcmm.clock`).
"""

from __future__ import annotations

import collections
import dataclasses
from time import perf_counter

import numpy as np

from .algorithms import Step, auto_panel, summa_plan
from .errors import InputError, agree
from .layout import Layout
from .transport import PanelChannel

__all__ = ["Engine", "IterationTimes", "PHASES", "memory_needed"]

PHASES = ("gemm", "comm", "wait")
STREAMS = ("compute", "comm")
KINDS = ("gemm", "A", "B")


@dataclasses.dataclass
class IterationTimes:
    """One product's timings on this rank (seconds)."""

    seconds: float
    steps: np.ndarray  # (nsteps, 3): gemm, comm, wait (for data)
    timeline: np.ndarray | None  # (events, 5): stream, kind, step, start, end
    start: float = 0.0  # perf_counter when the window opened (this rank's clock)
    host: np.ndarray | None = None  # (nsteps,): compute-stream gap with the panels there


def memory_needed(layout: Layout, rank: int, itemsize: int, panel: int, ring: int) -> int:
    """Bytes one rank's blocks and panel ring take on its device."""
    shapes = layout.local_shapes(rank)
    (m_loc, _), (_, n_loc) = shapes["A"], shapes["B"]
    blocks = sum(r * c for r, c in shapes.values())
    slots = ring * panel * (m_loc + n_loc)
    return (blocks + slots) * itemsize


class Engine:
    """Blocks, channels and the SUMMA loop of one rank.

    Parameters
    ----------
    topo : Topology
    backend : Backend
    layout : Layout
    dtype : str
    panel : int or None
        Panel width; ``None`` chooses one (:func:`~hpcmm.algorithms.auto_panel`).
    prefetch : int
        Panels in flight ahead of the GEMM.
    cuda_aware : bool
        Whether device buffers may go to MPI.
    tf32 : bool
        Let cuBLAS use TF32 tensor cores for float32.
    timeline : bool
        Keep the start and end of every transfer and GEMM.
    """

    def __init__(self, topo, backend, layout, dtype, panel, prefetch, cuda_aware, tf32=False, timeline=True):
        self.topo, self.backend, self.layout = topo, backend, layout
        self.dtype = np.dtype(dtype)
        self.tf32, self.record_timeline = tf32, timeline
        itemsize = self.dtype.itemsize
        self.panel_auto = panel is None
        self.panel = panel if panel is not None else auto_panel(layout, itemsize, backend.on_gpu)
        if self.panel > layout.k:
            raise InputError(f"--panel={self.panel}: wider than k={layout.k}")
        self.prefetch = prefetch
        self.ring = prefetch + 1
        # Before the plan: a huge k must be refused, not planned step by step.
        self._check_memory()
        # Ramp up the first panels only where transfers exist and can overlap.
        self.plan: list[Step] = summa_plan(layout, self.panel, ramp=prefetch > 0 and topo.size > 1)
        rank = topo.rank
        shapes = layout.local_shapes(rank)
        self.a_shape, self.b_shape, self.c_shape = shapes["A"], shapes["B"], shapes["C"]
        self.m_loc, self.n_loc = self.c_shape
        self.channels: list[PanelChannel] = []
        self.closed = False
        vnodes = topo.comm.allgather(topo.vnode)
        self.row = self._channel(topo.row_comm, vnodes, self.a_shape, self.m_loc, cuda_aware)
        self.col = self._channel(topo.col_comm, vnodes, self.b_shape, self.n_loc, cuda_aware)
        self.A = self._typed(self.row.block, self.a_shape, order="F")
        self.B = self._typed(self.col.block, self.b_shape, order="C")
        self.C = backend.empty(self.c_shape, self.dtype)
        backend.poison(self.C)
        self.bytes_by_pair: collections.Counter = collections.Counter()

    # -- set-up ---------------------------------------------------------------
    def _check_memory(self) -> None:
        be, topo = self.backend, self.topo
        # A channel that spans nodes keeps at least two relay slots (transport/channel.py).
        ring = max(self.ring, 2) if topo.vnode_count > 1 else self.ring
        need = memory_needed(self.layout, topo.rank, self.dtype.itemsize, self.panel, ring)
        # Ranks that share a device share its memory.
        sharing = topo.node_comm.allgather(getattr(be, "device_id", 0))
        share = sharing.count(getattr(be, "device_id", 0)) if be.on_gpu else topo.local_size
        free, _ = be.memory_info()
        where = "device" if be.on_gpu else "host"
        err = None
        if need * share > free:
            err = InputError(
                f"problem m={self.layout.m}, n={self.layout.n}, k={self.layout.k} {self.dtype.name} "
                f"does not fit: {share} rank(s) per {where} need {need * share / 2**30:.2f} GiB of "
                f"{where} memory, {free / 2**30:.2f} GiB available"
            )
        agree(topo.comm, err)

    def _channel(self, comm, vnodes, block_shape, panel_rows, cuda_aware) -> PanelChannel:
        """Collective: one operand's channel; a failure on any rank fails it on all."""
        itemsize = self.dtype.itemsize
        members = comm.allgather(self.topo.rank)
        channel, err = None, None
        try:
            channel = PanelChannel(
                comm, members, [vnodes[r] for r in members], self.backend,
                int(np.prod(block_shape)) * itemsize, panel_rows * self.panel * itemsize,
                self.ring, cuda_aware,
            )
            self.channels.append(channel)
        except Exception as exc:  # noqa: BLE001 - every rank learns of it
            err = exc
        try:
            agree(self.topo.comm, err)
        except Exception:
            self.close()
            raise
        return channel

    def _typed(self, raw, shape, order):
        count = int(np.prod(shape))
        flat = raw.view(self.dtype)[:count] if count else raw[:0].view(self.dtype)
        return flat.reshape(shape, order=order)

    def load(self, a_host: np.ndarray, b_host: np.ndarray) -> None:
        """Copy this rank's blocks in (host arrays of the block shapes), then align the ranks."""
        xp = self.backend.xp
        if self.A.size:
            self.A[...] = xp.asarray(np.asfortranarray(a_host, dtype=self.dtype))
        if self.B.size:
            self.B[...] = xp.asarray(np.ascontiguousarray(b_host, dtype=self.dtype))
        self.backend.synchronize()
        # Peers read these blocks from now on.
        self.topo.comm.Barrier()

    # -- the product ----------------------------------------------------------
    def _panel(self, transfer, width: int, operand: str):
        data = transfer.panel.view(self.dtype)
        if operand == "A":
            return data[: self.m_loc * width].reshape((self.m_loc, width), order="F")
        return data[: width * self.n_loc].reshape((width, self.n_loc))

    def multiply(self, record: bool = True) -> IterationTimes:
        """One distributed product ``C = A·B``; returns this rank's timings."""
        be = self.backend
        isz = self.dtype.itemsize
        cs, ms = be.compute_stream, be.comm_stream
        nsteps = len(self.plan)
        gemm_done = [None] * self.ring
        fetched: dict[int, tuple] = {}
        marks: dict[int, list] = {}
        moved: dict[int, tuple[bool, bool]] = {}
        # The stream is idle (the last product synchronized): t0 happens when it is recorded.
        start = perf_counter()
        t0 = be.event(cs)
        be.wait(ms, t0)  # the communication stream starts with the iteration
        host_comm = np.zeros(nsteps)

        def fetch(s: int) -> None:
            step = self.plan[s]
            w, slot = step.width, s % self.ring
            h0 = perf_counter()
            # Wait for the slot before the first mark, so that the transfer's bar in the
            # timeline is the transfer, not the GEMM it waited for.
            be.wait(ms, gemm_done[slot])
            c0 = be.event(ms)
            # The channels take the step, not our slot: a channel that spans nodes keeps a
            # deeper ring (at least 2) and must alternate its relay slots even with prefetch 0.
            # gemm_done[slot] (GEMM s - ring) is as late as any GEMM that read their slot.
            a = self.row.fetch(step.a_root, step.a_offset * self.m_loc * isz, w * self.m_loc * isz,
                               s, gemm_done[slot])
            c1 = be.event(ms)
            b = self.col.fetch(step.b_root, step.b_offset * self.n_loc * isz, w * self.n_loc * isz,
                               s, gemm_done[slot])
            c2 = be.event(ms)
            host_comm[s] = perf_counter() - h0
            fetched[s] = (a, b)
            marks[s] = [c0, c1, c2]
            moved[s] = (a.ready is not None, b.ready is not None)
            if record:
                for t in (a, b):
                    if t.nbytes:
                        self.bytes_by_pair[(t.source, self.topo.rank, t.path)] += t.nbytes

        for s in range(min(self.prefetch, nsteps)):
            fetch(s)
        for s in range(nsteps):
            if self.prefetch == 0:
                fetch(s)
            a, b = fetched.pop(s)
            be.wait(cs, a.ready)
            be.wait(cs, b.ready)
            g0 = be.event(cs)
            be.gemm(self._panel(a, self.plan[s].width, "A"), self._panel(b, self.plan[s].width, "B"),
                    self.C, accumulate=s > 0, stream=cs, tf32=self.tf32)
            g1 = be.event(cs)
            gemm_done[s % self.ring] = g1
            marks[s] += [g0, g1]
            if self.prefetch and s + self.prefetch < nsteps:
                fetch(s + self.prefetch)
        t1 = be.event(cs)
        be.synchronize()
        return self._times(t0, t1, marks, moved, host_comm, start)

    def _times(self, t0, t1, marks, moved, host_comm, start) -> IterationTimes:
        be = self.backend
        nsteps = len(self.plan)
        steps = np.zeros((nsteps, len(PHASES)))
        host = np.zeros(nsteps)
        rows = []
        previous_end = 0.0
        for s in range(nsteps):
            c0, c1, c2, g0, g1 = marks[s]
            rel = [be.elapsed(t0, e) for e in (c0, c1, c2, g0, g1)]
            gemm = rel[4] - rel[3]
            # On the GPU the transfer time is what the communication stream saw: the marks after
            # an MPI transfer are recorded once the host comes back from it, so it is inside too
            # (with the leader's host wait for a free relay slot, which comes before the receive).
            comm = rel[2] - rel[0] if be.on_gpu else host_comm[s]
            gap = max(0.0, rel[3] - previous_end)
            # The panels of step s were there once the last transfer that moved one had ended.
            a_moved, b_moved = moved[s]
            ready = rel[2] if b_moved else (rel[1] if a_moved else None)
            data = 0.0 if ready is None else min(gap, max(0.0, ready - previous_end))
            steps[s] = (gemm, comm, data)
            host[s] = gap - data
            previous_end = rel[4]
            if self.record_timeline:
                rows += [(1, 1, s, rel[0], rel[1]), (1, 2, s, rel[1], rel[2]), (0, 0, s, rel[3], rel[4])]
        timeline = np.array(rows, dtype=np.float64).reshape(-1, 5) if self.record_timeline else None
        return IterationTimes(be.elapsed(t0, t1), steps, timeline, start, host)

    # -- tear-down ------------------------------------------------------------
    def close(self) -> None:
        """Collective: close both channels (IPC handles, windows, communicators)."""
        if self.closed:
            return
        self.closed = True
        self.backend.synchronize()
        for ch in reversed(self.channels):
            ch.close()
        self.channels = []
        self.A = self.B = self.C = None
