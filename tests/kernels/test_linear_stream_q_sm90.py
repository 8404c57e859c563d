"""The packed PTX unpack of `linear_stream_q` (ASM): inline PTX does not run in Triton's
interpreter, so the CPU run compiles the kernel for sm_90 with the ptxas of Triton's package
(no GPU needed) and checks that the PTX sequences are in it and nothing spills; the GPU run
(TRITON_INTERPRET=0 on an H100/H200) checks the results against float64 (so did
the retired bench/quant_decode_gpu.py (b3fbaa8), docs/perf/gemm.md).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from tests.kernels.sm90 import ptxas_report, run_uninterpreted

# In a fresh interpreter with TRITON_INTERPRET=0 (this test run has the interpreter on).
COMPILE_SM90 = """
import sys, triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from opbench.kernels.gemm.linear_stream_q import _weight_only_kernel as fn
bits, out_dir = int(sys.argv[1]), sys.argv[2]
pointers = {"x_ptr": "*fp16", "w_ptr": "*u8" if bits == 4 else "*i8",
            "w_scale_ptr": "*fp16" if bits == 4 else "*fp32", "out_ptr": "*fp16",
            "bias_ptr": "*fp32", "partial_ptr": "*fp32", "arrivals_ptr": "*i32"}
const = dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=128 if bits == 4 else 256, SPLIT_K=2, W_BITS=bits,
             GROUP_SIZE=128, W_LEFT=False, FAST=True, ASM=True, EVEN_K=True, HAS_BIAS=False,
             ACTIVATION=0, UPCAST=False)
ints = ["M", "N", "K", "stride_xm", "stride_wn", "stride_sg", "stride_om", "stride_on"]
signature = {**pointers, **dict.fromkeys(ints, "i32")}
signature.update(dict.fromkeys(const, "constexpr"))
# The divisibility Triton's launcher infers for 16-aligned pointers and sizes: without it the
# compiler cannot prove 16-byte alignment and loads W one byte per instruction (206
# registers instead of 72 for int8), which is not the kernel that runs.
aligned = [i for i, name in enumerate(signature) if name in pointers or name in ints[1:6]]
attrs = {(i,): [["tt.divisibility", 16]] for i in aligned}
compiled = triton.compile(ASTSource(fn, signature, const, attrs),
                          target=GPUTarget("cuda", 90, 32), options=dict(num_warps=4, num_stages=4))
open(out_dir + "/k.ptx", "w").write(compiled.asm["ptx"])
"""


def compile_sm90(bits: int, out: Path) -> str:
    run_uninterpreted(COMPILE_SM90, bits, out)
    return (out / "k.ptx").read_text()


@pytest.mark.parametrize("bits", [8, 4])
def test_packed_unpack_compiles_for_sm90(bits: int, tmp_path: Path) -> None:
    ptx = compile_sm90(bits, tmp_path)
    # W and x stream through 16-byte asynchronous copies (cp.async) into shared memory.
    assert re.search(r"cp\.async\.cg\.shared\.global \[[^]]*\], \[[^]]*\], 0x10", ptx)
    assert "sub.f16x2" in ptx and "prmt.b32" in ptx
    if bits == 4:
        assert "lop3.b32" in ptx and "0x64006400" in ptx
    else:
        assert "0x80808080" in ptx
    report = ptxas_report(tmp_path / "k.ptx", tmp_path / "k.cubin")
    assert "0 bytes spill stores" in report and "0 bytes spill loads" in report, report


@pytest.mark.gpu
@pytest.mark.parametrize("quant", ["int8-weight", "int4-weight"])
def test_gpu_packed_unpack_matches_float64(quant: str) -> None:
    from opbench.kernels.gemm.linear_weight_only import Int4WeightLinear, Int8WeightLinear
    from opbench.kernels.gemm.stream_plans import stream_q_candidates
    from opbench.kernels.quant import quantized_weight

    m, n, k, group = 5, 333, 1024, 128
    gen = torch.Generator(device="cuda").manual_seed(7)
    x = torch.randn(m, k, device="cuda", generator=gen).half()
    w = (torch.randn(n, k, device="cuda", generator=gen) / k**0.5).half()
    b = torch.randn(n, device="cuda", generator=gen).half()
    fn = (
        Int8WeightLinear(w, b)
        if quant == "int8-weight"
        else Int4WeightLinear(w, b, group_size=group)
    )
    ref = x.double() @ quantized_weight(quant, w, group).to("cuda").T + b.double()
    bits = 8 if quant == "int8-weight" else 4
    plans = [p for p in stream_q_candidates(m, n, k, bits, group, 132) if p["ASM_UNPACK"]]
    assert plans
    for plan in plans:
        out = torch.full((m, n), float("nan"), dtype=torch.float16, device="cuda")
        fn.launch(plan, x, out)
        assert not torch.isnan(out).any(), plan
        assert float((out.double() - ref).norm() / ref.norm()) <= 1e-3, plan
