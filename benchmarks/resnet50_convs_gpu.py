"""ResNet-50's fused conv groups at batch 32 on the GPU: each checked against float64, then
timed in Triton (this tree's kernels and, optionally, older copies) beside cuDNN.

Usage (GPU machine, repository root; writes $OUT/convs.json and the tuned plans when $OUT is set):
    PYTHONPATH=. PYTHONUNBUFFERED=1 python3 benchmarks/resnet50_convs_gpu.py [--old DIR] [--only a,b]
CPU check of the plumbing (interpreter, tiny shapes; the numbers mean nothing):
    PYTHONPATH=. python3 benchmarks/resnet50_convs_gpu.py --tiny

Cases: the 16 distinct 1x1 conv shapes of ResNet-50 (torchvision v1.5) at batch 32, each as its
group runs in the network (conv → folded batchnorm [→ + skip] [→ relu]), plus the four 3x3
shapes and the 7x7 stem. For each: the fused group through `build_conv2d` (path "auto": every
candidate plan tuned, as a network run does), then medians of opbench's timer (benchmarks/timing.py; L2
flushed before every call). torch columns are cuDNN's conv alone (NCHW, and channels_last with
weights to match; cudnn.benchmark on), the lower bound of what eager torch does for the group.

--old DIR: DIR holds `conv_old.py` (+ its `conv_plans_old.py`): an older conv module (e.g. main's
at 0a40512, before conv_pointwise.py and with M not specialized) timed on the 3x3s, the stem
and the largest 1x1 cases. Each variant tunes with its own plan cache (OPBENCH_CACHE_DIR,
$OUT/plans_<variant>/plans.json: every candidate's time).
"""

from __future__ import annotations

import importlib
import json
import math
import os
import sys
import time
import traceback

SMOKE = "--tiny" in sys.argv
if SMOKE:
    os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from timing import median_ms  # noqa: E402

from opbench.kernels import tuning  # noqa: E402

DEVICE = "cpu" if SMOKE else "cuda"
OUT = os.environ.get("OUT")
BATCH = 1 if SMOKE else 32


OLD_CASES = {"l1_c3", "l2_c3", "l3_c3", "l2b0_down", "s_c3", "s_down"}


def cases() -> list[dict]:
    """(name, C, H, Cout, kernel, stride, padding, residual, relu) of ResNet-50's groups."""
    rows = [
        ("l1_c3", 64, 56, 256, 1, 1, 0, True, True),
        ("l1b0_down", 64, 56, 256, 1, 1, 0, False, False),
        ("l1b0_c1", 64, 56, 64, 1, 1, 0, False, True),
        ("l1_c1", 256, 56, 64, 1, 1, 0, False, True),
        ("l2b0_c1", 256, 56, 128, 1, 1, 0, False, True),
        ("l2_c3", 128, 28, 512, 1, 1, 0, True, True),
        ("l2_c1", 512, 28, 128, 1, 1, 0, False, True),
        ("l3b0_c1", 512, 28, 256, 1, 1, 0, False, True),
        ("l3_c3", 256, 14, 1024, 1, 1, 0, True, True),
        ("l3_c1", 1024, 14, 256, 1, 1, 0, False, True),
        ("l4b0_c1", 1024, 14, 512, 1, 1, 0, False, True),
        ("l4_c3", 512, 7, 2048, 1, 1, 0, True, True),
        ("l4_c1", 2048, 7, 512, 1, 1, 0, False, True),
        ("l2b0_down", 256, 56, 512, 1, 2, 0, False, False),
        ("l3b0_down", 512, 28, 1024, 1, 2, 0, False, False),
        ("l4b0_down", 1024, 14, 2048, 1, 2, 0, False, False),
        ("l1_c2", 64, 56, 64, 3, 1, 1, False, True),
        ("l2_c2", 128, 28, 128, 3, 1, 1, False, True),
        ("l3_c2", 256, 14, 256, 3, 1, 1, False, True),
        ("l4_c2", 512, 7, 512, 3, 1, 1, False, True),
        ("stem", 3, 224, 64, 7, 2, 3, False, True),
    ]
    if SMOKE:  # tiny stand-ins with the same structure
        rows = [("s_c3", 16, 6, 20, 1, 1, 0, True, True), ("s_down", 16, 7, 24, 1, 2, 0, False, False),
                ("s_c2", 16, 5, 16, 3, 1, 1, False, True)]  # fmt: skip
    keys = ("name", "c", "h", "cout", "k", "stride", "pad", "residual", "relu")
    return [dict(zip(keys, r, strict=True)) for r in rows]


