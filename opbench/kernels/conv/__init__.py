"""Convolution kernels: 2-D convolution as an implicit GEMM (fp16/bf16/fp32 and int8), the 1x1
pointwise convolution as a GEMM per image, and depthwise convolution, each with a folded
batchnorm, a residual and an activation in the epilogue.

Launchers: `conv.prepare_conv` / `conv.conv_call` (`conv_int8.py` builds on them) and
`depthwise.build_depthwise_conv2d`. Host-side layout and weight packing live in `conv_shapes.py`.
Plans: `conv_plans.py` (read path and tile per shape), chosen by the one tuner
(`kernels/tuning.py`).
"""
