"""Small and medium memory-bound layers on the GPU: Triton vs torch eager vs torch.compile.

Usage (GPU machine, repository root):
    PYTHONPATH=. PYTHONUNBUFFERED=1 python3 bench/memory_small.py
CPU check of everything but the GPU timings (Triton's interpreter, tiny shapes, every GPU
autotune config run and checked, torch.compile with the "eager" backend):
    PYTHONPATH=. python3 bench/memory_small.py --cpu-smoke
Options: --only bn,to_nhwc (case names), --rep MS (do_bench_cudagraph's rep, default 25),
--cold-calls N (default 100), --budget S (stop the per-config sweep after S seconds, 300).

The cases are the memory_bound suite's layers where Triton lost to torch.compile, at the
suite's shapes, fp16 (suites/memory_bound.yaml). For each case:

1. correctness: fresh random-normal input; the Triton launcher writes into a NaN-filled
   output; relative L2 error against a float64 reference (exact equality for permutes);
2. times, each as CUDA-graph replays:
   * warm: `triton.testing.do_bench_cudagraph(fn, rep, return_mode="median")`: many calls
     captured in one graph, no L2 flush between them (working sets of tens of MB then stay
     partly in L2, so warm TB/s can exceed DRAM bandwidth);
   * cold: the opbench suite's timer (`timing: {cuda_graph: true}`): one call captured in a
     graph, a 256 MB buffer zeroed before every replay to flush L2, CUDA events around each
     replay, median over --cold-calls replays. It includes the graph launch, so it is the
     regime of the suite's table;
   for torch eager, torch.compile (mode default, dynamic=False; every case compiles a
   function with a code object of its own, as opbench/backends/torch_compile.py does, since
   Dynamo keeps one cache per code object), the Triton launcher as the layer calls it
   (autotuned, allocating its output), and a device copy moving the same number of bytes
   (a reference for the regime, not a floor: the H200 run had kernels beat it when cold);
3. after all cases: every config the autotuner considered for the case, forced one at a
   time (correctness checked again, then timed warm and cold), so the winner per shape is
   visible. The autotuner itself picks with triton's do_bench (L2 flushed, no graph).

Bandwidth = minimum traffic (every input byte read once, every output byte written once) /
time. The tables at the end and $OUT/memory_small.json (if $OUT is set) hold the results.
A failing case or config is reported and skipped; the script goes on.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import traceback
import types
from collections.abc import Callable
from dataclasses import dataclass, field

SMOKE = "--cpu-smoke" in sys.argv
if SMOKE:  # must precede the first `import triton`
    os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import triton  # noqa: E402

from opbench.kernels import batchnorm as bn_k  # noqa: E402
from opbench.kernels import norm as norm_k  # noqa: E402
from opbench.kernels import pool as pool_k  # noqa: E402
from opbench.kernels import softmax as softmax_k  # noqa: E402
from opbench.kernels import transpose as transpose_k  # noqa: E402

COPY_TBPS = 4.27  # device-to-device copy bandwidth of the H200 (the brief's figure)
EPS = 1e-5
TOLERANCE = {torch.float32: 1e-4, torch.float16: 5e-3, torch.bfloat16: 2e-2}
DEVICE = "cpu" if SMOKE else "cuda"
DTYPE = torch.float16


# --------------------------------------------------------------------------------------
# Cases
# --------------------------------------------------------------------------------------


@dataclass
class Case:
    """One layer: inputs, the Triton launcher, the torch forward and a float64 reference."""

    name: str  # short name (--only)
    layer: str  # model / layer in the suite
    shape: tuple[int, ...]
    make: Callable[[], dict]  # fresh random inputs
    triton_fn: Callable[..., torch.Tensor]  # (inputs, out=None) -> output
    torch_factory: Callable[[dict], Callable[[torch.Tensor], torch.Tensor]]  # x -> y, like a layer
    reference: Callable[[dict], torch.Tensor]  # float64
    bytes_moved: Callable[[dict], int]
    tuner: Callable[[], object]  # the autotuned kernel the launcher uses for this case
    exact: bool = False  # a permutation: output must equal the input values exactly


def randn(*shape: int, dtype: torch.dtype = DTYPE) -> torch.Tensor:
    return torch.randn(*shape, device=DEVICE, dtype=torch.float32).to(dtype)


def nbytes(*tensors: torch.Tensor) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def batchnorm_case(name: str, layer: str, shape: tuple[int, ...]) -> Case:
    channels = shape[1]

    def make() -> dict:
        d = {
            "x": randn(*shape),
            "mean": randn(channels, dtype=torch.float32),
            "var": torch.rand(channels, device=DEVICE) + 0.5,
            "w": randn(channels, dtype=torch.float32),
            "b": randn(channels, dtype=torch.float32),
        }
        d["scale"], d["shift"] = bn_k.fold_batchnorm(d["mean"], d["var"], d["w"], d["b"], EPS)
        return d

    def torch_factory(d: dict):
        # As opbench's torch backends: parameters in the layer's dtype.
        mean, var, w, b = (d[k].to(DTYPE) for k in ("mean", "var", "w", "b"))

        def batchnorm(x):
            return F.batch_norm(x, mean, var, w, b, False, 0.0, EPS)

        return batchnorm

    return Case(
        name,
        layer,
        shape,
        make,
        lambda d, out=None: bn_k.batchnorm2d(d["x"], d["scale"], d["shift"], out),
        torch_factory,
        lambda d: F.batch_norm(
            d["x"].double(), *(d[k].double() for k in ("mean", "var", "w", "b")), False, 0.0, EPS
        ),
        lambda d: 2 * nbytes(d["x"]) + nbytes(d["scale"], d["shift"]),
        lambda: bn_k._batchnorm,
    )


def permute_case(name: str, layer: str, shape: tuple[int, ...], dims: tuple[int, ...]) -> Case:
    def torch_factory(d: dict):
        def permute(x):
            return x.permute(dims).contiguous()

        return permute

    def tuner():
        x = torch.empty(shape, device="meta")
        out_shape = [shape[d] for d in dims]
        plan = transpose_k._strided_plan(
            tuple(out_shape),
            x.permute(dims).stride(),
            torch.empty(out_shape, device="meta").stride(),
        )
        return transpose_k._permute_copying if plan.copying else transpose_k._permute_transposing

    return Case(
        name,
        layer,
        shape,
        lambda: {"x": randn(*shape)},
        lambda d, out=None: transpose_k.permute(d["x"], dims, out),
        torch_factory,
        lambda d: d["x"].double().permute(dims).contiguous(),
        lambda d: 2 * nbytes(d["x"]),
        tuner,
        exact=True,
    )


def avgpool_case(name: str, layer: str, shape: tuple[int, ...], kernel: int) -> Case:
    def torch_factory(d: dict):
        def avgpool(x):
            return F.avg_pool2d(x, kernel, kernel, 0)

        return avgpool

    def out_numel() -> int:
        n, c, h, w = shape
        return n * c * ((h - kernel) // kernel + 1) * ((w - kernel) // kernel + 1)

    is_global = (kernel, kernel) == shape[2:]
    return Case(
        name,
        layer,
        shape,
        lambda: {"x": randn(*shape)},
        lambda d, out=None: pool_k.avgpool2d(d["x"], kernel, kernel, 0, out),
        torch_factory,
        lambda d: F.avg_pool2d(d["x"].double(), kernel, kernel, 0),
        lambda d: nbytes(d["x"]) + out_numel() * d["x"].element_size(),
        lambda: pool_k._global_pool2d if is_global else pool_k._pool2d,
    )


def layernorm_case(name: str, layer: str, shape: tuple[int, ...]) -> Case:
    hidden = shape[-1]

    def make() -> dict:
        # The suite's weights are float32 random-normal, cast to the layer's dtype.
        return {"x": randn(*shape), "w": randn(hidden), "b": randn(hidden)}

    def torch_factory(d: dict):
        w, b = d["w"], d["b"]

        def layernorm(x):
            return F.layer_norm(x, (hidden,), w, b, EPS)

        return layernorm

    return Case(
        name,
        layer,
        shape,
        make,
        lambda d, out=None: norm_k.layernorm(d["x"], d["w"], d["b"], EPS, out),
        torch_factory,
        lambda d: F.layer_norm(d["x"].double(), (hidden,), d["w"].double(), d["b"].double(), EPS),
        lambda d: 2 * nbytes(d["x"]) + nbytes(d["w"], d["b"]),
        lambda: norm_k._norm,
    )


def rmsnorm_case(name: str, layer: str, shape: tuple[int, ...]) -> Case:
    hidden = shape[-1]

    def torch_factory(d: dict):
        w = d["w"]

        def rmsnorm(x):
            # opbench/ops/norm.py's forward: the RMS in float32, written out.
            xf = x.float()
            y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS)
            return (y * w.to(y.dtype)).to(x.dtype)

        return rmsnorm

    def reference(d: dict) -> torch.Tensor:
        x = d["x"].double()
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * d["w"].double()

    return Case(
        name,
        layer,
        shape,
        lambda: {"x": randn(*shape), "w": randn(hidden)},
        lambda d, out=None: norm_k.rmsnorm(d["x"], d["w"], EPS, out),
        torch_factory,
        reference,
        lambda d: 2 * nbytes(d["x"]) + nbytes(d["w"]),
        lambda: norm_k._norm,
    )


def cases() -> list[Case]:
    """The shapes of the suite (batch first); --cpu-smoke uses tiny odd ones."""
    if SMOKE:
        shapes = {
            "bn": (3, 5, 7, 7),
            "to_nhwc": (3, 5, 7, 7),
            "global_pool": (3, 5, 7, 7),
            "pool_2x2": (2, 3, 10, 10),
            "ln_bert": (2, 3, 40),
            "ln_vit": (3, 5, 24),
            "to_channels": (3, 5, 24),
            "rmsnorm": (2, 3, 72),
        }
    else:
        shapes = {
            "bn": (32, 1024, 14, 14),
            "to_nhwc": (32, 1024, 14, 14),
            "global_pool": (32, 2048, 7, 7),
            "pool_2x2": (32, 256, 56, 56),
            "ln_bert": (8, 512, 1024),
            "ln_vit": (64, 197, 768),
            "to_channels": (64, 197, 768),
            "rmsnorm": (2, 2048, 4096),
        }
    return [
        batchnorm_case("bn", "resnet50_stage3/bn", shapes["bn"]),
        permute_case("to_nhwc", "resnet50_stage3/to_nhwc", shapes["to_nhwc"], (0, 2, 3, 1)),
        avgpool_case("global_pool", "resnet50_head/global_pool", shapes["global_pool"], 7),
        avgpool_case("pool_2x2", "densenet121_transition/pool", shapes["pool_2x2"], 2),
        layernorm_case("ln_bert", "bert_large_layer/ln", shapes["ln_bert"]),
        layernorm_case("ln_vit", "vit_b16_tokens/ln", shapes["ln_vit"]),
        permute_case("to_channels", "vit_b16_tokens/to_channels", shapes["to_channels"], (0, 2, 1)),
        rmsnorm_case("rmsnorm", "llama7b_block/input_norm", shapes["rmsnorm"]),
    ]


# --------------------------------------------------------------------------------------
# Timers
# --------------------------------------------------------------------------------------


class GpuTimer:
    def __init__(self, rep_ms: float, cold_calls: int) -> None:
        self.rep_ms = rep_ms
        self.cold_calls = cold_calls
        self.flush = torch.empty(256 * 1024 * 1024, dtype=torch.int8, device="cuda")

    def warm(self, fn: Callable[[], object]) -> float:
        """Median ms per call of many calls replayed from one CUDA graph (no L2 flush)."""
        return triton.testing.do_bench_cudagraph(fn, rep=self.rep_ms, return_mode="median")

    def cold(self, fn: Callable[[], object]) -> float:
        """The opbench suite's timer with cuda_graph: true (opbench/measure/timer.py): one call
        in a graph; before every replay L2 is flushed, outside the events."""
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        for _ in range(5):  # warm-up
            self.flush.zero_()
            graph.replay()
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(self.cold_calls)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(self.cold_calls)]
        for start, end in zip(starts, ends, strict=True):
            self.flush.zero_()
            start.record()
            graph.replay()
            end.record()
        torch.cuda.synchronize()
        times = [s.elapsed_time(e) for s, e in zip(starts, ends, strict=True)]
        del graph
        return statistics.median(times)


class CpuTimer:
    """--cpu-smoke: the same call structure, timed with perf_counter (not a performance figure)."""

    def warm(self, fn: Callable[[], object]) -> float:
        times = []
        for _ in range(2):
            start = time.perf_counter()
            fn()
            times.append((time.perf_counter() - start) * 1e3)
        return statistics.median(times)

    cold = warm


# --------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------


def with_own_code(fn: Callable, name: str) -> Callable:
    """fn with a code object of its own: Dynamo keeps one cache (and recompile budget, and
    automatic-dynamic decisions) per code object, and cases built by the same factory share
    one (see opbench/backends/torch_compile.py)."""
    code = fn.__code__.replace(co_name=f"{fn.__code__.co_name}_{name}")
    return types.FunctionType(code, fn.__globals__, code.co_name, fn.__defaults__, fn.__closure__)


def rel_l2(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.double() - ref).norm() / ref.norm().clamp_min(1e-300)).item()


def check(case: Case, d: dict, ref: torch.Tensor) -> dict:
    """Run the launcher into a NaN-poisoned output and compare it with the reference."""
    out = torch.full(ref.shape, float("nan"), dtype=d["x"].dtype, device=DEVICE)
    result = case.triton_fn(d, out)
    if DEVICE == "cuda":
        torch.cuda.synchronize()
    nan_left = int(torch.isnan(out).sum().item())
    err = rel_l2(out, ref)
    ok = result is out and nan_left == 0 and err <= TOLERANCE[d["x"].dtype]
    if case.exact:
        ok = ok and torch.equal(out.double(), ref)
    return {"error": err, "nan_left": nan_left, "correct": bool(ok)}


def config_name(config) -> str:
    """Compact config label: meta-parameters and warps."""
    meta = " ".join(f"{k}={v}" for k, v in config.kwargs.items())
    return f"{meta} w{config.num_warps}"


def tbps(nbytes_moved: int, ms: float | None) -> float | None:
    return nbytes_moved / ms / 1e9 if ms else None


def timed(timer, fn, errors: list, label: str) -> tuple[float | None, float | None]:
    """(warm ms, cold ms), None where the measurement failed (reported in `errors`)."""
    results = []
    for method in (timer.warm, timer.cold):
        try:
            results.append(method(fn))
        except Exception as exc:  # report, keep going
            errors.append(f"{label} {method.__name__}: {type(exc).__name__}: {exc}"[:400])
            results.append(None)
    return results[0], results[1]


def copy_reference(timer, nbytes_moved: int, errors: list) -> tuple[float | None, float | None]:
    """`dst.copy_(src)` with the same traffic (half read, half written), for reference."""
    elements = max(1, nbytes_moved // 4)
    src = torch.empty(elements, dtype=torch.float16, device=DEVICE)
    dst = torch.empty_like(src)
    return timed(timer, lambda: dst.copy_(src), errors, "copy")


# --------------------------------------------------------------------------------------
# Phases
# --------------------------------------------------------------------------------------


@dataclass
class Row:
    case: Case
    data: dict = field(default_factory=dict)  # inputs kept for the sweep
    result: dict = field(default_factory=dict)  # what goes to JSON
    configs: list = field(default_factory=list)  # the autotuner's candidate configs


def main_phase(case: Case, timer, compile_backend: str) -> Row:
    """Correctness, autotuned Triton, eager, torch.compile and the copy floor of one case."""
    row = Row(case)
    r = row.result
    r.update(name=case.name, layer=case.layer, shape=list(case.shape), errors=[])
    errors = r["errors"]
    d = case.make()
    row.data = d
    moved = case.bytes_moved(d)
    r["bytes"] = moved
    r["floor_ms"] = moved / COPY_TBPS / 1e9
    ref = case.reference(d)

    r["triton_ms"] = r["triton_cold_ms"] = None
    r["check"] = {"correct": False}
    try:
        tuner = case.tuner()
        tuner.cache.clear()  # tune this case's key now, so configs_timings is this case's
        t0 = time.time()
        r["check"] = check(case, d, ref)
        r["first_call_s"] = round(time.time() - t0, 2)
        r["autotuned"] = config_name(tuner.best_config)
        timings = getattr(tuner, "configs_timings", None) or {}
        row.configs = list(timings) or list(tuner.configs)
        r["autotuner_ms"] = {
            config_name(c): (t[0] if isinstance(t, list) else t) for c, t in timings.items()
        }
        print(
            f"[{case.name}] {case.layer} {tuple(case.shape)}: err {r['check']['error']:.1e} "
            f"nan {r['check']['nan_left']} correct {r['check']['correct']} | autotuned "
            f"{r['autotuned']} over {len(row.configs)} configs ({r['first_call_s']} s)"
        )
        r["triton_ms"], r["triton_cold_ms"] = timed(
            timer, lambda: case.triton_fn(d), errors, "triton"
        )
    except Exception as exc:  # report, keep going with torch
        errors.append(f"triton: {type(exc).__name__}: {exc}"[:400])
        print(f"[{case.name}] triton FAILED: {errors[-1]}")
    r["copy_ms"], r["copy_cold_ms"] = copy_reference(timer, moved, errors)

    eager = case.torch_factory(d)
    try:
        r["torch_error"] = rel_l2(eager(d["x"]), ref)
    except Exception as exc:
        errors.append(f"torch: {type(exc).__name__}: {exc}"[:400])
    r["torch_ms"], r["torch_cold_ms"] = timed(timer, lambda: eager(d["x"]), errors, "torch")

    r["compile_ms"] = r["compile_cold_ms"] = None
    try:
        t0 = time.time()
        compiled = torch.compile(
            with_own_code(eager, case.name), dynamic=False, backend=compile_backend
        )
        compiled_out = compiled(d["x"])
        if DEVICE == "cuda":
            torch.cuda.synchronize()
        r["compile_s"] = round(time.time() - t0, 1)
        r["compile_error"] = rel_l2(compiled_out, ref)
        del compiled_out
        r["compile_ms"], r["compile_cold_ms"] = timed(
            timer, lambda: compiled(d["x"]), errors, "compile"
        )
    except Exception as exc:
        errors.append(f"torch.compile: {type(exc).__name__}: {exc}"[:400])
    del ref

    def fmt(ms):
        return f"{ms:.4f}" if ms is not None else "n/a"

    print(
        f"[{case.name}] warm ms: torch {fmt(r['torch_ms'])} compile {fmt(r['compile_ms'])} "
        f"triton {fmt(r['triton_ms'])} copy {fmt(r['copy_ms'])} | cold ms: torch "
        f"{fmt(r['torch_cold_ms'])} compile {fmt(r['compile_cold_ms'])} triton "
        f"{fmt(r['triton_cold_ms'])} copy {fmt(r['copy_cold_ms'])} | compile "
        f"{r.get('compile_s')} s" + (f" | ERRORS {errors}" if errors else "")
    )
    return row


def sweep_phase(row: Row, timer, deadline: float) -> None:
    """Every candidate config of the case's autotuner, forced one at a time."""
    case, d, r = row.case, row.data, row.result
    tuner = case.tuner()
    ref = case.reference(d)
    r["configs"] = []
    saved = tuner.configs
    try:
        for config in row.configs:
            name = config_name(config)
            if time.time() > deadline:
                r["errors"].append(f"sweep stopped at {name}: time budget spent")
                print(f"[{case.name}] sweep stopped: time budget spent")
                break
            entry: dict = {"config": name, "errors": []}
            r["configs"].append(entry)
            tuner.configs = [config]  # a single config: the autotuner runs it as is
            try:
                entry.update(check(case, d, ref))
            except Exception as exc:
                entry["errors"].append(f"{type(exc).__name__}: {exc}"[:400])
                print(f"[{case.name}]   {name}: FAILED {entry['errors'][-1]}")
                continue
            entry["warm_ms"], entry["cold_ms"] = timed(
                timer, lambda: case.triton_fn(d), entry["errors"], name
            )
            warm, cold = entry["warm_ms"], entry["cold_ms"]
            print(
                f"[{case.name}]   {name:48s} correct {entry['correct']} err "
                f"{entry['error']:.1e} | warm {warm if warm is None else f'{warm:.4f}'} "
                f"cold {cold if cold is None else f'{cold:.4f}'} ms"
            )
    finally:
        tuner.configs = saved
    good = [c for c in r["configs"] if c.get("correct") and c.get("warm_ms")]
    if good:
        best = min(good, key=lambda c: c["warm_ms"])
        r["best_config"], r["best_config_ms"] = best["config"], best["warm_ms"]
    good_cold = [c for c in r["configs"] if c.get("correct") and c.get("cold_ms")]
    if good_cold:
        best = min(good_cold, key=lambda c: c["cold_ms"])
        r["best_cold_config"], r["best_cold_config_ms"] = best["config"], best["cold_ms"]
    wrong = [c["config"] for c in r["configs"] if c.get("correct") is False]
    if wrong:
        r["errors"].append(f"INCORRECT configs: {wrong}")


