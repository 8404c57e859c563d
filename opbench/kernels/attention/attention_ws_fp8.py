"""FP8 (e4m3) attention through the warp-specialized Hopper structure of attention_ws.py: the
same producer warp and two consumer warpgroups (ping-pong optional), with both MMAs on fp8
operands (twice fp16's tensor-core rate on Hopper).

Scales and quantization are attention_fp8.py's (its module docstring; same error model and
tolerance): K smoothed and quantized per KEY_BLOCK keys and V per channel, stored transposed,
by that module's two passes (`quantize_kv_calls`); P as 448 p. Q is quantized here, inside
each consumer, with one scale per 64-row tile (the consumer's rows; rows past the sequence
count as zero): the fp16 tile the producer brought is read from shared memory, scaled by
log2(e)/sqrt(D), and written back as e4m3 for the MMA.

TMA reads k8 as the matrix [B H S_pad, D] (key block i of head bh at row bh S_pad + i BLOCK_N)
and vt8 as [B H D, S_pad] (at row bh D, column i BLOCK_N): Hopper's fp8 MMA takes both
operands K-major, so the PV MMA's B operand is a [D, BLOCK_N] tile of vt8, permuted.
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
from opbench.kernels.attention.attention_fp8 import fp8_launch
from opbench.kernels.attention.attention_hopper import _descriptor, _softmax_block
from opbench.kernels.attention.attention_int8 import KEY_BLOCK
from opbench.kernels.attention.attention_ws import ws_usable
from opbench.kernels.attention.attention_ws_step import (
    CONSUMER_REGS,
    FP8_QUANT,
    PRODUCER_REGS,
    WG_M,
    _consumer_start,
    _cta_start,
    _first_scores,
    _key_loop,
    _p_operand,
    _quantize_q,
    _store_rows,
    _ws_barriers,
    _ws_producer,
    ws_candidates,
    ws_kernel_call,
)
from opbench.kernels.launch import KernelCall, by_kernel, quantized_choice
from opbench.kernels.tuning import Choice, Config

FP8 = gl.float8e4nv


@gluon.jit
def _ws_fp8_consumer(wg: gl.constexpr, q_smem, q8_smem, k_smem, v_smem, p_smem, q_bars,
                     k_ready, k_empty, v_ready, v_empty, turns, out_ptr, k_scale_ptr,
                     v_scale_ptr, seq_len, start_m, mask_end, num_blocks, qk_scale, out_base,
                     stride_os, HEAD_DIM: gl.constexpr, CAUSAL: gl.constexpr,
                     BLOCK_N: gl.constexpr, STAGES: gl.constexpr, PINGPONG: gl.constexpr,
                     P_REGS: gl.constexpr):  # fmt: skip
    """attention_ws._ws_consumer's key loop (its `_ws_step`, FP8) on e4m3 operands, with the
    per-block K scale; P in registers (P_REGS) or shared memory."""
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_N, 32]
    )
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, HEAD_DIM, 32]
    )
    row_o: gl.constexpr = gl.SliceLayout(1, o_layout)
    m0, mask_from, offs_m, zero_s, acc, m_i, l_i = _consumer_start(
        start_m, wg, mask_end, s_layout, o_layout, CAUSAL, BLOCK_N, HEAD_DIM)  # fmt: skip
    q8 = q8_smem.index(wg)

    mbarrier.wait(q_bars.index(wg), 0)
    q_scale = _quantize_q(q_smem.index(wg), q8, m0, seq_len, qk_scale, HEAD_DIM, False)
    k_scale = gl.load(k_scale_ptr)
    s = _first_scores(q8, k_smem, k_ready, k_empty, turns, zero_s, wg, PINGPONG)
    p, alpha, m_i, l_i = _softmax_block(s, m_i, l_i, 0, mask_from, offs_m, seq_len,
                                        q_scale * k_scale, CAUSAL, BLOCK_N, s_layout)  # fmt: skip
    p8 = _p_operand(p * 448.0, p_smem, 2 * wg, FP8, o_layout, P_REGS)

    acc, l_i = _key_loop(acc, p8, alpha, m_i, l_i, wg, q8, k_smem, v_smem, p_smem, k_ready,
                         k_empty, v_ready, v_empty, turns, zero_s, mask_from, offs_m, seq_len,
                         num_blocks, qk_scale, q_scale, k_scale_ptr, FP8, s_layout, o_layout,
                         CAUSAL, BLOCK_N, STAGES, PINGPONG, P_REGS, FP8_QUANT)  # fmt: skip

    cols = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, o_layout))
    v_scale = gl.load(v_scale_ptr + cols)
    out = acc * (v_scale / 448.0)[None, :] / gl.convert_layout(l_i, row_o)[:, None]
    _store_rows(out, m0, out_ptr, out_base, stride_os, seq_len, o_layout, HEAD_DIM)


@gluon.jit
def _attention_ws_fp8_kernel(
    q_desc,  # TMA over the [B S, H D] fp16/bf16 query matrix; tiles [WG_M, D]
    k8_desc,  # TMA over k8 as [B H S_pad, D] e4m3; tiles [BLOCK_N, D]
    vt8_desc,  # TMA over vt8 as [B H D, S_pad] e4m3; tiles [D, BLOCK_N]
    k_scale_ptr,  # [B H, S_pad / 128] fp32
    v_scale_ptr,  # [B H, D] fp32
    out_ptr,  # [B, S, H, D] output view
    seq_len, padded_len, heads,
    stride_ob, stride_os, stride_oh,  # output strides (elements); the last one is 1
    qk_scale,  # log2(e) / sqrt(D), folded into Q before it is quantized
    HEAD_DIM: gl.constexpr, CAUSAL: gl.constexpr, BLOCK_N: gl.constexpr,
    STAGES: gl.constexpr, PINGPONG: gl.constexpr, P_REGS: gl.constexpr,
):  # fmt: skip
    """Grid (cdiv(S, 128), B * H); num_warps = 4 (the first consumer) plus the workers."""
    pid_bh, batch, head, start_m, num_blocks, mask_end, out_base = _cta_start(
        seq_len, heads, stride_ob, stride_oh, CAUSAL, BLOCK_N)  # fmt: skip
    k_scale_ptr += pid_bh * (padded_len // 128)
    v_scale_ptr += pid_bh * HEAD_DIM

    q_smem = gl.allocate_shared_memory(q_desc.dtype, [2, WG_M, HEAD_DIM], q_desc.layout)
    q8_smem = gl.allocate_shared_memory(
        FP8, [2, WG_M, HEAD_DIM], gl.NVMMASharedLayout.get_default_for([WG_M, HEAD_DIM], FP8)
    )
    k_smem = gl.allocate_shared_memory(FP8, [STAGES, BLOCK_N, HEAD_DIM], k8_desc.layout)
    v_smem = gl.allocate_shared_memory(FP8, [STAGES, HEAD_DIM, BLOCK_N], vt8_desc.layout)
    if P_REGS:
        p_smem = q8_smem  # never read: P stays in registers
    else:  # two P buffers per consumer
        p_smem = gl.allocate_shared_memory(
            FP8, [4, WG_M, BLOCK_N], gl.NVMMASharedLayout.get_default_for([WG_M, BLOCK_N], FP8)
        )
    q_bars, turns, k_ready, k_empty, v_ready, v_empty = _ws_barriers(STAGES)

    producer_args = (q_desc, k8_desc, vt8_desc, q_smem, k_smem, v_smem, q_bars, k_ready,
                     k_empty, v_ready, v_empty, batch * seq_len + start_m, head * HEAD_DIM,
                     pid_bh * padded_len, 0, pid_bh * HEAD_DIM, 0, num_blocks, BLOCK_N, STAGES,
                     True)  # fmt: skip
    gl.warp_specialize(
        [(_ws_fp8_consumer, (0, q_smem, q8_smem, k_smem, v_smem, p_smem, q_bars, k_ready,
                             k_empty, v_ready, v_empty, turns, out_ptr, k_scale_ptr, v_scale_ptr,
                             seq_len, start_m, mask_end, num_blocks, qk_scale, out_base,
                             stride_os, HEAD_DIM, CAUSAL, BLOCK_N, STAGES, PINGPONG, P_REGS)),
         (_ws_fp8_consumer, (1, q_smem, q8_smem, k_smem, v_smem, p_smem, q_bars, k_ready,
                             k_empty, v_ready, v_empty, turns, out_ptr, k_scale_ptr, v_scale_ptr,
                             seq_len, start_m, mask_end, num_blocks, qk_scale, out_base,
                             stride_os, HEAD_DIM, CAUSAL, BLOCK_N, STAGES, PINGPONG, P_REGS)),
         (_ws_producer, producer_args)],
        [4, 1], [CONSUMER_REGS, PRODUCER_REGS],
    )  # fmt: skip


# (BLOCK_N, STAGES, PINGPONG, P_REGS): BLOCK_N 128 = KEY_BLOCK, one K scale per key block.
# P in registers (P_REGS) compiles and passes its checks but lost on an H100 (2026-11-25
# night, fp16 input S 8192 D 128: 600-619 TFLOP/s against 690-713 with P in shared memory,
# causal 491-507 against 587-603), so the tuner is not offered it.
WS_FP8_TILES: dict[int, list[tuple[int, int, bool, bool]]] = {
    64: [(128, 4, True, False), (128, 4, False, False)],
    128: [(128, 3, True, False), (128, 3, False, False)],
}  # fmt: skip


def fp8_descriptor(t: torch.Tensor, block: list[int]) -> TensorDescriptor:
    """A 3-D e4m3 tensor [G, R, C] as a TMA descriptor over the [G R, C] matrix."""
    matrix = t.flatten(0, 1)
    layout = gl.NVMMASharedLayout.get_default_for(block, FP8)
    return TensorDescriptor(matrix, list(matrix.shape), [matrix.stride(0), 1], block, layout)


def ws_fp8_launch(
    q: torch.Tensor, out: torch.Tensor, quantized: list, causal: bool
) -> tuple[Callable[[Config], KernelCall], list[Config]]:
    """This kernel's KernelCall for a config, reading [k8, k_scale, vt8, v_scale] (what
    attention_fp8's passes write), and its candidates."""
    assert KEY_BLOCK == 128
    batch, seq, heads, head_dim = q.shape
    k8, k_scale, vt8, v_scale = quantized[:4]
    padded_len = k8.shape[1]

    def make(cfg: Config) -> KernelCall:
        bn = cfg["BLOCK_N"]
        args = (_descriptor(q, WG_M.value), fp8_descriptor(k8, [bn, head_dim]),
                fp8_descriptor(vt8, [head_dim, bn]), k_scale, v_scale, out, seq, padded_len,
                heads, out.stride(0), out.stride(1), out.stride(2),
                LOG2E / math.sqrt(head_dim))  # fmt: skip
        return ws_kernel_call(_attention_ws_fp8_kernel, q, args, causal, cfg)

    return make, ws_candidates("ws_fp8", WS_FP8_TILES[head_dim])


