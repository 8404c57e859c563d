"""The end of every pointer-storing GEMM of the linear layers (`linear_kernels.py`'s tiled, TMA
and split-K kernels, `linear_stream.py`'s and `linear_stream_q.py`'s weight streams): the
dequantizing epilogue, the split-K reduction, and the rotary position embedding (RoPE) of a
q | k | v projection's output.

Epilogue. y = act(acc * sx[m] * sw[n] + b[n]) (+ residual) in fp32, stored in out's dtype
(`epilogue.store_output`).

RoPE (ROPE 1 or 2; the layer: `linear_rope.RopeLinear`). The rotation of ops/rope.py, applied to
the fp32 tile before its one rounding: for row m at position t = m % rope_seq + rope_offset and
head pair i (angle a_i = t theta^(-2i/D), computed as the rope kernel computes it, in fp32 from
exp2), (x1, x2) becomes (x1 cos a - x2 sin a, x2 cos a + x1 sin a); columns at or past
rope_rotated (the v heads) are stored as they are. Each pair must lie in one tile: the pairs are
made adjacent GEMM columns (2p, 2p + 1), so that any even BLOCK_N holds whole pairs and the split
is within each thread's registers (an MMA accumulator keeps neighbouring columns in one thread,
as SwiGLU's pairs do):
- ROPE 2, interleaved form: the pairs are adjacent already; stored where they are.
- ROPE 1, rotate-half form: W's rows (and the bias) are interleaved per whole head at build
  time, v heads too (row 2i of a head is its row i, row 2i + 1 its row i + D/2), and the pair is
  stored back to columns i and i + D/2 of its head: two stores, each of runs of consecutive
  columns. The columns of a last partial head are in W's order and stored where they are.
"""

from __future__ import annotations

from typing import NamedTuple

import triton
import triton.language as tl
from triton.language.extra.cuda import libdevice

from opbench.kernels.epilogue import store_output
from opbench.kernels.host import INTERPRET

# ROPE codes (the constexpr of the kernels that end here).
ROPE_NONE, ROPE_HALF, ROPE_INTERLEAVED = 0, 1, 2
# cos/sin by the GPU's approximate instructions (_cos_sin); the interpreter has none.
_FAST_SINCOS = tl.constexpr(not INTERPRET)
# The RoPE arguments of a kernel without it (Linear.rope_named).
NO_ROPE = dict(rope_seq=1, rope_offset=0, rope_rotated=0, rope_freq=0.0, ROPE=ROPE_NONE, ROPE_D=2)


class Output(NamedTuple):
    """Where an epilogue stores: y [M, N] by its strides (in elements). Every store and mask
    of the epilogue reads all five, and the residual is laid out by the same strides."""

    ptr: tl.tensor
    M: tl.tensor
    N: tl.tensor
    stride_m: tl.tensor
    stride_n: tl.tensor


class EpilogueInputs(NamedTuple):
    """What the epilogue reads besides the accumulator, each only where its flag says: the
    bias b [N] (HAS_BIAS), the scales sx of the tile's rows (already loaded: [BLOCK_M] fp32)
    and sw [N] (SCALED), and the residual (HAS_RESIDUAL; Output's shape and strides)."""

    bias_ptr: tl.tensor
    row_scale: tl.tensor
    col_scale_ptr: tl.tensor
    res_ptr: tl.tensor


class RopeArgs(NamedTuple):
    """RoPE's runtime scalars (used only if ROPE), from the launch to the rotation: together
    they give a row's position and a pair's angle."""

    seq: tl.tensor  # rows per sequence
    offset: tl.tensor  # position of a sequence's first row
    rotated: tl.tensor  # columns [0, rotated) turn (q and k heads); the rest are stored as is
    freq: tl.tensor  # -log2(theta) / (D / 2): inv_freq[i] = 2^(i * freq)


class SplitK(NamedTuple):
    """A split-K program's share of the reduction (finish_tile): the partial sums' workspace
    [SPLIT_K, M, N], the tiles' arrival counters (int32, zero between launches), this
    program's split and its output tile's counter slot."""

    partial_ptr: tl.tensor
    arrivals_ptr: tl.tensor
    split: tl.tensor
    tile_id: tl.tensor


