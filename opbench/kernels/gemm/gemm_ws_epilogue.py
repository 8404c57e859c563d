"""The epilogue of the warp-specialized Gluon GEMM (gemm_ws.py), by column halves of a
consumer's tile: the dequantizing epilogue into the shared-memory output tile, and the rotary
position embedding (RoPE) of a q | k | v projection's head.

RoPE (ROPE; the layer: linear_rope.RopeLinear, rotate-half form only). A tile is one head
(BLOCK_N = D) or two (2 D) whose W rows come interleaved by pairs, v heads' too (row 2i is the
head's row i, 2i + 1 its row i + D/2), so the accumulator's adjacent columns are a pair: split within each
thread's registers, the even columns are the heads' first halves and the odd ones their
second. One head: those are the two column halves the TMA stores write. Two heads: each is
split once more by halves (a head each) and the halves of a head joined, the same register
moves as the plain epilogue's split. Each pair turns by its row's angle, computed as the
pointer kernels compute it (linear_epilogue.rope_angles); a v head (at or past rope_rotated)
only takes its bias, its pairs put back in order by the same stores. The bias (in W's row order) is added before the rotation.
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from opbench.kernels.epilogue import apply_activation
from opbench.kernels.gemm.linear_epilogue import rope_angles


@gluon.jit
def epilogue_half(acc, buf, row0, col0, M, N, vectors, SCALED: gl.constexpr,
                  HAS_BIAS: gl.constexpr, ACTIVATION: gl.constexpr,
                  HAS_RESIDUAL: gl.constexpr):  # fmt: skip
    """act(acc sx[m] sw[n] + b[n]) (+ the residual already in `buf`) into `buf`, in fp32
    and then the output's dtype (b, sx and sw: `vectors`, gemm_ws_parts.EpilogueVectors);
    rows and columns past the output are clipped by the TMA store (their values are computed
    from zero operands and masked loads)."""
    layout: gl.constexpr = acc.type.layout
    offs_m = row0 + gl.arange(0, acc.shape[0], layout=gl.SliceLayout(1, layout))
    offs_n = col0 + gl.arange(0, acc.shape[1], layout=gl.SliceLayout(0, layout))
    mask_n = offs_n < N
    y = acc.to(gl.float32)
    if SCALED:
        sx = gl.load(vectors.row_scale_ptr + offs_m, mask=offs_m < M, other=0.0)
        sw = gl.load(vectors.col_scale_ptr + offs_n, mask=mask_n, other=0.0)
        y = y * sx[:, None] * sw[None, :]
    if HAS_BIAS:
        y += gl.load(vectors.bias_ptr + offs_n, mask=mask_n, other=0.0)[None, :]
    y = apply_activation(y, ACTIVATION)
    if HAS_RESIDUAL:
        y += buf.load(layout).to(gl.float32)
    buf.store(y.to(buf.dtype))


@gluon.jit
def rope_halves(acc, row0, col0, N, bias_ptr, rope, HAS_BIAS: gl.constexpr,
                ROPE_D: gl.constexpr):  # fmt: skip
    """The tile's two column halves (fp32), its bias added and its q and k heads rotated by
    `rope` (linear_epilogue.RopeArgs): one head (BLOCK_N = D) or two (BLOCK_N = 2 D, each
    half then one head)."""
    WG_M: gl.constexpr = acc.shape[0]
    HALF_N: gl.constexpr = acc.shape[1] // 2
    HALF_D: gl.constexpr = ROPE_D // 2
    # Column q of x1 / x2: pair i = q % (D/2) of the tile's head q // (D/2).
    x1, x2 = gl.split(acc.reshape([WG_M, HALF_N, 2]))
    layout: gl.constexpr = x1.type.layout
    offs_m = row0 + gl.arange(0, WG_M, layout=gl.SliceLayout(1, layout))
    q = gl.arange(0, HALF_N, layout=gl.SliceLayout(0, layout))
    y1 = x1.to(gl.float32)
    y2 = x2.to(gl.float32)
    if HAS_BIAS:
        cols = col0 + 2 * q
        y1 += gl.load(bias_ptr + cols, mask=cols < N, other=0.0)[None, :]
        y2 += gl.load(bias_ptr + cols + 1, mask=cols + 1 < N, other=0.0)[None, :]
    cos, sin = rope_angles(offs_m, q % HALF_D, rope)
    turn = (col0 + (q // HALF_D) * ROPE_D < rope.rotated)[None, :]
    cos = gl.where(turn, cos, 1.0)
    sin = gl.where(turn, sin, 0.0)
    y1, y2 = y1 * cos - y2 * sin, y2 * cos + y1 * sin
    if HALF_N == HALF_D:
        return y1, y2
    else:
        # Two heads: each half of the tile is one head's first half, then its second.
        a1, b1 = gl.split(y1.reshape([WG_M, 2, HALF_D]).permute((0, 2, 1)))
        a2, b2 = gl.split(y2.reshape([WG_M, 2, HALF_D]).permute((0, 2, 1)))
        lo = gl.join(a1, a2).permute((0, 2, 1)).reshape([WG_M, ROPE_D])
        hi = gl.join(b1, b2).permute((0, 2, 1)).reshape([WG_M, ROPE_D])
        return lo, hi
