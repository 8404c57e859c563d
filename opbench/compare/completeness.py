"""Whether a run holds every result it set out to produce, and which it lacks.

An interrupted run (Ctrl-C, SIGTERM, a lost rank, shares merged with --allow-partial) is
written with `complete: false`. `compare` and the regression gate judge what it holds and
never pass it: its missing layers could hold the regression or the missed target (exit 3,
as for a crashed layer, whose result is missing too).

Pure Python: no torch, no triton.
"""

from __future__ import annotations

from opbench.results.model import RunResult

SHOWN = 8  # missing layers named in the reason


def missing_layers(run: RunResult) -> list[str]:
    """`model/layer` (with the backends lacking, where others have a result) of every layer
    of the run's recorded suite that a backend planned for it has no result for, in suite
    order. A run made with --backend ran every layer on those backends. A --model or --layer
    selection is not recorded: a run walks the models in suite order, so the models before
    the first one with a result were not selected and are left out, but those after the
    last one may be named although a selection left them out."""
    have = {(r.model, m, r.backend) for r in run.layers for m in r.members}
    models = _models(run)
    listed = {b for m in models for la in m.get("layers") or () for b in la.get("backends") or ()}
    replaced = bool(set(run.backends) - listed)  # --backend replaced the suite's lists
    reached = {r.model for r in run.layers}
    first = next((i for i, m in enumerate(models) if m.get("name") in reached), 0)
    missing = []
    for model in models[first:]:
        for layer in model.get("layers") or ():
            name = layer.get("name")
            backends = run.backends if replaced else tuple(layer.get("backends") or ())
            lacking = [b for b in backends if (model.get("name"), name, b) not in have]
            if not lacking:
                continue
            label = f"{model.get('name')}/{name}"
            missing.append(
                label if len(lacking) == len(backends) else f"{label} ({', '.join(lacking)})"
            )
    return missing


def _models(run: RunResult) -> list[dict]:
    models = (run.suite_spec or {}).get("models") or ()
    return [m for m in models if isinstance(m, dict)]


def incomplete_reason(run: RunResult) -> str | None:
    """Why the run cannot pass as a whole: None for a complete run, else one line with the
    count of results and the layers it lacks."""
    if run.complete:
        return None
    count = (
        f"{len(run.layers)} of {run.planned} planned results"
        if run.planned
        else f"{len(run.layers)} results"
    )
    missing = missing_layers(run)
    shown = ", ".join(missing[:SHOWN]) + (
        f" and {len(missing) - SHOWN} more" if len(missing) > SHOWN else ""
    )
    lacking = f"; no result for {shown}" if missing else ""
    return f"the run is incomplete (interrupted?): {count}{lacking}; it cannot pass (exit 3)"
