"""Quantized linears on the GPU, each beside its peers in one run (issue 31): correctness
against float64, then medians with L2 flushed.

Usage (GPU machine, repository root; results go to $OUT, or --out DIR):
    PYTHONPATH=. PYTHONUNBUFFERED=1 python3 bench/quant_gpu.py [--budget 300] [--only a,b]
Plumbing check on the CPU (Triton's interpreter, tiny shapes; the numbers mean nothing):
    PYTHONPATH=. python3 bench/quant_gpu.py --tiny

Sections (--only picks some):
  copy     the bandwidth ceiling: a 1 GiB device-to-device copy, (read + write) / time.
  prefill  M = 2048, 4096 at the LLaMA-7B shapes: torch bf16 F.linear; torch._scaled_mm fp8
           row-wise (fast and exact accumulation) and tensor-wise; torch._int_mm; our fp8 and
           int8 W8A8 GEMMs for every plan in PREFILL_PLANS (GEMM alone, on x quantized once),
           the activation quantizer alone, and the whole call (quantize + best GEMM).
  decode   M = 1, 4, 16, 64, fp16 activations: torch F.linear; our split-K decode plan and every
           streaming-GEMV variant (fp16), weight-only int8 and int4 (groups of 128), W8A8 int8
           and fp8 decode plans, torch._scaled_mm fp8.
  block    one decode step's linears (qkv, o, gate, up, down) captured as one CUDA graph, M = 1
           and 16: torch fp16 against our fp16 GEMV, int8-weight and int4-weight.
Timing: each sample runs a 512 MiB memset (the L2 flush, long enough that the host has issued
the call before the GPU reaches it), then CUDA events around the call; the median of the
samples. Correctness: fresh randn data, outputs poisoned with NaN first; relative L2 against
the unquantized layer in float64, and against the quantized math in float64 where quantized.
Every result is appended to $OUT/quant_results.jsonl as it is measured; a summary table last.
Before timing, --workers N processes compile every Triton variant (they fill Triton's cache).
"""

from __future__ import annotations

import json
import os
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

from quant_bench_common import (
    log_and_record,
    parse_options,
    precompile,
    run_sections,
    weight_bytes,
)

OPTS = parse_options(budget=330.0, only="copy,decode,block,prefill", workers=12)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from opbench.kernels.gemm.linear import Linear, gemm_calls  # noqa: E402
from opbench.kernels.gemm.linear_fp8 import Fp8Linear  # noqa: E402
from opbench.kernels.gemm.linear_int8 import Int8Linear  # noqa: E402
from opbench.kernels.gemm.linear_plans import decode_plan, gemm_plan, sm_count  # noqa: E402
from opbench.kernels.gemm.linear_weight_only import Int4WeightLinear, Int8WeightLinear  # noqa: E402
from opbench.kernels.gemm.stream_plans import stream_candidates  # noqa: E402
from opbench.kernels.launch import sequence  # noqa: E402
from opbench.kernels.memory.quantize import quantize_rows, quantize_rows_call  # noqa: E402
from opbench.ops.quant import fp8_rows, int8_rows, quantized_weight  # noqa: E402

DEV = "cpu" if OPTS.tiny else "cuda"
START = time.perf_counter()
RESULTS = os.path.join(OPTS.out, "quant_results.jsonl")
log, record = log_and_record(RESULTS, os.path.join(OPTS.out, "quant_log.txt"), START)

if OPTS.tiny:
    SHAPES = [(96, 48), (64, 80)]  # (K, N)
    PREFILL_M, DECODE_M, BLOCK_M_LIST = [40], [1, 4, 16], [1]
    BLOCK_SHAPES = {"qkv": (64, 144), "o": (64, 64), "gate": (64, 96), "up": (64, 96),
                    "down": (96, 64)}  # fmt: skip
