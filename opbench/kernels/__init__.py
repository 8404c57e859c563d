"""Triton kernels in four family folders, `attention/`, `gemm/`, `conv/` and `memory/` (each
with a summary in its `__init__.py`): `@triton.jit` kernels and their launchers.

Each family binds once and launches many times: `bind_*` (or a layer object's `bind`) checks
the input, allocates the output and any workspace, picks a configuration (`tuning.py`: one
tuner, one plan cache) and fixes every kernel argument (`launch.py`); the returned launch only
launches. Launchers never fall back to a torch computation. Shared pieces: `host.py` (host
helpers), `device.py` (`@triton.jit` helpers, the int8 rounding rule), `epilogue.py`
(activations), `hopper.py` (Gluon pieces for sm_90: TMA load, barrier, ping-pong turns).
Which kernel a layer's settings select (quant, fusion) is the backend's table
(`backends/triton_table.py`), not the kernels'; no kernel file imports a backend.
"""

# Kernel files raise the one "cannot run this configuration" exception of opbench/errors.py.
from opbench.errors import Unsupported

__all__ = ["Unsupported"]
