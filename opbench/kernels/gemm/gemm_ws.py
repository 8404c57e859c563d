"""A persistent, warp-specialized GEMM for Hopper (sm_90) in Gluon: y = epilogue(x @ W^T).

Why (issues #26, #31): Triton's own TMA GEMM (`linear_kernels._linear_tma_kernel`) issues its
loads from the warps that run the MMAs and waits for every wgmma before the next K step, and
`tl.range(..., warp_specialize=True)` did not help on Hopper. Here the roles are split by hand:

    producer (1 warp)      for each tile, each K step: wait "empty[s]", TMA the step's A
                           tile(s) and W tile -> slot s, whose "ready[s]" completes when
                           the bytes land
    consumer 0, 1          for each of its tiles, each K step: wait "ready[s]", issue the
    (one warpgroup each,   async wgmma on slot s, wait until only that one is in flight (so
     WG_M rows each)       the previous step's MMA has retired) and arrive on that step's
                           "empty" slot; then the tile's epilogue (scales, bias,
                           activation, residual)

A slot is free once its consumers arrived on its "empty" mbarrier. The ring runs across
tiles: slot and phase come from one step counter that producer and consumers advance
identically, so the producer streams the next tile's operands while the consumers run the
epilogue of this one. Tiles are dealt round-robin to min(tiles, SMs) programs, in groups of
GROUP_M tile-rows (`linear_kernels._tile_coords`) so that A rows and W columns stay in L2.

Two schedules (PINGPONG, a plan's SCHEDULE; the tuner picks per shape):

- Cooperative: both consumers work on one 2 WG_M x BLOCK_N tile, each on its WG_M rows, in
  step: a slot holds two A tiles and one W tile and needs both arrivals (count 2). Large tiles
  (fewest operand bytes per MMA), but the tensor cores idle during every epilogue.
- Ping-pong (FlashAttention-3's and CUTLASS's "pingpong"): each consumer owns a whole
  WG_M x BLOCK_N tile, the even or the odd tiles of the program's walk; a slot holds one A
  tile and one W tile for its one reader (count 1), and a consumer's step counter skips the
  other's tiles. Two "turn" mbarriers order the consumers' K loops: a consumer issues its
  tile's MMAs only once the other has issued all of its previous tile's, and hands the turn
  over after its own last one, so one consumer's epilogue runs while the other keeps the
  tensor cores busy.

      consumer 0:  [K loop tile 0][epilogue 0]            [K loop tile 2][epilogue 2]
      consumer 1:                 [K loop tile 1          ][epilogue 1]  [K loop tile 3] ...

  Measured on an H100 (docs/perf/gemm.md, 2026-11-25 late): ahead of the cooperative tiles
  at short K (BERT) and for most 8-bit shapes; behind by 2-13% on fp16 at K >= 3072,
  where the cooperative 128 x 256 tile reads fewer operand bytes per MMA.

Epilogue: `linear_epilogue.epilogue_store`'s meaning, y = act(acc sx[m] sw[n] + b[n]) (+ res),
fp32 math, output in out's dtype, by column halves of the tile (a split within each thread's
registers: what one half's scales, bias and residual keep live fits beside the accumulator).
Each half goes to shared memory and a TMA store writes it (TMA clips rows >= M and columns >=
N); the consumer waits for those stores only at its next tile's epilogue, so they run under
the next K loop. The residual comes by TMA into the same buffers while the last MMA runs.
(Pointer loads and stores spilled: a 64-bit address per pair of elements, 128 registers for
a 64 x 256 tile, on top of the accumulator's 128; ptxas at sm_90, Triton 3.6.)

Operands: fp16/bf16 (fp32 sums), e4m3 (fp32 sums) or int8 (int32 sums), K-major A [M, K] and
W [N, K] (W's tile permuted is the K-major B that wgmma reads for every dtype). TMA reads zeros
past M, N and K, so no loop needs a mask.

Registers: 12 warps (two consumer warpgroups + the producer's), maxnreg MAXNREG at launch, then
setmaxnreg: consumers 240 each, producer 24 (240 * 128 * 2 + 24 * 128 = 64512 = 168 * 384).
A consumer's accumulator is WG_M x BLOCK_N / 128 fp32 registers per thread (128 at 64 x 256
or 128 x 128, the largest: a ping-pong tile cannot be the cooperative 128 x 256).

Compiled only for compute capability 9.x (Gluon has no interpreter): CPU tests compile it for
sm_90 (tests/kernels/test_gemm_ws.py) and the GPU run checks it against float64.
"""

