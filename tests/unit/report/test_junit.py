"""JUnit XML: parsed back, counts and elements checked, names escaped."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from opbench.compare.baseline import baseline_from_run
from opbench.compare.gate import gate
from opbench.report.junit import (
    JUnitCase,
    Outcome,
    cases_from_gate,
    junit_xml,
    write_gate_junit,
    write_junit,
)
from opbench.results.model import Correctness, LayerResult, RunResult, Status

ENV = {"gpu_name": "H200", "driver": "1", "torch": "2", "triton": "3", "kernel_version": "k"}


def layer(name, scale=1.0, **kw) -> LayerResult:
    values = dict(
        model="mlp[batch=8]",
        layer=name,
        op="linear",
        backend="triton",
        status=Status.OK,
        dtype="float16",
        input_shape=(1,),
        output_shape=(1,),
        samples_ms=tuple((m * scale,) for m in (1.0, 1.003, 0.997, 1.002, 0.998)),
        correctness=Correctness(rel_l2=0.0, max_abs=0.0, nonfinite=0, tolerance=1e-3),
    )
    values.update(kw)
    return LayerResult(**values)


def run(*layers, env=ENV):
    return RunResult(
        suite="enc", started_at="t", device="cuda", env=env, layers=layers, complete=True
    )


def parse(text: str) -> ET.Element:
    return ET.fromstring(text.encode("utf-8"))


def test_counts_and_elements_per_outcome():
    cases = [
        JUnitCase("a", "s.m", Outcome.PASSED, properties={"ratio": 1.0}),
        JUnitCase(
            "b",
            "s.m",
            Outcome.FAILURE,
            "slower",
            properties={"ratio": 1.3, "skip": None},
            details="long",
        ),
        JUnitCase("c", "s.m", "error", "crashed", details="trace"),
        JUnitCase("d", "s.m", Outcome.SKIPPED, "inconclusive", details="why"),
        JUnitCase("e", "s.m", "skipped"),
    ]
    root = parse(junit_xml("suite", cases, {"threshold": 0.05}))
    assert root.tag == "testsuites"
    (suite,) = root.findall("testsuite")
    for node in (root, suite):
        assert (
            node.get("tests"),
            node.get("failures"),
            node.get("errors"),
            node.get("skipped"),
        ) == ("5", "1", "1", "2")
    assert suite.find("properties/property").attrib == {"name": "threshold", "value": "0.05"}
    by_name = {c.get("name"): c for c in suite.findall("testcase")}
    assert (
        by_name["a"].find("failure") is None
        and by_name["a"].find("properties/property").get("value") == "1"
    )
    failure = by_name["b"].find("failure")
    assert failure.get("message") == "slower" and failure.text == "long"
    assert [p.get("name") for p in by_name["b"].findall("properties/property")] == ["ratio"]
    assert by_name["c"].find("error").get("message") == "crashed"
    assert by_name["d"].find("skipped").get("message") == "inconclusive"
    assert by_name["d"].find("system-out").text == "why"


def test_names_are_escaped_and_control_characters_dropped():
    name = 'attn<"q&k">\x01'
    root = parse(junit_xml("s<1>", [JUnitCase(name, "m&n", Outcome.FAILURE, "a < b & c\x02")]))
    case = root.find("testsuite/testcase")
    assert case.get("name") == 'attn<"q&k">' and case.get("classname") == "m&n"
    assert case.find("failure").get("message") == "a < b & c"
    assert root.find("testsuite").get("name") == "s<1>"


def test_gate_report_to_cases():
    base = [layer("ok"), layer("slow"), layer("boom"), layer("gone")]
    cur = [
        layer("ok"),
        layer("slow", scale=1.5),
        layer("boom", status=Status.ERROR, samples_ms=(), correctness=None),
        layer("new"),
    ]
    report = gate(run(*cur), baseline_from_run(run(*base)))
    cases = {c.name: c for c in cases_from_gate(report)}
    assert cases["environment"].outcome is Outcome.PASSED
    assert cases["ok (triton)"].outcome is Outcome.PASSED
    assert cases["slow (triton)"].outcome is Outcome.FAILURE
    assert cases["boom (triton)"].outcome is Outcome.ERROR
    assert (
        cases["gone (triton)"].outcome is Outcome.SKIPPED
        and cases["new (triton)"].outcome is Outcome.SKIPPED
    )
    slow = cases["slow (triton)"]
    assert slow.classname == "enc.mlp[batch=8]"
    assert (
        slow.properties["ratio"] > 1.4
        and slow.properties["ci_low"] > 1.05
        and slow.properties["ci_level"] == 0.99
    )
    assert slow.properties["verdict"] == "REGRESSED"


def test_incomparable_environment_is_an_error_case_and_layers_are_skipped(tmp_path):
    report = gate(run(layer("a")), baseline_from_run(run(layer("a"), env=dict(ENV, driver="2"))))
    path = tmp_path / "out" / "junit.xml"
    write_gate_junit(path, report)
    root = ET.parse(path).getroot()
    suite = root.find("testsuite")
    assert (suite.get("tests"), suite.get("errors"), suite.get("skipped")) == ("2", "1", "1")
    env = [c for c in suite.findall("testcase") if c.get("name") == "environment"][0]
    assert "driver: 2 -> 1" in env.find("error").get("message")
    assert suite.find("properties/property[@name='exit_code']").get("value") == "4"


def test_write_junit_is_atomic_and_overwrites(tmp_path):
    path = tmp_path / "j.xml"
    write_junit(path, "s", [JUnitCase("a", "c")])
    write_junit(path, "s", [JUnitCase("a", "c"), JUnitCase("b", "c", Outcome.FAILURE, "x")])
    assert ET.parse(path).getroot().get("failures") == "1"
    assert [p.name for p in tmp_path.iterdir()] == ["j.xml"]
