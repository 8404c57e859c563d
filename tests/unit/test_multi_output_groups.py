"""A fused group with two outputs (add → rmsnorm: the sum is the residual stream a later layer
reads, the norm the block's input) through `run` on the CPU: both outputs checked in the
per-group checks, the sum handed to its reader in the whole-model forward, and a group that
drops one of them is an error, never a silent recompute."""

from __future__ import annotations

import pytest

from opbench.backends import triton as triton_backend
from opbench.backends.triton_fused import build_fused
from opbench.pipeline import RunOptions, run_suite
from opbench.results.model import Status
from opbench.spec.load import load_suite_text

SUITE = """\
name: g
defaults: {backends: [torch, triton], timing: {warmup_ms: 0, rep_ms: 1, rounds: 1}}
models:
  - name: stream
    batch: 3
    inputs: {x: [5, 16], r: [5, 16]}
    fuse: true
    layers:
      - {name: sum, op: add, inputs: [x, r]}
      - {name: norm, op: rmsnorm}
      - {name: fc, op: linear, out_features: 16}
      - {name: back, op: add, inputs: [fc, sum]}
"""


def test_both_outputs_are_checked_and_handed_on() -> None:
    run = run_suite(load_suite_text(SUITE, "g.yaml"), RunOptions(quick=True))
    fused = [r for r in run.layers if r.backend == "triton"]
    assert [r.members for r in fused] == [("sum", "norm"), ("fc", "back")]
    assert all(r.correct for r in run.layers), [(r.members, r.correctness) for r in run.layers]
    for row in (e for e in run.end_to_end if e.mode == "eager"):
        assert row.status == Status.OK and row.correct, (row.backend, row.message)


def test_a_group_that_drops_an_output_is_an_error(monkeypatch) -> None:
    def without_the_sum(layers, weights):
        kernel, note = build_fused(layers, weights)
        kernel.extra_names = ()
        kernel.bind = (lambda bind: lambda *xs: _no_extra(bind(*xs)))(kernel.bind)
        return kernel, note

    monkeypatch.setattr(triton_backend, "build_fused", without_the_sum)
    run = run_suite(load_suite_text(SUITE, "g.yaml"), RunOptions(quick=True, backends=["triton"]))
    first = run.find("stream", "sum", "triton")
    assert first.status == Status.ERROR and "no buffer for its output 'sum'" in first.message
    (eager,) = [e for e in run.end_to_end if e.mode == "eager"] or [None]
    assert eager is None or eager.status != Status.OK


def _no_extra(bound):
    from dataclasses import replace

    return replace(bound, extra=())


@pytest.mark.parametrize("op", ["layernorm", "rmsnorm"])
def test_the_planner_gives_the_group_two_outputs(op) -> None:
    model = load_suite_text(SUITE.replace("rmsnorm", op), "g.yaml").models[0]
    assert model.graph.group_outputs((0, 1)) == (0, 1)
    assert triton_backend.fusion_groups(model)[0] == (0, 1)