from __future__ import annotations

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from opbench.kernels import Unsupported
from opbench.kernels.epilogue import SWIGLU_PAIRS
from opbench.kernels.gemm.gemm_ws_epilogue import epilogue_half, rope_halves
from opbench.kernels.gemm.gemm_ws_parts import EpilogueVectors, OutputTiles, Ring, Walk
from opbench.kernels.gemm.linear_epilogue import NO_ROPE, ROPE_HALF, RopeArgs
from opbench.kernels.gemm.linear_kernels import _tile_coords
from opbench.kernels.gemm.linear_plans import WS_MAXNREG
from opbench.kernels.hopper import cta_barrier, pass_turn, take_turn, tma_load
from opbench.kernels.host import INTERPRET, cdiv
from opbench.kernels.launch import KernelCall
from opbench.kernels.tuning import Config

# The TMA store from shared memory: `async_copy_shared_to_global` in Triton 3.6, `async_store`
# in later releases (same arguments: descriptor, coordinates, source).
_tma_store = getattr(tma, "async_store", None) or tma.async_copy_shared_to_global

CONSUMER_REGS = gl.constexpr(240)
PRODUCER_REGS = gl.constexpr(24)
MAXNREG = WS_MAXNREG

GL_DTYPES = {torch.float16: gl.float16, torch.bfloat16: gl.bfloat16, torch.int8: gl.int8,
             torch.float8_e4m3fn: gl.float8e4nv}  # fmt: skip


