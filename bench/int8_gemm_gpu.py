"""int8 W8A8 linears at prefill sizes (issue 31 target 2: >= 1.8x torch bf16, >= 1500 TOP/s),
each beside its peers in one run: where the int8 time goes, and what closes it.

Usage (GPU machine, repository root; results go to $OUT, or --out DIR):
    PYTHONPATH=. PYTHONUNBUFFERED=1 python3 bench/int8_gemm_gpu.py [--budget 150]
Plumbing check on the CPU (Triton's interpreter, tiny shapes, portable plans; numbers mean
nothing):
    PYTHONPATH=. python3 bench/int8_gemm_gpu.py --tiny

Shapes: LLaMA-7B's projections, K -> N: qkv 4096 -> 12288, o 4096 -> 4096, gate (or up) 4096
-> 11008, down 11008 -> 4096, at M = 2048 and 4096, bf16 activations and weights, no bias.
The layer's input h is what the layer before writes: rmsnorm(x) for qkv and gate, silu(g) * u
for down, x itself for o.
Per shape and M, in one run, times are the median of 30 samples, each after a 512 MiB memset
(L2 flushed), the whole variant between two events:
  torch bf16        F.linear(h, w)
  torch _int_mm     torch._int_mm(xq, wq^T) (int32 out, no scales; wq^T column-major)
  GEMM <plan>       our Gluon GEMM (gemm_ws.py) alone on codes quantized beforehand, every
                    int8 plan of ws_candidates plus the 256-byte-K tiles (ws_deep_k_candidates)
  whole call        Int8Linear on h: our per-token quantize pass, then the best GEMM plan
  quantizer         that pass alone
  fused group       the layer before writes the codes (rmsnorm INT8_OUT; the quantizer's
                    silu(g) * u), then the best GEMM plan (Int8Linear.bind_on_codes), against
                    torch's group (F.rms_norm + F.linear; F.silu(g) * u + F.linear)
Floors: FLOPs at 1979 TOP/s (H100 SXM dense int8) against the bytes at the copy rate measured
here, the larger; a whole call adds its quantize pass's bytes (read 2MK, write MK + 4M), a
fused group its producer's.
Correctness, every variant, outputs poisoned with NaN first: relative L2 against float64 of
the quantized operands (GEMM rows and whole calls; limit 6e-3, bf16 output rounding) and of
the unquantized layer (whole call and fused group; limit 3e-2, QUANT_TOLERANCE["int8"]);
_int_mm against the exact integer sums.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import time
from collections.abc import Callable

from quant_bench_common import DeviceTimer, log_and_record

ARGS = argparse.ArgumentParser()
ARGS.add_argument("--tiny", action="store_true")
ARGS.add_argument("--out", default=os.environ.get("OUT", "bench_out"))
ARGS.add_argument("--budget", type=float, default=150.0, help="seconds; shapes stop after")
OPTS = ARGS.parse_args()
if OPTS.tiny:
    os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from opbench.kernels import tuning  # noqa: E402
from opbench.kernels.gemm.linear import gemm_calls  # noqa: E402
from opbench.kernels.gemm.linear_int8 import Int8Linear  # noqa: E402
from opbench.kernels.gemm.linear_plans import (  # noqa: E402
    gemm_plan,
    ws_candidates,
    ws_deep_k_candidates,
)
from opbench.kernels.launch import BoundKernels, sequence  # noqa: E402
from opbench.kernels.memory.norm import bind_norm  # noqa: E402
from opbench.kernels.memory.quantize import quantize_rows, quantize_rows_call  # noqa: E402
from opbench.ops.quant import dequantize_rows, int8_rows  # noqa: E402

DEV = "cpu" if OPTS.tiny else "cuda"
START = time.perf_counter()
os.makedirs(OPTS.out, exist_ok=True)
log, record = log_and_record(os.path.join(OPTS.out, "int8_results.jsonl"),
                             os.path.join(OPTS.out, "int8_log.txt"), START)  # fmt: skip
PEAK = 1979.0  # TOP/s, H100 SXM datasheet dense int8
EPS = 1e-6
LIMITS = {"quantized": 6e-3, "exact": 3e-2}
if OPTS.tiny:
    M_LIST = [40]
    SHAPES = [("qkv", 64, 96, "norm"), ("down", 96, 64, "swiglu"), ("o", 64, 48, None)]
    PLANS = [gemm_plan("tiled", 16, 16, 32, 4, 1)]
else:
    M_LIST = [2048, 4096]
    SHAPES = [("qkv", 4096, 12288, "norm"), ("o", 4096, 4096, None),
              ("gate", 4096, 11008, "norm"), ("down", 11008, 4096, "swiglu")]  # fmt: skip
    PLANS = ws_candidates(1, int8=True) + ws_deep_k_candidates()
    # Raster: the tile-row groups that keep A rows and W columns in L2 (GROUP_M 8 in every
    # plan), varied on the cooperative 256 x 128 tile that led run 1.
    LEAD = next(
        p for p in PLANS if p["BLOCK_M"] == 256 and p["STAGES"] == 4 and p["BLOCK_K"] == 128
    )
    PLANS += [LEAD.with_meta(GROUP_M=g) for g in (4, 16)]

TIMER = DeviceTimer(OPTS.tiny, DEV)
gpu_us, copy_tbps, sync = TIMER.us, TIMER.copy_tbps, TIMER.sync


def rel_l2(out: torch.Tensor, ref: torch.Tensor) -> float:
    if torch.isnan(out.float()).any():
        return float("nan")
    return float((out.double() - ref).norm() / ref.norm())


def name_of(plan) -> str:
    kw = plan.kwargs
    if kw["KIND"] != "ws":
        return f"{kw['KIND']} {kw['BLOCK_M']}x{kw['BLOCK_N']}x{kw['BLOCK_K']}"
    schedule = "pp" if kw.get("SCHEDULE") == "pingpong" else "coop"
    if kw["GROUP_M"] != 8:
        schedule = f"g{kw['GROUP_M']} {schedule}"
    return (
        f"{schedule} {kw['BLOCK_M']}x{kw['BLOCK_N']}x{kw['BLOCK_K']} s{kw['STAGES']}c{kw['C_BUFS']}"
    )


def checked(label: str, fn: Callable[[], torch.Tensor], out: torch.Tensor, refs: dict) -> dict:
    """Poison out, run fn once, check the result against each float64 reference (NaN if any
    element was left unwritten), then time fn."""
    out.fill_(float("nan"))
    y = fn()
    sync()
    row = {f"err_{name}": rel_l2(y, ref) for name, ref in refs.items()}
    row["ok"] = all(row[f"err_{name}"] <= LIMITS[name] for name in refs)
    row["us"] = gpu_us(fn)
    return row


class Case:
    """One projection at one M: its data, its layer, the codes of its input."""

    def __init__(self, name: str, k: int, n: int, before: str | None, m: int) -> None:
        self.name, self.k, self.n, self.before, self.m = name, k, n, before, m
        gen = torch.Generator(device=DEV).manual_seed(m * 31 + k * 7 + n)
        bf16 = torch.bfloat16
        self.w = (torch.randn(n, k, device=DEV, generator=gen) / k**0.5).to(bf16)
        self.x = torch.randn(m, k, device=DEV, generator=gen).to(bf16)
        if before == "norm":
            self.norm_w = (1 + 0.1 * torch.randn(k, device=DEV, generator=gen)).to(bf16)
        if before == "swiglu":
            self.gate = (2 * torch.randn(m, k, device=DEV, generator=gen)).to(bf16)
        self.h = self.first_torch()  # the layer's input as torch's layer before writes it
        self.layer = Int8Linear(self.w, None)
        self.xq, self.sx = quantize_rows(self.h)
        self.out = torch.empty(m, n, dtype=bf16, device=DEV)

    def first_torch(self) -> torch.Tensor:
        if self.before == "norm":
            return F.rms_norm(self.x, (self.k,), self.norm_w, EPS)
        if self.before == "swiglu":
            return F.silu(self.gate) * self.x
        return self.x

    def first64(self) -> torch.Tensor:
        v = self.x.double()
        if self.before == "norm":
            return v / torch.sqrt((v * v).mean(dim=1, keepdim=True) + EPS) * self.norm_w.double()
        if self.before == "swiglu":
            return F.silu(self.gate.double()) * v
        return v

    def produce(self, q: torch.Tensor, s: torch.Tensor) -> BoundKernels:
        if self.before == "norm":
            return bind_norm(self.x, self.norm_w, None, EPS, q, rms=True, scale_out=s,
                             code_dtype=torch.int8)  # fmt: skip
        call, choice = quantize_rows_call(self.x, q, s, gate=self.gate, gate_mode="silu_mul")
        return BoundKernels.of([call], q, [choice])

    def gemm(self, plan) -> Callable[[], torch.Tensor]:
        calls, _ = gemm_calls(plan, self.xq, self.layer, self.out, row_scale=self.sx)
        return sequence(calls, self.out)


def precompile(case: Case) -> None:
    start = time.perf_counter()
    tuning.precompile(PLANS, lambda plan: case.gemm(plan))
    log(f"compiled {len(PLANS)} GEMM plans in {time.perf_counter() - start:.1f} s")


def run_case(name: str, k: int, n: int, before: str | None, m: int, copy: float) -> dict:
    c = Case(name, k, n, before, m)
    flops = 2.0 * m * n * k
    gemm_bytes = m * k + n * k + 2 * m * n + 4 * (m + n)
    floor_gemm = max(flops / PEAK / 1e6, gemm_bytes / copy / 1e6)
    quant_bytes = 3 * m * k + 4 * m
    row: dict = {"shape": name, "M": m, "N": n, "K": k, "floor_gemm_us": floor_gemm,
                 "floor_whole_us": floor_gemm + quant_bytes / copy / 1e6}  # fmt: skip
    wq = c.layer.weight
    w_deq = dequantize_rows(wq, c.layer.col_scale)
    ref_q = dequantize_rows(c.xq, c.sx) @ w_deq.T  # float64, the GEMM's own operands
    ref_exact = c.h.double() @ c.w.double().T
    row["torch_bf16"] = checked("torch bf16", lambda: F.linear(c.h, c.w, out=c.out), c.out,
                                {"exact": ref_exact})  # fmt: skip
    if not OPTS.tiny:
        sums = torch.empty(m, n, dtype=torch.int32, device=DEV)
        wt = wq.t()  # column-major, as _int_mm wants its second operand

        def int_mm() -> torch.Tensor:
            return torch._int_mm(c.xq, wt, out=sums)

        int_mm()
        sync()
        exact_sums = c.xq.double() @ wq.double().T
        row["int_mm"] = {
            "us": gpu_us(int_mm),
            "exact": bool(torch.equal(sums.double(), exact_sums)),
        }
        del exact_sums
    best = None
    for plan in PLANS:
        label = name_of(plan)
        try:
            r = checked(label, c.gemm(plan), c.out, {"quantized": ref_q})
        except Exception as exc:  # a plan the compiler or the GPU refuses: recorded, not fatal
            log(f"  {name} M={m} {label}: {type(exc).__name__}: {str(exc)[:300]}")
            row.setdefault("gemm_failed", []).append(label)
            continue
        r["tops"] = flops / r["us"] / 1e6
        row.setdefault("gemm", {})[label] = r
        if r["ok"] and (best is None or r["us"] < best[0]):
            best = (r["us"], plan, label)
    assert best is not None, "no GEMM plan ran correctly"
    plan = best[1]
    row["best_plan"] = best[2]
    row["quantizer"] = {"us": gpu_us(lambda: quantize_rows(c.h, c.xq, c.sx))}
    whole = c.layer.bind(c.h, c.out, config=plan)
    row["whole"] = checked("whole call", whole.launch, c.out,
                           {"quantized": ref_q, "exact": ref_exact})  # fmt: skip
    if before is not None:
        first64 = c.first64()
        group_exact = first64.to(torch.bfloat16).double() @ c.w.double().T
        group_q = dequantize_rows(*int8_rows(first64)) @ w_deq.T
        fused = c.layer.bind_on_codes((m,), torch.bfloat16, torch.device(DEV), c.produce,
                                      out=c.out, config=plan)  # fmt: skip
        row["fused"] = checked("fused", fused.launch, c.out,
                               {"quantized": group_q, "exact": group_exact})  # fmt: skip
        row["torch_group"] = checked("torch group", lambda: F.linear(c.first_torch(), c.w),
                                     c.out, {"exact": group_exact})  # fmt: skip
        row["torch_group"]["ok"] = True  # the peer's own error, recorded, not judged
        q, s = c.xq.clone(), c.sx.clone()
        row["producer"] = {"us": gpu_us(c.produce(q, s).launch)}
        producer_bytes = (2 if before == "norm" else 4) * m * k + m * k + 4 * m
        row["floor_fused_us"] = floor_gemm + producer_bytes / copy / 1e6
    row["torch_bf16"]["ok"] = True
    row["ok"] = all(v.get("ok", True) for v in row.values() if isinstance(v, dict) and "us" in v)
    row["ok"] = row["ok"] and (OPTS.tiny or row["int_mm"]["exact"])
    return row


def clocks() -> str:
    if OPTS.tiny:
        return "cpu"
    query = "name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu"
    try:
        run = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)  # fmt: skip
        return run.stdout.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        return f"nvidia-smi: {exc}"


def summary(rows: list[dict]) -> None:
    log("shape | M | bf16 µs | _int_mm µs (TOP/s) | best GEMM (plan) µs, TOP/s, %peak | "
        "GEMM ×bf16 | whole µs ×bf16 | quant µs | fused µs ×torch group | floor GEMM/whole/fused µs | ok")  # fmt: skip
    for r in rows:
        flops = 2.0 * r["M"] * r["N"] * r["K"]
        g = r["gemm"][r["best_plan"]]
        bf16 = r["torch_bf16"]["us"]
        int_mm = r.get("int_mm", {}).get("us")
        im = f"{int_mm:.1f} ({flops / int_mm / 1e6:.0f})" if int_mm else "-"
        fused = (f"{r['fused']['us']:.1f} {r['torch_group']['us'] / r['fused']['us']:.2f}x"
                 if "fused" in r else "-")  # fmt: skip
        floors = (
            f"{r['floor_gemm_us']:.1f}/{r['floor_whole_us']:.1f}/{r.get('floor_fused_us', 0):.1f}"
        )
        log(f"{r['shape']} | {r['M']} | {bf16:.1f} | {im} | {g['us']:.1f} ({r['best_plan']}), "
            f"{g['tops']:.0f}, {100 * g['tops'] / PEAK:.0f}% | {bf16 / g['us']:.2f} | "
            f"{r['whole']['us']:.1f} {bf16 / r['whole']['us']:.2f}x | {r['quantizer']['us']:.1f} | "
            f"{fused} | {floors} | {'ok' if r['ok'] else 'FAILED'}")  # fmt: skip
    log("GEMM µs by plan (rows: shape M):")
    for r in rows:
        times = ", ".join(
            f"{k} {v['us']:.1f}{'' if v['ok'] else ' BAD'}" for k, v in r["gemm"].items()
        )
        log(f"  {r['shape']} {r['M']}: {times}")


def main() -> None:
    copy = copy_tbps()
    log(f"copy {copy:.3f} TB/s; {clocks()}; torch {torch.__version__}")
    rows = []
    for m in M_LIST:
        for name, k, n, before in SHAPES:
            if time.perf_counter() - START > OPTS.budget:
                log(f"budget spent before {name} M={m}")
                break
            try:
                if not rows and not OPTS.tiny:
                    precompile(Case(name, k, n, before, m))
                row = run_case(name, k, n, before, m, copy)
            except Exception as exc:
                log(f"{name} M={m} failed: {type(exc).__name__}: {exc}")
                record({"shape": name, "M": m, "error": f"{type(exc).__name__}: {exc}"})
                continue
            record(row)
            rows.append(row)
            log(f"{name} M={m} done")
            if not OPTS.tiny:
                torch.cuda.empty_cache()
    log(f"after: {clocks()}")
    summary(rows)
    log(
        f"all checks passed: {all(r['ok'] for r in rows) and len(rows) == len(SHAPES) * len(M_LIST)}"
    )


if __name__ == "__main__":
    main()
