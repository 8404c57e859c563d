"""FP8 (e4m3) attention: both matrix products on fp8 tensor cores (Hopper: twice fp16's rate).

Scales (e4m3 keeps 3 mantissa bits and a range up to 448; a scale only places a block's
largest value at 448, the relative rounding is the format's):
- Q: one scale per query block (BLOCK_M rows), quantized inside the attention kernel after
  the softmax scale log2(e)/sqrt(D) is folded in.
- K: smoothed as in attention_int8.py (the per-channel mean over the sequence subtracted,
  exact for softmax), then one scale per KEY_BLOCK keys.
- P: p = 2^(s - m) lies in [0, 1] (m is the running row maximum), so P needs no data-
  dependent scale: 448 p is quantized (as FlashAttention-3 and SageAttention do); the row
  sums l are taken on the unquantized p.
- V: one scale per channel (max |v[:, d]| over the sequence), so the scale is constant along
  the PV reduction and is applied once, to the final accumulator: o = acc * s_v / (448 l).
  V is stored transposed, [D, S] (keys contiguous), because Hopper's fp8 MMA takes both
  operands K-major.

Steps (all Triton): (1) per-chunk sums of K and maxima of |V| per channel; (2) quantize K
(smoothed, per block) into [B H, S_pad, D] and V (per channel) into [B H, D, S_pad], rows past
S zero; (3) attention: each key block runs qk = q8 . k8^T (fp32 accumulate), the online
softmax of attention.py with the scalar q_scale * k_scale, and acc += p8 . v8.

Error (docs/perf/attention.md works it out): e4m3 rounding has a relative rms error
eps = 2.66e-2 (3 mantissa bits, round to nearest). The logits carry sqrt(2) eps (Q and K),
P and V eps each, so the output's relative L2 error is about sqrt(2 + 1 + 1) eps = 5.3e-2
on random data (measured 4.7-5.5e-2 in a float64 simulation), whatever D and S.

Under the Triton interpreter (CPU tests) fp32 -> fp8 conversions lose the carry into the
exponent (125.8 becomes 64); EMULATE rounds to the e4m3 grid in fp32 first, after which the
conversion is exact. On the GPU the conversion is the hardware's (round to nearest even,
saturating). Everything else, the fp8 loads and dots included, is the same code.
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
    views_key,
)
from opbench.kernels.attention.attention_int8 import (
    KEY_BLOCK,
    MIN_AMAX,
    SUM_BLOCK_ROWS,
    SUM_CHUNK_ROWS,
)
from opbench.kernels.attention.attention_parts import Fp8KeyValues, SoftmaxState, softmax_start
from opbench.kernels.attention.attention_plans import (
    descriptors_usable,
    ensure_descriptor_allocator,
    fp8_candidates,
)
from opbench.kernels.host import INTERPRET, cdiv
from opbench.kernels.launch import KernelCall, config_call, quantized_choice
from opbench.kernels.tuning import Choice, Config

# e4m3 (float8e4nv) has no infinities; its largest value, 448.0, is written as a literal in the
# kernels below.
FP8_DTYPE = torch.float8_e4m3fn


@triton.jit
def round_to_e4m3_grid(x):
    """x (fp32, |x| <= 448) rounded to the nearest e4m3 value, ties to even: 3 mantissa bits
    for normal values (|x| >= 2^-6), steps of 2^-9 below."""
    x = tl.minimum(tl.maximum(x, -448.0), 448.0)
    bits = x.to(tl.int32, bitcast=True)
    bits = (bits + 0x7FFFF + ((bits >> 20) & 1)) & -1048576  # keep the top 3 mantissa bits
    normal = bits.to(tl.float32, bitcast=True)
    # 1.5 * 2^23 added and taken away rounds x * 2^9 to an integer, ties to even.
    subnormal = ((x * 512.0 + 12582912.0) - 12582912.0) / 512.0
    return tl.where(tl.abs(x) < 0.015625, subnormal, normal)


@triton.jit
def to_e4m3(x, EMULATE: tl.constexpr):
    """fp32 -> float8e4nv (see the module docstring for EMULATE)."""
    if EMULATE:
        x = round_to_e4m3_grid(x)
    return x.to(tl.float8e4nv)


@triton.jit
def _kv_partial_stats_kernel(
    # pointers
    k_ptr,  # [B, S, H, D] view of the keys
    v_ptr,  # [B, S, H, D] view of the values (same strides)
    k_sum_ptr,  # [B * H, num_chunks, D] fp32 output: sum of each chunk's keys
    v_max_ptr,  # [B * H, num_chunks, D] fp32 output: max |v| of each chunk, per channel
    # shapes
    seq_len,
    heads,
    # strides (elements) of the k/v views
    stride_xb, stride_xs, stride_xh, stride_xd,
    # meta-parameters
    HEAD_DIM: tl.constexpr,
    CHUNK_ROWS: tl.constexpr,
    BLOCK_S: tl.constexpr,
):  # fmt: skip
    """Grid (cdiv(S, CHUNK_ROWS), B * H)."""
    pid_c = tl.program_id(0)
    pid_bh = tl.program_id(1)
    offset = (pid_bh // heads).to(tl.int64) * stride_xb + (pid_bh % heads).to(tl.int64) * stride_xh
    cols = tl.arange(0, HEAD_DIM)
    total = tl.zeros([BLOCK_S, HEAD_DIM], dtype=tl.float32)
    largest = tl.zeros([BLOCK_S, HEAD_DIM], dtype=tl.float32)
    for start in range(pid_c * CHUNK_ROWS, (pid_c + 1) * CHUNK_ROWS, BLOCK_S):
        rows = start + tl.arange(0, BLOCK_S)
        index = offset + rows[:, None] * stride_xs + cols[None, :] * stride_xd
        in_seq = rows[:, None] < seq_len
        total += tl.load(k_ptr + index, mask=in_seq, other=0.0).to(tl.float32)
        v = tl.load(v_ptr + index, mask=in_seq, other=0.0).to(tl.float32)
        largest = tl.maximum(largest, tl.abs(v))
    out = (pid_bh * tl.num_programs(0) + pid_c) * HEAD_DIM + cols
    tl.store(k_sum_ptr + out, tl.sum(total, 0))
    tl.store(v_max_ptr + out, tl.max(largest, 0))


@triton.jit
def _quantize_kv_fp8_kernel(
    # pointers
    k_ptr,  # [B, S, H, D] keys
    v_ptr,  # [B, S, H, D] values (same strides)
    k_sum_ptr,  # [B * H, num_chunks, D] fp32 partial key sums
    v_max_ptr,  # [B * H, num_chunks, D] fp32 partial |v| maxima
    k8_ptr,  # [B * H, S_pad, D] e4m3 output: smoothed keys / their block scale
    k_scale_ptr,  # [B * H, S_pad / BLOCK_S] fp32 output
    vt8_ptr,  # [B * H, D, S_pad] e4m3 output: values / their channel scale, transposed
    v_scale_ptr,  # [B * H, D] fp32 output
    # shapes
    seq_len,
    padded_len,
    heads,
    num_chunks,
    # strides (elements) of the k/v views
    stride_xb, stride_xs, stride_xh, stride_xd,
    # meta-parameters
    HEAD_DIM: tl.constexpr,
    BLOCK_S: tl.constexpr,  # keys per K scale (KEY_BLOCK)
    EMULATE: tl.constexpr,
):  # fmt: skip
    """Grid (S_pad / BLOCK_S, B * H)."""
    pid_s = tl.program_id(0)
    pid_bh = tl.program_id(1)
    cols = tl.arange(0, HEAD_DIM)
    key_sum = tl.zeros([HEAD_DIM], dtype=tl.float32)
    v_amax = tl.full([HEAD_DIM], MIN_AMAX, dtype=tl.float32)
    for chunk in range(0, num_chunks):
        stats = (pid_bh * num_chunks + chunk) * HEAD_DIM + cols
        key_sum += tl.load(k_sum_ptr + stats)
        v_amax = tl.maximum(v_amax, tl.load(v_max_ptr + stats))
    rows = pid_s * BLOCK_S + tl.arange(0, BLOCK_S)
    in_seq = rows[:, None] < seq_len
    offset = (pid_bh // heads).to(tl.int64) * stride_xb + (pid_bh % heads).to(tl.int64) * stride_xh
    index = offset + rows[:, None] * stride_xs + cols[None, :] * stride_xd

    k = tl.load(k_ptr + index, mask=in_seq, other=0.0).to(tl.float32)
    smooth = tl.where(in_seq, k - (key_sum / seq_len)[None, :], 0.0)  # pad rows stay 0
    k_amax = tl.maximum(tl.max(tl.max(tl.abs(smooth), 1), 0), MIN_AMAX)
    k8 = to_e4m3(smooth * (448.0 / k_amax), EMULATE)
    head_rows = pid_bh.to(tl.int64) * padded_len
    tl.store(k8_ptr + (head_rows + rows[:, None]) * HEAD_DIM + cols[None, :], k8)
    tl.store(k_scale_ptr + pid_bh * tl.num_programs(0) + pid_s, k_amax / 448.0)

    v = tl.load(v_ptr + index, mask=in_seq, other=0.0).to(tl.float32)
    vt8 = tl.trans(to_e4m3(v * (448.0 / v_amax)[None, :], EMULATE))
    head_cols = pid_bh.to(tl.int64) * HEAD_DIM
    tl.store(vt8_ptr + (head_cols + cols[:, None]) * padded_len + rows[None, :], vt8)
    if pid_s == 0:
        tl.store(v_scale_ptr + pid_bh * HEAD_DIM + cols, v_amax / 448.0)


@triton.jit
def _attend_key_blocks_fp8(
    state: SoftmaxState, q8, q_scale, offs_m, keys: Fp8KeyValues, lo, hi,
    HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, KEY_BLOCK: tl.constexpr,
    CAUSAL: tl.constexpr, MASKED: tl.constexpr, USE_DESC: tl.constexpr, EMULATE: tl.constexpr,
):  # fmt: skip
    """Key blocks [lo, hi) against q8 (scale q_scale); k8 and vt8 are padded with zeros, so no
    load needs a mask."""
    acc, m_i, l_i = state
    for start_n in range(lo, hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        k8 = load_rows(
            keys.k8_base, keys.k8_desc, start_n, keys.padded_len, HEAD_DIM, 1,
            BLOCK_N, HEAD_DIM, USE_DESC, False,
        )  # fmt: skip
        k_scale = tl.load(keys.k_scale_base + start_n // KEY_BLOCK)
        qk = tl.dot(q8, tl.trans(k8))
        if MASKED:
            qk = tl.where(
                key_mask(offs_m, start_n + tl.arange(0, BLOCK_N), keys.n_keys, CAUSAL),
                qk,
                float("-inf"),
            )
        if USE_DESC:
            vt8 = keys.vt8_desc.load([0, start_n])
        else:
            vt_ptrs = (keys.vt8_base + tl.arange(0, HEAD_DIM)[:, None] * keys.padded_len
                       + (start_n + tl.arange(0, BLOCK_N))[None, :])  # fmt: skip
            vt8 = tl.load(vt_ptrs)
        scale = q_scale * k_scale
        m_new = tl.maximum(m_i, tl.max(qk, 1) * scale)
        p = tl.math.exp2(qk * scale - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        acc = tl.dot(to_e4m3(p * 448.0, EMULATE), tl.trans(vt8), acc)
        m_i = m_new
    return SoftmaxState(acc, m_i, l_i)


@triton.jit
def _attention_fp8_kernel(
    # pointers
    q_ptr,  # [B, S, H, D] fp16/bf16 view of x
    k8_ptr,  # [B * H, S_pad, D] e4m3 smoothed keys
    k_scale_ptr,  # [B * H, S_pad / KEY_BLOCK] fp32
    vt8_ptr,  # [B * H, D, S_pad] e4m3 values, transposed
    v_scale_ptr,  # [B * H, D] fp32
    out_ptr,  # [B, S, H, D] view of the output
    # shapes
    seq_len,
    padded_len,
    heads,
    # strides (elements) of the q view and of the output view
    stride_xb, stride_xs, stride_xh, stride_xd,
    stride_ob, stride_os, stride_oh, stride_od,
    # scalars
    qk_scale,  # log2(e) / sqrt(D), folded into Q before it is quantized
    # meta-parameters
    HEAD_DIM: tl.constexpr,
    CAUSAL: tl.constexpr,
    EMULATE: tl.constexpr,  # interpreter: round to e4m3 in fp32 before converting
    BLOCK_M: tl.constexpr,  # query rows per program = rows per Q scale
    KEY_BLOCK: tl.constexpr,  # keys per K scale; a multiple of BLOCK_N
    BLOCK_N: tl.constexpr,
    USE_DESC: tl.constexpr,  # k8 / vt8 tiles through tensor descriptors (TMA)
):  # fmt: skip
    """Grid (cdiv(S, BLOCK_M), B * H), as the fp16 kernel."""
    tl.static_assert(KEY_BLOCK % BLOCK_N == 0)
    pid_m = tl.program_id(0)
    if CAUSAL:
        pid_m = tl.cdiv(seq_len, BLOCK_M) - 1 - pid_m  # longest rows first
    pid_bh = tl.program_id(1)
    batch = pid_bh // heads
    head = pid_bh % heads
    k8_base = k8_ptr + pid_bh.to(tl.int64) * padded_len * HEAD_DIM
    vt8_base = vt8_ptr + pid_bh.to(tl.int64) * HEAD_DIM * padded_len
    k_scale_base = k_scale_ptr + pid_bh * (padded_len // KEY_BLOCK)
    if USE_DESC:
        k8_desc = tl.make_tensor_descriptor(
            k8_base, [padded_len, HEAD_DIM], [HEAD_DIM, 1], [BLOCK_N, HEAD_DIM]
        )
        vt8_desc = tl.make_tensor_descriptor(
            vt8_base, [HEAD_DIM, padded_len], [padded_len, 1], [HEAD_DIM, BLOCK_N]
        )
    else:
        k8_desc = None
        vt8_desc = None

    start_m = pid_m * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    q_base = q_ptr + batch.to(tl.int64) * stride_xb + head.to(tl.int64) * stride_xh
    q = load_rows(
        q_base, None, start_m, seq_len, stride_xs, stride_xd, BLOCK_M, HEAD_DIM, False, True
    )
    q = q.to(tl.float32) * qk_scale
    q_amax = tl.maximum(tl.max(tl.max(tl.abs(q), 1), 0), MIN_AMAX)
    q8 = to_e4m3(q * (448.0 / q_amax), EMULATE)
    q_scale = q_amax / 448.0

    state = softmax_start(BLOCK_M, HEAD_DIM)
    keys = Fp8KeyValues(k8_base, k8_desc, k_scale_base, vt8_base, vt8_desc, padded_len,
                        n_keys=seq_len)  # fmt: skip
    unmasked_end, masked_end = key_ranges(start_m, seq_len, CAUSAL, BLOCK_M, BLOCK_N)
    state = _attend_key_blocks_fp8(
        state, q8, q_scale, offs_m, keys, 0, unmasked_end,
        HEAD_DIM=HEAD_DIM, BLOCK_N=BLOCK_N, KEY_BLOCK=KEY_BLOCK, CAUSAL=CAUSAL, MASKED=False,
        USE_DESC=USE_DESC, EMULATE=EMULATE,
    )  # fmt: skip
    state = _attend_key_blocks_fp8(
        state, q8, q_scale, offs_m, keys, unmasked_end, masked_end,
        HEAD_DIM=HEAD_DIM, BLOCK_N=BLOCK_N, KEY_BLOCK=KEY_BLOCK, CAUSAL=CAUSAL, MASKED=True,
        USE_DESC=USE_DESC, EMULATE=EMULATE,
    )  # fmt: skip
    acc, m_i, l_i = state

    cols = tl.arange(0, HEAD_DIM)
    v_scale = tl.load(v_scale_ptr + pid_bh * HEAD_DIM + cols)
    out = acc * (v_scale / 448.0)[None, :] / l_i[:, None]
    o_ptrs = (out_ptr + batch.to(tl.int64) * stride_ob + head.to(tl.int64) * stride_oh
              + offs_m[:, None] * stride_os + cols[None, :] * stride_od)  # fmt: skip
    tl.store(o_ptrs, out.to(out_ptr.dtype.element_ty), mask=offs_m[:, None] < seq_len)


def quantize_kv_calls(k: torch.Tensor, v: torch.Tensor) -> tuple[list[KernelCall], list]:
    """Steps 1-2 on [B, S, H, D] k and v views (same strides), bound: the two launches and
    [k8, k_scale, vt8, v_scale, workspace...] (module docstring)."""
    batch, seq_len, heads, head_dim = k.shape
    padded_len = cdiv(seq_len, KEY_BLOCK) * KEY_BLOCK
    num_chunks = cdiv(seq_len, SUM_CHUNK_ROWS)
    rows, device = batch * heads, k.device
    k_sum = torch.empty((rows, num_chunks, head_dim), dtype=torch.float32, device=device)
    v_max = torch.empty_like(k_sum)
    k8 = torch.empty((rows, padded_len, head_dim), dtype=FP8_DTYPE, device=device)
    k_scale = torch.empty((rows, padded_len // KEY_BLOCK), dtype=torch.float32, device=device)
    vt8 = torch.empty((rows, head_dim, padded_len), dtype=FP8_DTYPE, device=device)
    v_scale = torch.empty((rows, head_dim), dtype=torch.float32, device=device)
    options = {"num_warps": 4, "num_stages": 3}
    stats = KernelCall(
        _kv_partial_stats_kernel, (num_chunks, rows),
        (k, v, k_sum, v_max, seq_len, heads, *k.stride()),
        dict(HEAD_DIM=head_dim, CHUNK_ROWS=SUM_CHUNK_ROWS, BLOCK_S=SUM_BLOCK_ROWS), options,
    )  # fmt: skip
    quantize = KernelCall(
        _quantize_kv_fp8_kernel, (padded_len // KEY_BLOCK, rows),
        (k, v, k_sum, v_max, k8, k_scale, vt8, v_scale, seq_len, padded_len, heads, num_chunks,
         *k.stride()),
        dict(HEAD_DIM=head_dim, BLOCK_S=KEY_BLOCK, EMULATE=INTERPRET), options,
    )  # fmt: skip
    return [stats, quantize], [k8, k_scale, vt8, v_scale, k_sum, v_max]


def check_fp8_device(device: torch.device) -> None:
    if INTERPRET or device.type != "cuda":
        return
    if torch.cuda.get_device_capability(device) < (8, 9):
        raise Unsupported("fp8 attention needs fp8 tensor cores (compute capability 8.9+)")


def fp8_launch(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, causal: bool
) -> tuple[list[KernelCall], list, Callable[[Config], KernelCall], list[Config]]:
    """The pieces of `attention_fp8_calls`: the bound quantization passes, the tensors they
    write [k8, k_scale, vt8, v_scale, workspace...], the attention kernel's KernelCall for a
    config, and its candidates."""
    batch, seq_len, heads, head_dim = q.shape
    check_head_dim(head_dim, q.dtype)
    if q.dtype == torch.float32:
        raise Unsupported("fp8 attention takes float16/bfloat16 inputs")
    if head_dim < 32:
        raise Unsupported(f"fp8 attention needs a head dim >= 32 (8-bit MMA), got {head_dim}")
    check_fp8_device(q.device)
    assert k.stride() == q.stride() and v.stride() == q.stride() and out.shape == q.shape
    ensure_descriptor_allocator()
    quantize, keep = quantize_kv_calls(k, v)
    k8, k_scale, vt8, v_scale = keep[:4]
    args = (q, k8, k_scale, vt8, v_scale, out, seq_len, k8.shape[1], heads, *q.stride(),
            *out.stride(), LOG2E / math.sqrt(head_dim))  # fmt: skip
    named = dict(HEAD_DIM=head_dim, CAUSAL=causal, KEY_BLOCK=KEY_BLOCK, EMULATE=INTERPRET)

    def make(cfg: Config) -> KernelCall:
        grid = (cdiv(seq_len, cfg["BLOCK_M"]), batch * heads)
        return config_call(_attention_fp8_kernel, grid, args, named, cfg)

    return quantize, keep, make, fp8_candidates(head_dim, descriptors_usable(k8, vt8))


def attention_fp8_calls(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    *,
    causal: bool,
    config: Config | dict | None = None,
) -> tuple[list[KernelCall], Choice, list]:
    """Quantize K and V, then the fp8 attention kernel, bound on [B, S, H, D] views."""
    quantize, keep, make, candidates = fp8_launch(q, k, v, out, causal)
    calls, choice = quantized_choice("attention_fp8", views_key(q, out, causal), quantize, make,
                                     candidates, q.device, as_config(config))  # fmt: skip
    return calls, choice, keep


def attention_fp8_forward(q, k, v, out, *, causal: bool, config: Config | dict | None = None):
    """Bind and run the fp8 path once on [B, S, H, D] views (see `attention_fp8_calls`)."""
    for call in attention_fp8_calls(q, k, v, out, causal=causal, config=config)[0]:
        call.call()
    return out
