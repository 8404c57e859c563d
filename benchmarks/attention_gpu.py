"""Attention on one GPU in one run: correctness, then times beside F.scaled_dot_product_attention.

Usage (GPU machine, repository root; writes $OUT/attention_gpu.jsonl row by row):
    PYTHONPATH=. PYTHONUNBUFFERED=1 python3 benchmarks/attention_gpu.py --budget-s 420
CPU check of the plumbing (Triton interpreter, tiny shapes; the numbers mean nothing):
    PYTHONPATH=. python3 benchmarks/attention_gpu.py --tiny

`--sections check,prefill` runs only those; `--seqs 2048,8192` keeps only those prefill
sequence lengths (issue 43's cuDNN comparison fits one call that way).
Sections, in this order (each case in its own try/except; past --budget-s the rest is
recorded as skipped):
  env      card, versions, copy bandwidth (bytes read + written / time of a 2 GiB copy) and
           the dense fp16 GEMM rate (8192^3), both measured here.
  compile  every kernel configuration the run binds, compiled by a process pool into Triton's
           cache first (forced configs, nothing timed), so tuning does not wait on ptxas.
  check    odd shapes (S 1000 and 37; caches of 1000 and 4099) vs float64, outputs NaN-
           poisoned: portable, Hopper (every tile), auto, int8, fp8 and decode kernels.
  decode   q 1..64 over caches of 1k-32k (GQA 1/4/8): ours vs SDPA (default, flash,
           efficient, cuDNN; enable_gqa; causal_lower_right when q > 1; K/V given to SDPA as
           contiguous [B, Hkv, N, D]), and the HBM floor = (cache + q + out bytes) / copy rate.
  prefill  B S = 16384 tokens, H D = 2048, S 1k-16k, D 64/128, causal and not, fp16 (bf16 at
           S 2k/8k): SDPA default / cuDNN / flash, our portable kernel, our Hopper kernel and
           the auto choice (`Attention`); int8 and fp8 at S 2k/8k (D 128) and 4k (D 64)
           against the best fp16 SDPA.
Times: opbench's timer (benchmarks/timing.py: 5 rounds of 100 ms, median), L2 flushed before
each call. TFLOP/s = 4 B H S^2 D / t, half when causal, the same count for every column. Timed
outputs are checked against float32 (no TF32) on batch 0, heads 0-1.
"""

from __future__ import annotations

import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import torch  # noqa: E402
from attention_gpu_common import (  # noqa: E402
    DEVICE,
    DTYPES,
    LIMIT,
    OUT,
    PEAK,
    TINY,
    attention_ref,
    bench_ms,
    call_fn,
    compile_jobs,
    compile_pool,
    decode_cases,
    env_section,
    heads_view,
    layer_fn,
    over_budget,
    packed_input,
    poisoned,
    prefill_baseline,
    prefill_cases,
    record,
    rel,
    sdpa_fn,
    sync,
    timed,
)

from opbench.kernels.attention.attention import attention_call, split_heads  # noqa: E402
from opbench.kernels.attention.attention_decode import CacheAttention  # noqa: E402
from opbench.kernels.attention.attention_fp8_layer import Fp8Attention  # noqa: E402
from opbench.kernels.attention.attention_int8_layer import Int8Attention  # noqa: E402
from opbench.kernels.attention.attention_layer import Attention  # noqa: E402

