"""Every report file: written together, well-formed, names escaped, re-readable."""

from __future__ import annotations

import csv
import io
import json
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import pytest
from rich.console import Console

from opbench.compare.compare import compare_run
from opbench.compare.model import Verdict
from opbench.errors import InputError
from opbench.reference.model import ReferenceProfile, ReferenceTiming, RefStatus
from opbench.report import files as report_files
from opbench.report.csvjson import CSV_COLUMNS, comparison_csv, comparison_json, read_comparison
from opbench.report.files import HTML_FILE, MARKDOWN_FILE, write_reports
from opbench.report.html import render_html
from opbench.report.markdown import render_markdown
from opbench.report.plots import PLOT_NAMES, render_plots
from opbench.report.table import print_comparison
from opbench.results.model import Correctness, EndToEnd, LayerResult, RunResult

EVIL = "<script>alert('x')</script>"
GOOD = Correctness(rel_l2=1e-6, max_abs=1e-6, nonfinite=0, tolerance=1e-4)


def result(layer: str, ms: float, backend: str = "triton", **kw) -> LayerResult:
    values = dict(
        model="m[batch=2]",
        layer=layer,
        op="linear",
        backend=backend,
        status="ok",
        dtype="float16",
        input_shape=(2, 8),
        output_shape=(2, 8),
        samples_ms=(tuple(ms * (1 + 0.02 * (i % 5)) for i in range(25)),),
        correctness=GOOD,
        flops=4 * 10**9,
        bytes=3 * 10**7,
    )
    values.update(kw)
    return LayerResult(**values)


def ref(
    name: str, ms: float | None, index: int, status: str = RefStatus.TIMED, raw_type: str = "Gemm"
):
    return ReferenceTiming(
        engine="onnxruntime",
        source="ref|<b>.json",
        index=index,
        name=name,
        median_ms=ms,
        min_ms=ms and ms * 0.9,
        max_ms=ms and ms * 1.1,
        status=status,
        raw_type=raw_type,
    )


LOOSE = Correctness(rel_l2=1e-3, max_abs=1e-3, nonfinite=0, tolerance=5e-2, loose_tolerance=True)


def e2e(backend: str, mode: str, ms: float, **kw) -> EndToEnd:
    samples = (tuple(ms * (1 + 0.01 * (i % 3)) for i in range(12)),)
    return EndToEnd("m[batch=2]", backend, "ok", samples, "cuda-events", mode=mode, **kw)


@pytest.fixture(scope="module")
def comparison():
    run = RunResult(
        suite="suite",
        started_at="2026-11-22T00:00:00Z",
        device="cuda",
        complete=True,
        env={"gpu": "NVIDIA H200", "peaks": {"tflops": 700.0, "gbps": 4000.0}},
        layers=(
            result(EVIL, 0.1, host_ms=0.02, stream_ms=0.3),  # launch-bound
            result(EVIL, 0.2, backend="torch"),
            result("fc|2", 0.5),
            result("fc|2", 0.4, backend="torch"),
            result("bad", 0.1, correctness=None),
            result("bad", 0.1, backend="torch"),
            result("err", 0.1, status="error", samples_ms=(), message="CUDA <oom> & more"),
            result("lonely", 0.1),
            result("interp", 0.1, interpreted=True),
            result("q8", 0.1, quant="int8", correctness=LOOSE),
            result("q8", 0.3, backend="torch"),
            result("q8", 0.2, backend="torch-int8"),
            result("twin_a", 0.1),
            result("twin-a", 0.1),
        ),
        end_to_end=(
            e2e("triton", "eager", 1.0),
            e2e("torch", "eager", 2.0),
            e2e("triton", "cuda_graph", 0.5),
            e2e("torch", "cuda_graph", 0.8),
        ),
    )
    profile = ReferenceProfile(
        engine="onnxruntime",
        source="ref|<b>.json",
        format="onnxruntime",
        total_ms=5.0,
        layers=(
            ref(f"/{EVIL}/MatMul", 1.0, 0),
            ref("fc|2", 0.3, 1),
            ref("bad", 1.0, 2),
            ref("err", 0.2, 3),
            ref("<img src=x onerror=alert(1)>", 0.1, 4, raw_type="Custom"),
            ref("reorder", 0.01, 5, RefStatus.OVERHEAD),
            ref("interp", 1.0, 6),
            ref("q8", 1.0, 7),
            ref("TWIN A", 1.0, 8),  # fits twin_a and twin-a: ambiguous
        ),
    )
    return compare_run(run, profile, run_label="reports/suite/<run>")


