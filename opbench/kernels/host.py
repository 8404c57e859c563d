"""Host-side helpers shared by the kernel families: integer arithmetic for grids, tensor
checks, axis collapsing and build-time folding. Plain Python and torch; no kernels here.

`cdiv` and `next_power_of_2` are plain Python on purpose: `triton.cdiv` is a constexpr
function and costs microseconds per call from Python.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import torch

# Read once, before any kernel is decorated: triton.jit reads the same variable at import.
INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
SIXTEEN_BIT = (torch.float16, torch.bfloat16)
MAX_INT32_OFFSET = 2**31 - 1


def cdiv(a: int, b: int) -> int:
    """ceil(a / b)."""
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    """The smallest power of two >= n (1 for n <= 1)."""
    return 1 << max(n - 1, 0).bit_length()


def alignment(*values: int, limit: int = 16) -> int:
    """The largest power of two <= limit dividing every value (0 is divisible by anything):
    the ALIGN hint a kernel may give `multiple_of` for them."""
    align = limit
    while align > 1 and any(v % align for v in values):
        align //= 2
    return align


def pair(value: int | Sequence[int], name: str = "value") -> tuple[int, int]:
    """(a, b) from an int or a two-element sequence."""
    if isinstance(value, int):
        return value, value
    if len(value) != 2:
        raise ValueError(f"{name} must be an int or a pair, not {value!r}")
    return int(value[0]), int(value[1])


def collapse_dims(
    shape: Sequence[int], *strides: Sequence[int]
) -> tuple[list[int], list[list[int]]]:
    """Drop size-1 axes and merge neighbouring axes that every layout walks as one.

    Axes k and k+1 merge when, for every stride list, stride[k] == stride[k+1] * shape[k+1].
    Returns the new sizes and one stride list per input list (an empty shape becomes [1]).
    """
    sizes: list[int] = []
    merged: list[list[int]] = [[] for _ in strides]
    for axis, size in enumerate(shape):
        if size == 1:
            continue
        current = [s[axis] for s in strides]
        if sizes and all(m[-1] == c * size for m, c in zip(merged, current, strict=True)):
            sizes[-1] *= size
            for m, c in zip(merged, current, strict=True):
                m[-1] = c
            continue
        sizes.append(size)
        for m, c in zip(merged, current, strict=True):
            m.append(c)
    if not sizes:
        return [1], [[0] for _ in strides]
    return sizes, merged


def check_float(x: torch.Tensor, op: str) -> None:
    """Raise Unsupported unless x is a float32/float16/bfloat16 tensor."""
    from opbench.kernels import Unsupported

    if x.dtype not in FLOAT_DTYPES:
        raise Unsupported(f"{op} supports float32, float16 and bfloat16, not {x.dtype}")


def resolve_out(out: torch.Tensor | None, shape: Sequence[int], like: torch.Tensor) -> torch.Tensor:
    """The output tensor: `out` after checking it, or a new contiguous tensor."""
    shape = torch.Size(shape)
    if out is None:
        return torch.empty(shape, dtype=like.dtype, device=like.device)
    if out.shape != shape or out.dtype != like.dtype or out.device != like.device:
        raise ValueError(
            f"out is {tuple(out.shape)} {out.dtype} on {out.device}, "
            f"expected {tuple(shape)} {like.dtype} on {like.device}"
        )
    return out


def fold_batchnorm(
    running_mean: torch.Tensor,
    running_var: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Inference batchnorm as a per-channel affine map, in float64 (build time):
    batchnorm(v) = v * scale + shift with scale = weight / sqrt(var + eps) and
    shift = bias - mean * scale. The batchnorm kernel applies it to a tensor; the conv folds
    it into its weights and bias."""
    inv_std = torch.rsqrt(running_var.double() + eps)
    scale = inv_std if weight is None else weight.double() * inv_std
    shift = -running_mean.double() * scale
    if bias is not None:
        shift = shift + bias.double()
    return scale, shift
