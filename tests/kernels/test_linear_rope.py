"""RoPE in the linear GEMM's epilogue (kernels/gemm/linear_rope.py) against linear then rope
written out in float64 (ops/rope.py's reference), under the CPU interpreter: every kernel kind
(streaming GEMV, split-K, tiled, TMA), both pair forms, small odd shapes, outputs poisoned with
NaN; and the fused group through the triton backend's pipeline."""

from __future__ import annotations

import types

import pytest
import torch

from opbench.kernels import Unsupported
from opbench.kernels.gemm.linear import Linear
from opbench.kernels.gemm.linear_plans import ws_plan
from opbench.kernels.gemm.linear_rope import RopeLinear, half_pairs_order
from opbench.kernels.memory.rope import rope
from opbench.ops.rope import Rope

TOLERANCE = {torch.float32: 1e-5, torch.float16: 5e-3, torch.bfloat16: 2e-2}
STYLES = ("half", "interleaved")


def case(batch: int, seq: int, k: int, heads: int, kv_heads: int, d: int, dtype, seed: int):
    """x [batch, seq, k], W and b of a packed q | k | v projection, with fresh random data."""
    gen = torch.Generator().manual_seed(seed)
    n = (heads + 2 * kv_heads) * d
    x = torch.randn(batch, seq, k, generator=gen).to(dtype)
    w = (torch.randn(n, k, generator=gen) / k**0.5).to(dtype)
    b = torch.randn(n, generator=gen).to(dtype)
    return x, w, b


def reference(x, w, b, style: str, heads: int, kv_heads: int, theta: float, offset: int):
    y = x.double() @ w.double().T + b.double()
    params = {"layout": "packed", "style": style, "theta": theta, "offset": offset,
              "head_dim": None, "heads": heads, "kv_heads": kv_heads}  # fmt: skip
    return Rope().reference(y, {}, types.SimpleNamespace(params=params))


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    assert not out.isnan().any(), "some outputs were never written"
    return ((out.double() - ref).norm() / ref.norm()).item()


def test_half_pairs_order_puts_each_pair_side_by_side() -> None:
    order = half_pairs_order(features=14, head_dim=4)  # three whole heads and two rows
    assert order.tolist() == [0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11, 12, 13]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("style", STYLES)
def test_every_kernel_kind_against_float64(style: str, dtype: torch.dtype) -> None:
    """3 sequences of 13 rows (positions restart per sequence), 3 q heads and 1 kv head of 16:
    BLOCK_N 16 and 32 tiles hold whole pairs though not whole heads."""
    heads, kv_heads, d, theta, offset = 3, 1, 16, 500.0, 29
    x, w, b = case(3, 13, 40, heads, kv_heads, d, dtype, seed=len(style))
    ref = reference(x, w, b, style, heads, kv_heads, theta, offset)
    fused = RopeLinear(w, b, head_dim=d, rotated=(heads + kv_heads) * d, theta=theta,
                       interleaved=style == "interleaved", offset=offset)  # fmt: skip
    plans = fused.candidates(x.view(-1, 40), every_kind=True)
    assert {p["KIND"] for p in plans} >= {"split_k", "tiled", "tma"}
    for plan in plans:
        out = torch.full(ref.shape, float("nan"), dtype=dtype)
        assert fused.bind(x, out, config=plan).launch() is out
        err = rel_err(out, ref)
        assert err <= TOLERANCE[dtype], f"{plan['KIND']}: relative L2 error {err:.2e}"


@pytest.mark.parametrize("style", STYLES)
def test_decode_rows_through_the_streaming_gemv(style: str) -> None:
    """A decode step: one row per sequence (5 sequences), position 37, head size 32, bias."""
    heads, kv_heads, d = 2, 1, 32
    x, w, b = case(5, 1, 24, heads, kv_heads, d, torch.float16, seed=3)
    fused = RopeLinear(w, b, head_dim=d, rotated=(heads + kv_heads) * d, offset=37,
                       interleaved=style == "interleaved")  # fmt: skip
    bound = fused.bind(x, torch.full((5, 1, w.shape[0]), float("nan"), dtype=torch.float16))
    assert bound.choices[0].config["KIND"] == "stream"
    ref = reference(x, w, b, style, heads, kv_heads, 10000.0, 37)
    assert rel_err(bound.launch(), ref) <= TOLERANCE[torch.float16]


def test_v_columns_are_the_plain_projection_bit_for_bit() -> None:
    """The v heads (paired like the rotated ones) and 6 more columns, a partial head."""
    heads, kv_heads, d = 3, 1, 16
    x, w, b = case(2, 11, 40, heads, kv_heads, d, torch.float16, seed=5)
    w, b = torch.cat([w, w[:6].flip(1)]), torch.cat([b, b[:6].flip(0)])
    rotated = (heads + kv_heads) * d
    fused = RopeLinear(w, b, head_dim=d, rotated=rotated)
    plain = Linear(w, b)
    for plan in fused.candidates(x.view(-1, 40), every_kind=True):
        got = fused.bind(x, config=plan).launch()
        want = plain.bind(x, config=plan).launch()
        assert torch.equal(got[..., rotated:], want[..., rotated:]), plan["KIND"]


