"""The commands that only read files import only what they need: `opbench suite from-onnx` and
`opbench validate MODEL.onnx` run without importing torch, triton or onnxruntime (each command's
module is loaded when the command runs: cli/main.py), so that importing a model costs the ONNX
tools' import and the import itself, not a framework's start-up."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxscript")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

REPO = Path(__file__).resolve().parents[2]

# Runs the CLI in a fresh interpreter, then names the heavy modules it imported.
_CLI = """
import sys
from opbench.cli.main import app
try:
    app(sys.argv[1:], prog_name="opbench")
    code = 0
except SystemExit as done:
    code = done.code
print("heavy:", sorted(m for m in ("torch", "triton", "onnxruntime") if m in sys.modules))
sys.exit(code)
"""


def _model(path: Path) -> None:
    """y = relu(x) @ W: two nodes the importer takes."""
    weight = np.random.default_rng().standard_normal((4, 6)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["a"], name="act"),
         helper.make_node("MatMul", ["a", "fc.weight"], ["y"], name="fc")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 6])],
        [numpy_helper.from_array(weight, "fc.weight")],
    )  # fmt: skip
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)


@pytest.mark.parametrize("command", [["suite", "from-onnx", "{model}", "--out", "{suite}"],
                                     ["validate", "{model}"]])  # fmt: skip
def test_reading_an_onnx_model_imports_no_torch(tmp_path: Path, command: list[str]) -> None:
    model, suite = tmp_path / "m.onnx", tmp_path / "m.yaml"
    _model(model)
    args = [a.format(model=model, suite=suite) for a in command]
    done = subprocess.run(
        [sys.executable, "-c", _CLI, *args], capture_output=True, text=True, cwd=REPO, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "heavy: []" in done.stdout, done.stdout
