"""What `opbench run` prints once results exist (issue 39): repeated notes said once with a
count, a summary for a log, `--wide`, and no column that is empty in every row."""

from __future__ import annotations

from rich.console import Console

from opbench.report.grouped import group_notes
from opbench.report.run_table import run_columns, run_summary, run_table
from opbench.results.model import RunResult
from tests.unit.report.test_reports import result

LONG = "features.16.conv.1.0.a_rather_long_module_path"


def torch_run() -> RunResult:
    layers = (result(LONG, 0.2, backend="torch"), result("fc", 0.1, backend="torch"))
    return RunResult(suite="s", started_at="2026-11-28T00:00:00Z", device="cpu", layers=layers)


def test_a_repeated_note_is_one_line_with_a_count():
    notes = [
        (f"m/l{i}/torch", f"pre-empted? samples spread {40 + i}% (IQR/median)") for i in range(9)
    ]
    notes.append(("m/x/torch", "loaded: load 14.2 > 2 cores"))
    lines = group_notes(notes)
    assert lines == [
        "pre-empted? samples spread 40% (IQR/median) ×9: m/l0/torch, m/l1/torch, m/l2/torch, "
        "m/l3/torch and 5 more",
        "m/x/torch: loaded: load 14.2 > 2 cores",
    ]


def test_a_column_empty_in_every_row_is_hidden():
    headers = [str(c.header) for c in run_columns(torch_run())]
    assert "× torch" not in headers  # a torch-only run has no speed-up over torch
    assert {"model", "layer", "backend", "median ms ± CI95", "status"} <= set(headers)


def test_wide_keeps_long_names_on_one_line():
    console = Console(width=100, record=True)
    table = run_table(torch_run(), full=True, wide=True)
    console.width = table.natural_width()  # as `run --wide` prints it (print_wide)
    console.print(table)
    assert LONG in console.export_text()
    narrow = Console(width=100, record=True)
    narrow.print(run_table(torch_run()))
    assert LONG not in narrow.export_text()  # wrapped within the layer column


def test_the_summary_is_a_line_per_model_and_backend():
    (line,) = run_summary(torch_run())
    assert line.startswith("m[batch=2] · torch: 2 results (2 ok); ")
    assert f"slowest {LONG}" in line


def test_export_says_a_repeated_notice_once():
    from opbench.cli.export import grouped_notices
    from opbench.export.sas import Notice

    why = "(relu6): ReLU6 timed as ReLU: DLPy's ONNX import has no Clip"
    notices = [Notice("mb", f"f.{i}", "note", f"layer 'f.{i}' {why}") for i in range(6)]
    notices.append(Notice("mb", "t", "warning", "layer 't' (permute → Transpose): not timed"))
    assert grouped_notices(notices) == [
        ("note", f"note: mb: 6 layers {why} (f.0, f.1, f.2, f.3 and 2 more)"),
        ("warning", "warning: mb: layer 't' (permute → Transpose): not timed"),
    ]
