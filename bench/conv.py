"""GPU check and timing of opbench's Triton implicit-GEMM conv2d against torch.

Run on the GPU machine from the repository root:

    PYTHONPATH=. PYTHONUNBUFFERED=1 python3 bench/conv.py 2>&1 | tee $OUT/log.txt

Phase 1 (worker processes, in parallel): every Triton variant and every torch.compile graph is
compiled once and checked against a float64 reference on fresh random data; odd shapes too.
Compiled kernels land in the on-disk caches, so phase 2 does not pay compile time.
Phase 2 (this process, alone on the GPU): triton.testing.do_bench (warmup 25 ms, rep 100 ms,
median, L2 flushed before each rep) of torch NCHW conv+bias+relu, torch channels_last (input and
weight already channels_last), torch.compile (default mode), and Triton (its first call times the
candidate read paths and tiles and keeps the fastest), fp16; then int8 Triton for the C, Cout >= 128
layers. The same callables replayed from CUDA graphs give GPU-only times, and a host timer gives
the per-call launch overhead.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from opbench.backends.torch_compile import with_own_code  # noqa: E402

# (name, batch, C, H, W, Cout, kernel, stride, padding, read paths the auto selection weighs)
K3 = ("direct", "nhwc")
LAYERS = [
    ("c3x3_64_56", 32, 64, 56, 56, 64, 3, 1, 1, K3),
    ("c3x3_256_14", 32, 256, 14, 14, 256, 3, 1, 1, K3),  # = ResNet-50 3x3 256 at 14^2
    ("stem7x7_s2", 64, 3, 224, 224, 64, 7, 2, 3, ("gather",)),
    ("r50_1x1_64_256_56", 32, 64, 56, 56, 256, 1, 1, 0, ("pointwise",)),
    ("r50_3x3_128_28", 32, 128, 28, 28, 128, 3, 1, 1, K3),
    ("r50_1x1_512_128_28", 32, 512, 28, 28, 128, 1, 1, 0, ("pointwise",)),
    ("r50_1x1_1024_256_14", 32, 1024, 14, 14, 256, 1, 1, 0, ("pointwise", "nhwc")),
    ("r50_3x3_512_7", 32, 512, 7, 7, 512, 3, 1, 1, K3),
    ("r50_1x1_2048_512_7", 32, 2048, 7, 7, 512, 1, 1, 0, ("pointwise", "nhwc")),
]
INT8_LAYERS = [layer for layer in LAYERS if layer[2] >= 128 and layer[5] >= 128]

# Odd shapes checked on the GPU: (N, C, H, W, Cout, (kh, kw), stride, padding, dilation, dtype, quant, bn)
ODD = [
    (3, 37, 29, 31, 45, (3, 3), (2, 2), (1, 1), (1, 1), "float16", "none", False),
    (2, 48, 17, 23, 40, (3, 5), (1, 2), (1, 2), (2, 1), "float16", "none", True),
    (2, 3, 45, 39, 24, (7, 7), (2, 2), (3, 3), (1, 1), "bfloat16", "none", False),
    (2, 40, 15, 13, 72, (1, 1), (1, 1), (0, 0), (1, 1), "bfloat16", "none", False),
    (2, 40, 15, 13, 72, (1, 1), (2, 2), (0, 0), (1, 1), "float32", "none", False),
    (2, 24, 19, 17, 33, (5, 3), (1, 1), (2, 1), (2, 2), "float32", "none", True),
    (2, 136, 15, 11, 144, (3, 3), (1, 1), (1, 1), (1, 1), "float16", "int8", False),
    (2, 136, 15, 11, 144, (1, 1), (1, 1), (0, 0), (1, 1), "bfloat16", "int8", True),
    (2, 3, 33, 35, 40, (7, 7), (2, 2), (3, 3), (1, 1), "float16", "int8", False),
]
TOL = {"float16": 5e-3, "bfloat16": 2e-2, "float32": 1e-4, "int8": 3e-2}


def rel_l2(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.double() - ref).norm() / ref.norm()).item()


def make_layer(layer, dtype=torch.float16, seed=0):
    _, n, c, h, w, cout, k, s, p, _ = layer
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn((n, c, h, w), device="cuda", dtype=dtype, generator=g)
    wt = torch.randn((cout, c, k, k), device="cuda", dtype=dtype, generator=g) / math.sqrt(
        c * k * k
    )
    b = torch.randn((cout,), device="cuda", dtype=dtype, generator=g) * 0.1
    return x, wt, b, (s, s), (p, p)


def reference(x, wt, b, stride, padding, dilation=(1, 1), bn=None):
    ref = F.conv2d(
        x.double(), wt.double(), b.double(), stride=stride, padding=padding, dilation=dilation
    )
    if bn is not None:
        ref = F.batch_norm(
            ref,
            bn["running_mean"].double(),
            bn["running_var"].double(),
            bn["weight"].double(),
            bn["bias"].double(),
            False,
            0.0,
            bn["eps"],
        )
    return F.relu(ref)


def _triton_fn(layer, path, quant, x, wt, b, stride, padding):
    from opbench.kernels.conv import build_conv2d

    return build_conv2d(
        wt,
        b,
        stride=stride,
        padding=padding,
        dilation=(1, 1),
        activation="relu",
        quant=quant,
        path=path,
    )


def warm_triton(layer, path, quant):
    """Worker: compile (autotune) one Triton variant and check it against float64."""
    x, wt, b, stride, padding = make_layer(layer, seed=1)
    fn = _triton_fn(layer, path, quant, x, wt, b, stride, padding)
    t0 = time.time()
    from opbench.kernels.conv import output_size

    oh, ow = output_size(x.shape[2], x.shape[3], *wt.shape[2:], *stride, *padding, 1, 1)
    out = torch.full((x.shape[0], wt.shape[0], oh, ow), float("nan"), device="cuda", dtype=x.dtype)
    fn(x, out)
    torch.cuda.synchronize()
    err = rel_l2(out, reference(x, wt, b, stride, padding))
    return {
        "layer": layer[0],
        "path": path,
        "quant": quant,
        "rel_l2": err,
        "nan": bool(out.isnan().any()),
        "first_call_s": time.time() - t0,
    }


def warm_compile(layer):
    """Worker: torch.compile (default mode) of conv+bias+relu; first-call (compile) time."""
    x, wt, b, stride, padding = make_layer(layer, seed=1)
    compiled = torch.compile(
        with_own_code(lambda t: F.relu(F.conv2d(t, wt, b, stride=stride, padding=padding))),
        dynamic=False,
    )
    t0 = time.time()
    out = compiled(x)
    torch.cuda.synchronize()
    return {
        "layer": layer[0],
        "compile_s": time.time() - t0,
        "rel_l2": rel_l2(out, reference(x, wt, b, stride, padding)),
    }


def check_odd(case):
    """Worker: one odd shape, fresh random data, NaN-poisoned out, vs float64."""
    from opbench.kernels.conv import output_size, prepare_conv2d

    n, c, h, w, cout, (kh, kw), stride, padding, dilation, dtype_name, quant, with_bn = case
    dtype = getattr(torch, dtype_name)
    x = torch.randn((n, c, h, w), device="cuda", dtype=dtype)
    wt = (torch.randn((cout, c, kh, kw), device="cuda") / math.sqrt(c * kh * kw)).to(dtype)
    b = torch.randn((cout,), device="cuda").to(dtype)
    bn = None
    if with_bn:
        bn = {
            "running_mean": torch.randn(cout, device="cuda"),
            "running_var": torch.rand(cout, device="cuda") + 0.5,
            "weight": torch.randn(cout, device="cuda"),
            "bias": torch.randn(cout, device="cuda"),
            "eps": 1e-5,
        }
    fn = prepare_conv2d(
        wt,
        b,
        stride=stride,
        padding=padding,
        dilation=dilation,
        activation="relu",
        quant=quant,
        batchnorm=bn,
    )
    oh, ow = output_size(h, w, kh, kw, *stride, *padding, *dilation)
    out = torch.full((n, cout, oh, ow), float("nan"), device="cuda", dtype=dtype)
    fn(x, out)
    err = rel_l2(out, reference(x, wt, b, stride, padding, dilation, bn))
    tol = TOL["int8" if quant == "int8" else dtype_name]
    return {
        "case": str(case),
        "rel_l2": err,
        "tol": tol,
        "ok": err <= tol and not out.isnan().any().item(),
    }


def _worker_init():
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")


def phase1(log):
    import multiprocessing as mp

    tasks = []
    with ProcessPoolExecutor(
        max_workers=12, mp_context=mp.get_context("spawn"), initializer=_worker_init
    ) as pool:
        # Each task compiles every tile of one read path; the main process then finds them all
        # in Triton's on-disk cache when its auto selection times them.
        for layer in INT8_LAYERS:
            tasks.append(pool.submit(warm_triton, layer, "auto", "int8"))
        for layer in LAYERS:
            for path in layer[9]:
                tasks.append(pool.submit(warm_triton, layer, path, "none"))
        for layer in LAYERS:
            tasks.append(pool.submit(warm_compile, layer))
        for case in ODD:
            tasks.append(pool.submit(check_odd, case))
        results = []
        for task in tasks:
            try:
                results.append(task.result())
            except Exception as exc:  # report and go on: one broken variant must not hide the rest
                results.append({"error": repr(exc)[:400]})
            log(json.dumps(results[-1]))
    return results


def bench(fn) -> float:
    import triton.testing

    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def graph_ms(fn) -> float:
    """GPU-only time: fn captured in a CUDA graph, replays timed by do_bench (L2 flushed)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return bench(graph.replay)


