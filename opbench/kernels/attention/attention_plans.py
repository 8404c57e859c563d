"""Tile candidates of the attention kernels (fp16/bf16/fp32 and int8), and the TMA checks.

A tile is (BLOCK_M, BLOCK_N, num_warps, num_stages, maxnreg, USE_DESC): the tiles that won at
least one shape of the (since retired) bench/attention.py on the H200 out of a wider set
(docs/perf/attention.md).
Each compiles for sm_90 without spills. Two programs per SM (64-row blocks on 4 warps, or a
128-register cap) let the scheduler interleave one program's softmax with the other's matrix
phase, which one 8-warp program cannot. Head dims 16, 32 and 256 are compiled but unmeasured.
fp32 runs its dots on FMA units (ieee): small tiles only.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from opbench.kernels.host import INTERPRET
from opbench.kernels.tuning import Config

Tile = tuple[int, int, int, int, "int | None", bool]
_SMALL_HEAD_TILES: list[Tile] = [
    (64, 64, 4, 3, None, False),
    (128, 64, 8, 3, None, False),
    (128, 64, 8, 4, None, True),
]
FP16_TILES: dict[int, list[Tile]] = {
    16: _SMALL_HEAD_TILES,
    32: _SMALL_HEAD_TILES,
    64: _SMALL_HEAD_TILES,
    128: [(128, 64, 8, 2, 128, False), (128, 64, 8, 2, 128, True), (64, 64, 4, 3, None, False)],
    256: [(64, 64, 4, 2, None, False), (128, 32, 8, 2, None, False), (64, 32, 4, 3, None, False)],
}
FP32_TILES: list[Tile] = [(32, 16, 4, 2, None, False), (32, 16, 8, 2, None, False)]
_SMALL_HEAD_INT8_TILES: list[Tile] = [
    (64, 64, 4, 3, None, False),
    (64, 64, 4, 4, None, False),
    (128, 64, 8, 3, 128, False),
]
INT8_TILES: dict[int, list[Tile]] = {
    16: _SMALL_HEAD_INT8_TILES,
    32: _SMALL_HEAD_INT8_TILES,
    64: _SMALL_HEAD_INT8_TILES,
    128: [(128, 64, 8, 2, 128, True), (64, 64, 4, 3, None, True)],
    256: [(64, 32, 4, 3, None, False), (64, 64, 4, 2, None, False)],
}
# fp8 (e4m3) QK^T and PV: the 8-bit MMA needs K >= 32 (head dim and key tile). The candidates
# bracket the int8 winners (one and two programs per SM, 64- and 128-key steps), all with TMA,
# which the quantized k8 / vt8 buffers always allow; 64 x 64 on 4 warps won every shape of the
# first H100 run, 64 x 128 was added after it.
_SMALL_HEAD_FP8_TILES: list[Tile] = [
    (64, 64, 4, 3, None, True),
    (64, 128, 4, 3, None, True),
    (128, 64, 8, 3, 128, True),
    (128, 128, 8, 3, None, True),
]
FP8_TILES: dict[int, list[Tile]] = {
    32: _SMALL_HEAD_FP8_TILES,
    64: _SMALL_HEAD_FP8_TILES,
    128: [
        (128, 64, 8, 2, 128, True),
        (128, 128, 8, 2, None, True),
        (64, 64, 4, 3, None, True),
        (128, 64, 8, 3, None, True),
        (64, 128, 4, 2, None, True),
    ],
    256: [(64, 64, 4, 2, None, True), (64, 32, 4, 3, None, True)],
}
INTERPRET_TILE: Tile = (32, 16, 4, 1, None, False)


def tile_config(tile: Tile, lazy: bool | None = False) -> Config:
    """The config of a tile; lazy: the LAZY constexpr (conditional rescaling) of the kernels
    that take it, None for those that do not."""
    bm, bn, warps, stages, maxnreg, desc = tile
    extra = {} if lazy is None else {"LAZY": lazy}
    return Config.of(BLOCK_M=bm, BLOCK_N=bn, USE_DESC=desc, num_warps=warps, num_stages=stages,
                     maxnreg=maxnreg, **extra)  # fmt: skip


# Conditional rescaling (LAZY) lost on every shape when tuned beside each tile on an H100
# (26 fp16/bf16/int8 shapes, docs/perf/attention.md): one CTA-wide reduction per step costs
# more than the rescales it skips. Kept as a kernel option (tested), not tuned.
LAZY_CHOICES: tuple[bool, ...] = (False,)


def candidates(
    tiles: Sequence[Tile], desc_ok: bool, lazy: Sequence[bool | None] = (None,)
) -> list[Config]:
    """The configs of `tiles` (each with every `lazy` choice); where descriptors cannot
    address the tensors, their TMA candidates run with pointer loads instead. Under the
    interpreter, one small tile."""
    if INTERPRET:
        return [tile_config(INTERPRET_TILE, lazy[0] if lazy[0] is None else False)]
    if not desc_ok:
        tiles = [t[:5] + (False,) for t in tiles]
    return [tile_config(t, choice) for t in dict.fromkeys(tiles) for choice in lazy]


def float_candidates(dtype: torch.dtype, head_dim: int, desc_ok: bool) -> list[Config]:
    if dtype == torch.float32:
        return candidates(FP32_TILES, desc_ok=False, lazy=(False,))
    return candidates(FP16_TILES[head_dim], desc_ok, LAZY_CHOICES)


def int8_candidates(head_dim: int, desc_ok: bool) -> list[Config]:
    return candidates(INT8_TILES[head_dim], desc_ok, LAZY_CHOICES)


def fp8_candidates(head_dim: int, desc_ok: bool) -> list[Config]:
    return candidates(FP8_TILES[head_dim], desc_ok)


def descriptors_usable(*tensors: torch.Tensor) -> bool:
    """TMA needs a Hopper+ GPU, unit last stride, 16-byte aligned bases and other strides."""
    if INTERPRET:
        return True
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] < 9:
        return False
    for t in tensors:
        size = t.element_size()
        if t.stride(-1) != 1 or t.data_ptr() % 16:
            return False
        if any((s * size) % 16 for s in t.stride()[:-1]):
            return False
    return True


def _tma_scratch(size: int, alignment: int, stream: int | None) -> torch.Tensor:
    """Global scratch where device-side tensor descriptors are built."""
    return torch.empty(size, dtype=torch.int8, device="cuda")


_allocator_set = False


def ensure_descriptor_allocator() -> None:
    """Device-side descriptors need a scratch allocator; install ours once."""
    global _allocator_set
    if not _allocator_set and not INTERPRET:
        import triton

        triton.set_allocator(_tma_scratch)
        _allocator_set = True
