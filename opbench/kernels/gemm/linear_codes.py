"""The GEMM of a row-quantized linear (fp8 or int8 W8A8) on codes another kernel writes.

A quantized linear's call is a quantize pass over x (codes + per-row scales), then the GEMM.
Where the layer before makes x in one pass over each row (rmsnorm/layernorm, SwiGLU's
silu(gate) * up), that pass writes the codes and scales itself and the GEMM runs alone on
them: no 16-bit x in memory, no separate quantize pass (backends/triton_fused.py's
"norm_fp8"/"glu_fp8" groups and their int8 twins). `CodesInput` is that GEMM for both
quantizations; `Fp8Linear` and `Int8Linear` take it with their code dtype and key tag.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from opbench.kernels.gemm.linear import gemm_calls, residual_view
from opbench.kernels.gemm.linear_plans import SMALL_M
from opbench.kernels.host import next_power_of_2
from opbench.kernels.launch import BoundKernels, sequence
from opbench.kernels.scratch import scratch
from opbench.kernels.tuning import Choice, Config, choose, device_tag


class CodesInput:
    """Mixin for a `Linear` whose x is quantized by rows (`scaled`): the GEMM on codes.

    `code_dtype`: the codes' dtype (e4m3 or int8); `codes_tag`: the first field of the plan
    key of the GEMM on codes (fp8's "e4m3-codes" is the one its stored plans carry)."""

    code_dtype: torch.dtype
    codes_tag: str

    def bind_on_codes(
        self,
        rows_shape: tuple[int, ...],
        dtype: torch.dtype,
        device: torch.device,
        produce: Callable[[torch.Tensor, torch.Tensor], BoundKernels],
        out: torch.Tensor | None = None,
        config: Config | None = None,
        residual: torch.Tensor | None = None,
    ) -> BoundKernels:
        """The GEMM on codes and row scales that another kernel writes, with no quantize
        pass of its own: a norm or SwiGLU's product quantized where it is made
        (backends/triton_fused.py). `produce(xq, sx)` binds that kernel to write xq [M, K]
        and sx [M] (per-launch scratch, `code_buffers`); the result launches it, then the
        GEMM (`bind_gemm_on`), into out. The producer's extra outputs stay the result's."""
        xq, row_scale = self.code_buffers(rows_shape, device)
        producer = produce(xq, row_scale)
        gemm = self.bind_gemm_on(xq, row_scale, rows_shape, dtype, out, config, residual)
        if not gemm.calls:  # no rows: nothing to launch, the producer's neither
            return BoundKernels.of([], gemm.out, extra=producer.extra)
        return BoundKernels.of(
            [*producer.calls, *gemm.calls], gemm.out, [*producer.choices, *gemm.choices],
            keep=[*gemm.keep, *producer.keep], extra=producer.extra,
        )  # fmt: skip

    def code_buffers(
        self, rows_shape: tuple[int, ...], device: torch.device
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-launch scratch for the codes [M, K] and fp32 row scales [M] of an input with
        `rows_shape` rows: written by a producer, read by the GEMMs of the same launch (one
        norm's codes may feed several linears of the same K)."""
        m = math.prod(rows_shape)
        return (scratch((m, self.in_features), self.code_dtype, device),
                scratch((m,), torch.float32, device))  # fmt: skip

    def bind_gemm_on(
        self,
        xq: torch.Tensor,
        row_scale: torch.Tensor,
        rows_shape: tuple[int, ...],
        dtype: torch.dtype,
        out: torch.Tensor | None = None,
        config: Config | None = None,
        residual: torch.Tensor | None = None,
    ) -> BoundKernels:
        """The GEMM alone on codes xq [M, K] and scales row_scale [M] that an earlier launch
        of the same call writes: out (rows_shape + [N], `dtype`: what the unfused layer would
        write) = the layer on them, + `residual` (out's shape and dtype) in the epilogue.
        On sm_90 above the decode sizes the warp-specialized Gluon GEMM joins the candidates,
        as in `Linear.choose`."""
        m, k, n = math.prod(rows_shape), self.in_features, self.output_features
        if tuple(xq.shape) != (m, k) or tuple(row_scale.shape) != (m,):
            raise ValueError(f"codes must be [{m}, {k}] with [{m}] scales, got "
                             f"{list(xq.shape)} and {list(row_scale.shape)}")  # fmt: skip
        if xq.dtype != self.code_dtype:
            raise ValueError(f"codes must be {self.code_dtype}, got {xq.dtype}")
        out_shape = (*rows_shape, n)
        if out is None:
            out = torch.empty(out_shape, dtype=dtype, device=xq.device)
        elif tuple(out.shape) != out_shape or out.dtype != dtype or not out.is_contiguous():
            raise ValueError(f"out must be {out_shape} {dtype} contiguous, got "
                             f"{tuple(out.shape)} {out.dtype}")  # fmt: skip
        out2 = out.view(m, n)
        res2 = residual_view(residual, out, out2)
        if m == 0:
            return BoundKernels.of([], out)
        key = "|".join([self.codes_tag, f"M{next_power_of_2(m)}", f"N{self.out_features}",
                        f"K{k}", "tma" if self._tma_ok(xq) else "notma",
                        *(["residual"] if res2 is not None else [])])  # fmt: skip
        if config is not None:
            choice = Choice(self.kernel_name, key, device_tag(xq.device), config, "forced")
        else:

            def make(cfg: Config):
                calls = gemm_calls(cfg, xq, self, out2, row_scale=row_scale, residual=res2)[0]
                return sequence(calls, out2)

            ws = m > SMALL_M and self.ws_ok(xq, out2)
            candidates = self.candidates(xq, residual=res2 is not None, ws=ws)
            choice = choose(self.kernel_name, key, candidates, xq.device, make)
        gemm, keep = gemm_calls(choice.config, xq, self, out2, row_scale=row_scale,
                                residual=res2)  # fmt: skip
        return BoundKernels.of(gemm, out, [choice], keep=[xq, row_scale, out2, *keep])
