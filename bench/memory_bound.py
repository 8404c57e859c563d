"""Memory-bound layers on the GPU: correctness, then triton vs torch eager vs torch.compile.

Usage (GPU machine, repository root):
    PYTHONPATH=. PYTHONUNBUFFERED=1 python3 bench/memory_bound.py 2>&1 | tee $OUT/log.txt
Options: --only transpose,softmax_long (case names), --skip-extra (no odd-shape checks),
--budget SECONDS (stop starting new cases after this long; default 270).

For each case: fresh random-normal inputs, the Triton launcher writes into a NaN-poisoned
output, the result is compared with a float64 reference (relative L2 error, dtype limit), then
the three backends are timed with triton.testing.do_bench(warmup=25, rep=100, median; it
flushes L2 before every call). Bandwidth is the minimum traffic (every input byte read once,
every output byte written once) divided by the median time. Full results go to
$OUT/results.json and the autotuner's per-config timings to $OUT/autotune.txt.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
import triton

from opbench.kernels import activation as act_k
from opbench.kernels import batchnorm as bn_k
from opbench.kernels import norm as norm_k
from opbench.kernels import pool as pool_k
from opbench.kernels import softmax as softmax_k
from opbench.kernels import transpose as transpose_k

TOLERANCE = {torch.float32: 1e-4, torch.float16: 5e-3, torch.bfloat16: 2e-2}
COPY_TBPS = 4.27  # measured device-to-device copy on the H200 (brief)
OUT_DIR = os.environ.get("OUT", "/tmp/memory_bound_out")


@dataclass
class Case:
    """One benchmarked layer: inputs and the three implementations over them."""

    name: str
    shape: str
    inputs: Callable[[], dict]  # fresh random inputs
    triton_fn: Callable[[dict, torch.Tensor | None], torch.Tensor]  # (inputs, out)
    torch_fn: Callable[[dict], torch.Tensor]
    reference: Callable[[dict], torch.Tensor]  # float64
    bytes_moved: Callable[[dict], int]
    tuner: object | None = None  # the autotuned kernel, to report its choice
    targets: dict = field(default_factory=dict)  # min_tbps, min_vs_torch


def nbytes(*tensors: torch.Tensor) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def randn(*shape: int, dtype=torch.float16) -> torch.Tensor:
    return torch.randn(*shape, device="cuda", dtype=torch.float32).to(dtype)


def rel_l2(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.double() - ref).norm() / ref.norm().clamp_min(1e-300)).item()


# --------------------------------------------------------------------------------------
# Cases at the shapes
# --------------------------------------------------------------------------------------


def main_cases() -> list[Case]:
    cases: list[Case] = []
    tt = {"min_tbps": 3.6, "min_vs_torch": 5.0}
    cases.append(
        Case(
            "transpose",
            "fp16 8192x8192 .t()",
            lambda: {"x": randn(8192, 8192)},
            lambda d, out: transpose_k.transpose(d["x"], 0, 1, out),
            lambda d: d["x"].t().contiguous(),
            lambda d: d["x"].double().t().contiguous(),
            lambda d: 2 * nbytes(d["x"]),
            transpose_k._permute_transposing,
            tt,
        )
    )
    cases.append(
        Case(
            "permute_nhwc",
            "fp16 32x512x64x64 (0,2,3,1)",
            lambda: {"x": randn(32, 512, 64, 64)},
            lambda d, out: transpose_k.permute(d["x"], (0, 2, 3, 1), out),
            lambda d: d["x"].permute(0, 2, 3, 1).contiguous(),
            lambda d: d["x"].double().permute(0, 2, 3, 1).contiguous(),
            lambda d: 2 * nbytes(d["x"]),
            transpose_k._permute_transposing,
            tt,
        )
    )
    for name, shape, targets in (
        ("softmax_long", (16384, 4096), {"min_tbps": 3.4}),
        ("softmax_short", (65536, 512), {"min_vs_torch": 1.0}),
    ):
        cases.append(
            Case(
                name,
                f"fp16 {shape[0]}x{shape[1]} dim=-1",
                lambda shape=shape: {"x": randn(*shape)},
                lambda d, out: softmax_k.softmax(d["x"], -1, out),
                lambda d: torch.softmax(d["x"], -1),
                lambda d: torch.softmax(d["x"].double(), -1),
                lambda d: 2 * nbytes(d["x"]),
                softmax_k._softmax,
                targets,
            )
        )
    hidden = 4096

    def norm_inputs() -> dict:
        return {"x": randn(16384, hidden), "w": randn(hidden), "b": randn(hidden)}

    nt = {"min_tbps": 3.4, "min_vs_torch": 1.3}
    cases.append(
        Case(
            "layernorm",
            "fp16 16384x4096",
            norm_inputs,
            lambda d, out: norm_k.layernorm(d["x"], d["w"], d["b"], 1e-5, out),
            lambda d: F.layer_norm(d["x"], (hidden,), d["w"], d["b"], 1e-5),
            lambda d: F.layer_norm(
                d["x"].double(), (hidden,), d["w"].double(), d["b"].double(), 1e-5
            ),
            lambda d: 2 * nbytes(d["x"]) + nbytes(d["w"], d["b"]),
            norm_k._norm,
            nt,
        )
    )
    cases.append(
        Case(
            "rmsnorm",
            "fp16 16384x4096",
            norm_inputs,
            lambda d, out: norm_k.rmsnorm(d["x"], d["w"], 1e-5, out),
            lambda d: F.rms_norm(d["x"], (hidden,), d["w"], 1e-5),
            lambda d: F.rms_norm(d["x"].double(), (hidden,), d["w"].double(), 1e-5),
            lambda d: 2 * nbytes(d["x"]) + nbytes(d["w"]),
            norm_k._norm,
            nt,
        )
    )
    for name, torch_op in (("relu", F.relu), ("gelu", F.gelu), ("silu", F.silu)):
        cases.append(
            Case(
                name,
                "fp16 16384x4096",
                lambda: {"x": randn(16384, 4096)},
                lambda d, out, name=name: act_k.activation(d["x"], name, out),
                lambda d, torch_op=torch_op: torch_op(d["x"]),
                lambda d, torch_op=torch_op: torch_op(d["x"].double()),
                lambda d: 2 * nbytes(d["x"]),
                act_k._activation,
                {"min_tbps": 3.6, "min_vs_torch": 0.95},
            )
        )
    pool_shape = (32, 256, 112, 112)
    pt = {"min_tbps": 0.8 * COPY_TBPS, "min_vs_torch": 1.2}
    cases.append(
        Case(
            "maxpool_3x3s2p1",
            "fp16 32x256x112x112",
            lambda: {"x": randn(*pool_shape)},
            lambda d, out: pool_k.maxpool2d(d["x"], 3, 2, 1, out),
            lambda d: F.max_pool2d(d["x"], 3, 2, 1),
            lambda d: F.max_pool2d(d["x"].double(), 3, 2, 1),
            lambda d: nbytes(d["x"]) + nbytes(d["x"]) // 4,  # 56x56 output
            pool_k._pool2d,
            pt,
        )
    )
    cases.append(
        Case(
            "avgpool_2x2s2",
            "fp16 32x256x112x112",
            lambda: {"x": randn(*pool_shape)},
            lambda d, out: pool_k.avgpool2d(d["x"], 2, 2, 0, out),
            lambda d: F.avg_pool2d(d["x"], 2, 2),
            lambda d: F.avg_pool2d(d["x"].double(), 2, 2),
            lambda d: nbytes(d["x"]) + nbytes(d["x"]) // 4,
            pool_k._pool2d,
            pt,
        )
    )

    cases.append(
        Case(
            "global_avgpool",
            "fp16 32x2048x7x7 k7",
            lambda: {"x": randn(32, 2048, 7, 7)},
            lambda d, out: pool_k.avgpool2d(d["x"], 7, 7, 0, out),
            lambda d: F.avg_pool2d(d["x"], 7),
            lambda d: F.avg_pool2d(d["x"].double(), 7),
            lambda d: nbytes(d["x"]) + nbytes(d["x"]) // 49,
            pool_k._global_pool2d,
            {"min_vs_torch": 1.0},
        )
    )

    def bn_inputs() -> dict:
        channels = pool_shape[1]
        d = {
            "x": randn(*pool_shape),
            "mean": randn(channels, dtype=torch.float32),
            "var": torch.rand(channels, device="cuda") + 0.5,
            "w": randn(channels, dtype=torch.float32),
            "b": randn(channels, dtype=torch.float32),
        }
        d["scale"], d["shift"] = bn_k.fold_batchnorm(d["mean"], d["var"], d["w"], d["b"], 1e-5)
        return d

    cases.append(
        Case(
            "batchnorm2d",
            "fp16 32x256x112x112",
            bn_inputs,
            lambda d, out: bn_k.batchnorm2d(d["x"], d["scale"], d["shift"], out),
            lambda d: F.batch_norm(d["x"], d["mean"], d["var"], d["w"], d["b"], False, 0.0, 1e-5),
            lambda d: F.batch_norm(
                d["x"].double(),
                *(d[k].double() for k in ("mean", "var", "w", "b")),
                False,
                0.0,
                1e-5,
            ),
            lambda d: 2 * nbytes(d["x"]),
            bn_k._batchnorm,
            {"min_tbps": 3.4},
        )
    )
    return cases


# --------------------------------------------------------------------------------------
# Odd shapes: correctness only
# --------------------------------------------------------------------------------------


def extra_checks() -> list[
    tuple[str, Callable[[], tuple[torch.Tensor, torch.Tensor, torch.dtype]]]
]:
    """(name, fn) where fn returns (triton output written into a poisoned out, float64 ref)."""

    def poisoned(like: torch.Tensor, shape) -> torch.Tensor:
        return torch.full(shape, float("nan"), dtype=like.dtype, device="cuda")

    def check_softmax(shape, dim, dtype):
        x = randn(*shape, dtype=dtype)
        return softmax_k.softmax(x, dim, poisoned(x, shape)), torch.softmax(x.double(), dim), dtype

    def check_norm(shape, dtype, rms):
        x, w, b = (
            randn(*shape, dtype=dtype),
            randn(shape[-1], dtype=dtype),
            randn(shape[-1], dtype=dtype),
        )
        out = poisoned(x, shape)
        if rms:
            ref = F.rms_norm(x.double(), shape[-1:], w.double(), 1e-5)
            return norm_k.rmsnorm(x, w, 1e-5, out), ref, dtype
        ref = F.layer_norm(x.double(), shape[-1:], w.double(), b.double(), 1e-5)
        return norm_k.layernorm(x, w, b, 1e-5, out), ref, dtype

    def check_permute(shape, dims, dtype):
        x = randn(*shape, dtype=dtype)
        ref = x.double().permute(dims).contiguous()
        return transpose_k.permute(x, dims, poisoned(x, ref.shape)), ref, dtype

    def check_pool(shape, k, s, p, is_max, dtype):
        x = randn(*shape, dtype=dtype)
        torch_op, ours = (
            (F.max_pool2d, pool_k.maxpool2d) if is_max else (F.avg_pool2d, pool_k.avgpool2d)
        )
        ref = torch_op(x.double(), k, s, p)
        return ours(x, k, s, p, poisoned(x, ref.shape)), ref, dtype

    return [
        (
            "softmax (64,1000,96) dim=1 fp16",
            lambda: check_softmax((64, 1000, 96), 1, torch.float16),
        ),
        ("softmax (37,20000) looped fp32", lambda: check_softmax((37, 20000), -1, torch.float32)),
        (
            "softmax (5,3,7,513) dim=0 bf16",
            lambda: check_softmax((5, 3, 7, 513), 0, torch.bfloat16),
        ),
        (
            "layernorm (1000,12000) looped bf16",
            lambda: check_norm((1000, 12000), torch.bfloat16, False),
        ),
        ("rmsnorm (333,4099) fp16", lambda: check_norm((333, 4099), torch.float16, True)),
        (
            "permute (13,17,19,23) (3,1,0,2) fp16",
            lambda: check_permute((13, 17, 19, 23), (3, 1, 0, 2), torch.float16),
        ),
        (
            "permute (13,17,19,23) (1,0,2,3) fp32",
            lambda: check_permute((13, 17, 19, 23), (1, 0, 2, 3), torch.float32),
        ),
        ("transpose (1000,3) bf16", lambda: check_permute((1000, 3), (1, 0), torch.bfloat16)),
        (
            "maxpool (3,5,31,29) k3s2p1 fp16",
            lambda: check_pool((3, 5, 31, 29), 3, 2, 1, True, torch.float16),
        ),
        (
            "maxpool (2,4,112,112) k3s2p0 bf16",
            lambda: check_pool((2, 4, 112, 112), 3, 2, 0, True, torch.bfloat16),
        ),
        (
            "avgpool (3,5,30,66) k2s2p1 fp16",
            lambda: check_pool((3, 5, 30, 66), 2, 2, 1, False, torch.float16),
        ),
        (
            "avgpool (3,5,31,29) k3s1p1 fp32",
            lambda: check_pool((3, 5, 31, 29), 3, 1, 1, False, torch.float32),
        ),
    ]


# --------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------


def bench(fn: Callable[[], object]) -> float:
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def tuner_report(tuner) -> str:
    if tuner is None or not getattr(tuner, "configs_timings", None):
        return ""
    rows = sorted(
        tuner.configs_timings.items(), key=lambda kv: kv[1][0] if isinstance(kv[1], list) else kv[1]
    )
    lines = [f"  best: {tuner.best_config}"]
    for config, timing in rows:
        median = timing[0] if isinstance(timing, list) else timing
        lines.append(f"    {median * 1000:9.2f} us  {config}")
    return "\n".join(lines)


def host_us(fn: Callable[[], object], calls: int = 50) -> float:
    """CPU time of one call (launches are asynchronous, so this is the launcher's overhead)."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return elapsed / calls * 1e6


def check_and_time(case: Case, log) -> tuple[dict, dict]:
    """Correctness on fresh data, then triton and torch eager timings; returns the row and
    the timing inputs (kept for the torch.compile phase)."""
    row: dict = {"name": case.name, "shape": case.shape}
    d = case.inputs()
    ref = case.reference(d)
    out = torch.full_like(ref, float("nan"), dtype=d["x"].dtype)
    t0 = time.time()
    result = case.triton_fn(d, out)
    torch.cuda.synchronize()
    row["first_call_s"] = round(time.time() - t0, 2)
    row["nan_left"] = int(torch.isnan(result).sum().item())
    row["error"] = rel_l2(result, ref)
    row["torch_error"] = rel_l2(case.torch_fn(d), ref)
    row["tolerance"] = TOLERANCE[d["x"].dtype]
    row["correct"] = row["nan_left"] == 0 and row["error"] <= row["tolerance"] and result is out
    del ref, result
    log.write(
        f"[{case.name}] autotune (first call {row['first_call_s']} s)\n{tuner_report(case.tuner)}\n"
    )
    log.flush()

    d = case.inputs()  # fresh data for timing
    row["bytes"] = case.bytes_moved(d)
    row["triton_ms"] = bench(lambda: case.triton_fn(d, None))
    row["triton_prealloc_ms"] = bench(lambda: case.triton_fn(d, out))
    row["torch_ms"] = bench(lambda: case.torch_fn(d))
    row["host_us"] = host_us(lambda: case.triton_fn(d, None))
    row["torch_host_us"] = host_us(lambda: case.torch_fn(d))
    return row, d


def time_compiled(case: Case, row: dict, d: dict, compile_too: bool) -> None:
    """torch.compile (default mode) timing, then the verdicts against the targets."""
    t0 = time.time()
    row["compile_ms"] = None
    try:
        if compile_too:
            compiled = torch.compile(case.torch_fn, dynamic=False)
            compiled(d)
            torch.cuda.synchronize()
            row["compile_s"] = round(time.time() - t0, 1)
            row["compile_ms"] = bench(lambda: compiled(d))
    except Exception as exc:  # report, keep going
        row["compile_error"] = f"{type(exc).__name__}: {exc}"[:300]
    moved = row["bytes"]
    row["tbps"] = moved / row["triton_ms"] / 1e9
    row["torch_tbps"] = moved / row["torch_ms"] / 1e9
    row["vs_torch"] = row["torch_ms"] / row["triton_ms"]
    row["vs_compile"] = row["compile_ms"] / row["triton_ms"] if row["compile_ms"] else None
    misses = []
    if "min_tbps" in case.targets and row["tbps"] < case.targets["min_tbps"]:
        misses.append(f"TB/s<{case.targets['min_tbps']:.2f}")
    if "min_vs_torch" in case.targets and row["vs_torch"] < case.targets["min_vs_torch"]:
        misses.append(f"x torch<{case.targets['min_vs_torch']}")
    if row["vs_compile"] is not None and row["vs_compile"] < 1.0:
        misses.append("x compile<1")
    if not row["correct"]:
        misses.append("INCORRECT")
    row["misses"] = misses


def print_table(rows: list[dict]) -> str:
    header = (
        f"{'case':16s} {'shape':28s} {'err':>8s} {'torch ms':>9s} {'compile ms':>10s} "
        f"{'triton ms':>9s} {'x torch':>7s} {'x comp':>7s} {'TB/s':>6s} {'torchTB/s':>9s} "
        f"{'%copy':>6s} {'host us':>7s}  misses"
    )
    lines = [header, "-" * len(header)]
    for r in rows:
        compile_ms = f"{r['compile_ms']:10.4f}" if r.get("compile_ms") else f"{'n/a':>10s}"
        vs_compile = f"{r['vs_compile']:7.2f}" if r.get("vs_compile") else f"{'n/a':>7s}"
        lines.append(
            f"{r['name']:16s} {r['shape']:28s} {r['error']:8.1e} {r['torch_ms']:9.4f} {compile_ms} "
            f"{r['triton_ms']:9.4f} {r['vs_torch']:7.2f} {vs_compile} {r['tbps']:6.2f} "
            f"{r['torch_tbps']:9.2f} {100 * r['tbps'] / COPY_TBPS:5.0f}% {r['host_us']:7.0f}  "
            f"{' '.join(r['misses']) or 'ok'}"
        )
    return "\n".join(lines)


def copy_bandwidth() -> None:
    """Device-to-device copy of 256 MiB: the ceiling the other numbers are compared with."""
    src = torch.empty(2**27, dtype=torch.float16, device="cuda")
    dst = torch.empty_like(src)
    copy_ms = bench(lambda: dst.copy_(src))
    tbps = 2 * nbytes(src) / copy_ms / 1e9
    print(f"copy 256 MiB: {copy_ms:.4f} ms = {tbps:.2f} TB/s (read + write)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", default="", help="comma-separated case names")
    parser.add_argument("--skip-extra", action="store_true")
    parser.add_argument("--budget", type=float, default=270.0)
    args = parser.parse_args()
    start = time.time()
    os.makedirs(OUT_DIR, exist_ok=True)
    torch.manual_seed(0)
    print(
        f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}  triton {triton.__version__}"
    )

    copy_bandwidth()

    only = {name for name in args.only.split(",") if name}
    cases = [case for case in main_cases() if not only or case.name in only]
    # Phase 1: correctness, triton and eager timings. torch.compile comes after all of them,
    # so its compile workers never compete with the launchers for the CPU while timing.
    timed: list[tuple[Case, dict, dict]] = []
    with open(os.path.join(OUT_DIR, "autotune.txt"), "w") as log:
        for case in cases:
            if time.time() - start > args.budget:
                print(f"[{case.name}] skipped: time budget spent")
                continue
            t0 = time.time()
            try:
                row, d = check_and_time(case, log)
            except Exception as exc:
                print(f"[{case.name}] FAILED: {type(exc).__name__}: {exc}")
                continue
            timed.append((case, row, d))
            print(
                f"[{case.name}] err {row['error']:.1e} nan {row['nan_left']} | torch "
                f"{row['torch_ms']:.4f} triton {row['triton_ms']:.4f} (prealloc "
                f"{row['triton_prealloc_ms']:.4f}) ms | host {row['host_us']:.0f} us "
                f"(torch {row['torch_host_us']:.0f}) | {time.time() - t0:.0f} s"
            )
    # Phase 2: torch.compile.
    rows: list[dict] = []
    for case, row, d in timed:
        compile_too = time.time() - start < args.budget + 30
        if not compile_too:
            print(f"[{case.name}] torch.compile skipped: time budget spent")
        time_compiled(case, row, d, compile_too)
        rows.append(row)
        print(
            f"[{case.name}] compile {row.get('compile_ms')} ms ({row.get('compile_s')} s) {row['misses']}"
        )
        with open(os.path.join(OUT_DIR, "results.json"), "w") as f:
            json.dump(rows, f, indent=1)
    del timed

    if not args.skip_extra:
        print("\nodd-shape correctness (NaN-poisoned out, float64 reference):")
        for name, check in extra_checks():
            if time.time() - start > args.budget + 20:
                print(f"  {name}: skipped (time budget)")
                continue
            try:
                out, ref, dtype = check()
                err, nan_left = rel_l2(out, ref), int(torch.isnan(out).sum().item())
                ok = nan_left == 0 and err <= TOLERANCE[dtype]
                print(f"  {'ok ' if ok else 'BAD'} {name}: err {err:.1e} nan {nan_left}")
            except Exception as exc:
                print(f"  BAD {name}: {type(exc).__name__}: {exc}")

    table = print_table(rows)
    print("\n" + table)
    print(f"\ntotal {time.time() - start:.0f} s")
    with open(os.path.join(OUT_DIR, "table.txt"), "w") as f:
        f.write(table + "\n")


if __name__ == "__main__":
    main()
