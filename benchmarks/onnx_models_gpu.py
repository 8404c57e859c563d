"""Real networks as a user exports them, imported and run by `opbench run model.onnx`.

Each network is built from its library's constructor (torchvision, transformers) with seeded
random weights (nothing downloaded), exported with a plain `torch.onnx.export` (the dynamo
exporter at its default opset), then run as a user runs it:

    opbench run NAME.onnx -b torch -b triton --dtype float16 --quick --out $OUT/runs

Every layer is checked against the float64 reference and the whole model's output against the
float32 graph, on each backend. The script reads each run.json back and prints one row per
network and backend: whether the whole model passed its check, the whole forward's median
(eager and CUDA graph), and the share of layers that ran as opbench's own layers (the rest run
as the exact ONNX fallback layer).

    PYTHONPATH=. python3 benchmarks/onnx_models_gpu.py                 # the six networks, CUDA
    PYTHONPATH=. python3 benchmarks/onnx_models_gpu.py -m resnet50     # one of them
    PYTHONPATH=. python3 benchmarks/onnx_models_gpu.py --tiny          # a tiny model, the CPU

A network whose export or run fails gives a row that says so; the others still run. Rows go to
$OUT/onnx_models.json when OUT is set (or --out).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# tests/data/onnx_models.py mends torchvision's import on a CPU torch (transformers imports it).
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "data")]

import torch  # noqa: E402
from onnx_models import _import_torchvision  # noqa: E402

from opbench.results.io import read_run, resolve_latest  # noqa: E402


def _torchvision(name: str, size: int = 224) -> Callable[[], tuple[torch.nn.Module, tuple]]:
    def make() -> tuple[torch.nn.Module, tuple]:
        torchvision = _import_torchvision()
        return getattr(torchvision.models, name)(), (torch.randn(1, 3, size, size),)

    return make


def _llama3_8b_layer(tiny: bool = False) -> Callable[[], tuple[torch.nn.Module, tuple]]:
    """One LLaMA-3-8B decoder layer (hidden 4096, MLP 14336, 32 query heads on 8 kv heads,
    rope theta 500000) in transformers' LlamaModel, prefill of 512 tokens. The vocabulary is
    cut to 2048: the embedding table is no layer under test, and the full one (128256 x 4096)
    alone would exceed ONNX's 2 GB file limit."""

    def make() -> tuple[torch.nn.Module, tuple]:
        _import_torchvision()
        import transformers

        shape: dict[str, Any] = {"hidden_size": 4096, "intermediate_size": 14336,
                                 "num_attention_heads": 32, "num_key_value_heads": 8}  # fmt: skip
        if tiny:
            shape = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
                     "num_key_value_heads": 2}  # fmt: skip
        config = transformers.LlamaConfig(
            vocab_size=2048, num_hidden_layers=1, rope_theta=500000.0, use_cache=False,
            max_position_embeddings=1024, **shape,
        )  # fmt: skip
        seq = 8 if tiny else 512
        return transformers.LlamaModel(config), (torch.randint(0, 2048, (1, seq)),)

    return make


NETWORKS: dict[str, Callable[[], tuple[torch.nn.Module, tuple]]] = {
    "resnet50": _torchvision("resnet50"),
    "mobilenet_v3_large": _torchvision("mobilenet_v3_large"),
    "efficientnet_b0": _torchvision("efficientnet_b0"),
    "convnext_tiny": _torchvision("convnext_tiny"),
    "vit_b_16": _torchvision("vit_b_16"),
    "llama3_8b_layer": _llama3_8b_layer(),
}
TINY = {"llama_tiny": _llama3_8b_layer(tiny=True)}


@torch.no_grad()
def _seeded(model: torch.nn.Module, seed: int) -> torch.nn.Module:
    """Every parameter and buffer that holds one value everywhere redrawn (default inits leave
    norm weights at 1 and biases at 0, which a wrong kernel matches)."""
    generator = torch.Generator().manual_seed(seed)
    for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
        flat = tensor.reshape(-1)
        if tensor.is_floating_point() and flat.numel() > 1 and bool((flat == flat[0]).all()):
            noise = torch.randn(tensor.shape, generator=generator)
            if name.endswith("running_var"):
                tensor.copy_(0.5 + torch.rand(tensor.shape, generator=generator))
            else:
                tensor.copy_(float(flat[0]) + 0.1 * noise)
    return model.eval()


