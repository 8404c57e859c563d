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

Pure Python: no torch, no triton. Nothing else re-derives order or assumes "the previous
layer"; the loader (spec/resolve.py) writes every layer's `inputs`, and a model built by hand
gets them from `chain_inputs`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from opbench.spec.model import LayerSpec, ModelSpec

Shape = tuple[int, ...]

#: The name of the model input in the one-input form (`input: [dims]`).
INPUT = "input"


def fresh_input(layer: str) -> str:
    """The name of the model input that a layer setting its own `input:` reads. A '/' is in
    no layer name and no declared input's, so it clashes with nothing."""
    return f"{layer}/input"


def chain_inputs(layers: Sequence[LayerSpec]) -> tuple[LayerSpec, ...]:
    """Layers made by hand, without `inputs`, as the chain the suite format means by default:
    each reads the layer before it; the first, and any `starts_chain` layer, fresh data (the
    first layer `input`, a later one `<name>/input`)."""
    out: list[LayerSpec] = []
    for i, layer in enumerate(layers):
        if not layer.inputs:
            if i == 0:
                names: tuple[str, ...] = (INPUT,)
            elif layer.starts_chain:
                names = (fresh_input(layer.name),)
            else:
                names = (layers[i - 1].name,)
            layer = replace(layer, inputs=names, starts_chain=i == 0 or layer.starts_chain)
        out.append(layer)
    return tuple(out)


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
    last_reader: value → index of the last layer that reads it (values nothing reads absent).
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
    last_reader: Mapping[str, int]
    pieces: tuple[tuple[int, ...], ...]
    out_shapes: tuple[Shape, ...]

    @staticmethod
    def of(model: ModelSpec) -> Graph:
        return build_graph(model.layers, dict(model.inputs))

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

    def freed_after(self, index: int) -> tuple[str, ...]:
        """The values whose last reader is layer `index`: a forward can drop them after it."""
        return tuple(v for v, last in self.last_reader.items() if last == index)

    def ancestors(self, index: int) -> frozenset[int]:
        """Every layer whose output reaches layer `index` (itself excluded)."""
        seen: set[int] = set()
        todo = [p for p in self.producers[index] if p is not None]
        while todo:
            p = todo.pop()
            if p not in seen:
                seen.add(p)
                todo += [q for q in self.producers[p] if q is not None]
        return frozenset(seen)

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


def build_graph(layers: Sequence[LayerSpec], declared: Mapping[str, Shape]) -> Graph:
    """The graph of `layers` (each with `inputs` set) and the declared model inputs. Every
    input must name a model input or an earlier layer: the loader has checked that
    (spec/resolve.py); a hand-made model that breaks it gets a ValueError."""
    names = tuple(layer.name for layer in layers)
    position = {name: i for i, name in enumerate(names)}
    inputs: dict[str, Shape] = {k: tuple(v) for k, v in declared.items()}
    producers: list[tuple[int | None, ...]] = []
    consumers: list[list[int]] = [[] for _ in layers]
    last_reader: dict[str, int] = {}
    for i, layer in enumerate(layers):
        row: list[int | None] = []
        for value, shape in zip(layer.inputs, layer.input_shapes, strict=True):
            at = position.get(value)
            if at is not None and at < i:
                row.append(at)
                if i not in consumers[at]:
                    consumers[at].append(i)
            elif at is not None:
                raise ValueError(f"layer {layer.name!r} reads {value!r}, which comes after it")
            else:
                inputs.setdefault(value, tuple(shape))
                row.append(None)
            last_reader[value] = i
        producers.append(tuple(row))
    outputs = tuple(i for i in range(len(layers)) if not consumers[i])
    return Graph(
        names=names,
        reads=tuple(tuple(layer.inputs) for layer in layers),
        inputs=inputs,
        producers=tuple(producers),
        consumers=tuple(tuple(c) for c in consumers),
        outputs=outputs,
        last_reader=last_reader,
        pieces=_pieces(layers, producers),
        out_shapes=tuple(tuple(layer.output_shape) for layer in layers),
    )


def _pieces(
    layers: Sequence[LayerSpec], producers: Sequence[Sequence[int | None]]
) -> tuple[tuple[int, ...], ...]:
    """Connected pieces: union-find over edges, and over layers reading one model input."""
    parent = list(range(len(layers)))

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
    for i, layer in enumerate(layers):
        for value, producer in zip(layer.inputs, producers[i], strict=True):
            if producer is not None:
                join(i, producer)
            else:
                join(i, first_reader.setdefault(value, i))
    pieces: dict[int, list[int]] = {}
    for i in range(len(layers)):
        pieces.setdefault(root(i), []).append(i)
    return tuple(tuple(p) for p in sorted(pieces.values(), key=lambda p: p[0]))
