"""Why does do_bench read higher than opbench's timer on large GEMMs? Alternate the two on the
same callable and record the SM clock after each, so a clock difference shows up if it is one.

Usage (GPU machine): python3 bench/timer_investigate.py
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
import triton

from opbench.measure.timer import time_callable
from opbench.results.stats import median
from opbench.spec.model import TimingSpec


def sm_clock() -> int:
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
        return pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)
    except Exception:
        pass
    import subprocess

    try:
        out = subprocess.run(
            [
                "nvidia-smi",
                "--query-gpu=clocks.sm",
                "--format=csv,noheader,nounits",
                "-i",
                str(torch.cuda.current_device()),
            ],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout
        return int(out.strip().splitlines()[0])
    except Exception:
        return -1


def ours(fn, **kw) -> float:
    timing = TimingSpec(**kw)
    return median([t for r in time_callable(fn, timing, "cuda").rounds for t in r])


def main() -> None:
    torch.manual_seed(0)
    cases = {
        "linear 2048x4096->11008 fp16": (
            torch.randn(2048, 4096, device="cuda", dtype=torch.float16),
            torch.randn(11008, 4096, device="cuda", dtype=torch.float16) / 64,
        ),
        "linear 2048x11008->4096 fp16": (
            torch.randn(2048, 11008, device="cuda", dtype=torch.float16),
            torch.randn(4096, 11008, device="cuda", dtype=torch.float16) / 100,
        ),
    }
    for name, (x, w) in cases.items():
        fn = lambda: F.linear(x, w)  # noqa: E731
        fn()
        torch.cuda.synchronize()
        print(f"\n{name}")
        for label, measure in (
            ("opbench default", lambda: ours(fn)),
            (
                "do_bench",
                lambda: triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median"),
            ),
            ("opbench 1 round", lambda: ours(fn, rounds=1)),
            (
                "do_bench",
                lambda: triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median"),
            ),
            ("opbench no flush", lambda: ours(fn, flush_l2=False)),
            (
                "do_bench rep=500",
                lambda: triton.testing.do_bench(fn, warmup=25, rep=500, return_mode="median"),
            ),
            ("opbench default", lambda: ours(fn)),
        ):
            value = measure()
            print(f"  {label:18s} {value:.4f} ms   SM clock after: {sm_clock()} MHz")


if __name__ == "__main__":
    main()
