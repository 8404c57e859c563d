"""A fair reference (issue 39): the sidecar `opbench reference onnxruntime` writes says how the
reference ran, and compare warns when threads, batch or dtype differ from the run's; a node
whose slowest run took over SPIKE_RATIO medians is flagged, and the row's reason says so."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from opbench.compare.rows import spike_note
from opbench.reference.interface import SPIKE_RATIO, Flag, ReaderOptions
from opbench.reference.onnxruntime import READER
from opbench.reference.sidecar import read_sidecar, sidecar_warnings


def profile(path: Path, durations: list[float]) -> Path:
    """An ONNX Runtime profile of one node `conv`, one model_run per duration (µs)."""
    events = []
    for k, dur in enumerate(durations):
        start = 1000 * k
        events.append({"cat": "Session", "name": "model_run", "ts": start, "dur": 900})
        events.append(
            {"cat": "Node", "name": "conv_kernel_time", "ts": start + 1, "dur": dur,
             "args": {"op_name": "Conv", "provider": "CPUExecutionProvider"}}
        )  # fmt: skip
    path.write_text(json.dumps(events))
    return path


def test_a_spike_is_flagged_and_named_in_the_reason(tmp_path: Path):
    steady = READER.read(profile(tmp_path / "a.json", [0, 10, 11, 10, 12]), ReaderOptions())
    assert Flag.SPIKES not in steady.layers[0].flags
    assert spike_note(steady.layers) is None
    # the first run is the warm-up; then one run at 20× the median
    spiky = READER.read(profile(tmp_path / "b.json", [0, 10, 11, 200, 10]), ReaderOptions())
    (row,) = spiky.layers
    assert Flag.SPIKES in row.flags and row.median_ms == pytest.approx(0.0105)
    note = spike_note(spiky.layers)
    assert note is not None and "'conv' took up to 19× its median" in note
    assert f"over {SPIKE_RATIO:g}×" in note


def run(threads: int, batch: int, dtype: str, device: str = "cpu") -> SimpleNamespace:
    return SimpleNamespace(
        device=device,
        env={"threads": threads},
        suite_spec={"models": [{"name": "resnet50", "batch": batch}]},
        layers=(SimpleNamespace(backend="torch", dtype=dtype),),
    )


def test_the_sidecar_is_read_and_each_difference_warned(tmp_path: Path):
    ref = tmp_path / "ref.json"
    ref.write_text("[]")
    meta = {"opbench_reference": "onnxruntime", "profile": "ref.json", "intra_op_threads": 2,
            "batch": {"resnet50": 1}, "dtype": "float32"}  # fmt: skip
    (tmp_path / "ref.meta.json").write_text(json.dumps(meta))
    sidecar = read_sidecar(ref)
    assert sidecar is not None and sidecar.meta == meta and sidecar.problem is None
    assert sidecar_warnings(sidecar, run(2, 1, "float32"), "torch") == []
    warnings = sidecar_warnings(sidecar, run(1, 4, "float16"), "torch")
    assert len(warnings) == 3
    assert "2 CPU thread(s) and the run on 1" in warnings[0] and "--threads 1" in warnings[0]
    assert "resnet50 at batch 1 and the run at batch 4" in warnings[1]
    assert "in float32 and the run in float16" in warnings[2]
    # a GPU run's CPU threads are no part of its layers' times
    assert sidecar_warnings(sidecar, run(1, 1, "float32", device="cuda"), "torch") == []
    # no sidecar: nothing to say
    assert read_sidecar(tmp_path / "other.json") is None


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (
            '{"opbench_reference": "onnxruntime", "batch": ',
            "is not valid JSON (Expecting value: line 1 column",
        ),
        ("[1, 2]", "holds no JSON object"),
        ('{"batch": {"resnet50": 1}}', "has no 'opbench_reference' key"),
        (
            '{"opbench_reference": "onnxruntime", "intra_op_threads": "two"}',
            'intra_op_threads is "two", not a whole number: not checked',
        ),
    ],
    ids=["truncated", "not-an-object", "not-opbench", "bad-field"],
)
def test_a_corrupt_sidecar_is_warned_about_in_one_line(tmp_path: Path, text, problem):
    ref = tmp_path / "ref.json"
    ref.write_text("[]")
    (tmp_path / "ref.meta.json").write_text(text)
    sidecar = read_sidecar(ref)
    assert sidecar is not None
    (warning,) = sidecar_warnings(sidecar, run(2, 1, "float32"), "torch")
    assert warning.startswith(f"warning: {tmp_path / 'ref.meta.json'}")
    assert problem in warning and "\n" not in warning
