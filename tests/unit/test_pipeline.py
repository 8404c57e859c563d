"""The pipeline on the CPU: planning, sharding, interrupted runs, layer failures, and the Triton
backend's plumbing (builders monkeypatched: these tests never depend on real kernels)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from opbench.backends import triton as triton_backend
from opbench.backends.base import Unsupported
from opbench.backends.registry import BACKEND_NAMES, get_backend
from opbench.backends.triton_fused import external_inputs
from opbench.ops.activation import GELU
from opbench.ops.base import numel
from opbench.ops.registry import OPS
from opbench.pipeline import ModelData, RunOptions, WorkItem, measure_item, plan_work, run_suite
from opbench.results.io import read_run
from opbench.results.model import Status
from opbench.spec.load import load_suite, load_suite_text

SUITES = Path(__file__).resolve().parents[1] / "data" / "suites"


def backends() -> dict:
    return {name: get_backend(name) for name in BACKEND_NAMES}


@pytest.fixture
def fake_kernels(monkeypatch):
    """Every triton builder replaced by the op's torch computation, fused conv included.

    The plumbing around builders is under test here, not the kernels (tests/kernels/ do that).
    """

    def builder(layer, w):
        op = OPS[layer.op]
        return lambda x: op.forward(x, w, layer)

    for name in OPS:
        monkeypatch.setitem(triton_backend.BUILDERS, name, builder)

    def fused(layers, weights):
        """The group computed layer by layer with the ops' torch forward, by value name."""
        names = external_inputs(layers)

        def run(*xs):
            env = dict(zip(names, xs, strict=True))
            for layer, w in zip(layers, weights, strict=True):
                op = OPS[layer.op]
                cast = {k: v.to(xs[0].dtype) for k, v in w.items()}
                env[layer.name] = op.forward(op.input_arg([env[v] for v in layer.inputs]), cast,
                                             layer)  # fmt: skip
            return env[layers[-1].name]

        return run, "fused " + " → ".join(layer.name for layer in layers)

    monkeypatch.setattr(triton_backend, "build_fused", fused)


# ---- planning ------------------------------------------------------------------------------------


def test_plan_covers_every_layer_and_backend_in_order() -> None:
    suite = load_suite(SUITES / "tiny.yaml")
    items = plan_work(suite, RunOptions(), backends())
    assert [(i.model.name, i.indices, i.backend) for i in items] == [
        ("mlp", (0,), "torch"),
        ("mlp", (1,), "torch"),
        ("mlp", (2,), "torch"),
        ("mlp", (3,), "torch"),
        ("cnn", (0,), "torch"),
        ("cnn", (1,), "torch"),
    ]


def test_plan_filters_models_layers_and_backends() -> None:
    suite = load_suite(SUITES / "fusion.yaml")
    b = backends()
    only_torch = plan_work(suite, RunOptions(backends=["torch"]), b)
    assert {i.backend for i in only_torch} == {"torch"} and len(only_torch) == 13
    only_unfused = plan_work(suite, RunOptions(models=["unfused"]), b)
    assert {i.model.name for i in only_unfused} == {"unfused"}
    only_bn1 = plan_work(suite, RunOptions(layers=["bn1"], backends=["torch"]), b)
    assert [(i.model.name, i.layers[0].name) for i in only_bn1] == [
        ("fused", "bn1"),
        ("unfused", "bn1"),
    ]
    # A fused group is kept whole when any of its layers is asked for.
    fused_bn1 = plan_work(
        suite, RunOptions(layers=["bn1"], backends=["triton"], models=["fused"]), b
    )
    assert [i.indices for i in fused_bn1] == [(0, 1, 2)]


def test_sweep_instances_can_be_selected_by_base_or_full_name() -> None:
    suite = load_suite(SUITES / "sweep_chain.yaml")
    b = backends()
    assert len(plan_work(suite, RunOptions(models=["mlp"]), b)) == 12
    assert {i.model.name for i in plan_work(suite, RunOptions(models=["mlp[batch=3]"]), b)} == {
        "mlp[batch=3]"
    }


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_shards_partition_the_plan(n: int) -> None:
    suite = load_suite(SUITES / "fusion.yaml")
    b = backends()
    full = [(i.model.name, i.indices, i.backend) for i in plan_work(suite, RunOptions(), b)]
    parts = [
        [
            (i.model.name, i.indices, i.backend)
            for i in plan_work(suite, RunOptions(shard=(k, n)), b)
        ]
        for k in range(1, n + 1)
    ]
    assert sorted(x for p in parts for x in p) == sorted(full)
    assert sum(len(p) for p in parts) == len(full), "no item in two shards"


