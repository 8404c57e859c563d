"""The example's backend: its own Triton kernels for the built-in `rmsnorm` op and for the
plugin's `swiglu` op. Every other layer is `unsupported` (never run by something else)."""

from __future__ import annotations

import os

from opbench.api import Backend, Bound, Built


class ExampleTriton(Backend):
    name = "example-triton"
    uses_triton = True

    def available(self, device):
        if device == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
            return "on the CPU, Triton kernels need TRITON_INTERPRET=1"
        return None

    def supports(self, layer):
        if layer.op not in ("rmsnorm", "swiglu"):
            return f"example-triton has no kernel for {layer.op}"
        return None

    def build(self, layer, weights, device):
        from opbench_example import kernels

        if layer.op == "rmsnorm":
            # The simple form: a callable x -> y.
            weight, eps = weights["weight"].contiguous(), layer.params["eps"]
            return lambda x: kernels.rmsnorm(x, weight, eps)

        # The bind/launch form: the output buffer is allocated once per input, so only the
        # kernel launch is timed (and opbench poisons the buffer before checking it).
        import torch

        beta = layer.params["beta"]

        def bind(x):
            x = x.contiguous()
            out = torch.empty(layer.output_shape, dtype=x.dtype, device=x.device)
            return Bound(launch=lambda: kernels.swiglu(x, beta, out), out=out)

        return Built(
            fn=lambda x: kernels.swiglu(x.contiguous(), beta),
            bind=bind,
            note="output buffer allocated at bind",
        )
