"""Int8 attention (SageAttention-style, as attention_int8.py) through the warp-specialized
Hopper structure of attention_ws.py: the same producer warp and two consumer warpgroups
(ping-pong optional), with S = Q K^T on the int8 wgmma (int32 sums, twice fp16's tensor-core
rate on Hopper) and P V on the 16-bit one, in the input's dtype.

Quantization is attention_int8.py's (its module docstring; same error model and the 3e-2
tolerance of `quant: int8`): K smoothed (its mean over the sequence subtracted, exact for
softmax) and quantized per KEY_BLOCK keys by `key_quantize_calls`; Q quantized here, inside
each consumer, with one scale per 64-row tile (the consumer's rows; rows past the sequence
count as zero), the softmax scale log2(e)/sqrt(D) folded in first, by the same int8 rule:
the fp16 tile the producer brought is read from shared memory and written back as int8 for
the MMA. The int32 scores become fp32 by an integer add and are scaled by q_scale times the
key block's scale in the softmax (attention_ws_step._softmax_block_int32).

Why P V stays 16-bit (docs/perf/attention.md, 2026-11-25 late; a float64 simulation on
random data with biased keys): int8 Q K^T with fp16 P V errs 1.1-1.3e-2 (relative L2); with
e4m3 P and V (as attention_ws_fp8 runs them) 3.5-3.9e-2, past the 3e-2 that `quant: int8`
promises; with int8 P (127 p, a fixed scale that loses the small probabilities) and V per
channel 1.9-3.0e-2, no margin. So this kernel's MMA floor is 3/4 of the fp16 kernel's (Q K^T
at twice the rate, P V at the same), not 1/2.

TMA reads k8 as the matrix [B H S_pad, D] (key block i of head bh at row bh S_pad + i BLOCK_N)
and q and v as attention_ws.py does ([B S, H D]; V rows past a batch's end meet P = 0).
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
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from opbench.kernels import Unsupported
from opbench.kernels.attention.attention import LOG2E, as_config, views_key
from opbench.kernels.attention.attention_hopper import _descriptor
from opbench.kernels.attention.attention_int8 import KEY_BLOCK, int8_launch
from opbench.kernels.attention.attention_ws import ws_usable
from opbench.kernels.attention.attention_ws_step import (
    CONSUMER_REGS,
    INT8_QK,
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
    ws_candidates,
    ws_kernel_call,
)
from opbench.kernels.launch import KernelCall, by_kernel, quantized_choice
from opbench.kernels.tuning import Choice, Config


@gluon.jit
def _ws_int8_consumer(wg: gl.constexpr, q_smem, q8_smem, k_smem, v_smem, p_smem, q_bars,
                      k_ready, k_empty, v_ready, v_empty, turns, out_ptr, k_scale_ptr, seq_len,
                      start_m, mask_end, num_blocks, qk_scale, out_base, stride_os,
                      HEAD_DIM: gl.constexpr, CAUSAL: gl.constexpr, BLOCK_N: gl.constexpr,
                      STAGES: gl.constexpr, PINGPONG: gl.constexpr,
                      P_REGS: gl.constexpr):  # fmt: skip
    """attention_ws._ws_consumer's key loop (its `_ws_step`, INT8_QK) on int8 Q and K with the
    per-block K scale, P V in the input's dtype; P in registers (P_REGS) or shared memory."""
    dtype: gl.constexpr = q_smem.dtype
    # int8 wgmma: K = 32 per instruction; the 16-bit P V MMA: K = 16.
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_N, 32]
    )
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, HEAD_DIM, 16]
    )
    row_o: gl.constexpr = gl.SliceLayout(1, o_layout)
    m0, mask_from, offs_m, _, acc, m_i, l_i = _consumer_start(
        start_m, wg, mask_end, s_layout, o_layout, CAUSAL, BLOCK_N, HEAD_DIM)  # fmt: skip
    zero_s = gl.zeros([WG_M, BLOCK_N], gl.int32, layout=s_layout)
    q8 = q8_smem.index(wg)

    mbarrier.wait(q_bars.index(wg), 0)
    q_scale = _quantize_q(q_smem.index(wg), q8, m0, seq_len, qk_scale, HEAD_DIM, True)
    k_scale = gl.load(k_scale_ptr)
    s = _first_scores(q8, k_smem, k_ready, k_empty, turns, zero_s, wg, PINGPONG)
    p, alpha, m_i, l_i = _softmax_block_int32(s, m_i, l_i, 0, mask_from, offs_m, seq_len,
                                              q_scale * k_scale, CAUSAL, BLOCK_N,
                                              s_layout)  # fmt: skip
    p16 = _p_operand(p, p_smem, 2 * wg, dtype, o_layout, P_REGS)

    acc, l_i = _key_loop(acc, p16, alpha, m_i, l_i, wg, q8, k_smem, v_smem, p_smem, k_ready,
                         k_empty, v_ready, v_empty, turns, zero_s, mask_from, offs_m, seq_len,
                         num_blocks, qk_scale, q_scale, k_scale_ptr, dtype, s_layout, o_layout,
                         CAUSAL, BLOCK_N, STAGES, PINGPONG, P_REGS, INT8_QK)  # fmt: skip

    _store_rows(acc / gl.convert_layout(l_i, row_o)[:, None], m0, out_ptr, out_base, stride_os,
                seq_len, o_layout, HEAD_DIM)  # fmt: skip


