"""Issue 41's GPU targets in one call, on the product's own timer and pipeline:

1. prefill: the LLaMA-3-8B-shape block of suites/llama.yaml (`llama3_8b_prefill`: 2048
   tokens, GQA 32/8, RoPE, SwiGLU 14336, bf16), whole model end to end: Triton as a CUDA graph
   vs torch.compile of the same block (reduce-overhead and max-autotune, each compiled whole as
   in `opbench run`), and vs Hugging Face's `LlamaDecoderLayer` (same shapes, sdpa, random
   weights; cos/sin computed once outside, as the model does for all its layers) under
   torch.compile in both modes. Target: Triton >= 1.1x the faster of each pair.
2. decode: `decode_fp16_kv4096[batch=1]` and `[batch=16]` of suites/decode.yaml (GQA 32/8,
   KV cache 4096, fp16): Triton CUDA graph vs torch.compile's CUDA graph (reduce-overhead),
   and the step's bytes (every weight + the KV cache read) over its time as a share of the
   GPU's copy bandwidth (a 1 GiB device-to-device copy). Targets: >= 1.2x, >= 80%.
3. rope: the prefill block's and the decode step's `qkv` and `rope` layers as Triton's fused
   group (the rotation in the GEMM's epilogue) and as the unfused pair (GEMM, then the rope
   kernel), each bound and replayed as a CUDA graph, vs the qkv GEMM alone in torch (F.linear,
   CUDA graph); every output checked against float64 first (a wrong one gets no ratio).
   Target: the fused group >= 1.0x.

Every whole-model row is checked against the float64/float32 reference of the whole graph
(pipeline/end_to_end.py); the HF layer is timed only (its weights are its own).

    PYTHONPATH=. python3 benchmarks/transformer_targets.py              # GPU; results to $OUT
    PYTHONPATH=. python3 benchmarks/transformer_targets.py --tiny       # CPU: tiny shapes, flow only

    PYTHONPATH=. python3 benchmarks/transformer_targets.py --parts prefill,hf   # one part at a time

Writes $OUT/transformer_targets_<parts>.json (every row, ratios and verdicts) and prints the
targets. A part that fails is recorded as an error row; the others still run.
`--tiny` runs the same flow on tiny blocks in the Triton interpreter: its times mean nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

PREFILL = ("llama.yaml", "llama3_8b_prefill")
DECODE = ("decode.yaml", ("decode_fp16_kv4096[batch=1]", "decode_fp16_kv4096[batch=16]"))
GRAPH_BACKENDS = ("triton", "torch-compile", "torch-compile-max-autotune")
PARTS = ("prefill", "hf", "decode", "rope")


def tiny_suites() -> tuple[str, str]:
    """llama.yaml and decode.yaml's blocks at interpreter sizes, built by suites/networks.py."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("networks", ROOT / "suites" / "networks.py")
    n = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(n)
    defaults = {"dtype": "float32", "backends": list(GRAPH_BACKENDS),
                "timing": {"warmup_ms": 0, "rep_ms": 1, "rounds": 1}}  # fmt: skip
    prefill = n.model_text(
        PREFILL[1],
        {"batch": 1, "input": [9, 64], "fuse": True},
        n.llama_prefill_block(64, 4, 48, kv_heads=2, theta=500000.0),
    )
    decode = n.model_text(
        "decode_fp16_kv4096",
        {"batch": [1, 16], "inputs": {"x": [1, 64]}, "fuse": True},
        n.llama_decode_block(None, 64, 48, heads=4, kv_heads=2, kv_len=13),
    )
    return (n.suite_text("tiny", "llama", "tiny", defaults, [prefill]),
            n.suite_text("tiny", "decode", "tiny", defaults, [decode]))  # fmt: skip


def load(tiny: bool, which: int):
    from opbench.spec.load import load_suite, load_suite_text

    if tiny:
        return load_suite_text(tiny_suites()[which], "tiny.yaml")
    return load_suite(ROOT / "suites" / (PREFILL[0], DECODE[0])[which])


