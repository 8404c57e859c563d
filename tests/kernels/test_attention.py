"""Fused attention vs a float64 reference on the CPU, under the Triton interpreter.

Shapes are tiny and odd (S = 1, 37, 130, ... never a multiple of the 16/32-key blocks), so
partial blocks, causal diagonals and the masked tail all run; outputs start as NaN so a row
the kernel forgets to write fails the test.
"""

from __future__ import annotations

import math

import pytest
import torch

from opbench.backends.triton_table import ATTENTION_QUANTS, check_quant
from opbench.kernels import Unsupported
from opbench.kernels.attention.attention import attention_forward, split_heads
from opbench.kernels.attention.attention_layer import Attention as prepare_attention

TOLERANCE = {torch.float16: 5e-3, torch.bfloat16: 2e-2, torch.float32: 1e-4}


def reference(x: torch.Tensor, heads: int, causal: bool, packed: bool) -> torch.Tensor:
    """Attention in float64 from the same (low-precision) input."""
    q, k, v = (t.double().transpose(1, 2) for t in split_heads(x.double(), heads, packed))
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        s = scores.shape[-1]
        scores = scores.masked_fill(torch.ones(s, s, dtype=torch.bool).triu(1), float("-inf"))
    return (scores.softmax(-1) @ v).transpose(1, 2).flatten(2)


def make_input(batch, seq, heads, head_dim, packed, dtype, seed) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    width = heads * head_dim * (3 if packed else 1)
    return torch.randn(batch, seq, width, generator=gen).to(dtype)


def check(out: torch.Tensor, ref: torch.Tensor, tolerance: float) -> None:
    assert not torch.isnan(out).any(), "some outputs were never written"
    err = ((out.double() - ref).norm() / ref.norm()).item()
    assert err <= tolerance, f"relative L2 error {err:.3e} > {tolerance:.1e}"


CASES = [
    # batch, seq, heads, head_dim, causal, packed, dtype
    (2, 37, 2, 64, False, False, torch.float16),
    (1, 130, 3, 64, True, True, torch.float16),
    (2, 45, 1, 128, True, False, torch.float16),
    (1, 70, 2, 128, False, True, torch.bfloat16),
    (2, 1, 2, 64, True, False, torch.bfloat16),
    (1, 21, 1, 256, False, True, torch.float16),
    (2, 33, 2, 16, True, True, torch.float32),
]


@pytest.mark.parametrize("batch,seq,heads,head_dim,causal,packed,dtype", CASES)
def test_matches_float64_reference(batch, seq, heads, head_dim, causal, packed, dtype) -> None:
    x = make_input(batch, seq, heads, head_dim, packed, dtype, seed=seq)
    fn = prepare_attention(heads=heads, causal=causal, packed_qkv=packed)
    out = torch.full((batch, seq, heads * head_dim), float("nan"), dtype=dtype)
    assert fn(x, out=out) is out
    check(out, reference(x, heads, causal, packed), TOLERANCE[dtype])


@pytest.mark.parametrize(
    "config",
    [
        # 64-row query blocks over 32-key steps: two masked steps on each causal diagonal.
        {
            "BLOCK_M": 64,
            "BLOCK_N": 32,
            "USE_DESC": False,
            "LAZY": False,
            "num_warps": 4,
            "num_stages": 2,
        },
        # tensor-descriptor loads and stores (TMA on Hopper) zero-fill past the sequence.
        {
            "BLOCK_M": 32,
            "BLOCK_N": 32,
            "USE_DESC": True,
            "LAZY": True,
            "num_warps": 4,
            "num_stages": 2,
        },
    ],
)
@pytest.mark.parametrize("causal", [False, True])
def test_explicit_tile_configs(config: dict, causal: bool) -> None:
    batch, seq, heads, head_dim = 2, 100, 2, 64
    x = make_input(batch, seq, heads, head_dim, True, torch.float16, seed=3)
    out = torch.full((batch, seq, heads * head_dim), float("nan"), dtype=torch.float16)
    q, k, v = split_heads(x, heads, packed_qkv=True)
    attention_forward(q, k, v, out.unflatten(-1, (heads, head_dim)), causal=causal, config=config)
    check(out, reference(x, heads, causal, True), TOLERANCE[torch.float16])


def test_allocates_output_and_writes_strided_out() -> None:
    heads, head_dim = 2, 64
    x = make_input(1, 29, heads, head_dim, False, torch.float16, seed=11)
    fn = prepare_attention(heads=heads, causal=True, packed_qkv=False)
    ref = reference(x, heads, True, False)
    fresh = fn(x)
    assert fresh.shape == (1, 29, heads * head_dim) and fresh.dtype == torch.float16
    check(fresh, ref, TOLERANCE[torch.float16])
    # out as a column slice of a wider buffer: rows 2E apart, the other half untouched.
    wide = torch.full((1, 29, 2 * heads * head_dim), float("nan"), dtype=torch.float16)
    fn(x, out=wide[..., : heads * head_dim])
    check(wide[..., : heads * head_dim], ref, TOLERANCE[torch.float16])
    assert torch.isnan(wide[..., heads * head_dim :]).all()


def test_unsupported_settings() -> None:
    with pytest.raises(Unsupported, match="quant"):
        check_quant("attention", "int4", ATTENTION_QUANTS)
    with pytest.raises(Unsupported, match="quant"):
        check_quant("linear", "fp8")
    fn = prepare_attention(heads=2, causal=False, packed_qkv=False)
    with pytest.raises(Unsupported, match="head dim 48"):
        fn(torch.randn(1, 8, 96, dtype=torch.float16))
    with pytest.raises(Unsupported, match="split"):
        prepare_attention(heads=2, causal=False, packed_qkv=True)(torch.randn(1, 8, 128))


@pytest.mark.parametrize("causal", [False, True])
def test_lazy_rescaling_with_a_growing_maximum(causal: bool) -> None:
    """Keys that grow along the sequence push the row maxima up by more than 8 (base 2) a few
    times (the rescale branch) and by less most steps (the stale-maximum branch)."""
    batch, seq, heads, head_dim = 1, 150, 2, 32
    x = make_input(batch, seq, heads, head_dim, True, torch.float32, seed=21)
    ramp = torch.linspace(0.1, 5.0, seq)[None, :, None]
    x[..., heads * head_dim : 2 * heads * head_dim] *= ramp  # keys only
    x = x.to(torch.float16)
    q, k, v = split_heads(x, heads, packed_qkv=True)
    ref = reference(x, heads, causal, True)
    qd, kd = q.double().transpose(1, 2), k.double().transpose(1, 2)
    logits = qd @ kd.transpose(-1, -2) / math.sqrt(head_dim) * math.log2(math.e)
    if causal:
        logits = logits.masked_fill(torch.ones(seq, seq, dtype=torch.bool).triu(1), -math.inf)
    growth = logits.amax(-1) - logits[..., :16].amax(-1)  # past the first 16-key block
    assert (growth > 8).any(), "the data must move some maximum by more than 8"
    config = {"BLOCK_M": 32, "BLOCK_N": 16, "USE_DESC": False, "LAZY": True, "num_warps": 4,
              "num_stages": 1}  # fmt: skip
    out = torch.full((batch, seq, heads * head_dim), float("nan"), dtype=torch.float16)
    attention_forward(q, k, v, out.unflatten(-1, (heads, head_dim)), causal=causal, config=config)
    check(out, ref, TOLERANCE[torch.float16])