@triton.jit
def load_row_scale(row_scale_ptr, offs_m, M, SCALED: tl.constexpr):
    """sx for the rows offs_m (int8 and fp8); a dummy the epilogue ignores otherwise."""
    if SCALED:
        row_scale = tl.load(row_scale_ptr + offs_m, mask=offs_m < M, other=0.0)
    else:
        row_scale = tl.zeros_like(offs_m).to(tl.float32)
    return row_scale


@triton.jit
def _cos_sin(angle):
    """cos and sin of fp32 angles (up to ~1e5 rad: positions times frequencies <= 1): reduced
    to [-pi, pi] by a two-part 2 pi (Cody-Waite: k * 6.28125 is exact for k < 2^16, the rest's
    error is ~1e-7 of k), then the hardware's sin.approx/cos.approx (abs error < 1e-6 there).
    libdevice's sinf/cosf carry a Payne-Hanek path for huge arguments whose registers made the
    GEMM's epilogue spill (255 registers, 4 KB of spills at a 128 x 128 tile on sm_90). The
    interpreter has no approx instructions: it takes tl.cos/tl.sin of the same reduced angle."""
    turns = tl.floor(angle * 0.15915494309189535 + 0.5)  # 1 / (2 pi)
    r = angle - turns * 6.28125
    r = r - turns * 0.0019353071795864769  # 2 pi - 6.28125
    if _FAST_SINCOS:
        cos = libdevice.fast_cosf(r)
        sin = libdevice.fast_sinf(r)
    else:
        cos = tl.cos(r)
        sin = tl.sin(r)
    return cos, sin


@triton.jit
def rope_angles(offs_m, pair, rope):
    """cos and sin [rows, pairs] of the angles (m % rope.seq + rope.offset) inv_freq[i], in
    fp32 as the rope kernel (memory/rope.py) computes them."""
    position = (offs_m % rope.seq + rope.offset).to(tl.float32)
    angle = position[:, None] * tl.math.exp2(pair.to(tl.float32) * rope.freq)[None, :]
    return _cos_sin(angle)


