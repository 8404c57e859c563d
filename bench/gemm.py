"""GEMM benchmark on the GPU: opbench's Triton linear (fp16 fused, int8 W8A8) vs torch.

For every (M, K, N) it checks the Triton results against a float64 reference on fresh random
data, then times with triton.testing.do_bench (warmup 25 ms, rep 100 ms, median, L2 flushed):
  torch eager   F.linear(x, w, b) (+ activation), fp16 (cuBLAS)
  torch compile torch.compile(default mode, dynamic=True) of the same function, fp16
  triton fp16   prepare_linear(w, b, activation)            (bias + activation fused)
  triton int8   prepare_linear(w, b, activation, quant=int8) (per-token quantization included)
and, for the int8 path, the GEMM alone (x already quantized) and the quantization alone.
First-call tuning time is reported separately (each call below runs after it).

    cd <repo> && PYTHONPATH=. PYTHONUNBUFFERED=1 python3 bench/gemm.py 2>&1 | tee $OUT/log.txt

Writes $OUT/results.json (rows appended as they finish) and prints a table at the end.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from triton.testing import do_bench

from opbench.kernels import linear as L
from opbench.kernels.linear import prepare_linear
from opbench.kernels.quantize import quantize_rows

INT8_PEAK = 1979e12  # H100/H200 SXM dense int8 tensor-core peak, OP/s
FP16_PEAK = 989e12  # dense fp16 tensor-core peak, FLOP/s
KN = [(4096, 4096), (4096, 11008), (11008, 4096), (8192, 8192)]
MS = [1, 16, 64, 512, 2048, 8192]
ACT = {"none": lambda t: t, "relu": torch.relu, "gelu": F.gelu, "silu": F.silu}
TOL = {"fp16": 5e-3, "int8": 3e-2}


def torch_linear(activation: str):
    act = ACT[activation]

    def fn(x, w, b):
        return act(F.linear(x, w, b))

    return fn


def time_int8_parts(fn, x: torch.Tensor, out: torch.Tensor) -> dict:
    """The W8A8 call split in two: quantizing x, and the GEMM on the already quantized x."""
    xq, sx = quantize_rows(x)
    plan = fn.plan_for(x, out)

    def gemm_only() -> None:
        L.launch_gemm(plan, xq, fn.weight, out, fn.bias, sx, fn._col_scale, fn.arrivals,
                      fn.activation, "ieee", fn._buffers, fn._compiled)  # fmt: skip

    return {
        "int8_gemm_only_ms": bench(gemm_only),
        "int8_quant_only_ms": bench(lambda: quantize_rows(x, xq, sx)),
    }


def cpu_us_per_call(fn, calls: int = 200) -> float:
    """Host time to issue one call (no synchronization inside): the launch overhead that shows
    up in GPU timings when a kernel is shorter than it."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return elapsed / calls * 1e6


def rel_l2(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.double() - ref).norm() / ref.norm()).item()


def bench(fn) -> float:
    return float(do_bench(fn, warmup=25, rep=100, return_mode="median"))


