"""torch.compile (Inductor) of the same layer as the eager backend.

Compilation happens at build, before timing, and its time is reported as tuning time.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from opbench.backends.base import Built, Weights
from opbench.backends.torch_eager import TorchEager
from opbench.spec.model import LayerSpec


class TorchCompile(TorchEager):
    name = "torch-compile"

    def unavailable_reason(self, device: str) -> str | None:
        try:
            import torch._dynamo  # noqa: F401
        except Exception as exc:  # pragma: no cover - depends on the install
            return f"torch.compile is not usable: {exc}"
        return None

    def build(self, layers: Sequence[LayerSpec], weights: Sequence[Weights], device: str) -> Built:
        import torch

        eager = super().build(layers, weights, device)
        compiled = torch.compile(eager.fn, dynamic=False)
        layer = layers[0]
        from opbench.backends.base import torch_dtype
        from opbench.ops.inputs import make_input

        probe = make_input(layer.input_shape, 0).to(device=device, dtype=torch_dtype(layer.dtype))
        if eager.prepare_input is not None:
            probe = eager.prepare_input(probe)
        start = time.perf_counter()
        with torch.no_grad():
            compiled(probe)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        return Built(
            fn=compiled,
            prepare_input=eager.prepare_input,
            note=eager.note,
            tuning_s=time.perf_counter() - start,
        )
