"""Join partial runs (`opbench run --shard K/N`) into one run. Pure Python.

Refuses what would give a misleading whole: shares of different runs (another suite, suite
content, device kind or run options such as --backend and --rounds), runs made in different
environments, overlapping shares, and missing shares (unless a partial result is accepted).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from opbench.errors import InputError, Location
from opbench.results.fingerprint import env_differences
from opbench.results.model import LayerResult, RunResult


def _order(run: RunResult):
    """Sort key placing results in suite order: model, then layer position, then backend."""
    position: dict[tuple[str, str], tuple[int, int]] = {}
    for m_index, model in enumerate(run.suite_spec.get("models", [])):
        for l_index, layer in enumerate(model.get("layers", [])):
            position[(model["name"], layer["name"])] = (m_index, l_index)

    def key(result: LayerResult):
        return (*position.get((result.model, result.layer), (1 << 30, 0)), result.backend)

    return key


def _first_difference(a: Any, b: Any, path: str) -> tuple[str, Any, Any] | None:
    """(where, a's value, b's value) of the first place two JSON-like values differ, or None."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        for key in dict.fromkeys([*a, *b]):
            found = _first_difference(a.get(key), b.get(key), f"{path}.{key}" if path else key)
            if found:
                return found
        return None
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            if found := _first_difference(x, y, f"{path}[{i}]"):
                return found
        return None
    return None if a == b else (path, a, b)


def _what_shapes_the_run(run: RunResult) -> dict[str, Any]:
    """What the shares of one run hold alike: the suite as loaded (its models, layers,
    backends, timing), the device kind and the run's options (--backend, --rounds, ...).
    The suite file's path may differ between the machines that ran the shares."""
    spec = {k: v for k, v in run.suite_spec.items() if k != "source"}
    return {
        "suite": run.suite,
        "device": run.device.split(":")[0],
        "options": dict(run.options),
        "suite_spec": spec,
    }


def _check_one_run(runs: Sequence[RunResult], sources: Sequence[str]) -> None:
    """Refuse shares of different runs: one line naming the field and both values."""
    first, first_src = runs[0], sources[0]
    shape = _what_shapes_the_run(first)
    for run, src in zip(runs[1:], sources[1:], strict=False):
        found = _first_difference(shape, _what_shapes_the_run(run), "")
        if found:
            where, theirs, ours = found
            raise InputError(
                f"not a share of the run in {first_src}: {where} is {ours!r} here and "
                f"{theirs!r} there (merge joins the shares of one `opbench run --shard`)",
                Location(file=src),
            )
        # The gate's fingerprint keys (results/fingerprint.py): shares that could not be gated
        # against each other must not be merged into one run either.
        diffs = [
            f"{d.key}: {d.baseline!r} vs {d.current!r}" for d in env_differences(run.env, first.env)
        ]
        if diffs:
            raise InputError(
                f"environment differs from {first_src}: " + "; ".join(diffs), Location(file=src)
            )


def _check_shares(
    runs: Sequence[RunResult], sources: Sequence[str], allow_partial: bool
) -> list[str]:
    """Refuse overlapping shares, and missing ones unless `allow_partial` (then warned)."""
    warnings: list[str] = []
    shards = [run.shard for run in runs]
    if any(s is None for s in shards):
        if len(runs) > 1:
            src = sources[shards.index(None)]
            raise InputError(
                "not a partial run (made without --shard): nothing to merge it with",
                Location(file=src),
            )
    else:
        totals = {n for _, n in shards}
        if len(totals) > 1:
            raise InputError(
                f"runs were split into different numbers of shares: {sorted(totals)}",
                Location(file=sources[0]),
            )
        n = totals.pop()
        seen: dict[int, str] = {}
        for (k, _), src in zip(shards, sources, strict=False):
            if k in seen:
                raise InputError(
                    f"share {k}/{n} appears twice (also in {seen[k]})", Location(file=src)
                )
            seen[k] = src
        missing = sorted(set(range(1, n + 1)) - set(seen))
        if missing:
            text = f"missing share(s) {', '.join(f'{k}/{n}' for k in missing)}"
            if not allow_partial:
                raise InputError(
                    text + " (--allow-partial merges what is there)", Location(file=sources[0])
                )
            warnings.append(text)
    return warnings


def merge_runs(
    runs: Sequence[RunResult], sources: Sequence[str], allow_partial: bool = False
) -> tuple[RunResult, list[str]]:
    """The merged run and a list of warnings (missing shares when allow_partial)."""
    if not runs:
        raise InputError("merge needs at least one run")
    first = runs[0]
    _check_one_run(runs, sources)

    warnings = _check_shares(runs, sources, allow_partial)
    keys: dict[tuple[str, tuple[str, ...], str], str] = {}
    layers: list[LayerResult] = []
    for run, src in zip(runs, sources, strict=False):
        for result in run.layers:
            key = (result.model, result.members, result.backend)
            if key in keys:
                raise InputError(
                    f"{'/'.join(key[:1] + key[1] + key[2:])} is in both {keys[key]} and {src}",
                    Location(file=src),
                )
            keys[key] = src
            layers.append(result)
        if not run.complete:
            text = f"{src} is incomplete ({len(run.layers)} of {run.planned} results)"
            if not allow_partial:
                raise InputError(
                    text + " (--allow-partial merges what is there)", Location(file=src)
                )
            warnings.append(text)

    layers.sort(key=_order(first))
    complete = not warnings and all(run.complete for run in runs)
    merged = replace(
        first,
        layers=tuple(layers),
        end_to_end=tuple(e for run in runs for e in run.end_to_end),
        started_at=min(run.started_at for run in runs),
        finished_at=max((run.finished_at or "" for run in runs), default="") or None,
        planned=sum(run.planned for run in runs),
        complete=complete,
        shard=None,
        env={**first.env, "merged_from": list(sources)},
    )
    return merged, warnings
