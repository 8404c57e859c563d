"""PyTorch's own fp8 path for `quant: fp8` linear layers: the peer of our Triton fp8 linear.

The scheme is the Triton kernel's (kernels/quant.py, kernels/gemm/linear_fp8.py), written as a PyTorch
user writes row-wise fp8 (the way torchao's float8 row-wise inference does it):

- build: W [N, K] in the layer's dtype -> Wq e4m3 and sw[n] = max_k |W[n, k]| / 448;
- every call: x [M, K] -> xq e4m3 and sx[m] = max_k |x[m, k]| / 448 (per token), rounded to
  nearest even after clamping to +-448;
- `torch._scaled_mm(xq, Wqᵀ, scale_a=sx [M, 1], scale_b=sw [1, N], bias=b, out_dtype=the
  layer's dtype, use_fast_accum=True)`: cuBLASLt's fp8 GEMM with the row-wise scales and the
  bias in its epilogue; the activation, if any, after it.

`use_fast_accum=True` because Triton's fp8 dot on Hopper accumulates the same way by default
(its `max_num_imprecise_acc` default): both sides sum the tensor cores' fp8 products without
promoting them to full fp32 every few steps. The retired bench/quant_gpu.py (`git show b3fbaa8:bench/quant_gpu.py`) also times torch with
`use_fast_accum=False`, and tensor-wise scales, for docs/perf/gemm.md.

Like torch-int8, the build times eager and `torch.compile` (which fuses the quantization of x)
on a GPU and keeps the faster. On CUDA, `torch._scaled_mm` needs compute capability 8.9
(Ada, Hopper) or newer and K and N multiples of 16; other layers are `unsupported` with that
rule as the reason. On the CPU torch runs it with its reference kernel.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from opbench.backends.base import Built, Unsupported, Weights, torch_dtype
from opbench.backends.torch_int8 import TorchInt8, require_quant_linear
from opbench.kernels.quant import fp8_rows
from opbench.ops.functional import activate
from opbench.spec.model import LayerSpec

if TYPE_CHECKING:
    import torch


def scaled_mm_refusal(k: int, n: int, device: str) -> str | None:
    """Why `torch._scaled_mm` on `device` refuses an [m, k] x [k, n] product, or None."""
    if not device.startswith("cuda"):
        return None
    import torch

    major, minor = torch.cuda.get_device_capability(torch.device(device))
    if (major, minor) < (8, 9):
        return (
            f"torch._scaled_mm needs compute capability 8.9 or newer; this GPU is {major}.{minor}"
        )
    for name, size in (("K (in_features)", k), ("N (out_features)", n)):
        if size % 16:
            return f"torch._scaled_mm on CUDA needs {name} to be a multiple of 16; got {size}"
    return None


def fp8_linear(
    weight_t: torch.Tensor,
    weight_scale: torch.Tensor,
    bias: torch.Tensor | None,
    activation: str,
    fast_accum: bool = True,
) -> Callable[[torch.Tensor], torch.Tensor]:
    """x [..., K] in float16/bfloat16 -> y [..., N] in x's dtype, through torch._scaled_mm.

    weight_t: Wqᵀ [K, N], a transposed (column-major) view of the contiguous [N, K] e4m3
    weight; weight_scale: sw, float32 [1, N]; bias: in the layer's dtype, or None."""
    import torch

    k, n = weight_t.shape

    def forward(x: torch.Tensor) -> torch.Tensor:
        xq, x_scale = fp8_rows(x.reshape(-1, k))
        y = torch._scaled_mm(xq, weight_t, scale_a=x_scale[:, None], scale_b=weight_scale,
                             bias=bias, out_dtype=x.dtype, use_fast_accum=fast_accum)  # fmt: skip
        return activate(y, activation).reshape(*x.shape[:-1], n)

    return forward


class TorchFp8(TorchInt8):
    name = "torch-fp8"
    label = "torch._scaled_mm fp8 row-wise"

    def unavailable_reason(self, device: str) -> str | None:
        import torch

        if not hasattr(torch, "_scaled_mm") or not hasattr(torch, "float8_e4m3fn"):
            return f"torch {torch.__version__} has no torch._scaled_mm / float8_e4m3fn"
        if device.startswith("cuda") and torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability(torch.device(device))
            if (major, minor) < (8, 9):
                return (
                    f"fp8 GEMMs need compute capability 8.9 or newer; this GPU is {major}.{minor}"
                )
        return None

    def build(self, layers: Sequence[LayerSpec], weights: Sequence[Weights], device: str) -> Built:
        import torch

        (layer,) = layers
        require_quant_linear(self.name, layer, "fp8")
        k, n = layer.input_shape[-1], layer.params["out_features"]
        refusal = scaled_mm_refusal(k, n, device)
        if refusal:
            raise Unsupported(refusal)
        dtype = torch_dtype(layer.dtype)
        w = weights[0]
        # Rounded to the layer's dtype first, as every backend's weights are.
        weight_q, weight_scale = fp8_rows(w["weight"].to(dtype))
        bias = w["bias"].to(dtype) if "bias" in w else None
        eager = fp8_linear(weight_q.t(), weight_scale[None, :], bias, layer.params["activation"])
        probe = torch.randn(layer.input_shape, device=device, dtype=dtype)
        return self._built(eager, probe, device)
