"""Sharding, merging and torchrun on the CPU (gloo), with a tiny torch-only suite."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from opbench.cli.main import app
from opbench.results.io import read_run

SUITE = """\
name: tiny
defaults: {backends: [torch], timing: {warmup_ms: 0, rep_ms: 1, rounds: 2}}
models:
  - name: m
    input: [8]
    batch: 2
    layers:
      - {name: a, op: relu}
      - {name: b, op: linear, out_features: 4}
      - {name: c, op: softmax}
      - {name: d, op: gelu}
      - {name: e, op: silu}
"""
OTHER = SUITE.replace("name: tiny", "name: other")

runner = CliRunner()


def keys(run) -> set[tuple]:
    return {(r.model, r.members, r.backend) for r in run.layers}


def whole_model_rows(run) -> list[tuple]:
    return sorted((e.model, e.backend, e.mode, e.status) for e in run.end_to_end)


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(SUITE)
    return path


def run_cli(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.output


def shard_run(suite: Path, out: Path, share: str) -> Path:
    code, output = run_cli("run", str(suite), "--out", str(out), "--shard", share)
    assert code == 0, output
    return out / "tiny" / "latest"


def test_shards_merge_into_the_full_run(suite, tmp_path):
    code, _ = run_cli("run", str(suite), "--out", str(tmp_path / "full"))
    assert code == 0
    full = read_run(tmp_path / "full" / "tiny" / "latest")
    parts = [shard_run(suite, tmp_path / f"s{k}", f"{k}/3") for k in (1, 2, 3)]
    shares = [read_run(p) for p in parts]
    assert [s.shard for s in shares] == [(1, 3), (2, 3), (3, 3)]
    assert not set.intersection(*(keys(s) for s in shares))
    code, output = run_cli("merge", *map(str, parts), "--out", str(tmp_path / "merged"))
    assert code == 0, output
    merged = read_run(tmp_path / "merged" / "tiny" / "latest")
    assert merged.complete and keys(merged) == keys(full)
    # The whole-model rows survive sharding: one share owned the forward and built the groups
    # the others timed.
    assert whole_model_rows(full) == [("m", "torch", "cuda_graph", "unsupported"),
                                      ("m", "torch", "eager", "ok")]  # fmt: skip
    assert whole_model_rows(merged) == whole_model_rows(full)
    assert sum(len(s.end_to_end) for s in shares) == 2
    # Results come back in suite order, whichever share ran them.
    assert [r.layer for r in merged.layers] == ["a", "b", "c", "d", "e"]


def test_merge_refuses_missing_overlapping_and_foreign_runs(suite, tmp_path):
    one = shard_run(suite, tmp_path / "s1", "1/2")
    two = shard_run(suite, tmp_path / "s2", "2/2")
    code, output = run_cli("merge", str(one), "--out", str(tmp_path / "m"))
    assert code == 2 and "missing share(s) 2/2" in output
    code, output = run_cli("merge", str(one), str(one), "--out", str(tmp_path / "m"))
    assert code == 2 and "appears twice" in output
    code, output = run_cli("merge", str(one), "--allow-partial", "--out", str(tmp_path / "m"))
    assert code == 0 and "incomplete" in output
    assert not read_run(tmp_path / "m" / "tiny" / "latest").complete

    other_suite = tmp_path / "other.yaml"
    other_suite.write_text(OTHER)
    code, _ = run_cli("run", str(other_suite), "--out", str(tmp_path / "o"), "--shard", "2/2")
    assert code == 0
    code, output = run_cli(
        "merge", str(one), str(tmp_path / "o" / "other" / "latest"), "--out", str(tmp_path / "m")
    )
    assert code == 2 and "suite" in output

    run_json = two / "run.json"
    data = json.loads(run_json.read_text())
    data["env"]["torch"] = "9.9.9"
    run_json.write_text(json.dumps(data))
    code, output = run_cli("merge", str(one), str(two), "--out", str(tmp_path / "m"))
    assert code == 2 and "environment differs" in output and "torch" in output


def test_merge_refuses_shares_of_runs_with_other_rounds(suite, tmp_path):
    one = shard_run(suite, tmp_path / "s1", "1/2")
    code, output = run_cli(
        "run", str(suite), "--out", str(tmp_path / "s2"), "--shard", "2/2", "--rounds", "3"
    )
    assert code == 0, output
    two = tmp_path / "s2" / "tiny" / "latest"
    code, output = run_cli("merge", str(one), str(two), "--out", str(tmp_path / "m"))
    assert code == 2, output
    assert "options.rounds is 3 here and None there" in " ".join(output.split())
    assert not (tmp_path / "m").exists()


def test_bad_shard_text_is_bad_input(suite, tmp_path):
    for text in ("3/2", "0/2", "a/b", "2"):
        code, output = run_cli("run", str(suite), "--out", str(tmp_path), "--shard", text)
        assert code == 2, (text, output)
        assert "--shard" in output


def torchrun(
    suite: Path, out: Path, *args: str, nproc: int = 2, **env: str
) -> subprocess.CompletedProcess:
    environment = {**os.environ, "OMP_NUM_THREADS": "1", **env}
    environment.pop("TRITON_INTERPRET", None)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc-per-node={nproc}",
            "-m",
            "opbench",
            "run",
            str(suite),
            "--out",
            str(out),
            "--device",
            "cpu",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=180,
        env=environment,
    )


def test_torchrun_two_ranks_write_one_complete_run(suite, tmp_path):
    code, _ = run_cli("run", str(suite), "--out", str(tmp_path / "single"))
    assert code == 0
    single = read_run(tmp_path / "single" / "tiny" / "latest")
    proc = torchrun(suite, tmp_path / "dist")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    run = read_run(tmp_path / "dist" / "tiny" / "latest")
    assert run.complete and keys(run) == keys(single)
    assert whole_model_rows(run) == whole_model_rows(single) and run.end_to_end
    assert all(e.correctness is not None and e.correctness.passed
               for e in run.end_to_end if e.status == "ok")  # fmt: skip
    # Shares are dealt by expected cost: the forward (a unit of its own) outweighs a tiny layer.
    ran = {r.gpu for r in run.layers} | {e.gpu for e in run.end_to_end}
    assert ran == {"cpu (rank 0)", "cpu (rank 1)"}
    assert len({e.gpu for e in run.end_to_end}) == 1
    walls = run.env["shares_wall"]
    assert set(walls) == {"0", "1"} and all(w["actual_s"] is not None for w in walls.values())
    assert run.env["timing_mode"] == "concurrent" and "timing_turns_by_rank" not in run.env
    assert "timing_mode" not in single.env


def test_torchrun_exclusive_timing_takes_turns_and_records_it(suite, tmp_path):
    locks = tmp_path / "tmp"
    locks.mkdir()
    proc = torchrun(suite, tmp_path / "dist", "--exclusive-timing", TMPDIR=str(locks))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "take turns" in proc.stdout
    run = read_run(tmp_path / "dist" / "tiny" / "latest")
    assert run.complete and len(run.layers) == 5
    assert all(r.status == "ok" and r.stats is not None for r in run.layers)
    assert run.env["timing_mode"] == "exclusive" and run.env["world_size"] == 2
    # Every timed loop took a turn: each layer result, and the forward's eager row (no CUDA
    # graph on the CPU), on the rank that timed it.
    timed: dict[str, int] = {}
    for row in [*run.layers, *(e for e in run.end_to_end if e.status == "ok")]:
        rank = row.gpu.removeprefix("cpu (rank ").removesuffix(")")
        timed[rank] = timed.get(rank, 0) + 1
    turns = run.env["timing_turns_by_rank"]
    assert {rank: t["turns"] for rank, t in turns.items()} == timed
    assert sum(timed.values()) == 6
    assert all(t["waited_s"] >= 0 for t in turns.values())
    # The lock lived in the host's temporary folder, not the run folder, and left with the run.
    assert not list(locks.glob("opbench-timing-*"))
    assert not list((tmp_path / "dist").rglob("*.lock"))


def test_exclusive_timing_in_one_process_is_a_note_not_an_error(suite, tmp_path):
    code, output = run_cli("run", str(suite), "--out", str(tmp_path), "--exclusive-timing")
    assert code == 0, output
    assert "no effect outside torchrun" in output
    run = read_run(tmp_path / "tiny" / "latest")
    assert run.complete and "timing_mode" not in run.env


SLOW = SUITE.replace("rep_ms: 1, rounds: 2", "rep_ms: 400, rounds: 2")


def test_a_rank_killed_while_timing_loses_nothing_already_measured(tmp_path):
    """SIGKILL one rank by its process id once it has finished a result and is timing the
    next: the merged run keeps every finished result, marks the lost rank's unfinished work
    `error` with its rank (its whole-model rows too, if it owned the forward), is incomplete,
    and the exit code says so."""
    import signal
    import time

    suite = tmp_path / "tiny.yaml"
    suite.write_text(SLOW)
    out = tmp_path / "dist"
    environment = {**os.environ, "OMP_NUM_THREADS": "1"}
    environment.pop("TRITON_INTERPRET", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
         "-m", "opbench", "run", str(suite), "--out", str(out), "--device", "cpu"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=environment,
    )  # fmt: skip
    killed, deadline = None, time.monotonic() + 120
    while killed is None and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
        for path in out.glob("tiny/*/rank-*.json"):
            try:
                partial = read_run(path)
            except Exception:
                continue  # being written
            if partial.layers and not partial.complete:
                os.kill(partial.env["pid"], signal.SIGKILL)
                killed = partial.env["rank"]
                break
    output, _ = proc.communicate(timeout=120)
    assert killed is not None, output[-3000:]
    assert proc.returncode != 0
    run = read_run(out / "tiny" / "latest")
    assert not run.complete
    assert len(run.layers) == 5  # every planned result is present, finished or marked error
    lost = f"cpu (rank {killed})"
    kept = [r for r in run.layers if r.status == "ok"]
    assert any(r.gpu == lost for r in kept), "the lost rank's finished results are kept"
    for result in run.layers:
        assert result.status in ("ok", "error")
        if result.status == "ok":
            assert result.stats is not None
        else:
            assert "did not finish" in result.message and "rank" in result.message
    assert any(f"rank {killed} did not finish" in (r.message or "") for r in run.layers)
    assert len(run.end_to_end) == 2  # the forward's rows: timed, or an error naming the rank
    for row in run.end_to_end:
        assert row.status == "ok" or "did not finish this model" in row.message


TRITON_SUITE = """\
name: tuned
defaults: {backends: [triton], dtype: float16, timing: {warmup_ms: 0, rep_ms: 1, rounds: 1}}
models:
  - name: m
    input: [16]
    batch: 2
    layers:
      - {name: a, op: linear, out_features: 16}
      - {name: b, op: linear, out_features: 16, quant: int8}
      - {name: c, op: linear, out_features: 32, quant: int8-weight}
      - {name: d, op: linear, out_features: 16, quant: fp8}
