"""PyTorch eager: what a PyTorch user runs, in the layer's dtype.

A quantized layer (`quant: int8`, `fp8`, `int8-weight`, `int4-weight`) runs unquantized in its dtype: that is the baseline a quantized kernel
has to beat, and the result's note says so.

A conv runs with `cudnn.benchmark` on CUDA, in channels_last or NCHW, whichever is faster
(timed at build, torch_layout.py; the note says which).
"""

from __future__ import annotations

from collections.abc import Sequence

from opbench.backends.base import Built, Weights, cast_weights, singles
from opbench.backends.torch_layout import (
    CHANNELS_LAST,
    NCHW,
    channels_last,
    faster_layout,
    use_cudnn_benchmark,
)
from opbench.ops.registry import get_op
from opbench.spec.model import LayerSpec, ModelSpec


class TorchEager:
    name = "torch"
    #: the whole-model forward is the model as one nn.Module (pipeline/torch_forward.py)
    whole_module = True
    #: on CUDA, time a conv in channels_last and NCHW and keep the faster; False: channels_last
    #: untimed (torch-compile: Inductor runs convs in channels_last and would convert NCHW
    #: weights inside the graph on every call)
    time_conv_layout = True

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
        if layer.op == "conv2d":
            use_cudnn_benchmark(device)
            layout, note = self._conv_layout(op, w, layer, device, self.time_conv_layout)
            if layout == CHANNELS_LAST:
                w["weight"] = channels_last(w["weight"])
                prepare = channels_last
            if note:
                notes.append(note)

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

    @staticmethod
    def _conv_layout(
        op, w: dict, layer: LayerSpec, device: str, timed: bool
    ) -> tuple[str, str | None]:
        """The layout this conv runs in, and the note that says it (torch_layout.py): the
        faster on CUDA, timed here; on the CPU NCHW unless the suite asks for channels_last."""
        converted = "input converted before timing, as if the layer producing it did"
        if not device.startswith("cuda"):
            if layer.params.get("channels_last"):
                return CHANNELS_LAST, f"channels_last (asked for): {converted}"
            return NCHW, None  # PyTorch's default layout: nothing to say
        if not timed:
            return CHANNELS_LAST, f"channels_last, as Inductor runs convs (not timed): {converted}"
        from opbench.ops.inputs import make_input

        weight = w["weight"]
        x = make_input(layer.input_shape, 0).to(device=weight.device, dtype=weight.dtype)
        x_last, w_last = channels_last(x), dict(w, weight=channels_last(w["weight"]))
        layout, note = faster_layout(
            {
                CHANNELS_LAST: lambda: op.forward(x_last, w_last, layer),
                NCHW: lambda: op.forward(x, w, layer),
            },
            device,
        )
        return layout, note + (f": {converted}" if layout == CHANNELS_LAST else "")
