"""Reference rows meet a fused residual block as one group (issue 26): the triton result covers
conv3 → bn3 → add → relu while the downsample branch stands between them in the list, and an
engine's own fused row (ONNX Runtime's FusedConv with Add and Relu) follows the graph's path,
not the list order."""

from __future__ import annotations

from opbench.compare.compare import compare_run
from opbench.reference.model import ReferenceProfile, ReferenceTiming, RefStatus
from opbench.results.model import Correctness, LayerResult, RunResult

GOOD = Correctness(rel_l2=1e-6, max_abs=1e-6, nonfinite=0, tolerance=1e-4)
LAYERS = [  # (name, op, inputs): a bottleneck's tail, the downsample branch listed in between
    ("c3", "conv2d", ["c2"]),
    ("bn3", "batchnorm2d", ["c3"]),
    ("down", "conv2d", ["input"]),
    ("down_bn", "batchnorm2d", ["down"]),
    ("add", "add", ["bn3", "down_bn"]),
    ("relu", "relu", ["add"]),
]
SPEC = {"models": [{"name": "m", "layers": [
    {"name": n, "op": op, "inputs": inputs, "output_shape": [1, 8, 4, 4]} for n, op, inputs in LAYERS
]}]}  # fmt: skip


def result(members: tuple[str, ...], backend: str = "triton", ms: float = 0.1) -> LayerResult:
    return LayerResult(
        model="m", layer=members[0], op="conv2d", backend=backend, status="ok", dtype="float16",
        input_shape=(1, 8, 4, 4), output_shape=(1, 8, 4, 4), correctness=GOOD,
        samples_ms=(tuple(ms * (1 + 0.01 * (i % 3)) for i in range(20)),),
        covers=members if len(members) > 1 else (),
    )  # fmt: skip


def row(index: int, name: str, raw_type: str, members: tuple[str, ...] = ()) -> ReferenceTiming:
    return ReferenceTiming(engine="onnxruntime", source="ref.json", index=index, name=name,
                           raw_type=raw_type, members=members, median_ms=0.5,
                           status=RefStatus.TIMED)  # fmt: skip


FUSED = (result(("c3", "bn3", "add", "relu")), result(("down", "down_bn")))
SINGLE = tuple(result((name,), backend="torch") for name, _, _ in LAYERS)


def groups(rows, results=FUSED) -> set[tuple[str, ...]]:
    run = RunResult(suite="s", started_at="t", device="cuda", complete=True, suite_spec=SPEC,
                    layers=results)  # fmt: skip
    profile = ReferenceProfile(engine="onnxruntime", source="ref.json", format="onnxruntime",
                               layers=tuple(rows))  # fmt: skip
    backend = results[0].backend
    return {r.layers for r in compare_run(run, profile, backend=backend, run_label="r").rows}


def test_one_row_per_layer_group_with_the_fused_result() -> None:
    rows = [row(i, name, op) for i, (name, op, _) in enumerate(LAYERS)]
    assert groups(rows) == {("c3", "bn3", "add", "relu"), ("down", "down_bn")}


def test_an_engines_fused_conv_add_relu_follows_the_graph() -> None:
    rows = [
        row(0, "/down/Conv", "FusedConv", ("Conv",)),  # ORT folds each batchnorm into its conv
        row(1, "/c3/Conv", "FusedConv", ("Conv", "Add", "Relu")),
    ]
    # Unfused results: the engine's row alone must reach the add and the relu past the
    # downsample branch that stands between them in the list.
    found = groups(rows, SINGLE)
    assert ("c3", "bn3", "add", "relu") in found, found
    assert groups(rows) == {("c3", "bn3", "add", "relu"), ("down", "down_bn")}
