"""The named structures the warp-specialized Gluon GEMM (gemm_ws.py) hands its partitions:
what travels together from the kernel to the producer and the consumers, and on to the
epilogue (gemm_ws_epilogue.py). Runtime values only: the constexprs stay the helpers' own
parameters (a constexpr put in a tuple stays one only while the tuple is built in the call's
arguments; bound to a name first, it becomes a runtime value, Triton 3.6 and 3.9).
"""

from __future__ import annotations

from typing import NamedTuple

from triton.experimental.gluon import language as gl


class Ring(NamedTuple):
    """The operand ring in shared memory, which the producer fills and the consumers read:
    STAGES slots of A tile(s) and a W tile, and per slot the mbarriers that hand it over
    (ready: its bytes landed; empty: its readers are done with it)."""

    a_smem: gl.shared_memory_descriptor  # [A tiles per slot * STAGES, WG_M, BLOCK_K]
    w_smem: gl.shared_memory_descriptor  # [STAGES, BLOCK_N, BLOCK_K]
    ready: gl.shared_memory_descriptor  # [STAGES, 1] mbarriers
    empty: gl.shared_memory_descriptor  # [STAGES, 1] mbarriers


class Walk(NamedTuple):
    """Which tiles a program visits, in which order: the GEMM's sizes and the number of
    programs the tiles are dealt over. Producer and consumers walk the same tiles."""

    M: gl.tensor
    N: gl.tensor
    K: gl.tensor
    num_programs: gl.tensor


class OutputTiles(NamedTuple):
    """A consumer's way out: y's and the residual's TMA descriptors (blocks of a tile's
    column half), the shared-memory tiles the epilogue writes and the residual lands in
    ([2 consumers * C_BUFS, WG_M, BLOCK_N / 2]), and each consumer's residual mbarrier."""

    c_desc: object
    res_desc: object
    c_smem: gl.shared_memory_descriptor
    res_bars: gl.shared_memory_descriptor


class EpilogueVectors(NamedTuple):
    """The vectors the epilogue reads, each only where its flag says: the bias b [N]
    (HAS_BIAS) and the dequantizing scales sx [M] and sw [N] (SCALED), all fp32."""

    bias_ptr: gl.tensor
    row_scale_ptr: gl.tensor
    col_scale_ptr: gl.tensor