"""


def test_torchrun_plans_out_merges_every_ranks_plans(tmp_path):
    """--plans-out under torchrun: rank 0 writes one file with the plans of every rank's
    results (each rank built only its share of the layers)."""
    suite = tmp_path / "tuned.yaml"
    suite.write_text(TRITON_SUITE)
    plans = tmp_path / "plans.json"
    proc = torchrun(suite, tmp_path / "dist", "--plans-out", str(plans))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    run = read_run(tmp_path / "dist" / "tuned" / "latest")
    by_rank: dict[str, set[str]] = {}
    for result in run.layers:
        by_rank.setdefault(result.gpu, set()).add(result.layer)
    ran = set(by_rank) | {e.gpu for e in run.end_to_end}
    assert ran == {"cpu (rank 0)", "cpu (rank 1)"}
    written = json.loads(plans.read_text())
    layers = {entry["layer"] for entry in written["plans"]}
    assert layers == {"a", "b", "c", "d"}
    assert all(share <= layers for share in by_rank.values())


def test_two_torchrun_nodes_with_c10d_rendezvous_merge_into_one_run(suite, tmp_path):
    """Two torchrun "nodes" (one process each) on this machine, rendezvous by c10d on
    localhost, writing to one run folder (a shared filesystem on a real cluster): one
    complete run.json, as one node with two ranks writes."""
    import socket

    with socket.socket() as sock:  # a free port for the rendezvous
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    environment = {**os.environ, "OMP_NUM_THREADS": "1"}
    environment.pop("TRITON_INTERPRET", None)
    out = tmp_path / "dist"
    nodes = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--nnodes=2",
                "--nproc-per-node=1",
                "--rdzv-backend=c10d",
                f"--rdzv-endpoint=127.0.0.1:{port}",
                "--rdzv-id=opbench-test",
                "-m",
                "opbench",
                "run",
                str(suite),
                "--out",
                str(out),
                "--device",
                "cpu",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=environment,
        )  # fmt: skip
        for _ in range(2)
    ]
    logs = [node.communicate(timeout=180)[0] for node in nodes]
    assert all(node.returncode == 0 for node in nodes), "\n".join(log[-2000:] for log in logs)
    run = read_run(out / "tiny" / "latest")
    assert run.complete and run.env["world_size"] == 2 and len(run.layers) == 5
    assert {e.gpu for e in run.end_to_end} <= {"cpu (rank 0)", "cpu (rank 1)"}
    assert whole_model_rows(run) == [("m", "torch", "cuda_graph", "unsupported"),
                                     ("m", "torch", "eager", "ok")]  # fmt: skip
