"""FP8 linear: e4m3 weights (per output channel) x e4m3 activations (per token), fp32 sums.

Math. With sw[n] = max_k |W[n, k]| / 448 (build time) and sx[m] = max_k |x[m, k]| / 448
(every call), Wq and xq by the fp8 rule of `device.py` (round to nearest even on the e4m3
grid, so each row's largest value lands on 448):

    y[m, n] = act( sx[m] * sw[n] * sum_k xq[m, k] * Wq[n, k] + b[n] )

The products of two e4m3 numbers are exact in fp32 and the tensor cores sum them in fp32 (on
Hopper with Triton's default fast accumulation for fp8, as torch._scaled_mm's
`use_fast_accum=True`); the scales, bias and activation run in fp32 in the GEMM epilogue
(`linear_epilogue.epilogue_store` with SCALED), the result in x's dtype.

Two launches:
  1. `quantize._quantize_rows_kernel` with FP8: x [M, K] fp16/bf16 -> xq e4m3 + sx fp32
     (reads 2MK bytes, writes MK + 4M);
  2. a GEMM kernel of `linear_kernels.py` on e4m3 operands: the fp8 tensor cores run at twice
     the fp16 rate, and W is N*K bytes instead of 2*N*K.
A pre-pass rather than quantizing inside the GEMM: every output tile needs its rows' scale,
a max over all of K, before its first multiply, so a fused version still reads x once for
the max; the pre-pass costs its bytes once (timed apart in docs/perf/gemm.md).

Where the layer before makes x in one pass over each row (rmsnorm/layernorm, SwiGLU's
silu(gate) * up), that pass writes the codes and scales itself and `bind_on_codes`
(linear_codes.py) runs the GEMM alone on them: the fused groups of backends/triton_fusion.py ("norm_fp8", "glu_fp8").
"""

from __future__ import annotations

import torch

from opbench.kernels import Unsupported
from opbench.kernels.gemm.linear import Linear, gemm_calls
from opbench.kernels.gemm.linear_codes import CodesInput
from opbench.kernels.gemm.linear_plans import tma_ok
from opbench.kernels.launch import KernelCall
from opbench.kernels.memory.quantize import quantize_rows_call
from opbench.kernels.quant import fp8_rows
from opbench.kernels.scratch import scratch
from opbench.kernels.tuning import Config


def fp8_unavailable_reason(device: torch.device) -> str | None:
    """Why e4m3 tensor-core GEMMs cannot run on `device`, or None (Triton's interpreter runs
    them on the CPU; a GPU needs compute capability 8.9, Ada or Hopper, or newer)."""
    from opbench.kernels.host import INTERPRET

    if INTERPRET or device.type != "cuda":
        return None
    major, minor = torch.cuda.get_device_capability(device)
    if (major, minor) < (8, 9):
        return f"fp8 (e4m3) tensor cores need compute capability 8.9 or newer; this GPU is {major}.{minor}"
    return None


class Fp8Linear(CodesInput, Linear):
    """`Linear` for quant="fp8": x fp16/bf16 [..., K] -> y [..., N] in x's dtype; the GEMM on
    codes another kernel writes by `CodesInput` (linear_codes.py)."""

    quant = "fp8"
    scaled = True
    kernel_name = "linear_fp8"
    code_dtype = torch.float8_e4m3fn
    codes_tag = "e4m3-codes"

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, activation: str = "none"):
        if weight.dtype not in (torch.float16, torch.bfloat16):
            raise Unsupported(
                f"fp8 linear writes float16/bfloat16; a {weight.dtype} layer has no fp8 path"
            )
        reason = fp8_unavailable_reason(weight.device)
        if reason:
            raise Unsupported(reason)
        super().__init__(weight, bias, activation)
        self.col_scale = self._weight_scale

    def _prepare_weight(self, weight: torch.Tensor) -> torch.Tensor:
        quantized, self._weight_scale = fp8_rows(weight)
        return quantized

    def _check_dtype(self, x: torch.Tensor) -> None:
        if x.dtype not in (torch.float16, torch.bfloat16):
            raise Unsupported(f"fp8 linear takes float16/bfloat16 inputs, not {x.dtype}")

    def calls(
        self, plan: Config, x2: torch.Tensor, out2: torch.Tensor, res2: torch.Tensor | None = None
    ) -> tuple[list[KernelCall], list]:
        M, K = x2.shape
        # Written by the quantize launch, read by the GEMM of the same call: per-launch scratch.
        xq = scratch((M, K), torch.float8_e4m3fn, x2.device)
        row_scale = scratch((M,), torch.float32, x2.device)
        quantize, _ = quantize_rows_call(x2, xq, row_scale)
        gemm, keep = gemm_calls(plan, xq, self, out2, row_scale=row_scale, residual=res2)
        return [quantize, *gemm], [xq, row_scale, *keep]

    def _tma_ok(self, x2: torch.Tensor) -> bool:
        # The GEMM reads xq, allocated contiguous here: only K's alignment matters.
        return self.in_features % 16 == 0 and tma_ok(self.weight)
