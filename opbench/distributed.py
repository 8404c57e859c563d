"""Running one suite across the ranks of `torchrun`.

Every rank takes a deterministic share of the (model, layers, backend) work on its own GPU and
writes its partial run file into the shared run folder after every result. Rank 0 waits for
every rank's final file and writes one run.json. When a rank dies, torchrun stops the
others with SIGTERM: rank 0 then merges what the partial files on disk hold and marks the
unfinished work `error`, so nothing already measured is lost.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path

from opbench.results.io import read_run
from opbench.results.model import EndToEnd, LayerResult, RunResult, Status

# The process group only shares the run folder's path at the start; a long timeout, since
# the ranks also wait at the end of the run for the slowest.
GATHER_TIMEOUT = timedelta(minutes=30)

# run.env keys saying how the ranks timed. A run without TIMING_MODE is a single-process run, or
# a torchrun run from before the key existed, whose ranks timed concurrently.
TIMING_MODE = "timing_mode"
# One rank's turns with --exclusive-timing: {"turns": n, "waited_s": s}; in run.json, per rank.
TURNS_KEY = "timing_turns"
TURNS_BY_RANK = "timing_turns_by_rank"


def timing_env(exclusive: bool) -> dict[str, str]:
    return {TIMING_MODE: "exclusive" if exclusive else "concurrent"}


@dataclass(frozen=True)
class World:
    rank: int
    size: int
    local_rank: int

    @property
    def shard(self) -> tuple[int, int]:
        return (self.rank + 1, self.size)


def current_world() -> World | None:
    """The torchrun world this process belongs to, or None when not under torchrun (or alone)."""
    size = int(os.environ.get("WORLD_SIZE", "1"))
    if size <= 1:
        return None
    return World(int(os.environ.get("RANK", "0")), size, int(os.environ.get("LOCAL_RANK", "0")))


class Terminated(BaseException):
    """SIGTERM arrived (torchrun stopping the ranks after one of them failed)."""


# How long the ranks wait for each other before tearing the process group down.
SHUTDOWN_TIMEOUT = timedelta(seconds=20)


def raise_on_sigterm() -> None:
    def handler(signum, frame):
        raise Terminated()

    signal.signal(signal.SIGTERM, handler)


def init(world: World) -> None:
    import torch.distributed as dist

    if not dist.is_initialized():
        # gloo carries Python objects on any machine; the timed work never crosses ranks.
        dist.init_process_group("gloo", timeout=GATHER_TIMEOUT)


def shutdown() -> None:
    """Tear the process group down before the interpreter exits. Exiting with gloo's threads
    still running aborts the process once in a few runs ("terminate called without an active
    exception", SIGABRT), which torchrun reports as a failed rank."""
    import torch.distributed as dist

    if dist.is_initialized():
        try:
            # Every rank past its last collective before any tears down: a rank that destroys
            # the group while a peer still reads from it aborts (seen under load, rank 1 right
            # after the gather). A dead peer makes this raise after the timeout instead.
            dist.monitored_barrier(timeout=SHUTDOWN_TIMEOUT)
        except Exception:
            pass  # a peer is gone: tear down anyway
        try:
            dist.destroy_process_group()
        except Exception:
            pass  # the peer may be gone already; nothing is left to release


def shared_run_dir(world: World, make_dir) -> Path:
    """Rank 0 creates the run folder; every rank learns its path."""
    import torch.distributed as dist

    box = [str(make_dir()) if world.rank == 0 else None]
    dist.broadcast_object_list(box, src=0)
    return Path(box[0])


def rank_file(run_dir: Path, rank: int) -> Path:
    return run_dir / f"rank-{rank}.json"


def wait_for(done, poll_s: float = 0.25) -> None:
    """Sleep until `done()` holds. In Python, so torchrun's SIGTERM (a peer died) interrupts
    it as Terminated, where a collective would block in C++ and be killed with what it held."""
    import time

    while not done():
        time.sleep(poll_s)


def done_file(run_dir: Path, rank: int) -> Path:
    """Written by a rank once its partial file is final (its turns recorded too)."""
    return run_dir / f"rank-{rank}.done"


def all_finished(run_dir: Path, world_size: int) -> bool:
    """Every other rank has written its final partial file."""
    return all(done_file(run_dir, rank).is_file() for rank in range(1, world_size))


def runs_from_disk(run_dir: Path, world_size: int) -> dict[int, RunResult]:
    runs = {}
    for rank in range(world_size):
        path = rank_file(run_dir, rank)
        if path.is_file():
            try:
                runs[rank] = read_run(path)
            except Exception:
                continue
    return runs


def plans_when_layers_done(world: World, run_dir: Path, poll_s: float = 0.25) -> dict:
    """Every rank's recorded plans, once every rank's file says its layer results are done: a
    whole-model unit builds the groups other ranks timed with the plans they tuned, so nothing
    is tuned twice. Waits by polling the shared run folder, in Python, so torchrun's SIGTERM
    (another rank died) still interrupts it; a collective would block in C++ instead."""
    import time

    from opbench.pipeline.plans import plans_of
    from opbench.pipeline.run import LAYERS_DONE

    plans: dict = {}
    pending = set(range(world.size))
    while pending:
        for rank in sorted(pending):
            try:
                run = read_run(rank_file(run_dir, rank))
            except Exception:
                continue  # not written yet, or being replaced
            if run.env.get(LAYERS_DONE):
                plans.update(plans_of(run.layers))
                pending.discard(rank)
        if pending:
            time.sleep(poll_s)
    return plans


def combine(
    plan: list[LayerResult],
    runs: dict[int, RunResult],
    world_size: int,
    template: RunResult,
    failure: str | None,
    units: list | None = None,
    owners: list[int] | None = None,
) -> RunResult:
    """One run from the ranks' runs; work no rank finished becomes an `error` result, and a
    whole-model unit (pipeline/plan.EndToEndUnit) no rank finished becomes `error` rows.
    `owners`: the rank of each planned result, then of each unit (pipeline/plan.deal)."""
    units = units or []
    if owners is None:
        from opbench.pipeline.plan import expected_cost, shares

        owners = shares([(p.model, p.layer) for p in plan], world_size, map(expected_cost, plan))
    done: dict[tuple[str, tuple[str, ...], str], LayerResult] = {}
    for run in runs.values():
        for result in run.layers:
            done[(result.model, result.members, result.backend)] = result
    why = failure or "did not report"
    layers: list[LayerResult] = []
    missing = 0
    for owner, planned in zip(owners, plan, strict=False):
        result = done.get((planned.model, planned.members, planned.backend))
        if result is None:
            missing += 1
            message = f"rank {owner} did not finish this layer: {why}"
            result = replace(planned, status=Status.ERROR, message=message)
        layers.append(result)
    end_to_end = [e for run in runs.values() for e in run.end_to_end]
    rows = {(e.model, e.backend) for e in end_to_end}
    for owner, unit in zip(owners[len(plan) :], units, strict=True):
        if (unit.model.name, unit.backend) not in rows:
            missing += 1
            end_to_end.extend(lost_end_to_end(unit, owner, why))
    complete = (
        missing == 0 and all(run.complete for run in runs.values()) and len(runs) == world_size
    )
    env = {k: v for k, v in template.env.items() if k != TURNS_KEY}
    env["world_size"] = world_size
    # How long each rank waited for its turns is what --exclusive-timing cost in wall time.
    turns = {str(r): run.env[TURNS_KEY] for r, run in sorted(runs.items()) if TURNS_KEY in run.env}
    if turns:
        env[TURNS_BY_RANK] = turns
    return replace(
        template,
        layers=tuple(layers),
        end_to_end=tuple(end_to_end),
        planned=len(plan),
        complete=complete,
        shard=None,
        env=env,
    )


def lost_end_to_end(unit, owner: int, why: str) -> list[EndToEnd]:
    """The rows of a whole-model unit whose rank did not finish it: `error`, naming the rank."""
    from opbench.pipeline.end_to_end import CUDA_GRAPH, EAGER

    message = f"rank {owner} did not finish this model's forward: {why}"
    return [
        EndToEnd(unit.model.name, unit.backend, Status.ERROR, message=message, mode=mode)
        for mode in (EAGER, CUDA_GRAPH)
    ]
