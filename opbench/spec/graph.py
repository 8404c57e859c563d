"""The resolved model as a graph: the one place that knows who reads what.

A model is a list of layers in topological order, each naming the values it reads (an earlier
layer's output, by the layer's name, or a model input), as in torch.fx's node list and ONNX's
GraphProto. The list order *is* the walk. From the layers' `inputs` this module derives, once
per model, everything a stage needs to know about edges:

- producers: for each input of each layer, the layer that makes it (None: a model input);
- consumers: the layers that read each layer's output;
- model inputs (name → full shape) and model outputs (the layers nothing reads);
- the last reader of every value, so a forward frees each buffer as soon as it can;
- the connected pieces of the model, and whether a set of layers is connected (fusion);
- a group's external inputs and outputs, and an order in which fused groups can run.

The graph is built from plain rows (`Row`: name, reads, shape), so the stages that read a
run.json (match, compare, report) and those that read an ONNX file (export's cuts, the cut-time
solver) build the same graph as the GPU side, from what they have. `Graph.run` is the one walker
(torch.fx's Interpreter): each stage's pass is a `step` per layer, and values are dropped after
their last reader. Pure Python: no torch, no triton. Nothing else re-derives order, ancestors or
last readers, and nothing assumes "the previous layer": every layer names what it reads (the
suite loader, spec/wiring.py, writes `inputs`; an older run.json is read through its adapter).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

Shape = tuple[int, ...]

#: The name of the model input in the one-input form (`input: [dims]`).
INPUT = "input"


def fresh_input(layer: str) -> str:
    """The name of the model input that a layer setting its own `input:` reads. A '/' is in
    no layer name and no declared input's, so it clashes with nothing."""
    return f"{layer}/input"


@dataclass(frozen=True)
class Row:
    """One layer as the graph needs it: its name, the values it reads (earlier rows' names or
    model inputs), in order, its output shape (batch first; () where unknown) and, where known,
    the shape of each value it reads (a model input's shape comes from its first reader)."""

    name: str
    reads: tuple[str, ...]
    shape: Shape = ()
    read_shapes: tuple[Shape, ...] = ()


class OrderError(ValueError):
    """A row reads a value made at or after it: rows must stand in walk order. layer: the
    index of the row; value: the name it reads."""

    def __init__(self, layer: int, name: str, value: str) -> None:
        super().__init__(f"layer {name!r} reads {value!r}, which comes at or after it")
        self.layer, self.value = layer, value


