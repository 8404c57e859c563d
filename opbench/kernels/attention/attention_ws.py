"""Flash attention forward for Hopper (sm_90) in Gluon, warp-specialized as FlashAttention-3
is: a producer warp streams K/V tiles by TMA into shared-memory rings guarded by mbarriers,
and two consumer warpgroups, each with its own 64-row Q tile, run the asynchronous
warpgroup MMAs and the softmax.

Why (docs/perf/attention.md, 2026-11-25): the single-program Gluon kernel (attention_hopper.py)
refills its K/V slots behind CTA-wide barriers, which lock its two warpgroups in step, and its
warps issue the TMA themselves. Here no consumer waits for the other: a slot is refilled when
both consumers have *arrived* on its "empty" mbarrier (count 2), and the producer waits for
that, not the consumers. Each consumer keeps the intra-warpgroup order of attention_hopper.py:

    S_{j+1} = Q K_{j+1}^T (async);  O *= alpha_j;  O += P_j V_j (async)
    wait S_{j+1} -> release K slot; softmax j+1 (runs under P_j V_j); wait P_j V_j -> release V

With PINGPONG the two consumers take turns to *issue* their pair of MMAs (two "turn"
mbarriers, count 1 each: a consumer waits for its turn, issues, and hands the turn over), so
the tensor cores run one warpgroup's MMAs while the other does its softmax, FA3's ping-pong.

P goes to the PV MMA either through shared memory (two buffers per consumer, a barrier of
that consumer's 4 warps only) or, with P_REGS, from registers (wgmma's A operand may be a
register tensor), a tuning choice (`WS_TILES`). From registers, ptxas places the wait for
P_j V_j above the softmax of block j + 1 (sm_90 SASS, Triton 3.6), which undoes the
overlap within a warpgroup; the other consumer's MMAs still keep the tensor cores busy, and
without the shared-memory round trip a third K/V stage fits at D 128: on an H100 it was the
faster choice at D 128 (docs/perf/attention.md, 2026-11-25 night). The pieces this kernel
shares with the fp8 and int8 ones (attention_ws_fp8.py, attention_ws_int8.py) are in
attention_ws_step.py.

Layout and masking as in attention_hopper.py: q, k, v are [B, S, H, D] views that TMA reads as
[B S, H D] matrices; key rows past a batch's end are masked (-inf), query rows past it are
never stored, and past the last batch TMA reads zeros. A CTA covers 128 query rows (two
consumers x 64); with CAUSAL both consumers walk the key blocks up to the CTA's last row (the
lower consumer's extra keys are masked), so that both take the same number of turns.

Compiled only for compute capability 9.x (Gluon has no interpreter path): CPU tests compile it
for sm_90 (tests/kernels/test_attention_ws.py) and the GPU run checks it against float64.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    mbarrier,
)

from opbench.kernels import Unsupported
from opbench.kernels.attention.attention import LOG2E, as_config, views_key
from opbench.kernels.attention.attention_hopper import (
    _descriptor,
    _softmax_block,
    hopper_usable,
    sm90_launch,
)
from opbench.kernels.attention.attention_ws_step import (
    CONSUMER_REGS,
    NO_QUANT,
    PRODUCER_REGS,
    WG_M,
    _consumer_start,
    _cta_start,
    _first_scores,
    _key_loop,
    _p_operand,
    _store_rows,
    _ws_barriers,
    _ws_producer,
    ws_candidates,
    ws_kernel_call,
)
from opbench.kernels.launch import KernelCall, chosen_call
from opbench.kernels.tuning import Choice, Config


@gluon.jit
def _ws_consumer(wg: gl.constexpr, q_smem, k_smem, v_smem, p_smem, q_bars, k_ready, k_empty, v_ready, v_empty, turns,
                 out_ptr, seq_len, start_m, mask_end, num_blocks, qk_scale, out_base, stride_os,
                 HEAD_DIM: gl.constexpr, CAUSAL: gl.constexpr, BLOCK_N: gl.constexpr,
                 STAGES: gl.constexpr, PINGPONG: gl.constexpr, P_REGS: gl.constexpr):  # fmt: skip
    """Rows start_m + wg WG_M ... of the CTA's Q tile: the key loop, then the store."""
    dtype: gl.constexpr = q_smem.dtype
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_N, 16]
    )
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, HEAD_DIM, 16]
    )
    row_o: gl.constexpr = gl.SliceLayout(1, o_layout)
    m0, mask_from, offs_m, zero_s, acc, m_i, l_i = _consumer_start(
        start_m, wg, mask_end, s_layout, o_layout, CAUSAL, BLOCK_N, HEAD_DIM)  # fmt: skip
    q_tile = q_smem.index(wg)

    mbarrier.wait(q_bars.index(wg), 0)
    s = _first_scores(q_tile, k_smem, k_ready, k_empty, turns, zero_s, wg, PINGPONG)
    p, alpha, m_i, l_i = _softmax_block(s, m_i, l_i, 0, mask_from, offs_m, seq_len, qk_scale,
                                        CAUSAL, BLOCK_N, s_layout)  # fmt: skip
    p16 = _p_operand(p, p_smem, 2 * wg, dtype, o_layout, P_REGS)

    acc, l_i = _key_loop(acc, p16, alpha, m_i, l_i, wg, q_tile, k_smem, v_smem, p_smem, k_ready,
                         k_empty, v_ready, v_empty, turns, zero_s, mask_from, offs_m, seq_len,
                         num_blocks, qk_scale, qk_scale, qk_scale, dtype, s_layout, o_layout,
                         CAUSAL, BLOCK_N, STAGES, PINGPONG, P_REGS, NO_QUANT)  # fmt: skip

    _store_rows(acc / gl.convert_layout(l_i, row_o)[:, None], m0, out_ptr, out_base, stride_os,
                seq_len, o_layout, HEAD_DIM)  # fmt: skip


