"""Join partial runs (`opbench run --shard K/N`) into one run. Pure Python.

Refuses what would give a misleading whole: runs of different suites, runs made in different
environments, overlapping shares, and missing shares (unless a partial result is accepted).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

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


def merge_runs(
    runs: Sequence[RunResult], sources: Sequence[str], allow_partial: bool = False
) -> tuple[RunResult, list[str]]:
    """The merged run and a list of warnings (missing shares when allow_partial)."""
    if not runs:
        raise InputError("merge needs at least one run")
    first, first_src = runs[0], sources[0]
    for run, src in zip(runs[1:], sources[1:], strict=False):
        if run.suite != first.suite:
            raise InputError(
                f"run of suite {run.suite!r} cannot merge with suite {first.suite!r} ({first_src})",
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
