"""Linear layers as Triton GEMMs: y = act(x @ W^T + b), with bias and activation fused.

Math. x is [M, K] (all leading dimensions of the input folded into M), W is [N, K] (torch's
layout), b is [N]:

    y[m, n] = act( sum_k x[m, k] * W[n, k] + b[n] )

For the W8A8 path (`linear_int8.py`) x and W arrive as int8 with a scale per row of x (per
token) and per row of W (per output channel), and the epilogue first dequantizes:

    y[m, n] = act( sx[m] * sw[n] * sum_k xq[m, k] * Wq[n, k] + b[n] )

Cost. 2*M*N*K FLOPs (int8: OPs). Bytes at least e*(M*K + N*K + M*N) with e = 2 for fp16/bf16
(W alone is e*N*K). With M <= 64 (decode) W dominates: the kernel is a stream over W, and
the int8 path halves that stream. With M >= 512 the tensor cores bound it.

Three kernels, one epilogue:
  * `_linear_tiled_kernel`: one [BLOCK_M, BLOCK_N] output tile per program, pointer loads
    pipelined by `num_stages`, tiles visited in L2-friendly groups of GROUP_M rows.
  * `_linear_tma_kernel`: the same tile loop fed by TMA tensor descriptors (Hopper+), run as a
    persistent grid (one program per SM walking tiles) or one program per tile.
  * `_linear_split_k_kernel`: for few rows (M <= 64). Splits K over SPLIT_K programs so that
    enough programs stream W; partial sums go to a workspace and the last program of each tile
    to arrive (an atomic counter) reduces them in a fixed order and runs the epilogue. For
    int8 it can also quantize x itself (QUANTIZE_A), saving the separate quantize launch.
All three accumulate in fp32 (int32 for int8), then `_epilogue_store` applies the dequant
scales, bias and activation in fp32 and stores in the output's dtype.

Which kernel and tile sizes: `PreparedLinear` times the candidate plans on the first call for
a (GPU, dtype, M rounded up to a power of two, N, K) and remembers the winner in memory and in
a JSON file (`cache_path()`), so a later process does not tune again.
"""

from __future__ import annotations

import functools
import json
import os
import time
import warnings
from dataclasses import dataclass, replace
from pathlib import Path

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from opbench.kernels import Unsupported
from opbench.kernels.epilogue import ACTIVATION_CODES, activation_code, apply_activation
from opbench.kernels.quantize import round_to_int8

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"

# Rows at or below which the split-K kernel is the main candidate (decode-like batches).
SMALL_M = 64


@triton.jit
def _tile_coords(tile_id, num_tiles_m, num_tiles_n, GROUP_M: tl.constexpr):
    """Map a linear tile id to (tile_m, tile_n), walking GROUP_M tile-rows per column sweep so
    the A rows and W columns in use stay resident in L2."""
    tiles_per_group = GROUP_M * num_tiles_n
    group = tile_id // tiles_per_group
    first_m = group * GROUP_M
    group_rows = tl.minimum(num_tiles_m - first_m, GROUP_M)
    tile_m = first_m + (tile_id % tiles_per_group) % group_rows
    tile_n = (tile_id % tiles_per_group) // group_rows
    return tile_m, tile_n


@triton.jit
def _mma(a, b, acc, IS_INT8: tl.constexpr, DOT_PRECISION: tl.constexpr, UPCAST: tl.constexpr):
    """acc += a @ b on tensor cores: int8 x int8 -> int32, or float -> fp32.

    UPCAST (CPU interpreter with bf16 only): Triton 3.6's interpreter multiplies bf16 tiles as
    their raw uint16 bits, so there the operands go to the dot as exactly converted fp32."""
    if IS_INT8:
        acc = tl.dot(a, b, acc, out_dtype=tl.int32)
    elif UPCAST:
        acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
    else:
        acc = tl.dot(a, b, acc, input_precision=DOT_PRECISION)
    return acc


@triton.jit
def _zero_accumulator(BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, IS_INT8: tl.constexpr):
    if IS_INT8:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    return acc


@triton.jit
def _load_row_scale(row_scale_ptr, offs_m, M, IS_INT8: tl.constexpr):
    """sx for the rows offs_m (int8); a dummy the epilogue ignores otherwise."""
    if IS_INT8:
        row_scale = tl.load(row_scale_ptr + offs_m, mask=offs_m < M, other=0.0)
    else:
        row_scale = tl.zeros_like(offs_m).to(tl.float32)
    return row_scale