else:
    SHAPES = [(4096, 4096), (4096, 11008), (11008, 4096), (4096, 12288)]
    PREFILL_M, DECODE_M, BLOCK_M_LIST = [2048, 4096], [1, 4, 16, 64], [1, 16]
    BLOCK_SHAPES = {"qkv": (4096, 12288), "o": (4096, 4096), "gate": (4096, 11008),
                    "up": (4096, 11008), "down": (11008, 4096)}  # fmt: skip
GROUP = 32 if OPTS.tiny else 128
weight_bytes = partial(weight_bytes, group=GROUP)
# Datasheet dense peaks of an H100 SXM (TFLOP/s): the compute ceilings quoted as "% of peak".
PEAK = {"bf16": 989.0, "fp16": 989.0, "fp8": 1979.0, "int8": 1979.0}


def over_budget() -> bool:
    return time.perf_counter() - START > OPTS.budget


# ---- timing ---------------------------------------------------------------------------------

FLUSH = None


def flush_l2(mode: str) -> None:
    """Evict L2 with 512 MiB of other data: "write" (a memset, as triton's do_bench does: L2
    is left full of dirty lines that the timed kernel's reads must write back) or "read" (a
    sum over the buffer: L2 left holding clean lines)."""
    global FLUSH
    if FLUSH is None:
        FLUSH = torch.ones(128 * 2**20, dtype=torch.float32, device=DEV)
    if mode == "write":
        FLUSH.fill_(1.0)
    else:
        FLUSH.sum()


def gpu_ms(fn: Callable[[], object], reps: int, flush: str = "write") -> tuple[float, float]:
    """(median, IQR) in ms of fn on the device, each sample after an L2 flush."""
    if OPTS.tiny:
        fn()
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3, 0.0
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
             for _ in range(reps)]  # fmt: skip
    for start, end in pairs:
        flush_l2(flush)
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    times = sorted(s.elapsed_time(e) for s, e in pairs)
    q = lambda f: times[min(len(times) - 1, int(f * len(times)))]  # noqa: E731
    return q(0.5), q(0.75) - q(0.25)


def graph_of(fn: Callable[[], object]) -> Callable[[], object]:
    """fn captured as a CUDA graph: replaying it is one launch."""
    if OPTS.tiny:
        return fn
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay


# ---- data and checks ------------------------------------------------------------------------


@dataclass
class Problem:
    m: int
    k: int
    n: int
    dtype: torch.dtype
    x: torch.Tensor = field(init=False)
    w: torch.Tensor = field(init=False)
    exact: torch.Tensor | None = field(init=False, default=None)
    quantized: dict = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        gen = torch.Generator(device=DEV).manual_seed(self.m * 7919 + self.k * 31 + self.n)
        self.x = torch.randn(self.m, self.k, device=DEV, generator=gen).to(self.dtype)
        self.w = (torch.randn(self.n, self.k, device=DEV, generator=gen) / self.k**0.5).to(
            self.dtype
        )

    def reference(self) -> torch.Tensor:
        if self.exact is None:
            self.exact = self.x.double() @ self.w.double().T
        return self.exact

    def quantized_reference(self, quant: str) -> torch.Tensor:
        if quant not in self.quantized:
            self.quantized[quant] = self._quantized_reference(quant)
        return self.quantized[quant]

    def _quantized_reference(self, quant: str) -> torch.Tensor:
        wq = quantized_weight(quant, self.w, GROUP)
        x = self.x.double()
        if quant == "fp8":
            x = quantized_weight("fp8", self.x, GROUP)
        elif quant == "int8":
            x = quantized_weight("int8", self.x, GROUP)
        return x @ wq.to(DEV).T


def rel_l2(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.double() - ref).norm() / ref.norm())


TOLERANCE = {"none": 5e-3, "bf16": 2e-2, "fp8": 8e-2, "int8": 3e-2, "int8-weight": 2e-2,
             "int4-weight": 0.25}  # fmt: skip


