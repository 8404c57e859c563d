"""Shared pieces of benchmarks/attention_gpu.py, attention_ws_gpu.py and attention_ws_int8_gpu.py
(settings, inputs, references, SDPA calls, cases, the env section, the compile pool's job, the
timed paths on poisoned outputs); attention_gpu.py says what is measured and how."""

from __future__ import annotations

import functools
import json
import math
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

TINY = "--tiny" in sys.argv
if TINY:
    os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from timing import median_ms  # noqa: E402

from opbench.kernels.attention.attention import attention_call, split_heads  # noqa: E402
from opbench.kernels.attention.attention_decode import decode_calls  # noqa: E402
from opbench.kernels.attention.attention_fp8 import attention_fp8_calls  # noqa: E402
from opbench.kernels.attention.attention_int8 import attention_int8_calls  # noqa: E402

DEVICE = "cpu" if TINY else "cuda"
OUT = Path(os.environ.get("OUT") or tempfile.mkdtemp(prefix="attn_"))
ROWS = OUT / "attention_gpu.jsonl"
PEAK = {"fp16": 989.0, "bf16": 989.0, "int8": 1979.0, "fp8": 1979.0}
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
START = time.monotonic()
BUDGET_S = float(sys.argv[sys.argv.index("--budget-s") + 1]) if "--budget-s" in sys.argv else 420
QUANT_SHAPES = [(2048, 128), (8192, 128), (4096, 64)]
LIMIT = {"fp16": 5e-3, "bf16": 2e-2, "int8": 3e-2, "fp8": 8e-2}


def record(row: dict) -> dict:
    with ROWS.open("a") as f:
        f.write(json.dumps(row, default=str) + "\n")
    print(json.dumps(row, default=str)[:400], flush=True)
    return row


def over_budget() -> bool:
    return time.monotonic() - START > BUDGET_S


def bench_ms(fn: Callable[[], object]) -> float:
    return median_ms(fn, "cpu" if TINY else "cuda", tiny=TINY)


def sync() -> None:
    if not TINY:
        torch.cuda.synchronize()


def rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    ref = ref.double()
    return ((out.double() - ref).norm() / ref.norm()).item()


