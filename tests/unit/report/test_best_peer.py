"""× best peer: a model's speed-up against the fastest correct PyTorch peer in the same mode
(the suite's torch backends or a library's own module), named, from one function
(compare/best_peer.py) in every format: the run's terminal table, compare's terminal table,
report.md, report.html, end_to_end.csv and comparison.json."""

from __future__ import annotations

import csv
import json
from io import StringIO

import pytest
from rich.console import Console

from opbench.compare.best_peer import best_peer
from opbench.compare.compare import compare_run
from opbench.reference.model import ReferenceProfile, ReferenceTiming
from opbench.report.csvjson import comparison_from_dict, comparison_json, end_to_end_csv
from opbench.report.html import render_html
from opbench.report.markdown import render_markdown
from opbench.report.run_table import end_to_end_table
from opbench.report.table import end_to_end_table as compare_end_to_end_table
from opbench.results.model import Correctness, EndToEnd, LayerResult, RunResult

PASSED = Correctness(rel_l2=1e-4, max_abs=1e-3, nonfinite=0, tolerance=1e-2)
FAILED = Correctness(rel_l2=0.5, max_abs=1.0, nonfinite=0, tolerance=1e-2, failures=("rel_l2",))


def e2e(backend: str, mode: str, ms: float, correctness=PASSED) -> EndToEnd:
    samples = ((ms, ms * 1.01, ms * 0.99),)
    return EndToEnd("resnet50[batch=1]", backend, "ok", samples, "cuda-events", mode=mode,
                    correctness=correctness)  # fmt: skip


RUN = RunResult(
    suite="cnn",
    started_at="2026-11-28T00:00:00Z",
    device="cuda",
    end_to_end=(
        e2e("torch", "eager", 1.0),
        e2e("triton", "eager", 0.5),
        e2e("torch", "cuda_graph", 0.9),
        e2e("torch-compile", "cuda_graph", 0.683),
        e2e("library:torchvision-compile", "cuda_graph", 0.472),
        e2e("library:broken", "cuda_graph", 0.1, FAILED),  # a wrong answer is never the peer
        e2e("triton", "cuda_graph", 0.442),
        e2e("tilelang", "cuda_graph", 0.3, FAILED),  # a wrong forward has no speed-up
    ),
    layers=(
        LayerResult("resnet50[batch=1]", "fc", "linear", "triton", "ok", "float16", (1, 8), (1, 8),
                    samples_ms=((0.01, 0.011, 0.012),), correctness=PASSED),
    ),
)  # fmt: skip


def test_the_best_peer_is_the_fastest_correct_torch_row_in_the_mode() -> None:
    assert best_peer(RUN, "resnet50[batch=1]", "cuda_graph")[0] == "library:torchvision-compile"
    assert best_peer(RUN, "resnet50[batch=1]", "eager") == ("torch", 1.0)
    assert best_peer(RUN, "other", "eager") is None


def test_the_table_divides_by_the_best_peer_and_says_which() -> None:
    console = Console(file=StringIO(), width=400)
    console.print(end_to_end_table(RUN))
    lines = console.file.getvalue().splitlines()
    (graph,) = [line for line in lines if "triton" in line and "cuda_graph" in line]
    assert "1.07× (library:torchvision-compile)" in graph and "2.04×" in graph  # × torch too
    (peer,) = [line for line in lines if "torch-compile " in line]
    assert "×  (" not in peer and "× (" not in peer, "a peer has no speed-up over the peers"


def test_the_comparison_carries_the_best_peer_of_each_mode() -> None:
    from opbench.compare.summary import end_to_end_timings

    rows = {(t.backend, t.mode): t for t in end_to_end_timings(RUN, "resnet50[batch=1]")}
    graph = rows[("triton", "cuda_graph")]
    assert graph.best_peer == "library:torchvision-compile"
    assert abs(graph.vs_best_peer - 0.472 / 0.442) < 1e-9
    assert rows[("triton", "eager")].best_peer == "torch"
    assert rows[("torch-compile", "cuda_graph")].best_peer is None, "peers are not divided"
    assert rows[("tilelang", "cuda_graph")].best_peer is None


PEER = "library:torchvision-compile"
RATIO = 0.472 / 0.442  # 1.07×


@pytest.fixture(scope="module")
def comparison():
    timing = ReferenceTiming(engine="onnxruntime", source="ref.json", index=0, name="fc",
                             median_ms=0.02, min_ms=0.02, max_ms=0.02)  # fmt: skip
    profile = ReferenceProfile(
        engine="onnxruntime", source="ref.json", format="onnxruntime", layers=(timing,)
    )
    return compare_run(RUN, profile, backend="triton")


def test_compare_terminal_table_names_the_best_peer(comparison) -> None:
    console = Console(file=StringIO(), width=400)
    console.print(compare_end_to_end_table(comparison))
    lines = console.file.getvalue().splitlines()
    assert "× best peer" in lines[2]
    (graph,) = [line for line in lines if "triton " in line and "cuda_graph" in line]
    assert f"1.07× ({PEER})" in graph


def test_markdown_names_the_best_peer(comparison) -> None:
    (graph,) = [
        line for line in render_markdown(comparison).splitlines()
        if line.startswith(r"| resnet50\[batch=1\] | triton | cuda\_graph")
    ]  # fmt: skip
    assert f"| 1.07× ({PEER}) |" in graph


def test_html_names_the_best_peer_and_sorts_by_its_figure(comparison) -> None:
    page = render_html(comparison, ())
    assert "<th>× best peer</th>" in page or ">× best peer<" in page
    assert f'data-sort="{RATIO!r}">1.07× ({PEER})</td>' in page


def test_end_to_end_csv_carries_the_best_peer_and_its_figure(comparison) -> None:
    rows = {
        (r["backend"], r["mode"]): r for r in csv.DictReader(StringIO(end_to_end_csv(comparison)))
    }
    graph = rows[("triton", "cuda_graph")]
    assert graph["best_peer"] == PEER and float(graph["vs_best_peer"]) == pytest.approx(RATIO)
    assert rows[(PEER, "cuda_graph")]["vs_best_peer"] == "", "peers are not divided"


def test_comparison_json_keeps_the_best_peer_through_a_round_trip(comparison) -> None:
    data = json.loads(comparison_json(comparison))
    (graph,) = [e for e in data["models"][0]["end_to_end"]
                if (e["backend"], e["mode"]) == ("triton", "cuda_graph")]  # fmt: skip
    assert graph["best_peer"] == PEER and graph["vs_best_peer"] == pytest.approx(RATIO)
    again = comparison_from_dict(data).models[0].end_to_end
    assert again == comparison.models[0].end_to_end