@dataclass(frozen=True)
class Graph:
    """The edges of one model. Layers are referred to by their index in `ModelSpec.layers`
    (= the walk); values by name (a layer's name for its output, or a model input's name).

    names: the layers' names, in walk order.
    reads: for each layer, the values it reads, in its `inputs:` order.
    inputs: every model input, name → full shape, declared ones first, then fresh inputs of
        layers that set their own `input`, in walk order.
    producers: for each layer, per input, the index of the layer that makes it, or None for a
        model input.
    consumers: for each layer, the layers that read its output (each once), in walk order.
    outputs: the layers nothing reads: the model's outputs, in walk order.
    pieces: the connected pieces (layers joined by an edge or by reading one model input),
        each as its layer indices in walk order; pieces in order of their first layer.
    out_shapes: each layer's output shape (batch first).
    """

    names: tuple[str, ...]
    reads: tuple[tuple[str, ...], ...]
    inputs: Mapping[str, Shape]
    producers: tuple[tuple[int | None, ...], ...]
    consumers: tuple[tuple[int, ...], ...]
    outputs: tuple[int, ...]
    pieces: tuple[tuple[int, ...], ...]
    out_shapes: tuple[Shape, ...]

    @staticmethod
    def from_rows(rows: Sequence[Row], declared: Mapping[str, Shape] = {}) -> Graph:  # noqa: B006
        """The graph of `rows` (walk order) and the declared model inputs (name → shape); a
        read that names no earlier row is a model input. OrderError when a row reads itself
        or a later row."""
        return _from_rows(rows, declared)

    # ---- looking things up ---------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.names)

    def walk(self) -> range:
        """Layer indices in the order they run (the list order)."""
        return range(len(self.names))

    def index(self, name: str) -> int:
        return self.names.index(name)

    def is_input(self, value: str) -> bool:
        """Whether `value` is a model input (not a layer's output)."""
        return value in self.inputs

    def producer(self, value: str) -> int | None:
        """The index of the layer whose output `value` is; None for a model input."""
        return None if value in self.inputs else self.names.index(value)

    def model_inputs_of(self, index: int) -> tuple[str, ...]:
        """The model inputs layer `index` reads directly."""
        return tuple(v for v in self.reads[index] if v in self.inputs)

    @cached_property
    def last_reader(self) -> Mapping[str, int]:
        """value → index of the last layer that reads it (values nothing reads absent)."""
        each = self.frees([(i,) for i in self.walk()])
        return {value: i for i, drop in enumerate(each) for value in drop}

    def freed_after(self, index: int) -> tuple[str, ...]:
        """The values whose last reader is layer `index`: a forward can drop them after it."""
        return tuple(v for v, last in self.last_reader.items() if last == index)

    def frees(self, steps: Sequence[Sequence[int]]) -> tuple[tuple[str, ...], ...]:
        """For each step of a walk (a group of layers run as one; the steps in the order they
        run), the values it reads from outside itself for the last time in that walk: what the
        walker drops after it. The one last-reader computation (`run`, the eager forward)."""
        last: dict[str, int] = {}
        for k, group in enumerate(steps):
            for value in self.external_inputs(tuple(group)):
                last[value] = k
        out: list[list[str]] = [[] for _ in steps]
        for value, k in last.items():
            out[k].append(value)
        return tuple(tuple(v) for v in out)

    def run(
        self,
        step: Callable[[int, tuple[Any, ...]], Any],
        sources: Mapping[str, Any],
        layers: Iterable[int] | None = None,
        keep: Iterable[int] = (),
    ) -> dict[int, Any]:
        """The one walker (torch.fx's Interpreter): run `layers` (default every layer; walk
        order) from `sources` (value name → what a step gets for it: every model input and
        outside value they read). `step(i, args)` computes layer i from its `inputs:` values,
        in order; each value is dropped after its last reader among `layers`. Returns the
        values of the layers in `keep` (default: the model outputs), by index."""
        order = list(self.walk()) if layers is None else sorted(layers)
        kept = tuple(self.outputs if layers is None and not keep else keep)
        return self.run_groups(
            lambda g, args: {g[0]: step(g[0], args)}, sources, [(i,) for i in order], kept
        )

    def run_groups(
        self,
        step: Callable[[tuple[int, ...], tuple[Any, ...]], Mapping[int, Any]],
        sources: Mapping[str, Any],
        groups: Sequence[Sequence[int]],
        keep: Iterable[int] = (),
    ) -> dict[int, Any]:
        """`run` for groups of layers computed as one (a fused group; the groups in an order
        they can run in, `order_groups`): `step(group, args)` gets the values of the group's
        `external_inputs`, in order, and returns the value of each of its `group_outputs` by
        layer index; each value is dropped after the last group that reads it. Returns the
        values of the layers in `keep`, by index."""
        steps = [tuple(g) for g in groups]
        kept = set(keep)
        env: dict[str, Any] = dict(sources)
        found: dict[int, Any] = {}
        for group, drop in zip(steps, self.frees(steps), strict=True):
            made = step(group, tuple(env[v] for v in self.external_inputs(group)))
            for i, out in made.items():
                env[self.names[i]] = out
                if i in kept:
                    found[i] = out
            for value in drop:
                del env[value]
        return found

    def ancestors(self, index: int) -> frozenset[int]:
        """Every layer whose output reaches layer `index` (itself excluded)."""
        return self.ancestor_sets[index] - {index}

    @cached_property
    def ancestor_sets(self) -> tuple[frozenset[int], ...]:
        """A(k) for every layer k: k and every layer whose output reaches it (a cut of the
        model after k, export/cuts.py; the cut-time solver, reference/prefix_graph.py)."""
        sets: list[frozenset[int]] = []
        for k in self.walk():
            members = {k}
            for p in self.producers[k]:
                if p is not None:
                    members |= sets[p]
            sets.append(frozenset(members))
        return tuple(sets)

    def inputs_reached(self, index: int) -> frozenset[str]:
        """The model inputs layer `index` depends on, directly or through its ancestors."""
        return frozenset(v for k in self.ancestor_sets[index] for v in self.model_inputs_of(k))

    # ---- groups of layers (fusion, work items) -------------------------------------------
    def is_connected(self, indices: Iterable[int]) -> bool:
        """Whether the layers form one connected piece through edges among themselves (a
        model input two of them read does not join them: a fused group shares data, not
        just a source)."""
        group = set(indices)
        if not group:
            return False
        start = min(group)
        seen = {start}
        todo = [start]
        while todo:
            i = todo.pop()
            near = [p for p in self.producers[i] if p is not None] + list(self.consumers[i])
            for j in near:
                if j in group and j not in seen:
                    seen.add(j)
                    todo.append(j)
        return seen == group

    def external_inputs(self, group: Sequence[int]) -> tuple[str, ...]:
        """The values the group reads that no layer of the group makes, in order of first use
        (walk order, then each layer's `inputs:` order), each once: the inputs of the group's
        `Built`. A single layer gets its `inputs:` as written, repeats included (`add [x, x]`
        takes two tensors); a fused group takes each value once."""
        if len(group) == 1:
            return tuple(self.reads[group[0]])
        members = set(group)
        found: dict[str, None] = {}
        for i in sorted(members):
            for value, producer in zip(self.reads[i], self.producers[i], strict=True):
                if producer is None or producer not in members:
                    found.setdefault(value, None)
        return tuple(found)

    def group_outputs(self, group: Sequence[int]) -> tuple[int, ...]:
        """The layers of the group whose output is needed outside it: read by a layer outside
        the group, or a model output."""
        members = set(group)
        return tuple(
            i
            for i in sorted(members)
            if not self.consumers[i] or any(c not in members for c in self.consumers[i])
        )

    def ends(self, group: Sequence[int]) -> tuple[int, ...]:
        """The layers of the group that no layer of the group reads (walk order): what a
        graph of just these layers must output, so that no engine drops one as dead code."""
        members = set(group)
        return tuple(i for i in sorted(members) if members.isdisjoint(self.consumers[i]))

    def order_groups(self, groups: Iterable[Sequence[int]]) -> list[tuple[int, ...]]:
        """The groups (which together cover every layer once) in an order they can run in:
        each after the groups that make its inputs; among those ready, the one whose first
        layer comes first in the list. Raises ValueError when no order exists (a group that
        reads, through another group, its own output)."""
        groups = [tuple(sorted(g)) for g in groups]
        owner = {i: k for k, g in enumerate(groups) for i in g}
        if sorted(owner) != list(self.walk()) or len(owner) != sum(map(len, groups)):
            raise ValueError("the groups do not cover every layer exactly once")
        needs = [
            {owner[p] for i in g for p in self.producers[i] if p is not None} - {k}
            for k, g in enumerate(groups)
        ]
        done: set[int] = set()
        order: list[tuple[int, ...]] = []
        while len(order) < len(groups):
            ready = [k for k in range(len(groups)) if k not in done and needs[k] <= done]
            if not ready:
                stuck = [groups[k] for k in range(len(groups)) if k not in done]
                raise ValueError(f"no order runs these groups (a cycle through {stuck})")
            k = min(ready, key=lambda k: groups[k][0])
            done.add(k)
            order.append(groups[k])
        return order

    def live_bytes(self, itemsizes: Sequence[int]) -> int:
        """The largest total size, in bytes, of the layer outputs alive at once when the walk
        frees each after its last reader (a layer's output is alive from the layer until its
        last reader has run; model outputs until the end). Model inputs are not counted.
        itemsizes: bytes per element of each layer's output."""
        from opbench.ops.base import numel  # pure: shapes only

        sizes = [numel(s) * size for s, size in zip(self.out_shapes, itemsizes, strict=True)]
        alive = 0
        peak = 0
        for i in self.walk():
            alive += sizes[i]
            peak = max(peak, alive)
            for value in self.freed_after(i):
                if value not in self.inputs:
                    alive -= sizes[self.names.index(value)]
        return peak


