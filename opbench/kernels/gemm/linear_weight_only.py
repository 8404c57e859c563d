"""Weight-only linears (`quant: int8-weight`, `quant: int4-weight`): the bind step of the
two weight-streaming kernels, `linear_stream_q._weight_only_kernel` (fp16 x, M <= 16, int8
or int4 groups >= 32: the packed PTX unpack) and `linear_stream._linear_stream_kernel` (the
rest: bf16, more rows, int4 groups of 16).

The weight is quantized once, at build (`kernels/quant.py`): int8 per output channel, or int4 in
groups of `group_size` along K, packed two per byte; both kernels read that one layout. x
stays in the layer's fp16/bf16; every call streams the packed weight once (the plan fixed by
rule, `stream_plans.stream_q_plan` or `stream_plan`, the same on every machine of one SM
count). Any M runs; the kernels are built for decode sizes, where the weight's bytes are the
cost.
"""

from __future__ import annotations

import torch

from opbench.kernels import Unsupported
from opbench.kernels.gemm.linear import Linear
from opbench.kernels.gemm.linear_plans import sm_count
from opbench.kernels.gemm.linear_stream import stream_calls
from opbench.kernels.gemm.linear_stream_q import weight_only_calls
from opbench.kernels.gemm.stream_plans import (
    stream_candidates,
    stream_plan,
    stream_q_applies,
    stream_q_candidates,
    stream_q_plan,
)
from opbench.kernels.launch import KernelCall
from opbench.kernels.quant import int4_groups, int8_rows
from opbench.kernels.tuning import Config


class StreamLinear(Linear):
    """Base of the weight-only linears: x fp16/bf16 [..., K] -> y [..., N] in x's dtype, the
    weight stored in `w_bits` and streamed by `_linear_stream_kernel` whatever M is."""

    w_bits = 16
    # int4 layers set theirs (the backend passes the layer's `group_size`). For int8 the
    # kernels' GROUP_SIZE constexpr is unused; 128, as before, keeps their compiled variants.
    group_size = 128
    group_scale: torch.Tensor | None = None

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, activation: str = "none"):
        if weight.dtype not in (torch.float16, torch.bfloat16):
            raise Unsupported(
                f"{self.quant} linear takes float16/bfloat16 activations; a {weight.dtype} "
                "layer has no weight-only path"
            )
        self.act_dtype = weight.dtype
        self._channel_scale: torch.Tensor | None = None
        super().__init__(weight, bias, activation)
        self.col_scale = self._channel_scale  # Linear's init clears it after the weight

    def _check_dtype(self, x: torch.Tensor) -> None:
        if x.dtype != self.act_dtype:
            raise Unsupported(f"input dtype {x.dtype} differs from the layer's {self.act_dtype}")

    def candidates(
        self, x2: torch.Tensor, every_kind: bool = False, residual: bool = False
    ) -> list[Config]:
        """The rule's plan: the second kernel (`linear_stream_q.py`) for fp16 x, M <= 16 and
        int8 or int4 groups >= 32, else the first (`linear_stream.py`); every variant of the
        kernel that applies (both where the second does), the rule's first, when every_kind
        (tests, benchmarks)."""
        if residual:
            raise Unsupported("weight-only linears stream W through a kernel that adds no residual")
        m, k = x2.shape
        args = (m, self.out_features, k, self.w_bits, self.group_size, sm_count(x2.device))
        second = stream_q_applies(m, self.w_bits, self.group_size, x2.dtype == torch.float16)
        if not every_kind:
            return [stream_q_plan(*args) if second else stream_plan(*args)]
        first = stream_candidates(*args)
        return stream_q_candidates(*args) + first if second else first

    def calls(
        self, plan: Config, x2: torch.Tensor, out2: torch.Tensor, res2: torch.Tensor | None = None
    ) -> tuple[list[KernelCall], list]:
        if res2 is not None:
            raise Unsupported("weight-only linears stream W through a kernel that adds no residual")
        if plan["KIND"] == "stream_q":
            return weight_only_calls(plan, x2, self, out2)
        return stream_calls(plan, x2, self, out2)


class Int8WeightLinear(StreamLinear):
    """quant: int8-weight: W in int8 per output channel, its scale in the epilogue."""

    quant = "int8-weight"
    w_bits = 8
    scaled = True
    kernel_name = "linear_int8_weight"

    def _prepare_weight(self, weight: torch.Tensor) -> torch.Tensor:
        codes, self._channel_scale = int8_rows(weight)
        return codes


class Int4WeightLinear(StreamLinear):
    """quant: int4-weight: W in int4, one scale per `group_size` consecutive k of a row."""

    quant = "int4-weight"
    w_bits = 4
    kernel_name = "linear_int4_weight"

    def __init__(
        self, weight: torch.Tensor, bias: torch.Tensor | None, activation: str = "none", *,
        group_size: int,
    ) -> None:  # fmt: skip
        if group_size < 16 or group_size & (group_size - 1):
            raise Unsupported(f"int4 group_size must be a power of two >= 16, not {group_size}")
        if weight.dim() == 2 and weight.shape[1] % group_size:
            raise Unsupported(
                f"int4 weight: in_features {weight.shape[1]} is not a multiple of group_size "
                f"{group_size}"
            )
        self.group_size = group_size
        super().__init__(weight, bias, activation)

    def _prepare_weight(self, weight: torch.Tensor) -> torch.Tensor:
        packed, self.group_scale = int4_groups(weight, self.group_size)
        return packed
