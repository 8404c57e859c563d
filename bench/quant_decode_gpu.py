"""Weight-only decode linears (old and new kernel) and the fp8 activation quantizer beside
their peers, in one run on one GPU (issue 31, 2026-11-25 evening).

Usage (GPU machine, repository root; results to $OUT or --out DIR):
    PYTHONPATH=. PYTHONUNBUFFERED=1 python3 bench/quant_decode_gpu.py [--only a,b] [--budget S]
Plumbing check on the CPU (Triton's interpreter, tiny shapes; numbers mean nothing):
    PYTHONPATH=. python3 bench/quant_decode_gpu.py --tiny

Sections:
  decode   LLaMA-7B shapes at M = 1, 4, 16, fp16 x: torch F.linear; the byte peers (below);
           the old weight-only kernel's rule plan (`linear_stream`), every plan of the new one
           (`linear_stream_q.stream_q_candidates`), int8 and int4 (groups of 128).
  quant    the per-token activation quantizer (fp8 and int8 rule) at M = 2048, 4096 and K =
           4096, 11008, for several launch shapes, beside a copy of the same traffic; then the
           fp8 whole call (quantize + GEMM), the GEMM alone, `_scaled_mm` and torch bf16.
  block    one decode step's five linears as one CUDA graph, M = 1, 4, 16: torch fp16; per
           format (fp16 GEMV, int8, int4) the rule, the best single variant over the shapes
           and the best plan per layer (both from section decode).
Section decode also times every fp16 GEMV variant (`stream_variants`), each row keyed by the
keyword set that made its plan ("vkey"; "{}" is the rule), 2026-11-26: wave-sized grids.
The section `tiled` (W read from a tile-by-tile copy, W_TILED) was measured on an H100
(no gain, docs/perf/gemm.md) and removed with the flag; commit 016ba13 has it.

Byte peers ("% of copy"): for a variant that moves B bytes (weights as stored with scales,
+ x + y), a device-to-device copy of B / 2 bytes moves the same B bytes (B / 2 read + B / 2
written), timed in the same run after the same L2 flush: the fastest time a plain stream of
that much traffic takes on this card at this size (launch and ramp included). "%copy" =
t(copy peer) / t(variant). The 1 GiB copy's rate (the asymptote) is recorded too.
Timing: CUDA events around one call, each sample after a read of 512 MiB (L2 evicted, left
clean), median of the samples. Correctness: fresh randn data, outputs poisoned with NaN,
rel. L2 against float64 of the unquantized layer and of the quantized math.
"""

from __future__ import annotations

import json
import os
import time
import zlib
from collections.abc import Callable
from functools import partial

from quant_bench_common import (
    log_and_record,
    parse_options,
    precompile,
    run_sections,
    weight_bytes,
)

OPTS = parse_options(budget=170.0, only="decode,quant,block", workers=14)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from opbench.kernels.gemm.linear import Linear  # noqa: E402
from opbench.kernels.gemm.linear_fp8 import Fp8Linear  # noqa: E402
from opbench.kernels.gemm.linear_plans import gemm_plan, sm_count  # noqa: E402
from opbench.kernels.gemm.linear_weight_only import Int4WeightLinear, Int8WeightLinear  # noqa: E402
from opbench.kernels.gemm.stream_plans import (  # noqa: E402
    stream_plan,
    stream_q_plan,
    stream_q_variants,
    stream_variants,
)
from opbench.kernels.launch import KernelCall  # noqa: E402
from opbench.kernels.memory.quantize import _quantize_rows_kernel, quantize_rows  # noqa: E402
from opbench.kernels.tuning import Config  # noqa: E402
from opbench.ops.quant import fp8_rows, quantized_weight  # noqa: E402

DEV = "cpu" if OPTS.tiny else "cuda"
START = time.perf_counter()
RESULTS = os.path.join(OPTS.out, "decode_results.jsonl")
log, record = log_and_record(RESULTS, None, START)
if OPTS.tiny:
    SHAPES, DECODE_M, PREFILL_M, GROUP = [(96, 48), (64, 80)], [1, 4, 16], [40], 32
    QUANT_K = [96]
    BLOCK = {"qkv": (64, 144), "o": (64, 64), "gate": (64, 96), "up": (64, 96), "down": (96, 64)}
