"""The torch backends' whole-model forward: the model as the nn.Module a PyTorch user writes
(backends/torch_model.py), called eagerly, or compiled by the backend in its graph mode.

Its layout is a user's best: in a model with convolutions on CUDA, the module's conv weights
and its 4-D inputs in channels_last or NCHW, whichever runs the eager module faster (both timed
here, torch_layout.py), with `cudnn.benchmark` on. The compiled forward gets the module with
channels_last weights and inputs: Inductor's layout optimisation runs a conv network's convs in
channels_last, and converts NCHW weights (graph inputs, as every parameter is without freezing)
inside the graph on every call, a copy kernel per conv: the suite's ResNet-50 compiled from
NCHW closures took 0.683 ms at b1 on an H200 where torchvision's channels_last model took 0.472.
Inductor still picks every layout inside the graph. On the CPU nothing is timed: NCHW,
unless a conv layer asks for channels_last. The layout and why are the forward's note.
"""

from __future__ import annotations

from typing import Any

from opbench.backends.torch_layout import (
    CHANNELS_LAST,
    NCHW,
    channels_last,
    faster_of,
    median_ms,
    use_cudnn_benchmark,
)
from opbench.backends.torch_model import leaf_layers, model_module, module_inputs
from opbench.pipeline.data import ModelData
from opbench.pipeline.forward import Forward
from opbench.spec.model import ModelSpec


def module_forward(
    model: ModelSpec, data: ModelData, device: str, implementation: Any = None
) -> Forward:
    """The model's module called on the seeded inputs, grad mode off. implementation: a
    backend with `compile_model` (torch-compile): the module compiled in its graph mode, called
    as one inference step each time; None: eager."""
    import torch

    module = model_module(model, data.weights)
    given = data.model_inputs()
    inputs = [given[name] for name in module_inputs(model)]
    layout, note = _layout(model, module, inputs, device, compiled=implementation is not None)
    if layout == CHANNELS_LAST:
        _weights_to(module, torch.channels_last)
        inputs = [channels_last(x) for x in inputs]
    notes = ["the model as one nn.Module"]
    if note:
        notes.append(f"layout: {note}")
    leaves = leaf_layers(module)
    if leaves:
        notes.append(f"{len(leaves)} layers run as leaf modules ({', '.join(leaves)})")
    note = "; ".join(notes)
    if implementation is None:

        def eager() -> tuple[Any, ...]:
            with torch.no_grad():
                return module(*inputs)

        return Forward(eager, note=note)

    compiled = implementation.compile_model(module, inputs)
    mark_step = getattr(torch.compiler, "cudagraph_mark_step_begin", lambda: None)

    def forward() -> tuple[Any, ...]:
        # Each call is a new inference step: CUDA-graph trees may reuse the last outputs.
        mark_step()
        return compiled(*inputs)

    forward()  # compile and capture before timing
    return Forward(forward, note=note)


def _layout(
    model: ModelSpec, module: Any, inputs: list, device: str, compiled: bool
) -> tuple[str, str]:
    """The layout of the module's weights and inputs, and the note that says it; the module's
    weights are left in NCHW (the caller converts them for channels_last)."""
    if not any(layer.op == "conv2d" for layer in model.layers):
        return NCHW, ""  # no convolutions: nothing to say
    asked = any(layer.params.get("channels_last") for layer in model.layers)
    if not device.startswith("cuda"):
        return (CHANNELS_LAST, "channels_last (asked for)") if asked else (NCHW, "NCHW")
    use_cudnn_benchmark(device)  # the compiled forward's convs are cuDNN's too
    if compiled:
        # Inductor's layout optimisation runs convs in channels_last; weights it is given in
        # NCHW it converts inside the graph on every call (a copy kernel per conv).
        return CHANNELS_LAST, "channels_last (weights as Inductor runs its convs; not timed)"
    import torch

    last = [channels_last(x) for x in inputs]
    times = {}
    # Each layout timed with the module's weights in it too; left in NCHW.
    for name, xs, memory_format in (
        (CHANNELS_LAST, last, torch.channels_last),
        (NCHW, inputs, torch.contiguous_format),
    ):
        _weights_to(module, memory_format)
        times[name] = median_ms(lambda xs=xs: module(*xs), device)
    return faster_of(times)


def _weights_to(module: Any, memory_format: Any) -> None:
    """The module's 4-D parameters (conv weights) in `memory_format`, in place."""
    for param in module.parameters():
        if param.dim() == 4:
            param.data = param.data.contiguous(memory_format=memory_format)