def _from_rows(rows: Sequence[Row], declared: Mapping[str, Shape]) -> Graph:
    names = tuple(row.name for row in rows)
    position = {name: i for i, name in enumerate(names)}
    inputs: dict[str, Shape] = {k: tuple(v) for k, v in declared.items()}
    producers: list[tuple[int | None, ...]] = []
    consumers: list[list[int]] = [[] for _ in rows]
    for i, row in enumerate(rows):
        shapes = tuple(row.read_shapes) or ((),) * len(row.reads)
        line: list[int | None] = []
        for value, shape in zip(row.reads, shapes, strict=True):
            at = position.get(value)
            if at is not None and at < i:
                line.append(at)
                if i not in consumers[at]:
                    consumers[at].append(i)
            elif at is not None:
                raise OrderError(i, row.name, value)
            else:
                inputs.setdefault(value, tuple(shape))
                line.append(None)
        producers.append(tuple(line))
    return Graph(
        names=names,
        reads=tuple(tuple(row.reads) for row in rows),
        inputs=inputs,
        producers=tuple(producers),
        consumers=tuple(tuple(c) for c in consumers),
        outputs=tuple(i for i in range(len(rows)) if not consumers[i]),
        pieces=_pieces([row.reads for row in rows], producers),
        out_shapes=tuple(tuple(row.shape) for row in rows),
    )


def _pieces(
    reads: Sequence[Sequence[str]], producers: Sequence[Sequence[int | None]]
) -> tuple[tuple[int, ...], ...]:
    """Connected pieces: union-find over edges, and over layers reading one model input."""
    parent = list(range(len(reads)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    def join(a: int, b: int) -> None:
        ra, rb = root(a), root(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)

    first_reader: dict[str, int] = {}
    for i, values in enumerate(reads):
        for value, producer in zip(values, producers[i], strict=True):
            if producer is not None:
                join(i, producer)
            else:
                join(i, first_reader.setdefault(value, i))
    pieces: dict[int, list[int]] = {}
    for i in range(len(reads)):
        pieces.setdefault(root(i), []).append(i)
    return tuple(tuple(p) for p in sorted(pieces.values(), key=lambda p: p[0]))
