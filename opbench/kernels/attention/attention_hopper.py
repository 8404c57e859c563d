"""Flash attention forward for Hopper (sm_90) in Gluon: TMA loads into shared-memory rings,
asynchronous warpgroup MMAs, and the softmax of one key block overlapping the P V MMA of the
previous one (FlashAttention-3's intra-warpgroup pipelining).

Why: the portable kernel (attention.py) waits for every tensor-core op before the softmax
that follows it (Triton 3.6 emits `warp_group_dot_wait {pendings = 0}` after each dot), so
the MUFU/FP32 softmax and the MMAs of one program never overlap. Here one program issues,
per key block j (steady state; FlashAttention-3's order):

    1. S_{j+1} = Q K_{j+1}^T        async (tensor cores); V slot of block j - 1 <- block j + 1
    2. O *= alpha_j; O += P_j V_j   async (P_j from shared memory, written by softmax j)
    3. wait for S_{j+1} (the older group); its K slot <- block j + 3
    4. softmax of S_{j+1} -> P_{j+1} (into the other P buffer), alpha_{j+1}; overlaps 2
    5. wait for P_j V_j
so the tensor cores run P_j V_j during the softmax of block j + 1, and S_{j+1} during the
rescale of O. The order is what ptxas keeps (tests/kernels/test_attention_hopper.py checks
the SASS): waiting on the PV while a QK was in flight made it serialize every wgmma (C7514);
a TMA refill or a P write right after the PV wait made it hoist that wait above the softmax.

K and V each have a two-slot ring with one mbarrier per slot (phase = use count & 1); block i
lives in slot i % 2; P has two buffers. With 8 warps (two warpgroups of 64 rows each) a slot
is refilled only after a CTA barrier, as the other warpgroup's MMA may still read it.

Layout: q, k, v are [B, S, H, D] views of one input whose batches are contiguous (packed or
not); each goes to TMA as a 2-D [B S, H D] matrix, tile (row b S + s, column h D). A tile
that runs past its batch's last row reads the next batch's first rows: their queries are
never stored and their keys are masked (-inf, and P = 0 against their values); past the
last batch TMA reads zeros. Scale, masks and the result are as in attention.py.

Compiled only for compute capability 9.x; Gluon has no interpreter path, so CPU tests only
compile it for sm_90 (tests/kernels/test_attention_hopper.py) and the GPU run checks it.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    warpgroup_mma,
    warpgroup_mma_wait,
)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from opbench.kernels import Unsupported
from opbench.kernels.attention.attention import (
    LOG2E,
    _attention_fwd_kernel,
    as_config,
    portable_launch,
    views_key,
)
from opbench.kernels.hopper import cta_barrier, tma_load
from opbench.kernels.host import INTERPRET, cdiv
from opbench.kernels.launch import KernelCall, chosen_call, config_call
from opbench.kernels.tuning import Choice, Config

GL_DTYPES = {torch.float16: gl.float16, torch.bfloat16: gl.bfloat16}


@gluon.jit
def _load_block(desc, bars, smem, index, row0, col, BLOCK_N: gl.constexpr, pred):
    """TMA of key block `index` (rows row0 + index BLOCK_N ...) into ring slot index % 2."""
    slot = index % 2
    bar = bars.index(slot)
    mbarrier.expect(bar, desc.block_type.nbytes, pred=pred)
    tma_load(desc, [row0 + index * BLOCK_N, col], bar, smem.index(slot),
                                    pred=pred)  # fmt: skip


@gluon.jit
def _wait_block(bars, index):
    mbarrier.wait(bars.index(index % 2), (index // 2) & 1)


@gluon.jit
def _softmax_block(s, m_i, l_i, index, mask_from, offs_m, seq_len, qk_scale,
                   CAUSAL: gl.constexpr, BLOCK_N: gl.constexpr, s_layout: gl.constexpr):  # fmt: skip
    """Mask key block `index` if it needs it; the online-softmax step of attention.py.
    Returns p (fp32, s's layout), alpha, and the new m and l."""
    start_n = index * BLOCK_N
    if start_n >= mask_from:
        offs_n = start_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
        visible = offs_n[None, :] < seq_len
        if CAUSAL:
            visible = visible & (offs_n[None, :] <= offs_m[:, None])
        s = gl.where(visible, s, float("-inf"))
    m_new = gl.maximum(m_i, gl.max(s, 1) * qk_scale)
    p = gl.exp2(s * qk_scale - m_new[:, None])
    alpha = gl.exp2(m_i - m_new)
    l_i = l_i * alpha + gl.sum(p, 1)
    return p, alpha, m_new, l_i


@gluon.jit
def _stage_p(p, p_buffer):
    """P_j into shared memory as the PV MMA's A operand. Two buffers alternate, so P_{j+1} is
    written while P_j V_j still runs: written to the registers (or the one buffer) that the
    running MMA reads, the write had to follow the PV wait, and ptxas placed that wait above
    the softmax."""
    p_buffer.store(p.to(p_buffer.dtype))
    fence_async_shared()
    cta_barrier()
    return p_buffer


@gluon.jit
def _attention_hopper_kernel(
    q_desc, k_desc, v_desc,  # TMA descriptors over [B S, H D] matrices
    out_ptr,  # [B, S, H, D] output view
    seq_len, heads,
    stride_ob, stride_os, stride_oh,  # output strides (elements); the last one is 1
    qk_scale,  # log2(e) / sqrt(D)
    HEAD_DIM: gl.constexpr, CAUSAL: gl.constexpr,
    BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
):  # fmt: skip
    """Grid (cdiv(S, BLOCK_M), B * H); 4 warps (BLOCK_M 64) or 8 (BLOCK_M 128)."""
    num_warps: gl.constexpr = gl.num_warps()
    dtype: gl.constexpr = q_desc.dtype
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, BLOCK_N, 16]
    )
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, HEAD_DIM, 16]
    )
    row_s: gl.constexpr = gl.SliceLayout(1, s_layout)
    row_o: gl.constexpr = gl.SliceLayout(1, o_layout)

    num_m_blocks = gl.cdiv(seq_len, BLOCK_M)
    pid_m = gl.program_id(0)
    if CAUSAL:
        pid_m = num_m_blocks - 1 - pid_m  # longest rows first
    pid_bh = gl.program_id(1)
    batch = pid_bh // heads
    head = pid_bh % heads
    start_m = pid_m * BLOCK_M
    row0 = batch * seq_len
    col = head * HEAD_DIM
    if CAUSAL:
        hi = gl.minimum(start_m + BLOCK_M, seq_len)
        # Key blocks left of the one holding start_m are visible to every row; from that
        # one on (it may start before start_m when BLOCK_N > BLOCK_M), rows need the mask.
        mask_from = (start_m // BLOCK_N) * BLOCK_N
    else:
        hi = seq_len
        mask_from = (seq_len // BLOCK_N) * BLOCK_N
    num_blocks = gl.cdiv(hi, BLOCK_N)

    q_smem = gl.allocate_shared_memory(dtype, [BLOCK_M, HEAD_DIM], q_desc.layout)
    k_smem = gl.allocate_shared_memory(dtype, [2, BLOCK_N, HEAD_DIM], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [2, BLOCK_N, HEAD_DIM], v_desc.layout)
    p_smem = gl.allocate_shared_memory(
        dtype, [2, BLOCK_M, BLOCK_N],
        gl.NVMMASharedLayout.get_default_for([BLOCK_M, BLOCK_N], dtype),
    )  # fmt: skip
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    k_bars = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    v_bars = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_bar, count=1)
    for i in gl.static_range(2):
        mbarrier.init(k_bars.index(i), count=1)
        mbarrier.init(v_bars.index(i), count=1)

    mbarrier.expect(q_bar, q_desc.block_type.nbytes)
    tma_load(q_desc, [row0 + start_m, col], q_bar, q_smem)
    _load_block(k_desc, k_bars, k_smem, 0, row0, col, BLOCK_N, True)
    _load_block(k_desc, k_bars, k_smem, 1, row0, col, BLOCK_N, num_blocks > 1)
    _load_block(v_desc, v_bars, v_smem, 0, row0, col, BLOCK_N, True)

    offs_m = start_m + gl.arange(0, BLOCK_M, layout=row_s)
    zero_s = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, layout=s_layout)
    acc = gl.zeros([BLOCK_M, HEAD_DIM], gl.float32, layout=o_layout)
    m_i = gl.full([BLOCK_M], float("-inf"), gl.float32, layout=row_s)
    l_i = gl.zeros([BLOCK_M], gl.float32, layout=row_s)

    # Block 0's scores and softmax; its K slot then takes block 2.
    mbarrier.wait(q_bar, 0)
    _wait_block(k_bars, 0)
    s_tok = warpgroup_mma(q_smem, k_smem.index(0).permute((1, 0)), zero_s, use_acc=False,
                          is_async=True)  # fmt: skip
    s = warpgroup_mma_wait(num_outstanding=0, deps=(s_tok,))
    if num_warps > 4:
        cta_barrier()  # both warpgroups are done with K slot 0
    _load_block(k_desc, k_bars, k_smem, 2, row0, col, BLOCK_N, num_blocks > 2)
    p, alpha, m_i, l_i = _softmax_block(s, m_i, l_i, 0, mask_from, offs_m, seq_len, qk_scale,
                                        CAUSAL, BLOCK_N, s_layout)  # fmt: skip
    p16 = _stage_p(p, p_smem.index(0))

    for j in range(0, num_blocks - 1):
        # Entering: P_j and alpha_j from block j's softmax; O complete through block j - 1.
        _wait_block(k_bars, j + 1)
        s_tok = warpgroup_mma(q_smem, k_smem.index((j + 1) % 2).permute((1, 0)), zero_s,
                              use_acc=False, is_async=True)  # fmt: skip
        # P_{j-1} V_{j-1} finished last iteration: its V slot takes block j + 1. (Issued here,
        # behind the K wait's branch: next to that wait, ptxas hoisted wait and copy above
        # the softmax.)
        if num_warps > 4:
            cta_barrier()
        _load_block(v_desc, v_bars, v_smem, j + 1, row0, col, BLOCK_N, True)
        acc = acc * gl.convert_layout(alpha, row_o)[:, None]
        _wait_block(v_bars, j)
        acc_tok = warpgroup_mma(p16, v_smem.index(j % 2), acc, is_async=True)
        # S_{j+1} (the older group) is done; P_j V_j runs on during block j + 1's softmax.
        s = warpgroup_mma_wait(num_outstanding=1, deps=(s_tok,))
        if num_warps > 4:
            cta_barrier()  # both warpgroups are done with K slot (j + 1) % 2
        _load_block(k_desc, k_bars, k_smem, j + 3, row0, col, BLOCK_N, j + 3 < num_blocks)
        p, alpha, m_i, l_i = _softmax_block(s, m_i, l_i, j + 1, mask_from, offs_m, seq_len,
                                            qk_scale, CAUSAL, BLOCK_N, s_layout)  # fmt: skip
        p16 = _stage_p(p, p_smem.index((j + 1) % 2))
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc_tok,))

    last = num_blocks - 1
    acc = acc * gl.convert_layout(alpha, row_o)[:, None]
    _wait_block(v_bars, last)
    acc_tok = warpgroup_mma(p16, v_smem.index(last % 2), acc, is_async=True)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc_tok,))

    mbarrier.invalidate(q_bar)
    for i in gl.static_range(2):
        mbarrier.invalidate(k_bars.index(i))
        mbarrier.invalidate(v_bars.index(i))

    out = acc / gl.convert_layout(l_i, row_o)[:, None]
    rows = start_m + gl.arange(0, BLOCK_M, layout=row_o)
    cols = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, o_layout))
    o_ptrs = (out_ptr + batch.to(gl.int64) * stride_ob + head.to(gl.int64) * stride_oh
              + rows[:, None] * stride_os + cols[None, :])  # fmt: skip
    gl.store(o_ptrs, out.to(dtype), mask=rows[:, None] < seq_len)