def packed_input(b: int, s: int, h: int, d: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    """[B, S, 3 H D] random normal, a random per-channel bias on K (real keys carry one)."""
    gen = torch.Generator(device=DEVICE).manual_seed(seed)
    x = torch.randn(b, s, 3 * h * d, device=DEVICE, generator=gen)
    x[..., h * d : 2 * h * d] += torch.randn(h * d, device=DEVICE, generator=gen)
    return x.to(dtype)


def poisoned(shape, dtype) -> torch.Tensor:
    return torch.full(shape, float("nan"), dtype=dtype, device=DEVICE)


def timed(row: dict, name: str, fn, ref: torch.Tensor, heads: int, flops: float, peak: float):
    """Check fn's [B, S, E] output on batch 0, heads 0-1 against ref, then time it."""
    try:
        out = fn()
        sync()
        part = out[:1].unflatten(-1, (heads, -1))[:, :, :2].flatten(2)
        row[f"{name}_rel"] = rel(part, ref)
        row[f"{name}_nan"] = int(torch.isnan(out).sum())
        ms = bench_ms(fn)
        row[f"{name}_ms"], row[f"{name}_TFLOPs"] = ms, flops / ms / 1e9
        row[f"{name}_pct_peak"] = 100 * flops / ms / 1e9 / peak
    except Exception as exc:
        row[f"{name}_error"] = f"{type(exc).__name__}: {exc}"[:200]
        traceback.print_exc()


def call_fn(make_call, q, k, v, causal: bool, config=None):
    """A one-kernel path (attention_call, hopper_call, ws_call) on poisoned [B, S, H D] output:
    the launch that returns it, and the config it runs with."""
    b, s, h, d = q.shape
    out = poisoned((b, s, h * d), q.dtype)
    call, choice = make_call(q, k, v, out.unflatten(-1, (h, d)), causal=causal, config=config)

    def run():
        call.call()
        return out

    return run, choice.config.to_json()


def layer_fn(cls, x, h, causal):
    b, s, w = x.shape
    out = poisoned((b, s, w // 3), x.dtype)
    bound = cls(heads=h, causal=causal, packed_qkv=True).bind(x, out)
    return bound.launch, bound.plan()["choices"][0]["config"]


def prefill_baseline(row: dict, case: dict, backends: tuple[str, ...]):
    """A prefill case's packed input, the float32 reference of its batch 0, heads 0-1 as
    [1, S, 2 D], and its flop count; the SDPA backends timed into row."""
    b, s, h, d, causal, dt = (case[k] for k in ("B", "S", "H", "D", "causal", "dtype"))
    x = packed_input(b, s, h, d, DTYPES[dt], seed=s + d + causal)
    q4, k4, v4 = heads_view(x, h)
    ref = attention_ref(q4[:1, :2], k4[:1, :2], v4[:1, :2], causal, torch.float32)
    ref = ref.transpose(1, 2).flatten(2)
    flops = 4 * b * h * s * s * d / (2 if causal else 1)
    for backend in backends:
        timed(row, f"sdpa_{backend}", sdpa_fn(q4, k4, v4, causal, backend), ref, h, flops,
              PEAK[dt])  # fmt: skip
    return x, ref, flops


def attention_ref(q, k, v, causal: bool, dtype=torch.float64) -> torch.Tensor:
    """q [B, H, S, D], k/v [B, Hkv, N, D] -> [B, H, S, D]; causal queries are the last S."""
    q, k, v = (t.to(dtype) for t in (q, k, v))
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        s, n = scores.shape[-2:]
        hidden = torch.ones(s, n, dtype=torch.bool, device=q.device).triu(n - s + 1)
        scores = scores.masked_fill(hidden, float("-inf"))
    return scores.softmax(-1) @ v


def heads_view(x: torch.Tensor, h: int) -> tuple[torch.Tensor, ...]:
    """q, k, v as [B, H, S, D] views of packed x."""
    return tuple(t.transpose(1, 2) for t in split_heads(x, h, True))


def sdpa_backends() -> dict[str, object]:
    from torch.nn.attention import SDPBackend

    return {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION}  # fmt: skip


def sdpa_fn(q, k, v, causal: bool, backend: str, **extra) -> Callable[[], torch.Tensor]:
    """F.scaled_dot_product_attention as the torch backend runs it ([B, S, E] out)."""
    from torch.nn.attention import sdpa_kernel

    b, h, s, d = q.shape
    mask = {}
    if causal and k.shape[2] != s:
        from torch.nn.attention.bias import causal_lower_right

        mask = {"attn_mask": causal_lower_right(s, k.shape[2])}
    flag = {"is_causal": causal} if not mask else {}

    def call() -> torch.Tensor:
        if backend == "default":
            o = F.scaled_dot_product_attention(q, k, v, **flag, **mask, **extra)
        else:
            with sdpa_kernel(sdpa_backends()[backend]):
                o = F.scaled_dot_product_attention(q, k, v, **flag, **mask, **extra)
        return o.transpose(1, 2).reshape(b, s, h * d)

    return call


def env_section() -> dict:
    row: dict = {"section": "env", "torch": torch.__version__}
    import triton

    row["triton"] = triton.__version__
    if TINY:
        row["copy_GBps"] = 1.0
        return record(row)
    props = torch.cuda.get_device_properties(0)
    row.update(gpu=props.name, sms=props.multi_processor_count, cc=f"{props.major}.{props.minor}")
    src = torch.empty(2**30, dtype=torch.float16, device="cuda").normal_()
    dst = torch.empty_like(src)
    ms = bench_ms(lambda: dst.copy_(src))
    row["copy_GBps"] = 2 * src.numel() * 2 / ms / 1e6
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
    ms = bench_ms(lambda: a @ a)
    row["gemm_fp16_TFLOPs"] = 2 * 8192**3 / ms / 1e9
    return record(row)


# ---- cases -----------------------------------------------------------------------------------
def prefill_cases() -> list[dict]:
    """Fixed tokens (B S = 16384) and width (H D = 2048); int8/fp8 on QUANT_SHAPES (fp16)."""
    if TINY:
        return [dict(B=1, S=20, H=2, D=32, causal=True, dtype="fp16", quant=True)]
    cases = []
    for d, seqs in ((128, (2048, 8192, 1024, 4096, 16384)), (64, (1024, 4096, 16384))):
        for s in seqs:
            for causal in (False, True):
                cases.append(dict(B=16384 // s, S=s, H=2048 // d, D=d, causal=causal, dtype="fp16"))
    for s in (2048, 8192):
        for causal in (False, True):
            cases.append(dict(B=16384 // s, S=s, H=16, D=128, causal=causal, dtype="bf16"))
    for case in cases:
        case["quant"] = case["dtype"] == "fp16" and (case["S"], case["D"]) in QUANT_SHAPES
    if "--seqs" in sys.argv:
        keep = {int(s) for s in sys.argv[sys.argv.index("--seqs") + 1].split(",")}
        cases = [c for c in cases if c["S"] in keep]
    return cases


def decode_cases() -> list[dict]:
    if TINY:
        return [dict(B=1, H=4, Hkv=2, q=2, N=40, D=32, causal=True)]
    rows = [(8, 32, 8, 1, n, False) for n in (1024, 4096, 16384, 32768)]
    rows += [(8, 32, 8, 16, 4096, True), (8, 32, 8, 64, 16384, True), (32, 32, 8, 1, 2048, False)]
    rows += [(8, 32, 32, 1, n, False) for n in (4096, 16384)]
    rows += [(1, 64, 8, 1, 8192, False), (1, 64, 8, 1, 32768, False), (1, 64, 8, 64, 32768, True)]
    return [dict(B=b, H=h, Hkv=g, q=q, N=n, D=128, causal=c) for b, h, g, q, n, c in rows]


# ---- the compile pool's job: compile (never time) one configuration into Triton's cache -----
def compile_job(job: tuple) -> tuple[str, float, str | None]:
    """Build the inputs of a case and bind one kernel configuration (forced, so no tuning):
    the same shapes, dtypes and strides as the timed run, hence the same cache entries."""
    os.environ.setdefault("OPBENCH_CACHE_DIR", tempfile.mkdtemp(prefix="plans_"))
    kind, case, config = job
    start = time.perf_counter()
    try:
        if kind == "decode":
            b, h, g, q, n, d = (case[key] for key in ("B", "H", "Hkv", "q", "N", "D"))
            dtype = DTYPES[case.get("dtype", "fp16")]
            qx = torch.randn(b, q, h * d, device=DEVICE, dtype=dtype)
            kc = torch.randn(b, n, g * d, device=DEVICE, dtype=dtype)
            out = torch.empty_like(qx).unflatten(-1, (h, d))
            decode_calls(qx.unflatten(-1, (h, d)), kc.unflatten(-1, (g, d)),
                         kc.unflatten(-1, (g, d)), out, causal=case["causal"], config=config)  # fmt: skip
        else:
            x = packed_input(case["B"], case["S"], case["H"], case["D"], DTYPES[case["dtype"]], 0)
            q, k, v = split_heads(x, case["H"], True)
            out = torch.empty(q.shape, dtype=x.dtype, device=DEVICE)
            call = {"portable": attention_call, "int8": attention_int8_calls,
                    "fp8": attention_fp8_calls}.get(kind)  # fmt: skip
            if kind == "hopper":
                from opbench.kernels.attention.attention_hopper import hopper_call as call
            if kind in ("ws", "ws8", "ws_int8"):
                from opbench.kernels.attention.attention_ws import ws_calls

                quant = {"ws": "fp16", "ws8": "fp8", "ws_int8": "int8"}[kind]
                call = functools.partial(ws_calls, quant=quant)
                config = {key: val for key, val in config.items() if key != "FP8"}
            call(q, k, v, out, causal=case["causal"], config=config)
        sync()
        return kind, time.perf_counter() - start, None
    except Exception as exc:  # a config that does not fit is the tuner's business, not ours
        return kind, time.perf_counter() - start, f"{type(exc).__name__}: {exc}"[:200]


def compile_pool(jobs: list[tuple], workers: int, timeout_s: float) -> None:
    """Every job (`compile_job`) in a pool of spawned processes, for at most timeout_s (what is
    left compiles when bound); one "compile" row with the count, the wall time and errors."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor, TimeoutError, as_completed

    start = time.perf_counter()
    errors: list[str] = []
    if TINY:  # the job itself, in this process: a spawned pool would import torch again
        errors += [f"{kind}: {err}" for kind, _, err in map(compile_job, jobs) if err]
        record({"section": "compile", "jobs": len(jobs), "wall_s": time.perf_counter() - start,
                "errors": errors[:20]})  # fmt: skip
        return
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn"))
    futures = [pool.submit(compile_job, job) for job in jobs]
    try:
        for future in as_completed(futures, timeout=timeout_s):
            kind, _, err = future.result()
            if err:
                errors.append(f"{kind}: {err}")
    except TimeoutError:
        errors.append(f"stopped after {timeout_s} s: the rest compiles when bound")
    pool.shutdown(wait=False, cancel_futures=True)
    record({"section": "compile", "jobs": len(jobs), "wall_s": time.perf_counter() - start,
            "errors": errors[:20]})  # fmt: skip


def child_rows(script: str, timeout_s: float) -> list[dict]:
    """`script --check-child` in a child process with a time limit (a kernel that deadlocks on
    its mbarriers is killed with it, and recorded); the "check" rows it wrote."""
    import subprocess

    before = len(ROWS.read_text().splitlines()) if ROWS.exists() else 0
    try:
        subprocess.run([sys.executable, script, "--check-child"], timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        record({"section": "check", "error": f"child killed after {timeout_s} s (hang?)"})
    lines = ROWS.read_text().splitlines()[before:] if ROWS.exists() else []
    rows = [json.loads(line) for line in lines]
    return [r for r in rows if r.get("section") == "check" and "variant" in r]


def prefill_line(r: dict, limit: Callable[[str], float]) -> str:
    """A timed prefill row as one summary line: each variant's TFLOP/s (% of its peak, ratio
    to the best SDPA; BAD where its output missed limit(name) or left NaNs)."""
    names = [k[:-7] for k in r if k.endswith("_TFLOPs")]
    cols = " ".join(f"{n.removeprefix('sdpa_')} {r[n + '_TFLOPs']:.0f}({r[n + '_pct_peak']:.0f}%"
                    + (f",{r[n + '_vs_best_sdpa']:.2f}x" if n + "_vs_best_sdpa" in r else "")
                    + (",BAD" if r.get(n + "_rel", 0) > limit(n) or r.get(n + "_nan") else "")
                    + ")" for n in names)  # fmt: skip
    return f"{r['dtype']} B{r['B']} S{r['S']} D{r['D']}{' c' if r['causal'] else '  '} | {cols}"


def ws_bench_main(check_child, compile_section, check_section, prefill_section, summary) -> None:
    """The warp-specialized benches' order: in the check child only its check; else env and
    compile (a failure there is printed, the run goes on), the check in a child, the timed
    prefill cases of the configs that passed it, the summary."""
    if "--check-child" in sys.argv:
        check_child()
        return
    for step in (env_section, compile_section):
        try:
            step()
        except Exception:
            traceback.print_exc()
    prefill_section(check_section())
    summary()


def compile_jobs(check_cases: list[dict], decode: list[dict], prefill: list[dict]) -> list[tuple]:
    """Every (kind, case, config) the run binds."""
    from opbench.kernels.attention.attention_decode_plans import tuning_candidates
    from opbench.kernels.attention.attention_hopper import HOPPER_TILES
    from opbench.kernels.attention.attention_plans import (
        FP8_TILES,
        FP16_TILES,
        INT8_TILES,
        LAZY_CHOICES,
        tile_config,
    )

    hopper = not TINY and torch.cuda.get_device_capability()[0] == 9
    jobs = []
    for case in check_cases + prefill:
        d = case["D"]
        jobs += [("portable", case, tile_config(t, lazy)) for t in FP16_TILES[d]
                 for lazy in LAZY_CHOICES]  # fmt: skip
        if hopper:
            jobs += [("hopper", case, {"BLOCK_M": bm, "BLOCK_N": bn, "num_warps": w,
                                       "num_stages": 1}) for bm, bn, w in HOPPER_TILES[d]]  # fmt: skip
        if case.get("quant") and case["dtype"] == "fp16":
            jobs += [("int8", case, tile_config(t, lazy)) for t in INT8_TILES[d]
                     for lazy in LAZY_CHOICES]  # fmt: skip
            jobs += [("fp8", case, tile_config(t, None)) for t in FP8_TILES[d]]
    for case in decode:
        b, h, g, q, n, d = (case[key] for key in ("B", "H", "Hkv", "q", "N", "D"))
        configs = tuning_candidates((b, q, h, d), (b, n, g, d), torch.float16, torch.device("cuda"))
        jobs += [("decode", case, c) for c in configs]
    return jobs