@triton.jit
def rope_store(
    y,  # [BLOCK_M, BLOCK_N] fp32: the tile after bias, pairs in adjacent columns
    offs_m,  # [BLOCK_M] rows of the tile
    offs_n,  # [BLOCK_N] GEMM columns of the tile (BLOCK_N even, the tile's first one even)
    out,  # Output
    rope,  # RopeArgs
    ROPE: tl.constexpr,  # ROPE_HALF or ROPE_INTERLEAVED
    ROPE_D: tl.constexpr,  # head size D
):
    """The tile's pairs rotated by their rows' positions and stored (module docstring)."""
    x1, x2 = tl.split(tl.reshape(y, (y.shape[0], y.shape[1] // 2, 2)))
    first, _ = tl.split(tl.reshape(offs_n, (offs_n.shape[0] // 2, 2)))  # 2p: a pair's first
    pair = (first % ROPE_D) // 2  # i, the pair within its head
    turn = (first < rope.rotated)[None, :]
    cos, sin = rope_angles(offs_m, pair, rope)
    cos = tl.where(turn, cos, 1.0)
    sin = tl.where(turn, sin, 0.0)
    y1 = x1 * cos - x2 * sin
    y2 = x2 * cos + x1 * sin
    if ROPE == 1:  # ROPE_HALF: back to columns i and i + D/2 of every whole head
        paired = first < out.N - out.N % ROPE_D
        col1 = tl.where(paired, first - first % ROPE_D + pair, first)
        col2 = tl.where(paired, col1 + ROPE_D // 2, first + 1)
    else:
        col1 = first
        col2 = first + 1
    rows = offs_m.to(tl.int64)[:, None] * out.stride_m
    mask = (offs_m < out.M)[:, None] & (first < out.N)[None, :]
    ty = out.ptr.dtype.element_ty
    tl.store(out.ptr + rows + col1[None, :] * out.stride_n, y1.to(ty), mask=mask)
    tl.store(out.ptr + rows + col2[None, :] * out.stride_n, y2.to(ty), mask=mask)


@triton.jit
def epilogue_store(
    acc,  # [BLOCK_M, BLOCK_N] fp32 or int32 accumulator
    offs_m,  # [BLOCK_M] output rows of this tile
    offs_n,  # [BLOCK_N] output columns of this tile
    out,  # Output: where y goes
    inputs,  # EpilogueInputs: bias, scales and residual
    rope,  # RopeArgs (used only if ROPE)
    SCALED: tl.constexpr,  # dequantize: int8 and fp8 operands, int8 weight-only
    HAS_BIAS: tl.constexpr,
    ACTIVATION: tl.constexpr,
    HAS_RESIDUAL: tl.constexpr,
    ROPE: tl.constexpr,  # ROPE_NONE, ROPE_HALF or ROPE_INTERLEAVED (no activation, residual)
    ROPE_D: tl.constexpr,
):
    """y = act(acc * sx[m] * sw[n] + b[n]) (+ residual), or RoPE of acc + b[n], in fp32,
    stored in out's dtype; rows >= M and columns >= N are dropped by the store mask
    (epilogue.store_output, rope_store)."""
    mask_n = offs_n < out.N
    y = acc.to(tl.float32)
    if SCALED:
        col_scale = tl.load(inputs.col_scale_ptr + offs_n, mask=mask_n, other=0.0)
        y = y * inputs.row_scale[:, None] * col_scale[None, :]
    if HAS_BIAS:
        y += tl.load(inputs.bias_ptr + offs_n, mask=mask_n, other=0.0)[None, :]
    if ROPE != 0:
        rope_store(y, offs_m, offs_n, out, rope, ROPE, ROPE_D)
    else:
        store_output(y, offs_m, offs_n, out.M, out.N, out.ptr, out.stride_m, out.stride_n,
                     inputs.res_ptr, ACTIVATION, HAS_RESIDUAL)  # fmt: skip


@triton.jit
def finish_tile(
    acc,  # [BLOCK_M, BLOCK_N] this program's sum over its share of K
    offs_m,
    offs_n,
    out,  # Output
    inputs,  # EpilogueInputs
    rope,  # RopeArgs (used only if ROPE)
    split_k,  # SplitK: the workspace and this program's place in it (unused when SPLIT_K == 1)
    SPLIT_K: tl.constexpr,
    SCALED: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    ACTIVATION: tl.constexpr,
    HAS_RESIDUAL: tl.constexpr,
    ROPE: tl.constexpr,
    ROPE_D: tl.constexpr,
):
    """The end of a split-K program: with one split, the epilogue; else store the partial sum,
    and the last program of the tile to arrive (an atomic counter) adds every split's partial
    in a fixed order, runs the epilogue and resets the counter for the next launch."""
    if SPLIT_K == 1:
        epilogue_store(acc, offs_m, offs_n, out, inputs, rope,
                       SCALED, HAS_BIAS, ACTIVATION, HAS_RESIDUAL, ROPE, ROPE_D)  # fmt: skip
    else:
        tile_mask = (offs_m[:, None] < out.M) & (offs_n[None, :] < out.N)
        tile_offsets = offs_m.to(tl.int64)[:, None] * out.N + offs_n[None, :]
        my_partial = split_k.partial_ptr + split_k.split * out.M * out.N + tile_offsets
        tl.store(my_partial, acc, mask=tile_mask)
        # Every thread's partial is stored before one thread publishes the arrival (release);
        # the last arrival acquires it and so sees every split's partial.
        tl.debug_barrier()
        arrived = tl.atomic_add(split_k.arrivals_ptr + split_k.tile_id, 1, sem="acq_rel",
                                scope="gpu")  # fmt: skip
        if arrived == SPLIT_K - 1:  # the last to arrive
            total = tl.zeros_like(acc)
            # Fixed order over splits: the fp32 result does not depend on arrival order.
            for s in range(SPLIT_K):
                partial = split_k.partial_ptr + s * out.M * out.N + tile_offsets
                total += tl.load(partial, mask=tile_mask, other=0, volatile=True)
            epilogue_store(total, offs_m, offs_n, out, inputs, rope,
                           SCALED, HAS_BIAS, ACTIVATION, HAS_RESIDUAL, ROPE, ROPE_D)  # fmt: skip
            tl.store(split_k.arrivals_ptr + split_k.tile_id, 0)