# (BLOCK_M, BLOCK_N, num_warps): one warpgroup of 64 rows (two or three programs per SM
# interleave their phases), or two warpgroups of 64 rows each sharing the K/V ring.
HOPPER_TILES: dict[int, list[tuple[int, int, int]]] = {
    64: [(64, 64, 4), (64, 128, 4), (128, 64, 8), (128, 128, 8)],
    128: [(64, 64, 4), (64, 128, 4), (128, 64, 8), (128, 128, 8)],
}


def hopper_usable(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor) -> bool:
    """Compute capability 9.x, fp16/bf16, D 64 or 128, and TMA-able [B S, H D] views: unit
    last stride, heads D apart, batches S rows apart, 16-byte aligned bases and rows."""
    if INTERPRET or not q.is_cuda or torch.cuda.get_device_capability(q.device)[0] != 9:
        return False
    batch, seq, heads, head_dim = q.shape
    if q.dtype not in GL_DTYPES or head_dim not in HOPPER_TILES or out.stride(-1) != 1:
        return False
    for t in (q, k, v):
        sb, ss, sh, sd = t.stride()
        if sd != 1 or sh != head_dim or sb != seq * ss or (ss * 2) % 16 or t.data_ptr() % 16:
            return False
    return True


def _descriptor(t: torch.Tensor, rows: int) -> TensorDescriptor:
    """t [B, S, H, D] as a TMA descriptor over the [B S, H D] matrix, tiles [rows, D]."""
    batch, seq, heads, head_dim = t.shape
    layout = gl.NVMMASharedLayout.get_default_for([rows, head_dim], GL_DTYPES[t.dtype])
    matrix = t.as_strided((batch * seq, heads * head_dim), (t.stride(1), 1))
    return TensorDescriptor(matrix, list(matrix.shape), [t.stride(1), 1], [rows, head_dim], layout)


