"""The `sas-prefix` reader on graph cuts: each row is a layer and everything it depends on.

The files are made from known per-layer times: a cut's time is the baseline plus the times of
its layers (the additivity docs/sas.md assumes), so the reader must give back each layer's
own time, its noise from the spreads of exactly the cuts it combines, and no time at all
where the cuts cannot tell it apart.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from opbench.errors import InputError
from opbench.reference.interface import Flag, ReaderOptions
from opbench.reference.model import RefStatus, TimeKind
from opbench.reference.prefix_graph import CutRow, describe, solve
from opbench.reference.sas_prefix import READER

# A ResNet downsample block and an identity block after it: x -> main path and downsample
# path -> add -> relu; then the identity block reads that relu twice.
BLOCK = {
    "stem": ["input"],
    "c1": ["stem"],
    "c2": ["c1"],
    "c3": ["c2"],
    "down": ["stem"],
    "add": ["c3", "down"],
    "relu": ["add"],
    "d1": ["relu"],
    "d2": ["d1"],
    "add2": ["d2", "relu"],
}
TIMES = {"stem": 3.0, "c1": 1.0, "c2": 2.0, "c3": 1.5, "down": 0.8, "add": 0.3, "relu": 0.1,
         "d1": 1.1, "d2": 0.9, "add2": 0.25}  # fmt: skip
BASELINE = 0.5


def ancestors(graph: dict[str, list[str]], name: str) -> set[str]:
    out = {name}
    for read in graph[name]:
        if read in graph:
            out |= ancestors(graph, read)
    return out


def cut_csv(
    tmp_path: Path,
    graph: dict[str, list[str]] = BLOCK,
    times: dict[str, float] = TIMES,
    *,
    spread: float = 0.01,
    untimed: dict[str, str] | None = None,
    baseline: bool = True,
) -> Path:
    untimed = untimed or {}
    lines = ["layer,type,inputs,prefix_median_ms,prefix_std_ms,runs,status"]
    if baseline:
        lines.append(f"input,input,,{BASELINE},{spread},10,ok")
    for name, reads in graph.items():
        if name in untimed:
            lines.append(f"# cut of {name}: {untimed[name]}")
            lines.append(f"{name},conv2d,{' '.join(reads)},,,,{untimed[name]}")
            continue
        total = BASELINE * baseline + sum(times[m] for m in ancestors(graph, name))
        lines.append(f"{name},conv2d,{' '.join(reads)},{total:.6f},{spread},10,ok")
    path = tmp_path / "sas_prefix_block.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


def read(path: Path):
    return READER.read(path, ReaderOptions())


def test_every_layer_gets_its_own_time_back(tmp_path):
    profile = read(cut_csv(tmp_path))
    by_name = {t.name: t for t in profile.layers}
    assert by_name["input"].status == RefStatus.INPUT
    assert by_name["input"].time_ms == pytest.approx(BASELINE)
    for name, t in TIMES.items():
        assert by_name[name].time_ms == pytest.approx(t, abs=1e-6), name
        assert by_name[name].time_kind == TimeKind.DERIVED
        assert by_name[name].status == RefStatus.TIMED
    assert [t.name for t in profile.layers] == ["input", *BLOCK]  # walk order, one row each
    assert profile.total_ms == pytest.approx(BASELINE + sum(TIMES.values()))
    assert any("solved from the times of cuts" in note for note in profile.notes)


def test_a_join_combines_four_cuts_and_carries_their_noise(tmp_path):
    by_name = {t.name: t for t in read(cut_csv(tmp_path, spread=0.01)).layers}
    # t_add = T(add) − T(c3) − T(down) + T(stem): the stem is inside both branches
    add = by_name["add"]
    assert dict(add.derived_from) == {"add": 1, "c3": -1, "down": -1, "stem": 1}
    assert describe(add.derived_from) == "T(stem) − T(c3) − T(down) + T(add)"
    assert add.noise_ms == pytest.approx(math.sqrt(4) * 0.01)
    # a chain layer: its cut minus its parent's
    assert dict(by_name["c2"].derived_from) == {"c1": -1, "c2": 1}
    assert by_name["c2"].noise_ms == pytest.approx(math.sqrt(2) * 0.01)
    # the downsample conv: its cut minus the stem's (the main path is not in its cut)
    assert dict(by_name["down"].derived_from) == {"stem": -1, "down": 1}
    # the identity block's add: its main input's cut holds its other input already
    assert dict(by_name["add2"].derived_from) == {"d2": -1, "add2": 1}
    # the first layer: its cut minus the baseline
    assert dict(by_name["stem"].derived_from) == {"input": -1, "stem": 1}


def test_a_difference_within_its_noise_is_flagged(tmp_path):
    by_name = {t.name: t for t in read(cut_csv(tmp_path, spread=0.2)).layers}
    # relu (0.1 ms) and add2 (0.25 ms) are within √2 · 0.2 = 0.28 ms; add (0.3 ms) within 0.4
    assert Flag.BELOW_NOISE in by_name["relu"].flags
    assert Flag.BELOW_NOISE in by_name["add2"].flags
    assert Flag.BELOW_NOISE in by_name["add"].flags
    assert by_name["stem"].flags == ()


def test_an_untimed_cut_is_measured_with_the_next_cut_that_holds_it(tmp_path):
    profile = read(cut_csv(tmp_path, untimed={"c2": "failed: dlScore: ERROR: out of memory"}))
    by_name = {t.name: t for t in profile.layers}
    assert "c2" not in by_name
    both = by_name["c2 + c3"]
    assert both.time_ms == pytest.approx(TIMES["c2"] + TIMES["c3"])
    assert dict(both.derived_from) == {"c1": -1, "c3": 1}
    # the rest does not change: add subtracts the group as one
    assert by_name["add"].time_ms == pytest.approx(TIMES["add"])
    assert any("measured together" in n and "c2 + c3" in n for n in profile.notes)


def test_a_layer_the_cuts_cannot_separate_has_no_time(tmp_path):
    """The stem's cut fails: c1 and down each hold it, so c1 takes it (stem + c1); down's cut
    holds the stem without c1, part of that group: down alone has no time. add's cut holds
    every earlier layer: it measures down + add together."""
    profile = read(cut_csv(tmp_path, untimed={"stem": "not timed: DLPy has no Transpose"}))
    by_name = {t.name: t for t in profile.layers}
    assert by_name["stem + c1"].time_ms == pytest.approx(TIMES["stem"] + TIMES["c1"])
    assert "down" not in by_name and "add" not in by_name
    assert by_name["down + add"].time_ms == pytest.approx(TIMES["down"] + TIMES["add"])
    assert by_name["relu"].time_ms == pytest.approx(TIMES["relu"])
    assert not any("have no SAS time" in n for n in profile.notes)


def test_a_layer_no_cut_separates_is_left_out_and_named(tmp_path):
    """As above, but the downsample branch ends the model: no later cut holds it, so it has
    no time at all. It is left out and named in the notes: compare shows it MISSING."""
    graph = {"stem": ["input"], "c1": ["stem"], "down": ["stem"]}
    path = cut_csv(tmp_path, graph, untimed={"stem": "not timed: DLPy has no Transpose"})
    profile = read(path)
    assert [t.name for t in profile.layers] == ["input", "stem + c1"]
    (note,) = [n for n in profile.notes if "have no SAS time" in n]
    assert "down (its cut holds part of the group stem + c1)" in note
    assert profile.total_ms is None  # two ends: no cut is the whole model


def test_without_a_baseline_the_first_layer_carries_the_call_cost(tmp_path):
    profile = read(cut_csv(tmp_path, baseline=False))
    by_name = {t.name: t for t in profile.layers}
    assert by_name["stem"].time_ms == pytest.approx(TIMES["stem"])  # no baseline in the cuts
    assert any("no timed baseline for input 'input'" in n for n in profile.notes)


def test_stand_ins_are_named_in_the_notes(tmp_path):
    path = cut_csv(tmp_path)
    lines = [
        line.replace(",ok", ",stand-in: ReLU6 timed as ReLU") if line.startswith("relu,") else line
        for line in path.read_text().splitlines()
    ]
    path.write_text("\n".join(lines) + "\n")
    profile = read(path)
    notes = [n for n in profile.notes if n.startswith("timed with a stand-in")]
    assert notes == ["timed with a stand-in in SAS (ReLU6 timed as ReLU): 1 row(s): relu"]


def test_a_row_reading_a_later_row_is_bad_input(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("layer,inputs,prefix_ms\nconv,input,1.0\nadd,conv relu,2.0\nrelu,conv,1.5\n")
    with pytest.raises(InputError, match=r"line 3: layer 'add' reads 'relu', which comes at or"):
        read(path)


def test_branches_joined_by_a_concat():
    """Inception-like: three branches of the stem, concatenated."""
    graph = {"stem": ("input",), "b1": ("stem",), "b2a": ("stem",), "b2b": ("b2a",),
             "pool": ("stem",), "cat": ("b1", "b2b", "pool")}  # fmt: skip
    times = {"stem": 2.0, "b1": 0.5, "b2a": 0.7, "b2b": 1.2, "pool": 0.2, "cat": 0.4}
    rows = [CutRow("input", (), 0.1, 0.01, is_input=True)]
    for name, reads in graph.items():
        total = 0.1 + sum(times[m] for m in ancestors({k: list(v) for k, v in graph.items()}, name))
        rows.append(CutRow(name, reads, total, 0.01))
    solution = solve(rows)
    assert {k: round(d.value, 9) for k, d in solution.derived.items()} == times
    # t_cat = T(cat) − T(b1) − T(b2b) − T(pool) + 2·T(stem): the stem is in all three branches
    assert dict(solution.derived["cat"].terms) == {"stem": 2, "b1": -1, "b2b": -1, "pool": -1,
                                                   "cat": 1}  # fmt: skip
    assert solution.derived["cat"].noise == pytest.approx(0.01 * math.sqrt(4 + 1 + 1 + 1 + 1))


def test_compare_names_the_cuts_of_a_difference_within_noise(tmp_path):
    from opbench.compare.rows import prefix_noise
    from opbench.compare.verdict import reference_interval

    profile = read(cut_csv(tmp_path, spread=0.2))
    pos = next(i for i, t in enumerate(profile.layers) if t.name == "add")
    why = prefix_noise(profile, [pos], reference_interval(profile.layers[pos]))
    assert why is not None and "within the noise of the cut timings it combines" in why
    assert "'add' (line 8) = T(stem) − T(c3) − T(down) + T(add)" in why


def test_a_difference_taken_from_a_cut_that_fell_is_inflated(tmp_path):
    """On graph cuts, the cut a row subtracts is the one its terms take away, not the row
    before it in the file: down's difference subtracts the stem's cut only."""
    from opbench.compare.rows import prefix_noise
    from opbench.compare.verdict import reference_interval

    times = dict(TIMES, c3=-0.5)  # the cut of c3 is faster than the cut of c2 before it
    profile = read(cut_csv(tmp_path, times=times, spread=0.001))
    at = {t.name: i for i, t in enumerate(profile.layers)}
    assert Flag.NEGATIVE in profile.layers[at["c3"]].flags

    def why(name: str) -> str | None:
        return prefix_noise(profile, [at[name]], reference_interval(profile.layers[at[name]]))

    assert why("down") is None  # the row before it in the file is c3, but its cut is not
    assert "taken from a prefix that fell below the one before it" in (why("add") or "")
    assert "'c3' (line 6)" in (why("add") or "")
