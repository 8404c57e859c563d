"""Split-K (flash-decoding) attention over a KV cache and packed grouped-query attention, vs
a float64 reference, under the Triton interpreter.

Odd shapes: cache lengths that no key tile (16 here) or chunk (128) divides, GQA ratios
1/2/4/8, causal queries that are the last S of N positions, splits forced above 1 so the
combine kernel runs (also with rows that see nothing of a chunk). Outputs start as NaN.
"""

from __future__ import annotations

import math

import pytest
import torch

from opbench.kernels import Unsupported
from opbench.kernels.attention.attention_decode import CacheAttention, decode_forward
from opbench.kernels.attention.attention_decode_plans import split_count, split_options

TOLERANCE = {torch.float16: 5e-3, torch.bfloat16: 2e-2, torch.float32: 1e-4}


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    """float64 attention on q [B, S, H, D], k/v [B, N, Hkv, D]; query i is position i + N - S."""
    q, k, v = (t.double().transpose(1, 2) for t in (q, k, v))
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    s, n = scores.shape[-2:]
    if causal:
        hidden = torch.ones(s, n, dtype=torch.bool).triu(n - s + 1)
        scores = scores.masked_fill(hidden, float("-inf"))
    return (scores.softmax(-1) @ v).transpose(1, 2)


def randn(*shape: int, dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    return torch.randn(*shape, generator=gen).to(dtype)


def check(out: torch.Tensor, ref: torch.Tensor, tolerance: float) -> None:
    assert not torch.isnan(out).any(), "some outputs were never written"
    err = ((out.double() - ref).norm() / ref.norm()).item()
    assert err <= tolerance, f"relative L2 error {err:.3e} > {tolerance:.1e}"


CASES = [
    # batch, q_len, heads, kv_heads, head_dim, kv_len, causal, splits, dtype
    (2, 1, 4, 4, 64, 37, False, 1, torch.float16),  # MHA decode, one chunk
    (1, 1, 8, 1, 64, 300, True, 3, torch.float16),  # MQA (8:1), split + combine
    (2, 3, 4, 2, 32, 45, True, 1, torch.bfloat16),  # GQA 2, causal, N not a tile multiple
    (1, 5, 8, 2, 64, 257, True, 2, torch.float16),  # GQA 4, causal, 2 chunks
    (1, 7, 4, 1, 16, 130, False, 2, torch.float32),  # GQA 4, fp32, 2 chunks
    (1, 64, 2, 2, 32, 300, True, 3, torch.float16),  # row 0 sees nothing of the last chunk
    (2, 2, 16, 2, 64, 200, False, 2, torch.bfloat16),  # GQA 8, rows = 2 positions x 8 heads
]


@pytest.mark.parametrize("batch,q_len,heads,kv_heads,head_dim,kv_len,causal,splits,dtype", CASES)
def test_cache_attention_matches_float64(
    batch, q_len, heads, kv_heads, head_dim, kv_len, causal, splits, dtype
) -> None:
    gen = torch.Generator().manual_seed(kv_len + q_len)
    x = randn(batch, q_len, heads * head_dim, dtype=dtype, gen=gen)
    k_cache = randn(batch, kv_len, kv_heads * head_dim, dtype=dtype, gen=gen)
    v_cache = randn(batch, kv_len, kv_heads * head_dim, dtype=dtype, gen=gen)
    layer = CacheAttention(heads=heads, kv_heads=kv_heads, causal=causal, k_cache=k_cache,
                           v_cache=v_cache, splits=splits)  # fmt: skip
    out = torch.full((batch, q_len, heads * head_dim), float("nan"), dtype=dtype)
    bound = layer.bind(x, out)
    assert len(bound.calls) == (2 if splits > 1 else 1)  # the combine runs when split
    assert bound.launch() is out
    q = x.unflatten(-1, (heads, head_dim))
    k, v = (t.unflatten(-1, (kv_heads, head_dim)) for t in (k_cache, v_cache))
    check(out, reference(q, k, v, causal).flatten(2), TOLERANCE[dtype])


@pytest.mark.parametrize("causal", [False, True])
def test_packed_grouped_self_attention(causal: bool) -> None:
    """x = [q | k | v] with 6 query heads over 2 kv heads, S = N = 41."""
    batch, seq, heads, kv_heads, head_dim = 2, 41, 6, 2, 32
    gen = torch.Generator().manual_seed(5)
    x = randn(batch, seq, (heads + 2 * kv_heads) * head_dim, dtype=torch.float16, gen=gen)
    out = CacheAttention(heads=heads, kv_heads=kv_heads, causal=causal)(x)
    q, k, v = x.split([heads * head_dim, kv_heads * head_dim, kv_heads * head_dim], -1)
    ref = reference(q.unflatten(-1, (heads, head_dim)), k.unflatten(-1, (kv_heads, head_dim)),
                    v.unflatten(-1, (kv_heads, head_dim)), causal)  # fmt: skip
    check(out, ref.flatten(2), TOLERANCE[torch.float16])


def test_strided_views_and_forced_tile() -> None:
    """k and v with different strides (slices of wider buffers), out a column slice."""
    batch, q_len, heads, kv_heads, head_dim, kv_len = 1, 4, 4, 2, 64, 99
    gen = torch.Generator().manual_seed(8)
    q = randn(batch, q_len, heads, head_dim, dtype=torch.float16, gen=gen)
    k = randn(batch, kv_len, kv_heads + 1, head_dim, dtype=torch.float16, gen=gen)[:, :, 1:]
    v = randn(batch, kv_len, kv_heads, 2 * head_dim, dtype=torch.float16, gen=gen)[..., ::2]
    wide = torch.full((batch, q_len, heads, 2 * head_dim), float("nan"), dtype=torch.float16)
    out = wide[..., :head_dim]
    config = {"BLOCK_N": 32, "num_warps": 4, "num_stages": 1}
    decode_forward(q, k, v, out, causal=True, splits=1, config=config)
    check(out, reference(q, k, v, True), TOLERANCE[torch.float16])
    assert torch.isnan(wide[..., head_dim:]).all()


def test_split_count() -> None:
    """Enough programs for the SMs, chunks >= 256 keys and a multiple of 128, all keys covered."""
    assert split_count(kv_len=8192, programs=64, sms=132) == (8, 1024)
    assert split_count(kv_len=1000, programs=1, sms=132) == (4, 256)
    assert split_count(kv_len=200, programs=8, sms=132) == (1, 256)
    assert split_count(kv_len=32768, programs=1024, sms=132) == (1, 32768)
    assert split_options(kv_len=8192, programs=64, sms=132) == [4, 8, 16]
    assert split_options(kv_len=200, programs=8, sms=132) == [1, 2]  # chunks of >= 128 keys
    for kv_len, programs in [(1, 1), (777, 3), (32768, 8)]:
        splits, chunk = split_count(kv_len, programs, 132)
        assert chunk % 128 == 0 and (splits - 1) * chunk < kv_len <= splits * chunk


def test_unsupported() -> None:
    with pytest.raises(Unsupported, match="kv_heads"):
        CacheAttention(heads=6, kv_heads=4, causal=False)
    k = torch.randn(1, 3, 64, dtype=torch.float16)
    layer = CacheAttention(heads=2, kv_heads=1, causal=True, k_cache=k, v_cache=k)
    with pytest.raises(Unsupported, match="kv_len >= q_len"):
        layer(torch.randn(1, 4, 128, dtype=torch.float16))
    with pytest.raises(Unsupported, match="does not hold"):
        layer(torch.randn(1, 2, 256, dtype=torch.float16))
