"""Three-input attention (q, k, v as separate tensors) vs float64, under the interpreter: each
shape goes to the kernel that fits (portable, int8, fp8, split-K decode)."""

from __future__ import annotations

import math

import pytest
import torch

from opbench.kernels import Unsupported
from opbench.kernels.attention.attention_qkv import SeparateAttention


def reference(q, k, v, heads: int, kv_heads: int, causal: bool) -> torch.Tensor:
    d = q.shape[-1] // heads
    q4, k4, v4 = (t.double().unflatten(-1, (n, d)).transpose(1, 2)
                  for t, n in ((q, heads), (k, kv_heads), (v, kv_heads)))  # fmt: skip
    k4, v4 = (t.repeat_interleave(heads // kv_heads, 1) for t in (k4, v4))
    scores = q4 @ k4.transpose(-1, -2) / math.sqrt(d)
    if causal:
        s, n = scores.shape[-2:]
        scores = scores.masked_fill(torch.ones(s, n, dtype=torch.bool).triu(n - s + 1), -math.inf)
    return (scores.softmax(-1) @ v4).transpose(1, 2).flatten(2)


CASES = [
    # batch, q_len, kv_len, heads, kv_heads, head_dim, causal, quant, dtype, tolerance, kernels
    (2, 37, 37, 2, 2, 64, True, "none", torch.float16, 5e-3, 1),  # the portable kernel
    (1, 45, 45, 2, 2, 32, False, "int8", torch.float16, 3e-2, 3),  # K mean, quantize, attention
    (1, 45, 45, 2, 2, 32, True, "fp8", torch.bfloat16, 8e-2, 3),  # stats, quantize, attention
    (2, 3, 130, 4, 2, 32, True, "none", torch.float16, 5e-3, 1),  # GQA decode (split-K)
    (1, 20, 20, 4, 1, 16, True, "none", torch.float32, 1e-4, 1),  # MQA, N = S: split-K too
]


@pytest.mark.parametrize(
    "batch,q_len,kv_len,heads,kv_heads,head_dim,causal,quant,dtype,tolerance,kernels", CASES
)
def test_matches_float64(
    batch, q_len, kv_len, heads, kv_heads, head_dim, causal, quant, dtype, tolerance, kernels
) -> None:
    gen = torch.Generator().manual_seed(q_len + kv_len)
    q = torch.randn(batch, q_len, heads * head_dim, generator=gen).to(dtype)
    k, v = (torch.randn(batch, kv_len, kv_heads * head_dim, generator=gen).to(dtype)
            for _ in range(2))  # fmt: skip
    layer = SeparateAttention(heads=heads, kv_heads=kv_heads, causal=causal, quant=quant)
    bound = layer.bind(q, k, v)
    bound.out.fill_(float("nan"))
    out = bound.launch()
    assert len(bound.calls) >= kernels
    assert not torch.isnan(out).any(), "some outputs were never written"
    ref = reference(q, k, v, heads, kv_heads, causal)
    err = ((out.double() - ref).norm() / ref.norm()).item()
    assert err <= tolerance, f"relative L2 error {err:.3e} > {tolerance:.1e}"


def test_unsupported() -> None:
    q = torch.randn(1, 4, 64, dtype=torch.float16)
    kv = torch.randn(1, 9, 32, dtype=torch.float16)
    with pytest.raises(Unsupported, match="quant 'int8' needs k and v"):
        SeparateAttention(heads=2, kv_heads=1, causal=False, quant="int8").bind(q, kv, kv)
    with pytest.raises(Unsupported, match="do not hold"):
        SeparateAttention(heads=2, kv_heads=2, causal=False).bind(q, kv, kv)
