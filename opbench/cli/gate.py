"""The regression gate inside `opbench compare`: baseline, --confirm re-run, CI outputs.

compare.py reads the run (and the reference); this module adds what concerns the baseline,
in the order the command runs it:

    read     prepare_gate: parse --threshold, read BASE, pick where --update-baseline writes
             (bad input raises before anything is written: exit 2)
    judge    judge: gate(); with --confirm, re-time the inconclusive layers and decide again
    show     print_gate: the verdict table, environment differences, notes
    CI       write_junit_file, append_summaries, annotation_lines
    refresh  write_updated_baseline

Every part returns an exit code; `combine_exit_codes` keeps the most important one:
2 (bad input) > 3 (crash) > 4 (baseline missing or incomparable) > 1 (regression or missed
target) > 0.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from rich.table import Table
from rich.text import Text

from opbench.cli.console import console
from opbench.compare.baseline import (
    Baseline,
    BaselineError,
    env_differences,
    load_baseline,
    update_baseline_file,
)
from opbench.compare.gate import (
    GateOptions,
    GateReport,
    GateVerdict,
    Key,
    Verdict,
    confirm,
    gate,
    inconclusive_keys,
    parse_threshold,
)
from opbench.compare.model import Comparison
from opbench.compare.model import Verdict as Target
from opbench.errors import ExitCode, InputError, Location, OpbenchError
from opbench.report.github import escape_data, escape_property
from opbench.report.junit import JUnitCase, Outcome, cases_from_gate, gate_properties, write_junit
from opbench.report.style import fmt_ms, fmt_x
from opbench.results.io import RUN_FILE
from opbench.results.model import LayerResult, RunResult, Status

PRECEDENCE = (
    ExitCode.BAD_INPUT,
    ExitCode.LAYER_ERROR,
    ExitCode.BASELINE,
    ExitCode.FAILED_GATE,
    ExitCode.OK,
)
BASELINES_DIR = Path("baselines")
CONFIRM_ROUNDS_FACTOR = 2


def combine_exit_codes(*codes: int) -> int:
    """The one exit code of several checks: 2 > 3 > 4 > 1 > 0."""
    for code in PRECEDENCE:
        if code in codes:
            return code
    return ExitCode.OK


@dataclass(frozen=True)
class GateRequest:
    """The gate's options of `opbench compare`, as given."""

    baseline: Path | None = None
    threshold: str | None = None
    confirm: bool = False
    junit: Path | None = None
    bmf: Path | None = None
    update_baseline: bool = False
    baseline_out: Path | None = None
    allow_env_change: bool = False


@dataclass
class GateInputs:
    """Everything read for the gate before anything is written.

    baseline: what BASE holds; None without --baseline or when it cannot be used.
    problem: why BASE cannot be used (missing, unsupported schema): exit 4 unless updating.
    destination: where --update-baseline writes (None: not asked).
    """

    options: GateOptions
    baseline: Baseline | None = None
    problem: BaselineError | None = None
    destination: Path | None = None
    notes: list[str] = field(default_factory=list)


def prepare_gate(request: GateRequest, run: RunResult) -> GateInputs:
    """Parse and read; raises InputError (exit 2) for bad input, writes nothing."""
    threshold = None
    if request.threshold is not None:
        try:
            threshold = parse_threshold(request.threshold)
        except InputError as exc:
            raise InputError(exc.message, Location(field="--threshold")) from None
    inputs = GateInputs(GateOptions(threshold=threshold, allow_env_change=request.allow_env_change))
    if request.baseline is not None:
        try:
            inputs.baseline = load_baseline(request.baseline)
        except BaselineError as exc:
            inputs.problem = exc
    if request.update_baseline or request.baseline_out is not None:
        inputs.destination = _destination(request, run, inputs.baseline)
    return inputs


def _is_run_file(path: Path, loaded: Baseline | None) -> bool:
    if path.is_dir() or path.name == RUN_FILE:
        return True
    return loaded is not None and loaded.source == "run"


