"""layernorm and rmsnorm over the last dimension, with affine weights."""

from __future__ import annotations

from opbench.ops.base import EPS, Op, numel


class LayerNorm(Op):
    name = "layernorm"
    summary = "layer norm over the last dim, affine"
    params = (EPS,)

    def weight_shapes(self, in_shape, p):
        return {"weight": (in_shape[-1],), "bias": (in_shape[-1],)}

    def flops(self, in_shape, out_shape, p):
        return 8 * numel(in_shape)

    def forward(self, x, weights, layer):
        import torch.nn.functional as F

        return F.layer_norm(
            x, (x.shape[-1],), weights["weight"], weights["bias"], layer.params["eps"]
        )


class RMSNorm(Op):
    name = "rmsnorm"
    summary = "RMS norm over the last dim, affine"
    params = (EPS,)

    def weight_shapes(self, in_shape, p):
        return {"weight": (in_shape[-1],)}

    def flops(self, in_shape, out_shape, p):
        return 4 * numel(in_shape)

    def forward(self, x, weights, layer):
        import torch

        eps = layer.params["eps"]
        # Written out rather than F.rms_norm so eager runs the same math on every torch version.
        xf = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
        return (y * weights["weight"].to(y.dtype)).to(x.dtype)