@triton.jit
def _epilogue_store(
    acc,  # [BLOCK_M, BLOCK_N] fp32 or int32 accumulator
    offs_m,  # [BLOCK_M] output rows of this tile
    offs_n,  # [BLOCK_N] output columns of this tile
    M,
    N,
    out_ptr,
    stride_om,
    stride_on,
    bias_ptr,  # fp32 [N] (read only if HAS_BIAS)
    row_scale,  # [BLOCK_M] fp32 per-token scales sx of these rows (used only if IS_INT8)
    col_scale_ptr,  # fp32 [N] per-channel scales sw (read only if IS_INT8)
    IS_INT8: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    ACTIVATION: tl.constexpr,
):
    """y = act(acc * sx[m] * sw[n] + b[n]) in fp32, stored in out's dtype; rows >= M and
    columns >= N are dropped by the store mask."""
    mask_m = offs_m < M
    mask_n = offs_n < N
    y = acc.to(tl.float32)
    if IS_INT8:
        col_scale = tl.load(col_scale_ptr + offs_n, mask=mask_n, other=0.0)
        y = y * row_scale[:, None] * col_scale[None, :]
    if HAS_BIAS:
        y += tl.load(bias_ptr + offs_n, mask=mask_n, other=0.0)[None, :]
    y = apply_activation(y, ACTIVATION)
    out_ptrs = out_ptr + offs_m.to(tl.int64)[:, None] * stride_om + offs_n[None, :] * stride_on
    tl.store(out_ptrs, y.to(out_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :])


# M changes with the batch: not specializing on it (M == 1, M % 16) avoids a compile per M.
@triton.jit(do_not_specialize=["M"])
def _linear_tiled_kernel(
    # pointers
    a_ptr,  # x [M, K] (int8 when IS_INT8)
    w_ptr,  # W [N, K], same dtype as x
    out_ptr,  # y [M, N]
    bias_ptr,  # fp32 [N]
    row_scale_ptr,  # fp32 [M]
    col_scale_ptr,  # fp32 [N]
    # shapes
    M,
    N,
    K,
    # strides, in elements
    stride_am,
    stride_ak,
    stride_wn,
    stride_wk,
    stride_om,
    stride_on,
    # meta-parameters
    BLOCK_M: tl.constexpr,  # output rows per program
    BLOCK_N: tl.constexpr,  # output columns per program
    BLOCK_K: tl.constexpr,  # reduction step
    GROUP_M: tl.constexpr,  # tile-rows per L2 group
    EVEN_K: tl.constexpr,  # K % BLOCK_K == 0: no mask in the K loop
    IS_INT8: tl.constexpr,  # int8 operands, int32 accumulator, dequant in the epilogue
    HAS_BIAS: tl.constexpr,
    ACTIVATION: tl.constexpr,  # code from epilogue.activation_code
    DOT_PRECISION: tl.constexpr,  # "ieee" (true fp32) or "tf32"; fp16/bf16 ignore it
    UPCAST: tl.constexpr,  # interpreter + bf16 only (see _mma)
):
    num_tiles_m = tl.cdiv(M, BLOCK_M)
    num_tiles_n = tl.cdiv(N, BLOCK_N)
    tile_m, tile_n = _tile_coords(tl.program_id(0), num_tiles_m, num_tiles_n, GROUP_M)
    offs_m = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    # Rows past M (columns past N) re-read row 0: the loads need no M/N mask and the store
    # mask drops those results.
    rows_a = tl.where(offs_m < M, offs_m, 0).to(tl.int64)
    rows_w = tl.where(offs_n < N, offs_n, 0).to(tl.int64)
    a_ptrs = a_ptr + rows_a[:, None] * stride_am + offs_k[None, :] * stride_ak
    w_ptrs = w_ptr + rows_w[:, None] * stride_wn + offs_k[None, :] * stride_wk

    acc = _zero_accumulator(BLOCK_M, BLOCK_N, IS_INT8)
    for k_step in range(0, tl.cdiv(K, BLOCK_K)):
        if EVEN_K:
            a = tl.load(a_ptrs)
            w = tl.load(w_ptrs)
        else:
            k_mask = offs_k[None, :] < K - k_step * BLOCK_K
            a = tl.load(a_ptrs, mask=k_mask, other=0)
            w = tl.load(w_ptrs, mask=k_mask, other=0)
        acc = _mma(a, tl.trans(w), acc, IS_INT8, DOT_PRECISION, UPCAST)
        a_ptrs += BLOCK_K * stride_ak
        w_ptrs += BLOCK_K * stride_wk

    row_scale = _load_row_scale(row_scale_ptr, offs_m, M, IS_INT8)
    _epilogue_store(
        acc, offs_m, offs_n, M, N, out_ptr, stride_om, stride_on,
        bias_ptr, row_scale, col_scale_ptr, IS_INT8, HAS_BIAS, ACTIVATION,
    )  # fmt: skip


