"""Which GEMM kernel and tiles a linear layer runs: its candidate plans and the decode table.

A plan is a `tuning.Config` whose meta holds KIND ("tiled" | "tma" | "split_k" | "stream" |
"ws", the warp-specialized Gluon GEMM of gemm_ws.py, with STAGES, C_BUFS and, for its
ping-pong schedule, SCHEDULE),
the tile sizes BLOCK_M/N/K, GROUP_M (L2 grouping of tiled and tma), SPLIT_K (programs per
output tile along K), PERSISTENT (tma: one program per SM walking tiles), WARP_SPECIALIZE
(tma: Triton's producer/consumer warp partition), FUSED_QUANT (split_k + int8: x quantized
inside the GEMM, one launch instead of two) and, for "stream" (linear_stream.py), USE_DOT;
the weight-streaming kernels' plans ("stream", "stream_q") are in stream_plans.py.

Decode-sized inputs (M <= SMALL_M) take one plan fixed by `decode_plan`, the same on every
machine (the rule is in docs/perf/gemm.md); larger inputs are tuned over `tile_candidates`.
Under the CPU interpreter every list collapses to small tiles.
"""

from __future__ import annotations

import functools

import torch

from opbench.kernels.host import INTERPRET, cdiv, next_power_of_2
from opbench.kernels.tuning import Config

# Rows at or below which the split-K kernel runs with the decode table (decode-like batches).
SMALL_M = 64
# Programs the decode rule aims for, per SM: fp16 rows up to DECODE_NARROW_M stream W fastest
# with two per SM; wider fp16 rows and every int8 row with one (their tiles hold more per program).
# Both measured on the H200 against every split-K candidate (docs/perf/gemm.md, decode table).
PROGRAMS_PER_SM = {"narrow": 2, "wide": 1}
DECODE_NARROW_M = 16
# At least this many K steps per split: a shorter loop leaves the software pipeline empty.
MIN_STEPS_PER_SPLIT = 4
MAX_SPLIT_K = 4
# Rows up to which an int8 decode GEMM quantizes x inside the kernel. Zero: on the H200 every
# fused candidate was slower than the best two-launch one (M = 1..64, K = N = 4096: 19.8-23.2 us
# against 15.4-16.6 us): each program must finish x's per-row absmax over all of K before its
# first multiply, a serial pass the two-launch path does once, in its own kernel.
FUSED_QUANT_MAX_M = 0


def gemm_plan(
    kind: str, block_m: int, block_n: int, block_k: int, num_warps: int, num_stages: int, *,
    group_m: int = 8, split_k: int = 1, persistent: bool = False, fused_quant: bool = False,
    warp_specialize: bool = False,
) -> Config:  # fmt: skip
    """One GEMM plan; `warp_specialize` (tma only) is recorded only when set, so plans made
    before it existed read back unchanged."""
    extra = {"WARP_SPECIALIZE": True} if warp_specialize else {}
    return Config.of(
        KIND=kind, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=group_m,
        SPLIT_K=split_k, PERSISTENT=persistent, FUSED_QUANT=fused_quant,
        num_warps=num_warps, num_stages=num_stages, **extra,
    )  # fmt: skip


def small_m_block(m: int) -> int:
    """BLOCK_M of the split-K kernel: M rounded up to a power of two, at least 16 (tl.dot)."""
    return max(16, next_power_of_2(m))


