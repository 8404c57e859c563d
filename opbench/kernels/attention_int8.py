"""SageAttention-style attention: QK^T on int8 tensor cores, softmax and PV as in attention.py.

Three steps per call, all Triton kernels:

1. Smooth K: mu[b, h, :] = mean over the sequence of k[b, :, h, :]. Subtracting mu from
   every key is exact for softmax: q.(k_j - mu) = q.k_j - q.mu shifts each query row's logits
   by one constant. It removes the channel bias that K of real models carries, so the int8
   grid spends its 255 levels on the part that varies between keys.
2. Quantize K - mu per block of KEY_QUANT_ROWS keys, symmetric: scale = max|k - mu| / 127,
   k8 = round((k - mu) / scale). k8 goes to an [B, H, S_pad, D] int8 buffer (rows past S are
   zero) and each key row gets its block's scale in an [B, H, S_pad] fp32 vector.
3. Attention: each program quantizes its own BLOCK_M query rows the same way (the softmax
   scale log2(e)/sqrt(D) folded in first), then for each key block
       s = (q8 . k8^T) [int32, exact] * (q_scale * k_scale)   -> online softmax in fp32,
       acc += P V with P rounded to V's dtype (fp16/bf16 tensor cores, fp32 accumulate).

Why PV stays 16-bit: with random data the output is a sum of N weakly-correlated terms, so
its relative error is about the per-term error; e4m3 P (3 mantissa bits, ~2% rms rounding)
plus fp8 V would alone use most of the 3e-2 budget that int8 QK^T (~1%) leaves.

Cost per call, E = H D, element size e:
    FLOPs   QK^T 2 B H S^2 D as int8 ops (twice the fp16 tensor-core rate on Hopper),
            PV 2 B H S^2 D in fp16; half of each when causal.
    bytes   steps 1-2: read K twice (2 B S E e), write k8 and scales (B S E + 4 B H S);
            step 3: read Q, V (2 B S E e), k8 (B S E) and write O (B S E e).
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from opbench.kernels import Unsupported
from opbench.kernels.attention import (
    HALF_SHAPES,
    INTERPRET,
    LOG2E,
    check_head_dim,
    descriptors_usable,
    ensure_descriptor_allocator,
    key_mask,
    key_ranges,
    load_rows,
    online_softmax_update,
    quick_bench,
)

# Keys per quantization block (one scale each); the padded key buffer is a multiple of
# PAD_ROWS so that no key tile of the attention kernel (BLOCK_N <= 128) reads past it.
KEY_QUANT_ROWS = 64
PAD_ROWS = 128
MEAN_BLOCK_ROWS = 64


@triton.jit
def _key_mean_kernel(
    # pointers
    k_ptr,  # [B, S, H, D] view of the keys
    mean_ptr,  # [B * H, D] fp32 output: mean of each channel over the sequence
    # shapes
    seq_len,
    heads,
    # strides (elements) of the key view
    stride_xb,
    stride_xs,
    stride_xh,
    stride_xd,
    # meta-parameters
    HEAD_DIM: tl.constexpr,
    BLOCK_S: tl.constexpr,  # sequence rows summed per step
):
    """Grid (B * H,): one program sums one head's keys over the whole sequence."""
    pid_bh = tl.program_id(0)
    batch = pid_bh // heads
    head = pid_bh % heads
    k_base = k_ptr + batch.to(tl.int64) * stride_xb + head.to(tl.int64) * stride_xh
    cols = tl.arange(0, HEAD_DIM)
    total = tl.zeros([BLOCK_S, HEAD_DIM], dtype=tl.float32)
    for start in range(0, seq_len, BLOCK_S):
        rows = start + tl.arange(0, BLOCK_S)
        ptrs = k_base + rows[:, None] * stride_xs + cols[None, :] * stride_xd
        total += tl.load(ptrs, mask=rows[:, None] < seq_len, other=0.0).to(tl.float32)
    tl.store(mean_ptr + pid_bh * HEAD_DIM + cols, tl.sum(total, 0) / seq_len)


