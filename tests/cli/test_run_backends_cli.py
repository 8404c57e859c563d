"""`opbench run --backend NAME`: the asked backends replace the suite's lists, every asked
backend gives a result for every layer (or says why not), and an unknown name exits 2 listing
the known ones."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from opbench.backends.registry import BACKEND_NAMES
from opbench.cli.main import app
from opbench.results.io import read_run
from opbench.results.model import Status

SUITES = Path(__file__).resolve().parents[2] / "tests" / "data" / "suites"


def invoke(*args: object):
    return CliRunner().invoke(app, [str(a) for a in args])


def torch_and_triton_suite(tmp_path: Path) -> Path:
    """tiny.yaml listing only torch and triton."""
    text = (SUITES / "tiny.yaml").read_text()
    suite = tmp_path / "both.yaml"
    suite.write_text(text.replace("backends: [torch]", "backends: [torch, triton]"))
    return suite


def only_run(out: Path):
    (run_dir,) = [p for p in (out / "tiny").iterdir() if p.is_dir() and not p.is_symlink()]
    return read_run(run_dir / "run.json")


def test_asked_torch_compile_runs_on_a_suite_that_does_not_list_it(tmp_path, monkeypatch):
    from opbench.backends.torch_compile import TorchCompile

    graphs = []

    def counting_backend(graph_module, example_inputs):
        graphs.append(graph_module)
        return graph_module.forward

    monkeypatch.setattr(TorchCompile, "compiler", staticmethod(counting_backend))
    out = tmp_path / "out"
    result = invoke(
        "run", torch_and_triton_suite(tmp_path), "--out", out, "--device", "cpu",
        "--backend", "torch-compile", "-m", "mlp",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    run = only_run(out)
    assert [(r.layer, r.backend, r.status) for r in run.layers] == [
        (name, "torch-compile", Status.OK) for name in ("ln", "fc1", "act", "fc2")
    ]
    assert all(r.correct for r in run.layers)
    assert len(graphs) == 4, "each layer really went through torch.compile"
    assert {e.backend for e in run.end_to_end} == {"torch-compile"}


def test_every_asked_backend_gives_a_result_for_every_layer(tmp_path):
    out = tmp_path / "out"
    result = invoke(
        "run", SUITES / "tiny.yaml", "--out", out, "--device", "cpu",
        "--backend", "torch", "--backend", "torch-int8", "-m", "cnn",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    run = only_run(out)
    by_backend = {(r.backend, r.layer): r for r in run.layers}
    assert set(by_backend) == {(b, la) for b in ("torch", "torch-int8") for la in ("conv", "pool")}
    for layer in ("conv", "pool"):
        assert by_backend["torch", layer].status == Status.OK
        int8 = by_backend["torch-int8", layer]
        assert int8.status == Status.UNSUPPORTED and "quant: int8" in int8.message
    assert "unsupported" in result.stdout


def test_unknown_backend_exits_2_and_lists_the_known_ones(tmp_path):
    out = tmp_path / "out"
    result = invoke("run", SUITES / "tiny.yaml", "--out", out, "--backend", "torch-int4")
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.strip().splitlines()
    assert "unknown backend 'torch-int4'" in line
    assert "known: " + ", ".join(BACKEND_NAMES) in line
    assert not out.exists()
