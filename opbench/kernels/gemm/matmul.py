"""matmul of two activations, batched: out[..., m, n] = sum_k a[..., m, k] * b[..., k, n].

    out = torch.matmul(a, b)      # a [..., M, K], b [..., K, N]; leading dims broadcast

Cost. 2*batch*M*N*K FLOPs; bytes at least e*batch*(M*K + K*N + M*N) (e: element size), each
operand read once (a broadcast operand once for all the batches that share it, from L2).
With M, N, K in the hundreds (attention's q @ kᵀ and p @ v per head) the tensor cores bound
it; with M = 1 (decode) it is a stream over b.

The kernel is the tiled GEMM of `linear_kernels.py` with a batch: one [BLOCK_M, BLOCK_N] output
tile per program, K walked in BLOCK_K steps with `tl.dot` (fp32 accumulation; fp32 inputs in
true fp32, "ieee", as torch.matmul without TF32), tiles of one matrix visited in L2-friendly
groups of GROUP_M tile-rows. The grid is flat: program p works on matrix p // tiles (the
batch index) and tile p % tiles of it, so the batch count has no grid limit. Leading dims are
broadcast by stride 0 and collapsed (host.collapse_dims) into at most two batch axes, each
with a stride for a, b and out: [B, H] heads, or a [B, 1] operand shared by H heads.

Rows past M (columns past N) wrap around to re-read rows (columns) of the matrix, so that the
loads need no M/N mask; the store mask drops them. K is masked only when BLOCK_K does not divide it (EVEN_K).

Configurations (Hopper): BLOCK_K is 128 bytes of K (64 fp16/bf16, 32 fp32), the width of the
128-byte shared-memory swizzle; tiles of 64 to 256 rows and columns on 4 or 8 warps, 3 to 4
stages. Each stage holds BLOCK_K * (BLOCK_M + BLOCK_N) elements in shared memory, and every
candidate fits in the H100/H200's 227 KB per block (`smem_bytes`; a test checks it).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from opbench.kernels import Unsupported
from opbench.kernels.device import dot_accumulate
from opbench.kernels.gemm.linear_kernels import _tile_coords
from opbench.kernels.host import (
    INTERPRET,
    cdiv,
    check_float,
    collapse_dims,
    next_power_of_2,
    resolve_out,
)
from opbench.kernels.launch import BoundKernels, tuned_call
from opbench.kernels.tuning import Config

# Shared memory one block may use on Hopper (H100 / H200: 227 KB).
HOPPER_SMEM_BYTES = 227 * 1024
# (BLOCK_M, BLOCK_N, num_warps, num_stages): large tiles for the tensor cores (wgmma wants
# 64-row multiples, 8 warps at 128x256), smaller ones for small matrices and few rows.
# Compiled for sm_90 (Triton 3.6, fp16), none of these spills a register.
TILES = [
    (128, 256, 8, 3), (256, 128, 8, 3), (128, 128, 8, 4), (128, 128, 4, 4), (128, 64, 4, 4),
    (64, 128, 4, 4), (64, 64, 4, 4), (32, 64, 4, 4), (16, 64, 4, 4), (16, 128, 4, 4),
]  # fmt: skip
# True fp32 runs on the FMA units, with the accumulator and the operands' fragments in
# registers: tiles of 128x256, 256x128 and 128x128 on 4 warps spill on sm_90, so fp32 keeps
# the others.
TILES_FP32 = [
    (128, 128, 8, 4), (128, 64, 4, 4), (64, 128, 4, 4), (64, 64, 4, 4), (32, 64, 4, 4),
    (16, 64, 4, 4), (16, 128, 4, 4),
]  # fmt: skip


@triton.jit
def _matmul_kernel(
    # pointers
    a_ptr,  # [..., M, K]
    b_ptr,  # [..., K, N], a's dtype
    out_ptr,  # [..., M, N], a's dtype
    # shapes
    M,
    N,
    K,
    size_o1,  # second batch axis (the first one's size is implied by the grid)
    # strides, in elements (batch strides are 0 where an operand is broadcast)
    a_stride_o0,
    a_stride_o1,
    a_stride_m,
    a_stride_k,
    b_stride_o0,
    b_stride_o1,
    b_stride_k,
    b_stride_n,
    out_stride_o0,
    out_stride_o1,
    out_stride_m,
    out_stride_n,
    # meta-parameters
    BLOCK_M: tl.constexpr,  # output rows per program
    BLOCK_N: tl.constexpr,  # output columns per program
    BLOCK_K: tl.constexpr,  # reduction step
    GROUP_M: tl.constexpr,  # tile-rows per L2 group
    EVEN_K: tl.constexpr,  # K % BLOCK_K == 0: no mask in the K loop
    DOT_PRECISION: tl.constexpr,  # "ieee" (true fp32) or "tf32"; fp16/bf16 ignore it
    UPCAST: tl.constexpr,  # interpreter + bf16 only (see device.dot_operand)
):
    num_tiles_m = tl.cdiv(M, BLOCK_M)
    num_tiles_n = tl.cdiv(N, BLOCK_N)
    tiles = num_tiles_m * num_tiles_n
    pid = tl.program_id(0)
    batch = pid // tiles
    tile_m, tile_n = _tile_coords(pid % tiles, num_tiles_m, num_tiles_n, GROUP_M)
    # int64: a batch's offset can pass 2**31 elements.
    o1 = (batch % size_o1).to(tl.int64)
    o0 = (batch // size_o1).to(tl.int64)
    a_base = a_ptr + o0 * a_stride_o0 + o1 * a_stride_o1
    b_base = b_ptr + o0 * b_stride_o0 + o1 * b_stride_o1
    out_base = out_ptr + o0 * out_stride_o0 + o1 * out_stride_o1

    offs_m = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    # Rows past M and columns past N wrap around (% M, % N) rather than being masked: the loads
    # need no mask, and `%` by an M or N the compiler knows to be a multiple of 16 keeps the
    # indices' contiguity, so b's rows (contiguous along N) load as 16-byte vectors.
    rows = (offs_m % M).to(tl.int64)
    cols = (offs_n % N).to(tl.int64)
    a_ptrs = a_base + rows[:, None] * a_stride_m + offs_k[None, :] * a_stride_k
    b_ptrs = b_base + offs_k[:, None] * b_stride_k + cols[None, :] * b_stride_n

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k_step in range(0, tl.cdiv(K, BLOCK_K)):
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:
            k_left = K - k_step * BLOCK_K
            a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0)
            b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0)
        acc = dot_accumulate(a, b, acc, False, DOT_PRECISION, UPCAST)
        a_ptrs += BLOCK_K * a_stride_k
        b_ptrs += BLOCK_K * b_stride_k

    out_ptrs = (
        out_base + offs_m.to(tl.int64)[:, None] * out_stride_m + offs_n[None, :] * out_stride_n
    )
    mask = (offs_m < M)[:, None] & (offs_n < N)[None, :]
    tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty), mask=mask)


def smem_bytes(config: Config, element_size: int) -> int:
    """Shared memory of a configuration's pipelined operand tiles."""
    per_stage = config["BLOCK_K"] * (config["BLOCK_M"] + config["BLOCK_N"]) * element_size
    return config.num_stages * per_stage


