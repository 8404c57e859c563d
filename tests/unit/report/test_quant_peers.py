"""× torch-int8 and × torch-fp8: the primary backend against PyTorch's own quantized GEMM on
the rows of that quant, in the run table, the compare rows and every report file; empty on a
fused group the peer did not run whole; absent when no row has the peer's time."""

from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from opbench.compare.compare import compare_run
from opbench.compare.model import QUANT_PEERS, Comparison, QuantPeer
from opbench.reference.model import ReferenceProfile
from opbench.report.csvjson import CSV_COLUMNS, comparison_csv, comparison_json, read_comparison
from opbench.report.facts import layer_facts, shown_peers
from opbench.report.html import render_html
from opbench.report.markdown import render_markdown
from opbench.report.run_table import run_columns
from opbench.results.model import RunResult
from tests.unit.report.test_reports import ref, result

INT8, FP8 = QUANT_PEERS
FUSED = "f8c + res"  # a triton group: fp8 linear + residual add; the peer ran the linear only


def peer_run(*drop: str) -> RunResult:
    """Every kind of row, less the results of the backends in `drop`. Each result's samples
    are its ms times the same factors, so ratios of medians are ratios of these ms."""
    layers = (
        result("q8", 0.1, quant="int8"),
        result("q8", 0.3, backend="torch", quant="int8"),
        result("q8", 0.2, backend="torch-int8", quant="int8"),
        result("f8", 0.1, quant="fp8", dtype="bfloat16"),
        result("f8", 0.4, backend="torch", quant="fp8", dtype="bfloat16"),
        result("f8", 0.25, backend="torch-fp8", quant="fp8", dtype="bfloat16"),
        result("f8c", 0.1, quant="fp8", covers=("f8c", "res")),
        result("f8c", 0.15, backend="torch", quant="fp8"),
        result("res", 0.05, backend="torch", op="add"),
        # 0.3 / 0.1 would read 3× if the linear alone stood for the group: it must not
        result("f8c", 0.3, backend="torch-fp8", quant="fp8"),
        result("plain", 0.1),
        result("plain", 0.2, backend="torch"),
    )
    return RunResult(
        suite="peers",
        started_at="2026-11-25T00:00:00Z",
        device="cuda",
        complete=True,
        env={"peaks": {"tflops": 700.0, "gbps": 4000.0}},
        layers=tuple(r for r in layers if r.backend not in drop),
    )


def compared(run: RunResult) -> Comparison:
    names = ("q8", "f8", "f8c", "res", "plain")
    profile = ReferenceProfile(
        "onnxruntime", "ref.json", "onnxruntime", tuple(ref(n, 1.0, i) for i, n in enumerate(names))
    )
    return compare_run(run, profile)


@pytest.fixture(scope="module")
def comparison() -> Comparison:
    return compared(peer_run())


def test_compare_rows_carry_each_peer_on_its_own_quant(comparison: Comparison) -> None:
    rows = {row.label: row for row in comparison.rows}
    assert set(rows) == {"q8", "f8", FUSED, "plain"}
    assert rows["q8"].vs_torch_int8 == pytest.approx(2.0) and rows["q8"].vs_torch_fp8 is None
    assert rows["f8"].vs_torch_fp8 == pytest.approx(2.5) and rows["f8"].vs_torch_int8 is None
    assert rows["f8"].vs_peer(FP8) == rows["f8"].vs_torch_fp8
    # the fused group against torch, which ran both of its layers, but not against the peer
    assert rows[FUSED].vs_torch == pytest.approx(2.0)
    assert rows[FUSED].quant == "fp8" and rows[FUSED].vs_torch_fp8 is None
    assert rows["plain"].vs_torch_int8 is None and rows["plain"].vs_torch_fp8 is None
    assert shown_peers(comparison) == (INT8, FP8)
    assert layer_facts(comparison, rows["f8"]).dtype == "bfloat16 fp8"


def _run_table(run: RunResult) -> dict[str, list[str]]:
    return {str(col.header): [c.plain for c in col.cells] for col in run_columns(run)}


def test_run_table_shows_the_fp8_peer_beside_the_int8_one() -> None:
    run = peer_run()
    table = _run_table(run)
    headers = list(table)
    assert headers.index("× torch") < headers.index("× torch-int8") < headers.index("× torch-fp8")
    cell = {
        ("+".join(r.members), r.backend): (table["× torch-int8"][i], table["× torch-fp8"][i])
        for i, r in enumerate(run.layers)
    }
    assert cell["q8", "triton"] == ("2.00×", "—")
    assert cell["f8", "triton"] == ("—", "2.50×")
    assert cell["f8", "torch"][1].startswith("0.6")  # torch eager: the fp8 layer unquantized
    assert cell["f8", "torch-fp8"] == ("—", "—")
    assert cell["f8c+res", "triton"] == ("—", "—")  # the peer has no time for the add
    assert cell["plain", "triton"] == ("—", "—")
    assert "torch-f8" in table["backend"]


