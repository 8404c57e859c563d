"""Kernels written to fool the correctness check, run through the real pipeline (run_suite):
one that writes nothing, one that writes half its output, one right only on its first call
with each input. Each must FAIL on every one of 30 fresh runs, after the torch backend has
just computed the right answer for the same input (the memory a lazy kernel would pick up).

The fooling kernels are plain torch: what is under test is the pipeline's check, not Triton.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from opbench.backends import triton as triton_backend
from opbench.backends.base import Bound, Built
from opbench.pipeline import ModelData, RunOptions, WorkItem, measure_item, run_suite
from opbench.pipeline.checks import AFTER_TIMING, SECOND_INPUT, Checks, WrongOutput
from opbench.results.model import Status
from opbench.spec.load import load_suite_text

RUNS = 30
SHAPE = (3, 37, 41)  # fp16, 9 kB: small enough that malloc hands the same chunk back
SUITE = f"""
name: fool
defaults: {{dtype: float16, backends: [torch, triton], timing: {{warmup_ms: 0, rep_ms: 1, rounds: 1}}}}
models:
  - name: m
    batch: {SHAPE[0]}
    input: {list(SHAPE[1:])}
    layers:
      - {{name: act, op: relu}}
"""


def writes_nothing(layer, w) -> Callable:
    return lambda x: torch.empty_like(x)


def writes_half(layer, w) -> Callable:
    def run(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        half = out.numel() // 2
        out.view(-1)[:half] = torch.relu(x).view(-1)[:half]
        return out

    return run


def right_once(layer, w) -> Callable:
    """Right on the first call with each input; afterwards writes nothing."""
    seen: set[int] = set()

    def run(x: torch.Tensor) -> torch.Tensor:
        if x.data_ptr() in seen:
            return torch.empty_like(x)
        seen.add(x.data_ptr())
        return torch.relu(x)

    return run


def run_fooled(monkeypatch, builder, runs: int = RUNS) -> list:
    monkeypatch.setitem(triton_backend.BUILDERS, "relu", builder)
    suite = load_suite_text(SUITE, "fool.yaml")
    results = []
    for _ in range(runs):
        run = run_suite(suite, RunOptions(device="cpu", end_to_end=False))
        by_backend = {r.backend: r for r in run.layers}
        assert by_backend["torch"].correct, "the honest backend passes the same checks"
        results.append(by_backend["triton"])
    return results


@pytest.mark.parametrize("builder", [writes_nothing, writes_half, right_once])
def test_fooling_kernel_fails_every_run(monkeypatch, builder) -> None:
    results = run_fooled(monkeypatch, builder)
    assert all(r.ran for r in results), "a wrong answer is a failed check, not a crash"
    passed = [r for r in results if r.correct]
    assert not passed, f"{builder.__name__} passed {len(passed)} of {RUNS} runs"
    for r in results:
        assert r.correctness.failures, "every failed result says why"
        if builder is right_once:
            # Its first call on each input is right: only the call after timing can catch it.
            corr = r.correctness
            assert corr.rel_l2 <= corr.tolerance and corr.max_abs <= corr.max_abs_limit
            assert all(f.startswith(AFTER_TIMING) for f in corr.failures)


def answer_left_behind(layer, w) -> Callable:
    """Writes half its output into memory that held the whole answer a moment before: the
    layer's result (its own scratch, or the torch backend's), freed just before the output is
    allocated and handed back by the allocator, as CUDA's caching allocator always does and
    malloc mostly does. Memory freed inside the call passes through no fill before it: only
    poisoning the allocation itself shows the unwritten half.

    To take chance out of it, the kernel allocates again until the output lands exactly where
    the answer was (held misses keep malloc from offering the same chunk twice); with glibc it
    takes a few tries at most. Before allocations were poisoned this passed 60 runs of 60."""

    def run(x: torch.Tensor) -> torch.Tensor:
        held = []
        for _ in range(64):
            answer = torch.relu(x)
            where = answer.data_ptr()
            del answer
            out = torch.empty_like(x)
            if out.data_ptr() == where:
                break
            held.append(out)
        half = out.numel() // 2
        out.view(-1)[:half] = torch.relu(x).view(-1)[:half]
        return out

    return run


def test_an_output_allocated_where_the_answer_was_fails_every_check(monkeypatch) -> None:
    results = run_fooled(monkeypatch, answer_left_behind, runs=5)
    for r in results:
        assert r.status == Status.WRONG and not r.correct
        numel = SHAPE[0] * SHAPE[1] * SHAPE[2]
        unwritten = f"{numel - numel // 2} of {numel} elements never written"
        for what in ("", SECOND_INPUT, AFTER_TIMING):
            assert what + unwritten in r.correctness.failures, r.correctness.failures


def test_a_kernel_that_only_knows_the_seeded_input_fails_on_the_second(monkeypatch) -> None:
    """Right for the suite's input (it keeps that answer), wrong for any other."""

    def memorised(layer, w) -> Callable:
        answer: list[torch.Tensor] = []

        def run(x: torch.Tensor) -> torch.Tensor:
            if not answer:
                answer.append(torch.relu(x))
            return answer[0].clone()

        return run

    for r in run_fooled(monkeypatch, memorised, runs=3):
        assert not r.correct
        assert r.correctness.rel_l2 == 0.0
        assert [f for f in r.correctness.failures if f.startswith(SECOND_INPUT)]


