"""Multi-head self-attention on [S, E] (q = k = v = input) or packed [S, 3E] input.

Packed input splits its last dim as [3, heads, D]. Output is [S, E]; scale 1/sqrt(D).
"""

from __future__ import annotations

from opbench.ops.base import QUANT, Example, Op, Param, ShapeError


class Attention(Op):
    name = "attention"
    summary = "multi-head self-attention, [S,E] or packed [S,3E] → [S,E]"
    engine_names = (
        "attention multiheadattention groupqueryattention mha "
        "aten::scaled_dot_product_attention aten::_scaled_dot_product_flash_attention"
    )
    torch_calls = ("torch.nn.functional.scaled_dot_product_attention",)
    example = Example((5, 6), (5, 6), {"heads": 2, "causal": True})
    params = (
        Param("heads", "pos_int"),
        Param("causal", "bool", False),
        Param("packed_qkv", "bool", False),
        QUANT,
    )

    @staticmethod
    def embed_dim(in_shape, p) -> int:
        e = in_shape[-1]
        if p["packed_qkv"]:
            if e % 3:
                raise ShapeError(
                    f"packed_qkv needs a last dim divisible by 3, got {e}", "packed_qkv"
                )
            e //= 3
        return e

    def infer_shape(self, in_shape, p):
        if len(in_shape) != 3:
            raise ShapeError(f"attention needs input [S, E] (plus batch), got {list(in_shape[1:])}")
        e = self.embed_dim(in_shape, p)
        if e % p["heads"]:
            raise ShapeError(f"heads={p['heads']} does not divide the embedding size {e}", "heads")
        return (in_shape[0], in_shape[1], e)

    def flops(self, in_shape, out_shape, p):
        b, s, e = out_shape
        full = 4 * b * s * s * e
        return full // 2 if p["causal"] else full

    def split(self, x, layer):
        """q, k, v as [B, H, S, D] views of the input."""
        b, s, _ = x.shape
        h = layer.params["heads"]
        e = self.embed_dim(x.shape, layer.params)
        if layer.params["packed_qkv"]:
            qkv = x.view(b, s, 3, h, e // h).permute(2, 0, 3, 1, 4)
            return qkv[0], qkv[1], qkv[2]
        q = x.view(b, s, h, e // h).transpose(1, 2)
        return q, q, q

    def forward(self, x, weights, layer):
        import torch.nn.functional as F

        q, k, v = self.split(x, layer)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=layer.params["causal"])
        b, h, s, d = out.shape
        return out.transpose(1, 2).reshape(b, s, h * d)
