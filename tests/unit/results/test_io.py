"""run.json: round trip, NaN kept, atomic writes, the `latest` pointer, bad files."""

from __future__ import annotations

import json
import math
import os
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import pytest

from opbench.errors import ExitCode, InputError
from opbench.results import io
from opbench.results.io import (
    find_latest_run,
    new_run_dir,
    point_latest,
    read_run,
    resolve_latest,
    run_to_dict,
    utc_stamp,
    write_json_atomic,
    write_run,
)
from opbench.results.model import (
    SCHEMA_VERSION,
    Correctness,
    EndToEnd,
    LayerResult,
    RunResult,
    Status,
    crashed_results,
)


def make_run(**overrides) -> RunResult:
    ok = LayerResult(
        model="mlp[batch=8]",
        layer="fc1",
        op="linear",
        backend="triton",
        status=Status.OK,
        dtype="float16",
        input_shape=(8, 512, 768),
        output_shape=(8, 512, 3072),
        flops=123456789,
        bytes=98765,
        quant="int8",
        samples_ms=((0.5, 0.25, 0.125), (0.75,)),
        timer="cuda-events",
        interpreted=False,
        correctness=Correctness(
            rel_l2=1.5e-3, max_abs=0.03125, nonfinite=0, tolerance=5e-2, reference="float32-cuda"
        ),
        reference_name="FC_1",
        target_speedup=2.0,
        regression_threshold=0.1,
        device="cuda",
        gpu="H200 #0",
        tuning_s=3.5,
        note="int8 W8A8",
    )
    fused = LayerResult(
        model="cnn",
        layer="conv1",
        op="conv2d+batchnorm2d+relu",
        backend="triton",
        status=Status.OK,
        dtype="float32",
        input_shape=(2, 3, 8, 8),
        output_shape=(2, 4, 8, 8),
        covers=("conv1", "bn1", "relu1"),
        samples_ms=((1.0,),),
        timer="perf_counter",
        interpreted=True,
        correctness=Correctness(1e-7, 1e-6, 0, 1e-4),
    )
    unsupported = LayerResult(
        model="cnn",
        layer="pool",
        op="maxpool2d",
        backend="triton",
        status=Status.UNSUPPORTED,
        dtype="float32",
        input_shape=(2, 4, 8, 8),
        output_shape=(2, 4, 4, 4),
        message="no Triton kernel for op 'maxpool2d'",
    )
    run = RunResult(
        suite="demo",
        started_at="2026-11-22T10:00:00+00:00",
        device="cuda",
        env={
            "gpu_name": "NVIDIA H200",
            "clocks_start": {"sm_mhz": 1980.0},
            "argv": ["run", "x.yaml"],
        },
        suite_spec={
            "name": "demo",
            "models": [{"name": "mlp", "layers": [{"name": "fc1", "input_shape": [8, 512]}]}],
        },
        suite_source="suites/demo.yaml",
        layers=(ok, fused, unsupported),
        end_to_end=(
            EndToEnd("cnn", "torch", Status.OK, ((2.0, 2.5),), "perf_counter", False),
            EndToEnd("cnn", "triton", Status.UNSUPPORTED, message="not every layer was built"),
        ),
        finished_at="2026-11-22T10:05:00+00:00",
        complete=True,
        shard=(2, 4),
        planned=3,
    )
    return RunResult(**{**run.__dict__, **overrides})


def test_round_trip_is_exact(tmp_path: Path) -> None:
    run = make_run()
    path = tmp_path / "run.json"
    write_run(run, path)
    back = read_run(path)
    assert back == run
    assert back.layers[0].stats.median == run.layers[0].stats.median
    assert back.find("cnn", "bn1", "triton") is back.layers[1], (
        "fused results answer for every layer they cover"
    )
    assert isinstance(back.shard, tuple) and isinstance(back.layers[0].input_shape, tuple)


