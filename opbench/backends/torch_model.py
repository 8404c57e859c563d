"""A whole model as the torch module a PyTorch user would write: an `nn.Module` whose forward
is one straight-line graph (a `torch.fx.GraphModule`), its weights the module's parameters.

The torch backends' whole-model forward runs this module, eagerly and under torch.compile, so
that both see what a user's model gives them: no Python loop over a table of values, no
closures over dicts of tensors, weights that are static attributes of the module (Dynamo treats
an nn.Module's parameters as fixed-address inputs, and Inductor's layout optimisation can pick
channels_last for them), no graph breaks.

Each layer's op is traced into the graph with its own `Op.forward` (the torch baseline of the
per-layer rows), its parameters (plain Python values) baked in as constants:
`F.conv2d(x, self.stem_conv.weight, None, (2, 2), (3, 3), ...)`. Shapes are static
(backends/shape_trace.py): a forward that reads a tensor's shape or rank traces with the real
sizes. An op whose forward still cannot be traced becomes a call of a small leaf module
(`LayerCall`) that runs the same forward, which Dynamo inlines.

Where the suite changes dtype between a producer and its reader, the reader casts (`.to`), as
the per-layer forward does.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from opbench.backends.base import Weights, cast_weights, torch_dtype
from opbench.ops.registry import get_op

if TYPE_CHECKING:
    import torch

    from opbench.spec.model import LayerSpec, ModelSpec


def model_module(model: ModelSpec, weights_of: Callable[[int], Weights]) -> Any:
    """The model's GraphModule: forward(*inputs) takes one tensor per model input, in
    `module_inputs(model)` order, each in the dtype of its first reader, and returns every
    model output (`Graph.outputs` order) as a tuple. weights_of(i): layer i's float32 weights;
    the module holds them cast to the layer's dtype, as parameters without grad."""
    import torch
    from torch import fx, nn

    from opbench.backends.shape_trace import ShapeTracer

    graph = model.graph
    root = nn.Module()
    fx_graph = fx.Graph()
    tracer = ShapeTracer(fx_graph)
    values: dict[str, Any] = {}  # value name -> (ShapedProxy, its dtype name)
    for name in module_inputs(model):
        dtype = _first_reader(model, name)
        like = torch.empty(model.graph.inputs[name], dtype=torch_dtype(dtype), device="meta")
        values[name] = (tracer.value(fx_graph.placeholder(_attr(name)), like), dtype)

    def step(i: int, args: tuple[Any, ...]) -> tuple[Any, str]:
        layer = model.layers[i]
        attr = _attr(layer.name)
        while hasattr(root, attr):  # a layer named like a Module method (`half`, `eval`)
            attr += "_"
        holder = nn.Module()
        for key, tensor in cast_weights(weights_of(i), layer.dtype).items():
            holder.register_parameter(key, nn.Parameter(tensor, requires_grad=False))
        root.add_module(attr, holder)
        xs = []
        for proxy, dtype in args:
            if dtype != layer.dtype:
                proxy = proxy.to(torch_dtype(layer.dtype))
            xs.append(proxy)
        out = _traced(fx_graph, tracer, layer, attr, holder, xs)
        if out is None:
            leaf = _layer_call_class()(layer, holder)
            root.add_module(attr, leaf)
            node = fx_graph.call_module(attr, tuple(p.node for p in xs))
            # Its output's shape from the spec, so that its readers still trace.
            like = torch.empty(layer.output_shape, dtype=torch_dtype(layer.dtype), device="meta")
            out = tracer.value(node, like)
        return out, layer.dtype

    found = graph.run(step, values)  # spec/graph.py's walker: the model outputs
    fx_graph.output(tuple(found[i][0].node for i in graph.outputs))
    module = fx.GraphModule(root, fx_graph, class_name=_attr(model.name).title() + "Module")
    module.eval()
    torch.nn.Module.requires_grad_(module, False)
    return module


def module_inputs(model: ModelSpec) -> tuple[str, ...]:
    """The model inputs the module takes, in its argument order (those some layer reads)."""
    graph = model.graph
    return tuple(name for name in graph.inputs if name in graph.last_reader)


def _first_reader(model: ModelSpec, value: str) -> str:
    return next(layer.dtype for layer in model.layers if value in layer.inputs)


def _traced(fx_graph, tracer, layer: LayerSpec, attr: str, holder, xs: Sequence) -> Any:
    """The layer's forward traced into fx_graph on proxies (its weights read as attributes of
    the module), or None where the forward cannot be traced symbolically (nodes it appended
    are removed again)."""
    op = get_op(layer.op)
    before = list(fx_graph.nodes)
    weights = {
        key: tracer.value(fx_graph.get_attr(f"{attr}.{key}"), tensor)
        for key, tensor in holder.named_parameters(recurse=False)
    }
    try:
        return op.forward(xs[0] if op.arity == 1 else tuple(xs), weights, layer)
    except Exception:  # noqa: BLE001 - any failure to trace means: run it as a leaf
        kept = set(before)
        for node in reversed(list(fx_graph.nodes)):
            if node not in kept:
                fx_graph.erase_node(node)
        return None


class _Leaf:
    """Marker base of the leaf modules, so that `leaf_layers` can name them."""


@functools.cache
def _layer_call_class() -> type:
    from torch import nn

    class LayerCall(nn.Module, _Leaf):
        """One layer whose forward could not be traced: its op's forward on its parameters."""

        def __init__(self, layer: LayerSpec, holder: nn.Module) -> None:
            super().__init__()
            self.layer, self.op = layer, get_op(layer.op)
            self.keys = tuple(key for key, _ in holder.named_parameters(recurse=False))
            for key in self.keys:
                self.register_parameter(key, getattr(holder, key))

        def forward(self, *xs: torch.Tensor) -> torch.Tensor:
            weights = {key: getattr(self, key) for key in self.keys}
            return self.op.forward(xs[0] if self.op.arity == 1 else xs, weights, self.layer)

    return LayerCall


def leaf_layers(module: Any) -> tuple[str, ...]:
    """The layers that run as leaf modules (their forward could not be traced)."""
    return tuple(name for name, child in module.named_children() if isinstance(child, _Leaf))


_NAME = re.compile(r"\W")


def _attr(name: str) -> str:
    """A Python identifier for a layer or value name."""
    name = _NAME.sub("_", name)
    return name if name.isidentifier() and not name[0].isdigit() else f"v_{name}"
