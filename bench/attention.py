"""Attention benchmark on the GPU: opbench's Triton flash attention (fp16, int8) vs torch.

1. Compiles every autotune candidate in parallel worker processes (Triton's disk cache then
   serves the autotuner); a candidate that fails to compile or run is dropped and reported.
2. Checks the public callables against a float64 reference on fresh random data: odd S,
   causal and not, packed and not, fp16 / bf16 / fp32 and int8; outputs poisoned with NaN.
3. Times, with triton.testing.do_bench (warmup 25 ms, rep 100 ms, median, L2 flushed):
     sdpa   torch F.scaled_dot_product_attention, fp16, default backend (+ the [B,S,E] view)
     naive  torch matmul -> (causal mask) -> softmax -> matmul, fp16
     triton prepare_attention(...)              (fp16 flash attention)
     int8   prepare_attention(..., quant=int8)  (K smoothing + quantization included)
   on packed [B, S, 3E] input, reporting TFLOP/s (4 B H S^2 D, half when causal) and the
   relative L2 error of each against float64 on batch 0.

    cd <repo> && PYTHONPATH=. PYTHONUNBUFFERED=1 python3 bench/attention.py 2>&1 | tee $OUT/log.txt

Writes $OUT/attention.json (rows as they finish) and prints a table at the end.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch
import torch.nn.attention
import torch.nn.functional as F
from triton.testing import do_bench

from opbench.kernels import attention as A
from opbench.kernels import attention_int8 as A8

FP16_PEAK = 989e12  # H100/H200 SXM dense fp16 tensor-core peak, FLOP/s
TOL = {torch.float16: 5e-3, torch.bfloat16: 2e-2, torch.float32: 1e-4, "int8": 3e-2}
# (name, B, H, S, D, causal)
MAIN = [
    ("b4h32s4096d128", 4, 32, 4096, 128, False),
    ("b4h32s4096d128c", 4, 32, 4096, 128, True),
    ("b16h16s1024d64", 16, 16, 1024, 64, False),
    ("b16h16s1024d64c", 16, 16, 1024, 64, True),
]
TOKENS_X_HEADS = 32 * 16384  # B * H * S of the sweep: >= 2048 programs of 128 rows each
SWEEP = [
    (f"s{s}d{d}" + ("c" if causal else ""), TOKENS_X_HEADS // (s * (2048 // d)), 2048 // d, s, d,
     causal)
    for causal in (False, True)
    for d in (64, 128)
    for s in (512, 1024, 2048, 4096, 8192)
]  # fmt: skip


# ---------------------------------------------------------------- parallel precompile
def _compile_job(job: tuple) -> tuple:
    """Run one kernel config once on a small input (worker process): compiles it into the
    cache and checks its output against float32 SDPA (a wrong config counts as failed)."""
    kind, dtype_name, head_dim, causal, seq, config = job
    dtype = getattr(torch, dtype_name)
    heads = 2
    device = "cuda" if torch.cuda.is_available() else "cpu"
    x = torch.randn(1, seq, 3 * heads * head_dim, device=device).to(dtype)
    q, k, v = A.split_heads(x, heads, True)
    out = torch.full((1, seq, heads, head_dim), float("nan"), device=device, dtype=dtype)
    try:
        forward = A.attention_forward if kind == "fp" else A8.attention_int8_forward
        forward(q, k, v, out, causal=causal, config=config)
        q32, k32, v32 = (t.float().transpose(1, 2) for t in (q, k, v))
        ref = F.scaled_dot_product_attention(q32, k32, v32, is_causal=causal).transpose(1, 2)
        err = ((out.float() - ref).norm() / ref.norm()).item()
        tol = TOL["int8"] if kind == "int8" else TOL[dtype]
        if not err <= max(tol, 1e-3):  # fp32 SDPA is itself ~1e-6 off; NaN fails too
            return job, f"wrong result: rel L2 {err:.3e}"
        return job, None
    except Exception as e:  # report, the parent drops the config
        return job, f"{type(e).__name__}: {str(e)[:300]}"


def config_key(kind: str, config: dict) -> tuple:
    return (kind, tuple(sorted(config.items())))


def precompile(workers: int) -> list[tuple]:
    """Returns the (kind, config) keys that failed, with their errors printed."""
    jobs = []
    for kind, dtype_name, head_dim, causal, seq in [
        *[
            ("fp", "float16", d, c, s)
            for d in (64, 128)
            for c in (False, True)
            for s in (512, 1000)
        ],
        *[("int8", "float16", d, c, 512) for d in (64, 128) for c in (False, True)],
        ("int8", "float16", 128, False, 1000),
        ("int8", "float16", 64, True, 1000),
        ("fp", "bfloat16", 128, False, 1000),
        ("fp", "float32", 64, True, 1000),
    ]:
        if dtype_name == "float32":
            tiles = A.FP32_TILES
        else:
            tiles = (A.FP16_TILES if kind == "fp" else A8.INT8_TILES)[head_dim]
        for bm, bn, warps, stages, maxnreg, desc in tiles:
            config = dict(BLOCK_M=bm, BLOCK_N=bn, USE_DESC=desc, num_warps=warps,
                          num_stages=stages, maxnreg=maxnreg)  # fmt: skip
            jobs.append((kind, dtype_name, head_dim, causal, seq, config))
    t0 = time.time()
    failed = []
    with ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn")) as pool:
        for job, err in pool.map(_compile_job, jobs):
            if err:
                print("  FAILED", job, err, flush=True)
                failed.append(config_key(job[0], job[5]))
    print(f"precompiled {len(jobs)} kernel configs in {time.time() - t0:.1f}s "
          f"({len(failed)} failed)", flush=True)  # fmt: skip
    return failed


def drop_failed_configs(failed: list[tuple]) -> None:
    """Remove configs that failed to compile or run from their autotuner (keeps the run alive)."""
    for kind, tuned in (("fp", A._attention_fwd_tuned), ("int8", A8._attention_int8_tuned)):
        tuned.configs = [
            c
            for c in tuned.configs
            if config_key(
                kind,
                {
                    **c.kwargs,
                    "num_warps": c.num_warps,
                    "num_stages": c.num_stages,
                    "maxnreg": c.maxnreg,
                },
            )  # fmt: skip
            not in failed
        ]


# ---------------------------------------------------------------- references and torch paths
def reference(x: torch.Tensor, heads: int, causal: bool, packed: bool, batch: int = 0):
    """float64 attention of one batch element, [S, E], a few heads at a time."""
    q, k, v = (t[batch].double().transpose(0, 1) for t in A.split_heads(x, heads, packed))
    outs = []
    for h in range(0, heads, 4):
        s = q[h : h + 4] @ k[h : h + 4].transpose(-1, -2) / math.sqrt(q.shape[-1])
        if causal:
            n = s.shape[-1]
            s.masked_fill_(torch.ones(n, n, dtype=torch.bool, device=x.device).triu(1), -math.inf)
        outs.append(s.softmax(-1) @ v[h : h + 4])
        del s
    return torch.cat(outs).transpose(0, 1).flatten(1)


def rel_l2(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.double() - ref).norm() / ref.norm()).item()


def torch_sdpa(heads: int, causal: bool, backend=None):
    """The torch op as opbench's torch backend runs it; `backend` pins an SDPA backend."""

    def fn(x):
        b, s, w = x.shape
        qkv = x.view(b, s, 3, heads, w // (3 * heads)).permute(2, 0, 3, 1, 4)
        if backend is None:
            o = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], is_causal=causal)
        else:
            with torch.nn.attention.sdpa_kernel(backend):
                o = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], is_causal=causal)
        return o.transpose(1, 2).reshape(b, s, w // 3)

    return fn


def torch_naive(heads: int, causal: bool):
    def fn(x):
        b, s, w = x.shape
        d = w // (3 * heads)
        q, k, v = x.view(b, s, 3, heads, d).permute(2, 0, 3, 1, 4)
        scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(d))
        if causal:
            mask = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
            scores = scores.masked_fill(mask, float("-inf"))
        return (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, s, w // 3)

    return fn


DEVICE = "cuda"


def sync() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def bench(fn) -> float:
    if DEVICE != "cuda":  # --smoke: one untimed-quality run, to exercise the script
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3
    return float(do_bench(fn, warmup=25, rep=100, return_mode="median"))


# ---------------------------------------------------------------- correctness
CHECKS = [
    # B, S, H, D, causal, packed, dtype, quant
    (2, 1000, 4, 128, True, True, torch.float16, "none"),
    (3, 1000, 4, 64, False, False, torch.float16, "none"),
    (2, 1000, 4, 128, False, True, torch.bfloat16, "none"),
    (1, 1000, 2, 64, True, True, torch.float32, "none"),
    (2, 1000, 4, 128, False, True, torch.float16, "int8"),
    (2, 1000, 4, 64, True, True, torch.float16, "int8"),
    (1, 512, 8, 64, True, False, torch.float16, "int8"),
]


def correctness() -> list[dict]:
    rows = []
    for b, s, h, d, causal, packed, dtype, quant in CHECKS:
        x = torch.randn(b, s, h * d * (3 if packed else 1), device=DEVICE).to(dtype)
        if packed:  # a per-channel bias on K, the pattern smoothing exists for
            x[..., h * d : 2 * h * d] += torch.randn(h * d, device=DEVICE).to(dtype)
        fn = A.prepare_attention(heads=h, causal=causal, packed_qkv=packed, quant=quant)
        out = torch.full((b, s, h * d), float("nan"), device=DEVICE, dtype=dtype)
        fn(x, out=out)
        sync()
        nan = bool(torch.isnan(out).any())
        err = max(rel_l2(out[i], reference(x, h, causal, packed, i)) for i in range(b))
        tol = TOL["int8"] if quant == "int8" else TOL[dtype]
        ok = not nan and err <= tol
        row = dict(check=f"B{b} S{s} H{h} D{d} causal={causal} packed={packed} "
                   f"{str(dtype)[6:]} {quant}", rel_l2=err, tol=tol, nan=nan, ok=ok)  # fmt: skip
        print(("PASS " if ok else "FAIL ") + json.dumps(row), flush=True)
        rows.append(row)
    return rows


# ---------------------------------------------------------------- timing
def time_shape(name, b, h, s, d, causal, with_naive=True) -> dict:
    e = h * d
    x = torch.randn(b, s, 3 * e, device=DEVICE, dtype=torch.float16)
    x[..., e : 2 * e] += torch.randn(e, device=DEVICE, dtype=torch.float16)
    flops = 4 * b * h * s * s * d / (2 if causal else 1)
    fns = {
        "sdpa": torch_sdpa(h, causal),
        "triton": A.prepare_attention(heads=h, causal=causal, packed_qkv=True),
        "int8": A.prepare_attention(heads=h, causal=causal, packed_qkv=True, quant="int8"),
    }
    if with_naive:
        fns["naive"] = torch_naive(h, causal)
    if DEVICE == "cuda":
        fns["flash"] = torch_sdpa(h, causal, torch.nn.attention.SDPBackend.FLASH_ATTENTION)
    ref = reference(x, h, causal, True)
    row = dict(shape=name, B=b, H=h, S=s, D=d, causal=causal)
    tuned_before = {
        "triton": len(A._attention_fwd_tuned.cache),
        "int8": len(A8._attention_int8_tuned.cache),
    }
    for key, fn in fns.items():
        t0 = time.time()
        try:
            out = fn(x)  # first call: autotuning for the triton paths
            sync()
        except RuntimeError as e:  # only the pinned flash backend is optional
            if key != "flash":
                raise
            row["flash_error"] = str(e)[:200]
            continue
        row[f"{key}_first_call_s"] = round(time.time() - t0, 2)
        row[f"{key}_err"] = rel_l2(out[0], ref)
        del out
        ms = bench(lambda fn=fn: fn(x))
        row[f"{key}_ms"] = ms
        row[f"{key}_tflops"] = flops / ms / 1e9
    # The int8 path's first two steps alone: bytes = read K twice + write int8 K.
    k = A.split_heads(x, h, True)[1]
    row["int8_prepass_ms"] = bench(lambda: A8.smooth_and_quantize_keys(k))
    row["int8_prepass_tbps"] = (2 * 2 + 1) * b * s * e / row["int8_prepass_ms"] / 1e9
    for key, tuned in (("triton", A._attention_fwd_tuned), ("int8", A8._attention_int8_tuned)):
        row[f"{key}_config"] = str(getattr(tuned, "best_config", None))
        if len(tuned.cache) > tuned_before[key]:  # tuned for this shape: keep every candidate
            timings = getattr(tuned, "configs_timings", {})
            row[f"{key}_candidates_ms"] = {str(c): round(t[0], 4) for c, t in timings.items()}
    print(json.dumps(row), flush=True)
    return row


def sdpa_kernel_names(h: int, s: int, d: int) -> list[str]:
    x = torch.randn(1, s, 3 * h * d, device="cuda", dtype=torch.float16)
    fn = torch_sdpa(h, False)
    fn(x)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn(x)
        torch.cuda.synchronize()
    return sorted({evt.name[:80] for evt in prof.events() if evt.device_type.name == "CUDA"})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    parser.add_argument("--budget-s", type=float, default=270.0)
    parser.add_argument("--workers", type=int, default=max(1, min(14, (os.cpu_count() or 2) - 2)))
    parser.add_argument("--smoke", action="store_true", help="CPU interpreter, tiny shapes")
    args = parser.parse_args()
    global DEVICE, MAIN, SWEEP, CHECKS
    if args.smoke:
        DEVICE = "cpu"
        MAIN = [("smoke", 1, 2, 40, 64, False), ("smoke_c", 1, 2, 40, 64, True)]
        SWEEP = []
        CHECKS = [c[:1] + (min(c[1], 50),) + c[2:] for c in CHECKS[:3] + CHECKS[4:5]]
    start = time.time()
    out_dir = Path(args.out)
    result: dict = {"env": {
        "gpu": torch.cuda.get_device_name() if DEVICE == "cuda" else "cpu (interpreter)", "torch": torch.__version__,
        "triton": __import__("triton").__version__, "date": "2026-11-22",
    }}  # fmt: skip
    print(result["env"], flush=True)

    def save() -> None:
        (out_dir / "attention.json").write_text(json.dumps(result, indent=1))

    if not args.smoke:
        failed = precompile(args.workers)
        result["compile_failures"] = [str(f) for f in failed]
        drop_failed_configs(failed)
        result["sdpa_kernels"] = sdpa_kernel_names(32, 4096, 128)
        print("sdpa kernels:", result["sdpa_kernels"], flush=True)
    result["checks"] = correctness()
    save()
    result["timings"] = []
    for i, shape in enumerate(MAIN + SWEEP):
        if time.time() - start > args.budget_s:
            print(f"budget reached: skipping {[s[0] for s in (MAIN + SWEEP)[i:]]}", flush=True)
            break
        result["timings"].append(time_shape(*shape))
        print(f"  [{time.time() - start:.0f}s]", flush=True)
        torch.cuda.empty_cache()
        save()

    print(
        "\nshape                B  H     S   D  c |  sdpa ms  naive ms triton ms  int8 ms |"
        " triton TF  int8 TF | tri/sdpa int8/sdpa tri/naive | err tri   err int8 | flash ms"
        " prepass ms"
    )
    for r in result["timings"]:
        naive = r.get("naive_ms", float("nan"))
        print(f"{r['shape']:18s} {r['B']:3d} {r['H']:2d} {r['S']:5d} {r['D']:3d} {int(r['causal'])} |"
              f" {r['sdpa_ms']:8.3f} {naive:9.3f} {r['triton_ms']:9.3f} {r['int8_ms']:8.3f} |"
              f" {r['triton_tflops']:9.1f} {r['int8_tflops']:8.1f} |"
              f" {r['sdpa_ms'] / r['triton_ms']:8.2f} {r['sdpa_ms'] / r['int8_ms']:9.2f}"
              f" {naive / r['triton_ms']:9.2f} | {r['triton_err']:.2e} {r['int8_err']:.2e} |"
              f" {r.get('flash_ms', float('nan')):8.3f} {r['int8_prepass_ms']:10.3f}")  # fmt: skip
    bad = [c["check"] for c in result["checks"] if not c["ok"]]
    print(f"checks: {len(result['checks']) - len(bad)}/{len(result['checks'])} passed", bad)
    print(f"total {time.time() - start:.0f}s")
    save()


if __name__ == "__main__":
    main()
