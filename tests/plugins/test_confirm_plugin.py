"""Issue 40: `compare --baseline --confirm` re-times layers of a plugin backend. The run
recorded its plugin (path and hash) in env["plugins"]; the re-run loads it before taking the
fingerprint, which then matches the run's instead of reading "plugins: [...] -> []"."""

from __future__ import annotations

from pathlib import Path

from plugin_helpers import CLAMP_BACKEND, invoke, write

from opbench.cli.gate_confirm import rerun_layers
from opbench.plugins import loading
from opbench.results.io import read_run

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
    out = tmp_path / "reports"
    done = invoke(
        "run", suite, "--plugin", plugin, "--device", "cpu", "--rounds", "2", "--out", out
    )
    assert done.exit_code == 0, done.output
    run = read_run(out / "plug" / "latest" / "run.json")
    assert [entry["path"] for entry in run.env["plugins"]] == [str(plugin.resolve())]
    loading.restore(before)  # a fresh `opbench compare`, given no --plugin
    (result,) = run.layers
    rerun = rerun_layers(run, [result.key])
    (again,) = rerun.layers
    assert again.key == ("m", "act", "clamp") and again.correct
    assert len(again.samples_ms) == 4  # twice the rounds the run took
    assert rerun.env["plugins"] == run.env["plugins"]
