"""The warp-specialized int8 attention kernel (opbench/kernels/attention/attention_ws.py, quant "int8") on one
Hopper GPU in one run, beside the portable int8 kernel, the warp-specialized fp8 kernel and
SDPA: attention_ws_gpu.py's sections (whose helpers it reuses) for the quantized paths.

Usage (GPU machine, repository root; rows go to $OUT/attention_gpu.jsonl):
    PYTHONPATH=. PYTHONUNBUFFERED=1 python3 bench/attention_ws_int8_gpu.py --budget-s 120

Sections:
  env      card, versions, copy bandwidth and the dense fp16 GEMM rate (measured here).
  compile  every configuration the run binds, compiled by a process pool first.
  check    each int8 warp-specialized tile (after attention_int8's key passes) on odd shapes
           (S 1000, 37, 300: tiles cross batch ends, partial key blocks), D 64 and 128, causal
           and not, outputs NaN-poisoned, against float64 (limit 3e-2, `quant: int8`) and
           against the float64 int8 model (tests/kernels/attention_reference.int8_model: the
           quantization rule the kernel implements, limit 2e-3 fp16 / 1e-2 bf16); the
           portable int8 kernel and the `Int8Attention` layer as bound (its tuned choice), in
           a child process with a time limit (a deadlock is killed and recorded).
  prefill  B S = 16384 tokens, H D = 2048, fp16: S 2048 and 8192, D 128 and 64, causal and
           not: SDPA default / cuDNN / flash, the portable int8 kernel (int8_tl, tuned over its
           tiles), each int8 warp-specialized tile forced (wsi8_...) and each fp8 one (ws8_...),
           quantization passes included; every timed output checked against float32.
TFLOP/s = 4 B H S^2 D / t (half when causal); % of 1979 (int8/fp8 dense peak) or 989 (fp16).
"""

from __future__ import annotations

import functools
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import torch  # noqa: E402
from attention_gpu_common import (  # noqa: E402
    DTYPES,
    LIMIT,
    PEAK,
    attention_ref,
    child_rows,
    compile_pool,
    heads_view,
    layer_fn,
    over_budget,
    packed_input,
    prefill_baseline,
    prefill_line,
    record,
    rel,
    sync,
    timed,
    ws_bench_main,
)
from attention_ws_gpu import CHECK_CASES as WS_CHECK_CASES  # noqa: E402
from attention_ws_gpu import calls_fn, rows, ws_fp8_calls_fn, ws_fp8_configs  # noqa: E402

from opbench.kernels.attention.attention import split_heads  # noqa: E402
from opbench.kernels.attention.attention_int8 import attention_int8_calls  # noqa: E402
from opbench.kernels.attention.attention_int8_layer import Int8Attention  # noqa: E402

