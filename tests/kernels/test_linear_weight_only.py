"""The weight-streaming kernel (linear_stream.py) under the CPU interpreter: weight-only int8
and int4 (fp16/bf16 activations) and the fp16/bf16 decode GEMV, on odd shapes, every plan
variant and forced K splits.

Two references: the quantized math in float64 (x times the dequantized weight: only fp32
sums and the output's rounding remain, so a wrong code, nibble, group scale or split shows at
once) and the unquantized layer (the suite's check, with the quant's default tolerance).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from opbench.kernels import Unsupported
from opbench.kernels.gemm.linear import Linear
from opbench.kernels.gemm.linear_weight_only import Int4WeightLinear, Int8WeightLinear
from opbench.kernels.gemm.stream_plans import (
    GEMV_MAX_M,
    stream_plan,
    stream_q_candidates,
    stream_q_plan,
    wave_split,
)
from opbench.kernels.quant import quantized_weight
from opbench.spec.model import DEFAULT_TOLERANCE, QUANT_TOLERANCE

OUT_ROUNDING = {torch.float16: 1e-3, torch.bfloat16: 8e-3}
ACTIVATIONS = {"none": lambda t: t, "gelu": F.gelu, "silu": F.silu}

pytestmark = pytest.mark.filterwarnings("ignore:Conversion of an array with ndim > 0")


def make_inputs(m: int, n: int, k: int, dtype: torch.dtype, seed: int, bias: bool = True):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=gen).to(dtype)
    w = (torch.randn(n, k, generator=gen) / k**0.5).to(dtype)
    b = torch.randn(n, generator=gen).to(dtype) if bias else None
    return x, w, b


def build(quant: str, w, b, activation: str, group_size: int):
    if quant == "int8-weight":
        return Int8WeightLinear(w, b, activation)
    if quant == "int4-weight":
        return Int4WeightLinear(w, b, activation, group_size=group_size)
    return Linear(w, b, activation)


def check(fn, plan, x, w, b, quant: str, activation: str, group_size: int) -> None:
    m, n = x.shape[0], w.shape[0]
    out = torch.full((m, n), float("nan"), dtype=x.dtype)
    fn.launch(plan, x, out)
    assert not torch.isnan(out).any(), f"unwritten outputs with {plan}"
    act = ACTIVATIONS[activation]
    bias = b.double() if b is not None else 0.0
    quantized = act(x.double() @ quantized_weight(quant, w, group_size).T + bias)
    exact = act(x.double() @ w.double().T + bias)

    def rel(ref):
        return float((out.double() - ref).norm() / ref.norm())

    assert rel(quantized) <= OUT_ROUNDING[x.dtype], plan
    limit = QUANT_TOLERANCE.get(quant, DEFAULT_TOLERANCE[str(x.dtype).split(".")[1]])
    assert rel(exact) <= limit, plan
    assert int(fn.arrivals.abs().sum()) == 0, "split-K counters must be reset"


CASES = [  # (quant, m, n, k, dtype, group_size, activation)
    ("int8-weight", 1, 45, 83, torch.float16, 0, "silu"),
    ("int8-weight", 5, 37, 200, torch.bfloat16, 0, "none"),
    ("int8-weight", 70, 29, 96, torch.float16, 0, "gelu"),
    ("int4-weight", 1, 45, 96, torch.float16, 32, "silu"),
    ("int4-weight", 3, 37, 192, torch.bfloat16, 16, "gelu"),
    ("int4-weight", 70, 21, 64, torch.float16, 16, "none"),
    ("none", 1, 45, 83, torch.float16, 0, "gelu"),
    ("none", 13, 33, 130, torch.bfloat16, 0, "silu"),
    ("none", 1, 29, 100, torch.bfloat16, 0, "none"),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-m{c[1]}-{str(c[4])[6:]}")
def test_every_variant_and_forced_splits(case) -> None:
    quant, m, n, k, dtype, group, activation = case
    x, w, b = make_inputs(m, n, k, dtype, seed=m + n + k)
    fn = build(quant, w, b, activation, group)
    w_bits = {"int8-weight": 8, "int4-weight": 4}.get(quant, 16)
    plans = [p for p in fn.candidates(x, every_kind=True) if p["KIND"] == "stream"]
    assert plans and plans[0] == stream_plan(m, n, k, w_bits, group, 4)
    # Force K splits (the interpreter's 4 "SMs" rarely ask for them): 2, 3 and 5 splits
    # (wave-sized grids take any count), lengths a step apart when K's steps do not divide.
    for split in (2, 3, 5):
        if m <= 64:
            plans.append(plans[0].with_meta(SPLIT_K=split))
    for plan in plans:
        check(fn, plan, x, w, b, quant, activation, group)


def test_no_bias_and_the_cuda_core_gemv() -> None:
    x, w, _ = make_inputs(1, 40, 128, torch.float16, seed=3, bias=False)
    fn = Int4WeightLinear(w, None, "none", group_size=32)
    plan = stream_plan(1, 40, 128, 4, 32, 4, use_dot=False).with_meta(SPLIT_K=2)
    assert plan["BLOCK_M"] == 1
    check(fn, plan, x, w, None, "int4-weight", "none", 32)
    with pytest.raises(ValueError, match="one row"):
        stream_plan(2, 40, 128, 4, 32, 4, use_dot=False)


def test_fp16_decode_rows_take_the_streaming_gemv() -> None:
    for m in (1, GEMV_MAX_M):
        x, w, b = make_inputs(m, 24, 64, torch.float16, seed=m)
        plans = Linear(w, b).candidates(x)
        assert [p["KIND"] for p in plans] == ["stream"], m
    x, w, b = make_inputs(GEMV_MAX_M + 1, 24, 64, torch.float16, seed=9)
    assert Linear(w, b).candidates(x)[0]["KIND"] == "split_k"
    # float32 layers keep the split-K GEMM (the streaming kernel is for 16-bit weights).
    x, w, b = make_inputs(1, 24, 64, torch.float32, seed=9)
    assert Linear(w, b).candidates(x)[0]["KIND"] == "split_k"


def test_leading_dims_through_bind() -> None:
    x, w, b = make_inputs(6, 33, 64, torch.bfloat16, seed=4)
    fn = Int8WeightLinear(w, b, "silu")
    y = fn(x.view(2, 3, 64))
    assert y.shape == (2, 3, 33) and y.dtype == torch.bfloat16
    ref = F.silu(x.double() @ quantized_weight("int8-weight", w, 0).T + b.double())
    assert float((y.view(6, 33).double() - ref).norm() / ref.norm()) <= OUT_ROUNDING[torch.bfloat16]
    # fp16: the bind path takes the second kernel (its plan is the layer's recorded choice).
    x, w, b = make_inputs(6, 33, 64, torch.float16, seed=5)
    fn = Int4WeightLinear(w, b, "gelu", group_size=32)
    bound = fn.bind(x.view(2, 3, 64))
    assert [c.config["KIND"] for c in bound.choices] == ["stream_q"]
    y = bound.launch()
    ref = F.gelu(x.double() @ quantized_weight("int4-weight", w, 32).T + b.double())
    assert float((y.view(6, 33).double() - ref).norm() / ref.norm()) <= OUT_ROUNDING[torch.float16]


def test_rejects_what_it_cannot_run() -> None:
    _, w, b = make_inputs(1, 8, 48, torch.float16, seed=1)
    with pytest.raises(Unsupported, match="multiple of group_size"):
        Int4WeightLinear(w, b, group_size=32)
    with pytest.raises(Unsupported, match="power of two"):
        Int4WeightLinear(w, b, group_size=24)
    with pytest.raises(Unsupported, match="float16/bfloat16"):
        Int8WeightLinear(w.float(), b.float())
    fn = Int8WeightLinear(w, b)
    with pytest.raises(Unsupported, match="differs"):
        fn(torch.randn(2, 48, dtype=torch.bfloat16))


# The second weight-only kernel (linear_stream_q.py): M <= 16 rows, odd N and (int8) odd K,
# int4 groups of 32 and 64 (its half-steps need >= 32 codes), fp16 and bf16, with activations.
Q_CASES = [  # (quant, m, n, k, dtype, group_size, activation, bias)
    ("int8-weight", 1, 45, 83, torch.float16, 0, "silu", True),
    ("int8-weight", 2, 37, 200, torch.bfloat16, 0, "none", False),
    ("int8-weight", 13, 33, 130, torch.bfloat16, 0, "gelu", True),
    ("int4-weight", 1, 45, 96, torch.float16, 32, "silu", True),
    ("int4-weight", 3, 37, 192, torch.bfloat16, 64, "gelu", True),
    ("int4-weight", 16, 21, 128, torch.float16, 32, "none", False),
    ("int4-weight", 7, 19, 96, torch.bfloat16, 32, "none", True),
]


@pytest.mark.parametrize("case", Q_CASES, ids=lambda c: f"{c[0]}-m{c[1]}-{str(c[4])[6:]}")
def test_second_kernel_every_plan_and_forced_splits(case) -> None:
    quant, m, n, k, dtype, group, activation, bias = case
    x, w, b = make_inputs(m, n, k, dtype, seed=3 * m + n + k, bias=bias)
    fn = build(quant, w, b, activation, group)
    w_bits = {"int8-weight": 8, "int4-weight": 4}[quant]
    plans = stream_q_candidates(m, n, k, w_bits, group, 4)
    assert {p["W_LEFT"] for p in plans} == {True, False}
    assert {p["ASM_UNPACK"] for p in plans} == {True, False}  # both run Triton ops here
    # The rule and the layer's candidates take it for fp16 only; a forced plan runs bf16 too.
    offered = [p for p in fn.candidates(x, every_kind=True) if p["KIND"] == "stream_q"]
    if dtype == torch.float16:
        assert fn.candidates(x) == plans[:1] and offered == plans
    else:
        assert offered == []
    # Forced K splits, both operand orders: 2, and 3 and 5 with splits a step apart in
    # length where the steps do not divide (5 > the steps of some cases: empty splits).
    for w_left in (False, True):
        plans += [plans[0].with_meta(SPLIT_K=split, W_LEFT=w_left) for split in (2, 3, 5)]
    for plan in plans:
        check(fn, plan, x, w, b, quant, activation, group)


def test_which_kernel_the_rule_runs() -> None:
    """fp16 x, M <= 16, int8 or int4 groups >= 32: the second kernel; else the first."""
    for quant, group, dtype, m, kind in [
        ("int8-weight", 0, torch.float16, 16, "stream_q"),
        ("int4-weight", 32, torch.float16, 1, "stream_q"),
        ("int8-weight", 0, torch.bfloat16, 1, "stream"),
        ("int8-weight", 0, torch.float16, 17, "stream"),
        ("int4-weight", 16, torch.float16, 1, "stream"),
    ]:  # fmt: skip
        x, w, b = make_inputs(m, 24, 64, dtype, seed=m)
        plans = build(quant, w, b, "none", group).candidates(x)
        assert [p["KIND"] for p in plans] == [kind], (quant, group, dtype, m)
    assert stream_q_plan(1, 64, 256, 8, 0, 4)["ASM_UNPACK"]


def test_second_kernel_rules() -> None:
    assert stream_q_plan(1, 64, 256, 8, 0, 4)["BLOCK_M"] == 16
    with pytest.raises(ValueError, match="at most 16 rows"):
        stream_q_plan(17, 64, 256, 8, 0, 4)
    with pytest.raises(ValueError, match=">= 32"):
        stream_q_plan(4, 64, 256, 4, 16, 4)
    assert stream_q_candidates(2, 40, 64, 4, 16, 4) == []  # int4 groups of 16: first kernel
    x, w, b = make_inputs(17, 8, 64, torch.float16, seed=2)
    fn = build("int8-weight", w, b, "none", 0)
    with pytest.raises(ValueError, match="one M tile"):
        fn.launch(stream_q_plan(2, 8, 64, 8, 0, 4), x, torch.empty(17, 8, dtype=torch.float16))


def test_wave_split_fills_whole_waves(monkeypatch) -> None:
    """wave_split on 132 SMs: the most programs per slot used, within per_sm a SM and at least
    MIN_STEPS_PER_SPLIT steps a split; plans with waves=True take it (any split count)."""
    # 172 tiles (N 11008 / 64): 3 splits fill 516 of 528 slots (4 a SM); 1 split leaves 40
    # SMs with two programs and 92 with one.
    assert wave_split(172, 32, 132, 4) == 3
    assert wave_split(172, 32, 132, 2) == 1  # 2 splits would exceed 2 a SM
    assert wave_split(64, 86, 132, 8) == 16  # capped by MAX_WAVE_SPLIT
    assert wave_split(64, 8, 132, 8) == 2  # 4 steps a split at least
    assert wave_split(500, 32, 132, 1) == 1
    from opbench.kernels.gemm import stream_plans

    monkeypatch.setattr(stream_plans, "INTERPRET", False)  # the GPU's tiles, not the CPU's
    plan = stream_plan(1, 11008, 4096, 16, 0, 132, waves=True, programs_per_sm=4)
    assert (plan["BLOCK_N"], plan["SPLIT_K"]) == (64, 3)
    plan = stream_q_plan(4, 11008, 4096, 4, 128, 132, waves=True, programs_per_sm=4)
    assert (plan["BLOCK_N"], plan["SPLIT_K"]) == (64, 3)
    # One fp16/bf16 row: the CUDA-core GEMV on whole waves of 3 programs an SM (172 tiles x 2).
    plan = stream_plan(1, 11008, 4096, 16, 0, 132)
    assert (plan["USE_DOT"], plan["BLOCK_M"], plan["SPLIT_K"]) == (False, 1, 2)
    assert stream_plan(1, 11008, 4096, 8, 0, 132)["USE_DOT"]  # weight-only: tensor cores
    assert stream_plan(2, 11008, 4096, 16, 0, 132)["USE_DOT"]
    # Two M tiles (the first kernel only): no K split, as without waves.
    assert stream_plan(40, 11008, 4096, 8, 0, 132, waves=True, block_n=32)["SPLIT_K"] == 1


def test_split_partials_come_from_shared_scratch() -> None:
    """The weight-only kernels' split-K partials are per-launch scratch: bound inside a
    ScratchArena group they are views of its block, and a launch from a NaN-poisoned block is
    still right (each launch writes its partials before it reads them)."""
    from tests.kernels.arena import bind_in_arena

    x, w, b = make_inputs(3, 37, 96, torch.float16, seed=11)
    for quant, group, kind in [("int4-weight", 32, "stream_q"), ("int8-weight", 0, "stream")]:
        fn = build(quant, w, b, "none", group)
        plans = [p for p in fn.candidates(x, every_kind=True) if p["KIND"] == kind]
        out = torch.empty(3, 37, dtype=torch.float16)
        bound, arena = bind_in_arena(fn, x, out, plans[0].with_meta(SPLIT_K=3))
        assert arena.block is not None and arena.nbytes == 3 * 3 * 37 * 4, quant
        assert any(t.data_ptr() == arena.block.data_ptr() for t in bound.keep), quant
        arena.block.fill_(255)  # NaN in every float32 of the block
        out.fill_(float("nan"))
        bound.launch()
        ref = x.double() @ quantized_weight(quant, w, group).T + b.double()
        assert float((out.double() - ref).norm() / ref.norm()) <= OUT_ROUNDING[torch.float16]
