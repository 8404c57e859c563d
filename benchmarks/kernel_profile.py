"""Where a whole forward's device time goes: each kernel's share, from torch's profiler.

For each asked model and backend, every group is built as in a run (whole_models.build_all;
`torch-fp8` / `torch-int8` with every unquantized layer on torch eager, as library_peers'
quantized block), the eager forward warmed up, then a few calls profiled. Prints one line
per kernel name (calls per forward, mean µs, µs per forward, share of the kernels' sum) and
the sum per forward: the kernels alone, no launch gaps (a CUDA graph's replay leaves few).
A GPU tool: which kernel a margin has to come from, not a figure for the tables.

    python3 benchmarks/kernel_profile.py suites/transformer.yaml -m bert_layer -b triton

CPU check of the plumbing (Triton interpreter, quickstart's mlp on triton; the profile holds
the CPU's operators, and the numbers mean nothing):  python3 benchmarks/kernel_profile.py --tiny
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(Path(__file__).resolve().parent)]
if "--tiny" in sys.argv:  # before the first `import triton`
    os.environ["TRITON_INTERPRET"] = "1"

from whole_models import build_all  # noqa: E402

from opbench.backends.registry import all_backends  # noqa: E402
from opbench.pipeline.data import ModelData  # noqa: E402
from opbench.pipeline.forward import eager_forward  # noqa: E402
from opbench.pipeline.options import prepare_device  # noqa: E402
from opbench.spec.load import load_suite  # noqa: E402

QUANT_PEERS = ("torch-fp8", "torch-int8")


def kernel_times(call, calls: int, cuda: bool) -> dict[str, list[float]]:
    """Device µs of every kernel launched by `calls` calls, by kernel name (on the CPU: the
    operators' CPU µs)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    sync = torch.cuda.synchronize if cuda else lambda: None
    for _ in range(5):
        call()
    sync()
    activity = ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU
    with profile(activities=[activity]) as prof:
        for _ in range(calls):
            call()
        sync()
    kind = torch.autograd.DeviceType.CUDA if cuda else torch.autograd.DeviceType.CPU
    times: dict[str, list[float]] = defaultdict(list)
    for event in prof.events():
        if event.device_type == kind:
            times[event.name].append(event.device_time if cuda else event.cpu_time)
    return times


def print_profile(title: str, times: dict[str, list[float]], calls: int) -> None:
    total = sum(sum(v) for v in times.values()) / calls
    print(f"\n{title}: kernels' sum {total:.1f} µs per forward")
    print("| kernel | per forward | mean µs | µs per forward | share |")
    print("|---|---:|---:|---:|---:|")
    rows = sorted(times.items(), key=lambda kv: -sum(kv[1]))
    for name, samples in rows:
        per = sum(samples) / calls
        print(f"| {name[:90]} | {len(samples) / calls:g} | {sum(samples) / len(samples):.1f} "
              f"| {per:.1f} | {per / total:.0%} |")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("suite", nargs="?")
    parser.add_argument("-m", "--model", action="append")
    parser.add_argument("-b", "--backend", action="append")
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--tiny", action="store_true", help="quickstart's mlp on the CPU")
    args = parser.parse_args(argv)
    if args.tiny:
        args.suite, args.model = str(ROOT / "suites" / "quickstart.yaml"), ["mlp"]
        args.backend, args.calls = ["triton"], 1
    if not (args.suite and args.model and args.backend):
        parser.error("give SUITE, -m MODEL and -b BACKEND (or --tiny)")
    device = "cpu" if args.tiny else "cuda"
    prepare_device(device)
    suite, backends = load_suite(args.suite), all_backends()
    for name in args.model:
        model = suite.model(name)
        data = ModelData(suite, model, device)
        for backend_name in args.backend:
            rest = backends["torch"] if backend_name in QUANT_PEERS else None
            built = build_all(backends[backend_name], model, data, device, rest)[0]
            forward = eager_forward(model, built, data)
            times = kernel_times(forward.call, args.calls, device == "cuda")
            print_profile(f"{name} on {backend_name}", times, args.calls)
            del built, forward
        del data
    return 0


if __name__ == "__main__":
    sys.exit(main())
