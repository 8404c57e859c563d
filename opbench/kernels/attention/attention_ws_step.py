"""The pieces of the warp-specialized Hopper attention kernel (attention_ws_kernel.py, one kernel
for fp16/bf16, e4m3 and int8 Q K^T by its QUANT constexpr): the CTA's
shape and register split, the producer warp that streams Q, K and V by TMA into the rings,
the ping-pong turns of the two consumer warpgroups, a consumer's Q tile quantized in shared
memory, P as the PV MMA's A operand (from registers or staged in shared memory), one key step
of a consumer, and the mbarriers. The kernel's schedule is described in its module's
docstring; its launchers are attention_ws.py.

Compiled only for compute capability 9.x (Gluon has no interpreter path).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from opbench.kernels.attention.attention_hopper import _softmax_block
from opbench.kernels.attention.attention_ws_parts import (
    KeyRing,
    LoadOrigins,
    OutputRows,
    QueryRows,
    StepShape,
)
from opbench.kernels.hopper import cta_barrier, pass_turn, take_turn, tma_load
from opbench.kernels.host import cdiv
from opbench.kernels.launch import KernelCall
from opbench.kernels.tuning import Config

# What the key step's operands are (its QUANT argument): fp16/bf16 throughout; e4m3 throughout
# (FP8_QUANT); int8 Q and K with int32 scores, P and V in the input's 16-bit dtype
# (INT8_QK). The quantized two scale the scores by q_scale times the key block's
# scale (one per 128 keys).
NO_QUANT = gl.constexpr(0)
FP8_QUANT = gl.constexpr(1)
INT8_QK = gl.constexpr(2)
# 0x4B400000 read as fp32 is 1.5 * 2^23: an int32 |x| < 2^22 added to these bits reads as the
# float 1.5 * 2^23 + x exactly (attention_int8's module docstring): an integer add, on a pipe
# faster than the conversion instruction's (I2F); `_softmax_block_int32` takes the shift off.
MAGIC_BITS = gl.constexpr(0x4B400000)
MAGIC_FLOAT = gl.constexpr(12582912.0)

WG_M = gl.constexpr(64)  # query rows per consumer warpgroup (one m64 wgmma row block)
CTA_M = gl.constexpr(128)
# Registers per thread: the second consumer and the producer (1 warp, in a warpgroup of its
# own); the default partition (first consumer) gets what maxnreg leaves. 12 warps in all
# (4 + 4 + the producer's group): 65536 / 384 = 170 -> maxnreg 168, and 168 * 384 =
# 64512 = 240 * 128 * 2 + 24 * 128.
CONSUMER_REGS = gl.constexpr(240)
PRODUCER_REGS = gl.constexpr(24)
MAXNREG = 168


@gluon.jit
def _ws_producer(q_desc, k_desc, v_desc, q_smem, q_bars, ring: KeyRing, at: LoadOrigins,
                 num_blocks, BLOCK_N, STAGES, V_T):  # fmt: skip
    """One warp: both Q tiles (rows at.q_row, at.q_row + WG_M) and K_0, then per block i:
    K_{i+1} and V_i, each into slot i % STAGES of its ring once both consumers released that
    slot's previous block (a fresh mbarrier passes a wait on parity 1). K runs one block ahead
    of V because the consumers need K_{i+1} and V_i in the same step (and release K sooner).
    Key block i is at (k_row + i BLOCK_N, k_col); its values at (v_row + i BLOCK_N, v_col),
    or with V_T (values stored transposed, keys along columns) at (v_row, v_col + i BLOCK_N).
    BLOCK_N, STAGES and V_T arrive as run-time values (see the kernel's `producer_args`)."""
    for w in gl.static_range(2):
        mbarrier.expect(q_bars.index(w), q_desc.block_type.nbytes)
        tma_load(q_desc, [at.q_row + w * WG_M, at.q_col], q_bars.index(w), q_smem.index(w))
    _load_kv(k_desc, ring.k_smem, ring.k_ready, ring.k_empty, 0, at.k_row, at.k_col, STAGES)
    for i in range(num_blocks):
        if i + 1 < num_blocks:
            row = at.k_row + (i + 1) * BLOCK_N
            _load_kv(k_desc, ring.k_smem, ring.k_ready, ring.k_empty, i + 1, row, at.k_col, STAGES)
        if V_T:
            col = at.v_col + i * BLOCK_N
            _load_kv(v_desc, ring.v_smem, ring.v_ready, ring.v_empty, i, at.v_row, col, STAGES)
        else:
            row = at.v_row + i * BLOCK_N
            _load_kv(v_desc, ring.v_smem, ring.v_ready, ring.v_empty, i, row, at.v_col, STAGES)


@gluon.jit
def _load_kv(desc, smem, ready, empty, i, row, col, STAGES: gl.constexpr):
    """Block i's tile at (row, col) into slot i % STAGES once that slot is free."""
    slot = i % STAGES
    mbarrier.wait(empty.index(slot), ((i // STAGES) & 1) ^ 1)
    mbarrier.expect(ready.index(slot), desc.block_type.nbytes)
    tma_load(desc, [row, col], ready.index(slot), smem.index(slot))


@gluon.jit
def _stage_p(p, p_buffer):
    """P_j into shared memory as the PV MMA's A operand (two buffers per consumer, so P_{j+1}
    is written while P_j V_j runs); the barrier spans this consumer's warps only."""
    p_buffer.store(p.to(p_buffer.dtype))
    fence_async_shared()
    cta_barrier()
    return p_buffer


@gluon.jit
def _p_operand(p, p_smem, index, dtype: gl.constexpr, o_layout: gl.constexpr,
               P_REGS: gl.constexpr):  # fmt: skip
    """P as the PV MMA's A operand: with P_REGS a register tensor in the wgmma A-operand
    layout of the PV MMA (k_width = 32 bits / element bits), else staged in shared memory
    buffer `index` (`_stage_p`)."""
    if P_REGS:
        p_layout: gl.constexpr = gl.DotOperandLayout(
            operand_index=0, parent=o_layout, k_width=32 // dtype.primitive_bitwidth
        )
        return gl.convert_layout(p.to(dtype), p_layout)
    else:
        return _stage_p(p, p_smem.index(index))


@gluon.jit
def _finish_step(p, acc_tok, p_op, p_smem, index, dtype: gl.constexpr, o_layout: gl.constexpr,
                 P_REGS: gl.constexpr):  # fmt: skip
    """End of a key step, after block j + 1's softmax: wait for P_j V_j and make P_{j+1}.
    From shared memory, P_{j+1} goes to the other buffer before the wait (a P write after the
    PV wait made ptxas hoist the wait above the softmax). From registers, P_{j+1} is made
    after the wait, as FlashAttention-3 does: the running MMA reads P_j's registers, which
    stay live until the wait (a dependency of it); the softmax itself wrote only fp32
    registers, so it still runs under P_j V_j."""
    if P_REGS:
        if dtype.primitive_bitwidth == 8:
            # Triton 3.6 rejects 8-bit dependencies of the wait (WGMMAWaitGroupOp); ptxas
            # still keeps registers that an MMA in flight reads (its own hazard tracking),
            # and the GPU checks compare every fp8 tile with float64.
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc_tok,))
        else:
            acc, p_op = warpgroup_mma_wait(num_outstanding=0, deps=(acc_tok, p_op))
        p_op = _p_operand(p, p_smem, index, dtype, o_layout, P_REGS)
    else:
        p_op = _p_operand(p, p_smem, index, dtype, o_layout, P_REGS)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc_tok,))
    return acc, p_op