@gluon.jit
def _attention_ws_kernel(
    q_desc, k_desc, v_desc,  # TMA descriptors over [B S, H D] matrices; Q tiles of WG_M rows
    out_ptr,  # [B, S, H, D] output view
    seq_len, heads,
    stride_ob, stride_os, stride_oh,  # output strides (elements); the last one is 1
    qk_scale,  # log2(e) / sqrt(D)
    HEAD_DIM: gl.constexpr, CAUSAL: gl.constexpr, BLOCK_N: gl.constexpr,
    STAGES: gl.constexpr, PINGPONG: gl.constexpr, P_REGS: gl.constexpr,
):  # fmt: skip
    """Grid (cdiv(S, 128), B * H); num_warps = 4 (the first consumer) plus the workers."""
    dtype: gl.constexpr = q_desc.dtype
    pid_bh, batch, head, start_m, num_blocks, mask_end, out_base = _cta_start(
        seq_len, heads, stride_ob, stride_oh, CAUSAL, BLOCK_N)  # fmt: skip
    row0 = batch * seq_len
    col = head * HEAD_DIM

    q_smem = gl.allocate_shared_memory(dtype, [2, WG_M, HEAD_DIM], q_desc.layout)
    k_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], v_desc.layout)
    if P_REGS:
        p_smem = q_smem  # never read: P stays in registers
    else:  # two P buffers per consumer
        p_smem = gl.allocate_shared_memory(
            dtype, [4, WG_M, BLOCK_N], gl.NVMMASharedLayout.get_default_for([WG_M, BLOCK_N], dtype)
        )
    q_bars, turns, k_ready, k_empty, v_ready, v_empty = _ws_barriers(STAGES)

    producer_args = (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bars, k_ready, k_empty,
                     v_ready, v_empty, row0 + start_m, col, row0, col, row0, col, num_blocks,
                     BLOCK_N, STAGES, False)  # fmt: skip
    gl.warp_specialize(
        [(_ws_consumer, (0, q_smem, k_smem, v_smem, p_smem, q_bars, k_ready, k_empty, v_ready, v_empty,
                         turns, out_ptr, seq_len, start_m, mask_end, num_blocks, qk_scale,
                         out_base, stride_os, HEAD_DIM, CAUSAL, BLOCK_N, STAGES, PINGPONG, P_REGS)),
         (_ws_consumer, (1, q_smem, k_smem, v_smem, p_smem, q_bars, k_ready, k_empty, v_ready, v_empty,
                         turns, out_ptr, seq_len, start_m, mask_end, num_blocks, qk_scale,
                         out_base, stride_os, HEAD_DIM, CAUSAL, BLOCK_N, STAGES, PINGPONG, P_REGS)),
         (_ws_producer, producer_args)],
        [4, 1], [CONSUMER_REGS, PRODUCER_REGS],
    )  # fmt: skip