def test_each_check_draws_a_second_input_no_earlier_check_drew() -> None:
    """The suite run again in one process draws new second inputs (an earlier run's scratch
    may still hold the old ones' answers); its own seeded input stays the same."""
    suite = load_suite_text(SUITE, "fool.yaml")
    model = suite.models[0]
    runs = [ModelData(suite, model, "cpu") for _ in range(3)]
    seconds = [data.group_inputs((0,), check="triton")[0] for data in runs]
    assert not any(torch.equal(a, b) for i, a in enumerate(seconds) for b in seconds[i + 1 :])
    firsts = [data.group_inputs((0,))[0] for data in runs]
    assert all(torch.equal(firsts[0], x) for x in firsts[1:])


# ---- a backend that preallocates its output at bind time: Bound.out is poisoned ---------------


class PreallocatingBackend:
    """Allocates its output at bind (zeros, the friendliest garbage) and writes `share` of it."""

    name = "triton"

    def __init__(self, share: float) -> None:
        self.share = share

    def build(self, layers, weights, device) -> Built:
        share = self.share

        def bind(x: torch.Tensor) -> Bound:
            out = torch.zeros_like(x)
            n = int(out.numel() * share)

            def launch() -> torch.Tensor:
                out.view(-1)[:n] = torch.relu(x).view(-1)[:n]
                return out

            return Bound(launch=launch, out=out)

        return Built(fn=torch.relu, bind=bind)


@pytest.mark.parametrize("share", [0.0, 0.5])
def test_unwritten_elements_of_a_preallocated_output_are_counted(share: float) -> None:
    suite = load_suite_text(SUITE, "fool.yaml")
    model = suite.models[0]
    result = measure_item(
        WorkItem(model, (0,), "triton"),
        ModelData(suite, model, "cpu"),
        PreallocatingBackend(share),
        RunOptions(device="cpu"),
    )
    numel = SHAPE[0] * SHAPE[1] * SHAPE[2]
    expected = numel - int(numel * share)
    corr = result.correctness
    assert corr.unwritten == expected and corr.nonfinite == expected
    assert not result.correct
    assert f"{expected} of {numel} elements never written" in corr.failures
    assert f"{SECOND_INPUT}{expected} of {numel} elements never written" in corr.failures
    assert f"{AFTER_TIMING}{expected} of {numel} elements never written" in corr.failures


def test_a_preallocated_output_written_in_full_passes() -> None:
    suite = load_suite_text(SUITE, "fool.yaml")
    model = suite.models[0]
    result = measure_item(
        WorkItem(model, (0,), "triton"),
        ModelData(suite, model, "cpu"),
        PreallocatingBackend(1.0),
        RunOptions(device="cpu"),
    )
    assert result.correct and result.correctness.failures == ()
    assert result.correctness.unwritten == 0


def test_every_checked_call_is_validated_not_only_the_first() -> None:
    """A kernel whose output is well-formed on the first call and not on a later one."""
    suite = load_suite_text(SUITE, "fool.yaml")
    model = suite.models[0]
    calls: list[int] = []

    def kernel(x: torch.Tensor) -> torch.Tensor:
        calls.append(1)
        y = torch.relu(x)
        return y if len(calls) == 1 else y.float()

    def validate(out: object) -> str | None:
        assert isinstance(out, torch.Tensor)
        return None if out.dtype == torch.float16 else f"dtype {out.dtype}"

    checks = Checks(
        WorkItem(model, (0,), "triton"),
        ModelData(suite, model, "cpu"),
        Built(fn=kernel),
        "cpu",
        validate=validate,
    )
    checks.first_call()
    with pytest.raises(WrongOutput, match="dtype torch.float32"):
        checks.second_input()


def test_the_plan_reported_is_the_timed_bindings_not_the_second_inputs() -> None:
    """A backend that records each bind's choice in Built.plan (as the Triton one does)."""
    suite = load_suite_text(SUITE, "fool.yaml")
    model = suite.models[0]
    plan: dict = {}
    binds: list[int] = []

    def bind(x: torch.Tensor) -> Bound:
        binds.append(1)
        plan.update(config=f"bind {len(binds)}")
        return Bound(launch=lambda: torch.relu(x))

    class Recording:
        name = "triton"

        def build(self, layers, weights, device) -> Built:
            return Built(fn=torch.relu, bind=bind, plan=plan)

    result = measure_item(
        WorkItem(model, (0,), "triton"),
        ModelData(suite, model, "cpu"),
        Recording(),
        RunOptions(device="cpu"),
    )
    assert result.correct and len(binds) == 2
    assert result.plan == {"config": "bind 1"}