def make(case: dict, gen: torch.Generator) -> dict:
    n, c, h, cout, k = BATCH, case["c"], case["h"], case["cout"], case["k"]
    x = torch.randn((n, c, h, h), generator=gen).to(DEVICE, torch.float16)
    w = (torch.randn((cout, c, k, k), generator=gen) / math.sqrt(c * k * k)).to(
        DEVICE, torch.float16
    )
    bn = {"running_mean": torch.randn(cout, generator=gen) * 0.1,
          "running_var": torch.rand(cout, generator=gen) + 0.5,
          "weight": torch.rand(cout, generator=gen) + 0.5, "bias": torch.randn(cout, generator=gen) * 0.1,
          "eps": 1e-5}  # fmt: skip
    bn = {key: v.to(DEVICE) if torch.is_tensor(v) else v for key, v in bn.items()}
    oh = (h + 2 * case["pad"] - k) // case["stride"] + 1
    skip = (
        torch.randn((n, cout, oh, oh), generator=gen).to(DEVICE, torch.float16)
        if case["residual"]
        else None
    )
    return {"x": x, "w": w, "bn": bn, "skip": skip, "oh": oh}


def reference(case: dict, t: dict) -> torch.Tensor:
    """The unfused chain in float64 (1x1 as an einsum)."""
    bn = t["bn"]
    if case["k"] == 1:
        xs = t["x"][:, :, :: case["stride"], :: case["stride"]].double()
        y = torch.einsum("oc,nchw->nohw", t["w"][:, :, 0, 0].double(), xs)
    else:
        y = F.conv2d(t["x"].double(), t["w"].double(), stride=case["stride"], padding=case["pad"])
    scale = bn["weight"].double() / torch.sqrt(bn["running_var"].double() + bn["eps"])
    y = (y - bn["running_mean"].double()[None, :, None, None]) * scale[None, :, None, None]
    y = y + bn["bias"].double()[None, :, None, None]
    if t["skip"] is not None:
        y = y + t["skip"].double()
    return F.relu(y) if case["relu"] else y


def bench(fn) -> float:
    return median_ms(fn, DEVICE, tiny=SMOKE)


def floors(case: dict, t: dict) -> dict:
    n, c, cout, oh, k = BATCH, case["c"], case["cout"], t["oh"], case["k"]
    flops = 2 * n * oh * oh * cout * c * k * k
    # x once (a strided 1x1 needs only the pixels it reads), out once, the skip once, w once
    x_bytes = t["x"].numel() * 2 if k > 1 else n * c * oh * oh * 2
    out_bytes = n * cout * oh * oh * 2 * (2 if case["residual"] else 1)
    return {"gflop": flops / 1e9, "mbytes": (x_bytes + out_bytes + t["w"].numel() * 2) / 1e6}


def run_variant(
    module_name: str, case: dict, t: dict, ref: torch.Tensor, only_path: str = "auto"
) -> dict:
    mod = importlib.import_module(module_name)
    conv = mod.build_conv2d(t["w"], None, stride=case["stride"], padding=case["pad"], dilation=1,
                            activation="relu" if case["relu"] else "none", batchnorm=t["bn"],
                            path=only_path)  # fmt: skip
    out = torch.full(ref.shape, float("nan"), dtype=torch.float16, device=DEVICE)
    start = time.perf_counter()
    bound = conv.bind(t["x"], out, residual=t["skip"])
    tune_s = time.perf_counter() - start
    bound.launch()
    if DEVICE == "cuda":
        torch.cuda.synchronize()
    unwritten = int(torch.isnan(out).sum())
    rel = float((out.double() - ref).norm() / ref.norm())
    ms = bench(bound.launch)
    return {"ms": ms, "rel_l2": rel, "unwritten": unwritten, "ok": unwritten == 0 and rel < 5e-3,
            "plan": [c.config.to_json() for c in bound.choices][:1], "tune_s": round(tune_s, 2)}  # fmt: skip


def torch_times(case: dict, t: dict) -> dict:
    x, w = t["x"], t["w"]
    geo = {"stride": case["stride"], "padding": case["pad"]}
    xc, wc = (
        x.contiguous(memory_format=torch.channels_last),
        w.contiguous(memory_format=torch.channels_last),
    )
    return {"torch_nchw_conv_ms": bench(lambda: F.conv2d(x, w, **geo)),
            "torch_cl_conv_ms": bench(lambda: F.conv2d(xc, wc, **geo))}  # fmt: skip


def calibrate() -> dict:
    if SMOKE:
        return {}
    a = torch.randn(8192, 8192, device=DEVICE, dtype=torch.float16)
    mm = median_ms(lambda: a @ a, DEVICE)
    src = torch.empty(256 * 2**20, device=DEVICE, dtype=torch.uint8)
    dst = torch.empty_like(src)
    cp = median_ms(lambda: dst.copy_(src), DEVICE)
    return {"cublas_tflops": 2 * 8192**3 / mm / 1e9, "copy_tbps": 2 * src.numel() / cp / 1e9}


