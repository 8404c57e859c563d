"""The seeded data of one model: weights, inputs and high-precision references.

Computed once per model and shared by every backend, so each backend sees the same numbers.
"""

from __future__ import annotations

from typing import Any

from opbench.backends.base import torch_dtype
from opbench.ops.base import numel
from opbench.ops.inputs import generator, make_input, seed_for
from opbench.ops.registry import get_op
from opbench.spec.model import ModelSpec, SuiteSpec

# Above this many FLOPs (or elements), the reference runs in float32 on the GPU instead of
# float64 on the CPU, which would take minutes for one large GEMM.
GPU_REFERENCE_FLOPS = 2e9
GPU_REFERENCE_ELEMENTS = 32 * 1024 * 1024


class ModelData:
    """Seeded weights, inputs and references of one model, computed once and shared by backends."""

    def __init__(self, suite: SuiteSpec, model: ModelSpec, device: str) -> None:
        self.suite, self.model, self.device = suite, model, device
        self._weights: dict[int, dict[str, Any]] = {}
        self._inputs: dict[int, Any] = {}
        self._refs: dict[tuple[int, ...], tuple[Any, str]] = {}

    def weights(self, index: int) -> dict[str, Any]:
        """float32 weights on the device. Seeded by the model's base name: sweeps share them."""
        if index not in self._weights:
            layer = self.model.layers[index]
            gen = generator(seed_for(self.suite.name, self.model.base_name, layer.name, "weights"))
            cpu = get_op(layer.op).make_weights(layer, gen)
            self._weights[index] = {k: v.to(self.device) for k, v in cpu.items()}
        return self._weights[index]

    def input(self, index: int, check: str | None = None):
        """The layer's input in its dtype, on the device (fresh random-normal data).

        check: a name (the backend's) for the second, differently seeded input of the same
            shape that the correctness check also runs; made afresh, never cached.
        """
        layer = self.model.layers[index]
        if check is not None or index not in self._inputs:
            names = (self.suite.name, self.model.name, layer.name, "input")
            x = make_input(layer.input_shape, seed_for(*names, *([check] if check else [])))
            x = x.to(device=self.device, dtype=torch_dtype(layer.dtype))
            if check is not None:
                return x
            self._inputs[index] = x
        return self._inputs[index]

    def reference(self, indices: tuple[int, ...], x=None):
        """The group's output computed in high precision from the same (rounded) inputs and
        weights. x: another input than the layer's own (the check's second input); not cached."""
        if x is None and indices in self._refs:
            return self._refs[indices]
        import torch

        layers = [self.model.layers[i] for i in indices]
        flops = sum(
            get_op(lay.op).flops(lay.input_shape, lay.output_shape, lay.params) for lay in layers
        )
        big = max(numel(lay.input_shape) + numel(lay.output_shape) for lay in layers)
        on_gpu = self.device.startswith("cuda") and (
            flops > GPU_REFERENCE_FLOPS or big > GPU_REFERENCE_ELEMENTS
        )
        dev, dtype, kind = (
            (self.device, torch.float32, "float32-cuda")
            if on_gpu
            else ("cpu", torch.float64, "float64-cpu")
        )
        own = x is None
        x = (self.input(indices[0]) if own else x).to(dev, dtype)
        with torch.no_grad(), _no_tf32():
            for i, layer in zip(indices, layers, strict=False):
                rounded = {
                    k: v.to(torch_dtype(layer.dtype)).to(dev, dtype)
                    for k, v in self.weights(i).items()
                }
                x = get_op(layer.op).reference(x, rounded, layer)
                if i != indices[-1]:
                    # Between fused layers, the unfused model would round to the layer dtype too.
                    x = x.to(torch_dtype(layer.dtype)).to(dtype)
        if own:
            self._refs = {indices: (x, kind)}  # keep one: references of large layers are big
        return x, kind


class _no_tf32:
    def __enter__(self):
        import torch

        self.saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False

    def __exit__(self, *exc):
        import torch

        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = self.saved
