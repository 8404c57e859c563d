"""Issue 40: `compare --baseline --confirm` re-times layers of a plugin backend. The run
recorded its plugin (path and hash) in env["plugins"]; the re-run loads it before taking the
fingerprint, which then matches the run's instead of reading "plugins: [...] -> []"."""

from __future__ import annotations

from pathlib import Path

from plugin_helpers import CLAMP_BACKEND, write

from opbench.cli.gate_confirm import rerun_layers
from opbench.compare.gate_model import MIN_ROUNDS
from opbench.measure.env import fingerprint
from opbench.plugins import activate, loading, provenance
from opbench.results.model import LayerResult, RunResult

SUITE = """
    name: plug
    models:
      - name: m
        input: [8, 32]
        backends: [clamp]
        timing: {warmup_ms: 0, rep_ms: 1}
        layers:
          - {name: act, op: relu}
    """


def test_confirm_reruns_a_plugin_backend_after_loading_the_runs_plugin(tmp_path: Path):
    plugin = write(tmp_path / "clamp.py", CLAMP_BACKEND)
    suite = write(tmp_path / "plug.yaml", SUITE)
    before = loading.snapshot()
    activate([str(plugin)])  # as `opbench run --plugin clamp.py` did
    recorded = provenance()
    loading.restore(before)  # a fresh `opbench compare`, given no --plugin
    activate([])
    timed = LayerResult(
        model="m", layer="act", op="relu", backend="clamp", status="ok", dtype="float32",
        input_shape=(1, 8, 32), output_shape=(1, 8, 32), samples_ms=((0.01, 0.011),) * 2,
    )  # fmt: skip
    run = RunResult(
        suite="plug", started_at="2026-11-28T00:00:00Z", device="cpu", suite_source=str(suite),
        env={**fingerprint("cpu"), "plugins": recorded}, layers=(timed,),
    )  # fmt: skip
    rerun = rerun_layers(run, [timed.key])
    (again,) = rerun.layers
    assert again.key == ("m", "act", "clamp") and again.correct
    # twice the rounds the run took, and enough for the gate's verdict
    assert len(again.samples_ms) == max(4, MIN_ROUNDS)
    assert rerun.env["plugins"] == recorded == [{"path": str(plugin.resolve()), **recorded[0]}]