@gluon.jit
def _attention_ws_int8_kernel(
    q_desc,  # TMA over the [B S, H D] fp16/bf16 query matrix; tiles [WG_M, D]
    k8_desc,  # TMA over k8 as [B H S_pad, D] int8; tiles [BLOCK_N, D]
    v_desc,  # TMA over the [B S, H D] value matrix; tiles [BLOCK_N, D]
    k_scale_ptr,  # [B H, S_pad / 128] fp32
    out_ptr,  # [B, S, H, D] output view
    seq_len, padded_len, heads,
    stride_ob, stride_os, stride_oh,  # output strides (elements); the last one is 1
    qk_scale,  # log2(e) / sqrt(D), folded into Q before it is quantized
    HEAD_DIM: gl.constexpr, CAUSAL: gl.constexpr, BLOCK_N: gl.constexpr,
    STAGES: gl.constexpr, PINGPONG: gl.constexpr, P_REGS: gl.constexpr,
):  # fmt: skip
    """Grid (cdiv(S, 128), B * H); num_warps = 4 (the first consumer) plus the workers."""
    dtype: gl.constexpr = q_desc.dtype
    pid_bh, batch, head, start_m, num_blocks, mask_end, out_base = _cta_start(
        seq_len, heads, stride_ob, stride_oh, CAUSAL, BLOCK_N)  # fmt: skip
    row0 = batch * seq_len
    col = head * HEAD_DIM
    k_scale_ptr += pid_bh * (padded_len // 128)

    q_smem = gl.allocate_shared_memory(dtype, [2, WG_M, HEAD_DIM], q_desc.layout)
    q8_smem = gl.allocate_shared_memory(
        gl.int8, [2, WG_M, HEAD_DIM],
        gl.NVMMASharedLayout.get_default_for([WG_M, HEAD_DIM], gl.int8),
    )  # fmt: skip
    k_smem = gl.allocate_shared_memory(gl.int8, [STAGES, BLOCK_N, HEAD_DIM], k8_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], v_desc.layout)
    if P_REGS:
        p_smem = q_smem  # never read: P stays in registers
    else:  # two P buffers per consumer
        p_smem = gl.allocate_shared_memory(
            dtype, [4, WG_M, BLOCK_N], gl.NVMMASharedLayout.get_default_for([WG_M, BLOCK_N], dtype)
        )
    q_bars, turns, k_ready, k_empty, v_ready, v_empty = _ws_barriers(STAGES)

    producer_args = (q_desc, k8_desc, v_desc, q_smem, k_smem, v_smem, q_bars, k_ready, k_empty,
                     v_ready, v_empty, row0 + start_m, col, pid_bh * padded_len, 0, row0, col,
                     num_blocks, BLOCK_N, STAGES, False)  # fmt: skip
    gl.warp_specialize(
        [(_ws_int8_consumer, (0, q_smem, q8_smem, k_smem, v_smem, p_smem, q_bars, k_ready,
                              k_empty, v_ready, v_empty, turns, out_ptr, k_scale_ptr, seq_len,
                              start_m, mask_end, num_blocks, qk_scale, out_base, stride_os,
                              HEAD_DIM, CAUSAL, BLOCK_N, STAGES, PINGPONG, P_REGS)),
         (_ws_int8_consumer, (1, q_smem, q8_smem, k_smem, v_smem, p_smem, q_bars, k_ready,
                              k_empty, v_ready, v_empty, turns, out_ptr, k_scale_ptr, seq_len,
                              start_m, mask_end, num_blocks, qk_scale, out_base, stride_os,
                              HEAD_DIM, CAUSAL, BLOCK_N, STAGES, PINGPONG, P_REGS)),
         (_ws_producer, producer_args)],
        [4, 1], [CONSUMER_REGS, PRODUCER_REGS],
    )  # fmt: skip