@gluon.jit
def _ws_producer(a_desc, w_desc, ring, walk, GROUP_M: gl.constexpr, PINGPONG: gl.constexpr):
    """One warp: every K step of every tile of this program, in tile order, into ring slot
    step % STAGES once its consumers released that slot's previous step (a fresh mbarrier
    passes a wait on parity 1, so the first STAGES steps do not wait). A slot holds one W
    tile and the A tile of each consumer of the step: both (coop) or the tile's owner's."""
    STAGES: gl.constexpr = ring.w_smem.shape[0]
    BLOCK_N: gl.constexpr = ring.w_smem.shape[1]
    WG_M: gl.constexpr = ring.a_smem.shape[1]
    BLOCK_K: gl.constexpr = ring.a_smem.shape[2]
    A_TILES: gl.constexpr = 1 if PINGPONG else 2
    num_m = gl.cdiv(walk.M, A_TILES * WG_M)
    num_n = gl.cdiv(walk.N, BLOCK_N)
    k_steps = gl.cdiv(walk.K, BLOCK_K)
    nbytes: gl.constexpr = A_TILES * a_desc.block_type.nbytes + w_desc.block_type.nbytes
    step = 0
    for tile in range(gl.program_id(0), num_m * num_n, walk.num_programs):
        tile_m, tile_n = _tile_coords(tile, num_m, num_n, GROUP_M)
        row = tile_m * A_TILES * WG_M
        col = tile_n * BLOCK_N
        for k in range(k_steps):
            slot = step % STAGES
            mbarrier.wait(ring.empty.index(slot), ((step // STAGES) & 1) ^ 1)
            bar = ring.ready.index(slot)
            mbarrier.expect(bar, nbytes)
            for i in gl.static_range(A_TILES):
                tma_load(a_desc, [row + i * WG_M, k * BLOCK_K], bar,
                          ring.a_smem.index(A_TILES * slot + i))  # fmt: skip
            tma_load(w_desc, [col, k * BLOCK_K], bar, ring.w_smem.index(slot))
            step += 1


@gluon.jit
def _ws_consumer(wg: gl.constexpr, ring, walk, out, vectors, rope, turns, GROUP_M: gl.constexpr,
                 PINGPONG: gl.constexpr, SCALED: gl.constexpr, HAS_BIAS: gl.constexpr,
                 ACTIVATION: gl.constexpr, HAS_RESIDUAL: gl.constexpr, ROPE: gl.constexpr,
                 ROPE_D: gl.constexpr):  # fmt: skip
    """Coop: rows wg WG_M ... of each of the program's tiles. Ping-pong: every other tile of
    the program's walk (its tiles wg, wg + 2, ...), whole, its K loop in turn with the other
    consumer's. Per tile the K loop, then the epilogue."""
    # The tile's sizes, from the buffers that hold it (the kernel allocated them so).
    STAGES: gl.constexpr = ring.w_smem.shape[0]
    BLOCK_N: gl.constexpr = ring.w_smem.shape[1]
    WG_M: gl.constexpr = ring.a_smem.shape[1]
    BLOCK_K: gl.constexpr = ring.a_smem.shape[2]
    C_BUFS: gl.constexpr = out.c_smem.shape[0] // 2
    IS_INT8: gl.constexpr = ring.a_smem.dtype == gl.int8
    # The accumulator's layout: one m64 wgmma row block per 64 rows, N = BLOCK_N per
    # instruction, K = 32 bytes per instruction (the layout's third number).
    instr_k: gl.constexpr = 256 // ring.a_smem.dtype.primitive_bitwidth
    layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_N, instr_k]
    )
    HALF_N: gl.constexpr = BLOCK_N // 2
    HALF_BIAS: gl.constexpr = HAS_BIAS and not ROPE  # RoPE adds it before the rotation
    lo_buf = out.c_smem.index(C_BUFS * wg)
    hi_buf = out.c_smem.index(C_BUFS * wg + C_BUFS - 1)  # the same buffer when C_BUFS == 1
    res_bar = out.res_bars.index(wg)
    # A tiles per ring slot (as the producer loads them), and which one is this consumer's.
    A_TILES: gl.constexpr = 1 if PINGPONG else 2
    PART: gl.constexpr = 0 if PINGPONG else wg
    num_m = gl.cdiv(walk.M, A_TILES * WG_M)
    num_n = gl.cdiv(walk.N, BLOCK_N)
    k_steps = gl.cdiv(walk.K, BLOCK_K)
    pid = gl.program_id(0)
    first = pid + wg * walk.num_programs if PINGPONG else pid
    stride = 2 * walk.num_programs if PINGPONG else walk.num_programs
    # The ring step of this consumer's next K step, counted as the producer counts them: over
    # every tile of the program's walk (in ping-pong the other consumer's tiles are skipped).
    step = wg * k_steps if PINGPONG else 0
    done = 0  # tiles this consumer finished: the residual barrier's and the turns' phase
    for tile in range(first, num_m * num_n, stride):
        tile_m, tile_n = _tile_coords(tile, num_m, num_n, GROUP_M)
        row0 = (tile_m * A_TILES + PART) * WG_M
        col0 = tile_n * BLOCK_N
        if IS_INT8:
            acc = gl.zeros([WG_M, BLOCK_N], gl.int32, layout)
        else:
            acc = gl.zeros([WG_M, BLOCK_N], gl.float32, layout)
        # Ping-pong: issue this tile's MMAs only once the other consumer has issued all of its
        # previous tile's; then they run back to back while the other does its epilogue.
        take_turn(turns, wg, done, PINGPONG)
        for k in range(k_steps):
            slot = step % STAGES
            mbarrier.wait(ring.ready.index(slot), (step // STAGES) & 1)
            a_tile = ring.a_smem.index(A_TILES * slot + PART)
            acc = warpgroup_mma(a_tile, ring.w_smem.index(slot).permute((1, 0)), acc, is_async=True)
            # Only this step's MMA may still run: the previous step's slot is free (at k = 0
            # it is the previous tile's last, released after its final wait below).
            acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc,))
            mbarrier.arrive(ring.empty.index((step + STAGES - 1) % STAGES), count=1, pred=k > 0)
            step += 1
        pass_turn(turns, wg, PINGPONG)
        # The output tiles of the previous tile have left shared memory (their stores ran
        # under this tile's K loop); the residual comes into them while the last MMA runs.
        tma.store_wait(0)
        if HAS_RESIDUAL:
            mbarrier.expect(res_bar, 2 * out.res_desc.block_type.nbytes)
            tma_load(out.res_desc, [row0, col0], res_bar, lo_buf)
            tma_load(out.res_desc, [row0, col0 + HALF_N], res_bar, hi_buf)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        mbarrier.arrive(ring.empty.index((step + STAGES - 1) % STAGES), count=1)
        if HAS_RESIDUAL:
            mbarrier.wait(res_bar, done & 1)
        # The stores were issued (and waited for) by one thread: the others write the tiles
        # only after it passed store_wait.
        cta_barrier()

        # The epilogue by column halves: the split stays within each thread's registers and
        # halves what the scales, bias and residual of a half keep live.
        if ROPE:  # one head, pairs side by side: gemm_ws_epilogue.py
            lo, hi = rope_halves(acc, row0, col0, walk.N, vectors.bias_ptr, rope, HAS_BIAS,
                                 ROPE_D)  # fmt: skip
        else:
            lo, hi = gl.split(acc.reshape([WG_M, 2, HALF_N]).permute((0, 2, 1)))
        epilogue_half(lo, lo_buf, row0, col0, walk.M, walk.N, vectors, SCALED, HALF_BIAS,
                      ACTIVATION, HAS_RESIDUAL)  # fmt: skip
        if C_BUFS == 1:
            # One buffer (a ring stage's worth of shared memory saved): the first half's
            # store must have read it before the second half is written.
            fence_async_shared()
            cta_barrier()
            _tma_store(out.c_desc, [row0, col0], lo_buf)
            tma.store_wait(0)
            cta_barrier()
        epilogue_half(hi, hi_buf, row0, col0 + HALF_N, walk.M, walk.N, vectors, SCALED,
                      HALF_BIAS, ACTIVATION, HAS_RESIDUAL)  # fmt: skip
        fence_async_shared()
        cta_barrier()  # all four warps wrote their rows (a barrier of this warpgroup)
        if C_BUFS == 2:
            _tma_store(out.c_desc, [row0, col0], lo_buf)
        _tma_store(out.c_desc, [row0, col0 + HALF_N], hi_buf)
        done += 1
        if PINGPONG:
            step += k_steps  # the other consumer's tile
    tma.store_wait(0)


@gluon.jit
def _gemm_ws_kernel(
    a_desc,  # x [M, K]: tiles [WG_M, BLOCK_K]
    w_desc,  # W [N, K]: tiles [BLOCK_N, BLOCK_K]
    c_desc,  # y [M, N]: tiles [WG_M, BLOCK_N / 2]
    res_desc,  # residual [M, N] like y (read only if HAS_RESIDUAL)
    bias_ptr,  # fp32 [N] (read only if HAS_BIAS)
    row_scale_ptr,  # fp32 [M] (read only if SCALED)
    col_scale_ptr,  # fp32 [N] (read only if SCALED)
    M, N, K,
    num_programs,  # the grid: tiles are dealt round-robin
    WG_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, GROUP_M: gl.constexpr,
    STAGES: gl.constexpr, C_BUFS: gl.constexpr, PINGPONG: gl.constexpr, IS_INT8: gl.constexpr,
    SCALED: gl.constexpr, HAS_BIAS: gl.constexpr, ACTIVATION: gl.constexpr,
    HAS_RESIDUAL: gl.constexpr,
    rope_seq, rope_offset, rope_rotated, rope_freq,  # RoPE (gemm_ws_epilogue.rope_halves)
    ROPE: gl.constexpr,  # rotate the q and k heads: W's rows pair-interleaved per head
    ROPE_D: gl.constexpr,  # head size D: BLOCK_N = D or 2 D
):  # fmt: skip
    """Grid (min(tiles, SMs),); num_warps = 4 (consumer 0) plus the workers' 5."""
    dtype: gl.constexpr = a_desc.dtype
    CONSUMERS_PER_STEP: gl.constexpr = 1 if PINGPONG else 2
    a_smem = gl.allocate_shared_memory(dtype, [CONSUMERS_PER_STEP * STAGES, WG_M, BLOCK_K],
                                       a_desc.layout)  # fmt: skip
    w_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, BLOCK_K], w_desc.layout)
    # Each consumer's output tile by column halves: both halves buffered (C_BUFS 2), or one
    # buffer used twice (C_BUFS 1; no residual, which comes into both halves at once).
    gl.static_assert(C_BUFS == 2 or not HAS_RESIDUAL)
    c_smem = gl.allocate_shared_memory(c_desc.dtype, [2 * C_BUFS, WG_M, BLOCK_N // 2],
                                       c_desc.layout)  # fmt: skip
    bar_layout: gl.constexpr = mbarrier.MBarrierLayout()
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], bar_layout)
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], bar_layout)
    res_bars = gl.allocate_shared_memory(gl.int64, [2, 1], bar_layout)
    turns = gl.allocate_shared_memory(gl.int64, [2, 1], bar_layout)  # ping-pong only
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=CONSUMERS_PER_STEP)  # each reader arrives once
    for i in gl.static_range(2):
        mbarrier.init(res_bars.index(i), count=1)
        if PINGPONG:
            mbarrier.init(turns.index(i), count=1)

    # The structures are built in each partition's arguments: bound to a name first, a value
    # Triton made a constexpr (an argument equal to 1) would become a runtime one.
    gl.warp_specialize(
        [(_ws_consumer, (0, Ring(a_smem, w_smem, ready, empty), Walk(M, N, K, num_programs),
                         OutputTiles(c_desc, res_desc, c_smem, res_bars),
                         EpilogueVectors(bias_ptr, row_scale_ptr, col_scale_ptr),
                         RopeArgs(rope_seq, rope_offset, rope_rotated, rope_freq), turns,
                         GROUP_M, PINGPONG, SCALED, HAS_BIAS, ACTIVATION, HAS_RESIDUAL, ROPE,
                         ROPE_D)),
         (_ws_consumer, (1, Ring(a_smem, w_smem, ready, empty), Walk(M, N, K, num_programs),
                         OutputTiles(c_desc, res_desc, c_smem, res_bars),
                         EpilogueVectors(bias_ptr, row_scale_ptr, col_scale_ptr),
                         RopeArgs(rope_seq, rope_offset, rope_rotated, rope_freq), turns,
                         GROUP_M, PINGPONG, SCALED, HAS_BIAS, ACTIVATION, HAS_RESIDUAL, ROPE,
                         ROPE_D)),
         (_ws_producer, (a_desc, w_desc, Ring(a_smem, w_smem, ready, empty),
                         Walk(M, N, K, num_programs), GROUP_M, PINGPONG))],
        [4, 1], [CONSUMER_REGS, PRODUCER_REGS],
    )  # fmt: skip