def ws_fp8_calls(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    *,
    causal: bool,
    config: Config | dict | None = None,
) -> tuple[list[KernelCall], Choice, list]:
    """Quantize K and V (attention_fp8's passes), then this kernel alone, bound on
    [B, S, H, D] views that `ws_usable` accepts; its tile tuned unless `config` forces one."""
    if not ws_usable(q, k, v, out):
        raise Unsupported("the warp-specialized fp8 attention kernel needs an sm_90 GPU, "
                          "fp16/bf16, D 64/128 and TMA-able views")  # fmt: skip
    quantize, keep, _, _ = fp8_launch(q, k, v, out, causal)
    make, candidates = ws_fp8_launch(q, out, keep, causal)
    calls, choice = quantized_choice("attention_ws_fp8", views_key(q, out, causal), quantize,
                                     make, candidates, q.device, as_config(config))  # fmt: skip
    return calls, choice, keep


def tuned_fp8_sm90_calls(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, *, causal: bool
) -> tuple[list[KernelCall], Choice, list]:
    """The shared quantization passes, then one tuned choice between this kernel's tiles and
    attention_fp8's kernel's (KERNEL says which), for views `ws_usable` accepts."""
    quantize, keep, make_fp8, fp8_candidates = fp8_launch(q, k, v, out, causal)
    make_ws, ws_candidates = ws_fp8_launch(q, out, keep, causal)
    candidates = ws_candidates + [c.with_meta(KERNEL="fp8") for c in fp8_candidates]
    calls, choice = quantized_choice("attention_fp8_sm90", views_key(q, out, causal), quantize,
                                     by_kernel("ws_fp8", make_ws, make_fp8), candidates,
                                     q.device)  # fmt: skip
    return calls, choice, keep
