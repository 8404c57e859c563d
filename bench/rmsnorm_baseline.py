"""Is opbench's torch rmsnorm baseline PyTorch's own fused call, at its speed?

Usage (GPU machine):  python3 bench/rmsnorm_baseline.py [--triton] [--json FILE]

The rmsnorm layer of a LLaMA-7B-shaped block (batch 2 × sequence 2048 × hidden 4096, the
shape of issue #15), in bfloat16 and float16, timed two ways on the same input and weight:
1. through `opbench run`'s own path (build → bind → check → time, default timing: 5 rounds of
   100 ms, L2 flushed before each call) on the torch backend;
2. `F.rms_norm(x, (4096,), weight, eps)` called directly and timed by
   `triton.testing.do_bench(..., return_mode="median")` (which also flushes L2).
Target (issue #15): (1) within 10% of (2). With --triton, the triton backend's figure is shown
beside them. Exit 1 when a dtype misses the target.
"""

from __future__ import annotations

import argparse
import json
import sys

import torch
import torch.nn.functional as F
import triton

from opbench.backends.registry import get_backend
from opbench.pipeline import ModelData, RunOptions, WorkItem, measure_item
from opbench.results.model import Status
from opbench.spec.load import load_suite_text

BATCH, SEQUENCE, HIDDEN = 2, 2048, 4096
TARGET = 0.10
SUITE = """
name: rmsnorm_baseline
models:
  - name: llama7b_block_{dtype}
    batch: {batch}
    input: [{sequence}, {hidden}]
    dtype: {dtype}
    layers:
      - {{name: attn_norm, op: rmsnorm}}
"""


def opbench_median(suite, backend: str) -> tuple[float | None, str]:
    model = suite.models[0]
    result = measure_item(
        WorkItem(model, (0,), backend),
        ModelData(suite, model, "cuda"),
        get_backend(backend),
        RunOptions(device="cuda"),
    )
    if result.status != Status.OK or not result.correct:
        return None, f"{result.status}: {result.message}"
    return result.median_ms, result.note or ""


def direct_median(suite) -> float:
    """F.rms_norm on the very input and weight opbench's torch layer gets."""
    model = suite.models[0]
    layer = model.layers[0]
    data = ModelData(suite, model, "cuda")
    x = data.input(0)
    weight = data.weights(0)["weight"].to(x.dtype)
    eps = layer.params["eps"]
    F.rms_norm(x, (HIDDEN,), weight, eps)
    torch.cuda.synchronize()
    return triton.testing.do_bench(
        lambda: F.rms_norm(x, (HIDDEN,), weight, eps), warmup=25, rep=100, return_mode="median"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--triton", action="store_true", help="also time the triton backend")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("error: this benchmark needs a GPU", file=sys.stderr)
        return 2
    rows, missed = [], False
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}")
    print(f"rmsnorm {BATCH}x{SEQUENCE}x{HIDDEN}")
    header = f"{'dtype':9s} {'opbench torch ms':>17s} {'do_bench F.rms_norm ms':>23s} {'diff':>7s}"
    print(header + ("  triton ms  × F.rms_norm" if args.triton else ""))
    for dtype in ("bfloat16", "float16"):
        text = SUITE.format(dtype=dtype, batch=BATCH, sequence=SEQUENCE, hidden=HIDDEN)
        suite = load_suite_text(text, "rmsnorm_baseline.yaml")
        ours, why = opbench_median(suite, "torch")
        direct = direct_median(suite)
        if ours is None:
            print(f"{dtype:9s} torch baseline failed: {why}")
            missed = True
            continue
        diff = (ours - direct) / direct
        missed |= abs(diff) > TARGET
        row = {"dtype": dtype, "opbench_torch_ms": ours, "do_bench_f_rms_norm_ms": direct}
        line = f"{dtype:9s} {ours:17.4f} {direct:23.4f} {100 * diff:6.1f}%"
        if args.triton:
            tri, tri_note = opbench_median(suite, "triton")
            row["opbench_triton_ms"] = tri
            line += f"  {tri:9.4f}  {direct / tri:10.2f}×" if tri else f"  {tri_note}"
        rows.append(row)
        print(line)
    verdict = "missed" if missed else "met"
    print(f"target: opbench's torch baseline within {TARGET:.0%} of F.rms_norm: {verdict}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"rows": rows, "target": TARGET, "met": not missed}, handle, indent=1)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