# --------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------


def table(rows: list[dict], cold: bool) -> str:
    suffix = "_cold_ms" if cold else "_ms"
    best_key = "best_cold_config" if cold else "best_config"
    title = (
        "cold (suite timer: L2 flushed, one call per graph replay)"
        if cold
        else "warm (do_bench_cudagraph, median)"
    )
    header = (
        f"{'case':12s} {'torch ms':>9s} {'compile ms':>10s} {'triton ms':>9s} {'x comp':>6s} "
        f"{'TB/s':>5s} {'copy ms':>8s} {'floor ms':>8s} {'ok':>3s}  best config"
    )
    lines = [title, header, "-" * len(header)]

    def f(value, width, digits=4):
        return f"{value:{width}.{digits}f}" if value is not None else f"{'n/a':>{width}s}"

    for r in rows:
        triton_ms, compile_ms = r.get("triton" + suffix), r.get("compile" + suffix)
        ratio = compile_ms / triton_ms if compile_ms and triton_ms else None
        ok = "yes" if r.get("check", {}).get("correct") else "NO"
        lines.append(
            f"{r['name']:12s} {f(r.get('torch' + suffix), 9)} {f(compile_ms, 10)} "
            f"{f(triton_ms, 9)} {f(ratio, 6, 2)} {f(tbps(r['bytes'], triton_ms), 5, 2)} "
            f"{f(r.get('copy' + suffix), 8)} {f(r['floor_ms'], 8)} {ok:>3s}  "
            f"{r.get(best_key, 'n/a')}"
        )
    return "\n".join(lines)