def decode_plan(
    m: int, n: int, k: int, elem_bytes: int, int8: bool, sm_count: int,
    fusable: bool | None = None,
) -> Config:  # fmt: skip
    """The fixed plan for M <= SMALL_M (docs/perf/gemm.md, "decode table").

    One M tile; 64-column tiles on 4 warps; 256 bytes of K per W row and step up to
    DECODE_NARROW_M rows, 512 above (int8 takes twice the elements); SPLIT_K the largest power
    of two that keeps the programs within PROGRAMS_PER_SM per SM while every split keeps
    MIN_STEPS_PER_SPLIT steps; int8 quantizes x in the kernel for M <= FUSED_QUANT_MAX_M.
    `int8` means quantized 1-byte operands (int8 or fp8); `fusable` (default: int8) whether
    the kernel can quantize x itself (int8 only).
    """
    narrow = m <= DECODE_NARROW_M
    block_k = (256 if narrow else 512) // elem_bytes
    block_n = 64
    tiles = cdiv(n, block_n)
    k_steps = cdiv(k, block_k)
    target = PROGRAMS_PER_SM["narrow" if narrow and not int8 else "wide"] * sm_count
    split_k = 1
    while (tiles * split_k * 2 <= target and split_k < MAX_SPLIT_K
           and k_steps // (2 * split_k) >= MIN_STEPS_PER_SPLIT):  # fmt: skip
        split_k *= 2
    fused = (int8 if fusable is None else fusable) and m <= FUSED_QUANT_MAX_M
    # Wider rows with 512-byte K steps hold twice the tile per stage: three stages fit in
    # shared memory where four would not (64 rows: 256 KB against the H200's 227 KB).
    stages = 4 if narrow else 3
    return gemm_plan("split_k", small_m_block(m), block_n, block_k, 4, stages, split_k=split_k,
                     fused_quant=fused)  # fmt: skip


def split_k_candidates(m: int, elem_bytes: int, fused_quant: bool = False) -> list[Config]:
    """Few-row plans: narrow N tiles and/or K splits so that ~2 programs per SM stream W.
    fused_quant adds, for int8, each plan once more with x quantized inside the kernel.
    (The decode table picks one of these shapes; this list is for benchmarks and tests.)"""
    bm = small_m_block(m)
    if INTERPRET:
        shapes = [(32, 16, 1, 4, 1), (32, 16, 3, 4, 1)]
    else:
        k = 256 // elem_bytes  # 256 bytes of K per W row and step: int8 takes twice the K
        shapes = [  # (BLOCK_N, BLOCK_K, SPLIT_K, num_warps, num_stages)
            (32, k, 1, 4, 4), (64, k, 2, 4, 4), (64, k, 4, 4, 4), (128, k, 4, 8, 3),
            (32, 2 * k, 2, 4, 3), (16, 2 * k, 1, 4, 4), (32, k, 4, 4, 4), (64, 2 * k, 2, 4, 3),
        ]  # fmt: skip
    plans = [gemm_plan("split_k", bm, bn, bk, w, s, split_k=sk) for bn, bk, sk, w, s in shapes]
    if fused_quant:
        plans += [p.with_meta(FUSED_QUANT=True) for p in plans]
    return plans


def tile_candidates(elem_bytes: int, tma: bool) -> list[Config]:
    """Many-row plans: large MMA tiles (wgmma wants 64-row multiples; 8 warps at 128x256)."""
    if INTERPRET:
        plans = [gemm_plan("tiled", 16, 16, 32, 4, 1, group_m=2)]
        if tma:
            plans.append(gemm_plan("tma", 16, 16, 32, 4, 1, group_m=2, persistent=True))
        return plans
    bk = 128 // elem_bytes  # 128 bytes of K per row: the full 128-byte shared-memory swizzle
    tiled = [(128, 256, 8, 3), (256, 128, 8, 3), (128, 128, 8, 4), (128, 128, 4, 4),
             (64, 128, 4, 4), (64, 64, 4, 4)]  # (BLOCK_M, BLOCK_N, num_warps, num_stages)  # fmt: skip
    plans = [gemm_plan("tiled", bm, bn, bk, w, s) for bm, bn, w, s in tiled]
    if tma:
        tma_tiles = [(128, 256, 8, 3), (128, 256, 8, 4), (256, 128, 8, 3), (256, 128, 8, 4),
                     (128, 128, 8, 4), (128, 128, 4, 5), (64, 128, 4, 4)]  # fmt: skip
        for bm, bn, w, s in tma_tiles:
            for persistent in (True, False):
                plans.append(gemm_plan("tma", bm, bn, bk, w, s, persistent=persistent))
    return plans


# ---- the warp-specialized Gluon GEMM (gemm_ws.py, sm_90 only) ----

# Its tiles, (WG_M, BLOCK_N, STAGES, C_BUFS), by schedule. Cooperative ("coop", the default):
# a CTA tile covers 2 WG_M rows (one consumer warpgroup each) and BLOCK_N columns. Ping-pong
# (SCHEDULE "pingpong"): each consumer owns a whole WG_M x BLOCK_N tile, so a ring slot holds
# one A tile instead of two and a stage more fits. K steps of 128 bytes (the full swizzle). A
# consumer's accumulator is WG_M x BLOCK_N fp32, at most 64 x 256 or 128 x 128 (128
# registers a thread); the shared memory holds the consumers' output tiles (both column
# halves, C_BUFS 2, or one half at a time, C_BUFS 1, which leaves room for one more stage)
# and as many ring stages as fit.
WS_TILES = [(64, 256, 3, 2), (64, 256, 4, 1), (128, 128, 3, 2), (128, 128, 4, 1),
            (64, 128, 5, 2), (64, 128, 6, 1)]  # fmt: skip
# Ping-pong tiles as measured on an H100 (docs/perf/gemm.md, 2026-11-25 late): 128 x 128 won
# most of the shapes the schedule won; 64 x 128 those with N 768 and fp8 at N 2304 (BERT:
# 384 tiles at M 4096, N 768 spread over 132 SMs more evenly than 96-192 larger ones). A
# 64 x 256 ping-pong tile (4 stages) won no shape in two runs and is not offered.
WS_PINGPONG_TILES = [(128, 128, 5, 2), (128, 128, 6, 1), (64, 128, 8, 2)]
# Shared memory of an sm_90 CTA (227 KB), less a margin for the mbarriers.
SM90_SHARED_BYTES = 227 * 1024 - 1024


# 8-bit tiles with 256 bytes of K per step (WG_M, BLOCK_N, STAGES, C_BUFS, ping-pong): a ring
# slot is two 128-byte swizzle spans of each operand, one TMA box each (Triton splits the box),
# and a K step 8 wgmma instructions (K 32 each) where 128 bytes give 4: half the mbarrier
# round trips and waits per MMA. The same bytes in flight take half the stages. Measured
# beside the 128-byte tiles on an H100 (docs/perf/gemm.md, 2026-11-26): the best of them 11-30%
# behind the best 128-byte tile on every LLaMA-7B shape at M 2048 and 4096 (the shared-memory
# bytes per MMA do not move, the stages halve), so the tuner is not offered them; the bench
# (the retired bench/int8_gemm_gpu.py, `git show b3fbaa8:bench/int8_gemm_gpu.py`) times them.
WS_DEEP_K_TILES = [(128, 128, 3, 1, True), (64, 128, 4, 2, True), (128, 128, 2, 1, False),
                   (64, 128, 3, 2, False)]  # fmt: skip


def ws_shared_bytes(
    wg_m: int, block_n: int, stages: int, c_bufs: int, out_bytes: int, pingpong: bool = False,
    k_bytes: int = 128,
) -> int:  # fmt: skip
    """Shared memory of one gemm_ws tile: STAGES x (the A tiles of a step, two in coop and
    one in ping-pong, plus one W tile) of `k_bytes` of K each, plus each consumer's C_BUFS
    output half-tiles."""
    a_tiles = 1 if pingpong else 2
    return stages * (a_tiles * wg_m + block_n) * k_bytes + c_bufs * wg_m * block_n * out_bytes


def ws_candidates(
    elem_bytes: int, int8: bool = False, residual: bool = False, out_bytes: int = 2
) -> list[Config]:
    """gemm_ws plans (KIND "ws") for operands of `elem_bytes` (2: fp16/bf16; 1: e4m3/int8)
    and a `out_bytes` output: every WS_TILES and WS_PINGPONG_TILES tile that fits the shared
    memory. BLOCK_M is the rows of one output tile: 2 WG_M (coop), WG_M (ping-pong, whose
    plans alone carry SCHEDULE, so that coop plans stored before it read back unchanged).
    int8 takes BLOCK_N <= 128: Triton 3.6 fails to lower a 64 x 256 int8 wgmma
    (ConvertNVGPUToLLVM). With a residual, C_BUFS 2 only (the residual comes into both
    halves at once). The fields the other kinds' code reads (SPLIT_K, PERSISTENT,
    FUSED_QUANT) are set too."""
    tiles = [(tile, False) for tile in WS_TILES] + [(tile, True) for tile in WS_PINGPONG_TILES]
    plans = []
    for (wg_m, bn, stages, c_bufs), pingpong in tiles:
        if ws_shared_bytes(wg_m, bn, stages, c_bufs, out_bytes, pingpong) > SM90_SHARED_BYTES:
            continue
        if (int8 and bn > 128) or (residual and c_bufs == 1):
            continue
        plans.append(ws_plan(wg_m, bn, stages, c_bufs, pingpong, 128 // elem_bytes))
    return plans


def ws_deep_k_candidates(residual: bool = False, out_bytes: int = 2) -> list[Config]:
    """8-bit gemm_ws plans with 256 bytes of K per step (WS_DEEP_K_TILES) that fit the
    shared memory (with a residual, C_BUFS 2 only)."""
    return [ws_plan(wg_m, bn, stages, c_bufs, pingpong, 256)
            for wg_m, bn, stages, c_bufs, pingpong in WS_DEEP_K_TILES
            if ws_shared_bytes(wg_m, bn, stages, c_bufs, out_bytes, pingpong, 256)
            <= SM90_SHARED_BYTES and not (residual and c_bufs == 1)]  # fmt: skip


def ws_plan(
    wg_m: int, block_n: int, stages: int, c_bufs: int, pingpong: bool, block_k: int
) -> Config:
    """One gemm_ws plan: BLOCK_M the rows of an output tile, 2 WG_M (coop) or WG_M
    (ping-pong, whose plans alone carry SCHEDULE)."""
    schedule = {"SCHEDULE": "pingpong"} if pingpong else {}
    return Config.of(
        KIND="ws", BLOCK_M=wg_m if pingpong else 2 * wg_m, BLOCK_N=block_n, BLOCK_K=block_k,
        GROUP_M=8, STAGES=stages, C_BUFS=c_bufs, SPLIT_K=1, PERSISTENT=True, FUSED_QUANT=False,
        num_warps=4, num_stages=1, maxnreg=WS_MAXNREG, **schedule,
    )  # fmt: skip


# Registers per thread at launch for gemm_ws's 12 warps (setmaxnreg then gives each consumer
# warpgroup 240 and the producer 24): 168 x 384 = 64512 <= 65536.
WS_MAXNREG = 168


def tma_ok(*tensors: torch.Tensor) -> bool:
    """TMA needs Hopper+, unit last stride, 16-byte aligned base and row stride."""
    ok_device = INTERPRET or all(t.is_cuda and _properties(_index(t.device)).major >= 9
                                 for t in tensors)  # fmt: skip
    return ok_device and all(
        t.stride(-1) == 1 and t.data_ptr() % 16 == 0 and (t.stride(0) * t.element_size()) % 16 == 0
        for t in tensors
    )


def sm_count(device: torch.device) -> int:
    return 4 if INTERPRET else _properties(_index(device)).multi_processor_count


@functools.cache
def _properties(index: int):
    return torch.cuda.get_device_properties(index)


def _index(device: torch.device) -> int:
    return device.index if device.index is not None else torch.cuda.current_device()