def hopper_launch(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, causal: bool
) -> tuple[Callable[[Config], KernelCall], list[Config]]:
    """The Gluon kernel's KernelCall for a config (its descriptors depend on the tile), and
    its candidates."""
    batch, seq, heads, head_dim = q.shape
    scale = LOG2E / math.sqrt(head_dim)

    def make(cfg: Config) -> KernelCall:
        bm, bn = cfg["BLOCK_M"], cfg["BLOCK_N"]
        args = (_descriptor(q, bm), _descriptor(k, bn), _descriptor(v, bn), out, seq, heads,
                out.stride(0), out.stride(1), out.stride(2), scale)  # fmt: skip
        named = dict(HEAD_DIM=head_dim, CAUSAL=causal, BLOCK_M=bm, BLOCK_N=bn)
        return KernelCall(_attention_hopper_kernel, (cdiv(seq, bm), batch * heads), args, named,
                          cfg.options())  # fmt: skip

    candidates = [Config.of(KERNEL="hopper", BLOCK_M=bm, BLOCK_N=bn, num_warps=w, num_stages=1)
                  for bm, bn, w in HOPPER_TILES[head_dim]]  # fmt: skip
    return make, candidates


def hopper_call(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    *,
    causal: bool,
    config: Config | dict | None = None,
) -> tuple[KernelCall, Choice]:
    """The bound Gluon kernel alone on [B, S, H, D] views (see `hopper_usable`), its tile
    tuned among HOPPER_TILES unless `config` forces one (benchmarks, GPU tests)."""
    if not hopper_usable(q, k, v, out):
        raise Unsupported("the Hopper attention kernel needs an sm_90 GPU, fp16/bf16, D 64/128 "
                          "and TMA-able views")  # fmt: skip
    make, candidates = hopper_launch(q, k, v, out, causal)
    return chosen_call("attention_hopper", views_key(q, out, causal), make, candidates, q.device,
                       as_config(config))  # fmt: skip


def sm90_launch(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, causal: bool
) -> tuple[Callable[[Config], KernelCall], list[Config]]:
    """The Gluon kernel's tiles and the portable kernel's as one candidate list (each config
    says which by KERNEL), and the KernelCall of any of them."""
    make_hopper, hopper_candidates = hopper_launch(q, k, v, out, causal)
    args, named, grid, portable = portable_launch(q, k, v, out, causal)

    def make(cfg: Config) -> KernelCall:
        if cfg["KERNEL"] == "hopper":
            return make_hopper(cfg)
        return config_call(_attention_fwd_kernel, grid(cfg), args, named, cfg)

    candidates = hopper_candidates + [Config.of(KERNEL="portable", num_warps=c.num_warps,
                                                num_stages=c.num_stages, maxnreg=c.maxnreg,
                                                **c.kwargs) for c in portable]  # fmt: skip
    return make, candidates


def tuned_attention_call(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, *, causal: bool
) -> tuple[KernelCall, Choice]:
    """One tuned choice among the Gluon kernel's tiles and the portable kernel's, for views
    `hopper_usable` accepts."""
    make, candidates = sm90_launch(q, k, v, out, causal)
    return chosen_call("attention_sm90", views_key(q, out, causal), make, candidates, q.device)