COMPILE_TIMEOUT_S = 150
SECTIONS = sys.argv[sys.argv.index("--sections") + 1].split(",") if "--sections" in sys.argv else []
HOPPER = not TINY and torch.cuda.get_device_capability()[0] == 9
CHECK_CASES = [
    dict(B=2, S=1000, H=4, D=128, causal=True, dtype="fp16", quant=True),
    dict(B=3, S=1000, H=4, D=64, causal=False, dtype="fp16", quant=True),
    dict(B=2, S=37, H=2, D=128, causal=False, dtype="bf16"),
    dict(B=2, S=1000, H=4, D=64, causal=True, dtype="bf16"),
]
DECODE_CHECKS = [
    dict(B=2, H=8, Hkv=2, q=3, N=1000, D=128, causal=True),
    dict(B=1, H=32, Hkv=4, q=1, N=4099, D=128, causal=False),
]
if TINY:
    CHECK_CASES = [dict(B=1, S=21, H=2, D=32, causal=True, dtype="fp16", quant=True)]
    DECODE_CHECKS = [dict(B=1, H=4, Hkv=2, q=2, N=77, D=32, causal=True)]


def hopper_fn(q, k, v, causal, config=None):
    from opbench.kernels.attention.attention_hopper import hopper_call

    return call_fn(hopper_call, q, k, v, causal, config)


def portable_fn(q, k, v, causal):
    return call_fn(attention_call, q, k, v, causal)


def compile_section() -> None:
    prefill = prefill_cases()
    jobs = compile_jobs(CHECK_CASES, decode_cases() + DECODE_CHECKS, prefill)
    if TINY:
        jobs = jobs[:1]  # the plumbing only: the interpreter compiles nothing
    compile_pool(jobs, 12, COMPILE_TIMEOUT_S)


def check_section() -> None:
    for case in CHECK_CASES:
        b, s, h, d, causal, dt = (case[k] for k in ("B", "S", "H", "D", "causal", "dtype"))
        x = packed_input(b, s, h, d, DTYPES[dt], seed=s + d)
        ref = attention_ref(*heads_view(x, h), causal).transpose(1, 2).flatten(2)
        q, k, v = split_heads(x, h, True)
        variants = {"portable": lambda: portable_fn(q, k, v, causal),
                    "auto": lambda: layer_fn(Attention, x, h, causal)}  # fmt: skip
        if HOPPER:
            from opbench.kernels.attention.attention_hopper import HOPPER_TILES

            for bm, bn, w in HOPPER_TILES[d]:
                cfg = {"BLOCK_M": bm, "BLOCK_N": bn, "num_warps": w, "num_stages": 1}
                variants[f"hopper{bm}x{bn}w{w}"] = lambda cfg=cfg: hopper_fn(q, k, v, causal, cfg)
        if case.get("quant"):
            variants["int8"] = lambda: layer_fn(Int8Attention, x, h, causal)
            variants["fp8"] = lambda: layer_fn(Fp8Attention, x, h, causal)
        for name, make in variants.items():
            row = {"section": "check", **case, "variant": name}
            try:
                fn, row["config"] = make()
                out = fn()
                sync()
                row["unwritten"] = int(torch.isnan(out).sum())
                row["rel_l2"] = rel(out, ref)
                kind = name if name in ("int8", "fp8") else dt
                row["limit"] = LIMIT[kind]
                row["pass"] = row["unwritten"] == 0 and row["rel_l2"] <= row["limit"]
            except Exception as exc:
                row["error"] = f"{type(exc).__name__}: {exc}"[:300]
                traceback.print_exc()
            record(row)
    for case in DECODE_CHECKS:
        row = {"section": "check", **case, "variant": "decode"}
        try:
            qx, kc, vc, ref = decode_inputs(case, torch.float64)
            layer = CacheAttention(heads=case["H"], kv_heads=case["Hkv"], causal=case["causal"],
                                   k_cache=kc, v_cache=vc)  # fmt: skip
            out = poisoned(qx.shape, qx.dtype)
            bound = layer.bind(qx, out)
            bound.launch()
            sync()
            row.update(unwritten=int(torch.isnan(out).sum()), rel_l2=rel(out, ref), limit=5e-3,
                       calls=len(bound.calls), config=bound.plan()["choices"][0]["config"])  # fmt: skip
            row["pass"] = row["unwritten"] == 0 and row["rel_l2"] <= 5e-3
        except Exception as exc:
            row["error"] = f"{type(exc).__name__}: {exc}"[:300]
            traceback.print_exc()
        record(row)