def with_cache(variant: str, fn):
    """Run fn with the plan cache of `variant` (fresh in-memory choices)."""
    root = os.path.join(OUT or "/tmp", f"plans_{variant}")
    os.environ["OPBENCH_CACHE_DIR"] = root
    tuning.clear_memory()
    return fn()


def main() -> None:
    args = sys.argv[1:]
    old_dir = args[args.index("--old") + 1] if "--old" in args else None
    only = args[args.index("--only") + 1].split(",") if "--only" in args else None
    variants = [("new", "opbench.kernels.conv.conv")]
    if old_dir:
        sys.path.insert(0, old_dir)
        variants.append(("old", "conv_old"))
    if DEVICE == "cuda":
        torch.backends.cudnn.benchmark = True
    results = {"device": torch.cuda.get_device_name() if DEVICE == "cuda" else "cpu",
               "batch": BATCH, "calibration": calibrate(), "cases": {}}  # fmt: skip
    print(json.dumps(results["calibration"]))
    gen = torch.Generator().manual_seed(0)
    for case in cases():
        if only and case["name"] not in only:
            continue
        try:
            t = make(case, gen)
            ref = reference(case, t)
            row = {**case, **floors(case, t), **torch_times(case, t)}
            # The 3x3s and the stem: the path each won in the network (nhwc, gather), so that
            # compiles stay few; old vs new there is M's alignment specialization alone.
            path = "auto" if case["k"] == 1 else "gather" if case["c"] < 16 else "nhwc"
            for variant, module in variants:
                if variant == "old" and case["k"] == 1 and case["name"] not in OLD_CASES:
                    continue  # the old 1x1s on the largest cases only (compile time)
                run = lambda m=module: run_variant(m, case, t, ref, path)  # noqa: E731
                row[variant] = with_cache(variant, run)
            results["cases"][case["name"]] = row
            summary = {v: (round(row[v]["ms"], 4), row[v]["ok"], short(row[v]["plan"]))
                       for v, _ in variants if v in row}  # fmt: skip
            print(case["name"], round(row["torch_nchw_conv_ms"], 4), round(row["torch_cl_conv_ms"], 4), summary,
                  flush=True)  # fmt: skip
        except Exception:  # one case's failure is reported, the others still run
            traceback.print_exc()
            results["cases"][case["name"]] = {"error": traceback.format_exc()[-2000:]}
        finally:
            if DEVICE == "cuda":
                torch.cuda.empty_cache()
    if OUT:
        os.makedirs(OUT, exist_ok=True)
        with open(os.path.join(OUT, "convs.json"), "w") as f:
            json.dump(results, f, indent=1, default=str)
    print(table(results, [v for v, _ in variants]))


def short(plan: list[dict]) -> str:
    """PATH and tile of a plan: (BLOCK_M|O, BLOCK_N|P, BLOCK_K) warps/stages."""
    if not plan:
        return "-"
    meta = plan[0]["meta"]
    tile = [
        meta.get(k, meta.get(alt))
        for k, alt in (("BLOCK_M", "BLOCK_O"), ("BLOCK_N", "BLOCK_P"), ("BLOCK_K", None))
    ]
    return f"{meta.get('PATH')} {tuple(tile)} {plan[0]['num_warps']}w{plan[0]['num_stages']}s"


def table(results: dict, variants: list[str]) -> str:
    bw = results["calibration"].get("copy_tbps", float("nan"))
    lines = [f"{results['device']} batch {results['batch']}; copy {bw:.2f} TB/s; ms (median, opbench's timer)",
             "case | GFLOP | MB | floor ms | cudnn NCHW | cudnn CL | " + " | ".join(variants) + " | new TFLOP/s | new % of floor | new plan"]  # fmt: skip
    for name, row in results["cases"].items():
        if "error" in row:
            lines.append(f"{name} | error")
            continue
        floor = row["mbytes"] / 1e3 / bw if bw == bw else float("nan")
        new = row["new"]["ms"]
        cols = " | ".join(
            f"{row[v]['ms']:.4f}{'' if row[v]['ok'] else ' FAIL'}" if v in row else "-"
            for v in variants
        )
        lines.append(f"{name} | {row['gflop']:.2f} | {row['mbytes']:.1f} | {floor:.4f} | {row['torch_nchw_conv_ms']:.4f} | "
                     f"{row['torch_cl_conv_ms']:.4f} | {cols} | {row['gflop'] / new:.0f} | {100 * floor / new:.0f}% | "
                     f"{short(row['new']['plan'])}")  # fmt: skip
    return "\n".join(lines)


if __name__ == "__main__":
    main()
