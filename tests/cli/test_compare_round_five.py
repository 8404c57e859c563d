"""Issue 51, through `opbench compare`: an incomplete run never passes (the gate and the target
judge what it holds and exit 3 naming what it lacks), and compare always says which run it
judged, also when it found the newest run itself."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from test_gate_cli import gate, layer, save

from opbench.errors import ExitCode
from opbench.results.io import new_run_dir, point_latest, write_run
from tests.unit.compare.verdict_helpers import run_of

# name, op, output shape, reference_name, triton ms: each 10x faster than its reference row
MLP = (
    ("fc1", "linear", (4, 16), None, 0.1),
    ("fc2", "linear", (4, 16), None, 0.1),
    ("fc3", "linear", (4, 16), None, 0.1),
)


def test_the_gate_never_passes_an_incomplete_run(tmp_path: Path):
    base = save(tmp_path, "base", layer("fc1"), layer("fc2"), layer("fc3"))
    cut = new_run_dir(tmp_path / "reports", "demo", "cut")
    run = run_of(MLP, model="mlp")
    write_run(replace(run, layers=run.layers[:1], complete=False, planned=3), cut / "run.json")
    done = gate(str(cut), "--baseline", str(base))
    assert done.exit_code == ExitCode.LAYER_ERROR, done.output
    assert "gate: PASS" not in done.output and "gate: INCOMPLETE" in done.output
    assert "1 of 3 planned results; no result for mlp/fc2, mlp/fc3" in done.output


def test_the_target_never_passes_an_incomplete_run(tmp_path: Path):
    cut = new_run_dir(tmp_path / "reports", "demo", "cut")
    run = run_of(MLP, model="mlp")
    write_run(replace(run, layers=run.layers[:2], complete=False, planned=3), cut / "run.json")
    ref = tmp_path / "ref.csv"
    ref.write_text("layer,time_ms\nfc1,1\nfc2,1\nfc3,1\n")
    done = gate(str(cut), "--reference", str(ref), "--no-gate")  # --no-gate waives exit 1 only
    assert done.exit_code == ExitCode.LAYER_ERROR, done.output
    assert "2 of 3 planned results; no result for mlp/fc3" in done.output
    complete = gate(str(save(tmp_path, "full", *run.layers)), "--reference", str(ref))
    assert complete.exit_code == ExitCode.OK, complete.output


def test_compare_names_the_run_it_found_itself(tmp_path: Path, monkeypatch):
    save(tmp_path, "20261101T000000Z", layer("fc1"))
    newest = save(tmp_path, "20261102T000000Z", layer("fc1"))
    point_latest(newest)
    monkeypatch.chdir(tmp_path)
    done = gate("--baseline", str(newest))
    assert done.exit_code == ExitCode.OK, done.output
    first = done.output.splitlines()[0]
    assert first.startswith("run: ") and "20261101T" not in first
    assert "reports/demo/20261102T000000Z (the newest under reports/" in first
    assert "suite demo · started 2026-11-23T00:00:00Z" in first


def quick_rounds(n: int, ms: float = 0.1):
    return tuple((ms * 0.98, ms, ms * 1.03) for _ in range(n))


def test_confirm_never_says_nothing_inconclusive_under_inconclusive_rows(tmp_path: Path):
    # both sides timed with --quick (2 rounds): INCONCLUSIVE, and re-timing the run cannot help
    base = save(tmp_path, "b", layer("ln", samples_ms=quick_rounds(2)))
    run = save(tmp_path, "r", layer("ln", samples_ms=quick_rounds(2)))
    done = gate(str(run), "--baseline", str(base), "--confirm")
    assert "gate: INCONCLUSIVE" in done.output, done.output
    assert "nothing inconclusive" not in done.output
    text = " ".join(done.output.split())
    assert "1 inconclusive layer(s) that timing this run again cannot settle" in text
    assert "mlp/ln (triton): not judged: a verdict needs 5+ timing rounds" in text


def test_confirm_offers_a_layer_this_run_timed_with_too_few_rounds():
    from opbench.compare.baseline import baseline_from_run
    from opbench.compare.gate import gate as gate_run
    from opbench.compare.gate import inconclusive_keys
    from opbench.results.model import RunResult

    def run(*layers):
        return RunResult("demo", "t", "cuda", env={}, layers=layers, complete=True)

    base = baseline_from_run(run(layer("ln"), layer("fc", samples_ms=quick_rounds(2))))
    report = gate_run(run(layer("ln", samples_ms=quick_rounds(2)), layer("fc")), base)
    # ln: the run is short, the baseline has 5 rounds: more rounds here settle it; fc: not
    assert inconclusive_keys(report) == (("mlp", "ln", "triton"),)