# (BLOCK_N, STAGES, PINGPONG, P_REGS): BLOCK_N 128 = KEY_BLOCK, one K scale per key block.
# Shared memory at D 128: 2 fp16 Q tiles (32 KB) + 2 int8 ones (16 KB) + STAGES x (int8 K
# 16 KB + fp16 V 32 KB) + 4 P tiles (64 KB) unless P_REGS: 208 KB with P staged and 2 stages,
# 192 KB with P in registers and 3. The fp16 kernel's choices (attention_ws.WS_TILES), one
# more stage at D 64 where the int8 K tiles leave room.
WS_INT8_TILES: dict[int, list[tuple[int, int, bool, bool]]] = {
    64: [(128, 3, True, False), (128, 3, False, False), (128, 4, True, True),
         (128, 4, False, True)],
    128: [(128, 2, True, False), (128, 2, False, False), (128, 3, True, True),
          (128, 3, False, True)],
}  # fmt: skip


def int8_descriptor(k8: torch.Tensor, block: list[int]) -> TensorDescriptor:
    """k8 [B H, S_pad, D] (int8) as a TMA descriptor over the [B H S_pad, D] matrix."""
    matrix = k8.flatten(0, 1)
    layout = gl.NVMMASharedLayout.get_default_for(block, gl.int8)
    return TensorDescriptor(matrix, list(matrix.shape), [matrix.stride(0), 1], block, layout)


def ws_int8_launch(
    q: torch.Tensor, v: torch.Tensor, out: torch.Tensor, quantized: list, causal: bool
) -> tuple[Callable[[Config], KernelCall], list[Config]]:
    """This kernel's KernelCall for a config, reading [k8, k_scale] (what attention_int8's
    key passes write), and its candidates."""
    assert KEY_BLOCK == 128
    batch, seq, heads, head_dim = q.shape
    k8, k_scale = quantized[:2]
    padded_len = k8.shape[1]

    def make(cfg: Config) -> KernelCall:
        bn = cfg["BLOCK_N"]
        args = (_descriptor(q, WG_M.value), int8_descriptor(k8, [bn, head_dim]),
                _descriptor(v, bn), k_scale, out, seq, padded_len, heads, out.stride(0),
                out.stride(1), out.stride(2), LOG2E / math.sqrt(head_dim))  # fmt: skip
        return ws_kernel_call(_attention_ws_int8_kernel, q, args, causal, cfg)

    return make, ws_candidates("ws_int8", WS_INT8_TILES[head_dim])


def ws_int8_calls(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    *,
    causal: bool,
    config: Config | dict | None = None,
) -> tuple[list[KernelCall], Choice, list]:
    """Quantize K (attention_int8's passes), then this kernel alone, bound on [B, S, H, D]
    views that `ws_usable` accepts; its tile tuned unless `config` forces one."""
    if not ws_usable(q, k, v, out):
        raise Unsupported("the warp-specialized int8 attention kernel needs an sm_90 GPU, "
                          "fp16/bf16, D 64/128 and TMA-able views")  # fmt: skip
    quantize, keep, _, _ = int8_launch(q, k, v, out, causal)
    make, candidates = ws_int8_launch(q, v, out, keep, causal)
    calls, choice = quantized_choice("attention_ws_int8", views_key(q, out, causal), quantize,
                                     make, candidates, q.device, as_config(config))  # fmt: skip
    return calls, choice, keep


def tuned_int8_sm90_calls(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, *, causal: bool
) -> tuple[list[KernelCall], Choice, list]:
    """The shared key passes, then one tuned choice between this kernel's tiles and
    attention_int8's kernel's (KERNEL says which), for views `ws_usable` accepts. Not in the
    shipped plan tables yet: tuned at the first bind of each shape."""
    quantize, keep, make_tl, tl_candidates = int8_launch(q, k, v, out, causal)
    make_ws, ws_candidates = ws_int8_launch(q, v, out, keep, causal)
    candidates = ws_candidates + [c.with_meta(KERNEL="int8") for c in tl_candidates]
    calls, choice = quantized_choice("attention_int8_sm90", views_key(q, out, causal), quantize,
                                     by_kernel("ws_int8", make_ws, make_tl), candidates,
                                     q.device)  # fmt: skip
    return calls, choice, keep