# --------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------


def smoke_setup() -> None:
    """--cpu-smoke: give every tuner the GPU config list (the interpreter's is a single
    config, which the autotuner never prunes) and a perf_counter benchmark, so that pruning
    and every config the GPU would try run under the interpreter on the tiny shapes."""
    os.environ["TRITON_INTERPRET"] = "0"
    try:
        lists = {
            bn_k._batchnorm: bn_k._configs(),
            transpose_k._permute_transposing: transpose_k._transposing_configs(),
            transpose_k._permute_copying: transpose_k._copying_configs(),
            pool_k._pool2d: pool_k._configs(),
            pool_k._global_pool2d: pool_k._global_configs(),
            norm_k._norm: softmax_k.row_configs(),
        }
    finally:
        os.environ["TRITON_INTERPRET"] = "1"

    def bench(kernel_call, quantiles=None):
        start = time.perf_counter()
        kernel_call()
        ms = (time.perf_counter() - start) * 1e3
        return [ms, ms, ms]

    for tuner, configs in lists.items():
        tuner.configs = configs
        tuner.__dict__["do_bench"] = bench  # shadows the cached_property


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu-smoke", action="store_true")
    parser.add_argument("--only", default="", help="comma-separated case names")
    parser.add_argument("--rep", type=float, default=25.0, help="do_bench_cudagraph rep, ms")
    parser.add_argument("--cold-calls", type=int, default=100)
    parser.add_argument("--budget", type=float, default=300.0, help="seconds, then no sweep")
    args = parser.parse_args()
    start = time.time()
    torch.manual_seed(0)
    torch.set_grad_enabled(False)  # as the backends: grad mode outside the compiled function
    if SMOKE:
        smoke_setup()
        timer, backend = CpuTimer(), "eager"
        versions = f"torch {torch.__version__}, triton {triton.__version__}"
        print(f"--cpu-smoke: Triton interpreter, {versions}")
    else:
        timer, backend = GpuTimer(args.rep, args.cold_calls), "inductor"
        print(
            f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}  "
            f"triton {triton.__version__}"
        )
    only = {name for name in args.only.split(",") if name}
    selected = [case for case in cases() if not only or case.name in only]

    rows: list[Row] = []
    for case in selected:
        try:
            rows.append(main_phase(case, timer, backend))
        except Exception as exc:
            print(f"[{case.name}] FAILED: {type(exc).__name__}: {exc}")
            traceback.print_exc()
            rows.append(
                Row(
                    case, result={"name": case.name, "layer": case.layer, "failed": repr(exc)[:400]}
                )
            )
        print(f"  ({time.time() - start:.0f} s)")

    deadline = start + args.budget
    print("\nforced configs (each autotuner candidate alone; warm and cold ms):")
    for row in rows:
        if "failed" in row.result:
            continue
        try:
            sweep_phase(row, timer, deadline)
        except Exception as exc:
            print(f"[{row.case.name}] sweep FAILED: {type(exc).__name__}: {exc}")
            row.result.setdefault("errors", []).append(f"sweep: {exc!r}"[:400])
        print(f"  ({time.time() - start:.0f} s)")

    results = [row.result for row in rows if "failed" not in row.result]
    failed = [row.result for row in rows if "failed" in row.result]
    for r in results:
        if r.get("errors"):
            print(f"[{r['name']}] errors: {r['errors']}")
    for r in failed:
        print(f"[{r['name']}] FAILED: {r['failed']}")
    print("\n" + table(results, cold=False) + "\n\n" + table(results, cold=True))
    print(
        f"\nTB/s = minimum traffic / triton ms; floor = traffic at {COPY_TBPS} TB/s; copy = a "
        f"device copy with the same traffic. total {time.time() - start:.0f} s"
    )
    if os.environ.get("OUT"):
        path = os.path.join(os.environ["OUT"], "memory_small.json")
        with open(path, "w") as f:
            json.dump({"results": results, "failed": failed, "smoke": SMOKE}, f, indent=1)
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
