"""The warp-specialized attention kernel in its int8 format (attention_ws.py, quant "int8") and the float64 model of
what the int8 kernels compute (attention_reference.int8_model).

Gluon has no interpreter: the CPU run compiles every tile for sm_90 (test_attention_ws's
helpers, no GPU needed) and checks the model against the portable int8 kernel, which the
interpreter runs; the GPU run (TRITON_INTERPRET=0 on an H100/H200) checks every tile against
float64 within `quant: int8`'s 3e-2 and against the model within 16-bit rounding.
"""

from __future__ import annotations

import pytest
import torch

from opbench.kernels.attention.attention import split_heads
from opbench.kernels.attention.attention_int8 import attention_int8_forward
from opbench.kernels.attention.attention_ws_step import ws_config
from tests.kernels.attention_reference import int8_model, reference
from tests.kernels.sm90 import dump_sass, no_spills_where_measured, ptxas_report
from tests.kernels.test_attention_ws import (
    INT8,
    compile_sm90,
    sass_events,
)

TOLERANCE = 3e-2  # `quant: int8` (docs/suite-format.md)
# The kernels against the model: what fp32 sums and rounding P and the output to the 16-bit
# dtype leave (fp16 2^-11, bf16 2^-8 relative per value), with room; a wrong scale or tile
# boundary costs percents.
MODEL_LIMIT = {torch.float16: 2e-3, torch.bfloat16: 1e-2}


def ws_int8_tiles() -> dict[int, list[tuple[int, int, bool, bool]]]:
    # Imported inside: the module imports Gluon's Hopper pieces, which the CPU run has too,
    # but keeping the import here makes a Triton without Gluon fail these tests alone.
    from opbench.kernels.attention.attention_ws import WS_TILES

    return WS_TILES["int8"]


def make_input(batch, seq, heads, head_dim, dtype, seed, device="cpu") -> torch.Tensor:
    """Packed [B, S, 3 H D] random normal, a random per-channel bias on K (real keys carry
    one; the smoothing removes it)."""
    gen = torch.Generator().manual_seed(seed)
    embed = heads * head_dim
    x = torch.randn(batch, seq, 3 * embed, generator=gen)
    x[..., embed : 2 * embed] += 2.0 * torch.randn(embed, generator=gen)
    return x.to(dtype).to(device)


def rel_l2(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.double() - ref).norm() / ref.norm()).item()


@pytest.mark.parametrize(
    "head_dim,causal,tile",
    [(d, c, t) for d in (64, 128) for t in (0, 1, 2, 3) for c in (True,)]
    + [(128, False, 0), (64, False, 2)],
)  # fmt: skip
def test_every_tile_compiles_for_sm90(head_dim, causal, tile, tmp_path) -> None:
    """Each tuned tile: 12 warps, register reallocation, shared memory within the 227 KB of an
    H100, no spills, no serialized wgmma (C7514); Q K^T on the int8 wgmma (IGMMA), P V on the
    16-bit one (HGMMA), nothing in fp8; with P staged, the softmax's exp2s sit between the wait
    for S_{j+1} and the wait for P_j V_j in each consumer's key loop (the overlap of
    attention_ws; with P in registers ptxas moves that wait up, as for the fp16 kernel)."""
    block_n, stages, pingpong, p_regs = ws_int8_tiles()[head_dim][tile]
    line = compile_sm90(head_dim, causal, (block_n, stages, pingpong, p_regs), INT8, tmp_path)
    warps, shared = map(int, line.split())
    assert warps == 12 and shared <= 227 * 1024, (warps, shared)
    info = ptxas_report(tmp_path / "k.ptx", tmp_path / "p.cubin")
    assert "C7514" not in info, info
    sass = dump_sass(tmp_path / "k.cubin")
    assert "IGMMA" in sass and "HGMMA" in sass and "QGMMA" not in sass
    events = sass_events(tmp_path / "k.cubin")
    assert "S" in events, events
    if not p_regs:
        loops = [i for i, t in enumerate(events) if t == "W1"]
        assert len(loops) == 2, events  # one key loop per consumer
        for i in loops:
            following = events[i + 1 :]
            assert "W0" in following and "e" in following[: following.index("W0")], events
    no_spills_where_measured(info)


