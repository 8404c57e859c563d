"""Times no call can take, in a run.json, are refused where the run is read: a sample of 0
or below would be a speed-up of infinity (a false PASS), NaN or a time past a day nothing
the gate's statistics can hold. One located line, exit code 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from opbench.errors import ExitCode, InputError
from opbench.results.io import read_run, write_run
from opbench.results.model import EndToEnd, LayerResult, RunResult, Status


def _layer(samples, **kw) -> LayerResult:
    return LayerResult(
        model="mlp",
        layer="fc1",
        op="linear",
        backend="triton",
        status=Status.OK,
        dtype="float32",
        input_shape=(2, 4),
        output_shape=(2, 4),
        samples_ms=samples,
        **kw,
    )


def _saved(tmp_path: Path, **run) -> Path:
    path = tmp_path / "run.json"
    write_run(RunResult(suite="s", started_at="t", device="cuda", **run), path)
    return path


@pytest.mark.parametrize(
    ("bad", "problem"),
    [
        (0.0, "a time of zero"),
        (-0.5, "a negative time"),
        (float("nan"), "not a finite number"),
        (float("inf"), "not a finite number"),
        (1e308, "above a day"),
    ],
)
def test_a_sample_no_call_can_take_is_refused(tmp_path, bad, problem):
    path = _saved(tmp_path, layers=(_layer(((0.1, 0.1), (0.1, bad))),))
    with pytest.raises(InputError) as info:
        read_run(path)
    assert info.value.exit_code == ExitCode.BAD_INPUT
    assert info.value.location.file == str(path)
    message = str(info.value)
    assert f"layers[0] (mlp/fc1/triton): samples_ms round 2, sample 2 is {bad!r}" in message
    assert problem in message and "\n" not in message


def test_a_whole_model_sample_and_a_host_time_are_checked_too(tmp_path):
    e2e = EndToEnd(model="mlp", backend="triton", status=Status.OK, samples_ms=((-1.0,),))
    with pytest.raises(InputError, match=r"end_to_end\[0\] \(mlp/triton\): samples_ms round 1"):
        read_run(_saved(tmp_path, end_to_end=(e2e,)))
    host = _layer(((0.1,),), host_ms=0.0)
    with pytest.raises(InputError, match=r"host_ms is 0.0, a time of zero"):
        read_run(_saved(tmp_path, layers=(host,)))


def test_good_samples_read_back(tmp_path):
    path = _saved(tmp_path, layers=(_layer(((1e-4, 86_400_000.0),)),))
    assert read_run(path).layers[0].samples_ms == ((1e-4, 86_400_000.0),)