def _destination(request: GateRequest, run: RunResult, loaded: Baseline | None) -> Path:
    """--baseline-out, else BASE when it is a baseline file (or not there yet), else
    baselines/<suite>.json: a run given as BASE is never overwritten."""
    if request.baseline_out is not None:
        path = request.baseline_out
        existing = None
        if path.is_file():
            try:
                existing = load_baseline(path)
            except OpbenchError:
                existing = None
        if _is_run_file(path, existing):
            raise InputError(
                "--baseline-out names a run; a baseline file is a separate .json",
                Location(file=str(path), field="--baseline-out"),
            )
        return path
    if request.baseline is not None and not _is_run_file(request.baseline, loaded):
        return request.baseline
    return BASELINES_DIR / f"{run.suite}.json"


# ----------------------------------------------------------------------------------------------
# Judging, with the --confirm re-run
# ----------------------------------------------------------------------------------------------


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
    inputs: GateInputs, run: RunResult, *, model: str | None = None, confirm_layers: bool = False
) -> GateReport:
    """gate(); with confirm_layers, re-time inconclusive layers (twice the rounds) and decide
    again. A re-run that cannot happen leaves the first verdict and a note saying why."""
    assert inputs.baseline is not None
    current, baseline = select_model(run, inputs.baseline, model)
    report = gate(current, baseline, inputs.options)
    keys = inconclusive_keys(report) if confirm_layers else ()
    if not keys:
        if confirm_layers:
            report = replace(report, notes=report.notes + ("--confirm: nothing inconclusive",))
        return report
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
    report = confirm(current, rerun, baseline, inputs.options)
    settled = sum(
        1 for v in report.verdicts if v.confirmed and v.verdict is not Verdict.INCONCLUSIVE
    )
    note = f"--confirm re-timed {len(rerun.layers)} layer(s); {settled} settled"
    return replace(report, notes=report.notes + (note,))


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
    diffs = env_differences(env, run.env)
    if diffs:
        what = "; ".join(str(d) for d in diffs)
        raise ConfirmUnavailable(f"this machine is not the one that timed the run ({what})")
    return device, env


def rerun_layers(run: RunResult, keys: Sequence[Key]) -> RunResult:
    """Time the given (model, layer, backend) again on the run's device, from the run's suite
    file, with CONFIRM_ROUNDS_FACTOR x the rounds each had. Only those results are returned."""
    from opbench.pipeline import RunOptions, gpu_label, now_iso, run_suite

    by_key = {r.key: r for r in run.layers}
    suite = _suite_for_rerun(run, {k[0] for k in keys})
    device, env = _device_for_rerun(run)
    groups: dict[tuple[str, str, int], list[str]] = {}
    for model, layer, backend in keys:
        rounds = CONFIRM_ROUNDS_FACTOR * max(len(by_key[(model, layer, backend)].samples_ms), 1)
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


def gate_exit_code(report: GateReport | None, inputs: GateInputs, run: RunResult) -> int:
    """The gate's part of the exit code. With --update-baseline, exit 1 and 4 are waived:
    this run becomes the baseline. Without a report, crashes still count (exit 3)."""
    if report is not None:
        code = report.exit_code
    elif inputs.problem is not None and inputs.destination is None:
        code = ExitCode.BASELINE
    else:
        code = ExitCode.LAYER_ERROR if crashed_layers(run) else ExitCode.OK
    if inputs.destination is not None and code in (ExitCode.FAILED_GATE, ExitCode.BASELINE):
        return ExitCode.OK
    return code


def crashed_layers(run: RunResult, backend: str | None = None) -> list[LayerResult]:
    """Results that errored or failed their correctness check (unsupported is neither)."""
    return [
        r
        for r in run.layers
        if (backend is None or r.backend == backend)
        and (r.status == Status.ERROR or (r.status == Status.OK and not r.correct))
    ]


# ----------------------------------------------------------------------------------------------
# The terminal
# ----------------------------------------------------------------------------------------------

VERDICT_STYLES = {
    Verdict.REGRESSED: "bold red",
    Verdict.CRASHED: "bold red",
    Verdict.IMPROVED: "bold green",
    Verdict.OK: "green",
    Verdict.INCONCLUSIVE: "yellow",
    Verdict.INCOMPARABLE: "magenta",
    Verdict.MISSING: "yellow",
    Verdict.NEW: "cyan",
    Verdict.UNSUPPORTED: "dim",
}
STATUS_STYLES = {"PASS": "bold green", "REGRESSED": "bold red", "CRASHED": "bold red"}


