"""Activation functions fused into the epilogue of other kernels.

GEMM, conv and elementwise kernels take the activation as a `tl.constexpr` code so the
compiler removes the unused branches.
"""

import triton
import triton.language as tl

# Codes passed as the ACTIVATION meta-parameter.
ACTIVATION_CODES = {"none": 0, "relu": 1, "gelu": 2, "silu": 3}


def activation_code(name: str | None) -> int:
    """The constexpr code for an activation name ('none' when None)."""
    return ACTIVATION_CODES[name or "none"]


@triton.jit
def apply_activation(x, ACTIVATION: tl.constexpr):
    """Apply the activation to a float32 block. GELU is the exact erf form, as torch's default."""
    if ACTIVATION == 1:
        x = tl.maximum(x, 0.0)
    elif ACTIVATION == 2:
        x = 0.5 * x * (1.0 + tl.math.erf(x * 0.7071067811865476))
    elif ACTIVATION == 3:
        x = x / (1.0 + tl.exp(-x))
    return x