def whole_model_rows(suite, name: str, backends, device: str, options) -> list[dict]:
    """Each backend's end-to-end rows of one model (benchmarks/whole_models.py's builders)."""
    from whole_models import COMPILED, build_all, eager_layers

    from opbench.backends.registry import all_backends
    from opbench.pipeline.data import ModelData
    from opbench.pipeline.end_to_end import time_end_to_end

    model = suite.model(name)
    data = ModelData(suite, model, device)
    rows = []
    for backend_name in backends:
        backend = all_backends()[backend_name]
        start = time.perf_counter()
        if backend_name in COMPILED:
            built = eager_layers(model, data, device)
        else:
            built = build_all(backend, model, data, device)[0]
        for row in time_end_to_end(model, backend_name, built, data, options, backend):
            if row.mode != "cuda_graph" and (backend_name in COMPILED or device != "cpu"):
                continue  # the graph figures are the targets' (eager rows: opbench run)
            stats = row.stats
            rows.append(dict(part=name, backend=backend_name, mode=row.mode,
                             status=str(row.status), message=row.message,
                             median_ms=stats.median if stats else None, correct=row.correct,
                             wall_s=round(time.perf_counter() - start, 1)))  # fmt: skip
            print(json.dumps(rows[-1]), flush=True)
    return rows


def hf_layer_rows(model, device: str, tiny: bool) -> list[dict]:
    """transformers' LlamaDecoderLayer of the same shapes under torch.compile, both modes."""
    import torch

    try:
        from transformers import LlamaConfig
        from transformers.models.llama.modeling_llama import (
            LlamaDecoderLayer,
            LlamaRotaryEmbedding,
        )
    except ImportError as exc:
        return [dict(part="hf_llama_decoder_layer", backend="transformers", mode="-",
                     status="unavailable", message=str(exc), median_ms=None)]  # fmt: skip
    layers = {layer.name: layer for layer in model.layers}
    seq, hidden = model.layers[0].input_shape[1:]
    p = layers["attn"].params
    config = LlamaConfig(hidden_size=hidden, num_attention_heads=p["heads"],
                         num_key_value_heads=p["kv_heads"] or p["heads"],
                         intermediate_size=layers["gate"].params["out_features"],
                         rope_parameters={"rope_type": "default",
                                          "rope_theta": layers["rope"].params["theta"]},
                         rms_norm_eps=1e-6,
                         attention_bias=False, mlp_bias=False)  # fmt: skip
    config._attn_implementation = "sdpa"
    dtype = torch.bfloat16 if model.layers[0].dtype == "bfloat16" else torch.float32
    layer = LlamaDecoderLayer(config, layer_idx=0).to(device, dtype).eval()
    x = torch.randn(1, seq, hidden, device=device, dtype=dtype)
    with torch.no_grad():
        cos, sin = LlamaRotaryEmbedding(config=config).to(device)(
            x, torch.arange(seq, device=device)[None]
        )
    rows = []
    for mode in ("reduce-overhead", "max-autotune"):
        compiled = torch.compile(layer, mode=mode, dynamic=False)

        def call(compiled=compiled):
            with torch.no_grad():
                return compiled(x, position_embeddings=(cos, sin))

        rows.append(dict(part="hf_llama_decoder_layer", backend=f"transformers+compile:{mode}",
                         mode="cuda_graph", status="ok", median_ms=timed_ms(call, device, tiny,
                                                                            graph=False)))  # fmt: skip
        print(json.dumps(rows[-1]), flush=True)
    return rows


def timed_ms(fn, device: str, tiny: bool, graph: bool) -> float:
    """Median ms on the product's timer (L2 flushed; `graph`: replays of a CUDA graph)."""
    from opbench.measure.timer import time_callable
    from opbench.results.stats import median
    from opbench.spec.model import TimingSpec

    timing = TimingSpec(cuda_graph=graph and device.startswith("cuda"))
    if tiny:
        timing = timing.quick()
    measured = time_callable(fn, timing, device)
    return median([s for r in measured.rounds for s in r])


