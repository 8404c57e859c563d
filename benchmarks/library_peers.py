"""Library peers: each shipped network as its library builds it, timed in the same process
beside the suite's own rows, so that a speed-up is divided by the faster of the two torch peers.

For ResNet-50 and MobileNetV2 (torchvision; channels_last and `cudnn.benchmark` on CUDA, as
PyTorch's performance guide has it), the BERT-base layer (transformers' BertLayer) and the
LLaMA-7B block (transformers' LlamaDecoderLayer): the library module is given the suite's
seeded weights (benchmarks/peer_models.py: every parameter set exactly once), its output is checked
against the float64/float32 reference of the suite's whole graph (the check the suite's rows
pass) and against the suite's torch forward, then timed eager, as a CUDA graph of the eager
call, and under torch.compile(mode="reduce-overhead"). The suite's rows are the pipeline's own
end-to-end rows (pipeline/end_to_end.py): torch eager and CUDA graph, torch-compile's graph,
triton eager and CUDA graph.

    PYTHONPATH=. python3 benchmarks/library_peers.py                 # the four networks, on CUDA
    PYTHONPATH=. python3 benchmarks/library_peers.py --tiny          # shrunk, on the CPU: a test

Prints one table (median ms; "× best peer": triton's CUDA graph against the fastest torch
figure of suite and library in graph/compiled mode, named) and writes every row as JSON to
$OUT/library_peers.json when OUT is set (or --out). A library that is not installed gives a
row that says so; the other rows still run.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(Path(__file__).resolve().parent)]

from peer_models import Missing, peer_for  # noqa: E402
from whole_models import build_all, eager_layers  # noqa: E402

from opbench.backends.base import Unsupported  # noqa: E402
from opbench.backends.registry import all_backends  # noqa: E402
from opbench.measure.check import combine, compare_outputs  # noqa: E402
from opbench.measure.timer import time_callable  # noqa: E402
from opbench.pipeline.data import ModelData  # noqa: E402
from opbench.pipeline.end_to_end import time_end_to_end  # noqa: E402
from opbench.pipeline.measure import timing_for  # noqa: E402
from opbench.pipeline.options import RunOptions, default_device, prepare_device  # noqa: E402
from opbench.pipeline.torch_forward import module_forward  # noqa: E402
from opbench.spec.load import load_suite, load_suite_text  # noqa: E402

NETWORKS = [
    ("suites/cnn.yaml", "resnet50[batch=1]"),
    ("suites/cnn.yaml", "resnet50[batch=32]"),
    ("suites/mobilenet_v2.yaml", "mobilenet_v2[batch=1]"),
    ("suites/mobilenet_v2.yaml", "mobilenet_v2[batch=32]"),
    ("suites/transformer.yaml", "bert_layer"),
    ("suites/llama.yaml", "llama7b_prefill"),
    ("suites/llama_quant.yaml", "llama7b_prefill_fp8"),
]
COMPILED = ("torch-compile", "torch-compile-max-autotune")
# PyTorch's own quantized GEMM of each `quant`: on a quantized model it runs the block as a
# PyTorch user would, its quantized linears on it and every other layer on torch eager
# (whole_models.build_all's `rest`), in the row `torch-fp8+torch`. Not a bf16 peer: its own
# column and ratio, beside × best peer.
QUANT_PEER = {"fp8": "torch-fp8", "int8": "torch-int8"}


def quant_peers(model) -> list[str]:
    """The quantized-GEMM peers of the model's quantized linears, in QUANT_PEER's order."""
    quants = {layer.quant for layer in model.layers}
    return [peer for quant, peer in QUANT_PEER.items() if quant in quants]


def tiny_suite():
    """The four networks shrunk to run in seconds on a CPU, float32, same structures."""
    spec = importlib.util.spec_from_file_location("networks", ROOT / "suites" / "networks.py")
    n = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(n)
    models = [
        n.model_text("resnet50", {"batch": 1, "input": [3, 32, 32]},
                     n.resnet50(blocks=(1, 1, 1, 1), image=32, classes=5)),
        n.model_text("mobilenet_v2", {"batch": 1, "input": [3, 32, 32]},
                     n.mobilenet_v2(image=32, classes=5)),
        n.model_text("bert_layer", {"batch": 2, "input": [7, 32]},
                     n.bert_layer(hidden=32, heads=2, ffn=40)),
        n.model_text("llama7b_prefill", {"batch": 1, "input": [9, 32]},
                     n.llama_prefill_block(hidden=32, heads=2, ffn=48)),
        n.model_text("llama7b_prefill_fp8", {"batch": 1, "input": [9, 32]},
                     n.llama_prefill_block(hidden=32, heads=2, ffn=48, quant="fp8", rope=False)),
    ]  # fmt: skip
    defaults = {"dtype": "float32", "timing": {"warmup_ms": 1, "rep_ms": 5, "rounds": 2}}
    return load_suite_text(n.suite_text("", "tiny_peers", "tiny", defaults, models), "tiny")


def suite_rows(model, data, backend_names, options) -> list[dict]:
    """The pipeline's end-to-end rows of each backend (torch-compile: its graph row only)."""
    backends, rows = all_backends(), []
    for name in backend_names:
        backend = backends[name]
        reason = backend.unavailable_reason(options.device)
        if reason:
            rows.append(dict(source="suite", backend=name, mode="-", ms=None, message=reason))
            continue
        rest = backends["torch"] if name in QUANT_PEER.values() else None
        label = f"{name}+torch" if rest else name
        try:
            if name in COMPILED:
                built = eager_layers(model, data, options.device)
            else:
                built = build_all(backend, model, data, options.device, rest)[0]
        except Unsupported as exc:  # a row that says why; the other backends still run
            rows.append(dict(source="suite", backend=label, mode="-", ms=None, message=str(exc)))
            continue
        for row in time_end_to_end(model, name, built, data, options, backend):
            if name in COMPILED and row.mode == "eager":
                continue  # torch eager's layers stood in: not this backend's figure
            rows.append(dict(source="suite", backend=label, mode=row.mode, ms=row.stats.median if row.stats else None,
                             correct=row.correct, message=row.message, timer=row.timer,
                             samples_ms=[list(r) for r in row.samples_ms],
                             correctness=row.correctness and asdict(row.correctness)))  # fmt: skip
    return rows


