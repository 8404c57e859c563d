"""The walk over the prepared graph: canonical tensors, the views on them, and the layers made.

Nodes are visited in graph order (topological). A view node (reshape, transpose, …) only
computes its output's view (views.py); an op node asks for its inputs in the form it needs
(`canonical`, `rows`, or the raw view) and adds a layer (handlers.py). When an op needs a tensor
that is not its canonical tensor (a transpose that really moves data, a reshape the op cannot
read through), `canonical` replays the chain of view nodes as layers (permute, reshape,
flatten, slice), each named after its ONNX node, and remembers them for every later reader.

Layers get provisional ids (`#3`) here; names.py names them once the whole graph is known.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from opbench.importers.onnx import views as V
from opbench.importers.onnx.canon import Canon, Shape, Step
from opbench.importers.onnx.model import Absorbed, Layer, ModelInput, Unsupported
from opbench.importers.onnx.steps import reshape_layer, step_layers


@dataclass
class Walker:
    batch: int
    functions: dict  # (domain, op, overload) -> onnx_ir.Function
    fold_activations: Callable[[Any, Layer], bool]
    eager_views: Callable[[Any], bool] = lambda _node: False
    tensors: dict[int, Canon] = field(default_factory=dict)
    views: dict[str, V.View] = field(default_factory=dict)
    chains: dict[str, tuple[str, tuple[Step, ...]]] = field(default_factory=dict)
    canon_of: dict[str, tuple[Canon, int]] = field(default_factory=dict)
    consumers: dict[str, int] = field(default_factory=dict)
    layers: list[Layer] = field(default_factory=list)
    inputs: list[ModelInput] = field(default_factory=list)
    absorbed: dict[str, Absorbed] = field(default_factory=dict)
    unsupported: list[Unsupported] = field(default_factory=list)
    constant_inputs: dict[tuple[str, Shape], str] = field(default_factory=dict)
    reads: list[tuple[str, ...]] = field(default_factory=list)  # per layer: ONNX values read
    output_reads: list[str] = field(default_factory=list)  # model outputs read through views
    current: Any = None  # the node being handled
    # repeat_kv outputs (handlers_transformer.repeat_kv): their stand-in tensor's id → (the
    # repeated value, groups, the node). Only attention reads them, as kv_heads.
    repeats: dict[int, tuple[str, int, Any]] = field(default_factory=dict)
    # Masks computed from a model input (masks.py): attention call node → its mask graph;
    # their nodes are left to the attention layer that reads them (mask_nodes: skipped).
    masks: dict[str, Any] = field(default_factory=dict)
    mask_nodes: set[str] = field(default_factory=set)
    opsets: dict[str, int] = field(default_factory=dict)

    # ---- canonical tensors and views ----------------------------------------------------

    def new_tensor(self, shape: Shape, producer: str) -> Canon:
        canon = Canon(len(self.tensors), tuple(int(d) for d in shape), producer)
        self.tensors[canon.id] = canon
        return canon

    def set_canonical(self, value: str, canon: Canon, pos: int = 0) -> None:
        """`value` is `canon` itself, its batch shown at ONNX dim `pos`."""
        self.views[value] = V.identity(canon.id, canon.shape, pos)
        self.chains[value] = (value, ())
        self.canon_of[value] = (canon, pos)

    def set_view(self, node: Any, out: str, view: V.View, source: str) -> None:
        start, steps = self.chains[source]
        self.views[out] = view
        self.chains[out] = (start, (*steps, Step(node, out)))

    def set_view_of(self, out: str, view: V.View, canon: Canon) -> None:
        """An op's output that is a view (not the identity) of the canonical tensor it made."""
        self.views[out] = view
        self.chains[out] = (out, ())
        self.tensors.setdefault(canon.id, canon)
        pos = V.canonical_position(view)
        if pos is not None:
            self.canon_of[out] = (canon, pos)

    def tensor(self, view: V.View) -> Canon:
        return self.tensors[view.tensor]

    def canonical(self, value: str) -> tuple[Canon, int]:
        """The canonical tensor holding exactly `value` (its batch at ONNX dim pos), making
        layers for the view nodes on the way where data really moves."""
        if value in self.canon_of:
            return self.canon_of[value]
        view = self.views[value]
        pos = V.canonical_position(view)
        if pos is not None:
            found = (self.tensor(view), pos)
            self.canon_of[value] = found
            return found
        start, steps = self.chains[value]
        if start not in self.canon_of:
            if steps:
                raise V.NotAView("the batch is folded into another dim of this tensor")
            return self._reshaped(value)
        canon, pos = self.canon_of[start]
        # Replay only after the last value that is a canonical tensor itself: a transpose and
        # its inverse on the way make no layers.
        begin = 0
        for k, step in enumerate(steps):
            if step.out in self.canon_of:
                canon, pos = self.canon_of[step.out]
                begin = k + 1
                continue
            there = V.canonical_position(self.views[step.out])
            if there is not None:
                canon, pos = self.tensor(self.views[step.out]), there
                self.canon_of[step.out] = (canon, pos)
                begin = k + 1
        for step in steps[begin:]:
            canon, pos = step_layers(self, step, canon, pos)
            self.canon_of[step.out] = (canon, pos)
        return canon, pos

    def _reshaped(self, value: str) -> tuple[Canon, int]:
        """A layer's output whose view is its tensor reshaped (a linear on [1, 1, 1, E] whose
        ONNX output is [1, N]): a reshape layer (a view) gives the tensor the value's shape."""
        view = self.views[value]
        canon = self.tensor(view)
        flat = V.normalise(tuple(a for run in view.dims for a in run))
        whole = V.identity(canon.id, canon.shape)
        if view.fixed or flat != V.normalise(tuple(a for run in whole.dims for a in run)):
            raise V.NotAView("the batch is folded into another dim of this tensor")
        if self.batch == 1:
            ones = [i for i, n in enumerate(view.shape) if n == 1]
            pos = ones[0] if ones else V.ABSENT
        else:
            found = V.batch_dim(view)
            if found is None:
                raise V.NotAView("the batch is folded into another dim of this tensor")
            pos = found
        rest = view.shape if pos == V.ABSENT else view.shape[:pos] + view.shape[pos + 1 :]
        made = reshape_layer(self, canon, (self.batch, *rest), ())
        self.canon_of[value] = (made, pos)
        return made, pos

    # ---- layers -------------------------------------------------------------------------

    def add_layer(
        self,
        op: str,
        params: dict[str, Any],
        inputs: Sequence[tuple[Canon, str | None]],
        out_shape: Shape,
        nodes: Sequence[str],
        weights: dict[str, tuple[str, str]] | None = None,
        placeholder_for: str | None = None,
        also_reads: Sequence[str] = (),
    ) -> Canon:
        """A layer reading `inputs` (canonical tensor, the ONNX value it was read for, None for
        a tensor made on the way) and making a new canonical tensor of `out_shape` (batch
        first). The view nodes between the two are absorbed into the layer (`finish`)."""
        if any(c.id in self.repeats for c, _ in inputs):
            raise V.NotAView("reads repeat_kv's copies of the kv heads (only attention reads them)")
        layer_id = f"#{len(self.layers)}"
        self.reads.append((*(v for _, v in inputs if v is not None), *also_reads))
        layer = Layer(
            name=layer_id,
            op=op,
            params=params,
            inputs=tuple(c.producer for c, _ in inputs),
            input_shapes=tuple(c.shape for c, _ in inputs),
            output_shape=tuple(out_shape),
            nodes=tuple(dict.fromkeys(nodes)),
            weights=dict(weights or {}),
            placeholder_for=placeholder_for,
        )
        self.layers.append(layer)
        return self.new_tensor(out_shape, layer_id)

    def replace_layer(self, index: int, layer: Layer) -> None:
        self.layers[index] = layer

    def layer_of(self, canon: Canon) -> int | None:
        for i, layer in enumerate(self.layers):
            if layer.name == canon.producer:
                return i
        return None

    def body_nodes(self, node: Any) -> list[Any]:
        """The ONNX nodes a node stands for: a rule's call node stands for its function body."""
        fn = self.functions.get((node.domain, node.op_type, node.overload))
        if fn is None:
            return [node]
        # The rewriter copies constant operands into the body as Constant nodes of its own.
        return [n for n in fn if n.op_type != "Constant"]

    def body(self, node: Any) -> list[str]:
        return [n.name for n in self.body_nodes(node)]

    def unsupported_node(self, node: Any, reason: str, module: str = "") -> None:
        for original in self.body_nodes(node):
            self.unsupported.append(Unsupported(original.name, original.op_type, module, reason))

    def finish(self) -> None:
        """Every view node no layer computes is absorbed into the first layer reading through
        it; `Layer.absorbed` lists them."""
        computed = {n for layer in self.layers for n in layer.nodes}
        readers = [(i, reads) for i, reads in enumerate(self.reads)]
        readers.append((None, tuple(self.output_reads)))
        for i, reads in readers:
            into = self.layers[i].name if i is not None else None
            mine: list[str] = []
            for value in reads:
                _, steps = self.chains.get(value, (value, ()))
                for step in steps:
                    name = step.node.name
                    if name in computed:
                        continue
                    if name not in self.absorbed:
                        self.absorbed[name] = Absorbed(name, step.node.op_type, "view", into)
                    if name not in mine:
                        mine.append(name)
            if mine and i is not None:
                self.layers[i] = replace(self.layers[i], absorbed=tuple(mine))
