"""GPU check and timing of opbench's Triton implicit-GEMM conv2d against torch.

Run on the GPU machine from the repository root:

    PYTHONPATH=. PYTHONUNBUFFERED=1 python3 bench/conv.py 2>&1 | tee $OUT/log.txt

Phase 1 (worker processes, in parallel): every Triton variant and every torch.compile graph is
compiled once and checked against a float64 reference on fresh random data; odd shapes too.
Compiled kernels land in the on-disk caches, so phase 2 does not pay compile time.
Phase 2 (this process, alone on the GPU): triton.testing.do_bench (warmup 25 ms, rep 100 ms,
median, L2 flushed before each rep) of torch NCHW conv+bias+relu, torch channels_last (input and
weight already channels_last), torch.compile (default mode), and Triton (auto path plus one
alternative read path), fp16; then int8 Triton for the C, Cout >= 128 layers.
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

# (name, batch, C, H, W, Cout, kernel, stride, padding, alternative triton path)
LAYERS = [
    ("c3x3_64_56", 32, 64, 56, 56, 64, 3, 1, 1, "direct"),
    ("c3x3_256_14", 32, 256, 14, 14, 256, 3, 1, 1, "direct"),  # = ResNet-50 3x3 256 at 14^2
    ("stem7x7_s2", 64, 3, 224, 224, 64, 7, 2, 3, None),
    ("r50_1x1_64_256_56", 32, 64, 56, 56, 256, 1, 1, 0, "nhwc"),
    ("r50_3x3_128_28", 32, 128, 28, 28, 128, 3, 1, 1, "direct"),
    ("r50_1x1_512_128_28", 32, 512, 28, 28, 128, 1, 1, 0, "nhwc"),
    ("r50_1x1_1024_256_14", 32, 1024, 14, 14, 256, 1, 1, 0, "nhwc"),
    ("r50_3x3_512_7", 32, 512, 7, 7, 512, 3, 1, 1, "direct"),
    ("r50_1x1_2048_512_7", 32, 2048, 7, 7, 512, 1, 1, 0, "nhwc"),
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
    compiled = torch.compile(lambda t: F.relu(F.conv2d(t, wt, b, stride=stride, padding=padding)))
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
        for layer in LAYERS:
            tasks.append(pool.submit(warm_triton, layer, "auto", "none"))
            if layer[9]:
                tasks.append(pool.submit(warm_triton, layer, layer[9], "none"))
            tasks.append(pool.submit(warm_compile, layer))
        for layer in INT8_LAYERS:
            tasks.append(pool.submit(warm_triton, layer, "auto", "int8"))
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


def bench_layer(layer, compile_times) -> dict:
    from opbench.kernels.conv import _conv2d_kernel, nchw_to_nhwc

    name, n, c, h, w, cout, k, s, p, alt = layer
    x, wt, b, stride, padding = make_layer(layer, seed=2)
    oh = (h + 2 * p - k) // s + 1
    flop = 2.0 * n * oh * oh * cout * c * k * k
    x_cl = x.contiguous(memory_format=torch.channels_last)
    w_cl = wt.contiguous(memory_format=torch.channels_last)
    conv_kw = {"stride": stride, "padding": padding}
    row = {"layer": name, "gflop": flop / 1e9}
    row["torch_nchw"] = bench(lambda: F.relu(F.conv2d(x, wt, b, **conv_kw)))
    row["torch_cl"] = bench(lambda: F.relu(F.conv2d(x_cl, w_cl, b, **conv_kw), inplace=True))
    row["torch_cl_conv_only"] = bench(lambda: F.conv2d(x_cl, w_cl, b, **conv_kw))
    compiled = torch.compile(lambda t: F.relu(F.conv2d(t, wt, b, **conv_kw)))
    compiled(x)
    row["compile"] = bench(lambda: compiled(x))
    row["compile_s"] = compile_times.get(name)
    ref = reference(x, wt, b, stride, padding)
    for path in ["auto"] + ([alt] if alt else []):
        fn = _triton_fn(layer, path, "none", x, wt, b, stride, padding)
        out = fn(x)
        torch.cuda.synchronize()
        row[f"triton_{path}_err"] = rel_l2(out, ref)
        row[f"triton_{path}"] = bench(lambda fn=fn: fn(x))
        row[f"triton_{path}_cfg"] = str(_conv2d_kernel.best_config)
    if c >= 16 and not (k == 1 and s == 1):
        row["transpose_only"] = bench(lambda: nchw_to_nhwc(x))
    if layer in INT8_LAYERS:
        fn8 = _triton_fn(layer, "auto", "int8", x, wt, b, stride, padding)
        out = fn8(x)
        torch.cuda.synchronize()
        row["int8_err"] = rel_l2(out, ref)
        row["int8"] = bench(lambda: fn8(x))
        row["int8_cfg"] = str(_conv2d_kernel.best_config)
    return row


def phase2(log, compile_times):
    rows = []
    for layer in LAYERS:
        try:
            rows.append(bench_layer(layer, compile_times))
        except Exception as exc:
            log(f"{layer[0]} failed: {exc!r}"[:500])
            continue
        log(json.dumps(rows[-1]))
    return rows


def geomean(values):
    values = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def summarize(rows, log):
    log("\nfp16, ms (median); TFLOP/s of Triton's best path; speedup = torch time / triton time")
    log(
        f"{'layer':22} {'GFLOP':>6} {'nchw':>7} {'cl':>7} {'cl_conv':>7} {'compile':>7} {'tri_auto':>8} "
        f"{'tri_alt':>8} {'best':>7} {'TF/s':>6} {'vsNCHW':>6} {'vsCL':>5} {'vsComp':>6} {'int8':>7} {'i8vsCL':>6}"
    )
    ratios = {"nchw": [], "cl": [], "compile": [], "int8_cl": [], "best_vs_cl": []}
    for r in rows:
        alts = [
            key
            for key in r
            if key.startswith("triton_") and key.count("_") == 1 and key != "triton_auto"
        ]
        alt = r[alts[0]] if alts else None
        best = min(t for t in (r["triton_auto"], alt) if t)
        ratios["best_vs_cl"].append(r["torch_cl"] / best)
        best = r["triton_auto"]
        ratios["nchw"].append(r["torch_nchw"] / best)
        ratios["cl"].append(r["torch_cl"] / best)
        ratios["compile"].append(r["compile"] / best)
        i8 = r.get("int8")
        if i8:
            ratios["int8_cl"].append(r["torch_cl"] / i8)
        log(
            f"{r['layer']:22} {r['gflop']:6.2f} {r['torch_nchw']:7.4f} {r['torch_cl']:7.4f} "
            f"{r['torch_cl_conv_only']:7.4f} {r['compile']:7.4f} {r['triton_auto']:8.4f} "
            f"{(alt or float('nan')):8.4f} {best:7.4f} {r['gflop'] / best:6.0f} {r['torch_nchw'] / best:6.2f} "
            f"{r['torch_cl'] / best:5.2f} {r['compile'] / best:6.2f} {(i8 or float('nan')):7.4f} "
            f"{(r['torch_cl'] / i8 if i8 else float('nan')):6.2f}"
        )
    log(
        "geomean speedups (triton auto): "
        + ", ".join(f"{k}={geomean(v):.3f}" for k, v in ratios.items())
    )


def main() -> None:
    out_dir = os.environ.get("OUT", ".")
    log_lines = []

    def log(line: str) -> None:
        print(line, flush=True)
        log_lines.append(line)

    log(f"device {torch.cuda.get_device_name()} torch {torch.__version__}")
    torch.backends.cudnn.benchmark = True
    t0 = time.time()
    warm = phase1(log)
    log(f"phase 1 took {time.time() - t0:.0f}s")
    compile_times = {r["layer"]: r["compile_s"] for r in warm if "compile_s" in r}
    rows = phase2(log, compile_times)
    log(f"phase 2 done at {time.time() - t0:.0f}s")
    summarize(rows, log)
    with open(os.path.join(out_dir, "conv_results.json"), "w") as f:
        json.dump({"warm": warm, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
