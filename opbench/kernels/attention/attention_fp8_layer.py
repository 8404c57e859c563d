"""The fp8 attention layer's launcher: `Attention` (attention_layer.py) through the fp8 path.

On Hopper it makes one tuned choice over the portable fp8 kernel (attention_fp8.py) and the
warp-specialized Gluon one (attention_ws.py); elsewhere the portable kernel runs. It sits
apart from both kernel files so that each stays a leaf (the Gluon kernel reuses the portable
one's quantization passes).
"""

from __future__ import annotations

from opbench.kernels.attention.attention_fp8 import attention_fp8_calls
from opbench.kernels.attention.attention_layer import QuantizedAttention


class Fp8Attention(QuantizedAttention):
    """`Attention` through the fp8 path."""

    calls = staticmethod(attention_fp8_calls)
    quant = "fp8"
