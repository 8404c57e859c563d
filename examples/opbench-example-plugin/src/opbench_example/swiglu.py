"""A new op: SwiGLU's gate, y = swish_beta(a) * b, where a and b are the two halves of the
input's last dimension (a first) and swish_beta(a) = a * sigmoid(beta * a)."""

from __future__ import annotations

from opbench.api import Op, Param, ShapeError


class SwiGLU(Op):
    name = "swiglu"
    summary = "SwiGLU gate: swish(beta*a)*b over the two halves of the last dim"
    params = (Param("beta", "pos_float", 1.0, help="the swish slope; 1.0 is SiLU"),)

    def output_shape(self, input_shape, params):
        if input_shape[-1] % 2:
            raise ShapeError(
                f"the last dimension ({input_shape[-1]}) must be even: gate and value halves"
            )
        return (*input_shape[:-1], input_shape[-1] // 2)

    def flops(self, input_shape, output_shape, params):
        n = 1
        for d in output_shape:
            n *= d
        # beta*a, exp, 1+, divide (sigmoid), times a, times b
        return 6 * n

    def forward(self, x, weights, layer):
        # The call a PyTorch user writes; run in float64 it is also the reference (the
        # default `reference` is `forward`).
        import torch
        import torch.nn.functional as F

        a, b = x.chunk(2, dim=-1)
        beta = layer.params["beta"]
        gate = F.silu(a) if beta == 1.0 else a * torch.sigmoid(beta * a)
        return gate * b