class Runner:
    def __init__(self, out_dir: Path, deadline: float, compile_enabled: bool) -> None:
        self.out_dir = out_dir
        self.deadline = deadline
        self.rows: list[dict] = []
        self.failures: list[dict] = []
        self.compiled: dict[str, object] = {}
        self.compile_enabled = compile_enabled
        self.compile_seconds: dict[str, float] = {}

    def time_left(self) -> float:
        return self.deadline - time.time()

    def compiled_fn(self, activation: str):
        if not self.compile_enabled:
            return None
        if activation not in self.compiled:
            self.compiled[activation] = torch.compile(torch_linear(activation), dynamic=True)
        return self.compiled[activation]

    def try_shape(self, m: int, k: int, n: int, activation: str, full: bool = True) -> None:
        t0 = time.time()
        try:
            self.run_shape(m, k, n, activation, full)
        except Exception as err:  # noqa: BLE001 - one broken shape must not end the run
            print(f"FAILED M={m} K={k} N={n} {activation}: {type(err).__name__}: {err}", flush=True)
            self.failures.append(
                {"M": m, "K": k, "N": n, "activation": activation, "error": str(err)[:500]}
            )
            (self.out_dir / "failures.json").write_text(json.dumps(self.failures, indent=1))
        print(
            f"[{time.time() - t0:5.1f}s, {self.time_left():5.0f}s left] M={m} K={k} N={n}",
            flush=True,
        )

    def run_shape(self, m: int, k: int, n: int, activation: str, full: bool = True) -> dict:
        gen = torch.Generator(device="cuda").manual_seed(m * 7 + k * 3 + n)
        x = torch.randn(m, k, device="cuda", dtype=torch.float16, generator=gen)
        w = (torch.randn(n, k, device="cuda", generator=gen) / math.sqrt(k)).half()
        b = torch.randn(n, device="cuda", generator=gen).half()
        ref = ACT[activation](F.linear(x.double(), w.double(), b.double()))
        row: dict = {"M": m, "K": k, "N": n, "activation": activation}
        flops = 2.0 * m * n * k

        eager = torch_linear(activation)
        row["eager_ms"] = bench(lambda: eager(x, w, b))
        if m <= 512:
            row["eager_cpu_us"] = cpu_us_per_call(lambda: eager(x, w, b))
        compiled = self.compiled_fn(activation)
        if compiled is not None:
            try:
                t0 = time.time()
                compiled(x, w, b)
                torch.cuda.synchronize()
                self.compile_seconds[activation] = (
                    self.compile_seconds.get(activation, 0) + time.time() - t0
                )
                row["compile_ms"] = bench(lambda: compiled(x, w, b))
            except Exception as err:  # noqa: BLE001 - report and go on
                row["compile_error"] = f"{type(err).__name__}: {err}"[:300]

        for name, quant in (("fp16", "none"), ("int8", "int8")):
            fn = prepare_linear(w, b, activation=activation, quant=quant)
            out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float16)
            t0 = time.time()
            fn(x, out=out)  # first call: tunes (or reads the plan cache)
            torch.cuda.synchronize()
            row[f"{name}_first_call_s"] = time.time() - t0
            row[f"{name}_tune_s"] = fn.tuning_seconds
            out.fill_(float("nan"))
            fn(x, out=out)
            torch.cuda.synchronize()
            row[f"{name}_nan"] = int(torch.isnan(out).sum())
            row[f"{name}_err"] = rel_l2(out, ref)
            row[f"{name}_ok"] = row[f"{name}_nan"] == 0 and row[f"{name}_err"] <= TOL[name]
            row[f"{name}_plan"] = fn.plan_for(x, out).to_json()
            row[f"{name}_ms"] = bench(lambda fn=fn, out=out: fn(x, out=out))
            if m <= 512:
                row[f"{name}_cpu_us"] = cpu_us_per_call(lambda fn=fn, out=out: fn(x, out=out))
            if name == "int8" and full:
                row.update(time_int8_parts(fn, x, out))
            del fn, out

        best_torch = min(v for key, v in row.items() if key in ("eager_ms", "compile_ms"))
        row["best_torch_ms"] = best_torch
        for name in ("fp16", "int8"):
            row[f"{name}_vs_eager"] = row["eager_ms"] / row[f"{name}_ms"]
            row[f"{name}_vs_best"] = best_torch / row[f"{name}_ms"]
        row["eager_tflops"] = flops / row["eager_ms"] / 1e9
        row["fp16_tflops"] = flops / row["fp16_ms"] / 1e9
        row["int8_tops"] = flops / row["int8_ms"] / 1e9
        row["int8_pct_peak"] = 100 * flops / (row["int8_ms"] * 1e-3) / INT8_PEAK
        if "int8_gemm_only_ms" in row:
            row["int8_gemm_only_tops"] = flops / row["int8_gemm_only_ms"] / 1e9
        self.rows.append(row)
        self.save()
        print(json.dumps(row), flush=True)
        return row

    def save(self) -> None:
        (self.out_dir / "results.json").write_text(json.dumps(self.rows, indent=1))


def validate_every_kind(out_dir: Path) -> list[dict]:
    """One plan of each kernel kind on odd shapes (N not a multiple of 16, K = 4112 so TMA is
    allowed for fp16 and int8), against float64."""
    results = []
    for m in (37, 777):
        n, k = 1000, 4112
        x = torch.randn(m, k, device="cuda").half()
        w = (torch.randn(n, k, device="cuda") / math.sqrt(k)).half()
        b = torch.randn(n, device="cuda").half()
        ref = F.gelu(F.linear(x.double(), w.double(), b.double()))
        for quant in ("none", "int8"):
            fn = prepare_linear(w, b, activation="gelu", quant=quant)
            seen = set()
            for plan in fn.candidates(x, every_kind=True):
                if (plan.kind == "split_k") != (m <= L.SMALL_M):
                    continue  # split-K only for few rows (its BLOCK_M covers all of M)
                kind = (plan.kind, plan.split_k > 1, plan.persistent)
                if kind in seen:
                    continue
                seen.add(kind)
                out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float16)
                try:
                    fn.launch(plan, x, out)
                    torch.cuda.synchronize()
                    err = rel_l2(out, ref)
                    nan = int(torch.isnan(out).sum())
                    results.append({"M": m, "quant": quant, "plan": plan.to_json(), "err": err,
                                    "nan": nan, "ok": nan == 0 and err <= TOL["int8" if quant == "int8" else "fp16"]})  # fmt: skip
                except Exception as e:  # noqa: BLE001
                    results.append(
                        {
                            "M": m,
                            "quant": quant,
                            "plan": plan.to_json(),
                            "error": str(e)[:300],
                            "ok": False,
                        }
                    )
                print("validate", json.dumps(results[-1]), flush=True)
    (out_dir / "validate.json").write_text(json.dumps(results, indent=1))
    return results


