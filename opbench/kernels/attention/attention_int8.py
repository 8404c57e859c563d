"""SageAttention-style attention: QK^T on int8 tensor cores, softmax and PV as in attention.py.

Three steps per call, all Triton kernels:

1. Smooth K: mu[b, h, :] = mean over the sequence of k[b, :, h, :], from partial sums over
   chunks of SUM_CHUNK_ROWS keys (many programs, so the pass runs at memory speed).
   Subtracting mu from every key is exact for softmax: q.(k_j - mu) = q.k_j - q.mu shifts
   each query row's logits by one constant. It removes the channel bias that K of real
   models carries, so the int8 grid spends its 255 levels on what varies between keys.
2. Quantize K - mu per block of KEY_BLOCK keys by the int8 rule of `device.py`:
   scale = max|k - mu| / 127, k8 = round((k - mu) / scale), into an [B, H, S_pad, D] int8 buffer (rows past S are 0)
   and one fp32 scale per block.
3. Attention: each program quantizes its own BLOCK_M query rows the same way (the softmax
   scale log2(e)/sqrt(D) folded in first), then for each key block
       qk = q8 . k8^T  (int32, exact)   logits = qk * q_scale * k_scale (one scalar)
   and the online softmax and PV of the fp16 kernel (P rounded to V's 16-bit dtype).
   The int32 -> fp32 conversion is an integer add: for |qk| < 2^22 the bits of
   0x4B400000 + qk read as a float are exactly 1.5 * 2^23 + qk, and the softmax update
   takes that offset off inside the same FMA that applies the scale. |qk| <= 127^2 D < 2^22
   for D <= 256.

Why PV stays 16-bit: with random data the output is a sum of N weakly-correlated terms, so
its relative error is about the per-term error; e4m3 P (3 mantissa bits, ~2% rms rounding)
plus fp8 V would alone use most of the 3e-2 budget that int8 QK^T (~1%) leaves.

Cost per call, E = H D, element size e:
    FLOPs   QK^T 2 B H S^2 D as int8 ops (twice the fp16 tensor-core rate on Hopper),
            PV 2 B H S^2 D in fp16; half of each when causal.
    bytes   steps 1-2: read K twice (2 B S E e), write k8 (B S E);
            step 3: read Q, V (2 B S E e), k8 (B S E) and write O (B S E e).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import triton
import triton.language as tl

from opbench.kernels import Unsupported
from opbench.kernels.attention.attention import (
    LOG2E,
    as_config,
    check_head_dim,
    key_mask,
    key_ranges,
    load_rows,
    online_softmax_update,
    views_key,
)
from opbench.kernels.attention.attention_parts import KeyValues, SoftmaxState, softmax_start
from opbench.kernels.attention.attention_plans import (
    descriptors_usable,
    ensure_descriptor_allocator,
    int8_candidates,
)
from opbench.kernels.device import round_to_int8
from opbench.kernels.host import INTERPRET, cdiv
from opbench.kernels.launch import KernelCall, config_call, quantized_choice
from opbench.kernels.tuning import Choice, Config

# Keys per quantization block (one scale each). The key tiles of the attention kernel
# (BLOCK_N <= 128) divide it, so each tile has one scale and never reads past the padding.
KEY_BLOCK = 128
# Keys summed by one program of the mean pass, BLOCK_S rows at a time.
SUM_CHUNK_ROWS = 512
SUM_BLOCK_ROWS = 64
# 0x4B400000 read as fp32 is 1.5 * 2^23 = MAGIC_FLOAT: adding an int32 |x| < 2^22 to these
# bits gives the float MAGIC_FLOAT + x exactly.
MAGIC_BITS = tl.constexpr(0x4B400000)
MAGIC_FLOAT = tl.constexpr(12582912.0)
# Floor of a block's max |value| (an all-zero block, e.g. the smoothed keys of S = 1): keeps
# every scale, and the product of two, a positive normal float, so -inf * scale stays -inf.
MIN_AMAX = tl.constexpr(1e-12)


@triton.jit
def _key_partial_sums_kernel(
    # pointers
    k_ptr,  # [B, S, H, D] view of the keys
    partial_ptr,  # [B * H, num_chunks, D] fp32 output: sum of each chunk's keys
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
    CHUNK_ROWS: tl.constexpr,  # keys per program (SUM_CHUNK_ROWS)
    BLOCK_S: tl.constexpr,  # keys per load
):
    """Grid (cdiv(S, CHUNK_ROWS), B * H): sum one chunk of one head's keys."""
    pid_c = tl.program_id(0)
    pid_bh = tl.program_id(1)
    batch = pid_bh // heads
    head = pid_bh % heads
    k_base = k_ptr + batch.to(tl.int64) * stride_xb + head.to(tl.int64) * stride_xh
    cols = tl.arange(0, HEAD_DIM)
    total = tl.zeros([BLOCK_S, HEAD_DIM], dtype=tl.float32)
    for start in range(pid_c * CHUNK_ROWS, (pid_c + 1) * CHUNK_ROWS, BLOCK_S):
        rows = start + tl.arange(0, BLOCK_S)
        ptrs = k_base + rows[:, None] * stride_xs + cols[None, :] * stride_xd
        total += tl.load(ptrs, mask=rows[:, None] < seq_len, other=0.0).to(tl.float32)
    num_chunks = tl.num_programs(0)
    tl.store(partial_ptr + (pid_bh * num_chunks + pid_c) * HEAD_DIM + cols, tl.sum(total, 0))