def test_the_file_is_plain_json_with_a_schema_version(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    write_run(make_run(), path)
    data = json.loads(path.read_text())
    assert data["schema_version"] == SCHEMA_VERSION
    assert data["layers"][0]["samples_ms"] == [[0.5, 0.25, 0.125], [0.75]], (
        "raw samples, grouped by round"
    )


def test_nan_and_inf_survive(tmp_path: Path) -> None:
    broken = LayerResult(
        model="m",
        layer="l",
        op="relu",
        backend="triton",
        status=Status.OK,
        dtype="float16",
        input_shape=(2,),
        output_shape=(2,),
        samples_ms=((1.0,),),
        correctness=Correctness(
            rel_l2=float("nan"), max_abs=float("inf"), nonfinite=2, tolerance=5e-3
        ),
    )
    path = tmp_path / "run.json"
    write_run(make_run(layers=(broken,)), path)
    text = path.read_text()
    json.loads(text)  # strict JSON: no bare NaN/Infinity tokens
    assert "NaN" not in text and "Infinity" not in text
    corr = read_run(path).layers[0].correctness
    assert math.isnan(corr.rel_l2)
    assert corr.max_abs == math.inf
    assert corr.nonfinite == 2 and not corr.passed


def test_read_run_accepts_the_run_folder(tmp_path: Path) -> None:
    write_run(make_run(), tmp_path / "run.json")
    assert read_run(tmp_path) == make_run()


def test_atomic_write_leaves_no_temporary_files(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "run.json"
    for i in range(3):
        write_run(make_run(planned=i), path)
    assert sorted(os.listdir(path.parent)) == ["run.json"]
    assert read_run(path).planned == 2


def test_failed_write_keeps_the_previous_file(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    write_run(make_run(), path)
    before = path.read_bytes()
    with pytest.raises(TypeError):
        write_json_atomic(path, {"not json": object()})
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["run.json"]


def test_run_to_dict_cleans_nonfinite_values() -> None:
    data = run_to_dict(make_run(env={"x": float("nan"), "y": [float("-inf")]}))
    assert data["env"] == {"x": "nan", "y": ["-inf"]}


# ---- run folders and `latest` ------------------------------------------------------------------


def test_new_run_dir_is_unique(tmp_path: Path) -> None:
    a = new_run_dir(tmp_path, "demo", "20261122T100000Z")
    b = new_run_dir(tmp_path, "demo", "20261122T100000Z")
    assert a == tmp_path / "demo" / "20261122T100000Z"
    assert b == tmp_path / "demo" / "20261122T100000Z-2"
    assert a.is_dir() and b.is_dir()


def test_utc_stamp_format() -> None:
    assert utc_stamp(datetime(2026, 11, 22, 9, 8, 7, tzinfo=timezone.utc)) == "20261122T090807Z"


def test_latest_pointer_resolves(tmp_path: Path) -> None:
    first = new_run_dir(tmp_path, "demo", "20261122T100000Z")
    write_run(make_run(), first / "run.json")
    point_latest(first)
    assert resolve_latest(tmp_path / "demo") == first.resolve()
    second = new_run_dir(tmp_path, "demo", "20261122T110000Z")
    write_run(make_run(planned=7), second / "run.json")
    point_latest(second)
    latest = resolve_latest(tmp_path / "demo")
    assert latest == second.resolve()
    assert read_run(tmp_path / "demo" / "latest").planned == 7
    assert find_latest_run(tmp_path, "demo") == second.resolve()
    assert not (tmp_path / "demo" / ".latest.tmp").exists()


def test_latest_falls_back_to_a_text_file_where_links_fail(tmp_path: Path, monkeypatch) -> None:
    def no_links(self, *args, **kwargs):
        raise OSError("symlinks not supported here")

    monkeypatch.setattr(Path, "symlink_to", no_links)
    run_dir = new_run_dir(tmp_path, "demo", "20261122T100000Z")
    write_run(make_run(), run_dir / "run.json")
    point_latest(run_dir)
    link = tmp_path / "demo" / io.LATEST
    assert link.is_file() and not link.is_symlink()
    assert link.read_text().strip() == run_dir.name
    assert resolve_latest(tmp_path / "demo") == run_dir


def test_find_latest_run_across_suites(tmp_path: Path) -> None:
    assert find_latest_run(tmp_path) is None
    assert find_latest_run(tmp_path / "missing") is None
    older = new_run_dir(tmp_path, "a", "20261122T100000Z")
    write_run(make_run(), older / "run.json")
    point_latest(older)
    newer = new_run_dir(tmp_path, "b", "20261122T100000Z")
    write_run(make_run(), newer / "run.json")
    point_latest(newer)
    os.utime(older / "run.json", (1_000_000, 1_000_000))
    assert find_latest_run(tmp_path) == newer.resolve()
    assert resolve_latest(tmp_path / "nothing-here") is None


# ---- bad run files -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content, message",
    [
        (b'{"schema_version": 1, "suite": ', "not valid JSON"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe", "UTF-8"),
        (b"[1, 2, 3]", "JSON object"),
        (b'{"schema_version": 99, "suite": "x"}', "schema_version 99"),
        (b'{"suite": "x"}', "schema_version"),
        (b'{"schema_version": 1}', "not an opbench run"),
        (
            b'{"schema_version": 1, "suite": "x", "started_at": "t", "device": "cpu", "layers": [1]}',
            "not an opbench run",
        ),
        (
            b'{"schema_version": 1, "suite": "x", "started_at": "t", "device": "cpu", "layers": [{"model": "m"}]}',
            "not an opbench run",
        ),
        (
            b'{"schema_version": 1, "suite": "x", "started_at": "t", "device": "cpu", "bogus_field": 1, '
            b'"layers": [{"model": "m", "layer": "l", "op": "relu", "backend": "torch", "status": "ok", '
            b'"dtype": "float32", "input_shape": [2], "output_shape": [2], "correctness": "oops"}]}',
            "not an opbench run",
        ),
    ],
    ids=[
        "truncated",
        "binary",
        "not-an-object",
        "future-schema",
        "no-schema",
        "missing-fields",
        "layer-not-an-object",
        "layer-missing-fields",
        "correctness-not-an-object",
    ],
)
def test_bad_run_files_raise_input_error(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "run.json"
    path.write_bytes(content)
    with pytest.raises(InputError) as info:
        read_run(path)
    assert message in str(info.value)
    assert info.value.location.file == str(path)
    assert info.value.exit_code == ExitCode.BAD_INPUT


def test_truncated_json_reports_its_line(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    path.write_text('{\n "schema_version": 1,\n "suite": \n')
    with pytest.raises(InputError) as info:
        read_run(path)
    assert info.value.location.line == 4


def test_missing_run_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such run file"):
        read_run(tmp_path / "nope.json")
    with pytest.raises(InputError, match="no such run file"):
        read_run(tmp_path)  # a folder without run.json


def test_unknown_fields_are_ignored_for_forward_compatibility(tmp_path: Path) -> None:
    data = run_to_dict(make_run())
    data["future"] = {"x": 1}
    data["layers"][0]["future_metric"] = 3.0
    path = tmp_path / "run.json"
    path.write_text(json.dumps(data))
    assert read_run(path) == make_run()


def test_run_writer_rewrites_after_each_result_and_reads_back_exactly(tmp_path: Path) -> None:
    """The pipeline rewrites run.json after every result through one RunWriter, which encodes
    each result once: every intermediate file must read back as the run it was given, with
    one line per result, and the last equal to what write_run writes from scratch."""
    from dataclasses import replace

    from opbench.results.io import RunWriter

    full = make_run()
    base = full.layers[0]
    layers = tuple(
        replace(base, layer=f"fc{i}", samples_ms=((0.1 * (i + 1), 0.3), (1 / 3,))) for i in range(4)
    )
    path = tmp_path / "run.json"
    writer = RunWriter(path)
    for k in range(len(layers) + 1):
        run = replace(full, layers=layers[:k])
        writer.write(run)
        assert read_run(path) == run
    text = path.read_text()
    lines = [line for line in text.splitlines() if line.startswith('  {"model"')]
    assert len(lines) == len(layers) + len(full.end_to_end)
    fresh = tmp_path / "fresh.json"
    write_run(replace(full, layers=layers), fresh)
    assert json.loads(fresh.read_text()) == json.loads(text)


# ---- the outcome of the correctness check, written out -------------------------------------------


def test_correctness_passed_is_written_for_scripts(tmp_path: Path) -> None:
    good = Correctness(rel_l2=1e-7, max_abs=1e-6, nonfinite=0, tolerance=1e-4)
    bad = Correctness(rel_l2=0.3, max_abs=1.0, nonfinite=0, tolerance=1e-4)
    unwritten = Correctness(rel_l2=0.0, max_abs=0.0, nonfinite=8, tolerance=1e-4, unwritten=8)
    base = make_run().layers[0]
    layers = tuple(
        replace(base, layer=f"l{i}", correctness=c) for i, c in enumerate((good, bad, unwritten))
    )
    run = make_run(layers=layers)
    path = tmp_path / "run.json"
    write_run(run, path)
    raw = json.loads(path.read_text())["layers"]
    # issue 40: a script reading `status` alone never takes a wrong result for a good one
    assert [r["status"] for r in raw] == ["ok", "wrong", "wrong"]
    assert [r["correctness"]["passed"] for r in raw] == [True, False, False]
    assert run_to_dict(run)["layers"][1]["correctness"]["passed"] is False
    back = read_run(path)  # `passed` is derived, never trusted from the file
    assert [r.correct for r in back.layers] == [True, False, False]
    assert [r.outcome for r in back.layers] == ["ok", "wrong", "wrong"]


def test_an_older_run_json_with_ok_and_a_failed_check_reads_as_wrong(tmp_path: Path) -> None:
    """Files written before "wrong" existed said "ok" for a result that failed its check."""
    bad = Correctness(rel_l2=0.3, max_abs=1.0, nonfinite=0, tolerance=1e-4)
    path = tmp_path / "run.json"
    write_run(make_run(layers=(replace(make_run().layers[0], correctness=bad),)), path)
    data = json.loads(path.read_text())
    data["layers"][0]["status"] = "ok"  # as an older opbench wrote it
    path.write_text(json.dumps(data))
    (result,) = read_run(path).layers
    assert result.status == Status.WRONG and result.ran and not result.correct
    assert crashed_results(read_run(path)) == [result]


def test_a_whole_model_run_whose_outputs_are_wrong_is_stored_and_printed_as_wrong(tmp_path):
    from rich.console import Console

    from opbench.report.run_table import end_to_end_table

    bad = Correctness(rel_l2=0.2, max_abs=1.0, nonfinite=0, tolerance=1e-4)
    e2e = EndToEnd("m", "triton", Status.OK, samples_ms=((1.1, 1.2, 1.0),), correctness=bad)
    assert e2e.status == Status.WRONG and e2e.ran and not e2e.correct
    path = tmp_path / "run.json"
    write_run(make_run(end_to_end=(e2e,)), path)
    assert json.loads(path.read_text())["end_to_end"][0]["status"] == "wrong"
    (back,) = read_run(path).end_to_end
    assert back.status == Status.WRONG
    console = Console(width=200, record=True)
    console.print(end_to_end_table(read_run(path)))
    row = next(line for line in console.export_text().splitlines() if "triton" in line)
    assert "wrong" in row and " ok" not in row
