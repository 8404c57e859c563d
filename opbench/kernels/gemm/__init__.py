"""GEMM kernels: linear layers y = epilogue(x @ W^T + b) in fp16/bf16, fp8 and int8 (W8A8),
weight-only int8/int4 decode linears, SwiGLU's fused gate/up GEMM and the batched matmul of two
activations.

Launchers: `linear.Linear` (`linear_fp8.py`, `linear_int8.py`, `linear_weight_only.py` and
`swiglu.py` build on it; `linear_codes.py` runs a quantized GEMM on codes another kernel
wrote) and `matmul.bind_matmul`. Kernels: the Triton GEMMs of `linear_kernels.py`, the
weight-streaming ones of `linear_stream.py` and `linear_stream_q.py`, and on Hopper the
warp-specialized Gluon GEMM of `gemm_ws.py`. Plans: `linear_plans.py` (tiles and the decode
table) and `stream_plans.py` (the weight-streaming kernels).

Helpers take small named structures (NamedTuples: what travels together), their constexprs as
parameters of their own: `linear_epilogue.py`'s Output, EpilogueInputs, RopeArgs and SplitK for
the pointer kernels' epilogue, `gemm_ws_parts.py`'s for the Gluon GEMM's partitions.
`tests/kernels/gemm_sass.py` compiles every kernel that calls them for sm_90 on the CPU and
compares the SASS of two trees (a refactor must leave it as it was).
"""
