"""A q | k | v (or q, or k) projection with the rotary position embedding in its epilogue:
y = rope(x @ W^T + b), one GEMM instead of the GEMM and a rope pass over its output.

The rotation is ops/rope.py's on a `rows` or `packed` output [..., S, n D]: row m of the 2-D
view is at position m % S + offset, the heads in the first `rotated` columns turn, the rest
(the v heads) are stored as they are. The epilogue (linear_epilogue.rope_store) rotates the fp32
tile, after the bias, and rounds once; the unfused pair rounds the GEMM's output and again the
rotation's.

Build time: for the rotate-half form W's rows (and the bias) are interleaved per whole head (v
heads too), so that each pair (i, i + D/2) comes out of the GEMM as adjacent columns (2i, 2i + 1)
and lies in one tile whatever BLOCK_N; the epilogue stores it back to columns i and i + D/2,
turned or not. The interleaved
form's pairs are adjacent already. Every pointer-storing kernel takes it: the streaming GEMV
(M <= GEMV_MAX_M), split-K (decode sizes), the tiled and the TMA kernels (prefill). The
warp-specialized Gluon GEMM (gemm_ws.py, sm_90) rotates in its epilogue by column halves
(gemm_ws_epilogue.rope_halves): rotate-half, tiles of one or two whole heads (`ws_ok`).
"""

from __future__ import annotations

import math

import torch

from opbench.kernels import Unsupported
from opbench.kernels.gemm.linear import Linear
from opbench.kernels.gemm.linear_epilogue import ROPE_HALF, ROPE_INTERLEAVED
from opbench.kernels.launch import BoundKernels
from opbench.kernels.tuning import Config


def half_pairs_order(features: int, head_dim: int) -> torch.Tensor:
    """The row order that makes each rotate-half pair adjacent: new row h D + 2i + j (j = 0, 1)
    is row h D + i + j D/2 of head h, for every whole head (the v heads too, which do not turn:
    every tile of whole heads is then laid out alike, and the epilogues store each head back
    the same way); the rows of a last partial head stay."""
    half = head_dim // 2
    rows = torch.arange(features)
    within = rows % head_dim
    turned = rows - within + within // 2 + (within % 2) * half
    return torch.where(rows < features - features % head_dim, turned, rows)


class RopeLinear(Linear):
    """rope(x @ weight^T + bias) for x [..., S, K] -> y [..., S, N] (16-bit or fp32), no
    activation or residual. `head_dim` D; `rotated`: the leading output columns that turn (a
    multiple of D; packed q | k | v: (heads + kv_heads) D); `interleaved`: pairs (2i, 2i + 1),
    else (i, i + D/2); positions offset, offset + 1, ... along S; `theta` as ops/rope.py."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, *, head_dim: int,
                 rotated: int, interleaved: bool = False, theta: float = 10000.0,
                 offset: int = 0) -> None:  # fmt: skip
        features = weight.shape[0]
        if head_dim % 2 or rotated % head_dim or not 0 < rotated <= features:
            raise Unsupported(f"rope in the GEMM needs an even head size dividing the rotated "
                              f"width {rotated} <= {features}, got head_dim {head_dim}")  # fmt: skip
        if not interleaved:
            order = half_pairs_order(features, head_dim).to(weight.device)
            weight = weight.detach()[order]
            bias = None if bias is None else bias.detach()[order]
        super().__init__(weight, bias)
        self.head_dim, self.rotated, self.offset = head_dim, rotated, offset
        self.code = ROPE_INTERLEAVED if interleaved else ROPE_HALF
        self.freq = -math.log2(theta) / (head_dim // 2)
        self.epilogue_key = f"rope{self.code}-d{head_dim}"
        self.seq = 1  # rows per sequence of the input being bound (bind sets it)

    def bind(
        self,
        x: torch.Tensor,
        out: torch.Tensor | None = None,
        config: Config | None = None,
        residual: torch.Tensor | None = None,
    ) -> BoundKernels:
        """Linear.bind with the positions of x's rows: x [..., S, K] holds sequences of S rows
        (a 2-D x one sequence)."""
        if residual is not None:
            raise Unsupported("a rope epilogue adds no residual")
        if x.dim() < 2:
            raise ValueError(f"rope in the GEMM takes [..., S, K], got {tuple(x.shape)}")
        self.seq = max(1, x.shape[0] if x.dim() == 2 else x.shape[-2])
        return super().bind(x, out, config)

    def rope_named(self) -> dict:
        return dict(rope_seq=self.seq, rope_offset=self.offset, rope_rotated=self.rotated,
                    rope_freq=self.freq, ROPE=self.code, ROPE_D=self.head_dim)  # fmt: skip

    def ws_ok(self, x2: torch.Tensor, out2: torch.Tensor) -> bool:
        """Linear's conditions, the rotate-half form and whole heads only: the Gluon GEMM's
        epilogue (gemm_ws_epilogue.rope_halves) stores every tile as one or two heads' pairs.
        (Before the v heads' rows were paired too, its v heads came out permuted: relative
        L2 error 0.74 on an H200, 2026-11-29; tests/kernels/test_linear_rope.py GPU test.)"""
        whole = self.weight.shape[0] % self.head_dim == 0
        return self.code == ROPE_HALF and whole and super().ws_ok(x2, out2)

    def candidates(self, x2: torch.Tensor, every_kind: bool = False, residual: bool = False,
                   ws: bool = False) -> list[Config]:  # fmt: skip
        """Linear's plans less the Gluon GEMM's whose tile is not one head (or any of them for
        the interleaved form): its epilogue rotates whole heads."""
        plans = super().candidates(x2, every_kind, residual, ws)
        return [p for p in plans if p["KIND"] != "ws" or self.ws_tile(p)]

    def ws_tile(self, plan: Config) -> bool:
        """A Gluon GEMM plan whose tile is one or two whole heads (rotate-half form)."""
        return self.code == ROPE_HALF and plan["BLOCK_N"] in (self.head_dim, 2 * self.head_dim)

    def calls(self, plan, x2, out2, res2=None):
        if plan["KIND"] == "ws" and not self.ws_tile(plan):
            raise Unsupported("the Gluon GEMM rotates rotate-half heads, one or two per tile")
        return super().calls(plan, x2, out2, res2)
