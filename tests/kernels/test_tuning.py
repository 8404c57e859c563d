"""The one tuner (kernels/tuning.py): how it ranks candidates and what it remembers.

On the CPU nothing can be timed, so `do_bench` is replaced by a table of medians and the
device tag by a fake GPU's; what is under test is the choosing, not the timing."""

from __future__ import annotations

import json

import pytest
import triton.testing

from opbench.kernels import tuning
from opbench.kernels.tuning import Config, choose

CANDIDATES = [Config.of(BLOCK=b, num_warps=4) for b in (64, 128, 256, 512)]


@pytest.fixture
def fake_gpu(monkeypatch, tmp_path):
    """A GPU whose medians come from `medians[block][round]`; block 512 fails to compile."""
    monkeypatch.setenv("OPBENCH_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(tuning, "device_tag", lambda device: "FakeGPU|sm90|triton-x")
    tuning.clear_memory()
    medians = {64: [3.0, 3.0], 128: [1.0, 1.2], 256: [1.1, 0.9]}
    calls: list[tuple[int, int]] = []

    def do_bench(fn, warmup, rep, return_mode):
        assert return_mode == "median"
        block = fn()
        final = rep == tuning.FINAL_ROUND_MS
        calls.append((block, int(final)))
        return medians[block][int(final)]

    def make_call(config):
        if config["BLOCK"] == 512:
            raise RuntimeError("out of shared memory")
        return lambda: config["BLOCK"]

    monkeypatch.setattr(triton.testing, "do_bench", do_bench)
    yield make_call, calls, tmp_path
    tuning.clear_memory()


def test_best_two_are_timed_again_and_the_final_round_decides(fake_gpu) -> None:
    make_call, calls, cache_dir = fake_gpu
    choice = choose("demo", "K1", CANDIDATES, "cuda", make_call)
    # Round one ranks 128 (1.0) before 256 (1.1); their longer final round picks 256 (0.9).
    assert choice.config["BLOCK"] == 256 and choice.source == "tuned"
    assert calls == [(64, 0), (128, 0), (256, 0), (128, 1), (256, 1)]
    entry = json.loads((cache_dir / "plans.json").read_text())["FakeGPU|sm90|triton-x|demo|K1"]
    assert entry["config"]["meta"] == {"BLOCK": 256}
    errors = [c for c in entry["candidates"] if "error" in c]
    assert len(errors) == 1 and "out of shared memory" in errors[0]["error"]


def test_a_later_process_reads_the_choice_from_disk(fake_gpu) -> None:
    make_call, calls, _ = fake_gpu
    choose("demo", "K1", CANDIDATES, "cuda", make_call)
    tuning.clear_memory()  # as a new process would start
    calls.clear()
    again = choose("demo", "K1", CANDIDATES, "cuda", make_call)
    assert again.source == "cache" and again.config["BLOCK"] == 256 and calls == []


def test_a_reused_plan_skips_tuning_only_where_it_fits(fake_gpu) -> None:
    make_call, calls, _ = fake_gpu
    recorded = {"choices": [{"kernel": "demo", "key": "K1", "device": "FakeGPU|sm90|triton-x",
                             "config": CANDIDATES[0].to_json()}]}  # fmt: skip
    with tuning.reuse(recorded):
        choice = choose("demo", "K1", CANDIDATES, "cuda", make_call)
    assert (choice.source, choice.config, calls) == ("reused", CANDIDATES[0], [])
    other_gpu = {"choices": [dict(recorded["choices"][0], device="OtherGPU|sm80|triton-x")]}
    with tuning.reuse(other_gpu), pytest.warns(tuning.PlanMismatch, match="OtherGPU"):
        choice = choose("demo", "K1", CANDIDATES, "cuda", make_call)
    assert choice.source == "retuned" and choice.config["BLOCK"] == 256 and calls


def test_config_json_round_trip() -> None:
    config = Config.of(KIND="tma", BLOCK_M=128, PERSISTENT=True, num_warps=8, num_stages=3,
                       maxnreg=128)  # fmt: skip
    assert Config.from_json(json.loads(json.dumps(config.to_json()))) == config


def test_precompile_starts_every_candidate_and_swallows_failures(fake_gpu, monkeypatch) -> None:
    """Before timing, every candidate is made once inside `precompiling` (its KernelCalls then
    only submit compiles to Triton's thread pool); a candidate that fails there is met again,
    and recorded, by the timed pass."""
    make_call, _, _ = fake_gpu
    seen: list[tuple[int, bool]] = []

    def recording(config):
        seen.append((config["BLOCK"], tuning.is_precompiling()))
        return make_call(config)

    choice = choose("demo", "K2", CANDIDATES, "cuda", recording)
    assert choice.config["BLOCK"] == 256
    assert seen[:4] == [(b, True) for b in (64, 128, 256, 512)], "all made first, precompiling"
    assert all(not flag for _, flag in seen[4:]) and not tuning.is_precompiling()
    seen.clear()
    monkeypatch.setenv("OPBENCH_PARALLEL_COMPILE", "0")
    choose("demo", "K3", CANDIDATES, "cuda", recording)
    assert all(not flag for _, flag in seen), "switched off: the timed pass alone compiles"


def test_a_choice_nested_in_a_precompile_times_and_remembers_nothing(fake_gpu) -> None:
    make_call, calls, cache_dir = fake_gpu
    with tuning.precompiling():
        choice = choose("inner", "K4", CANDIDATES, "cuda", make_call)
    assert choice.config == CANDIDATES[0] and calls == []
    assert not (cache_dir / "plans.json").exists()
    assert choose("inner", "K4", CANDIDATES, "cuda", make_call).source == "tuned"


def test_tuning_nested_in_a_candidate_is_counted_once(fake_gpu, monkeypatch) -> None:
    """A candidate whose set-up tunes a kernel of its own (a fused group's): the inner tuning
    is part of the outer one's wall time, so TUNING_SECONDS grows by the outer time alone (it
    used to add both, and a run's time split showed a negative check time)."""
    make_call, _, _ = fake_gpu
    monkeypatch.setenv("OPBENCH_PARALLEL_COMPILE", "0")
    clock = iter(float(t) for t in range(100))
    monkeypatch.setattr(tuning.time, "perf_counter", lambda: next(clock))
    inner = [Config.of(BLOCK=b, num_warps=4) for b in (64, 128)]

    def outer_call(config):
        choose("inner", f"K{config['BLOCK']}", inner, "cuda", make_call)
        return make_call(config)

    before = tuning.TUNING_SECONDS[0]
    choose("outer", "K", CANDIDATES[:3], "cuda", outer_call)
    # perf_counter ticks once per read. The outer _tune reads it first (0) and last (4); in
    # between, each of its three candidates starts an inner tuning (1, 2, 3), which books
    # nothing of its own. Counting every level, as before, gave 4 + 3 x 1 (or more).
    assert tuning.TUNING_SECONDS[0] - before == 4.0
