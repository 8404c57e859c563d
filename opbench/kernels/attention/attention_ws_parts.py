"""Named groups of the warp-specialized attention's values (Gluon aggregates), so that its key
step and key loop (attention_ws_step.py) take a few named structures instead of thirty
positional values. An aggregate flattens to its fields when it crosses a call, so the compiled
kernel is the same as with the fields passed one by one. Into gl.warp_specialize's worker
partitions the flattened order is the order of their arguments in shared memory, which shows
in the SASS (attention_ws_kernel.py keeps the order the kernel had).

No `from __future__ import annotations` here: an aggregate checks its fields' types (the
annotations) when they are set.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.language.core import _aggregate

# `gl.aggregate` where Triton exports it; Triton 3.6's own Gluon modules use the private name.
aggregate = getattr(gl, "aggregate", None) or _aggregate
# A launch-time integer equal to 1 is specialized into a constexpr.
INT = (gl.tensor, gl.constexpr)


@aggregate
class KeyRing:
    """What a consumer's key loop reads in shared memory: the K and V rings, its P buffers (two
    per consumer; unread when P stays in registers), the rings' ready and empty mbarriers and
    the two consumers' turns."""

    k_smem: gl.shared_memory_descriptor
    v_smem: gl.shared_memory_descriptor
    p_smem: gl.shared_memory_descriptor
    k_ready: gl.shared_memory_descriptor
    k_empty: gl.shared_memory_descriptor
    v_ready: gl.shared_memory_descriptor
    v_empty: gl.shared_memory_descriptor
    turns: gl.shared_memory_descriptor

    @gluon.constexpr_function
    def __init__(self, k_smem, v_smem, p_smem, k_ready, k_empty, v_ready, v_empty, turns):
        self.k_smem = k_smem
        self.v_smem = v_smem
        self.p_smem = p_smem
        self.k_ready = k_ready
        self.k_empty = k_empty
        self.v_ready = v_ready
        self.v_empty = v_empty
        self.turns = turns


@aggregate
class QueryRows:
    """A consumer's query rows as the softmax's mask sees them: the first key block the mask
    touches, the rows' offsets and the sequence length."""

    mask_from: INT
    offs_m: gl.tensor
    seq_len: INT

    @gluon.constexpr_function
    def __init__(self, mask_from, offs_m, seq_len):
        self.mask_from = mask_from
        self.offs_m = offs_m
        self.seq_len = seq_len


@aggregate
class StepShape:
    """The key step's compile-time choices: the PV MMA's A-operand dtype, the S and O
    accumulator layouts, and the tile's constexprs (QUANT: attention_ws_step.NO_QUANT,
    FP8_QUANT or INT8_QK)."""

    dtype: gl.constexpr
    s_layout: gl.constexpr
    o_layout: gl.constexpr
    CAUSAL: gl.constexpr
    BLOCK_N: gl.constexpr
    STAGES: gl.constexpr
    PINGPONG: gl.constexpr
    P_REGS: gl.constexpr
    QUANT: gl.constexpr

    @gluon.constexpr_function
    def __init__(self, dtype, s_layout, o_layout, CAUSAL, BLOCK_N, STAGES, PINGPONG, P_REGS,
                 QUANT):  # fmt: skip
        self.dtype = gl.constexpr(dtype)
        self.s_layout = gl.constexpr(s_layout)
        self.o_layout = gl.constexpr(o_layout)
        self.CAUSAL = gl.constexpr(CAUSAL)
        self.BLOCK_N = gl.constexpr(BLOCK_N)
        self.STAGES = gl.constexpr(STAGES)
        self.PINGPONG = gl.constexpr(PINGPONG)
        self.P_REGS = gl.constexpr(P_REGS)
        self.QUANT = gl.constexpr(QUANT)


@aggregate
class WsTile:
    """The launch's compile-time choices, read by every partition: the head dim, the causal
    mask, keys per block, the rings' depth, ping-pong turns, P in registers, and the operand
    format QUANT (attention_ws_step.NO_QUANT, FP8_QUANT or INT8_QK)."""

    HEAD_DIM: gl.constexpr
    CAUSAL: gl.constexpr
    BLOCK_N: gl.constexpr
    STAGES: gl.constexpr
    PINGPONG: gl.constexpr
    P_REGS: gl.constexpr
    QUANT: gl.constexpr

    @gluon.constexpr_function
    def __init__(self, HEAD_DIM, CAUSAL, BLOCK_N, STAGES, PINGPONG, P_REGS, QUANT):
        self.HEAD_DIM = gl.constexpr(HEAD_DIM)
        self.CAUSAL = gl.constexpr(CAUSAL)
        self.BLOCK_N = gl.constexpr(BLOCK_N)
        self.STAGES = gl.constexpr(STAGES)
        self.PINGPONG = gl.constexpr(PINGPONG)
        self.P_REGS = gl.constexpr(P_REGS)
        self.QUANT = gl.constexpr(QUANT)


@aggregate
class CtaRows:
    """The CTA's query rows and the keys its consumers walk (`_cta_start`): the sequence
    length, its first row start_m, mask_end (the first key block past the last full one) and
    the number of key blocks. (Field order: see attention_ws_kernel's warp_specialize.)"""

    seq_len: INT
    start_m: INT
    mask_end: INT
    num_blocks: INT

    @gluon.constexpr_function
    def __init__(self, seq_len, start_m, mask_end, num_blocks):
        self.seq_len = seq_len
        self.start_m = start_m
        self.mask_end = mask_end
        self.num_blocks = num_blocks


@aggregate
class OutputRows:
    """Where a consumer's finished rows go: the output pointer, the head's offset in it and the
    output's row stride."""

    out_ptr: gl.tensor
    out_base: gl.tensor
    stride_os: INT

    @gluon.constexpr_function
    def __init__(self, out_ptr, out_base, stride_os):
        self.out_ptr = out_ptr
        self.out_base = out_base
        self.stride_os = stride_os


@aggregate
class LoadOrigins:
    """Where the producer's TMA loads start in the descriptors' matrices: the CTA's first Q
    tile at (q_row, q_col), key block 0 at (k_row, k_col) and its values at (v_row, v_col);
    each later block is BLOCK_N rows further (values stored transposed: columns)."""

    q_row: INT
    q_col: INT
    k_row: INT
    k_col: INT
    v_row: INT
    v_col: INT

    @gluon.constexpr_function
    def __init__(self, q_row, q_col, k_row, k_col, v_row, v_col):
        self.q_row = q_row
        self.q_col = q_col
        self.k_row = k_row
        self.k_col = k_col
        self.v_row = v_row
        self.v_col = v_col
