"""Time a zero-argument callable, the way a GPU kernel should be timed.

On CUDA: a pair of events around every call; the L2 cache flushed before each call, outside the
events, so every call starts cold as it would inside a model; warm-up by time; `rounds` rounds of
`rep_ms` each; every sample kept. Optionally the call is captured once in a CUDA graph and the
graph is replayed, which removes Python launch overhead from the figure.

On the CPU: perf_counter with the same structure. Interpreted Triton goes through the same
path, and its results are marked as not being performance figures by the caller.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from opbench.spec.model import TimingSpec

# Bytes written to evict L2 between calls; twice the largest L2 of current GPUs (H200: 60 MB).
DEFAULT_FLUSH_BYTES = 256 * 1024 * 1024
MAX_CALLS_PER_ROUND = 20_000


@dataclass(frozen=True)
class Measurement:
    rounds: tuple[tuple[float, ...], ...]
    timer: str


def _calls_per_round(estimate_ms: float, rep_ms: float) -> int:
    if estimate_ms <= 0:
        return MAX_CALLS_PER_ROUND
    return max(1, min(MAX_CALLS_PER_ROUND, int(rep_ms / estimate_ms)))


def time_cpu(fn: Callable[[], Any], timing: TimingSpec) -> Measurement:
    clock = time.perf_counter
    start = clock()
    fn()
    first_ms = (clock() - start) * 1e3
    warm_until = clock() + timing.warmup_ms / 1e3
    while clock() < warm_until:
        fn()
    estimate_ms = first_ms
    if timing.warmup_ms > 0:
        s = clock()
        fn()
        estimate_ms = (clock() - s) * 1e3
    per_round = _calls_per_round(estimate_ms, timing.rep_ms)
    rounds = []
    for _ in range(timing.rounds):
        samples = []
        for _ in range(per_round):
            s = clock()
            fn()
            samples.append((clock() - s) * 1e3)
        rounds.append(tuple(samples))
    return Measurement(tuple(rounds), "perf_counter")


def flush_buffer(device: str, nbytes: int | None = None):
    import torch

    if nbytes is None:
        props = torch.cuda.get_device_properties(device)
        l2 = getattr(props, "L2_cache_size", 0) or 0
        nbytes = max(DEFAULT_FLUSH_BYTES, 4 * l2)
    return torch.empty(nbytes, dtype=torch.int8, device=device)


def time_cuda(fn: Callable[[], Any], timing: TimingSpec, device: str = "cuda") -> Measurement:
    import torch

    cache = flush_buffer(device) if timing.flush_l2 else None
    timer = "cuda-events"
    call = fn
    if timing.cuda_graph:
        call = _graph_replay(fn)
        timer = "cuda-graph"

    def flush() -> None:
        if cache is not None:
            cache.zero_()

    # Warm-up by time, also giving an estimate of one call to size the rounds.
    call()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        call()
    end.record()
    torch.cuda.synchronize()
    estimate_ms = start.elapsed_time(end) / 5
    deadline = time.perf_counter() + timing.warmup_ms / 1e3
    while time.perf_counter() < deadline:
        flush()
        call()
    torch.cuda.synchronize()
    per_round = _calls_per_round(estimate_ms, timing.rep_ms)

    rounds = []
    for _ in range(timing.rounds):
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(per_round)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(per_round)]
        for i in range(per_round):
            flush()
            starts[i].record()
            call()
            ends[i].record()
        torch.cuda.synchronize()
        rounds.append(tuple(s.elapsed_time(e) for s, e in zip(starts, ends, strict=False)))
    return Measurement(tuple(rounds), timer)


def _graph_replay(fn: Callable[[], Any]) -> Callable[[], Any]:
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay


def time_callable(fn: Callable[[], Any], timing: TimingSpec, device: str) -> Measurement:
    if device.startswith("cuda"):
        return time_cuda(fn, timing, device)
    return time_cpu(fn, timing)