@gluon.jit
def _softmax_block_int32(s, m_i, l_i, index, mask_from, offs_m, seq_len, scale,
                         CAUSAL: gl.constexpr, BLOCK_N: gl.constexpr,
                         s_layout: gl.constexpr):  # fmt: skip
    """`_softmax_block` on int32 scores s (|s| <= 127^2 D < 2^22 for D <= 256) scaled by
    `scale`: s + MAGIC_BITS read as fp32 is MAGIC_FLOAT + s exactly, so the scaled scores
    carry one shift off = MAGIC_FLOAT scale for the whole block. The running max enters in
    that shifted frame (m + off) and leaves it (m_new - off): two adds per row, where taking
    the shift off each score would cost a float add per score. (The shift's rounding moves
    m by ~1e-7 of off, the same for p and alpha within the block.)"""
    off = MAGIC_FLOAT * scale
    p, alpha, m_new, l_i = _softmax_block((s + MAGIC_BITS).to(gl.float32, bitcast=True),
                                          m_i + off, l_i, index, mask_from, offs_m, seq_len,
                                          scale, CAUSAL, BLOCK_N, s_layout)  # fmt: skip
    return p, alpha, m_new - off, l_i


@gluon.jit
def _quantize_q(q_tile, q8_tile, m0, seq_len, qk_scale, HEAD_DIM: gl.constexpr,
                INT8: gl.constexpr):  # fmt: skip
    """q_tile (fp16/bf16, shared) * qk_scale -> q8_tile (shared; e4m3, or with INT8 int8 by
    the int8 rule of kernels/device.py: 127 steps of the tile's max |q|, ties away from zero);
    returns its scale. One scale per 64-row tile; rows past the sequence count as zero."""
    layout: gl.constexpr = gl.BlockedLayout(
        [1, 8], [32 // (HEAD_DIM // 8), HEAD_DIM // 8], [4, 1], [1, 0]
    )
    rows = m0 + gl.arange(0, WG_M, layout=gl.SliceLayout(1, layout))
    q = q_tile.load(layout).to(gl.float32) * qk_scale
    q = gl.where(rows[:, None] < seq_len, q, 0.0)
    q_amax = gl.maximum(gl.max(gl.max(gl.abs(q), 1), 0), 1e-12)
    if INT8:
        # |q| * 127 / amax <= 127 (no clamp needed); float -> int conversion truncates.
        q = q * (127.0 / q_amax)
        q8_tile.store(gl.where(q >= 0, q + 0.5, q - 0.5).to(gl.int8))
    else:
        q8_tile.store((q * (448.0 / q_amax)).to(q8_tile.dtype))
    fence_async_shared()
    cta_barrier()
    if INT8:
        q_scale = q_amax / 127.0
    else:
        q_scale = q_amax / 448.0
    return q_scale


@gluon.jit
def _ws_step(j, acc, p_op, alpha, m_i, l_i, wg: gl.constexpr, q_tile, ring: KeyRing, zero_s,
             rows: QueryRows, qk_scale, q_scale, k_scale_ptr, shape: StepShape):  # fmt: skip
    """One key step of a consumer. Entering: P_j (p_op) and alpha_j from block j's softmax, O
    complete through block j - 1. Issues S_{j+1} = Q K_{j+1}^T and O = alpha_j O + P_j V_j,
    runs block j + 1's softmax while P_j V_j is in flight, and returns O through block j and
    P_{j+1}, alpha_{j+1}, m, l. shape.QUANT (see NO_QUANT): with FP8_QUANT e4m3 operands,
    values stored transposed, P as 448 p; with INT8_QK int8 Q and K, int32 scores; both scale
    the scores by q_scale times block j + 1's K scale (k_scale_ptr, one per 128 keys);
    otherwise by qk_scale."""
    STAGES: gl.constexpr = shape.STAGES
    BLOCK_N: gl.constexpr = shape.BLOCK_N
    QUANT: gl.constexpr = shape.QUANT
    row_o: gl.constexpr = gl.SliceLayout(1, shape.o_layout)
    nxt = (j + 1) % STAGES
    cur = j % STAGES
    if QUANT != NO_QUANT:
        scale = q_scale * gl.load(k_scale_ptr + (j + 1) // (128 // BLOCK_N))
    else:
        scale = qk_scale
    mbarrier.wait(ring.k_ready.index(nxt), ((j + 1) // STAGES) & 1)
    acc = acc * gl.convert_layout(alpha, row_o)[:, None]
    mbarrier.wait(ring.v_ready.index(cur), (j // STAGES) & 1)
    take_turn(ring.turns, wg, j + 1, shape.PINGPONG)
    s_tok = warpgroup_mma(q_tile, ring.k_smem.index(nxt).permute((1, 0)), zero_s, use_acc=False,
                          is_async=True)  # fmt: skip
    if QUANT == FP8_QUANT:
        acc_tok = warpgroup_mma(p_op, ring.v_smem.index(cur).permute((1, 0)), acc, is_async=True)
    else:
        acc_tok = warpgroup_mma(p_op, ring.v_smem.index(cur), acc, is_async=True)
    pass_turn(ring.turns, wg, shape.PINGPONG)
    # S_{j+1} (the older group) is done; P_j V_j runs on during block j + 1's softmax.
    s = warpgroup_mma_wait(num_outstanding=1, deps=(s_tok,))
    # Release K_{j+1} and V_{j-1} (P_{j-1} V_{j-1} was waited for last step): an arrival
    # right after the PV wait below made ptxas hoist that wait above the softmax.
    mbarrier.arrive(ring.k_empty.index(nxt), count=1)
    mbarrier.arrive(ring.v_empty.index((j + STAGES - 1) % STAGES), count=1, pred=j > 0)
    if QUANT == INT8_QK:
        p, alpha, m_i, l_i = _softmax_block_int32(s, m_i, l_i, j + 1, rows.mask_from, rows.offs_m,
                                                  rows.seq_len, scale, shape.CAUSAL, BLOCK_N,
                                                  shape.s_layout)  # fmt: skip
    else:
        p, alpha, m_i, l_i = _softmax_block(s, m_i, l_i, j + 1, rows.mask_from, rows.offs_m,
                                            rows.seq_len, scale, shape.CAUSAL, BLOCK_N,
                                            shape.s_layout)  # fmt: skip
    if QUANT == FP8_QUANT:
        p = p * 448.0
    acc, p_op = _finish_step(p, acc_tok, p_op, ring.p_smem, 2 * wg + (j + 1) % 2, shape.dtype,
                             shape.o_layout, shape.P_REGS)  # fmt: skip
    return acc, p_op, alpha, m_i, l_i


@gluon.jit
def _key_loop(acc, p_op, alpha, m_i, l_i, wg: gl.constexpr, q_tile, ring: KeyRing, zero_s,
              rows: QueryRows, num_blocks, qk_scale, q_scale, k_scale_ptr,
              shape: StepShape):  # fmt: skip
    """A consumer's key loop after block 0's softmax (P_0 in p_op): `_ws_step` for blocks
    1 ... num_blocks - 1, then P V of the last block (`_last_pv`; fp8 values stored
    transposed). Returns O, not yet divided by the row sums, and the row sums l."""
    for j in range(0, num_blocks - 1):
        acc, p_op, alpha, m_i, l_i = _ws_step(j, acc, p_op, alpha, m_i, l_i, wg, q_tile, ring,
                                              zero_s, rows, qk_scale, q_scale, k_scale_ptr,
                                              shape)  # fmt: skip
    acc = _last_pv(acc, p_op, alpha, ring.v_smem, ring.v_ready, ring.v_empty, num_blocks - 1,
                   shape.o_layout, shape.STAGES, shape.QUANT == FP8_QUANT)  # fmt: skip
    return acc, l_i


@gluon.jit
def _ws_barriers(STAGES: gl.constexpr):
    """The warp-specialized kernels' mbarriers, initialized: each consumer's Q tile loaded, the
    consumers' turns, and the K and V rings' ready and empty slots (both consumers release)."""
    bar_layout: gl.constexpr = mbarrier.MBarrierLayout()
    q_bars = gl.allocate_shared_memory(gl.int64, [2, 1], bar_layout)
    turns = gl.allocate_shared_memory(gl.int64, [2, 1], bar_layout)
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], bar_layout)
    k_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], bar_layout)
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], bar_layout)
    v_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], bar_layout)
    for w in gl.static_range(2):
        mbarrier.init(q_bars.index(w), count=1)
        mbarrier.init(turns.index(w), count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(k_empty.index(i), count=2)  # one arrival per consumer
        mbarrier.init(v_empty.index(i), count=2)
    return q_bars, turns, k_ready, k_empty, v_ready, v_empty


@gluon.jit
def _cta_start(seq_len, heads, stride_ob, stride_oh, CAUSAL: gl.constexpr,
               BLOCK_N: gl.constexpr):  # fmt: skip
    """The CTA's (batch, head) program pid_bh, its batch and head, its first query row, the
    key blocks its consumers walk (with CAUSAL up to its last row; longest rows first), the
    first key block past the last full one (mask_end), and the output's offset for its head."""
    num_m_blocks = gl.cdiv(seq_len, CTA_M)
    pid_m = gl.program_id(0)
    if CAUSAL:
        pid_m = num_m_blocks - 1 - pid_m  # longest rows first
    pid_bh = gl.program_id(1)
    batch = pid_bh // heads
    head = pid_bh % heads
    start_m = pid_m * CTA_M
    if CAUSAL:
        num_blocks = gl.cdiv(gl.minimum(start_m + CTA_M, seq_len), BLOCK_N)
    else:
        num_blocks = gl.cdiv(seq_len, BLOCK_N)
    mask_end = (seq_len // BLOCK_N) * BLOCK_N
    out_base = batch.to(gl.int64) * stride_ob + head.to(gl.int64) * stride_oh
    return pid_bh, batch, head, start_m, num_blocks, mask_end, out_base


@gluon.jit
def _first_scores(q_tile, ring: KeyRing, zero_s, wg: gl.constexpr, PINGPONG: gl.constexpr):
    """S_0 = Q K_0^T, issued on this consumer's first turn and waited for; K_0's slot released."""
    mbarrier.wait(ring.k_ready.index(0), 0)
    take_turn(ring.turns, wg, 0, PINGPONG)
    s_tok = warpgroup_mma(q_tile, ring.k_smem.index(0).permute((1, 0)), zero_s, use_acc=False,
                          is_async=True)  # fmt: skip
    pass_turn(ring.turns, wg, PINGPONG)
    s = warpgroup_mma_wait(num_outstanding=0, deps=(s_tok,))
    mbarrier.arrive(ring.k_empty.index(0), count=1)
    return s


@gluon.jit
def _store_rows(result, m0, out: OutputRows, seq_len, o_layout: gl.constexpr,
                HEAD_DIM: gl.constexpr):  # fmt: skip
    """The consumer's finished rows m0 ... m0 + WG_M (result, fp32, O's layout) into the
    output in its dtype; rows past the sequence are not stored."""
    rows = m0 + gl.arange(0, WG_M, layout=gl.SliceLayout(1, o_layout))
    cols = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, o_layout))
    o_ptrs = out.out_ptr + out.out_base + rows[:, None] * out.stride_os + cols[None, :]
    gl.store(o_ptrs, result.to(out.out_ptr.dtype.element_ty), mask=rows[:, None] < seq_len)


