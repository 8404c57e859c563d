"""The `quant` settings a linear layer may name, and the int4 group default a suite gets.

What each format stores and how it rounds is the kernels' (`kernels/quant.py`, in torch: the
Triton build step, the torch peers and the tests' reference path quantize with it); an op only
declares the names and the default, so the pure stages read them without torch.
"""

from __future__ import annotations

LINEAR_QUANTS = ("none", "int8", "fp8", "int8-weight", "int4-weight")
DEFAULT_GROUP_SIZE = 128
