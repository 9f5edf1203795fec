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
   Where the GEMM takes an operand in the other memory order than it travels
   in (:mod:`hpcmm.planning.gemm_orders`), its panel, the rank's own included, is
   re-laid out into a scratch buffer of the slot right after it arrives, on
   the communication stream, and the GEMM waits for the event after that copy.

No device-wide synchronization happens inside the loop; streams wait on
events.  With ``prefetch = 0`` a step fetches then multiplies (no overlap).
On the CPU the same code runs with synchronous copies and no streams.

Timing, per step: the GEMM (events around it on the compute stream), the
transfers (events on the communication stream from the moment the bytes
start to move, after any wait for a free ring slot, to the fetch's end,
its re-layout included), and
the gap on the compute stream between the previous GEMM's end (the product's
start for step 0) and this one's start, split in two: ``wait``, the part
before the step's panels were there (communication the overlap did not
hide), and ``host``, the rest (the host was late to launch the GEMM: Python,
launches).  An MPI transfer holds the host until its bytes have moved, so
the panels it brings are there when it returns, not earlier: the host's time
inside it is waiting for data, not host overhead.  A product's window opens before anything of step 0 is queued and
closes after its last GEMM; :attr:`IterationTimes.start` is the host time
(``perf_counter``) at which it opened, so that the run can place every rank's
window on one clock (:mod:`hpcmm.execution.clock`).
"""

from __future__ import annotations

import collections
import dataclasses
from time import perf_counter

import numpy as np

from ..planning.algorithms import Step
from ..planning.choices import LOAD_PIECE_BYTES, EngineChoices
from ..config import RunConfig
from ..dtypes import numpy_dtype
from ..errors import collective_setup, raised_everywhere
from ..planning.gemm_orders import relaid
from ..geometry.layout import Layout, padded
from .transport import PanelChannel

__all__ = ["DeferredTimes", "Engine", "IterationTimes", "PHASES", "copy_in"]

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


class DeferredTimes(IterationTimes):
    """A product's timings whose per-step figures are read from its events when first asked for.

    Reading a step's six events costs the host some 20 µs per step; a library caller that
    never looks at them should not pay it inside every execute.  ``seconds`` and ``start`` are
    there at once; ``steps``, ``host`` and ``timeline`` come from ``details()`` on first use.
    """

    def __init__(self, seconds: float, start: float, details) -> None:  # noqa: D107 - the class says it
        object.__setattr__(self, "_details", details)
        object.__setattr__(self, "_resolved", None)
        self.seconds, self.start = seconds, start

    def _resolve(self) -> tuple:
        if self._resolved is None:
            object.__setattr__(self, "_resolved", self._details())
            object.__setattr__(self, "_details", None)  # the events may go
        return self._resolved

    def _set(self, index: int, value) -> None:
        resolved = list(self._resolve())
        resolved[index] = value
        object.__setattr__(self, "_resolved", tuple(resolved))

    steps = property(lambda self: self._resolve()[0], lambda self, value: self._set(0, value))
    timeline = property(lambda self: self._resolve()[1], lambda self, value: self._set(1, value))
    host = property(lambda self: self._resolve()[2], lambda self, value: self._set(2, value))

    def __repr__(self) -> str:
        return f"DeferredTimes(seconds={self.seconds!r}, start={self.start!r})"


@dataclasses.dataclass
class StepMarks:
    """The events of one step: each transfer's start and end, whether it moved bytes, the GEMM's."""

    a_start: object
    a_end: object
    b_start: object
    b_end: object
    a_moved: bool
    b_moved: bool
    gemm_start: object = None
    gemm_end: object = None


def copy_in(backend, target, host: np.ndarray, dtype: np.dtype, axis: int) -> None:
    """``target[...] = host`` in pieces along ``axis`` (columns or rows), each converted on its own."""
    if not target.size:
        return
    if not backend.on_gpu:
        target[...] = host
        return
    line_bytes = host.shape[1 - axis] * dtype.itemsize
    per_piece = max(1, LOAD_PIECE_BYTES // max(line_bytes, 1))
    order = "F" if axis == 1 else "C"
    for start in range(0, host.shape[axis], per_piece):
        part = (slice(None), slice(start, start + per_piece)) if axis == 1 else (slice(start, start + per_piece),)
        target[part] = backend.xp.asarray(np.asarray(host[part], dtype=dtype, order=order))


class Engine:
    """Blocks, channels and the SUMMA loop of one rank.

    Collective over the topology's communicators, built and closed on every
    rank together; as a context manager it closes itself on the way out unless
    the error that ends the block was raised by this rank alone
    (:func:`~hpcmm.errors.raised_everywhere`).

    Parameters
    ----------
    topo : Topology
    backend : Backend
    layout : Layout
    choices : EngineChoices
        Panel, prefetch, operand orders, steps and memory, made before the
        engine by :func:`~hpcmm.planning.choices.summa_choices` (memory checked there):
        the engine decides nothing.
    config : RunConfig
        ``dtype``, ``tf32`` and ``timeline`` (keep the start and end of every
        transfer and GEMM).
    cuda_aware : bool
        Whether device buffers may go to MPI.
    """

    def __init__(self, topo, backend, layout: Layout, choices: EngineChoices, config: RunConfig, cuda_aware: bool,
                 c_storage=None) -> None:
        self.topo, self.backend, self.layout, self.choices = topo, backend, layout, choices
        self.dtype = numpy_dtype(config.dtype)
        self.tf32, self.record_timeline = config.tf32, config.timeline
        self.prefetch, self.ring, self.panel, self.panel_auto = (choices.prefetch, choices.ring, choices.panel,
                                                                choices.panel_auto)
        #: The GEMM's operand orders, A's then B's (hpcmm.planning.gemm_orders); panels travel as stored (FC).
        self.gemm_order, self.step_order = choices.gemm_order, choices.step_order
        #: What the memory check compared: the bytes of every rank on this rank's device.
        self.device_bytes = choices.device_bytes
        self.plan: list[Step] = list(choices.rank_steps)
        #: Steps of the longest plan: every rank's step records are that long (zeros after its own).
        self.steps = choices.steps
        #: The most times an element of C is stored in a product (the check's rounding model): the
        #: longest plan's steps, so that every rank models the same rounding.
        self.c_stores = self.steps
        shapes = layout.local_shapes(topo.rank)
        self.a_shape, self.b_shape, self.c_shape = shapes["A"], shapes["B"], shapes["C"]
        self.m_loc, self.n_loc = self.c_shape
        #: Leading dimensions (elements): A's columns, and B's and C's rows, padded apart (layout.padded).
        #: The ranks of a channel agree on them: a process row shares m_loc, a process column n_loc,
        #: so a panel's offset in its owner's block is computed here.
        self.ld_a = padded(self.m_loc, self.dtype.itemsize)
        self.ld_b = self.ld_c = padded(self.n_loc, self.dtype.itemsize)
        self.channels: list[PanelChannel] = []
        self.closed = False
        vnodes = topo.comm.allgather(topo.vnode)
        self.row = self._channel(topo.row_comm, vnodes, self.a_shape[1] * self.ld_a, self.ld_a, cuda_aware)
        self.col = self._channel(topo.col_comm, vnodes, self.b_shape[0] * self.ld_b, self.ld_b, cuda_aware)
        # A, B and C are views of their logical shapes; the padding past them is never read.
        self.A = self._typed(self.row.block, (self.ld_a, self.a_shape[1]), order="F")[: self.m_loc]
        self.B = self._typed(self.col.block, (self.b_shape[0], self.ld_b), order="C")[:, : self.n_loc]
        # This rank's own allocations may fail alone (out of memory): the channels are built on
        # every rank, so every rank must learn of it and close them together.
        with collective_setup(topo.comm, self.close):
            self.C = self._c_block(c_storage)
            self.scratch = self._relayout_scratch()
        #: Bytes of the last product by (source world rank, this rank, path).
        self.bytes_by_pair: collections.Counter = collections.Counter()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, kind, error, traceback) -> None:
        if raised_everywhere(error):
            self.close()

    # -- set-up ---------------------------------------------------------------
    def slots_per_operand(self) -> int:
        """Panel slots each channel may keep (the deepest: a channel that spans nodes keeps 2 or more)."""
        return self.choices.slots

    def needed_bytes(self) -> int:
        """What this rank's blocks, panel rings and re-layout scratch take on its device (the memory check's figure)."""
        return self.choices.needed_bytes

    @property
    def gemm_order_label(self) -> str:
        """The GEMM's operand orders as files name them, e.g. ``A:C B:F``."""
        return self.choices.gemm_order_label

    def _relayout_scratch(self) -> list[tuple[object, object]]:
        """Per slot of the engine's ring, a panel-sized buffer for A and for B where the GEMM takes the other order.

        Slot ``s % ring`` is rewritten by the fetch of step ``s`` only after
        GEMM ``s - ring``, which read it, is done: the fetch's wait on that GEMM.
        """
        relayout_a, relayout_b = relaid(self.gemm_order)
        ld_panel = padded(self.panel, self.dtype.itemsize)
        a_size = self.m_loc * ld_panel if relayout_a else 0
        b_size = ld_panel * self.n_loc if relayout_b else 0
        return [(self.backend.empty((a_size,), self.dtype) if a_size else None,
                 self.backend.empty((b_size,), self.dtype) if b_size else None) for _ in range(self.ring)]

    def _channel(self, comm, vnodes, block_elements, panel_rows, cuda_aware) -> PanelChannel:
        """Collective: one operand's channel; a failure on any rank fails it on all.

        ``block_elements`` counts the padding; a panel of one k is ``panel_rows`` (the leading
        dimension) elements.
        """
        itemsize = self.dtype.itemsize
        members = comm.allgather(self.topo.rank)
        with collective_setup(self.topo.comm, self.close):
            channel = PanelChannel(
                comm, members, [vnodes[r] for r in members], self.backend,
                block_elements * itemsize, panel_rows * self.panel * itemsize,
                self.prefetch, cuda_aware,
            )
            self.channels.append(channel)
        return channel

    def _c_block(self, storage):
        """C of the logical shape, a view of ``(m_loc, ld_c)`` storage poisoned with NaN.

        ``storage`` is allocated here unless the caller passes its own (the 2.5D
        reduction's partial block, which its fiber peers read): then it must
        have that shape and the run's type, and its owner poisons it.
        """
        if storage is None:
            storage = self.backend.empty((self.m_loc, self.ld_c), self.dtype)
            self.backend.poison(storage)
        elif tuple(storage.shape) != (self.m_loc, self.ld_c) or storage.dtype != self.dtype:
            raise ValueError(f"C storage of shape {tuple(storage.shape)} {storage.dtype}: the engine needs "
                             f"({self.m_loc}, {self.ld_c}) {self.dtype}")
        return storage[:, : self.n_loc]

    def _typed(self, raw, shape, order):
        count = int(np.prod(shape))
        flat = raw.view(self.dtype)[:count] if count else raw[:0].view(self.dtype)
        return flat.reshape(shape, order=order)

    def load(self, a_host: np.ndarray, b_host: np.ndarray) -> None:
        """Copy this rank's blocks in (host arrays of the block shapes), then align the ranks.

        In pieces of at most :data:`LOAD_PIECE_BYTES`: the device never holds a
        second full-size copy of a block beside the block itself.
        """
        copy_in(self.backend, self.A, a_host, self.dtype, axis=1)  # A is column-major: whole columns
        copy_in(self.backend, self.B, b_host, self.dtype, axis=0)  # B row-major: whole rows
        self.backend.synchronize()
        # Peers read these blocks from now on.
        self.topo.comm.Barrier()

    # -- the product ----------------------------------------------------------
    def _panel(self, transfer, width: int, operand: str):
        """The arrived panel as a view of its logical shape, its columns (A) or rows (B) padded apart.

        A panel travels with its padding (whole stored lines: at most 127 bytes a line more), so
        that it is a view of one contiguous piece like its block.
        """
        data = transfer.panel.view(self.dtype)
        if operand == "A":
            return data[: width * self.ld_a].reshape((self.ld_a, width), order="F")[: self.m_loc]
        return data[: width * self.ld_b].reshape((width, self.ld_b))[:, : self.n_loc]

    def _for_gemm(self, transfer, width: int, operand: str, slot: int):
        """The panel in the order the GEMM takes, and the event the GEMM waits for.

        Where the GEMM takes it in the other order it is re-laid out into the
        slot's scratch on the communication stream as soon as it is there, so
        that the copy overlaps the GEMM before it.  Returns ``(panel, ready,
        relaid)``.
        """
        panel = self._panel(transfer, width, operand)
        index = 0 if operand == "A" else 1
        wanted = self.gemm_order[index]
        # An empty C needs no GEMM, so no panel in another order either.
        if wanted == ("F" if operand == "A" else "C") or self.m_loc * self.n_loc == 0:
            return panel, transfer.ready, False
        backend, stream = self.backend, self.backend.comm_stream
        # Padded like the blocks, so that the GEMM reads aligned lines here too: rows of A, columns of B.
        ld = padded(width, self.dtype.itemsize)
        rows, cols = panel.shape
        scratch = self.scratch[slot][index]
        if wanted == "C":  # A row-major: m_loc rows of width, ld apart
            target = scratch[: rows * ld].reshape((rows, ld))[:, :cols]
        else:  # B column-major: n_loc columns of width, ld apart
            target = scratch[: cols * ld].reshape((ld, cols), order="F")[:rows]
        backend.wait(stream, transfer.ready)
        backend.relayout(target, panel, stream)
        return target, backend.event(stream), True

    def multiply(self) -> IterationTimes:
        """One distributed product ``C = A·B``; returns this rank's timings."""
        backend = self.backend
        itemsize = self.dtype.itemsize
        compute_stream, comm_stream = backend.compute_stream, backend.comm_stream
        nsteps = len(self.plan)
        gemm_done = [None] * self.ring
        fetched: dict[int, tuple] = {}  # step: A's panel for the GEMM, its ready event, B's, its ready event
        marks: dict[int, StepMarks] = {}
        self.bytes_by_pair.clear()
        # The stream is idle (the last product synchronized): the start happens when it is recorded.
        start = perf_counter()
        product_start = backend.event(compute_stream)
        backend.wait(comm_stream, product_start)  # the communication stream starts with the product

        def fetch(s: int) -> None:
            step = self.plan[s]
            width, slot = step.width, s % self.ring
            # Wait for the slot before the first mark, so that the transfer's bar in the
            # timeline is the transfer, not the GEMM it waited for.
            backend.wait(comm_stream, gemm_done[slot])
            before = backend.event(comm_stream)
            # The channels take the step, not our slot: a channel that spans nodes keeps a
            # deeper ring (at least 2) and must alternate its relay slots even with prefetch 0.
            # gemm_done[slot] (GEMM s - ring) is as late as any GEMM that read their slot.
            a = self.row.fetch(step.a_root, step.a_offset * self.ld_a * itemsize,
                               width * self.ld_a * itemsize, s, gemm_done[slot])
            # A re-layout is part of its panel's transfer: communication-stream work, timed with it.
            a_panel, a_ready, a_relaid = self._for_gemm(a, width, "A", slot)
            a_end = backend.event(comm_stream)
            b = self.col.fetch(step.b_root, step.b_offset * self.ld_b * itemsize,
                               width * self.ld_b * itemsize, s, gemm_done[slot])
            b_panel, b_ready, b_relaid = self._for_gemm(b, width, "B", slot)
            b_end = backend.event(comm_stream)
            fetched[s] = (a_panel, a_ready, b_panel, b_ready)
            marks[s] = StepMarks(before if a.started is None else a.started, a_end,
                                 a_end if b.started is None else b.started, b_end,
                                 a.ready is not None or a.host_bound or a_relaid,
                                 b.ready is not None or b.host_bound or b_relaid)
            for t in (a, b):
                if t.nbytes:
                    self.bytes_by_pair[(t.source, self.topo.rank, t.path)] += t.nbytes

        for s in range(min(self.prefetch, nsteps)):
            fetch(s)
        for s in range(nsteps):
            if self.prefetch == 0:
                fetch(s)
            a_panel, a_ready, b_panel, b_ready = fetched.pop(s)
            backend.wait(compute_stream, a_ready)
            backend.wait(compute_stream, b_ready)
            marks[s].gemm_start = backend.event(compute_stream)
            backend.gemm(a_panel, b_panel, self.C, accumulate=s > 0, stream=compute_stream, tf32=self.tf32)
            marks[s].gemm_end = gemm_done[s % self.ring] = backend.event(compute_stream)
            if self.prefetch and s + self.prefetch < nsteps:
                fetch(s + self.prefetch)
        product_end = backend.event(compute_stream)
        backend.synchronize()
        return DeferredTimes(backend.elapsed(product_start, product_end), start,
                             lambda: self._step_times(product_start, marks))

    def _step_times(self, product_start, marks: dict[int, StepMarks]) -> tuple:
        """``(steps, timeline, host)`` of one product, from its events (see :class:`IterationTimes`)."""
        elapsed = self.backend.elapsed
        nsteps = len(self.plan)
        steps = np.zeros((self.steps, len(PHASES)))
        host = np.zeros(self.steps)
        rows = []
        previous_end = 0.0
        for s in range(nsteps):
            mark = marks[s]
            # Seconds since the product's start, on this rank's device clock.
            a_start, a_end, b_start, b_end, gemm_start, gemm_end = (
                elapsed(product_start, e) for e in (mark.a_start, mark.a_end, mark.b_start, mark.b_end,
                                                    mark.gemm_start, mark.gemm_end))
            gemm = gemm_end - gemm_start
            comm = (a_end - a_start) + (b_end - b_start)
            gap = max(0.0, gemm_start - previous_end)
            # The panels of step s were there once the last transfer that moved one had ended.
            ready = b_end if mark.b_moved else (a_end if mark.a_moved else None)
            waiting = 0.0 if ready is None else min(gap, max(0.0, ready - previous_end))
            steps[s] = (gemm, comm, waiting)
            host[s] = gap - waiting
            previous_end = gemm_end
            if self.record_timeline:
                rows += [(1, 1, s, a_start, a_end), (1, 2, s, b_start, b_end), (0, 0, s, gemm_start, gemm_end)]
        timeline = np.array(rows, dtype=np.float64).reshape(-1, 5) if self.record_timeline else None
        return steps, timeline, host

    # -- tear-down ------------------------------------------------------------
    def close(self) -> None:
        """Collective: close both channels (IPC handles, windows, communicators)."""
        if self.closed:
            return
        self.closed = True
        self.backend.synchronize()
        # cuBLASLt's plans hold this engine's panels and C: let them go with the engine.
        self.backend.forget_gemm_plans()
        for ch in reversed(self.channels):
            ch.close()
        self.channels = []
        self.A = self.B = self.C = None
        self.scratch = []