else:
    SHAPES = [(4096, 4096), (4096, 11008), (11008, 4096), (4096, 12288)]
    DECODE_M, PREFILL_M, GROUP, QUANT_K = [1, 4, 16], [2048, 4096], 128, [4096, 11008]
    BLOCK = {"qkv": (4096, 12288), "o": (4096, 4096), "gate": (4096, 11008),
             "up": (4096, 11008), "down": (11008, 4096)}  # fmt: skip
LAYERS = {"int8-weight": (Int8WeightLinear, 8), "int4-weight": (Int4WeightLinear, 4)}
weight_bytes = partial(weight_bytes, group=GROUP)
TOL = {"none": 5e-3, "int8-weight": 2e-2, "int4-weight": 0.25, "fp8": 8e-2}


def over_budget() -> bool:
    return time.perf_counter() - START > OPTS.budget


FLUSH: torch.Tensor | None = None


def gpu_us(fn: Callable[[], object], reps: int = 50) -> float:
    """Median µs of fn, each sample after reading 512 MiB (L2 evicted, left clean)."""
    global FLUSH
    if OPTS.tiny:
        fn()
        return 0.0
    if FLUSH is None:
        FLUSH = torch.ones(128 * 2**20, dtype=torch.float32, device=DEV)
    for _ in range(3):
        fn()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(reps)]  # fmt: skip
    for start, end in events:
        FLUSH.sum()
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    times = sorted(s.elapsed_time(e) for s, e in events)
    return 1e3 * times[len(times) // 2]


COPY_US: dict[int, float] = {}


def copy_peer_us(traffic: float) -> float:
    """µs of a device-to-device copy moving `traffic` bytes (half read, half written)."""
    size = int(traffic / 2) // 16 * 16
    if size not in COPY_US:
        src = torch.empty(size, dtype=torch.uint8, device=DEV)
        dst = torch.empty_like(src)
        COPY_US[size] = gpu_us(lambda: dst.copy_(src), 60)
    return COPY_US[size]


def problem(m: int, k: int, n: int, dtype: torch.dtype, seed: int):
    gen = torch.Generator(device=DEV).manual_seed(seed)
    x = torch.randn(m, k, device=DEV, generator=gen).to(dtype)
    w = (torch.randn(n, k, device=DEV, generator=gen) / k**0.5).to(dtype)
    return x, w


def describe(plan: Config) -> str:
    kw = plan.kwargs
    text = f"{kw['KIND']} {kw['BLOCK_M']}x{kw['BLOCK_N']}x{kw['BLOCK_K']} w{plan.num_warps} s{plan.num_stages} split{kw.get('SPLIT_K', 1)}"
    return (
        text
        + ("" if kw.get("USE_DOT", True) else " cuda-core")
        + (" asm" if kw.get("ASM_UNPACK") else "")
        + (" w-left" if kw.get("W_LEFT") else "")
        + (f" maxnreg{plan.maxnreg}" if plan.maxnreg else "")
    )


def measure(row: dict, run: Callable[[], torch.Tensor], out: torch.Tensor | None,
            exact: torch.Tensor | None, quantized: torch.Tensor | None, traffic: float,
            reps: int = 50) -> dict | None:  # fmt: skip
    """Check (poisoned output) and time one variant; errors are recorded, never raised."""
    try:
        if out is not None and exact is not None:
            out.fill_(float("nan"))
            y = run()
            if not OPTS.tiny:
                torch.cuda.synchronize()
            row["unwritten"] = int(torch.isnan(y).sum())
            row["rel_l2"] = float((y.double() - exact).norm() / exact.norm())
            if quantized is not None:
                row["rel_l2_quantized"] = float((y.double() - quantized).norm() / quantized.norm())
            row["ok"] = row["unwritten"] == 0 and row["rel_l2"] <= TOL[row.get("quant", "none")]
        row["us"] = gpu_us(run, reps)
        row["bytes"] = traffic
        if not OPTS.tiny and traffic > 0:
            row["copy_peer_us"] = copy_peer_us(traffic)
            row["pct_copy"] = 100 * row["copy_peer_us"] / row["us"]
            row["tbps"] = traffic / row["us"] / 1e6
    except Exception as exc:
        row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
        log(f"  {row.get('variant')} {row.get('plan', '')}: {row['error']}")
    record(row)
    return row if "us" in row else None


# The fastest checked plan of the new kernel (fp16: of the GEMV) per (quant, M, K, N), for
# the block graphs; and every checked variant's µs by (quant, M, K, N, variant key).
BEST_NEW: dict[tuple, tuple] = {}
VARIANT_US: dict[tuple, float] = {}


def make_layer(quant: str, w: torch.Tensor):
    cls, _ = LAYERS[quant]
    return cls(w, None, group_size=GROUP) if quant == "int4-weight" else cls(w, None)


def variant_plans(quant: str, m: int, n: int, k: int, sms: int) -> list[tuple[list, Config]]:
    """(variant keys, plan) for every distinct plan of the rule's kernel at this point: fp16
    `stream_variants` (the GEMV), int8/int4 `stream_q_variants`; the keys are the keyword
    sets that make the plan ("{}" is the rule), each timed once, recorded under every key."""
    if quant == "none":
        made = [(v, stream_plan(m, n, k, 16, 0, sms, **v)) for v in stream_variants(m, 16)]
    else:
        bits = LAYERS[quant][1]
        made = [(v, stream_q_plan(m, n, k, bits, GROUP, sms, **v)) for v in stream_q_variants()]
    out: list[tuple[list, Config]] = []
    for variant, plan in made:
        key = json.dumps(variant, sort_keys=True)
        same = [keys for keys, p in out if p == plan]
        if same:
            same[0].append(key)
        else:
            out.append(([key], plan))
    return out


def run_variant(base: dict, quant: str, label: str, keys: list, plan: Config, layer, x, out,
                exact, quantized, traffic: float) -> None:  # fmt: skip
    name = "fp16" if quant == "none" else quant
    row = {**base, "variant": f"{name} {label}", "quant": quant, "plan": describe(plan),
           "vkey": keys[0], "vkeys": keys}  # fmt: skip
    try:
        run = layer.bind(x, out, config=plan).launch
    except Exception as exc:
        row["error"] = f"bind: {type(exc).__name__}: {str(exc)[:200]}"
        record(row)
        log(f"  {row['variant']} {row['plan']}: {row['error']}")
        return
    done = measure(row, run, out, exact, quantized, traffic)
    point = (quant, base["M"], base["K"], base["N"])
    if label != "old rule" and done and done.get("ok"):
        for key in keys:
            VARIANT_US[(*point, key)] = done["us"]
        if point not in BEST_NEW or done["us"] < BEST_NEW[point][0]:
            BEST_NEW[point] = (done["us"], plan)


def section_decode() -> None:
    sms = sm_count(torch.device(DEV))
    for k, n in SHAPES:
        for m in DECODE_M:
            if over_budget():
                log("decode: budget spent")
                return
            x, w = problem(m, k, n, torch.float16, m * 7919 + k * 31 + n)
            exact = x.double() @ w.double().T
            io = 2.0 * (m * k + m * n)
            base = {"section": "decode", "M": m, "K": k, "N": n}
            measure({**base, "variant": "torch fp16 F.linear", "quant": "none"},
                    lambda x=x, w=w: F.linear(x, w), None, None, None, io + weight_bytes("none", n, k))  # fmt: skip
            out = torch.empty(m, n, dtype=torch.float16, device=DEV)
            fp16 = Linear(w, None)
            for keys, plan in variant_plans("none", m, n, k, sms):
                label = "gemv (rule)" if "{}" in keys else "gemv"
                run_variant(base, "none", label, keys, plan, fp16, x, out, exact, None,
                            io + weight_bytes("none", n, k))  # fmt: skip
            for quant, (_, bits) in LAYERS.items():
                layer = make_layer(quant, w)
                quantized = x.double() @ quantized_weight(quant, w, GROUP).to(DEV).T
                traffic = io + weight_bytes(quant, n, k)
                plans = [("old rule", ["old"], stream_plan(m, n, k, bits, GROUP, sms))]
                plans += [("rule" if "{}" in keys else "new", keys, plan)
                          for keys, plan in variant_plans(quant, m, n, k, sms)]  # fmt: skip
                for label, keys, plan in plans:
                    run_variant(base, quant, label, keys, plan, layer, x, out, exact, quantized,
                                traffic)  # fmt: skip
            del x, w, exact


def best_single_variant(quant: str, m: int) -> str:
    """The variant key with the lowest geometric mean, over the shapes, of its time over that
    shape's fastest: the one keyword set a rule could use (measured at every shape)."""
    import math

    scores = {}
    keys = {key for (q, mm, _, _, key) in VARIANT_US if q == quant and mm == m}
    for key in keys:
        ratios = [VARIANT_US.get((quant, m, k, n, key), 0.0) / BEST_NEW[(quant, m, k, n)][0]
                  for k, n in SHAPES if BEST_NEW.get((quant, m, k, n), (0.0,))[0] > 0]  # fmt: skip
        if ratios and all(ratios) and len(ratios) == len(SHAPES):
            scores[key] = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    if not scores:
        return "{}"
    best = min(scores, key=scores.__getitem__)
    log(f"best single variant {quant} M {m}: {best} (geomean {scores[best]:.3f}; rule "
        f"{scores.get('{}', float('nan')):.3f})")  # fmt: skip
    record({"section": "single", "quant": quant, "M": m, "vkey": best, "geomean": scores[best],
            "rule_geomean": scores.get("{}")})  # fmt: skip
    return best


def quantize_configs(k: int) -> list[tuple[str, Config, bool]]:
    """(label, config, one step) for the quantizer: the rule (`quantize.row_config`) and one
    step with 4, 8, 16 warps (16 was the rule for K > 8192 before this run)."""
    from opbench.kernels.host import next_power_of_2
    from opbench.kernels.memory.quantize import row_config

    rule = row_config(k)
    out = [("rule", rule, k <= rule["BLOCK_K"])]
    if OPTS.tiny:
        return out
    for warps in (4, 8, 16):
        if warps != rule.num_warps:
            config = Config.of(BLOCK_K=next_power_of_2(k), num_warps=warps, num_stages=3)
            out.append((f"one step w{warps}", config, True))
    return out


def quantize_call(x, q, scale, config: Config, one_step: bool) -> KernelCall:
    m, k = x.shape
    named = {"FP8": q.dtype == torch.float8_e4m3fn, "ONE_STEP": one_step, "GATE": 0,
             **config.kwargs}  # fmt: skip
    return KernelCall(_quantize_rows_kernel, (m,), (x, x, q, scale, k, x.stride(0), x.stride(1),
                      q.stride(0)), named, config.options())  # fmt: skip


def section_quant() -> None:
    for k in QUANT_K:
        for m in PREFILL_M:
            if over_budget():
                log("quant: budget spent")
                return
            x, _ = problem(m, k, 16, torch.bfloat16, m + k)
            traffic = 3.0 * m * k + 4 * m
            for qdtype, name in ((torch.float8_e4m3fn, "fp8"), (torch.int8, "int8")):
                ref_q, ref_s = fp8_rows(x) if name == "fp8" else (None, None)
                for label, config, one in quantize_configs(k):
                    q = torch.empty(m, k, dtype=qdtype, device=DEV)
                    s = torch.empty(m, dtype=torch.float32, device=DEV)
                    row = {"section": "quant", "variant": f"quantize {name} {label}", "M": m,
                           "K": k, "plan": f"BLOCK_K {config['BLOCK_K']} w{config.num_warps}"}  # fmt: skip
                    try:
                        call = quantize_call(x, q, s, config, one)
                        s.fill_(float("nan"))
                        call.call()
                        if ref_q is not None:  # against the torch rule (fp32 math, RNE)
                            # by value (-0 == +0); a handful may differ: see docs/perf/gemm.md
                            differ = q.float() != ref_q.float()
                            row["codes_differing"] = int(differ.sum())
                            row["max_code_diff"] = float((q.float() - ref_q.float()).abs().max())
                            row["scales_equal"] = bool(torch.equal(s, ref_s))
                    except Exception as exc:
                        row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
                        record(row)
                        continue
                    measure(row, call.call, None, None, None, traffic)
    section_fp8_calls()


def section_fp8_calls() -> None:
    plan = (gemm_plan("tiled", 16, 16, 32, 4, 1) if OPTS.tiny
            else gemm_plan("tma", 128, 256, 128, 8, 4, persistent=True))  # fmt: skip
    for k, n in SHAPES:
        for m in PREFILL_M:
            if over_budget():
                return
            x, w = problem(m, k, n, torch.bfloat16, m * 3 + k + n)
            exact = x.double() @ w.double().T
            base = {"section": "fp8", "M": m, "K": k, "N": n, "quant": "fp8"}
            measure({**base, "variant": "torch bf16 F.linear", "quant": "none"},
                          lambda x=x, w=w: F.linear(x, w), None, None, None, 0)  # fmt: skip
            layer = Fp8Linear(w, None)
            out = torch.empty(m, n, dtype=torch.bfloat16, device=DEV)
            bound = layer.bind(x, out, config=plan)
            measure({**base, "variant": "ours fp8 whole call", "plan": describe(plan)},
                    bound.launch, out, exact, None, 0)  # fmt: skip
            xq, sx = quantize_rows(x, dtype=torch.float8_e4m3fn)
            from opbench.kernels.gemm.linear import gemm_calls
            from opbench.kernels.launch import sequence

            calls, keep = gemm_calls(plan, xq, layer, out, row_scale=sx)
            measure({**base, "variant": "ours fp8 GEMM alone", "plan": describe(plan)},
                    sequence(calls, out), out, exact, None, 0)  # fmt: skip
            wq, sw = fp8_rows(w)
            wt, sa, sb = wq.t(), sx[:, None].contiguous(), sw[None, :].contiguous()
            if not OPTS.tiny:
                measure({**base, "variant": "torch _scaled_mm row-wise fast (GEMM alone)"},
                        lambda: torch._scaled_mm(xq, wt, scale_a=sa, scale_b=sb,
                                                 out_dtype=torch.bfloat16, use_fast_accum=True),
                        None, None, None, 0)  # fmt: skip
            del x, w, exact, keep


def section_block() -> None:
    """The decode step's five linears, one CUDA graph per variant, M = 1, 4, 16: torch fp16;
    per format (fp16 GEMV, int8, int4) the rule, the best single variant over the shapes
    (section decode) and the best plan per layer."""
    sms = sm_count(torch.device(DEV))
    for m in DECODE_M:
        probs = {name: problem(m, k, n, torch.float16, i) for i, (name, (k, n)) in
                 enumerate(BLOCK.items())}  # fmt: skip
        variants: dict[str, list] = {"torch fp16": [lambda x=x, w=w: F.linear(x, w)
                                                    for x, w in probs.values()]}  # fmt: skip
        for quant in ("none", *LAYERS):
            single = json.loads(best_single_variant(quant, m))
            for label in ("rule", "best single variant", "best per layer"):
                runs = []
                for x, w in probs.values():
                    n, k = w.shape
                    layer = Linear(w, None) if quant == "none" else make_layer(quant, w)
                    bits = 16 if quant == "none" else LAYERS[quant][1]
                    make = stream_plan if quant == "none" else stream_q_plan
                    group = 0 if quant == "none" else GROUP
                    plan = make(m, n, k, bits, group, sms)
                    if label == "best single variant":
                        plan = make(m, n, k, bits, group, sms, **single)
                    elif label == "best per layer" and (quant, m, k, n) in BEST_NEW:
                        plan = BEST_NEW[(quant, m, k, n)][1]
                    runs.append(layer.bind(x, config=plan).launch)
                name = "fp16 gemv" if quant == "none" else quant
                variants[f"{name} {label}"] = runs
        wb = {"torch": "none", "fp16": "none", "int8-weight": "int8-weight",
              "int4-weight": "int4-weight"}  # fmt: skip
        for name, runs in variants.items():

            def step(runs=runs):
                for r in runs:
                    r()

            quant = wb[name.split(" ")[0]]
            traffic = sum(weight_bytes(quant, w.shape[0], w.shape[1]) for _, w in probs.values())
            fn = step
            if not OPTS.tiny:
                graph = torch.cuda.CUDAGraph()
                step()
                torch.cuda.synchronize()
                with torch.cuda.graph(graph):
                    step()
                fn = graph.replay
            measure({"section": "block", "variant": f"{name} block graph", "M": m}, fn, None,
                    None, None, traffic, reps=30)  # fmt: skip


def compile_worker(index: int, count: int) -> None:
    sms = sm_count(torch.device(DEV))
    if "quant" in OPTS.only:
        for k in QUANT_K:
            x, _ = problem(8, k, 16, torch.bfloat16, 1)
            for qdtype in (torch.float8_e4m3fn, torch.int8):
                for label, config, one in quantize_configs(k):
                    if zlib.crc32(repr((k, str(qdtype), label)).encode()) % count == index:
                        q = torch.empty(8, k, dtype=qdtype, device=DEV)
                        s = torch.empty(8, dtype=torch.float32, device=DEV)
                        quantize_call(x, q, s, config, one)
    if "decode" not in OPTS.only and "block" not in OPTS.only:
        return
    for k, n in SHAPES:
        for m in DECODE_M:
            x, w = problem(m, k, n, torch.float16, 1)
            for quant in ("none", *LAYERS):
                layer = None
                plans = [p for _, p in variant_plans(quant, m, n, k, sms)]
                if quant != "none":
                    plans.append(stream_plan(m, n, k, LAYERS[quant][1], GROUP, sms))
                for plan in plans:
                    key = (quant, describe(plan), k % plan["BLOCK_K"] == 0)
                    if zlib.crc32(repr(key).encode()) % count != index:
                        continue
                    try:
                        layer = layer or (Linear(w, None) if quant == "none"
                                          else make_layer(quant, w))  # fmt: skip
                        layer.bind(x, config=plan)
                    except Exception as exc:
                        print(f"worker {index}: {describe(plan)}: {type(exc).__name__}", flush=True)


def summary() -> None:
    rows = [json.loads(line) for line in open(RESULTS)]
    bad = [r for r in rows if r.get("ok") is False or r.get("scales_equal") is False]
    print(f"\n== rows {len(rows)}; failed checks {len(bad)}; errors "
          f"{sum('error' in r for r in rows)}")  # fmt: skip
    groups: dict[tuple, list] = {}
    for r in rows:
        if "us" in r:
            groups.setdefault((r["section"], r.get("M"), r.get("K"), r.get("N")), []).append(r)
    for key, rs in groups.items():
        base = next((r["us"] for r in rs if r["variant"].startswith("torch") and
                     "F.linear" in r["variant"] or r["variant"] == "torch fp16 block graph"), None)  # fmt: skip
        print(f"-- {key}")
        best: dict[str, dict] = {}
        for r in rs:
            v = r["variant"]
            if v not in best or r["us"] < best[v]["us"]:
                best[v] = r
        for r in sorted(best.values(), key=lambda r: r["us"]):
            ratio = f"{base / r['us']:.2f}x" if base else "-"
            print(f"   {r['us']:8.1f} us {ratio:>6} {r.get('pct_copy', 0):5.1f}%copy "
                  f"{r['variant']} [{r.get('plan', '')}] err {r.get('rel_l2', 0):.1e}")  # fmt: skip


def main() -> None:
    if OPTS.compile_worker:
        index, count = (int(v) for v in OPTS.compile_worker.split("/"))
        compile_worker(index, count)
        return
    if not OPTS.tiny:
        import triton

        props = torch.cuda.get_device_properties(0)
        log(f"device {props.name} ({props.multi_processor_count} SMs), torch "
            f"{torch.__version__}, triton {triton.__version__}")  # fmt: skip
        record({"section": "env", "device": props.name, "torch": torch.__version__,
                "triton": triton.__version__})  # fmt: skip
        big = 2**30
        src = torch.empty(big, dtype=torch.uint8, device=DEV)
        dst = torch.empty_like(src)
        us = gpu_us(lambda: dst.copy_(src), 20)
        record({"section": "copy", "variant": "d2d copy 1 GiB", "us": us,
                "tbps": 2 * big / us / 1e6})  # fmt: skip
        log(f"copy 1 GiB: {2 * big / us / 1e6:.3f} TB/s")
        del src, dst
    precompile(__file__, OPTS, log)
    sections = {"decode": section_decode, "quant": section_quant, "block": section_block}
    run_sections(OPTS, sections, over_budget, log)
    summary()


if __name__ == "__main__":
    with torch.no_grad():
        main()