def _note(v: GateVerdict) -> str:
    parts = ["re-run"] if v.confirmed else []
    if v.verdict is Verdict.REGRESSED:
        parts.append(
            f"BH p {v.q_value:.2g}" + ("" if v.significant else ", not significant: warning")
        )
    if v.ratio is None:
        parts.append(v.message)
    elif "short layer" in v.message:
        parts.append("short layer: 3 x CV threshold")
    return "; ".join(p for p in parts if p)


def gate_table(report: GateReport) -> Table:
    level = report.options.level
    table = Table(
        title=f"{report.suite}: regression gate against {report.baseline_path} "
        f"({report.baseline_source})",
        title_justify="left",
        header_style="bold",
    )
    for name in ("verdict", "model", "layer", "backend"):
        table.add_column(name, overflow="fold")
    for name in ("baseline ms", "run ms", "ratio", f"{level:.0%} CI", "threshold"):
        table.add_column(name, justify="right")
    table.add_column("note", style="dim", overflow="fold")
    for v in report.verdicts:
        style = VERDICT_STYLES.get(v.verdict, "")
        if v.verdict is Verdict.REGRESSED and not v.significant:
            style = "yellow"
        interval = "–" if v.ci_low is None else f"{v.ci_low:.3f}–{v.ci_high:.3f}"
        table.add_row(
            Text(v.verdict.value, style=style),
            Text(v.model),
            Text(v.layer),
            Text(v.backend),
            fmt_ms(v.baseline_ms),
            fmt_ms(v.current_ms),
            "–" if v.ratio is None else Text(f"{v.ratio:.3f}", style=style),
            interval,
            "–" if v.threshold is None else f"{v.threshold * 100:.1f}%",
            Text(_note(v)),
        )
    return table


def print_gate(report: GateReport, waived: bool = False) -> None:
    console.print(gate_table(report))
    if report.env_differences:
        state = (
            "comparison refused (exit 4; --allow-env-change compares anyway)"
            if report.incomparable
            else "compared anyway (--allow-env-change)"
        )
        diffs = Table(
            title=f"environment differs from the baseline: {state}",
            title_justify="left",
            header_style="bold",
        )
        for name in ("key", "baseline", "this run"):
            diffs.add_column(name, overflow="fold")
        for d in report.env_differences:
            diffs.add_row(Text(d.key), Text(str(d.baseline)), Text(str(d.current)))
        console.print(diffs)
    for note in report.notes:
        console.print(Text(f"note: {note}", style="yellow"))
    style = STATUS_STYLES.get(report.status, "bold magenta")
    line = Text("gate: ").append(report.summary(), style=style)
    if waived and report.exit_code in (ExitCode.FAILED_GATE, ExitCode.BASELINE):
        line.append(" (not failing: --update-baseline makes this run the baseline)", style="dim")
    console.print(line)


# ----------------------------------------------------------------------------------------------
# CI outputs
# ----------------------------------------------------------------------------------------------


def _target_outcome(row, run: RunResult) -> Outcome:
    p = row.primary
    crashed = {(r.model, m) for r in crashed_layers(run, p.backend) for m in r.members}
    if any((row.model, layer) in crashed for layer in row.layers) or p.correct is False:
        return Outcome.ERROR
    return {
        Target.PASS: Outcome.PASSED,
        Target.FAIL: Outcome.FAILURE,
    }.get(p.verdict, Outcome.SKIPPED)


