"""The warp-specialized Gluon GEMM (opbench/kernels/gemm/gemm_ws.py) on the GPU, beside its peers.

For each shape: every ws plan of both schedules (cooperative and ping-pong) is checked on
fresh random data (NaN-poisoned output, relative L2 against an fp32 reference of the same
operands with TF32 off; a row over its dtype's tolerance is marked BAD and never counts as
a best) and timed with triton.testing.do_bench (median, L2 flushed before each sample)
beside cuBLAS (torch.mm), torch._scaled_mm (fp8 row-wise, fast accumulation),
torch._int_mm and, with --today, today's `Linear` choice without the ws kernel (shipped
plan only). GEMM only for the quantized paths: x is quantized once before timing (the
pre-pass is the same for all).

    python bench/gemm_ws_gpu.py [--groups llama2048,llama4096,bert] [--parts fp16,fp8,int8]
                                [--budget-s 120] [--out DIR]

Groups: llama2048 / llama4096 (LLaMA-7B projections at M 2048 / 4096: K x N 4096 x 12288,
4096 x 4096, 4096 x 11008, 11008 x 4096), bert (BERT-base at M 4096: 768 x 2304, 768 x 768,
768 x 3072, 3072 x 768), big (4096 x 22016 at M 2048/4096, 8192^3). Prints every row, then
a summary (best coop, best ping-pong, the peer; TFLOP/s and % of the dense peak: 989
fp16/bf16, 1979 fp8/int8 on H100 SXM), and writes every row to DIR/gemm_ws.jsonl.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch
from triton.testing import do_bench

from opbench.kernels import tuning
from opbench.kernels.gemm.gemm_ws import ws_call
from opbench.kernels.gemm.linear import Linear, gemm_calls
from opbench.kernels.gemm.linear_fp8 import Fp8Linear
from opbench.kernels.gemm.linear_int8 import Int8Linear
from opbench.kernels.gemm.linear_plans import sm_count, ws_candidates
from opbench.kernels.launch import sequence
from opbench.ops.quant import fp8_rows, int8_rows

PEAK = {"fp16": 989.0, "bf16": 989.0, "fp8": 1979.0, "int8": 1979.0}
# Relative L2 error a ws row may have against the fp32 reference of its own operands
# (fp16 outputs round at ~2e-4; fp8's bf16/fp16 output and fp32 sums of e4m3 products ~3e-3).
TOLERANCE = {"fp16": 2e-3, "bf16": 1e-2, "fp8": 1e-2, "int8": 2e-3}
LLAMA = [(12288, 4096), (4096, 4096), (11008, 4096), (4096, 11008)]  # (N, K)
BERT = [(2304, 768), (768, 768), (3072, 768), (768, 3072)]
GROUPS = {
    "llama2048": [(2048, n, k) for n, k in LLAMA],
    "llama4096": [(4096, n, k) for n, k in LLAMA],
    "bert": [(4096, n, k) for n, k in BERT],
    "big": [(2048, 22016, 4096), (4096, 22016, 4096), (8192, 8192, 8192)],
}
ROWS: list[dict] = []
OUT_DIR = "."
TODAY = False
COMPILED: set[str] = set()


def bench_ms(fn) -> float:
    return float(do_bench(fn, warmup=10, rep=60, return_mode="median"))


def rel_l2(out: torch.Tensor, ref: torch.Tensor) -> float:
    if torch.isnan(out).any():
        return float("nan")
    return float((out.float() - ref).norm() / ref.norm())


def emit(kind: str, shape, name: str, ms: float | None, err: float | None = None, note: str = ""):
    m, n, k = shape
    tflops = 2.0 * m * n * k / ms / 1e9 if ms else None
    bad = name.startswith("ws") and (err is None or not err <= TOLERANCE[kind])
    row = {"card": CARD, "dtype": kind, "M": m, "N": n, "K": k, "variant": name, "ms": ms,
           "tflops": tflops, "pct_peak": 100 * tflops / PEAK[kind] if tflops else None,
           "err": err, "ok": not bad, "note": note}  # fmt: skip
    ROWS.append(row)
    with open(os.path.join(OUT_DIR, "gemm_ws.jsonl"), "a") as f:
        f.write(json.dumps(row) + "\n")
    t = f"{tflops:7.1f} {row['pct_peak']:5.1f}%" if tflops else "    -      - "
    e = f"{err:.1e}" if err is not None else "   -   "
    flag = " BAD" if bad else ""
    print(f"{kind:5} {m:5} {n:5} {k:5}  {name:34} {ms or 0:8.4f} ms {t} err {e}{flag} {note}",
          flush=True)  # fmt: skip


def plan_name(plan) -> str:
    kw = plan.kwargs
    if kw["KIND"] == "ws":
        schedule = "pp" if kw.get("SCHEDULE") == "pingpong" else "coop"
        return (f"ws {schedule} {kw['BLOCK_M']}x{kw['BLOCK_N']}x{kw['BLOCK_K']} "
                f"s{kw['STAGES']} c{kw['C_BUFS']}")  # fmt: skip
    return f"{kw['KIND']} {kw['BLOCK_M']}x{kw['BLOCK_N']}x{kw['BLOCK_K']} w{plan.num_warps} s{plan.num_stages}"


def run_ws(kind: str, shape, plans, a, w, ref, **epilogue) -> None:
    """Every ws plan on (a, w): compiled in parallel the first time (every shape of a dtype
    shares the compiled kernels), checked against ref, timed."""
    m, n, _ = shape
    out_dtype = torch.bfloat16 if kind == "bf16" else torch.float16
    programs = sm_count(a.device)

    def make(plan):
        out = torch.full((m, n), float("nan"), dtype=out_dtype, device="cuda")
        call, keep = ws_call(plan, a, w, out, residual=None, activation=0, programs=programs,
                             **epilogue)  # fmt: skip
        return call.call

    if kind not in COMPILED:
        start = time.time()
        tuning.precompile(plans, make)
        COMPILED.add(kind)
        print(f"compiled {len(plans)} {kind} ws plans in {time.time() - start:.1f} s", flush=True)
    for plan in plans:
        out = torch.full((m, n), float("nan"), dtype=out_dtype, device="cuda")
        try:
            call, keep = ws_call(plan, a, w, out, residual=None, activation=0,
                                 programs=programs, **epilogue)  # fmt: skip
            call.call()
            torch.cuda.synchronize()
            emit(kind, shape, plan_name(plan), bench_ms(call.call), rel_l2(out, ref))
        except Exception as exc:  # noqa: BLE001 - recorded, the sweep goes on
            emit(kind, shape, plan_name(plan), None, None, f"{type(exc).__name__}: {exc}"[:120])


class WouldTune(Exception):
    pass


def _no_tuning(*_args, **_kw):
    raise WouldTune


def current_choice(layer: Linear, x: torch.Tensor, out: torch.Tensor):
    """Today's choice for x: the layer's plan with the ws kernel left out, when the package
    ships one for this GPU (or a cache holds one); None where it would have to tune (tuning
    every shape costs more device time than this run has)."""
    layer.ws_ok = lambda *_: False  # the instance only: the class keeps offering it
    saved = tuning._tune
    tuning._tune = _no_tuning
    try:
        return layer.choose(x, out, None)
    except WouldTune:
        return None
    finally:
        tuning._tune = saved


def run_16bit(shape, dtype: torch.dtype) -> None:
    kind = "fp16" if dtype == torch.float16 else "bf16"
    m, n, k = shape
    x = torch.randn(m, k, device="cuda").to(dtype)
    w = (torch.randn(n, k, device="cuda") / k**0.5).to(dtype)
    with torch.no_grad():
        torch.backends.cuda.matmul.allow_tf32 = False
        ref = x.float() @ w.float().T
    wt = w.t()
    emit(kind, shape, "cuBLAS torch.mm", bench_ms(lambda: torch.mm(x, wt)),
         rel_l2(torch.mm(x, wt), ref))  # fmt: skip
    if TODAY:
        layer = Linear(w, None)
        out = torch.full((m, n), float("nan"), dtype=dtype, device="cuda")
        choice = current_choice(layer, x, out)
        if choice is None:
            emit(kind, shape, "Linear today", None, None, "no shipped plan: not tuned here")
        else:
            calls, _ = layer.calls(choice.config, x, out)
            launch = sequence(calls, out)
            launch()
            emit(kind, shape, f"Linear today: {plan_name(choice.config)}", bench_ms(launch),
                 rel_l2(out, ref), choice.source)  # fmt: skip
    run_ws(kind, shape, ws_candidates(2), x, w, ref, bias=None, row_scale=None, col_scale=None)


def run_quantized(shape, quant: str) -> None:
    m, n, k = shape
    # fp16 activations (the shipped int8 plans are keyed on them); _scaled_mm writes bf16
    # (its row-wise path takes no other output type): same bytes.
    x = torch.randn(m, k, device="cuda").to(torch.float16)
    w = (torch.randn(n, k, device="cuda") / k**0.5).to(torch.float16)
    rows = fp8_rows if quant == "fp8" else int8_rows
    xq, sx = rows(x)
    wq, sw = rows(w)
    ref = (xq.float() * sx[:, None].float()) @ (wq.float() * sw[:, None].float()).T
    if quant == "fp8":
        sa, sb = sx[:, None].float().contiguous(), sw[None, :].float().contiguous()

        def peer():
            return torch._scaled_mm(xq, wq.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16,
                                    use_fast_accum=True)  # fmt: skip

        emit(quant, shape, "torch _scaled_mm row-wise fast", bench_ms(peer), rel_l2(peer(), ref))
    else:
        wt = wq.t()
        emit(quant, shape, "torch _int_mm (int32 out, no scale)",
             bench_ms(lambda: torch._int_mm(xq, wt)))  # fmt: skip
    wt16 = w.t()
    emit(quant, shape, "cuBLAS fp16 torch.mm", bench_ms(lambda: torch.mm(x, wt16)))
    layer = (Fp8Linear if quant == "fp8" else Int8Linear)(w, None)
    row_scale = sx.float().contiguous()
    if TODAY:
        out = torch.full((m, n), float("nan"), dtype=torch.float16, device="cuda")
        choice = current_choice(layer, x, out)
        if choice is None:
            emit(quant, shape, f"{quant}Linear today (gemm)", None, None, "no shipped plan")
        else:
            calls, _ = gemm_calls(choice.config, xq, layer, out, row_scale=row_scale)
            launch = sequence(calls, out)
            launch()
            emit(quant, shape, f"{quant}Linear today (gemm): {plan_name(choice.config)}",
                 bench_ms(launch), rel_l2(out, ref), choice.source)  # fmt: skip
    run_ws(quant, shape, ws_candidates(1, quant == "int8"), xq, layer.weight, ref, bias=None,
           row_scale=row_scale, col_scale=layer.col_scale)  # fmt: skip


def summary() -> None:
    """Per shape and dtype: the peer, the best correct coop and ping-pong rows, and ratios."""
    peers = {"fp16": "cuBLAS torch.mm", "bf16": "cuBLAS torch.mm",
             "fp8": "torch _scaled_mm row-wise fast", "int8": "torch _int_mm (int32 out, no scale)"}  # fmt: skip
    print(f"\nsummary ({CARD}): TFLOP/s (ms); best ws / peer; pp / coop")
    keys = dict.fromkeys((r["dtype"], r["M"], r["N"], r["K"]) for r in ROWS)
    for kind, m, n, k in keys:
        rows = [r for r in ROWS if (r["dtype"], r["M"], r["N"], r["K"]) == (kind, m, n, k)]
        peer = next((r for r in rows if r["variant"] == peers[kind] and r["ms"]), None)

        def best(prefix):
            ok = [r for r in rows if r["variant"].startswith(prefix) and r["ms"] and r["ok"]]
            return min(ok, key=lambda r: r["ms"]) if ok else None

        coop, pp = best("ws coop"), best("ws pp")
        cell = lambda r: f"{r['tflops']:6.0f} ({r['ms']:.4f})" if r else "      -         "  # noqa: E731
        winner = min((r for r in (coop, pp) if r), key=lambda r: r["ms"], default=None)
        vs_peer = f"{peer['ms'] / winner['ms']:.2f}x" if peer and winner else "-"
        pp_coop = f"{coop['ms'] / pp['ms']:.2f}x" if coop and pp else "-"
        pct = f"{winner['pct_peak']:.0f}%" if winner else "-"
        name = winner["variant"] if winner else "-"
        fp16 = next((r for r in rows if r["variant"] == "cuBLAS fp16 torch.mm" and r["ms"]), None)
        vs_fp16 = f" x{fp16['ms'] / winner['ms']:.2f} fp16" if fp16 and winner else ""
        print(f"{kind:5} {m:5} {n:5} {k:5} peer {cell(peer)} coop {cell(coop)} pp {cell(pp)} "
              f"best/peer {vs_peer:6} pp/coop {pp_coop:6} {pct:4} {name}{vs_fp16}", flush=True)  # fmt: skip
    bad = [r for r in ROWS if not r["ok"]]
    print(f"rows {len(ROWS)}, BAD (over tolerance, NaN or failed) {len(bad)}", flush=True)


def main() -> int:
    global OUT_DIR, CARD, TODAY
    parser = argparse.ArgumentParser()
    parser.add_argument("--groups", default="llama2048,llama4096,bert")
    parser.add_argument("--out", default=".")
    parser.add_argument("--budget-s", type=float, default=150.0)
    parser.add_argument("--parts", default="fp16,fp8,int8")
    parser.add_argument("--today", action="store_true", help="also today's shipped plan")
    args = parser.parse_args()
    OUT_DIR, TODAY = args.out, args.today
    CARD = torch.cuda.get_device_name()
    print(f"card {CARD}, torch {torch.__version__}, SMs {sm_count(torch.device('cuda'))}")
    start = time.time()
    parts = args.parts.split(",")
    shapes = [shape for group in args.groups.split(",") for shape in GROUPS[group]]
    try:
        for shape in shapes:
            for part in parts:
                if time.time() - start > args.budget_s:
                    print("budget spent: stopping", flush=True)
                    return 0
                if part in ("fp16", "bf16"):
                    run_16bit(shape, torch.float16 if part == "fp16" else torch.bfloat16)
                else:
                    run_quantized(shape, part)
    finally:
        summary()
    return 0


CARD = "?"
if __name__ == "__main__":
    sys.exit(main())
