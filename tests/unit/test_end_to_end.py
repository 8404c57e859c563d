"""End-to-end bookkeeping on the CPU: the eager forward chains bound launches where the input is
a fixed tensor and passes fresh outputs along otherwise; the cuda_graph mode times a captured
forward (the timer's cuda_graph option) or, for torch.compile backends, their whole-forward
compile in their graph mode; on the CPU it is unsupported with the reason."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import opbench.pipeline.end_to_end as end_to_end
import opbench.pipeline.forward as forward_module
from opbench.backends.base import Bound, Built
from opbench.backends.registry import get_backend
from opbench.measure.timer import Measurement
from opbench.pipeline import ModelData, RunOptions, time_end_to_end
from opbench.pipeline.torch_forward import module_forward
from opbench.results.model import Status
from opbench.spec.load import load_suite, load_suite_text

SUITES = Path(__file__).resolve().parents[1] / "data" / "suites"

# fc1 → act → fc2 in float32, then a float16 layer (a cast), then a fresh chain.
CHAIN = (
    "name: t\ndefaults: {dtype: float32, backends: [torch], timing: {warmup_ms: 0, rep_ms: 1, "
    "rounds: 2}}\nmodels:\n  - name: m\n    batch: 2\n    input: [5]\n    layers:\n"
    "      - {name: fc1, op: linear, out_features: 6}\n"
    "      - {name: act, op: relu}\n"
    "      - {name: fc2, op: linear, out_features: 4}\n"
    "      - {name: half, op: gelu, dtype: float16}\n"
    "      - {name: side, op: silu, input: [3]}\n"
)


def torch_built(suite, data):
    model = suite.models[0]
    backend = get_backend("torch")
    return {
        (i,): backend.build([layer], [data.weights(i)], "cpu")
        for i, layer in enumerate(model.layers)
    }


class Recorder:
    """Wraps a Built: with a preallocating bind (or none), recording binds, outs and calls."""

    def __init__(self, built: Built, preallocate: bool) -> None:
        self.inner = built
        self.binds, self.outs, self.fn_inputs = [], [], []
        self.launches = 0
        self.built = Built(fn=self.fn, bind=self.bind if preallocate else None)

    def fn(self, x):
        self.fn_inputs.append(x)
        return self.inner.fn(x)

    def bind(self, x):
        self.binds.append(x)
        out = torch.empty_like(self.inner.fn(x))
        self.outs.append(out)

        def launch():
            self.launches += 1
            return out.copy_(self.inner.fn(x))

        return Bound(launch, out)


def test_eager_forward_binds_to_preallocated_outputs_and_passes_fresh_ones_along() -> None:
    suite = load_suite_text(CHAIN)
    model = suite.models[0]
    data = ModelData(suite, model, "cpu")
    plain = torch_built(suite, data)
    # fc1 and act preallocate their outputs; the others allocate a new one on every call.
    rec = {g: Recorder(b, preallocate=g in ((0,), (1,))) for g, b in plain.items()}
    forward = forward_module.eager_forward(model, {g: r.built for g, r in rec.items()}, data)
    fc1, act, fc2, half, side = (rec[(i,)] for i in range(5))

    # Bound once, each to the tensor it reads on every call.
    assert len(fc1.binds) == 1 and fc1.binds[0] is data.input(0), "chain start: its fresh input"
    assert len(act.binds) == 1 and act.binds[0] is fc1.outs[0], "the buffer fc1 writes"
    fc2_input = fc2.fn_inputs[-1]
    assert fc2_input is act.outs[0], "fc2 is bound to act's buffer too (it never changes)"
    assert side.fn_inputs[-1] is data.input(4)

    before = {name: len(r.fn_inputs) for name, r in (("fc2", fc2), ("half", half))}
    launches = fc1.launches
    outs = forward.call()
    assert fc1.launches == launches + 1 and act.launches == launches + 1
    assert len(fc2.fn_inputs) == before["fc2"] + 1 and fc2.fn_inputs[-1] is act.outs[0]
    # fc2 allocates its output: the next layer gets that call's tensor, cast to its dtype.
    assert len(half.fn_inputs) == before["half"] + 1
    expected = plain[(2,)].fn(plain[(1,)].fn(plain[(0,)].fn(data.input(0))))
    assert half.fn_inputs[-1].dtype == torch.float16
    assert torch.equal(half.fn_inputs[-1], expected.half())
    assert len(half.binds) == 0, "an input made anew on every call is never bound"
    # The forward returns every model output: the first chain's end, then the side chain's.
    assert torch.equal(outs[0], plain[(3,)].fn(expected.half()))
    assert torch.equal(outs[1], plain[(4,)].fn(data.input(4)))
    assert forward.buffers == (fc1.outs[0], act.outs[0]), "the buffers a checked call poisons"


def test_eager_forward_without_bind_steps_is_the_plain_chain() -> None:
    suite = load_suite_text(CHAIN)
    model = suite.models[0]
    data = ModelData(suite, model, "cpu")
    plain = torch_built(suite, data)
    rec = {g: Recorder(b, preallocate=False) for g, b in plain.items()}
    forward = forward_module.eager_forward(model, {g: r.built for g, r in rec.items()}, data)
    forward.call()
    act = rec[(1,)]
    # act reads the tensor fc1 returned in the same call, never one from an earlier call.
    assert act.fn_inputs[-1] is not act.fn_inputs[-2]
    torch.testing.assert_close(act.fn_inputs[-1], plain[(0,)].fn(data.input(0)))


class FakeTimer:
    """Stands in for time_callable: records each timing asked for and calls fn twice."""

    def __init__(self) -> None:
        self.timings, self.holds = [], []

    def __call__(self, fn, timing, device, **options):
        self.timings.append(timing)
        self.holds.append(options.get("hold", True))
        fn()
        fn()
        return Measurement(((0.5, 0.7),) * timing.rounds, "fake")


def test_cpu_records_both_modes_and_says_why_there_is_no_graph() -> None:
    suite = load_suite(SUITES / "tiny.yaml")
    model = suite.models[0]
    data = ModelData(suite, model, "cpu")
    built = torch_built(suite, data)
    eager, graph = time_end_to_end(model, "torch", built, data, RunOptions(), get_backend("torch"))
    assert (eager.mode, eager.status, eager.timer) == ("eager", Status.OK, "perf_counter")
    assert len(eager.samples_ms) == 2 and eager.stats is not None
    assert (graph.mode, graph.status) == ("cuda_graph", Status.UNSUPPORTED)
    assert graph.message == "no CUDA graphs on the CPU" and graph.samples_ms == ()


def test_a_model_missing_a_layer_is_unsupported_in_both_modes() -> None:
    suite = load_suite(SUITES / "tiny.yaml")
    model = suite.models[0]
    data = ModelData(suite, model, "cpu")
    built = torch_built(suite, data)
    del built[(2,)]
    rows = time_end_to_end(model, "torch", built, data, RunOptions())
    assert [(e.mode, e.status) for e in rows] == [
        ("eager", Status.UNSUPPORTED),
        ("cuda_graph", Status.UNSUPPORTED),
    ]
    assert all("not every layer" in e.message for e in rows)


def test_graph_mode_times_a_captured_forward_on_cuda(monkeypatch) -> None:
    """On a GPU the graph row is the same chained forward, timed with cuda_graph on."""
    timer = FakeTimer()
    monkeypatch.setattr(end_to_end, "time_callable", timer)
    monkeypatch.setattr(end_to_end, "recover", lambda device: None)
    suite = load_suite(SUITES / "tiny.yaml")
    model = suite.models[0]
    data = ModelData(suite, model, "cpu")  # the data stays on the CPU: only the path is tested
    built = torch_built(suite, data)
    eager, graph = time_end_to_end(
        model, "torch", built, data, RunOptions(device="cuda"), get_backend("torch")
    )
    assert [t.cuda_graph for t in timer.timings] == [False, True]
    assert (graph.mode, graph.status, graph.timer) == ("cuda_graph", Status.OK, "fake")
    assert graph.samples_ms == ((0.5, 0.7),) * 2
    assert graph.message == "the model as one nn.Module"  # torch's forward: pipeline/torch_forward
    assert (eager.mode, eager.status) == ("eager", Status.OK)


def test_torch_compile_graph_figure_is_its_whole_forward_compile(monkeypatch) -> None:
    from opbench.backends.torch_compile import TorchCompile

    graphs, modes = [], []

    def counting_backend(graph_module, example_inputs, mode=None, options=None):
        graphs.append(graph_module)
        modes.append(mode)
        return graph_module.forward

    timer = FakeTimer()
    monkeypatch.setattr(end_to_end, "time_callable", timer)
    monkeypatch.setattr(TorchCompile, "compiler", staticmethod(counting_backend))
    suite = load_suite_text(CHAIN)
    model = suite.models[0]
    data = ModelData(suite, model, "cpu")
    backend = get_backend("torch-compile")
    built = {
        (i,): backend.build([layer], [data.weights(i)], "cpu")
        for i, layer in enumerate(model.layers)
    }
    per_layer = len(graphs)
    options = RunOptions(device="cuda")
    eager, graph = time_end_to_end(model, "torch-compile", built, data, options, backend)
    assert per_layer == 5 and len(graphs) == 6, "one more compile: the whole forward"
    assert modes[-1] == "reduce-overhead"
    assert len(graphs[-1].graph.find_nodes(op="placeholder")) >= 2, "both chain inputs"
    assert [t.cuda_graph for t in timer.timings] == [False, False], (
        "reduce-overhead captures its own graphs: the timer does not capture again"
    )
    assert timer.holds == [False, True], (
        "eager keeps the host's time; the compiled graph's per-call host work must not leak in"
    )
    assert graph.status == Status.OK and "reduce-overhead" in graph.message
    assert eager.status == Status.OK and eager.message is None


def test_a_failed_capture_is_an_error_row_not_a_crash(monkeypatch) -> None:
    def failing_timer(fn, timing, device, **options):
        if timing.cuda_graph:
            raise RuntimeError("operation not permitted when stream is capturing\nmore")
        return Measurement(((1.0,),), "fake")

    monkeypatch.setattr(end_to_end, "time_callable", failing_timer)
    monkeypatch.setattr(end_to_end, "recover", lambda device: None)
    suite = load_suite(SUITES / "tiny.yaml")
    model = suite.models[0]
    data = ModelData(suite, model, "cpu")
    eager, graph = time_end_to_end(
        model, "torch", torch_built(suite, data), data, RunOptions(device="cuda")
    )
    assert eager.status == Status.OK
    assert graph.status == Status.ERROR and graph.message.startswith("RuntimeError: operation")
    assert "more" not in graph.message


@pytest.mark.parametrize("mode", ["eager", "cuda_graph"])
def test_both_modes_round_trip_through_run_json(tmp_path: Path, mode: str) -> None:
    from opbench.pipeline import run_suite
    from opbench.results.io import read_run

    path = tmp_path / "run.json"
    run = run_suite(load_suite(SUITES / "tiny.yaml"), RunOptions(), run_path=path)
    saved = [e for e in read_run(path).end_to_end if e.mode == mode]
    assert saved == [e for e in run.end_to_end if e.mode == mode] and len(saved) == 2


def test_compiled_layers_mark_weights_static_for_cuda_graph_modes(monkeypatch) -> None:
    """Dynamo lifts closure tensors to graph inputs, and CUDA-graph modes copy non-static inputs
    on every call: torch-compile's weights (and the whole forward's inputs) must be static."""
    from opbench.backends.torch_compile import TorchCompile

    marked = []
    monkeypatch.setattr(
        torch._dynamo, "mark_static_address", lambda t, guard=False: marked.append(t)
    )
    monkeypatch.setattr(TorchCompile, "compiler", "eager")
    suite = load_suite_text(CHAIN)
    model = suite.models[0]
    data = ModelData(suite, model, "cpu")
    built = get_backend("torch-compile").build([model.layers[0]], [data.weights(0)], "cpu")
    assert sorted(tuple(t.shape) for t in marked) == [(6,), (6, 5)], "fc1's weight and bias"
    eager = get_backend("torch").build([model.layers[0]], [data.weights(0)], "cpu")
    torch.testing.assert_close(built.fn(data.input(0)), eager.fn(data.input(0)))


def test_the_compiled_whole_forward_keeps_every_chain_alive() -> None:
    """A compiler drops what reaches no output: the whole-forward function hands it every
    chain's end, so a model of two chains is timed with both (fc1..half, then side)."""
    suite = load_suite_text(CHAIN)
    model = suite.models[0]
    data = ModelData(suite, model, "cpu")
    calls = []

    class NoCompiler:
        def compile_model(self, forward, inputs):
            def run(*args):
                outputs = forward(*args)
                calls.append(outputs)
                return outputs

            return run

    forward = module_forward(model, data, "cpu", NoCompiler())
    outputs = forward.call()
    assert [tuple(o.shape) for o in outputs] == [(2, 4), (2, 3)]  # half's output, then side's
    assert outputs[0].dtype == torch.float16 and len(calls) == 2  # compiled once, then timed


def test_a_suite_timed_as_graphs_still_gets_an_eager_row(monkeypatch) -> None:
    """`timing: {cuda_graph: true}` is for the layers: the eager row is Python issuing the
    layers (never a replay), and only the graph row replays a capture (seen on the H200: the
    memory-bound suite's eager rows were graph replays, and torch.compile's own graphs were
    captured a second time, which torch refuses)."""
    timer = FakeTimer()
    monkeypatch.setattr(end_to_end, "time_callable", timer)
    monkeypatch.setattr(end_to_end, "recover", lambda device: None)
    text = CHAIN.replace("rounds: 2}", "rounds: 2, cuda_graph: true}")
    suite = load_suite_text(text)
    model = suite.models[0]
    assert model.layers[0].timing.cuda_graph
    data = ModelData(suite, model, "cpu")
    built = torch_built(suite, data)
    eager, graph = time_end_to_end(
        model, "torch", built, data, RunOptions(device="cuda"), get_backend("torch")
    )
    assert [t.cuda_graph for t in timer.timings] == [False, True]
    assert (eager.status, graph.status) == (Status.OK, Status.OK)
