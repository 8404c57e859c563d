"""Issue 29, cases 1 to 4, and issue 27's compare rule: verdicts a reviewer would reject
before, each on a fixture of tests/data/reference, with the exit code docs/compare.md's table
gives.

1. prefix differences within noise, or taken from a prefix that fell: UNCERTAIN, with why;
2. another model's profile (GoogLeNet, AlexNet names, a DLA node): bad input, exit 2; a path
   prefix links a layer only when it proves itself; reformatter rows are never a layer's;
3. a partial run, or a partial suite: no model verdict on the whole profile, never PASS;
4. a model verdict of FAIL sets exit 1, as a row's does;
27. a compute row that matches no layer is unmatched, and the model is then UNCERTAIN.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from verdict_helpers import DATA, cli_compare, compare_file, layer_result, rows_of, run_of

from opbench.compare.compare import compare_run
from opbench.compare.model import Verdict
from opbench.errors import ExitCode, InputError
from opbench.match.links import match_model
from opbench.match.suite_layers import suite_models
from opbench.reference.interface import ReaderOptions
from opbench.reference.model import ReferenceProfile, ReferenceTiming, RefStatus
from opbench.reference.registry import read_reference
from opbench.results.model import EndToEnd, RunResult


def profile_of(name: str) -> ReferenceProfile:
    return read_reference(DATA / name, "auto", ReaderOptions())


def only_error_line(done) -> str:
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.output
    assert "Traceback" not in done.output
    return lines[0]


# ---- 1. prefix differences: within noise, or inflated by a prefix that fell ---------------------

PREFIX_CNN = (
    ("Conv2d_1", "conv2d", (1, 8, 32, 32), None, 0.100),
    ("Pooling_1", "maxpool2d", (1, 8, 16, 16), None, 0.050),
    ("Conv2d_2", "conv2d", (1, 16, 16, 16), None, 0.1175),
    ("Pooling_2", "maxpool2d", (1, 16, 8, 8), None, 0.148),
)


def test_prefix_rows_within_noise_or_after_a_fallen_prefix_are_uncertain(tmp_path: Path):
    c = compare_file(run_of(PREFIX_CNN), "sas_prefix_fell_below.csv")
    rows = rows_of(c)
    source = str(DATA / "sas_prefix_fell_below.csv")
    # 0.005 ms against 0.148 ms was "0.0338x FAIL": the reader flagged it below the noise
    pooling_2 = rows[("Pooling_2",)].primary
    assert pooling_2.verdict == Verdict.UNCERTAIN
    assert pooling_2.reason == (
        "within the noise of the cut timings it combines (under 2% of its prefix time; no "
        f"spread given): {source} 'pooling_2' (line 8) = −T(conv2d_2) + T(pooling_2)"
    )
    # 0.830 - 0.300 was "4.51x PASS": the prefix after pooling_1 fell below conv2d_1's
    conv2d_2 = rows[("Conv2d_2",)].primary
    assert conv2d_2.speedup.value == pytest.approx(0.530 / 0.1175)
    assert conv2d_2.verdict == Verdict.UNCERTAIN
    assert conv2d_2.reason == (
        f"taken from a prefix that fell below the one before it ({source} row 'pooling_1' "
        "(line 6) is faster than the prefix before it): the difference for 'conv2d_2' "
        "(line 7) is inflated"
    )
    assert rows[("Pooling_1",)].primary.verdict == Verdict.UNCERTAIN  # -0.022 ms
    assert rows[("Conv2d_1",)].primary.verdict == Verdict.PASS  # 0.322 / 0.100, clean
    done = cli_compare(tmp_path, run_of(PREFIX_CNN), "sas_prefix_fell_below.csv", "--wide")
    assert done.exit_code == ExitCode.OK, done.output
    # the reader's notes reach the terminal, not only report.md
    assert "reference: 2 layer(s) flagged negative or within noise" in done.stdout
    assert "reference: no spread column" in done.stdout
    assert "FAIL" not in done.stdout.split("reports:")[0].replace("0 FAIL", "")


# ---- 2. another model's profile --------------------------------------------------------------

TINY_CNN = (
    ("conv1", "conv2d", (1, 8, 32, 32), None, 0.05),
    ("relu1", "relu", (1, 8, 32, 32), None, 0.01),
    ("pool1", "maxpool2d", (1, 8, 16, 16), None, 0.01),
    ("conv2", "conv2d", (1, 16, 16, 16), None, 0.05),
)


@pytest.mark.parametrize(
    "fixture",
    [
        "trt_googlenet_fp16.profile.json",  # Caffe names under conv1/, pool1/, conv2/
        "trt_googlenet_dla.profile.json",  # one DLA node naming ~20 GoogLeNet layers
    ],
)
def test_a_googlenet_profile_against_a_tiny_cnn_is_bad_input(fixture: str, tmp_path: Path):
    done = cli_compare(tmp_path, run_of(TINY_CNN), fixture, "--target", "0.1")
    assert done.exit_code == ExitCode.BAD_INPUT, done.output
    line = only_error_line(done)
    assert "no reference row matches a layer of the run" in line
    assert not (tmp_path / "out").exists()


def test_path_prefixes_link_nothing_they_cannot_prove():
    profile = profile_of("trt_googlenet_fp16.profile.json")
    assert "layer types and output shapes from trt_googlenet_fp16.graph.json" in profile.notes
    tiny = run_of(TINY_CNN)
    (model,) = suite_models(tiny.suite_spec, tiny.layers)
    names = [r.name for r in profile.layers]
    matched = match_model(model, profile.layers)
    # no name links at all: what is left are guesses by op type where a row has no shape,
    # and guesses alone are bad input
    assert {link.source for link in matched.links} <= {"signature"}
    assert not matched.confirmed()
    # the conv1 + relu row is no conv alone, the reformatter named after conv1 is overhead
    fused = names.index("conv1/7x7_s2 + conv1/relu_7x7")
    reformatter = names.index("conv1/7x7_s2 input reformatter 0")
    assert profile.layers[reformatter].status == RefStatus.OVERHEAD
    assert {fused, reformatter}.isdisjoint(matched.rows)
    # the same names prove themselves where kind and shape agree: GoogLeNet's own pool1
    pool_run = run_of((("pool1", "maxpool2d", (1, 64, 56, 56), None, 0.01),))
    (googlenet,) = suite_models(pool_run.suite_spec, pool_run.layers)
    links = match_model(googlenet, profile.layers).links
    assert [(names[link.row], link.layer) for link in links] == [("pool1/3x3_s2", "pool1")]
    assert fused not in {link.row for link in links}  # pool1/norm1 (an LRN) is not pool1


def test_an_alexnet_profile_sharing_a_few_names_is_another_model(tmp_path: Path):
    done = cli_compare(tmp_path, run_of(TINY_CNN), "trt_alexnet_caffe.profile.json")
    assert done.exit_code == ExitCode.BAD_INPUT, done.output
    line = only_error_line(done)
    assert "11 of 14 timed reference rows match no layer of the run" in line
    assert "a profile of another model?" in line and "--partial" in line
    assert not (tmp_path / "out").exists()


def test_with_partial_a_row_holding_an_unmatched_member_is_uncertain(tmp_path: Path):
    fast = tuple((*spec[:4], 0.001) for spec in TINY_CNN)  # every row far above any target
    c = compare_file(run_of(fast), "trt_alexnet_caffe.profile.json", partial=True)
    rows = rows_of(c)
    assert rows[("conv1", "relu1")].primary.verdict == Verdict.PASS
    conv2 = rows[("conv2",)].primary  # the row is conv2 + relu2; relu2 is no suite layer
    assert conv2.verdict == Verdict.UNCERTAIN
    assert "also holds relu2, which no layer of the suite stands for" in conv2.reason
    assert {o.name for o in c.overhead} == {"data input reformatter 0"}
    model = c.models[0]
    assert model.verdict == Verdict.UNCERTAIN and model.whole_speedup is None
    assert "11 timed reference row(s) match no layer" in model.reason
    assert "--partial" in model.reason
    done = cli_compare(tmp_path, run_of(fast), "trt_alexnet_caffe.profile.json", "--partial")
    assert done.exit_code == ExitCode.OK, done.output


# ---- 3. a partial run, or a partial suite, against a whole profile -------------------------------

DENSE7 = tuple(
    (name, "linear" if name.startswith("Dense") else "relu", (4, 64), None, ms)
    for name, ms in (
        ("Dense_1", 0.0285),
        ("Relu_1", 0.01),
        ("Dense_2", 0.03),
        ("Relu_2", 0.01),
        ("Dense_3", 0.03),
        ("Relu_3", 0.01),
        ("Dense_4", 0.02),
    )
)


def run_of_layers(specs, timed: set[str], model: str = "dense") -> RunResult:
    """A run whose suite lists every layer of `specs` but timed only `timed` (--layer)."""
    full = run_of(specs, model=model)
    layers = tuple(r for r in full.layers if r.layer in timed)
    return RunResult(**{**full.__dict__, "layers": layers})


def test_a_run_of_one_layer_gives_no_model_verdict_on_the_whole_profile(tmp_path: Path):
    run = run_of_layers(DENSE7, {"Dense_1"})
    c = compare_file(run, "sas_dense7.csv")
    rows = rows_of(c)
    assert rows[("Dense_1",)].primary.verdict == Verdict.PASS  # 0.200 / 0.0285
    others = [row for row in c.rows if row.layers != ("Dense_1",)]
    assert len(others) == 6
    for row in others:
        assert row.primary.verdict == Verdict.NOT_MEASURED
        assert row.primary.reason.startswith("not in this run: no triton result for")
    model = c.models[0]
    assert model.verdict == Verdict.UNCERTAIN and not model.complete
    assert "6 of 7 layers have no triton time in this run" in model.reason
    # judged on what both sides measured: Dense_1 alone, never 1.17 ms / 0.0285 ms = 41x
    assert model.speedup.value == pytest.approx(0.200 / 0.0285)
    assert model.basis == "rows measured on both sides"
    assert model.whole_speedup is None and model.end_to_end_speedup is None
    assert c.whole_speedup is None
    done = cli_compare(tmp_path, run, "sas_dense7.csv")
    assert done.exit_code == ExitCode.OK, done.output
    assert "model verdict UNCERTAIN" in done.stdout and "model verdict PASS" not in done.stdout
    data = json.loads((tmp_path / "out" / "comparison.json").read_text())
    assert data["models"][0]["verdict"] == "UNCERTAIN" and data["models"][0]["complete"] is False


RESNET3 = (
    ("Conv_0", "conv2d", (1, 64, 112, 112), None, 0.20),
    ("relu1", "relu", (1, 64, 112, 112), "Conv_0 + Relu_1", 0.05),
    ("MaxPool_2", "maxpool2d", (1, 64, 56, 56), None, 0.05),
)


def test_a_three_layer_suite_against_a_whole_resnet_profile(tmp_path: Path):
    run = run_of(RESNET3, model="resnet")
    done = cli_compare(tmp_path, run, "trt_resnet_a100_fp32.profile.json")
    assert done.exit_code == ExitCode.BAD_INPUT, done.output
    assert "--partial" in only_error_line(done)
    c = compare_file(run, "trt_resnet_a100_fp32.profile.json", partial=True)
    assert rows_of(c)[("Conv_0", "relu1")].primary.verdict == Verdict.PASS
    model = c.models[0]
    assert model.verdict == Verdict.UNCERTAIN
    assert "21 timed reference row(s) match no layer" in model.reason
    assert model.speedup.value == pytest.approx((0.52224 + 0.093184) / 0.30)
    assert c.whole_speedup is None


# ---- 4. the exit code follows the model verdict too -----------------------------------------


def dense_run(e2e_ms: float) -> RunResult:
    full = run_of(DENSE7, model="dense")
    eager = EndToEnd(
        model="dense",
        backend="triton",
        status="ok",
        samples_ms=((e2e_ms,) * 20,),
        timer="cuda-events",
        mode="eager",
    )
    return RunResult(**{**full.__dict__, "end_to_end": (eager,)})


def test_a_model_that_fails_its_target_end_to_end_exits_1(tmp_path: Path):
    # every layer PASSes its row (0.2 / 0.03 …), but launching them one by one costs 0.8 ms:
    # the whole model is 1.17 / 0.8 = 1.46x, under the 1.5x target
    run = dense_run(0.8)
    c = compare_file(run, "sas_dense7.csv")
    assert {row.primary.verdict for row in c.rows} == {Verdict.PASS}
    model = c.models[0]
    assert model.verdict == Verdict.FAIL and model.basis == "end-to-end (eager)"
    assert model.speedup.value == pytest.approx(1.17 / 0.8)
    junit = tmp_path / "j.xml"
    done = cli_compare(tmp_path, run, "sas_dense7.csv", "--junit", str(junit))
    assert done.exit_code == ExitCode.FAILED_GATE, done.output
    assert "gate failed: 1 model(s) FAIL (dense)" in done.stderr
    assert 'name="model dense (triton) target 1.5x"' in junit.read_text()
    assert "<failure" in junit.read_text()
    waived = cli_compare(tmp_path, run, "sas_dense7.csv", "--no-gate")
    assert waived.exit_code == ExitCode.OK, waived.output
    assert "below target (not gated): 1 model(s) FAIL" in waived.stderr
    fast = cli_compare(tmp_path, dense_run(0.5), "sas_dense7.csv")
    assert fast.exit_code == ExitCode.OK, fast.output
    assert "model verdict PASS" in fast.stdout


# ---- issue 27: compute rows that match no layer ------------------------------------------------


def _row(name: str, ms: float, index: int, raw_type: str, status: str = RefStatus.TIMED):
    return ReferenceTiming(
        engine="onnxruntime",
        source="ref.json",
        index=index,
        name=name,
        raw_type=raw_type,
        status=status,
        median_ms=ms,
    )


def test_an_unmatched_compute_row_keeps_the_model_from_passing():
    run = run_of((("fc1", "linear", (4, 64), None, 0.1), ("fc2", "linear", (4, 64), None, 0.1)))
    rows = [
        _row("fc1", 1.0, 0, "Gemm"),
        _row("/Add", 0.4, 1, "Add"),  # a residual join the suite does not have
        _row("ReorderOutput", 0.2, 2, "ReorderOutput", RefStatus.OVERHEAD),
        _row("fc2", 1.0, 3, "Gemm"),
    ]
    profile = ReferenceProfile("onnxruntime", "ref.json", "onnxruntime", tuple(rows), 2.6)
    c = compare_run(run, profile)
    assert [u.name for u in c.unmatched if u.side == "reference"] == ["/Add"]
    assert [o.name for o in c.overhead] == ["ReorderOutput"]  # only the reader's overhead
    model = c.models[0]
    assert {row.primary.verdict for row in c.rows} == {Verdict.PASS}
    assert model.verdict == Verdict.UNCERTAIN
    assert "1 timed reference row(s) match no layer (/Add)" in model.reason
    assert model.speedup.value == pytest.approx(2.0 / 0.2)  # the matched rows only
    clean = compare_run(run, ReferenceProfile("x", "ref.json", "x", (rows[0], rows[3]), 2.0))
    assert clean.models[0].verdict == Verdict.PASS and clean.models[0].complete


def test_a_reformatter_row_is_never_added_to_a_layer():
    run = run_of((("conv1", "conv2d", (1, 8, 8, 8), None, 0.1),))
    rows = [
        _row("conv1 input reformatter 0", 0.3, 0, "Reformat", RefStatus.OVERHEAD),
        _row("conv1", 0.5, 1, "Convolution"),
    ]
    c = compare_run(run, ReferenceProfile("tensorrt", "p", "tensorrt", tuple(rows), 0.8))
    (row,) = c.rows
    assert row.reference_names == ("conv1",) and row.reference.value == pytest.approx(0.5)
    with pytest.raises(InputError):  # the reformatter alone matches nothing
        compare_run(run, ReferenceProfile("tensorrt", "p", "tensorrt", (rows[0],), 0.3))


def test_a_partial_result_set_is_never_judged_by_the_rows_that_happen_to_be_there():
    # the same run and profile, with one row less on either side: never a model PASS
    specs = tuple((*s[:4], 0.001) for s in DENSE7)
    full = run_of(specs, model="dense")
    assert compare_file(full, "sas_dense7.csv").models[0].verdict == Verdict.PASS
    for left_out in ("Dense_2", "Relu_3"):
        partial = run_of_layers(specs, {s[0] for s in specs} - {left_out})
        assert compare_file(partial, "sas_dense7.csv").models[0].verdict == Verdict.UNCERTAIN
    profile = profile_of("sas_dense7.csv")
    for gone in range(len(profile.layers)):
        fewer = ReferenceProfile(
            profile.engine,
            profile.source,
            profile.format,
            tuple(r for i, r in enumerate(profile.layers) if i != gone),
        )
        model = compare_run(full, fewer, allow_missing=False).models[0]
        assert model.verdict == Verdict.UNCERTAIN, profile.layers[gone].name


def test_layer_result_helper_times_are_points():
    # the helpers' equal samples make every interval a point: the checks above are exact
    r = layer_result("m", "x", "linear", (4, 4), 0.25)
    assert r.stats.ci95 == (0.25, 0.25)


def test_the_shipped_quickstart_reference_leaves_no_compute_row_unmatched():
    # reference_timings/ holds ONNX Runtime's own profile of suites/quickstart.yaml: every
    # compute row is some layer's, every other row the reader's overhead (ORT's inserted
    # reshapes, transposes, squeezes and reorders)
    from opbench.spec.load import load_suite, spec_to_dict

    repo = DATA.parents[2]
    suite = load_suite(repo / "suites" / "quickstart.yaml")
    results = tuple(
        layer_result(m.name, layer.name, layer.op, tuple(layer.output_shape), 0.001)
        for m in suite.models
        for layer in m.layers
    )
    run = RunResult("quickstart", "t", "cpu", layers=results, suite_spec=spec_to_dict(suite))
    c = compare_run(
        run,
        read_reference(
            repo / "reference_timings" / "quickstart_onnxruntime_cpu.json", "auto", ReaderOptions()
        ),
    )
    assert [u.name for u in c.unmatched if u.side == "reference"] == []
    verdicts = {m.model: (m.verdict, m.complete) for m in c.models}
    assert verdicts["mlp"][1] and verdicts["attn"][1]
    # the cnn's to_nhwc permute is folded into ORT's layout conversion: MISSING, not judged
    cnn = next(m for m in c.models if m.model == "cnn")
    assert not cnn.complete and "MISSING from the reference (to_nhwc)" in cnn.reason
