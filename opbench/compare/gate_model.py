"""What the CI regression gate decides, as data: its verdict words, options, and the finding
for each (model, layer, backend) with the report that holds them and the exit code.

The statistics that reach these verdicts are in opbench/compare/gate.py.

Pure Python: no torch, no triton.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from enum import Enum

from opbench.errors import ExitCode, InputError
from opbench.results.fingerprint import EnvDifference

DEFAULT_THRESHOLD = 0.05
CV_FLOOR_FACTOR = 3.0  # short layers: T >= 3 x CV of round medians
SHORT_LAYER_MS = 0.05  # "very short": baseline median under 50 us
# Rounds a verdict needs on each side. Two give a variance, but not one that holds the
# offsets between two runs: two `--quick` runs of the same code (2 rounds) read as x1.47
# REGRESSED. Five is what the false-alarm simulations of docs/ci.md were run at, and the
# least an adaptive run takes (measure/stopping.MIN_ADAPTIVE_ROUNDS).
MIN_ROUNDS = 5
# A ratio interval reaching past x1000 either way measures nothing: shown as "unbounded".
UNBOUNDED_RATIO = 1e3

Key = tuple[str, str, str]


class Verdict(str, Enum):
    REGRESSED = "REGRESSED"
    IMPROVED = "IMPROVED"
    OK = "OK"
    INCONCLUSIVE = "INCONCLUSIVE"
    INCOMPARABLE = "INCOMPARABLE"
    NEW = "NEW"
    MISSING = "MISSING"
    CRASHED = "CRASHED"
    UNSUPPORTED = "UNSUPPORTED"

    def __str__(self) -> str:
        return self.value


_THRESHOLD = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(%?)\s*$")


def parse_threshold(text: str | float) -> float:
    """'5%' or '0.05' -> 0.05. Must lie in (0, 10]; anything else raises InputError."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(text)
    else:
        match = _THRESHOLD.match(str(text))
        if not match:
            raise InputError(f"threshold {text!r} is not a number or a percentage such as '5%'")
        value = float(match.group(1)) / (100.0 if match.group(2) else 1.0)
    if not (0.0 < value <= 10.0) or not math.isfinite(value):
        raise InputError(f"threshold {text!r} must be above 0 (e.g. '5%' or '0.05')")
    return value


@dataclass(frozen=True)
class GateOptions:
    """How strict the gate is.

    threshold: relative threshold T for every layer without its own regression_threshold
        (None: DEFAULT_THRESHOLD). Precedence: layer's regression_threshold, then this.
    q: Benjamini-Hochberg false discovery rate over the suite.
    level: confidence level of the ratio's interval.
    allow_env_change: compare even when the environment fingerprints differ (shown as warnings).
    ignore_env_keys: fingerprint keys left out of the comparison (e.g. "kernel_version").
    backends: only gate these backends (None: all).
    short_layer_ms: layers whose baseline median is below this get T >= 3 x CV.
    """

    threshold: float | None = None
    q: float = 0.05
    level: float = 0.99
    allow_env_change: bool = False
    ignore_env_keys: tuple[str, ...] = ()
    backends: tuple[str, ...] | None = None
    short_layer_ms: float = SHORT_LAYER_MS


CODE_VERDICT = {0: Verdict.OK, 1: Verdict.REGRESSED, -1: Verdict.IMPROVED, 2: Verdict.INCONCLUSIVE}


# ----------------------------------------------------------------------------------------------
# Verdicts for a run against a baseline
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GateVerdict:
    """The gate's finding for one (model, layer, backend).

    ratio, ci_low, ci_high: current / baseline (ratio of geometric means of round medians)
        and its interval at the gate's level; None where nothing was compared.
    threshold: the T applied (after the short-layer CV floor).
    p_value: one-sided p for "ratio > 1 + T"; q_value: its Benjamini-Hochberg adjustment.
    significant: q_value <= q. Only a layer both REGRESSED and significant fails.
    baseline_ms / current_ms: medians of all samples; cv_*: CV of round medians.
    baseline_gm_ms / current_gm_ms: geometric means of the round medians, what `ratio`
        compares (ratio = current_gm_ms / baseline_gm_ms); None where nothing was compared.
    confirmed: this layer's current timing comes from a --confirm re-run.
    too_few_rounds: INCONCLUSIVE because a side has fewer than MIN_ROUNDS rounds: not judged.
    """

    model: str
    layer: str
    backend: str
    verdict: Verdict
    ratio: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    threshold: float | None = None
    p_value: float | None = None
    q_value: float | None = None
    significant: bool = False
    message: str = ""
    baseline_ms: float | None = None
    current_ms: float | None = None
    cv_baseline: float | None = None
    cv_current: float | None = None
    rounds: tuple[int, int] | None = None
    confirmed: bool = False
    baseline_gm_ms: float | None = None
    current_gm_ms: float | None = None
    too_few_rounds: bool = False

    @property
    def key(self) -> Key:
        return (self.model, self.layer, self.backend)

    @property
    def fails(self) -> bool:
        return self.verdict is Verdict.REGRESSED and self.significant

    @property
    def severity(self) -> str | None:
        """'error', 'warning', 'notice' or None: how loudly a CI report should show it."""
        if self.verdict is Verdict.CRASHED or self.fails:
            return "error"
        if self.verdict in (
            Verdict.REGRESSED,
            Verdict.INCONCLUSIVE,
            Verdict.MISSING,
            Verdict.INCOMPARABLE,
        ):
            return "warning"
        if self.verdict is Verdict.UNSUPPORTED:
            return "warning" if self.baseline_ms is not None else "notice"
        if self.verdict in (Verdict.IMPROVED, Verdict.NEW):
            return "notice"
        return None