@gluon.jit
def _consumer_start(start_m, wg: gl.constexpr, mask_end, s_layout: gl.constexpr,
                    o_layout: gl.constexpr, CAUSAL: gl.constexpr, BLOCK_N: gl.constexpr,
                    HEAD_DIM: gl.constexpr):  # fmt: skip
    """A consumer's first query row m0, the first key block its causal mask touches (mask_end
    without CAUSAL), its query rows' offsets, and the zeroed S operand, O, row max and sum."""
    row_s: gl.constexpr = gl.SliceLayout(1, s_layout)
    m0 = start_m + wg * WG_M
    if CAUSAL:
        mask_from = (m0 // BLOCK_N) * BLOCK_N
    else:
        mask_from = mask_end
    offs_m = m0 + gl.arange(0, WG_M, layout=row_s)
    zero_s = gl.zeros([WG_M, BLOCK_N], gl.float32, layout=s_layout)
    acc = gl.zeros([WG_M, HEAD_DIM], gl.float32, layout=o_layout)
    m_i = gl.full([WG_M], float("-inf"), gl.float32, layout=row_s)
    l_i = gl.zeros([WG_M], gl.float32, layout=row_s)
    return m0, mask_from, offs_m, zero_s, acc, m_i, l_i


@gluon.jit
def _last_pv(acc, p_op, alpha, v_smem, v_ready, v_empty, last, o_layout: gl.constexpr,
             STAGES: gl.constexpr, V_T: gl.constexpr):  # fmt: skip
    """O through the last key block: V_{last-1}'s slot released, alpha applied, P V_last
    (V_T: values stored transposed, as FP8_QUANT keeps them), its slot released."""
    mbarrier.arrive(v_empty.index((last + STAGES - 1) % STAGES), count=1, pred=last > 0)
    acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, o_layout))[:, None]
    mbarrier.wait(v_ready.index(last % STAGES), (last // STAGES) & 1)
    if V_T:
        acc_tok = warpgroup_mma(p_op, v_smem.index(last % STAGES).permute((1, 0)), acc,
                                is_async=True)  # fmt: skip
    else:
        acc_tok = warpgroup_mma(p_op, v_smem.index(last % STAGES), acc, is_async=True)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc_tok,))
    mbarrier.arrive(v_empty.index(last % STAGES), count=1)
    return acc


