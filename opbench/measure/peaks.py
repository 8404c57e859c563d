"""The device's ceilings for the roofline, measured once per GPU run (about a second).

A large device-to-device copy (bytes read + written per second) and a large bf16 matmul on
random data (FLOP/s), each timed with CUDA events over a few repetitions after a warm-up;
the best repetition is the ceiling. The label says these are measured and on what sizes.
"""

from __future__ import annotations

from typing import Any

COPY_BYTES = 1 << 30  # 1 GiB each way: far beyond L2, so the copy streams from HBM
MATMUL_N = 8192  # 8192^3 bf16: about 1.1 TFLOP, large enough to reach the tensor-core peak
REPEATS = 10


def _best_ms(fn, repeats: int = REPEATS) -> float:
    import torch

    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return min(times)


def _copy_ms(device: str) -> float:
    import torch

    src = torch.randint(0, 127, (COPY_BYTES,), dtype=torch.int8, device=device)
    dst = torch.empty_like(src)
    return _best_ms(lambda: dst.copy_(src))


def _matmul_ms(device: str) -> float:
    import torch

    gen = torch.Generator(device=device).manual_seed(0)
    shape = (MATMUL_N, MATMUL_N)
    a = torch.randn(shape, device=device, dtype=torch.bfloat16, generator=gen)
    b = torch.randn(shape, device=device, dtype=torch.bfloat16, generator=gen)
    return _best_ms(lambda: torch.mm(a, b))


def measure_peaks(device: str) -> dict[str, Any]:
    """{"tflops", "gbps", "label"} measured on `device` (buffers freed before returning)."""
    import torch

    with torch.cuda.device(torch.device(device)):
        copy_ms = _copy_ms(device)
        mm_ms = _matmul_ms(device)
        torch.cuda.empty_cache()
    n = MATMUL_N
    label = (
        f"measured: d2d copy of {COPY_BYTES >> 20} MiB (read + written), "
        f"bf16 matmul {n}x{n}x{n} on random data, best of {REPEATS}"
    )
    return {
        "tflops": round(2 * n**3 / mm_ms / 1e9, 1),
        "gbps": round(2 * COPY_BYTES / copy_ms / 1e6, 1),
        "label": label,
    }