# M changes with the batch: not specializing on it (M == 1, M % 16) avoids a compile per M.
@triton.jit(do_not_specialize=["M", "NUM_PROGRAMS"])
def _linear_tma_kernel(
    # tensor descriptors (block shapes [BLOCK_M, BLOCK_K] and [BLOCK_N, BLOCK_K]; out-of-bounds
    # reads return zeros, so no masks anywhere in the K loop)
    a_desc,  # x [M, K]
    w_desc,  # W [N, K]
    # pointers
    out_ptr,  # y [M, N]
    bias_ptr,  # fp32 [N]
    row_scale_ptr,  # fp32 [M]
    col_scale_ptr,  # fp32 [N]
    # shapes
    M,
    N,
    K,
    # strides, in elements
    stride_om,
    stride_on,
    # launch
    NUM_PROGRAMS,  # grid size: tiles are dealt round-robin to the programs
    # meta-parameters
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    IS_INT8: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    ACTIVATION: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    UPCAST: tl.constexpr,
):
    num_tiles_m = tl.cdiv(M, BLOCK_M)
    num_tiles_n = tl.cdiv(N, BLOCK_N)
    k_steps = tl.cdiv(K, BLOCK_K)
    # flatten=True lets the pipeliner prefetch the next tile's operands during this epilogue.
    for tile_id in tl.range(
        tl.program_id(0), num_tiles_m * num_tiles_n, NUM_PROGRAMS, flatten=True
    ):
        tile_m, tile_n = _tile_coords(tile_id, num_tiles_m, num_tiles_n, GROUP_M)
        acc = _zero_accumulator(BLOCK_M, BLOCK_N, IS_INT8)
        for k_step in range(k_steps):
            a = a_desc.load([tile_m * BLOCK_M, k_step * BLOCK_K])
            w = w_desc.load([tile_n * BLOCK_N, k_step * BLOCK_K])
            acc = _mma(a, w.T, acc, IS_INT8, DOT_PRECISION, UPCAST)
        offs_m = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
        row_scale = _load_row_scale(row_scale_ptr, offs_m, M, IS_INT8)
        _epilogue_store(
            acc, offs_m, offs_n, M, N, out_ptr, stride_om, stride_on,
            bias_ptr, row_scale, col_scale_ptr, IS_INT8, HAS_BIAS, ACTIVATION,
        )  # fmt: skip