def test_the_fixture_covers_every_verdict(comparison):
    verdicts = {row.label: row.primary.verdict for row in comparison.rows}
    assert set(verdicts.values()) == set(Verdict.ALL)
    assert verdicts["interp"] == Verdict.NOT_MEASURED
    assert verdicts["lonely"] == Verdict.MISSING
    assert verdicts["twin_a + twin-a"] == Verdict.UNCERTAIN
    # the model is not judged PASS or FAIL while a timed layer is MISSING... it is judged on
    # the end-to-end eager time, and says so
    model = comparison.models[0]
    assert model.basis == "end-to-end (eager)" and model.missing == ("lonely",)
    assert {(e.backend, e.mode): e.vs_torch for e in model.end_to_end} == {
        ("triton", "eager"): pytest.approx(2.0),
        ("torch", "eager"): None,
        ("triton", "cuda_graph"): pytest.approx(1.6),
        ("torch", "cuda_graph"): None,
    }


def test_all_files_written(comparison, tmp_path: Path):
    written = write_reports(comparison, tmp_path)
    names = sorted(p.name for p in written)
    expected = ["comparison.csv", "comparison.json", "end_to_end.csv", "report.html", "report.md"]
    expected += [f"{n}.{ext}" for n in PLOT_NAMES for ext in ("png", "svg")]
    assert names == sorted(expected)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(expected)  # no staging folder left
    for name in PLOT_NAMES:
        assert (tmp_path / f"{name}.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
        ET.fromstring((tmp_path / f"{name}.svg").read_bytes())  # well-formed XML


def test_json_round_trip(comparison, tmp_path: Path):
    path = tmp_path / "comparison.json"
    path.write_text(comparison_json(comparison))
    json.loads(path.read_text())  # strict JSON (no NaN/Infinity tokens)
    again = read_comparison(tmp_path)
    assert again == comparison
    assert render_html(again, []) == render_html(comparison, [])


@pytest.mark.parametrize(
    ("text", "message"),
    [("{", "not valid JSON"), ("[]", "JSON object"), ('{"schema_version": 99}', "schema_version")],
)
def test_bad_comparison_files(tmp_path: Path, text: str, message: str):
    path = tmp_path / "comparison.json"
    path.write_text(text)
    with pytest.raises(InputError, match=message):
        read_comparison(path)
    with pytest.raises(InputError, match="opbench compare"):
        read_comparison(tmp_path / "elsewhere")


def test_csv_has_one_line_per_row_and_backend(comparison):
    lines = list(csv.DictReader(io.StringIO(comparison_csv(comparison))))
    assert tuple(lines[0]) == CSV_COLUMNS
    assert len(lines) == len(comparison.rows) * len(comparison.backends)
    primary = [line for line in lines if line["primary"] == "yes"]
    assert {line["backend"] for line in primary} == {"triton"}
    evil = next(line for line in primary if line["layers"] == EVIL)
    assert evil["verdict"] == Verdict.PASS
    assert float(evil["speedup_lo"]) <= float(evil["speedup"]) <= float(evil["speedup_hi"])


class _Collector(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.text: list[str] = []
        self.imgs: list[dict[str, str | None]] = []
        self.ids: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        attrs = dict(attrs)
        if attrs.get("id"):
            self.ids.append(attrs["id"])
        if tag == "img":
            self.imgs.append(attrs)

    def handle_data(self, data):
        self.text.append(data)


def test_html_is_self_contained_and_escaped(comparison):
    html = render_html(comparison, render_plots(comparison))
    parsed = _Collector()
    parsed.feed(html)
    assert parsed.tags.count("script") == 1  # the table sorter, inline, at the end
    assert EVIL not in html and "<img src=x" not in html
    assert EVIL in "".join(parsed.text)  # shown, as text
    assert "CUDA <oom> & more" in "".join(parsed.text)
    images = [img["src"].split(",")[0] for img in parsed.imgs]
    assert images == ["data:image/svg+xml;base64"] * len(PLOT_NAMES)
    assert {"layers", "summary", "end-to-end", "unmatched-reference", "overhead"} <= set(parsed.ids)
    assert '<tr class="not-measured" data-verdict="NOT-MEASURED">' in html
    assert '<tr class="missing" data-verdict="MISSING">' in html
    for head in ("shape", "dtype", "FLOPs", "bytes", "% of roof", "× torch-int8", "host ms"):
        assert f"<th>{head}</th>" in html
    assert "launch-bound" in html and "loose tolerance" in html
    assert "http://" not in html.replace("http://www.w3.org", "")  # nothing fetched


def test_markdown_escapes_names_and_stays_small(comparison):
    md = render_markdown(comparison)
    assert "<script>" not in md and "<img" not in md
    assert "&lt;script&gt;" in md
    assert "fc\\|2" in md  # a pipe in a name cannot break the table
    table = [line for line in md.splitlines() if line.startswith("| ")]
    lines = md.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| layer | op |"))
    layers = lines[start : lines.index("", start)]
    widths = {line.replace("\\|", "").count("|") for line in layers}
    assert len(widths) == 1  # every layer line has the header's cell count
    assert len(md) < 65536
    assert "Unmatched reference layers (1)" in md
    interp = next(line for line in table if line.startswith("| interp |"))
    assert "NOT-MEASURED" in interp and "(interpreted)" in interp
    assert "MISSING" in next(line for line in table if line.startswith("| lonely |"))
    q8 = next(line for line in table if line.startswith("| q8 |"))
    assert "3.00×" in q8 and "2.00×" in q8 and "loose tolerance" in q8  # × torch, × torch-int8
    assert "launch-bound" in md
    assert "| triton | cuda\\_graph |" in md  # both end-to-end modes are listed


def test_markdown_truncates_long_tables():
    from opbench.report import markdown

    run = RunResult(
        suite="big",
        started_at="t",
        device="cuda",
        layers=tuple(result(f"l{i}", 0.1) for i in range(markdown.MAX_ROWS + 20)),
    )
    profile = ReferenceProfile(
        "onnxruntime",
        "r",
        "onnxruntime",
        tuple(ref(f"l{i}", 1.0, i) for i in range(markdown.MAX_ROWS + 20)),
    )
    md = render_markdown(compare_run(run, profile))
    assert "20 more rows" in md
    assert len(md) < 65536


def test_terminal_table_prints_names_literally(comparison):
    out = io.StringIO()
    print_comparison(Console(file=out, width=200, color_system=None), comparison)
    text = out.getvalue()
    assert "alert('x')" in text
    assert "unmatched reference layers (1)" in text
    for verdict in Verdict.ALL:
        assert verdict in text
    assert "model verdict" in text and "end-to-end (eager)" in text


def test_terminal_table_fits_100_columns_and_wide_shows_all(comparison):
    narrow, wide = io.StringIO(), io.StringIO()
    print_comparison(Console(file=narrow, width=100, color_system=None), comparison)
    print_comparison(Console(file=wide, width=100, color_system=None), comparison, full=True)
    lines = narrow.getvalue().splitlines()
    table = "\n".join(lines[: next(i for i, line in enumerate(lines) if line.startswith("└")) + 1])
    assert max(len(line) for line in table.splitlines()) <= 100
    header = next(line for line in wide.getvalue().splitlines() if "layer" in line)
    assert "host" not in table and "host" in header and "stream" in header
    # the reasons dropped from the table are listed under it
    assert "interp: timed in Triton's CPU interpreter" in narrow.getvalue()


def test_nothing_half_written_when_rendering_fails(comparison, tmp_path: Path, monkeypatch):
    (tmp_path / MARKDOWN_FILE).write_text("old report\n")

    def broken(_comparison, _plots):
        raise RuntimeError("renderer crashed")

    monkeypatch.setattr(report_files, "render_html", broken)
    with pytest.raises(RuntimeError):
        write_reports(comparison, tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == [MARKDOWN_FILE]
    assert (tmp_path / MARKDOWN_FILE).read_text() == "old report\n"


def test_report_without_json_keeps_the_existing_one(comparison, tmp_path: Path):
    write_reports(comparison, tmp_path)
    (tmp_path / HTML_FILE).unlink()
    before = (tmp_path / "comparison.json").stat().st_mtime_ns
    written = write_reports(read_comparison(tmp_path), tmp_path, with_json=False)
    assert "comparison.json" not in [p.name for p in written]
    assert (tmp_path / HTML_FILE).is_file()
    assert (tmp_path / "comparison.json").stat().st_mtime_ns == before


def test_plots_without_data_still_render():
    run = RunResult(
        suite="s",
        started_at="t",
        device="cuda",
        layers=(result("x", 0.1, status="error", samples_ms=(), flops=0, bytes=0),),
    )
    profile = ReferenceProfile("onnxruntime", "r", "onnxruntime", (ref("x", 1.0, 0),))
    plots = render_plots(compare_run(run, profile))
    assert [p.name for p in plots] == list(PLOT_NAMES)
    assert all(p.png.startswith(b"\x89PNG") for p in plots)
