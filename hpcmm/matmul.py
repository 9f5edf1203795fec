"""``hpcmm.Matmul``: C ← α·op(A)·op(B) + β·C on the caller's own distributed arrays, planned once, executed many times.

Collective: every rank of ``comm`` makes the same calls in the same order.
Launch (four ranks; each holds its blocks of A, B and C)::

    mpiexec -n 4 python examples/matmul.py

    with hpcmm.Matmul(comm, m, n, k, "float64", alpha=2.0) as mm:
        plan = mm.plan()                          # communicators, buffers, IPC, GEMM tuning
        rows, cols = plan.layout.ranges("A", comm.rank)
        for _ in range(10):
            c = mm.execute(a_block, b_block)      # only the product

The plan's layout (:attr:`Plan.layout`) is where hpcmm computes without moving
data; a caller may hold its blocks in any other 2-D block layout
(``layout=``), and they are then moved in and out with MPI
(:mod:`hpcmm.io.redistribute`).  Operands are copied into hpcmm's blocks unless
they are those blocks (:meth:`Matmul.empty`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import numbers
from time import perf_counter

import numpy as np
from mpi4py import MPI

from .config import DTYPES, RunConfig
from .planning.assemble import Assembly, Semantics, assembled
from .geometry.distribution import OPERANDS, Layout
from .dtypes import numpy_dtype
from .execution.engine import copy_in
from .errors import InputError, agree, collective, raised_everywhere
from .io.operands import apply_op, check, to_host, view
from .options import as_options
from .planning.plan import Plan, agree_on, settings_fields
from .io.redistribute import redistribute

__all__ = ["ExecuteTimes", "Matmul", "OPS", "matmul"]

#: ``N``: as stored; ``T``: transposed; ``C``: conjugate transposed (the transpose for real types, as in BLAS).
OPS = ("N", "T", "C")


@dataclasses.dataclass(frozen=True)
class ExecuteTimes:
    """One :meth:`Matmul.execute` on this rank (seconds, bytes)."""

    seconds: float  # the whole call
    product_seconds: float  # the distributed product on the device (the engine's window)
    copied_bytes: int  # operand bytes copied into or out of hpcmm's blocks on this rank
    moved_bytes: int  # bytes sent to other ranks to change layouts
    #: ``time.perf_counter()`` when the call began, when the product's window opened, and when the
    #: product was done as the host sees it (the engine's last synchronize returned): on one node a
    #: clock that the ranks share, so the job's call and product windows can be compared.
    start: float = 0.0
    product_start: float = 0.0
    product_end: float = 0.0
    #: The engine's record of the product (per-step seconds, timeline, tiles): what the command line
    #: keeps of every timed product.
    product: object = dataclasses.field(default=None, repr=False)

    @property
    def host_seconds(self) -> float:
        """The call's time outside the product's window on the host (checks, copies, agreement).

        The window runs from the product's first launch to the return of its last synchronize, so
        a device shared by time slices, busy with other ranks' work when this rank's last GEMM
        ends, counts as the product's, not the host's.
        """
        return max(0.0, self.seconds - (self.product_end - self.product_start))


def _check_problem(m, n, k, dtype, alpha, beta, op_a, op_b) -> str:
    for name, value in (("m", m), ("n", n), ("k", k)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
            raise InputError(f"{name}={value!r}: expected a positive integer")
    name = np.dtype(dtype).name if not isinstance(dtype, str) else dtype
    if name not in DTYPES:
        raise InputError(f"dtype={name!r}: expected one of {', '.join(DTYPES)}")
    complex_type = numpy_dtype(name).kind == "c"  # bfloat16: ml_dtypes, numpy learns the name
    for label, value in (("alpha", alpha), ("beta", beta)):
        if isinstance(value, bool) or not isinstance(value, numbers.Number) or not np.isfinite(complex(value)):
            raise InputError(f"{label}={value!r}: expected a finite number")
        if not complex_type and complex(value).imag != 0:
            raise InputError(f"{label}={value!r}: complex, and dtype={name} is real")
    for label, value in (("op_a", op_a), ("op_b", op_b)):
        if value not in OPS:
            raise InputError(f"{label}={value!r}: expected one of {', '.join(OPS)}")
    return name


class Matmul:
    """A distributed GEMM ``C ← α·op(A)·op(B) + β·C``: specify, :meth:`plan` once, :meth:`execute` many times.

    Parameters
    ----------
    comm : MPI.Comm
        The ranks that hold the operands; it is duplicated, never used as it is.
    m, n, k : int
        ``op(A)`` is m×k, ``op(B)`` k×n, C m×n.
    dtype : str or numpy.dtype
        One of hpcmm's types (``float64``, ``float32``, ``float16``, ``bfloat16``, ``complex128``, ``complex64``).
    layout : Layout, optional
        Where the caller's blocks are (any 2-D block layout of its ranks); default: the plan's.
    alpha, beta : number
        β ≠ 0 reads C: pass ``c`` to :meth:`execute`.
    op_a, op_b : {"N", "T", "C"}
        With ``T`` or ``C`` the caller stores A as k×m (B as n×k).
    options : MatmulOptions or dict, optional
        How to plan (:class:`hpcmm.MatmulOptions`); unset fields from ``HPCMM_*``, else defaults.

    Raises
    ------
    InputError
        On every rank: a bad argument, or ranks that were given different ones.
    """

    def __init__(self, comm, m, n, k, dtype, *, layout: Layout | None = None, alpha=1, beta=0, op_a="N",
                 op_b="N", options=None) -> None:
        self._comm = None  # free() is safe whatever the checks say
        with collective(comm):  # a bad argument on one rank fails every rank, never a hang
            kind = numpy_dtype(_check_problem(m, n, k, dtype, alpha, beta, op_a, op_b))
            scalar = complex if kind.kind == "c" else float
            sizes = (int(m), int(n), int(k))
            options = as_options(options)
            config = options.config(*sizes, kind.name)
            if layout is not None:
                _check_layout(layout, _stored_shapes(sizes, op_a, op_b), comm.Get_size())
        self._begin(comm, kind, sizes, config, scalar(alpha), scalar(beta), op_a, op_b)
        self.options, self._caller_layout = options, layout

    @classmethod
    def from_config(cls, comm, config: RunConfig, *, shape: tuple[int, int, int] | None = None,
                    progress=None) -> Matmul:
        """A Matmul for a command line's whole :class:`~hpcmm.config.RunConfig` (what ``run`` multiplies).

        ``shape``: ``(m, n, k)`` where the sizes come from elsewhere (input files); else
        ``config``'s, where unset the device's default (known once :meth:`plan` has found it).
        ``progress``: called with the planner's messages (hints on shared GPUs, the awareness note).
        """
        self = cls.__new__(cls)
        self._comm = None
        with collective(comm):
            sizes = shape if shape is not None else tuple(v or 1 for v in (config.m, config.n, config.k))
            kind = numpy_dtype(_check_problem(*sizes, config.dtype, config.alpha, config.beta, config.op_a,
                                              config.op_b))
        # The sizes are final once the device is known: a file's, the given ones, or the device's default.
        shape_from = None if shape is not None else (
            lambda backend, cfg: _default_shape(cfg.with_default_size(backend.on_gpu)))
        self._begin(comm, kind, sizes, config, config.alpha, config.beta, config.op_a, config.op_b,
                    shape_from=shape_from, progress=progress)
        return self

    def _begin(self, comm, dtype, sizes, config: RunConfig, alpha, beta, op_a, op_b, *, shape_from=None,
               progress=None) -> None:
        """The state both constructors share, once their arguments are checked on every rank.

        ``shape_from(backend, config)``: the plan's ``(config, (m, n, k))`` once the device is known
        (default: ``sizes``); ``progress``: the planner's messages.
        """
        self.dtype = dtype
        self.m, self.n, self.k = sizes
        self.alpha, self.beta, self.op_a, self.op_b = alpha, beta, op_a, op_b
        self.options = None
        self._config = config
        self._caller_layout = None
        self._stack = contextlib.ExitStack()
        self._parts = None
        self._plan: Plan | None = None
        self._shape_from = shape_from if shape_from is not None else (lambda backend, cfg: (cfg, tuple(sizes)))
        self._say = progress if progress is not None else (lambda message: None)
        self.plan_seconds = None
        self.last: ExecuteTimes | None = None
        self._comm = comm.Dup()

    # -- context --------------------------------------------------------------
    def __enter__(self) -> Matmul:
        return self

    def __exit__(self, kind, error, traceback) -> None:
        # A collective tear-down only where every rank leaves the same way (errors.raised_everywhere);
        # after an error of this rank alone the job's end (MPI_Abort) takes what was built.
        if raised_everywhere(error):
            self.free()

    # -- plan -----------------------------------------------------------------
    def plan(self) -> Plan:
        """Collective: build everything the products need, once; returns the frozen :class:`Plan`.

        The ranks first compare their settings (options, ``HPCMM_*``, sizes, α, β, ops),
        then the plan itself; a difference is an :class:`InputError` on every rank.
        """
        if self._plan is not None:
            return self._plan
        if self._comm is None:
            raise InputError("this Matmul was freed: make a new one")
        start = MPI.Wtime()
        comm = self._comm
        fields = settings_fields(self._config) | {
            "alpha": repr(self.alpha), "beta": repr(self.beta), "op_a": self.op_a, "op_b": self.op_b,
            "layout": _digest(None if self._caller_layout is None else self._caller_layout.blocks)}
        agree_on(comm, fields, "setting")
        semantics = Semantics(self.alpha, self.beta, self.op_a, self.op_b)
        parts = self._stack.enter_context(assembled(
            comm, self._config, self._shape_from, _fill_for_timing, self._say, semantics=semantics))
        try:
            plan, engine = parts.plan, parts.engine
            self.m, self.n, self.k = parts.shape
            engine_rank = comm.allgather(engine.topo.rank)
            blocks = {name: tuple(getattr(engine.layout, f"{name.lower()}_block")(engine_rank[r])
                                  for r in range(comm.Get_size())) for name in OPERANDS}
            self.layout = Layout.from_product_blocks(self.m, self.n, self.k, blocks, op_a=self.op_a, op_b=self.op_b)
            self._own = {"A": engine.A, "B": engine.B, "C": engine.C}
            if parts.backend.on_gpu:
                # The first product maps the peers' blocks and tunes the GEMM library for the plan's shapes.
                _fill_for_timing(engine)
                comm.Barrier()
                engine.multiply()
            comm.Barrier()
        except BaseException as exc:
            # The assembly's own rule decides whether to tear down collectively: give it the error.
            self._stack.__exit__(type(exc), exc, exc.__traceback__)
            raise
        self._parts, self._engine, self._backend = parts, engine, parts.backend
        self._config = parts.config
        self.plan_seconds = comm.allreduce(MPI.Wtime() - start, op=MPI.MAX)
        self._plan = dataclasses.replace(plan, layout=self.layout)
        return self._plan

    @property
    def assembly(self) -> Assembly:
        """What :meth:`plan` built (placement, arrangement, algorithm, engine): the command line's records read it."""
        self.plan()
        return self._parts

    # -- execute --------------------------------------------------------------
    def _caller(self) -> Layout:
        return self._caller_layout if self._caller_layout is not None else self.layout

    def empty(self, operand: str):
        """A block for this rank's ``operand`` (``"A"``, ``"B"``, ``"C"``) in the caller's layout.

        In the plan's layout (and without op for A and B) it is hpcmm's own
        block: :meth:`execute` then copies nothing in or out.  The own C is
        rewritten by every execute; read it before the next one.
        """
        self.plan()
        if operand not in OPERANDS:
            raise InputError(f"operand {operand!r}: expected one of {', '.join(OPERANDS)}")
        shape = self._caller().local_shape(operand, self._comm.Get_rank())
        op = {"A": self.op_a, "B": self.op_b, "C": "N"}[operand]
        if op == "N" and self._caller_layout is None:
            return self._own[operand]
        return self._backend.xp.empty(shape, dtype=self.dtype)

    def execute(self, a, b, c=None, *, stream=None):
        """Collective: ``C ← α·op(A)·op(B) + β·C`` on this rank's blocks; returns C's block.

        ``c`` receives the result (and is read where β ≠ 0); without it a new
        array is returned (numpy, or cupy on GPUs).  ``stream``: a CUDA stream
        (cupy or torch) whose work the operands wait for; the call returns
        once C is written.

        Raises
        ------
        InputError
            On every rank: an operand of the wrong shape, type or device, named.
        """
        self.plan()
        start = perf_counter()
        comm, engine, backend, rank = self._comm, self._engine, self._backend, self._comm.Get_rank()
        caller = self._caller()
        device = backend.device_id if backend.on_gpu else None
        error, operands = None, {}
        try:
            for name, value in (("A", a), ("B", b), ("C", c)):
                if value is None and name != "C":
                    raise InputError(f"{name} is None: execute() multiplies the caller's A and B")
                if value is None:
                    continue
                operands[name] = view(name, value)
                if _same_block(operands[name].array, self._own[name]):
                    operands[name].array = self._own[name]  # hpcmm's own block (op(A), op(B), C): read in place
                    continue
                check(operands[name], caller.local_shape(name, rank), self.dtype, device, writable=name == "C")
            if self.beta != 0 and c is None:
                raise InputError(f"beta={self.beta}: β ≠ 0 reads C, so execute() needs c")
        except InputError as exc:
            error = exc
        # The caller's work on its operands (hpcmm's own blocks included) is done, on any stream.
        if stream is not None:
            stream.synchronize()
        backend.synchronize()
        # One small reduction says whether any rank failed (then the messages are agreed) and
        # whether any rank writes its blocks of A or B.  It is also the barrier after the last
        # product (a product ends with a synchronize: no peer still reads our blocks) and after
        # the caller's writes into hpcmm's own blocks (the peers may read them from now on).
        writes = error is None and any(operands[name].array is not self._own[name] for name in ("A", "B"))
        flags = np.array([error is not None, writes], dtype=np.int8)
        comm.Allreduce(MPI.IN_PLACE, flags, op=MPI.MAX)
        if flags[0]:
            agree(comm, error)
        counted = {"copied": 0, "moved": 0}
        for name, op in (("A", self.op_a), ("B", self.op_b)):
            self._fill(name, op, operands[name], counted)
        c_operand = operands.get("C")
        own_c = c_operand is not None and c_operand.array is self._own["C"]
        # β·C of hpcmm's own C must be read before the product overwrites it.
        kept = self._own["C"].copy() if own_c and self.beta != 0 else None
        if flags[1]:  # some rank wrote its blocks: the peers read them only once every rank has
            backend.synchronize()
            comm.Barrier()
        times = engine.multiply()
        product_end = perf_counter()  # every engine's product ends with a device synchronize
        if own_c:
            self._scale_own(kept)
            result = c_operand.array
        else:
            result = self._result(c_operand, counted)
        self.last = ExecuteTimes(perf_counter() - start, float(times.seconds), counted["copied"], counted["moved"],
                                 start, float(times.start), product_end, times)
        return c if c is not None else result

    def _fill(self, name: str, op: str, operand, counted: dict) -> None:
        """Put the caller's ``name`` into hpcmm's block: as it is, transposed, or moved between layouts."""
        target = self._own[name]
        if operand.array is target:
            return
        data = operand.array
        if self._caller_layout is not None:
            data = redistribute(self._comm, to_host(data), self._caller_layout.blocks[name], self.layout.blocks[name])
            counted["moved"] += int(data.nbytes)
        if target.size:
            data = apply_op(data, op)
            if isinstance(data, np.ndarray):  # from the host: in pieces, no full-size device temporary
                copy_in(self._backend, target, data, self.dtype, axis=1 if name == "A" else 0)
            else:
                target[...] = data
            counted["copied"] += int(target.nbytes)

    def _scale_own(self, kept) -> None:
        """α·(the product) + β·(C as it was), in hpcmm's own C."""
        product = self._own["C"]
        if not product.size:
            return
        if self.alpha != 1:
            product *= self.alpha
        if kept is not None:
            kept *= self.beta
            product += kept

    def _result(self, c_operand, counted: dict):
        """α times the engine's C, plus β·C, in the caller's layout and memory."""
        engine, backend = self._engine, self._backend
        product = engine.C
        if self.alpha != 1 and product.size:
            product *= self.alpha
        caller_on_device = c_operand.on_device if c_operand is not None else backend.on_gpu
        if self._caller_layout is not None:
            product = redistribute(self._comm, to_host(product), self.layout.blocks["C"],
                                   self._caller_layout.blocks["C"])
            counted["moved"] += int(product.nbytes)
            on_device = False
        else:
            on_device = backend.on_gpu
        if caller_on_device and not on_device:
            product = backend.xp.asarray(product)
        elif on_device and not caller_on_device:
            product = backend.to_host(product)
        if c_operand is None:
            out = product.copy() if product is engine.C else product
            counted["copied"] += int(out.nbytes)
            return out
        target = c_operand.array
        if self.beta == 0:
            target[...] = product
        else:
            target *= self.beta
            target += product
        counted["copied"] += int(target.nbytes)
        return target

    # -- tear-down ------------------------------------------------------------
    def free(self) -> None:
        """Collective: release the plan's communicators, IPC mappings and buffers (also on leaving ``with``)."""
        self._stack.close()
        self._parts = self._engine = self._plan = None
        self._own = {}
        if self._comm is not None:
            self._comm.Free()
            self._comm = None


