"""Which read path and tile a convolution runs: its candidate plans.

A plan is a `tuning.Config` with meta PATH ("direct" | "nhwc" | "gather" | "pointwise", see
conv.py), BLOCK_M, BLOCK_N, BLOCK_K (the pointwise kernel of conv_pointwise.py: BLOCK_O output
channels, BLOCK_P pixels, BLOCK_K), and num_warps / num_stages. Every candidate for an
input signature is timed on its first bind (like cudnn.benchmark); under the CPU
interpreter the one small tile runs untimed.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from opbench.kernels.host import INTERPRET, next_power_of_2
from opbench.kernels.tuning import Config

# Below this many input channels, channel blocks would be mostly padding: use the gather path.
MIN_CHANNELS_FOR_BLOCKS = 16
# A tile: (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages). Hopper's wgmma wants BLOCK_M a
# multiple of 64.
Tile = tuple[int, int, int, int, int]
FLOAT_TILES: tuple[Tile, ...] = (
    (128, 64, 64, 4, 4),
    (128, 128, 64, 8, 3),
    (64, 128, 64, 4, 4),
    (128, 256, 64, 8, 3),
    (256, 64, 64, 8, 3),
    (64, 64, 64, 4, 4),
)
# Pointwise (1x1 on NCHW) tiles: (BLOCK_O, BLOCK_P, BLOCK_K, num_warps, num_stages). ResNet's
# 64- and 128-deep layers take one or two K steps and are bound by the output store: wide
# tiles; the deep ones (C 512..2048) are GEMMs with a K loop worth pipelining.
POINTWISE_TILES: tuple[Tile, ...] = (
    (128, 128, 64, 4, 3),
    (128, 128, 64, 8, 3),
    (128, 256, 64, 8, 3),
    (256, 128, 64, 8, 3),
    (64, 256, 64, 4, 3),
    (64, 128, 64, 4, 4),
    (128, 64, 64, 4, 4),
    (64, 64, 64, 4, 4),
    # Two stages: less shared memory, so more programs per SM overlap one's epilogue (the
    # skip read and the store) with another's loads, for the one- and two-step K loops.
    (128, 128, 64, 4, 2),
    (128, 128, 64, 8, 2),
    (64, 128, 64, 4, 2),
)
# Shallow 1x1 convs (16..32 input channels: MobileNetV2's first projections and expansions)
# take a single 32-deep K step; a 64-deep tile would be half padding.
SHALLOW_POINTWISE_TILES: tuple[Tile, ...] = (
    (64, 128, 32, 4, 3),
    (128, 128, 32, 4, 3),
    (64, 256, 32, 4, 3),
    (128, 64, 32, 4, 3),
    (64, 64, 32, 4, 3),
)
# The C=3 stem: K = 147 in three 64-deep steps won on an H100 (2026-11-25); its neighbours.
GATHER_TILES: tuple[Tile, ...] = (
    (128, 64, 32, 4, 4),
    (64, 64, 64, 4, 4),
    (128, 64, 16, 4, 4),
    (64, 64, 64, 4, 3),
    (64, 64, 64, 8, 4),
    (128, 64, 64, 8, 3),
    (64, 64, 32, 4, 4),
)
INT8_TILES: tuple[Tile, ...] = (
    (128, 128, 128, 8, 3),
    (128, 64, 128, 4, 4),
    (64, 128, 128, 4, 4),
    (128, 256, 128, 8, 3),
)
FP32_TILES: tuple[Tile, ...] = ((64, 64, 32, 4, 3),)
INTERPRET_TILE: Tile = (32, 32, 32, 4, 1)


def fitting_tiles(tiles: Sequence[Tile], cout: int, channels: int, gather: bool) -> list[Tile]:
    """Drop tiles much wider than Cout or deeper than C (mostly masked work)."""
    if INTERPRET:
        return [INTERPRET_TILE]
    kept = [
        t
        for t in tiles
        if t[1] <= max(64, next_power_of_2(cout))
        and (gather or t[2] <= max(32, next_power_of_2(channels)))
    ]
    return kept or [min(tiles, key=lambda t: t[0] * t[1])]


def tile_plan(path: str, tile: Tile) -> Config:
    block_m, block_n, block_k, warps, stages = tile
    return Config.of(PATH=path, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k,
                     num_warps=warps, num_stages=stages)  # fmt: skip


def pointwise_plans(cout: int, pixels: int, channels: int, dtype: torch.dtype) -> list[Config]:
    """The pointwise kernel's tiles that fit Cout, the P = OH*OW pixels and C."""
    if INTERPRET:
        tiles = [INTERPRET_TILE]
    elif dtype == torch.float32:
        tiles = [FP32_TILES[0]]
    else:
        table = POINTWISE_TILES if channels > 32 else SHALLOW_POINTWISE_TILES
        tiles = [t for t in table
                 if t[0] <= max(64, next_power_of_2(cout)) and t[1] <= max(64, next_power_of_2(pixels))
                 and t[2] <= max(32, next_power_of_2(channels))]  # fmt: skip
        # Never none: a small layer still runs, on the table's smallest tile.
        tiles = tiles or [min(table, key=lambda t: t[0] * t[1])]
    return [Config.of(PATH="pointwise", BLOCK_O=o, BLOCK_P=p, BLOCK_K=k, num_warps=warps,
                      num_stages=stages) for o, p, k, warps, stages in tiles]  # fmt: skip