def ws_usable(
    a: torch.Tensor, w: torch.Tensor, out: torch.Tensor, activation: int,
    residual: torch.Tensor | None = None,
) -> bool:  # fmt: skip
    """Where this kernel applies: an sm_90 GPU, fp16/bf16/e4m3/int8 operands of one dtype,
    A, W, the output and the residual TMA-able (unit last stride, 16-byte aligned base and
    rows), a 16-bit output, and an elementwise activation (SwiGLU's column pairs change the
    tile's shape)."""
    if INTERPRET or not a.is_cuda or torch.cuda.get_device_capability(a.device)[0] != 9:
        return False
    if a.dtype not in GL_DTYPES or w.dtype != a.dtype or activation == SWIGLU_PAIRS:
        return False
    if out.dtype not in (torch.float16, torch.bfloat16):
        return False
    tensors = (a, w, out) if residual is None else (a, w, out, residual)
    return all(t.dim() == 2 and t.stride(-1) == 1 and t.data_ptr() % 16 == 0
               and (t.stride(0) * t.element_size()) % 16 == 0 for t in tensors)  # fmt: skip


def _descriptor(t: torch.Tensor, block: list[int]) -> TensorDescriptor:
    layout = gl.NVMMASharedLayout.get_default_for(block, GL_DTYPES[t.dtype])
    return TensorDescriptor(t, list(t.shape), list(t.stride()), block, layout)


