"""The K-sliced weight-only kernel (linear_stream_qk.py) under the CPU interpreter: int8 and
int4 (fp16 x), M <= 16, odd N, K tails of whole slices, every plan variant and forced K
splits, against float64 (the quantized math and the unquantized layer); NaN-poisoned
outputs. The packed PTX unpack cannot run here: its plans run the Triton-op codes on the CPU,
and the sm_90 compile test below (plus the GPU run, bench/quant_decode_gpu.py) covers it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from opbench.kernels.linear_plans import stream_qk_candidates, stream_qk_plan
from tests.kernels.sm90 import ptxas_report, run_uninterpreted
from tests.kernels.test_linear_weight_only import build, check, make_inputs

pytestmark = pytest.mark.filterwarnings("ignore:Conversion of an array with ndim > 0")

# Interpreter plans: 2 slices of 16 codes (int8) or 32 (int4) per 32-byte step.
CASES = [  # (quant, m, n, k, group_size, activation, bias)
    ("int8-weight", 1, 45, 80, 0, "silu", True),  # K = 2.5 steps: a tail of one slice
    ("int8-weight", 13, 33, 128, 0, "none", False),
    ("int4-weight", 1, 45, 96, 32, "silu", True),  # 1.5 steps: the last slice past K
    ("int4-weight", 16, 21, 192, 64, "gelu", True),  # two slices per group
    ("int4-weight", 6, 19, 128, 32, "none", False),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-m{c[1]}-k{c[3]}")
def test_every_plan_and_forced_splits(case) -> None:
    quant, m, n, k, group, activation, bias = case
    x, w, b = make_inputs(m, n, k, torch.float16, seed=5 * m + n + k, bias=bias)
    fn = build(quant, w, b, activation, group)
    bits = {"int8-weight": 8, "int4-weight": 4}[quant]
    plans = stream_qk_candidates(m, n, k, bits, group, 4)
    assert plans and all(p["WARPS_K"] == p.num_warps for p in plans)
    assert {p["ASM_UNPACK"] for p in plans} == {True, False}  # both run Triton ops here
    plans += [plans[0].with_meta(SPLIT_K=split) for split in (2, 3)]
    for plan in plans:
        check(fn, plan, x, w, b, quant, activation, group)


def test_shapes_a_plan_cannot_take() -> None:
    # int8: K not a multiple of the 16-code slice; int4: a slice wider than the group.
    assert stream_qk_plan(1, 64, 72, 8, 0, 4) is None
    assert stream_qk_plan(1, 64, 128, 4, 16, 4) is None
    assert stream_qk_candidates(1, 64, 72, 8, 0, 4) == []
    x, w, b = make_inputs(2, 8, 72, torch.float16, seed=1)
    fn = build("int8-weight", w, b, "none", 0)
    plan = stream_qk_plan(2, 8, 64, 8, 0, 4)
    with pytest.raises(ValueError, match="not a multiple of its slice"):
        fn.launch(plan, x, torch.empty(2, 8, dtype=torch.float16))
    with pytest.raises(ValueError, match="at most 16 rows"):
        stream_qk_plan(17, 64, 256, 8, 0, 4)


# Compiled for sm_90 in a fresh interpreter with TRITON_INTERPRET=0, with the divisibility
# hints Triton's launcher gives 16-aligned pointers and strides (without them the tiles load
# one byte per instruction and the count below means nothing).
COMPILE_SM90 = """
import sys, collections, re, triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from opbench.kernels.linear_stream_qk import _weight_only_sliced_kernel as fn
bits, out_dir = int(sys.argv[1]), sys.argv[2]
pointers = {"x_ptr": "*fp16", "w_ptr": "*u8" if bits == 4 else "*i8",
            "w_scale_ptr": "*fp16" if bits == 4 else "*fp32", "out_ptr": "*fp16",
            "bias_ptr": "*fp32", "partial_ptr": "*fp32", "arrivals_ptr": "*i32"}
ints = ["M", "N", "K", "stride_xm", "stride_wn", "stride_sg", "stride_om", "stride_on"]
const = dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=512 if bits == 4 else 256, WARPS_K=4, SPLIT_K=2,
             W_BITS=bits, GROUP_SIZE=128, FAST=True, ASM=True, EVEN_K=True,
             HAS_BIAS=False, ACTIVATION=0)
signature = {**pointers, **dict.fromkeys(ints, "i32"), **dict.fromkeys(const, "constexpr")}
aligned = [i for i, name in enumerate(signature) if name in pointers or name in ints[1:6]]
attrs = {(i,): [["tt.divisibility", 16]] for i in aligned}
compiled = triton.compile(ASTSource(fn, signature, const, attrs),
                          target=GPUTarget("cuda", 90, 32), options=dict(num_warps=4, num_stages=3))
open(out_dir + "/k.ptx", "w").write(compiled.asm["ptx"])
"""


@pytest.mark.parametrize("bits", [8, 4])
def test_packed_unpack_compiles_for_sm90(bits: int, tmp_path: Path) -> None:
    run_uninterpreted(COMPILE_SM90, bits, tmp_path)
    ptx = (tmp_path / "k.ptx").read_text()
    assert "sub.f16x2" in ptx and "prmt.b32" in ptx
    assert re.search(r"cp\.async\.cg\.shared\.global .*, 0x10,", ptx)  # 16-byte copies
    assert "mma.sync.aligned.m16n8k16" in ptx
    report = ptxas_report(tmp_path / "k.ptx", tmp_path / "k.cubin")
    assert "0 bytes spill stores" in report and "0 bytes spill loads" in report, report


def test_fp16_weights_every_plan() -> None:
    """W_BITS 16: the plain fp16 GEMV in the K-sliced layout, through Linear.calls."""
    for m, n, k in [(1, 45, 80), (11, 37, 128)]:
        x, w, b = make_inputs(m, n, k, torch.float16, seed=m + n)
        fn = build("none", w, b, "gelu", 0)
        plans = stream_qk_candidates(m, n, k, 16, 0, 4)
        assert plans and not any(p["ASM_UNPACK"] for p in plans)
        for plan in plans + [plans[0].with_meta(SPLIT_K=3)]:
            check(fn, plan, x, w, b, "none", "gelu", 0)