def print_table(rows: list[dict]) -> None:
    head = (f"{'M':>5} {'K':>6} {'N':>6} {'act':>5} | {'eager':>8} {'compile':>8} | {'tri16':>8} {'x':>5} "
            f"{'TF/s':>5} | {'int8':>8} {'x':>5} {'TOP/s':>5} {'%pk':>4} {'gemm':>5} | err16    err8     ok")  # fmt: skip
    print(head)
    print("-" * len(head))
    for r in rows:
        print(
            f"{r['M']:>5} {r['K']:>6} {r['N']:>6} {r['activation']:>5} | {r['eager_ms']:8.4f} "
            f"{r.get('compile_ms', float('nan')):8.4f} | {r['fp16_ms']:8.4f} {r['fp16_vs_best']:5.2f} "
            f"{r['fp16_tflops']:5.0f} | {r['int8_ms']:8.4f} {r['int8_vs_best']:5.2f} {r['int8_tops']:5.0f} "
            f"{r['int8_pct_peak']:4.0f} {r.get('int8_gemm_only_tops', float('nan')):5.0f} | "
            f"{r['fp16_err']:.1e} {r['int8_err']:.1e} {r['fp16_ok'] and r['int8_ok']}"
        )


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def summary(rows: list[dict]) -> dict:
    main = [r for r in rows if r["activation"] == "none" and (r["K"], r["N"]) in KN]
    s = {
        "int8_vs_eager_geomean_M>=2048": geomean(
            [r["int8_vs_eager"] for r in main if r["M"] >= 2048]
        ),
        "int8_min_vs_eager_M<=64": min(
            (r["int8_vs_eager"] for r in main if r["M"] <= 64), default=None
        ),
        "fp16_vs_eager_geomean": geomean([r["fp16_vs_eager"] for r in main]),
        "fp16_vs_eager_geomean_M<=512": geomean(
            [r["fp16_vs_eager"] for r in main if r["M"] <= 512]
        ),
        "fp16_min_vs_best": min((r["fp16_vs_best"] for r in rows), default=None),
        "int8_min_vs_best": min((r["int8_vs_best"] for r in rows), default=None),
        "all_correct": all(r["fp16_ok"] and r["int8_ok"] for r in rows),
        "int8_8192^3_tops": next(
            (r["int8_tops"] for r in rows if r["M"] == r["K"] == r["N"] == 8192), None
        ),
        "tuning_seconds_total": L.tuning_seconds(),
    }
    return s


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--budget", type=float, default=240.0, help="seconds before skipping the rest"
    )
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--quick", action="store_true", help="a few shapes only")
    args = parser.parse_args()
    start = time.time()
    out_dir = Path(os.environ.get("OUT", "bench_out"))
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    props = torch.cuda.get_device_properties(0)
    env = {"gpu": props.name, "sms": props.multi_processor_count, "torch": torch.__version__,
           "triton": __import__("triton").__version__, "plan_cache": str(L.cache_path())}  # fmt: skip
    print("env", json.dumps(env), flush=True)
    (out_dir / "env.json").write_text(json.dumps(env))

    runner = Runner(out_dir, start + args.budget, not args.no_compile)
    shapes = [(m, k, n) for k, n in KN for m in MS]  # includes 8192^3
    if args.quick:
        shapes = [(1, 4096, 4096), (2048, 4096, 4096), (8192, 8192, 8192)]
    # Most informative first, so a budget cut drops the least.
    order = sorted(shapes, key=lambda s: (s[0] not in (1, 2048, 8192), s))
    for m, k, n in order:
        if runner.time_left() < 8:
            print(f"budget: skipping M={m} K={k} N={n}", flush=True)
            continue
        runner.try_shape(m, k, n, "none")
    for m, k, n in [(16, 4096, 11008), (2048, 4096, 11008)]:
        if runner.time_left() > 10:
            runner.try_shape(m, k, n, "gelu", full=False)
    if runner.time_left() > 25:
        validate_every_kind(out_dir)

    # A fresh lookup must come from the disk cache, not a new tuning run.
    L.clear_memory_cache()
    before = L.tuning_seconds()
    x = torch.randn(2048, 4096, device="cuda").half()
    w = torch.randn(4096, 4096, device="cuda").half()
    prepare_linear(w, None, quant="int8")(x)
    torch.cuda.synchronize()
    cache_hit = L.tuning_seconds() == before
    print(f"disk plan cache reused without re-tuning: {cache_hit}", flush=True)

    rows = runner.rows
    print_table(rows)
    s = summary(rows)
    s["disk_cache_hit"] = cache_hit
    s["torch_compile_seconds"] = runner.compile_seconds
    s["wall_seconds"] = time.time() - start
    print("summary", json.dumps(s, indent=1), flush=True)
    (out_dir / "summary.json").write_text(json.dumps(s, indent=1))


if __name__ == "__main__":
    main()