def test_far_positions_match_the_rope_kernel() -> None:
    """At a decode position of 4095 the fp32 angle itself is off by up to ~2e-4 rad (both
    kernels compute it so, as Hugging Face does): the fused rotation matches the rope kernel's
    on the same GEMM output, not float64's angles."""
    heads, kv_heads, d = 2, 1, 16
    x, w, b = case(4, 1, 32, heads, kv_heads, d, torch.float32, seed=7)
    rotated = (heads + kv_heads) * d
    fused = RopeLinear(w, b, head_dim=d, rotated=rotated, theta=500000.0, offset=4095)
    got = fused.bind(x).launch()
    want = rope(Linear(w, b)(x), layout="packed", head_dim=d, rotated_heads=rotated // d,
                theta=500000.0, offset=4095)  # fmt: skip
    assert ((got - want).norm() / want.norm()).item() <= 1e-5


def test_what_it_refuses() -> None:
    x, w, b = case(1, 3, 8, 1, 1, 6, torch.float32, seed=1)
    with pytest.raises(Unsupported):
        RopeLinear(w, b, head_dim=5, rotated=10)  # odd head size
    with pytest.raises(Unsupported):
        RopeLinear(w, b, head_dim=6, rotated=8)  # not whole heads
    fused = RopeLinear(w, b, head_dim=6, rotated=12)
    with pytest.raises(Unsupported):
        fused.bind(x, residual=torch.zeros(1, 3, 18))
    with pytest.raises(Unsupported):
        fused.bind(x, config=ws_plan(64, 128, 3, 2, False, 64))


SUITE = """
name: qkv_rope
defaults: {backends: [triton], timing: {warmup_ms: 0, rep_ms: 1, rounds: 1}}
models:
  - name: block
    batch: 2
    input: [7, 24]
    fuse: true
    dtype: bfloat16
    layers:
      - {name: qkv, op: linear, out_features: 40}
      - {name: rope, op: rope, layout: packed, heads: 3, kv_heads: 1, style: interleaved, theta: 500.0, offset: 3}
  - name: step
    batch: 2
    inputs: {x: [1, 24]}
    fuse: true
    dtype: float16
    layers:
      - {name: qkv, op: linear, out_features: 64, bias: false, quant: int8}
      - {name: rope, op: rope, layout: packed, heads: 2, kv_heads: 1, offset: 6}
      - {name: attn, op: attention, heads: 2, kv_heads: 1, causal: true, packed_qkv: true, kv_len: 7, append: true}
"""


def test_the_fused_groups_pass_the_pipeline_checks() -> None:
    """The group, and an int8 qkv's rope left to rope_append (the decode step's rope writing
    k and v into the cache) beside it."""
    from opbench.pipeline import RunOptions, run_suite
    from opbench.results.model import Status
    from opbench.spec.load import load_suite_text

    run = run_suite(load_suite_text(SUITE, "qkv_rope.yaml"), RunOptions(device="cpu"))
    assert [(r.model, r.op) for r in run.layers] == [
        ("block", "linear+rope"), ("step", "linear"), ("step", "rope+attention")
    ]  # fmt: skip
    for row in run.layers:
        assert row.status == Status.OK and row.correct, (row.layer, row.message)
        assert row.correctness.failures == ()


@pytest.mark.gpu
@pytest.mark.parametrize("style", STYLES)
def test_gpu_every_plan_against_float64(style: str) -> None:
    """On the GPU every plan offered for a LLaMA-like head size (D 128, bf16; on an sm_90 the
    TMA kernel's and, rotate-half, the Gluon GEMM's), 3 sequences of 21 rows."""
    heads, kv_heads, d, theta, offset = 4, 2, 128, 500000.0, 5
    x, w, b = (t.cuda() for t in case(3, 21, 256, heads, kv_heads, d, torch.bfloat16, seed=9))
    ref = reference(x.cpu(), w.cpu(), b.cpu(), style, heads, kv_heads, theta, offset)
    fused = RopeLinear(w, b, head_dim=d, rotated=(heads + kv_heads) * d, theta=theta,
                       interleaved=style == "interleaved", offset=offset)  # fmt: skip
    x2 = x.view(-1, 256)
    ws = fused.ws_ok(x2, x2.new_empty(x2.shape[0], w.shape[0]))
    plans = fused.candidates(x2, every_kind=True, ws=ws)
    kinds, wrong = set(), []
    for plan in plans:
        out = torch.full(ref.shape, float("nan"), dtype=torch.bfloat16, device="cuda")
        fused.bind(x, out, config=plan).launch()
        err = rel_err(out.cpu(), ref)
        if not err <= TOLERANCE[torch.bfloat16]:
            wrong.append(f"{plan}: relative L2 error {err:.2e}")
        kinds.add(plan["KIND"])
    assert not wrong, "\n".join(wrong)  # every failing plan named, not the first only
    assert {"tiled", "split_k"} <= kinds
    if style == "half" and torch.cuda.get_device_capability()[0] == 9:
        assert {"tma", "ws"} <= kinds