@triton.jit
def _quantize_keys_kernel(
    # pointers
    k_ptr,  # [B, S, H, D] view of the keys
    partial_ptr,  # [B * H, num_chunks, D] fp32 partial key sums
    k8_ptr,  # [B * H, S_pad, D] int8 output
    scale_ptr,  # [B * H, S_pad / BLOCK_S] fp32 output: one scale per key block
    # shapes
    seq_len,
    padded_len,  # S_pad
    heads,
    num_chunks,
    # strides (elements) of the key view
    stride_xb,
    stride_xs,
    stride_xh,
    stride_xd,
    # meta-parameters
    HEAD_DIM: tl.constexpr,
    BLOCK_S: tl.constexpr,  # keys per quantization block (KEY_BLOCK)
):
    """Grid (S_pad / BLOCK_S, B * H): smooth and quantize one block of keys."""
    pid_s = tl.program_id(0)
    pid_bh = tl.program_id(1)
    batch = pid_bh // heads
    head = pid_bh % heads
    cols = tl.arange(0, HEAD_DIM)
    key_sum = tl.zeros([HEAD_DIM], dtype=tl.float32)
    for chunk in range(0, num_chunks):
        key_sum += tl.load(partial_ptr + (pid_bh * num_chunks + chunk) * HEAD_DIM + cols)
    mean = key_sum / seq_len
    rows = pid_s * BLOCK_S + tl.arange(0, BLOCK_S)
    in_seq = rows[:, None] < seq_len
    k_base = k_ptr + batch.to(tl.int64) * stride_xb + head.to(tl.int64) * stride_xh
    k = tl.load(k_base + rows[:, None] * stride_xs + cols[None, :] * stride_xd, mask=in_seq)
    # Rows past the sequence must not widen the scale: they become exact zeros.
    smooth = tl.where(in_seq, k.to(tl.float32) - mean[None, :], 0.0)
    amax = tl.maximum(tl.max(tl.max(tl.abs(smooth), 1), 0), MIN_AMAX)
    k8 = round_to_int8(smooth * (127.0 / amax))
    tl.store(
        k8_ptr + (pid_bh.to(tl.int64) * padded_len + rows[:, None]) * HEAD_DIM + cols[None, :], k8
    )
    tl.store(scale_ptr + pid_bh * tl.num_programs(0) + pid_s, amax / 127.0)


