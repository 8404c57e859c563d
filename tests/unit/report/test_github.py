"""GitHub step summary and annotation lines."""

from __future__ import annotations

from opbench.compare.baseline import baseline_from_run
from opbench.compare.gate import gate
from opbench.report.github import (
    annotations,
    append_step_summary,
    escape_data,
    escape_property,
    step_summary_markdown,
)
from opbench.results.model import Correctness, LayerResult, RunResult, Status

ENV = {"gpu_name": "H200", "driver": "1", "torch": "2", "triton": "3", "kernel_version": "k"}
TIGHT = (1.0, 1.003, 0.997, 1.002, 0.998)


def layer(name, scale=1.0, medians=TIGHT, **kw) -> LayerResult:
    values = dict(
        model="mlp",
        layer=name,
        op="linear",
        backend="triton",
        status=Status.OK,
        dtype="float16",
        input_shape=(1,),
        output_shape=(1,),
        samples_ms=tuple((m * scale,) for m in medians),
        correctness=Correctness(rel_l2=0.0, max_abs=0.0, nonfinite=0, tolerance=1e-3),
    )
    values.update(kw)
    return LayerResult(**values)


def run(*layers, env=ENV):
    return RunResult(
        suite="enc", started_at="t", device="cuda", env=env, layers=layers, complete=True
    )


def mixed_report(env=ENV, **options):
    base = [layer("ok"), layer("slow"), layer("fast"), layer("boom"), layer("gone")]
    cur = [
        layer("ok"),
        layer("slow", scale=1.5),
        layer("fast", scale=0.5),
        layer("boom", status=Status.ERROR, samples_ms=(), correctness=None, message="bad | pipe"),
    ]
    return gate(run(*cur, env=env), baseline_from_run(run(*base)))


def test_escaping_follows_workflow_command_rules():
    assert escape_data("50% a\nb\rc: d, e") == "50%25 a%0Ab%0Dc: d, e"
    assert escape_property("t: a, b%") == "t%3A a%2C b%25"


def test_annotation_lines():
    lines = annotations(mixed_report())
    errors = [line for line in lines if line.startswith("::error ")]
    warnings = [line for line in lines if line.startswith("::warning ")]
    notices = [line for line in lines if line.startswith("::notice ")]
    assert len(errors) == 2 and len(warnings) == 1 and len(notices) == 1
    regression = [line for line in errors if "regression" in line][0]
    assert regression.startswith(
        "::error title=opbench regression%3A mlp/slow (triton)::regressed: x1.500"
    )
    assert any("crashed%3A mlp/boom" in line and "bad | pipe" in line for line in errors)
    assert "missing%3A mlp/gone" in warnings[0] and "improved%3A mlp/fast" in notices[0]
    for line in lines:
        head, _, message = line[2:].partition("::")
        assert (
            "\n" not in line and head.split(" ", 1)[0] in ("error", "warning", "notice") and message
        )


def test_annotations_are_capped_per_level():
    many = [layer(f"l{i}") for i in range(15)]
    report = gate(
        run(*[layer(f"l{i}", scale=2.0) for i in range(15)]), baseline_from_run(run(*many))
    )
    errors = [line for line in annotations(report, per_level=10) if line.startswith("::error")]
    assert len(errors) == 11 and "5 more" in errors[-1]


def test_environment_difference_is_an_error_annotation_and_a_table():
    report = mixed_report(env=dict(ENV, driver="2"))
    lines = annotations(report)
    env_line = [line for line in lines if "environment" in line][0]
    assert env_line.startswith("::error ") and "driver: 1 -> 2" in env_line
    assert not any(
        "incomparable" in line for line in lines
    )  # one line for the environment, not one per layer
    text = step_summary_markdown(report)
    assert "comparison refused (exit 4)" in text and "| driver | 1 | 2 |" in text


def test_step_summary_markdown():
    text = step_summary_markdown(mixed_report())
    assert text.startswith("## opbench gate: enc: CRASHED (exit 3)")
    assert "Benjamini-Hochberg q = 0.05" in text and "99% intervals" in text
    assert "### Needs attention" in text and "<details>" in text and "</details>" in text
    attention = text.split("### Needs attention")[1].split("<details>")[0]
    rows = [
        r for r in attention.splitlines() if r.startswith("| ") and not r.startswith("| verdict")
    ]
    assert [r.split(" | ")[0] for r in rows] == ["| **REGRESSED**", "| **CRASHED**", "| MISSING"]
    assert "bad \\| pipe" in text  # a pipe in a message cannot break the table
    header = [r for r in attention.splitlines() if r.startswith("| verdict")][0]
    assert all(r.count(" | ") == header.count(" | ") for r in rows)


def test_append_step_summary(tmp_path):
    report = mixed_report()
    assert append_step_summary(report, environ={}) is None
    path = tmp_path / "summary.md"
    path.write_text("earlier step\n")
    assert append_step_summary(report, environ={"GITHUB_STEP_SUMMARY": str(path)}) == path
    text = path.read_text()
    assert text.startswith("earlier step\n## opbench gate")