def tile_candidates(m: int, n: int, element_size: int, gpu: bool = not INTERPRET) -> list[Config]:
    """The tiles worth timing for an M x N output: none much larger than the matrix (a tile is
    shrunk to M and N rounded up to a power of two, at least 16 for tl.dot), duplicates once."""
    if not gpu:
        return [Config.of(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, GROUP_M=2, num_warps=4,
                          num_stages=1)]  # fmt: skip
    block_k = 128 // element_size
    max_m, max_n = max(16, next_power_of_2(m)), max(16, next_power_of_2(n))
    found: dict[tuple[int, ...], Config] = {}
    for bm, bn, warps, stages in TILES_FP32 if element_size == 4 else TILES:
        bm, bn = min(bm, max_m), min(bn, max_n)
        config = Config.of(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=block_k, GROUP_M=8,
                           num_warps=warps, num_stages=stages)  # fmt: skip
        found.setdefault((bm, bn, warps, stages), config)
    return list(found.values())


def _batch_layout(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor):
    """The leading dims as at most two batch axes: sizes and a, b, out strides on them."""
    lead = tuple(out.shape[:-2])
    a_strides = a.expand(*lead, *a.shape[-2:]).stride()[:-2]
    b_strides = b.expand(*lead, *b.shape[-2:]).stride()[:-2]
    sizes, strides = collapse_dims(lead, a_strides, b_strides, out.stride()[:-2])
    if len(sizes) > 2:
        raise Unsupported(
            f"matmul batch dims {list(lead)} collapse to {len(sizes)} axes (at most 2)"
        )
    pad = 2 - len(sizes)
    return [1] * pad + sizes, [[0] * pad + s for s in strides]