@triton.jit
def _attend_key_blocks_int8(
    state: SoftmaxState, q8, q_scale, offs_m, keys: KeyValues, k_scale_base, lo, hi,
    HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, KEY_BLOCK: tl.constexpr,
    CAUSAL: tl.constexpr, MASKED: tl.constexpr, USE_DESC: tl.constexpr, UPCAST_DOT: tl.constexpr,
    LAZY: tl.constexpr,
):  # fmt: skip
    """One pass over key blocks [lo, hi): q8 (scale q_scale) against the int8 keys (one scale
    per KEY_BLOCK keys at k_scale_base); k8 rows are padded, so only V loads need masks."""
    for start_n in range(lo, hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        offs_n = start_n + tl.arange(0, BLOCK_N)
        k8 = load_rows(
            keys.k_base, keys.k_desc, start_n, keys.n_keys, keys.stride_ks, keys.stride_kd,
            BLOCK_N, HEAD_DIM, USE_DESC, False,
        )  # fmt: skip
        k_scale = tl.load(k_scale_base + start_n // KEY_BLOCK)
        qk = tl.dot(q8, tl.trans(k8))
        # int32 -> fp32 as MAGIC_FLOAT + qk, by an integer add (see the module docstring).
        qk = (qk + MAGIC_BITS).to(tl.float32, bitcast=True)
        if MASKED:
            qk = tl.where(key_mask(offs_m, offs_n, keys.n_keys, CAUSAL), qk, float("-inf"))
        v = load_rows(
            keys.v_base, keys.v_desc, start_n, keys.n_keys, keys.stride_vs, keys.stride_vd,
            BLOCK_N, HEAD_DIM, USE_DESC, MASKED,
        )  # fmt: skip
        state = online_softmax_update(
            state, qk, MAGIC_FLOAT, q_scale * k_scale, v, "tf32", UPCAST_DOT, LAZY
        )
    return state


@triton.jit
def _attention_int8_kernel(
    # pointers
    q_ptr,  # [B, S, H, D] fp16/bf16 view of x
    k8_ptr,  # [B * H, S_pad, D] int8 smoothed, quantized keys
    k_scale_ptr,  # [B * H, S_pad / KEY_BLOCK] fp32 scale of each key block
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
    KEY_BLOCK: tl.constexpr,  # keys per K quantization block; a multiple of BLOCK_N
    BLOCK_N: tl.constexpr,  # keys per inner step
    USE_DESC: tl.constexpr,  # K8/V tiles through tensor descriptors (TMA)
    LAZY: tl.constexpr,  # conditional rescaling (attention.online_softmax_update)
):
    """Grid (cdiv(S, BLOCK_M), B * H), as the fp16 kernel."""
    tl.static_assert(BLOCK_M % BLOCK_N == 0)
    tl.static_assert(KEY_BLOCK % BLOCK_N == 0)
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
    k_scale_base = k_scale_ptr + pid_bh * (padded_len // KEY_BLOCK)
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
    q_amax = tl.maximum(tl.max(tl.max(tl.abs(q), 1), 0), MIN_AMAX)
    q_scale = q_amax / 127.0
    q8 = round_to_int8(q * (127.0 / q_amax))

    state = softmax_start(BLOCK_M, HEAD_DIM)
    # k8 rows are contiguous: strides (HEAD_DIM, 1).
    keys = KeyValues(k8_base, HEAD_DIM, 1, k8_desc, v_base, stride_xs, stride_xd, v_desc,
                     n_keys=seq_len)  # fmt: skip
    unmasked_end, masked_end = key_ranges(start_m, seq_len, CAUSAL, BLOCK_M, BLOCK_N)
    state = _attend_key_blocks_int8(
        state, q8, q_scale, offs_m, keys, k_scale_base, 0, unmasked_end,
        HEAD_DIM=HEAD_DIM, BLOCK_N=BLOCK_N, KEY_BLOCK=KEY_BLOCK, CAUSAL=CAUSAL, MASKED=False,
        USE_DESC=USE_DESC, UPCAST_DOT=UPCAST_DOT, LAZY=LAZY,
    )  # fmt: skip
    state = _attend_key_blocks_int8(
        state, q8, q_scale, offs_m, keys, k_scale_base, unmasked_end, masked_end,
        HEAD_DIM=HEAD_DIM, BLOCK_N=BLOCK_N, KEY_BLOCK=KEY_BLOCK, CAUSAL=CAUSAL, MASKED=True,
        USE_DESC=USE_DESC, UPCAST_DOT=UPCAST_DOT, LAZY=LAZY,
    )  # fmt: skip
    acc, m_i, l_i = state

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


def key_quantize_calls(
    k: torch.Tensor,
) -> tuple[list[KernelCall], torch.Tensor, torch.Tensor, list]:
    """Steps 1-2 on a [B, S, H, D] key view, bound: the two launches, the int8 keys
    [B * H, S_pad, D] (S_pad a multiple of KEY_BLOCK, pad rows zero), their scales
    [B * H, S_pad / KEY_BLOCK], and the partial-sum workspace."""
    batch, seq_len, heads, head_dim = k.shape
    padded_len = cdiv(seq_len, KEY_BLOCK) * KEY_BLOCK
    num_chunks = cdiv(seq_len, SUM_CHUNK_ROWS)
    rows = batch * heads
    partial = torch.empty((rows, num_chunks, head_dim), dtype=torch.float32, device=k.device)
    k8 = torch.empty((rows, padded_len, head_dim), dtype=torch.int8, device=k.device)
    k_scale = torch.empty((rows, padded_len // KEY_BLOCK), dtype=torch.float32, device=k.device)
    options = {"num_warps": 4, "num_stages": 3}
    sums = KernelCall(
        _key_partial_sums_kernel, (num_chunks, rows), (k, partial, seq_len, heads, *k.stride()),
        dict(HEAD_DIM=head_dim, CHUNK_ROWS=SUM_CHUNK_ROWS, BLOCK_S=SUM_BLOCK_ROWS), options,
    )  # fmt: skip
    quantize = KernelCall(
        _quantize_keys_kernel, (padded_len // KEY_BLOCK, rows),
        (k, partial, k8, k_scale, seq_len, padded_len, heads, num_chunks, *k.stride()),
        dict(HEAD_DIM=head_dim, BLOCK_S=KEY_BLOCK), options,
    )  # fmt: skip
    return [sums, quantize], k8, k_scale, [partial]


def int8_launch(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, causal: bool
) -> tuple[list[KernelCall], list, Callable[[Config], KernelCall], list[Config]]:
    """The pieces of `attention_int8_calls`: the bound key passes, the tensors they write
    [k8, k_scale, workspace...], the attention kernel's KernelCall for a config, and its
    candidates (attention_ws.py's int8 format reuses the passes and may choose this kernel)."""
    batch, seq_len, heads, head_dim = q.shape
    check_head_dim(head_dim, q.dtype)
    if q.dtype == torch.float32:
        raise Unsupported("int8 attention keeps PV on 16-bit tensor cores: use float16/bfloat16")
    assert k.stride() == q.stride() and v.stride() == q.stride() and out.shape == q.shape
    ensure_descriptor_allocator()
    quantize, k8, k_scale, keep = key_quantize_calls(k)
    args = (q, k8, k_scale, v, out, seq_len, k8.shape[1], heads, *q.stride(), *out.stride(),
            LOG2E / math.sqrt(head_dim))  # fmt: skip
    named = dict(HEAD_DIM=head_dim, CAUSAL=causal, KEY_BLOCK=KEY_BLOCK,
                 UPCAST_DOT=INTERPRET and q.dtype == torch.bfloat16)  # fmt: skip

    def make(cfg: Config) -> KernelCall:
        grid = (cdiv(seq_len, cfg["BLOCK_M"]), batch * heads)
        return config_call(_attention_int8_kernel, grid, args, named, cfg)

    candidates = int8_candidates(head_dim, descriptors_usable(v))
    return quantize, [k8, k_scale, *keep], make, candidates


def attention_int8_calls(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    *,
    causal: bool,
    config: Config | dict | None = None,
) -> tuple[list[KernelCall], Choice, list]:
    """Smooth and quantize K, then the int8 attention kernel, bound on [B, S, H, D] views.
    config: explicit attention-kernel meta-parameters instead of tuning."""
    quantize, keep, make, candidates = int8_launch(q, k, v, out, causal)
    calls, choice = quantized_choice("attention_int8", views_key(q, out, causal), quantize, make,
                                     candidates, q.device, as_config(config))  # fmt: skip
    return calls, choice, keep


def attention_int8_forward(q, k, v, out, *, causal: bool, config: Config | dict | None = None):
    """Bind and run the int8 path once on [B, S, H, D] views (see `attention_int8_calls`)."""
    calls, _, _ = attention_int8_calls(q, k, v, out, causal=causal, config=config)
    for call in calls:
        call.call()
    return out
