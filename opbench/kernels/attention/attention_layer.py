"""The attention layer's launcher: x [B, S, E] (or packed [B, S, 3E]) → [B, S, E], on the
Hopper (Gluon) kernels where they apply (one tuned choice among the warp-specialized kernel of
attention_ws.py, the single-program one of attention_hopper.py and the portable one), else the
portable kernel of attention.py.

It sits apart from the kernel files so that each stays a leaf: the Hopper modules reuse the
portable kernel's launch pieces, and this module alone knows about all of them.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from opbench.kernels import Unsupported
from opbench.kernels.attention.attention import attention_call, split_heads
from opbench.kernels.launch import BoundKernels
from opbench.kernels.tuning import Config


class Attention:
    """Attention of x [B, S, E] (q = k = v = x) or, with packed_qkv, [B, S, 3E] split as
    [3, H, D], into [B, S, E] in x's dtype: `bind(x)` or `attention(x, out=None)`.
    Settings no kernel covers raise Unsupported (at build time when they are known then,
    else at bind, when the head dim and dtype are)."""

    # The warp-specialized kernel's format (attention_ws.py QUANT): fp16 covers bf16 too; the
    # quantized layers (attention_int8_layer, attention_fp8_layer) override it.
    quant = "fp16"

    def __init__(self, *, heads: int, causal: bool, packed_qkv: bool) -> None:
        if heads < 1:
            raise Unsupported(f"attention needs heads >= 1, got {heads}")
        self.heads, self.causal, self.packed_qkv = heads, causal, packed_qkv

    def __call__(self, x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        return self.bind(x, out).launch()

    def output(self, x: torch.Tensor, out: torch.Tensor | None):
        q, k, v = split_heads(x, self.heads, self.packed_qkv)
        batch, seq_len, _, head_dim = q.shape
        embed = self.heads * head_dim
        if out is None:
            out = torch.empty((batch, seq_len, embed), dtype=x.dtype, device=x.device)
        elif out.shape != (batch, seq_len, embed) or out.dtype != x.dtype:
            raise ValueError(f"out must be {(batch, seq_len, embed)} {x.dtype}")
        return q, k, v, out, out.unflatten(-1, (self.heads, head_dim))

    def bind(
        self, x: torch.Tensor, out: torch.Tensor | None = None, config: Config | None = None
    ) -> BoundKernels:
        q, k, v, out, out4 = self.output(x, out)
        # Imported here: Gluon's Hopper modules are needed only where a Hopper kernel may run.
        from opbench.kernels.attention.attention_ws import tuned_sm90_calls, ws_usable

        if config is None and ws_usable(q, k, v, out4):
            # Hopper: the warp-specialized Gluon kernel's tiles and the other kernels of the
            # layer's format, one tuned choice.
            calls, choice, keep = tuned_sm90_calls(q, k, v, out4, causal=self.causal,
                                                   quant=self.quant)  # fmt: skip
        else:
            calls, choice, keep = self.portable(q, k, v, out4, config)
        return BoundKernels.of(calls, out, [choice], keep=[q, k, v, out4, *keep])

    def portable(self, q, k, v, out4, config: Config | None) -> tuple[list, object, list]:
        """The portable kernel's (calls, choice, keep) elsewhere than on Hopper."""
        call, choice = attention_call(q, k, v, out4, causal=self.causal, config=config)
        return [call], choice, []


class QuantizedAttention(Attention):
    """`Attention` through a quantized path (attention_int8_layer, attention_fp8_layer): on
    Hopper, for views the Gluon kernels take and no forced config, one tuned choice over the
    portable kernel of its `quant` and the warp-specialized one (attention_ws.py); else the
    portable `calls`."""

    calls: Callable  # (q, k, v, out, *, causal, config) -> (calls, choice, keep)

    def portable(self, q, k, v, out4, config: Config | None) -> tuple[list, object, list]:
        return self.calls(q, k, v, out4, causal=self.causal, config=config)