def target_cases(comparison: Comparison, run: RunResult) -> list[JUnitCase]:
    """One case per comparison row of the gated backend: PASS passes, FAIL fails, a crash or
    failed correctness errors, UNCERTAIN and rows without a time are skipped."""
    cases = []
    for row in comparison.rows:
        p = row.primary
        speedup = p.speedup
        cases.append(
            JUnitCase(
                name=f"{row.label} ({p.backend}) target {row.target:g}x",
                classname=f"{comparison.suite}.{row.model}",
                outcome=_target_outcome(row, run),
                message=p.reason
                or f"{p.verdict}: speed-up {fmt_x(speedup.value if speedup else None)}",
                details=p.reason or "",
                properties={
                    "verdict": p.verdict,
                    "speedup": speedup.value if speedup else None,
                    "speedup_low": speedup.lo if speedup else None,
                    "speedup_high": speedup.hi if speedup else None,
                    "target": row.target,
                    "reference_engine": comparison.reference.engine,
                    "reference_ms": row.reference.value if row.reference else None,
                    "run_ms": p.time.value if p.time else None,
                },
            )
        )
    return cases


def write_junit_file(
    path: Path,
    run: RunResult,
    report: GateReport | None,
    inputs: GateInputs | None,
    comparison: Comparison | None,
) -> None:
    """Gate cases (or one "baseline" case when BASE could not be used), then target cases."""
    cases: list[JUnitCase] = []
    properties: dict = {}
    if report is not None:
        cases += cases_from_gate(report)
        properties.update(gate_properties(report))
    elif inputs is not None and inputs.problem is not None:
        updating = inputs.destination is not None
        cases.append(
            JUnitCase(
                "baseline",
                run.suite,
                Outcome.SKIPPED if updating else Outcome.ERROR,
                str(inputs.problem) + ("; writing a new one" if updating else ""),
            )
        )
    if comparison is not None:
        cases += target_cases(comparison, run)
        properties["reference"] = comparison.reference.source
    kind = "gate" if inputs is not None else "target"
    write_junit(path, f"opbench-{kind}.{run.suite}", cases, properties)


def append_summaries(parts: Sequence[str]) -> Path | None:
    """Append Markdown to $GITHUB_STEP_SUMMARY when it is set."""
    target = os.environ.get("GITHUB_STEP_SUMMARY")
    if not target or not parts:
        return None
    with Path(target).open("a", encoding="utf-8") as fh:
        fh.write("\n".join(parts) + "\n")
    return Path(target)


def _command(level: str, title: str, message: str) -> str:
    return f"::{level} title={escape_property(title)}::{escape_data(message)}"


def annotation_lines(
    report: GateReport | None,
    inputs: GateInputs | None,
    comparison: Comparison | None,
    run: RunResult,
) -> list[str]:
    """Workflow commands for GitHub Actions: the gate's own, then a missing baseline, notes
    that need a look (a --confirm that could not run), missed targets and crashes."""
    from opbench.report.github import annotations

    lines = annotations(report) if report is not None else []
    if inputs is not None and inputs.problem is not None and inputs.destination is None:
        lines.append(_command("error", "opbench: no usable baseline", str(inputs.problem)))
    if report is not None:
        lines += [
            _command("warning", "opbench: --confirm", note)
            for note in report.notes
            if note.startswith("--confirm could not")
        ]
    if comparison is not None:
        failing = [row for row in comparison.rows if row.primary.verdict == Target.FAIL]
        for row in failing[:10]:
            lines.append(
                _command(
                    "error",
                    f"opbench missed target: {row.model}/{row.label} ({row.primary.backend})",
                    row.primary.reason
                    or f"speed-up {fmt_x(row.primary.speedup.value if row.primary.speedup else None)}"
                    f" below the target {row.target:g}x",
                )
            )
        if len(failing) > 10:
            more = len(failing) - 10
            lines.append(_command("error", f"opbench: {more} more", f"{more} more missed targets"))
    return lines


def write_updated_baseline(inputs: GateInputs, run: RunResult) -> Baseline | None:
    """--update-baseline: merge with the file there when compatible, write, say where."""
    if inputs.destination is None:
        return None
    written = update_baseline_file(inputs.destination, run)
    left_out = len(crashed_layers(run))
    extra = f"; {left_out} crashed or incorrect result(s) left out" if left_out else ""
    console.print(
        f"baseline written: {inputs.destination} ({len(written.entries)} entries{extra})",
        markup=False,
        style="bold",
    )
    return written


# ----------------------------------------------------------------------------------------------
# The command
# ----------------------------------------------------------------------------------------------


