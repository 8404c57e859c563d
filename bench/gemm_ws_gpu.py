"""The warp-specialized Gluon GEMM (opbench/kernels/gemm_ws.py) on the GPU, beside its peers.

For each shape: every ws tile is checked on fresh random data (NaN-poisoned output, relative
L2 against an fp32 reference of the same operands with TF32 off) and timed with
triton.testing.do_bench (median, L2 flushed before each sample) beside cuBLAS (F.linear),
torch._scaled_mm (fp8 row-wise, fast accumulation), torch._int_mm, and today's `Linear`
choice without the ws kernel (shipped plan or tuned among the Triton tiles). GEMM only for
the quantized paths: x is quantized once before timing (the pre-pass is the same for all).

    python bench/gemm_ws_gpu.py [--quick] [--out DIR]

Prints a table (TFLOP/s, % of the dense peak: 989 fp16/bf16, 1979 fp8/int8 on H100 SXM)
and writes every row to DIR/gemm_ws.jsonl.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F
from triton.testing import do_bench

from opbench.kernels import tuning
from opbench.kernels.gemm_ws import ws_call
from opbench.kernels.launch import sequence
from opbench.kernels.linear import Linear, gemm_calls
from opbench.kernels.linear_fp8 import Fp8Linear
from opbench.kernels.linear_int8 import Int8Linear
from opbench.kernels.linear_plans import sm_count, ws_candidates
from opbench.ops.quant import fp8_rows, int8_rows

PEAK = {"fp16": 989.0, "bf16": 989.0, "fp8": 1979.0, "int8": 1979.0}
LLAMA = [(12288, 4096), (4096, 4096), (11008, 4096), (22016, 4096), (4096, 11008)]
BERT = [(2304, 768), (768, 768), (3072, 768), (768, 3072)]
ROWS: list[dict] = []
OUT_DIR = "."


def shapes(quick: bool) -> list[tuple[int, int, int]]:
    out = [(m, n, k) for m in (2048, 4096) for n, k in LLAMA]
    out += [(4096, n, k) for n, k in BERT] + [(8192, 8192, 8192)]
    return out[:3] + out[-2:] if quick else out


def bench_ms(fn) -> float:
    return float(do_bench(fn, warmup=10, rep=60, return_mode="median"))


def rel_l2(out: torch.Tensor, ref: torch.Tensor) -> float:
    if torch.isnan(out).any():
        return float("nan")
    return float((out.float() - ref).norm() / ref.norm())


def emit(kind: str, shape, name: str, ms: float | None, err: float | None = None, note: str = ""):
    m, n, k = shape
    tflops = 2.0 * m * n * k / ms / 1e9 if ms else None
    row = {"card": CARD, "dtype": kind, "M": m, "N": n, "K": k, "variant": name, "ms": ms,
           "tflops": tflops, "pct_peak": 100 * tflops / PEAK[kind] if tflops else None,
           "err": err, "note": note}  # fmt: skip
    ROWS.append(row)
    with open(os.path.join(OUT_DIR, "gemm_ws.jsonl"), "a") as f:
        f.write(json.dumps(row) + "\n")
    t = f"{tflops:7.1f} {row['pct_peak']:5.1f}%" if tflops else "    -      - "
    e = f"{err:.1e}" if err is not None else "   -   "
    print(f"{kind:5} {m:5} {n:5} {k:5}  {name:34} {ms or 0:8.4f} ms {t} err {e} {note}", flush=True)


def plan_name(plan) -> str:
    kw = plan.kwargs
    if kw["KIND"] == "ws":
        return f"ws {kw['BLOCK_M']}x{kw['BLOCK_N']}x{kw['BLOCK_K']} s{kw['STAGES']} c{kw['C_BUFS']}"
    return f"{kw['KIND']} {kw['BLOCK_M']}x{kw['BLOCK_N']}x{kw['BLOCK_K']} w{plan.num_warps} s{plan.num_stages}"


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
    emit(kind, shape, "cuBLAS F.linear", bench_ms(lambda: F.linear(x, w)),
         rel_l2(F.linear(x, w), ref))  # fmt: skip
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
    for plan in ws_candidates(2):
        out = torch.full((m, n), float("nan"), dtype=dtype, device="cuda")
        try:
            call, keep = ws_call(plan, x, w, out, bias=None, row_scale=None, col_scale=None,
                                 residual=None, activation=0, programs=sm_count(x.device))  # fmt: skip
            call.call()
            torch.cuda.synchronize()
            err = rel_l2(out, ref)
            emit(kind, shape, plan_name(plan), bench_ms(call.call), err)
        except Exception as exc:  # noqa: BLE001 - recorded, the sweep goes on
            emit(kind, shape, plan_name(plan), None, None, f"{type(exc).__name__}: {exc}"[:120])


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
    emit(quant, shape, "cuBLAS fp16 F.linear", bench_ms(lambda: F.linear(x, w)))
    layer = (Fp8Linear if quant == "fp8" else Int8Linear)(w, None)
    out = torch.full((m, n), float("nan"), dtype=torch.float16, device="cuda")
    choice = current_choice(layer, x, out)
    row_scale = sx.float().contiguous()
    if choice is None:
        emit(quant, shape, f"{quant}Linear today (gemm)", None, None, "no shipped plan")
    else:
        calls, _ = gemm_calls(choice.config, xq, layer, out, row_scale=row_scale)
        launch = sequence(calls, out)
        launch()
        emit(quant, shape, f"{quant}Linear today (gemm): {plan_name(choice.config)}",
             bench_ms(launch), rel_l2(out, ref), choice.source)  # fmt: skip
    for plan in ws_candidates(1, quant == "int8"):
        out = torch.full((m, n), float("nan"), dtype=torch.float16, device="cuda")
        try:
            call, keep = ws_call(plan, xq, layer.weight, out, bias=None, row_scale=row_scale,
                                 col_scale=layer.col_scale, residual=None, activation=0,
                                 programs=sm_count(x.device))  # fmt: skip
            call.call()
            torch.cuda.synchronize()
            emit(quant, shape, plan_name(plan), bench_ms(call.call), rel_l2(out, ref))
        except Exception as exc:  # noqa: BLE001 - recorded, the sweep goes on
            emit(quant, shape, plan_name(plan), None, None, f"{type(exc).__name__}: {exc}"[:120])


def main() -> int:
    global OUT_DIR, CARD
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default=".")
    parser.add_argument("--budget-s", type=float, default=150.0)
    parser.add_argument("--parts", default="fp16,fp8,int8,bf16")
    args = parser.parse_args()
    OUT_DIR = args.out
    CARD = torch.cuda.get_device_name()
    print(f"card {CARD}, torch {torch.__version__}, SMs {sm_count(torch.device('cuda'))}")
    start = time.time()
    parts = args.parts.split(",")
    for shape in shapes(args.quick):
        for part in parts:
            if time.time() - start > args.budget_s:
                print("budget spent: stopping", flush=True)
                return 0
            if part in ("fp16", "bf16"):
                if part == "bf16" and shape[0] * shape[1] * shape[2] != 8192**3:
                    continue
                run_16bit(shape, torch.float16 if part == "fp16" else torch.bfloat16)
            elif shape[0] >= 4096 and shape[1] >= 4096:
                run_quantized(shape, part)
    return 0


CARD = "?"
if __name__ == "__main__":
    sys.exit(main())