@dataclass(frozen=True)
class GateReport:
    """Every verdict of one gate, the environment check and the exit code the CLI returns."""

    suite: str
    verdicts: tuple[GateVerdict, ...]
    options: GateOptions = field(default_factory=GateOptions)
    env_differences: tuple[EnvDifference, ...] = ()
    incomparable: bool = False
    baseline_path: str | None = None
    baseline_source: str = "baseline"
    notes: tuple[str, ...] = ()
    #: Why the run judged is incomplete (compare/completeness.py): it cannot pass, exit 3.
    incomplete: str | None = None

    @property
    def failures(self) -> tuple[GateVerdict, ...]:
        return tuple(v for v in self.verdicts if v.fails)

    @property
    def crashes(self) -> tuple[GateVerdict, ...]:
        return tuple(v for v in self.verdicts if v.verdict is Verdict.CRASHED)

    def of(self, *verdicts: Verdict) -> tuple[GateVerdict, ...]:
        return tuple(v for v in self.verdicts if v.verdict in verdicts)

    def counts(self) -> dict[str, int]:
        counts = {v.value: 0 for v in Verdict}
        for item in self.verdicts:
            counts[item.verdict.value] += 1
        return counts

    @property
    def exit_code(self) -> int:
        """3 crash, failed correctness or an incomplete run, else 4 incomparable, else 1
        regression, else 0."""
        if self.crashes or self.incomplete:
            return ExitCode.LAYER_ERROR
        if self.incomparable:
            return ExitCode.BASELINE
        if self.failures:
            return ExitCode.FAILED_GATE
        return ExitCode.OK

    @property
    def short_of_rounds(self) -> tuple[GateVerdict, ...]:
        """Layers not judged because a side has fewer than MIN_ROUNDS timing rounds."""
        return tuple(v for v in self.verdicts if v.too_few_rounds)

    @property
    def judged(self) -> tuple[GateVerdict, ...]:
        return self.of(Verdict.OK, Verdict.IMPROVED, Verdict.REGRESSED)

    @property
    def status(self) -> str:
        """PASS, REGRESSED, CRASHED, INCOMPLETE (the run lacks results: exit 3), INCOMPARABLE;
        or INCONCLUSIVE (exit 0: no regression is shown, and none is ruled out) when layers
        had too few rounds to be judged, or when every layer compared was inconclusive."""
        code = self.exit_code
        if self.incomplete and not self.crashes:
            return "INCOMPLETE"
        if code == ExitCode.OK and (
            self.short_of_rounds or (self.of(Verdict.INCONCLUSIVE) and not self.judged)
        ):
            return "INCONCLUSIVE"
        return {0: "PASS", 1: "REGRESSED", 3: "CRASHED", 4: "INCOMPARABLE"}[code]

    def summary(self) -> str:
        """One line: status and the non-zero counts."""
        parts = [f"{n} {name.lower()}" for name, n in self.counts().items() if n]
        return f"{self.status}: " + (", ".join(parts) if parts else "nothing compared")


def pct(x: float) -> str:
    return f"{x * 100:.1f}%"


def format_interval(low: float, high: float) -> str:
    """`0.981-1.034`, or "unbounded" where the interval reaches past x1000 either way (two
    rounds whose medians differ give bounds such as 0.000-1.8e22: no measurement at all)."""
    finite = math.isfinite(low) and math.isfinite(high)
    if not finite or high > UNBOUNDED_RATIO or low < 1.0 / UNBOUNDED_RATIO:
        return "unbounded"
    return f"{low:.3f}-{high:.3f}"


def format_ratio(ratio: float, low: float, high: float, level: float) -> str:
    return f"x{ratio:.3f} ({level:.0%} CI {format_interval(low, high)})"
