"""Big reference files: a 100 MB CSV is streamed in seconds; oversized JSON is refused."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from opbench.errors import InputError
from opbench.reference import csvtable, interface
from opbench.reference.registry import read_reference

LAYERS = 200


def _big_csv(path: Path, target_bytes: int) -> int:
    """A DLPy-style export with one row per (layer, run); returns the number of runs."""
    header = (
        "Layer Id,Layer,Type,Kernel Size,Stride,Activation,Output Size,Number of Parameters,"
        "FLOPS(forward pass),run,Time (ms)\n"
    )
    prefixes = [
        f'{i},resnet50_stage{i % 4}_block{i % 7}_conv{i:03d},convo,"(3, 3)","(1, 1)",Relu,'
        f'"(56, 56, 64)","(36864, 64)",115605504,'
        for i in range(LAYERS)
    ]
    size, run = 0, 0
    with path.open("w") as f:
        f.write(header)
        while size < target_bytes:
            times = [f"{0.05 + 0.001 * ((i * 7 + run) % 10):.6f}" for i in range(LAYERS)]
            chunk = "".join(f"{p}{run},{t}\n" for p, t in zip(prefixes, times, strict=True))
            f.write(chunk)
            size += len(chunk)
            run += 1
    return run


def test_100_mb_csv_is_streamed_in_seconds(tmp_path):
    path = tmp_path / "big.csv"
    runs = _big_csv(path, 100 * 1024 * 1024)
    assert path.stat().st_size > 100 * 1024 * 1024
    start = time.process_time()  # CPU time: other processes on a busy machine do not count
    profile = read_reference(path)
    elapsed = time.process_time() - start
    assert profile.format == "sas"
    assert len(profile.layers) == LAYERS
    first = profile.layers[0]
    assert first.name == "resnet50_stage0_block0_conv000"
    assert first.count == runs - 1  # warm-up run dropped
    assert 0.05 <= first.median_ms <= 0.06
    assert elapsed < 12, f"reading 100 MB took {elapsed:.1f} s of CPU"


def test_too_many_distinct_layers_stops_early(tmp_path, monkeypatch):
    monkeypatch.setattr(csvtable, "MAX_LAYERS", 1000)
    path = tmp_path / "rows.csv"
    path.write_text("layer,time_ms\n" + "".join(f"l{i},1\n" for i in range(5000)))
    with pytest.raises(InputError, match="more than 1000 distinct layers") as info:
        read_reference(path)
    assert info.value.location.line == 1002


def test_json_above_the_limit_is_refused(tmp_path, monkeypatch):
    path = tmp_path / "p.json"
    path.write_text(
        json.dumps(
            [{"cat": "Node", "name": f"n{i}_kernel_time", "ts": i, "dur": 1} for i in range(200)]
        )
    )
    monkeypatch.setattr(interface, "MAX_JSON_BYTES", 4096)
    with pytest.raises(InputError, match="JSON profiles above .* are refused"):
        read_reference(path, "onnxruntime")


def test_gzip_bomb_is_refused_after_decompression(tmp_path, monkeypatch):
    import gzip

    path = tmp_path / "p.json.gz"
    path.write_bytes(gzip.compress(b"[" + b" " * 100_000 + b"]"))
    monkeypatch.setattr(interface, "MAX_JSON_BYTES", 50_000)
    assert path.stat().st_size < 50_000
    with pytest.raises(InputError, match="once decompressed"):
        read_reference(path, "onnxruntime")


def test_20_mb_onnxruntime_profile_in_seconds(tmp_path):
    path = tmp_path / "big_ort.json"
    events, ts = [], 0
    args = {
        "op_name": "FusedConv",
        "provider": "CPUExecutionProvider",
        "output_type_shape": [{"float": [4, 64, 56, 56]}],
    }
    with path.open("w") as f:
        f.write("[\n")
        size, runs = 0, 0
        while size < 20 * 1024 * 1024:
            start = ts
            events = []
            for i in range(50):
                events.append(
                    {
                        "cat": "Node",
                        "name": f"/layer{i}/Conv_kernel_time",
                        "ts": ts,
                        "dur": 10 + i,
                        "ph": "X",
                        "args": args,
                    }
                )
                ts += 100
            events.append(
                {
                    "cat": "Session",
                    "name": "model_run",
                    "ts": start,
                    "dur": ts - start,
                    "ph": "X",
                    "args": {},
                }
            )
            chunk = ("" if runs == 0 else ",\n") + ",\n".join(json.dumps(e) for e in events)
            f.write(chunk)
            size += len(chunk)
            runs += 1
        f.write("\n]\n")
    begin = time.process_time()
    profile = read_reference(path)
    elapsed = time.process_time() - begin
    assert profile.format == "onnxruntime" and len(profile.layers) == 50
    assert profile.layers[0].count == runs - 1 and profile.layers[7].median_ms == pytest.approx(
        0.017
    )
    assert elapsed < 6, f"reading 20 MB took {elapsed:.1f} s of CPU"