def library_rows(model, data, options, compile_: bool) -> list[dict]:
    """The library's module on the suite's weights: checked, then eager / CUDA graph /
    torch.compile times."""
    import torch

    device = options.device
    try:
        peer = peer_for(model, data)
    except Missing as exc:
        return [dict(source="library", backend="-", mode="-", ms=None, message=str(exc))]
    dtype = {"float16": torch.float16, "bfloat16": torch.bfloat16}.get(
        model.layers[0].dtype, torch.float32
    )
    module = peer.module.to(device=device, dtype=dtype)
    x = data.model_inputs()["input"]
    conv = any(layer.op == "conv2d" for layer in model.layers)
    notes = [n for n in (peer.note,) if n]
    if conv and device.startswith("cuda"):
        torch.backends.cudnn.benchmark = True
        module = module.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
        notes.append("channels_last, cudnn.benchmark")
    base = dict(source="library", backend=peer.library, note="; ".join(notes))
    with torch.no_grad():
        out = peer.call(module, x)
        suite_out = module_forward(model, data, device).call()[-1]
    check = _check(model, data, out)
    diff = float((out.float() - suite_out.float()).abs().max())
    base.update(correct=not check.failures, max_abs_vs_suite_torch=diff,
                message="; ".join(check.failures) or None, correctness=asdict(check))  # fmt: skip
    timing = replace(timing_for(model.layers[0], options), cuda_graph=False)

    def eager() -> Any:
        with torch.no_grad():
            return peer.call(module, x)

    rows = [dict(base, mode="eager", **_timed(eager, timing, device, hold=False))]
    if not device.startswith("cuda"):
        return rows
    graph = _timed(eager, replace(timing, cuda_graph=True), device)
    rows.append(dict(base, mode="cuda_graph", **graph))
    if compile_:
        # Fixed inputs, as the suite's compiled forward marks its own (TorchCompile.compile_model):
        # CUDA-graph trees would otherwise copy them into the graph's buffers on every call.
        torch._dynamo.mark_static_address(x)
        compiled = torch.compile(module, mode="reduce-overhead", dynamic=False)

        def step() -> Any:
            torch.compiler.cudagraph_mark_step_begin()
            with torch.no_grad():
                return peer.call(compiled, x)

        step()  # compile and capture before timing
        rows.append(dict(base, mode="compile", **_timed(step, timing, device)))
    return rows


