"""Plans of the split-K decode attention (attention_decode.py): how many splits of the keys,
how many query rows per block, and the tile candidates the tuner times. Host-side arithmetic
only; the kernels live in attention_decode.py."""

from __future__ import annotations

import torch

from opbench.kernels.host import INTERPRET, cdiv, next_power_of_2
from opbench.kernels.tuning import Config

# Fewest keys one split walks: below this the combine's traffic and the launch overhead
# outweigh the parallelism gained.
MIN_CHUNK = 256
# Chunks are multiples of the largest key tile, so the split count does not depend on the tile.
CHUNK_ALIGN = 128
# Programs per SM aimed at when choosing the split count (enough waves to balance the tail).
PROGRAMS_PER_SM = 4
_SM_COUNT: dict[int, int] = {}


def sm_count(device: torch.device) -> int:
    if INTERPRET or device.type != "cuda":
        return 4
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _SM_COUNT:
        _SM_COUNT[index] = torch.cuda.get_device_properties(index).multi_processor_count
    return _SM_COUNT[index]


def rows_per_block(num_rows: int) -> int:
    """16 (the smallest tensor-core tile) to 64 rows: a decode step's S G rows in one block."""
    return min(max(next_power_of_2(num_rows), 16), 64)


def split_count(kv_len: int, programs: int, sms: int) -> tuple[int, int]:
    """(splits, chunk): enough programs for PROGRAMS_PER_SM per SM, chunks of at least
    MIN_CHUNK keys, a multiple of CHUNK_ALIGN."""
    want = max(1, min(cdiv(PROGRAMS_PER_SM * sms, programs), cdiv(kv_len, MIN_CHUNK)))
    chunk = cdiv(cdiv(kv_len, want), CHUNK_ALIGN) * CHUNK_ALIGN
    return cdiv(kv_len, chunk), chunk


def decode_candidates(head_dim: int, dtype: torch.dtype) -> list[Config]:
    """Key tiles and pipelining depths: the loop streams K and V, so deeper is the lever."""
    if INTERPRET:
        return [Config.of(BLOCK_N=16, num_warps=4, num_stages=1)]
    if dtype == torch.float32:
        return [Config.of(BLOCK_N=32, num_warps=4, num_stages=2)]
    wide = [] if head_dim > 128 else [Config.of(BLOCK_N=128, num_warps=4, num_stages=3)]
    return [
        Config.of(BLOCK_N=64, num_warps=4, num_stages=3),
        Config.of(BLOCK_N=64, num_warps=4, num_stages=4),
        *wide,
    ]


def split_options(kv_len: int, programs: int, sms: int) -> list[int]:
    """Split counts worth timing: split_count's, half and twice it (chunks >= CHUNK_ALIGN)."""
    base, _ = split_count(kv_len, programs, sms)
    most = cdiv(kv_len, CHUNK_ALIGN)
    return sorted({max(1, base // 2), base, min(2 * base, most)})


def chunk_for(kv_len: int, splits: int) -> tuple[int, int]:
    """(splits, chunk) with chunk a multiple of CHUNK_ALIGN covering kv_len in `splits` parts."""
    chunk = cdiv(cdiv(kv_len, splits), CHUNK_ALIGN) * CHUNK_ALIGN
    return cdiv(kv_len, chunk), chunk


def tuning_candidates(
    q_shape: tuple[int, ...], kv_shape: tuple[int, ...], dtype: torch.dtype, device: torch.device
) -> list[Config]:
    """Tile x split count: the split kernel and the combine are timed together."""
    batch, q_len, heads, head_dim = q_shape
    kv_len, kv_heads = kv_shape[1], kv_shape[2]
    rows = q_len * (heads // kv_heads)
    programs = cdiv(rows, rows_per_block(rows)) * batch * kv_heads
    options = split_options(kv_len, programs, sm_count(device))
    if INTERPRET:
        options = options[1:2] if len(options) > 1 else options
    return [Config.of(SPLITS=n, num_warps=c.num_warps, num_stages=c.num_stages, **c.kwargs)
            for c in decode_candidates(head_dim, dtype) for n in options]  # fmt: skip
