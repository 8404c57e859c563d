"""SageAttention-style int8 attention vs the float64 reference of unquantized attention.

The 3e-2 relative L2 budget covers int8 rounding of Q and K (one scale per block, ~1% error
in the logits); the softmax and PV run in fp32 / 16-bit as in the fp16 kernel.
"""

from __future__ import annotations

import math

import pytest
import torch

from opbench.kernels import Unsupported
from opbench.kernels.attention.attention import split_heads
from opbench.kernels.attention.attention_int8 import (
    KEY_BLOCK,
    _key_partial_sums_kernel,
    _quantize_keys_kernel,
    attention_int8_forward,
)
from opbench.kernels.attention.attention_int8_layer import Int8Attention

TOLERANCE = 3e-2


def reference(x: torch.Tensor, heads: int, causal: bool, packed: bool) -> torch.Tensor:
    q, k, v = (t.double().transpose(1, 2) for t in split_heads(x.double(), heads, packed))
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        s = scores.shape[-1]
        scores = scores.masked_fill(torch.ones(s, s, dtype=torch.bool).triu(1), float("-inf"))
    return (scores.softmax(-1) @ v).transpose(1, 2).flatten(2)


def make_input(batch, seq, heads, head_dim, packed, dtype, seed, key_bias=0.0) -> torch.Tensor:
    """Random normal input; key_bias adds a per-channel offset to K (packed only), the
    outlier pattern that smoothing removes."""
    gen = torch.Generator().manual_seed(seed)
    embed = heads * head_dim
    x = torch.randn(batch, seq, embed * (3 if packed else 1), generator=gen)
    if packed and key_bias:
        x[..., embed : 2 * embed] += key_bias * torch.randn(embed, generator=gen)
    return x.to(dtype)


def check(out: torch.Tensor, ref: torch.Tensor) -> None:
    assert not torch.isnan(out).any(), "some outputs were never written"
    err = ((out.double() - ref).norm() / ref.norm()).item()
    assert err <= TOLERANCE, f"relative L2 error {err:.3e} > {TOLERANCE:.1e}"


CASES = [
    # batch, seq, heads, head_dim, causal, packed, dtype, key_bias
    (2, 37, 2, 64, False, True, torch.float16, 0.0),
    (1, 130, 2, 64, True, True, torch.float16, 4.0),
    (2, 45, 1, 128, True, False, torch.float16, 0.0),
    (1, 70, 2, 128, False, True, torch.bfloat16, 4.0),
    (2, 1, 2, 64, True, True, torch.float16, 0.0),
]


@pytest.mark.parametrize("batch,seq,heads,head_dim,causal,packed,dtype,key_bias", CASES)
def test_matches_float64_reference(
    batch, seq, heads, head_dim, causal, packed, dtype, key_bias
) -> None:
    x = make_input(batch, seq, heads, head_dim, packed, dtype, seed=seq, key_bias=key_bias)
    fn = Int8Attention(heads=heads, causal=causal, packed_qkv=packed)
    out = torch.full((batch, seq, heads * head_dim), float("nan"), dtype=dtype)
    assert fn(x, out=out) is out
    check(out, reference(x, heads, causal, packed))


@pytest.mark.parametrize("causal", [False, True])
def test_descriptor_path_and_wide_query_blocks(causal: bool) -> None:
    batch, seq, heads, head_dim = 1, 100, 2, 64
    x = make_input(batch, seq, heads, head_dim, True, torch.float16, seed=9, key_bias=2.0)
    out = torch.full((batch, seq, heads * head_dim), float("nan"), dtype=torch.float16)
    q, k, v = split_heads(x, heads, packed_qkv=True)
    config = {
        "BLOCK_M": 64,
        "BLOCK_N": 32,
        "USE_DESC": True,
        "LAZY": True,
        "num_warps": 4,
        "num_stages": 2,
    }
    attention_int8_forward(
        q, k, v, out.unflatten(-1, (heads, head_dim)), causal=causal, config=config
    )
    check(out, reference(x, heads, causal, True))


def test_key_smoothing_and_quantization() -> None:
    """k8 * scale + mean reconstructs K to half a quantization step; pad rows are zero."""
    batch, seq, heads, head_dim, chunk = 2, 150, 2, 32, 64
    padded, chunks = 2 * KEY_BLOCK, 3
    x = make_input(batch, seq, heads, head_dim, True, torch.float16, seed=4, key_bias=5.0)
    _, k, _ = split_heads(x, heads, packed_qkv=True)
    partial = torch.full((batch * heads, chunks, head_dim), float("nan"))
    k8 = torch.full((batch * heads, padded, head_dim), 99, dtype=torch.int8)
    scale = torch.full((batch * heads, 2), float("nan"))
    _key_partial_sums_kernel[(chunks, batch * heads)](
        k, partial, seq, heads, *k.stride(), HEAD_DIM=head_dim, CHUNK_ROWS=chunk, BLOCK_S=16
    )
    _quantize_keys_kernel[(padded // KEY_BLOCK, batch * heads)](
        k, partial, k8, scale, seq, padded, heads, chunks, *k.stride(), HEAD_DIM=head_dim,
        BLOCK_S=KEY_BLOCK,
    )  # fmt: skip
    keys = k.double().permute(0, 2, 1, 3).reshape(batch * heads, seq, head_dim)
    torch.testing.assert_close(partial.sum(1).double() / seq, keys.mean(1), rtol=0, atol=1e-5)
    mean = keys.mean(1, keepdim=True)
    row_scale = scale.double().repeat_interleave(KEY_BLOCK, 1)[:, :seq, None]
    restored = k8[:, :seq].double() * row_scale + mean
    assert ((restored - keys).abs() <= 0.5 * row_scale + 1e-4).all()
    assert (k8[:, seq:] == 0).all()
    assert (k8[:, :seq].abs().amax(dim=(1, 2)) == 127).all()


def test_float32_is_unsupported() -> None:
    fn = Int8Attention(heads=1, causal=False, packed_qkv=False)
    with pytest.raises(Unsupported, match="float16/bfloat16"):
        fn(torch.randn(1, 8, 64))
