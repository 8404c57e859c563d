"""The warp-specialized Gluon attention kernel (opbench/kernels/attention/attention_ws.py) on one Hopper
GPU in one run: correctness first, then times beside SDPA and the current kernels.

Usage (GPU machine, repository root; rows go to $OUT/attention_gpu.jsonl):
    PYTHONPATH=. PYTHONUNBUFFERED=1 python3 bench/attention_ws_gpu.py --budget-s 150 [--from N]
(--from N: start the prefill cases at the N-th, to finish a run that its budget cut short.)

Sections:
  env      card, versions, copy bandwidth and the dense fp16 GEMM rate (measured here).
  compile  every configuration the run binds, compiled by a process pool first.
  check    each warp-specialized config (fp16/bf16 kernel; fp8 kernel after attention_fp8's
           quantization passes) on odd shapes (S 1000 and 37: tiles cross batch ends, partial
           key blocks) against float64, outputs NaN-poisoned, and the layers as opbench binds
           them (`Attention`, `Fp8Attention`), in a child process with a time limit: a kernel
           that deadlocks on its mbarriers is killed with its process (and recorded), and the
           timed section then leaves that kernel out.
  prefill  B S = 16384 tokens, H D = 2048: S 2048 and 8192, D 128 and 64, causal and not, fp16
           (bf16 at S 8192, D 128): SDPA default / cuDNN / flash, `Attention` (auto: its tuned
           choice), each warp-specialized config forced, and on fp16 the fp8 paths: the
           portable fp8 kernel (fp8_tl, tuned over its tiles) and each warp-specialized fp8
           tile forced (ws8_...), quantization passes included; every timed output checked against
           float32.
Times and FLOP counts as in bench/attention_gpu.py (do_bench, warmup 25 ms, rep 100 ms, median,
L2 flushed; TFLOP/s = 4 B H S^2 D / t, half when causal).
"""

from __future__ import annotations

import functools
import json
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import torch  # noqa: E402
from attention_gpu_common import (  # noqa: E402
    DTYPES,
    LIMIT,
    OUT,
    PEAK,
    attention_ref,
    child_rows,
    compile_pool,
    heads_view,
    layer_fn,
    over_budget,
    packed_input,
    poisoned,
    prefill_baseline,
    prefill_line,
    record,
    rel,
    sync,
    timed,
    ws_bench_main,
)

from opbench.kernels.attention.attention import split_heads  # noqa: E402
from opbench.kernels.attention.attention_fp8 import attention_fp8_calls  # noqa: E402
from opbench.kernels.attention.attention_fp8_layer import Fp8Attention  # noqa: E402
from opbench.kernels.attention.attention_layer import Attention  # noqa: E402

