"""`opbench merge` joins the shares of one run only: shares of runs with another suite content,
other options (--backend, --rounds, --quick, ...) or another device kind are refused in one
line naming the field and both values, never merged into a run marked complete."""

from __future__ import annotations

from dataclasses import replace

import pytest

from opbench.errors import InputError
from opbench.results.merge import merge_runs
from opbench.results.model import RunResult

SPEC = {
    "name": "s",
    "source": "/home/a/s.yaml",
    "models": [{"name": "m", "layers": [{"name": "fc", "backends": ["torch", "triton"]}]}],
}
OPTIONS = {"backends": [], "models": [], "layers": [], "quick": False, "rounds": None}


def share(k: int, **changes) -> RunResult:
    run = RunResult(
        suite="s",
        started_at=f"t{k}",
        device="cuda",
        suite_spec=SPEC,
        options=OPTIONS,
        shard=(k, 2),
        complete=True,
    )
    return replace(run, **changes)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"options": {**OPTIONS, "rounds": 3}}, "options.rounds is 3 here and None there"),
        (
            {"options": {**OPTIONS, "backends": ["torch"]}},
            r"options.backends is \['torch'\] here and \[\] there",
        ),
        ({"options": {**OPTIONS, "quick": True}}, "options.quick is True here and False there"),
        (
            {
                "suite_spec": {
                    **SPEC,
                    "models": [{"name": "m", "layers": [{"name": "fc", "backends": ["torch"]}]}],
                }
            },  # fmt: skip
            r"suite_spec.models\[0\].layers\[0\].backends is \['torch'\] here and "
            r"\['torch', 'triton'\] there",
        ),
        ({"device": "cpu"}, "device is 'cpu' here and 'cuda' there"),
    ],
    ids=["rounds", "backends", "quick", "suite-backends", "device"],
)
def test_shares_of_different_runs_are_refused(changes, message):
    with pytest.raises(InputError, match=message) as info:
        merge_runs([share(1), share(2, **changes)], ["a.json", "b.json"])
    assert info.value.location.file == "b.json"
    assert "not a share of the run in a.json" in str(info.value)


def test_shares_of_one_run_on_two_machines_merge():
    other_machine = {**SPEC, "source": "/home/b/s.yaml"}
    merged, warnings = merge_runs(
        [share(1), share(2, device="cuda:1", suite_spec=other_machine)], ["a.json", "b.json"]
    )
    assert merged.complete and warnings == [] and merged.options == OPTIONS