def _check(model, data, out):
    """The library's output against the reference of the suite's whole graph, with the
    tolerance the suite's own end-to-end rows use (the loosest of its layers)."""
    refs, kind = data.model_reference()
    (index,) = model.graph.outputs
    tolerance = max(layer.effective_tolerance for layer in model.layers)
    loose = any(layer.loose_tolerance for layer in model.layers)
    return combine([("out", compare_outputs(out, refs[index], tolerance, kind, loose))])


def _timed(fn, timing, device: str, hold: bool = True) -> dict:
    """The median (ms), every sample by round, and the timer's name."""
    measurement = time_callable(fn, timing, device, hold=hold)
    samples = sorted(t for r in measurement.rounds for t in r)
    rounds = [list(r) for r in measurement.rounds]
    return dict(ms=samples[len(samples) // 2], samples_ms=rounds, timer=measurement.timer)


def end_to_end_rows(records: list[dict]) -> tuple:
    """The timed rows of suite and library as a run's end-to-end rows: the suite's under their
    backend, a library's as `library:<library>` (`library:<library>-compile` for the compiled
    module, in the cuda_graph mode as torch-compile's graph row is)."""
    from opbench.results.model import Correctness, EndToEnd

    rows = []
    for r in records:
        if not r.get("samples_ms"):
            continue
        backend, mode = r["backend"], r["mode"]
        if r["source"] == "library":
            backend = "library:" + backend.split()[0] + ("-compile" if mode == "compile" else "")
            mode = "eager" if mode == "eager" else "cuda_graph"
        corr = r.get("correctness")
        if corr is not None:
            corr = Correctness(
                **{k: tuple(v) if isinstance(v, list) else v for k, v in corr.items()}
            )
        rows.append(EndToEnd(
            r["network"], backend, "ok", tuple(tuple(x) for x in r["samples_ms"]), r["timer"],
            mode=mode, message=r.get("note") or None, correctness=corr,
        ))  # fmt: skip
    return tuple(rows)


def add_to_run(path: Path, records: list[dict]) -> None:
    """The library rows as end-to-end rows of a run.json of the same suites (replacing those
    an earlier call added), so that the run's end-to-end table divides by the best peer; the
    table is printed."""
    from rich.console import Console

    from opbench.report.run_table import end_to_end_table
    from opbench.results.io import read_run, write_run

    run = read_run(path)
    known = {e.model for e in run.end_to_end}
    library = [r for r in records if r["source"] == "library" and r["network"] in known]
    added = end_to_end_rows(library)
    # a second call replaces the rows of the first: one row per model, backend and mode
    new = {(e.model, e.backend, e.mode) for e in added}
    kept = tuple(e for e in run.end_to_end if (e.model, e.backend, e.mode) not in new)
    run = replace(run, end_to_end=kept + added)
    write_run(run, path)
    print(f"{len(added)} library rows added to {path}")
    Console(width=250).print(end_to_end_table(run))


def figure(rows: list[dict], source: str, mode: str, backend: str | None = None) -> float | None:
    """The median of the correct row of `source` (and suite `backend`) in `mode`."""
    for r in rows:
        if (r["source"], r["mode"]) == (source, mode) and backend in (None, r["backend"]):
            if r["ms"] and r.get("correct"):
                return r["ms"]
    return None


def table(name: str, rows: list[dict]) -> list[str]:
    """One line: the suite's and the library's figures and triton's graph × the best peer
    (compare/best_peer.py, as every report has it: the fastest correct torch row in the graph
    mode, suite or library, compiled or not, named)."""
    from opbench.compare.best_peer import vs_best_peer
    from opbench.results.model import RunResult

    cells = {
        "suite torch eager": figure(rows, "suite", "eager", "torch"),
        "suite torch graph": figure(rows, "suite", "cuda_graph", "torch"),
        "suite torch-compile": figure(rows, "suite", "cuda_graph", "torch-compile"),
        "triton graph": figure(rows, "suite", "cuda_graph", "triton"),
        "library eager": figure(rows, "library", "eager"),
        "library graph": figure(rows, "library", "cuda_graph"),
        "library compile": figure(rows, "library", "compile"),
    }
    quant = [r["backend"] for r in rows if r["backend"].endswith("+torch")]
    quant_ms = figure(rows, "suite", "cuda_graph", quant[0]) if quant else None
    triton = cells["triton graph"]
    vs_quant = f"{quant_ms / triton:.2f}× ({quant[0]})" if quant_ms and triton else "—"
    run = RunResult(name, "", "", end_to_end=end_to_end_rows(rows))
    graph = [e for e in run.end_to_end if (e.backend, e.mode) == ("triton", "cuda_graph")]
    best = vs_best_peer(run, graph[0]) if graph else None
    ratio = f"{best[1]:.2f}× ({best[0]})" if best else "—"
    figures = (*cells.values(), quant_ms)
    return [name, *(f"{v:.4f}" if v else "—" for v in figures), vs_quant, ratio]


HEADER = ["network", "suite torch eager", "suite torch graph", "suite torch-compile",
          "triton graph", "library eager", "library graph", "library compile",
          "quantized peer graph", "triton graph × it", "triton graph × best peer"]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="the shrunk networks, on the CPU")
    parser.add_argument("-m", "--model", action="append", help="only these (substring)")
    parser.add_argument("-b", "--backend", action="append", help="the suite's backends")
    parser.add_argument("--no-compile", action="store_true", help="no library compile row")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--run", type=Path, default=None,
                        help="add the library rows to this run.json (opbench run of the same "
                        "suites) and print its end-to-end table with × best peer")  # fmt: skip
    args = parser.parse_args(argv)
    device = "cpu" if args.tiny else default_device()
    prepare_device(device)
    if args.tiny:
        import torch

        torch.set_num_threads(1)  # two cores shared: OpenMP spinning made tiny layers slow
    if args.tiny:
        suite = tiny_suite()
        networks = [(suite, m.name) for m in suite.models]
    else:
        networks = [(load_suite(ROOT / path), name) for path, name in NETWORKS]
    if args.model:
        networks = [(s, n) for s, n in networks if any(m in n for m in args.model)]
    backends = args.backend or (["torch"] if args.tiny else ["torch", "torch-compile", "triton"])
    options = RunOptions(device=device, rounds=args.rounds)
    records, lines = [], []
    for suite, name in networks:
        model = suite.model(name)
        data = ModelData(suite, model, device)
        peers = [] if args.backend else quant_peers(model)
        rows = suite_rows(model, data, backends + peers, options)
        rows += library_rows(model, data, options, compile_=not args.no_compile)
        for row in rows:
            row["network"] = model.name
            brief = {k: v for k, v in row.items() if k not in ("samples_ms", "correctness")}
            print(json.dumps(brief), flush=True)
        records += rows
        lines.append(table(name, rows))
        del data
    print("| " + " | ".join(HEADER) + " |")
    print("|" + "---|" * len(HEADER))
    for line in lines:
        print("| " + " | ".join(line) + " |")
    out = args.out or (
        Path(os.environ["OUT"]) / "library_peers.json" if "OUT" in os.environ else None
    )
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(records, indent=1))
    if args.run:
        add_to_run(args.run, records)
    return 0


if __name__ == "__main__":
    sys.exit(main())
