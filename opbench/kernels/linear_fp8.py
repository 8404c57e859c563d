"""FP8 linear: e4m3 weights (per output channel) x e4m3 activations (per token), fp32 sums.

Math. With sw[n] = max_k |W[n, k]| / 448 (build time) and sx[m] = max_k |x[m, k]| / 448
(every call), Wq and xq by the fp8 rule of `device.py` (round to nearest even on the e4m3
grid, so each row's largest value lands on 448):

    y[m, n] = act( sx[m] * sw[n] * sum_k xq[m, k] * Wq[n, k] + b[n] )

The products of two e4m3 numbers are exact in fp32 and the tensor cores sum them in fp32 (on
Hopper with Triton's default fast accumulation for fp8, as torch._scaled_mm's
`use_fast_accum=True`); the scales, bias and activation run in fp32 in the GEMM epilogue
(`linear_kernels._epilogue_store` with SCALED), the result in x's dtype.

Two launches:
  1. `quantize._quantize_rows_kernel` with FP8: x [M, K] fp16/bf16 -> xq e4m3 + sx fp32
     (reads 2MK bytes, writes MK + 4M);
  2. a GEMM kernel of `linear_kernels.py` on e4m3 operands: the fp8 tensor cores run at twice
     the fp16 rate, and W is N*K bytes instead of 2*N*K.
A pre-pass rather than quantizing inside the GEMM: every output tile needs its rows' scale,
a max over all of K, before its first multiply, so a fused version still reads x once for
the max; the pre-pass costs its bytes once (timed apart in docs/perf/gemm.md).

Where the layer before makes x in one pass over each row (rmsnorm/layernorm, SwiGLU's
silu(gate) * up), that pass writes the codes and scales itself and `bind_on_codes` runs the
GEMM alone on them: the fused groups of backends/triton_fusion.py ("norm_fp8", "glu_fp8").
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from opbench.kernels import Unsupported
from opbench.kernels.host import next_power_of_2
from opbench.kernels.launch import BoundKernels, KernelCall, sequence
from opbench.kernels.linear import Linear, gemm_calls, residual_view
from opbench.kernels.linear_plans import tma_ok
from opbench.kernels.quantize import quantize_rows_call
from opbench.kernels.scratch import scratch
from opbench.kernels.tuning import Choice, Config, choose, device_tag
from opbench.ops.quant import fp8_rows


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


class Fp8Linear(Linear):
    """`Linear` for quant="fp8": x fp16/bf16 [..., K] -> y [..., N] in x's dtype."""

    quant = "fp8"
    scaled = True
    kernel_name = "linear_fp8"

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
        """The GEMM on e4m3 codes and row scales that another kernel writes, with no quantize
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
        """Per-launch scratch for the e4m3 codes [M, K] and fp32 row scales [M] of an input
        with `rows_shape` rows: written by a producer, read by the GEMMs of the same launch
        (one norm's codes may feed several linears of the same K)."""
        m = math.prod(rows_shape)
        return (scratch((m, self.in_features), torch.float8_e4m3fn, device),
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
        write) = the layer on them, + `residual` (out's shape and dtype) in the epilogue."""
        m, k, n = math.prod(rows_shape), self.in_features, self.output_features
        if tuple(xq.shape) != (m, k) or tuple(row_scale.shape) != (m,):
            raise ValueError(f"codes must be [{m}, {k}] with [{m}] scales, got "
                             f"{list(xq.shape)} and {list(row_scale.shape)}")  # fmt: skip
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
        key = "|".join(["e4m3-codes", f"M{next_power_of_2(m)}", f"N{self.out_features}",
                        f"K{k}", "tma" if self._tma_ok(xq) else "notma",
                        *(["residual"] if res2 is not None else [])])  # fmt: skip
        if config is not None:
            choice = Choice(self.kernel_name, key, device_tag(xq.device), config, "forced")
        else:

            def make(cfg: Config):
                calls = gemm_calls(cfg, xq, self, out2, row_scale=row_scale, residual=res2)[0]
                return sequence(calls, out2)

            candidates = self.candidates(xq, residual=res2 is not None)
            choice = choose(self.kernel_name, key, candidates, xq.device, make)
        gemm, keep = gemm_calls(choice.config, xq, self, out2, row_scale=row_scale,
                                residual=res2)  # fmt: skip
        return BoundKernels.of(gemm, out, [choice], keep=[xq, row_scale, out2, *keep])

    def _tma_ok(self, x2: torch.Tensor) -> bool:
        # The GEMM reads xq, allocated contiguous here: only K's alignment matters.
        return self.in_features % 16 == 0 and tma_ok(self.weight)
