"""Attention of three inputs q [B, S, H D], k and v [B, N, Hkv D] (the op's `separate_qkv`).

No kernel of its own: the views go to the kernel that fits. Self-attention shapes (N = S,
Hkv = H, q, k and v with one set of strides) take the same path as `Attention` (the
portable kernel, or on Hopper the tuned choice with the Gluon kernel; `quant` int8 / fp8
their kernels); anything else (grouped heads, N != S) the split-K kernel of
attention_decode.py, whose causal queries are the last S of the N positions.

`bhsd`: q [B, H, S, D], k and v [B, Hkv, N, D] (the exporters' layout) go in as their
[B, S, H, D] transposed views: the kernels take any strides, nothing is copied. A key
padding mask [B, N] goes to the split-K kernel, which hides masked keys.

`CacheAppendAttention`: a decode step's KV-cache append (kernels/memory/kv_append.py) then the
split-K kernel over the cache.
"""

from __future__ import annotations

import torch

from opbench.kernels import Unsupported
from opbench.kernels.attention.attention import attention_call
from opbench.kernels.attention.attention_decode import decode_calls
from opbench.kernels.launch import BoundKernels


class SeparateAttention:
    """`bind(q, k, v)` -> BoundKernels writing [B, S, H D] in q's dtype."""

    def __init__(
        self, *, heads: int, kv_heads: int, causal: bool, quant: str = "none", bhsd: bool = False
    ) -> None:
        if heads < 1 or kv_heads < 1 or heads % kv_heads:
            raise Unsupported(f"heads={heads} is not a multiple of kv_heads={kv_heads}")
        self.heads, self.kv_heads, self.causal, self.quant = heads, kv_heads, causal, quant
        self.bhsd = bhsd

    def views(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
        if self.bhsd:
            if any(t.dim() != 4 for t in (q, k, v)) or q.shape[1] != self.heads:
                raise Unsupported(f"layout bhsd takes q [B, {self.heads}, S, D], k and v "
                                  f"[B, {self.kv_heads}, N, D]")  # fmt: skip
            if k.shape != v.shape or k.shape[1] != self.kv_heads or k.shape[3] != q.shape[3]:
                raise Unsupported(f"k {tuple(k.shape)} and v {tuple(v.shape)} do not fit q "
                                  f"{tuple(q.shape)}")  # fmt: skip
            return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        for name, t in (("q", q), ("k", k), ("v", v)):
            if t.dim() != 3:
                raise Unsupported(f"attention input {name} must be [B, S, E], got {tuple(t.shape)}")
        if q.shape[-1] % self.heads:
            raise Unsupported(f"q's width {q.shape[-1]} does not split into {self.heads} heads")
        d = q.shape[-1] // self.heads
        if k.shape != v.shape or k.shape[-1] != self.kv_heads * d or k.dtype != q.dtype:
            raise Unsupported(f"k {tuple(k.shape)} and v {tuple(v.shape)} do not hold "
                              f"{self.kv_heads} heads of {d} beside q {tuple(q.shape)}")  # fmt: skip
        return (q.unflatten(-1, (self.heads, d)), k.unflatten(-1, (self.kv_heads, d)),
                v.unflatten(-1, (self.kv_heads, d)))  # fmt: skip

    def __call__(self, q, k, v, mask=None) -> torch.Tensor:
        return self.bind(q, k, v, mask).launch()

    def bind(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None
    ) -> BoundKernels:
        q4, k4, v4 = self.views(q, k, v)
        batch, seq, heads, head_dim = q4.shape
        out = torch.empty((batch, seq, heads * head_dim), dtype=q.dtype, device=q.device)
        out4 = out.unflatten(-1, (heads, head_dim))
        self_shaped = k4.shape == q4.shape and k4.stride() == q4.stride() == v4.stride()
        keep = [q4, k4, v4, out4]
        if mask is not None:
            if self.quant != "none":
                raise Unsupported(f"attention quant {self.quant!r} takes no mask")
            calls, choice, extra = decode_calls(q4, k4, v4, out4, causal=self.causal, mask=mask)
            return BoundKernels.of(calls, out, [choice], keep=[*keep, mask, *extra])
        if self.quant != "none":
            if not self_shaped:
                raise Unsupported(f"attention quant {self.quant!r} needs k and v shaped and "
                                  "strided like q (no kv_heads, no kv_len)")  # fmt: skip
            from opbench.kernels.attention.attention_fp8 import attention_fp8_calls
            from opbench.kernels.attention.attention_int8 import attention_int8_calls

            make = attention_int8_calls if self.quant == "int8" else attention_fp8_calls
            calls, choice, extra = make(q4, k4, v4, out4, causal=self.causal)
            return BoundKernels.of(calls, out, [choice], keep=[*keep, *extra])
        if self_shaped:
            from opbench.kernels.attention.attention_hopper import (
                hopper_usable,
                tuned_attention_call,
            )

            if hopper_usable(q4, k4, v4, out4):
                call, choice = tuned_attention_call(q4, k4, v4, out4, causal=self.causal)
            else:
                call, choice = attention_call(q4, k4, v4, out4, causal=self.causal)
            return BoundKernels.of([call], out, [choice], keep=keep)
        calls, choice, extra = decode_calls(q4, k4, v4, out4, causal=self.causal)
        return BoundKernels.of(calls, out, [choice], keep=[*keep, *extra])


class CacheAppendAttention:
    """A decode step: the new k and v of packed x [B, S, (H + 2 Hkv) D] written into the last
    S slots of the caches k_cache, v_cache [B, N, Hkv D] (state, like weights), then the
    queries over all N slots. `bind(x, out=None)` -> BoundKernels, output [B, S, H D]."""

    def __init__(self, *, heads: int, kv_heads: int, causal: bool, k_cache, v_cache) -> None:
        from opbench.kernels.attention.attention_decode import CacheAttention

        self.heads = heads
        self.k_cache, self.v_cache = k_cache, v_cache
        self.over_cache = CacheAttention(heads=heads, kv_heads=kv_heads, causal=causal,
                                         k_cache=k_cache, v_cache=v_cache)  # fmt: skip

    def bind(self, x: torch.Tensor, out: torch.Tensor | None = None) -> BoundKernels:
        from opbench.kernels.memory.kv_append import kv_append_call

        width = self.k_cache.shape[-1]
        append = kv_append_call(x, self.k_cache, self.v_cache, self.heads)
        q = x[..., : x.shape[-1] - 2 * width]  # the queries, a strided view of the rows
        bound = self.over_cache.bind(q, out)
        return BoundKernels.of([append, *bound.calls], bound.out, bound.choices,
                               keep=[x, q, *bound.keep])  # fmt: skip
