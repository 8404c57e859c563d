"""W8A8 linear: int8 weights (per output channel) x int8 activations (per token), int32 MMA.

Math. With sw[n] = max_k |W[n, k]| / 127 (build time) and sx[m] = max_k |x[m, k]| / 127 (every
call), Wq and xq by the int8 rule of `device.py`:

    y[m, n] = act( sx[m] * sw[n] * sum_k xq[m, k] * Wq[n, k] + b[n] )

The sum is exact in int32 (|sum| <= 127^2 * K < 2^31 for K < 133 000); the dequant, bias and
activation run in fp32 in the GEMM epilogue and the result is written in x's dtype.

One launch where the plan has FUSED_QUANT (decode sizes: the split-K kernel quantizes x
itself), else two:
  1. `quantize._quantize_rows_kernel`: x [M, K] fp16/bf16 -> xq int8 + sx fp32
     (reads 2MK bytes from DRAM, writes MK + 4M).
  2. a GEMM kernel with IS_INT8: int8 tensor cores at twice the fp16 rate, and half the
     weight bytes (N*K instead of 2*N*K), which is what decode-sized M is bound by.
Why larger M keeps two launches: docs/perf/gemm.md. Where the layer before makes x in one
pass over each row (rmsnorm, SwiGLU's product), that pass writes the int8 codes and scales
itself and `bind_on_codes` runs the GEMM alone on them (as for fp8, linear_fp8.py).
"""

from __future__ import annotations

import torch

from opbench.kernels import Unsupported
from opbench.kernels.gemm.linear import Linear, gemm_calls
from opbench.kernels.gemm.linear_codes import CodesInput
from opbench.kernels.gemm.linear_plans import tma_ok
from opbench.kernels.launch import KernelCall
from opbench.kernels.memory.quantize import quantize_per_row, quantize_rows_call
from opbench.kernels.scratch import scratch
from opbench.kernels.tuning import Config


class Int8Linear(CodesInput, Linear):
    """`Linear` for quant="int8": x fp16/bf16 [..., K] -> y [..., N] in x's dtype; the GEMM on
    int8 codes another kernel writes (a norm's, SwiGLU's) by `CodesInput` (linear_codes.py)."""

    quant = "int8"
    is_int8 = True
    scaled = True
    fuses_quant = True
    kernel_name = "linear_int8"
    code_dtype = torch.int8
    codes_tag = "int8-codes"

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, activation: str = "none"):
        if weight.dtype not in (torch.float16, torch.bfloat16):
            raise Unsupported(
                f"int8 W8A8 linear writes float16/bfloat16; a {weight.dtype} layer has no int8 "
                "path (its output would need fp32 accuracy the int8 result cannot give)"
            )
        super().__init__(weight, bias, activation)
        self.col_scale = self._weight_scale

    def _prepare_weight(self, weight: torch.Tensor) -> torch.Tensor:
        quantized, self._weight_scale = quantize_per_row(weight)
        return quantized

    def _check_dtype(self, x: torch.Tensor) -> None:
        if x.dtype not in (torch.float16, torch.bfloat16):
            raise Unsupported(f"int8 W8A8 linear takes float16/bfloat16 inputs, not {x.dtype}")

    def calls(
        self, plan: Config, x2: torch.Tensor, out2: torch.Tensor, res2: torch.Tensor | None = None
    ) -> tuple[list[KernelCall], list]:
        if plan["FUSED_QUANT"]:  # the split-K kernel quantizes x itself: one launch
            return gemm_calls(plan, x2, self, out2, row_scale=None, residual=res2)
        M, K = x2.shape
        # Written by the quantize launch, read by the GEMM of the same call: per-launch scratch.
        xq = scratch((M, K), torch.int8, x2.device)
        row_scale = scratch((M,), torch.float32, x2.device)
        quantize, _ = quantize_rows_call(x2, xq, row_scale)
        gemm, keep = gemm_calls(plan, xq, self, out2, row_scale=row_scale, residual=res2)
        return [quantize, *gemm], [xq, row_scale, *keep]

    def _tma_ok(self, x2: torch.Tensor) -> bool:
        # The GEMM reads xq, allocated contiguous here: only K's alignment matters.
        return self.in_features % 16 == 0 and tma_ok(self.weight)