# attention_ws_gpu's odd shapes (S 1000 and 37), and S 300 causal at D 64 instead of its S 4096.
CHECK_CASES = [*WS_CHECK_CASES[:5], dict(B=2, S=300, H=2, D=64, causal=True, dtype="fp16")]
# The order is the order of importance: cases past --budget-s are recorded as skipped.
PREFILL = [dict(B=16384 // s, S=s, H=2048 // d, D=d, causal=c, dtype="fp16")
           for s in (8192, 2048) for d in (128, 64) for c in (False, True)]  # fmt: skip
MODEL_LIMIT = {"fp16": 2e-3, "bf16": 1e-2}
CHECK_TIMEOUT_S = 60


def ws_int8_configs(d: int) -> list[dict]:
    from opbench.kernels.attention.attention_ws import WS_TILES
    from opbench.kernels.attention.attention_ws_step import ws_config

    return [ws_config(tile) for tile in WS_TILES["int8"][d]]


def int8_name(cfg: dict) -> str:
    return (f"wsi8_{cfg['BLOCK_N']}s{cfg['STAGES']}{'pp' if cfg['PINGPONG'] else ''}"
            f"{'r' if cfg['P_REGS'] else ''}")  # fmt: skip


def fp8_name(cfg: dict) -> str:
    return (f"ws8_{cfg['BLOCK_N']}s{cfg['STAGES']}{'pp' if cfg['PINGPONG'] else ''}"
            f"{'r' if cfg['P_REGS'] else ''}")  # fmt: skip


def ws_int8_fn(q, k, v, causal, config):
    from opbench.kernels.attention.attention_ws import ws_calls

    return calls_fn(functools.partial(ws_calls, quant="int8"), q, k, v, causal, config)[0]


def compile_section() -> None:
    from opbench.kernels.attention.attention_plans import INT8_TILES, tile_config

    jobs = []
    for case in CHECK_CASES + PREFILL:
        jobs += [("ws_int8", case, cfg) for cfg in ws_int8_configs(case["D"])]
        jobs += [("int8", case, tile_config(t, False)) for t in INT8_TILES[case["D"]]]
        if case in PREFILL:
            jobs += [("ws8", case, cfg) for cfg in ws_fp8_configs(case["D"])]
    # One job per distinct compiled kernel: Triton specializes integer arguments on their
    # divisibility by 16 (S and B S here), not on their values.
    distinct = {}
    for kind, case, cfg in jobs:
        b, s = case["B"], case["S"]
        key = (kind, case["D"], case["causal"], case["dtype"], s % 16 == 0, (b * s) % 16 == 0,
               repr(cfg))  # fmt: skip
        distinct.setdefault(key, (kind, case, cfg))
    jobs = list(distinct.values())
    compile_pool(jobs, 15, 60)


def check_child() -> None:
    """In the child process: every int8 ws tile, the portable int8 kernel and the layer."""
    sys.path.insert(0, str(Path(__file__).parents[1]))
    from tests.kernels.attention_reference import int8_model

    for case in CHECK_CASES:
        b, s, h, d, causal, dt = (case[k] for k in ("B", "S", "H", "D", "causal", "dtype"))
        x = packed_input(b, s, h, d, DTYPES[dt], seed=s + d + causal)
        ref = attention_ref(*heads_view(x, h), causal).transpose(1, 2).flatten(2)
        model = int8_model(x, h, causal, q_rows=64)
        q, k, v = split_heads(x, h, True)
        variants = {int8_name(c): (lambda c=c: ws_int8_fn(q, k, v, causal, c))
                    for c in ws_int8_configs(d)}  # fmt: skip
        variants["int8_tl"] = lambda: calls_fn(attention_int8_calls, q, k, v, causal)[0]
        variants["int8_layer"] = lambda: layer_fn(Int8Attention, x, h, causal)[0]
        for name, make in variants.items():
            row = {"section": "check", **case, "variant": name}
            try:
                out = make()()
                sync()
                row["unwritten"] = int(torch.isnan(out).sum())
                row["rel_l2"] = rel(out, ref)
                row["limit"] = LIMIT["int8"]
                row["pass"] = row["unwritten"] == 0 and row["rel_l2"] <= row["limit"]
                if name.startswith("wsi8"):  # the rule it implements, tile for tile
                    row["rel_model"] = rel(out, model)
                    row["pass"] = row["pass"] and row["rel_model"] <= MODEL_LIMIT[dt]
            except Exception as exc:
                row["error"] = f"{type(exc).__name__}: {exc}"[:300]
                traceback.print_exc()
            record(row)


def check_section() -> set[str]:
    """The check in a child with a time limit; returns the int8 ws tiles that passed on every
    case of their head dim."""
    start = time.perf_counter()
    checked = child_rows(__file__, CHECK_TIMEOUT_S)
    passed = set()
    for d in (64, 128):
        needed = sum(1 for c in CHECK_CASES if c["D"] == d)
        for cfg in ws_int8_configs(d):
            mine = [r for r in checked if r["variant"] == int8_name(cfg) and r["D"] == d]
            if len(mine) == needed and all(r.get("pass") for r in mine):
                passed.add((d, int8_name(cfg)))
    record({"section": "check_summary", "wall_s": time.perf_counter() - start,
            "all_pass": all(r.get("pass") for r in checked),
            "passed": sorted(f"D{d} {n}" for d, n in passed)})  # fmt: skip
    return passed


def prefill_section(passed: set) -> None:
    for case in PREFILL:
        row = {"section": "prefill", **case}
        if over_budget():
            record({**row, "skipped": "budget"})
            continue
        h, d, causal = case["H"], case["D"], case["causal"]
        try:
            x, ref, flops = prefill_baseline(row, case, ("default", "cudnn", "flash"))
            q, k, v = split_heads(x, h, True)
            fn, row["int8_tl_config"] = calls_fn(attention_int8_calls, q, k, v, causal)
            timed(row, "int8_tl", fn, ref, h, flops, PEAK["int8"])
            for cfg in ws_int8_configs(d):
                if (d, int8_name(cfg)) in passed:
                    timed(row, int8_name(cfg), ws_int8_fn(q, k, v, causal, cfg), ref, h, flops,
                          PEAK["int8"])  # fmt: skip
            for cfg in ws_fp8_configs(d):
                timed(row, fp8_name(cfg), ws_fp8_calls_fn(q, k, v, causal, cfg)[0], ref, h,
                      flops, PEAK["fp8"])  # fmt: skip
            sdpa = [row[k] for k in row if k.startswith("sdpa_") and k.endswith("_ms")]
            row["best_sdpa_ms"] = min(sdpa)
            for key in [k for k in row if k.endswith("_ms") and not k.startswith("sdpa_")]:
                row[key[:-3] + "_vs_best_sdpa"] = row["best_sdpa_ms"] / row[key]
        except Exception as exc:
            row["error"] = f"{type(exc).__name__}: {exc}"[:300]
            traceback.print_exc()
        record(row)


def summary() -> None:
    print("\n== summary (TFLOP/s (% of peak, ratio to the best SDPA)) ==")
    for r in rows():
        if r.get("section") == "env":
            print(f"env {r.get('gpu')} torch {r['torch']} triton {r['triton']}")
        elif r.get("section") == "check" and "variant" in r:
            print(f"check {r['variant']:<12} {r['dtype']} B{r['B']} S{r['S']} D{r['D']} "
                  f"{'c' if r['causal'] else ' '} rel {r.get('rel_l2', float('nan')):.2e} "
                  f"model {r.get('rel_model', float('nan')):.1e} "
                  f"{'PASS' if r.get('pass') else 'FAIL'} {r.get('error', '')[:80]}")  # fmt: skip
        elif r.get("section") == "prefill" and "best_sdpa_ms" in r:
            print(prefill_line(r, lambda n: LIMIT["fp8" if n.startswith("ws8_") else "int8"]))


if __name__ == "__main__":
    ws_bench_main(check_child, compile_section, check_section, prefill_section, summary)
