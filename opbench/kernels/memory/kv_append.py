"""KV-cache append: the k and v of S new tokens, read from the packed q | k | v rows of a
projection [B, S, (H + 2 Hkv) D], written into the last S slots of the caches
k_cache, v_cache [B, N, Hkv D] (a decode step's StaticCache update: the slots before hold the
past). A copy: bytes = 2 x 2 B S Hkv D element size, no FLOPs.

One program per (batch x new token, k or v): the Hkv D values of one row, BLOCK at a time.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from opbench.kernels import Unsupported
from opbench.kernels.host import INTERPRET, next_power_of_2
from opbench.kernels.launch import KernelCall


@triton.jit
def _kv_append_kernel(
    # pointers
    x_ptr,  # [B, S, W] packed rows, k at column k_col, v at k_col + width
    k_ptr,  # [B, N, width] key cache
    v_ptr,  # [B, N, width] value cache
    # shapes
    seq,  # S new tokens, written to slots N - S .. N - 1
    kv_len,  # N
    width,  # Hkv D
    k_col,  # H D: where k starts in a packed row
    # strides (elements)
    stride_xb, stride_xs,
    stride_cb, stride_cs,  # of both caches
    # meta-parameters
    BLOCK: tl.constexpr,  # values per step, a power of two
):  # fmt: skip
    """Grid (B * S, 2): axis 1 picks the cache (0: k, 1: v)."""
    row = tl.program_id(0)
    b = row // seq
    s = row % seq
    which = tl.program_id(1)
    src = x_ptr + b.to(tl.int64) * stride_xb + s.to(tl.int64) * stride_xs + k_col + which * width
    slot = (kv_len - seq + s).to(tl.int64)
    offset = b.to(tl.int64) * stride_cb + slot * stride_cs
    for start in range(0, width, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        ok = cols < width
        values = tl.load(src + cols, mask=ok)
        if which == 0:
            tl.store(k_ptr + offset + cols, values, mask=ok)
        else:
            tl.store(v_ptr + offset + cols, values, mask=ok)


def kv_append_call(
    x: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, heads: int
) -> KernelCall:
    """The bound launch writing x's new k and v ([B, S, (heads + 2 Hkv) D]) into the caches'
    last S slots."""
    if k_cache.shape != v_cache.shape or k_cache.stride() != v_cache.stride():
        raise Unsupported("k_cache and v_cache must have one shape and one layout")
    batch, seq, total = x.shape
    kv_len, width = k_cache.shape[1], k_cache.shape[2]
    if k_cache.shape[0] != batch or total <= 2 * width or (total - 2 * width) % heads:
        raise Unsupported(f"x {tuple(x.shape)} does not hold k and v for a cache "
                          f"{tuple(k_cache.shape)}")  # fmt: skip
    if seq > kv_len or x.stride(2) != 1 or k_cache.stride(2) != 1 or x.dtype != k_cache.dtype:
        raise Unsupported("kv append needs S <= N, unit column strides and one dtype")
    block = min(next_power_of_2(width), 256 if INTERPRET else 2048)
    return KernelCall(
        _kv_append_kernel, (batch * seq, 2),
        (x, k_cache, v_cache, seq, kv_len, width, total - 2 * width,
         x.stride(0), x.stride(1), k_cache.stride(0), k_cache.stride(1)),
        {"BLOCK": block}, {"num_warps": 4, "num_stages": 1},
    )  # fmt: skip