def ws_call(
    plan: Config,
    a: torch.Tensor,
    w: torch.Tensor,
    out: torch.Tensor,
    *,
    bias: torch.Tensor | None,
    row_scale: torch.Tensor | None,
    col_scale: torch.Tensor | None,
    residual: torch.Tensor | None,
    activation: int,
    programs: int,
    rope: dict | None = None,
) -> tuple[KernelCall, list]:
    """The bound kernel for out[M, N] = epilogue(a[M, K] @ w[N, K]^T) with one plan (KIND "ws":
    BLOCK_M rows by BLOCK_N columns per output tile, BLOCK_K, GROUP_M, STAGES, C_BUFS, and
    SCHEDULE "pingpong" (a consumer per tile, WG_M = BLOCK_M) or, absent, the cooperative
    one (two consumers per tile, WG_M = BLOCK_M / 2)) on at most `programs` programs; the
    descriptors it reads (to keep alive). `row_scale` and `col_scale` both or neither
    (SCALED); int8 operands sum in int32; `residual` laid out like `out`. `rope`: the
    pointer kernels' RoPE arguments (Linear.rope_named), rotate-half with BLOCK_N = D only."""
    M, K = a.shape
    N = w.shape[0]
    pingpong = plan.kwargs.get("SCHEDULE", "coop") == "pingpong"
    bm, bn, bk = plan["BLOCK_M"], plan["BLOCK_N"], plan["BLOCK_K"]
    wg_m = bm if pingpong else bm // 2
    c_desc = _descriptor(out, [wg_m, bn // 2])
    res_desc = _descriptor(residual, [wg_m, bn // 2]) if residual is not None else c_desc
    descs = [_descriptor(a, [wg_m, bk]), _descriptor(w, [bn, bk]), c_desc, res_desc]
    unused = out
    scaled = row_scale is not None
    args = (*descs, bias if bias is not None else unused, row_scale if scaled else unused,
            col_scale if scaled else unused, M, N, K)  # fmt: skip
    grid = min(cdiv(M, bm) * cdiv(N, bn), programs)
    named = dict(num_programs=grid, WG_M=wg_m, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=plan["GROUP_M"],
                 STAGES=plan["STAGES"], C_BUFS=plan["C_BUFS"], PINGPONG=pingpong,
                 IS_INT8=a.dtype == torch.int8, SCALED=scaled, HAS_BIAS=bias is not None,
                 ACTIVATION=activation, HAS_RESIDUAL=residual is not None,
                 **ws_rope_named(rope, bn))  # fmt: skip
    return KernelCall(_gemm_ws_kernel, (grid,), args, named, plan.options()), descs


def ws_rope_named(rope: dict | None, block_n: int) -> dict:
    """The kernel's RoPE arguments from the pointer kernels' (none: ROPE off). It rotates one
    or two whole heads per tile in the rotate-half form (ROPE_HALF) only."""
    rope = rope or NO_ROPE
    heads = (rope["ROPE_D"], 2 * rope["ROPE_D"])
    if rope["ROPE"] and (rope["ROPE"] != ROPE_HALF or block_n not in heads):
        raise Unsupported(f"the Gluon GEMM rotates rotate-half heads of {block_n} or half that")
    return dict(rope)
