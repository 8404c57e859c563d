"""A corrupt `.meta.json` beside a reference is named in compare's output, not ignored."""

from __future__ import annotations

from pathlib import Path

from test_gate_cli import gate, layer, save


def test_compare_warns_about_a_corrupt_sidecar(tmp_path: Path):
    run = save(tmp_path, "run", layer("fc1"))
    reference = tmp_path / "ref.csv"
    reference.write_text("layer,time_ms\nfc1,3.0\n")
    (tmp_path / "ref.meta.json").write_text('{"opbench_reference": "onnx')
    done = gate(str(run), "--reference", str(reference))
    text = " ".join(done.output.split())
    assert f"warning: {tmp_path / 'ref.meta.json'} is not valid JSON" in text, done.output
    assert "batch and dtype are not checked" in text