def rope_rows(suite, name: str, device: str, tiny: bool) -> list[dict]:
    """The qkv projection + rope of the model, three ways, each output checked first: Triton's
    fused group (the rotation in the GEMM's epilogue: backends/triton_fusion.py linear_rope,
    gemm/linear_rope.py), Triton's unfused pair (the qkv GEMM, then the rope kernel), and
    torch's qkv GEMM alone (F.linear: the target's yardstick, no rotation at all). Each bound
    once and timed as a CUDA graph; the rows carry the plan each Triton GEMM took."""
    import torch.nn.functional as F

    from opbench.backends.base import torch_dtype
    from opbench.backends.registry import all_backends
    from opbench.measure.check import compare_outputs
    from opbench.measure.poison import poison_
    from opbench.pipeline.data import ModelData

    model = suite.model(name)
    data = ModelData(suite, model, device)
    index = {layer.name: i for i, layer in enumerate(model.layers)}
    qkv_i, rope_i = index["qkv"], index["rope"]
    layers = [model.layers[qkv_i], model.layers[rope_i]]
    weights = [data.weights(qkv_i), data.weights(rope_i)]
    triton = all_backends()["triton"]
    x = data.input(qkv_i)
    fused = triton.build(layers, weights, device)
    qkv = triton.build(layers[:1], weights[:1], device)
    rope = triton.build(layers[1:], weights[1:], device)
    ref = data.reference((qkv_i, rope_i))[0]
    tolerance = max(layer.effective_tolerance for layer in layers)

    bound_fused = fused.bind_input(x)
    bound_qkv = qkv.bind_input(x)
    bound_rope = rope.bind_input(bound_qkv.out)

    def pair():
        bound_qkv.launch()
        return bound_rope.launch()

    weight = weights[0]["weight"].to(torch_dtype(layers[0].dtype))

    def torch_gemm():
        return F.linear(x, weight)

    checks = {}
    for label, fn in (("fused", bound_fused.launch), ("pair", pair)):
        poison_(fn())  # every element must be written again by the checked call
        checks[label] = compare_outputs(fn(), ref, tolerance, "float64")
    gemm_err = compare_outputs(torch_gemm(), data.reference((qkv_i,))[0], tolerance, "float64")
    times = {label: timed_ms(fn, device, tiny, graph=True)
             for label, fn in (("fused", bound_fused.launch), ("pair", pair),
                               ("torch_gemm", torch_gemm))}  # fmt: skip
    rows = []
    for label, backend in (("fused", "triton qkv+rope fused (rope in the GEMM epilogue)"),
                           ("pair", "triton qkv GEMM then rope kernel")):  # fmt: skip
        c = checks[label]
        rows.append(dict(part=f"{name}:qkv+rope:{label}", backend=f"{backend} vs torch F.linear",
                         mode="cuda_graph", status="ok" if not c.failures else "wrong",
                         message="; ".join(c.failures), median_ms=times[label],
                         torch_gemm_ms=times["torch_gemm"],
                         ratio=times["torch_gemm"] / times[label] if not c.failures else None,
                         rel_l2=c.rel_l2, torch_gemm_rel_l2=gemm_err.rel_l2,
                         plan=(fused if label == "fused" else qkv).plan))  # fmt: skip
        print(json.dumps(rows[-1], default=str), flush=True)
    rows[0]["target"] = 1.0  # the fused group's: the pair's ratio is the before
    return rows


