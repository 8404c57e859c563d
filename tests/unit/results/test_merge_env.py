"""`opbench merge` refuses shares whose environments the gate would refuse to compare: the
same fingerprint keys (results/fingerprint.py), OPBENCH_* switches and plugins included."""

from __future__ import annotations

import pytest

from opbench.errors import InputError
from opbench.results.fingerprint import ENV_KEYS
from opbench.results.merge import merge_runs
from opbench.results.model import RunResult

ENV = {"gpu_name": "H200", "driver": "570", "torch": "2.11", "triton": "3.6", "kernel_version": "k"}


def share(k: int, **env) -> RunResult:
    return RunResult(
        suite="s",
        started_at=f"t{k}",
        device="cuda",
        env={**ENV, **env},
        shard=(k, 2),
        complete=True,
    )


def test_merge_checks_the_gates_keys() -> None:
    assert {"opbench_vars", "plugins", "kernel_version"} <= set(ENV_KEYS)


@pytest.mark.parametrize(
    "key, first, second",
    [
        ("opbench_vars", {}, {"OPBENCH_TEST_SLOW_LAYERNORM": "1"}),
        ("plugins", [], [{"name": "opbench-extra", "version": "0.2"}]),
        ("kernel_version", "k", "other"),
    ],
)
def test_shares_that_differ_are_refused(key, first, second) -> None:
    with pytest.raises(InputError, match=f"environment differs from a.json: {key}"):
        merge_runs([share(1, **{key: first}), share(2, **{key: second})], ["a.json", "b.json"])


def test_empty_switches_and_plugins_equal_not_recorded() -> None:
    merged, warnings = merge_runs(
        [share(1), share(2, opbench_vars={}, plugins=[])], ["a.json", "b.json"]
    )
    assert merged.complete and warnings == []
