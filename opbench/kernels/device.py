"""`@triton.jit` helpers shared by several kernel families: alignment hints, the one int8
rounding rule, and the tensor-core dot with its interpreter workaround.

The int8 rule (every int8 path: linear activations and weights, conv activations and
weights, attention queries and keys). A row (or block) v with a scale s gets the codes

    q = clamp(round_half_away_from_zero(v / s), -127, 127),   s = max|v| / 127

so |v - s q| <= s / 2, the code range is symmetric, and ties go away from zero as C's
`round` does (not to even, as `torch.round` does). An all-zero row has s = 0 and q = 0.
`quantize.quantize_per_row` is the same rule in torch for build-time weights; tests check
both against a plain-Python statement of it.

The fp8 rule (`quant: fp8`, OCP e4m3, Triton's float8e4nv, torch's float8_e4m3fn): a row v
gets s = max|v| / 448 and codes q = round_to_nearest_even_e4m3(v / s), so the row's largest
value lands on 448, the largest finite e4m3 number. `round_to_e4m3` does the rounding in fp32
arithmetic and the conversion to float8e4nv is then exact: the same codes on the GPU and in
Triton's CPU interpreter, whose own fp32 -> fp8 cast drops the carry when rounding crosses a
power of two (1.94 becomes 1.0, not 2.0). torch's cast rounds the same way as this rule
(`kernels.quant.fp8_rows`, the build-time weight quantizer; tests compare both).
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
def round_to_e4m3(v):
    """fp32 v -> fp32 on the e4m3 grid, round to nearest even, clamped to +-448.

    e4m3 has 3 mantissa bits: between 2^e and 2^(e+1) its step is 2^(e-3), and below the
    smallest normal (2^-6) a fixed step of 2^-9. The step of v is read off v's fp32 exponent
    bits; v / step is then exact and below 16, where adding and subtracting 1.5 * 2^23 rounds
    it to the nearest integer, ties to even (fp32's own rounding, with no fast-math).
    The division is a multiplication by 1 / step, built from the exponent bits too: both
    are exact for a power of two (step_exponent lies in -9..5), and an fp32 division is a
    ~10-instruction sequence that made the activation quantizer issue-bound (2026-11-25)."""
    v = tl.minimum(tl.maximum(v, -448.0), 448.0)
    exponent = ((v.to(tl.int32, bitcast=True) >> 23) & 0xFF) - 127
    step_exponent = tl.maximum(exponent, -6) - 3
    step = ((step_exponent + 127) << 23).to(tl.float32, bitcast=True)
    inverse_step = ((127 - step_exponent) << 23).to(tl.float32, bitcast=True)
    magic = 12582912.0  # 1.5 * 2^23
    return ((v * inverse_step + magic) - magic) * step


@triton.jit
def fp8_inverse_scale(absmax):
    """448 / absmax, finite for an all-zero row (whose codes are 0 whatever the multiplier)."""
    return 448.0 / tl.maximum(absmax, 1e-30)


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
