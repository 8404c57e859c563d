"""Attention of three inputs q [B, S, H D], k and v [B, N, Hkv D] (the op's `separate_qkv`).

No kernel of its own: the views go to the kernel that fits. Self-attention shapes (N = S,
Hkv = H, q, k and v with one set of strides) take the same path as `Attention` (the
portable kernel, or on Hopper the tuned choice with the Gluon kernel; `quant` int8 / fp8
their kernels); anything else (grouped heads, N != S) the split-K kernel of
attention_decode.py, whose causal queries are the last S of the N positions.
"""

from __future__ import annotations

import torch

from opbench.kernels import Unsupported
from opbench.kernels.attention.attention import attention_call
from opbench.kernels.attention.attention_decode import decode_calls
from opbench.kernels.launch import BoundKernels


class SeparateAttention:
    """`bind(q, k, v)` -> BoundKernels writing [B, S, H D] in q's dtype."""

    def __init__(self, *, heads: int, kv_heads: int, causal: bool, quant: str = "none") -> None:
        if heads < 1 or kv_heads < 1 or heads % kv_heads:
            raise Unsupported(f"heads={heads} is not a multiple of kv_heads={kv_heads}")
        self.heads, self.kv_heads, self.causal, self.quant = heads, kv_heads, causal, quant

    def views(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
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

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return self.bind(q, k, v).launch()

    def bind(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> BoundKernels:
        q4, k4, v4 = self.views(q, k, v)
        batch, seq, heads, head_dim = q4.shape
        out = torch.empty((batch, seq, heads * head_dim), dtype=q.dtype, device=q.device)
        out4 = out.unflatten(-1, (heads, head_dim))
        self_shaped = k4.shape == q4.shape and k4.stride() == q4.stride() == v4.stride()
        keep = [q4, k4, v4, out4]
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
