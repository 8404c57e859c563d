"""Memory-bound kernels: elementwise activations and sigmoid, add/mul with broadcasting,
LayerNorm/RMSNorm, softmax, batchnorm, pooling (windowed and global), transpose/permute,
slice/split, concat, token embeddings, rotary position embeddings (rope) and the KV-cache
append, and the row-wise quantization of activations (int8, fp8) that the
quantized GEMM and conv read.

Each file has its own `bind_*` launcher and its block-size candidates next to its kernel; the
shared layouts are `rows.py` (a reduced axis seen as rows, for softmax and the norms) and
`transpose.bind_strided_map` (any strided copy with an epilogue, for activation and slicing).
"""
