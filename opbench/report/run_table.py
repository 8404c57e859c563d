"""The table `opbench run` ends with: one row per layer and backend. Renders; computes nothing
that is not a plain function of the results. Optional columns give way at narrow widths."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table
from rich.text import Text

from opbench.compare.best_peer import vs_best_peer
from opbench.compare.model import QUANT_PEERS, QuantPeer
from opbench.report.columns import Column, FittedTable
from opbench.report.style import MARKS, short_backend
from opbench.results.model import EndToEnd, LayerResult, Outcome, RunResult, Status

TORCH = "torch"


def baseline_time(run: RunResult, result: LayerResult, backend: str = TORCH) -> float | None:
    """Sum of `backend`'s medians over the layers this result covers (fusion aware)."""
    total = 0.0
    for name in result.members:
        ref = run.find(result.model, name, backend)
        if ref is None or ref.median_ms is None or not ref.ran or ref.interpreted:
            return None
        total += ref.median_ms
    return total


def speedup_vs(run: RunResult, result: LayerResult, backend: str = TORCH) -> float | None:
    if result.backend == backend or result.median_ms is None or result.interpreted:
        return None
    base = baseline_time(run, result, backend)
    return base / result.median_ms if base else None


def _fmt_ms(result: LayerResult) -> str:
    stats = result.stats
    if stats is None:
        return "—"
    lo, hi = stats.ci95
    half = max(stats.median - lo, hi - stats.median)
    text = (
        f"{stats.median:.4f} ± {half:.4f}"
        if stats.median < 10
        else f"{stats.median:.2f} ± {half:.2f}"
    )
    return f"({text})" if result.interpreted else text


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


def marks(result: LayerResult) -> str:
    """The MARKS symbols of a result: interpreted, launch-bound, loose tolerance."""
    corr = result.correctness
    flags = (
        result.interpreted and result.median_ms is not None,
        result.launch_bound,
        corr is not None and corr.loose_tolerance,
    )
    return "".join(symbol for (symbol, _, _), on in zip(MARKS, flags, strict=True) if on)


def _time_cell(result: LayerResult) -> Text:
    return Text(_fmt_ms(result) + marks(result), style="dim" if result.interpreted else "")


def legend(results: list[LayerResult]) -> str:
    used = "".join(marks(r) for r in results)
    words = {"interpreted": "NOT-MEASURED, interpreted"}
    return "\n".join(
        f"{symbol} {words.get(word, word)}: {meaning}"
        for symbol, word, meaning in MARKS
        if symbol in used
    )


_OUTCOME_STYLES = {
    Outcome.OK: "green",
    Status.UNSUPPORTED: "yellow",
    Outcome.UNCHECKED: "yellow",
}


def status_text(result: LayerResult) -> Text:
    """ok / unsupported / error / wrong (with the failed checks' reasons)."""
    corr = result.correctness
    word = result.outcome
    text = Text(word, style=_OUTCOME_STYLES.get(word, "bold red"))
    if word == Outcome.WRONG and corr is not None:
        text.append(": " + "; ".join(corr.reasons), style="red")
    if result.message and not result.ran:
        text.append(f" {result.message}", style="dim")
    return text


def _error(result: LayerResult) -> str:
    corr = result.correctness
    if corr is None:
        return "—"
    return f"{corr.rel_l2:.1e}" if corr.nonfinite == 0 else f"{corr.nonfinite} NaN/Inf"


def _x(value: float | None) -> Text:
    return Text("—" if value is None else f"{value:.2f}×")


def _ms(value: float | None) -> Text:
    return Text("—" if value is None else f"{value:.4f}")


def run_columns(run: RunResult) -> list[Column]:
    results = list(run.layers)
    shown_models = []
    previous = None
    for r in results:
        shown_models.append(Text(r.model if r.model != previous else ""))
        previous = r.model
    columns = [
        Column("model", shown_models, max_width=18),
        Column("layer", [Text("+".join(r.members)) for r in results], max_width=20),
        Column("backend", [Text(short_backend(r.backend)) for r in results]),
        Column("median ms ± CI95", [_time_cell(r) for r in results], justify="right"),
        Column("throughput", [Text(_throughput(r)) for r in results], 3, "right"),
        Column("× torch", [_x(speedup_vs(run, r)) for r in results], 1, "right"),
    ]
    columns += [
        _peer_column(run, peer)
        for peer in QUANT_PEERS
        if any(r.backend == peer.backend for r in results)
    ]
    for header, attr, drop in (("host ms", "host_ms", 5), ("stream ms", "stream_ms", 4)):
        if any(getattr(r, attr) is not None for r in results):
            columns.append(Column(header, [_ms(getattr(r, attr)) for r in results], drop, "right"))
    columns += [
        Column("rel. error", [Text(_error(r)) for r in results], 6, "right"),
        Column("status", [status_text(r) for r in results], max_width=48),
    ]
    # a column with nothing in it (× torch in a torch-only run) says nothing
    return [c for c in columns if c.drop == 0 or any(x.plain not in ("", "—") for x in c.cells)]


def _peer_column(run: RunResult, peer: QuantPeer) -> Column:
    """× torch-int8 / × torch-fp8: each row of the peer's quant against the peer's time on the
    same layers. The peer runs the quantized linears alone, so a fused group (norm + linear,
    linear + add) finds no peer time for its other members and its cell stays empty: the
    linear's time alone is not the same work."""
    cells = [
        _x(speedup_vs(run, r, peer.backend) if r.quant == peer.quant else None) for r in run.layers
    ]
    return Column(peer.header, cells, 2, "right")