def test_fusion_groups_only_with_fuse_true() -> None:
    suite = load_suite(SUITES / "fusion.yaml")
    fused, unfused = suite.model("fused"), suite.model("unfused")
    assert triton_backend.fusion_groups(fused) == [
        (0, 1, 2),  # conv1 → bn1 → relu1
        (3,),  # conv2 already has an activation: nothing to fold after it
        (4,),
        (5, 6),  # conv3 → silu
        (7,),  # conv4: bn4 starts a new chain, so it is not conv4's output
        (8,),
        (9,),
    ]
    assert triton_backend.fusion_groups(unfused) == [(0,), (1,), (2,)]
    assert get_backend("torch").plan(fused) == [(i,) for i in range(10)], "torch never fuses"


def test_a_group_splits_when_a_member_excludes_the_backend() -> None:
    text = (
        (SUITES / "fusion.yaml")
        .read_text()
        .replace(
            "{name: bn1, op: batchnorm2d}", "{name: bn1, op: batchnorm2d, backends: [torch]}", 1
        )
    )
    suite = load_suite_text(text)
    items = plan_work(suite, RunOptions(models=["fused"]), backends())
    triton_items = [i.indices for i in items if i.backend == "triton"]
    assert triton_items[:2] == [(0,), (2,)], "conv1 and relu1 alone; bn1 is not run on triton"
    # --backend replaces the suite's lists: asked for, triton runs bn1 too, and fuses the chain.
    asked = plan_work(suite, RunOptions(backends=["triton"], models=["fused"]), backends())
    assert [i.indices for i in asked][:1] == [(0, 1, 2)]


def test_asked_backends_replace_the_suites_lists() -> None:
    """A suite listing torch only, run with --backend torch-compile --backend torch-int8: every
    layer is planned on both, in the order asked, and nothing on torch."""
    suite = load_suite(SUITES / "tiny.yaml")
    items = plan_work(suite, RunOptions(backends=["torch-compile", "torch-int8"]), backends())
    per_model = {}
    for item in items:
        per_model.setdefault(item.model.name, []).append((item.backend, item.indices))
    assert per_model["mlp"] == [("torch-compile", (i,)) for i in range(4)] + [
        ("torch-int8", (i,)) for i in range(4)
    ]
    assert {b for b, _ in per_model["cnn"]} == {"torch-compile", "torch-int8"}
    assert len(items) == 12


# ---- whole runs ----------------------------------------------------------------------------------


def test_run_suite_writes_a_complete_run(tmp_path: Path) -> None:
    suite = load_suite(SUITES / "tiny.yaml")
    events = []
    path = tmp_path / "run.json"
    run = run_suite(
        suite,
        RunOptions(),
        run_path=path,
        env={"k": "v"},
        progress=lambda e, p: events.append((e, p)),
    )
    assert run.complete and run.finished_at and run.planned == 6 == len(run.layers)
    assert all(r.status == Status.OK and r.correct for r in run.layers)
    assert read_run(path) == run
    assert run.env == {"k": "v"} and run.suite_spec["name"] == "tiny"
    layer_events = [e for e, _ in events if e != "end_to_end"]
    assert layer_events == ["plan"] + ["start", "done"] * 6
    assert [p for e, p in events if e == "end_to_end"] == list(run.end_to_end)
    assert events[0][1] == 6
    assert [p for e, p in events if e == "done"] == list(run.layers)
    # Both modes per model and backend; on the CPU the graph mode says why it has no figure.
    assert [(e.model, e.backend, e.mode, e.status) for e in run.end_to_end] == [
        ("mlp", "torch", "eager", "ok"),
        ("mlp", "torch", "cuda_graph", "unsupported"),
        ("cnn", "torch", "eager", "ok"),
        ("cnn", "torch", "cuda_graph", "unsupported"),
    ]
    eager = [e for e in run.end_to_end if e.mode == "eager"]
    assert all(len(e.samples_ms) == 2 for e in eager)
    graph = [e for e in run.end_to_end if e.mode == "cuda_graph"]
    assert all(e.message == "no CUDA graphs on the CPU" and not e.samples_ms for e in graph)


def test_interrupted_run_keeps_exactly_the_finished_results(tmp_path: Path) -> None:
    suite = load_suite(SUITES / "tiny.yaml")
    path = tmp_path / "run.json"
    done = []

    def progress(event, payload):
        if event == "done":
            done.append(payload)
            if len(done) == 3:
                raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_suite(suite, RunOptions(), run_path=path, progress=progress)
    saved = read_run(path)
    assert saved.complete is False and saved.finished_at is None
    assert saved.planned == 6
    assert list(saved.layers) == done
    assert [r.layer for r in saved.layers] == ["ln", "fc1", "act"]


