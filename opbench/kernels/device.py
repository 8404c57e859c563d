"""`@triton.jit` helpers shared by several kernel families: alignment hints, the one int8
rounding rule, and the tensor-core dot with its interpreter workaround.

The int8 rule (every int8 path: linear activations and weights, conv activations and
weights, attention queries and keys). A row (or block) v with a scale s gets the codes

    q = clamp(round_half_away_from_zero(v / s), -127, 127),   s = max|v| / 127

so |v - s q| <= s / 2, the code range is symmetric, and ties go away from zero as C's
`round` does (not to even, as `torch.round` does). An all-zero row has s = 0 and q = 0.
`quantize.quantize_per_row` is the same rule in torch for build-time weights; tests check
both against a plain-Python statement of it.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def multiple_of(value, ALIGN: tl.constexpr):
    """`value`, written so that the compiler knows it is a multiple of ALIGN (a power of two
    the caller guarantees divides it): divisibility survives `// ALIGN * ALIGN`, whereas
    `tl.multiple_of` has no effect on scalar arguments."""
    if ALIGN > 1:
        value = value // ALIGN * ALIGN
    return value


@triton.jit
def round_to_int8(v):
    """The int8 rule above, on an fp32 block already divided by its scale: clamp to
    [-127, 127], then round half away from zero (float-to-int conversion truncates toward
    zero, hence the +-0.5)."""
    v = tl.minimum(tl.maximum(v, -127.0), 127.0)
    return tl.where(v >= 0, v + 0.5, v - 0.5).to(tl.int8)


@triton.jit
def inverse_scale(absmax):
    """127 / absmax, finite for an all-zero row (whose codes are 0 whatever the multiplier)."""
    return 127.0 / tl.maximum(absmax, 1e-30)


@triton.jit
def dot_operand(x, UPCAST: tl.constexpr):
    """Triton 3.6's interpreter multiplies bfloat16 tiles as their raw uint16 bits; under the
    interpreter (UPCAST) bf16 operands go to tl.dot as exactly converted fp32 instead."""
    if UPCAST:
        x = x.to(tl.float32)
    return x


@triton.jit
def dot_accumulate(a, b, acc, IS_INT8: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr):
    """acc += a @ b on tensor cores: int8 x int8 -> int32, or float -> fp32 with PRECISION
    ("ieee" true fp32, or "tf32"; 16-bit operands ignore it)."""
    if IS_INT8:
        acc = tl.dot(a, b, acc, out_dtype=tl.int32)
    elif UPCAST:
        acc = tl.dot(dot_operand(a, UPCAST), dot_operand(b, UPCAST), acc, input_precision="ieee")
    else:
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
    return acc


@triton.constexpr_function
def next_power_of_2_constexpr(n):
    """The smallest power of two >= n, for constexpr arithmetic inside kernels."""
    return 1 << max(n - 1, 0).bit_length()