def step_bytes(model) -> int:
    """A decode step's compulsory bytes: every weight (the KV caches included: read once)."""
    from opbench.ops.registry import get_op

    total = 0
    for layer in model.layers:
        op = get_op(layer.op)
        shapes = op.weight_shapes(op.layer_shape(layer), layer.params)
        size = 2 if layer.dtype in ("float16", "bfloat16") else 4
        total += sum(size * _numel(s) for s in shapes.values()) if layer.op != "rope" else 0
    return total


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def copy_tbps(device: str, tiny: bool) -> float:
    import torch

    size = 2**16 if tiny else 2**30
    src = torch.randn(size // 4, device=device)
    dst = torch.empty_like(src)
    return 2 * size / (timed_ms(lambda: dst.copy_(src), device, tiny, graph=False) * 1e-3) / 1e12


def verdicts(rows: list[dict], decode_bytes: dict, copy: float) -> list[dict]:
    def ms(part, backend):
        found = [r["median_ms"] for r in rows if r["part"] == part and r["backend"] == backend
                 and r["mode"] == "cuda_graph" and r.get("median_ms")]  # fmt: skip
        return found[0] if found else None

    out = []
    tri = ms(PREFILL[1], "triton")
    compiled = [m for m in (ms(PREFILL[1], "torch-compile"),
                            ms(PREFILL[1], "torch-compile-max-autotune")) if m]  # fmt: skip
    hf = [
        r["median_ms"] for r in rows if r["part"] == "hf_llama_decoder_layer" and r.get("median_ms")
    ]
    for label, peers in (("prefill vs torch.compile (best mode)", compiled),
                         ("prefill vs HF LlamaDecoderLayer compiled (best mode)", hf)):  # fmt: skip
        if tri and peers:
            out.append(dict(target=label, ratio=min(peers) / tri, goal=1.1,
                            met=min(peers) / tri >= 1.1))  # fmt: skip
    for name in DECODE[1]:
        t, c = ms(name, "triton"), ms(name, "torch-compile")
        if t and c:
            out.append(dict(target=f"decode {name} vs torch.compile graph", ratio=c / t,
                            goal=1.2, met=c / t >= 1.2))  # fmt: skip
        if t:
            share = decode_bytes[name] / (t * 1e-3) / 1e12 / copy
            out.append(dict(target=f"decode {name} share of copy bandwidth", ratio=share,
                            goal=0.8, met=share >= 0.8, bytes=decode_bytes[name],
                            copy_tbps=copy))  # fmt: skip
    for r in rows:
        if "target" in r:  # a wrong output has no ratio: missed
            ratio = r["ratio"]
            out.append(dict(target=r["part"], ratio=ratio, goal=r["target"],
                            met=ratio is not None and ratio >= r["target"]))  # fmt: skip
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="CPU interpreter, tiny shapes")
    parser.add_argument("--parts", default=",".join(PARTS),
                        help=f"comma-separated subset of {','.join(PARTS)} (one GPU call may "
                        "not fit all: max-autotune compiles take minutes)")  # fmt: skip
    args = parser.parse_args()
    parts = [p for p in args.parts.split(",") if p]
    if not set(parts) <= set(PARTS):
        print(f"--parts: choose from {', '.join(PARTS)}", file=sys.stderr)
        return 2
    if args.tiny:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    from opbench.pipeline.options import RunOptions, default_device, prepare_device

    device = "cpu" if args.tiny else default_device()
    prepare_device(device)
    options = RunOptions(device=device, quick=args.tiny)
    prefill_suite, decode_suite = load(args.tiny, 0), load(args.tiny, 1)
    backends = ("triton",) if args.tiny else GRAPH_BACKENDS
    rows: list[dict] = []
    decode_bytes = {name: step_bytes(decode_suite.model(name)) for name in DECODE[1]}
    steps = {
        "prefill": lambda: whole_model_rows(prefill_suite, PREFILL[1], backends, device, options),
        "hf": lambda: [] if args.tiny else hf_layer_rows(prefill_suite.model(PREFILL[1]), device,
                                                         args.tiny),
        "decode": lambda: [row for name in DECODE[1] for row in whole_model_rows(
            decode_suite, name, backends[:1] if args.tiny else ("triton", "torch-compile"),
            device, options)],
        "rope": lambda: (rope_rows(prefill_suite, PREFILL[1], device, args.tiny)
                         + rope_rows(decode_suite, DECODE[1][1], device, args.tiny)),
    }  # fmt: skip
    out = Path(os.environ.get("OUT", "."))
    out.mkdir(parents=True, exist_ok=True)
    for part in parts:
        try:
            rows += steps[part]()
        except Exception as exc:  # one part's failure keeps the others' results
            rows.append(dict(part=part, backend="-", mode="-", status="error",
                             message=f"{type(exc).__name__}: {exc}", median_ms=None))  # fmt: skip
            print(json.dumps(rows[-1]), flush=True)
    copy = copy_tbps(device, args.tiny)
    result = dict(device=device, gpu=_gpu_name(device), tiny=args.tiny, copy_tbps=copy,
                  rows=rows, targets=verdicts(rows, decode_bytes, copy))  # fmt: skip
    file = out / f"transformer_targets_{'_'.join(parts)}.json"
    file.write_text(json.dumps(result, indent=1, default=str))
    for t in result["targets"]:
        ratio = "wrong output" if t["ratio"] is None else f"{t['ratio']:.3f}"
        print(f"{t['target']}: {ratio} (goal {t['goal']}) {'MET' if t['met'] else 'missed'}")
    print(f"wrote {file}")
    return 0


def _gpu_name(device: str) -> str | None:
    import torch

    return torch.cuda.get_device_name() if device.startswith("cuda") else None


if __name__ == "__main__":
    sys.exit(main())