# M changes with the batch: not specializing on it (M == 1, M % 16) avoids a compile per M.
@triton.jit(do_not_specialize=["M"])
def _linear_split_k_kernel(
    # pointers
    a_ptr,  # x [M, K]: int8, or fp16/bf16 when QUANTIZE_A
    w_ptr,  # W [N, K]
    out_ptr,  # y [M, N]
    bias_ptr,  # fp32 [N]
    row_scale_ptr,  # fp32 [M] (unused when QUANTIZE_A: the kernel computes sx itself)
    col_scale_ptr,  # fp32 [N]
    partial_ptr,  # [SPLIT_K, M, N] fp32/int32 workspace (unused when SPLIT_K == 1)
    arrivals_ptr,  # int32 [tiles]: zero between launches; the last arrival resets its slot
    # shapes
    M,
    N,
    K,
    # strides, in elements
    stride_am,
    stride_ak,
    stride_wn,
    stride_wk,
    stride_om,
    stride_on,
    # meta-parameters
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    SPLIT_K: tl.constexpr,  # programs sharing one output tile, each a contiguous K range
    EVEN_K: tl.constexpr,
    QUANTIZE_A: tl.constexpr,  # int8 path, x still fp16/bf16: quantize it per token in here
    QUANT_BLOCK_K: tl.constexpr,  # row chunk of the absmax prologue (QUANTIZE_A)
    IS_INT8: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    ACTIVATION: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    UPCAST: tl.constexpr,
):
    tile_n = tl.program_id(0)
    split = tl.program_id(1)
    tile_m = tl.program_id(2)
    k_blocks = tl.cdiv(K, BLOCK_K)
    blocks_per_split = tl.cdiv(k_blocks, SPLIT_K)
    first_block = split * blocks_per_split
    last_block = tl.minimum(first_block + blocks_per_split, k_blocks)

    offs_m = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = first_block * BLOCK_K + tl.arange(0, BLOCK_K)
    rows_a = tl.where(offs_m < M, offs_m, 0).to(tl.int64)
    rows_w = tl.where(offs_n < N, offs_n, 0).to(tl.int64)
    a_ptrs = a_ptr + rows_a[:, None] * stride_am + offs_k[None, :] * stride_ak
    w_ptrs = w_ptr + rows_w[:, None] * stride_wn + offs_k[None, :] * stride_wk

    if QUANTIZE_A:
        # Saves the separate quantize launch when M is tiny. Each program needs the absmax of
        # whole rows, so it reads all M*K of x (from L2: a few KB per row).
        row_max = tl.zeros((BLOCK_M,), dtype=tl.float32)
        offs_q = tl.arange(0, QUANT_BLOCK_K)
        for start in range(0, K, QUANT_BLOCK_K):
            x = tl.load(a_ptr + rows_a[:, None] * stride_am + (start + offs_q)[None, :] * stride_ak,
                        mask=(start + offs_q)[None, :] < K, other=0.0)  # fmt: skip
            row_max = tl.maximum(row_max, tl.max(tl.abs(x.to(tl.float32)), axis=1))
        inv_scale = 127.0 / tl.maximum(row_max, 1e-30)
        row_scale = row_max / 127.0
    else:
        row_scale = _load_row_scale(row_scale_ptr, offs_m, M, IS_INT8)

    acc = _zero_accumulator(BLOCK_M, BLOCK_N, IS_INT8)
    for k_block in range(first_block, last_block):
        if EVEN_K:
            a = tl.load(a_ptrs)
            w = tl.load(w_ptrs)
        else:
            k_mask = offs_k[None, :] < K - (k_block - first_block) * BLOCK_K
            a = tl.load(a_ptrs, mask=k_mask, other=0)
            w = tl.load(w_ptrs, mask=k_mask, other=0)
        if QUANTIZE_A:
            a = round_to_int8(a.to(tl.float32) * inv_scale[:, None])
        acc = _mma(a, tl.trans(w), acc, IS_INT8, DOT_PRECISION, UPCAST)
        a_ptrs += BLOCK_K * stride_ak
        w_ptrs += BLOCK_K * stride_wk

    if SPLIT_K == 1:
        _epilogue_store(
            acc, offs_m, offs_n, M, N, out_ptr, stride_om, stride_on,
            bias_ptr, row_scale, col_scale_ptr, IS_INT8, HAS_BIAS, ACTIVATION,
        )  # fmt: skip
    else:
        tile_mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
        tile_offsets = offs_m.to(tl.int64)[:, None] * N + offs_n[None, :]
        tl.store(partial_ptr + split * M * N + tile_offsets, acc, mask=tile_mask)
        # Every thread's partial is stored before one thread publishes the arrival (release);
        # the last arrival acquires it and so sees every split's partial.
        tl.debug_barrier()
        tile_id = tile_m * tl.num_programs(0) + tile_n
        arrived = tl.atomic_add(arrivals_ptr + tile_id, 1, sem="acq_rel", scope="gpu")
        if arrived == SPLIT_K - 1:
            total = _zero_accumulator(BLOCK_M, BLOCK_N, IS_INT8)
            # Fixed order over splits: the fp32 result does not depend on arrival order.
            for s in range(SPLIT_K):
                total += tl.load(
                    partial_ptr + s * M * N + tile_offsets, mask=tile_mask, other=0, volatile=True
                )
            _epilogue_store(
                total, offs_m, offs_n, M, N, out_ptr, stride_om, stride_on,
                bias_ptr, row_scale, col_scale_ptr, IS_INT8, HAS_BIAS, ACTIVATION,
            )  # fmt: skip
            tl.store(arrivals_ptr + tile_id, 0)


# ----------------------------------------------------------------------------------------------
# Launch plans: which kernel, which tile sizes. Candidates come from functions, not tables, so
# the interpreter can collapse each to one small config.


@dataclass(frozen=True)
class Plan:
    """One way to run the GEMM: a kernel kind and its meta-parameters.

    kind: "tiled" | "tma" | "split_k".
    block_m, block_n, block_k: tile sizes. group_m: L2 grouping (tiled, tma).
    split_k: programs per output tile along K (split_k kind).
    persistent: tma only; one program per SM instead of one per tile.
    fused_quant: split_k + int8 only; quantize x inside the GEMM (one launch instead of two).
    num_warps, num_stages: Triton launch options.
    """

    kind: str
    block_m: int
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int
    group_m: int = 8
    split_k: int = 1
    persistent: bool = False
    fused_quant: bool = False

    def to_json(self) -> dict:
        return dict(self.__dict__)

    @staticmethod
    def from_json(d: dict) -> Plan:
        return Plan(**{k: v for k, v in d.items() if k in Plan.__dataclass_fields__})


# Host-side integer helpers. triton.cdiv / triton.next_power_of_2 are constexpr-function
# wrappers costing microseconds per call; these run on every launch.
def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    return 1 << (n - 1).bit_length() if n > 1 else 1


def small_m_block(m: int) -> int:
    """BLOCK_M of the split-K kernel: M rounded up to a power of two, at least 16 (tl.dot)."""
    return max(16, next_power_of_2(m))