def float_paths(x: torch.Tensor, geometry: dict, forced: str) -> list[str]:
    """The read paths worth trying for x (or the one `forced`, unless "auto")."""
    g = geometry
    pointwise_ok = (g["KH"], g["KW"], g["PH"], g["PW"]) == (1, 1, 0, 0)
    if forced == "pointwise" and not pointwise_ok:
        raise ValueError("the pointwise path needs a 1x1 kernel and no padding")
    if forced != "auto":
        return [forced]
    c, hw = x.shape[1], x.shape[2] * x.shape[3]
    if c < MIN_CHANNELS_FOR_BLOCKS:
        return ["gather"]
    if pointwise_ok and x.stride(3) == 1:
        if (g["SH"], g["SW"]) != (1, 1):  # the pointwise kernel's strided gathers lose here
            return ["direct", "nhwc"]
        # Pixel runs not a multiple of 8 (7x7, 14x14) cannot load 16 bytes at a time: the
        # NHWC copy + channel-block path may win there.
        return ["pointwise"] + (["nhwc"] if hw % 8 else [])
    if x.stride(1) == 1 or x.stride(3) == 1:
        return ["direct", "nhwc"]
    return ["direct"]


def output_pixels(x: torch.Tensor, geometry: dict) -> int:
    """OH*OW of an unpadded 1x1 conv of x."""
    return ((x.shape[2] - 1) // geometry["SH"] + 1) * ((x.shape[3] - 1) // geometry["SW"] + 1)


def float_candidates(
    x: torch.Tensor, cout: int, geometry: dict, dtype: torch.dtype, forced: str
) -> list[Config]:
    plans = []
    c = x.shape[1]
    for path in float_paths(x, geometry, forced):
        if path == "pointwise":
            plans += pointwise_plans(cout, output_pixels(x, geometry), c, dtype)
            continue
        table = GATHER_TILES if path == "gather" else FLOAT_TILES
        table = FP32_TILES if dtype == torch.float32 else table
        plans += [tile_plan(path, t) for t in fitting_tiles(table, cout, c, path == "gather")]
    return plans


def int8_candidates(channels: int, cout: int) -> list[Config]:
    """int8 reads x as NHWC int8 (channel blocks) or, for few channels, gathers."""
    gather = channels < MIN_CHANNELS_FOR_BLOCKS
    path = "gather" if gather else "nhwc"
    return [tile_plan(path, t) for t in fitting_tiles(INT8_TILES, cout, channels, gather)]
