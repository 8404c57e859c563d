"""Tests run on the CPU: Triton kernels go through Triton's interpreter.

TRITON_INTERPRET must be set before triton.jit decorates anything, so it is set here,
before any test module imports opbench.kernels.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")