def cpu_us(fn, calls: int = 50) -> float:
    """Host time per call with the GPU queue not yet full: the launch overhead."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    elapsed = time.perf_counter() - t0
    torch.cuda.synchronize()
    return elapsed / calls * 1e6


def bench_layer(layer, compile_times) -> dict:
    name, n, c, h, w, cout, k, s, p, _paths = layer
    x, wt, b, stride, padding = make_layer(layer, seed=2)
    oh = (h + 2 * p - k) // s + 1
    flop = 2.0 * n * oh * oh * cout * c * k * k
    x_cl = x.contiguous(memory_format=torch.channels_last)
    w_cl = wt.contiguous(memory_format=torch.channels_last)
    conv_kw = {"stride": stride, "padding": padding}
    row = {"layer": name, "gflop": flop / 1e9}

    def torch_nchw():
        return F.relu(F.conv2d(x, wt, b, **conv_kw))

    def torch_cl():
        return F.relu(F.conv2d(x_cl, w_cl, b, **conv_kw), inplace=True)

    row["torch_nchw"] = bench(torch_nchw)
    row["torch_cl"] = bench(torch_cl)
    row["torch_cl_conv_only"] = bench(lambda: F.conv2d(x_cl, w_cl, b, **conv_kw))
    row["torch_cl_graph"] = graph_ms(torch_cl)
    row["torch_nchw_graph"] = graph_ms(torch_nchw)
    compiled = torch.compile(
        with_own_code(lambda t: F.relu(F.conv2d(t, wt, b, **conv_kw))), dynamic=False
    )
    compiled(x)
    row["compile"] = bench(lambda: compiled(x))
    row["compile_s"] = compile_times.get(name)
    ref = reference(x, wt, b, stride, padding)
    fn = _triton_fn(layer, "auto", "none", x, wt, b, stride, padding)
    out = fn(x)  # first call: times the candidate plans and keeps the fastest
    torch.cuda.synchronize()
    row["triton_err"] = rel_l2(out, ref)
    row["triton"] = bench(lambda: fn(x))
    row["triton_graph"] = graph_ms(lambda: fn(x))
    row["triton_cpu_us"] = cpu_us(lambda: fn(x))
    row["torch_cl_cpu_us"] = cpu_us(torch_cl)
    row["triton_plans"] = {k: round(v, 4) for k, v in fn.timings.items()}
    row["triton_plan"] = next(iter(fn.plans.values())).name
    if layer in INT8_LAYERS:
        fn8 = _triton_fn(layer, "auto", "int8", x, wt, b, stride, padding)
        out = fn8(x)
        torch.cuda.synchronize()
        row["int8_err"] = rel_l2(out, ref)
        row["int8"] = bench(lambda: fn8(x))
        row["int8_graph"] = graph_ms(lambda: fn8(x))
        row["int8_plans"] = {k: round(v, 4) for k, v in fn8.timings.items()}
        row["int8_plan"] = next(iter(fn8.plans.values())).name
    return row


def phase2(log, compile_times):
    rows, start = [], time.time()
    for layer in LAYERS:
        if time.time() - start > 170:  # stay inside the device call's time limit
            log(f"{layer[0]} skipped: out of time")
            continue
        try:
            rows.append(bench_layer(layer, compile_times))
        except Exception as exc:
            log(f"{layer[0]} failed: {exc!r}"[:500])
            continue
        log(json.dumps(rows[-1]))
    return rows


def calibrate(log) -> None:
    """Ceilings on this GPU right now: cuBLAS fp16 GEMM and a device copy."""
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
    ms = bench(lambda: a @ a)
    src = torch.empty(1 << 30, device="cuda", dtype=torch.uint8)
    dst = torch.empty_like(src)
    copy_ms = bench(lambda: dst.copy_(src))
    log(
        f"calibration: fp16 GEMM 8192^3 {2 * 8192**3 / ms / 1e9:.0f} TFLOP/s, "
        f"copy {2 * src.numel() / copy_ms / 1e9:.2f} TB/s"
    )


def fast_launch_self_check(log) -> None:
    """The direct relaunch of compiled kernels must match Triton's normal path; else turn it off."""
    from opbench.kernels import conv as conv_module

    layer = ("check", 4, 32, 15, 17, 48, 3, 1, 1, None)
    x, wt, b, stride, padding = make_layer(layer, seed=3)
    fn = _triton_fn(layer, "auto", "none", x, wt, b, stride, padding)
    try:
        outs = [fn(x).clone() for _ in range(3)]  # the 2nd and 3rd calls use the direct relaunch
        ref = reference(x, wt, b, stride, padding)
        errs = [rel_l2(o, ref) for o in outs]
        ok = all(e < 5e-3 for e in errs)
    except Exception as exc:
        errs, ok = repr(exc), False
    log(f"fast launch self-check: {'ok' if ok else 'FAILED, turned off'} {errs}")
    if not ok:
        conv_module.FAST_LAUNCH = False


