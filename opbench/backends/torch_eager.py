"""PyTorch eager: what a PyTorch user runs, in the layer's dtype.

A quantized layer (`quant: int8`, `fp8`, `int8-weight`, `int4-weight`) runs unquantized in its dtype: that is the baseline a quantized kernel
has to beat, and the result's note says so.
"""

from __future__ import annotations

from collections.abc import Sequence

from opbench.backends.base import Built, Weights, cast_weights, singles
from opbench.ops.registry import get_op
from opbench.spec.model import LayerSpec, ModelSpec


class TorchEager:
    name = "torch"

    def unavailable_reason(self, device: str) -> str | None:
        return None

    def plan(self, model: ModelSpec) -> list[tuple[int, ...]]:
        return singles(model)

    def build(self, layers: Sequence[LayerSpec], weights: Sequence[Weights], device: str) -> Built:
        import torch

        built = self.forward(layers, weights, device)
        return Built(
            fn=torch.no_grad()(built.fn), prepare_input=built.prepare_input, note=built.note
        )

    def forward(
        self,
        layers: Sequence[LayerSpec],
        weights: Sequence[Weights],
        device: str,
        static_weights: bool = False,
    ) -> Built:
        """The layer's forward as a plain function (no grad-mode handling), with its input
        preparation and note: what `build` wraps, and what torch-compile compiles.

        static_weights: mark the weights as fixed-address inputs for torch.compile. Dynamo
        lifts closure tensors to graph inputs, and CUDA-graph modes (reduce-overhead,
        max-autotune) copy every non-static input into the graph's buffers on each call;
        a user's nn.Module parameters are static, so ours must be too."""
        import torch

        (layer,) = layers
        op = get_op(layer.op)
        w = cast_weights(weights[0], layer.dtype)
        notes = []
        if layer.quant != "none":
            notes.append(f"torch runs quant={layer.quant} layers unquantized in {layer.dtype}")
        prepare = None
        if layer.op == "conv2d" and layer.params.get("channels_last"):
            w["weight"] = w["weight"].contiguous(memory_format=torch.channels_last)

            def prepare(x: torch.Tensor) -> torch.Tensor:
                return x.contiguous(memory_format=torch.channels_last)

            notes.append(
                "channels_last: input converted before timing, as if the layer producing it did"
            )

        if static_weights:
            for tensor in w.values():
                torch._dynamo.mark_static_address(tensor)

        if op.arity == 1:

            def run(x: torch.Tensor) -> torch.Tensor:
                return op.forward(x, w, layer)

        else:

            def run(*xs: torch.Tensor) -> torch.Tensor:  # a join: one tensor per input
                return op.forward(xs, w, layer)

        return Built(fn=run, prepare_input=prepare, note="; ".join(notes) or None)
