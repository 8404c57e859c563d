"""The memory layout the torch peer runs convolutions in, chosen as a PyTorch user at their best
would: `torch.backends.cudnn.benchmark = True` and channels_last (PyTorch's performance guide),
unless NCHW is faster for this layer or model, which is then the baseline.

On CUDA both layouts are timed at build (short L2-flushed rounds, median) and the faster kept;
the note says which, with both times. On the CPU nothing is timed: NCHW, unless the suite asks
for channels_last (`channels_last: true` on a conv layer), so runs stay deterministic.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from opbench.spec.model import TimingSpec

CHANNELS_LAST, NCHW = "channels_last", "NCHW"
#: Timing used at build to choose a layout: short, L2 flushed like the run.
LAYOUT_TIMING = TimingSpec(warmup_ms=10.0, rep_ms=20.0, rounds=3, flush_l2=True)


def use_cudnn_benchmark(device: str) -> None:
    """cuDNN picks its fastest algorithm per shape (on its first call, before any timing), in
    the precision the layer declares: PyTorch lets cuDNN run float32 convolutions in TF32 by
    default (`cudnn.allow_tf32`, unlike its matmuls), and TF32's 10-bit mantissa fails float32's
    tolerance (an H200's quickstart cnn conv2: relative L2 1.8e-4 > 1e-4 when benchmark mode
    picked a TF32 algorithm), so a float32 peer would be timed at a precision nobody checked.
    16-bit convolutions are unaffected (TF32 applies to float32 operands only)."""
    if device.startswith("cuda"):
        import torch

        torch.backends.cudnn.benchmark = True
        torch.backends.cudnn.allow_tf32 = False


def median_ms(fn: Callable[[], Any], device: str) -> float:
    """The median time of fn() over short rounds, grad mode off."""
    import torch

    from opbench.measure.timer import time_callable

    with torch.no_grad():
        measurement = time_callable(fn, LAYOUT_TIMING, device)
    samples = sorted(t for r in measurement.rounds for t in r)
    return samples[len(samples) // 2]


def faster_layout(variants: Mapping[str, Callable[[], Any]], device: str) -> tuple[str, str]:
    """The faster of the layouts `variants` (name -> a call in that layout) on `device`, and
    the note that says so with every time."""
    return faster_of({name: median_ms(fn, device) for name, fn in variants.items()})


def faster_of(times: Mapping[str, float]) -> tuple[str, str]:
    """The layout of the least time (ms) in `times`, and the note that says so with each."""
    best = min(times, key=times.get)
    each = ", ".join(f"{name} {ms:.4f} ms" for name, ms in times.items())
    return best, f"{best}, the faster at build ({each})"


def channels_last(x: Any) -> Any:
    import torch

    return x.contiguous(memory_format=torch.channels_last) if x.dim() == 4 else x
