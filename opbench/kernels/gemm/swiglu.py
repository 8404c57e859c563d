"""SwiGLU, the gated MLP of LLaMA-style blocks, as one GEMM:

    y = silu(x @ Wg^T + bg) * (x @ Wu^T + bu)        x [..., K], Wg and Wu [N, K], y [..., N]

Unfused this is two GEMMs that each write an [M, N] tensor, then an elementwise kernel that
reads both back and writes y: 3 writes and 2 reads of [M, N] besides the GEMMs themselves.
Here the gate and up weights are interleaved row by row at build time (row 2j = gate j, row
2j + 1 = up j) into one [2N, K] weight, so a single GEMM with twice the columns reads each x
tile once for both projections, fills full MMA tiles, and its epilogue
(`epilogue.store_output`, SWIGLU_PAIRS) turns each accumulator column pair into one output
column: only y is written. Every GEMM path of `Linear` serves it unchanged: the tuned tile and
TMA kernels for prefill, the split-K decode table for M <= 64 (where W's 2*N*K elements are
the stream), int8 W8A8 (per-row weight scales are per interleaved row).

Why interleave instead of two accumulators over separate weights: one accumulator per tile keeps
the tile sizes, pipelining and plans of the plain GEMM (two accumulators would halve the tile
for the same registers), and the pair split is register-local.
"""

from __future__ import annotations

import torch

from opbench.kernels.epilogue import SWIGLU_PAIRS
from opbench.kernels.gemm.linear import Linear
from opbench.kernels.gemm.linear_int8 import Int8Linear


def interleave_rows(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """[N, ...] and [N, ...] -> [2N, ...] with row 2j = gate[j] and row 2j + 1 = up[j]."""
    return torch.stack((gate, up), dim=1).reshape(2 * gate.shape[0], *gate.shape[1:])


class _Pairs:
    """The output has half the GEMM's columns: one per (gate, up) pair."""

    out_features: int

    @property
    def output_features(self) -> int:
        return self.out_features // 2

    def streams(self, x2, residual: bool) -> bool:
        """Never the streaming GEMV: its epilogue has no (gate, up) pairing."""
        return False


class SwiGLU(_Pairs, Linear):
    """Gate and up projections with silu(gate) * up in one float16/bfloat16/float32 GEMM."""

    kernel_name = "swiglu"


class Int8SwiGLU(_Pairs, Int8Linear):
    """The same with int8 W8A8 (x quantized per token, the interleaved weight per row)."""

    kernel_name = "swiglu_int8"


def build_swiglu(
    gate_weight: torch.Tensor,
    up_weight: torch.Tensor,
    gate_bias: torch.Tensor | None = None,
    up_bias: torch.Tensor | None = None,
    *,
    quant: str = "none",
) -> SwiGLU | Int8SwiGLU:
    """Build-time work: check the two projections match, interleave weights (and biases; a
    missing one of two is zeros), then prepare the GEMM like any linear layer."""
    if gate_weight.shape != up_weight.shape or gate_weight.dtype != up_weight.dtype:
        raise ValueError(
            f"gate and up weights must match: {tuple(gate_weight.shape)} {gate_weight.dtype} "
            f"vs {tuple(up_weight.shape)} {up_weight.dtype}"
        )
    weight = interleave_rows(gate_weight.detach(), up_weight.detach())
    bias = None
    if gate_bias is not None or up_bias is not None:
        zeros = torch.zeros(gate_weight.shape[0], dtype=torch.float32, device=gate_weight.device)
        pick = [zeros if b is None else b.detach().float() for b in (gate_bias, up_bias)]
        bias = interleave_rows(*pick)
    layer = (Int8SwiGLU if quant == "int8" else SwiGLU)(weight, bias)
    layer.activation = SWIGLU_PAIRS
    return layer