def split_k_candidates(m: int, elem_bytes: int, fused_quant: bool = False) -> list[Plan]:
    """Few-row plans: narrow N tiles and/or K splits so that ~2 programs per SM stream W.
    fused_quant adds, for int8, each plan once more with x quantized inside the kernel."""
    bm = small_m_block(m)
    if INTERPRET:
        shapes = [(16, 32, 1, 4, 1), (16, 32, 3, 4, 1)]
    else:
        k = 256 // elem_bytes  # 256 bytes of K per W row and step: int8 takes twice the K
        shapes = [  # (BLOCK_N, BLOCK_K, SPLIT_K, num_warps, num_stages)
            (32, k, 1, 4, 4),
            (64, k, 2, 4, 4),
            (64, k, 4, 4, 4),
            (128, k, 4, 8, 3),
            (32, 2 * k, 2, 4, 3),
            (16, 2 * k, 1, 4, 4),
            (32, k, 4, 4, 4),
            (64, 2 * k, 2, 4, 3),
        ]
    plans = [Plan("split_k", bm, bn, bk, w, s, split_k=sk) for bn, bk, sk, w, s in shapes]
    if fused_quant:
        plans += [replace(p, fused_quant=True) for p in plans]
    return plans


def tile_candidates(elem_bytes: int, tma: bool) -> list[Plan]:
    """Many-row plans: large MMA tiles (wgmma wants 64-row multiples; 8 warps at 128x256)."""
    if INTERPRET:
        plans = [Plan("tiled", 16, 16, 32, 4, 1, group_m=2)]
        return plans + ([Plan("tma", 16, 16, 32, 4, 1, group_m=2, persistent=True)] if tma else [])
    bk = 128 // elem_bytes  # 128 bytes of K per row: the full 128-byte shared-memory swizzle
    tiled = [(128, 256, 8, 3), (256, 128, 8, 3), (128, 128, 8, 4), (128, 128, 4, 4), (64, 128, 4, 4),
             (64, 64, 4, 4)]  # (BLOCK_M, BLOCK_N, num_warps, num_stages)  # fmt: skip
    plans = [Plan("tiled", bm, bn, bk, w, s) for bm, bn, w, s in tiled]
    if tma:
        tma_tiles = [(128, 256, 8, 3), (128, 256, 8, 4), (256, 128, 8, 3), (256, 128, 8, 4),
                     (128, 128, 8, 4), (128, 128, 4, 5), (64, 128, 4, 4)]  # fmt: skip
        for bm, bn, w, s in tma_tiles:
            for persistent in (True, False):
                plans.append(Plan("tma", bm, bn, bk, w, s, persistent=persistent))
    return plans


def tma_ok(*tensors: torch.Tensor) -> bool:
    """TMA needs Hopper+, unit last stride, 16-byte aligned base and row stride."""
    ok_device = INTERPRET or all(t.is_cuda and _capability(t.device)[0] >= 9 for t in tensors)
    return ok_device and all(
        t.stride(-1) == 1 and t.data_ptr() % 16 == 0 and (t.stride(0) * t.element_size()) % 16 == 0
        for t in tensors
    )


@functools.cache
def _properties(index: int):
    return torch.cuda.get_device_properties(index)


def _index(device: torch.device) -> int:
    return device.index if device.index is not None else torch.cuda.current_device()


def _capability(device: torch.device) -> tuple[int, int]:
    props = _properties(_index(device))
    return props.major, props.minor


def _sm_count(device: torch.device) -> int:
    return 4 if INTERPRET else _properties(_index(device)).multi_processor_count


_NO_DIRECT_LAUNCH = "no-direct-launch"


def launch(kernel, grid: tuple, args: tuple, meta: dict, compiled: dict | None, key) -> None:
    """kernel[grid](*args, **meta), remembering the compiled kernel under `key`.

    Triton's JIT launch re-derives the specialization of every argument and hashes the options
    on each call: tens of microseconds of Python, more than a decode-sized GEMM takes on the GPU.
    The first launch for a key goes through it (compiling if needed); later ones call the
    compiled kernel directly. `key` must therefore capture everything Triton specializes on
    that can change between calls: dtypes, strides and 16-byte alignment of the per-call
    tensors (M and NUM_PROGRAMS are never specialized; pointers the caller allocates are
    always aligned).
    """
    entry = None if compiled is None else compiled.get(key)
    if entry is not None:
        function, constexprs = entry
        try:
            # CompiledKernel[grid] takes every signature argument in order (constexprs included,
            # then ignored) and a full 3-D grid.
            function[(*grid, 1, 1)[:3]](*args, *constexprs)
            return
        except (TypeError, IndexError, AttributeError) as err:  # raised before anything launches
            warnings.warn(
                f"direct kernel launch failed ({err}); using Triton's JIT launch", stacklevel=2
            )
            compiled.clear()
            compiled[_NO_DIRECT_LAUNCH] = True
    function = kernel[grid](*args, **meta)
    if compiled is not None and not INTERPRET and _NO_DIRECT_LAUNCH not in compiled:
        compiled[key] = (function, tuple(meta[name] for name in kernel.arg_names[len(args) :]))


