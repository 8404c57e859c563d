"""Rotary position embedding (RoPE) on q/k heads: each pair (x1, x2) of a head at position t
becomes (x1 cos a - x2 sin a, x2 cos a + x1 sin a), a_i = t theta^(-2i/D), i < D/2. Pairs are
(i, i + D/2) in the rotate-half form (Hugging Face) or (2i, 2i + 1) interleaved.

Any layout through strides: the launcher views the input as [B, S, n, D] (batch, position,
head, head dim), and heads at or past `n_rot` are copied unrotated (packed q | k | v: the v
heads). The angles are computed in float32 in the kernel, as Hugging Face computes its
tables, so no cos/sin table is read. Bytes: the input read and the output written once;
3 FLOPs per element plus one sin/cos per pair and program: memory-bound.

One program per (batch x position, block of heads): BLOCK_H heads x D/2 pairs.

With APPEND (a decode step's rope fused with the KV-cache append, packed q | k | v rows): the
q heads go to `out` ([B, S, H D]), the rotated k heads and the v heads straight into the last
S slots of the caches [B, N, Hkv D]: no packed output, no separate append kernel.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from opbench.kernels import Unsupported
from opbench.kernels.host import INTERPRET, cdiv, check_float, next_power_of_2
from opbench.kernels.launch import BoundKernels, tuned_call
from opbench.kernels.tuning import Config


@triton.jit
def _rope_kernel(
    # pointers
    x_ptr,  # [B, S, n, D] input (any strides)
    out_ptr,  # [B, S, n, D] output (any strides); APPEND: [B, S, q_heads, D], q only
    k_ptr,  # APPEND: [B, N, Hkv D] key cache, contiguous rows
    v_ptr,  # APPEND: [B, N, Hkv D] value cache, same layout
    # shapes
    seq,  # S
    heads,  # n: heads in a row (rotated and copied)
    n_rot,  # heads [0, n_rot) are rotated, the rest copied
    half,  # D / 2
    offset,  # position of s = 0
    q_heads,  # APPEND: heads [0, q_heads) are queries, [q_heads, n_rot) keys, the rest values
    kv_len,  # APPEND: N; the S rows go to slots N - S .. N - 1
    # strides (elements)
    sxb, sxs, sxh, sxd,
    sob, sos, soh, sod,
    scb, scs,  # APPEND: the caches' batch and slot strides
    # scalars
    neg_log2_theta_over_half,  # -log2(theta) / (D / 2): inv_freq[i] = 2^(i * this)
    # meta-parameters
    INTERLEAVED: tl.constexpr,  # pairs (2i, 2i + 1), else (i, i + D/2)
    APPEND: tl.constexpr,  # q to out, k and v into the caches
    BLOCK_H: tl.constexpr,  # heads per program
    BLOCK_P: tl.constexpr,  # pairs per head, a power of two >= D/2
):  # fmt: skip
    """Grid (B * S, cdiv(n, BLOCK_H))."""
    row = tl.program_id(0)
    b = row // seq
    s = row % seq
    h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    i = tl.arange(0, BLOCK_P)
    ok = (h[:, None] < heads) & (i[None, :] < half)
    angle = (s + offset).to(tl.float32) * tl.math.exp2(i.to(tl.float32) * neg_log2_theta_over_half)
    cos = tl.cos(angle)[None, :]
    sin = tl.sin(angle)[None, :]
    rotate = (h < n_rot)[:, None]
    cos = tl.where(rotate, cos, 1.0)
    sin = tl.where(rotate, sin, 0.0)
    if INTERLEAVED:
        first, second = 2 * i, 2 * i + 1
    else:
        first, second = i, i + half
    x_row = x_ptr + b.to(tl.int64) * sxb + s.to(tl.int64) * sxs + h[:, None].to(tl.int64) * sxh
    o_row = out_ptr + b.to(tl.int64) * sob + s.to(tl.int64) * sos + h[:, None].to(tl.int64) * soh
    x1 = tl.load(x_row + first[None, :] * sxd, mask=ok, other=0.0).to(tl.float32)
    x2 = tl.load(x_row + second[None, :] * sxd, mask=ok, other=0.0).to(tl.float32)
    ty = out_ptr.dtype.element_ty
    y1, y2 = (x1 * cos - x2 * sin).to(ty), (x2 * cos + x1 * sin).to(ty)
    if APPEND:
        head_dim = 2 * half
        slot = b.to(tl.int64) * scb + (kv_len - seq + s).to(tl.int64) * scs
        is_k = ok & ((h >= q_heads) & (h < n_rot))[:, None]
        at_k = k_ptr + slot + (h - q_heads)[:, None].to(tl.int64) * head_dim
        tl.store(at_k + first[None, :], y1, mask=is_k)
        tl.store(at_k + second[None, :], y2, mask=is_k)
        is_v = ok & (h >= n_rot)[:, None]
        at_v = v_ptr + slot + (h - n_rot)[:, None].to(tl.int64) * head_dim
        tl.store(at_v + first[None, :], y1, mask=is_v)
        tl.store(at_v + second[None, :], y2, mask=is_v)
        ok = ok & (h < q_heads)[:, None]
    tl.store(o_row + first[None, :] * sod, y1, mask=ok)
    tl.store(o_row + second[None, :] * sod, y2, mask=ok)


def _configs(heads: int, pairs: int) -> list[Config]:
    """Up to 4K pairs per program; every head in one program when they fit."""
    most = max(1, min(next_power_of_2(heads), 4096 // pairs))
    if INTERPRET:
        return [Config.of(BLOCK_H=min(most, 4), num_warps=4)]
    sizes = sorted({min(most, h) for h in (1, 2, 4, 8, 16, 32)})
    return [Config.of(BLOCK_H=h, num_warps=w) for h in sizes for w in (2, 4)]


def rows_view(x: torch.Tensor, layout: str, head_dim: int) -> torch.Tensor:
    """x as [B, S, n, D] (a view): bhsd [B, n, S, D] transposed, rows/packed [B, S, n D]
    unflattened."""
    if layout == "bhsd":
        if x.dim() != 4:
            raise Unsupported(f"rope layout bhsd takes [B, n, S, D], got {tuple(x.shape)}")
        return x.transpose(1, 2)
    if x.dim() != 3 or x.shape[-1] % head_dim:
        raise Unsupported(
            f"rope layout {layout} takes [B, S, n x {head_dim}], got {tuple(x.shape)}"
        )
    return x.unflatten(-1, (x.shape[-1] // head_dim, head_dim))


def bind_rope(
    x: torch.Tensor,
    out: torch.Tensor | None = None,
    *,
    layout: str = "bhsd",
    head_dim: int | None = None,
    rotated_heads: int | None = None,
    interleaved: bool = False,
    theta: float = 10000.0,
    offset: int = 0,
    caches: tuple[torch.Tensor, torch.Tensor] | None = None,
    config: Config | None = None,
) -> BoundKernels:
    """RoPE of x in its layout (ops/rope.py), into a new tensor of x's shape (or `out`):
    `head_dim` D (bhsd: x's last dim); `rotated_heads`: the leading heads of a row that turn
    (default all; packed q | k | v: heads + kv_heads). `caches` (k_cache, v_cache), packed
    rows only: the KV-cache append fused in; `out` then holds the q heads alone."""
    check_float(x, "rope")
    d = x.shape[-1] if layout == "bhsd" else head_dim
    if d is None or d % 2:
        raise Unsupported(f"rope needs an even head size, got {d}")
    xv = rows_view(x, layout, d)
    batch, seq, heads, _ = xv.shape
    n_rot = heads if rotated_heads is None else rotated_heads
    q_heads, kv_len, cache_strides = heads, 0, (0, 0)
    k_cache = v_cache = x
    if caches is not None:
        k_cache, v_cache = caches
        q_heads, kv_len = 2 * n_rot - heads, k_cache.shape[1]
        if (layout != "packed" or k_cache.shape != v_cache.shape or k_cache.stride() !=
                v_cache.stride() or k_cache.shape[-1] != (heads - n_rot) * d or
                k_cache.stride(-1) != 1 or seq > kv_len or k_cache.dtype != x.dtype):  # fmt: skip
            raise Unsupported("rope's cache append takes packed rows and caches "
                              f"[B, N, {heads - n_rot} x {d}] with unit column stride")  # fmt: skip
        cache_strides = (k_cache.stride(0), k_cache.stride(1))
    shape = (*x.shape[:-1], q_heads * d) if caches is not None else tuple(x.shape)
    out = torch.empty(shape, dtype=x.dtype, device=x.device) if out is None else out
    if tuple(out.shape) != shape or out.dtype != x.dtype:
        raise ValueError(f"out must be {shape} {x.dtype}")
    ov = rows_view(out, "rows" if caches is not None else layout, d)
    if xv.numel() == 0:
        return BoundKernels.of([], out)
    half = d // 2
    pairs = next_power_of_2(half)
    call, choice = tuned_call(
        "rope", _rope_kernel,
        f"{x.dtype}|{tuple(xv.shape)}|{xv.stride()}|{ov.stride()}|{n_rot}|{caches is not None}",
        _configs(heads, pairs), lambda cfg: (batch * seq, cdiv(heads, cfg["BLOCK_H"])),
        (x, out, k_cache, v_cache, seq, heads, n_rot, half, offset, q_heads, kv_len,
         *xv.stride(), *ov.stride(), *cache_strides, -math.log2(theta) / half),
        {"INTERLEAVED": interleaved, "APPEND": caches is not None, "BLOCK_P": pairs},
        x.device, config,
    )  # fmt: skip
    return BoundKernels.of([call], out, [choice], keep=list(caches or ()))


def rope(x: torch.Tensor, **kwargs) -> torch.Tensor:
    """RoPE of x, launched once."""
    return bind_rope(x, **kwargs).launch()
