"""The int8 attention layer's launcher: `Attention` (attention_layer.py) through the int8 path.

On Hopper it makes one tuned choice over the portable int8 kernel (attention_int8.py) and the
warp-specialized Gluon one (attention_ws_int8.py); elsewhere (the interpreter, other GPUs) the
portable kernel runs. It sits apart from both kernel files so that each stays a leaf (the Gluon
kernel reuses the portable one's key passes), as attention_fp8_layer.py does for fp8.
"""

from __future__ import annotations

import torch

from opbench.kernels.attention_int8 import attention_int8_calls
from opbench.kernels.attention_layer import Attention
from opbench.kernels.launch import BoundKernels
from opbench.kernels.tuning import Config


class Int8Attention(Attention):
    """`Attention` through the int8 path (SageAttention-style)."""

    def bind(
        self, x: torch.Tensor, out: torch.Tensor | None = None, config: Config | None = None
    ) -> BoundKernels:
        q, k, v, out, out4 = self.output(x, out)
        # Imported here: Gluon's Hopper modules are needed only where a Hopper kernel may run.
        from opbench.kernels.attention_ws import ws_usable

        if config is None and ws_usable(q, k, v, out4):
            # Hopper: one tuned choice over this path's portable kernel and the Gluon one.
            from opbench.kernels.attention_ws_int8 import tuned_int8_sm90_calls

            calls, choice, keep = tuned_int8_sm90_calls(q, k, v, out4, causal=self.causal)
        else:
            calls, choice, keep = attention_int8_calls(q, k, v, out4, causal=self.causal,
                                                       config=config)  # fmt: skip
        return BoundKernels.of(calls, out, [choice], keep=[q, k, v, out4, *keep])
