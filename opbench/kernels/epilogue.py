"""Activation functions fused into the epilogue of other kernels, and the GEMMs' store.

GEMM, conv and elementwise kernels take the activation as a `tl.constexpr` code so the
compiler removes the unused branches.

GELU is torch's default, exact erf form, computed two ways:

- float32 outputs: libdevice's `erff` (about 1 ulp). It costs 36-38 SASS instructions per
  element (both of its polynomial branches are evaluated), which makes a standalone GELU
  instruction-bound rather than memory-bound (docs/perf/memory_bound.md).
- 16-bit outputs: erfc(|x| / sqrt 2) from the Chebyshev-fitted formula of Numerical
  Recipes (`erfcc`, fractional error below 1.2e-7 for every argument): t * exp(-z^2 + P9(t))
  with t = 1 / (1 + z/2), that is one exp, one approximate reciprocal and nine FMAs. Being
  relative-accurate, the erfc form keeps the negative tail, where 1 + erf(x) cancels, exact
  to float32 rounding: in float32 arithmetic the largest relative error on GELU is 5.5e-6
  for x in [-6, 0] and 2.2e-5 out at x = -11.6, far below fp16's and bf16's own rounding
  (4.9e-4 and 3.9e-3), so the 16-bit result is the correctly rounded one or next to it.

GELU's tanh approximation, x/2 (1 + tanh(u)) with u = sqrt(2/pi) (x + 0.044715 x^3), is
computed as x / (1 + exp(-2u)): the same function, since (1 + tanh(u)) / 2 = sigmoid(2u), with
one exp and one division, and no cancellation for x << 0 (exp overflows to inf, x / inf = -0,
the right limit; no NaN). tanh itself is 1 - 2 / (exp(2|x|) + 1) with x's sign: the same
identity, one exp, and exactly +-1 where exp overflows; its absolute error is float32's
rounding (about 1e-7) near 0.
"""

import torch
import triton
import triton.language as tl

from opbench.kernels.host import SIXTEEN_BIT

# Codes passed as the ACTIVATION meta-parameter. gelu_tanh is GELU's tanh approximation
# (torch's approximate="tanh"); relu6 clips to [0, 6].
ACTIVATION_CODES = {
    "none": 0, "relu": 1, "gelu": 2, "silu": 3, "relu6": 5, "gelu_tanh": 6,
    "hardswish": 7, "hardsigmoid": 8, "tanh": 9,
}  # fmt: skip
# GELU for outputs rounded to 16 bits (see above); chosen by activation_code, never by name.
GELU_16BIT_OUT = 4
# SwiGLU over column pairs: a GEMM whose weight rows interleave a gate and an up projection
# (row 2j = gate j, row 2j+1 = up j) writes column j = silu(gate_j) * up_j (swiglu.py). Kept
# apart from the elementwise codes: it changes the tile's shape, not its values.
SWIGLU_PAIRS = 16


def activation_code(name: str | None, out_dtype: torch.dtype | None = None) -> int:
    """The constexpr code for an activation name ('none' when None). Given the output dtype,
    GELU into fp16/bf16 takes the cheaper erfc form, accurate to that precision."""
    code = ACTIVATION_CODES[name or "none"]
    if code == ACTIVATION_CODES["gelu"] and out_dtype in SIXTEEN_BIT:
        return GELU_16BIT_OUT
    return code


@triton.jit
def _gelu_erfc_form(x):
    """0.5 x (1 + erf(x / sqrt 2)) through erfc(|x| / sqrt 2) (float32 in and out)."""
    z = tl.abs(x) * 0.7071067811865476
    t = tl.fdiv(1.0, 1.0 + 0.5 * z, ieee_rounding=False)
    poly = 0.17087277 * t - 0.82215223
    poly = poly * t + 1.48851587
    poly = poly * t - 1.13520398
    poly = poly * t + 0.27886807
    poly = poly * t - 0.18628806
    poly = poly * t + 0.09678418
    poly = poly * t + 0.37409196
    poly = poly * t + 1.00002368
    poly = poly * t - 1.26551223
    erfc_z = t * tl.exp(poly - z * z)
    one_plus_erf = tl.where(x >= 0, 2.0 - erfc_z, erfc_z)
    return 0.5 * x * one_plus_erf


@triton.jit
def apply_activation(x, ACTIVATION: tl.constexpr):
    """Apply the activation to a float32 block. GELU is the erf form, as torch's default (codes
    2 and 4: see the module docstring), or its tanh approximation (code 6)."""
    if ACTIVATION == 1:
        x = tl.maximum(x, 0.0)
    elif ACTIVATION == 2:
        x = 0.5 * x * (1.0 + tl.math.erf(x * 0.7071067811865476))
    elif ACTIVATION == 3:
        x = x / (1.0 + tl.exp(-x))
    elif ACTIVATION == 4:
        x = _gelu_erfc_form(x)
    elif ACTIVATION == 5:
        x = tl.minimum(tl.maximum(x, 0.0), 6.0)
    elif ACTIVATION == 6:
        # 2 * sqrt(2/pi) = 1.5957691216057308: x * sigmoid(2u), see the module docstring.
        x = x / (1.0 + tl.exp(-1.5957691216057308 * (x + 0.044715 * x * x * x)))
    elif ACTIVATION == 7:  # hardswish
        x = x * (tl.minimum(tl.maximum(x + 3.0, 0.0), 6.0) * (1.0 / 6.0))
    elif ACTIVATION == 8:  # hardsigmoid
        x = tl.minimum(tl.maximum(x * (1.0 / 6.0) + 0.5, 0.0), 1.0)
    elif ACTIVATION == 9:  # tanh
        magnitude = 1.0 - 2.0 / (tl.exp(2.0 * tl.abs(x)) + 1.0)
        x = tl.where(x < 0, -magnitude, magnitude)
    return x


@triton.jit
def store_output(
    y,  # [BLOCK_M, BLOCK_N] fp32: the tile after scales and bias
    offs_m,  # [BLOCK_M] rows of the tile
    offs_n,  # [BLOCK_N] GEMM columns of the tile
    M,
    N,  # GEMM columns (twice the output's with SWIGLU_PAIRS)
    out_ptr,
    stride_om,
    stride_on,
    res_ptr,  # residual with out's shape and strides (read only if HAS_RESIDUAL)
    ACTIVATION: tl.constexpr,
    HAS_RESIDUAL: tl.constexpr,
):
    """out = act(y) (+ residual), in out's dtype; rows >= M and columns past the output are
    masked. With SWIGLU_PAIRS the tile's column pairs become half as many output columns:
    splitting the accumulator's last axis in two stays within each thread's registers (an MMA
    accumulator holds neighbouring column pairs in one thread)."""
    if ACTIVATION == 16:  # SWIGLU_PAIRS
        gate, up = tl.split(tl.reshape(y, (y.shape[0], y.shape[1] // 2, 2)))
        gate_cols, _ = tl.split(tl.reshape(offs_n, (offs_n.shape[0] // 2, 2)))
        y = gate / (1.0 + tl.exp(-gate)) * up
        cols = gate_cols // 2
        width = N // 2
    else:
        y = apply_activation(y, ACTIVATION)
        cols = offs_n
        width = N
    offsets = offs_m.to(tl.int64)[:, None] * stride_om + cols[None, :] * stride_on
    mask = (offs_m < M)[:, None] & (cols < width)[None, :]
    if HAS_RESIDUAL:
        # The residual stream (a transformer's x + proj(...)): read once here instead of a
        # second kernel reading this output back.
        y += tl.load(res_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + offsets, y.to(out_ptr.dtype.element_ty), mask=mask)