def decode_inputs(case: dict, ref_dtype: torch.dtype, ref_batch: int | None = None):
    """q [B, q, H D], caches [B, N, Hkv D] (fp16), and the reference (all batches, or one)."""
    b, h, g, q, n, d = (case[k] for k in ("B", "H", "Hkv", "q", "N", "D"))
    gen = torch.Generator(device=DEVICE).manual_seed(n + q)
    qx, kc, vc = (torch.randn(b, rows, heads * d, device=DEVICE, generator=gen).half()
                  for rows, heads in ((q, h), (n, g), (n, g)))  # fmt: skip
    pick = slice(None) if ref_batch is None else slice(ref_batch, ref_batch + 1)
    q4 = qx[pick].unflatten(-1, (h, d)).transpose(1, 2)
    k4, v4 = (t[pick].unflatten(-1, (g, d)).transpose(1, 2) for t in (kc, vc))
    ref = attention_ref(q4, k4, v4, case["causal"], ref_dtype).transpose(1, 2).flatten(2)
    return qx, kc, vc, ref


def decode_section(copy_gbps: float) -> None:
    from attention_gpu_common import sdpa_backends

    for case in decode_cases():
        row = {"section": "decode", **case}
        if over_budget():
            record({**row, "skipped": "budget"})
            continue
        try:
            b, h, g, q, n, d = (case[k] for k in ("B", "H", "Hkv", "q", "N", "D"))
            qx, kc, vc, ref = decode_inputs(case, torch.float32, ref_batch=0)
            layer = CacheAttention(heads=h, kv_heads=g, causal=case["causal"], k_cache=kc,
                                   v_cache=vc)  # fmt: skip
            out = poisoned(qx.shape, qx.dtype)
            bound = layer.bind(qx, out)
            bound.launch()
            sync()
            row.update(ours_rel=rel(out[:1], ref), ours_unwritten=int(torch.isnan(out).sum()),
                       splits_calls=len(bound.calls), config=bound.plan()["choices"][0]["config"])  # fmt: skip
            row["ours_ms"] = bench_ms(bound.launch)
            nbytes = (2 * b * n * g * d + 2 * b * q * h * d) * 2
            row["floor_ms"] = nbytes / copy_gbps / 1e6
            row["ours_GBps"] = nbytes / row["ours_ms"] / 1e6
            row["ours_of_copy"] = row["floor_ms"] / row["ours_ms"]
            q4 = qx.unflatten(-1, (h, d)).transpose(1, 2)
            k4, v4 = (t.unflatten(-1, (g, d)).transpose(1, 2).contiguous() for t in (kc, vc))
            extra = {"enable_gqa": True} if g != h else {}
            for backend in ["default", *([] if TINY else sdpa_backends())]:
                try:
                    fn = sdpa_fn(q4, k4, v4, case["causal"], backend, **extra)
                    row[f"sdpa_{backend}_rel"] = rel(fn()[:1], ref)
                    row[f"sdpa_{backend}_ms"] = bench_ms(fn)
                except Exception as exc:
                    row[f"sdpa_{backend}_error"] = f"{type(exc).__name__}: {exc}"[:160]
            best = min(v for k, v in row.items() if k.startswith("sdpa_") and k.endswith("_ms"))
            row["best_sdpa_ms"], row["vs_best_sdpa"] = best, best / row["ours_ms"]
        except Exception as exc:
            row["error"] = f"{type(exc).__name__}: {exc}"[:300]
            traceback.print_exc()
        record(row)