def export(name: str, make: Callable, folder: Path, seed: int) -> Path:
    torch.manual_seed(seed)
    model, args = make()
    path = folder / f"{name}.onnx"
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(_seeded(model, seed), args, str(path), external_data=False)
    return path


def run(path: Path, out: Path, backends: list[str], device: str, dtype: str,
        timeout_s: float) -> tuple[int, str]:  # fmt: skip
    command = [sys.executable, "-m", "opbench", "run", str(path), "--device", device,
               "--dtype", dtype, "--quick", "--out", str(out), "--wide"]  # fmt: skip
    for backend in backends:
        command += ["-b", backend]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired as late:
        return 124, f"timed out after {timeout_s:.0f} s\n{str(late.stdout or '')[-3000:]}"
    return done.returncode, done.stdout[-6000:] + done.stderr[-3000:]


def rows_of(name: str, run_root: Path, code: int) -> list[dict[str, Any]]:
    """One row per backend from the run's run.json (if it got that far)."""
    folder = resolve_latest(run_root / name) if (run_root / name).is_dir() else None
    if folder is None:
        return [{"network": name, "status": f"no run (exit {code})"}]
    result = read_run(folder)
    rows = []
    for backend in sorted({r.backend for r in result.layers}):
        layers = [r for r in result.layers if r.backend == backend]
        native = [r for r in layers if "fallback" not in r.op]
        row: dict[str, Any] = {"network": name, "backend": backend, "exit": code,
                               "layers": len(layers), "native_layers": len(native),
                               "layers_ok": sum(r.status == "ok" for r in layers)}  # fmt: skip
        for e2e in result.end_to_end:
            if e2e.backend != backend:
                continue
            samples = [s for rnd in e2e.samples_ms for s in rnd]
            row[f"{e2e.mode}_ms"] = statistics.median(samples) if samples else None
            if e2e.correctness is not None:
                row[f"{e2e.mode}_check"] = "passed" if e2e.correctness.passed else "FAILED"
            elif e2e.status != "ok":
                row[f"{e2e.mode}_check"] = f"{e2e.status}: {(e2e.message or '')[:80]}"
        rows.append(row)
    return rows or [{"network": name, "status": f"no results (exit {code})"}]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-m", "--model", action="append", help="only these networks")
    parser.add_argument("--tiny", action="store_true", help="a tiny model on the CPU (a test)")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "onnx_models_out")))
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds per network's run")
    args = parser.parse_args(argv)
    networks = TINY if args.tiny else NETWORKS
    names = args.model or list(networks)
    device = "cpu" if args.tiny or not torch.cuda.is_available() else "cuda"
    backends = ["torch"] if args.tiny else ["torch", "triton"]
    dtype = "float32" if device == "cpu" else "float16"
    folder = args.out / "onnx"
    folder.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    for seed, name in enumerate(names, start=1):
        started = time.perf_counter()
        try:
            path = export(name, networks[name], folder, seed)
        except Exception as exc:  # a failed export is that network's row, not the script's end
            rows.append(
                {"network": name, "status": f"export failed: {type(exc).__name__}: {exc}"[:300]}
            )
            continue
        exported = time.perf_counter() - started
        code, output = run(path, args.out / "runs", backends, device, dtype, args.timeout)
        (args.out / f"{name}.log").write_text(output)
        for row in rows_of(path.stem, args.out / "runs", code):
            rows.append({**row, "export_s": round(exported, 1),
                         "run_s": round(time.perf_counter() - started - exported, 1)})  # fmt: skip
        print(json.dumps(rows[-1]), flush=True)
    (args.out / "onnx_models.json").write_text(json.dumps(rows, indent=1))
    print(f"\n{device} ({torch.cuda.get_device_name() if device == 'cuda' else 'cpu'}), {dtype}:")
    for row in rows:
        print("  " + ", ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}"
                               for k, v in row.items()))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