def test_model_is_what_the_portable_int8_kernel_computes() -> None:
    """The float64 model with the portable kernel's Q blocks (BLOCK_M 64) matches it within
    16-bit rounding, and sits from the unquantized float64 attention about where int8's
    rounding puts it (1e-2 order, inside 3e-2): the model is the quantization rule, not a
    second unquantized reference."""
    batch, seq, heads, head_dim, causal = 1, 150, 2, 64, True
    x = make_input(batch, seq, heads, head_dim, torch.float16, seed=5)
    out = torch.full((batch, seq, heads * head_dim), float("nan"), dtype=torch.float16)
    q, k, v = split_heads(x, heads, True)
    config = {"BLOCK_M": 64, "BLOCK_N": 64, "USE_DESC": False, "LAZY": False, "num_warps": 4,
              "num_stages": 2}  # fmt: skip
    attention_int8_forward(q, k, v, out.unflatten(-1, (heads, head_dim)), causal=causal,
                           config=config)  # fmt: skip
    assert not torch.isnan(out).any()
    model = int8_model(x, heads, causal, q_rows=64)
    exact = reference(x, heads, causal)
    assert rel_l2(out, model) <= MODEL_LIMIT[torch.float16], rel_l2(out, model)
    assert 2e-3 <= rel_l2(model, exact) <= TOLERANCE, rel_l2(model, exact)


@pytest.mark.hopper
@pytest.mark.parametrize(
    "dtype,seq,head_dim,causal",
    [(torch.float16, 1000, 128, True), (torch.bfloat16, 1000, 64, False),
     (torch.float16, 37, 128, False), (torch.float16, 1000, 64, True),
     (torch.bfloat16, 300, 128, True)],
)  # fmt: skip
def test_gpu_every_tile_matches_float64(dtype, seq, head_dim, causal) -> None:
    """Odd S (CTAs cross batch ends, the last key block is partial), every tile, outputs
    NaN-poisoned: within 3e-2 of unquantized float64 and within 16-bit rounding of the
    int8 model with the kernel's 64-row Q tiles."""
    from opbench.kernels.attention.attention_ws import ws_calls

    batch, heads = 2, 4
    x = make_input(batch, seq, heads, head_dim, dtype, seed=seq + head_dim, device="cuda")
    exact = reference(x, heads, causal)
    model = int8_model(x, heads, causal, q_rows=64)
    q, k, v = split_heads(x, heads, True)
    for tile in ws_int8_tiles()[head_dim]:
        out = torch.full((batch, seq, heads * head_dim), float("nan"), dtype=dtype, device="cuda")
        config = ws_config(tile)
        calls = ws_calls(q, k, v, out.unflatten(-1, (heads, head_dim)), causal=causal,
                         quant="int8", config=config)[0]  # fmt: skip
        for call in calls:
            call.call()
        torch.cuda.synchronize()
        assert not torch.isnan(out).any(), config
        assert rel_l2(out, exact) <= TOLERANCE, (config, rel_l2(out, exact))
        assert rel_l2(out, model) <= MODEL_LIMIT[dtype], (config, rel_l2(out, model))


@pytest.mark.hopper
def test_gpu_layer_tunes_over_both_kernels() -> None:
    """`Int8Attention` on Hopper: one tuned choice over the Gluon tiles and the portable
    kernel's (KERNEL names which won), and its output within the tolerance."""
    from opbench.kernels.attention.attention_int8_layer import Int8Attention

    batch, seq, heads, head_dim = 2, 1000, 4, 128
    x = make_input(batch, seq, heads, head_dim, torch.float16, seed=11, device="cuda")
    out = torch.full((batch, seq, heads * head_dim), float("nan"), dtype=x.dtype, device="cuda")
    bound = Int8Attention(heads=heads, causal=True, packed_qkv=True).bind(x, out)
    choice = bound.plan()["choices"][0]
    kernel = choice["config"]["meta"]["KERNEL"]
    assert choice["kernel"] == "attention_int8_sm90" and kernel in ("ws_int8", "int8"), choice
    bound.launch()
    torch.cuda.synchronize()
    assert not torch.isnan(out).any()
    assert rel_l2(out, reference(x, heads, True)) <= TOLERANCE