# (BLOCK_N, STAGES, PINGPONG, P_REGS) per head dim. Shared memory: 2 Q tiles + STAGES K and
# V tiles, + 4 P tiles unless P_REGS (D 128, BLOCK_N 128: 32 + 2 x 2 x 32 + 4 x 16 = 224 KB
# of 227 with P in shared memory; 32 + 3 x 2 x 32 = 224 KB with P in registers and 3
# stages). On an H100 (docs/perf/attention.md, 2026-11-25 evening) BLOCK_N 64 lost to
# BLOCK_N 128 on every shape by 10-25%, and ping-pong on or off each won some shapes.
WS_TILES: dict[int, list[tuple[int, int, bool, bool]]] = {
    64: [(128, 3, True, False), (128, 3, False, False), (128, 3, True, True),
         (128, 3, False, True), (128, 5, True, True), (128, 5, False, True)],
    # P in registers with 3 stages: 598 / 545 TFLOP/s fp16 S 8192 (non-causal / causal) vs
    # 569 / 485 for the best P-in-shared-memory tile, same H100 run (2026-11-25 night); the
    # register tiles with 2 stages were 1-5% behind the best 3-stage one and are dropped.
    128: [(128, 2, True, False), (128, 2, False, False), (128, 3, True, True),
          (128, 3, False, True)],
}  # fmt: skip


def ws_usable(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor) -> bool:
    """Where the Gluon Hopper kernels apply (attention_hopper.hopper_usable), D 64 or 128."""
    return hopper_usable(q, k, v, out) and q.shape[-1] in WS_TILES


def ws_launch(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, causal: bool
) -> tuple[Callable[[Config], KernelCall], list[Config]]:
    """The warp-specialized kernel's KernelCall for a config, and its candidates."""
    batch, seq, heads, head_dim = q.shape
    scale = LOG2E / math.sqrt(head_dim)

    def make(cfg: Config) -> KernelCall:
        bn = cfg["BLOCK_N"]
        args = (_descriptor(q, WG_M.value), _descriptor(k, bn), _descriptor(v, bn), out, seq, heads,
                out.stride(0), out.stride(1), out.stride(2), scale)  # fmt: skip
        return ws_kernel_call(_attention_ws_kernel, q, args, causal, cfg)

    return make, ws_candidates("ws", WS_TILES[head_dim])


def ws_call(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    *,
    causal: bool,
    config: Config | dict | None = None,
) -> tuple[KernelCall, Choice]:
    """The bound warp-specialized kernel alone on [B, S, H, D] views (see `ws_usable`), its
    tile tuned among WS_TILES unless `config` forces one (benchmarks, GPU tests)."""
    if not ws_usable(q, k, v, out):
        raise Unsupported("the warp-specialized attention kernel needs an sm_90 GPU, "
                          "fp16/bf16, D 64/128 and TMA-able views")  # fmt: skip
    make, candidates = ws_launch(q, k, v, out, causal)
    return chosen_call("attention_ws", views_key(q, out, causal), make, candidates, q.device,
                       as_config(config))  # fmt: skip


def tuned_sm90_ws_call(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, *, causal: bool
) -> tuple[KernelCall, Choice]:
    """One tuned choice among this kernel's tiles, the single-program Gluon kernel's and the
    portable kernel's (KERNEL says which), for views `ws_usable` accepts."""
    make_ws, ws_candidates = ws_launch(q, k, v, out, causal)
    make_other, other_candidates = sm90_launch(q, k, v, out, causal)

    def make(cfg: Config) -> KernelCall:
        return make_ws(cfg) if cfg["KERNEL"] == "ws" else make_other(cfg)

    return chosen_call("attention_sm90_ws", views_key(q, out, causal), make,
                       ws_candidates + other_candidates, q.device)  # fmt: skip