def launch_gemm(
    plan: Plan,
    a: torch.Tensor,
    w: torch.Tensor,
    out: torch.Tensor,
    bias: torch.Tensor | None,
    row_scale: torch.Tensor | None,
    col_scale: torch.Tensor | None,
    arrivals: torch.Tensor,
    activation: int,
    dot_precision: str,
    buffers: dict | None = None,
    compiled: dict | None = None,
) -> None:
    """Launch one plan: out[M, N] = epilogue(a[M, K] @ w[N, K]^T).

    int8 (w is int8): a is the quantized x with row_scale, or (plan.fused_quant) x itself.
    buffers / compiled: the caller's split-K workspace and compiled-kernel caches (optional).
    Only allocates; every number is computed by the kernels.
    """
    M, K = a.shape
    N = w.shape[0]
    is_int8 = w.dtype == torch.int8
    unused = out  # any pointer, for arguments the constexpr flags switch off
    meta = dict(
        IS_INT8=is_int8,
        HAS_BIAS=bias is not None,
        ACTIVATION=activation,
        DOT_PRECISION=dot_precision,
        UPCAST=INTERPRET and a.dtype == torch.bfloat16,
        num_warps=plan.num_warps,
        num_stages=plan.num_stages,
    )
    pointers = (out, bias if bias is not None else unused,
                row_scale if row_scale is not None else unused,
                col_scale if is_int8 else unused)  # fmt: skip
    key = (
        plan,
        a.dtype,
        a.stride(),
        a.data_ptr() % 16,
        out.dtype,
        out.stride(),
        out.data_ptr() % 16,
    )
    bm, bn, bk = plan.block_m, plan.block_n, plan.block_k
    if plan.kind == "tiled":
        grid = (cdiv(M, bm) * cdiv(N, bn),)
        args = (a, w, *pointers, M, N, K,
                a.stride(0), a.stride(1), w.stride(0), w.stride(1), out.stride(0), out.stride(1))  # fmt: skip
        meta.update(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=plan.group_m, EVEN_K=K % bk == 0)
        launch(_linear_tiled_kernel, grid, args, meta, compiled, key)
    elif plan.kind == "tma":
        tiles = cdiv(M, bm) * cdiv(N, bn)
        programs = min(tiles, _sm_count(a.device)) if plan.persistent else tiles
        a_desc = TensorDescriptor(a, list(a.shape), list(a.stride()), [bm, bk])
        w_desc = TensorDescriptor(w, list(w.shape), list(w.stride()), [bn, bk])
        args = (a_desc, w_desc, *pointers, M, N, K, out.stride(0), out.stride(1), programs)
        meta.update(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=plan.group_m)
        launch(_linear_tma_kernel, (programs,), args, meta, compiled, key)
    elif plan.kind == "split_k":
        grid = (cdiv(N, bn), plan.split_k, cdiv(M, bm))
        if grid[0] * grid[2] > arrivals.numel():
            raise ValueError(f"split-K plan needs {grid[0] * grid[2]} tile counters")
        partial = unused
        if plan.split_k > 1:
            acc_dtype = torch.int32 if is_int8 else torch.float32
            partial = workspace(buffers, "partial", plan.split_k * M * N, acc_dtype, a.device)
        args = (a, w, *pointers, partial, arrivals, M, N, K,
                a.stride(0), a.stride(1), w.stride(0), w.stride(1), out.stride(0), out.stride(1))  # fmt: skip
        meta.update(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, SPLIT_K=plan.split_k, EVEN_K=K % bk == 0,
                    QUANTIZE_A=is_int8 and a.dtype != torch.int8,
                    QUANT_BLOCK_K=max(16, bk * 16 // bm))  # fmt: skip
        launch(_linear_split_k_kernel, grid, args, meta, compiled, key)
    else:
        raise ValueError(f"unknown plan kind {plan.kind!r}")


def workspace(
    buffers: dict | None, name: str, numel: int, dtype: torch.dtype, device
) -> torch.Tensor:
    """A flat scratch tensor of at least numel elements, kept in `buffers` and grown on demand
    so that steady-state calls allocate nothing."""
    buf = None if buffers is None else buffers.get(name)
    if buf is None or buf.numel() < numel or buf.dtype != dtype or buf.device != device:
        buf = torch.empty(max(numel, 1), dtype=dtype, device=device)
        if buffers is not None:
            buffers[name] = buf
    return buf[:numel]


# ----------------------------------------------------------------------------------------------
# Plan choice: tuned on the first call for a (GPU, dtype, quant, M bucket, N, K), remembered in
# memory and in a JSON file so a second process does not tune again.

_PLANS: dict[str, Plan] = {}
_DISK_READ = False
_TUNING_SECONDS = [0.0]


def tuning_seconds() -> float:
    """Seconds this process spent timing candidate plans (first calls of new shapes)."""
    return _TUNING_SECONDS[0]


def cache_path() -> Path:
    """The plan cache: $OPBENCH_CACHE_DIR/linear_plans.json (default ~/.cache/opbench)."""
    root = os.environ.get("OPBENCH_CACHE_DIR") or os.path.join("~", ".cache", "opbench")
    return Path(root).expanduser() / "linear_plans.json"


def clear_memory_cache() -> None:
    """Forget plans held in memory (the disk cache is read again on the next lookup)."""
    global _DISK_READ
    _PLANS.clear()
    _DISK_READ = False


def _read_disk() -> dict:
    try:
        return json.loads(cache_path().read_text())
    except (OSError, ValueError):
        return {}


def _lookup(key: str) -> Plan | None:
    global _DISK_READ
    if key not in _PLANS and not _DISK_READ:
        _DISK_READ = True
        for k, entry in _read_disk().items():
            _PLANS.setdefault(k, Plan.from_json(entry["plan"]))
    return _PLANS.get(key)


def _remember(key: str, plan: Plan, timings: list[tuple[Plan, float | None, str]]) -> None:
    _PLANS[key] = plan
    path = cache_path()
    entries = _read_disk()  # merge: other processes may have written other shapes meanwhile
    entries[key] = {
        "plan": plan.to_json(),
        "candidates": [{"plan": p.to_json(), "ms": ms, "error": err} for p, ms, err in timings],
    }
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(entries, indent=1, sort_keys=True))
        os.replace(tmp, path)
    except OSError:
        pass  # an unwritable cache only costs a re-tune in the next process


def _device_tag(device: torch.device) -> str:
    if INTERPRET:
        return "interpreter"
    props = _properties(_index(device))
    return f"{props.name}|sm{props.major}{props.minor}|triton-{triton.__version__}"


class PreparedLinear:
    """The callable `prepare_linear` returns: `fn(x, out=None) -> y`, x [..., K] -> y [..., N].

    Holds the prepared weight, fp32 bias and the split-K tile counters. A call only allocates
    (output, workspace) and launches Triton kernels.
    """

    is_int8 = False

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, activation: str,
                 allow_tf32: bool = False) -> None:  # fmt: skip
        if weight.dim() != 2:
            raise ValueError(f"linear weight must be [N, K], got {tuple(weight.shape)}")
        if bias is not None and tuple(bias.shape) != (weight.shape[0],):
            raise ValueError(f"bias must be [{weight.shape[0]}], got {tuple(bias.shape)}")
        self.out_features, self.in_features = weight.shape
        self.activation = activation_code(activation, weight.dtype)  # = the output's dtype
        self.dot_precision = "tf32" if allow_tf32 else "ieee"
        self.weight = self._prepare_weight(weight)
        self.bias = None if bias is None else bias.detach().to(torch.float32).contiguous()
        # One counter per output tile of the split-K kernel (its BLOCK_M covers all rows).
        self.arrivals = torch.zeros(cdiv(self.out_features, 16), dtype=torch.int32,
                                    device=weight.device)  # fmt: skip
        self.tuning_seconds = 0.0
        self._plan_memo: dict[tuple, Plan] = {}
        self._buffers: dict[str, torch.Tensor] = {}  # scratch reused across calls
        self._compiled: dict[tuple, tuple] = {}  # see `launch`

    def _prepare_weight(self, weight: torch.Tensor) -> torch.Tensor:
        if weight.dtype not in (torch.float16, torch.bfloat16, torch.float32):
            raise Unsupported(
                f"linear supports float16/bfloat16/float32 weights, not {weight.dtype}"
            )
        return weight.detach().contiguous()

    def _check_dtype(self, x: torch.Tensor) -> None:
        if x.dtype != self.weight.dtype:
            raise Unsupported(
                f"input dtype {x.dtype} differs from the weight's {self.weight.dtype}"
            )

    def _views(self, x: torch.Tensor, out: torch.Tensor | None):
        if x.shape[-1] != self.in_features:
            raise ValueError(f"input's last dim {x.shape[-1]} != in_features {self.in_features}")
        self._check_dtype(x)
        out_shape = (*x.shape[:-1], self.out_features)
        if out is None:
            out = torch.empty(out_shape, dtype=x.dtype, device=x.device)
        elif tuple(out.shape) != out_shape or out.dtype != x.dtype:
            raise ValueError(
                f"out must be {out_shape} {x.dtype}, got {tuple(out.shape)} {out.dtype}"
            )
        # view() (not reshape) so a strided input is rejected instead of silently copied.
        x2 = x if x.dim() == 2 else x.view(-1, self.in_features)
        out2 = out if out.dim() == 2 else out.view(-1, self.out_features)
        return x2, out2, out

    def __call__(self, x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        x2, out2, out = self._views(x, out)
        if x2.shape[0] > 0:
            self.launch(self.plan_for(x2, out2), x2, out2)
        return out

    def launch(self, plan: Plan, x2: torch.Tensor, out2: torch.Tensor) -> None:
        """Run one plan on 2-D views (tests and the benchmark call this with every candidate)."""
        launch_gemm(plan, x2, self.weight, out2, self.bias, None, None, self.arrivals,
                    self.activation, self.dot_precision, self._buffers, self._compiled)  # fmt: skip

    def _tma_ok(self, x2: torch.Tensor) -> bool:
        return tma_ok(x2, self.weight)

    def candidates(self, x2: torch.Tensor, every_kind: bool = False) -> list[Plan]:
        """Plans worth timing for x2's row count (every kernel kind when every_kind)."""
        m = x2.shape[0]
        elem_bytes = self.weight.element_size()
        tiles = tile_candidates(elem_bytes, self._tma_ok(x2))
        few_rows = split_k_candidates(m, elem_bytes, fused_quant=self.is_int8)
        if every_kind:
            return few_rows + tiles
        if m <= SMALL_M:
            return few_rows + [p for p in tiles if p.block_m == 64]
        return tiles

    def plan_for(self, x2: torch.Tensor, out2: torch.Tensor) -> Plan:
        m_bucket = next_power_of_2(x2.shape[0])
        tma = self._tma_ok(x2)
        memo_key = (x2.device, x2.dtype, m_bucket, tma)
        if memo_key in self._plan_memo:  # the per-call fast path: no string keys, no dict merges
            return self._plan_memo[memo_key]
        precision = "-tf32" if x2.dtype == torch.float32 and self.dot_precision == "tf32" else ""
        key = "|".join([
            _device_tag(x2.device), f"{x2.dtype}{precision}", "int8" if self.is_int8 else "none",
            f"M{m_bucket}", f"N{self.out_features}", f"K{self.in_features}",
            "tma" if tma else "notma",
        ])  # fmt: skip
        plan = _lookup(key)
        if plan is None:
            candidates = self.candidates(x2)
            plan = candidates[0] if INTERPRET else self._tune(key, candidates, x2, out2)
            _PLANS[key] = plan
        self._plan_memo[memo_key] = plan
        return plan

    def _tune(self, key: str, candidates: list[Plan], x2: torch.Tensor, out2: torch.Tensor) -> Plan:
        from triton.testing import do_bench

        start = time.perf_counter()
        timings: list[tuple[Plan, float | None, str]] = []
        for plan in candidates:
            try:
                ms = do_bench(lambda p=plan: self.launch(p, x2, out2), warmup=5, rep=20,
                              return_mode="median")  # fmt: skip
                timings.append((plan, float(ms), ""))
            except Exception as err:  # a config the compiler rejects (e.g. out of shared memory)
                timings.append((plan, None, f"{type(err).__name__}: {str(err)[:200]}"))
        torch.cuda.synchronize(x2.device)
        elapsed = time.perf_counter() - start
        self.tuning_seconds += elapsed
        _TUNING_SECONDS[0] += elapsed
        ran = [(p, ms) for p, ms, _ in timings if ms is not None]
        if not ran:
            raise Unsupported(f"no linear plan compiled for {key}: {timings[0][2]}")
        best = min(ran, key=lambda item: item[1])[0]
        _remember(key, best, timings)
        return best


def prepare_linear(
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    *,
    activation: str = "none",
    quant: str = "none",
    allow_tf32: bool = False,
) -> PreparedLinear:
    """Build-time preparation of y = act(x @ weight^T + bias); returns `fn(x, out=None)`.

    quant="int8": W8A8 (see linear_int8.py). Float32 uses true fp32 dots unless allow_tf32.
    """
    if activation not in ACTIVATION_CODES:
        raise Unsupported(
            f"linear activation {activation!r} is not one of {sorted(ACTIVATION_CODES)}"
        )
    if quant == "int8":
        from opbench.kernels.linear_int8 import Int8Linear

        return Int8Linear(weight, bias, activation)
    if quant != "none":
        raise Unsupported(f"linear quant {quant!r} is not supported (none | int8)")
    return PreparedLinear(weight, bias, activation, allow_tf32)