@triton.jit
def round_to_int8(x):
    """Round half away from zero, then convert (float->int conversion truncates)."""
    return (x + tl.where(x >= 0, 0.5, -0.5)).to(tl.int8)


@triton.jit
def _quantize_keys_kernel(
    # pointers
    k_ptr,  # [B, S, H, D] view of the keys
    mean_ptr,  # [B * H, D] fp32 key means
    k8_ptr,  # [B * H, S_pad, D] int8 output
    scale_ptr,  # [B * H, S_pad] fp32 output: the scale of each key row's block
    # shapes
    seq_len,
    padded_len,  # S_pad
    heads,
    # strides (elements) of the key view
    stride_xb,
    stride_xs,
    stride_xh,
    stride_xd,
    # meta-parameters
    HEAD_DIM: tl.constexpr,
    BLOCK_S: tl.constexpr,  # keys per quantization block
):
    """Grid (S_pad / BLOCK_S, B * H): smooth and quantize one block of keys."""
    pid_s = tl.program_id(0)
    pid_bh = tl.program_id(1)
    batch = pid_bh // heads
    head = pid_bh % heads
    rows = pid_s * BLOCK_S + tl.arange(0, BLOCK_S)
    cols = tl.arange(0, HEAD_DIM)
    in_seq = rows[:, None] < seq_len
    k_base = k_ptr + batch.to(tl.int64) * stride_xb + head.to(tl.int64) * stride_xh
    k = tl.load(k_base + rows[:, None] * stride_xs + cols[None, :] * stride_xd, mask=in_seq)
    mean = tl.load(mean_ptr + pid_bh * HEAD_DIM + cols)
    # Rows past the sequence must not widen the scale: they become exact zeros.
    smooth = tl.where(in_seq, k.to(tl.float32) - mean[None, :], 0.0)
    amax = tl.max(tl.max(tl.abs(smooth), 1), 0)
    scale = amax / 127.0
    k8 = round_to_int8(smooth * (127.0 / tl.maximum(amax, 1e-30)))
    out_offset = pid_bh.to(tl.int64) * padded_len
    tl.store(k8_ptr + (out_offset + rows[:, None]) * HEAD_DIM + cols[None, :], k8)
    tl.store(scale_ptr + out_offset + rows, tl.full([BLOCK_S], 0.0, tl.float32) + scale)