def checked(name: str, p: Problem, quant: str, run: Callable[[], torch.Tensor],
            out: torch.Tensor | None) -> dict:  # fmt: skip
    """Run once on poisoned output (when the caller owns it) and compare."""
    if out is not None:
        out.fill_(float("nan"))
    y = run()
    if not OPTS.tiny:
        torch.cuda.synchronize()
    unwritten = int(torch.isnan(y).sum())
    row = {"unwritten": unwritten, "rel_l2": rel_l2(y.float(), p.reference())}
    if quant != "none":
        row["rel_l2_quantized"] = rel_l2(y.float(), p.quantized_reference(quant))
    limit = TOLERANCE["bf16" if quant == "none" and p.dtype == torch.bfloat16 else quant]
    row["ok"] = unwritten == 0 and row["rel_l2"] <= limit
    if not row["ok"]:
        log(f"  CHECK FAILED {name}: {row}")
    return row


def measure(section: str, name: str, p: Problem, quant: str, run: Callable, out, *,
            bytes_moved: float, flops: float, peak_key: str | None, plan: str = "",
            reps: int = 30, check: bool = True, graph: bool = False, make: bool = False,
            clean_l2: bool = False) -> dict | None:  # fmt: skip
    """Check, time and record one variant; errors are recorded, never raised.
    make: `run` makes the launch (binding inside the guard). clean_l2: the primary time
    follows a read flush (`ms`), the memset flush's time goes to `ms_dirty_l2`."""
    row = {"section": section, "variant": name, "plan": plan, "M": p.m, "K": p.k, "N": p.n,
           "quant": quant}  # fmt: skip
    try:
        if make:
            run = run()
        if check:
            row.update(checked(name, p, quant, run, out))
        fn = graph_of(run) if graph else run
        ms, iqr = gpu_ms(fn, reps, "read" if clean_l2 else "write")
        if clean_l2:
            row["ms_dirty_l2"] = gpu_ms(fn, reps, "write")[0]
        row.update(ms=ms, iqr_ms=iqr, tflops=flops / ms / 1e9, tbps=bytes_moved / ms / 1e9)
        if peak_key:
            row["pct_peak"] = 100 * row["tflops"] / PEAK[peak_key]
        if COPY_TBPS:
            row["pct_copy"] = 100 * row["tbps"] / COPY_TBPS
    except Exception as exc:  # a plan the compiler or the GPU refuses: keep going
        row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
        log(f"  {name} {plan}: {row['error']}")
    record(row)
    return row if "ms" in row else None


COPY_TBPS: float | None = None


# ---- sections -------------------------------------------------------------------------------


