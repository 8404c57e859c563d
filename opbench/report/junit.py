"""JUnit XML for CI test tabs: one testcase per (model, layer, backend).

A regression (or a missed speed-up target, from `opbench compare`) is a <failure>, a crash or
failed correctness an <error>, anything that could not be judged (inconclusive, incomparable,
no baseline) <skipped>. Numbers go in the testcase's <properties>, as pytest's
record_property writes them, so CI viewers that show properties list the ratio and interval.

Any command builds `JUnitCase`s and calls `write_junit`; `cases_from_gate` does it for the gate.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from opbench.compare.gate import GateReport, GateVerdict, Verdict


class Outcome(str, Enum):
    PASSED = "passed"
    FAILURE = "failure"
    ERROR = "error"
    SKIPPED = "skipped"


@dataclass(frozen=True)
class JUnitCase:
    """One <testcase>.

    name / classname: what CI shows (classname groups cases, e.g. "encoder.bert_layer").
    outcome: an Outcome (or its value as a string).
    message: one line, the failure/error/skipped message attribute.
    properties: name -> value, written as <property> elements (None values are left out).
    details: longer text, the body of the failure/error element, else <system-out>.
    """

    name: str
    classname: str
    outcome: Outcome | str = Outcome.PASSED
    message: str = ""
    properties: Mapping[str, Any] = field(default_factory=dict)
    details: str = ""
    time_s: float = 0.0


# XML 1.0 forbids most control characters even when escaped: drop them.
_INVALID_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _text(value: Any) -> str:
    if isinstance(value, float):
        value = f"{value:.6g}"
    return _INVALID_XML.sub("", str(value))


def _counts(cases: list[JUnitCase]) -> dict[str, str]:
    outcomes = [Outcome(c.outcome) for c in cases]
    return {
        "tests": str(len(cases)),
        "failures": str(outcomes.count(Outcome.FAILURE)),
        "errors": str(outcomes.count(Outcome.ERROR)),
        "skipped": str(outcomes.count(Outcome.SKIPPED)),
        "time": f"{sum(c.time_s for c in cases):.3f}",
    }


def _properties(parent: ET.Element, properties: Mapping[str, Any]) -> None:
    items = [(k, v) for k, v in properties.items() if v is not None]
    if items:
        node = ET.SubElement(parent, "properties")
        for name, value in items:
            ET.SubElement(node, "property", name=_text(name), value=_text(value))


def junit_xml(
    suite_name: str, cases: Iterable[JUnitCase], properties: Mapping[str, Any] | None = None
) -> str:
    """The XML document: <testsuites> holding one <testsuite> with counts on both."""
    cases = list(cases)
    counts = _counts(cases)
    root = ET.Element("testsuites", name="opbench", **counts)
    suite = ET.SubElement(root, "testsuite", name=_text(suite_name), **counts)
    _properties(suite, properties or {})
    for case in cases:
        outcome = Outcome(case.outcome)
        node = ET.SubElement(
            suite,
            "testcase",
            name=_text(case.name),
            classname=_text(case.classname),
            time=f"{case.time_s:.3f}",
        )
        _properties(node, case.properties)
        if outcome is not Outcome.PASSED:
            result = ET.SubElement(node, outcome.value, message=_text(case.message))
            if outcome is not Outcome.SKIPPED and case.details:
                result.text = _text(case.details)
        if case.details and outcome in (Outcome.PASSED, Outcome.SKIPPED):
            ET.SubElement(node, "system-out").text = _text(case.details)
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write_junit(
    path: Path | str,
    suite_name: str,
    cases: Iterable[JUnitCase],
    properties: Mapping[str, Any] | None = None,
) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(junit_xml(suite_name, cases, properties), encoding="utf-8")
    tmp.replace(path)


def _gate_outcome(v: GateVerdict) -> Outcome:
    if v.verdict is Verdict.CRASHED:
        return Outcome.ERROR
    if v.fails:
        return Outcome.FAILURE
    if v.verdict in (Verdict.OK, Verdict.IMPROVED):
        return Outcome.PASSED
    return Outcome.SKIPPED


def gate_case(suite: str, v: GateVerdict, level: float) -> JUnitCase:
    return JUnitCase(
        name=f"{v.layer} ({v.backend})",
        classname=f"{suite}.{v.model}",
        outcome=_gate_outcome(v),
        message=v.message or v.verdict.value,
        details=v.message,
        properties={
            "verdict": v.verdict.value,
            "ratio": v.ratio,
            "ci_low": v.ci_low,
            "ci_high": v.ci_high,
            "ci_level": level if v.ci_low is not None else None,
            "threshold": v.threshold,
            "p_value": v.p_value,
            "bh_adjusted_p": v.q_value,
            "baseline_median_ms": v.baseline_ms,
            "current_median_ms": v.current_ms,
            "baseline_cv": v.cv_baseline,
            "current_cv": v.cv_current,
            "rounds": None if v.rounds is None else f"{v.rounds[0]}/{v.rounds[1]}",
        },
    )


def cases_from_gate(report: GateReport) -> list[JUnitCase]:
    """One case per layer and backend, plus an "environment" case that errors when the
    fingerprints differ and the comparison was refused (exit 4)."""
    diffs = "; ".join(str(d) for d in report.env_differences)
    if report.incomparable:
        env = JUnitCase(
            "environment",
            report.suite,
            Outcome.ERROR,
            f"differs from the baseline: {diffs}",
            details=diffs,
        )
    elif diffs:
        env = JUnitCase("environment", report.suite, Outcome.SKIPPED, f"differs (allowed): {diffs}")
    else:
        env = JUnitCase("environment", report.suite, Outcome.PASSED)
    return [env] + [gate_case(report.suite, v, report.options.level) for v in report.verdicts]


def gate_properties(report: GateReport) -> dict[str, Any]:
    o = report.options
    return {
        "baseline": report.baseline_path,
        "threshold": o.threshold,
        "q": o.q,
        "level": o.level,
        "exit_code": report.exit_code,
    }


def write_gate_junit(path: Path | str, report: GateReport) -> None:
    """The gate's JUnit file in one call."""
    write_junit(
        path, f"opbench-gate.{report.suite}", cases_from_gate(report), gate_properties(report)
    )