def bind_matmul(
    a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None,
    config: Config | None = None, allow_tf32: bool = False,
) -> BoundKernels:  # fmt: skip
    """torch.matmul(a, b) for a [..., M, K] and b [..., K, N] (each at least 2-D; leading dims
    broadcast), any strides, bound to a, b (and out)."""
    check_float(a, "matmul")
    if b.dtype != a.dtype or b.device != a.device:
        raise Unsupported(f"matmul takes inputs of one dtype and device, got {a.dtype} on "
                          f"{a.device} and {b.dtype} on {b.device}")  # fmt: skip
    if a.dim() < 2 or b.dim() < 2:
        raise Unsupported("matmul takes [..., M, K] and [..., K, N] (at least 2-D each)")
    (m, k), (k2, n) = a.shape[-2:], b.shape[-2:]
    if k != k2:
        raise ValueError(f"matmul: {list(a.shape)} @ {list(b.shape)}: K differs ({k} and {k2})")
    try:
        lead = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except RuntimeError:
        raise ValueError(f"matmul: leading dims of {list(a.shape)} and {list(b.shape)} do not "
                         "broadcast") from None  # fmt: skip
    out = resolve_out(out, (*lead, m, n), a)
    if out.numel() == 0:
        return BoundKernels.of([], out)
    if k == 0:
        raise Unsupported("matmul with K = 0")
    sizes, (a_bs, b_bs, out_bs) = _batch_layout(a, b, out)
    batches = sizes[0] * sizes[1]
    precision = "tf32" if allow_tf32 else "ieee"
    upcast = INTERPRET and a.dtype == torch.bfloat16

    def grid(cfg: Config) -> tuple[int]:
        return (batches * cdiv(m, cfg["BLOCK_M"]) * cdiv(n, cfg["BLOCK_N"]),)

    args = (a, b, out, m, n, k, sizes[1], *a_bs, *a.stride()[-2:], *b_bs, *b.stride()[-2:],
            *out_bs, *out.stride()[-2:])  # fmt: skip
    # EVEN_K follows each configuration's BLOCK_K: it travels in the configuration's meta.
    candidates = [c.with_meta(EVEN_K=k % c["BLOCK_K"] == 0)
                  for c in tile_candidates(m, n, a.element_size())]  # fmt: skip
    if config is not None:
        config = config.with_meta(GROUP_M=config.kwargs.get("GROUP_M", 8),
                                  EVEN_K=k % config["BLOCK_K"] == 0)  # fmt: skip
    key = "|".join([f"{a.dtype}{'-tf32' if allow_tf32 else ''}", f"B{batches}",
                    f"M{next_power_of_2(m)}", f"N{n}", f"K{k}",
                    f"s{a.stride()[-1]},{b.stride()[-1]}"])  # fmt: skip
    named = dict(DOT_PRECISION=precision, UPCAST=upcast)
    call, choice = tuned_call("matmul", _matmul_kernel, key, candidates, grid, args, named,
                              a.device, config)  # fmt: skip
    return BoundKernels.of([call], out, [choice])


def matmul(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """torch.matmul(a, b), launched once."""
    return bind_matmul(a, b, out).launch()
