"""Attention over separate K/V (a KV cache, or packed grouped-query heads), split over the keys
(flash-decoding), in portable Triton.

Shapes: q [B, S, H, D], k and v [B, N, Hkv, D] (any strides), H = G Hkv; query head h reads
kv head h // G. Causal queries are the last S of N positions: query i sees keys
j <= i + N - S.

Grouped rows. One program serves one kv head and BLOCK_M "rows", row r = (position r // G,
head kv_head G + r % G): the G query heads that share a kv head sit in one tile, so every
K/V tile read from memory feeds G heads (a decode step with G = 8 reads the cache once, not
8 times) and the tile's M dimension is S G, not S (S = 1 would leave a 16-row tensor-core
tile 1/16 full).

Split-K. A decode step has few rows (B Hkv programs of S G rows), far too few to fill 132
SMs while each walks N keys. So the keys are cut into `splits` chunks of `chunk` keys, one
program per (row block, chunk, batch x kv head). Each writes its unnormalised accumulator
acc_s, running max m_s and sum l_s (base-2 logits, as attention.py) to fp32 workspace; the
combine kernel then computes, per row,
    M = max_s m_s,    o = sum_s 2^(m_s - M) acc_s / sum_s 2^(m_s - M) l_s.
With one split the first kernel writes o itself.

A row may see no key of a chunk (causal: a chunk right of its diagonal); its m stays -inf,
l = 0, and its weight 2^(m_s - M) in the combine is 0. Every row sees at least key 0.

Cost per call (decode, S G small): bytes = 2 B N Hkv D e (the cache, read once) + small
q/out/workspace traffic; FLOPs 4 B H S N D, far below the tensor cores' rate: memory bound.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from opbench.kernels import Unsupported
from opbench.kernels.attention.attention import LOG2E, as_config, check_head_dim
from opbench.kernels.attention.attention_decode_plans import (
    chunk_for,
    rows_per_block,
    tuning_candidates,
)
from opbench.kernels.attention.attention_parts import KeyValues, SoftmaxState, softmax_start
from opbench.kernels.device import dot_operand
from opbench.kernels.host import INTERPRET, cdiv, next_power_of_2
from opbench.kernels.launch import BoundKernels, KernelCall, config_call, sequence
from opbench.kernels.scratch import scratch
from opbench.kernels.tuning import Choice, Config, choose, device_tag

# Splits' partials merged per load by the combine kernel (a [COMBINE_SPLITS, D] fp32 tile).
COMBINE_SPLITS = 32


@triton.jit
def _guarded_update(
    state: SoftmaxState, qk, qk_scale, v, DOT_PRECISION: tl.constexpr, UPCAST_DOT: tl.constexpr
):
    """The online-softmax step of attention.py, for rows that may have seen no key yet
    (m = -inf after a fully masked block): the exponent's reference point is then 0, so
    p = 2^-inf = 0 instead of 2^(-inf + inf) = NaN."""
    acc, m_i, l_i = state
    m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
    m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)
    p = tl.math.exp2(qk * qk_scale - m_ref[:, None])
    alpha = tl.math.exp2(m_i - m_ref)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None]
    p = p.to(v.dtype)
    acc = tl.dot(
        dot_operand(p, UPCAST_DOT), dot_operand(v, UPCAST_DOT), acc, input_precision=DOT_PRECISION
    )
    return SoftmaxState(acc, m_new, l_i)


@triton.jit
def _walk_keys(
    state: SoftmaxState, q, pos, causal_offset, keys: KeyValues, key_mask, lo, hi, qk_scale,
    HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, MASKED: tl.constexpr,
    DOT_PRECISION: tl.constexpr, UPCAST_DOT: tl.constexpr, HAS_MASK: tl.constexpr,
):  # fmt: skip
    """Keys [lo, hi) in BLOCK_N steps against q (rows at positions pos); MASKED steps hide keys
    past N, when causal keys past pos + causal_offset, with HAS_MASK keys whose key_mask is 0."""
    cols = tl.arange(0, HEAD_DIM)
    for start_n in range(lo, hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        offs_n = start_n + tl.arange(0, BLOCK_N)
        k_ptrs = keys.k_base + offs_n[:, None] * keys.stride_ks + cols[None, :] * keys.stride_kd
        v_ptrs = keys.v_base + offs_n[:, None] * keys.stride_vs + cols[None, :] * keys.stride_vd
        if MASKED:
            k = tl.load(k_ptrs, mask=offs_n[:, None] < keys.n_keys, other=0.0)
            v = tl.load(v_ptrs, mask=offs_n[:, None] < keys.n_keys, other=0.0)
        else:
            k = tl.load(k_ptrs)
            v = tl.load(v_ptrs)
        qk = tl.dot(q, tl.trans(dot_operand(k, UPCAST_DOT)), input_precision=DOT_PRECISION)
        if MASKED:
            visible = offs_n[None, :] < keys.n_keys
            if CAUSAL:
                visible = visible & (offs_n[None, :] <= pos[:, None] + causal_offset)
            if HAS_MASK:
                kept = tl.load(key_mask + offs_n, mask=offs_n < keys.n_keys, other=0)
                visible &= kept[None, :] != 0
            qk = tl.where(visible, qk, float("-inf"))
        state = _guarded_update(state, qk, qk_scale, v, DOT_PRECISION, UPCAST_DOT)
    return state


@triton.jit
def _decode_split_kernel(
    # pointers
    q_ptr,  # [B, S, H, D] queries
    k_ptr,  # [B, N, Hkv, D] keys
    v_ptr,  # [B, N, Hkv, D] values
    out_ptr,  # [B, S, H, D] output (written here only when SPLIT is false)
    part_acc_ptr,  # [B * Hkv, splits, R, D] fp32 partial accumulators (SPLIT)
    part_m_ptr,  # [B * Hkv, splits, R] fp32 partial row maxima, base 2 (SPLIT)
    part_l_ptr,  # [B * Hkv, splits, R] fp32 partial row sums (SPLIT)
    mask_ptr,  # [B, N] key padding mask, 0 = hidden (HAS_MASK)
    # shapes
    q_len,  # S
    kv_len,  # N
    kv_heads,  # Hkv
    num_rows,  # R = S * GROUP
    chunk,  # keys per split, a multiple of BLOCK_N
    # strides (elements)
    stride_qb, stride_qs, stride_qh, stride_qd,
    stride_kb, stride_ks, stride_kh, stride_kd,
    stride_vb, stride_vs, stride_vh, stride_vd,
    stride_ob, stride_os, stride_oh, stride_od,
    stride_mb,
    # scalars
    qk_scale,  # log2(e) / sqrt(D)
    # meta-parameters
    HEAD_DIM: tl.constexpr,
    GROUP: tl.constexpr,  # G = H / Hkv
    CAUSAL: tl.constexpr,
    HAS_MASK: tl.constexpr,  # a key padding mask: every key step masked
    SPLIT: tl.constexpr,  # write partials for the combine kernel (else the output)
    DOT_PRECISION: tl.constexpr,
    UPCAST_DOT: tl.constexpr,
    BLOCK_M: tl.constexpr,  # rows per program
    BLOCK_N: tl.constexpr,  # keys per inner step
):  # fmt: skip
    """Grid (cdiv(R, BLOCK_M), splits, B * Hkv)."""
    pid_m = tl.program_id(0)
    pid_s = tl.program_id(1)
    pid_bh = tl.program_id(2)
    batch = pid_bh // kv_heads
    kv_head = pid_bh % kv_heads
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    pos = rows // GROUP
    head = kv_head * GROUP + rows % GROUP
    in_rows = rows < num_rows
    cols = tl.arange(0, HEAD_DIM)

    q_ptrs = (q_ptr + batch.to(tl.int64) * stride_qb + pos[:, None] * stride_qs
              + head[:, None] * stride_qh + cols[None, :] * stride_qd)  # fmt: skip
    q = dot_operand(tl.load(q_ptrs, mask=in_rows[:, None], other=0.0), UPCAST_DOT)
    k_base = k_ptr + batch.to(tl.int64) * stride_kb + kv_head.to(tl.int64) * stride_kh
    v_base = v_ptr + batch.to(tl.int64) * stride_vb + kv_head.to(tl.int64) * stride_vh

    causal_offset = kv_len - q_len
    lo = pid_s * chunk
    hi = tl.minimum(lo + chunk, kv_len)
    full_end = hi
    if CAUSAL:
        first_pos = (pid_m * BLOCK_M) // GROUP
        last_pos = tl.minimum((pid_m * BLOCK_M + BLOCK_M - 1) // GROUP, q_len - 1)
        hi = tl.minimum(hi, last_pos + causal_offset + 1)  # no row of the block sees past it
        full_end = tl.minimum(hi, first_pos + causal_offset + 1)  # every row sees before it
    unmasked_end = lo if HAS_MASK else lo + tl.maximum(full_end - lo, 0) // BLOCK_N * BLOCK_N
    key_mask = mask_ptr + batch.to(tl.int64) * stride_mb

    state = softmax_start(BLOCK_M, HEAD_DIM)
    keys = KeyValues(k_base, stride_ks, stride_kd, None, v_base, stride_vs, stride_vd, None, kv_len)
    state = _walk_keys(
        state, q, pos, causal_offset, keys, key_mask, lo, unmasked_end, qk_scale,
        HEAD_DIM=HEAD_DIM, BLOCK_N=BLOCK_N, CAUSAL=CAUSAL, MASKED=False,
        DOT_PRECISION=DOT_PRECISION, UPCAST_DOT=UPCAST_DOT, HAS_MASK=HAS_MASK,
    )  # fmt: skip
    state = _walk_keys(
        state, q, pos, causal_offset, keys, key_mask, unmasked_end, hi, qk_scale,
        HEAD_DIM=HEAD_DIM, BLOCK_N=BLOCK_N, CAUSAL=CAUSAL, MASKED=True,
        DOT_PRECISION=DOT_PRECISION, UPCAST_DOT=UPCAST_DOT, HAS_MASK=HAS_MASK,
    )  # fmt: skip
    acc, m_i, l_i = state
    if SPLIT:
        part = (pid_bh * tl.num_programs(1) + pid_s).to(tl.int64) * num_rows
        tl.store(part_m_ptr + part + rows, m_i, mask=in_rows)
        tl.store(part_l_ptr + part + rows, l_i, mask=in_rows)
        acc_ptrs = part_acc_ptr + (part + rows[:, None]) * HEAD_DIM + cols[None, :]
        tl.store(acc_ptrs, acc, mask=in_rows[:, None])
    else:
        out = (acc / l_i[:, None]).to(out_ptr.dtype.element_ty)
        o_ptrs = (out_ptr + batch.to(tl.int64) * stride_ob + pos[:, None] * stride_os
                  + head[:, None] * stride_oh + cols[None, :] * stride_od)  # fmt: skip
        tl.store(o_ptrs, out, mask=in_rows[:, None])


@triton.jit
def _decode_combine_kernel(
    # pointers
    part_acc_ptr,  # [B * Hkv, splits, R, D] fp32
    part_m_ptr,  # [B * Hkv, splits, R] fp32
    part_l_ptr,  # [B * Hkv, splits, R] fp32
    out_ptr,  # [B, S, H, D]
    # shapes
    kv_heads,
    num_rows,  # R
    num_splits,
    # strides (elements) of the output
    stride_ob, stride_os, stride_oh, stride_od,
    # meta-parameters
    HEAD_DIM: tl.constexpr,
    GROUP: tl.constexpr,
    SPLIT_TILE: tl.constexpr,  # splits per load
):  # fmt: skip
    """Grid (R, B * Hkv): merge the splits of one row (module docstring), SPLIT_TILE splits'
    partials per load, so a row costs cdiv(splits, SPLIT_TILE) dependent loads, not splits."""
    row = tl.program_id(0)
    pid_bh = tl.program_id(1)
    batch = pid_bh // kv_heads
    kv_head = pid_bh % kv_heads
    cols = tl.arange(0, HEAD_DIM)
    base = pid_bh.to(tl.int64) * num_splits * num_rows + row
    m_all = tl.full([SPLIT_TILE], float("-inf"), dtype=tl.float32)
    for s0 in range(0, num_splits, SPLIT_TILE):
        s = s0 + tl.arange(0, SPLIT_TILE)
        m_s = tl.load(part_m_ptr + base + s * num_rows, mask=s < num_splits, other=float("-inf"))
        m_all = tl.maximum(m_all, m_s)
    m_max = tl.max(m_all, 0)  # finite: every row sees key 0, in split 0
    l_all = tl.zeros([SPLIT_TILE], dtype=tl.float32)
    acc = tl.zeros([SPLIT_TILE, HEAD_DIM], dtype=tl.float32)
    for s0 in range(0, num_splits, SPLIT_TILE):
        s = s0 + tl.arange(0, SPLIT_TILE)
        in_splits = s < num_splits
        m_s = tl.load(part_m_ptr + base + s * num_rows, mask=in_splits, other=float("-inf"))
        l_s = tl.load(part_l_ptr + base + s * num_rows, mask=in_splits, other=0.0)
        weight = tl.math.exp2(m_s - m_max)  # 0 for a split the row saw nothing of
        l_all += weight * l_s
        part = tl.load(part_acc_ptr + (base + s[:, None] * num_rows) * HEAD_DIM + cols[None, :],
                       mask=in_splits[:, None], other=0.0)  # fmt: skip
        acc += weight[:, None] * part
    out = tl.sum(acc, 0) / tl.sum(l_all, 0)
    pos = row // GROUP
    head = kv_head * GROUP + row % GROUP
    o_ptrs = (out_ptr + batch.to(tl.int64) * stride_ob + pos * stride_os + head * stride_oh
              + cols * stride_od)  # fmt: skip
    tl.store(o_ptrs, out.to(out_ptr.dtype.element_ty))


def decode_calls(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    *,
    causal: bool,
    splits: int | None = None,
    config: Config | dict | None = None,
    mask: torch.Tensor | None = None,
) -> tuple[list[KernelCall], Choice, list[torch.Tensor]]:
    """The bound split and combine launches on q, out [B, S, H, D] and k, v [B, N, Hkv, D];
    mask: a [B, N] key padding mask (0 = hidden), every row seeing at least one key.

    Tuned over key tile x split count (both kernels timed); splits: force the split count
    (tests); config: force BLOCK_N, SPLITS and the launch options.
    Returns the calls, the choice and the workspace to keep alive.
    """
    batch, q_len, heads, head_dim = q.shape
    kv_len, kv_heads = k.shape[1], k.shape[2]
    check_head_dim(head_dim, q.dtype)
    if heads % kv_heads or k.shape != v.shape or k.shape[0] != batch or k.shape[3] != head_dim:
        raise Unsupported(f"q {tuple(q.shape)} and k/v {tuple(k.shape)}/{tuple(v.shape)} "
                          "do not make grouped-query attention")  # fmt: skip
    if causal and kv_len < q_len:
        raise Unsupported(f"causal attention needs kv_len >= q_len ({kv_len} < {q_len})")
    group = heads // kv_heads
    num_rows = q_len * group
    block_m = rows_per_block(num_rows)
    row_blocks = cdiv(num_rows, block_m)
    if mask is not None and (tuple(mask.shape) != (batch, kv_len) or mask.stride(1) != 1):
        raise Unsupported(f"the key mask must be [B, N] = [{batch}, {kv_len}] with unit stride")
    named = dict(HEAD_DIM=head_dim, GROUP=group, CAUSAL=causal, HAS_MASK=mask is not None,
                 DOT_PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
                 UPCAST_DOT=INTERPRET and q.dtype == torch.bfloat16, BLOCK_M=block_m)  # fmt: skip
    scale = LOG2E / math.sqrt(head_dim)

    def make(cfg: Config) -> tuple[list[KernelCall], list[torch.Tensor]]:
        n_splits, chunk = chunk_for(kv_len, cfg["SPLITS"])
        split = n_splits > 1
        shape = (batch * kv_heads, n_splits, num_rows) if split else (1,)
        # Written by the split kernel before the combine kernel reads them, in every launch:
        # per-launch scratch (kernels/scratch.py), shared across a forward's groups.
        part_m = scratch(shape, torch.float32, q.device)
        part_l = scratch(shape, torch.float32, q.device)
        part_acc = scratch((*shape, head_dim) if split else (1,), torch.float32, q.device)
        args = (q, k, v, out, part_acc, part_m, part_l, q if mask is None else mask, q_len,
                kv_len, kv_heads, num_rows, chunk, *q.stride(), *k.stride(), *v.stride(),
                *out.stride(), 0 if mask is None else mask.stride(0), scale)  # fmt: skip
        calls = [config_call(_decode_split_kernel, (row_blocks, n_splits, batch * kv_heads),
                             args, {**named, "SPLIT": split}, cfg)]  # fmt: skip
        if split:
            calls.append(KernelCall(
                _decode_combine_kernel, (num_rows, batch * kv_heads),
                (part_acc, part_m, part_l, out, kv_heads, num_rows, n_splits, *out.stride()),
                dict(HEAD_DIM=head_dim, GROUP=group,
                     SPLIT_TILE=min(COMBINE_SPLITS, next_power_of_2(n_splits))),
                {"num_warps": 4, "num_stages": 2},
            ))  # fmt: skip
        return calls, [part_acc, part_m, part_l]

    key = (f"{q.dtype}|q{tuple(q.shape)}|kv{tuple(k.shape)}|{q.stride()}|{k.stride()}|"
           f"{v.stride()}|{out.stride()}|causal{causal}{'' if mask is None else '|mask'}")  # fmt: skip
    candidates = tuning_candidates(tuple(q.shape), tuple(k.shape), q.dtype, q.device)
    if splits is not None:
        candidates = [Config.of(**{**c.kwargs, "SPLITS": splits}, num_warps=c.num_warps,
                                num_stages=c.num_stages) for c in candidates[:1]]  # fmt: skip
    forced = as_config(config)
    if forced is not None:
        if "SPLITS" not in forced.kwargs:
            forced = Config.of(**forced.kwargs, SPLITS=candidates[0]["SPLITS"],
                               num_warps=forced.num_warps, num_stages=forced.num_stages)  # fmt: skip
        choice = Choice("attention_decode", key, device_tag(q.device), forced, "forced")
    else:
        choice = choose("attention_decode", key, candidates, q.device,
                        lambda cfg: sequence(make(cfg)[0], out))  # fmt: skip
    calls, workspace = make(choice.config)
    return calls, choice, workspace


def decode_forward(q, k, v, out, *, causal: bool, splits: int | None = None, config=None):
    """Bind and run once (tests): see `decode_calls`."""
    for call in decode_calls(q, k, v, out, causal=causal, splits=splits, config=config)[0]:
        call.call()
    return out


class CacheAttention:
    """Attention of a query x [B, S, H D] over a cache k, v [B, N, Hkv D] (fixed at build,
    like weights), or of packed grouped heads x [B, S, (H + 2 Hkv) D] when no cache is
    given: `bind(x)` -> BoundKernels, output [B, S, H D] in x's dtype."""

    def __init__(
        self,
        *,
        heads: int,
        kv_heads: int,
        causal: bool,
        k_cache: torch.Tensor | None = None,
        v_cache: torch.Tensor | None = None,
        splits: int | None = None,
    ) -> None:
        if heads < 1 or kv_heads < 1 or heads % kv_heads:
            raise Unsupported(f"heads={heads} is not a multiple of kv_heads={kv_heads}")
        if (k_cache is None) != (v_cache is None):
            raise Unsupported("a KV cache needs both k_cache and v_cache")
        self.heads, self.kv_heads, self.causal, self.splits = heads, kv_heads, causal, splits
        self.k_cache, self.v_cache = k_cache, v_cache

    def __call__(self, x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        return self.bind(x, out).launch()

    def views(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q [B, S, H, D] and k, v [B, N, Hkv, D] as views (no copy)."""
        if x.dim() != 3:
            raise Unsupported(f"attention input must be [B, S, E], got shape {tuple(x.shape)}")
        h, hkv = self.heads, self.kv_heads
        if self.k_cache is None:
            parts = h + 2 * hkv
            if x.shape[-1] % parts:
                raise Unsupported(f"last dim {x.shape[-1]} does not split into {parts} heads")
            d = x.shape[-1] // parts
            q, k, v = x.split([h * d, hkv * d, hkv * d], dim=-1)
            return q.unflatten(-1, (h, d)), k.unflatten(-1, (hkv, d)), v.unflatten(-1, (hkv, d))
        if x.shape[-1] % h:
            raise Unsupported(f"last dim {x.shape[-1]} does not split into {h} heads")
        d = x.shape[-1] // h
        assert self.v_cache is not None
        if self.k_cache.shape[-1] != hkv * d or self.k_cache.dtype != x.dtype:
            raise Unsupported(f"cache {tuple(self.k_cache.shape)} {self.k_cache.dtype} does not "
                              f"hold {hkv} heads of {d} in {x.dtype}")  # fmt: skip
        return (x.unflatten(-1, (h, d)), self.k_cache.unflatten(-1, (hkv, d)),
                self.v_cache.unflatten(-1, (hkv, d)))  # fmt: skip

    def bind(
        self, x: torch.Tensor, out: torch.Tensor | None = None, config: Config | None = None
    ) -> BoundKernels:
        q, k, v = self.views(x)
        batch, seq, heads, head_dim = q.shape
        shape = (batch, seq, heads * head_dim)
        if out is None:
            out = torch.empty(shape, dtype=x.dtype, device=x.device)
        elif out.shape != shape or out.dtype != x.dtype:
            raise ValueError(f"out must be {shape} {x.dtype}")
        out4 = out.unflatten(-1, (heads, head_dim))
        calls, choice, keep = decode_calls(q, k, v, out4, causal=self.causal, splits=self.splits,
                                           config=config)  # fmt: skip
        return BoundKernels.of(calls, out, [choice], keep=[q, k, v, out4, *keep])
