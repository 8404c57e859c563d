"""Attention kernels: fused multi-head attention forward (flash attention) for self-attention,
separate q/k/v and decode over a KV cache, in fp16/bf16, fp8 (e4m3) and int8 (SageAttention).

Launchers: `attention_layer.Attention` (with its fp8 and int8 subclasses in
`attention_fp8_layer.py` and `attention_int8_layer.py`), `attention_qkv` for separate q/k/v and
`attention_decode.decode_calls` for decode. Kernels: the portable Triton ones (`attention.py`,
`attention_fp8.py`, `attention_int8.py`, `attention_decode.py`; their key loops take
`attention_parts.py`'s named structures) and, on Hopper, the Gluon ones
(`attention_hopper.py`, single program; `attention_ws_kernel.py`, warp-specialized, one
kernel for fp16, fp8 and int8 by its QUANT constexpr, launched by `attention_ws.py`, its pieces
in `attention_ws_step.py` and `attention_ws_parts.py`). Plans: tile
candidates in `attention_plans.py` and `attention_decode_plans.py`, chosen by the one tuner
(`kernels/tuning.py`).
"""