def section_copy() -> None:
    global COPY_TBPS
    size = 2**16 if OPTS.tiny else 2**30
    src = torch.randn(size // 4, device=DEV)
    dst = torch.empty_like(src)
    ms, iqr = gpu_ms(lambda: dst.copy_(src), 20)
    COPY_TBPS = 2 * size / ms / 1e9
    record({"section": "copy", "variant": "d2d copy 1 GiB", "ms": ms, "iqr_ms": iqr,
            "tbps": COPY_TBPS})  # fmt: skip
    log(f"copy: {COPY_TBPS:.3f} TB/s (read + write of {size / 2**30:.2f} GiB)")


def prefill_plans() -> list:
    if OPTS.tiny:
        return [gemm_plan("tiled", 16, 16, 32, 4, 1), gemm_plan("tma", 16, 16, 32, 4, 1,
                persistent=True), gemm_plan("tma", 16, 16, 32, 4, 1, persistent=True,
                warp_specialize=True)]  # fmt: skip
    plans = []
    for bm, bn, w, s in [(128, 256, 8, 3), (128, 256, 8, 4), (256, 128, 8, 3), (256, 128, 8, 4),
                         (128, 128, 8, 4), (128, 128, 4, 5)]:  # fmt: skip
        plans.append(gemm_plan("tma", bm, bn, 128, w, s, persistent=True))
    plans.append(gemm_plan("tma", 128, 256, 128, 8, 4, persistent=False))
    plans.append(gemm_plan("tma", 128, 256, 128, 8, 3, persistent=True, group_m=16))
    # Warp-specialized plans are left out: on the H100 (2026-11-25) 128x256x128 w8 s3 ran at
    # 1226 TFLOP/s fp8 (non-specialized: 1258), and 128x128x128 w4 s4 never finished (killed
    # after 230 s). docs/perf/gemm.md.
    return plans


def describe(plan) -> str:  # noqa: C901
    kw = plan.kwargs
    text = f"{kw['KIND']} {kw['BLOCK_M']}x{kw['BLOCK_N']}x{kw['BLOCK_K']} w{plan.num_warps} s{plan.num_stages}"
    if kw.get("SPLIT_K", 1) > 1:
        text += f" split{kw['SPLIT_K']}"
    if kw.get("PERSISTENT"):
        text += " persistent"
    if kw.get("WARP_SPECIALIZE"):
        text += " ws"
    if kw.get("GROUP_M", 8) != 8:
        text += f" g{kw['GROUP_M']}"
    if kw["KIND"] == "stream" and not kw.get("USE_DOT", True):
        text += " cuda-core"
    if kw["KIND"] == "stream" and "FAST_UNPACK" in kw and not kw["FAST_UNPACK"]:
        text += " cvt"
    return text


def quantized_gemm_variants(p: Problem, cls, quant: str, section: str, plans) -> None:
    """Our W8A8 / fp8 linear: the quantizer alone, the GEMM alone per plan, the whole call
    with the best plan."""
    layer = cls(p.w, None)
    qdtype = torch.float8_e4m3fn if quant == "fp8" else torch.int8
    xq, sx = quantize_rows(p.x, dtype=qdtype)
    out = torch.empty(p.m, p.n, dtype=p.dtype, device=DEV)
    flops = 2.0 * p.m * p.n * p.k
    quant_bytes = 3.0 * p.m * p.k + 4 * p.m
    quantize = quantize_rows_call(p.x, xq, sx)[0].call  # bound once, as in the layer's call
    measure(section, f"ours {quant} quantize x", p, quant, quantize, None,
            bytes_moved=quant_bytes, flops=0, peak_key=None, check=False)  # fmt: skip
    gemm_bytes = p.m * p.k + p.n * p.k + 2.0 * p.m * p.n
    best = None
    for plan in plans:
        if over_budget():
            break
        try:
            calls, keep = gemm_calls(plan, xq, layer, out, row_scale=sx)
        except Exception as exc:
            record({"section": section, "variant": f"ours {quant} gemm", "plan": describe(plan),
                    "M": p.m, "K": p.k, "N": p.n, "error": f"{type(exc).__name__}: {str(exc)[:300]}"})  # fmt: skip
            log(f"  {quant} {describe(plan)}: bind failed: {type(exc).__name__}")
            continue
        run = sequence(calls, out)
        row = measure(section, f"ours {quant} gemm", p, quant, run, out, bytes_moved=gemm_bytes,
                      flops=flops, peak_key=quant, plan=describe(plan))  # fmt: skip
        if row and row.get("ok", True) and (best is None or row["ms"] < best[0]):
            best = (row["ms"], plan)
    if best is not None:
        plan = best[1]
        bound = layer.bind(p.x, out, config=plan)
        measure(section, f"ours {quant} full", p, quant, bound.launch, out,
                bytes_moved=gemm_bytes + quant_bytes, flops=flops, peak_key=quant,
                plan=describe(plan))  # fmt: skip


def torch_peers(p: Problem, section: str) -> None:
    flops = 2.0 * p.m * p.n * p.k
    fp16_bytes = 2.0 * (p.m * p.k + p.n * p.k + p.m * p.n)
    label = "bf16" if p.dtype == torch.bfloat16 else "fp16"
    measure(section, f"torch {label} F.linear", p, "none", lambda: F.linear(p.x, p.w), None,
            bytes_moved=fp16_bytes, flops=flops, peak_key=label)  # fmt: skip
    q_bytes = p.m * p.k + p.n * p.k + 2.0 * p.m * p.n
    xq, sx = fp8_rows(p.x)
    wq, sw = fp8_rows(p.w)
    wt, sa, sb = wq.t(), sx[:, None].contiguous(), sw[None, :].contiguous()
    for fast in (True, False):
        measure(section, f"torch _scaled_mm fp8 row-wise{' fast' if fast else ''}", p, "fp8",
                lambda fast=fast: torch._scaled_mm(xq, wt, scale_a=sa, scale_b=sb,
                                                   out_dtype=p.dtype, use_fast_accum=fast),
                None, bytes_moved=q_bytes, flops=flops, peak_key="fp8")  # fmt: skip
    one = torch.ones((), device=DEV)
    measure(section, "torch _scaled_mm fp8 tensor-wise fast", p, "fp8",
            lambda: torch._scaled_mm(xq, wt, scale_a=one, scale_b=one, out_dtype=p.dtype,
                                     use_fast_accum=True),
            None, bytes_moved=q_bytes, flops=flops, peak_key="fp8", check=False)  # fmt: skip
    from opbench.backends.torch_fp8 import fp8_linear

    full = fp8_linear(wt, sb, None, "none")
    measure(section, "torch fp8 row-wise full (torch-fp8 eager)", p, "fp8", lambda: full(p.x),
            None, bytes_moved=q_bytes, flops=flops, peak_key="fp8")  # fmt: skip
    if p.m > 16:
        xq8, sx8 = int8_rows(p.x)
        wq8, sw8 = int8_rows(p.w)
        wt8 = wq8.t()
        measure(section, "torch _int_mm (gemm only, int32 out)", p, "int8",
                lambda: torch._int_mm(xq8, wt8), None, bytes_moved=q_bytes + 2.0 * p.m * p.n,
                flops=flops, peak_key="int8", check=False)  # fmt: skip


def section_prefill() -> None:
    plans = prefill_plans()
    for k, n in SHAPES:
        for m in PREFILL_M:
            if over_budget():
                log("prefill: budget spent")
                return
            log(f"prefill M={m} K={k} N={n}")
            p = Problem(m, k, n, torch.bfloat16)
            torch_peers(p, "prefill")
            quantized_gemm_variants(p, Fp8Linear, "fp8", "prefill", plans)
            quantized_gemm_variants(p, Int8Linear, "int8", "prefill", plans)
            del p


def section_decode() -> None:
    sms = sm_count(torch.device(DEV))
    for k, n in SHAPES:
        for m in DECODE_M:
            if over_budget():
                log("decode: budget spent")
                return
            log(f"decode M={m} K={k} N={n}")
            p = Problem(m, k, n, torch.float16)
            flops = 2.0 * m * n * k
            io = 2.0 * (m * k + m * n)
            measure("decode", "torch fp16 F.linear", p, "none", lambda: F.linear(p.x, p.w), None,
                    bytes_moved=io + weight_bytes("none", n, k), flops=flops, peak_key=None,
                    reps=100, clean_l2=True)  # fmt: skip
            out = torch.empty(m, n, dtype=torch.float16, device=DEV)
            layers = {"none": Linear(p.w, None), "int8-weight": Int8WeightLinear(p.w, None),
                      "int4-weight": Int4WeightLinear(p.w, None, group_size=GROUP)}  # fmt: skip
            split = decode_plan(m, n, k, 2, False, sms)
            measure("decode", "ours fp16 split-K (decode table)", p, "none",
                    lambda: layers["none"].bind(p.x, out, config=split).launch, out,
                    bytes_moved=io + weight_bytes("none", n, k), flops=flops, peak_key=None,
                    plan=describe(split), reps=100, make=True, clean_l2=True)  # fmt: skip
            for quant, layer in layers.items():
                bits = {"none": 16, "int8-weight": 8, "int4-weight": 4}[quant]
                for i, plan in enumerate(stream_candidates(m, n, k, bits, GROUP, sms)):
                    name = f"ours {'fp16 gemv' if quant == 'none' else quant} stream"
                    measure("decode", name + (" (rule)" if i == 0 else ""), p, quant,
                            lambda layer=layer, plan=plan: layer.bind(p.x, out, config=plan).launch,
                            out, bytes_moved=io + weight_bytes(quant, n, k), flops=flops,
                            peak_key=None, plan=describe(plan), reps=60, make=True,
                            clean_l2=True)  # fmt: skip
            for cls, quant in ((Int8Linear, "int8"), (Fp8Linear, "fp8")):
                measure("decode", f"ours {quant} W8A8 (decode table, 2 launches)", p, quant,
                        lambda cls=cls: cls(p.w, None).bind(p.x, out).launch, out,
                        bytes_moved=io + n * k + 4.0 * n, flops=flops, peak_key=None, reps=100,
                        make=True, clean_l2=True)  # fmt: skip
            xq, sx = fp8_rows(p.x)
            wq, sw = fp8_rows(p.w)
            wt, sa, sb = wq.t(), sx[:, None].contiguous(), sw[None, :].contiguous()
            measure("decode", "torch _scaled_mm fp8 row-wise fast (gemm only)", p, "fp8",
                    lambda: torch._scaled_mm(xq, wt, scale_a=sa, scale_b=sb,
                                             out_dtype=torch.float16, use_fast_accum=True),
                    None, bytes_moved=io + n * k, flops=flops, peak_key=None,
                    reps=100, clean_l2=True)  # fmt: skip


def section_block() -> None:
    """The LLaMA-7B block's linears as one CUDA graph per variant (norms and attention left
    out: the linears are 97% of a decode step's weight bytes)."""
    for m in BLOCK_M_LIST:
        if over_budget():
            return
        problems = {name: Problem(m, k, n, torch.float16) for name, (k, n) in BLOCK_SHAPES.items()}
        total_flops = sum(2.0 * m * p.k * p.n for p in problems.values())
        for quant in ("none", "int8-weight", "int4-weight", "torch"):
            try:
                runs = block_runs(quant, problems)
            except Exception as exc:
                log(f"  block {quant}: {type(exc).__name__}: {exc}")
                continue

            def step(runs=runs):
                for r in runs:
                    r()

            wbytes = sum(weight_bytes("none" if quant == "torch" else quant, p.n, p.k)
                         for p in problems.values())  # fmt: skip
            first = next(iter(problems.values()))
            measure("block", f"{'torch fp16' if quant == 'torch' else 'ours ' + quant} block graph",
                    first, "none", step, None, bytes_moved=wbytes, flops=total_flops,
                    peak_key=None, reps=50, check=False, graph=True, plan=f"M={m}",
                    clean_l2=True)  # fmt: skip


def block_runs(quant: str, problems: dict) -> list:
    runs = []
    for p in problems.values():
        if quant == "torch":
            runs.append(lambda p=p: F.linear(p.x, p.w))
            continue
        cls = {"none": Linear, "int8-weight": Int8WeightLinear,
               "int4-weight": Int4WeightLinear}[quant]  # fmt: skip
        layer = cls(p.w, None, group_size=GROUP) if quant == "int4-weight" else cls(p.w, None)
        runs.append(layer.bind(p.x).launch)
    return runs


# ---- compile workers ------------------------------------------------------------------------


def compile_worker(index: int, count: int) -> None:
    """Fill Triton's cache for a share of the variants: bind (which compiles) and stop."""
    jobs = []
    sms = sm_count(torch.device(DEV))
    for k, n in SHAPES:
        for m in DECODE_M:
            for bits in (16, 8, 4):
                for plan in stream_candidates(m, n, k, bits, GROUP, sms):
                    jobs.append(("stream", bits, k, n, m, plan))
        if "prefill" in OPTS.only:
            for plan in prefill_plans():
                for quant in ("fp8", "int8"):
                    jobs.append(("gemm", quant, k, n, 256, plan))
    for job in jobs:
        kind, what, k, n, m, plan = job
        # One worker per distinct compile (kernel, format, plan, EVEN_K, BLOCK_M): the first
        # job compiles, the same worker's later ones find it in the cache. crc32, not hash():
        # hash() differs between processes.
        identity = (kind, what, describe(plan), k % plan["BLOCK_K"] == 0, plan["BLOCK_M"])
        if zlib.crc32(repr(identity).encode()) % count != index:
            continue
        try:
            if kind == "stream":
                p = Problem(m, k, n, torch.float16)
                cls = {16: Linear, 8: Int8WeightLinear, 4: Int4WeightLinear}[what]
                layer = cls(p.w, None, group_size=GROUP) if what == 4 else cls(p.w, None)
                layer.bind(p.x, config=plan)
            else:
                p = Problem(m, k, n, torch.bfloat16)
                cls = Fp8Linear if what == "fp8" else Int8Linear
                layer = cls(p.w, None)
                qdtype = torch.float8_e4m3fn if what == "fp8" else torch.int8
                xq, sx = quantize_rows(p.x, dtype=qdtype)
                out = torch.empty(m, n, dtype=p.dtype, device=DEV)
                gemm_calls(plan, xq, layer, out, row_scale=sx)
        except Exception as exc:
            print(f"worker {index}: {kind} {describe(plan)}: {type(exc).__name__}", flush=True)


# ---- summary --------------------------------------------------------------------------------


def summary() -> None:
    rows = [json.loads(line) for line in open(RESULTS)]
    print("\n== summary (median ms; best plan per variant; ratios vs torch in the same row) ==")
    best: dict[tuple, dict] = {}
    for r in rows:
        if "ms" not in r or not r.get("ok", True):
            continue
        key = (
            r["section"],
            r.get("M"),
            r.get("K"),
            r.get("N"),
            r["variant"].replace(" (rule)", ""),
        )
        if key not in best or r["ms"] < best[key]["ms"]:
            best[key] = r
    groups: dict[tuple, list] = {}
    for (sec, m, k, n, _), r in best.items():
        groups.setdefault((sec, m, k, n), []).append(r)
    for (sec, m, k, n), rs in groups.items():
        base = next(
            (
                r["ms"]
                for r in rs
                if r["variant"].startswith("torch") and "F.linear" in r["variant"]
            ),
            None,
        )
        base = base or next(
            (r["ms"] for r in rs if r["variant"].startswith("torch fp16 block")), None
        )
        print(f"-- {sec} M={m} K={k} N={n}")
        for r in sorted(rs, key=lambda r: r["ms"]):
            ratio = f"{base / r['ms']:.2f}x" if base else "-"
            extra = (
                f"{r.get('tflops', 0):7.1f} TF/s"
                if sec == "prefill"
                else f"{r.get('tbps', 0):.2f} TB/s {r.get('pct_copy', 0):5.1f}%copy"
            )
            err = f" err {r['rel_l2']:.1e}" if "rel_l2" in r else ""
            print(
                f"   {r['ms']:.4f} ms {ratio:>6} {extra} {r['variant']} [{r.get('plan', '')}]{err}"
            )
    failed = [r for r in rows if r.get("ok") is False]
    errors = [r for r in rows if "error" in r]
    print(f"checks failed: {len(failed)}; variants with errors: {len(errors)}")


def main() -> None:
    if OPTS.compile_worker:
        index, count = (int(v) for v in OPTS.compile_worker.split("/"))
        compile_worker(index, count)
        return
    if not OPTS.tiny:
        props = torch.cuda.get_device_properties(0)
        import triton

        log(
            f"device {props.name} ({props.multi_processor_count} SMs), torch {torch.__version__}, triton {triton.__version__}"
        )
        record({"section": "env", "device": props.name, "sms": props.multi_processor_count,
                "torch": torch.__version__, "triton": triton.__version__})  # fmt: skip
    precompile(__file__, OPTS, log)
    sections = {"copy": section_copy, "prefill": section_prefill, "decode": section_decode,
                "block": section_block}  # fmt: skip
    run_sections(OPTS, sections, over_budget, log)
    summary()


if __name__ == "__main__":
    with torch.no_grad():
        main()
