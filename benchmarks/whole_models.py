"""Whole models end to end, without the per-layer timing of `opbench run`: for networks of a
hundred layers and more (ResNet-50: 175 layers, 57 fused groups on triton) where per-layer
timing on every backend, and torch.compile of every layer, would take most of a GPU session.

For each asked model and backend: every group is built (triton tunes at its first bind, as in a
run), then the pipeline's own end-to-end step times the whole forward eagerly and as a CUDA
graph, checks every model output against the float64/float32 reference of the whole graph, and
records the forward's peak device memory (pipeline/end_to_end.py, the same code `opbench run`
uses). torch.compile backends give only their graph figure here (the whole forward compiled in
the backend's graph mode: reduce-overhead, or max-autotune); their eager row would be per-layer
compiled layers, which this script does not build.

    python3 benchmarks/whole_models.py suites/cnn.yaml -m 'resnet50[batch=1]' \
        -b torch -b triton -b torch-compile-max-autotune --out results.json

`--rest-on torch` runs, on a peer backend that takes only quantized linears (torch-fp8,
torch-int8), every layer without `quant` on torch eager instead: the whole block as a PyTorch
user runs it with `torch._scaled_mm` / `torch._int_mm` linears (the row's backend reads
`torch-fp8+torch`, and its record names those layers in `rest_layers`). Only unquantized
layers are handed over: a quantized linear the peer refuses stops the script, never runs
unquantized under the peer's name.

    python3 benchmarks/whole_models.py suites/llama_quant.yaml -m llama7b_prefill_fp8 \
        -b torch -b triton -b torch-fp8 --rest-on torch --out results.json

Prints one table (median ms, × torch eager in the same mode, peak memory, correctness) and
writes every row as JSON.

CPU check of the plumbing (Triton interpreter, quickstart's mlp on torch and triton, one round;
the numbers mean nothing):  PYTHONPATH=. python3 benchmarks/whole_models.py --tiny
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
if "--tiny" in sys.argv:  # before the first `import triton`
    os.environ["TRITON_INTERPRET"] = "1"

from opbench.backends.base import Unsupported  # noqa: E402
from opbench.backends.registry import all_backends  # noqa: E402
from opbench.pipeline.data import ModelData  # noqa: E402
from opbench.pipeline.end_to_end import time_end_to_end  # noqa: E402
from opbench.pipeline.options import RunOptions, default_device, prepare_device  # noqa: E402
from opbench.spec.load import load_suite  # noqa: E402

COMPILED = ("torch-compile", "torch-compile-max-autotune")


def build_all(backend, model, data, device: str, rest=None) -> tuple[dict, float, float, list]:
    """Every group of the backend's plan built and bound once (tuning happens at the first
    bind): the built dict, build seconds, tuning seconds reported by the backend, and the
    layers built on `rest` instead (unquantized layers `backend` refuses; none without it)."""
    import torch

    built, rest_layers = {}, []
    start = time.perf_counter()
    tuning = 0.0
    for group in backend.plan(model):
        layers = [model.layers[i] for i in group]
        weights = [data.weights(i) for i in group]
        try:
            made = backend.build(layers, weights, device)
        except Unsupported:
            if rest is None or any(layer.quant != "none" for layer in layers):
                raise
            made = rest.build(layers, weights, device)
            rest_layers += [layer.name for layer in layers]
        made.bind_input(*made.prepared(data.group_inputs(group))).launch()  # tune now
        tuning += made.tuning_s or 0.0
        built[tuple(group)] = made
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return built, time.perf_counter() - start, tuning, rest_layers


def eager_layers(model, data, device: str) -> dict:
    """torch eager's layers: what a compile backend's eager row would need, never timed here."""
    torch_backend = all_backends()["torch"]
    return {
        (i,): torch_backend.build([layer], [data.weights(i)], device)
        for i, layer in enumerate(model.layers)
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("suite", nargs="?")
    parser.add_argument("-m", "--model", action="append")
    parser.add_argument("-b", "--backend", action="append")
    parser.add_argument("--tiny", action="store_true",
                        help="quickstart's mlp on the CPU, torch and triton, one round")  # fmt: skip
    parser.add_argument("--device", default=None)
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--conv-autotune", choices=("all", "aten"), default="all",
                        help="aten: Inductor's max-autotune tries no Triton conv templates "
                        "(cuDNN convs; GEMMs still autotuned), to fit a session")  # fmt: skip
    parser.add_argument("--rest-on", choices=("torch",), default=None,
                        help="layers without `quant` that a backend refuses run on torch eager "
                        "(a quantized-linear peer's whole block: torch-fp8+torch)")  # fmt: skip
    args = parser.parse_args()
    if args.tiny:
        args.suite = args.suite or str(ROOT / "suites" / "quickstart.yaml")
        args.model, args.backend = args.model or ["mlp"], args.backend or ["torch", "triton"]
        args.device, args.rounds = "cpu", 1
    if not (args.suite and args.model and args.backend):
        parser.error("give SUITE, -m MODEL and -b BACKEND (or --tiny)")
    if args.conv_autotune == "aten":
        import torch._inductor.config as inductor_config

        inductor_config.max_autotune_conv_backends = "ATEN"
    device = args.device or default_device()
    prepare_device(device)
    suite = load_suite(args.suite)
    backends = all_backends()
    options = RunOptions(device=device, rounds=args.rounds)
    rows = []
    for name in args.model:
        model = suite.model(name)
        data = ModelData(suite, model, device)
        for backend_name in args.backend:
            backend = backends[backend_name]
            start = time.perf_counter()
            rest_layers: list = []
            if backend_name in COMPILED:
                built, build_s, tune_s = eager_layers(model, data, device), 0.0, 0.0
            else:
                rest = backends[args.rest_on] if args.rest_on else None
                try:
                    built, build_s, tune_s, rest_layers = build_all(backend, model, data, device,
                                                                    rest)  # fmt: skip
                except Unsupported as exc:  # a row that says why, and the other backends run
                    rows.append(dict(model=name, backend=backend_name, mode="eager",
                                     status="unsupported", message=str(exc), median_ms=None,
                                     correct=False, groups=0, tune_s=0.0))  # fmt: skip
                    print(f"{name}: {backend_name}: unsupported: {exc}", flush=True)
                    continue
            for row in time_end_to_end(model, backend_name, built, data, options, backend):
                if backend_name in COMPILED and row.mode == "eager":
                    continue  # torch eager's layers stood in: not this backend's figure
                record = asdict(row)
                if rest_layers:  # not the backend alone: say so wherever the row is shown
                    record.update(backend=f"{backend_name}+{args.rest_on}",
                                  rest_layers=rest_layers)  # fmt: skip
                stats = row.stats
                record.update(groups=len(built), build_s=round(build_s, 2),
                              tune_s=round(tune_s, 2), correct=row.correct,
                              wall_s=round(time.perf_counter() - start, 2),
                              median_ms=stats.median if stats else None)  # fmt: skip
                rows.append(record)
                print(json.dumps({k: record[k] for k in ("model", "backend", "mode", "status",
                                  "median_ms", "peak_bytes", "planned_bytes", "wall_s")}),
                      flush=True)  # fmt: skip
        del data
    print_table(rows)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1, default=str))
    return 0


def print_table(rows: list[dict]) -> None:
    eager_torch = {(r["model"], r["mode"]): r["median_ms"] for r in rows if r["backend"] == "torch"}
    torch_eager_peak = {
        r["model"]: r.get("peak_bytes")
        for r in rows
        if r["backend"] == "torch" and r["mode"] == "eager"
    }
    print(
        "| model | backend | mode | ms | × torch (same mode) | peak MiB | × torch eager peak | correct | groups | tune s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        ms = r["median_ms"]
        base = eager_torch.get((r["model"], r["mode"]))
        peak = r.get("peak_bytes")
        base_peak = torch_eager_peak.get(r["model"])
        correct = r["correct"]
        cells = [
            r["model"], r["backend"], r["mode"],
            f"{ms:.4f}" if ms else r["status"],
            f"{base / ms:.2f}×" if ms and base else "—",
            f"{peak / 2**20:.0f}" if peak else "—",
            f"{peak / base_peak:.2f}×" if peak and base_peak else "—",
            str(correct), str(r["groups"]), str(r["tune_s"]),
        ]  # fmt: skip
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    sys.exit(main())
