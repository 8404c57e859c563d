"""× best peer in the end-to-end table: a model's speed-up against the fastest correct PyTorch
peer in the same mode (the suite's torch backends or a library's own module), named."""

from __future__ import annotations

from io import StringIO

from rich.console import Console

from opbench.report.run_table import best_peer, end_to_end_table
from opbench.results.model import Correctness, EndToEnd, RunResult

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
    ),
)


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