def run_table(run: RunResult, full: bool = False, wide: bool = False) -> FittedTable:
    """The run's table, fitted to the console's width when printed (`full`: every column;
    `wide`: names unwrapped too)."""
    columns = run_columns(run)
    if wide:
        for column in columns:
            column.max_width = None
    return FittedTable(
        columns,
        full,
        title=f"opbench run · {escape(run.suite)} · {run.device}",
        title_justify="left",
        caption=escape(legend(list(run.layers))) or None,
        caption_justify="left",
    )


def run_summary(run: RunResult) -> list[str]:
    """A few lines for a log: per model and backend, how many results and how they ended, the
    summed median time, and the slowest layer."""
    lines = []
    keys = dict.fromkeys((r.model, r.backend) for r in run.layers)
    for model, backend in keys:
        mine = [r for r in run.layers if r.model == model and r.backend == backend]
        outcomes: dict[str, int] = {}
        for r in mine:
            outcomes[r.outcome] = outcomes.get(r.outcome, 0) + 1
        ended = ", ".join(f"{n} {word}" for word, n in outcomes.items())
        timed = [r for r in mine if r.median_ms is not None]
        total = sum(r.median_ms or 0.0 for r in timed)
        line = f"{model} · {short_backend(backend)}: {len(mine)} results ({ended})"
        if timed:
            slowest = max(timed, key=lambda r: r.median_ms or 0.0)
            line += (
                f"; {total:.4f} ms summed; slowest {'+'.join(slowest.members)} "
                f"{slowest.median_ms:.4f} ms"
            )
        lines.append(line + marks_note(mine))
    return lines


def marks_note(results: list[LayerResult]) -> str:
    interpreted = sum(1 for r in results if r.interpreted)
    return f"; {interpreted} interpreted (not performance figures)" if interpreted else ""


def _e2e_time(e2e: EndToEnd) -> float | None:
    stats = e2e.stats
    return stats.median if stats and e2e.ran else None


def end_to_end_table(run: RunResult) -> Table | None:
    """Each model's whole forward per backend and mode (eager, cuda_graph), with the sum of
    its layers, the speed-up over torch eager in the same mode and over the best PyTorch peer
    in the same mode (named: the suite's torch backends, or a library's module), the check of
    its outputs against the whole graph's reference, and its peak device memory beside the
    live activations' floor."""
    if not run.end_to_end:
        return None
    table = Table(title="whole model: end to end vs the sum of its layers", title_justify="left")
    columns = ("model", "backend", "mode", "end-to-end ms", "× torch", "× best peer",
               "sum of layers ms")  # fmt: skip
    for column in columns:
        table.add_column(
            column, justify="left" if column in ("model", "backend", "mode") else "right"
        )
    table.add_column("output check")
    table.add_column("peak MiB", justify="right")
    table.add_column("status")
    torch = {(e.model, e.mode): _e2e_time(e) for e in run.end_to_end if e.backend == TORCH}
    for e2e in run.end_to_end:
        layer_sum = sum(
            r.median_ms
            for r in run.layers
            if r.model == e2e.model and r.backend == e2e.backend and r.median_ms
        )
        ms, base = _e2e_time(e2e), torch.get((e2e.model, e2e.mode))
        vs = base / ms if base and ms and e2e.backend != TORCH and not e2e.interpreted else None
        best = vs_best_peer(run, e2e)
        vs_best = f"{best[1]:.2f}× ({best[0]})" if best else "—"
        status = e2e.status + (" · NOT-MEASURED (interpreted)" if e2e.interpreted else "")
        table.add_row(
            escape(e2e.model),
            e2e.backend,
            e2e.mode,
            f"{ms:.4f}" if ms is not None else "—",
            "—" if vs is None else f"{vs:.2f}×",
            vs_best,
            f"{layer_sum:.4f}" if layer_sum else "—",
            _check(e2e),
            _memory(e2e),
            status + (f" {e2e.message}" if e2e.message else ""),
        )
    return table


def _check(e2e: EndToEnd) -> str:
    """The whole-model check of one row, in a few words."""
    corr = e2e.correctness
    if corr is None:
        return "—"
    if corr.passed:
        return f"ok (rel_l2 {corr.rel_l2:.1e})"
    return "[bold red]FAIL[/]: " + escape("; ".join(corr.reasons))


def _memory(e2e: EndToEnd) -> str:
    """Measured peak (where measured) / the live activations' floor, and the planned
    buffers' bytes where the forward planned them, in MiB."""
    mib = 1024 * 1024
    live = f"{e2e.live_bytes / mib:.2f}" if e2e.live_bytes is not None else "—"
    planned = "" if e2e.planned_bytes is None else f", planned {e2e.planned_bytes / mib:.2f}"
    if e2e.peak_bytes is None:
        return f"— (live {live}{planned})"
    return f"{e2e.peak_bytes / mib:.2f} (live {live}{planned})"


def failures(run: RunResult) -> list[LayerResult]:
    """Results that make `opbench run` exit 3: errors and failed correctness."""
    return [
        r
        for r in run.layers
        if r.status in (Status.ERROR, Status.WRONG) or (r.status == Status.OK and not r.correct)
    ]
