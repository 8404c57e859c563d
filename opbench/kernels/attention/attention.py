"""Fused multi-head attention forward (flash attention) in Triton.

For every batch b, head h and query row i, with scale c = 1/sqrt(D):

    o_i = sum_j p_ij v_j,    p_ij = exp(c q_i.k_j) / sum_j' exp(c q_i.k_j')    (j <= i when causal)

The S x S score matrix never reaches memory. One program owns BLOCK_M query rows of one
(b, h) and walks the keys BLOCK_N at a time, keeping per row the running maximum m, the
running denominator l and an unnormalised accumulator (the online softmax):

    m' = max(m, max_j s_ij)      alpha = 2^(m - m')      p_ij = 2^(s_ij - m')
    l' = alpha l + sum_j p_ij    acc' = alpha acc + p V_block

with s = (c log2 e) q.k, so the exponentials are `exp2` (one MUFU instruction each). The
result is acc / l. Causal programs visit only the key blocks left of and on the diagonal:
the blocks strictly left of it run without any mask, the diagonal ones with one.

Cost per call, E = H D:
    FLOPs  4 B H S^2 D (QK^T and PV, 2 S^2 D each per head); half of it when causal.
    bytes  floor (B S E) (3 reads + 1 write) x element size; K and V are re-read once per
           query block, from L2 when the programs of one head run together (the grid puts
           the query blocks of one head next to each other for that reason).
At S = 4096, D = 128 the arithmetic intensity is ~1000 FLOP/byte: matrix bound.

Layout: q, k and v are strided views of the layer input x, [B, S, H, D] (for packed input,
views into [B, S, 3, H, D]); the kernel writes o straight into [B, S, H, D] = [B, S, E].
On Hopper the K/V tiles may come through tensor descriptors (TMA), chosen by tuning
(attention_plans.py), and `Attention` also tunes the Gluon kernel of attention_hopper.py
against this one.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import triton
import triton.language as tl

from opbench.kernels import Unsupported
from opbench.kernels.attention.attention_parts import KeyValues, SoftmaxState, softmax_start
from opbench.kernels.attention.attention_plans import (
    descriptors_usable,
    ensure_descriptor_allocator,
    float_candidates,
)
from opbench.kernels.device import dot_operand
from opbench.kernels.host import INTERPRET, cdiv
from opbench.kernels.launch import KernelCall, tuned_call
from opbench.kernels.tuning import Choice, Config

LOG2E = 1.4426950408889634
SUPPORTED_HEAD_DIMS = (16, 32, 64, 128, 256)
SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


@triton.jit
def load_rows(
    base, desc, row0, seq_len, stride_row, stride_col,
    ROWS: tl.constexpr, HEAD_DIM: tl.constexpr, USE_DESC: tl.constexpr, CHECK_ROWS: tl.constexpr,
):  # fmt: skip
    """Load rows [row0, row0 + ROWS) x [0, HEAD_DIM) of one head; rows past seq_len read 0.

    base: pointer to row 0, column 0 of this (batch, head); desc: a tensor descriptor over
    the same [seq_len, HEAD_DIM] matrix (None unless USE_DESC). The descriptor zero-fills
    rows past seq_len by itself; the pointer path needs CHECK_ROWS for blocks that cross it.
    """
    if USE_DESC:
        tile = desc.load([row0, 0])
    else:
        rows = row0 + tl.arange(0, ROWS)
        cols = tl.arange(0, HEAD_DIM)
        ptrs = base + rows[:, None] * stride_row + cols[None, :] * stride_col
        if CHECK_ROWS:
            tile = tl.load(ptrs, mask=rows[:, None] < seq_len, other=0.0)
        else:
            tile = tl.load(ptrs)
    return tile


@triton.jit
def online_softmax_update(
    state: SoftmaxState, qk, qk_offset, qk_scale, v,
    DOT_PRECISION: tl.constexpr, UPCAST_DOT: tl.constexpr, LAZY: tl.constexpr,
):  # fmt: skip
    """Fold one key block into the running state (acc, m, l) of the online softmax.

    The block's base-2 logits are (qk - qk_offset) * qk_scale with qk_scale > 0, so the row
    maximum is taken on qk and each logit costs one FMA; masked entries of qk are -inf.
    Every row has seen a finite logit by the time this runs, so m stays finite.
    P is rounded to V's dtype, as the tensor cores take it.

    LAZY (FlashAttention-4's conditional rescaling): keep the stale maxima, and skip the
    rescale of acc and l (one multiply per accumulator element per step), until some row's
    maximum has grown by more than 8; p <= 2^8 meanwhile, which fp16/bf16 P and the fp32
    sums hold exactly as well. The decision is one reduction over the block's rows.
    """
    acc, m_i, l_i = state
    m_blk = (tl.max(qk, 1) - qk_offset) * qk_scale
    if LAZY:
        if tl.max(m_blk - m_i, 0) > 8.0:  # +inf on the first block (m = -inf)
            m_new = tl.maximum(m_i, m_blk)
            alpha = tl.math.exp2(m_i - m_new)
            l_i = l_i * alpha
            acc = acc * alpha[:, None]
            m_i = m_new
        p = tl.math.exp2(qk * qk_scale - (m_i + qk_offset * qk_scale)[:, None])
        l_i = l_i + tl.sum(p, 1)
    else:
        m_new = tl.maximum(m_i, m_blk)
        p = tl.math.exp2(qk * qk_scale - (m_new + qk_offset * qk_scale)[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        m_i = m_new
    p = p.to(v.dtype)
    acc = tl.dot(
        dot_operand(p, UPCAST_DOT), dot_operand(v, UPCAST_DOT), acc, input_precision=DOT_PRECISION
    )
    return SoftmaxState(acc, m_i, l_i)


@triton.jit
def key_mask(offs_m, offs_n, seq_len, CAUSAL: tl.constexpr):
    """Which (query, key) pairs of a block are visible: keys past the end never are."""
    visible = offs_n[None, :] < seq_len
    if CAUSAL:
        visible = visible & (offs_n[None, :] <= offs_m[:, None])
    return visible


@triton.jit
def key_ranges(
    start_m, seq_len, CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr
):
    """Split the keys of query block [start_m, start_m + BLOCK_M) into two passes:
    [0, unmasked_end) needs no mask at all, [unmasked_end, masked_end) needs `key_mask`.
    Causal: keys left of the key block holding start_m are visible to every row; keys right
    of the query block to none, so those blocks are never visited. Otherwise only a partial last block is masked.
    """
    if CAUSAL:
        # start_m rounded down to a key block: the same when BLOCK_N divides BLOCK_M.
        unmasked_end = (start_m // BLOCK_N) * BLOCK_N
        masked_end = tl.minimum(start_m + BLOCK_M, seq_len)
    else:
        unmasked_end = (seq_len // BLOCK_N) * BLOCK_N
        masked_end = seq_len
    return unmasked_end, masked_end


@triton.jit
def _attend_key_blocks(
    state: SoftmaxState, q, offs_m, keys: KeyValues, lo, hi, qk_scale,
    HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, MASKED: tl.constexpr,
    USE_DESC: tl.constexpr, DOT_PRECISION: tl.constexpr, UPCAST_DOT: tl.constexpr,
    LAZY: tl.constexpr,
):  # fmt: skip
    """One pass over the key blocks from lo (a multiple of BLOCK_N) to hi; see key_ranges.
    q: the query block, rows offs_m; the state after the last block is returned."""
    for start_n in range(lo, hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        k = load_rows(
            keys.k_base, keys.k_desc, start_n, keys.n_keys, keys.stride_ks, keys.stride_kd,
            BLOCK_N, HEAD_DIM, USE_DESC, MASKED,
        )  # fmt: skip
        k = dot_operand(k, UPCAST_DOT)
        qk = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION)
        if MASKED:
            visible = key_mask(offs_m, start_n + tl.arange(0, BLOCK_N), keys.n_keys, CAUSAL)
            qk = tl.where(visible, qk, float("-inf"))
        v = load_rows(
            keys.v_base, keys.v_desc, start_n, keys.n_keys, keys.stride_vs, keys.stride_vd,
            BLOCK_N, HEAD_DIM, USE_DESC, MASKED,
        )  # fmt: skip
        state = online_softmax_update(state, qk, 0.0, qk_scale, v, DOT_PRECISION, UPCAST_DOT,
                                      LAZY)  # fmt: skip
    return state


@triton.jit
def _attention_fwd_kernel(
    # pointers: q, k, v share the strides of the input x; out has its own
    q_ptr,  # [B, S, H, D] view of x (first third of each row when packed)
    k_ptr,  # [B, S, H, D] view of x
    v_ptr,  # [B, S, H, D] view of x
    out_ptr,  # [B, S, H, D] view of the [B, S, E] output
    # shapes
    seq_len,  # S
    heads,  # H
    # strides (elements) of the q/k/v views and of the output view
    stride_xb,
    stride_xs,
    stride_xh,
    stride_xd,
    stride_ob,
    stride_os,
    stride_oh,
    stride_od,
    # scalars
    qk_scale,  # log2(e) / sqrt(D)
    # meta-parameters
    HEAD_DIM: tl.constexpr,  # D, a power of two
    CAUSAL: tl.constexpr,  # mask keys j > i
    DOT_PRECISION: tl.constexpr,  # "ieee" for fp32 inputs (exact enough for 1e-4), else "tf32"
    UPCAST_DOT: tl.constexpr,  # interpreter + bf16 only: see dot_operand
    BLOCK_M: tl.constexpr,  # query rows per program
    BLOCK_N: tl.constexpr,  # keys per inner step; BLOCK_M % BLOCK_N == 0
    USE_DESC: tl.constexpr,  # load K/V (and Q, store O) through tensor descriptors (TMA)
    LAZY: tl.constexpr,  # conditional rescaling (online_softmax_update)
):
    """Grid (cdiv(S, BLOCK_M), B * H): one program per query block of one (batch, head)."""
    tl.static_assert(BLOCK_M % BLOCK_N == 0)
    num_m_blocks = tl.cdiv(seq_len, BLOCK_M)
    pid_m = tl.program_id(0)
    if CAUSAL:
        # Longest rows first: the last wave then holds short programs.
        pid_m = num_m_blocks - 1 - pid_m
    pid_bh = tl.program_id(1)
    batch = pid_bh // heads
    head = pid_bh % heads
    x_offset = batch.to(tl.int64) * stride_xb + head.to(tl.int64) * stride_xh
    o_offset = batch.to(tl.int64) * stride_ob + head.to(tl.int64) * stride_oh
    q_base = q_ptr + x_offset
    k_base = k_ptr + x_offset
    v_base = v_ptr + x_offset
    o_base = out_ptr + o_offset

    if USE_DESC:
        q_desc = tl.make_tensor_descriptor(
            q_base, [seq_len, HEAD_DIM], [stride_xs, 1], [BLOCK_M, HEAD_DIM]
        )
        k_desc = tl.make_tensor_descriptor(
            k_base, [seq_len, HEAD_DIM], [stride_xs, 1], [BLOCK_N, HEAD_DIM]
        )
        v_desc = tl.make_tensor_descriptor(
            v_base, [seq_len, HEAD_DIM], [stride_xs, 1], [BLOCK_N, HEAD_DIM]
        )
        o_desc = tl.make_tensor_descriptor(
            o_base, [seq_len, HEAD_DIM], [stride_os, 1], [BLOCK_M, HEAD_DIM]
        )
    else:
        q_desc = None
        k_desc = None
        v_desc = None
        o_desc = None

    start_m = pid_m * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    q = load_rows(
        q_base, q_desc, start_m, seq_len, stride_xs, stride_xd, BLOCK_M, HEAD_DIM, USE_DESC, True
    )
    q = dot_operand(q, UPCAST_DOT)
    state = softmax_start(BLOCK_M, HEAD_DIM)
    keys = KeyValues(k_base, stride_xs, stride_xd, k_desc, v_base, stride_xs, stride_xd, v_desc,
                     n_keys=seq_len)  # fmt: skip
    unmasked_end, masked_end = key_ranges(start_m, seq_len, CAUSAL, BLOCK_M, BLOCK_N)
    # Keys every row sees first, then the blocks that need the mask (see key_ranges).
    state = _attend_key_blocks(
        state, q, offs_m, keys, 0, unmasked_end, qk_scale,
        HEAD_DIM=HEAD_DIM, BLOCK_N=BLOCK_N, CAUSAL=CAUSAL, MASKED=False, USE_DESC=USE_DESC,
        DOT_PRECISION=DOT_PRECISION, UPCAST_DOT=UPCAST_DOT, LAZY=LAZY,
    )  # fmt: skip
    state = _attend_key_blocks(
        state, q, offs_m, keys, unmasked_end, masked_end, qk_scale,
        HEAD_DIM=HEAD_DIM, BLOCK_N=BLOCK_N, CAUSAL=CAUSAL, MASKED=True, USE_DESC=USE_DESC,
        DOT_PRECISION=DOT_PRECISION, UPCAST_DOT=UPCAST_DOT, LAZY=LAZY,
    )  # fmt: skip
    acc, m_i, l_i = state
    out = (acc / l_i[:, None]).to(out_ptr.dtype.element_ty)
    if USE_DESC:
        o_desc.store([start_m, 0], out)
    else:
        cols = tl.arange(0, HEAD_DIM)
        o_ptrs = o_base + offs_m[:, None] * stride_os + cols[None, :] * stride_od
        tl.store(o_ptrs, out, mask=offs_m[:, None] < seq_len)


def check_head_dim(head_dim: int, dtype: torch.dtype) -> None:
    if head_dim not in SUPPORTED_HEAD_DIMS:
        raise Unsupported(
            f"attention head dim {head_dim} is not a power of two in 16..256 "
            "(tl.dot and the register tiles need power-of-two sizes)"
        )
    if dtype not in SUPPORTED_DTYPES:
        raise Unsupported(f"attention kernel takes float16/bfloat16/float32, not {dtype}")


def as_config(config: Config | dict | None) -> Config | None:
    """Tests and benchmarks may force a tile as a plain dict of meta-parameters and options."""
    return Config.of(**config) if isinstance(config, dict) else config


def views_key(q: torch.Tensor, out: torch.Tensor, causal: bool) -> str:
    return f"{q.dtype}|{tuple(q.shape)}|{q.stride()}|{out.stride()}|causal{causal}"


def portable_launch(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, causal: bool
) -> tuple[tuple, dict, Callable[[Config], tuple[int, int]], list[Config]]:
    """What the portable kernel needs on [B, S, H, D] views: positional args, constexprs, the
    grid of a config, and its tile candidates."""
    batch, seq_len, heads, head_dim = q.shape
    check_head_dim(head_dim, q.dtype)
    assert k.stride() == q.stride() and v.stride() == q.stride() and out.shape == q.shape
    ensure_descriptor_allocator()
    args = (q, k, v, out, seq_len, heads, *q.stride(), *out.stride(),
            LOG2E / math.sqrt(head_dim))  # fmt: skip
    named = dict(HEAD_DIM=head_dim, CAUSAL=causal,
                 DOT_PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
                 UPCAST_DOT=INTERPRET and q.dtype == torch.bfloat16)  # fmt: skip
    candidates = float_candidates(q.dtype, head_dim, descriptors_usable(q, out))
    return args, named, lambda cfg: (cdiv(seq_len, cfg["BLOCK_M"]), batch * heads), candidates


def attention_call(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    *,
    causal: bool,
    config: Config | dict | None = None,
) -> tuple[KernelCall, Choice]:
    """The bound portable kernel on [B, S, H, D] views; q, k and v must share strides.

    config: explicit meta-parameters (BLOCK_M, BLOCK_N, USE_DESC, LAZY, num_warps,
    num_stages) instead of tuning (tests use it to cover each code path).
    """
    args, named, grid, candidates = portable_launch(q, k, v, out, causal)
    return tuned_call(
        "attention", _attention_fwd_kernel, views_key(q, out, causal), candidates, grid, args,
        named, q.device, as_config(config),
    )  # fmt: skip


def attention_forward(q, k, v, out, *, causal: bool, config: Config | dict | None = None):
    """Bind and run the fused kernel once on [B, S, H, D] views (see `attention_call`)."""
    attention_call(q, k, v, out, causal=causal, config=config)[0].call()
    return out


def split_heads(
    x: torch.Tensor, heads: int, packed_qkv: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q, k, v as [B, S, H, D] views of x (no copy)."""
    if x.dim() != 3:
        raise Unsupported(f"attention input must be [B, S, E], got shape {tuple(x.shape)}")
    width = x.shape[-1]
    parts = 3 if packed_qkv else 1
    if width % (parts * heads):
        raise Unsupported(f"last dim {width} does not split into {parts} x {heads} heads")
    if packed_qkv:
        qkv = x.unflatten(-1, (3, heads, width // (3 * heads)))
        return qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    q = x.unflatten(-1, (heads, width // heads))
    return q, q, q