CHECK_CASES = [
    dict(B=2, S=1000, H=4, D=128, causal=True, dtype="fp16"),
    dict(B=2, S=1000, H=4, D=128, causal=False, dtype="fp16"),
    dict(B=3, S=1000, H=4, D=64, causal=False, dtype="fp16"),
    dict(B=2, S=1000, H=4, D=64, causal=True, dtype="bf16"),
    dict(B=2, S=37, H=2, D=128, causal=False, dtype="bf16"),
    dict(B=2, S=4096, H=2, D=128, causal=True, dtype="fp16"),
]
# The order is the order of importance: cases past --budget-s are recorded as skipped.
PREFILL = [dict(B=16384 // s, S=s, H=2048 // d, D=d, causal=c, dtype="fp16")
           for d in (128, 64) for s in (8192, 2048) for c in (False, True)]  # fmt: skip
PREFILL[2:2] = [dict(B=2, S=8192, H=16, D=128, causal=c, dtype="bf16") for c in (False, True)]
LAYER_CHECKS = CHECK_CASES[:3]  # the layers as bound (tuned: every candidate compiles)
LLAMA = dict(B=1, S=2048, H=32, D=128, causal=True, dtype="fp16")
CHECK_TIMEOUT_S = 90


def ws_configs(d: int) -> list[dict]:
    from opbench.kernels.attention.attention_ws import WS_TILES
    from opbench.kernels.attention.attention_ws_step import ws_config

    return [ws_config(tile) for tile in WS_TILES["fp16"][d]]


def ws_fp8_configs(d: int) -> list[dict]:
    from opbench.kernels.attention.attention_ws import WS_TILES
    from opbench.kernels.attention.attention_ws_step import ws_config

    return [{**ws_config(tile), "FP8": True} for tile in WS_TILES["fp8"][d]]


def cfg_name(cfg: dict) -> str:
    kind = "ws8_" if cfg.get("FP8") else "ws"
    return (f"{kind}{cfg['BLOCK_N']}s{cfg['STAGES']}{'pp' if cfg['PINGPONG'] else ''}"
            f"{'r' if cfg['P_REGS'] else ''}")  # fmt: skip


def calls_fn(make_calls, q, k, v, causal, config=None):
    """A list-of-calls path (quantization passes + kernel) on poisoned output."""
    b, s, h, d = q.shape
    out = poisoned((b, s, h * d), q.dtype)
    calls, choice, keep = make_calls(q, k, v, out.unflatten(-1, (h, d)), causal=causal,
                                     config=config)  # fmt: skip
    fns = [c.call for c in calls]

    def run():
        for fn in fns:
            fn()
        return out

    run.keep = keep  # the quantized tensors live as long as the launcher
    return run, choice.config.to_json()


def ws_fp8_calls_fn(q, k, v, causal, config=None):
    from opbench.kernels.attention.attention_ws import ws_calls

    if config is not None:
        config = {key: val for key, val in config.items() if key != "FP8"}
    return calls_fn(functools.partial(ws_calls, quant="fp8"), q, k, v, causal, config)


def ws_fn(q, k, v, causal, config):
    from opbench.kernels.attention.attention_ws import ws_calls

    return calls_fn(ws_calls, q, k, v, causal, config)[0]


def compile_section() -> None:
    from opbench.kernels.attention.attention_hopper import HOPPER_TILES
    from opbench.kernels.attention.attention_plans import FP8_TILES, FP16_TILES, tile_config

    jobs = []
    first = int(sys.argv[sys.argv.index("--from") + 1]) if "--from" in sys.argv else 0
    for case in CHECK_CASES + PREFILL[first:] + [LLAMA]:
        jobs += [("ws", case, cfg) for cfg in ws_configs(case["D"])]
        if case["dtype"] == "fp16" or case in CHECK_CASES:
            jobs += [("ws8", case, cfg) for cfg in ws_fp8_configs(case["D"])]
    for case in PREFILL[first:] + [LLAMA] + LAYER_CHECKS:
        d = case["D"]
        if case["dtype"] == "fp16":
            jobs += [("fp8", case, tile_config(t, None)) for t in FP8_TILES[d]]
        jobs += [("portable", case, tile_config(t)) for t in FP16_TILES[d]]
        jobs += [("hopper", case, {"BLOCK_M": bm, "BLOCK_N": bn, "num_warps": w,
                                   "num_stages": 1}) for bm, bn, w in HOPPER_TILES[d]]  # fmt: skip
    compile_pool(jobs, 14, 70)


def check_child() -> None:
    """In the child process: every warp-specialized config (fp16/bf16 and fp8) and the layers
    as bound (`Attention`, `Fp8Attention` on fp16) on every check case."""
    for case in CHECK_CASES:
        b, s, h, d, causal, dt = (case[k] for k in ("B", "S", "H", "D", "causal", "dtype"))
        x = packed_input(b, s, h, d, DTYPES[dt], seed=s + d + causal)
        ref = attention_ref(*heads_view(x, h), causal).transpose(1, 2).flatten(2)
        q, k, v = split_heads(x, h, True)
        variants = {cfg_name(c): (lambda c=c: (ws_fn(q, k, v, causal, c), dt))
                    for c in ws_configs(d)}  # fmt: skip
        variants.update({cfg_name(c): (lambda c=c: (ws_fp8_calls_fn(q, k, v, causal, c)[0],
                                                    "fp8")) for c in ws_fp8_configs(d)})  # fmt: skip
        if case in LAYER_CHECKS:
            variants["auto"] = lambda: (layer_fn(Attention, x, h, causal)[0], dt)
            variants["fp8_layer"] = lambda: (layer_fn(Fp8Attention, x, h, causal)[0], "fp8")
        for name, make in variants.items():
            row = {"section": "check", **case, "variant": name}
            try:
                fn, kind = make()
                out = fn()
                sync()
                row["unwritten"] = int(torch.isnan(out).sum())
                row["rel_l2"] = rel(out, ref)
                row["limit"] = LIMIT[kind]
                row["pass"] = row["unwritten"] == 0 and row["rel_l2"] <= row["limit"]
            except Exception as exc:
                row["error"] = f"{type(exc).__name__}: {exc}"[:300]
                traceback.print_exc()
            record(row)


def check_section() -> set[str]:
    """The check in a child with a time limit; returns the config names that passed everywhere."""
    start = time.perf_counter()
    checked = child_rows(__file__, CHECK_TIMEOUT_S)
    names = {r["variant"] for r in checked}
    passed = {n for n in names if all(r.get("pass") for r in checked if r["variant"] == n)}
    passed &= {n for n in names if n.startswith("ws")}
    # A config counts as checked only where it ran on every check case of its head dim (a
    # child killed part way leaves the rest unchecked, hence untimed).
    for name in list(passed):
        dims = {c["D"] for c in CHECK_CASES for cfg in ws_configs(c["D"]) + ws_fp8_configs(c["D"])
                if cfg_name(cfg) == name}  # fmt: skip
        needed = sum(1 for c in CHECK_CASES if c["D"] in dims)
        if sum(1 for r in checked if r["variant"] == name) < needed:
            passed.discard(name)
    per_case = [len(ws_configs(c["D"])) + len(ws_fp8_configs(c["D"])) + 2 * (c in LAYER_CHECKS)
                for c in CHECK_CASES]  # fmt: skip
    complete = len(checked) == sum(per_case)
    record({"section": "check_summary", "wall_s": time.perf_counter() - start,
            "complete": complete, "passed": sorted(passed)})  # fmt: skip
    return passed


def rows() -> list[dict]:
    path = OUT / "attention_gpu.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def prefill_section(passed: set[str]) -> None:
    first = int(sys.argv[sys.argv.index("--from") + 1]) if "--from" in sys.argv else 0
    for case in PREFILL[first:]:
        row = {"section": "prefill", **case}
        if over_budget():
            record({**row, "skipped": "budget"})
            continue
        b, s, h, d, causal, dt = (case[k] for k in ("B", "S", "H", "D", "causal", "dtype"))
        try:
            x, ref, flops = prefill_baseline(row, case, ("default", "cudnn", "flash"))
            fn, row["auto_config"] = layer_fn(Attention, x, h, causal)
            timed(row, "auto", fn, ref, h, flops, PEAK[dt])
            q, k, v = split_heads(x, h, True)
            for cfg in ws_configs(d):
                if cfg_name(cfg) in passed:
                    timed(row, cfg_name(cfg), ws_fn(q, k, v, causal, cfg), ref, h, flops,
                          PEAK[dt])  # fmt: skip
            if dt == "fp16":
                fn, row["fp8_tl_config"] = calls_fn(attention_fp8_calls, q, k, v, causal)
                timed(row, "fp8_tl", fn, ref, h, flops, PEAK["fp8"])
                for cfg in ws_fp8_configs(d):
                    if cfg_name(cfg) in passed:
                        fn = ws_fp8_calls_fn(q, k, v, causal, cfg)[0]
                        timed(row, cfg_name(cfg), fn, ref, h, flops, PEAK["fp8"])
            sdpa = [row[k] for k in row if k.startswith("sdpa_") and k.endswith("_ms")]
            row["best_sdpa_ms"] = min(sdpa)
            for key in [k for k in row if k.endswith("_ms") and not k.startswith("sdpa_")]:
                row[key[:-3] + "_vs_best_sdpa"] = row["best_sdpa_ms"] / row[key]
        except Exception as exc:
            row["error"] = f"{type(exc).__name__}: {exc}"[:300]
            traceback.print_exc()
        record(row)


def summary() -> None:
    print("\n== summary (TFLOP/s / ratio to the best SDPA) ==")
    for r in rows():
        if r.get("section") == "check" and "variant" in r:
            print(f"check {r['variant']:<10} {r['dtype']} B{r['B']} S{r['S']} D{r['D']} "
                  f"{'c' if r['causal'] else ' '} rel {r.get('rel_l2', float('nan')):.2e} "
                  f"{'PASS' if r.get('pass') else 'FAIL'} {r.get('error', '')[:80]}")  # fmt: skip
        elif r.get("section") == "prefill" and "best_sdpa_ms" in r:
            print(prefill_line(r, lambda n: LIMIT["fp8"]))


if __name__ == "__main__":
    ws_bench_main(check_child, compile_section, check_section, prefill_section, summary)
