"""× best peer: a whole model's forward against the fastest correct PyTorch peer in the same
mode (the suite's torch backends, or a library's own module timed beside them as
`library:<name>`), named. A speed-up is only as honest as the peer it divides, so every
report (the run's terminal table, compare's terminal table, report.md, report.html,
end_to_end.csv, comparison.json) takes this figure from here and from nowhere else.

Pure Python: no torch, no triton.
"""

from __future__ import annotations

from opbench.compare.rows import is_torch_peer
from opbench.results.model import EndToEnd, RunResult


def _median(e2e: EndToEnd) -> float | None:
    stats = e2e.stats
    return stats.median if stats is not None and e2e.ran else None


def best_peer(run: RunResult, model: str, mode: str) -> tuple[str, float] | None:
    """The fastest correct PyTorch peer of `model` in `mode` (backend, median ms): what a
    user at their best would run. A peer whose outputs were wrong is never the peer."""
    found = [
        (ms, e.backend)
        for e in run.end_to_end
        if e.model == model and e.mode == mode and is_torch_peer(e.backend) and e.correct
        if (ms := _median(e)) is not None and ms > 0
    ]
    if not found:
        return None
    ms, backend = min(found)
    return backend, ms


def vs_best_peer(run: RunResult, e2e: EndToEnd) -> tuple[str, float] | None:
    """(the best peer's name, its median / this forward's median) for a forward that is not
    itself a PyTorch peer, ran to a time on a device (not the interpreter), and whose outputs
    did not fail their check; None otherwise."""
    if is_torch_peer(e2e.backend) or e2e.interpreted:
        return None
    if e2e.correctness is not None and not e2e.correctness.passed:
        return None
    ms = _median(e2e)
    best = best_peer(run, e2e.model, e2e.mode)
    if best is None or ms is None or ms <= 0:
        return None
    return best[0], best[1] / ms
