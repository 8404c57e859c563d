"""bench/library_peers.py (benchmarks/ once moved): the shipped networks as their libraries
build them, on the suite's weights, beside the suite's rows. The tiny CPU mode end to end, the
weight loading's refusal of a partial match, and the "× best peer" figure."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = next(
    p for p in (ROOT / "benchmarks", ROOT / "bench") if (p / "library_peers.py").exists()
)
sys.path.insert(0, str(SCRIPTS))
library_peers = importlib.import_module("library_peers")
peer_models = importlib.import_module("peer_models")


@pytest.fixture(scope="module")
def tiny_rows(tmp_path_factory):
    out = tmp_path_factory.mktemp("peers") / "rows.json"
    assert library_peers.main(["--tiny", "--out", str(out)]) == 0
    import json

    return json.loads(out.read_text())


def test_every_library_peer_matches_the_suite_or_says_why_it_is_missing(tiny_rows) -> None:
    """The suite's weights loaded into torchvision's ResNet-50 and MobileNetV2, transformers'
    BertLayer and LlamaDecoderLayer (the fp8 block's peer too: its linears unquantized, as on
    the suite's torch): the output passes the suite's check against the float64 reference and
    equals the suite's torch forward (same torch calls, float32 CPU)."""
    networks = ["resnet50", "mobilenet_v2", "bert_layer", "llama7b_prefill", "llama7b_prefill_fp8"]
    for name in networks:
        rows = [r for r in tiny_rows if r["network"] == name]
        suite = [r for r in rows if r["source"] == "suite" and r["mode"] == "eager"]
        assert suite and suite[0]["correct"] and suite[0]["ms"] > 0, name
        library = [r for r in rows if r["source"] == "library"]
        if library[0]["mode"] == "-":  # the library is not installed here
            assert "does not import" in library[0]["message"], library
            continue
        (eager,) = library  # on the CPU: eager only
        assert eager["correct"] and eager["ms"] > 0, eager
        assert eager["max_abs_vs_suite_torch"] < 1e-4, eager


def test_a_library_parameter_left_unset_stops_the_peer() -> None:
    """A suite layer with no library counterpart, or a library parameter the suite does not
    set, is an error: never a peer running on its random initialisation."""
    from opbench.pipeline.data import ModelData
    from opbench.spec.load import load_suite_text

    suite = load_suite_text(ONE_LINEAR)
    model = suite.models[0]
    data = ModelData(suite, model, "cpu")
    module = torch.nn.Module()
    module.fc = torch.nn.Linear(6, 5)
    with pytest.raises(ValueError, match="no library parameter for the suite's layer 'fc'"):
        peer_models.load_suite_weights(module, model, data, {})
    module.extra = torch.nn.Linear(2, 2)
    with pytest.raises(ValueError, match=r"unset \['extra.bias', 'extra.weight'\]"):
        peer_models.load_suite_weights(module, model, data, {"fc": "fc"})
    del module.extra
    loaded = peer_models.load_suite_weights(module, model, data, {"fc": "fc"})
    torch.testing.assert_close(loaded.fc.weight, data.weights(0)["weight"])


ONE_LINEAR = """\
name: one
models:
  - name: m
    batch: 2
    input: [6]
    layers:
      - {name: fc, op: linear, out_features: 5}
"""


def test_the_speed_up_divides_by_the_fastest_torch_peer_and_names_it() -> None:
    """The bench's line takes × best peer from the one function every report uses."""
    passed = dict(rel_l2=1e-6, max_abs=1e-6, nonfinite=0, tolerance=1e-4)
    failed = dict(passed, rel_l2=0.5, failures=["rel_l2 5.0e-01 > 1.0e-04"])

    def row(source, backend, mode, ms, correctness=passed):
        return dict(source=source, backend=backend, mode=mode, ms=ms, network="resnet50",
                    samples_ms=[[ms, ms * 1.01, ms * 0.99]], timer="cuda-events",
                    correct=correctness is passed, correctness=correctness)  # fmt: skip

    rows = [
        row("suite", "torch", "eager", 1.0),
        row("suite", "torch", "cuda_graph", 0.9),
        row("suite", "torch-compile", "cuda_graph", 0.68),
        row("suite", "triton", "cuda_graph", 0.44),
        row("library", "torchvision 0.26", "eager", 0.95),
        row("library", "torchvision 0.26", "cuda_graph", 0.92),
        row("library", "torchvision 0.26", "compile", 0.47),
        row("library", "torchvision 0.26", "compile", 0.1, failed),  # never counts
    ]
    line = library_peers.table("resnet50", rows)
    assert line[-1] == "1.07× (library:torchvision-compile)"
    assert line[1:8] == ["1.0000", "0.9000", "0.6800", "0.4400", "0.9500", "0.9200", "0.4700"]


def test_a_quantized_block_is_also_divided_by_its_quantized_gemm_peer() -> None:
    """The fp8 block's line: the torch-fp8 block (its linears on `_scaled_mm`, the rest on
    torch) in a column of its own with triton's ratio over it; never among the bf16 peers of
    × best peer, even when it is the fastest."""
    passed = dict(rel_l2=1e-3, max_abs=1e-3, nonfinite=0, tolerance=8e-2)

    def row(backend, ms):
        return dict(source="suite", backend=backend, mode="cuda_graph", ms=ms, correct=True,
                    network="llama7b_prefill_fp8", samples_ms=[[ms]], timer="cuda-events",
                    correctness=passed)  # fmt: skip

    rows = [row("torch", 1.44), row("torch-compile", 1.40), row("torch-fp8+torch", 0.96),
            row("triton", 0.80)]  # fmt: skip
    line = library_peers.table("llama7b_prefill_fp8", rows)
    assert line[-3:] == ["0.9600", "1.20× (torch-fp8+torch)", "1.75× (torch-compile)"], line


def test_library_rows_join_a_run_and_its_table_divides_by_the_best_peer(
    tiny_rows, tmp_path, capsys
) -> None:
    """--run: the library's rows become end-to-end rows (`library:torchvision`) of a run of
    the same models, which the run's table then counts among the peers."""
    from opbench.results.io import read_run, write_run
    from opbench.results.model import Correctness, EndToEnd, RunResult

    passed = Correctness(rel_l2=1e-6, max_abs=1e-6, nonfinite=0, tolerance=1e-4)
    triton = EndToEnd("resnet50", "triton", "ok", ((1e6,),), "fake", correctness=passed)
    path = tmp_path / "run.json"
    write_run(RunResult("tiny", "2026-11-28T00:00:00Z", "cpu", end_to_end=(triton,)), path)
    library_peers.add_to_run(path, tiny_rows)
    library_peers.add_to_run(path, tiny_rows)  # again: replaced, not added twice
    backends = [e.backend for e in read_run(path).end_to_end]
    assert sorted(backends) == ["library:torchvision", "triton"], backends
    rows = {e.backend: e for e in read_run(path).end_to_end}
    assert rows["library:torchvision"].correct and rows["library:torchvision"].mode == "eager"
    assert "× (library:torchvision)" in capsys.readouterr().out