def test_a_failing_layer_is_an_error_result_and_the_run_goes_on(
    tmp_path: Path, monkeypatch
) -> None:
    def boom(self, x, weights, layer):
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr(GELU, "forward", boom)
    run = run_suite(load_suite(SUITES / "tiny.yaml"), RunOptions(), run_path=tmp_path / "run.json")
    assert run.complete and len(run.layers) == 6
    act = run.find("mlp", "act", "torch")
    assert act.status == Status.ERROR
    assert act.message.startswith("RuntimeError: boom") and "second line" not in act.message
    assert "test_pipeline.py" in act.message, "the message says where it failed"
    others = [r for r in run.layers if r.layer != "act"]
    assert all(r.status == Status.OK for r in others)
    mlp_e2e = [e for e in run.end_to_end if e.model == "mlp"]
    assert [e.mode for e in mlp_e2e] == ["eager", "cuda_graph"]
    assert all(e.status == Status.UNSUPPORTED for e in mlp_e2e), (
        "no end-to-end time for a model with a broken layer"
    )


def test_quick_and_rounds_options_shape_the_samples() -> None:
    suite = load_suite(SUITES / "tiny.yaml")
    model = suite.models[0]
    data = ModelData(suite, model, "cpu")
    item = WorkItem(model, (0,), "torch")
    result = measure_item(item, data, get_backend("torch"), RunOptions(rounds=4))
    assert len(result.samples_ms) == 4
    result = measure_item(item, data, get_backend("torch"), RunOptions(quick=True, rounds=3))
    assert len(result.samples_ms) == 3


def test_sweep_instances_share_weights_but_not_inputs() -> None:
    suite = load_suite(SUITES / "sweep_chain.yaml")
    small, large = suite.model("mlp[batch=1]"), suite.model("mlp[batch=3]")
    a, b = ModelData(suite, small, "cpu"), ModelData(suite, large, "cpu")
    assert torch.equal(a.weights(0)["weight"], b.weights(0)["weight"])
    assert a.input(0).shape == (1, 5, 12) and b.input(0).shape == (3, 5, 12)
    assert not torch.equal(a.input(0)[0], b.input(0)[0])


def test_end_to_end_follows_new_chains(tmp_path: Path) -> None:
    suite = load_suite(SUITES / "sweep_chain.yaml")
    run = run_suite(suite, RunOptions(models=["mlp[batch=3]"]))
    assert [r.status for r in run.layers] == ["ok"] * 4
    e2e, graph = run.end_to_end
    assert e2e.status == Status.OK and e2e.stats is not None and e2e.mode == "eager"
    assert graph.status == Status.UNSUPPORTED and graph.mode == "cuda_graph"


# ---- the Triton backend's plumbing -----------------------------------------------------------------


def _item(suite, indices=(0,), backend="triton", model=0):
    m = suite.models[model]
    return WorkItem(m, indices, backend), ModelData(suite, m, "cpu")


RELU_SUITE = (
    "name: t\ndefaults: {timing: {warmup_ms: 0, rep_ms: 1, rounds: 5}}\nmodels:\n"
    "  - {name: m, batch: 2, input: [5, 7], layers: [{name: r, op: relu}]}\n"
)


def test_triton_backend_is_available_with_the_interpreter(monkeypatch) -> None:
    import os

    assert os.environ.get("TRITON_INTERPRET") == "1", "tests/conftest.py sets it"
    backend = get_backend("triton")
    assert backend.unavailable_reason("cpu") is None
    monkeypatch.delenv("TRITON_INTERPRET")
    reason = backend.unavailable_reason("cpu")
    assert reason and "TRITON_INTERPRET" in reason


def test_an_op_without_a_builder_is_unsupported(monkeypatch) -> None:
    monkeypatch.delitem(triton_backend.BUILDERS, "relu")
    item, data = _item(load_suite_text(RELU_SUITE))
    result = measure_item(item, data, get_backend("triton"), RunOptions())
    assert result.status == Status.UNSUPPORTED
    assert result.message == "no Triton kernel for op 'relu'"
    assert result.samples_ms == () and result.correctness is None and not result.correct


def test_a_kernel_raising_unsupported_is_unsupported_with_its_reason(monkeypatch) -> None:
    def refuses(layer, w):
        raise Unsupported("relu on a Tuesday is not supported")

    monkeypatch.setitem(triton_backend.BUILDERS, "relu", refuses)
    item, data = _item(load_suite_text(RELU_SUITE))
    result = measure_item(item, data, get_backend("triton"), RunOptions())
    assert (result.status, result.message) == (
        Status.UNSUPPORTED,
        "relu on a Tuesday is not supported",
    )


