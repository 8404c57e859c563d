"""The int8 attention layer's launcher: `Attention` (attention_layer.py) through the int8 path.

On Hopper it makes one tuned choice over the portable int8 kernel (attention_int8.py) and the
warp-specialized Gluon one (attention_ws.py); elsewhere (the interpreter, other GPUs) the
portable kernel runs. It sits apart from both kernel files so that each stays a leaf (the Gluon
kernel reuses the portable one's key passes), as attention_fp8_layer.py does for fp8.
"""

from __future__ import annotations

from opbench.kernels.attention.attention_int8 import attention_int8_calls
from opbench.kernels.attention.attention_layer import QuantizedAttention


class Int8Attention(QuantizedAttention):
    """`Attention` through the int8 path (SageAttention-style)."""

    calls = staticmethod(attention_int8_calls)
    quant = "int8"