@triton.jit
def _attend_key_blocks_int8(
    acc,
    m_i,
    l_i,
    q8,
    q_scale,
    k8_base,
    k_scale_base,
    v_base,
    k8_desc,
    v_desc,
    offs_m,
    lo,
    hi,
    seq_len,
    stride_xs,
    stride_xd,
    HEAD_DIM: tl.constexpr,
    BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr,
    MASKED: tl.constexpr,
    USE_DESC: tl.constexpr,
    UPCAST_DOT: tl.constexpr,
):
    """One pass over key blocks [lo, hi); k8 rows are padded, so only V loads need masks."""
    for start_n in range(lo, hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        offs_n = start_n + tl.arange(0, BLOCK_N)
        k8 = load_rows(
            k8_base, k8_desc, start_n, seq_len, HEAD_DIM, 1, BLOCK_N, HEAD_DIM, USE_DESC, False
        )
        k_scale = tl.load(k_scale_base + offs_n)
        scores = tl.dot(q8, tl.trans(k8)).to(tl.float32) * (q_scale * k_scale)[None, :]
        if MASKED:
            scores = tl.where(key_mask(offs_m, offs_n, seq_len, CAUSAL), scores, float("-inf"))
        v = load_rows(
            v_base, v_desc, start_n, seq_len, stride_xs, stride_xd,
            BLOCK_N, HEAD_DIM, USE_DESC, MASKED,
        )  # fmt: skip
        acc, m_i, l_i = online_softmax_update(acc, m_i, l_i, scores, v, "tf32", UPCAST_DOT)
    return acc, m_i, l_i


@triton.jit
def _attention_int8_kernel(
    # pointers
    q_ptr,  # [B, S, H, D] fp16/bf16 view of x
    k8_ptr,  # [B * H, S_pad, D] int8 smoothed, quantized keys
    k_scale_ptr,  # [B * H, S_pad] fp32 scale of each key row
    v_ptr,  # [B, S, H, D] view of x, same strides as q
    out_ptr,  # [B, S, H, D] view of the output
    # shapes
    seq_len,
    padded_len,
    heads,
    # strides (elements) of the q/v views and of the output view
    stride_xb,
    stride_xs,
    stride_xh,
    stride_xd,
    stride_ob,
    stride_os,
    stride_oh,
    stride_od,
    # scalars
    qk_scale,  # log2(e) / sqrt(D), folded into Q before it is quantized
    # meta-parameters
    HEAD_DIM: tl.constexpr,
    CAUSAL: tl.constexpr,
    UPCAST_DOT: tl.constexpr,  # interpreter + bf16 only (see attention.dot_operand)
    BLOCK_M: tl.constexpr,  # query rows per program = rows per Q quantization block
    BLOCK_N: tl.constexpr,  # keys per inner step
    USE_DESC: tl.constexpr,  # K8/V tiles through tensor descriptors (TMA)
):
    """Grid (cdiv(S, BLOCK_M), B * H), as the fp16 kernel."""
    tl.static_assert(BLOCK_M % BLOCK_N == 0)
    num_m_blocks = tl.cdiv(seq_len, BLOCK_M)
    pid_m = tl.program_id(0)
    if CAUSAL:
        pid_m = num_m_blocks - 1 - pid_m
    pid_bh = tl.program_id(1)
    batch = pid_bh // heads
    head = pid_bh % heads
    x_offset = batch.to(tl.int64) * stride_xb + head.to(tl.int64) * stride_xh
    q_base = q_ptr + x_offset
    v_base = v_ptr + x_offset
    k8_base = k8_ptr + pid_bh.to(tl.int64) * padded_len * HEAD_DIM
    k_scale_base = k_scale_ptr + pid_bh.to(tl.int64) * padded_len
    if USE_DESC:
        k8_desc = tl.make_tensor_descriptor(
            k8_base, [padded_len, HEAD_DIM], [HEAD_DIM, 1], [BLOCK_N, HEAD_DIM]
        )
        v_desc = tl.make_tensor_descriptor(
            v_base, [seq_len, HEAD_DIM], [stride_xs, 1], [BLOCK_N, HEAD_DIM]
        )
    else:
        k8_desc = None
        v_desc = None

    # Quantize this program's query block: one symmetric scale for BLOCK_M x D values.
    start_m = pid_m * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    q = load_rows(
        q_base, None, start_m, seq_len, stride_xs, stride_xd, BLOCK_M, HEAD_DIM, False, True
    )
    q = q.to(tl.float32) * qk_scale
    q_amax = tl.max(tl.max(tl.abs(q), 1), 0)
    q_scale = q_amax / 127.0
    q8 = round_to_int8(q * (127.0 / tl.maximum(q_amax, 1e-30)))

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    unmasked_end, masked_end = key_ranges(start_m, seq_len, CAUSAL, BLOCK_M, BLOCK_N)
    acc, m_i, l_i = _attend_key_blocks_int8(
        acc, m_i, l_i, q8, q_scale, k8_base, k_scale_base, v_base, k8_desc, v_desc, offs_m,
        0, unmasked_end, seq_len, stride_xs, stride_xd,
        HEAD_DIM, BLOCK_N, CAUSAL, False, USE_DESC, UPCAST_DOT,
    )  # fmt: skip
    acc, m_i, l_i = _attend_key_blocks_int8(
        acc, m_i, l_i, q8, q_scale, k8_base, k_scale_base, v_base, k8_desc, v_desc, offs_m,
        unmasked_end, masked_end, seq_len, stride_xs, stride_xd,
        HEAD_DIM, BLOCK_N, CAUSAL, True, USE_DESC, UPCAST_DOT,
    )  # fmt: skip

    out = (acc / l_i[:, None]).to(out_ptr.dtype.element_ty)
    cols = tl.arange(0, HEAD_DIM)
    o_ptrs = (
        out_ptr
        + batch.to(tl.int64) * stride_ob
        + head.to(tl.int64) * stride_oh
        + offs_m[:, None] * stride_os
        + cols[None, :] * stride_od
    )
    tl.store(o_ptrs, out, mask=offs_m[:, None] < seq_len)


def int8_configs() -> list[triton.Config]:
    """Tile shapes of the fp16 kernel (int8 K tiles take half the shared memory), +/- TMA."""
    if INTERPRET:
        return [
            triton.Config(
                {"BLOCK_M": 32, "BLOCK_N": 16, "USE_DESC": False}, num_warps=4, num_stages=1
            )
        ]
    shapes = sorted({shape for table in HALF_SHAPES.values() for shape in table})
    return [
        triton.Config(
            {"BLOCK_M": bm, "BLOCK_N": bn, "USE_DESC": desc}, num_warps=warps, num_stages=stages
        )
        for bm, bn, warps, stages in shapes
        for desc in (False, True)
    ]


def prune_int8_configs(
    configs: list[triton.Config], named_args: dict, **kwargs
) -> list[triton.Config]:
    if INTERPRET:
        return configs
    shapes = HALF_SHAPES[kwargs["HEAD_DIM"]]
    desc_ok = descriptors_usable(named_args["v_ptr"])
    return [
        c
        for c in configs
        if (c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_warps, c.num_stages) in shapes
        and (desc_ok or not c.kwargs["USE_DESC"])
    ]


_attention_int8_tuned = triton.autotune(
    configs=int8_configs(),
    key=["seq_len", "HEAD_DIM", "CAUSAL"],
    prune_configs_by={"early_config_prune": prune_int8_configs},
    do_bench=quick_bench,
)(_attention_int8_kernel)


def attention_int8_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    *,
    causal: bool,
    config: dict | None = None,
) -> torch.Tensor:
    """Smooth and quantize K, then run the int8 attention kernel; all on [B, S, H, D] views.

    Scratch (key means, int8 keys, scales) is allocated per call; nothing is computed by torch.
    config: explicit attention-kernel meta-parameters, bypassing the autotuner.
    """
    batch, seq_len, heads, head_dim = q.shape
    check_head_dim(head_dim, q.dtype)
    if q.dtype == torch.float32:
        raise Unsupported("int8 attention keeps PV on 16-bit tensor cores: use float16/bfloat16")
    assert k.stride() == q.stride() and v.stride() == q.stride() and out.shape == q.shape
    ensure_descriptor_allocator()
    padded_len = triton.cdiv(seq_len, PAD_ROWS) * PAD_ROWS
    device = q.device
    key_mean = torch.empty((batch * heads, head_dim), dtype=torch.float32, device=device)
    k8 = torch.empty((batch * heads, padded_len, head_dim), dtype=torch.int8, device=device)
    k_scale = torch.empty((batch * heads, padded_len), dtype=torch.float32, device=device)

    _key_mean_kernel[(batch * heads,)](
        k, key_mean, seq_len, heads, *k.stride(),
        HEAD_DIM=head_dim, BLOCK_S=MEAN_BLOCK_ROWS,
    )  # fmt: skip
    _quantize_keys_kernel[(padded_len // KEY_QUANT_ROWS, batch * heads)](
        k, key_mean, k8, k_scale, seq_len, padded_len, heads, *k.stride(),
        HEAD_DIM=head_dim, BLOCK_S=KEY_QUANT_ROWS,
    )  # fmt: skip
    kernel = _attention_int8_tuned if config is None else _attention_int8_kernel
    grid = lambda meta: (triton.cdiv(seq_len, meta["BLOCK_M"]), batch * heads)  # noqa: E731
    kernel[grid](
        q, k8, k_scale, v, out,
        seq_len, padded_len, heads,
        *q.stride(), *out.stride(),
        LOG2E / math.sqrt(head_dim),
        HEAD_DIM=head_dim,
        CAUSAL=causal,
        UPCAST_DOT=INTERPRET and q.dtype == torch.bfloat16,
        **(config or {}),
    )  # fmt: skip
    return out
