"""Elementwise activations: ReLU, GELU (exact, erf form, or its tanh approximation), SiLU, ReLU6.

    relu(x) = max(x, 0);  gelu(x) = x/2 * (1 + erf(x / sqrt(2)));  silu(x) = x / (1 + exp(-x))
    gelu_tanh(x) = x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)));  relu6(x) = min(max(x, 0), 6)

Bytes: 2 * numel * element_size (read once, written once). At most ~20 FLOPs per element
(erf), far below the H200's compute per byte: memory-bound.

Contiguous tensors are treated as one flat array: each program handles BLOCK contiguous
elements, so every thread issues wide vector loads and stores. Any other layout goes
through the strided copy kernel of transpose.py with the activation fused into it. The
activation math itself is `apply_activation` from epilogue.py, shared with GEMM and conv.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from opbench.kernels import Unsupported
from opbench.kernels.epilogue import ACTIVATION_CODES, activation_code, apply_activation
from opbench.kernels.host import INTERPRET, cdiv, check_float, resolve_out
from opbench.kernels.launch import BoundKernels, tuned_call
from opbench.kernels.memory.transpose import bind_strided_map
from opbench.kernels.tuning import Config


@triton.jit
def _activation_kernel(
    # pointers
    x_ptr,  # contiguous input
    y_ptr,  # contiguous output, same dtype
    # shapes
    numel,  # number of elements
    # meta-parameters
    ACTIVATION: tl.constexpr,  # code from epilogue.ACTIVATION_CODES
    BLOCK: tl.constexpr,  # elements per program
):
    # int64 start: tensors may hold more than 2**31 elements.
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < numel
    x = tl.load(x_ptr + offsets, mask=mask)
    y = apply_activation(x.to(tl.float32), ACTIVATION).to(y_ptr.dtype.element_ty)
    tl.store(y_ptr + offsets, y, mask=mask)


def block_configs(gpu: bool = not INTERPRET) -> list[Config]:
    """Blocks of 1K-8K elements: 8 to 32 values per thread keeps enough bytes in flight."""
    if not gpu:
        return [Config.of(BLOCK=256, num_warps=4)]
    shapes = [(1024, 4), (2048, 4), (4096, 4), (2048, 8), (8192, 8)]
    return [Config.of(BLOCK=block, num_warps=warps) for block, warps in shapes]


def bind_activation(
    x: torch.Tensor, name: str, out: torch.Tensor | None = None, config: Config | None = None
) -> BoundKernels:
    """`name`(x) elementwise, name in relu | gelu | gelu_tanh | silu | relu6; any input
    strides; bound to x."""
    if name not in ACTIVATION_CODES or name == "none":
        known = ", ".join(n for n in ACTIVATION_CODES if n != "none")
        raise Unsupported(f"unknown activation {name!r} ({known})")
    check_float(x, name)
    out = resolve_out(out, x.shape, x)
    code = activation_code(name, out.dtype)
    if x.numel() == 0:
        return BoundKernels.of([], out)
    if not (x.is_contiguous() and out.is_contiguous()):
        call, choice = bind_strided_map(x, out, activation=code)
        return BoundKernels.of([call], out, [choice])
    numel = x.numel()
    call, choice = tuned_call(
        "activation", _activation_kernel, f"{x.dtype}|{numel}|act{code}", block_configs(),
        lambda cfg: (cdiv(numel, cfg["BLOCK"]),), (x, out, numel), {"ACTIVATION": code},
        x.device, config,
    )  # fmt: skip
    return BoundKernels.of([call], out, [choice])


def activation(x: torch.Tensor, name: str, out: torch.Tensor | None = None) -> torch.Tensor:
    """`name`(x) elementwise, name in relu | gelu | gelu_tanh | silu | relu6; any strides."""
    return bind_activation(x, name, out).launch()


def relu(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    return activation(x, "relu", out)


def gelu(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    return activation(x, "gelu", out)


def silu(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    return activation(x, "silu", out)


def gelu_tanh(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    return activation(x, "gelu_tanh", out)


def relu6(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    return activation(x, "relu6", out)