def _digest(value) -> str:
    """A short hash of ``value``'s text: what the ranks compare of a caller's layout (its size grows with the ranks)."""
    return hashlib.sha256(repr(value).encode()).hexdigest()[:16]


def _check_layout(layout, shapes: dict, size: int) -> None:
    if not isinstance(layout, Layout):
        raise InputError(f"layout of type {type(layout).__name__}: expected hpcmm.Layout")
    if layout.size != size:
        raise InputError(f"layout of {layout.size} rank(s) for a communicator of {size}")
    for name in OPERANDS:
        if tuple(layout.shapes[name]) != tuple(shapes[name]):
            raise InputError(f"layout holds {name} as {layout.shapes[name]}: the product stores {name} as "
                             f"{shapes[name]}")


def _stored_shapes(sizes: tuple[int, int, int], op_a: str, op_b: str) -> dict[str, tuple[int, int]]:
    """A, B and C as the caller stores them: op(A) is m×k, so A is k×m where ``op_a`` is T or C."""
    m, n, k = sizes
    ops = {"A": op_a, "B": op_b, "C": "N"}
    shapes = {"A": (m, k), "B": (k, n), "C": (m, n)}
    return {name: shape if ops[name] == "N" else shape[::-1] for name, shape in shapes.items()}


def _same_block(x, own) -> bool:
    """Whether ``x`` is hpcmm's block ``own`` itself: the same memory, shape and strides (a new view of it counts)."""
    if x is own:
        return True
    if type(x) is not type(own) or x.shape != own.shape or x.strides != own.strides:
        return False
    if isinstance(x, np.ndarray):
        return x.__array_interface__["data"][0] == own.__array_interface__["data"][0]
    return x.data.ptr == own.data.ptr  # cupy


def _default_shape(config: RunConfig) -> tuple[RunConfig, tuple[int, int, int]]:
    return config, (config.m, config.n, config.k)


def _fill_for_timing(engine) -> None:
    """Untimed data in an engine's A and B: ones (no denormals, no NaN; what a GEMM's speed does not depend on)."""
    if engine.A.size:
        engine.A[...] = 1
    if engine.B.size:
        engine.B[...] = 1
    engine.backend.synchronize()


def matmul(comm, a, b, c=None, *, m: int, n: int, k: int, layout: Layout | None = None, alpha=1, beta=0,
           op_a="N", op_b="N", options=None):
    """Collective: one ``C ← α·op(A)·op(B) + β·C`` on the caller's blocks (a :class:`Matmul` planned, executed, freed).

    ``a``'s type is the product's.  For repeated products make one :class:`Matmul` instead.
    """
    dtype = view("A", a).array.dtype
    with Matmul(comm, m, n, k, dtype, layout=layout, alpha=alpha, beta=beta, op_a=op_a, op_b=op_b,
                options=options) as mm:
        return mm.execute(a, b, c)