def prefill_section() -> None:
    for case in prefill_cases():
        row = {"section": "prefill", **case}
        if over_budget():
            record({**row, "skipped": "budget"})
            continue
        b, s, h, d, causal, dt = (case[k] for k in ("B", "S", "H", "D", "causal", "dtype"))
        try:
            backends = ("default", "cudnn", "flash") if not TINY else ("default",)
            x, ref, flops = prefill_baseline(row, case, backends)
            q, k, v = split_heads(x, h, True)
            makers = {"portable": lambda: portable_fn(q, k, v, causal),
                      "auto": lambda: layer_fn(Attention, x, h, causal)}  # fmt: skip
            if HOPPER:
                makers["hopper"] = lambda: hopper_fn(q, k, v, causal)
            if case.get("quant"):
                makers["int8"] = lambda: layer_fn(Int8Attention, x, h, causal)
                makers["fp8"] = lambda: layer_fn(Fp8Attention, x, h, causal)
            for name, make in makers.items():
                try:
                    fn, row[f"{name}_config"] = make()
                except Exception as exc:
                    row[f"{name}_error"] = f"{type(exc).__name__}: {exc}"[:200]
                    continue
                peak = PEAK[name] if name in ("int8", "fp8") else PEAK[dt]
                timed(row, name, fn, ref, h, flops, peak)
            sdpa = [row[k] for k in row if k.startswith("sdpa_") and k.endswith("_ms")]
            if sdpa:
                row["best_sdpa_ms"] = min(sdpa)
                for name in makers:
                    if f"{name}_ms" in row:
                        row[f"{name}_vs_best_sdpa"] = row["best_sdpa_ms"] / row[f"{name}_ms"]
        except Exception as exc:
            row["error"] = f"{type(exc).__name__}: {exc}"[:300]
            traceback.print_exc()
        record(row)


def summary(rows: list[dict]) -> None:
    print("\n== summary (ms; ratio = best SDPA time / ours) ==")
    for r in rows:
        if r.get("section") == "check":
            verdict = "PASS" if r.get("pass") else "FAIL"
            print(f"check {r['variant']:<18} {r.get('dtype', 'fp16')} D{r['D']} "
                  f"{'c' if r['causal'] else ' '} rel {r.get('rel_l2', float('nan')):.2e} "
                  f"{verdict} {r.get('error', '')[:80]}")  # fmt: skip
        elif r.get("section") == "decode" and "ours_ms" in r:
            print(f"decode B{r['B']} H{r['H']}/{r['Hkv']} q{r['q']} N{r['N']}: ours "
                  f"{r['ours_ms']:.4f} ({r['ours_of_copy']:.0%} of copy bw) best sdpa "
                  f"{r['best_sdpa_ms']:.4f} -> {r['vs_best_sdpa']:.2f}x")  # fmt: skip
        elif r.get("section") == "prefill" and "best_sdpa_ms" in r:
            cols = " ".join(f"{n} {r[n + '_TFLOPs']:.0f}/{r.get(n + '_vs_best_sdpa', 0):.2f}x"
                            for n in ("portable", "hopper", "auto", "int8", "fp8")
                            if n + "_TFLOPs" in r)  # fmt: skip
            sd = " ".join(f"{n} {r['sdpa_' + n + '_TFLOPs']:.0f}" for n in ("default", "cudnn",
                          "flash") if f"sdpa_{n}_TFLOPs" in r)  # fmt: skip
            print(f"{r['dtype']} B{r['B']} S{r['S']} D{r['D']}{' c' if r['causal'] else '  '}"
                  f" | sdpa {sd} | {cols}")  # fmt: skip


def main() -> None:
    import json

    env = env_section()
    steps = {"compile": compile_section, "check": check_section,
             "decode": lambda: decode_section(env["copy_GBps"]), "prefill": prefill_section}  # fmt: skip
    chosen = SECTIONS or list(steps)
    for name, step in steps.items():
        if name not in chosen:
            continue
        try:
            step()
        except Exception:
            traceback.print_exc()
    rows = [json.loads(line) for line in (OUT / "attention_gpu.jsonl").read_text().splitlines()]
    summary(rows)
    print(f"rows in {OUT / 'attention_gpu.jsonl'}")


if __name__ == "__main__":
    main()
