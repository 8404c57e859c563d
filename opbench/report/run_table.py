"""The table `opbench run` ends with: one row per layer and backend. Renders; computes nothing
that is not a plain function of the results."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table
from rich.text import Text

from opbench.results.model import LayerResult, RunResult, Status


def torch_time(run: RunResult, result: LayerResult) -> float | None:
    """Sum of torch eager medians over the layers this result covers (fusion aware)."""
    total = 0.0
    for name in result.members:
        ref = run.find(result.model, name, "torch")
        if ref is None or ref.median_ms is None or ref.status != Status.OK:
            return None
        total += ref.median_ms
    return total


def speedup_vs_torch(run: RunResult, result: LayerResult) -> float | None:
    if result.backend == "torch" or result.median_ms is None or result.interpreted:
        return None
    base = torch_time(run, result)
    return base / result.median_ms if base else None


def _fmt_ms(result: LayerResult) -> str:
    stats = result.stats
    if stats is None:
        return "—"
    lo, hi = stats.ci95
    half = max(stats.median - lo, hi - stats.median)
    return (
        f"{stats.median:.4f} ± {half:.4f}"
        if stats.median < 10
        else f"{stats.median:.2f} ± {half:.2f}"
    )


def _throughput(result: LayerResult) -> str:
    if result.median_ms is None or result.interpreted:
        return "—"
    if result.flops and result.bytes and result.flops / result.bytes > 20:
        return f"{result.tflops:.1f} TFLOP/s"
    if result.bytes:
        return f"{result.gbps:.0f} GB/s"
    if result.flops:
        return f"{result.tflops:.2f} TFLOP/s"
    return "—"


def status_text(result: LayerResult) -> Text:
    if result.status == Status.UNSUPPORTED:
        return Text("unsupported", style="yellow")
    if result.status == Status.ERROR:
        return Text("error", style="bold red")
    if result.correctness is not None and not result.correctness.passed:
        return Text("wrong", style="bold red")
    return Text("ok", style="green")


def run_table(run: RunResult) -> Table:
    table = Table(title=f"opbench run · {run.suite} · {run.device}", title_justify="left")
    for column, justify in (
        ("model", "left"),
        ("layer", "left"),
        ("backend", "left"),
        ("median ms ± CI95", "right"),
        ("throughput", "right"),
        ("× torch", "right"),
        ("rel. error", "right"),
        ("status", "left"),
    ):
        table.add_column(column, justify=justify, overflow="fold")
    previous_model = None
    for result in run.layers:
        speedup = speedup_vs_torch(run, result)
        corr = result.correctness
        error = (
            "—"
            if corr is None
            else (f"{corr.rel_l2:.1e}" if corr.nonfinite == 0 else f"{corr.nonfinite} NaN/Inf")
        )
        layer = "+".join(result.members)
        ms = _fmt_ms(result)
        if result.interpreted and result.median_ms is not None:
            ms = f"({ms})"
        status = status_text(result)
        if result.message and result.status != Status.OK:
            status.append(f" {result.message}", style="dim")
        table.add_row(
            escape(result.model) if result.model != previous_model else "",
            escape(layer),
            result.backend,
            ms,
            _throughput(result),
            "—" if speedup is None else f"{speedup:.2f}×",
            error,
            status,
        )
        previous_model = result.model
    return table


def end_to_end_table(run: RunResult) -> Table | None:
    if not run.end_to_end:
        return None
    table = Table(title="whole model: end to end vs the sum of its layers", title_justify="left")
    for column in ("model", "backend", "end-to-end ms", "sum of layers ms", "status"):
        table.add_column(column)
    for e2e in run.end_to_end:
        layer_sum = sum(
            r.median_ms
            for r in run.layers
            if r.model == e2e.model and r.backend == e2e.backend and r.median_ms
        )
        stats = e2e.stats
        table.add_row(
            escape(e2e.model),
            e2e.backend,
            f"{stats.median:.4f}" if stats else "—",
            f"{layer_sum:.4f}" if layer_sum else "—",
            e2e.status + (f" {e2e.message}" if e2e.message else ""),
        )
    return table


def failures(run: RunResult) -> list[LayerResult]:
    """Results that make `opbench run` exit 3: errors and failed correctness."""
    return [
        r
        for r in run.layers
        if r.status == Status.ERROR or (r.status == Status.OK and not r.correct)
    ]
