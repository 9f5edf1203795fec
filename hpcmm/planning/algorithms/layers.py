"""2.5D geometry: k cut over C layers inside every node, and who owns what.

Pure (no MPI): the ranks are given as their nodes, ``nodes[v]`` the ranks of
(virtual) node ``v`` in node-local order, so one process can check every rank
of any shape.

Rules (docs/scaling.md, section 5):

* every node has the same rank count ``R``, and ``C`` divides it; ``q = R / C``;
* layer ``l`` of a node is its node-local ranks ``[l·q, (l+1)·q)``; the layer's
  ranks over all nodes, node by node, are the ranks of one SUMMA grid of
  ``P / C`` ranks (layer rank ``p = v·q + i``);
* layer ``l`` owns the k range ``block_range(k, C, l)`` and multiplies
  ``A[:, k_l] · B[k_l, :]`` into a partial C laid out over its grid;
* the fiber of layer position ``p`` is the ``C`` ranks that hold position ``p``
  in layers ``0 … C-1``: all on node ``p // q``.  Their partial blocks are
  summed by a reduce-scatter: the block's rows cut into ``C`` near-equal
  pieces, fiber member ``j`` (layer ``j``) ends with piece ``j`` summed.

Worked example: 8 ranks, nodes of 4 (``--ranks-per-node 4``), ``C = 2``: q = 2,
layer 0 = ranks 0, 1, 4, 5 and layer 1 = ranks 2, 3, 6, 7, each a 2 × 2 grid.
Layer position 1 is rank 1 in layer 0 and rank 3 in layer 1: a fiber on node 0.
With m = 101 the grid's first process row holds rows 0–50; rank 1 ends with
rows 0–25 of its column block of C summed, rank 3 with rows 26–50.

>>> g = Layers.build([[0, 1, 2, 3], [4, 5, 6, 7]], 2)
>>> g.members(0), g.members(1), g.fiber(1)
((0, 1, 4, 5), (2, 3, 6, 7), (1, 3))
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

from ...errors import InputError
from ...geometry.layout import Grid, Layout, block_range

__all__ = ["ALGOS", "Algo", "LayeredLayout", "Layers", "check_layers", "parse_algo", "valid_layer_counts"]

#: What ``--algo`` takes (``2.5d:C`` with C an integer).
ALGOS = ("summa", "2.5d", "2.5d:C", "auto")


@dataclasses.dataclass(frozen=True)
class Algo:
    """A parsed ``--algo``: ``name`` is ``summa``, ``2.5d`` or ``auto``; ``layers`` the C of ``2.5d:C``."""

    name: str
    layers: int | None = None

    def __str__(self) -> str:
        return f"2.5d:{self.layers}" if self.name == "2.5d" and self.layers else self.name


def parse_algo(text: object, origin: str = "--algo") -> Algo:
    """Parse ``summa``, ``2.5d``, ``2.5d:C`` or ``auto``.

    Examples
    --------
    >>> parse_algo("2.5D:4"), str(parse_algo("summa"))
    (Algo(name='2.5d', layers=4), 'summa')

    Raises
    ------
    InputError
        Naming ``origin`` and the bad value.
    """
    value = str(text).strip().lower()
    if value in ("summa", "2.5d", "auto"):
        return Algo(value)
    found = re.fullmatch(r"2\.5d:\s*([+-]?\d+)", value)
    if found is None:
        raise InputError(f"{origin}={text!r}: expected summa, 2.5d, 2.5d:C (C an integer >= 1) or auto")
    layers = int(found.group(1))
    if layers < 1:
        raise InputError(f"{origin}={text!r}: expected 2.5d:C with C an integer >= 1")
    return Algo("2.5d", layers)


def check_layers(layers: int, node_sizes: Sequence[int], k: int | None = None, origin: str = "--algo") -> None:
    """Refuse ``layers`` that do not fit these nodes (and ``k``), with one line naming the value.

    Raises
    ------
    InputError
        Nodes of different rank counts, ``layers`` not dividing them, or
        fewer columns of k than layers (a layer would have nothing to do).
    """
    sizes = sorted(set(node_sizes))
    name = f"{origin}=2.5d:{layers}"
    if len(sizes) > 1:
        raise InputError(f"{name}: every node must hold the same number of ranks, not {', '.join(map(str, sizes))}")
    if sizes and sizes[0] % layers:
        raise InputError(f"{name}: {layers} layers must divide the {sizes[0]} ranks of each node")
    if k is not None and k < layers:
        raise InputError(f"{name}: k={k} is less than {layers} layers (each layer needs k columns of its own)")


def valid_layer_counts(ranks_per_node: int, k: int) -> tuple[int, ...]:
    """Layer counts above 1 that divide ``ranks_per_node`` and fit ``k`` (``auto``'s 2.5D candidates).

    >>> valid_layer_counts(8, 4096), valid_layer_counts(4, 3)
    ((2, 4, 8), (2,))
    """
    return tuple(c for c in range(2, ranks_per_node + 1) if ranks_per_node % c == 0 and c <= k)


@dataclasses.dataclass(frozen=True)
class Layers:
    """Which layer, layer rank and fiber each rank belongs to.  Build with :meth:`build`."""

    nodes: tuple[tuple[int, ...], ...]
    count: int  # C
    per_layer: int  # q: ranks of one node in one layer

    @classmethod
    def build(cls, nodes: Sequence[Sequence[int]], count: int) -> Layers:
        """``nodes[v]``: the ranks of node ``v`` in node-local order (checked by :func:`check_layers`)."""
        nodes = tuple(tuple(int(r) for r in node) for node in nodes)
        check_layers(count, [len(n) for n in nodes])
        return cls(nodes, count, len(nodes[0]) // count)

    @property
    def size(self) -> int:
        """Ranks in all."""
        return sum(len(n) for n in self.nodes)

    @property
    def layer_size(self) -> int:
        """Ranks of one layer (its grid's size)."""
        return self.size // self.count

    def _where(self, rank: int) -> tuple[int, int]:
        for v, node in enumerate(self.nodes):
            if rank in node:
                return v, node.index(rank)
        raise ValueError(f"rank {rank} is on no node")

    def layer(self, rank: int) -> int:
        """The layer of ``rank``: its node-local rank // q."""
        return self._where(rank)[1] // self.per_layer

    def layer_rank(self, rank: int) -> int:
        """Its rank in its layer's grid: node index · q + place in its node's slice."""
        v, local = self._where(rank)
        return v * self.per_layer + local % self.per_layer

    def members(self, layer: int) -> tuple[int, ...]:
        """The ranks of ``layer`` in layer-rank order."""
        q = self.per_layer
        return tuple(r for node in self.nodes for r in node[layer * q:(layer + 1) * q])

    def fiber(self, rank: int) -> tuple[int, ...]:
        """The ranks that hold ``rank``'s layer position, by layer (member ``j`` is in layer ``j``)."""
        v, local = self._where(rank)
        i, q = local % self.per_layer, self.per_layer
        return tuple(self.nodes[v][j * q + i] for j in range(self.count))

    def k_range(self, layer: int, k: int) -> tuple[int, int]:
        """The columns of A (rows of B) that ``layer`` multiplies."""
        return block_range(k, self.count, layer)


@dataclasses.dataclass(frozen=True)
class LayeredLayout:
    """Blocks of A, B and C of every rank in global coordinates (the :class:`~hpcmm.geometry.layout.Layout` interface).

    ``a_block``/``b_block`` are the rank's input blocks in its layer's grid,
    shifted to the layer's k range; ``c_block`` is the piece of C the rank
    holds after the reduce-scatter.  Every element of A, B and C has exactly
    one owner.

    Parameters
    ----------
    m, n, k : int
    layers : Layers
    grid : Grid
        The grid of every layer (``layers.layer_size`` ranks).
    """

    m: int
    n: int
    k: int
    layers: Layers
    grid: Grid

    def __post_init__(self) -> None:
        if self.grid.size != self.layers.layer_size:
            raise ValueError(f"a {self.grid} grid does not hold the {self.layers.layer_size} ranks of a layer")

    def layer_layout(self, layer: int) -> Layout:
        """The SUMMA layout that ``layer`` runs: (m, n, its k range's extent) over the grid."""
        k0, k1 = self.layers.k_range(layer, self.k)
        return Layout(self.m, self.n, k1 - k0, self.grid)

    def _local(self, rank: int) -> tuple[int, Layout, int]:
        layer = self.layers.layer(rank)
        return layer, self.layer_layout(layer), self.layers.layer_rank(rank)

    def a_block(self, rank: int) -> tuple[tuple[int, int], tuple[int, int]]:
        layer, layout, p = self._local(rank)
        k0 = self.layers.k_range(layer, self.k)[0]
        rows, (a0, a1) = layout.a_block(p)
        return rows, (k0 + a0, k0 + a1)

    def b_block(self, rank: int) -> tuple[tuple[int, int], tuple[int, int]]:
        layer, layout, p = self._local(rank)
        k0 = self.layers.k_range(layer, self.k)[0]
        (b0, b1), cols = layout.b_block(p)
        return (k0 + b0, k0 + b1), cols

    def partial_block(self, rank: int) -> tuple[tuple[int, int], tuple[int, int]]:
        """The block of C whose partial sum ``rank`` computes (its layer grid's C block)."""
        _, layout, p = self._local(rank)
        return layout.c_block(p)

    def local_shapes_partial(self, rank: int) -> tuple[int, int]:
        """The shape of ``rank``'s partial block."""
        return tuple(self.extent(r) for r in self.partial_block(rank))

    def piece(self, rank: int, member: int) -> tuple[int, int]:
        """Rows, relative to the partial block, of fiber member ``member``'s piece."""
        (r0, r1), _ = self.partial_block(rank)
        return block_range(r1 - r0, self.layers.count, member)

    def c_block(self, rank: int) -> tuple[tuple[int, int], tuple[int, int]]:
        """The rows and columns of C that ``rank`` holds, summed, after the reduction."""
        (r0, _), cols = self.partial_block(rank)
        p0, p1 = self.piece(rank, self.layers.layer(rank))
        return (r0 + p0, r0 + p1), cols

    @staticmethod
    def extent(rng: tuple[int, int]) -> int:
        return rng[1] - rng[0]

    def local_shapes(self, rank: int) -> dict[str, tuple[int, int]]:
        """Shapes of this rank's A and B blocks and of its piece of C."""
        return {name: tuple(self.extent(r) for r in block(rank))
                for name, block in (("A", self.a_block), ("B", self.b_block), ("C", self.c_block))}

    def block_sizes(self) -> dict[str, tuple[int, ...]]:
        """Extents per process row and column of layer 0's grid (every layer has the same rows and columns)."""
        return self.layer_layout(0).block_sizes()