def test_a_launcher_raising_unsupported_at_call_time_is_unsupported(monkeypatch) -> None:
    def launcher_refuses(layer, w):
        def launch(x):
            raise Unsupported("this shape is not supported")

        return launch

    monkeypatch.setitem(triton_backend.BUILDERS, "relu", launcher_refuses)
    item, data = _item(load_suite_text(RELU_SUITE))
    result = measure_item(item, data, get_backend("triton"), RunOptions())
    assert (result.status, result.message) == (Status.UNSUPPORTED, "this shape is not supported")


def test_a_builder_crash_is_an_error(monkeypatch) -> None:
    def crashes(layer, w):
        raise ValueError("bad block size")

    monkeypatch.setitem(triton_backend.BUILDERS, "relu", crashes)
    item, data = _item(load_suite_text(RELU_SUITE))
    result = measure_item(item, data, get_backend("triton"), RunOptions())
    assert result.status == Status.ERROR
    assert result.message == "build failed: ValueError: bad block size"


def test_a_wrong_kernel_fails_correctness(monkeypatch) -> None:
    monkeypatch.setitem(triton_backend.BUILDERS, "relu", lambda layer, w: lambda x: x * 0.5)
    item, data = _item(load_suite_text(RELU_SUITE))
    result = measure_item(item, data, get_backend("triton"), RunOptions())
    assert result.status == Status.WRONG and not result.correct
    assert result.correctness.rel_l2 > 0.1


def test_interpreted_results_are_marked_and_kept_short(fake_kernels) -> None:
    item, data = _item(load_suite_text(RELU_SUITE))
    result = measure_item(item, data, get_backend("triton"), RunOptions())
    assert result.status == Status.OK and result.correct
    assert result.interpreted
    assert "interpreter" in result.note
    assert result.samples_ms == ((result.host_ms,),), "one timed call: its time is the sample"


def test_fused_group_is_one_result_covering_its_layers(fake_kernels) -> None:
    suite = load_suite(SUITES / "fusion.yaml")
    model = suite.model("fused")
    item = WorkItem(model, (0, 1, 2), "triton")
    result = measure_item(item, ModelData(suite, model, "cpu"), get_backend("triton"), RunOptions())
    assert result.status == Status.OK and result.correct, result.message
    assert result.covers == ("conv1", "bn1", "relu1") and result.layer == "conv1"
    assert result.op == "conv2d+batchnorm2d+relu"
    assert "fused" in result.note
    conv, bn, relu = model.layers[:3]
    assert result.input_shape == conv.input_shape and result.output_shape == relu.output_shape
    # Input read once, output written once, weights read once: the intermediates never move.
    c_out = conv.params["out_channels"]
    weights = numel((c_out, 3, 3, 3)) + c_out + 4 * c_out
    assert result.bytes == 4 * (numel(conv.input_shape) + numel(relu.output_shape) + weights)
    assert result.flops == sum(
        OPS[la.op].flops(la.input_shape, la.output_shape, la.params) for la in (conv, bn, relu)
    )


def test_whole_run_with_fusion(fake_kernels, tmp_path: Path) -> None:
    suite = load_suite(SUITES / "fusion.yaml")
    run = run_suite(suite, RunOptions(backends=["triton"]), run_path=tmp_path / "run.json")
    fused = [r for r in run.layers if r.model == "fused"]
    assert [r.members for r in fused] == [
        ("conv1", "bn1", "relu1"),
        ("conv2",),
        ("bn2",),
        ("conv3", "act3"),
        ("conv4",),
        ("bn4",),
        ("pool",),
    ]
    assert all(r.correct and r.interpreted for r in run.layers)
    assert run.find("fused", "relu1", "triton") is fused[0]
    assert [r.members for r in run.layers if r.model == "unfused"] == [
        ("conv1",),
        ("bn1",),
        ("relu1",),
    ]
    eager = [e for e in run.end_to_end if e.mode == "eager"]
    assert {(e.model, e.status) for e in eager} == {("fused", "ok"), ("unfused", "ok")}
    assert all(e.interpreted and e.samples_ms == ((e.samples_ms[0][0],),) for e in eager)


def test_unavailable_backend_gives_unsupported_results(monkeypatch) -> None:
    monkeypatch.setattr(
        triton_backend.TritonBackend, "unavailable_reason", lambda self, device: "no triton here"
    )
    run = run_suite(load_suite_text(RELU_SUITE), RunOptions())
    by_backend = {r.backend: r for r in run.layers}
    assert by_backend["torch"].status == Status.OK
    assert (by_backend["triton"].status, by_backend["triton"].message) == (
        Status.UNSUPPORTED,
        "no triton here",
    )
    # one layer: its result is the whole forward, so no end-to-end timing is added
    assert run.end_to_end == ()
