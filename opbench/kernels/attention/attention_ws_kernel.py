"""Flash attention forward for Hopper (sm_90) in Gluon, warp-specialized as FlashAttention-3
is, one kernel for three operand formats (its QUANT constexpr, attention_ws_step.NO_QUANT /
FP8_QUANT / INT8_QK): a producer warp streams K/V tiles by TMA into shared-memory rings
guarded by mbarriers, and two consumer warpgroups, each with its own 64-row Q tile, run the
asynchronous warpgroup MMAs and the softmax.

Why (docs/perf/attention.md, 2026-11-25): the single-program Gluon kernel (attention_hopper.py)
refills its K/V slots behind CTA-wide barriers, which lock its two warpgroups in step, and its
warps issue the TMA themselves. Here no consumer waits for the other: a slot is refilled when
both consumers have *arrived* on its "empty" mbarrier (count 2), and the producer waits for
that, not the consumers. Each consumer keeps the intra-warpgroup order of attention_hopper.py:

    S_{j+1} = Q K_{j+1}^T (async);  O *= alpha_j;  O += P_j V_j (async)
    wait S_{j+1} -> release K slot; softmax j+1 (runs under P_j V_j); wait P_j V_j -> release V

With PINGPONG the two consumers take turns to *issue* their pair of MMAs (kernels/hopper.py's
turns), so the tensor cores run one warpgroup's MMAs while the other does its softmax. P goes
to the PV MMA through shared memory (two buffers per consumer) or, with P_REGS, from
registers; which one wins is a tuning choice (attention_ws.WS_TILES). The shared pieces (the
producer, one key step, the barriers) are in attention_ws_step.py.

The three formats:
- NO_QUANT: fp16/bf16 Q, K, V and P, scores scaled by log2(e)/sqrt(D).
- FP8_QUANT: e4m3 Q, K, V and P on both MMAs (twice fp16's tensor-core rate). K and V come
  quantized by attention_fp8.py's passes (K per 128 keys, V per channel and stored
  transposed, read as [B H D, S_pad]: Hopper's fp8 MMA takes both operands K-major); P as
  448 p; the output is scaled by V's scale / 448.
- INT8_QK: SageAttention's int8 Q K^T (int32 sums; K quantized per 128 keys by
  attention_int8.py's passes), P V in the input's 16-bit dtype: e4m3 P and V would err
  3.5-3.9e-2 against the 3e-2 `quant: int8` promises (docs/perf/attention.md, 2026-11-25 late).
Both quantized formats quantize Q inside each consumer, one scale per 64-row tile, with the
softmax scale folded in, and scale the scores by q_scale times the key block's scale.

Layout and masking as in attention_hopper.py: q (and fp16 k, v) are [B, S, H, D] views that
TMA reads as [B S, H D] matrices; quantized k8 is read as [B H S_pad, D]. Key rows past a
batch's end are masked (-inf), query rows past it are never stored. A CTA covers 128 query
rows (two consumers x 64); with CAUSAL both consumers walk the key blocks up to the CTA's last
row (the lower consumer's extra keys are masked), so that both take the same number of turns.

Compiled only for compute capability 9.x (Gluon has no interpreter path): CPU tests compile it
for sm_90 (tests/kernels/test_attention_ws.py) and the GPU run checks it against float64.
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier

from opbench.kernels.attention.attention_hopper import _softmax_block
from opbench.kernels.attention.attention_ws_parts import (
    CtaRows,
    KeyRing,
    LoadOrigins,
    OutputRows,
    QueryRows,
    StepShape,
    WsTile,
)
from opbench.kernels.attention.attention_ws_step import (
    CONSUMER_REGS,
    FP8_QUANT,
    INT8_QK,
    NO_QUANT,
    PRODUCER_REGS,
    WG_M,
    _consumer_start,
    _cta_start,
    _first_scores,
    _key_loop,
    _p_operand,
    _quantize_q,
    _softmax_block_int32,
    _store_rows,
    _ws_barriers,
    _ws_producer,
)

FP8 = gl.float8e4nv


@gluon.jit
def _ws_consumer(wg: gl.constexpr, q_smem, q8_smem, q_bars, ring: KeyRing, out_ptr, k_scale_ptr,
                 v_scale_ptr, cta: CtaRows, qk_scale, out_base, stride_os,
                 tile: WsTile):  # fmt: skip
    """Rows cta.start_m + wg WG_M ... of the CTA's Q tile: Q quantized (FP8_QUANT, INT8_QK),
    the key loop, then the store at out_ptr + out_base (row stride stride_os). q8_smem,
    k_scale_ptr and v_scale_ptr are None where QUANT has no use for them."""
    HEAD_DIM: gl.constexpr = tile.HEAD_DIM
    CAUSAL: gl.constexpr = tile.CAUSAL
    BLOCK_N: gl.constexpr = tile.BLOCK_N
    QUANT: gl.constexpr = tile.QUANT
    seq_len = cta.seq_len
    dtype: gl.constexpr = q_smem.dtype
    # wgmma's K per instruction: 16 for 16-bit operands, 32 for 8-bit ones.
    if QUANT == NO_QUANT:
        s_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_N, 16]
        )
    else:
        s_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_N, 32]
        )
    if QUANT == FP8_QUANT:
        p_dtype: gl.constexpr = FP8
        o_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, HEAD_DIM, 32]
        )
    else:
        p_dtype: gl.constexpr = dtype
        o_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, HEAD_DIM, 16]
        )
    row_o: gl.constexpr = gl.SliceLayout(1, o_layout)
    m0, mask_from, offs_m, zero_s, acc, m_i, l_i = _consumer_start(
        cta.start_m, wg, cta.mask_end, s_layout, o_layout, CAUSAL, BLOCK_N, HEAD_DIM)  # fmt: skip
    if QUANT == INT8_QK:
        zero_s = gl.zeros([WG_M, BLOCK_N], gl.int32, layout=s_layout)  # int32 scores

    if QUANT == NO_QUANT:
        q_tile = q_smem.index(wg)
        mbarrier.wait(q_bars.index(wg), 0)
        q_scale = qk_scale
        s = _first_scores(q_tile, ring, zero_s, wg, tile.PINGPONG)
        p, alpha, m_i, l_i = _softmax_block(s, m_i, l_i, 0, mask_from, offs_m, seq_len, qk_scale,
                                            CAUSAL, BLOCK_N, s_layout)  # fmt: skip
    else:
        q_tile = q8_smem.index(wg)
        mbarrier.wait(q_bars.index(wg), 0)
        q_scale = _quantize_q(q_smem.index(wg), q_tile, m0, seq_len, qk_scale, HEAD_DIM,
                              QUANT == INT8_QK)  # fmt: skip
        k_scale = gl.load(k_scale_ptr)
        s = _first_scores(q_tile, ring, zero_s, wg, tile.PINGPONG)
        if QUANT == INT8_QK:
            p, alpha, m_i, l_i = _softmax_block_int32(s, m_i, l_i, 0, mask_from, offs_m, seq_len,
                                                      q_scale * k_scale, CAUSAL, BLOCK_N,
                                                      s_layout)  # fmt: skip
        else:
            p, alpha, m_i, l_i = _softmax_block(s, m_i, l_i, 0, mask_from, offs_m, seq_len,
                                                q_scale * k_scale, CAUSAL, BLOCK_N,
                                                s_layout)  # fmt: skip
    if QUANT == FP8_QUANT:
        p = p * 448.0
    p_op = _p_operand(p, ring.p_smem, 2 * wg, p_dtype, o_layout, tile.P_REGS)

    rows = QueryRows(mask_from, offs_m, seq_len)
    shape = StepShape(p_dtype, s_layout, o_layout, CAUSAL, BLOCK_N, tile.STAGES, tile.PINGPONG,
                      tile.P_REGS, QUANT)  # fmt: skip
    acc, l_i = _key_loop(acc, p_op, alpha, m_i, l_i, wg, q_tile, ring, zero_s, rows,
                         cta.num_blocks, qk_scale, q_scale, k_scale_ptr, shape)  # fmt: skip

    if QUANT == FP8_QUANT:
        cols = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, o_layout))
        v_scale = gl.load(v_scale_ptr + cols)
        result = acc * (v_scale / 448.0)[None, :] / gl.convert_layout(l_i, row_o)[:, None]
    else:
        result = acc / gl.convert_layout(l_i, row_o)[:, None]
    _store_rows(result, m0, OutputRows(out_ptr, out_base, stride_os), seq_len, o_layout, HEAD_DIM)


@gluon.jit
def _attention_ws_kernel(
    q_desc,  # TMA over the [B S, H D] fp16/bf16 query matrix; tiles [WG_M, D]
    k_desc,  # TMA over [B S, H D] keys, or quantized k8 as [B H S_pad, D]; tiles [BLOCK_N, D]
    v_desc,  # TMA over [B S, H D] values, or (FP8_QUANT) vt8 as [B H D, S_pad], tiles [D, BLOCK_N]
    k_scale_ptr,  # FP8_QUANT, INT8_QK: [B H, S_pad / 128] fp32; else None
    v_scale_ptr,  # FP8_QUANT: [B H, D] fp32; else None
    out_ptr,  # [B, S, H, D] output view
    seq_len,
    padded_len,  # FP8_QUANT, INT8_QK: S_pad, k8's rows per head; else None
    heads,
    stride_ob, stride_os, stride_oh,  # output strides (elements); the last one is 1
    qk_scale,  # log2(e) / sqrt(D) (quantized: folded into Q before it is quantized)
    HEAD_DIM: gl.constexpr, CAUSAL: gl.constexpr, BLOCK_N: gl.constexpr,
    STAGES: gl.constexpr, PINGPONG: gl.constexpr, P_REGS: gl.constexpr, QUANT: gl.constexpr,
):  # fmt: skip
    """Grid (cdiv(S, 128), B * H); num_warps = 4 (the first consumer) plus the workers. The
    None arguments are constexprs, not parameters: each format's parameter list is the one
    its own kernel had before the three were merged, so each compiles to the same SASS."""
    dtype: gl.constexpr = q_desc.dtype
    pid_bh, batch, head, start_m, num_blocks, mask_end, out_base = _cta_start(
        seq_len, heads, stride_ob, stride_oh, CAUSAL, BLOCK_N)  # fmt: skip
    row0 = batch * seq_len
    col = head * HEAD_DIM
    if QUANT != NO_QUANT:
        k_scale_ptr += pid_bh * (padded_len // 128)
    if QUANT == FP8_QUANT:
        v_scale_ptr += pid_bh * HEAD_DIM

    q_smem = gl.allocate_shared_memory(dtype, [2, WG_M, HEAD_DIM], q_desc.layout)
    if QUANT == NO_QUANT:
        q8_smem: gl.constexpr = None  # a constexpr: a worker partition's arguments take no None
    else:
        q8_smem = gl.allocate_shared_memory(
            k_desc.dtype, [2, WG_M, HEAD_DIM],
            gl.NVMMASharedLayout.get_default_for([WG_M, HEAD_DIM], k_desc.dtype),
        )  # fmt: skip
    k_smem = gl.allocate_shared_memory(k_desc.dtype, [STAGES, BLOCK_N, HEAD_DIM], k_desc.layout)
    if QUANT == FP8_QUANT:
        v_smem = gl.allocate_shared_memory(FP8, [STAGES, HEAD_DIM, BLOCK_N], v_desc.layout)
        p_dtype: gl.constexpr = FP8
    else:
        v_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], v_desc.layout)
        p_dtype: gl.constexpr = dtype
    if P_REGS:  # never read: P stays in registers
        if QUANT == FP8_QUANT:
            p_smem = q8_smem
        else:
            p_smem = q_smem
    else:  # two P buffers per consumer
        p_smem = gl.allocate_shared_memory(
            p_dtype, [4, WG_M, BLOCK_N],
            gl.NVMMASharedLayout.get_default_for([WG_M, BLOCK_N], p_dtype),
        )  # fmt: skip
    q_bars, turns, k_ready, k_empty, v_ready, v_empty = _ws_barriers(STAGES)

    # Where key block 0 and its values start: [B S, H D] rows and columns, or the head's rows
    # of the quantized k8 ([B H S_pad, D]) and vt8 ([B H D, S_pad], keys along columns).
    if QUANT == NO_QUANT:
        k_row, k_col, v_row, v_col = row0, col, row0, col
    elif QUANT == INT8_QK:
        k_row, k_col, v_row, v_col = pid_bh * padded_len, 0, row0, col
    else:
        k_row, k_col, v_row, v_col = pid_bh * padded_len, 0, pid_bh * HEAD_DIM, 0
    ring = KeyRing(k_smem, v_smem, p_smem, k_ready, k_empty, v_ready, v_empty, turns)
    tile = WsTile(HEAD_DIM, CAUSAL, BLOCK_N, STAGES, PINGPONG, P_REGS, QUANT)
    cta = CtaRows(seq_len, start_m, mask_end, num_blocks)
    at = LoadOrigins(row0 + start_m, col, k_row, k_col, v_row, v_col)
    # Bound to a name, a tuple's constexprs become run-time values (Triton's assignment turns
    # ints into tensors): the producer has always received BLOCK_N, STAGES and V_T so, and
    # passing them as constexprs changes the SASS (docs/perf/attention.md, helpers' arguments).
    producer_args = (q_desc, k_desc, v_desc, q_smem, q_bars, ring, at, num_blocks, BLOCK_N, STAGES,
                     QUANT == FP8_QUANT)  # fmt: skip
    # A worker partition's run-time arguments reach it through shared memory, laid out in the
    # order they are passed (aggregates flattened): this order is the one the kernel had with
    # every value passed alone, so the kernel compiles to the same SASS.
    gl.warp_specialize(
        [(_ws_consumer, (0, q_smem, q8_smem, q_bars, ring, out_ptr, k_scale_ptr, v_scale_ptr, cta,
                         qk_scale, out_base, stride_os, tile)),
         (_ws_consumer, (1, q_smem, q8_smem, q_bars, ring, out_ptr, k_scale_ptr, v_scale_ptr, cta,
                         qk_scale, out_base, stride_os, tile)),
         (_ws_producer, producer_args)],
        [4, 1], [CONSUMER_REGS, PRODUCER_REGS],
    )  # fmt: skip
