"""`opbench run` under torchrun: each rank runs its share; rank 0 writes the one run.json."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import typer

from opbench import distributed as dist_run
from opbench.cli.console import console
from opbench.cli.run_output import device_peaks, finish, report_plans
from opbench.errors import ExitCode
from opbench.exclusive import HostTurns, lock_path
from opbench.results.io import RUN_FILE, new_run_dir, point_latest, write_run
from opbench.results.model import RunResult

TERMINATED = "terminated by torchrun after another rank failed"


def run_distributed(
    suite,
    options,
    out: Path,
    world: dist_run.World,
    exclusive_timing: bool = False,
    plans_out: Path | None = None,
) -> None:
    """Each rank runs its share; rank 0 merges the ranks' results into one run.json and, with
    --plans-out, writes the plans of every rank's results (the merged run's) to one file."""
    dist_run.raise_on_sigterm()
    dist_run.init(world)
    options = _rank_options(options, world)
    run_dir = dist_run.shared_run_dir(world, lambda: new_run_dir(out, suite.name))
    turns = None
    if exclusive_timing:
        turns = HostTurns(lock_path(run_dir))
        options = replace(options, timing_guard=turns.slot)
    if world.rank == 0:
        mode = "ranks of a host take turns to time" if turns else "ranks time concurrently"
        console.print(f"torchrun: {world.size} ranks ({mode}), run folder {run_dir}")
    env = _rank_env(options.device, world, exclusive_timing)
    run, failure = _run_share(suite, options, run_dir, world, env, turns)

    # No collective from here on: a rank blocked in one (C++) would not see torchrun's SIGTERM
    # when a peer dies, and could not save what was measured. The ranks wait on the shared
    # run folder instead, in Python.
    if world.rank != 0:
        _end_other_rank(run, run_dir, world)
    merged, run_path = _merge_on_rank_zero(suite, options, run, failure, run_dir, world)
    report_plans(merged, bool(options.plans), plans_out)
    finish(merged, run_path)


def _rank_options(options, world: dist_run.World):
    """The run's options for this rank: its own GPU, its shard, its label."""
    import torch

    from opbench.pipeline import gpu_label

    device = options.device
    if device.startswith("cuda"):
        device = f"cuda:{world.local_rank}"
        torch.cuda.set_device(world.local_rank)
    options = replace(options, device=device, shard=world.shard, gpu_label=gpu_label(device))
    return replace(options, gpu_label=f"{options.gpu_label or 'cpu'} (rank {world.rank})")


def _rank_env(device: str, world: dist_run.World, exclusive_timing: bool) -> dict:
    from opbench.measure.env import fingerprint
    from opbench.plugins import provenance as plugin_provenance

    return {
        **fingerprint(device),
        "plugins": plugin_provenance(),
        "rank": world.rank,
        # Whoever watches a run (or a test that stops one rank) finds each rank's process.
        "pid": os.getpid(),
        **dist_run.timing_env(exclusive_timing),
        "peaks": device_peaks(device),
    }


def _run_share(suite, options, run_dir: Path, world: dist_run.World, env: dict,
               turns: HostTurns | None) -> tuple[RunResult | None, str | None]:  # fmt: skip
    """This rank's share of the suite: its run (None if it was stopped before it ended) and
    why it was stopped, if it was."""
    from opbench.pipeline import run_suite

    run = None
    failure = None
    rank_path = dist_run.rank_file(run_dir, world.rank)
    try:
        run = run_suite(
            suite,
            options,
            run_path=rank_path,
            env=env,
            before_end_to_end=lambda _: dist_run.plans_when_layers_done(world, run_dir),
        )
    except dist_run.Terminated:
        failure = TERMINATED
    if turns is not None:
        try:
            run = _after_turns(turns, run, rank_path)
        except dist_run.Terminated:
            failure = failure or TERMINATED
    return run, failure


def _end_other_rank(run: RunResult | None, run_dir: Path, world: dist_run.World) -> None:
    """A rank other than 0 says it is done, waits for rank 0's run.json, and exits."""
    from opbench.report.run_table import failures

    if run is not None:
        dist_run.done_file(run_dir, world.rank).touch()
        try:
            dist_run.wait_for(lambda: (run_dir / RUN_FILE).is_file())
        except dist_run.Terminated:
            pass  # rank 0 is gone or stopping; this rank's file holds its results
    dist_run.shutdown()
    bad = run is None or bool(failures(run))
    raise typer.Exit(ExitCode.LAYER_ERROR if bad else ExitCode.OK)


def _merge_on_rank_zero(suite, options, run: RunResult | None, failure: str | None,
                        run_dir: Path, world: dist_run.World) -> tuple[RunResult, Path]:  # fmt: skip
    """Rank 0 waits for the others, merges every rank's results into the one run.json (the
    shares a rank did not finish marked error) and points `latest` at it."""
    from opbench.backends.registry import all_backends
    from opbench.pipeline import planned_results
    from opbench.pipeline.plan import deal, plan_run, share_walls

    if run is not None and failure is None:
        try:
            dist_run.wait_for(lambda: dist_run.all_finished(run_dir, world.size))
        except dist_run.Terminated:
            failure = TERMINATED
    runs = dist_run.runs_from_disk(run_dir, world.size)
    template = runs.get(0) or run
    if template is None:
        template = dist_run.read_run(dist_run.rank_file(run_dir, 0))
    whole = replace(options, shard=None, gpu_label=None)
    full = plan_run(suite, whole, all_backends())
    owners = deal(full.items, full.end_to_end, world.size, whole.device, whole.costs)
    plan = planned_results(suite, whole)
    merged = dist_run.combine(plan, runs, world.size, template, failure, full.end_to_end, owners)
    merged = replace(
        merged, env={**merged.env, "shares_wall": share_walls(full, owners, runs, whole.costs)}
    )
    _print_share_walls(merged.env["shares_wall"])
    run_path = run_dir / RUN_FILE
    write_run(merged, run_path)
    point_latest(run_dir)
    dist_run.shutdown()
    if failure:
        console.print(
            f"[bold red]a rank failed[/] ({failure}); kept {sum(len(r.layers) for r in runs.values())} "
            f"finished results in {run_path}, the rest marked error"
        )
    return merged, run_path


def _print_share_walls(walls: dict) -> None:
    """Expected against actual wall time per rank: how well the shares were balanced."""
    parts = [
        f"rank {rank}: expected {w['expected_s']:.1f} s, took "
        + (f"{w['actual_s']:.1f} s" if w.get("actual_s") is not None else "?")
        for rank, w in sorted(walls.items(), key=lambda kv: int(kv[0]))
    ]
    console.print("[dim]shares: " + "; ".join(parts) + "[/]")


def _after_turns(turns: HostTurns, run: RunResult | None, rank_path: Path) -> RunResult | None:
    """Remove the lock file and record this rank's turns in its run."""
    try:
        turns.remove()
    except OSError:
        pass  # a stray empty file in the temporary folder is not worth failing the run for
    if run is None:
        return None
    run = replace(run, env={**run.env, dist_run.TURNS_KEY: turns.summary()})
    write_run(run, rank_path)
    return run
