"""On the GPU: device time stays the kernel's when the host spends 200 us before launching it.

A test layer busy-waits on the host for --delay-us, then launches a short kernel. It is timed
by opbench's CUDA timer (flush, GPU-side hold, start event, call, end event) and compared with
the same kernel launched without the delay. As a control, the delayed layer is also timed with
the hold switched off (the flush alone before the start event, the timer before issue #15):
there the host delay leaks into the device time.

    python bench/host_delay.py [--delay-us 200] [--out host_delay.json]

Exit 0 when the delayed layer's device median is within 10% (+1 us) of the kernel alone and
its host_ms is at least the delay; 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from opbench.measure.timer_cuda import time_cuda
from opbench.results.model import LayerResult
from opbench.results.stats import TimingStats
from opbench.spec.model import TimingSpec


def busy_wait_us(us: float) -> None:
    until = time.perf_counter() + us / 1e6
    while time.perf_counter() < until:
        pass


def row(name: str, m) -> dict:
    stats = TimingStats(m.rounds)
    result = LayerResult(
        "bench", name, "add", "bench", "ok", "float32", (1,), (1,),
        samples_ms=m.rounds, host_ms=m.host_ms, stream_ms=m.stream_ms,
    )  # fmt: skip
    return {
        "case": name,
        "median_ms": stats.median,
        "ci95_ms": list(stats.ci95),
        "samples": stats.count,
        "rounds": len(m.rounds),
        "host_ms": m.host_ms,
        "stream_ms": m.stream_ms,
        "hold_ms": m.hold_ms,
        "stop_reason": m.stop_reason,
        "launch_bound": result.launch_bound,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--delay-us", type=float, default=200.0)
    parser.add_argument("--elements", type=int, default=1 << 16, help="size of the short kernel")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    x = torch.randn(args.elements, device="cuda")

    def kernel() -> None:
        x.mul_(1.0000001)

    def delayed() -> None:
        busy_wait_us(args.delay_us)
        kernel()

    timing = TimingSpec()  # the default: adaptive, flush on
    rows = [
        row("kernel alone (hold on)", time_cuda(kernel, timing)),
        row(f"{args.delay_us:.0f} us host + kernel (hold on)", time_cuda(delayed, timing)),
        row(
            f"{args.delay_us:.0f} us host + kernel (hold off: control)",
            time_cuda(delayed, timing, hold=False),
        ),
    ]
    print(f"GPU: {torch.cuda.get_device_name()}  torch {torch.__version__}")
    print(
        "| case | device median ms | CI95 | host_ms | stream_ms | hold ms | launch-bound | stop |\n"
        "| --- | --- | --- | --- | --- | --- | --- | --- |"
    )
    for r in rows:
        lo, hi = r["ci95_ms"]
        print(
            f"| {r['case']} | {r['median_ms']:.4f} | {lo:.4f}–{hi:.4f} | {r['host_ms']:.4f} | "
            f"{r['stream_ms']:.4f} | {r['hold_ms']:.3f} | {r['launch_bound']} | {r['stop_reason']} |"
        )
    alone, held, control = rows
    delay_ms = args.delay_us / 1e3
    ok_device = abs(held["median_ms"] - alone["median_ms"]) <= 0.1 * alone["median_ms"] + 0.001
    ok_host = held["host_ms"] >= delay_ms
    print(
        f"device time free of host time: {'PASS' if ok_device else 'FAIL'} "
        f"({held['median_ms']:.4f} vs {alone['median_ms']:.4f} ms alone); "
        f"host_ms shows the delay: {'PASS' if ok_host else 'FAIL'} ({held['host_ms']:.4f} ms); "
        f"control without the hold reads {control['median_ms']:.4f} ms"
    )
    if args.out:
        with open(args.out, "w") as fh:
            json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows}, fh, indent=1)
    return 0 if ok_device and ok_host else 1


if __name__ == "__main__":
    raise SystemExit(main())