def compare_and_gate(request, gate_request: GateRequest) -> int:
    """`opbench compare` from its parsed options (a CompareRequest and a GateRequest): read
    everything, then compare and gate, print, write the outputs; return the exit code."""
    from opbench.cli.compare import (
        announce_target,
        load_and_compare,
        resolve_run_path,
        run_folder,
        show_comparison,
        target_exit_code,
    )
    from opbench.cli.console import err_console
    from opbench.results.io import read_run

    gating = gate_request.baseline is not None or gate_request.update_baseline
    if request.reference is None and not gating:
        raise InputError(
            "nothing to compare: give --reference FILE (speed-up target), --baseline BASE "
            "(regression gate) or --update-baseline"
        )
    if request.reference is not None:
        comparison, run, folder = load_and_compare(request)
    else:
        comparison, run_path = None, resolve_run_path(request.run)
        run, folder = read_run(run_path), run_folder(run_path)
    inputs = prepare_gate(gate_request, run) if gating else None
    if inputs is None and gate_request.threshold is not None:
        prepare_gate(gate_request, run)  # a bad --threshold is bad input even when unused
    # Everything is read: from here on, outputs.

    codes: dict[str, int] = {}
    if comparison is not None:
        show_comparison(comparison, request.out or folder)
        announce_target(comparison, request.gate)
        codes["target"] = target_exit_code(comparison, run, request.gate)
    report = None
    if gate_request.confirm and gate_request.baseline is None:
        err_console.print("warning: --confirm needs --baseline; ignored", style="yellow")
    if inputs is not None:
        if inputs.problem is not None and inputs.destination is None:
            err_console.print("error: ", style="bold red", end="")
            err_console.print(str(inputs.problem), markup=False, soft_wrap=True)
        elif inputs.problem is not None:
            console.print(
                f"no usable baseline ({inputs.problem}): not gated; --update-baseline writes one",
                style="yellow",
                markup=False,
            )
        if inputs.baseline is not None:
            report = judge(inputs, run, model=request.model, confirm_layers=gate_request.confirm)
            print_gate(report, waived=inputs.destination is not None)
        codes["regression gate"] = gate_exit_code(report, inputs, run)

    if gate_request.junit is not None:
        write_junit_file(gate_request.junit, run, report, inputs, comparison)
        console.print(f"JUnit: {gate_request.junit}", markup=False)
    if gate_request.bmf is not None:
        from opbench.report.bmf import write_bmf

        data = write_bmf(gate_request.bmf, run)
        console.print(f"BMF: {gate_request.bmf} ({len(data)} benchmarks)", markup=False)
    written = write_updated_baseline(inputs, run) if inputs is not None else None
    summaries = _summaries(run, report, inputs, comparison, written)
    if append_summaries(summaries) is not None:
        console.print("step summary appended to $GITHUB_STEP_SUMMARY", markup=False)
    if os.environ.get("GITHUB_ACTIONS") == "true":
        for line in annotation_lines(report, inputs, comparison, run):
            print(line, flush=True)  # one physical line each: never through rich's wrapping

    code = combine_exit_codes(*codes.values())
    if len(codes) > 1:
        parts = ", ".join(f"{name} {value}" for name, value in codes.items())
        console.print(f"exit {code} ({parts}; precedence 2 > 3 > 4 > 1 > 0)", markup=False)
    return code


def _summaries(
    run: RunResult,
    report: GateReport | None,
    inputs: GateInputs | None,
    comparison: Comparison | None,
    written: Baseline | None,
) -> list[str]:
    from opbench.report.github import step_summary_markdown
    from opbench.report.markdown import render_markdown

    parts = []
    if report is not None:
        parts.append(step_summary_markdown(report))
    elif inputs is not None and inputs.problem is not None:
        verdict = "writing a new baseline" if inputs.destination else "exit 4"
        parts.append(
            f"## opbench gate: {run.suite}: no usable baseline ({verdict})\n\n`{inputs.problem}`\n"
        )
    if written is not None:
        parts.append(f"Baseline written to `{written.path}` ({len(written.entries)} entries).\n")
    if comparison is not None:
        parts.append(render_markdown(comparison))
    return parts
