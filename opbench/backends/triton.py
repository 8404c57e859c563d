"""Our Triton kernels as a backend. Each op maps to a builder in `triton_table.py` that
prepares weights (before timing) and returns a `LayerKernel`; a layer with no builder is
`unsupported`, never run by torch.

Build → bind → launch: `build` gives a `Built` whose `bind` fixes, for one input, the output
and workspace buffers, the plan, and every kernel argument (kernels/launch.py); the bound
launch only launches. `Built.plan` holds the plan of the last `bind`.

With `fuse: true` on a model, conv2d → batchnorm2d → activation runs as one fused conv: a
piece of the model's graph (spec/graph.py) where each layer is the only reader of the one
before, found by `fusion_groups`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from opbench.backends.base import Bound, Built, Unsupported, Weights, cast_weights, singles
from opbench.backends.triton_table import (
    ACTIVATION_OPS,
    BUILDERS,
    FLOAT32_WEIGHTS,
    LayerKernel,
    activation_name,
    conv2d,
    is_view_layer,
)
from opbench.spec.model import LayerSpec, ModelSpec

INTERPRETER_NOTE = "Triton interpreter: times are not performance figures"
# The fused conv → batchnorm → activation builder (tests replace it).
_conv2d = conv2d


def fusion_groups(model: ModelSpec) -> list[tuple[int, ...]]:
    """conv2d [→ batchnorm2d] [→ relu|gelu|silu] pieces of the graph, when the model sets
    `fuse: true`: each next layer reads only the one before it in the piece, and is the only
    reader of it (an output read elsewhere too must exist in memory: it is not fused away).
    The layers need not be next to each other in the list."""
    if not model.fuse:
        return singles(model)
    graph = model.graph
    layers = model.layers

    def sole_reader(i: int, op_names: tuple[str, ...]) -> int | None:
        """The layer that alone reads layer i's output, reading nothing else, if its op is one
        of op_names."""
        readers = graph.consumers[i]
        if len(readers) != 1:
            return None
        (reader,) = readers
        if layers[reader].op not in op_names or graph.reads[reader] != (graph.names[i],):
            return None
        return reader

    taken: set[int] = set()
    groups: list[tuple[int, ...]] = []
    for i in graph.walk():
        if i in taken:
            continue
        group = [i]
        if layers[i].op == "conv2d" and layers[i].params["activation"] == "none":
            bn = sole_reader(i, ("batchnorm2d",))
            if bn is not None:
                group.append(bn)
            act = sole_reader(group[-1], ACTIVATION_OPS)
            if act is not None:
                group.append(act)
        taken.update(group)
        groups.append(tuple(group))
    return groups


def triton_built(kernel: LayerKernel | Callable[[Any], Any], note: str | None) -> Built:
    """A Built around a built layer; with a bind step, `bind` records its plan in Built.plan."""
    if not isinstance(kernel, LayerKernel):
        return Built(fn=kernel, note=note)
    from opbench.kernels.tuning import TUNING_SECONDS

    plan: dict[str, Any] = {}

    def bind(*xs: Any) -> Bound:
        tuned_before = TUNING_SECONDS[0]
        bound = kernel.bind(*xs)
        plan.clear()
        plan.update(bound.plan())
        # Tuning happens at the first bind of a shape: count it as tuning, not as the check
        # that happened to bind first.
        built.tuning_s = (built.tuning_s or 0.0) + TUNING_SECONDS[0] - tuned_before
        return Bound(launch=bound.launch, out=bound.out)

    built = Built(fn=kernel, note=note, bind=bind, plan=plan)
    return built


class TritonBackend:
    name = "triton"

    def unavailable_reason(self, device: str) -> str | None:
        try:
            import triton  # noqa: F401
        except Exception as exc:
            return f"triton cannot be imported: {type(exc).__name__}: {exc}"
        if device == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
            return "on the CPU triton needs its interpreter (TRITON_INTERPRET=1 before triton is imported)"
        return None

    def plan(self, model: ModelSpec) -> list[tuple[int, ...]]:
        return fusion_groups(model)

    def build(self, layers: Sequence[LayerSpec], weights: Sequence[Weights], device: str) -> Built:
        import torch

        first = layers[0]
        with torch.no_grad():
            if len(layers) > 1:
                kernel, note = self._build_fused(layers, weights)
            else:
                builder = BUILDERS.get(first.op)
                if builder is None:
                    raise Unsupported(f"no Triton kernel for op {first.op!r}")
                w = (dict(weights[0]) if first.op in FLOAT32_WEIGHTS
                     else cast_weights(weights[0], first.dtype))  # fmt: skip
                kernel = builder(first, w)
                note = "view: no kernel launched" if is_view_layer(first) else None
        if os.environ.get("TRITON_INTERPRET") == "1":
            note = "; ".join(filter(None, [note, INTERPRETER_NOTE]))
        return triton_built(kernel, note)

    def _build_fused(
        self, layers: Sequence[LayerSpec], weights: Sequence[Weights]
    ) -> tuple[LayerKernel | Callable[[Any], Any], str]:
        conv = layers[0]
        batchnorm = None
        activation = None
        for layer, w in zip(layers[1:], weights[1:], strict=False):
            if layer.op == "batchnorm2d":
                batchnorm = {**{k: v.float() for k, v in w.items()}, "eps": layer.params["eps"]}
            else:
                activation = activation_name(layer)
        kernel = _conv2d(conv, cast_weights(weights[0], conv.dtype), batchnorm, activation)
        return kernel, "fused " + " → ".join(f"{layer.name} ({layer.op})" for layer in layers)
