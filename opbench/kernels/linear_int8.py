"""W8A8 linear: int8 weights (per output channel) x int8 activations (per token), int32 MMA.

Math. With sw[n] = max_k |W[n, k]| / 127 (build time) and sx[m] = max_k |x[m, k]| / 127 (every
call), Wq = round(W / sw), xq = round(x / sx):

    y[m, n] = act( sx[m] * sw[n] * sum_k xq[m, k] * Wq[n, k] + b[n] )

The sum is exact in int32 (|sum| <= 127^2 * K < 2^31 for K < 133 000); the dequant, bias and
activation run in fp32 in the GEMM epilogue and the result is written in x's dtype.

A call runs two kernels (one for M <= 64 when the tuner picks a `fused_quant` split-K plan,
which quantizes x inside the GEMM):
  1. `quantize._quantize_rows_kernel`: x [M, K] fp16/bf16 -> xq int8 + sx fp32
     (reads 2MK bytes from DRAM, writes MK + 4M).
  2. a `linear` GEMM kernel with IS_INT8: int8 tensor cores at twice the fp16 rate, and half
     the weight bytes (N*K instead of 2*N*K), which is what decode-sized M is bound by.
The quantization adds ~3MK bytes: small next to 2MNK OPs for large M, and next to the N*K
weight stream for small M (M <= 64, K, N >= 4096).
"""

from __future__ import annotations

import torch

from opbench.kernels import Unsupported
from opbench.kernels.linear import Plan, PreparedLinear, launch, launch_gemm, tma_ok, workspace
from opbench.kernels.quantize import (
    _quantize_rows_kernel,
    quantize_rows_launch,
    quantize_weight_per_channel,
)


class Int8Linear(PreparedLinear):
    """`fn(x, out=None)` for quant="int8": x fp16/bf16 [..., K] -> y [..., N] in x's dtype."""

    is_int8 = True

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, activation: str) -> None:
        if weight.dtype not in (torch.float16, torch.bfloat16):
            raise Unsupported(
                f"int8 W8A8 linear writes float16/bfloat16; a {weight.dtype} layer has no int8 "
                "path (its output would need fp32 accuracy the int8 result cannot give)"
            )
        super().__init__(weight, bias, activation)

    def _prepare_weight(self, weight: torch.Tensor) -> torch.Tensor:
        quantized, self._col_scale = quantize_weight_per_channel(weight)
        return quantized

    def _check_dtype(self, x: torch.Tensor) -> None:
        if x.dtype not in (torch.float16, torch.bfloat16):
            raise Unsupported(f"int8 W8A8 linear takes float16/bfloat16 inputs, not {x.dtype}")

    def launch(self, plan: Plan, x2: torch.Tensor, out2: torch.Tensor) -> None:
        if plan.fused_quant:  # the split-K kernel quantizes x itself: one launch
            launch_gemm(plan, x2, self.weight, out2, self.bias, None, self._col_scale,
                        self.arrivals, self.activation, "ieee", self._buffers, self._compiled)  # fmt: skip
            return
        M, K = x2.shape
        xq = workspace(self._buffers, "xq", M * K, torch.int8, x2.device).view(M, K)
        row_scale = workspace(self._buffers, "row_scale", M, torch.float32, x2.device)
        grid, args, meta = quantize_rows_launch(x2, xq, row_scale)
        key = ("quantize", x2.dtype, x2.stride(), x2.data_ptr() % 16)
        launch(_quantize_rows_kernel, grid, args, meta, self._compiled, key)
        launch_gemm(plan, xq, self.weight, out2, self.bias, row_scale, self._col_scale,
                    self.arrivals, self.activation, "ieee", self._buffers, self._compiled)  # fmt: skip

    def _tma_ok(self, x2: torch.Tensor) -> bool:
        # The GEMM reads xq, allocated contiguous by quantize_rows: only K's alignment matters.
        return self.in_features % 16 == 0 and tma_ok(self.weight)