def test_run_table_without_a_peer_has_no_column() -> None:
    assert "× torch-fp8" not in _run_table(peer_run("torch-fp8"))
    assert "× torch-int8" not in _run_table(peer_run("torch-int8"))
    assert {"× torch-int8", "× torch-fp8"}.isdisjoint(
        _run_table(peer_run("torch-int8", "torch-fp8"))
    )


def _markdown_rows(md: str) -> dict[str, dict[str, str]]:
    lines = [line for line in md.splitlines() if line.startswith("| ")]
    start = next(i for i, line in enumerate(lines) if line.startswith("| layer | op |"))
    header = [h.strip() for h in lines[start].strip("|").split("|")]
    rows = {}
    for line in lines[start + 1 :]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) != len(header):
            break
        rows[cells[0]] = dict(zip(header, cells, strict=True))
    return rows


def test_markdown_columns(comparison: Comparison) -> None:
    rows = _markdown_rows(render_markdown(comparison))
    assert rows["q8"]["× torch-int8"] == "2.00×" and rows["q8"]["× torch-fp8"] == "–"
    assert rows["f8"]["× torch-fp8"] == "2.50×" and rows["f8"]["× torch-int8"] == "–"
    assert rows["f8"]["dtype"] == "bfloat16 fp8"
    fused = rows[FUSED.replace("+", "\\+")]  # markdown escapes the label's "+"
    assert fused["× torch"] == "2.00×" and fused["× torch-fp8"] == "–"


def _html_cells(html: str, peer: QuantPeer) -> dict[str, str]:
    """The peer's cell of each layer row, by the row's label (its first cell)."""
    table = html[html.index('id="layers"') :]
    heads = re.findall(r"<th>(.*?)</th>", table[: table.index("</thead>")])
    column = heads.index(peer.header)
    out = {}
    for row in re.findall(r"<tr[^>]*data-verdict[^>]*>(.*?)</tr>", table):
        cells = re.findall(r"<td[^>]*>(.*?)</td>", row)
        out[cells[0]] = cells[column]
    return out


def test_html_columns(comparison: Comparison) -> None:
    html = render_html(comparison, [])
    assert "<th>× torch-int8</th>" in html and "<th>× torch-fp8</th>" in html
    fp8, int8 = _html_cells(html, FP8), _html_cells(html, INT8)
    assert fp8["f8"] == "2.50×" and int8["f8"] == "–"
    assert int8["q8"] == "2.00×" and fp8["q8"] == "–"
    assert fp8[FUSED] == "–"
    assert '<td class="num" data-sort="2.5">2.50×</td>' in html


def test_csv_and_json_carry_both_peers(comparison: Comparison, tmp_path: Path) -> None:
    columns = list(CSV_COLUMNS)
    assert columns[-2:] == ["vs_torch_int8", "vs_torch_fp8"]  # appended: older columns stay put
    lines = list(csv.DictReader(io.StringIO(comparison_csv(comparison))))
    primary = {line["layers"]: line for line in lines if line["primary"] == "yes"}
    assert float(primary["f8"]["vs_torch_fp8"]) == pytest.approx(2.5)
    assert primary["f8"]["vs_torch_int8"] == "" and primary[FUSED]["vs_torch_fp8"] == ""
    assert float(primary["q8"]["vs_torch_int8"]) == pytest.approx(2.0)
    assert all(line["vs_torch_fp8"] == "" for line in lines if line["primary"] == "no")
    (tmp_path / "comparison.json").write_text(comparison_json(comparison))
    assert read_comparison(tmp_path) == comparison


def test_a_file_from_before_the_fp8_peer_reads_back(comparison: Comparison, tmp_path: Path) -> None:
    data = json.loads(comparison_json(comparison))
    for row in data["rows"]:
        del row["vs_torch_fp8"]
    (tmp_path / "comparison.json").write_text(json.dumps(data))
    again = read_comparison(tmp_path)
    assert [r.vs_torch_int8 for r in again.rows] == [r.vs_torch_int8 for r in comparison.rows]
    assert all(r.vs_torch_fp8 is None for r in again.rows)
    assert shown_peers(again) == (INT8,)


@pytest.mark.parametrize(
    "drop",
    [("torch-fp8",), ("torch-fp8", "torch-int8")],
    ids=["no fp8 peer", "no peer"],
)
def test_reports_without_a_peer_time_have_no_column(drop: tuple[str, ...]) -> None:
    c = compared(peer_run(*drop))
    assert FP8 not in shown_peers(c)
    assert (INT8 in shown_peers(c)) == ("torch-int8" not in drop)
    assert "× torch-fp8" not in render_markdown(c) and "× torch-fp8" not in render_html(c, [])
    lines = list(csv.DictReader(io.StringIO(comparison_csv(c))))
    assert all(line["vs_torch_fp8"] == "" for line in lines)  # the field stays, empty


def test_a_peer_that_failed_shows_no_column() -> None:
    """The column is there for some row's time, not for the peer's mere presence in the run."""
    run = peer_run()
    failed = tuple(
        replace(r, status="error", samples_ms=(), message="no fp8 on this card")
        if r.backend == "torch-fp8"
        else r
        for r in run.layers
    )
    c = compared(replace(run, layers=failed))
    assert shown_peers(c) == (INT8,)
    assert "× torch-fp8" not in render_markdown(c)
