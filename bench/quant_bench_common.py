"""Plumbing shared by bench/quant_gpu.py and bench/quant_decode_gpu.py: the command line, the
bytes a layer's weights take as stored, the compile-worker pool and the section loop; and by
those two, bench/fp8_fused_gpu.py and bench/int8_gemm_gpu.py: the log and the results file
(the last two also the L2-flushed device timer, `DeviceTimer`). No torch import at the top:
the scripts set TRITON_INTERPRET (--tiny) before they import torch."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import traceback
from collections.abc import Callable


def parse_options(budget: float, only: str, workers: int) -> argparse.Namespace:
    """The scripts' shared options (their defaults differ); --tiny turns Triton's interpreter on."""
    args = argparse.ArgumentParser()
    args.add_argument("--tiny", action="store_true")
    args.add_argument("--out", default=os.environ.get("OUT", "bench_out"))
    args.add_argument("--budget", type=float, default=budget, help="seconds; sections stop after")
    args.add_argument("--only", default=only)
    args.add_argument("--workers", type=int, default=workers)
    args.add_argument("--compile-worker", default="", help=argparse.SUPPRESS)  # "i/n"
    opts = args.parse_args()
    unknown = sorted(set(opts.only.split(",")) - set(only.split(",")))
    if unknown:  # one line and exit 2, not a traceback in the middle of a GPU call's log
        args.error(f"--only: unknown section(s) {', '.join(unknown)}; the sections are {only}")
    if opts.tiny:
        os.environ["TRITON_INTERPRET"] = "1"
    return opts


def log_and_record(
    results: str, log_file: str | None, start: float
) -> tuple[Callable[[str], None], Callable[[dict], None]]:
    """A script's `log` (a line to stdout, stamped with the seconds since `start`, and, given
    `log_file`, to that file too) and `record` (one JSON row appended to `results`). Creates
    the results' folder. Each line and row is written at once: a run cut short keeps them."""
    os.makedirs(os.path.dirname(results) or ".", exist_ok=True)
    sink = open(log_file, "a") if log_file else None

    def log(msg: str) -> None:
        line = f"[{time.perf_counter() - start:7.1f}s] {msg}"
        print(line, flush=True)
        if sink is not None:
            sink.write(line + "\n")
            sink.flush()

    def record(row: dict) -> None:
        with open(results, "a") as f:
            f.write(json.dumps(row) + "\n")

    return log, record


def weight_bytes(quant: str, n: int, k: int, group: int) -> float:
    """Bytes of an [N, K] weight as stored: int8 with a float32 scale per row, int4 packed two a
    byte with a 16-bit scale per group of K, else 16-bit."""
    if quant == "int8-weight":
        return n * k + 4.0 * n
    if quant == "int4-weight":
        return n * k / 2 + 2.0 * n * k / group
    return 2.0 * n * k


def precompile(script: str, opts: argparse.Namespace, log: Callable[[str], None]) -> None:
    """Fill Triton's cache first: opts.workers copies of `script`, each `--compile-worker i/n`."""
    if opts.tiny or opts.workers <= 0:
        return
    t0 = time.perf_counter()
    cmd = [sys.executable, script, "--out", opts.out, "--only", opts.only, "--compile-worker"]
    procs = [subprocess.Popen([*cmd, f"{i}/{opts.workers}"]) for i in range(opts.workers)]
    for proc in procs:
        proc.wait()
    log(f"precompile: {opts.workers} workers, {time.perf_counter() - t0:.1f} s")


def run_sections(
    opts: argparse.Namespace,
    sections: dict[str, Callable[[], None]],
    over_budget: Callable[[], bool],
    log: Callable[[str], None],
) -> None:
    """The sections --only names, in its order, until the budget is spent; a failing section is
    logged with its traceback and the next one runs."""
    for name in opts.only.split(","):
        if over_budget():
            log(f"budget spent before {name}")
            break
        try:
            sections[name]()
        except Exception:
            log(f"section {name} failed:\n{traceback.format_exc()}")


class DeviceTimer:
    """Median µs of a callable on the device, each sample after a 512 MiB memset (L2 flushed,
    and long enough that the host has issued the call before the GPU reaches it); with
    `tiny` (the CPU interpreter) one untimed call and one wall-clock call, which mean nothing
    but keep the script's flow."""

    def __init__(self, tiny: bool, device: str) -> None:
        self.tiny, self.device = tiny, device
        self.flush = None  # the memset target, allocated at the first timing

    def us(self, fn: Callable[[], object], reps: int = 30) -> float:
        import torch

        if self.tiny:
            fn()
            t0 = time.perf_counter()
            fn()
            return (time.perf_counter() - t0) * 1e6
        if self.flush is None:
            self.flush = torch.empty(128 * 2**20, dtype=torch.float32, device=self.device)
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                 for _ in range(reps)]  # fmt: skip
        for start, end in pairs:
            self.flush.fill_(1.0)
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize()
        return 1e3 * sorted(s.elapsed_time(e) for s, e in pairs)[reps // 2]

    def copy_tbps(self) -> float:
        """The copy peer: TB/s of a 1 GiB device-to-device copy (bytes read + written)."""
        import torch

        size = 2**16 if self.tiny else 2**30
        src = torch.randn(size // 4, device=self.device)
        dst = torch.empty_like(src)
        return 2 * size / self.us(lambda: dst.copy_(src), 20) / 1e6

    def sync(self) -> None:
        if not self.tiny:
            import torch

            torch.cuda.synchronize()
