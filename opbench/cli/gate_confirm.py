"""The regression gate's judging, with the --confirm re-run: `judge` compares a run with its
baseline (opbench.compare.gate) and, when asked, times the inconclusive layers again, with
twice the rounds, on the same kind of device, then decides again. A re-run that cannot happen
here (no GPU, another machine, a suite file that changed) leaves the first verdict and says why.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path

from opbench.cli.console import console
from opbench.compare.baseline import Baseline
from opbench.compare.gate import (
    GateOptions,
    GateReport,
    Key,
    Verdict,
    confirm,
    gate,
    inconclusive_keys,
    unsettled_note,
)
from opbench.compare.gate_model import MIN_ROUNDS
from opbench.errors import OpbenchError
from opbench.results.fingerprint import env_differences
from opbench.results.model import RunResult

CONFIRM_ROUNDS_FACTOR = 2  # and MIN_ROUNDS at least: a re-run must be able to give a verdict


def _in_model(name: str, model: str | None) -> bool:
    return model is None or name == model or name.split("[", 1)[0] == model


def select_model(
    run: RunResult, baseline: Baseline, model: str | None
) -> tuple[RunResult, Baseline]:
    """The run and the baseline restricted to --model (an instance or a base name)."""
    if model is None:
        return run, baseline
    layers = tuple(r for r in run.layers if _in_model(r.model, model))
    entries = tuple(e for e in baseline.entries if _in_model(e.model, model))
    return replace(run, layers=layers), replace(baseline, entries=entries)


class ConfirmUnavailable(Exception):
    """--confirm cannot re-time layers here; the message says why. The first verdict stands."""


def judge(
    baseline: Baseline,
    options: GateOptions,
    run: RunResult,
    *,
    model: str | None = None,
    confirm_layers: bool = False,
) -> GateReport:
    """gate(); with confirm_layers, re-time inconclusive layers (twice the rounds) and decide
    again. A re-run that cannot happen leaves the first verdict and a note saying why."""
    current, baseline = select_model(run, baseline, model)
    report = gate(current, baseline, options)
    if not confirm_layers:
        return report
    keys = inconclusive_keys(report)
    unsettled = unsettled_note(report, keys)
    if not keys:
        return replace(report, notes=report.notes + (unsettled,))
    console.print(
        f"confirm: {len(keys)} layer(s) inconclusive; timing them again with "
        f"{CONFIRM_ROUNDS_FACTOR}x the rounds on {run.device}",
        markup=False,
    )
    try:
        rerun = rerun_layers(run, keys)
    except ConfirmUnavailable as exc:
        note = f"--confirm could not re-run {len(keys)} layer(s), first verdict kept: {exc}"
        return replace(report, notes=report.notes + (note,))
    report = confirm(current, rerun, baseline, options)
    settled = sum(
        1 for v in report.verdicts if v.confirmed and v.verdict is not Verdict.INCONCLUSIVE
    )
    note = f"--confirm re-timed {len(rerun.layers)} layer(s); {settled} settled"
    left = () if unsettled.endswith("nothing inconclusive") else (unsettled,)
    return replace(report, notes=report.notes + (note, *left))


def _suite_for_rerun(run: RunResult, models: Iterable[str]):
    from opbench.spec.load import load_suite, spec_to_dict

    source = run.suite_source or (run.suite_spec or {}).get("source")
    if not source:
        raise ConfirmUnavailable("the run does not record its suite file")
    if not Path(source).is_file():
        raise ConfirmUnavailable(f"suite file {source} (recorded in the run) not found here")
    try:
        suite = load_suite(source)
    except OpbenchError as exc:
        raise ConfirmUnavailable(f"the suite file no longer loads: {exc}") from None
    if suite.name != run.suite:
        raise ConfirmUnavailable(f"{source} is now suite {suite.name!r}, not {run.suite!r}")
    recorded = {m["name"]: m for m in (run.suite_spec or {}).get("models") or ()}
    if recorded:  # the layers must be the ones the run timed
        now = {m["name"]: m for m in spec_to_dict(suite)["models"]}
        changed = sorted(name for name in set(models) if recorded.get(name) != now.get(name))
        if changed:
            raise ConfirmUnavailable(f"{source} changed since the run (model {changed[0]})")
    return suite


def _device_for_rerun(run: RunResult) -> tuple[str, dict]:
    """The run's device, here, with a fingerprint equal to the run's (same GPU, driver,
    torch, triton, kernels); else ConfirmUnavailable."""
    from opbench.measure.env import fingerprint
    from opbench.plugins import provenance as plugin_provenance

    device = run.device or "cpu"
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            gpu = run.env.get("gpu_name") or device
            raise ConfirmUnavailable(f"the run was timed on {gpu}; no GPU is visible here")
    try:
        env = fingerprint(device)
    except Exception as exc:
        raise ConfirmUnavailable(f"cannot use device {device} here: {exc}") from None
    # As `opbench run` records it: the plugins loaded by now (entry points, --plugin, the
    # suite's and the run's own, _load_recorded_plugins), in the run's order where it has them.
    env["plugins"] = _in_recorded_order(plugin_provenance(), run.env.get("plugins"))
    diffs = env_differences(env, run.env)
    if diffs:
        what = "; ".join(str(d) for d in diffs)
        raise ConfirmUnavailable(f"this machine is not the one that timed the run ({what})")
    return device, env


def _load_recorded_plugins(run: RunResult) -> None:
    """Load the plugin files the run recorded (env["plugins"] entries with a "path") that
    exist here, before the fingerprint: their hashes then show whether they are the same
    code. Installed distributions come with the entry points; a --plugin names the rest."""
    from opbench.plugins.loading import load_plugin

    for entry in run.env.get("plugins") or ():
        path = entry.get("path") if isinstance(entry, dict) else None
        if isinstance(path, str) and Path(path).exists():
            try:
                load_plugin(path, Path.cwd())
            except OpbenchError as exc:
                raise ConfirmUnavailable(f"the run's plugin {path} does not load: {exc}") from None


def _in_recorded_order(loaded: list[dict], recorded: object) -> list[dict]:
    """`loaded` sorted as the run recorded the same entries (load order differs between
    `run --plugin a --plugin b` and a compare that loads b first); others after them."""
    order = [e for e in recorded if isinstance(e, dict)] if isinstance(recorded, list) else []
    return sorted(loaded, key=lambda e: order.index(e) if e in order else len(order))


def rerun_layers(run: RunResult, keys: Sequence[Key]) -> RunResult:
    """Time the given (model, layer, backend) again on the run's device, from the run's suite
    file, with CONFIRM_ROUNDS_FACTOR x the rounds each had. Only those results are returned."""
    from opbench.pipeline import RunOptions, gpu_label, now_iso, run_suite

    by_key = {r.key: r for r in run.layers}
    _load_recorded_plugins(run)  # before the suite, whose backends they may name
    suite = _suite_for_rerun(run, {k[0] for k in keys})  # loads the suite's `plugins:`
    device, env = _device_for_rerun(run)
    groups: dict[tuple[str, str, int], list[str]] = {}
    for model, layer, backend in keys:
        had = len(by_key[(model, layer, backend)].samples_ms)
        rounds = max(CONFIRM_ROUNDS_FACTOR * had, MIN_ROUNDS)  # enough for a verdict
        groups.setdefault((model, backend, rounds), []).append(layer)
    wanted = set(keys)
    rerun = RunResult(suite=run.suite, started_at=now_iso(), device=device, env=env)
    for (model, backend, rounds), layers in groups.items():
        options = RunOptions(
            device=device,
            backends=[backend],
            models=[model],
            layers=layers,
            rounds=rounds,
            end_to_end=False,
            gpu_label=gpu_label(device),
        )
        part = run_suite(suite, options, env=env)
        fresh = tuple(r for r in part.layers if r.key in wanted)
        rerun = replace(rerun, layers=rerun.layers + fresh)
    if not rerun.layers:
        raise ConfirmUnavailable("the suite no longer plans these layers")
    return rerun