def geomean(values):
    values = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def summarize(rows, log):
    log(
        "\nfp16 (int8 last two columns), ms = do_bench median with L2 flush; graph = same fn replayed "
        "from a CUDA graph (GPU time only). Speedups = torch time / triton time."
    )
    head = (
        f"{'layer':21} {'GFLOP':>5} {'nchw':>6} {'cl':>6} {'compile':>7} {'triton':>6} {'TF/s':>4} "
        f"{'xNCHW':>5} {'xCL':>5} {'xComp':>5} | {'cl_g':>6} {'tri_g':>6} {'xCL_g':>5} | "
        f"{'int8':>6} {'i8xCL':>5} {'i8_g':>6} {'i8xCLg':>6}"
    )
    log(head)
    ratios = {k: [] for k in ("nchw", "cl", "compile", "cl_graph", "int8_cl", "int8_cl_graph")}
    for r in rows:
        t = r["triton"]
        ratios["nchw"].append(r["torch_nchw"] / t)
        ratios["cl"].append(r["torch_cl"] / t)
        ratios["compile"].append(r["compile"] / t)
        ratios["cl_graph"].append(r["torch_cl_graph"] / r["triton_graph"])
        i8, i8g = r.get("int8"), r.get("int8_graph")
        if i8:
            ratios["int8_cl"].append(r["torch_cl"] / i8)
            ratios["int8_cl_graph"].append(r["torch_cl_graph"] / i8g)
        nan = float("nan")
        log(
            f"{r['layer']:21} {r['gflop']:5.2f} {r['torch_nchw']:6.4f} {r['torch_cl']:6.4f} "
            f"{r['compile']:7.4f} {t:6.4f} {r['gflop'] / t:4.0f} {r['torch_nchw'] / t:5.2f} "
            f"{r['torch_cl'] / t:5.2f} {r['compile'] / t:5.2f} | {r['torch_cl_graph']:6.4f} "
            f"{r['triton_graph']:6.4f} {r['torch_cl_graph'] / r['triton_graph']:5.2f} | "
            f"{(i8 or nan):6.4f} {(r['torch_cl'] / i8 if i8 else nan):5.2f} {(i8g or nan):6.4f} "
            f"{(r['torch_cl_graph'] / i8g if i8g else nan):6.2f}"
        )
    log("geomean speedups: " + ", ".join(f"{k}={geomean(v):.3f}" for k, v in ratios.items()))


def main() -> None:
    out_dir = os.environ.get("OUT", ".")
    log_lines = []

    def log(line: str) -> None:
        print(line, flush=True)
        log_lines.append(line)

    log(f"device {torch.cuda.get_device_name()} torch {torch.__version__}")
    torch.backends.cudnn.benchmark = True
    t0 = time.time()
    calibrate(log)
    warm = phase1(log)
    log(f"phase 1 took {time.time() - t0:.0f}s")
    compile_times = {r["layer"]: r["compile_s"] for r in warm if "compile_s" in r}
    fast_launch_self_check(log)
    rows = phase2(log, compile_times)
    log(f"phase 2 done at {time.time() - t0:.0f}s")
    summarize(rows, log)
    with open(os.path.join(out_dir, "conv_results.json"), "w") as f:
        json.dump({"warm": warm, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