# ---- host side: the kernel's launch pieces ------------------------------------------
def ws_config(tile: tuple[int, int, bool, bool]) -> dict:
    """A (BLOCK_N, STAGES, PINGPONG, P_REGS) tile as the config that forces it (benchmarks,
    GPU tests), with the launch's warps and registers."""
    block_n, stages, pingpong, p_regs = tile
    return dict(BLOCK_N=block_n, STAGES=stages, PINGPONG=pingpong, P_REGS=p_regs, num_warps=4,
                num_stages=1, maxnreg=MAXNREG)  # fmt: skip


def ws_candidates(kernel: str, tiles: Sequence[tuple[int, int, bool, bool]]) -> list[Config]:
    """The tiles' configs, KERNEL naming the kernel (a tuned choice may hold several kernels'
    candidates)."""
    return [Config.of(KERNEL=kernel, **ws_config(tile)) for tile in tiles]


def ws_kernel_call(kernel, q: torch.Tensor, args: tuple, causal: bool, cfg: Config,
                   quant: int) -> KernelCall:  # fmt: skip
    """`kernel` over q's [B, S, H, D] shape: one CTA per 128 query rows of each (batch, head),
    the tile's constexprs from cfg, QUANT (NO_QUANT, FP8_QUANT, INT8_QK) from `quant`."""
    batch, seq, heads, head_dim = q.shape
    named = dict(HEAD_DIM=head_dim, CAUSAL=causal, BLOCK_N=cfg["BLOCK_N"], STAGES=cfg["STAGES"],
                 PINGPONG=cfg["PINGPONG"], P_REGS=cfg["P_REGS"], QUANT=quant)  # fmt: skip
    return KernelCall(kernel, (cdiv(seq, CTA_M.value), batch * heads), args, named,
                      cfg.options())  # fmt: skip
