"""Gluon pieces for Hopper (sm_90) that more than one kernel family uses: the TMA load into
shared memory, the CTA-wide barrier, and the ping-pong turns by which two consumer
warpgroups take turns to issue their MMAs (the warp-specialized attention of
attention/attention_ws_kernel.py and the GEMM of gemm/gemm_ws.py).

Compiled only for compute capability 9.x (Gluon has no interpreter path).
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma

# The TMA load into shared memory: `async_load` since Triton 3.7, where the 3.6 name
# `async_copy_global_to_shared` was removed; same arguments (descriptor, coordinates, barrier,
# destination).
tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
# The CTA-wide barrier: `gl.barrier` since Triton 3.7 (`gl.thread_barrier` in 3.6).
cta_barrier = getattr(gl, "barrier", None) or gl.thread_barrier


@gluon.jit
def take_turn(turns, wg, t, PINGPONG: gl.constexpr):
    """Wait until consumer `wg` may issue its t-th MMA pair: consumer 0 goes first (its first
    wait is on a fresh barrier's parity 1), consumer 1 after consumer 0's t-th hand-over."""
    if PINGPONG:
        mbarrier.wait(turns.index(wg), (t & 1) ^ (1 - wg))


@gluon.jit
def pass_turn(turns, wg, PINGPONG: gl.constexpr):
    """Hand the turn to the other consumer (its `take_turn` waits for this arrival)."""
    if PINGPONG:
        mbarrier.arrive(turns.index(1 - wg), count=1)
